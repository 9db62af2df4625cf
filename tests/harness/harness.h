/* The C test programs' side of tests/harness/harness.sh: the same skip
 * rule, worded alike, and the same private ports. Header only, so that a
 * test program needs no library for it: include it, and nothing more.
 *
 * Not thread-safe: call it from a test's main thread (or a Check case's
 * own process). */
#ifndef TH_HARNESS_H
#define TH_HARNESS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* argv[0] without its directory, as glibc and musl set it before main:
 * the program named in a skip banner, like harness.sh's $(basename "$0"). */
extern char *program_invocation_short_name;

/* The HOW of th_need_env for a server of tools/services/KIND.sh, in
 * harness.sh's need_service words. */
#define TH_START_SERVICE(kind)                                                                     \
    "start a server with eval \"$(tools/services/" kind ".sh start DIR)\" (tools/test does)"

/* The value of the environment variable var, which the test cannot run
 * without. Unset or empty: under CI=true a failure (exit 1), since CI must
 * run every test; elsewhere a loud skip (exit 77) saying how to get it.
 * harness.sh's skip is the same rule: a change to one is a change to both. */
static inline const char *th_need_env(const char *var, const char *how)
{
    const char *value = getenv(var);
    if (value != NULL && value[0] != '\0')
        return value;
    const char *ci = getenv("CI");
    if (ci != NULL && strcmp(ci, "true") == 0) {
        fprintf(stderr, "FAIL: %s is not set, and CI=true: every test must run in CI (%s)\n", var,
                how);
        exit(1);
    }
    fprintf(stderr,
            "\n*** SKIPPED %s: %s is not set. ***\n"
            "*** %s, then run the test again. ***\n\n",
            program_invocation_short_name, var, how);
    exit(77);
}

/* harness.sh's private ports: below 32768, where Linux's ephemeral range
 * begins, so no client's outgoing connection can hold a port that a
 * restarted server must bind again; above the shared servers' defaults
 * (23xxx). */
#define TH_PORT_LOW 24000
#define TH_PORT_SPAN 8000

/* A private port nothing is bound to now. A server started on it can still
 * lose a race with another test's: the caller's start says so. */
static inline int th_private_port(void)
{
    /* The pid goes in at every call: Check forks every case from one
     * state, and two cases must not walk the same ports. */
    static uint32_t state;
    if (state == 0)
        state = (uint32_t)time(NULL);
    for (int tries = 0; tries < TH_PORT_SPAN; tries++) {
        state = state * 1103515245u + 12345u + (uint32_t)getpid();
        int port = TH_PORT_LOW + (int)((state >> 8) % TH_PORT_SPAN);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            break;
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        /* Without SO_REUSEADDR, bind fails on a port any socket holds,
         * a listener on 0.0.0.0 or a connection in TIME_WAIT included. */
        int free_now = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (free_now)
            return port;
    }
    fprintf(stderr, "FAIL: no free private port from %d to %d\n", TH_PORT_LOW,
            TH_PORT_LOW + TH_PORT_SPAN - 1);
    exit(1);
}

#endif
