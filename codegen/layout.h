/*
 * layout.h -- internals of the layout files, shared by them (cg.h declares what the rest
 * of codegen asks of layouts):
 *   layout.c         the layout algebra and the wgmma layouts
 *   layout_pass.c    the pass (cg_layouts) and the queries on its result (cg_want)
 *   layout_prefer.c  what each value's uses want of its layout (cg_prefer_loads)
 *   layout_axis.c    the divisibility and axis analyses (cg_divisor, cg_axis_info)
 *
 * Only the layout*.c files include this header.
 */
#ifndef LOOM_LAYOUT_H
#define LOOM_LAYOUT_H

#include "cg.h"

/* The layout class of each op: the `layout` column of dsl/ops.h, which says what each
 * class means (NONE first, so the invalid op 0 has none); the table is layout_pass.c's. */
enum { LAY_NONE, LAY_EW, LAY_SHAPE, LAY_REDUCE, LAY_LOAD, LAY_DOT, LAY_MMA, LAY_REGION };
extern const uint8_t cg_lay_class[IR_OP_COUNT];

static inline const ir_type *vty(cg_ctx *cg, uint32_t v) { return &cg->k->vals[v].type; }

static inline bool is_ew(uint16_t kind) { return cg_lay_class[kind] == LAY_EW; }

/* Layout id is a wgmma accumulator's. */
static inline bool cg_is_mma(const cg_ctx *cg, int32_t id)
{
    return id >= 0 && id < (int32_t)sizeof cg->is_mma && cg->is_mma[id];
}

/* A value whose layout is decided by what it is made of (not recomputable). */
static inline bool fixed(cg_ctx *cg, uint32_t v)
{
    return vty(cg, v)->kind == IR_T_TILE && vty(cg, v)->shape.rank > 0 && !cg->remat[v];
}

/* Why shape s can have no wgmma accumulator layout in this task (in buf), or NULL when it
 * can: cg_mma_layout's checks, which the pass asks without failing (layout.c). */
const char *cg_mma_unfit(const cg_ctx *cg, const loom_shape *s, char *buf, size_t n);

/* After a first assignment: each load and broadcast takes the layout its uses agree on
 * (cg->prefer); *changed: whether any differs, so the kernel must be laid out again
 * (layout_prefer.c).  False with the error recorded on failure. */
bool cg_prefer_loads(cg_ctx *cg, bool *changed);

#endif /* LOOM_LAYOUT_H */
