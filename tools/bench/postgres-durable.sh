#!/usr/bin/env bash
# A throwaway PostgreSQL server for benchmarks, durable like production:
# fsync, synchronous_commit and full_page_writes on (tools/services/postgres.sh,
# the test service, turns them off for speed; the numbers of
# docs/performance.md need them on). Autovacuum runs with the server's defaults.
#
#   tools/bench/postgres-durable.sh start DIR   initdb (first time), start, create the
#                                               database, print `export OUTBOX_PG_URI=...`
#   tools/bench/postgres-durable.sh stop DIR    stop it (DIR is left to the caller)
#
# Port: the first free one from OUTBOX_BENCH_PG_PORT (default 54400). Extra
# server settings: OUTBOX_BENCH_PG_OPTS (e.g. "-c autovacuum=off").
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
cmd=$1 dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r | head -1)
[ -x "$bin/pg_ctl" ] || { echo "postgres-durable.sh: no PostgreSQL server installed" >&2; exit 2; }
as_owner() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
start)
    mkdir -p "$dir/run"
    dir=$(cd "$dir" && pwd)
    [ "$(id -u)" = 0 ] && chown postgres: "$dir" "$dir/run"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$dir/data" -U outbox -A trust -E UTF8 --locale=C.UTF-8 \
            >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        port=${OUTBOX_BENCH_PG_PORT:-54400}
        while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
        echo "$port" >"$dir/port"
        # shellcheck disable=SC2086
        as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir/run \
                -c fsync=on -c synchronous_commit=on -c full_page_writes=on \
                -c shared_buffers=256MB -c max_connections=50 ${OUTBOX_BENCH_PG_OPTS:-}" \
            start >/dev/null || { tail -20 "$dir/server.log" >&2; exit 1; }
        "$bin/createdb" -h "$dir/run" -p "$port" -U outbox outbox_bench 2>/dev/null || true
    fi
    echo "export OUTBOX_PG_URI=postgresql://outbox@127.0.0.1:$(cat "$dir/port")/outbox_bench"
    ;;
stop)
    [ -f "$dir/data/PG_VERSION" ] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 status >/dev/null 2>&1 || exit 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
    ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
