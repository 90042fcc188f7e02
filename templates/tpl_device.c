/*
 * tpl_device.c -- the templates whose inputs and reference the autotuner makes on the
 * device (templates/tpl_device.h says what an entry holds and why it is a table).
 */
#include "tpl_device.h"

static const tpl_device *const entries[] = {&tpl_device_ikbo_lce, &tpl_device_ikbo_fa, &tpl_device_broadcast_add};

const tpl_device *tpl_device_find(const loom_template *t)
{
    for (size_t i = 0; t && i < sizeof entries / sizeof entries[0]; i++)
        if (entries[i]->t == t)
            return entries[i];
    return NULL;
}

loom_val tpl_device_ulp_ub(loom_kernel *k, loom_dtype dt, loom_val x, loom_shape t)
{
    double rel = dt == LOOM_BF16 ? 0x1p-7 : dt == LOOM_F32 ? 0x1p-23 : 0x1p-10;
    double tiny = dt == LOOM_BF16 ? 0x1p-133 : dt == LOOM_F32 ? 0x1p-149 : 0x1p-24;
    loom_val r = loom_mul(k, loom_abs(k, x), loom_splat(k, loom_const_f(k, LOOM_F32, rel), t));
    return loom_max(k, r, loom_splat(k, loom_const_f(k, LOOM_F32, tiny), t));
}
