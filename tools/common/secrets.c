/* The secrets of the URIs on a tool's command line, and text with them
 * masked: every line outbox, outbox-bench and outbox-inbox-bench print goes
 * through it (the CLI's log.c, say.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <outbox/outbox.h>

#include "secrets.h"

/* ------------------------------------------------------------ secrets */

/* Passwords and other secrets of the URIs on the command line. Every line
 * a tool prints has them replaced by "***", whatever part of the library
 * or which driver the text comes from. Registered while the arguments are
 * parsed, before any other thread runs; read-only afterwards. */
static char **secrets;
static size_t n_secrets;

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

int tool_hex_digit(char c)
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
        if (s[i] == '%' && i + 2 < len && tool_hex_digit(s[i + 1]) >= 0 && tool_hex_digit(s[i + 2]) >= 0) {
            plain[w++] = (char)(tool_hex_digit(s[i + 1]) << 4 | tool_hex_digit(s[i + 2]));
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

void tool_note_secret(const char *secret)
{
    if (secret != NULL)
        add_secret_forms(secret, strlen(secret));
}

void tool_note_secrets(const char *uri)
{
    /* The library's own spans, so the backstop hides what its messages do. */
    outbox_uri_secrets(uri, note_secret, NULL);
}

void tool_forget_secrets(void)
{
    for (size_t i = 0; i < n_secrets; i++)
        free(secrets[i]);
    free(secrets);
    secrets = NULL;
    n_secrets = 0;
}

char *tool_mask_uri(const char *uri)
{
    /* A secret is at least one byte and becomes three. */
    size_t size = 3 * strlen(uri) + 8;
    char *out = malloc(size);
    return out ? outbox_uri_mask(uri, out, size) : NULL;
}

/* text with every registered secret replaced by "***"; malloc'd. */
char *tool_redact(const char *text)
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
