/* backend_cpu.c -- the CPU backend: streams run by worker threads, events as per-task epochs.
 *
 * Every stream of a device belongs to one worker thread (thread d % threads:
 * four workers on two cores run as two threads).  Worker 0 is the calling
 * thread itself (a step on one worker never changes threads); workers 1.. are
 * threads of their own.  Work is recorded once into each stream's command list
 * (run a task, wait for an event, record an event); a step hands every thread
 * the list to run, runs worker 0's, and waits for the others.
 *
 * A thread runs its streams as one scheduler: each stream in its recorded
 * order, and whenever it is free, the stream whose next command is a task that
 * may start (every wait before it satisfied) with the highest priority, so a
 * ready dA on the critical path is always taken before a ready dW.  Among
 * equal priorities (streams of different devices on one thread: a device has
 * one stream per priority) the task first in program order goes first: under
 * FIFO a thread keeps program order wherever it may, and the simulator's
 * queues rank every task by one total order, (priority, task id).  Records right after a task are made at once (another
 * thread may wait for them).  Only when no stream of the thread can go on does
 * it wait, and then for any of its streams' awaited events, never for one
 * stream while another could progress: every edge of the order points to an
 * earlier task, so the lowest unfinished task is always ready and no step can
 * deadlock.
 *
 * Between steps the threads spin for a short while (SPIN_BETWEEN_STEPS_NS)
 * before they sleep, so back-to-back steps do not pay a wake-up each; the
 * caller spins as briefly for the others to finish.  Steps back to back (pipeline.c) are one
 * list whose task T is task T % ntasks of iteration T / ntasks, run with that iteration's
 * arguments; nothing else changes: the order between iterations is the recorded waits'.  An event is a task's
 * completion in the current step: recording stores the step's epoch, waiting
 * spins briefly and then sleeps on a condition variable until an awaited epoch
 * is there.  A failing task stops every thread (waiters see the failure) and
 * its message comes back to the caller.  OpenBLAS runs one thread per worker
 * (the workers are the parallelism).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>    /* pthread_create, mutexes, condition variables */
#include <stdatomic.h>  /* atomic epochs and flags shared by the threads */
#include <stdio.h>      /* snprintf */
#include <stdlib.h>     /* calloc, malloc, realloc, free, rand_r */
#include <string.h>     /* memset */
#include <time.h>       /* nanosleep, time */

#include "backend_cpu.h"  /* sw_scratch, sw_backend_cpu_new, sw_cpu_run_task */
#include "kernels.h"      /* sw_blas_single_thread */
#include "../exec/runtime.h"

/* CMD_ARRIVE: until the message of the recv task that follows has come from another rank
 * (sw_runtime_arrived; one rank of several processes, exec/messages.h) */
enum { CMD_RUN = 0, CMD_WAIT = 1, CMD_RECORD = 2, CMD_ARRIVE = 3 };

typedef struct {
    int32_t op, id;   /* CMD_*, task or event id */
} command;

typedef struct {
    command *cmd;
    int32_t n, cap;
} command_list;

typedef struct cpu_backend cpu_backend;

typedef struct {
    int device, priority;
    command_list lists[SW_NLISTS];
} cpu_stream;

typedef struct {
    cpu_backend *be;
    int index;
    pthread_t thread;
    int *streams;     /* its streams, most urgent first: priority descending, then id ascending */
    int32_t *cursor;  /* per stream of `streams`: its next command in the current step */
    int nstreams, cap;
    sw_scratch scratch;
    unsigned seed;    /* jitter */
    int64_t wait_ns;  /* the last step's time waiting for other streams' tasks (at its end too) */
    int64_t end_ns;   /* when this worker finished its list in the last step */
} worker;

struct cpu_backend {
    sw_backend base;
    int ndev, nthreads, jitter_us, started_threads;
    worker *workers;
    cpu_stream *streams;            /* nstreams, each on thread device % nthreads */
    int nstreams, stream_cap;
    _Atomic int64_t *event_epoch;   /* ntasks, allocated at the first recorded event */
    int32_t nevents;
    /* a step: the list to run, its epoch, its arguments */
    pthread_mutex_t lock;
    pthread_cond_t start, done, event;
    int64_t epoch;
    int list;
    const sw_step_args *args;
    _Atomic int64_t step_epoch;     /* be->epoch, readable without the lock (spinning threads) */
    _Atomic int running;            /* worker threads still running the step (worker 0 not counted) */
    int shutdown;
    _Atomic int sleepers;           /* threads asleep on `event` */
    _Atomic int failed;
    sw_status fail_status;
    char fail_message[512];
    _Atomic int64_t grow_bytes, grows;
};

/* ------------------------------------------------------------------ arenas, streams, recording */
static sw_status arena_new(sw_backend *b, int device, size_t bytes, void **base) {
    (void)b;
    (void)device;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        return SW_FAIL(SW_ERR_NOMEM, "cannot allocate an arena of %zu bytes for device %d", bytes, device);
    }
    *base = p;
    return SW_OK;
}

static void arena_free(sw_backend *b, int device, void *base) {
    (void)b;
    (void)device;
    free(base);
}

/* Is stream a scanned before stream b: higher priority first, then lower id. */
static int more_urgent(const cpu_backend *be, int a, int b) {
    int pa = be->streams[a].priority, pb = be->streams[b].priority;
    return pa != pb ? pa > pb : a < b;
}

static sw_status stream_new(sw_backend *b, int device, int priority, int *stream) {
    cpu_backend *be = (cpu_backend *)b;
    if (device < 0 || device >= be->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "no device %d on a CPU backend of %d", device, be->ndev);
    }
    worker *w = &be->workers[device % be->nthreads];
    if (be->nstreams == be->stream_cap) {
        int cap = be->stream_cap ? 2 * be->stream_cap : 8;
        cpu_stream *grown = realloc(be->streams, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for a stream");
        }
        be->streams = grown;
        be->stream_cap = cap;
    }
    if (w->nstreams == w->cap) {
        int cap = w->cap ? 2 * w->cap : 4;
        int *ids = realloc(w->streams, sizeof *ids * (size_t)cap);
        if (ids) {
            w->streams = ids;
        }
        int32_t *cursor = ids ? realloc(w->cursor, sizeof *cursor * (size_t)cap) : NULL;
        if (!cursor) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for a stream");
        }
        w->cursor = cursor;
        w->cap = cap;
    }
    int id = be->nstreams++;
    be->streams[id] = (cpu_stream){.device = device, .priority = priority};
    int at = w->nstreams++;   /* keep the thread's streams most urgent first */
    while (at > 0 && more_urgent(be, id, w->streams[at - 1])) {
        w->streams[at] = w->streams[at - 1];
        at--;
    }
    w->streams[at] = id;
    *stream = id;
    return SW_OK;
}

static sw_status push(cpu_backend *be, int list, int stream, int op, int32_t id) {
    if (stream < 0 || stream >= be->nstreams || list < 0 || list >= SW_NLISTS) {
        return SW_FAIL(SW_ERR_VALUE, "no stream %d (of %d) or list %d on this CPU backend", stream, be->nstreams, list);
    }
    command_list *l = &be->streams[stream].lists[list];
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 256;
        command *grown = realloc(l->cmd, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory recording a stream");
        }
        l->cmd = grown;
        l->cap = cap;
    }
    l->cmd[l->n++] = (command){op, id};
    return SW_OK;
}

/* One event per task of the longest list: ntasks, or pipeline x ntasks once the steps back to
 * back are recorded (pipeline.c; recording happens between steps, no thread reads the epochs). */
static sw_status ensure_events(cpu_backend *be) {
    const sw_runtime *rt = be->base.rt;
    int copies = sw_runtime_pipeline_copies(rt);
    int32_t want = sw_runtime_ntasks(rt) * (copies > 1 ? copies : 1);
    if (be->event_epoch && be->nevents >= want) {
        return SW_OK;
    }
    _Atomic int64_t *grown = realloc(be->event_epoch, sizeof *grown * ((size_t)want + 1));
    if (!grown) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for events");
    }
    for (int32_t e = be->event_epoch ? be->nevents : 0; e <= want; e++) {
        atomic_init(&grown[e], 0);
    }
    be->event_epoch = grown;
    be->nevents = want;
    return SW_OK;
}

static sw_status enqueue_task(sw_backend *b, int list, int stream, int32_t task) {
    return push((cpu_backend *)b, list, stream, CMD_RUN, task);
}

static sw_status enqueue_wait(sw_backend *b, int list, int stream, int32_t event) {
    SW_TRY(ensure_events((cpu_backend *)b));
    return push((cpu_backend *)b, list, stream, CMD_WAIT, event);
}

static sw_status enqueue_record(sw_backend *b, int list, int stream, int32_t event) {
    SW_TRY(ensure_events((cpu_backend *)b));
    return push((cpu_backend *)b, list, stream, CMD_RECORD, event);
}

static sw_status enqueue_arrival(sw_backend *b, int list, int stream, int32_t task) {
    return push((cpu_backend *)b, list, stream, CMD_ARRIVE, task);
}

/* ------------------------------------------------------------------ running */
static void fail(cpu_backend *be, sw_status s) {
    pthread_mutex_lock(&be->lock);
    if (!atomic_load(&be->failed)) {
        be->fail_status = s;
        snprintf(be->fail_message, sizeof be->fail_message, "%s", sw_last_error());
        atomic_store(&be->failed, 1);
    }
    pthread_cond_broadcast(&be->event);   /* waiters see the failure and stop */
    pthread_mutex_unlock(&be->lock);
}

static int recorded(cpu_backend *be, int32_t e, int64_t epoch) {
    return atomic_load_explicit(&be->event_epoch[e], memory_order_acquire) == epoch;
}

static void record_event(cpu_backend *be, int32_t e, int64_t epoch) {
    /* sequentially consistent, as the waiter's sleepers increment and epoch loads: one of the
     * two sides sees the other (a release store could pass the sleepers load: a lost wake-up) */
    atomic_store(&be->event_epoch[e], epoch);
    if (atomic_load(&be->sleepers) > 0) {
        pthread_mutex_lock(&be->lock);
        pthread_cond_broadcast(&be->event);
        pthread_mutex_unlock(&be->lock);
    }
}

/* Is the wait or arrival `cmd` over?  An arrival that failed fails the step (and counts as over:
 * the caller sees the failure). */
static int satisfied(cpu_backend *be, const command *cmd, int64_t epoch) {
    if (cmd->op == CMD_WAIT) {
        return recorded(be, cmd->id, epoch);
    }
    int r = sw_runtime_arrived(be->base.rt, cmd->id);
    if (r < 0) {
        fail(be, SW_ERR_VALUE);
        return 1;
    }
    return r;
}

/* Move stream k of worker w past the records and the satisfied waits at its cursor; returns
 * the command it stops at (a task, a wait not yet satisfied) or NULL at the end of its list. */
static const command *advance(worker *w, int k, int list, int64_t epoch) {
    cpu_backend *be = w->be;
    const command_list *l = &be->streams[w->streams[k]].lists[list];
    int32_t *c = &w->cursor[k];
    for (; *c < l->n; ++*c) {
        const command *cmd = &l->cmd[*c];
        if (cmd->op == CMD_RECORD) {
            record_event(be, cmd->id, epoch);
        } else if (cmd->op == CMD_RUN || !satisfied(be, cmd, epoch)) {
            return cmd;
        }
    }
    return NULL;
}

/* Has an event that one of w's streams waits for at its cursor been recorded? */
static int any_wait_over(worker *w, int list, int64_t epoch) {
    cpu_backend *be = w->be;
    for (int k = 0; k < w->nstreams; k++) {
        const command_list *l = &be->streams[w->streams[k]].lists[list];
        int32_t c = w->cursor[k];
        if (c < l->n && l->cmd[c].op == CMD_WAIT && recorded(be, l->cmd[c].id, epoch)) {
            return 1;
        }
    }
    return 0;
}

/* The first stream of w stopped at an arrival (a message from another rank), or -1. */
static int awaiting_message(worker *w, int list) {
    cpu_backend *be = w->be;
    for (int k = 0; k < w->nstreams; k++) {
        const command_list *l = &be->streams[w->streams[k]].lists[list];
        int32_t c = w->cursor[k];
        if (c < l->n && l->cmd[c].op == CMD_ARRIVE) {
            return k;
        }
    }
    return -1;
}

/* Some stream of w waits for a message: poll (the comm thread completes it; nobody signals)
 * until a wait or an arrival is over, 1 if the step failed meanwhile or the message is overdue
 * (the watchdog: the step fails naming the message and its peer). */
static int poll_any(worker *w, int list, int64_t epoch, int k) {
    cpu_backend *be = w->be;
    const sw_runtime *rt = be->base.rt;
    double timeout = sw_runtime_message_timeout(rt);
    int64_t start = sw_now_ns();
    for (long round = 0;; round++) {
        for (int j = 0; j < w->nstreams; j++) {
            const command_list *l = &be->streams[w->streams[j]].lists[list];
            int32_t c = w->cursor[j];
            if (c < l->n && (l->cmd[c].op == CMD_WAIT || l->cmd[c].op == CMD_ARRIVE) && satisfied(be, &l->cmd[c], epoch)) {
                return atomic_load(&be->failed) ? 1 : 0;
            }
        }
        if (atomic_load_explicit(&be->failed, memory_order_relaxed)) {
            return 1;
        }
        double waited = (double)(sw_now_ns() - start) * 1e-9;
        if (timeout >= 0 && waited > timeout) {
            const command_list *l = &be->streams[w->streams[k]].lists[list];
            fail(be, sw_runtime_overdue(rt, l->cmd[w->cursor[k]].id, waited));
            return 1;
        }
        if (round > 2000 || waited > 200e-6) {   /* after the first few hundred microseconds, yield the core
                                                  * (by time too: each round MPI_Tests the message, a few
                                                  * hundred ns, where it was a flag and a mutex) */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Every stream of w waits for an event: 0 once one of them is recorded, 1 if the step
 * failed meanwhile. */
static int wait_any(worker *w, int list, int64_t epoch) {
    cpu_backend *be = w->be;
    int k = awaiting_message(w, list);
    if (k >= 0) {
        return poll_any(w, list, epoch, k);
    }
    for (int spin = 0; spin < 4000; spin++) {   /* most waits are short: a kernel on another thread */
        if (any_wait_over(w, list, epoch)) {
            return 0;
        }
        if (atomic_load_explicit(&be->failed, memory_order_relaxed)) {
            return 1;
        }
    }
    pthread_mutex_lock(&be->lock);
    atomic_fetch_add(&be->sleepers, 1);
    while (!any_wait_over(w, list, epoch) && !atomic_load(&be->failed)) {
        pthread_cond_wait(&be->event, &be->lock);
    }
    atomic_fetch_sub(&be->sleepers, 1);
    pthread_mutex_unlock(&be->lock);
    return atomic_load(&be->failed) ? 1 : 0;
}

static void jitter(worker *w) {
    int us = w->be->jitter_us;
    if (us > 0) {
        long pause = rand_r(&w->seed) % (us + 1);
        struct timespec ts = {0, pause * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* The thread's streams for one step: always the most urgent stream whose next task may start
 * (equal priorities: the earlier task); a wait only when none can. */
static void run_commands(worker *w, int list, int64_t epoch, const sw_step_args *args) {
    cpu_backend *be = w->be;
    size_t before = w->scratch.bytes;
    w->wait_ns = 0;
    sw_task_ctx ctx = {be->base.rt, args, &w->scratch, NULL};
    const int32_t period = sw_runtime_ntasks(be->base.rt);   /* tasks per iteration */
    for (int k = 0; k < w->nstreams; k++) {
        w->cursor[k] = 0;
    }
    for (;;) {
        if (atomic_load_explicit(&be->failed, memory_order_relaxed)) {
            return;
        }
        int pick = -1, blocked = 0;
        int32_t first = 0;   /* the picked stream's task: among equal priorities, program order */
        for (int k = 0; k < w->nstreams; k++) {   /* most urgent first */
            if (pick >= 0 && be->streams[w->streams[k]].priority < be->streams[w->streams[pick]].priority) {
                break;
            }
            const command *c = advance(w, k, list, epoch);
            if (c && c->op == CMD_RUN && (pick < 0 || c->id < first)) {
                pick = k;
                first = c->id;
            } else if (c && (c->op == CMD_WAIT || c->op == CMD_ARRIVE)) {
                blocked = 1;
            }
        }
        if (pick >= 0) {
            const command_list *l = &be->streams[w->streams[pick]].lists[list];
            int32_t task = l->cmd[w->cursor[pick]++].id;
            int32_t it = task / period;   /* its iteration: 0 but in SW_LIST_PIPELINE */
            ctx.args = args + it;
            ctx.iteration = it;
            ctx.loss_sum = sw_runtime_loss_sums(be->base.rt) + (int64_t)it * period;
            jitter(w);
            int64_t *ns = &sw_runtime_task_ns(be->base.rt)[2 * (int64_t)task];
            ns[0] = sw_now_ns();
            sw_status s = sw_cpu_run_task(&ctx, task - it * period);
            ns[1] = sw_now_ns();
            if (s != SW_OK) {
                fail(be, s);
                return;
            }
            while (w->cursor[pick] < l->n && l->cmd[w->cursor[pick]].op == CMD_RECORD) {   /* others may wait */
                record_event(be, l->cmd[w->cursor[pick]++].id, epoch);
            }
            continue;
        }
        if (!blocked) {
            break;   /* every stream at its end */
        }
        int64_t t0 = sw_now_ns();
        int failed = wait_any(w, list, epoch);
        w->wait_ns += sw_now_ns() - t0;
        if (failed) {
            return;
        }
    }
    if (w->scratch.bytes != before) {
        atomic_fetch_add(&be->grow_bytes, (int64_t)(w->scratch.bytes - before));
        atomic_fetch_add(&be->grows, 1);
    }
}

/* How long a worker thread spins for the next step (and the caller for the others to finish)
 * before sleeping on a condition variable: a training loop's Python between two steps takes
 * some tens of microseconds, a futex wake-up about as long again on a loaded machine. */
#ifndef SPIN_BETWEEN_STEPS_NS
#define SPIN_BETWEEN_STEPS_NS 200000
#endif

/* Spin until *flag differs from `value` (1) or SPIN_BETWEEN_STEPS_NS have passed (0). */
static int spin_while_equal64(_Atomic int64_t *flag, int64_t value) {
    int64_t until = sw_now_ns() + SPIN_BETWEEN_STEPS_NS;
    for (;;) {
        for (int k = 0; k < 256; k++) {
            if (atomic_load_explicit(flag, memory_order_acquire) != value) {
                return 1;
            }
        }
        if (sw_now_ns() > until) {
            return 0;
        }
    }
}

static int spin_until_zero(_Atomic int *count) {
    int64_t until = sw_now_ns() + SPIN_BETWEEN_STEPS_NS;
    for (;;) {
        for (int k = 0; k < 256; k++) {
            if (atomic_load_explicit(count, memory_order_acquire) == 0) {
                return 1;
            }
        }
        if (sw_now_ns() > until) {
            return 0;
        }
    }
}

/* A worker's list for one step; it notes when it finished, so that the time until the last
 * worker finishes counts as waiting for other threads' tasks (not as the runtime's own time). */
static void run_list(worker *w, int list, int64_t epoch, const sw_step_args *args) {
    run_commands(w, list, epoch, args);
    w->end_ns = sw_now_ns();
}

static void *worker_main(void *arg) {
    worker *w = arg;
    cpu_backend *be = w->be;
    sw_blas_single_thread();
    int64_t seen = 0;
    for (;;) {
        (void)spin_while_equal64(&be->step_epoch, seen);   /* the next step, or shutdown, comes soon */
        pthread_mutex_lock(&be->lock);
        while (!be->shutdown && be->epoch == seen) {
            pthread_cond_wait(&be->start, &be->lock);
        }
        if (be->shutdown) {
            pthread_mutex_unlock(&be->lock);
            return NULL;
        }
        seen = be->epoch;
        int list = be->list;
        const sw_step_args *args = be->args;
        pthread_mutex_unlock(&be->lock);
        run_list(w, list, seen, args);
        if (atomic_fetch_sub(&be->running, 1) == 1) {   /* the last one: the caller may sleep */
            pthread_mutex_lock(&be->lock);
            pthread_cond_signal(&be->done);
            pthread_mutex_unlock(&be->lock);
        }
    }
}

static sw_status launch(sw_backend *b, int list, const sw_step_args *args) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_lock(&be->lock);
    atomic_store(&be->failed, 0);
    be->list = list;
    be->args = args;
    atomic_store(&be->running, be->nthreads - 1);
    be->epoch++;
    atomic_store_explicit(&be->step_epoch, be->epoch, memory_order_release);
    pthread_cond_broadcast(&be->start);
    int64_t epoch = be->epoch;
    pthread_mutex_unlock(&be->lock);
    run_list(&be->workers[0], list, epoch, args);   /* worker 0 is this thread */
    if (!spin_until_zero(&be->running)) {
        pthread_mutex_lock(&be->lock);
        while (atomic_load(&be->running) > 0) {
            pthread_cond_wait(&be->done, &be->lock);
        }
        pthread_mutex_unlock(&be->lock);
    }
    int64_t end = sw_now_ns();   /* every worker has finished (its end_ns written before `running` fell) */
    for (int k = 0; k < be->nthreads; k++) {
        be->workers[k].wait_ns += end - be->workers[k].end_ns;
    }
    if (atomic_load(&be->failed)) {
        return SW_FAIL(be->fail_status, "%s", be->fail_message);
    }
    return SW_OK;
}

static void workspace_stats(sw_backend *b, int64_t *bytes, int64_t *grows) {
    cpu_backend *be = (cpu_backend *)b;
    *bytes = atomic_load(&be->grow_bytes);
    *grows = atomic_load(&be->grows);
}

static int wait_times(sw_backend *b, int64_t *ns, int max) {
    cpu_backend *be = (cpu_backend *)b;
    for (int k = 0; k < be->nthreads && k < max; k++) {
        ns[k] = be->workers[k].wait_ns;
    }
    return be->nthreads;
}

static void destroy(sw_backend *b) {
    cpu_backend *be = (cpu_backend *)b;
    pthread_mutex_lock(&be->lock);
    be->shutdown = 1;
    atomic_store(&be->step_epoch, -1);   /* spinning threads stop spinning and see the shutdown */
    pthread_cond_broadcast(&be->start);
    pthread_mutex_unlock(&be->lock);
    for (int k = 1; k <= be->started_threads; k++) {
        pthread_join(be->workers[k].thread, NULL);
    }
    for (int k = 0; k < be->nthreads && be->workers; k++) {
        free(be->workers[k].streams);
        free(be->workers[k].cursor);
        free(be->workers[k].scratch.data);
    }
    for (int k = 0; k < be->nstreams; k++) {
        for (int l = 0; l < SW_NLISTS; l++) {
            free(be->streams[k].lists[l].cmd);
        }
    }
    free(be->streams);
    pthread_mutex_destroy(&be->lock);
    pthread_cond_destroy(&be->start);
    pthread_cond_destroy(&be->done);
    pthread_cond_destroy(&be->event);
    free(be->workers);
    free(be->event_epoch);
    free(be);
}

static const sw_backend_i CPU_BACKEND = {
    .name = "cpu",
    .arena_new = arena_new,
    .arena_free = arena_free,
    .stream_new = stream_new,
    .enqueue_task = enqueue_task,
    .enqueue_wait = enqueue_wait,
    .enqueue_record = enqueue_record,
    .enqueue_arrival = enqueue_arrival,
    .launch = launch,
    .to_host = NULL,     /* arenas are host memory */
    .from_host = NULL,
    .workspace_stats = workspace_stats,
    .wait_times = wait_times,
    .destroy = destroy,
    .supports_op = sw_cpu_supports_op,
};

const sw_backend_i *sw_backend_cpu_iface(void) { return &CPU_BACKEND; }

sw_status sw_backend_cpu_new(int ndev, int threads, int jitter_us, sw_backend **out) {
    *out = NULL;
    if (ndev < 1 || threads < 1 || jitter_us < 0 || jitter_us > 100000) {
        return SW_FAIL(SW_ERR_VALUE, "a CPU backend needs >= 1 device and thread and a jitter of 0..100000 us "
                       "(got %d, %d, %d)", ndev, threads, jitter_us);
    }
    threads = threads < ndev ? threads : ndev;
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a CPU backend");
    }
    be->base.i = &CPU_BACKEND;
    be->ndev = ndev;
    be->nthreads = threads;
    be->jitter_us = jitter_us;
    pthread_mutex_init(&be->lock, NULL);
    pthread_cond_init(&be->start, NULL);
    pthread_cond_init(&be->done, NULL);
    pthread_cond_init(&be->event, NULL);
    be->workers = calloc((size_t)threads, sizeof *be->workers);
    if (!be->workers) {
        destroy(&be->base);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a CPU backend");
    }
    unsigned seed = (unsigned)time(NULL);
    for (int k = 0; k < threads; k++) {
        worker *w = &be->workers[k];
        w->be = be;
        w->index = k;
        w->seed = seed ^ (unsigned)(k * 2654435761u);
        if (k == 0) {
            continue;   /* the calling thread */
        }
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            destroy(&be->base);
            return SW_FAIL(SW_ERR_NOMEM, "cannot start CPU worker thread %d", k);
        }
        be->started_threads++;
    }
    *out = &be->base;
    return SW_OK;
}
