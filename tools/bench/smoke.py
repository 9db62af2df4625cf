#!/usr/bin/env python3
"""Smoke test of outbox-bench: it runs, prints one well-formed JSON line per
mode, and refuses bad input with one line and exit 2. Never checks a speed."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import urllib.parse

bench = sys.argv[1]
# The in-tree SQLite store driver and null sink as module files, and the
# SQLite driver cut down to its required entries (minimal_driver.c).
sqlite_driver, null_sink, minimal_driver = sys.argv[2:5]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run([bench] + args, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    store = "sqlite://" + os.path.join(tmp, "bench.db")

    rc, out, err = run(["--store", store, "--quick"])
    check(rc == 0, "throughput --quick exits 0 (rc %d, stderr %r)" % (rc, err))
    lines = out.strip().splitlines()
    check(len(lines) == 1, "throughput prints one line, got %r" % out)
    if rc == 0 and lines:
        row = json.loads(lines[0])
        for key in ["store", "sink", "events", "keys", "batch", "workers", "events_per_s",
                    "cpu_s", "peak_rss_kb", "ceiling_events_per_s", "ratio"]:
            check(key in row, "throughput line has %s" % key)
        check(row.get("events_per_s", 0) > 0, "events_per_s > 0")
        check(row.get("ceiling_events_per_s", 0) > 0, "ceiling_events_per_s > 0")
        check(row.get("sink") == "null:", "default sink is null:")
        # The SQLite ceiling is built from the driver's own statements; the
        # unit test ceiling_sqlite checks them, so nothing is traced here.
        check("sql_verified" in row and row["sql_verified"] is None,
              "sqlite: sql_verified present and null (the ceiling is the driver's own)")
        check((row.get("reference_events_per_s") or 0) > 0 and
              (row.get("reference_ratio") or 0) > 0,
              "sqlite runs the reference claim+mark (positive rate and ratio)")
        # null: has no broker: no producer ceiling, the lesser ceiling is the store's.
        check("producer_ceiling_events_per_s" in row and
              row["producer_ceiling_events_per_s"] is None,
              "null: sink: producer_ceiling_events_per_s present and null")
        check(row.get("ratio_to_lesser") == row.get("ratio"),
              "null: sink: ratio_to_lesser is the ratio to the store ceiling")
        growth = row.get("relay_rss_growth_kb")
        check((row.get("relay_peak_rss_kb") or 0) > 0 and growth is not None and growth >= 0,
              "the relay's peak RSS and its growth over the drain are measured")

    rc, out, err = run(["--store", store, "--quick", "--events", "1500", "--keys", "7",
                        "--batch", "50", "--workers", "2"])
    check(rc == 0, "throughput with keys and 2 workers exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row["events"] == 1500 and row["keys"] == 7 and row["workers"] == 2,
              "the line echoes the parameters")

    # --metrics: the relay runs with the CLI's metrics server on a free port.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = run(["--store", store, "--quick", "--metrics", "127.0.0.1:%d" % port])
    check(rc == 0, "throughput --metrics exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row.get("metrics") == "127.0.0.1:%d" % port and row.get("events_per_s", 0) > 0,
              "--metrics: the line names the metrics address, and the relay drained")
    # A port that is taken: one line, exit 2, before anything is measured.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        taken = s.getsockname()[1]
        rc, out, err = run(["--store", store, "--quick", "--metrics", "127.0.0.1:%d" % taken])
    check(rc == 2 and err.count("\n") == 1 and "cannot listen on" in err and out == "",
          "--metrics on a taken port: exit 2 and one line (rc %d, %r)" % (rc, err))

    rc, out, err = run(["--store", store, "--latency", "--quick", "--poll", "5ms"])
    check(rc == 0, "latency --quick exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        for key in ["p50_ms", "p99_ms", "p999_ms", "events"]:
            check(key in row, "latency line has %s" % key)
        check(row.get("events", 0) > 0 and row.get("p50_ms", -1) >= 0, "latency numbers")
        check(row.get("sink") == "in-process", "latency without --sink records in-process")

    # --sink in latency mode: the recording sink wraps the real one.
    rc, out, err = run(["--store", store, "--latency", "--quick", "--poll", "5ms", "--sink",
                        "null:"])
    check(rc == 0, "latency --sink null: exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row.get("sink") == "null:" and row.get("events", 0) > 0 and
              row.get("duplicates") == 0 and (row.get("peak_rss_kb") or 0) > 0,
              "latency --sink null: records every event once, got %r" % out)

    rc, out, err = run(["--store", store, "--sustain", "3s", "--interval", "1s", "--rate", "500",
                        "--events-per-round", "50"])
    check(rc == 0, "sustain exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        rows = [json.loads(l) for l in out.strip().splitlines()]
        check(len(rows) == 4, "sustain prints 3 interval lines and a summary, got %r" % out)
        for key in ["interval", "events_per_s", "staged_per_s", "pending", "dead_tuples"]:
            check(all(key in r for r in rows[:-1]), "sustain interval lines have %s" % key)
        last = rows[-1] if rows else {}
        for key in ["summary", "first_events_per_s", "last_events_per_s", "ratio",
                    "within_10pct", "published"]:
            check(key in last, "sustain summary has %s" % key)
        check(last.get("published", 0) > 0, "sustain published events")

    # The purger runs every 5 seconds; one 9-second interval sees it at
    # least once even when a loaded machine (the whole suite, under ASan)
    # makes its naps and its purge late.
    rc, out, err = run(["--store", store, "--sustain", "9s", "--interval", "9s", "--rate", "500",
                        "--events-per-round", "50", "--purge-after", "1ms"])
    check(rc == 0, "sustain --purge-after exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        rows = [json.loads(l) for l in out.strip().splitlines()]
        check(len(rows) == 2 and rows[0].get("purged_per_s", 0) > 0,
              "sustain --purge-after purged published rows, got %r" % out)
        check(rows[-1].get("purge_after_s") == 0.001, "the summary echoes --purge-after")

    # Without a ceiling: the SQLite driver loaded by path, as a driver built
    # outside the tree is, on a relation the bench creates with its schema apply.
    CEILING_KEYS = ["ceiling_events_per_s", "ratio", "ratios", "ceiling_cpu_s", "cpu_ratio",
                    "reference_events_per_s", "reference_ratio", "reference_ratios",
                    "sql_verified", "producer_ceiling_events_per_s", "ratio_to_lesser"]

    def check_no_ceiling(args, what, driver, events=2000):
        rc, out, err = run(args)
        check(rc == 0, "%s exits 0 (rc %d, stderr %r)" % (what, rc, err))
        lines = out.strip().splitlines()
        check(len(lines) == 1, "%s prints one line, got %r" % (what, out))
        if rc != 0 or not lines:
            return None, err
        row = json.loads(lines[0])
        check(row.get("ceiling") is False, "%s: ceiling false" % what)
        check(row.get("driver") == driver, "%s: driver %s, got %r" % (what, driver,
                                                                     row.get("driver")))
        check(row.get("events") == events, "%s echoes --events" % what)
        for key in ["events_per_s", "cpu_s", "cpu_s_per_1k_events", "peak_rss_kb",
                    "stage_events_per_s"]:
            check((row.get(key) or 0) > 0, "%s: %s > 0, got %r" % (what, key, row.get(key)))
        for key in CEILING_KEYS:
            check(key in row and row[key] is None, "%s: %s present and null" % (what, key))
        check(isinstance(row.get("events_per_s_rounds"), list) and
              len(row["events_per_s_rounds"]) == row.get("repeat"),
              "%s: one rate per round" % what)
        return row, err

    nc_db = os.path.join(tmp, "noceiling.db")
    nc_store = "sqlite://" + nc_db
    row, err = check_no_ceiling(["--driver", sqlite_driver, "--store", nc_store, "--no-ceiling",
                                 "--quick"], "--driver PATH --no-ceiling", "sqlite")
    if row:
        check(row.get("missing_entries") == [], "the SQLite driver lacks no entry")
    # Purged: the relation it created holds nothing.
    con = sqlite3.connect(nc_db)
    left = con.execute("SELECT count(*) FROM outbox_bench_driver").fetchone()[0]
    con.close()
    check(left == 0, "the no-ceiling run purged its rows (%d left)" % left)

    check_no_ceiling(["--store", nc_store, "--no-ceiling", "--quick", "--events", "1500",
                      "--keys", "7", "--batch", "50", "--workers", "2", "--repeat", "2"],
                     "--no-ceiling by scheme with keys and 2 workers", "sqlite", events=1500)

    # A driver with the required entries only: it lacks schema_apply, so it
    # cannot create a relation...
    rc, out, err = run(["--driver", minimal_driver, "--store", nc_store, "--relation", "fresh",
                        "--quick"])
    check(rc == 2 and err.count("\n") == 1 and "schema_apply" in err and out == "",
          "a driver without schema_apply is refused a new relation in one line naming it "
          "(rc %d, %r)" % (rc, err))
    # ...but runs on an existing one, without stats, purge or transactions,
    # and says so.
    row, err = check_no_ceiling(["--driver", minimal_driver, "--store", nc_store, "--quick"],
                                "a driver with the required entries only", "bench-minimal")
    if row:
        check(set(row.get("missing_entries") or []) >=
              {"stats", "purge", "schema_apply", "begin", "commit"},
              "missing_entries names what the minimal driver lacks, got %r"
              % row.get("missing_entries"))
        check("stats" in err and "purge" in err and err.count("\n") == 1,
              "one note names the missing stats and purge, got %r" % err)

    bad_inputs = [
        [],
        ["--store", store, "--events", "0"],
        ["--store", store, "--batch", "x"],
        ["--store", store, "--bogus"],
        ["--store", store, "--rate", "10"],
        ["--store", store, "--latency", "--sink", "nosuch:", "--quick"],
        ["--store", store, "--relation", "bad-name"],
        ["--store", "nosuchscheme"],
        # A scheme no driver serves. (mongodb:// is measured now, and with the
        # driver on the path an unreachable server is exit 1, not bad input.)
        ["--store", "nosuch://localhost/x", "--quick"],
        ["--store", "mongodb://localhost/x", "--table", "both", "--quick"],
        ["--store", "mongodb://localhost/x", "--latency", "--quick"],
        ["--store", store, "--sink", "null:/some/path", "--quick"],
        ["--store", store, "stray"],
        ["--store", store, "--interval", "1s"],
        ["--store", store, "--sustain", "2s", "--pg-autovacuum"],
        ["--store", store, "--sustain", "2s", "--events", "10"],
        ["--store", store, "--sustain", "1s", "--interval", "5s"],
        ["--store", store, "--purge-after", "1s"],
        ["--store", store, "--sustain", "2s", "--purge-after", "soon"],
        # No ceiling: drivers that are not store drivers, URIs no driver takes.
        ["--driver", os.path.join(tmp, "no-such-driver.so"), "--store", store, "--quick"],
        ["--driver", "no-such-driver", "--store", store, "--quick"],
        ["--driver", null_sink, "--store", store, "--quick"],
        ["--driver", "null", "--store", store, "--quick"],
        ["--driver", "", "--store", store, "--quick"],
        ["--store", "1sqlite:///tmp/x.db", "--no-ceiling", "--quick"],
        ["--store", "sqlite:///tmp/x%zz.db", "--no-ceiling", "--quick"],
        ["--driver", sqlite_driver, "--store", "sqlite://host/x.db", "--quick"],
        ["--store", "null:", "--quick"],
        ["--driver", sqlite_driver, "--store", store, "--latency"],
        ["--store", store, "--no-ceiling", "--sustain", "2s"],
        ["--store", store, "--no-ceiling", "--rate", "10"],
        ["--store", store, "--no-ceiling", "--sink", "nosuch:", "--quick"],
        # --table is PostgreSQL throughput only.
        ["--store", store, "--table", "both", "--quick"],
        ["--store", store, "--table", "sideways", "--quick"],
        # --metrics: an address, in throughput mode.
        ["--store", store, "--quick", "--metrics", "nohost"],
        ["--store", store, "--quick", "--metrics", "127.0.0.1:0"],
        ["--store", store, "--latency", "--quick", "--metrics", "127.0.0.1:9464"],
    ]
    for args in bad_inputs:
        rc, out, err = run(args)
        check(rc == 2, "%r exits 2 (got %d)" % (args, rc))
        check(err.startswith("outbox-bench: ") and err.count("\n") == 1,
              "%r gives one 'outbox-bench:' line, got %r" % (args, err))
        check(out == "", "%r prints nothing on stdout" % (args,))

    # A table the bench did not create is never dropped.
    subprocess.run(["sqlite3", os.path.join(tmp, "bench.db"),
                    "CREATE TABLE precious (x INTEGER)"], check=False)
    if os.path.exists(os.path.join(tmp, "bench.db")):
        rc, out, err = run(["--store", store, "--quick", "--relation", "precious"])
        check(rc == 2 and "not created by outbox-bench" in err,
              "an existing table is refused (rc %d, %r)" % (rc, err))
        # Without a ceiling a foreign table is used only if the driver can:
        # this one it refuses, and it stays as it was.
        rc, out, err = run(["--store", store, "--quick", "--no-ceiling", "--relation", "precious"])
        check(rc == 2 and err.count("\n") == 1 and out == "",
              "--no-ceiling refuses a table that is not an outbox in one line (rc %d, %r)"
              % (rc, err))
        con = sqlite3.connect(os.path.join(tmp, "bench.db"))
        cols = [r[1] for r in con.execute("PRAGMA table_info(precious)")]
        con.close()
        check(cols == ["x"], "the foreign table is unchanged, got columns %r" % cols)

# A store or sink that cannot be opened is never shown with its password.
with tempfile.TemporaryDirectory() as tmp:
    ok_store = "sqlite://" + os.path.join(tmp, "pw.db")
    for args, what in [(["--store", "postgresql://u:S3cretPW@127.0.0.1:1/x", "--no-ceiling",
                         "--quick"], "store"),
                       (["--store", "postgresql://u:S3cretPW@127.0.0.1:1/x", "--quick"], "store"),
                       (["--store", ok_store, "--sink", "redis://u:S3cretPW@127.0.0.1:1/s",
                         "--no-ceiling", "--quick"], "sink")]:
        rc, out, err = run(args)
        check(rc != 0 and err.count("\n") == 1 and "S3cretPW" not in out + err,
              "an unreachable %s with a password: one line, no password (rc %d, %r)"
              % (what, rc, err))

# The PostgreSQL ceiling's script in the repo is what the bench runs.
rc, out, err = run(["--pgbench-script", "--relation", "smk", "--batch", "7"])
if rc == 0:
    # The driver's claim and settle (drivers/store-postgres/ceiling.c builds
    # them with the driver's builders; its test compares them) for the
    # relation and batch asked for.
    statements = [l for l in out.splitlines() if l and not l.startswith("--")]
    check(len(statements) >= 2 and '"smk_ceiling"' in statements[0]
          and "LIMIT 7" in statements[0] and ":route" in statements[0],
          "--pgbench-script prints the claim for --relation and --batch")
else:
    check(rc == 2 and "without libpq" in err, "--pgbench-script without libpq says so")

# PostgreSQL, when the test environment has a server and pgbench.
pg = os.environ.get("OUTBOX_PG_URI")
have_pgbench = shutil.which("pgbench") or any(
    os.access("/usr/lib/postgresql/%d/bin/pgbench" % v, os.X_OK) for v in range(10, 31))
if pg and rc == 0 and have_pgbench:
    rc, out, err = run(["--store", pg, "--quick", "--relation", "outbox_bench_smoke"])
    check(rc == 0, "postgres --quick exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row.get("events_per_s", 0) > 0 and row.get("ceiling_events_per_s", 0) > 0,
              "postgres rates are positive")
        check(row.get("cpu_ratio", 0) is None, "postgres has no cpu_ratio")
        check((row.get("reference_events_per_s") or 0) > 0 and
              (row.get("reference_ratio") or 0) > 0,
              "postgres runs the reference claim+mark (positive rate and ratio)")
        check(row.get("table") == "shipped" and row.get("two_index_events_per_s", 0) is None,
              "postgres default table is shipped, no two-index numbers")
    rc, out, err = run(["--store", pg, "--quick", "--relation", "outbox_bench_smoke", "--table",
                        "both", "--repeat", "2"])
    check(rc == 0, "postgres --table both exits 0 (rc %d, stderr %r)" % (rc, err))
    if rc == 0:
        row = json.loads(out)
        check(row.get("table") == "both" and (row.get("two_index_events_per_s") or 0) > 0 and
              (row.get("two_index_ratio") or 0) > 0 and len(row.get("two_index_rounds") or []) == 2,
              "--table both: positive two-index rate and ratio, one rate per round")
        check(row.get("ceiling") is False and row.get("ceiling_events_per_s", 0) is None,
              "--table both runs no ceiling")
    rc, out, err = run(["--store", pg, "--no-ceiling", "--table", "two-index", "--quick"])
    check(rc == 2 and err.count("\n") == 1 and out == "",
          "--table with --no-ceiling is refused in one line (rc %d, %r)" % (rc, err))

# Real sinks, when the environment has their brokers (tools/test starts
# them): the relay publishes through the sink driver, the sink's own
# producer ceiling (built with the driver: a sink that runs has one)
# gives the producer's rate. Without the variable the cases
# are skipped, loudly; under CI=true tools/test sets them, so their absence
# is a failure there.
for var, scheme in [("OUTBOX_KAFKA_URI", "kafka"), ("OUTBOX_NATS_URI", "nats"),
                    ("OUTBOX_REDIS_URI", "redis"), ("OUTBOX_HTTP_URI", "http"),
                    ("OUTBOX_RABBITMQ_URI", "amqp")]:
    uri = os.environ.get(var)
    if not uri:
        if os.environ.get("CI") == "true":
            check(False, "%s is not set under CI=true (tools/test starts the broker)" % var)
        else:
            print("SKIP: the %s sink cases: %s is not set (tools/test sets it)" % (scheme, var),
                  file=sys.stderr)
            print("SKIP: the %s sink cases: %s is not set" % (scheme, var))
        continue
    with tempfile.TemporaryDirectory() as tmp:
        store = "sqlite://" + os.path.join(tmp, "bench.db")
        rc, out, err = run(["--store", store, "--quick", "--sink", uri])
        check(rc == 0, "%s throughput --quick exits 0 (rc %d, stderr %r)" % (scheme, rc, err))
        if rc == 0:
            row = json.loads(out)
            check(row.get("events_per_s", 0) > 0, "%s: relay rate > 0" % scheme)
            pw = urllib.parse.urlsplit(uri).password
            check(not pw or ":%s@" % pw not in out,
                  "%s: the JSON line shows the sink URI without its password" % scheme)
            pc = row.get("producer_ceiling_events_per_s")
            check(row.get("producer_ceiling") and (pc or 0) > 0 and
                  len(row.get("producer_ceiling_rounds") or []) == 1,
                  "%s: the sink's producer ceiling ran, rate > 0, one per round, got %r"
                  % (scheme, row))
            if pc:
                lesser = min(row["ceiling_events_per_s"], pc)
                check(abs(row["ratio_to_lesser"] - row["events_per_s"] / lesser) < 0.02,
                      "%s: ratio_to_lesser is relay / min(ceilings), got %r" % (scheme, row))
                busy, bound = row.get("busy_cores"), row.get("cpu_bound_ratio")
                check(busy is not None and busy["cpus"] >= 1 and
                      all(0 < busy[k] <= busy["cpus"] + 0.1
                          for k in ("relay", "store_ceiling", "producer_ceiling")),
                      "%s: busy_cores of each drain within the machine's CPUs, got %r"
                      % (scheme, busy))
                if busy is not None and bound is not None:
                    # The bound recomputed from the row (one round: no medians to mix).
                    per = (busy["store_ceiling"] / row["ceiling_events_per_s"] +
                           busy["producer_ceiling"] / pc)
                    want = min(1.0, busy["cpus"] / per / lesser)
                    check(abs(bound - want) < 0.02,
                          "%s: cpu_bound_ratio is cpus / CPU per event / lesser, got %r, want %.3f"
                          % (scheme, bound, want))
        # A destination template without {destination} would send every
        # round to one place: refused before anything is staged.
        fixed = (uri + "?routing_key=fixed" if scheme == "amqp" else
                 uri + ("fixed" if uri.endswith("/") else "/fixed"))
        rc, out, err = run(["--store", store, "--quick", "--sink", fixed])
        check(rc == 2 and err.count("\n") == 1 and "one place" in err,
              "%s: a fixed destination template is refused in one line (rc %d, %r)"
              % (scheme, rc, err))
        rc, out, err = run(["--store", store, "--latency", "--quick", "--poll", "5ms", "--sink",
                            uri])
        check(rc == 0, "%s latency --quick exits 0 (rc %d, stderr %r)" % (scheme, rc, err))
        if rc == 0:
            row = json.loads(out)
            check(row.get("sink", "").startswith(scheme) and row.get("events", 0) > 0 and
                  row.get("duplicates") == 0,
                  "%s latency: every event acknowledged once, got %r" % (scheme, out))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("ok")
