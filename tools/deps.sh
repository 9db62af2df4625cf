# Sourced by tools/demo and tools/test: install what the build and tests
# need, from Debian's packages, only when something is missing (so a
# second run does nothing). Versions are the ones Debian 12 (bookworm)
# ships; apt keeps them fixed within the release.

OUTBOX_BUILD_PACKAGES="meson ninja-build gcc pkg-config check libsubunit-dev libltdl-dev libsqlite3-dev sqlite3 python3 libyaml-dev libsystemd-dev"
# libmicrohttpd: the HTTP server of outbox relay --metrics-listen.
OUTBOX_BUILD_PACKAGES="$OUTBOX_BUILD_PACKAGES libmicrohttpd-dev"
# man-db and groff-base: tools/test's install check reads the installed
# man page with man(1) from the scratch prefix and lints it with groff.
# libclang-rt-14-dev: clang's libFuzzer and sanitizer runtimes, without which
# -fsanitize=fuzzer does not link and the clang build has no fuzz programs.
OUTBOX_TEST_PACKAGES="clang libclang-rt-14-dev valgrind man-db groff-base"
# chromium: tests/cli/metrics.sh loads the relay's status page headless (--dump-dom).
OUTBOX_TEST_PACKAGES="$OUTBOX_TEST_PACKAGES chromium"
# pmccabe: tests/lint/complexity.sh measures the functions of tools/bench.
OUTBOX_TEST_PACKAGES="$OUTBOX_TEST_PACKAGES pmccabe"

outbox_sudo() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

outbox_install() {
    missing=""
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    echo "tools: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    outbox_sudo apt-get update -qq >/dev/null || return 1
    # shellcheck disable=SC2086
    outbox_sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null || return 1
}

# Servers the integration tests start (tools/services/*.sh); each service
# appends its own packages. PostgreSQL: the server for
# tools/services/postgres.sh and libpq for the store driver.
OUTBOX_SERVICE_PACKAGES="${OUTBOX_SERVICE_PACKAGES:-} postgresql libpq-dev"
# Kafka: librdkafka for the sink, a JDK and Maven for the broker
# (tools/services/kafka.sh), kcat for reading back by hand. NATS: the C
# client and Debian's nats-server with JetStream. python3-venv: the
# third-party Python clients of tools/services/pyclients.sh.
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES librdkafka-dev openjdk-17-jre-headless maven kcat libnats-dev nats-server python3-venv"
# Redis: hiredis for the sink, Debian's redis-server for
# tools/services/redis.sh and redis-cli for reading streams back by hand;
# redis-sentinel for `redis.sh sentinel` (failover of a primary to its replica).
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES libhiredis-dev redis-server redis-tools redis-sentinel"
# HTTP: libcurl for the webhook sink and libssl-dev for its HMAC signatures
# (libcrypto); the test receiver is the system python3's standard library,
# and its HTTPS test makes a certificate with the openssl tool.
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES libcurl4-openssl-dev libssl-dev openssl"
# MongoDB: libmongoc for the store driver; its test server, FerretDB, is
# built from source by tools/services/ferretdb.sh with the Go toolchain.
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES libmongoc-dev"
# Tracing: the span exporter posts with libcurl (above); its test collector,
# Jaeger, is built from source by tools/services/jaeger.sh with the Go
# toolchain, and curl reads Jaeger's query API.
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES curl"
# RabbitMQ: the C client (librabbitmq) for the AMQP sink, Debian's
# rabbitmq-server for tools/services/rabbitmq.sh, and amqp-tools
# (amqp-consume, amqp-declare-queue) for reading back by hand; openssl makes
# the test node's throwaway TLS certificates.
OUTBOX_SERVICE_PACKAGES="$OUTBOX_SERVICE_PACKAGES librabbitmq-dev rabbitmq-server amqp-tools openssl"
