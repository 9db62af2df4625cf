/* consumer: read events from Kafka and apply each one exactly once, however
 * often it arrives, with the inbox and ONE PostgreSQL transaction per event
 * on the application's own libpq connection.
 *
 *   consumer BROKERS TOPIC GROUP PG_URI [--consumer NAME] [--instance ID]
 *            [--relation NAME] [--idle-exit SECONDS]
 *
 * For each message of TOPIC (read in the consumer group GROUP, offsets
 * committed by hand), in this order:
 *
 *   1. BEGIN on the program's PGconn;
 *   2. outbox_inbox_accept(): record (NAME, the event's id) in the inbox;
 *   3. only when that record is new, the business write: a row in `applied`;
 *   4. COMMIT;
 *   5. only then, commit the message's Kafka offset (synchronously).
 *
 * A crash anywhere before 4 rolls back the record with the row, and Kafka
 * delivers the message again: it is new again. A crash between 4 and 5, or
 * a relay that published the event twice, delivers it again after it was
 * applied: the inbox says it is not new, the row is not written again, and
 * the offset is committed. Each handled message prints one line on stdout,
 * "applied ID" or "duplicate ID".
 *
 * The event's id is the CloudEvents id, which liboutbox's Kafka sink writes
 * as the header ce_id (ce_type holds its type); the record key is the
 * event's ordering key. The sink puts one key's events on one partition, in
 * order, and this program handles a partition's messages in order.
 *
 * BROKERS   Kafka bootstrap servers, host:port[,host:port...]
 * GROUP     the consumer group; the offsets committed are the group's
 * PG_URI    a libpq URI or conninfo string, e.g. postgresql://app@db/shop
 * --consumer NAME   the name the inbox records events under (default
 *           "consumer"): the same in every process of one logical consumer,
 *           another for another consumer that must see every event too. It
 *           is also the connection's application_name (unless PG_URI sets
 *           one), so pg_stat_activity shows which session is the consumer.
 * --instance ID     Kafka static membership (group.instance.id): give each
 *           process of the group its own stable ID and a restarted process
 *           takes its partitions back at once, instead of after the dead
 *           one's session times out (session.timeout.ms, 45 s by default).
 * --relation NAME   the outbox table (default "outbox", found through
 *           search_path); the inbox table is outbox_inbox beside it.
 * --idle-exit SECONDS  exit (status 0) after SECONDS without a message;
 *           without it the program runs until SIGTERM or SIGINT, which let
 *           the message in hand finish and then close the consumer cleanly.
 *
 * The tables, once (the inbox with `outbox schema apply --inbox`):
 *
 *   CREATE TABLE applied (event_id text NOT NULL, event_type text,
 *                         key text, payload text);
 *
 * `applied` has no unique key on purpose: only the inbox keeps an event from
 * being applied twice, and a second row would show it.
 *
 * Exit status: 0 after SIGTERM, SIGINT or --idle-exit; 1 on an error (one
 * line on stderr; the message in hand is not committed, so it comes again
 * to whoever consumes next); 2 on a usage error.
 *
 * Build: cc consumer.c $(pkg-config --cflags --libs liboutbox libpq rdkafka)
 */
/* sigaction and clock_gettime are POSIX, outside strict ISO C. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <outbox/outbox.h>

#define ME "consumer"
/* How often one event's transaction is tried when the server rolled it back
 * for a passing reason (a deadlock, a serialization failure). */
#define TX_ATTEMPTS 5

/* Set by SIGTERM and SIGINT; the loop looks at it between messages, so the
 * message in hand is always finished first. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct app {
    PGconn *conn;          /* the application's connection: its transactions count */
    outbox_store_t *store; /* finds the inbox table; the records go through conn */
    rd_kafka_t *rk;
    const char *consumer;  /* the inbox's name for this consumer */
} app_t;

/* A server's message on one line, for an error that must fit on one. */
static const char *one_line(const char *text, char *buf, size_t size)
{
    snprintf(buf, size, "%s", text ? text : "");
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == ' ')
        buf[--n] = '\0';
    return buf;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A header's value as a C string; NULL when the message lacks it or the
 * value holds a NUL byte (no id of ours does). librdkafka ends each value
 * with a NUL of its own, and the value lives as long as the message. */
static const char *header_text(const rd_kafka_message_t *m, const char *name)
{
    rd_kafka_headers_t *hs = NULL;
    const void *value = NULL;
    size_t size = 0;
    if (rd_kafka_message_headers(m, &hs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hs, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        value == NULL || strlen(value) != size)
        return NULL;
    return value;
}

/* Kafka's key and value are bytes without a terminating NUL; libpq's text
 * parameters want one. NULL in, NULL out (an SQL NULL). */
static char *text_copy(const void *bytes, size_t len, int *failed)
{
    if (bytes == NULL)
        return NULL;
    char *s = malloc(len + 1);
    if (s == NULL) {
        *failed = 1;
        return NULL;
    }
    memcpy(s, bytes, len);
    s[len] = '\0';
    return s;
}

/* How a step of an event's transaction, or the whole of it, ended. */
enum { STEP_OK, STEP_FAILED, STEP_AGAIN };

/* Runs sql with params on conn. STEP_AGAIN: the server rolled the
 * transaction back for a reason that running it again may cure. Failures
 * are said on stderr. */
static int exec_step(PGconn *conn, const char *sql, int n, const char *const *params,
                     const char *what)
{
    PGresult *res = n > 0 ? PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0)
                          : PQexec(conn, sql);
    if (PQresultStatus(res) == PGRES_COMMAND_OK) {
        PQclear(res);
        return STEP_OK;
    }
    /* SQLSTATE class 40: a serialization failure or a deadlock. */
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    int again = state != NULL && strncmp(state, "40", 2) == 0;
    char line[512];
    fprintf(stderr, ME ": %s%s: %s\n", what, again ? " (retrying)" : "",
            one_line(PQerrorMessage(conn), line, sizeof line));
    PQclear(res);
    return again ? STEP_AGAIN : STEP_FAILED;
}

/* Steps 1 to 4 for one message, once: STEP_OK when its transaction
 * committed (*is_new says whether it applied the event), else nothing of
 * it is kept, and STEP_AGAIN says that another try may succeed. */
static int handle(app_t *a, const rd_kafka_message_t *m, const char *id, int *is_new)
{
    *is_new = 0;
    int oom = 0;
    char *key = text_copy(m->key, m->key_len, &oom);
    char *payload = text_copy(m->payload, m->len, &oom);
    if (oom) {
        fprintf(stderr, ME ": out of memory\n");
        free(key);
        free(payload);
        return STEP_FAILED;
    }

    int rc = exec_step(a->conn, "BEGIN", 0, NULL, "BEGIN");

    /* The record, on conn inside its transaction: it commits with the
     * business row or not at all. Of two transactions recording the same
     * event, the second waits for the first, then finds the record. */
    if (rc == STEP_OK) {
        int err = outbox_inbox_accept(a->store, a->conn, a->consumer, id, is_new);
        if (err != OUTBOX_OK) {
            /* Transient: a serialization failure, a lost connection; only
             * the first is worth another try on this connection. */
            rc = err == OUTBOX_ETRANSIENT && PQstatus(a->conn) == CONNECTION_OK ? STEP_AGAIN
                                                                                 : STEP_FAILED;
            fprintf(stderr, ME ": recording event %s in the inbox%s: %s\n", id,
                    rc == STEP_AGAIN ? " (retrying)" : "", outbox_store_message(a->store));
        }
    }

    /* The business write, only for an event not handled before. */
    if (rc == STEP_OK && *is_new) {
        const char *params[4] = {id, header_text(m, "ce_type"), key, payload};
        rc = exec_step(a->conn,
                       "INSERT INTO applied (event_id, event_type, key, payload) "
                       "VALUES ($1, $2, $3, $4)",
                       4, params, "applying the event");
    }

    if (rc == STEP_OK)
        rc = exec_step(a->conn, "COMMIT", 0, NULL, "COMMIT");
    if (rc != STEP_OK) {
        /* Nothing of this transaction may survive; the message is not
         * committed to Kafka, so it is delivered again if we stop here. */
        PQclear(PQexec(a->conn, "ROLLBACK"));
        *is_new = 0;
    }
    free(key);
    free(payload);
    return rc;
}

/* A consumer error: 1 when the program cannot go on, 0 when librdkafka
 * recovers by itself (a broker that went away, a rebalance under way). */
static int consume_error_is_fatal(app_t *a, const rd_kafka_message_t *m)
{
    if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_fatal_error(a->rk, why, sizeof why);
        fprintf(stderr, ME ": kafka: %s\n", why);
        return 1;
    }
    int fatal = m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                m->err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED;
    fprintf(stderr, ME ": kafka%s: %s\n", fatal ? "" : " (retrying)", rd_kafka_message_errstr(m));
    return fatal;
}

/* Steps 1 to 5 for one message; 0 to go on, 1 to stop with an error. */
static int consume_one(app_t *a, const rd_kafka_message_t *m)
{
    const char *id = header_text(m, "ce_id");
    if (id == NULL) {
        /* Without an id there is nothing to recognise a redelivery by.
         * Stop rather than guess: the message stays uncommitted. */
        fprintf(stderr, ME ": %s [%d] offset %lld has no ce_id header\n",
                rd_kafka_topic_name(m->rkt), (int)m->partition, (long long)m->offset);
        return 1;
    }
    int is_new = 0, rc = STEP_AGAIN;
    for (int attempt = 1; rc == STEP_AGAIN && attempt <= TX_ATTEMPTS; attempt++)
        rc = handle(a, m, id, &is_new);
    if (rc == STEP_AGAIN)
        fprintf(stderr, ME ": event %s: gave up after %d tries\n", id, TX_ATTEMPTS);
    if (rc != STEP_OK)
        return 1;
    printf("%s %s\n", is_new ? "applied" : "duplicate", id);
    fflush(stdout);

    /* The event's effects are durable: now Kafka may forget the message. A
     * failed commit is no reason to stop: the message comes again (here or
     * to the process that takes the partition over) and the inbox then
     * says it is a duplicate. */
    rd_kafka_resp_err_t err = rd_kafka_commit_message(a->rk, m, 0);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        rd_kafka_fatal_error(a->rk, why, sizeof why);
        fprintf(stderr, ME ": committing the offset of %s: %s\n", id, why);
        return 1;
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        fprintf(stderr, ME ": committing the offset of %s (it will come again): %s\n", id,
                rd_kafka_err2str(err));
    return 0;
}

/* A librdkafka property, or 1 after saying why not. */
static int conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char why[512];
    if (rd_kafka_conf_set(conf, name, value, why, sizeof why) == RD_KAFKA_CONF_OK)
        return 0;
    fprintf(stderr, ME ": kafka %s: %s\n", name, why);
    return 1;
}

/* The group's consumer, subscribed to topic; NULL after saying why not. */
static rd_kafka_t *open_kafka(const char *brokers, const char *topic, const char *group,
                              const char *instance)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* Offsets are committed by hand, after the database commit: an
     * automatic commit could mark a message done before its transaction
     * committed, and a crash then would lose it. A new group starts at the
     * beginning of the topic. */
    if (conf_set(conf, "bootstrap.servers", brokers) || conf_set(conf, "group.id", group) ||
        conf_set(conf, "enable.auto.commit", "false") ||
        conf_set(conf, "auto.offset.reset", "earliest") ||
        (instance && conf_set(conf, "group.instance.id", instance))) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    char why[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof why);
    if (rk == NULL) { /* conf is still ours */
        fprintf(stderr, ME ": kafka: %s\n", why);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    /* Every event of the group comes through rd_kafka_consumer_poll(). */
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, ME ": subscribing to %s: %s\n", topic, rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

static int usage(void)
{
    fprintf(stderr, "usage: " ME " BROKERS TOPIC GROUP PG_URI [--consumer NAME] [--instance ID] "
                    "[--relation NAME] [--idle-exit SECONDS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return usage();
    const char *brokers = argv[1], *topic = argv[2], *group = argv[3], *uri = argv[4];
    const char *consumer = "consumer", *instance = NULL, *relation = "outbox";
    double idle_exit = 0;
    for (int i = 5; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--consumer") == 0 && next)
            consumer = argv[++i];
        else if (strcmp(argv[i], "--instance") == 0 && next)
            instance = argv[++i];
        else if (strcmp(argv[i], "--relation") == 0 && next)
            relation = argv[++i];
        else if (strcmp(argv[i], "--idle-exit") == 0 && next && atof(next) > 0)
            idle_exit = atof(argv[++i]);
        else {
            fprintf(stderr, ME ": unknown or incomplete argument %s\n", argv[i]);
            return usage();
        }
    }

    /* SIGTERM and SIGINT only ask the loop to stop: the transaction in
     * hand finishes, then the consumer leaves the group cleanly. No
     * SA_RESTART, so a wait in progress returns early. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        perror(ME ": sigaction");
        return 1;
    }

    app_t a = {.consumer = consumer};

    /* The application's own connection. The consumer's name is its
     * application_name unless the URI gives one. */
    const char *const keys[] = {"dbname", "fallback_application_name", NULL};
    const char *const values[] = {uri, consumer, NULL};
    a.conn = PQconnectdbParams(keys, values, 1);
    if (PQstatus(a.conn) != CONNECTION_OK) {
        char line[512];
        fprintf(stderr, ME ": %s\n", one_line(PQerrorMessage(a.conn), line, sizeof line));
        PQfinish(a.conn);
        return 1;
    }

    /* The store handle finds the inbox table beside the outbox table. It
     * keeps a connection of its own, but every record below goes through
     * a.conn, inside the transaction of the event it records. */
    outbox_store_options_t opts = {.struct_size = sizeof opts, .relation = relation};
    outbox_diag_t diag = {0};
    if (outbox_store_open(uri, &opts, &a.store, &diag) != OUTBOX_OK) {
        fprintf(stderr, ME ": opening the store: %s\n", diag.message);
        PQfinish(a.conn);
        return 1;
    }
    if (!(outbox_store_capabilities(a.store) & OUTBOX_STORE_CAP_INBOX)) {
        fprintf(stderr, ME ": no inbox table beside %s: create it with "
                        "`outbox schema apply --inbox`\n", relation);
        outbox_store_close(a.store);
        PQfinish(a.conn);
        return 1;
    }

    a.rk = open_kafka(brokers, topic, group, instance);
    if (a.rk == NULL) {
        outbox_store_close(a.store);
        PQfinish(a.conn);
        return 1;
    }

    int rc = 0;
    double last = now_s();
    while (!stop_requested && rc == 0) {
        /* A short wait, so that a stop request or --idle-exit is seen soon. */
        rd_kafka_message_t *m = rd_kafka_consumer_poll(a.rk, 200);
        if (m == NULL) {
            if (idle_exit > 0 && now_s() - last >= idle_exit)
                break;
            continue;
        }
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = consume_error_is_fatal(&a, m);
        else {
            last = now_s();
            rc = consume_one(&a, m);
        }
        rd_kafka_message_destroy(m);
    }

    /* Close the consumer. Without --instance it leaves the group, and its
     * partitions go to the other processes at once, at the offsets
     * committed above; a static member keeps them until it comes back or
     * its session times out. */
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(a.rk);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, ME ": closing the kafka consumer: %s\n", rd_kafka_err2str(err));
        rc = 1;
    }
    rd_kafka_destroy(a.rk);
    outbox_store_close(a.store);
    PQfinish(a.conn);
    return rc;
}
