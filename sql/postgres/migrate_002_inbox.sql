-- liboutbox migration 002: installations made before the inbox existed gain the
-- consumer inbox table (relation app.outbox_inbox, beside app.outbox). Nothing
-- else changes: the outbox table and the relay do not use it. Safe to run again:
-- every step is IF NOT EXISTS. Edit app. for another schema. The same DDL, with
-- its comments, is inbox.sql.
--
-- The table is new and empty, so its index builds at once and blocks nothing.
CREATE TABLE IF NOT EXISTS app.outbox_inbox (
    consumer TEXT NOT NULL,
    event_id TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS outbox_inbox_received_idx ON app.outbox_inbox (received_at);
