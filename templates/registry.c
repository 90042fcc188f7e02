/*
 * registry.c -- the list of templates loom ships and those of the user's plugins,
 * template validation, parameter parsing, and the generic check run (random inputs,
 * poisoned outputs, launch, compare with the reference).
 *
 * Adding a template: define `const loom_template tpl_def_<name>` in its own file under
 * templates/ and add it to the list below.  A user adds templates with a plugin
 * (loom_plugin_load, loom_tune.h section 4): a shared object whose loom_plugin_init registers
 * them.  Its templates are checked as a whole before any joins the registry, so a plugin
 * with one bad template adds none.
 */
#include "tpl.h"

#include "../dsl/ir.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const loom_template tpl_def_broadcast_add;
extern const loom_template tpl_def_row_softmax;
extern const loom_template tpl_def_gemm;
extern const loom_template tpl_def_ikbo_lce;
extern const loom_template tpl_def_ikbo_fa;

static const loom_template *const registry[] = {
    &tpl_def_broadcast_add,
    &tpl_def_row_softmax,
    &tpl_def_gemm,
    &tpl_def_ikbo_lce,
    &tpl_def_ikbo_fa,
};

#define NBUILTIN ((int)(sizeof registry / sizeof registry[0]))

/* The plugins' templates, after the built-ins, in the order they were loaded. */
static const loom_template **loaded;
static int nloaded;

int loom_template_count(void) { return NBUILTIN + nloaded; }

const loom_template *loom_template_at(int i)
{
    return i >= 0 && i < NBUILTIN ? registry[i] : i >= NBUILTIN && i < loom_template_count() ? loaded[i - NBUILTIN]
                                                                                             : NULL;
}

int loom_grid_rule_eval(const loom_grid_rule *r, const int64_t *shape, int grid[3])
{
    int bad = 0;
    for (int d = 0; d < 3; d++) {
        int64_t x = r->c[d], t;
        for (int i = 0; i < LOOM_MAX_PARAMS; i++)
            if (r->per[d][i] && (!util_mul_i64(r->per[d][i], shape[i], &t) || !util_add_i64(x, t, &x)))
                x = INT64_MAX / 4;
        int64_t dv = r->div[d] > 0 ? r->div[d] : 1, m = r->mult[d] > 0 ? r->mult[d] : 1;
        x = x <= 0 ? 0 : (x / dv + (x % dv != 0));
        if (!util_mul_i64(x, m, &x))
            x = INT64_MAX;
        if (r->cap[d] > 0 && x > r->cap[d])
            x = r->cap[d];
        int64_t hi = d == 0 ? INT32_MAX : 65535;
        if (x < 1 || x > hi)
            bad = 1;
        grid[d] = (int)(x < 1 ? 1 : x > hi ? hi : x);
    }
    return bad;
}

int64_t loom_dim_bucket(int64_t v) { return tpl_pow2_at_least(v < 1 ? 1 : v); }

const loom_template *loom_template_find(const char *name)
{
    for (int i = 0; name && i < loom_template_count(); i++)
        if (strcmp(loom_template_at(i)->name, name) == 0)
            return loom_template_at(i);
    return NULL;
}

void loom_template_untuned_config(const loom_template *t, const int64_t *shape, int64_t *config)
{
    memset(config, 0, LOOM_MAX_PARAMS * sizeof *config);
    for (int i = 0; i < t->nconfig; i++)
        config[i] = t->config[i].def;
    if (!t->heuristic)
        return;
    int64_t h[LOOM_MAX_PARAMS];
    memcpy(h, config, sizeof h);
    t->heuristic(shape, h);
    if (!t->valid || t->valid(shape, h, NULL, 0))
        memcpy(config, h, sizeof h);
}

/* ---------------------------------------------------------------- validation */

#define BAD(...) return snprintf(err, errlen, __VA_ARGS__), -1

/* A C identifier of at most 63 characters: loomc aot writes names and keys into C. */
static bool c_identifier(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_') || strlen(s) > 63)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return false;
    return true;
}

/* One parameter list of template t: `what` is "shape" or "config". */
static int validate_params(const loom_template *t, const char *what, int n, const loom_param *ps, char *err,
                           size_t errlen)
{
    bool shape = !strcmp(what, "shape");
    if (n < 0 || n > LOOM_MAX_PARAMS)
        BAD("template '%s': field 'n%s' is %d (0 to %d)", t->name, what, n, LOOM_MAX_PARAMS);
    for (int i = 0; i < n; i++) {
        const loom_param *p = &ps[i];
        if (!p->key)
            BAD("template '%s': field '%s[%d].key' is NULL (required)", t->name, what, i);
        if (!c_identifier(p->key))
            BAD("template '%s': field '%s[%d].key' is '%s', not a C identifier of at most 63 characters (loomc aot "
                "names C fields after it)", t->name, what, i, p->key);
        for (int j = 0; j < i; j++)
            if (!strcmp(ps[j].key, p->key))
                BAD("template '%s': field '%s[%d].key': '%s' is also %s[%d]'s key (keys are unique)", t->name, what,
                    i, p->key, what, j);
        if (p->def > LOOM_PARAM_MAX || p->def < -LOOM_PARAM_MAX)
            BAD("template '%s': field '%s[%d].def' of '%s' is %lld, beyond 2^40 in magnitude (LOOM_PARAM_MAX)",
                t->name, what, i, p->key, (long long)p->def);
        if (p->ncand < 0 || p->ncand > LOOM_MAX_CANDIDATES)
            BAD("template '%s': field '%s[%d].ncand' of '%s' is %d (0 to %d)", t->name, what, i, p->key, p->ncand,
                LOOM_MAX_CANDIDATES);
        if (shape && p->ncand)
            BAD("template '%s': field 'shape[%d].ncand' of '%s' is %d: only config knobs have candidates", t->name,
                i, p->key, p->ncand);
        if (!shape && (p->runtime || p->inputs_only))
            BAD("template '%s': field 'config[%d].%s' of '%s' is set: only shape parameters are %s", t->name, i,
                p->runtime ? "runtime" : "inputs_only", p->key, p->runtime ? "run-time" : "inputs only");
        if (shape && p->runtime && !t->grid_rule)
            BAD("template '%s': field 'grid_rule' is NULL, but shape parameter '%s' is run-time (required then)",
                t->name, p->key);
    }
    return 0;
}

int loom_template_validate(const loom_template *t, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen)
        err = dummy, errlen = sizeof dummy;
    if (!t)
        BAD("the template is NULL");
    if (!t->name)
        BAD("a template's field 'name' is NULL (required)");
    if (!c_identifier(t->name))
        BAD("template '%s': field 'name' is not a C identifier of at most 63 characters (loomc aot names C types "
            "after it)", t->name);
    const struct {
        const char *field;
        bool given;
    } fns[] = {{"build", t->build != NULL}, {"grid", t->grid != NULL}, {"init", t->init != NULL},
               {"reference", t->reference != NULL}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!fns[i].given)
            BAD("template '%s': field '%s' is NULL (required)", t->name, fns[i].field);
    if (validate_params(t, "shape", t->nshape, t->shape, err, errlen) ||
        validate_params(t, "config", t->nconfig, t->config, err, errlen))
        return -1;
    if (!(t->atol >= 0) || !(t->rtol >= 0))
        BAD("template '%s': field '%s' is %g (0 or more)", t->name, !(t->atol >= 0) ? "atol" : "rtol",
            !(t->atol >= 0) ? t->atol : t->rtol);
    return 0;
}

/* ---------------------------------------------------------------- plugins */

#define PLUGIN_MAX_TEMPLATES 256

/* What a plugin's loom_plugin_init registers, held until it returns. */
struct loom_plugin {
    const char *path;
    const loom_template *t[PLUGIN_MAX_TEMPLATES];
    int n;
    char err[1024]; /* the first refusal ("" while there is none) */
};

/* Which template holds name: a built-in, an earlier plugin's, or NULL. */
static const char *holder(const char *name)
{
    for (int i = 0; i < NBUILTIN; i++)
        if (!strcmp(registry[i]->name, name))
            return "a built-in template";
    for (int i = 0; i < nloaded; i++)
        if (!strcmp(loaded[i]->name, name))
            return "a template of a plugin loaded before";
    return NULL;
}

int loom_plugin_register(loom_plugin *p, const loom_template *t)
{
    if (!p)
        return -1;
    if (p->err[0]) /* one refusal is reported: the first */
        return -1;
    char why[900];
    if (loom_template_validate(t, why, sizeof why)) {
        snprintf(p->err, sizeof p->err, "%s", why);
        return -1;
    }
    const char *who = holder(t->name);
    for (int i = 0; i < p->n && !who; i++)
        if (!strcmp(p->t[i]->name, t->name))
            who = p->t[i] == t ? "this template, registered twice" : "another template of this plugin";
    if (who) {
        snprintf(p->err, sizeof p->err, "template '%s': field 'name': '%s' is taken by %s", t->name, t->name, who);
        return -1;
    }
    if (p->n == PLUGIN_MAX_TEMPLATES) {
        snprintf(p->err, sizeof p->err, "template '%s': a plugin registers at most %d templates", t->name,
                 PLUGIN_MAX_TEMPLATES);
        return -1;
    }
    p->t[p->n++] = t;
    return 0;
}

#undef BAD
#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), LOOM_ERR_INVALID)

loom_status loom_plugin_load(const char *path, int *count, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen)
        err = dummy, errlen = sizeof dummy;
    err[0] = 0;
    if (count)
        *count = 0;
    if (!path || !*path)
        return FAIL("loom_plugin_load: no path");
    /* dlopen searches the library path for a name without '/': a file here is meant */
    char local[4096];
    struct stat sb;
    const char *open_path = path;
    if (!strchr(path, '/') && stat(path, &sb) == 0) {
        snprintf(local, sizeof local, "./%s", path);
        open_path = local;
    }
    dlerror();
    void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return FAIL("plugin %s: cannot load it: %s", path, dlerror());
    dlerror();
    char why[1024]; /* dlerror's text, kept before dlclose frees it */
    const char *version = dlsym(h, "loom_plugin_version");
    if (!version) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "its value is NULL");
        dlclose(h);
        return FAIL("plugin %s: no symbol 'loom_plugin_version' (%s): is it a loom plugin?  Its entry point is "
                    "written with LOOM_PLUGIN_INIT (loom.h), which also records the loom it was built against",
                    path, why);
    }
    if (strncmp(version, LOOM_VERSION, sizeof LOOM_VERSION)) {
        char v[32];
        snprintf(v, sizeof v, "%s", version); /* at most 31 characters of a string we cannot trust */
        dlclose(h);
        return FAIL("plugin %s was built against loom %s; this is loom %s: rebuild it with this loom's loom.h "
                    "(loom_template's layout may differ)", path, v, LOOM_VERSION);
    }
    dlerror();
    int (*init)(loom_plugin *) = NULL;
    *(void **)&init = dlsym(h, "loom_plugin_init");
    if (!init) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "its value is NULL");
        dlclose(h);
        return FAIL("plugin %s: no entry point 'loom_plugin_init' (%s): write it with LOOM_PLUGIN_INIT (loom.h)",
                    path, why);
    }
    loom_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        dlclose(h);
        return FAIL("plugin %s: out of host memory", path);
    }
    p->path = path;
    int rc = init(p);
    loom_status st = LOOM_OK;
    if (p->err[0])
        st = FAIL("plugin %s: %s", path, p->err);
    else if (rc != 0)
        st = FAIL("plugin %s: loom_plugin_init returned %d (not 0)", path, rc);
    else if (p->n == 0)
        st = FAIL("plugin %s: loom_plugin_init registered no template (loom_plugin_register)", path);
    const loom_template **grown = NULL;
    if (st == LOOM_OK) {
        grown = realloc(loaded, (size_t)(nloaded + p->n) * sizeof *grown);
        if (!grown)
            st = FAIL("plugin %s: out of host memory", path);
    }
    if (st != LOOM_OK) {
        free(p);
        dlclose(h);
        return st;
    }
    loaded = grown;
    memcpy(loaded + nloaded, p->t, (size_t)p->n * sizeof *p->t);
    nloaded += p->n;
    if (count)
        *count = p->n;
    free(p);
    return LOOM_OK; /* h stays open: the templates are its */
}
#undef FAIL

static int parse_value(const char *key, const char *v, int64_t *out)
{
    for (int t = 0; t < LOOM_DTYPE_COUNT; t++)
        if (strcmp(v, loom_dtype_name((loom_dtype)t)) == 0 && strstr(key, "dtype")) {
            *out = t;
            return 0;
        }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (end == v || *end || errno == ERANGE)
        return -1;
    if (x > LOOM_PARAM_MAX || x < -LOOM_PARAM_MAX) /* beyond any size: templates' arithmetic would overflow */
        return -2;
    *out = x;
    return 0;
}

int loom_params_parse(const loom_param *params, int n, const char *text, int64_t *vals, char *err,
                      size_t errlen)
{
    for (int i = 0; i < n; i++)
        vals[i] = params[i].def;
    if (!text || !*text)
        return 0;
    char *copy = strdup(text);
    if (!copy)
        return -1;
    int rc = 0;
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "'%s' is not key=value", item);
            rc = -1;
            break;
        }
        *eq = 0;
        int found = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(params[i].key, item) == 0)
                found = i;
        if (found < 0) {
            size_t p = (size_t)snprintf(err, errlen, "unknown key '%s' (known:", item);
            for (int i = 0; i < n && p < errlen; i++)
                p += (size_t)snprintf(err + p, errlen - p, " %s", params[i].key);
            if (p < errlen)
                snprintf(err + p, errlen - p, ")");
            rc = -1;
            break;
        }
        int pv = parse_value(item, eq + 1, &vals[found]);
        if (pv == -2) {
            snprintf(err, errlen, "%s=%s is out of range (at most 2^40 in magnitude)", item, eq + 1);
            rc = -1;
            break;
        }
        if (pv != 0) {
            snprintf(err, errlen, "bad value '%s' for key '%s'%s", eq + 1, item,
                     strstr(item, "dtype") ? " (f16, bf16, f32, i32, i64 or i1)" : " (an integer)");
            rc = -1;
            break;
        }
    }
    free(copy);
    return rc;
}

void loom_params_format(const loom_param *params, int n, const int64_t *vals, char *buf, size_t len)
{
    if (!buf || !len)
        return;
    buf[0] = 0;
    size_t p = 0;
    for (int i = 0; i < n && p < len; i++) {
        const char *sep = i ? "," : "";
        if (strstr(params[i].key, "dtype") && vals[i] >= 0 && vals[i] < LOOM_DTYPE_COUNT)
            p += (size_t)snprintf(buf + p, len - p, "%s%s=%s", sep, params[i].key,
                                  loom_dtype_name((loom_dtype)vals[i]));
        else
            p += (size_t)snprintf(buf + p, len - p, "%s%s=%lld", sep, params[i].key, (long long)vals[i]);
    }
}

void loom_instance_destroy(loom_instance *in)
{
    if (!in)
        return;
    for (int i = 0; i < in->nargs; i++) {
        loom_buffer_destroy(in->buf[i]);
        if (in->info[i].is_tensor)
            free(in->host[i]);
    }
    loom_kernel_destroy(in->kernel);
    memset(in, 0, sizeof *in);
}

loom_status loom_instance_create(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                 const int64_t *config, uint64_t seed, loom_instance *in,
                                 char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    char why[1024] = "";
    in->kernel = t->build(shape, config, why, sizeof why);
    if (!in->kernel) {
        snprintf(err, errlen, "%s: refused: %s", t->name, why);
        return LOOM_ERR_INVALID;
    }
    if (loom_verify(in->kernel) != LOOM_OK) {
        snprintf(err, errlen, "%s: %s", t->name, loom_kernel_errors(in->kernel));
        loom_instance_destroy(in);
        return LOOM_ERR_VERIFY;
    }
    in->nargs = loom_kernel_num_args(in->kernel);
    for (int i = 0; i < in->nargs; i++) {
        loom_kernel_arg_info(in->kernel, i, &in->info[i]);
        in->host[i] = in->info[i].is_tensor ? calloc(1, in->info[i].min_bytes) : &in->scalars[i];
        if (!in->host[i]) {
            snprintf(err, errlen, "%s: out of host memory", t->name);
            loom_instance_destroy(in);
            return LOOM_ERR_NOMEM;
        }
    }
    t->init(shape, in->host, seed);
    loom_status st = LOOM_OK;
    for (int i = 0; i < in->nargs && st == LOOM_OK; i++) {
        const loom_arg_info *ai = &in->info[i];
        if (!ai->is_tensor) {
            in->args[i] = (loom_arg){.buf = NULL};
            memcpy(&in->args[i].s, &in->scalars[i], sizeof in->args[i].s);
            continue;
        }
        in->bytes += ai->min_bytes;
        in->buf[i] = loom_buffer_create(rt, ai->min_bytes);
        st = in->buf[i] ? loom_buffer_upload(in->buf[i], in->host[i], ai->min_bytes) : LOOM_ERR_NOMEM;
        if (st == LOOM_OK && ai->access == LOOM_OUT)
            st = loom_buffer_fill(in->buf[i], 0xff); /* poison: NaN / -1 everywhere */
        in->args[i] = LOOM_ARG_BUF(in->buf[i]);
    }
    if (st != LOOM_OK) {
        snprintf(err, errlen, "%s: setup failed (%s): %s", t->name, loom_status_name(st),
                 loom_runtime_error(rt));
        loom_instance_destroy(in);
        return st;
    }
    t->grid(shape, config, in->grid);
    return LOOM_OK;
}

loom_status tpl_not_tuned(const char *op, const loom_tuned *r)
{
    fprintf(stderr, "loom: warning: %s: %s (%s) was not tuned, the default config runs: %s\n", op,
            r->t ? r->t->name : "?", loom_status_name(LOOM_ERR_NOT_TUNED), r->note);
    return LOOM_OK;
}

/* A checked output: an output the template does not leave alone. */
static bool checked(const loom_template *t, const loom_instance *in, int i)
{
    return in->info[i].is_tensor && (in->info[i].access & LOOM_OUT) && !(t->unchecked >> i & 1);
}

static int64_t elements(const loom_arg_info *ai) { return (int64_t)(ai->min_bytes / loom_dtype_size(ai->dtype)); }

void loom_expected_destroy(loom_expected *e)
{
    for (int i = 0; i < LOOM_MAX_ARGS; i++) {
        free(e->ref[i]);
        free(e->bound[i]);
    }
    memset(e, 0, sizeof *e);
}

loom_status loom_expected_create(const loom_template *t, const int64_t *shape, const loom_instance *in,
                                 loom_expected *e)
{
    memset(e, 0, sizeof *e);
    /* reference() is given a buffer for every output (it may write unchecked ones too) */
    void *ref[LOOM_MAX_ARGS] = {0};
    double *bnd[LOOM_MAX_ARGS] = {0};
    for (int i = 0; i < in->nargs; i++) {
        const loom_arg_info *ai = &in->info[i];
        if (!ai->is_tensor || !(ai->access & LOOM_OUT))
            continue;
        if (!(ref[i] = e->ref[i] = calloc(1, ai->min_bytes)))
            goto nomem;
        if (checked(t, in, i) && !(bnd[i] = e->bound[i] = calloc((size_t)elements(ai) + 1, sizeof(double))))
            goto nomem;
    }
    t->reference(shape, in->host, ref);
    if (t->bound) {
        t->bound(shape, in->host, ref, bnd);
    } else {
        for (int i = 0; i < in->nargs; i++)
            if (bnd[i])
                for (int64_t x = 0; x < elements(&in->info[i]); x++)
                    bnd[i][x] = t->atol + t->rtol * fabs(tpl_get(ref[i], in->info[i].dtype, x));
    }
    for (int i = 0; i < in->nargs; i++) /* only the checked outputs stay */
        if (e->ref[i] && !checked(t, in, i)) {
            free(e->ref[i]);
            e->ref[i] = NULL;
        }
    return LOOM_OK;
nomem:
    loom_expected_destroy(e);
    return LOOM_ERR_NOMEM;
}

/* loom_expected_compare, its report's verdict followed by " on <where>" when where is given. */
static int64_t compare(const loom_template *t, const loom_instance *in, const loom_expected *e, void *const *got,
                       const char *where, char *report, size_t n)
{
    int64_t bad = 0, total = 0;
    double worst = 0, worst_err = 0; /* the largest |err| / bound, and that |err| */
    char first[300] = "";
    for (int i = 0; i < in->nargs; i++) {
        if (!e->ref[i] || !e->bound[i] || !got[i])
            continue;
        const loom_arg_info *ai = &in->info[i];
        for (int64_t x = 0; x < elements(ai); x++) {
            double g = tpl_get(got[i], ai->dtype, x), r = tpl_get(e->ref[i], ai->dtype, x), b = e->bound[i][x];
            double d = fabs(g - r);
            bool ok = (isnan(g) && isnan(r)) || d <= b; /* a NaN or an infinite difference fails */
            double ratio = isnan(g) && isnan(r) ? 0 : b > 0 ? d / b : d > 0 ? INFINITY : 0;
            if (isnan(ratio))
                ratio = INFINITY;
            total++;
            if (!ok) {
                if (!bad)
                    snprintf(first, sizeof first, " (first: %s[%lld] = %.9g, expected %.9g within %.3g)", ai->name,
                             (long long)x, g, r, b);
                bad++;
            }
            if (ratio > worst) {
                worst = ratio;
                worst_err = d;
            }
        }
    }
    snprintf(report, n, "%s: %s%s%s: %lld of %lld elements outside their error bound (%s), worst |err|/bound %.3g "
             "(|err| %.3g)%s", t->name, bad ? "FAIL" : "ok", where ? " on " : "", where ? where : "", (long long)bad,
             (long long)total, t->bound ? "docs/checks.md" : "atol + rtol |ref|", worst, worst_err, first);
    return bad;
}

int64_t loom_expected_compare(const loom_template *t, const loom_instance *in, const loom_expected *e,
                              void *const *got, char *report, size_t n)
{
    return compare(t, in, e, got, NULL, report, n);
}

loom_status loom_template_check(loom_runtime *rt, const loom_template *t, const int64_t *shape,
                                const int64_t *config, uint64_t seed, char *report, size_t n)
{
    loom_instance in;
    loom_status st = loom_instance_create(rt, t, shape, config, seed, &in, report, n);
    if (st != LOOM_OK)
        return st;
    void *got[LOOM_MAX_ARGS] = {0};
    loom_expected e = {0};
    st = loom_launch(rt, in.kernel, in.grid, in.args, in.nargs);
    if (st != LOOM_OK)
        snprintf(report, n, "%s: launch failed (%s): %s", t->name, loom_status_name(st), loom_runtime_error(rt));
    if (st == LOOM_OK && (st = loom_expected_create(t, shape, &in, &e)) != LOOM_OK)
        snprintf(report, n, "%s: out of host memory for the reference", t->name);
    for (int i = 0; i < in.nargs && st == LOOM_OK; i++) {
        if (!e.ref[i])
            continue;
        if (!(got[i] = malloc(in.info[i].min_bytes)))
            st = LOOM_ERR_NOMEM;
        else
            st = loom_buffer_download(in.buf[i], got[i], in.info[i].min_bytes);
        if (st != LOOM_OK)
            snprintf(report, n, "%s: reading output '%s' back: %s", t->name, in.info[i].name,
                     st == LOOM_ERR_NOMEM ? "out of host memory" : loom_runtime_error(rt));
    }
    if (st == LOOM_OK && compare(t, &in, &e, got, loom_runtime_device_name(rt), report, n))
        st = LOOM_ERR_RUNTIME;
    for (int i = 0; i < in.nargs; i++)
        free(got[i]);
    loom_expected_destroy(&e);
    loom_instance_destroy(&in);
    return st;
}
