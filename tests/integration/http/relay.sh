#!/usr/bin/env bash
# End to end through the HTTP sink, each request checked by code nobody
# here wrote (the CloudEvents SDK, Python's hmac):
#
#  1. `outbox stage` into SQLite, and into PostgreSQL when OUTBOX_PG_URI is
#     set, then `outbox relay --until-idle` to the receiver of
#     OUTBOX_HTTP_URI; read_requests.py parses every stored request as a
#     binary-mode CloudEvent: ids, payloads and attributes match what the
#     store holds, each event arrived once, and (SQLite) each request's
#     Standard Webhooks signature checks out against the secret.
#  2. On a private receiver of this test (tools/services/http.sh in $TMP):
#     the relay killed with SIGKILL and restarted several times, and the
#     receiver stopped and started, then killed with SIGKILL and started,
#     all under a running relay. Then: nothing lost, each key's events
#     first reach the receiver in staging order, duplicates (HTTP has no
#     dedupe) at most a batch per fault, every row published.
#
#   relay.sh OUTBOX_CLI
. "$(dirname "$0")/../../faults/lib.sh" "$1"

HERE=$(cd "$(dirname "$0")" && pwd)
HTTP_SERVICE=$SRC_ROOT/tools/services/http.sh
PRIVATE_HTTP=""
eval "orig_$(declare -f cleanup)"
cleanup() {
    [ -n "$PRIVATE_HTTP" ] && "$HTTP_SERVICE" stop "$PRIVATE_HTTP" >/dev/null 2>&1
    orig_cleanup
}

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: the HTTP sink tests must run in CI"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** Start a receiver with eval \"\$(tools/services/http.sh start /tmp/outbox-http)\" and make the"
    echo "*** Python clients with eval \"\$(tools/services/pyclients.sh)\", then run the tests again."
    echo
    exit 77
}

[ -n "${OUTBOX_HTTP_URI:-}" ] || skip "OUTBOX_HTTP_URI is not set"
if [ -z "${OUTBOX_PYTHON:-}" ]; then
    py_env=$("$SRC_ROOT/tools/services/pyclients.sh" 2>"$TMP/pyclients.err") ||
        skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")"
    eval "$py_env"
fi
PY=$OUTBOX_PYTHON

# stage_events STORE ROUTE N [ARGS]: N events, in transactions of one key
# each (a fifth without a key), keys interleaved.
SEQ=0
stage_events() {
    local store=$1 route=$2 goal=$3 size key i done=0 out
    shift 3
    while [ $done -lt "$goal" ]; do
        size=$((1 + RANDOM % 120))
        if [ $((RANDOM % 5)) = 0 ]; then key=(); else key=(--key "k$((RANDOM % 12))"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i)),\"s\":\"caf\u00e9\"}"; done >"$TMP/batch"
        out=$("$OUTBOX" stage --store "$store" "$@" --route "$route" --type "t.$((SEQ % 3))" \
            "${key[@]}" --payload - <"$TMP/batch") || { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        done=$((done + ${out#staged }))
    done
}

# check_requests URL PATH STAGED ROUTE MAX_DUPLICATES [SECRET]: read back and compare.
check_requests() {
    local url=$1 path=$2 staged=$3 route=$4 dups=$5
    shift 5
    "$PY" "$HERE/read_requests.py" "$url" "$path" "$TMP/read.jsonl" "$staged" "$route" "$@" \
        >"$TMP/read.out" 2>&1
    local rc=$?
    cat "$TMP/read.out"
    [ $rc = 0 ] || fail "read_requests.py on $path exited $rc"
    analyze "$staged.ids" "$TMP/read.jsonl" "$dups"
}

sqlite_staged() {
    sqlite3 -cmd '.timeout 10000' -separator "$(printf '\t')" "$DB" \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM outbox ORDER BY created_at, id" >"$1"
    cut -f1,2 "$1" >"$1.ids"
}

BASE=${OUTBOX_HTTP_URI%/}

# ---------------------------------------------------------- 1. round trips
echo "== SQLite -> HTTP ($BASE)"
HOOK=itn_$$_sqlite
new_db e2e
stage_events "sqlite:$DB" orders 400
# A password in the URI and a signing secret from the environment: no line
# of the relay's log shows either.
SECRET=Http5ecretPw
export OUTBOX_IT_SIGNING=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
WITH_PW=$(echo "$BASE" | sed "s#^http://#http://outbox:$SECRET@#")
"$OUTBOX" relay --store "sqlite:$DB" --route orders \
    --sink "$WITH_PW/$HOOK?hmac_secret_env=OUTBOX_IT_SIGNING" --until-idle \
    --batch 100 2>"$TMP/relay-sqlite.log" || fail "relay to HTTP: $(tail -2 "$TMP/relay-sqlite.log")"
if grep -q -e "$SECRET" -e "${OUTBOX_IT_SIGNING#whsec_}" "$TMP/relay-sqlite.log"; then
    fail "the relay's log shows a secret: $(grep -e "$SECRET" -e "${OUTBOX_IT_SIGNING#whsec_}" "$TMP/relay-sqlite.log" | head -2)"
else
    pass "no secret in the relay's $(wc -l <"$TMP/relay-sqlite.log" | tr -d ' ') log lines ($(grep -m1 -o 'sink http://[^ ]*' "$TMP/relay-sqlite.log"))"
fi
sqlite_staged "$TMP/staged-sqlite"
check_requests "$BASE" "/$HOOK" "$TMP/staged-sqlite" orders 0 "$OUTBOX_IT_SIGNING"

if [ -n "${OUTBOX_PG_URI:-}" ]; then
    echo "== PostgreSQL -> HTTP"
    REL=ith_$$
    "$OUTBOX" schema apply --store "$OUTBOX_PG_URI" --relation "$REL" --yes-i-know >/dev/null ||
        fail "schema apply on PostgreSQL"
    HOOK=itn_$$_pg
    stage_events "$OUTBOX_PG_URI" payments 400 --relation "$REL"
    "$OUTBOX" relay --store "$OUTBOX_PG_URI" --relation "$REL" --route payments \
        --sink "$BASE/$HOOK" --until-idle --batch 100 2>"$TMP/relay-pg.log" ||
        fail "relay from PostgreSQL: $(tail -2 "$TMP/relay-pg.log")"
    psql -X -qtA -F "$(printf '\t')" -v ON_ERROR_STOP=1 "$OUTBOX_PG_URI" -c \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $REL
         WHERE outbox_route = 'payments' ORDER BY created_at, id" >"$TMP/staged-pg" ||
        fail "psql read of $REL"
    cut -f1,2 "$TMP/staged-pg" >"$TMP/staged-pg.ids"
    check_requests "$BASE" "/$HOOK" "$TMP/staged-pg" payments 0
    psql -X -q "$OUTBOX_PG_URI" -c "DROP TABLE $REL" >/dev/null 2>&1
elif [ "${CI:-}" = true ]; then
    fail "OUTBOX_PG_URI is not set and CI=true: the PostgreSQL half did not run"
else
    echo "*** the PostgreSQL half is skipped: OUTBOX_PG_URI is not set ***"
fi

# ------------------------------------------------------------- 2. faults
echo "== faults on a private receiver"
PRIVATE_HTTP=$TMP/http
env=
for try in 1 2 3 4 5; do
    if env=$(OUTBOX_HTTP_PORT=$((27100 + RANDOM % 1800)) "$HTTP_SERVICE" start "$PRIVATE_HTTP" 2>"$TMP/http-start.err"); then
        break
    fi
    env=
    "$HTTP_SERVICE" stop "$PRIVATE_HTTP" >/dev/null 2>&1
    rm -rf "$PRIVATE_HTTP"
done
PRIV_URI=$(sed -n 's/^export OUTBOX_HTTP_URI=//p' <<<"$env")
PRIV_URI=${PRIV_URI%/}
[ -n "$PRIV_URI" ] || { fail "no private receiver would start: $(tail -1 "$TMP/http-start.err")"; finish; }
echo "private receiver at $PRIV_URI"
HOOK=itn_faults
new_db faults
stage_events "sqlite:$DB" orders 3000
sql() { sqlite3 -cmd '.timeout 10000' "$DB" "$1"; }

BATCH=50
STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "sqlite:$DB" --route orders \
        --sink "$PRIV_URI/$HOOK?timeout=2s&connect_timeout=500ms" --batch $BATCH --lease 1s --poll 10ms \
        --backoff-base 100ms --backoff-cap 500ms
}

relay
KILLS=$(faults 4 12)
for k in $(seq 1 "$KILLS"); do
    wait_started "$LOG" 1 || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; break; }
    random_sleep 100 500
    kill9 "$BG_PID"
    [ "$(sql "SELECT count(*) FROM outbox WHERE status = 'pending'")" -ge 500 ] || stage_events "sqlite:$DB" orders 800
    relay
done
wait_started "$LOG" 1
random_sleep 100 400
"$HTTP_SERVICE" stop "$PRIVATE_HTTP" || fail "http.sh stop"
random_sleep 200 800
"$HTTP_SERVICE" start "$PRIVATE_HTTP" >/dev/null || fail "http.sh start after stop"
stage_events "sqlite:$DB" orders 800
random_sleep 200 600
"$HTTP_SERVICE" kill "$PRIVATE_HTTP" || fail "http.sh kill"
random_sleep 200 800
"$HTTP_SERVICE" start "$PRIVATE_HTTP" >/dev/null || fail "http.sh start after kill"

end=$((SECONDS + 120))
while [ "$(sql "SELECT count(*) FROM outbox WHERE status <> 'published'")" != 0 ] && [ $SECONDS -lt $end ]; do
    sleep 0.2
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
# The receiver faults fell on the last relay: it must have seen the outage.
outage=$(grep -c -E 'POST .* failed' "$LOG")
[ "$outage" -gt 0 ] && pass "the last relay saw the receiver down ($outage log lines, e.g. $(grep -m1 -E 'POST .* failed' "$LOG" | cut -c1-200))" ||
    fail "the last relay never saw the receiver down: the receiver faults tested nothing ($(tail -1 "$LOG"))"
got=$(sql "SELECT count(*), sum(status = 'published'), sum(status = 'dead') FROM outbox")
total=${got%%|*}
[ "$got" = "$total|$total|0" ] && pass "all $total rows published, none dead" ||
    fail "rows total|published|dead = $got"
echo "$(sql "SELECT count(*) FROM outbox WHERE attempts > 1") rows were claimed more than once"
sqlite_staged "$TMP/staged-faults"
# No dedupe over HTTP: each relay kill and each receiver fault may deliver
# a batch again.
check_requests "$PRIV_URI" "/$HOOK" "$TMP/staged-faults" orders $(((KILLS + 2) * BATCH))
finish
