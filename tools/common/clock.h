/* The clocks the tools read (the CLI, its metrics server, the span
 * exporter, outbox-bench), in microseconds: one definition instead of a
 * static copy in each file that needs one. */
#ifndef OUTBOX_TOOLS_CLOCK_H
#define OUTBOX_TOOLS_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC: for intervals, deadlines and rates. */
int64_t tool_mono_us(void);
/* CLOCK_REALTIME: for instants shown to people or sent to other programs. */
int64_t tool_wall_us(void);

#endif
