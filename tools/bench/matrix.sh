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
#
#   tools/bench/matrix.sh --sinks BENCH "STORE_URI..." "SINK_URI..." [EVENTS] [REPEAT]
#
# The sinks' table instead: every store with every sink, batch 100 and 1000,
# one relay with its pipeline off (1) and on (PIPELINES, default "1 4"),
# each line with the same run's store and producer ceilings; then one
# Markdown table of all of them.
set -euo pipefail
if [ "${1:-}" = --sinks ]; then
    [ $# -ge 4 ] || { echo "usage: $0 --sinks BENCH \"STORE_URI...\" \"SINK_URI...\" [EVENTS] [REPEAT]" >&2; exit 2; }
    bench=$2 stores=$3 sinks=$4 events=${5:-50000} repeat=${6:-3}
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    for store in $stores; do
        for sink in $sinks; do
            for batch in 100 1000; do
                for pipeline in ${PIPELINES:-1 4}; do
                    "$bench" --store "$store" --sink "$sink" --events "$events" --repeat "$repeat" \
                        --batch "$batch" --pipeline "$pipeline" | tee -a "$out"
                done
            done
        done
    done
    python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def scheme(uri):
    return uri.split(":", 1)[0]
print()
print("| sink | store | batch | pipeline | relay events/s | store ceiling | producer ceiling "
      "| ratio to lesser | rounds | serial bound | relay / serial bound | CPU bound "
      "| busy CPUs: relay, store, producer | load |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|")
for r in rows:
    store, prod = r["ceiling_events_per_s"], r["producer_ceiling_events_per_s"]
    serial = 1 / (1 / store + 1 / prod) if store and prod else 0
    busy = r.get("busy_cores")
    bound = r.get("cpu_bound_ratio")
    print("| %s | %s | %d | %d | %d | %d | %d | **%.2f** | %s | %d | %.2f | %s | %s | %.1f |" % (
        scheme(r["sink"]), scheme(r["store"]), r["batch"], r["pipeline"], r["events_per_s"],
        store, prod, r["ratio_to_lesser"], " ".join("%.2f" % x for x in r["ratios_to_lesser"]),
        serial, r["events_per_s"] / serial if serial else 0,
        "%.2f" % bound if bound is not None else "-",
        "%.2f, %.2f, %.2f" % (busy["relay"], busy["store_ceiling"], busy["producer_ceiling"])
        if busy else "-", r["loadavg"]))
PY
    exit 0
fi
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
