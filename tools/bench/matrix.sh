#!/usr/bin/env bash
# Runs the throughput matrix of docs/performance.md and prints each JSON line
# and then a Markdown table.
#
#   tools/bench/matrix.sh BENCH STORE_URI [EVENTS] [REPEAT] [BENCH_OPTION...]
#
# BENCH is the outbox-bench executable (e.g. build/tools/bench/outbox-bench);
# OUTBOX_DRIVER_PATH must find the drivers when they are not installed.
# BENCH_OPTIONs go to every run, e.g. --driver ./store-mine.so (then the
# ceiling columns are left out: there is none).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BENCH STORE_URI [EVENTS] [REPEAT] [BENCH_OPTION...]" >&2; exit 2; }
bench=$1 store=$2 events=${3:-100000} repeat=${4:-3}
shift $(( $# < 4 ? $# : 4 ))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for workers in 1 2; do
    for keys in 0 100; do
        for batch in 100 1000; do
            "$bench" --store "$store" --events "$events" --repeat "$repeat" \
                --batch "$batch" --keys "$keys" --workers "$workers" "$@" | tee -a "$out"
        done
    done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
ceiling = any(r.get("ceiling_events_per_s") is not None for r in rows)
ref = any(r.get("reference_events_per_s") for r in rows)
if not ceiling:
    # Without a ceiling: the relay's numbers alone.
    print("| workers | keys | batch | relay events/s | rounds | relay CPU s | CPU s / 1k events "
          "| peak RSS KiB |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print("| %d | %d | %d | %d | %s | %.2f | %.4f | %d |" % (
            r["workers"], r["keys"], r["batch"], r["events_per_s"],
            " ".join("%d" % x for x in r["events_per_s_rounds"]), r["cpu_s"],
            r["cpu_s_per_1k_events"], r["peak_rss_kb"]))
    sys.exit(0)
print("| workers | keys | batch | relay events/s | ceiling events/s | ratio (median) | ratios |"
      + (" reference events/s | relay / reference |" if ref else "")
      + " relay CPU s | ceiling CPU s | peak RSS KiB |")
print("|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if ref else "") + "---:|---:|---:|")
for r in rows:
    extra = ""
    if ref:
        extra = " %d | %.2f |" % (r["reference_events_per_s"] or 0, r["reference_ratio"] or 0)
    print("| %d | %d | %d | %d | %d | %.2f | %s |%s %.2f | %.2f | %d |" % (
        r["workers"], r["keys"], r["batch"], r["events_per_s"], r["ceiling_events_per_s"],
        r["ratio"], " ".join("%.2f" % x for x in r["ratios"]), extra, r["cpu_s"],
        r["ceiling_cpu_s"], r["peak_rss_kb"]))
PY
