/* bias.c -- the gradient of a bias: the output's gradient summed over every dimension
 * but the channel (dimension 1; the last for a linear or layer norm on (N, T, D)).
 *
 *   db (C_b) = sum over n and the trailing dimensions of dy (N_b, C_b, ...)
 *
 * A conv2d's or linear's bias and a batchnorm's beta all take it; it is the whole of
 * their dB sub-task, which reads nothing but dy (the lowering gives it its own task).
 * Sums run in double, in one fixed order per channel (samples, then positions), so the
 * result does not depend on how the work is scheduled.
 */
#include "kernels.h"
#include "simd.h"  /* SW_CLONES */
#include "../core/view.h"  /* sw_view_check, sw_view_check_range */

/* (outer, C_b) rows: column sums, 256 columns at a time, row by row (dy is row-major). */
SW_CLONES static void column_sums(const float *dy, int64_t nb, int64_t cb, float *db) {
    double acc[256];
    for (int64_t c0 = 0; c0 < cb; c0 += 256) {
        int64_t c1 = cb - c0 < 256 ? cb : c0 + 256;
        for (int64_t c = c0; c < c1; c++) {
            acc[c - c0] = 0.0;
        }
        for (int64_t n = 0; n < nb; n++) {
            const float *row = dy + n * cb;
            for (int64_t c = c0; c < c1; c++) {
                acc[c - c0] += row[c];
            }
        }
        for (int64_t c = c0; c < c1; c++) {
            db[c] = (float)acc[c - c0];
        }
    }
}

/* (outer, C_b, plane): per channel, its planes of every outer index in turn. */
static void plane_sums(const float *dy, int64_t outer, int64_t cb, int64_t plane, float *db) {
    for (int64_t c = 0; c < cb; c++) {
        double acc = 0.0;
        for (int64_t n = 0; n < outer; n++) {
            const float *d = dy + (n * cb + c) * plane;
            for (int64_t q = 0; q < plane; q++) {
                acc += d[q];
            }
        }
        db[c] = (float)acc;
    }
}

sw_status sw_bias_backward_axis(const sw_view *dy, int axis, sw_view *db) {
    sw_status s;
    if (!dy || dy->rank < 2 || dy->rank > SW_MAX_RANK || axis < 1 || axis >= dy->rank) {
        return SW_FAIL(SW_ERR_VALUE, "bias_backward: dy must have 2..%d dimensions (N, ..., C, ...) and the "
                       "bias a dimension after the first", SW_MAX_RANK);
    }
    if ((s = sw_view_check(dy, dy->rank, "bias_backward: dy")) != SW_OK ||
        (s = sw_view_check(db, 1, "bias_backward: db")) != SW_OK ||
        (s = sw_view_check_range(db, 0, dy->lo[axis], dy->shape[axis], "bias_backward: db",
                                 "channel (dy's)")) != SW_OK) {
        return s;
    }
    int64_t outer = 1, plane = 1;
    for (int d = 0; d < axis; d++) {
        outer *= dy->shape[d];
    }
    for (int d = axis + 1; d < dy->rank; d++) {
        plane *= dy->shape[d];
    }
    if (plane == 1) {
        column_sums(dy->data, outer, dy->shape[axis], db->data);
    } else {
        plane_sums(dy->data, outer, dy->shape[axis], plane, db->data);
    }
    return SW_OK;
}

sw_status sw_bias_backward(const sw_view *dy, sw_view *db) { return sw_bias_backward_axis(dy, 1, db); }
