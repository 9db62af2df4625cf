#!/usr/bin/env python3
"""What a third-party consumer reads from a Redis stream the Redis sink
added to: redis-py reads every entry with XRANGE, and the CloudEvents SDK
builds an event from each entry's fields (the payload under "data", each
attribute under its own name).

    read_stream.py REDIS_URL STREAM OUT.jsonl [STAGED.tsv ROUTE]

OUT.jsonl gets one JSON object an entry, in stream order, with the
event's attributes and data (the shape tests/faults/analyze.py reads).
With STAGED.tsv (event_id, key, type, payload per line, tab-separated:
what the store holds), every entry must be a staged event whose
attributes and payload match it: id, type, source /outbox/ROUTE,
specversion, datacontenttype, partitionkey (the key, or the event id
without one), a time; and an entry holds no field but data and
CloudEvents attributes.

One "ok: ..." or "FAIL: ..." line per check; the exit status is the number
of checks that failed.
"""
import json
import sys
from datetime import datetime

import redis
from cloudevents.core.v1.event import CloudEvent

ATTRIBUTES = {"id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
              "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc"}


def to_event(fields):
    attrs = {k: v for k, v in fields.items() if k != "data"}
    if "time" in attrs:
        attrs["time"] = datetime.fromisoformat(attrs["time"].replace("Z", "+00:00"))
    return CloudEvent(attrs, json.loads(fields["data"]))


def read(url, stream):
    r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
    entries, last = [], "-"
    while True:
        chunk = r.xrange(stream, min=last, max="+", count=1000)
        if last != "-" and chunk and chunk[0][0] == last:
            chunk = chunk[1:]
        if not chunk:
            break
        entries.extend(chunk)
        last = chunk[-1][0]
    r.close()
    return entries


def main():
    if len(sys.argv) not in (4, 6):
        print(__doc__)
        return 2
    url, stream, out_path = sys.argv[1:4]
    failed = 0

    def report(ok, text):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + text)
        failed += 0 if ok else 1

    entries = read(url, stream)
    print(f"info: {len(entries)} entries in {stream}")
    events = []
    with open(out_path, "w", encoding="utf-8") as out:
        for entry_id, fields in entries:
            ev = to_event(fields)
            events.append((ev, fields))
            line = dict(ev.get_attributes())
            line["time"] = ev.get_time().isoformat() if ev.get_time() else None
            line["data"] = ev.get_data()
            line["entry"] = entry_id
            out.write(json.dumps(line) + "\n")
    if len(sys.argv) == 6:
        staged, route = {}, sys.argv[5]
        with open(sys.argv[4], encoding="utf-8") as f:
            for line in f:
                event_id, key, typ, payload = line.rstrip("\n").split("\t", 3)
                staged[event_id] = (key or event_id, typ, json.loads(payload))
        bad = []
        for ev, fields in events:
            a = ev.get_attributes()
            want = staged.get(ev.get_id())
            if want is None:
                bad.append(f"{ev.get_id()} was never staged")
                continue
            key, typ, payload = want
            checks = {
                "type": a.get("type") == typ,
                "source": a.get("source") == f"/outbox/{route}",
                "specversion": a.get("specversion") == "1.0",
                "datacontenttype": a.get("datacontenttype") == "application/json",
                "partitionkey": a.get("partitionkey") == key,
                "time": ev.get_time() is not None,
                "data": ev.get_data() == payload,
                "fields": set(fields) - {"data"} <= ATTRIBUTES,
            }
            wrong = [name for name, ok in checks.items() if not ok]
            if wrong:
                bad.append(f"{ev.get_id()}: {', '.join(wrong)} differ from what was staged ({fields})")
        report(not bad, f"{len(bad)} of {len(events)} CloudEvents differ from the staged events"
               + (f"; the first: {bad[0]}" if bad else ""))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
