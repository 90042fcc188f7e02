/*
 * util.h -- the few helpers every layer of loom needs: a monotonic clock and environment
 * switches.  Header-only (static inline), so it adds no link dependency between layers;
 * every layer may include it.
 *
 * Prefix: util_.
 */
#ifndef LOOM_UTIL_H
#define LOOM_UTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Milliseconds on the monotonic clock (for durations only). */
static inline double util_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* An environment switch: set, not empty and not "0". */
static inline bool util_env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* An environment variable's value, NULL when unset or empty. */
static inline const char *util_env_str(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

#endif /* LOOM_UTIL_H */
