/*
 * autows.h -- the door from codegen/ to the automatic warp specialization passes
 * (pipe/autows.c): a plain tile loop with loom_dot (loom_kernel_set_autows) becomes the
 * producer / consumer kernel the explicit templates build on the pipeline layer.
 */
#ifndef LOOM_PIPE_AUTOWS_H
#define LOOM_PIPE_AUTOWS_H

#include "../dsl/ir.h"

/* The passes' names, in order, as LOOM_DUMP_AFTER takes them. */
#define PIPE_AUTOWS_PASSES "ws-tasks", "ws-data", "ws-channels", "ws-pipeline", "ws-code"
#define PIPE_AUTOWS_NPASSES 5

/* A specialized kernel is persistent: its CTAs (one an SM) take the programs of the grid
 * the user launches in turn, so one tile's epilogue overlaps the next one's loads.  It
 * takes the user's arguments, then that grid as three i32 scalars of these names; the
 * launch (runtime/launch.c) passes them and starts pipe_autows_ctas() CTAs. */
#define PIPE_AUTOWS_GRID_X "loom_grid_x"
#define PIPE_AUTOWS_GRID_Y "loom_grid_y"
#define PIPE_AUTOWS_GRID_Z "loom_grid_z"
static inline bool pipe_autows_on(const loom_kernel *k) { return k->ws_consumers != 0; }
/* The CTAs a launch of grid starts: one an SM (sm_count), at most one a program. */
static inline int pipe_autows_ctas(const int grid[3], int sm_count)
{
    int64_t n = (int64_t)grid[0] * grid[1] * grid[2];
    return (int)(n < sm_count ? n : sm_count);
}

/* If verified kernel k asks for automatic warp specialization, build its warp-specialized
 * form into *out (a new kernel, verified; the caller destroys it).  k is not changed.
 * dump: a pass name of PIPE_AUTOWS_PASSES, "all" or NULL: the passes' reports (and the
 * new kernel's IR after ws-code) go to stderr.  Returns LOOM_OK with *out NULL when k asks
 * for nothing; a kernel the passes cannot specialize gives LOOM_ERR_UNSUPPORTED and a
 * message naming the user's line and the reason. */
loom_status pipe_autows(loom_kernel *k, const char *dump, loom_kernel **out, char *err, size_t errlen);

#endif /* LOOM_PIPE_AUTOWS_H */
