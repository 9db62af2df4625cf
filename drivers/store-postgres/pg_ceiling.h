/* The PostgreSQL driver's benchmark ceiling (ceiling.c): its descriptor
 * and the pgbench script it runs, for outbox-bench and the ceiling's test.
 * Part of the source tree, never installed.
 *
 * Both functions return a script for pgbench -M prepared with -D route=
 * and -D lease= (microseconds), or NULL (out of memory, a relation that is
 * no usable name, a store that cannot be opened: err says which); the
 * caller frees it with free(). */
#ifndef OUTBOX_STORE_PG_CEILING_H
#define OUTBOX_STORE_PG_CEILING_H

#include <stddef.h>

#include "outbox/ceiling.h"

extern const outbox_store_ceiling_t outbox_ceiling_postgres;

/* The script for relation as outbox-bench creates it (the shipped schema's
 * table, no hlc or traceparent column) at batch, without a server:
 * outbox-bench --pgbench-script. reference: the plain claim + mark instead
 * of the driver's. Registers the ceiling's driver, whose builders it runs. */
char *outbox_pg_ceiling_script(const char *relation, long batch, int reference);

/* The script the ceiling's drain runs on relation of the store at uri: the
 * driver opens the table, and its claim takes the shape and columns the
 * driver chose for it, as a relay's would. The ceiling's driver must be
 * registered (outbox_driver_register(outbox_ceiling_postgres.driver())). */
char *outbox_pg_ceiling_store_script(const char *uri, const char *relation, long batch,
                                     int reference, char *err, size_t errlen);

#endif
