/* outbox-bench: the Redis Streams producer ceiling. A bare hiredis client
 * adds the entries the relay's sink would add (the payload under "data",
 * each CloudEvents attribute under its own name, MAXLEN ~ N when the URI
 * says maxlen=N) to a fresh stream, --batch at a time: one XADD per
 * message appended with redisAppendCommandArgv() for the whole chunk, then
 * the chunk's replies read. It does not keep a key's order after a failed
 * entry (the sink runs a key's several entries of one call as a script
 * for that), so it is the plain pipelined XADD rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define FIELDS_MAX (2 * (BENCH_CE_MAX + 1) + 6)

static int redis_fail(const char *what, const char *why, char *err, size_t errlen)
{
    snprintf(err, errlen, "redis producer ceiling: %s: %s", what, why);
    return BENCH_EXIT_FAIL;
}

static int redis_drain(const bench_sink_uri_t *u, const char *target, const bench_msgs_t *ms,
                       const bench_opts_t *o, bench_drain_t *out, char *err, size_t errlen)
{
    const char *maxlen = NULL;
    for (long i = 0; i < u->n_params; i++) {
        if (strcmp(u->key[i], "maxlen") == 0)
            maxlen = u->value[i];
        else if (strcmp(u->key[i], "timeout") != 0 && strcmp(u->key[i], "max_bytes") != 0)
            return redis_fail("the URI", "the ceiling takes no password or other options", err,
                              errlen);
    }
    struct timeval tv = {10, 0};
    redisContext *c = redisConnectWithTimeout(u->host, u->port ? u->port : 6379, tv);
    if (c == NULL || c->err) {
        int rc = redis_fail("connect", c ? c->errstr : "out of memory", err, errlen);
        redisFree(c);
        return rc;
    }
    redisSetTimeout(c, tv);
    const char *argv[FIELDS_MAX];
    size_t lens[FIELDS_MAX];
    long sent = 0, failed = 0;
    char first_error[256] = "";
    int rc = 0;
    double cpu0 = bench_cpu_s();
    int64_t t0 = bench_mono_us();
    for (long i = 0; rc == 0 && i < ms->n;) {
        long chunk = ms->n - i < o->batch ? ms->n - i : o->batch;
        for (long j = i; j < i + chunk; j++) {
            const outbox_message_t *m = &ms->m[j];
            int a = 0;
            argv[a] = "XADD", lens[a++] = 4;
            argv[a] = target, lens[a++] = strlen(target);
            if (maxlen) {
                argv[a] = "MAXLEN", lens[a++] = 6;
                argv[a] = "~", lens[a++] = 1;
                argv[a] = maxlen, lens[a++] = strlen(maxlen);
            }
            argv[a] = "*", lens[a++] = 1;
            argv[a] = "data", lens[a++] = 4;
            argv[a] = m->payload, lens[a++] = m->payload_len;
            for (size_t k = 0; k < m->n_headers; k++) {
                argv[a] = m->headers[k].name, lens[a++] = strlen(m->headers[k].name);
                argv[a] = m->headers[k].value, lens[a++] = strlen(m->headers[k].value);
            }
            if (redisAppendCommandArgv(c, a, argv, lens) != REDIS_OK) {
                rc = redis_fail("append", c->errstr, err, errlen);
                break;
            }
        }
        for (long j = i; rc == 0 && j < i + chunk; j++) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL) {
                rc = redis_fail("reply", c->errstr, err, errlen);
                break;
            }
            if (r->type == REDIS_REPLY_ERROR && failed++ == 0)
                snprintf(first_error, sizeof first_error, "%s", r->str);
            sent++;
            freeReplyObject(r);
        }
        i += chunk;
    }
    out->seconds = (double)(bench_mono_us() - t0) / 1e6;
    out->cpu_s = bench_cpu_s() - cpu0;
    out->published = sent - failed;
    if (rc == 0 && failed > 0) {
        snprintf(err, errlen, "redis producer ceiling: %ld of %ld refused (%s)", failed, ms->n,
                 first_error);
        rc = BENCH_EXIT_FAIL;
    }
    redisFree(c);
    return rc;
}

const bench_producer_t bench_redis_producer = {
    .scheme = "redis",
    .client = "hiredis",
    .drain = redis_drain,
};
