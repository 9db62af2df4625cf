/* Relation names ("table" or "schema.table"): the core's
 * outbox_relation_valid and the kit's outbox_kit_relname_parse must agree;
 * a parsed name shows as exactly its input, parses again to the same
 * parts, and quotes to "schema"."table". */
#include "fuzz.h"
#include "outbox/kit.h"
#include "outbox/outbox.h"

static void *fuzz_alloc(size_t n) { return malloc(n); }
static void *fuzz_realloc(void *p, size_t n) { return realloc(p, n); }
static void fuzz_free(void *p) { free(p); }
static const outbox_host_t host = {
    .struct_size = sizeof host, .alloc = fuzz_alloc, .realloc = fuzz_realloc, .free = fuzz_free};

/* [A-Za-z_][A-Za-z0-9_]{0,62}, written out again for this harness. */
static int ref_part(const char *s, size_t n)
{
    if (n < 1 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

static int ref_valid(const char *s)
{
    const char *dot = strchr(s, '.');
    if (!dot)
        return ref_part(s, strlen(s));
    return ref_part(s, (size_t)(dot - s)) && ref_part(dot + 1, strlen(dot + 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = fuzz_cstring(data, size);
    if (!name)
        return 0;
    int want = ref_valid(name);
    FUZZ_CHECK(outbox_relation_valid(name) == want);
    FUZZ_CHECK(outbox_kit_ident_valid(name, size) == (want && !strchr(name, '.')));

    outbox_kit_relname_t r;
    memset(&r, 'X', sizeof r);
    int rc = outbox_kit_relname_parse(name, &r);
    FUZZ_CHECK(rc == (want ? 0 : -1));
    if (rc != 0) {
        FUZZ_CHECK(r.schema[0] == '\0' && r.table[0] == '\0');
        free(name);
        return 0;
    }
    FUZZ_CHECK(outbox_kit_ident_valid(r.table, strlen(r.table)));
    FUZZ_CHECK(r.schema[0] == '\0' || outbox_kit_ident_valid(r.schema, strlen(r.schema)));

    char shown[2 * OUTBOX_KIT_IDENT_MAX + 2];
    outbox_kit_relname_show(&r, shown, sizeof shown);
    FUZZ_CHECK(strcmp(shown, name) == 0);
    outbox_kit_relname_t again;
    FUZZ_CHECK(outbox_kit_relname_parse(shown, &again) == 0);
    FUZZ_CHECK(strcmp(again.schema, r.schema) == 0 && strcmp(again.table, r.table) == 0);

    /* Identifiers hold no quote, so quoting only adds them around. */
    outbox_kit_buf_t b;
    outbox_kit_buf_init(&b, &host);
    outbox_kit_buf_relname(&b, &r, '"');
    FUZZ_CHECK(!b.failed);
    char want_q[2 * OUTBOX_KIT_IDENT_MAX + 8];
    if (r.schema[0])
        snprintf(want_q, sizeof want_q, "\"%s\".\"%s\"", r.schema, r.table);
    else
        snprintf(want_q, sizeof want_q, "\"%s\"", r.table);
    FUZZ_CHECK(strcmp(b.data, want_q) == 0);
    outbox_kit_buf_free(&b);

    outbox_kit_relname_t beside;
    outbox_kit_relname_beside(&r, "outbox_checkpoint", &beside);
    FUZZ_CHECK(strcmp(beside.schema, r.schema) == 0 &&
               strcmp(beside.table, "outbox_checkpoint") == 0);
    free(name);
    return 0;
}
