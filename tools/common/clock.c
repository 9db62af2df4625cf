#include <time.h>

#include "clock.h"

static int64_t read_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t tool_mono_us(void)
{
    return read_us(CLOCK_MONOTONIC);
}

int64_t tool_wall_us(void)
{
    return read_us(CLOCK_REALTIME);
}
