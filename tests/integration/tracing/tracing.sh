#!/usr/bin/env bash
# Spans from outbox relay to a real Jaeger (tools/services/jaeger.sh): events
# staged on SQLite, some with a traceparent, relayed into a file sink with
# --otlp-endpoint; then Jaeger's query API (/api/v3/traces) must show one
# "publish" span per batch with its name, kind, attributes and message
# count, links to each staged context, and every message in the file must
# carry its span's context; a batch of one trace is a child of it. With
# --trace-sample 0 nothing is exported and the rows' own contexts go out.
# With the collector stopped the relay still drains, and both /metrics and
# its closing line count the dropped spans.
# Usage: tracing.sh OUTBOX SPANS_PY
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
SPANS=${2:?usage: $0 OUTBOX SPANS_PY}
need_service jaeger
need_cmd curl curl
need_cmd python3 python3
need_cmd sqlite3 sqlite3
QUERY=${OUTBOX_JAEGER_QUERY_URL:?tools/services/jaeger.sh exports it with OUTBOX_JAEGER_URI}
SERVICE=outbox-test-$$-$RANDOM

DB=$TMP/app.db
S=sqlite://$DB
outbox schema apply --store "$S" --traceparent --yes-i-know >/dev/null 2>"$ERR" || { fail "schema: $(cat "$ERR")"; finish; }

TP_A=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
TP_B=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TP_C=00-5c2e0a1f3b4d5e6f708192a3b4c5d6e7-1a2b3c4d5e6f7081-01
TP_D=00-6d3f1b2a4c5e6f708192a3b4c5d6e7f8-2b3c4d5e6f708192-01

# stage ROUTE COUNT [TRACEPARENT]: COUNT events in one transaction.
stage() {
    outbox stage --store "$S" --route "$1" --type t --count "$2" ${3:+--traceparent "$3"} >/dev/null 2>"$ERR" ||
        fail "stage $*: $(cat "$ERR")"
}

# jaeger_spans SERVICE FILE: Jaeger's traces of SERVICE (the last hour) into FILE.
jaeger_spans() {
    local from to
    from=$(date -u -d '-1 hour' +%Y-%m-%dT%H:%M:%SZ)
    to=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
    curl -fsS --max-time 5 -o "$2" \
        "$QUERY/api/v3/traces?query.service_name=$1&query.start_time_min=$from&query.start_time_max=$to&query.num_traces=1000" \
        2>/dev/null || echo '{}' >"$2"
}

# spans_at_least SERVICE N: Jaeger holds N spans of SERVICE (for wait_until).
spans_at_least() {
    jaeger_spans "$1" "$TMP/traces.json"
    [ "$(python3 "$SPANS" count "$TMP/traces.json" "$1")" -ge "$2" ]
}

# ------------------------------------------------- spans for every batch
# orders, batch 5: four events of trace A and one of B, then two of B and
# three without a context: two batches, each a trace of its own that links
# to the contexts of its messages. one: three events of trace C, one batch
# of one trace: its span is a child of C.
stage orders 4 "$TP_A"
stage orders 3 "$TP_B"
stage orders 3
stage one 3 "$TP_C"
t0=$SECONDS
for route in orders one; do
    run relay --store "$S" --route $route --sink "file://$TMP/$route.jsonl" --until-idle --batch 5 \
        --otlp-endpoint "$OUTBOX_JAEGER_URI" --trace-service-name "$SERVICE"
    check "relay $route with tracing exits" 0 "$RC"
    has "$ERR" "relay: tracing: [0-9]+ spans exported, 0 dropped" "relay $route: the closing line"
done
wait_until 20 spans_at_least "$SERVICE" 3 && pass "Jaeger has the 3 spans after $((SECONDS - t0)) s" ||
    fail "Jaeger shows $(python3 "$SPANS" count "$TMP/traces.json" "$SERVICE") spans of $SERVICE after 20 s"
sqlite3 -separator "$(printf '\t')" "$DB" \
    "SELECT outbox_route, event_id, coalesce(traceparent, '') FROM outbox ORDER BY created_at, id" >"$TMP/staged.tsv"
python3 "$SPANS" check "$TMP/traces.json" "$SERVICE" "$TMP/staged.tsv" \
    "orders:$TMP/orders.jsonl:2:5" "one:$TMP/one.jsonl:1:5:parented"
FAILED=$((FAILED + $?))

# ------------------------------------------------------------ sample 0
stage zero 4 "$TP_D"
run relay --store "$S" --route zero --sink "file://$TMP/zero.jsonl" --until-idle \
    --otlp-endpoint "$OUTBOX_JAEGER_URI" --trace-service-name "$SERVICE-zero" --trace-sample 0
check "relay with --trace-sample 0 exits" 0 "$RC"
has "$ERR" "relay: tracing: 0 spans exported, 0 dropped" "sample 0: nothing exported, nothing dropped"
check "sample 0: the messages keep their rows' context" "4 $TP_D" \
    "$(grep -c "\"traceparent\":\"$TP_D\"" "$TMP/zero.jsonl") $TP_D"
# Whatever was sent would be there by now: the relay posted before it exited.
jaeger_spans "$SERVICE-zero" "$TMP/zero.json"
check "sample 0: Jaeger has no span" 0 "$(python3 "$SPANS" count "$TMP/zero.json" "$SERVICE-zero")"

# ------------------------------------------- a collector that went away
# A private Jaeger that takes spans, then stops: the relay drains all the
# same, and counts what it could not export.
private_server jaeger
stage down 1 "$TP_A"
run relay --store "$S" --route down --sink "file://$TMP/down.jsonl" --until-idle \
    --otlp-endpoint "$PRIV_URI" --trace-service-name "$SERVICE-down"
has "$ERR" "relay: tracing: 1 spans exported, 0 dropped" "the private collector took a span"
server jaeger "$PRIV_DIR" stop
N=2000
outbox stage --store "$S" --route down --type t --count $N >/dev/null || fail "stage"
t1=$(date +%s%N)
run relay --store "$S" --route down --sink "file://$TMP/down.jsonl" --until-idle --batch 50 \
    --otlp-endpoint "$PRIV_URI" --trace-service-name "$SERVICE-down"
ms=$((($(date +%s%N) - t1) / 1000000))
check "relay with the collector stopped exits" 0 "$RC"
check "every event published with the collector stopped" $((N + 1)) "$(wc -l <"$TMP/down.jsonl")"
has "$ERR" "relay: tracing: 0 spans exported, ([4-9][0-9]) dropped \(queue full [0-9]+, export failed [0-9]+, rejected by the collector 0\), [1-9][0-9]* failed exports" \
    "the closing line counts the dropped spans"
echo "drained $N events in $ms ms with the collector stopped"

# The same through /metrics, on a relay that keeps running.
mport=$(private_port)
background relay "$OUTBOX" relay --store "$S" --route down --sink "file://$TMP/down.jsonl" --poll 20ms \
    --otlp-endpoint "$PRIV_URI" --trace-service-name "$SERVICE-down" --metrics-listen "127.0.0.1:$mport"
RELAY_PID=$BG_PID
wait_until 20 curl -fs -o /dev/null "http://127.0.0.1:$mport/healthz" || fail "the metrics endpoint did not come up"
outbox stage --store "$S" --route down --type t --count 100 >/dev/null || fail "stage"
dropped_metric() {
    curl -fs "http://127.0.0.1:$mport/metrics" -o "$TMP/scrape" &&
        grep -Eq '^outbox_trace_spans_dropped_total\{reason="export_failed"\} [1-9]' "$TMP/scrape"
}
wait_until 20 dropped_metric && pass "/metrics: $(grep -E '^outbox_trace_spans_dropped_total\{reason="export_failed"\}' "$TMP/scrape")" ||
    fail "/metrics never counted a dropped span: $(grep outbox_trace "$TMP/scrape")"
has "$TMP/scrape" '^outbox_trace_export_failures_total [1-9]' "/metrics counts the failed exports"
has "$TMP/scrape" '^outbox_trace_spans_exported_total 0$' "/metrics: nothing exported"
has "$TMP/scrape" '^outbox_trace_spans_dropped_total\{reason="queue_full"\} 0$' "/metrics: the queue never filled"
stop_process "$RELAY_PID" TERM
check "the relay stops cleanly" 0 "$RC"

finish
