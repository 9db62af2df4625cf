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
#   tools/services/kafka.sh password DIR
#                                       TLS mode: a new password for the user
#                                       outbox, kept in DIR and set on the
#                                       running broker with kafka-configs
#                                       (SCRAM takes it at once, PLAIN at the
#                                       next start); prints the exports
#
# The broker listens on 127.0.0.1, on the first free port from
# OUTBOX_KAFKA_PORT (default 23092); its controller takes the next free port
# after that. Topics are never created on first use
# (auto.create.topics.enable=false): a sink that names a missing topic
# must be told so. The jars live in ${OUTBOX_CACHE:-$HOME/.cache/liboutbox}/kafka-4.1.1,
# fetched once by Maven (about 43 MB; kafka-lib.sh, shared with
# kafka-cluster.sh).
#
# TLS and authentication: with OUTBOX_KAFKA_TLS=1 at the first start the
# broker also has a SASL_SSL listener, on the next free port after the
# controller's, advertised as localhost: TLS with the certificates of
# tools/services/tls.sh (made in DIR/tls; OUTBOX_KAFKA_TLS_CERT=wronghost
# presents the certificate for wrong-host.invalid instead of the one for
# localhost; OUTBOX_KAFKA_TLS_VERIFY=1 requires a client certificate signed
# by the test CA), and SASL/SCRAM-SHA-512 for the user outbox, whose
# password is made once per DIR (DIR/tls/scram.password) and written into
# the metadata log when DIR is formatted. The listener also takes SASL
# PLAIN for the same user and password: librdkafka before 2.6.1 (Debian 12
# has 2.0.2) repeats the client nonce in its last SCRAM message, which
# Kafka 4 refuses (librdkafka#4895). These choices are kept in DIR: a
# later start brings the same listener back, with or without the
# variables. The PLAINTEXT listener stays as it is, without
# authentication (the tests' own clients use it), and so does the
# controller's. The exports then add OUTBOX_KAFKA_TLS_DIR,
# OUTBOX_KAFKA_TLS_PORT, OUTBOX_KAFKA_PASSWORD and OUTBOX_KAFKA_TLS_URI
# (kafka://localhost:PORT, sasl_ssl with SCRAM-SHA-512 as outbox, the
# password read from $OUTBOX_KAFKA_PASSWORD, the test CA; no topic).
#
# Every command but password is idempotent: start on a running broker
# only prints the exports, stop and kill on a stopped one do nothing.
set -euo pipefail

die() {
    echo "kafka.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka-lib.sh"

usage() {
    echo "usage: $0 start|env|stop|kill|status|password DIR" >&2
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

# A DIR formatted in the TLS mode keeps its password there.
tls_mode() {
    [ -f "$dir/tls/scram.password" ]
}

# Answers a metadata request, and in the TLS mode takes connections on its
# SASL_SSL port too: what "ready" means here.
answers() {
    local out
    out=$(kcat -L -b "127.0.0.1:$(cat "$dir/port")" -m 3 2>/dev/null) || return 1
    grep -q "broker 1 at 127.0.0.1" <<<"$out" || return 1
    ! tls_mode || port_in_use "$(cat "$dir/tls_port")"
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
    if tls_mode; then
        local t=$dir/tls tport
        tport=$(cat "$dir/tls_port")
        echo "export OUTBOX_KAFKA_TLS_DIR=$t"
        echo "export OUTBOX_KAFKA_TLS_PORT=$tport"
        echo "export OUTBOX_KAFKA_PASSWORD=$(cat "$t/scram.password")"
        echo "export OUTBOX_KAFKA_TLS_URI='kafka://localhost:$tport?security.protocol=sasl_ssl&sasl.mechanism=SCRAM-SHA-512&sasl.username=outbox&sasl.password_env=OUTBOX_KAFKA_PASSWORD&ssl.ca.location=$t/ca.pem'"
    fi
}

# The TLS mode's choices, at the first start, each in DIR/tls: the
# certificates, which one the listener presents, whether it asks for the
# client's, and the password (scram.password once DIR is formatted with it).
tls_setup() {
    local t=$dir/tls cert=${OUTBOX_KAFKA_TLS_CERT:-server}
    "$kafka_src_root/tools/services/tls.sh" make "$t" >/dev/null || die "no certificates for the TLS mode"
    [ -f "$t/$cert.pem" ] || die "OUTBOX_KAFKA_TLS_CERT=$cert: no such certificate in $t"
    echo "$cert" >"$t/listener.cert"
    if [ "${OUTBOX_KAFKA_TLS_VERIFY:-}" = 1 ]; then echo required; else echo none; fi >"$t/listener.client_auth"
    od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$t/scram.password.new"
    chmod 600 "$t/scram.password.new"
}

# The SASL_SSL listener's settings. A PEM keystore file holds the key and
# the certificate together. On a SASL_SSL listener Kafka applies
# ssl.client.auth only when it is given with the listener's prefix. PLAIN
# takes the password of the moment (DIR/tls/scram.password) from here, at
# each start.
tls_config() {
    local t=$dir/tls cert pw
    cert=$(cat "$t/listener.cert")
    pw=$(cat "$t/scram.password" 2>/dev/null || cat "$t/scram.password.new")
    cat "$t/$cert.key" "$t/$cert.pem" >"$t/keystore.pem"
    chmod 600 "$t/keystore.pem" "$dir/server.properties"
    cat <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_outbox="$pw";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$t/keystore.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$t/ca.pem
listener.name.sasl_ssl.ssl.client.auth=$(cat "$t/listener.client_auth")
EOF
}

# write_config PORT CONTROLLER_PORT [TLS_PORT]
write_config() {
    local port=$1 cport=$2 tport=${3:-}
    local listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
    local advertised=PLAINTEXT://127.0.0.1:$port
    local map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
    if [ -n "$tport" ]; then
        listeners=$listeners,SASL_SSL://127.0.0.1:$tport
        advertised=$advertised,SASL_SSL://localhost:$tport
        map=$map,SASL_SSL:SASL_SSL
    fi
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
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
    [ -z "$tport" ] || tls_config >>"$dir/server.properties"
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
    local port cport tport= fresh= new_pw=$dir/tls/scram.password.new
    [ -f "$dir/data/meta.properties" ] || fresh=1
    if [ "${OUTBOX_KAFKA_TLS:-}" = 1 ] && ! tls_mode; then
        [ -n "$fresh" ] ||
            die "OUTBOX_KAFKA_TLS=1: the broker in $dir was made without TLS (the mode is chosen at the first start)"
        tls_setup
    fi
    service_ports "$dir" "${OUTBOX_KAFKA_PORT:-23092}" port controller_port
    port=$main_port
    cport=$other_port
    if tls_mode || [ -f "$new_pw" ]; then
        if [ -f "$dir/tls_port" ]; then
            tport=$(cat "$dir/tls_port")
            ! port_in_use "$tport" || die "port $tport of the server in $dir is taken by another process"
        else
            tport=$(free_port $((cport + 1)))
            echo "$tport" >"$dir/tls_port"
        fi
    fi
    write_config "$port" "$cport" "$tport"
    if [ -n "$fresh" ]; then
        # In the TLS mode the user's credential goes into the metadata log
        # with the format.
        local scram=()
        [ ! -f "$new_pw" ] || scram=(--add-scram "SCRAM-SHA-512=[name=outbox,password=$(cat "$new_pw")]")
        mkdir -p "$dir/data"
        java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/log4j2.xml" -cp "$cache/libs/*" \
            kafka.tools.StorageTool format --cluster-id="$(kafka_cluster_id)" \
            --config "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 || {
            cat "$dir/format.log" >&2
            die "formatting the log directory failed"
        }
        [ ! -f "$new_pw" ] || mv "$new_pw" "$dir/tls/scram.password"
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

# A new password for the user outbox on the running broker, changed as an
# operator would (kafka-configs, over the PLAINTEXT listener). Connections
# that authenticated before keep working.
password() {
    running || die "no broker running in $dir"
    tls_mode || die "the broker in $dir has no TLS mode (start it with OUTBOX_KAFKA_TLS=1)"
    dir=$(cd "$dir" && pwd)
    local pw
    pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    # Its own log: the broker's is written by the broker.
    kafka_log4j_config "$dir/log4j2-tool.xml" "$dir/tool.log"
    java "${java_opts[@]}" -Dlog4j2.configurationFile="$dir/log4j2-tool.xml" -cp "$cache/libs/*" \
        kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$(cat "$dir/port")" \
        --alter --entity-type users --entity-name outbox \
        --add-config "SCRAM-SHA-512=[password=$pw]" >"$dir/password.log" 2>&1 || {
        tail -5 "$dir/password.log" >&2
        die "kafka-configs could not change the password of outbox"
    }
    printf %s "$pw" >"$dir/tls/scram.password"
    print_env
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
password)
    password
    ;;
*)
    usage
    ;;
esac
