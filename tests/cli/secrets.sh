#!/usr/bin/env bash
# No message prints a password: every driver is given a URI with a password
# and a problem (bad port, unknown parameter, missing file, a host where none
# belongs), and stderr must hold none of the password's pieces.
. "$(dirname "$0")/../harness/harness.sh"
use_outbox "$1"

new_db secrets
db=$DB

# no_secret CONTEXT ARGS...: runs outbox; it must fail, and stderr must not
# show any piece of the passwords used below.
no_secret() {
    local context=$1
    shift
    run "$@"
    if [ "$RC" -eq 0 ]; then
        fail "$context: outbox $1 succeeded"
    elif grep -Eq 's3cr|tPass|Xp@ss|w0rdZ|hunter2' "$ERR" "$OUT"; then
        fail "$context: the password is in the output: $(cat "$ERR")"
    elif [ ! -s "$ERR" ]; then
        fail "$context: no message at all"
    else
        pass "$context: $(head -n 1 "$ERR")"
    fi
}

# Contexts never name the URI: this script's own output must not show a
# password either.
PW='s3cr#tPass'
k=0
for pw in 's3cr#tPass' 's3cr%23tPass' 'Xp@ss@w0rdZ' 's3cr?tPass' 's3cr/tPass'; do
    k=$((k + 1))
    # The core's parser: a port out of range.
    no_secret "bad port, password form $k" stats --store "postgresql://app:$pw@db:99999/app"
    no_secret "bad port, sink, password form $k" relay --store "sqlite://$db" --route r \
        --sink "file://app:$pw@host:99999/x" --until-idle
done

# SQLite: a password where none belongs, an unknown parameter, a missing file.
no_secret "sqlite with a password" stats --store "sqlite://app:$PW@/$TMP/x.db"
no_secret "sqlite with a password and a host" stats --store "sqlite://app:$PW@dbhost/$TMP/x.db"
no_secret "sqlite, unknown parameter" stats --store "sqlite://$db?password=hunter2&bogus=1"
no_secret "sqlite, missing file" stats --store "sqlite://$TMP/missing/none.db?password=hunter2"

# PostgreSQL: an unknown parameter, nothing listening, a bad parameter value.
no_secret "postgres, unknown parameter" stats --store "postgresql://app:$PW@127.0.0.1:1/app?bogus=1"
no_secret "postgres, unknown parameter after the password" \
    stats --store "postgresql://app@127.0.0.1:1/app?password=hunter2&bogus=1"
no_secret "postgres, nothing listening" stats --store "postgresql://app:$PW@127.0.0.1:1/app?connect_timeout=2"
no_secret "postgres, key=value form" stats --store "postgresql:host=127.0.0.1 port=1 password=hunter2 bogus=1"
no_secret "postgres, bad sslmode" stats --store "postgresql://app:$PW@127.0.0.1:1/app?sslmode=bogus"

# The file sink: a host where none belongs, an unknown parameter, a path
# that cannot be opened.
for sink in "file://app:$PW@host/$TMP/out.jsonl" "file://app:$PW@/$TMP/out.jsonl" \
    "file://$TMP/out.jsonl?password=hunter2" "file:///nonexistent/dir/out.jsonl?password=hunter2" \
    "stdout://app:$PW@/" "stdout:?password=hunter2" \
    "null://app:$PW@h/" "null:?password=hunter2" "null:?token=$PW" "null:?sasl_secret=$PW"; do
    k=$((k + 1))
    no_secret "sink URI $k" relay --store "sqlite://$db" --route r --sink "$sink" --until-idle
done

finish
