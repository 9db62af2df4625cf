/* The outbox command-line tool: reading the relay's configuration file.
 *
 * libyaml loads the file as one document of nodes, each with the line it
 * starts on; this file walks that tree, checks every key and value, and
 * copies what it keeps. Every problem is one line naming the file, the line
 * and what is wrong. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "cli.h"
#include "config.h"
#include "metrics.h"
#include "otlp.h"

typedef struct ctx {
    const char *path;
    yaml_document_t *doc;
    cli_config_t *c;
    char *err;
    size_t errlen;
    int failed;
} ctx_t;

static int problem(ctx_t *x, const yaml_node_t *at, const char *fmt, ...) OUTBOX_PRINTF(3, 4);

static int problem(ctx_t *x, const yaml_node_t *at, const char *fmt, ...)
{
    if (x->failed)
        return OUTBOX_EINVAL;
    x->failed = 1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (at)
        snprintf(x->err, x->errlen, "%s:%zu: %s", x->path, at->start_mark.line + 1, what);
    else
        snprintf(x->err, x->errlen, "%s: %s", x->path, what);
    return OUTBOX_EINVAL;
}

static int nomem(ctx_t *x)
{
    if (!x->failed)
        snprintf(x->err, x->errlen, "%s: out of memory", x->path);
    x->failed = 1;
    return OUTBOX_ENOMEM;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The scalar's text with ${NAME} replaced from the environment and $$ by $,
 * or NULL after a problem. */
static char *expand(ctx_t *x, const yaml_node_t *n, const char *what)
{
    const char *s = scalar(n);
    if (!s) {
        problem(x, n, "%s must be a single value, not a list or a mapping", what);
        return NULL;
    }
    size_t cap = strlen(s) + 1, len = 0;
    char *out = malloc(cap);
    if (!out) {
        nomem(x);
        return NULL;
    }
    for (const char *p = s; *p;) {
        const char *add = p;
        size_t addlen = 1;
        if (p[0] == '$' && p[1] == '$') {
            p += 2;
        } else if (p[0] == '$' && p[1] == '{') {
            const char *end = strchr(p + 2, '}');
            size_t nlen = end ? (size_t)(end - p - 2) : 0;
            char name[128];
            if (!end || nlen == 0 || nlen >= sizeof name) {
                problem(x, n, "%s: \"${\" starts no variable name that a \"}\" ends", what);
                free(out);
                return NULL;
            }
            memcpy(name, p + 2, nlen);
            name[nlen] = '\0';
            for (size_t i = 0; i < nlen; i++)
                if (!(name[i] == '_' || (name[i] >= 'A' && name[i] <= 'Z') ||
                      (name[i] >= 'a' && name[i] <= 'z') || (i > 0 && name[i] >= '0' && name[i] <= '9'))) {
                    problem(x, n, "%s: \"%s\" is not an environment variable name", what, name);
                    free(out);
                    return NULL;
                }
            add = getenv(name);
            if (!add) {
                problem(x, n, "%s: the environment variable %s is not set", what, name);
                free(out);
                return NULL;
            }
            addlen = strlen(add);
            p = end + 1;
        } else {
            p++;
        }
        if (len + addlen + 1 > cap) {
            size_t ncap = (len + addlen + 1) * 2;
            char *q = realloc(out, ncap);
            if (!q) {
                free(out);
                nomem(x);
                return NULL;
            }
            out = q;
            cap = ncap;
        }
        memcpy(out + len, add, addlen);
        len += addlen;
    }
    out[len] = '\0';
    return out;
}

static int want_mapping(ctx_t *x, const yaml_node_t *n, const char *what)
{
    if (n && n->type == YAML_MAPPING_NODE)
        return 1;
    problem(x, n, "%s must be a mapping of names to values", what);
    return 0;
}

/* Calls fn for each key/value pair of the mapping n. */
typedef int (*pair_fn)(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg);

static int each_pair(ctx_t *x, yaml_node_t *n, pair_fn fn, void *arg)
{
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        const char *key = scalar(k);
        if (!key || !key[0])
            return problem(x, k, "a key must be a plain name");
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
            const char *other = scalar(yaml_document_get_node(x->doc, q->key));
            if (other && strcmp(other, key) == 0)
                return problem(x, k, "\"%s\" is given twice", key);
        }
        int rc = fn(x, key, k, v, arg);
        if (rc != OUTBOX_OK)
            return rc;
    }
    return OUTBOX_OK;
}

/* A name of a store, sink or route: what a metric label and a log line can
 * carry as it is. */
static int name_ok(ctx_t *x, const yaml_node_t *k, const char *what, const char *name)
{
    size_t n = strlen(name);
    if (n > 64)
        return problem(x, k, "%s name \"%.64s...\" is longer than 64 characters", what, name);
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return problem(x, k, "%s name \"%s\" may hold only letters, digits, '_', '-' and '.'",
                           what, name);
    }
    return OUTBOX_OK;
}

static int uri_ok(ctx_t *x, const yaml_node_t *v, const char *what, const char *uri)
{
    if (!uri[0])
        return problem(x, v, "%s is empty", what);
    const char *colon = strchr(uri, ':');
    size_t n = colon ? (size_t)(colon - uri) : 0;
    int scheme = n > 0;
    for (size_t i = 0; scheme && i < n; i++) {
        char ch = uri[i];
        scheme = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (i > 0 && ((ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || ch == '.'));
    }
    if (!scheme) {
        char shown[256];
        outbox_uri_mask(uri, shown, sizeof shown);
        return problem(x, v, "%s \"%s\" has no scheme (such as sqlite: or kafka:)", what, shown);
    }
    return OUTBOX_OK;
}

/* ------------------------------------------------------------- values */

static int get_uint(ctx_t *x, const yaml_node_t *v, const char *what, uint64_t min, uint64_t max,
                    uint64_t *out)
{
    char *text = expand(x, v, what);
    if (!text)
        return OUTBOX_EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long n = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
    int ok = end && *end == '\0' && errno == 0 && n >= min && n <= max;
    int rc = ok ? OUTBOX_OK
                : problem(x, v, "%s must be a whole number from %llu to %llu, not \"%s\"", what,
                          (unsigned long long)min, (unsigned long long)max, text);
    free(text);
    if (ok)
        *out = n;
    return rc;
}

static int get_duration(ctx_t *x, const yaml_node_t *v, const char *what, int allow_zero,
                        int64_t *us)
{
    char *text = expand(x, v, what);
    if (!text)
        return OUTBOX_EINVAL;
    outbox_diag_t d = {0};
    int rc = outbox_parse_duration(text, us, &d);
    if (rc != OUTBOX_OK)
        rc = problem(x, v, "%s: %s", what, d.message);
    else if (!allow_zero && *us == 0)
        rc = problem(x, v, "%s must be longer than 0", what);
    free(text);
    return rc;
}

static int get_bool(ctx_t *x, const yaml_node_t *v, const char *what, int *out)
{
    char *text = expand(x, v, what);
    if (!text)
        return OUTBOX_EINVAL;
    int rc = OUTBOX_OK;
    if (strcmp(text, "true") == 0 || strcmp(text, "yes") == 0)
        *out = 1;
    else if (strcmp(text, "false") == 0 || strcmp(text, "no") == 0)
        *out = 0;
    else
        rc = problem(x, v, "%s must be true or false, not \"%s\"", what, text);
    free(text);
    return rc;
}

static int get_string(ctx_t *x, const yaml_node_t *v, const char *what, char **out)
{
    free(*out);
    *out = expand(x, v, what);
    return *out ? OUTBOX_OK : OUTBOX_EINVAL;
}

/* ------------------------------------------------------------- stores */

static int store_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    cli_config_store_t *s = arg;
    char what[160];
    snprintf(what, sizeof what, "store %s: %s", s->name, key);
    if (strcmp(key, "uri") == 0) {
        int rc = get_string(x, v, what, &s->uri);
        return rc == OUTBOX_OK ? uri_ok(x, v, what, s->uri) : rc;
    }
    if (strcmp(key, "relation") == 0) {
        int rc = get_string(x, v, what, &s->relation);
        if (rc == OUTBOX_OK && !outbox_relation_valid(s->relation))
            rc = problem(x, v, "%s \"%s\" is not a table or collection name the library takes",
                         what, s->relation);
        return rc;
    }
    return problem(x, k, "store %s: unknown key \"%s\" (uri, relation)", s->name, key);
}

static int add_store(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    cli_config_t *c = x->c;
    if (name_ok(x, k, "store", key) != OUTBOX_OK || !want_mapping(x, v, "a store"))
        return OUTBOX_EINVAL;
    cli_config_store_t *more = realloc(c->stores, (c->n_stores + 1) * sizeof *more);
    if (!more)
        return nomem(x);
    c->stores = more;
    cli_config_store_t *s = &c->stores[c->n_stores++];
    memset(s, 0, sizeof *s);
    s->line = (int)k->start_mark.line + 1;
    if (!(s->name = strdup(key)))
        return nomem(x);
    int rc = each_pair(x, v, store_key, s);
    if (rc == OUTBOX_OK && !s->uri)
        rc = problem(x, k, "store %s has no uri", key);
    return rc;
}

/* -------------------------------------------------------------- sinks */

static int sink_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    cli_config_sink_t *s = arg;
    char what[160];
    snprintf(what, sizeof what, "sink %s: %s", s->name, key);
    if (strcmp(key, "uri") == 0) {
        int rc = get_string(x, v, what, &s->uri);
        return rc == OUTBOX_OK ? uri_ok(x, v, what, s->uri) : rc;
    }
    return problem(x, k, "sink %s: unknown key \"%s\" (uri)", s->name, key);
}

static int add_sink(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    cli_config_t *c = x->c;
    if (name_ok(x, k, "sink", key) != OUTBOX_OK || !want_mapping(x, v, "a sink"))
        return OUTBOX_EINVAL;
    cli_config_sink_t *more = realloc(c->sinks, (c->n_sinks + 1) * sizeof *more);
    if (!more)
        return nomem(x);
    c->sinks = more;
    cli_config_sink_t *s = &c->sinks[c->n_sinks++];
    memset(s, 0, sizeof *s);
    s->line = (int)k->start_mark.line + 1;
    if (!(s->name = strdup(key)))
        return nomem(x);
    int rc = each_pair(x, v, sink_key, s);
    if (rc == OUTBOX_OK && !s->uri)
        rc = problem(x, k, "sink %s has no uri", key);
    return rc;
}

/* ------------------------------------------------------------- routes */

typedef struct route_build {
    cli_config_route_t *r;
    char *store, *sink;
    const yaml_node_t *store_at, *sink_at;
} route_build_t;

static int route_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    route_build_t *b = arg;
    cli_config_route_t *r = b->r;
    char what[160];
    snprintf(what, sizeof what, "route %s: %s", r->name, key);
    uint64_t n = 0;
    int rc;
    if (strcmp(key, "store") == 0) {
        b->store_at = v;
        return get_string(x, v, what, &b->store);
    }
    if (strcmp(key, "sink") == 0) {
        b->sink_at = v;
        return get_string(x, v, what, &b->sink);
    }
    if (strcmp(key, "destination") == 0)
        return get_string(x, v, what, &r->destination);
    if (strcmp(key, "source") == 0)
        return get_string(x, v, what, &r->source);
    if (strcmp(key, "batch") == 0) {
        rc = get_uint(x, v, what, 1, CLI_RELAY_BATCH_MAX, &n);
        r->relay.batch = (size_t)n;
        return rc;
    }
    if (strcmp(key, "pipeline") == 0) {
        rc = get_uint(x, v, what, 1, CLI_RELAY_PIPELINE_MAX, &n);
        r->relay.pipeline = (size_t)n;
        return rc;
    }
    if (strcmp(key, "workers") == 0) {
        rc = get_uint(x, v, what, 1, CLI_RELAY_WORKERS_MAX, &n);
        r->workers = (size_t)n;
        return rc;
    }
    if (strcmp(key, "max_attempts") == 0) {
        rc = get_uint(x, v, what, 1, CLI_RELAY_ATTEMPTS_MAX, &n);
        r->relay.max_attempts = (int)n;
        return rc;
    }
    if (strcmp(key, "lease") == 0)
        return get_duration(x, v, what, 0, &r->relay.lease_us);
    if (strcmp(key, "lease_renewal") == 0) {
        int renew = 1;
        rc = get_bool(x, v, what, &renew);
        r->relay.no_lease_renewal = !renew;
        return rc;
    }
    if (strcmp(key, "poll") == 0)
        return get_duration(x, v, what, 0, &r->relay.poll_us);
    if (strcmp(key, "backoff_base") == 0)
        return get_duration(x, v, what, 1, &r->relay.backoff_base_us);
    if (strcmp(key, "backoff_cap") == 0)
        return get_duration(x, v, what, 0, &r->relay.backoff_cap_us);
    if (strcmp(key, "hlc") == 0)
        return get_bool(x, v, what, &r->relay.hlc_order);
    if (strcmp(key, "require_transaction") == 0)
        return get_bool(x, v, what, &r->require_transaction);
    if (strcmp(key, "retention") == 0)
        return get_duration(x, v, what, 0, &r->retention_us);
    if (strcmp(key, "purge_interval") == 0)
        return get_duration(x, v, what, 0, &r->purge_interval_us);
    return problem(x, k,
                   "route %s: unknown key \"%s\" (store, sink, destination, source, batch, "
                   "pipeline, workers, max_attempts, lease, lease_renewal, poll, backoff_base, backoff_cap, hlc, "
                   "require_transaction, retention, purge_interval)",
                   r->name, key);
}

static int find_named(ctx_t *x, const yaml_node_t *at, const char *route, const char *kind,
                      const char *name, size_t n, const char *(*name_of)(const cli_config_t *, size_t),
                      size_t *out)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name_of(x->c, i), name) == 0) {
            *out = i;
            return OUTBOX_OK;
        }
    return problem(x, at, "route %s: no %s is named \"%s\" under %ss", route, kind, name, kind);
}

static const char *store_name(const cli_config_t *c, size_t i)
{
    return c->stores[i].name;
}

static const char *sink_name(const cli_config_t *c, size_t i)
{
    return c->sinks[i].name;
}

static int add_route(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    cli_config_t *c = x->c;
    if (name_ok(x, k, "route", key) != OUTBOX_OK || !want_mapping(x, v, "a route"))
        return OUTBOX_EINVAL;
    cli_config_route_t *more = realloc(c->routes, (c->n_routes + 1) * sizeof *more);
    if (!more)
        return nomem(x);
    c->routes = more;
    cli_config_route_t *r = &c->routes[c->n_routes++];
    memset(r, 0, sizeof *r);
    outbox_relay_config_init(&r->relay);
    r->workers = 1;
    r->purge_interval_us = CONFIG_PURGE_INTERVAL_US;
    r->line = (int)k->start_mark.line + 1;
    if (!(r->name = strdup(key)))
        return nomem(x);
    route_build_t b = {.r = r};
    int rc = each_pair(x, v, route_key, &b);
    if (rc == OUTBOX_OK && !b.store)
        rc = problem(x, k, "route %s has no store", key);
    if (rc == OUTBOX_OK && !b.sink)
        rc = problem(x, k, "route %s has no sink", key);
    if (rc == OUTBOX_OK)
        rc = find_named(x, b.store_at, key, "store", b.store, c->n_stores, store_name, &r->store);
    if (rc == OUTBOX_OK)
        rc = find_named(x, b.sink_at, key, "sink", b.sink, c->n_sinks, sink_name, &r->sink);
    if (rc == OUTBOX_OK && r->purge_interval_us != CONFIG_PURGE_INTERVAL_US && r->retention_us == 0)
        rc = problem(x, k, "route %s: purge_interval without retention (retention says which "
                     "published rows to purge)", key);
    if (rc == OUTBOX_OK && r->relay.backoff_cap_us < r->relay.backoff_base_us)
        r->relay.backoff_cap_us = r->relay.backoff_base_us;
    free(b.store);
    free(b.sink);
    return rc;
}

/* ------------------------------------------------------------ the file */

/* ------------------------------------------------------------ metrics */

static int metrics_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    if (strcmp(key, "listen") == 0) {
        int rc = get_string(x, v, "metrics: listen", &x->c->metrics_listen);
        char why[256];
        if (rc == OUTBOX_OK && cli_metrics_listen_check(x->c->metrics_listen, why, sizeof why) != 0)
            rc = problem(x, v, "metrics: listen %s", why);
        return rc;
    }
    if (strcmp(key, "stats_interval") == 0)
        return get_duration(x, v, "metrics: stats_interval", 0, &x->c->metrics_stats_interval_us);
    if (strcmp(key, "tls_cert") == 0)
        return get_string(x, v, "metrics: tls_cert", &x->c->metrics_tls_cert);
    if (strcmp(key, "tls_key") == 0)
        return get_string(x, v, "metrics: tls_key", &x->c->metrics_tls_key);
    if (strcmp(key, "user") == 0)
        return get_string(x, v, "metrics: user", &x->c->metrics_user);
    if (strcmp(key, "password") == 0) {
        int rc = get_string(x, v, "metrics: password", &x->c->metrics_password);
        if (rc == OUTBOX_OK)
            tool_note_secret(x->c->metrics_password);
        return rc;
    }
    return problem(x, k, "metrics: unknown key \"%s\" (listen, stats_interval, tls_cert, tls_key, user, password)",
                   key);
}

static int read_metrics(ctx_t *x, yaml_node_t *v)
{
    x->c->metrics_stats_interval_us = 5000000;
    if (!want_mapping(x, v, "metrics"))
        return OUTBOX_EINVAL;
    int rc = each_pair(x, v, metrics_key, NULL);
    if (rc == OUTBOX_OK && x->c->metrics_listen == NULL)
        rc = problem(x, v, "metrics: listen is required (HOST:PORT)");
    if (rc == OUTBOX_OK) {
        cli_metrics_opts_t o = {.listen = x->c->metrics_listen,
                                .tls_cert = x->c->metrics_tls_cert,
                                .tls_key = x->c->metrics_tls_key,
                                .user = x->c->metrics_user,
                                .password = x->c->metrics_password};
        char why[512];
        /* As outbox relay takes it: the environment's over the file's. */
        if (getenv("OUTBOX_METRICS_PASSWORD") != NULL)
            o.password = getenv("OUTBOX_METRICS_PASSWORD");
        if (x->c->metrics_password != NULL && x->c->metrics_user == NULL)
            rc = problem(x, v, "metrics: a password needs a user");
        else if (cli_metrics_opts_check(&o, why, sizeof why) != 0)
            rc = problem(x, v, "metrics: %s", why);
    }
    return rc;
}

/* ------------------------------------------------------------ tracing */

static int tracing_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    cli_config_t *c = x->c;
    char why[600];
    if (strcmp(key, "otlp_endpoint") == 0) {
        int rc = get_string(x, v, "tracing: otlp_endpoint", &c->tracing_endpoint);
        if (rc == OUTBOX_OK) {
            tool_note_secrets(c->tracing_endpoint);
            if (otlp_endpoint_check(c->tracing_endpoint, why, sizeof why) != 0)
                rc = problem(x, v, "tracing: otlp_endpoint %s", why);
        }
        return rc;
    }
    if (strcmp(key, "sample") == 0) {
        char *text = expand(x, v, "tracing: sample");
        if (!text)
            return OUTBOX_EINVAL;
        int rc = otlp_sample_parse(text, &c->tracing_sample, why, sizeof why) == 0
                     ? OUTBOX_OK
                     : problem(x, v, "tracing: sample %s", why);
        c->tracing_sample_given = rc == OUTBOX_OK;
        free(text);
        return rc;
    }
    if (strcmp(key, "service_name") == 0) {
        int rc = get_string(x, v, "tracing: service_name", &c->tracing_service_name);
        if (rc == OUTBOX_OK && otlp_service_name_check(c->tracing_service_name, why, sizeof why) != 0)
            rc = problem(x, v, "tracing: service_name: %s", why);
        return rc;
    }
    return problem(x, k, "tracing: unknown key \"%s\" (otlp_endpoint, sample, service_name)", key);
}

static int read_tracing(ctx_t *x, yaml_node_t *v)
{
    if (!want_mapping(x, v, "tracing"))
        return OUTBOX_EINVAL;
    int rc = each_pair(x, v, tracing_key, NULL);
    if (rc == OUTBOX_OK && x->c->tracing_endpoint == NULL)
        rc = problem(x, v, "tracing: otlp_endpoint is required (the collector's OTLP/HTTP URL, such as "
                           "http://127.0.0.1:4318)");
    return rc;
}

static int top_key(ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v, void *arg)
{
    (void)arg;
    if (strcmp(key, "metrics") == 0)
        return read_metrics(x, v);
    if (strcmp(key, "tracing") == 0)
        return read_tracing(x, v);
    if (strcmp(key, "node_key") == 0)
        return get_string(x, v, "node_key", &x->c->node_key);
    if (strcmp(key, "checkpoint_table") == 0) {
        int rc = get_string(x, v, "checkpoint_table", &x->c->checkpoint_table);
        if (rc == OUTBOX_OK && !outbox_relation_valid(x->c->checkpoint_table))
            rc = problem(x, v, "checkpoint_table \"%s\" is not a table name the library takes",
                         x->c->checkpoint_table);
        return rc;
    }
    if (strcmp(key, "stores") == 0 || strcmp(key, "sinks") == 0 || strcmp(key, "routes") == 0)
        return OUTBOX_OK; /* read in order below */
    return problem(x, k,
                   "unknown key \"%s\" (node_key, checkpoint_table, stores, sinks, routes, metrics, "
                   "tracing)", key);
}

/* The value of a top-level section, or NULL. */
static yaml_node_t *section(ctx_t *x, yaml_node_t *root, const char *name, yaml_node_t **key)
{
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        const char *s = scalar(k);
        if (s && strcmp(s, name) == 0) {
            *key = k;
            return yaml_document_get_node(x->doc, p->value);
        }
    }
    *key = NULL;
    return NULL;
}

static int read_section(ctx_t *x, yaml_node_t *root, const char *name, pair_fn add, int required)
{
    yaml_node_t *k = NULL, *v = section(x, root, name, &k);
    if (!v)
        return required ? problem(x, NULL, "no %s: the file must declare at least one", name)
                        : OUTBOX_OK;
    char what[64];
    snprintf(what, sizeof what, "%s", name);
    if (!want_mapping(x, v, what))
        return OUTBOX_EINVAL;
    if (v->data.mapping.pairs.start == v->data.mapping.pairs.top)
        return problem(x, k, "%s is empty: declare at least one", name);
    return each_pair(x, v, add, NULL);
}

void cli_config_free(cli_config_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_stores; i++) {
        free(c->stores[i].name);
        free(c->stores[i].uri);
        free(c->stores[i].relation);
    }
    for (size_t i = 0; i < c->n_sinks; i++) {
        free(c->sinks[i].name);
        free(c->sinks[i].uri);
    }
    for (size_t i = 0; i < c->n_routes; i++) {
        free(c->routes[i].name);
        free(c->routes[i].source);
        free(c->routes[i].destination);
    }
    free(c->stores);
    free(c->sinks);
    free(c->routes);
    free(c->node_key);
    free(c->checkpoint_table);
    free(c->metrics_listen);
    free(c->metrics_tls_cert);
    free(c->metrics_tls_key);
    free(c->metrics_user);
    free(c->metrics_password);
    free(c->tracing_endpoint);
    free(c->tracing_service_name);
    free(c->path);
    memset(c, 0, sizeof *c);
}

int cli_config_load(const char *path, cli_config_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->tracing_sample = 1.0;
    ctx_t x = {.path = path, .c = out, .err = err, .errlen = errlen};
    FILE *f = fopen(path, "rb");
    if (!f)
        return problem(&x, NULL, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return problem(&x, NULL, "not a regular file");
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return nomem(&x);
    }
    yaml_parser_set_input_file(&parser, f);
    int loaded = yaml_parser_load(&parser, &doc);
    if (!loaded) {
        int rc = parser.error == YAML_MEMORY_ERROR
                     ? nomem(&x)
                     : (snprintf(err, errlen, "%s:%zu: %s", path, parser.problem_mark.line + 1,
                                 parser.problem ? parser.problem : "not YAML"),
                        OUTBOX_EINVAL);
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    x.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = OUTBOX_OK;
    if (!root)
        rc = problem(&x, NULL, "the file is empty");
    else if (!want_mapping(&x, root, "the file"))
        rc = OUTBOX_EINVAL;
    if (rc == OUTBOX_OK)
        rc = each_pair(&x, root, top_key, NULL);
    if (rc == OUTBOX_OK)
        rc = read_section(&x, root, "stores", add_store, 1);
    if (rc == OUTBOX_OK)
        rc = read_section(&x, root, "sinks", add_sink, 1);
    if (rc == OUTBOX_OK)
        rc = read_section(&x, root, "routes", add_route, 1);
    if (rc == OUTBOX_OK && !(out->path = strdup(path)))
        rc = nomem(&x);
    /* The relay reads these through pointers into the route. */
    for (size_t i = 0; rc == OUTBOX_OK && i < out->n_routes; i++) {
        cli_config_route_t *r = &out->routes[i];
        r->relay.route = r->name;
        r->relay.source = r->source;
        if (r->destination)
            r->relay.destination = r->destination;
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    if (rc != OUTBOX_OK)
        cli_config_free(out);
    return rc;
}
