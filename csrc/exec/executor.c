/* executor.c -- a plan's task graph recorded onto a backend's streams, and steps run.
 *
 * Build (once): copy a plan's task graph lowered once (graph/lowering.c: with its swap tasks and
 * streams; the entry points that take a plan lower it first), plan its memory, one arena per device from the
 * backend, every buffer's address, the streams (one per device, or a
 * schedule's, each with its priority), and for each of the two lists (a
 * training step; the forward pass alone) every task recorded on its stream in
 * program order, preceded by a wait for each task of another stream it runs
 * after (sw_task_order: dependencies, the memory plan's reuse edges, and buffer
 * hazards where a device has several streams; the simulator replays the same
 * list) and followed by a record when another stream waits for it.
 *
 * Step: the backend runs the lists; the loss is the sum of the loss tasks'
 * sums of -log p, in task order (the same sum whatever the timing), over N.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memset, memcpy */
#include <time.h>    /* clock_gettime */

#include "runtime_internal.h"  /* struct sw_runtime */

#define ARENA_SENTINEL 0xA5     /* bytes of an arena no task has written yet (arena_high_water) */

void sw_rt_view(const sw_runtime *rt, int32_t b, sw_view *v) {
    const sw_buffer *buf = &rt->g.buffers[b];
    v->data = rt->ptr[b];
    v->rank = buf->box.rank;
    for (int d = 0; d < buf->box.rank; d++) {
        v->lo[d] = buf->box.lo[d];
        v->shape[d] = buf->box.hi[d] - buf->box.lo[d];
    }
}

void *sw_runtime_buffer(const sw_runtime *rt, int32_t b) { return rt->ptr[b]; }

/* ------------------------------------------------------------------ what a backend may ask */
int32_t sw_runtime_ntasks(const sw_runtime *rt) { return rt->g.ntasks; }
int sw_runtime_nops(const sw_runtime *rt) { return rt->nops; }
int64_t sw_runtime_batch(const sw_runtime *rt) { return rt->batch; }
int sw_runtime_pipeline_copies(const sw_runtime *rt) { return rt->pipeline; }
int32_t sw_runtime_nstreams(const sw_runtime *rt) { return rt->nstreams; }
int32_t sw_runtime_stream_device(const sw_runtime *rt, int32_t stream) { return rt->stream_device[stream]; }
const sw_task *sw_runtime_task(const sw_runtime *rt, int32_t t) { return &rt->g.tasks[t]; }
int sw_runtime_task_reads(const sw_runtime *rt, int32_t t, const int32_t **ids) { return sw_tg_reads(&rt->g, t, ids); }
int sw_runtime_task_writes(const sw_runtime *rt, int32_t t, const int32_t **ids) {
    return sw_tg_writes(&rt->g, t, ids);
}
int sw_runtime_in_list(const sw_runtime *rt, int list, int32_t t) { return rt->in_list[list][t]; }
int sw_runtime_first_accumulate(const sw_runtime *rt, int32_t t) { return rt->first_accumulate[t]; }
const sw_buffer *sw_runtime_buffer_info(const sw_runtime *rt, int32_t b) { return &rt->g.buffers[b]; }
const sw_box32 *sw_runtime_task_box(const sw_runtime *rt, int32_t t) { return sw_tg_task_box32(&rt->g, &rt->g.tasks[t]); }
const sw_rt_op *sw_runtime_op(const sw_runtime *rt, int op) { return &rt->ops[op]; }
const sw_op_attrs *sw_runtime_attrs(const sw_runtime *rt, int op) { return &rt->attrs[op]; }
int64_t *sw_runtime_updates(const sw_runtime *rt, int32_t b) { return &rt->updates[b]; }
double *sw_runtime_loss_sums(const sw_runtime *rt) { return rt->loss_sums; }
int64_t *sw_runtime_task_ns(const sw_runtime *rt) { return rt->task_ns; }

int sw_runtime_rank(const sw_runtime *rt) {
    return rt->rank_me;
}

int sw_runtime_runs_device(const sw_runtime *rt, int device) {
    return !rt->device_rank || rt->device_rank[device] == rt->rank_me;
}

/* Does this process run task t (a task of one iteration)? */
static int runs_task(const sw_runtime *rt, int32_t t) { return sw_runtime_runs_device(rt, rt->g.tasks[t].device); }

int64_t sw_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Copy what the kernels need of op i from the problem (the runtime outlives it). */
static void copy_op(const sw_problem *p, const sw_plan *plan, int i, sw_rt_op *o) {
    const sw_op *src = &p->ops[i];
    const sw_config *c = &plan->cfg[i];
    memset(o, 0, sizeof *o);
    o->out_rank = src->out_rank;
    for (int d = 0; d < src->out_rank; d++) {
        o->shape[d] = src->extent[d];
    }
    o->ninputs = src->ninputs;
    o->rvar = c->rvar;
    o->rdeg = c->rdeg;
    o->rpart = c->rvar >= 0 ? src->extent[c->rvar] / c->rdeg : 0;
    for (int k = 0; k < src->ninputs; k++) {
        const sw_input *in = &src->inputs[k];
        o->role[k] = (int8_t)in->role;
        o->bias[k] = (uint8_t)in->bias;
        o->producer[k] = in->producer;
        o->in_rank[k] = in->rank;
        for (int d = 0; d < in->rank; d++) {
            o->in_shape[k][d] = in->shape[d];
            if (k < 2) {
                o->map[k][d] = in->expr[d];
            }
            if (c->rvar >= 0 && in->expr[d].coef[c->rvar] != 0) {
                o->rdims[k] |= (uint8_t)(1u << d);
            }
        }
    }
}

/* Every op's attributes well formed, and the backend able to run it (its supports_op). */
static sw_status check_attrs(const sw_problem *p, const sw_op_attrs *attrs, const sw_backend *backend) {
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].ninputs > 64) {
            return SW_FAIL(SW_ERR_VALUE, "op %d: more than 64 inputs", i);
        }
        SW_TRY(sw_op_attrs_check(&attrs[i], p->ops[i].out_rank, i));
        char why[256] = "";
        const sw_backend_i *bi = backend->i;
        if (bi->supports_op && !bi->supports_op(attrs[i].type, &attrs[i], p->ops[i].out_rank, why, sizeof why)) {
            return SW_FAIL(SW_ERR_VALUE, "op %d (%s): the %s backend %s", i, sw_op_names[attrs[i].type], bi->name,
                           why);
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ recording */
sw_streams sw_runtime_streams(const sw_runtime *rt) {
    return (sw_streams){.ntasks = rt->g.ntasks, .nstreams = rt->nstreams, .stream = rt->stream,
                        .stream_device = rt->stream_device, .stream_priority = rt->stream_priority};
}

/* The runtime's streams as the passes take them: NULL for one per device, so that the
 * order and the memory plan are exactly those the lowering was made for. */
static const sw_streams *streams_or_null(const sw_runtime *rt, sw_streams *view) {
    *view = sw_runtime_streams(rt);
    return rt->several_streams ? view : NULL;
}

/* Copy the streams (or make one per device, priority 0) once the graph is lowered. */
static sw_status take_streams(sw_runtime *rt, const sw_streams *st) {
    SW_TRY(sw_streams_check(&rt->g, rt->ndev, st));
    int32_t n = rt->g.ntasks, ns = st ? st->nstreams : rt->ndev;
    rt->nstreams = ns;
    rt->stream = malloc(sizeof *rt->stream * ((size_t)n + 1));
    rt->stream_device = malloc(sizeof *rt->stream_device * ((size_t)ns + 1));
    rt->stream_priority = malloc(sizeof *rt->stream_priority * ((size_t)ns + 1));
    if (!rt->stream || !rt->stream_device || !rt->stream_priority) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the streams");
    }
    for (int32_t t = 0; t < n; t++) {
        rt->stream[t] = sw_stream_of(&rt->g, st, t);
    }
    for (int32_t k = 0; k < ns; k++) {
        rt->stream_device[k] = st ? st->stream_device[k] : k;
        rt->stream_priority[k] = st ? st->stream_priority[k] : 0;
    }
    rt->several_streams = sw_streams_several(st, rt->ndev);
    return SW_OK;
}

/* Is task d, which task t runs after (sw_task_order), a wait of t's in list l: in the list,
 * on another stream?  (The task before t on its own stream is ordered by the stream.) */
static int waits_for(const sw_runtime *rt, int l, int32_t t, int32_t d) {
    return rt->in_list[l][d] && rt->stream[d] != rt->stream[t];
}

static sw_status record_lists(sw_runtime *rt, const int *stream) {
    int32_t n = rt->g.ntasks;
    sw_task_order order;
    sw_streams view;
    SW_TRY(sw_task_order_build_on(&rt->g, &rt->mp, streams_or_null(rt, &view), &order));
    uint8_t *recorded = malloc((size_t)n + 1);
    sw_status s = recorded ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory recording the streams");
    const sw_backend_i *bi = rt->backend->i;
    for (int l = 0; l < SW_LIST_PIPELINE && s == SW_OK; l++) {   /* the one-step lists */
        memset(recorded, 0, (size_t)n + 1);
        for (int32_t t = 0; t < n; t++) {   /* which tasks another stream waits for */
            for (int32_t k = order.ptr[t]; rt->in_list[l][t] && k < order.ptr[t + 1]; k++) {
                recorded[order.ids[k]] |= (uint8_t)waits_for(rt, l, t, order.ids[k]);
            }
        }
        for (int32_t t = 0; t < n && s == SW_OK; t++) {
            if (!rt->in_list[l][t]) {
                continue;
            }
            int st = stream[rt->stream[t]];
            for (int32_t k = order.ptr[t]; k < order.ptr[t + 1] && s == SW_OK; k++) {
                if (waits_for(rt, l, t, order.ids[k])) {
                    s = bi->enqueue_wait(rt->backend, l, st, order.ids[k]);
                }
            }
            if (s == SW_OK && rt->g.tasks[t].kind == SW_TASK_RECV) {   /* its message, from another rank */
                s = bi->enqueue_arrival(rt->backend, l, st, t);
            }
            if (s == SW_OK) {
                s = bi->enqueue_task(rt->backend, l, st, t);
            }
            if (s == SW_OK && recorded[t]) {
                s = bi->enqueue_record(rt->backend, l, st, t);
            }
        }
    }
    free(recorded);
    sw_task_order_free(&order);
    return s;
}

/* ------------------------------------------------------------------ build */
static sw_status build(sw_runtime *rt, const sw_problem *p, const sw_lowering *l, const sw_op_attrs *attrs) {
    SW_TRY(check_attrs(p, attrs, rt->backend));
    if (l->swapped && rt->backend->i->to_host) {   /* swap tasks copy between host memory and the arena */
        return SW_FAIL(SW_ERR_VALUE, "swap plans run on the CPU backend with one compute stream per device");
    }
    const sw_plan *plan = &l->plan;
    SW_TRY(sw_task_graph_copy(&l->g, &rt->g));   /* the lowering's graph (with its swap tasks), copied */
    /* the runtime runs float32 whatever precision the plan was costed in: its arenas hold the
     * executor's element sizes (sw_buffer_element_bytes), not the plan's */
    memset(rt->g.element_bytes, 0, sizeof rt->g.element_bytes);
    rt->g.value_bytes = 0;
    sw_streams lowered;
    SW_TRY(take_streams(rt, sw_lowering_streams(l, &lowered)));
    sw_streams view;
    SW_TRY(sw_memory_plan_build_on(&rt->g, p->ndev, SW_ARENA_ALIGN, rt->reuse_memory, streams_or_null(rt, &view),
                                   &rt->mp));
    const sw_task_graph *g = &rt->g;
    size_t nt = (size_t)g->ntasks + 1, nb = (size_t)g->nbuffers + 1, nd = (size_t)p->ndev;
    rt->ops = calloc((size_t)p->nops, sizeof *rt->ops);
    rt->attrs = malloc(sizeof *rt->attrs * (size_t)p->nops);
    rt->arena = calloc(nd, sizeof *rt->arena);
    rt->host_region = calloc(nd, sizeof *rt->host_region);
    rt->ptr = calloc(nb, sizeof *rt->ptr);
    rt->first_accumulate = calloc(nt, 1);
    rt->in_list[SW_LIST_TRAIN] = calloc(nt, 1);
    rt->in_list[SW_LIST_FORWARD] = calloc(nt, 1);
    rt->updates = calloc(nb, sizeof *rt->updates);
    rt->optimizer_state = p->optimizer_state;
    rt->loss_sums = calloc(nt, sizeof *rt->loss_sums);
    rt->task_ns = calloc(2 * nt, sizeof *rt->task_ns);
    int *stream = calloc((size_t)rt->nstreams + 1, sizeof *stream);   /* the backend's id of each stream */
    uint8_t *written = calloc(nb, 1);
    if (!rt->ops || !rt->attrs || !rt->arena || !rt->host_region || !rt->ptr || !rt->first_accumulate || !rt->in_list[0] ||
        !rt->in_list[1] || !rt->updates || !rt->loss_sums || !rt->task_ns || !stream || !written) {
        free(stream);
        free(written);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory building the runtime");
    }
    memcpy(rt->attrs, attrs, sizeof *rt->attrs * (size_t)p->nops);
    for (int i = 0; i < p->nops; i++) {
        copy_op(p, plan, i, &rt->ops[i]);
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        const sw_task *task = &g->tasks[t];
        rt->in_list[SW_LIST_TRAIN][t] = (uint8_t)runs_task(rt, t);   /* another rank's tasks are in no list */
        rt->in_list[SW_LIST_FORWARD][t] = (uint8_t)(runs_task(rt, t) && task->phase == SW_PHASE_FORWARD);
        /* accumulates into one gradient are chained in order after the task writing its first
         * term in place, if any (a backward_data: lower_backward.c's direct_grad) */
        const int32_t *w;
        int nw = sw_tg_writes(g, t, &w);
        if (task->kind == SW_TASK_ACCUMULATE) {
            rt->first_accumulate[t] = !written[w[0]];
        }
        for (int k = 0; k < nw; k++) {
            written[w[k]] = 1;
        }
    }
    free(written);
    sw_status s = SW_OK;
    for (int d = 0; d < p->ndev && s == SW_OK; d++) {
        if (!sw_runtime_runs_device(rt, d)) {   /* another rank's device: its memory is there */
            continue;
        }
        s = rt->backend->i->arena_new(rt->backend, d, (size_t)rt->mp.arena[d], &rt->arena[d]);
        if (s == SW_OK) {
            rt->arena_allocations++;
            if (!rt->backend->i->to_host) {   /* host memory: mark it unwritten for arena_high_water */
                memset(rt->arena[d], ARENA_SENTINEL, (size_t)rt->mp.arena[d]);
            }
        }
    }
    for (int d = 0; d < p->ndev && s == SW_OK; d++) {   /* host memory, apart from the arena it does not count in */
        if (sw_runtime_runs_device(rt, d) && rt->mp.host_arena[d] > 0 && posix_memalign(&rt->host_region[d], SW_ARENA_ALIGN,
                                                        (size_t)rt->mp.host_arena[d]) != 0) {
            rt->host_region[d] = NULL;
            s = SW_FAIL(SW_ERR_NOMEM, "cannot allocate a host region of %lld bytes for device %d",
                        (long long)rt->mp.host_arena[d], d);
        }
    }
    for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {
        if (!sw_runtime_runs_device(rt, g->buffers[b].device)) {
            continue;   /* ptr[b] stays NULL */
        }
        int hosted = g->buffers[b].kind == SW_BUF_HOST;
        rt->ptr[b] = (char *)(hosted ? rt->host_region : rt->arena)[g->buffers[b].device] + rt->mp.offset[b];
        if (g->buffers[b].kind == SW_BUF_MOMENTUM && !rt->backend->i->to_host) {   /* optimizer state starts at 0 */
            memset(rt->ptr[b], 0, (size_t)rt->mp.bytes[b]);
        }
    }
    for (int32_t k = 0; k < rt->nstreams && s == SW_OK; k++) {
        s = rt->backend->i->stream_new(rt->backend, rt->stream_device[k], rt->stream_priority[k], &stream[k]);
    }
    rt->backend_stream = stream;   /* kept: pipeline.c records onto the same streams */
    if (s == SW_OK) {
        s = record_lists(rt, stream);
    }
    return s;
}

/* The C entry points that take a plan lower it here (one sw_lowering, dropped once the runtime
 * has copied its graph); Python lowers once into a _core.TaskGraph and calls sw_runtime_new_lowered. */
static sw_status new_from_plan(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs, int reuse_memory,
                               const sw_streams *streams, const sw_swap_spec *swap, sw_backend *backend,
                               sw_runtime **out) {
    *out = NULL;
    sw_lowering *l = NULL;
    sw_status s = check_attrs(p, attrs, backend);   /* before the lowering, as the runtime always checked them */
    if (s == SW_OK) {
        s = sw_lowering_new(p, plan, SW_RINGS_CHUNKED, streams, swap, NULL, &l);
    }
    if (s != SW_OK) {
        backend->i->destroy(backend);
        return s;
    }
    s = sw_runtime_new_lowered(p, l, attrs, reuse_memory, backend, out);
    sw_lowering_free(l);
    return s;
}

sw_status sw_runtime_new(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs, int reuse_memory,
                         sw_backend *backend, sw_runtime **out) {
    return new_from_plan(p, plan, attrs, reuse_memory, NULL, NULL, backend, out);
}

sw_status sw_runtime_new_on(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs, int reuse_memory,
                            const sw_streams *streams, sw_backend *backend, sw_runtime **out) {
    return new_from_plan(p, plan, attrs, reuse_memory, streams, NULL, backend, out);
}

sw_status sw_runtime_new_swapped(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs,
                                 int reuse_memory, const sw_swap_spec *swap, sw_backend *backend, sw_runtime **out) {
    return new_from_plan(p, plan, attrs, reuse_memory, NULL, swap, backend, out);
}

sw_status sw_runtime_new_lowered(const sw_problem *p, const sw_lowering *l, const sw_op_attrs *attrs,
                                 int reuse_memory, sw_backend *backend, sw_runtime **out) {
    return sw_runtime_new_ranked(p, l, attrs, reuse_memory, NULL, -1.0, backend, out);
}

sw_status sw_runtime_new_ranked(const sw_problem *p, const sw_lowering *l, const sw_op_attrs *attrs,
                                int reuse_memory, const sw_comm_ext *comm, double timeout_s, sw_backend *backend,
                                sw_runtime **out) {
    *out = NULL;
    if (l->g.ring_detail == SW_RINGS_FUSED) {
        backend->i->destroy(backend);
        return SW_FAIL(SW_ERR_VALUE, "this task graph's rings are fused, the simulator's model of large machines: "
                                     "a runtime runs the plan lowered with its rings chunked");
    }
    if ((l->nranks > 0) != (comm != NULL)) {
        backend->i->destroy(backend);
        return l->nranks > 0 ? SW_FAIL(SW_ERR_VALUE, "the task graph is split over %d ranks: run it with the job's "
                                       "communicator", l->nranks)
                             : SW_FAIL(SW_ERR_VALUE, "a communicator was given for a task graph not split over ranks");
    }
    if (comm && !backend->i->enqueue_arrival) {
        const char *name = backend->i->name;
        backend->i->destroy(backend);
        return SW_FAIL(SW_ERR_VALUE, "the %s backend runs one process only, not one rank of several", name);
    }
    if (l->ndev != p->ndev || l->nops != p->nops || l->optimizer_state != p->optimizer_state) {
        backend->i->destroy(backend);
        return SW_FAIL(SW_ERR_VALUE, "the task graph was lowered for another problem (%d ops on %d devices, "
                       "%d optimizer state buffers)", l->nops, l->ndev, l->optimizer_state);
    }
    sw_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) {
        backend->i->destroy(backend);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory building the runtime");
    }
    rt->backend = backend;
    rt->reuse_memory = reuse_memory;
    backend->rt = rt;
    rt->ndev = p->ndev;
    rt->nops = p->nops;
    rt->batch = p->nops > 0 ? p->ops[0].extent[0] : 1;
    sw_status s = SW_OK;
    if (comm) {
        s = sw_messages_new(&l->g, l->ndev, l->nranks, l->rank, comm, timeout_s, &rt->messages);
        rt->device_rank = malloc(sizeof *rt->device_rank * (size_t)l->ndev);
        if (s == SW_OK && !rt->device_rank) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for the ranks");
        }
        if (s == SW_OK) {
            memcpy(rt->device_rank, l->rank, sizeof *rt->device_rank * (size_t)l->ndev);
            rt->rank_me = comm->i->rank(comm->comm);
        }
    }
    if (s == SW_OK) {
        s = build(rt, p, l, attrs);
    }
    if (s != SW_OK) {
        sw_runtime_free(rt);
        return s;
    }
    *out = rt;
    return SW_OK;
}

void sw_runtime_free(sw_runtime *rt) {
    if (!rt) {
        return;
    }
    if (rt->backend) {
        for (int d = 0; d < rt->ndev && rt->arena; d++) {
            if (rt->arena[d]) {
                rt->backend->i->arena_free(rt->backend, d, rt->arena[d]);
            }
        }
        rt->backend->i->destroy(rt->backend);
    }
    for (int d = 0; d < rt->ndev && rt->host_region; d++) {
        free(rt->host_region[d]);
    }
    free(rt->host_region);
    sw_task_graph_free(&rt->g);
    sw_memory_plan_free(&rt->mp);
    free(rt->ops);
    free(rt->attrs);
    free(rt->arena);
    free(rt->ptr);
    free(rt->first_accumulate);
    free(rt->in_list[0]);
    free(rt->in_list[1]);
    free(rt->updates);
    free(rt->loss_sums);
    free(rt->task_ns);
    free(rt->stream);
    free(rt->stream_device);
    free(rt->stream_priority);
    free(rt->backend_stream);
    free(rt->device_rank);
    sw_messages_free(rt->messages);
    free(rt);
}

/* ------------------------------------------------------------------ steps */
sw_status sw_runtime_launch(sw_runtime *rt, int list, const sw_step_args *args, int copies) {
    rt->step_ns[0] = sw_now_ns();
    sw_status s = rt->messages ? sw_messages_post(rt->messages, rt, list, copies) : SW_OK;
    if (s == SW_OK) {
        s = rt->backend->i->launch(rt->backend, list, args);
    }
    if (s == SW_OK && rt->messages) {
        s = sw_messages_finish(rt->messages, &rt->g, rt->loss_sums, copies);
    } else if (s != SW_OK && rt->messages) {
        sw_messages_broken(rt->messages);
    }
    rt->step_ns[1] = sw_now_ns();
    return s;
}

sw_status sw_runtime_step(sw_runtime *rt, int list, const sw_step_args *args, double *loss) {
    if (list < 0 || list >= SW_NLISTS) {
        return SW_FAIL(SW_ERR_VALUE, "unknown work list %d", list);
    }
    if (args->bn_mode < SW_BN_BATCH || args->bn_mode > SW_BN_RUNNING) {
        return SW_FAIL(SW_ERR_VALUE, "unknown batchnorm mode %d", args->bn_mode);
    }
    if (list == SW_LIST_TRAIN && args->bn_mode == SW_BN_RUNNING) {   /* the backward pass needs batch statistics */
        return SW_FAIL(SW_ERR_VALUE,
                       "a training step normalizes with the minibatch's statistics, not the running ones");
    }
    if (list == SW_LIST_TRAIN) {   /* before any task runs: a refused optimizer changes nothing */
        SW_TRY(sw_optim_check(&args->opt, rt->optimizer_state));
    }
    memset(rt->loss_sums, 0, sizeof *rt->loss_sums * (size_t)rt->g.ntasks);
    memset(rt->task_ns, 0, sizeof *rt->task_ns * 2 * (size_t)rt->g.ntasks);
    SW_TRY(sw_runtime_launch(rt, list, args, 1));
    double total = 0.0;
    for (int32_t t = 0; t < rt->g.ntasks; t++) {   /* in task order: the same sum whatever the timing */
        if (rt->g.tasks[t].kind == SW_TASK_LOSS) {
            total += rt->loss_sums[t];
        }
    }
    *loss = total / (double)rt->batch;
    return SW_OK;
}

/* The highest byte of each arena written so far (rounded up to the alignment), found by
 * looking for the last byte that is not the sentinel the arena was filled with. */
sw_status sw_runtime_high_water(const sw_runtime *rt, int64_t *out) {
    if (rt->backend->i->to_host) {
        return SW_FAIL(SW_ERR_VALUE, "arena_high_water is measured on host-memory backends only");
    }
    for (int d = 0; d < rt->ndev; d++) {
        const unsigned char *a = rt->arena[d];
        int64_t n = a ? rt->mp.arena[d] : 0;   /* another rank's device: nothing written here */
        while (n > 0 && a[n - 1] == ARENA_SENTINEL) {
            n--;
        }
        out[d] = (n + SW_ARENA_ALIGN - 1) / SW_ARENA_ALIGN * SW_ARENA_ALIGN;
    }
    return SW_OK;
}
