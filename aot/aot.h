/*
 * aot.h -- what the ahead-of-time generator (aot/aot.c, aot/gen_*.c; loom.h has its entry,
 * loom_aot_write) shares with loomc: the embedded run-time texts and the --torch entry.
 * The generator's files share aot/gen.h besides.  Prefix: aot_.
 */
#ifndef LOOM_AOT_H
#define LOOM_AOT_H

#include "loom.h"

/* The run-time code every generated file carries, as text: aot/aot_rt.c, aot/aot_lce.c,
 * aot/aot_fa.c and templates/ikbo_fa_units.h, embedded by the build (cmake/embed.cmake
 * writes aot_text.c), so that the generator copies exactly the files the tests compile. */
extern const unsigned char aot_text_rt[];
extern const unsigned char aot_text_lce[];
extern const unsigned char aot_text_fa[];
extern const unsigned char aot_text_fa_units[];
/* aot/aot_torch.py: the run-time part of the Python module `loomc aot --torch` writes. */
extern const unsigned char aot_text_torch[];

/* loom_aot_write, plus DIR/P_torch.py (the file's operations as PyTorch custom ops) and the
 * C entry points it calls (the operations on the caller's buffers), appended to P.h and
 * P.c; docs/torch.md.  loomc's --torch: exported for loomc alone, outside loom.h's API
 * (tools/loomc.c includes this header). */
__attribute__((visibility("default"))) loom_status loom_aot_write_torch(const loom_aot_request *r, char *err,
                                                                        size_t errlen);

#endif
