#!/usr/bin/env python3
"""What each fault of a cluster test cost, as a consumer saw it: printed,
never checked (a figure depends on the machine's load).

    figures.py READ.jsonl TIMES.tsv FAULTS.tsv BURSTS FROM_MS TO_MS

READ.jsonl: what the test's reader wrote, one message a line in the order
read, with "id", "ts" (when the broker stored it, ms since the epoch) and,
for Kafka, "partition". TIMES.tsv: "event_id<TAB>created_at_ms", when each
event was committed to the store. FAULTS.tsv: "kind<TAB>at_ms<TAB>victim
<TAB>partitions", the partitions the victim led when it was killed
(comma-separated, or "-"). BURSTS: "first last" a line, the serial numbers
("n" in each payload) of the events staged as a backlog, left out of
commit-to-publish (they wait for the backlog ahead of them, whatever the
fault). FROM_MS and TO_MS: while events were staged.

Two measures, each over a fault's window (from the fault to the next one,
at most 30 s; the test keeps staging until the last fault's backlog is
worked off):

- publish gap: the longest time between two messages stored one after the
  other on one partition (a stream counts as one partition), the later one
  stored within the window; with events staged all the time this is how
  long the partition stood still;
- commit-to-publish: the longest time from an event's commit to its first
  copy stored by the broker, for the events of the steady trickle committed
  at most 2 s before the fault and first stored within the window; it
  includes the time to work off what piled up during the pause.

For a Kafka leader's kill each is split between the partitions the killed
leader led and the others ("healthy"); a relay's kill, and a stream, are
one group. The
longest pause overall is the longest time in which no message at all was
stored, while events were staged.
"""
import json
import sys

WINDOW_MS = 30_000
BEFORE_MS = 2_000


def load(read_path, times_path, faults_path, bursts_path):
    with open(bursts_path, encoding="utf-8") as f:
        bursts = [tuple(map(int, line.split())) for line in f if line.strip()]
    msgs, in_burst = [], set()
    with open(read_path, encoding="utf-8") as f:
        for line in f:
            m = json.loads(line)
            msgs.append((m["id"], m.get("partition", 0), int(m["ts"])))
            n = (m.get("data") or {}).get("n")
            if isinstance(n, int) and any(lo <= n <= hi for lo, hi in bursts):
                in_burst.add(m["id"])
    created = {}
    with open(times_path, encoding="utf-8") as f:
        for line in f:
            event_id, ms = line.split()
            created[event_id] = int(float(ms))
    faults = []
    with open(faults_path, encoding="utf-8") as f:
        for line in f:
            kind, at, victim, parts = line.rstrip("\n").split("\t")
            led = set() if parts == "-" else {int(p) for p in parts.split(",")}
            faults.append((kind, int(at), victim, led))
    for event_id in in_burst:
        created.pop(event_id, None)
    return msgs, created, faults


def longest_gap(times, lo, hi):
    """The longest gap between neighbours of sorted TIMES that ends in
    (lo, hi]: a pause belongs to the window in which it ended (the fault
    that began it is the window's, at lo)."""
    best = 0
    for a, b in zip(times, times[1:]):
        if lo < b <= hi:
            best = max(best, b - a)
    return best


def seconds(ms):
    return f"{ms / 1000:.2f} s"


def main():
    if len(sys.argv) != 7:
        print(__doc__)
        return 2
    msgs, created, faults = load(*sys.argv[1:5])
    t_from, t_to = int(sys.argv[5]), int(sys.argv[6])

    first = {}
    by_part = {}
    for event_id, part, ts in msgs:
        first.setdefault(event_id, (part, ts))
        by_part.setdefault(part, []).append(ts)
    for times in by_part.values():
        times.sort()
    dups = len(msgs) - len(first)
    kafka = len(by_part) > 1
    # After the trickle stops the backlog drains and then nothing comes:
    # no gap ends after that.
    every = sorted(ts for _, _, ts in msgs)
    overall = longest_gap(every, t_from, every[-1] if every else t_to)

    # Per fault, per group of partitions: (publish gap, commit-to-publish).
    worst = {}
    for i, (kind, at, victim, led) in enumerate(faults):
        end = min(at + WINDOW_MS, faults[i + 1][1]) if i + 1 < len(faults) else at + WINDOW_MS
        if kafka and kind == "leader":
            groups = {"healthy": [p for p in by_part if p not in led],
                      "killed leader's": [p for p in by_part if p in led]}
        else:
            groups = {"all": list(by_part)}
        texts = []
        for name, parts in groups.items():
            if not parts:
                continue
            gap = max(longest_gap(by_part[p], at, end) for p in parts)
            c2p = max((ts - created[e] for e, (p, ts) in first.items()
                       if p in parts and e in created and at - BEFORE_MS <= created[e]
                       and at < ts <= end), default=0)
            label = f"{name} partitions {','.join(map(str, sorted(parts)))}: " if kafka else ""
            texts.append(f"{label}publish gap {seconds(gap)}, commit-to-publish {seconds(c2p)}")
            key = (kind, name)
            old = worst.get(key, (0, 0))
            worst[key] = (max(old[0], gap), max(old[1], c2p))
        print(f"fault {i + 1}: {kind} kill of {victim} at +{seconds(at - t_from)}; " + "; ".join(texts))

    n_leader = sum(1 for f in faults if f[0] == "leader")
    line = (f"figures: faults {len(faults)} ({n_leader} leader kills, {len(faults) - n_leader} relay kills), "
            f"events {len(first)}, duplicates {dups}, longest pause overall {seconds(overall)}")
    for (kind, name), (gap, c2p) in sorted(worst.items()):
        what = f"{name} partitions" if kafka else "the stream"
        line += f"; {kind} kills, {what}: longest gap {seconds(gap)}, commit-to-publish {seconds(c2p)}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
