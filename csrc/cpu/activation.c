/* activation.c -- the point-wise activations beside ReLU: sigmoid, tanh, GELU
 * (the exact erf form and the tanh approximation), SiLU, leaky ReLU, clip, hard sigmoid and hard swish, forward
 * and backward, with PyTorch's definitions (torch.nn.Sigmoid, Tanh, GELU(), SiLU,
 * LeakyReLU, Hardtanh, Hardsigmoid, Hardswish; their CPU kernels' formulas and order of
 * operations, so that results are PyTorch's bits up to the last bit or two of exp and erf):
 *
 *   sigmoid     y = 1 / (1 + exp(-x))           dx = dy * y * (1 - y)
 *   tanh        y = tanh(x)                     dx = dy * (1 - y^2)
 *   gelu        y = x * Phi(x)                  dx = dy * (Phi(x) + x * phi(x))
 *   gelu_tanh   y = x (1 + t) / 2, t = tanh(u)  dx = dy * ((1 + t) / 2 + x (1 - t^2) u' / 2)
 *               u = b (x + k x^3), u' = b (1 + 3 k x^2), b = sqrt(2 / pi), k = 0.044715
 *               (GELU(approximate="tanh"), GPT-2's gelu_new; PyTorch's order of operations)
 *   silu        y = x * s(x), s = sigmoid       dx = dy * s(x) * (1 + x * (1 - s(x)))
 *   leaky_relu  y = x > 0 ? x : alpha * x       dx = x > 0 ? dy : alpha * dy
 *   clip        y = min(max(x, lo), hi)         dx = lo < x < hi ? dy : 0   (lo = alpha, hi = beta;
 *                                                    the boundary as torch.nn.Hardtanh's gradient)
 *   hardsigmoid y = min(max(x + 3, 0), 6) / 6   dx = -3 < x < 3 ? dy / 6 : 0
 *   hardswish   y = x min(max(x + 3, 0), 6) / 6 dx = x <= -3 ? 0 : x < 3 ? dy (x / 3 + 1/2) : dy
 *
 * with Phi(x) = (1 + erf(x / sqrt 2)) / 2 and phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * Sigmoid and tanh take their gradient from the output y (as ReLU does), the
 * others from the input x: a backward_data task reads both (lower.c), so no
 * op keeps more than ReLU does.  A NaN propagates; exp overflowing to infinity
 * for x << 0 gives sigmoid 0, not NaN.
 *
 * Any rank 1..SW_MAX_RANK, any boxes: as in eltwise.c, the output view is the
 * box computed, every input view covers it, and the loops run over the box's
 * contiguous runs (view.h).  The loops are branch-free and built for AVX2 and
 * the baseline (SW_CLONES); GELU's erf and exp and sigmoid's and SiLU's exp are
 * vmath.h's inline ones, so their loops vectorize (within 1.4 ulp of libm's; one exp,
 * exp(-x^2 / 2), serves erf's tail and GELU's gradient's density; PyTorch's own
 * vectorized sigmoid and SiLU use a vector exp of their own, not libm's, either);
 * tanh and the tanh form of GELU call libm per element.
 */
#include <math.h>    /* expf, tanhf */
#include <stddef.h>  /* NULL */

#include "kernels.h"  /* sw_view, sw_activation, sw_activation_* */
#include "simd.h"     /* SW_CLONES */
#include "vmath.h"    /* sw_verf_sqrt1_2, sw_vexpf, sw_vexpf_full */
#include "../core/view.h"     /* sw_view_check_elementwise_*, sw_runs, sw_view_offset */

#define INV_SQRT_2PI 0.39894228040143267794f  /* 1 / sqrt(2 pi) */
#define SQRT_2_OVER_PI 0.79788456080286535588f  /* sqrt(2 / pi): the tanh approximation's b */
#define GELU_TANH_K 0.044715f

const char *const sw_activation_names[SW_ACT_COUNT] = {
    [SW_ACT_SIGMOID] = "sigmoid", [SW_ACT_TANH] = "tanh", [SW_ACT_GELU] = "gelu",
    [SW_ACT_SILU] = "silu",       [SW_ACT_LEAKY_RELU] = "leaky_relu",
    [SW_ACT_CLIP] = "clip",       [SW_ACT_HARDSIGMOID] = "hardsigmoid", [SW_ACT_HARDSWISH] = "hardswish",
    [SW_ACT_GELU_TANH] = "gelu_tanh",
};

int sw_activation_grad_from_output(sw_activation f) { return f == SW_ACT_SIGMOID || f == SW_ACT_TANH; }

/* ------------------------------------------------------------------ forward runs: y[i] = f(x[i]) */
SW_CLONES static void sigmoid_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = 1.0f / (1.0f + sw_vexpf_full(-x[i]));
    }
}

SW_CLONES static void tanh_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = tanhf(x[i]);
    }
}

SW_CLONES static void gelu_run(const float *restrict x, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v * 0.5f * (1.0f + sw_verf_sqrt1_2(v, sw_vexpf(-0.5f * v * v)));
    }
}

SW_CLONES static void gelu_tanh_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float inner = SQRT_2_OVER_PI * (v + GELU_TANH_K * (v * v * v));
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

SW_CLONES static void silu_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = x[i] / (1.0f + sw_vexpf_full(-x[i]));
    }
}

SW_CLONES static void leaky_relu_run(const float *x, float *y, int64_t n, float alpha) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : v * alpha;   /* a select: NaN > 0 is false, NaN * alpha is NaN */
    }
}

/* The selects below pass a NaN through (every comparison with it is false), as PyTorch's. */
SW_CLONES static void clip_run(const float *x, float *y, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v < lo ? lo : (v > hi ? hi : v);
    }
}

/* min(max(x + 3, 0), 6): relu6(x + 3) */
static SW_INLINE float relu6_shifted(float v) {
    float t = v + 3.0f;
    t = t < 0.0f ? 0.0f : t;
    return t > 6.0f ? 6.0f : t;
}

SW_CLONES static void hardsigmoid_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = relu6_shifted(x[i]) / 6.0f;
    }
}

SW_CLONES static void hardswish_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = x[i] * relu6_shifted(x[i]) / 6.0f;
    }
}

/* ------------------------------------------------------------------ backward runs: dx[i] = dy[i] * f'(.)
 * `s` is the forward output y (sigmoid, tanh) or input x (the others), per sw_activation_grad_from_output. */
SW_CLONES static void sigmoid_grad_run(const float *y, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dx[i] = dy[i] * (1.0f - y[i]) * y[i];
    }
}

SW_CLONES static void tanh_grad_run(const float *y, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
}

SW_CLONES static void gelu_grad_run(const float *restrict x, const float *restrict dy, float *restrict dx,
                                    int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float e = sw_vexpf(-0.5f * v * v);   /* sqrt(2 pi) phi(v), in erf's tail too */
        const float cdf = 0.5f * (1.0f + sw_verf_sqrt1_2(v, e));
        const float pdf = INV_SQRT_2PI * e;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

SW_CLONES static void gelu_tanh_grad_run(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i], v2 = v * v;
        const float t = tanhf(SQRT_2_OVER_PI * (v + GELU_TANH_K * (v2 * v)));
        const float left = 0.5f * v, right = 1.0f + t;
        const float d_right = left * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_K * v2);
        dx[i] = dy[i] * (0.5f * right + d_right);
    }
}

SW_CLONES static void silu_grad_run(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float s = 1.0f / (1.0f + sw_vexpf_full(-v));
        dx[i] = dy[i] * s * (1.0f + v * (1.0f - s));
    }
}

SW_CLONES static void leaky_relu_grad_run(const float *x, const float *dy, float *dx, int64_t n, float alpha) {
    for (int64_t i = 0; i < n; i++) {
        const float g = dy[i];   /* loaded unconditionally: a select, not a branch (eltwise.c) */
        dx[i] = x[i] > 0.0f ? g : g * alpha;
    }
}

SW_CLONES static void clip_grad_run(const float *x, const float *dy, float *dx, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) {
        const float g = dy[i];
        dx[i] = (x[i] <= lo || x[i] >= hi) ? 0.0f : g;
    }
}

SW_CLONES static void hardsigmoid_grad_run(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = dy[i];
        dx[i] = (x[i] > -3.0f && x[i] < 3.0f) ? g * (1.0f / 6.0f) : 0.0f;
    }
}

SW_CLONES static void hardswish_grad_run(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i], g = dy[i];
        dx[i] = v <= -3.0f ? 0.0f : (v < 3.0f ? g * (v / 3.0f + 0.5f) : g);
    }
}

/* One contiguous run of either direction (dy NULL: forward, out = f(a); else out = dy * f'(a)). */
static void run(sw_activation f, float alpha, float beta, const float *a, const float *dy, float *out, int64_t n) {
    if (!dy) {
        switch (f) {
        case SW_ACT_SIGMOID: sigmoid_run(a, out, n); break;
        case SW_ACT_TANH: tanh_run(a, out, n); break;
        case SW_ACT_GELU: gelu_run(a, out, n); break;
        case SW_ACT_SILU: silu_run(a, out, n); break;
        case SW_ACT_LEAKY_RELU: leaky_relu_run(a, out, n, alpha); break;
        case SW_ACT_CLIP: clip_run(a, out, n, alpha, beta); break;
        case SW_ACT_HARDSIGMOID: hardsigmoid_run(a, out, n); break;
        case SW_ACT_HARDSWISH: hardswish_run(a, out, n); break;
        case SW_ACT_GELU_TANH: gelu_tanh_run(a, out, n); break;
        case SW_ACT_COUNT: break;
        }
        return;
    }
    switch (f) {
    case SW_ACT_SIGMOID: sigmoid_grad_run(a, dy, out, n); break;
    case SW_ACT_TANH: tanh_grad_run(a, dy, out, n); break;
    case SW_ACT_GELU: gelu_grad_run(a, dy, out, n); break;
    case SW_ACT_SILU: silu_grad_run(a, dy, out, n); break;
    case SW_ACT_LEAKY_RELU: leaky_relu_grad_run(a, dy, out, n, alpha); break;
    case SW_ACT_CLIP: clip_grad_run(a, dy, out, n, alpha, beta); break;
    case SW_ACT_HARDSIGMOID: hardsigmoid_grad_run(a, dy, out, n); break;
    case SW_ACT_HARDSWISH: hardswish_grad_run(a, dy, out, n); break;
    case SW_ACT_GELU_TANH: gelu_tanh_grad_run(a, dy, out, n); break;
    case SW_ACT_COUNT: break;
    }
}

/* out's box, walked in runs that are contiguous in a, dy (when not NULL) and out. */
static void over_box(sw_activation f, float alpha, float beta, const sw_view *a, const sw_view *dy, sw_view *out) {
    const sw_view *views[3] = {out, a, dy};
    int64_t hi[SW_MAX_RANK];
    for (int d = 0; d < out->rank; d++) {
        hi[d] = sw_view_hi(out, d);
    }
    sw_runs r;
    if (!sw_runs_first(&r, views, dy ? 3 : 2, out->lo, hi, out->rank)) {
        return;
    }
    do {
        const float *ap = a->data + sw_view_offset(a, r.idx);
        const float *dp = dy ? dy->data + sw_view_offset(dy, r.idx) : NULL;
        run(f, alpha, beta, ap, dp, out->data + sw_view_offset(out, r.idx), r.len);
    } while (sw_runs_next(&r));
}

static sw_status check_kind(sw_activation f, const char *name) {
    if ((int)f < 0 || f >= SW_ACT_COUNT) {
        return SW_FAIL(SW_ERR_VALUE, "%s: unknown activation %d", name, (int)f);
    }
    return SW_OK;
}

/* x covers y's box; y = f(x) over y's box. */
sw_status sw_activation_forward(sw_activation f, float alpha, float beta, const sw_view *x, sw_view *y) {
    sw_status s = check_kind(f, "activation_forward");
    if (s == SW_OK) {
        s = sw_view_check_elementwise_out(y, "activation_forward: y");
    }
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(x, "activation_forward: x", y, "y");
    }
    if (s == SW_OK) {
        over_box(f, alpha, beta, x, NULL, y);
    }
    return s;
}

/* from (y for sigmoid and tanh, x otherwise) and dy cover dx's box; dx = dy * f'(.) over dx's box. */
sw_status sw_activation_backward(sw_activation f, float alpha, float beta, const sw_view *from, const sw_view *dy,
                                 sw_view *dx) {
    sw_status s = check_kind(f, "activation_backward");
    if (s == SW_OK) {
        s = sw_view_check_elementwise_out(dx, "activation_backward: dx");
    }
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(from, sw_activation_grad_from_output(f) ? "activation_backward: y"
                                                                                  : "activation_backward: x",
                                         dx, "dx");
    }
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(dy, "activation_backward: dy", dx, "dx");
    }
    if (s == SW_OK) {
        over_box(f, alpha, beta, from, dy, dx);
    }
    return s;
}
