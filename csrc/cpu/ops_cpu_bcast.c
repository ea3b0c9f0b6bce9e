/* ops_cpu_bcast.c -- CPU tasks of the broadcasting ops (mul, broadcast_add, expand,
 * upsample_nearest: bcast.c), slice (indexmap.c, as select), stochastic_depth
 * (stochastic_depth.c), adaptive_avg_pool2d (adaptive_pool.c) and upsample_bilinear (bilinear.c).
 *
 * The broadcasting kernels evaluate the op description's index maps (e->op->map: slots 0
 * and 1), so a kernel reads exactly the elements the planner's regions hold.  A backward
 * task of mul reads the other operand's region after its own (task_env.h's order).
 */
#include "task_env.h"

static int bcast_kind(const sw_task_env *e) {
    int t = e->attrs->type;
    return t == SW_OP_MUL ? SW_BCAST_MUL : t == SW_OP_BROADCAST_ADD ? SW_BCAST_ADD : SW_BCAST_COPY;
}

/* ------------------------------------------------------------------ mul, broadcast_add, expand */
static sw_status bcast_forward(const sw_task_env *e) {
    sw_view a, b, y;
    int op = bcast_kind(e);
    sw_env_view(e, e->reads[0], &a);
    if (op != SW_BCAST_COPY) {
        sw_env_view(e, e->reads[1], &b);
    }
    sw_env_view(e, e->writes[0], &y);
    return sw_bcast_forward(op, &a, e->op->map[0], op != SW_BCAST_COPY ? &b : NULL, e->op->map[1], &y);
}

static sw_status bcast_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx, other;
    int none, op = bcast_kind(e), slot = e->task->slot;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    if (op == SW_BCAST_MUL) {
        if (r.region[1 - slot] < 0) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: mul's gradient without the other operand", e->id);
        }
        sw_env_view(e, r.region[1 - slot], &other);
    }
    return sw_bcast_backward(op, e->op->map[slot], op == SW_BCAST_MUL ? &other : NULL, e->op->map[1 - slot], &dy,
                             &dx);
}

/* ------------------------------------------------------------------ slice: a one-to-one index map */
static sw_status slice_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_index_map_forward(&x, e->op->map[0], &y);
}

static sw_status slice_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    return sw_index_map_backward(e->op->map[0], &dy, &dx);
}

/* ------------------------------------------------------------------ stochastic_depth */
/* the identity in eval mode (SW_BN_RUNNING), as dropout */
static sw_status stochastic_depth_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    const sw_stochastic_depth_attrs *a = &e->attrs->stochastic_depth;
    float p = e->ctx->args->bn_mode != SW_BN_RUNNING ? a->p : 0.0f;
    return sw_stochastic_depth_apply(&x, &y, p, a->row, a->seed, e->ctx->args->step, "stochastic_depth forward");
}

static sw_status stochastic_depth_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    const sw_stochastic_depth_attrs *a = &e->attrs->stochastic_depth;
    return sw_stochastic_depth_apply(&dy, &dx, a->p, a->row, a->seed, e->ctx->args->step, "stochastic_depth backward");
}

/* ------------------------------------------------------------------ adaptive_avg_pool2d */
static sw_status adaptive_pool_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    const int64_t *in = e->op->in_shape[0], *out = e->op->shape;
    return sw_adaptive_avg_pool2d_forward(&x, &y, in[2], in[3], out[2], out[3]);
}

static sw_status adaptive_pool_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    const int64_t *in = e->op->in_shape[0], *out = e->op->shape;
    return sw_adaptive_avg_pool2d_backward(&dy, &dx, in[2], in[3], out[2], out[3]);
}

/* ------------------------------------------------------------------ upsample_bilinear */
static sw_status bilinear_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    const int64_t *in = e->op->in_shape[0], *out = e->op->shape;
    return sw_upsample_bilinear_forward(&x, &y, in[2], in[3], out[2] / in[2], out[3] / in[3]);
}

static sw_status bilinear_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    const int64_t *in = e->op->in_shape[0], *out = e->op->shape;
    return sw_upsample_bilinear_backward(&dy, &dx, in[2], in[3], out[2] / in[2], out[3] / in[3]);
}

const sw_cpu_op sw_cpu_mul = {bcast_forward, bcast_backward_data, NULL};
const sw_cpu_op sw_cpu_broadcast_add = {bcast_forward, bcast_backward_data, NULL};
const sw_cpu_op sw_cpu_expand = {bcast_forward, bcast_backward_data, NULL};
const sw_cpu_op sw_cpu_slice = {slice_forward, slice_backward_data, NULL};
const sw_cpu_op sw_cpu_upsample_nearest = {bcast_forward, bcast_backward_data, NULL};
const sw_cpu_op sw_cpu_stochastic_depth = {stochastic_depth_forward, stochastic_depth_backward_data, NULL};
const sw_cpu_op sw_cpu_adaptive_avg_pool2d = {adaptive_pool_forward, adaptive_pool_backward_data, NULL};
const sw_cpu_op sw_cpu_upsample_bilinear = {bilinear_forward, bilinear_backward_data, NULL};
