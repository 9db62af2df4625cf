/* Operator commands that list: outbox routes, outbox dead list, and the
 * per-route table outbox stats prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "outbox/kit.h"

/* The kit's buffers and JSON strings, on the C library's heap. */
static const outbox_host_t heap = {.struct_size = sizeof heap, .alloc = malloc,
                                   .realloc = realloc, .free = free};

static const char routes_usage[] =
    "usage: outbox routes --store URI [--relation NAME] [--json]\n"
    "\n"
    "Lists every route the table holds rows of, one line each, with its counts\n"
    "per status and the age in seconds of its oldest pending row.\n"
    "\n"
    "  --json   one JSON object: {\"routes\": [{route, pending, processing,\n"
    "           published, dead, oldest_pending_age_s}, ...]}\n";

static const char dead_usage[] =
    "usage: outbox dead list --store URI [--relation NAME] --route R\n"
    "                        [--limit N] [--after ID] [--json]\n"
    "\n"
    "Lists the dead events of route R in claim order, one line each, tab-separated:\n"
    "row id, event id, event type, ordering key (- when none), attempts,\n"
    "created at (RFC 3339, UTC) and the last error (control bytes escaped).\n"
    "Pass an event id to `outbox replay --event-id` to send it back.\n"
    "\n"
    "  --limit N   events per page, 1 to 10000 (default 100)\n"
    "  --after ID  start after the row with this id (the last row id of the\n"
    "              previous page, or \"next\" of its JSON)\n"
    "  --json      one JSON object: {\"events\": [...], \"next\": ID or null}\n";

static const cli_option_t routes_options[] = {
    {"store", true, OPT_STORE}, {"relation", true, OPT_RELATION}, {"json", false, OPT_JSON},
    {NULL, false, 0},
};

static const cli_option_t dead_options[] = {
    {"store", true, OPT_STORE}, {"relation", true, OPT_RELATION}, {"route", true, OPT_ROUTE},
    {"limit", true, OPT_LIMIT}, {"after", true, OPT_AFTER},       {"json", false, OPT_JSON},
    {NULL, false, 0},
};

/* ------------------------------------------------------- the route table */

static int collect(void *ctx, const char *route, const outbox_stats_t *stats)
{
    cli_routes_t *r = ctx;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        cli_route_t *v = realloc(r->v, cap * sizeof *v);
        if (v == NULL)
            return OUTBOX_ENOMEM;
        r->v = v;
        r->cap = cap;
    }
    char *copy = strdup(route);
    if (copy == NULL)
        return OUTBOX_ENOMEM;
    r->v[r->n].route = copy;
    r->v[r->n].stats = *stats;
    r->n++;
    return OUTBOX_OK;
}

int cli_routes_read(outbox_store_t *s, cli_routes_t *out)
{
    memset(out, 0, sizeof *out);
    int rc = outbox_store_routes(s, collect, out);
    if (rc != OUTBOX_OK)
        cli_routes_free(out);
    return rc;
}

void cli_routes_free(cli_routes_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].route);
    free(r->v);
    memset(r, 0, sizeof *r);
}

long long cli_pending_age_s(const outbox_stats_t *st)
{
    int64_t age_us = st->oldest_pending_created_at ? tool_wall_us() - st->oldest_pending_created_at : 0;
    return age_us > 0 ? (long long)(age_us / 1000000) : 0;
}

/* Text of a store, fit for one terminal line: control bytes (C0, DEL, C1)
 * and backslashes escaped, so nothing a row holds can end a line or move
 * the cursor. */
/* The HTML entity for c, or NULL when c stands as it is. */
static const char *html_entity(unsigned char c)
{
    switch (c) {
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '&': return "&amp;";
    case '"': return "&quot;";
    case '\'': return "&#39;";
    default: return NULL;
    }
}

static void put_text(FILE *f, const char *s, bool html)
{
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        const char *entity = html ? html_entity(*p) : NULL;
        if (entity)
            fputs(entity, f);
        else if (*p == '\\')
            fputs("\\\\", f);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            fprintf(f, "\\xc2\\x%02x", p[1]);
            p++;
        } else
            fputc(*p, f);
    }
}

void cli_put_printable(FILE *f, const char *s)
{
    put_text(f, s, false);
}

void cli_put_printable_html(FILE *f, const char *s)
{
    if (s != NULL)
        put_text(f, s, true);
}

void cli_put_json_string(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &heap);
    outbox_kit_buf_json_string(&b, s, strlen(s));
    fputs(b.failed || b.data == NULL ? "null" : b.data, f);
    outbox_kit_buf_free(&b);
}

void cli_routes_print_text(const cli_routes_t *r)
{
    size_t w = strlen("ROUTE");
    for (size_t i = 0; i < r->n; i++)
        if (strlen(r->v[i].route) > w)
            w = strlen(r->v[i].route);
    printf("%-*s  %10s  %10s  %10s  %10s  %s\n", (int)w, "ROUTE", "PENDING", "PROCESSING",
           "PUBLISHED", "DEAD", "OLDEST_PENDING_AGE_S");
    for (size_t i = 0; i < r->n; i++) {
        const outbox_stats_t *st = &r->v[i].stats;
        cli_put_printable(stdout, r->v[i].route);
        printf("%*s  %10llu  %10llu  %10llu  %10llu  %lld\n", (int)(w - strlen(r->v[i].route)), "",
               (unsigned long long)st->pending, (unsigned long long)st->processing,
               (unsigned long long)st->published, (unsigned long long)st->dead,
               cli_pending_age_s(st));
    }
}

void cli_routes_print_json(const cli_routes_t *r)
{
    fputs("\"routes\":[", stdout);
    for (size_t i = 0; i < r->n; i++) {
        const outbox_stats_t *st = &r->v[i].stats;
        fputs(i ? ",{\"route\":" : "{\"route\":", stdout);
        cli_put_json_string(stdout, r->v[i].route);
        printf(",\"pending\":%llu,\"processing\":%llu,\"published\":%llu,\"dead\":%llu,"
               "\"oldest_pending_age_s\":%lld}",
               (unsigned long long)st->pending, (unsigned long long)st->processing,
               (unsigned long long)st->published, (unsigned long long)st->dead,
               cli_pending_age_s(st));
    }
    fputs("]", stdout);
}

/* --------------------------------------------------------------- routes */

int cli_cmd_routes(int argc, char **argv)
{
    cli_store_args_t store = {0};
    bool json = false;
    cli_parser_t p;
    cli_parser_init(&p, "routes", routes_usage, argc, argv);
    int id;
    while ((id = cli_next(&p, routes_options)) > 0) {
        if (!cli_store_option(&store, id, p.value) && id == OPT_JSON)
            json = true;
    }
    if (id == CLI_HELP) {
        fputs(routes_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR || !cli_require("routes", "--store", store.uri))
        return CLI_EXIT_ERROR;
    outbox_store_t *s;
    int ex = cli_open_store("routes", &store, OUTBOX_OPEN_READ_ONLY, false, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    cli_routes_t r;
    int rc = cli_routes_read(s, &r);
    if (rc != OUTBOX_OK) {
        ex = cli_diag_error("routes", rc,
                            rc == OUTBOX_ENOMEM ? "out of memory" : outbox_store_message(s));
        outbox_store_close(s);
        return ex;
    }
    outbox_store_close(s);
    if (json) {
        fputs("{", stdout);
        cli_routes_print_json(&r);
        fputs("}\n", stdout);
    } else {
        cli_routes_print_text(&r);
    }
    cli_routes_free(&r);
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------ dead list */

typedef struct dead_out {
    bool json;
    size_t n;
    FILE *f; /* the page, shown only once the listing succeeded */
} dead_out_t;

void cli_rfc3339(int64_t us, char out[40])
{
    time_t secs = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0) {
        frac += 1000000;
        secs--;
    }
    struct tm tm;
    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(out, 40, "%lld", (long long)us);
        return;
    }
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%06ldZ", day, frac);
}

static int print_dead(void *ctx, const outbox_row_t *row)
{
    dead_out_t *o = ctx;
    char at[40];
    cli_rfc3339(row->created_at, at);
    if (o->json) {
        fputs(o->n ? ",{\"id\":" : "{\"id\":", o->f);
        cli_put_json_string(o->f, row->id);
        fputs(",\"event_id\":", o->f);
        cli_put_json_string(o->f, row->event_id);
        fputs(",\"event_type\":", o->f);
        cli_put_json_string(o->f, row->event_type);
        fputs(",\"ordering_key\":", o->f);
        cli_put_json_string(o->f, row->ordering_key);
        fprintf(o->f, ",\"attempts\":%d,\"created_at\":\"%s\",\"last_error\":", (int)row->attempts, at);
        cli_put_json_string(o->f, row->last_error);
        fputs("}", o->f);
    } else {
        cli_put_printable(o->f, row->id ? row->id : "");
        fputc('\t', o->f);
        cli_put_printable(o->f, row->event_id ? row->event_id : "");
        fputc('\t', o->f);
        cli_put_printable(o->f, row->event_type ? row->event_type : "");
        fputc('\t', o->f);
        cli_put_printable(o->f, row->ordering_key ? row->ordering_key : "-");
        fprintf(o->f, "\t%d\t%s\t", (int)row->attempts, at);
        cli_put_printable(o->f, row->last_error ? row->last_error : "");
        fputc('\n', o->f);
    }
    o->n++;
    return 0;
}

static int dead_list(int argc, char **argv)
{
    cli_store_args_t store = {0};
    const char *route = NULL, *after = NULL;
    uint64_t limit = 100;
    bool json = false;
    cli_parser_t p;
    cli_parser_init(&p, "dead list", dead_usage, argc, argv);
    int id;
    while ((id = cli_next(&p, dead_options)) > 0) {
        if (cli_store_option(&store, id, p.value))
            continue;
        switch (id) {
        case OPT_ROUTE: route = p.value; break;
        case OPT_AFTER: after = p.value; break;
        case OPT_JSON: json = true; break;
        case OPT_LIMIT:
            if (!cli_parse_uint("--limit", p.value, 1, OUTBOX_DEAD_LIST_MAX, &limit))
                return CLI_EXIT_ERROR;
            break;
        }
    }
    if (id == CLI_HELP) {
        fputs(dead_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR || !cli_require("dead list", "--store", store.uri) ||
        !cli_require("dead list", "--route", route) || !cli_nonempty("dead list", "--route", route))
        return CLI_EXIT_ERROR;
    if (after != NULL && !outbox_uuid_valid(after))
        return cli_error("--after: \"%s\" is not a UUID", after);

    outbox_store_t *s;
    int ex = cli_open_store("dead list", &store, OUTBOX_OPEN_READ_ONLY, false, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    /* The page is shown only when all of it was read: an error leaves
     * nothing half-written on stdout. */
    char *page = NULL;
    size_t page_len = 0;
    dead_out_t o = {.json = json, .f = open_memstream(&page, &page_len)};
    if (o.f == NULL) {
        outbox_store_close(s);
        return cli_error("dead list: out of memory");
    }
    char next[OUTBOX_UUID_STRLEN + 1];
    if (json)
        fputs("{\"events\":[", o.f);
    int rc = outbox_store_dead_list(s, route, after, (size_t)limit, print_dead, &o, next);
    if (rc == OUTBOX_OK && json) {
        fputs("],\"next\":", o.f);
        cli_put_json_string(o.f, next[0] ? next : NULL);
        fputs("}\n", o.f);
    }
    int werr = fclose(o.f) != 0;
    if (rc != OUTBOX_OK)
        ex = cli_diag_error("dead list", rc, outbox_store_message(s));
    else if (werr)
        ex = cli_error("dead list: out of memory");
    else
        fwrite(page, 1, page_len, stdout);
    free(page);
    outbox_store_close(s);
    return ex;
}

int cli_cmd_dead(int argc, char **argv)
{
    if (argc < 2)
        return cli_error("dead: say list (try outbox dead --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(dead_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "list") != 0)
        return cli_error("dead: unknown action \"%s\" (list)", argv[1]);
    return dead_list(argc - 1, argv + 1);
}
