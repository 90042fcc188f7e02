/*
 * tp_bad.c -- a test plugin whose loom_plugin_init does what LOOM_TP_FAULT says:
 *   nofield   registers a template without its reference (a required field)
 *   dup       registers two templates of one name
 *   builtin   registers a template named gemm (a built-in's name)
 *   badkey    a config key that is no C identifier
 *   none      registers nothing
 *   fails     returns 3
 *   (unset)   registers tp_other, a good template
 */
#include "tp_common.h"

#include <stdlib.h>
#include <string.h>

static loom_template good = TP_TEMPLATE("tp_other"), twin = TP_TEMPLATE("tp_other"), gemm = TP_TEMPLATE("gemm"),
                     nofield = TP_TEMPLATE("tp_nofield"), badkey = TP_TEMPLATE("tp_badkey");

LOOM_PLUGIN_INIT(p)
{
    const char *f = getenv("LOOM_TP_FAULT");
    if (!f)
        return loom_plugin_register(p, &good);
    if (!strcmp(f, "nofield")) {
        nofield.reference = NULL;
        return loom_plugin_register(p, &good) || loom_plugin_register(p, &nofield);
    }
    if (!strcmp(f, "dup"))
        return loom_plugin_register(p, &good) || loom_plugin_register(p, &twin);
    if (!strcmp(f, "builtin"))
        return loom_plugin_register(p, &gemm);
    if (!strcmp(f, "badkey")) {
        badkey.config[0].key = "block-size";
        return loom_plugin_register(p, &badkey);
    }
    if (!strcmp(f, "fails"))
        return 3;
    return 0; /* "none" */
}
