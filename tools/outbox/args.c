/* Command-line parsing: a small long-option parser and strict value
 * parsers. Unlike getopt_long it never accepts an abbreviated option, and
 * every refusal names the command and the option. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_parser_init(cli_parser_t *p, const char *cmd, const char *usage, int argc, char **argv)
{
    p->cmd = cmd;
    p->usage = usage;
    p->argc = argc;
    p->argv = argv;
    p->next = 1;
    p->value = NULL;
}

/* The line of a --help text that shows how cmd is called, from "outbox"
 * on: "usage: outbox stage --store URI ..." or, for a second form,
 * "       outbox schema check ...". */
static const char *usage_line(const char *usage, const char *cmd, size_t *len)
{
    size_t clen = strlen(cmd);
    for (const char *line = usage; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *o = line;
        if (strncmp(o, "usage:", 6) == 0)
            o += 6;
        while (o < line + n && *o == ' ')
            o++;
        size_t rest = n - (size_t)(o - line);
        if (rest >= 7 + clen && strncmp(o, "outbox ", 7) == 0 && strncmp(o + 7, cmd, clen) == 0 &&
            (rest == 7 + clen || o[7 + clen] == ' ')) {
            *len = rest;
            return o;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

int cli_unknown_option(const char *cmd, const char *usage, const char *opt)
{
    size_t len = 0;
    const char *line = usage ? usage_line(usage, cmd, &len) : NULL;
    if (!line)
        return cli_error("unknown option %s for %s (try outbox %s --help)", opt, cmd, cmd);
    return cli_error("unknown option %s for %s; usage: %.*s", opt, cmd, (int)len, line);
}

static const cli_option_t *find_option(const cli_option_t *table, const char *name, size_t len)
{
    for (const cli_option_t *o = table; o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

int cli_next(cli_parser_t *p, const cli_option_t *table)
{
    for (;;) {
        if (p->next >= p->argc)
            return CLI_DONE;
        const char *arg = p->argv[p->next++];
        p->value = NULL;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return CLI_HELP;
        if (strcmp(arg, "--verbose") == 0) {
            cli_set_verbose(true);
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (arg[0] == '-' && arg[1] != '\0') {
                cli_unknown_option(p->cmd, p->usage, arg);
                return CLI_ERROR;
            }
            cli_error("%s: unexpected argument \"%s\"", p->cmd, arg);
            return CLI_ERROR;
        }

        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_option_t *o = find_option(table, name, len);
        if (!o) {
            char *opt = strndup(arg, len + 2);
            cli_unknown_option(p->cmd, p->usage, opt ? opt : arg);
            free(opt);
            return CLI_ERROR;
        }

        if (!o->has_value) {
            if (eq) {
                cli_error("%s: option --%s takes no value", p->cmd, o->name);
                return CLI_ERROR;
            }
            return o->id;
        }
        if (eq) {
            p->value = eq + 1;
            return o->id;
        }
        /* A following "--option" is taken for a forgotten value, not as the
         * value itself; "--route=--odd" still works. */
        if (p->next >= p->argc ||
            (strncmp(p->argv[p->next], "--", 2) == 0 && p->argv[p->next][2] != '\0')) {
            cli_error("%s: option --%s needs a value", p->cmd, o->name);
            return CLI_ERROR;
        }
        p->value = p->argv[p->next++];
        return o->id;
    }
}

bool cli_store_option(cli_store_args_t *a, int id, const char *value)
{
    switch (id) {
    case OPT_STORE:
        a->uri = value;
        tool_note_secrets(value);
        return true;
    case OPT_RELATION: a->relation = value; return true;
    case OPT_HLC: a->schema_flags |= OUTBOX_SCHEMA_HLC; return true;
    case OPT_TRACEPARENT: a->schema_flags |= OUTBOX_SCHEMA_TRACEPARENT; return true;
    case OPT_CHECKPOINT: a->schema_flags |= OUTBOX_SCHEMA_CHECKPOINT; return true;
    case OPT_INBOX: a->schema_flags |= OUTBOX_SCHEMA_INBOX; return true;
    case OPT_INBOX_RELATION: a->inbox_relation = value; return true;
    default: return false;
    }
}

bool cli_parse_uint(const char *opt, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *what = min > 0 ? "a positive integer" : "a non-negative integer";
    if (text[0] < '0' || text[0] > '9') {
        cli_error("%s: \"%s\" is not %s", opt, text, what);
        return false;
    }
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end != '\0') {
        cli_error("%s: \"%s\" is not %s", opt, text, what);
        return false;
    }
    if (errno == ERANGE || v > max) {
        cli_error("%s: \"%s\" is too large (at most %" PRIu64 ")", opt, text, max);
        return false;
    }
    if (v < min) {
        cli_error("%s: \"%s\" is not %s", opt, text, what);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_duration(const char *opt, const char *text, bool allow_zero, int64_t *us)
{
    outbox_diag_t d = {0};
    int rc = outbox_parse_duration(text, us, &d);
    if (rc != OUTBOX_OK) {
        cli_diag_error(opt, rc, d.message);
        return false;
    }
    if (*us < 0 || (*us == 0 && !allow_zero)) {
        cli_error("%s: duration \"%s\" must be greater than zero", opt, text);
        return false;
    }
    return true;
}

/* n decimal digits at *p, advancing it; -1 when they are not there. */
static int digits(const char **p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return -1;
        v = v * 10 + (**p - '0');
    }
    return v;
}

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar: whole
 * 400-year eras of 146097 days, then days within the era counted from
 * March, so the leap day falls at the end of its year. */
static int64_t days_since_epoch(int y, int m, int d)
{
    int64_t yy = m <= 2 ? y - 1 : y;
    int64_t era = yy / 400;
    int64_t year_of_era = yy - era * 400;
    int64_t day_of_year = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static int days_in_month(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

/* The fraction and offset after the seconds: *frac_us and *offset_s, or
 * false. */
static bool instant_tail(const char *p, int64_t *frac_us, int *offset_s)
{
    *frac_us = 0;
    if (*p == '.') {
        p++;
        int n = 0;
        for (; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 6)
                *frac_us = *frac_us * 10 + (*p - '0');
        if (n == 0 || n > 9)
            return false;
        for (; n < 6; n++)
            *frac_us *= 10;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *offset_s = 0;
        return true;
    }
    if (*p != '+' && *p != '-')
        return false;
    int sign = *p++ == '-' ? -1 : 1;
    int oh = digits(&p, 2);
    int om = *p == ':' ? (p++, digits(&p, 2)) : -1;
    if (oh < 0 || oh > 23 || om < 0 || om > 59 || *p != '\0')
        return false;
    *offset_s = sign * (oh * 3600 + om * 60);
    return true;
}

bool cli_parse_instant(const char *opt, const char *text, int64_t *us)
{
    const char *p = text;
    int y = digits(&p, 4), mo = *p == '-' ? (p++, digits(&p, 2)) : -1;
    int d = *p == '-' ? (p++, digits(&p, 2)) : -1;
    int ok = y >= 0 && mo >= 0 && d >= 0 && (*p == 'T' || *p == 't');
    int h = ok ? (p++, digits(&p, 2)) : -1;
    int mi = *p == ':' ? (p++, digits(&p, 2)) : -1;
    int sec = *p == ':' ? (p++, digits(&p, 2)) : -1;
    int64_t frac = 0;
    int offset = 0;
    ok = ok && h >= 0 && mi >= 0 && sec >= 0 && instant_tail(p, &frac, &offset);
    if (!ok) {
        cli_error("%s: \"%.60s\" is not an RFC 3339 time such as 2026-12-04T09:00:00Z (the "
                  "offset, Z or +01:00, is required)",
                  opt, text);
        return false;
    }
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59 || sec > 59) {
        cli_error("%s: \"%.60s\" is not a valid time between 1970 and 9999", opt, text);
        return false;
    }
    int64_t s = days_since_epoch(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset;
    if (s < 0) {
        cli_error("%s: \"%.60s\" is before 1970", opt, text);
        return false;
    }
    *us = s * 1000000 + frac;
    return true;
}

bool cli_nonempty(const char *cmd, const char *opt, const char *value)
{
    if (value && value[0] == '\0') {
        cli_error("%s: %s must not be empty", cmd, opt);
        return false;
    }
    return true;
}

bool cli_require(const char *cmd, const char *opt, const char *value)
{
    if (!value) {
        cli_error("%s: %s is required", cmd, opt);
        return false;
    }
    return cli_nonempty(cmd, opt, value);
}

bool cli_relation_ok(const char *relation)
{
    return cli_relation_option_ok("--relation", relation);
}

bool cli_relation_option_ok(const char *opt, const char *relation)
{
    if (!relation || outbox_relation_valid(relation))
        return true;
    cli_error("%s: \"%s\" is not a valid relation name (letters, digits and _, not "
              "starting with a digit, optionally schema.table)",
              opt, relation);
    return false;
}

bool cli_lacks_scheme(const char *uri)
{
    const char *colon = strchr(uri, ':');
    return !colon || colon == uri || (size_t)(colon - uri) >= strcspn(uri, "/?");
}
