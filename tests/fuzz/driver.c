/*
 * driver.c -- a fuzzer without libFuzzer: runs LLVMFuzzerTestOneInput once on each file
 * named on the command line, or on each file of a directory named there.  With it the
 * fuzzers build with any compiler (gcc included) and the corpus in tests/fuzz/corpus runs
 * as a regression test in every build, the sanitizer build too (scripts/test.sh).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "driver: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "driver: out of memory reading %s\n", path);
        return 1;
    }
    /* a copy of exactly n bytes, so a read past the input is caught by the sanitizers */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    int rc = 0, runs = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') /* libFuzzer flags: ignored */
            continue;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "driver: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc |= run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d)
            return 1;
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char **nn = realloc(names, (n + 1) * sizeof *names);
            if (!nn)
                return 1;
            names = nn;
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp);
        for (size_t j = 0; j < n; j++) {
            rc |= run_file(names[j]);
            runs++;
            free(names[j]);
        }
        free(names);
    }
    printf("%s: %d inputs run\n", argv[0], runs);
    return rc;
}
