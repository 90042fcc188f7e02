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
 *
 * The time budget: when the pool has a deadline, a candidate whose compile would not end
 * before it (judged by the mean wall time of the compiles so far) is not compiled but
 * skipped, with the budget as its reason, so that the tuning ends about when its budget
 * says, with the best of what it compiled.  Given kernels and the reference config are
 * always compiled.  The driver can also wait for one given job (tune_pool_wait): the
 * fill kernels that make the inputs on the device, needed before any check.
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

/* Would job j's compile, started now, end past the deadline?  (Under p->mu.) */
static bool past_deadline(const tune_pool *p, const tune_job *j)
{
    if (!(p->deadline_ms > 0) || !j->res || j->must)
        return false;
    double mean = p->job_ms_n ? p->job_ms_sum / p->job_ms_n : 0;
    return util_now_ms() + mean > p->deadline_ms;
}

/* Run job i, or skip it past the deadline; then record it as finished.  Called without
 * p->mu held. */
static void do_job(tune_pool *p, int i)
{
    tune_job *j = &p->jobs[i];
    pthread_mutex_lock(&p->mu);
    bool skip = past_deadline(p, j);
    pthread_mutex_unlock(&p->mu);
    double t0 = util_now_ms();
    if (skip) {
        j->st = LOOM_ERR_RUNTIME;
        j->res->verdict = LOOM_TUNE_SKIPPED;
        snprintf(j->res->reason, sizeof j->res->reason, "%s",
                 p->budget_why ? p->budget_why : "not compiled: the time budget ran out");
    } else {
        run_job(p, j);
    }
    double ms = util_now_ms() - t0;
    pthread_mutex_lock(&p->mu);
    if (skip) {
        p->nskipped++;
    } else if (j->res) {
        p->job_ms_sum += ms;
        p->job_ms_n++;
    }
    j->finished = true;
    p->order[p->done] = i;
    if (++p->done == p->njobs)
        p->end_ms = util_now_ms();
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
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
        do_job(p, i);
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

/* With p->mu held: wait for a job to finish, at most 100 ms, then redraw the progress bar
 * (without the lock); returns with p->mu held again. */
static void wait_a_tick(tune_pool *p, tune_progress *pr)
{
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

int tune_pool_next(tune_pool *p, int started, int *seen, tune_progress *pr, bool wait)
{
    if (*seen >= p->njobs)
        return -1;
    if (started == 0 && p->done == *seen) {
        if (!wait)
            return -2;
        do_job(p, p->next++);
    }
    pthread_mutex_lock(&p->mu);
    while (p->done <= *seen) {
        if (!wait) {
            pthread_mutex_unlock(&p->mu);
            return -2;
        }
        wait_a_tick(p, pr);
    }
    int j = p->order[(*seen)++];
    pr->compiled = p->done;
    pthread_mutex_unlock(&p->mu);
    return j;
}

void tune_pool_wait(tune_pool *p, int started, int j, tune_progress *pr)
{
    if (started == 0) {
        while (!p->jobs[j].finished && p->next < p->njobs)
            do_job(p, p->next++);
        return;
    }
    pthread_mutex_lock(&p->mu);
    while (!p->jobs[j].finished) {
        wait_a_tick(p, pr);
    }
    pthread_mutex_unlock(&p->mu);
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
