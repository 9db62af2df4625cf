# Shared helpers of the CLI tests. Source it with the outbox binary as $1:
#   . "$(dirname "$0")/lib.sh" "$@"
# Every check records a failure and goes on; finish exits 1 when any failed.
# OUTBOX_CLI_WRAPPER, when set, prefixes every run of the CLI, e.g.
#   OUTBOX_CLI_WRAPPER="valgrind -q --leak-check=full --error-exitcode=99"
set -u

OUTBOX=${1:?usage: $0 PATH_TO_OUTBOX}
case $OUTBOX in /*) ;; *) OUTBOX=$PWD/$OUTBOX ;; esac
[ -x "$OUTBOX" ] || { echo "not executable: $OUTBOX"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/outbox-cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILED=0
OUT=$TMP/.out
ERR=$TMP/.err

fail() {
    echo "FAIL: $*"
    FAILED=$((FAILED + 1))
}

pass() {
    echo "ok: $*"
}

# outbox ARGS...: the CLI under test.
outbox() {
    # shellcheck disable=SC2086
    ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" "$@"
}

# run ARGS...: runs outbox, leaving stdout in $OUT, stderr in $ERR, status in $RC.
run() {
    outbox "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# expect STATUS ARGS...: runs outbox and checks the exit status.
expect() {
    local want=$1
    shift
    run "$@"
    if [ "$RC" -ne "$want" ]; then
        fail "outbox $* exited $RC, expected $want; stderr: $(head -c 400 "$ERR")"
        return 1
    fi
    return 0
}

# expect_error PATTERN ARGS...: exit 2 and exactly one stderr line,
# starting with "outbox: " and matching PATTERN (grep -E).
expect_error() {
    local pattern=$1
    shift
    run "$@"
    local lines
    lines=$(wc -l <"$ERR")
    if [ "$RC" -ne 2 ]; then
        fail "outbox $* exited $RC, expected 2; stderr: $(head -c 400 "$ERR")"
    elif [ "$lines" -ne 1 ]; then
        fail "outbox $* printed $lines lines on stderr, expected 1: $(head -c 400 "$ERR")"
    elif ! grep -q '^outbox: ' "$ERR"; then
        fail "outbox $*: stderr does not start with 'outbox: ': $(cat "$ERR")"
    elif ! grep -Eq -- "$pattern" "$ERR"; then
        fail "outbox $*: stderr does not match /$pattern/: $(cat "$ERR")"
    else
        pass "outbox $* -> $(cat "$ERR")"
    fi
}

# json_field NAME FILE: a number from the one-line JSON object in FILE.
json_field() {
    sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "$2"
}

# stats_is DB PENDING PROCESSING PUBLISHED DEAD [ARGS...]
stats_is() {
    local db=$1 pe=$2 pr=$3 pu=$4 de=$5
    shift 5
    expect 0 stats --store "sqlite://$db" --json "$@" || return 1
    local got
    got="$(json_field pending "$OUT") $(json_field processing "$OUT") $(json_field published "$OUT") $(json_field dead "$OUT")"
    if [ "$got" != "$pe $pr $pu $de" ]; then
        fail "stats $*: pending/processing/published/dead = $got, expected $pe $pr $pu $de ($(cat "$OUT"))"
        return 1
    fi
    pass "stats $*: $got"
}

# new_db NAME: a fresh SQLite outbox with the canonical schema, its path in $DB.
new_db() {
    DB=$TMP/$1.db
    outbox schema apply --store "sqlite://$DB" --yes-i-know >/dev/null 2>"$ERR" ||
        fail "schema apply on $DB: $(cat "$ERR")"
}

# wait_for_lines FILE N: until FILE has at least N lines (at most 30 s).
wait_for_lines() {
    for _ in $(seq 1 300); do
        [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# stop_process PID SIGNAL: sends SIGNAL, waits for PID (killed after 60 s);
# its exit status in $RC. It polls instead of running a watchdog subshell:
# a subshell killed before it gets going runs the EXIT trap it inherited,
# which would remove $TMP under the rest of the test.
stop_process() {
    local pid=$1 state=
    kill -"$2" "$pid"
    for _ in $(seq 1 1200); do
        read -r _ _ state _ 2>/dev/null <"/proc/$pid/stat" || break
        [ "$state" = Z ] && break
        sleep 0.05
    done
    [ "$state" = Z ] || kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    RC=$?
}

finish() {
    if [ "$FAILED" -ne 0 ]; then
        echo "$FAILED check(s) failed"
        exit 1
    fi
    echo "all checks passed"
    exit 0
}
