-- liboutbox: canonical outbox table for PostgreSQL (relation app.outbox).
--
-- The table is SPEC section 2's, statement for statement; the indexes after it are
-- what the relay needs to claim fast from a large backlog. For another schema or
-- table name, `outbox schema print --store postgres --relation NAME` writes the
-- same DDL; `outbox schema apply` runs it (idempotently, adding what is missing).
-- An existing table from before attempts/available_at/ordering_key: see
-- migrate_001_attempts_available_ordering.sql. Optional columns: optional.sql.
-- The consumer inbox (outbox_inbox_accept): inbox.sql, or migrate_002_inbox.sql.
-- docs/schema.md explains every column and index.
CREATE SCHEMA IF NOT EXISTS app;

CREATE TABLE app.outbox (
    id UUID PRIMARY KEY,             -- UUIDv7 minted by the library (time-ordered)
    outbox_route TEXT NOT NULL,      -- logical stream; one relay loop per route
    event_id UUID NOT NULL,          -- the producer's id; UNIQUE per route
    event_type TEXT NOT NULL,
    tenant_id UUID, execution_id UUID, correlation_id UUID, causation_id UUID,
    occurred_at TIMESTAMPTZ NOT NULL,
    payload JSONB NOT NULL,
    status TEXT NOT NULL,            -- pending | processing | published | dead
    created_at TIMESTAMPTZ NOT NULL, -- one value per staging batch
    published_at TIMESTAMPTZ,
    processing_at TIMESTAMPTZ,       -- set by claim; also the claim's fence on SQL stores
    last_error TEXT,
    attempts INT NOT NULL DEFAULT 0, -- delivery attempts started (incremented by claim)
    available_at TIMESTAMPTZ,        -- NULL = claimable now; else not before this instant
    ordering_key TEXT,               -- NULL = no ordering; else per-key FIFO
    UNIQUE (outbox_route, event_id)
);
CREATE INDEX outbox_claim_idx ON app.outbox (outbox_route, status, available_at, created_at);

-- Pending rows already in claim order: a claim reads its batch off the front of
-- this index. Without it (and the key index) the driver claims through
-- outbox_claim_idx, still in linear time but with a sort of each staging call
-- and a second pass for the per-key check (docs/postgres.md).
CREATE INDEX outbox_pending_idx ON app.outbox (outbox_route, created_at, id)
    WHERE status = 'pending';

-- Per-key FIFO: a key's unfinished rows in claim order, so the rows ahead of a
-- claimed row are found without reading the key's published history.
CREATE INDEX outbox_key_idx ON app.outbox (outbox_route, ordering_key, created_at, id)
    WHERE status IN ('pending', 'processing') AND ordering_key IS NOT NULL;

-- Claimed rows by age: the expired leases of crashed relays.
CREATE INDEX outbox_processing_idx ON app.outbox (outbox_route, processing_at)
    WHERE status = 'processing';
