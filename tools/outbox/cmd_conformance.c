/* outbox conformance: the conformance battery (liboutbox-conformance)
 * against a store or sink driver given by name or path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#ifdef OUTBOX_CLI_CONFORMANCE
#include "outbox/conformance.h"
#endif

/* Exit status when there is nothing to test: the "skipped" of automake and meson. */
#define CONFORMANCE_EXIT_NO_URI 77
/* The library's bound (outbox_conformance_opts_t.timeout_scale). */
#define CONFORMANCE_MAX_TIMEOUT_SCALE 1000.0

static const char usage[] =
    "usage: outbox conformance --driver NAME_OR_PATH --uri URI [--tap FILE] [--case SUBSTR]\n"
    "                          [--verbose] [--timeout-scale N]\n"
    "                          [--broker-stop CMD --broker-start CMD]\n"
    "                          [--broker-pause CMD --broker-resume CMD]\n"
    "       outbox conformance --list\n"
    "\n"
    "Runs the conformance battery against a store or a sink driver, chosen by the\n"
    "driver's kind: every case in its own process. A store case works on a fresh\n"
    "relation conf_<pid>_<n> that it creates with the driver's schema apply and\n"
    "drops afterwards; a sink case publishes to fresh destinations conf_<pid>_<n>\n"
    "and reads back what arrived with the driver's reader. Cases the driver's\n"
    "capabilities exclude are skipped with the reason. Each failed case is one line\n"
    "on stdout, \"conformance: FAIL CASE: what it checked and saw\", as it ends;\n"
    "then what the cases could not check, and \"conformance: N passed, N failed,\n"
    "N skipped\".\n"
    "\n"
    "  --driver NAME_OR_PATH  the driver to test: a name on the driver path (sqlite,\n"
    "                         nats) or a module file (./store-mine.so)\n"
    "  --uri URI              a store the battery may create and drop relations in,\n"
    "                         or a broker it may create and drop destinations on;\n"
    "                         default: $OUTBOX_CONFORMANCE_URI\n"
    "  --tap FILE             also write the results as TAP (skips as \"# SKIP why\")\n"
    "  --case SUBSTR          run only the cases whose name contains SUBSTR\n"
    "  --verbose              also a line \"conformance: PASS CASE\" for every case\n"
    "                         that passed (and the library's debug lines on stderr,\n"
    "                         as for every command)\n"
    "  --timeout-scale N      multiply every case's timeout by N (above 0, at most\n"
    "                         1000), for a slow server; CK_TIMEOUT_MULTIPLIER still\n"
    "                         applies on top\n"
    "  --broker-stop CMD      sinks: a shell command that stops the broker; with\n"
    "  --broker-start CMD     the one that starts it again, the cases that stop the\n"
    "                         broker under the sink run (else they are skipped)\n"
    "  --broker-pause CMD     sinks: a shell command that freezes the broker (it\n"
    "  --broker-resume CMD    keeps its connections, answers nothing: kill -STOP)\n"
    "                         and the one that lets it go on (kill -CONT); with\n"
    "                         them the cases that pause the broker run\n"
    "  --list                 print the case names and exit\n"
    "\n"
    "Exit status: 0 every case that ran passed, 1 a case failed, 2 usage or setup\n"
    "error, 77 no URI given (nothing was tested).\n";

/* Local option ids, above the shared ones of cli.h. */
enum {
    OPT_CONF_DRIVER = 1000,
    OPT_CONF_URI,
    OPT_CONF_TAP,
    OPT_CONF_CASE,
    OPT_CONF_LIST,
    OPT_CONF_BROKER_STOP,
    OPT_CONF_BROKER_START,
    OPT_CONF_TIMEOUT_SCALE,
    OPT_CONF_BROKER_PAUSE,
    OPT_CONF_BROKER_RESUME,
};

static const cli_option_t options[] = {
    {"driver", true, OPT_CONF_DRIVER}, {"uri", true, OPT_CONF_URI},
    {"tap", true, OPT_CONF_TAP},       {"case", true, OPT_CONF_CASE},
    {"list", false, OPT_CONF_LIST},    {"broker-stop", true, OPT_CONF_BROKER_STOP},
    {"broker-start", true, OPT_CONF_BROKER_START},
    {"timeout-scale", true, OPT_CONF_TIMEOUT_SCALE},
    {"broker-pause", true, OPT_CONF_BROKER_PAUSE},
    {"broker-resume", true, OPT_CONF_BROKER_RESUME}, {NULL, false, 0},
};

typedef struct conformance_args {
    const char *driver;
    const char *uri;
    const char *tap;
    const char *filter;
    const char *broker_stop;
    const char *broker_pause;
    const char *broker_resume;
    const char *broker_start;
    double timeout_scale; /* 0: not given */
    bool verbose;
    bool list;
} conformance_args_t;

/* --timeout-scale's value: a plain decimal number (no sign, no "inf" or
 * "nan", which strtod would take) above 0 and within the library's bound. */
static bool parse_timeout_scale(const char *text, double *out)
{
    const char *opt = "--timeout-scale";
    char *end = NULL;
    errno = 0;
    double v = (text[0] >= '0' && text[0] <= '9') || text[0] == '.' ? strtod(text, &end) : 0;
    if (end == NULL || end == text || *end != '\0' || !(v > 0)) {
        cli_error("%s: \"%s\" is not a number above 0", opt, text);
        return false;
    }
    if (errno == ERANGE || v > CONFORMANCE_MAX_TIMEOUT_SCALE) {
        cli_error("%s: \"%s\" is too large (at most %g)", opt, text,
                  CONFORMANCE_MAX_TIMEOUT_SCALE);
        return false;
    }
    *out = v;
    return true;
}

/* cli_next() takes --verbose itself wherever it stands (the library's
 * debug lines); here it also asks for a line per passed case. A value can
 * never be a bare "--verbose" (cli_next() refuses an option as a value),
 * so any such word after the command is the option. */
static bool wants_verbose(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--verbose") == 0)
            return true;
    return false;
}

#ifdef OUTBOX_CLI_CONFORMANCE
static int list_cases(void)
{
    for (size_t i = 0; outbox_conformance_case_name(i) != NULL; i++)
        puts(outbox_conformance_case_name(i));
    return CLI_EXIT_OK;
}

static int run_battery(const conformance_args_t *a)
{
    outbox_diag_t d = {0};
    outbox_conformance_opts_t o = {
        .struct_size = sizeof o,
        .driver = a->driver,
        .uri = a->uri,
        .tap_file = a->tap,
        .case_filter = a->filter,
        .diag = &d,
        .broker_stop = a->broker_stop,
        .broker_start = a->broker_start,
        .broker_pause = a->broker_pause,
        .broker_resume = a->broker_resume,
        .verbosity = a->verbose ? 1 : 0,
        .timeout_scale = a->timeout_scale,
    };
    int rc = outbox_conformance_run(&o);
    if (rc < 0)
        return cli_diag_error("conformance", rc, d.message);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_PROBLEM;
}
#else
/* Built without Check: there is no battery library to run. */
static int unavailable(void)
{
    return cli_error("conformance: this outbox was built without Check, so without the "
                     "conformance battery (liboutbox-conformance)");
}

static int list_cases(void)
{
    return unavailable();
}

static int run_battery(const conformance_args_t *a)
{
    (void)a;
    return unavailable();
}
#endif

int cli_cmd_conformance(int argc, char **argv)
{
    const char *cmd = "conformance";
    cli_parser_t p;
    cli_parser_init(&p, cmd, usage, argc, argv);
    conformance_args_t a = {.verbose = wants_verbose(argc, argv)};
    for (int id; (id = cli_next(&p, options)) != CLI_DONE;) {
        switch (id) {
        case CLI_HELP:
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        case CLI_ERROR:
            return CLI_EXIT_ERROR;
        case OPT_CONF_DRIVER: a.driver = p.value; break;
        case OPT_CONF_URI: a.uri = p.value; break;
        case OPT_CONF_TAP: a.tap = p.value; break;
        case OPT_CONF_CASE: a.filter = p.value; break;
        case OPT_CONF_LIST: a.list = true; break;
        case OPT_CONF_BROKER_STOP: a.broker_stop = p.value; break;
        case OPT_CONF_BROKER_START: a.broker_start = p.value; break;
        case OPT_CONF_BROKER_PAUSE: a.broker_pause = p.value; break;
        case OPT_CONF_BROKER_RESUME: a.broker_resume = p.value; break;
        case OPT_CONF_TIMEOUT_SCALE:
            if (!parse_timeout_scale(p.value, &a.timeout_scale))
                return CLI_EXIT_ERROR;
            break;
        default: return cli_error("%s: unhandled option", cmd);
        }
    }
    if (a.list)
        return list_cases();
    if (!cli_require(cmd, "--driver", a.driver) || !cli_nonempty(cmd, "--uri", a.uri) ||
        !cli_nonempty(cmd, "--tap", a.tap) || !cli_nonempty(cmd, "--case", a.filter) ||
        !cli_nonempty(cmd, "--broker-stop", a.broker_stop) ||
        !cli_nonempty(cmd, "--broker-start", a.broker_start) ||
        !cli_nonempty(cmd, "--broker-pause", a.broker_pause) ||
        !cli_nonempty(cmd, "--broker-resume", a.broker_resume))
        return CLI_EXIT_ERROR;
    if ((a.broker_stop == NULL) != (a.broker_start == NULL))
        return cli_error("%s: give --broker-stop and --broker-start together", cmd);
    if ((a.broker_pause == NULL) != (a.broker_resume == NULL))
        return cli_error("%s: give --broker-pause and --broker-resume together", cmd);
    if (a.uri == NULL)
        a.uri = getenv("OUTBOX_CONFORMANCE_URI");
    tool_note_secrets(a.uri);
    if (a.uri == NULL || a.uri[0] == '\0') {
        cli_error("%s: no URI (give --uri or set OUTBOX_CONFORMANCE_URI): nothing tested",
                  cmd);
        return CONFORMANCE_EXIT_NO_URI;
    }
    return run_battery(&a);
}
