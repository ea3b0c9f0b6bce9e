/* copy.c -- moving data between views: region transfers, concat, flatten and
 * the sums of partial gradients.
 *
 * Both kernels work on the intersection of the two boxes in global
 * coordinates, for any rank 1..SW_MAX_RANK (the two views must have the same
 * rank).  An empty intersection is not an error: there is nothing to move.
 * The work is a loop over the intersection's contiguous runs (view.h).
 */
#include <string.h>  /* memmove */

#include "kernels.h"  /* sw_view, sw_copy_box, sw_accumulate_box */
#include "simd.h"     /* SW_CLONES */
#include "../core/view.h"     /* sw_view_check, sw_view_intersect, sw_view_offset */

/* Both views valid and of the same rank 1..SW_MAX_RANK. */
static sw_status check_pair(const sw_view *src, const sw_view *dst, const char *name, const char *src_name,
                            const char *dst_name) {
    if (!src || !dst) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL view", name);
    }
    if (src->rank < 1 || src->rank > SW_MAX_RANK || dst->rank != src->rank) {
        return SW_FAIL(SW_ERR_VALUE, "%s: ranks must agree and lie in 1..%d (src %d, dst %d)", name, SW_MAX_RANK,
                       src->rank, dst->rank);
    }
    sw_status s = sw_view_check(src, src->rank, src_name);
    if (s == SW_OK) {
        s = sw_view_check(dst, dst->rank, dst_name);
    }
    return s;
}

/* d += s over len floats (compiled for AVX2 and the baseline: simd.h). */
SW_CLONES static void add_into(float *d, const float *s, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        d[i] += s[i];
    }
}

/* Walk the runs of the intersection: dst run (+)= src run. */
static sw_status move_box(const sw_view *src, sw_view *dst, int accumulate) {
    const char *name = accumulate ? "accumulate_box" : "copy_box";
    sw_status s = check_pair(src, dst, name, accumulate ? "accumulate_box: src" : "copy_box: src",
                             accumulate ? "accumulate_box: dst" : "copy_box: dst");
    if (s != SW_OK) {
        return s;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    if (sw_view_intersect(src, dst, lo, hi) == 0) {
        return SW_OK;
    }
    const sw_view *views[2] = {src, dst};
    sw_runs r;   /* contiguous in both buffers (view.h): one run when both hold just the intersection */
    (void)sw_runs_first(&r, views, 2, lo, hi, src->rank);
    do {
        const float *sp = src->data + sw_view_offset(src, r.idx);
        float *dp = dst->data + sw_view_offset(dst, r.idx);
        if (accumulate) {
            add_into(dp, sp, r.len);
        } else {
            memmove(dp, sp, (size_t)r.len * sizeof(float));
        }
    } while (sw_runs_next(&r));
    return SW_OK;
}

sw_status sw_copy_box(const sw_view *src, sw_view *dst) { return move_box(src, dst, 0); }

sw_status sw_accumulate_box(const sw_view *src, sw_view *dst) { return move_box(src, dst, 1); }
