-- liboutbox: canonical outbox table for SQLite (relation "outbox").
--
-- The same columns as the PostgreSQL table in SPEC section 2, in SQLite's types:
-- UUIDs are 36-character TEXT, timestamps are INTEGER microseconds since the Unix
-- epoch (UTC), the payload is TEXT holding JSON. Run the database in WAL mode (the
-- driver switches it on at open). `outbox schema apply --uri sqlite:///path.db`
-- creates exactly this, idempotently; `outbox schema ddl` prints it for another
-- relation name. docs/schema.md explains every column and index.
CREATE TABLE IF NOT EXISTS "outbox" (
    id             TEXT NOT NULL PRIMARY KEY,
    outbox_route   TEXT NOT NULL,
    event_id       TEXT NOT NULL,
    event_type     TEXT NOT NULL,
    tenant_id      TEXT,
    execution_id   TEXT,
    correlation_id TEXT,
    causation_id   TEXT,
    occurred_at    INTEGER NOT NULL,
    payload        TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    published_at   INTEGER,
    processing_at  INTEGER,
    last_error     TEXT,
    attempts       INTEGER NOT NULL DEFAULT 0,
    available_at   INTEGER,
    ordering_key   TEXT,
    UNIQUE (outbox_route, event_id)
);

-- The claim index of SPEC section 2: route, status and ripeness.
CREATE INDEX IF NOT EXISTS "outbox_claim_idx" ON "outbox" (outbox_route, status, available_at, created_at);
-- Pending rows already in claim order: a claim reads its batch off the front of
-- this index instead of sorting the whole backlog on every call.
CREATE INDEX IF NOT EXISTS "outbox_order_idx" ON "outbox" (outbox_route, status, created_at, id);
-- Per-key FIFO: the rows that block a key (in flight, or pending but not yet
-- due) are found by key and range, without walking the key's backlog.
CREATE INDEX IF NOT EXISTS "outbox_key_idx" ON "outbox" (outbox_route, ordering_key, status, available_at);
-- Expired leases, and the newest fence of a route.
CREATE INDEX IF NOT EXISTS "outbox_processing_idx" ON "outbox" (outbox_route, status, processing_at);
