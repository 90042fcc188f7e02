/*
 * tp_noentry.c -- a test plugin with loom's version but no entry point (loom_plugin_init).
 */
#include "loom.h"

__attribute__((visibility("default"))) extern const char loom_plugin_version[];
__attribute__((visibility("default"))) const char loom_plugin_version[] = LOOM_VERSION;
