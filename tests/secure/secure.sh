# What the tests of tests/secure share (sourced after
# tests/harness/harness.sh): an SQLite store in $TMP, and the refusal case
# every store and every sink runs the same way.

# secure_store: an SQLite outbox ($DB, its URI in $S) for route $ROUTE.
secure_store() {
    new_db secure
    S=sqlite://$DB
}

# pending_state: "pending charged dead": pending rows, attempts charged to
# them, dead rows.
pending_state() {
    sql "SELECT count(*) FILTER (WHERE status = 'pending') || ' ' ||
         coalesce(sum(attempts) FILTER (WHERE status = 'pending'), 0) || ' ' ||
         count(*) FILTER (WHERE status = 'dead') FROM outbox"
}

# sink_refused NAME SINK_URI PATTERN WHAT [SECRET...]: with rows pending, a
# relay on SINK_URI under --until-idle (short pauses) ends with exit 2, its
# last line the one-line reason matching PATTERN; every row is still
# pending, none charged an attempt, none dead (the sink said RETRY and the
# breaker held); no SECRET in anything it printed.
sink_refused() {
    local name=$1 uri=$2 pattern=$3 what=$4 before last
    shift 4
    before=$(pending_state)
    [ "${before%% *}" -gt 0 ] || { fail "$what: no pending rows to try"; return; }
    "$OUTBOX" relay --store "$S" --route "$ROUTE" --sink "$uri" --until-idle \
        --backoff-base 50ms --backoff-cap 100ms 2>"$TMP/$name.err" >/dev/null
    local rc=$?
    last=$(tail -1 "$TMP/$name.err")
    if [ "$rc" = 2 ] && grep -Eq -- "$pattern" <<<"$last"; then
        pass "$what: exit 2: $last"
    else
        fail "$what: exit $rc, last line not matching /$pattern/: $last"
    fi
    [ "$(pending_state)" = "${before%% *} 0 0" ] &&
        pass "$what: all ${before%% *} rows still pending, no attempt charged, none dead" ||
        fail "$what: pending charged dead = $(pending_state), expected ${before%% *} 0 0"
    local s
    for s in "$@"; do
        no_secret_in "$s" "$TMP/$name.err" "$what: the relay's output"
    done
}

# store_refused NAME URI PATTERN WHAT [SECRET...]: a relay on the store URI
# exits 2 with one line on stderr matching PATTERN and touches no row
# (`rows`, which the test defines, reads the same before and after); no
# SECRET in what it printed.
store_refused() {
    local name=$1 uri=$2 pattern=$3 what=$4 before lines
    shift 4
    before=$(rows)
    "$OUTBOX" relay --store "$uri" --route "$ROUTE" --sink "file:$TMP/$name.jsonl" --until-idle \
        2>"$TMP/$name.err" >"$TMP/$name.out"
    local rc=$?
    lines=$(wc -l <"$TMP/$name.err")
    if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -Eq -- "$pattern" "$TMP/$name.err"; then
        pass "$what: exit 2, one line: $(cat "$TMP/$name.err")"
    else
        fail "$what: exit $rc, $lines lines, expected one matching /$pattern/: $(head -3 "$TMP/$name.err")"
    fi
    [ "$(rows)" = "$before" ] || fail "$what: rows changed: $before -> $(rows)"
    local s
    for s in "$@"; do
        no_secret_in "$s" "$TMP/$name.err" "$what: the message"
    done
}
