# The HTTP webhook sink in tests/integration/sink_relay.sh, against the
# project's receiver (tools/services/http.sh).
SERVICE=http
READER=read_requests.py
# HTTP has no dedupe: a fault may deliver a batch again.
DEDUPE=0
# The receiver takes any password; the round trips also sign each request
# with a secret from the environment, which the reader checks.
SECRET_REFUSED=0
export OUTBOX_IT_SIGNING=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
SINK_QUERY='hmac_secret_env=OUTBOX_IT_SIGNING'
READ_EXTRA=$OUTBOX_IT_SIGNING
FAULT_QUERY='timeout=2s&connect_timeout=500ms'

sink_prepare() { :; }
