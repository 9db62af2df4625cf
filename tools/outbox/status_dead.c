/* The status page's dead letters: a page per route listing its dead
 * events, and the replay actions (status_dead.h). */
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "cli.h"
#include "csrf.h"
#include "status_dead.h"

/* Dead events per page. */
#define PAGE_SIZE 50
/* The largest form taken: a token and an event id need a tenth of it. */
#define FORM_MAX 1024

static const char read_only_why[] = "read-only: actions need TLS and a user on the metrics endpoint";

typedef struct dead_route {
    cli_metrics_route_t cfg;
    pthread_mutex_t mu;
    outbox_store_t *store; /* under mu; NULL until first used, or after a failure */
} dead_route_t;

typedef struct cli_dead_pages {
    dead_route_t *routes;
    size_t n;
    bool actions; /* TLS and a user: the replay buttons exist */
    char *user;   /* NULL: no authentication */
    cli_csrf_t *csrf;
} cli_dead_pages_t;

enum { PAGE, REPLAY, REPLAY_ALL };

static const struct {
    const char *suffix;
    int kind;
} suffixes[] = {
    {"/dead/replay-all", REPLAY_ALL},
    {"/dead/replay", REPLAY},
    {"/dead", PAGE},
};

/* A POST being read: what the access handler keeps between its calls. */
typedef struct dead_req {
    size_t route;
    int kind;
    size_t len;
    bool too_big;
    char body[FORM_MAX + 1];
} dead_req_t;

/* ------------------------------------------------------------- life */

static void *pages_open(const cli_metrics_route_t *routes, size_t n, bool tls, const char *user)
{
    cli_dead_pages_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->routes = calloc(n ? n : 1, sizeof *d->routes);
    d->csrf = cli_csrf_new();
    d->user = user ? strdup(user) : NULL;
    if (d->routes == NULL || d->csrf == NULL || (user != NULL && d->user == NULL)) {
        free(d->routes);
        cli_csrf_free(d->csrf);
        free(d->user);
        free(d);
        return NULL;
    }
    d->n = n;
    d->actions = tls && user != NULL;
    for (size_t i = 0; i < n; i++) {
        d->routes[i].cfg = routes[i];
        pthread_mutex_init(&d->routes[i].mu, NULL);
    }
    return d;
}

static void pages_close(void *pages)
{
    cli_dead_pages_t *d = pages;
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->n; i++) {
        outbox_store_close(d->routes[i].store);
        pthread_mutex_destroy(&d->routes[i].mu);
    }
    free(d->routes);
    cli_csrf_free(d->csrf);
    free(d->user);
    free(d);
}

static void pages_completed(void **state)
{
    free(*state);
    *state = NULL;
}

/* --------------------------------------------------------------- text */

/* s percent-encoded: only unreserved characters stay (so the result is
 * also safe in an HTML attribute). */
static void put_pct(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '.' || c == '_' || c == '~')
            fputc(c, f);
        else
            fprintf(f, "%%%02X", c);
    }
}

static void put_path(FILE *f, const char *route)
{
    fputs("/routes/", f);
    put_pct(f, route);
    fputs("/dead", f);
}

/* Decodes one application/x-www-form-urlencoded component [s, end) into
 * out; false when it does not fit, is malformed or holds a NUL. */
static bool form_decode(const char *s, const char *end, char *out, size_t size)
{
    size_t n = 0;
    for (; s < end; s++) {
        int c = (unsigned char)*s;
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (end - s < 3)
                return false;
            int hi = tool_hex_digit(s[1]), lo = tool_hex_digit(s[2]);
            if (hi < 0 || lo < 0)
                return false;
            c = hi * 16 + lo;
            s += 2;
        }
        if (c == 0 || n + 1 >= size)
            return false;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return true;
}

/* The first field name of the form body, decoded into out; false when it
 * is absent or does not decode into size bytes. */
static bool form_get(const char *body, const char *name, char *out, size_t size)
{
    const char *p = body;
    while (*p) {
        const char *amp = strchr(p, '&');
        const char *end = amp ? amp : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        char key[32];
        if (eq != NULL && form_decode(p, eq, key, sizeof key) && strcmp(key, name) == 0)
            return form_decode(eq + 1, end, out, size);
        p = amp ? amp + 1 : end;
    }
    return false;
}

/* ---------------------------------------------------------- responses */

typedef struct header {
    const char *name, *value;
} header_t;

/* Queues body (malloc'd, taken; NULL: out of memory) with the headers
 * every answer of these pages has, and extra. */
static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                              size_t len, const header_t *extra, size_t n_extra)
{
    if (body == NULL)
        return MHD_NO;
    struct MHD_Response *res = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (res == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", type);
    MHD_add_response_header(res, "Cache-Control", "no-store");
    MHD_add_response_header(res, "X-Content-Type-Options", "nosniff");
    /* The buttons change data: no other site may frame them. */
    MHD_add_response_header(res, "X-Frame-Options", "DENY");
    MHD_add_response_header(res, "Content-Security-Policy",
                            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                            "frame-ancestors 'none'; base-uri 'none'");
    MHD_add_response_header(res, "Referrer-Policy", "same-origin");
    for (size_t i = 0; i < n_extra; i++)
        MHD_add_response_header(res, extra[i].name, extra[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, status, res);
    MHD_destroy_response(res);
    return ret;
}

static enum MHD_Result text(struct MHD_Connection *conn, unsigned status, const header_t *extra,
                            size_t n_extra, const char *fmt, ...) OUTBOX_PRINTF(5, 6);

/* A one-line text/plain answer. */
static enum MHD_Result text(struct MHD_Connection *conn, unsigned status, const header_t *extra,
                            size_t n_extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = NULL;
    int n = vasprintf(&body, fmt, ap);
    va_end(ap);
    if (n < 0)
        return MHD_NO;
    return answer(conn, status, "text/plain; charset=utf-8", body, (size_t)n, extra, n_extra);
}

static enum MHD_Result not_allowed(struct MHD_Connection *conn, const char *allow)
{
    header_t h = {"Allow", allow};
    return text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, &h, 1, "method not allowed: use %s\n", allow);
}

/* "user NAME from ADDRESS", for the log. */
static void who(const cli_dead_pages_t *d, struct MHD_Connection *conn, char *buf, size_t size)
{
    char host[NI_MAXHOST] = "?";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci != NULL && ci->client_addr != NULL) {
        socklen_t len = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                : sizeof(struct sockaddr_in);
        if (getnameinfo(ci->client_addr, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) != 0)
            snprintf(host, sizeof host, "?");
    }
    if (d->user != NULL)
        snprintf(buf, size, "user %s from %s", d->user, host);
    else
        snprintf(buf, size, "an anonymous client from %s", host);
}

/* -------------------------------------------------------------- routes */

/* The route and the kind of page url (under /routes/) names; false when
 * none. */
static bool parse_url(const cli_dead_pages_t *d, const char *url, size_t *route, int *kind)
{
    const char *rest = url + 8;
    size_t len = strlen(rest);
    for (size_t s = 0; s < sizeof suffixes / sizeof suffixes[0]; s++) {
        size_t sl = strlen(suffixes[s].suffix);
        if (len <= sl || strcmp(rest + len - sl, suffixes[s].suffix) != 0)
            continue;
        for (size_t r = 0; r < d->n; r++) {
            const char *name = d->routes[r].cfg.route;
            if (strlen(name) == len - sl && strncmp(name, rest, len - sl) == 0) {
                *route = r;
                *kind = suffixes[s].kind;
                return true;
            }
        }
        return false; /* the endings exclude each other: no other suffix fits */
    }
    return false;
}

/* The route's store handle, opened when needed; dr->mu held. NULL with
 * the reason in why. */
static outbox_store_t *route_store(const cli_dead_pages_t *d, dead_route_t *dr, char *why, size_t size)
{
    if (dr->store != NULL)
        return dr->store;
    /* Without actions nothing here writes: the store is opened read-only. */
    outbox_store_options_t so = {.struct_size = sizeof so,
                                 .relation = dr->cfg.relation,
                                 .flags = OUTBOX_OPEN_MUST_EXIST | (d->actions ? 0 : OUTBOX_OPEN_READ_ONLY)};
    outbox_diag_t diag = {0};
    if (outbox_store_open(dr->cfg.store_uri, &so, &dr->store, &diag) != OUTBOX_OK) {
        dr->store = NULL;
        snprintf(why, size, "%s", diag.message);
        return NULL;
    }
    return dr->store;
}

/* After a failed call: the reason, and the handle let go (opened again
 * next time). dr->mu held. */
static void route_store_failed(dead_route_t *dr, int rc, char *why, size_t size)
{
    const char *msg = outbox_store_message(dr->store);
    snprintf(why, size, "%s", msg && msg[0] ? msg : outbox_strerror(rc));
    outbox_store_close(dr->store);
    dr->store = NULL;
}

/* ---------------------------------------------------------------- page */

typedef struct rows_ctx {
    FILE *f;
    const char *route;
    const char *token; /* NULL: read-only, no buttons */
    size_t n;
} rows_ctx_t;

static int put_row(void *ctx, const outbox_row_t *row)
{
    rows_ctx_t *o = ctx;
    FILE *f = o->f;
    char at[40];
    cli_rfc3339(row->created_at, at);
    fputs("<tr class=\"dead\" data-event-id=\"", f);
    cli_put_printable_html(f, row->event_id);
    fputs("\"><td class=\"event-id\">", f);
    cli_put_printable_html(f, row->event_id);
    fputs("</td><td class=\"type\">", f);
    cli_put_printable_html(f, row->event_type);
    if (row->ordering_key != NULL) {
        fputs("</td><td class=\"key\">", f);
        cli_put_printable_html(f, row->ordering_key);
    } else {
        fputs("</td><td class=\"key nokey\">-", f);
    }
    fprintf(f, "</td><td class=\"attempts\">%d</td><td class=\"time\">%s</td><td class=\"error\">",
            (int)row->attempts, at);
    cli_put_printable_html(f, row->last_error);
    fputs("</td>", f);
    if (o->token != NULL) {
        fputs("<td class=\"action\"><form method=\"post\" action=\"", f);
        put_path(f, o->route);
        fprintf(f, "/replay\"><input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                   "<input type=\"hidden\" name=\"event_id\" value=\"", o->token);
        cli_put_printable_html(f, row->event_id);
        fputs("\"><button type=\"submit\" class=\"replay\">replay</button></form></td>", f);
    }
    fputs("</tr>\n", f);
    o->n++;
    return 0;
}

/* The result message of the action that redirected here, when it is one
 * this server writes: printable ASCII, one short line. */
static bool done_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || n >= 200)
            return false;
    return n > 0;
}

/* The rows of one page into rows (an open memstream), the route's dead
 * count into *dead; the library's code, the reason in why. dr->mu held. */
static int read_page(const cli_dead_pages_t *d, dead_route_t *dr, const char *after, rows_ctx_t *o,
                     char next[OUTBOX_UUID_STRLEN + 1], uint64_t *dead, bool *restarted, char *why,
                     size_t size)
{
    outbox_store_t *s = route_store(d, dr, why, size);
    if (s == NULL)
        return OUTBOX_ETRANSIENT;
    outbox_stats_t st = {0};
    int rc = outbox_store_stats(s, dr->cfg.route, &st);
    if (rc == OUTBOX_OK)
        rc = outbox_store_dead_list(s, dr->cfg.route, after, PAGE_SIZE, put_row, o, next);
    if (rc == OUTBOX_ENOTFOUND && after != NULL && o->n == 0) {
        /* The row to page after is gone (purged): start over. */
        *restarted = true;
        rc = outbox_store_dead_list(s, dr->cfg.route, NULL, PAGE_SIZE, put_row, o, next);
    }
    if (rc != OUTBOX_OK) {
        route_store_failed(dr, rc, why, size);
        return rc;
    }
    *dead = st.dead;
    return OUTBOX_OK;
}

static enum MHD_Result page(cli_dead_pages_t *d, struct MHD_Connection *conn, size_t r)
{
    dead_route_t *dr = &d->routes[r];
    const char *after = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "after");
    const char *done = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "done");
    if (after != NULL && !outbox_uuid_valid(after))
        return text(conn, MHD_HTTP_BAD_REQUEST, NULL, 0, "after: not a row id (a UUID)\n");
    char token[CLI_CSRF_TOKEN_LEN + 1] = "";
    bool fresh = false;
    if (d->actions &&
        cli_csrf_token(d->csrf, MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, CLI_CSRF_COOKIE),
                       token, &fresh) != 0) {
        cli_log(OUTBOX_LOG_ERROR, "metrics: dead letters: the random source (getrandom) failed");
        return text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, 0, "no random source for the form's token\n");
    }

    char *rows = NULL;
    size_t rows_len = 0;
    rows_ctx_t o = {.f = open_memstream(&rows, &rows_len),
                    .route = dr->cfg.route,
                    .token = d->actions ? token : NULL};
    if (o.f == NULL)
        return MHD_NO;
    char next[OUTBOX_UUID_STRLEN + 1] = "";
    char why[OUTBOX_MESSAGE_MAX] = "";
    uint64_t dead = 0;
    bool restarted = false;
    pthread_mutex_lock(&dr->mu);
    int rc = read_page(d, dr, after, &o, next, &dead, &restarted, why, sizeof why);
    pthread_mutex_unlock(&dr->mu);
    fclose(o.f);
    if (rc != OUTBOX_OK) {
        free(rows);
        char *clean = tool_redact(why);
        cli_log(OUTBOX_LOG_WARN, "relay %s: dead letters: the store failed: %s", dr->cfg.route,
                clean ? clean : why);
        enum MHD_Result ret = text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, 0,
                                   "dead letters: the store failed: %s\n", clean ? clean : why);
        free(clean);
        return ret;
    }

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL) {
        free(rows);
        return MHD_NO;
    }
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dead letters: ", f);
    cli_put_printable_html(f, dr->cfg.route);
    fputs(" - outbox relay</title><style>body{font-family:sans-serif}table{border-collapse:collapse}"
          "td,th{border:1px solid #999;padding:4px 8px;text-align:left;vertical-align:top}"
          "td.error{font-family:monospace;white-space:pre-wrap;word-break:break-all}"
          "td.nokey{color:#888}#done{background:#dfd;padding:4px}#readonly{color:#555}"
          "form{margin:0}</style></head>\n<body><p><a href=\"/\">status page</a></p>\n"
          "<h1>dead letters of route <span id=\"route\">", f);
    cli_put_printable_html(f, dr->cfg.route);
    fprintf(f, "</span></h1>\n<p id=\"count\">%llu dead event%s</p>\n", (unsigned long long)dead,
            dead == 1 ? "" : "s");
    if (done != NULL && done_ok(done)) {
        fputs("<p id=\"done\">", f);
        cli_put_printable_html(f, done);
        fputs("</p>\n", f);
    }
    if (restarted)
        fputs("<p id=\"restarted\">the row this page was to start after is gone: showing the first page</p>\n", f);
    if (!d->actions) {
        fprintf(f, "<p id=\"readonly\">%s</p>\n", read_only_why);
    } else if (dead > 0) {
        fputs("<form id=\"replay-all\" method=\"post\" action=\"", f);
        put_path(f, dr->cfg.route);
        fprintf(f, "/replay-all\"><input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                   "<label><input type=\"checkbox\" name=\"confirm\" value=\"yes\" required> "
                   "send all %llu dead events of this route back to pending</label> "
                   "<button type=\"submit\" class=\"replay-all\">replay all</button></form>\n",
                token, (unsigned long long)dead);
    }
    fputs("<table id=\"dead\">\n<tr><th>event id</th><th>type</th><th>ordering key</th><th>attempts</th>"
          "<th>staged at (UTC)</th><th>last error</th>", f);
    fputs(d->actions ? "<th></th></tr>\n" : "</tr>\n", f);
    if (rows_len > 0)
        fwrite(rows, 1, rows_len, f);
    free(rows);
    fputs("</table>\n", f);
    if (o.n == 0)
        fputs("<p id=\"empty\">no dead events on this page</p>\n", f);
    if (next[0] != '\0') {
        fputs("<p><a id=\"next\" href=\"", f);
        put_path(f, dr->cfg.route);
        fprintf(f, "?after=%s\">next page</a></p>\n", next);
    }
    fputs("</body></html>\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return MHD_NO;
    }
    char cookie[128];
    snprintf(cookie, sizeof cookie, "%s=%s; Path=/; Secure; HttpOnly; SameSite=Strict", CLI_CSRF_COOKIE,
             token);
    header_t set = {"Set-Cookie", cookie};
    return answer(conn, MHD_HTTP_OK, "text/html; charset=utf-8", buf, len, &set, fresh ? 1 : 0);
}

/* ------------------------------------------------------------- actions */

/* What an action is about, for the log: "event ID", "all dead events" or
 * "an event (no valid id)". */
static void action_what(int kind, const char *event_id, char *buf, size_t size)
{
    if (kind == REPLAY_ALL)
        snprintf(buf, size, "all dead events");
    else if (outbox_uuid_valid(event_id))
        snprintf(buf, size, "event %s", event_id);
    else
        snprintf(buf, size, "an event (no valid event id given)");
}

/* Refuses an action with status and a one-line reason, logged with who
 * asked and what for. */
static enum MHD_Result refuse(const cli_dead_pages_t *d, struct MHD_Connection *conn, size_t r,
                              const char *what, unsigned status, const char *reason)
{
    char by[NI_MAXHOST + 256];
    who(d, conn, by, sizeof by);
    cli_log(OUTBOX_LOG_WARN, "relay %s: dead letters: refused a replay of %s by %s: %s (HTTP %u)",
            d->routes[r].cfg.route, what, by, reason, status);
    return text(conn, status, NULL, 0, "%s: %s\n", status == MHD_HTTP_FORBIDDEN ? "forbidden" : "refused",
                reason);
}

static bool form_encoded(const char *type)
{
    static const char want[] = "application/x-www-form-urlencoded";
    if (type == NULL || strncasecmp(type, want, sizeof want - 1) != 0)
        return false;
    char c = type[sizeof want - 1];
    return c == '\0' || c == ';' || c == ' ';
}

static enum MHD_Result act(cli_dead_pages_t *d, struct MHD_Connection *conn, dead_req_t *req)
{
    dead_route_t *dr = &d->routes[req->route];
    req->body[req->len] = '\0';
    char event_id[64] = "", token[64] = "", confirm[8] = "";
    if (req->kind == REPLAY)
        form_get(req->body, "event_id", event_id, sizeof event_id);
    char what[96];
    action_what(req->kind, event_id, what, sizeof what);
    if (req->too_big)
        return refuse(d, conn, req->route, what, MHD_HTTP_CONTENT_TOO_LARGE, "the form is too large");
    if (!form_encoded(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type")))
        return refuse(d, conn, req->route, what, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                      "the body must be application/x-www-form-urlencoded");
    const char *cross = cli_csrf_origin_problem(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"),
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"),
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Referer"),
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site"));
    if (cross != NULL) {
        char reason[160];
        snprintf(reason, sizeof reason, "not sent from this endpoint's own page (%s)", cross);
        return refuse(d, conn, req->route, what, MHD_HTTP_FORBIDDEN, reason);
    }
    form_get(req->body, "csrf", token, sizeof token);
    bool token_ok = cli_csrf_valid(d->csrf, MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, CLI_CSRF_COOKIE),
                                   token);
    explicit_bzero(token, sizeof token);
    if (!token_ok)
        return refuse(d, conn, req->route, what, MHD_HTTP_FORBIDDEN,
                      "the anti-CSRF token is missing or wrong (load the dead-letter page again)");
    if (req->kind == REPLAY && !outbox_uuid_valid(event_id))
        return refuse(d, conn, req->route, what, MHD_HTTP_BAD_REQUEST, "event_id is not a UUID");
    if (req->kind == REPLAY_ALL && (!form_get(req->body, "confirm", confirm, sizeof confirm) ||
                                    strcmp(confirm, "yes") != 0))
        return refuse(d, conn, req->route, what, MHD_HTTP_BAD_REQUEST,
                      "not confirmed (tick the box next to the button)");

    char why[OUTBOX_MESSAGE_MAX] = "";
    uint64_t count = 0;
    int rc = OUTBOX_ETRANSIENT;
    pthread_mutex_lock(&dr->mu);
    outbox_store_t *s = route_store(d, dr, why, sizeof why);
    if (s != NULL) {
        rc = outbox_store_replay(s, dr->cfg.route, req->kind == REPLAY ? event_id : NULL, &count);
        if (rc != OUTBOX_OK)
            route_store_failed(dr, rc, why, sizeof why);
    }
    pthread_mutex_unlock(&dr->mu);
    char by[NI_MAXHOST + 256];
    who(d, conn, by, sizeof by);
    if (rc != OUTBOX_OK) {
        char *clean = tool_redact(why);
        cli_log(OUTBOX_LOG_ERROR, "relay %s: dead letters: %s asked to replay %s: failed: %s", dr->cfg.route,
                by, what, clean ? clean : why);
        enum MHD_Result ret = text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, 0,
                                   "replay failed: %s\n", clean ? clean : why);
        free(clean);
        return ret;
    }
    cli_log(OUTBOX_LOG_INFO, "relay %s: dead letters: %s replayed %s: %llu replayed", dr->cfg.route, by, what,
            (unsigned long long)count);

    char done[160];
    if (req->kind == REPLAY_ALL)
        snprintf(done, sizeof done, "replayed %llu: all dead events", (unsigned long long)count);
    else if (count == 0)
        snprintf(done, sizeof done, "replayed 0: event %s is not dead", event_id);
    else
        snprintf(done, sizeof done, "replayed %llu: event %s", (unsigned long long)count, event_id);
    char *loc = NULL;
    size_t loc_len = 0;
    FILE *f = open_memstream(&loc, &loc_len);
    if (f == NULL)
        return MHD_NO;
    put_path(f, dr->cfg.route);
    fputs("?done=", f);
    put_pct(f, done);
    if (fclose(f) != 0) {
        free(loc);
        return MHD_NO;
    }
    header_t h = {"Location", loc};
    enum MHD_Result ret = text(conn, MHD_HTTP_SEE_OTHER, &h, 1, "%s\n", done);
    free(loc);
    return ret;
}

/* -------------------------------------------------------------- handler */

static int pages_handle(void *pages, struct MHD_Connection *conn, const char *url, const char *method,
                        const char *upload, size_t *upload_size, void **state)
{
    cli_dead_pages_t *d = pages;
    dead_req_t *req = *state;
    if (req == NULL) {
        size_t r;
        int kind;
        if (!parse_url(d, url, &r, &kind))
            return text(conn, MHD_HTTP_NOT_FOUND, NULL, 0,
                        "not found: no route of this relay has a page here (try /)\n");
        bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        if (kind == PAGE)
            return get ? page(d, conn, r) : not_allowed(conn, "GET, HEAD");
        if (strcmp(method, "POST") != 0)
            return not_allowed(conn, "POST");
        if (!d->actions)
            return refuse(d, conn, r, kind == REPLAY_ALL ? "all dead events" : "an event", MHD_HTTP_FORBIDDEN,
                          read_only_why);
        if ((req = calloc(1, sizeof *req)) == NULL)
            return MHD_NO;
        req->route = r;
        req->kind = kind;
        *state = req;
        if (*upload_size == 0)
            return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        if (req->len + n > FORM_MAX)
            req->too_big = true;
        else {
            memcpy(req->body + req->len, upload, n);
            req->len += n;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return act(d, conn, req);
}

const cli_metrics_pages_t cli_dead_pages = {
    .open = pages_open,
    .close = pages_close,
    .handle = pages_handle,
    .completed = pages_completed,
    .put_path = put_path,
};
