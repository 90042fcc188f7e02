/*
 * interp_smem.c -- the interpreter's Hopper state and shared memory: the per-run setup,
 * the rings of shared memory and their views, and the checks on their slots.
 *
 * How it works.  interp_hw_init gives a run (or each program of a side-by-side run) one
 * ring per smem_alloc and one barrier array per mbar_alloc of the kernel body, with room
 * for every slot; the allocation ops reset them when each CTA starts, so every CTA begins
 * with zeroed slots and fresh barriers.  A shared-memory value is a reference into a
 * ring (dsl/interp.h): smem_slot picks a slot, smem_trans sees it transposed, smem_part
 * a window of it, and interp_view_index maps an element as seen to where it is stored.
 * What a launch on the GPU refuses (a TMA tensor whose strides or base the descriptor
 * cannot encode) is refused here too, so a kernel that passes the interpreter can run.
 *
 * The checks.  Each slot remembers its last write (slot_meta), and each task replica the
 * slots its unretired asynchronous ops read (dsl/interp_hw.h):
 *   - visibility: a slot a TMA load (or a cluster store, smem_store_cluster) wrote may be
 *     read (smem load, wgmma, TMA store) by a replica only after one of its own waits on
 *     the writer's barrier observed the phase the bytes landed in complete;
 *   - write-after-read: writing a slot (TMA load, smem store) that a replica's wgmma
 *     group or TMA store still reads, before a wgmma_wait / tma_store_wait retired it, is
 *     a race, reported with both lines;
 *   - async proxy: a slot written by smem_store is read by wgmma or a TMA store only
 *     after the writing replica ran fence_async.
 */
#include "interp_hw.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- setup, teardown */

bool interp_grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np)
        return false;
    *p = np;
    *cap = nc;
    return true;
}

static void refuse(interp *in, const ir_op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(interp *in, const ir_op *op, const char *fmt, ...)
{
    char body[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    in->st = LOOM_ERR_INVALID;
    if (in->err && in->errlen)
        snprintf(in->err, in->errlen, "%s:%d: error: op '%s': launch refused: %s", file_of(op),
                 op->src.line, ir_opdescs[op->kind].name, body);
}

/* What a launch refuses on the GPU (the TMA descriptor cannot be encoded) is refused
 * here too, so a kernel that passes the interpreter can run. */
static bool check_tma_args(interp *in)
{
    loom_kernel *k = in->k;
    for (uint32_t o = 1; o < k->nops; o++) {
        const ir_op *op = &k->ops[o];
        if (!ir_is_tma_load(op->kind) && op->kind != IR_TMA_STORE)
            continue;
        uint32_t ai = k->vals[op->opnd[0]].def;
        const ir_arg *a = &k->args[ai];
        size_t sz = loom_dtype_size(a->dtype);
        for (int d = 0; d + 1 < a->shape.rank; d++)
            if ((a->strides[d] * (int64_t)sz) % 16) {
                refuse(in, op,
                       "argument '%s' has a stride of %lld elements (%lld bytes) in dim %d; a TMA "
                       "tensor needs strides that are multiples of 16 bytes",
                       a->name, (long long)a->strides[d], (long long)(a->strides[d] * (int64_t)sz), d);
                return false;
            }
        if ((uintptr_t)in->args[ai].data % 16) {
            refuse(in, op, "argument '%s' is not 16-byte aligned; a TMA tensor needs that", a->name);
            return false;
        }
    }
    return true;
}

bool interp_hw_init(interp *in)
{
    loom_kernel *k = in->k;
    bool any = false;
    for (uint32_t o = 1; o < k->nops && !any; o++)
        any = (ir_opdescs[k->ops[o].kind].flags & IRF_ALLOC) || k->ops[o].kind == IR_TASK;
    if (!any)
        return true;
    interp_hw *hw = calloc(1, sizeof *hw);
    if (!hw || !(hw->objof = calloc(k->nops, sizeof(int)))) {
        free(hw);
        in->st = LOOM_ERR_NOMEM;
        return false;
    }
    in->hw = hw;
    int caprings = 0, caparrs = 0;
    const ir_block *body = &k->blocks[1];
    for (uint32_t i = 0; i < body->nops; i++) {
        uint32_t o = body->ops[i];
        const ir_op *op = &k->ops[o];
        if (op->kind == IR_SMEM_ALLOC) {
            if (!interp_grow((void **)&hw->rings, &caprings, hw->nrings + 1, sizeof(ring)))
                goto oom;
            ring *g = &hw->rings[hw->nrings];
            const ir_type *t = &k->vals[op->res[0]].type;
            *g = (ring){.val = op->res[0], .dt = (loom_dtype)t->dtype, .shape = t->shape,
                        .slots = t->slots, .numel = ir_shape_numel(&t->shape)};
            size_t n = (size_t)(g->slots * g->numel);
            if (ir_dtype_is_float(g->dt))
                g->f = malloc(n * sizeof(float));
            else
                g->i = malloc(n * sizeof(int64_t));
            g->meta = malloc((size_t)g->slots * sizeof(slot_meta));
            hw->objof[o] = hw->nrings++;
            if ((!g->f && !g->i) || !g->meta)
                goto oom;
        } else if (op->kind == IR_MBAR_ALLOC) {
            if (!interp_grow((void **)&hw->arrs, &caparrs, hw->narrs + 1, sizeof(mbar_arr)))
                goto oom;
            hw->arrs[hw->narrs] = (mbar_arr){op->res[0], (int)op->iattr[0], hw->nbars};
            hw->nbars += (int)op->iattr[0];
            hw->objof[o] = hw->narrs++;
        }
    }
    if (hw->nbars && !(hw->bars = calloc((size_t)hw->nbars, sizeof(mbar))))
        goto oom;
    return check_tma_args(in);
oom:
    in->st = LOOM_ERR_NOMEM;
    return false;
}

void interp_hw_free(interp *in)
{
    interp_hw *hw = in->hw;
    if (!hw)
        return;
    for (int i = 0; i < hw->captasks; i++)
        if (hw->tasks[i])
            interp_task_free(in, hw->tasks[i]);
    free(hw->tasks);
    for (int r = 0; r < hw->nrings; r++) {
        free(hw->rings[r].f);
        free(hw->rings[r].i);
        free(hw->rings[r].meta);
    }
    free(hw->rings);
    free(hw->arrs);
    free(hw->bars);
    free(hw->objof);
    free(hw);
    in->hw = NULL;
}

/* ---------------------------------------------------------------- shared memory */

const char *interp_ring_name(interp *in, int r, char *buf, size_t n)
{
    return ir_value_label(in->k, in->hw->rings[r].val, buf, n);
}

/* Where element e (row-major over the view's shape as seen) lives in its slot: a
 * transposed view swaps its two dims; a part (loom_smem_part) is a window of the slot. */
int64_t interp_view_index(const ring *g, const tv *v, int64_t e)
{
    if (!v->trans && !v->pcols)
        return e;
    /* as stored; a transposed view is seen [cols, rows] */
    int64_t rows = v->pcols ? v->prows : g->shape.dim[0], cols = v->pcols ? v->pcols : g->shape.dim[1];
    int64_t x = v->trans ? (e % rows) * cols + e / rows : e;
    return v->pcols ? v->poff + (x / cols) * g->shape.dim[1] + x % cols : x;
}

static void copy_part(tv *t, const tv *v)
{
    t->poff = v->poff;
    t->prows = v->prows;
    t->pcols = v->pcols;
}

bool interp_smem_alloc(interp *in, const ir_op *op)
{
    int r = in->hw->objof[op_id(in, op)];
    ring *g = &in->hw->rings[r];
    size_t n = (size_t)(g->slots * g->numel);
    if (g->f)
        memset(g->f, 0, n * sizeof(float));
    else
        memset(g->i, 0, n * sizeof(int64_t));
    for (int s = 0; s < g->slots; s++)
        g->meta[s] = (slot_meta){.st_task = -1};
    tv *t = interp_res(in, op, 0);
    t->obj = r;
    t->sidx = g->slots == 1 ? 0 : -1;
    t->trans = false;
    t->poff = t->prows = t->pcols = 0;
    return true;
}

bool interp_smem_slot(interp *in, const ir_op *op)
{
    tv *ringv = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    int64_t i = interp_ival(interp_opnd(in, op, 1), 0);
    int64_t n = ringv->sidx < 0 ? ring_of(in, ringv)->slots : 1; /* a view is a ring of one */
    if (i < 0 || i >= n) {
        char b[96];
        return interp_fail(in, LOOM_ERR_BOUNDS, op, "slot %lld is outside %s, a ring of %lld slot%s",
                           (long long)i, interp_ring_name(in, ringv->obj, b, sizeof b), (long long)n,
                           n == 1 ? "" : "s");
    }
    t->obj = ringv->obj;
    t->sidx = ringv->sidx < 0 ? i : ringv->sidx;
    t->trans = false;
    copy_part(t, ringv);
    return true;
}

bool interp_smem_trans(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    t->obj = v->obj;
    t->sidx = slot_of(v);
    t->trans = !v->trans;
    copy_part(t, v);
    return true;
}

bool interp_smem_part(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *t = interp_res(in, op, 0);
    const ring *g = ring_of(in, v);
    int64_t rows = v->pcols ? v->prows : g->shape.dim[0], cols = v->pcols ? v->pcols : g->shape.dim[1];
    int64_t off = v->pcols ? v->poff : 0;
    if (op->iattr[0] == 0) {
        off += op->iattr[1] * g->shape.dim[1];
        rows = op->iattr[2];
    } else {
        off += op->iattr[1];
        cols = op->iattr[2];
    }
    t->obj = v->obj;
    t->sidx = slot_of(v);
    t->trans = false;
    t->poff = off;
    t->prows = rows;
    t->pcols = cols;
    return true;
}

bool interp_smem_load(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *r = interp_res(in, op, 0);
    if (!interp_check_visible(in, op, v))
        return false;
    const ring *g = ring_of(in, v);
    int64_t base = slot_of(v) * g->numel;
    for (int64_t e = 0; e < r->n; e++) {
        int64_t x = base + interp_view_index(g, v, e);
        if (r->f)
            r->f[e] = g->f[x];
        else
            r->i[e] = g->i[x];
    }
    return true;
}

bool interp_smem_store(interp *in, const ir_op *op)
{
    tv *v = interp_opnd(in, op, 0), *x = interp_opnd(in, op, 1);
    if (!interp_check_overwrite(in, op, v))
        return false;
    ring *g = ring_of(in, v);
    int64_t base = slot_of(v) * g->numel;
    for (int64_t e = 0; e < x->n; e++) {
        int64_t at = base + interp_view_index(g, v, e);
        if (g->f)
            g->f[at] = x->f[e];
        else
            g->i[at] = x->i[e];
    }
    task *t = cur(in);
    g->meta[slot_of(v)] = (slot_meta){.st = op, .st_task = t ? t->index : -1,
                                      .st_fences = t ? t->fences : 0};
    return true;
}

/* ---------------------------------------------------------------- the checks */

/* A TMA write (or a cluster store's) into slot s of ring r may be read by the calling
 * replica only after one of its waits observed the phase the bytes landed in complete. */
bool interp_check_visible(interp *in, const ir_op *op, const tv *v)
{
    task *t = cur(in);
    const slot_meta *m = &ring_of(in, v)->meta[slot_of(v)];
    if (!t || !m->tma || t->seen[m->bar] >= m->phase + 1)
        return true;
    char rb[96], bb[128];
    return interp_fail(in, LOOM_ERR_RUNTIME, op,
                       "reads %s slot %lld (written by %s at %s:%d) that no wait has made "
                       "visible to this task: its bytes land in phase %lld of barrier %s, and this "
                       "task's waits on that barrier have seen %lld phase%s complete (loom_mbar_wait "
                       "on it first)",
                       interp_ring_name(in, v->obj, rb, sizeof rb), (long long)slot_of(v),
                       ir_opdescs[m->tma->kind].name, file_of(m->tma),
                       m->tma->src.line, (long long)m->phase, interp_bar_name(in, m->bar, bb, sizeof bb),
                       (long long)t->seen[m->bar], t->seen[m->bar] == 1 ? "" : "s");
}

/* Async-proxy reads (wgmma, TMA store) see a slot written by smem_store only after the
 * writing replica fenced. */
bool interp_check_fenced(interp *in, const ir_op *op, const tv *v)
{
    const slot_meta *m = &ring_of(in, v)->meta[slot_of(v)];
    if (!m->st || m->st_task < 0 || m->st_task >= in->hw->ntasks)
        return true;
    const task *w = in->hw->tasks[m->st_task];
    if (w->fences > m->st_fences)
        return true;
    char rb[96], who[200] = " by this task";
    if (w != cur(in)) {
        char tb[160];
        snprintf(who, sizeof who, " by the %s", interp_task_name(w, tb, sizeof tb));
    }
    return interp_fail(in, LOOM_ERR_RUNTIME, op,
                       "reads %s slot %lld, written by smem_store at %s:%d%s with no loom_fence_async "
                       "after it: wgmma and TMA stores read shared memory through the async proxy, "
                       "which sees a task's stores only after it fences them",
                       interp_ring_name(in, v->obj, rb, sizeof rb), (long long)slot_of(v), file_of(m->st),
                       m->st->src.line, who);
}

/* View v's window in its slot, as stored (a ring's slots are 2-D tiles; other shapes:
 * the whole slot). */
static win window_of(interp *in, const tv *v)
{
    const ring *g = ring_of(in, v);
    if (!v->pcols || g->shape.rank != 2)
        return (win){0, INT64_MAX, 0, INT64_MAX};
    int64_t cols = g->shape.dim[1], r0 = v->poff / cols, c0 = v->poff % cols;
    return (win){r0, r0 + v->prows, c0, c0 + v->pcols};
}

static bool overlap(win a, win b) { return a.r0 < b.r1 && b.r0 < a.r1 && a.c0 < b.c1 && b.c0 < a.c1; }

/* Writing (view v) a part of a slot that an unretired wgmma group or TMA store of any
 * replica still reads is a write-after-read race; so is an smem_store (all the replica's
 * threads write) into a part a TMA store of the same replica read, retired by a wait in
 * its issuing thread, before the replica's threads met.  Disjoint windows of one slot
 * (loom_smem_part) do not race. */
bool interp_check_overwrite(interp *in, const ir_op *op, const tv *v)
{
    interp_hw *hw = in->hw;
    int r = v->obj;
    int64_t s = slot_of(v);
    win w = window_of(in, v);
    for (int ti = 0; ti < hw->ntasks; ti++) {
        const task *t = hw->tasks[ti];
        for (int j = 0; j < t->nreads; j++) {
            const rd *e = &t->reads[j];
            if (e->ring != r || e->slot != s || !overlap(e->w, w))
                continue;
            if (!rd_live(t, e)) {
                if (t != cur(in) || op->kind != IR_SMEM_STORE || t->op->iattr[0] < 2)
                    continue;
                char rb[96];
                return interp_fail(in, LOOM_ERR_RUNTIME, op,
                                   "overwrites %s slot %lld, which the tma_store at %s:%d may still read for all "
                                   "this task's other threads know: loom_tma_store_wait waits in the one thread "
                                   "that issued the store (cp.async.bulk.wait_group.read); meet the task's threads "
                                   "at a named barrier (loom_named_barrier, loom_sync_wait) after the wait, before "
                                   "they write the slot (a write-after-read race)",
                                   interp_ring_name(in, r, rb, sizeof rb), (long long)s, file_of(e->op),
                                   e->op->src.line);
            }
            char rb[96], tb[160];
            return interp_fail(
                in, LOOM_ERR_RUNTIME, op,
                "overwrites %s slot %lld while the %s at %s:%d (%s) may still read it: %s (a "
                "write-after-read race)",
                interp_ring_name(in, r, rb, sizeof rb), (long long)s, e->store ? "tma_store" : "wgmma",
                file_of(e->op), e->op->src.line, interp_task_name(t, tb, sizeof tb),
                e->store ? "no loom_tma_store_wait has retired it"
                         : "no loom_wgmma_wait has retired its group");
        }
    }
    return true;
}

bool interp_add_read(interp *in, const ir_op *op, task *t, const tv *v, int64_t seq, bool store)
{
    if (!interp_grow((void **)&t->reads, &t->capreads, t->nreads + 1, sizeof(rd)))
        return interp_fail(in, LOOM_ERR_NOMEM, op, "out of memory");
    t->reads[t->nreads++] = (rd){v->obj, slot_of(v), window_of(in, v), op, seq, store};
    return true;
}

/* Keep t's unretired reads, and its retired TMA store reads too where keep_stores. */
static void keep_reads(task *t, bool keep_stores)
{
    int n = 0;
    for (int j = 0; j < t->nreads; j++)
        if (rd_live(t, &t->reads[j]) || (keep_stores && t->reads[j].store))
            t->reads[n++] = t->reads[j];
    t->nreads = n;
}

/* Forget the reads that waits have retired (a TMA store's: once the task's threads met). */
void interp_prune_reads(task *t) { keep_reads(t, true); }

void interp_sync_reads(task *t) { keep_reads(t, false); }
