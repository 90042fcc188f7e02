/*
 * tma.c -- TMA tensor descriptors: checks, the driver's arguments, and a cache (tma.h).
 *
 * A TMA descriptor tells the copy engine where a global tensor lives (base, dims, byte
 * strides, element type) and which box one copy moves into shared memory, with the
 * shared-memory swizzle.  The driver encodes it (cuTensorMapEncodeTiled) and refuses bad
 * values with a bare CUDA_ERROR_INVALID_VALUE, which says nothing about which argument
 * or why.  So every rule the driver documents is checked here first, in plain C, and a
 * refusal names the tensor argument and the rule: users see "row stride of 24 bytes is
 * not a multiple of 16" at launch instead of a CUDA error, and the checks are tested on
 * machines without a GPU.
 *
 * loom describes tensors outermost dim first with strides in elements; the driver wants
 * dims innermost first and strides in bytes, without the innermost dim's (which must be
 * contiguous).  rt_tma_plan_make does that reordering once, into an rt_tma_plan that
 * runtime/launch.c hands to the driver unchanged.
 *
 * The cache keeps, per descriptor a kernel takes, the last few (base address,
 * descriptor) pairs: the descriptor of a loaded kernel depends on nothing else (its
 * argument types are fixed by the IR that keys the module), so repeated launches on the
 * same buffers encode nothing.
 */
#define _GNU_SOURCE
#include "tma.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Driver enum values (cuda.h's CUtensorMap* enums; ABI, never renumbered). */
enum {
    TMA_DT_UINT8 = 0,
    TMA_DT_INT32 = 3,
    TMA_DT_INT64 = 5,
    TMA_DT_FLOAT16 = 6,
    TMA_DT_FLOAT32 = 7,
    TMA_DT_BFLOAT16 = 9,
    TMA_INTERLEAVE_NONE = 0,
    TMA_SWIZZLE_NONE = 0,
    TMA_SWIZZLE_32B = 1,
    TMA_SWIZZLE_64B = 2,
    TMA_SWIZZLE_128B = 3,
    TMA_L2_PROMOTION_256B = 3,
    TMA_OOB_FILL_ZERO = 0,
};

static atomic_ullong encodes;

uint64_t rt_tma_encode_count(void) { return atomic_load(&encodes); }

/* The driver's element type for a loom dtype; -1 when TMA cannot copy it. */
static int tma_dtype(loom_dtype dt)
{
    switch (dt) {
    case LOOM_F16: return TMA_DT_FLOAT16;
    case LOOM_BF16: return TMA_DT_BFLOAT16;
    case LOOM_F32: return TMA_DT_FLOAT32;
    case LOOM_I32: return TMA_DT_INT32;
    case LOOM_I64: return TMA_DT_INT64;
    case LOOM_E4M3:
    case LOOM_E5M2: return TMA_DT_UINT8; /* bytes moved as they are */
    default: return -1; /* i1: a byte per element in memory, but not a value TMA should move */
    }
}

static loom_status bad(char *err, size_t errlen, const rt_tma_spec *s, const loom_arg_info *info,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* "argument 2 ('B'): TMA descriptor: <what>" */
static loom_status bad(char *err, size_t errlen, const rt_tma_spec *s, const loom_arg_info *info,
                       const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "argument %d ('%s'): TMA descriptor: %s", s ? s->arg : -1,
                 info && info->name ? info->name : "?", what);
    return LOOM_ERR_INVALID;
}

loom_status rt_tma_plan_make(const rt_tma_spec *s, const loom_arg_info *info, uint64_t base,
                             rt_tma_plan *out, char *err, size_t errlen)
{
    if (!s || !info || !out) {
        if (err && errlen)
            snprintf(err, errlen, "rt_tma_plan_make: %s is NULL", !s ? "spec" : !info ? "info" : "out");
        return LOOM_ERR_INVALID;
    }
    memset(out, 0, sizeof *out);
    if (!info->is_tensor)
        return bad(err, errlen, s, info, "the argument is a scalar, not a tensor");
    int r = s->rank;
    if (r < 1 || r > RT_TMA_MAX_RANK)
        return bad(err, errlen, s, info, "rank %d is out of range (TMA describes 1 to %d dims)", r,
                   RT_TMA_MAX_RANK);
    if (r != info->shape.rank)
        return bad(err, errlen, s, info, "the descriptor has rank %d but the tensor has rank %d", r,
                   info->shape.rank);
    int dt = tma_dtype(info->dtype);
    if (dt < 0)
        return bad(err, errlen, s, info, "dtype %s is not supported (f16, bf16, f32, i32, i64 are)",
                   (unsigned)info->dtype < LOOM_DTYPE_COUNT ? loom_dtype_name(info->dtype) : "(invalid)");
    size_t esz = loom_dtype_size(info->dtype);
    int sw;
    switch (s->swizzle) {
    case 0: sw = TMA_SWIZZLE_NONE; break;
    case 32: sw = TMA_SWIZZLE_32B; break;
    case 64: sw = TMA_SWIZZLE_64B; break;
    case 128: sw = TMA_SWIZZLE_128B; break;
    default:
        return bad(err, errlen, s, info, "swizzle %d is not one of 0, 32, 64, 128 (bytes)", s->swizzle);
    }
    if (base % 16 != 0)
        return bad(err, errlen, s, info,
                   "base address 0x%llx is not 16-byte aligned (TMA needs 16-byte aligned tensors)",
                   (unsigned long long)base);
    for (int d = 0; d < r; d++) {
        int64_t n = info->shape.dim[d];
        if (n < 1 || (uint64_t)n > (1ull << 32))
            return bad(err, errlen, s, info, "dim %d has %lld elements; TMA allows 1 to 2^32", d,
                       (long long)n);
        if (s->box[d] < 1 || s->box[d] > 256)
            return bad(err, errlen, s, info, "box dim %d is %lld; TMA boxes are 1 to 256 elements per dim",
                       d, (long long)s->box[d]);
    }
    int64_t inner_stride = info->strides[r - 1];
    if (inner_stride != 1)
        return bad(err, errlen, s, info,
                   "the innermost dim (%d) has stride %lld; TMA needs it contiguous (stride 1)", r - 1,
                   (long long)inner_stride);
    for (int d = 0; d < r - 1; d++) {
        int64_t st = info->strides[d];
        if (st < 1)
            return bad(err, errlen, s, info, "dim %d has stride %lld; TMA needs positive strides", d,
                       (long long)st);
        uint64_t bytes = (uint64_t)st * esz;
        if (bytes % 16 != 0)
            return bad(err, errlen, s, info,
                       "the stride of dim %d is %llu bytes (%lld %s elements), not a multiple of 16",
                       d, (unsigned long long)bytes, (long long)st, loom_dtype_name(info->dtype));
        if (bytes >= (1ull << 40))
            return bad(err, errlen, s, info, "the stride of dim %d is %llu bytes; TMA allows less than 2^40",
                       d, (unsigned long long)bytes);
    }
    uint64_t inner_bytes = (uint64_t)s->box[r - 1] * esz;
    if (inner_bytes % 16 != 0)
        return bad(err, errlen, s, info,
                   "the box's innermost dim is %llu bytes (%lld %s elements), not a multiple of 16",
                   (unsigned long long)inner_bytes, (long long)s->box[r - 1], loom_dtype_name(info->dtype));
    if (s->swizzle && inner_bytes > (uint64_t)s->swizzle)
        return bad(err, errlen, s, info,
                   "the box's innermost dim is %llu bytes, more than the %d-byte swizzle span",
                   (unsigned long long)inner_bytes, s->swizzle);

    out->dtype = dt;
    out->rank = (uint32_t)r;
    out->base = base;
    for (int i = 0; i < r; i++) { /* i: driver dim (innermost first), d: loom dim */
        int d = r - 1 - i;
        out->dims[i] = (uint64_t)info->shape.dim[d];
        out->box[i] = (uint32_t)s->box[d];
        out->elem_strides[i] = 1;
        if (i > 0)
            out->strides[i - 1] = (uint64_t)info->strides[d] * esz;
    }
    out->interleave = TMA_INTERLEAVE_NONE;
    out->swizzle = sw;
    /* 256B: a miss brings the neighbouring 128 bytes too, which the next k step of a GEMM
     * tile reads (the gemm template: 2% faster at 4096^3 on the H200, as CUTLASS's choice) */
    out->l2_promotion = TMA_L2_PROMOTION_256B;
    out->oob_fill = TMA_OOB_FILL_ZERO;
    return LOOM_OK;
}

loom_status rt_tma_encode(const rt_tma_spec *s, const loom_arg_info *info, uint64_t base, void *desc,
                          char *err, size_t errlen)
{
    rt_tma_plan p;
    loom_status st = rt_tma_plan_make(s, info, base, &p, err, errlen);
    if (st != LOOM_OK)
        return st;
    if (!desc || (uintptr_t)desc % RT_TMA_DESC_ALIGN != 0) {
        if (err && errlen)
            snprintf(err, errlen, "rt_tma_encode: the descriptor's memory is not 64-byte aligned");
        return LOOM_ERR_INVALID;
    }
    atomic_fetch_add(&encodes, 1);
    char derr[512];
    st = rt_gpu_tensor_map_encode(&p, desc, derr, sizeof derr);
    if (st != LOOM_OK && err && errlen)
        snprintf(err, errlen, "argument %d ('%s'): TMA descriptor: %s", s->arg,
                 info->name ? info->name : "?", derr);
    return st;
}

uint64_t rt_tma_box_bytes(const rt_tma_spec *s, loom_dtype dt)
{
    if (!s || s->rank < 1 || s->rank > RT_TMA_MAX_RANK || tma_dtype(dt) < 0)
        return 0;
    uint64_t n = loom_dtype_size(dt);
    for (int d = 0; d < s->rank; d++) {
        if (s->box[d] < 1 || s->box[d] > 256)
            return 0;
        n *= (uint64_t)s->box[d];
    }
    return n;
}

/* ---------------------------------------------------------------- cache */

#define TMA_CACHE_WAYS 4 /* (base, shape) pairs remembered per spec */

static bool same_shape(const loom_shape *a, const loom_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dim[d] != b->dim[d])
            return false;
    return true;
}

typedef struct tma_slot {
    _Alignas(RT_TMA_DESC_ALIGN) unsigned char desc[RT_TMA_DESC_BYTES];
    uint64_t base;
    loom_shape shape; /* the tensor's (run-time dims change it from launch to launch) */
    bool valid;
} tma_slot;

struct rt_tma_cache {
    pthread_mutex_t lock;
    int n;
    rt_tma_spec specs[RT_TMA_MAX_SPECS];
    tma_slot slot[RT_TMA_MAX_SPECS][TMA_CACHE_WAYS];
    int next[RT_TMA_MAX_SPECS]; /* the way to replace next (round robin) */
};

rt_tma_cache *rt_tma_cache_create(const rt_tma_spec *specs, int n)
{
    if (n < 0 || n > RT_TMA_MAX_SPECS || (n && !specs))
        return NULL;
    size_t sz = (sizeof(rt_tma_cache) + RT_TMA_DESC_ALIGN - 1) / RT_TMA_DESC_ALIGN * RT_TMA_DESC_ALIGN;
    rt_tma_cache *c = aligned_alloc(RT_TMA_DESC_ALIGN, sz);
    if (!c)
        return NULL;
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->n = n;
    if (n)
        memcpy(c->specs, specs, (size_t)n * sizeof *specs);
    return c;
}

void rt_tma_cache_destroy(rt_tma_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int rt_tma_cache_count(const rt_tma_cache *c) { return c ? c->n : 0; }

const rt_tma_spec *rt_tma_cache_spec(const rt_tma_cache *c, int i)
{
    return c && i >= 0 && i < c->n ? &c->specs[i] : NULL;
}

loom_status rt_tma_cache_get(rt_tma_cache *c, int i, const loom_arg_info *info, uint64_t base,
                             void *desc, char *err, size_t errlen)
{
    if (!c || i < 0 || i >= c->n || !desc) {
        if (err && errlen)
            snprintf(err, errlen, "rt_tma_cache_get: no descriptor %d", i);
        return LOOM_ERR_INVALID;
    }
    pthread_mutex_lock(&c->lock);
    tma_slot *ways = c->slot[i];
    for (int w = 0; w < TMA_CACHE_WAYS; w++) {
        if (ways[w].valid && ways[w].base == base && same_shape(&ways[w].shape, &info->shape)) {
            memcpy(desc, ways[w].desc, RT_TMA_DESC_BYTES);
            pthread_mutex_unlock(&c->lock);
            return LOOM_OK;
        }
    }
    tma_slot *s = &ways[c->next[i]];
    loom_status st = rt_tma_encode(&c->specs[i], info, base, s->desc, err, errlen);
    if (st == LOOM_OK) {
        s->base = base;
        s->shape = info->shape;
        s->valid = true;
        c->next[i] = (c->next[i] + 1) % TMA_CACHE_WAYS;
        memcpy(desc, s->desc, RT_TMA_DESC_BYTES);
    } else {
        s->valid = false;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}
