#!/usr/bin/env python3
"""tests/integration/nats/read_stream.py, with the time the stream stored
each message: each line of OUT.jsonl gains "ts", in ms (the leader's clock
when it stored the message, from the message's JetStream metadata).

    read_nats.py NATS_URL SUBJECT OUT.jsonl [STAGED.tsv ROUTE]
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "integration", "nats"))
sys.path.insert(0, os.path.join(here, "..", "..", "harness"))
import read_stream  # noqa: E402
import readback  # noqa: E402

_plain = read_stream.to_message


def to_message(msg):
    m = _plain(msg)
    m.fields["ts"] = int(msg.metadata.timestamp.timestamp() * 1000)
    return m


# read_stream.read_async looks its to_message up at each message.
read_stream.to_message = to_message

if __name__ == "__main__":
    sys.exit(readback.main(read_stream.read, read_stream.after, __doc__))
