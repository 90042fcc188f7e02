/*
 * fuzz_tune_cache.c -- the tuning cache's reader and merger (tune/tune_cache.c) on mutated
 * files.
 *
 * The input is the file.  tc_open must take anything (a corrupt file is an empty cache
 * with a warning); tc_find is asked for every key the file holds and for a real key, with
 * every template, and must refuse malformed entries; and, for one input in eight, tc_store
 * merges a new entry into the file, after which a fresh tc_open must find that entry with
 * the config stored.
 *
 * For another input in eight (last byte 1 mod 8) the cache path is a node that is not a
 * regular file (fuzz_tmpdir.h: a FIFO, a device, a directory, a socket), or the file is
 * the input and its lock path a FIFO: tc_open must warn naming the path and read nothing,
 * tc_store must refuse, neither may block, and the node must be left as it was, with no
 * lock file or temporary beside it.
 */
#include "fuzz_tmpdir.h"
#include "tune.h"

#include <cjson/cJSON.h>

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tune.json", fuzz_tmpdir());
    fuzz_write(path, data, size);
    char warn[1024];
    tc_file *f = tc_open(path, warn, sizeof warn);
    if (!f)
        abort(); /* only when out of memory */
    int n = tc_count(f);
    if (n < 0)
        abort();
    tc_record rec;
    /* every key the file names, read by every template */
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *ents = cJSON_GetObjectItemCaseSensitive(root, "entries");
    const cJSON *e, *objs = cJSON_IsObject(ents) ? ents : NULL;
    cJSON_ArrayForEach(e, objs)
        for (int t = 0; t < loom_template_count() && e->string; t++)
            tc_find(f, e->string, loom_template_at(t), &rec);
    cJSON_Delete(root);
    /* a real key */
    const loom_template *t = loom_template_at((int)(size % (size_t)loom_template_count()));
    tc_device dev = {.sm_count = 132, .driver = 13000};
    snprintf(dev.gpu, sizeof dev.gpu, "NVIDIA H200");
    int64_t shape[LOOM_MAX_PARAMS] = {0};
    for (int i = 0; i < t->nshape; i++)
        shape[i] = t->shape[i].def;
    char key[2048];
    tc_key(t, shape, &dev, key, sizeof key);
    tc_find(f, key, t, &rec);
    tc_find(f, NULL, t, &rec);
    tc_close(f);

    if (size && data[size - 1] % 8 == 0) {
        tc_record in = {.ms = 0.5, .ncand = 3, .nvalid = 2, .tune_ms = 10};
        for (int i = 0; i < t->nconfig; i++)
            in.config[i] = t->config[i].def + (int64_t)(size % 3);
        char err[1024];
        if (tc_store(path, key, t, shape, shape, &dev, &in, err, sizeof err) == LOOM_OK) {
            f = tc_open(path, warn, sizeof warn);
            if (!f || !tc_find(f, key, t, &rec) || memcmp(rec.config, in.config, sizeof in.config) != 0) {
                fprintf(stderr, "fuzz_tune_cache: an entry just stored is not found (%s)\n", warn);
                abort();
            }
            tc_close(f);
        }
    }

    if (size && data[size - 1] % 8 == 1) {
        char node[4200], lock[4300], err[8192];
        snprintf(node, sizeof node, "%s/node.json", fuzz_tmpdir());
        snprintf(lock, sizeof lock, "%s.lock", node);
        int kind = (int)(size / 8 % (FUZZ_NODES + 1)); /* FUZZ_NODES: the lock is the node */
        const char *at = kind == FUZZ_NODES ? lock : node;
        if (kind == FUZZ_NODES)
            fuzz_write(node, data, size);
        int made = fuzz_make_node(at, kind == FUZZ_NODES ? FUZZ_FIFO : kind);
        f = tc_open(node, warn, sizeof warn);
        if (!f || (kind != FUZZ_NODES && (tc_count(f) != 0 || !strstr(warn, node)))) {
            fprintf(stderr, "fuzz_tune_cache: a node was read as a cache (%s)\n", warn);
            abort();
        }
        tc_close(f);
        tc_record in = {.ms = 1};
        for (int i = 0; i < t->nconfig; i++)
            in.config[i] = t->config[i].def;
        if (tc_store(node, key, t, shape, shape, &dev, &in, err, sizeof err) == LOOM_OK || !strstr(err, at)) {
            fprintf(stderr, "fuzz_tune_cache: a store over a node was not refused (%s)\n", err);
            abort();
        }
        if (!fuzz_is_node(at, made) || (kind != FUZZ_NODES && access(lock, F_OK) == 0) ||
            fuzz_count(fuzz_tmpdir(), ".tmp.") != 0) {
            fprintf(stderr, "fuzz_tune_cache: a node was replaced, or a lock or temporary made beside it\n");
            abort();
        }
        remove(at);
        unlink(node);
    }
    return 0;
}
