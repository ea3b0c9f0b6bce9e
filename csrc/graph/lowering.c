/* lowering.c -- a plan lowered once and kept: the task graph every pass and the runtime read.
 *
 * sw_lowering_new is the one place the bindings lower a plan (csrc/py/taskgraph_py.c): it calls
 * sw_lower once, copies the plan (the durations and the runtime read its configurations after
 * the caller's arrays are gone), and carries the annotations on the graph they belong to: a
 * schedule's streams, checked against it, or a swap plan applied by swap.c, whose streams
 * (original tasks on their device's stream, swap tasks on the swap-out and swap-in streams)
 * replace the default.  Everything is owned, so the handle outlives its arguments.
 */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memcpy */

#include "internal.h"

void sw_lowering_free(sw_lowering *l) {
    if (!l) {
        return;
    }
    sw_task_graph_free(&l->g);
    free(l->cfg);
    free(l->devs);
    free(l->kind);
    free(l->stream);
    free(l->stream_device);
    free(l->stream_priority);
    free(l->origin);
    free(l->rank);
    free(l);
}

const sw_streams *sw_lowering_streams(const sw_lowering *l, sw_streams *view) {
    if (!l->has_streams) {
        return NULL;
    }
    *view = (sw_streams){.ntasks = l->g.ntasks, .nstreams = l->nstreams, .stream = l->stream,
                         .stream_device = l->stream_device, .stream_priority = l->stream_priority};
    return view;
}

/* A malloc'd copy of n items of `size` bytes (at least one item, so a NULL return means out of memory). */
static void *copy_of(const void *src, size_t n, size_t size) {
    void *dst = malloc(size * (n ? n : 1));
    if (dst && n) {
        memcpy(dst, src, size * n);
    }
    return dst;
}

static sw_status copy_plan(const sw_plan *plan, sw_lowering *l) {
    size_t ndevs = 0;
    for (int i = 0; i < plan->nops; i++) {   /* the devices the configurations index */
        size_t end = (size_t)plan->cfg[i].dev_offset + (size_t)plan->cfg[i].nworkers;
        ndevs = end > ndevs ? end : ndevs;
    }
    l->cfg = copy_of(plan->cfg, (size_t)plan->nops, sizeof *l->cfg);
    l->devs = copy_of(plan->devs, ndevs, sizeof *l->devs);
    l->kind = copy_of(plan->kind, (size_t)plan->nops, sizeof *l->kind);
    if (!l->cfg || !l->devs || !l->kind) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory copying a plan of %d ops", plan->nops);
    }
    l->plan = (sw_plan){plan->nops, l->cfg, l->devs, l->kind};
    return SW_OK;
}

static sw_status copy_streams(const sw_streams *st, sw_lowering *l) {
    l->stream = copy_of(st->stream, (size_t)st->ntasks, sizeof *l->stream);
    l->stream_device = copy_of(st->stream_device, (size_t)st->nstreams, sizeof *l->stream_device);
    l->stream_priority = copy_of(st->stream_priority, (size_t)st->nstreams, sizeof *l->stream_priority);
    if (!l->stream || !l->stream_device || !l->stream_priority) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory copying %d streams", st->nstreams);
    }
    l->nstreams = st->nstreams;
    l->has_streams = 1;
    return SW_OK;
}

/* Rewrite l->g by the recompute spec (recompute.c) and take its task origins. */
static sw_status apply_recompute(const sw_recompute_spec *recompute, sw_lowering *l) {
    sw_task_graph rg;
    int32_t *origin = NULL, n = 0;
    SW_TRY(sw_recompute_apply(&l->g, l->nops, recompute, &rg, &origin, &n));
    sw_task_graph_free(&l->g);
    l->g = rg;
    l->origin = origin;
    l->recomputed = n;
    return SW_OK;
}

/* Rewrite l->g (the lowering, or its recompute rewrite) by the swap spec (swap.c) and take its
 * streams and task origins. */
static sw_status apply_swap(const sw_swap_spec *swap, sw_lowering *l) {
    sw_task_graph sg;
    sw_swap_streams swapped = {0};
    SW_TRY(sw_swap_apply(&l->g, l->ndev, swap, &sg, &swapped));
    sw_task_graph_free(&l->g);
    l->g = sg;
    l->swapped = 1;
    sw_streams view = sw_swap_streams_view(&swapped);
    sw_status s = copy_streams(&view, l);
    if (s == SW_OK) {   /* each task's id in the lowering: through the recompute rewrite, if any */
        int32_t *origin = copy_of(swapped.origin, (size_t)swapped.ntasks, sizeof *origin);
        s = origin ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for the swapped tasks' origins");
        for (int32_t t = 0; s == SW_OK && l->origin && t < swapped.ntasks; t++) {
            origin[t] = origin[t] < 0 ? origin[t] : l->origin[origin[t]];
        }
        free(l->origin);
        l->origin = origin;
    }
    sw_swap_streams_free(&swapped);
    return s;
}

sw_status sw_lowering_set_streams(sw_lowering *l, const sw_streams *streams) {
    if (l->nranks > 0) {
        return SW_FAIL(SW_ERR_VALUE, "this task graph is split over %d ranks: set its streams before splitting it",
                       l->nranks);
    }
    if (l->swapped) {
        return SW_FAIL(SW_ERR_VALUE, "a swap plan runs on one compute stream per device, not a schedule's");
    }
    if (l->recomputed) {
        return SW_FAIL(SW_ERR_VALUE, "a graph with recompute tasks runs on one compute stream per device so far, "
                       "not a schedule's");
    }
    SW_TRY(sw_streams_check(&l->g, l->ndev, streams));
    sw_lowering old = *l;   /* the previous copies, freed once the new ones are in */
    l->stream = l->stream_device = l->stream_priority = NULL;
    l->has_streams = 0;
    l->nstreams = 0;
    sw_status s = streams ? copy_streams(streams, l) : SW_OK;
    if (s != SW_OK) {   /* keep the previous streams */
        free(l->stream);
        free(l->stream_device);
        free(l->stream_priority);
        l->stream = old.stream;
        l->stream_device = old.stream_device;
        l->stream_priority = old.stream_priority;
        l->has_streams = old.has_streams;
        l->nstreams = old.nstreams;
        return s;
    }
    free(old.stream);
    free(old.stream_device);
    free(old.stream_priority);
    return SW_OK;
}

sw_status sw_lowering_new(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, const sw_streams *streams,
                          const sw_swap_spec *swap, const sw_recompute_spec *recompute, sw_lowering **out) {
    *out = NULL;
    int swapping = swap && swap->n > 0, recomputing = recompute && recompute->n > 0;
    if (swapping && streams) {
        return SW_FAIL(SW_ERR_VALUE, "a swap plan runs on one compute stream per device, not a schedule's");
    }
    if (recomputing && streams) {
        return SW_FAIL(SW_ERR_VALUE, "recomputation runs on one compute stream per device so far, not a schedule's");
    }
    sw_lowering *l = calloc(1, sizeof *l);
    if (!l) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a lowering");
    }
    l->ndev = p->ndev;
    l->nops = p->nops;
    l->optimizer_state = p->optimizer_state;
    sw_status s = sw_lower(p, plan, rings, &l->g);
    if (s == SW_OK) {
        l->base_ntasks = l->g.ntasks;
        l->base_nbuffers = l->g.nbuffers;
        s = copy_plan(plan, l);
    }
    if (s == SW_OK && streams) {
        s = sw_streams_check(&l->g, l->ndev, streams);
        if (s == SW_OK) {
            s = copy_streams(streams, l);
        }
    }
    if (s == SW_OK && recomputing) {   /* first: a swap plan with it was made on the recomputed graph */
        s = apply_recompute(recompute, l);
    }
    if (s == SW_OK && swapping) {
        s = apply_swap(swap, l);
    }
    if (s != SW_OK) {
        sw_lowering_free(l);
        return s;
    }
    sw_tg_trim(&l->g);   /* (the recomputed or swapped graph, grown anew) */
    *out = l;
    return SW_OK;
}

/* The stream of each task of the split graph: its origin's, but a send's is on its source device:
 * the stream of the dependency on that device that wrote the source (the last one), else the
 * device's first stream. */
static sw_status split_streams(sw_lowering *l, const sw_task_graph *ng, const int32_t *origin) {
    int32_t *stream = malloc(sizeof *stream * ((size_t)ng->ntasks + 1));
    if (!stream) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the streams of %d tasks", ng->ntasks);
    }
    for (int32_t t = 0; t < ng->ntasks; t++) {
        const sw_task *task = &ng->tasks[t];
        stream[t] = l->stream[origin[t]];
        if (task->kind != SW_TASK_SEND) {
            continue;
        }
        stream[t] = -1;
        for (int32_t k = ng->dep_ptr[t + 1] - 1; k >= ng->dep_ptr[t] && stream[t] < 0; k--) {
            int32_t d = ng->deps[k];
            if (ng->tasks[d].device == task->device) {
                stream[t] = stream[d];
            }
        }
        for (int32_t k = 0; k < l->nstreams && stream[t] < 0; k++) {
            if (l->stream_device[k] == task->device) {
                stream[t] = k;
            }
        }
        if (stream[t] < 0) {
            free(stream);
            return SW_FAIL(SW_ERR_INTERNAL, "device %d has no stream for send task %d", task->device, t);
        }
    }
    free(l->stream);
    l->stream = stream;
    return SW_OK;
}

sw_status sw_lowering_split_ranks(sw_lowering *l, int nranks, const int32_t *rank) {
    if (l->nranks > 0) {
        return SW_FAIL(SW_ERR_VALUE, "this task graph is split over %d ranks already", l->nranks);
    }
    if (l->g.ring_detail == SW_RINGS_FUSED) {
        return SW_FAIL(SW_ERR_VALUE, "a graph with fused rings is the simulator's model and runs on no process: "
                                     "lower the plan with its rings chunked to split it over ranks");
    }
    if (nranks < 1 || nranks > l->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "%d ranks for a plan on %d devices: 1 .. %d ranks, each with a device", nranks,
                       l->ndev, l->ndev);
    }
    int32_t *own = malloc(sizeof *own * (size_t)l->ndev);
    int *used = calloc((size_t)nranks, sizeof *used);
    if (!own || !used) {
        free(own);
        free(used);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the ranks of %d devices", l->ndev);
    }
    sw_status s = SW_OK;
    for (int d = 0; d < l->ndev && s == SW_OK; d++) {
        own[d] = rank[d];
        if (rank[d] < 0 || rank[d] >= nranks) {
            s = SW_FAIL(SW_ERR_VALUE, "device %d is given rank %d, outside 0 .. %d", d, rank[d], nranks - 1);
        } else {
            used[rank[d]] = 1;
        }
    }
    for (int r = 0; r < nranks && s == SW_OK; r++) {
        if (!used[r]) {
            s = SW_FAIL(SW_ERR_VALUE, "rank %d runs none of the %d devices: every rank needs one", r, l->ndev);
        }
    }
    free(used);
    sw_task_graph ng = {0};
    int32_t *origin = NULL;
    if (s == SW_OK) {
        s = sw_split_ranks(&l->g, l->ndev, own, &ng, &origin);   /* ng and origin freed on failure */
    }
    if (s == SW_OK && l->has_streams) {
        s = split_streams(l, &ng, origin);
    }
    if (s == SW_OK && l->origin) {   /* swapped or recomputed: each task's id in the lowering, through the split */
        for (int32_t t = 0; t < ng.ntasks; t++) {
            origin[t] = l->origin[origin[t]];
        }
        free(l->origin);
        l->origin = origin;
        origin = NULL;
    }
    if (s != SW_OK) {
        free(own);
        free(origin);
        sw_task_graph_free(&ng);
        return s;
    }
    free(origin);
    sw_task_graph_free(&l->g);
    l->g = ng;
    l->nranks = nranks;
    l->rank = own;
    return SW_OK;
}
