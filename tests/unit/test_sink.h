/* A scriptable in-process sink for relay tests, registered through
 * outbox_driver_register under the schemes test: (one message per key per
 * call) and testordered: (OUTBOX_SINK_CAP_ORDERED: after a message of a key
 * fails, RETRY or REJECT, the later ones of that key in the call are not
 * delivered and are reported RETRY) and testloose: (declares ORDERED but
 * delivers whatever the rule says: a sink breaking the promise). */
#ifndef TEST_SINK_H
#define TEST_SINK_H

#include <outbox/outbox.h>

/* Decide one message's fate; call is the 0-based publish call number. */
typedef int (*test_sink_rule_fn)(const outbox_message_t *m, int call);

typedef struct test_sink_log {
    char event_id[OUTBOX_UUID_STRLEN + 1];
    char key[64];
    int call;
    char traceparent[64]; /* the message's traceparent header; "" when none */
} test_sink_log_t;

void test_sink_register(void);
void test_sink_reset(test_sink_rule_fn rule);
/* Messages reported OK, in delivery order, including those a relay in a
 * forked child delivered (the log is shared across fork). */
size_t test_sink_delivered(const test_sink_log_t **log);
int test_sink_calls(void);
/* Largest number of messages sharing a key seen in one unordered call. */
int test_sink_max_per_key(void);
/* Called at the start of every publish, for tests that stop a relay mid-batch. */
void test_sink_on_publish(void (*fn)(void *ctx), void *ctx);
/* Called at the end of every publish, once its results are filled in, for
 * tests that kill a relay between its last publish call and its settle. */
void test_sink_after_publish(void (*fn)(int call, void *ctx), void *ctx);

#endif
