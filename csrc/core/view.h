/*
 * view.h -- a view of a tensor piece (sw_view), a convolution or pooling window
 * (sw_window), and the small helpers every backend's kernels share on them: index
 * math between global coordinates and a view's local buffer, and the validation
 * every kernel does before touching memory.  In core/ because the runtime (exec/),
 * the CPU kernels (cpu/) and the CUDA backend (cuda/) all speak in views.
 *
 * All checks return SW_OK or SW_ERR_VALUE with a message naming the view
 * (`name`, e.g. "conv2d_forward: x") so a bad call from the executor reads as
 * one line.  Ranges are half-open [lo, hi); an empty range is covered by any
 * view.  Nothing here allocates.
 */
#ifndef SHARDWISE_CORE_VIEW_H
#define SHARDWISE_CORE_VIEW_H

#include <stdint.h>  /* int64_t */

#include "../internal.h"  /* sw_status, SW_MAX_RANK */

/* A piece of a tensor: a local, contiguous, row-major buffer and the global coordinates of
 * its first element (kernels work in global coordinates; cpu/kernels.h has the picture). */
typedef struct {
    float *data;                 /* row-major, contiguous, prod(shape) floats */
    int rank;
    int64_t lo[SW_MAX_RANK];     /* global coordinates of data[0] */
    int64_t shape[SW_MAX_RANK];  /* extent of the view per dimension */
} sw_view;

typedef struct {
    int64_t kh, kw;   /* kernel (pooling window) */
    int64_t sh, sw;   /* stride */
    int64_t ph, pw;   /* padding */
    int relu;         /* fuse a ReLU into the forward output */
    int64_t dh, dw;   /* conv2d: dilation, the distance between taps; 0 reads as 1, so a window
                         initialized without them is a plain one */
    int64_t group_co; /* conv2d: output channels per group (cog); 0: one group, a dense convolution */
} sw_window;

/* ---- index math (no checks) ---- */

/* Number of elements of the view (0 if any extent is 0). */
int64_t sw_view_volume(const sw_view *v);

/* One past the last global coordinate of dimension d. */
static inline int64_t sw_view_hi(const sw_view *v, int d) { return v->lo[d] + v->shape[d]; }

/* Row-major element strides of the local buffer: strides[rank-1] == 1. */
void sw_view_strides(const sw_view *v, int64_t *strides);

/* Local offset of the global index idx[0..rank-1] (no bounds check). */
int64_t sw_view_offset(const sw_view *v, const int64_t *idx);

/* Walking a box [lo, hi) in contiguous runs through views that each hold it: a run
 * is the box's innermost extent, lengthened over the next dimensions out for as long
 * as every view holds exactly the box's range in the dimensions it spans, so that
 * consecutive rows lie end to end in every buffer -- one run over the whole box when
 * the views are the box's own (a 16x32x32 activation: one loop of 16384 floats, not
 * 512 of 32).  Offsets of idx in each view: sw_view_offset. */
typedef struct {
    int rank, outer;   /* a run spans dimensions outer .. rank-1 */
    int64_t len;       /* elements per run */
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    int64_t idx[SW_MAX_RANK];   /* the global index of the current run's first element */
} sw_runs;
/* The first run; 0 when the box is empty. */
int sw_runs_first(sw_runs *r, const sw_view *const *views, int nviews, const int64_t *lo, const int64_t *hi,
                  int rank);
/* The next run; 0 after the last. */
int sw_runs_next(sw_runs *r);

/* 1 if the global index lies inside the view's box. */
int sw_view_contains(const sw_view *v, const int64_t *idx);

/* Intersection of the boxes of a and b (same rank): lo/hi per dimension;
 * returns its volume (0 when empty, and then lo/hi may be inverted). */
int64_t sw_view_intersect(const sw_view *a, const sw_view *b, int64_t *lo, int64_t *hi);

/* ---- validation ---- */

/* v non-NULL, rank == `rank`, every extent >= 0, data non-NULL when the volume
 * is > 0, the volume representable in int64, and |lo| and every extent at most
 * 2^36 (so index arithmetic on global coordinates cannot overflow). */
sw_status sw_view_check(const sw_view *v, int rank, const char *name);
/* An element-wise output: not NULL, of any rank 1..SW_MAX_RANK, well formed. */
sw_status sw_view_check_elementwise_out(const sw_view *out, const char *name);
/* An element-wise input: not NULL, of out's rank, covering out's whole box. */
sw_status sw_view_check_elementwise_in(const sw_view *in, const char *in_name, const sw_view *out,
                                       const char *out_name);

/* 1 if a and b have the same rank and box (lo and shape), so that equal offsets are equal elements. */
int sw_view_same_box(const sw_view *a, const sw_view *b);

/* 1 if [lo, hi) of dimension d lies inside the view (always 1 when lo >= hi). */
int sw_view_covers(const sw_view *v, int d, int64_t lo, int64_t hi);

/* outer's dimension od covers inner's dimension id; otherwise SW_ERR_VALUE
 * "<oname> does not cover <iname>'s <what> range [a, b) (it has [c, d))". */
sw_status sw_view_check_covers(const sw_view *outer, int od, const char *oname, const sw_view *inner, int id,
                               const char *iname, const char *what);

/* Dimension d of v is exactly [lo, lo + extent); otherwise SW_ERR_VALUE. */
sw_status sw_view_check_range(const sw_view *v, int d, int64_t lo, int64_t extent, const char *name,
                              const char *what);

/* Kernel and stride >= 1, padding, dilation and channels per group >= 0, all below 2^24
 * (channels per group below 2^36). */
sw_status sw_window_check(const sw_window *p, const char *name);

/* ---- matmul boxes (CPU matmul.c and CUDA blas.c check the same way) ----
 * Views of rank r >= 2: y (.., M, N) = op(a) (.., M, K) op(b) (.., K, N), op a transpose when
 * ta / tb; the leading r - 2 dimensions are a batch, iterated over the output's box. */

/* v holds rows [r0, r0 + nr), columns [c0, c0 + nc) of its last two dimensions and out's batch range. */
int sw_matmul_holds(const sw_view *v, const sw_view *out, int64_t r0, int64_t nr, int64_t c0, int64_t nc);
/* 1 if a and b hold what y's box multiplies (K: a's extent along its reduction dimension). */
int sw_matmul_forward_boxes(const sw_view *a, const sw_view *b, int ta, int tb, const sw_view *y);
/* 1 if dx (the gradient of operand `slot`, 0: a, 1: b), dy and the other operand agree: dx holds
 * dy's batch and its M (slot 0) or N (slot 1) range whole, and the other operand holds the part
 * of K that dx holds. */
int sw_matmul_backward_boxes(const sw_view *a, const sw_view *b, const sw_view *dy, const sw_view *dx, int ta,
                             int tb, int slot);
/* The next batch index of out's box (dimensions 0 .. rank-3); 0 after the last. */
int sw_matmul_next_batch(const sw_view *out, int64_t *batch);

/* Every value fits the 32-bit integers of the BLAS interface (scipy-openblas32). */
sw_status sw_check_blas_dims(const char *name, int count, const int64_t *dims);

#endif /* SHARDWISE_CORE_VIEW_H */
