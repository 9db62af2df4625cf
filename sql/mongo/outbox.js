// liboutbox: the outbox collection and its indexes (mongosh).
// Documents: {_id: id, outbox_route, event_id, event_type, tenant_id,
// execution_id, correlation_id, causation_id, occurred_at (date), payload,
// status, created_at (date), published_at, processing_at, last_error,
// attempts, available_at, ordering_key, traceparent, hlc (int64), claim_token}.
db.createCollection("outbox");
db.getCollection("outbox").createIndex({outbox_route: 1, event_id: 1}, {name: "outbox_event_uq", unique: true});
db.getCollection("outbox").createIndex({outbox_route: 1, status: 1, available_at: 1, created_at: 1}, {name: "outbox_claim_idx"});
db.getCollection("outbox").createIndex({outbox_route: 1, status: 1, processing_at: 1}, {name: "outbox_lease_idx"});
db.getCollection("outbox").createIndex({claim_token: 1}, {name: "outbox_token_idx", sparse: true});
db.getCollection("outbox").createIndex({outbox_route: 1, created_at: 1, _id: 1}, {name: "outbox_pending_idx", partialFilterExpression: {status: "pending"}});
// without partial indexes (FerretDB), instead: db.getCollection("outbox").createIndex({outbox_route: 1, status: 1, created_at: 1, _id: 1}, {name: "outbox_pending_full_idx"});
db.getCollection("outbox").createIndex({outbox_route: 1, ordering_key: 1, created_at: 1, _id: 1}, {name: "outbox_key_idx", partialFilterExpression: {ordering_key: {$exists: true}}});
// without partial indexes (FerretDB), instead: db.getCollection("outbox").createIndex({outbox_route: 1, ordering_key: 1, status: 1, created_at: 1, _id: 1}, {name: "outbox_key_full_idx"});
