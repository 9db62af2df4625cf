#!/usr/bin/env bash
# A throwaway three-node NATS cluster with JetStream for the fault tests:
# Debian's nats-server (2.9), nodes n1, n2 and n3 routed to each other.
#
#   tools/services/nats-cluster.sh start DIR    start every node not running (JetStream
#                                               store in DIR/nN/js), wait until JetStream
#                                               has a meta leader all three agree on, and
#                                               print `export OUTBOX_NATS_CLUSTER_...=...`
#   tools/services/nats-cluster.sh env DIR      print those lines again
#   tools/services/nats-cluster.sh stop DIR     SIGTERM every node, wait for them
#   tools/services/nats-cluster.sh status DIR   exit 0 when all three nodes run
#   tools/services/nats-cluster.sh kill DIR N        SIGKILL node N (1 to 3), as a crash
#   tools/services/nats-cluster.sh stop-node DIR N   SIGTERM node N
#   tools/services/nats-cluster.sh start-node DIR N  start node N again (same ports and
#                                                    store) and wait until it is healthy
#   tools/services/nats-cluster.sh leader DIR STREAM
#                                               the node number (1 to 3) leading the
#                                               stream's replicas, as the live nodes
#                                               report it; fails while no live node
#                                               leads it (during an election)
#   tools/services/nats-cluster.sh current DIR STREAM
#                                               how many of the stream's replicas are
#                                               current, its leader's included, as its
#                                               live leader reports (0 without one)
#
# OUTBOX_NATS_CLUSTER_URI names the three client ports the way the NATS sink
# takes a cluster (nats://h:p,h:p,h:p); OUTBOX_NATS_CLUSTER_URLS the same
# as a list of nats:// URLs, the way nats-py and other clients take it.
# Streams of three replicas need the JetStream meta leader, which is what
# start waits for.
#
# Ports: nine, on 127.0.0.1, the first free ones from OUTBOX_NATS_CLUSTER_PORT
# (default 23250): the client ports of n1..n3, then their monitoring ports,
# then their route ports. A node started again keeps its own.
#
# start, stop, kill and stop-node are idempotent.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
NODES="1 2 3"

die() {
    echo "nats-cluster.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"

usage() {
    echo "usage: $0 start|env|stop|status DIR | kill|stop-node|start-node DIR NODE | leader|current DIR STREAM" >&2
    exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2
[ -n "$dir" ] || die "the directory is empty"

ensure_packages() {
    if ! command -v nats-server >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1 ||
        ! command -v python3 >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install nats-server curl python3 || die "could not install nats-server"
    fi
    command -v nats-server >/dev/null 2>&1 || die "no nats-server (install nats-server)"
}

node_arg() {
    case ${1:-} in
    1 | 2 | 3) ;;
    *) die "no node '${1:-}': the nodes are 1, 2 and 3" ;;
    esac
}

# exited PID: the process is gone. (Just after a launch the pid is still
# the shell's child on its way to exec nats-server, which running() would
# not recognise yet.)
exited() {
    local state=
    read -r _ _ state _ 2>/dev/null <"/proc/$1/stat"
    [ -z "$state" ] || [ "$state" = Z ]
}

# The pid file names node N only while that process is a nats-server.
running() {
    local pid
    pid=$(cat "$dir/n$1/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q nats-server "/proc/$pid/cmdline" 2>/dev/null
}

all_running() {
    local n
    for n in $NODES; do running "$n" || return 1; done
}

print_env() {
    local n hosts= urls=
    for n in $NODES; do
        hosts="$hosts${hosts:+,}127.0.0.1:$(cat "$dir/n$n/port")"
        urls="$urls${urls:+,}nats://127.0.0.1:$(cat "$dir/n$n/port")"
    done
    echo "export OUTBOX_NATS_CLUSTER_URI=nats://$hosts"
    echo "export OUTBOX_NATS_CLUSTER_URLS=$urls"
    echo "export OUTBOX_NATS_CLUSTER_DIR=$dir"
    echo "export OUTBOX_NATS_CLUSTER_PORT=$(cat "$dir/n1/port")"
}

# ports: nine free ports, chosen once; a cluster that ran in DIR keeps its
# own, and fails if another process took one of a node that is down.
ports() {
    local n p f
    if [ -f "$dir/n3/route_port" ]; then
        for n in $NODES; do
            running "$n" && continue
            for f in port monitor_port route_port; do
                p=$(cat "$dir/n$n/$f")
                ! port_in_use "$p" || die "port $p of node $n in $dir is taken by another process"
            done
        done
        return 0
    fi
    p=$((${OUTBOX_NATS_CLUSTER_PORT:-23250} - 1))
    for f in port monitor_port route_port; do
        for n in $NODES; do
            p=$(free_port $((p + 1)))
            echo "$p" >"$dir/n$n/$f"
        done
    done
}

# launch N: node N in a session of its own, like a daemon (a test's process
# group may be killed as a whole; the cluster must outlive it).
launch() {
    local n=$1 m routes=
    for m in $NODES; do routes="$routes${routes:+,}nats://127.0.0.1:$(cat "$dir/n$m/route_port")"; done
    setsid nats-server -js -sd "$dir/n$n/js" --server_name "n$n" -a 127.0.0.1 \
        -p "$(cat "$dir/n$n/port")" -m "$(cat "$dir/n$n/monitor_port")" \
        --cluster_name outbox --cluster "nats://127.0.0.1:$(cat "$dir/n$n/route_port")" \
        --routes "$routes" >>"$dir/n$n/server.log" 2>&1 </dev/null &
    echo $! >"$dir/n$n/pid"
}

# monitor N PATH: node N's monitoring endpoint PATH.
monitor() {
    curl -fsS --max-time 2 "http://127.0.0.1:$(cat "$dir/n$1/monitor_port")$2" 2>/dev/null
}

healthy() {
    monitor "$1" "/healthz?js-enabled-only=true" >/dev/null
}

# meta_leader N: the JetStream meta leader node N knows of (empty when none).
meta_leader() {
    monitor "$1" /jsz | python3 -c '
import json, sys
print((json.load(sys.stdin).get("meta_cluster") or {}).get("leader", ""))' 2>/dev/null
}

# agreed: the three nodes name one meta leader.
agreed() {
    local n l first=
    for n in $NODES; do
        l=$(meta_leader "$n") || return 1
        [ -n "$l" ] || return 1
        [ -z "$first" ] || [ "$l" = "$first" ] || return 1
        first=$l
    done
}

# wait_for SECONDS WHAT CMD...: until CMD succeeds; a node that exits
# meanwhile, or the time running out, fails the command.
wait_for() {
    local end=$((SECONDS + $1)) what=$2 n
    shift 2
    until "$@"; do
        for n in "${!launched[@]}"; do
            exited "$(cat "$dir/n$n/pid")" && {
                tail -20 "$dir/n$n/server.log" >&2
                die "node $n exited during start"
            }
        done
        [ $SECONDS -lt $end ] || die "$what within $1 s"
        sleep 0.1
    done
}

declare -A launched=()

start_all() {
    local n
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    for n in $NODES; do mkdir -p "$dir/n$n/js"; done
    if all_running; then
        print_env
        return 0
    fi
    ports
    for n in $NODES; do
        running "$n" || { launch "$n"; launched[$n]=1; }
    done
    for n in $NODES; do wait_for 30 "node $n did not become healthy" healthy "$n"; done
    wait_for 60 "the nodes did not agree on a JetStream meta leader" agreed
    print_env
}

start_node() {
    local n=$1 f p
    [ -f "$dir/n$n/route_port" ] || die "no cluster in $dir: start it first"
    running "$n" && return 0
    for f in port monitor_port route_port; do
        p=$(cat "$dir/n$n/$f")
        ! port_in_use "$p" || die "port $p of node $n is taken by another process"
    done
    launch "$n"
    launched[$n]=1
    wait_for 30 "node $n did not become healthy" healthy "$n"
    wait_for 60 "node $n found no JetStream meta leader" knows_meta_leader "$n"
}

knows_meta_leader() {
    [ -n "$(meta_leader "$1")" ]
}

# stream_field STREAM N FIELD: from node N's /jsz, the stream's leader
# (FIELD leader) or how many replicas are current, the leader's included
# (FIELD current).
stream_field() {
    monitor "$2" "/jsz?streams=true" | python3 -c '
import json, sys
name, field = sys.argv[1], sys.argv[2]
for acc in json.load(sys.stdin).get("account_details") or []:
    for s in acc.get("stream_detail") or []:
        c = s.get("cluster") or {}
        if s.get("name") == name and c.get("leader"):
            if field == "leader":
                print(c["leader"])
            else:
                print(1 + sum(1 for r in c.get("replicas") or [] if r.get("current") and not r.get("offline")))
            sys.exit(0)
sys.exit(1)
' "$1" "$3" 2>/dev/null
}

# stream_leader STREAM: as the first live node that hosts the stream says,
# when the leader it names is alive too (a node goes on naming a crashed
# leader until the election that replaces it).
stream_leader() {
    local n l
    for n in $NODES; do
        running "$n" || continue
        l=$(stream_field "$1" "$n" leader) || continue
        case $l in
        n[123]) running "${l#n}" && { echo "${l#n}"; return 0; } ;;
        esac
    done
    echo "nats-cluster.sh: no live node names a leader of stream $1" >&2
    return 1
}

# stream_current STREAM: what the live leader says of its replicas.
stream_current() {
    local l
    l=$(stream_leader "$1" 2>/dev/null) && stream_field "$1" "$l" current || echo 0
}

# signal_nodes SIGNAL N...: signal the nodes that run and wait until they
# are gone.
signal_nodes() {
    local sig=$1 n i pids=()
    shift
    for n in "$@"; do
        running "$n" || continue
        pids+=("$(cat "$dir/n$n/pid")")
        kill "-$sig" "${pids[-1]}" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for i in $(seq 1 300); do
            kill -0 "$pid" 2>/dev/null || continue 2
            sleep 0.1
        done
        die "nats-server $pid did not exit within 30 s of SIG$sig"
    done
}

case $cmd in
start | env | stop | status) [ $# -eq 0 ] || usage ;;
kill | stop-node | start-node) [ $# -eq 1 ] || usage; node_arg "$1" ;;
leader | current)
    [ $# -eq 1 ] || usage
    [[ $1 =~ ^[A-Za-z0-9_-]+$ ]] || die "'$1' is not a stream name"
    ;;
*) usage ;;
esac
if [ "$cmd" != start ]; then
    # Nothing to stop, and no cluster running, where there is no directory.
    if [ ! -d "$dir" ]; then
        case $cmd in
        stop | kill | stop-node) exit 0 ;;
        status) exit 1 ;;
        *) die "no cluster in $dir" ;;
        esac
    fi
    dir=$(cd "$dir" && pwd)
fi

case $cmd in
start)
    ensure_packages
    start_all
    ;;
env)
    all_running || die "the cluster in $dir is not running"
    print_env
    ;;
stop)
    signal_nodes TERM $NODES
    ;;
status)
    all_running
    ;;
kill)
    signal_nodes KILL "$1"
    ;;
stop-node)
    signal_nodes TERM "$1"
    ;;
start-node)
    start_node "$1"
    ;;
leader)
    stream_leader "$1"
    ;;
current)
    stream_current "$1"
    ;;
esac
