/*
 * fuzz_tmpdir.h -- a private scratch directory for the cache fuzzers, made once per
 * process in /dev/shm where it is writable (else $TMPDIR, else /tmp) and removed at exit,
 * so that fuzzing writes nowhere else and leaves nothing behind.
 *
 * And the nodes a cache path may name that are not regular files (a FIFO, a character
 * device, a directory, a socket), which the caches must refuse without blocking and
 * leave as they are.  The device is a /dev/null of our own (mknod c 1 3 in the scratch
 * directory, where root may make one; a FIFO stands in elsewhere), never the real one.
 */
#ifndef LOOM_FUZZ_TMPDIR_H
#define LOOM_FUZZ_TMPDIR_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
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
            remove(p); /* a file or node, or an (empty) directory node */
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

/* ---------------------------------------------------------------- nodes */

enum { FUZZ_FIFO, FUZZ_CHAR, FUZZ_DIR, FUZZ_SOCK, FUZZ_NODES };

/* Make a node of kind (FUZZ_*) at path, which must not exist; returns the kind made: a
 * FIFO where mknod is refused (not root, say). */
static int fuzz_make_node(const char *path, int kind)
{
    int ok = -1;
    switch (kind) {
    case FUZZ_CHAR:
        if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0)
            return FUZZ_CHAR;
        kind = FUZZ_FIFO;
        ok = mkfifo(path, 0644);
        break;
    case FUZZ_DIR: ok = mkdir(path, 0755); break;
    case FUZZ_SOCK: {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (s >= 0 && strlen(path) < sizeof a.sun_path) {
            snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
            ok = bind(s, (struct sockaddr *)&a, sizeof a);
        }
        if (s >= 0)
            close(s); /* the socket file stays */
        break;
    }
    default: kind = FUZZ_FIFO; ok = mkfifo(path, 0644); break;
    }
    if (ok != 0) {
        perror(path);
        abort();
    }
    return kind;
}

/* Whether path (not followed) is still a node of kind. */
static bool fuzz_is_node(const char *path, int kind)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return false;
    switch (kind) {
    case FUZZ_CHAR: return S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(1, 3);
    case FUZZ_DIR: return S_ISDIR(sb.st_mode);
    case FUZZ_SOCK: return S_ISSOCK(sb.st_mode);
    default: return S_ISFIFO(sb.st_mode);
    }
}

/* Entries of dir whose name contains part. */
static int fuzz_count(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, part) != NULL;
    if (d)
        closedir(d);
    return n;
}

#endif /* LOOM_FUZZ_TMPDIR_H */
