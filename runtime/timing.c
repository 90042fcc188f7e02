/*
 * timing.c -- GPU time of work the caller passes in, measured with events (gpu.h).
 *
 * Events are recorded on the default stream, which loom launches use; every rt_gpu of a
 * device shares its primary context, so a benchmark's own rt_gpu times kernels launched
 * through loom_launch.  rt_gpu_time_ms runs the work back to back with one event between
 * consecutive runs and takes the median; rt_gpu_time_each brackets each run with its own
 * pair of events, so what runs between two timed runs (an L2 flush, say) is not timed:
 * the autotuner's measurement.  The work may make another context current, so the
 * rt_gpu's is made current again before each event.
 */
#include "driver.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

loom_status rt_gpu_time_ms(rt_gpu *g, rt_gpu_work_fn work, void *ctx, int warmup, int reps,
                           double *median_ms, char *err, size_t errlen)
{
    *median_ms = 0;
    if (!g || !work || reps < 1 || reps > 100000 || warmup < 0) {
        snprintf(err, errlen, "rt_gpu_time_ms: bad arguments (reps %d, warmup %d)", reps, warmup);
        return LOOM_ERR_INVALID;
    }
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    for (int i = 0; i < warmup; i++)
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            return st;
    CUevent *ev = calloc((size_t)reps + 1, sizeof *ev);
    double *t = calloc((size_t)reps, sizeof *t);
    int made = 0;
    if (!ev || !t) {
        snprintf(err, errlen, "out of host memory");
        st = LOOM_ERR_NOMEM;
        goto done;
    }
    for (; made <= reps; made++) {
        CUresult r = cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventCreate");
            goto done;
        }
    }
    CUresult r = cu.cuEventRecord(ev[0], NULL);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventRecord");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            goto done;
        /* the work may have made another context current */
        if ((st = cu_enter(g, err, errlen)) != LOOM_OK)
            goto done;
        r = cu.cuEventRecord(ev[i + 1], NULL);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
    }
    r = cu.cuEventSynchronize(ev[reps]);
    if (r != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventSynchronize");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        r = cu.cuEventElapsedTime(&ms, ev[i], ev[i + 1]);
        if (r != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventElapsedTime");
            goto done;
        }
        t[i] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
done:
    for (int i = 0; i < made; i++)
        cu.cuEventDestroy_v2(ev[i]);
    free(ev);
    free(t);
    return st;
}

loom_status rt_gpu_time_each(rt_gpu *g, rt_gpu_work_fn before, rt_gpu_work_fn work, void *ctx,
                             int reps, double *times_ms, char *err, size_t errlen)
{
    if (!g || !work || !times_ms || reps < 1 || reps > 100000) {
        snprintf(err, errlen, "rt_gpu_time_each: bad arguments (reps %d)", reps);
        return LOOM_ERR_INVALID;
    }
    loom_status st = cu_enter(g, err, errlen);
    if (st != LOOM_OK)
        return st;
    CUevent *ev = calloc(2 * (size_t)reps, sizeof *ev);
    int made = 0;
    if (!ev) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    CUresult r = CUDA_SUCCESS;
    for (; made < 2 * reps; made++)
        if ((r = cu.cuEventCreate(&ev[made], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventCreate");
            goto done;
        }
    for (int i = 0; i < reps; i++) {
        if (before && (st = before(ctx, err, errlen)) != LOOM_OK)
            goto done;
        if ((st = cu_enter(g, err, errlen)) != LOOM_OK)
            goto done;
        if ((r = cu.cuEventRecord(ev[2 * i], NULL)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            goto done;
        if ((st = cu_enter(g, err, errlen)) != LOOM_OK)
            goto done;
        if ((r = cu.cuEventRecord(ev[2 * i + 1], NULL)) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventRecord");
            goto done;
        }
    }
    if ((r = cu.cuEventSynchronize(ev[2 * reps - 1])) != CUDA_SUCCESS) {
        st = cu_fail(g, r, err, errlen, "cuEventSynchronize");
        goto done;
    }
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        if ((r = cu.cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1])) != CUDA_SUCCESS) {
            st = cu_fail(g, r, err, errlen, "cuEventElapsedTime");
            goto done;
        }
        times_ms[i] = ms;
    }
done:
    for (int i = 0; i < made; i++)
        cu.cuEventDestroy_v2(ev[i]);
    free(ev);
    return st;
}

loom_status rt_gpu_time_each_ms(rt_gpu *g, rt_gpu_work_fn prep, rt_gpu_work_fn work, void *ctx,
                                int warmup, int reps, double *median_ms, char *err, size_t errlen)
{
    *median_ms = 0;
    if (warmup < 0 || reps < 1 || reps > 100000) {
        snprintf(err, errlen, "rt_gpu_time_each_ms: bad arguments (reps %d, warmup %d)", reps, warmup);
        return LOOM_ERR_INVALID;
    }
    loom_status st;
    for (int i = 0; i < warmup; i++) {
        if (prep && (st = prep(ctx, err, errlen)) != LOOM_OK)
            return st;
        if ((st = work(ctx, err, errlen)) != LOOM_OK)
            return st;
    }
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of host memory");
        return LOOM_ERR_NOMEM;
    }
    st = rt_gpu_time_each(g, prep, work, ctx, reps, t, err, errlen);
    if (st == LOOM_OK) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *median_ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    }
    free(t);
    return st;
}
