/* A tool's own one-line messages on stderr, with its secrets masked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "say.h"
#include "secrets.h"

void tool_vsay(const char *prog, const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    char *masked = tool_redact(line);
    fprintf(stderr, "%s: %s\n", prog, masked ? masked : "(out of memory)");
    free(masked);
}
