/* outbox schema print|apply|check */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: outbox schema print --store " OUTBOX_CLI_STORES " [SCHEMA OPTIONS]\n"
    "       outbox schema apply --store URI [SCHEMA OPTIONS] --yes-i-know\n"
    "       outbox schema check --store URI [SCHEMA OPTIONS]\n"
    "\n"
    "  print   write the canonical DDL to stdout\n"
    "  apply   create the table, indexes and optional parts (idempotent)\n"
    "  check   compare the live schema with the canonical one; exit 0 when it\n"
    "          matches, 1 with one problem per line on stdout, 2 on error\n"
    "\n"
    "schema options:\n"
    "  --relation NAME   table (or schema.table, or collection), default outbox\n"
    "  --hlc             include the hlc column and its claim index\n"
    "  --traceparent     include the traceparent column\n"
    "  --checkpoint      include the hlc_checkpoint table\n"
    "  --inbox           include the inbox table (consumers' records of the events\n"
    "                    they handled), outbox_inbox beside the relation\n"
    "  --inbox-relation NAME  the inbox table's name instead (implies --inbox)\n";

static const cli_option_t options[] = {
    {"store", true, OPT_STORE},   {"relation", true, OPT_RELATION},
    {"hlc", false, OPT_HLC},      {"traceparent", false, OPT_TRACEPARENT},
    {"checkpoint", false, OPT_CHECKPOINT}, {"yes-i-know", false, OPT_YES},
    {"inbox", false, OPT_INBOX}, {"inbox-relation", true, OPT_INBOX_RELATION},
    {NULL, false, 0},
};

typedef struct schema_args {
    const char *cmd;
    cli_store_args_t store;
    bool yes;
} schema_args_t;

static outbox_schema_opts_t schema_opts(const schema_args_t *a)
{
    outbox_schema_opts_t o = {
        .struct_size = sizeof o,
        .relation = a->store.relation ? a->store.relation : "outbox",
        .flags = a->store.schema_flags | (a->store.inbox_relation ? OUTBOX_SCHEMA_INBOX : 0),
        .inbox_relation = a->store.inbox_relation,
    };
    return o;
}

static int schema_print(const schema_args_t *a)
{
    if (!cli_require(a->cmd, "--store", a->store.uri) || !cli_relation_ok(a->store.relation) ||
        !cli_relation_option_ok("--inbox-relation", a->store.inbox_relation))
        return CLI_EXIT_ERROR;
    outbox_schema_opts_t o = schema_opts(a);
    outbox_diag_t d = {0};
    char *ddl = NULL;
    int rc = outbox_schema_ddl(a->store.uri, &o, &ddl, &d);
    if (rc != OUTBOX_OK)
        return cli_diag_error(a->cmd, rc, d.message);
    size_t n = strlen(ddl);
    fputs(ddl, stdout);
    if (n == 0 || ddl[n - 1] != '\n')
        fputc('\n', stdout);
    free(ddl);
    return CLI_EXIT_OK;
}

static int schema_apply(const schema_args_t *a)
{
    if (!a->yes)
        return cli_error("schema apply changes the database; add --yes-i-know");
    outbox_store_t *s;
    int ex = cli_open_store(a->cmd, &a->store, OUTBOX_OPEN_SCHEMA_ONLY, true, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    outbox_schema_opts_t o = schema_opts(a);
    int rc = outbox_store_schema_apply(s, &o);
    if (rc != OUTBOX_OK)
        ex = cli_diag_error(a->cmd, rc, outbox_store_message(s));
    else
        printf("schema applied to %s\n", o.relation);
    outbox_store_close(s);
    return ex;
}

static void print_problem(void *ctx, const char *problem)
{
    (void)ctx;
    printf("%s\n", problem);
}

static int schema_check(const schema_args_t *a)
{
    outbox_store_t *s;
    int ex = cli_open_store(a->cmd, &a->store, OUTBOX_OPEN_SCHEMA_ONLY | OUTBOX_OPEN_READ_ONLY, false, &s);
    if (ex != CLI_EXIT_OK)
        return ex;
    outbox_schema_opts_t o = schema_opts(a);
    size_t problems = 0;
    int rc = outbox_store_schema_check(s, &o, print_problem, NULL, &problems);
    fflush(stdout);
    if (rc != OUTBOX_OK)
        ex = cli_diag_error(a->cmd, rc, outbox_store_message(s));
    else if (problems > 0) {
        cli_error("schema check: %zu problem%s in %s", problems, problems == 1 ? "" : "s",
                  o.relation);
        ex = CLI_EXIT_PROBLEM;
    } else
        printf("schema of %s is valid\n", o.relation);
    outbox_store_close(s);
    return ex;
}

int cli_cmd_schema(int argc, char **argv)
{
    static const struct {
        const char *name, *cmd;
        int (*run)(const schema_args_t *a);
        bool needs_yes;
    } actions[] = {
        {"print", "schema print", schema_print, false},
        {"apply", "schema apply", schema_apply, true},
        {"check", "schema check", schema_check, false},
    };

    if (argc < 2)
        return cli_error("schema: say print, apply or check (try outbox schema --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    size_t i = 0;
    while (i < sizeof actions / sizeof actions[0] && strcmp(argv[1], actions[i].name) != 0)
        i++;
    if (i == sizeof actions / sizeof actions[0])
        return cli_error("schema: unknown action \"%s\" (print, apply or check)", argv[1]);

    schema_args_t a = {.cmd = actions[i].cmd};
    cli_parser_t p;
    cli_parser_init(&p, a.cmd, usage, argc - 1, argv + 1);
    int id;
    while ((id = cli_next(&p, options)) > 0) {
        if (cli_store_option(&a.store, id, p.value))
            continue;
        /* OPT_YES is the only other option; it means something to apply only. */
        if (!actions[i].needs_yes)
            return cli_unknown_option(a.cmd, usage, "--yes-i-know");
        a.yes = true;
    }
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id == CLI_ERROR)
        return CLI_EXIT_ERROR;
    return actions[i].run(&a);
}
