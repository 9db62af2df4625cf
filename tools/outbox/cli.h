/* The outbox command-line tool: what the subcommand files share. Its files
 * call only downward: log.c (every line the tool prints, the URIs' secrets
 * masked by tools/common/secrets.c) at the bottom, args.c (options and
 * values) and store.c (opening a store) above, the cmd_*.c files on top.
 *
 * Exit statuses: 0 success, 1 a check found a problem, 2 usage or runtime
 * error. Every failure prints exactly one line on stderr starting with
 * "outbox: ".
 */
#ifndef OUTBOX_CLI_H
#define OUTBOX_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "outbox/outbox.h"
#include "clock.h"
#include "secrets.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_PROBLEM 1
#define CLI_EXIT_ERROR 2

/* What a relay takes, on the command line and in a config file alike: the
 * library's largest batch; worker threads per route; and a bound on
 * max_attempts that keeps its number in an int with room to spare. */
#define CLI_RELAY_BATCH_MAX OUTBOX_RELAY_BATCH_MAX
#define CLI_RELAY_WORKERS_MAX 64
#define CLI_RELAY_PIPELINE_MAX OUTBOX_RELAY_PIPELINE_MAX
#define CLI_RELAY_ATTEMPTS_MAX 1000000

/* ------------------------------------------------- options (args.c) */

/* Every option of every subcommand; each subcommand's table lists the
 * ones it takes. */
enum cli_option_id {
    OPT_STORE = 1,
    OPT_RELATION,
    OPT_HLC,
    OPT_TRACEPARENT,
    OPT_CHECKPOINT,
    OPT_YES,
    OPT_ROUTE,
    OPT_TYPE,
    OPT_KEY,
    OPT_COUNT,
    OPT_PAYLOAD,
    OPT_SINK,
    OPT_BATCH,
    OPT_MAX_ATTEMPTS,
    OPT_LEASE,
    OPT_NO_LEASE_RENEWAL,
    OPT_POLL,
    OPT_BACKOFF_BASE,
    OPT_BACKOFF_CAP,
    OPT_SOURCE,
    OPT_DESTINATION,
    OPT_WORKERS,
    OPT_PIPELINE,
    OPT_UNTIL_IDLE,
    OPT_QUIET,
    OPT_JSON,
    OPT_EVENT_ID,
    OPT_ALL_DEAD,
    OPT_PUBLISHED_BEFORE,
    OPT_CONFIG,
    OPT_LOG_FORMAT,
    OPT_LOG_FILE,
    OPT_METRICS_LISTEN,
    OPT_METRICS_TLS_CERT,
    OPT_METRICS_TLS_KEY,
    OPT_METRICS_USER,
    OPT_LIMIT,
    OPT_AFTER,
    OPT_EVENT_TRACEPARENT,
    OPT_TENANT_ID,
    OPT_CORRELATION_ID,
    OPT_CAUSATION_ID,
    OPT_EXECUTION_ID,
    OPT_INBOX,
    OPT_INBOX_RELATION,
    OPT_CONSUMER,
    OPT_OLDER_THAN,
    OPT_DELAY,
    OPT_AT,
    OPT_OTLP_ENDPOINT,
    OPT_TRACE_SAMPLE,
    OPT_TRACE_SERVICE_NAME,
};

typedef struct cli_option {
    const char *name; /* without the leading "--" */
    bool has_value;
    int id;           /* enum cli_option_id */
} cli_option_t;

/* What cli_next() returns besides an option id. */
#define CLI_DONE 0
#define CLI_ERROR (-1) /* the message is printed already */
#define CLI_HELP (-2)

typedef struct cli_parser {
    const char *cmd;  /* "stage", "schema check": names the command in messages */
    const char *usage; /* the command's --help text, whose usage line errors quote */
    int argc;
    char **argv;
    int next;
    const char *value; /* the value of the option just returned */
} cli_parser_t;

/* argv[0] is the subcommand word itself; parsing starts after it. */
void cli_parser_init(cli_parser_t *p, const char *cmd, const char *usage, int argc, char **argv);
/* Prints "unknown option OPT for CMD; usage: outbox CMD ..." (the line of
 * usage for cmd); returns CLI_EXIT_ERROR. */
int cli_unknown_option(const char *cmd, const char *usage, const char *opt);
/* The next option of table (terminated by a NULL name): its id, CLI_DONE,
 * CLI_HELP (--help or -h) or CLI_ERROR. --verbose is accepted everywhere
 * and handled here. Accepts "--name value" and "--name=value". */
int cli_next(cli_parser_t *p, const cli_option_t *table);

/* The store options most subcommands share. */
typedef struct cli_store_args {
    const char *uri;
    const char *relation; /* NULL: the library's default */
    uint32_t schema_flags; /* OUTBOX_SCHEMA_* from --hlc, --traceparent, --checkpoint, --inbox */
    const char *inbox_relation; /* NULL: outbox_inbox beside the relation */
} cli_store_args_t;

/* Handles OPT_STORE, OPT_RELATION, OPT_HLC, OPT_TRACEPARENT, OPT_CHECKPOINT,
 * OPT_INBOX, OPT_INBOX_RELATION;
 * returns false when id is none of them. */
bool cli_store_option(cli_store_args_t *a, int id, const char *value);

/* -------------------------------------------------- values (args.c) */

/* A decimal integer in [min, max], nothing else (no sign, no spaces). */
bool cli_parse_uint(const char *opt, const char *text, uint64_t min, uint64_t max, uint64_t *out);
/* A duration with a unit ("500ms", "30s"), through the library's parser;
 * allow_zero refuses "0s" when false. */
bool cli_parse_duration(const char *opt, const char *text, bool allow_zero, int64_t *us);
/* An RFC 3339 instant with its offset ("2026-12-04T09:00:00Z",
 * "2026-12-04T10:00:00.5+01:00"), into microseconds since the epoch; years
 * 1970 to 9999. */
bool cli_parse_instant(const char *opt, const char *text, int64_t *us);
/* A non-empty value. */
bool cli_nonempty(const char *cmd, const char *opt, const char *value);
/* Prints "<cmd>: <opt> is required" when value is NULL. */
bool cli_require(const char *cmd, const char *opt, const char *value);
/* A relation name the library accepts (or NULL). */
bool cli_relation_ok(const char *relation);
/* The same for the relation given to option opt. */
bool cli_relation_option_ok(const char *opt, const char *relation);
/* 1 when uri has no scheme at all: no ':' before its first '/' or '?'
 * ("stdout", "/tmp/x.jsonl"). A malformed scheme is not missing. */
bool cli_lacks_scheme(const char *uri);

/* ---------------------------------------------------- output (log.c) */

/* Prints "outbox: " + the message + newline on stderr, keeping it on one
 * line; returns CLI_EXIT_ERROR. */
int cli_error(const char *fmt, ...) OUTBOX_PRINTF(1, 2);
/* The same with a library diagnostic: "outbox: <what>: <d->message>". */
int cli_diag_error(const char *what, int code, const char *message);

/* Sends the core's log to stderr (or the log file), one line each, by
 * default "outbox: 2026-11-30T06:35:13.123Z LEVEL: text" (UTC). Debug lines
 * only when verbose; with quiet, only warnings and errors. */
void cli_logging_init(void);
void cli_set_verbose(bool on);
void cli_set_quiet(bool on);
/* A line of the tool's own in the same log. */
void cli_log(int level, const char *fmt, ...) OUTBOX_PRINTF(2, 3);

enum { CLI_LOG_TEXT, CLI_LOG_LOGFMT, CLI_LOG_JSON };
/* "text", "logfmt" or "json"; false for any other name. */
bool cli_log_set_format(const char *name);
int cli_log_format(void);
/* Log to path (appended, created 0640) instead of stderr; false after
 * printing the error. */
bool cli_log_open_file(const char *path);
/* Opens the log file's path again (after logrotate moved it); a failure is
 * logged to the old file, which stays in use. No-op without a file. */
void cli_log_reopen(void);
void cli_log_close(void);
/* One record: with prefix, "prefix text" on stderr whatever the format
 * (the tool's error lines); without, a log record in the chosen format and
 * place. Secrets masked, control bytes escaped, one write. */
void cli_log_record(int level, const char *prefix, const char *text);

/* systemd's notify protocol (notify.c); no-ops without libsystemd or
 * outside a Type=notify unit. */
bool cli_notify_available(void);
void cli_notify_ready(const char *status);
void cli_notify_status(const char *status);
void cli_notify_stopping(void);
/* The unit's watchdog interval (WatchdogSec=) in us, 0 when none. */
int64_t cli_notify_watchdog_us(void);
void cli_notify_watchdog(void);


/* -------------------------------------------------- stores (store.c) */

/* Checks the relation, then opens the store. Prints the error, with the
 * command that fixes it where there is one (a missing table or database,
 * OUTBOX_EMISSING: schema apply). Only with may_create (schema apply) may
 * the store create a missing database (OUTBOX_OPEN_MUST_EXIST otherwise). */
int cli_open_store(const char *cmd, const cli_store_args_t *a, uint32_t open_flags,
                   bool may_create, outbox_store_t **out);

/* ---------------------------------------------------------- subcommands */

int cli_cmd_schema(int argc, char **argv);
int cli_cmd_stage(int argc, char **argv);
int cli_cmd_relay(int argc, char **argv);
int cli_cmd_stats(int argc, char **argv);
int cli_cmd_replay(int argc, char **argv);
int cli_cmd_purge(int argc, char **argv);
int cli_cmd_drivers(int argc, char **argv);
int cli_cmd_conformance(int argc, char **argv);
int cli_cmd_config(int argc, char **argv);
int cli_cmd_routes(int argc, char **argv);
int cli_cmd_dead(int argc, char **argv);
int cli_cmd_inbox(int argc, char **argv);

/* ------------------------------------------------- routes (cmd_routes.c) */

typedef struct cli_route {
    char *route;
    outbox_stats_t stats;
} cli_route_t;

typedef struct cli_routes {
    cli_route_t *v;
    size_t n, cap;
} cli_routes_t;

/* Every route's counts, sorted by route; the library's code on failure
 * (the store's message says why, except OUTBOX_ENOMEM). */
int cli_routes_read(outbox_store_t *s, cli_routes_t *out);
void cli_routes_free(cli_routes_t *r);
/* Seconds since the oldest pending row was staged, 0 when none is pending. */
long long cli_pending_age_s(const outbox_stats_t *st);
/* A header line and one aligned line per route. */
void cli_routes_print_text(const cli_routes_t *r);
/* "routes":[{...},...] (a member of an object the caller opens and closes). */
void cli_routes_print_json(const cli_routes_t *r);
/* Text from a store on one terminal line: control bytes (C0, DEL, C1) and
 * backslashes escaped (\n, \t, \r, \\, \xNN). */
void cli_put_printable(FILE *f, const char *s);
/* The same as HTML text or an attribute value (<, >, &, " and ' as
 * entities), so a page shows what `outbox dead list` shows; NULL: nothing. */
void cli_put_printable_html(FILE *f, const char *s);
/* us since the epoch as RFC 3339 UTC with microseconds. */
void cli_rfc3339(int64_t us, char out[40]);
/* s as a JSON string (null for NULL). */
void cli_put_json_string(FILE *f, const char *s);

#endif
