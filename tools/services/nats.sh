#!/usr/bin/env bash
# A throwaway NATS server with JetStream for the tests.
#
#   tools/services/nats.sh start DIR    start the server (JetStream store in DIR/js) and
#                                       print `export OUTBOX_NATS_...=...` lines to eval;
#                                       on a DIR whose server was stopped or killed, start
#                                       the same server again: same store, same ports
#   tools/services/nats.sh env DIR      print those lines again (server running)
#   tools/services/nats.sh stop DIR     SIGTERM, wait for the exit (DIR is left for the
#                                       caller to remove)
#   tools/services/nats.sh kill DIR     SIGKILL, as after a crash
#   tools/services/nats.sh status DIR   exit 0 when it runs
#   tools/services/nats.sh reload DIR   TLS mode: give user outbox the password now in
#                                       DIR/tls.password, and wait until the running
#                                       server has reloaded its configuration (SIGHUP);
#                                       it then closes the connections that logged in
#                                       with the old one
#   tools/services/nats.sh nkey FILE    write the seed of a new user nkey to FILE (mode
#                                       0600) and print its public key
#
# The server listens on 127.0.0.1, on the first free port from OUTBOX_NATS_PORT
# (default 23222), with its monitoring port on the next free one after it. It
# is ready when /healthz?js-enabled-only=true answers on the monitoring port.
#
# TLS and authentication: with OUTBOX_NATS_TLS=1 at the first start, the
# client port takes TLS only, with the certificates of tools/services/tls.sh
# made in DIR/tls (OUTBOX_NATS_TLS_CERT=wronghost presents the one for
# wrong-host.invalid instead of the one for localhost), and every client
# must log in as user outbox with a password (made once per DIR, in
# DIR/tls.password). With OUTBOX_NATS_TLS_VERIFY=1 as well, every client
# must also present a certificate signed by the test CA (verify: true).
# DIR/nats.conf keeps the mode, so a restart keeps it too. JetStream runs as
# in the plain mode; the monitoring port stays plain HTTP. The exports then
# add OUTBOX_NATS_TLS_DIR, OUTBOX_NATS_PASSWORD and OUTBOX_NATS_TLS_URI,
# nats://outbox:PASSWORD@localhost:PORT?tls_ca=DIR/tls/ca.pem (and
# &tls_cert=...&tls_key=..., the client certificate, when the server asks
# for one; a subject goes before the `?`). OUTBOX_NATS_URI still names the
# port without TLS or password, which such a server refuses. A second user
# logs in with an nkey instead of a password (made once per DIR: the seed
# in DIR/tls.nkey, the public key in DIR/tls.nkey.pub), exported as
# OUTBOX_NATS_NKEY and OUTBOX_NATS_NKEY_SEED. There is no creds (JWT) user:
# that needs an operator and an account resolver this server does not run.
#
# Every command is idempotent: start on a running server only prints the
# exports, stop or kill on a stopped one does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)

die() {
    echo "nats.sh: $*" >&2
    exit 2
}

. "$(dirname "$0")/lib.sh"
server_name=nats-server

usage() {
    echo "usage: $0 start|env|stop|kill|status|reload DIR | nkey FILE" >&2
    exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2

ensure_packages() {
    if ! command -v nats-server >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$here/tools/deps.sh"
        outbox_install nats-server curl || die "could not install nats-server"
    fi
    command -v nats-server >/dev/null 2>&1 || die "no nats-server (install nats-server)"
}

pid_of() {
    cat "$dir/pid" 2>/dev/null || true
}

# The pid file names our server only while that process is a nats-server.
running() {
    local pid
    pid=$(pid_of)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
        grep -q nats-server "/proc/$pid/cmdline" 2>/dev/null
}

healthy() {
    curl -fsS -o /dev/null --max-time 2 \
        "http://127.0.0.1:$(cat "$dir/monitor_port")/healthz?js-enabled-only=true" 2>/dev/null
}

print_env() {
    local port
    port=$(cat "$dir/port")
    echo "export OUTBOX_NATS_URI=nats://127.0.0.1:$port"
    echo "export OUTBOX_NATS_DIR=$dir"
    echo "export OUTBOX_NATS_PORT=$port"
    if [ -f "$dir/nats.conf" ]; then
        local t=$dir/tls pw cert=
        pw=$(cat "$dir/tls.password")
        [ ! -f "$dir/tls.verify" ] || cert="&tls_cert=$t/client.pem&tls_key=$t/client.key"
        echo "export OUTBOX_NATS_TLS_DIR=$t"
        echo "export OUTBOX_NATS_PASSWORD=$pw"
        echo "export OUTBOX_NATS_TLS_URI='nats://outbox:$pw@localhost:$port?tls_ca=$t/ca.pem$cert'"
        echo "export OUTBOX_NATS_NKEY=$(cat "$dir/tls.nkey.pub")"
        echo "export OUTBOX_NATS_NKEY_SEED=$dir/tls.nkey"
    fi
}

# make_nkey FILE: a new ed25519 key from openssl, its 32-byte seed
# (the last bytes of the PKCS#8 DER) written to FILE and its public key
# printed, both in the nkeys text form: base32 of a prefix (seed "SU",
# user "U"), the key and a CRC-16/XMODEM, little-endian, unpadded.
make_nkey() {
    local out=$1 tmp
    tmp=$(mktemp -d)
    openssl genpkey -algorithm ed25519 -outform DER -out "$tmp/k.der" 2>/dev/null &&
        openssl pkey -inform DER -in "$tmp/k.der" -pubout -outform DER -out "$tmp/p.der" 2>/dev/null ||
        { rm -rf "$tmp"; die "openssl could not make an ed25519 key"; }
    (umask 077 && python3 - "$tmp/k.der" "$tmp/p.der" "$out" <<'PYEOF'
import base64, sys

def crc16(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc

def text(raw):
    c = crc16(raw)
    return base64.b32encode(raw + bytes([c & 0xFF, c >> 8])).decode().rstrip("=")

USER, SEED = 20 << 3, 18 << 3
seed = open(sys.argv[1], "rb").read()[-32:]
public = open(sys.argv[2], "rb").read()[-32:]
with open(sys.argv[3], "w") as f:
    f.write(text(bytes([SEED | USER >> 5, (USER & 31) << 3]) + seed) + "\n")
print(text(bytes([USER]) + public))
PYEOF
    ) || { rm -rf "$tmp"; die "could not write the nkey seed to $out"; }
    rm -rf "$tmp"
}

# DIR/auth.conf, which DIR/nats.conf includes: user outbox with the
# password in DIR/tls.password, and the nkey user of DIR/tls.nkey.pub.
# The password goes into URIs as it is.
write_auth() {
    local pw
    pw=$(cat "$dir/tls.password")
    case $pw in
    '' | *[!A-Za-z0-9._~-]*) die "the password in $dir/tls.password is empty or not URI-safe ([A-Za-z0-9._~-])" ;;
    esac
    printf 'authorization {\n  users = [\n    {user: outbox, password: "%s"}\n    {nkey: %s}\n  ]\n}\n' \
        "$pw" "$(cat "$dir/tls.nkey.pub")" >"$dir/auth.conf.new"
    mv "$dir/auth.conf.new" "$dir/auth.conf"
}

# The TLS mode's files, once per DIR: the certificates, the password, and
# the configuration.
tls_setup() {
    local t=$dir/tls cert=${OUTBOX_NATS_TLS_CERT:-server} verify=false
    [ -f "$dir/nats.conf" ] && return 0
    "$here/tools/services/tls.sh" make "$t" >/dev/null || die "no certificates for the TLS mode"
    [ -f "$t/$cert.pem" ] || die "OUTBOX_NATS_TLS_CERT=$cert: no such certificate in $t"
    [ -f "$dir/tls.password" ] || od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/tls.password"
    if [ ! -s "$dir/tls.nkey.pub" ]; then
        make_nkey "$dir/tls.nkey" >"$dir/tls.nkey.pub.new"
        mv "$dir/tls.nkey.pub.new" "$dir/tls.nkey.pub"
    fi
    if [ "${OUTBOX_NATS_TLS_VERIFY:-}" = 1 ]; then
        verify=true
        touch "$dir/tls.verify"
    fi
    write_auth
    # JetStream from the file, not from -js: a reload of a file without it
    # turns JetStream off (nats-server 2.9).
    cat >"$dir/nats.conf" <<EOF
jetstream {
  store_dir: "$dir/js"
}
tls {
  cert_file: "$t/$cert.pem"
  key_file: "$t/$cert.key"
  ca_file: "$t/ca.pem"
  verify: $verify
  timeout: 2
}
include auth.conf
EOF
}

reload() {
    [ -f "$dir/nats.conf" ] || die "the server in $dir is not in the TLS mode: nothing to reload"
    running || die "no server running in $dir"
    local before i
    before=$(grep -c 'Reloaded server configuration' "$dir/server.log" || true)
    write_auth
    kill -HUP "$(pid_of)"
    for i in $(seq 1 100); do
        [ "$(grep -c 'Reloaded server configuration' "$dir/server.log" || true)" -gt "$before" ] &&
            return 0
        sleep 0.1
    done
    tail -5 "$dir/server.log" >&2
    die "nats-server did not reload its configuration within 10 s"
}

start() {
    mkdir -p "$dir/js"
    dir=$(cd "$dir" && pwd)
    if running; then
        print_env
        return 0
    fi
    # A restart keeps its ports, so clients reconnect to the same address.
    local port mport opts=(-js -sd "$dir/js")
    service_ports "$dir" "${OUTBOX_NATS_PORT:-23222}" port monitor_port
    port=$main_port
    mport=$other_port
    if [ "${OUTBOX_NATS_TLS:-}" = 1 ] || [ -f "$dir/nats.conf" ]; then
        tls_setup
        opts=(-c "$dir/nats.conf")
    fi
    # A session of its own, like a daemon: whoever ran start may be a
    # process group that is killed as a whole when it ends (a Check test
    # case is), and the server must outlive it.
    setsid nats-server "${opts[@]}" -a 127.0.0.1 -p "$port" -m "$mport" \
        >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local i
    for i in $(seq 1 300); do
        kill -0 "$(pid_of)" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "nats-server exited at start"; }
        healthy && { print_env; return 0; }
        sleep 0.1
    done
    tail -20 "$dir/server.log" >&2
    die "nats-server did not become healthy within 30 s"
}

case $cmd in
start)
    ensure_packages
    start
    ;;
env)
    running || die "no server running in $dir"
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
reload)
    [ -d "$dir" ] || die "no $dir"
    dir=$(cd "$dir" && pwd)
    reload
    ;;
nkey)
    make_nkey "$dir"
    ;;
*)
    usage
    ;;
esac
