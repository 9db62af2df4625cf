#!/usr/bin/env bash
# Hostile input: garbage, overlong and out-of-range options and values,
# bytes that are not UTF-8 or are control characters, malformed URIs,
# paths that are directories or FIFOs, stdin that is not JSON. Every case
# must be refused the same way: exit 2, exactly one line on stderr, nothing
# on stdout, no sanitizer report, and nothing written: the database, the
# sink file and the directory they are in are as they were. Exit 2 is what
# the CLI gives every usage or input error (tools/outbox/cli.h, outbox(1));
# 1 means a check found a problem, which none of these is.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db hostile
db=$DB
S=sqlite://$db
sink=$TMP/sink.jsonl
K=file://$sink
outbox stage --store "$S" --route r --type t --count 3 >/dev/null
outbox relay --store "$S" --route r --sink "$K" --until-idle --quiet
outbox stage --store "$S" --route r --type t --count 2 >/dev/null
# A read opens and closes the store once, so the WAL is folded into the
# database file before the first checksum.
outbox stats --store "$S" >/dev/null
[ -s "$db" ] && [ -s "$sink" ] || { echo "setup failed: no database or sink file"; exit 1; }
mkfifo "$TMP/fifo"
mkdir "$TMP/dir"

# What must not change: the files in $TMP, the database (with what its WAL
# holds) and the sink file. SQLite's -shm and -wal files come and go with
# any open and close; what is in the WAL is part of the database.
state() {
    (cd "$TMP" && ls -A | grep -v -e '^\.out$' -e '^\.err$' -e '^\.in$' -e '-shm$' -e '-wal$' &&
        cat "$db" "$sink" && cat "$db-wal" 2>/dev/null) | sha256sum
}

IN=/dev/null
IN_LABEL=none # what $IN holds, for telling cases apart
declare -A seen
cases=0 bad=0
before=$(state)
# h ARGS...: one hostile case, with stdin from $IN.
h() {
    local key="$*|$IN_LABEL"
    if [ -n "${seen[$key]+x}" ]; then
        fail "duplicate case: outbox $*"
        return
    fi
    seen[$key]=1
    cases=$((cases + 1))
    local after problem=
    # shellcheck disable=SC2086
    timeout 30 ${OUTBOX_CLI_WRAPPER:-} "$OUTBOX" "$@" <"$IN" >"$OUT" 2>"$ERR"
    RC=$?
    after=$(state)
    if [ "$RC" -ne 2 ]; then
        problem="exited $RC, expected 2"
    elif [ -s "$OUT" ]; then
        problem="wrote to stdout: $(head -c 200 "$OUT")"
    elif [ "$(wc -l <"$ERR")" -ne 1 ] || [ -n "$(tail -c 1 "$ERR")" ]; then
        problem="printed $(wc -l <"$ERR") lines on stderr, expected 1"
    elif ! grep -q '^outbox: ' "$ERR"; then
        problem="stderr does not start with 'outbox: '"
    elif grep -aqE 'Sanitizer|runtime error' "$ERR"; then
        problem="sanitizer report"
    elif [ "$before" != "$after" ]; then
        problem="changed the database, the sink file or the directory"
    fi
    # Arguments can be long or binary: show them cut, as printf %q does.
    local shown
    shown=$(printf '%q ' "$@" | head -c 200)
    before=$after
    if [ -n "$problem" ]; then
        bad=$((bad + 1))
        fail "outbox $shown(stdin $IN): $problem; stderr: $(head -c 600 "$ERR")"
    else
        pass "outbox $shown-> $(head -c 200 "$ERR")"
    fi
}

long() { head -c "$2" /dev/zero | tr '\0' "$1"; }
R=(relay --store "$S" --route r --sink "$K" --until-idle)
ST=(stage --store "$S" --route r --type t)

# The command line itself.
h --frob
h -
h --version=1
h ''
h $'\xff\xfe'
h $'sta\nge'
h STAGE
h help nosuch
h help $'\e[31mred'
h "$(long x 60000)"
h --verbose --verbose frob
h stats --store
h stats --store=
h stats --store "$S" --store "$S" --relation x --relation 'y;'
h stats --store "$S" --json --json extra
h stats --store "$S" --=x
h stats --store "$S" ---store x
h stats --store "$S" -
h stats --store "$S" --
h stats --STORE "$S"
h stats --sto "$S"
h stats --store "$S" --help=yes
h stats --store "$S" --verbose=1
h stats --store "$S" $'--json\xff'
h stats --store "$S" "--$(long j 5000)"
h schema print --store "$S" extra
h schema $'\xff'
h schema check --store "$S" --yes-i-know
h drivers --bogus
h drivers extra
h conformance --store garbage
h conformance --uri garbage
h conformance --driver sqlite --uri sqlite:
h conformance --driver sqlite --uri garbage
h conformance --driver $'\xff' --uri sqlite::memory:
h conformance --driver sqlite --uri sqlite::memory: --case

# Numbers.
h "${ST[@]}" --count 18446744073709551616
h "${ST[@]}" --count 100000001
h "${ST[@]}" --count 0x10
h "${ST[@]}" --count 1e3
h "${ST[@]}" --count ''
h "${ST[@]}" --count $'1\n'
h "${ST[@]}" --count '٣'
h "${R[@]}" --batch -1
h "${R[@]}" --batch 99999999999999999999
h "${R[@]}" --batch ' '
h "${R[@]}" --workers 0
h "${R[@]}" --workers -5
h "${R[@]}" --pipeline 0
h "${R[@]}" --pipeline 99999999999999999999
h "${R[@]}" --max-attempts 0
h "${R[@]}" --max-attempts 4294967296

# Durations.
h "${R[@]}" --poll 20
h "${R[@]}" --poll 20MS
h "${R[@]}" --poll 1.5s
h "${R[@]}" --poll 20ms5
h "${R[@]}" --poll ''
h "${R[@]}" --poll ms
h "${R[@]}" --poll $'\xff'
h "${R[@]}" --poll -0s
h "${R[@]}" --poll +5s
h "${R[@]}" --lease 9223372036854775808us
h "${R[@]}" --lease 99999999999999999999999999d
h "${R[@]}" --lease 1h --lease 2x
h "${R[@]}" --backoff-base 36500d1
h "${R[@]}" --backoff-cap $'5s\n'
h purge --store "$S" --published-before -1d
h purge --store "$S" --published-before 9223372036854775807us
h purge --store "$S" --published-before "$(long 9 400)s"

# Route, type and key: what a store refuses, before anything is written.
h stage --store "$S" --route $'\xff' --type t
h stage --store "$S" --route $'a\x01b' --type t
h stage --store "$S" --route $'a\nb' --type t
h stage --store "$S" --route $'\e[2J' --type t
h stage --store "$S" --route "$(long r 256)" --type t
h stage --store "$S" --route $'\xc0\xaf' --type t
h stage --store "$S" --route $'\xed\xa0\x80' --type t
h stage --store "$S" --route $'r\xc2\x85' --type t
h stage --store "$S" --route '' --type t
h stage --store "$S" --route r --type $'\xfe'
h stage --store "$S" --route r --type $'t\x7f'
h stage --store "$S" --route r --type ''
h stage --store "$S" --route r --type "$(long t 100000)"
h "${ST[@]}" --key ''
h "${ST[@]}" --key $'\xf5\x80\x80\x80'
h "${ST[@]}" --key $'k\tk'
h "${ST[@]}" --key "$(long k 100000)"
h relay --store "$S" --route $'\xff' --sink "$K" --until-idle
h relay --store "$S" --route $'r\n' --sink "$K" --until-idle
h relay --store "$S" --route '' --sink "$K" --until-idle
h "${R[@]}" --source ''
h "${R[@]}" --destination ''
h replay --store "$S" --event-id zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz
h replay --store "$S" --event-id $'01890a5d-ac96-774b-bcce-b302099a8057\n'
h replay --store "$S" --event-id ''
h replay --store "$S"

# Relation names.
h stats --store "$S" --relation $'\xff'
h stats --store "$S" --relation 'a b'
h stats --store "$S" --relation "$(long a 64)"
h stats --store "$S" --relation .t
h stats --store "$S" --relation s.
h stats --store "$S" --relation $'t\n'
h stats --store "$S" --relation '"outbox"'

# Store URIs.
h stats --store sqlite:
h stats --store 'postgresql://a:b#c@'
h stats --store file:
h stats --store %zz
h stats --store "sqlite://$TMP/dir"
h stats --store "sqlite://$TMP/fifo"
h stats --store sqlite:///nonexistent/x.db
h stats --store "$S%00x"
h stats --store "$S%zz"
h stats --store "sqlite://host$db"
h stats --store "$S?bogus=1"
h stats --store SQLITE:
h stats --store 'sqlite://[::1]/x.db'
h stats --store ://x
h stats --store 1sqlite:///x.db
h stats --store $'sqlite:///tmp/x\n.db'
h stats --store $'sqlite:///nonexistent/\xff.db'
h stats --store "sqlite://$(long / 3)$(long a 100000)"
h stats --store 'postgresql://h:99999999999999999999/db'
h stats --store 'postgresql://[zz]/db'
h stats --store 'postgresql://[::1/db'
h stats --store 'postgresql://h:/db'
h stats --store 'postgresql://h:0/db'
h stats --store 'postgresql://h/db?=x'
h stats --store 'postgresql://h/db?sslmode=%zz'
h stats --store nosuch:
h schema apply --store "sqlite://$TMP/fifo" --yes-i-know
h schema apply --store "sqlite://$TMP/dir" --yes-i-know

# Sink URIs.
h "${R[@]/$K/file://}"
h "${R[@]/$K/file:///}"
h "${R[@]/$K/file://$TMP/nodir/}"
h "${R[@]/$K/file:$TMP/x%00.jsonl}"
h "${R[@]/$K/stdout:?x=1}"
h "${R[@]/$K/stdout:%zz}"
h "${R[@]/$K/null:path}"
h "${R[@]/$K/}"
h "${R[@]/$K/$sink}"
h "${R[@]/$K/$'file:///tmp/a\tb'}"
h "${R[@]/$K/mqtt://x}"
h "${R[@]}" --driver /

# Payloads on the command line.
h "${ST[@]}" --payload ''
h "${ST[@]}" --payload $'{"a":"\x01"}'
h "${ST[@]}" --payload '[1,]'
h "${ST[@]}" --payload "$(long '[' 600)$(long ']' 600)"
h "${ST[@]}" --payload '{"a":1}{"b":2}'
h "${ST[@]}" --payload NaN
h "${ST[@]}" --payload 01
h "${ST[@]}" --payload $'"\xff"'
h "${ST[@]}" --payload '"\ud800"'
h "${ST[@]}" --payload - --count 2

# Payloads on stdin, one document a line: one bad line stages nothing.
stdin_case() {
    IN=$TMP/.in IN_LABEL=$1
    printf "$1" >"$IN"
    h "${ST[@]}" --payload -
    IN=/dev/null IN_LABEL=none
}
stdin_case 'hello\n'
stdin_case '{"a":\0001}\n'
stdin_case '{}\n{"a":1}\n{nope\n'
stdin_case '"\377"\n'
stdin_case '\357\273\277{}\n'
stdin_case '"\\ud800"\n'
stdin_case '{}\r{\n'
stdin_case '\0\n'
IN=$TMP/.in IN_LABEL=deep
long '[' 3000000 >"$IN"
h "${ST[@]}" --payload -
IN_LABEL=unterminated
{ printf '"'; long a 20000000; } >"$IN"
h "${ST[@]}" --payload -
IN=/dev/null IN_LABEL=none

# Not one of the cases: no command at all is a usage error too, but prints
# the list of commands (on stderr, so a script that forgot the command
# sees what there is), more than one line by design.
outbox >"$OUT" 2>"$ERR"
RC=$?
if [ "$RC" -ne 2 ] || [ -s "$OUT" ] || ! head -n 1 "$ERR" | grep -q '^usage: outbox '; then
    fail "outbox without a command: exit $RC, stdout $(wc -c <"$OUT") bytes, stderr $(head -n 1 "$ERR")"
else
    pass "outbox without a command: exit 2, the usage on stderr"
fi

echo "hostile inputs: $cases"
[ "$cases" -ge 100 ] || fail "only $cases hostile inputs, expected at least 100"
echo "$((cases - bad)) passed, $bad failed"
finish
