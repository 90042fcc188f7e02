/*
 * test_runtime.c -- the GPU backend: no-GPU behaviour, the module cache, NVRTC, and (on a
 * machine with a GPU) buffers, reference kernels, loom launches and the disk cache.
 *
 * Criterion runs each test in its own process, so a test may set environment variables
 * (LOOM_CUDA_LIB, LOOM_CACHE_DIR, ...) without affecting the others.  Tests that need a
 * GPU, NVRTC or the code generator skip themselves cleanly (cr_skip_test) without them.
 */
#include "gpu.h"
#include "module_cache.h"
#include "nvrtc_ref.h"
#include "ir.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

static char tmpdir_buf[256];

static const char *make_tmpdir(void)
{
    snprintf(tmpdir_buf, sizeof tmpdir_buf, "/tmp/loom_test_rt.XXXXXX");
    cr_assert(mkdtemp(tmpdir_buf), "mkdtemp failed");
    return tmpdir_buf;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void file_path(const char *dir, const mc_key *k, char *buf, size_t n)
{
    char hex[33];
    mc_key_hex(k, hex);
    snprintf(buf, n, "%s/%s.cubin", dir, hex);
}

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 8)) & 0xff);
}

/* Open the GPU or skip the test. */
static rt_gpu *gpu_or_skip(void)
{
    rt_gpu *g = NULL;
    char err[1024];
    loom_status st = rt_gpu_open(&g, err, sizeof err);
    if (st == LOOM_ERR_NO_GPU)
        cr_skip_test("no GPU: %s", err);
    cr_assert_eq(st, LOOM_OK, "rt_gpu_open: %s", err);
    return g;
}

static void nvrtc_or_skip(void)
{
    char err[512];
    if (nvref_available(err, sizeof err) != LOOM_OK)
        cr_skip_test("%s", err);
}

/* ---------------------------------------------------------------- without a GPU */

Test(runtime, gpu_target_without_driver_is_no_gpu)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert(rt);
    cr_assert_eq(loom_runtime_status(rt), LOOM_ERR_NO_GPU);
    cr_assert_eq(loom_runtime_is_gpu(rt), 0);
    const char *msg = loom_runtime_error(rt);
    cr_assert(strstr(msg, "no CUDA driver") && strstr(msg, "libcuda"), "message: %s", msg);
    /* everything else refuses cleanly */
    cr_assert_null(loom_buffer_create(rt, 64));
    loom_kernel *k = loom_kernel_create("empty", 1);
    int grid[3] = {1, 1, 1};
    cr_assert_eq(loom_launch(rt, k, grid, NULL, 0), LOOM_ERR_NO_GPU);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

Test(runtime, stub_driver_is_no_gpu)
{
    const char *stubs[] = {"/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/lib/stubs/libcuda.so",
                           "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"};
    const char *stub = NULL;
    for (size_t i = 0; i < sizeof stubs / sizeof stubs[0] && !stub; i++)
        if (access(stubs[i], R_OK) == 0)
            stub = stubs[i];
    if (!stub)
        cr_skip_test("no stub libcuda in this toolkit");
    setenv("LOOM_CUDA_LIB", stub, 1);
    rt_gpu *g = NULL;
    char err[1024] = "";
    loom_status st = rt_gpu_open(&g, err, sizeof err);
    cr_assert_eq(st, LOOM_ERR_NO_GPU, "status %s: %s", loom_status_name(st), err);
    cr_assert_null(g);
    cr_assert(strstr(err, "cuInit failed") && strstr(err, "CUDA_ERROR_STUB_LIBRARY"), "message: %s", err);
}

Test(runtime, gpu_target_reports_clearly)
{
    /* whatever this machine has: never a crash, and a message when there is no GPU */
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert(rt);
    if (loom_runtime_status(rt) == LOOM_OK) {
        cr_assert(loom_runtime_is_gpu(rt));
        cr_assert(strlen(loom_runtime_device_name(rt)) > 0);
    } else {
        cr_assert_eq(loom_runtime_status(rt), LOOM_ERR_NO_GPU);
        cr_assert(strlen(loom_runtime_error(rt)) > 10, "message: %s", loom_runtime_error(rt));
    }
    loom_runtime_destroy(rt);
}

Test(runtime, auto_falls_back_to_interpreter)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    cr_assert(rt);
    cr_assert_eq(loom_runtime_status(rt), LOOM_OK);
    cr_assert_eq(loom_runtime_is_gpu(rt), 0);
    cr_assert(strstr(loom_runtime_error(rt), "interpreter"), "message: %s", loom_runtime_error(rt));
    loom_buffer *b = loom_buffer_create(rt, 16);
    cr_assert(b);
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
}

Test(runtime, interpret_env_forces_interpreter)
{
    setenv("LOOM_INTERPRET", "1", 1);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_AUTO);
    cr_assert(rt);
    cr_assert_eq(loom_runtime_status(rt), LOOM_OK);
    cr_assert_eq(loom_runtime_is_gpu(rt), 0);
    cr_assert_str_eq(loom_runtime_device_name(rt), "interpreter (CPU)");
    loom_runtime_destroy(rt);
}

Test(runtime, bad_device_index)
{
    rt_gpu *g = gpu_or_skip();
    rt_gpu_close(g);
    setenv("LOOM_DEVICE", "999", 1);
    char err[512];
    cr_assert_eq(rt_gpu_open(&g, err, sizeof err), LOOM_ERR_NO_GPU);
    cr_assert(strstr(err, "LOOM_DEVICE=999"), "message: %s", err);
}

Test(runtime, arch_names)
{
    char a[16];
    rt_gpu_arch_name(9, 0, a, sizeof a);
    cr_assert_str_eq(a, "sm_90a");
    rt_gpu_arch_name(8, 0, a, sizeof a);
    cr_assert_str_eq(a, "sm_80");
    rt_gpu_arch_name(8, 9, a, sizeof a);
    cr_assert_str_eq(a, "sm_89");
    rt_gpu_arch_name(10, 0, a, sizeof a);
    cr_assert_str_eq(a, "sm_100");
}

/* ---------------------------------------------------------------- module cache: keys, format */

Test(module_cache, keys)
{
    mc_key a, b;
    mc_key_make("kernel x {}", "sm_90a", 4, "build", &a);
    mc_key_make("kernel x {}", "sm_90a", 4, "build", &b);
    cr_assert_eq(memcmp(a.b, b.b, 16), 0, "keys are deterministic");
    mc_key_make("kernel x { }", "sm_90a", 4, "build", &b);
    cr_assert_neq(memcmp(a.b, b.b, 16), 0, "IR text matters");
    mc_key_make("kernel x {}", "sm_80", 4, "build", &b);
    cr_assert_neq(memcmp(a.b, b.b, 16), 0, "arch matters");
    mc_key_make("kernel x {}", "sm_90a", 8, "build", &b);
    cr_assert_neq(memcmp(a.b, b.b, 16), 0, "num_warps matters");
    mc_key_make("kernel x {}", "sm_90a", 4, "build2", &b);
    cr_assert_neq(memcmp(a.b, b.b, 16), 0, "build matters");
    /* no ambiguity between fields */
    mc_key_make("kernel x {}", "sm_9", 4, "0abuild", &a);
    mc_key_make("kernel x {}", "sm_90", 4, "abuild", &b);
    cr_assert_neq(memcmp(a.b, b.b, 16), 0);
    char hex[33];
    mc_key_hex(&a, hex);
    cr_assert_eq(strlen(hex), 32);
    cr_assert_eq(strspn(hex, "0123456789abcdef"), 32);
    cr_assert(strlen(mc_build_id()) > 0);
    cr_assert_str_eq(mc_build_id(), mc_build_id());
}

/* A cache entry's launch data with only a shared-memory size. */
#define META(smem) (&(mc_meta){.smem_bytes = (smem)})

Test(module_cache, encode_decode)
{
    mc_key k, other;
    mc_key_make("ir", "sm_90a", 4, "b", &k);
    mc_key_make("ir2", "sm_90a", 4, "b", &other);
    unsigned char payload[1000];
    fill_pattern(payload, sizeof payload, 1);
    void *img;
    size_t n;
    cr_assert_eq(mc_encode(&k, payload, sizeof payload, META(12345), &img, &n), LOOM_OK);
    cr_assert_eq(n, MC_HEADER_BYTES + 4 + sizeof payload); /* + an empty TMA list */
    cr_assert_eq(memcmp(img, "LOOMCUBN", 8), 0);

    const void *p;
    size_t pn;
    mc_meta meta;
    char why[128];
    cr_assert(mc_decode(&k, img, n, &p, &pn, &meta, why, sizeof why), "%s", why);
    cr_assert_eq(pn, sizeof payload);
    cr_assert_eq(meta.smem_bytes, 12345);
    cr_assert_eq(memcmp(p, payload, pn), 0);

    /* another key */
    cr_assert_not(mc_decode(&other, img, n, &p, &pn, &meta, why, sizeof why));
    cr_assert(strstr(why, "another key"), "%s", why);
    /* truncated */
    cr_assert_not(mc_decode(&k, img, n - 1, &p, &pn, &meta, why, sizeof why));
    cr_assert_not(mc_decode(&k, img, 10, &p, &pn, &meta, why, sizeof why));
    /* every single corrupted byte, header or payload, is caught */
    unsigned char *b = img;
    for (size_t i = 0; i < n; i += (i < MC_HEADER_BYTES ? 1 : 37)) {
        b[i] ^= 0x10;
        cr_assert_not(mc_decode(&k, img, n, &p, &pn, &meta, why, sizeof why), "flip at %zu accepted", i);
        b[i] ^= 0x10;
    }
    cr_assert(mc_decode(&k, img, n, &p, &pn, &meta, why, sizeof why));
    /* foreign magic */
    memcpy(b, "NOTLOOM!", 8);
    cr_assert_not(mc_decode(&k, img, n, &p, &pn, &meta, why, sizeof why));
    cr_assert(strstr(why, "magic"), "%s", why);
    free(img);

    /* an empty payload is legal */
    cr_assert_eq(mc_encode(&k, NULL, 0, META(0), &img, &n), LOOM_OK);
    cr_assert(mc_decode(&k, img, n, &p, &pn, &meta, why, sizeof why));
    cr_assert_eq(pn, 0);
    free(img);
}

Test(module_cache, cache_dir_from_env)
{
    char d[512];
    setenv("LOOM_CACHE_DIR", "/tmp/somewhere", 1);
    cr_assert(mc_disk_dir(d, sizeof d));
    cr_assert_str_eq(d, "/tmp/somewhere");
    unsetenv("LOOM_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
    cr_assert(mc_disk_dir(d, sizeof d));
    cr_assert_str_eq(d, "/tmp/xdg/loom");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    cr_assert(mc_disk_dir(d, sizeof d));
    cr_assert_str_eq(d, "/home/u/.cache/loom");
    setenv("LOOM_CACHE", "0", 1);
    cr_assert_not(mc_disk_dir(d, sizeof d));
}

/* ---------------------------------------------------------------- module cache: disk */

Test(module_cache, disk_round_trip)
{
    const char *base = make_tmpdir();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/a/b", base); /* created on demand */
    mc_key k;
    mc_key_make("ir", "sm_90a", 4, "b", &k);
    void *c;
    size_t n;
    mc_meta meta;
    char why[512], err[512];
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_MISS);

    unsigned char payload[5000];
    fill_pattern(payload, sizeof payload, 3);
    cr_assert_eq(mc_disk_store(dir, &k, payload, sizeof payload, META(98304), err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(count_files(dir), 1, "no temporary file is left behind");
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_HIT, "%s", why);
    cr_assert_eq(n, sizeof payload);
    cr_assert_eq(meta.smem_bytes, 98304);
    cr_assert_eq(memcmp(c, payload, n), 0);
    free(c);

    /* overwrite with another payload: readers see the new whole file */
    payload[0] ^= 1;
    cr_assert_eq(mc_disk_store(dir, &k, payload, sizeof payload, META(7), err, sizeof err), LOOM_OK);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_HIT);
    cr_assert_eq(memcmp(c, payload, n), 0);
    cr_assert_eq(meta.smem_bytes, 7);
    free(c);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/a", base);
    rm_tree(dir);
    rm_tree(sub);
    rm_tree(base);
}

Test(module_cache, disk_rejects_corrupt_and_foreign_files)
{
    const char *dir = make_tmpdir();
    mc_key k;
    mc_key_make("ir", "sm_90a", 4, "b", &k);
    char path[512], why[512], err[512];
    file_path(dir, &k, path, sizeof path);
    unsigned char payload[3000];
    fill_pattern(payload, sizeof payload, 5);
    void *c;
    size_t n;
    mc_meta meta;

    /* a corrupted payload byte */
    cr_assert_eq(mc_disk_store(dir, &k, payload, sizeof payload, META(0), err, sizeof err), LOOM_OK);
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, MC_HEADER_BYTES + 4 + 1234, SEEK_SET);
    fputc(payload[1234] ^ 0x01, f);
    fclose(f);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_REJECTED);
    cr_assert(strstr(why, "checksum"), "%s", why);
    cr_assert_eq(access(path, F_OK), -1, "a rejected file is deleted");
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_MISS);

    /* a foreign file under our name */
    f = fopen(path, "wb");
    cr_assert(f);
    for (int i = 0; i < 200; i++)
        fputs("ELF? no, just text. ", f);
    fclose(f);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_REJECTED);
    cr_assert(strstr(why, "magic"), "%s", why);
    cr_assert_eq(access(path, F_OK), -1);

    /* a truncated file (a crash in the middle of a non-atomic copy) */
    cr_assert_eq(mc_disk_store(dir, &k, payload, sizeof payload, META(0), err, sizeof err), LOOM_OK);
    cr_assert_eq(truncate(path, MC_HEADER_BYTES + 100), 0);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_REJECTED);
    cr_assert_eq(access(path, F_OK), -1);

    /* the file of another key copied over ours */
    mc_key other;
    mc_key_make("ir2", "sm_90a", 4, "b", &other);
    cr_assert_eq(mc_disk_store(dir, &other, payload, sizeof payload, META(0), err, sizeof err), LOOM_OK);
    char opath[512];
    file_path(dir, &other, opath, sizeof opath);
    cr_assert_eq(rename(opath, path), 0);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_REJECTED);
    cr_assert(strstr(why, "another key"), "%s", why);

    /* and a rebuild after a rejection works */
    cr_assert_eq(mc_disk_store(dir, &k, payload, sizeof payload, META(0), err, sizeof err), LOOM_OK);
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_HIT);
    free(c);
    rm_tree(dir);
}

Test(module_cache, disk_store_reports_unwritable_dir)
{
    mc_key k;
    mc_key_make("ir", "sm_90a", 4, "b", &k);
    char err[512] = "";
    loom_status st = mc_disk_store("/proc/loom_cannot_be_here", &k, "x", 1, META(0), err, sizeof err);
    cr_assert_neq(st, LOOM_OK);
    cr_assert(strstr(err, "/proc/loom_cannot_be_here"), "%s", err);
}

Test(module_cache, concurrent_writers_leave_a_valid_file)
{
    const char *dir = make_tmpdir();
    mc_key k;
    mc_key_make("concurrent", "sm_90a", 4, "b", &k);
    enum { WRITERS = 6, ROUNDS = 25, BYTES = 256 * 1024 };
    unsigned char *payload = malloc(BYTES);
    cr_assert(payload);
    fill_pattern(payload, BYTES, 9);
    pid_t pids[WRITERS + 1];
    for (int w = 0; w <= WRITERS; w++) {
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            int bad = 0;
            char err[512], why[512];
            for (int r = 0; r < ROUNDS; r++) {
                if (w < WRITERS) {
                    /* every writer writes the same cubin (same key), like racing processes */
                    if (mc_disk_store(dir, &k, payload, BYTES, META(42), err, sizeof err) != LOOM_OK)
                        bad = 1;
                } else {
                    /* a reader: a hit must be whole; a miss is fine */
                    void *c;
                    size_t n;
                    mc_meta meta;
                    mc_lookup lk = mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why);
                    if (lk == MC_REJECTED)
                        bad = 2;
                    if (lk == MC_HIT) {
                        if (n != BYTES || memcmp(c, payload, n) || meta.smem_bytes != 42)
                            bad = 3;
                        free(c);
                    }
                }
            }
            _exit(bad);
        }
        pids[w] = pid;
    }
    for (int w = 0; w <= WRITERS; w++) {
        int status = 0;
        cr_assert_eq(waitpid(pids[w], &status, 0), pids[w]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d failed with %d", w,
                  WEXITSTATUS(status));
    }
    void *c;
    size_t n;
    mc_meta meta;
    char why[512];
    cr_assert_eq(mc_disk_load(dir, &k, &c, &n, &meta, why, sizeof why), MC_HIT, "%s", why);
    cr_assert_eq(n, BYTES);
    cr_assert_eq(memcmp(c, payload, n), 0);
    free(c);
    cr_assert_eq(count_files(dir), 1, "only the cache file remains (no temporaries)");
    free(payload);
    rm_tree(dir);
}

Test(module_cache, memory_table)
{
    mc_table t = {0};
    mc_entry e = {0};
    for (int i = 0; i < 100; i++) {
        char ir[32];
        snprintf(ir, sizeof ir, "k%d", i);
        mc_key_make(ir, "sm_90a", 4, "b", &e.key);
        e.smem_bytes = (uint64_t)i;
        cr_assert(mc_table_add(&t, &e));
    }
    mc_key k;
    mc_key_make("k57", "sm_90a", 4, "b", &k);
    mc_entry *f = mc_table_find(&t, &k);
    cr_assert(f);
    cr_assert_eq(f->smem_bytes, 57);
    mc_key_make("k100", "sm_90a", 4, "b", &k);
    cr_assert_null(mc_table_find(&t, &k));
    mc_table_free(&t);
}

/* ---------------------------------------------------------------- NVRTC (no GPU needed) */

Test(nvrtc, compiles_references_to_ptx)
{
    nvrtc_or_skip();
    struct {
        const char *src, *entry[2];
    } refs[] = {
        {nvref_src_vector_add_f32, {"loom_ref_vector_add_f32", NULL}},
        {nvref_src_broadcast_add, {"loom_ref_broadcast_add_f32", "loom_ref_broadcast_add_f16"}},
        {nvref_src_softmax_f32, {"loom_ref_softmax_f32", NULL}},
        {nvref_src_matmul_f16_f32, {"loom_ref_matmul_f16_f32", NULL}},
        {nvref_src_gemm, {"loom_ref_gemm_bf16", "loom_ref_gemm_compare"}},
        {nvref_src_gemm, {"loom_ref_gemm_f16", "loom_ref_fill_bf16"}},
        {nvref_src_gemm, {"loom_ref_gemm_e4m3", "loom_ref_fill_e4m3"}},
        {nvref_src_gemm, {"loom_ref_gemm_e5m2", "loom_ref_fill_e5m2"}},
        {nvref_src_gemm, {"loom_ref_fill_int_e4m3", "loom_ref_fill_int_e5m2"}},
    };
    char err[4096];
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        void *ptx;
        size_t n;
        loom_status st = nvref_compile(refs[i].src, refs[i].entry[0], "sm_90a", false, &ptx, &n, err, sizeof err);
        cr_assert_eq(st, LOOM_OK, "%s: %s", refs[i].entry[0], err);
        cr_assert(strstr(ptx, ".target sm_90a"), "PTX for sm_90a");
        for (int j = 0; j < 2 && refs[i].entry[j]; j++) {
            char want[128];
            snprintf(want, sizeof want, ".entry %s(", refs[i].entry[j]);
            cr_assert(strstr(ptx, want), "no %s in the PTX", want);
        }
        free(ptx);
    }
}

Test(nvrtc, compiles_cubin)
{
    nvrtc_or_skip();
    void *cubin;
    size_t n;
    char err[4096];
    loom_status st = nvref_compile(nvref_src_vector_add_f32, "vadd", "sm_90a", true, &cubin, &n, err, sizeof err);
    if (st == LOOM_ERR_UNSUPPORTED)
        cr_skip_test("%s", err);
    cr_assert_eq(st, LOOM_OK, "%s", err);
    cr_assert(n > 64);
    cr_assert_eq(memcmp(cubin, "\x7f" "ELF", 4), 0, "a cubin is an ELF file");
    free(cubin);
}

Test(nvrtc, reports_compile_errors)
{
    nvrtc_or_skip();
    void *ptx;
    size_t n;
    char err[4096];
    loom_status st = nvref_compile("extern \"C\" __global__ void broken(float *x) { x[0] = y; }",
                                   "broken.cu", "sm_90a", false, &ptx, &n, err, sizeof err);
    cr_assert_eq(st, LOOM_ERR_COMPILE);
    cr_assert(strstr(err, "broken.cu") && strstr(err, "\"y\""), "log: %s", err);
    cr_assert_null(ptx);
}

Test(nvrtc, missing_library_is_clean)
{
    setenv("LOOM_NVRTC_LIB", "/nonexistent/libnvrtc.so", 1);
    char err[512];
    cr_assert_eq(nvref_available(err, sizeof err), LOOM_ERR_UNSUPPORTED);
    cr_assert(strstr(err, "NVRTC missing"), "%s", err);
}

/* ---------------------------------------------------------------- a loom kernel */

/* c[i] = a[i] + b[i] over blocks of BLOCK elements (the tail is masked). */
#define VADD_BLOCK 256
static loom_kernel *vadd_kernel(int64_t n)
{
    loom_kernel *k = loom_kernel_create("loom_test_vadd", 4);
    loom_val a = loom_arg_tensor(k, "a", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val b = loom_arg_tensor(k, "b", LOOM_F32, LOOM_SHAPE1(n), LOOM_IN);
    loom_val c = loom_arg_tensor(k, "c", LOOM_F32, LOOM_SHAPE1(n), LOOM_OUT);
    loom_val off = loom_mul(k, loom_program_id(k, 0), loom_const_i(k, LOOM_I32, VADD_BLOCK));
    loom_val x = loom_load(k, a, &off, LOOM_SHAPE1(VADD_BLOCK), LOOM_NONE, 0.0);
    loom_val y = loom_load(k, b, &off, LOOM_SHAPE1(VADD_BLOCK), LOOM_NONE, 0.0);
    loom_store(k, c, &off, loom_add(k, x, y), LOOM_NONE);
    return k;
}

/* Run vadd on rt; returns the launch status (output in c). */
static loom_status run_vadd(loom_runtime *rt, loom_kernel *k, const float *a, const float *b, float *c,
                            int n)
{
    size_t bytes = (size_t)n * sizeof(float);
    loom_buffer *ba = loom_buffer_create(rt, bytes), *bb = loom_buffer_create(rt, bytes),
                *bc = loom_buffer_create(rt, bytes);
    cr_assert(ba && bb && bc, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(ba, a, bytes), LOOM_OK);
    cr_assert_eq(loom_buffer_upload(bb, b, bytes), LOOM_OK);
    cr_assert_eq(loom_buffer_fill(bc, 0xff), LOOM_OK);
    loom_arg args[3] = {LOOM_ARG_BUF(ba), LOOM_ARG_BUF(bb), LOOM_ARG_BUF(bc)};
    int grid[3] = {(n + VADD_BLOCK - 1) / VADD_BLOCK, 1, 1};
    loom_status st = loom_launch(rt, k, grid, args, 3);
    if (st == LOOM_OK)
        cr_assert_eq(loom_buffer_download(bc, c, bytes), LOOM_OK, "%s", loom_runtime_error(rt));
    loom_buffer_destroy(ba);
    loom_buffer_destroy(bb);
    loom_buffer_destroy(bc);
    return st;
}

Test(runtime, vadd_kernel_on_interpreter)
{
    enum { N = 1000 };
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = 3.0f - (float)i;
    }
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_kernel *k = vadd_kernel(N);
    cr_assert_eq(run_vadd(rt, k, a, b, c, N), LOOM_OK, "%s", loom_runtime_error(rt));
    for (int i = 0; i < N; i++)
        cr_assert_eq(c[i], a[i] + b[i]);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}

/* loom_prepare_many refuses what loom_prepare refuses, naming the kernel and its index;
 * on the interpreter a good list only verifies. */
Test(runtime, prepare_many_checks_its_arguments)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_INTERPRETER);
    loom_kernel *good = vadd_kernel(100), *bad = loom_kernel_create("bad", 1);
    loom_add(bad, loom_const_f(bad, LOOM_F32, 1.0), loom_const_i(bad, LOOM_I32, 1)); /* f32 + i32 */
    loom_kernel *list[3] = {good, bad, good};
    cr_assert_eq(loom_prepare_many(NULL, list, 1, 0), LOOM_ERR_INVALID);
    cr_assert_eq(loom_prepare_many(rt, NULL, 2, 0), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "ks is NULL"), "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_prepare_many(rt, list, -1, 0), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "n is negative"), "%s", loom_runtime_error(rt));
    loom_kernel *holes[2] = {good, NULL};
    cr_assert_eq(loom_prepare_many(rt, holes, 2, 0), LOOM_ERR_INVALID);
    cr_expect(strstr(loom_runtime_error(rt), "ks[1] is NULL"), "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_prepare_many(rt, list, 3, 2), LOOM_ERR_VERIFY);
    cr_expect(strstr(loom_runtime_error(rt), "kernel 'bad' (ks[1]) failed verification"), "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_prepare_many(rt, list, 1, 0), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_prepare_many(rt, list, 0, 0), LOOM_OK);
    loom_kernel_destroy(good);
    loom_kernel_destroy(bad);
    loom_runtime_destroy(rt);
}

/* ---------------------------------------------------------------- with a GPU */

Test(gpu_backend, properties)
{
    rt_gpu *g = gpu_or_skip();
    const rt_gpu_props *p = rt_gpu_properties(g);
    cr_assert(p->name[0]);
    cr_assert(p->sm_count > 0);
    cr_assert(p->cc_major >= 5);
    cr_assert_eq(strncmp(p->arch, "sm_", 3), 0);
    cr_assert(p->max_smem_per_block_optin >= 48 * 1024);
    cr_assert(p->total_mem > 0);
    cr_assert(p->driver_version >= 12000);
    cr_log_info("%s: sm_%d%d (%s), %d SMs, %d B smem opt-in, driver %d", p->name, p->cc_major,
                p->cc_minor, p->arch, p->sm_count, p->max_smem_per_block_optin, p->driver_version);
    rt_gpu_close(g);
}

Test(gpu_backend, buffers_round_trip_and_fill)
{
    rt_gpu *g = gpu_or_skip();
    rt_gpu_close(g);
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert_eq(loom_runtime_status(rt), LOOM_OK, "%s", loom_runtime_error(rt));
    enum { N = 1 << 20 };
    unsigned char *src = malloc(N), *dst = malloc(N);
    fill_pattern(src, N, 11);
    loom_buffer *b = loom_buffer_create(rt, N);
    cr_assert(b, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_upload(b, src, N), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(b, dst, N), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(memcmp(src, dst, N), 0);
    /* a partial upload leaves the rest */
    unsigned char head[100];
    memset(head, 0x5a, sizeof head);
    cr_assert_eq(loom_buffer_upload(b, head, sizeof head), LOOM_OK);
    cr_assert_eq(loom_buffer_download(b, dst, N), LOOM_OK);
    cr_assert_eq(memcmp(dst, head, sizeof head), 0);
    cr_assert_eq(memcmp(dst + 100, src + 100, N - 100), 0);
    cr_assert_eq(loom_buffer_fill(b, 0xab), LOOM_OK, "%s", loom_runtime_error(rt));
    cr_assert_eq(loom_buffer_download(b, dst, N), LOOM_OK);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(dst[i], 0xab, "byte %zu", i);
    /* too large a copy is refused, not attempted */
    cr_assert_eq(loom_buffer_upload(b, src, (size_t)N + 1), LOOM_ERR_INVALID);
    /* an absurd allocation fails with the CUDA error named */
    cr_assert_null(loom_buffer_create(rt, (size_t)1 << 50));
    cr_assert(strstr(loom_runtime_error(rt), "cuMemAlloc_v2") &&
                  strstr(loom_runtime_error(rt), "CUDA_ERROR_OUT_OF_MEMORY"),
              "%s", loom_runtime_error(rt));
    loom_buffer_destroy(b);
    loom_runtime_destroy(rt);
    free(src);
    free(dst);
}

typedef struct vadd_ref {
    rt_gpu *g;
    rt_gpu_module *m;
    uint64_t a, b, c;
    long long n;
} vadd_ref;

static loom_status vadd_ref_launch(void *p, char *err, size_t errlen)
{
    vadd_ref *r = p;
    void *params[4] = {&r->a, &r->b, &r->c, &r->n};
    unsigned grid[3] = {(unsigned)((r->n + 255) / 256), 1, 1}, block[3] = {256, 1, 1};
    return rt_gpu_module_launch(r->g, r->m, "loom_ref_vector_add_f32", grid, block, 0, params, err, errlen);
}

Test(gpu_backend, nvrtc_vector_add_and_timing)
{
    rt_gpu *g = gpu_or_skip();
    nvrtc_or_skip();
    char err[8192];
    vadd_ref r = {.g = g, .n = 100003};
    cr_assert_eq(nvref_load(g, nvref_src_vector_add_f32, "vadd.cu", &r.m, err, sizeof err), LOOM_OK, "%s", err);
    size_t bytes = (size_t)r.n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (long long i = 0; i < r.n; i++) {
        a[i] = (float)i;
        b[i] = 0.25f * (float)(i % 97);
    }
    cr_assert_eq(rt_gpu_alloc(g, bytes, &r.a, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_alloc(g, bytes, &r.b, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_alloc(g, bytes, &r.c, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_htod(g, r.a, a, bytes, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_htod(g, r.b, b, bytes, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(vadd_ref_launch(&r, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_sync(g, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_dtoh(g, c, r.c, bytes, err, sizeof err), LOOM_OK, "%s", err);
    for (long long i = 0; i < r.n; i++)
        cr_assert_eq(c[i], a[i] + b[i], "element %lld", i);

    double ms = 0;
    cr_assert_eq(rt_gpu_time_ms(g, vadd_ref_launch, &r, 3, 21, &ms, err, sizeof err), LOOM_OK, "%s", err);
    cr_assert(ms > 0 && ms < 100, "median %g ms", ms);
    cr_log_info("vector add of %lld floats: %.4f ms", r.n, ms);

    /* a missing function is named, with the CUDA error */
    unsigned one[3] = {1, 1, 1};
    cr_assert_eq(rt_gpu_module_launch(g, r.m, "no_such_kernel", one, one, 0, NULL, err, sizeof err),
                 LOOM_ERR_CUDA);
    cr_assert(strstr(err, "cuModuleGetFunction(\"no_such_kernel\") failed: CUDA_ERROR_NOT_FOUND"), "%s", err);
    /* too much shared memory is refused before launching */
    cr_assert_eq(rt_gpu_module_launch(g, r.m, "loom_ref_vector_add_f32", one, one, 1u << 30, NULL, err,
                                      sizeof err),
                 LOOM_ERR_UNSUPPORTED);
    cr_assert(strstr(err, "shared memory"), "%s", err);

    rt_gpu_free(g, r.a);
    rt_gpu_free(g, r.b);
    rt_gpu_free(g, r.c);
    rt_gpu_module_unload(g, r.m);
    rt_gpu_close(g);
    free(a);
    free(b);
    free(c);
}

Test(gpu_backend, nvrtc_references_match_host)
{
    rt_gpu *g = gpu_or_skip();
    nvrtc_or_skip();
    char err[8192];
    /* softmax */
    {
        enum { R = 37, C = 129 };
        static float x[R * C], y[R * C];
        for (int i = 0; i < R * C; i++)
            x[i] = sinf((float)i * 0.37f) * 4.0f;
        rt_gpu_module *m;
        cr_assert_eq(nvref_load(g, nvref_src_softmax_f32, "softmax.cu", &m, err, sizeof err), LOOM_OK, "%s", err);
        uint64_t dx, dy;
        cr_assert_eq(rt_gpu_alloc(g, sizeof x, &dx, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_alloc(g, sizeof y, &dy, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_htod(g, dx, x, sizeof x, err, sizeof err), LOOM_OK);
        int rows = R, cols = C;
        void *params[4] = {&dx, &dy, &rows, &cols};
        unsigned grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
        cr_assert_eq(rt_gpu_module_launch(g, m, "loom_ref_softmax_f32", grid, block, 0, params, err, sizeof err),
                     LOOM_OK, "%s", err);
        cr_assert_eq(rt_gpu_dtoh(g, y, dy, sizeof y, err, sizeof err), LOOM_OK, "%s", err);
        for (int r = 0; r < R; r++) {
            double mx = -INFINITY, s = 0;
            for (int j = 0; j < C; j++)
                mx = fmax(mx, x[r * C + j]);
            for (int j = 0; j < C; j++)
                s += exp(x[r * C + j] - mx);
            for (int j = 0; j < C; j++) {
                double want = exp(x[r * C + j] - mx) / s;
                cr_assert(fabs(y[r * C + j] - want) <= 1e-6 + 1e-5 * want, "softmax[%d,%d] %g vs %g", r, j,
                          y[r * C + j], want);
            }
        }
        rt_gpu_free(g, dx);
        rt_gpu_free(g, dy);
        rt_gpu_module_unload(g, m);
    }
    /* matmul f16 -> f32: small integers in f16 make every sum exact */
    {
        enum { M = 33, N = 17, K = 40 };
        static uint16_t a[M * K], b[K * N];
        static float fa[M * K], fb[K * N], c[M * N];
        for (int i = 0; i < M * K; i++) {
            fa[i] = (float)((i * 7) % 9 - 4);
            a[i] = ir_f32_to_f16(fa[i]);
        }
        for (int i = 0; i < K * N; i++) {
            fb[i] = (float)((i * 5) % 7 - 3);
            b[i] = ir_f32_to_f16(fb[i]);
        }
        rt_gpu_module *m;
        cr_assert_eq(nvref_load(g, nvref_src_matmul_f16_f32, "matmul.cu", &m, err, sizeof err), LOOM_OK, "%s", err);
        uint64_t da, db, dc;
        cr_assert_eq(rt_gpu_alloc(g, sizeof a, &da, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_alloc(g, sizeof b, &db, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_alloc(g, sizeof c, &dc, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_htod(g, da, a, sizeof a, err, sizeof err), LOOM_OK);
        cr_assert_eq(rt_gpu_htod(g, db, b, sizeof b, err, sizeof err), LOOM_OK);
        int mm = M, nn = N, kk = K;
        void *params[6] = {&da, &db, &dc, &mm, &nn, &kk};
        unsigned grid[3] = {(N + 15) / 16, (M + 15) / 16, 1}, block[3] = {16, 16, 1};
        cr_assert_eq(rt_gpu_module_launch(g, m, "loom_ref_matmul_f16_f32", grid, block, 0, params, err, sizeof err),
                     LOOM_OK, "%s", err);
        cr_assert_eq(rt_gpu_dtoh(g, c, dc, sizeof c, err, sizeof err), LOOM_OK, "%s", err);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float want = 0;
                for (int q = 0; q < K; q++)
                    want += fa[i * K + q] * fb[q * N + j];
                cr_assert_eq(c[i * N + j], want, "c[%d,%d]", i, j);
            }
        rt_gpu_free(g, da);
        rt_gpu_free(g, db);
        rt_gpu_free(g, dc);
        rt_gpu_module_unload(g, m);
    }
    rt_gpu_close(g);
}

Test(gpu_backend, a_fault_names_the_kernel)
{
    unsetenv("LOOM_SYNC"); /* read when the backend opens */
    rt_gpu *g = gpu_or_skip();
    nvrtc_or_skip();
    char err[8192];
    rt_gpu_module *m;
    const char *src = "extern \"C\" __global__ void loom_ref_fault(float *p) { p[threadIdx.x] = 1.0f; }\n";
    cr_assert_eq(nvref_load(g, src, "fault.cu", &m, err, sizeof err), LOOM_OK, "%s", err);
    uint64_t bad = 16;
    void *params[1] = {&bad};
    unsigned one[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    /* asynchronous: the launch itself succeeds, the next synchronizing call names it */
    cr_assert_eq(rt_gpu_module_launch(g, m, "loom_ref_fault", one, block, 0, params, err, sizeof err),
                 LOOM_OK, "%s", err);
    cr_assert_eq(rt_gpu_sync(g, err, sizeof err), LOOM_ERR_CUDA);
    cr_assert(strstr(err, "cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS") &&
                  strstr(err, "'loom_ref_fault'") && strstr(err, "LOOM_SYNC=1"),
              "%s", err);
    cr_log_info("%s", err);
    rt_gpu_module_unload(g, m);
    rt_gpu_close(g);
}

Test(gpu_backend, a_fault_with_loom_sync)
{
    setenv("LOOM_SYNC", "1", 1); /* read when the backend opens */
    rt_gpu *g = gpu_or_skip();
    nvrtc_or_skip();
    char err[8192];
    rt_gpu_module *m;
    const char *src = "extern \"C\" __global__ void loom_ref_fault(float *p) { p[threadIdx.x] = 1.0f; }\n";
    cr_assert_eq(nvref_load(g, src, "fault.cu", &m, err, sizeof err), LOOM_OK, "%s", err);
    uint64_t bad = 16;
    void *params[1] = {&bad};
    unsigned one[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    cr_assert_eq(rt_gpu_module_launch(g, m, "loom_ref_fault", one, block, 0, params, err, sizeof err),
                 LOOM_ERR_CUDA);
    cr_assert(strstr(err, "kernel 'loom_ref_fault' (cuCtxSynchronize after launch) failed: "
                          "CUDA_ERROR_ILLEGAL_ADDRESS"),
              "%s", err);
    cr_log_info("%s", err);
    rt_gpu_module_unload(g, m);
    rt_gpu_close(g);
}

/* Launch vadd through loom on the GPU; skips when there is no code generator yet. */
static loom_runtime *gpu_runtime_or_skip(void)
{
    loom_runtime *rt = loom_runtime_create(LOOM_TARGET_GPU);
    cr_assert(rt);
    if (loom_runtime_status(rt) == LOOM_ERR_NO_GPU)
        cr_skip_test("no GPU: %s", loom_runtime_error(rt));
    cr_assert_eq(loom_runtime_status(rt), LOOM_OK, "%s", loom_runtime_error(rt));
    return rt;
}

Test(gpu_backend, loom_launch_matches_reference_and_uses_disk_cache)
{
    const char *dir = make_tmpdir();
    setenv("LOOM_CACHE_DIR", dir, 1);
    unsetenv("LOOM_CACHE");
    loom_runtime *rt = gpu_runtime_or_skip();
    enum { N = 5000 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.125f;
        b[i] = (float)(i % 13) - 6.0f;
    }
    loom_kernel *k = vadd_kernel(N);
    rt_gpu_stats_reset();
    loom_status st = run_vadd(rt, k, a, b, c, N);
    if (st == LOOM_ERR_UNSUPPORTED && strstr(loom_runtime_error(rt), "no code generator")) {
        rm_tree(dir);
        cr_skip_test("%s", loom_runtime_error(rt));
    }
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    for (int i = 0; i < N; i++)
        cr_assert_eq(c[i], a[i] + b[i], "element %d", i);
    rt_gpu_stats s;
    rt_gpu_stats_get(&s);
    cr_assert_eq(s.result, RT_CACHE_MISS);
    cr_assert_eq(s.misses, 1);
    cr_log_info("cold: codegen %.2f ms, link %.2f ms, load %.2f ms, disk %.2f ms, cubin %zu B",
                s.codegen_ms, s.link_ms, s.load_ms, s.disk_ms, s.cubin_bytes);
    cr_assert_eq(count_files(dir), 1, "one cubin written");

    /* the same kernel again: the memory cache */
    cr_assert_eq(run_vadd(rt, k, a, b, c, N), LOOM_OK, "%s", loom_runtime_error(rt));
    rt_gpu_stats_get(&s);
    cr_assert_eq(s.result, RT_CACHE_MEMORY);
    loom_runtime_destroy(rt);

    /* a new runtime (empty memory cache): the disk cache, without code generation */
    rt = gpu_runtime_or_skip();
    memset(c, 0, sizeof c);
    cr_assert_eq(run_vadd(rt, k, a, b, c, N), LOOM_OK, "%s", loom_runtime_error(rt));
    rt_gpu_stats_get(&s);
    cr_assert_eq(s.result, RT_CACHE_DISK);
    cr_assert_eq(s.codegen_ms, 0);
    cr_log_info("warm: load %.2f ms, disk %.2f ms", s.load_ms, s.disk_ms);
    for (int i = 0; i < N; i++)
        cr_assert_eq(c[i], a[i] + b[i], "element %d", i);
    loom_runtime_destroy(rt);

    /* a corrupted cache file is rejected and rebuilt */
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024] = "";
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".cubin"))
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    FILE *f = fopen(path, "r+b");
    cr_assert(f, "%s", path);
    fseek(f, MC_HEADER_BYTES + 10, SEEK_SET);
    fputc(0x5a, f);
    fputc(0xa5, f);
    fclose(f);
    rt = gpu_runtime_or_skip();
    cr_assert_eq(run_vadd(rt, k, a, b, c, N), LOOM_OK, "%s", loom_runtime_error(rt));
    rt_gpu_stats_get(&s);
    cr_assert_eq(s.result, RT_CACHE_MISS);
    cr_assert_eq(s.disk_rejected, 1);
    for (int i = 0; i < N; i++)
        cr_assert_eq(c[i], a[i] + b[i], "element %d", i);
    loom_runtime_destroy(rt);
    loom_kernel_destroy(k);
    rm_tree(dir);
}

/* Kernels compiled at once on several threads: each compiled once (a repeat in the list
 * included), then launched from memory with the right results. */
Test(gpu_backend, prepare_many_compiles_in_parallel)
{
    setenv("LOOM_CACHE", "0", 1);
    loom_runtime *rt = gpu_runtime_or_skip();
    enum { NK = 4 };
    const int sizes[NK] = {300, 1000, 4097, 12345};
    loom_kernel *ks[NK + 1];
    for (int i = 0; i < NK; i++)
        ks[i] = vadd_kernel(sizes[i]);
    ks[NK] = ks[1]; /* the same kernel twice */
    rt_gpu_stats_reset();
    loom_status st = loom_prepare_many(rt, ks, NK + 1, 3);
    if (st == LOOM_ERR_UNSUPPORTED && strstr(loom_runtime_error(rt), "no code generator"))
        cr_skip_test("%s", loom_runtime_error(rt));
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    rt_gpu_stats s;
    rt_gpu_stats_get(&s);
    cr_expect_eq(s.misses, NK, "%llu compiles for %d kernels", (unsigned long long)s.misses, NK);
    cr_expect_eq(s.lookups, NK, "the repeated kernel is looked up once");
    static float a[12345], b[12345], c[12345];
    for (int i = 0; i < NK; i++) {
        int n = sizes[i];
        for (int e = 0; e < n; e++) {
            a[e] = (float)(e % 101) * 0.25f;
            b[e] = (float)i - 2.0f;
        }
        cr_assert_eq(run_vadd(rt, ks[i], a, b, c, n), LOOM_OK, "%s", loom_runtime_error(rt));
        rt_gpu_stats_get(&s);
        cr_expect_eq(s.result, RT_CACHE_MEMORY, "kernel %d was compiled again at its launch", i);
        for (int e = 0; e < n; e++)
            cr_assert_eq(c[e], a[e] + b[e], "kernel %d element %d", i, e);
    }
    for (int i = 0; i < NK; i++)
        loom_kernel_destroy(ks[i]);
    loom_runtime_destroy(rt);
    unsetenv("LOOM_CACHE");
}

Test(gpu_backend, loom_launch_disk_cache_off)
{
    setenv("LOOM_CACHE", "0", 1);
    setenv("LOOM_SYNC", "1", 1);
    loom_runtime *rt = gpu_runtime_or_skip();
    enum { N = 300 };
    static float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = 1.5f * (float)i;
        b[i] = -2.0f;
    }
    loom_kernel *k = vadd_kernel(N);
    loom_status st = run_vadd(rt, k, a, b, c, N);
    if (st == LOOM_ERR_UNSUPPORTED && strstr(loom_runtime_error(rt), "no code generator"))
        cr_skip_test("%s", loom_runtime_error(rt));
    cr_assert_eq(st, LOOM_OK, "%s", loom_runtime_error(rt));
    for (int i = 0; i < N; i++)
        cr_assert_eq(c[i], a[i] + b[i], "element %d", i);
    rt_gpu_stats s;
    rt_gpu_stats_get(&s);
    cr_assert_eq(s.result, RT_CACHE_MISS);
    cr_assert_eq(s.disk_ms, 0);
    loom_kernel_destroy(k);
    loom_runtime_destroy(rt);
}
