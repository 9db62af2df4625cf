/* The kafka: URI into librdkafka configuration.
 *
 *   kafka://[user[:password]@]host[:port]/TOPIC_TEMPLATE?name=value&...
 *
 * The driver's own names are timeout, partitions and replication; every
 * other name is a librdkafka property, handed over as it stands, so that
 * anything librdkafka can do (TLS, SASL, compression, batching) needs no
 * code here. A value written ${NAME} is read from the environment. The
 * few properties the sink's promises rest on may not be weakened: a URI
 * that tries is refused with the reason. */
#include <stdlib.h>
#include <string.h>

#include "kafka_int.h"

static const outbox_host_t **host = &outbox_kafka_host;
#define H (*host)

static int cfg_error(outbox_diag_t *d, const kafka_config_t *cfg, const char *fmt, ...)
    OUTBOX_PRINTF(3, 4);
static int cfg_error(outbox_diag_t *d, const kafka_config_t *cfg, const char *fmt, ...)
{
    char why[OUTBOX_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return H->error(d, OUTBOX_EINVAL, "kafka sink URI %s: %s", cfg->shown, why);
}

/* "30s", "500ms", "2m", or a number of seconds; 0 and -1 on error. */
static int parse_duration_ms(const char *s, int64_t *ms)
{
    char *end = NULL;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    double v = strtod(s, &end);
    double scale = 1000;
    if (strcmp(end, "ms") == 0)
        scale = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        scale = 1000;
    else if (strcmp(end, "m") == 0)
        scale = 60000;
    else
        return -1;
    v *= scale;
    if (v < 100 || v > 3600000)
        return -1;
    *ms = (int64_t)v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end = NULL;
    long v = s != NULL && s[0] >= '0' && s[0] <= '9' ? strtol(s, &end, 10) : -1;
    if (v < lo || v > hi || end == NULL || *end != '\0')
        return -1;
    *out = (int)v;
    return 0;
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

static int check_pinned(const kafka_config_t *cfg, const char *key, const char *value,
                        outbox_diag_t *d)
{
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        if (strcmp(pinned[i].name, key) != 0)
            continue;
        for (size_t j = 0; j < 3 && pinned[i].allowed[j]; j++)
            if (strcmp(pinned[i].allowed[j], value) == 0)
                return OUTBOX_OK;
        return cfg_error(d, cfg, "%s may not be set to %s here: %s", key,
                         outbox_uri_secret_key(key) ? "***" : value, pinned[i].why);
    }
    return OUTBOX_OK;
}

int outbox_kafka_config_parse(const outbox_uri_t *uri, kafka_config_t *cfg, outbox_diag_t *d)
{
    memset(cfg, 0, sizeof *cfg);
    outbox_uri_show(uri, cfg->shown, sizeof cfg->shown);
    cfg->timeout_ms = 30000;
    cfg->partitions = 3;
    cfg->replication = 1;

    if (uri->host == NULL || uri->host[0] == '\0') {
        cfg_error(d, cfg, "no broker: write kafka://host:port/topic");
        return OUTBOX_EINVAL;
    }
    outbox_buf_t b;
    outbox_buf_init(&b, H);
    if (strchr(uri->host, ',') != NULL) {
        /* kafka://k1:9092,k2:9092/...: the host holds the list, each as
         * librdkafka reads it (a missing port is 9092). */
        outbox_buf_puts(&b, uri->host);
    } else {
        int v6 = strchr(uri->host, ':') != NULL;
        outbox_buf_printf(&b, "%s%s%s:%d", v6 ? "[" : "", uri->host, v6 ? "]" : "",
                          uri->port > 0 ? uri->port : 9092);
    }
    const char *path = uri->path ? uri->path : "";
    cfg->topic_tpl = outbox_kit_strdup(H, path[0] == '/' ? path + 1 : path);
    int rc = OUTBOX_OK;
    if (uri->user != NULL && add_param(cfg, "sasl.username", uri->user, 0) != 0)
        rc = OUTBOX_ENOMEM;
    if (uri->password != NULL && add_param(cfg, "sasl.password", uri->password, 1) != 0)
        rc = OUTBOX_ENOMEM;
    cfg->has_creds = uri->user != NULL || uri->password != NULL;

    for (size_t i = 0; rc == OUTBOX_OK && i < uri->n_params; i++) {
        const char *key = uri->params[i].key, *value = uri->params[i].value ? uri->params[i].value : "";
        int secret = outbox_uri_secret_key(key), from_env = 0;
        size_t vl = strlen(value);
        if (vl > 3 && value[0] == '$' && value[1] == '{' && value[vl - 1] == '}') {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(vl - 3), value + 2);
            const char *env = getenv(name);
            if (env == NULL) {
                rc = cfg_error(d, cfg, "%s: environment variable %s is not set", key, name);
                break;
            }
            value = env;
            from_env = 1;
        }
        if (strcmp(key, "timeout") == 0) {
            if (parse_duration_ms(value, &cfg->timeout_ms) != 0)
                rc = cfg_error(d, cfg, "timeout=%s is not a duration from 100ms to 60m (e.g. 30s, 500ms, 2m)",
                               from_env ? "***" : value);
        } else if (strcmp(key, "partitions") == 0) {
            if (parse_int(value, 1, 100000, &cfg->partitions) != 0)
                rc = cfg_error(d, cfg, "partitions=%s is not a number from 1 to 100000",
                               from_env ? "***" : value);
        } else if (strcmp(key, "replication") == 0) {
            if (parse_int(value, 1, 1000, &cfg->replication) != 0)
                rc = cfg_error(d, cfg, "replication=%s is not a number from 1 to 1000",
                               from_env ? "***" : value);
        } else if (strcmp(key, "bootstrap.servers") == 0 || strcmp(key, "metadata.broker.list") == 0) {
            /* More brokers beside the one in the authority. */
            outbox_buf_printf(&b, ",%s", value);
        } else if ((rc = check_pinned(cfg, key, value, d)) == OUTBOX_OK) {
            if (add_param(cfg, key, value, secret || from_env) != 0)
                rc = OUTBOX_ENOMEM;
        }
    }
    cfg->brokers = outbox_buf_steal(&b);
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
    cfg->params = NULL;
    cfg->n_params = 0;
    cfg->brokers = cfg->topic_tpl = NULL;
}

void outbox_kafka_redact(const kafka_config_t *cfg, const char *in, char *out, size_t size)
{
    char text[1024];
    size_t w = 0;
    const char *s = in ? in : "";
    while (*s && w + 4 < sizeof text) {
        size_t hit = 0;
        for (size_t i = 0; i < cfg->n_params && !hit; i++) {
            const char *v = cfg->params[i].value;
            size_t n = strlen(v);
            if (!cfg->params[i].hidden || n == 0 || strncmp(s, v, n) != 0)
                continue;
            /* A short secret only where it stands as a word. */
            int alnum_before = s > in && ((s[-1] | 32) >= 'a' && (s[-1] | 32) <= 'z');
            int alnum_after = (s[n] | 32) >= 'a' && (s[n] | 32) <= 'z';
            if (n >= 4 || (!alnum_before && !alnum_after))
                hit = n;
        }
        if (hit) {
            memcpy(text + w, "***", 3);
            w += 3;
            s += hit;
        } else {
            text[w++] = *s++;
        }
    }
    text[w] = '\0';
    outbox_text_line(text, out, size);
}

/* librdkafka's log and error lines into the host's log, secrets masked.
 * The opaque is the sink handle for a producer, NULL for the reader. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    kafka_sink_t *k = rk ? rd_kafka_opaque(rk) : NULL;
    if (k == NULL)
        return;
    char line[400];
    outbox_kafka_redact(&k->cfg, buf, line, sizeof line);
    /* librdkafka speaks syslog levels. Its warning that the gapless
     * guarantee is experimental is the sink's own choice, not news. */
    int lvl = level <= 3 ? OUTBOX_LOG_WARN : level == 4 ? OUTBOX_LOG_INFO : OUTBOX_LOG_DEBUG;
    if (fac != NULL && strcmp(fac, "CONFWARN") == 0 && strstr(buf, "gapless") != NULL)
        lvl = OUTBOX_LOG_DEBUG;
    H->log(lvl, KAFKA_SINK_NAME, "librdkafka %s: %s", fac, line);
}

static int conf_set(rd_kafka_conf_t *conf, const kafka_config_t *cfg, const char *key,
                    const char *value, int hidden, outbox_diag_t *d)
{
    char err[512];
    rd_kafka_conf_res_t r = rd_kafka_conf_set(conf, key, value, err, sizeof err);
    if (r == RD_KAFKA_CONF_OK)
        return OUTBOX_OK;
    if (r == RD_KAFKA_CONF_UNKNOWN)
        return cfg_error(d, cfg, "%s is neither an option of the sink (timeout, partitions, "
                         "replication) nor a librdkafka property", key);
    if (hidden)
        return cfg_error(d, cfg, "librdkafka refuses the value of %s (not shown)", key);
    char shown[400];
    outbox_kafka_redact(cfg, err, shown, sizeof shown);
    return cfg_error(d, cfg, "%s", shown);
}

rd_kafka_conf_t *outbox_kafka_conf_new(const kafka_config_t *cfg, int producer, void *opaque,
                                       outbox_diag_t *d)
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
    rd_kafka_conf_set_opaque(conf, opaque);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    return conf;
}
