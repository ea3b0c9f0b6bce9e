/*
 * conv_internal.h -- what the convolution's files share (not part of kernels.h).
 *
 *   conv.c              the three kernels of kernels.h: checks, then the direct
 *                       path where it applies (conv_direct.c), else im2col + SGEMM
 *   conv_geom.c         the output box cut into GEMM tiles, the checks common to
 *                       the kernels, the per-thread scratch cache
 *   conv_im2col.c       im2col / col2im through a zero-padded channel plane
 *   conv_direct.c       the direct path: padded source regions, packed weights and
 *                       index tables for the AVX2 loops
 *   conv_direct_avx2.c  those loops (AVX2 + FMA, chosen at run time)
 *   conv_depthwise.c    depthwise convolutions (one input channel per group): direct loops
 *
 * Shapes: N samples, Ci / Co channels (Co_b: the output box's), kh x kw kernel,
 * K = Ci * kh * kw, P pixels of an output plane.
 */
#ifndef SHARDWISE_CPU_CONV_INTERNAL_H
#define SHARDWISE_CPU_CONV_INTERNAL_H

#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t, int32_t */

#include "kernels.h"

static inline int64_t conv_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t conv_max(int64_t a, int64_t b) { return a > b ? a : b; }

static inline int64_t conv_floor_div(int64_t a, int64_t b) {  /* b > 0 */
    int64_t q = a / b;
    if (a % b != 0 && a < 0) {
        q--;
    }
    return q;
}

static inline int64_t conv_ceil_div(int64_t a, int64_t b) { return -conv_floor_div(-a, b); }  /* b > 0 */

/* p with its dilation made explicit (0 reads as 1: kernels.h): every file below reads
 * dh and dw of a window normalized here. */
static inline sw_window conv_window(const sw_window *p) {
    sw_window q = *p;
    q.dh = q.dh > 1 ? q.dh : 1;
    q.dw = q.dw > 1 ? q.dw : 1;
    return q;
}

/* Input rows (columns) one output pixel's window spans: (k - 1) * d + 1. */
static inline int64_t conv_ext_h(const sw_window *p) { return (p->kh - 1) * p->dh + 1; }
static inline int64_t conv_ext_w(const sw_window *p) { return (p->kw - 1) * p->dw + 1; }

/* ------------------------------------------------------------------ GEMM tiles (conv_geom.c) */

/* im2col buffer budget in floats (512 KiB), so the buffer is still in cache when
 * the GEMM reads it: budgets of 2^16..2^20 floats run the VGG-like layer above
 * at the same speed, 2^24 (whole batches) 2.3x slower; on the small-channel
 * layers of a CIFAR-style ResNet 2^17 (512 KiB, in L2 with OpenBLAS's packed
 * copy) was 5-10% faster than 2^19.  Tiles have at least
 * CONV_MIN_TILE_COLS columns (unless the box is smaller) to keep GEMMs wide. */
#ifndef CONV_COL_BUDGET
#define CONV_COL_BUDGET ((int64_t)1 << 17)
#endif
#define CONV_MIN_TILE_COLS 256

/* The output-pixel box a kernel walks (y's box, or dy's box for the backward
 * kernels) and how it is cut into tiles. */
typedef struct {
    int64_t n0, n1;       /* samples [n0, n1) to process */
    int64_t nlo;          /* first sample of the output view (its local sample 0) */
    int64_t co;           /* output channels of the view (Co_b) */
    int64_t r0, c0, wo;   /* first row, first column and width of the output view's pixel box */
    int64_t plane;        /* pixels per (sample, channel) of the output view */
    int64_t qa, qb;       /* pixel range [qa, qb) of each plane to process (whole rows) */
    int64_t k;            /* Ci * kh * kw */
    int64_t tile_cols;    /* columns per tile */
    int64_t per_sample;   /* tiles per sample (1 when several samples share a tile) */
    int64_t nb;           /* samples per tile */
} conv_geom;

typedef struct {
    int64_t n;       /* first sample */
    int64_t nb;      /* samples in the tile */
    int64_t q0, q1;  /* pixel range of each sample's plane */
} conv_tile;

/* Fill the geometry for the output-pixel box of ov (y or dy), samples [n0, n1). */
sw_status conv_geom_init(conv_geom *g, const sw_view *ov, int64_t n0, int64_t n1, int64_t ci, const sw_window *p,
                         const char *name);
/* Recut g into tiles after its pixel range [qa, qb) changed. */
void conv_geom_tiles(conv_geom *g);
int64_t conv_geom_ntiles(const conv_geom *g);
conv_tile conv_geom_tile(const conv_geom *g, int64_t i);

/* Checks common to the three kernels on the weight-shaped view wv (w or dw):
 * rank 4, all Ci, the whole kernel window; sets *ci. */
sw_status conv_check_weight(const sw_view *wv, const sw_window *p, const char *name, int64_t *ci);
/* Pixels per (sample, channel) of a rank-4 view, at most INT32_MAX (a BLAS leading dimension). */
sw_status conv_checked_plane(const sw_view *v, const char *name, int64_t *plane);

/* ------------------------------------------------------------------ scratch (conv_geom.c) */

/* Per-thread scratch buffers that only grow (freed when the thread ends), so
 * that a training step, after the first, allocates nothing; one per kind. */
enum {
    CONV_SCRATCH_COL,    /* im2col / col2im buffer (K, tile_cols) */
    CONV_SCRATCH_TMP,    /* (Co_b, tile_cols) staging of tiles holding several samples */
    CONV_SCRATCH_PAD,    /* a padded channel plane of im2col / col2im */
    CONV_SCRATCH_SRC,    /* direct: the padded source region of a group of samples */
    CONV_SCRATCH_OUT,    /* direct: pixel-major output (or dy) of a group */
    CONV_SCRATCH_WPK,    /* direct: packed weights */
    CONV_SCRATCH_TAB,    /* direct: index tables */
    CONV_SCRATCH_PLAN,   /* direct: the sorted pixels or taps and their runs (conv_direct.c) */
    CONV_SCRATCH_IDX,    /* direct: the taps or pixels each run walks */
    CONV_SCRATCH_ACC,    /* direct: the weight gradient's accumulator */
    CONV_SCRATCH_MASKED, /* im2col + GEMM through a fused ReLU: dy masked by y > 0 */
    CONV_SCRATCH_KINDS
};
/* At least `bytes` bytes of this thread's scratch of one kind (64-byte aligned); NULL when out of memory. */
void *conv_scratch(int kind, size_t bytes);

/* ------------------------------------------------------------------ im2col / col2im (conv_im2col.c) */

/* Floats of the largest padded plane of any tile of g, saturated at INT64_MAX. */
int64_t conv_pad_floats(const sw_window *p, const conv_geom *g);
/* Whether im2col / col2im go through the padded plane (else they clip every row segment). */
int conv_use_pad_plane(const sw_window *p, const conv_geom *g, const sw_view *x);
/* col (K, q1-q0) at leading dimension ldcol = im2col of sample n, pixels [q0, q1) of g's box,
 * over the cn channels of x from global channel c0 (K = cn * kh * kw); p normalized
 * (conv_window); pad: conv_pad_floats(p, g) floats, or NULL to read x directly. */
void conv_im2col(const sw_view *x, int64_t c0, int64_t cn, const sw_window *p, const conv_geom *g, int64_t n,
                 int64_t q0, int64_t q1, float *col, int64_t ldcol, float *pad);
/* dx += col2im(dcol) for sample n, pixels [q0, q1), into the cn channels of dx from c0,
 * dropping what falls outside dx's view. */
void conv_col2im(const float *dcol, int64_t ldcol, const sw_window *p, const conv_geom *g, int64_t n, int64_t q0,
                 int64_t q1, sw_view *dx, int64_t c0, int64_t cn, float *pad);

/* ------------------------------------------------------------------ the direct path (conv_direct.c) */

/* Each returns 1 when it computed the kernel's result (or failed: *s says which), 0 when
 * the direct path does not take this call (the caller runs im2col + GEMM).  The views
 * are checked; wsub is w's rows for the output box's (dy's) channels, (Co_b, K); mask
 * (NULL, or the output y over dy's box): dy taken as (mask > 0 ? dy : 0) as it is copied. */
int conv_direct_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y, const sw_window *p,
                        int64_t ci, sw_status *s);
int conv_direct_backward_data(const float *wsub, const sw_view *dy, const sw_view *mask, sw_view *dx,
                              const sw_window *p, int64_t ci, sw_status *s);
int conv_direct_backward_weight(const sw_view *x, const sw_view *dy, const sw_view *mask, float *dw,
                                const sw_window *p, int64_t ci, sw_status *s);

/* ------------------------------------------------------------------ depthwise (conv_depthwise.c) */

/* Whether the depthwise loops take a call: a grouped window with one input channel per
 * group (Cig = ci == 1), unless the algorithm is SW_CONV_IM2COL. */
int conv_depthwise_takes(const sw_window *p, int64_t ci);
/* The three kernels for such calls (views checked by conv.c; p normalized); wsub, bias: the
 * rows of w and b for y's (dy's) channels. */
sw_status conv_depthwise_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y,
                                 const sw_window *p);
sw_status conv_depthwise_backward_data(const float *wsub, const sw_view *dy, sw_view *dx, const sw_window *p);
sw_status conv_depthwise_backward_weight(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p);

/* ------------------------------------------------------------------ AVX2 loops (conv_direct_avx2.c) */

/* Pixels (gather) or taps (reduce) per tile of both instruction sets' loops: conv_direct.c
 * cuts its sorted tables into tiles of this many. */
#define CONV_TILE 6

/* 1 when this CPU (and OS) runs AVX2 and FMA instructions. */
int conv_avx2_available(void);

/* Packed weights: columns in blocks of 16 (the last one 8 wide when ncol % 16 == 8);
 * the block starting at column c0 lies at wpk + c0 * K as a (K, width) row-major
 * matrix.  ncol is a multiple of 8. */

/* The loops walk tables of pixels (pq: offsets of the pixels' windows in src; prow: their
 * output rows, or dy rows) and of taps (toff: offsets within a window; trow: their rows of
 * the packed weights, or of the weight gradient's accumulator), any subset in any order:
 *
 * out[prow[i] * ldo + c] = sum over t < nt of wpk(trow[t], c) * src[pq[i] + toff[t]]
 * for i < n, c < ncol, in the order of the taps; wpk holds K rows.  nt may be 0 (zeros are
 * written). */
void conv_avx2_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                      const int32_t *trow, int64_t nt, const float *wpk, int64_t k, int64_t ncol, float *out,
                      int64_t ldo);
/* acc[trow[t] * lda + c] += sum over i < n of dyt[prow[i] * ldd + c] * src[pq[i] + toff[t]] for t < nt,
 * c < ncol: the sum over the pixels in their order, then added to acc. */
void conv_avx2_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                      const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd, int64_t ncol, float *acc,
                      int64_t lda);
/* dst[c * ldd + r] = act(src[r * lds + c] + bias[c]) for r < rows, c < cols (bias may be NULL;
 * act is a ReLU when relu, a NaN becoming 0 as in the im2col path, else the identity). */
void conv_avx2_transpose(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd,
                         const float *bias, int relu);
/* dst[c * ldd + r] = mask[r * lds + c] > 0 ? src[r * lds + c] : 0 (mask: the same layout as src). */
void conv_avx2_transpose_masked(const float *src, const float *mask, int64_t lds, int64_t rows, int64_t cols,
                                float *dst, int64_t ldd);

/* ------------------------------------------------------------------ AVX-512 loops (conv_direct_avx512.c) */

/* 1 when this CPU (and OS) runs AVX-512F, and AVX2 + FMA (the transposes stay AVX2's). */
int conv_avx512_available(void);
/* conv_avx2_gather and conv_avx2_reduce with 16-float vectors: the same arguments, the same bits. */
void conv_avx512_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                        const int32_t *trow, int64_t nt, const float *wpk, int64_t k, int64_t ncol, float *out,
                        int64_t ldo);
void conv_avx512_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                        const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd, int64_t ncol, float *acc,
                        int64_t lda);

#endif /* SHARDWISE_CPU_CONV_INTERNAL_H */
