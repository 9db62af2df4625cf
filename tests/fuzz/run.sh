#!/usr/bin/env bash
# Runs libFuzzer harnesses for a while each:
#   tests/fuzz/run.sh BUILD_DIR SECONDS [NAME...]   (default: every harness)
# BUILD_DIR is a clang build (CC=clang meson setup ...) with the fuzz_NAME
# programs. Each runs on a copy of tests/fuzz/corpus/NAME, so the seed
# corpus in the source tree never changes by itself; inputs it finds stay
# in BUILD_DIR/fuzz/NAME/corpus, and a crashing input, with the log, in
# BUILD_DIR/fuzz/NAME/. Prints one line per harness and exits non-zero
# when any of them failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: $0 BUILD_DIR SECONDS [NAME...]}
seconds=${2:?usage: $0 BUILD_DIR SECONDS [NAME...]}
shift 2
# Every harness has a corpus folder of its own.
[ $# -gt 0 ] || set -- $(ls "$here/corpus")

failed=0
for name in "$@"; do
    bin=$build/tests/fuzz/fuzz_$name
    work=$build/fuzz/$name
    if [ ! -x "$bin" ]; then
        echo "fuzz $name: FAILED: $bin was not built (it needs clang and libclang-rt-14-dev;" \
            "a build directory set up before that was installed needs meson setup --wipe)"
        failed=$((failed + 1))
        continue
    fi
    rm -rf "$work"
    mkdir -p "$work/corpus"
    cp "$here/corpus/$name"/* "$work/corpus/"
    dict=()
    [ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
    if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="$work/" "${dict[@]}" "$work/corpus" >"$work/log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
        echo "fuzz $name: ok, ${runs:-?} inputs in ${seconds}s"
    else
        failed=$((failed + 1))
        echo "fuzz $name: FAILED; input and log in $work/:"
        grep -E 'property failed|ERROR: |SUMMARY: |Test unit written' "$work/log" | head -8
    fi
done
exit $((failed > 0))
