/*
 * interp_async.c -- the semantics of the interpreter's asynchronous Hopper ops:
 * mbarriers, named barriers, fences, TMA loads and stores, wgmma.
 *
 * How it works.  Asynchronous work completes when it is issued (dsl/interp_hw.h): a TMA
 * load copies its box into its view and completes its bytes on the barrier at once, a
 * wgmma computes acc + a @ b at once, in k order like loom_dot.  What the hardware leaves
 * unordered is checked through dsl/interp_smem.c (visibility, fences, write-after-read)
 * and the accounting below; a wait that cannot pass yet blocks its replica
 * (dsl/interp_tasks.c), which the scheduler resumes once the barrier moved.
 *
 * Barrier model (per mbarrier): A arrivals a phase, `pending` arrivals still to come,
 * `tx` bytes still to land (negative while loads land before their expect), `completed`
 * phases.  A phase completes when pending == 0 and tx == 0; then completed++, pending =
 * A.  A wait on parity P passes when P != (completed & 1).  Reported at once: an arrival
 * beyond a phase's count, a replica arriving twice in one phase, and bytes landing that
 * no expect announced.  In a cluster, mbar_arrive_cluster, tma_load_multicast and
 * smem_store_cluster act on the barrier (and view) of every CTA of the cluster, each one
 * a program run side by side (interp_peer); a cluster store's bytes land like a TMA
 * load's (land), so the same visibility check guards the slot it wrote.
 *
 * wgmma groups: each wgmma's slots stay read by its replica's open group (an A in
 * registers is read when the wgmma is issued and stays in no group); wgmma_commit
 * closes the group, wgmma_wait(pending) retires the oldest until at most `pending` are
 * in flight.  TMA stores count the same way with tma_store_wait.
 */
#include "interp_hw.h"

#include <math.h>
#include <stdio.h>

/* The ops that call this run only in task replicas (their rules see to it). */
static bool need_task(interp *in, const ir_op *op)
{
    if (cur(in))
        return true;
    return interp_fail(in, LOOM_ERR_RUNTIME, op, "internal: runs outside a task");
}

/* ---------------------------------------------------------------- mbarriers */

/* "%full[1]" */
const char *interp_bar_name(interp *in, int gb, char *buf, size_t n)
{
    for (int a = 0; a < in->hw->narrs; a++) {
        const mbar_arr *ar = &in->hw->arrs[a];
        if (gb >= ar->base && gb < ar->base + ar->count) {
            char v[96];
            return ir_words_bar(buf, n, ir_value_label(in->k, ar->val, v, sizeof v), gb - ar->base);
        }
    }
    snprintf(buf, n, "barrier #%d", gb);
    return buf;
}

/* Barrier `first+1` of array `first`, bounds-checked; its index into hw->bars in *gb. */
static mbar *bar_at(interp *in, const ir_op *op, int first, int *gb)
{
    const tv *b = interp_opnd(in, op, first);
    int64_t i = interp_ival(interp_opnd(in, op, first + 1), 0);
    const mbar_arr *a = &in->hw->arrs[b->obj];
    if (i < 0 || i >= a->count) {
        char v[96];
        interp_fail(in, LOOM_ERR_BOUNDS, op, "barrier index %lld is outside %s, an array of %d barriers",
                    (long long)i, ir_value_label(in->k, a->val, v, sizeof v), a->count);
        return NULL;
    }
    *gb = a->base + (int)i;
    return &in->hw->bars[*gb];
}

bool interp_mbar_alloc(interp *in, const ir_op *op)
{
    int a = in->hw->objof[op_id(in, op)];
    const mbar_arr *ar = &in->hw->arrs[a];
    for (int i = 0; i < ar->count; i++)
        in->hw->bars[ar->base + i] = (mbar){.arrivals = op->iattr[1], .pending = op->iattr[1]};
    interp_res(in, op, 0)->obj = a;
    return true;
}

/* Complete the phase if its arrivals are made and its bytes landed. */
static bool settle(interp *in, const ir_op *op, int gb)
{
    mbar *b = &in->hw->bars[gb];
    if (b->pending > 0 || b->tx > 0)
        return true;
    if (b->tx < 0) {
        char bb[128];
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "barrier %s: %lld bytes landed in its phase %lld but its %lld arrivals "
                           "announced %lld: bytes that no loom_mbar_expect announced (a TMA load "
                           "counts its whole box, a cluster store its view in each CTA)",
                           interp_bar_name(in, gb, bb, sizeof bb), (long long)b->landed,
                           (long long)b->completed, (long long)b->arrivals, (long long)b->expected);
    }
    b->completed++;
    b->pending = b->arrivals;
    b->tx = b->expected = b->landed = 0;
    return true;
}

/* One arrival of the running replica on barrier gb of CTA dst (this one, or the peer of
 * rank q in its cluster). */
static bool arrive_on(interp *in, interp *dst, int q, const ir_op *op, int gb, int64_t bytes)
{
    task *t = cur(in);
    mbar *b = &dst->hw->bars[gb];
    int64_t *mark = &t->arrived[(int64_t)q * (in->hw->nbars + 1) + gb];
    char bb[128], tb[160];
    if (*mark == b->completed + 1)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "arrival overflow on barrier %s: the %s arrives a second time in its "
                           "phase %lld (each task replica makes one arrival a phase; the barrier "
                           "counts %lld)",
                           interp_bar_name(in, gb, bb, sizeof bb), interp_task_name(t, tb, sizeof tb),
                           (long long)b->completed, (long long)b->arrivals);
    if (b->pending == 0)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "arrival overflow on barrier %s: its phase %lld already has all %lld "
                           "arrivals (it waits for %lld more bytes)",
                           interp_bar_name(in, gb, bb, sizeof bb), (long long)b->completed,
                           (long long)b->arrivals, (long long)b->tx);
    b->tx += bytes;
    b->expected += bytes;
    b->pending--;
    *mark = b->completed + 1;
    return interp_from_peer(in, dst, settle(dst, op, gb));
}

static bool arrive(interp *in, const ir_op *op, int64_t bytes)
{
    int gb;
    if (!need_task(in, op) || !bar_at(in, op, 0, &gb))
        return false;
    return arrive_on(in, in, 0, op, gb, bytes);
}

bool interp_mbar_expect(interp *in, const ir_op *op) { return arrive(in, op, op->iattr[0]); }

bool interp_mbar_arrive(interp *in, const ir_op *op) { return arrive(in, op, 0); }

/* An arrival on barrier i in every CTA of the cluster. */
bool interp_mbar_arrive_cluster(interp *in, const ir_op *op)
{
    int gb;
    if (!need_task(in, op) || !bar_at(in, op, 0, &gb))
        return false;
    for (int q = 0; q < in->k->cluster; q++)
        if (!arrive_on(in, interp_peer(in, q), q, op, gb, 0))
            return false;
    return true;
}

bool interp_mbar_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    int gb;
    mbar *b;
    if (!need_task(in, op) || !(b = bar_at(in, op, 0, &gb)))
        return false;
    int64_t p = interp_ival(interp_opnd(in, op, 2), 0);
    if (p != 0 && p != 1)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "the phase parity is %lld; it must be 0 or 1 (loom_ring_phase gives it)",
                           (long long)p);
    while ((b->completed & 1) == p) {
        t->wait_op = op;
        t->wait_bar = gb;
        t->wait_parity = (int)p;
        t->wait_nb = -1;
        interp_block(in, t);
    }
    if (b->completed > t->seen[gb])
        t->seen[gb] = b->completed;
    interp_sync_reads(t); /* the task's threads all waited */
    return true;
}

/* A replica's threads reach named barrier op->iattr[0] (of op->iattr[1] threads): the
 * arrival that completes it starts its next generation; a sync (wait) blocks until then,
 * an arrive does not. */
static bool named_barrier(interp *in, const ir_op *op, bool wait)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    int id = (int)op->iattr[0];
    int64_t want = op->iattr[1], mine = t->op->iattr[0] * 32;
    nbar *nb = &in->hw->nb[id];
    if (mine > want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "this task replica has %lld threads, more than the %lld named barrier %d "
                           "counts",
                           (long long)mine, (long long)want, id);
    if (nb->arrived && nb->target != want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "named barrier %d is used here for %lld threads, but the %lld threads "
                           "waiting on it now count %lld",
                           id, (long long)want, (long long)nb->arrived, (long long)nb->target);
    nb->target = want;
    nb->arrived += mine;
    if (nb->arrived > want)
        return interp_fail(in, LOOM_ERR_RUNTIME, op,
                           "named barrier %d: %lld threads arrived but it completes at %lld",
                           id, (long long)nb->arrived, (long long)want);
    if (nb->arrived == want) {
        nb->arrived = 0;
        nb->gen++;
        if (wait)
            interp_sync_reads(t); /* the task's threads met */
        return true;
    }
    if (!wait)
        return true;
    t->wait_op = op;
    t->wait_nb = id;
    t->wait_gen = nb->gen;
    while (nb->gen == t->wait_gen)
        interp_block(in, t);
    t->wait_nb = -1;
    interp_sync_reads(t); /* the task's threads met */
    return true;
}

bool interp_named_barrier(interp *in, const ir_op *op) { return named_barrier(in, op, true); }

bool interp_named_barrier_arrive(interp *in, const ir_op *op) { return named_barrier(in, op, false); }

bool interp_fence_async(interp *in, const ir_op *op)
{
    if (!need_task(in, op))
        return false;
    cur(in)->fences++;
    return true;
}

/* ---------------------------------------------------------------- TMA */

/* Element e of the box at `base` (the view's shape right-aligned to the tensor's dims):
 * its linear offset in the tensor, or -1 when it falls outside. */
static int64_t box_elem(tref tr, const loom_shape *box, const int64_t *base, int64_t e)
{
    int r = tr.arg->shape.rank, lead = r - box->rank;
    int64_t idx[LOOM_MAX_RANK], off = 0;
    interp_unravel(box, e, idx);
    for (int d = 0; d < r; d++) {
        int64_t x = base[d] + (d >= lead ? idx[d - lead] : 0);
        if (x < 0 || x >= tr.arg->shape.dim[d])
            return -1;
        off += x * tr.arg->strides[d];
    }
    return off;
}

/* Bytes that op (a TMA load or a cluster store) wrote into view v of CTA dst have landed:
 * the slot remembers its writer and the phase they land in (the visibility check), and
 * they complete on barrier gb of dst, which may end its phase. */
static bool land(interp *in, interp *dst, const ir_op *op, const tv *v, int gb, int64_t bytes)
{
    mbar *b = &dst->hw->bars[gb];
    dst->hw->rings[v->obj].meta[slot_of(v)] = (slot_meta){.tma = op, .bar = gb, .phase = b->completed,
                                                           .st_task = -1};
    b->tx -= bytes;
    b->landed += bytes;
    return interp_from_peer(in, dst, settle(dst, op, gb));
}

/* The box of a TMA load lands in view v of CTA dst (this one, or a peer in its cluster)
 * and completes on that CTA's barrier gb. */
static bool tma_land(interp *in, interp *dst, const ir_op *op, const tv *v, int gb)
{
    tref tr = interp_tensor_of(in, op);
    int r = tr.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    for (int d = 0; d < r; d++)
        base[d] = interp_ival(interp_opnd(in, op, 1 + d), 0);
    if (!interp_from_peer(in, dst, interp_check_overwrite(dst, op, v)))
        return false;
    ring *g = &dst->hw->rings[v->obj];
    int64_t at = slot_of(v) * g->numel, n = ir_shape_numel(&v->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = box_elem(tr, &v->shape, base, e);
        float f = 0;
        int64_t i = 0;
        if (off >= 0 && !interp_mem_read(in, op, tr, off, &f, &i))
            return false;
        if (g->f)
            g->f[at + interp_view_index(g, v, e)] = f;
        else
            g->i[at + interp_view_index(g, v, e)] = i;
    }
    return land(in, dst, op, v, gb, n * (int64_t)loom_dtype_size(g->dt));
}

bool interp_tma_load(interp *in, const ir_op *op)
{
    int r = interp_tensor_of(in, op).arg->shape.rank, gb;
    if (!bar_at(in, op, 2 + r, &gb))
        return false;
    return tma_land(in, in, op, interp_opnd(in, op, 1 + r), gb);
}

/* The box lands in the same view of every CTA of the cluster, on each one's barrier. */
bool interp_tma_load_multicast(interp *in, const ir_op *op)
{
    int r = interp_tensor_of(in, op).arg->shape.rank, gb;
    if (!bar_at(in, op, 2 + r, &gb))
        return false;
    for (int q = 0; q < in->k->cluster; q++)
        if (!tma_land(in, interp_peer(in, q), op, interp_opnd(in, op, 1 + r), gb))
            return false;
    return true;
}

/* The value lands in the same view of every CTA of the cluster (this CTA's alone without
 * clusters), completing its bytes on each one's barrier i, as a multicast's box does. */
bool interp_smem_store_cluster(interp *in, const ir_op *op)
{
    int gb;
    if (!need_task(in, op) || !bar_at(in, op, 2, &gb))
        return false;
    const tv *v = interp_opnd(in, op, 0), *x = interp_opnd(in, op, 1);
    for (int q = 0; q < (in->k->cluster > 1 ? in->k->cluster : 1); q++) {
        interp *dst = interp_peer(in, q);
        if (!interp_from_peer(in, dst, interp_check_overwrite(dst, op, v)))
            return false;
        ring *g = &dst->hw->rings[v->obj];
        int64_t at = slot_of(v) * g->numel;
        for (int64_t e = 0; e < x->n; e++) {
            if (g->f)
                g->f[at + interp_view_index(g, v, e)] = x->f[e];
            else
                g->i[at + interp_view_index(g, v, e)] = x->i[e];
        }
        if (!land(in, dst, op, v, gb, x->n * (int64_t)loom_dtype_size(g->dt)))
            return false;
    }
    return true;
}

bool interp_tma_store(interp *in, const ir_op *op)
{
    task *t = cur(in);
    tref tr = interp_tensor_of(in, op);
    int r = tr.arg->shape.rank;
    int64_t base[LOOM_MAX_RANK];
    for (int d = 0; d < r; d++)
        base[d] = interp_ival(interp_opnd(in, op, 1 + d), 0);
    tv *v = interp_opnd(in, op, 1 + r);
    if (!need_task(in, op) || !interp_check_visible(in, op, v) || !interp_check_fenced(in, op, v))
        return false;
    const ring *g = ring_of(in, v);
    int64_t at = slot_of(v) * g->numel, n = ir_shape_numel(&v->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = box_elem(tr, &v->shape, base, e), x = at + interp_view_index(g, v, e);
        if (off >= 0 && !interp_mem_write(in, op, tr, off, g->f ? g->f[x] : 0, g->i ? g->i[x] : 0))
            return false;
    }
    return interp_add_read(in, op, t, v, t->st_issued++, true);
}

bool interp_tma_store_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    if (t->st_issued - op->iattr[0] > t->st_retired)
        t->st_retired = t->st_issued - op->iattr[0];
    interp_prune_reads(t);
    return true;
}

/* ---------------------------------------------------------------- wgmma */

/* Element (m, k) of a wgmma operand, a view of `cols` columns. */
static float operand_at(interp *in, const tv *x, int64_t m, int64_t k, int64_t cols)
{
    const ring *g = ring_of(in, x);
    return g->f[slot_of(x) * g->numel + interp_view_index(g, x, m * cols + k)];
}

bool interp_wgmma(interp *in, const ir_op *op)
{
    task *t = cur(in);
    tv *a = interp_opnd(in, op, 0), *b = interp_opnd(in, op, 1), *c = interp_opnd(in, op, 2);
    tv *r = interp_res(in, op, 0);
    bool a_regs = a->kind == IR_T_TILE; /* A from registers: read at issue, nothing in flight */
    if (!need_task(in, op) ||
        (!a_regs && (!interp_check_visible(in, op, a) || !interp_check_fenced(in, op, a))) ||
        !interp_check_visible(in, op, b) || !interp_check_fenced(in, op, b))
        return false;
    int64_t M = c->shape.dim[0], N = c->shape.dim[1], K = a->shape.dim[1];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = c->f[m * N + n];
            for (int64_t kk = 0; kk < K; kk++)
                acc = fmaf(a_regs ? a->f[m * K + kk] : operand_at(in, a, m, kk, K),
                           operand_at(in, b, kk, n, N), acc);
            r->f[m * N + n] = acc;
        }
    return (a_regs || interp_add_read(in, op, t, a, t->wg_committed, false)) &&
           interp_add_read(in, op, t, b, t->wg_committed, false);
}

bool interp_wgmma_commit(interp *in, const ir_op *op)
{
    if (!need_task(in, op))
        return false;
    cur(in)->wg_committed++;
    return true;
}

bool interp_wgmma_wait(interp *in, const ir_op *op)
{
    task *t = cur(in);
    if (!need_task(in, op))
        return false;
    /* an accumulator of a wgmma no commit has closed is not covered by any wait */
    for (int j = 0; j < t->nreads; j++) {
        const rd *e = &t->reads[j];
        if (e->store || e->seq != t->wg_committed)
            continue;
        for (int i = 0; i < op->nopnd; i++)
            if (e->op->nres && op->opnd[i] == e->op->res[0])
                return interp_fail(in, LOOM_ERR_RUNTIME, op,
                                   "accumulator %d comes from the wgmma at %s:%d, which no "
                                   "loom_wgmma_commit has closed into a group, so no wait covers it",
                                   i, file_of(e->op), e->op->src.line);
    }
    if (t->wg_committed - op->iattr[0] > t->wg_retired)
        t->wg_retired = t->wg_committed - op->iattr[0];
    interp_prune_reads(t);
    for (int i = 0; i < op->nres; i++)
        interp_copy_tv(interp_res(in, op, i), interp_opnd(in, op, i));
    return true;
}
