#!/usr/bin/env python3
"""What a webhook consumer got from the HTTP sink: every request the test
receiver stored for a path, read through its inspection protocol
(GET /_received), each parsed by the CloudEvents SDK as a binary-mode
CloudEvent, its Standard Webhooks signature checked with Python's hmac.

    read_requests.py RECEIVER_URL PATH OUT.jsonl [STAGED.tsv ROUTE [SECRET]]

tests/harness/readback.py says what is written and checked; here also:
every request is a binary-mode CloudEvent, and with SECRET (the signing
secret the sink was given) every request carries webhook-id = the event
id, a webhook-timestamp, and a webhook-signature that HMAC-SHA256 over
"id.timestamp.body" gives.
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import urllib.parse
import urllib.request

from cloudevents.v1.http import from_http, is_binary

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "harness"))
import readback  # noqa: E402


def records(base, path):
    """(headers, body) of each stored request, in arrival order."""
    out, start = [], 0
    while True:
        q = urllib.parse.urlencode({"path": path, "from": start, "limit": 1000})
        with urllib.request.urlopen(f"{base.rstrip('/')}/_received?{q}", timeout=60) as r:
            data = r.read()
        if not data:
            return out
        pos = 0
        while pos < len(data):
            nl = data.index(b"\n", pos)
            head_len, body_len = (int(x) for x in data[pos:nl].split())
            head = data[nl + 1:nl + 1 + head_len].decode("latin-1")
            body = data[nl + 1 + head_len:nl + 1 + head_len + body_len]
            headers = {}
            for line in head.split("\r\n")[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip()] = value.strip()
            out.append((headers, body))
            pos = nl + 1 + head_len + body_len
            start += 1


def read(url, path, report):
    got = records(url, path if path.startswith("/") else "/" + path)
    not_binary = sum(not is_binary(headers) for headers, _ in got)
    report.check(not_binary == 0, f"{not_binary} of {len(got)} requests are not binary-mode CloudEvents")
    msgs = []
    for headers, body in got:
        m = readback.Message(from_http(headers, body), data=json.loads(body))
        m.headers, m.body = headers, body
        msgs.append(m)
    return msgs


def signing_key(secret):
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[6:])
    return secret.encode()


def after(report, msgs, url, path, extra):
    if not extra:
        return
    key = signing_key(extra[0])
    bad = []
    for m in msgs:
        h = {k.lower(): v for k, v in m.headers.items()}
        msg_id, ts, sig = h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature")
        event_id = m.event.get_attributes().get("id")
        if msg_id != event_id or not ts or not sig:
            bad.append(f"{event_id}: webhook-id {msg_id}, timestamp {ts}, signature {sig}")
            continue
        want = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + m.body,
                                         hashlib.sha256).digest()).decode()
        if not any(hmac.compare_digest(s.partition(",")[2], want)
                   for s in sig.split() if s.startswith("v1,")):
            bad.append(f"{msg_id}: signature {sig} is not v1,{want}")
    report.check(not bad, f"{len(bad)} of {len(msgs)} requests fail the HMAC-SHA256 signature check"
                 + (f"; the first: {bad[0]}" if bad else ""))


if __name__ == "__main__":
    sys.exit(readback.main(read, after, __doc__))
