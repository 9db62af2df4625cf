/* What every subcommand needs: error lines with secrets masked, the clock,
 * and opening a store. The log is in log.c. */
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "outbox/kit.h"


/* ------------------------------------------------------------ secrets */

/* Passwords and other secrets of the URIs on the command line. Every line
 * the tool prints has them replaced by "***", whatever part of the library
 * or which driver the text comes from. Registered while the arguments are
 * parsed, before any other thread runs; read-only afterwards. */
static char **secrets;
static size_t n_secrets;

static bool is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static void add_secret(const char *s, size_t len)
{
    if (len == 0)
        return;
    for (size_t i = 0; i < n_secrets; i++)
        if (strlen(secrets[i]) == len && memcmp(secrets[i], s, len) == 0)
            return;
    char **grown = realloc(secrets, (n_secrets + 1) * sizeof *secrets);
    if (!grown)
        return;
    secrets = grown;
    char *copy = strndup(s, len);
    if (copy)
        secrets[n_secrets++] = copy;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A secret as written, percent-decoded, and unquoted: a message may show
 * any of them. */
static void add_secret_forms(const char *s, size_t len)
{
    add_secret(s, len);
    char *plain = malloc(len + 1);
    if (!plain)
        return;
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            plain[w++] = (char)(hex_value(s[i + 1]) << 4 | hex_value(s[i + 2]));
            i += 2;
        } else {
            plain[w++] = s[i];
        }
    }
    add_secret(plain, w);
    if (len >= 2 && s[0] == '\'') {
        w = 0;
        for (size_t i = 1; i < len && s[i] != '\''; i++)
            plain[w++] = s[i] == '\\' && i + 1 < len ? s[++i] : s[i];
        add_secret(plain, w);
    }
    free(plain);
}

static void note_secret(void *ctx, const char *secret, size_t len)
{
    (void)ctx;
    add_secret_forms(secret, len);
}

void cli_note_secrets(const char *uri)
{
    /* The library's own spans, so the backstop hides what its messages do. */
    outbox_uri_secrets(uri, note_secret, NULL);
}

void cli_forget_secrets(void)
{
    for (size_t i = 0; i < n_secrets; i++)
        free(secrets[i]);
    free(secrets);
    secrets = NULL;
    n_secrets = 0;
}

char *cli_mask_uri(const char *uri)
{
    /* A secret is at least one byte and becomes three. */
    size_t size = 3 * strlen(uri) + 8;
    char *out = malloc(size);
    return out ? outbox_uri_mask(uri, out, size) : NULL;
}

/* text with every registered secret replaced by "***"; malloc'd. */
char *cli_redact(const char *text)
{
    size_t n = strlen(text);
    /* Each replacement turns at least one byte into three. */
    char *out = malloc(3 * n + 1);
    if (!out)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t hit = 0;
        for (size_t k = 0; k < n_secrets; k++) {
            size_t len = strlen(secrets[k]);
            if (len > hit && len <= n - i && memcmp(text + i, secrets[k], len) == 0)
                hit = len;
        }
        if (hit) {
            memcpy(out + w, "***", 3);
            w += 3;
            i += hit;
        } else {
            out[w++] = text[i++];
        }
    }
    out[w] = '\0';
    return out;
}

/* ------------------------------------------------------------- output */

/* Writes prefix + text + "\n" on stderr as one write, with the URIs'
 * secrets masked and control characters (a newline in a library message or
 * a user's value) made visible, so a message is always exactly one line. */
static void put_line(const char *prefix, const char *text)
{
    cli_log_record(OUTBOX_LOG_ERROR, prefix, text);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    int rc = vasprintf(&msg, fmt, ap);
    va_end(ap);
    put_line("outbox: ", rc < 0 ? "out of memory" : msg);
    if (rc >= 0)
        free(msg);
    return CLI_EXIT_ERROR;
}

int cli_diag_error(const char *what, int code, const char *message)
{
    const char *why = message && message[0] ? message : outbox_strerror(code);
    if (what)
        return cli_error("%s: %s", what, why);
    return cli_error("%s", why);
}

int64_t cli_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------- stores */

bool cli_lacks_scheme(const char *uri)
{
    const char *colon = strchr(uri, ':');
    return !colon || colon == uri || (size_t)(colon - uri) >= strcspn(uri, "/?");
}

/* text as one word for a POSIX shell, for a command to copy: as it is when
 * it holds nothing a shell would read otherwise, else single-quoted. */
static char *shell_word(const char *text)
{
    static const char safe[] = "_@%+=:,./-~";
    bool plain = text[0] != '\0';
    for (const char *c = text; *c && plain; c++)
        plain = is_alpha(*c) || (*c >= '0' && *c <= '9') || strchr(safe, *c);
    size_t n = strlen(text);
    char *out = malloc(4 * n + 3);
    if (!out)
        return NULL;
    if (plain)
        return strcpy(out, text);
    char *w = out;
    *w++ = '\'';
    for (const char *c = text; *c; c++) {
        if (*c == '\'') {
            memcpy(w, "'\\''", 4);
            w += 4;
        } else {
            *w++ = *c;
        }
    }
    *w++ = '\'';
    *w = '\0';
    return out;
}

/* "outbox schema apply --store URI [--relation R] --yes-i-know" and the
 * like, with the URI masked and quoted for a shell. */
static char *fix_command(const char *action, const cli_store_args_t *a, const char *tail)
{
    char *masked = cli_mask_uri(a->uri);
    char *uri = masked ? shell_word(masked) : NULL;
    char *cmd = NULL;
    if (uri && asprintf(&cmd, "outbox %s --store %s%s%s%s", action, uri, a->relation ? " --relation " : "",
                        a->relation ? a->relation : "", tail) < 0)
        cmd = NULL;
    free(uri);
    free(masked);
    return cmd;
}

/* The database file a sqlite: URI names, percent-decoded; NULL when uri is
 * not such a URI or names no file (the driver then says what is wrong). */
static char *sqlite_path(const char *uri)
{
    if (strncasecmp(uri, "sqlite:", 7) != 0)
        return NULL;
    const char *p = uri + 7;
    if (p[0] == '/' && p[1] == '/') {
        if (p[2] != '/')
            return NULL; /* a host part: refused by the driver */
        p += 2;
    }
    size_t n = strcspn(p, "?");
    char *path = malloc(n + 1);
    if (!path)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '%') {
            int hi = i + 2 < n ? hex_value(p[i + 1]) : -1, lo = i + 2 < n ? hex_value(p[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(path);
                return NULL;
            }
            path[w++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            path[w++] = p[i];
        }
    }
    path[w] = '\0';
    if (w == 0 || strcmp(path, ":memory:") == 0) {
        free(path);
        return NULL;
    }
    return path;
}

/* A SQLite database named by the store URI must exist, except for schema
 * apply, which creates it in a directory that must. The driver would
 * create the file for any schema-only open (schema check as well) and
 * otherwise only say "unable to open database file". */
static int check_sqlite_file(const char *cmd, const cli_store_args_t *a, bool may_create)
{
    char *path = sqlite_path(a->uri);
    if (!path)
        return CLI_EXIT_OK;
    int ex = CLI_EXIT_OK;
    struct stat st;
    if (may_create) {
        char *copy = strdup(path);
        const char *dir = copy ? dirname(copy) : ".";
        if (stat(dir, &st) != 0 && errno == ENOENT)
            ex = cli_error("%s: directory %s does not exist", cmd, dir);
        free(copy);
    } else if (stat(path, &st) != 0 && errno == ENOENT) {
        char *fix = fix_command("schema apply", a, " --yes-i-know");
        ex = cli_error("%s: database file %s does not exist: create it with `%s`", cmd, path,
                       fix ? fix : "outbox schema apply");
        free(fix);
    }
    free(path);
    return ex;
}

/* The store's refusal, and what to run about it: a missing table is made by
 * schema apply; anything else about the schema, schema check lists. */
static int schema_error(const char *cmd, const cli_store_args_t *a, int rc, const char *message)
{
    const char *why = message && message[0] ? message : outbox_strerror(rc);
    bool missing = strstr(why, "not found") || strstr(why, "does not exist");
    char *fix = missing ? fix_command("schema apply", a, " --yes-i-know") : fix_command("schema check", a, "");
    int ex;
    if (!fix)
        ex = cli_error("%s: %s", cmd, why);
    else if (missing)
        ex = cli_error("%s: %s: create it with `%s`", cmd, why, fix);
    else
        ex = cli_error("%s: %s: `%s` lists what is missing", cmd, why, fix);
    free(fix);
    return ex;
}

int cli_open_store(const char *cmd, const cli_store_args_t *a, uint32_t open_flags,
                   bool may_create, outbox_store_t **out)
{
    *out = NULL;
    if (!cli_require(cmd, "--store", a->uri) || !cli_relation_ok(a->relation))
        return CLI_EXIT_ERROR;
    int ex = check_sqlite_file(cmd, a, may_create);
    if (ex != CLI_EXIT_OK)
        return ex;
    outbox_store_options_t opts = {
        .struct_size = sizeof opts,
        .relation = a->relation,
        .flags = open_flags,
    };
    outbox_diag_t d = {0};
    int rc = outbox_store_open(a->uri, &opts, out, &d);
    if (rc != OUTBOX_OK) {
        *out = NULL;
        if (rc == OUTBOX_ESCHEMA && !(open_flags & OUTBOX_OPEN_SCHEMA_ONLY))
            return schema_error(cmd, a, rc, d.message);
        return cli_diag_error(cmd, rc, d.message);
    }
    return CLI_EXIT_OK;
}
