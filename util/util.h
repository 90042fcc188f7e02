/*
 * util.h -- the few helpers every layer of loom needs: a monotonic clock, environment
 * variables read by one set of rules, and overflow-checked size arithmetic.  The clock and
 * the size helpers are static inline; the environment readers live in util/env.c (they
 * remember, process-wide, which variables they already warned about).  Every layer may
 * include this header.
 *
 * Environment rules (docs/env.md):
 *   - a switch (util_env_switch, util_env_on) is on for 1, true, yes, on and off for 0,
 *     false, no, off; unset, empty or anything else is its default (off for util_env_on),
 *     anything else with one warning on stderr naming the variable.
 *   - a number (util_env_int, util_env_double) must parse completely and lie in the range
 *     the caller gives; otherwise the default is used, with one warning naming the
 *     variable, the value and the range.
 *   - a choice (util_env_choice) must be one of the listed words; otherwise the default,
 *     with one warning listing the words.
 * The readers never exit and never fail: a bad value costs a warning, not the process.
 *
 * Prefix: util_.
 */
#ifndef LOOM_UTIL_H
#define LOOM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/* An environment switch (the rules above) whose default, unset or unreadable, is def. */
bool util_env_switch(const char *name, bool def);

/* A switch that is off by default. */
static inline bool util_env_on(const char *name) { return util_env_switch(name, false); }

/* An environment variable's value, NULL when unset or empty. */
static inline const char *util_env_str(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* An integer variable in [lo, hi] (decimal, or 0x hex); def when unset, empty or bad. */
int64_t util_env_int(const char *name, int64_t def, int64_t lo, int64_t hi);

/* A real variable in [lo, hi]; def when unset, empty or bad. */
double util_env_double(const char *name, double def, double lo, double hi);

/* Index of the variable's value in words[0..n) (exact match); def when unset, empty or
 * not one of them. */
int util_env_choice(const char *name, const char *const *words, int n, int def);

/* One warning per variable per process, on stderr (the readers above use it; a caller
 * with its own parse may too).  Thread-safe. */
void util_env_warn(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- sizes
 * Overflow-checked arithmetic for every size, count and byte computation: each returns
 * false (and leaves *out unchanged) when the exact result does not fit, so a caller
 * refuses the input instead of wrapping to a small or negative size. */
static inline bool util_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

static inline bool util_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

static inline bool util_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* The product of n int64 factors (each >= 0) in *out; false on overflow or a negative
 * factor. */
static inline bool util_prod_i64(const int64_t *f, int n, int64_t *out)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++)
        if (f[i] < 0 || !util_mul_i64(p, f[i], &p))
            return false;
    *out = p;
    return true;
}

#endif /* LOOM_UTIL_H */
