/*
 * fuzz_module_cache.c -- the module cache's file reader (runtime/module_cache.c) on
 * mutated files.
 *
 * The first byte picks how the rest is used:
 *   - as a whole cache file, decoded under the key it names (bytes 16..31), so the checks
 *     after the key's are reached;
 *   - as a payload (TMA list, then cubin) given a correct header, so the payload's parser
 *     is reached past the checksums: what decodes must encode again to the same file;
 *   - as a file on disk read by mc_disk_load, which deletes what it rejects; or, for a
 *     first byte of 242, 245, 248, 251 or 254, in place of that file a node that is not a
 *     regular file (fuzz_tmpdir.h: a FIFO, a device, a directory, a socket; or the cache
 *     directory itself a FIFO): a miss, never a block, and a store over it refused with
 *     the node left as it was and no temporary beside it.
 */
#include "fuzz_tmpdir.h"
#include "module_cache.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned first = data[0], mode = first % 3;
    data++;
    size--;
    mc_key key = {{0}};
    const void *cubin;
    size_t clen;
    mc_meta meta;
    char why[256];
    if (mode == 0) {
        if (size >= 32)
            memcpy(key.b, data + 16, 16);
        uint8_t *copy = malloc(size ? size : 1); /* exactly size bytes */
        memcpy(copy, data, size);
        if (mc_decode(&key, copy, size, &cubin, &clen, &meta, why, sizeof why) &&
            ((const uint8_t *)cubin < copy || (const uint8_t *)cubin + clen > copy + size)) {
            fprintf(stderr, "fuzz_module_cache: the cubin is outside the file\n");
            abort();
        }
        free(copy);
        return 0;
    }
    /* a file with a correct header around the input as payload */
    size_t n = MC_HEADER_BYTES + size;
    uint8_t *file = malloc(n);
    memcpy(file, MC_MAGIC, 8);
    file[8] = MC_FORMAT, file[9] = file[10] = file[11] = 0;
    file[12] = MC_HEADER_BYTES, file[13] = file[14] = file[15] = 0;
    for (int i = 0; i < 16; i++)
        key.b[i] = (uint8_t)(i * 7 + size);
    memcpy(file + 16, key.b, 16);
    put64(file + 32, size);
    memcpy(file + MC_HEADER_BYTES, data, size);
    put64(file + 40, mc_hash64(file + MC_HEADER_BYTES, size));
    put64(file + 48, size * 1024);
    put64(file + 56, mc_hash64(file, 56));
    if (mode == 1) {
        if (mc_decode(&key, file, n, &cubin, &clen, &meta, why, sizeof why)) {
            /* what decodes encodes again, and decodes to the same thing (fields a record
             * does not use may differ) */
            void *again;
            size_t alen;
            const void *c2;
            size_t c2len;
            mc_meta m2;
            if (mc_encode(&key, cubin, clen, &meta, &again, &alen) != LOOM_OK || alen != n ||
                !mc_decode(&key, again, alen, &c2, &c2len, &m2, why, sizeof why) || c2len != clen ||
                memcmp(c2, cubin, clen) != 0 || m2.ntma != meta.ntma || m2.smem_bytes != meta.smem_bytes) {
                fprintf(stderr, "fuzz_module_cache: a decoded file does not encode to itself\n");
                abort();
            }
            for (int i = 0; i < meta.ntma; i++) {
                const rt_tma_spec *a = &meta.tma[i], *b = &m2.tma[i];
                bool same = a->arg == b->arg && a->rank == b->rank && a->swizzle == b->swizzle;
                for (int d = 0; d < a->rank; d++)
                    same = same && a->box[d] == b->box[d];
                if (!same) {
                    fprintf(stderr, "fuzz_module_cache: TMA record %d changed on re-encoding\n", i);
                    abort();
                }
            }
            free(again);
        }
    } else if (first >= 242) {
        /* a node where the file or its directory would be */
        int kind = (int)(first - 242) / 3; /* 0 .. FUZZ_NODES; FUZZ_NODES: the directory */
        char hex[33], dir[4200], path[4300], err[8192];
        mc_key_hex(&key, hex);
        snprintf(dir, sizeof dir, "%s%s", fuzz_tmpdir(), kind == FUZZ_NODES ? "/dir" : "");
        snprintf(path, sizeof path, "%s/%s.cubin", dir, hex);
        const char *at = kind == FUZZ_NODES ? dir : path;
        int made = fuzz_make_node(at, kind == FUZZ_NODES ? FUZZ_FIFO : kind);
        void *out = NULL;
        size_t on = 0;
        mc_meta m0 = {0};
        if (mc_disk_load(dir, &key, &out, &on, &meta, why, sizeof why) != MC_MISS || out ||
            mc_disk_store(dir, &key, data, size, &m0, err, sizeof err) == LOOM_OK || !strstr(err, at) ||
            !fuzz_is_node(at, made) || fuzz_count(fuzz_tmpdir(), ".tmp.") != 0) {
            fprintf(stderr, "fuzz_module_cache: a node at the cache path was read, replaced or written beside (%s)\n",
                    err);
            abort();
        }
        remove(at);
    } else {
        char hex[33], path[4200];
        mc_key_hex(&key, hex);
        snprintf(path, sizeof path, "%s/%s.cubin", fuzz_tmpdir(), hex);
        fuzz_write(path, size % 2 ? file : data, size % 2 ? n : size);
        void *out = NULL;
        size_t on = 0;
        mc_lookup r = mc_disk_load(fuzz_tmpdir(), &key, &out, &on, &meta, why, sizeof why);
        if (r == MC_HIT && (!out || on > n))
            abort();
        if (r == MC_REJECTED && access(path, F_OK) == 0) {
            fprintf(stderr, "fuzz_module_cache: a rejected file was not deleted\n");
            abort();
        }
        free(out);
        unlink(path);
    }
    free(file);
    return 0;
}
