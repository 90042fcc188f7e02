/*
 * gen_ops.c -- the operations of several kernels in `loomc aot`'s files (aot/aot.c,
 * step 3): the built-in IKBO templates' (loom_aot_op), written from the descriptions
 * loom's C API runs -- the LCE's ik_stage (ops/lce_op.h), the flash attention's
 * fa_units (templates/ikbo_fa_units.h).
 */
#include "gen.h"
#include "lce_op.h" /* ik_stage: what the LCE operation runs; through tpl.h, the IKBO kernels */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- writing: the operations */

static int64_t sval(const gen *g, const int64_t *shape, const char *key)
{
    for (int i = 0; i < g->t->nshape; i++)
        if (!strcmp(g->t->shape[i].key, key))
            return shape[i];
    return 0;
}

/* The operations of the built-in IKBO templates (loom_aot_op).  Their hooks are given the
 * file's own message buffer as err, so they report through gen_fail like the rest of this
 * file. */

/* ikbo_lce's: each shape's stage, as data, and its steps' kernels. */
typedef struct lce_op {
    int n;
    ik_stage *stage;
    int (*kernel)[IK_MAX_STEPS];
} lce_op;

static void lce_release(void *state)
{
    lce_op *o = state;
    if (!o)
        return;
    for (int i = 0; o->stage && i < o->n; i++)
        ik_stage_free(&o->stage[i]);
    free(o->stage);
    free(o->kernel);
    free(o);
}

/* ikbo_lce: each shape's stage as data, its kernels added to the file's. */
static loom_status lce_compile(loom_aot_file *g, void **state, char *err_, size_t errlen_)
{
    (void)err_, (void)errlen_; /* g->err */
    const loom_aot_request *r = g->r;
    if (r->stage < 0 || r->stage > LOOM_IKBO_PERSISTENT)
        return gen_fail(g, LOOM_ERR_INVALID, "--stage %d is not 0 to 4", r->stage);
    lce_op *o = calloc(1, sizeof *o);
    if (!o)
        return gen_fail(g, LOOM_ERR_NOMEM, "out of host memory");
    *state = o;
    o->n = r->nshapes;
    o->stage = calloc((size_t)(unsigned)r->nshapes, sizeof *o->stage);
    o->kernel = calloc((size_t)(unsigned)r->nshapes, sizeof *o->kernel);
    if (!o->stage || !o->kernel)
        return gen_fail(g, LOOM_ERR_NOMEM, "out of host memory");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        loom_ikbo_lce_shape s = {sval(g, sh, "B"),  sval(g, sh, "U"),  sval(g, sh, "M"),           sval(g, sh, "N"),
                                 sval(g, sh, "Ku"), sval(g, sh, "Kc"), (loom_dtype)sval(g, sh, "dtype"),
                                 (loom_dtype)sval(g, sh, "odtype")};
        loom_ikbo_lce_config c = ik_config_of(r->configs[i]);
        char err[400], text[400];
        gen_shape_text(g, sh, text, sizeof text);
        if (s.dtype == LOOM_E4M3)
            return gen_fail(g, LOOM_ERR_UNSUPPORTED,
                            "ikbo_lce with dtype e4m3 (E transposed, per-row scales) at %s is not an AOT operation yet: "
                            "loom's C API serves it (loom_ikbo_lce_prepare_scaled, then loom_ikbo_lce_run_scaled)",
                            text);
        loom_status st = ik_stage_make(&s, (loom_ikbo_stage)r->stage, &c, NULL, &o->stage[i], err, sizeof err);
        if (st != LOOM_OK)
            return gen_fail(g, st, "ikbo_lce stage %d at %s: %s", r->stage, text, err);
        for (int j = 0; j < o->stage[i].nsteps; j++) {
            char what[500];
            snprintf(what, sizeof what, "ikbo_lce stage %d, step %d at %s", r->stage, j + 1, text);
            if ((o->kernel[i][j] = gen_kern_add(g, o->stage[i].step[j].k, what)) < 0)
                return LOOM_ERR_COMPILE;
        }
    }
    return LOOM_OK;
}

static loom_status put_lce(loom_aot_file *g, void *state, FILE *h, FILE *f, char *err_, size_t errlen_)
{
    (void)err_, (void)errlen_; /* g->err */
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    const lce_op *o = state;
    ik_stage *runs = o->stage;
    int (*kidx)[IK_MAX_STEPS] = o->kernel;
    fprintf(h, "\n/* The IKBO linear compression as an operation (stage %d, %s), as loom_ikbo_lce_prepare and\n"
               " * loom_ikbo_lce_run: prepare once per shape (the weights w_user [M, Ku] and w_cand [M, Kc],\n"
               " * host arrays of the dtype, are padded and uploaded; the operation's buffers allocated),\n"
               " * then run per request on device buffers e_user [U, Ku, N], e_cand [B, Kc, N],\n"
               " * cand_to_user [B] int32 (each in [0, U)) and out [B, M, N].  One operation is used by one\n"
               " * thread at a time. */\n"
               "typedef struct %s_ikbo_lce %s_ikbo_lce;\n"
               "%s_status %s_ikbo_lce_prepare(const %s_ikbo_lce_shape *shape, const void *w_user, const void "
               "*w_cand, %s_ikbo_lce **out);\n"
               "%s_status %s_ikbo_lce_run(%s_ikbo_lce *op, CUdeviceptr e_user, CUdeviceptr e_cand, CUdeviceptr "
               "cand_to_user, CUdeviceptr out, CUstream stream);\n"
               "/* One request at its own B and U (1 to the prepared shape's: the buffers sized for them). */\n"
               "%s_status %s_ikbo_lce_run_at(%s_ikbo_lce *op, int64_t B, int64_t U, CUdeviceptr e_user, CUdeviceptr "
               "e_cand, CUdeviceptr cand_to_user, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_lce_destroy(%s_ikbo_lce *op);\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), P, P, P, P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO LCE operation */\n"
               "enum { AOT_LCE_NBUF = %d, AOT_LCE_CALLER = %d, AOT_LCE_FLAGS = %d, AOT_LCE_BASE = %d, AOT_LCE_B = %d, "
               "AOT_LCE_U = %d, AOT_LCE_M = %d };\n",
            IK_NBUF, IK_CALLER_BUFS, IK_FLAGS, IK_FLAG_BASE, IK_SRC_B, IK_SRC_U, IK_SRC_M);
    fputs((const char *)aot_text_lce, f);
    fprintf(f, "\n/* Stage %d (%s) at each shape of the dispatch table, in its order: {M, Ku, Kc, B, U (the\n"
               " * most a run asks for), bytes an element, the owned buffers' bytes, the weights' fills\n"
               " * {buffer, weight, ld, column}, the kernels {kernel, grid rule {c, div, mult, cap, per B,\n"
               " * per U}, arguments' sources}, the flags' blocks a user}.  Buffers: 0 e_user, 1 e_cand,\n"
               " * 2 cand_to_user, 3 out, then the operation's; sources from %d: the flags' base, B, U, M. */\n"
               "static const aot_lce_plan aot_lce_plans[aot_ikbo_lce_ROWS] = {\n",
            r->stage, loom_ikbo_stage_name((loom_ikbo_stage)r->stage), IK_FLAG_BASE);
    for (int i = 0; i < r->nshapes; i++) {
        const ik_stage *s = &runs[i];
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %lld, %lld, %zu, {", (long long)sval(g, sh, "M"), (long long)sval(g, sh, "Ku"),
                (long long)sval(g, sh, "Kc"), (long long)sval(g, sh, "B"), (long long)sval(g, sh, "U"),
                loom_dtype_size((loom_dtype)sval(g, sh, "dtype")));
        for (int b = 0; b < IK_NBUF; b++)
            fprintf(f, "%s%zu", b ? ", " : "", s->bytes[b]);
        fprintf(f, "},\n     %d, {", s->nfill);
        for (int j = 0; j < s->nfill; j++)
            fprintf(f, "%s{%d, %d, %lld, %lld}", j ? ", " : "", s->fill[j].buf, s->fill[j].weight,
                    (long long)s->fill[j].ld, (long long)s->fill[j].col0);
        fprintf(f, "},\n     %d, {", s->nsteps);
        for (int j = 0; j < s->nsteps; j++) {
            const loom_grid_rule *gr = &s->step[j].grid;
            fprintf(f, "%s{%d, {", j ? ",\n          " : "", kidx[i][j]);
            const int64_t *parts[6] = {gr->c, gr->div, gr->mult, gr->cap};
            int64_t pb[3] = {gr->per[0][IK_RULE_B], gr->per[1][IK_RULE_B], gr->per[2][IK_RULE_B]};
            int64_t pu[3] = {gr->per[0][IK_RULE_U], gr->per[1][IK_RULE_U], gr->per[2][IK_RULE_U]};
            parts[4] = pb, parts[5] = pu;
            for (int q = 0; q < 6; q++)
                fprintf(f, "%s{%lld, %lld, %lld}", q ? ", " : "", (long long)parts[q][0], (long long)parts[q][1],
                        (long long)parts[q][2]);
            fprintf(f, "}, %d, {", s->step[j].nargs);
            for (int a = 0; a < s->step[j].nargs; a++)
                fprintf(f, "%s%d", a ? ", " : "", s->step[j].arg[a]);
            fprintf(f, "}}");
        }
        fprintf(f, "},\n     %lld},\n", (long long)s->blocks_per_user);
    }
    fprintf(f, "};\n");
    fprintf(f, "\nstruct %s_ikbo_lce {\n    struct aot_lce_op *op;\n};\n", P);
    fprintf(f, "\n%s_status %s_ikbo_lce_prepare(const %s_ikbo_lce_shape *shape, const void *w_user, const void "
               "*w_cand, %s_ikbo_lce **out)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_prepare\";\n"
               "    if (out)\n        *out = NULL;\n"
               "    if (!out || !w_user || !w_cand)\n"
               "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !out ? \"out\" : "
               "!w_user ? \"w_user\" : \"w_cand\");\n"
               "    int r = aot_ikbo_lce_row(fn, shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n"
               "    %s_ikbo_lce *p = calloc(1, sizeof *p);\n"
               "    if (!p)\n        return (%s_status)aot_fail(AOT_ERR_NOMEM, \"%%s: out of host memory\", fn);\n"
               "    int st = aot_lce_prepare(fn, &aot_lce_plans[r], w_user, w_cand, &p->op);\n"
               "    if (st != AOT_OK) {\n        free(p);\n        return (%s_status)st;\n    }\n"
               "    *out = p;\n    return %s_OK;\n}\n",
            P, P, P, P, P, P, U, P, P, P, U);
    fprintf(f, "\n%s_status %s_ikbo_lce_run(%s_ikbo_lce *op, CUdeviceptr e_user, CUdeviceptr e_cand, CUdeviceptr "
               "cand_to_user, CUdeviceptr out, CUstream stream)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_run\";\n"
               "    static const char *const names[AOT_LCE_CALLER] = {\"e_user\", \"e_cand\", \"cand_to_user\", "
               "\"out\"};\n"
               "    const CUdeviceptr caller[AOT_LCE_CALLER] = {e_user, e_cand, cand_to_user, out};\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: op is NULL\", fn);\n"
               "    for (int i = 0; i < AOT_LCE_CALLER; i++)\n"
               "        if (!caller[i])\n"
               "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, names[i]);\n"
               "    return (%s_status)aot_lce_run(fn, op->op, aot_kernels, aot_states, caller, op->op->plan->B, "
               "op->op->plan->U, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_lce_run_at(%s_ikbo_lce *op, int64_t B, int64_t U, CUdeviceptr e_user, "
               "CUdeviceptr e_cand, CUdeviceptr cand_to_user, CUdeviceptr out, CUstream stream)\n{\n"
               "    const char *fn = \"%s_ikbo_lce_run_at\";\n"
               "    static const char *const names[AOT_LCE_CALLER] = {\"e_user\", \"e_cand\", \"cand_to_user\", "
               "\"out\"};\n"
               "    const CUdeviceptr caller[AOT_LCE_CALLER] = {e_user, e_cand, cand_to_user, out};\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: op is NULL\", fn);\n"
               "    for (int i = 0; i < AOT_LCE_CALLER; i++)\n"
               "        if (!caller[i])\n"
               "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, names[i]);\n"
               "    return (%s_status)aot_lce_run(fn, op->op, aot_kernels, aot_states, caller, B, U, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_lce_destroy(%s_ikbo_lce *op)\n{\n    if (!op)\n        return;\n"
               "    aot_lce_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

static loom_status put_fa(loom_aot_file *g, void *state, FILE *h, FILE *f, char *err_, size_t errlen_)
{
    (void)state, (void)err_, (void)errlen_; /* no state; g->err */
    const loom_aot_request *r = g->r;
    const char *P = r->prefix, *U = g->upper;
    /* the operation's kernel is the template's: check it takes what aot_fa.c passes */
    static const char *const want[] = {"rows", "U", "Q", "K", "V", "plan", "seq_len", "claims", "units", "out"};
    for (int i = 0; i < r->nshapes; i++) {
        const kern *k = &g->k[g->row_kernel[i]];
        bool same = k->nargs == (int)(sizeof want / sizeof want[0]);
        for (int a = 0; same && a < k->nargs; a++)
            same = !strcmp(k->argname[a], want[a]);
        if (!same && k->nargs == 11 && !strcmp(k->argname[10], "scales"))
            return gen_fail(g, LOOM_ERR_UNSUPPORTED,
                            "ikbo_fa with dtype e4m3 (V transposed, per-head scales) is not an AOT operation yet: "
                            "loom's C API serves it (loom_ikbo_fa_prepare with dtype LOOM_E4M3, then "
                            "loom_ikbo_fa_run_scaled or loom_ikbo_fa_launch_scaled)");
        if (!same)
            return gen_fail(g, LOOM_ERR_UNSUPPORTED,
                         "the ikbo_fa kernel's arguments are not rows, U, Q, K, V, plan, seq_len, claims, units, out, as "
                         "aot/aot_fa.c passes them (a generator bug)");
    }
    fprintf(h, "\n/* The IKBO flash attention as an operation, as loom_ikbo_fa_prepare and its run, set_mapping\n"
               " * and launch: prepare once per shape; per request either run (reads cand_to_user [B] int32,\n"
               " * and seq_len [U] int32 with varlen=1, back from the GPU to make the work plan: one\n"
               " * synchronization of stream) or, where the host has the mapping, set_mapping then\n"
               " * run_mapped as often as it holds (loom_ikbo_fa_launch).  q and out [B * n_seed, H, D], k and v [U * S, H, D].  One\n"
               " * operation is used by one thread at a time. */\n"
               "typedef struct %s_ikbo_fa %s_ikbo_fa;\n"
               "%s_status %s_ikbo_fa_prepare(const %s_ikbo_fa_shape *shape, %s_ikbo_fa **out);\n"
               "%s_status %s_ikbo_fa_set_mapping(%s_ikbo_fa *op, const int32_t *cand_to_user, const int32_t "
               "*seq_len, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run_mapped(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, "
               "CUdeviceptr out, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr "
               "cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream);\n"
               "/* A request of its own B and U (1 to the shape's: the kernel takes them at run time): its\n"
               " * mapping [B] (and lengths [U]) from the host, or read back from the GPU by run_at. */\n"
               "%s_status %s_ikbo_fa_set_request(%s_ikbo_fa *op, int64_t B, int64_t U, const int32_t *cand_to_user, "
               "const int32_t *seq_len, CUstream stream);\n"
               "%s_status %s_ikbo_fa_run_at(%s_ikbo_fa *op, int64_t B, int64_t U, CUdeviceptr q, CUdeviceptr k, "
               "CUdeviceptr v, CUdeviceptr cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream);\n"
               "void %s_ikbo_fa_destroy(%s_ikbo_fa *op);\n",
            P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
    fprintf(f, "\n/* ================================================================ the IKBO FA operation */\n");
    fputs((const char *)aot_text_fa_units, f);
    fputs((const char *)aot_text_fa, f);
    fprintf(f, "\n/* At each shape of the dispatch table, in its order: {B, U, S, n_seed, H, varlen, kernel, grid} */\n"
               "static const aot_fa_plan aot_fa_plans[aot_ikbo_fa_ROWS] = {\n");
    for (int i = 0; i < r->nshapes; i++) {
        const int64_t *sh = r->shapes[i];
        fprintf(f, "    {%lld, %lld, %lld, %lld, %lld, %d, %d, {%d, %d, %d}},\n", (long long)sval(g, sh, "B"),
                (long long)sval(g, sh, "U"), (long long)sval(g, sh, "S"), (long long)sval(g, sh, "n_seed"),
                (long long)sval(g, sh, "H"), (int)sval(g, sh, "varlen"), g->row_kernel[i], g->row_grid[i][0],
                g->row_grid[i][1], g->row_grid[i][2]);
    }
    fprintf(f, "};\n\nstruct %s_ikbo_fa {\n    struct aot_fa_op *op;\n};\n", P);
    fprintf(f, "\n%s_status %s_ikbo_fa_prepare(const %s_ikbo_fa_shape *shape, %s_ikbo_fa **out)\n{\n"
               "    const char *fn = \"%s_ikbo_fa_prepare\";\n"
               "    if (!out)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: out is NULL\", fn);\n"
               "    *out = NULL;\n"
               "    int r = aot_ikbo_fa_row(fn, shape);\n"
               "    if (r < 0)\n        return %s_ERR_INVALID;\n"
               "    %s_ikbo_fa *p = calloc(1, sizeof *p);\n"
               "    if (!p)\n        return (%s_status)aot_fail(AOT_ERR_NOMEM, \"%%s: out of host memory\", fn);\n"
               "    int st = aot_fa_prepare(fn, &aot_fa_plans[r], &p->op);\n"
               "    if (st != AOT_OK) {\n        free(p);\n        return (%s_status)st;\n    }\n"
               "    *out = p;\n    return %s_OK;\n}\n",
            P, P, P, P, P, P, U, P, P, P, U);
    fprintf(f, "\n%s_status %s_ikbo_fa_set_mapping(%s_ikbo_fa *op, const int32_t *cand_to_user, const int32_t "
               "*seq_len, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_set_mapping: op is "
               "NULL\");\n"
               "    return (%s_status)aot_fa_set_mapping(\"%s_ikbo_fa_set_mapping\", op->op, cand_to_user, seq_len, "
               "stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run_mapped(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, "
               "CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run_mapped: op is NULL\");\n"
               "    return (%s_status)aot_fa_launch(\"%s_ikbo_fa_run_mapped\", op->op, aot_kernels, aot_states, q, k, v, "
               "out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run(%s_ikbo_fa *op, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr "
               "cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run: op is NULL\");\n"
               "    return (%s_status)aot_fa_run(\"%s_ikbo_fa_run\", op->op, aot_kernels, aot_states, op->op->plan->B, "
               "op->op->plan->U, q, k, v, cand_to_user, seq_len, out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_set_request(%s_ikbo_fa *op, int64_t B, int64_t U, const int32_t *cand_to_user, "
               "const int32_t *seq_len, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_set_request: op is "
               "NULL\");\n"
               "    return (%s_status)aot_fa_set_request(\"%s_ikbo_fa_set_request\", op->op, B, U, cand_to_user, "
               "seq_len, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\n%s_status %s_ikbo_fa_run_at(%s_ikbo_fa *op, int64_t B, int64_t U, CUdeviceptr q, CUdeviceptr k, "
               "CUdeviceptr v, CUdeviceptr cand_to_user, CUdeviceptr seq_len, CUdeviceptr out, CUstream stream)\n{\n"
               "    if (!op)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%s_ikbo_fa_run_at: op is NULL\");\n"
               "    return (%s_status)aot_fa_run(\"%s_ikbo_fa_run_at\", op->op, aot_kernels, aot_states, B, U, q, k, v, "
               "cand_to_user, seq_len, out, stream);\n}\n",
            P, P, P, P, P, P, P);
    fprintf(f, "\nvoid %s_ikbo_fa_destroy(%s_ikbo_fa *op)\n{\n    if (!op)\n        return;\n"
               "    aot_fa_destroy(op->op);\n    free(op);\n}\n",
            P, P);
    return LOOM_OK;
}

/* The built-in templates' operations.  A template sits below aot/ (docs/architecture.md),
 * so a built-in cannot point at these writers itself: the pairing is made here, by the
 * template's address.  Any other template brings its own in loom_template.aot. */
extern const loom_template tpl_def_ikbo_lce, tpl_def_ikbo_fa;
const loom_aot_op gen_lce_op = {lce_compile, put_lce, lce_release};
const loom_aot_op gen_fa_op = {NULL, put_fa, NULL};

const loom_aot_op *aot_op_of(const loom_template *t)
{
    if (t->aot)
        return t->aot;
    if (t == &tpl_def_ikbo_lce)
        return &gen_lce_op;
    if (t == &tpl_def_ikbo_fa)
        return &gen_fa_op;
    return NULL;
}

