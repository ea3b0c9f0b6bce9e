/* parallel.c -- run fn(ctx, i) for i = 0 .. n-1 on a few threads.
 *
 * Used to fill cost tables: each item writes its own table and reads the problem,
 * which nobody changes meanwhile, so a shared counter is the only synchronization.
 * The first failure stops the others and comes back with its message (the message
 * is thread-local, so it is copied out of the failing thread). */
#include <pthread.h>    /* pthread_create */
#include <stdatomic.h>  /* atomic_int */
#include <stdio.h>      /* snprintf */

#include "internal.h"

enum { MAX_THREADS = 64 };

typedef struct {
    sw_status (*fn)(void *ctx, int i);
    void *ctx;
    int n;
    atomic_int next;
    atomic_int failed;
    sw_status status;
    char message[512];
    pthread_mutex_t lock;
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        int i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed)) {
            break;
        }
        sw_status s = j->fn(j->ctx, i);
        if (s != SW_OK) {
            pthread_mutex_lock(&j->lock);
            if (!atomic_load(&j->failed)) {
                j->status = s;
                snprintf(j->message, sizeof j->message, "%s", sw_last_error());
                atomic_store(&j->failed, 1);
            }
            pthread_mutex_unlock(&j->lock);
        }
    }
    return NULL;
}

sw_status sw_parallel_for(int n, int threads, sw_status (*fn)(void *ctx, int i), void *ctx) {
    job j = {.fn = fn, .ctx = ctx, .n = n, .status = SW_OK};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.lock, NULL);
    int nthreads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    nthreads = nthreads > n ? (n > 0 ? n : 1) : nthreads;
    pthread_t tids[MAX_THREADS];
    int started = 0;
    for (int k = 1; k < nthreads; k++) {   /* this thread is worker 0 */
        if (pthread_create(&tids[started], NULL, worker, &j) == 0) {
            started++;
        }
    }
    worker(&j);
    for (int k = 0; k < started; k++) {
        pthread_join(tids[k], NULL);
    }
    pthread_mutex_destroy(&j.lock);
    if (atomic_load(&j.failed)) {
        return SW_FAIL(j.status, "%s", j.message);
    }
    return SW_OK;
}
