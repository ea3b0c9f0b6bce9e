/* loss.cu -- softmax + cross-entropy over a worker's rows and classes (the loss op).
 *
 * Why not cuDNN's softmax: a worker of a class-split loss holds whole rows of logits but
 * produces only its class range of p, and adds -log p of only the labels in that range
 * (csrc/cpu/softmax.c); here one block per row finds the row's maximum and sum of exp over
 * every class and writes just the worker's classes.  The row losses are then added by one
 * block in row order, in double, so the loss has the same bits on every run.
 */
#include "map.cuh"

namespace {

constexpr int kThreads = 256;

// rows: x (rows, ldx) of `classes` logits; p (rows, ldp) from class c0, cols wide; row_loss[r]
// = -log p[r, label] when the label lies in the range, else 0
__global__ void softmax_rows(const float *x, int64_t ldx, int64_t rows, int64_t classes, int64_t c0, int64_t cols,
                             float *p, int64_t ldp, const int32_t *labels, double *row_loss) {
    __shared__ float mx[kThreads];
    __shared__ double sum[kThreads];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * ldx;
        float m = -INFINITY;
        for (int64_t k = threadIdx.x; k < classes; k += kThreads) {
            m = fmaxf(m, xr[k]);
        }
        mx[threadIdx.x] = m;
        for (int half = kThreads / 2; half > 0; half /= 2) {
            __syncthreads();
            if ((int)threadIdx.x < half) {
                mx[threadIdx.x] = fmaxf(mx[threadIdx.x], mx[threadIdx.x + half]);
            }
        }
        __syncthreads();
        m = mx[0];
        double s = 0.0;
        for (int64_t k = threadIdx.x; k < classes; k += kThreads) {
            s += (double)expf(xr[k] - m);
        }
        sum[threadIdx.x] = s;
        for (int half = kThreads / 2; half > 0; half /= 2) {
            __syncthreads();
            if ((int)threadIdx.x < half) {
                sum[threadIdx.x] += sum[threadIdx.x + half];
            }
        }
        __syncthreads();
        s = sum[0];
        for (int64_t k = threadIdx.x; k < cols; k += kThreads) {
            p[r * ldp + k] = (float)((double)expf(xr[c0 + k] - m) / s);
        }
        if (threadIdx.x == 0) {
            const int64_t label = labels[r];
            row_loss[r] = label >= c0 && label < c0 + cols ? log(s) - (double)(xr[label] - m) : 0.0;
        }
        __syncthreads();
    }
}

// *out = sum of v[0..n) in a fixed order: per-thread strided sums, then a tree
__global__ void sum_rows(const double *v, int64_t n, double *out) {
    __shared__ double acc[kThreads];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
        s += v[i];
    }
    acc[threadIdx.x] = s;
    for (int half = kThreads / 2; half > 0; half /= 2) {
        __syncthreads();
        if ((int)threadIdx.x < half) {
            acc[threadIdx.x] += acc[threadIdx.x + half];
        }
    }
    if (threadIdx.x == 0) {
        *out = acc[0];
    }
}

__global__ void xent_grad(const float *p, int64_t ldp, int64_t rows, int64_t c0, int64_t cols, const int32_t *labels,
                          float n_total, float *dx, int64_t lddx) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, k = i % cols;
        const float onehot = labels[r] == c0 + k ? 1.0f : 0.0f;
        dx[r * lddx + k] = (p[r * ldp + k] - onehot) / n_total;   // as the CPU divides
    }
}

}  // namespace

extern "C" cudaError_t swk_softmax_xent(const float *x, int64_t ldx, int64_t rows, int64_t classes, int64_t c0,
                                        int64_t cols, float *p, int64_t ldp, const int32_t *labels, double *scratch,
                                        double *loss_sum, cudaStream_t stream) {
    if (rows > 0) {
        const unsigned blocks = (unsigned)(rows > 65535 ? 65535 : rows);
        softmax_rows<<<blocks, kThreads, 0, stream>>>(x, ldx, rows, classes, c0, cols, p, ldp, labels, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            return e;
        }
    }
    // also for no rows: writes 0 (loss_sum may be mapped host memory, which cudaMemset cannot take)
    sum_rows<<<1, kThreads, 0, stream>>>(scratch, rows, loss_sum);
    return cudaGetLastError();
}

extern "C" cudaError_t swk_softmax_xent_grad(const float *p, int64_t ldp, int64_t rows, int64_t c0, int64_t cols,
                                             const int32_t *labels, int64_t n_total, float *dx, int64_t lddx,
                                             cudaStream_t stream) {
    if (rows * cols == 0) {
        return cudaSuccess;
    }
    xent_grad<<<swk_blocks(rows * cols, 256), 256, 0, stream>>>(p, ldp, rows, c0, cols, labels,
                                                                (float)n_total, dx, lddx);
    return cudaGetLastError();
}
