#!/usr/bin/env bash
# The one throughput table of docs/performance.md: every store with the
# default sink and with every sink given, each run's JSON line kept, then a
# caption and one Markdown table on stdout.
#
#   tools/bench/matrix.sh BENCH "STORE_URI..." ["SINK_URI..."] [EVENTS] [REPEAT]
#
# BENCH is the outbox-bench executable (e.g. build/tools/bench/outbox-bench);
# OUTBOX_DRIVER_PATH must find the drivers when they are not installed.
# Each store gets one row per batch and pipeline with outbox-bench's default
# sink (null:, which discards every message: the store alone), then the same
# for each sink URI. EVENTS defaults to 50000, REPEAT (rounds) to 3.
#
# Environment:
#   BATCHES         batch sizes, e.g. "100 1000" (default "1000")
#   PIPELINES       pipeline depths, e.g. "1 4" (default: the relay's own,
#                   no --pipeline given)
#   WORKERS         relays (default 1)
#   KEYS            ordering keys (default 100)
#   EVENTS_<SCHEME> events for the stores of that URI scheme, upper case,
#                   e.g. EVENTS_MONGODB=3000
#   BENCH_OPTS      further outbox-bench options for every run, split on
#                   blanks, e.g. "--driver ./store-mine.so"
#   MATRIX_JSON     a file to append each run's JSON line to (default: stderr)
#
# A run that fails has its stderr shown and a "failed: ..." row; the others
# still run, and the script exits 1 at the end. URIs may hold passwords: the
# caption and the table name stores and sinks by their scheme alone.
set -euo pipefail

usage() {
    echo "usage: $0 BENCH \"STORE_URI...\" [\"SINK_URI...\"] [EVENTS] [REPEAT]" >&2
    exit 2
}
whole() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

[ $# -ge 2 ] && [ $# -le 5 ] || usage
bench=$1 stores=$2 sinks=${3:-} events=${4:-50000} repeat=${5:-3}
[ -n "${stores// /}" ] || usage
whole "$events" && whole "$repeat" || usage
[ -x "$bench" ] || { echo "$0: $bench is not an executable" >&2; exit 2; }
for v in ${BATCHES:-1000} ${PIPELINES:-} ${WORKERS:-1}; do
    whole "$v" || { echo "$0: BATCHES, PIPELINES and WORKERS take whole numbers, got \"$v\"" >&2; exit 2; }
done
[[ ${KEYS:-100} =~ ^[0-9]+$ ]] || { echo "$0: KEYS takes a whole number, got \"$KEYS\"" >&2; exit 2; }
read -ra extra <<< "${BENCH_OPTS:-}"

scheme() { printf '%s' "${1%%:*}"; }
# sed: a URI's user:password@ as ***@.
userinfo='s#([A-Za-z][A-Za-z0-9+.-]*://)[^ /@]*@#\1***@#g'
# A message without the run's URIs (each becomes its scheme) or any
# user:password@ left in it.
mask() {
    local text=$1 uri
    text=$(printf '%s' "$text" | sed -E "$userinfo")
    for uri in "${@:2}"; do
        [ -z "$uri" ] || uri=$(printf '%s' "$uri" | sed -E "$userinfo")
        [ -z "$uri" ] || text=${text//"$uri"/"$(scheme "$uri"):…"}
    done
    printf '%s' "$text"
}
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# Events for a store: EVENTS_<SCHEME> when set, else EVENTS.
store_events() {
    local name
    name=EVENTS_$(scheme "$1" | tr '[:lower:]' '[:upper:]' | tr -c 'A-Z0-9\n' '_')
    printf '%s' "${!name:-$events}"
}

rows=$(mktemp) err=$(mktemp) out=$(mktemp)
trap 'rm -f "$rows" "$err" "$out"' EXIT

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(loadavg)
failed=0
overrides=""
for store in $stores; do
    n=$(store_events "$store")
    if [ "$n" != "$events" ]; then
        whole "$n" || { echo "$0: EVENTS_ for $(scheme "$store") is not a whole number" >&2; exit 2; }
        case " $overrides " in *" $(scheme "$store"): "*) ;; *) overrides+=" $(scheme "$store"): $n";; esac
    fi
    for sink in "" $sinks; do
        for batch in ${BATCHES:-1000}; do
            for pipeline in ${PIPELINES:-default}; do
                args=(--store "$store" --events "$n" --repeat "$repeat" --batch "$batch"
                      --workers "${WORKERS:-1}" --keys "${KEYS:-100}")
                [ -z "$sink" ] || args+=(--sink "$sink")
                [ "$pipeline" = default ] || args+=(--pipeline "$pipeline")
                label=$([ -n "$sink" ] && scheme "$sink" || echo "none (null:)")
                echo "matrix: $(scheme "$store") to $label, batch $batch, pipeline $pipeline, $n events" >&2
                rc=0
                "$bench" "${args[@]}" "${extra[@]}" >"$out" 2>"$err" || rc=$?
                cat "$err" >&2
                line=$(grep -m1 '^{' "$out" || true)
                if [ "$rc" -eq 0 ] && [ -n "$line" ]; then
                    if [ -n "${MATRIX_JSON:-}" ]; then
                        printf '%s\n' "$line" >>"$MATRIX_JSON"
                    else
                        printf '%s\n' "$line" >&2
                    fi
                    printf 'ok\t%s\t%s\t%s\t%s\t%s\n' "$(scheme "$store")" "$label" "$batch" \
                        "$pipeline" "$line" >>"$rows"
                else
                    # The bench's first line that is not a note says why.
                    why=$(grep -v -m1 '^outbox-bench: note:' "$err" || true)
                    [ -n "$why" ] || why="exit $rc, no JSON line"
                    why=$(mask "$why" "$store" "$sink")
                    printf 'failed\t%s\t%s\t%s\t%s\t%s\n' "$(scheme "$store")" "$label" "$batch" \
                        "$pipeline" "${why//$'\t'/ }" >>"$rows"
                    failed=1
                fi
            done
        done
    done
done
load_after=$(loadavg)

repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
    commit+="+dirty"
fi
model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n1)
per_store=""
[ -z "$overrides" ] || per_store=" (${overrides# })"
echo "Measured $started at commit $commit on $(nproc) CPUs (${model:-model unknown}), load average" \
     "$load_before to $load_after; $events events$per_store, $repeat round$([ "$repeat" = 1 ] || echo s) each, medians."
echo

python3 - "$rows" <<'PY'
import json, sys

def num(v, fmt="%d"):
    return "–" if v is None else fmt % v

def cell(text):
    return text.replace("|", "\\|")

print("| store | sink | batch | pipeline | relay events/s | store ceiling events/s "
      "| producer ceiling events/s | ratio to the lesser ceiling (median) | ratios per round "
      "| relay CPU ms per 1k events | load |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for raw in open(sys.argv[1], encoding="utf-8"):
    status, store, sink, batch, pipeline, rest = raw.rstrip("\n").split("\t", 5)
    if status != "ok":
        print("| %s | %s | %s | %s | failed: %s | – | – | – | – | – | – |"
              % (store, sink, batch, pipeline, cell(rest)))
        continue
    r = json.loads(rest)
    # The line without a ceiling has no pipeline key: the depth asked for.
    depth = r.get("pipeline", pipeline)
    rounds = r.get("ratios_to_lesser")
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        store, sink, r["batch"], depth, num(r["events_per_s"]),
        num(r.get("ceiling_events_per_s")), num(r.get("producer_ceiling_events_per_s")),
        num(r.get("ratio_to_lesser"), "**%.2f**"),
        " ".join("%.2f" % x for x in rounds) if rounds else "–",
        num(r["cpu_s_per_1k_events"] * 1000, "%.1f"), num(r.get("loadavg"), "%.1f")))
PY
exit "$failed"
