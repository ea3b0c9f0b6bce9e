/* sim_durations.c -- modelled seconds of every task of a lowered plan.
 *
 * The model (tests/sim_oracle.py computes it independently, in Python):
 *
 *   compute tasks   (forward, forward_partial, loss, bn_stats, bn_apply: the forward phase;
 *                   backward_data, backward_weight, bn_backward_stats: backward; a recompute
 *                   runs in the backward phase but costs what its forward task costs, and is
 *                   not counted in the sharing: graph/recompute.c)
 *                   the worker's forward roofline time (sw_worker_time, the
 *                   per-worker term of t_c), x1 forward and x2 backward, shared
 *                   among that worker's compute tasks of the phase by their FLOPs:
 *                   each counts the worker's forward FLOPs, except a bias's gradient
 *                   (dB, sw_input.bias), which counts one per element of the output
 *                   gradient it sums; with a measured split, the op's measured
 *                   forward / backward instead, shared the same way
 *   measured rate   other kinds with a measured seconds-per-element (except
 *                   transfers): fixed + rate x elements
 *   (bytes: elements x the problem's bytes_per_element, the precision's unless given)
 *   local copy      2 x bytes over the device's memory bandwidth
 *   accumulate, reduce, stats_reduce, sum_partials   3 x bytes of all the summed operands
 *   activation_grad 3 x bytes of the block (read the gradient and the output, write)
 *   zero_grad       1 x bytes of the gradient (written)
 *   update          5 x 4 bytes per parameter element (read w, g, m; write w, m: float32; in
 *                   mixed precision the same 20: master w, m at 4 read and written, g and
 *                   the compute copy at 2)
 *   otherwise       0 (load_input, join; transfers are timed by their links)
 * The runtime runs every task in C, so nothing comes on top of a task's time (a
 * profile's tasks are timed by the runtime's own clock, around the whole task).
 */
#include <math.h>    /* isnan */
#include <stdlib.h>  /* malloc, calloc, free */

#include "internal.h"

static int is_compute(int kind) {
    return kind == SW_TASK_FORWARD || kind == SW_TASK_RECOMPUTE || kind == SW_TASK_LOSS ||
           kind == SW_TASK_BACKWARD_DATA ||
           kind == SW_TASK_BACKWARD_WEIGHT || kind == SW_TASK_BN_STATS || kind == SW_TASK_BN_APPLY ||
           kind == SW_TASK_BN_BACKWARD_STATS || kind == SW_TASK_FORWARD_PARTIAL;
}

/* A compute task's share of its worker's phase, in units of the worker's forward FLOPs:
 * 1, or for a bias's gradient (a channel sum of the output gradient) its one FLOP per
 * element of that gradient over the forward's FLOPs. */
static double compute_weight(const sw_problem *p, const sw_plan *plan, const sw_task *t) {
    const sw_op *o = &p->ops[t->op];
    if (t->kind != SW_TASK_BACKWARD_WEIGHT || t->slot < 0 || t->slot >= o->ninputs || !o->inputs[t->slot].bias) {
        return 1.0;
    }
    double outputs, flops = sw_worker_flops(p, t->op, &plan->cfg[t->op], t->worker, &outputs);
    return flops > outputs ? outputs / flops : 1.0;
}

/* Seconds of a task that is neither compute nor measured. */
static double bookkeeping_time(const sw_problem *p, const sw_task_graph *g, const sw_task *t) {
    double membw = p->dev_membw[t->device], each = p->bytes_per_element;
    switch (t->kind) {
    case SW_TASK_COPY:  /* local: a memcpy reads and writes */
        return sw_is_transfer(t) ? 0.0 : 2.0 * (double)t->elements * each / membw;
    case SW_TASK_ACCUMULATE:
    case SW_TASK_REDUCE:
    case SW_TASK_SUM_PARTIALS:
    case SW_TASK_STATS_REDUCE: {  /* a piece added in (its box), or nreads operands summed */
        int64_t elements = sw_tg_task_box32(g, t)->rank > 0 ? t->elements : t->elements * t->nreads;
        return 3.0 * (double)elements * each / membw;
    }
    case SW_TASK_UPDATE:
        return (double)(5 * t->elements * SW_TASK_BYTES_PER_ELEMENT) / membw;
    case SW_TASK_ACTIVATION_GRAD:
        return 3.0 * (double)t->elements * each / membw;
    case SW_TASK_ZERO_GRAD:
        return (double)t->elements * each / membw;
    case SW_TASK_SEND:   /* packing the box into its message, unpacking it (the wire is the link's) */
    case SW_TASK_RECV:
        return 2.0 * sw_wire_bytes(p->bytes_per_element, t) / membw;
    default:
        return 0.0;
    }
}

/* Forward seconds of every worker of every op (at wbase[op] + w): each op's on some thread of the
 * problem's when there are WORKER_TIMES_THREADED workers or more (a 32-layer Llama on 1,024
 * GPUs: 857,000 of them, a tenth of its replay on one thread), else on this one. */
#define WORKER_TIMES_THREADED 65536
typedef struct {
    const sw_problem *p;
    const sw_plan *plan;
    const int32_t *wbase;
    double *fwd;
} worker_times_work;

static sw_status op_worker_times(void *ctx, int op) {
    const worker_times_work *wk = ctx;
    const sw_config *c = &wk->plan->cfg[op];
    for (int w = 0; w < c->nworkers; w++) {
        wk->fwd[wk->wbase[op] + w] = sw_worker_time(wk->p, op, c, w, wk->plan->devs[c->dev_offset + w]);
    }
    return SW_OK;
}

static void worker_times(const sw_problem *p, const sw_plan *plan, const int32_t *wbase, double *fwd) {
    worker_times_work wk = {p, plan, wbase, fwd};
    if (wbase[p->nops] >= WORKER_TIMES_THREADED && p->threads > 1) {
        (void)sw_parallel_for(p->nops, p->threads, op_worker_times, &wk);   /* (each item succeeds) */
        return;
    }
    for (int op = 0; op < p->nops; op++) {
        (void)op_worker_times(&wk, op);
    }
}

sw_status sw_task_durations(const sw_problem *p, const sw_plan *plan, const sw_task_graph *g,
                            const sw_measured *m, double *out) {
    int32_t *wbase = malloc(sizeof *wbase * ((size_t)p->nops + 1));
    if (!wbase) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    wbase[0] = 0;
    for (int op = 0; op < p->nops; op++) {
        wbase[op + 1] = wbase[op] + plan->cfg[op].nworkers;
    }
    size_t nw = (size_t)wbase[p->nops];
    double *fwd = malloc(sizeof *fwd * (nw ? nw : 1));
    double *share = calloc(2 * nw + 1, sizeof *share);   /* summed weights per (worker, forward / backward) */
    if (!fwd || !share) {
        free(wbase);
        free(fwd);
        free(share);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    worker_times(p, plan, wbase, fwd);
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        if (is_compute(t->kind) && t->kind != SW_TASK_RECOMPUTE) {   /* a recompute repeats its forward's share */
            share[2 * (wbase[t->op] + t->worker) + (t->phase != SW_PHASE_FORWARD)] += compute_weight(p, plan, t);
        }
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        if (is_compute(t->kind)) {
            int backward = t->phase != SW_PHASE_FORWARD && t->kind != SW_TASK_RECOMPUTE;
            double part = compute_weight(p, plan, t) / share[2 * (wbase[t->op] + t->worker) + backward];
            const double *split = m && m->split ? &m->split[2 * t->op] : NULL;
            if (split && !isnan(split[0])) {
                out[i] = split[backward] * part;
            } else {
                out[i] = fwd[wbase[t->op] + t->worker] * (backward ? 2.0 : 1.0) * part;
            }
        } else if (m && m->element_seconds && !isnan(m->element_seconds[t->kind]) && !sw_is_transfer(t)) {
            double fixed = m->element_fixed && !isnan(m->element_fixed[t->kind]) ? m->element_fixed[t->kind] : 0.0;
            out[i] = fixed + m->element_seconds[t->kind] * (double)t->elements;  /* measured on this machine */
        } else {
            out[i] = bookkeeping_time(p, g, t);
        }
    }
    free(wbase);
    free(fwd);
    free(share);
    return SW_OK;
}
