/*
 * hang.h -- the host side of the hang check (runtime/hang.c): which wait each site of a
 * kernel is, and the report a stuck kernel's record turns into.
 *
 * With a bound (LOOM_HANG_CHECK=<ms>, read when the GPU runtime opens), the code
 * generator bounds every wait loop; a thread stuck past the bound writes a record into
 * host-mapped memory and traps (codegen/codegen.h: the record and the kernel's
 * CG_HANG_GLOBAL).  The record names the wait by its op's index; a site table, made from
 * the kernel when its module is looked up and kept with the module in the memory cache,
 * turns that into the barrier's name and the source lines, in the interpreter's words
 * (dsl/ir.h: ir_words_*).  The table is made from the launching kernel, never read from
 * the disk cache: the cache files are unchanged, and the key of a hang-check kernel
 * covers the bound and the sites' source lines (rt_hang_sites_key), so a cubin is shared
 * only by kernels whose table is the same.
 *
 * The table and the report are plain host code (tests call them without a GPU); the
 * record's memory and the module's global are set up in driver.c and module.c.
 *
 * Prefix: rt_hang_.
 */
#ifndef LOOM_HANG_H
#define LOOM_HANG_H

#include "loom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One wait of a kernel: an mbar_wait or a flag wait, with what names it. */
typedef struct rt_hang_site {
    uint32_t op;       /* its index in the kernel's op table (the record's CG_HANG_SITE) */
    bool flag;         /* a flag wait (else an mbar_wait) */
    char *label;       /* the barrier array's label ("%full.3") or the flag tensor's name */
    char *file;        /* the wait's builder call */
    int line;
    char *task_file;   /* the task op holding it (NULL: the kernel body) */
    int task_line;
} rt_hang_site;

typedef struct rt_hang_sites {
    char *kernel; /* the kernel's name */
    int n;
    rt_hang_site *s;
} rt_hang_sites;

/* The sites of kernel k (NULL when out of memory; a kernel without waits has n = 0). */
rt_hang_sites *rt_hang_sites_make(loom_kernel *k);
void rt_hang_sites_free(rt_hang_sites *t);
/* What a hang-check module's key adds to the build identity: the bound and each site's
 * source lines (the IR text, which the key hashes too, has no source lines), as text. */
void rt_hang_sites_key(const rt_hang_sites *t, int hang_ms, char *buf, size_t n);

/* The report of a record (CG_HANG_WORDS words) written by kernel `kernel` whose sites
 * are t (NULL: unknown):
 *   kernel 'K' hung: program (x,y,z) task at FILE:LINE (replica R), thread T, waited
 *   more than N ms on barrier %full.3[1] for phase parity 0 at FILE:LINE
 * (a flag wait: "... waited more than N ms at FILE:LINE for flags[5] >= 5; it is 1").
 * False (buf untouched) when the record is not a complete one. */
bool rt_hang_format(const rt_hang_sites *t, const char *kernel, const uint32_t *rec, char *buf, size_t n);

#endif /* LOOM_HANG_H */
