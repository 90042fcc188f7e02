/*
 * tma.h -- TMA tensor descriptors: what a kernel asks for, how the host encodes them, and
 * the per-kernel cache of encoded descriptors (runtime/tma.c).
 *
 * A kernel that copies tiles with TMA (cp.async.bulk.tensor) reads each global tensor
 * through a 128-byte descriptor that the host encodes with the driver's
 * cuTensorMapEncodeTiled and passes by value as an extra kernel parameter
 * (`.param .align 64 .b8 NAME[128]`, grid-constant).  The code generator says which
 * descriptors a kernel needs as a list of rt_tma_spec, in the order of those extra
 * parameters; the launch (runtime/launch.c, rt_gpu_launch) encodes one per spec from the
 * buffer of the argument it names and appends it after the kernel's own parameters.
 *
 * One rule lives outside the descriptor, in the copy instruction: the innermost
 * coordinate of a copy, times the element size, must be a multiple of 16 bytes (negative
 * coordinates included), or Hopper stops the kernel with an illegal instruction
 * (tests/test_tma.c pins it down).  Coordinates are run-time values, so the DSL's checks
 * or the code generator must guarantee it; the host cannot.
 *
 * Prefix: rt_tma_.
 */
#ifndef LOOM_TMA_H
#define LOOM_TMA_H

#include "codegen.h"
#include "loom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_TMA_MAX_RANK CG_TMA_MAX_RANK /* the most dims a descriptor can describe */
#define RT_TMA_MAX_SPECS CG_MAX_TMA      /* the most descriptors one kernel takes */
#define RT_TMA_DESC_BYTES 128
#define RT_TMA_DESC_ALIGN 64

/* One descriptor a kernel needs: the code generator's ABI type (codegen/codegen.h). */
typedef cg_tma_spec rt_tma_spec;

/* The arguments of cuTensorMapEncodeTiled that a spec and a tensor give, in the driver's
 * order: dims innermost first, strides in bytes for dims 1..rank-1 (the innermost dim is
 * contiguous and has none).  Enum fields hold the driver's values (cuda_api.h). */
typedef struct rt_tma_plan {
    int dtype;                              /* CUtensorMapDataType */
    uint32_t rank;
    uint64_t base;                          /* global address, 16-byte aligned */
    uint64_t dims[RT_TMA_MAX_RANK];         /* elements, innermost first */
    uint64_t strides[RT_TMA_MAX_RANK - 1];  /* bytes, of dims 1..rank-1 (innermost first) */
    uint32_t box[RT_TMA_MAX_RANK];          /* elements, innermost first */
    uint32_t elem_strides[RT_TMA_MAX_RANK]; /* all 1 */
    int interleave, swizzle, l2_promotion, oob_fill; /* driver enum values */
} rt_tma_plan;

/* Check spec s against tensor argument `info` at device address base and derive the
 * driver's arguments, without calling the driver.  On a bad input (base not 16-byte
 * aligned, a stride not a multiple of 16 bytes, an innermost dim that is not contiguous,
 * a box dim outside 1..256, inner box bytes not a multiple of 16 or above the swizzle
 * span, a rank out of range or unlike the tensor's, an unsupported dtype or swizzle)
 * return LOOM_ERR_INVALID with a message naming the argument and what is wrong. */
loom_status rt_tma_plan_make(const rt_tma_spec *s, const loom_arg_info *info, uint64_t base,
                             rt_tma_plan *out, char *err, size_t errlen);

/* Encode into desc (128 bytes, 64-byte aligned) the descriptor of tensor argument `info`
 * at device address base: out-of-bounds reads are filled with zero, no interleave, L2
 * promotion 256B.  Validation as rt_tma_plan_make (no GPU needed to get its messages);
 * then the driver: LOOM_ERR_NO_GPU without one, LOOM_ERR_CUDA when it refuses. */
loom_status rt_tma_encode(const rt_tma_spec *s, const loom_arg_info *info, uint64_t base, void *desc,
                          char *err, size_t errlen);

/* Bytes one full box brings into shared memory (what an mbarrier's expect-tx counts,
 * out-of-bounds elements included); 0 for a bad spec. */
uint64_t rt_tma_box_bytes(const rt_tma_spec *s, loom_dtype dt);

/* How many descriptors rt_tma_encode has asked the driver for, process-wide (tests use
 * it to see the descriptor cache work). */
uint64_t rt_tma_encode_count(void);

/* Implemented by runtime/launch.c: cuTensorMapEncodeTiled on a checked plan. */
loom_status rt_gpu_tensor_map_encode(const rt_tma_plan *p, void *desc, char *err, size_t errlen);

/* ---------------------------------------------------------------- descriptor cache */

/* Encoded descriptors of one loaded kernel, per (spec, base address): a kernel's
 * descriptors depend only on its specs, its argument types (fixed by the IR that keys the
 * module) and the base addresses, so a launch with the buffers of an earlier one encodes
 * nothing.  A few bases are kept per spec (rotated inputs); thread-safe. */
typedef struct rt_tma_cache rt_tma_cache;

rt_tma_cache *rt_tma_cache_create(const rt_tma_spec *specs, int n); /* NULL: out of memory */
void rt_tma_cache_destroy(rt_tma_cache *c);
int rt_tma_cache_count(const rt_tma_cache *c);
const rt_tma_spec *rt_tma_cache_spec(const rt_tma_cache *c, int i);
/* Copy into desc (64-byte aligned) the descriptor of spec i for tensor `info` at base,
 * encoding it on a miss.  Errors as rt_tma_encode. */
loom_status rt_tma_cache_get(rt_tma_cache *c, int i, const loom_arg_info *info, uint64_t base,
                             void *desc, char *err, size_t errlen);

#endif /* LOOM_TMA_H */
