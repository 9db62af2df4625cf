/* URIs (core/uri.c) and what shows them (the kit's outbox_kit_uri_show_builtin and
 * outbox_kit_uri_redact_builtin): a parsed URI's parts are consistent with its text;
 * the shown URI is one line of UTF-8 that does not depend on the password
 * or on secret parameters' values at all; redacted text holds none of the
 * secrets; and a refusal is one line that does not quote the password. */
#include <ctype.h>
#include <strings.h>

#include "fuzz.h"
#include "outbox_int.h"
#include "outbox/kit.h"

/* Whether a secret can be looked for in text by plain search: shorter
 * ones are only masked as whole words, and '*', '?' and spaces are what
 * masking and one-line text put in, so they could rebuild a secret from
 * the text around it. */
static int searchable(const char *s, size_t n)
{
    if (n < 4)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '*' || c == '?')
            return 0;
    }
    return 1;
}

static int contains(const char *hay, const char *needle, size_t n)
{
    for (const char *p = hay; *p; p++)
        if (strncmp(p, needle, n) == 0)
            return 1;
    return 0;
}

static size_t occurrences(const char *hay, const char *needle, size_t n)
{
    size_t k = 0;
    for (const char *p = hay; *p; p++)
        k += strncmp(p, needle, n) == 0;
    return k;
}

static void check_parsed(const char *text, const outbox_uri_t *u)
{
    FUZZ_CHECK(u->raw != NULL && strcmp(u->raw, text) == 0);
    size_t sl = strlen(u->scheme);
    FUZZ_CHECK(sl > 0 && strncasecmp(u->scheme, text, sl) == 0 && text[sl] == ':');
    for (size_t i = 0; i < sl; i++)
        FUZZ_CHECK(!(u->scheme[i] >= 'A' && u->scheme[i] <= 'Z'));
    FUZZ_CHECK(u->port >= 0 && u->port <= 65535);
    FUZZ_CHECK(u->n_params == 0 || u->params != NULL);
    for (size_t i = 0; i < u->n_params; i++)
        FUZZ_CHECK(u->params[i].key && u->params[i].key[0] && u->params[i].value);

    /* The shown URI must not change when only the secrets do. */
    char shown[OUTBOX_MESSAGE_MAX], other[OUTBOX_MESSAGE_MAX];
    outbox_kit_uri_show_builtin(u, shown, sizeof shown);
    FUZZ_CHECK(strlen(shown) < sizeof shown);
    FUZZ_CHECK(outbox_kit_utf8_valid(shown, strlen(shown)) && fuzz_one_line(shown));
    outbox_uri_t changed = *u;
    outbox_uri_param_t *params = calloc(u->n_params + 1, sizeof *params);
    FUZZ_CHECK(params != NULL);
    for (size_t i = 0; i < u->n_params; i++) {
        params[i] = u->params[i];
        if (outbox_kit_secret_key(params[i].key))
            params[i].value = "another secret";
    }
    changed.params = params;
    if (changed.password)
        changed.password = "another password";
    outbox_kit_uri_show_builtin(&changed, other, sizeof other);
    FUZZ_CHECK(strcmp(shown, other) == 0);
    free(params);

    /* A client library's message that quotes the URI, redacted. */
    char red[OUTBOX_MESSAGE_MAX];
    outbox_kit_uri_redact_builtin(u, text, red, sizeof red);
    FUZZ_CHECK(outbox_kit_utf8_valid(red, strlen(red)) && fuzz_one_line(red));
    if (u->password && searchable(u->password, strlen(u->password)))
        FUZZ_CHECK(!contains(red, u->password, strlen(u->password)));
    const char *raw_pw = NULL;
    size_t raw_len = outbox_kit_raw_password_(u->raw, &raw_pw);
    if (raw_len && searchable(raw_pw, raw_len))
        FUZZ_CHECK(!contains(red, raw_pw, raw_len));
    for (size_t i = 0; i < u->n_params; i++) {
        const char *v = u->params[i].value;
        if (outbox_kit_secret_key(u->params[i].key) && searchable(v, strlen(v)))
            FUZZ_CHECK(!contains(red, v, strlen(v)));
    }
}

/* Whether the secret pw[0..n) of text shows in message. Looked for only
 * where it appears once in the text, has an upper-case letter and is not
 * in the messages' own words, so finding it means it was copied from the
 * text. */
static int shows_secret(const char *text, const char *message, const char *pw, size_t n)
{
    if (n == 0 || !searchable(pw, n) || occurrences(text, pw, n) != 1)
        return 0;
    /* Letters, digits and what no message puts beside the text it quotes
     * (quotes, brackets, dots, colons): a match is then not made up of
     * the message's own characters. */
    int upper = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)pw[i]) && !strchr("#@!$+,;~-_&=/", pw[i]))
            return 0;
        upper |= pw[i] >= 'A' && pw[i] <= 'Z';
    }
    if (!upper || contains("invalid IPv6 address (a NUL byte) URI", pw, n))
        return 0;
    if (!contains(message, pw, n))
        return 0;
    fprintf(stderr, "secret \"%.*s\" shown in: %s\n", (int)n, pw, message);
    return 1;
}

/* A refusal quotes the URI with the password and the values of secret
 * parameters (NAME=VALUE after '?', '&', ';', ' ' or ':', NAME of letters,
 * digits, '_', '-' and '.', VALUE up to '&' or a space, as in URIs and
 * libpq's key=value strings) masked. Checked up to the first quoted value. */
static void check_refusal(const char *text, const outbox_diag_t *d)
{
    size_t len = strlen(d->message);
    FUZZ_CHECK(len > 0 && len < OUTBOX_MESSAGE_MAX && fuzz_one_line(d->message));
    const char *pw = NULL;
    size_t n = outbox_kit_raw_password_(text, &pw);
    FUZZ_CHECK(!shows_secret(text, d->message, pw, n));
    for (size_t i = 0; text[i]; i++) {
        if (i > 0 && !strchr("?&; :", text[i - 1]))
            continue;
        size_t k = i;
        while (isalnum((unsigned char)text[k]) || (text[k] && strchr("_-.", text[k])))
            k++;
        char name[64];
        if (k == i || k - i >= sizeof name)
            continue;
        memcpy(name, text + i, k - i);
        name[k - i] = '\0';
        size_t v = k + strspn(text + k, " ");
        if (text[v] != '=' || !outbox_kit_secret_key(name))
            continue;
        v += 1 + strspn(text + v + 1, " ");
        if (text[v] == '\'')
            break; /* a quoted libpq value: where it ends is libpq's business */
        size_t e = v + strcspn(text + v, "& ");
        FUZZ_CHECK(!shows_secret(text, d->message, text + v, e - v));
        /* What a secret's value holds is no parameter of its own. */
        if (e > i)
            i = e - 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstring(data, size);
    if (!text)
        return 0;
    outbox_uri_owned_t u;
    outbox_diag_t d = {0};
    int rc = outbox_uri_parse(text, &u, &d);
    if (rc == OUTBOX_OK) {
        check_parsed(text, &u.uri);
        outbox_uri_free(&u);
    } else {
        FUZZ_CHECK(rc == OUTBOX_EINVAL && d.code == rc);
        FUZZ_CHECK(u.storage == NULL && u.params == NULL && u.uri.scheme == NULL);
        check_refusal(text, &d);
    }
    free(text);
    return 0;
}
