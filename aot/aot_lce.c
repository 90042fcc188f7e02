/*
 * aot_lce.c -- the IKBO linear compression as an operation, in the files `loomc aot
 * ikbo_lce` writes (aot/aot.c copies this text in after aot_rt.c).
 *
 * It runs the description loom's C API runs (templates/ikbo_lce.h, ik_stage), written out
 * by the generator as one aot_lce_plan per shape: the buffers the operation owns and how
 * the host weights fill them at prepare, and the kernels a run launches in order, each
 * argument taken from the caller's four buffers, an owned one, the flags' base or the
 * request's B, U (run-time dims) or the shape's M, each grid a rule over the request's B
 * and U (loom_grid_rule's).  The generator defines AOT_LCE_NBUF, AOT_LCE_CALLER,
 * AOT_LCE_FLAGS and the sources AOT_LCE_BASE, AOT_LCE_B, AOT_LCE_U, AOT_LCE_M from loom's
 * own enum before this text.
 */

typedef struct aot_lce_fill {
    int buf, weight; /* weight 0: w_user [M, Ku], 1: w_cand [M, Kc], into buf as [M, ld] at column col0 */
    int64_t ld, col0;
} aot_lce_fill;

/* grid[d] = mult[d] * cdiv(c[d] + per_b[d] * B + per_u[d] * U, div[d]), at most cap[d] (0: none) */
typedef struct aot_lce_rule {
    int64_t c[3], div[3], mult[3], cap[3], per_b[3], per_u[3];
} aot_lce_rule;

typedef struct aot_lce_step {
    int kernel;      /* into the file's kernel table */
    aot_lce_rule grid;
    int nargs;
    int arg[AOT_MAX_ARGS]; /* a buffer (0-3: the caller's e_user, e_cand, cand_to_user, out), or a scalar source */
} aot_lce_step;

typedef struct aot_lce_plan {
    int64_t M, Ku, Kc;
    int64_t B, U;                /* the maxima a run may ask for (the buffers' sizes are theirs) */
    size_t elem;                 /* bytes an element */
    size_t bytes[AOT_LCE_NBUF];  /* the owned buffers (0: unused) */
    int nfill;
    aot_lce_fill fill[2];
    int nsteps;
    aot_lce_step step[5];
    int64_t blocks_per_user;     /* stage 4: a launch adds U times this to the flags' counter (0: none) */
} aot_lce_plan;

struct aot_lce_op {
    const aot_lce_plan *plan;
    CUdeviceptr buf[AOT_LCE_NBUF];
    int64_t flag_base; /* the flags' counter after the last run */
};

static void aot_lce_destroy(struct aot_lce_op *op)
{
    if (!op)
        return;
    for (int b = AOT_LCE_CALLER; b < AOT_LCE_NBUF; b++)
        aot_free(op->buf[b]);
    free(op);
}

/* Allocate the owned buffers (zeroed) and upload the weights as the fills lay them out. */
static int aot_lce_prepare(const char *fn, const aot_lce_plan *pl, const void *w_user, const void *w_cand,
                           struct aot_lce_op **out)
{
    struct aot_lce_op *op = calloc(1, sizeof *op);
    if (!op)
        return aot_fail(AOT_ERR_NOMEM, "%s: out of host memory", fn);
    op->plan = pl;
    int st = AOT_OK;
    for (int b = AOT_LCE_CALLER; b < AOT_LCE_NBUF && st == AOT_OK; b++)
        if (pl->bytes[b] && (st = aot_alloc(&op->buf[b], pl->bytes[b], fn)) == AOT_OK)
            st = aot_zero(op->buf[b], pl->bytes[b], NULL, "a buffer of the operation");
    const void *w[2] = {w_user, w_cand};
    const int64_t K[2] = {pl->Ku, pl->Kc};
    for (int b = AOT_LCE_CALLER; b < AOT_LCE_NBUF && st == AOT_OK; b++) { /* each filled buffer in one upload */
        unsigned char *h = NULL;
        for (int i = 0; i < pl->nfill && st == AOT_OK; i++) {
            const aot_lce_fill *f = &pl->fill[i];
            if (f->buf != b)
                continue;
            if (!h && !(h = calloc(1, pl->bytes[b])))
                st = aot_fail(AOT_ERR_NOMEM, "%s: no host memory for the weights", fn);
            for (int64_t m = 0; h && m < pl->M; m++)
                memcpy(h + (size_t)(m * f->ld + f->col0) * pl->elem,
                       (const unsigned char *)w[f->weight] + (size_t)(m * K[f->weight]) * pl->elem,
                       (size_t)K[f->weight] * pl->elem);
        }
        if (h && st == AOT_OK)
            st = aot_upload(op->buf[b], h, pl->bytes[b], NULL, "the weights");
        free(h);
    }
    if (st != AOT_OK) {
        aot_lce_destroy(op);
        return st;
    }
    *out = op;
    return AOT_OK;
}

/* One run at the request's B and U (1 to the plan's): every kernel of the stage on the
 * caller's buffers, in order, on stream. */
static int aot_lce_run(const char *fn, struct aot_lce_op *op, const aot_kernel *kernels, aot_kstate *states,
                       const CUdeviceptr caller[AOT_LCE_CALLER], int64_t B, int64_t U, CUstream stream)
{
    const aot_lce_plan *pl = op->plan;
    int st = aot_check_request(fn, B, U, pl->B, pl->U);
    if (st != AOT_OK)
        return st;
    /* stage 4: its counter of user tiles done grows by U blocks a user every launch; start
     * over before it wraps */
    int64_t adds = U * pl->blocks_per_user;
    if (pl->blocks_per_user && op->flag_base + adds > INT32_MAX) {
        if ((st = aot_zero(op->buf[AOT_LCE_FLAGS], pl->bytes[AOT_LCE_FLAGS], stream, "the flags")) != AOT_OK)
            return st;
        op->flag_base = 0;
    }
    CUdeviceptr bufs[AOT_LCE_NBUF];
    memcpy(bufs, op->buf, sizeof bufs);
    memcpy(bufs, caller, AOT_LCE_CALLER * sizeof *bufs);
    int32_t base = (int32_t)op->flag_base, b32 = (int32_t)B, u32 = (int32_t)U, m32 = (int32_t)pl->M;
    for (int i = 0; i < pl->nsteps; i++) {
        const aot_lce_step *sp = &pl->step[i];
        void *args[AOT_MAX_ARGS];
        for (int j = 0; j < sp->nargs; j++)
            args[j] = sp->arg[j] == AOT_LCE_BASE ? (void *)&base
                      : sp->arg[j] == AOT_LCE_B  ? (void *)&b32
                      : sp->arg[j] == AOT_LCE_U  ? (void *)&u32
                      : sp->arg[j] == AOT_LCE_M  ? (void *)&m32
                                                 : (void *)&bufs[sp->arg[j]];
        unsigned grid[3];
        for (int d = 0; d < 3; d++) {
            const aot_lce_rule *r = &sp->grid;
            int64_t x = r->c[d] + r->per_b[d] * B + r->per_u[d] * U;
            x = r->mult[d] * ((x + r->div[d] - 1) / r->div[d]);
            if (r->cap[d] && x > r->cap[d])
                x = r->cap[d];
            grid[d] = (unsigned)(x < 1 ? 1 : x);
        }
        if ((st = aot_launch(fn, &kernels[sp->kernel], &states[sp->kernel], grid, args, stream)) != AOT_OK)
            return st;
    }
    op->flag_base += adds;
    return AOT_OK;
}
