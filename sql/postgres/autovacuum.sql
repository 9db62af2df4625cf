-- liboutbox: autovacuum settings for the outbox table (relation app.outbox).
-- Apply them in your migration after outbox.sql; safe to run again. Edit
-- app.outbox for another relation. docs/performance.md shows what they do
-- (a 10-minute drain held 0.96 of its first minute's rate with them, 0.64
-- without) and docs/postgres.md explains each.
--
-- Every event is updated twice (claim, settle), and both updates change the
-- indexed status column, so each event leaves dead heap and index entries
-- where the next claim reads. The server defaults wait for dead rows worth
-- 20 % of a table that grows with every published row not yet purged.
ALTER TABLE app.outbox SET (
    autovacuum_vacuum_scale_factor = 0,       -- vacuum after a fixed number of dead rows
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,         -- not throttled on this table
    autovacuum_analyze_scale_factor = 0,      -- fresh statistics for the claim's plan
    autovacuum_analyze_threshold = 100000
);

-- Server-wide, and not settable per table: on a server whose main write load is
-- the outbox, autovacuum_naptime = 10s (postgresql.conf or ALTER SYSTEM) lets
-- autovacuum come back six times a minute; in docs/performance.md it raised the
-- sustained drain by about a quarter.

-- PostgreSQL 13 and later: vacuum the insert-only growth too, which keeps
-- the visibility map current. Leave this statement out on PostgreSQL 12.
ALTER TABLE app.outbox SET (
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 100000
);
