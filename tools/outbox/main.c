/* outbox: the command-line front end of liboutbox. Picks the subcommand;
 * each lives in its own file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: outbox [--verbose] COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  schema print|apply|check   show, create or verify the outbox table\n"
    "  stage                      stage events in one transaction\n"
    "  relay                      publish staged events to a sink\n"
    "  stats                      count rows per status (and per route)\n"
    "  routes                     list the routes with their counts\n"
    "  dead list                  list a route's dead events\n"
    "  replay                     send dead events back to pending\n"
    "  purge                      delete old published rows\n"
    "  inbox stats|purge          count or delete consumers' inbox records\n"
    "  drivers                    list the driver modules found\n"
    "  conformance                run the store-driver conformance battery\n"
    "  config check FILE          check a relay configuration file\n"
    "  help [COMMAND]             this text, or that command's usage (as COMMAND --help)\n"
    "\n"
    "  --help, -h     this text (after a command: that command's usage)\n"
    "  --version      print the version\n"
    "  --verbose      log debug lines of the library to stderr (accepted anywhere)\n"
    "\n"
    "Exit status: 0 success, 1 a check found a problem, 2 usage or runtime error.\n"
    "\n"
    "Drivers in this build: stores " OUTBOX_CLI_BUILT_STORES "; sinks " OUTBOX_CLI_BUILT_SINKS ".\n"
    "Other driver modules on the driver path (OUTBOX_DRIVER_PATH, then the installed\n"
    "driver directory) work too; `outbox drivers` lists them.\n";

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"schema", cli_cmd_schema}, {"stage", cli_cmd_stage},   {"relay", cli_cmd_relay},
    {"stats", cli_cmd_stats},   {"replay", cli_cmd_replay}, {"purge", cli_cmd_purge},
    {"drivers", cli_cmd_drivers}, {"conformance", cli_cmd_conformance},
    {"config", cli_cmd_config}, {"routes", cli_cmd_routes}, {"dead", cli_cmd_dead},
    {"inbox", cli_cmd_inbox},
};

static int (*find_command(const char *name))(int, char **)
{
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
        if (strcmp(name, commands[c].name) == 0)
            return commands[c].run;
    return NULL;
}

/* outbox help [COMMAND ...]: the same as outbox [COMMAND] --help. */
static int help(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "help") == 0) {
        fputs(usage, stdout);
        return CLI_EXIT_OK;
    }
    int (*run)(int, char **) = find_command(argv[1]);
    if (!run)
        return cli_error("help: unknown command \"%s\" (try outbox --help)", argv[1]);
    char *args[] = {argv[1], "--help", NULL};
    return run(2, args);
}

int main(int argc, char **argv)
{
    /* libmongoc, which the MongoDB driver module brings in when the loader
     * reads the driver path, keeps counters in /dev/shm/mongoc-<pid>. A
     * process killed with SIGKILL leaves its file behind, and a later
     * process given the same pid then prints "Falling back to malloc for
     * counters" on stderr, whatever it was asked to do. Nothing here reads
     * those counters: turn them off before any module is loaded (a value
     * the user set is kept). */
    setenv("MONGOC_DISABLE_SHM", "1", 0);
    cli_logging_init();

    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("outbox %s (driver ABI %d.%d, systemd notify %s)\n", outbox_version(),
                   OUTBOX_ABI_MAJOR, OUTBOX_ABI_MINOR, cli_notify_available() ? "yes" : "no");
            return CLI_EXIT_OK;
        }
        if (strcmp(argv[i], "--verbose") == 0) {
            cli_set_verbose(true);
            continue;
        }
        return cli_error("unknown option %s; usage: outbox [--verbose] COMMAND [OPTIONS]", argv[i]);
    }
    /* No command: what the commands are, as for --help, but a usage error. */
    if (i >= argc) {
        fputs(usage, stderr);
        return CLI_EXIT_ERROR;
    }
    if (strcmp(argv[i], "help") == 0)
        return help(argc - i, argv + i);

    int (*run)(int, char **) = find_command(argv[i]);
    if (!run)
        return cli_error("unknown command \"%s\" (try outbox --help)", argv[i]);
    int ex = run(argc - i, argv + i);
    tool_forget_secrets();
    return ex;
}
