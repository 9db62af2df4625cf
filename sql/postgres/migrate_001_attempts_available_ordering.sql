-- liboutbox migration 001: tables created before retries, scheduling and per-key
-- ordering existed gain attempts, available_at and ordering_key (SPEC section 2).
-- Safe to run again: every step is IF NOT EXISTS. Edit app.outbox for another
-- relation.
--
-- ADD COLUMN with a constant DEFAULT does not rewrite the table (PostgreSQL 11+),
-- so the ALTER holds its lock only for a moment.
ALTER TABLE app.outbox
    ADD COLUMN IF NOT EXISTS attempts INT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS available_at TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS ordering_key TEXT;

-- The indexes outbox.sql creates beside outbox_claim_idx. CREATE INDEX blocks
-- writes to the table while it builds; on a large live table run each of these
-- by hand as CREATE INDEX CONCURRENTLY (outside a transaction) instead.
CREATE INDEX IF NOT EXISTS outbox_pending_idx ON app.outbox (outbox_route, created_at, id)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS outbox_key_idx ON app.outbox (outbox_route, ordering_key, created_at, id)
    WHERE status IN ('pending', 'processing') AND ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_processing_idx ON app.outbox (outbox_route, processing_at)
    WHERE status = 'processing';
