/* conv_im2col.c -- im2col and col2im for the GEMM path of the convolution (conv.c).
 *
 *   col (K, cols): col[(ci, ky, kx), q] = x[n, c0 + ci, r*sh + ky*dh - ph, c*sw + kx*dw - pw]
 *   for output pixel q = (r, c) of the tile and the cn channels from c0 (all of them
 *   for a dense convolution, one group's for a grouped one), zero outside x's view;
 *   col2im adds such a matrix back into dx, dropping what falls outside dx's view.
 *   The window spans ext_h = (kh - 1) * dh + 1 rows (ext_w columns): a dilated
 *   kernel's taps are dh rows apart.
 *
 * Both go through a zero-padded copy of one input channel (`pad`, rows x cols
 * floats): the input rows and columns that the tile's output pixels read, with
 * zeros where they fall outside x's view.  Every tap (ky, kx) then reads its
 * row segments without bounds checks (for stride 1, plain contiguous copies),
 * instead of clipping every output row against the view once per tap: on the
 * 4x4..16x16 planes of a small ResNet that clipping cost more than the GEMM.
 *
 * For output box rows [ra, rb] (local to the box) of the tile:
 *   pad row i    = local input row  (r0 + ra) * sh - ph - x.lo[2] + i,   i in [0, (rb - ra) * sh + ext_h)
 *   pad column j = local input col  c0 * sw - pw - x.lo[3] + j,          j in [0, (wo - 1) * sw + ext_w)
 * so output pixel (rr, c) of tap (ky, kx) reads pad[(rr - ra) * sh + ky * dh][c * sw + kx * dw].
 * The window p is normalized (conv_window): dh, dw >= 1.
 */
#include <string.h>  /* memset, memcpy */

#include "conv_internal.h"

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
    pg.rows = (rb - pg.ra) * p->sh + conv_ext_h(p);
    pg.cols = (g->wo - 1) * p->sw + conv_ext_w(p);
    return pg;
}

/* Floats of the largest padded plane of any tile of g (one covering all the box's rows),
 * saturated at INT64_MAX: with strides up to 2^24 the product can exceed int64. */
int64_t conv_pad_floats(const sw_window *p, const conv_geom *g) {
    int64_t box_rows = g->wo > 0 ? conv_ceil_div(g->plane, g->wo) : 1;
    int64_t rows = (conv_max(box_rows, 1) - 1) * p->sh + conv_ext_h(p);
    int64_t cols = (conv_max(g->wo, 1) - 1) * p->sw + conv_ext_w(p);
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
int conv_use_pad_plane(const sw_window *p, const conv_geom *g, const sw_view *x) {
    int64_t covered = (x->shape[2] + 2 * conv_ext_h(p)) * (x->shape[3] + 2 * conv_ext_w(p));
    return conv_pad_floats(p, g) <= conv_max(CONV_COL_BUDGET, 4 * covered);
}

/* Box columns [*ca, *cb) of [cs, ce) whose tap reads a column inside [0, w): the
 * local input column of box column c is base + c * sw (base = ix0 + kx). */
static void clip_columns(int64_t base, int64_t sw, int64_t w, int64_t cs, int64_t ce, int64_t *ca, int64_t *cb) {
    int64_t lo = conv_max(cs, conv_ceil_div(-base, sw));
    int64_t hi = conv_min(ce, conv_floor_div(w - 1 - base, sw) + 1);
    *ca = conv_min(lo, ce);
    *cb = conv_max(*ca, hi);
}

/* pad (rows, cols) = channel plane src (h, w) shifted by (iy0, ix0), zero outside. */
static void pad_fill(const float *src, int64_t h, int64_t w, const pad_geom *pg, float *pad) {
    int64_t ja = conv_min(pg->cols, conv_max(0, -pg->ix0));       /* pad columns [ja, jb) lie inside [0, w) */
    int64_t jb = conv_max(ja, conv_min(pg->cols, w - pg->ix0));
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
    int64_t ja = conv_min(pg->cols, conv_max(0, -pg->ix0));
    int64_t jb = conv_max(ja, conv_min(pg->cols, w - pg->ix0));
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
                int64_t base = pg->ix0 + kx * p->dw;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = conv_min(g->wo, cs + (q1 - q));
                    int64_t iy = pg->iy0 + (rr - pg->ra) * p->sh + ky * p->dh;
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
                int64_t base = pg->ix0 + kx * p->dw;
                int64_t rr = q0 / g->wo, cs = q0 % g->wo;
                for (int64_t q = q0; q < q1; rr++) {
                    int64_t ce = conv_min(g->wo, cs + (q1 - q));
                    int64_t iy = pg->iy0 + (rr - pg->ra) * p->sh + ky * p->dh;
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
 * of the output box g: col[(ci, ky, kx), q] = x[n, c0 + ci, r*sh+ky*dh-ph, c*sw+kx*dw-pw]
 * for ci < cn, with (r, c) the pixel q, zero outside x's view.  pad: conv_pad_floats(p, g)
 * floats, or NULL to read x directly (use_pad_plane). */
void conv_im2col(const sw_view *x, int64_t c0, int64_t cn, const sw_window *p, const conv_geom *g, int64_t n,
                 int64_t q0, int64_t q1, float *col, int64_t ldcol, float *pad) {
    int64_t ci_n = cn, h = x->shape[2], w = x->shape[3];
    if (h == 0 || w == 0) {  /* an empty region: every read is padding (and x->data may be NULL) */
        for (int64_t k = 0; k < ci_n * p->kh * p->kw; k++) {
            memset(col + k * ldcol, 0, (size_t)(q1 - q0) * sizeof(float));
        }
        return;
    }
    pad_geom pg = pad_for(p, g, x, q0, q1);
    const float *xs = x->data + ((n - x->lo[0]) * x->shape[1] + (c0 - x->lo[1])) * h * w;
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
                    int64_t ce = conv_min(g->wo, cs + (q1 - q));  /* this row segment: box columns [cs, ce) */
                    const float *src = pad + ((rr - pg.ra) * p->sh + ky * p->dh) * pg.cols + kx * p->dw + cs * p->sw;
                    gather_row(out, src, ce - cs, p->sw);
                    out += ce - cs;
                    q += ce - cs;
                    cs = 0;
                }
            }
        }
    }
}

/* dx[n, c0 + ci, r*sh+ky*dh-ph, c*sw+kx*dw-pw] += dcol[(ci, ky, kx), q] for ci < cn and the
 * pixels [q0, q1) of sample n, dropping what falls outside dx's view.  pad:
 * conv_pad_floats(p, g) floats, or NULL to write dx directly (use_pad_plane). */
void conv_col2im(const float *dcol, int64_t ldcol, const sw_window *p, const conv_geom *g, int64_t n, int64_t q0,
                 int64_t q1, sw_view *dx, int64_t c0, int64_t cn, float *pad) {
    int64_t ci_n = cn, h = dx->shape[2], w = dx->shape[3];
    pad_geom pg = pad_for(p, g, dx, q0, q1);
    float *xs = dx->data + ((n - dx->lo[0]) * dx->shape[1] + (c0 - dx->lo[1])) * h * w;
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
                    int64_t ce = conv_min(g->wo, cs + (q1 - q));
                    float *dst = pad + ((rr - pg.ra) * p->sh + ky * p->dh) * pg.cols + kx * p->dw + cs * p->sw;
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
