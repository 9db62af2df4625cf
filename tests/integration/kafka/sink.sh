# The Kafka sink in tests/integration/sink_relay.sh.
SERVICE=kafka
READER=read_topic.py
# The idempotent producer dedupes within one producer only: a relay killed
# and started again may deliver a batch again.
DEDUPE=0
# A user and password without security.protocol sasl_* are not used (the
# sink warns and goes on).
SECRET_REFUSED=0
FAULT_QUERY='timeout=5s'

# sink_prepare URI TOPIC: a topic of 3 partitions, made with confluent-kafka
# (the brokers here create none on first use).
sink_prepare() {
    "$PY" - "$1" "$2" <<'PYEOF' || fail "create topic $2 on $1"
import sys
from confluent_kafka.admin import AdminClient, NewTopic
boot = sys.argv[1].removeprefix("kafka://").split("/")[0].split("?")[0]
a = AdminClient({"bootstrap.servers": boot})
for f in a.create_topics([NewTopic(sys.argv[2], 3, 1)]).values():
    f.result()
PYEOF
}
