/* eltwise.cu -- one kernel for every element-wise task: copies and sums of boxes, ReLU, the
 * point-wise activations and the LSTM cell's gates, forward and backward.
 *
 * Why one kernel: every one of them is "walk the destination's box, read the sources at the
 * same global index" (map.cuh), with views whose boxes differ (a region larger than the
 * output, a halo); the op is a switch on a value the whole grid shares.  The formulas are
 * PyTorch's, as csrc/cpu/activation.c and csrc/cpu/lstm.c write them, in float.
 */
#include "map.cuh"

namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f; // sqrt(2 / pi): GELU's tanh approximation
constexpr float kGeluTanhK = 0.044715f;

// 1 / (1 + exp(-x)) without overflow: exp of a non-positive number only
__device__ inline float sigmoidf(float x) {
    if (x >= 0.0f) {
        return 1.0f / (1.0f + expf(-x));
    }
    const float e = expf(x);
    return e / (1.0f + e);
}

__device__ inline float apply(swk_op op, float a, float d, float s0, float s1, float s2, float s3) {
    switch (op) {
    case SWK_COPY: return s0;
    case SWK_ACCUMULATE: return d + s0;
    case SWK_ADD: return s0 + s1;
    case SWK_RELU: return s0 > 0.0f ? s0 : 0.0f;
    case SWK_RELU_GRAD: return s1 > 0.0f ? s0 : 0.0f;                 // s0 = dy, s1 = y
    case SWK_SIGMOID: return 1.0f / (1.0f + expf(-s0));
    case SWK_TANH: return tanhf(s0);
    case SWK_GELU: return s0 * 0.5f * (1.0f + erff(s0 * kSqrt1_2));
    case SWK_SILU: return s0 / (1.0f + expf(-s0));
    case SWK_LEAKY_RELU: return s0 > 0.0f ? s0 : s0 * a;
    case SWK_SIGMOID_GRAD: return s0 * s1 * (1.0f - s1);              // s1 = y
    case SWK_TANH_GRAD: return s0 * (1.0f - s1 * s1);                 // s1 = y
    case SWK_GELU_GRAD: {                                             // s1 = x
        const float cdf = 0.5f * (1.0f + erff(s1 * kSqrt1_2));
        const float pdf = kInvSqrt2Pi * expf(-0.5f * s1 * s1);
        return s0 * (cdf + s1 * pdf);
    }
    case SWK_SILU_GRAD: {                                             // s1 = x
        const float s = 1.0f / (1.0f + expf(-s1));
        return s0 * s * (1.0f + s1 * (1.0f - s));
    }
    case SWK_LEAKY_RELU_GRAD: return s1 > 0.0f ? s0 : s0 * a;         // s1 = x
    case SWK_GELU_TANH: return 0.5f * s0 * (1.0f + tanhf(kSqrt2OverPi * (s0 + kGeluTanhK * (s0 * s0 * s0))));
    case SWK_GELU_TANH_GRAD: {                                        // s1 = x
        const float x2 = s1 * s1;
        const float t = tanhf(kSqrt2OverPi * (s1 + kGeluTanhK * (x2 * s1)));
        const float d_right = 0.5f * s1 * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhK * x2);
        return s0 * (0.5f * (1.0f + t) + d_right);
    }
    // LSTM cell, s = (i, f, g, c_prev): c = sigmoid(f) c_prev + sigmoid(i) tanh(g)
    case SWK_LSTM_CELL: return sigmoidf(s1) * s3 + sigmoidf(s0) * tanhf(s2);
    case SWK_LSTM_CELL_GRAD_I: {                                      // s0 = dc, s1 = i, s2 = g
        const float si = sigmoidf(s1);
        return s0 * tanhf(s2) * si * (1.0f - si);
    }
    case SWK_LSTM_CELL_GRAD_F: {                                      // s0 = dc, s1 = f, s2 = c_prev
        const float sf = sigmoidf(s1);
        return s0 * s2 * sf * (1.0f - sf);
    }
    case SWK_LSTM_CELL_GRAD_G: {                                      // s0 = dc, s1 = i, s2 = g
        const float tg = tanhf(s2);
        return s0 * sigmoidf(s1) * (1.0f - tg * tg);
    }
    case SWK_LSTM_CELL_GRAD_C: return s0 * sigmoidf(s1);              // s0 = dc, s1 = f
    // LSTM hidden, s = (o, c): h = sigmoid(o) tanh(c)
    case SWK_LSTM_HIDDEN: return sigmoidf(s0) * tanhf(s1);
    case SWK_LSTM_HIDDEN_GRAD_O: {                                    // s0 = dh, s1 = o, s2 = c
        const float so = sigmoidf(s1);
        return s0 * tanhf(s2) * so * (1.0f - so);
    }
    case SWK_LSTM_HIDDEN_GRAD_C: {                                    // s0 = dh, s1 = o, s2 = c
        const float tc = tanhf(s2);
        return s0 * sigmoidf(s1) * (1.0f - tc * tc);
    }
    case SWK_NOPS: break;
    }
    return 0.0f;
}

// one thread per element, its offsets walked from its index (short lines)
__global__ void map_kernel(swk_op op, float a, swk_map m, int64_t n, float *dst, const float *s0p, const float *s1p,
                           const float *s2p, const float *s3p) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d, s[SWK_MAX_SRC];
        swk_offsets(m, i, &d, s);
        const float v0 = m.nsrc > 0 ? s0p[s[0]] : 0.0f, v1 = m.nsrc > 1 ? s1p[s[1]] : 0.0f;
        const float v2 = m.nsrc > 2 ? s2p[s[2]] : 0.0f, v3 = m.nsrc > 3 ? s3p[s[3]] : 0.0f;
        dst[d] = apply(op, a, op == SWK_ACCUMULATE ? dst[d] : 0.0f, v0, v1, v2, v3);
    }
}

// a flat box (rank 1 after swk_collapse): element i at i * stride, no division
__global__ void map_flat_kernel(swk_op op, float a, swk_map m, int64_t n, float *dst, const float *s0p,
                                const float *s1p, const float *s2p, const float *s3p) {
    const int64_t ds = m.dst_stride[0], st0 = m.src_stride[0][0], st1 = m.src_stride[1][0];
    const int64_t st2 = m.src_stride[2][0], st3 = m.src_stride[3][0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v0 = m.nsrc > 0 ? s0p[i * st0] : 0.0f, v1 = m.nsrc > 1 ? s1p[i * st1] : 0.0f;
        const float v2 = m.nsrc > 2 ? s2p[i * st2] : 0.0f, v3 = m.nsrc > 3 ? s3p[i * st3] : 0.0f;
        float *o = dst + i * ds;
        *o = apply(op, a, op == SWK_ACCUMULATE ? *o : 0.0f, v0, v1, v2, v3);
    }
}

// one warp per line of the last dimension (lines = n / inner): one walk per line
__global__ void map_lines_kernel(swk_op op, float a, swk_map m, int64_t lines, float *dst, const float *s0p,
                                 const float *s1p, const float *s2p, const float *s3p) {
    const int last = m.rank - 1;
    const int64_t inner = m.ext[last], ds = m.dst_stride[last];
    const int64_t st0 = m.src_stride[0][last], st1 = m.src_stride[1][last];
    const int64_t st2 = m.src_stride[2][last], st3 = m.src_stride[3][last];
    const int lane = (int)(threadIdx.x % SWK_WARP);
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / SWK_WARP;
    for (int64_t L = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / SWK_WARP; L < lines; L += warps) {
        int64_t d, s[SWK_MAX_SRC], dim1;
        swk_line(m, L, &d, s, &dim1);
        for (int64_t j = lane; j < inner; j += SWK_WARP) {
            const float v0 = m.nsrc > 0 ? s0p[s[0] + j * st0] : 0.0f, v1 = m.nsrc > 1 ? s1p[s[1] + j * st1] : 0.0f;
            const float v2 = m.nsrc > 2 ? s2p[s[2] + j * st2] : 0.0f, v3 = m.nsrc > 3 ? s3p[s[3] + j * st3] : 0.0f;
            float *o = dst + d + j * ds;
            *o = apply(op, a, op == SWK_ACCUMULATE ? *o : 0.0f, v0, v1, v2, v3);
        }
    }
}

__global__ void add_doubles_kernel(double *total, const double *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        total[i] += x[i];
    }
}

__global__ void fill_kernel(float *p, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        p[i] = value;
    }
}

}  // namespace

extern "C" cudaError_t swk_fill(float *p, int64_t n, float value, cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    fill_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(p, n, value);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_map_run(swk_op op, float a, const swk_map *m, float *dst, const float *const *src,
                                   cudaStream_t stream) {
    const int64_t n = swk_volume(m);
    if (n == 0) {
        return cudaSuccess;
    }
    const float *s[SWK_MAX_SRC] = {nullptr, nullptr, nullptr, nullptr};
    for (int k = 0; k < m->nsrc && k < SWK_MAX_SRC; k++) {
        s[k] = src[k];
    }
    const swk_map c = swk_collapse(m, 0);
    if (c.rank == 1) {
        map_flat_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(op, a, c, n, dst, s[0], s[1], s[2], s[3]);
    } else if (swk_by_lines(&c)) {
        const int64_t lines = n / c.ext[c.rank - 1];
        map_lines_kernel<<<swk_blocks(lines * SWK_WARP, 256), 256, 0, stream>>>(op, a, c, lines, dst, s[0], s[1],
                                                                                s[2], s[3]);
    } else {
        map_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(op, a, c, n, dst, s[0], s[1], s[2], s[3]);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t swk_add_doubles(double *total, const double *x, int64_t n, cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    add_doubles_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(total, x, n);
    return cudaGetLastError();
}
