/* batchnorm.cu -- batch norm over statistics that workers sum across devices, and the
 * per-channel sums of bias gradients.
 *
 * Why not cuDNN's batch norm: cuDNN computes a tensor's statistics and normalizes it in one
 * call, but a plan may split a batch norm's (N, C, H, W) output among workers; each worker
 * then sums its box (bn_sums), the task graph adds the workers' sums (stats_reduce), and
 * every worker normalizes with the global statistics (bn_apply), as csrc/cpu/batchnorm.c
 * does.  Sums are doubles [2][C] from the box's first channel; one block per channel adds
 * its elements in a fixed order (strided per thread, then a tree), so results are bitwise
 * reproducible.
 */
#include "map.cuh"

namespace {

constexpr int kThreads = 256;

// Offset in buffer k (-1: the destination) of element j of channel c of m's box; the box's
// dimension 1 is the channel, the others are walked row-major.
__device__ inline int64_t chan_offset(const swk_map &m, int k, int64_t c, int64_t j) {
    const int64_t *st = k < 0 ? m.dst_stride : m.src_stride[k];
    int64_t off = c * st[1];
    for (int r = m.rank - 1; r >= 0; r--) {
        if (r == 1) {
            continue;
        }
        const int64_t q = j % m.ext[r];
        j /= m.ext[r];
        off += q * st[r];
    }
    return off;
}

__device__ inline int64_t per_channel(const swk_map &m) {
    int64_t n = 1;
    for (int r = 0; r < m.rank; r++) {
        n *= r == 1 ? 1 : m.ext[r];
    }
    return n;
}

// Sum of a and b over the block, in a fixed tree; the result in a[0], b[0].
__device__ inline void block_sum2(double *a, double *b) {
    for (int half = kThreads / 2; half > 0; half /= 2) {
        __syncthreads();
        if ((int)threadIdx.x < half) {
            a[threadIdx.x] += a[threadIdx.x + half];
            b[threadIdx.x] += b[threadIdx.x + half];
        }
    }
    __syncthreads();
}

// mode 0: (sum x, sum x^2); mode 1: (sum dy, sum dy xhat) with src 0 = x, src 1 = dy;
// mode 2: sum dy (src 0 = dy) into db floats
__global__ void sums_kernel(int mode, swk_map m, const float *x, const float *dy, const float *mean,
                            const float *invstd, double *sums, float *db) {
    __shared__ double a[kThreads], b[kThreads];
    const int64_t channels = m.ext[1], count = per_channel(m);
    for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
        double sa = 0.0, sb = 0.0;
        for (int64_t j = threadIdx.x; j < count; j += kThreads) {
            if (mode == 0) {
                const float v = x[chan_offset(m, 0, c, j)];
                sa += (double)v;
                sb += (double)v * (double)v;
            } else if (mode == 1) {
                const float g = dy[chan_offset(m, 1, c, j)];
                const float xhat = (x[chan_offset(m, 0, c, j)] - mean[c]) * invstd[c];
                sa += (double)g;
                sb += (double)g * (double)xhat;
            } else {
                sa += (double)x[chan_offset(m, 0, c, j)];
            }
        }
        a[threadIdx.x] = sa;
        b[threadIdx.x] = sb;
        block_sum2(a, b);
        if (threadIdx.x == 0) {
            if (mode == 2) {
                db[c] = (float)a[0];
            } else {
                sums[c] = a[0];
                sums[channels + c] = b[0];
            }
        }
        __syncthreads();
    }
}

__global__ void moments_kernel(const double *sums, int64_t channels, int64_t count, double eps, float *mean,
                               float *invstd) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < channels; c += (int64_t)gridDim.x * blockDim.x) {
        const double mu = sums[c] / (double)count;
        double var = sums[channels + c] / (double)count - mu * mu;
        var = var > 0.0 ? var : 0.0;
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
    }
}

__global__ void running_moments_kernel(const float *running, int64_t channels, double eps, float *mean,
                                       float *invstd) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < channels; c += (int64_t)gridDim.x * blockDim.x) {
        const double var = (double)running[channels + c];
        mean[c] = running[c];
        invstd[c] = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + eps));
    }
}

// torch.nn.BatchNorm2d's update, the statistics rounded to float first (csrc/cpu/batchnorm.c)
__global__ void running_update_kernel(const double *sums, int64_t channels, int64_t count, float momentum,
                                      float *running) {
    const double keep = 1.0 - (double)momentum, md = (double)count;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < channels; c += (int64_t)gridDim.x * blockDim.x) {
        const double mu = sums[c] / md;
        double var = sums[channels + c] / md - mu * mu;
        var = var > 0.0 ? var : 0.0;
        const float mean = (float)mu, unbiased = (float)(count > 1 ? var * md / (md - 1.0) : var);
        running[c] = (float)(keep * (double)running[c] + (double)momentum * (double)mean);
        running[channels + c] = (float)(keep * (double)running[channels + c] + (double)momentum * (double)unbiased);
    }
}

// element-wise over the box: mode 0 apply (src 0 = x), mode 1 backward apply (src 0 = x,
// src 1 = dy) with the reduced sums (2, C) of dy and dy xhat over count elements per channel
__global__ void apply_kernel(int mode, swk_map m, int64_t n, const float *x, const float *dy, const float *mean,
                             const float *invstd, const float *gamma, const float *beta, const double *sums,
                             int64_t count, float *out) {
    const int64_t channels = m.ext[1];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d, s[SWK_MAX_SRC];
        swk_offsets(m, i, &d, s);
        int64_t rest = i;   // the channel: the box's dimension 1
        for (int r = m.rank - 1; r > 1; r--) {
            rest /= m.ext[r];
        }
        const int64_t c = rest % channels;
        const float g = gamma ? gamma[c] : 1.0f;
        if (mode == 0) {
            out[d] = (x[s[0]] - mean[c]) * (invstd[c] * g) + (beta ? beta[c] : 0.0f);
        } else {
            const float mean_dy = (float)(sums[c] / (double)count);
            const float mean_dy_xhat = (float)(sums[channels + c] / (double)count);
            const float xhat = (x[s[0]] - mean[c]) * invstd[c];
            out[d] = g * invstd[c] * (dy[s[1]] - mean_dy - xhat * mean_dy_xhat);
        }
    }
}

__global__ void to_floats_kernel(const double *in, int64_t n, float *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = (float)in[i];
    }
}

unsigned channel_blocks(int64_t channels) { return (unsigned)(channels < 1 ? 1 : (channels > 65535 ? 65535 : channels)); }

}  // namespace

extern "C" cudaError_t swk_bn_sums(const swk_map *m, const float *x, double *sums, cudaStream_t stream) {
    sums_kernel<<<channel_blocks(m->ext[1]), kThreads, 0, stream>>>(0, *m, x, nullptr, nullptr, nullptr, sums,
                                                                    nullptr);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_backward_sums(const swk_map *m, const float *x, const float *dy, const float *mean,
                                            const float *invstd, double *sums, cudaStream_t stream) {
    sums_kernel<<<channel_blocks(m->ext[1]), kThreads, 0, stream>>>(1, *m, x, dy, mean, invstd, sums, nullptr);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_channel_sums(const swk_map *m, const float *dy, float *db, cudaStream_t stream) {
    sums_kernel<<<channel_blocks(m->ext[1]), kThreads, 0, stream>>>(2, *m, dy, nullptr, nullptr, nullptr, nullptr,
                                                                    db);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_moments(const double *sums, int64_t channels, int64_t count, double eps, float *mean,
                                      float *invstd, cudaStream_t stream) {
    moments_kernel<<<swk_blocks(channels, 128), 128, 0, stream>>>(sums, channels, count, eps, mean, invstd);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_running_moments(const float *running, int64_t channels, double eps, float *mean,
                                              float *invstd, cudaStream_t stream) {
    running_moments_kernel<<<swk_blocks(channels, 128), 128, 0, stream>>>(running, channels, eps, mean, invstd);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_running_update(const double *sums, int64_t channels, int64_t count, float momentum,
                                             float *running, cudaStream_t stream) {
    running_update_kernel<<<swk_blocks(channels, 128), 128, 0, stream>>>(sums, channels, count, momentum, running);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_apply(const swk_map *m, const float *x, const float *mean, const float *invstd,
                                    const float *gamma, const float *beta, float *y, cudaStream_t stream) {
    const int64_t n = swk_volume(m);
    if (n == 0) {
        return cudaSuccess;
    }
    apply_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(0, *m, n, x, nullptr, mean, invstd, gamma, beta, nullptr, 1,
                                                         y);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_backward_apply(const swk_map *m, const float *x, const float *dy, const float *mean,
                                             const float *invstd, const float *gamma, const double *sums,
                                             int64_t count, float *dx, cudaStream_t stream) {
    const int64_t n = swk_volume(m);
    if (n == 0) {
        return cudaSuccess;
    }
    apply_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(1, *m, n, x, dy, mean, invstd, gamma, nullptr, sums, count,
                                                         dx);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_doubles_to_floats(const double *in, int64_t n, float *out, cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    to_floats_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(in, n, out);
    return cudaGetLastError();
}
