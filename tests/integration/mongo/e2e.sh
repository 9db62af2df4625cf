#!/usr/bin/env bash
# End to end on MongoDB: `outbox stage --count N` (1,000; 10,000 with --long), then
# `outbox relay --until-idle` publishes each event exactly once.
. "$(dirname "$0")/../../harness/harness.sh"
use_outbox "$1"
need_service ferretdb
mongo_db it_e2e
URI=$MONGO_URI
COUNT=$(long_or 1000 10000)

outbox schema apply --store "$URI" --yes-i-know >/dev/null || { fail "schema apply"; finish; }
"$OUTBOX" stage --store "$URI" --route e2e --type t --count "$COUNT" >"$TMP/stage.out" 2>&1 ||
    { cat "$TMP/stage.out"; fail "staging"; finish; }
check "staged" "staged $COUNT" "$(cat "$TMP/stage.out")"
"$OUTBOX" relay --store "$URI" --route e2e --sink "file://$TMP/out.jsonl" --until-idle --quiet \
    2>"$TMP/relay.err" || { cat "$TMP/relay.err"; fail "relay"; }
ids_in_file "$TMP/out.jsonl" >"$TMP/ids"
check "events published" "$COUNT" "$(wc -l <"$TMP/ids" | tr -d ' ')"
check "events published twice" 0 "$(uniq -d "$TMP/ids" | wc -l | tr -d ' ')"
"$OUTBOX" stats --store "$URI" --route e2e >"$TMP/stats" 2>&1
check "published in the store" "$COUNT" "$(awk '$1 == "published" {print $2}' "$TMP/stats")"
check "pending in the store" 0 "$(awk '$1 == "pending" {print $2}' "$TMP/stats")"
finish
