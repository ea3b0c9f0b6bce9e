/* op_attrs.c -- the op attribute records (op_attrs.h): which record each op kind has (ops.def's
 * `attrs` column), neutral defaults, and one check per record, run once when a runtime is built
 * so that kernels trust what they read. */
#include <math.h>   /* isfinite */
#include <stdio.h>  /* snprintf */

#include "op_attrs.h"

const sw_attrs_kind sw_op_attrs_kind[SW_OP_COUNT] = {
#define SW_OP(id, name, role, attrs, cpu, cuda) [SW_OP_##id] = SW_ATTRS_##attrs,
#include "../ops.def"
};

sw_op_attrs sw_op_attrs_default(int type) {
    sw_op_attrs a = {.type = (int8_t)type};
    if (type == SW_OP_CONV2D || type == SW_OP_POOL2D) {   /* a 1x1 window of stride 1 */
        sw_window w = {.kh = 1, .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1};
        if (type == SW_OP_CONV2D) {
            a.conv2d.win = w;
        } else {
            a.pool2d.win = w;
        }
    }
    return a;
}

/* ------------------------------------------------------------------ one check per record */
typedef sw_status (*attrs_check)(const sw_op_attrs *a, int out_rank, int op, const char *kind);

static sw_status check_none(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)a, (void)out_rank, (void)op, (void)kind;
    return SW_OK;
}

static sw_status check_input(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (a->input.id_bound < 0 || a->input.id_bound > SW_MAX_ID_BOUND) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): its id bound %d is not in [0, 2^24]", op, kind,
                       (int)a->input.id_bound);
    }
    return SW_OK;
}

static sw_status check_window(const sw_window *w, int op, const char *kind) {
    if (sw_window_check(w, "window") != SW_OK) {
        char why[256];   /* the message lives in the buffer SW_FAIL writes: copy it first */
        snprintf(why, sizeof why, "%s", sw_last_error());
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): %s", op, kind, why);
    }
    return SW_OK;
}

static sw_status check_conv2d(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    return check_window(&a->conv2d.win, op, kind);
}

static sw_status check_pool2d(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    return check_window(&a->pool2d.win, op, kind);
}

static sw_status check_linear(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)a, (void)out_rank, (void)op, (void)kind;
    return SW_OK;
}

static sw_status check_concat(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    if (a->concat.axis < 0 || a->concat.axis >= out_rank) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): concat axis %d out of range for rank %d", op, kind,
                       (int)a->concat.axis, out_rank);
    }
    return SW_OK;
}

static sw_status check_softmax_dim(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    const sw_softmax_dim_attrs *s = &a->softmax_dim;
    if (s->dim < 0 || s->dim >= out_rank || !isfinite(s->scale)) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): softmax_dim's dim %d or scale %g is out of range", op, kind,
                       (int)s->dim, (double)s->scale);
    }
    return SW_OK;
}

static sw_status check_layer_norm(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!(a->layer_norm.eps > 0.0f && isfinite(a->layer_norm.eps))) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): layer_norm's eps %g is not a positive number", op, kind,
                       (double)a->layer_norm.eps);
    }
    return SW_OK;
}

static sw_status check_group_norm(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    if (out_rank != 4) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): group_norm takes (N, C, H, W), not an output of rank %d", op, kind,
                       out_rank);
    }
    if (a->group_norm.groups < 1) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): group_norm's groups %d is not positive", op, kind,
                       (int)a->group_norm.groups);
    }
    if (!(a->group_norm.eps > 0.0 && isfinite(a->group_norm.eps))) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): group_norm's eps %g is not a positive number", op, kind,
                       a->group_norm.eps);
    }
    return SW_OK;
}

static sw_status check_leaky_relu(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!isfinite(a->leaky_relu.negative_slope)) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): leaky_relu's negative slope %g is not finite", op, kind,
                       (double)a->leaky_relu.negative_slope);
    }
    return SW_OK;
}

static sw_status check_dropout(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!(a->dropout.p >= 0.0f && a->dropout.p < 1.0f)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): dropout's probability %g is not in [0, 1)", op, kind,
                       (double)a->dropout.p);
    }
    return SW_OK;
}

static sw_status check_batchnorm2d(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!(a->batchnorm2d.momentum >= 0.0f && a->batchnorm2d.momentum <= 1.0f)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): batchnorm2d's momentum %g is not in [0, 1]", op, kind,
                       (double)a->batchnorm2d.momentum);
    }
    if (!(a->batchnorm2d.eps > 0.0 && isfinite(a->batchnorm2d.eps))) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): batchnorm2d's eps %g is not a positive number", op, kind,
                       a->batchnorm2d.eps);
    }
    return SW_OK;
}

static sw_status check_clip(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!(a->clip.lo <= a->clip.hi)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): clip's bounds [%g, %g] are not lo <= hi", op, kind,
                       (double)a->clip.lo, (double)a->clip.hi);
    }
    return SW_OK;
}

static sw_status check_stochastic_depth(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (!(a->stochastic_depth.p >= 0.0f && a->stochastic_depth.p < 1.0f)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): stochastic depth's probability %g is not in [0, 1)", op, kind,
                       (double)a->stochastic_depth.p);
    }
    return SW_OK;
}

static sw_status check_rotary(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    if (out_rank < 3 || !(a->rotary.base > 1.0 && isfinite(a->rotary.base))) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): rotary needs rank >= 3 and a finite base > 1, got rank %d, base %g",
                       op, kind, out_rank, a->rotary.base);
    }
    return SW_OK;
}

static sw_status check_gelu(const sw_op_attrs *a, int out_rank, int op, const char *kind) {
    (void)out_rank;
    if (a->gelu.tanh != 0 && a->gelu.tanh != 1) {
        return SW_FAIL(SW_ERR_VALUE, "op %d (%s): gelu's tanh flag %d is not 0 or 1", op, kind, (int)a->gelu.tanh);
    }
    return SW_OK;
}

static const attrs_check CHECKS[SW_ATTRS_COUNT] = {
    [SW_ATTRS_none] = check_none, [SW_ATTRS_input] = check_input, [SW_ATTRS_conv2d] = check_conv2d,
    [SW_ATTRS_pool2d] = check_pool2d, [SW_ATTRS_linear] = check_linear, [SW_ATTRS_concat] = check_concat,
    [SW_ATTRS_softmax_dim] = check_softmax_dim, [SW_ATTRS_layer_norm] = check_layer_norm,
    [SW_ATTRS_leaky_relu] = check_leaky_relu, [SW_ATTRS_dropout] = check_dropout,
    [SW_ATTRS_batchnorm2d] = check_batchnorm2d,
    [SW_ATTRS_stochastic_depth] = check_stochastic_depth,
    [SW_ATTRS_clip] = check_clip,
    [SW_ATTRS_group_norm] = check_group_norm,
    [SW_ATTRS_rotary] = check_rotary,
    [SW_ATTRS_gelu] = check_gelu,
};

sw_status sw_op_attrs_check(const sw_op_attrs *a, int out_rank, int op) {
    if (a->type < 0 || a->type >= SW_OP_COUNT) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: unknown op type %d", op, a->type);
    }
    return CHECKS[sw_op_attrs_kind[a->type]](a, out_rank, op, sw_op_names[a->type]);
}
