#!/usr/bin/env python3
"""Smoke test of outbox-bench on the MongoDB store: one short throughput run
against the Mongo ceiling prints one well-formed line. Never checks a speed.

The server is the one OUTBOX_MONGO_URI names (tools/test starts FerretDB and
sets it). Without it the test is skipped (exit 77), except under CI=true,
where tools/test sets it and its absence is a failure. On a server that is
not FerretDB the ceiling refuses to run (it serves only the driver's FerretDB
path): the test then checks the refusal and runs --no-ceiling instead."""
import json
import os
import re
import subprocess
import sys

bench = sys.argv[1]
uri = os.environ.get("OUTBOX_MONGO_URI")
if not uri:
    if os.environ.get("CI") == "true":
        print("FAIL: OUTBOX_MONGO_URI is not set under CI=true (tools/test starts FerretDB)")
        sys.exit(1)
    print("SKIP: OUTBOX_MONGO_URI is not set (eval \"$(tools/services/ferretdb.sh start DIR)\")")
    sys.exit(77)

# A database of the test's own, so nothing else on the server is in reach.
store = re.sub(r"^(mongodb(\+srv)?://[^/]*)/[^?]*", r"\1/outbox_bench_smoke", uri)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run([bench] + args, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout, p.stderr


# A few hundred events: FerretDB takes milliseconds per command, and a cycle
# of 100 is some 400 commands.
rc, out, err = run(["--store", store, "--events", "400", "--repeat", "1"])
if rc == 2 and "not FerretDB" in err:
    check(err.count("\n") == 1 and out == "",
          "the ceiling refuses a server that is not FerretDB in one line (%r)" % err)
    rc, out, err = run(["--store", store, "--events", "400", "--repeat", "1", "--no-ceiling"])
    check(rc == 0, "mongo --no-ceiling exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row.get("events_per_s", 0) > 0 and row.get("ceiling_events_per_s", 0) is None,
              "mongo --no-ceiling: positive rate, no ceiling")
else:
    check(rc == 0, "mongo throughput exits 0 (rc %d, stderr %r)" % (rc, err))
    lines = out.strip().splitlines()
    check(len(lines) == 1, "mongo throughput prints one line, got %r" % out)
    if rc == 0 and lines:
        row = json.loads(lines[0])
        check(row.get("driver") == "mongo", "the relay ran the mongo driver")
        check(row.get("events") == 400, "400 events")
        check(row.get("events_per_s", 0) > 0 and (row.get("ceiling_events_per_s") or 0) > 0,
              "mongo rates are positive")
        check((row.get("ratio") or 0) > 0 and len(row.get("ratios") or []) == 1,
              "mongo ratio positive, one round")
        check(row.get("cpu_ratio") is not None, "the mongo ceiling runs in process: cpu_ratio")
        check("sql_verified" in row and row["sql_verified"] is None,
              "the mongo ceiling is not traced at run time (sql_verified null)")

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("ok")
