/*
 * tp_oldversion.c -- a test plugin built, as it says, against another loom (0.0.1): loom
 * must refuse it without calling its entry point (which would crash).
 */
#include "loom.h"

#include <stdlib.h>

__attribute__((visibility("default"))) extern const char loom_plugin_version[];
__attribute__((visibility("default"))) const char loom_plugin_version[] = "0.0.1";
__attribute__((visibility("default"))) int loom_plugin_init(loom_plugin *p);
__attribute__((visibility("default"))) int loom_plugin_init(loom_plugin *p)
{
    (void)p;
    abort();
}
