/* embedding.c -- table look-up by integer ids, on (rows) id views and (rows, D) outputs.
 *
 *   y[r, d]  = w[ids[r], d]  when ids[r] lies in w's v-range [v0, v1), else 0
 *   dw[v, d] = sum over rows r with ids[r] == v of dy[r, d]      (rows in order)
 *
 * The ids arrive as floats (the runtime's buffers are float32): exact integers below
 * 2^24, which the runtime checks against the vocabulary before a step.  w is a slice of
 * the (vocab, D) table at its *global* coordinates: under a vocabulary split each worker
 * looks up only the ids in its rows and the partial outputs add up (Megatron-LM's
 * vocabulary-parallel embedding).  The weight gradient adds rows in row order, so it is
 * the same bits whatever the timing.
 */
#include <string.h>  /* memcpy, memset */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_check_covers, sw_view_check_range */

/* The id of row r, or -1 when it is not a non-negative integer below 2^24. */
static int64_t id_at(const sw_view *ids, int64_t r) {
    float f = ids->data[r - ids->lo[0]];
    if (!(f >= 0.0f && f < 16777216.0f) || (float)(int64_t)f != f) {
        return -1;
    }
    return (int64_t)f;
}

static sw_status check_ids(const sw_view *ids, const sw_view *rows, const char *name) {
    sw_status s;
    if ((s = sw_view_check(ids, 1, name)) != SW_OK ||
        (s = sw_view_check_covers(ids, 0, name, rows, 0, "the rows", "row")) != SW_OK) {
        return s;
    }
    for (int64_t r = rows->lo[0]; r < sw_view_hi(rows, 0); r++) {
        if (id_at(ids, r) < 0) {
            return SW_FAIL(SW_ERR_VALUE, "%s: row %lld holds %g, not a token id", name, (long long)r,
                           (double)ids->data[r - ids->lo[0]]);
        }
    }
    return SW_OK;
}

sw_status sw_embedding_forward(const sw_view *ids, const sw_view *w, sw_view *y) {
    sw_status s;
    if ((s = sw_view_check(y, 2, "embedding_forward: y")) != SW_OK ||
        (s = sw_view_check(w, 2, "embedding_forward: w")) != SW_OK ||
        (s = sw_view_check_covers(w, 1, "embedding_forward: w", y, 1, "y", "feature")) != SW_OK ||
        (s = check_ids(ids, y, "embedding_forward: ids")) != SW_OK) {
        return s;
    }
    const int64_t db = y->shape[1], wd = w->shape[1], v0 = w->lo[0], v1 = sw_view_hi(w, 0);
    for (int64_t r = y->lo[0]; r < sw_view_hi(y, 0); r++) {
        float *yr = y->data + (r - y->lo[0]) * db;
        int64_t id = id_at(ids, r);
        if (id >= v0 && id < v1) {
            memcpy(yr, w->data + (id - v0) * wd + (y->lo[1] - w->lo[1]), sizeof(float) * (size_t)db);
        } else {
            memset(yr, 0, sizeof(float) * (size_t)db);
        }
    }
    return SW_OK;
}

sw_status sw_embedding_backward_weight(const sw_view *ids, const sw_view *dy, sw_view *dw) {
    sw_status s;
    if ((s = sw_view_check(dy, 2, "embedding_backward_weight: dy")) != SW_OK ||
        (s = sw_view_check(dw, 2, "embedding_backward_weight: dw")) != SW_OK ||
        (s = sw_view_check_range(dw, 1, dy->lo[1], dy->shape[1], "embedding_backward_weight: dw",
                                 "feature (dy's)")) != SW_OK ||
        (s = check_ids(ids, dy, "embedding_backward_weight: ids")) != SW_OK) {
        return s;
    }
    const int64_t db = dy->shape[1], v0 = dw->lo[0], v1 = sw_view_hi(dw, 0);
    memset(dw->data, 0, sizeof(float) * (size_t)sw_view_volume(dw));
    for (int64_t r = dy->lo[0]; r < sw_view_hi(dy, 0); r++) {
        int64_t id = id_at(ids, r);
        if (id < v0 || id >= v1) {
            continue;
        }
        const float *dr = dy->data + (r - dy->lo[0]) * db;
        float *g = dw->data + (id - v0) * db;
        for (int64_t d = 0; d < db; d++) {
            g[d] += dr[d];
        }
    }
    return SW_OK;
}
