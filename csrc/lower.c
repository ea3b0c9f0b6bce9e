/* lower.c -- one training iteration of a plan as a task graph, in C.
 *
 * The only lowering: the executor runs this graph and the simulator replays
 * it (python/shardwise/lower.py reads it and describes every task kind).
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
 *                               first replica, reduce, update, copies back;
 *                               last layer first, the order its dW / dB are
 *                               done in the backward, so that program order
 *                               (the memory plan's lifetimes, hence its reuse
 *                               edges between synchronizations) never holds a
 *                               layer's synchronization behind one whose
 *                               gradient comes later
 *
 * State is kept in flat arrays: per worker of every op at wbase[op] + w, per
 * (op, input slot, worker) at sbase[op] + slot * nworkers + w.
 */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memset */

#include "shardwise.h"

#define NONE (-1)

typedef struct {
    const sw_problem *p;
    const sw_plan *plan;
    sw_task_graph *g;
    /* per worker of every op: [wbase[op] + w] */
    int32_t *wbase;
    sw_box *box;                 /* output box */
    int32_t *act, *act_task;     /* activation buffer and the task writing it */
    int32_t *grad, *grad_last;   /* gradient buffer (NONE until a consumer sends one), last accumulate */
    int32_t *stats_fwd, *stats_bwd;   /* batchnorm: the worker's reduced statistics of x and of the gradient */
    /* per (op, input slot, worker): [sbase[op] + slot * nworkers + w] */
    int32_t *sbase;
    int32_t *in_buf, *in_task;   /* data slots: staging region (or shared shard) and the task completing it,
                                    NONE when not read; weight slots: the parameter buffer */
    int32_t *wgrad_buf, *wgrad_task;  /* weight slots: gradient buffer, backward_weight task */
    /* scratch, maxk (the most workers of any op) entries each */
    int32_t maxk;
    int32_t *piece_w;            /* overlapping source workers of a region ... */
    sw_box *piece_box;           /* ... and the piece each one holds */
    int32_t npieces;
    int32_t *deps;               /* maxk + 8: dependencies being collected */
    int32_t *io;                 /* maxk + 72: buffers a task being built reads */
    int32_t *members;            /* a replica group */
    char *grouped;               /* worker already in a group */
    sw_box *rbox;                /* per worker: the region grouped on */
    int32_t *bufs, *ready;       /* per worker: buffers to reduce, task after which each is ready */
} lowering;

/* ------------------------------------------------------------------ small helpers */
static const sw_op *op_at(const lowering *L, int op) { return &L->p->ops[op]; }
static const sw_config *cfg_of(const lowering *L, int op) { return &L->plan->cfg[op]; }
static int32_t dev_of(const lowering *L, int op, int w) { return L->plan->devs[cfg_of(L, op)->dev_offset + w]; }
static int32_t widx(const lowering *L, int op, int w) { return L->wbase[op] + w; }
static int32_t sidx(const lowering *L, int op, int slot, int w) {
    return L->sbase[op] + slot * cfg_of(L, op)->nworkers + w;
}
static int has_weights(const sw_op *op) {
    for (int k = 0; k < op->ninputs; k++) {
        if (op->inputs[k].role == SW_ROLE_WEIGHT) {
            return 1;
        }
    }
    return 0;
}
static int first_slot(const sw_op *op, sw_role role) {
    for (int k = 0; k < op->ninputs; k++) {
        if (op->inputs[k].role == role) {
            return k;
        }
    }
    return NONE;
}

/* The region of input `slot` worker w reads (sw_worker_region: its output block,
 * over its part of a split reduction); an input not read gets the empty box (all
 * zeros) and 0. */
static int region(const lowering *L, int op, int slot, int w, sw_box *out) {
    if (sw_worker_region(op_at(L, op), cfg_of(L, op), w, slot, out)) {
        return 1;
    }
    for (int d = 0; d < out->rank; d++) {
        out->lo[d] = out->hi[d] = 0;
    }
    return 0;
}

static sw_task task_of(sw_task_kind kind, sw_phase phase, int32_t device, int32_t op, int32_t worker) {
    sw_task t;
    memset(&t, 0, sizeof t);
    t.kind = (int8_t)kind;
    t.phase = (int8_t)phase;
    t.device = device;
    t.src_device = NONE;
    t.op = op;
    t.worker = worker;
    t.slot = NONE;
    return t;
}

/* A copy of `box` from src to dst device: the bytes count only across devices. */
static sw_task copy_of(sw_phase phase, int32_t dst, int32_t src, int32_t op, int32_t worker, int32_t slot,
                       const sw_box *box) {
    sw_task t = task_of(SW_TASK_COPY, phase, dst, op, worker);
    t.slot = slot;
    t.src_device = src;
    t.box = *box;
    t.elements = sw_box_volume(box);
    t.nbytes = src != dst ? t.elements * SW_TASK_BYTES_PER_ELEMENT : 0;
    return t;
}

/* Append task t with its dependencies and the buffers it reads and writes. */
static sw_status add_task(lowering *L, const sw_task *t, const int32_t *deps, int ndeps, const int32_t *reads,
                          int nreads, const int32_t *writes, int nwrites, int32_t *id) {
    sw_task_io io = {reads, nreads, writes, nwrites};
    return sw_tg_task(L->g, t, deps, ndeps, &io, id);
}

/* A copy task reading buffer `from` and writing buffer `to`. */
static sw_status add_copy(lowering *L, const sw_task *t, int32_t dep, int32_t from, int32_t to, int32_t *id) {
    return add_task(L, t, &dep, 1, &from, 1, &to, 1, id);
}

/* The workers of op `src` whose boxes meet `region`, row-major (the last
 * dimension fastest), with their pieces: the
 * owner of each output block (with a split reduction, worker block * rdeg). */
static void find_pieces(lowering *L, int src, const sw_box *reg) {
    const sw_config *c = cfg_of(L, src);
    L->npieces = sw_blocks_meeting(op_at(L, src), c, reg, L->piece_w, L->piece_box);
    for (int q = 0; q < L->npieces; q++) {
        L->piece_w[q] *= c->rdeg;   /* the block's owner */
    }
}

/* Replica groups of input `slot` of op: workers reading the same box, in worker
 * order (workers that do not read it are in none).  start_groups computes the
 * boxes; next_group fills L->members and returns its size, 0 when every worker
 * is in a group. */
static void start_groups(lowering *L, int op, int slot) {
    int k = cfg_of(L, op)->nworkers;
    for (int w = 0; w < k; w++) {
        L->grouped[w] = (char)!region(L, op, slot, w, &L->rbox[w]);
    }
}

static int next_group(lowering *L, int op, int *from) {
    int k = cfg_of(L, op)->nworkers;
    while (*from < k && L->grouped[*from]) {
        (*from)++;
    }
    if (*from >= k) {
        return 0;
    }
    int r = 0;
    for (int v = *from; v < k; v++) {
        if (!L->grouped[v] && sw_box_equal(&L->rbox[*from], &L->rbox[v])) {
            L->grouped[v] = 1;
            L->members[r++] = v;
        }
    }
    return r;
}

/* ------------------------------------------------------------------ forward */
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
    int kp = cfg_of(L, prod)->nworkers;
    for (int s = 0; s < kp; s += cfg_of(L, prod)->rdeg) {  /* the region is a shard already here: share it */
        if (dev_of(L, prod, s) == dev && sw_box_equal(&L->box[widx(L, prod, s)], &reg)) {
            L->in_buf[at] = L->act[widx(L, prod, s)];
            L->in_task[at] = L->act_task[widx(L, prod, s)];
            return SW_OK;
        }
    }
    int32_t buf;
    SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_REGION, prod, &reg, &buf));
    find_pieces(L, prod, &reg);
    for (int q = 0; q < L->npieces; q++) {
        int s = L->piece_w[q];
        sw_task t = copy_of(SW_PHASE_FORWARD, dev, dev_of(L, prod, s), op, w, slot, &L->piece_box[q]);
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
static sw_status reduce_among(lowering *L, int op, int slot, sw_phase phase, sw_task_kind kind) {
    int from = 0, r;
    start_groups(L, op, slot);
    while ((r = next_group(L, op, &from)) > 0) {
        if (r < 2) {
            continue;
        }
        int lead = L->members[0];
        int32_t lead_dev = dev_of(L, op, lead);
        sw_box box = L->g->buffers[L->bufs[lead]].box;
        int nd = 0;
        L->deps[nd++] = L->ready[lead];
        /* batchnorm statistics are received as what they are: double-precision sums */
        sw_buffer_kind rk = L->g->buffers[L->bufs[lead]].kind == SW_BUF_STATS ? SW_BUF_STATS : SW_BUF_RECV;
        for (int q = 1; q < r; q++) {
            int m = L->members[q];
            int32_t recv;
            SW_TRY(sw_tg_buffer(L->g, lead_dev, rk, op, &box, &recv));
            sw_task t = copy_of(phase, lead_dev, dev_of(L, op, m), op, m, NONE, &box);
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
            sw_task back = copy_of(phase, dev_of(L, op, m), lead_dev, op, m, NONE, &box);
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
    SW_TRY(reduce_among(L, op, stat, SW_PHASE_FORWARD, SW_TASK_STATS_REDUCE));
    for (int w = 0; w < k; w++) {
        int nreads = 2, wi = widx(L, op, w);
        int32_t dev = dev_of(L, op, w), writes[2];
        L->io[0] = L->in_buf[sidx(L, op, data, w)];   /* x region, statistics, gamma, beta, running statistics */
        L->io[1] = L->stats_fwd[wi] = L->bufs[w];
        SW_TRY(param_buffers(L, op, w, L->io, &nreads));
        /* every worker keeps the running statistics of its channels, (2, C) like the statistics:
         * replicas update their copies alike from the same reduced sums, so they never need syncing */
        sw_box sbox = L->g->buffers[L->bufs[w]].box;
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
            sw_task t = copy_of(SW_PHASE_FORWARD, odev, dev_of(L, op, m), op, m, NONE, &L->box[wi]);
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

/* ------------------------------------------------------------------ backward */
/* Send the pieces of a partial gradient (buffer pbuf on `dev`, written by task
 * `ptask`, over `reg`) to the owners in op `src` and add them up there, in order. */
static sw_status scatter_grad(lowering *L, int src, const sw_box *reg, int32_t dev, int32_t pbuf, int32_t ptask,
                              int consumer, int w, int slot) {
    int ks = cfg_of(L, src)->nworkers;
    if (L->grad[widx(L, src, 0)] == NONE) {
        for (int s = 0; s < ks; s += cfg_of(L, src)->rdeg) {   /* the owners of the output blocks */
            int wi = widx(L, src, s);
            SW_TRY(sw_tg_buffer(L->g, dev_of(L, src, s), SW_BUF_GRAD, src, &L->box[wi], &L->grad[wi]));
        }
    }
    find_pieces(L, src, reg);
    for (int q = 0; q < L->npieces; q++) {
        int s = L->piece_w[q];
        int32_t sdev = dev_of(L, src, s), dep = ptask, read = pbuf;
        const sw_box *piece = &L->piece_box[q];
        if (sdev != dev) {
            SW_TRY(sw_tg_buffer(L->g, sdev, SW_BUF_RECV, src, piece, &read));
            sw_task t = copy_of(SW_PHASE_BACKWARD, sdev, dev, consumer, w, slot, piece);
            SW_TRY(add_copy(L, &t, ptask, pbuf, read, &dep));
        }
        sw_task t = task_of(SW_TASK_ACCUMULATE, SW_PHASE_BACKWARD, sdev, src, s);
        t.box = *piece;
        t.elements = sw_box_volume(piece);
        int wi = widx(L, src, s);
        int32_t deps[2] = {dep, L->grad_last[wi]};
        SW_TRY(add_task(L, &t, deps, 2, &read, 1, &L->grad[wi], 1, &L->grad_last[wi]));
    }
    return SW_OK;
}

/* Batchnorm: sums of the gradient per worker, reduced among replicas; ready[w]. */
static sw_status lower_batchnorm_backward_sums(lowering *L, int op) {
    int stat = first_slot(op_at(L, op), SW_ROLE_STAT), k = cfg_of(L, op)->nworkers;
    int has_grad = L->grad[widx(L, op, 0)] != NONE;
    for (int w = 0; w < k; w++) {
        int wi = widx(L, op, w);
        int32_t dev = dev_of(L, op, w);
        sw_box sbox;
        region(L, op, stat, w, &sbox);
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_STATS, op, &sbox, &L->bufs[w]));
        sw_task t = task_of(SW_TASK_BN_BACKWARD_STATS, SW_PHASE_BACKWARD, dev, op, w);
        t.elements = sw_box_volume(&sbox);
        int32_t deps[2] = {has_grad ? L->grad_last[wi] : NONE, L->act_task[wi]};
        /* dy (if any), the x region, the statistics of x */
        int32_t reads[3] = {L->grad[wi], L->in_buf[sidx(L, op, first_slot(op_at(L, op), SW_ROLE_DATA), w)],
                            L->stats_fwd[wi]};
        L->stats_bwd[wi] = L->bufs[w];
        SW_TRY(add_task(L, &t, deps, 2, reads + !has_grad, has_grad + 2, &L->bufs[w], 1, &L->ready[w]));
    }
    return reduce_among(L, op, stat, SW_PHASE_BACKWARD, SW_TASK_STATS_REDUCE);
}

/* The gradients of the weight slices worker w reads, one backward_weight task per
 * weight slot (TurboDL's dW and dB sub-tasks, launched independently).  Each reads
 * lead[0 .. nlead) (the output's gradient and output, or the gradient before the
 * activation); a weight's task also reads the regions of the data inputs (and a
 * batchnorm's statistics of x), a bias's nothing more (sw_input.bias). */
static sw_status backward_weight(lowering *L, int op, int w, const int32_t *gdeps, int ngdeps, const int32_t *lead,
                                 int nlead) {
    const sw_op *o = op_at(L, op);
    int32_t dev = dev_of(L, op, w), reads[67];   /* at most 64 inputs (problem.c) */
    for (int slot = 0; slot < o->ninputs; slot++) {
        sw_box reg;
        if (o->inputs[slot].role != SW_ROLE_WEIGHT || !region(L, op, slot, w, &reg)) {
            continue;
        }
        int nreads = 0;
        for (int k = 0; k < nlead; k++) {
            reads[nreads++] = lead[k];
        }
        for (int k = 0; k < o->ninputs && !o->inputs[slot].bias; k++) {
            if (o->inputs[k].role == SW_ROLE_DATA && L->in_buf[sidx(L, op, k, w)] != NONE) {
                reads[nreads++] = L->in_buf[sidx(L, op, k, w)];
            }
        }
        if (!o->inputs[slot].bias && L->stats_fwd[widx(L, op, w)] != NONE) {   /* batchnorm: statistics of x */
            reads[nreads++] = L->stats_fwd[widx(L, op, w)];
        }
        int at = sidx(L, op, slot, w);
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_PARAM_GRAD, op, &reg, &L->wgrad_buf[at]));
        L->g->buffers[L->wgrad_buf[at]].worker = w;
        L->g->buffers[L->wgrad_buf[at]].slot = (int16_t)slot;
        sw_task t = task_of(SW_TASK_BACKWARD_WEIGHT, SW_PHASE_BACKWARD, dev, op, w);
        t.slot = slot;
        t.elements = sw_box_volume(&reg);
        SW_TRY(add_task(L, &t, gdeps, ngdeps, reads, nreads, &L->wgrad_buf[at], 1, &L->wgrad_task[at]));
    }
    return SW_OK;
}

/* The partial gradient of data input `slot` over worker w's region, sent to its
 * owners.  It reads lead[0 .. nlead) (as backward_weight), the region, then what
 * kernels of some ops also need: the regions of the other data inputs (matmul,
 * LSTM ops), the worker's parameters (conv, linear: the weight; batchnorm:
 * gamma) and a batchnorm's statistics of x and of the gradient. */
static sw_status backward_data(lowering *L, int op, int w, int slot, int32_t *deps, int ndeps, const int32_t *lead,
                               int nlead) {
    const sw_op *o = op_at(L, op);
    int at = sidx(L, op, slot, w), src = o->inputs[slot].producer, wi = widx(L, op, w);
    int32_t dev = dev_of(L, op, w), pbuf, t_id, reads[68];   /* at most 64 inputs (problem.c) */
    sw_box reg = L->g->buffers[L->in_buf[at]].box;
    SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_PARTIAL_GRAD, src, &reg, &pbuf));
    sw_task t = task_of(SW_TASK_BACKWARD_DATA, SW_PHASE_BACKWARD, dev, op, w);
    t.slot = slot;
    t.elements = sw_box_volume(&reg);
    for (int k = 0; k < nlead; k++) {
        reads[k] = lead[k];
    }
    int nreads = nlead;
    reads[nreads++] = L->in_buf[at];
    for (int k = 0; k < o->ninputs; k++) {
        int32_t b = L->in_buf[sidx(L, op, k, w)];
        if (k != slot && b != NONE && o->inputs[k].role != SW_ROLE_STAT) {
            reads[nreads++] = b;
        }
    }
    if (L->stats_fwd[wi] != NONE) {
        reads[nreads++] = L->stats_fwd[wi];
        reads[nreads++] = L->stats_bwd[wi];
    }
    deps[ndeps] = L->in_task[at];
    SW_TRY(add_task(L, &t, deps, ndeps + 1, reads, nreads, &pbuf, 1, &t_id));
    return scatter_grad(L, src, &reg, dev, pbuf, t_id, op, w, slot);
}

/* Partition-n-reduce backward: each owner takes its block's gradient through the
 * activation (activation_grad) and sends it to the rest of its group; then every
 * worker computes the gradients of its inputs' regions and weight slices. */
static sw_status lower_reduction_backward(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    const sw_config *c = cfg_of(L, op);
    int has_grad = L->grad[widx(L, op, 0)] != NONE;
    for (int owner = 0; owner < c->nworkers; owner += c->rdeg) {
        int wi = widx(L, op, owner);
        int32_t odev = dev_of(L, op, owner);
        SW_TRY(sw_tg_buffer(L->g, odev, SW_BUF_GRAD_PRE, op, &L->box[wi], &L->bufs[owner]));
        sw_task t = task_of(SW_TASK_ACTIVATION_GRAD, SW_PHASE_BACKWARD, odev, op, owner);
        t.elements = sw_box_volume(&L->box[wi]);
        int32_t deps[2] = {has_grad ? L->grad_last[wi] : NONE, L->act_task[wi]};
        int32_t reads[2] = {L->grad[wi], L->act[wi]};   /* the output's gradient (if any), the output */
        SW_TRY(add_task(L, &t, deps, 2, reads + !has_grad, has_grad + 1, &L->bufs[owner], 1, &L->ready[owner]));
        for (int m = owner + 1; m < owner + c->rdeg; m++) {
            SW_TRY(sw_tg_buffer(L->g, dev_of(L, op, m), SW_BUF_GRAD_PRE, op, &L->box[wi], &L->bufs[m]));
            sw_task cp = copy_of(SW_PHASE_BACKWARD, dev_of(L, op, m), odev, op, m, NONE, &L->box[wi]);
            SW_TRY(add_copy(L, &cp, L->ready[owner], L->bufs[owner], L->bufs[m], &L->ready[m]));
        }
    }
    for (int w = 0; w < c->nworkers; w++) {
        int32_t gdeps[2] = {L->ready[w], NONE};
        for (int slot = 0; slot < o->ninputs; slot++) {
            if (o->inputs[slot].role != SW_ROLE_DATA || L->in_buf[sidx(L, op, slot, w)] == NONE ||
                (sw_op_kind)L->plan->kind[o->inputs[slot].producer] == SW_OPKIND_INPUT) {
                continue;
            }
            SW_TRY(backward_data(L, op, w, slot, gdeps, 1, &L->bufs[w], 1));
        }
        if (has_weights(o)) {
            SW_TRY(backward_weight(L, op, w, gdeps, 1, &L->bufs[w], 1));
        }
    }
    return SW_OK;
}

/* A gradient block no consumer adds a piece to (consumers read none of its box) is
 * zeros: a zero_grad task writes them, so that every read follows a write. */
static sw_status zero_untouched_grads(lowering *L, int op) {
    const sw_config *c = cfg_of(L, op);
    for (int w = 0; w < c->nworkers; w += c->rdeg) {
        int wi = widx(L, op, w);
        if (L->grad[wi] == NONE || L->grad_last[wi] != NONE) {
            continue;
        }
        sw_task t = task_of(SW_TASK_ZERO_GRAD, SW_PHASE_BACKWARD, dev_of(L, op, w), op, w);
        t.elements = sw_box_volume(&L->box[wi]);
        SW_TRY(add_task(L, &t, NULL, 0, NULL, 0, &L->grad[wi], 1, &L->grad_last[wi]));
    }
    return SW_OK;
}

static sw_status lower_backward(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    sw_op_kind kind = (sw_op_kind)L->plan->kind[op];
    if (kind == SW_OPKIND_INPUT) {
        return SW_OK;
    }
    SW_TRY(zero_untouched_grads(L, op));
    if (cfg_of(L, op)->rdeg > 1) {
        return lower_reduction_backward(L, op);
    }
    int has_grad = L->grad[widx(L, op, 0)] != NONE;  /* the softmax's comes from the loss */
    if (kind == SW_OPKIND_BATCHNORM) {
        SW_TRY(lower_batchnorm_backward_sums(L, op));
    }
    for (int w = 0; w < cfg_of(L, op)->nworkers; w++) {
        int wi = widx(L, op, w);
        int32_t gdeps[4] = {has_grad ? L->grad_last[wi] : NONE, L->act_task[wi], NONE, NONE};
        int32_t lead[2] = {L->grad[wi], L->act[wi]};   /* the output's gradient (if any), the output */
        int ng = 2;
        if (kind == SW_OPKIND_BATCHNORM) {
            gdeps[ng++] = L->ready[w];
        }
        for (int slot = 0; slot < o->ninputs; slot++) {
            int at = sidx(L, op, slot, w);
            if (o->inputs[slot].role != SW_ROLE_DATA || L->in_buf[at] == NONE) {
                continue;
            }
            if ((sw_op_kind)L->plan->kind[o->inputs[slot].producer] == SW_OPKIND_INPUT) {
                continue;  /* no gradient flows into the graph's inputs */
            }
            SW_TRY(backward_data(L, op, w, slot, gdeps, ng, lead + !has_grad, has_grad + 1));
        }
        if (has_weights(o)) {   /* dW and dB wait for dy and y only (not a batchnorm's dy sums) */
            SW_TRY(backward_weight(L, op, w, gdeps, 2, lead + !has_grad, has_grad + 1));
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ synchronization */
/* Parameter server per replica group of weight `slot`: gradients to the first
 * replica, summed, the update applied there, parameters sent back. */
static sw_status sync_group(lowering *L, int op, int slot, int r) {
    int lead = L->members[0];
    int32_t lead_dev = dev_of(L, op, lead), lead_grad = L->wgrad_buf[sidx(L, op, slot, lead)];
    sw_box box = L->g->buffers[lead_grad].box;
    int nd = 0;
    L->deps[nd++] = L->wgrad_task[sidx(L, op, slot, lead)];
    for (int q = 1; q < r; q++) {
        int m = L->members[q];
        int32_t recv;
        SW_TRY(sw_tg_buffer(L->g, lead_dev, SW_BUF_RECV, op, &box, &recv));
        sw_task t = copy_of(SW_PHASE_SYNC, lead_dev, dev_of(L, op, m), op, m, NONE, &box);
        L->io[q] = recv;
        SW_TRY(add_copy(L, &t, L->wgrad_task[sidx(L, op, slot, m)], L->wgrad_buf[sidx(L, op, slot, m)], recv,
                        &L->deps[nd++]));
    }
    int32_t red = L->deps[0], mom, upd;
    if (r > 1) {   /* summed in place into the lead's gradient */
        sw_task t = task_of(SW_TASK_REDUCE, SW_PHASE_SYNC, lead_dev, op, lead);
        t.elements = sw_box_volume(&box);
        L->io[0] = lead_grad;
        SW_TRY(add_task(L, &t, L->deps, nd, L->io, r, &lead_grad, 1, &red));
    }
    /* the update reads (param, grad, state...) and writes (param, state...): the optimizer's
     * state buffers (SGD: momentum; Adam: first, second moment), each the parameter's box */
    int nstate = L->p->optimizer_state;
    if (nstate < 1 || nstate > SW_MAX_OPTIMIZER_STATE) {
        return SW_FAIL(SW_ERR_VALUE, "optimizer_state must be 1..%d, got %d", SW_MAX_OPTIMIZER_STATE, nstate);
    }
    int32_t param = L->in_buf[sidx(L, op, slot, lead)];
    int32_t reads[2 + SW_MAX_OPTIMIZER_STATE] = {param, lead_grad}, writes[1 + SW_MAX_OPTIMIZER_STATE] = {param};
    for (int k = 0; k < nstate; k++) {
        SW_TRY(sw_tg_buffer(L->g, lead_dev, SW_BUF_MOMENTUM, op, &box, &mom));
        L->g->buffers[mom].worker = lead;
        L->g->buffers[mom].slot = (int16_t)slot;
        reads[2 + k] = writes[1 + k] = mom;
    }
    sw_task u = task_of(SW_TASK_UPDATE, SW_PHASE_UPDATE, lead_dev, op, lead);
    u.elements = sw_box_volume(&L->g->buffers[param].box);
    SW_TRY(add_task(L, &u, &red, 1, reads, 2 + nstate, writes, 1 + nstate, &upd));
    for (int q = 1; q < r; q++) {
        int m = L->members[q];
        int32_t id;
        sw_task t = copy_of(SW_PHASE_UPDATE, dev_of(L, op, m), lead_dev, op, m, NONE, &box);
        SW_TRY(add_copy(L, &t, upd, param, L->in_buf[sidx(L, op, slot, m)], &id));
    }
    return SW_OK;
}

static sw_status lower_sync(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    for (int slot = 0; slot < o->ninputs; slot++) {
        if (o->inputs[slot].role != SW_ROLE_WEIGHT) {
            continue;
        }
        int from = 0, r;
        start_groups(L, op, slot);
        while ((r = next_group(L, op, &from)) > 0) {
            SW_TRY(sync_group(L, op, slot, r));
        }
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
    if (!L->box || !L->act || !L->act_task || !L->grad || !L->grad_last || !L->stats_fwd || !L->stats_bwd || !L->in_buf || !L->in_task ||
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
        SW_TRY(lower_backward(L, op));
    }
    for (int op = L->p->nops - 1; op >= 0; op--) {
        if (has_weights(op_at(L, op))) {
            SW_TRY(lower_sync(L, op));
        }
    }
    return SW_OK;
}

sw_status sw_lower(const sw_problem *p, const sw_plan *plan, sw_task_graph *g) {
    if (p->sync_model != SW_SYNC_PARAMETER_SERVER) {
        return SW_FAIL(SW_ERR_VALUE, "lowering ring all-reduce synchronization is not implemented yet; "
                                     "use the parameter server model");
    }
    SW_TRY(sw_plan_check(p, plan));
    lowering L;
    memset(&L, 0, sizeof L);
    L.p = p;
    L.plan = plan;
    L.g = g;
    sw_status s = run(&L);
    free_state(&L);
    if (s != SW_OK) {
        sw_task_graph_free(g);
    }
    return s;
}
