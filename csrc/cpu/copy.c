/* copy.c -- moving data between views: region transfers, concat, flatten and
 * the sums of partial gradients.
 *
 * Both kernels work on the intersection of the two boxes in global
 * coordinates, for any rank 1..SW_MAX_RANK (the two views must have the same
 * rank).  An empty intersection is not an error: there is nothing to move.
 * The innermost dimension of the intersection is contiguous in both buffers,
 * so the work is a loop over rows of that dimension.
 */
#include <string.h>  /* memmove */

#include "kernels.h"  /* sw_view, sw_copy_box, sw_accumulate_box */
#include "view.h"     /* sw_view_check, sw_view_intersect, sw_view_offset */

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

/* Walk the rows of the intersection: dst row (+)= src row. */
static sw_status move_box(const sw_view *src, sw_view *dst, int accumulate) {
    const char *name = accumulate ? "accumulate_box" : "copy_box";
    sw_status s = check_pair(src, dst, name, accumulate ? "accumulate_box: src" : "copy_box: src",
                             accumulate ? "accumulate_box: dst" : "copy_box: dst");
    if (s != SW_OK) {
        return s;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK], idx[SW_MAX_RANK];
    if (sw_view_intersect(src, dst, lo, hi) == 0) {
        return SW_OK;
    }
    const int rank = src->rank;
    const int64_t len = hi[rank - 1] - lo[rank - 1];  /* contiguous run in both buffers */
    for (int d = 0; d < rank; d++) {
        idx[d] = lo[d];
    }
    for (;;) {
        const float *sp = src->data + sw_view_offset(src, idx);
        float *dp = dst->data + sw_view_offset(dst, idx);
        if (accumulate) {
            for (int64_t i = 0; i < len; i++) {
                dp[i] += sp[i];
            }
        } else {
            memmove(dp, sp, (size_t)len * sizeof(float));
        }
        /* odometer over the outer dimensions 0..rank-2 */
        int d = rank - 2;
        while (d >= 0) {
            if (++idx[d] < hi[d]) {
                break;
            }
            idx[d] = lo[d];
            d--;
        }
        if (d < 0) {
            break;
        }
    }
    return SW_OK;
}

sw_status sw_copy_box(const sw_view *src, sw_view *dst) { return move_box(src, dst, 0); }

sw_status sw_accumulate_box(const sw_view *src, sw_view *dst) { return move_box(src, dst, 1); }
