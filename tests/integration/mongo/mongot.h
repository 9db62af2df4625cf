/* What the MongoDB tests written in C share: the server (OUTBOX_MONGO_URI,
 * or the skip rule of tests/harness), a database of the case's own
 * (PREFIX_<pid>: Check forks each case) with uri naming it, and a client
 * of the test's own on it, dropped and closed after the case.
 *
 * One test program includes it once: the state below is its own. */
#ifndef TESTS_MONGOT_H
#define TESTS_MONGOT_H

#include <check.h>
#include <mongoc/mongoc.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char uri[1024];  /* OUTBOX_MONGO_URI with the case's database */
static char dbname[64]; /* the case's database */
static mongoc_client_t *client; /* the test's own */

static inline const char *mt_server_uri(void)
{
    return th_need_env("OUTBOX_MONGO_URI", TH_START_SERVICE("ferretdb"));
}

/* libmongoc, linked here, sets OpenSSL up as the program loads, and
 * OpenSSL keeps some of that in the main thread's thread-local state,
 * which the ASan run's LeakSanitizer (use_tls=0, see tools/test) takes for
 * leaks: let it go before the process ends. */
static inline void mt_thread_done(void)
{
    OPENSSL_thread_stop();
}

static inline void mt_drop_db(void)
{
    mongoc_database_t *db = mongoc_client_get_database(client, dbname);
    mongoc_database_drop(db, NULL);
    mongoc_database_destroy(db);
}

/* The case's database PREFIX_<pid>, uri on it, and client. */
static inline void mt_setup(const char *prefix)
{
    snprintf(dbname, sizeof dbname, "%s_%ld", prefix, (long)getpid());
    const char *u = mt_server_uri();
    const char *host = strstr(u, "://");
    ck_assert_msg(host != NULL, "OUTBOX_MONGO_URI %s has no scheme", u);
    const char *path = strchr(host + 3, '/');
    ck_assert_msg(path != NULL, "OUTBOX_MONGO_URI %s names no database", u);
    const char *query = strchr(path, '?');
    snprintf(uri, sizeof uri, "%.*s/%s%s", (int)(path - u), u, dbname, query ? query : "");
    mongoc_init();
    bson_error_t e;
    mongoc_uri_t *mu = mongoc_uri_new_with_error(uri, &e);
    ck_assert_msg(mu != NULL, "%s: %s", uri, e.message);
    client = mongoc_client_new_from_uri(mu);
    mongoc_uri_destroy(mu);
    ck_assert(client != NULL);
    mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
}

static inline void mt_teardown(void)
{
    mt_drop_db();
    mongoc_client_destroy(client);
    mt_thread_done();
}

#endif
