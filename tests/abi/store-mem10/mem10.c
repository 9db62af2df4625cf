/* store-mem10, top floor: the descriptor, the vtable, the URI, open/close
 * and the schema entries (which tables a store has is what open checks).
 * Nothing else in the driver calls into this file.
 *
 * URIs: mem10:NAME or mem10://NAME. Every handle opened with the same NAME
 * in one process shares one store; its tables outlive the handles, as in a
 * database, until schema drop or the end of the process. A relation is a
 * table of its own within the store, created by schema apply.
 *
 * Built against tests/abi/v1_0/include only (see mem10_int.h): it declares
 * ABI 1.0 because that is what its headers are, and tests/abi checks that
 * the current host still loads it and that it passes the conformance
 * battery. It has no native transactions (no NATIVE_TX, no
 * native_begin/native_end) and no push wake-up (wait is NULL: the relay
 * polls).
 */
#include <stdio.h>
#include <string.h>

#include "mem10_int.h"

#define H outbox_mem10_host

#define MEM10_CAPS (OUTBOX_STORE_CAP_TRANSACTIONS | OUTBOX_STORE_CAP_CONCURRENT)
#define MEM10_STORE_NAME_MAX 64

/* ------------------------------------------------------- init, URI, open */

static int mem10_init(const outbox_host_t *host, outbox_diag_t *d)
{
    /* Without a complete table there is no host->error to say so with. */
    if (host == NULL ||
        host->struct_size < offsetof(outbox_host_t, now_us) + sizeof host->now_us ||
        host->alloc == NULL || host->realloc == NULL || host->free == NULL ||
        host->error == NULL || host->now_us == NULL) {
        if (d != NULL) {
            d->code = OUTBOX_EABI;
            snprintf(d->message, sizeof d->message,
                     "mem10: the host's service table is incomplete (expected ABI 1.0's)");
        }
        return OUTBOX_EABI;
    }
    outbox_mem10_host = host;
    return OUTBOX_OK;
}

static int name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

/* The store NAME of mem10:NAME or mem10://NAME. */
static int store_name(const outbox_uri_t *u, const char **name, outbox_diag_t *d)
{
    static const char expected[] = "expected mem10:NAME or mem10://NAME";
    if (u == NULL || u->scheme == NULL || strcmp(u->scheme, MEM10_NAME) != 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: not a mem10 URI: %s", expected);
    if (u->user != NULL || u->password != NULL || u->port != 0)
        return H->error(d, OUTBOX_EINVAL,
                        "mem10: a mem10 URI takes no user, password or port: %s", expected);
    if (u->n_params > 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: unknown URI parameter \"%.64s\" (mem10 takes none)",
                        u->params[0].key ? u->params[0].key : "");
    if (u->host != NULL && u->path != NULL && u->path[0] != '\0')
        return H->error(d, OUTBOX_EINVAL, "mem10: unexpected path after the store name: %s",
                        expected);
    const char *n = u->host != NULL ? u->host : u->path;
    size_t len = 0;
    while (n != NULL && name_char(n[len]))
        len++;
    if (n == NULL || len == 0 || n[len] != '\0' || len > MEM10_STORE_NAME_MAX)
        return H->error(d, OUTBOX_EINVAL,
                        "mem10: the store name must be 1-%d letters, digits, '_', '-' or '.': %s",
                        MEM10_STORE_NAME_MAX, expected);
    *name = n;
    return OUTBOX_OK;
}

static void mem10_close(void *handle)
{
    mem10_handle_t *h = handle;
    if (h == NULL)
        return;
    if (h->store != NULL) {
        outbox_mem10_handle_reset(h);
        outbox_mem10_store_detach(h->store);
    }
    H->free(h->relation);
    H->free(h->checkpoint_relation);
    H->free(h);
}

static int mem10_open(const outbox_store_open_t *params, void **handle, outbox_diag_t *d)
{
    if (handle == NULL)
        return H->error(d, OUTBOX_EINVAL, "mem10: no handle pointer given");
    *handle = NULL;
    if (params == NULL || params->struct_size < sizeof *params)
        return H->error(d, OUTBOX_EINVAL, "mem10: open parameters: struct_size not set");
    const char *name = NULL;
    int rc = store_name(params->uri, &name, d);
    if (rc != OUTBOX_OK)
        return rc;
    if (!outbox_mem10_ident_valid(params->relation))
        return H->error(d, OUTBOX_EINVAL, "mem10: invalid relation name \"%.64s\"",
                        params->relation ? params->relation : "");
    if (params->checkpoint_relation != NULL &&
        !outbox_mem10_ident_valid(params->checkpoint_relation))
        return H->error(d, OUTBOX_EINVAL, "mem10: invalid checkpoint relation name \"%.64s\"",
                        params->checkpoint_relation);

    mem10_handle_t *h = H->alloc(sizeof *h);
    if (h == NULL)
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    memset(h, 0, sizeof *h);
    h->relation = outbox_mem10_strdup(params->relation);
    h->checkpoint_relation = outbox_mem10_strdup(params->checkpoint_relation);
    if (h->relation == NULL ||
        (params->checkpoint_relation != NULL && h->checkpoint_relation == NULL))
        rc = H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    if (rc == OUTBOX_OK)
        rc = outbox_mem10_store_attach(name, &h->store, d);
    /* Schema apply and check run on handles opened before the table exists. */
    if (rc == OUTBOX_OK)
        rc = outbox_mem10_detect(h, !(params->flags & OUTBOX_OPEN_SCHEMA_ONLY), d);
    if (rc != OUTBOX_OK) {
        mem10_close(h);
        return rc;
    }
    *handle = h;
    return OUTBOX_OK;
}

static uint32_t mem10_capabilities(void *handle)
{
    const mem10_handle_t *h = handle;
    return MEM10_CAPS | (h != NULL ? h->caps : 0);
}

/* ---------------------------------------------------------------- schema */

static int schema_opts_ok(const outbox_schema_opts_t *o, outbox_diag_t *d)
{
    if (o == NULL || o->struct_size < sizeof *o)
        return H->error(d, OUTBOX_EINVAL, "mem10: schema options: struct_size not set");
    if (!outbox_mem10_ident_valid(o->relation))
        return H->error(d, OUTBOX_EINVAL, "mem10: invalid relation name \"%.64s\"",
                        o->relation ? o->relation : "");
    if (!(o->flags & OUTBOX_SCHEMA_CHECKPOINT))
        return OUTBOX_OK;
    if (!outbox_mem10_ident_valid(o->checkpoint_relation))
        return H->error(d, OUTBOX_EINVAL, "mem10: invalid checkpoint relation name \"%.64s\"",
                        o->checkpoint_relation ? o->checkpoint_relation : "");
    if (strcmp(o->relation, o->checkpoint_relation) == 0)
        return H->error(d, OUTBOX_EINVAL, "mem10: the checkpoint relation must differ from %s",
                        o->relation);
    return OUTBOX_OK;
}

static int mem10_schema_ddl(const outbox_schema_opts_t *opts, char **out, outbox_diag_t *d)
{
    *out = NULL;
    int rc = schema_opts_ok(opts, d);
    if (rc != OUTBOX_OK)
        return rc;
    uint32_t f = opts->flags;
    mem10_buf_t b = {0};
    outbox_mem10_buf_add(&b,
        "-- mem10: in-memory tables of one named store (mem10:NAME), shared by every\n"
        "-- handle of that name in this process and gone when it exits. There is no\n"
        "-- SQL: schema apply creates what this describes.\n"
        "TABLE %s (id, outbox_route, event_id, event_type, tenant_id, execution_id,\n"
        "    correlation_id, causation_id, occurred_at, payload, status, created_at,\n"
        "    published_at, processing_at, last_error, attempts, available_at,\n"
        "    ordering_key%s%s)\n"
        "  UNIQUE (id), UNIQUE (outbox_route, event_id)\n"
        "  INDEX claim order per outbox_route: created_at, id\n",
        opts->relation, f & OUTBOX_SCHEMA_TRACEPARENT ? ", traceparent" : "",
        f & OUTBOX_SCHEMA_HLC ? ", hlc" : "");
    if (f & OUTBOX_SCHEMA_HLC)
        outbox_mem10_buf_add(&b, "  INDEX claim order per outbox_route: hlc NULLS LAST, created_at, id\n");
    if (f & OUTBOX_SCHEMA_CHECKPOINT)
        outbox_mem10_buf_add(&b, "CHECKPOINT TABLE %s (node_key UNIQUE, hlc advanced only by max)\n",
                             opts->checkpoint_relation);
    if (b.failed) {
        H->free(b.p);
        return H->error(d, OUTBOX_ENOMEM, "mem10: out of memory");
    }
    *out = b.p;
    return OUTBOX_OK;
}

static int mem10_schema_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    int rc = schema_opts_ok(opts, d);
    if (rc != OUTBOX_OK)
        return rc;
    mem10_store_t *s = h->store;
    int want_ckpt = (opts->flags & OUTBOX_SCHEMA_CHECKPOINT) != 0;
    pthread_mutex_lock(&s->mu);
    mem10_table_t *t = outbox_mem10_table_find(s, opts->relation);
    mem10_table_t *c = want_ckpt ? outbox_mem10_table_find(s, opts->checkpoint_relation) : NULL;
    mem10_table_t *new_t = NULL, *new_c = NULL;
    if (t != NULL && t->checkpoint)
        rc = H->error(d, OUTBOX_ESCHEMA, "mem10: %s exists and is a checkpoint table", t->name);
    else if (c != NULL && !c->checkpoint)
        rc = H->error(d, OUTBOX_ESCHEMA, "mem10: %s exists and is an outbox table", c->name);
    if (rc == OUTBOX_OK && t == NULL &&
        (new_t = outbox_mem10_table_new(opts->relation, 0, s->generations + 1)) == NULL)
        rc = OUTBOX_ENOMEM;
    if (rc == OUTBOX_OK && want_ckpt && c == NULL &&
        (new_c = outbox_mem10_table_new(opts->checkpoint_relation, 1, s->generations + 2)) == NULL)
        rc = OUTBOX_ENOMEM;
    mem10_table_t *target = t != NULL ? t : new_t;
    if (rc == OUTBOX_OK && (opts->flags & OUTBOX_SCHEMA_HLC))
        rc = outbox_mem10_table_add_hlc(target);
    if (rc == OUTBOX_OK) {
        if (opts->flags & OUTBOX_SCHEMA_TRACEPARENT)
            target->has_traceparent = 1;
        s->generations += 2;
        if (new_t != NULL) {
            new_t->next = s->tables;
            s->tables = new_t;
        }
        if (new_c != NULL) {
            new_c->next = s->tables;
            s->tables = new_c;
        }
    } else {
        outbox_mem10_table_free(new_t);
        outbox_mem10_table_free(new_c);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == OUTBOX_ENOMEM)
        return H->error(d, rc, "mem10: out of memory");
    if (rc != OUTBOX_OK)
        return rc;
    return outbox_mem10_detect(h, 0, d); /* the handle sees what it created */
}

static int mem10_schema_drop(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    int rc = schema_opts_ok(opts, d);
    if (rc != OUTBOX_OK)
        return rc;
    mem10_store_t *s = h->store;
    pthread_mutex_lock(&s->mu);
    mem10_table_t *t = outbox_mem10_table_find(s, opts->relation);
    mem10_table_t *c = opts->flags & OUTBOX_SCHEMA_CHECKPOINT
                           ? outbox_mem10_table_find(s, opts->checkpoint_relation) : NULL;
    if (t != NULL && t->checkpoint)
        rc = H->error(d, OUTBOX_ESCHEMA, "mem10: %s is a checkpoint table, not an outbox table",
                      t->name);
    else if (c != NULL && !c->checkpoint)
        rc = H->error(d, OUTBOX_ESCHEMA, "mem10: %s is an outbox table, not a checkpoint table",
                      c->name);
    if (rc == OUTBOX_OK && t != NULL)
        outbox_mem10_table_drop(s, t);
    if (rc == OUTBOX_OK && c != NULL)
        outbox_mem10_table_drop(s, c);
    pthread_mutex_unlock(&s->mu);
    return rc != OUTBOX_OK ? rc : outbox_mem10_detect(h, 0, d);
}

enum { MAX_PROBLEMS = 24, PROBLEM_LEN = 200 };

static int mem10_schema_check(void *handle, const outbox_schema_opts_t *opts,
                              outbox_schema_report_fn report, void *ctx, size_t *problems,
                              outbox_diag_t *d)
{
    mem10_handle_t *h = handle;
    *problems = 0;
    int rc = schema_opts_ok(opts, d);
    if (rc != OUTBOX_OK)
        return rc;
    /* Found under the lock, reported after it: the callback is the host's. */
    char found[MAX_PROBLEMS][PROBLEM_LEN];
    size_t n = 0;
    const char *rel = opts->relation;
    pthread_mutex_lock(&h->store->mu);
    const mem10_table_t *t = outbox_mem10_table_find(h->store, rel);
    if (t == NULL) {
        snprintf(found[n++], PROBLEM_LEN, "missing table %s", rel);
    } else if (t->checkpoint) {
        /* It holds node keys and marks: every outbox column is missing. */
        static const char *const columns[] = {
            "id", "outbox_route", "event_id", "event_type", "occurred_at", "payload",
            "status", "created_at", "attempts", "ordering_key", "tenant_id", "execution_id",
            "correlation_id", "causation_id", "published_at", "processing_at", "last_error",
            "available_at"};
        for (size_t i = 0; i < sizeof columns / sizeof columns[0] && n < MAX_PROBLEMS; i++)
            snprintf(found[n++], PROBLEM_LEN, "missing column %s on %s (a checkpoint table)",
                     columns[i], rel);
    } else {
        if ((opts->flags & OUTBOX_SCHEMA_HLC) && !t->has_hlc) {
            snprintf(found[n++], PROBLEM_LEN, "missing column hlc on %s", rel);
            snprintf(found[n++], PROBLEM_LEN,
                     "missing index on %s: the claim order (hlc NULLS LAST, created_at, id)", rel);
        }
        if ((opts->flags & OUTBOX_SCHEMA_TRACEPARENT) && !t->has_traceparent)
            snprintf(found[n++], PROBLEM_LEN, "missing column traceparent on %s", rel);
    }
    if (opts->flags & OUTBOX_SCHEMA_CHECKPOINT) {
        const mem10_table_t *c = outbox_mem10_table_find(h->store, opts->checkpoint_relation);
        if (c == NULL || !c->checkpoint)
            snprintf(found[n++], PROBLEM_LEN, "missing checkpoint table %s",
                     opts->checkpoint_relation);
    }
    pthread_mutex_unlock(&h->store->mu);
    for (size_t i = 0; i < n; i++)
        report(ctx, found[i]);
    *problems = n;
    return OUTBOX_OK;
}

/* ------------------------------------------------------------ descriptor */

static const outbox_store_vtable_t mem10_vtable = {
    .struct_size = sizeof(outbox_store_vtable_t), /* the 1.0 size: the host reads no further */
    .open = mem10_open,
    .close = mem10_close,
    .capabilities = mem10_capabilities,
    .schema_ddl = mem10_schema_ddl,
    .schema_apply = mem10_schema_apply,
    .schema_check = mem10_schema_check,
    .begin = outbox_mem10_begin,
    .commit = outbox_mem10_commit,
    .rollback = outbox_mem10_rollback,
    .stage = outbox_mem10_stage,
    .claim = outbox_mem10_claim,
    .settle = outbox_mem10_settle,
    .checkpoint_advance = outbox_mem10_checkpoint_advance,
    .checkpoint_recover = outbox_mem10_checkpoint_recover,
    .wait = NULL,
    .stats = outbox_mem10_stats,
    .replay = outbox_mem10_replay,
    .purge = outbox_mem10_purge,
    .schema_drop = mem10_schema_drop,
    .native_begin = NULL,
    .native_end = NULL,
};

static const char *const mem10_schemes[] = {MEM10_NAME, NULL};

static const outbox_driver_t mem10_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = 1,
    .abi_minor = 0,
    .kind = OUTBOX_DRIVER_STORE,
    .name = MEM10_NAME,
    .version = "1.0.0",
    .schemes = mem10_schemes,
    .capabilities = MEM10_CAPS,
    .init = mem10_init,
    .store = &mem10_vtable,
    .sink = NULL,
};

OUTBOX_DRIVER_ENTRY(mem10_descriptor)
