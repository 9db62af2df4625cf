/* What the fuzz harnesses share. Each harness defines
 * LLVMFuzzerTestOneInput and checks properties of the code under test;
 * FUZZ_CHECK aborts on a broken one, so libFuzzer (or the corpus replay)
 * reports the input that broke it. */
#ifndef OUTBOX_FUZZ_H
#define OUTBOX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* data[0..size) as a NUL-terminated string (malloc'd), or NULL when it
 * holds a NUL byte: the parsers under test take C strings. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size)
{
    if (memchr(data, '\0', size))
        return NULL;
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* 1 when s holds no control byte (below 0x20, or 0x7f): one line of text. */
static inline int fuzz_one_line(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

#endif
