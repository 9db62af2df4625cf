# The one library every shell test sources, from wherever the test lives:
#
#   . "$(dirname "$0")/../harness/harness.sh"        (tests/cli, tests/faults, ...)
#   . "$(dirname "$0")/../../harness/harness.sh"     (tests/integration/NAME)
#
# It gives each test a private directory ($TMP, removed at exit with every
# process and server the test started), one way to report checks (pass,
# fail, check, finish), one skip rule (skip: exit 77 with a loud banner, or a
# failure under CI=true, where nothing may be skipped silently), private
# ports and private servers of any kind through tools/services, the outbox
# CLI helpers, the relay and fault helpers, and one analysis of a delivery
# (analyze: lost, foreign, duplicated, per-key order by first appearance).
#
# Conventions: a check that fails records itself and the test goes on;
# finish exits 1 when any failed. Long forms (tools/test --long) are asked
# with `long_or DEFAULT LONG`. OUTBOX_FAULTS_SEED repeats a run's random
# pauses and victims. OUTBOX_CLI_WRAPPER, when set, prefixes every run of
# the CLI through outbox/run/expect, e.g. "valgrind -q --error-exitcode=99".
set -u
export LC_ALL=C

HARNESS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$HARNESS_DIR/../.." && pwd)
SERVICES=$SRC_ROOT/tools/services

TMP=$(mktemp -d "${TMPDIR:-/tmp}/outbox-test.XXXXXX") || exit 1
# The postgres user runs a private PostgreSQL server's cluster inside $TMP.
chmod 755 "$TMP"
OUT=$TMP/.out
ERR=$TMP/.err
FAILED=0

# ------------------------------------------------------------------ exit
PIDS=""
_SERVERS=()
_AT_EXIT=()

# at_exit CMD: runs CMD (eval'ed) when the test exits, after the processes
# in PIDS are killed and before $TMP goes; the last registered runs first.
at_exit() {
    _AT_EXIT+=("$1")
}

_harness_exit() {
    local i p s
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    for ((i = ${#_AT_EXIT[@]} - 1; i >= 0; i--)); do
        eval "${_AT_EXIT[$i]}" >/dev/null 2>&1
    done
    for s in "${_SERVERS[@]}"; do
        "$SERVICES/${s%%:*}.sh" stop "${s#*:}" >/dev/null 2>&1
    done
    rm -rf "$TMP"
}
trap _harness_exit EXIT
# A test runner's timeout sends SIGTERM: clean up on the way out.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# -------------------------------------------------------------- verdicts
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

# finish: the test's exit; 1 when a check failed.
finish() {
    if [ "$FAILED" -ne 0 ]; then
        echo "$FAILED check(s) failed"
        exit 1
    fi
    echo "all checks passed"
    exit 0
}

# ------------------------------------------------------------------ skip
# skip REASON [HOW]: what this test needs is missing. Under CI=true a
# failure (CI must run everything); elsewhere a loud skip (exit 77) saying
# HOW to get it.
skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL: $1, and CI=true: every test must run in CI${2:+ ($2)}"
        exit 1
    fi
    echo
    echo "*** SKIPPED $(basename "$0"): $1. ***"
    [ -n "${2:-}" ] && echo "*** $2, then run the test again. ***"
    echo
    exit 77
}

# skip_part REASON: one part of the test cannot run; the rest goes on. A
# failed check under CI=true, a loud line elsewhere.
skip_part() {
    if [ "${CI:-}" = true ]; then
        fail "$1, and CI=true"
    else
        echo "*** SKIPPED: $1 ***"
    fi
}

# The variable prefix of each service script's exports (OUTBOX_<X>_URI).
service_prefix() {
    case $1 in
    postgres) echo PG ;;
    ferretdb) echo MONGO ;;
    *) echo "$1" | tr 'a-z-' 'A-Z_' ;;
    esac
}

# need_service KIND...: the shared servers tools/test starts
# (OUTBOX_<X>_URI set by tools/services/KIND.sh start).
need_service() {
    local kind var
    for kind in "$@"; do
        var=OUTBOX_$(service_prefix "$kind")_URI
        [ -n "${!var:-}" ] || skip "$var is not set" \
            "start a server with eval \"\$(tools/services/$kind.sh start DIR)\" (tools/test does)"
    done
}

# need_cmd CMD PACKAGE: a program on PATH.
need_cmd() {
    command -v "$1" >/dev/null 2>&1 || skip "no $1 on PATH" "install the Debian package $2"
}

# need_python: $PY, the Python with the third-party clients the
# cross-checks read back with (tools/services/pyclients.sh).
need_python() {
    if [ -z "${OUTBOX_PYTHON:-}" ]; then
        local env
        env=$("$SERVICES/pyclients.sh" 2>"$TMP/pyclients.err") ||
            skip "no OUTBOX_PYTHON, and tools/services/pyclients.sh failed: $(tail -1 "$TMP/pyclients.err")" \
                "run eval \"\$(tools/services/pyclients.sh)\""
        eval "$env"
    fi
    PY=$OUTBOX_PYTHON
}

# long_or DEFAULT LONG: how many (faults, events) to use in this run.
long_or() {
    if [ "${OUTBOX_TEST_LONG:-}" = 1 ]; then echo "$2"; else echo "$1"; fi
}

# --------------------------------------------------------------- random
SEED=${OUTBOX_FAULTS_SEED:-$(( ($$ * 7919 + $(date +%s)) % 32768 ))}
RANDOM=$SEED

# announce_seed: for the tests whose pauses and victims are random.
announce_seed() {
    echo "seed $SEED (OUTBOX_FAULTS_SEED=$SEED repeats the pauses and victims)"
}

# random_sleep MIN_MS MAX_MS: a random pause, the instant of the next fault.
random_sleep() {
    local ms=$(($1 + RANDOM % ($2 - $1 + 1)))
    sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
}

# ---------------------------------------------------------------- ports
# Private ports lie between 24000 and 31999: below 32768, where Linux's
# ephemeral range begins, so no client's outgoing connection can hold a
# port a restarted server must bind again (tools/services/lib.sh), and
# above the shared servers' defaults (23xxx).
PORT_LOW=24000
PORT_SPAN=8000

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# private_port: a port nothing listens on now, in the private range. A
# listener started on it can still lose a race with another test: retry.
private_port() {
    local p
    while :; do
        p=$((PORT_LOW + (RANDOM * 7 + $$) % PORT_SPAN))
        port_in_use "$p" || { echo "$p"; return 0; }
    done
}

# ------------------------------------------------------ private servers
# private_server KIND [NAME]: a server of this test alone,
# tools/services/KIND.sh in $TMP/NAME (default KIND), on a private port,
# stopped at exit. Sets PRIV_URI and PRIV_DIR; leaves the shared server's
# OUTBOX_* variables alone. A start that loses a race for its port tries
# elsewhere; one that never starts is a skip (a failure under CI=true).
private_server() {
    local kind=$1 name=${2:-$1} prefix env try
    prefix=$(service_prefix "$kind")
    PRIV_DIR=$TMP/$name
    for try in 1 2 3 4 5; do
        rm -rf "$PRIV_DIR"
        if env=$(env "OUTBOX_${prefix}_PORT=$(private_port)" "$SERVICES/$kind.sh" start "$PRIV_DIR" \
                2>"$TMP/$name-start.err"); then
            _SERVERS+=("$kind:$PRIV_DIR")
            PRIV_URI=$(env -i bash -c "$env; printf %s \"\$OUTBOX_${prefix}_URI\"")
            echo "private $kind server at $PRIV_URI"
            return 0
        fi
        "$SERVICES/$kind.sh" stop "$PRIV_DIR" >/dev/null 2>&1
    done
    skip "no private $kind server would start: $(tail -1 "$TMP/$name-start.err")" \
        "see tools/services/$kind.sh"
}

# server KIND DIR start|stop|kill|restart...: drives a private server; a
# command that fails is a failed check.
server() {
    local kind=$1 dir=$2
    shift 2
    "$SERVICES/$kind.sh" "$@" "$dir" >/dev/null 2>"$TMP/server.err" ||
        fail "$kind.sh $* failed: $(tail -1 "$TMP/server.err")"
}

# ------------------------------------------------------------ processes
# background NAME CMD...: runs CMD with stderr to $TMP/NAME.log; its pid in
# BG_PID and in PIDS, which the exit kills.
background() {
    local name=$1
    shift
    "$@" 2>>"$TMP/$name.log" &
    BG_PID=$!
    PIDS="$PIDS $BG_PID"
}

# forget PID: PID has been waited for; the exit leaves it alone.
forget() {
    PIDS=$(echo " $PIDS " | sed "s/ $1 / /")
}

# kill9 PID: SIGKILL, reaped.
kill9() {
    kill -9 "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    forget "$1"
}

# stop_process PID SIGNAL: sends SIGNAL, waits for PID (killed after 60 s);
# its exit status in $RC. It polls instead of running a watchdog subshell:
# a subshell killed before it gets going would run the exit trap it
# inherited and remove $TMP under the rest of the test.
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
    forget "$pid"
}

# wait_until SECONDS CMD...: polls CMD every 0.1 s until it succeeds; 1 when
# SECONDS pass first.
wait_until() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.1
    done
}

# lines_match FILE PATTERN [N]: FILE has at least N (1) lines matching
# PATTERN (grep -E); for wait_until.
lines_match() {
    [ "$(grep -cE -- "$2" "$1" 2>/dev/null)" -ge "${3:-1}" ]
}

# wait_for_lines FILE N: until FILE has at least N lines (30 s at most).
wait_for_lines() {
    _has_lines() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
    wait_until 30 _has_lines "$1" "$2"
}

# wait_started LOG N: until LOG shows N relay workers started (60 s at
# most), so that a fault's random instant falls in the relay's work, not
# in its start-up (slow under a sanitizer).
wait_started() {
    _started() { [ "$(grep -c ': started: ' "$1" 2>/dev/null)" -ge "$2" ]; }
    wait_until 60 _started "$1" "$2"
}

# ----------------------------------------------------------- outbox CLI
# The batches a relay keeps in flight: the relay's default (outbox relay
# --pipeline). A relay killed with SIGKILL may have published that many
# batches it had not yet settled, so bounds on duplicates are counted in
# PIPELINE batches.
PIPELINE=4

# use_outbox PATH: the CLI under test, as $OUTBOX.
use_outbox() {
    OUTBOX=${1:?usage: $0 PATH_TO_OUTBOX ...}
    case $OUTBOX in /*) ;; *) OUTBOX=$PWD/$OUTBOX ;; esac
    [ -x "$OUTBOX" ] || { echo "not executable: $OUTBOX"; exit 1; }
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
    local pattern=$1 lines
    shift
    run "$@"
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

# has FILE PATTERN WHAT: FILE has a line matching PATTERN (grep -E).
has() {
    if grep -Eq -- "$2" "$1"; then
        pass "$3: $(grep -E -m1 -- "$2" "$1")"
    else
        fail "$3: no line matches /$2/ in: $(cat "$1")"
    fi
}

# lacks FILE PATTERN WHAT: no line of FILE matches PATTERN (grep -E).
lacks() {
    _lacks -E "$@"
}

# no_secret_in SECRET FILE WHAT: FILE never shows SECRET (a fixed string);
# the failure shows the line with the secret masked.
no_secret_in() {
    _lacks -F "$2" "$1" "$3 shows no secret" "$1"
}

_lacks() {
    local flags=$1 line rc
    # A file that cannot be read shows nothing, and proves nothing.
    [ -f "$2" ] && [ -r "$2" ] || { fail "$4: cannot read $2"; return; }
    grep -q "$flags" -- "$3" "$2"
    rc=$?
    if [ "$rc" = 0 ]; then
        line=$(grep "$flags" -m1 -- "$3" "$2")
        [ -n "${5:-}" ] && line=${line//"$5"/***}
        fail "$4: $line"
    elif [ "$rc" = 1 ]; then
        pass "$4"
    else
        fail "$4: grep failed on $2"
    fi
}

# json_field NAME FILE: a number from the one-line JSON object in FILE.
json_field() {
    sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "$2"
}

# stats_of STORE [ARGS...]: "pending processing published dead" of the
# store (outbox stats --json), on any store.
stats_of() {
    local store=$1
    shift
    outbox stats --store "$store" --json "$@" >"$TMP/.stats" 2>"$TMP/.stats.err" || {
        echo "stats failed: $(head -c 300 "$TMP/.stats.err")"
        return 1
    }
    echo "$(json_field pending "$TMP/.stats") $(json_field processing "$TMP/.stats")" \
        "$(json_field published "$TMP/.stats") $(json_field dead "$TMP/.stats")"
}

# stats_is DB PENDING PROCESSING PUBLISHED DEAD [ARGS...]: the SQLite
# outbox DB holds these counts.
stats_is() {
    local db=$1 want="$2 $3 $4 $5" got
    shift 5
    got=$(stats_of "sqlite://$db" "$@")
    if [ "$got" != "$want" ]; then
        fail "stats $*: pending/processing/published/dead = $got, expected $want"
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

# sql SQL: one statement on the SQLite outbox $DB.
sql() {
    sqlite3 -cmd '.timeout 10000' "$DB" "$1"
}

# q SQL: one statement on the PostgreSQL database $URI, unaligned, '|'
# between columns.
q() {
    psql -X -qtA -v ON_ERROR_STOP=1 "$URI" -c "$1"
}

# pg_schema NAME: a schema of this test's own on $URI, dropped at exit;
# its name in $SCH.
pg_schema() {
    SCH=${1}_$$
    q "CREATE SCHEMA $SCH" >/dev/null || { fail "CREATE SCHEMA $SCH"; finish; }
    at_exit "q 'SET client_min_messages = warning; DROP SCHEMA IF EXISTS $SCH CASCADE'"
}

# mongo_db NAME: $OUTBOX_MONGO_URI with a database of this test's own;
# the URI in $MONGO_URI.
mongo_db() {
    MONGO_URI=$(printf '%s' "$OUTBOX_MONGO_URI" | sed -E "s#^(mongodb(\+srv)?://[^/]*)/[^?]*#\1/${1}_$$#")
}

# ------------------------------------------------------------- staging
# stage_events STORE ROUTE N [ARGS...]: about N more events through
# `outbox stage`, in calls of 1 to STAGE_MAX events (120), each call on one
# of STAGE_KEYS keys (12) or, one call in STAGE_NOKEY (5), without a key,
# so keys interleave in staging order. Each event's payload carries its
# serial number and key, {"n":N,"k":"KEY","s":"café"}, its type is t.N%3.
# ARGS go to every call (e.g. --relation). STAGED counts what was staged.
STAGED=0
SEQ=0
STAGE_MAX=120
STAGE_KEYS=12
STAGE_NOKEY=5
stage_events() {
    local store=$1 route=$2 goal=$((STAGED + $3)) size k i
    local -a key
    shift 3
    while [ "$STAGED" -lt "$goal" ]; do
        size=$((1 + RANDOM % STAGE_MAX))
        if [ $((RANDOM % STAGE_NOKEY)) = 0 ]; then k=; key=(); else k=k$((RANDOM % STAGE_KEYS)); key=(--key "$k"); fi
        for ((i = 0; i < size; i++)); do
            echo "{\"n\":$((SEQ + i)),\"k\":\"$k\",\"s\":\"caf\\u00e9\"}"
        done >"$TMP/.batch"
        outbox stage --store "$store" "$@" --route "$route" --type "t.$((SEQ % 3))" "${key[@]}" \
            --payload - <"$TMP/.batch" >"$TMP/.staged" 2>&1 || { fail "stage: $(cat "$TMP/.staged")"; finish; }
        SEQ=$((SEQ + size))
        STAGED=$((STAGED + $(sed -n 's/^staged //p' "$TMP/.staged")))
    done
}

# stage_load STORE ROUTE N KEYS [BATCH [RELATION]]: N more events through
# the library (tests/harness/stage_load.c), in calls of BATCH (500), the
# keys interleaved event by event (KEYS of them, none when 0); payloads
# carry serial numbers on from SEQ, like stage_events'.
stage_load() {
    local out
    out=$("${OUTBOX_TEST_STAGE_LOAD:?the path of the stage_load program of the build, which meson test sets}" \
        "$1" "${6:--}" "$2" "$3" "$4" "${5:-500}" "$SEQ" 2>&1) || { fail "stage_load: $out"; finish; }
    SEQ=$((SEQ + $3))
    STAGED=$((STAGED + ${out#staged }))
}

# staged_sqlite FILE [ROUTE]: what the SQLite outbox $DB holds, in staging
# order, as FILE (event_id, key, type, payload; tab-separated) and
# FILE.ids (event_id, key), the forms the readers and analyze take.
staged_sqlite() {
    sqlite3 -cmd '.timeout 10000' -separator "$(printf '\t')" "$DB" \
        "SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM outbox
         ${2:+WHERE outbox_route = '$2'} ORDER BY created_at, id" >"$1" || fail "sqlite3 read of $DB"
    cut -f1,2 "$1" >"$1.ids"
}

# staged_pg FILE RELATION [ROUTE]: the same from PostgreSQL ($URI).
staged_pg() {
    q "COPY (SELECT event_id, coalesce(ordering_key, ''), event_type, payload FROM $2
        ${3:+WHERE outbox_route = '$3'} ORDER BY created_at, id) TO STDOUT" >"$1" || fail "psql read of $2"
    cut -f1,2 "$1" >"$1.ids"
}

# ------------------------------------------------------------ delivery
# analyze STAGED OUTPUT MAX_DUPLICATES|-: what a consumer saw (OUTPUT, one
# JSON object with an "id" a line) against what was staged (STAGED, one
# "event_id<TAB>key" a line in staging order, or "serials:N": the staging
# order rebuilt from the payloads' serial numbers 0..N-1). Each failed
# check counts (tests/harness/delivery.py).
analyze() {
    python3 "$HARNESS_DIR/delivery.py" "$@"
    FAILED=$((FAILED + $?))
}

# whole_lines FILE: each line of FILE is one whole JSON object (none torn,
# none glued to the next), and the file ends in a newline; 1 when not.
whole_lines() {
    python3 "$HARNESS_DIR/delivery.py" --lines "$1"
    local rc=$?
    FAILED=$((FAILED + rc))
    [ "$rc" = 0 ]
}

# ids_in_file FILE: the CloudEvents id of every line of a file sink's
# output, sorted, repeats kept.
ids_in_file() {
    sed -n 's/^{"specversion":"1\.0","id":"\([^"]*\)".*/\1/p' "$1" | sort
}

# ------------------------------------------------------------ PostgreSQL
# pg_outbox NAME: this test's own schema on the shared server (URI, SCH,
# and REL=$SCH.outbox, made by pg_table), dropped at exit.
pg_outbox() {
    need_service postgres
    need_cmd psql postgresql-client
    URI=$OUTBOX_PG_URI
    pg_schema "it_$1"
    REL=$SCH.outbox
}

# pg_table [canonical]: $REL made by the driver's own schema apply; with
# "canonical", left with only the canonical table's indexes, where every
# claim takes the shape built for them.
pg_table() {
    outbox schema apply --store "$URI" --relation "$REL" --yes-i-know >/dev/null ||
        { fail "schema apply"; finish; }
    if [ "${1:-}" = canonical ]; then
        q "SET client_min_messages = warning; DROP INDEX IF EXISTS $SCH.outbox_pending_idx,
           $SCH.outbox_key_idx, $SCH.outbox_processing_idx, $SCH.outbox_pending_hlc_idx,
           $SCH.outbox_key_hlc_idx" >/dev/null || { fail "dropping the extra indexes"; finish; }
        echo "table $REL with only the canonical indexes"
    fi
}

# pg_relay ARGS...: a relay in the background on $URI and $REL, logging to
# $TMP/relay.log; its pid in RELAY_PID (and PIDS).
pg_relay() {
    background relay "$OUTBOX" relay --store "$URI" --relation "$REL" "$@"
    RELAY_PID=$BG_PID
}

# sql_is SQL VALUE: the query on $URI returns VALUE (for wait_until).
sql_is() {
    [ "$(q "$1")" = "$2" ]
}

# order_breaks: keyed rows of $REL published before an earlier row of their
# key (staging order), by published_at.
order_breaks() {
    q "SELECT count(*) FROM (SELECT published_at < lag(published_at) OVER
         (PARTITION BY ordering_key ORDER BY created_at, id) AS back FROM $REL
         WHERE ordering_key IS NOT NULL) x WHERE back"
}
