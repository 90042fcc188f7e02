/*
 * pool.c -- the thread pool that compiles the candidates.
 *
 * Compiling is most of a tuning's time: each candidate goes through the code generator
 * (LLVM), PTX -> cubin and a module load, where checking it and timing it take a few
 * milliseconds on the GPU.  So a pool of threads compiles (tune_pool_start), one job per
 * candidate, while the main thread takes the jobs in the order they finish
 * (tune_pool_next) and checks and times each one: the GPU work stays on one thread, and
 * the compiles of the rest overlap it.  Compiling in parallel is safe because
 * rt_gpu_prepare is: codegen works on a private copy of the kernel with its own LLVM
 * context, LLVM's target is initialized once (pthread_once), the module table is guarded
 * by a mutex, and each worker makes the device's primary context current on its own
 * thread.
 *
 * A job is a candidate, which the worker builds from its config, verifies and compiles,
 * or a kernel given ready-made (the comparison kernels).  A candidate that fails gets its
 * verdict and reason (refused by the build or the verifier, or failed to compile) and is
 * dropped; a given kernel's failure goes back in its job, for the driver to judge.
 * Workers take the jobs in the order of the list, which the driver makes the order it
 * wants them done in.  When no thread can be started, the jobs run one by one on the main
 * thread as it asks for them, and the tuning goes on, slower.
 */
#define _GNU_SOURCE
#include "../util/util.h"
#include "tune.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static void fail_job(tune_job *j, loom_status st, const char *prefix, const char *msg)
{
    j->st = st;
    if (!j->res) { /* a given kernel: its owner frees it */
        tune_first_line(j->err, sizeof j->err, prefix, msg);
        return;
    }
    j->res->verdict = st == LOOM_ERR_VERIFY || st == LOOM_ERR_INVALID ? LOOM_TUNE_REFUSED : LOOM_TUNE_COMPILE_FAILED;
    tune_first_line(j->res->reason, sizeof j->res->reason, prefix, msg);
    loom_kernel_destroy(j->k);
    j->k = NULL;
}

static void run_job(tune_pool *p, tune_job *j)
{
    char err[2048] = "";
    if (!j->k) {
        j->k = p->t->build(p->shape, j->res->config, err, sizeof err);
        if (!j->k)
            return fail_job(j, LOOM_ERR_INVALID, "the build refused it: ", err[0] ? err : "(no reason)");
    }
    if (loom_verify(j->k) != LOOM_OK)
        return fail_job(j, LOOM_ERR_VERIFY, "verification failed: ", loom_kernel_errors(j->k));
    if (p->g) {
        loom_compile_info info;
        loom_status st = rt_gpu_prepare(p->g, j->k, &info, err, sizeof err);
        j->codegen_ms = info.codegen_ms;
        j->link_ms = info.link_ms;
        j->load_ms = info.load_ms;
        if (st != LOOM_OK)
            return fail_job(j, st, "", err);
    }
    j->st = LOOM_OK;
}

static void *worker(void *arg)
{
    tune_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->njobs ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            return NULL;
        run_job(p, &p->jobs[i]);
        pthread_mutex_lock(&p->mu);
        p->order[p->done] = i;
        if (++p->done == p->njobs)
            p->end_ms = util_now_ms();
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

int tune_pool_start(tune_pool *p, pthread_t *th, int nthreads)
{
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, p) != 0)
            break;
    return started;
}

int tune_pool_next(tune_pool *p, int started, int *seen, tune_progress *pr, bool wait)
{
    if (*seen >= p->njobs)
        return -1;
    if (started == 0 && p->done == *seen) {
        if (!wait)
            return -2;
        int i = p->next++;
        run_job(p, &p->jobs[i]);
        p->order[p->done++] = i;
        if (p->done == p->njobs)
            p->end_ms = util_now_ms();
    }
    pthread_mutex_lock(&p->mu);
    while (p->done <= *seen) {
        if (!wait) {
            pthread_mutex_unlock(&p->mu);
            return -2;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        pr->compiled = p->done;
        pthread_mutex_unlock(&p->mu);
        tune_progress_draw(pr, false);
        pthread_mutex_lock(&p->mu);
    }
    int j = p->order[(*seen)++];
    pr->compiled = p->done;
    pthread_mutex_unlock(&p->mu);
    return j;
}

void tune_pool_finish(tune_pool *p, pthread_t *th, int started, tune_progress *pr)
{
    int seen = 0;
    while (tune_pool_next(p, started, &seen, pr, true) >= 0)
        ;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}
