/* A connection from the parsed URI: connect with a timeout, AUTH, SELECT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "redis_int.h"

static struct timeval to_timeval(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* A failure of the connection itself: the server is not there, or went
 * away. */
static int conn_failure(const redis_config_t *cfg, const char *shown, redisContext *c,
                        const char *what, outbox_diag_t *d)
{
    char text[256];
    outbox_kit_redact(outbox_redis_host, cfg->redactor, c ? c->errstr : "out of memory", text,
                      sizeof text);
    return outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: %s: %s", shown, what,
                                    text);
}

/* An error reply to AUTH or SELECT. A server that is loading its data or
 * busy is not ready yet (transient); a refused password and a database
 * the server lacks are the user's to fix. */
static int setup_refused(const redis_config_t *cfg, const char *shown, const char *what,
                         const char *err, outbox_diag_t *d)
{
    char text[256];
    outbox_kit_redact(outbox_redis_host, cfg->redactor, err, text, sizeof text);
    int code = OUTBOX_ETRANSIENT;
    if (strncmp(err, "WRONGPASS", 9) == 0 || strncmp(err, "NOAUTH", 6) == 0 ||
        strncmp(err, "NOPERM", 6) == 0 || strncmp(err, "ERR AUTH", 8) == 0 ||
        strstr(err, "password") != NULL)
        code = OUTBOX_EPERMANENT;
    else if (strncmp(err, "ERR", 3) == 0)
        code = OUTBOX_EINVAL;
    return outbox_redis_host->error(d, code, "Redis sink %s: %s refused: %s", shown, what, text);
}

/* One Sentinel's answer for cfg->master: 0 and host/port, or -1 and why. */
static int ask_sentinel(const redis_config_t *cfg, const char *addr, char *host, size_t hsize, int *port,
                        char *why, size_t wsize)
{
    char h[256];
    int p = 26379;
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : strlen(addr);
    if (hl >= sizeof h)
        hl = sizeof h - 1;
    memcpy(h, addr, hl);
    h[hl] = '\0';
    if (colon)
        p = atoi(colon + 1);
    redisContext *c = redisConnectWithTimeout(h, p, to_timeval(cfg->timeout_ms));
    if (c == NULL || c->err || redisSetTimeout(c, to_timeval(cfg->timeout_ms)) != REDIS_OK) {
        snprintf(why, wsize, "Sentinel %s: %s", addr, c ? c->errstr : "out of memory");
        redisFree(c);
        return -1;
    }
    outbox_kit_buf_t scratch;
    outbox_kit_buf_init(&scratch, outbox_redis_host);
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", cfg->master};
    redisReply *r = outbox_redis_command(c, &scratch, 3, argv);
    outbox_kit_buf_free(&scratch);
    int rc = -1;
    if (r == NULL)
        snprintf(why, wsize, "Sentinel %s: %s", addr, c->errstr);
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(why, wsize, "Sentinel %s: %s", addr, r->str);
    else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
             r->element[1]->type != REDIS_REPLY_STRING)
        snprintf(why, wsize, "Sentinel %s knows no master named %s", addr, cfg->master);
    else {
        snprintf(host, hsize, "%s", r->element[0]->str);
        *port = atoi(r->element[1]->str);
        rc = 0;
    }
    freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* The master's address from the first Sentinel that names one. */
static int discover(const redis_config_t *cfg, const char *shown, char *host, size_t hsize, int *port,
                    outbox_diag_t *d)
{
    char why[300] = "no Sentinel listed";
    const char *at = cfg->sentinels;
    while (at && *at) {
        size_t n = strcspn(at, ",");
        char addr[300];
        snprintf(addr, sizeof addr, "%.*s", (int)(n < sizeof addr - 1 ? n : sizeof addr - 1), at);
        if (ask_sentinel(cfg, addr, host, hsize, port, why, sizeof why) == 0)
            return OUTBOX_OK;
        at += n;
        if (*at == ',')
            at++;
    }
    char text[300];
    outbox_kit_redact(outbox_redis_host, cfg->redactor, why, text, sizeof text);
    return outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: no master for %s: %s", shown,
                                    cfg->master, text);
}

/* With Sentinels: the server must be the master still (a demoted one that
 * Sentinel has not caught up with yet refuses writes). */
static int check_master(const redis_config_t *cfg, const char *shown, redisContext *c, const char *addr,
                        outbox_kit_buf_t *scratch, outbox_diag_t *d)
{
    const char *argv[1] = {"ROLE"};
    redisReply *r = outbox_redis_command(c, scratch, 1, argv);
    int rc = OUTBOX_OK;
    if (r == NULL)
        rc = conn_failure(cfg, shown, c, "ROLE", d);
    else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING)
        rc = outbox_redis_host->error(d, OUTBOX_ETRANSIENT, "Redis sink %s: %s gave no role", shown, addr);
    else if (strcmp(r->element[0]->str, "master") != 0)
        rc = outbox_redis_host->error(d, OUTBOX_ETRANSIENT,
                                      "Redis sink %s: the server Sentinel names as master %s (%s) is a %s",
                                      shown, cfg->master, addr, r->element[0]->str);
    freeReplyObject(r);
    return rc;
}

int outbox_redis_connect(const redis_config_t *cfg, const char *shown, redisContext **out,
                         outbox_diag_t *d)
{
    *out = NULL;
    char found[256];
    const char *host = cfg->host;
    int port = cfg->port;
    if (cfg->master != NULL) {
        int rc = discover(cfg, shown, found, sizeof found, &port, d);
        if (rc != OUTBOX_OK)
            return rc;
        host = found;
    }
    redisContext *c = redisConnectWithTimeout(host, port, to_timeval(cfg->timeout_ms));
    if (c == NULL || c->err) {
        int rc = conn_failure(cfg, shown, c, "cannot connect", d);
        redisFree(c);
        return rc;
    }
    if (redisSetTimeout(c, to_timeval(cfg->timeout_ms)) != REDIS_OK) {
        int rc = conn_failure(cfg, shown, c, "setting the socket timeout", d);
        redisFree(c);
        return rc;
    }
    outbox_kit_buf_t scratch;
    outbox_kit_buf_init(&scratch, outbox_redis_host);
    int rc = OUTBOX_OK;
    if (cfg->password != NULL) {
        const char *argv[3] = {"AUTH", cfg->user ? cfg->user : cfg->password, cfg->password};
        redisReply *r = outbox_redis_command(c, &scratch, cfg->user ? 3 : 2, argv);
        if (r == NULL)
            rc = conn_failure(cfg, shown, c, "AUTH", d);
        else if (r->type == REDIS_REPLY_ERROR)
            rc = setup_refused(cfg, shown, "AUTH", r->str, d);
        freeReplyObject(r);
    }
    if (rc == OUTBOX_OK && cfg->password == NULL) {
        /* A server that wants a password answers NOAUTH here, where it
         * can be said plainly, rather than cutting a long command off as a
         * protocol error. A server still loading says LOADING. */
        const char *argv[1] = {"PING"};
        redisReply *r = outbox_redis_command(c, &scratch, 1, argv);
        if (r == NULL)
            rc = conn_failure(cfg, shown, c, "PING", d);
        else if (r->type == REDIS_REPLY_ERROR)
            rc = setup_refused(cfg, shown, "PING without a password", r->str, d);
        freeReplyObject(r);
    }
    if (rc == OUTBOX_OK && cfg->master != NULL) {
        char addr[300];
        snprintf(addr, sizeof addr, "%s:%d", host, port);
        rc = check_master(cfg, shown, c, addr, &scratch, d);
    }
    if (rc == OUTBOX_OK && cfg->db != 0) {
        char db[24];
        snprintf(db, sizeof db, "%ld", cfg->db);
        const char *argv[2] = {"SELECT", db};
        redisReply *r = outbox_redis_command(c, &scratch, 2, argv);
        if (r == NULL)
            rc = conn_failure(cfg, shown, c, "SELECT", d);
        else if (r->type == REDIS_REPLY_ERROR)
            rc = setup_refused(cfg, shown, "SELECT", r->str, d);
        freeReplyObject(r);
    }
    if (scratch.data)
        memset(scratch.data, 0, scratch.cap); /* it held the password */
    outbox_kit_buf_free(&scratch);
    if (rc != OUTBOX_OK) {
        redisFree(c);
        return rc;
    }
    *out = c;
    return OUTBOX_OK;
}

int outbox_redis_config_copy(const redis_config_t *from, redis_config_t *to)
{
    const outbox_host_t *host = outbox_redis_host;
    *to = *from;
    to->host = outbox_kit_strdup(host, from->host);
    to->user = from->user ? outbox_kit_strdup(host, from->user) : NULL;
    to->password = from->password ? outbox_kit_strdup(host, from->password) : NULL;
    to->master = from->master ? outbox_kit_strdup(host, from->master) : NULL;
    to->sentinels = from->sentinels ? outbox_kit_strdup(host, from->sentinels) : NULL;
    /* The sink's redactor goes with the sink; the password is the one
     * secret a connection of the reader's can meet. */
    outbox_uri_t secrets = {.password = to->password};
    to->redactor = outbox_kit_redactor_new(host, &secrets);
    if (to->host == NULL || (from->user && !to->user) || (from->password && !to->password) ||
        (from->master && !to->master) || (from->sentinels && !to->sentinels) || to->redactor == NULL) {
        outbox_redis_config_free(to);
        return -1;
    }
    return 0;
}

void outbox_redis_config_free(redis_config_t *cfg)
{
    const outbox_host_t *host = outbox_redis_host;
    host->free(cfg->host);
    host->free(cfg->user);
    host->free(cfg->master);
    host->free(cfg->sentinels);
    if (cfg->password)
        memset(cfg->password, 0, strlen(cfg->password));
    host->free(cfg->password);
    outbox_kit_redactor_free(host, cfg->redactor);
    memset(cfg, 0, sizeof *cfg);
}
