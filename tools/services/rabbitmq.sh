#!/usr/bin/env bash
# A throwaway RabbitMQ node (AMQP 0-9-1) for the tests.
#
#   tools/services/rabbitmq.sh start DIR    start a node with its data in DIR and print
#                                           `export OUTBOX_RABBITMQ_...=...` lines to eval;
#                                           on a DIR whose node was stopped or killed, start
#                                           the same node again: same name, same data
#                                           (durable queues and persistent messages), same
#                                           ports
#   tools/services/rabbitmq.sh env DIR      print those lines again (node running)
#   tools/services/rabbitmq.sh stop DIR     clean stop (SIGTERM, wait for the exit), then
#                                           stop the node's own epmd; DIR is left for the
#                                           caller to remove
#   tools/services/rabbitmq.sh kill DIR     SIGKILL the node, as after a crash (its epmd
#                                           stays, as a machine's would; stop ends it)
#   tools/services/rabbitmq.sh status DIR   exit 0 when the node runs
#   tools/services/rabbitmq.sh ctl DIR ARGS...
#                                           rabbitmqctl ARGS on the node (the tests change
#                                           a password, close connections)
#
# Everything lives under DIR: HOME (the Erlang cookie, which rabbitmqctl reads
# too), the Mnesia database, the logs, the configuration file and the
# enabled-plugins file (none). The node listens on 127.0.0.1 only, on the
# first free port from OUTBOX_RABBITMQ_PORT (default 23720) for AMQP; the
# Erlang distribution port, the node's own epmd and the port range of
# rabbitmqctl take the next free ports after it. It is ready when the AMQP
# port accepts and `rabbitmqctl await_startup` says the broker runs. The URI
# printed uses the default guest account (allowed from loopback) and the
# default vhost "/" (written %2f).
#
# With OUTBOX_RABBITMQ_TLS=1 at the first start, the node also takes AMQP over
# TLS on the next free port, with the certificate for localhost that
# tools/services/tls.sh makes in DIR/tls, and the exports add
# OUTBOX_RABBITMQ_TLS_URI (amqps://...@localhost:PORT/%2f?tls_ca=DIR/tls/ca.pem).
# The node then also has a user "outbox" with a random password (made once
# per DIR, in DIR/tls/amqp.password) and full rights on "/", and the exports
# add OUTBOX_RABBITMQ_PASSWORD and OUTBOX_RABBITMQ_TLS_USER_URI (that user,
# over TLS). OUTBOX_RABBITMQ_TLS_VERIFY=1 makes the TLS listener require a
# client certificate signed by the test CA; OUTBOX_RABBITMQ_TLS_CERT=wronghost
# presents the certificate for wrong-host.invalid instead of localhost's.
#
# Every command is idempotent: start on a running node only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
rabbit_bin=/usr/lib/rabbitmq/bin

die() {
    echo "rabbitmq.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR, or ctl DIR ARGS..." >&2
    exit 2
}

[ $# -eq 2 ] || { [ $# -gt 2 ] && [ "$1" = ctl ]; } || usage
cmd=$1
dir=$2
shift 2

ensure_packages() {
    if [ ! -x "$rabbit_bin/rabbitmq-server" ] || ! command -v epmd >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install rabbitmq-server || die "could not install rabbitmq-server"
    fi
    [ -x "$rabbit_bin/rabbitmq-server" ] || die "no $rabbit_bin/rabbitmq-server (install rabbitmq-server)"
}

pid_of() {
    cat "$dir/${1:-pid}" 2>/dev/null || true
}

# A pid file names our process only while that process is what we started
# (the node is an Erlang VM, beam.smp, running the rabbit application).
alive() {
    local pid
    pid=$(pid_of "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q "$2" "/proc/$pid/cmdline" 2>/dev/null
}

running() {
    alive pid rabbit
}

# The node's environment, for the server and for rabbitmqctl alike.
node_env() {
    local port epmd dist ctl
    port=$(cat "$dir/port")
    epmd=$(cat "$dir/epmd_port")
    dist=$(cat "$dir/dist_port")
    ctl=$(cat "$dir/ctl_port")
    export HOME="$dir/home"
    export RABBITMQ_NODENAME="outbox$port@localhost"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$port"
    export RABBITMQ_DIST_PORT="$dist"
    export ERL_EPMD_PORT="$epmd"
    export ERL_EPMD_ADDRESS=127.0.0.1
    export RABBITMQ_CTL_DIST_PORT_MIN="$ctl"
    export RABBITMQ_CTL_DIST_PORT_MAX=$((ctl + 4))
    export RABBITMQ_MNESIA_BASE="$dir/mnesia"
    export RABBITMQ_LOG_BASE="$dir/log"
    export RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
    export RABBITMQ_PID_FILE="$dir/node.pid"
    # The script then execs the VM, so the pid we keep is the node's.
    export RUNNING_UNDER_SYSTEMD=true
}


# The next port from $1 on that is free and not among the rest.
free_port_besides() {
    local p=$1 tries=0
    shift
    while port_in_use "$p" || [[ " $* " == *" $p "* ]]; do
        p=$((p + 1))
        tries=$((tries + 1))
        [ $tries -lt 100 ] || die "no free port from $1 on"
    done
    echo "$p"
}

# A node that ran in DIR before keeps its ports (clients reconnect to the
# same address); a new one takes free ports from the first one on.
choose_ports() {
    if [ -f "$dir/port" ]; then
        local f
        for f in port epmd_port dist_port $([ -f "$dir/tls_port" ] && echo tls_port); do
            # The node's epmd outlives a killed node: that one is ours.
            [ $f = epmd_port ] && alive epmd.pid epmd && continue
            ! port_in_use "$(cat "$dir/$f")" || die "port $(cat "$dir/$f") of the node in $dir is taken by another process"
        done
        return 0
    fi
    local port epmd dist ctl
    port=$(free_port_besides "${OUTBOX_RABBITMQ_PORT:-23720}")
    epmd=$(free_port_besides $((port + 1)) "$port")
    dist=$(free_port_besides $((epmd + 1)) "$port" "$epmd")
    ctl=$(free_port_besides $((dist + 1)) "$port" "$epmd" "$dist")
    echo "$epmd" >"$dir/epmd_port"
    echo "$dist" >"$dir/dist_port"
    echo "$ctl" >"$dir/ctl_port"
    if [ "${OUTBOX_RABBITMQ_TLS:-}" = 1 ]; then
        free_port_besides $((ctl + 5)) "$port" "$epmd" "$dist" >"$dir/tls_port"
    fi
    echo "$port" >"$dir/port"
}

# The certificates of tools/services/tls.sh, once per DIR; the node runs as
# its own user, so its key is made readable to it.
make_certs() {
    "$here/tools/services/tls.sh" make "$dir/tls" >/dev/null || die "no certificates for the TLS listener"
    chmod 644 "$dir/tls/server.key" "$dir/tls/wronghost.key"
    [ -f "$dir/tls/amqp.password" ] || od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/tls/amqp.password"
}

# The TLS mode's user, once the node runs.
tls_user() {
    local pw
    pw=$(cat "$dir/tls/amqp.password")
    {
        "$rabbit_bin/rabbitmqctl" -q list_users | grep -q '^outbox\b' ||
            "$rabbit_bin/rabbitmqctl" -q add_user outbox "$pw"
        "$rabbit_bin/rabbitmqctl" -q set_permissions -p / outbox '.*' '.*' '.*'
    } >/dev/null 2>"$dir/tls/user.err" || die "making the TLS mode's user failed: $(tail -1 "$dir/tls/user.err")"
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_RABBITMQ_URI=amqp://guest:guest@127.0.0.1:$port/%2f"
    echo "export OUTBOX_RABBITMQ_DIR=$dir"
    echo "export OUTBOX_RABBITMQ_PORT=$port"
    if [ -f "$dir/tls_port" ]; then
        local tp pw
        tp=$(cat "$dir/tls_port")
        pw=$(cat "$dir/tls/amqp.password")
        echo "export OUTBOX_RABBITMQ_TLS_URI=amqps://guest:guest@localhost:$tp/%2f?tls_ca=$dir/tls/ca.pem"
        echo "export OUTBOX_RABBITMQ_TLS_DIR=$dir/tls"
        echo "export OUTBOX_RABBITMQ_TLS_PORT=$tp"
        echo "export OUTBOX_RABBITMQ_PASSWORD=$pw"
        echo "export OUTBOX_RABBITMQ_TLS_USER_URI=amqps://outbox:$pw@localhost:$tp/%2f?tls_ca=$dir/tls/ca.pem"
    fi
}

write_config() {
    mkdir -p "$dir/home" "$dir/mnesia" "$dir/log"
    # No plugins: no management listener on a port of its own.
    echo "[]." >"$dir/enabled_plugins"
    cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = $(cat "$dir/port")
loopback_users.guest = true
log.console = false
log.file.level = warning
disk_free_limit.absolute = 50MB
vm_memory_high_watermark.absolute = 1GB
EOF
    if [ -f "$dir/tls_port" ]; then
        make_certs
        local cert=${OUTBOX_RABBITMQ_TLS_CERT:-server} verify=verify_none required=false
        [ -f "$dir/tls/$cert.pem" ] || die "OUTBOX_RABBITMQ_TLS_CERT=$cert: no such certificate"
        if [ "${OUTBOX_RABBITMQ_TLS_VERIFY:-}" = 1 ]; then verify=verify_peer required=true; fi
        cat >>"$dir/rabbitmq.conf" <<EOF
listeners.ssl.1 = 127.0.0.1:$(cat "$dir/tls_port")
ssl_options.cacertfile = $dir/tls/ca.pem
ssl_options.certfile = $dir/tls/$cert.pem
ssl_options.keyfile = $dir/tls/$cert.key
ssl_options.verify = $verify
ssl_options.fail_if_no_peer_cert = $required
EOF
    fi
}

start_epmd() {
    alive epmd.pid epmd && return 0
    setsid epmd -port "$ERL_EPMD_PORT" -address 127.0.0.1 >>"$dir/log/epmd.log" 2>&1 </dev/null &
    echo $! >"$dir/epmd.pid"
    local i
    for i in $(seq 1 50); do
        port_in_use "$ERL_EPMD_PORT" && return 0
        sleep 0.1
    done
    die "epmd did not listen on port $ERL_EPMD_PORT"
}

start() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/port" ] && running; then
        print_env
        return 0
    fi
    choose_ports
    write_config
    node_env
    start_epmd
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends (a Check test
    # case is), and the node must outlive it.
    setsid "$rabbit_bin/rabbitmq-server" >>"$dir/log/server.out" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i port
    port=$(cat "$dir/port")
    # A first boot takes up to about 12 s, a restart about 4.
    # Only whether it lives: while the script execs its way to the VM,
    # /proc/PID/cmdline may read empty for a moment.
    local pid
    pid=$(pid_of)
    for i in $(seq 1 600); do
        kill -0 "$pid" 2>/dev/null || { tail -30 "$dir/log/server.out" >&2; die "rabbitmq-server exited at start"; }
        if port_in_use "$port"; then
            if timeout 60 "$rabbit_bin/rabbitmqctl" -q await_startup --timeout 50 >/dev/null 2>&1; then
                [ ! -f "$dir/tls_port" ] || tls_user
                print_env
                return 0
            fi
        fi
        sleep 0.1
    done
    tail -30 "$dir/log/server.out" >&2
    die "rabbitmq-server did not start within 60 s"
}

# stop_with SIGNAL PIDFILE NAME: signal the process and wait until it is gone.
stop_with() {
    alive "$2" "$3" || return 0
    local pid i
    pid=$(pid_of "$2")
    kill "-$1" "$pid" 2>/dev/null || true
    for i in $(seq 1 600); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "$3 $pid did not exit within 60 s of SIG$1"
}

case $cmd in
start)
    ensure_packages
    start
    ;;
env)
    running || die "no node running in $dir"
    dir=$(cd "$dir" && pwd)
    print_env
    ;;
stop)
    [ -d "$dir" ] || exit 0
    # SIGTERM makes the node stop as `rabbitmqctl stop` would: queues and
    # messages are flushed to disk first.
    stop_with TERM pid rabbit
    stop_with TERM epmd.pid epmd
    ;;
kill)
    [ -d "$dir" ] || exit 0
    stop_with KILL pid rabbit
    ;;
status)
    running
    ;;
ctl)
    running || die "no node running in $dir"
    dir=$(cd "$dir" && pwd)
    node_env
    "$rabbit_bin/rabbitmqctl" -q "$@"
    ;;
*)
    usage
    ;;
esac
