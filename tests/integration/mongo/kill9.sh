#!/usr/bin/env bash
# `outbox relay` on MongoDB (FerretDB from tools/test, or OUTBOX_TEST_MONGO_URI),
# killed with SIGKILL at random instants (5 times, 20 with --long) and
# restarted each time while events keep coming. Then, once the last relay has
# taken over the killed ones' rows (their lease passed) and drained the
# rest: nothing lost, at most one batch duplicated per kill, each key's
# events first reach the sink in staging order, nothing left in processing.
. "$(dirname "$0")/../../faults/lib.sh" "$@"

if [ -z "${OUTBOX_MONGO_URI:-}" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL: OUTBOX_MONGO_URI is not set and CI=true"
        exit 1
    fi
    echo "*** SKIPPED: no MongoDB server (eval \"\$(tools/services/ferretdb.sh start DIR)\", or set OUTBOX_MONGO_URI) ***"
    exit 77
fi

KILLS=$(faults 5 20)
BATCH=50
LEASE_S=2
DBN=fault_kill_$$
STORE=$(printf '%s' "$OUTBOX_MONGO_URI" | sed -E "s#^(mongodb(\+srv)?://[^/]*)/[^?]*#\1/$DBN#")
OUT=$TMP/out.jsonl
STAGED=0
SEQ=0
"$OUTBOX" schema apply --store "$STORE" --yes-i-know >/dev/null 2>&1 || { fail "schema apply"; finish; }

check() {
    if [ "$2" = "$3" ]; then pass "$1: $3"; else fail "$1: expected $2, got $3"; fi
}

count() {
    "$OUTBOX" stats --store "$STORE" --route orders --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# stage N: about N more events, in calls of 1 to 300 events, each call on
# one of 12 keys or (one in eight) without a key. Every event carries its
# serial number and key, from which the staging order is rebuilt.
stage() {
    local goal=$((STAGED + $1)) size key k out i
    while [ "$STAGED" -lt "$goal" ]; do
        size=$((1 + RANDOM % 300))
        if [ $((RANDOM % 8)) = 0 ]; then k=""; key=(); else k="k$((RANDOM % 12))"; key=(--key "$k"); fi
        for ((i = 0; i < size; i++)); do echo "{\"n\":$((SEQ + i)),\"k\":\"$k\"}"; done >"$TMP/batch"
        out=$("$OUTBOX" stage --store "$STORE" --route orders --type t "${key[@]}" --payload - <"$TMP/batch") ||
            { fail "stage: $out"; finish; }
        SEQ=$((SEQ + size))
        STAGED=$((STAGED + ${out#staged }))
    done
}

STARTS=0
relay() {
    STARTS=$((STARTS + 1))
    LINES=$(wc -l <"$OUT" 2>/dev/null || echo 0)
    LOG=$TMP/relay-$STARTS.log
    background "relay-$STARTS" "$OUTBOX" relay --store "$STORE" --route orders --sink "file:$OUT" \
        --batch "$BATCH" --lease "${LEASE_S}s" --poll 10ms
}

stage 1500
relay
caught=0
for k in $(seq 1 "$KILLS"); do
    wait_started "$LOG" 1 || { fail "relay $STARTS did not start: $(tail -1 "$LOG")"; break; }
    # A new relay's first claim reads the whole collection, which on a busy
    # FerretDB can outlast a fixed sleep: wait until it has published (up
    # to 60 s), so that it is in its claim-publish-settle loop, then kill it
    # at a random point of that work.
    for _ in $(seq 1 600); do
        [ "$(wc -l <"$OUT" 2>/dev/null || echo 0)" -gt "$LINES" ] && break
        sleep 0.1
    done
    random_sleep 0 1500
    kill9 "$BG_PID"
    [ "$(count processing)" -gt 0 ] && caught=$((caught + 1))
    [ "$(count pending)" -ge 500 ] || stage 500
    relay
done
echo "$STAGED events staged"
[ "$caught" -gt 0 ] && pass "$caught of $KILLS kills caught a relay holding rows" ||
    fail "none of $KILLS kills caught a relay holding rows: the test tested nothing"

end=$((SECONDS + 900))
while { [ "$(count pending)" != 0 ] || [ "$(count processing)" != 0 ]; } && [ $SECONDS -lt $end ]; do
    sleep 1
done
stop_process "$BG_PID" TERM
forget "$BG_PID"
[ "$RC" = 0 ] && pass "the last relay stopped on SIGTERM with status 0" ||
    fail "the last relay exited $RC on SIGTERM: $(tail -1 "$LOG")"
check "published" "$STAGED" "$(count published)"
check "processing" 0 "$(count processing)"
check "dead" 0 "$(count dead)"

# The staging order, rebuilt from the serial numbers the events carry: one
# line per staged event the sink saw, and every serial number must be there.
python3 - "$OUT" "$SEQ" "$TMP/staged" <<'PY'
import json, sys
seen = {}
for line in open(sys.argv[1], "rb"):
    try:
        o = json.loads(line)
        seen.setdefault(o["data"]["n"], (o["id"], o["data"]["k"]))
    except (ValueError, KeyError, TypeError):
        pass
missing = [n for n in range(int(sys.argv[2])) if n not in seen]
print(("ok: " if not missing else "FAIL: ") + f"{len(missing)} serial numbers never reached the sink")
with open(sys.argv[3], "w") as f:
    for n in sorted(seen):
        f.write(f"{seen[n][0]}\t{seen[n][1]}\n")
sys.exit(1 if missing else 0)
PY
FAILED=$((FAILED + $?))
analyze "$TMP/staged" "$OUT" $((KILLS * BATCH))
finish
