/* liboutbox: definitions shared by the application API and the driver SDK.
 *
 * Error codes are stable negative integers and are never renumbered.
 * Nothing in this library prints or exits; details travel in a
 * handle-owned message buffer.
 */
#ifndef OUTBOX_COMMON_H
#define OUTBOX_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(OUTBOX_BUILDING_LIBRARY)
#define OUTBOX_API __attribute__((visibility("default")))
#else
#define OUTBOX_API
#endif

#if defined(__GNUC__)
#define OUTBOX_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define OUTBOX_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define OUTBOX_PRINTF(fmt, args)
#define OUTBOX_DEPRECATED(msg)
#endif

enum outbox_status {
    OUTBOX_OK = 0,
    OUTBOX_ETRANSIENT = -1, /* connection lost, serialization failure, lock timeout: retry */
    OUTBOX_EPERMANENT = -2, /* will fail again the same way */
    OUTBOX_ENOTSUP = -3,    /* the driver or the schema lacks the feature */
    OUTBOX_EABI = -4,       /* driver ABI mismatch or malformed driver */
    OUTBOX_ECONFLICT = -5,  /* a fence was lost: the rows were claimed again by someone else */
    OUTBOX_EINVAL = -6,     /* invalid argument */
    OUTBOX_ENOMEM = -7,
    OUTBOX_ENOTFOUND = -8,  /* driver, table, column or row not found */
    OUTBOX_ESCHEMA = -9,    /* the live schema does not match what the operation needs */
    OUTBOX_EMISSING = -10,  /* the table, collection or database file a store was opened on
                               does not exist (schema apply makes it) */
};

/* 1 when the caller's struct *p of type T covers member: p->struct_size
 * reaches past the member's end. The one rule for reading a versioned
 * struct that the other side filled in (older headers give a smaller
 * struct_size): read a member only when this holds, else use its default.
 * T must start with uint32_t struct_size. */
#define OUTBOX_STRUCT_HAS(T, p, member)                                                    \
    ((size_t)(p)->struct_size >= offsetof(T, member) + sizeof(((const T *)0)->member))

/* 1 when the vtable (or host table) *p of type T has the optional entry:
 * its struct_size covers it and it is not NULL. The one check before
 * calling an entry the other side may lack. */
#define OUTBOX_ENTRY_HAS(T, p, entry) (OUTBOX_STRUCT_HAS(T, p, entry) && (p)->entry != NULL)

/* The longest duration the library and its drivers take, parsed or in a
 * config: 36500 days (100 years of 365 days), in microseconds. A duration
 * is added to a clock reading (a poll or a retry delay to now, a lease
 * subtracted from it), sometimes with a second one on top; bounded like
 * this the sum stays below INT64_MAX by a factor of more than a thousand, a
 * timestamp of any store holds it, and no lease, poll, backoff, timeout or
 * purge age anyone means is longer. */
#define OUTBOX_DURATION_MAX_US (INT64_C(36500) * 86400 * 1000000)

/* Textual name of a status code; never NULL, static storage. */
OUTBOX_API const char *outbox_strerror(int code);

/* A 36-character canonical UUID text plus NUL. */
#define OUTBOX_UUID_STRLEN 36

/* Size of every handle-owned diagnostic message buffer. */
#define OUTBOX_MESSAGE_MAX 512

/* Diagnostic: a code and a message, owned by whoever owns the handle. */
typedef struct outbox_diag {
    int code;
    char message[OUTBOX_MESSAGE_MAX];
} outbox_diag_t;

#ifdef __cplusplus
}
#endif
#endif
