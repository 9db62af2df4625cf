/* Durations ("500ms", "--poll 20ms"): outbox_parse_duration against the
 * grammar it documents, a whole number and one of us, ms, s, m, h, d, with
 * a value of at most OUTBOX_DURATION_MAX_US. A parsed value formatted in
 * its largest exact unit parses back to itself; a refusal is one line and
 * leaves the output alone. */
#include <inttypes.h>

#include "fuzz.h"
#include "outbox/outbox.h"

static const struct {
    const char *name;
    int64_t us;
} units[] = {{"d", INT64_C(86400000000)}, {"h", INT64_C(3600000000)}, {"m", INT64_C(60000000)},
             {"s", 1000000}, {"ms", 1000}, {"us", 1}};

/* The value text stands for, or -1 when it is not a duration in range. */
static int64_t ref_parse(const char *text)
{
    const char *p = text;
    int64_t n = 0;
    while (*p >= '0' && *p <= '9') {
        /* Saturate just above the bound: anything larger is refused anyway. */
        if (n <= OUTBOX_DURATION_MAX_US)
            n = n * 10 + (*p - '0');
        p++;
    }
    if (p == text)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].name) == 0)
            return n <= OUTBOX_DURATION_MAX_US / units[i].us ? n * units[i].us : -1;
    return -1;
}

static void format(int64_t us, char *buf, size_t size)
{
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (us % units[i].us == 0) {
            snprintf(buf, size, "%" PRId64 "%s", us / units[i].us, units[i].name);
            return;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstring(data, size);
    if (!text)
        return 0;
    const int64_t untouched = INT64_C(-12345);
    int64_t us = untouched;
    outbox_diag_t d = {0};
    int rc = outbox_parse_duration(text, &us, &d);
    int64_t want = ref_parse(text);
    if (rc == OUTBOX_OK) {
        FUZZ_CHECK(want >= 0 && us == want);
        FUZZ_CHECK(us >= 0 && us <= OUTBOX_DURATION_MAX_US);
        char again[48];
        format(us, again, sizeof again);
        int64_t back = -1;
        FUZZ_CHECK(outbox_parse_duration(again, &back, NULL) == OUTBOX_OK && back == us);
    } else {
        FUZZ_CHECK(rc == OUTBOX_EINVAL && d.code == rc);
        FUZZ_CHECK(want < 0);
        FUZZ_CHECK(us == untouched);
        size_t len = strlen(d.message);
        FUZZ_CHECK(len > 0 && len < OUTBOX_MESSAGE_MAX && fuzz_one_line(d.message));
    }
    /* No output pointer and no diagnostic: the same verdict. */
    FUZZ_CHECK(outbox_parse_duration(text, NULL, NULL) == rc);
    free(text);
    return 0;
}
