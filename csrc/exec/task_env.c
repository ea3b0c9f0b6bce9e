/* task_env.c -- a task's environment and the one dispatch over task kinds (task_env.h), shared
 * by every backend: the CPU backend calls it directly, the CUDA backend through the table the
 * core lends it (backend_ext.h). */
#include "task_env.h"

void sw_task_env_init(sw_task_env *e, const sw_task_ctx *ctx, int32_t t) {
    const sw_runtime *rt = ctx->rt;
    const sw_task *task = sw_runtime_task(rt, t);
    *e = (sw_task_env){ctx, rt, t, task, NULL, NULL, 0, 0, task->op, sw_runtime_op(rt, task->op),
                       sw_runtime_attrs(rt, task->op)};
    e->nreads = sw_runtime_task_reads(rt, t, &e->reads);
    e->nwrites = sw_runtime_task_writes(rt, t, &e->writes);
}

void sw_env_view(const sw_task_env *e, int32_t b, sw_view *v) { sw_rt_view(e->rt, b, v); }

const sw_buffer *sw_env_buffer(const sw_task_env *e, int32_t b) { return sw_runtime_buffer_info(e->rt, b); }

const sw_box32 *sw_env_task_box(const sw_task_env *e) { return sw_runtime_task_box(e->rt, e->id); }

void *sw_env_ptr(const sw_task_env *e, int32_t b) { return sw_runtime_buffer(e->rt, b); }

int sw_env_first_accumulate(const sw_task_env *e) { return sw_runtime_first_accumulate(e->rt, e->id); }

void sw_env_rebase(const sw_task_env *e, int slot, sw_view *v) {
    const sw_rt_op *o = e->op;
    if (o->rvar < 0) {
        return;
    }
    int64_t start = (int64_t)(e->task->worker % o->rdeg) * o->rpart;
    for (int d = 0; d < v->rank; d++) {
        if (o->rdims[slot] & (1u << d)) {
            v->lo[d] -= start;
        }
    }
}

int64_t sw_env_bn_count(const sw_task_env *e) { return e->op->shape[0] * e->op->shape[2] * e->op->shape[3]; }

int64_t sw_env_channels(const sw_task_env *e, int32_t b) {
    const sw_box32 *box = &sw_env_buffer(e, b)->box;
    return box->hi[1] - box->lo[1];
}

static int kind_of(const sw_task_env *e, int32_t b) { return sw_env_buffer(e, b)->kind; }
static int op_of(const sw_task_env *e, int32_t b) { return sw_env_buffer(e, b)->op; }

void sw_env_backward_reads(const sw_task_env *e, sw_backward_reads *r) {
    const sw_rt_op *o = e->op;
    int i = 0;
    r->dy = r->y = r->stats_x = r->stats_dy = -1;
    r->dy_pre = 0;
    r->nparams = 0;
    for (int k = 0; k < o->ninputs; k++) {
        r->region[k] = -1;
    }
    if (i < e->nreads && (kind_of(e, e->reads[i]) == SW_BUF_GRAD || kind_of(e, e->reads[i]) == SW_BUF_GRAD_PRE)) {
        r->dy_pre = kind_of(e, e->reads[i]) == SW_BUF_GRAD_PRE;
        r->dy = e->reads[i++];
    }
    if (i < e->nreads && kind_of(e, e->reads[i]) == SW_BUF_ACTIVATION && op_of(e, e->reads[i]) == e->op_index) {
        r->y = e->reads[i++];
    }
    /* data regions: backward_data names its own slot's first, the others follow in slot order */
    int own = e->task->kind == SW_TASK_BACKWARD_DATA ? e->task->slot : -1;
    if (own >= 0 && i < e->nreads) {
        r->region[own] = e->reads[i++];
    }
    for (int k = 0; k < o->ninputs; k++) {
        if (k == own || o->role[k] != SW_ROLE_DATA || i >= e->nreads) {
            continue;
        }
        int kind = kind_of(e, e->reads[i]);
        if ((kind == SW_BUF_REGION || kind == SW_BUF_ACTIVATION) && op_of(e, e->reads[i]) == o->producer[k]) {
            r->region[k] = e->reads[i++];
        }
    }
    while (i < e->nreads && kind_of(e, e->reads[i]) == SW_BUF_PARAM) {
        r->params[r->nparams++] = e->reads[i++];
    }
    if (i < e->nreads && kind_of(e, e->reads[i]) == SW_BUF_STATS) {
        r->stats_x = e->reads[i++];
    }
    if (i < e->nreads && kind_of(e, e->reads[i]) == SW_BUF_STATS) {
        r->stats_dy = e->reads[i++];
    }
}

/* ------------------------------------------------------------------ the dispatch */
/* The reads and writes the table in task_env.h promises the runners of the op-independent kinds. */
static sw_status check_buffers(const sw_task_env *e) {
    switch ((sw_task_kind)e->task->kind) {
    case SW_TASK_COPY:
    case SW_TASK_ACCUMULATE:
    case SW_TASK_SWAP_OUT:
    case SW_TASK_SWAP_IN:
        return e->nreads >= 1 && e->nwrites >= 1
                   ? SW_OK
                   : SW_FAIL(SW_ERR_INTERNAL, "task %d moves data without a source and a destination", e->id);
    case SW_TASK_REDUCE:
    case SW_TASK_STATS_REDUCE:
    case SW_TASK_SUM_PARTIALS:
    case SW_TASK_BN_STATS:
        return e->nreads >= 1 && e->nwrites >= 1
                   ? SW_OK
                   : SW_FAIL(SW_ERR_INTERNAL, "task %d: a sum without its operands or its total", e->id);
    case SW_TASK_SEND:
        return e->nreads == 1 && e->nwrites == 0
                   ? SW_OK
                   : SW_FAIL(SW_ERR_INTERNAL, "send task %d must read one buffer and write none", e->id);
    case SW_TASK_RECV:
        return e->nreads == 0 && e->nwrites == 1
                   ? SW_OK
                   : SW_FAIL(SW_ERR_INTERNAL, "recv task %d must write one buffer and read none", e->id);
    case SW_TASK_LOAD_INPUT:
    case SW_TASK_ZERO_GRAD:
    case SW_TASK_ACTIVATION_GRAD:
        return e->nwrites >= 1 ? SW_OK : SW_FAIL(SW_ERR_INTERNAL, "task %d writes nothing", e->id);
    case SW_TASK_BN_APPLY:
        if (e->nreads < 5 || e->nwrites < 2 || kind_of(e, e->reads[4]) != SW_BUF_RUNNING) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: bn_apply without its running statistics", e->id);
        }
        return SW_OK;
    case SW_TASK_BN_BACKWARD_STATS:
        return e->nreads >= 3 && e->nwrites >= 1
                   ? SW_OK
                   : SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm's gradient statistics need dy", e->id);
    case SW_TASK_UPDATE: {   /* sw_optim_check ran at the step's start */
        int nstate = sw_optim_state_buffers(e->ctx->args->opt.kind);
        if (e->nreads != 2 + nstate || e->nwrites != 1 + nstate) {
            return SW_FAIL(SW_ERR_INTERNAL, "update task %d has %d reads for an optimizer of %d state buffers",
                           e->id, e->nreads, nstate);
        }
        return SW_OK;
    }
    default:
        return SW_OK;
    }
}

/* The runner of a task kind; NULL for join (nothing to do) and unknown kinds. */
static sw_task_runner runner_of(const sw_task_runners *r, int kind) {
    switch ((sw_task_kind)kind) {
    case SW_TASK_LOAD_INPUT: return r->load_input;
    case SW_TASK_COPY: return r->copy;
    case SW_TASK_ACCUMULATE: return r->accumulate;
    case SW_TASK_REDUCE:
    case SW_TASK_STATS_REDUCE: return r->sum;
    case SW_TASK_UPDATE: return r->update;
    case SW_TASK_SUM_PARTIALS: return r->sum_partials;
    case SW_TASK_ACTIVATION_GRAD: return r->activation_grad;
    case SW_TASK_ZERO_GRAD: return r->zero_grad;
    case SW_TASK_SWAP_OUT:
    case SW_TASK_SWAP_IN: return r->swap;
    case SW_TASK_SEND: return r->send;
    case SW_TASK_RECV: return r->recv;
    case SW_TASK_BN_STATS: return r->bn_stats;
    case SW_TASK_BN_APPLY: return r->bn_apply;
    case SW_TASK_BN_BACKWARD_STATS: return r->bn_backward_stats;
    case SW_TASK_FORWARD:
    case SW_TASK_RECOMPUTE:   /* the forward kernel again, on the same inputs (graph/recompute.c) */
    case SW_TASK_FORWARD_PARTIAL:
    case SW_TASK_LOSS: return r->forward;
    case SW_TASK_BACKWARD_DATA: return r->backward_data;
    case SW_TASK_BACKWARD_WEIGHT: return r->backward_weight;
    case SW_TASK_JOIN:
    case SW_TASK_RING:   /* a fused ring is the simulator's model: nothing runs it */
    case SW_TASK_NKINDS: break;
    }
    return NULL;
}

sw_status sw_task_dispatch(const sw_task_env *e, const sw_task_runners *r) {
    int kind = e->task->kind;
    if (kind < 0 || kind >= SW_TASK_NKINDS) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d has unknown kind %d", e->id, kind);
    }
    if (kind == SW_TASK_JOIN) {
        return SW_OK;
    }
    sw_task_runner run = runner_of(r, kind);
    if (!run) {
        return SW_FAIL(SW_ERR_VALUE, "the %s backend does not run %s tasks (task %d)", r->backend,
                       sw_task_kind_names[kind], e->id);
    }
    SW_TRY(check_buffers(e));
    return run(e);
}
