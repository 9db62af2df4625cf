#!/usr/bin/env bash
# A throwaway NATS server with JetStream for the tests.
#
#   tools/services/nats.sh start DIR    start the server (JetStream store in DIR/js) and
#                                       print `export OUTBOX_NATS_...=...` lines to eval;
#                                       on a DIR whose server was stopped or killed, start
#                                       the same server again: same store, same ports
#   tools/services/nats.sh env DIR      print those lines again (server running)
#   tools/services/nats.sh stop DIR     SIGTERM, wait for the exit (DIR is left for the
#                                       caller to remove)
#   tools/services/nats.sh kill DIR     SIGKILL, as after a crash
#   tools/services/nats.sh status DIR   exit 0 when it runs
#
# The server listens on 127.0.0.1, on the first free port from OUTBOX_NATS_PORT
# (default 23222), with its monitoring port on the next free one after it. It
# is ready when /healthz?js-enabled-only=true answers on the monitoring port.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)

die() {
    echo "nats.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=nats-server

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

ensure_packages() {
    if ! command -v nats-server >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install nats-server curl || die "could not install nats-server"
    fi
    command -v nats-server >/dev/null 2>&1 || die "no nats-server (install nats-server)"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process is a nats-server.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -q nats-server "/proc/$pid/cmdline" 2>/dev/null
}

healthy() {
    curl -fsS -o /dev/null --max-time 2 \
        "http://127.0.0.1:$(cat "$dir/monitor_port")/healthz?js-enabled-only=true" 2>/dev/null
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_NATS_URI=nats://127.0.0.1:$port"
    echo "export OUTBOX_NATS_DIR=$dir"
    echo "export OUTBOX_NATS_PORT=$port"
}

start() {
    mkdir -p "$dir/js"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its ports, so clients reconnect to the same address.
    local port mport
    service_ports "$dir" "${OUTBOX_NATS_PORT:-23222}" port monitor_port
    port=$main_port
    mport=$other_port
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends (a Check test
    # case is), and the server must outlive it.
    setsid nats-server -js -sd "$dir/js" -a 127.0.0.1 -p "$port" -m "$mport" \
        >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "nats-server exited at start"; }
        healthy && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "nats-server did not become healthy within 30 s"
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
