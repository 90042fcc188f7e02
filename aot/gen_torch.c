/*
 * gen_torch.c -- `loomc aot --torch` (loom_aot_write_torch; docs/torch.md): the
 * operations' entry points on the caller's buffers, appended to P.h and P.c, and
 * DIR/P_torch.py, the file's operations as PyTorch custom ops.
 */
#include "gen.h"
#include "lce_op.h" /* IK_NBUF; through tpl.h, FA_UNIT_FIELDS */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- --torch: PyTorch custom ops */

/* With --torch (loom_aot_write_torch), the operations' entry points on the caller's buffers,
 * after the operation's own functions (whose static code and tables they reuse): the LCE
 * run with every buffer given (P_torch.py takes them from PyTorch's caching allocator), the
 * FA's plan made on the host into the caller's array and its launch with the caller's plan,
 * lengths and counter.  None of them allocates, copies from the host or synchronizes, so
 * a stream capture (a CUDA graph) can hold their launches.  A template without an
 * operation needs nothing more: its launch function takes every buffer already. */
void aot_torch_c(gen *g, FILE *h, FILE *f)
{
    const char *P = g->r->prefix, *U = g->upper;
    if (g->op == &gen_lce_op) {
        fprintf(h, "\n/* The operation on the caller's buffers (loomc aot --torch; P_torch.py runs it on PyTorch's\n"
                   " * allocator).  %s_IKBO_LCE_NBUF buffers: the caller's e_user, e_cand, cand_to_user and out, then\n"
                   " * the operation's own (those prepare allocates).  %s_ikbo_lce_buffers gives, for a shape of the\n"
                   " * file, each one's bytes (0: unused, its pointer may be 0; the caller's four: 0) and how the\n"
                   " * weights fill them: fills[4 j .. 4 j + 3] = {buffer, weight (0: w_user [M, Ku], 1: w_cand\n"
                   " * [M, Kc]), ld, column}: the weight's rows at that column of rows of ld elements.  The\n"
                   " * operation's buffers must be zero when a run starts but for the fills (the stage-4 flags\n"
                   " * count from zero at each run).  run_buffers runs a request of B and U (1 to the shape's) on\n"
                   " * them on stream: launches alone, no allocation, no copy, no synchronization. */\n"
                   "enum { %s_IKBO_LCE_NBUF = %d };\n"
                   "%s_status %s_ikbo_lce_buffers(const %s_ikbo_lce_shape *shape, size_t bytes[%s_IKBO_LCE_NBUF], "
                   "int64_t fills[8], int *nfill);\n"
                   "%s_status %s_ikbo_lce_run_buffers(const %s_ikbo_lce_shape *shape, int64_t B, int64_t U, "
                   "const CUdeviceptr buffers[%s_IKBO_LCE_NBUF], CUstream stream);\n",
                U, P, U, IK_NBUF, P, P, P, U, P, P, P, U);
        fprintf(f, "\n/* ================================================================ the operation on the "
                   "caller's buffers (--torch) */\n"
                   "%s_status %s_ikbo_lce_buffers(const %s_ikbo_lce_shape *shape, size_t bytes[%s_IKBO_LCE_NBUF], "
                   "int64_t fills[8], int *nfill)\n{\n"
                   "    const char *fn = \"%s_ikbo_lce_buffers\";\n"
                   "    if (!bytes || !fills || !nfill)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !bytes ? \"bytes\" : "
                   "!fills ? \"fills\" : \"nfill\");\n"
                   "    int r = aot_ikbo_lce_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_lce_plan *pl = &aot_lce_plans[r];\n"
                   "    for (int i = 0; i < AOT_LCE_NBUF; i++)\n"
                   "        bytes[i] = i < AOT_LCE_CALLER ? 0 : pl->bytes[i];\n"
                   "    *nfill = pl->nfill;\n"
                   "    for (int j = 0; j < pl->nfill; j++) {\n"
                   "        const aot_lce_fill *fl = &pl->fill[j];\n"
                   "        fills[4 * j] = fl->buf, fills[4 * j + 1] = fl->weight, fills[4 * j + 2] = fl->ld, "
                   "fills[4 * j + 3] = fl->col0;\n"
                   "    }\n    return %s_OK;\n}\n",
                P, P, P, U, P, P, U, U);
        fprintf(f, "\n%s_status %s_ikbo_lce_run_buffers(const %s_ikbo_lce_shape *shape, int64_t B, int64_t U, "
                   "const CUdeviceptr buffers[%s_IKBO_LCE_NBUF], CUstream stream)\n{\n"
                   "    const char *fn = \"%s_ikbo_lce_run_buffers\";\n"
                   "    if (!buffers)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: buffers is NULL\", fn);\n"
                   "    int r = aot_ikbo_lce_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    /* an operation of the caller's buffers, its flags' counter at zero (they are zero) */\n"
                   "    struct aot_lce_op op;\n"
                   "    memset(&op, 0, sizeof op);\n"
                   "    op.plan = &aot_lce_plans[r];\n"
                   "    for (int i = 0; i < AOT_LCE_NBUF; i++) {\n"
                   "        if ((i < AOT_LCE_CALLER || op.plan->bytes[i]) && !buffers[i])\n"
                   "            return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: buffers[%%d] is NULL (%%s)\", fn, i,\n"
                   "                                        i < AOT_LCE_CALLER ? \"the caller's\" : \"the operation's\");\n"
                   "        op.buf[i] = buffers[i];\n    }\n"
                   "    return (%s_status)aot_lce_run(fn, &op, aot_kernels, aot_states, buffers, B, U, stream);\n}\n",
                P, P, P, U, P, P, U, P, P);
    } else if (g->op == &gen_fa_op) {
        fprintf(h, "\n/* The operation on the caller's buffers (loomc aot --torch; P_torch.py runs it on PyTorch's\n"
                   " * allocator), split where its work plan is made on the host: plan_max gives the most units\n"
                   " * a plan of the shape has; make_plan writes the plan of a request of B and U (1 to the\n"
                   " * shape's) into units [plan_max][%s_IKBO_FA_UNIT_FIELDS] int32, host memory, and its count\n"
                   " * into *n (no GPU; a mapping entry or length out of range is refused by name); the caller\n"
                   " * copies it to the device.  launch_plan then launches on stream with that plan (n units),\n"
                   " * seq_len [U] int32 (S each without varlen) and claims (int32 [2], zero; the kernel leaves\n"
                   " * it zero): a launch alone, no allocation, no copy, no synchronization. */\n"
                   "enum { %s_IKBO_FA_UNIT_FIELDS = %d };\n"
                   "%s_status %s_ikbo_fa_plan_max(const %s_ikbo_fa_shape *shape, int64_t *units);\n"
                   "%s_status %s_ikbo_fa_make_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "const int32_t *cand_to_user, const int32_t *seq_len, int32_t *units, int64_t *n);\n"
                   "%s_status %s_ikbo_fa_launch_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr plan, int64_t n, CUdeviceptr seq_len, "
                   "CUdeviceptr claims, CUdeviceptr out, CUstream stream);\n",
                U, U, FA_UNIT_FIELDS, P, P, P, P, P, P, P, P, P);
        fprintf(f, "\n/* ================================================================ the operation on the "
                   "caller's buffers (--torch) */\n"
                   "%s_status %s_ikbo_fa_plan_max(const %s_ikbo_fa_shape *shape, int64_t *units)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_plan_max\";\n"
                   "    if (!units)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: units is NULL\", fn);\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    *units = fa_units_max(aot_fa_plans[r].B, aot_fa_plans[r].nseed);\n"
                   "    return %s_OK;\n}\n",
                P, P, P, P, P, U, U);
        fprintf(f, "\n%s_status %s_ikbo_fa_make_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "const int32_t *cand_to_user, const int32_t *seq_len, int32_t *units, int64_t *n)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_make_plan\";\n"
                   "    if (!cand_to_user || !units || !n)\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s is NULL\", fn, !cand_to_user ? "
                   "\"cand_to_user\" : !units ? \"units\" : \"n\");\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_fa_plan *pl = &aot_fa_plans[r];\n"
                   "    int st = aot_check_request(fn, B, U, pl->B, pl->U);\n"
                   "    if (st != AOT_OK)\n        return (%s_status)st;\n"
                   "    if (pl->varlen != (seq_len != NULL))\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s\", fn, pl->varlen ? \"the shape has "
                   "varlen=1: seq_len is needed\" : \"seq_len given, but the shape has varlen=0 (every user has S "
                   "keys)\");\n"
                   "    char err[200];\n"
                   "    int64_t m = fa_units(B, U, pl->S, pl->nseed, cand_to_user, seq_len, units, err, sizeof err);\n"
                   "    if (m < 0)\n        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: %%s\", fn, err);\n"
                   "    *n = m;\n    return %s_OK;\n}\n",
                P, P, P, P, P, U, P, P, P, U);
        fprintf(f, "\n%s_status %s_ikbo_fa_launch_plan(const %s_ikbo_fa_shape *shape, int64_t B, int64_t U, "
                   "CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr plan, int64_t n, CUdeviceptr seq_len, "
                   "CUdeviceptr claims, CUdeviceptr out, CUstream stream)\n{\n"
                   "    const char *fn = \"%s_ikbo_fa_launch_plan\";\n"
                   "    int r = aot_ikbo_fa_row(fn, shape);\n"
                   "    if (r < 0)\n        return %s_ERR_INVALID;\n"
                   "    const aot_fa_plan *pl = &aot_fa_plans[r];\n"
                   "    int st = aot_check_request(fn, B, U, pl->B, pl->U);\n"
                   "    if (st != AOT_OK)\n        return (%s_status)st;\n"
                   "    if (n < 0 || n > fa_units_max(B, pl->nseed))\n"
                   "        return (%s_status)aot_fail(AOT_ERR_INVALID, \"%%s: n = %%lld units; a plan of B = %%lld has 0 "
                   "to %%lld\", fn, (long long)n, (long long)B, (long long)fa_units_max(B, pl->nseed));\n"
                   "    /* an operation of the caller's plan, lengths and counter */\n"
                   "    struct aot_fa_op op;\n"
                   "    memset(&op, 0, sizeof op);\n"
                   "    op.plan = pl;\n"
                   "    op.units_dev = plan, op.lens = seq_len, op.claims = claims;\n"
                   "    op.units = n, op.B = B, op.U = U;\n"
                   "    return (%s_status)aot_fa_launch(fn, &op, aot_kernels, aot_states, q, k, v, out, stream);\n}\n",
                P, P, P, P, U, P, P, P);
    }
}

/* A Python identifier from a name: other characters become '_', and Python's keywords and
 * the module's own names get a trailing '_'. */
static void py_ident(const char *s, char *out, size_t n)
{
    static const char *const reserved[] = {"False", "None", "True", "and", "as", "assert", "async", "await",
                                           "break", "class", "continue", "def", "del", "elif", "else", "except",
                                           "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
                                           "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
                                           "with", "yield", "torch", "typing", "ctypes", "op"};
    gen_c_ident(s, out, n);
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(out, reserved[i])) {
            size_t w = strlen(out);
            if (w + 2 < n)
                out[w] = '_', out[w + 1] = 0;
        }
}

/* The generic op's table: per row, each argument {name, kind, access, dtype, dims (a run-time
 * key's name where the kernel takes that dim at run time), strides}, from the kernel built
 * at the row's shape. */
static loom_status torch_generic_args(gen *g, FILE *py)
{
    const loom_aot_request *r = g->r;
    static const char *const kind_py[] = {[ARG_PTR] = "ptr", [ARG_I32] = "i32", [ARG_I64] = "i64", [ARG_F32] = "f32"};
    const kern *k0 = &g->k[g->row_kernel[0]];
    fprintf(py, "    \"generic\": {\n        \"dim_args\": [");
    for (int a = 0, n = 0; a < k0->nargs; a++)
        if (k0->is_dim[a])
            fprintf(py, "%s\"%s\"", n++ ? ", " : "", k0->argname[a]);
    fprintf(py, "],\n        \"args\": [\n");
    for (int i = 0; i < r->nshapes; i++) {
        char why[1024] = "";
        loom_kernel *k = r->t->build(r->shapes[i], r->configs[i], why, sizeof why);
        if (!k)
            return gen_fail(g, LOOM_ERR_INVALID, "%s: --torch: the kernel of shape %d does not build again: %s", r->t->name,
                         i + 1, why);
        fprintf(py, "            [\n");
        for (int a = 0; a < loom_kernel_num_args(k); a++) {
            loom_arg_info ai;
            loom_kernel_arg_info(k, a, &ai);
            int kind = g->k[g->row_kernel[i]].kind[a];
            fprintf(py, "                [\"%s\", \"%s\", \"%s\", \"%s\", [", ai.name ? ai.name : "arg", kind_py[kind],
                    ai.access == LOOM_OUT ? "out" : ai.access == LOOM_INOUT ? "inout" : "in",
                    loom_dtype_name(ai.dtype));
            for (int d = 0; ai.is_tensor && d < ai.shape.rank; d++) {
                loom_arg_info di;
                if (g->ndyn && ai.dim_of[d] >= 0 && loom_kernel_arg_info(k, ai.dim_of[d], &di))
                    fprintf(py, "%s\"%s\"", d ? ", " : "", di.name);
                else
                    fprintf(py, "%s%lld", d ? ", " : "", (long long)ai.shape.dim[d]);
            }
            fprintf(py, "], [");
            for (int d = 0; ai.is_tensor && d < ai.shape.rank; d++)
                fprintf(py, "%s%lld", d ? ", " : "", (long long)ai.strides[d]);
            fprintf(py, "]],\n");
        }
        fprintf(py, "            ],\n");
        loom_kernel_destroy(k);
    }
    fprintf(py, "        ],\n    },\n");
    return LOOM_OK;
}

/* The generic op of a template without an operation: its launch as loom::T, the arguments
 * the kernel's inputs (tensors read, scalars) in its order, then the run-time keys no input
 * tensor carries; it returns the kernel's outputs, allocated from the argument info, and
 * mutates its in-out tensors. */
static loom_status torch_generic_op(gen *g, FILE *py)
{
    const loom_aot_request *r = g->r;
    const char *T = r->t->name;
    const kern *k0 = &g->k[g->row_kernel[0]];
    char build_why[1024] = "";
    loom_kernel *k = r->t->build(r->shapes[0], r->configs[0], build_why, sizeof build_why);
    if (!k)
        return gen_fail(g, LOOM_ERR_INVALID, "%s: --torch: the kernel does not build again: %s", T, build_why);
    char params[4096] = "", names[4096] = "", dict[4096] = "", extra[1024] = "", muts[1024] = "", outs[1024] = "";
    size_t np = 0, nn = 0, nd = 0, ne = 0, nm = 0, no = 0;
    int nout = 0;
    bool carried[LOOM_MAX_PARAMS] = {false}; /* run-time keys: some input tensor's dim */
    for (int a = 0; a < k0->nargs; a++) {
        loom_arg_info ai;
        loom_kernel_arg_info(k, a, &ai);
        char id[80];
        py_ident(k0->argname[a], id, sizeof id);
        if (k0->is_dim[a])
            continue;
        if (ai.is_tensor && ai.access == LOOM_OUT) {
            no += (size_t)snprintf(outs + no, sizeof outs - no, "%s%s", nout ? ", " : "", k0->argname[a]);
            nout++;
            continue;
        }
        if (ai.is_tensor)
            for (int d = 0; d < ai.shape.rank; d++)
                for (int j = 0; j < g->nkeys && ai.dim_of[d] >= 0; j++) {
                    loom_arg_info di;
                    if (loom_kernel_arg_info(k, ai.dim_of[d], &di) && !strcmp(di.name, r->t->shape[g->key[j]].key))
                        carried[j] = true;
                }
        const char *type = ai.is_tensor ? "torch.Tensor" : k0->kind[a] == ARG_F32 ? "float" : "int";
        np += (size_t)snprintf(params + np, sizeof params - np, "%s%s: %s", np ? ", " : "", id, type);
        nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s", nn ? ", " : "", id);
        nd += (size_t)snprintf(dict + nd, sizeof dict - nd, "%s\"%s\": %s", nd ? ", " : "", k0->argname[a], id);
        if (ai.is_tensor && ai.access == LOOM_INOUT)
            nm += (size_t)snprintf(muts + nm, sizeof muts - nm, "\"%s\", ", id);
    }
    for (int j = 0; j < g->nkeys && g->ndyn; j++) {
        const loom_param *p = &r->t->shape[g->key[j]];
        if (!p->runtime || carried[j])
            continue;
        char id[80];
        py_ident(p->key, id, sizeof id);
        for (int a = 0; a < k0->nargs; a++) /* a key named like an argument */
            if (!k0->is_dim[a] && !strcmp(k0->argname[a], p->key))
                snprintf(id + strlen(id), sizeof id - strlen(id), "_");
        np += (size_t)snprintf(params + np, sizeof params - np, "%s%s: int = 1", np ? ", " : "", id);
        nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s=1", nn ? ", " : "", id);
        ne += (size_t)snprintf(extra + ne, sizeof extra - ne, "%s\"%s\": %s", ne ? ", " : "", p->key, id);
    }
    loom_kernel_destroy(k);
    if (np >= sizeof params || nd >= sizeof dict || ne >= sizeof extra || nm >= sizeof muts || no >= sizeof outs)
        return gen_fail(g, LOOM_ERR_UNSUPPORTED, "%s: --torch: too many arguments for the generated op", T);
    char ret[600];
    if (nout == 0)
        snprintf(ret, sizeof ret, "None");
    else if (nout == 1)
        snprintf(ret, sizeof ret, "torch.Tensor");
    else {
        size_t w = (size_t)snprintf(ret, sizeof ret, "typing.Tuple[");
        for (int i = 0; i < nout && w < sizeof ret; i++)
            w += (size_t)snprintf(ret + w, sizeof ret - w, "%storch.Tensor", i ? ", " : "");
        snprintf(ret + w, w < sizeof ret ? sizeof ret - w : 0, "]");
    }
    char fid[80];
    py_ident(T, fid, sizeof fid);
    fprintf(py, "\n\n# ---------------------------------------------------------------- loom::%s\n"
                "@torch.library.custom_op(\"loom::%s\", mutates_args=(%s), device_types=\"cuda\")\n"
                "def %s(%s) -> %s:\n"
                "    \"\"\"%s's kernel at a shape of this file, on torch's current stream: the kernel's inputs in\n"
                "    its order%s; returns %s (allocated here).\"\"\"\n"
                "    return _generic_run(\"loom::%s\", {%s}, {%s})\n\n\n"
                "@%s.register_fake\n"
                "def _(%s):\n"
                "    return _generic_fake(\"loom::%s\", {%s}, {%s})\n",
            T, T, muts, fid, params, ret, T, ne ? ", then the run-time keys no input carries" : "",
            nout ? outs : "nothing (its in-out tensors are updated)", T, dict, extra, fid, names, T, dict, extra);
    return LOOM_OK;
}

/* DIR/P_torch.py: the file's table (_LOOM), the run-time part (aot/aot_torch.py), and the
 * generic op of a template without an operation. */
loom_status aot_torch_py(gen *g)
{
    const loom_aot_request *r = g->r;
    const loom_template *t = g->t;
    const char *P = r->prefix, *T = t->name;
    char path[4096], name[300];
    snprintf(name, sizeof name, "%s_torch.py", P);
    FILE *py = gen_open_out(g, r->dir, name, path, sizeof path);
    if (!py)
        return LOOM_ERR_INVALID;
    const char *kind = g->op == &gen_lce_op ? "ikbo_lce" : g->op == &gen_fa_op ? "ikbo_fa" : "generic";
    const char *cmd = r->command && *r->command ? r->command : "(loom_aot_write_torch)";
    fprintf(py, "# %s_torch.py -- %s ahead of time as PyTorch custom ops (torch.ops.loom.*), written by loom %s's\n"
                "# `loomc aot --torch` (do not edit; regenerate instead).  The command:\n#   %s\n"
                "# Import it (it builds %s.c, beside it, with the system C compiler on first use) and call\n"
                "# the ops; docs/torch.md in loom explains them.\n\n"
                "# the file's shapes: the rows of %s.c's dispatch table\n"
                "_LOOM = {\n    \"prefix\": \"%s\",\n    \"template\": \"%s\",\n    \"op\": \"%s\",\n    \"keys\": [",
            P, T, LOOM_VERSION, cmd, P, P, P, T, kind);
    for (int j = 0; j < g->nkeys; j++)
        fprintf(py, "%s\"%s\"", j ? ", " : "", t->shape[g->key[j]].key);
    fprintf(py, "],\n    \"runtime\": [");
    bool op_request = g->op == &gen_lce_op || g->op == &gen_fa_op; /* run_at: B and U up to the row's */
    for (int j = 0; j < g->nkeys; j++)
        fprintf(py, "%s%d", j ? ", " : "", (op_request || g->ndyn) && t->shape[g->key[j]].runtime ? 1 : 0);
    fprintf(py, "],\n    \"rows\": [\n");
    for (int i = 0; i < r->nshapes; i++) {
        int64_t v[LOOM_MAX_PARAMS];
        gen_key_values(g, r->shapes[i], v);
        fprintf(py, "        [");
        for (int j = 0; j < g->nkeys; j++)
            fprintf(py, "%s%lld", j ? ", " : "", (long long)v[j]);
        fprintf(py, "],\n");
    }
    fprintf(py, "    ],\n    \"dtype_names\": [");
    for (int d = 0; d < LOOM_DTYPE_COUNT; d++)
        fprintf(py, "%s\"%s\"", d ? ", " : "", loom_dtype_name((loom_dtype)d));
    fprintf(py, "],\n    \"lce_nbuf\": %d,\n    \"fa_fields\": %d,\n", IK_NBUF, FA_UNIT_FIELDS);
    loom_status st = LOOM_OK;
    if (!op_request)
        st = torch_generic_args(g, py);
    fprintf(py, "}\n\n");
    fputs((const char *)aot_text_torch, py);
    if (st == LOOM_OK && !op_request)
        st = torch_generic_op(g, py);
    bool bad = ferror(py) != 0;
    bad |= fclose(py) != 0;
    if (st == LOOM_OK && bad)
        st = gen_fail(g, LOOM_ERR_INVALID, "writing %s failed: %s", path, strerror(errno));
    if (st != LOOM_OK)
        remove(path);
    return st;
}

