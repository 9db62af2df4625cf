/* outbox stage: stage events in one transaction, all or nothing. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Events handed to one outbox_store_stage() call inside the transaction, so the
 * memory used does not grow with --count. */
#define STAGE_CHUNK 1000
#define STAGE_MAX_COUNT 100000000u

static const char usage[] =
    "usage: outbox stage --store URI --route R --type T [OPTIONS]\n"
    "\n"
    "Stages events in ONE transaction (nothing is written when anything fails)\n"
    "and prints how many were staged.\n"
    "\n"
    "  --store URI       the store: " OUTBOX_CLI_STORE_URIS "\n"
    "  --relation NAME   table or collection, default outbox\n"
    "  --route R         the route (stream) to stage on\n"
    "  --type T          the event type\n"
    "  --key K           ordering key: events sharing a key are published in order\n"
    "  --count N         stage N events with the same payload (default 1)\n"
    "  --payload JSON    the payload, default {}\n"
    "  --payload -       read one JSON document per line from stdin, one event each;\n"
    "                    blank lines are skipped (not with --count)\n"
    "  --hlc             stamp each event with the hybrid logical clock\n"
    "  --traceparent TP  W3C trace context of every event (needs the traceparent column)\n"
    "  --delay D         publish no event before D from now, by the store's clock (5m, 2h)\n"
    "  --at TIME         publish no event before TIME, RFC 3339 with its offset\n"
    "                    (2026-12-04T09:00:00Z); a delayed event holds back the later\n"
    "                    events of its --key until it is published\n"
    "  --tenant-id UUID, --correlation-id UUID, --causation-id UUID, --execution-id UUID\n"
    "                    the CloudEvents extension ids of every event\n"
    "\n"
    "Store drivers on the driver path serve their URIs too; `outbox drivers` lists them.\n";

static const cli_option_t options[] = {
    {"store", true, OPT_STORE},
    {"relation", true, OPT_RELATION},
    {"route", true, OPT_ROUTE},
    {"type", true, OPT_TYPE},
    {"key", true, OPT_KEY},
    {"count", true, OPT_COUNT},
    {"payload", true, OPT_PAYLOAD},
    {"hlc", false, OPT_HLC},
    {"traceparent", true, OPT_EVENT_TRACEPARENT},
    {"delay", true, OPT_DELAY},
    {"at", true, OPT_AT},
    {"tenant-id", true, OPT_TENANT_ID},
    {"correlation-id", true, OPT_CORRELATION_ID},
    {"causation-id", true, OPT_CAUSATION_ID},
    {"execution-id", true, OPT_EXECUTION_ID},
    {NULL, false, 0},
};

/* The ids every event of the call carries (NULL: none), with their options. */
enum { ID_TENANT, ID_CORRELATION, ID_CAUSATION, ID_EXECUTION, N_IDS };
static const char *const id_option[N_IDS] = {"--tenant-id", "--correlation-id", "--causation-id",
                                              "--execution-id"};

typedef struct stage_args {
    cli_store_args_t store;
    const char *route, *type, *key, *payload, *traceparent;
    const char *ids[N_IDS];
    uint64_t count;
    bool count_given;
    bool hlc;
    outbox_stage_options_t when; /* --delay or --at */
} stage_args_t;

/* The payloads to stage: one repeated count times, or one per stdin line. */
typedef struct payloads {
    bool from_stdin;
    const char *single;
    size_t count;
    char **lines;
    size_t *lens;
    size_t n_lines, cap;
} payloads_t;

static size_t payloads_total(const payloads_t *p)
{
    return p->from_stdin ? p->n_lines : p->count;
}

static void payloads_free(payloads_t *p)
{
    for (size_t i = 0; i < p->n_lines; i++)
        free(p->lines[i]);
    free(p->lines);
    free(p->lens);
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

static bool payloads_add(payloads_t *p, const char *line, size_t len)
{
    if (p->n_lines == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        char **lines = realloc(p->lines, cap * sizeof *lines);
        if (!lines)
            return false;
        p->lines = lines;
        size_t *lens = realloc(p->lens, cap * sizeof *lens);
        if (!lens)
            return false;
        p->lens = lens;
        p->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return false;
    memcpy(copy, line, len);
    copy[len] = '\0';
    p->lines[p->n_lines] = copy;
    p->lens[p->n_lines++] = len;
    return true;
}

/* Reads every line first, so a bad line stops the command before anything
 * is written. */
static int read_stdin_payloads(payloads_t *p)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    int ex = CLI_EXIT_OK;

    while ((got = getline(&line, &cap, stdin)) >= 0) {
        size_t len = (size_t)got;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (is_blank(line, len))
            continue;
        if (!outbox_json_valid(line, len)) {
            ex = cli_error("stage: stdin line %lu is not valid JSON; nothing staged", lineno);
            break;
        }
        if (!payloads_add(p, line, len)) {
            ex = cli_error("stage: out of memory reading stdin");
            break;
        }
    }
    if (ex == CLI_EXIT_OK && ferror(stdin))
        ex = cli_error("stage: cannot read stdin");
    free(line);
    return ex;
}

static void fill_event(outbox_event_t *e, const stage_args_t *a, const payloads_t *p, size_t i)
{
    memset(e, 0, sizeof *e);
    e->event_type = a->type;
    e->ordering_key = a->key;
    e->traceparent = a->traceparent;
    e->tenant_id = a->ids[ID_TENANT];
    e->correlation_id = a->ids[ID_CORRELATION];
    e->causation_id = a->ids[ID_CAUSATION];
    e->execution_id = a->ids[ID_EXECUTION];
    if (p->from_stdin) {
        e->payload = p->lines[i];
        e->payload_len = p->lens[i];
    } else {
        e->payload = p->single;
    }
}

/* Stages everything or nothing; *staged counts rows inserted. Without
 * transactions one outbox_store_stage() call, which is atomic on its own, takes
 * every event. */
static int stage_all(outbox_store_t *s, const stage_args_t *a, const payloads_t *p, size_t *staged)
{
    size_t total = payloads_total(p);
    bool tx = outbox_store_capabilities(s) & OUTBOX_STORE_CAP_TRANSACTIONS;
    size_t chunk = tx && total > STAGE_CHUNK ? STAGE_CHUNK : total;
    *staged = 0;
    if (total == 0)
        return CLI_EXIT_OK;

    outbox_event_t *events = calloc(chunk, sizeof *events);
    if (!events)
        return cli_error("stage: out of memory for %zu events", chunk);

    int rc = tx ? outbox_store_begin(s) : OUTBOX_OK;
    const char *what = "stage: begin";
    for (size_t done = 0; rc == OUTBOX_OK && done < total;) {
        size_t m = total - done < chunk ? total - done : chunk;
        for (size_t i = 0; i < m; i++)
            fill_event(&events[i], a, p, done + i);
        size_t n = 0;
        what = "stage";
        rc = outbox_store_stage_with(s, NULL, a->route, events, m, &a->when, &n);
        *staged += n;
        done += m;
    }
    if (tx && rc == OUTBOX_OK) {
        what = "stage: commit";
        rc = outbox_store_commit(s);
    }
    int ex = CLI_EXIT_OK;
    if (rc != OUTBOX_OK) {
        ex = cli_diag_error(what, rc, outbox_store_message(s));
        if (tx)
            outbox_store_rollback(s);
        *staged = 0;
    }
    free(events);
    return ex;
}

static int configure_hlc(outbox_store_t *s, const stage_args_t *a)
{
    outbox_route_config_t cfg = {
        .struct_size = sizeof cfg,
        .route = a->route,
        .hlc = 1,
    };
    int rc = outbox_store_configure_route(s, &cfg);
    if (rc != OUTBOX_OK)
        return cli_diag_error("stage: --hlc", rc, outbox_store_message(s));
    return CLI_EXIT_OK;
}

static bool check_args(stage_args_t *a)
{
    if (!cli_require("stage", "--store", a->store.uri) ||
        !cli_require("stage", "--route", a->route) || !cli_require("stage", "--type", a->type) ||
        !cli_nonempty("stage", "--key", a->key) ||
        !cli_nonempty("stage", "--traceparent", a->traceparent) ||
        !cli_relation_ok(a->store.relation))
        return false;
    for (int i = 0; i < N_IDS; i++)
        if (a->ids[i] != NULL && !outbox_uuid_valid(a->ids[i])) {
            cli_error("%s: \"%.60s\" is not a UUID", id_option[i], a->ids[i]);
            return false;
        }
    bool from_stdin = a->payload && strcmp(a->payload, "-") == 0;
    if (from_stdin && a->count_given) {
        cli_error("stage: --count cannot be combined with --payload - (one event per line)");
        return false;
    }
    if (!a->payload)
        a->payload = "{}";
    if (!from_stdin && !outbox_json_valid(a->payload, strlen(a->payload))) {
        cli_error("--payload: \"%.60s%s\" is not valid JSON", a->payload,
                  strlen(a->payload) > 60 ? "..." : "");
        return false;
    }
    return true;
}

int cli_cmd_stage(int argc, char **argv)
{
    stage_args_t a = {.count = 1, .when = {.struct_size = sizeof a.when}};
    cli_parser_t p;
    cli_parser_init(&p, "stage", usage, argc, argv);
    int id;
    while ((id = cli_next(&p, options)) > 0) {
        switch (id) {
        case OPT_HLC: a.hlc = true; break;
        case OPT_ROUTE: a.route = p.value; break;
        case OPT_TYPE: a.type = p.value; break;
        case OPT_KEY: a.key = p.value; break;
        case OPT_PAYLOAD: a.payload = p.value; break;
        case OPT_EVENT_TRACEPARENT: a.traceparent = p.value; break;
        case OPT_TENANT_ID: a.ids[ID_TENANT] = p.value; break;
        case OPT_CORRELATION_ID: a.ids[ID_CORRELATION] = p.value; break;
        case OPT_CAUSATION_ID: a.ids[ID_CAUSATION] = p.value; break;
        case OPT_EXECUTION_ID: a.ids[ID_EXECUTION] = p.value; break;
        case OPT_COUNT:
            if (!cli_parse_uint("--count", p.value, 1, STAGE_MAX_COUNT, &a.count))
                return CLI_EXIT_ERROR;
            a.count_given = true;
            break;
        case OPT_DELAY:
            if (a.when.not_before != 0)
                return cli_error("stage: give --delay or --at, not both");
            if (!cli_parse_duration("--delay", p.value, false, &a.when.delay_us))
                return CLI_EXIT_ERROR;
            break;
        case OPT_AT:
            if (a.when.delay_us != 0)
                return cli_error("stage: give --delay or --at, not both");
            if (!cli_parse_instant("--at", p.value, &a.when.not_before))
                return CLI_EXIT_ERROR;
            break;
        default: cli_store_option(&a.store, id, p.value); break;
        }
    }
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR || !check_args(&a))
        return CLI_EXIT_ERROR;

    payloads_t pl = {.single = a.payload, .count = (size_t)a.count};
    pl.from_stdin = strcmp(a.payload, "-") == 0;
    int ex = pl.from_stdin ? read_stdin_payloads(&pl) : CLI_EXIT_OK;
    outbox_store_t *s = NULL;
    if (ex == CLI_EXIT_OK)
        ex = cli_open_store("stage", &a.store, 0, false, &s);
    if (ex == CLI_EXIT_OK && a.hlc)
        ex = configure_hlc(s, &a);
    size_t staged = 0;
    if (ex == CLI_EXIT_OK)
        ex = stage_all(s, &a, &pl, &staged);
    if (ex == CLI_EXIT_OK)
        printf("staged %zu\n", staged);
    if (s)
        outbox_store_close(s);
    payloads_free(&pl);
    return ex;
}
