/* Publishing: pipelined XADD, OK on the server's entry id.
 *
 * A call is one pipeline: every command is written, then the replies are
 * read in order. The promise of OUTBOX_SINK_CAP_ORDERED needs more than a
 * pipeline, because the server runs every command it was sent even after
 * one failed: a key's later XADD would land after its failed one. So the
 * messages of a key that has several in the call go as ONE command, an
 * EVAL of a small script that adds them in order with redis.pcall and
 * stops at the first error, reporting how many it added and the error.
 * The server runs a script whole, so nothing of the key can slip in after
 * the failure, whatever the error (a key holding another type, out of
 * memory). A key with one message in the call is a plain XADD.
 *
 * Failures known before sending (no payload, an empty stream key, an
 * entry over max_bytes) are REJECT, and the key's later messages in the
 * call are not sent at all (RETRY, held back).
 *
 * A key's run is the chain of the kit's per-key scheduler (its next[])
 * from the key's first message: its first round, which is all this sink
 * uses of it. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_int.h"

/* KEYS[i]: the stream of the run's message i. ARGV[1]: MAXLEN's N or "".
 * Then per message: its number of field pairs n, and the 2n fields. */
static const char add_run_script[] =
    "local a = 2\n"
    "for i = 1, #KEYS do\n"
    "  local n = tonumber(ARGV[a])\n"
    "  local args = {'XADD', KEYS[i]}\n"
    "  if ARGV[1] ~= '' then\n"
    "    args[3] = 'MAXLEN'; args[4] = '~'; args[5] = ARGV[1]\n"
    "  end\n"
    "  args[#args + 1] = '*'\n"
    "  for j = a + 1, a + 2 * n do args[#args + 1] = ARGV[j] end\n"
    "  a = a + 1 + 2 * n\n"
    "  local r = redis.pcall(unpack(args))\n"
    "  if type(r) == 'table' and r.err then return {i - 1, r.err} end\n"
    "end\n"
    "return {#KEYS}\n";

/* Sent once the pipeline holds this much, so a large call's bytes reach
 * the server while the rest is written. */
#define SEND_AT ((size_t)256 << 10)

typedef struct run {
    size_t first; /* the key's first message in the call */
    size_t count; /* messages sent (the run's prefix before a local failure) */
} run_t;

static const char *id_of(const outbox_message_t *m)
{
    return m->event_id ? m->event_id : "?";
}

/* The run's message at position p (p < run->count). */
static size_t run_at(const outbox_kit_keys_t *k, const run_t *run, size_t p)
{
    size_t i = run->first;
    while (p-- > 0)
        i = k->next[i];
    return i;
}

/* Whether m needs a partitionkey field added (it has a key but no such
 * header), so the reader and other clients see the key. */
static int adds_key(const outbox_message_t *m)
{
    return m->key != NULL && outbox_kit_header(m, "partitionkey") == NULL;
}

static int header_used(const outbox_header_t *hd)
{
    return hd->name != NULL && hd->value != NULL && strcmp(hd->name, "data") != 0;
}

/* Field pairs of m's entry, and their bytes. */
static size_t field_count(const outbox_message_t *m, size_t *bytes)
{
    size_t n = 1;
    *bytes = 4 + m->payload_len;
    for (size_t k = 0; k < m->n_headers; k++)
        if (header_used(&m->headers[k])) {
            n++;
            *bytes += strlen(m->headers[k].name) + strlen(m->headers[k].value);
        }
    if (adds_key(m)) {
        n++;
        *bytes += 12 + strlen(m->key);
    }
    return n;
}

static void put_fields(outbox_kit_buf_t *b, const outbox_message_t *m)
{
    outbox_redis_cmd_arg(b, "data", 4);
    outbox_redis_cmd_arg(b, m->payload, m->payload_len);
    for (size_t k = 0; k < m->n_headers; k++) {
        const outbox_header_t *hd = &m->headers[k];
        if (!header_used(hd))
            continue;
        outbox_redis_cmd_arg(b, hd->name, strlen(hd->name));
        outbox_redis_cmd_arg(b, hd->value, strlen(hd->value));
    }
    if (adds_key(m)) {
        outbox_redis_cmd_arg(b, "partitionkey", 12);
        outbox_redis_cmd_arg(b, m->key, strlen(m->key));
    }
}

/* Why m cannot be sent, or NULL; its stream key is then in stream. */
static int local_check(const redis_sink_t *h, const outbox_message_t *m, outbox_kit_buf_t *stream,
                       outbox_publish_result_t *r)
{
    outbox_kit_buf_reset(stream);
    outbox_kit_destination(stream, h->stream_tpl, m);
    if (m->payload == NULL) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT, "event %s has no payload", id_of(m));
        return -1;
    }
    if (stream->len == 0) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s has an empty stream key (the relay's destination, or the URI's "
                          "stream template, gives none)",
                          id_of(m));
        return -1;
    }
    size_t bytes = 0;
    field_count(m, &bytes);
    if (bytes > h->max_bytes) {
        outbox_kit_result(r, OUTBOX_PUBLISH_REJECT,
                          "event %s is %zu bytes (payload and attributes), over the sink's "
                          "max_bytes of %zu",
                          id_of(m), bytes, h->max_bytes);
        return -1;
    }
    return 0;
}

void outbox_redis_put_xadd(const redis_sink_t *h, outbox_kit_buf_t *b, const outbox_message_t *m,
                           const outbox_kit_buf_t *stream)
{
    size_t bytes;
    size_t nf = field_count(m, &bytes);
    outbox_redis_cmd_begin(b, 3 + (h->maxlen ? 3 : 0) + 2 * nf);
    outbox_redis_cmd_arg(b, "XADD", 4);
    outbox_redis_cmd_arg(b, stream->data, stream->len);
    if (h->maxlen) {
        outbox_redis_cmd_arg(b, "MAXLEN", 6);
        outbox_redis_cmd_arg(b, "~", 1);
        outbox_redis_cmd_arg(b, h->maxlen_text, strlen(h->maxlen_text));
    }
    outbox_redis_cmd_arg(b, "*", 1);
    put_fields(b, m);
}

static void put_eval(const redis_sink_t *h, outbox_kit_buf_t *b, const outbox_message_t *msgs,
                     const outbox_kit_keys_t *k, const run_t *run, outbox_kit_buf_t *stream)
{
    size_t argc = 3 + run->count + 1;
    for (size_t p = 0, i = run->first; p < run->count; p++, i = k->next[i]) {
        size_t bytes;
        argc += 1 + 2 * field_count(&msgs[i], &bytes);
    }
    char num[24];
    outbox_redis_cmd_begin(b, argc);
    outbox_redis_cmd_arg(b, "EVAL", 4);
    outbox_redis_cmd_arg(b, add_run_script, sizeof add_run_script - 1);
    snprintf(num, sizeof num, "%zu", run->count);
    outbox_redis_cmd_arg(b, num, strlen(num));
    for (size_t p = 0, i = run->first; p < run->count; p++, i = k->next[i]) {
        outbox_kit_buf_reset(stream);
        outbox_kit_destination(stream, h->stream_tpl, &msgs[i]);
        outbox_redis_cmd_arg(b, stream->data, stream->len);
    }
    outbox_redis_cmd_arg(b, h->maxlen ? h->maxlen_text : "", h->maxlen ? strlen(h->maxlen_text) : 0);
    for (size_t p = 0, i = run->first; p < run->count; p++, i = k->next[i]) {
        size_t bytes;
        snprintf(num, sizeof num, "%zu", field_count(&msgs[i], &bytes));
        outbox_redis_cmd_arg(b, num, strlen(num));
        put_fields(b, &msgs[i]);
    }
}

/* The verdict of an error reply err for message m. */
static void refused(redis_sink_t *h, const outbox_message_t *m, outbox_kit_buf_t *stream,
                    const char *err, outbox_publish_result_t *r)
{
    /* A master demoted to a replica: the next call finds the new one. */
    if (err != NULL && strncmp(err, "READONLY", 8) == 0)
        h->readonly_seen = true;
    char text[300], key[160];
    outbox_kit_buf_reset(stream);
    outbox_kit_destination(stream, h->stream_tpl, m);
    outbox_kit_redact(outbox_redis_host, h->cfg.redactor, err, text, sizeof text);
    outbox_kit_text_line(stream->data, key, sizeof key);
    outbox_kit_result(r,
                      outbox_redis_error_permanent(err) ? OUTBOX_PUBLISH_REJECT
                                                        : OUTBOX_PUBLISH_RETRY,
                      "Redis refused event %s on stream %s: %s", id_of(m), key, text);
}

/* A run's messages when the connection failed before its reply came. */
static void lost(redis_sink_t *h, const outbox_message_t *msgs, const outbox_kit_keys_t *k,
                 const run_t *run, const char *why, outbox_publish_result_t *results)
{
    for (size_t p = 0, i = run->first; p < run->count; p++, i = k->next[i])
        outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                          "no reply from the Redis server (%s) for event %s: %s", h->shown,
                          id_of(&msgs[i]), why);
}

/* Applies the reply of one run's command. */
static void apply_reply(redis_sink_t *h, const outbox_message_t *msgs, outbox_kit_keys_t *k,
                        const run_t *run, redisReply *r, outbox_kit_buf_t *stream,
                        outbox_publish_result_t *results)
{
    size_t first = run->first;
    if (run->count == 1) {
        if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
            results[first].status = OUTBOX_PUBLISH_OK;
        else if (r->type == REDIS_REPLY_ERROR)
            refused(h, &msgs[first], stream, r->str, &results[first]);
        else
            outbox_kit_result(&results[first], OUTBOX_PUBLISH_RETRY,
                              "Redis answered XADD of event %s with an unexpected reply (type %d)",
                              id_of(&msgs[first]), r->type);
        return;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer >= 0 &&
        (size_t)r->element[0]->integer <= run->count) {
        size_t done = (size_t)r->element[0]->integer;
        const char *err = NULL;
        if (r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING)
            err = r->element[1]->str;
        for (size_t p = 0, i = first; p < done; p++, i = k->next[i])
            results[i].status = OUTBOX_PUBLISH_OK;
        if (done == run->count)
            return;
        size_t failed = run_at(k, run, done);
        refused(h, &msgs[failed], stream, err ? err : "the script stopped without an error",
                &results[failed]);
        outbox_kit_keys_hold(k, failed, msgs, results,
                             results[failed].status == OUTBOX_PUBLISH_REJECT
                                 ? "was refused in this call"
                                 : "failed in this call");
        return;
    }
    /* The script itself did not run (a server loading, busy, or one that
     * refuses EVAL): nothing of the run was added. Not the messages'
     * fault, so RETRY. */
    char text[300];
    outbox_kit_redact(outbox_redis_host, h->cfg.redactor,
                      r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply", text,
                      sizeof text);
    outbox_kit_result(&results[first], OUTBOX_PUBLISH_RETRY,
                      "Redis did not run the ordered XADD of event %s and %zu later ones of its "
                      "key: %s",
                      id_of(&msgs[first]), run->count - 1, text);
    outbox_kit_keys_hold(k, first, msgs, results, "failed in this call");
}

static void drop_connection(redis_sink_t *h)
{
    redisFree(h->c);
    h->c = NULL;
}

/* wait_replicas: what the server acknowledged counts only once that many
 * replicas have it too (WAIT). When fewer had it within wait_timeout, or
 * WAIT got no answer, every OK of the call becomes RETRY: sent again
 * later, a duplicate at worst, never an entry a failover could lose. */
static void wait_for_replicas(redis_sink_t *h, const outbox_message_t *msgs, size_t n,
                              outbox_publish_result_t *results)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += results[i].status == OUTBOX_PUBLISH_OK;
    if (ok == 0 || h->c == NULL || h->c->err)
        return;
    char want[24], ms[24];
    snprintf(want, sizeof want, "%ld", h->wait_replicas);
    snprintf(ms, sizeof ms, "%lld", (long long)h->wait_timeout_ms);
    const char *argv[3] = {"WAIT", want, ms};
    outbox_kit_buf_t scratch;
    outbox_kit_buf_init(&scratch, outbox_redis_host);
    redisReply *r = outbox_redis_command(h->c, &scratch, 3, argv);
    outbox_kit_buf_free(&scratch);
    char why[200];
    if (r == NULL)
        snprintf(why, sizeof why, "WAIT got no reply: %s", h->c->errstr);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer >= h->wait_replicas)
        why[0] = '\0';
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(why, sizeof why, "%lld of the %ld replicas asked for had it within wait_timeout=%lldms",
                 r->integer, h->wait_replicas, (long long)h->wait_timeout_ms);
    else
        snprintf(why, sizeof why, "WAIT was refused: %.120s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    if (why[0] == '\0')
        return;
    char text[200];
    outbox_kit_redact(outbox_redis_host, h->cfg.redactor, why, text, sizeof text);
    for (size_t i = 0; i < n; i++)
        if (results[i].status == OUTBOX_PUBLISH_OK)
            outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY,
                              "Redis added event %s, but %s: it will be sent again", id_of(&msgs[i]), text);
}

/* Connects when there is no connection. 0, or -1 with why set. */
static int ensure_connected(redis_sink_t *h, outbox_diag_t *why)
{
    if (h->c != NULL && h->c->err)
        drop_connection(h);
    if (h->c != NULL)
        return 0;
    if (outbox_redis_connect(&h->cfg, h->shown, &h->c, why) != OUTBOX_OK)
        return -1;
    if (h->was_connected)
        outbox_redis_host->log(OUTBOX_LOG_INFO, REDIS_SINK_NAME, "reconnected to the Redis server %s",
                               h->shown);
    h->was_connected = true;
    return 0;
}

/* Writes the runs' commands (sent in slices as they are written) and
 * reads the replies, in the order of the commands. Returns how many
 * replies came; fewer than n_runs leaves c->err set (after a failure to
 * read one, the connection is out of step and every later run is
 * unknown). -1: out of memory. */
static long exchange(redis_sink_t *h, const outbox_message_t *msgs, outbox_kit_keys_t *k,
                     const run_t *runs, size_t n_runs, outbox_kit_buf_t *stream,
                     outbox_publish_result_t *results)
{
    outbox_kit_buf_t *out = &h->out;
    outbox_kit_buf_reset(out);
    int send_failed = 0;
    for (size_t r = 0; r < n_runs; r++) {
        const run_t *run = &runs[r];
        if (run->count == 1) {
            outbox_kit_buf_reset(stream);
            outbox_kit_destination(stream, h->stream_tpl, &msgs[run->first]);
            outbox_redis_put_xadd(h, out, &msgs[run->first], stream);
        } else {
            put_eval(h, out, msgs, k, run, stream);
        }
        if (out->failed || stream->failed)
            return -1;
        if (out->len >= SEND_AT || r + 1 == n_runs) {
            if (!send_failed && outbox_redis_send(h->c, out->data, out->len) != 0)
                send_failed = 1;
            outbox_kit_buf_reset(out);
        }
    }
    if (send_failed)
        return 0;
    long r = 0;
    for (; (size_t)r < n_runs; r++) {
        redisReply *reply = outbox_redis_reply(h->c);
        if (reply == NULL)
            break;
        apply_reply(h, msgs, k, &runs[r], reply, stream, results);
        freeReplyObject(reply);
    }
    return r;
}

int outbox_redis_publish(void *handle, const outbox_message_t *msgs, size_t n,
                         outbox_publish_result_t *results, outbox_diag_t *d)
{
    const outbox_host_t *host = outbox_redis_host;
    redis_sink_t *h = handle;
    int reused = h->c != NULL && !h->c->err;
    outbox_diag_t why = {0};
    if (ensure_connected(h, &why) != 0) {
        for (size_t i = 0; i < n; i++)
            outbox_kit_result(&results[i], OUTBOX_PUBLISH_RETRY, "not sent: %s", why.message);
        return OUTBOX_OK;
    }

    /* The runs of one key each, from the first round, up to the first
     * event that cannot be sent. */
    outbox_kit_keys_t k;
    run_t *runs = NULL;
    if (outbox_kit_keys_init(&k, host, msgs, n) == 0)
        runs = host->alloc(k.n_round * sizeof *runs);
    if (runs == NULL) {
        outbox_kit_keys_free(&k);
        return host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    }
    outbox_kit_buf_t stream;
    outbox_kit_buf_init(&stream, host);
    size_t n_runs = 0;
    for (size_t r = 0; r < k.n_round; r++) {
        run_t run = {.first = k.round[r], .count = 0};
        for (size_t i = run.first; i != OUTBOX_KIT_NONE; i = k.next[i]) {
            if (local_check(h, &msgs[i], &stream, &results[i]) != 0) {
                outbox_kit_keys_hold(&k, i, msgs, results, "was refused in this call");
                break;
            }
            run.count++;
        }
        if (run.count > 0)
            runs[n_runs++] = run;
    }

    long got = n_runs > 0 ? exchange(h, msgs, &k, runs, n_runs, &stream, results) : 0;
    if (got == 0 && n_runs > 0 && reused) {
        /* No reply at all on a connection from an earlier call: the server
         * (or something on the way) may have closed it while it was idle.
         * Once more on a new one. Whatever the first try added is then
         * added again, which the relay's own retry would do as well:
         * duplicates, never a key out of order. */
        char text[160];
        outbox_kit_redact(host, h->cfg.redactor, h->c->errstr, text, sizeof text);
        host->log(OUTBOX_LOG_INFO, REDIS_SINK_NAME,
                  "the connection to the Redis server %s failed on its first reply (%s): sending "
                  "the call again on a new one",
                  h->shown, text);
        drop_connection(h);
        if (ensure_connected(h, &why) != 0) {
            for (size_t r = 0; r < n_runs; r++)
                lost(h, msgs, &k, &runs[r], why.message, results);
            n_runs = 0;
        } else {
            got = exchange(h, msgs, &k, runs, n_runs, &stream, results);
        }
    }
    int rc = OUTBOX_OK;
    if (got < 0) {
        drop_connection(h);
        rc = host->error(d, OUTBOX_ENOMEM, "out of memory publishing %zu events", n);
    } else if ((size_t)got < n_runs) {
        char text[160];
        outbox_kit_redact(host, h->cfg.redactor,
                          h->c->errstr[0] ? h->c->errstr : "connection lost", text, sizeof text);
        for (size_t r = (size_t)got; r < n_runs; r++)
            lost(h, msgs, &k, &runs[r], text, results);
        drop_connection(h);
    }
    if (rc == OUTBOX_OK && h->wait_replicas > 0 && h->c != NULL)
        wait_for_replicas(h, msgs, n, results);
    if (h->readonly_seen && h->c != NULL) {
        drop_connection(h);
        h->readonly_seen = false;
    }
    /* A large call's buffer is not kept for the next. */
    if (h->out.cap > ((size_t)4 << 20) || got < 0) {
        outbox_kit_buf_free(&h->out);
        outbox_kit_buf_init(&h->out, host);
    }
    outbox_kit_buf_free(&stream);
    outbox_kit_keys_free(&k);
    host->free(runs);
    return rc;
}
