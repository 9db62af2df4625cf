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
#
# The server listens on 127.0.0.1, on the first free port from OUTBOX_REDIS_PORT
# (default 23379). OUTBOX_REDIS_PASSWORD, when set at the first start, makes it
# require that password (requirepass) from then on.
#
# Durability: --appendonly yes --appendfsync always. Redis then writes and
# fsyncs the append-only file before it sends the replies of the commands it
# just ran (one fsync per event-loop turn, so a pipeline shares it), so every
# XADD the sink reported OK survives a SIGKILL of the server, not only a clean
# stop. everysec would lose up to a second of acknowledged entries on a
# crash; the tests kill the server with SIGKILL and count on nothing lost.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)

die() {
    echo "redis.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

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

# The pid file names our server only while that process is a redis-server.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null
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
    echo "export OUTBOX_REDIS_URI=redis://127.0.0.1:$port"
    echo "export OUTBOX_REDIS_DIR=$dir"
    echo "export OUTBOX_REDIS_PORT=$port"
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

# stop_with SIGNAL: signal the server and wait until it is gone.
stop_with() {
    running || return 0
    local pid i
    pid=$(pid_of)
    kill "-$1" "$pid" 2>/dev/null || true
    for i in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "redis-server $pid did not exit within 30 s of SIG$1"
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
*)
    usage
    ;;
esac
