/*
 * memory.c -- device memory: allocations, copies, memset, and waiting for the device
 * (rt.h, gpu.h).
 *
 * All work goes to the default stream of the device's primary context: copies are
 * synchronous, launches are asynchronous unless LOOM_SYNC=1 (launch.c), and rt_gpu_sync
 * waits for them (reporting the fault of an earlier launch).  A buffer's device address
 * is valid for every rt_gpu of the same device, since they all share that context.
 */
#include "driver.h"
#include "../util/util.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>

loom_status rt_gpu_alloc(rt_gpu *g, size_t bytes, uint64_t *dptr, char *err, size_t errlen)
{
    *dptr = 0;
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUdeviceptr p = 0;
    CUresult r = cu.cuMemAlloc_v2(&p, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemAlloc_v2(%zu bytes)", bytes);
    *dptr = (uint64_t)p;
    return LOOM_OK;
}

void rt_gpu_free(rt_gpu *g, uint64_t dptr)
{
    if (!g || !dptr)
        return;
    /* Nothing to report to: a failure here means the context is already broken, which
     * the next call that can report will say. */
    if (cu.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
        cu.cuMemFree_v2((CUdeviceptr)dptr);
}

loom_status rt_gpu_htod(rt_gpu *g, uint64_t dst, const void *src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyHtoD_v2((CUdeviceptr)dst, src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyHtoD_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_dtoh(rt_gpu *g, void *dst, uint64_t src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyDtoH_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_memset8(rt_gpu *g, uint64_t dst, unsigned char byte, size_t bytes, char *err,
                           size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemsetD8_v2((CUdeviceptr)dst, byte, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemsetD8_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_dtod(rt_gpu *g, uint64_t dst, uint64_t src, size_t bytes, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK || !bytes)
        return st;
    CUresult r = cu.cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, bytes);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyDtoD_v2(%zu bytes)", bytes);
    return LOOM_OK;
}

loom_status rt_gpu_sync(rt_gpu *g, char *err, size_t errlen)
{
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CHECK(g, cu.cuCtxSynchronize(), "cuCtxSynchronize");
    return LOOM_OK;
}

/* An event recorded on the default stream, polled: a wait that can give up, where
 * cuCtxSynchronize cannot.  Polls start at 50 us and grow to 2 ms, so a short wait costs
 * little and a long one little CPU. */
loom_status rt_gpu_sync_timeout(rt_gpu *g, int timeout_ms, char *err, size_t errlen)
{
    if (timeout_ms <= 0)
        return rt_gpu_sync(g, err, errlen);
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUevent ev = NULL;
    CHECK(g, cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    CUresult r = cu.cuEventRecord(ev, NULL);
    if (r != CUDA_SUCCESS) {
        cu.cuEventDestroy_v2(ev);
        return cu_fail(g, r, err, errlen, "cuEventRecord");
    }
    double t0 = util_now_ms();
    long sleep_ns = 50000;
    for (;;) {
        r = cu.cuEventQuery(ev);
        if (r != CUDA_ERROR_NOT_READY)
            break;
        if (util_now_ms() - t0 >= timeout_ms) {
            cu.cuEventDestroy_v2(ev);
            snprintf(err, errlen,
                     "loom_runtime_sync: the GPU work is not done after %d ms; the last kernel launched was '%s' "
                     "(it may be stuck: LOOM_HANG_CHECK=<ms> makes a wait stuck that long report "
                     "where, and end the kernel)",
                     timeout_ms, g->last_kernel[0] ? g->last_kernel : "(none)");
            return LOOM_ERR_TIMEOUT;
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 2000000)
            sleep_ns *= 2;
    }
    cu.cuEventDestroy_v2(ev);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "loom_runtime_sync (cuEventQuery)");
    return LOOM_OK;
}
