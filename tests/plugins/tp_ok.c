/*
 * tp_ok.c -- a test plugin that loads: template tp_scale (tp_common.h) with an operation
 * for loomc aot (loom_aot_op) that adds a second kernel, the template's at BLOCK=128, and
 * a function naming it, so a test sees both hooks run.
 */
#include "tp_common.h"

#include <stdlib.h>

static loom_status op_compile(loom_aot_file *f, void **state, char *err, size_t errlen)
{
    const loom_aot_request *r = loom_aot_file_request(f);
    int64_t cf[2] = {128, 4};
    loom_kernel *k = tp_build(r->shapes[0], cf, err, errlen);
    if (!k)
        return LOOM_ERR_INVALID;
    int i = loom_aot_add_kernel(f, k, "tp_scale's operation: BLOCK=128", err, errlen);
    loom_kernel_destroy(k);
    if (i < 0)
        return LOOM_ERR_COMPILE;
    int *s = malloc(sizeof *s);
    if (!s)
        return snprintf(err, errlen, "out of memory"), LOOM_ERR_NOMEM;
    *s = i;
    *state = s;
    return LOOM_OK;
}

static loom_status op_write(loom_aot_file *f, void *state, FILE *h, FILE *c, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const char *P = loom_aot_file_request(f)->prefix;
    fprintf(h, "\n/* The operation's second kernel's PTX entry (row 0 launches kernel %d). */\n"
               "const char *%s_tp_scale_second(void);\n",
            loom_aot_file_row_kernel(f, 0), P);
    fprintf(c, "\nconst char *%s_tp_scale_second(void) { return aot_kernels[%d].name; }\n", P, *(int *)state);
    return LOOM_OK;
}

static const loom_aot_op op = {op_compile, op_write, free};

static loom_template tp_scale = TP_TEMPLATE("tp_scale");

LOOM_PLUGIN_INIT(p)
{
    tp_scale.aot = &op;
    return loom_plugin_register(p, &tp_scale);
}
