/* Telling a service manager how the relay is doing: systemd's sd_notify
 * protocol through libsystemd when the build has it (meson option
 * "systemd"), nothing otherwise. Under a unit with Type=notify the relay
 * sends READY=1 once every route's workers run, STATUS= lines, WATCHDOG=1
 * while its workers keep stepping (WatchdogSec=), and STOPPING=1 when it
 * starts draining. Outside systemd (no NOTIFY_SOCKET) every call is a
 * no-op. */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

#ifdef OUTBOX_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static void notify(const char *state)
{
#ifdef OUTBOX_HAVE_SYSTEMD
    /* 0 keeps NOTIFY_SOCKET for the later messages. */
    sd_notify(0, state);
#else
    (void)state;
#endif
}

bool cli_notify_available(void)
{
#ifdef OUTBOX_HAVE_SYSTEMD
    return true;
#else
    return false;
#endif
}

void cli_notify_ready(const char *status)
{
    char msg[512];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s", status);
    notify(msg);
}

void cli_notify_status(const char *status)
{
    char msg[512];
    snprintf(msg, sizeof msg, "STATUS=%s", status);
    notify(msg);
}

void cli_notify_stopping(void)
{
    notify("STOPPING=1\nSTATUS=draining: releasing what the workers hold");
}

int64_t cli_notify_watchdog_us(void)
{
#ifdef OUTBOX_HAVE_SYSTEMD
    uint64_t us = 0;
    if (sd_watchdog_enabled(0, &us) > 0 && us > 0 && us < (uint64_t)INT64_MAX)
        return (int64_t)us;
#endif
    return 0;
}

void cli_notify_watchdog(void)
{
    notify("WATCHDOG=1");
}
