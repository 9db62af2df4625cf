/* outbox drivers: every driver module on the search path. */
#include <stdio.h>

#include "cli.h"

static const char usage[] =
    "usage: outbox drivers\n"
    "\n"
    "Lists every driver module found on the search path (OUTBOX_DRIVER_PATH,\n"
    "then the installed driver directory), one per line:\n"
    "  name  kind  ABI major.minor  version  path\n"
    "Listing runs no driver code but each module's entry function.\n"
    "\n"
    "On stderr, one line per problem, as \"PATH: refused: REASON\" (not a driver,\n"
    "wrong ABI, missing entries, cannot be loaded), \"PATH: skipped: REASON\" (not\n"
    "a regular file) or \"PATH: warning: duplicate ...\" (a name or URI scheme an\n"
    "earlier module already claims; the first on the path is the one used).\n"
    "None of them changes the exit status.\n";

static const cli_option_t options[] = {{NULL, false, 0}};

static void print_driver(void *ctx, const outbox_driver_info_t *info)
{
    (void)ctx;
    printf("%-10s %-6s %u.%-4u %-10s %s\n", info->name, info->kind, info->abi_major,
           info->abi_minor, info->version ? info->version : "-", info->path ? info->path : "-");
}

/* The reason starts with what happened to the module: refused, skipped or warning. */
static void print_problem(void *ctx, const char *path, const char *reason)
{
    (void)ctx;
    fflush(stdout);
    cli_error("drivers: %s: %s", path, reason);
}

int cli_cmd_drivers(int argc, char **argv)
{
    cli_parser_t p;
    cli_parser_init(&p, "drivers", usage, argc, argv);
    int id = cli_next(&p, options);
    if (id == CLI_HELP) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    if (id != CLI_DONE)
        return CLI_EXIT_ERROR;
    int rc = outbox_drivers_list(print_driver, print_problem, NULL);
    if (rc != OUTBOX_OK)
        return cli_diag_error("drivers", rc, NULL);
    return CLI_EXIT_OK;
}
