/*
 * aot_fa.c -- the IKBO flash attention as an operation, in the files `loomc aot ikbo_fa`
 * writes (aot/aot.c copies this text in after aot_rt.c and templates/ikbo_fa_units.h, the
 * work plan's code that loom itself runs).
 *
 * As loom's C API (templates/ikbo_fa_api.c): prepare allocates the plan, the lengths and
 * the schedule's counter at the file's shape (the most a request has); set_mapping (the
 * file's B and U) or set_request (a request's) makes the plan on the host and uploads it;
 * launch runs the kernel with it at that request's rows and users; run reads the mapping
 * back from the GPU first.  The kernel's
 * arguments: rows and U (its run-time dims, i32: the shape's B * n_seed and U), Q, K, V,
 * plan, seq_len, claims, units (i32), out (the generator checks that the kernel it writes
 * out takes exactly these).
 */

typedef struct aot_fa_plan {
    int64_t B, U, S, nseed, H; /* B and U: the most a request has (the kernel takes them at run time) */
    int varlen;
    int kernel; /* into the file's kernel table */
    unsigned grid[3];
} aot_fa_plan;

struct aot_fa_op {
    const aot_fa_plan *plan;
    CUdeviceptr units_dev, lens, claims;
    int32_t *units_host, *map_host, *lens_host;
    int64_t units; /* the current plan's units (-1: no mapping set) */
    int64_t B, U;  /* the current request's */
};

static void aot_fa_destroy(struct aot_fa_op *op)
{
    if (!op)
        return;
    aot_free(op->units_dev), aot_free(op->lens), aot_free(op->claims);
    free(op->units_host), free(op->map_host), free(op->lens_host);
    free(op);
}

static size_t aot_fa_units_bytes(const aot_fa_plan *pl)
{
    return (size_t)fa_units_max(pl->B, pl->nseed) * FA_UNIT_FIELDS * sizeof(int32_t);
}

static int aot_fa_prepare(const char *fn, const aot_fa_plan *pl, struct aot_fa_op **out)
{
    struct aot_fa_op *op = calloc(1, sizeof *op);
    if (!op)
        return aot_fail(AOT_ERR_NOMEM, "%s: out of host memory", fn);
    op->plan = pl;
    op->units = -1;
    size_t ub = aot_fa_units_bytes(pl), lb = (size_t)pl->U * sizeof(int32_t);
    op->units_host = malloc(ub);
    op->map_host = malloc((size_t)pl->B * sizeof(int32_t));
    op->lens_host = malloc(lb);
    int st = op->units_host && op->map_host && op->lens_host ? AOT_OK
                                                             : aot_fail(AOT_ERR_NOMEM, "%s: out of host memory", fn);
    if (st == AOT_OK && (st = aot_alloc(&op->units_dev, ub, "the work plan")) == AOT_OK)
        st = aot_zero(op->units_dev, ub, NULL, "the work plan");
    if (st == AOT_OK && (st = aot_alloc(&op->lens, lb, "seq_len")) == AOT_OK)
        st = aot_zero(op->lens, lb, NULL, "seq_len");
    if (st == AOT_OK && (st = aot_alloc(&op->claims, 8, "the schedule's counter")) == AOT_OK)
        st = aot_zero(op->claims, 8, NULL, "the schedule's counter");
    if (st == AOT_OK && !pl->varlen) { /* every user has S keys */
        for (int64_t u = 0; u < pl->U; u++)
            op->lens_host[u] = (int32_t)pl->S;
        st = aot_upload(op->lens, op->lens_host, lb, NULL, "seq_len");
    }
    if (st != AOT_OK) {
        aot_fa_destroy(op);
        return st;
    }
    *out = op;
    return AOT_OK;
}

/* The plan of a request of B candidates and U users (1 to the file's), made on the host. */
static int aot_fa_set_request(const char *fn, struct aot_fa_op *op, int64_t B, int64_t U, const int32_t *map,
                              const int32_t *seq_len, CUstream stream)
{
    const aot_fa_plan *pl = op->plan;
    int st = aot_check_request(fn, B, U, pl->B, pl->U);
    if (st != AOT_OK)
        return st;
    if (!map)
        return aot_fail(AOT_ERR_INVALID, "%s: cand_to_user is NULL", fn);
    if (!pl->varlen && seq_len)
        return aot_fail(AOT_ERR_INVALID, "%s: seq_len given, but the shape has varlen=0 (every user has S keys)", fn);
    if (pl->varlen && !seq_len)
        return aot_fail(AOT_ERR_INVALID, "%s: the shape has varlen=1: seq_len is needed", fn);
    char err[200];
    int64_t n = fa_units(B, U, pl->S, pl->nseed, map, seq_len, op->units_host, err, sizeof err);
    if (n < 0)
        return aot_fail(AOT_ERR_INVALID, "%s: %s", fn, err);
    st = aot_enter();
    if (st == AOT_OK && n > 0)
        st = aot_upload(op->units_dev, op->units_host, (size_t)n * FA_UNIT_FIELDS * sizeof(int32_t), stream,
                        "the work plan");
    if (st == AOT_OK && seq_len)
        st = aot_upload(op->lens, seq_len, (size_t)U * sizeof(int32_t), stream, "seq_len");
    if (st != AOT_OK)
        return st;
    op->units = n;
    op->B = B, op->U = U;
    return AOT_OK;
}

static int aot_fa_set_mapping(const char *fn, struct aot_fa_op *op, const int32_t *map, const int32_t *seq_len,
                              CUstream stream)
{
    return aot_fa_set_request(fn, op, op->plan->B, op->plan->U, map, seq_len, stream);
}

static int aot_fa_launch(const char *fn, struct aot_fa_op *op, const aot_kernel *kernels, aot_kstate *states,
                         CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr out, CUstream stream)
{
    const aot_fa_plan *pl = op->plan;
    if (op->units < 0)
        return aot_fail(AOT_ERR_INVALID, "%s: no mapping: set one first (set_mapping, or run)", fn);
    int32_t units = (int32_t)op->units, rows = (int32_t)(op->B * pl->nseed), users = (int32_t)op->U;
    void *args[] = {&rows, &users, &q, &k, &v, &op->units_dev, &op->lens, &op->claims, &units, &out};
    /* a program a unit and head of the plan, at most the file's grid (its CTAs) */
    int64_t work = op->units * pl->H;
    unsigned grid[3] = {work < pl->grid[0] ? (unsigned)(work > 0 ? work : 1) : pl->grid[0], 1, 1};
    return aot_launch(fn, &kernels[pl->kernel], &states[pl->kernel], grid, args, stream);
}

/* The mapping (and lengths) of a request of B and U read back from the GPU, then its plan
 * and the launch. */
static int aot_fa_run(const char *fn, struct aot_fa_op *op, const aot_kernel *kernels, aot_kstate *states,
                      int64_t B, int64_t U, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr map,
                      CUdeviceptr seq_len, CUdeviceptr out, CUstream stream)
{
    const aot_fa_plan *pl = op->plan;
    int st = aot_check_request(fn, B, U, pl->B, pl->U);
    if (st != AOT_OK)
        return st;
    if (!map)
        return aot_fail(AOT_ERR_INVALID, "%s: cand_to_user is NULL", fn);
    if (pl->varlen != (seq_len != 0))
        return aot_fail(AOT_ERR_INVALID, "%s: %s", fn,
                        pl->varlen ? "the shape has varlen=1: seq_len is needed"
                                   : "seq_len given, but the shape has varlen=0 (every user has S keys)");
    st = aot_enter();
    if (st == AOT_OK)
        st = aot_download(op->map_host, map, (size_t)B * sizeof(int32_t), stream, "cand_to_user");
    if (st == AOT_OK && seq_len)
        st = aot_download(op->lens_host, seq_len, (size_t)U * sizeof(int32_t), stream, "seq_len");
    if (st == AOT_OK)
        st = aot_fa_set_request(fn, op, B, U, op->map_host, seq_len ? op->lens_host : NULL, stream);
    if (st == AOT_OK)
        st = aot_fa_launch(fn, op, kernels, states, q, k, v, out, stream);
    return st;
}
