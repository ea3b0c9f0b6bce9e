/* ops_cpu_act.c -- CPU tasks of the point-wise activation ops: sigmoid, tanh,
 * gelu, silu, leaky_relu, clip, hardsigmoid and hardswish (activation.c has the kernels and the formulas), and
 * dropout (dropout.c).
 *
 * A forward task reads the worker's region of x (its own output box: the index
 * map is the identity) and writes y; a backward_data task reads [dy] y and the
 * region of x (task_env.h) and hands the kernel y for sigmoid and tanh, x for
 * the others.  Leaky ReLU's negative slope and clip's bounds come from the op's attributes.
 */
#include "task_env.h"

/* The kernel's activation of an op; SW_ACT_COUNT for a type that is not one (gelu: its attribute picks
 * the exact form or the tanh approximation). */
static sw_activation activation_of(const sw_op_attrs *a) {
    switch (a->type) {
    case SW_OP_SIGMOID: return SW_ACT_SIGMOID;
    case SW_OP_TANH: return SW_ACT_TANH;
    case SW_OP_GELU: return a->gelu.tanh ? SW_ACT_GELU_TANH : SW_ACT_GELU;
    case SW_OP_SILU: return SW_ACT_SILU;
    case SW_OP_LEAKY_RELU: return SW_ACT_LEAKY_RELU;
    case SW_OP_CLIP: return SW_ACT_CLIP;
    case SW_OP_HARDSIGMOID: return SW_ACT_HARDSIGMOID;
    case SW_OP_HARDSWISH: return SW_ACT_HARDSWISH;
    default: return SW_ACT_COUNT;
    }
}

static sw_status activation_forward(const sw_task_env *e) {
    sw_activation f = activation_of(e->attrs);
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    float alpha, beta;
    sw_op_attrs_act_params(e->attrs, &alpha, &beta);
    return sw_activation_forward(f, alpha, beta, &x, &y);
}

static sw_status activation_backward_data(const sw_task_env *e) {
    sw_activation f = activation_of(e->attrs);
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view from, dy, dx;
    sw_env_view(e, e->writes[0], &dx);
    if (r.dy < 0) {
        sw_view_zero(&dx);
        return SW_OK;
    }
    int32_t b = sw_activation_grad_from_output(f) ? r.y : r.region[0];
    if (b < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: an activation gradient without its %s", e->id,
                       sw_activation_grad_from_output(f) ? "output" : "input region");
    }
    sw_env_view(e, b, &from);
    sw_env_view(e, r.dy, &dy);
    float alpha, beta;
    sw_op_attrs_act_params(e->attrs, &alpha, &beta);
    return sw_activation_backward(f, alpha, beta, &from, &dy, &dx);
}

const sw_cpu_op sw_cpu_sigmoid = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_tanh = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_gelu = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_silu = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_leaky_relu = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_clip = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_hardsigmoid = {activation_forward, activation_backward_data, NULL};
const sw_cpu_op sw_cpu_hardswish = {activation_forward, activation_backward_data, NULL};

/* dropout: y = x through the mask of (seed, step, element) in train mode, y = x in eval mode
 * (the step's SW_BN_RUNNING); the probability is the op's real parameter. */
static int dropout_active(const sw_task_env *e) { return e->ctx->args->bn_mode != SW_BN_RUNNING; }

static sw_status dropout_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    float p = dropout_active(e) ? e->attrs->dropout.p : 0.0f;   /* p = 0 keeps every element, unscaled */
    return sw_dropout_apply(&x, &y, e->op->shape, p, e->attrs->dropout.seed, e->ctx->args->step, "dropout forward");
}

/* dx = dy through the forward's mask and scale (a training step's backward: train mode). */
static sw_status dropout_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view dy, dx;
    sw_env_view(e, e->writes[0], &dx);
    if (r.dy < 0) {
        sw_view_zero(&dx);
        return SW_OK;
    }
    sw_env_view(e, r.dy, &dy);
    return sw_dropout_apply(&dy, &dx, e->op->shape, e->attrs->dropout.p, e->attrs->dropout.seed, e->ctx->args->step,
                            "dropout backward");
}

const sw_cpu_op sw_cpu_dropout = {dropout_forward, dropout_backward_data, NULL};
