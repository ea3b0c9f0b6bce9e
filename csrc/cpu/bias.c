/* bias.c -- the gradient of a bias: the output's gradient summed over every dimension
 * but the channel (dimension 1; the last for a linear or layer norm on (N, T, D)).
 *
 *   db (C_b) = sum over n and the trailing dimensions of dy (N_b, C_b, ...)
 *
 * A conv2d's or linear's bias and a batchnorm's beta all take it; it is the whole of
 * their dB sub-task, which reads nothing but dy (the lowering gives it its own task).
 * Sums run in double, in one fixed order per channel (samples, then positions, in eight
 * lanes over a plane's positions), so the result does not depend on how the work is
 * scheduled.  sw_bias_backward_relu sums the gradient through a fused ReLU (dy where the
 * output y > 0) without writing the masked gradient first.
 */
#include "kernels.h"
#include "simd.h"  /* SW_CLONES */
#include "../core/view.h"  /* sw_view_check, sw_view_check_range */

/* dy's value at i, through the fused ReLU whose output is y (NULL: none): relu_backward's
 * select (eltwise.c), so the sums are those of the masked gradient it would have written. */
static inline float through(const float *dy, const float *y, int64_t i) {
    const float g = dy[i];
    return y ? (y[i] > 0.0f ? g : 0.0f) : g;
}

/* (outer, C_b) rows: column sums, 256 columns at a time, row by row (dy is row-major). */
SW_CLONES static void column_sums(const float *dy, const float *y, int64_t nb, int64_t cb, float *db) {
    double acc[256];
    for (int64_t c0 = 0; c0 < cb; c0 += 256) {
        int64_t c1 = cb - c0 < 256 ? cb : c0 + 256;
        for (int64_t c = c0; c < c1; c++) {
            acc[c - c0] = 0.0;
        }
        for (int64_t n = 0; n < nb; n++) {
            for (int64_t c = c0; c < c1; c++) {
                acc[c - c0] += through(dy, y, n * cb + c);
            }
        }
        for (int64_t c = c0; c < c1; c++) {
            db[c] = (float)acc[c - c0];
        }
    }
}

enum { LANES = 8 };   /* double partial sums per channel (plane_sums) */

/* (outer, C_b, plane): per channel, its planes of every outer index in turn, in LANES
 * partial sums (element q of a plane into lane q mod LANES; a plane's tail into the first
 * lanes), added up in lane order at the end.  One chain of dependent double additions
 * (4 cycles each) took 7 ms for the 4M floats of the scaled AlexNet's first convolution;
 * the lanes are in the source because the compiler never reorders a floating-point sum. */
SW_CLONES static void plane_sums(const float *dy, const float *y, int64_t outer, int64_t cb, int64_t plane,
                                 float *db) {
    const int64_t body = plane / LANES * LANES;
    for (int64_t c = 0; c < cb; c++) {
        double acc[LANES] = {0.0};
        for (int64_t n = 0; n < outer; n++) {
            const int64_t at = (n * cb + c) * plane;
            const float *d = dy + at, *m = y ? y + at : NULL;
            if (m) {   /* the two loops written out: the compiler vectorizes each */
                for (int64_t q = 0; q < body; q += LANES) {
                    for (int j = 0; j < LANES; j++) {
                        acc[j] += through(d, m, q + j);
                    }
                }
            } else {
                for (int64_t q = 0; q < body; q += LANES) {
                    for (int j = 0; j < LANES; j++) {
                        acc[j] += d[q + j];
                    }
                }
            }
            for (int64_t q = body; q < plane; q++) {
                acc[q - body] += through(d, m, q);
            }
        }
        double sum = 0.0;
        for (int j = 0; j < LANES; j++) {
            sum += acc[j];
        }
        db[c] = (float)sum;
    }
}

/* The sums of dy (or of dy through the fused ReLU with output y, same box) into db. */
static sw_status bias_sums(const sw_view *dy, const sw_view *y, int axis, sw_view *db, const char *name) {
    sw_status s;
    if (!dy || dy->rank < 2 || dy->rank > SW_MAX_RANK || axis < 1 || axis >= dy->rank) {
        return SW_FAIL(SW_ERR_VALUE, "%s: dy must have 2..%d dimensions (N, ..., C, ...) and the "
                       "bias a dimension after the first", name, SW_MAX_RANK);
    }
    if ((s = sw_view_check(dy, dy->rank, name)) != SW_OK || (s = sw_view_check(db, 1, name)) != SW_OK ||
        (s = sw_view_check_range(db, 0, dy->lo[axis], dy->shape[axis], name, "channel (dy's)")) != SW_OK) {
        return s;
    }
    if (y) {
        if ((s = sw_view_check(y, dy->rank, name)) != SW_OK) {
            return s;
        }
        if (!sw_view_same_box(y, dy)) {
            return SW_FAIL(SW_ERR_VALUE, "%s: y's box must be dy's", name);
        }
    }
    int64_t outer = 1, plane = 1;
    for (int d = 0; d < axis; d++) {
        outer *= dy->shape[d];
    }
    for (int d = axis + 1; d < dy->rank; d++) {
        plane *= dy->shape[d];
    }
    const float *m = y ? y->data : NULL;
    if (plane == 1) {
        column_sums(dy->data, m, outer, dy->shape[axis], db->data);
    } else {
        plane_sums(dy->data, m, outer, dy->shape[axis], plane, db->data);
    }
    return SW_OK;
}

sw_status sw_bias_backward_axis(const sw_view *dy, int axis, sw_view *db) {
    return bias_sums(dy, NULL, axis, db, "bias_backward");
}

sw_status sw_bias_backward_relu(const sw_view *dy, const sw_view *y, int axis, sw_view *db) {
    return bias_sums(dy, y, axis, db, "bias_backward_relu");
}

sw_status sw_bias_backward(const sw_view *dy, sw_view *db) { return sw_bias_backward_axis(dy, 1, db); }
