#!/bin/sh
# Three relays drain N events (20,000 by default) over 40 ordering keys:
# each event is published once, and each key's events in staging order.
. "$(dirname "$0")/lib.sh" "$@"
COUNT=${OUTBOX_MONGO_RELAY3_COUNT:-20000}
KEYS=40

apply_schema
per=$((COUNT / KEYS))
# One staging call per round of keys, so that each key's events are
# interleaved with the others' as they would be in a real stream.
python3 -c '
import json, sys
n, keys = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    print(json.dumps({"k": "k%02d" % (i % keys), "seq": i // keys}))
' "$COUNT" "$KEYS" >"$TMP/payloads"
k=0
while [ $k -lt $KEYS ]; do
    key=$(printf 'k%02d' $k)
    grep "\"$key\"" "$TMP/payloads" >"$TMP/p_$key"
    k=$((k + 1))
done
# Keyed staging: every key's rows in order, the keys one after the other
# in rounds of 50 rows.
round=0
while [ $((round * 50)) -lt "$per" ]; do
    k=0
    while [ $k -lt $KEYS ]; do
        key=$(printf 'k%02d' $k)
        sed -n "$((round * 50 + 1)),$((round * 50 + 50))p" "$TMP/p_$key" |
            "$OUTBOX" stage --store "$URI" --route r3 --type t --key "$key" --payload - >/dev/null 2>"$TMP/err" ||
            { cat "$TMP/err"; fail "staging"; finish; }
        k=$((k + 1))
    done
    round=$((round + 1))
done
for w in 1 2 3; do
    "$OUTBOX" relay --store "$URI" --route r3 --sink "file://$TMP/out$w.jsonl" --until-idle --quiet \
        2>"$TMP/relay$w.err" &
    PIDS="$PIDS $!"
done
wait
cat "$TMP"/out*.jsonl >"$TMP/all.jsonl"
sink_ids "$TMP/all.jsonl" >"$TMP/ids"
check "events published" "$COUNT" "$(wc -l <"$TMP/ids" | tr -d ' ')"
check "events published twice" 0 "$(uniq -d "$TMP/ids" | wc -l | tr -d ' ')"
# Per key, across the relays' files by publish time (each file is in publish
# order; a key's run moves between relays only after its predecessor
# settled, so ordering by the "time" each relay wrote is not needed: every
# file on its own must hold each key's events in increasing seq).
if python3 -c '
import json, sys
bad = 0
for f in sys.argv[1:]:
    last = {}
    for line in open(f):
        if not line.strip():
            continue
        d = json.loads(line)["data"]
        if d["seq"] <= last.get(d["k"], -1):
            bad += 1
        last[d["k"]] = d["seq"]
sys.exit(1 if bad else 0)
' "$TMP"/out*.jsonl; then
    pass "every relay published each key in staging order"
else
    fail "a relay published a key out of order"
fi
finish
