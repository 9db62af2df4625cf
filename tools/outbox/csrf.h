/* Protection of the metrics endpoint's actions (status_dead.c) against
 * requests another site makes a logged-in browser send:
 *
 *  - a token per browser session: 128 bits from getrandom(2), set in a
 *    cookie (CLI_CSRF_COOKIE, SameSite=Strict, Secure, HttpOnly) and
 *    echoed in every form; a POST is taken only when its form field and
 *    its cookie carry the same token and the server issued that token
 *    (double submit, checked against the server's own list, so a cookie
 *    planted by someone else is worth nothing);
 *  - the request's origin: Origin (or Referer without it) must name the
 *    endpoint itself when present, and Sec-Fetch-Site must say
 *    same-origin when present.
 *
 * Thread-safe: one mutex guards the list of tokens. Tokens never reach a
 * log line. */
#ifndef OUTBOX_CLI_CSRF_H
#define OUTBOX_CLI_CSRF_H

#include <stdbool.h>

/* 128 bits as lower-case hex. */
#define CLI_CSRF_TOKEN_LEN 32
/* The __Host- prefix makes browsers take the cookie only from this very
 * origin over HTTPS, with Path=/ and no Domain. */
#define CLI_CSRF_COOKIE "__Host-outbox_csrf"

typedef struct cli_csrf cli_csrf_t;

/* NULL when out of memory. */
cli_csrf_t *cli_csrf_new(void);
void cli_csrf_free(cli_csrf_t *c);

/* The token a page's forms carry: the cookie's (cookie may be NULL) when
 * this server issued it and it has not expired, else a fresh one, with
 * *fresh set (the response must then set the cookie). -1 when the random
 * source fails. */
int cli_csrf_token(cli_csrf_t *c, const char *cookie, char out[CLI_CSRF_TOKEN_LEN + 1], bool *fresh);

/* Whether a POST's cookie and form field (either may be NULL) carry the
 * same token, one this server issued and that has not expired. Compared
 * in a time that does not depend on where they differ. */
bool cli_csrf_valid(cli_csrf_t *c, const char *cookie, const char *field);

/* NULL when a request with these headers (each NULL when absent) comes
 * from https://HOST, HOST being its own Host header; else why not, in a
 * few words. */
const char *cli_csrf_origin_problem(const char *host, const char *origin, const char *referer,
                                    const char *fetch_site);

#endif
