/* The kafka: URI into librdkafka configuration.
 *
 *   kafka://[user[:password]@]host[:port]/TOPIC_TEMPLATE?name=value&...
 *
 * The driver's own names are timeout, partitions and replication; every
 * other name is a librdkafka property, handed over as it stands, so that
 * anything librdkafka can do (TLS, SASL, compression, batching) needs no
 * code here. PROPERTY_env=VARIABLE reads a property's value from the
 * environment, as every driver's secret options do. The few properties
 * the sink's promises rest on may not be weakened: a URI that tries is
 * refused with the reason. */
#include <stdio.h>
#include <string.h>

#include "kafka_int.h"

static const outbox_host_t **host = &outbox_kafka_host;
#define H (*host)

/* What a message about the URI starts with, the kit's about an option's
 * value too. */
#define KAFKA_LABEL "kafka sink URI"

static int cfg_error(outbox_diag_t *d, const kafka_config_t *cfg, const char *fmt, ...)
    OUTBOX_PRINTF(3, 4);
static int cfg_error(outbox_diag_t *d, const kafka_config_t *cfg, const char *fmt, ...)
{
    char why[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return H->error(d, OUTBOX_EINVAL, KAFKA_LABEL " %s: %s", cfg->shown, why);
}

kafka_secrets_t *outbox_kafka_secrets_keep(kafka_secrets_t *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void outbox_kafka_secrets_drop(kafka_secrets_t *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    outbox_kit_redactor_free(H, s->redactor);
    pthread_mutex_destroy(&s->mu);
    H->free(s);
}

void outbox_kafka_last_error(kafka_secrets_t *s, char *out, size_t size)
{
    pthread_mutex_lock(&s->mu);
    snprintf(out, size, "%s", s->last_error);
    pthread_mutex_unlock(&s->mu);
}

void outbox_kafka_clear_error(kafka_secrets_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->last_error[0] = '\0';
    pthread_mutex_unlock(&s->mu);
}

static kafka_secrets_t *secrets_new(const outbox_uri_t *uri)
{
    kafka_secrets_t *s = H->alloc(sizeof *s);
    if (s == NULL)
        return NULL;
    s->redactor = outbox_kit_redactor_new(H, uri);
    if (s->redactor == NULL) {
        H->free(s);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->mu, NULL);
    s->last_error[0] = '\0';
    return s;
}

static int add_param(kafka_config_t *cfg, const char *key, const char *value, int hidden)
{
    kafka_param_t *p = H->realloc(cfg->params, (cfg->n_params + 1) * sizeof *p);
    if (p == NULL)
        return -1;
    cfg->params = p;
    p += cfg->n_params;
    p->key = outbox_kit_strdup(H, key);
    p->value = outbox_kit_strdup(H, value);
    p->hidden = hidden;
    if (p->key == NULL || p->value == NULL) {
        H->free(p->key);
        H->free(p->value);
        return -1;
    }
    cfg->n_params++;
    return 0;
}

/* Properties the sink's promises rest on: name, the only values allowed,
 * and what the user is told. */
static const struct {
    const char *name;
    const char *allowed[3];
    const char *why;
} pinned[] = {
    {"acks", {"all", "-1", NULL}, "the sink reports OK only for messages every in-sync replica has (acks=all)"},
    {"request.required.acks", {"all", "-1", NULL}, "the sink reports OK only for messages every in-sync replica has (acks=all)"},
    {"enable.idempotence", {"true", NULL, NULL}, "retries must not duplicate or reorder messages (enable.idempotence=true)"},
    {"enable.gapless.guarantee", {"true", NULL, NULL}, "per-key order after a refused message rests on it (enable.gapless.guarantee=true)"},
    {"message.timeout.ms", {NULL, NULL, NULL}, "use the sink's timeout option (a duration, e.g. timeout=30s)"},
    {"delivery.timeout.ms", {NULL, NULL, NULL}, "use the sink's timeout option (a duration, e.g. timeout=30s)"},
    {"transactional.id", {NULL, NULL, NULL}, "the sink does not produce in transactions"},
};

static int check_pinned(const kafka_config_t *cfg, const char *key, const char *value, int hidden,
                        outbox_diag_t *d)
{
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        if (strcmp(pinned[i].name, key) != 0)
            continue;
        for (size_t j = 0; j < 3 && pinned[i].allowed[j]; j++)
            if (strcmp(pinned[i].allowed[j], value) == 0)
                return OUTBOX_OK;
        return cfg_error(d, cfg, "%s may not be set to %s here: %s", key, hidden ? "***" : value,
                         pinned[i].why);
    }
    return OUTBOX_OK;
}

/* The sink's own options, in the one grammar of every driver's options. */
static int parse_options(const outbox_uri_t *uri, kafka_config_t *cfg, outbox_diag_t *d)
{
    int64_t timeout_us = INT64_C(30000000), partitions = 3, replication = 1;
    int64_t partition_us = INT64_C(1000000);
    int rc = outbox_kit_opt_duration(H, uri, KAFKA_LABEL, "timeout", INT64_C(100000),
                                     INT64_C(3600000000), &timeout_us, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_duration(H, uri, KAFKA_LABEL, "partition_timeout", INT64_C(1000),
                                     INT64_C(3600000000), &partition_us, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(H, uri, KAFKA_LABEL, "partitions", 1, 100000, &partitions, d);
    if (rc == OUTBOX_OK)
        rc = outbox_kit_opt_int(H, uri, KAFKA_LABEL, "replication", 1, 1000, &replication, d);
    /* librdkafka counts milliseconds; a part of one is not dropped. */
    cfg->timeout_ms = (timeout_us + 999) / 1000;
    cfg->partition_timeout_ms = (partition_us + 999) / 1000;
    cfg->partitions = (int)partitions;
    cfg->replication = (int)replication;
    return rc;
}

static int own_option(const char *key, size_t n)
{
    static const char *const own[] = {"timeout", "partition_timeout", "partitions", "replication"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strlen(own[i]) == n && strncmp(own[i], key, n) == 0)
            return 1;
    return 0;
}

/* Adds uri's parameter p: a librdkafka property, PROPERTY_env=VARIABLE
 * for one from the environment, or more brokers. */
static int add_property(const outbox_uri_t *uri, const outbox_uri_param_t *p, kafka_config_t *cfg,
                        outbox_kit_buf_t *brokers, outbox_diag_t *d)
{
    const char *key = p->key, *value = p->value ? p->value : "";
    size_t kl = strlen(key), vl = strlen(value);
    char name[124]; /* with "_env" it fits the kit's 128 bytes */
    int from_env = kl > 4 && strcmp(key + kl - 4, "_env") == 0 && !own_option(key, kl - 4) &&
                   kl - 4 < sizeof name;
    if (from_env) {
        snprintf(name, sizeof name, "%.*s", (int)(kl - 4), key);
        int rc = outbox_kit_opt_secret(H, uri, KAFKA_LABEL, name, &value, d);
        if (rc != OUTBOX_OK)
            return rc;
        key = name;
    } else if (vl > 3 && value[0] == '$' && value[1] == '{' && value[vl - 1] == '}') {
        /* The sink's former spelling: passed on, it would be the value. */
        return cfg_error(d, cfg,
                         "%s=${...}: write %s_env=VARIABLE for a value from the environment", key,
                         key);
    }
    if (strcmp(key, "bootstrap.servers") == 0 || strcmp(key, "metadata.broker.list") == 0) {
        /* More brokers beside the one in the authority. */
        outbox_kit_buf_printf(brokers, ",%s", value);
        return OUTBOX_OK;
    }
    int hidden = from_env || outbox_kit_secret_key(key);
    int rc = check_pinned(cfg, key, value, hidden, d);
    if (rc == OUTBOX_OK && add_param(cfg, key, value, hidden) != 0)
        rc = OUTBOX_ENOMEM;
    return rc;
}

int outbox_kafka_config_parse(const outbox_uri_t *uri, kafka_config_t *cfg, outbox_diag_t *d)
{
    memset(cfg, 0, sizeof *cfg);
    outbox_kit_uri_show(H, uri, cfg->shown, sizeof cfg->shown);
    int rc = parse_options(uri, cfg, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (uri->host == NULL || uri->host[0] == '\0')
        return cfg_error(d, cfg, "no broker: write kafka://host:port/topic");

    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, H);
    if (strchr(uri->host, ',') != NULL) {
        /* kafka://k1:9092,k2:9092/...: the host holds the list, each as
         * librdkafka reads it (a missing port is 9092). */
        outbox_kit_buf_puts(&b, uri->host);
    } else {
        int v6 = strchr(uri->host, ':') != NULL;
        outbox_kit_buf_printf(&b, "%s%s%s:%d", v6 ? "[" : "", uri->host, v6 ? "]" : "",
                              uri->port > 0 ? uri->port : 9092);
    }
    const char *path = uri->path ? uri->path : "";
    cfg->topic_tpl = outbox_kit_strdup(H, path[0] == '/' ? path + 1 : path);
    cfg->secrets = secrets_new(uri);
    if (cfg->secrets == NULL)
        rc = OUTBOX_ENOMEM;
    if (uri->user != NULL && add_param(cfg, "sasl.username", uri->user, 0) != 0)
        rc = OUTBOX_ENOMEM;
    if (uri->password != NULL && add_param(cfg, "sasl.password", uri->password, 1) != 0)
        rc = OUTBOX_ENOMEM;
    cfg->has_creds = uri->user != NULL || uri->password != NULL;
    for (size_t i = 0; rc == OUTBOX_OK && i < uri->n_params; i++)
        if (!own_option(uri->params[i].key, strlen(uri->params[i].key)))
            rc = add_property(uri, &uri->params[i], cfg, &b, d);
    cfg->brokers = outbox_kit_buf_steal(&b);
    if (rc == OUTBOX_OK && (cfg->brokers == NULL || cfg->topic_tpl == NULL))
        rc = OUTBOX_ENOMEM;
    if (rc == OUTBOX_ENOMEM)
        H->error(d, rc, "out of memory parsing the kafka sink URI");
    if (rc != OUTBOX_OK)
        outbox_kafka_config_free(cfg);
    return rc;
}

void outbox_kafka_config_free(kafka_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_params; i++) {
        H->free(cfg->params[i].key);
        H->free(cfg->params[i].value);
    }
    H->free(cfg->params);
    H->free(cfg->brokers);
    H->free(cfg->topic_tpl);
    outbox_kafka_secrets_drop(cfg->secrets);
    cfg->params = NULL;
    cfg->n_params = 0;
    cfg->brokers = cfg->topic_tpl = NULL;
    cfg->secrets = NULL;
}

/* librdkafka's log and error lines into the host's log, secrets masked.
 * The opaque is the configuration's kafka_secrets_t. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    const kafka_secrets_t *s = rk ? rd_kafka_opaque(rk) : NULL;
    if (s == NULL)
        return;
    char line[400];
    outbox_kit_redact(H, s->redactor, buf, line, sizeof line);
    /* librdkafka speaks syslog levels. Its warning that the gapless
     * guarantee is experimental is the sink's own choice, not news. */
    int lvl = level <= 3 ? OUTBOX_LOG_WARN : level == 4 ? OUTBOX_LOG_INFO : OUTBOX_LOG_DEBUG;
    if (fac != NULL && strcmp(fac, "CONFWARN") == 0 && strstr(buf, "gapless") != NULL)
        lvl = OUTBOX_LOG_DEBUG;
    H->log(lvl, KAFKA_SINK_NAME, "librdkafka %s: %s", fac, line);
}

/* librdkafka's errors (a failed TLS handshake or login, brokers down):
 * kept for the messages they cost. Its log callback has already told the
 * same at warning level, so here only at debug level. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    kafka_secrets_t *s = opaque;
    if (s == NULL)
        return;
    char line[256];
    outbox_kit_redact(H, s->redactor, reason ? reason : rd_kafka_err2str(err), line, sizeof line);
    pthread_mutex_lock(&s->mu);
    snprintf(s->last_error, sizeof s->last_error, "%s", line);
    pthread_mutex_unlock(&s->mu);
    H->log(OUTBOX_LOG_DEBUG, KAFKA_SINK_NAME, "librdkafka error: %s: %s", rd_kafka_err2name(err), line);
    (void)rk;
}

static int conf_set(rd_kafka_conf_t *conf, const kafka_config_t *cfg, const char *key,
                    const char *value, int hidden, outbox_diag_t *d)
{
    char err[512];
    rd_kafka_conf_res_t r = rd_kafka_conf_set(conf, key, value, err, sizeof err);
    if (r == RD_KAFKA_CONF_OK)
        return OUTBOX_OK;
    if (r == RD_KAFKA_CONF_UNKNOWN)
        return cfg_error(d, cfg, "%s is neither an option of the sink (timeout, partition_timeout, "
                         "partitions, replication) nor a librdkafka property", key);
    if (hidden)
        return cfg_error(d, cfg, "librdkafka refuses the value of %s (not shown)", key);
    char shown[400];
    outbox_kit_redact(H, cfg->secrets->redactor, err, shown, sizeof shown);
    return cfg_error(d, cfg, "%s", shown);
}

rd_kafka_conf_t *outbox_kafka_conf_new(const kafka_config_t *cfg, int producer, outbox_diag_t *d)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (conf == NULL) {
        H->error(d, OUTBOX_ENOMEM, "out of memory making a librdkafka configuration");
        return NULL;
    }
    char ms[32], half[32];
    snprintf(ms, sizeof ms, "%lld", (long long)cfg->timeout_ms + 10000);
    snprintf(half, sizeof half, "%lld", (long long)(cfg->timeout_ms / 2 < 30000 ? cfg->timeout_ms / 2 : 30000));
    int rc = conf_set(conf, cfg, "bootstrap.servers", cfg->brokers, 0, d);
    if (producer) {
        /* Defaults a URI may change; then the user's properties; then the
         * pinned ones, which check_pinned let through only unweakened.
         * message.timeout.ms lies beyond the call's own bound, at which
         * the sink purges what is left itself (see kafka_publish.c). */
        const char *defaults[][2] = {
            {"topic.metadata.propagation.max.ms", half},
            {"linger.ms", "5"},
        };
        for (size_t i = 0; rc == OUTBOX_OK && i < sizeof defaults / sizeof defaults[0]; i++)
            rc = conf_set(conf, cfg, defaults[i][0], defaults[i][1], 0, d);
    } else {
        const char *defaults[][2] = {
            {"group.id", "outbox-sink-reader"},
            {"enable.auto.commit", "false"},
            {"enable.auto.offset.store", "false"},
            {"auto.offset.reset", "earliest"},
            {"enable.partition.eof", "false"},
        };
        for (size_t i = 0; rc == OUTBOX_OK && i < sizeof defaults / sizeof defaults[0]; i++)
            rc = conf_set(conf, cfg, defaults[i][0], defaults[i][1], 0, d);
    }
    for (size_t i = 0; rc == OUTBOX_OK && i < cfg->n_params; i++)
        rc = conf_set(conf, cfg, cfg->params[i].key, cfg->params[i].value, cfg->params[i].hidden, d);
    if (producer) {
        const char *fixed[][2] = {
            {"enable.idempotence", "true"},
            {"acks", "all"},
            {"enable.gapless.guarantee", "true"},
            {"message.timeout.ms", ms},
        };
        for (size_t i = 0; rc == OUTBOX_OK && i < sizeof fixed / sizeof fixed[0]; i++)
            rc = conf_set(conf, cfg, fixed[i][0], fixed[i][1], 0, d);
    }
    if (rc != OUTBOX_OK) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, cfg->secrets);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    return conf;
}
