/*
 * pipeline.c -- the one visible sequence of codegen passes.
 *
 *   verify -> fold -> layouts -> smem -> lower (LLVM IR) -> opt -> PTX
 *
 * Each pass is a function over the pass context (cg_ctx) in its own file; this file
 * only runs them in order and owns the debugging switches:
 *
 *   LOOM_VERIFY_PASSES=1       run the loom verifier after every pass that may change
 *                              the IR (an error there is a codegen bug)
 *   LOOM_DUMP_AFTER=<pass>|all print the loom IR (loom_print) to stderr after the named
 *                              pass (verify, fold, layouts, smem); after layouts also
 *                              each tile value's layout (codegen/explain.c)
 *   LOOM_EXPLAIN=1             print what the kernel costs to stderr: every layout
 *                              conversion and other use of shared-memory scratch, every
 *                              allocation, each with its line (codegen/explain.c)
 *   LOOM_DUMP_LLVM=1           print the LLVM IR after opt to stderr
 *   LOOM_DUMP_PTX=1            print the PTX to stderr
 *   LOOM_NO_FOLD=1             skip the fold pass (to bisect a suspected folding bug; it also
 *                              carries a loop's FP8 tile as the float it is cast from)
 *   LOOM_TIME_PASSES=1         print each pass's wall time to stderr (where a cold
 *                              compile's milliseconds go)
 *   LOOM_HANG_CHECK=<ms>       bound every wait loop (codegen.h: the hang check); the
 *                              runtime passes its own (cg_compile_opts)
 *   LOOM_CODEGEN_MAX_INSTRUCTIONS=<n>  the largest lowered kernel handed to LLVM (a
 *                              larger one is refused with a message, never aborts)
 *
 * Checked with LLVM 19 (the default) and LLVM 22 (cmake -DLOOM_LLVM_CONFIG=...):
 * kernels carry both the PTX kernel calling convention and the nvvm.annotations
 * "kernel" entry, and .maxntid both as metadata and as the "nvvm.maxntid" attribute
 * (ptxas refuses .maxntid together with .reqntid, so only maxntid is set).
 * A user's mistake comes back as a status and a message; an internal error names the
 * codegen file and line where it was detected.  Nothing here exits or aborts.
 */
#include "cg.h"
#include "../pipe/autows.h"
#include "../util/util.h"

#include <llvm-c/Core.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The instructions of the lowered module: what the LLVM optimizer and backend work on. */
static size_t llvm_instructions(LLVMModuleRef m)
{
    size_t n = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(m); f; f = LLVMGetNextFunction(f))
        for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f); b; b = LLVMGetNextBasicBlock(b))
            for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
                n++;
    return n;
}

bool cg_fail(cg_ctx *cg, loom_status st, const char *fmt, ...)
{
    if (cg->st != LOOM_OK)
        return false;
    cg->st = st;
    if (cg->err && cg->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cg->err, cg->errlen, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool cg_bug(cg_ctx *cg, const char *file, int line, const char *fmt, ...)
{
    if (cg->st != LOOM_OK)
        return false;
    cg->st = LOOM_ERR_COMPILE;
    if (cg->err && cg->errlen) {
        char body[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(body, sizeof body, fmt, ap);
        va_end(ap);
        snprintf(cg->err, cg->errlen, "internal error in loom codegen at %s:%d (kernel '%s'): %s", file, line,
                 loom_kernel_name(cg->k), body);
    }
    return false;
}

/* After a pass: dump if asked, verify if asked. */
static loom_status after(cg_ctx *cg, const char *pass)
{
    if (cg->st != LOOM_OK)
        return cg->st;
    if (cg->dump_after && (!strcmp(cg->dump_after, "all") || !strcmp(cg->dump_after, pass))) {
        fprintf(stderr, "// loom IR after %s\n%s\n", pass, loom_print(cg->k));
        if (!strcmp(pass, "layouts"))
            cg_dump_layouts(cg, stderr);
    }
    if (cg->verify_passes && loom_verify(cg->k) != LOOM_OK)
        return cg_fail(cg, LOOM_ERR_COMPILE, "internal error: the IR no longer verifies after pass '%s':\n%s", pass,
                       loom_kernel_errors(cg->k)),
               cg->st;
    return LOOM_OK;
}

void cg_result_free(cg_result *r)
{
    if (!r)
        return;
    free(r->ptx);
    *r = (cg_result){0};
}

size_t cg_max_instructions(void)
{
    return (size_t)util_env_int("LOOM_CODEGEN_MAX_INSTRUCTIONS", CG_MAX_INSTRUCTIONS_DEFAULT, 1000, INT64_C(1) << 31);
}

int cg_hang_check_ms(void)
{
#ifndef LOOM_HANG_CHECK_DEFAULT_MS
#ifdef NDEBUG
#define LOOM_HANG_CHECK_DEFAULT_MS 0
#else
#define LOOM_HANG_CHECK_DEFAULT_MS 10000 /* a debug build: a stuck wait reports itself */
#endif
#endif
    return (int)util_env_int("LOOM_HANG_CHECK", LOOM_HANG_CHECK_DEFAULT_MS, 0, 3600000);
}

static void ctx_init(cg_ctx *cg, loom_kernel *k, const char *arch, char *err, size_t errlen)
{
    cg->k = k;
    cg->arch = arch && *arch ? arch : "sm_90a";
    cg->err = err;
    cg->errlen = errlen;
    cg->verify_passes = util_env_on("LOOM_VERIFY_PASSES");
    static const char *const dump_passes[] = {"verify", PIPE_AUTOWS_PASSES, "fold", "layouts", "smem", "all"};
    int dump = util_env_choice("LOOM_DUMP_AFTER", dump_passes, 5 + PIPE_AUTOWS_NPASSES, -1);
    cg->dump_after = dump >= 0 ? dump_passes[dump] : NULL;
}

static void ctx_free(cg_ctx *cg)
{
    free(cg->lays);
    free(cg->vlay);
    free(cg->remat);
    free(cg->prefer);
    free(cg->soft);
    free(cg->dot_mma);
    free(cg->val_off);
    free(cg->op_scratch);
    free(cg->div);
    free(cg->axis);
    free(cg->costs);
}

/* The passes before the lowering: verify, then on a copy (*work, the caller destroys it)
 * fold, layouts and the shared-memory plan.  cg->costs holds what the plan found even
 * when it refuses the kernel. */
static loom_status front(cg_ctx *cg, loom_kernel *k, loom_kernel **work, const char **stage, double *stage_end,
                         int *nstage)
{
#define FSTAGE(name) (stage ? (stage[*nstage] = (name), stage_end[(*nstage)++] = util_now_ms()) : 0)
    /* 1. verify */
    if (loom_verify(k) != LOOM_OK)
        return cg_fail(cg, LOOM_ERR_VERIFY, "%s", loom_kernel_errors(k)), cg->st;
    FSTAGE("verify");
    if (after(cg, "verify"))
        return cg->st;
    /* the passes below rewrite IR (autows, fold): they work on a copy, so the user's
     * kernel and its printed text, which keys the module cache, stay as they were built */
    loom_kernel *ws = NULL;
    loom_status wst = pipe_autows(k, cg->dump_after, &ws, cg->err, cg->errlen);
    if (wst != LOOM_OK)
        return cg->st = wst;
    if (ws)
        k = ws; /* a plain kernel's warp-specialized form: compiled in its place */
    cg->k = *work = ws ? ws : ir_kernel_clone(k);
    if (!*work)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory copying the kernel"), cg->st;
    cg->div = calloc(k->nvals ? k->nvals : 1, sizeof *cg->div);
    if (!cg->div)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    /* 2. fold */
    if (cg_fold(cg) || after(cg, "fold"))
        return cg->st;
    FSTAGE("fold");
    /* 3. layouts */
    if (cg_layouts(cg) || after(cg, "layouts"))
        return cg->st;
    /* 4. shared memory plan */
    if (cg_smem(cg) || after(cg, "smem"))
        return cg->st;
    FSTAGE("layouts+smem");
#undef FSTAGE
    return LOOM_OK;
}

loom_status loom_kernel_explain(loom_kernel *k, const char *arch, loom_explain_fn fn, void *ctx, char **text,
                                char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (text)
        *text = NULL;
    if (!k) {
        if (err && errlen)
            snprintf(err, errlen, "loom_kernel_explain: no kernel");
        return LOOM_ERR_INVALID;
    }
    if (arch && *arch && !cg_arch_known(arch)) {
        if (err && errlen)
            snprintf(err, errlen, "loom_kernel_explain: arch '%s' is not an NVPTX processor this loom's LLVM knows", arch);
        return LOOM_ERR_INVALID;
    }
    cg_ctx c = {0}, *cg = &c;
    ctx_init(cg, k, arch, err, errlen);
    loom_kernel *work = NULL;
    loom_status st = front(cg, k, &work, NULL, NULL, NULL);
    if (work && cg->op_scratch) { /* the plan ran (perhaps refusing the kernel): its uses */
        for (int i = 0; fn && i < cg->ncosts; i++) {
            char line[1024];
            loom_cost lc;
            cg_cost_fill(cg, &cg->costs[i], &lc, line, sizeof line);
            fn(ctx, &lc);
        }
        if (text) {
            char *t = cg_explain_text(cg);
            if (!t && st == LOOM_OK)
                st = (cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st);
            *text = t;
        }
    }
    loom_kernel_destroy(work);
    ctx_free(cg);
    return st;
}

loom_status cg_compile(loom_kernel *k, const char *arch, cg_result *out, char *err, size_t errlen)
{
    return cg_compile_opts(k, arch, NULL, out, err, errlen);
}

static _Atomic uint64_t compiles;

uint64_t cg_compile_count(void) { return compiles; }

/* One compile: the pass context, the kernel's working copy and the LLVM objects the steps
 * below make (compile_free frees them all), and the end time of each stage, which
 * LOOM_TIME_PASSES prints. */
typedef struct compile {
    cg_ctx cg;
    loom_kernel *work; /* the passes' copy of the kernel (front) */
    LLVMContextRef llvm;
    void *mod, *tm; /* the lowered module, the target machine */
    const char *stage[8];
    double stage_end[8], t_start;
    int nstage;
} compile;

static void stage_done(compile *c, const char *name)
{
    c->stage[c->nstage] = name;
    c->stage_end[c->nstage++] = util_now_ms();
}

static void compile_free(compile *c)
{
    loom_kernel_destroy(c->work);
    if (c->mod)
        LLVMDisposeModule((LLVMModuleRef)c->mod);
    cg_target_machine_free(c->tm);
    if (c->llvm)
        LLVMContextDispose(c->llvm);
    ctx_free(&c->cg);
}

/* LOOM_EXPLAIN: what the kernel costs, wherever the shared-memory plan ran (perhaps
 * refusing the kernel). */
static void explain_if_asked(compile *c, loom_kernel *k)
{
    if (!c->work || !c->cg.op_scratch || !util_env_on("LOOM_EXPLAIN"))
        return;
    char *t = cg_explain_text(&c->cg);
    fprintf(stderr, "loom: what kernel '%s' costs (LOOM_EXPLAIN):\n%s", loom_kernel_name(k), t ? t : "out of memory\n");
    free(t);
}

/* 5. LLVM IR.  LLVM's optimizer and backend take time and memory in proportion to the
 * lowered instructions (about 50 us each in the backend on the build machine) and abort
 * the process when an allocation fails, which the library must never do: a kernel past
 * the limit is refused here, before they see it.  False: stop (the error recorded). */
static bool lower_step(compile *c, loom_kernel *k)
{
    cg_ctx *cg = &c->cg;
    cg_emit_init(cg);
    c->llvm = LLVMContextCreate();
    if (cg_lower(cg, c->llvm, &c->mod))
        return false;
    size_t ninstr = llvm_instructions((LLVMModuleRef)c->mod), max_instr = cg_max_instructions();
    if (ninstr > max_instr)
        return cg_fail(cg, LOOM_ERR_UNSUPPORTED,
                       "kernel '%s' lowers to %zu LLVM instructions, more than the %zu the code generator takes "
                       "(LOOM_CODEGEN_MAX_INSTRUCTIONS; loom's largest template lowers to about 10000): LLVM's "
                       "backend would take about %.0f s; split the kernel, or use smaller tiles (each element of a "
                       "tile a thread holds is an instruction per op)",
                       loom_kernel_name(k), ninstr, max_instr, (double)ninstr * 50e-6);
    stage_done(c, "lower");
    return true;
}

/* 6. opt (a short LLVM pipeline, codegen/emit.c); LOOM_DUMP_LLVM prints the result. */
static bool opt_step(compile *c, loom_kernel *k)
{
    c->tm = cg_target_machine(&c->cg);
    if (!c->tm || cg_optimize(&c->cg, c->mod, c->tm))
        return false;
    stage_done(c, "opt");
    if (util_env_on("LOOM_DUMP_LLVM")) {
        char *s = LLVMPrintModuleToString((LLVMModuleRef)c->mod);
        fprintf(stderr, "// LLVM IR of %s\n%s\n", loom_kernel_name(k), s);
        LLVMDisposeMessage(s);
    }
    return true;
}

/* 7. PTX (LOOM_DUMP_PTX prints it), and what the launch needs besides: the shared memory
 * and the TMA descriptors it appends after the kernel's own parameters. */
static void ptx_step(compile *c, loom_kernel *k, cg_result *out)
{
    cg_ctx *cg = &c->cg;
    if (cg_emit_ptx(cg, c->mod, c->tm, &out->ptx))
        return;
    stage_done(c, "ptx");
    if (util_env_on("LOOM_DUMP_PTX"))
        fprintf(stderr, "// PTX of %s\n%s\n", loom_kernel_name(k), out->ptx);
    out->smem_bytes = cg->smem_bytes;
    out->ntma = cg->ntma;
    memcpy(out->tma, cg->tma, sizeof out->tma);
}

/* LOOM_TIME_PASSES: each stage's wall time, one line. */
static void print_times(const compile *c, loom_kernel *k)
{
    char line[512];
    int p = snprintf(line, sizeof line, "loom: codegen of %s:", loom_kernel_name(k));
    for (int i = 0; i < c->nstage && p < (int)sizeof line; i++)
        p += snprintf(line + p, sizeof line - (size_t)p, " %s %.2f", c->stage[i],
                      c->stage_end[i] - (i ? c->stage_end[i - 1] : c->t_start));
    fprintf(stderr, "%s ms (total %.2f)\n", line, util_now_ms() - c->t_start);
}

loom_status cg_compile_opts(loom_kernel *k, const char *arch, const cg_options *opt, cg_result *out, char *err,
                            size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    compiles++;
    if (!k || !out) {
        if (err && errlen)
            snprintf(err, errlen, "cg_compile: no kernel or no result");
        return LOOM_ERR_INVALID;
    }
    *out = (cg_result){0};
    compile c = {0};
    cg_ctx *cg = &c.cg;
    ctx_init(cg, k, arch, err, errlen);
    cg->hang_ms = opt ? opt->hang_check_ms : cg_hang_check_ms();
    if (cg->hang_ms < 0)
        cg->hang_ms = 0;
    c.t_start = util_now_ms();
    /* 1-4. verify, fold, layouts, shared memory plan */
    loom_status fst = front(cg, k, &c.work, c.stage, c.stage_end, &c.nstage);
    explain_if_asked(&c, k);
    if (fst == LOOM_OK && lower_step(&c, k) && opt_step(&c, k))
        ptx_step(&c, k, out);
    compile_free(&c);
    if (cg->st == LOOM_OK && util_env_on("LOOM_TIME_PASSES"))
        print_times(&c, k);
    if (cg->st != LOOM_OK)
        cg_result_free(out);
    return cg->st;
}
