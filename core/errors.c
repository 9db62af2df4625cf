/* Error codes and diagnostics. Messages live in buffers owned by handles. */
#include <stdio.h>
#include <string.h>

#include "outbox_int.h"

const char *outbox_strerror(int code)
{
    switch (code) {
    case OUTBOX_OK: return "success";
    case OUTBOX_ETRANSIENT: return "transient failure";
    case OUTBOX_EPERMANENT: return "permanent failure";
    case OUTBOX_ENOTSUP: return "not supported";
    case OUTBOX_EABI: return "driver ABI mismatch";
    case OUTBOX_ECONFLICT: return "conflict: fence lost";
    case OUTBOX_EINVAL: return "invalid argument";
    case OUTBOX_ENOMEM: return "out of memory";
    case OUTBOX_ENOTFOUND: return "not found";
    case OUTBOX_ESCHEMA: return "schema mismatch";
    case OUTBOX_EMISSING: return "table or database missing";
    default: return "unknown error";
    }
}

int outbox_diag_vset(outbox_diag_t *d, int code, const char *fmt, va_list ap)
{
    if (d == NULL)
        return code;
    d->code = code;
    vsnprintf(d->message, sizeof d->message, fmt, ap);
    return code;
}

int outbox_diag_set(outbox_diag_t *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbox_diag_vset(d, code, fmt, ap);
    va_end(ap);
    return code;
}

void outbox_diag_clear(outbox_diag_t *d)
{
    if (d == NULL)
        return;
    d->code = OUTBOX_OK;
    d->message[0] = '\0';
}
