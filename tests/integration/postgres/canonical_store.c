/* The PostgreSQL store driver with one difference, for running the
 * conformance battery on tables that have only the canonical indexes:
 * its schema apply creates the shipped schema and then drops the indexes
 * the canonical table does not have (the pending, key and processing
 * indexes and the hlc twins of the first two), so every case's relation
 * is a table as SPEC section 2 writes it and every claim takes the shape
 * built for such a table.
 *
 * The module links the real driver's sources statically (built with
 * -DOUTBOX_DRIVER_STATIC=postgres_base) and exports a copy of its
 * descriptor under another name, never chosen by URI scheme: the battery
 * loads it by path. Only schema apply differs; every other entry, claim
 * included, is the driver's own. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pg_ops.h"

const outbox_driver_t *outbox_driver_entry_postgres_base(void);

static outbox_driver_t descriptor;
static outbox_store_vtable_t vtable;

static const char *const extra_indexes[] = {
    "pending_idx", "key_idx", "processing_idx", "pending_hlc_idx", "key_hlc_idx", NULL,
};

static int drop_extra_indexes(pg_handle_t *h, const outbox_kit_relname_t *rel, outbox_diag_t *d)
{
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, outbox_pg_host);
    outbox_kit_buf_puts(&b, "SET client_min_messages = warning; DROP INDEX IF EXISTS ");
    for (size_t i = 0; extra_indexes[i]; i++) {
        char name[128];
        int len = snprintf(name, sizeof name, "%s_%s", rel->table, extra_indexes[i]);
        if (len < 0 || len > 63) {
            outbox_kit_buf_free(&b);
            return outbox_pg_fail(d, OUTBOX_EINVAL,
                                  "%s: too long for this test driver's index names", rel->table);
        }
        if (i)
            outbox_kit_buf_puts(&b, ", ");
        if (rel->schema[0]) {
            outbox_kit_buf_ident(&b, rel->schema, '"');
            outbox_kit_buf_putc(&b, '.');
        }
        outbox_kit_buf_ident(&b, name, '"');
    }
    outbox_kit_buf_puts(&b, "; RESET client_min_messages");
    int rc = b.failed ? outbox_pg_nomem(d) : outbox_pg_command(h, b.data, d, "dropping indexes");
    outbox_kit_buf_free(&b);
    return rc;
}

/* The real schema apply, then the extra indexes dropped and the handle's
 * statements rebuilt for what is left, as the driver does after its own
 * apply. */
static int canonical_apply(void *handle, const outbox_schema_opts_t *opts, outbox_diag_t *d)
{
    pg_handle_t *h = handle;
    int rc = outbox_driver_entry_postgres_base()->store->schema_apply(handle, opts, d);
    outbox_kit_relname_t rel = h->rel;
    if (rc == OUTBOX_OK && opts && opts->relation)
        rc = outbox_pg_relname(opts->relation, &rel, d);
    if (rc == OUTBOX_OK)
        rc = drop_extra_indexes(h, &rel, d);
    if (rc == OUTBOX_OK && h->prepared)
        rc = outbox_pg_command(h, "DEALLOCATE ALL", d, "schema apply");
    if (rc == OUTBOX_OK) {
        h->prepared = 0;
        rc = outbox_pg_detect(h, 0, d);
    }
    if (rc == OUTBOX_OK)
        rc = outbox_pg_rows_prepare_sql(h, d);
    return rc;
}

static void build(void)
{
    const outbox_driver_t *base = outbox_driver_entry_postgres_base();
    vtable = *base->store;
    vtable.schema_apply = canonical_apply;
    descriptor = *base;
    descriptor.name = "postgres-canonical";
    descriptor.schemes = NULL;
    descriptor.store = &vtable;
}

__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void);
__attribute__((visibility("default"))) const outbox_driver_t *outbox_driver_entry(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build);
    return &descriptor;
}
