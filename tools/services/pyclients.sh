#!/usr/bin/env bash
# A Python virtual environment with the third-party clients the cross-check
# tests read back with (clients nobody in this project wrote): the
# CloudEvents SDK, confluent-kafka, nats-py, redis-py, pika and pymongo, at
# pinned versions.
#
#   tools/services/pyclients.sh          create or update it, then print
#                                        `export OUTBOX_PYTHON=...` to eval
#
# It lives in ${OUTBOX_PYENV:-$HOME/.cache/liboutbox/pyclients}; a second run
# with the same pins installs nothing. The tests that use it read
# OUTBOX_PYTHON and fail under CI=true (skip elsewhere) without it.
set -euo pipefail

pins=(
    cloudevents==2.2.0
    confluent-kafka==2.16.1
    nats-py==2.16.0
    redis==8.1.0
    pika==1.4.4
    pymongo==4.10.1
)

dir=${OUTBOX_PYENV:-$HOME/.cache/liboutbox/pyclients}
stamp="$dir/.pins"
want=$(printf '%s\n' "${pins[@]}")
if [ ! -x "$dir/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$(dirname "$dir")"
    python3 -m venv "$dir" >&2 || { echo "pyclients.sh: python3 -m venv failed (install python3-venv)" >&2; exit 2; }
    "$dir/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2 ||
        { echo "pyclients.sh: pip install ${pins[*]} failed" >&2; exit 2; }
    printf '%s\n' "$want" >"$stamp"
fi
echo "export OUTBOX_PYTHON=$dir/bin/python"
