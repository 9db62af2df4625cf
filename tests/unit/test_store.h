/* The unit tests' SQLite outbox: a fresh one in a temporary directory of
 * its own, and its removal. Header only. */
#ifndef TEST_STORE_H
#define TEST_STORE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "outbox/outbox.h"

/* dir: a new /tmp/outbox-NAME-XXXXXX; uri: sqlite://dir/t.db, holding the
 * outbox table with the optional parts schema_flags. Fails the test on any
 * error. */
static inline void test_store_make(const char *name, char dir[256], char uri[600],
                                   uint32_t schema_flags)
{
    snprintf(dir, 256, "/tmp/outbox-%s-XXXXXX", name);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(uri, 600, "sqlite://%s/t.db", dir);
    outbox_diag_t d = {0};
    outbox_store_options_t o = {.struct_size = sizeof o, .flags = OUTBOX_OPEN_SCHEMA_ONLY};
    outbox_store_t *s = NULL;
    ck_assert_msg(outbox_store_open(uri, &o, &s, &d) == OUTBOX_OK, "%s", d.message);
    outbox_schema_opts_t so = {.struct_size = sizeof so, .flags = schema_flags};
    ck_assert_msg(outbox_store_schema_apply(s, &so) == OUTBOX_OK, "%s", outbox_store_message(s));
    outbox_store_close(s);
}

/* Removes what test_store_make made. */
static inline void test_store_remove(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

#endif
