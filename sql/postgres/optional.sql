-- liboutbox: optional parts of the PostgreSQL outbox schema (relation app.outbox).
-- Each enables one feature and is detected when a store opens. Safe to run again.

-- W3C trace context, forwarded as the traceparent header.
ALTER TABLE app.outbox ADD COLUMN IF NOT EXISTS traceparent TEXT;

-- Hybrid logical clock stamp (physical_ms << 16 | logical) for causal claim
-- order: hlc NULLS LAST, created_at, id.
ALTER TABLE app.outbox ADD COLUMN IF NOT EXISTS hlc BIGINT;

-- SPEC section 2's hlc claim index.
CREATE INDEX IF NOT EXISTS outbox_claim_hlc_idx
    ON app.outbox (outbox_route, status, available_at, hlc, created_at, id);

-- The ordered pending index's twin for hlc order. A btree stores NULLs last in
-- ascending order, which is where the claim wants rows without an hlc.
CREATE INDEX IF NOT EXISTS outbox_pending_hlc_idx ON app.outbox (outbox_route, hlc, created_at, id)
    WHERE status = 'pending';

-- The per-key index's twin for hlc order.
CREATE INDEX IF NOT EXISTS outbox_key_hlc_idx ON app.outbox (outbox_route, ordering_key, hlc, created_at, id)
    WHERE status IN ('pending', 'processing') AND ordering_key IS NOT NULL;

-- Node-global clock high-water mark: staging inside a transaction advances its
-- node key with one max-upsert (INSERT .. ON CONFLICT DO UPDATE SET hlc =
-- GREATEST(..)), and a restarting runtime resumes above the maximum over all keys.
CREATE TABLE IF NOT EXISTS app.hlc_checkpoint (
    node_key TEXT NOT NULL,
    hlc BIGINT NOT NULL,             -- physical_ms << 16 | logical
    PRIMARY KEY (node_key)
);
