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

void outbox_ce_set_traceparent(outbox_ce_headers_t *h, const char *traceparent)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->headers[i].name, "traceparent") == 0) {
            h->headers[i].value = traceparent;
            return;
        }
    add(h, "traceparent", traceparent);
}

/* Lower-case hex digits only, as version 00 requires. */
static int hex_run(const char *p, size_t n, int *all_zero)
{
    *all_zero = 1;
    for (size_t i = 0; i < n; i++) {
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
        *all_zero &= p[i] == '0';
    }
    return 1;
}

int outbox_traceparent_valid(const char *t)
{
    int zero;
    if (t == NULL || strlen(t) != OUTBOX_TRACEPARENT_LEN || strncmp(t, "00-", 3) != 0 || t[35] != '-' ||
        t[52] != '-')
        return 0;
    if (!hex_run(t + 3, 32, &zero) || zero) /* an all-zero trace id is invalid */
        return 0;
    if (!hex_run(t + 36, 16, &zero) || zero) /* so is an all-zero parent id */
        return 0;
    return hex_run(t + 53, 2, &zero);
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
