/* tasks.c -- one task of the graph on the CPU: the kinds that do not depend on the op,
 * and the dispatch of forward and backward tasks to the op table (ops_cpu.c) and of
 * update tasks to the optimizers (optim.c).
 *
 * Every buffer is a view into its device's arena (task_env.h); nothing here
 * allocates but the stream's grow-only scratch.  Batchnorm statistics are
 * double-precision sums (2, C): row 0 sums of x (or dy), row 1 sums of x^2 (or
 * dy * xhat).
 */
#define _POSIX_C_SOURCE 200809L  /* posix_memalign */

#include <math.h>    /* sqrt */
#include <stdlib.h>  /* posix_memalign, free */
#include <string.h>  /* memcpy, memset */

#include "task_env.h"

#define BN_EPS 1e-5   /* as python/shardwise/reference/__init__.py and PyTorch's default */

/* ------------------------------------------------------------------ scratch
 * The stream's grow-only workspace lives with the tasks that borrow it, so that tasks.c does not
 * call back into backend_cpu.c (which runs tasks.c's sw_cpu_run_task): the backend owns a
 * worker's sw_scratch and frees its data, the tasks grow it. */
void *sw_scratch_get(sw_scratch *s, size_t bytes) {
    if (bytes > s->bytes) {
        size_t want = bytes + bytes / 2 + 64;
        void *p = NULL;
        if (posix_memalign(&p, 64, want) != 0) {
            return NULL;
        }
        free(s->data);
        s->data = p;
        s->bytes = want;
    }
    return s->data;
}

/* ------------------------------------------------------------------ environment */
void sw_env_view(const sw_task_env *e, int32_t b, sw_view *v) { sw_rt_view(e->rt, b, v); }

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

void *sw_env_scratch(const sw_task_env *e, size_t bytes, sw_status *s) {
    void *p = sw_scratch_get(e->ctx->scratch, bytes);
    if (!p) {
        *s = SW_FAIL(SW_ERR_NOMEM, "out of memory for %zu bytes of scratch", bytes);
    }
    return p;
}

void sw_view_zero(sw_view *v) { memset(v->data, 0, sizeof(float) * (size_t)sw_view_volume(v)); }

void sw_bn_moments(const double *sums, int64_t channels, int64_t m, float *mean, float *invstd) {
    for (int64_t c = 0; c < channels; c++) {
        double mu = sums[c] / (double)m;
        double var = sums[channels + c] / (double)m - mu * mu;
        var = var > 0.0 ? var : 0.0;
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
    }
}

static int kind_of(const sw_task_env *e, int32_t b) { return e->rt->g.buffers[b].kind; }
static int op_of(const sw_task_env *e, int32_t b) { return e->rt->g.buffers[b].op; }

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

sw_status sw_env_dz(const sw_task_env *e, const sw_backward_reads *r, sw_view *dz) {
    sw_env_view(e, r->dy, dz);
    if (r->dy_pre || !e->attrs->relu || r->y < 0) {
        return SW_OK;
    }
    sw_status s = SW_OK;
    sw_view dy = *dz, y;
    sw_env_view(e, r->y, &y);
    dz->data = sw_env_scratch(e, sizeof(float) * (size_t)sw_view_volume(&dy), &s);
    return s == SW_OK ? sw_relu_backward(&y, &dy, dz) : s;
}

/* ------------------------------------------------------------------ moving data */
static sw_status run_copy(const sw_task_env *e) {
    int32_t src = e->reads[0], dst = e->writes[0];
    const sw_buffer *bs = &e->rt->g.buffers[src], *bd = &e->rt->g.buffers[dst];
    if (bs->kind == SW_BUF_STATS || bd->kind == SW_BUF_STATS) {   /* statistics: equal boxes, doubles */
        if (!sw_box_equal(&bs->box, &bd->box)) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d copies statistics between different boxes", e->id);
        }
        memcpy(sw_runtime_buffer(e->rt, dst), sw_runtime_buffer(e->rt, src), (size_t)sw_buffer_bytes(bs));
        return SW_OK;
    }
    sw_view s, d;
    sw_env_view(e, src, &s);
    sw_env_view(e, dst, &d);
    return sw_copy_box(&s, &d);   /* the intersection of the boxes: the task's box */
}

/* The first piece into a gradient copies (or zeroes the rest and adds); later ones add. */
static sw_status run_accumulate(const sw_task_env *e) {
    sw_view s, d;
    sw_env_view(e, e->reads[0], &s);
    sw_env_view(e, e->writes[0], &d);
    if (!e->rt->first_accumulate[e->id]) {
        return sw_accumulate_box(&s, &d);
    }
    if (!sw_box_equal(&e->task->box, &e->rt->g.buffers[e->writes[0]].box)) {
        sw_view_zero(&d);
    }
    return sw_copy_box(&s, &d);
}

/* load_input: the worker's box of the input op's whole minibatch (host memory). */
static sw_status run_load_input(const sw_task_env *e) {
    const float *const *inputs = e->ctx->args->inputs;
    if (!inputs || !inputs[e->task->op]) {
        return SW_FAIL(SW_ERR_VALUE, "no data for input op %d", e->task->op);
    }
    sw_view host = {(float *)inputs[e->task->op], e->op->out_rank, {0}, {0}}, y;
    for (int d = 0; d < e->op->out_rank; d++) {
        host.shape[d] = e->op->shape[d];
    }
    sw_env_view(e, e->writes[0], &y);
    return sw_copy_box(&host, &y);
}

/* reduce, stats_reduce: the first read (= the write) += the others, in order. */
static sw_status run_sum(const sw_task_env *e) {
    const sw_buffer *b = &e->rt->g.buffers[e->writes[0]];
    int64_t n = sw_box_volume(&b->box);
    if (b->kind == SW_BUF_STATS) {
        double *total = sw_runtime_buffer(e->rt, e->writes[0]);
        for (int k = 1; k < e->nreads; k++) {
            const double *x = sw_runtime_buffer(e->rt, e->reads[k]);
            for (int64_t i = 0; i < n; i++) {
                total[i] += x[i];
            }
        }
        return SW_OK;
    }
    float *total = sw_runtime_buffer(e->rt, e->writes[0]);
    for (int k = 1; k < e->nreads; k++) {
        const float *x = sw_runtime_buffer(e->rt, e->reads[k]);
        for (int64_t i = 0; i < n; i++) {
            total[i] += x[i];
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ partition-n-reduce */
/* The owner's partial output plus the others', then the activation. */
static sw_status run_sum_partials(const sw_task_env *e) {
    sw_view y, part;
    sw_env_view(e, e->writes[0], &y);
    sw_env_view(e, e->reads[0], &part);
    SW_TRY(sw_copy_box(&part, &y));
    for (int k = 1; k < e->nreads; k++) {
        sw_env_view(e, e->reads[k], &part);
        SW_TRY(sw_accumulate_box(&part, &y));
    }
    return e->attrs->relu ? sw_relu_forward(&y, &y) : SW_OK;
}

/* The block's gradient through the activation (zeros when nothing flows back). */
static sw_status run_activation_grad(const sw_task_env *e) {
    sw_view out, dy, y;
    sw_env_view(e, e->writes[0], &out);
    if (e->nreads < 2) {
        sw_view_zero(&out);
        return SW_OK;
    }
    sw_env_view(e, e->reads[0], &dy);
    if (!e->attrs->relu) {
        return sw_copy_box(&dy, &out);
    }
    sw_env_view(e, e->reads[1], &y);
    return sw_relu_backward(&y, &dy, &out);
}

/* ------------------------------------------------------------------ batchnorm */
/* bn_stats: sums of x and x^2 over the worker's box, per channel of its range. */
static sw_status run_bn_stats(const sw_task_env *e) {
    sw_view x;
    sw_env_view(e, e->reads[0], &x);
    return sw_bn_partial_sums(&x, sw_runtime_buffer(e->rt, e->writes[0]));
}

/* Mean and 1/std of the worker's channels from the reduced sums (into scratch: 2C floats). */
static sw_status bn_moments_of(const sw_task_env *e, int32_t stats, float **mean, float **invstd) {
    const sw_box *box = &e->rt->g.buffers[stats].box;
    int64_t c = box->hi[1] - box->lo[1];
    const int64_t *shape = e->op->shape;
    sw_status s = SW_OK;
    float *m = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16), &s);
    if (!m) {
        return s;
    }
    sw_bn_moments(sw_runtime_buffer(e->rt, stats), c, shape[0] * shape[2] * shape[3], m, m + c);
    *mean = m;
    *invstd = m + c;
    return SW_OK;
}

/* bn_apply reads the x region, the statistics, gamma, beta, the running statistics (2, C) and
 * writes y and (in place) the running statistics.  What it normalizes with, and whether it updates
 * the running statistics, is the step's sw_bn_mode. */
static sw_status run_bn_apply(const sw_task_env *e) {
    if (e->nreads < 5 || e->nwrites < 2 || kind_of(e, e->reads[4]) != SW_BUF_RUNNING) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: bn_apply without its running statistics", e->id);
    }
    float *mean, *invstd;
    float *running = sw_runtime_buffer(e->rt, e->reads[4]);
    const int mode = e->ctx->args->bn_mode;
    if (mode == SW_BN_RUNNING) {
        const sw_box *box = &e->rt->g.buffers[e->reads[4]].box;
        int64_t c = box->hi[1] - box->lo[1];
        sw_status s = SW_OK;
        mean = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16), &s);
        if (!mean) {
            return s;
        }
        invstd = mean + c;
        sw_bn_running_moments(running, c, BN_EPS, mean, invstd);
    } else {
        SW_TRY(bn_moments_of(e, e->reads[1], &mean, &invstd));
    }
    if (mode == SW_BN_UPDATE) {
        const sw_box *box = &e->rt->g.buffers[e->reads[1]].box;
        const int64_t *shape = e->op->shape;
        SW_TRY(sw_bn_running_update(sw_runtime_buffer(e->rt, e->reads[1]), box->hi[1] - box->lo[1],
                                    shape[0] * shape[2] * shape[3], e->attrs->alpha, running));
    }
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_bn_apply(&x, mean, invstd, sw_runtime_buffer(e->rt, e->reads[2]),
                       sw_runtime_buffer(e->rt, e->reads[3]), &y);
}

/* bn_backward_stats reads dy, the x region, the statistics of x. */
static sw_status run_bn_backward_stats(const sw_task_env *e) {
    if (e->nreads < 3) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm's gradient statistics need dy", e->id);
    }
    float *mean, *invstd;
    SW_TRY(bn_moments_of(e, e->reads[2], &mean, &invstd));
    sw_view dy, x;
    sw_env_view(e, e->reads[0], &dy);
    sw_env_view(e, e->reads[1], &x);
    return sw_bn_backward_sums(&x, &dy, mean, invstd, sw_runtime_buffer(e->rt, e->writes[0]));
}

/* ------------------------------------------------------------------ dispatch */
static sw_status by_op(const sw_task_env *e, sw_task_fn fn, const char *what) {
    if (!fn) {
        return SW_FAIL(SW_ERR_INTERNAL, "op kind %s has no CPU %s kernel (task %d)", sw_op_names[e->attrs->type],
                       what, e->id);
    }
    return fn(e);
}

sw_status sw_cpu_run_task(const sw_task_ctx *ctx, int32_t t) {
    const sw_runtime *rt = ctx->rt;
    sw_task_env e = {ctx, rt, t, &rt->g.tasks[t], NULL, NULL, 0, 0, rt->g.tasks[t].op, &rt->ops[rt->g.tasks[t].op],
                     &rt->attrs[rt->g.tasks[t].op]};
    e.nreads = sw_tg_reads(&rt->g, t, &e.reads);
    e.nwrites = sw_tg_writes(&rt->g, t, &e.writes);
    const sw_cpu_op *kernels = sw_cpu_ops[e.attrs->type];
    switch ((sw_task_kind)e.task->kind) {
    case SW_TASK_JOIN:
        return SW_OK;
    case SW_TASK_LOAD_INPUT:
        return run_load_input(&e);
    case SW_TASK_COPY:
        return run_copy(&e);
    case SW_TASK_ACCUMULATE:
        return run_accumulate(&e);
    case SW_TASK_REDUCE:
    case SW_TASK_STATS_REDUCE:
        return run_sum(&e);
    case SW_TASK_UPDATE:
        return sw_cpu_update(&e);   /* optim.c */
    case SW_TASK_SUM_PARTIALS:
        return run_sum_partials(&e);
    case SW_TASK_ACTIVATION_GRAD:
        return run_activation_grad(&e);
    case SW_TASK_SWAP_OUT:   /* device arena <-> host region: the same box, one memcpy (swap.c) */
    case SW_TASK_SWAP_IN:
        memcpy(rt->ptr[e.writes[0]], rt->ptr[e.reads[0]], (size_t)sw_buffer_bytes(&rt->g.buffers[e.reads[0]]));
        return SW_OK;
    case SW_TASK_ZERO_GRAD: {
        sw_view v;
        sw_env_view(&e, e.writes[0], &v);
        sw_view_zero(&v);
        return SW_OK;
    }
    case SW_TASK_BN_STATS:
        return run_bn_stats(&e);
    case SW_TASK_BN_APPLY:
        return run_bn_apply(&e);
    case SW_TASK_BN_BACKWARD_STATS:
        return run_bn_backward_stats(&e);
    case SW_TASK_FORWARD:
    case SW_TASK_FORWARD_PARTIAL:
    case SW_TASK_LOSS:
        return by_op(&e, kernels->forward, "forward");
    case SW_TASK_BACKWARD_DATA:
        return by_op(&e, kernels->backward_data, "input-gradient");
    case SW_TASK_BACKWARD_WEIGHT:
        return by_op(&e, kernels->backward_weight, "weight-gradient");
    case SW_TASK_NKINDS:
        break;
    }
    return SW_FAIL(SW_ERR_INTERNAL, "task %d has unknown kind %d", t, e.task->kind);
}
