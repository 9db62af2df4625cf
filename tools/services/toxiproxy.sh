#!/usr/bin/env bash
# A throwaway toxiproxy (2.12.0) for the fault tests: a TCP proxy that a
# test puts between a client and a server, and then slows down, blackholes,
# resets or cuts through its HTTP API.
#
#   tools/services/toxiproxy.sh start DIR    build toxiproxy (first time, cached), start
#                                            its server with its log and port in DIR and
#                                            print `export OUTBOX_TOXIPROXY_...=...` lines
#                                            to eval; on a DIR whose server was stopped,
#                                            start it again on the same port
#   tools/services/toxiproxy.sh env DIR      print those lines again (server running)
#   tools/services/toxiproxy.sh stop DIR     SIGTERM, wait for the exit (DIR is left for
#                                            the caller to remove)
#   tools/services/toxiproxy.sh kill DIR     SIGKILL
#   tools/services/toxiproxy.sh status DIR   exit 0 when it runs
#   tools/services/toxiproxy.sh build        only build (or find) the binary; print its path
#
# The binary comes from `go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0`,
# the version pinned (the module proxy's "latest" is an old 2.5.0), into
# $HOME/.cache/liboutbox/toxiproxy-2.12.0/bin (OUTBOX_CACHE moves the
# .cache/liboutbox part), under nice; a second start builds nothing.
#
# The API listens on 127.0.0.1, on the first free port from
# OUTBOX_TOXIPROXY_PORT (default 23474); it is ready when GET /version
# answers. The proxies a test makes listen wherever the test says (a
# private port below 32768) and belong to that test: it deletes them.
# OUTBOX_TOXIPROXY_URL and OUTBOX_TOXIPROXY_URI are the same address (the
# test harness looks for OUTBOX_<X>_URI of every service).
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

version=v2.12.0
module=github.com/Shopify/toxiproxy/v2
cache=${OUTBOX_CACHE:-${HOME:-/root}/.cache/liboutbox}/toxiproxy-${version#v}
bin=$cache/bin/server

die() {
    echo "toxiproxy.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=toxiproxy

built_server_args "$@"

build() {
    if [ -x "$bin" ] && "$bin" -version 2>/dev/null | grep -qF "version ${version#v}"; then
        return 0
    fi
    command -v go >/dev/null 2>&1 || die "no Go toolchain (go) on PATH: toxiproxy is built from source"
    command -v curl >/dev/null 2>&1 || die "no curl on PATH (install curl): the tests drive toxiproxy with it"
    mkdir -p "$cache/bin"
    echo "toxiproxy.sh: building toxiproxy $version into $cache (a minute or two when cold)" >&2
    # A temporary GOBIN, moved into place whole: an interrupted build never
    # leaves a half-written binary. A plain go install leaves the version
    # the server reports as "git": the linker sets the real one, which the
    # check above reads.
    rm -rf "$cache/bin.tmp"
    mkdir -p "$cache/bin.tmp"
    GOBIN=$cache/bin.tmp nice -n 19 go install -ldflags "-X $module.Version=${version#v}" \
        "$module/cmd/server@$version" \
        >"$cache/build.log" 2>&1 || {
        tail -20 "$cache/build.log" >&2
        die "go install $module/cmd/server@$version failed (log: $cache/build.log)"
    }
    [ -x "$cache/bin.tmp/server" ] || die "go install left no server binary in $cache/bin.tmp"
    mv -f "$cache/bin.tmp/server" "$bin"
    rm -rf "$cache/bin.tmp"
    "$bin" -version 2>/dev/null | grep -qF "version ${version#v}" || die "the built $bin does not report ${version#v}"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process runs our binary.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -qF "toxiproxy-${version#v}/bin/server" "/proc/$pid/cmdline" 2>/dev/null
}

healthy() {
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$(cat "$dir/port")/version" 2>/dev/null
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_TOXIPROXY_URL=http://127.0.0.1:$port"
    echo "export OUTBOX_TOXIPROXY_URI=http://127.0.0.1:$port"
    echo "export OUTBOX_TOXIPROXY_DIR=$dir"
    echo "export OUTBOX_TOXIPROXY_PORT=$port"
}

start() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its port, so the tests' URL stays good.
    local port
    if [ -f "$dir/port" ]; then
        port=$(cat "$dir/port")
        ! port_in_use "$port" || die "port $port of the server in $dir is taken by another process"
    else
        port=$(free_port "${OUTBOX_TOXIPROXY_PORT:-23474}")
        [ "$port" -lt 32768 ] || die "port $port is in the ephemeral range; give OUTBOX_TOXIPROXY_PORT below 32768"
        echo "$port" >"$dir/port"
    fi
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends, and the server
    # must outlive it.
    setsid "$bin" -host 127.0.0.1 -port "$port" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "toxiproxy exited at start"; }
        healthy && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "toxiproxy did not answer on $port within 30 s"
}

built_server_main "$cmd"
