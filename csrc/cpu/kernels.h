/*
 * kernels.h -- CPU kernels of the reference backend, on *views* of tensors.
 *
 * A worker holds pieces of global tensors: its output box, the region of each
 * input it reads (halos included), a slice of the weights.  Every kernel takes
 * views -- a local, contiguous, row-major buffer plus the global coordinates of
 * its first element -- and works in global coordinates:
 *
 *   y[n, co, r, c] for every (n, co, r, c) in y's box
 *       = sum over ci, dy, dx of x[n, ci, r*sh + dy - ph, c*sw + dx - pw] * w[co, ci, dy, dx]
 *
 * where a read of x outside x's box is a read of padding (zero; -inf for max
 * pooling).  The lowering guarantees that every read inside the tensor lies in
 * the view, so "outside the view" means "outside the tensor".
 *
 * Backward passes are split the way seed 001 splits them: data gradients (dA)
 * and weight gradients (dW, dB) are separate kernels, so a scheduler can run
 * them on different streams.  Data-gradient kernels write a *partial* gradient
 * over the input view (the executor sums partials at the owners); all outputs
 * are overwritten, never accumulated, unless the name says accumulate.
 *
 * GEMM comes from OpenBLAS (the scipy-openblas32 wheel, symbols prefixed
 * scipy_), one BLAS thread per calling thread.  Shapes in comments: N samples,
 * Ci/Co channels, H/W spatial, k kernel.
 */
#ifndef SHARDWISE_CPU_KERNELS_H
#define SHARDWISE_CPU_KERNELS_H

#include <stdint.h>  /* int64_t */

#include "../core/view.h"  /* sw_view, sw_window, the view arithmetic and checks */
#include "../internal.h"    /* sw_status, SW_MAX_RANK */


/* ---- GEMM (gemm.c): C = alpha * op(A) op(B) + beta * C, row-major ---- */
void sw_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Make OpenBLAS run every call on the calling thread (workers are the parallelism). */
void sw_blas_single_thread(void);

/* ---- convolution (conv.c): direct loops (conv_direct.c, conv_depthwise.c) or im2col + GEMM ----
 * x (N, Ci, H, W) view with all Ci; w (Co, Ci, kh, kw) view covering y's Co range;
 * b (Co) view covering y's Co range or NULL; y (N, Co, Ho, Wo) view = the box to compute.
 * Dilated (p->dh, p->dw): input row r*sh + ky*dh - ph.  Grouped (p->group_co = cog > 0):
 * w is (Co, Cig, kh, kw) and output channel co reads input channels
 * [cig * (co / cog), cig * (co / cog + 1)); x (dx) must then cover the input channels of
 * every group y's (dy's) channels meet, and w's Cig replaces "all Ci" above. */
sw_status sw_conv2d_forward(const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y, const sw_window *p);
/* dx over dx's box (a partial gradient: only the contributions of dy's box) */
sw_status sw_conv2d_backward_data(const sw_view *w, const sw_view *dy, sw_view *dx, const sw_window *p);
/* dw (and db if not NULL) over the Co range of dy, from the x region and dy */
sw_status sw_conv2d_backward_weight(const sw_view *x, const sw_view *dy, sw_view *dw, sw_view *db,
                                    const sw_window *p);
/* Both through a fused ReLU: dy taken as (y > 0 ? dy : 0), y the convolution's output over
 * dy's box (the values relu_backward writes).  The direct loops apply the mask while they
 * copy dy (no masked copy of the whole gradient first); im2col + GEMM masks into scratch. */
sw_status sw_conv2d_backward_data_relu(const sw_view *w, const sw_view *dy, const sw_view *y, sw_view *dx,
                                       const sw_window *p);
sw_status sw_conv2d_backward_weight_relu(const sw_view *x, const sw_view *dy, const sw_view *y, sw_view *dw,
                                         sw_view *db, const sw_window *p);
/* How many times the convolutions' per-thread scratch caches have grown (process-wide). */
long long sw_conv_scratch_grows(void);
/* The convolutions' algorithm, process-wide (for tests and benchmarks):
 *   AUTO    (the default) the direct loops where they pay: a CPU with AVX2 and FMA,
 *           kernels larger than 1x1 and output columns (channels) filling at least 3/4
 *           of their 8-float vectors, for the data gradient at least 16 of them;
 *           im2col + GEMM otherwise
 *   IM2COL  im2col + GEMM always
 *   DIRECT  the direct loops wherever they apply (any channel count); SW_ERR_VALUE on
 *           a CPU without AVX2 and FMA
 * Either way a call's result does not depend on timing: the same call, the same bits. */
typedef enum { SW_CONV_AUTO, SW_CONV_IM2COL, SW_CONV_DIRECT } sw_conv_algorithm;
sw_status sw_conv_set_algorithm(sw_conv_algorithm a);
sw_conv_algorithm sw_conv_get_algorithm(void);
/* The vector instructions of the direct loops, process-wide (for tests and benchmarks):
 *   AUTO    (the default) AVX-512 where the CPU has AVX-512F, else AVX2 + FMA
 *   AVX2    8-float vectors even on an AVX-512 CPU
 *   AVX512  16-float vectors; SW_ERR_VALUE on a CPU without AVX-512F
 * Both give the same bits (each output adds its products in one order); get returns the set in
 * effect (AUTO resolved), or SW_CONV_ISA_NONE where the CPU has no AVX2 + FMA (im2col only). */
typedef enum { SW_CONV_ISA_AUTO, SW_CONV_ISA_AVX2, SW_CONV_ISA_AVX512, SW_CONV_ISA_NONE } sw_conv_isa;
sw_status sw_conv_set_isa(sw_conv_isa isa);
sw_conv_isa sw_conv_get_isa(void);
/* How often each set's direct loops ran since the process started. */
void sw_conv_isa_calls(long long *avx2, long long *avx512);

/* ---- pooling (pool.c): max (first maximum in row-major window order) or average
 * (padding counted in the divisor, as PyTorch's count_include_pad=True) ---- */
sw_status sw_pool2d_forward(int is_max, const sw_view *x, sw_view *y, const sw_window *p);
sw_status sw_pool2d_backward(int is_max, const sw_view *x, const sw_view *dy, sw_view *dx, const sw_window *p);

/* ---- fully connected (linear.c): y (N, O) = x (N, I) w (O, I)^T + b ---- */
sw_status sw_linear_forward(const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y, int relu);
sw_status sw_linear_backward_data(const sw_view *w, const sw_view *dy, sw_view *dx);
sw_status sw_linear_backward_weight(const sw_view *x, const sw_view *dy, sw_view *dw, sw_view *db);

/* ---- bias gradient (bias.c): db (C_b) = dy (N_b, C_b, ...) summed over all but dimension 1,
 * db's range being dy's channels; a conv's or linear's bias, a batchnorm's beta ---- */
sw_status sw_bias_backward(const sw_view *dy, sw_view *db);
/* the same with the bias along dimension `axis` of dy (a linear's on (N, T, D): the last) */
sw_status sw_bias_backward_axis(const sw_view *dy, int axis, sw_view *db);
/* The same through a fused ReLU: db = sum of (y > 0 ? dy : 0), y the op's output over dy's box
 * (the sums of relu_backward's result, without writing it). */
sw_status sw_bias_backward_relu(const sw_view *dy, const sw_view *y, int axis, sw_view *db);

/* ---- element-wise (eltwise.c) ---- */
sw_status sw_relu_forward(const sw_view *x, sw_view *y);
/* dx = dy * (y > 0) over dx's box */
sw_status sw_relu_backward(const sw_view *y, const sw_view *dy, sw_view *dx);
sw_status sw_add_forward(const sw_view *a, const sw_view *b, sw_view *y);

/* ---- point-wise activations (activation.c), any rank, PyTorch's definitions ---- */
typedef enum {
    SW_ACT_SIGMOID,     /* y = 1 / (1 + exp(-x)) */
    SW_ACT_TANH,        /* y = tanh(x) */
    SW_ACT_GELU,        /* y = x (1 + erf(x / sqrt 2)) / 2, the exact form (torch.nn.GELU()) */
    SW_ACT_SILU,        /* y = x sigmoid(x) */
    SW_ACT_LEAKY_RELU,  /* y = x > 0 ? x : alpha x (alpha: the negative slope) */
    SW_ACT_CLIP,        /* y = min(max(x, alpha), beta) (torch.nn.Hardtanh, ReLU6, torch.clamp) */
    SW_ACT_HARDSIGMOID, /* y = min(max(x + 3, 0), 6) / 6 (torch.nn.Hardsigmoid) */
    SW_ACT_HARDSWISH,   /* y = x min(max(x + 3, 0), 6) / 6 (torch.nn.Hardswish) */
    SW_ACT_GELU_TANH,   /* y = x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 (GELU(approximate="tanh")) */
    SW_ACT_COUNT
} sw_activation;
extern const char *const sw_activation_names[SW_ACT_COUNT];   /* as the graph builder spells them */
/* 1 when f's gradient is computed from its output y (sigmoid, tanh), 0 from its input x */
int sw_activation_grad_from_output(sw_activation f);
/* x covers y's box; y = f(x) over y's box (alpha is read by leaky ReLU and clip, beta by clip) */
sw_status sw_activation_forward(sw_activation f, float alpha, float beta, const sw_view *x, sw_view *y);
/* dx = dy * f'(.) over dx's box; `from` is y or x as sw_activation_grad_from_output says */
sw_status sw_activation_backward(sw_activation f, float alpha, float beta, const sw_view *from, const sw_view *dy,
                                 sw_view *dx);

/* ---- dropout (dropout.c): a mask that is a function of (seed, step, element index) only ----
 * Element i (row-major in the op's whole output `shape`) is kept when sw_dropout_keeps; kept
 * values are scaled by 1 / (1 - p).  Forward: y = dropout(x); backward: dx = dropout(dy), the
 * same mask and scale.  x covers y's box; p in [0, 1), else SW_ERR_VALUE. */
int sw_dropout_keeps(uint64_t seed, int64_t step, int64_t index, float p);
sw_status sw_dropout_check(float p, const char *name);
sw_status sw_dropout_apply(const sw_view *x, sw_view *y, const int64_t *shape, float p, uint64_t seed, int64_t step,
                           const char *name);

/* ---- LSTM element-wise (lstm.c); every input view covers the output's box ---- */
/* c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g) over c's box; in = {i, f, g, c_prev} */
sw_status sw_lstm_cell_forward(const sw_view *const in[4], sw_view *c);
/* dx = the gradient of input `slot` (0 i, 1 f, 2 g, 3 c_prev) from dc, over dx's box */
sw_status sw_lstm_cell_backward(const sw_view *const in[4], const sw_view *dc, int slot, sw_view *dx);
/* h = sigmoid(o) * tanh(c) over h's box */
sw_status sw_lstm_hidden_forward(const sw_view *o, const sw_view *c, sw_view *h);
/* dx = the gradient of input `slot` (0 o, 1 c) from dh, over dx's box */
sw_status sw_lstm_hidden_backward(const sw_view *o, const sw_view *c, const sw_view *dh, int slot, sw_view *dx);

/* ---- batch normalization (batchnorm.c), statistics over the whole minibatch:
 * workers compute partial sums over their box, the executor adds them up
 * across workers, then every worker normalizes with the global statistics. ---- */
/* sums[0][c] = sum of x, sums[1][c] = sum of x^2 over the box, for c in box's channel range */
sw_status sw_bn_partial_sums(const sw_view *x, double *sums);
/* y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c]; mean/invstd/gamma/beta indexed from box's channel start */
sw_status sw_bn_apply(const sw_view *x, const float *mean, const float *invstd, const float *gamma, const float *beta,
                      sw_view *y);
/* sums[0][c] = sum of dy, sums[1][c] = sum of dy * xhat over the box */
sw_status sw_bn_backward_sums(const sw_view *x, const sw_view *dy, const float *mean, const float *invstd,
                              double *sums);
/* dx = gamma * invstd * (dy - sum_dy / M - xhat * sum_dy_xhat / M), M = elements per channel in the minibatch */
sw_status sw_bn_backward_apply(const sw_view *x, const sw_view *dy, const float *mean, const float *invstd,
                               const float *gamma, const double *global_sums, int64_t m, sw_view *dx);
/* running (2, C): row 0 the running mean, row 1 the running variance of C channels, updated from the
 * minibatch's sums (2, C) over m elements per channel as torch.nn.BatchNorm2d does in training mode:
 * running = (1 - momentum) * running + momentum * statistic, with the unbiased variance (m / (m - 1)) */
sw_status sw_bn_running_update(const double *sums, int64_t channels, int64_t m, float momentum, float *running);
/* mean (C) and invstd (C) = 1 / sqrt(var + eps) from running (2, C): eval mode's statistics */
void sw_bn_running_moments(const float *running, int64_t channels, double eps, float *mean, float *invstd);

/* ---- softmax + cross-entropy (softmax.c), the loss op ----
 * x view holds whole rows (all classes) for its samples; p is the (n, c) box to
 * produce; loss_sum += -log p[n, label[n]] for the rows whose label lies in p's
 * class range (the executor divides by N after summing over workers). */
sw_status sw_softmax_xent_forward(const sw_view *x, const int32_t *labels, sw_view *p, double *loss_sum);
/* dx = (p - onehot(label)) / n_total over p's box */
sw_status sw_softmax_xent_backward(const sw_view *p, const int32_t *labels, int64_t n_total, sw_view *dx);

/* ---- sequence-model ops (transformers).  Row kernels take (rows, D) views whose rows are
 * the flattened leading dimensions of (N, T, D) tensors; every view of one call holds the
 * same rows (the glue in ops_cpu_seq.c checks it and flattens). ---- */
/* layernorm.c: y (rows, d-range) = (x - mean) * invstd * w + b over whole rows of x (biased
 * variance, as torch.nn.LayerNorm); w and b cover y's d-range (b may be NULL).  rms = 1: RMS
 * normalization (torch.nn.RMSNorm), mean = 0 in all three. */
sw_status sw_layer_norm_forward(const sw_view *x, const sw_view *w, const sw_view *b, float eps, int rms, sw_view *y);
/* dx (rows, D): the partial gradient from dy's d-range alone (the contributions add up over
 * d-ranges): invstd * (w dy - sum(w dy) / D - xhat sum(w dy xhat) / D) */
sw_status sw_layer_norm_backward_data(const sw_view *x, const sw_view *w, const sw_view *dy, float eps, int rms,
                                      sw_view *dx);
/* dw (d-range) = sum over rows of dy * xhat */
sw_status sw_layer_norm_backward_weight(const sw_view *x, const sw_view *dy, float eps, int rms, sw_view *dw);

/* groupnorm.c: group normalization (torch.nn.GroupNorm) of (N, C, H, W) views over groups of cg
 * consecutive channels.  x holds whole groups (its channel range on group boundaries, every row
 * and column); y (any box inside x) = (x - mean) * invstd * w + b per sample and group (biased
 * variance); w and b (C) cover y's channels, both NULL without affine. */
sw_status sw_group_norm_forward(const sw_view *x, const sw_view *w, const sw_view *b, int64_t cg, double eps,
                                sw_view *y);
/* dx (x's box of whole groups): the partial gradient from dy's box alone (the contributions add
 * up over boxes): invstd * (g - sum(g) / M - xhat sum(g xhat) / M), g = dy w (dy: no w) */
sw_status sw_group_norm_backward_data(const sw_view *x, const sw_view *w, const sw_view *dy, int64_t cg,
                                      double eps, sw_view *dx);
/* dw (dy's channels) = sum over dy's samples, rows and columns of dy * xhat; acc: dy's channel
 * count of doubles of workspace */
sw_status sw_group_norm_backward_weight(const sw_view *x, const sw_view *dy, int64_t cg, double eps, double *acc,
                                        sw_view *dw);

/* embedding.c: ids (rows) holds integer-valued floats; w (v-range, d-range) a slice of the
 * (vocab, D) table at its global coordinates.  y (rows, d-range) = w[id] for ids in the
 * slice's v-range, zeros for the others (partial outputs of a vocabulary split). */
sw_status sw_embedding_forward(const sw_view *ids, const sw_view *w, sw_view *y);
/* dw (v-range, d-range) = sum of dy's rows by id, the rows in order (deterministic) */
sw_status sw_embedding_backward_weight(const sw_view *ids, const sw_view *dy, sw_view *dw);

/* softmax_dim.c: y = softmax(scale * x) along dimension `axis` (any rank), x holding whole
 * lines along it; causal (axis the last): key j > query i (dimension rank-2) gets 0. */
sw_status sw_softmax_dim_forward(const sw_view *x, int axis, float scale, int causal, sw_view *y);
/* dx (whole lines) = scale * p * (dy - sum(dy p)) with the sums over dy's part of each line
 * (a partial gradient); p: the forward's output holding dx's whole lines, or NULL to
 * recompute it from x */
sw_status sw_softmax_dim_backward(const sw_view *x, const sw_view *p, const sw_view *dy, int axis, float scale,
                                  int causal, sw_view *dx);

/* rotary.c: rotary position embedding along the last dimension (Dh, even) of (.., T, Dh) at
 * position t = the global index of dimension rank-2, frequencies base^(-2 (j mod Dh/2) / Dh);
 * x holds y's rows whole */
sw_status sw_rotary_forward(const sw_view *x, double base, sw_view *y);
/* dx (whole rows) from dy's part of each row (a partial gradient: the parts add up) */
sw_status sw_rotary_backward(const sw_view *dy, double base, sw_view *dx);

/* matmul.c: batched products over the leading dimensions, transposes by flag, OpenBLAS:
 * y (.., M_b, N_b) = op(a) (.., M_b, K) op(b) (.., K, N_b), K the views' k range */
sw_status sw_matmul_forward(const sw_view *a, const sw_view *b, int ta, int tb, sw_view *y);
/* the gradient of operand `slot` (0 a, 1 b) over dx's box, in that operand's layout */
sw_status sw_matmul_backward(const sw_view *a, const sw_view *b, const sw_view *dy, int ta, int tb, int slot,
                             sw_view *dx);

/* indexmap.c: y[o] = x[map(o)] over y's box, map one index expression per dimension of x over
 * y's coordinates (reshape, permute: the op description's map, evaluated) */
sw_status sw_index_map_forward(const sw_view *x, const sw_index_expr *map, sw_view *y);
/* dx[map(o)] = dy[o] for o in dy's box, zeros elsewhere in dx's box (map is one-to-one) */
sw_status sw_index_map_backward(const sw_index_expr *map, const sw_view *dy, sw_view *dx);

/* broadcast.c: y = a + b with b's dimensions the trailing ones of a's (a learned position
 * table (T, D) added to (N, T, D)) */
sw_status sw_add_broadcast_forward(const sw_view *a, const sw_view *b, sw_view *y);
/* db (b's box) = dy summed over its leading dimensions (the ones b lacks), in row order */
sw_status sw_sum_leading(const sw_view *dy, sw_view *db);

/* ---- moving data (copy.c): transfers, concat, flatten, gradient sums ---- */
/* dst[i] = src[i] for every global index i in both boxes (same rank) */
sw_status sw_copy_box(const sw_view *src, sw_view *dst);
/* dst[i] += src[i] over the intersection */
sw_status sw_accumulate_box(const sw_view *src, sw_view *dst);

/* ---- broadcasting index maps (bcast.c): expand, mul, broadcast_add, nearest upsampling ----
 * y[o] = f(a[map_a(o)], b[map_b(o)]) over y's box, f by op (b and map_b unused for COPY);
 * map: the op description's expressions over y's coordinates (a broadcast dimension has no
 * variable).  Backward: dx (dx's box) = the sum over dy's points o with map_x(o) in dx's box
 * of dy[o] (times other[map_o(o)] for MUL; other unused otherwise). */
enum { SW_BCAST_COPY = 0, SW_BCAST_ADD = 1, SW_BCAST_MUL = 2 };
sw_status sw_bcast_forward(int op, const sw_view *a, const sw_index_expr *map_a, const sw_view *b,
                           const sw_index_expr *map_b, sw_view *y);
sw_status sw_bcast_backward(int op, const sw_index_expr *map_x, const sw_view *other, const sw_index_expr *map_o,
                            const sw_view *dy, sw_view *dx);

/* ---- stochastic depth (stochastic_depth.c): torchvision.ops.stochastic_depth ----
 * y = x * keep(n) / (1 - p) per sample n of dimension 0 ("row" mode, row = 1; keep(n) is
 * sw_dropout_keeps(seed, step, n, p)) or one draw for the whole minibatch (row = 0: index 0);
 * the backward is the same function of dy. */
sw_status sw_stochastic_depth_apply(const sw_view *x, sw_view *y, float p, int row, uint64_t seed, int64_t step,
                                    const char *name);

/* ---- adaptive average pooling (adaptive_pool.c): PyTorch's windows, any input and output sizes ----
 * x (N, C, h, w) -> y (N, C, oh, ow) over y's box; backward: dx (dx's box) from dy's box */
sw_status sw_adaptive_avg_pool2d_forward(const sw_view *x, sw_view *y, int64_t h, int64_t w, int64_t oh, int64_t ow);
sw_status sw_adaptive_avg_pool2d_backward(const sw_view *dy, sw_view *dx, int64_t h, int64_t w, int64_t oh,
                                          int64_t ow);

/* ---- bilinear upsampling (bilinear.c): integer factors (sh, sw), align_corners=False ----
 * x (N, C, h, w) -> y (N, C, h sh, w sw) over y's box; backward: dx (dx's box) from dy's box */
sw_status sw_upsample_bilinear_forward(const sw_view *x, sw_view *y, int64_t h, int64_t w, int64_t sh, int64_t sw);
sw_status sw_upsample_bilinear_backward(const sw_view *dy, sw_view *dx, int64_t h, int64_t w, int64_t sh, int64_t sw);

#endif /* SHARDWISE_CPU_KERNELS_H */
