#!/usr/bin/env bash
# Smoke test of outbox-inbox-bench (declared beside bench_quick in
# tools/bench/meson.build): it runs a second on SQLite with 1 and 2
# threads, and on PostgreSQL and MongoDB when OUTBOX_PG_URI and
# OUTBOX_MONGO_URI name servers, exits 0 with a positive rate and leaves
# no records behind; bad input and a store that is not ready are one line
# and exit 2; a password in --store never shows. Never checks a speed.
#
#   bench_inbox.sh OUTBOX_CLI OUTBOX_INBOX_BENCH
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"
BENCH=${2:?usage: bench_inbox.sh OUTBOX_CLI OUTBOX_INBOX_BENCH}
case $BENCH in /*) ;; *) BENCH=$PWD/$BENCH ;; esac

bench() {
    "$BENCH" "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# ran WHAT ARGS...: exit 0 and one line with a positive rate (human or JSON).
ran() {
    local what=$1 rate
    shift
    bench "$@"
    if [ "$RC" -ne 0 ]; then
        fail "$what: exited $RC: $(head -c 400 "$ERR")"
        return 1
    fi
    rate=$(sed -nE -e 's/^inbox [a-z0-9_-]+ threads=[0-9]+ mode=(own|tx)( dup-ratio=[0-9.]+)?: ([0-9]+) records\/s \(new [0-9]+, duplicate [0-9]+, p50 [0-9.e+]+ ms, p99 [0-9.e+]+ ms(, retried [0-9]+)?\)$/\3/p' \
        -e 's/^\{"bench":"inbox",.*"records_per_s":([0-9.]+),.*\}$/\1/p' "$OUT")
    if [ "$(wc -l <"$OUT")" = 1 ] && [ -n "$rate" ] && awk "BEGIN { exit !($rate > 0) }"; then
        pass "$what: $(cat "$OUT")"
    else
        fail "$what: no line with a positive rate in: $(cat "$OUT")"
    fi
}

# refused PATTERN ARGS...: exit 2, nothing on stdout, one stderr line that
# starts with the program's name and matches PATTERN (grep -E).
refused() {
    local pattern=$1
    shift
    bench "$@"
    if [ "$RC" -ne 2 ] || [ -s "$OUT" ] || [ "$(wc -l <"$ERR")" -ne 1 ] ||
        ! grep -q '^outbox-inbox-bench: ' "$ERR" || ! grep -Eq -- "$pattern" "$ERR"; then
        fail "$* -> exit $RC, stdout '$(head -c 200 "$OUT")', stderr '$(head -c 400 "$ERR")'; expected 2 and /$pattern/"
    else
        pass "$* -> $(cat "$ERR")"
    fi
}

# no_records STORE [ARGS...]: the store's inbox has no consumer left.
no_records() {
    if outbox inbox stats --store "$@" --json >"$TMP/stats" 2>&1 &&
        grep -qx '{"consumers": \[\]}' "$TMP/stats"; then
        pass "the inbox is as the bench found it"
    else
        fail "records left in the inbox: $(cat "$TMP/stats")"
    fi
}

# --------------------------------------------------------------- SQLite
DB=$TMP/inbox.db
STORE=sqlite://$DB
outbox schema apply --store "$STORE" --inbox --yes-i-know >/dev/null 2>"$ERR" ||
    { fail "schema apply --inbox: $(cat "$ERR")"; finish; }
ran "sqlite, 1 thread" --store "$STORE" --seconds 1
ran "sqlite, 2 threads" --store "$STORE" --seconds 1 --threads 2
ran "sqlite, 2 threads, tx, repeats, json" --store "$STORE" --seconds 0.5 --threads 2 --mode tx \
    --dup-ratio 0.5 --json
no_records "$STORE"

# -------------------------------------------------- stores not ready
new_db plain
refused 'no inbox table.*create it with `outbox schema apply --store .*--inbox --yes-i-know`' \
    --store "sqlite://$DB" --seconds 1
DB=$TMP/inbox.db
refused 'cannot open the store: .*create it with `outbox schema apply' \
    --store "sqlite://$TMP/missing.db" --seconds 1

# ------------------------------------------------------------ bad input
refused '^outbox-inbox-bench: --store is required' --seconds 1
refused '^outbox-inbox-bench: --threads: expected a whole number from 1 to [0-9]+, got "0"$' \
    --store "$STORE" --threads 0
refused '^outbox-inbox-bench: --threads: expected a whole number .* got "abc"$' \
    --store "$STORE" --threads abc
refused '^outbox-inbox-bench: --seconds: expected a number of seconds above 0 .* got "-1"$' \
    --store "$STORE" --seconds -1
refused '^outbox-inbox-bench: unknown option --bogus \(try --help\)$' --store "$STORE" --bogus
refused '^outbox-inbox-bench: --mode: expected own or tx, got "batch"$' --store "$STORE" --mode batch
refused '^outbox-inbox-bench: --dup-ratio: expected a fraction from 0 to below 1' \
    --store "$STORE" --dup-ratio 1
refused '^outbox-inbox-bench: --threads needs a value$' --store "$STORE" --threads

# A password in --store, for a server that does not answer: neither output
# shows it, whatever the failure.
SECRET=Inb0xBenchS3cret
for uri in "postgresql://bench:$SECRET@127.0.0.1:1/nowhere?connect_timeout=2" \
    "mongodb://bench:$SECRET@127.0.0.1:1/nowhere?serverSelectionTimeoutMS=2000" \
    "sqlite://$DB?password=$SECRET"; do
    bench --store "$uri" --seconds 1
    [ "$RC" -ne 0 ] && pass "${uri%%:*} with a password: exit $RC: $(head -c 300 "$ERR")" ||
        fail "${uri%%:*} with a password: exit 0"
    no_secret_in "$SECRET" "$OUT" "stdout of ${uri%%:*}"
    no_secret_in "$SECRET" "$ERR" "stderr of ${uri%%:*}"
done

# ----------------------------------------------------------- PostgreSQL
if [ -z "${OUTBOX_PG_URI:-}" ]; then
    skip_part "PostgreSQL: OUTBOX_PG_URI is not set"
elif ! command -v psql >/dev/null 2>&1; then
    skip_part "PostgreSQL: no psql on PATH"
else
    URI=$OUTBOX_PG_URI
    pg_schema inbox_bench
    outbox schema apply --store "$URI" --relation "$SCH.outbox" --inbox --yes-i-know >/dev/null 2>"$ERR" ||
        fail "schema apply --inbox on PostgreSQL: $(cat "$ERR")"
    ran "postgres, 1 thread" --store "$URI" --relation "$SCH.outbox" --seconds 1
    ran "postgres, 2 threads, tx" --store "$URI" --relation "$SCH.outbox" --seconds 1 --threads 2 \
        --mode tx
    no_records "$URI" --relation "$SCH.outbox"
fi

# -------------------------------------------------------------- MongoDB
if [ -z "${OUTBOX_MONGO_URI:-}" ]; then
    skip_part "MongoDB: OUTBOX_MONGO_URI is not set"
else
    mongo_db inbox_bench
    outbox schema apply --store "$MONGO_URI" --inbox --yes-i-know >/dev/null 2>"$ERR" ||
        fail "schema apply --inbox on MongoDB: $(cat "$ERR")"
    ran "mongo, 1 thread" --store "$MONGO_URI" --seconds 1
    ran "mongo, 2 threads" --store "$MONGO_URI" --seconds 1 --threads 2
    # A server without transactions (FerretDB) refuses --mode tx up front.
    bench --store "$MONGO_URI" --seconds 0.5 --mode tx
    if [ "$RC" = 2 ] && grep -q 'has no transactions on this server; use --mode own' "$ERR"; then
        pass "mongo --mode tx without server transactions: $(cat "$ERR")"
    elif [ "$RC" = 0 ]; then
        pass "mongo --mode tx: $(cat "$OUT")"
    else
        fail "mongo --mode tx: exit $RC: $(cat "$ERR")"
    fi
    no_records "$MONGO_URI"
fi
finish
