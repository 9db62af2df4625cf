-- liboutbox: the consumer inbox for SQLite (relation "outbox_inbox", the default
-- name beside "outbox"). Optional: a consumer that records the events it handled
-- (outbox_inbox_accept) needs it; the relay does not. Safe to run again.
-- `outbox schema apply --store sqlite:///path.db --inbox` creates exactly this;
-- `outbox schema print --store sqlite --inbox --inbox-relation NAME` prints it
-- for another name. docs/inbox.md explains how it is used.

-- One row per event a consumer handled, written in the consumer's own
-- transaction with its side effects. The primary key makes a redelivered event
-- recognisable: INSERT OR IGNORE of a recorded pair changes nothing.
-- received_at is in microseconds since the Unix epoch (UTC).
CREATE TABLE IF NOT EXISTS "outbox_inbox" (
    consumer    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- Records by age, for the purge, which usually covers every consumer at once.
CREATE INDEX IF NOT EXISTS "outbox_inbox_received_idx" ON "outbox_inbox" (received_at);
