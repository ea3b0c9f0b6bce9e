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
void *sw_env_scratch(const sw_task_env *e, size_t bytes, sw_status *s) {
    void *p = sw_scratch_get(e->ctx->scratch, bytes);
    if (!p) {
        *s = SW_FAIL(SW_ERR_NOMEM, "out of memory for %zu bytes of scratch", bytes);
    }
    return p;
}

void sw_view_zero(sw_view *v) { memset(v->data, 0, sizeof(float) * (size_t)sw_view_volume(v)); }

/* The output's gradient, or zeros written into every output when none flows back (*none). */
sw_status sw_env_grad_or_zeros(const sw_task_env *e, sw_backward_reads *r, sw_view *dy, int *none) {
    sw_env_backward_reads(e, r);
    *none = r->dy < 0;
    if (*none) {
        for (int k = 0; k < e->nwrites; k++) {
            sw_view v;
            sw_env_view(e, e->writes[k], &v);
            sw_view_zero(&v);
        }
        return SW_OK;
    }
    sw_env_view(e, r->dy, dy);
    return SW_OK;
}

void sw_bn_moments(const double *sums, int64_t channels, int64_t m, double eps, float *mean, float *invstd) {
    for (int64_t c = 0; c < channels; c++) {
        double mu = sums[c] / (double)m;
        double var = sums[channels + c] / (double)m - mu * mu;
        var = var > 0.0 ? var : 0.0;
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
    }
}

sw_status sw_env_dz(const sw_task_env *e, const sw_backward_reads *r, sw_view *dz) {
    sw_env_view(e, r->dy, dz);
    if (r->dy_pre || !sw_op_attrs_relu(e->attrs) || r->y < 0) {
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
    const sw_buffer *bs = sw_env_buffer(e, src), *bd = sw_env_buffer(e, dst);
    if (bs->kind == SW_BUF_STATS || bd->kind == SW_BUF_STATS) {   /* statistics: equal boxes, doubles */
        if (!sw_box32_equal(&bs->box, &bd->box)) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d copies statistics between different boxes", e->id);
        }
        memcpy(sw_env_ptr(e, dst), sw_env_ptr(e, src), (size_t)sw_buffer_bytes(bs));
        return SW_OK;
    }
    sw_view s, d;
    sw_env_view(e, src, &s);
    sw_env_view(e, dst, &d);
    return sw_copy_box(&s, &d);   /* the intersection of the boxes: the task's box */
}

/* send, recv: the task's box of a buffer packed into (unpacked from) its message's staging buffer,
 * row-major (exec/messages.h); statistics (doubles, equal boxes) as they lie. */
static sw_status move_message(const sw_task_env *e, int32_t b, int pack) {
    const sw_buffer *buf = sw_env_buffer(e, b);
    void *stage = sw_runtime_staging(e->rt, e->id, e->ctx->iteration);
    if (!stage) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d has no staging buffer on this rank", e->id);
    }
    if (buf->kind == SW_BUF_STATS) {
        if (!sw_box32_equal(&buf->box, sw_env_task_box(e))) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d moves part of a batchnorm's statistics", e->id);
        }
        size_t n = (size_t)sw_buffer_bytes(buf);
        memcpy(pack ? stage : sw_env_ptr(e, b), pack ? sw_env_ptr(e, b) : stage, n);
        return SW_OK;
    }
    const sw_box32 *box = sw_env_task_box(e);
    sw_view v, m = {stage, box->rank, {0}, {0}};
    sw_env_view(e, b, &v);
    for (int d = 0; d < m.rank; d++) {
        m.lo[d] = box->lo[d];
        m.shape[d] = box->hi[d] - box->lo[d];
    }
    return pack ? sw_copy_box(&v, &m) : sw_copy_box(&m, &v);
}

static sw_status run_send(const sw_task_env *e) {
    SW_TRY(move_message(e, e->reads[0], 1));
    return sw_runtime_send(e->rt, e->id, e->ctx->iteration);
}

static sw_status run_recv(const sw_task_env *e) { return move_message(e, e->writes[0], 0); }

/* The first piece into a gradient copies (or zeroes the rest and adds); later ones add. */
static sw_status run_accumulate(const sw_task_env *e) {
    sw_view s, d;
    sw_env_view(e, e->reads[0], &s);
    sw_env_view(e, e->writes[0], &d);
    if (!sw_env_first_accumulate(e)) {
        return sw_accumulate_box(&s, &d);
    }
    if (!sw_box32_equal(sw_env_task_box(e), &sw_env_buffer(e, e->writes[0])->box)) {
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
    const sw_buffer *b = sw_env_buffer(e, e->writes[0]);
    int64_t n = sw_box32_volume(&b->box);
    if (b->kind == SW_BUF_STATS) {
        double *total = sw_env_ptr(e, e->writes[0]);
        for (int k = 1; k < e->nreads; k++) {
            const double *x = sw_env_ptr(e, e->reads[k]);
            for (int64_t i = 0; i < n; i++) {
                total[i] += x[i];
            }
        }
        return SW_OK;
    }
    float *total = sw_env_ptr(e, e->writes[0]);
    for (int k = 1; k < e->nreads; k++) {
        const float *x = sw_env_ptr(e, e->reads[k]);
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
    return sw_op_attrs_relu(e->attrs) ? sw_relu_forward(&y, &y) : SW_OK;
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
    if (!sw_op_attrs_relu(e->attrs)) {
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
    return sw_bn_partial_sums(&x, sw_env_ptr(e, e->writes[0]));
}

/* Mean and 1/std of the worker's channels from the reduced sums (into scratch: 2C floats). */
static sw_status bn_moments_of(const sw_task_env *e, int32_t stats, float **mean, float **invstd) {
    int64_t c = sw_env_channels(e, stats);
    sw_status s = SW_OK;
    float *m = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16), &s);
    if (!m) {
        return s;
    }
    sw_bn_moments(sw_env_ptr(e, stats), c, sw_env_bn_count(e), e->attrs->batchnorm2d.eps, m, m + c);
    *mean = m;
    *invstd = m + c;
    return SW_OK;
}

/* bn_apply reads the x region, the statistics, gamma, beta, the running statistics (2, C) and
 * writes y and (in place) the running statistics.  What it normalizes with, and whether it updates
 * the running statistics, is the step's sw_bn_mode. */
static sw_status run_bn_apply(const sw_task_env *e) {
    float *mean = NULL, *invstd = NULL;
    float *running = sw_env_ptr(e, e->reads[4]);
    const int mode = e->ctx->args->bn_mode;
    if (mode == SW_BN_RUNNING) {
        int64_t c = sw_env_channels(e, e->reads[4]);
        sw_status s = SW_OK;
        mean = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16), &s);
        if (!mean) {
            return s;
        }
        invstd = mean + c;
        sw_bn_running_moments(running, c, e->attrs->batchnorm2d.eps, mean, invstd);
    } else {
        SW_TRY(bn_moments_of(e, e->reads[1], &mean, &invstd));
    }
    if (mode == SW_BN_UPDATE) {
        SW_TRY(sw_bn_running_update(sw_env_ptr(e, e->reads[1]), sw_env_channels(e, e->reads[1]), sw_env_bn_count(e),
                                    e->attrs->batchnorm2d.momentum, running));
    }
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_bn_apply(&x, mean, invstd, sw_env_ptr(e, e->reads[2]),
                       sw_env_ptr(e, e->reads[3]), &y);
}

/* bn_backward_stats reads dy, the x region, the statistics of x. */
static sw_status run_bn_backward_stats(const sw_task_env *e) {
    float *mean = NULL, *invstd = NULL;
    SW_TRY(bn_moments_of(e, e->reads[2], &mean, &invstd));
    sw_view dy, x;
    sw_env_view(e, e->reads[0], &dy);
    sw_env_view(e, e->reads[1], &x);
    return sw_bn_backward_sums(&x, &dy, mean, invstd, sw_env_ptr(e, e->writes[0]));
}

/* ------------------------------------------------------------------ dispatch */
/* swap_out, swap_in: device arena <-> host region, the same box: one memcpy (swap.c). */
static sw_status run_swap(const sw_task_env *e) {
    memcpy(sw_env_ptr(e, e->writes[0]), sw_env_ptr(e, e->reads[0]), (size_t)sw_buffer_bytes(sw_env_buffer(e, e->reads[0])));
    return SW_OK;
}

static sw_status run_zero_grad(const sw_task_env *e) {
    sw_view v;
    sw_env_view(e, e->writes[0], &v);
    sw_view_zero(&v);
    return SW_OK;
}

static sw_status by_op(const sw_task_env *e, sw_task_fn fn, const char *what) {
    if (!fn) {
        return SW_FAIL(SW_ERR_INTERNAL, "op kind %s has no CPU %s kernel (task %d)", sw_op_names[e->attrs->type],
                       what, e->id);
    }
    return fn(e);
}

static sw_status run_forward(const sw_task_env *e) { return by_op(e, sw_cpu_ops[e->attrs->type]->forward, "forward"); }

static sw_status run_backward_data(const sw_task_env *e) {
    return by_op(e, sw_cpu_ops[e->attrs->type]->backward_data, "input-gradient");
}

static sw_status run_backward_weight(const sw_task_env *e) {
    return by_op(e, sw_cpu_ops[e->attrs->type]->backward_weight, "weight-gradient");
}

static const sw_task_runners CPU_RUNNERS = {
    .backend = "cpu", .load_input = run_load_input, .copy = run_copy, .accumulate = run_accumulate, .sum = run_sum,
    .sum_partials = run_sum_partials, .activation_grad = run_activation_grad, .zero_grad = run_zero_grad,
    .swap = run_swap, .bn_stats = run_bn_stats, .bn_apply = run_bn_apply, .bn_backward_stats = run_bn_backward_stats,
    .update = sw_cpu_update, .forward = run_forward, .backward_data = run_backward_data,
    .backward_weight = run_backward_weight, .send = run_send, .recv = run_recv,
};

sw_status sw_cpu_run_task(const sw_task_ctx *ctx, int32_t t) {
    sw_task_env e;
    sw_task_env_init(&e, ctx, t);
    return sw_task_dispatch(&e, &CPU_RUNNERS);
}
