/* outbox inbox stats|purge: the consumers' inbox records (the events each
 * consumer handled, written by outbox_inbox_accept in its transactions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: outbox inbox stats --store URI [--relation NAME] [--inbox-relation NAME]\n"
    "                          [--consumer C] [--json]\n"
    "       outbox inbox purge --store URI [--relation NAME] [--inbox-relation NAME]\n"
    "                          --older-than DURATION [--consumer C]\n"
    "\n"
    "  stats   one line per consumer: how many events it recorded and the age in\n"
    "          seconds of its oldest and newest record\n"
    "  purge   delete the records received more than DURATION ago (e.g. 30d), of\n"
    "          every consumer or of C, and print how many. Keep DURATION longer than\n"
    "          any redelivery can come late: a purged event counts as new again\n"
    "\n"
    "  --inbox-relation NAME  the inbox table, default outbox_inbox beside the relation\n"
    "  --json                 stats as one JSON object: {\"consumers\": [{consumer,\n"
    "                         records, oldest_age_s, newest_age_s}, ...]}\n";

static const cli_option_t options[] = {
    {"store", true, OPT_STORE},
    {"relation", true, OPT_RELATION},
    {"inbox-relation", true, OPT_INBOX_RELATION},
    {"consumer", true, OPT_CONSUMER},
    {"older-than", true, OPT_OLDER_THAN},
    {"json", false, OPT_JSON},
    {NULL, false, 0},
};

typedef struct inbox_args {
    const char *cmd;
    cli_store_args_t store;
    const char *consumer;
    const char *older_text;
    int64_t older_us;
    bool json;
} inbox_args_t;

typedef struct consumer_row {
    char *name;
    uint64_t records;
    int64_t oldest_us, newest_us;
} consumer_row_t;

typedef struct consumer_list {
    consumer_row_t *v;
    size_t n, cap;
    bool failed;
} consumer_list_t;

static int keep_consumer(void *ctx, const char *consumer, uint64_t records, int64_t oldest_us,
                         int64_t newest_us)
{
    consumer_list_t *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        consumer_row_t *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) {
            l->failed = true;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    char *name = strdup(consumer);
    if (name == NULL) {
        l->failed = true;
        return 1;
    }
    l->v[l->n++] = (consumer_row_t){name, records, oldest_us, newest_us};
    return 0;
}

static long long age_s(int64_t at_us)
{
    int64_t age = at_us ? tool_wall_us() - at_us : 0;
    return age > 0 ? (long long)(age / 1000000) : 0;
}

static void print_text(const consumer_list_t *l)
{
    size_t w = strlen("CONSUMER");
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i].name) > w)
            w = strlen(l->v[i].name);
    printf("%-*s %10s %13s %13s\n", (int)w, "CONSUMER", "RECORDS", "OLDEST_AGE_S",
           "NEWEST_AGE_S");
    for (size_t i = 0; i < l->n; i++) {
        cli_put_printable(stdout, l->v[i].name);
        printf("%*s %10llu %13lld %13lld\n", (int)(w - strlen(l->v[i].name)), "",
               (unsigned long long)l->v[i].records, age_s(l->v[i].oldest_us),
               age_s(l->v[i].newest_us));
    }
}

static void print_json(const consumer_list_t *l)
{
    fputs("{\"consumers\": [", stdout);
    for (size_t i = 0; i < l->n; i++) {
        fputs(i ? ", {\"consumer\": " : "{\"consumer\": ", stdout);
        cli_put_json_string(stdout, l->v[i].name);
        printf(", \"records\": %llu, \"oldest_age_s\": %lld, \"newest_age_s\": %lld}",
               (unsigned long long)l->v[i].records, age_s(l->v[i].oldest_us),
               age_s(l->v[i].newest_us));
    }
    fputs("]}\n", stdout);
}

static int inbox_stats(const inbox_args_t *a)
{
    if (a->older_text != NULL)
        return cli_unknown_option(a->cmd, usage, "--older-than");
    outbox_store_t *s;
    int ex = cli_open_store(a->cmd, &a->store, OUTBOX_OPEN_READ_ONLY, false, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    consumer_list_t l = {0};
    int rc = outbox_inbox_stats(s, a->consumer, keep_consumer, &l);
    if (l.failed)
        ex = cli_error("%s: out of memory", a->cmd);
    else if (rc != OUTBOX_OK)
        ex = cli_diag_error(a->cmd, rc, outbox_store_message(s));
    else if (a->json)
        print_json(&l);
    else
        print_text(&l);
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].name);
    free(l.v);
    outbox_store_close(s);
    return ex;
}

static int inbox_purge(const inbox_args_t *a)
{
    if (a->json)
        return cli_unknown_option(a->cmd, usage, "--json");
    if (!cli_require(a->cmd, "--older-than", a->older_text))
        return CLI_EXIT_ERROR;
    outbox_store_t *s;
    int ex = cli_open_store(a->cmd, &a->store, 0, false, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    uint64_t count = 0;
    int rc = outbox_inbox_purge(s, a->consumer, tool_wall_us() - a->older_us, &count);
    if (rc != OUTBOX_OK)
        ex = cli_diag_error(a->cmd, rc, outbox_store_message(s));
    else
        printf("purged %llu\n", (unsigned long long)count);
    outbox_store_close(s);
    return ex;
}

int cli_cmd_inbox(int argc, char **argv)
{
    if (argc < 2)
        return cli_error("inbox: say stats or purge (try outbox inbox --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    int (*run)(const inbox_args_t *) = strcmp(argv[1], "stats") == 0   ? inbox_stats
                                       : strcmp(argv[1], "purge") == 0 ? inbox_purge
                                                                       : NULL;
    if (run == NULL)
        return cli_error("inbox: unknown action \"%s\" (stats or purge)", argv[1]);
    inbox_args_t a = {.cmd = run == inbox_stats ? "inbox stats" : "inbox purge"};
    cli_parser_t p;
    cli_parser_init(&p, a.cmd, usage, argc - 1, argv + 1);
    int id;
    while ((id = cli_next(&p, options)) > 0) {
        if (cli_store_option(&a.store, id, p.value))
            continue;
        switch (id) {
        case OPT_CONSUMER: a.consumer = p.value; break;
        case OPT_JSON: a.json = true; break;
        case OPT_OLDER_THAN:
            a.older_text = p.value;
            if (!cli_parse_duration("--older-than", p.value, false, &a.older_us))
                return CLI_EXIT_ERROR;
            break;
        }
    }
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR || !cli_nonempty(a.cmd, "--consumer", a.consumer))
        return CLI_EXIT_ERROR;
    return run(&a);
}
