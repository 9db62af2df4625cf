/* Commands in the Redis protocol (RESP) and what their error replies mean.
 *
 * Commands are written here rather than by hiredis: hiredis 0.14 writes
 * with write(2), and a server that closed the connection would raise
 * SIGPIPE in the host process. send(2) with MSG_NOSIGNAL reports EPIPE
 * instead. hiredis only reads the replies. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "redis_int.h"

/* "<c><n>\r\n": a protocol line's prefix and a length, without printf
 * (a batch writes some thirty of them per event). */
static void put_count(outbox_kit_buf_t *b, char c, size_t n)
{
    char text[24];
    size_t w = sizeof text;
    text[--w] = '\n';
    text[--w] = '\r';
    do {
        text[--w] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    text[--w] = c;
    outbox_kit_buf_put(b, text + w, sizeof text - w);
}

void outbox_redis_cmd_begin(outbox_kit_buf_t *b, size_t argc)
{
    put_count(b, '*', argc);
}

void outbox_redis_cmd_arg(outbox_kit_buf_t *b, const char *s, size_t n)
{
    put_count(b, '$', n);
    outbox_kit_buf_put(b, s, n);
    outbox_kit_buf_put(b, "\r\n", 2);
}

static void set_err(redisContext *c, int type, const char *text)
{
    c->err = type;
    snprintf(c->errstr, sizeof c->errstr, "%s", text);
}

int outbox_redis_send(redisContext *c, const char *data, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = send(c->fd, data + done, len - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            set_err(c, REDIS_ERR_IO,
                    errno == EAGAIN || errno == EWOULDBLOCK ? "timed out sending" : strerror(errno));
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

redisReply *outbox_redis_reply(redisContext *c)
{
    void *reply = NULL;
    if (redisGetReply(c, &reply) != REDIS_OK)
        return NULL;
    if (reply == NULL)
        set_err(c, REDIS_ERR_OTHER, "no reply");
    return reply;
}

redisReply *outbox_redis_command(redisContext *c, outbox_kit_buf_t *scratch, size_t argc,
                                 const char *const *argv)
{
    outbox_kit_buf_reset(scratch);
    outbox_redis_cmd_begin(scratch, argc);
    for (size_t i = 0; i < argc; i++)
        outbox_redis_cmd_arg(scratch, argv[i], strlen(argv[i]));
    if (scratch->failed) {
        set_err(c, REDIS_ERR_OOM, "out of memory");
        return NULL;
    }
    if (outbox_redis_send(c, scratch->data, scratch->len) != 0)
        return NULL;
    return outbox_redis_reply(c);
}

/* Error replies start with a code word. These come from the server's
 * state (memory, loading, a script running, replication, persistence,
 * authentication or permissions an operator can fix) and may clear up,
 * so they are RETRY; an unknown code is RETRY too, and the relay's
 * max_attempts decides. WRONGTYPE (the key holds no stream) and ERR (a
 * command the server will not take, e.g. a bad argument) come back the
 * same way every time: REJECT. */
int outbox_redis_error_permanent(const char *err)
{
    static const char *const permanent[] = {"WRONGTYPE", "ERR", NULL};
    size_t n = strcspn(err ? err : "", " ");
    for (size_t i = 0; permanent[i] != NULL; i++)
        if (strlen(permanent[i]) == n && strncmp(err, permanent[i], n) == 0)
            return 1;
    return 0;
}
