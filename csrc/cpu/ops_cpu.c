/* ops_cpu.c -- the CPU kernels of every op kind, and the op table that finds them.
 *
 * One sw_cpu_op per row of ops.def: forward (forward_partial and the loss too),
 * backward_data (the partial gradient of one data input over the worker's
 * region of it) and backward_weight (the gradients of the worker's weight
 * slices).  A worker of a split reduction runs the same kernels with its part's
 * coordinates shifted down (sw_env_rebase).  A backward task with no gradient
 * flowing back writes zeros.  Shapes: conv x (N, Ci, H, W), w (Co, Ci, kh, kw);
 * linear x (N, I) or (N, T, I), w (O, I); the loss's logits (N, C) or (N, T, C).
 */
#include <stdio.h>   /* snprintf */
#include <string.h>  /* memcpy */

#include "task_env.h"

/* The outputs of a backward task when nothing flows back: zeros. */
static sw_status zero_writes(const sw_task_env *e) {
    for (int k = 0; k < e->nwrites; k++) {
        sw_view v;
        sw_env_view(e, e->writes[k], &v);
        sw_view_zero(&v);
    }
    return SW_OK;
}

/* the fused relu of a forward task, also when it runs again (a recompute) */
static int relu_here(const sw_task_env *e) {
    int kind = e->task->kind;
    return (kind == SW_TASK_FORWARD || kind == SW_TASK_RECOMPUTE) && sw_op_attrs_relu(e->attrs);
}

/* ------------------------------------------------------------------ input, parameter */
static sw_status input_none(const sw_task_env *e) {
    return SW_FAIL(SW_ERR_INTERNAL, "task %d: an input op computes nothing", e->id);
}

/* parameter: the worker's slice of the weight (a copy: the update changes the weight in place). */
static sw_status parameter_forward(const sw_task_env *e) {
    sw_view p, y;
    sw_env_view(e, e->reads[0], &p);
    sw_env_view(e, e->writes[0], &y);
    return sw_copy_box(&p, &y);
}

/* The slice's gradient is the output's, already summed over every reader. */
static sw_status parameter_backward_weight(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view dy, dw;
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dw);
    return sw_copy_box(&dy, &dw);
}

/* ------------------------------------------------------------------ conv2d, linear */
static void weights_of(const sw_task_env *e, int nread_data, sw_view *w, sw_view *b, int *has_bias) {
    sw_env_view(e, e->reads[nread_data], w);
    sw_env_rebase(e, 1, w);
    *has_bias = e->nreads > nread_data + 1;
    if (*has_bias) {
        sw_env_view(e, e->reads[nread_data + 1], b);
    }
}

static sw_status conv2d_forward(const sw_task_env *e) {
    sw_view x, w, b, y;
    int has_bias;
    sw_env_view(e, e->reads[0], &x);
    sw_env_rebase(e, 0, &x);
    weights_of(e, 1, &w, &b, &has_bias);
    sw_env_view(e, e->writes[0], &y);
    sw_window win = e->attrs->conv2d.win;
    win.relu = relu_here(e);
    return sw_conv2d_forward(&x, &w, has_bias ? &b : NULL, &y, &win);
}

/* A linear on (N, T, D) views: the leading dimensions flattened into rows (x, y: same rows). */
static sw_status linear_rows(sw_view *v, const sw_view *ref) {
    if (v->rank <= 2) {
        return SW_OK;
    }
    sw_view flat;
    SW_TRY(sw_view_rows(v, 1, ref, &flat));
    *v = flat;
    return SW_OK;
}

static sw_status linear_forward(const sw_task_env *e) {
    sw_view x, w, b, y;
    int has_bias;
    sw_env_view(e, e->reads[0], &x);
    sw_env_rebase(e, 0, &x);
    weights_of(e, 1, &w, &b, &has_bias);
    sw_env_view(e, e->writes[0], &y);
    SW_TRY(linear_rows(&x, &y));
    SW_TRY(linear_rows(&y, NULL));
    return sw_linear_forward(&x, &w, has_bias ? &b : NULL, &y, relu_here(e));
}

/* The weight (the first parameter) and dz for a conv2d / linear backward_data. */
static sw_status dx_setup(const sw_task_env *e, sw_backward_reads *r, sw_view *w, sw_view *dz, sw_view *dx) {
    sw_env_backward_reads(e, r);
    sw_env_view(e, e->writes[0], dx);
    if (r->dy < 0) {
        return SW_OK;
    }
    if (r->nparams < 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: an input gradient without the weight", e->id);
    }
    sw_env_rebase(e, e->task->slot, dx);
    sw_env_view(e, r->params[0], w);
    sw_env_rebase(e, 1, w);
    return sw_env_dz(e, r, dz);
}

/* dy and the op's output y over dy's box when the fused ReLU's gradient is still to be applied
 * and y has dy's box: the kernels then take dy through the mask as they read it (1); else 0,
 * and the task masks a copy first (sw_env_dz). */
static int relu_mask(const sw_task_env *e, const sw_backward_reads *r, sw_view *dy, sw_view *y) {
    if (r->dy < 0 || r->dy_pre || !sw_op_attrs_relu(e->attrs) || r->y < 0) {
        return 0;
    }
    sw_env_view(e, r->dy, dy);
    sw_env_view(e, r->y, y);
    return sw_view_same_box(y, dy);
}

static sw_status conv2d_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view w, dz, dx, dy, y;
    sw_env_backward_reads(e, &r);
    if (r.dy >= 0 && r.nparams >= 1 && relu_mask(e, &r, &dy, &y)) {
        sw_env_view(e, e->writes[0], &dx);
        sw_env_rebase(e, e->task->slot, &dx);
        sw_env_view(e, r.params[0], &w);
        sw_env_rebase(e, 1, &w);
        return sw_conv2d_backward_data_relu(&w, &dy, &y, &dx, &e->attrs->conv2d.win);
    }
    SW_TRY(dx_setup(e, &r, &w, &dz, &dx));
    return r.dy < 0 ? zero_writes(e) : sw_conv2d_backward_data(&w, &dz, &dx, &e->attrs->conv2d.win);
}

static sw_status linear_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view w, dz, dx;
    SW_TRY(dx_setup(e, &r, &w, &dz, &dx));
    if (r.dy < 0) {
        return zero_writes(e);
    }
    SW_TRY(linear_rows(&dx, &dz));
    SW_TRY(linear_rows(&dz, NULL));
    return sw_linear_backward_data(&w, &dz, &dx);
}

/* One weight slot's gradient over the worker's slice (the task's slot): a bias's is dz's
 * channel sums (its task reads dy alone); a weight's comes from the x region and dz, which
 * *grad computes into dw (the slot's gradient, rebased along a split reduction). */
typedef sw_status (*weight_grad_fn)(const sw_task_env *e, const sw_view *x, const sw_view *dz, sw_view *dw);

static sw_status weight_or_bias_grad(const sw_task_env *e, weight_grad_fn grad) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view dz, dw;
    sw_env_view(e, e->writes[0], &dw);
    sw_view dy, y;
    const int masked = relu_mask(e, &r, &dy, &y);   /* the fused ReLU's mask applied on the fly */
    if (e->op->bias[e->task->slot]) {   /* a linear's bias is along the last dimension, a conv's the channel */
        if (masked) {
            return sw_bias_backward_relu(&dy, &y, e->attrs->type == SW_OP_LINEAR ? dy.rank - 1 : 1, &dw);
        }
        SW_TRY(sw_env_dz(e, &r, &dz));
        return sw_bias_backward_axis(&dz, e->attrs->type == SW_OP_LINEAR ? dz.rank - 1 : 1, &dw);
    }
    if (r.region[0] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a weight gradient without its input region", e->id);
    }
    sw_view x;
    sw_env_view(e, r.region[0], &x);
    sw_env_rebase(e, 0, &x);
    sw_env_rebase(e, e->task->slot, &dw);
    if (masked && e->attrs->type == SW_OP_CONV2D) {   /* the ReLU's mask applied as dy is read */
        return sw_conv2d_backward_weight_relu(&x, &dy, &y, &dw, NULL, &e->attrs->conv2d.win);
    }
    SW_TRY(sw_env_dz(e, &r, &dz));
    return grad(e, &x, &dz, &dw);
}

static sw_status conv2d_dw(const sw_task_env *e, const sw_view *x, const sw_view *dz, sw_view *dw) {
    return sw_conv2d_backward_weight(x, dz, dw, NULL, &e->attrs->conv2d.win);
}

static sw_status linear_dw(const sw_task_env *e, const sw_view *x, const sw_view *dz, sw_view *dw) {
    (void)e;
    sw_view xr = *x, dzr = *dz;
    SW_TRY(linear_rows(&xr, dz));
    SW_TRY(linear_rows(&dzr, NULL));
    return sw_linear_backward_weight(&xr, &dzr, dw, NULL);
}

static sw_status conv2d_backward_weight(const sw_task_env *e) {
    return weight_or_bias_grad(e, conv2d_dw);
}

static sw_status linear_backward_weight(const sw_task_env *e) {
    return weight_or_bias_grad(e, linear_dw);
}

/* ------------------------------------------------------------------ pooling, element-wise */
static sw_status pool2d_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_pool2d_forward(e->attrs->pool2d.max, &x, &y, &e->attrs->pool2d.win);
}

static sw_status pool2d_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view x, dy, dx;
    sw_env_view(e, r.region[0], &x);
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dx);
    return sw_pool2d_backward(e->attrs->pool2d.max, &x, &dy, &dx, &e->attrs->pool2d.win);
}

static sw_status relu_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_relu_forward(&x, &y);
}

static sw_status relu_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view y, dy, dx;
    sw_env_view(e, r.y, &y);
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dx);
    return sw_relu_backward(&y, &dy, &dx);
}

static sw_status add_forward(const sw_task_env *e) {
    sw_view a, b, y;
    sw_env_view(e, e->reads[0], &a);
    sw_env_view(e, e->reads[1], &b);
    sw_env_view(e, e->writes[0], &y);
    return b.rank < y.rank ? sw_add_broadcast_forward(&a, &b, &y) : sw_add_forward(&a, &b, &y);
}

/* add and concat: dx is dy over the region's part (concat: shifted back along its axis). */
static sw_status pass_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view dy, dx;
    sw_env_view(e, e->writes[0], &dx);
    if (r.dy < 0) {
        sw_view_zero(&dx);
        return SW_OK;
    }
    sw_env_view(e, r.dy, &dy);
    if (dx.rank < dy.rank) {   /* add: an operand broadcast over the leading dimensions */
        return sw_sum_leading(&dy, &dx);
    }
    if (e->attrs->type == SW_OP_CONCAT) {   /* input k feeds output positions [offset, offset + size) */
        int axis = e->attrs->concat.axis;
        int64_t offset = 0;
        for (int k = 0; k < e->task->slot; k++) {
            offset += e->op->role[k] == SW_ROLE_DATA ? e->op->in_shape[k][axis] : 0;
        }
        dy.lo[axis] -= offset;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    if (dy.rank != dx.rank || sw_view_intersect(&dy, &dx, lo, hi) != sw_view_volume(&dx)) {
        sw_view_zero(&dx);   /* dy does not cover dx (or the ranks differ: sw_copy_box reports it) */
    }
    return sw_copy_box(&dy, &dx);
}

/* concat: each input's region lands at its offset along the axis. */
static sw_status concat_forward(const sw_task_env *e) {
    sw_view y;
    sw_env_view(e, e->writes[0], &y);
    int axis = e->attrs->concat.axis, next = 0;
    int64_t offset = 0;
    for (int k = 0; k < e->op->ninputs; k++) {
        int64_t size = e->op->in_shape[k][axis];
        if (offset < y.lo[axis] + y.shape[axis] && y.lo[axis] < offset + size && next < e->nreads) {
            sw_view x;
            sw_env_view(e, e->reads[next++], &x);
            x.lo[axis] += offset;
            SW_TRY(sw_copy_box(&x, &y));
        }
        offset += size;
    }
    return SW_OK;
}

/* flatten: the region (whole channels of the rows) is the output's floats in order. */
static sw_status flatten_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    if (sw_view_volume(&x) != sw_view_volume(&y)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: flatten's region and output differ in size", e->id);
    }
    memcpy(y.data, x.data, sizeof(float) * (size_t)sw_view_volume(&y));
    return SW_OK;
}

static sw_status flatten_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view dy, dx;
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dx);
    if (sw_view_volume(&dy) != sw_view_volume(&dx)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: flatten's gradient and region differ in size", e->id);
    }
    memcpy(dx.data, dy.data, sizeof(float) * (size_t)sw_view_volume(&dx));
    return SW_OK;
}

/* ------------------------------------------------------------------ softmax + cross-entropy (the loss) */
/* The loss's logits are (N, C) or (N, T.., C): the kernels see one (rows, C) slab per index
 * of the dimensions before the rows (R = the second-to-last), the labels of the slab's rows
 * starting at their row-major position among the loss's N*T.. labels.  The mean is over
 * every label: each row's -log p is divided by the rows per sample here, the executor
 * divides the step's sum by N. */
typedef struct {
    int rank;
    int64_t outer[SW_MAX_RANK];   /* the current index of dimensions 0 .. rank-3 */
} loss_slabs;

/* v's slab at s's current outer index, as a 2-D (R, C) view at global row coordinates. */
static void slab_of(const sw_view *v, const loss_slabs *s, sw_view *out) {
    int64_t idx[SW_MAX_RANK];
    for (int d = 0; d < s->rank - 2; d++) {
        idx[d] = s->outer[d];
    }
    idx[s->rank - 2] = v->lo[s->rank - 2];
    idx[s->rank - 1] = v->lo[s->rank - 1];
    out->data = v->data + sw_view_offset(v, idx);
    out->rank = 2;
    for (int d = 0; d < 2; d++) {
        out->lo[d] = v->lo[s->rank - 2 + d];
        out->shape[d] = v->shape[s->rank - 2 + d];
    }
}

/* The labels of the slab's rows from row `row0`: the row-major label index of (outer.., row0). */
static const int32_t *slab_labels(const sw_task_env *e, const loss_slabs *s, int64_t row0) {
    int64_t at = 0;
    for (int d = 0; d < s->rank - 2; d++) {
        at = at * e->op->shape[d] + s->outer[d];
    }
    return e->ctx->args->labels + at * e->op->shape[s->rank - 2] + row0;
}

static int next_slab(const sw_view *box, loss_slabs *s) {
    for (int d = s->rank - 3; d >= 0; d--) {
        if (++s->outer[d] < sw_view_hi(box, d)) {
            return 1;
        }
        s->outer[d] = box->lo[d];
    }
    return 0;
}

static void first_slab(const sw_view *box, loss_slabs *s) {
    s->rank = box->rank;
    for (int d = 0; d < box->rank - 2; d++) {
        s->outer[d] = box->lo[d];
    }
}

/* Rows of the loss per sample (T.. of (N, T.., C)) and all its rows (N T..). */
static int64_t loss_rows(const sw_task_env *e, int from) {
    int64_t rows = 1;
    for (int d = from; d < e->op->out_rank - 1; d++) {
        rows *= e->op->shape[d];
    }
    return rows;
}

static sw_status softmax_forward(const sw_task_env *e) {
    sw_view x, p, xs, ps;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &p);
    if (x.rank != p.rank || p.rank < 2) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: the loss's logits and output differ in rank", e->id);
    }
    loss_slabs s;
    double sum = 0.0;
    first_slab(&p, &s);
    if (sw_view_volume(&p) > 0) {
        do {
            slab_of(&x, &s, &xs);
            slab_of(&p, &s, &ps);
            SW_TRY(sw_softmax_xent_forward(&xs, slab_labels(e, &s, xs.lo[0]), &ps, &sum));
        } while (next_slab(&p, &s));
    }
    double *sums = e->ctx->loss_sum ? e->ctx->loss_sum : sw_runtime_loss_sums(e->rt);   /* the iteration's (pipeline.c) */
    sums[e->id] += sum / (double)loss_rows(e, 1);
    return SW_OK;
}

/* (p - onehot) / rows over p's box, into `out` (p's box). */
static sw_status loss_grad(const sw_task_env *e, const sw_view *p, sw_view *out) {
    loss_slabs s;
    sw_view ps, os;
    first_slab(p, &s);
    if (sw_view_volume(p) == 0) {
        return SW_OK;
    }
    do {
        slab_of(p, &s, &ps);
        slab_of(out, &s, &os);
        SW_TRY(sw_softmax_xent_backward(&ps, slab_labels(e, &s, ps.lo[0]), loss_rows(e, 0), &os));
    } while (next_slab(p, &s));
    return SW_OK;
}

/* dx over the worker's classes of its rows; zero elsewhere in its region. */
static sw_status softmax_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view p, dx, part;
    sw_env_view(e, r.y, &p);
    sw_env_view(e, e->writes[0], &dx);
    if (sw_box32_equal(&sw_env_buffer(e, r.y)->box, &sw_env_buffer(e, e->writes[0])->box)) {
        return loss_grad(e, &p, &dx);
    }
    sw_status s = SW_OK;
    part = p;
    part.data = sw_env_scratch(e, sizeof(float) * (size_t)sw_view_volume(&p), &s);
    SW_TRY(s);
    SW_TRY(loss_grad(e, &p, &part));
    sw_view_zero(&dx);
    return sw_copy_box(&part, &dx);
}

/* ------------------------------------------------------------------ batchnorm */
/* dx = gamma * invstd * (dy - sum dy / M - xhat * sum(dy xhat) / M) with the reduced sums. */
static sw_status batchnorm_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    if (r.stats_x < 0 || r.stats_dy < 0 || r.nparams < 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm input gradient without its statistics", e->id);
    }
    const sw_box32 *sb = &sw_env_buffer(e, r.stats_x)->box;
    int64_t c = sb->hi[1] - sb->lo[1], m = e->op->shape[0] * e->op->shape[2] * e->op->shape[3];
    sw_status s = SW_OK;
    float *mean = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16), &s);
    SW_TRY(s);
    sw_bn_moments(sw_env_ptr(e, r.stats_x), c, m, e->attrs->batchnorm2d.eps, mean, mean + c);
    sw_view x, dy, dx;
    sw_env_view(e, r.region[0], &x);
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dx);
    return sw_bn_backward_apply(&x, &dy, mean, mean + c, sw_env_ptr(e, r.params[0]),
                                sw_env_ptr(e, r.stats_dy), m, &dx);
}

/* dgamma (the weight slot: the worker's own sums of dy * xhat) or dbeta (the bias slot:
 * dy's channel sums) of the worker's channels. */
static sw_status batchnorm_backward_weight(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    if (r.dy < 0) {
        return zero_writes(e);
    }
    sw_view dy, dparam;
    sw_env_view(e, r.dy, &dy);
    sw_env_view(e, e->writes[0], &dparam);
    if (e->op->bias[e->task->slot]) {
        return sw_bias_backward(&dy, &dparam);
    }
    if (r.stats_x < 0 || r.region[0] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a batchnorm weight gradient without x or its statistics", e->id);
    }
    const sw_box32 *sb = &sw_env_buffer(e, r.stats_x)->box;
    int64_t c = sb->hi[1] - sb->lo[1], m = e->op->shape[0] * e->op->shape[2] * e->op->shape[3];
    sw_status s = SW_OK;
    char *scratch = sw_env_scratch(e, sizeof(float) * (size_t)(2 * c + 16) + sizeof(double) * (size_t)(2 * c), &s);
    SW_TRY(s);
    double *sums = (double *)scratch;
    float *mean = (float *)(scratch + sizeof(double) * (size_t)(2 * c));
    sw_bn_moments(sw_env_ptr(e, r.stats_x), c, m, e->attrs->batchnorm2d.eps, mean, mean + c);
    sw_view x;
    sw_env_view(e, r.region[0], &x);
    SW_TRY(sw_bn_backward_sums(&x, &dy, mean, mean + c, sums));
    for (int64_t k = 0; k < c; k++) {
        dparam.data[k] = (float)sums[c + k];
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ the op table */
#define SW_OP(id, name, role, attrs, cpu, cuda) extern const sw_cpu_op cpu;
#include "../ops.def"

const sw_cpu_op sw_cpu_no_kernels = {NULL, NULL, NULL};
const sw_cpu_op sw_cpu_input = {input_none, NULL, NULL};
const sw_cpu_op sw_cpu_conv2d = {conv2d_forward, conv2d_backward_data, conv2d_backward_weight};
const sw_cpu_op sw_cpu_pool2d = {pool2d_forward, pool2d_backward_data, NULL};
const sw_cpu_op sw_cpu_relu = {relu_forward, relu_backward_data, NULL};
const sw_cpu_op sw_cpu_add = {add_forward, pass_backward_data, NULL};
const sw_cpu_op sw_cpu_batchnorm2d = {NULL, batchnorm_backward_data, batchnorm_backward_weight};
const sw_cpu_op sw_cpu_concat = {concat_forward, pass_backward_data, NULL};
const sw_cpu_op sw_cpu_flatten = {flatten_forward, flatten_backward_data, NULL};
const sw_cpu_op sw_cpu_linear = {linear_forward, linear_backward_data, linear_backward_weight};
const sw_cpu_op sw_cpu_softmax = {softmax_forward, softmax_backward_data, NULL};
const sw_cpu_op sw_cpu_parameter = {parameter_forward, NULL, parameter_backward_weight};
/* the LSTM ops: ops_cpu_rnn.c; matmul and the sequence-model ops: ops_cpu_seq.c */

const sw_cpu_op *const sw_cpu_ops[] = {
#define SW_OP(id, name, role, attrs, cpu, cuda) [SW_OP_##id] = &cpu,
#include "../ops.def"
};
_Static_assert(sizeof sw_cpu_ops / sizeof sw_cpu_ops[0] == SW_OP_COUNT, "one CPU kernel set per op kind");

int sw_cpu_has_kernels(int type) { return type >= 0 && type < SW_OP_COUNT && sw_cpu_ops[type] != &sw_cpu_no_kernels; }

int sw_cpu_supports_op(int kind, const sw_op_attrs *attrs, int out_rank, char *why, size_t n) {
    (void)attrs, (void)out_rank;
    if (sw_cpu_has_kernels(kind)) {
        return 1;
    }
    snprintf(why, n, "has no kernels for op kind '%s'", kind >= 0 && kind < SW_OP_COUNT ? sw_op_names[kind] : "?");
    return 0;
}
