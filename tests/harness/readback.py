"""What every reader of tests/integration/*/read_*.py shares: each reads
what a sink published with a client nobody in this project wrote, builds a
CloudEvent of each message with the CloudEvents SDK, and hands the list to
main(), which writes it out and checks it against what was staged.

    read_X.py URL DESTINATION OUT.jsonl [STAGED.tsv ROUTE [EXTRA...]]

OUT.jsonl gets one JSON object a message, in the order the consumer read
them, with the event's attributes and data (what tests/harness/delivery.py
reads). With STAGED.tsv (event_id, key, type, payload per line,
tab-separated: what the store holds, harness.sh's staged_sqlite and
staged_pg write it), every message must be a staged event whose attributes
and payload match it: id, type, source /outbox/ROUTE, specversion,
datacontenttype, partitionkey (the key, or the event id without one), a
time with a zone, the data; plus the reader's own checks of its protocol.

One "ok: ..." or "FAIL: ..." line per check; the exit status is the number
of checks that failed.
"""
import datetime
import json
import sys

from delivery import Report


class Message:
    """One message read back: its CloudEvent, the payload as the consumer
    decoded it (the event's data unless given), the reader's protocol
    checks (name -> function of (key, type, payload) -> bool) and fields
    of its own for OUT.jsonl."""

    def __init__(self, event, data=None, checks=None, fields=None):
        self.event = event
        self.data = event.get_data() if data is None else data
        self.checks = checks or {}
        self.fields = fields or {}


def load_staged(path):
    staged = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            event_id, key, typ, payload = line.rstrip("\n").split("\t", 3)
            staged[event_id] = (key or event_id, typ, json.loads(payload))
    return staged


def has_zone(t):
    return t is not None and (not isinstance(t, datetime.datetime) or t.tzinfo is not None)


def compare(report, msgs, staged, route):
    bad = []
    for m in msgs:
        a = m.event.get_attributes()
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
            "time": has_zone(a.get("time")),
            "data": m.data == payload,
        }
        for name, fn in m.checks.items():
            checks[name] = fn(key, typ, payload)
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            bad.append(f"{a.get('id')}: {', '.join(wrong)} differ from what was staged ({a})")
    report.check(not bad, f"{len(bad)} of {len(msgs)} CloudEvents differ from the staged events"
                 + (f"; the first: {bad[0]}" if bad else ""))


def write_out(path, msgs):
    with open(path, "w", encoding="utf-8") as out:
        for m in msgs:
            line = dict(m.event.get_attributes())
            t = line.get("time")
            line["time"] = t.isoformat() if hasattr(t, "isoformat") else t
            line["data"] = m.data
            line.update(m.fields)
            out.write(json.dumps(line, default=str) + "\n")


def main(read, after=None, doc=__doc__):
    """read(url, destination, report) -> [Message]; after(report, msgs,
    url, destination, extra) adds the reader's checks of the whole run."""
    if len(sys.argv) < 4 or len(sys.argv) == 5:
        print(doc)
        return 2
    url, dest, out_path = sys.argv[1:4]
    report = Report()
    msgs = read(url, dest, report)
    write_out(out_path, msgs)
    print(f"info: {len(msgs)} messages read back from {dest}")
    if len(sys.argv) >= 6:
        compare(report, msgs, load_staged(sys.argv[4]), sys.argv[5])
    if after:
        after(report, msgs, url, dest, sys.argv[6:])
    return min(report.failed, 100)
