# shellcheck shell=bash
# What the scenario tests of tests/faults share beyond the harness:
# proxies and toxics on the shared toxiproxy (tools/services/toxiproxy.sh),
# the count of duplicates and the longest pause a delivery had, and the one
# line of figures each scenario prints. Sourced after harness.sh:
#
#   . "$(dirname "$0")/../harness/harness.sh"
#   . "$(dirname "$0")/faults.sh"

# ------------------------------------------------------------ toxiproxy
# toxi METHOD PATH [JSON]: one call to the toxiproxy API; the answer in
# $TMP/.toxi; 1 (and the answer on stdout) when it is not a 2xx.
toxi() {
    local code
    code=$(curl -sS -o "$TMP/.toxi" -w '%{http_code}' --max-time 10 -X "$1" \
        ${3:+-H 'Content-Type: application/json' --data "$3"} "$OUTBOX_TOXIPROXY_URL$2" 2>"$TMP/.toxi.err")
    case $code in
    2??) return 0 ;;
    *) echo "toxiproxy $1 $2: HTTP ${code:-?} $(head -c 300 "$TMP/.toxi" "$TMP/.toxi.err" 2>/dev/null)"; return 1 ;;
    esac
}

# proxy_to NAME PORT: a proxy of this test in front of 127.0.0.1:PORT,
# listening on a private port (in $PROXY_PORT), deleted at exit. Its API
# name is NAME_<pid>; the other helpers take NAME.
proxy_to() {
    local name=$1_$$ port out
    need_service toxiproxy
    need_cmd curl curl
    for _ in 1 2 3 4 5; do
        port=$(private_port)
        if out=$(toxi POST /proxies "{\"name\":\"$name\",\"listen\":\"127.0.0.1:$port\",\"upstream\":\"127.0.0.1:$2\",\"enabled\":true}"); then
            # shellcheck disable=SC2034 # the tests read it
            PROXY_PORT=$port
            at_exit "toxi DELETE /proxies/$name"
            echo "proxy $name: 127.0.0.1:$port -> 127.0.0.1:$2"
            return 0
        fi
    done
    fail "no proxy in front of port $2: $out"
    finish
}

# toxic NAME TOXIC TYPE STREAM ATTRIBUTES: adds TOXIC (upstream: what the
# client sends; downstream: what the server answers) to proxy NAME.
toxic() {
    toxi POST "/proxies/$1_$$/toxics" \
        "{\"name\":\"$2\",\"type\":\"$3\",\"stream\":\"$4\",\"toxicity\":1.0,\"attributes\":$5}" ||
        fail "adding the $3 toxic $2 to proxy $1"
}

# untoxic NAME TOXIC: removes it.
untoxic() {
    toxi DELETE "/proxies/$1_$$/toxics/$2" || fail "removing toxic $2 from proxy $1"
}

# proxy_enabled NAME true|false: false closes every connection through the
# proxy and its listener (a partition: connections are refused); true
# listens again on the same port.
proxy_enabled() {
    toxi POST "/proxies/$1_$$" "{\"enabled\":$2}" || fail "setting proxy $1 enabled=$2"
}

# -------------------------------------------------------------- figures
# duplicates FILE: lines of FILE (one JSON object with an "id" a line)
# that repeat an id seen before.
duplicates() {
    python3 -c '
import json, sys
ids = [json.loads(l)["id"] for l in open(sys.argv[1], "rb") if l.strip()]
print(len(ids) - len(set(ids)))' "$1"
}

# watch_output FILE: from now on, FILE's size every 100 ms (a file sink's
# output growing as the consumer sees it), in FILE.watch, until the test
# ends or unwatch_output.
watch_output() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    background watch bash -c 'while :; do echo "$(date +%s%3N) $(stat -c %s "$1" 2>/dev/null || echo 0)"
        sleep 0.1; done >"$1.watch"' _ "$1"
    WATCH_PID=$BG_PID
}
unwatch_output() {
    kill9 "$WATCH_PID"
}

# output_pause FILE: the longest time, in ms, that FILE did not grow, from
# the start of watch_output to its last growth (100 ms grain).
output_pause() {
    awk 'NR == 1 {last = $1; size = $2; next}
         $2 != size {if ($1 - last > max) max = $1 - last; last = $1; size = $2}
         END {print max + 0}' "$1.watch"
}

# pause_pg REL FROM TO: the longest gap, in ms, between consecutive
# settles that published rows of REL on $URI (published_at), among the
# rows published from FROM to TO (seconds since the epoch, or an SQL
# expression of them). A fault's window starts a few seconds before it, so
# that the gap across it counts.
pause_pg() {
    q "SELECT coalesce(round(extract(epoch FROM max(g)) * 1000), 0)::bigint FROM
         (SELECT published_at - lag(published_at) OVER (ORDER BY published_at) AS g FROM $1
          WHERE published_at BETWEEN to_timestamp(($2)) AND to_timestamp(($3))) x"
}

# pause_sqlite FROM TO: the same on the SQLite outbox $DB.
pause_sqlite() {
    sql "SELECT coalesce(max(g), 0) / 1000 FROM
         (SELECT published_at - lag(published_at) OVER (ORDER BY published_at) AS g FROM outbox
          WHERE published_at BETWEEN CAST(($1) * 1000000 AS INTEGER) AND CAST(($2) * 1000000 AS INTEGER))"
}

# figures FAULTS EVENTS DUPLICATES PAUSE_MS [MORE]: the scenario's one line
# of figures, the same shape in every test for docs and reports.
figures() {
    echo "figures: faults $1, events $2, duplicates $3, longest pause $4 ms${5:+, $5}"
}

# relay_stop_counts LOG...: the sums over the relays' stop lines, as
# "claimed published retried dead released".
relay_stop_counts() {
    sed -n 's/.*stopped ([^)]*): claimed \([0-9]*\), published \([0-9]*\), retried \([0-9]*\), dead \([0-9]*\), released \([0-9]*\).*/\1 \2 \3 \4 \5/p' "$@" |
        awk '{c += $1; p += $2; r += $3; d += $4; l += $5} END {print c + 0, p + 0, r + 0, d + 0, l + 0}'
}
