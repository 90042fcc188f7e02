/*
 * emit.c -- the LLVM end of the pipeline: target machine, a short opt pipeline, PTX text.
 *
 * LLVM's NVPTX target is initialized once per process (pthread_once).  Each compile
 * makes its own target machine (CPU = the arch, e.g. sm_90a; features pick the PTX ISA
 * version: +ptx80 for sm_90/sm_90a, which Hopper needs, +ptx81 for a kernel with
 * smem_store_cluster, whose st.async came in 8.1, +ptx84 for one with an FP8 dot on
 * mma.sync, +ptx78 otherwise), runs a short
 * pass pipeline over the module, and asks the target machine for assembly, which for
 * NVPTX is the PTX text.
 *
 * Why not default<O3>.  The lowering already emits what O3 would work hard to find:
 * straight-line code, unrolled tiles, no allocas, no calls, no inlining to do.  What it
 * leaves is redundancy (the same coordinate computed for several registers), constant
 * arithmetic, loop-invariant address math and the dot's short k-loop.  early-cse,
 * instcombine, simplifycfg, licm and full unrolling of short loops remove all of that
 * (a second early-cse, instcombine and simplifycfg clean up after them: the second
 * instcombine is a fifth of the opt time, but without it a GEMM's swizzled shared-memory
 * addresses lose their immediate offsets), and infer-alignment lets the backend see the
 * alignment of shared-memory accesses.  The PTX comes out the same size as O3's
 * (smaller for the matmul), in a third of the time; O3 spent most of its time in GVN and
 * in instcombine over the fully unrolled dot.  The target machine runs at the default codegen level
 * (O2): at O3 NVPTX adds two GVN runs of its own, which cost the matmul example 12 ms
 * and change nothing ptxas does not do again.  LOOM_LLVM_PASSES=<pipeline> replaces the
 * pipeline (e.g. default<O3>) to compare.
 *
 * The backend's load/store vectorizer is off (-disable-nvptx-load-store-vectorizer):
 * global accesses are vectors from the lowering (lower_mem.c), and so are the shared
 * accesses it found, those of layout conversions and of a reduction's partials
 * (lower.c, lower_math.c); on a GEMM's swizzled epilogue stores, which it cannot merge,
 * it spent a quarter of the PTX emission time.
 *
 * What the compile time goes into (issue 18: ikbo_lce's codegen, 216 ms before): LLVM's
 * cost grows with the operands of the inline asm it selects, so the lowering keeps
 * those statements few and their operands shared (lower_wgmma.c: one statement per
 * wgmma op; lower_mem.c: stores grouped, bounds once per coordinate), and avoids
 * the f16 bitcasts that LLVM 19 makes into ProxyReg instructions (their eraser walks
 * the whole function once per instance). *
 * Floating point: the NVPTX backend is told not to contract a*b+c into fma
 * (-nvptx-fma-level=0) so every add and mul is emitted with .rn and rounds exactly
 * as the interpreter's does; explicit fma ops still use fma.rn.  Division is IEEE
 * (div.rn.f32, LLVM's default).
 *
 * All of LLVM is linked statically into libloom and its symbols are not exported, so a
 * program using loom never sees LLVM and can run where LLVM is not installed.
 */
#include "cg.h"
#include "../util/util.h"

#include <llvm-c/Core.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The pass pipeline (see the file comment).  instcombine runs without its fixpoint check:
 * in LLVM 19 that check is on by default and, when one run leaves something more to
 * combine, aborts the whole process ("Instruction Combining did not reach a fixpoint");
 * the ping-pong gemm template's IR did that.  The result is as good, only not proven
 * final. */
#define CG_PASSES                                                                                  \
    "function(early-cse<memssa>,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm),"     \
    "loop-unroll-full,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,infer-alignment)"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_llvm(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    const char *argv[] = {"loom", "-nvptx-fma-level=0", "-disable-nvptx-load-store-vectorizer"};
    LLVMParseCommandLineOptions(3, argv, NULL);
}

loom_status cg_emit_init(cg_ctx *cg)
{
    (void)cg;
    pthread_once(&init_once, init_llvm);
    return LOOM_OK;
}

/* Does the kernel have a dot on mma.sync m16n8k32 .e4m3 / .e5m2 (PTX ISA 8.4; on targets
 * without it of their own, cg_fp8_mma_native, FP8 dots are f16 mmas)? */
static bool fp8_mma_sync(const cg_ctx *cg)
{
    for (uint32_t o = 1; cg->dot_mma && o < cg->k->nops; o++)
        if (cg->dot_mma[o] && cg->k->ops[o].kind == IR_DOT && cg_fp8_mma_native(cg->arch) &&
            ir_dtype_is_fp8((loom_dtype)cg->k->vals[cg->k->ops[o].opnd[0]].type.dtype))
            return true;
    return false;
}

/* The PTX ISA version: 8.0 for Hopper, 8.1 where the kernel stores into its cluster's
 * shared memory (st.async is 8.1's), 7.8 otherwise; 8.4 where a dot runs on FP8 mma.sync
 * (m16n8k32 with .e4m3 / .e5m2 came in 8.4). */
static const char *ptx_features(const cg_ctx *cg)
{
    const char *arch = cg->arch;
    if (fp8_mma_sync(cg))
        return "+ptx84";
    if (!strncmp(arch, "sm_9", 4) || !strncmp(arch, "sm_10", 5) || !strncmp(arch, "sm_12", 5))
        return ir_uses_op(cg->k, IR_SMEM_STORE_CLUSTER) ? "+ptx81" : "+ptx80";
    return "+ptx78";
}

/* From LLVM's C API (llvm-c/Core.h, LLVM 16 and later), linked into libloom with the code
 * generator: the arch check below depends on the LLVM loom was built with. */
void LLVMGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

/* Is arch an NVPTX processor the linked LLVM knows?  LLVM given an unknown one only warns,
 * then aborts the process when it cannot select an instruction, so it must never get one. */
bool cg_arch_known(const char *arch)
{
    static const char *const llvm19[] = {"sm_20", "sm_21", "sm_30", "sm_32", "sm_35", "sm_37", "sm_50",
                                         "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72",
                                         "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a"};
    static const char *const llvm20[] = {"sm_100", "sm_100a", "sm_101", "sm_101a", "sm_120", "sm_120a"};
    for (size_t i = 0; i < sizeof llvm19 / sizeof llvm19[0]; i++)
        if (!strcmp(arch, llvm19[i]))
            return true;
    unsigned major = 0, minor = 0, patch = 0;
    LLVMGetVersion(&major, &minor, &patch);
    for (size_t i = 0; major >= 20 && i < sizeof llvm20 / sizeof llvm20[0]; i++)
        if (!strcmp(arch, llvm20[i]))
            return true;
    return false;
}

void *cg_target_machine(cg_ctx *cg)
{
    if (!cg_arch_known(cg->arch)) { /* every path: loom_compile_ptx, loom_launch's compile for the device */
        cg_fail(cg, LOOM_ERR_UNSUPPORTED, "arch '%s' is not an NVPTX processor this loom's LLVM knows (sm_80, sm_90a, ...)",
                cg->arch);
        return NULL;
    }
    const char *triple = "nvptx64-nvidia-cuda";
    LLVMTargetRef t;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &t, &msg)) {
        cg_fail(cg, LOOM_ERR_COMPILE, "LLVM has no NVPTX target: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, triple, cg->arch, ptx_features(cg),
                                                      LLVMCodeGenLevelDefault, LLVMRelocDefault,
                                                      LLVMCodeModelDefault);
    if (!tm)
        cg_fail(cg, LOOM_ERR_COMPILE, "LLVM cannot make a target machine for %s", cg->arch);
    return tm;
}

void cg_target_machine_free(void *tm)
{
    if (tm)
        LLVMDisposeTargetMachine((LLVMTargetMachineRef)tm);
}

static loom_status run_passes(cg_ctx *cg, LLVMModuleRef m, void *tm, const char *passes)
{
    LLVMPassBuilderOptionsRef opt = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(m, passes, (LLVMTargetMachineRef)tm, opt);
    LLVMDisposePassBuilderOptions(opt);
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        cg_fail(cg, LOOM_ERR_COMPILE, "LLVM optimization (passes \"%s\") failed: %s", passes, msg);
        LLVMDisposeErrorMessage(msg);
    }
    return cg->st;
}

loom_status cg_optimize(cg_ctx *cg, void *module, void *tm)
{
    LLVMModuleRef m = (LLVMModuleRef)module;
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout((LLVMTargetMachineRef)tm);
    LLVMSetModuleDataLayout(m, td);
    LLVMDisposeTargetData(td);
    const char *passes = util_env_str("LOOM_LLVM_PASSES");
    return run_passes(cg, m, tm, passes ? passes : CG_PASSES);
}

/* A kernel launched in clusters says so in its PTX: .reqnctapercluster after the entry's
 * other performance directives (LLVM 19 has no annotation for it).  Then a plain launch
 * groups its CTAs, and the AOT launcher needs nothing more. */
static loom_status cluster_directive(cg_ctx *cg, char **ptx)
{
    int c = cg->k->cluster;
    if (c <= 1)
        return LOOM_OK;
    char *entry = strstr(*ptx, ".entry"), *body = entry ? strstr(entry, "\n{") : NULL;
    if (!body)
        return cg_fail(cg, LOOM_ERR_COMPILE, "the PTX of a cluster kernel has no .entry body"), cg->st;
    char dir[64];
    int dn = snprintf(dir, sizeof dir, "\n.reqnctapercluster %d, 1, 1", c);
    size_t at = (size_t)(body - *ptx), n = strlen(*ptx);
    char *s = malloc(n + (size_t)dn + 1);
    if (!s)
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    memcpy(s, *ptx, at);
    memcpy(s + at, dir, (size_t)dn);
    memcpy(s + at + dn, *ptx + at, n - at + 1);
    free(*ptx);
    *ptx = s;
    return LOOM_OK;
}

loom_status cg_emit_ptx(cg_ctx *cg, void *module, void *tm, char **ptx_out)
{
    char *msg = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer((LLVMTargetMachineRef)tm, (LLVMModuleRef)module, LLVMAssemblyFile,
                                            &msg, &buf)) {
        cg_fail(cg, LOOM_ERR_COMPILE, "PTX emission failed: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return cg->st;
    }
    size_t n = LLVMGetBufferSize(buf);
    char *s = malloc(n + 1);
    if (!s) {
        LLVMDisposeMemoryBuffer(buf);
        return cg_fail(cg, LOOM_ERR_NOMEM, "out of memory"), cg->st;
    }
    memcpy(s, LLVMGetBufferStart(buf), n);
    s[n] = 0;
    LLVMDisposeMemoryBuffer(buf);
    *ptx_out = s;
    return cluster_directive(cg, ptx_out);
}
