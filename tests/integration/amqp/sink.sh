# The AMQP 0-9-1 sink in tests/integration/sink_relay.sh, on RabbitMQ.
SERVICE=rabbitmq
READER=read_queue.py
# RabbitMQ has no dedupe: a fault may deliver a batch again.
DEDUPE=0
# The node knows guest's real password only.
SECRET_REFUSED=1
FAULT_QUERY='timeout=2s&connect_timeout=1s'

# sink_prepare URI QUEUE: a fresh durable queue, declared with pika; the
# sink's routing key defaults to the destination, and the default exchange
# routes it to the queue of that name.
sink_prepare() {
    "$PY" - "$1" "$2" <<'PYEOF' || fail "declare queue $2 on $1"
import sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.queue_delete(sys.argv[2])
ch.queue_declare(sys.argv[2], durable=True)
conn.close()
PYEOF
}
