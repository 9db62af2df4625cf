#!/usr/bin/env python3
"""What a third-party consumer reads from a queue the AMQP sink published
to: pika reads every message of the queue (basic.get without acks, so the
queue keeps them), and the CloudEvents SDK's AMQP binding
(cloudevents.core.bindings.amqp.from_binary_event) builds an event from
each message's properties, application properties and body.

    read_queue.py AMQP_URL QUEUE OUT.jsonl [STAGED.tsv ROUTE]

OUT.jsonl gets one JSON object a message, in queue order, with the
event's attributes and data (the shape tests/faults/analyze.py reads).
With STAGED.tsv (event_id, key, type, payload per line, tab-separated:
what the store holds), every message must be a staged event whose
attributes and payload match it: id, type, source /outbox/ROUTE,
specversion, datacontenttype, partitionkey (the key, or the event id
without one), a time; and its AMQP properties: message_id = id, type,
content_type, delivery_mode 2 (persistent), a timestamp.

One "ok: ..." or "FAIL: ..." line per check; the exit status is the number
of checks that failed.
"""
import json
import sys

import pika
from cloudevents.core.bindings.amqp import AMQPMessage, from_binary_event


def to_event(props, body):
    app = dict(props.headers or {})
    app = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in app.items()}
    # The W3C name, outside the binding's prefix: an extension attribute.
    if "traceparent" in app:
        app["cloudEvents_traceparent"] = app.pop("traceparent")
    properties = {"content-type": props.content_type} if props.content_type else {}
    return from_binary_event(AMQPMessage(properties, app, body))


def read(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    total = ch.queue_declare(queue, passive=True).method.message_count
    msgs = []
    while len(msgs) < total:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is None:
            break
        msgs.append((props, body))
    # Unacknowledged: closing puts them back.
    conn.close()
    return msgs


def main():
    if len(sys.argv) not in (4, 6):
        print(__doc__)
        return 2
    url, queue, out_path = sys.argv[1:4]
    failed = 0

    def report(ok, text):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + text)
        failed += 0 if ok else 1

    msgs = read(url, queue)
    events = []
    with open(out_path, "w", encoding="utf-8") as out:
        for props, body in msgs:
            ev = to_event(props, body)
            events.append((ev, props))
            a = ev.get_attributes()
            line = {name: a[name] for name in a}
            line["time"] = ev.get_time().isoformat() if ev.get_time() else None
            line["data"] = ev.get_data()
            line["message_id"] = props.message_id
            out.write(json.dumps(line, default=str) + "\n")
    print(f"info: {len(events)} messages on {queue}")
    if len(sys.argv) == 6:
        staged, route = {}, sys.argv[5]
        with open(sys.argv[4], encoding="utf-8") as f:
            for line in f:
                event_id, key, typ, payload = line.rstrip("\n").split("\t", 3)
                staged[event_id] = (key or event_id, typ, json.loads(payload))
        bad = []
        for ev, props in events:
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
                "message_id": props.message_id == ev.get_id(),
                "properties.type": props.type == typ,
                "content_type": props.content_type == "application/json",
                "delivery_mode": props.delivery_mode == 2,
                "timestamp": isinstance(props.timestamp, int) and props.timestamp > 0,
            }
            wrong = [name for name, ok in checks.items() if not ok]
            if wrong:
                bad.append(f"{ev.get_id()}: {', '.join(wrong)} differ from what was staged ({a})")
        report(not bad, f"{len(bad)} of {len(events)} CloudEvents differ from the staged events"
               + (f"; the first: {bad[0]}" if bad else ""))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
