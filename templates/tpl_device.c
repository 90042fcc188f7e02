/*
 * tpl_device.c -- the templates whose inputs and reference the autotuner makes on the
 * device (templates/tpl_device.h says what an entry holds and why it is a table).
 */
#include "tpl_device.h"

static const tpl_device *const entries[] = {&tpl_device_ikbo_lce};

const tpl_device *tpl_device_find(const loom_template *t)
{
    for (size_t i = 0; t && i < sizeof entries / sizeof entries[0]; i++)
        if (entries[i]->t == t)
            return entries[i];
    return NULL;
}
