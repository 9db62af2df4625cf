# Shared helpers of the MongoDB shell tests. Source it with
#   . "$(dirname "$0")/lib.sh" "$@"
# where the first argument is the outbox CLI. Every test works in a database
# of its own (it_<test>_<pid>) on the server OUTBOX_MONGO_URI names:
# FerretDB started by tools/test, or a real MongoDB (OUTBOX_TEST_MONGO_URI).
set -u
export LC_ALL=C

OUTBOX=${1:?usage: $0 OUTBOX_CLI}

if [ -z "${OUTBOX_MONGO_URI:-}" ]; then
    if [ "${CI:-}" = true ]; then
        echo "FAIL: OUTBOX_MONGO_URI is not set and CI=true: start a server with" \
            "eval \"\$(tools/services/ferretdb.sh start DIR)\""
        exit 1
    fi
    echo
    echo "*** SKIPPED: the MongoDB integration tests need a server. ***"
    echo "*** Run   eval \"\$(tools/services/ferretdb.sh start /tmp/outbox-mongo)\""
    echo "*** (it builds FerretDB with Go), or set OUTBOX_MONGO_URI=mongodb://host:port/db"
    echo "*** for a MongoDB of your own, and run the tests again."
    echo
    exit 77
fi

DB=it_$(basename "$0" .sh)_$$
# The same server and options, the test's own database.
URI=$(printf '%s' "$OUTBOX_MONGO_URI" | sed -E "s#^(mongodb(\+srv)?://[^/]*)/[^?]*#\1/$DB#")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/outbox-mongo.XXXXXX") || exit 1
FAILED=0
PIDS=""

cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    FAILED=$((FAILED + 1))
}

pass() {
    echo "ok: $*"
}

# check NAME EXPECTED ACTUAL
check() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: expected '$2', got '$3'"; fi
}

finish() {
    if [ "$FAILED" -ne 0 ]; then
        echo "$FAILED check(s) failed"
        exit 1
    fi
    exit 0
}

apply_schema() {
    "$OUTBOX" schema apply --store "$URI" --yes-i-know "$@" >"$TMP/apply.out" 2>&1 ||
        { cat "$TMP/apply.out"; fail "schema apply"; finish; }
}

# The event ids a file sink wrote, sorted (one CloudEvent per line).
sink_ids() {
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        print(json.loads(line)["id"])
' "$1" | sort
}
