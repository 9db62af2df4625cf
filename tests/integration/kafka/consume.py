#!/usr/bin/env python3
"""Reads a topic back with clients nobody in this project wrote, and checks
each record as a CloudEvent against what was staged.

    consume.py BOOTSTRAP TOPIC STAGED OUTPUT

confluent-kafka reads every partition from its first offset up to its high
watermark; the CloudEvents SDK (cloudevents.core.bindings.kafka) parses
each record in binary mode. STAGED holds one staged event a line,
"event_id<TAB>ordering_key<TAB>type<TAB>route<TAB>hlc<TAB>payload".
OUTPUT gets one line {"id": ...} per record, partition by partition in
offset order (which keeps each key's order), for tests/faults/analyze.py.
One line per check, "ok: ..." or "FAIL: ...", the exit status the number
of failed checks.
"""
import datetime
import json
import sys

from cloudevents.core.bindings import kafka as ce_kafka
from confluent_kafka import Consumer, TopicPartition


def main():
    bootstrap, topic, staged_path, out_path = sys.argv[1:5]
    staged = {}
    with open(staged_path, encoding="utf-8") as f:
        for line in f:
            eid, key, etype, route, hlc, payload = line.rstrip("\n").split("\t", 5)
            staged[eid] = (key, etype, route, hlc, payload)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outbox-crosscheck",
                  "enable.auto.commit": False})
    meta = c.list_topics(topic, timeout=30)
    parts = sorted(meta.topics[topic].partitions)
    ids, problems, records = [], [], 0
    for p in parts:
        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if high <= low:
            continue
        c.assign([TopicPartition(topic, p, low)])
        pos = low
        while pos < high:
            m = c.poll(10)
            if m is None:
                problems.append(f"partition {p}: nothing more after offset {pos} of {high}")
                break
            if m.error():
                continue
            pos = m.offset() + 1
            records += 1
            headers = {k: v for k, v in (m.headers() or [])}
            ev = ce_kafka.from_binary_event(
                ce_kafka.KafkaMessage(headers=headers, key=m.key(), value=m.value()))
            eid = ev.get_id()
            ids.append(eid)
            if eid not in staged:
                problems.append(f"record {eid} was never staged")
                continue
            key, etype, route, hlc, payload = staged[eid]
            want = {
                "type": etype,
                "source": f"/outbox/{route}",
                "specversion": "1.0",
                "datacontenttype": "application/json",
                "partitionkey": key or eid,
            }
            for name, value in want.items():
                got = ev.get_attributes().get(name)
                if got != value:
                    problems.append(f"{eid}: {name} is {got!r}, staged {value!r}")
            t = ev.get_time()
            if not isinstance(t, datetime.datetime) or t.tzinfo is None:
                problems.append(f"{eid}: time {t!r} is not an RFC 3339 time with a zone")
            if ev.get_data() != json.loads(payload):
                problems.append(f"{eid}: data {ev.get_data()!r} differs from the staged payload")
            if (m.key() or b"").decode() != (key or eid):
                problems.append(f"{eid}: record key {m.key()!r}, staged key {key!r}")
            got_hlc = ev.get_attributes().get("hlc")
            if hlc and got_hlc != hlc:
                problems.append(f"{eid}: hlc extension {got_hlc!r}, staged {hlc!r}")
    c.close()
    with open(out_path, "w", encoding="utf-8") as f:
        for eid in ids:
            f.write(json.dumps({"id": eid}) + "\n")
    ok = not problems
    print(("ok: " if ok else "FAIL: ") +
          f"{records} records read back and parsed as binary-mode CloudEvents; "
          f"{len(problems)} problems" + (f", the first: {problems[0]}" if problems else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
