-- liboutbox: optional parts of the SQLite outbox schema (relation "outbox").
-- Each enables one feature and is detected when a store opens.
--
-- SQLite has no ADD COLUMN IF NOT EXISTS: run each ALTER only once (a second run
-- fails with "duplicate column name"). `outbox schema apply --hlc --traceparent
-- --checkpoint` does the same and checks first, so it may be run again.

-- W3C trace context, forwarded as the traceparent header.
ALTER TABLE "outbox" ADD COLUMN traceparent TEXT;

-- Hybrid logical clock stamp (physical_ms << 16 | logical), for causal claim
-- order: hlc NULLS LAST, created_at, id.
ALTER TABLE "outbox" ADD COLUMN hlc INTEGER;

-- The ordered index's twin for hlc order. Rows without an hlc are read through
-- the same index (hlc IS NULL is an equality in SQLite), after those with one.
CREATE INDEX IF NOT EXISTS "outbox_hlc_order_idx" ON "outbox" (outbox_route, status, hlc, created_at, id);

-- Node-global clock high-water mark: staging inside a transaction advances its
-- node key with one max-upsert, and a restarting runtime resumes above the
-- maximum over all keys.
CREATE TABLE IF NOT EXISTS "hlc_checkpoint" (
    node_key TEXT NOT NULL PRIMARY KEY,
    hlc      INTEGER NOT NULL -- physical_ms << 16 | logical
);
