# Shared helpers of the fault tests (relays killed, servers crashed). Source
# it with the outbox CLI as $1 and, for PostgreSQL, the pg_load helper as $2:
#   . "$(dirname "$0")/lib.sh" "$@"
# It sources tests/cli/lib.sh for fail/pass/finish/stop_process/new_db.
#
# OUTBOX_TEST_LONG=1 (tools/test --long) raises the number of faults;
# OUTBOX_FAULTS_SEED repeats a run's random delays and victims.
set -u
export LC_ALL=C

FAULTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$FAULTS_DIR/../.." && pwd)
# shellcheck source=../cli/lib.sh
. "$SRC_ROOT/tests/cli/lib.sh" "${1:-}"
PG_LOAD=${2:-}
PG_SERVICE=$SRC_ROOT/tools/services/postgres.sh
# The postgres user owns a private server's cluster and must reach it.
chmod 755 "$TMP"

PIDS=""
PRIVATE_PG=""
cleanup() {
    local p
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "$PRIVATE_PG" ] && "$PG_SERVICE" stop "$PRIVATE_PG" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

SEED=${OUTBOX_FAULTS_SEED:-$(( ($$ * 7919 + $(date +%s)) % 32768 ))}
RANDOM=$SEED
echo "seed $SEED (OUTBOX_FAULTS_SEED=$SEED repeats the delays and victims)"

# faults DEFAULT LONG: how many faults to inject in this run.
faults() {
    if [ "${OUTBOX_TEST_LONG:-}" = 1 ]; then echo "$2"; else echo "$1"; fi
}

# random_sleep MIN_MS MAX_MS: a random pause, the instant of the next fault.
random_sleep() {
    local ms=$(($1 + RANDOM % ($2 - $1 + 1)))
    sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
}

# background NAME CMD...: runs CMD with stderr to $TMP/NAME.log; its pid is
# in BG_PID and in PIDS, which the exit trap kills.
background() {
    local name=$1
    shift
    "$@" 2>>"$TMP/$name.log" &
    BG_PID=$!
    PIDS="$PIDS $BG_PID"
}

# forget PID: PID has been waited for; the exit trap leaves it alone.
forget() {
    PIDS=$(echo " $PIDS " | sed "s/ $1 / /")
}

# kill9 PID: SIGKILL, reaped.
kill9() {
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    forget "$1"
}

# wait_started LOG N: until LOG shows N relay workers started (60 s at
# most), so that a fault's random instant falls in the relay's work, not
# always in its start-up (slow under ASan).
wait_started() {
    local end=$((SECONDS + 60)) n
    while :; do
        n=$(cat "$1" 2>/dev/null | grep -c ': started: ')
        [ "$n" -lt "$2" ] || return 0
        [ $SECONDS -lt $end ] || return 1
        sleep 0.02
    done
}

# analyze STAGED OUTPUT MAX_DUPLICATES|-: the consumer's view (analyze.py);
# each failed check counts.
analyze() {
    python3 "$FAULTS_DIR/analyze.py" "$@"
    FAILED=$((FAILED + $?))
}

# skip_pg REASON: no PostgreSQL to test against. A failure under CI=true,
# a loud skip elsewhere.
skip_pg() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: install postgresql (tools/deps.sh) so the fault tests can start a server"
        exit 1
    fi
    echo
    echo "*** SKIPPED: $1. ***"
    echo "*** These tests start a private server with tools/services/postgres.sh: install postgresql (Debian),"
    echo "*** or find out why it would not start, and run them again."
    echo
    exit 77
}

# private_pg: a PostgreSQL server of this test alone (tools/services/postgres.sh
# in $TMP/pg, stopped at exit), on the first free port from a random one
# from 26400 on; URI names its database. A start that loses a race for its
# port to another test tries the next range.
private_pg() {
    ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 ||
        skip_pg "no PostgreSQL server binaries (pg_ctl)"
    command -v psql >/dev/null 2>&1 || skip_pg "no psql"
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
        skip_pg "running as root without a postgres user to own the cluster"
    fi
    PRIVATE_PG=$TMP/pg
    local try env
    for try in 1 2 3 4 5; do
        if env=$(OUTBOX_PG_PORT=$((26400 + RANDOM % 500)) "$PG_SERVICE" start "$PRIVATE_PG" 2>"$TMP/pg-start.err"); then
            eval "$env"
            URI=$OUTBOX_PG_URI
            echo "private PostgreSQL server on port $OUTBOX_PG_PORT"
            return 0
        fi
    done
    skip_pg "no private PostgreSQL server would start: $(tail -1 "$TMP/pg-start.err")"
}

# q SQL: one query on the private server, unaligned, '|' between columns.
q() {
    psql -X -qtA -v ON_ERROR_STOP=1 "$URI" -c "$1"
}
