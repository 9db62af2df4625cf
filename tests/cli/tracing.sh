#!/usr/bin/env bash
# outbox relay's tracing flags and the config file's tracing: section: every
# bad value is one line and exit 2, a password in the endpoint is never
# printed, outbox config check describes a good section; and a relay whose
# collector is down, or never answers, still drains at full speed and says
# how many spans it dropped. Spans reaching a real collector are the
# integration test tracing_jaeger's (tests/integration/tracing.sh).
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db app
S=sqlite://$DB
relay_args=(relay --store "$S" --route r --sink "file://$TMP/out.jsonl" --until-idle)

# ------------------------------------------------------------- the flags
expect_error 'relay: --otlp-endpoint: "ftp://collector:4318" is not an http:// or https:// URL' \
    "${relay_args[@]}" --otlp-endpoint ftp://collector:4318
expect_error 'relay: --otlp-endpoint: "collector:4318" is not an http:// or https:// URL' \
    "${relay_args[@]}" --otlp-endpoint collector:4318
expect_error 'relay: --otlp-endpoint: "http://" has no host' "${relay_args[@]}" --otlp-endpoint http://
expect_error 'relay: --otlp-endpoint: .*the port must be a number 1..65535' \
    "${relay_args[@]}" --otlp-endpoint http://127.0.0.1:99999
expect_error 'relay: --otlp-endpoint: .*a query or fragment has no place' \
    "${relay_args[@]}" --otlp-endpoint 'http://127.0.0.1:4318/?x=1'
expect_error 'relay: --otlp-endpoint: "http://tracer:\*\*\*@:4318" has no host' \
    "${relay_args[@]}" --otlp-endpoint 'http://tracer:s3cret-pw@:4318'
no_secret_in s3cret-pw "$ERR" "a refused endpoint with a password"
expect_error 'relay: --otlp-endpoint: "ftp://tracer:\*\*\*@collector" is not an http' \
    "${relay_args[@]}" --otlp-endpoint 'ftp://tracer:s3cret-pw@collector'
no_secret_in s3cret-pw "$ERR" "a refused scheme with a password"
for v in 1.5 -0.1 2; do
    expect_error "relay: --trace-sample: $v is outside 0 to 1" \
        "${relay_args[@]}" --otlp-endpoint http://127.0.0.1:4318 --trace-sample "$v"
done
for v in abc '' 0.5x nan ' 1'; do
    expect_error "relay: --trace-sample: \"$v\" is not a number" \
        "${relay_args[@]}" --otlp-endpoint http://127.0.0.1:4318 --trace-sample "$v"
done
expect_error 'relay: --trace-sample needs --otlp-endpoint' "${relay_args[@]}" --trace-sample 0.5
expect_error 'relay: --trace-service-name needs --otlp-endpoint' "${relay_args[@]}" --trace-service-name x
expect_error 'relay: --trace-service-name: the service name must be 1 to 255 bytes, not 0' \
    "${relay_args[@]}" --otlp-endpoint http://127.0.0.1:4318 --trace-service-name ''
expect_error 'relay: --otlp-endpoint needs a value|--otlp-endpoint' "${relay_args[@]}" --otlp-endpoint
# A start that fails for another reason is still one line with tracing on.
expect_error 'relay: database file .*none.db does not exist' relay --store "sqlite://$TMP/none.db" --route r \
    --sink null: --until-idle --otlp-endpoint http://127.0.0.1:4318

# ----------------------------------------------------- the config file
F=$TMP/relay.yaml
base=('stores: {main: {uri: "sqlite://${OUTBOX_TEST_DB}"}}' 'sinks: {out: {uri: "file://${OUTBOX_TEST_DIR}/cfg.jsonl"}}'
    'routes: {r: {store: main, sink: out}}')
export OUTBOX_TEST_DB=$DB OUTBOX_TEST_DIR=$TMP OUTBOX_TEST_TRACE_PW=hunter2-trace
# bad LINE PATTERN LINES...: config check and relay --config both refuse the
# file holding LINES (and the base) on line LINE with PATTERN.
bad() {
    local line=$1 pattern=$2
    shift 2
    printf '%s\n' "${base[@]}" "$@" >"$F"
    expect_error "^outbox: $F:$line: $pattern" config check "$F"
    expect_error "^outbox: relay: --config: $F:$line: $pattern" relay --config "$F" --until-idle
}
bad 4 'tracing: unknown key "endpoint" \(otlp_endpoint, sample, service_name\)' 'tracing: {endpoint: "http://x:4318"}'
bad 4 'tracing: otlp_endpoint is required' 'tracing: {sample: 0.5}'
bad 4 'tracing must be a mapping' 'tracing: "http://x:4318"'
bad 4 'tracing: otlp_endpoint "grpc://x:4317" is not an http:// or https:// URL' 'tracing: {otlp_endpoint: "grpc://x:4317"}'
bad 4 'tracing: sample 1.01 is outside 0 to 1' 'tracing: {otlp_endpoint: "http://x:4318", sample: 1.01}'
bad 4 'tracing: sample "half" is not a number' 'tracing: {otlp_endpoint: "http://x:4318", sample: half}'
bad 4 'tracing: sample must be a single value' 'tracing: {otlp_endpoint: "http://x:4318", sample: [1]}'
bad 4 'tracing: service_name: the service name must be 1 to 255 bytes' 'tracing: {otlp_endpoint: "http://x:4318", service_name: ""}'
bad 4 'tracing: otlp_endpoint "ftp://tracer:\*\*\*@x" is not an http' 'tracing: {otlp_endpoint: "ftp://tracer:${OUTBOX_TEST_TRACE_PW}@x"}'
no_secret_in hunter2-trace "$ERR" "a refused endpoint from the environment"

printf '%s\n' "${base[@]}" 'tracing:' '  otlp_endpoint: "https://tracer:${OUTBOX_TEST_TRACE_PW}@collector.example:4318"' \
    '  sample: 0.25' '  service_name: billing-relay' >"$F"
if expect 0 config check "$F"; then
    has "$OUT" '^tracing: spans to https://tracer:\*\*\*@collector.example:4318 \(OTLP/HTTP\) as service billing-relay, 0.25 of the batches$' \
        "config check describes the tracing section"
    no_secret_in hunter2-trace "$OUT" "config check's output"
fi
# The flags over the file: a sample given on the command line.
expect_error 'relay: --trace-sample: 7 is outside 0 to 1' relay --config "$F" --until-idle --trace-sample 7
printf '%s\n' "${base[@]}" >"$F"
expect_error 'relay: --trace-sample needs --otlp-endpoint' relay --config "$F" --until-idle --trace-sample 0.5

# ------------------------------------------- a collector that is not there
# Nothing listens on the port: each POST fails at once. The relay drains
# all the same, and its last line counts the spans it could not export.
N=3000
outbox stage --store "$S" --route r --type t --count $N >/dev/null || fail "stage"
down=$(private_port)
t0=$SECONDS
run relay --store "$S" --route r --sink "file://$TMP/down.jsonl" --until-idle --batch 50 \
    --otlp-endpoint "http://tracer:s3cret-pw@127.0.0.1:$down"
check "relay with its collector down exits" 0 "$RC"
check "every event published" "$N" "$(wc -l <"$TMP/down.jsonl")"
has "$ERR" 'relay: tracing: 0 spans exported, [0-9]+ dropped \(queue full [0-9]+, export failed [0-9]+, rejected by the collector 0\), [1-9][0-9]* failed exports' \
    "the closing line counts the dropped spans"
dropped=$(sed -n 's/.* 0 spans exported, \([0-9]*\) dropped.*/\1/p' "$ERR")
[ "${dropped:-0}" -ge $((N / 50)) ] && pass "every batch's span was dropped ($dropped)" ||
    fail "dropped $dropped spans for $((N / 50)) batches"
has "$ERR" ' warning: relay: tracing: ' "dropped spans are a warning"
no_secret_in s3cret-pw "$ERR" "the relay's log"

# A collector that takes the connection and never answers: the POST times
# out on the export thread; the relay does not wait for it.
need_cmd python3 python3
black=$(private_port)
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
held = []
while True:
    c, _ = s.accept(); held.append(c)
' "$black" &
PIDS="$PIDS $!"
wait_until 10 port_in_use "$black" || fail "the silent listener did not start"
outbox stage --store "$S" --route r --type t --count $N >/dev/null || fail "stage"
t0=$(date +%s%N)
run relay --store "$S" --route r --sink "file://$TMP/silent.jsonl" --until-idle --batch 50 \
    --otlp-endpoint "http://127.0.0.1:$black"
ms=$((($(date +%s%N) - t0) / 1000000))
check "relay with a silent collector exits" 0 "$RC"
check "every event published past a silent collector" "$N" "$(wc -l <"$TMP/silent.jsonl")"
has "$ERR" 'relay: tracing: 0 spans exported, [1-9][0-9]* dropped .*failed exports' \
    "the closing line counts what the silent collector cost"
# Each POST gives up after 2 s; the stop posts once more. The drain itself
# is not held up: the whole run stays far below what a blocked relay,
# waiting 2 s per batch of 50, would take (60 batches: 2 minutes).
[ "$ms" -lt 20000 ] && pass "the relay was not held up by the silent collector ($ms ms)" ||
    fail "the relay took $ms ms with a silent collector"

finish
