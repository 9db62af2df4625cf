#!/usr/bin/env bash
# A throwaway Jaeger (v2, the Go module's v1.75.0) for the tracing tests: an
# OTLP/HTTP receiver that stores spans in memory and a query API to read
# them back.
#
#   tools/services/jaeger.sh start DIR    build Jaeger (first time, cached), start it
#                                         with its config and log in DIR and print
#                                         `export OUTBOX_JAEGER_...=...` lines to eval;
#                                         on a DIR whose server was stopped, start it
#                                         again on the same ports (its spans are gone:
#                                         the storage is memory)
#   tools/services/jaeger.sh env DIR      print those lines again (server running)
#   tools/services/jaeger.sh stop DIR     SIGTERM, wait for the exit (DIR is left for
#                                         the caller to remove)
#   tools/services/jaeger.sh kill DIR     SIGKILL
#   tools/services/jaeger.sh status DIR   exit 0 when it runs
#   tools/services/jaeger.sh build        only build (or find) the binary; print its path
#
# The binary is built from github.com/jaegertracing/jaeger@v1.75.0 (which is
# Jaeger v2: an OpenTelemetry Collector build with Jaeger's storage and query
# extensions), pinned. `go install module@version` refuses it (its go.mod has
# a replace directive), so the module comes through the Go module proxy, is
# copied out of the read-only module cache and built there with `go build
# ./cmd/jaeger`, the version stamped in as its Makefile does. The result is
# cached under $HOME/.cache/liboutbox/jaeger-1.75.0 (OUTBOX_CACHE moves the
# .cache/liboutbox part); a second start builds nothing. A cold build takes
# several minutes and runs under nice, so a shared machine stays usable.
#
# Everything listens on 127.0.0.1 only: OTLP over HTTP (no gRPC receiver) on
# the first free port from OUTBOX_JAEGER_OTLP_PORT (default 23318), the query
# HTTP API (/api/traces, /api/v3/...) on the first free one from
# OUTBOX_JAEGER_QUERY_PORT (default 23686), and the query's gRPC API on the
# next free one after that. OUTBOX_JAEGER_PORT alone (a test's private
# server) puts OTLP there and the query API on the next free ports. No other listener is configured (no health
# check, no metrics, no Zipkin or Jaeger receivers). Spans are kept in
# memory. The query service's own tracing is off. It is ready when GET
# /api/services on the query port answers.
# OUTBOX_JAEGER_URI is the OTLP endpoint (what `outbox relay
# --otlp-endpoint` takes); OUTBOX_JAEGER_QUERY_URL the query API.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

version=v1.75.0
module=github.com/jaegertracing/jaeger
cache=${OUTBOX_CACHE:-${HOME:-/root}/.cache/liboutbox}/jaeger-${version#v}
bin=$cache/bin/jaeger

die() {
    echo "jaeger.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=jaeger

built_server_args "$@"

built() {
    [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -qF "\"gitVersion\":\"$version\""
}

build() {
    built && return 0
    command -v go >/dev/null 2>&1 || die "no Go toolchain (go) on PATH: Jaeger is built from source"
    command -v curl >/dev/null 2>&1 || die "no curl on PATH (install curl): readiness and the tests use it"
    mkdir -p "$cache/bin"
    local src=$cache/src moddir
    echo "jaeger.sh: building Jaeger $version into $cache (minutes when cold)" >&2
    # `go mod download -json` prints where the module landed in the module cache.
    moddir=$(cd "$cache" && nice -n 19 go mod download -json "$module@$version" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') ||
        die "go mod download $module@$version failed"
    [ -n "$moddir" ] && [ -d "$moddir" ] || die "go mod download did not report the module's directory"
    rm -rf "$src"
    cp -r "$moddir" "$src"
    chmod -R u+w "$src"
    # A temporary name, moved into place whole: an interrupted build never
    # leaves a half-written binary behind.
    (cd "$src" && nice -n 19 go build -trimpath \
        -ldflags "-X $module/internal/version.latestVersion=$version" \
        -o "$bin.tmp" ./cmd/jaeger) >"$cache/build.log" 2>&1 || {
        tail -20 "$cache/build.log" >&2
        die "go build ./cmd/jaeger failed (log: $cache/build.log)"
    }
    mv -f "$bin.tmp" "$bin"
    # The source tree is only needed for the build (about 100 MB).
    rm -rf "$src"
    built || die "the built $bin does not report $version"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process runs our binary.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -qF "jaeger-${version#v}/bin/jaeger" "/proc/$pid/cmdline" 2>/dev/null
}

healthy() {
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$(cat "$dir/query_port")/api/services" 2>/dev/null
}

print_env() {
    local otlp query
    otlp=$(cat "$dir/otlp_port")
    query=$(cat "$dir/query_port")
    echo "export OUTBOX_JAEGER_URI=http://127.0.0.1:$otlp"
    echo "export OUTBOX_JAEGER_OTLP_URL=http://127.0.0.1:$otlp"
    echo "export OUTBOX_JAEGER_QUERY_URL=http://127.0.0.1:$query"
    echo "export OUTBOX_JAEGER_DIR=$dir"
    echo "export OUTBOX_JAEGER_OTLP_PORT=$otlp"
    echo "export OUTBOX_JAEGER_QUERY_PORT=$query"
}

# The collector-style configuration: the OTLP/HTTP receiver straight into
# memory storage (no batch processor: a span is queryable as soon as it is
# received), the query extension on its two ports, no telemetry listeners.
write_config() {
    cat >"$dir/config.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    # Its own traces would go to 127.0.0.1:4317, anybody's collector, and
    # make a stop wait 10 s for that export to time out.
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$(cat "$dir/query_port")
    grpc:
      endpoint: 127.0.0.1:$(cat "$dir/grpc_port")
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$(cat "$dir/otlp_port")
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

start() {
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its ports, so the tests' URLs stay good.
    local p
    if [ -f "$dir/otlp_port" ] && [ -f "$dir/query_port" ] && [ -f "$dir/grpc_port" ]; then
        for p in otlp_port query_port grpc_port; do
            ! port_in_use "$(cat "$dir/$p")" || die "port $(cat "$dir/$p") of the server in $dir is taken by another process"
        done
    else
        local otlp query grpc
        # OUTBOX_JAEGER_PORT (the harness's private_server sets it) moves
        # both: OTLP on it, the query API just after.
        otlp=$(free_port "${OUTBOX_JAEGER_OTLP_PORT:-${OUTBOX_JAEGER_PORT:-23318}}")
        query=$(free_port "${OUTBOX_JAEGER_QUERY_PORT:-$([ -n "${OUTBOX_JAEGER_PORT:-}" ] && echo $((otlp + 1)) || echo 23686)}" "$otlp")
        grpc=$(free_port $((query + 1)) "$otlp")
        for p in "$otlp" "$query" "$grpc"; do
            [ "$p" -lt 32768 ] || die "port $p is in the ephemeral range; give OUTBOX_JAEGER_*_PORT below 32768"
        done
        echo "$otlp" >"$dir/otlp_port"
        echo "$query" >"$dir/query_port"
        echo "$grpc" >"$dir/grpc_port"
    fi
    write_config
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends, and the server
    # must outlive it.
    setsid "$bin" --config "$dir/config.yaml" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 600); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "jaeger exited at start"; }
        healthy && port_in_use "$(cat "$dir/otlp_port")" && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "jaeger did not answer on $(cat "$dir/query_port") within 60 s"
}

built_server_main "$cmd"
