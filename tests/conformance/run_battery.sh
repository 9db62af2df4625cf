#!/usr/bin/env bash
# Runs the conformance battery and checks the verdict.
#
# usage: run_battery.sh EXPECT DRIVER STORE RUNNER [RUNNER ARGS...]
#   EXPECT  pass      every case that ran passed (exit 0)
#           pass-all  the same, and no case was skipped
#           pass-skip:A,B  the same, and no case but A and B was skipped (a sink
#                     whose capabilities exclude them)
#           CASE      the battery failed (exit 1), CASE is "not ok" in the TAP, and
#                     its line says "conformance: FAIL CASE: ..."
#           all-but:CASE  CASE is "not ok", every other case passed, none skipped
#                     (a driver that rightly fails one case, e.g. a schema check
#                     that reports what a test variant left out)
#           unchecked:CASE  every case that ran passed (exit 0), and the battery
#                     said which check of CASE it could not run (the driver lacks
#                     the optional entries it needs), in its output and the TAP
#   DRIVER  a driver name or module path, given to --driver
#   STORE   sqlite-temp  a fresh SQLite file in a temporary directory
#           env:VAR      the URI in $VAR (a server started by tools/test);
#                        when VAR is unset: skipped (77), or a failure under CI=true
#           broker:NAME[?QUERY]  a private broker started with tools/services/NAME.sh in a
#                        temporary directory on a port of its own, which the
#                        battery may stop and start (--broker-stop/--broker-start);
#                        when it does not start: skipped (77), or a failure under CI=true;
#                        QUERY is added to the URI it prints (the sink's options)
#   RUNNER  the command: "outbox conformance" or the battery test program
. "$(dirname "$0")/../harness/harness.sh"
expect=$1
driver=$2
store=$3
shift 3
tap=$TMP/battery.tap

case $store in
sqlite-temp) uri=sqlite://$TMP/conformance.db ;;
env:*)
    var=${store#env:}
    uri=$(printenv "$var") || skip "$var is not set" "tools/test starts the server and sets it"
    ;;
broker:*)
    # A private broker the battery may stop and start (--broker-stop,
    # --broker-start), on a port of its own below the ephemeral range.
    name=${store#broker:}
    query=
    case $name in *\?*) query=?${name#*\?}; name=${name%%\?*} ;; esac
    private_server "$name" broker
    uri=$PRIV_URI$query
    set -- "$@" --broker-stop "'$SERVICES/$name.sh' stop '$PRIV_DIR' >/dev/null" \
        --broker-start "'$SERVICES/$name.sh' start '$PRIV_DIR' >/dev/null" \
        --broker-pause "'$HARNESS_DIR/freeze.sh' stop \"\$(cat '$PRIV_DIR/pid')\"" \
        --broker-resume "'$HARNESS_DIR/freeze.sh' cont \"\$(cat '$PRIV_DIR/pid')\""
    ;;
*)
    echo "run_battery.sh: unknown store $store" >&2
    exit 2
    ;;
esac

"$@" --driver "$driver" --uri "$uri" --tap "$tap" >"$TMP/out"
status=$?
cat "$TMP/out"

if [ ! -s "$tap" ]; then
    echo "FAIL: no TAP written (exit $status)"
    exit 1
fi
failed=$(sed -n 's/^not ok [0-9]* - //p' "$tap" | tr '\n' ' ')
skipped=$(grep -c '# SKIP' "$tap")
echo "exit $status; failed: ${failed:-none}; skipped: $skipped"

# Whatever the verdict: a failure reads as the case and its own check,
# never a path of the battery's sources (which the driver's author does
# not have), in the output and in the TAP.
if grep -E '^conformance: FAIL |^# ' "$TMP/out" "$tap" | grep -E '\.c:[0-9]+'; then
    echo "FAIL: a failure names a source file of the battery"
    exit 1
fi
# NOT CHECKED blames a missing optional entry, and the sentence after the
# summary comes with it and only with it; no sink case depends on an
# optional entry, so none may say it.
unchecked=$(grep -c '^conformance: NOT CHECKED ' "$TMP/out")
sentence=$(grep -c 'for want of the optional entries named above$' "$TMP/out")
if [ "$((unchecked > 0))" -ne "$((sentence > 0))" ]; then
    echo "FAIL: $unchecked NOT CHECKED lines, but $sentence sentences about missing optional entries"
    exit 1
fi
if grep '^conformance: NOT CHECKED sink_' "$TMP/out"; then
    echo "FAIL: a check of the sink battery could not run on $driver (each sink here reports its wire header names and dedupe ids)"
    exit 1
fi

case $expect in
all-but:*)
    only=${expect#all-but:}
    if [ "$status" -ne 1 ] || [ "$failed" != "$only " ]; then
        echo "FAIL: exactly $only should fail on $driver (exit $status, failed: ${failed:-none})"
        exit 1
    fi
    if [ "$skipped" -ne 0 ]; then
        echo "FAIL: $skipped cases were skipped on $driver:"
        grep '# SKIP' "$tap"
        exit 1
    fi
    grep -A1 "^not ok [0-9]* - $only\$" "$tap"
    ;;
pass | pass-all | pass-skip:*)
    if [ "$status" -ne 0 ] || [ -n "$failed" ]; then
        echo "FAIL: the battery should pass on $driver"
        exit 1
    fi
    if [ "$expect" = pass-all ] && [ "$skipped" -ne 0 ]; then
        echo "FAIL: $skipped cases were skipped on $driver:"
        grep '# SKIP' "$tap"
        exit 1
    fi
    case $expect in pass-skip:*)
        allowed=",${expect#pass-skip:},"
        for name in $(sed -n 's/^ok [0-9]* - \([^ ]*\) # SKIP.*/\1/p' "$tap"); do
            case $allowed in *",$name,"*) ;; *)
                echo "FAIL: $name was skipped on $driver:"
                grep " - $name # SKIP" "$tap"
                exit 1 ;;
            esac
        done
        ;;
    esac
    ;;
unchecked:*)
    aimed=${expect#unchecked:}
    if [ "$status" -ne 0 ] || [ -n "$failed" ]; then
        echo "FAIL: the battery should pass what it can check on $driver"
        exit 1
    fi
    if ! grep -q "^conformance: NOT CHECKED $aimed: " "$TMP/out"; then
        echo "FAIL: $driver lacks what $aimed needs to check, and the battery did not say so"
        exit 1
    fi
    if ! grep -q "^# NOT CHECKED $aimed: " "$tap" || ! grep -q "checks inside the cases that ran could not run" "$TMP/out"; then
        echo "FAIL: the TAP or the summary does not list what $aimed could not check"
        exit 1
    fi
    grep "NOT CHECKED" "$TMP/out"
    ;;
*)
    if [ "$status" -ne 1 ]; then
        echo "FAIL: the battery exited $status on $driver, expected 1 (a case failed)"
        exit 1
    fi
    if ! grep -q "^not ok [0-9]* - $expect\$" "$tap"; then
        echo "FAIL: $driver is broken for $expect, but the battery did not fail that case"
        exit 1
    fi
    if ! grep -q "^conformance: FAIL $expect: ." "$TMP/out"; then
        echo "FAIL: the battery failed $expect without a line saying why"
        exit 1
    fi
    grep -A1 "^not ok [0-9]* - $expect\$" "$tap"
    ;;
esac
echo "ok: $expect"
exit 0
