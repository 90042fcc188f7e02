/*
 * plugin.c -- the plugin's one entry point: it registers each template with loom.
 */
#include "kernels.h"

LOOM_PLUGIN_INIT(p)
{
    return loom_plugin_register(p, &rmsnorm_template) || loom_plugin_register(p, &gemm_bias_act_template) ||
           loom_plugin_register(p, &gemm_plain_template) || loom_plugin_register(p, &ikbo_gather_softmax_template);
}
