#!/usr/bin/env python3
"""The end of tools/test: the ten slowest tests, the wall time of each step,
and, last, one line summing the meson test logs: N passed, N failed,
N skipped.

A Check executable counts each of its test cases (its "Checks: N,
Failures: F, Errors: E" line); a script that prints "N passed, N failed"
counts those; any other test counts once. Extra arguments of the form
name=ok|fail|skip[:MILLISECONDS] add steps that are not meson tests
(builds, service starts, fuzzing) and say how long they took."""
import json
import re
import sys

CHECK = re.compile(r"\d+%: Checks: (\d+), Failures: (\d+), Errors: (\d+)")
PLAIN = re.compile(r"^(?:\w+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", re.M)

passed = failed = skipped = 0
failures = []
durations = []  # (seconds, build:test)
step_times = []  # (name, result, seconds)
for arg in sys.argv[1:]:
    if "=" in arg and not arg.endswith(".json"):
        name, result = arg.split("=", 1)
        result, _, ms = result.partition(":")
        if ms:
            step_times.append((name, result, int(ms) / 1000))
        if result == "ok":
            passed += 1
        elif result == "skip":
            skipped += 1
        else:
            failed += 1
            failures.append(name)
        continue
    prefix = arg.split("/")[0]
    try:
        lines = open(arg).read().splitlines()
    except OSError:
        failed += 1
        failures.append(f"{prefix}: no test log")
        continue
    for line in lines:
        t = json.loads(line)
        name = f"{prefix}:{t['name']}"
        durations.append((t.get("duration", 0), f"{t['name'].rpartition(' / ')[2]} ({prefix})"))
        out = t.get("stdout", "") or ""
        result = t["result"]
        if result == "SKIP":
            skipped += 1
            continue
        ok = result in ("OK", "EXPECTEDFAIL")
        inner = None  # (passed, failed, skipped) reported by the test itself
        m = CHECK.findall(out)
        p = PLAIN.findall(out)
        if m:
            c = sum(int(x[0]) for x in m)
            f = sum(int(x[1]) + int(x[2]) for x in m)
            inner = (c - f, f, 0)
        elif p:
            inner = (int(p[-1][0]), int(p[-1][1]), int(p[-1][2] or 0))
        if inner is None:
            passed += ok
            failed += not ok
        elif ok and inner[1] > 0:
            # A test that passes because the run it watches fails (the
            # battery against a broken driver) counts once.
            passed += 1
        elif ok:
            passed += inner[0]
            skipped += inner[2]
        else:
            passed += inner[0]
            failed += max(inner[1], 1)
            skipped += inner[2]
        if not ok:
            failures.append(name)
print("slowest tests:")
for seconds, name in sorted(durations, reverse=True)[:10]:
    print(f"  {seconds:7.1f} s  {name}")
print("steps:")
for name, result, seconds in step_times:
    print(f"  {seconds:7.1f} s  {name}{'' if result == 'ok' else '  ' + result.upper()}")
for f in failures:
    print(f"FAILED: {f}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
