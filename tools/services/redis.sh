#!/usr/bin/env bash
# A throwaway redis-server for the tests.
#
#   tools/services/redis.sh start DIR    start the server (its append-only file in DIR/data)
#                                        and print `export OUTBOX_REDIS_...=...` lines to
#                                        eval; on a DIR whose server was stopped or killed,
#                                        start the same server again: same data, same port
#   tools/services/redis.sh env DIR      print those lines again (server running)
#   tools/services/redis.sh stop DIR     SIGTERM (a clean shutdown), wait for the exit (DIR
#                                        is left for the caller to remove)
#   tools/services/redis.sh kill DIR     SIGKILL, as after a crash
#   tools/services/redis.sh status DIR   exit 0 when it runs
#   tools/services/redis.sh replica DIR PRIMARY_DIR
#                                        a replica (replicaof) of the running server in
#                                        PRIMARY_DIR, in DIR on a port of its own, started
#                                        and synced; prints its `export OUTBOX_REDIS_...`
#                                        lines. stop, kill, status and env take its DIR
#   tools/services/redis.sh sentinel DIR PRIMARY_DIR [NAME]
#                                        a redis-sentinel in DIR, on a port of its own,
#                                        watching the server in PRIMARY_DIR under NAME
#                                        (default outbox) with a quorum of 1; prints
#                                        `export OUTBOX_REDIS_SENTINEL_...` lines. stop,
#                                        kill, status and env take its DIR
#
# The server listens on 127.0.0.1, on the first free port from OUTBOX_REDIS_PORT
# (default 23379). OUTBOX_REDIS_PASSWORD, when set at the first start, makes it
# require that password (requirepass) from then on. OUTBOX_REDIS_ACL=1 at the
# first start adds an ACL user "outbox" with a random password (made once per
# DIR, in DIR/acl.password) and every right; the default user stays as it is
# (the tests' own redis-cli), and the exports add OUTBOX_REDIS_ACL_PASSWORD
# and OUTBOX_REDIS_ACL_URI (redis://outbox:PASSWORD@...). TLS: the Debian
# hiredis the sink is built on has none (see docs/sinks.md).
#
# Durability: --appendonly yes --appendfsync always. Redis then writes and
# fsyncs the append-only file before it sends the replies of the commands it
# just ran (one fsync per event-loop turn, so a pipeline shares it), so every
# XADD the sink reported OK survives a SIGKILL of the server, not only a clean
# stop. everysec would lose up to a second of acknowledged entries on a
# crash; the tests kill the server with SIGKILL and count on nothing lost.
#
# Failover: the sentinel declares the primary down after 1 s without an
# answer (down-after-milliseconds) and, with a quorum of 1, promotes a
# replica on its own; failover-timeout (5 s) bounds a failover that stalls.
# `redis-cli -p SENTINEL_PORT sentinel get-master-addr-by-name NAME` says
# where the primary is. A sentinel rewrites its configuration file
# (DIR/sentinel.conf) as it learns the topology, so a restart in the same
# DIR remembers it. Replicas and the sentinel take the primary's password
# (masterauth, auth-pass) when it has one.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing; replica and sentinel
# on a DIR where one runs only print its exports.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)

die() {
    echo "redis.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=redis-server

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR, replica DIR PRIMARY_DIR, or sentinel DIR PRIMARY_DIR [NAME]" >&2
    exit 2
}

case $# in
2) [ "$1" != replica ] && [ "$1" != sentinel ] || usage ;;
3) [ "$1" = replica ] || [ "$1" = sentinel ] || usage ;;
4) [ "$1" = sentinel ] || usage ;;
*) usage ;;
esac
cmd=$1
dir=$2
primary_dir=${3:-}
master_name=${4:-outbox}

ensure_packages() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install redis-server redis-tools || die "could not install redis-server"
    fi
    command -v redis-server >/dev/null 2>&1 || die "no redis-server (install redis-server)"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process is a
# redis-server (or, in a sentinel's DIR, a redis-sentinel).
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -qE 'redis-(server|sentinel)' "/proc/$pid/cmdline" 2>/dev/null
}

# PONG, or -NOAUTH from a server with a password: it answers, and has
# loaded its data (a loading server answers -LOADING).
healthy() {
    local out
    out=$(redis-cli -h 127.0.0.1 -p "$(cat "$dir/port")" --no-auth-warning PING 2>&1) || return 1
    case $out in PONG | NOAUTH*) return 0 ;; *) return 1 ;; esac
}

print_env() {
    local port
    port=$(cat "$dir/port")
    if [ -f "$dir/sentinel_name" ]; then
        echo "export OUTBOX_REDIS_SENTINEL_PORT=$port"
        echo "export OUTBOX_REDIS_SENTINEL_NAME=$(cat "$dir/sentinel_name")"
        echo "export OUTBOX_REDIS_SENTINEL_DIR=$dir"
        return 0
    fi
    echo "export OUTBOX_REDIS_URI=redis://127.0.0.1:$port"
    echo "export OUTBOX_REDIS_DIR=$dir"
    echo "export OUTBOX_REDIS_PORT=$port"
    if [ -f "$dir/acl.password" ]; then
        echo "export OUTBOX_REDIS_ACL_PASSWORD=$(cat "$dir/acl.password")"
        echo "export OUTBOX_REDIS_ACL_URI=redis://outbox:$(cat "$dir/acl.password")@127.0.0.1:$port"
    fi
}

start() {
    mkdir -p "$dir/data"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its port, so clients reconnect to the same address.
    local port
    if [ -f "$dir/port" ]; then
        port=$(cat "$dir/port")
        ! port_in_use "$port" || die "port $port of the server in $dir is taken by another process"
    else
        port=$(free_port "${OUTBOX_REDIS_PORT:-23379}")
        echo "$port" >"$dir/port"
    fi
    # The password goes into a config file of the directory (mode 600),
    # never onto the command line, which ps shows.
    if [ ! -f "$dir/redis.conf" ]; then
        (
            umask 077
            : >"$dir/redis.conf"
            if [ -n "${OUTBOX_REDIS_PASSWORD:-}" ]; then
                printf 'requirepass "%s"\n' "$OUTBOX_REDIS_PASSWORD" >>"$dir/redis.conf"
            fi
            if [ "${OUTBOX_REDIS_ACL:-}" = 1 ]; then
                od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/acl.password"
                printf 'user outbox on >%s ~* &* +@all\n' "$(cat "$dir/acl.password")" >>"$dir/redis.conf"
            fi
        )
    fi
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends (a Check test
    # case is), and the server must outlive it.
    setsid redis-server "$dir/redis.conf" --port "$port" --bind 127.0.0.1 --dir "$dir/data" \
        --save '' --appendonly yes --appendfsync always --daemonize no \
        --logfile "$dir/server.log" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "redis-server exited at start"; }
        healthy && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "redis-server did not answer within 30 s"
}

# primary_port: the port of the running server in $primary_dir.
primary_port() {
    [ -n "$primary_dir" ] && [ -f "$primary_dir/port" ] || die "no server was started in ${primary_dir:-?}"
    local pid
    pid=$(cat "$primary_dir/pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || die "no server running in $primary_dir"
    cat "$primary_dir/port"
}

# The primary's password, when its configuration has one.
primary_password() {
    sed -n 's/^requirepass "\(.*\)"$/\1/p' "$primary_dir/redis.conf" 2>/dev/null || true
}

# A new DIR for a replica or a sentinel: a port of its own.
own_port() {
    local port
    if [ -f "$dir/port" ]; then
        port=$(cat "$dir/port")
        ! port_in_use "$port" || die "port $port of the server in $dir is taken by another process"
    else
        port=$(free_port "${OUTBOX_REDIS_PORT:-23379}" "$1")
        echo "$port" >"$dir/port"
    fi
    echo "$port"
}

synced() {
    redis-cli -h 127.0.0.1 -p "$1" --no-auth-warning ${pass:+-a "$pass"} INFO replication 2>/dev/null |
        tr -d '\r' | grep -qx 'master_link_status:up'
}

replica() {
    local pport port pass i
    pport=$(primary_port)
    mkdir -p "$dir/data"
    dir=$(cd "$dir" && pwd)
    [ "$dir" != "$(cd "$primary_dir" && pwd)" ] || die "a replica needs a directory of its own"
    if running; then
        print_env
        return 0
    fi
    port=$(own_port "$pport")
    pass=$(primary_password)
    # The primary's password twice: the replica asks for it (requirepass,
    # so a promoted replica stays closed) and gives it (masterauth). Whose
    # replica it is goes into the file too, not onto the command line: a
    # restart with `start DIR` keeps it a replica, and a Sentinel that
    # moves it to another primary rewrites the line (CONFIG REWRITE).
    if [ ! -f "$dir/redis.conf" ]; then
        (
            umask 077
            printf 'replicaof 127.0.0.1 %s\n' "$pport" >"$dir/redis.conf"
            if [ -n "$pass" ]; then
                printf 'requirepass "%s"\nmasterauth "%s"\n' "$pass" "$pass" >>"$dir/redis.conf"
            fi
        )
    fi
    setsid redis-server "$dir/redis.conf" --port "$port" --bind 127.0.0.1 --dir "$dir/data" \
        --save '' --appendonly yes --appendfsync always --daemonize no \
        --logfile "$dir/server.log" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "the replica exited at start"; }
        synced "$port" && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "the replica on $port did not sync with the primary on $pport within 30 s"
}

# The sentinel knows the primary by name: it answers with its address.
watching() {
    redis-cli -h 127.0.0.1 -p "$1" SENTINEL get-master-addr-by-name "$master_name" 2>/dev/null |
        grep -qx "$2"
}

sentinel() {
    local pport port pass i
    command -v redis-sentinel >/dev/null 2>&1 || {
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install redis-sentinel || die "could not install redis-sentinel"
    }
    command -v redis-sentinel >/dev/null 2>&1 || die "no redis-sentinel (install redis-sentinel)"
    [[ $master_name =~ ^[A-Za-z0-9_.-]+$ ]] || die "sentinel name \"$master_name\" is not letters, digits, _ . -"
    pport=$(primary_port)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ "$dir" != "$(cd "$primary_dir" && pwd)" ] || die "a sentinel needs a directory of its own"
    if running; then
        print_env
        return 0
    fi
    port=$(own_port "$pport")
    pass=$(primary_password)
    # The sentinel rewrites this file; a restart keeps what it learned.
    if [ ! -f "$dir/sentinel.conf" ]; then
        (
            umask 077
            {
                echo "bind 127.0.0.1"
                echo "port $port"
                echo "dir $dir"
                echo "logfile $dir/server.log"
                echo "sentinel monitor $master_name 127.0.0.1 $pport 1"
                echo "sentinel down-after-milliseconds $master_name 1000"
                echo "sentinel failover-timeout $master_name 5000"
                echo "sentinel parallel-syncs $master_name 1"
                [ -z "$pass" ] || printf 'sentinel auth-pass %s "%s"\n' "$master_name" "$pass"
            } >"$dir/sentinel.conf"
        )
        echo "$master_name" >"$dir/sentinel_name"
    fi
    master_name=$(cat "$dir/sentinel_name")
    setsid redis-sentinel "$dir/sentinel.conf" --daemonize no </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "redis-sentinel exited at start"; }
        watching "$port" 127.0.0.1 && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "redis-sentinel on $port did not watch $master_name within 30 s"
}

case $cmd in
start)
    ensure_packages
    start
    ;;
env)
    running || die "no server running in $dir"
    dir=$(cd "$dir" && pwd)
    print_env
    ;;
stop)
    stop_with TERM
    ;;
kill)
    stop_with KILL
    ;;
status)
    running
    ;;
replica)
    ensure_packages
    replica
    ;;
sentinel)
    ensure_packages
    sentinel
    ;;
*)
    usage
    ;;
esac
