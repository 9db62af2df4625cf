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
#   tools/services/postgres.sh stop DIR immediate
#                                           the same with -m immediate: the server dies at
#                                           once, as in a crash (a primary's last commits
#                                           live on only in its synchronous standby)
#   tools/services/postgres.sh status DIR   exit 0 when it runs
#   tools/services/postgres.sh standby DIR PRIMARY_DIR
#                                           a synchronous streaming standby of the running
#                                           server in PRIMARY_DIR, in DIR on a port of its
#                                           own (pg_basebackup -R -X stream), started, and
#                                           the primary made to wait for it at each commit;
#                                           prints the standby's `export OUTBOX_PG_...` lines
#   tools/services/postgres.sh promote DIR  the standby in DIR becomes a primary (pg_ctl
#                                           promote), waiting until it takes writes
#
# The server listens on 127.0.0.1 and on a socket in DIR/run, on the first free
# port from OUTBOX_PG_PORT (default 23329). It trusts local connections and runs
# with fsync off: it holds nothing worth keeping, and the tests want speed.
# initdb refuses to run as root, so under root the cluster belongs to the
# "postgres" system user (the postgresql package creates it).
#
# A standby: its commits would otherwise not wait for anyone (this server
# runs with synchronous_commit=off on its command line, which
# postgresql.conf cannot override), so `standby` sets synchronous_commit=on
# for the test database (ALTER DATABASE, which outranks the command line)
# and names the standby in the primary's synchronous_standby_names: every
# commit in that database then returns only once the standby has flushed
# it, and a primary stopped with -m immediate loses no commit a client saw.
# The standby's copy of the configuration loses any
# synchronous_standby_names, so once promoted it commits on its own, until
# a standby of its own is made (standby DIR2 DIR: a chain of failovers).
# libpq finds the writable server in a URI naming them all:
# postgresql://127.0.0.1:P1,127.0.0.1:P2/DB?target_session_attrs=read-write.
#
# TLS and authentication: with OUTBOX_PG_TLS=1 at the first start the
# server also takes TLS (ssl=on; the certificates of tools/services/tls.sh,
# made in DIR/tls; OUTBOX_PG_TLS_CERT=wronghost presents the certificate for
# wrong-host.invalid instead of the one for localhost), and has two more
# users, each allowed in over TLS only: outbox_scram, with a password
# (scram-sha-256; made once per DIR, in DIR/tls/scram.password) and
# outbox_cert, who must present the client certificate (its CN). The
# exports then add OUTBOX_PG_TLS_DIR, OUTBOX_PG_SCRAM_PASSWORD, and
# OUTBOX_PG_SCRAM_URI and OUTBOX_PG_CERT_URI (host localhost, sslmode
# verify-full against the test CA). The test user outbox is still trusted,
# for the tests' own psql.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop on a stopped one does nothing, standby on a running standby
# only prints its exports, promote on a primary does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
db_name=outbox_test
db_user=outbox

die() {
    echo "postgres.sh: $*" >&2
    exit 2
}

usage() {
    echo "usage: $0 start|env|stop|status|promote DIR, restart|stop DIR [immediate], or standby DIR PRIMARY_DIR" >&2
    exit 2
}

case $# in
2) [ "$1" != standby ] || usage ;;
3) { { [ "$1" = restart ] || [ "$1" = stop ]; } && [ "$3" = immediate ]; } || [ "$1" = standby ] || usage ;;
*) usage ;;
esac
cmd=$1
dir=$2
mode=fast
primary_dir=
if [ "$cmd" = standby ]; then primary_dir=$3; elif [ $# -eq 3 ]; then mode=$3; fi

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
    if [ -f "$dir/tls/scram.password" ]; then
        local t=$dir/tls pw
        pw=$(cat "$t/scram.password")
        local verify="sslmode=verify-full&sslrootcert=$t/ca.pem"
        echo "export OUTBOX_PG_TLS_DIR=$t"
        echo "export OUTBOX_PG_SCRAM_PASSWORD=$pw"
        echo "export OUTBOX_PG_SCRAM_URI='postgresql://outbox_scram:$pw@localhost:$port/$db_name?$verify'"
        echo "export OUTBOX_PG_CERT_URI='postgresql://outbox_cert@localhost:$port/$db_name?$verify&sslcert=$t/client.pem&sslkey=$t/client.key'"
    fi
}

# The TLS mode's files: certificates in DIR/tls (tools/services/tls.sh), the
# server's pair copied where its owner can read them, the password, and an
# hba file; prints the server options that use them.
tls_setup() {
    local t=$dir/tls cert=${OUTBOX_PG_TLS_CERT:-server}
    "$here/tools/services/tls.sh" make "$t" >/dev/null || die "no certificates for the TLS mode"
    [ -f "$t/$cert.pem" ] || die "OUTBOX_PG_TLS_CERT=$cert: no such certificate in $t"
    [ -f "$t/scram.password" ] || od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$t/scram.password"
    cp "$t/$cert.pem" "$dir/server.crt"
    cp "$t/$cert.key" "$dir/server.key"
    cat >"$dir/pg_hba.conf" <<HBA
local   all  all                        trust
hostssl all  outbox_scram  127.0.0.1/32  scram-sha-256
hostssl all  outbox_cert   127.0.0.1/32  cert
host    all  outbox        127.0.0.1/32  trust
host    all  all           127.0.0.1/32  reject
HBA
    chmod 600 "$dir/server.key"
    [ "$(id -u)" != 0 ] || chown postgres: "$dir/server.crt" "$dir/server.key" "$dir/pg_hba.conf"
    echo "-c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key \
        -c ssl_ca_file=$t/ca.pem -c hba_file=$dir/pg_hba.conf"
}

# The TLS mode's users, once the server runs.
tls_users() {
    local port=$1 pw
    pw=$(cat "$dir/tls/scram.password")
    "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$run" -p "$port" -U "$db_user" -d "$db_name" >/dev/null <<SQL ||
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_scram') THEN
    CREATE ROLE outbox_scram LOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_cert') THEN
    CREATE ROLE outbox_cert LOGIN;
  END IF;
END \$\$;
SET password_encryption = 'scram-sha-256';
ALTER ROLE outbox_scram PASSWORD '$pw';
GRANT ALL ON DATABASE $db_name TO outbox_scram, outbox_cert;
GRANT ALL ON SCHEMA public TO outbox_scram, outbox_cert;
SQL
        die "creating the TLS mode's users failed"
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
    local port tls_opts=
    port=$(pick_port)
    echo "$port" >"$dir/port"
    if [ "${OUTBOX_PG_TLS:-}" = 1 ] || [ -f "$dir/tls/scram.password" ]; then
        tls_opts=$(tls_setup)
    fi
    # fsync/full_page_writes off: a crash of this throwaway server may corrupt
    # it, and that is fine. max_connections covers many parallel test relays.
    as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$run \
            -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
            -c max_connections=200 -c shared_buffers=128MB $tls_opts" \
        start >/dev/null || {
        tail -20 "$log" >&2 || true
        die "pg_ctl start failed"
    }
    if ! "$bin/psql" -X -q -h "$run" -p "$port" -U "$db_user" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db_name'" | grep -q 1; then
        "$bin/createdb" -h "$run" -p "$port" -U "$db_user" "$db_name" || die "createdb failed"
    fi
    [ -z "$tls_opts" ] || tls_users "$port"
    print_env
}

stop() {
    [ -d "$data" ] || return 0
    if running; then
        as_owner "$bin/pg_ctl" -D "$data" -m "$mode" -w -t 60 stop >/dev/null || die "pg_ctl stop failed"
    fi
}

restart() {
    [ -f "$data/PG_VERSION" ] || die "no cluster in $dir (start it first)"
    as_owner "$bin/pg_ctl" -D "$data" -l "$log" -m "$mode" -w -t 60 restart >/dev/null ||
        die "pg_ctl restart failed"
}

# psql_at PORT SQL: one statement as the test user on the local server
# listening on PORT, its rows unaligned.
psql_at() {
    "$bin/psql" -X -qtA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U "$db_user" -d "$db_name" -c "$2"
}

# wait_for SECONDS CMD...: CMD until it succeeds, every 0.1 s; 1 when
# SECONDS pass first.
wait_for() {
    local i n=$(($1 * 10))
    shift
    for ((i = 0; i < n; i++)); do
        "$@" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

standby_streams() {
    [ "$(psql_at "$pport" "SELECT sync_state FROM pg_stat_replication
        WHERE application_name = '$name' AND state = 'streaming'")" = sync ]
}

standby() {
    [ -n "$primary_dir" ] && [ -d "$primary_dir" ] || die "no primary directory $primary_dir"
    primary_dir=$(cd "$primary_dir" && pwd)
    [ "$primary_dir" != "$(mkdir -p "$dir" && cd "$dir" && pwd)" ] || die "a standby needs a directory of its own"
    as_owner "$bin/pg_ctl" -D "$primary_dir/data" status >/dev/null 2>&1 && [ -f "$primary_dir/port" ] ||
        die "no server running in $primary_dir (start the primary first)"
    pport=$(cat "$primary_dir/port")
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    data=$dir/data
    run=$dir/run
    log=$dir/server.log
    if running; then
        print_env
        return 0
    fi
    [ ! -e "$data" ] || die "$data exists and is not a running server: remove it for a new standby"
    mkdir -p "$run"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" "$run"
        runuser -u postgres -- test -x "$dir" ||
            die "$dir is not reachable by the postgres user (a parent directory is private); use a directory under /tmp"
    fi
    local port
    port=$(pick_port)
    [ "$port" != "$pport" ] || die "the standby cannot take the primary's port $pport"
    echo "$port" >"$dir/port"
    # The walreceiver introduces itself by cluster_name: the name the
    # primary's synchronous_standby_names waits for.
    name=standby_$port
    # -R writes primary_conninfo and standby.signal; -X stream copies the
    # WAL written during the copy over a second connection.
    as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U "$db_user" -D "$data" -R -X stream \
        --no-sync -c fast >"$dir/basebackup.log" 2>&1 || {
        tail -5 "$dir/basebackup.log" >&2
        die "pg_basebackup from the primary on port $pport failed"
    }
    # Not on the command line, which ALTER SYSTEM could not override once
    # this server is promoted and gets a standby of its own.
    as_owner sed -i '/^synchronous_standby_names/d' "$data/postgresql.auto.conf"
    as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$run \
            -c fsync=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=128MB \
            -c cluster_name=$name" \
        start >/dev/null || {
        tail -20 "$log" >&2 || true
        die "pg_ctl start of the standby failed"
    }
    # Set after the copy, and never copied (above): a standby that
    # inherited the setting would wait for a standby of its own once
    # promoted.
    psql_at "$pport" "ALTER SYSTEM SET synchronous_standby_names = '\"$name\"'" >/dev/null &&
        psql_at "$pport" "SELECT pg_reload_conf()" >/dev/null &&
        psql_at "$pport" "ALTER DATABASE $db_name SET synchronous_commit = on" >/dev/null ||
        die "could not make the primary on port $pport wait for its standby"
    wait_for 60 standby_streams || die "the standby on port $port is not streaming synchronously from $pport within 60 s"
    print_env
}

promote() {
    [ -f "$data/PG_VERSION" ] || die "no cluster in $dir"
    running || die "no server running in $dir"
    local port
    port=$(cat "$dir/port")
    [ "$(psql_at "$port" "SELECT pg_is_in_recovery()")" = t ] || return 0
    as_owner "$bin/pg_ctl" -D "$data" -w -t 60 promote >/dev/null || die "pg_ctl promote failed"
    _writable() { [ "$(psql_at "$port" "SELECT pg_is_in_recovery()")" = f ]; }
    wait_for 60 _writable || die "the server in $dir still recovers 60 s after pg_ctl promote"
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
standby)
    bin=$(find_bin) || die "PostgreSQL is not installed"
    [ -x "$bin/pg_basebackup" ] || die "no pg_basebackup in $bin"
    standby
    ;;
promote)
    bin=$(find_bin) || die "PostgreSQL is not installed"
    promote
    ;;
*)
    usage
    ;;
esac
