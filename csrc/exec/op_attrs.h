/* op_attrs.h -- what the kernels of an op need beyond its description: one typed record per
 * op kind, named in the op table's `attrs` column (csrc/ops.def).
 *
 *   record        fields (Python's attribute names, in op_attrs(graph) -> one dict per op)
 *   none          -
 *   input         id_bound: 0 for float data, else the minibatch holds integer ids below it
 *   conv2d        kernel, stride, padding, dilation (pairs), group_out_channels (0: dense), relu
 *   pool2d        kernel, stride, padding (pairs), max (else average)
 *   linear        relu
 *   concat        axis
 *   softmax_dim   dim, scale, causal
 *   layer_norm    eps (layer_norm and rms_norm)
 *   gelu          tanh (1: the tanh approximation, 0: the exact erf form)
 *   leaky_relu    negative_slope
 *   dropout       p, seed
 *   batchnorm2d   momentum, eps
 *   stochastic_depth  p, seed, row (1: a draw per sample, 0: one for the minibatch)
 *   clip          lo, hi
 *   group_norm    groups, eps
 *   rotary        base (the frequencies' base, RoPE's theta)
 *
 * A new op with attributes is a record here, its name in its ops.def row, a check in
 * op_attrs.c and a parser in csrc/py/attrs_py.c; the kernels read their own record
 * (a->conv2d.win).  sw_op_attrs_check validates a record once, when a runtime is built.
 */
#ifndef SHARDWISE_EXEC_OP_ATTRS_H
#define SHARDWISE_EXEC_OP_ATTRS_H

#include <stdint.h>  /* int8_t, int32_t, uint64_t */

#include "../core/view.h"   /* sw_window */
#include "../internal.h"   /* sw_status, SW_OP_COUNT */

/* The largest id bound of an integer input: ids are stored as floats, exact below 2^24. */
#define SW_MAX_ID_BOUND (1 << 24)

typedef struct { int32_t id_bound; } sw_input_attrs;
typedef struct { sw_window win; int8_t relu; } sw_conv2d_attrs;   /* win: kernel, stride, padding, dilation, groups */
typedef struct { sw_window win; int8_t max; } sw_pool2d_attrs;    /* win: kernel, stride, padding */
typedef struct { int8_t relu; } sw_linear_attrs;
typedef struct { int8_t axis; } sw_concat_attrs;
typedef struct { int8_t dim, causal; float scale; } sw_softmax_dim_attrs;   /* causal: mask key j > query i */
typedef struct { float eps; } sw_layer_norm_attrs;
typedef struct { float negative_slope; } sw_leaky_relu_attrs;
typedef struct { int8_t tanh; } sw_gelu_attrs;   /* 1: GELU(approximate="tanh") */
typedef struct { float p; uint64_t seed; } sw_dropout_attrs;      /* the masks: a function of seed, step, index */
/* running = (1 - momentum) * running + momentum * the minibatch's statistic */
/* eps: added to the variance, a double as the kernels add it (1e-5 exactly, not float32's 9.99999975e-06) */
typedef struct { float momentum; double eps; } sw_batchnorm2d_attrs;
/* torchvision's StochasticDepth: dropout's draws (seed, step, sample) per sample (row) or one per minibatch */
typedef struct { float p; uint64_t seed; int8_t row; } sw_stochastic_depth_attrs;
typedef struct { float lo, hi; } sw_clip_attrs;   /* y = min(max(x, lo), hi), lo <= hi */
/* groups: of C / groups consecutive channels; eps: added to the variance, a double as batchnorm2d's */
typedef struct { int32_t groups; double eps; } sw_group_norm_attrs;
typedef struct { double base; } sw_rotary_attrs;   /* frequencies base^(-2i / Dh), a double as the kernels use it */

/* The attributes of one op: its kind and the record the op table names for it. */
typedef struct {
    int8_t type;   /* sw_op_type */
    union {
        sw_input_attrs input;
        sw_conv2d_attrs conv2d;
        sw_pool2d_attrs pool2d;
        sw_linear_attrs linear;
        sw_concat_attrs concat;
        sw_softmax_dim_attrs softmax_dim;
        sw_layer_norm_attrs layer_norm;
        sw_leaky_relu_attrs leaky_relu;
        sw_gelu_attrs gelu;
        sw_dropout_attrs dropout;
        sw_batchnorm2d_attrs batchnorm2d;
        sw_stochastic_depth_attrs stochastic_depth;
        sw_clip_attrs clip;
        sw_group_norm_attrs group_norm;
        sw_rotary_attrs rotary;
    };
} sw_op_attrs;

/* The record kinds, as ops.def's `attrs` column names them. */
typedef enum {
    SW_ATTRS_none, SW_ATTRS_input, SW_ATTRS_conv2d, SW_ATTRS_pool2d, SW_ATTRS_linear, SW_ATTRS_concat,
    SW_ATTRS_softmax_dim, SW_ATTRS_layer_norm, SW_ATTRS_leaky_relu, SW_ATTRS_dropout, SW_ATTRS_batchnorm2d,
    SW_ATTRS_stochastic_depth,
    SW_ATTRS_clip, SW_ATTRS_group_norm,
    SW_ATTRS_rotary, SW_ATTRS_gelu,
    SW_ATTRS_COUNT
} sw_attrs_kind;

/* Each op kind's record (ops.def). */
extern const sw_attrs_kind sw_op_attrs_kind[SW_OP_COUNT];

/* Attributes of `type` with every field at its neutral value (a plain window, no ReLU). */
sw_op_attrs sw_op_attrs_default(int type);
/* SW_ERR_VALUE naming the op (index `op`), its kind and the attribute when `a` cannot run on
 * an output of rank out_rank: an unknown kind, a window out of range, an axis out of range,
 * eps not positive, a probability outside [0, 1), an id bound outside [0, 2^24], ... */
sw_status sw_op_attrs_check(const sw_op_attrs *a, int out_rank, int op);

/* The op's output goes through a fused ReLU (conv2d, linear). */
static inline int sw_op_attrs_relu(const sw_op_attrs *a) {
    return a->type == SW_OP_CONV2D ? a->conv2d.relu : a->type == SW_OP_LINEAR ? a->linear.relu : 0;
}

/* The negative slope of a leaky_relu; 0 for the other activations (their formula has none). */
static inline float sw_op_attrs_slope(const sw_op_attrs *a) {
    return a->type == SW_OP_LEAKY_RELU ? a->leaky_relu.negative_slope : 0.0f;
}

/* An activation's two parameters: (negative slope, 0) of a leaky_relu, (lo, hi) of a clip, else 0. */
static inline void sw_op_attrs_act_params(const sw_op_attrs *a, float *alpha, float *beta) {
    *alpha = a->type == SW_OP_CLIP ? a->clip.lo : sw_op_attrs_slope(a);
    *beta = a->type == SW_OP_CLIP ? a->clip.hi : 0.0f;
}

#endif /* SHARDWISE_EXEC_OP_ATTRS_H */
