/* broadcast.c -- adding a tensor over the leading dimensions it lacks, and its gradient.
 *
 *   y[l.., t..] = a[l.., t..] + b[t..]        b's dimensions are a's trailing ones
 *   db[t..]     = sum over l.. of dy[l.., t..] (leading indices in row order)
 *
 * A learned position table (T, D) added to token embeddings (N, T, D) is the case in
 * view.  Coordinates are global (kernels.h); a and dy hold y's / db's box.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "simd.h"  /* SW_CLONES */
#include "../core/view.h"  /* sw_view_check, sw_view_contains, sw_view_offset */

/* y[i] = a[i] + b[i] over one row (y may be a: the in-place sum of the gradient). */
SW_CLONES static void add_row(const float *a, const float *b, float *y, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        y[i] = a[i] + b[i];
    }
}

/* The next row of v's box (o's last coordinate stays at the box's start) in row-major order;
 * 0 after the last. */
static int next_row(const sw_view *v, int64_t *o) {
    for (int d = v->rank - 2; d >= 0; d--) {
        if (++o[d] < sw_view_hi(v, d)) {
            return 1;
        }
        o[d] = v->lo[d];
    }
    return 0;
}

static sw_status check_trailing(const sw_view *big, const sw_view *small, const char *name) {
    sw_status s;
    if ((s = sw_view_check(big, big ? big->rank : 0, name)) != SW_OK ||
        (s = sw_view_check(small, small ? small->rank : 0, name)) != SW_OK) {
        return s;
    }
    if (small->rank < 1 || small->rank > big->rank) {
        return SW_FAIL(SW_ERR_VALUE, "%s: rank %d cannot broadcast to rank %d", name, small->rank, big->rank);
    }
    return SW_OK;
}

sw_status sw_add_broadcast_forward(const sw_view *a, const sw_view *b, sw_view *y) {
    const char *name = "add_broadcast_forward";
    SW_TRY(check_trailing(y, b, name));
    SW_TRY(sw_view_check_elementwise_in(a, "add_broadcast_forward: a", y, "y"));
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    int lead = y->rank - b->rank;
    int64_t o[SW_MAX_RANK];
    for (int d = 0; d < y->rank; d++) {
        o[d] = y->lo[d];
        if (d >= lead && !sw_view_covers(b, d - lead, y->lo[d], sw_view_hi(y, d))) {
            return SW_FAIL(SW_ERR_VALUE, "%s: b does not cover y's box", name);
        }
    }
    const int last = y->rank - 1;
    const int64_t len = y->shape[last];
    float *out = y->data;
    do {   /* row by row along the last dimension: contiguous in a, b and y */
        add_row(a->data + sw_view_offset(a, o), b->data + sw_view_offset(b, o + lead), out, len);
        out += len;
    } while (next_row(y, o));
    return SW_OK;
}

sw_status sw_sum_leading(const sw_view *dy, sw_view *db) {
    const char *name = "sum_leading";
    SW_TRY(check_trailing(dy, db, name));
    memset(db->data, 0, sizeof(float) * (size_t)sw_view_volume(db));
    if (sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    int lead = dy->rank - db->rank;
    int64_t o[SW_MAX_RANK];
    for (int d = 0; d < dy->rank; d++) {
        o[d] = dy->lo[d];
    }
    /* row by row of dy along the last dimension, the part of each row inside db's last range */
    const int last = dy->rank - 1;
    const int64_t len = dy->shape[last];
    const int64_t blo = db->lo[db->rank - 1], bhi = sw_view_hi(db, db->rank - 1);
    const int64_t c0 = blo > dy->lo[last] ? blo : dy->lo[last];
    const int64_t c1 = bhi < sw_view_hi(dy, last) ? bhi : sw_view_hi(dy, last);
    const float *g = dy->data;
    do {
        o[last] = c0;
        if (c1 > c0 && sw_view_contains(db, o + lead)) {
            float *row = db->data + sw_view_offset(db, o + lead);
            add_row(row, g + (c0 - dy->lo[last]), row, c1 - c0);
        }
        o[last] = dy->lo[last];
        g += len;
    } while (next_row(dy, o));
    return SW_OK;
}
