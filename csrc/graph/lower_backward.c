/* lower_backward.c -- the backward pass and the synchronization of a plan's lowering (lower.c
 * has the forward pass, the checks and the driver).
 *
 *   backward (reverse order)    per worker: backward_data per data input, its pieces sent to the
 *                               owners and accumulated in order (the first term of a whole
 *                               block on the owner's device written in place); backward_weight;
 *                               batchnorm: statistics of the gradient reduced first; a split
 *                               reduction: activation_grad on the owner, copied to the group
 *                               first
 *   sync (reverse order)        per weight and replica group, last layer first (lower.c's
 *                               header comment says why): parameter server (copies to the first
 *                               replica, reduce, update, copies back) or, with the ring model,
 *                               ring all-reduce (reduce-scatter and allgather of gradient chunks,
 *                               then an update on every replica: sync_ring) or, with zero, the
 *                               ring's reduce-scatter, each chunk updated by its owner alone and
 *                               an allgather of the updated weight chunks (sync_ring too)
 */
#include <stdlib.h>  /* malloc, free (a ring's scratch) */

#include "lower_internal.h"

/* ------------------------------------------------------------------ backward */
/* The gradient buffers of op src's block owners, made when the first consumer sends one. */
static sw_status make_grads(lowering *L, int src) {
    if (L->grad[widx(L, src, 0)] != NONE) {
        return SW_OK;
    }
    for (int s = 0; s < cfg_of(L, src)->nworkers; s += cfg_of(L, src)->rdeg) {   /* the owners of the output blocks */
        int wi = widx(L, src, s);
        SW_TRY(sw_tg_buffer(L->g, dev_of(L, src, s), SW_BUF_GRAD, src, &L->box[wi], &L->grad[wi]));
    }
    return SW_OK;
}

/* The owner's gradient index (widx) when the partial gradient over `reg` on `dev` may be written
 * straight into it: reg is exactly one owner's whole block on the same device and nothing has
 * been summed into it yet.  Its first accumulate would copy the piece unchanged (the executor's
 * first_accumulate), so skipping that copy leaves every sum bitwise the same: later terms are
 * added in the same order.  NONE otherwise (a piece of a block, another device, a later term). */
static int direct_grad(lowering *L, int src, const sw_box *reg, int32_t dev) {
    find_pieces(L, src, reg);
    if (L->npieces != 1) {
        return NONE;
    }
    int s = L->piece_w[0], wi = widx(L, src, s);
    if (dev_of(L, src, s) != dev || L->grad_last[wi] != NONE || !sw_box_equal(&L->box[wi], reg)) {
        return NONE;
    }
    return wi;
}

/* Send the pieces of a partial gradient (buffer pbuf on `dev`, written by task
 * `ptask`, over `reg`) to the owners in op `src` and add them up there, in order. */
static sw_status scatter_grad(lowering *L, int src, const sw_box *reg, int32_t dev, int32_t pbuf, int32_t ptask,
                              int consumer, int w, int slot) {
    find_pieces(L, src, reg);
    for (int q = 0; q < L->npieces; q++) {
        int s = L->piece_w[q];
        int32_t sdev = dev_of(L, src, s), dep = ptask, read = pbuf;
        const sw_box *piece = &L->piece_box[q];
        if (sdev != dev) {
            SW_TRY(sw_tg_buffer(L->g, sdev, SW_BUF_RECV, src, piece, &read));
            sw_task t = copy_of(L, SW_PHASE_BACKWARD, sdev, dev, consumer, w, slot, piece);
            SW_TRY(add_copy(L, &t, ptask, pbuf, read, &dep));
        }
        sw_task t = task_of(SW_TASK_ACCUMULATE, SW_PHASE_BACKWARD, sdev, src, s);
        sw_tg_set_task_box(L->g, &t, piece);
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
    return sw_lower_reduce_among(L, op, stat, SW_PHASE_BACKWARD, SW_TASK_STATS_REDUCE);
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
 * owners (or, the first term of a whole block on this device, written straight into
 * the owner's gradient: direct_grad).  It reads lead[0 .. nlead) (as
 * backward_weight), the region, then what kernels of some ops also need: the
 * regions of the other data inputs (matmul, LSTM ops), the worker's parameters
 * (conv, linear: the weight; batchnorm: gamma) and a batchnorm's statistics of x
 * and of the gradient. */
static sw_status backward_data(lowering *L, int op, int w, int slot, int32_t *deps, int ndeps, const int32_t *lead,
                               int nlead) {
    const sw_op *o = op_at(L, op);
    int at = sidx(L, op, slot, w), src = o->inputs[slot].producer, wi = widx(L, op, w);
    int32_t dev = dev_of(L, op, w), pbuf, t_id, reads[68];   /* at most 64 inputs (problem.c) */
    sw_box reg = sw_buffer_box(&L->g->buffers[L->in_buf[at]]);
    SW_TRY(make_grads(L, src));
    int direct = direct_grad(L, src, &reg, dev);   /* the first term, already in place: no accumulate */
    if (direct != NONE) {
        pbuf = L->grad[direct];
    } else {
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_PARTIAL_GRAD, src, &reg, &pbuf));
    }
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
    if (direct != NONE) {
        L->grad_last[direct] = t_id;
        return SW_OK;
    }
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
            sw_task cp = copy_of(L, SW_PHASE_BACKWARD, dev_of(L, op, m), odev, op, m, NONE, &L->box[wi]);
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

sw_status sw_lower_backward(lowering *L, int op) {
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
/* The update of worker w's slice of weight `slot` from its summed gradient `grad` (on w's
 * device), after task `dep`.  It reads (param, grad, state...) and writes (param, state...): the
 * optimizer's state buffers (SGD: momentum; Adam: first, second moment), on w's device, made
 * here.  `part` NULL: the whole parameter box (the state buffers that box too); else a chunk of
 * it (zero: the chunk this member owns): the task's box and its state buffers' box is the chunk,
 * and the update touches only the chunk of the parameter (the state box tells the kernels). */
static sw_status add_update(lowering *L, int op, int slot, int w, int32_t grad, int32_t dep, const sw_box *part,
                            int32_t *upd) {
    int nstate = L->p->optimizer_state;
    if (nstate < 1 || nstate > SW_MAX_OPTIMIZER_STATE) {
        return SW_FAIL(SW_ERR_VALUE, "optimizer_state must be 1..%d, got %d", SW_MAX_OPTIMIZER_STATE, nstate);
    }
    int32_t dev = dev_of(L, op, w), param = L->in_buf[sidx(L, op, slot, w)], mom;
    sw_box box = part ? *part : sw_buffer_box(&L->g->buffers[param]);
    int32_t reads[2 + SW_MAX_OPTIMIZER_STATE] = {param, grad}, writes[1 + SW_MAX_OPTIMIZER_STATE] = {param};
    for (int k = 0; k < nstate; k++) {
        SW_TRY(sw_tg_buffer(L->g, dev, SW_BUF_MOMENTUM, op, &box, &mom));
        L->g->buffers[mom].worker = w;
        L->g->buffers[mom].slot = (int16_t)slot;
        reads[2 + k] = writes[1 + k] = mom;
    }
    sw_task u = task_of(SW_TASK_UPDATE, SW_PHASE_UPDATE, dev, op, w);
    if (part) {
        sw_tg_set_task_box(L->g, &u, &box);
    }
    u.elements = sw_box_volume(&box);
    return add_task(L, &u, &dep, 1, reads, 2 + nstate, writes, 1 + nstate, upd);
}

/* Parameter server per replica group of weight `slot` (r members in L->members): gradients to
 * the first replica, summed there in member order (one reduce), the update applied there,
 * parameters sent back. */
static sw_status sync_parameter_server(lowering *L, int op, int slot, int r) {
    int lead = L->members[0];
    int32_t lead_dev = dev_of(L, op, lead), lead_grad = L->wgrad_buf[sidx(L, op, slot, lead)];
    sw_box box = sw_buffer_box(&L->g->buffers[lead_grad]);
    int nd = 0;
    L->deps[nd++] = L->wgrad_task[sidx(L, op, slot, lead)];
    for (int q = 1; q < r; q++) {
        int m = L->members[q];
        int32_t recv;
        SW_TRY(sw_tg_buffer(L->g, lead_dev, SW_BUF_RECV, op, &box, &recv));
        sw_task t = copy_of(L, SW_PHASE_SYNC, lead_dev, dev_of(L, op, m), op, m, NONE, &box);
        L->io[q] = recv;
        SW_TRY(add_copy(L, &t, L->wgrad_task[sidx(L, op, slot, m)], L->wgrad_buf[sidx(L, op, slot, m)], recv,
                        &L->deps[nd++]));
    }
    int32_t red = L->deps[0], upd;
    if (r > 1) {   /* summed in place into the lead's gradient */
        sw_task t = task_of(SW_TASK_REDUCE, SW_PHASE_SYNC, lead_dev, op, lead);
        t.elements = sw_box_volume(&box);
        L->io[0] = lead_grad;
        SW_TRY(add_task(L, &t, L->deps, nd, L->io, r, &lead_grad, 1, &red));
    }
    SW_TRY(add_update(L, op, slot, lead, lead_grad, red, NULL, &upd));
    int32_t param = L->in_buf[sidx(L, op, slot, lead)];
    for (int q = 1; q < r; q++) {
        int m = L->members[q];
        int32_t id;
        sw_task t = copy_of(L, SW_PHASE_UPDATE, dev_of(L, op, m), lead_dev, op, m, NONE, &box);
        SW_TRY(add_copy(L, &t, upd, param, L->in_buf[sidx(L, op, slot, m)], &id));
    }
    return SW_OK;
}

/* The k chunks (k >= 2) of a gradient box that a ring passes around, into chunks[0 .. k): slices
 * along sw_ring_chunk_dim, its outermost dimension that k divides (equal chunks: each member then
 * sends exactly 2 (k - 1) / k of the gradient, what the cost model's ring charges per member),
 * else its outermost of at least k rows (chunks differing by at most one row; a group still moves
 * 2 (k - 1) x the gradient in all, as the cost model counts).  Returns 0 when every dimension has
 * fewer than k rows (a bias of 6 on 8 replicas): no chunk may be empty. */
static int ring_chunks(const sw_box *box, int k, sw_box *chunks) {
    for (int c = 0; c < k; c++) {
        if (!sw_ring_chunk(box, k, c, &chunks[c])) {
            return 0;
        }
    }
    return 1;
}

/* Ring all-reduce per replica group of weight `slot`: the k members (L->members, worker order)
 * form a ring, member i sending to member i + 1 (mod k), the gradient box G (every member's
 * gradient buffer, G_i on member i's device) cut into k chunks C_0 .. C_{k-1} (ring_chunks).
 *
 *   reduce-scatter, rounds r = 0 .. k-2   member i copies chunk (i - r) mod k of G_i to a recv
 *                                         buffer on member i + 1, which adds it into its G
 *                                         (accumulate)
 *   allgather, rounds r = 0 .. k-2        member i copies chunk (i + 1 - r) mod k, summed, to a
 *                                         recv buffer on member i + 1 (round 0 from G_i, later
 *                                         rounds forward the recv buffer of the round before;
 *                                         rounds >= 1 reuse the reduce-scatter's buffers),
 *                                         which copies it into its G on its own device
 *   update                                every member updates its own parameters from its G,
 *                                         with its own optimizer state
 *
 * With sync_model zero (ZeRO stage 1, after "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models") the reduce-scatter is the same; then member i updates only the chunk it holds
 * summed, (i + 1) mod k (sw_ring_owned_chunk), of its parameters P_i, with optimizer state of that
 * chunk's box (1/k of the weight's); the allgather then passes chunks of P instead of G (round 0
 * from P_i after that update, each chunk received copied into P_j).  The same bytes cross the
 * ring; the update's work and state are 1/k of the ring's.  The chunk sums are the ring's (same
 * order), the update is element by element: a member's parameters are bitwise the ring's.
 *
 * After the reduce-scatter member i holds the whole sum of chunk (i + 1) mod k; chunk c is summed
 * in the fixed order g_c + g_{c+1} + ... + g_{c-1} (ring order from member c), so a step's bits do
 * not depend on timing, and every member applies the same update to the same parameters with the
 * same state: the replicas stay bitwise equal, with no parameter sent back.  Each member sends 2 (k - 1) chunks,
 * 2 (k - 1) / k of the gradient with equal chunks, as the cost model's ring (cost_node.c).
 *
 * Dependencies: a copy runs on its destination and waits for the writer of what it reads; a
 * write into G_i on member i's device (an accumulate, a gathered chunk) also waits for the copy
 * reading G_i at that point from the next member's device (another chunk, but the runtime orders
 * accesses per buffer: no task writes a buffer another device may be reading). */
static sw_status sync_ring(lowering *L, int op, int slot, int k, const sw_box *chunks, int zero) {
    int32_t *scratch = malloc(sizeof *scratch * (6 + 2 * (size_t)(k - 1)) * (size_t)k);
    if (!scratch) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a ring of %d members", k);
    }
    int32_t *last = scratch;        /* per member: the last task writing its G */
    int32_t *sent = last + k;       /* the copy reading member i's G (this round; allgather: round 0) */
    int32_t *got = sent + k;        /* the recv buffer member i filled this round ... */
    int32_t *got_task = got + k;    /* ... and the copy filling it */
    int32_t *prev = got_task + k;   /* allgather: the recv buffer of the round before, and its copy */
    int32_t *prev_task = prev + k;
    /* [j * (k - 1) + r]: member j's recv buffer of reduce-scatter round r and the accumulate
     * reading it.  Allgather round r >= 1 brings member j the chunk it received in reduce-scatter
     * round r - 1 ((j - r) mod k both times), summed now: into the same buffer, once that
     * accumulate is done (only round 0's chunk j needs a buffer of its own), so that a member holds
     * k recv buffers per weight, not 2 (k - 1): fewer buffers for the memory plan to place. */
    int32_t *rs_buf = prev_task + k, *rs_add = rs_buf + (size_t)k * (k - 1);
    sw_status s = SW_OK;
    for (int i = 0; i < k; i++) {
        last[i] = L->wgrad_task[sidx(L, op, slot, L->members[i])];
    }
#define G(i) (L->wgrad_buf[sidx(L, op, slot, L->members[(i)])])
#define P(i) (L->in_buf[sidx(L, op, slot, L->members[(i)])])
#define DEV(i) (dev_of(L, op, L->members[(i)]))
#define GATHERED(i) (zero ? P(i) : G(i))   /* what the allgather fills: weights (zero) or gradients */
    /* reduce-scatter: in round r member i sends chunk (i - r) mod k, member j adds chunk (j - 1 - r) mod k */
    for (int r = 0; r < k - 1 && s == SW_OK; r++) {
        for (int i = 0; i < k && s == SW_OK; i++) {
            int j = (i + 1) % k, c = ((i - r) % k + k) % k;
            s = sw_tg_buffer(L->g, DEV(j), SW_BUF_RECV, op, &chunks[c], &got[j]);
            if (s == SW_OK) {
                sw_task t = copy_of(L, SW_PHASE_SYNC, DEV(j), DEV(i), op, L->members[i], NONE, &chunks[c]);
                s = add_copy(L, &t, last[i], G(i), got[j], &got_task[j]);
                sent[i] = got_task[j];
            }
        }
        for (int j = 0; j < k && s == SW_OK; j++) {
            int c = ((j - 1 - r) % k + k) % k;
            sw_task t = task_of(SW_TASK_ACCUMULATE, SW_PHASE_SYNC, DEV(j), op, L->members[j]);
            sw_tg_set_task_box(L->g, &t, &chunks[c]);
            t.elements = sw_box_volume(&chunks[c]);
            int32_t deps[3] = {got_task[j], last[j], sent[j]}, into = G(j);
            s = add_task(L, &t, deps, 3, &got[j], 1, &into, 1, &last[j]);
            rs_buf[j * (k - 1) + r] = got[j];
            rs_add[j * (k - 1) + r] = last[j];
        }
    }
    /* zero: member i updates the chunk it holds summed; `last` becomes the last writer of P_i */
    for (int i = 0; i < k && zero && s == SW_OK; i++) {
        int c = sw_ring_owned_chunk(i, k);
        s = add_update(L, op, slot, L->members[i], G(i), last[i], &chunks[c], &last[i]);
    }
    sw_phase gather_phase = zero ? SW_PHASE_UPDATE : SW_PHASE_SYNC;
    /* allgather: in round r member i sends chunk (i + 1 - r) mod k, the one it holds summed */
    for (int r = 0; r < k - 1 && s == SW_OK; r++) {
        for (int i = 0; i < k && s == SW_OK; i++) {
            int j = (i + 1) % k, c = ((i + 1 - r) % k + k) % k;
            int32_t from = r == 0 ? GATHERED(i) : prev[i];
            int32_t deps[2] = {r == 0 ? last[i] : prev_task[i], r == 0 ? NONE : rs_add[j * (k - 1) + r - 1]};
            if (r == 0) {
                s = sw_tg_buffer(L->g, DEV(j), SW_BUF_RECV, op, &chunks[c], &got[j]);
            } else {
                got[j] = rs_buf[j * (k - 1) + r - 1];
            }
            if (s == SW_OK) {
                sw_task t = copy_of(L, gather_phase, DEV(j), DEV(i), op, L->members[i], NONE, &chunks[c]);
                s = add_task(L, &t, deps, 2, &from, 1, &got[j], 1, &got_task[j]);
                if (r == 0) {
                    sent[i] = got_task[j];
                }
            }
        }
        for (int j = 0; j < k && s == SW_OK; j++) {   /* into G_j (P_j), on j's device (no bytes cross) */
            int c = ((j - r) % k + k) % k;
            sw_task t = copy_of(L, gather_phase, DEV(j), DEV(j), op, L->members[j], NONE, &chunks[c]);
            int32_t deps[3] = {got_task[j], last[j], sent[j]}, into = GATHERED(j);
            s = add_task(L, &t, deps, 3, &got[j], 1, &into, 1, &last[j]);
            prev[j] = got[j];
            prev_task[j] = got_task[j];
        }
    }
    for (int i = 0; i < k && !zero && s == SW_OK; i++) {
        int32_t upd;
        s = add_update(L, op, slot, L->members[i], G(i), last[i], NULL, &upd);
    }
#undef G
#undef P
#undef DEV
#undef GATHERED
    free(scratch);
    return s;
}

/* Elements of the chunks but chunk `skip` (what one member sends in one half of a ring: the
 * reduce-scatter's member i every chunk but (i + 1) mod k, the allgather's every chunk but
 * (i + 2) mod k; what member j adds up: every chunk but its own, j), from `total`, the
 * elements of all k chunks (chunks_total): a ring of k members asks this of each, so a sum
 * over the chunks per call would make the ring O(k^2) (a 1,024-member ring: 3 M box volumes). */
static int64_t chunks_but(const sw_box *chunks, int64_t total, int k, int skip) {
    return total - sw_box_volume(&chunks[skip % k]);
}

/* Elements of the k chunks of a ring, all together. */
static int64_t chunks_total(const sw_box *chunks, int k) {
    int64_t n = 0;
    for (int c = 0; c < k; c++) {
        n += sw_box_volume(&chunks[c]);
    }
    return n;
}

/* Fused ring links (SW_RINGS_FUSED): one join of after[0 .. k) (a task per member, NONE for
 * none), then per member i a ring task on member i + 1's device reading from[i] and writing
 * recv[i + 1], carrying what link i -> i + 1 carries in `halves` halves of the ring (1: the
 * reduce-scatter, or with `gather` the allgather; 2: both), then one join of those k tasks in
 * *done.  ids: k entries of scratch. */
static sw_status fused_links(lowering *L, int op, int k, const sw_box *box, const sw_box *chunks, int halves,
                             int gather, const int32_t *from, const int32_t *recv, const int32_t *after,
                             sw_phase phase, int32_t *ids, int32_t *done) {
    int32_t dev0 = dev_of(L, op, L->members[0]), start;
    int64_t total = chunks_total(chunks, k);
    sw_task join = task_of(SW_TASK_JOIN, phase, dev0, op, L->members[0]);
    SW_TRY(add_task(L, &join, after, k, NULL, 0, NULL, 0, &start));
    for (int i = 0; i < k; i++) {
        int j = (i + 1) % k;
        sw_task t = task_of(SW_TASK_RING, phase, dev_of(L, op, L->members[j]), op, L->members[i]);
        t.src_device = dev_of(L, op, L->members[i]);
        sw_tg_set_task_box(L->g, &t, box);
        t.elements = sw_box_volume(box);
        t.slot = halves * (k - 1);   /* the chunk transfers it stands for */
        int64_t sent = 0;
        if (halves == 2 || !gather) {
            sent += chunks_but(chunks, total, k, i + 1);   /* reduce-scatter */
        }
        if (halves == 2 || gather) {
            sent += chunks_but(chunks, total, k, i + 2);   /* allgather */
        }
        t.nbytes = sent * SW_TASK_BYTES_PER_ELEMENT;
        SW_TRY(add_task(L, &t, &start, 1, &from[i], 1, &recv[j], 1, &ids[i]));
    }
    return add_task(L, &join, ids, k, NULL, 0, NULL, 0, done);
}

/* The ring all-reduce of sync_ring (below), fused: the members' links as fused_links, then on
 * each member the sum of what it received (an accumulate of every chunk but its own) and, for
 * the allgather, a local copy of the chunks it did not sum into its G (P with zero) -- the
 * chunked ring's work on that device, in two tasks.  Without zero: one fused ring of both halves,
 * then the update; with zero: the reduce-scatter, the update of the owned chunk, the allgather of
 * P.  Each member's recv buffer holds the whole box, as the chunked ring's k recv buffers do. */
static sw_status sync_ring_fused(lowering *L, int op, int slot, int k, const sw_box *chunks, int zero) {
    if (k < 2) {
        return SW_FAIL(SW_ERR_INTERNAL, "a ring of %d members", k);
    }
    int32_t *scratch = calloc(4 * (size_t)k, sizeof *scratch);
    if (!scratch) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a ring of %d members", k);
    }
    int32_t *last = scratch, *recv = last + k, *from = recv + k, *ids = from + k;
#define G(i) (L->wgrad_buf[sidx(L, op, slot, L->members[(i)])])
#define P(i) (L->in_buf[sidx(L, op, slot, L->members[(i)])])
#define DEV(i) (dev_of(L, op, L->members[(i)]))
    sw_box box = sw_buffer_box(&L->g->buffers[G(0)]);
    int64_t total = chunks_total(chunks, k);
    sw_status s = SW_OK;
    for (int i = 0; i < k && s == SW_OK; i++) {
        last[i] = L->wgrad_task[sidx(L, op, slot, L->members[i])];
        from[i] = G(i);
        s = sw_tg_buffer(L->g, DEV(i), SW_BUF_RECV, op, &box, &recv[i]);
    }
    int32_t joined = NONE;
    if (s == SW_OK) {
        s = fused_links(L, op, k, &box, chunks, zero ? 1 : 2, 0, from, recv, last, SW_PHASE_SYNC, ids, &joined);
    }
    for (int j = 0; j < k && s == SW_OK; j++) {   /* member j adds up every chunk but its own */
        sw_task t = task_of(SW_TASK_ACCUMULATE, SW_PHASE_SYNC, DEV(j), op, L->members[j]);
        sw_tg_set_task_box(L->g, &t, &box);
        t.elements = chunks_but(chunks, total, k, j);
        int32_t deps[2] = {joined, last[j]}, into = G(j);
        s = add_task(L, &t, deps, 2, &recv[j], 1, &into, 1, &last[j]);
    }
    if (zero) {   /* the owner updates its chunk; the allgather passes P */
        for (int j = 0; j < k && s == SW_OK; j++) {
            s = add_update(L, op, slot, L->members[j], G(j), last[j], &chunks[sw_ring_owned_chunk(j, k)], &last[j]);
            from[j] = P(j);
        }
        if (s == SW_OK) {
            s = fused_links(L, op, k, &box, chunks, 1, 1, from, recv, last, SW_PHASE_UPDATE, ids, &joined);
        }
    }
    sw_phase gather_phase = zero ? SW_PHASE_UPDATE : SW_PHASE_SYNC;
    for (int j = 0; j < k && s == SW_OK; j++) {   /* the gathered chunks into G_j (P_j), on j's device */
        sw_task t = copy_of(L, gather_phase, DEV(j), DEV(j), op, L->members[j], NONE, &box);
        t.elements = chunks_but(chunks, total, k, j + 1);
        int32_t deps[2] = {joined, last[j]}, into = zero ? P(j) : G(j);
        s = add_task(L, &t, deps, 2, &recv[j], 1, &into, 1, &last[j]);
    }
    for (int j = 0; j < k && !zero && s == SW_OK; j++) {
        int32_t upd;
        s = add_update(L, op, slot, L->members[j], G(j), last[j], NULL, &upd);
    }
#undef G
#undef P
#undef DEV
    free(scratch);
    return s;
}

sw_status sw_lower_sync(lowering *L, int op) {
    const sw_op *o = op_at(L, op);
    for (int slot = 0; slot < o->ninputs; slot++) {
        if (o->inputs[slot].role != SW_ROLE_WEIGHT) {
            continue;
        }
        int from = 0, r;
        start_groups(L, op, slot);
        while ((r = next_group(L, op, &from)) > 0) {
            /* ring all-reduce (or zero) where asked and the box cuts into r chunks
             * (L->piece_box, free during synchronization, holds them); otherwise, or for a group
             * of one, the parameter server (which, for r = 1, is the update alone) */
            sw_box box = sw_buffer_box(&L->g->buffers[L->wgrad_buf[sidx(L, op, slot, L->members[0])]]);
            if (sw_sync_rings(L->p->sync_model) && r > 1 && ring_chunks(&box, r, L->piece_box)) {
                int zero = L->p->sync_model == SW_SYNC_ZERO;
                SW_TRY(L->rings == SW_RINGS_FUSED ? sync_ring_fused(L, op, slot, r, L->piece_box, zero)
                                                  : sync_ring(L, op, slot, r, L->piece_box, zero));
            } else {
                SW_TRY(sync_parameter_server(L, op, slot, r));
            }
        }
    }
    return SW_OK;
}
