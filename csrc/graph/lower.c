/* lower.c -- one training iteration of a plan as a task graph, in C.
 *
 * The only lowering: the executor runs this graph and the simulator replays
 * it (python/shardwise/iteration/lower.py reads it and describes every task kind).
 * Every task records the buffers it reads and writes, in the order its kernel
 * takes them; tests check the data flow (every read after a write it depends
 * on, no unordered tasks touching overlapping parts of a buffer) and that the
 * bytes copied between devices are Eq. 1's.
 *
 *   forward (ops in order)      per worker: gather each data input's region
 *                               (copies from the producer's owners + a join,
 *                               or the producer's shard itself), then forward /
 *                               loss / load_input; batchnorm: bn_stats, stats
 *                               reduced among replicas, bn_apply (which updates
 *                               the worker's running statistics); a split
 *                               reduction: forward_partial, partial outputs
 *                               copied to the owner, sum_partials
 *   backward (reverse order)    per worker: backward_data per data input, its
 *                               pieces sent to the owners and accumulated in
 *                               order; backward_weight; batchnorm: statistics
 *                               of the gradient reduced first; a split
 *                               reduction: activation_grad on the owner, copied
 *                               to the group first
 *   sync (reverse order)        per weight and replica group: copies to the
 *                               first replica, reduce, update, copies back
 *                               (parameter server), or a ring all-reduce of
 *                               gradient chunks and an update on every
 *                               replica (the ring model; lower_backward.c);
 *                               last layer first, the order its dW / dB are
 *                               done in the backward, so that program order
 *                               (the memory plan's lifetimes, hence its reuse
 *                               edges between synchronizations) never holds a
 *                               layer's synchronization behind one whose
 *                               gradient comes later
 *
 * This file lowers the forward pass and drives the whole; lower_backward.c lowers the
 * backward pass and the synchronization; lower_internal.h holds the state they share.
 *
 * State is kept in flat arrays: per worker of every op at wbase[op] + w, per
 * (op, input slot, worker) at sbase[op] + slot * nworkers + w.
 */
#include <stdatomic.h>  /* the lowering counter */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memset */

#include "lower_internal.h"  /* lowering, its helpers, the backward pass */

/* ------------------------------------------------------------------ forward */
/* owner_on[op] (lower_internal.h), made now if need be; NULL when out of memory. */
static const int32_t *owner_on_devices(lowering *L, int op) {
    if (!L->owner_on[op]) {
        const sw_config *c = cfg_of(L, op);
        int32_t *owner = malloc(sizeof *owner * (size_t)L->p->ndev);
        if (!owner) {
            return NULL;
        }
        for (int d = 0; d < L->p->ndev; d++) {
            owner[d] = NONE;
        }
        for (int s = 0; s < c->nworkers; s += c->rdeg) {
            owner[dev_of(L, op, s)] = s;
        }
        L->owner_on[op] = owner;
    }
    return L->owner_on[op];
}

/* Bring the region of input `slot` that worker w of op reads onto its device:
 * records the buffer and the task after which it is complete (NONE: not read). */
static sw_status gather(lowering *L, int op, int slot, int w) {
    int32_t dev = dev_of(L, op, w), at = sidx(L, op, slot, w);
    int prod = op_at(L, op)->inputs[slot].producer;
    sw_box reg;
    L->in_buf[at] = L->in_task[at] = NONE;
    if (!region(L, op, slot, w, &reg)) {
        return SW_OK;
    }
    const int32_t *owner = owner_on_devices(L, prod);
    if (!owner) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int here = owner[dev];
    if (here != NONE && sw_box_equal(&L->box[widx(L, prod, here)], &reg)) {   /* the shard already here: share it */
        L->in_buf[at] = L->act[widx(L, prod, here)];
        L->in_task[at] = L->act_task[widx(L, prod, here)];
        return SW_OK;
    }
    int32_t buf;
    SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_REGION, prod, &reg, &buf));
    find_pieces(L, prod, &reg);
    for (int q = 0; q < L->npieces; q++) {
        int s = L->piece_w[q];
        sw_task t = copy_of(L, SW_PHASE_FORWARD, dev, dev_of(L, prod, s), op, w, slot, &L->piece_box[q]);
        int32_t from = L->act[widx(L, prod, s)];
        SW_TRY(add_copy(L, &t, L->act_task[widx(L, prod, s)], from, buf, &L->deps[q]));
    }
    int32_t join = L->deps[0];
    if (L->npieces > 1) {  /* the consumer depends on every piece: one join */
        sw_task t = task_of(SW_TASK_JOIN, SW_PHASE_FORWARD, dev, op, w);
        SW_TRY(add_task(L, &t, L->deps, L->npieces, NULL, 0, NULL, 0, &join));
    }
    L->in_buf[at] = buf;
    L->in_task[at] = join;
    return SW_OK;
}

/* Parameter buffers of worker w (one per weight slot it reads), appended to
 * reads[*count ..]; *count grows by their number. */
static sw_status param_buffers(lowering *L, int op, int w, int32_t *reads, int *count) {
    const sw_op *o = op_at(L, op);
    for (int k = 0; k < o->ninputs; k++) {
        if (o->inputs[k].role != SW_ROLE_WEIGHT) {
            continue;
        }
        sw_box reg;
        if (!region(L, op, k, w, &reg)) {
            continue;   /* a bias in a reduction group: the owner's alone */
        }
        int32_t id;
        SW_TRY(sw_tg_buffer(L->g, dev_of(L, op, w), SW_BUF_PARAM, op, &reg, &id));
        L->g->buffers[id].worker = w;
        L->g->buffers[id].slot = (int16_t)k;
        L->in_buf[sidx(L, op, k, w)] = id;
        reads[(*count)++] = id;
    }
    return SW_OK;
}

/* Sum bufs[] over each replica group of `slot` at its first worker and send the
 * sum back; ready[w] becomes the task after which worker w's buffer holds it. */
sw_status sw_lower_reduce_among(lowering *L, int op, int slot, sw_phase phase, sw_task_kind kind) {
    int from = 0, r;
    start_groups(L, op, slot);
    while ((r = next_group(L, op, &from)) > 0) {
        if (r < 2) {
            continue;
        }
        int lead = L->members[0];
        int32_t lead_dev = dev_of(L, op, lead);
        sw_box box = sw_buffer_box(&L->g->buffers[L->bufs[lead]]);
        int nd = 0;
        L->deps[nd++] = L->ready[lead];
        /* batchnorm statistics are received as what they are: double-precision sums */
        sw_buffer_kind rk = L->g->buffers[L->bufs[lead]].kind == SW_BUF_STATS ? SW_BUF_STATS : SW_BUF_RECV;
        for (int q = 1; q < r; q++) {
            int m = L->members[q];
            int32_t recv;
            SW_TRY(sw_tg_buffer(L->g, lead_dev, rk, op, &box, &recv));
            sw_task t = copy_of(L, phase, lead_dev, dev_of(L, op, m), op, m, NONE, &box);
            L->io[q] = recv;
            SW_TRY(add_copy(L, &t, L->ready[m], L->bufs[m], recv, &L->deps[nd++]));
        }
        sw_task t = task_of(kind, phase, lead_dev, op, lead);
        t.elements = sw_box_volume(&box);
        int32_t total;
        L->io[0] = L->bufs[lead];   /* summed in place into the lead's buffer */
        SW_TRY(add_task(L, &t, L->deps, nd, L->io, r, &L->bufs[lead], 1, &total));
        L->ready[lead] = total;
        for (int q = 1; q < r; q++) {
            int m = L->members[q];
            sw_task back = copy_of(L, phase, dev_of(L, op, m), lead_dev, op, m, NONE, &box);
            SW_TRY(add_copy(L, &back, total, L->bufs[lead], L->bufs[m], &L->ready[m]));
        }
    }
    return SW_OK;
}

/* Partial sums per worker, reduced among the workers of the same channels, then normalize. */
static sw_status lower_batchnorm_forward(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    int k = cfg_of(L, op)->nworkers, data = first_slot(o, SW_ROLE_DATA), stat = first_slot(o, SW_ROLE_STAT);
    for (int w = 0; w < k; w++) {
        SW_TRY(gather(L, op, data, w));
        int32_t dev = dev_of(L, op, w);
        sw_box sbox;
        region(L, op, stat, w, &sbox);
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_STATS, op, &sbox, &L->bufs[w]));
        sw_task t = task_of(SW_TASK_BN_STATS, SW_PHASE_FORWARD, dev, op, w);
        t.elements = sw_box_volume(&sbox);
        int at = sidx(L, op, data, w);
        SW_TRY(add_task(L, &t, &L->in_task[at], 1, &L->in_buf[at], 1, &L->bufs[w], 1, &L->ready[w]));
    }
    SW_TRY(sw_lower_reduce_among(L, op, stat, SW_PHASE_FORWARD, SW_TASK_STATS_REDUCE));
    for (int w = 0; w < k; w++) {
        int nreads = 2, wi = widx(L, op, w);
        int32_t dev = dev_of(L, op, w), writes[2];
        L->io[0] = L->in_buf[sidx(L, op, data, w)];   /* x region, statistics, gamma, beta, running statistics */
        L->io[1] = L->stats_fwd[wi] = L->bufs[w];
        SW_TRY(param_buffers(L, op, w, L->io, &nreads));
        /* every worker keeps the running statistics of its channels, (2, C) like the statistics:
         * replicas update their copies alike from the same reduced sums, so they never need syncing */
        sw_box sbox = sw_buffer_box(&L->g->buffers[L->bufs[w]]);
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_RUNNING, op, &sbox, &writes[1]));
        L->g->buffers[writes[1]].worker = w;
        L->g->buffers[writes[1]].slot = (int16_t)stat;
        L->io[nreads++] = writes[1];   /* read and updated in place */
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_ACTIVATION, op, &L->box[wi], &L->act[wi]));
        writes[0] = L->act[wi];
        sw_task t = task_of(SW_TASK_BN_APPLY, SW_PHASE_FORWARD, dev, op, w);
        t.elements = sw_box_volume(&L->box[wi]);
        int32_t deps[2] = {L->in_task[sidx(L, op, data, w)], L->ready[w]};
        SW_TRY(add_task(L, &t, deps, 2, L->io, nreads, writes, 2, &L->act_task[wi]));
    }
    return SW_OK;
}

/* Worker w's forward: its data regions gathered, its parameters, one task of `kind`
 * writing a new `buf_kind` buffer over its output box (*buf, *task). */
static sw_status worker_forward(lowering *L, int op, int w, sw_buffer_kind buf_kind, sw_task_kind kind, int32_t *buf,
                                int32_t *task) {
    const sw_op *o = op_at(L, op);
    int32_t deps[64], reads[64];  /* an op has at most 64 inputs (problem.c) */
    int nd = 0, wi = widx(L, op, w);
    for (int slot = 0; slot < o->ninputs; slot++) {
        if (o->inputs[slot].role == SW_ROLE_DATA) {
            SW_TRY(gather(L, op, slot, w));
            if (L->in_buf[sidx(L, op, slot, w)] != NONE) {
                reads[nd] = L->in_buf[sidx(L, op, slot, w)];
                deps[nd++] = L->in_task[sidx(L, op, slot, w)];
            }
        }
    }
    int nreads = nd;   /* the data regions, then the parameters */
    SW_TRY(param_buffers(L, op, w, reads, &nreads));
    SW_TRY(sw_tg_buffer(L->g, dev_of(L, op, w), buf_kind, op, &L->box[wi], buf));
    sw_task t = task_of(kind, SW_PHASE_FORWARD, dev_of(L, op, w), op, w);
    t.elements = sw_box_volume(&L->box[wi]);
    return add_task(L, &t, deps, nd, reads, nreads, buf, 1, task);
}

/* Partition-n-reduce: every worker computes a partial output of its block over its
 * part of the reduction (forward_partial); each owner receives the others' partial
 * outputs and sums them (sum_partials, which applies the activation). */
static sw_status lower_reduction_forward(lowering *L, int op) {
    const sw_config *c = cfg_of(L, op);
    for (int w = 0; w < c->nworkers; w++) {
        SW_TRY(worker_forward(L, op, w, SW_BUF_PARTIAL, SW_TASK_FORWARD_PARTIAL, &L->bufs[w], &L->ready[w]));
    }
    for (int owner = 0; owner < c->nworkers; owner += c->rdeg) {
        int wi = widx(L, op, owner), nd = 0;
        int32_t odev = dev_of(L, op, owner);
        L->io[nd] = L->bufs[owner];   /* the owner's partial output, then the others' received */
        L->deps[nd++] = L->ready[owner];
        for (int m = owner + 1; m < owner + c->rdeg; m++) {
            int32_t recv;
            SW_TRY(sw_tg_buffer(L->g, odev, SW_BUF_RECV, op, &L->box[wi], &recv));
            sw_task t = copy_of(L, SW_PHASE_FORWARD, odev, dev_of(L, op, m), op, m, NONE, &L->box[wi]);
            L->io[nd] = recv;
            SW_TRY(add_copy(L, &t, L->ready[m], L->bufs[m], recv, &L->deps[nd++]));
        }
        SW_TRY(sw_tg_buffer(L->g, odev, SW_BUF_ACTIVATION, op, &L->box[wi], &L->act[wi]));
        sw_task t = task_of(SW_TASK_SUM_PARTIALS, SW_PHASE_FORWARD, odev, op, owner);
        t.elements = sw_box_volume(&L->box[wi]);
        SW_TRY(add_task(L, &t, L->deps, nd, L->io, nd, &L->act[wi], 1, &L->act_task[wi]));
    }
    return SW_OK;
}

static sw_status lower_forward(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    const sw_config *c = cfg_of(L, op);
    for (int w = 0; w < c->nworkers; w++) {
        sw_worker_box(o, c, w, &L->box[widx(L, op, w)]);
    }
    sw_op_kind kind = (sw_op_kind)L->plan->kind[op];
    if (kind == SW_OPKIND_BATCHNORM) {
        return lower_batchnorm_forward(L, op);
    }
    if (c->rdeg > 1) {
        return lower_reduction_forward(L, op);
    }
    sw_task_kind task_kind = kind == SW_OPKIND_INPUT     ? SW_TASK_LOAD_INPUT
                             : kind == SW_OPKIND_SOFTMAX ? SW_TASK_LOSS
                                                         : SW_TASK_FORWARD;
    for (int w = 0; w < c->nworkers; w++) {
        int wi = widx(L, op, w);
        SW_TRY(worker_forward(L, op, w, SW_BUF_ACTIVATION, task_kind, &L->act[wi], &L->act_task[wi]));
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ checks, state, driver */
sw_status sw_plan_check(const sw_problem *p, const sw_plan *plan) {
    if (plan->nops != p->nops) {
        return SW_FAIL(SW_ERR_VALUE, "the plan has %d ops, the problem %d", plan->nops, p->nops);
    }
    char *seen = calloc((size_t)p->ndev, 1);
    if (!seen) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    sw_status s = SW_OK;
    for (int i = 0; i < p->nops && s == SW_OK; i++) {
        const sw_op *o = &p->ops[i];
        const sw_config *c = &plan->cfg[i];
        int64_t k = 1;
        if (plan->kind[i] < SW_OPKIND_PLAIN || plan->kind[i] > SW_OPKIND_BATCHNORM) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d: unknown op kind %d", i, plan->kind[i]);
            break;
        }
        if (plan->kind[i] == SW_OPKIND_BATCHNORM &&
            (first_slot(o, SW_ROLE_DATA) == NONE || first_slot(o, SW_ROLE_STAT) == NONE)) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d: a batchnorm needs a data input and a statistics input", i);
            break;
        }
        for (int d = 0; d < SW_MAX_RANK && s == SW_OK; d++) {
            int32_t g = c->deg[d];
            if (d < o->out_rank ? (g < 1 || o->extent[d] % g != 0) : g != 1) {
                s = SW_FAIL(SW_ERR_VALUE, "op %d: degree %d does not divide dimension %d", i, g, d);
            }
            k *= g;
        }
        k *= c->rdeg;
        if (s == SW_OK && (c->rdeg < 1 || k != c->nworkers || k > p->ndev)) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d: %d workers for degrees of product %lld on %d devices", i,
                        c->nworkers, (long long)k, p->ndev);
        }
        memset(seen, 0, (size_t)p->ndev);
        for (int w = 0; w < c->nworkers && s == SW_OK; w++) {
            int32_t dv = plan->devs[c->dev_offset + w];
            if (dv < 0 || dv >= p->ndev || seen[dv]) {
                s = SW_FAIL(SW_ERR_VALUE, "op %d: its %d workers need distinct devices in 0..%d", i, c->nworkers,
                            p->ndev - 1);
            } else {
                seen[dv] = 1;
            }
        }
    }
    free(seen);
    return s;
}

static void free_state(lowering *L) {
    free(L->wbase);
    free(L->box);
    free(L->act);
    free(L->act_task);
    free(L->grad);
    free(L->grad_last);
    free(L->stats_fwd);
    free(L->stats_bwd);
    free(L->sbase);
    free(L->in_buf);
    free(L->in_task);
    free(L->wgrad_buf);
    free(L->wgrad_task);
    free(L->piece_w);
    free(L->piece_box);
    free(L->deps);
    free(L->io);
    free(L->members);
    free(L->grouped);
    free(L->rbox);
    free(L->bufs);
    free(L->ready);
    for (int op = 0; L->owner_on && op < L->p->nops; op++) {
        free(L->owner_on[op]);
    }
    free(L->owner_on);
    for (int slot = 0; slot < 64; slot++) {
        free(L->region_of[slot]);
        free(L->region_used[slot]);
    }
}

static int32_t *ids(size_t n) {  /* n ids, all NONE */
    int32_t *a = malloc(sizeof *a * (n ? n : 1));
    for (size_t i = 0; a && i < n; i++) {
        a[i] = NONE;
    }
    return a;
}

static sw_status alloc_state(lowering *L) {
    int nops = L->p->nops;
    size_t nw = 0, ns = 0;
    L->wbase = malloc(sizeof *L->wbase * (size_t)nops);
    L->sbase = malloc(sizeof *L->sbase * (size_t)nops);
    if (!L->wbase || !L->sbase) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    L->maxk = 1;
    L->region_op = NONE;
    for (int i = 0; i < nops; i++) {
        int k = L->plan->cfg[i].nworkers;
        L->wbase[i] = (int32_t)nw;
        L->sbase[i] = (int32_t)ns;
        nw += (size_t)k;
        ns += (size_t)k * (size_t)L->p->ops[i].ninputs;
        L->maxk = k > L->maxk ? k : L->maxk;
    }
    if (nw + ns >= INT32_MAX / 2) {
        return SW_FAIL(SW_ERR_TOO_LARGE, "plan too large to lower (%zu workers)", nw);
    }
    size_t mk = (size_t)L->maxk;
    L->box = malloc(sizeof *L->box * nw);
    L->act = ids(nw);
    L->act_task = ids(nw);
    L->grad = ids(nw);
    L->grad_last = ids(nw);
    L->stats_fwd = ids(nw);
    L->stats_bwd = ids(nw);
    L->in_buf = ids(ns);
    L->in_task = ids(ns);
    L->wgrad_buf = ids(ns);
    L->wgrad_task = ids(ns);
    L->piece_w = malloc(sizeof *L->piece_w * mk);
    L->piece_box = malloc(sizeof *L->piece_box * mk);
    L->deps = malloc(sizeof *L->deps * (mk + 8));
    L->io = malloc(sizeof *L->io * (mk + 72));
    L->members = malloc(sizeof *L->members * mk);
    L->grouped = malloc(mk);
    L->rbox = malloc(sizeof *L->rbox * mk);
    L->bufs = malloc(sizeof *L->bufs * mk);
    L->ready = malloc(sizeof *L->ready * mk);
    L->owner_on = calloc((size_t)nops, sizeof *L->owner_on);
    if (!L->owner_on || !L->box || !L->act || !L->act_task || !L->grad || !L->grad_last || !L->stats_fwd || !L->stats_bwd || !L->in_buf || !L->in_task ||
        !L->wgrad_buf || !L->wgrad_task || !L->piece_w || !L->piece_box || !L->deps || !L->io || !L->members ||
        !L->grouped || !L->rbox || !L->bufs || !L->ready) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    return SW_OK;
}

static sw_status run(lowering *L) {
    SW_TRY(alloc_state(L));
    for (int op = 0; op < L->p->nops; op++) {
        SW_TRY(lower_forward(L, op));
    }
    for (int op = L->p->nops - 1; op >= 0; op--) {
        SW_TRY(sw_lower_backward(L, op));
    }
    for (int op = L->p->nops - 1; op >= 0; op--) {
        if (has_weights(op_at(L, op))) {
            SW_TRY(sw_lower_sync(L, op));
        }
    }
    return SW_OK;
}

sw_status sw_lower_buffer_totals(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, int chunked,
                                 int64_t *bytes, int64_t *count, int64_t *persistent) {
    /* the lowering as it is, only its tasks not kept: Inception-v3's memory check on 16 devices
     * lowers 30,000 tasks, whose arrays took a third of its first lowering in a process */
    int64_t *halves = calloc((size_t)p->ndev + 1, sizeof *halves);
    if (!halves) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    sw_task_graph g;
    memset(&g, 0, sizeof g);
    g.ring_halves = halves;
    /* Per worker and per input or output of its op, a lowering makes 2.7 to 3.2 buffers for the
     * searched plans and data parallelism measured (Inception-v3, ResNet-50, VGG-16 on 16
     * devices), up to 8.8 for model parallelism: room for 9 made at once (sw_tg_expect_buffers;
     * the plan is checked by sw_lower, so its counts are only read here where they are sane) */
    int64_t expected = 0;
    for (int op = 0; op < p->nops && op < plan->nops; op++) {
        int32_t k = plan->cfg[op].nworkers;
        expected += k > 0 ? (int64_t)k * (1 + p->ops[op].ninputs) : 0;
    }
    sw_tg_expect_buffers(&g, 9 * expected);
    sw_status s = sw_lower(p, plan, rings, &g);   /* (freed on failure) */
    if (s == SW_OK) {
        int64_t *scratch = count;   /* the persistent buffers' count, overwritten next */
        sw_tg_buffer_totals(&g, p->ndev, 0, 1, persistent, scratch);
        sw_tg_buffer_totals(&g, p->ndev, chunked, 0, bytes, count);
    }
    sw_task_graph_free(&g);
    free(halves);
    return s;
}

/* Lowerings run in this process: tests read it (sw_lower_count) to see that a plan is lowered
 * once however many passes read its graph. */
static _Atomic int64_t lowerings;

int64_t sw_lower_count(void) { return atomic_load(&lowerings); }

sw_status sw_lower(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, sw_task_graph *g) {
    atomic_fetch_add(&lowerings, 1);
    if (rings != SW_RINGS_CHUNKED && rings != SW_RINGS_FUSED) {
        return SW_FAIL(SW_ERR_VALUE, "unknown ring detail %d (0: chunked, 1: fused)", (int)rings);
    }
    SW_TRY(sw_plan_check(p, plan));
    lowering L;
    memset(&L, 0, sizeof L);
    L.p = p;
    L.plan = plan;
    L.g = g;
    L.rings = rings;
    g->ring_detail = (int8_t)rings;
    for (int k = 0; k < SW_BUF_NKINDS; k++) {   /* sizes as the plan counts them: its precision's */
        g->element_bytes[k] = sw_precision_element_bytes(p->precision, k);
    }
    g->value_bytes = p->bytes_per_element;
    sw_status s = run(&L);
    free_state(&L);
    if (s != SW_OK) {
        sw_task_graph_free(g);
    } else {
        sw_tg_trim(g);
    }
    return s;
}
