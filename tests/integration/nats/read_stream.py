#!/usr/bin/env python3
"""What a third-party consumer reads from a JetStream subject the NATS sink
published to: nats-py reads every message of the stream that captures the
subject (an ordered consumer, from the first message), and the CloudEvents
SDK builds an event from each message's headers and payload.

    read_stream.py NATS_URL SUBJECT OUT.jsonl [STAGED.tsv ROUTE]

OUT.jsonl gets one JSON object a message, in stream order, with the
event's attributes and data (the shape tests/faults/analyze.py reads).
With STAGED.tsv (event_id, key, type, payload per line, tab-separated:
what the store holds), every message must be a staged event whose
attributes and payload match it: id, type, source /outbox/ROUTE,
specversion, datacontenttype, partitionkey (the key, or the event id
without one), a time, Nats-Msg-Id = id. Then one publish with nats-py of
the first event's Nats-Msg-Id again must be reported a duplicate.

One "ok: ..." or "FAIL: ..." line per check; the exit status is the number
of checks that failed.
"""
import asyncio
import json
import sys
from datetime import datetime

import nats
from cloudevents.core.v1.event import CloudEvent


def to_event(msg):
    attrs = {}
    for name, value in (msg.headers or {}).items():
        if name.startswith("ce-"):
            attrs[name[3:]] = value
        elif name == "traceparent":
            attrs[name] = value
    if "time" in attrs:
        attrs["time"] = datetime.fromisoformat(attrs["time"].replace("Z", "+00:00"))
    return CloudEvent(attrs, json.loads(msg.data))


async def read(url, subject, out_path):
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    js = nc.jetstream()
    stream = await js.find_stream_name_by_subject(subject)
    info = await js.stream_info(stream)
    total = info.state.messages
    sub = await js.subscribe(subject, ordered_consumer=True, stream=stream)
    msgs = []
    while len(msgs) < total:
        msgs.append(await sub.next_msg(timeout=10))
    await sub.unsubscribe()
    events = []
    with open(out_path, "w", encoding="utf-8") as out:
        for msg in msgs:
            ev = to_event(msg)
            events.append((ev, msg))
            line = {name: ev.get_attributes()[name] for name in ev.get_attributes()}
            line["time"] = ev.get_time().isoformat() if ev.get_time() else None
            line["data"] = ev.get_data()
            line["msgid"] = msg.headers.get("Nats-Msg-Id")
            line["seq"] = msg.metadata.sequence.stream
            out.write(json.dumps(line) + "\n")
    return nc, js, events


async def main():
    if len(sys.argv) not in (4, 6):
        print(__doc__)
        return 2
    url, subject, out_path = sys.argv[1:4]
    failed = 0

    def report(ok, text):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + text)
        failed += 0 if ok else 1

    nc, js, events = await read(url, subject, out_path)
    print(f"info: {len(events)} messages on {subject}")
    if len(sys.argv) == 6:
        staged, route = {}, sys.argv[5]
        with open(sys.argv[4], encoding="utf-8") as f:
            for line in f:
                event_id, key, typ, payload = line.rstrip("\n").split("\t", 3)
                staged[event_id] = (key or event_id, typ, json.loads(payload))
        bad = []
        for ev, msg in events:
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
                "Nats-Msg-Id": msg.headers.get("Nats-Msg-Id") == ev.get_id(),
            }
            wrong = [name for name, ok in checks.items() if not ok]
            if wrong:
                bad.append(f"{ev.get_id()}: {', '.join(wrong)} differ from what was staged ({a})")
        report(not bad, f"{len(bad)} of {len(events)} CloudEvents differ from the staged events"
               + (f"; the first: {bad[0]}" if bad else ""))
        if events:
            first, msg = events[0]
            ack = await js.publish(msg.subject, msg.data, headers={"Nats-Msg-Id": first.get_id()})
            report(ack.duplicate is True,
                   f"nats-py publishing event {first.get_id()} again: duplicate={ack.duplicate} "
                   f"(the stream already holds it under that Nats-Msg-Id)")
    await nc.close()
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
