/*
 * tpl.h -- helpers shared by the kernel templates, and the door of templates/ (internal).
 *
 * Each template file defines its builder and one `const loom_template tpl_def_<name>`;
 * templates/registry.c lists them.  Host-side helpers here fill inputs and read or write
 * elements of any dtype, so every template's init/reference functions stay short.
 *
 * The floors above (tune/, ops/, aot/) include this header and no other of templates/:
 * its last lines bring what they take of the rest -- what a template tells the tuner
 * (tpl_device.h) and the IKBO kernels the operations run (ikbo_lce.h, ikbo_fa.h).
 * Prefix: tpl_.
 */
#ifndef LOOM_TPL_H
#define LOOM_TPL_H

#include "loom.h"
#include "loom_ikbo.h" /* the IKBO operations are templates */

#include <stdint.h>
#include <stdio.h>

/* Deterministic random numbers (splitmix64). */
uint64_t tpl_rand(uint64_t *state);
/* Fill n elements of dtype dt with uniform values in [lo, hi) (integers: floor). */
void tpl_fill(void *p, loom_dtype dt, int64_t n, double lo, double hi, uint64_t *state);
/* Element i of a host array of dtype dt, as a double. */
double tpl_get(const void *p, loom_dtype dt, int64_t i);
/* Store v (rounded to nearest even for f16/bf16) into element i. */
void tpl_set(void *p, loom_dtype dt, int64_t i, double v);
/* Round v to dtype dt's precision. */
double tpl_round(loom_dtype dt, double v);

/* The IKBO C APIs' failures: the message into rt's error, the status returned. */
loom_status tpl_fail(loom_runtime *rt, loom_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A request's B and U against the prepared maxima: LOOM_OK, or LOOM_ERR_INVALID with
 * "FN: B is 9; it must be 1 to 8 (the B prepared)" in rt's error. */
loom_status tpl_check_request(loom_runtime *rt, const char *fn, int64_t B, int64_t U, int64_t Bmax, int64_t Umax);
/* A device buffer of `bytes` (at least 1) filled with zeros, or NULL with *st set; nothing
 * (NULL) when *st is already a failure, so a run of allocations checks once at the end. */
loom_buffer *tpl_zeroed_buffer(loom_runtime *rt, size_t bytes, loom_status *st);

/* An operation's prepare when loom_tune fell back on the default config (LOOM_ERR_NOT_TUNED):
 * the kernel is ready, so the operation runs, with one warning on stderr naming the
 * operation and the tuner's note (never a silent fallback).  Returns LOOM_OK. */
loom_status tpl_not_tuned(const char *op, const loom_tuned *r);

/* A template's valid() from its one check's answer w (why_not: NULL when the config can
 * serve the shape, else the reason): 1, or 0 with w copied into why. */
int tpl_valid(const char *w, char *why, size_t n);

/* Fail a build with a message: returns NULL. */
loom_kernel *tpl_refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The smallest power of two >= n (tile dims are powers of two), at most 2^62. */
int64_t tpl_pow2_at_least(int64_t n);
/* n rounded up to a multiple of 8: rows of 16-bit elements TMA can address (16-byte aligned). */
int64_t tpl_pad8(int64_t n);

/* dst [rows, ld] = src [rows, cols] (cols <= ld) with zeros in the columns past cols: rows
 * copied to a wider, aligned stride (TMA needs 16-byte aligned rows).  Programs take
 * 16-row by up-to-256-column blocks over tpl_pad_rows_grid. */
loom_kernel *tpl_pad_rows_kernel(const char *name, int64_t rows, int64_t cols, int64_t ld, loom_dtype dt);
void tpl_pad_rows_grid(int64_t rows, int64_t ld, int grid[3]);

/* How the consumer warp groups of a warp-specialized GEMM template share its tiles:
 * TPL_COOPERATIVE, one task of cwarps warps splits each tile by rows; TPL_PINGPONG, two
 * warp groups take turns on whole tiles (needs cwarps=8 and persistent CTAs); TPL_SPLIT,
 * two warp groups share each tile by rows, each on its own. */
enum { TPL_COOPERATIVE, TPL_PINGPONG, TPL_SPLIT };

/* Why cwarps (4 or 8), consumers (0 .. last, last one of the above), ctas (0: a CTA a
 * tile) and the BM x BN tile cannot go together (BN a multiple of 64 up to 256; the
 * accumulator included: at most 192 of a consumer's 232 registers a thread), or NULL. */
const char *tpl_why_not_consumers(int cwarps, int consumers, int last, int ctas, int bm, int bn);
/* The registers a thread of a consumer warp group takes for an f32 BM x BN accumulator
 * (its share: ping-pong's group a whole tile, the others the tile's rows split over the
 * cwarps / 4 groups), and the most an accumulator may take (of the consumers' 232). */
enum { TPL_ACC_REGS_MAX = 192 };
int64_t tpl_acc_regs(int cwarps, int consumers, int bm, int bn);

#define TPL_CDIV(a, b) (((a) + (b)-1) / (b))

/* ---------------------------------------------------------------- the door
 * Each of these includes tpl.h first, which by then is complete (its guard is set above),
 * so any of the four may be included first. */
#include "tpl_device.h"
#include "ikbo_lce.h"
#include "ikbo_fa.h"

#endif
