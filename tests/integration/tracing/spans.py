#!/usr/bin/env python3
"""What a collector holds against what was staged and what the sink saw.

spans.py count TRACES_JSON SERVICE
    the number of spans of SERVICE in a Jaeger /api/v3/traces answer.

spans.py check TRACES_JSON SERVICE STAGED ROUTE:SINK_FILE:SPANS:BATCH[:parented] ...
    STAGED holds the staged rows, "route<TAB>event_id<TAB>traceparent" a
    line (traceparent empty when none), in staging order. For each route:
    SPANS publish spans, named "publish ROUTE", kind PRODUCER, with the
    messaging and outbox attributes; the sink's messages grouped by their
    traceparent are the spans, one group per span, its size the span's
    messaging.batch.message_count, BATCH at most; each span links to the
    staged context of each of its messages that had one, with the event id
    on the link; with "parented", the span is a child of the messages'
    common context. Prints one line per check; exits 1 when any failed.
"""
import json
import sys

failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failed += 1


def attrs(items):
    out = {}
    for a in items or []:
        v = a["value"]
        out[a["key"]] = next(iter(v.values())) if v else None
    return out


def spans_of(path, service):
    with open(path) as f:
        doc = json.load(f)
    found = []
    for rs in (doc.get("result") or {}).get("resourceSpans") or []:
        res = attrs(rs.get("resource", {}).get("attributes"))
        if res.get("service.name") != service:
            continue
        for ss in rs.get("scopeSpans") or []:
            for sp in ss.get("spans") or []:
                sp["_resource"] = res
                sp["_scope"] = ss.get("scope", {})
                found.append(sp)
    # Jaeger may hand a span back once per trace it touches: keep one.
    unique = {}
    for sp in found:
        unique[(sp["traceId"], sp["spanId"])] = sp
    return list(unique.values())


def tp_parts(tp):
    _, trace, span, flags = tp.split("-")
    return trace, span, flags


def check_route(spans, staged, spec):
    parts = spec.split(":")
    route, sink, want, batch = parts[0], parts[1], int(parts[2]), int(parts[3])
    parented = len(parts) > 4 and parts[4] == "parented"
    mine = [s for s in spans if attrs(s.get("attributes")).get("outbox.route") == route]
    check(len(mine) == want, f"route {route}: {len(mine)} publish spans, expected {want}")
    rows = {eid: tp for r, eid, tp in staged if r == route}
    msgs = {}
    with open(sink) as f:
        for line in f:
            m = json.loads(line)
            msgs[m["id"]] = m.get("traceparent", "")
    check(set(msgs) == set(rows), f"route {route}: the sink has every staged event once ({len(msgs)})")
    groups = {}
    for eid, tp in msgs.items():
        groups.setdefault(tp, []).append(eid)
    by_ctx = {(s["traceId"], s["spanId"]): s for s in mine}
    for tp, eids in groups.items():
        if not tp:
            check(False, f"route {route}: {len(eids)} messages without a traceparent")
            continue
        trace, span_id, flags = tp_parts(tp)
        s = by_ctx.get((trace, span_id))
        check(s is not None, f"route {route}: the traceparent {tp} of {len(eids)} messages is a publish span's")
        if s is None:
            continue
        check(flags == "01", f"route {route}: {tp} says sampled")
        a = attrs(s.get("attributes"))
        check(s.get("name") == f"publish {route}", f"route {route}: span name {s.get('name')!r}")
        check(s.get("kind") == 4, f"route {route}: span kind {s.get('kind')} (4: PRODUCER)")
        expect = {
            "messaging.system": "file",
            "messaging.destination.name": route,
            "messaging.operation.type": "publish",
            "messaging.operation.name": "publish",
            "messaging.batch.message_count": str(len(eids)),
            "outbox.route": route,
            "outbox.messages.ok": str(len(eids)),
            "outbox.messages.retried": "0",
            "outbox.messages.rejected": "0",
        }
        for k, v in expect.items():
            check(a.get(k) == v, f"route {route}: span {span_id} {k} = {a.get(k)!r}, expected {v!r}")
        check(len(eids) <= batch, f"route {route}: span {span_id} covers {len(eids)} messages, batch {batch}")
        check("code" not in (s.get("status") or {}) or s["status"]["code"] == 0,
              f"route {route}: span {span_id} status {s.get('status')}")
        check(int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) > 0,
              f"route {route}: span {span_id} has its times")
        links = sorted((l["traceId"], l["spanId"], attrs(l.get("attributes")).get("messaging.message.id"))
                       for l in s.get("links") or [])
        want_links = sorted(tp_parts(rows[e])[:2] + (e,) for e in eids if rows.get(e))
        check(links == want_links,
              f"route {route}: span {span_id} links to the {len(want_links)} staged contexts of its messages")
        if parented:
            ctxs = {tp_parts(rows[e])[:2] for e in eids}
            check(len(ctxs) == 1 and all(rows.get(e) for e in eids),
                  f"route {route}: every message of span {span_id} has one staged context")
            ptrace, pspan = next(iter(ctxs))
            check(s["traceId"] == ptrace and s.get("parentSpanId") == pspan,
                  f"route {route}: span {span_id} is a child of {ptrace}/{pspan}")
        else:
            check(not s.get("parentSpanId"), f"route {route}: span {span_id} starts a trace of its own")
        check(s["_resource"].get("service.name") and s["_scope"].get("name") == "liboutbox",
              f"route {route}: resource and scope named")


def main():
    if sys.argv[1] == "count":
        print(len(spans_of(sys.argv[2], sys.argv[3])))
        return 0
    spans = spans_of(sys.argv[2], sys.argv[3])
    with open(sys.argv[4]) as f:
        staged = [tuple((line.rstrip("\n").split("\t") + ["", "", ""])[:3]) for line in f if line.strip()]
    for spec in sys.argv[5:]:
        check_route(spans, staged, spec)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
