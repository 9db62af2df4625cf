/* Opening a store for a subcommand: the arguments checked, and a refusal
 * with the command that fixes it where there is one. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static bool is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
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
    char *masked = tool_mask_uri(a->uri);
    char *uri = masked ? shell_word(masked) : NULL;
    char *cmd = NULL;
    if (uri && asprintf(&cmd, "outbox %s --store %s%s%s%s", action, uri, a->relation ? " --relation " : "",
                        a->relation ? a->relation : "", tail) < 0)
        cmd = NULL;
    free(uri);
    free(masked);
    return cmd;
}

/* The store's refusal, and what to run about it: a missing table or
 * database (OUTBOX_EMISSING) is made by schema apply; anything else about
 * the schema, schema check lists. */
static int schema_error(const char *cmd, const cli_store_args_t *a, int rc, const char *message)
{
    const char *why = message && message[0] ? message : outbox_strerror(rc);
    bool missing = rc == OUTBOX_EMISSING;
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
    if (!cli_require(cmd, "--store", a->uri) || !cli_relation_ok(a->relation) ||
        !cli_relation_option_ok("--inbox-relation", a->inbox_relation))
        return CLI_EXIT_ERROR;
    outbox_store_options_t opts = {
        .struct_size = sizeof opts,
        .relation = a->relation,
        .inbox_relation = a->inbox_relation,
        /* Only schema apply may create the database (SQLite's file). */
        .flags = open_flags | (may_create ? 0 : OUTBOX_OPEN_MUST_EXIST),
    };
    outbox_diag_t d = {0};
    int rc = outbox_store_open(a->uri, &opts, out, &d);
    if (rc != OUTBOX_OK) {
        *out = NULL;
        if (rc == OUTBOX_EMISSING || (rc == OUTBOX_ESCHEMA && !(open_flags & OUTBOX_OPEN_SCHEMA_ONLY)))
            return schema_error(cmd, a, rc, d.message);
        return cli_diag_error(cmd, rc, d.message);
    }
    return CLI_EXIT_OK;
}
