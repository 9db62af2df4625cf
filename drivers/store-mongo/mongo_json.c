/* MongoDB store driver, ground floor: payloads between JSON text and BSON.
 *
 * A payload travels as the BSON form of its JSON value, parsed by libbson
 * and written back as relaxed extended JSON: integers come back as the
 * integers they were (int32 or int64, exact), fractions as doubles, strings,
 * booleans and null as themselves, so the text the relay publishes is the
 * JSON value that was staged (spacing aside). Canonical extended JSON would
 * wrap every number in {"$numberInt": ...} and change the value a consumer
 * reads.
 *
 * An object payload is stored as an embedded document; any other JSON value
 * (an array, a string, a number, true, false, null) is stored as that BSON
 * value in the payload field, and read back by its type.
 */
#include <stdio.h>
#include <string.h>

#include "mongo_int.h"

static size_t skip_space(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static void why_line(const bson_error_t *e, char *why, size_t size)
{
    outbox_kit_text_line(e->message[0] ? e->message : "libbson could not read it", why, size);
}

int outbox_mongo_json_append(bson_t *doc, const char *key, const char *s, size_t n, char *why,
                             size_t why_size)
{
    bson_error_t e;
    memset(&e, 0, sizeof e);
    if (n > (size_t)SSIZE_MAX - 16) {
        snprintf(why, why_size, "the payload is too large");
        return -1;
    }
    size_t at = skip_space(s, n);
    if (at < n && s[at] == '{') {
        bson_t sub;
        if (!bson_init_from_json(&sub, s, (ssize_t)n, &e)) {
            why_line(&e, why, why_size);
            return -1;
        }
        int ok = bson_append_document(doc, key, -1, &sub);
        bson_destroy(&sub);
        if (!ok) {
            snprintf(why, why_size, "the payload does not fit in a BSON document");
            return -1;
        }
        return 0;
    }
    /* Any other value: parse it as the one field of a wrapper document and
     * move the value over. */
    outbox_kit_buf_t w;
    outbox_kit_buf_init(&w, outbox_mongo_host);
    outbox_kit_buf_puts(&w, "{\"v\":");
    outbox_kit_buf_put(&w, s, n);
    outbox_kit_buf_putc(&w, '}');
    if (w.failed) {
        outbox_kit_buf_free(&w);
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    bson_t tmp;
    int ok = bson_init_from_json(&tmp, w.data, (ssize_t)w.len, &e);
    outbox_kit_buf_free(&w);
    if (!ok) {
        why_line(&e, why, why_size);
        return -1;
    }
    bson_iter_t it;
    ok = bson_iter_init_find(&it, &tmp, "v") && bson_append_iter(doc, key, -1, &it);
    bson_destroy(&tmp);
    if (!ok) {
        snprintf(why, why_size, "the payload is not a single JSON value");
        return -1;
    }
    return 0;
}

void outbox_mongo_json_value(const bson_iter_t *it, outbox_kit_buf_t *b)
{
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        uint32_t len = 0;
        const uint8_t *data = NULL;
        bson_iter_document(it, &len, &data);
        bson_t sub;
        char *json = NULL;
        size_t jlen = 0;
        if (data && bson_init_static(&sub, data, len))
            json = bson_as_relaxed_extended_json(&sub, &jlen);
        if (!json) {
            b->failed = 1;
            return;
        }
        outbox_kit_buf_put(b, json, jlen);
        bson_free(json);
        return;
    }
    /* Anything else: written inside a wrapper, then cut out of it. */
    bson_t tmp = BSON_INITIALIZER;
    char *json = NULL;
    size_t jlen = 0;
    if (bson_append_iter(&tmp, "v", 1, it))
        json = bson_as_relaxed_extended_json(&tmp, &jlen);
    bson_destroy(&tmp);
    static const char head[] = "{ \"v\" : ";
    static const char tail[] = " }";
    if (!json || jlen < sizeof head - 1 + sizeof tail - 1 ||
        memcmp(json, head, sizeof head - 1) != 0 ||
        memcmp(json + jlen - (sizeof tail - 1), tail, sizeof tail - 1) != 0) {
        bson_free(json);
        b->failed = 1;
        return;
    }
    outbox_kit_buf_put(b, json + sizeof head - 1, jlen - (sizeof head - 1) - (sizeof tail - 1));
    bson_free(json);
}
