/*
 * t_nvref.h -- the NVRTC GEMM reference (support/nvrtc_ref.h) for a GPU test: opened on
 * the test's runtime, or the test skipped where NVRTC is missing.
 */
#ifndef LOOM_T_NVREF_H
#define LOOM_T_NVREF_H

#include "nvrtc_ref.h"
#include "rt.h"
#include "testutil.h"

/* The reference kernels on rt's GPU; skips the test (rt destroyed) without NVRTC, fails it
 * on any other error. */
static inline nvref_gemm *t_nvref_or_skip(loom_runtime *rt)
{
    char err[1024];
    nvref_gemm *ref = NULL;
    loom_status st = nvref_gemm_open(rt_runtime_gpu(rt), &ref, err, sizeof err);
    if (st == LOOM_ERR_UNSUPPORTED) {
        loom_runtime_destroy(rt);
        cr_skip_test("%s", err);
    }
    cr_assert_eq(st, LOOM_OK, "%s", err);
    return ref;
}

#endif
