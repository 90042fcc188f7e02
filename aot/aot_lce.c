/*
 * aot_lce.c -- the IKBO linear compression as an operation, in the files `loomc aot
 * ikbo_lce` writes (aot/aot.c copies this text in after aot_rt.c).
 *
 * It runs the description loom's C API runs (templates/ikbo_lce.h, ik_stage), written out
 * by the generator as one aot_lce_plan per shape: the buffers the operation owns and how
 * the host weights fill them at prepare, and the kernels a run launches in order, each
 * argument taken from the caller's four buffers, an owned one, or the epoch.  The
 * generator defines AOT_LCE_NBUF, AOT_LCE_CALLER, AOT_LCE_FLAGS and AOT_LCE_EPOCH from
 * loom's own enum before this text.
 */

typedef struct aot_lce_fill {
    int buf, weight; /* weight 0: w_user [M, Ku], 1: w_cand [M, Kc], into buf as [M, ld] at column col0 */
    int64_t ld, col0;
} aot_lce_fill;

typedef struct aot_lce_step {
    int kernel;      /* into the file's kernel table */
    unsigned grid[3];
    int nargs;
    int arg[AOT_MAX_ARGS]; /* a buffer (0-3: the caller's e_user, e_cand, cand_to_user, out), or AOT_LCE_EPOCH */
} aot_lce_step;

typedef struct aot_lce_plan {
    int64_t M, Ku, Kc;
    size_t elem;                 /* bytes an element */
    size_t bytes[AOT_LCE_NBUF];  /* the owned buffers (0: unused) */
    int nfill;
    aot_lce_fill fill[2];
    int nsteps;
    aot_lce_step step[5];
    int64_t epoch_step;          /* stage 4: what a launch adds to the flags' counter (0: no epoch) */
} aot_lce_plan;

struct aot_lce_op {
    const aot_lce_plan *plan;
    CUdeviceptr buf[AOT_LCE_NBUF];
    int32_t epoch;
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

/* One run: every kernel of the stage on the caller's buffers, in order, on stream. */
static int aot_lce_run(const char *fn, struct aot_lce_op *op, const aot_kernel *kernels, aot_kstate *states,
                       const CUdeviceptr caller[AOT_LCE_CALLER], CUstream stream)
{
    const aot_lce_plan *pl = op->plan;
    int st;
    /* stage 4: its counter of user tiles done grows every launch; start over before it wraps */
    if (pl->epoch_step && (int64_t)(op->epoch + 1) * pl->epoch_step > INT32_MAX) {
        if ((st = aot_zero(op->buf[AOT_LCE_FLAGS], pl->bytes[AOT_LCE_FLAGS], stream, "the flags")) != AOT_OK)
            return st;
        op->epoch = 0;
    }
    CUdeviceptr bufs[AOT_LCE_NBUF];
    memcpy(bufs, op->buf, sizeof bufs);
    memcpy(bufs, caller, AOT_LCE_CALLER * sizeof *bufs);
    int32_t epoch = op->epoch + 1;
    for (int i = 0; i < pl->nsteps; i++) {
        const aot_lce_step *sp = &pl->step[i];
        void *args[AOT_MAX_ARGS];
        for (int j = 0; j < sp->nargs; j++)
            args[j] = sp->arg[j] == AOT_LCE_EPOCH ? (void *)&epoch : (void *)&bufs[sp->arg[j]];
        if ((st = aot_launch(fn, &kernels[sp->kernel], &states[sp->kernel], sp->grid, args, stream)) != AOT_OK)
            return st;
    }
    if (pl->epoch_step)
        op->epoch++;
    return AOT_OK;
}
