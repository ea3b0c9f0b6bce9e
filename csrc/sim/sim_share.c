/* sim_share.c -- the event loop with shared compute: concurrent kernels of several streams on one device.
 *
 * simulate.c gives every resource to one task at a time.  A GPU runs kernels of
 * several streams at once, each on the part of the device its own parallelism
 * fills (TurboDL, section 2.2: "if one stream does not need all the computing
 * cores, those idle cores can be allocated to other streams").  Here a device is a
 * *pool* of capacity 1 and a task on it has a *share* f in (0, 1], the fraction of
 * the device its kernel can fill (sw_task_share).  Alone it runs for its duration
 * d occupying f; whenever the set of running tasks changes, the pool is handed out
 * again in rank order (the lowest id first: sim_plan.c numbers tasks by stream
 * priority, then program order), each taking min(f, what is left), and a task given
 * g progresses at g / f of its alone speed.  So two tasks of share 1/2 end together
 * after d, two of share 1 take 2d, and a ready task of a more urgent stream takes
 * the device from a less urgent one as a GPU's block scheduler does (at block
 * granularity: here continuously).
 *
 * Other resources (links, network adapters, a CPU thread's core) stay exclusive
 * and are taken as in simulate.c: a ready task waits in line (by id) on each one
 * it needs and starts once it is first in line on all of them and they are free;
 * it holds them until it ends.  With one stream per device (FIFO) at most one task
 * of a device is ready at a time, so the pools change nothing: the replay is
 * simulate.c's.
 *
 * The loop advances from one change to the next (a task ends; the rates stay
 * constant in between): O(E x A) for E events and A tasks running at once.
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* malloc, calloc, free */

#include "core/id_heap.h"
#include "internal.h"

double sw_task_share(const sw_task *t, const sw_machine *m) {
    if (!m->dev_fill || t->device < 0 || t->device >= m->ndev || !(m->dev_fill[t->device] > 0)) {
        return 1.0;
    }
    double f = (double)(t->elements > 0 ? t->elements : 1) / m->dev_fill[t->device];
    return f < 1.0 ? f : 1.0;
}

typedef struct {
    int32_t ntasks, nres, npools;
    const double *duration, *share;
    const int32_t *res_ptr, *res, *pool;
    double *start, *end;
    double *left;          /* per task: alone seconds still to run when its rate last changed */
    double *rate;          /* per task: its speed now (1: alone; 0 before it runs) */
    double *next_rate;     /* per task: scratch of assign_rates */
    double *fin;           /* per running task: when it ends at its current rate */
    sw_id_heap *line;       /* per exclusive resource */
    char *busy;            /* per exclusive resource */
    int32_t *running;      /* tasks running now (holding their resources), any order */
    int32_t nrunning;
    int32_t **pool_tasks;  /* per pool: its running tasks sorted by id (pool_len[p] of pool_cap[p]) */
    int32_t *pool_len, *pool_cap;
    int32_t *finished;     /* tasks ending at the current instant */
    int32_t nfinished;
    int32_t *missing;      /* per task: dependencies not yet done */
    int32_t *child_ptr, *children;
    int32_t *look;         /* exclusive resources to look at */
    int32_t nlook;
    char *queued;
    int32_t *blocked;      /* per task: which of its resources stopped it starting last (sw_sim_first_in_line) */
} loop;

static void look_at(loop *s, int32_t r) {
    if (!s->queued[r]) {
        s->queued[r] = 1;
        s->look[s->nlook++] = r;
    }
}

/* Task t holds its resources from now on: it runs, in its pool's list if it has one. */
static int run(loop *s, int32_t t) {
    s->running[s->nrunning++] = t;
    s->rate[t] = 0.0;
    s->fin[t] = s->left[t] <= 0 ? -INFINITY : INFINITY;   /* ends now / not before assign_rates */
    int32_t p = s->pool[t];
    if (p >= 0) {   /* insertion by id: the lists are about a device's streams long */
        if (s->pool_len[p] == s->pool_cap[p]) {
            int32_t cap = s->pool_cap[p] ? 2 * s->pool_cap[p] : 16;
            int32_t *grown = realloc(s->pool_tasks[p], sizeof *grown * (size_t)cap);
            if (!grown) {
                return -1;
            }
            s->pool_tasks[p] = grown;
            s->pool_cap[p] = cap;
        }
        int32_t *list = s->pool_tasks[p], k = s->pool_len[p]++;
        while (k > 0 && list[k - 1] > t) {
            list[k] = list[k - 1];
            k--;
        }
        list[k] = t;
    }
    return 0;
}

/* Start t if it heads the line of every exclusive resource it needs and they are free. */
static int try_start(loop *s, int32_t t) {
    if (!sw_sim_first_in_line(t, s->res + s->res_ptr[t], s->res_ptr[t + 1] - s->res_ptr[t], s->busy, s->line,
                              &s->blocked[t])) {
        return 0;
    }
    for (int32_t k = s->res_ptr[t]; k < s->res_ptr[t + 1]; k++) {
        sw_id_heap_pop(&s->line[s->res[k]]);
        s->busy[s->res[k]] = 1;
    }
    return run(s, t);
}

static int make_ready(loop *s, int32_t t) {
    if (s->res_ptr[t] == s->res_ptr[t + 1]) {
        return run(s, t);
    }
    for (int32_t k = s->res_ptr[t]; k < s->res_ptr[t + 1]; k++) {
        if (sw_id_heap_push(&s->line[s->res[k]], t) < 0) {
            return -1;
        }
        look_at(s, s->res[k]);
    }
    return 0;
}

static int drain(loop *s) {
    while (s->nlook > 0) {
        int32_t r = s->look[--s->nlook];
        s->queued[r] = 0;
        if (!s->busy[r] && !sw_id_heap_empty(&s->line[r]) && try_start(s, sw_id_heap_top(&s->line[r])) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Rates of the running tasks: a pool handed out in id order, min(share, what is left) each;
 * a task without a pool runs alone.  A task whose rate changes gets a new projected end (left
 * at its old rate until now, then the new rate); one that keeps its rate keeps its end, so a
 * task never slowed ends at start + duration exactly, as in simulate.c.  A task's start is the
 * first instant it progresses. */
static void assign_rates(loop *s, double now) {
    for (int32_t p = 0; p < s->npools; p++) {
        double left = 1.0;
        const int32_t *list = s->pool_tasks[p];
        for (int32_t k = 0; k < s->pool_len[p]; k++) {
            int32_t t = list[k];
            double f = s->share[t], give = f < left ? f : left;
            s->next_rate[t] = give > 0 ? give / f : 0.0;
            left -= give;
            left = left > 0 ? left : 0.0;
        }
    }
    for (int32_t k = 0; k < s->nrunning; k++) {
        int32_t t = s->running[k];
        double r = s->pool[t] < 0 ? 1.0 : s->next_rate[t];
        if (r != s->rate[t]) {
            if (s->rate[t] > 0) {
                s->left[t] = (s->fin[t] - now) * s->rate[t];
                s->left[t] = s->left[t] > 0 ? s->left[t] : 0.0;
            }
            s->rate[t] = r;
            s->fin[t] = s->left[t] <= 0 ? now : r > 0 ? now + s->left[t] / r : INFINITY;
        }
        if (s->start[t] < 0 && (r > 0 || s->left[t] <= 0)) {
            s->start[t] = now;
        }
    }
}

/* Task t ends now: out of the running set and its pool, its resources free, children readied. */
static int finish(loop *s, int32_t t, double now) {
    s->end[t] = now;
    if (s->start[t] < 0) {
        s->start[t] = now;
    }
    int32_t p = s->pool[t];
    if (p >= 0) {
        int32_t *list = s->pool_tasks[p], n = s->pool_len[p], k = 0;
        while (k < n && list[k] != t) {
            k++;
        }
        for (; k + 1 < n; k++) {
            list[k] = list[k + 1];
        }
        s->pool_len[p] = n - 1;
    }
    for (int32_t k = s->res_ptr[t]; k < s->res_ptr[t + 1]; k++) {
        s->busy[s->res[k]] = 0;
        look_at(s, s->res[k]);
    }
    for (int32_t k = s->child_ptr[t]; k < s->child_ptr[t + 1]; k++) {
        int32_t c = s->children[k];
        if (--s->missing[c] == 0 && make_ready(s, c) < 0) {
            return -1;
        }
    }
    return 0;
}

static sw_status check_inputs(int32_t ntasks, const double *duration, const int32_t *dep_ptr, const int32_t *deps,
                              const int32_t *res_ptr, const int32_t *res, int32_t nres, const int32_t *pool,
                              const double *share, int32_t npools) {
    if (ntasks < 0 || nres < 0 || npools < 0) {
        return SW_FAIL(SW_ERR_VALUE, "negative task (%d), resource (%d) or pool (%d) count", ntasks, nres, npools);
    }
    for (int32_t t = 0; t < ntasks; t++) {
        if (!(duration[t] >= 0) || pool[t] < -1 || pool[t] >= npools || (pool[t] >= 0 && !(share[t] > 0 &&
                                                                                            share[t] <= 1))) {
            return SW_FAIL(SW_ERR_VALUE, "task %d: duration %g, pool %d (of %d) or share %g out of range", t,
                           duration[t], pool[t], npools, pool[t] >= 0 ? share[t] : 1.0);
        }
        SW_TRY(sw_sim_check_task(t, ntasks, dep_ptr, deps, res_ptr, res, nres));
    }
    return SW_OK;
}

static void loop_free(loop *s) {
    if (s->line) {
        for (int32_t r = 0; r < s->nres; r++) {
            free(s->line[r].items);
        }
    }
    free(s->line);
    free(s->busy);
    free(s->left);
    free(s->rate);
    free(s->next_rate);
    free(s->fin);
    free(s->running);
    for (int32_t p = 0; s->pool_tasks && p < s->npools; p++) {
        free(s->pool_tasks[p]);
    }
    free(s->pool_tasks);
    free(s->pool_len);
    free(s->pool_cap);
    free(s->finished);
    free(s->missing);
    free(s->child_ptr);
    free(s->children);
    free(s->look);
    free(s->queued);
    free(s->blocked);
}

/* Children of every task (the dependency lists reversed), in task order. */
static void reverse_deps(loop *s, const int32_t *dep_ptr, const int32_t *deps) {
    int32_t n = s->ntasks;
    for (int32_t t = 0; t < n; t++) {
        s->missing[t] = dep_ptr[t + 1] - dep_ptr[t];
        for (int32_t k = dep_ptr[t]; k < dep_ptr[t + 1]; k++) {
            s->child_ptr[deps[k] + 1]++;
        }
    }
    for (int32_t t = 0; t < n; t++) {
        s->child_ptr[t + 1] += s->child_ptr[t];
    }
    for (int32_t t = 0; t < n; t++) {   /* s->look (n + nres + 1 entries) serves as the fill counts */
        s->look[t] = 0;
    }
    for (int32_t t = 0; t < n; t++) {
        for (int32_t k = dep_ptr[t]; k < dep_ptr[t + 1]; k++) {
            int32_t p = deps[k];
            s->children[s->child_ptr[p] + s->look[p]++] = t;
        }
    }
}

sw_status sw_simulate_shared(int32_t ntasks, const double *duration, const int32_t *dep_ptr, const int32_t *deps,
                             const int32_t *res_ptr, const int32_t *res, int32_t nres, const int32_t *pool,
                             const double *share, int32_t npools, double *start, double *end, double *makespan) {
    *makespan = 0.0;
    SW_TRY(check_inputs(ntasks, duration, dep_ptr, deps, res_ptr, res, nres, pool, share, npools));
    size_t n1 = (size_t)ntasks + 1;
    loop s = {.ntasks = ntasks, .nres = nres, .npools = npools, .duration = duration, .share = share,
              .res_ptr = res_ptr, .res = res, .pool = pool, .start = start, .end = end};
    s.line = calloc((size_t)nres + 1, sizeof *s.line);
    s.busy = calloc((size_t)nres + 1, 1);
    s.left = malloc(sizeof *s.left * n1);
    s.rate = calloc(n1, sizeof *s.rate);
    s.next_rate = calloc(n1, sizeof *s.next_rate);
    s.fin = malloc(sizeof *s.fin * n1);
    s.running = malloc(sizeof *s.running * n1);
    s.pool_tasks = calloc((size_t)npools + 1, sizeof *s.pool_tasks);
    s.pool_len = calloc((size_t)npools + 1, sizeof *s.pool_len);
    s.pool_cap = calloc((size_t)npools + 1, sizeof *s.pool_cap);
    s.finished = malloc(sizeof *s.finished * n1);
    s.missing = malloc(sizeof *s.missing * n1);
    s.child_ptr = calloc(n1, sizeof *s.child_ptr);
    s.children = malloc(sizeof *s.children * ((size_t)dep_ptr[ntasks] + 1));
    s.look = malloc(sizeof *s.look * (n1 + (size_t)nres));
    s.queued = calloc((size_t)nres + 1, 1);
    s.blocked = calloc(n1, sizeof *s.blocked);
    sw_status st = SW_OK;
    if (!s.line || !s.busy || !s.left || !s.rate || !s.next_rate || !s.fin || !s.running || !s.pool_tasks || !s.pool_len || !s.pool_cap || !s.finished ||
        !s.missing || !s.child_ptr || !s.children || !s.look || !s.queued || !s.blocked) {
        loop_free(&s);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a shared-compute replay of %d tasks", ntasks);
    }
    reverse_deps(&s, dep_ptr, deps);
    for (int32_t t = 0; t < ntasks; t++) {
        s.left[t] = duration[t];
        start[t] = end[t] = -1.0;
    }
    for (int32_t t = 0; t < ntasks && st == SW_OK; t++) {
        if (s.missing[t] == 0 && make_ready(&s, t) < 0) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    int32_t done = 0;
    double now = 0.0;
    while (st == SW_OK) {
        /* what ends now ends first (its resources free, its children ready, zero-length ones
         * included, in rounds), then the free resources start their lines: simulate.c's order */
        int32_t ended;
        do {
            ended = 0;
            s.nfinished = 0;
            for (int32_t k = 0; k < s.nrunning;) {
                int32_t t = s.running[k];
                if (s.fin[t] <= now) {
                    s.finished[s.nfinished++] = t;
                    s.running[k] = s.running[--s.nrunning];
                } else {
                    k++;
                }
            }
            for (int32_t k = 0; k < s.nfinished && st == SW_OK; k++) {   /* in id order */
                int32_t best = k;
                for (int32_t j = k + 1; j < s.nfinished; j++) {
                    best = s.finished[j] < s.finished[best] ? j : best;
                }
                int32_t t = s.finished[best];
                s.finished[best] = s.finished[k];
                s.finished[k] = t;
                s.left[t] = 0.0;
                done++;
                ended = 1;
                if (finish(&s, t, now) < 0) {
                    st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
                }
            }
            if (st == SW_OK && !ended && drain(&s) < 0) {
                st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            }
            for (int32_t k = 0; k < s.nrunning && !ended; k++) {   /* started with nothing to run */
                ended = s.fin[s.running[k]] <= now;
            }
        } while (st == SW_OK && ended);
        if (st != SW_OK) {
            break;
        }
        assign_rates(&s, now);
        if (s.nrunning == 0) {
            break;
        }
        double next = INFINITY;   /* every pool's first task progresses: the next end is finite */
        for (int32_t k = 0; k < s.nrunning; k++) {
            next = s.fin[s.running[k]] < next ? s.fin[s.running[k]] : next;
        }
        if (!(next < INFINITY)) {
            st = SW_FAIL(SW_ERR_VALUE, "shared-compute replay stalled at %g s with %d tasks running", now,
                         s.nrunning);
            break;
        }
        now = next > now ? next : now;
    }
    if (st == SW_OK && done != ntasks) {
        st = SW_FAIL(SW_ERR_VALUE, "%d of %d tasks never became ready: the dependencies have a cycle",
                     ntasks - done, ntasks);
    }
    *makespan = now;
    loop_free(&s);
    return st;
}
