/*
 * fuzz_gen.h -- a kernel built from fuzz bytes, for fuzz_builder.c and fuzz_codegen.c.
 *
 * The bytes are read as a program of builder calls: a kernel name and warp count, a few
 * arguments (tensors of any dtype, rank and dims, strides included, and scalars), then a
 * sequence of ops, each choosing its operands from the values made so far (or LOOM_NONE,
 * or a handle that names nothing), its shapes from a table that holds zero, negative and
 * huge dims, its dtypes from every dtype and a few that do not exist, and opening and
 * closing for/if/task regions.  Anything goes to the builder: a mistake is the builder's to
 * record, never a crash.
 *
 * The generator also keeps what a run needs to stay short: for loops get constant trip
 * counts unless their bounds come from the pool (fg.unbounded), and fg.work estimates the
 * elements the interpreter touches, so a harness runs only kernels that finish quickly.
 */
#ifndef LOOM_FUZZ_GEN_H
#define LOOM_FUZZ_GEN_H

#include "loom.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct fz {
    const uint8_t *p;
    size_t n, i;
} fz;

static inline unsigned fz_u8(fz *f) { return f->i < f->n ? f->p[f->i++] : 0; }
static inline bool fz_done(const fz *f) { return f->i >= f->n; }
static inline unsigned fz_pick(fz *f, unsigned n) { return n ? fz_u8(f) % n : 0; }

#define FG_MAXVALS 256
#define FG_MAXARGS 8
#define FG_MAXDEPTH 6

typedef enum { FG_FOR, FG_IF_THEN, FG_IF_ELSE, FG_TASK } fg_kind;

typedef struct fg_region {
    fg_kind kind;
    loom_region_op op;
    int n;        /* carried values or results */
    int64_t trip; /* for: trip count when constant */
    int nvals;    /* the pool's size when the region opened (its values go out of scope) */
} fg_region;

typedef struct fg {
    fz f;
    loom_kernel *k;
    loom_val vals[FG_MAXVALS];
    int nvals;
    loom_val tensors[FG_MAXARGS];
    int ntensors;
    fg_region reg[FG_MAXDEPTH];
    int depth;
    double mult;    /* product of the open loops' trip counts */
    double work;    /* elements the interpreter would touch, roughly */
    bool unbounded; /* a loop whose trip count is not a small constant */
    bool hopper;    /* mbarriers, tasks, flags, clusters: can deadlock (reported, not hung) */
} fg;

/* Dims: mostly small, some that every rule must refuse. */
static const int64_t fg_dims[] = {1, 2, 4, 8, 16, 32, 64, 3, 5, 128, 256, 0, -1, 1 << 20, (1 << 20) + 1,
                                  INT64_MAX, INT64_MIN, (int64_t)1 << 40, 7, 2};
static const char *const fg_names[] = {"a", "x", "", "%s%n%d", "out", "name with spaces",
                                       "a_rather_long_name_that_keeps_going_and_going_and_going_past_"
                                       "the_width_that_a_printer_would_usually_give_a_name_in_one_"
                                       "column_of_its_output_and_then_some_more_just_to_be_sure_xx",
                                       "\xff\xfe", NULL};

static inline int64_t fg_dim(fg *g) { return fg_dims[fz_pick(&g->f, sizeof fg_dims / sizeof fg_dims[0])]; }

static inline loom_shape fg_shape(fg *g)
{
    unsigned r = fz_u8(&g->f);
    loom_shape s = {0, {0}};
    /* mostly ranks 0..2, sometimes 3, 4, and one that is not a rank */
    s.rank = r < 40 ? 0 : r < 120 ? 1 : r < 210 ? 2 : r < 240 ? 3 : r < 250 ? 4 : r < 253 ? 5 : -1;
    for (int i = 0; i < LOOM_MAX_RANK; i++)
        s.dim[i] = i < s.rank ? fg_dim(g) : 0;
    return s;
}

static inline loom_dtype fg_dtype(fg *g)
{
    unsigned d = fz_u8(&g->f);
    return d < 250 ? (loom_dtype)(d % LOOM_DTYPE_COUNT) : (loom_dtype)(d % 4 == 0 ? -1 : LOOM_DTYPE_COUNT + (int)(d % 3));
}

static inline double fg_numel(fg *g, loom_val v)
{
    loom_shape s = loom_val_shape(g->k, v);
    double n = 1;
    for (int i = 0; i < s.rank && i < LOOM_MAX_RANK; i++)
        n *= s.dim[i] > 0 ? (double)s.dim[i] : 1;
    return n;
}

static inline void fg_push(fg *g, loom_val v)
{
    if (v == LOOM_NONE || g->nvals == FG_MAXVALS)
        return;
    g->vals[g->nvals++] = v;
    g->work += fg_numel(g, v) * g->mult;
}

/* An operand: a value of the pool, LOOM_NONE, or a handle that may name nothing. */
static inline loom_val fg_val(fg *g)
{
    unsigned b = fz_u8(&g->f);
    if (b == 255 || g->nvals == 0)
        return LOOM_NONE;
    if (b == 254)
        return (loom_val)(fz_u8(&g->f) | fz_u8(&g->f) << 8);
    return g->vals[g->nvals - 1 - (int)(b % (unsigned)g->nvals)]; /* recent values first */
}

static inline loom_val fg_tensor(fg *g)
{
    unsigned b = fz_u8(&g->f);
    if (b == 255 || g->ntensors == 0)
        return fg_val(g);
    return g->tensors[b % (unsigned)g->ntensors];
}

static inline loom_val fg_const(fg *g, loom_dtype dt, int64_t v)
{
    loom_val c = loom_const_i(g->k, dt, v);
    fg_push(g, c);
    return c;
}

/* An i32 scalar offset: small constants mostly, else anything in the pool. */
static inline loom_val fg_offset(fg *g)
{
    unsigned b = fz_u8(&g->f);
    if (b < 160)
        return fg_const(g, LOOM_I32, b % 5);
    if (b < 170)
        return fg_const(g, b & 1 ? LOOM_I64 : LOOM_I32, b & 2 ? -1 : INT32_MAX);
    return fg_val(g);
}

static inline void fg_offsets(fg *g, loom_val offs[LOOM_MAX_RANK + 1])
{
    for (int i = 0; i < LOOM_MAX_RANK + 1; i++)
        offs[i] = fg_offset(g);
}

static inline void fg_open(fg *g, fg_kind kind, loom_region_op op, int n, int64_t trip)
{
    if (loom_region_is_none(op) || g->depth == FG_MAXDEPTH)
        return;
    g->reg[g->depth++] = (fg_region){kind, op, n, trip, g->nvals};
    if (kind == FG_FOR)
        g->mult *= (double)(trip > 0 ? trip : 1);
}

/* Close the innermost region (an if's then-branch becomes its else-branch). */
static inline void fg_close(fg *g)
{
    if (g->depth == 0)
        return;
    fg_region *r = &g->reg[g->depth - 1];
    loom_val ys[8];
    for (int i = 0; i < 8; i++)
        ys[i] = fg_val(g);
    int n = r->n;
    if (fz_u8(&g->f) == 7) /* a wrong count now and then */
        n = (int)fz_pick(&g->f, 5) - 1;
    switch (r->kind) {
    case FG_IF_THEN:
        loom_else(g->k, r->op, n, ys);
        r->kind = FG_IF_ELSE;
        return;
    case FG_IF_ELSE:
        loom_if_end(g->k, r->op, n, ys);
        break;
    case FG_FOR:
        loom_for_end(g->k, r->op, n, ys);
        g->mult /= (double)(r->trip > 0 ? r->trip : 1);
        break;
    case FG_TASK:
        loom_task_end(g->k, r->op);
        break;
    }
    g->depth--;
    /* the values made inside go out of scope; keep a few to test the scope checks */
    if (fz_u8(&g->f) < 200)
        g->nvals = r->nvals;
    fg_region done = *r;
    for (int i = 0; i < done.n && i < 4; i++)
        fg_push(g, done.kind == FG_FOR ? loom_for_result(g->k, done.op, i) : loom_if_result(g->k, done.op, i));
}

static inline void fg_args(fg *g)
{
    int nargs = (int)fz_pick(&g->f, FG_MAXARGS + 1);
    static const char *const distinct[FG_MAXARGS] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"};
    for (int i = 0; i < nargs; i++) {
        unsigned nb = fz_u8(&g->f); /* mostly a name of its own; else one that may clash or be odd */
        const char *name = nb < 192 ? distinct[i] : fg_names[nb % (sizeof fg_names / sizeof fg_names[0])];
        unsigned kind = fz_u8(&g->f);
        if (kind < 200) {
            loom_shape s = fg_shape(g);
            if (s.rank == 0 && kind & 1)
                s = (loom_shape){1, {fg_dim(g)}};
            int64_t strides[LOOM_MAX_RANK];
            const int64_t *st = NULL;
            if (kind < 30) { /* strided, some strides odd */
                for (int d = 0; d < LOOM_MAX_RANK; d++)
                    strides[d] = fg_dim(g);
                st = strides;
            }
            loom_access acc = (loom_access)(1 + fz_pick(&g->f, 3));
            if (kind == 199)
                acc = (loom_access)0;
            loom_val t = loom_arg_tensor_strided(g->k, name, fg_dtype(g), s, st, acc);
            if (t && g->ntensors < FG_MAXARGS)
                g->tensors[g->ntensors++] = t;
        } else {
            fg_push(g, loom_arg_scalar(g->k, name, fg_dtype(g)));
        }
    }
}

/* One builder call. */
static inline void fg_op(fg *g)
{
    loom_kernel *k = g->k;
    fz *f = &g->f;
    loom_val offs[LOOM_MAX_RANK + 1], a, b, c;
    unsigned op = fz_u8(f);
    switch (op % 48) {
    case 0: fg_push(g, loom_program_id(k, (int)fz_pick(f, 4))); break;
    case 1: fg_push(g, loom_num_programs(k, (int)fz_pick(f, 4) - (op > 200))); break;
    case 2: {
        loom_dtype dt = fg_dtype(g);
        fg_push(g, op & 1 ? loom_const_f(k, dt, (double)(int8_t)fz_u8(f) / 4.0)
                          : loom_const_i(k, dt, (int64_t)(int8_t)fz_u8(f)));
        break;
    }
    case 3: fg_push(g, loom_arange(k, (int64_t)(int8_t)fz_u8(f), fg_dim(g))); break;
    case 4: a = fg_val(g); fg_push(g, loom_splat(k, a, fg_shape(g))); break;
    case 5: a = fg_val(g); fg_push(g, loom_broadcast(k, a, fg_shape(g))); break;
    case 6: fg_push(g, loom_expand_dims(k, fg_val(g), (int)fz_pick(f, 7) - 1)); break;
    case 7: fg_push(g, loom_trans(k, fg_val(g))); break;
    case 8: a = fg_val(g); fg_push(g, loom_add(k, a, fg_val(g))); break;
    case 9: a = fg_val(g); fg_push(g, loom_sub(k, a, fg_val(g))); break;
    case 10: a = fg_val(g); fg_push(g, loom_mul(k, a, fg_val(g))); break;
    case 11: a = fg_val(g); fg_push(g, loom_div(k, a, fg_val(g))); break;
    case 12: a = fg_val(g); fg_push(g, loom_rem(k, a, fg_val(g))); break;
    case 13: a = fg_val(g); fg_push(g, op & 1 ? loom_min(k, a, fg_val(g)) : loom_max(k, a, fg_val(g))); break;
    case 14: a = fg_val(g); fg_push(g, op & 1 ? loom_and(k, a, fg_val(g)) : loom_or(k, a, fg_val(g))); break;
    case 15: a = fg_val(g); b = fg_val(g); fg_push(g, loom_fma(k, a, b, fg_val(g))); break;
    case 16:
        a = fg_val(g);
        switch (fz_pick(f, 6)) {
        case 0: fg_push(g, loom_neg(k, a)); break;
        case 1: fg_push(g, loom_abs(k, a)); break;
        case 2: fg_push(g, loom_exp2(k, a)); break;
        case 3: fg_push(g, loom_log2(k, a)); break;
        case 4: fg_push(g, loom_rsqrt(k, a)); break;
        default: fg_push(g, loom_not(k, a)); break;
        }
        break;
    case 17: a = fg_val(g); fg_push(g, loom_cmp(k, (loom_cmp_pred)fz_pick(f, 7), a, fg_val(g))); break;
    case 18: a = fg_val(g); b = fg_val(g); fg_push(g, loom_select(k, a, b, fg_val(g))); break;
    case 19: a = fg_val(g); fg_push(g, loom_cast(k, a, fg_dtype(g))); break;
    case 20: {
        a = fg_val(g);
        int axis = (int)fz_pick(f, 6) - 1;
        fg_push(g, op & 1 ? loom_reduce_sum(k, a, axis) : op & 2 ? loom_reduce_max(k, a, axis) : loom_reduce_min(k, a, axis));
        break;
    }
    case 21: {
        a = fg_val(g);
        b = fg_val(g);
        c = fg_val(g);
        loom_val d = loom_dot(k, a, b, c);
        g->work += fg_numel(g, a) * fg_numel(g, b) * g->mult; /* M*K*N at most */
        fg_push(g, d);
        break;
    }
    case 22: case 23: {
        a = fg_tensor(g);
        fg_offsets(g, offs);
        loom_shape s = fg_shape(g);
        loom_val m = fz_u8(f) < 200 ? LOOM_NONE : fg_val(g);
        fg_push(g, loom_load(k, a, offs, s, m, (double)(int8_t)fz_u8(f)));
        break;
    }
    case 24: a = fg_tensor(g); fg_offsets(g, offs); fg_push(g, loom_load_scalar(k, a, offs)); break;
    case 25: {
        a = fg_tensor(g);
        b = fg_val(g);
        fg_offsets(g, offs);
        fg_push(g, loom_load_rows(k, a, b, offs, fg_shape(g), 0.0));
        break;
    }
    case 26: case 27: {
        a = fg_tensor(g);
        b = fg_val(g);
        fg_offsets(g, offs);
        loom_store(k, a, offs, b, fz_u8(f) < 200 ? LOOM_NONE : fg_val(g));
        break;
    }
    case 28: case 29: { /* for: constant bounds, or anything from the pool */
        loom_val init[8];
        int n = (int)fz_pick(f, 4);
        for (int i = 0; i < 8; i++)
            init[i] = fg_val(g);
        loom_val lo, hi, st;
        int64_t trip = 1;
        if (op % 48 == 28 || fz_u8(f) < 220) {
            int64_t l = (int64_t)fz_pick(f, 3), h = (int64_t)fz_pick(f, 6), s = 1 + (int64_t)fz_pick(f, 2);
            lo = fg_const(g, LOOM_I32, l);
            hi = fg_const(g, LOOM_I32, h);
            st = fg_const(g, fz_u8(f) < 250 ? LOOM_I32 : LOOM_I64, s);
            trip = h > l ? (h - l + s - 1) / s : 0;
        } else {
            lo = fg_val(g);
            hi = fg_val(g);
            st = fg_val(g);
            g->unbounded = true;
        }
        if (fz_u8(f) == 3)
            n = (int)fz_pick(f, 3) - 2; /* a negative count */
        loom_region_op r = loom_for_begin(k, lo, hi, st, n, init);
        fg_open(g, FG_FOR, r, n, trip);
        if (!loom_region_is_none(r)) {
            fg_push(g, loom_for_iv(k, r));
            for (int i = 0; i < n && i < 4; i++)
                fg_push(g, loom_for_arg(k, r, i));
        }
        break;
    }
    case 30: {
        a = fg_val(g);
        int n = (int)fz_pick(f, 3);
        fg_open(g, FG_IF_THEN, loom_if_begin(k, a, n), n, 1);
        break;
    }
    case 31: case 32: fg_close(g); break;
    case 33: { /* shared memory */
        loom_shape s = fg_shape(g);
        static const int sw[] = {0, 32, 64, 128, 16};
        fg_push(g, loom_smem_alloc(k, fg_dtype(g), s, (int)fz_pick(f, 5) - 1 + 1, (loom_swizzle)sw[fz_pick(f, 5)]));
        break;
    }
    case 34: a = fg_val(g); fg_push(g, loom_smem_slot(k, a, fg_val(g))); break;
    case 35: fg_push(g, op & 1 ? loom_smem_trans(k, fg_val(g)) : loom_smem_load(k, fg_val(g))); break;
    case 36: a = fg_val(g); loom_smem_store(k, a, fg_val(g)); break;
    case 37: {
        a = fg_val(g);
        int dim = (int)fz_pick(f, 3);
        fg_push(g, loom_smem_part(k, a, dim, fg_dim(g), fg_dim(g)));
        break;
    }
    case 38: /* mbarriers */
        g->hopper = true;
        switch (fz_pick(f, 4)) {
        case 0: fg_push(g, loom_mbar_alloc(k, (int)fz_pick(f, 5) - 1 + 1, (int)fz_pick(f, 4))); break;
        case 1: a = fg_val(g); loom_mbar_arrive(k, a, fg_val(g)); break;
        case 2: a = fg_val(g); b = fg_val(g); loom_mbar_wait(k, a, b, fg_val(g)); break;
        default: a = fg_val(g); b = fg_val(g); loom_mbar_expect(k, a, b, fg_dim(g)); break;
        }
        break;
    case 39:
        a = fg_val(g);
        fg_push(g, op & 1 ? loom_ring_slot(k, a, (int)fz_pick(f, 5) - 1) : loom_ring_phase(k, a, (int)fz_pick(f, 5) - 1));
        break;
    case 40:
        g->hopper = true;
        if (op & 1)
            loom_named_barrier(k, (int)fz_pick(f, 10) - 1, 32 * (int)fz_pick(f, 5));
        else
            loom_fence_async(k);
        break;
    case 41: { /* tasks */
        g->hopper = true;
        static const int regs[] = {0, 24, 40, 232, 256, 7, 512};
        loom_region_op r = loom_task_begin(k, (int)fz_pick(f, 9), regs[fz_pick(f, 7)], 1 + (int)fz_pick(f, 3));
        fg_open(g, FG_TASK, r, 0, 1);
        if (!loom_region_is_none(r) && fz_u8(f) < 128)
            fg_push(g, loom_task_replica(k));
        break;
    }
    case 42: { /* TMA */
        g->hopper = true;
        a = fg_tensor(g);
        fg_offsets(g, offs);
        b = fg_val(g);
        if (op & 1) {
            c = fg_val(g);
            loom_tma_load(k, a, offs, b, c, fg_val(g));
        } else {
            loom_tma_store(k, a, offs, b);
            loom_tma_store_wait(k, (int)fz_pick(f, 3) - 1);
        }
        break;
    }
    case 43: { /* wgmma */
        g->hopper = true;
        a = fg_val(g);
        b = fg_val(g);
        c = fg_val(g);
        fg_push(g, loom_wgmma(k, a, b, c));
        loom_wgmma_commit(k);
        loom_val accs[4] = {fg_val(g), fg_val(g), fg_val(g), fg_val(g)};
        int n = (int)fz_pick(f, 3);
        loom_region_op w = loom_wgmma_wait(k, (int)fz_pick(f, 3) - 1, n, accs);
        for (int i = 0; !loom_region_is_none(w) && i < n; i++)
            fg_push(g, loom_wgmma_result(k, w, i));
        break;
    }
    case 44: { /* flags and atomics */
        g->hopper = true;
        a = fg_tensor(g);
        fg_offsets(g, offs);
        b = fg_val(g);
        switch (fz_pick(f, 3)) {
        case 0: loom_flag_add(k, a, offs, b); break;
        case 1: loom_flag_wait(k, a, offs, b); break;
        default: fg_push(g, loom_atomic_add(k, a, offs, b)); break;
        }
        break;
    }
    case 45: /* clusters */
        g->hopper = true;
        if (op & 1)
            loom_kernel_set_cluster(k, 1 << fz_pick(f, 5));
        else
            fg_push(g, loom_cluster_rank(k));
        break;
    case 46: {
        g->hopper = true;
        a = fg_tensor(g);
        fg_offsets(g, offs);
        b = fg_val(g);
        c = fg_val(g);
        switch (fz_pick(f, 3)) {
        case 0: loom_tma_load_multicast(k, a, offs, b, c, fg_val(g)); break;
        case 1: loom_mbar_arrive_cluster(k, a, b); break;
        default: loom_smem_store_cluster(k, b, c, fg_val(g), fg_val(g)); break;
        }
        break;
    }
    case 47: { /* a long chain (up to 2041 ops): x = x op y, or x = x op x (each value used twice) */
        a = fg_val(g);
        bool reuse = fz_pick(f, 2);
        b = reuse ? a : fg_val(g);
        unsigned kind = fz_pick(f, 4);
        int n = 1 + 8 * (int)fz_u8(f);
        for (int i = 0; i < n; i++) {
            loom_val y = reuse ? a : b;
            a = kind == 0 ? loom_add(k, a, y) : kind == 1 ? loom_mul(k, a, y) : kind == 2 ? loom_max(k, a, y) : loom_neg(k, a);
        }
        fg_push(g, a);
        break;
    }
    default: /* a small constant of a common type, the usual offset */
        fg_const(g, op & 1 ? LOOM_I32 : LOOM_F32, (int64_t)fz_pick(f, 8));
        break;
    }
}

/* Build the kernel the bytes describe; NULL only when out of memory. */
static inline loom_kernel *fg_build(fg *g, const uint8_t *data, size_t size)
{
    memset(g, 0, sizeof *g);
    g->f = (fz){data, size, 0};
    g->mult = 1;
    const char *name = fg_names[fz_pick(&g->f, sizeof fg_names / sizeof fg_names[0])];
    unsigned w = fz_u8(&g->f);
    int warps = w < 240 ? 1 << (w % 4) : (int)w - 250; /* 1, 2, 4, 8 or -10..5 */
    g->k = loom_kernel_create(name, warps);
    if (!g->k)
        return NULL;
    fg_args(g);
    for (int ops = 0; ops < 64 && !fz_done(&g->f); ops++)
        fg_op(g);
    while (g->depth > 0 && fz_u8(&g->f) != 0xee) /* usually closes what is open */
        fg_close(g);
    return g->k;
}

#endif /* LOOM_FUZZ_GEN_H */
