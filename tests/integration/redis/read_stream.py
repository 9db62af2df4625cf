#!/usr/bin/env python3
"""What a third-party consumer reads from a Redis stream the Redis sink
added to: redis-py reads every entry with XRANGE, and the CloudEvents SDK
builds an event from each entry's fields (the payload under "data", each
attribute under its own name).

    read_stream.py REDIS_URL STREAM OUT.jsonl [STAGED.tsv ROUTE]

tests/harness/readback.py says what is written and checked; here also: an
entry holds no field but data and CloudEvents attributes.
"""
import json
import os
import sys
from datetime import datetime

import redis
from cloudevents.core.v1.event import CloudEvent

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "harness"))
import readback  # noqa: E402

ATTRIBUTES = {"id", "type", "source", "specversion", "time", "datacontenttype", "partitionkey",
              "traceparent", "tenantid", "correlationid", "causationid", "executionid", "hlc"}


def to_message(entry_id, fields):
    attrs = {k: v for k, v in fields.items() if k != "data"}
    if "time" in attrs:
        attrs["time"] = datetime.fromisoformat(attrs["time"].replace("Z", "+00:00"))
    return readback.Message(CloudEvent(attrs, json.loads(fields["data"])),
                            checks={"fields": lambda *_: set(fields) - {"data"} <= ATTRIBUTES},
                            fields={"entry": entry_id})


def read(url, stream, report):
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
    return [to_message(entry_id, fields) for entry_id, fields in entries]


if __name__ == "__main__":
    sys.exit(readback.main(read, None, __doc__))
