// liboutbox: the consumer inbox collection (mongosh), "outbox_inbox" beside
// "outbox" by default. Optional: a consumer that records the events it
// handled (outbox_inbox_accept) needs it; the relay does not. Safe to run
// again. `outbox schema apply --store mongodb://... --inbox` does the same.
//
// Documents: {_id: {c: consumer, e: event_id}, consumer, event_id,
// received_at (date)}. The compound _id keeps a pair unique, so of two
// sessions inserting one pair exactly one succeeds.
db.createCollection("outbox_inbox");
// The pair again as fields, for stats per consumer and for tools.
db.getCollection("outbox_inbox").createIndex({consumer: 1, event_id: 1}, {name: "inbox_event_uq", unique: true});
// Records by age, for the purge.
db.getCollection("outbox_inbox").createIndex({received_at: 1}, {name: "inbox_received_idx"});
