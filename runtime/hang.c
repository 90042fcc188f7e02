/*
 * hang.c -- the host side of the hang check (hang.h): a kernel's wait sites, the record
 * in host-mapped memory a stuck kernel writes before it traps, and the report made from
 * them.
 *
 * Why host-mapped memory: `trap` leaves the context with a sticky error, after which no
 * copy from the device works.  The record is pinned host memory the device writes
 * through (cuMemHostAlloc with DEVICEMAP), so the host reads it with a plain load after
 * the launch or the synchronization that saw the error (cu_fail, driver.c).  One record
 * per rt_gpu: the first thread to time out takes it, and the trap ends every kernel of
 * the context anyway.  Each module gets a tag (its CG_HANG_GLOBAL's second word) that
 * says whose sites the record's op index is one of.
 *
 * The words are the interpreter's (dsl/ir.h: ir_words_*): a hang on the GPU and a
 * deadlock in the interpreter name the task, the barrier and the lines alike.
 */
#include "codegen.h"
#include "driver.h"
#include "hang.h"
#include "../dsl/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- sites */

void rt_hang_sites_free(rt_hang_sites *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++) {
        free(t->s[i].label);
        free(t->s[i].file);
        free(t->s[i].task_file);
    }
    free(t->s);
    free(t->kernel);
    free(t);
}

/* The task op holding op o (0: none, the kernel body). */
static uint32_t task_of(const loom_kernel *k, uint32_t o)
{
    for (uint32_t b = k->ops[o].block; b > 1 && b < k->nblocks;) {
        uint32_t p = k->blocks[b].parent;
        if (!p || p >= k->nops)
            break;
        if (k->ops[p].kind == IR_TASK)
            return p;
        b = k->ops[p].block;
    }
    return 0;
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    *oom |= !d;
    return d;
}

rt_hang_sites *rt_hang_sites_make(loom_kernel *k)
{
    rt_hang_sites *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (!(t->kernel = strdup(loom_kernel_name(k)))) {
        free(t);
        return NULL;
    }
    int cap = 0;
    for (uint32_t o = 1; o < k->nops; o++)
        cap += k->ops[o].kind == IR_MBAR_WAIT || k->ops[o].kind == IR_FLAG_WAIT;
    if (!cap)
        return t;
    t->s = calloc((size_t)cap, sizeof *t->s);
    if (!t->s) {
        rt_hang_sites_free(t);
        return NULL;
    }
    bool oom = false;
    uint32_t last_bars = 0; /* ir_value_label prints the kernel: once per barrier array run */
    char label[128] = "";
    for (uint32_t o = 1; o < k->nops && !oom; o++) {
        const ir_op *op = &k->ops[o];
        if (op->kind != IR_MBAR_WAIT && op->kind != IR_FLAG_WAIT)
            continue;
        rt_hang_site *s = &t->s[t->n++];
        s->op = o;
        s->flag = op->kind == IR_FLAG_WAIT;
        if (s->flag) {
            const ir_value *v = &k->vals[op->opnd[0]];
            s->label = dup_or_null(v->name ? v->name : "flags", &oom);
        } else {
            if (op->opnd[0] != last_bars) {
                ir_value_label(k, op->opnd[0], label, sizeof label);
                last_bars = op->opnd[0];
            }
            s->label = dup_or_null(label, &oom);
        }
        s->file = dup_or_null(op->src.file ? op->src.file : "?", &oom);
        s->line = op->src.line;
        uint32_t to = task_of(k, o);
        if (to) {
            s->task_file = dup_or_null(k->ops[to].src.file ? k->ops[to].src.file : "?", &oom);
            s->task_line = k->ops[to].src.line;
        }
    }
    if (oom) {
        rt_hang_sites_free(t);
        return NULL;
    }
    return t;
}

void rt_hang_sites_key(const rt_hang_sites *t, int hang_ms, char *buf, size_t n)
{
    /* the lines, as text, hashed: the build identity stays short */
    uint64_t h = mc_hash64(&hang_ms, sizeof hang_ms);
    for (int i = 0; t && i < t->n; i++) {
        char one[1200];
        int w = snprintf(one, sizeof one, "%u|%s:%d|%s:%d|%llx", t->s[i].op, t->s[i].file, t->s[i].line,
                         t->s[i].task_file ? t->s[i].task_file : "", t->s[i].task_line, (unsigned long long)h);
        h = mc_hash64(one, w > 0 ? (size_t)w < sizeof one ? (size_t)w : sizeof one - 1 : 0);
    }
    snprintf(buf, n, "hang_check=%dms sites=%016llx", hang_ms, (unsigned long long)h);
}

/* ---------------------------------------------------------------- the report */

bool rt_hang_format(const rt_hang_sites *t, const char *kernel, const uint32_t *rec, char *buf, size_t n)
{
    if (!rec || rec[CG_HANG_STATE] != CG_HANG_DONE)
        return false;
    const rt_hang_site *s = NULL;
    for (int i = 0; t && i < t->n && !s; i++)
        if (t->s[i].op == rec[CG_HANG_SITE])
            s = &t->s[i];
    char who[256], what[512], bar[160];
    int replica = (int)rec[CG_HANG_REPLICA];
    if (s && s->task_file)
        ir_words_task(who, sizeof who, s->task_file, s->task_line, replica);
    else
        snprintf(who, sizeof who, "kernel body");
    uint64_t a = (uint64_t)rec[CG_HANG_A_LO] | (uint64_t)rec[CG_HANG_A_HI] << 32;
    if (!s)
        snprintf(what, sizeof what, "in wait op %u (a kernel whose wait sites this runtime does not know)",
                 rec[CG_HANG_SITE]);
    else if (s->flag)
        ir_words_flag_wait(what, sizeof what, s->file, s->line, s->label, (long long)(int64_t)a,
                           (long long)(int32_t)rec[CG_HANG_B], (long long)(int32_t)rec[CG_HANG_C]);
    else
        ir_words_mbar_wait(what, sizeof what, ir_words_bar(bar, sizeof bar, s->label, (long long)a),
                           (int)rec[CG_HANG_B], s->file, s->line);
    snprintf(buf, n, "kernel '%s' hung: program (%u,%u,%u) %s, thread %u, waited more than %u ms %s",
             kernel && *kernel ? kernel : "?", rec[CG_HANG_CTA_X], rec[CG_HANG_CTA_Y], rec[CG_HANG_CTA_Z], who,
             rec[CG_HANG_THREAD], rec[CG_HANG_MS], what);
    return true;
}

/* ---------------------------------------------------------------- the record (GPU) */

loom_status rt_hang_open(rt_gpu *g, char *err, size_t errlen)
{
    void *p = NULL;
    CUresult r = cu.cuMemHostAlloc(&p, CG_HANG_WORDS * 4, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemHostAlloc of the hang check's record (LOOM_HANG_CHECK=%d)",
                       g->hang_ms);
    memset(p, 0, CG_HANG_WORDS * 4);
    CUdeviceptr d = 0;
    r = cu.cuMemHostGetDevicePointer_v2(&d, p, 0);
    if (r != CUDA_SUCCESS) {
        cu.cuMemFreeHost(p);
        return cu_fail(g, r, err, errlen, "cuMemHostGetDevicePointer of the hang check's record");
    }
    g->hang_rec = p;
    g->hang_dptr = d;
    return LOOM_OK;
}

void rt_hang_close(rt_gpu *g)
{
    if (g->hang_rec)
        cu.cuMemFreeHost(g->hang_rec);
    g->hang_rec = NULL;
}

loom_status rt_hang_attach(rt_gpu *g, CUmodule mod, const char *name, uint32_t *tag, char *err, size_t errlen)
{
    *tag = 0;
    if (!g->hang_rec)
        return LOOM_OK;
    CUdeviceptr gl = 0;
    size_t bytes = 0;
    CUresult r = cu.cuModuleGetGlobal_v2(&gl, &bytes, mod, CG_HANG_GLOBAL);
    if (r == CUDA_ERROR_NOT_FOUND)
        return LOOM_OK; /* a kernel without waits */
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuModuleGetGlobal(\"%s\") of kernel '%s'", CG_HANG_GLOBAL, name);
    *tag = __atomic_add_fetch(&g->hang_tags, 1, __ATOMIC_RELAXED);
    uint64_t v[2] = {g->hang_dptr, *tag};
    if (bytes < sizeof v) {
        snprintf(err, errlen, "kernel '%s': its %s holds %zu bytes, not %zu", name, CG_HANG_GLOBAL, bytes, sizeof v);
        return LOOM_ERR_COMPILE;
    }
    r = cu.cuMemcpyHtoD_v2(gl, v, sizeof v);
    if (r != CUDA_SUCCESS)
        return cu_fail(g, r, err, errlen, "cuMemcpyHtoD of kernel '%s''s %s", name, CG_HANG_GLOBAL);
    return LOOM_OK;
}

bool rt_hang_report(rt_gpu *g, char *buf, size_t n)
{
    if (!g || !g->hang_rec)
        return false;
    uint32_t rec[CG_HANG_WORDS];
    const volatile uint32_t *p = g->hang_rec; /* the device wrote it: read it as it is now */
    for (int i = 0; i < CG_HANG_WORDS; i++)
        rec[i] = p[i];
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (rec[CG_HANG_STATE] != CG_HANG_DONE)
        return false;
    /* whose sites: the module of that tag (the table only grows while g is open) */
    const rt_hang_sites *t = NULL;
    pthread_mutex_lock(&g->modules_lock);
    for (size_t i = 0; i < g->modules.n && !t; i++)
        if (g->modules.e[i].hang_tag && g->modules.e[i].hang_tag == rec[CG_HANG_TAG])
            t = g->modules.e[i].hang;
    bool ok = rt_hang_format(t, t ? t->kernel : g->last_kernel, rec, buf, n);
    pthread_mutex_unlock(&g->modules_lock);
    return ok;
}
