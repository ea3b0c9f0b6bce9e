/* simulate.c -- event-driven replay of a task graph (the simulator's core).
 *
 * Every task needs a set of resources (a device's compute queue, the links of
 * a route) for its whole duration.  A task is *ready* when all its
 * dependencies have finished; among the ready tasks of a resource the lowest
 * task id (program order) goes first, and a task starts only when it is first
 * in line on every resource it needs and they are all free -- so a transfer on
 * a two-link route holds both links, and nothing overtakes it on either.
 * Tasks without resources start as soon as they are ready.
 *
 * Inputs are flat arrays (CSR for dependencies and resources); the output is
 * every task's start time.  O((T + R + E) log T) for T tasks, E dependencies.
 */
#include <stdlib.h>  /* malloc, calloc, free */

#include "core/id_heap.h"
#include "internal.h"

typedef struct {
    double time;
    int32_t task;
} event;

static int earlier(event a, event b) { return a.time < b.time || (a.time == b.time && a.task < b.task); }

static void ev_push(event *heap, int32_t *len, event e) {
    int32_t i = (*len)++;
    while (i > 0 && earlier(e, heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = e;
}

static event ev_pop(event *heap, int32_t *len) {
    event top = heap[0], v = heap[--(*len)];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *len) {
            break;
        }
        if (c + 1 < *len && earlier(heap[c + 1], heap[c])) {
            c++;
        }
        if (!earlier(heap[c], v)) {
            break;
        }
        heap[i] = heap[c];
        i = c;
    }
    if (*len > 0) {
        heap[i] = v;
    }
    return top;
}

typedef struct {
    int32_t ntasks, nres;
    const double *duration;
    const int32_t *res_ptr, *res;
    sw_id_heap *line;        /* per resource: ready tasks waiting for it, by id */
    char *busy;           /* per resource: a task holds it now */
    event *events;
    int32_t nevents;
    double *start;
    int32_t *worklist;    /* resources to look at */
    int32_t nwork;
    char *queued;         /* resource already in the worklist */
    int32_t *blocked;     /* per task: which of its resources stopped it starting last (sw_sim_first_in_line) */
} sim;

static void look_at(sim *s, int32_t r) {
    if (!s->queued[r]) {
        s->queued[r] = 1;
        s->worklist[s->nwork++] = r;
    }
}

/* Start task t now if it heads the line of every resource it needs and they are free. */
static int try_task(sim *s, int32_t t, double now) {
    if (!sw_sim_first_in_line(t, s->res + s->res_ptr[t], s->res_ptr[t + 1] - s->res_ptr[t], s->busy, s->line,
                              &s->blocked[t])) {
        return 0;
    }
    for (int32_t k = s->res_ptr[t]; k < s->res_ptr[t + 1]; k++) {
        int32_t r = s->res[k];
        sw_id_heap_pop(&s->line[r]);
        s->busy[r] = 1;
    }
    s->start[t] = now;
    ev_push(s->events, &s->nevents, (event){now + s->duration[t], t});
    return 1;
}

int sw_sim_first_in_line(int32_t t, const int32_t *res, int32_t n, const char *busy, const sw_id_heap *line,
                         int32_t *blocked) {
    int32_t k = *blocked < n ? *blocked : 0;
    for (int32_t i = 0; i < n; i++, k = k + 1 < n ? k + 1 : 0) {
        int32_t r = res[k];
        if (busy[r] || sw_id_heap_empty(&line[r]) || sw_id_heap_top(&line[r]) != t) {
            *blocked = k;
            return 0;
        }
    }
    return 1;
}

static int make_ready(sim *s, int32_t t, double now) {
    if (s->res_ptr[t] == s->res_ptr[t + 1]) {  /* needs nothing: runs at once */
        s->start[t] = now;
        ev_push(s->events, &s->nevents, (event){now + s->duration[t], t});
        return 0;
    }
    for (int32_t k = s->res_ptr[t]; k < s->res_ptr[t + 1]; k++) {
        if (sw_id_heap_push(&s->line[s->res[k]], t) < 0) {
            return -1;
        }
        look_at(s, s->res[k]);
    }
    return 0;
}

static void drain_worklist(sim *s, double now) {
    while (s->nwork > 0) {
        int32_t r = s->worklist[--s->nwork];
        s->queued[r] = 0;
        if (!s->busy[r] && !sw_id_heap_empty(&s->line[r])) {
            try_task(s, sw_id_heap_top(&s->line[r]), now);  /* its resources are looked at again when it ends */
        }
    }
}

sw_status sw_sim_check_task(int32_t t, int32_t ntasks, const int32_t *dep_ptr, const int32_t *deps,
                            const int32_t *res_ptr, const int32_t *res, int32_t nres) {
    for (int32_t k = dep_ptr[t]; k < dep_ptr[t + 1]; k++) {
        if (deps[k] < 0 || deps[k] >= ntasks || deps[k] == t) {
            return SW_FAIL(SW_ERR_VALUE, "task %d depends on task %d, which does not exist", t, deps[k]);
        }
    }
    for (int32_t k = res_ptr[t]; k < res_ptr[t + 1]; k++) {
        if (res[k] < 0 || res[k] >= nres) {
            return SW_FAIL(SW_ERR_VALUE, "task %d needs resource %d of %d", t, res[k], nres);
        }
    }
    return SW_OK;
}

sw_status sw_simulate_tasks(int32_t ntasks, const double *duration, const int32_t *dep_ptr, const int32_t *deps,
                            const int32_t *res_ptr, const int32_t *res, int32_t nres, double *start,
                            double *makespan) {
    *makespan = 0.0;
    if (ntasks < 0 || nres < 0) {
        return SW_FAIL(SW_ERR_VALUE, "negative task (%d) or resource (%d) count", ntasks, nres);
    }
    for (int32_t t = 0; t < ntasks; t++) {
        if (!(duration[t] >= 0)) {
            return SW_FAIL(SW_ERR_VALUE, "task %d has a negative or NaN duration", t);
        }
        SW_TRY(sw_sim_check_task(t, ntasks, dep_ptr, deps, res_ptr, res, nres));
    }
    /* Sizes below are "count + 1" (so that zero tasks or resources still allocate) computed
     * in size_t: in int32 they overflow for counts of INT32_MAX. */
    sw_status st = SW_OK;
    sim s = {.ntasks = ntasks, .nres = nres, .duration = duration, .res_ptr = res_ptr, .res = res, .start = start};
    int32_t *missing = calloc((size_t)ntasks + 1, sizeof *missing);
    int32_t *child_ptr = calloc((size_t)ntasks + 1, sizeof *child_ptr);
    int32_t *children = malloc(sizeof *children * ((size_t)dep_ptr[ntasks] + 1));
    s.line = calloc((size_t)nres + 1, sizeof *s.line);
    s.busy = calloc((size_t)nres + 1, 1);
    s.events = malloc(sizeof *s.events * ((size_t)ntasks + 1));
    s.worklist = malloc(sizeof *s.worklist * ((size_t)nres + 1));
    s.queued = calloc((size_t)nres + 1, 1);
    s.blocked = calloc((size_t)ntasks + 1, sizeof *s.blocked);
    if (!missing || !child_ptr || !children || !s.line || !s.busy || !s.events ||
        !s.worklist || !s.queued || !s.blocked) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* children of every task (reverse of the dependency lists), in task order: counted, then
     * written with child_ptr[p] as p's cursor, which ends at p + 1's start (shifted back after) */
    for (int32_t t = 0; t < ntasks; t++) {
        missing[t] = dep_ptr[t + 1] - dep_ptr[t];
        for (int32_t k = dep_ptr[t]; k < dep_ptr[t + 1]; k++) {
            child_ptr[deps[k] + 1]++;
        }
    }
    for (int32_t t = 0; t < ntasks; t++) {
        child_ptr[t + 1] += child_ptr[t];
    }
    for (int32_t t = 0; t < ntasks; t++) {
        for (int32_t k = dep_ptr[t]; k < dep_ptr[t + 1]; k++) {
            children[child_ptr[deps[k]]++] = t;
        }
    }
    for (int32_t t = ntasks; t > 0; t--) {
        child_ptr[t] = child_ptr[t - 1];
    }
    child_ptr[0] = 0;
    for (int32_t t = 0; t < ntasks && st == SW_OK; t++) {
        if (missing[t] == 0 && make_ready(&s, t, 0.0) < 0) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    drain_worklist(&s, 0.0);
    int32_t finished = 0;
    double now = 0.0;
    while (st == SW_OK && s.nevents > 0) {
        event e = ev_pop(s.events, &s.nevents);
        now = e.time;
        finished++;
        int32_t t = e.task;
        for (int32_t k = res_ptr[t]; k < res_ptr[t + 1]; k++) {
            s.busy[res[k]] = 0;
            look_at(&s, res[k]);
        }
        for (int32_t k = child_ptr[t]; k < child_ptr[t + 1]; k++) {
            int32_t c = children[k];
            if (--missing[c] == 0 && make_ready(&s, c, now) < 0) {
                st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            }
        }
        /* tasks that end at this same instant release their resources first */
        if (s.nevents > 0 && s.events[0].time == now) {
            continue;
        }
        drain_worklist(&s, now);
    }
    if (st == SW_OK && finished != ntasks) {
        st = SW_FAIL(SW_ERR_VALUE, "%d of %d tasks never became ready: the dependencies have a cycle",
                     ntasks - finished, ntasks);
    }
    *makespan = now;
done:
    if (s.line) {
        for (int32_t r = 0; r < nres; r++) {
            free(s.line[r].items);
        }
    }
    free(s.line);
    free(s.busy);
    free(s.events);
    free(s.worklist);
    free(s.queued);
    free(s.blocked);
    free(missing);
    free(child_ptr);
    free(children);
    return st;
}
