#!/usr/bin/env python3
"""What a consumer of the file sink saw, against what was staged.

    analyze.py STAGED OUTPUT MAX_DUPLICATES

STAGED holds one staged event a line, "event_id<TAB>ordering_key" (the key
empty when the event has none), in staging order: the store's claim order,
created_at then id. OUTPUT is the file sink's JSON Lines file. MAX_DUPLICATES
is the most lines that may repeat an event already written, or "-" to only
report them.

One line per check, "ok: ..." or "FAIL: ...", and the exit status is the
number of checks that failed.
"""
import json
import sys


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
    """The ids of the output in file order, and how many lines were not one
    whole JSON object with an id."""
    ids, bad = [], 0
    with open(path, "rb") as f:
        for raw in f:
            try:
                obj = json.loads(raw)
                ids.append(obj["id"])
            except (ValueError, KeyError, TypeError):
                bad += 1
    return ids, bad


def main():
    if len(sys.argv) != 4:
        print("usage: analyze.py STAGED OUTPUT MAX_DUPLICATES|-")
        return 2
    order, key_of = read_staged(sys.argv[1])
    written, bad = read_output(sys.argv[2])
    limit = None if sys.argv[3] == "-" else int(sys.argv[3])
    failed = 0

    def report(ok, text):
        nonlocal failed
        print(("ok: " if ok else "FAIL: ") + text)
        failed += 0 if ok else 1

    report(bad == 0, f"{bad} of {len(written) + bad} output lines are not one JSON object with an id")

    first = {}
    for pos, event_id in enumerate(written):
        first.setdefault(event_id, pos)
    missing = [e for e in order if e not in first]
    report(not missing, f"{len(missing)} of {len(order)} staged events missing from the output"
           + (f", the first {missing[0]}" if missing else ""))
    foreign = [e for e in first if e not in key_of]
    report(not foreign, f"{len(foreign)} events in the output were never staged"
           + (f", the first {foreign[0]}" if foreign else ""))

    dups = len(written) - len(first)
    if limit is None:
        print(f"info: {dups} duplicate lines")
    else:
        report(dups <= limit, f"{dups} duplicate lines, at most {limit} allowed")

    # Per key, the staged events in the order they first reached the sink
    # must be the key's staging order.
    staged_by_key, seen_by_key = {}, {}
    for event_id in order:
        key = key_of[event_id]
        if key is not None:
            ids = staged_by_key.setdefault(key, [])
            if event_id in first:
                ids.append(event_id)
    for key, ids in staged_by_key.items():
        seen_by_key[key] = sorted(ids, key=first.__getitem__)
    broken = sorted(k for k in staged_by_key if staged_by_key[k] != seen_by_key[k])
    example = ""
    if broken:
        k = broken[0]
        i = next(i for i, (a, b) in enumerate(zip(staged_by_key[k], seen_by_key[k])) if a != b)
        example = (f"; key {k}: staged #{i} is {staged_by_key[k][i]}, "
                   f"but {seen_by_key[k][i]} reached the sink first")
    report(not broken, f"{len(broken)} of {len(staged_by_key)} keys first reached the sink "
           f"out of staging order{example}")
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
