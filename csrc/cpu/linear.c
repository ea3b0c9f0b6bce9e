/*
 * linear.c -- fully connected layer on views: one SGEMM (OpenBLAS) per kernel.
 *
 *   y  (N_b, O_b) = x (N_b, I) w (O_b, I)^T + b (O_b)      forward, optional ReLU
 *   dx (N_b, I)   = dy (N_b, O_b) w (O_b, I)                data gradient (partial: dy's O range only)
 *   dw (O_b, I)   = dy (N_b, O_b)^T x (N_b, I)              weight gradient, db (O_b) = column sums of dy
 *
 * Coordinates are global (kernels.h): rows are samples, columns features.
 * Every view holds all I input features (the reduction is never split here);
 * x, w, b and dy may cover more rows / output features than the box computed.
 */
#include <stdint.h>  /* int64_t */
#include <string.h>  /* memset, memcpy */

#include "kernels.h"
#include "simd.h"  /* SW_CLONES */
#include "../core/view.h"  /* sw_view_check, sw_view_check_covers, sw_view_check_range, sw_check_blas_dims */

/* The in-features of a (rows, I) view that must hold all of them: [0, I). */
static sw_status check_all_features(const sw_view *v, int64_t in_features, const char *name) {
    return sw_view_check_range(v, 1, 0, in_features, name, "input-feature");
}

/* y = max(y, 0) over n floats (NaN stays NaN, as PyTorch's ReLU). */
SW_CLONES static void relu_rows(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = y[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

/* y (N_b, O_b) = x (N_x, I) rows of y . w (O_w, I) rows of y's O range ^T + b, ReLU if relu. */
sw_status sw_linear_forward(const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y, int relu) {
    sw_status s;
    if ((s = sw_view_check(y, 2, "linear_forward: y")) != SW_OK ||
        (s = sw_view_check(x, 2, "linear_forward: x")) != SW_OK ||
        (s = sw_view_check(w, 2, "linear_forward: w")) != SW_OK ||
        (b && (s = sw_view_check(b, 1, "linear_forward: b")) != SW_OK) ||
        (s = check_all_features(w, w->shape[1], "linear_forward: w")) != SW_OK ||
        (s = check_all_features(x, w->shape[1], "linear_forward: x (all of w's input features)")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "linear_forward: x", y, 0, "y", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "linear_forward: w", y, 1, "y", "output-feature")) != SW_OK ||
        (b && (s = sw_view_check_covers(b, 0, "linear_forward: b", y, 1, "y", "output-feature")) != SW_OK)) {
        return s;
    }
    int64_t nb = y->shape[0], ob = y->shape[1], in = w->shape[1];
    int64_t dims[3] = {nb, ob, in};
    if ((s = sw_check_blas_dims("linear_forward", 3, dims)) != SW_OK) {
        return s;
    }
    if (nb == 0 || ob == 0) {
        return SW_OK;
    }
    /* The bias goes in first and the SGEMM adds to it (beta 1), as PyTorch's addmm: no second
     * pass over y.  While the reduction fits one of OpenBLAS's K blocks every element is
     * bias + dot, the same bits as adding the bias after; beyond, the bias joins the first
     * block's partial sum (a different rounding, well within float tolerances). */
    const float *bias = b ? b->data + (y->lo[1] - b->lo[0]) : NULL;  /* (O_b) */
    if (bias) {
        for (int64_t n = 0; n < nb; n++) {
            memcpy(y->data + n * ob, bias, (size_t)ob * sizeof(float));
        }
    } else if (in == 0) {
        memset(y->data, 0, (size_t)(nb * ob) * sizeof(float));
    }
    if (in > 0) {
        const float *xs = x->data + (y->lo[0] - x->lo[0]) * in;  /* (N_b, I) */
        const float *ws = w->data + (y->lo[1] - w->lo[0]) * in;  /* (O_b, I) */
        sw_sgemm(0, 1, nb, ob, in, 1.0f, xs, in, ws, in, bias ? 1.0f : 0.0f, y->data, ob);
    }
    if (relu) {
        relu_rows(y->data, nb * ob);
    }
    return SW_OK;
}

/* dx (N_b, I) = dy (N_dy, O_b) rows of dx . w (O_w, I) rows of dy's O range. */
sw_status sw_linear_backward_data(const sw_view *w, const sw_view *dy, sw_view *dx) {
    sw_status s;
    if ((s = sw_view_check(dx, 2, "linear_backward_data: dx")) != SW_OK ||
        (s = sw_view_check(dy, 2, "linear_backward_data: dy")) != SW_OK ||
        (s = sw_view_check(w, 2, "linear_backward_data: w")) != SW_OK ||
        (s = check_all_features(w, w->shape[1], "linear_backward_data: w")) != SW_OK ||
        (s = check_all_features(dx, w->shape[1], "linear_backward_data: dx (all of w's input features)")) !=
            SW_OK ||
        (s = sw_view_check_covers(dy, 0, "linear_backward_data: dy", dx, 0, "dx", "sample")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "linear_backward_data: w", dy, 1, "dy", "output-feature")) != SW_OK) {
        return s;
    }
    int64_t nb = dx->shape[0], in = dx->shape[1], ob = dy->shape[1];
    int64_t dims[3] = {nb, ob, in};
    if ((s = sw_check_blas_dims("linear_backward_data", 3, dims)) != SW_OK) {
        return s;
    }
    if (nb == 0 || in == 0) {
        return SW_OK;
    }
    if (ob == 0) {
        memset(dx->data, 0, (size_t)(nb * in) * sizeof(float));
        return SW_OK;
    }
    const float *dys = dy->data + (dx->lo[0] - dy->lo[0]) * ob;  /* (N_b, O_b) */
    const float *ws = w->data + (dy->lo[1] - w->lo[0]) * in;     /* (O_b, I) */
    sw_sgemm(0, 0, nb, in, ob, 1.0f, dys, ob, ws, in, 0.0f, dx->data, in);
    return SW_OK;
}

/* dw (O_b, I) = dy (N_b, O_b)^T . x (N_x, I) rows of dy; db (O_b) = sum over rows of dy. */
sw_status sw_linear_backward_weight(const sw_view *x, const sw_view *dy, sw_view *dw, sw_view *db) {
    sw_status s;
    if ((s = sw_view_check(dw, 2, "linear_backward_weight: dw")) != SW_OK ||
        (s = sw_view_check(dy, 2, "linear_backward_weight: dy")) != SW_OK ||
        (s = sw_view_check(x, 2, "linear_backward_weight: x")) != SW_OK ||
        (db && (s = sw_view_check(db, 1, "linear_backward_weight: db")) != SW_OK) ||
        (s = check_all_features(dw, dw->shape[1], "linear_backward_weight: dw")) != SW_OK ||
        (s = sw_view_check_range(dw, 0, dy->lo[1], dy->shape[1], "linear_backward_weight: dw",
                                 "output-feature (dy's)")) != SW_OK ||
        (db && (s = sw_view_check_range(db, 0, dy->lo[1], dy->shape[1], "linear_backward_weight: db",
                                        "output-feature (dy's)")) != SW_OK) ||
        (s = check_all_features(x, dw->shape[1], "linear_backward_weight: x (all of dw's input features)")) !=
            SW_OK ||
        (s = sw_view_check_covers(x, 0, "linear_backward_weight: x", dy, 0, "dy", "sample")) != SW_OK) {
        return s;
    }
    int64_t nb = dy->shape[0], ob = dy->shape[1], in = dw->shape[1];
    int64_t dims[3] = {nb, ob, in};
    if ((s = sw_check_blas_dims("linear_backward_weight", 3, dims)) != SW_OK) {
        return s;
    }
    if (ob > 0 && in > 0) {
        if (nb == 0) {
            memset(dw->data, 0, (size_t)(ob * in) * sizeof(float));
        } else {
            const float *xs = x->data + (dy->lo[0] - x->lo[0]) * in;  /* (N_b, I) */
            sw_sgemm(1, 0, ob, in, nb, 1.0f, dy->data, ob, xs, in, 0.0f, dw->data, in);
        }
    }
    return db ? sw_bias_backward(dy, db) : SW_OK;
}
