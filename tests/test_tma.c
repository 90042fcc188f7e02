/*
 * test_tma.c -- TMA descriptors: every check of runtime/tma.c and its message (no GPU
 * needed), the TMA list in the module cache's file format, and on a Hopper GPU real TMA
 * copies through descriptors loom encoded.
 *
 * The GPU tests do not need loom's code generator: a hand-written PTX kernel takes a
 * descriptor as a grid-constant parameter, initializes an mbarrier, issues one
 * cp.async.bulk.tensor copy of a box into shared memory (expect-tx + complete-tx), waits
 * on the barrier's phase and copies the shared tile out byte for byte.  The host computes
 * the same tile from the tensor (zeros outside it, 16-byte chunks swizzled) and compares.
 * The launch plumbing (descriptors appended after a loom kernel's parameters, encoded
 * once per buffer, the list restored from the disk cache) is tested by putting that PTX
 * in the disk cache under a loom kernel's key with a TMA list, as a warm start finds it.
 *
 * Criterion runs each test in its own process, so tests may set environment variables.
 */
#include "gpu.h"
#include "module_cache.h"
#include "tma.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

/* A tensor argument described by hand; strides NULL: row-major contiguous. */
static loom_arg_info tensor(const char *name, loom_dtype dt, loom_shape shape, const int64_t *strides)
{
    loom_arg_info a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.is_tensor = 1;
    a.dtype = dt;
    a.shape = shape;
    a.access = LOOM_IN;
    int64_t st = 1;
    for (int d = shape.rank - 1; d >= 0; d--) {
        a.strides[d] = strides ? strides[d] : st;
        st *= shape.dim[d];
    }
    return a;
}

static rt_tma_spec spec(int arg, int rank, const int64_t *box, int swizzle)
{
    rt_tma_spec s;
    memset(&s, 0, sizeof s);
    s.arg = arg;
    s.rank = rank;
    for (int d = 0; d < rank; d++)
        s.box[d] = box[d];
    s.swizzle = swizzle;
    return s;
}

/* rt_tma_encode must refuse with LOOM_ERR_INVALID and a message holding every fragment. */
static void expect_refused(const rt_tma_spec *s, const loom_arg_info *a, uint64_t base, int nfrag, ...)
{
    _Alignas(64) unsigned char desc[128];
    char err[512] = "";
    loom_status st = rt_tma_encode(s, a, base, desc, err, sizeof err);
    cr_assert_eq(st, LOOM_ERR_INVALID, "accepted (%s): %s", loom_status_name(st), err);
    va_list ap;
    va_start(ap, nfrag);
    for (int i = 0; i < nfrag; i++) {
        const char *frag = va_arg(ap, const char *);
        cr_expect(strstr(err, frag), "message lacks '%s': %s", frag, err);
    }
    va_end(ap);
}

/* ---------------------------------------------------------------- plans (no GPU) */

Test(tma, plan_reorders_dims_and_strides_for_the_driver)
{
    /* f16 [4, 10, 24] with padded rows: strides 640, 64, 1 elements */
    loom_arg_info a = tensor("x", LOOM_F16, LOOM_SHAPE3(4, 10, 24), (int64_t[]){640, 64, 1});
    rt_tma_spec s = spec(3, 3, (int64_t[]){2, 8, 64}, 128);
    rt_tma_plan p;
    char err[256];
    cr_assert_eq(rt_tma_plan_make(&s, &a, 0x7f0000001000ull, &p, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(p.rank, 3);
    cr_expect_eq(p.base, 0x7f0000001000ull);
    cr_expect_eq(p.dtype, 6); /* CU_TENSOR_MAP_DATA_TYPE_FLOAT16 */
    uint64_t dims[3] = {24, 10, 4}, strides[2] = {128, 1280};
    uint32_t box[3] = {64, 8, 2};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(p.dims[i], dims[i], "dims[%d] = %llu", i, (unsigned long long)p.dims[i]);
        cr_expect_eq(p.box[i], box[i], "box[%d] = %u", i, p.box[i]);
        cr_expect_eq(p.elem_strides[i], 1);
    }
    for (int i = 0; i < 2; i++)
        cr_expect_eq(p.strides[i], strides[i], "strides[%d] = %llu", i, (unsigned long long)p.strides[i]);
    cr_expect_eq(p.swizzle, 3);      /* CU_TENSOR_MAP_SWIZZLE_128B */
    cr_expect_eq(p.interleave, 0);   /* NONE */
    cr_expect_eq(p.l2_promotion, 3); /* L2_256B */
    cr_expect_eq(p.oob_fill, 0);     /* zeros */

    /* every dtype TMA can move, and each swizzle mode */
    struct { loom_dtype dt; int code; } dts[] = {{LOOM_BF16, 9}, {LOOM_F32, 7}, {LOOM_I32, 3}, {LOOM_I64, 5}};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        loom_arg_info b = tensor("y", dts[i].dt, LOOM_SHAPE2(16, 64), NULL);
        rt_tma_spec t = spec(0, 2, (int64_t[]){4, 8}, 0);
        cr_assert_eq(rt_tma_plan_make(&t, &b, 4096, &p, err, sizeof err), LOOM_OK, "%s", err);
        cr_expect_eq(p.dtype, dts[i].code, "%s", loom_dtype_name(dts[i].dt));
        cr_expect_eq(p.strides[0], 64 * loom_dtype_size(dts[i].dt));
    }
    int sw[4][2] = {{0, 0}, {32, 1}, {64, 2}, {128, 3}};
    for (int i = 0; i < 4; i++) {
        loom_arg_info b = tensor("y", LOOM_F32, LOOM_SHAPE2(16, 64), NULL);
        rt_tma_spec t = spec(0, 2, (int64_t[]){4, 8}, sw[i][0]); /* 32-byte rows */
        cr_assert_eq(rt_tma_plan_make(&t, &b, 4096, &p, err, sizeof err), LOOM_OK, "%s", err);
        cr_expect_eq(p.swizzle, sw[i][1]);
    }
    /* a 1-D tensor has no strides to pass */
    loom_arg_info v = tensor("v", LOOM_F32, LOOM_SHAPE1(1000), NULL);
    rt_tma_spec t1 = spec(0, 1, (int64_t[]){256}, 0);
    cr_assert_eq(rt_tma_plan_make(&t1, &v, 4096, &p, err, sizeof err), LOOM_OK, "%s", err);
    cr_expect_eq(p.rank, 1);
    cr_expect_eq(p.dims[0], 1000);
    cr_expect_eq(p.box[0], 256);
}

Test(tma, every_bad_input_is_refused_with_its_reason)
{
    loom_arg_info a = tensor("A", LOOM_F16, LOOM_SHAPE2(128, 64), NULL);
    rt_tma_spec s = spec(2, 2, (int64_t[]){64, 64}, 128);
    rt_tma_plan p;
    char err[256];
    cr_assert_eq(rt_tma_plan_make(&s, &a, 4096, &p, err, sizeof err), LOOM_OK, "%s", err);

    expect_refused(&s, &a, 4096 + 8, 3, "argument 2 ('A')", "0x1008", "not 16-byte aligned");

    loom_arg_info rows24 = tensor("A", LOOM_F16, LOOM_SHAPE2(8, 12), NULL); /* 24-byte rows */
    rt_tma_spec s8 = spec(2, 2, (int64_t[]){8, 8}, 0);
    expect_refused(&s8, &rows24, 4096, 3, "argument 2 ('A')", "stride of dim 0 is 24 bytes",
                   "not a multiple of 16");

    rt_tma_spec big = spec(2, 2, (int64_t[]){300, 64}, 128);
    expect_refused(&big, &a, 4096, 2, "box dim 0 is 300", "1 to 256");
    rt_tma_spec zero = spec(2, 2, (int64_t[]){0, 64}, 128);
    expect_refused(&zero, &a, 4096, 1, "box dim 0 is 0");

    rt_tma_spec wide = spec(2, 2, (int64_t[]){8, 128}, 128); /* 256-byte rows */
    expect_refused(&wide, &a, 4096, 2, "innermost dim is 256 bytes", "more than the 128-byte swizzle span");
    rt_tma_spec wide64 = spec(2, 2, (int64_t[]){8, 64}, 64);
    expect_refused(&wide64, &a, 4096, 1, "more than the 64-byte swizzle span");
    rt_tma_spec narrow = spec(2, 2, (int64_t[]){8, 4}, 0); /* 8-byte rows */
    expect_refused(&narrow, &a, 4096, 2, "innermost dim is 8 bytes", "not a multiple of 16");

    rt_tma_spec r0 = spec(2, 0, (int64_t[]){1}, 0);
    expect_refused(&r0, &a, 4096, 2, "rank 0 is out of range", "1 to 5");
    rt_tma_spec r6 = spec(2, 2, (int64_t[]){8, 64}, 0);
    r6.rank = 6;
    expect_refused(&r6, &a, 4096, 1, "rank 6 is out of range");
    rt_tma_spec r3 = spec(2, 3, (int64_t[]){1, 8, 64}, 0);
    expect_refused(&r3, &a, 4096, 1, "rank 3 but the tensor has rank 2");

    loom_arg_info bits = tensor("mask", LOOM_I1, LOOM_SHAPE2(64, 64), NULL);
    rt_tma_spec sb = spec(1, 2, (int64_t[]){8, 16}, 0);
    expect_refused(&sb, &bits, 4096, 2, "argument 1 ('mask')", "dtype i1 is not supported");
    loom_arg_info junk = a;
    junk.dtype = (loom_dtype)99;
    expect_refused(&s, &junk, 4096, 1, "is not supported");

    rt_tma_spec s16 = spec(2, 2, (int64_t[]){8, 8}, 16);
    expect_refused(&s16, &a, 4096, 1, "swizzle 16 is not one of 0, 32, 64, 128");

    loom_arg_info scalar = a;
    scalar.is_tensor = 0;
    expect_refused(&s, &scalar, 4096, 1, "is a scalar, not a tensor");

    loom_arg_info colmajor = tensor("A", LOOM_F16, LOOM_SHAPE2(128, 64), (int64_t[]){1, 128});
    expect_refused(&s, &colmajor, 4096, 2, "innermost dim (1) has stride 128", "contiguous");
    loom_arg_info bcast = tensor("A", LOOM_F16, LOOM_SHAPE2(128, 64), (int64_t[]){0, 1});
    expect_refused(&s, &bcast, 4096, 1, "dim 0 has stride 0");
    loom_arg_info huge = tensor("A", LOOM_F16, LOOM_SHAPE2(4, 64), (int64_t[]){(int64_t)1 << 40, 1});
    expect_refused(&s, &huge, 4096, 1, "less than 2^40");
    loom_arg_info empty = a;
    empty.shape.dim[0] = 0;
    expect_refused(&s, &empty, 4096, 1, "dim 0 has 0 elements");

    /* the checks come before the driver, so a machine without a GPU gets the same words */
    cr_assert_eq(rt_tma_plan_make(&s8, &rows24, 4096, &p, err, sizeof err), LOOM_ERR_INVALID);
    cr_expect(strstr(err, "not a multiple of 16"), "%s", err);
}

Test(tma, box_bytes_counts_the_whole_box)
{
    rt_tma_spec s = spec(0, 3, (int64_t[]){2, 8, 64}, 128);
    cr_expect_eq(rt_tma_box_bytes(&s, LOOM_F16), 2 * 8 * 64 * 2);
    cr_expect_eq(rt_tma_box_bytes(&s, LOOM_F32), 2 * 8 * 64 * 4);
    cr_expect_eq(rt_tma_box_bytes(&s, LOOM_I1), 0);
    s.box[1] = 0;
    cr_expect_eq(rt_tma_box_bytes(&s, LOOM_F16), 0);
}

/* ---------------------------------------------------------------- cache file (no GPU) */

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Re-seal a file image edited in place (payload and header checksums), as a writer of
 * another format or a buggy one would have written it. */
static void reseal(unsigned char *f, size_t n)
{
    put_u64(f + 40, mc_hash64(f + MC_HEADER_BYTES, n - MC_HEADER_BYTES));
    put_u64(f + 56, mc_hash64(f, 56));
}

Test(tma, cache_file_keeps_the_tma_list)
{
    mc_key k;
    mc_key_make("ir", "sm_90a", 4, "b", &k);
    mc_meta m;
    memset(&m, 0, sizeof m);
    m.smem_bytes = 200 * 1024;
    m.ntma = 3;
    m.tma[0] = spec(0, 2, (int64_t[]){64, 64}, 128);
    m.tma[1] = spec(1, 3, (int64_t[]){1, 64, 256}, 0);
    m.tma[2] = spec(5, 5, (int64_t[]){1, 2, 3, 4, 16}, 32);
    unsigned char cubin[777];
    for (size_t i = 0; i < sizeof cubin; i++)
        cubin[i] = (unsigned char)(i * 7 + 1);
    void *img;
    size_t n;
    cr_assert_eq(mc_encode(&k, cubin, sizeof cubin, &m, &img, &n), LOOM_OK);
    cr_assert_eq(n, MC_HEADER_BYTES + 4 + 3 * MC_TMA_RECORD + sizeof cubin);

    const void *c;
    size_t cn;
    mc_meta back;
    char why[128];
    cr_assert(mc_decode(&k, img, n, &c, &cn, &back, why, sizeof why), "%s", why);
    cr_assert_eq(cn, sizeof cubin);
    cr_assert_eq(memcmp(c, cubin, cn), 0);
    cr_assert_eq(back.smem_bytes, m.smem_bytes);
    cr_assert_eq(back.ntma, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(back.tma[i].arg, m.tma[i].arg);
        cr_expect_eq(back.tma[i].rank, m.tma[i].rank);
        cr_expect_eq(back.tma[i].swizzle, m.tma[i].swizzle);
        for (int d = 0; d < m.tma[i].rank; d++)
            cr_expect_eq(back.tma[i].box[d], m.tma[i].box[d], "spec %d box %d", i, d);
    }

    /* a record no code generator writes (swizzle 48), sealed as if valid, is refused */
    unsigned char *f = img;
    f[MC_HEADER_BYTES + 4 + MC_TMA_RECORD + 48] = 48;
    reseal(f, n);
    cr_assert_not(mc_decode(&k, img, n, &c, &cn, &back, why, sizeof why));
    cr_expect(strstr(why, "TMA"), "%s", why);
    /* so is a count beyond the limit */
    f[MC_HEADER_BYTES + 4 + MC_TMA_RECORD + 48] = 0;
    f[MC_HEADER_BYTES] = RT_TMA_MAX_SPECS + 1;
    reseal(f, n);
    cr_assert_not(mc_decode(&k, img, n, &c, &cn, &back, why, sizeof why));
    cr_expect(strstr(why, "TMA descriptor count"), "%s", why);
    free(img);

    /* a format-1 file (no TMA list) is another format: rejected, then rebuilt */
    mc_meta none = {.smem_bytes = 0};
    cr_assert_eq(mc_encode(&k, cubin, sizeof cubin, &none, &img, &n), LOOM_OK);
    f = img;
    f[8] = 1;
    reseal(f, n);
    cr_assert_not(mc_decode(&k, img, n, &c, &cn, &back, why, sizeof why));
    cr_expect(strstr(why, "another format version"), "%s", why);
    free(img);

    /* the writer refuses a list the reader would refuse */
    m.tma[1].box[0] = 0;
    cr_assert_eq(mc_encode(&k, cubin, sizeof cubin, &m, &img, &n), LOOM_ERR_INVALID);
    m.tma[1].box[0] = 1;
    m.ntma = RT_TMA_MAX_SPECS + 1;
    cr_assert_eq(mc_encode(&k, cubin, sizeof cubin, &m, &img, &n), LOOM_ERR_INVALID);
}

/* ---------------------------------------------------------------- GPU: a TMA copy kernel */

#define TILE_BYTES 32768

/* PTX of kernel `entry`: params (u64 src [unused], u64 out, u32 bytes, u32 c0..c{rank-1}
 * (tensor coordinates, outermost first), the descriptor).  Thread 0 initializes an
 * mbarrier, expects `bytes` and issues one rank-D TMA copy of the box at (c0, ...) into a
 * 1024-byte aligned shared tile; every thread waits on phase 0 and the block copies the
 * first `bytes` bytes of the tile to out. */
static char *tma_copy_ptx(const char *entry, int rank)
{
    char params[1024] = "", loads[1024] = "", coords[256] = "";
    size_t pn = 0, ln = 0, cn = 0;
    for (int d = 0; d < rank; d++) {
        pn += (size_t)snprintf(params + pn, sizeof params - pn, "    .param .u32 %s_c%d,\n", entry, d);
        ln += (size_t)snprintf(loads + ln, sizeof loads - ln, "    ld.param.u32 %%rc%d, [%s_c%d];\n", d,
                               entry, d);
    }
    for (int d = rank - 1; d >= 0; d--) /* the instruction wants the innermost first */
        cn += (size_t)snprintf(coords + cn, sizeof coords - cn, "%s%%rc%d", d == rank - 1 ? "" : ", ", d);
    char *p = malloc(8192);
    cr_assert(p);
    snprintf(p, 8192,
             ".version 8.0\n"
             ".target sm_90a\n"
             ".address_size 64\n"
             "\n"
             ".visible .entry %s(\n"
             "    .param .u64 %s_src,\n"
             "    .param .u64 %s_out,\n"
             "    .param .u32 %s_bytes,\n"
             "%s"
             "    .param .align 64 .b8 %s_map[128]\n"
             ")\n"
             "{\n"
             "    .reg .pred %%p<4>;\n"
             "    .reg .b32 %%r<16>;\n"
             "    .reg .b32 %%rc<6>;\n"
             "    .reg .b64 %%rd<8>;\n"
             "    .shared .align 1024 .b8 tile[%d];\n"
             "    .shared .align 8 .b64 bar;\n"
             "\n"
             "    mov.u32 %%r0, %%tid.x;\n"
             "    setp.ne.u32 %%p0, %%r0, 0;\n"
             "    mov.u32 %%r1, bar;\n"
             "    mov.u32 %%r2, tile;\n"
             "    ld.param.u32 %%r3, [%s_bytes];\n"
             "    @%%p0 bra INIT_DONE;\n"
             "    mbarrier.init.shared::cta.b64 [%%r1], 1;\n"
             "    fence.mbarrier_init.release.cluster;\n"
             "INIT_DONE:\n"
             "    bar.sync 0;\n"
             "    @%%p0 bra WAIT;\n"
             "%s"
             "    mov.b64 %%rd1, %s_map;\n"
             "    cvta.param.u64 %%rd2, %%rd1;\n"
             "    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r1], %%r3;\n"
             "    cp.async.bulk.tensor.%dd.shared::cluster.global.mbarrier::complete_tx::bytes"
             " [%%r2], [%%rd2, {%s}], [%%r1];\n"
             "WAIT:\n"
             "    mbarrier.try_wait.parity.shared::cta.b64 %%p1, [%%r1], 0;\n"
             "    @!%%p1 bra WAIT;\n"
             "    ld.param.u64 %%rd3, [%s_out];\n"
             "    cvta.to.global.u64 %%rd3, %%rd3;\n"
             "    mov.u32 %%r4, %%ntid.x;\n"
             "    shr.u32 %%r5, %%r3, 2;\n"
             "    mov.u32 %%r6, %%r0;\n"
             "COPY:\n"
             "    setp.ge.u32 %%p2, %%r6, %%r5;\n"
             "    @%%p2 bra DONE;\n"
             "    shl.b32 %%r7, %%r6, 2;\n"
             "    add.u32 %%r8, %%r2, %%r7;\n"
             "    ld.shared.u32 %%r9, [%%r8];\n"
             "    cvt.u64.u32 %%rd4, %%r7;\n"
             "    add.u64 %%rd5, %%rd3, %%rd4;\n"
             "    st.global.u32 [%%rd5], %%r9;\n"
             "    add.u32 %%r6, %%r6, %%r4;\n"
             "    bra COPY;\n"
             "DONE:\n"
             "    ret;\n"
             "}\n",
             entry, entry, entry, entry, params, entry, TILE_BYTES, entry, loads, entry, rank, coords, entry);
    return p;
}

/* Where TMA puts byte o of the unswizzled box: the 16-byte chunk index (address bits 4..)
 * XOR the 128-byte row index (bits 7..), over span/16 chunks; span 0 is no swizzle.  For
 * 128-byte rows and span 128 that is chunk ^ (row % 8). */
static size_t swizzled(size_t o, int span)
{
    if (!span)
        return o;
    size_t mask = (size_t)span / 16 - 1;
    return o ^ (((o >> 7) & mask) << 4);
}

/* The tile TMA should bring: the box at coord (outermost first), row-major with the
 * innermost dim contiguous, zeros outside the tensor, chunks swizzled. */
static void expect_tile(const unsigned char *tensor, const loom_arg_info *a, const rt_tma_spec *s,
                        const int64_t *coord, unsigned char *out)
{
    size_t esz = loom_dtype_size(a->dtype);
    size_t count = (size_t)(rt_tma_box_bytes(s, a->dtype) / esz);
    memset(out, 0, count * esz);
    for (size_t li = 0; li < count; li++) {
        size_t rem = li;
        int64_t off = 0;
        int inside = 1;
        for (int d = s->rank - 1; d >= 0; d--) {
            int64_t i = (int64_t)(rem % (size_t)s->box[d]);
            rem /= (size_t)s->box[d];
            int64_t g = coord[d] + i;
            if (g < 0 || g >= a->shape.dim[d])
                inside = 0;
            off += g * a->strides[d];
        }
        for (size_t b = 0; b < esz; b++)
            out[swizzled(li * esz + b, s->swizzle)] = inside ? tensor[(size_t)off * esz + b] : 0;
    }
}

/* Host bytes of a tensor: random, no byte zero (so zero fill shows). */
static unsigned char *random_tensor(const loom_arg_info *a, unsigned seed)
{
    size_t n = a->min_bytes;
    unsigned char *p = malloc(n);
    cr_assert(p);
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x | 1);
    }
    return p;
}

/* The smallest buffer holding tensor a (what loom_arg_info's min_bytes says). */
static void set_min_bytes(loom_arg_info *a)
{
    int64_t last = 0;
    for (int d = 0; d < a->shape.rank; d++)
        last += (a->shape.dim[d] - 1) * a->strides[d];
    a->min_bytes = (size_t)(last + 1) * loom_dtype_size(a->dtype);
}

static rt_gpu *hopper_or_skip(void)
{
    rt_gpu *g = NULL;
    char err[512];
    if (rt_gpu_open(&g, err, sizeof err) != LOOM_OK)
        cr_skip_test("no GPU: %s", err);
    const rt_gpu_props *p = rt_gpu_properties(g);
    if (p->cc_major < 9) {
        char name[256];
        snprintf(name, sizeof name, "%s", p->name);
        rt_gpu_close(g);
        cr_skip_test("TMA needs compute capability 9.0; %s has %d.%d", name, p->cc_major, p->cc_minor);
    }
    return g;
}

typedef struct tma_rig {
    rt_gpu *g;
    rt_gpu_module *mods[RT_TMA_MAX_RANK + 1];
    uint64_t out;
} tma_rig;

/* Copy the box at coord of tensor a (device address src) with the PTX kernel and check
 * the tile against the host's expectation; returns the tile (malloc'ed).  The innermost
 * coordinate times the element size must be a multiple of 16 bytes (negative ones too):
 * Hopper faults with an illegal instruction otherwise (misaligned_inner_coordinate_faults
 * below pins that down). */
static unsigned char *copy_and_check(tma_rig *r, const loom_arg_info *a, const unsigned char *host,
                                     uint64_t src, const rt_tma_spec *s, const int64_t *coord,
                                     const char *what)
{
    char err[1024];
    if (!r->mods[s->rank]) {
        char entry[32];
        snprintf(entry, sizeof entry, "tma_copy_%dd", s->rank);
        char *ptx = tma_copy_ptx(entry, s->rank);
        cr_assert_eq(rt_gpu_module_load(r->g, ptx, strlen(ptx) + 1, true, entry, &r->mods[s->rank], err,
                                        sizeof err),
                     LOOM_OK, "%s", err);
        free(ptx);
    }
    _Alignas(64) unsigned char desc[128];
    cr_assert_eq(rt_tma_encode(s, a, src, desc, err, sizeof err), LOOM_OK, "%s: %s", what, err);
    uint32_t bytes = (uint32_t)rt_tma_box_bytes(s, a->dtype);
    cr_assert(bytes > 0 && bytes <= TILE_BYTES);
    cr_assert_eq(rt_gpu_memset8(r->g, r->out, 0xee, TILE_BYTES, err, sizeof err), LOOM_OK, "%s", err);
    int32_t c[RT_TMA_MAX_RANK];
    void *params[4 + RT_TMA_MAX_RANK];
    params[0] = &src;
    params[1] = &r->out;
    params[2] = &bytes;
    for (int d = 0; d < s->rank; d++) {
        c[d] = (int32_t)coord[d];
        params[3 + d] = &c[d];
    }
    params[3 + s->rank] = desc;
    char entry[32];
    snprintf(entry, sizeof entry, "tma_copy_%dd", s->rank);
    unsigned grid[3] = {1, 1, 1}, block[3] = {128, 1, 1};
    cr_assert_eq(rt_gpu_module_launch(r->g, r->mods[s->rank], entry, grid, block, 0, params, err, sizeof err),
                 LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_sync(r->g, err, sizeof err), LOOM_OK, "%s: %s", what, err);
    unsigned char *got = malloc(bytes), *want = malloc(bytes);
    cr_assert(got && want);
    cr_assert_eq(rt_gpu_dtoh(r->g, got, r->out, bytes, err, sizeof err), LOOM_OK, "%s", err);
    expect_tile(host, a, s, coord, want);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; i++)
        if (got[i] != want[i] && !bad++)
            first = i;
    cr_expect_eq(bad, 0, "%s: %zu of %u bytes differ; first at %zu: got 0x%02x, want 0x%02x", what, bad, bytes,
                 first, got[first], want[first]);
    free(want);
    return got;
}

/* A device copy of a random tensor. */
static uint64_t upload(tma_rig *r, const loom_arg_info *a, unsigned char **host, unsigned seed)
{
    char err[512];
    *host = random_tensor(a, seed);
    uint64_t d;
    cr_assert_eq(rt_gpu_alloc(r->g, a->min_bytes, &d, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_htod(r->g, d, *host, a->min_bytes, err, sizeof err), LOOM_OK, "%s", err);
    return d;
}

static void rig_open(tma_rig *r)
{
    memset(r, 0, sizeof *r);
    r->g = hopper_or_skip();
    char err[512];
    cr_assert_eq(rt_gpu_alloc(r->g, TILE_BYTES, &r->out, err, sizeof err), LOOM_OK, "%s", err);
}

static void rig_close(tma_rig *r)
{
    for (int i = 0; i <= RT_TMA_MAX_RANK; i++)
        rt_gpu_module_unload(r->g, r->mods[i]);
    rt_gpu_free(r->g, r->out);
    rt_gpu_close(r->g);
}

Test(tma_gpu, tile_2d_inside_and_at_the_edges)
{
    tma_rig r;
    rig_open(&r);
    loom_arg_info a = tensor("A", LOOM_F16, LOOM_SHAPE2(100, 200), NULL);
    set_min_bytes(&a);
    unsigned char *host;
    uint64_t d = upload(&r, &a, &host, 1);
    rt_tma_spec s = spec(0, 2, (int64_t[]){32, 64}, 0);
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){16, 64}, "2-D inside"));
    /* rows 80..111 and columns 160..223: the part past 100 x 200 is zero */
    unsigned char *t = copy_and_check(&r, &a, host, d, &s, (int64_t[]){80, 160}, "2-D bottom-right edge");
    cr_expect_eq(t[(31 * 64 + 63) * 2], 0, "the far corner is filled with zero");
    free(t);
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){-8, -16}, "2-D top-left edge (negative)"));
    free(host);
    rt_gpu_free(r.g, d);
    rig_close(&r);
}

Test(tma_gpu, swizzle_128b_is_chunk_xor_row)
{
    tma_rig r;
    rig_open(&r);
    loom_arg_info a = tensor("A", LOOM_BF16, LOOM_SHAPE2(100, 200), NULL);
    set_min_bytes(&a);
    unsigned char *host;
    uint64_t d = upload(&r, &a, &host, 2);
    rt_tma_spec s = spec(0, 2, (int64_t[]){32, 64}, 128); /* 128-byte rows */
    unsigned char *t = copy_and_check(&r, &a, host, d, &s, (int64_t[]){8, 64}, "128B swizzle inside");
    /* the pattern spelled out: row r's 16-byte chunk j lands at chunk j ^ (r % 8) */
    for (int row = 0; row < 32; row++)
        for (int j = 0; j < 8; j++) {
            const unsigned char *g = host + ((size_t)(8 + row) * 200 + 64 + (size_t)j * 8) * 2;
            cr_expect_eq(memcmp(t + row * 128 + ((j ^ (row % 8)) * 16), g, 16), 0, "row %d chunk %d", row, j);
        }
    free(t);
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){90, 168}, "128B swizzle at the edge"));
    /* the other spans on the same tensor: 64-byte and 32-byte rows */
    rt_tma_spec s64 = spec(0, 2, (int64_t[]){16, 32}, 64);
    free(copy_and_check(&r, &a, host, d, &s64, (int64_t[]){3, 40}, "64B swizzle"));
    rt_tma_spec s32 = spec(0, 2, (int64_t[]){16, 16}, 32);
    free(copy_and_check(&r, &a, host, d, &s32, (int64_t[]){5, 192}, "32B swizzle at the edge"));
    free(host);
    rt_gpu_free(r.g, d);
    rig_close(&r);
}

Test(tma_gpu, tile_3d_strided_and_4d)
{
    tma_rig r;
    rig_open(&r);
    /* f32 [4, 10, 12] with padded strides (rows of 20, planes of 200 elements) */
    loom_arg_info a = tensor("X", LOOM_F32, LOOM_SHAPE3(4, 10, 12), (int64_t[]){200, 20, 1});
    set_min_bytes(&a);
    unsigned char *host;
    uint64_t d = upload(&r, &a, &host, 3);
    rt_tma_spec s = spec(0, 3, (int64_t[]){2, 8, 8}, 0);
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){1, 1, 4}, "3-D inside"));
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){1, 5, 8}, "3-D edge in dims 1 and 2"));
    free(copy_and_check(&r, &a, host, d, &s, (int64_t[]){3, 0, 0}, "3-D edge in dim 0"));
    free(host);
    rt_gpu_free(r.g, d);
    /* i32 [3, 5, 7, 8] */
    loom_arg_info b = tensor("Y", LOOM_I32, (loom_shape){4, {3, 5, 7, 8}}, NULL);
    set_min_bytes(&b);
    d = upload(&r, &b, &host, 4);
    rt_tma_spec s4 = spec(0, 4, (int64_t[]){2, 2, 4, 4}, 0);
    free(copy_and_check(&r, &b, host, d, &s4, (int64_t[]){2, 4, 5, 4}, "4-D edge in dims 0..2"));
    free(copy_and_check(&r, &b, host, d, &s4, (int64_t[]){0, 1, 2, 0}, "4-D inside"));
    free(host);
    rt_gpu_free(r.g, d);
    rig_close(&r);
}

/* The hardware's rule on coordinates, which no descriptor check can enforce because
 * coordinates are run-time values: an innermost coordinate that is not a multiple of 16
 * bytes stops the kernel with an illegal instruction (a sticky error; Criterion gives
 * each test its own process, so the others do not see it).  The code generator or the
 * DSL's checks must rule such copies out. */
Test(tma_gpu, misaligned_inner_coordinate_faults)
{
    tma_rig r;
    rig_open(&r);
    loom_arg_info a = tensor("A", LOOM_F16, LOOM_SHAPE2(64, 64), NULL);
    set_min_bytes(&a);
    unsigned char *host;
    uint64_t d = upload(&r, &a, &host, 5);
    rt_tma_spec s = spec(0, 2, (int64_t[]){8, 8}, 0);
    char err[1024], *ptx = tma_copy_ptx("tma_copy_2d", 2);
    cr_assert_eq(rt_gpu_module_load(r.g, ptx, strlen(ptx) + 1, true, "tma_copy_2d", &r.mods[2], err, sizeof err),
                 LOOM_OK, "%s", err);
    free(ptx);
    _Alignas(64) unsigned char desc[128];
    cr_assert_eq(rt_tma_encode(&s, &a, d, desc, err, sizeof err), LOOM_OK, "%s", err);
    uint32_t bytes = 128;
    int32_t c0 = 0, c1 = 4; /* column 4 of f16: 8 bytes in */
    void *params[] = {&d, &r.out, &bytes, &c0, &c1, desc};
    unsigned grid[3] = {1, 1, 1}, block[3] = {128, 1, 1};
    cr_assert_eq(rt_gpu_module_launch(r.g, r.mods[2], "tma_copy_2d", grid, block, 0, params, err, sizeof err),
                 LOOM_OK, "%s", err);
    loom_status st = rt_gpu_sync(r.g, err, sizeof err);
    cr_expect_eq(st, LOOM_ERR_CUDA, "a copy at an 8-byte inner offset ran: %s", err);
    cr_expect(strstr(err, "ILLEGAL_INSTRUCTION"), "%s", err);
    free(host);
}

/* ---------------------------------------------------------------- GPU: loom launches */

/* A loom kernel whose arguments match tma_copy_ptx's parameters (src, out, bytes, c0, c1);
 * its body is empty: the PTX comes from the disk cache. */
static loom_kernel *inject_kernel(const char *name, loom_shape src_shape)
{
    loom_kernel *k = loom_kernel_create(name, 4);
    loom_arg_tensor(k, "src", LOOM_F16, src_shape, LOOM_IN);
    loom_arg_tensor(k, "out", LOOM_F16, LOOM_SHAPE1(TILE_BYTES / 2), LOOM_OUT);
    loom_arg_scalar(k, "bytes", LOOM_I32);
    loom_arg_scalar(k, "c0", LOOM_I32);
    loom_arg_scalar(k, "c1", LOOM_I32);
    cr_assert_eq(loom_verify(k), LOOM_OK, "%s", loom_kernel_errors(k));
    return k;
}

/* Put the TMA copy PTX in the disk cache under k's key, with one descriptor for arg 0. */
static void inject(rt_gpu *g, loom_kernel *k, const char *dir, const rt_tma_spec *s)
{
    mc_key key;
    mc_key_make(loom_print(k), rt_gpu_properties(g)->arch, loom_kernel_num_warps(k), mc_build_id(), &key);
    char *ptx = tma_copy_ptx(loom_kernel_name(k), 2);
    mc_meta m = {.smem_bytes = 0, .ntma = 1};
    m.tma[0] = *s;
    char err[512];
    /* the disk cache holds cubins only (a PTX image there is dropped and rebuilt) */
    void *cubin = NULL;
    size_t n = 0;
    loom_status st = rt_ptxas_compile(ptx, rt_gpu_properties(g)->arch, &cubin, &n, err, sizeof err);
    if (st != LOOM_OK)
        cr_skip_test("no ptxas to make the cubin to inject: %s", err);
    cr_assert_eq(mc_disk_store(dir, &key, cubin, n, &m, err, sizeof err), LOOM_OK, "%s", err);
    free(cubin);
    free(ptx);
}

static void launch_and_check(loom_runtime *rt, loom_kernel *k, loom_buffer *src, const unsigned char *host,
                             const loom_arg_info *a, loom_buffer *out, const rt_tma_spec *s, int c0, int c1)
{
    int32_t bytes = (int32_t)rt_tma_box_bytes(s, LOOM_F16);
    cr_assert_eq(loom_buffer_fill(out, 0xee), LOOM_OK);
    loom_arg args[5] = {LOOM_ARG_BUF(src), LOOM_ARG_BUF(out), LOOM_ARG_I32(bytes), LOOM_ARG_I32(c0),
                        LOOM_ARG_I32(c1)};
    int grid[3] = {1, 1, 1};
    cr_assert_eq(loom_launch(rt, k, grid, args, 5), LOOM_OK, "%s", loom_runtime_error(rt));
    unsigned char *got = malloc((size_t)bytes), *want = malloc((size_t)bytes);
    cr_assert(got && want);
    cr_assert_eq(loom_buffer_download(out, got, (size_t)bytes), LOOM_OK, "%s", loom_runtime_error(rt));
    expect_tile(host, a, s, (int64_t[]){c0, c1}, want);
    cr_expect_eq(memcmp(got, want, (size_t)bytes), 0, "tile at (%d, %d) differs", c0, c1);
    free(got);
    free(want);
}

Test(tma_gpu, launch_appends_descriptors_restored_from_the_disk_cache)
{
    rt_gpu *g = hopper_or_skip();
    char dir[] = "/tmp/loom_test_tma.XXXXXX";
    cr_assert(mkdtemp(dir));
    setenv("LOOM_CACHE_DIR", dir, 1);
    unsetenv("LOOM_CACHE");

    loom_shape shape = LOOM_SHAPE2(70, 96);
    loom_kernel *k = inject_kernel("tma_inject_copy", shape);
    rt_tma_spec s = spec(0, 2, (int64_t[]){32, 64}, 128);
    inject(g, k, dir, &s);
    /* a kernel whose tensor TMA cannot describe: rows of 12 f16 are 24 bytes */
    loom_kernel *kb = inject_kernel("tma_inject_bad", LOOM_SHAPE2(40, 12));
    rt_tma_spec sb = spec(0, 2, (int64_t[]){8, 8}, 0);
    inject(g, kb, dir, &sb);

    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert_eq(loom_runtime_status(rt), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_arg_info a;
    cr_assert(loom_kernel_arg_info(k, 0, &a));
    unsigned char *host1 = random_tensor(&a, 11), *host2 = random_tensor(&a, 12);
    loom_buffer *src1 = loom_buffer_create(rt, a.min_bytes), *src2 = loom_buffer_create(rt, a.min_bytes);
    loom_buffer *out = loom_buffer_create(rt, TILE_BYTES);
    cr_assert(src1 && src2 && out, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(src1, host1, a.min_bytes), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(src2, host2, a.min_bytes), LOOM_OK);

    rt_gpu_stats_reset();
    uint64_t n0 = rt_tma_encode_count();
    launch_and_check(rt, k, src1, host1, &a, out, &s, 10, 0);
    rt_gpu_stats st;
    rt_gpu_stats_get(&st);
    cr_expect_eq(st.result, RT_CACHE_DISK, "the kernel came from the disk cache (%s)", rt_cache_result_name(st.result));
    cr_expect_eq(st.misses, 0, "the code generator never ran");
    cr_expect_eq(rt_tma_encode_count(), n0 + 1, "one descriptor encoded");
    /* same buffer, another tile: the descriptor is reused */
    launch_and_check(rt, k, src1, host1, &a, out, &s, 50, 64);
    cr_expect_eq(rt_tma_encode_count(), n0 + 1, "a launch on the same buffer encodes nothing");
    /* another buffer: one more descriptor; then both are cached */
    launch_and_check(rt, k, src2, host2, &a, out, &s, 60, 40);
    cr_expect_eq(rt_tma_encode_count(), n0 + 2);
    launch_and_check(rt, k, src1, host1, &a, out, &s, 0, 32);
    launch_and_check(rt, k, src2, host2, &a, out, &s, 69, 88);
    cr_expect_eq(rt_tma_encode_count(), n0 + 2, "both buffers' descriptors are cached");

    /* a stride TMA cannot take is refused at launch, with no CUDA error and no crash */
    loom_arg_info ab;
    cr_assert(loom_kernel_arg_info(kb, 0, &ab));
    loom_buffer *bad = loom_buffer_create(rt, ab.min_bytes);
    cr_assert(bad);
    loom_arg args[5] = {LOOM_ARG_BUF(bad), LOOM_ARG_BUF(out), LOOM_ARG_I32(128), LOOM_ARG_I32(0), LOOM_ARG_I32(0)};
    int grid[3] = {1, 1, 1};
    cr_assert_eq(loom_launch(rt, kb, grid, args, 5), LOOM_ERR_INVALID);
    const char *msg = loom_runtime_error(rt);
    cr_expect(strstr(msg, "launch of 'tma_inject_bad'"), "%s", msg);
    cr_expect(strstr(msg, "argument 0 ('src')"), "%s", msg);
    cr_expect(strstr(msg, "24 bytes") && strstr(msg, "not a multiple of 16"), "%s", msg);
    /* and the runtime still works */
    launch_and_check(rt, k, src2, host2, &a, out, &s, 5, 8);

    loom_buffer_destroy(bad);
    loom_buffer_destroy(src1);
    loom_buffer_destroy(src2);
    loom_buffer_destroy(out);
    loom_runtime_destroy(rt);
    loom_kernel_destroy(k);
    loom_kernel_destroy(kb);
    free(host1);
    free(host2);
    rt_gpu_close(g);
    DIR *dd = opendir(dir);
    if (dd) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(dd)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(dd);
    }
    rmdir(dir);
}
