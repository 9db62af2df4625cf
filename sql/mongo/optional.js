// liboutbox: the optional parts of the outbox collection (mongosh), each
// enabling one feature and detected when a handle opens.
//
// hlc ordering: claims in hybrid-logical-clock order use this index, and the
// driver turns hlc ordering on where it exists. (A document carries
// traceparent and hlc without any schema change.)
db.getCollection("outbox").createIndex({outbox_route: 1, status: 1, available_at: 1, hlc: 1, created_at: 1, _id: 1}, {name: "outbox_claim_hlc_idx"});
// The clock checkpoint: documents {_id: node_key, hlc: int64}.
db.createCollection("hlc_checkpoint");
