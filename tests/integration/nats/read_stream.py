#!/usr/bin/env python3
"""What a third-party consumer reads from a JetStream subject the NATS sink
published to: nats-py reads every message of the stream that captures the
subject (an ordered consumer, from the first message), and the CloudEvents
SDK builds an event from each message's headers and payload.

    read_stream.py NATS_URL SUBJECT OUT.jsonl [STAGED.tsv ROUTE]

tests/harness/readback.py says what is written and checked; here also:
Nats-Msg-Id = id on every message, and nats-py publishing the first
event's Nats-Msg-Id again is told it is a duplicate.
"""
import asyncio
import json
import os
import sys
from datetime import datetime

import nats
import nats.js.api
from cloudevents.core.v1.event import CloudEvent

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "harness"))
import readback  # noqa: E402


def to_message(msg):
    attrs = {}
    for name, value in (msg.headers or {}).items():
        if name.startswith("ce-"):
            attrs[name[3:]] = value
        elif name == "traceparent":
            attrs[name] = value
    if "time" in attrs:
        attrs["time"] = datetime.fromisoformat(attrs["time"].replace("Z", "+00:00"))
    event = CloudEvent(attrs, json.loads(msg.data))
    msgid = msg.headers.get("Nats-Msg-Id")
    m = readback.Message(event, checks={"Nats-Msg-Id": lambda *_: msgid == event.get_id()},
                         fields={"msgid": msgid, "seq": msg.metadata.sequence.stream})
    m.subject, m.raw = msg.subject, msg.data
    return m


async def read_async(url, subject):
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    js = nc.jetstream()
    stream = await js.find_stream_name_by_subject(subject)
    total = (await js.stream_info(stream)).state.messages
    msgs = []
    # An ordered consumer on a cluster whose leaders were just killed can
    # stall: a stall of 10 s starts a new one after the last message read,
    # three times at most.
    for attempt in range(3):
        start = msgs[-1].fields["seq"] + 1 if msgs else 1
        config = nats.js.api.ConsumerConfig(
            deliver_policy=nats.js.api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        sub = await js.subscribe(subject, ordered_consumer=True, stream=stream, config=config)
        try:
            while len(msgs) < total:
                msgs.append(to_message(await sub.next_msg(timeout=10)))
        except nats.errors.TimeoutError:
            if attempt == 2:
                raise
            print(f"info: the stream's reader stalled after {len(msgs)} of {total}; reading on",
                  file=sys.stderr)
        finally:
            await sub.unsubscribe()
        if len(msgs) >= total:
            break
    await nc.close()
    return msgs


async def publish_again(url, m):
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    ack = await nc.jetstream().publish(m.subject, m.raw,
                                       headers={"Nats-Msg-Id": m.event.get_id()})
    await nc.close()
    return ack


def read(url, subject, report):
    return asyncio.run(read_async(url, subject))


def after(report, msgs, url, subject, extra):
    if not msgs:
        return
    ack = asyncio.run(publish_again(url, msgs[0]))
    report.check(ack.duplicate is True,
                 f"nats-py publishing event {msgs[0].event.get_id()} again: duplicate={ack.duplicate} "
                 f"(the stream already holds it under that Nats-Msg-Id)")


if __name__ == "__main__":
    sys.exit(readback.main(read, after, __doc__))
