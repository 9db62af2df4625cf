/* The version of the library the program runs with (outbox/version.h has
 * the one it was built against). */
#include "outbox/outbox.h"

const char *outbox_version(void)
{
    return OUTBOX_VERSION;
}

unsigned outbox_version_number(void)
{
    return OUTBOX_VERSION_NUMBER;
}
