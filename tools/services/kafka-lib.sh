# Sourced by kafka.sh and kafka-cluster.sh: the one install of Apache Kafka
# that both run, and what their brokers share. The sourcing script defines
# die() first.
#
# Sets kafka_version, log4j_version, kafka_cache (the jars live in
# $kafka_cache/libs) and kafka_java_opts, and defines kafka_ensure_packages,
# kafka_ensure_jars, kafka_cluster_id and kafka_log4j_config.

kafka_version=4.1.1
log4j_version=2.24.3
kafka_cache=${OUTBOX_CACHE:-$HOME/.cache/liboutbox}/kafka-$kafka_version
kafka_src_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# A small, quickly started JVM: the brokers of the tests hold little data.
kafka_java_opts=(-Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true)

kafka_ensure_packages() {
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1 ||
        ! command -v kcat >/dev/null 2>&1; then
        # shellcheck source=../deps.sh
        . "$kafka_src_root/tools/deps.sh"
        outbox_install openjdk-17-jre-headless maven kcat || die "could not install a JDK, maven and kcat"
    fi
}

# The broker's jars, copied by Maven from Central into $kafka_cache/libs
# once; a stamp names what was fetched so a change of pins fetches again.
kafka_ensure_jars() {
    local want="kafka_2.13:$kafka_version log4j-slf4j-impl:$log4j_version"
    local cache=$kafka_cache
    [ "$(cat "$cache/.pins" 2>/dev/null)" = "$want" ] && return 0
    mkdir -p "$cache"
    # One fetch at a time when several starts race for an empty cache.
    exec 9>"$cache/.lock"
    flock 9
    if [ "$(cat "$cache/.pins" 2>/dev/null)" != "$want" ]; then
        cat >"$cache/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>liboutbox.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$kafka_version</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$log4j_version</version>
    </dependency>
  </dependencies>
</project>
EOF
        rm -rf "$cache/libs"
        echo "kafka: fetching Kafka $kafka_version from Maven Central into $cache" >&2
        (cd "$cache" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory=libs) >"$cache/mvn.log" 2>&1 || {
            tail -20 "$cache/mvn.log" >&2
            die "mvn dependency:copy-dependencies failed"
        }
        ls "$cache/libs"/kafka_2.13-"$kafka_version".jar >/dev/null 2>&1 || die "no kafka jar in $cache/libs"
        echo "$want" >"$cache/.pins"
    fi
    flock -u 9
}

# A KRaft cluster id: 16 random bytes, URL-safe base64 without padding. One
# that starts with '-' would be read as an option, so draw again.
kafka_cluster_id() {
    local id
    while :; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
        [ "${id#-}" = "$id" ] && { echo "$id"; return; }
    done
}

# kafka_log4j_config FILE LOG: a log4j2 configuration writing the broker's
# log to LOG, afresh at each start. Without one the broker logs nothing,
# and "Kafka Server started" is what a start waits for.
kafka_log4j_config() {
    cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="$2" append="false">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="info"/>
    <Logger name="org.apache.kafka" level="info"/>
    <Root level="warn"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
EOF
}
