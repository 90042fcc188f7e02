/*
 * env.c -- environment variables read by one set of rules (util.h says which), with one
 * warning per variable for a value that cannot be read.  The warned-about names are kept
 * in a small fixed table under a mutex: loom reads a few dozen variables in all.
 */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>

#define UTIL_WARNED_MAX 64

static pthread_mutex_t warned_mu = PTHREAD_MUTEX_INITIALIZER;
static char warned[UTIL_WARNED_MAX][48];
static int nwarned;

/* True the first time for name (names longer than the table's slots are compared by
 * their first 47 characters, which tells loom's variables apart). */
static bool first_warning(const char *name)
{
    pthread_mutex_lock(&warned_mu);
    bool first = true;
    for (int i = 0; i < nwarned && first; i++)
        if (strncmp(warned[i], name, sizeof warned[i] - 1) == 0)
            first = false;
    if (first && nwarned < UTIL_WARNED_MAX)
        snprintf(warned[nwarned++], sizeof warned[0], "%s", name);
    pthread_mutex_unlock(&warned_mu);
    return first;
}

void util_env_warn(const char *name, const char *fmt, ...)
{
    if (!first_warning(name))
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "loom: %s: %s\n", name, msg);
}

bool util_env_switch(const char *name, bool def)
{
    const char *v = util_env_str(name);
    if (!v)
        return def;
    static const char *const on[] = {"1", "true", "yes", "on"};
    static const char *const off[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof on / sizeof *on; i++)
        if (strcasecmp(v, on[i]) == 0)
            return true;
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if (strcasecmp(v, off[i]) == 0)
            return false;
    util_env_warn(name, "'%s' is not a switch (1/true/yes/on or 0/false/no/off): taken as %s", v,
                  def ? "on, the default" : "off");
    return def;
}

int64_t util_env_int(const char *name, int64_t def, int64_t lo, int64_t hi)
{
    const char *v = util_env_str(name);
    if (!v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || end == v || *end || x < lo || x > hi) {
        util_env_warn(name, "'%s' is not an integer in [%lld, %lld]: the default %lld is used", v, (long long)lo,
                      (long long)hi, (long long)def);
        return def;
    }
    return (int64_t)x;
}

double util_env_double(const char *name, double def, double lo, double hi)
{
    const char *v = util_env_str(name);
    if (!v)
        return def;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
        util_env_warn(name, "'%s' is not a number in [%g, %g]: the default %g is used", v, lo, hi, def);
        return def;
    }
    return x;
}

int util_env_choice(const char *name, const char *const *words, int n, int def)
{
    const char *v = util_env_str(name);
    if (!v)
        return def;
    for (int i = 0; i < n; i++)
        if (strcmp(v, words[i]) == 0)
            return i;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", words[i]);
    util_env_warn(name, "'%s' is not one of %s: the default %s is used", v, list, def >= 0 && def < n ? words[def] : "(none)");
    return def;
}
