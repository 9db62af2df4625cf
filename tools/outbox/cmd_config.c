/* outbox config check FILE: reads the relay's configuration file and says
 * what it declares, or the first problem in it, without connecting to
 * anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "config.h"

static const char usage[] =
    "usage: outbox config check FILE\n"
    "\n"
    "Reads a relay configuration file (YAML: stores, sinks and the routes that\n"
    "join them; see docs/config.md) and checks every key and value, that each\n"
    "route names a declared store and sink, that ${NAME} variables are set, and\n"
    "that a driver module on the driver path serves each URI's scheme and is of\n"
    "the right kind. Nothing is opened or connected. Prints one line per route\n"
    "(passwords masked) and exits 0, or prints the first problem as\n"
    "\"FILE:LINE: problem\" and exits 2.\n";

/* The schemes the driver path serves, by kind. */
typedef struct schemes {
    char store[1024];
    char sink[1024];
} schemes_t;

static void add_driver(void *ctx, const outbox_driver_info_t *info)
{
    schemes_t *s = ctx;
    char *to = strcmp(info->kind, "store") == 0 ? s->store : s->sink;
    size_t size = sizeof s->store, len = strlen(to);
    if (info->schemes && len + strlen(info->schemes) + 2 < size)
        snprintf(to + len, size - len, "%s%s", len ? "," : "", info->schemes);
}

static void ignore_problem(void *ctx, const char *path, const char *reason)
{
    (void)ctx;
    (void)path;
    (void)reason;
}

/* 1 when the comma-separated list holds the URI's scheme. */
static int serves(const char *list, const char *uri)
{
    size_t n = strcspn(uri, ":");
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncasecmp(p, uri, n) == 0)
            return 1;
        p += m;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int check_scheme(const cli_config_t *c, const char *kind, const char *name, int line,
                        const char *uri, const schemes_t *s)
{
    const char *mine = strcmp(kind, "store") == 0 ? s->store : s->sink;
    const char *other = strcmp(kind, "store") == 0 ? s->sink : s->store;
    size_t n = strcspn(uri, ":");
    if (serves(mine, uri))
        return 0;
    if (serves(other, uri))
        cli_error("%s:%d: %s %s: %.*s: is a %s scheme, not a %s one", c->path, line, kind, name,
                  (int)n, uri, strcmp(kind, "store") == 0 ? "sink" : "store", kind);
    else
        cli_error("%s:%d: %s %s: no driver on the driver path serves %.*s: (outbox drivers "
                  "lists them)",
                  c->path, line, kind, name, (int)n, uri);
    return 1;
}

int cli_cmd_config(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        }
    if (argc < 2 || strcmp(argv[1], "check") != 0)
        return cli_error("config: expected \"check FILE\"; usage: outbox config check FILE");
    if (argc != 3 || argv[2][0] == '\0')
        return cli_error("config check: expected one FILE; usage: outbox config check FILE");
    cli_config_t c;
    char err[1024];
    if (cli_config_load(argv[2], &c, err, sizeof err) != OUTBOX_OK)
        return cli_error("%s", err);
    schemes_t s = {{0}, {0}};
    int rc = outbox_drivers_list(add_driver, ignore_problem, &s);
    if (rc != OUTBOX_OK) {
        cli_config_free(&c);
        return cli_diag_error("config check: listing the driver modules", rc, NULL);
    }
    int bad = 0;
    for (size_t i = 0; !bad && i < c.n_stores; i++)
        bad = check_scheme(&c, "store", c.stores[i].name, c.stores[i].line, c.stores[i].uri, &s);
    for (size_t i = 0; !bad && i < c.n_sinks; i++)
        bad = check_scheme(&c, "sink", c.sinks[i].name, c.sinks[i].line, c.sinks[i].uri, &s);
    if (bad) {
        cli_config_free(&c);
        return CLI_EXIT_ERROR;
    }
    for (size_t i = 0; i < c.n_routes; i++) {
        const cli_config_route_t *r = &c.routes[i];
        char store[512], sink[512];
        outbox_uri_mask(c.stores[r->store].uri, store, sizeof store);
        outbox_uri_mask(c.sinks[r->sink].uri, sink, sizeof sink);
        char keep[96] = "";
        if (r->retention_us > 0)
            snprintf(keep, sizeof keep, ", purges published rows after %llds every %llds",
                     (long long)(r->retention_us / 1000000), (long long)(r->purge_interval_us / 1000000));
        char pipe[40] = "";
        if (r->relay.pipeline > 1)
            snprintf(pipe, sizeof pipe, " (pipeline of %zu)", r->relay.pipeline);
        printf("route %s: store %s (%s) -> sink %s (%s), batch %zu%s, %zu worker%s%s\n", r->name,
               c.stores[r->store].name, store, c.sinks[r->sink].name, sink, r->relay.batch, pipe,
               r->workers, r->workers == 1 ? "" : "s", keep);
    }
    if (c.tracing_endpoint) {
        char shown[512];
        outbox_uri_mask(c.tracing_endpoint, shown, sizeof shown);
        printf("tracing: spans to %s (OTLP/HTTP) as service %s, %g of the batches\n", shown,
               c.tracing_service_name ? c.tracing_service_name : "outbox-relay", c.tracing_sample);
    }
    printf("%s: %zu store%s, %zu sink%s, %zu route%s: ok\n", c.path, c.n_stores,
           c.n_stores == 1 ? "" : "s", c.n_sinks, c.n_sinks == 1 ? "" : "s", c.n_routes,
           c.n_routes == 1 ? "" : "s");
    cli_config_free(&c);
    return CLI_EXIT_OK;
}
