#!/usr/bin/env bash
# A throwaway MongoDB-compatible server (FerretDB 1.24.2, SQLite handler) for the tests.
#
#   tools/services/ferretdb.sh start DIR    build FerretDB (first time, cached), start it
#                                           with its data in DIR/data and print
#                                           `export OUTBOX_MONGO_...=...` lines to eval; on a
#                                           DIR whose server was stopped or killed, start the
#                                           same server again: same data, same ports
#   tools/services/ferretdb.sh env DIR      print those lines again (server running)
#   tools/services/ferretdb.sh stop DIR     SIGTERM, wait for the exit (DIR is left for the
#                                           caller to remove)
#   tools/services/ferretdb.sh kill DIR     SIGKILL, as after a crash
#   tools/services/ferretdb.sh status DIR   exit 0 when it runs
#   tools/services/ferretdb.sh build        only build (or find) the binary; print its path
#
# The binary is built from the FerretDB v1.24.2 module, pinned: the module comes
# through the Go module proxy, is copied out of the module cache (which is
# read-only), gets `v1.24.2` written into build/version/version.txt (a plain
# `go install` leaves that file empty and the binary panics at start) and is
# built with `go build ./cmd/ferretdb`. The result is cached under
# $HOME/.cache/liboutbox/ferretdb-1.24.2 and a second start builds nothing.
# A cold build takes minutes; it runs under nice so a shared machine stays usable.
#
# The server listens on 127.0.0.1 on the first free port from OUTBOX_MONGO_PORT
# (default 23017), with its debug (metrics) port on the next free one after it.
# It is ready when a TCP connection to its port succeeds.
#
# With OUTBOX_MONGO_TLS=1 at the first start the server also listens for TLS
# on the next free port (the certificates of tools/services/tls.sh, made in
# DIR/tls; OUTBOX_MONGO_TLS_CERT=wronghost presents the one for
# wrong-host.invalid; OUTBOX_MONGO_TLS_VERIFY=1 requires a client
# certificate signed by the test CA), and takes authentication (FerretDB's
# experimental SCRAM, --test-enable-new-auth) on both listeners: a user
# "outbox" of the test database, with a random password made once per DIR
# (DIR/tls/mongo.password). The exports then add OUTBOX_MONGO_TLS_DIR,
# OUTBOX_MONGO_PASSWORD and OUTBOX_MONGO_TLS_URI (that user over TLS,
# SCRAM-SHA-256, the test CA); OUTBOX_MONGO_URI then names the user too.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
version=v1.24.2
module=github.com/FerretDB/FerretDB
cache=${HOME:-/root}/.cache/liboutbox/ferretdb-${version#v}
bin=$cache/bin/ferretdb
# One line of FerretDB is changed before it is built. Its SQLite handler
# looks documents up by _id with the expression `->'$._id'`, but builds its
# unique _id index on `->"_id"`: SQLite does not see that they are the same,
# so every update, delete and _id find reads the whole table. The change
# writes the lookup the way the index is built (same meaning, `->'_id'`).
# Nothing else differs from 1.24.2; $bin.patched records that it was made.
id_lookup_old="IDColumn = DefaultColumn + \"->'\$._id'\""
id_lookup_new="IDColumn = DefaultColumn + \"->'_id'\""
db_name=outbox_test
# The driver's socket timeout: a command the server never answers fails
# after this long instead of hanging the test.
uri_options="socketTimeoutMS=30000&serverSelectionTimeoutMS=5000"

die() {
    echo "ferretdb.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=ferretdb

built_server_args "$@"

build() {
    if [ -x "$bin" ] && [ -e "$bin.patched" ] && "$bin" --version 2>/dev/null | grep "$version" >/dev/null; then
        return 0
    fi
    command -v go >/dev/null 2>&1 || die "no Go toolchain (go) on PATH: FerretDB is built from source"
    mkdir -p "$cache"
    local src=$cache/src moddir
    echo "ferretdb.sh: building FerretDB $version into $cache (minutes when cold)" >&2
    # `go mod download -json` prints where the module landed in the module cache.
    moddir=$(cd "$cache" && nice -n 19 go mod download -json "$module@$version" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') ||
        die "go mod download $module@$version failed"
    [ -n "$moddir" ] && [ -d "$moddir" ] || die "go mod download did not report the module's directory"
    rm -rf "$src"
    cp -r "$moddir" "$src"
    chmod -R u+w "$src"
    printf '%s\n' "$version" >"$src/build/version/version.txt"
    local meta=$src/internal/backends/sqlite/metadata/metadata.go
    grep -qF "$id_lookup_old" "$meta" || die "$meta has no line $id_lookup_old to change"
    sed -i "s|$id_lookup_old|$id_lookup_new|" "$meta"
    grep -qF "$id_lookup_new" "$meta" || die "changing the _id lookup in $meta failed"
    mkdir -p "$cache/bin"
    (cd "$src" && nice -n 19 go build -o "$bin.tmp" ./cmd/ferretdb) >"$cache/build.log" 2>&1 || {
        tail -20 "$cache/build.log" >&2
        die "go build ./cmd/ferretdb failed (log: $cache/build.log)"
    }
    mv "$bin.tmp" "$bin"
    touch "$bin.patched"
    "$bin" --version 2>/dev/null | grep "$version" >/dev/null || die "the built $bin does not report $version"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process is a ferretdb.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -q ferretdb "/proc/$pid/cmdline" 2>/dev/null
}

print_env() {
    local port
    port=$(cat "$dir/port")
    if [ -f "$dir/tls_port" ]; then
        local pw tp t=$dir/tls
        pw=$(cat "$t/mongo.password")
        tp=$(cat "$dir/tls_port")
        echo "export OUTBOX_MONGO_URI='mongodb://outbox:$pw@127.0.0.1:$port/$db_name?$uri_options&authMechanism=SCRAM-SHA-256'"
        echo "export OUTBOX_MONGO_TLS_DIR=$t"
        echo "export OUTBOX_MONGO_TLS_PORT=$tp"
        echo "export OUTBOX_MONGO_PASSWORD=$pw"
        echo "export OUTBOX_MONGO_TLS_URI='mongodb://outbox:$pw@localhost:$tp/$db_name?$uri_options&authMechanism=SCRAM-SHA-256&tls=true&tlsCAFile=$t/ca.pem'"
    else
        echo "export OUTBOX_MONGO_URI='mongodb://127.0.0.1:$port/$db_name?$uri_options'"
    fi
    echo "export OUTBOX_MONGO_DIR=$dir"
    echo "export OUTBOX_MONGO_PORT=$port"
}

# The TLS mode's arguments (certificates, the password once per DIR).
tls_args() {
    local t=$dir/tls cert=${OUTBOX_MONGO_TLS_CERT:-server}
    "$here/tools/services/tls.sh" make "$t" >/dev/null || die "no certificates for the TLS listener"
    [ -f "$t/$cert.pem" ] || die "OUTBOX_MONGO_TLS_CERT=$cert: no such certificate"
    [ -f "$t/mongo.password" ] || od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$t/mongo.password"
    TLS_ARGS=(--listen-tls="127.0.0.1:$(cat "$dir/tls_port")" --listen-tls-cert-file="$t/$cert.pem"
        --listen-tls-key-file="$t/$cert.key" --test-enable-new-auth --setup-database="$db_name"
        --setup-username=outbox)
    # The password through the environment, not the command line (ps).
    FERRETDB_SETUP_PASSWORD=$(cat "$t/mongo.password")
    export FERRETDB_SETUP_PASSWORD
    [ "${OUTBOX_MONGO_TLS_VERIFY:-}" != 1 ] || TLS_ARGS+=(--listen-tls-ca-file="$t/ca.pem")
}

start() {
    mkdir -p "$dir/data" "$dir/state"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its ports, so clients reconnect to the same address.
    local port dport
    if [ -f "$dir/port" ] && [ -f "$dir/debug_port" ]; then
        port=$(cat "$dir/port")
        dport=$(cat "$dir/debug_port")
        ! port_in_use "$port" || die "port $port of the stopped server in $dir is taken"
        ! port_in_use "$dport" || die "debug port $dport of the stopped server in $dir is taken"
    else
        port=$(free_port "${OUTBOX_MONGO_PORT:-23017}")
        dport=$(free_port $((port + 1)) "$port")
        echo "$port" >"$dir/port"
        echo "$dport" >"$dir/debug_port"
        [ "${OUTBOX_MONGO_TLS:-}" != 1 ] || free_port $((dport + 1)) "$port" "$dport" >"$dir/tls_port"
    fi
    TLS_ARGS=()
    [ ! -f "$dir/tls_port" ] || tls_args
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends (a Check test
    # case is), and the server must outlive it.
    # synchronous(off): SQLite does not wait for the disk at each commit
    # (FerretDB commits every update statement on its own); a crash of this
    # throwaway server may lose what it held, and that is fine.
    # GOGC=800: FerretDB decodes every document of a collection for most
    # queries, and the collector's share of that halves when it runs less.
    GOGC=800 setsid "$bin" --handler=sqlite --sqlite-url="file:$dir/data/?_pragma=synchronous(off)" \
        --listen-addr="127.0.0.1:$port" --debug-addr="127.0.0.1:$dport" \
        --state-dir="$dir/state" --telemetry=disable --log-level=warn "${TLS_ARGS[@]}" \
        >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "ferretdb exited at start"; }
        port_in_use "$port" && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "ferretdb did not listen on $port within 30 s"
}

built_server_main "$cmd"
