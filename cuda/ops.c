/* ops.c -- the forward and backward tasks of every op kind on a GPU: the CUDA column of the
 * op table (csrc/ops.def), read the way csrc/cpu/ops_cpu.c, ops_cpu_act.c and ops_cpu_rnn.c
 * read their buffers (csrc/exec/task_env.h), with the kernels of conv.c, pool.c, blas.c and
 * kernels/.  A backward task with no gradient flowing back writes zeros; a worker of a split
 * reduction sees its part's coordinates shifted down (sw_env_rebase).
 */
#include <stdio.h>  /* snprintf */

#include "cuda_backend.h"

typedef sw_status (*cu_task_fn)(const cu_task *t);
typedef struct {
    cu_task_fn forward, backward_data, backward_weight;
} cu_op;

static void view(const cu_task *t, int32_t b, sw_view *v) { sw_env_view(&t->e, b, v); }

static sw_status zero_writes(const cu_task *t) {
    for (int k = 0; k < t->e.nwrites; k++) {
        sw_view v;
        view(t, t->e.writes[k], &v);
        SW_TRY(cu_zero(t, &v));
    }
    return SW_OK;
}

/* the fused relu of a forward task, also when it runs again (a recompute) */
static int relu_here(const cu_task *t) {
    int kind = t->e.task->kind;
    return (kind == SW_TASK_FORWARD || kind == SW_TASK_RECOMPUTE) && sw_op_attrs_relu(t->e.attrs);
}

/* dy through the fused ReLU of a conv2d / linear (into scratch), or dy itself. */
static sw_status dz_of(const cu_task *t, const sw_backward_reads *r, sw_view *dz) {
    view(t, r->dy, dz);
    if (r->dy_pre || !sw_op_attrs_relu(t->e.attrs) || r->y < 0) {
        return SW_OK;
    }
    sw_status s = SW_OK;
    sw_view dy = *dz, y;
    view(t, r->y, &y);
    dz->data = cu_scratch(t, sizeof(float) * (size_t)sw_view_volume(&dy), &s);
    SW_TRY(s);
    const sw_view *src[2] = {&dy, &y};
    return cu_eltwise(t, SWK_RELU_GRAD, 0.0f, dz, src, 2);
}

/* ------------------------------------------------------------------ parameter */
static sw_status parameter_forward(const cu_task *t) {
    sw_view p, y;
    view(t, t->e.reads[0], &p);
    view(t, t->e.writes[0], &y);
    return cu_copy_box(t, &p, &y, 0);
}

static sw_status parameter_backward_weight(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    if (r.dy < 0) {
        return zero_writes(t);
    }
    sw_view dy, dw;
    view(t, r.dy, &dy);
    view(t, t->e.writes[0], &dw);
    return cu_copy_box(t, &dy, &dw, 0);
}

/* ------------------------------------------------------------------ conv2d, linear */
static void weights_of(const cu_task *t, sw_view *w, sw_view *b, int *has_bias) {
    view(t, t->e.reads[1], w);
    sw_env_rebase(&t->e, 1, w);
    *has_bias = t->e.nreads > 2;
    if (*has_bias) {
        view(t, t->e.reads[2], b);
    }
}

static sw_status conv2d_forward(const cu_task *t) {
    sw_view x, w, b, y;
    int has_bias;
    view(t, t->e.reads[0], &x);
    sw_env_rebase(&t->e, 0, &x);
    weights_of(t, &w, &b, &has_bias);
    view(t, t->e.writes[0], &y);
    return cu_conv_forward(t, &x, &w, has_bias ? &b : NULL, &y, &t->e.attrs->conv2d.win, relu_here(t));
}

static sw_status linear_forward(const cu_task *t) {
    sw_view x, w, b, y;
    int has_bias;
    view(t, t->e.reads[0], &x);
    sw_env_rebase(&t->e, 0, &x);
    weights_of(t, &w, &b, &has_bias);
    view(t, t->e.writes[0], &y);
    return cu_linear_forward(t, &x, &w, has_bias ? &b : NULL, &y, relu_here(t));
}

/* The weight and dz of a conv2d / linear backward_data; *none when no gradient flows back. */
static sw_status dx_setup(const cu_task *t, sw_view *w, sw_view *dz, sw_view *dx, int *none) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    view(t, t->e.writes[0], dx);
    *none = r.dy < 0;
    if (*none) {
        return SW_OK;
    }
    if (r.nparams < 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: an input gradient without the weight", t->e.id);
    }
    sw_env_rebase(&t->e, t->e.task->slot, dx);
    view(t, r.params[0], w);
    sw_env_rebase(&t->e, 1, w);
    return dz_of(t, &r, dz);
}

static sw_status conv2d_backward_data(const cu_task *t) {
    sw_view w, dz, dx;
    int none;
    SW_TRY(dx_setup(t, &w, &dz, &dx, &none));
    return none ? zero_writes(t) : cu_conv_backward_data(t, &w, &dz, &dx, &t->e.attrs->conv2d.win);
}

static sw_status linear_backward_data(const cu_task *t) {
    sw_view w, dz, dx;
    int none;
    SW_TRY(dx_setup(t, &w, &dz, &dx, &none));
    return none ? zero_writes(t) : cu_linear_backward_data(t, &w, &dz, &dx);
}

/* A weight slot's gradient (conv2d, linear): a bias's is dz's channel sums, a weight's comes
 * from the x region and dz. */
static sw_status weight_or_bias_grad(const cu_task *t, int conv) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    if (r.dy < 0) {
        return zero_writes(t);
    }
    sw_view dz, dw;
    SW_TRY(dz_of(t, &r, &dz));
    view(t, t->e.writes[0], &dw);
    if (t->e.op->bias[t->e.task->slot]) {
        const sw_view *src[1] = {&dz};
        swk_map m;
        float *d;
        const float *s[SWK_MAX_SRC];
        SW_TRY(cu_map_over(&dz, src, 1, &m, &d, s));
        sw_status st = SW_OK;
        double *part = cu_scratch(t, swk_bn_sums_scratch(&m), &st);
        SW_TRY(st);
        return cu_check(swk_channel_sums(&m, s[0], dw.data, part, t->st->s), "bias gradient");
    }
    if (r.region[0] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a weight gradient without its input region", t->e.id);
    }
    sw_view x;
    view(t, r.region[0], &x);
    sw_env_rebase(&t->e, 0, &x);
    sw_env_rebase(&t->e, t->e.task->slot, &dw);
    return conv ? cu_conv_backward_filter(t, &x, &dz, &dw, &t->e.attrs->conv2d.win)
                : cu_linear_backward_weight(t, &x, &dz, &dw);
}

static sw_status conv2d_backward_weight(const cu_task *t) { return weight_or_bias_grad(t, 1); }
static sw_status linear_backward_weight(const cu_task *t) { return weight_or_bias_grad(t, 0); }

/* ------------------------------------------------------------------ pooling */
static sw_status pool2d_forward(const cu_task *t) {
    sw_view x, y;
    view(t, t->e.reads[0], &x);
    view(t, t->e.writes[0], &y);
    return cu_pool_forward(t, t->e.attrs->pool2d.max, &x, &y, &t->e.attrs->pool2d.win);
}

static sw_status pool2d_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    if (r.dy < 0) {
        return zero_writes(t);
    }
    sw_view x, y, dy, dx;
    view(t, r.region[0], &x);
    view(t, r.dy, &dy);
    view(t, t->e.writes[0], &dx);
    if (r.y >= 0) {
        view(t, r.y, &y);
    }
    return cu_pool_backward(t, t->e.attrs->pool2d.max, &x, r.y >= 0 ? &y : NULL, &dy, &dx, &t->e.attrs->pool2d.win);
}

/* ------------------------------------------------------------------ element-wise */
static swk_op activation_op(const sw_op_attrs *attrs, int grad) {
    if (attrs->type == SW_OP_GELU && attrs->gelu.tanh) {
        return grad ? SWK_GELU_TANH_GRAD : SWK_GELU_TANH;
    }
    switch (attrs->type) {
    case SW_OP_SIGMOID: return grad ? SWK_SIGMOID_GRAD : SWK_SIGMOID;
    case SW_OP_TANH: return grad ? SWK_TANH_GRAD : SWK_TANH;
    case SW_OP_GELU: return grad ? SWK_GELU_GRAD : SWK_GELU;
    case SW_OP_SILU: return grad ? SWK_SILU_GRAD : SWK_SILU;
    case SW_OP_LEAKY_RELU: return grad ? SWK_LEAKY_RELU_GRAD : SWK_LEAKY_RELU;
    default: return grad ? SWK_RELU_GRAD : SWK_RELU;
    }
}

/* relu and the activations: y = f(x) over y's box */
static sw_status activation_forward(const cu_task *t) {
    sw_view x, y;
    view(t, t->e.reads[0], &x);
    view(t, t->e.writes[0], &y);
    const sw_view *src[1] = {&x};
    return cu_eltwise(t, activation_op(t->e.attrs, 0), sw_op_attrs_slope(t->e.attrs), &y, src, 1);
}

/* dx = dy * f'(.) from y (relu, sigmoid, tanh) or x (the others) */
static sw_status activation_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    sw_view from, dy, dx;
    view(t, t->e.writes[0], &dx);
    if (r.dy < 0) {
        return cu_zero(t, &dx);
    }
    int type = t->e.attrs->type;
    int from_y = type == SW_OP_RELU || type == SW_OP_SIGMOID || type == SW_OP_TANH;
    int32_t b = from_y ? r.y : r.region[0];
    if (b < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: an activation gradient without its %s", t->e.id,
                       from_y ? "output" : "input region");
    }
    view(t, b, &from);
    view(t, r.dy, &dy);
    const sw_view *src[2] = {&dy, &from};
    return cu_eltwise(t, activation_op(t->e.attrs, 1), sw_op_attrs_slope(t->e.attrs), &dx, src, 2);
}

static sw_status add_forward(const cu_task *t) {
    sw_view a, b, y;
    view(t, t->e.reads[0], &a);
    view(t, t->e.reads[1], &b);
    view(t, t->e.writes[0], &y);
    const sw_view *src[2] = {&a, &b};
    return cu_eltwise(t, SWK_ADD, 0.0f, &y, src, 2);
}

/* add and concat: dx is dy over the region's part (concat: shifted back along its axis). */
static sw_status pass_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    sw_view dy, dx;
    view(t, t->e.writes[0], &dx);
    if (r.dy < 0) {
        return cu_zero(t, &dx);
    }
    view(t, r.dy, &dy);
    if (t->e.attrs->type == SW_OP_CONCAT) {   /* input k feeds output positions [offset, offset + size) */
        int axis = t->e.attrs->concat.axis;
        int64_t offset = 0;
        for (int k = 0; k < t->e.task->slot; k++) {
            offset += t->e.op->role[k] == SW_ROLE_DATA ? t->e.op->in_shape[k][axis] : 0;
        }
        dy.lo[axis] -= offset;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    if (dy.rank != dx.rank || sw_view_intersect(&dy, &dx, lo, hi) != sw_view_volume(&dx)) {
        SW_TRY(cu_zero(t, &dx));   /* dy does not cover dx */
    }
    return cu_copy_box(t, &dy, &dx, 0);
}

static sw_status concat_forward(const cu_task *t) {
    sw_view y;
    view(t, t->e.writes[0], &y);
    int axis = t->e.attrs->concat.axis, next = 0;
    int64_t offset = 0;
    for (int k = 0; k < t->e.op->ninputs; k++) {
        int64_t size = t->e.op->in_shape[k][axis];
        if (offset < y.lo[axis] + y.shape[axis] && y.lo[axis] < offset + size && next < t->e.nreads) {
            sw_view x;
            view(t, t->e.reads[next++], &x);
            x.lo[axis] += offset;
            SW_TRY(cu_copy_box(t, &x, &y, 0));
        }
        offset += size;
    }
    return SW_OK;
}

/* flatten: the region (whole channels of the rows) is the output's floats in order. */
static sw_status flatten_copy(const cu_task *t, int32_t from, int32_t to) {
    sw_view x, y;
    view(t, from, &x);
    view(t, to, &y);
    if (sw_view_volume(&x) != sw_view_volume(&y)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: flatten's buffers differ in size", t->e.id);
    }
    return cu_check(cudaMemcpyAsync(y.data, x.data, sizeof(float) * (size_t)sw_view_volume(&y),
                                    cudaMemcpyDeviceToDevice, t->st->s), "flatten");
}

static sw_status flatten_forward(const cu_task *t) { return flatten_copy(t, t->e.reads[0], t->e.writes[0]); }

static sw_status flatten_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    return r.dy < 0 ? zero_writes(t) : flatten_copy(t, r.dy, t->e.writes[0]);
}

/* ------------------------------------------------------------------ softmax + cross-entropy */
static sw_status softmax_forward(const cu_task *t) {
    sw_view x, p;
    view(t, t->e.reads[0], &x);
    view(t, t->e.writes[0], &p);
    if (x.rank != 2 || p.rank != 2 || p.lo[0] < x.lo[0] || p.lo[0] + p.shape[0] > x.lo[0] + x.shape[0] ||
        x.lo[1] != 0 || x.shape[1] != t->e.op->shape[1]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: the logits' view must hold whole rows of p's samples", t->e.id);
    }
    sw_status s = SW_OK;
    double *rows = cu_scratch(t, sizeof(double) * (size_t)(p.shape[0] + 1), &s);
    SW_TRY(s);
    const float *xr = x.data + (p.lo[0] - x.lo[0]) * x.shape[1];
    return cu_check(swk_softmax_xent(xr, x.shape[1], p.shape[0], x.shape[1], p.lo[1], p.shape[1], p.data, p.shape[1],
                                     t->be->labels + p.lo[0], rows, &t->be->loss[t->e.id], t->st->s),
                    "softmax");
}

/* dx over the worker's classes of its rows; zero elsewhere in its region. */
static sw_status softmax_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    sw_view p, dx;
    view(t, r.y, &p);
    view(t, t->e.writes[0], &dx);
    if (dx.rank != 2 || p.lo[0] < dx.lo[0] || p.lo[1] < dx.lo[1] || p.lo[0] + p.shape[0] > dx.lo[0] + dx.shape[0] ||
        p.lo[1] + p.shape[1] > dx.lo[1] + dx.shape[1]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: the softmax gradient's region does not hold p's box", t->e.id);
    }
    if (!sw_box32_equal(&sw_env_buffer(&t->e, r.y)->box, &sw_env_buffer(&t->e, t->e.writes[0])->box)) {
        SW_TRY(cu_zero(t, &dx));
    }
    float *d = dx.data + (p.lo[0] - dx.lo[0]) * dx.shape[1] + (p.lo[1] - dx.lo[1]);
    return cu_check(swk_softmax_xent_grad(p.data, p.shape[1], p.shape[0], p.lo[1], p.shape[1], t->be->labels + p.lo[0],
                                          t->e.op->shape[0], d, dx.shape[1], t->st->s), "softmax gradient");
}

/* ------------------------------------------------------------------ batchnorm */
/* dx = gamma invstd (dy - sum dy / M - xhat sum(dy xhat) / M) with the reduced sums. */
static sw_status batchnorm_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    if (r.dy < 0) {
        return zero_writes(t);
    }
    if (r.stats_x < 0 || r.stats_dy < 0 || r.nparams < 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm input gradient without its statistics", t->e.id);
    }
    const sw_box32 *sb = &sw_env_buffer(&t->e, r.stats_x)->box;
    int64_t c = sb->hi[1] - sb->lo[1], m = t->e.op->shape[0] * t->e.op->shape[2] * t->e.op->shape[3];
    sw_status s = SW_OK;
    float *mean = cu_scratch(t, sizeof(float) * (size_t)(2 * c + 16), &s);
    SW_TRY(s);
    CU_TRY(swk_bn_moments(sw_env_ptr(&t->e, r.stats_x), c, m, t->e.attrs->batchnorm2d.eps, mean, mean + c, t->st->s));
    sw_view x, dy, dx;
    view(t, r.region[0], &x);
    view(t, r.dy, &dy);
    view(t, t->e.writes[0], &dx);
    const sw_view *src[2] = {&x, &dy};
    swk_map mp;
    float *d;
    const float *sp[SWK_MAX_SRC];
    SW_TRY(cu_map_over(&dx, src, 2, &mp, &d, sp));
    return cu_check(swk_bn_backward_apply(&mp, sp[0], sp[1], mean, mean + c, sw_env_ptr(&t->e, r.params[0]),
                                          sw_env_ptr(&t->e, r.stats_dy), m, d, t->st->s), "batch-norm backward");
}

/* dgamma (the worker's own sums of dy xhat) or dbeta (dy's channel sums) of its channels. */
static sw_status batchnorm_backward_weight(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    if (r.dy < 0) {
        return zero_writes(t);
    }
    sw_view dy, dparam;
    view(t, r.dy, &dy);
    view(t, t->e.writes[0], &dparam);
    swk_map mp;
    float *d;
    const float *sp[SWK_MAX_SRC];
    if (t->e.op->bias[t->e.task->slot]) {
        const sw_view *src[1] = {&dy};
        SW_TRY(cu_map_over(&dy, src, 1, &mp, &d, sp));
        sw_status st = SW_OK;
        double *part = cu_scratch(t, swk_bn_sums_scratch(&mp), &st);
        SW_TRY(st);
        return cu_check(swk_channel_sums(&mp, sp[0], dparam.data, part, t->st->s), "dbeta");
    }
    if (r.stats_x < 0 || r.region[0] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm weight gradient without x or its statistics", t->e.id);
    }
    const sw_box32 *sb = &sw_env_buffer(&t->e, r.stats_x)->box;
    int64_t c = sb->hi[1] - sb->lo[1], m = t->e.op->shape[0] * t->e.op->shape[2] * t->e.op->shape[3];
    sw_status s = SW_OK;
    double *sums = cu_scratch(t, sizeof(double) * (size_t)(2 * c), &s);
    float *mean = s == SW_OK ? cu_scratch(t, sizeof(float) * (size_t)(2 * c + 16), &s) : NULL;
    SW_TRY(s);
    CU_TRY(swk_bn_moments(sw_env_ptr(&t->e, r.stats_x), c, m, t->e.attrs->batchnorm2d.eps, mean, mean + c, t->st->s));
    sw_view x;
    view(t, r.region[0], &x);
    const sw_view *src[2] = {&x, &dy};
    SW_TRY(cu_map_over(&dy, src, 2, &mp, &d, sp));
    double *part = cu_scratch(t, swk_bn_sums_scratch(&mp), &s);
    SW_TRY(s);
    CU_TRY(swk_bn_backward_sums(&mp, sp[0], sp[1], mean, mean + c, sums, part, t->st->s));
    return cu_check(swk_doubles_to_floats(sums + c, c, dparam.data, t->st->s), "dgamma");
}

/* ------------------------------------------------------------------ matmul, LSTM */
/* An operand is transposed when its index map swaps the last two dimensions (ops.py). */
static void transposes(const cu_task *t, int *ta, int *tb) {
    int r = t->e.op->out_rank;
    *ta = t->e.op->map[0][r - 2].coef[r] != 0;
    *tb = t->e.op->map[1][r - 1].coef[r] != 0;
}

static sw_status matmul_forward(const cu_task *t) {
    sw_view a, b, y;
    int ta, tb;
    transposes(t, &ta, &tb);
    view(t, t->e.reads[0], &a);
    view(t, t->e.reads[1], &b);
    sw_env_rebase(&t->e, 0, &a);
    sw_env_rebase(&t->e, 1, &b);
    view(t, t->e.writes[0], &y);
    return cu_matmul_forward(t, &a, &b, ta, tb, &y);
}

static sw_status matmul_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    sw_view a, b, dy, dx;
    view(t, t->e.writes[0], &dx);
    if (r.dy < 0) {
        return cu_zero(t, &dx);
    }
    if (r.region[0] < 0 || r.region[1] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a matmul gradient needs both operands", t->e.id);
    }
    view(t, r.region[0], &a);
    view(t, r.region[1], &b);
    view(t, r.dy, &dy);
    sw_env_rebase(&t->e, 0, &a);
    sw_env_rebase(&t->e, 1, &b);
    sw_env_rebase(&t->e, t->e.task->slot, &dx);
    int ta, tb;
    transposes(t, &ta, &tb);
    return cu_matmul_backward(t, t->e.task->slot, ta, tb, &a, &b, &dy, &dx);
}

/* LSTM gates: the data regions in slot order, each covering the output's box. */
static sw_status gates(const cu_task *t, const sw_backward_reads *r, int count, sw_view *in) {
    for (int k = 0; k < count; k++) {
        int32_t b = r ? r->region[k] : t->e.reads[k];
        if (b < 0) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: an LSTM op needs all %d inputs", t->e.id, count);
        }
        view(t, b, &in[k]);
    }
    return SW_OK;
}

static sw_status lstm_forward(const cu_task *t) {
    sw_view in[4], y;
    int cell = t->e.attrs->type == SW_OP_LSTM_CELL;
    SW_TRY(gates(t, NULL, cell ? 4 : 2, in));
    view(t, t->e.writes[0], &y);
    const sw_view *src[4] = {&in[0], &in[1], &in[2], &in[3]};
    return cu_eltwise(t, cell ? SWK_LSTM_CELL : SWK_LSTM_HIDDEN, 0.0f, &y, src, cell ? 4 : 2);
}

/* the gradient of input `slot`: dc (dh) and the inputs its derivative reads (kernels.h) */
static sw_status lstm_backward_data(const cu_task *t) {
    sw_backward_reads r;
    sw_env_backward_reads(&t->e, &r);
    sw_view in[4], dy, dx;
    view(t, t->e.writes[0], &dx);
    if (r.dy < 0) {
        return cu_zero(t, &dx);
    }
    int cell = t->e.attrs->type == SW_OP_LSTM_CELL, slot = t->e.task->slot;
    SW_TRY(gates(t, &r, cell ? 4 : 2, in));
    view(t, r.dy, &dy);
    /* cell (i, f, g, c_prev): di reads i, g; df reads f, c_prev; dg reads i, g; dc_prev reads f.
     * hidden (o, c): both read o, c */
    static const swk_op cell_ops[4] = {SWK_LSTM_CELL_GRAD_I, SWK_LSTM_CELL_GRAD_F, SWK_LSTM_CELL_GRAD_G,
                                       SWK_LSTM_CELL_GRAD_C};
    static const int cell_args[4][2] = {{0, 2}, {1, 3}, {0, 2}, {1, 1}};
    if (slot < 0 || slot >= (cell ? 4 : 2)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: LSTM input slot %d", t->e.id, slot);
    }
    const sw_view *src[3] = {&dy, cell ? &in[cell_args[slot][0]] : &in[0], cell ? &in[cell_args[slot][1]] : &in[1]};
    swk_op op = cell ? cell_ops[slot] : (slot == 0 ? SWK_LSTM_HIDDEN_GRAD_O : SWK_LSTM_HIDDEN_GRAD_C);
    return cu_eltwise(t, op, 0.0f, &dx, src, 3);
}

/* ------------------------------------------------------------------ the table */
static sw_status input_none(const cu_task *t) {
    return SW_FAIL(SW_ERR_INTERNAL, "task %d: an input op computes nothing", t->e.id);
}

/* The kernel sets the op table's `cuda` column names (csrc/ops.def): a row naming a set that is
 * not defined here does not compile; cu_no_kernels marks an op kind the CUDA backend refuses
 * (cu_supports_op says so, before any GPU is touched). */
static const cu_op cu_input = {input_none, NULL, NULL};
static const cu_op cu_conv2d = {conv2d_forward, conv2d_backward_data, conv2d_backward_weight};
static const cu_op cu_pool2d = {pool2d_forward, pool2d_backward_data, NULL};
static const cu_op cu_relu = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_add = {add_forward, pass_backward_data, NULL};
static const cu_op cu_batchnorm2d = {NULL, batchnorm_backward_data, batchnorm_backward_weight};
static const cu_op cu_concat = {concat_forward, pass_backward_data, NULL};
static const cu_op cu_flatten = {flatten_forward, flatten_backward_data, NULL};
static const cu_op cu_linear = {linear_forward, linear_backward_data, linear_backward_weight};
static const cu_op cu_softmax = {softmax_forward, softmax_backward_data, NULL};
static const cu_op cu_parameter = {parameter_forward, NULL, parameter_backward_weight};
static const cu_op cu_matmul = {matmul_forward, matmul_backward_data, NULL};
static const cu_op cu_lstm_cell = {lstm_forward, lstm_backward_data, NULL};
static const cu_op cu_lstm_hidden = {lstm_forward, lstm_backward_data, NULL};
static const cu_op cu_sigmoid = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_tanh = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_gelu = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_silu = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_leaky_relu = {activation_forward, activation_backward_data, NULL};
static const cu_op cu_no_kernels = {NULL, NULL, NULL};

static const cu_op *const OPS[] = {
#define SW_OP(id, name, role, attrs, cpu, cuda) [SW_OP_##id] = &cuda,
#include "ops.def"
};
_Static_assert(sizeof OPS / sizeof OPS[0] == SW_OP_COUNT, "one CUDA kernel set per op kind (ops.def)");

int cu_has_kernels(int type) { return type >= 0 && type < SW_OP_COUNT && OPS[type] != &cu_no_kernels; }

int cu_supports_op(int kind, const sw_op_attrs *a, int out_rank, char *why, size_t n) {
    if (!cu_has_kernels(kind)) {
        snprintf(why, n, "has no kernels for op kind '%s'", kind >= 0 && kind < SW_OP_COUNT ? sw_op_names[kind] : "?");
        return 0;
    }
    if (kind == SW_OP_SOFTMAX && out_rank != 2) {
        snprintf(why, n, "takes (N, C) logits for its loss, not rank %d: sequence losses train on the CPU backend",
                 out_rank);
        return 0;
    }
    if (kind == SW_OP_CONV2D && (a->conv2d.win.group_co != 0 || a->conv2d.win.dh > 1 || a->conv2d.win.dw > 1)) {
        snprintf(why, n, "has no grouped or dilated convolution yet: such graphs train on the CPU backend");
        return 0;
    }
    return 1;
}

static sw_status by_op(const cu_task *t, cu_task_fn fn, const char *what) {
    if (!fn) {
        return SW_FAIL(SW_ERR_INTERNAL, "op kind %s has no CUDA %s kernel (task %d)", sw_op_names[t->e.attrs->type],
                       what, t->e.id);
    }
    return fn(t);
}

sw_status cu_op_forward(const cu_task *t) { return by_op(t, OPS[t->e.attrs->type]->forward, "forward"); }
sw_status cu_op_backward_data(const cu_task *t) {
    return by_op(t, OPS[t->e.attrs->type]->backward_data, "input-gradient");
}
sw_status cu_op_backward_weight(const cu_task *t) {
    return by_op(t, OPS[t->e.attrs->type]->backward_weight, "weight-gradient");
}
