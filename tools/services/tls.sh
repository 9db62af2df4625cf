#!/usr/bin/env bash
# Throwaway certificates for the test services' TLS listeners, made with the
# openssl tool.
#
#   tools/services/tls.sh make DIR   make them in DIR (once: a DIR that has
#                                    them is left as it is) and print DIR
#
# DIR then holds, every key unencrypted and readable by its owner only:
#   ca.pem, ca.key                 the test CA ("outbox test CA")
#   server.pem, server.key         a server certificate for localhost and
#                                  127.0.0.1, signed by the test CA
#   wronghost.pem, wronghost.key   a server certificate signed by the test
#                                  CA for wrong-host.invalid only: a client
#                                  that checks the host name refuses it
#   client.pem, client.key         a client certificate, CN "outbox_cert",
#                                  signed by the test CA
#   other-ca.pem                   a second CA that signed nothing of ours: a
#                                  client that trusts it alone refuses every
#                                  server above
# The certificates last 30 days; they are made again in each fresh DIR.
set -euo pipefail

die() {
    echo "tls.sh: $*" >&2
    exit 2
}

[ $# -eq 2 ] && [ "$1" = make ] || die "usage: tls.sh make DIR"
dir=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v openssl >/dev/null 2>&1; then
    # shellcheck source=../deps.sh
    . "$here/tools/deps.sh"
    outbox_install openssl >&2 || die "could not install the openssl tool"
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -f "$dir/done" ]; then
    echo "$dir"
    exit 0
fi

# leaf NAME SUBJECT EXTENSIONS: NAME.pem/NAME.key signed by the test CA.
leaf() {
    local name=$1 subject=$2 ext=$3
    printf '%s\n' "$ext" >"$dir/$name.ext"
    openssl req -newkey rsa:2048 -nodes -subj "$subject" \
        -keyout "$dir/$name.key" -out "$dir/$name.csr" &&
        openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 30 -extfile "$dir/$name.ext" -out "$dir/$name.pem"
}

{
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=outbox test CA" \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" &&
        openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=outbox untrusted CA" \
            -keyout "$dir/other-ca.key" -out "$dir/other-ca.pem" &&
        leaf server "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth" &&
        leaf wronghost "/CN=wrong-host.invalid" "subjectAltName=DNS:wrong-host.invalid
extendedKeyUsage=serverAuth" &&
        leaf client "/CN=outbox_cert" "extendedKeyUsage=clientAuth"
} >"$dir/openssl.log" 2>&1 || die "making the test certificates failed: $(tail -1 "$dir/openssl.log")"
chmod 600 "$dir"/*.key
rm -f "$dir"/*.csr "$dir"/*.ext
touch "$dir/done"
echo "$dir"
