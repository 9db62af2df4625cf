/* Subjects from the destination template, and the stream names our
 * destination_create derives from them. */
#include <stdio.h>
#include <string.h>

#include "nats_int.h"

int outbox_nats_subject(outbox_kit_buf_t *b, const char *tpl, const char *route,
                        const char *destination, char *why, size_t size)
{
    outbox_kit_buf_reset(b);
    outbox_kit_template(b, tpl, route, destination);
    if (b->failed) {
        snprintf(why, size, "out of memory building the subject");
        return -1;
    }
    const char *s = b->data ? b->data : "";
    char shown[200];
    outbox_kit_text_line(s, shown, sizeof shown);
    if (s[0] == '\0') {
        snprintf(why, size, "the subject is empty (route %s)", route ? route : "?");
        return -1;
    }
    /* Tokens are separated by '.', none empty; a publish subject holds no
     * wildcard token and no white space. */
    const char *tok = s;
    for (const char *p = s;; p++) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            snprintf(why, size, "subject \"%s\" contains white space", shown);
            return -1;
        }
        if (*p == '.' || *p == '\0') {
            size_t len = (size_t)(p - tok);
            if (len == 0) {
                snprintf(why, size, "subject \"%s\" has an empty token", shown);
                return -1;
            }
            if (len == 1 && (tok[0] == '*' || tok[0] == '>')) {
                snprintf(why, size, "subject \"%s\" is a wildcard, which cannot be published to",
                         shown);
                return -1;
            }
            if (*p == '\0')
                break;
            tok = p + 1;
        }
    }
    return 0;
}

void outbox_nats_stream_name(const char *subject, char *out, size_t size)
{
    /* FNV-1a: only to tell apart subjects that map to the same name. */
    uint32_t hash = 2166136261u;
    size_t w = 0;
    bool changed = false;
    for (const char *p = subject; *p; p++) {
        unsigned char c = (unsigned char)*p;
        hash = (hash ^ c) * 16777619u;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok)
            changed = true;
        if (w + 1 < size - 10)
            out[w++] = ok ? (char)c : '_';
    }
    out[w] = '\0';
    if (changed)
        snprintf(out + w, size - w, "_%08x", hash);
}
