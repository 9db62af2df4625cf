#!/usr/bin/env python3
"""What a webhook consumer got from the HTTP sink: every request the test
receiver stored for a path, read through its inspection protocol
(GET /_received), each parsed by the CloudEvents SDK as a binary-mode
CloudEvent, its Standard Webhooks signature checked with Python's hmac.

    read_requests.py RECEIVER_URL PATH OUT.jsonl [STAGED.tsv ROUTE [SECRET]]

OUT.jsonl gets one JSON object a request, in arrival order, with the
event's attributes and data (the shape tests/faults/analyze.py reads).
With STAGED.tsv (event_id, key, type, payload per line, tab-separated:
what the store holds), every request must be a staged event whose
attributes and payload match it: id, type, source /outbox/ROUTE,
specversion, datacontenttype, partitionkey (the key, or the event id
without one), a time. With SECRET (the signing secret the sink was given),
every request must carry webhook-id = the event id, a webhook-timestamp,
and a webhook-signature that HMAC-SHA256 over "id.timestamp.body" gives.

One "ok: ..." or "FAIL: ..." line per check; the exit status is the number
of checks that failed.
"""
import base64
import hashlib
import hmac
import json
import sys
import urllib.parse
import urllib.request

from cloudevents.v1.http import from_http, is_binary


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


def signing_key(secret):
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[6:])
    return secret.encode()


def main():
    if len(sys.argv) not in (4, 6, 7):
        print(__doc__)
        return 2
    base, path, out_path = sys.argv[1:4]
    failed = 0

    def report(ok, text):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + text)
        failed += 0 if ok else 1

    got = records(base, path)
    events = []
    not_binary = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for headers, body in got:
            not_binary += not is_binary(headers)
            ev = from_http(headers, body)
            events.append((ev, headers, body))
            line = dict(ev.get_attributes())
            t = line.get("time")
            line["time"] = t.isoformat() if hasattr(t, "isoformat") else t
            line["data"] = ev.get_data()
            out.write(json.dumps(line, default=str) + "\n")
    print(f"info: {len(events)} requests to {path}")
    report(not_binary == 0, f"{not_binary} of {len(got)} requests are not binary-mode CloudEvents")
    if len(sys.argv) >= 6:
        staged, route = {}, sys.argv[5]
        with open(sys.argv[4], encoding="utf-8") as f:
            for line in f:
                event_id, key, typ, payload = line.rstrip("\n").split("\t", 3)
                staged[event_id] = (key or event_id, typ, json.loads(payload))
        bad = []
        for ev, headers, body in events:
            a = ev.get_attributes()
            want = staged.get(a.get("id"))
            if want is None:
                bad.append(f"{a.get('id')} was never staged")
                continue
            key, typ, payload = want
            checks = {
                "type": a.get("type") == typ,
                "source": a.get("source") == f"/outbox/{route}",
                "specversion": str(a.get("specversion")) == "1.0",
                "datacontenttype": a.get("datacontenttype") == "application/json",
                "partitionkey": a.get("partitionkey") == key,
                "time": a.get("time") is not None,
                "data": json.loads(body) == payload,
            }
            wrong = [name for name, ok in checks.items() if not ok]
            if wrong:
                bad.append(f"{a.get('id')}: {', '.join(wrong)} differ from what was staged ({a})")
        report(not bad, f"{len(bad)} of {len(events)} CloudEvents differ from the staged events"
               + (f"; the first: {bad[0]}" if bad else ""))
    if len(sys.argv) == 7:
        key = signing_key(sys.argv[6])
        bad = []
        for ev, headers, body in events:
            h = {k.lower(): v for k, v in headers.items()}
            msg_id, ts, sig = h.get("webhook-id"), h.get("webhook-timestamp"), h.get("webhook-signature")
            if msg_id != ev.get_attributes().get("id") or not ts or not sig:
                bad.append(f"{ev.get_attributes().get('id')}: webhook-id {msg_id}, timestamp {ts}, signature {sig}")
                continue
            want = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + body,
                                             hashlib.sha256).digest()).decode()
            if not any(hmac.compare_digest(s.partition(",")[2], want)
                       for s in sig.split() if s.startswith("v1,")):
                bad.append(f"{msg_id}: signature {sig} is not v1,{want}")
        report(not bad, f"{len(bad)} of {len(events)} requests fail the HMAC-SHA256 signature check"
               + (f"; the first: {bad[0]}" if bad else ""))
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
