#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests.
#
#   tools/services/postgres.sh start DIR    initdb into DIR (first time), start the
#                                           server, create the test database, and print
#                                           `export OUTBOX_PG_...=...` lines to eval
#   tools/services/postgres.sh env DIR      print those lines again (server running)
#   tools/services/postgres.sh restart DIR  pg_ctl restart (tests restart it under a relay)
#   tools/services/postgres.sh restart DIR immediate
#                                           the same with -m immediate: every backend is
#                                           killed without a checkpoint and the start does
#                                           crash recovery, as after a server crash
#   tools/services/postgres.sh stop DIR     stop it (DIR is left for the caller to remove)
#   tools/services/postgres.sh status DIR   exit 0 when it runs
#
# The server listens on 127.0.0.1 and on a socket in DIR/run, on the first free
# port from OUTBOX_PG_PORT (default 23329). It trusts local connections and runs
# with fsync off: it holds nothing worth keeping, and the tests want speed.
# initdb refuses to run as root, so under root the cluster belongs to the
# "postgres" system user (the postgresql package creates it).
#
# Every command is idempotent: start on a running server only prints the
# exports, stop on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
db_name=outbox_test
db_user=outbox

die() {
    echo "postgres.sh: $*" >&2
    exit 2
}

usage() {
    echo "usage: $0 start|env|stop|status DIR, or restart DIR [immediate]" >&2
    exit 2
}

[ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$1" = restart ] && [ "$3" = immediate ]; } || usage
cmd=$1
dir=$2
mode=fast
[ $# -eq 3 ] && mode=$3

find_bin() {
    local d
    # Newest major version first.
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done
    command -v pg_ctl >/dev/null 2>&1 && dirname "$(command -v pg_ctl)" && return 0
    return 1
}

ensure_packages() {
    if ! find_bin >/dev/null || ! command -v pg_config >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install $OUTBOX_SERVICE_PACKAGES || die "could not install $OUTBOX_SERVICE_PACKAGES"
    fi
    bin=$(find_bin) || die "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (install postgresql)"
}

# Runs a server binary as the cluster's owner.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

data=$dir/data
run=$dir/run
log=$dir/server.log

port_in_use() {
    # bash's /dev/tcp connects: success means something listens there.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
    local p=${OUTBOX_PG_PORT:-23329} tries=0
    while port_in_use "$p"; do
        p=$((p + 1))
        tries=$((tries + 1))
        [ $tries -lt 100 ] || die "no free port from ${OUTBOX_PG_PORT:-23329} on"
    done
    echo "$p"
}

running() {
    [ -f "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_PG_URI=postgresql://$db_user@127.0.0.1:$port/$db_name"
    echo "export OUTBOX_PG_DIR=$dir"
    echo "export OUTBOX_PG_SOCKET=$run"
    echo "export OUTBOX_PG_PORT=$port"
}

init_cluster() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    data=$dir/data
    run=$dir/run
    log=$dir/server.log
    mkdir -p "$run"
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || die "no postgres user to own the cluster (install postgresql)"
        chown postgres: "$dir" "$run"
        runuser -u postgres -- test -x "$dir" ||
            die "$dir is not reachable by the postgres user (a parent directory is private); use a directory under /tmp"
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$data" -U "$db_user" -A trust -E UTF8 --locale=C.UTF-8 --no-sync \
            >"$dir/initdb.log" 2>&1 || {
            cat "$dir/initdb.log" >&2
            die "initdb failed"
        }
    fi
}

start() {
    init_cluster
    if running; then
        print_env
        return 0
    fi
    local port
    port=$(pick_port)
    echo "$port" >"$dir/port"
    # fsync/full_page_writes off: a crash of this throwaway server may corrupt
    # it, and that is fine. max_connections covers many parallel test relays.
    as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$run \
            -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
            -c max_connections=200 -c shared_buffers=128MB" \
        start >/dev/null || {
        tail -20 "$log" >&2 || true
        die "pg_ctl start failed"
    }
    if ! "$bin/psql" -X -q -h "$run" -p "$port" -U "$db_user" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db_name'" | grep -q 1; then
        "$bin/createdb" -h "$run" -p "$port" -U "$db_user" "$db_name" || die "createdb failed"
    fi
    print_env
}

stop() {
    [ -d "$data" ] || return 0
    if running; then
        as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || die "pg_ctl stop failed"
    fi
}

restart() {
    [ -f "$data/PG_VERSION" ] || die "no cluster in $dir (start it first)"
    as_owner "$bin/pg_ctl" -D "$data" -l "$log" -m "$mode" -w -t 60 restart >/dev/null ||
        die "pg_ctl restart failed"
}

case $cmd in
start)
    ensure_packages
    start
    ;;
env)
    bin=$(find_bin) || die "PostgreSQL is not installed"
    running || die "no server running in $dir"
    print_env
    ;;
restart)
    bin=$(find_bin) || die "PostgreSQL is not installed"
    restart
    ;;
stop)
    bin=$(find_bin) || exit 0
    stop
    ;;
status)
    bin=$(find_bin) || exit 1
    running
    ;;
*)
    usage
    ;;
esac
