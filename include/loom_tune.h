/*
 * loom_tune.h -- templates and the autotuner, for whoever writes a kernel template (a
 * kernel built per shape and config) or tunes one: loom's own templates and a user's
 * (docs/kernels.md) are used the same way.  Included by loom.h.  Sections:
 *
 *   1. templates: parameters, grid rules, the template's fields   (templates/registry.c)
 *   2. the error model, the registry, instances and checks        (templates/registry.c)
 *   3. the autotuner and its timing                               (tune/; docs/tuning.md)
 *   4. plugins: a user's templates from a shared object           (templates/registry.c)
 */
#include "loom.h" /* first, outside the guard: loom.h declares every part of the API in order */
#ifndef INCLUDE_LOOM_TUNE_H
#define INCLUDE_LOOM_TUNE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from libloom (loom.h says more). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------- 1. templates */

/* A template builds one kernel per (shape, config).  Shapes and configs are lists of named
 * integer parameters (a dtype parameter holds a loom_dtype).  The registry lists every
 * template loom ships; loomc and the autotuner work from it. */
#define LOOM_MAX_PARAMS 16
/* The largest magnitude loom_params_parse takes (2^40, as for tensor dims): beyond it a
 * template's size arithmetic could overflow. */
#define LOOM_PARAM_MAX (INT64_C(1) << 40)
#define LOOM_MAX_CANDIDATES 16
typedef struct loom_param {
    const char *key;
    int64_t def;      /* default value */
    const char *doc;
    /* Config knobs only: the values the autotuner tries (ncand == 0: def alone).  The
     * configs it considers are every combination of the knobs' candidates. */
    int ncand;
    int64_t cand[LOOM_MAX_CANDIDATES];
    /* Shape parameters only: 1 when it shapes a check run's inputs, not the kernel (the
     * order of a mapping, say); loomc aot leaves it out of a launch's shape. */
    int inputs_only;
    /* Shape parameters only: 1 when the template's kernel takes it as a run-time dim (an
     * argument of loom_arg_dim named by the key, its max the built shape's value), so one
     * kernel serves every value up to that.  The tuner tunes it by bucket (the power of two
     * at or above it), loomc aot dispatches on that bucket, and the template's grid_rule
     * says how the grid follows it (docs/tuning.md, "Run-time dims and buckets"). */
    int runtime;
} loom_param;

/* A template's table (docs/kernels.md, "A template's table"): each shape key and config
 * knob written once, as a row of an X-macro list, and everything else derived from it.
 *
 *   #define MY_SHAPE(X)                                               \
 *       X(R, R, int64_t, 4096, "rows", .runtime = 1)                  \
 *       X(dtype, dt, loom_dtype, LOOM_F16, "element type")
 *   #define MY_CONFIG(X)                                              \
 *       X(BM, bm, int, 1, "rows a program", 1, 2, 4, 8)               \
 *       X(warps, warps, int, 4, "warps a CTA", 1, 2, 4, 8)
 *
 * A row is X(KEY, FIELD, TYPE, DEFAULT, DOC, ...): the key (a C identifier, as config
 * strings, loomc and the tuning cache spell it), the C field it unpacks into and that
 * field's type, the default, the doc; then, in a config list, the candidates the tuner
 * tries (none: the default alone), and in a shape list, any other fields of loom_param
 * (.runtime = 1, .inputs_only = 1).  From the lists:
 *
 *   enum { MY_SHAPE(LOOM_S_INDEX) S_COUNT };     S_R, S_dtype: a key's index in the vector
 *   enum { MY_CONFIG(LOOM_C_INDEX) C_COUNT };    C_BM, C_warps
 *   typedef struct my { MY_SHAPE(LOOM_FIELD) MY_CONFIG(LOOM_FIELD) } my;   the typed fields
 *   (const char *[]){MY_CONFIG(LOOM_KEY)}        the keys, "BM", "warps"
 *   LOOM_UNPACK(MY_SHAPE, &s, shape); LOOM_UNPACK(MY_CONFIG, &s, config);  vectors -> fields
 *   LOOM_PACK(MY_CONFIG, config, &s);                                       fields -> vector
 *   .nshape = LOOM_COUNT(MY_SHAPE), .shape = {MY_SHAPE(LOOM_SHAPE_PARAM)},
 *   .nconfig = LOOM_COUNT(MY_CONFIG), .config = {MY_CONFIG(LOOM_CONFIG_PARAM)},
 *   (my){MY_CONFIG(LOOM_DEFAULT)}                the defaults as the struct's fields
 *   (int64_t[]){MY_CONFIG(LOOM_DEFAULT_VALUE)}   the defaults as a vector
 *
 * (C only: LOOM_CONFIG_PARAM counts the candidates with a compound literal.) */
#define LOOM_S_INDEX(KEY, ...) S_##KEY,
#define LOOM_C_INDEX(KEY, ...) C_##KEY,
#define LOOM_FIELD(KEY, FIELD, TYPE, ...) TYPE FIELD;
#define LOOM_KEY(KEY, ...) #KEY,
#define LOOM_COUNT_ROW_(...) +1
#define LOOM_COUNT(LIST) (0 LIST(LOOM_COUNT_ROW_))
#define LOOM_SHAPE_PARAM(KEY, FIELD, TYPE, DEF, DOC, ...) {.key = #KEY, .def = (DEF), .doc = DOC, __VA_ARGS__},
#define LOOM_CONFIG_PARAM(KEY, FIELD, TYPE, DEF, DOC, ...)                                                  \
    {.key = #KEY, .def = (DEF), .doc = DOC,                                                                \
     .ncand = (int)(sizeof((const int64_t[]){0, __VA_ARGS__}) / sizeof(int64_t)) - 1, .cand = {__VA_ARGS__}},
#define LOOM_DEFAULT(KEY, FIELD, TYPE, DEF, ...) .FIELD = (TYPE)(DEF),
#define LOOM_DEFAULT_VALUE(KEY, FIELD, TYPE, DEF, ...) (DEF),
/* dst: a pointer to a struct with the list's fields; vals: an int64_t vector in the list's
 * order (LOOM_PACK writes one). */
#define LOOM_UNPACK(LIST, dst, vals)                                                                        \
    do {                                                                                                   \
        __typeof__(dst) loom_dst_ = (dst);                                                                 \
        const int64_t *loom_vals_ = (vals);                                                                \
        LIST(LOOM_UNPACK_ROW_)                                                                             \
    } while (0)
#define LOOM_UNPACK_ROW_(KEY, FIELD, TYPE, ...) loom_dst_->FIELD = (TYPE)*loom_vals_++;
#define LOOM_PACK(LIST, vals, src)                                                                          \
    do {                                                                                                   \
        int64_t *loom_vals_ = (vals);                                                                      \
        __typeof__(src) loom_src_ = (src);                                                                 \
        LIST(LOOM_PACK_ROW_)                                                                               \
    } while (0)
#define LOOM_PACK_ROW_(KEY, FIELD, TYPE, ...) *loom_vals_++ = (int64_t)loom_src_->FIELD;
/* The list's fields of *src into *dst (two structs that both have them). */
#define LOOM_COPY(LIST, dst, src)                                                                           \
    do {                                                                                                   \
        __typeof__(dst) loom_dst_ = (dst);                                                                 \
        __typeof__(src) loom_src_ = (src);                                                                 \
        LIST(LOOM_COPY_ROW_)                                                                               \
    } while (0)
#define LOOM_COPY_ROW_(KEY, FIELD, TYPE, ...) loom_dst_->FIELD = loom_src_->FIELD;

/* A grid as a rule over a shape, so the host (loom, or a file of loomc aot) computes each
 * launch's grid from the request's run-time dims without calling the template:
 *   grid[d] = mult[d] * cdiv(c[d] + sum_i per[d][i] * shape[i], div[d]), at most cap[d]
 *             (cap[d] 0: no cap; div[d] and mult[d] at least 1). */
typedef struct loom_grid_rule {
    int64_t c[3], div[3], mult[3], cap[3];
    int64_t per[3][LOOM_MAX_PARAMS];
} loom_grid_rule;
/* The grid rule r gives at shape; non-zero when a dim is outside [1, 2^31 - 1] (x) or
 * [1, 65535] (y, z). */
int loom_grid_rule_eval(const loom_grid_rule *r, const int64_t *shape, int grid[3]);
/* The bucket of a run-time dim's value v: the power of two at or above it. */
int64_t loom_dim_bucket(int64_t v);

/* A template's fields.  Required (loom_template_validate refuses a template without them):
 *   name       a C identifier of at most 63 characters (loomc aot names C types after it),
 *              unique among the templates of a process
 *   build, grid, init, reference
 *   nshape, nconfig (0 to LOOM_MAX_PARAMS) and each parameter's key: a C identifier,
 *              unique in its list; a default of at most LOOM_PARAM_MAX in magnitude; ncand
 *              0 to LOOM_MAX_CANDIDATES (config knobs only); runtime and inputs_only on
 *              shape parameters only
 *   grid_rule  where a shape parameter is run-time (loom_param.runtime)
 * Optional (0 or NULL when not given): doc, each parameter's doc, atol and rtol (0: exact;
 * not negative), valid, cost, bucket, unchecked, bound, aot.  A template of a user's
 * plugin (section 4) is held to the same rules as a built-in. */
struct loom_aot_op;
typedef struct loom_template {
    const char *name;
    const char *doc;
    int nshape;
    loom_param shape[LOOM_MAX_PARAMS];
    int nconfig;
    loom_param config[LOOM_MAX_PARAMS];
    /* Build the kernel, or return NULL with the reason in err (a shape or config the
     * template cannot serve). */
    loom_kernel *(*build)(const int64_t *shape, const int64_t *config, char *err, size_t errlen);
    void (*grid)(const int64_t *shape, const int64_t *config, int grid[3]);
    /* The grid as a rule (above); required where a shape parameter is run-time, and then
     * grid must give what the rule gives. */
    void (*grid_rule)(const int64_t *shape, const int64_t *config, loom_grid_rule *rule);
    /* Fill the inputs for a check run: host[i] is the host copy of kernel argument i
     * (scalars: a pointer to the value), sized by loom_kernel_arg_info's min_bytes. */
    void (*init)(const int64_t *shape, void *const *host, uint64_t seed);
    /* Compute the expected outputs: ref[i] for each output argument i (NULL for inputs),
     * in the argument's dtype, from the inputs in host. */
    void (*reference)(const int64_t *shape, void *const *host, void *const *ref);
    /* An output element passes when |out - ref| <= atol + rtol * |ref|. */
    double atol, rtol;

    /* ---- autotuning (tune/); every field below is optional */
    /* Can `config` serve `shape` well enough to be worth timing?  Return 1, or 0 with the
     * reason in why (shared memory, registers, divisibility, alignment: whatever limits
     * the template).  NULL: every config the build accepts is a candidate.  Write it and
     * build's refusals from one check (a why_not returning NULL or the reason), so the two
     * never differ (docs/kernels.md, "A template's table"). */
    int (*valid)(const int64_t *shape, const int64_t *config, char *why, size_t n);
    /* An estimate of the config's run time at shape (any unit; lower is faster).  The
     * tuner compiles and times candidates in this order, keeps the best `max_configs`
     * of them when asked to, and without a GPU falls back on the best of it when the
     * default config is not valid for the shape. */
    double (*cost)(const int64_t *shape, const int64_t *config);
    /* The config to run at shape when nothing is timed (LOOM_TUNE=0, no GPU, a tuning that
     * fell back): config holds the defaults on entry, and the heuristic overwrites what
     * suits the shape better (a rule measured on the GPU, as cuBLAS's heuristics are).  A
     * config valid() refuses is not used: the defaults are.  NULL: the defaults.
     * loom_template_untuned_config gives the result. */
    void (*heuristic)(const int64_t *shape, int64_t *config);
    /* Write the representative of shape's bucket into bucket[0..nshape-1]: shapes with
     * the same representative share one tuned config in the cache.  NULL: exact shape. */
    void (*bucket)(const int64_t *shape, int64_t *bucket);

    /* Outputs a check leaves alone (bit i: argument i): a workspace whose every use shows
     * in the outputs that are checked, and whose elements alone the reference cannot
     * predict (0: every output is compared). */
    uint32_t unchecked;

    /* The error model (docs/checks.md): after reference() filled ref, write into bound[i]
     * (one double per element of output argument i; NULL for the other arguments and for
     * unchecked outputs) the largest |out - ref| a right kernel can give at that element,
     * derived from the computation with loom_f32_sum_error and loom_error_bound.  Every
     * check compares element by element against it.  NULL: atol + rtol * |ref|. */
    void (*bound)(const int64_t *shape, void *const *host, void *const *ref, double *const *bound);

    /* ---- ahead of time (aot/; loom_aot.h); optional */
    /* An operation of several kernels that a file of loomc aot offers beside the template's
     * launch function (loom_aot_op).  NULL: the template's kernel and its launch alone. */
    const struct loom_aot_op *aot;
} loom_template;

/* ---------------------------------------------------------------- 2. error model, registry, checks
 * (docs/checks.md) */
/* The spacing of dtype dt's values at magnitude |x| (the subnormal spacing below the
 * smallest normal; 0 for integer types, which are exact). */
double loom_ulp(loom_dtype dt, double x);
/* The largest error of a sum of k exact terms accumulated in f32 in any order, whose
 * magnitudes sum to `magnitude`: gamma_k * magnitude, gamma_k = k u / (1 - k u) with
 * u = 2^-23 (an add may be off by a whole ulp: the tensor cores do not promise to round
 * to nearest).  0 for k <= 1; infinite for k >= 2^23. */
double loom_f32_sum_error(int64_t k, double magnitude);
/* The same for a sum of k exact products of FP8 values accumulated by FP8 wgmma, whose
 * adds keep fewer bits than f32 (docs/checks.md, "FP8"): gamma_k with u = 2^-13.  0 for
 * k <= 1; infinite for k >= 2^13. */
double loom_fp8_mma_sum_error(int64_t k, double magnitude);
/* The same with the tensor cores' partial sums promoted into an f32 accumulator every
 * `block` products (the gemm template's promote=P: block = P * BK): gamma_block (u = 2^-13)
 * of the magnitudes within the blocks, plus gamma_(cdiv(k, block)) (u = 2^-23) of the f32
 * sum over the blocks' sums, each at most (1 + gamma_block) of its magnitudes.  block <= 0
 * or >= k: loom_fp8_mma_sum_error. */
double loom_fp8_promoted_sum_error(int64_t k, int64_t block, double magnitude);
/* The bound at an element whose reference, stored in dt, is ref, when a right kernel's
 * value before its own final rounding to dt is within err of the exact result: err plus
 * one ulp of dt (half for the kernel's rounding, half for the reference's), taken at the
 * largest magnitude either value can have. */
double loom_error_bound(loom_dtype dt, double ref, double err);

int loom_template_count(void);
const loom_template *loom_template_at(int i);
const loom_template *loom_template_find(const char *name);
/* The config t runs at shape when nothing is timed: its defaults, adjusted by its
 * heuristic where it has one and the result is valid for the shape. */
void loom_template_untuned_config(const loom_template *t, const int64_t *shape, int64_t *config);
/* 0 when t has every required field (above) and each is well formed; else -1 with a
 * message in err naming the template and the field ("template 'x': field 'build' is
 * NULL (required)").  Says nothing about names other templates hold (loom_plugin_load
 * checks those). */
int loom_template_validate(const loom_template *t, char *err, size_t errlen);
/* Parse "k=v,k=v" over the defaults of a parameter list into vals; dtype values may be
 * written by name (f16, bf16, f32, ...).  Unknown keys or bad values: non-zero, message
 * in err naming the key. */
int loom_params_parse(const loom_param *params, int n, const char *text, int64_t *vals, char *err,
                      size_t errlen);
/* A template made ready to launch: its kernel, its grid, and a buffer per tensor argument
 * holding random inputs (the template's init, from `seed`) with outputs poisoned (every
 * byte 0xff).  host[i] keeps the host copy of argument i (scalars: scalars[i]). */
typedef struct loom_instance {
    loom_kernel *kernel;
    int nargs, grid[3];
    loom_arg args[LOOM_MAX_ARGS];
    loom_buffer *buf[LOOM_MAX_ARGS];
    void *host[LOOM_MAX_ARGS];
    int64_t scalars[LOOM_MAX_ARGS];
    loom_arg_info info[LOOM_MAX_ARGS];
    size_t bytes; /* every tensor's extent: the traffic of one read or write of each */
} loom_instance;
/* Build and set up an instance; on failure the reason is in err and nothing is left
 * allocated. */
loom_status loom_instance_create(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                 const int64_t *config, uint64_t seed, loom_instance *out,
                                 char *err, size_t errlen);
void loom_instance_destroy(loom_instance *in);

/* Run template t at (shape, config) on runtime rt with random inputs and check every
 * output element against its reference and its error bound (t->bound, docs/checks.md);
 * returns LOOM_OK when all pass.  A summary line is written into report. */
loom_status loom_template_check(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                const int64_t *config, uint64_t seed, char *report, size_t n);

/* What an instance's outputs must be: for each checked output i (an output not in
 * t->unchecked), ref[i] its reference in its dtype and bound[i] the largest |out - ref| a
 * right kernel gives at each element (t->bound, else atol + rtol * |ref|). */
typedef struct loom_expected {
    void *ref[LOOM_MAX_ARGS];
    double *bound[LOOM_MAX_ARGS];
} loom_expected;
/* The reference and bounds at the instance's inputs (host copies); LOOM_ERR_NOMEM. */
loom_status loom_expected_create(const loom_template *t, const int64_t *shape, const loom_instance *in,
                                 loom_expected *out);
void loom_expected_destroy(loom_expected *e);
/* Compare host copies got[i] of the outputs with e, element by element: |got - ref| <=
 * bound, or both NaN.  Returns the number of elements outside their bound; report gets
 * a summary (the count, the worst |err| / bound, the first bad element). */
int64_t loom_expected_compare(const loom_template *t, const loom_instance *in, const loom_expected *e,
                              void *const *got, char *report, size_t n);

/* ---------------------------------------------------------------- 3. the autotuner (tune/; docs/tuning.md)
 *
 * loom_tune(rt, t, shapes, n, opts, out) gives, for each shape, a kernel built with the
 * best config and ready to launch.  Each shape is looked up in the tuning cache (a JSON
 * file keyed by template, shape bucket, GPU and SM count, driver and loom version); on
 * a miss every candidate config is checked for validity, compiled on a thread pool,
 * run once against a reference, and timed (L2 flushed and inputs rotated between runs),
 * and the fastest correct one is stored.  Without a GPU (or with LOOM_TUNE=0) nothing is
 * timed: the default config is used (or, if the default cannot serve the shape, the
 * cost model's best valid config), and the note says so. */

/* What became of one candidate config. */
typedef enum loom_tune_verdict {
    LOOM_TUNE_TIMED = 0,      /* correct and timed: ms holds its median */
    LOOM_TUNE_INVALID,        /* rejected by the template's valid(): reason says why */
    LOOM_TUNE_REFUSED,        /* the build refused it or it failed verification */
    LOOM_TUNE_COMPILE_FAILED, /* code generation, linking or loading failed */
    LOOM_TUNE_LAUNCH_FAILED,  /* the launch failed */
    LOOM_TUNE_WRONG,          /* its output differs from the reference beyond tolerance */
    LOOM_TUNE_SKIPPED,        /* beyond opts.max_configs (in cost order) */
} loom_tune_verdict;
const char *loom_tune_verdict_name(loom_tune_verdict v);

typedef struct loom_tune_result {
    int64_t config[LOOM_MAX_PARAMS];
    loom_tune_verdict verdict;
    double ms;    /* TIMED only: its final time if a finalist, else its first-pass time */
    double cost;  /* the cost model's estimate (0 without one) */
    char reason[200];
} loom_tune_result;

/* Where a shape's config came from. */
typedef enum loom_tune_source {
    LOOM_TUNE_NONE = 0,   /* nothing usable: status and note say why */
    LOOM_TUNE_TUNED,      /* timed now */
    LOOM_TUNE_CACHED,     /* found in the tuning cache */
    LOOM_TUNE_DEFAULT,    /* not tuned, by choice or for want of a GPU (LOOM_TUNE=0, the
                             interpreter): the default config; note says */
    LOOM_TUNE_FELL_BACK,  /* tuning ran on the GPU and failed (no candidate ran correctly, or
                             none could be set up): the default config, note says why, and
                             loom_tune returns LOOM_ERR_NOT_TUNED */
} loom_tune_source;

typedef struct loom_tuned {
    const loom_template *t;
    int64_t shape[LOOM_MAX_PARAMS];
    int64_t config[LOOM_MAX_PARAMS];
    loom_kernel *kernel;     /* built with config, verified, compiled and loaded (GPU) */
    int grid[3];
    loom_tune_source source;
    loom_status status;      /* LOOM_OK when kernel is ready */
    double ms;               /* the config's time (finalists' pass) when timed now or cached, else 0 */
    double tune_ms;          /* wall time spent on this shape */
    double compile_ms;       /* of which: compiling the candidates (on the pool) */
    double setup_ms;         /* making inputs and the reference (overlapping the compile) */
    double measure_ms;       /* checking and timing them (overlapping the compile) */
    int ncand, nvalid, ntimed; /* combinations, valid ones, timed correct ones */
    int nresults;            /* every candidate's fate (when tuned now) */
    loom_tune_result *results;
    char note[512];
} loom_tuned;

typedef struct loom_tune_opts {
    int force;        /* re-tune even when the cache has the shape (or LOOM_TUNE_FORCE=1) */
    int max_configs;  /* time at most this many valid configs, the cost model's best first;
                         0: all */
    int threads;      /* compile threads; 0: LOOM_TUNE_THREADS, else one per core */
    int warmup, reps; /* rounds of each first-pass group; 0: 1 and 5 (docs/tuning.md) */
    int quiet;        /* 0: a progress bar and a summary table on stderr when it is a
                         terminal; 1: neither; 2: the progress bar only (the caller prints
                         the table itself with loom_tune_print) */
    int verbose;      /* 1: print every config's fate and time (or LOOM_TUNE_VERBOSE=1) */
    uint64_t seed;    /* inputs of the correctness check; 0: 1 */
} loom_tune_opts;

/* Time any GPU work on rt -- a sequence of launches, say a whole IKBO stage: run work
 * `warmup` times, then `reps` times, each run after an untimed write of twice the L2 so
 * no run finds its inputs in cache; the median in ms.  work returns LOOM_OK or its
 * failure (which stops the timing).  LOOM_ERR_NO_GPU on the interpreter. */
loom_status loom_time_work(loom_runtime *rt, loom_status (*work)(void *ctx), void *ctx, int warmup, int reps,
                           double *median_ms);


/* Time a launch the way the tuner does: after a first (untimed) launch and `warmup` runs,
 * `reps` runs each preceded by an L2 flush (a buffer twice the L2 size is written,
 * outside the timed window); returns the median in ms.  GPU only (LOOM_ERR_NO_GPU). */
loom_status loom_time_launch_flushed(loom_runtime *rt, loom_kernel *k, const int grid[3],
                                     const loom_arg *args, int nargs, int warmup, int reps,
                                     double *median_ms);

/* Tune template t for nshapes shapes: shapes[i * t->nshape + j] is parameter j of shape i.
 * out[i] (nshapes of them) receives each result; release them with loom_tuned_release.
 * Returns LOOM_OK when every shape has a ready kernel that was tuned (or cached, or not
 * to be tuned: no GPU, LOOM_TUNE=0); LOOM_ERR_NOT_TUNED when every shape has a ready
 * kernel but the tuning of one fell back on the default config; else the first failure
 * (each out[i].note says what happened).  opts may be NULL. */
loom_status loom_tune(loom_runtime *rt, const loom_template *t, const int64_t *shapes, int nshapes,
                      const loom_tune_opts *opts, loom_tuned *out);
void loom_tuned_release(loom_tuned *r, int n);
/* The summary table (one line per shape; with every_config, each candidate too). */
void loom_tune_print(FILE *f, const loom_tuned *r, int n, int every_config);
/* "k=v,k=v" of a config (or shape) of template t's parameter list. */
void loom_params_format(const loom_param *params, int n, const int64_t *vals, char *buf, size_t len);

/* ---------------------------------------------------------------- 4. plugins
 * (templates/registry.c; docs/kernels.md)  A shared object of the user's that adds
 * templates to the registry, so that they work everywhere a built-in does: loomc's every
 * command (`loomc CMD --plugin libmine.so NAME ...`), loom_template_find, the tuner, loomc
 * aot.  A plugin has one entry point, written with LOOM_PLUGIN_INIT:
 *
 *     LOOM_PLUGIN_INIT(p)
 *     {
 *         return loom_plugin_register(p, &my_template);
 *     }
 *
 * The macro exports loom_plugin_init and, beside it, the version of loom.h the plugin was
 * compiled with (loom_plugin_version): a loom of another version refuses the plugin
 * before calling it, since loom_template's layout may differ.  A plugin uses loom from
 * the program that loads it (link it with loom::loom, or leave loom's symbols undefined). */
typedef struct loom_plugin loom_plugin;
#ifdef __cplusplus
#define LOOM_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#define LOOM_PLUGIN_EXTERN LOOM_PLUGIN_EXPORT
#else
#define LOOM_PLUGIN_EXPORT __attribute__((visibility("default")))
#define LOOM_PLUGIN_EXTERN LOOM_PLUGIN_EXPORT extern
#endif
#define LOOM_PLUGIN_INIT(p)                                                    \
    LOOM_PLUGIN_EXTERN const char loom_plugin_version[];                       \
    LOOM_PLUGIN_EXPORT const char loom_plugin_version[] = LOOM_VERSION;        \
    LOOM_PLUGIN_EXPORT int loom_plugin_init(loom_plugin *p);                   \
    LOOM_PLUGIN_EXPORT int loom_plugin_init(loom_plugin *p)
/* Called by a plugin's loom_plugin_init: add template t (which must live as long as the
 * process: a static object of the plugin).  Returns 0, or -1 when t is refused (a required
 * field missing or malformed: loom_template_validate; a name another template holds, a
 * built-in, one of an earlier plugin or of this one): loom_plugin_load then fails with
 * that message, and no template of the plugin is added. */
int loom_plugin_register(loom_plugin *p, const loom_template *t);
/* Load the plugin at path (dlopen; a path without '/' that names a file is taken from the
 * current directory, else dlopen's search), check its version, call its loom_plugin_init
 * and add every template it registered to the registry, after the built-ins and the
 * plugins loaded before.  LOOM_OK, or LOOM_ERR_INVALID with the reason in err (dlopen's
 * message, a missing entry point, another version, a refused template: the plugin is
 * unloaded and nothing is added).  *count (may be NULL) receives how many templates were
 * added.  A loaded plugin stays loaded.  Load plugins before other threads read the
 * registry. */
loom_status loom_plugin_load(const char *path, int *count, char *err, size_t errlen);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* INCLUDE_LOOM_TUNE_H */
