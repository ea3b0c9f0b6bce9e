/* kernels.h -- the CUDA backend's own kernels, as C-callable launchers (the .cu files beside it).
 *
 * Where no library call fits a task of the graph, these do the work: copies and sums of
 * boxes between views, the point-wise activations, batch norm over statistics reduced
 * across workers, softmax + cross-entropy over a worker's rows and classes, bias
 * gradients, and the optimizers' updates.  The .cu files are C++ (nvcc); this header is
 * plain C so that the backend's C files (gcc, C11) call them; every launcher enqueues on
 * `stream` and returns cudaGetLastError() (the launch's own error, not the kernel's).
 *
 * Views.  A task's buffers are boxes of global tensors, each stored row-major at its own
 * place (csrc/cpu/kernels.h).  A launcher walks one box (the destination's part to compute)
 * and reads each source at the same global index: an swk_map gives the box's extents and,
 * per buffer, the element strides of its layout; each pointer points at the box's first
 * element in that buffer (the host computes both: cuda/views.c).
 *
 * Determinism.  Sums run in a fixed order (one block per output value, a fixed tree inside
 * it; no atomics), so the same task on the same GPU gives the same bits every time.
 */
#ifndef SHARDWISE_CUDA_KERNELS_H
#define SHARDWISE_CUDA_KERNELS_H

#include <stddef.h>            /* size_t */
#include <stdint.h>            /* int64_t, int32_t */

#include <cuda_runtime_api.h>  /* cudaStream_t, cudaError_t */

#ifdef __cplusplus
extern "C" {
#endif

#define SWK_MAX_RANK 5   /* = SW_MAX_RANK (csrc/shardwise.h); cuda/views.c checks it */
#define SWK_MAX_SRC 4

/* A box walked element by element: extents, and the strides of the destination and of each
 * source (elements; a stride of 0 broadcasts). */
typedef struct {
    int rank;
    int64_t ext[SWK_MAX_RANK];
    int64_t dst_stride[SWK_MAX_RANK];
    int nsrc;
    int64_t src_stride[SWK_MAX_SRC][SWK_MAX_RANK];
} swk_map;

/* What swk_map_run computes per element; s0..s3 are the sources at the element, a the scalar:
 *   COPY s0   ACCUMULATE dst + s0   ADD s0 + s1   RELU max(s0, 0)   RELU_GRAD s1 > 0 ? s0 : 0
 *   activations: f(s0); their gradients s0 * f'(s1), s1 the output y for sigmoid and tanh, the
 *   input x for the others (PyTorch's definitions, as csrc/cpu/activation.c)
 *   LSTM_CELL sigmoid(s1) s3 + sigmoid(s0) tanh(s2)   (s = i, f, g, c_prev)
 *   LSTM_CELL_GRAD_{I,F,G,C}: dc = s0 times the derivative by that input; the others as listed
 *   in cuda/kernels/eltwise.cu; LSTM_HIDDEN sigmoid(s0) tanh(s1) (s = o, c) and its gradients. */
typedef enum {
    SWK_COPY = 0, SWK_ACCUMULATE, SWK_ADD, SWK_RELU, SWK_RELU_GRAD,
    SWK_SIGMOID, SWK_TANH, SWK_GELU, SWK_SILU, SWK_LEAKY_RELU,
    SWK_SIGMOID_GRAD, SWK_TANH_GRAD, SWK_GELU_GRAD, SWK_SILU_GRAD, SWK_LEAKY_RELU_GRAD,
    SWK_LSTM_CELL, SWK_LSTM_CELL_GRAD_I, SWK_LSTM_CELL_GRAD_F, SWK_LSTM_CELL_GRAD_G, SWK_LSTM_CELL_GRAD_C,
    SWK_LSTM_HIDDEN, SWK_LSTM_HIDDEN_GRAD_O, SWK_LSTM_HIDDEN_GRAD_C,
    SWK_GELU_TANH, SWK_GELU_TANH_GRAD,   /* GELU(approximate="tanh") and its gradient (s1 = x) */
    SWK_NOPS
} swk_op;

/* dst[i] = op(src[0][i], ..., a) over m's box (eltwise.cu). */
cudaError_t swk_map_run(swk_op op, float a, const swk_map *m, float *dst, const float *const *src,
                        cudaStream_t stream);

/* p[i] = value, i < n (eltwise.cu): -inf around a max pooling's padded input. */
cudaError_t swk_fill(float *p, int64_t n, float value, cudaStream_t stream);

/* total[i] += x[i], i < n, doubles (batch-norm statistics reduced across workers; eltwise.cu). */
cudaError_t swk_add_doubles(double *total, const double *x, int64_t n, cudaStream_t stream);

/* ---- batch norm over an (N, C, H, W) box (batchnorm.cu) ----
 * m walks the box with the channel as dimension 1; per-channel arrays start at the box's
 * first channel.  Sums are doubles [2][C]. */
/* Bytes of device scratch the three channel sums below take for m (partial sums per slice). */
size_t swk_bn_sums_scratch(const swk_map *m);
/* sums[0][c] = sum x, sums[1][c] = sum x^2 (src 0 = x) */
cudaError_t swk_bn_sums(const swk_map *m, const float *x, double *sums, double *scratch, cudaStream_t stream);
/* mean, invstd (C floats each) from sums (2, C) over count elements per channel, eps added */
cudaError_t swk_bn_moments(const double *sums, int64_t channels, int64_t count, double eps, float *mean,
                           float *invstd, cudaStream_t stream);
/* mean, invstd from running statistics (2, C) floats: eval mode */
cudaError_t swk_bn_running_moments(const float *running, int64_t channels, double eps, float *mean, float *invstd,
                                   cudaStream_t stream);
/* running = (1 - momentum) running + momentum statistic (unbiased variance), from sums over count */
cudaError_t swk_bn_running_update(const double *sums, int64_t channels, int64_t count, float momentum,
                                  float *running, cudaStream_t stream);
/* y = (x - mean) invstd gamma + beta (src 0 = x; gamma, beta may be NULL: 1, 0) */
cudaError_t swk_bn_apply(const swk_map *m, const float *x, const float *mean, const float *invstd,
                         const float *gamma, const float *beta, float *y, cudaStream_t stream);
/* sums[0][c] = sum dy, sums[1][c] = sum dy xhat (src 0 = x, src 1 = dy) */
cudaError_t swk_bn_backward_sums(const swk_map *m, const float *x, const float *dy, const float *mean,
                                 const float *invstd, double *sums, double *scratch, cudaStream_t stream);
/* dx = gamma invstd (dy - S0 / count - xhat S1 / count) with the reduced sums S (src 0 = x, src 1 = dy) */
cudaError_t swk_bn_backward_apply(const swk_map *m, const float *x, const float *dy, const float *mean,
                                  const float *invstd, const float *gamma, const double *sums, int64_t count,
                                  float *dx, cudaStream_t stream);
/* out[c] = (float)sums[row][c] */
cudaError_t swk_doubles_to_floats(const double *sums, int64_t n, float *out, cudaStream_t stream);

/* ---- bias gradients (batchnorm.cu): db[c] = sum of dy over every dimension but 1 (src 0 = dy) ---- */
cudaError_t swk_channel_sums(const swk_map *m, const float *dy, float *db, double *scratch, cudaStream_t stream);

/* ---- softmax + cross-entropy (loss.cu) ----
 * x: rows (n) of `classes` logits, row stride ldx; p: the (n, cols) box from class c0, row
 * stride ldp; labels: the rows' labels (host-mapped memory is fine).  Writes p, and
 * *loss_sum = sum of -log p[r, label[r]] over the rows whose label lies in [c0, c0 + cols),
 * in double, one block in a fixed order (scratch: n doubles). */
cudaError_t swk_softmax_xent(const float *x, int64_t ldx, int64_t rows, int64_t classes, int64_t c0, int64_t cols,
                             float *p, int64_t ldp, const int32_t *labels, double *scratch, double *loss_sum,
                             cudaStream_t stream);
/* dx = (p - onehot(label)) / n_total over p's (rows, cols) box from class c0 (dx row stride lddx) */
cudaError_t swk_softmax_xent_grad(const float *p, int64_t ldp, int64_t rows, int64_t c0, int64_t cols,
                                  const int32_t *labels, int64_t n_total, float *dx, int64_t lddx,
                                  cudaStream_t stream);

/* ---- optimizers (optim.cu): torch.optim's formulas, as csrc/cpu/optim.c ---- */
typedef struct {
    int kind;                 /* 0 SGD, 1 Adam, 2 AdamW (sw_optim_kind) */
    float lr, weight_decay, momentum, dampening;
    int nesterov, started;    /* SGD: the momentum buffer holds history */
    float beta1, beta2, eps;
    float neg_step, bc2_sqrt, decay;   /* Adam: -lr / (1 - beta1^t), sqrt(1 - beta2^t), 1 - lr wd */
} swk_optim;
cudaError_t swk_optim_update(const swk_optim *o, float *p, const float *grad, float *s0, float *s1, int64_t n,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* SHARDWISE_CUDA_KERNELS_H */
