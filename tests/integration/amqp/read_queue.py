#!/usr/bin/env python3
"""What a third-party consumer reads from a queue the AMQP sink published
to: pika reads every message of the queue (basic.get without acks, so the
queue keeps them), and the CloudEvents SDK's AMQP binding
(cloudevents.core.bindings.amqp.from_binary_event) builds an event from
each message's properties, application properties and body.

    read_queue.py AMQP_URL QUEUE OUT.jsonl [STAGED.tsv ROUTE]

tests/harness/readback.py says what is written and checked; here also the
AMQP properties: message_id = id, type, content_type, delivery_mode 2
(persistent), a timestamp.
"""
import os
import sys

import pika
from cloudevents.core.bindings.amqp import AMQPMessage, from_binary_event

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "harness"))
import readback  # noqa: E402


def to_message(props, body):
    app = dict(props.headers or {})
    app = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in app.items()}
    # The W3C name, outside the binding's prefix: an extension attribute.
    if "traceparent" in app:
        app["cloudEvents_traceparent"] = app.pop("traceparent")
    properties = {"content-type": props.content_type} if props.content_type else {}
    event = from_binary_event(AMQPMessage(properties, app, body))
    return readback.Message(event, checks={
        "message_id": lambda *_: props.message_id == event.get_id(),
        "properties.type": lambda key, typ, payload: props.type == typ,
        "content_type": lambda *_: props.content_type == "application/json",
        "delivery_mode": lambda *_: props.delivery_mode == 2,
        "timestamp": lambda *_: isinstance(props.timestamp, int) and props.timestamp > 0,
    }, fields={"message_id": props.message_id})


def read(url, queue, report):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    total = ch.queue_declare(queue, passive=True).method.message_count
    msgs = []
    while len(msgs) < total:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is None:
            break
        msgs.append(to_message(props, body))
    # Unacknowledged: closing puts them back.
    conn.close()
    return msgs


if __name__ == "__main__":
    sys.exit(readback.main(read, None, __doc__))
