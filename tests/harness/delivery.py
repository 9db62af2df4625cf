#!/usr/bin/env python3
"""What a consumer saw, against what was staged: the one analysis of a
delivery that every test uses (tests/harness/harness.sh: analyze).

    delivery.py STAGED OUTPUT MAX_DUPLICATES
    delivery.py serials:N OUTPUT MAX_DUPLICATES
    delivery.py --lines FILE

STAGED holds one staged event a line, "event_id<TAB>ordering_key" (the key
empty when the event has none), in staging order: the store's claim order,
created_at then id. With serials:N the staging order is rebuilt from the
output itself: every event's payload ("data") carries its serial number
"n" (0 to N-1, in staging order) and its key "k" (empty for none), as
harness.sh's stage_events writes them; each serial must be there.

OUTPUT holds one JSON object with an "id" a line (a file sink's output, or
what a reader of a broker wrote), in the order the consumer saw them.
MAX_DUPLICATES is the most lines that may repeat an event already seen,
or "-" to only report them.

Checks: every line is one JSON object with an id; no staged event is
missing; nothing arrived that was never staged; duplicates within the
bound; per key, the events in the order they FIRST reached the consumer
are in staging order.

--lines: every line of FILE is one whole JSON object and the file ends in
a newline (nothing torn).

One line per check, "ok: ..." or "FAIL: ...", and the exit status is the
number of checks that failed.
"""
import json
import sys


class Report:
    def __init__(self):
        self.failed = 0

    def check(self, ok, text):
        print(("ok: " if ok else "FAIL: ") + text)
        self.failed += 0 if ok else 1


def read_staged(path):
    order, key_of = [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            event_id, _, key = line.partition("\t")
            order.append(event_id)
            key_of[event_id] = key or None
    return order, key_of


def read_output(path):
    """The objects of the output in file order, and how many lines were not
    one whole JSON object with an id."""
    objs, bad = [], 0
    with open(path, "rb") as f:
        for raw in f:
            try:
                obj = json.loads(raw)
                obj["id"]
                objs.append(obj)
            except (ValueError, KeyError, TypeError):
                bad += 1
    return objs, bad


def staged_from_serials(objs, count, report):
    """The staging order, from the serial number and key each payload
    carries; reports serials that never arrived."""
    by_serial = {}
    for obj in objs:
        data = obj.get("data")
        if isinstance(data, dict) and isinstance(data.get("n"), int):
            by_serial.setdefault(data["n"], (obj["id"], data.get("k") or None))
    missing = [n for n in range(count) if n not in by_serial]
    report.check(not missing, f"{len(missing)} of {count} serial numbers never reached the consumer"
                 + (f", the first {missing[0]}" if missing else ""))
    order = [by_serial[n][0] for n in sorted(by_serial)]
    key_of = {by_serial[n][0]: by_serial[n][1] for n in by_serial}
    return order, key_of


def analyze(staged_arg, output, limit_arg):
    report = Report()
    objs, bad = read_output(output)
    report.check(bad == 0, f"{bad} of {len(objs) + bad} output lines are not one JSON object with an id")
    if staged_arg.startswith("serials:"):
        order, key_of = staged_from_serials(objs, int(staged_arg[len("serials:"):]), report)
    else:
        order, key_of = read_staged(staged_arg)
    written = [obj["id"] for obj in objs]
    limit = None if limit_arg == "-" else int(limit_arg)

    first = {}
    for pos, event_id in enumerate(written):
        first.setdefault(event_id, pos)
    missing = [e for e in order if e not in first]
    report.check(not missing, f"{len(missing)} of {len(order)} staged events missing from the output"
                 + (f", the first {missing[0]}" if missing else ""))
    foreign = [e for e in first if e not in key_of]
    report.check(not foreign, f"{len(foreign)} events in the output were never staged"
                 + (f", the first {foreign[0]}" if foreign else ""))

    dups = len(written) - len(first)
    if limit is None:
        print(f"info: {dups} duplicate lines")
    else:
        report.check(dups <= limit, f"{dups} duplicate lines, at most {limit} allowed")

    # Per key, the staged events in the order they first reached the
    # consumer must be the key's staging order.
    staged_by_key = {}
    for event_id in order:
        key = key_of[event_id]
        if key is not None and event_id in first:
            staged_by_key.setdefault(key, []).append(event_id)
    broken = sorted(k for k, ids in staged_by_key.items() if ids != sorted(ids, key=first.__getitem__))
    example = ""
    if broken:
        k = broken[0]
        seen = sorted(staged_by_key[k], key=first.__getitem__)
        i = next(i for i, (a, b) in enumerate(zip(staged_by_key[k], seen)) if a != b)
        example = (f"; key {k}: staged #{i} is {staged_by_key[k][i]}, "
                   f"but {seen[i]} reached the consumer first")
    report.check(not broken, f"{len(broken)} of {len(staged_by_key)} keys first reached the consumer "
                 f"out of staging order{example}")
    return report.failed


def whole_lines(path):
    report = Report()
    bad, n = 0, 0
    with open(path, "rb") as f:
        data = f.read()
    for raw in data.splitlines():
        n += 1
        try:
            if not isinstance(json.loads(raw), dict):
                bad += 1
        except ValueError:
            bad += 1
    report.check(bad == 0, f"{path}: {bad} of {n} lines are not one whole JSON object")
    report.check(not data or data.endswith(b"\n"), f"{path} ends in a newline")
    return report.failed


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--lines":
        return whole_lines(sys.argv[2])
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    return min(analyze(*sys.argv[1:4]), 100)


if __name__ == "__main__":
    sys.exit(main())
