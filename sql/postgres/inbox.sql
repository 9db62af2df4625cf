-- liboutbox: the consumer inbox for PostgreSQL (relation app.outbox_inbox, the
-- default name beside app.outbox). Optional: a consumer that records the events
-- it handled (outbox_inbox_accept) needs it; the relay does not. Safe to run again.
-- `outbox schema print --store postgres --relation NAME --inbox` writes the same
-- DDL for another name; docs/postgres.md explains how the inbox is used.
CREATE SCHEMA IF NOT EXISTS app;

-- One row per event a consumer handled, written in the consumer's own
-- transaction together with its side effects. The primary key is what makes a
-- redelivered event recognisable: of two transactions recording one pair, the
-- second waits for the first and then finds the row.
CREATE TABLE IF NOT EXISTS app.outbox_inbox (
    consumer TEXT NOT NULL,          -- the consumer's name, chosen by the application
    event_id TEXT NOT NULL,          -- the event's id (CloudEvents id) as received
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Records by age, for the purge (outbox_inbox_purge). Purges usually cover every
-- consumer at once, which an index led by consumer could not serve.
CREATE INDEX IF NOT EXISTS outbox_inbox_received_idx ON app.outbox_inbox (received_at);
