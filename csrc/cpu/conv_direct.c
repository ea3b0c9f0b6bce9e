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
#include <stdlib.h>     /* qsort */
#include <string.h>     /* memset, memcpy, memcmp */

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
static void gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                   const int32_t *trow, int64_t nt, const float *wpk, int64_t k, int64_t ncol, float *out,
                   int64_t ldo) {
    if (wide_loops()) {
        conv_avx512_gather(src, pq, prow, n, toff, trow, nt, wpk, k, ncol, out, ldo);
    } else {
        conv_avx2_gather(src, pq, prow, n, toff, trow, nt, wpk, k, ncol, out, ldo);
    }
}

static void reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                   const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd, int64_t ncol, float *acc,
                   int64_t lda) {
    if (wide_loops()) {
        conv_avx512_reduce(src, pq, prow, n, toff, trow, nt, dyt, ldd, ncol, acc, lda);
    } else {
        conv_avx2_reduce(src, pq, prow, n, toff, trow, nt, dyt, ldd, ncol, acc, lda);
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

/* ------------------------------------------------------------------ skipping the padding
 *
 * A window that hangs over the edge of the input reads zeros (padding, or the rows and
 * columns outside a partial view that region_fill zeroes): a 5 x 5 kernel with padding 2
 * on the scaled AlexNet's 15 x 15 planes multiplies zeros in 15% of its taps, a 3 x 3 one
 * with padding 1 on 7 x 7 planes in 18%; oneDNN skips them.  The taps of one output pixel
 * that read real values form a box -- kernel rows [y0, y1) x columns [x0, x1), in every
 * channel -- and so do the pixels one tap reads real values for (output rows x columns).
 *
 * The loops walk tables of items (the gather's pixels, the reduce's taps) in tiles of
 * CONV_TILE, each tile against a table of the other side (taps, or pixels).  A schedule
 * sorts the items by their box, so that equal boxes lie together, cuts them into tiles,
 * gives each run of tiles with the same union box one loop call, and lists the other side
 * for each distinct union: a tile then multiplies only what the union of its items' boxes
 * holds.  (On AlexNet's conv2 the tiles walk 0.86 of the taps, against 0.84 real and 1.0
 * before; conv3 and conv4, three samples a group, 0.83 against 0.80: fill_tiles.)
 *
 * Numerics: a skipped product was a zero added to the sum, x + 0 * w = x for finite w:
 * the sums are the same but for the sign of a zero sum and 0 * inf (the NaN it made is
 * gone; PyTorch's oneDNN does not multiply padding either).  The schedule is built from
 * the shapes alone and both instruction sets walk it tile for tile, so they still give
 * the same bits.
 */

typedef struct {
    int32_t lo, hi;   /* [lo, hi); empty when lo >= hi */
} span1;

typedef struct {
    span1 y, x;
} span2;

static int span2_empty(span2 b) { return b.y.lo >= b.y.hi || b.x.lo >= b.x.hi; }

/* [lo, hi) clipped to [0, n) */
static span1 clip(int64_t lo, int64_t hi, int64_t n) {
    span1 s = {(int32_t)conv_min(conv_max(lo, 0), n), (int32_t)conv_min(conv_max(hi, 0), n)};
    return s;
}

/* Table entries over (o, y, x), o < the outer count given at each use, y < ny, x < nx:
 * a = a0 + o*ia[0] + y*ia[1] + x*ia[2] (an offset into the source region) and b likewise
 * (a row of the weights, the weight gradient, the pixel-major output or dy). */
typedef struct {
    int64_t ny, nx;
    int64_t a0, ia[3], b0, ib[3];
} grid;

/* The entries of g with o < nouter, (y, x) in box b, in (o, y, x) order; their count. */
static int64_t grid_fill(const grid *g, int64_t nouter, span2 b, int32_t *a, int32_t *bv) {
    int64_t n = 0;
    if (span2_empty(b)) {
        return 0;
    }
    for (int64_t o = 0; o < nouter; o++) {
        for (int64_t y = b.y.lo; y < b.y.hi; y++) {
            int64_t ay = g->a0 + o * g->ia[0] + y * g->ia[1], by = g->b0 + o * g->ib[0] + y * g->ib[1];
            for (int64_t x = b.x.lo; x < b.x.hi; x++, n++) {
                a[n] = (int32_t)(ay + x * g->ia[2]);
                bv[n] = (int32_t)(by + x * g->ib[2]);
            }
        }
    }
    return n;
}

typedef struct {
    span2 box;       /* what the item reads real values with, on the other side */
    int32_t a, b;    /* its table values */
    int32_t i;       /* its place before sorting: the sort is total, so the schedule is fixed */
} item;

static int item_cmp(const void *p, const void *q) {
    const item *u = p, *v = q;
    const int32_t ku[5] = {u->box.y.lo, u->box.y.hi, u->box.x.lo, u->box.x.hi, u->i};
    const int32_t kv[5] = {v->box.y.lo, v->box.y.hi, v->box.x.lo, v->box.x.hi, v->i};
    for (int j = 0; j < 5; j++) {
        if (ku[j] != kv[j]) {
            return ku[j] < kv[j] ? -1 : 1;
        }
    }
    return 0;
}

typedef struct {
    int64_t at, len;   /* items [at, at + len): whole tiles (the last run may end in a short one) */
    int64_t box;       /* their tiles' union: the schedule's box number */
} run;

typedef struct {
    int64_t n;                  /* items */
    int32_t *a, *b;             /* their table values, sorted by box */
    run *runs;
    int64_t nruns;
    span2 *boxes;               /* the distinct unions */
    int64_t nboxes;
    int64_t per;                /* the other side's table of box j: ta, tb + j * per, */
    int32_t *ta, *tb;           /* (o, y, x) order, area[j] entries per outer index */
    int64_t *area;
} schedule;

/* A bump allocator over one scratch buffer (sizes known beforehand). */
typedef struct {
    char *at;
    size_t left;
} arena;

static size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

static void *take(arena *ar, size_t bytes) {
    bytes = round64(bytes);
    if (bytes > ar->left) {
        return NULL;   /* never: callers size the arena with the functions below */
    }
    void *p = ar->at;
    ar->at += bytes;
    ar->left -= bytes;
    return p;
}

static int64_t ntiles(int64_t n) { return (n + CONV_TILE - 1) / CONV_TILE; }

/* Bytes schedule_items takes for n items. */
static size_t schedule_bytes(int64_t n) {
    size_t t = (size_t)ntiles(n) + 1;
    return 2 * round64((size_t)n * sizeof(item)) + 2 * round64((size_t)n * sizeof(int32_t)) +
           round64(t * sizeof(run)) + round64(t * sizeof(span2)) + round64(t * sizeof(int64_t)) +
           6 * round64((size_t)n * sizeof(int64_t));   /* fill_tiles' classes */
}

/* The union of the non-empty boxes of items it[0..m) (all zeros when there is none). */
static span2 tile_union(const item *it, int64_t m) {
    span2 u = {{0, 0}, {0, 0}};
    int any = 0;
    for (int64_t j = 0; j < m; j++) {
        span2 b = it[j].box;
        if (span2_empty(b)) {
            continue;
        }
        if (!any) {
            u = b;
            any = 1;
        } else {
            u.y.lo = u.y.lo < b.y.lo ? u.y.lo : b.y.lo;
            u.y.hi = u.y.hi > b.y.hi ? u.y.hi : b.y.hi;
            u.x.lo = u.x.lo < b.x.lo ? u.x.lo : b.x.lo;
            u.x.hi = u.x.hi > b.x.hi ? u.x.hi : b.x.hi;
        }
    }
    return u;
}

static int64_t span2_area(span2 b) {
    return span2_empty(b) ? 0 : (int64_t)(b.y.hi - b.y.lo) * (b.x.hi - b.x.lo);
}

/* What the loops walk for items in this order: the sum of their tiles' union areas. */
static int64_t tiles_cost(const item *it, int64_t n) {
    int64_t cost = 0;
    for (int64_t at = 0; at < n; at += CONV_TILE) {
        cost += span2_area(tile_union(it + at, conv_min(CONV_TILE, n - at)));
    }
    return cost;
}

/* a inside b (an empty a: inside anything) */
static int span2_inside(span2 a, span2 b) {
    return span2_empty(a) || (b.y.lo <= a.y.lo && a.y.hi <= b.y.hi && b.x.lo <= a.x.lo && a.x.hi <= b.x.hi);
}

/* Another order of the items `it` (sorted by box) into `out`: the classes (runs of equal boxes),
 * the largest first, in whole tiles, a class's last short tile filled up with items whose boxes
 * lie inside its box (those of the largest boxes first), which then cost nothing there.  On
 * AlexNet's conv2 (15 x 15, 5 x 5, padding 2) the sorted order walks 0.88 of the taps, this
 * 0.86 (0.84 are real); on other shapes it walks more (16 x 16, 3 x 3: 0.94 against 0.93), so
 * schedule_items takes whichever walks less.  `cls`: 6n scratch int64s. */
static void fill_tiles(const item *it, int64_t n, item *out, int64_t *cls) {
    int64_t nk = 0, *start = cls, *len = cls + n, *next = cls + 2 * n, *order = cls + 3 * n, *fill = cls + 4 * n;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || memcmp(&it[i].box, &it[i - 1].box, sizeof(span2)) != 0) {
            start[nk] = next[nk] = i;
            len[nk++] = 0;
        }
        len[nk - 1]++;
    }
    /* order: more items first, then the larger box, then the sorted order; fill: the larger box
     * first, then the sorted order (insertion sorts: few classes) */
    for (int64_t k = 0; k < nk; k++) {
        int64_t j = k;
        for (; j > 0; j--) {
            int64_t q = order[j - 1];
            int64_t aq = span2_area(it[start[q]].box), ak = span2_area(it[start[k]].box);
            if (len[q] > len[k] || (len[q] == len[k] && aq >= ak)) {
                break;
            }
            order[j] = q;
        }
        order[j] = k;
        for (j = k; j > 0 && span2_area(it[start[fill[j - 1]]].box) < span2_area(it[start[k]].box); j--) {
            fill[j] = fill[j - 1];
        }
        fill[j] = k;
    }
    int64_t at = 0;
    for (int64_t oi = 0; oi < nk; oi++) {
        const int64_t k = order[oi];
        const span2 box = it[start[k]].box;
        while (next[k] < start[k] + len[k]) {
            int64_t m = conv_min(CONV_TILE, start[k] + len[k] - next[k]), free = CONV_TILE - m;
            memcpy(out + at, it + next[k], (size_t)m * sizeof(item));
            at += m;
            next[k] += m;
            for (int64_t fi = 0; fi < nk && free > 0; fi++) {
                const int64_t c = fill[fi];
                int64_t take_n = conv_min(free, start[c] + len[c] - next[c]);
                if (c == k || take_n <= 0 || !span2_inside(it[start[c]].box, box)) {
                    continue;
                }
                memcpy(out + at, it + next[c], (size_t)take_n * sizeof(item));
                at += take_n;
                next[c] += take_n;
                free -= take_n;
            }
        }
    }
}

/* The items of g with o < nouter, item (o, y, x) reading real values with the box ys[y] x xs[x]:
 * sorted by box, cut into tiles, runs of tiles with equal unions, the distinct unions. */
static void schedule_items(schedule *sc, arena *ar, const grid *g, int64_t nouter, const span1 *ys,
                           const span1 *xs) {
    int64_t n = nouter * g->ny * g->nx, t = ntiles(n);
    item *it = take(ar, (size_t)n * sizeof(item));
    sc->n = n;
    sc->a = take(ar, (size_t)n * sizeof(int32_t));
    sc->b = take(ar, (size_t)n * sizeof(int32_t));
    sc->runs = take(ar, (size_t)(t + 1) * sizeof(run));
    sc->boxes = take(ar, (size_t)(t + 1) * sizeof(span2));
    sc->area = take(ar, (size_t)(t + 1) * sizeof(int64_t));
    int64_t i = 0;
    for (int64_t o = 0; o < nouter; o++) {
        for (int64_t y = 0; y < g->ny; y++) {
            for (int64_t x = 0; x < g->nx; x++, i++) {
                span2 b = {ys[y], xs[x]};
                if (span2_empty(b)) {   /* one key for all empty boxes */
                    b.y.lo = b.y.hi = b.x.lo = b.x.hi = 0;
                }
                it[i].box = b;
                it[i].a = (int32_t)(g->a0 + o * g->ia[0] + y * g->ia[1] + x * g->ia[2]);
                it[i].b = (int32_t)(g->b0 + o * g->ib[0] + y * g->ib[1] + x * g->ib[2]);
                it[i].i = (int32_t)i;
            }
        }
    }
    qsort(it, (size_t)n, sizeof(item), item_cmp);
    item *alt = take(ar, (size_t)n * sizeof(item));
    fill_tiles(it, n, alt, take(ar, 6 * (size_t)n * sizeof(int64_t)));
    if (tiles_cost(alt, n) < tiles_cost(it, n)) {
        it = alt;
    }
    sc->nruns = sc->nboxes = 0;
    for (int64_t at = 0; at < n; at += CONV_TILE) {
        int64_t m = conv_min(CONV_TILE, n - at);
        for (int64_t j = at; j < at + m; j++) {
            sc->a[j] = it[j].a;
            sc->b[j] = it[j].b;
        }
        const span2 u = tile_union(it + at, m);
        int64_t k = 0;   /* the union's number */
        while (k < sc->nboxes && memcmp(&sc->boxes[k], &u, sizeof u) != 0) {
            k++;
        }
        if (k == sc->nboxes) {
            sc->boxes[sc->nboxes++] = u;
        }
        if (sc->nruns > 0 && sc->runs[sc->nruns - 1].box == k) {
            sc->runs[sc->nruns - 1].len += m;
        } else {
            sc->runs[sc->nruns++] = (run){at, m, k};
        }
    }
}

/* Bytes schedule_tables takes for the other side's table g with nouter outer indices. */
static size_t schedule_table_bytes(const schedule *sc, const grid *g, int64_t nouter) {
    return 2 * round64((size_t)(sc->nboxes * nouter * g->ny * g->nx) * sizeof(int32_t));
}

/* The other side's table of each distinct union: g's entries in the box, o < nouter. */
static void schedule_tables(schedule *sc, arena *ar, const grid *g, int64_t nouter) {
    sc->per = nouter * g->ny * g->nx;
    sc->ta = take(ar, (size_t)(sc->nboxes * sc->per) * sizeof(int32_t));
    sc->tb = take(ar, (size_t)(sc->nboxes * sc->per) * sizeof(int32_t));
    for (int64_t j = 0; j < sc->nboxes; j++) {
        int64_t cnt = grid_fill(g, nouter, sc->boxes[j], sc->ta + j * sc->per, sc->tb + j * sc->per);
        sc->area[j] = nouter > 0 ? cnt / nouter : 0;
    }
}

/* An arena of `bytes` in this thread's scratch of one kind; 0 (and *s set) when out of memory. */
static int arena_get(arena *ar, int kind, size_t bytes, const char *name, sw_status *s) {
    ar->at = conv_scratch(kind, bytes > 0 ? bytes : 1);
    ar->left = bytes;
    if (!ar->at && *s == SW_OK) {
        *s = SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for %zu bytes of schedule", name, bytes);
    }
    return ar->at != NULL;
}

/* ------------------------------------------------------------------ forward, weight gradient */

/* What the forward pass and the weight gradient share: the source region of x over the
 * output box ov (y, or dy), scratch for the pixel-major (npix, ncol) blocks of a group (out)
 * and a (K, ncol) matrix (mat: the packed weights, or the weight gradient's accumulator),
 * and the two sides of the loops: the group's pixels (g, r, c) -- offset g*sample +
 * r*sh*cols + c*sw in src, row g*npix + r*Wo + c of out -- and the taps (ci, ky, kx) --
 * offset ci*plane + ky*cols + kx, row (ci*kh + ky)*kw + kx of mat -- each with the box of
 * the other side it reads real values with (rows [ia, ib) and columns [ja, jb) of the
 * region can hold x's values, the rest is zeros). */
typedef struct {
    region rg;
    int64_t co, k, ncol, npix, group;
    float *src, *out, *mat;
    grid pixels, taps;
    span1 *pix_y, *pix_x;   /* pixel row r, column c: its taps' kernel rows, columns */
    span1 *tap_y, *tap_x;   /* tap ky, kx: its pixels' output rows, columns */
} over_output;

/* ceil(a / b), b > 0 */
static int64_t cdiv(int64_t a, int64_t b) { return conv_ceil_div(a, b); }

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
    const int64_t ho = ov->shape[2], wo = ov->shape[3];
    o->src = scratch(CONV_SCRATCH_SRC, o->group * o->rg.sample, sizeof(float), fn, s);
    o->out = scratch(CONV_SCRATCH_OUT, o->group * o->npix * o->ncol, sizeof(float), fn, s);
    o->mat = scratch(mat_kind, o->k * o->ncol, sizeof(float), fn, s);
    o->pix_y = scratch(CONV_SCRATCH_TAB, 2 * (ho + wo + p->kh + p->kw), sizeof(span1), fn, s);
    if (*s != SW_OK) {
        return 1;
    }
    o->pix_x = o->pix_y + ho;
    o->tap_y = o->pix_x + wo;
    o->tap_x = o->tap_y + p->kh;
    const region *rg = &o->rg;
    o->pixels = (grid){ho, wo, 0, {rg->sample, p->sh * rg->cols, p->sw}, 0, {o->npix, wo, 1}};
    o->taps = (grid){p->kh, p->kw, 0, {rg->plane, rg->cols, 1}, 0, {p->kh * p->kw, p->kw, 1}};
    /* the region's rows [ia, ib) and columns [ja, jb) that lie in x's view (region_fill) */
    const int64_t h = x->shape[2], w = x->shape[3], empty = h == 0 || w == 0;
    const int64_t ia = empty ? 0 : x->lo[2] - rg->r_lo, ib = empty ? 0 : x->lo[2] + h - rg->r_lo;
    const int64_t ja = empty ? 0 : x->lo[3] - rg->c_lo, jb = empty ? 0 : x->lo[3] + w - rg->c_lo;
    for (int64_t r = 0; r < ho; r++) {   /* pixel row r reads region row r*sh + ky */
        o->pix_y[r] = clip(ia - r * p->sh, ib - r * p->sh, p->kh);
    }
    for (int64_t c = 0; c < wo; c++) {
        o->pix_x[c] = clip(ja - c * p->sw, jb - c * p->sw, p->kw);
    }
    for (int64_t ky = 0; ky < p->kh; ky++) {   /* r*sh + ky in [ia, ib) */
        o->tap_y[ky] = clip(cdiv(ia - ky, p->sh), cdiv(ib - ky, p->sh), ho);
    }
    for (int64_t kx = 0; kx < p->kw; kx++) {
        o->tap_x[kx] = clip(cdiv(ja - kx, p->sw), cdiv(jb - kx, p->sw), wo);
    }
    return 1;
}

/* The forward schedule of gn samples: pixels against taps. */
static int forward_schedule(schedule *sc, const over_output *o, int64_t gn, const char *fn, sw_status *s) {
    arena ar, tab;
    if (!arena_get(&ar, CONV_SCRATCH_PLAN, schedule_bytes(gn * o->npix), fn, s)) {
        return 0;
    }
    schedule_items(sc, &ar, &o->pixels, gn, o->pix_y, o->pix_x);
    if (!arena_get(&tab, CONV_SCRATCH_IDX, schedule_table_bytes(sc, &o->taps, o->rg.nch), fn, s)) {
        return 0;
    }
    schedule_tables(sc, &tab, &o->taps, o->rg.nch);
    return 1;
}

int conv_direct_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y, const sw_window *p,
                        int64_t ci, sw_status *s) {
    over_output o;
    const char *fn = "conv2d_forward";
    if (!over_output_init(&o, x, y, p, ci, CONV_SCRATCH_WPK, fn, s)) {
        return 0;
    }
    if (*s != SW_OK) {
        return 1;
    }
    pack_rows(wsub, o.co, o.k, o.ncol, o.mat);
    schedule sc;
    int64_t planned = 0;   /* samples the schedule is for (a short last group needs its own) */
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n += o.group) {
        int64_t gn = conv_min(o.group, sw_view_hi(y, 0) - n);
        if (gn != planned) {
            if (!forward_schedule(&sc, &o, gn, fn, s)) {
                return 1;
            }
            planned = gn;
        }
        region_fill(&o.rg, x, NULL, n, gn, o.src);
        for (int64_t r = 0; r < sc.nruns; r++) {
            const run *u = &sc.runs[r];
            const int64_t j = u->box;
            gather(o.src, sc.a + u->at, sc.b + u->at, u->len, sc.ta + j * sc.per, sc.tb + j * sc.per,
                   sc.area[j] * ci, o.mat, o.k, o.ncol, o.out, o.ncol);
        }
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
    const char *fn = "conv2d_backward_weight";
    if (!over_output_init(&o, x, dy, p, ci, CONV_SCRATCH_ACC, fn, s)) {
        return 0;
    }
    if (*s != SW_OK) {
        return 1;
    }
    /* taps against pixels: one schedule for every group (a short group takes a prefix of each
     * pixel table, which runs sample by sample) */
    schedule sc;
    arena ar, tab;
    if (!arena_get(&ar, CONV_SCRATCH_PLAN, schedule_bytes(o.k), fn, s)) {
        return 1;
    }
    schedule_items(&sc, &ar, &o.taps, ci, o.tap_y, o.tap_x);
    if (!arena_get(&tab, CONV_SCRATCH_IDX, schedule_table_bytes(&sc, &o.pixels, o.group), fn, s)) {
        return 1;
    }
    schedule_tables(&sc, &tab, &o.pixels, o.group);
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
        for (int64_t r = 0; r < sc.nruns; r++) {
            const run *u = &sc.runs[r];
            const int64_t j = u->box;
            if (sc.area[j] > 0) {   /* else every product is with a zero: nothing to add */
                reduce(o.src, sc.ta + j * sc.per, sc.tb + j * sc.per, sc.area[j] * gn, sc.a + u->at, sc.b + u->at,
                       u->len, o.out, o.ncol, o.ncol, o.mat, o.ncol);
            }
        }
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

/* One stride class (ay, ax) of dx's pixels: its pixels (g, j, l) -- dx row iy = fy + j*sh,
 * column ix = fx + l*sw, reading dy's region from row ry0 + j, column rx0 + l -- against its
 * taps (o, ty, tx) -- kernel row ay + ty*sh, column ax + tx*sw, offset o*plane - ty*cols - tx
 * from the pixel's, row (o*nky + ty)*nkx + tx of the class's packed weights. */
typedef struct {
    int64_t nky, nkx, kc;
    grid pixels, taps;
    span1 *ys, *xs;   /* pixel j, l: its taps' rows ty, columns tx that read dy's view */
    schedule sc;
} stride_class;

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
    int64_t nclass = p->sh * p->sw;
    float *src = scratch(CONV_SCRATCH_SRC, group * rg.sample, sizeof(float), fn, s);
    float *out = scratch(CONV_SCRATCH_OUT, group * npix * ncol, sizeof(float), fn, s);
    float *wpk = scratch(CONV_SCRATCH_WPK, kfull * ncol, sizeof(float), fn, s);
    stride_class *cls = scratch(CONV_SCRATCH_TAB, nclass, sizeof(stride_class) + sizeof(span1) * (size_t)(hx + wx),
                                fn, s);
    if (*s != SW_OK) {
        return 1;
    }
    /* the region's rows [da, db) and columns [ea, eb) that lie in dy's view (region_fill) */
    const int64_t empty = dy->shape[2] == 0 || dy->shape[3] == 0;
    const int64_t da = empty ? 0 : dy->lo[2] - rg.r_lo, db = empty ? 0 : dy->lo[2] + dy->shape[2] - rg.r_lo;
    const int64_t ea = empty ? 0 : dy->lo[3] - rg.c_lo, eb = empty ? 0 : dy->lo[3] + dy->shape[3] - rg.c_lo;
    span1 *spans = (span1 *)(cls + nclass);
    /* per class (ay, ax): its taps' packed weights (the class's (kc, ncol) matrix at wpk + kat * ncol,
     * conv_internal.h's layout), its pixels and their boxes */
    int64_t kat = 0;
    for (int64_t cl = 0; cl < nclass; cl++) {
        stride_class *c = &cls[cl];
        int64_t ay = cl / p->sw, ax = cl % p->sw;
        c->nky = taps(ay, p->sh, p->kh);
        c->nkx = taps(ax, p->sw, p->kw);
        c->kc = co * c->nky * c->nkx;
        float *w = wpk + kat * ncol;
        for (int64_t c0 = 0; c0 < ncol; c0 += 16) {
            int64_t width = conv_min(16, ncol - c0);
            float *blk = w + c0 * c->kc;
            for (int64_t kk = 0; kk < c->kc; kk++) {   /* kk = (o, ty, tx): tap (ay + ty*sh, ax + tx*sw) */
                int64_t o = kk / (c->nky * c->nkx), ky = ay + (kk / c->nkx % c->nky) * p->sh;
                int64_t kx = ax + (kk % c->nkx) * p->sw;
                for (int64_t j = 0; j < width; j++) {
                    int64_t cc = c0 + j;
                    blk[kk * width + j] = cc < ci ? wsub[o * kw_all + (cc * p->kh + ky) * p->kw + kx] : 0.0f;
                }
            }
        }
        kat += c->kc;
        int64_t fy = x0 + mod(ay - x0 - p->ph, p->sh), fx = y0 + mod(ax - y0 - p->pw, p->sw);
        int64_t cy = class_count(x0, hx, p->ph, p->sh, ay), cx = class_count(y0, wx, p->pw, p->sw, ax);
        int64_t ry0 = (fy + p->ph - ay) / p->sh - rg.r_lo, rx0 = (fx + p->pw - ax) / p->sw - rg.c_lo;
        c->pixels = (grid){cy, cx, ry0 * rg.cols + rx0, {rg.sample, rg.cols, 1},
                           (fy - x0) * wx + (fx - y0), {npix, p->sh * wx, p->sw}};
        c->taps = (grid){c->nky, c->nkx, 0, {rg.plane, -rg.cols, -1}, 0, {c->nky * c->nkx, c->nkx, 1}};
        c->ys = spans;
        c->xs = spans + cy;
        spans += cy + cx;
        for (int64_t j = 0; j < cy; j++) {   /* tap ty reads region row ry0 + j - ty */
            c->ys[j] = clip(ry0 + j - db + 1, ry0 + j - da + 1, c->nky);
        }
        for (int64_t l = 0; l < cx; l++) {
            c->xs[l] = clip(rx0 + l - eb + 1, rx0 + l - ea + 1, c->nkx);
        }
    }
    int64_t planned = 0;   /* samples the schedules are for (a short last group needs its own) */
    for (int64_t n = dx->lo[0]; n < sw_view_hi(dx, 0); n += group) {
        int64_t gn = conv_min(group, sw_view_hi(dx, 0) - n);
        if (gn != planned) {   /* every class's schedule: its pixels against its taps */
            size_t bytes = 0, tbytes = 0;
            for (int64_t cl = 0; cl < nclass; cl++) {
                bytes += schedule_bytes(gn * cls[cl].pixels.ny * cls[cl].pixels.nx);
            }
            arena ar, tab;
            if (!arena_get(&ar, CONV_SCRATCH_PLAN, bytes, fn, s)) {
                return 1;
            }
            for (int64_t cl = 0; cl < nclass; cl++) {
                schedule_items(&cls[cl].sc, &ar, &cls[cl].pixels, gn, cls[cl].ys, cls[cl].xs);
                tbytes += schedule_table_bytes(&cls[cl].sc, &cls[cl].taps, co);
            }
            if (!arena_get(&tab, CONV_SCRATCH_IDX, tbytes, fn, s)) {
                return 1;
            }
            for (int64_t cl = 0; cl < nclass; cl++) {
                schedule_tables(&cls[cl].sc, &tab, &cls[cl].taps, co);
            }
            planned = gn;
        }
        region_fill(&rg, dy, mask, n, gn, src);
        kat = 0;
        for (int64_t cl = 0; cl < nclass; cl++) {
            const schedule *sc = &cls[cl].sc;
            for (int64_t r = 0; r < sc->nruns; r++) {
                const run *u = &sc->runs[r];
                const int64_t j = u->box;
                gather(src, sc->a + u->at, sc->b + u->at, u->len, sc->ta + j * sc->per, sc->tb + j * sc->per,
                       sc->area[j] * co, wpk + kat * ncol, cls[cl].kc, ncol, out, ncol);
            }
            kat += cls[cl].kc;
        }
        for (int64_t g = 0; g < gn; g++) {
            conv_avx2_transpose(out + g * npix * ncol, ncol, npix, ci, dx->data + (n + g - dx->lo[0]) * ci * npix,
                                npix, NULL, 0);
        }
    }
    return 1;
}
