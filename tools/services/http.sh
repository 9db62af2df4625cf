#!/usr/bin/env bash
# A throwaway webhook receiver for the HTTP sink's tests (httprecv.py beside
# this script, run by the system python3).
#
#   tools/services/http.sh start DIR    start the receiver (its logs in DIR/data) and
#                                       print `export OUTBOX_HTTP_...=...` lines to eval;
#                                       on a DIR whose receiver was stopped or killed, start
#                                       it again: same logs, same port
#   tools/services/http.sh env DIR      print those lines again (receiver running)
#   tools/services/http.sh stop DIR     SIGTERM, wait for the exit (DIR is left for the
#                                       caller to remove)
#   tools/services/http.sh kill DIR     SIGKILL, as after a crash
#   tools/services/http.sh status DIR   exit 0 when it runs
#
# The receiver listens on 127.0.0.1, on the first free port from
# OUTBOX_HTTP_PORT (default 23580). It is ready when GET /_health answers.
# OUTBOX_HTTP_MAX_BODY sets its body limit (default 1 MiB) at start;
# OUTBOX_HTTP_TLS_CERT and OUTBOX_HTTP_TLS_KEY (PEM files) make it serve HTTPS
# (the URI printed is then https://), and a restart keeps them.
#
# With OUTBOX_HTTP_TLS=1 at the first start (not with OUTBOX_HTTP_TLS_CERT)
# the receiver is in its TLS mode, which a restart keeps: HTTPS with the
# certificate for localhost and 127.0.0.1 that tools/services/tls.sh makes
# in DIR/tls, and every delivery must carry HTTP basic authentication as
# user "outbox" with a random password (made once per DIR, in
# DIR/tls/http.password; the receiver checks DIR/tls/http.auth, "outbox:PW",
# on each request, so a test changes the password by renaming a new file
# over it, and a restart keeps the change). The inspection protocol and
# /_health stay open. The exports add OUTBOX_HTTP_TLS_DIR (DIR/tls),
# OUTBOX_HTTP_PASSWORD (the password in http.auth) and OUTBOX_HTTP_TLS_URI,
# the sink's URI for that user (https://outbox@localhost:PORT/?password_env=
# OUTBOX_HTTP_PASSWORD&tls_ca=DIR/tls/ca.pem). At each start,
# OUTBOX_HTTP_TLS_VERIFY=1 makes the receiver require a client certificate
# signed by the test CA (the health check presents DIR/tls/client.pem), and
# OUTBOX_HTTP_TLS_CERT_NAME=wronghost presents the certificate for
# wrong-host.invalid instead of localhost's.
#
# Every command is idempotent: start on a running receiver only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

die() {
    echo "http.sh: $*" >&2
    exit 2
}

. "$here/lib.sh"
server_name=httprecv.py

usage() {
    echo "usage: $0 start|env|stop|kill|status DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our receiver only while that process runs httprecv.py.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -q httprecv.py "/proc/$pid/cmdline" 2>/dev/null
}

# The TLS mode: DIR/tls holds the certificates and the credentials.
tls_mode() {
    [ -f "$dir/tls/http.auth" ]
}

scheme() {
    { [ -f "$dir/https" ] || tls_mode; } && echo https || echo http
}

healthy() {
    local client=()
    tls_mode && client=("$dir/tls/client.pem" "$dir/tls/client.key")
    python3 - "$(scheme)" "$(cat "$dir/port")" "${client[@]}" <<'PY' 2>/dev/null
import ssl, sys, urllib.request
ctx = ssl._create_unverified_context()
if len(sys.argv) > 3:  # a receiver that may require a client certificate
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
urllib.request.urlopen("%s://127.0.0.1:%s/_health" % tuple(sys.argv[1:3]), timeout=2, context=ctx).read()
PY
}

# The TLS mode's certificates and credentials, once per DIR.
make_tls() {
    "$here/tls.sh" make "$dir/tls" >/dev/null || die "no certificates for the TLS mode"
    [ -f "$dir/tls/http.password" ] ||
        (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/tls/http.password")
    [ -f "$dir/tls/http.auth" ] ||
        (umask 077 && echo "outbox:$(cat "$dir/tls/http.password")" >"$dir/tls/http.auth")
}

# The receiver's TLS arguments for this start, in tls_argv.
tls_args() {
    tls_argv=()
    if tls_mode; then
        local cert=${OUTBOX_HTTP_TLS_CERT_NAME:-server}
        [ -f "$dir/tls/$cert.pem" ] || die "OUTBOX_HTTP_TLS_CERT_NAME=$cert: no such certificate in $dir/tls"
        tls_argv=(--tls-cert "$dir/tls/$cert.pem" --tls-key "$dir/tls/$cert.key"
            --auth-file "$dir/tls/http.auth")
        [ "${OUTBOX_HTTP_TLS_VERIFY:-}" != 1 ] || tls_argv+=(--tls-ca "$dir/tls/ca.pem")
    elif [ -f "$dir/https" ]; then
        tls_argv=(--tls-cert "$(sed -n 1p "$dir/https")" --tls-key "$(sed -n 2p "$dir/https")")
    fi
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_HTTP_URI=$(scheme)://127.0.0.1:$port/"
    echo "export OUTBOX_HTTP_DIR=$dir"
    echo "export OUTBOX_HTTP_PORT=$port"
    if tls_mode; then
        echo "export OUTBOX_HTTP_TLS_DIR=$dir/tls"
        echo "export OUTBOX_HTTP_PASSWORD=$(sed -n '1s/^[^:]*://p' "$dir/tls/http.auth")"
        echo "export OUTBOX_HTTP_TLS_URI='https://outbox@localhost:$port/?password_env=OUTBOX_HTTP_PASSWORD&tls_ca=$dir/tls/ca.pem'"
    fi
}

start() {
    command -v python3 >/dev/null 2>&1 || die "no python3"
    mkdir -p "$dir/data"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its port, so clients reconnect to the same address.
    local port
    if [ -f "$dir/port" ]; then
        port=$(cat "$dir/port")
        ! port_in_use "$port" || die "port $port of the receiver in $dir is taken by another process"
    else
        port=$(free_port "${OUTBOX_HTTP_PORT:-23580}")
        if [ "${OUTBOX_HTTP_TLS:-}" = 1 ]; then
            [ -z "${OUTBOX_HTTP_TLS_CERT:-}" ] || die "OUTBOX_HTTP_TLS=1 brings its own certificates: no OUTBOX_HTTP_TLS_CERT"
            make_tls
        fi
        echo "$port" >"$dir/port"
    fi
    if [ -n "${OUTBOX_HTTP_TLS_CERT:-}" ]; then
        ! tls_mode || die "the receiver in $dir is in the TLS mode: no OUTBOX_HTTP_TLS_CERT"
        printf '%s\n%s\n' "$OUTBOX_HTTP_TLS_CERT" "${OUTBOX_HTTP_TLS_KEY:?with OUTBOX_HTTP_TLS_CERT}" >"$dir/https"
    fi
    local -a tls_argv
    tls_args
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole (a Check test case is).
    setsid python3 "$here/httprecv.py" --port "$port" --dir "$dir/data" \
        --max-body "${OUTBOX_HTTP_MAX_BODY:-1048576}" "${tls_argv[@]}" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        # Not running(): until the child has exec'ed python3 its command
        # line is still this script's.
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "httprecv.py exited at start"; }
        healthy && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "httprecv.py did not answer within 30 s"
}

# stop_with SIGNAL: signal the receiver and wait until it is gone.
case $cmd in
start)
    start
    ;;
env)
    running || die "no receiver running in $dir"
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
