/* Operator commands on an outbox: stats, replay, purge. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char stats_usage[] =
    "usage: outbox stats --store URI [--relation NAME] [--route R] [--json]\n"
    "\n"
    "Counts rows per status (of one route, or of all) and the age in seconds of\n"
    "the oldest pending row (0 when none is pending). Without --route, a table\n"
    "of every route's counts comes first, then the totals.\n"
    "\n"
    "  --json   one JSON object: pending, processing, published, dead,\n"
    "           oldest_pending_age_s (the totals); without --route also\n"
    "           routes, an array of {route, pending, ...} objects\n";

static const char replay_usage[] =
    "usage: outbox replay --store URI [--relation NAME] [--route R]\n"
    "                     (--event-id UUID | --all-dead)\n"
    "\n"
    "Sends dead events back to pending with their attempts reset, and prints\n"
    "how many. --event-id exits 1 when no dead event has that id.\n";

static const char purge_usage[] =
    "usage: outbox purge --store URI [--relation NAME] [--route R]\n"
    "                    --published-before DURATION\n"
    "\n"
    "Deletes published rows published more than DURATION ago (e.g. 7d) and\n"
    "prints how many. Pending, processing and dead rows are never touched.\n";

static const cli_option_t stats_options[] = {
    {"store", true, OPT_STORE}, {"relation", true, OPT_RELATION}, {"route", true, OPT_ROUTE},
    {"json", false, OPT_JSON},  {NULL, false, 0},
};

static const cli_option_t replay_options[] = {
    {"store", true, OPT_STORE},       {"relation", true, OPT_RELATION},
    {"route", true, OPT_ROUTE},       {"event-id", true, OPT_EVENT_ID},
    {"all-dead", false, OPT_ALL_DEAD}, {NULL, false, 0},
};

static const cli_option_t purge_options[] = {
    {"store", true, OPT_STORE},
    {"relation", true, OPT_RELATION},
    {"route", true, OPT_ROUTE},
    {"published-before", true, OPT_PUBLISHED_BEFORE},
    {NULL, false, 0},
};

/* What the three commands accept between them. */
typedef struct admin_args {
    cli_store_args_t store;
    const char *route;
    bool json;
    const char *event_id;
    bool all_dead;
    const char *before_text;
    int64_t before_us;
} admin_args_t;

/* Parses argv against table; returns -1 to go on, else the exit status. */
static int parse(const char *cmd, const char *usage, const cli_option_t *table, int argc,
                 char **argv, admin_args_t *a)
{
    cli_parser_t p;
    cli_parser_init(&p, cmd, usage, argc, argv);
    int id;
    while ((id = cli_next(&p, table)) > 0) {
        if (cli_store_option(&a->store, id, p.value))
            continue;
        switch (id) {
        case OPT_ROUTE: a->route = p.value; break;
        case OPT_JSON: a->json = true; break;
        case OPT_EVENT_ID: a->event_id = p.value; break;
        case OPT_ALL_DEAD: a->all_dead = true; break;
        case OPT_PUBLISHED_BEFORE:
            a->before_text = p.value;
            if (!cli_parse_duration("--published-before", p.value, true, &a->before_us))
                return CLI_EXIT_ERROR;
            break;
        }
    }
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR || !cli_require(cmd, "--store", a->store.uri) ||
        !cli_nonempty(cmd, "--route", a->route))
        return CLI_EXIT_ERROR;
    return -1;
}

/* ---------------------------------------------------------------- stats */

int cli_cmd_stats(int argc, char **argv)
{
    admin_args_t a = {0};
    int ex = parse("stats", stats_usage, stats_options, argc, argv, &a);
    if (ex >= 0)
        return ex;
    outbox_store_t *s;
    if ((ex = cli_open_store("stats", &a.store, OUTBOX_OPEN_READ_ONLY, false, &s)) != CLI_EXIT_OK)
        return ex;

    outbox_stats_t st = {0};
    int rc = outbox_store_stats(s, a.route, &st);
    /* Without --route: each route's counts first. A driver without the
     * routes entry (built for ABI 1.2 or older) gives the totals alone. */
    cli_routes_t r = {0};
    bool by_route = false;
    if (rc == OUTBOX_OK && a.route == NULL) {
        int rrc = cli_routes_read(s, &r);
        if (rrc == OUTBOX_OK)
            by_route = true;
        else if (rrc != OUTBOX_ENOTSUP)
            rc = rrc;
    }
    if (rc != OUTBOX_OK) {
        ex = cli_diag_error("stats", rc,
                            rc == OUTBOX_ENOMEM ? "out of memory" : outbox_store_message(s));
        outbox_store_close(s);
        return ex;
    }
    outbox_store_close(s);

    long long age_s = cli_pending_age_s(&st);
    if (a.json) {
        /* The routes come before the totals: a reader that takes the last
         * "pending" of the line still finds the total. */
        fputs("{", stdout);
        if (by_route) {
            cli_routes_print_json(&r);
            fputs(",", stdout);
        }
        printf("\"pending\":%llu,\"processing\":%llu,\"published\":%llu,\"dead\":%llu,"
               "\"oldest_pending_age_s\":%lld}\n",
               (unsigned long long)st.pending, (unsigned long long)st.processing,
               (unsigned long long)st.published, (unsigned long long)st.dead, age_s);
    } else {
        if (by_route && r.n > 0) {
            cli_routes_print_text(&r);
            fputs("\n", stdout);
        }
        printf("pending               %llu\n"
               "processing            %llu\n"
               "published             %llu\n"
               "dead                  %llu\n"
               "oldest pending age    %llds\n",
               (unsigned long long)st.pending, (unsigned long long)st.processing,
               (unsigned long long)st.published, (unsigned long long)st.dead, age_s);
    }
    cli_routes_free(&r);
    return CLI_EXIT_OK;
}

/* --------------------------------------------------------------- replay */

int cli_cmd_replay(int argc, char **argv)
{
    admin_args_t a = {0};
    int ex = parse("replay", replay_usage, replay_options, argc, argv, &a);
    if (ex >= 0)
        return ex;
    if (!a.event_id == !a.all_dead)
        return cli_error("replay: give exactly one of --event-id UUID and --all-dead");
    if (a.event_id && !outbox_uuid_valid(a.event_id))
        return cli_error("--event-id: \"%s\" is not a UUID", a.event_id);

    outbox_store_t *s;
    if ((ex = cli_open_store("replay", &a.store, 0, false, &s)) != CLI_EXIT_OK)
        return ex;
    uint64_t count = 0;
    int rc = outbox_store_replay(s, a.route, a.event_id, &count);
    if (rc != OUTBOX_OK)
        ex = cli_diag_error("replay", rc, outbox_store_message(s));
    else if (a.event_id && count == 0) {
        cli_error("no dead event %s", a.event_id);
        ex = CLI_EXIT_PROBLEM;
    } else
        printf("replayed %llu\n", (unsigned long long)count);
    outbox_store_close(s);
    return ex;
}

/* ---------------------------------------------------------------- purge */

int cli_cmd_purge(int argc, char **argv)
{
    admin_args_t a = {0};
    int ex = parse("purge", purge_usage, purge_options, argc, argv, &a);
    if (ex >= 0)
        return ex;
    if (!cli_require("purge", "--published-before", a.before_text))
        return CLI_EXIT_ERROR;

    outbox_store_t *s;
    if ((ex = cli_open_store("purge", &a.store, 0, false, &s)) != CLI_EXIT_OK)
        return ex;
    uint64_t count = 0;
    int rc = outbox_store_purge(s, a.route, tool_wall_us() - a.before_us, &count);
    if (rc != OUTBOX_OK)
        ex = cli_diag_error("purge", rc, outbox_store_message(s));
    else
        printf("purged %llu\n", (unsigned long long)count);
    outbox_store_close(s);
    return ex;
}
