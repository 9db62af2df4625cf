/* sink-template: the skeleton of a liboutbox sink driver. Copy this
 * folder, rename "template" everywhere, and fill the entries in one by one
 * until `outbox conformance --driver ./sink-NAME.so --uri ...` passes.
 * docs/writing-a-sink-driver.md describes what each entry must do.
 *
 * It builds against the installed SDK headers alone (pkg-config --cflags
 * liboutbox) and never links liboutbox: everything it needs from the host
 * (allocation, error messages, logging, the clocks) comes through the
 * outbox_host_t table handed to init().
 *
 * As it stands, publish answers RETRY for every message ("not implemented
 * yet"). A relay on it therefore publishes nothing and dead-letters
 * nothing: a call whose every message is RETRY looks like a broker outage,
 * and the relay releases the batch without charging attempts and backs
 * off. */
#include <stdio.h>
#include <string.h>

#include <outbox/driver.h>
#include <outbox/kit.h> /* buffers, URI parameters and masking, destinations, headers */

#define TPL_NAME "template"

/* The host's services; set once by init(), before anything else runs. */
static const outbox_host_t *host;

/* The URI parameters this sink reads (NULL-terminated). open refuses any
 * other, so a misspelt option fails loudly instead of being ignored. Add
 * yours: "acks", "timeout", "tls", ..., and read them in open with the
 * kit's one grammar, so they are spelt as in every other driver:
 *   int64_t timeout_us = 5000000;
 *   rc = outbox_kit_opt_duration(host, uri, "template sink", "timeout",
 *                                1000, 60000000, &timeout_us, d);
 * (outbox_kit_opt_int, _opt_bool and _opt_secret likewise). */
static const char *const tpl_params[] = {NULL};

/* One handle = one connection to the broker, used by one thread at a time
 * (a relay worker owns one). */
typedef struct tpl_handle {
    /* Where messages go, from the URI's path: "{route}" and
     * "{destination}" in it are expanded per message by
     * outbox_kit_destination(). NULL: the relay's destination as it is. */
    char *destination_tpl;
    /* The URI for messages, password and secret parameters shown as "***"
     * (outbox_kit_uri_show). Keep the password itself only where the
     * client library needs it, and never put it, or uri->raw, in a
     * message. A client library's text goes through a redactor made in
     * open (outbox_kit_redactor_new) and freed in close. */
    char shown[256];
    /* The client library's connection: made at the first publish, not in
     * open, and made again after the broker went away. */
} tpl_handle_t;

static int not_implemented(outbox_diag_t *d, const char *what)
{
    return host->error(d, OUTBOX_ENOTSUP, TPL_NAME " driver: %s is not implemented yet", what);
}

/* Runs once, under the loader's lock, before any other entry. Keep the
 * host table and set up the client library's global state; start no
 * threads here (the sink battery loads the driver, then forks a process
 * per case, and threads do not survive a fork), and load no drivers. */
static int tpl_init(const outbox_host_t *h, outbox_diag_t *d)
{
    (void)d;
    host = h;
    return OUTBOX_OK;
}

static void tpl_close(void *handle)
{
    tpl_handle_t *h = handle;
    if (h == NULL)
        return;
    /* Flush nothing here that was not reported OK already: close only
     * disconnects and frees. */
    host->free(h->destination_tpl);
    host->free(h);
}

/* params->uri is already split by the host: scheme, user, password, host,
 * port, the percent-decoded path and parameters. Check it, copy what you
 * keep (inputs are only borrowed for the call), and return. Do not wait
 * for the broker here: a broker that is down must give RETRY from
 * publish, which the relay rides out, rather than an open that fails and
 * stops the relay from starting. An unknown parameter or a malformed URI
 * is OUTBOX_EINVAL naming it; a broker that cannot be reached is never
 * EINVAL. */
static int tpl_open(const outbox_sink_open_t *params, void **handle, outbox_diag_t *d)
{
    const outbox_uri_t *uri = params->uri;
    *handle = NULL;
    char shown[256];
    outbox_kit_uri_show(host, uri, shown, sizeof shown);
    const char *unknown = outbox_kit_uri_unknown(uri, tpl_params);
    if (unknown != NULL)
        return host->error(d, OUTBOX_EINVAL, TPL_NAME ": unknown parameter %s in %s", unknown,
                           shown);

    tpl_handle_t *h = host->alloc(sizeof *h);
    if (h == NULL)
        return host->error(d, OUTBOX_ENOMEM, "out of memory");
    memset(h, 0, sizeof *h);
    memcpy(h->shown, shown, sizeof h->shown);
    /* template://host:port/orders.{route} has the path "/orders.{route}";
     * template:orders.{route} has "orders.{route}". */
    const char *path = uri->path != NULL ? uri->path : "";
    if (path[0] == '/')
        path++;
    if (path[0] != '\0') {
        h->destination_tpl = outbox_kit_strdup(host, path);
        if (h->destination_tpl == NULL) {
            tpl_close(h);
            return host->error(d, OUTBOX_ENOMEM, "out of memory");
        }
    }
    *handle = h;
    return OUTBOX_OK;
}

/* Fill results[i] for every one of the n messages (the host zeroed them,
 * and a zeroed result reads as OK: leave none untouched), then return
 * OUTBOX_OK. A negative return means the call as a whole failed; the host
 * then reports every message RETRY with d's message.
 *
 *  - OK only once the broker has durably accepted the message (Kafka
 *    acks=all delivery report, JetStream PubAck, AMQP publisher confirm,
 *    HTTP 2xx). Never on "handed to the client library's queue": the
 *    relay marks an OK row published and never sends it again.
 *  - RETRY when it may work later: no connection, broker down, timeout,
 *    leader election, throttling, HTTP 5xx or 429. Every message RETRY is
 *    how the relay recognises an outage (it releases the batch without
 *    charging attempts and backs off).
 *  - REJECT when it never will: the message is larger than the broker
 *    takes, the destination does not exist and will not be created, HTTP
 *    4xx other than 401, 403, 408 and 429. The relay dead-letters it.
 *    Authorisation refused (at connect or for one destination) is RETRY:
 *    an operator grants it, and the same message then goes through.
 *    Say why in results[i].message with outbox_kit_result (one line;
 *    pass a client library's text through the handle's redactor first,
 *    outbox_kit_redact, since it may quote the URI or the password).
 *
 * Send the whole call before waiting for any answer (pipeline), then
 * wait once, bounded: a call must return in bounded time, and what has
 * not been acknowledged by then is RETRY.
 *
 * Per message: the destination is outbox_kit_destination(&buf,
 * h->destination_tpl, &msgs[i]); the key is msgs[i].key (the ordering key,
 * or the event id); the body is payload[0..payload_len), as it is. The
 * headers are CloudEvents attribute names ("id", "type", "source",
 * "specversion", "time", "datacontenttype", "partitionkey", and
 * "traceparent", "tenantid", "correlationid", "causationid",
 * "executionid", "hlc" only when the row has them); spell each as the
 * protocol's binding does: HTTP and NATS "ce-id", Kafka "ce_id" (and
 * "content-type" for datacontenttype), AMQP "cloudEvents:id".
 * "traceparent" keeps its name in every binding. With a broker dedupe id
 * (Nats-Msg-Id, AMQP message_id), give it msgs[i].event_id and declare
 * OUTBOX_SINK_CAP_DEDUPE.
 *
 * Declaring OUTBOX_SINK_CAP_ORDERED promises: within one call, messages
 * that share a key reach the broker in array order, and once one of them
 * fails (RETRY or REJECT) no later message of that key in the call is
 * delivered; report each of those RETRY. REJECT counts as a failure too:
 * the relay stores the verdict only after the call, and a rejected
 * message offered again after a crash may be accepted, so its successors
 * must not be out before it. Without the capability the relay hands over
 * at most one message per key per call. */
static int tpl_publish(void *handle, const outbox_message_t *msgs, size_t n,
                       outbox_publish_result_t *results, outbox_diag_t *d)
{
    tpl_handle_t *h = handle;
    (void)d;
    outbox_kit_buf_t dest;
    outbox_kit_buf_init(&dest, host);
    for (size_t i = 0; i < n; i++) {
        outbox_kit_buf_reset(&dest);
        outbox_kit_destination(&dest, h->destination_tpl, &msgs[i]);
        results[i].status = OUTBOX_PUBLISH_RETRY;
        snprintf(results[i].message, sizeof results[i].message,
                 TPL_NAME " driver: publishing to %s is not implemented yet",
                 dest.failed || dest.data == NULL ? "?" : dest.data);
    }
    outbox_kit_buf_free(&dest);
    return OUTBOX_OK;
}

/* The sink battery reads back what it published with a reader: open one
 * on destination, from its first message, on a connection of its own
 * (the reader must not use handle after reader_open returns; the handle
 * may be closed, or publish on another thread, while the reader lives).
 * It returns OUTBOX_ENOTSUP until written; and until reader_next is set
 * too, the host reports the driver as having no reader and never calls
 * it. */
static int tpl_reader_open(void *handle, const char *destination, void **reader,
                           outbox_diag_t *d)
{
    (void)handle;
    (void)destination;
    *reader = NULL;
    return not_implemented(d, "reader_open");
}

static const outbox_sink_vtable_t tpl_vtable = {
    .struct_size = sizeof(outbox_sink_vtable_t),
    /* required */
    .open = tpl_open,
    .close = tpl_close,
    .publish = tpl_publish,
    /* optional (ABI 1.2): NULL means "not supported"; fill them in as you go.
     * The battery calls them through the public API (outbox_sink_*). */
    /* destination_create(handle, destination, d): make publishing to
     * destination work (create the Kafka topic, the JetStream stream
     * capturing the subject); one that exists already is not an error.
     * destination_drop removes it and what it holds. Both or neither; a
     * sink whose destinations need no creating leaves both NULL. The
     * battery creates and drops conf_<pid>_<n> and conf_<pid>_<n>_b around
     * every case. */
    .destination_create = NULL,
    .destination_drop = NULL,
    /* The battery needs reader_open and reader_next: it refuses a driver
     * without them. */
    .reader_open = tpl_reader_open,
    /* reader_next(reader, timeout_ms, out, d): the next message, waiting
     * up to timeout_ms; OUTBOX_OK with *out filled (destination, key,
     * dedupe_id, payload as the broker holds it, and the CloudEvents
     * headers named without the binding's prefix: "id", not "ce_id";
     * Kafka's content-type as "datacontenttype"; other headers left out),
     * everything pointing into the reader until the next call or
     * reader_close; OUTBOX_ENOTFOUND when nothing more arrived in time;
     * another negative code on an error. */
    .reader_next = NULL,
    .reader_close = NULL, /* reader_close(reader): frees it; NULL is a no-op */
};

static const char *const tpl_schemes[] = {TPL_NAME, NULL};

static const outbox_driver_t tpl_descriptor = {
    .struct_size = sizeof(outbox_driver_t),
    .abi_major = OUTBOX_ABI_MAJOR,
    /* The lowest minor whose entries the driver relies on, not
     * OUTBOX_ABI_MINOR: the reader entries above arrived with 1.2, so
     * every host from 1.2 on loads it. */
    .abi_minor = 2,
    .kind = OUTBOX_DRIVER_SINK,
    .name = TPL_NAME,
    .version = "0.0.1",
    .schemes = tpl_schemes,
    /* OUTBOX_SINK_CAP_ORDERED and OUTBOX_SINK_CAP_DEDUPE once publish keeps
     * their promises (see above publish); the battery checks both. */
    .capabilities = 0,
    .init = tpl_init,
    .store = NULL,
    .sink = &tpl_vtable,
};

OUTBOX_DRIVER_ENTRY(tpl_descriptor)
