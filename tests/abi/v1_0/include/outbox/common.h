/* FROZEN COPY of the liboutbox driver SDK header as it was at ABI 1.0
 * (git commit 1254cf3), kept only to build tests/abi/store-mem10, the
 * compatibility test driver that proves a driver built against the 1.0
 * headers still loads into the current host and passes the conformance
 * battery. It must never be edited: a change here would stop the test from
 * proving anything about drivers that were really built against 1.0.
 */
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
#else
#define OUTBOX_PRINTF(fmt, args)
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
};

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
