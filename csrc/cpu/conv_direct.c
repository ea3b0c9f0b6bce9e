/*
 * conv_direct.c -- the direct convolution: no im2col matrix, no GEMM.
 *
 * Why: on the small-channel layers of the scaled ResNet-18 (16..64 channels,
 * 32x32..8x8 planes) im2col + SGEMM ran at 40-60 GFLOP/s of a 94 GFLOP/s SGEMM
 * peak.  The GEMMs there are thin (Co_b = 16 rows, or an inner dimension of
 * 16 in the data gradient), so OpenBLAS spends as much time packing the im2col
 * matrix -- nine copies of the input for a 3x3 kernel -- as multiplying it, and
 * the copies of small planes are rows of 4..16 floats.  The loops in
 * conv_direct_avx2.c instead read each input value once per 16 output columns
 * straight from a zero-padded copy of the input (docs/cpu_kernels.md has the
 * per-layer measurements).
 *
 * All three kernels use one data layout: the source region of a group of G
 * samples, src (G, C, rows, cols), holds every input row and column the output
 * box reads (zeros where the view has none: padding, or outside a partial
 * gradient's dy box), so that one output pixel and one tap are a sum of two
 * offsets into it:
 *
 *   forward          y[n, co, r, c]  = sum_k w(co, k) src[base(n, r, c) + off(k)]
 *                    k = (ci, ky, kx), off = ci*rows*cols + ky*cols + kx,
 *                    base = g*C*rows*cols + r*sh*cols + c*sw   (src: x over y's box)
 *   weight gradient  dw[co, k]       = sum over (n, r, c) of dy[n, co, r, c] src[base + off(k)]
 *                    (src: x over dy's box; dy transposed to pixel-major first)
 *   data gradient    dx[n, ci, iy, ix] = sum over (co, ky, kx) of w[co, ci, ky, kx] dy[n, co, ry, rx]
 *                    with ry = (iy + ph - ky) / sh where that divides; dx's pixels
 *                    fall in sh*sw classes by (iy + ph) mod sh and (ix + pw) mod sw,
 *                    each a gather over its own taps (src: dy over the rows and
 *                    columns dx's box needs)
 *
 * The loops write pixel-major (pixels, columns) blocks, transposed into the
 * NCHW views afterwards with the bias and ReLU applied.  Weights are packed per
 * call (they change every step), the index tables built per call; all of it in
 * the per-thread scratch cache.
 */
#include <stdatomic.h>  /* the process-wide algorithm choice */
#include <string.h>     /* memset, memcpy */

#include "conv_internal.h"
#include "../core/view.h"  /* sw_view_hi */

/* ------------------------------------------------------------------ choosing the path */

static _Atomic int algorithm = SW_CONV_AUTO;

sw_conv_algorithm sw_conv_get_algorithm(void) {
    return (sw_conv_algorithm)atomic_load_explicit(&algorithm, memory_order_relaxed);
}

sw_status sw_conv_set_algorithm(sw_conv_algorithm a) {
    if (a != SW_CONV_AUTO && a != SW_CONV_IM2COL && a != SW_CONV_DIRECT) {
        return SW_FAIL(SW_ERR_VALUE, "conv algorithm: unknown value %d", (int)a);
    }
    if (a == SW_CONV_DIRECT && !conv_avx2_available()) {
        return SW_FAIL(SW_ERR_VALUE, "conv algorithm: the direct convolution needs AVX2 and FMA, "
                                     "which this CPU does not have");
    }
    atomic_store_explicit(&algorithm, (int)a, memory_order_relaxed);
    return SW_OK;
}

static _Atomic int isa = SW_CONV_ISA_AUTO;

sw_conv_isa sw_conv_get_isa(void) {
    if (!conv_avx2_available()) {
        return SW_CONV_ISA_NONE;
    }
    int a = atomic_load_explicit(&isa, memory_order_relaxed);
    if (a == SW_CONV_ISA_AUTO) {
        return conv_avx512_available() ? SW_CONV_ISA_AVX512 : SW_CONV_ISA_AVX2;
    }
    return (sw_conv_isa)a;
}

sw_status sw_conv_set_isa(sw_conv_isa a) {
    if (a != SW_CONV_ISA_AUTO && a != SW_CONV_ISA_AVX2 && a != SW_CONV_ISA_AVX512) {
        return SW_FAIL(SW_ERR_VALUE, "conv instruction set: unknown value %d", (int)a);
    }
    if (a == SW_CONV_ISA_AVX512 && !conv_avx512_available()) {
        return SW_FAIL(SW_ERR_VALUE, "conv instruction set: this CPU has no AVX-512F");
    }
    if (a == SW_CONV_ISA_AVX2 && !conv_avx2_available()) {
        return SW_FAIL(SW_ERR_VALUE, "conv instruction set: this CPU has no AVX2 and FMA");
    }
    atomic_store_explicit(&isa, (int)a, memory_order_relaxed);
    return SW_OK;
}

/* Calls of each instruction set's loops since the process started (tests check which ran). */
static _Atomic long long loop_calls[2];

void sw_conv_isa_calls(long long *avx2, long long *avx512) {
    *avx2 = atomic_load_explicit(&loop_calls[0], memory_order_relaxed);
    *avx512 = atomic_load_explicit(&loop_calls[1], memory_order_relaxed);
}

/* Whether the AVX-512 loops run this call (else the AVX2 ones), counted for the tests. */
static int wide_loops(void) {
    int wide = sw_conv_get_isa() == SW_CONV_ISA_AVX512;
    atomic_fetch_add_explicit(&loop_calls[wide], 1, memory_order_relaxed);
    return wide;
}

/* The direct loops of the instruction set in effect (the same bits either way). */
static void gather(const float *src, const int32_t *base, const int32_t *orow, int64_t n, const int32_t *off,
                   int64_t k, const float *wpk, int64_t ncol, float *out, int64_t ldo) {
    if (wide_loops()) {
        conv_avx512_gather(src, base, orow, n, off, k, wpk, ncol, out, ldo);
    } else {
        conv_avx2_gather(src, base, orow, n, off, k, wpk, ncol, out, ldo);
    }
}

static void reduce(const float *src, const int32_t *base, int64_t n, const int32_t *off, int64_t k,
                   const float *dyt, int64_t ldd, int64_t ncol, float *acc, int64_t lda) {
    if (wide_loops()) {
        conv_avx512_reduce(src, base, n, off, k, dyt, ldd, ncol, acc, lda);
    } else {
        conv_avx2_reduce(src, base, n, off, k, dyt, ldd, ncol, acc, lda);
    }
}

static int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }

/* Whether the direct path takes a call whose loops produce `cols` output columns (at
 * least min_cols).  AUTO: when the columns fill the 8-float vectors to at least 3/4
 * (16 channels 1/1, 24 channels 3/4, 6 channels 3/4; 3 channels 3/8: the data gradient
 * of a 3-channel input layer ran 3x slower than im2col + GEMM) and the kernel is larger
 * than 1x1 (for 1x1 kernels im2col is a plain copy and the GEMM's inner dimension Ci is
 * the loops' whole sum: the downsampling 1x1 convolutions of the scaled ResNet-18 ran
 * 0-30% slower direct); DIRECT: always (tests).  The data gradient asks for 16 columns
 * (input channels): with one 8-wide block every broadcast feeds one multiply-add, and
 * its GEMM is not thin (M = Co*kh*kw): LeNet-5's 6-channel input gradient ran 1.27 ms
 * direct against 0.94 with im2col.  The forward pass and the weight gradient ask for one
 * whole vector (8 output channels): with LeNet-5's 6, once faster direct, im2col + GEMM
 * now wins (thread CPU time at batch 64, fwd / dw, ms: 1 -> 6 channels 5x5 on 32x32 0.94 /
 * 0.84 direct against 0.47 / 0.72; 2 -> 6 1.37 / 1.22 against 0.83 / 1.09; in a training
 * step LeNet-5's first forward took 2.9 of 8.3 ms direct), while at 16 output channels the
 * loops still win or tie (1 -> 16 5x5: 1.33 / 1.76 against 1.29 / 2.37).  AUTO also
 * leaves calls of more than DIRECT_MAX_COLS columns to im2col + GEMM: on the smallest
 * planes of the widest layers the groups of samples are short (a group's source region is
 * at most GROUP_FLOATS), and the loops re-read all the weights, or re-add the whole weight
 * gradient, for every few pixels.  Thread CPU time of each loop set against im2col + GEMM
 * with OpenBLAS's kernels for the same instruction set (the pairs an AVX2 machine and an
 * AVX-512 machine run; one thread of the 2-core Xeon, Sapphire Rapids, fwd / dx / dw, ms):
 *                              AVX2 loops, Haswell GEMM        AVX-512 loops, SkylakeX GEMM
 *   64->64 8x8 (batch 64)      4.9 / 6.9 / 6.4 vs 6.8 / 8.2 / 9.3        3.9 / 4.0 / 3.7 vs 6.6 / 5.7 / 7.1
 *   128->128 8x8 (batch 32)   12.7 / 13.0 / 12.5 vs 14.4 / 12.6 / 13.9   6.9 / 6.7 / 6.1 vs 10.2 / 7.2 / 8.0
 *   64->128 15x15 5x5 (b 64)  107 / 102 / 93 vs 118 / 116 / 104         72 / 71 / 69 vs 94 / 88 / 89
 *   192->192 7x7 (batch 64)   31.8 / 35.6 / 29.5 vs 37.7 / 36.9 / 34.8   20.2 / 20.2 / 23.0 vs 24.6 / 23.5 / 26.3
 *   256->256 8x8 (batch 32)   36.6 / 51.8 / 37.5 vs 41.4 / 55.4 / 37.7   22.3 / 22.6 / 28.7 vs 24.8 / 23.6 / 25.6
 *   256->256 4x4 (batch 32)    8.8 / 9.5 / 10.3 vs 9.9 / 9.9 / 11.8      6.5 / 7.3 / 9.4 vs 9.4 / 8.0 / 8.4
 *   384->384 4x4 (batch 32)                                              15.1 / 20.3 / 26.1 vs 19.5 / 17.6 / 23.9
 *   512->512 2x2 (batch 32)   15.0 / 23.4 / 30.0 vs 12.5 / 13.5 / 15.6   8.3 / 15.0 / 15.7 vs 8.5 / 9.7 / 9.2
 * (512 channels at 2x2: ResNet-50's last stage at 64 px.)  An earlier limit of 64 columns
 * for the AVX2 loops was measured against OpenBLAS's AVX-512 GEMM, a pair no machine runs. */
#define DIRECT_MAX_COLS 256

static int takes(int64_t cols, int64_t min_cols, const sw_window *p) {
    int a = (int)sw_conv_get_algorithm();
    if (a == SW_CONV_IM2COL || cols <= 0 || !conv_avx2_available()) {
        return 0;
    }
    return a == SW_CONV_DIRECT || (p->kh * p->kw > 1 && cols >= min_cols && cols <= DIRECT_MAX_COLS &&
                                   4 * cols >= 3 * round8(cols));
}

/* ------------------------------------------------------------------ source regions */

/* Rows [r_lo, r_lo + rows) x columns [c_lo, c_lo + cols) (global) of nch channels. */
typedef struct {
    int64_t nch, r_lo, c_lo, rows, cols;
    int64_t plane;    /* rows * cols */
    int64_t sample;   /* floats per sample: nch * plane */
} region;

/* Samples per group: about GROUP_PIXELS output pixels, so that small planes still
 * give the loops long runs, and a source region of at most GROUP_FLOATS (128 KiB,
 * half of L2) unless one sample needs more. */
#define GROUP_PIXELS 128
#define GROUP_FLOATS ((int64_t)1 << 15)

static int64_t group_size(int64_t pixels, int64_t sample_floats, int64_t samples) {
    int64_t g = conv_ceil_div(GROUP_PIXELS, conv_max(pixels, 1));
    g = conv_min(g, conv_max(1, GROUP_FLOATS / conv_max(sample_floats, 1)));
    return conv_max(1, conv_min(g, samples));
}

/* The region must not dwarf the view it copies (a stride far larger than the input
 * spans gigabytes of zeros: conv_use_pad_plane's rule), every offset into a group's
 * copy must fit the int32 tables, and the pixel-major output of a group (npix x ncol
 * floats) stays within DIRECT_MAX_FLOATS (im2col + GEMM tiles larger planes). */
#define DIRECT_MAX_FLOATS ((int64_t)1 << 24)

static int region_fits(const region *rg, const sw_view *v, const sw_window *p, int64_t group, int64_t npix,
                       int64_t ncol) {
    int64_t covered = (v->shape[2] + 2 * p->kh) * (v->shape[3] + 2 * p->kw);
    if (rg->rows > INT32_MAX / rg->cols || rg->plane > conv_max(CONV_COL_BUDGET, 4 * covered)) {
        return 0;
    }
    if (npix > DIRECT_MAX_FLOATS / conv_max(ncol, 1) / group) {
        return 0;
    }
    return rg->nch <= INT32_MAX / rg->plane && rg->sample <= INT32_MAX / group;
}

/* d[0..len) = m[i] > 0 ? s[i] : 0: relu_backward's select (eltwise.c), the same values. */
static void copy_masked(float *d, const float *s, const float *m, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        const float g = s[i];
        d[i] = m[i] > 0.0f ? g : 0.0f;
    }
}

/* src[g][c][i][j] = v[n + g, c, r_lo + i, c_lo + j] (v's channels from its first), 0 outside v's view;
 * through mask (NULL, or a view with v's box) as v[...] where mask > 0, else 0. */
static void region_fill(const region *rg, const sw_view *v, const sw_view *mask, int64_t n, int64_t gn,
                        float *src) {
    int64_t h = v->shape[2], w = v->shape[3];
    if (h == 0 || w == 0) {   /* an empty view (its data may be NULL): all padding */
        memset(src, 0, sizeof(float) * (size_t)(gn * rg->sample));
        return;
    }
    int64_t ja = conv_min(rg->cols, conv_max(0, v->lo[3] - rg->c_lo));    /* columns [ja, jb) lie in v */
    int64_t jb = conv_max(ja, conv_min(rg->cols, v->lo[3] + w - rg->c_lo));
    for (int64_t g = 0; g < gn; g++) {
        for (int64_t c = 0; c < rg->nch; c++) {
            const int64_t at = ((n + g - v->lo[0]) * v->shape[1] + c) * h * w;
            const float *plane = v->data + at, *mplane = mask ? mask->data + at : NULL;
            float *d = src + g * rg->sample + c * rg->plane;
            for (int64_t i = 0; i < rg->rows; i++, d += rg->cols) {
                int64_t iy = rg->r_lo + i - v->lo[2];
                if (iy < 0 || iy >= h || jb == ja) {
                    memset(d, 0, sizeof(float) * (size_t)rg->cols);
                    continue;
                }
                memset(d, 0, sizeof(float) * (size_t)ja);
                const int64_t from = iy * w + rg->c_lo + ja - v->lo[3];
                if (mplane) {
                    copy_masked(d + ja, plane + from, mplane + from, jb - ja);
                } else {
                    memcpy(d + ja, plane + from, sizeof(float) * (size_t)(jb - ja));
                }
                memset(d + jb, 0, sizeof(float) * (size_t)(rg->cols - jb));
            }
        }
    }
}

/* The region x (or, for the weight gradient, the same x) covers for the output box ov. */
static region region_for_output(const sw_view *ov, int64_t nch, const sw_window *p) {
    region rg;
    rg.nch = nch;
    rg.r_lo = ov->lo[2] * p->sh - p->ph;
    rg.c_lo = ov->lo[3] * p->sw - p->pw;
    rg.rows = (ov->shape[2] - 1) * p->sh + p->kh;
    rg.cols = (ov->shape[3] - 1) * p->sw + p->kw;
    rg.plane = rg.rows * rg.cols;
    rg.sample = nch * rg.plane;
    return rg;
}

/* off[(c, ky, kx)] = c*plane + ky*cols + kx; base[(g, r, c)] = g*sample + r*sh*cols + c*sw over the
 * (G, Ho_b, Wo_b) pixels of the output box ov. */
static void tables_for_output(const region *rg, const sw_view *ov, const sw_window *p, int64_t group, int32_t *off,
                              int32_t *base) {
    int32_t *o = off;
    for (int64_t c = 0; c < rg->nch; c++) {
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                *o++ = (int32_t)(c * rg->plane + ky * rg->cols + kx);
            }
        }
    }
    for (int64_t g = 0; g < group; g++) {
        for (int64_t r = 0; r < ov->shape[2]; r++) {
            for (int64_t c = 0; c < ov->shape[3]; c++) {
                *base++ = (int32_t)(g * rg->sample + r * p->sh * rg->cols + c * p->sw);
            }
        }
    }
}

/* Packed weights (conv_internal.h's layout) of the (cols, k) matrix m: value (kk, c) = m[c*k + kk]
 * for c < cols, zero in the columns up to ncol. */
static void pack_rows(const float *m, int64_t cols, int64_t k, int64_t ncol, float *wpk) {
    for (int64_t c0 = 0; c0 < ncol; c0 += 16) {
        int64_t width = conv_min(16, ncol - c0);
        float *blk = wpk + c0 * k;
        for (int64_t kk = 0; kk < k; kk++) {
            for (int64_t j = 0; j < width; j++) {
                blk[kk * width + j] = c0 + j < cols ? m[(c0 + j) * k + kk] : 0.0f;
            }
        }
    }
}

/* Scratch of a call; *s set (and NULL returned) when out of memory. */
static void *scratch(int kind, int64_t elements, size_t size, const char *name, sw_status *s) {
    void *p = conv_scratch(kind, (size_t)conv_max(elements, 1) * size);
    if (!p && *s == SW_OK) {
        *s = SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for %lld scratch elements", name, (long long)elements);
    }
    return p;
}

/* ------------------------------------------------------------------ forward, weight gradient */

/* What the forward pass and the weight gradient share: the source region of x over the
 * output box ov (y, or dy), its tables, and scratch for the pixel-major (npix, ncol)
 * blocks of a group (out) and a (K, ncol) matrix (mat: the packed weights, or the
 * weight gradient's accumulator). */
typedef struct {
    region rg;
    int64_t co, k, ncol, npix, group;
    float *src, *out, *mat;
    int32_t *off, *base;
} over_output;

/* 0 when the direct path does not take the call; else 1, with *s set (out of memory). */
static int over_output_init(over_output *o, const sw_view *x, const sw_view *ov, const sw_window *p, int64_t ci,
                            int mat_kind, const char *fn, sw_status *s) {
    o->co = ov->shape[1];
    o->k = ci * p->kh * p->kw;
    o->ncol = round8(o->co);
    o->npix = ov->shape[2] * ov->shape[3];
    o->rg = region_for_output(ov, ci, p);
    o->group = group_size(o->npix, o->rg.sample, ov->shape[0]);
    if (!takes(o->co, 8, p) || !region_fits(&o->rg, x, p, o->group, o->npix, o->ncol)) {
        return 0;
    }
    *s = SW_OK;
    o->src = scratch(CONV_SCRATCH_SRC, o->group * o->rg.sample, sizeof(float), fn, s);
    o->out = scratch(CONV_SCRATCH_OUT, o->group * o->npix * o->ncol, sizeof(float), fn, s);
    o->mat = scratch(mat_kind, o->k * o->ncol, sizeof(float), fn, s);
    o->off = scratch(CONV_SCRATCH_TAB, o->k + o->group * o->npix, sizeof(int32_t), fn, s);
    if (*s == SW_OK) {
        o->base = o->off + o->k;
        tables_for_output(&o->rg, ov, p, o->group, o->off, o->base);
    }
    return 1;
}

int conv_direct_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y, const sw_window *p,
                        int64_t ci, sw_status *s) {
    over_output o;
    if (!over_output_init(&o, x, y, p, ci, CONV_SCRATCH_WPK, "conv2d_forward", s)) {
        return 0;
    }
    if (*s != SW_OK) {
        return 1;
    }
    pack_rows(wsub, o.co, o.k, o.ncol, o.mat);
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n += o.group) {
        int64_t gn = conv_min(o.group, sw_view_hi(y, 0) - n);
        region_fill(&o.rg, x, NULL, n, gn, o.src);
        gather(o.src, o.base, NULL, gn * o.npix, o.off, o.k, o.mat, o.ncol, o.out, o.ncol);
        for (int64_t g = 0; g < gn; g++) {   /* (P, ncol) -> y (Co_b, P), with the bias and ReLU */
            conv_avx2_transpose(o.out + g * o.npix * o.ncol, o.ncol, o.npix, o.co,
                                y->data + (n + g - y->lo[0]) * o.co * o.npix, o.npix, bias, p->relu);
        }
    }
    return 1;
}

int conv_direct_backward_weight(const sw_view *x, const sw_view *dy, const sw_view *mask, float *dw,
                                const sw_window *p, int64_t ci, sw_status *s) {
    over_output o;
    if (!over_output_init(&o, x, dy, p, ci, CONV_SCRATCH_ACC, "conv2d_backward_weight", s)) {
        return 0;
    }
    if (*s != SW_OK) {
        return 1;
    }
    memset(o.out, 0, sizeof(float) * (size_t)(o.group * o.npix * o.ncol));   /* columns co .. ncol stay zero */
    memset(o.mat, 0, sizeof(float) * (size_t)(o.k * o.ncol));
    for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0); n += o.group) {
        int64_t gn = conv_min(o.group, sw_view_hi(dy, 0) - n);
        region_fill(&o.rg, x, NULL, n, gn, o.src);
        for (int64_t g = 0; g < gn; g++) {   /* dy (Co_b, P) -> (P, ncol), through the mask */
            const int64_t at = (n + g - dy->lo[0]) * o.co * o.npix;
            if (mask) {
                conv_avx2_transpose_masked(dy->data + at, mask->data + at, o.npix, o.co, o.npix,
                                           o.out + g * o.npix * o.ncol, o.ncol);
            } else {
                conv_avx2_transpose(dy->data + at, o.npix, o.co, o.npix, o.out + g * o.npix * o.ncol, o.ncol, NULL, 0);
            }
        }
        reduce(o.src, o.base, gn * o.npix, o.off, o.k, o.out, o.ncol, o.ncol, o.mat, o.ncol);
    }
    conv_avx2_transpose(o.mat, o.ncol, o.k, o.co, dw, o.k, NULL, 0);   /* (K, ncol) -> dw (Co_b, K) */
    return 1;
}

/* ------------------------------------------------------------------ data gradient */

/* Taps of one class: kernel rows a, a + sh, ... < kh (and columns likewise). */
static int64_t taps(int64_t a, int64_t s, int64_t k) { return a < k ? (k - 1 - a) / s + 1 : 0; }

static int64_t mod(int64_t a, int64_t s) { return (a % s + s) % s; }

/* dx rows (or columns) [lo, lo + len) with (i + pad) mod s == a. */
static int64_t class_count(int64_t lo, int64_t len, int64_t pad, int64_t s, int64_t a) {
    int64_t first = lo + mod(a - lo - pad, s);   /* the first such i >= lo */
    return first < lo + len ? (lo + len - 1 - first) / s + 1 : 0;
}

int conv_direct_backward_data(const float *wsub, const sw_view *dy, const sw_view *mask, sw_view *dx,
                              const sw_window *p, int64_t ci, sw_status *s) {
    const char *fn = "conv2d_backward_data";
    int64_t co = dy->shape[1], ncol = round8(ci), kfull = co * p->kh * p->kw, kw_all = ci * p->kh * p->kw;
    int64_t x0 = dx->lo[2], hx = dx->shape[2], y0 = dx->lo[3], wx = dx->shape[3], npix = hx * wx;
    region rg;   /* dy's rows ry = (iy + ph - ky) / sh for the rows iy of dx's box, and columns likewise */
    rg.nch = co;
    rg.r_lo = conv_floor_div(x0 + p->ph - (p->kh - 1), p->sh);
    rg.c_lo = conv_floor_div(y0 + p->pw - (p->kw - 1), p->sw);
    rg.rows = conv_floor_div(x0 + hx - 1 + p->ph, p->sh) - rg.r_lo + 1;
    rg.cols = conv_floor_div(y0 + wx - 1 + p->pw, p->sw) - rg.c_lo + 1;
    rg.plane = rg.rows * rg.cols;
    rg.sample = co * rg.plane;
    int64_t group = group_size(npix, rg.sample, dx->shape[0]);
    if (!takes(ci, 16, p) || !region_fits(&rg, dy, p, group, npix, ncol)) {
        return 0;
    }
    *s = SW_OK;
    float *src = scratch(CONV_SCRATCH_SRC, group * rg.sample, sizeof(float), fn, s);
    float *out = scratch(CONV_SCRATCH_OUT, group * npix * ncol, sizeof(float), fn, s);
    float *wpk = scratch(CONV_SCRATCH_WPK, kfull * ncol, sizeof(float), fn, s);
    int32_t *off = scratch(CONV_SCRATCH_TAB, kfull + 2 * group * npix, sizeof(int32_t), fn, s);
    if (*s != SW_OK) {
        return 1;
    }
    int32_t *base = off + kfull, *orow = base + group * npix;
    /* per class (ay, ax): its taps' packed weights and offsets, then its pixels (sample-major, so
     * a short last group uses a prefix); kat / pat: where the class's taps / pixels start */
    int64_t nclass = p->sh * p->sw, kat = 0, pat = 0;
    for (int64_t cl = 0; cl < nclass; cl++) {
        int64_t ay = cl / p->sw, ax = cl % p->sw, nky = taps(ay, p->sh, p->kh), nkx = taps(ax, p->sw, p->kw);
        int64_t kc = co * nky * nkx;
        float *w = wpk + kat * ncol;   /* the class's (kc, ncol) matrix in conv_internal.h's layout */
        for (int64_t c0 = 0; c0 < ncol; c0 += 16) {
            int64_t width = conv_min(16, ncol - c0);
            float *blk = w + c0 * kc;
            for (int64_t kk = 0; kk < kc; kk++) {   /* kk = (o, ty, tx): tap (ay + ty*sh, ax + tx*sw) */
                int64_t o = kk / (nky * nkx), ky = ay + (kk / nkx % nky) * p->sh, kx = ax + (kk % nkx) * p->sw;
                for (int64_t j = 0; j < width; j++) {
                    int64_t c = c0 + j;
                    blk[kk * width + j] = c < ci ? wsub[o * kw_all + (c * p->kh + ky) * p->kw + kx] : 0.0f;
                }
                if (c0 == 0) {
                    off[kat + kk] = (int32_t)(o * rg.plane - (ky - ay) / p->sh * rg.cols - (kx - ax) / p->sw);
                }
            }
        }
        for (int64_t g = 0; g < group; g++) {
            for (int64_t iy = x0; iy < x0 + hx; iy++) {
                if (mod(iy + p->ph, p->sh) != ay) {
                    continue;
                }
                for (int64_t ix = y0; ix < y0 + wx; ix++) {
                    if (mod(ix + p->pw, p->sw) != ax) {
                        continue;
                    }
                    base[pat] = (int32_t)(g * rg.sample + ((iy + p->ph - ay) / p->sh - rg.r_lo) * rg.cols +
                                          (ix + p->pw - ax) / p->sw - rg.c_lo);
                    orow[pat++] = (int32_t)(g * npix + (iy - x0) * wx + (ix - y0));
                }
            }
        }
        kat += kc;
    }
    for (int64_t n = dx->lo[0]; n < sw_view_hi(dx, 0); n += group) {
        int64_t gn = conv_min(group, sw_view_hi(dx, 0) - n);
        region_fill(&rg, dy, mask, n, gn, src);
        kat = pat = 0;
        for (int64_t cl = 0; cl < nclass; cl++) {
            int64_t ay = cl / p->sw, ax = cl % p->sw;
            int64_t kc = co * taps(ay, p->sh, p->kh) * taps(ax, p->sw, p->kw);
            int64_t per = class_count(x0, hx, p->ph, p->sh, ay) * class_count(y0, wx, p->pw, p->sw, ax);
            gather(src, base + pat, orow + pat, gn * per, off + kat, kc, wpk + kat * ncol, ncol, out,
                             ncol);
            kat += kc;
            pat += group * per;
        }
        for (int64_t g = 0; g < gn; g++) {
            conv_avx2_transpose(out + g * npix * ncol, ncol, npix, ci, dx->data + (n + g - dx->lo[0]) * ci * npix,
                                npix, NULL, 0);
        }
    }
    return 1;
}
