#!/usr/bin/env python3
"""tests/integration/kafka/read_topic.py, with the time the broker stored
each record: each line of OUT.jsonl gains "ts", the record's timestamp in
ms (the cluster tests' topics keep LogAppendTime, the leader's clock when
it appended the record), and "ts_type".

    read_kafka.py kafka://BOOTSTRAP TOPIC OUT.jsonl [STAGED.tsv ROUTE]
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "integration", "kafka"))
sys.path.insert(0, os.path.join(here, "..", "..", "harness"))
import read_topic  # noqa: E402
import readback  # noqa: E402

_plain = read_topic.to_message


def to_message(m):
    msg = _plain(m)
    kind, ms = m.timestamp()
    msg.fields.update(ts=ms, ts_type=kind)
    return msg


# read_topic.read looks its to_message up at each record.
read_topic.to_message = to_message

if __name__ == "__main__":
    sys.exit(readback.main(read_topic.read, None, __doc__))
