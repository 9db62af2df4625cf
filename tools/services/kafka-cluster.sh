#!/usr/bin/env bash
# A throwaway three-node Kafka cluster for the fault tests: Apache Kafka 4.1.1
# in KRaft mode, each node both broker and controller, from the jars
# kafka.sh uses (kafka-lib.sh fetches them once).
#
#   tools/services/kafka-cluster.sh start DIR    format DIR/n1..n3 (first time), start
#                                                every node not running, wait until the
#                                                cluster is whole, and print
#                                                `export OUTBOX_KAFKA_CLUSTER_...=...` lines
#   tools/services/kafka-cluster.sh env DIR      print those lines again
#   tools/services/kafka-cluster.sh stop DIR     SIGTERM every node, wait (SIGKILL after 30 s)
#   tools/services/kafka-cluster.sh status DIR   exit 0 when all three nodes run
#   tools/services/kafka-cluster.sh kill DIR N        SIGKILL node N (1 to 3), as a crash
#   tools/services/kafka-cluster.sh stop-node DIR N   SIGTERM node N, a clean shutdown
#   tools/services/kafka-cluster.sh start-node DIR N  start node N again (same ports and
#                                                     data) and wait until it serves
#   tools/services/kafka-cluster.sh topic DIR NAME PARTITIONS [--assignment R:R,...] [CONFIG=VALUE...]
#                                                a topic with replication factor 3; or,
#                                                with --assignment, each partition's
#                                                replicas by node id, the preferred
#                                                leader first, partitions separated by
#                                                commas: "1:2,2:1,3:1" is 3 partitions
#                                                of replication factor 2, partition 2
#                                                led by node 3 (as many as PARTITIONS)
#   tools/services/kafka-cluster.sh elect DIR TOPIC
#                                                a preferred leader election on every
#                                                partition of TOPIC: each goes back to
#                                                its first replica, when in sync (a
#                                                node started again leads nothing until
#                                                then, or until Kafka's own rebalance
#                                                every 5 minutes)
#   tools/services/kafka-cluster.sh leaders DIR TOPIC
#                                                one line a partition: "PARTITION LEADER
#                                                ISR", the leader's node id (-1 for none)
#                                                and how many replicas are in sync
#
# Ready means what a test needs: all three brokers in the metadata and a
# topic with replication factor 3 created (then deleted). Every default is
# for that: replication factor 3 and min.insync.replicas=2 for the topics
# made without saying otherwise and for the internal ones, no topic made on
# first use, a 256 MB heap a node. A node that stops sending heartbeats is
# fenced after 6 s (Kafka's default is 9 s), so a leader's crash costs the
# tests a shorter pause.
#
# Ports: six, on 127.0.0.1, the first free ones from OUTBOX_KAFKA_CLUSTER_PORT
# (default 23110): each node's broker port, then the controllers'. A node
# started again keeps its own. The admin commands (ready, topic, leaders) use
# confluent-kafka from tools/services/pyclients.sh's environment.
#
# start, stop, kill and stop-node are idempotent.
set -euo pipefail

die() {
    echo "kafka-cluster.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka-lib.sh"

services=$(cd "$(dirname "$0")" && pwd)
NODES="1 2 3"

usage() {
    echo "usage: $0 start|env|stop|status DIR | kill|stop-node|start-node DIR NODE" \
        "| topic DIR NAME PARTITIONS [--assignment R:R,...] [CONFIG=VALUE...] | leaders|elect DIR TOPIC" >&2
    exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2
[ -n "$dir" ] || die "the directory is empty"

# node_arg N: N is one of the cluster's nodes.
node_arg() {
    case ${1:-} in
    1 | 2 | 3) ;;
    *) die "no node '${1:-}': the nodes are 1, 2 and 3" ;;
    esac
}

# exited PID: the process is gone. (Just after a launch the pid is still
# the shell's child on its way to exec java, which pid_alive would not
# recognise yet.)
exited() {
    local state=
    read -r _ _ state _ 2>/dev/null <"/proc/$1/stat"
    [ -z "$state" ] || [ "$state" = Z ]
}

pid_alive() {
    local pid
    pid=$(cat "$dir/n$1/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q kafka.Kafka "/proc/$pid/cmdline" 2>/dev/null
}

formatted() {
    local n
    for n in $NODES; do [ -f "$dir/n$n/data/meta.properties" ] || return 1; done
}

all_running() {
    local n
    for n in $NODES; do pid_alive "$n" || return 1; done
}

bootstrap() {
    local n list=
    for n in $NODES; do list="$list${list:+,}127.0.0.1:$(cat "$dir/n$n/port")"; done
    echo "$list"
}

print_env() {
    echo "export OUTBOX_KAFKA_CLUSTER_URI=kafka://$(bootstrap)"
    echo "export OUTBOX_KAFKA_CLUSTER_DIR=$dir"
    echo "export OUTBOX_KAFKA_CLUSTER_PORT=$(cat "$dir/n1/port")"
}

# ports: six free ports, chosen once; a cluster that ran in DIR keeps its
# own, and fails if another process took one.
ports() {
    local n p
    if [ -f "$dir/n3/controller_port" ]; then
        for n in $NODES; do
            for p in "$(cat "$dir/n$n/port")" "$(cat "$dir/n$n/controller_port")"; do
                pid_alive "$n" || ! port_in_use "$p" ||
                    die "port $p of node $n in $dir is taken by another process"
            done
        done
        return 0
    fi
    p=$((${OUTBOX_KAFKA_CLUSTER_PORT:-23110} - 1))
    for n in $NODES; do
        p=$(free_port $((p + 1)))
        echo "$p" >"$dir/n$n/port"
    done
    for n in $NODES; do
        p=$(free_port $((p + 1)))
        echo "$p" >"$dir/n$n/controller_port"
    done
}

write_config() {
    local n=$1 voters= m
    for m in $NODES; do voters="$voters${voters:+,}$m@127.0.0.1:$(cat "$dir/n$m/controller_port")"; done
    cat >"$dir/n$n/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(cat "$dir/n$n/port"),CONTROLLER://127.0.0.1:$(cat "$dir/n$n/controller_port")
advertised.listeners=PLAINTEXT://127.0.0.1:$(cat "$dir/n$n/port")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/n$n/data
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
# A crashed node is fenced, and its partitions get new leaders, this long
# after its last heartbeat.
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
# The cleaner's default 128 MiB buffer does not fit the small heap.
log.cleaner.dedupe.buffer.size=8388608
EOF
    kafka_log4j_config "$dir/n$n/log4j2.xml" "$dir/n$n/server.log"
}

java_opts=(-Xmx256m "${kafka_java_opts[@]}")

format_all() {
    local n id pids=()
    id=$(kafka_cluster_id)
    for n in $NODES; do
        mkdir -p "$dir/n$n/data"
        java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/n$n/log4j2.xml" -cp "$kafka_cache/libs/*" \
            kafka.tools.StorageTool format --cluster-id="$id" \
            --config "$dir/n$n/server.properties" >"$dir/n$n/format.log" 2>&1 &
        pids+=($!)
    done
    for n in $NODES; do
        wait "${pids[$((n - 1))]}" || {
            cat "$dir/n$n/format.log" >&2
            die "formatting the log directory of node $n failed"
        }
    done
}

# launch N: starts node N's broker in a session of its own, like a daemon
# (a test's process group may be killed as a whole; the cluster must not
# go with it before the test's stop).
launch() {
    local n=$1
    # Each start writes its log afresh; remove the last one first, so its
    # "started" line cannot fake readiness.
    rm -f "$dir/n$n/server.log"
    setsid java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/n$n/log4j2.xml" \
        -cp "$kafka_cache/libs/*" kafka.Kafka "$dir/n$n/server.properties" \
        </dev/null >"$dir/n$n/stdout.log" 2>&1 &
    echo $! >"$dir/n$n/pid"
}

# wait_started SECONDS N...: until each node logs that it started; a node
# that exits first, or a timeout, fails the command.
wait_started() {
    local end=$((SECONDS + $1)) n
    shift
    for n in "$@"; do
        until grep -q "Kafka Server started" "$dir/n$n/server.log" 2>/dev/null; do
            if exited "$(cat "$dir/n$n/pid")"; then
                tail -20 "$dir/n$n/server.log" "$dir/n$n/stdout.log" >&2 2>/dev/null || true
                die "node $n exited during start"
            fi
            [ $SECONDS -lt $end ] || {
                tail -20 "$dir/n$n/server.log" >&2 2>/dev/null || true
                die "node $n did not start within $1 s"
            }
            sleep 0.2
        done
    done
}

# admin WHAT ARGS...: the cluster's admin requests, through confluent-kafka.
admin() {
    if [ -z "${OUTBOX_PYTHON:-}" ]; then
        eval "$("$services/pyclients.sh")" || die "tools/services/pyclients.sh failed"
    fi
    "$OUTBOX_PYTHON" - "$(bootstrap)" "$@" <<'PYEOF'
import sys
import time
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

boot, what, args = sys.argv[1], sys.argv[2], sys.argv[3:]
a = AdminClient({"bootstrap.servers": boot, "log_level": 0})


def create(name, partitions, configs, assignment=None):
    if assignment:
        t = NewTopic(name, len(assignment), -1, replica_assignment=assignment, config=configs)
    else:
        t = NewTopic(name, partitions, 3, config=configs)
    f = a.create_topics([t], operation_timeout=20)
    f[name].result()


if what == "ready":
    # Whole: three brokers in the metadata, and a topic with a replica on
    # each can be made; else say what is missing when time runs out.
    end = time.monotonic() + float(args[0])
    last = "no answer"
    while time.monotonic() < end:
        try:
            brokers = a.list_topics(timeout=5).brokers
            if len(brokers) == 3:
                try:
                    create("outbox_ready", 1, {})
                except KafkaException as e:
                    # Left by a start that was interrupted: made before.
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                a.delete_topics(["outbox_ready"], operation_timeout=20)["outbox_ready"].result()
                sys.exit(0)
            last = f"{len(brokers)} of 3 brokers in the metadata"
        except KafkaException as e:
            last = str(e.args[0])
        time.sleep(0.5)
    print(f"the cluster is not whole: {last}", file=sys.stderr)
    sys.exit(1)
elif what == "topic":
    name, partitions, rest = args[0], int(args[1]), args[2:]
    assignment = None
    if rest[:1] == ["--assignment"]:
        assignment = [[int(r) for r in p.split(":")] for p in rest[1].split(",")]
        rest = rest[2:]
        if len(assignment) != partitions:
            print(f"topic {name}: --assignment names {len(assignment)} partitions, not {partitions}",
                  file=sys.stderr)
            sys.exit(1)
    configs = dict(c.split("=", 1) for c in rest)
    try:
        create(name, partitions, configs, assignment)
    except KafkaException as e:
        print(f"topic {name}: {e.args[0].str()}", file=sys.stderr)
        sys.exit(1)
elif what == "leaders":
    try:
        meta = a.list_topics(args[0], timeout=10).topics[args[0]]
        if meta.error:
            raise KafkaException(meta.error)
    except KafkaException as e:
        print(f"topic {args[0]}: {e.args[0].str()}", file=sys.stderr)
        sys.exit(1)
    for p in sorted(meta.partitions.values(), key=lambda p: p.id):
        print(p.id, p.leader, len(p.isrs))
elif what == "elect":
    try:
        meta = a.list_topics(args[0], timeout=10).topics[args[0]]
        if meta.error:
            raise KafkaException(meta.error)
        parts = [TopicPartition(args[0], p) for p in sorted(meta.partitions)]
        # (confluent-kafka 2.16 refuses its own request_timeout here.)
        done = a.elect_leaders(ElectionType.PREFERRED, parts).result(timeout=30)
    except KafkaException as e:
        print(f"topic {args[0]}: {e.args[0].str()}", file=sys.stderr)
        sys.exit(1)
    except TimeoutError:
        print(f"topic {args[0]}: no answer to the election within 30 s", file=sys.stderr)
        sys.exit(1)
    # A partition already led by its preferred replica answers
    # ELECTION_NOT_NEEDED: what was asked holds.
    bad = [f"partition {tp.partition}: {err.str()}" for tp, err in sorted(done.items(), key=lambda x: x[0].partition)
           if err is not None and err.code() != KafkaError.ELECTION_NOT_NEEDED]
    if bad:
        print(f"topic {args[0]}: " + "; ".join(bad), file=sys.stderr)
        sys.exit(1)
PYEOF
}

start_all() {
    local n todo=()
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    for n in $NODES; do mkdir -p "$dir/n$n"; done
    if all_running; then
        print_env
        return 0
    fi
    ports
    for n in $NODES; do write_config "$n"; done
    formatted || format_all
    for n in $NODES; do
        pid_alive "$n" || { launch "$n"; todo+=("$n"); }
    done
    wait_started 120 "${todo[@]}"
    admin ready 90 || die "the cluster in $dir did not become whole within 90 s"
    print_env
}

start_node() {
    local n=$1
    [ -f "$dir/n$n/server.properties" ] && formatted || die "no cluster in $dir: start it first"
    pid_alive "$n" && return 0
    local p
    for p in "$(cat "$dir/n$n/port")" "$(cat "$dir/n$n/controller_port")"; do
        ! port_in_use "$p" || die "port $p of node $n is taken by another process"
    done
    launch "$n"
    wait_started 120 "$n"
}

# gone N SECONDS: until node N's process has exited; 1 on timeout.
gone() {
    local end=$((SECONDS + $2))
    while pid_alive "$1"; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.1
    done
}

# signal_nodes SIGNAL SECONDS N...: signal the nodes, then wait for them to
# exit; one still there after SECONDS is killed.
signal_nodes() {
    local sig=$1 secs=$2 n
    shift 2
    for n in "$@"; do
        pid_alive "$n" && kill "-$sig" "$(cat "$dir/n$n/pid")" 2>/dev/null || true
    done
    for n in "$@"; do
        gone "$n" "$secs" && continue
        echo "kafka-cluster.sh: node $n did not stop within $secs s of SIG$sig; killing it" >&2
        kill -KILL "$(cat "$dir/n$n/pid")" 2>/dev/null || true
        gone "$n" 10 || die "node $n in $dir does not die"
    done
}

case $cmd in
start | env | stop | status) [ $# -eq 0 ] || usage ;;
kill | stop-node | start-node) [ $# -eq 1 ] || usage; node_arg "$1" ;;
topic)
    [ $# -ge 2 ] || usage
    [[ $1 =~ ^[A-Za-z0-9._-]+$ ]] || die "'$1' is not a topic name"
    [[ $2 =~ ^[1-9][0-9]{0,3}$ ]] || die "'$2' is not a number of partitions (1 to 9999)"
    first=3
    if [ "${3:-}" = --assignment ]; then
        [[ ${4:-} =~ ^[1-3](:[1-3])*(,[1-3](:[1-3])*)*$ ]] ||
            die "'${4:-}' is not an assignment: node ids (1 to 3) joined by ':' a partition, partitions by ','"
        [ "$(echo "$4" | tr ',' '\n' | wc -l)" = "$2" ] ||
            die "--assignment '$4' does not name $2 partitions"
        first=5
    fi
    for c in "${@:$first}"; do [[ $c =~ ^[a-z.]+=.+$ ]] || die "'$c' is not CONFIG=VALUE"; done
    ;;
leaders | elect) [ $# -eq 1 ] || usage ;;
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
    kafka_ensure_packages
    kafka_ensure_jars
    start_all
    ;;
env)
    all_running || die "the cluster in $dir is not running"
    print_env
    ;;
stop)
    # All at once: stopped one by one, the last ones would wait for a
    # controller quorum that has gone.
    signal_nodes TERM 30 $NODES
    ;;
status)
    all_running
    ;;
kill)
    signal_nodes KILL 10 "$1"
    ;;
stop-node)
    signal_nodes TERM 60 "$1"
    ;;
start-node)
    start_node "$1"
    ;;
topic)
    admin topic "$@"
    ;;
leaders)
    admin leaders "$1"
    ;;
elect)
    admin elect "$1"
    ;;
esac
