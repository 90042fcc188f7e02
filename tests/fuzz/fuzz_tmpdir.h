/*
 * fuzz_tmpdir.h -- a private scratch directory for the cache fuzzers, made once per
 * process in /dev/shm where it is writable (else $TMPDIR, else /tmp) and removed at exit,
 * so that fuzzing writes nowhere else and leaves nothing behind.
 */
#ifndef LOOM_FUZZ_TMPDIR_H
#define LOOM_FUZZ_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[4096];

static void fuzz_dir_remove(void)
{
    DIR *d = opendir(fuzz_dir);
    if (!d)
        return;
    char p[8192];
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", fuzz_dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(fuzz_dir);
}

static const char *fuzz_tmpdir(void)
{
    if (!fuzz_dir[0]) {
        /* memory, where there is a tmpfs: tc_store fsyncs every file it writes */
        const char *t = getenv("TMPDIR");
        if (access("/dev/shm", W_OK) == 0)
            t = "/dev/shm";
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/loom-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir;
}

static void fuzz_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#endif /* LOOM_FUZZ_TMPDIR_H */
