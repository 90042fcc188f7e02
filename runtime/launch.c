/*
 * launch.c -- launching a loom kernel (rt.h: rt_gpu_launch) or any CUfunction
 * (driver.h: rt_launch_fn), and encoding the TMA descriptors a launch appends.
 *
 * A launch checks its arguments against the kernel (tensor bases 16-byte aligned, scalar
 * types the backend passes, warps the device allows), finds the function (module.c) and
 * goes to the default stream with cuLaunchKernelEx: asynchronous unless LOOM_SYNC=1.
 * Launch errors name the kernel, its grid, block and shared memory; the kernel's name is
 * kept too, so a fault that a later call reports names the last kernel launched
 * (cu_fail, driver.c).
 *
 * A kernel that reads tensors with TMA takes one descriptor per rt_tma_spec after its own
 * parameters: the code generator lists the specs, the cache entry keeps them (and the
 * disk file, so a warm start has them), and each launch appends the descriptors, encoded
 * from the arguments' buffers through the entry's rt_tma_cache (runtime/tma.c), which
 * calls rt_gpu_tensor_map_encode here on a miss.  A driver without
 * cuTensorMapEncodeTiled (before CUDA 12) refuses only the kernels that use TMA.
 */
#include "../pipe/autows.h"
#include "driver.h"
#include "../util/util.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void rt_launch_config(CUlaunchConfig *cfg, const unsigned grid[3], const unsigned block[3], unsigned smem,
                      CUstream stream)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->gridDimX = grid[0];
    cfg->gridDimY = grid[1];
    cfg->gridDimZ = grid[2];
    cfg->blockDimX = block[0];
    cfg->blockDimY = block[1];
    cfg->blockDimZ = block[2];
    cfg->sharedMemBytes = smem;
    cfg->hStream = stream;
}

loom_status rt_launch_fn(rt_gpu *g, CUfunction fn, const char *name, const unsigned grid[3],
                         const unsigned block[3], unsigned smem, void **params, char *err,
                         size_t errlen)
{
    return rt_launch_fn_on(g, fn, name, grid, block, smem, params, NULL, err, errlen);
}

loom_status rt_launch_fn_on(rt_gpu *g, CUfunction fn, const char *name, const unsigned grid[3],
                            const unsigned block[3], unsigned smem, void **params, CUstream stream, char *err,
                            size_t errlen)
{
    CUlaunchConfig cfg;
    rt_launch_config(&cfg, grid, block, smem, stream);
    if (strncmp(g->last_kernel, name, sizeof g->last_kernel - 1) != 0) /* a launch's path: copy on change only */
        snprintf(g->last_kernel, sizeof g->last_kernel, "%s", name);
    CUresult r = cu.cuLaunchKernelEx(&cfg, fn, params, NULL);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen,
                       "cuLaunchKernelEx of kernel '%s' (grid %ux%ux%u, block %ux%ux%u, %u bytes "
                       "of dynamic shared memory)",
                       name, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem);
    if (g->sync_each) {
        r = cu.cuCtxSynchronize();
        if (r != CUDA_SUCCESS)
            return cu_fail(g, r, err, errlen, "kernel '%s' (cuCtxSynchronize after launch)", name);
    }
    return LOOM_OK;
}

loom_status rt_gpu_launch(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *args,
                          char *err, size_t errlen)
{
    return rt_gpu_launch_on(g, k, grid, args, NULL, err, errlen);
}

loom_status rt_gpu_launch_on(rt_gpu *g, loom_kernel *k, const int grid[3], const rt_launch_arg *args, void *stream,
                             char *err, size_t errlen)
{
    const char *name = loom_kernel_name(k);
    int nargs = loom_kernel_num_args(k);
    if (nargs < 0 || nargs > LOOM_MAX_ARGS) {
        snprintf(err, errlen, "kernel '%s': bad argument count %d", name, nargs);
        return LOOM_ERR_INVALID;
    }
    void *params[LOOM_MAX_ARGS + 3 + RT_TMA_MAX_SPECS];
    for (int i = 0; i < nargs; i++) {
        loom_arg_info ai;
        if (!loom_kernel_arg_info(k, i, &ai)) {
            snprintf(err, errlen, "kernel '%s': no argument %d", name, i);
            return LOOM_ERR_INVALID;
        }
        if (ai.is_tensor) {
            /* the code generator issues 16-byte vector accesses where offsets allow,
             * so every tensor base must be 16-byte aligned (device allocations are) */
            size_t align = 16;
            if (args[i].dptr % align != 0) {
                snprintf(err, errlen,
                         "launch of '%s': argument %d ('%s') is at device address 0x%llx, not "
                         "16-byte aligned (loom's vector accesses need it; %s tensor)",
                         name, i, ai.name, (unsigned long long)args[i].dptr,
                         loom_dtype_name(ai.dtype));
                return LOOM_ERR_INVALID;
            }
            params[i] = (void *)&args[i].dptr;
        } else {
            switch (ai.dtype) {
            case LOOM_I32: params[i] = (void *)&args[i].s.i32; break;
            case LOOM_I64: params[i] = (void *)&args[i].s.i64; break;
            case LOOM_F32: params[i] = (void *)&args[i].s.f32; break;
            default:
                snprintf(err, errlen, "launch of '%s': argument %d ('%s') is a %s scalar, which the "
                         "GPU backend cannot pass", name, i, ai.name, loom_dtype_name(ai.dtype));
                return LOOM_ERR_UNSUPPORTED;
            }
        }
    }
    int warps = loom_kernel_num_warps(k);
    if (warps < 1 || warps * 32 > (g->props.max_threads_per_block ? g->props.max_threads_per_block : 1024)) {
        snprintf(err, errlen, "kernel '%s': %d warps per CTA is more than %s allows", name, warps,
                 g->props.name);
        return LOOM_ERR_INVALID;
    }
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    mc_entry e;
    st = rt_get_function(g, k, &e, NULL, err, errlen);
    if (st != LOOM_OK)
        return st;
    /* a specialized kernel (pipe/autows.h) is persistent: the grid as given follows the
     * arguments, and one CTA an SM takes its programs in turn */
    int vgrid[3] = {grid[0], grid[1], grid[2]}, extra = 0;
    unsigned gr[3] = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
    if (pipe_autows_on(k)) {
        for (int i = 0; i < 3; i++)
            params[nargs + i] = &vgrid[i];
        extra = 3;
        gr[0] = (unsigned)pipe_autows_ctas(grid, g->props.sm_count > 0 ? g->props.sm_count : 1);
        gr[1] = gr[2] = 1;
    }
    /* TMA descriptors go after the kernel's own parameters, by value (the driver copies
     * them at the launch call, so stack storage is enough) */
    _Alignas(RT_TMA_DESC_ALIGN) unsigned char descs[RT_TMA_MAX_SPECS][RT_TMA_DESC_BYTES];
    int ntma = rt_tma_cache_count(e.tma);
    loom_arg dims[LOOM_MAX_ARGS]; /* the scalars, for the tensors' run-time dims */
    for (int i = 0; i < nargs; i++)
        dims[i] = (loom_arg){.s.i64 = args[i].s.i64};
    for (int t = 0; t < ntma; t++) {
        const rt_tma_spec *sp = rt_tma_cache_spec(e.tma, t);
        loom_arg_info ai;
        if (sp->arg < 0 || sp->arg >= nargs || !loom_kernel_arg_info(k, sp->arg, &ai)) {
            snprintf(err, errlen, "launch of '%s': TMA descriptor %d names argument %d; the kernel has "
                     "%d (a code generator bug)", name, t, sp->arg, nargs);
            return LOOM_ERR_INVALID;
        }
        loom_kernel_arg_shape(k, sp->arg, dims, &ai.shape, &ai.min_bytes); /* at this launch's dims */
        char terr[512];
        st = rt_tma_cache_get(e.tma, t, &ai, args[sp->arg].dptr, descs[t], terr, sizeof terr);
        if (st != LOOM_OK) {
            snprintf(err, errlen, "launch of '%s': %s", name, terr);
            return st;
        }
        params[nargs + extra + t] = descs[t];
    }
    unsigned bl[3] = {(unsigned)warps * 32u, 1, 1};
    return rt_launch_fn_on(g, (CUfunction)e.function, name, gr, bl, (unsigned)e.smem_bytes, params,
                           (CUstream)stream, err, errlen);
}

/* ---------------------------------------------------------------- TMA descriptors */

loom_status rt_gpu_tensor_map_encode(const rt_tma_plan *p, void *desc, char *err, size_t errlen)
{
    loom_status st = cu_load(err, errlen);
    if (st != LOOM_OK)
        return st;
    if (!cu.cuTensorMapEncodeTiled) {
        snprintf(err, errlen, "the CUDA driver %s has no cuTensorMapEncodeTiled (TMA needs CUDA 12 "
                 "or newer)", cu.path);
        return LOOM_ERR_UNSUPPORTED;
    }
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char desc_s[256];
        cu_describe(r, desc_s, sizeof desc_s);
        snprintf(err, errlen, "no usable GPU: cuInit failed: %s", desc_s);
        return LOOM_ERR_NO_GPU;
    }
    cuuint64_t dims[RT_TMA_MAX_RANK], strides[RT_TMA_MAX_RANK];
    cuuint32_t box[RT_TMA_MAX_RANK], estr[RT_TMA_MAX_RANK];
    for (uint32_t i = 0; i < p->rank && i < RT_TMA_MAX_RANK; i++) {
        dims[i] = p->dims[i];
        box[i] = p->box[i];
        estr[i] = p->elem_strides[i];
        strides[i] = i + 1 < p->rank ? p->strides[i] : 0;
    }
    r = cu.cuTensorMapEncodeTiled((CUtensorMap *)desc, p->dtype, p->rank, (void *)(uintptr_t)p->base,
                                  dims, strides, box, estr, p->interleave, p->swizzle,
                                  p->l2_promotion, p->oob_fill);
    if (r != CUDA_SUCCESS)
        return cu_fail(NULL, r, err, errlen,
                       "cuTensorMapEncodeTiled (rank %u, base 0x%llx, swizzle mode %d)", p->rank,
                       (unsigned long long)p->base, p->swizzle);
    return LOOM_OK;
}
