/* A tool's own error and warning lines (say.c). */
#ifndef OUTBOX_TOOLS_SAY_H
#define OUTBOX_TOOLS_SAY_H

#include <stdarg.h>

/* "prog: message" and a newline on stderr, in one write: the message kept
 * to one line (line breaks become spaces) and every secret the tool was
 * given masked (secrets.h). */
void tool_vsay(const char *prog, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
