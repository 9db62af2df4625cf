# Shared helpers of the PostgreSQL shell tests. Source it with
#   . "$(dirname "$0")/lib.sh" "$@"
# where the arguments are the outbox CLI and the pg_load helper (then the
# pg_stage example, the sql/postgres directory, and "canonical" for a table
# with only the canonical indexes). Every test works in its own schema,
# dropped on exit with anything it started.
set -u
export LC_ALL=C

OUTBOX=${1:?usage: $0 OUTBOX_CLI PG_LOAD [PG_STAGE]}
PG_LOAD=${2:?usage: $0 OUTBOX_CLI PG_LOAD [PG_STAGE]}
PG_STAGE=${3:-}
TABLE_KIND=${5:-shipped}

if [ -z "${OUTBOX_PG_URI:-}" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL: OUTBOX_PG_URI is not set and CI=true: start a server with" \
            "eval \"\$(tools/services/postgres.sh start DIR)\""
        exit 1
    fi
    echo
    echo "*** SKIPPED: the PostgreSQL integration tests need a server. ***"
    echo "*** Install postgresql and libpq-dev (Debian), then run"
    echo "***   eval \"\$(tools/services/postgres.sh start /tmp/outbox-pg)\""
    echo "*** (or set OUTBOX_PG_URI=postgresql://user@host:port/db) and run the tests again."
    echo
    exit 77
fi
command -v psql >/dev/null || { echo "FAIL: psql not found (install postgresql-client)"; exit 1; }

URI=$OUTBOX_PG_URI
SCH=it_$(basename "$0" .sh)_$$
REL=$SCH.outbox
TMP=$(mktemp -d "${TMPDIR:-/tmp}/outbox-pg.XXXXXX") || exit 1
FAILED=0
PIDS=""

q() {
    psql -X -qtA -v ON_ERROR_STOP=1 "$URI" -c "$1"
}

cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    q "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $SCH CASCADE" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    FAILED=$((FAILED + 1))
}

pass() {
    echo "ok: $*"
}

# check NAME EXPECTED ACTUAL
check() {
    if [ "$2" = "$3" ]; then pass "$1: $3"; else fail "$1: got '$3', expected '$2'"; fi
}

finish() {
    [ "$FAILED" -eq 0 ] && { echo "all checks passed"; exit 0; }
    echo "$FAILED check(s) failed"
    exit 1
}

# The outbox table of this test, made by the driver's own schema apply;
# with "canonical", left with only the canonical table's indexes.
make_table() {
    "$OUTBOX" schema apply --store "$URI" --relation "$REL" --yes-i-know "$@" >/dev/null ||
        { echo "FAIL: schema apply"; exit 1; }
    if [ "$TABLE_KIND" = canonical ]; then
        q "SET client_min_messages = warning; DROP INDEX IF EXISTS $SCH.outbox_pending_idx,
           $SCH.outbox_key_idx, $SCH.outbox_processing_idx, $SCH.outbox_pending_hlc_idx,
           $SCH.outbox_key_hlc_idx" >/dev/null || { echo "FAIL: dropping the extra indexes"; exit 1; }
        echo "table $REL with only the canonical indexes"
    fi
}

# relay ARGS...: a relay in the background on this test's table; its pid is
# appended to PIDS and left in RELAY_PID.
relay() {
    "$OUTBOX" relay --store "$URI" --relation "$REL" "$@" 2>>"$TMP/relay.log" &
    RELAY_PID=$!
    PIDS="$PIDS $RELAY_PID"
}

# wait_for SQL VALUE SECONDS: polls until SQL returns VALUE; 1 on timeout.
wait_for() {
    local end=$((SECONDS + $3))
    while [ "$(q "$1")" != "$2" ]; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.1
    done
}

# Rows of this test's table that are not published yet.
unpublished() {
    q "SELECT count(*) FROM $REL WHERE status <> 'published'"
}

# Keyed rows published before an earlier row of their key (staging order).
order_breaks() {
    q "SELECT count(*) FROM (SELECT published_at < lag(published_at) OVER
         (PARTITION BY ordering_key ORDER BY created_at, id) AS back FROM $REL
         WHERE ordering_key IS NOT NULL) x WHERE back"
}
