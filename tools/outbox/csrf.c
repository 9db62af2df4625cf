/* Anti-CSRF tokens and the same-origin check of the metrics endpoint's
 * actions (csrf.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "clock.h"
#include "csrf.h"

/* The tokens remembered: a browser that has not been back for this long,
 * or that many sessions later, loads the page again and gets a new one. */
#define N_TOKENS 256
#define TOKEN_LIFE_US (12LL * 3600 * 1000000)

typedef struct token {
    char hex[CLI_CSRF_TOKEN_LEN + 1]; /* "" when the slot is free */
    int64_t issued_us;                 /* monotonic */
} token_t;

struct cli_csrf {
    pthread_mutex_t mu;
    token_t tokens[N_TOKENS];
    size_t next; /* the slot the next token takes: the oldest */
};

cli_csrf_t *cli_csrf_new(void)
{
    cli_csrf_t *c = calloc(1, sizeof *c);
    if (c != NULL)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

void cli_csrf_free(cli_csrf_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_destroy(&c->mu);
    explicit_bzero(c->tokens, sizeof c->tokens);
    free(c);
}

/* 32 lower-case hex digits, nothing else. */
static bool well_formed(const char *s)
{
    if (s == NULL)
        return false;
    size_t i = 0;
    for (; s[i] != '\0' && i <= CLI_CSRF_TOKEN_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == CLI_CSRF_TOKEN_LEN;
}

/* Equal tokens (both well formed), in constant time. */
static bool same_token(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < CLI_CSRF_TOKEN_LEN; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* Whether tok (well formed) is one of ours and alive; c->mu held. Every
 * slot is compared, so the time says nothing of which one matched. */
static bool issued(const cli_csrf_t *c, const char *tok, int64_t now)
{
    bool found = false;
    for (size_t i = 0; i < N_TOKENS; i++) {
        const token_t *t = &c->tokens[i];
        bool alive = t->hex[0] != '\0' && now - t->issued_us < TOKEN_LIFE_US;
        found |= alive & same_token(t->hex, tok);
    }
    return found;
}

static int random_bytes(unsigned char *buf, size_t n)
{
    while (n > 0) {
        ssize_t got = getrandom(buf, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        buf += got;
        n -= (size_t)got;
    }
    return 0;
}

int cli_csrf_token(cli_csrf_t *c, const char *cookie, char out[CLI_CSRF_TOKEN_LEN + 1], bool *fresh)
{
    int64_t now = tool_mono_us();
    *fresh = false;
    pthread_mutex_lock(&c->mu);
    if (well_formed(cookie) && issued(c, cookie, now)) {
        memcpy(out, cookie, CLI_CSRF_TOKEN_LEN + 1);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    unsigned char raw[CLI_CSRF_TOKEN_LEN / 2];
    if (random_bytes(raw, sizeof raw) != 0) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[CLI_CSRF_TOKEN_LEN] = '\0';
    explicit_bzero(raw, sizeof raw);
    token_t *t = &c->tokens[c->next];
    memcpy(t->hex, out, sizeof t->hex);
    t->issued_us = now;
    c->next = (c->next + 1) % N_TOKENS;
    pthread_mutex_unlock(&c->mu);
    *fresh = true;
    return 0;
}

bool cli_csrf_valid(cli_csrf_t *c, const char *cookie, const char *field)
{
    if (!well_formed(cookie) || !well_formed(field))
        return false;
    bool same = same_token(cookie, field);
    pthread_mutex_lock(&c->mu);
    bool ours = issued(c, cookie, tool_mono_us());
    pthread_mutex_unlock(&c->mu);
    return same && ours;
}

/* Whether url is https://HOST or starts with https://HOST/ (with_path). */
static bool names_host(const char *url, const char *host, size_t host_len, bool with_path)
{
    static const char scheme[] = "https://";
    if (strncasecmp(url, scheme, sizeof scheme - 1) != 0)
        return false;
    url += sizeof scheme - 1;
    if (strncasecmp(url, host, host_len) != 0)
        return false;
    url += host_len;
    return url[0] == '\0' || (with_path && url[0] == '/');
}

const char *cli_csrf_origin_problem(const char *host, const char *origin, const char *referer,
                                    const char *fetch_site)
{
    if (host == NULL || host[0] == '\0')
        return "no Host header";
    /* Browsers leave the default port out of both. */
    size_t host_len = strlen(host);
    if (host_len > 4 && strcmp(host + host_len - 4, ":443") == 0)
        host_len -= 4;
    if (origin != NULL && !names_host(origin, host, host_len, false))
        return "its Origin is not this endpoint";
    if (origin == NULL && referer != NULL && !names_host(referer, host, host_len, true))
        return "its Referer is not this endpoint";
    if (fetch_site != NULL && strcmp(fetch_site, "same-origin") != 0)
        return "Sec-Fetch-Site says the request came from another site";
    return NULL;
}
