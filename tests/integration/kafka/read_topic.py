#!/usr/bin/env python3
"""What a third-party consumer reads from a topic the Kafka sink produced
to: confluent-kafka reads every partition from its first offset up to its
high watermark, partition by partition in offset order (which keeps each
key's order), and the CloudEvents SDK's Kafka binding
(cloudevents.core.bindings.kafka) parses each record in binary mode.

    read_topic.py kafka://BOOTSTRAP TOPIC OUT.jsonl [STAGED.tsv ROUTE]

tests/harness/readback.py says what is written and checked; here also:
the record key is the event's key (or its id without one).
"""
import os
import sys

from cloudevents.core.bindings import kafka as ce_kafka
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "harness"))
import readback  # noqa: E402


def to_message(m):
    headers = {k: v for k, v in (m.headers() or [])}
    event = ce_kafka.from_binary_event(
        ce_kafka.KafkaMessage(headers=headers, key=m.key(), value=m.value()))
    record_key = (m.key() or b"").decode()
    return readback.Message(event, checks={"record key": lambda key, *_: record_key == key},
                            fields={"partition": m.partition(), "offset": m.offset()})


def read(url, topic, report):
    bootstrap = url.removeprefix("kafka://").split("/")[0].split("?")[0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outbox-crosscheck",
                  "enable.auto.commit": False})
    meta = c.list_topics(topic, timeout=30)
    msgs, short = [], []
    for p in sorted(meta.topics[topic].partitions):
        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if high <= low:
            continue
        c.assign([TopicPartition(topic, p, low)])
        pos = low
        while pos < high:
            m = c.poll(10)
            if m is None:
                short.append(f"partition {p}: nothing more after offset {pos} of {high}")
                break
            if m.error():
                continue
            pos = m.offset() + 1
            msgs.append(to_message(m))
    c.close()
    report.check(not short, f"every partition read up to its high watermark"
                 + (f"; {short[0]}" if short else ""))
    return msgs


if __name__ == "__main__":
    sys.exit(readback.main(read, None, __doc__))
