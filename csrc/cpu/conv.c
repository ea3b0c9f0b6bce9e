/*
 * conv.c -- 2-D convolution on views: im2col + SGEMM (OpenBLAS).
 *
 * Why im2col + GEMM: it reuses the one BLAS the project already ships, handles
 * every stride / padding / asymmetric kernel with one code path, and on a
 * single thread the GEMM dominates: the copy writes K x P floats for the
 * Co_b x K x P multiply-adds they feed (about 15% of the forward time on a
 * 64->64 3x3 layer at 56x56, the rest is SGEMM).
 *
 * All three kernels walk the output-pixel box of y (forward, weight gradient)
 * or dy (data gradient) in *tiles* of at most `tile_cols` columns so that the
 * im2col buffer, K x tile_cols floats with K = Ci*kh*kw, stays in cache and
 * its size is bounded whatever the box.  A tile is either a run of pixels of
 * one sample (large planes) or several whole samples side by side (small
 * planes, so late layers still get wide GEMMs):
 *
 *   col    (K, cols)        = im2col(x) for the tile's pixels
 *   y      (Co_b, cols)     = w (Co_b, K) x col                  forward
 *   dw     (Co_b, K)       += dy (Co_b, cols) x col^T            weight gradient
 *   dcol   (K, cols)        = w^T (K, Co_b) x dy (Co_b, cols)    data gradient, then col2im
 *
 * Coordinates are global (kernels.h): input row of output row r and kernel row
 * ky is r*sh + ky - ph; a read outside x's view is zero (padding), a
 * data-gradient contribution outside dx's view is dropped.
 */
#include <pthread.h>    /* per-thread scratch caches (pthread keys) */
#include <stdatomic.h>  /* the count of cache growths */
#include <stdint.h>     /* int64_t, INT32_MAX */
#include <stdlib.h>     /* malloc, free */
#include <string.h>  /* memset, memcpy */

#include "kernels.h"
#include "view.h"  /* sw_view_check, sw_view_check_covers, ... */

/* im2col buffer budget in floats (512 KiB), so the buffer is still in cache when
 * the GEMM reads it: budgets of 2^16..2^20 floats run the VGG-like layer above
 * at the same speed, 2^24 (whole batches) 2.3x slower; on the small-channel
 * layers of a CIFAR-style ResNet 2^17 (512 KiB, in L2 with OpenBLAS's packed
 * copy) was 5-10% faster than 2^19.  Tiles have at least
 * MIN_TILE_COLS columns (unless the box is smaller) to keep GEMMs wide. */
#ifndef CONV_COL_BUDGET
#define CONV_COL_BUDGET ((int64_t)1 << 17)
#endif
#define MIN_TILE_COLS 256

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t floor_div(int64_t a, int64_t b) {  /* b > 0 */
    int64_t q = a / b;
    if (a % b != 0 && a < 0) {
        q--;
    }
    return q;
}

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }  /* b > 0 */

/* ------------------------------------------------------------------ geometry */

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

static void geom_tiles(conv_geom *g) {
    int64_t len = g->qb - g->qa;
    g->tile_cols = max64(MIN_TILE_COLS, CONV_COL_BUDGET / max64(g->k, 1));
    if (len >= g->tile_cols) {
        g->per_sample = ceil_div(len, g->tile_cols);
        g->nb = 1;
    } else {
        g->per_sample = 1;
        g->nb = max64(1, g->tile_cols / max64(len, 1));
    }
}

static int64_t geom_ntiles(const conv_geom *g) {
    int64_t ns = g->n1 - g->n0;
    if (ns <= 0 || g->qb <= g->qa) {
        return 0;
    }
    return g->nb > 1 ? ceil_div(ns, g->nb) : ns * g->per_sample;
}

static conv_tile geom_tile(const conv_geom *g, int64_t i) {
    conv_tile t;
    if (g->nb > 1) {
        t.n = g->n0 + i * g->nb;
        t.nb = min64(g->nb, g->n1 - t.n);
        t.q0 = g->qa;
        t.q1 = g->qb;
    } else {
        t.n = g->n0 + i / g->per_sample;
        t.nb = 1;
        t.q0 = g->qa + (i % g->per_sample) * g->tile_cols;
        t.q1 = min64(t.q0 + g->tile_cols, g->qb);
    }
    return t;
}

/* ------------------------------------------------------------------ im2col / col2im */

/* Both go through a zero-padded copy of one input channel (`pad`, rows x cols
 * floats): the input rows and columns that the tile's output pixels read, with
 * zeros where they fall outside x's view.  Every tap (ky, kx) then reads its
 * row segments without bounds checks (for stride 1, plain contiguous copies),
 * instead of clipping every output row against the view once per tap: on the
 * 4x4..16x16 planes of a small ResNet that clipping cost more than the GEMM.
 *
 * For output box rows [ra, rb] (local to the box) of the tile:
 *   pad row i    = local input row  (r0 + ra) * sh - ph - x.lo[2] + i,   i in [0, (rb - ra) * sh + kh)
 *   pad column j = local input col  c0 * sw - pw - x.lo[3] + j,          j in [0, (wo - 1) * sw + kw)
 * so output pixel (rr, c) of tap (ky, kx) reads pad[(rr - ra) * sh + ky][c * sw + kx]. */
typedef struct {
    int64_t iy0, ix0;     /* local input row / column of pad[0][0] (may be negative) */
    int64_t rows, cols;   /* extent of the padded plane */
    int64_t ra;           /* first box row of the tile's sample segment */
} pad_geom;

static pad_geom pad_for(const sw_window *p, const conv_geom *g, const sw_view *x, int64_t q0, int64_t q1) {
    pad_geom pg;
    pg.ra = q0 / g->wo;
    int64_t rb = (q1 - 1) / g->wo;
    pg.iy0 = (g->r0 + pg.ra) * p->sh - p->ph - x->lo[2];
    pg.ix0 = g->c0 * p->sw - p->pw - x->lo[3];
    pg.rows = (rb - pg.ra) * p->sh + p->kh;
    pg.cols = (g->wo - 1) * p->sw + p->kw;
    return pg;
}

/* Floats of the largest padded plane of any tile of g (one covering all the box's rows),
 * saturated at INT64_MAX: with strides up to 2^24 the product can exceed int64. */
static int64_t pad_floats(const sw_window *p, const conv_geom *g) {
    int64_t box_rows = g->wo > 0 ? ceil_div(g->plane, g->wo) : 1;
    int64_t rows = (max64(box_rows, 1) - 1) * p->sh + p->kh;
    int64_t cols = (max64(g->wo, 1) - 1) * p->sw + p->kw;
    if (rows > INT64_MAX / cols) {
        return INT64_MAX;
    }
    return rows * cols;
}

/* Whether im2col / col2im go through the padded plane.  The plane spans every input
 * row and column the tile's output pixels could read, so its size follows the output
 * grid times the stride, not the input: a stride far larger than the input (stride
 * 16384 on a 6x6 plane with padding to match) makes it gigabytes of zeros.  Only
 * the input (plus a kernel's worth of border) can hold non-zero values, so when the
 * plane would be much larger than that, the kernels read x (write dx) directly,
 * clipping every row segment to the view instead (direct_* below). */
static int use_pad_plane(const sw_window *p, const conv_geom *g, const sw_view *x) {
    int64_t covered = (x->shape[2] + 2 * p->kh) * (x->shape[3] + 2 * p->kw);
    return pad_floats(p, g) <= max64(CONV_COL_BUDGET, 4 * covered);
}

/* Box columns [*ca, *cb) of [cs, ce) whose tap reads a column inside [0, w): the
 * local input column of box column c is base + c * sw (base = ix0 + kx). */
static void clip_columns(int64_t base, int64_t sw, int64_t w, int64_t cs, int64_t ce, int64_t *ca, int64_t *cb) {
    int64_t lo = max64(cs, ceil_div(-base, sw));
    int64_t hi = min64(ce, floor_div(w - 1 - base, sw) + 1);
    *ca = min64(lo, ce);
    *cb = max64(*ca, hi);
}

/* pad (rows, cols) = channel plane src (h, w) shifted by (iy0, ix0), zero outside. */
static void pad_fill(const float *src, int64_t h, int64_t w, const pad_geom *pg, float *pad) {
    int64_t ja = min64(pg->cols, max64(0, -pg->ix0));       /* pad columns [ja, jb) lie inside [0, w) */
    int64_t jb = max64(ja, min64(pg->cols, w - pg->ix0));
    for (int64_t i = 0; i < pg->rows; i++) {
        float *d = pad + i * pg->cols;
        int64_t iy = pg->iy0 + i;
        if (iy < 0 || iy >= h) {
            memset(d, 0, (size_t)pg->cols * sizeof(float));
            continue;
        }
        if (ja > 0) {
            memset(d, 0, (size_t)ja * sizeof(float));
        }
        if (jb > ja) {
            memcpy(d + ja, src + iy * w + pg->ix0 + ja, (size_t)(jb - ja) * sizeof(float));
        }
        if (jb < pg->cols) {
            memset(d + jb, 0, (size_t)(pg->cols - jb) * sizeof(float));
        }
    }
}

/* dst (h, w) channel plane += pad (rows, cols) where the pad lies inside the plane. */
static void pad_add_back(const float *pad, const pad_geom *pg, int64_t h, int64_t w, float *dst) {
    int64_t ja = min64(pg->cols, max64(0, -pg->ix0));
    int64_t jb = max64(ja, min64(pg->cols, w - pg->ix0));
    for (int64_t i = 0; i < pg->rows; i++) {
        int64_t iy = pg->iy0 + i;
        if (iy < 0 || iy >= h) {
            continue;
        }
        float *restrict d = dst + iy * w + pg->ix0;
        const float *restrict s = pad + i * pg->cols;
        for (int64_t j = ja; j < jb; j++) {
            d[j] += s[j];
        }
    }
}

/* out[c] = src[c * stride] for c in [0, len) (row segments of one tap).  Rows
 * of small planes hold 4..16 floats: a plain copy loop would become a memcpy
 * call per row (the compiler recognises the pattern), so short rows are
 * copied in fixed-size pieces that compile to single vector moves. */
static inline void gather_row(float *restrict out, const float *restrict src, int64_t len, int64_t stride) {
    if (stride == 1) {
        if (len >= 32) {
            memcpy(out, src, (size_t)len * sizeof(float));
            return;
        }
        int64_t c = 0;
        for (; c + 8 <= len; c += 8) {
            memcpy(out + c, src + c, 8 * sizeof(float));
        }
        if (c + 4 <= len) {
            memcpy(out + c, src + c, 4 * sizeof(float));
            c += 4;
        }
        switch (len - c) {  /* at most 3 left */
        case 3:
            out[c + 2] = src[c + 2];
            /* fall through */
        case 2:
            out[c + 1] = src[c + 1];
            /* fall through */
        case 1:
            out[c] = src[c];
            break;
        default:
            break;
        }
    } else {
        for (int64_t c = 0; c < len; c++) {
            out[c] = src[c * stride];
        }
    }
}

/* dst[c * stride] += in[c] for c in [0, len). */
static inline void scatter_row(float *restrict dst, const float *restrict in, int64_t len, int64_t stride) {
    if (stride == 1) {
        for (int64_t c = 0; c < len; c++) {
            dst[c] += in[c];
        }
    } else {
        for (int64_t c = 0; c < len; c++) {
            dst[c * stride] += in[c];
        }
    }
}

/* im2col without the padded plane: every row segment of every tap is clipped
 * to x's view (rows outside it and columns outside [ca, cb) are zeros). */
static void direct_im2col(const float *xs, int64_t ci_n, int64_t h, int64_t w, const sw_window *p,
                          const conv_geom *g, const pad_geom *pg, int64_t q0, int64_t q1, float *col,
                          int64_t ldcol) {
    for (int64_t ci = 0; ci < ci_n; ci++) {
        const float *plane = xs + ci * h * w;
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                float *out = col + ((ci * p->kh + ky) * p->kw + kx) * ldcol;
                int64_t base = pg->ix0 + kx;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = min64(g->wo, cs + (q1 - q));
                    int64_t iy = pg->iy0 + (rr - pg->ra) * p->sh + ky;
                    int64_t ca = ce, cb = ce;
                    if (iy >= 0 && iy < h) {
                        clip_columns(base, p->sw, w, cs, ce, &ca, &cb);
                    } else {
                        ca = cb = cs;  /* the whole segment reads padding rows */
                    }
                    if (ca > cs) {
                        memset(out, 0, (size_t)(ca - cs) * sizeof(float));
                    }
                    if (cb > ca) {
                        gather_row(out + (ca - cs), plane + iy * w + base + ca * p->sw, cb - ca, p->sw);
                    }
                    if (ce > cb) {
                        memset(out + (cb - cs), 0, (size_t)(ce - cb) * sizeof(float));
                    }
                    out += ce - cs;
                    q += ce - cs;
                    cs = 0;
                }
            }
        }
    }
}

/* col2im without the padded plane: contributions are added straight into dx's
 * plane, dropping the row segments and columns that fall outside its view. */
static void direct_col2im(const float *dcol, int64_t ldcol, const sw_window *p, const conv_geom *g,
                          const pad_geom *pg, int64_t q0, int64_t q1, int64_t ci_n, int64_t h, int64_t w, float *xs) {
    for (int64_t ci = 0; ci < ci_n; ci++) {
        float *plane = xs + ci * h * w;
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                const float *in = dcol + ((ci * p->kh + ky) * p->kw + kx) * ldcol;
                int64_t base = pg->ix0 + kx;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = min64(g->wo, cs + (q1 - q));
                    int64_t iy = pg->iy0 + (rr - pg->ra) * p->sh + ky;
                    if (iy >= 0 && iy < h) {
                        int64_t ca, cb;
                        clip_columns(base, p->sw, w, cs, ce, &ca, &cb);
                        if (cb > ca) {
                            scatter_row(plane + iy * w + base + ca * p->sw, in + (ca - cs), cb - ca, p->sw);
                        }
                    }
                    in += ce - cs;
                    q += ce - cs;
                    cs = 0;
                }
            }
        }
    }
}

/* col (K, q1-q0) at leading dimension ldcol, for sample n and pixels [q0, q1)
 * of the output box g: col[(ci, ky, kx), q] = x[n, ci, r*sh+ky-ph, c*sw+kx-pw]
 * with (r, c) the pixel q, zero outside x's view.  pad: pad_floats(p, g) floats,
 * or NULL to read x directly (use_pad_plane). */
static void im2col(const sw_view *x, const sw_window *p, const conv_geom *g, int64_t n, int64_t q0, int64_t q1,
                   float *col, int64_t ldcol, float *pad) {
    int64_t ci_n = x->shape[1], h = x->shape[2], w = x->shape[3];
    if (h == 0 || w == 0) {  /* an empty region: every read is padding (and x->data may be NULL) */
        for (int64_t k = 0; k < ci_n * p->kh * p->kw; k++) {
            memset(col + k * ldcol, 0, (size_t)(q1 - q0) * sizeof(float));
        }
        return;
    }
    pad_geom pg = pad_for(p, g, x, q0, q1);
    const float *xs = x->data + (n - x->lo[0]) * ci_n * h * w;
    if (!pad) {
        direct_im2col(xs, ci_n, h, w, p, g, &pg, q0, q1, col, ldcol);
        return;
    }
    for (int64_t ci = 0; ci < ci_n; ci++) {
        pad_fill(xs + ci * h * w, h, w, &pg, pad);
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                float *out = col + ((ci * p->kh + ky) * p->kw + kx) * ldcol;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = min64(g->wo, cs + (q1 - q));  /* this row segment: box columns [cs, ce) */
                    const float *src = pad + ((rr - pg.ra) * p->sh + ky) * pg.cols + kx + cs * p->sw;
                    gather_row(out, src, ce - cs, p->sw);
                    out += ce - cs;
                    q += ce - cs;
                    cs = 0;
                }
            }
        }
    }
}

/* dx[n, ci, r*sh+ky-ph, c*sw+kx-pw] += dcol[(ci, ky, kx), q] for the pixels
 * [q0, q1) of sample n, dropping what falls outside dx's view.  pad: pad_floats(p, g)
 * floats, or NULL to write dx directly (use_pad_plane). */
static void col2im(const float *dcol, int64_t ldcol, const sw_window *p, const conv_geom *g, int64_t n, int64_t q0,
                   int64_t q1, sw_view *dx, float *pad) {
    int64_t ci_n = dx->shape[1], h = dx->shape[2], w = dx->shape[3];
    pad_geom pg = pad_for(p, g, dx, q0, q1);
    float *xs = dx->data + (n - dx->lo[0]) * ci_n * h * w;
    if (!pad) {
        direct_col2im(dcol, ldcol, p, g, &pg, q0, q1, ci_n, h, w, xs);
        return;
    }
    for (int64_t ci = 0; ci < ci_n; ci++) {
        memset(pad, 0, (size_t)(pg.rows * pg.cols) * sizeof(float));
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                const float *in = dcol + ((ci * p->kh + ky) * p->kw + kx) * ldcol;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = min64(g->wo, cs + (q1 - q));
                    float *dst = pad + ((rr - pg.ra) * p->sh + ky) * pg.cols + kx + cs * p->sw;
                    scatter_row(dst, in, ce - cs, p->sw);
                    in += ce - cs;
                    q += ce - cs;
                    cs = 0;
                }
            }
        }
        pad_add_back(pad, &pg, h, w, xs + ci * h * w);
    }
}

/* ------------------------------------------------------------------ helpers */

/* C = alpha op(A) op(B) + beta C, also for k == 0 (C = beta C, no BLAS call). */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) {
        return;
    }
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
            }
        }
        return;
    }
    sw_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* Is the 1x1, stride-1, unpadded case where x's pixel box equals the output's:
 * then im2col is the identity and GEMMs read x (or write dx) in place. */
static int is_pointwise(const sw_window *p, const sw_view *x, const conv_geom *g) {
    return sw_view_volume(x) > 0 && p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0 &&
           x->lo[2] == g->r0 && x->lo[3] == g->c0 && x->shape[3] == g->wo && x->shape[2] * x->shape[3] == g->plane;
}

/* Copy the tile's pixels of a (N, Co_b, plane) view into buf (Co_b, nb * (q1-q0)). */
static void gather_tile(const float *v, const conv_geom *g, const conv_tile *t, float *buf) {
    int64_t len = t->q1 - t->q0, ld = t->nb * len;
    for (int64_t j = 0; j < t->nb; j++) {
        const float *s = v + (t->n + j - g->nlo) * g->co * g->plane + t->q0;
        for (int64_t co = 0; co < g->co; co++) {
            memcpy(buf + co * ld + j * len, s + co * g->plane, (size_t)len * sizeof(float));
        }
    }
}

/* y[n+j, co, q] = act(buf[co, j*len + q - q0] + b[co]) over the tile; ldb is the
 * leading dimension of buf, bias (Co_b) may be NULL.  In place when buf is y's own plane. */
static void epilogue(const float *buf, int64_t ldb, const float *bias, int relu, const conv_geom *g,
                     const conv_tile *t, float *y) {
    int64_t len = t->q1 - t->q0;
    for (int64_t j = 0; j < t->nb; j++) {
        float *d = y + (t->n + j - g->nlo) * g->co * g->plane + t->q0;
        for (int64_t co = 0; co < g->co; co++) {
            const float *s = buf + co * ldb + j * len;
            float *o = d + co * g->plane;
            float bv = bias ? bias[co] : 0.0f;
            if (relu) {
                for (int64_t i = 0; i < len; i++) {
                    float v = s[i] + bv;
                    o[i] = v > 0.0f ? v : 0.0f;
                }
            } else {
                for (int64_t i = 0; i < len; i++) {
                    o[i] = s[i] + bv;
                }
            }
        }
    }
}

/* Checks common to the three kernels on the weight-shaped view wv (w or dw):
 * rank 4, all Ci, the whole kernel window; sets *ci. */
static sw_status check_weight(const sw_view *wv, const sw_window *p, const char *name, int64_t *ci) {
    sw_status s = sw_view_check(wv, 4, name);
    if (s != SW_OK) {
        return s;
    }
    *ci = wv->shape[1];
    if ((s = sw_view_check_range(wv, 1, 0, wv->shape[1], name, "input-channel")) != SW_OK ||
        (s = sw_view_check_range(wv, 2, 0, p->kh, name, "kernel-row")) != SW_OK ||
        (s = sw_view_check_range(wv, 3, 0, p->kw, name, "kernel-column")) != SW_OK) {
        return s;
    }
    return SW_OK;
}

/* Scratch of one kernel call: the (K, tile_cols) im2col / col2im buffer and
 * the padded channel plane of im2col / col2im (unless the pointwise path needs
 * neither, or the plane would dwarf the input xv: use_pad_plane) and a
 * (Co_b, tile_cols) staging buffer for tiles that hold several samples.
 * They come from a per-thread cache that only grows (freed when the thread
 * ends), so that a training step, after the first, allocates nothing. */
typedef struct {
    float *col, *tmp, *pad;
} conv_scratch;

enum { SCRATCH_COL, SCRATCH_TMP, SCRATCH_PAD, SCRATCH_KINDS };

typedef struct {
    float *buf[SCRATCH_KINDS];
    size_t cap[SCRATCH_KINDS];   /* floats */
} scratch_cache;

static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;
static _Atomic long long cache_grows;

static void cache_free(void *p) {
    scratch_cache *c = p;
    for (int k = 0; k < SCRATCH_KINDS; k++) {
        free(c->buf[k]);
    }
    free(c);
}

static void cache_make_key(void) { (void)pthread_key_create(&cache_key, cache_free); }

long long sw_conv_scratch_grows(void) { return atomic_load(&cache_grows); }

/* At least `floats` floats of this thread's scratch of one kind; NULL when out of memory. */
static float *cached(int kind, size_t floats) {
    pthread_once(&cache_once, cache_make_key);
    scratch_cache *c = pthread_getspecific(cache_key);
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c || pthread_setspecific(cache_key, c) != 0) {
            free(c);
            return NULL;
        }
    }
    if (floats > c->cap[kind] || !c->buf[kind]) {
        float *grown = malloc(floats * sizeof(float) + 64);
        if (!grown) {
            return NULL;
        }
        free(c->buf[kind]);
        c->buf[kind] = grown;
        c->cap[kind] = floats;
        atomic_fetch_add(&cache_grows, 1);
    }
    return c->buf[kind];
}

static sw_status scratch_alloc(conv_scratch *sc, const conv_geom *g, const sw_window *p, const sw_view *xv,
                               int pointwise, const char *name) {
    sc->col = NULL;
    sc->tmp = NULL;
    sc->pad = NULL;
    if (!pointwise || g->nb > 1) {
        int with_pad = use_pad_plane(p, g, xv);
        sc->col = cached(SCRATCH_COL, (size_t)(g->k * g->tile_cols));
        sc->pad = with_pad ? cached(SCRATCH_PAD, (size_t)pad_floats(p, g)) : NULL;
        if (!sc->col || (with_pad && !sc->pad)) {
            return SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for a %lld x %lld im2col buffer", name,
                           (long long)g->k, (long long)g->tile_cols);
        }
    }
    if (g->nb > 1) {
        sc->tmp = cached(SCRATCH_TMP, (size_t)(g->co * g->tile_cols));
        if (!sc->tmp) {
            return SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for a %lld x %lld staging buffer", name,
                           (long long)g->co, (long long)g->tile_cols);
        }
    }
    return SW_OK;
}

static void scratch_free(conv_scratch *sc) { (void)sc; /* the thread's cache keeps it */ }

/* Pixels per (sample, channel) of a rank-4 view, at most INT32_MAX (a BLAS leading dimension). */
static sw_status checked_plane(const sw_view *v, const char *name, int64_t *plane) {
    if (v->shape[2] > INT32_MAX || v->shape[3] > INT32_MAX || v->shape[2] * v->shape[3] > INT32_MAX) {
        return SW_FAIL(SW_ERR_VALUE, "%s: a %lldx%lld plane exceeds the 32-bit BLAS interface", name,
                       (long long)v->shape[2], (long long)v->shape[3]);
    }
    *plane = v->shape[2] * v->shape[3];
    return SW_OK;
}

/* Fill the geometry for the output-pixel box of ov (y or dy), samples [n0, n1). */
static sw_status geom_init(conv_geom *g, const sw_view *ov, int64_t n0, int64_t n1, int64_t ci,
                           const sw_window *p, const char *name) {
    g->n0 = n0;
    g->n1 = n1;
    g->nlo = ov->lo[0];
    g->co = ov->shape[1];
    g->r0 = ov->lo[2];
    g->c0 = ov->lo[3];
    g->wo = ov->shape[3];
    sw_status s = checked_plane(ov, name, &g->plane);
    if (s != SW_OK) {
        return s;
    }
    g->qa = 0;
    g->qb = g->plane;
    if (p->kh > INT32_MAX / p->kw || ci > INT32_MAX / (p->kh * p->kw)) {
        return SW_FAIL(SW_ERR_VALUE, "%s: Ci*kh*kw exceeds the 32-bit BLAS interface", name);
    }
    g->k = ci * p->kh * p->kw;
    geom_tiles(g);
    int64_t dims[2] = {g->co, g->tile_cols};
    return sw_check_blas_dims(name, 2, dims);
}

/* ------------------------------------------------------------------ forward */

/* y (N_b, Co_b, Ho_b, Wo_b) = conv(x (N_x, Ci, H_x, W_x), w (Co_w, Ci, kh, kw)) + b (Co_b), optional ReLU. */
sw_status sw_conv2d_forward(const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y, const sw_window *p) {
    const char *fn = "conv2d_forward";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(p, fn)) != SW_OK || (s = sw_view_check(y, 4, "conv2d_forward: y")) != SW_OK ||
        (s = sw_view_check(x, 4, "conv2d_forward: x")) != SW_OK ||
        (s = check_weight(w, p, "conv2d_forward: w", &ci)) != SW_OK ||
        (b && (s = sw_view_check(b, 1, "conv2d_forward: b")) != SW_OK) ||
        (s = sw_view_check_range(x, 1, 0, ci, "conv2d_forward: x", "channel (all of w's Ci)")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "conv2d_forward: x", y, 0, "y", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "conv2d_forward: w", y, 1, "y", "output-channel")) != SW_OK ||
        (b && (s = sw_view_check_covers(b, 0, "conv2d_forward: b", y, 1, "y", "output-channel")) != SW_OK)) {
        return s;
    }
    conv_geom g;
    if ((s = geom_init(&g, y, y->lo[0], sw_view_hi(y, 0), ci, p, fn)) != SW_OK) {
        return s;
    }
    int64_t xplane;
    if ((s = checked_plane(x, fn, &xplane)) != SW_OK) {
        return s;
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    const float *wsub = w->data + (y->lo[1] - w->lo[0]) * g.k;        /* (Co_b, K) */
    const float *bias = b ? b->data + (y->lo[1] - b->lo[0]) : NULL;  /* (Co_b) */
    int pointwise = is_pointwise(p, x, &g);
    int64_t ntiles = geom_ntiles(&g);
    conv_scratch sc;
    if ((s = scratch_alloc(&sc, &g, p, x, pointwise, fn)) != SW_OK) {
        return s;
    }
    float *col = sc.col, *tmp = sc.tmp;
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = geom_tile(&g, i);
        int64_t len = t.q1 - t.q0, cols = t.nb * len;
        const float *bmat;
        int64_t ldb;
        if (pointwise && t.nb == 1) {
            bmat = x->data + (t.n - x->lo[0]) * ci * g.plane + t.q0;
            ldb = g.plane;
        } else {
            for (int64_t j = 0; j < t.nb; j++) {
                im2col(x, p, &g, t.n + j, t.q0, t.q1, col + j * len, cols, sc.pad);
            }
            bmat = col;
            ldb = cols;
        }
        if (t.nb == 1) {
            float *c = y->data + (t.n - g.nlo) * g.co * g.plane + t.q0;
            gemm(0, 0, g.co, cols, g.k, wsub, g.k, bmat, ldb, 0.0f, c, g.plane);
            if (bias || p->relu) {
                epilogue(c, g.plane, bias, p->relu, &g, &t, y->data);
            }
        } else {
            gemm(0, 0, g.co, cols, g.k, wsub, g.k, bmat, ldb, 0.0f, tmp, cols);
            epilogue(tmp, cols, bias, p->relu, &g, &t, y->data);
        }
    }
    scratch_free(&sc);
    return SW_OK;
}

/* ------------------------------------------------------------------ data gradient */

/* dx (N_b, Ci, H_b, W_b) = the part of conv^T(w (Co_w, Ci, kh, kw), dy (N_y, Co_b, Ho_b, Wo_b)) inside dx's box. */
sw_status sw_conv2d_backward_data(const sw_view *w, const sw_view *dy, sw_view *dx, const sw_window *p) {
    const char *fn = "conv2d_backward_data";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(p, fn)) != SW_OK || (s = sw_view_check(dy, 4, "conv2d_backward_data: dy")) != SW_OK ||
        (s = sw_view_check(dx, 4, "conv2d_backward_data: dx")) != SW_OK ||
        (s = check_weight(w, p, "conv2d_backward_data: w", &ci)) != SW_OK ||
        (s = sw_view_check_range(dx, 1, 0, ci, "conv2d_backward_data: dx", "channel (all of w's Ci)")) != SW_OK ||
        (s = sw_view_check_covers(dy, 0, "conv2d_backward_data: dy", dx, 0, "dx", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "conv2d_backward_data: w", dy, 1, "dy", "output-channel")) != SW_OK) {
        return s;
    }
    conv_geom g;
    if ((s = geom_init(&g, dy, dx->lo[0], sw_view_hi(dx, 0), ci, p, fn)) != SW_OK) {
        return s;
    }
    int64_t xplane;
    if ((s = checked_plane(dx, fn, &xplane)) != SW_OK) {
        return s;
    }
    int64_t nvol = sw_view_volume(dx);
    if (nvol == 0) {
        return SW_OK;
    }
    memset(dx->data, 0, (size_t)nvol * sizeof(float));
    if (sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    /* Only the dy rows whose window touches dx's rows contribute:
     * r*sh - ph + kh - 1 >= dx row lo and r*sh - ph <= dx row hi - 1. */
    int64_t rlo = max64(dy->lo[2], ceil_div(dx->lo[2] + p->ph - p->kh + 1, p->sh));
    int64_t rhi = min64(sw_view_hi(dy, 2), floor_div(sw_view_hi(dx, 2) - 1 + p->ph, p->sh) + 1);
    if (rhi <= rlo) {
        return SW_OK;
    }
    g.qa = (rlo - dy->lo[2]) * g.wo;
    g.qb = (rhi - dy->lo[2]) * g.wo;
    geom_tiles(&g);
    const float *wsub = w->data + (dy->lo[1] - w->lo[0]) * g.k;  /* (Co_b, K) */
    int pointwise = is_pointwise(p, dx, &g);
    int64_t ntiles = geom_ntiles(&g);
    conv_scratch sc;
    if ((s = scratch_alloc(&sc, &g, p, dx, pointwise, fn)) != SW_OK) {
        return s;
    }
    float *dcol = sc.col, *tmp = sc.tmp;
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = geom_tile(&g, i);
        int64_t len = t.q1 - t.q0, cols = t.nb * len;
        const float *bmat;
        int64_t ldb;
        if (t.nb == 1) {
            bmat = dy->data + (t.n - g.nlo) * g.co * g.plane + t.q0;
            ldb = g.plane;
        } else {
            gather_tile(dy->data, &g, &t, tmp);
            bmat = tmp;
            ldb = cols;
        }
        if (pointwise && t.nb == 1) {
            float *c = dx->data + (t.n - dx->lo[0]) * ci * g.plane + t.q0;
            gemm(1, 0, g.k, cols, g.co, wsub, g.k, bmat, ldb, 0.0f, c, g.plane);
        } else {
            gemm(1, 0, g.k, cols, g.co, wsub, g.k, bmat, ldb, 0.0f, dcol, cols);
            for (int64_t j = 0; j < t.nb; j++) {
                col2im(dcol + j * len, cols, p, &g, t.n + j, t.q0, t.q1, dx, sc.pad);
            }
        }
    }
    scratch_free(&sc);
    return SW_OK;
}

/* ------------------------------------------------------------------ weight gradient */

/* dw (Co_b, K) = sum over the tiles of g of dy (Co_b, cols) x col (K, cols)^T. */
static sw_status weight_gemms(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p,
                              const conv_geom *g, const char *fn) {
    int pointwise = is_pointwise(p, x, g);
    int64_t ntiles = geom_ntiles(g);
    conv_scratch sc;
    sw_status s = scratch_alloc(&sc, g, p, x, pointwise, fn);
    if (s != SW_OK) {
        return s;
    }
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = geom_tile(g, i);
        int64_t len = t.q1 - t.q0, cols = t.nb * len;
        const float *bmat, *amat;
        int64_t ldb, lda;
        if (pointwise && t.nb == 1) {
            bmat = x->data + (t.n - x->lo[0]) * x->shape[1] * g->plane + t.q0;
            ldb = g->plane;
        } else {
            for (int64_t j = 0; j < t.nb; j++) {
                im2col(x, p, g, t.n + j, t.q0, t.q1, sc.col + j * len, cols, sc.pad);
            }
            bmat = sc.col;
            ldb = cols;
        }
        if (t.nb == 1) {
            amat = dy->data + (t.n - g->nlo) * g->co * g->plane + t.q0;
            lda = g->plane;
        } else {
            gather_tile(dy->data, g, &t, sc.tmp);
            amat = sc.tmp;
            lda = cols;
        }
        gemm(0, 1, g->co, g->k, cols, amat, lda, bmat, ldb, i == 0 ? 0.0f : 1.0f, dw, g->k);
    }
    scratch_free(&sc);
    return SW_OK;
}

/* db (Co_b) = sum of dy (N_b, Co_b, plane) over samples and pixels, in double
 * (a plane can hold many thousands of pixels). */
static void bias_sums(const sw_view *dy, int64_t plane, float *db) {
    int64_t co_n = dy->shape[1];
    for (int64_t co = 0; co < co_n; co++) {
        double acc = 0.0;
        for (int64_t n = 0; n < dy->shape[0]; n++) {
            const float *d = dy->data + (n * co_n + co) * plane;
            for (int64_t q = 0; q < plane; q++) {
                acc += d[q];
            }
        }
        db[co] = (float)acc;
    }
}

/* dw (Co_b, Ci, kh, kw) = sum over dy's box of dy (N_b, Co_b, Ho_b, Wo_b) x im2col(x (N_x, Ci, H_x, W_x))^T;
 * db (Co_b) = sum of dy over samples and pixels. */
sw_status sw_conv2d_backward_weight(const sw_view *x, const sw_view *dy, sw_view *dw, sw_view *db,
                                    const sw_window *p) {
    const char *fn = "conv2d_backward_weight";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(p, fn)) != SW_OK ||
        (s = sw_view_check(dy, 4, "conv2d_backward_weight: dy")) != SW_OK ||
        (s = sw_view_check(x, 4, "conv2d_backward_weight: x")) != SW_OK ||
        (s = check_weight(dw, p, "conv2d_backward_weight: dw", &ci)) != SW_OK ||
        (db && (s = sw_view_check(db, 1, "conv2d_backward_weight: db")) != SW_OK) ||
        (s = sw_view_check_range(dw, 0, dy->lo[1], dy->shape[1], "conv2d_backward_weight: dw",
                                 "output-channel (dy's)")) != SW_OK ||
        (db && (s = sw_view_check_range(db, 0, dy->lo[1], dy->shape[1], "conv2d_backward_weight: db",
                                        "output-channel (dy's)")) != SW_OK) ||
        (s = sw_view_check_range(x, 1, 0, ci, "conv2d_backward_weight: x", "channel (all of dw's Ci)")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "conv2d_backward_weight: x", dy, 0, "dy", "sample")) != SW_OK) {
        return s;
    }
    conv_geom g;
    int64_t xplane;
    if ((s = geom_init(&g, dy, dy->lo[0], sw_view_hi(dy, 0), ci, p, fn)) != SW_OK ||
        (s = checked_plane(x, fn, &xplane)) != SW_OK) {
        return s;
    }
    int64_t wvol = sw_view_volume(dw);
    if (wvol > 0) {
        memset(dw->data, 0, (size_t)wvol * sizeof(float));
        if (sw_view_volume(dy) > 0 && (s = weight_gemms(x, dy, dw->data, p, &g, fn)) != SW_OK) {
            return s;
        }
    }
    if (db && db->shape[0] > 0) {
        bias_sums(dy, g.plane, db->data);
    }
    return SW_OK;
}
