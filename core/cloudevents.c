/* CloudEvents 1.0 attributes for one row, by attribute name; each sink
 * applies its protocol binding's spelling. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox_int.h"

static void add(outbox_ce_headers_t *h, const char *name, const char *value)
{
    if (value != NULL && h->n < sizeof h->headers / sizeof h->headers[0])
        h->headers[h->n++] = (outbox_header_t){.name = name, .value = value};
}

void outbox_ce_build(const outbox_row_t *row, const char *source, const char *key,
                     outbox_ce_headers_t *out)
{
    out->n = 0;
    outbox_format_rfc3339(row->occurred_at, out->time);
    add(out, "specversion", "1.0");
    add(out, "id", row->event_id);
    add(out, "type", row->event_type);
    add(out, "source", source);
    add(out, "time", out->time);
    add(out, "datacontenttype", "application/json");
    add(out, "partitionkey", key);
    add(out, "traceparent", row->traceparent);
    add(out, "tenantid", row->tenant_id);
    add(out, "correlationid", row->correlation_id);
    add(out, "causationid", row->causation_id);
    add(out, "executionid", row->execution_id);
    if (row->hlc != 0) {
        snprintf(out->hlc, sizeof out->hlc, "%" PRId64, row->hlc);
        add(out, "hlc", out->hlc);
    }
}

char *outbox_template_expand(const char *tmpl, const char *route)
{
    static const char mark[] = "{route}";
    const size_t mlen = sizeof mark - 1;
    size_t count = 0;
    for (const char *p = strstr(tmpl, mark); p != NULL; p = strstr(p + mlen, mark))
        count++;
    size_t rlen = strlen(route);
    size_t len = strlen(tmpl) - count * mlen + count * rlen;
    char *out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    char *w = out;
    for (const char *p = tmpl; *p != '\0';) {
        if (strncmp(p, mark, mlen) == 0) {
            memcpy(w, route, rlen);
            w += rlen;
            p += mlen;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    return out;
}
