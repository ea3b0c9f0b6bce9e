/* order.c -- the order the runtime keeps between the tasks of a graph.
 *
 * The runtime (csrc/exec/executor.c) records every task on its stream in
 * program order (task id order) and, before a task, a wait for each task of
 * another stream it must follow.  So task t runs after
 *
 *   the task before it on its stream       (program order; one stream per
 *                                           device unless a schedule gives
 *                                           more: sw_streams)
 *   its dependencies                       (g->deps: data flow)
 *   the memory plan's reuse edges into it  (a task on another stream still
 *                                           touching bytes that a buffer t
 *                                           starts takes over)
 *   the hazards into it, when a device     (hazards.c: conflicting accesses
 *   has several streams                     to a buffer that the device's one
 *                                           stream used to keep in order)
 *
 * sw_task_order_build lists exactly those per task.  With one stream per
 * device (NULL streams, or a FIFO schedule's) there are no hazard entries, so
 * the order is the one the lowering's dependencies were made for, entry for
 * entry.  The executor records its event waits from the list (the entries on
 * other streams), the simulator replays it, and memplan_check.c proves memory
 * plans safe by it: one list, so what is run, what is simulated and what is
 * proved cannot drift apart.
 */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memset */

#include "internal.h"

/* Sort ids[0 .. n) and drop repeats; returns the new count (lists are short: insertion sort). */
static int32_t sort_distinct(int32_t *ids, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        int32_t v = ids[i], j = i;
        while (j > 0 && ids[j - 1] > v) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = v;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == 0 || ids[i] != ids[m - 1]) {
            ids[m++] = ids[i];
        }
    }
    return m;
}

/* The reuse edges into each task as CSR: task t waits for rids[rptr[t] .. rptr[t+1]). */
static sw_status reuse_in(const sw_memory_plan *mp, int32_t ntasks, int32_t **ptr_out, int32_t **ids_out) {
    for (int32_t e = 0; e < mp->nreuse; e++) {
        if (mp->reuse_from[e] < 0 || mp->reuse_to[e] >= ntasks || mp->reuse_from[e] >= mp->reuse_to[e]) {
            return SW_FAIL(SW_ERR_VALUE, "reuse edge %d (%d -> %d) must go forward between tasks of the graph", e,
                           mp->reuse_from[e], mp->reuse_to[e]);
        }
    }
    int32_t *ptr = calloc((size_t)ntasks + 2, sizeof *ptr), *ids = malloc(sizeof *ids * ((size_t)mp->nreuse + 1));
    if (!ptr || !ids) {
        free(ptr);
        free(ids);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
    }
    for (int32_t e = 0; e < mp->nreuse; e++) {   /* counts at [t + 2], starts at [t + 1], then filled */
        ptr[mp->reuse_to[e] + 2]++;
    }
    for (int32_t t = 0; t < ntasks; t++) {
        ptr[t + 2] += ptr[t + 1];
    }
    for (int32_t e = 0; e < mp->nreuse; e++) {
        ids[ptr[mp->reuse_to[e] + 1]++] = mp->reuse_from[e];
    }
    *ptr_out = ptr;
    *ids_out = ids;
    return SW_OK;
}

sw_status sw_task_order_build(const sw_task_graph *g, const sw_memory_plan *mp, sw_task_order *o) {
    return sw_task_order_build_on(g, mp, NULL, o);
}

sw_status sw_task_order_build_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st,
                                 sw_task_order *o) {
    memset(o, 0, sizeof *o);
    int32_t n = g->ntasks, ndev = mp->ndev;
    for (int32_t t = 0; t < n; t++) {
        if (g->tasks[t].device < 0 || g->tasks[t].device >= ndev) {
            return SW_FAIL(SW_ERR_VALUE, "task %d runs on device %d of %d", t, g->tasks[t].device, ndev);
        }
    }
    SW_TRY(sw_streams_check(g, ndev, st));
    int32_t nstreams = st ? st->nstreams : ndev;
    int32_t *rptr = NULL, *rids = NULL, *hptr = NULL, *hids = NULL;
    SW_TRY(reuse_in(mp, n, &rptr, &rids));
    sw_status s = SW_OK;
    if (sw_streams_several(st, ndev) && (s = sw_tg_hazards(g, st, &hptr, &hids)) != SW_OK) {
        free(rptr);
        free(rids);
        return s;
    }
    int64_t nhazards = hptr ? hptr[n] : 0;
    o->ntasks = n;
    o->ptr = malloc(sizeof *o->ptr * ((size_t)n + 1));
    o->ids = malloc(sizeof *o->ids * ((size_t)n + (size_t)g->ndeps + (size_t)mp->nreuse + (size_t)nhazards + 1));
    int32_t *last = malloc(sizeof *last * ((size_t)nstreams + 1));   /* per stream: its latest task so far */
    if (!o->ptr || !o->ids || !last) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for the order of %d tasks", n);
        goto done;
    }
    for (int32_t k = 0; k < nstreams; k++) {
        last[k] = -1;
    }
    int32_t k = 0;
    o->ptr[0] = 0;
    for (int32_t t = 0; t < n; t++) {
        int32_t start = k, stream = sw_stream_of(g, st, t);
        if (last[stream] >= 0) {
            o->ids[k++] = last[stream];
        }
        last[stream] = t;
        for (int32_t i = g->dep_ptr[t]; i < g->dep_ptr[t + 1]; i++) {
            o->ids[k++] = g->deps[i];
        }
        for (int32_t i = rptr[t]; i < rptr[t + 1]; i++) {
            o->ids[k++] = rids[i];
        }
        for (int32_t i = hptr ? hptr[t] : 0; hptr && i < hptr[t + 1]; i++) {
            o->ids[k++] = hids[i];
        }
        k = start + sort_distinct(o->ids + start, k - start);
        o->ptr[t + 1] = k;
    }
done:
    free(last);
    free(rptr);
    free(rids);
    free(hptr);
    free(hids);
    if (s != SW_OK) {
        sw_task_order_free(o);
    }
    return s;
}

void sw_task_order_free(sw_task_order *o) {
    free(o->ptr);
    free(o->ids);
    memset(o, 0, sizeof *o);
}
