#!/usr/bin/env bash
# A throwaway Kafka broker for the tests: Apache Kafka 4.1.1 in KRaft mode,
# one node that is both broker and controller, from the jars on Maven Central.
#
#   tools/services/kafka.sh start DIR   fetch the jars (first time), format DIR
#                                       (first time), start the broker, and print
#                                       `export OUTBOX_KAFKA_...=...` lines to eval
#   tools/services/kafka.sh env DIR     print those lines again (broker running)
#   tools/services/kafka.sh stop DIR    SIGTERM, a clean shutdown (DIR is kept: a
#                                       later start brings the same broker back,
#                                       with its topics and on the same port)
#   tools/services/kafka.sh kill DIR    SIGKILL, as a crash (start recovers it)
#   tools/services/kafka.sh status DIR  exit 0 when it runs
#
# The broker listens on 127.0.0.1, on the first free port from
# OUTBOX_KAFKA_PORT (default 23092); its controller takes the next free port
# after that. Topics are never created on first use
# (auto.create.topics.enable=false): a sink that names a missing topic
# must be told so. The jars live in ${OUTBOX_CACHE:-$HOME/.cache/liboutbox}/kafka-4.1.1,
# fetched once by Maven (about 43 MB; kafka-lib.sh, shared with
# kafka-cluster.sh).
#
# Every command is idempotent: start on a running broker only prints the
# exports, stop and kill on a stopped one do nothing.
set -euo pipefail

die() {
    echo "kafka.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka-lib.sh"

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2
cache=$kafka_cache

pid_alive() {
    local pid
    pid=$(cat "$dir/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Answers a metadata request: what "ready" means here.
answers() {
    local out
    out=$(kcat -L -b "127.0.0.1:$(cat "$dir/port")" -m 3 2>/dev/null) || return 1
    grep -q "broker 1 at 127.0.0.1" <<<"$out"
}

running() {
    pid_alive && [ -f "$dir/port" ]
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_KAFKA_URI=kafka://127.0.0.1:$port"
    echo "export OUTBOX_KAFKA_DIR=$dir"
    echo "export OUTBOX_KAFKA_PORT=$port"
}

write_config() {
    local port=$1 cport=$2
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=3
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# The cleaner's default 128 MiB buffer does not fit the small heap.
log.cleaner.dedupe.buffer.size=8388608
EOF
    kafka_log4j_config "$dir/log4j2.xml" "$dir/server.log"
}

java_opts=(-Xmx192m "${kafka_java_opts[@]}")

start() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A stopped broker comes back on its own ports; a new one takes free ones.
    local port cport
    service_ports "$dir" "${OUTBOX_KAFKA_PORT:-23092}" port controller_port
    port=$main_port
    cport=$other_port
    write_config "$port" "$cport"
    if [ ! -f "$dir/data/meta.properties" ]; then
        mkdir -p "$dir/data"
        java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/log4j2.xml" -cp "$cache/libs/*" \
            kafka.tools.StorageTool format --cluster-id="$(kafka_cluster_id)" \
            --config "$dir/server.properties" >"$dir/format.log" 2>&1 || {
            cat "$dir/format.log" >&2
            die "formatting the log directory failed"
        }
    fi
    # The log is written afresh by each start (append=false), and removed
    # first, so the last run's "started" line cannot fake readiness.
    rm -f "$dir/server.log"
    setsid java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/log4j2.xml" \
        -cp "$cache/libs/*" kafka.Kafka "$dir/server.properties" \
        </dev/null >"$dir/stdout.log" 2>&1 &
    echo $! >"$dir/pid"
    local end=$((SECONDS + 90))
    until grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null && answers; do
        if ! pid_alive; then
            tail -20 "$dir/server.log" "$dir/stdout.log" >&2 2>/dev/null || true
            die "the broker exited during start"
        fi
        if [ $SECONDS -ge $end ]; then
            tail -20 "$dir/server.log" >&2 2>/dev/null || true
            kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
            die "the broker did not answer within 90 s"
        fi
        sleep 0.2
    done
    print_env
}

# wait_gone SECONDS: until the broker's process has exited; 1 on timeout.
wait_gone() {
    local end=$((SECONDS + $1))
    while pid_alive; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.1
    done
}

stop() {
    pid_alive || return 0
    kill -TERM "$(cat "$dir/pid")" 2>/dev/null || true
    wait_gone 60 || {
        echo "kafka.sh: the broker did not stop within 60 s; killing it" >&2
        kill -KILL "$(cat "$dir/pid")" 2>/dev/null || true
        wait_gone 10 || die "the broker in $dir does not die"
    }
}

kill_broker() {
    pid_alive || return 0
    kill -KILL "$(cat "$dir/pid")" 2>/dev/null || true
    wait_gone 10 || die "the broker in $dir does not die"
}

case $cmd in
start)
    kafka_ensure_packages
    kafka_ensure_jars
    start
    ;;
env)
    running || die "no broker running in $dir"
    print_env
    ;;
stop)
    stop
    ;;
kill)
    kill_broker
    ;;
status)
    running
    ;;
*)
    usage
    ;;
esac
