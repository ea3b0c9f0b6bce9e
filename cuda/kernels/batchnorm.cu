/* batchnorm.cu -- batch norm over statistics that workers sum across devices, and the
 * per-channel sums of bias gradients.
 *
 * Why not cuDNN's batch norm: cuDNN computes a tensor's statistics and normalizes it in one
 * call, but a plan may split a batch norm's (N, C, H, W) output among workers; each worker
 * then sums its box (bn_sums), the task graph adds the workers' sums (stats_reduce), and
 * every worker normalizes with the global statistics (bn_apply), as csrc/cpu/batchnorm.c
 * does.  Sums are doubles [2][C] from the box's first channel, in two passes: blocks (c, p)
 * each add a fixed slice of channel c's elements (strided per thread, then a tree), then one
 * thread per channel adds the slices in order; the slices depend on the box alone, so results
 * are bitwise reproducible on any GPU.  A (64, 64, 112, 112) box is 64 channels x 16 slices:
 * a channel per block would leave half of an H100's 132 SMs idle.
 */
#include "map.cuh"

namespace {

constexpr int kThreads = 256;

__device__ inline int64_t per_channel(const swk_map &m) {
    int64_t n = 1;
    for (int r = 0; r < m.rank; r++) {
        n *= r == 1 ? 1 : m.ext[r];
    }
    return n;
}

// A channel's elements, row-major over every dimension but 1: the inner dimension (the last,
// or 0 for an (N, C) map) walked by the threads, its rows by the other dimensions.  The offset
// of row `row` in buffer k, channel excluded: one multiply for maps collapsed to (N, C, S).
__device__ inline int inner_dim(const swk_map &m) { return m.rank >= 3 ? m.rank - 1 : 0; }

__device__ inline int64_t row_offset(const swk_map &m, int k, int64_t row) {
    const int64_t *st = m.src_stride[k];
    if (m.rank <= 3) {
        return m.rank == 3 ? row * st[0] : 0;
    }
    int64_t off = 0;
    for (int r = m.rank - 2; r >= 0; r--) {
        if (r == 1) {
            continue;
        }
        const int64_t q = row % m.ext[r];
        row /= m.ext[r];
        off += q * st[r];
    }
    return off;
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

// Pass 1 of the channel sums: block (c, p) sums part p of channel c's elements (a fixed slice
// of them in row-major order; each thread strided, then a fixed tree) into parts[c][p][2].
// mode 0: (sum x, sum x^2) with src 0 = x; mode 1: (sum dy, sum dy xhat) with src 0 = x,
// src 1 = dy; mode 2: (sum dy, 0) with src 0 = dy.
__global__ void sums_part_kernel(int mode, swk_map m, int parts, const float *x, const float *dy, const float *mean,
                                 const float *invstd, double *part) {
    __shared__ double a[kThreads], b[kThreads];
    const int64_t channels = m.ext[1], count = per_channel(m);
    const int id = inner_dim(m);
    const int64_t inner = m.ext[id], sx = m.src_stride[0][id], sd = m.src_stride[1][id];
    const int p = (int)blockIdx.y;
    const int64_t j0 = count * p / parts, j1 = count * (p + 1) / parts;
    for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
        double sa = 0.0, sb = 0.0;
        const float mu = mode == 1 ? mean[c] : 0.0f, is = mode == 1 ? invstd[c] : 0.0f;
        int64_t j = j0 + threadIdx.x, row = j / inner, e = j % inner;
        int64_t ox = row_offset(m, 0, row) + c * m.src_stride[0][1];
        int64_t od = mode == 1 ? row_offset(m, 1, row) + c * m.src_stride[1][1] : 0;
        for (; j < j1; j += kThreads) {
            const float v = x[ox + e * sx];
            if (mode == 1) {
                const float g = dy[od + e * sd];
                const float xhat = (v - mu) * is;
                sa += (double)g;
                sb += (double)g * (double)xhat;
            } else {
                sa += (double)v;
                sb += mode == 0 ? (double)v * (double)v : 0.0;
            }
            e += kThreads;
            if (e >= inner) {   // the next row(s): one walk, not one per element
                row += e / inner;
                e %= inner;
                ox = row_offset(m, 0, row) + c * m.src_stride[0][1];
                od = mode == 1 ? row_offset(m, 1, row) + c * m.src_stride[1][1] : 0;
            }
        }
        a[threadIdx.x] = sa;
        b[threadIdx.x] = sb;
        block_sum2(a, b);
        if (threadIdx.x == 0) {
            part[(c * parts + p) * 2] = a[0];
            part[(c * parts + p) * 2 + 1] = b[0];
        }
        __syncthreads();
    }
}

// Pass 2: each channel's parts added in order p = 0, 1, ...: sums (2, C) doubles, or db floats (mode 2).
__global__ void sums_finish_kernel(int mode, int64_t channels, int parts, const double *part, double *sums,
                                   float *db) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < channels; c += (int64_t)gridDim.x * blockDim.x) {
        double sa = 0.0, sb = 0.0;
        for (int p = 0; p < parts; p++) {
            sa += part[(c * parts + p) * 2];
            sb += part[(c * parts + p) * 2 + 1];
        }
        if (mode == 2) {
            db[c] = (float)sa;
        } else {
            sums[c] = sa;
            sums[channels + c] = sb;
        }
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

// apply_kernel by lines: one warp per line of the last dimension, its channel from the line's walk
__global__ void apply_lines_kernel(int mode, swk_map m, int64_t lines, const float *x, const float *dy,
                                   const float *mean, const float *invstd, const float *gamma, const float *beta,
                                   const double *sums, int64_t count, float *out) {
    const int64_t channels = m.ext[1];
    const int last = m.rank - 1;
    const int64_t inner = m.ext[last], ds = m.dst_stride[last], sx = m.src_stride[0][last];
    const int64_t sd = m.src_stride[1][last];
    const int lane = (int)(threadIdx.x % SWK_WARP);
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / SWK_WARP;
    for (int64_t L = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / SWK_WARP; L < lines; L += warps) {
        int64_t d, s[SWK_MAX_SRC], c;
        swk_line(m, L, &d, s, &c);
        const float g = gamma ? gamma[c] : 1.0f, mu = mean[c], is = invstd[c];
        if (mode == 0) {
            const float scale = is * g, shift = beta ? beta[c] : 0.0f;
            for (int64_t j = lane; j < inner; j += SWK_WARP) {
                out[d + j * ds] = (x[s[0] + j * sx] - mu) * scale + shift;
            }
        } else {
            const float mean_dy = (float)(sums[c] / (double)count);
            const float mean_dy_xhat = (float)(sums[channels + c] / (double)count);
            for (int64_t j = lane; j < inner; j += SWK_WARP) {
                const float xhat = (x[s[0] + j * sx] - mu) * is;
                out[d + j * ds] = g * is * (dy[s[1] + j * sd] - mean_dy - xhat * mean_dy_xhat);
            }
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

// Parts per channel: about 1024 blocks in all, at least 8192 elements each, at most 64; from the
// map alone (not the GPU), so that the same task sums in the same order on every GPU.
static int sum_parts(const swk_map *m) {
    const int64_t channels = m->ext[1] > 0 ? m->ext[1] : 1;
    int64_t count = 1;
    for (int r = 0; r < m->rank; r++) {
        count *= r == 1 ? 1 : m->ext[r];
    }
    int64_t p = (1024 + channels - 1) / channels;
    p = p < count / 8192 ? p : count / 8192;
    return (int)(p < 1 ? 1 : (p > 64 ? 64 : p));
}

extern "C" size_t swk_bn_sums_scratch(const swk_map *m) {
    return sizeof(double) * 2 * (size_t)(m->ext[1] > 0 ? m->ext[1] : 0) * (size_t)sum_parts(m);
}

static cudaError_t channel_sums(int mode, const swk_map *m, const float *x, const float *dy, const float *mean,
                                const float *invstd, double *part, double *sums, float *db, cudaStream_t stream) {
    const swk_map c = swk_collapse(m, 2);
    const int64_t channels = c.ext[1];
    if (channels <= 0) {
        return cudaSuccess;
    }
    const int parts = sum_parts(&c);
    sums_part_kernel<<<dim3(channel_blocks(channels), (unsigned)parts), kThreads, 0, stream>>>(mode, c, parts, x, dy,
                                                                                             mean, invstd, part);
    sums_finish_kernel<<<swk_blocks(channels, 128), 128, 0, stream>>>(mode, channels, parts, part, sums, db);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_sums(const swk_map *m, const float *x, double *sums, double *scratch,
                                   cudaStream_t stream) {
    return channel_sums(0, m, x, nullptr, nullptr, nullptr, scratch, sums, nullptr, stream);
}

extern "C" cudaError_t swk_bn_backward_sums(const swk_map *m, const float *x, const float *dy, const float *mean,
                                            const float *invstd, double *sums, double *scratch, cudaStream_t stream) {
    return channel_sums(1, m, x, dy, mean, invstd, scratch, sums, nullptr, stream);
}

extern "C" cudaError_t swk_channel_sums(const swk_map *m, const float *dy, float *db, double *scratch,
                                        cudaStream_t stream) {
    return channel_sums(2, m, dy, nullptr, nullptr, nullptr, scratch, nullptr, db, stream);
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

// The apply kernels over m collapsed from dimension 2: by lines where they are long enough.
static void apply(int mode, const swk_map *m, const float *x, const float *dy, const float *mean, const float *invstd,
                  const float *gamma, const float *beta, const double *sums, int64_t count, float *out,
                  cudaStream_t stream) {
    const swk_map c = swk_collapse(m, 2);
    const int64_t n = swk_volume(&c);
    if (c.rank >= 3 && swk_by_lines(&c)) {
        const int64_t lines = n / c.ext[c.rank - 1];
        apply_lines_kernel<<<swk_blocks(lines * SWK_WARP, 256), 256, 0, stream>>>(mode, c, lines, x, dy, mean, invstd,
                                                                                  gamma, beta, sums, count, out);
    } else {
        apply_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(mode, c, n, x, dy, mean, invstd, gamma, beta, sums, count,
                                                             out);
    }
}

extern "C" cudaError_t swk_bn_apply(const swk_map *m, const float *x, const float *mean, const float *invstd,
                                    const float *gamma, const float *beta, float *y, cudaStream_t stream) {
    if (swk_volume(m) == 0) {
        return cudaSuccess;
    }
    apply(0, m, x, nullptr, mean, invstd, gamma, beta, nullptr, 1, y, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_bn_backward_apply(const swk_map *m, const float *x, const float *dy, const float *mean,
                                             const float *invstd, const float *gamma, const double *sums,
                                             int64_t count, float *dx, cudaStream_t stream) {
    if (swk_volume(m) == 0) {
        return cudaSuccess;
    }
    apply(1, m, x, dy, mean, invstd, gamma, nullptr, sums, count, dx, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_doubles_to_floats(const double *in, int64_t n, float *out, cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    to_floats_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(in, n, out);
    return cudaGetLastError();
}
