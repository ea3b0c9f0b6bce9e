/*
 * conv.c -- 2-D convolution on views: the three kernels of kernels.h.
 *
 * After the checks each kernel offers the call to the direct loops
 * (conv_direct.c: small channel counts on AVX2 CPUs, where the GEMMs below are
 * thin; sw_conv_set_algorithm) and otherwise runs im2col + SGEMM (OpenBLAS).
 *
 * Why im2col + GEMM: it reuses the one BLAS the project already ships, handles
 * every stride / padding / asymmetric kernel with one code path, and on a
 * single thread the GEMM dominates: the copy writes K x P floats for the
 * Co_b x K x P multiply-adds they feed (about 15% of the forward time on a
 * 64->64 3x3 layer at 56x56, the rest is SGEMM).
 *
 * All three kernels walk the output-pixel box of y (forward, weight gradient)
 * or dy (data gradient) in tiles (conv_geom.c) so that the im2col buffer,
 * K x tile_cols floats with K = Ci*kh*kw, stays in cache:
 *
 *   col    (K, cols)        = im2col(x) for the tile's pixels
 *   y      (Co_b, cols)     = w (Co_b, K) x col                  forward
 *   dw     (Co_b, K)       += dy (Co_b, cols) x col^T            weight gradient
 *   dcol   (K, cols)        = w^T (K, Co_b) x dy (Co_b, cols)    data gradient, then col2im
 *
 * Coordinates are global (kernels.h): input row of output row r and kernel row
 * ky is r*sh + ky*dh - ph; a read outside x's view is zero (padding), a
 * data-gradient contribution outside dx's view is dropped.
 *
 * Grouped convolutions (p->group_co = cog output channels per group) run the same
 * GEMMs once per group the output box's channels meet (a segment: the box's
 * channels of one group, which read that group's Cig input channels), with
 * K = Cig*kh*kw; depthwise ones (Cig = 1), whose per-group GEMMs would be a few
 * rows deep, take the direct loops of conv_depthwise.c.  Dilated and grouped
 * calls never take conv_direct.c's loops, which assume neither.
 */
#include <string.h>  /* memset, memcpy */

#include "conv_internal.h"
#include "../core/view.h"  /* sw_view_check, sw_view_check_covers, ... */

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

/* The output channels [co0, co1) of one group within a box's range, and the group's first
 * input channel c0 (a dense convolution: the whole range, c0 = 0). */
typedef struct {
    int64_t co0, co1, c0;
} conv_seg;

/* The segment starting at output channel co of a box ending at hi; ci: Cig. */
static conv_seg seg_at(const sw_window *p, int64_t ci, int64_t co, int64_t hi) {
    conv_seg sg = {co, hi, 0};
    if (p->group_co > 0) {
        int64_t g = co / p->group_co;
        sg.co1 = conv_min(hi, (g + 1) * p->group_co);
        sg.c0 = g * ci;
    }
    return sg;
}

/* x (or dx) holds the input channels that output channels [lo, hi) read: exactly all Ci
 * of a dense convolution, at least those of every group met by a grouped one. */
static sw_status check_channels(const sw_view *x, const sw_window *p, int64_t ci, int64_t lo, int64_t hi,
                                const char *name) {
    if (p->group_co == 0) {
        return sw_view_check_range(x, 1, 0, ci, name, "channel (all of w's Ci)");
    }
    if (hi <= lo) {
        return SW_OK;
    }
    int64_t a = lo / p->group_co * ci, b = ((hi - 1) / p->group_co + 1) * ci;
    if (!sw_view_covers(x, 1, a, b)) {
        return SW_FAIL(SW_ERR_VALUE, "%s does not cover the input channels [%lld, %lld) of the groups of output "
                       "channels [%lld, %lld) (it has [%lld, %lld))", name, (long long)a, (long long)b, (long long)lo,
                       (long long)hi, (long long)x->lo[1], (long long)sw_view_hi(x, 1));
    }
    return SW_OK;
}

/* Dense and without dilation: the only calls conv_direct.c's loops may take. */
static int plain_window(const sw_window *p) { return p->group_co == 0 && p->dh == 1 && p->dw == 1; }

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

/* Scratch of one kernel call: the (K, tile_cols) im2col / col2im buffer and
 * the padded channel plane of im2col / col2im (unless the pointwise path needs
 * neither, or the plane would dwarf the input xv: conv_use_pad_plane) and a
 * (Co_b, tile_cols) staging buffer for tiles that hold several samples, from
 * the thread's scratch cache (conv_scratch). */
typedef struct {
    float *col, *tmp, *pad;
} conv_scratch_set;

static sw_status scratch_alloc(conv_scratch_set *sc, const conv_geom *g, const sw_window *p, const sw_view *xv,
                               int pointwise, const char *name) {
    sc->col = NULL;
    sc->tmp = NULL;
    sc->pad = NULL;
    if (!pointwise || g->nb > 1) {
        int with_pad = conv_use_pad_plane(p, g, xv);
        sc->col = conv_scratch(CONV_SCRATCH_COL, sizeof(float) * (size_t)(g->k * g->tile_cols));
        sc->pad = with_pad ? conv_scratch(CONV_SCRATCH_PAD, sizeof(float) * (size_t)conv_pad_floats(p, g)) : NULL;
        if (!sc->col || (with_pad && !sc->pad)) {
            return SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for a %lld x %lld im2col buffer", name,
                           (long long)g->k, (long long)g->tile_cols);
        }
    }
    if (g->nb > 1) {
        sc->tmp = conv_scratch(CONV_SCRATCH_TMP, sizeof(float) * (size_t)(g->co * g->tile_cols));
        if (!sc->tmp) {
            return SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for a %lld x %lld staging buffer", name,
                           (long long)g->co, (long long)g->tile_cols);
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ a fused ReLU's gradient */

/* mask (NULL, or the convolution's output y) has dy's box. */
static sw_status check_mask(const sw_view *mask, const sw_view *dy, const char *name) {
    if (!mask) {
        return SW_OK;
    }
    sw_status s = sw_view_check(mask, 4, name);
    if (s == SW_OK && !sw_view_same_box(mask, dy)) {
        s = SW_FAIL(SW_ERR_VALUE, "%s: y's box must be dy's", name);
    }
    return s;
}

/* *dz = dy through the mask (mask > 0 ? dy : 0) in this thread's scratch, for the paths
 * that read dy in place (im2col + GEMM, depthwise); dy itself when there is no mask. */
static sw_status masked_dy(const sw_view *dy, const sw_view *mask, sw_view *dz, const char *name) {
    *dz = *dy;
    if (!mask || sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    dz->data = conv_scratch(CONV_SCRATCH_MASKED, sizeof(float) * (size_t)sw_view_volume(dy));
    if (!dz->data) {
        return SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for the masked gradient", name);
    }
    return sw_relu_backward(mask, dy, dz);
}

/* ------------------------------------------------------------------ forward */

/* y (N_b, Co_b, Ho_b, Wo_b) = conv(x (N_x, Ci, H_x, W_x), w (Co_w, Cig, kh, kw)) + b (Co_b), optional ReLU. */
sw_status sw_conv2d_forward(const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y, const sw_window *pin) {
    const char *fn = "conv2d_forward";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(pin, fn)) != SW_OK) {
        return s;
    }
    const sw_window win = conv_window(pin), *p = &win;
    if ((s = sw_view_check(y, 4, "conv2d_forward: y")) != SW_OK ||
        (s = sw_view_check(x, 4, "conv2d_forward: x")) != SW_OK ||
        (s = conv_check_weight(w, p, "conv2d_forward: w", &ci)) != SW_OK ||
        (b && (s = sw_view_check(b, 1, "conv2d_forward: b")) != SW_OK) ||
        (s = check_channels(x, p, ci, y->lo[1], sw_view_hi(y, 1), "conv2d_forward: x")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "conv2d_forward: x", y, 0, "y", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "conv2d_forward: w", y, 1, "y", "output-channel")) != SW_OK ||
        (b && (s = sw_view_check_covers(b, 0, "conv2d_forward: b", y, 1, "y", "output-channel")) != SW_OK)) {
        return s;
    }
    conv_geom g;
    if ((s = conv_geom_init(&g, y, y->lo[0], sw_view_hi(y, 0), ci, p, fn)) != SW_OK) {
        return s;
    }
    int64_t xplane;
    if ((s = conv_checked_plane(x, fn, &xplane)) != SW_OK) {
        return s;
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    const float *wsub = w->data + (y->lo[1] - w->lo[0]) * g.k;        /* (Co_b, K) */
    const float *bias = b ? b->data + (y->lo[1] - b->lo[0]) : NULL;  /* (Co_b) */
    if (conv_depthwise_takes(p, ci)) {
        return conv_depthwise_forward(x, wsub, bias, y, p);
    }
    if (plain_window(p) && conv_direct_forward(x, wsub, bias, y, p, ci, &s)) {
        return s;
    }
    int pointwise = is_pointwise(p, x, &g);
    int64_t ntiles = conv_geom_ntiles(&g), yhi = sw_view_hi(y, 1);
    conv_scratch_set sc;
    if ((s = scratch_alloc(&sc, &g, p, x, pointwise, fn)) != SW_OK) {
        return s;
    }
    float *col = sc.col, *tmp = sc.tmp;
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = conv_geom_tile(&g, i);
        int64_t len = t.q1 - t.q0, cols = t.nb * len;
        /* the GEMMs write y's plane in place (one sample) or the staging buffer (several) */
        float *dst = t.nb == 1 ? y->data + (t.n - g.nlo) * g.co * g.plane + t.q0 : tmp;
        int64_t ldd = t.nb == 1 ? g.plane : cols;
        for (conv_seg sg = seg_at(p, ci, y->lo[1], yhi); sg.co0 < yhi; sg = seg_at(p, ci, sg.co1, yhi)) {
            const float *bmat;
            int64_t ldb, r = sg.co0 - y->lo[1];
            if (pointwise && t.nb == 1) {
                bmat = x->data + ((t.n - x->lo[0]) * x->shape[1] + sg.c0 - x->lo[1]) * g.plane + t.q0;
                ldb = g.plane;
            } else {
                for (int64_t j = 0; j < t.nb; j++) {
                    conv_im2col(x, sg.c0, ci, p, &g, t.n + j, t.q0, t.q1, col + j * len, cols, sc.pad);
                }
                bmat = col;
                ldb = cols;
            }
            gemm(0, 0, sg.co1 - sg.co0, cols, g.k, wsub + r * g.k, g.k, bmat, ldb, 0.0f, dst + r * ldd, ldd);
        }
        if (t.nb > 1 || bias || p->relu) {
            epilogue(dst, ldd, bias, p->relu, &g, &t, y->data);
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ data gradient */

/* dx (N_b, Ci, H_b, W_b) = the part of conv^T(w (Co_w, Cig, kh, kw), dy (N_y, Co_b, Ho_b, Wo_b)) inside dx's box,
 * dy through the mask when there is one. */
static sw_status backward_data(const sw_view *w, const sw_view *dy, const sw_view *mask, sw_view *dx,
                               const sw_window *pin) {
    const char *fn = "conv2d_backward_data";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(pin, fn)) != SW_OK) {
        return s;
    }
    const sw_window win = conv_window(pin), *p = &win;
    if ((s = sw_view_check(dy, 4, "conv2d_backward_data: dy")) != SW_OK ||
        (s = sw_view_check(dx, 4, "conv2d_backward_data: dx")) != SW_OK ||
        (s = conv_check_weight(w, p, "conv2d_backward_data: w", &ci)) != SW_OK ||
        (s = check_channels(dx, p, ci, dy->lo[1], sw_view_hi(dy, 1), "conv2d_backward_data: dx")) != SW_OK ||
        (s = sw_view_check_covers(dy, 0, "conv2d_backward_data: dy", dx, 0, "dx", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "conv2d_backward_data: w", dy, 1, "dy", "output-channel")) != SW_OK ||
        (s = check_mask(mask, dy, "conv2d_backward_data: y")) != SW_OK) {
        return s;
    }
    conv_geom g;
    if ((s = conv_geom_init(&g, dy, dx->lo[0], sw_view_hi(dx, 0), ci, p, fn)) != SW_OK) {
        return s;
    }
    int64_t xplane;
    if ((s = conv_checked_plane(dx, fn, &xplane)) != SW_OK) {
        return s;
    }
    int64_t nvol = sw_view_volume(dx);
    if (nvol == 0) {
        return SW_OK;
    }
    const float *wsub = w->data + (dy->lo[1] - w->lo[0]) * g.k;  /* (Co_b, K) */
    if (sw_view_volume(dy) > 0 && plain_window(p) && !conv_depthwise_takes(p, ci) &&
        conv_direct_backward_data(wsub, dy, mask, dx, p, ci, &s)) {
        return s;
    }
    sw_view dz;   /* the other paths read dy in place: masked first */
    if ((s = masked_dy(dy, mask, &dz, fn)) != SW_OK) {
        return s;
    }
    dy = &dz;
    if (sw_view_volume(dy) > 0 && conv_depthwise_takes(p, ci)) {
        return conv_depthwise_backward_data(wsub, dy, dx, p);
    }
    memset(dx->data, 0, (size_t)nvol * sizeof(float));
    if (sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    /* Only the dy rows whose window touches dx's rows contribute:
     * r*sh - ph + ext_h - 1 >= dx row lo and r*sh - ph <= dx row hi - 1. */
    int64_t rlo = conv_max(dy->lo[2], conv_ceil_div(dx->lo[2] + p->ph - conv_ext_h(p) + 1, p->sh));
    int64_t rhi = conv_min(sw_view_hi(dy, 2), conv_floor_div(sw_view_hi(dx, 2) - 1 + p->ph, p->sh) + 1);
    if (rhi <= rlo) {
        return SW_OK;
    }
    g.qa = (rlo - dy->lo[2]) * g.wo;
    g.qb = (rhi - dy->lo[2]) * g.wo;
    conv_geom_tiles(&g);
    int pointwise = is_pointwise(p, dx, &g);
    int64_t ntiles = conv_geom_ntiles(&g), yhi = sw_view_hi(dy, 1);
    conv_scratch_set sc;
    if ((s = scratch_alloc(&sc, &g, p, dx, pointwise, fn)) != SW_OK) {
        return s;
    }
    float *dcol = sc.col, *tmp = sc.tmp;
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = conv_geom_tile(&g, i);
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
        for (conv_seg sg = seg_at(p, ci, dy->lo[1], yhi); sg.co0 < yhi; sg = seg_at(p, ci, sg.co1, yhi)) {
            int64_t r = sg.co0 - dy->lo[1], rows = sg.co1 - sg.co0;
            if (pointwise && t.nb == 1) {   /* distinct groups write distinct channels: no sums across them */
                float *c = dx->data + ((t.n - dx->lo[0]) * dx->shape[1] + sg.c0 - dx->lo[1]) * g.plane + t.q0;
                gemm(1, 0, g.k, cols, rows, wsub + r * g.k, g.k, bmat + r * ldb, ldb, 0.0f, c, g.plane);
            } else {
                gemm(1, 0, g.k, cols, rows, wsub + r * g.k, g.k, bmat + r * ldb, ldb, 0.0f, dcol, cols);
                for (int64_t j = 0; j < t.nb; j++) {
                    conv_col2im(dcol + j * len, cols, p, &g, t.n + j, t.q0, t.q1, dx, sg.c0, ci, sc.pad);
                }
            }
        }
    }
    return SW_OK;
}

sw_status sw_conv2d_backward_data(const sw_view *w, const sw_view *dy, sw_view *dx, const sw_window *p) {
    return backward_data(w, dy, NULL, dx, p);
}

sw_status sw_conv2d_backward_data_relu(const sw_view *w, const sw_view *dy, const sw_view *y, sw_view *dx,
                                       const sw_window *p) {
    return y ? backward_data(w, dy, y, dx, p) : SW_FAIL(SW_ERR_VALUE, "conv2d_backward_data_relu: NULL y");
}

/* ------------------------------------------------------------------ weight gradient */

/* dw (Co_b, K) = sum over the tiles of g of dy (Co_b, cols) x col (K, cols)^T, per group segment. */
static sw_status weight_gemms(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p, int64_t ci,
                              const conv_geom *g, const char *fn) {
    int pointwise = is_pointwise(p, x, g);
    int64_t ntiles = conv_geom_ntiles(g), yhi = sw_view_hi(dy, 1);
    conv_scratch_set sc;
    sw_status s = scratch_alloc(&sc, g, p, x, pointwise, fn);
    if (s != SW_OK) {
        return s;
    }
    for (int64_t i = 0; i < ntiles; i++) {
        conv_tile t = conv_geom_tile(g, i);
        int64_t len = t.q1 - t.q0, cols = t.nb * len;
        const float *amat;
        int64_t lda;
        if (t.nb == 1) {
            amat = dy->data + (t.n - g->nlo) * g->co * g->plane + t.q0;
            lda = g->plane;
        } else {
            gather_tile(dy->data, g, &t, sc.tmp);
            amat = sc.tmp;
            lda = cols;
        }
        for (conv_seg sg = seg_at(p, ci, dy->lo[1], yhi); sg.co0 < yhi; sg = seg_at(p, ci, sg.co1, yhi)) {
            const float *bmat;
            int64_t ldb, r = sg.co0 - dy->lo[1];
            if (pointwise && t.nb == 1) {
                bmat = x->data + ((t.n - x->lo[0]) * x->shape[1] + sg.c0 - x->lo[1]) * g->plane + t.q0;
                ldb = g->plane;
            } else {
                for (int64_t j = 0; j < t.nb; j++) {
                    conv_im2col(x, sg.c0, ci, p, g, t.n + j, t.q0, t.q1, sc.col + j * len, cols, sc.pad);
                }
                bmat = sc.col;
                ldb = cols;
            }
            gemm(0, 1, sg.co1 - sg.co0, g->k, cols, amat + r * lda, lda, bmat, ldb, i == 0 ? 0.0f : 1.0f,
                 dw + r * g->k, g->k);
        }
    }
    return SW_OK;
}

/* dw (Co_b, Cig, kh, kw) = sum over dy's box of dy (N_b, Co_b, Ho_b, Wo_b) x conv_im2col(x (N_x, Ci, H_x, W_x))^T;
 * db (Co_b) = sum of dy over samples and pixels; dy through the mask when there is one. */
static sw_status backward_weight(const sw_view *x, const sw_view *dy, const sw_view *mask, sw_view *dw, sw_view *db,
                                 const sw_window *pin) {
    const char *fn = "conv2d_backward_weight";
    sw_status s;
    int64_t ci;
    if ((s = sw_window_check(pin, fn)) != SW_OK) {
        return s;
    }
    const sw_window win = conv_window(pin), *p = &win;
    if ((s = sw_view_check(dy, 4, "conv2d_backward_weight: dy")) != SW_OK ||
        (s = sw_view_check(x, 4, "conv2d_backward_weight: x")) != SW_OK ||
        (s = conv_check_weight(dw, p, "conv2d_backward_weight: dw", &ci)) != SW_OK ||
        (db && (s = sw_view_check(db, 1, "conv2d_backward_weight: db")) != SW_OK) ||
        (s = sw_view_check_range(dw, 0, dy->lo[1], dy->shape[1], "conv2d_backward_weight: dw",
                                 "output-channel (dy's)")) != SW_OK ||
        (db && (s = sw_view_check_range(db, 0, dy->lo[1], dy->shape[1], "conv2d_backward_weight: db",
                                        "output-channel (dy's)")) != SW_OK) ||
        (s = check_channels(x, p, ci, dy->lo[1], sw_view_hi(dy, 1), "conv2d_backward_weight: x")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "conv2d_backward_weight: x", dy, 0, "dy", "sample")) != SW_OK ||
        (s = check_mask(mask, dy, "conv2d_backward_weight: y")) != SW_OK) {
        return s;
    }
    conv_geom g;
    int64_t xplane;
    if ((s = conv_geom_init(&g, dy, dy->lo[0], sw_view_hi(dy, 0), ci, p, fn)) != SW_OK ||
        (s = conv_checked_plane(x, fn, &xplane)) != SW_OK) {
        return s;
    }
    int64_t wvol = sw_view_volume(dw);
    if (wvol > 0) {
        int nonempty = sw_view_volume(dy) > 0;
        if (!(nonempty && plain_window(p) && !conv_depthwise_takes(p, ci) &&
              conv_direct_backward_weight(x, dy, mask, dw->data, p, ci, &s))) {
            sw_view dz;   /* the other paths read dy in place: masked first */
            if ((s = masked_dy(dy, mask, &dz, fn)) != SW_OK) {
                return s;
            }
            if (nonempty && conv_depthwise_takes(p, ci)) {
                s = conv_depthwise_backward_weight(x, &dz, dw->data, p);
            } else {
                memset(dw->data, 0, (size_t)wvol * sizeof(float));
                s = nonempty ? weight_gemms(x, &dz, dw->data, p, ci, &g, fn) : SW_OK;
            }
        }
        if (s != SW_OK) {
            return s;
        }
    }
    if (!db) {
        return SW_OK;
    }
    return mask ? sw_bias_backward_relu(dy, mask, 1, db) : sw_bias_backward(dy, db);
}

sw_status sw_conv2d_backward_weight(const sw_view *x, const sw_view *dy, sw_view *dw, sw_view *db,
                                    const sw_window *p) {
    return backward_weight(x, dy, NULL, dw, db, p);
}

sw_status sw_conv2d_backward_weight_relu(const sw_view *x, const sw_view *dy, const sw_view *y, sw_view *dw,
                                         sw_view *db, const sw_window *p) {
    return y ? backward_weight(x, dy, y, dw, db, p) : SW_FAIL(SW_ERR_VALUE, "conv2d_backward_weight_relu: NULL y");
}
