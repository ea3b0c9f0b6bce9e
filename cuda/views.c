/* views.c -- buffers on a GPU as the kernels see them: element maps over boxes, a stream's
 * scratch, and box copies within a GPU and between GPUs (cuda_backend.h).
 *
 * A view is a box of a global tensor stored row-major (csrc/core/view.h); a kernel walks
 * one box and reads every view at the same global index.  The map gives the box's extents
 * and each view's row-major strides; each pointer is moved to the box's first element:
 *   x view lo (0, 0, 15, 0) shape (8, 16, 18, 32), box lo (0, 0, 16, 0) hi (8, 16, 32, 32):
 *   strides (9216, 576, 32, 1), pointer + 1 * 32, extents (8, 16, 16, 32)
 */
#include <string.h>  /* memset */

#include "cuda_backend.h"

static void strides_of(const sw_view *v, int64_t *st) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= v->shape[d];
    }
}

/* v holds the box [lo, hi): its offset from v's first element, else -1. */
static int64_t box_offset(const sw_view *v, int rank, const int64_t *lo, const int64_t *hi, int64_t *st) {
    if (v->rank != rank) {
        return -1;
    }
    strides_of(v, st);
    int64_t off = 0;
    for (int d = 0; d < rank; d++) {
        if (lo[d] < v->lo[d] || hi[d] > v->lo[d] + v->shape[d]) {
            return -1;
        }
        off += (lo[d] - v->lo[d]) * st[d];
    }
    return off;
}

sw_status cu_map_box(int rank, const int64_t *lo, const int64_t *hi, const sw_view *dst, const sw_view *const *src,
                     int nsrc, swk_map *m, float **d, const float **s) {
    if (rank < 1 || rank > SWK_MAX_RANK || nsrc > SWK_MAX_SRC) {
        return SW_FAIL(SW_ERR_INTERNAL, "element map of rank %d with %d sources", rank, nsrc);
    }
    memset(m, 0, sizeof *m);
    m->rank = rank;
    m->nsrc = nsrc;
    for (int k = 0; k < rank; k++) {
        m->ext[k] = hi[k] > lo[k] ? hi[k] - lo[k] : 0;
    }
    int64_t off = box_offset(dst, rank, lo, hi, m->dst_stride);
    if (off < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "element map: the destination does not hold the box");
    }
    *d = dst->data + off;
    for (int k = 0; k < nsrc; k++) {
        off = box_offset(src[k], rank, lo, hi, m->src_stride[k]);
        if (off < 0) {
            return SW_FAIL(SW_ERR_INTERNAL, "element map: source %d does not hold the box", k);
        }
        s[k] = src[k]->data + off;
    }
    return SW_OK;
}

sw_status cu_map_over(const sw_view *dst, const sw_view *const *src, int nsrc, swk_map *m, float **d,
                      const float **s) {
    int64_t hi[SW_MAX_RANK];
    for (int k = 0; k < dst->rank; k++) {
        hi[k] = dst->lo[k] + dst->shape[k];
    }
    return cu_map_box(dst->rank, dst->lo, hi, dst, src, nsrc, m, d, s);
}

sw_status cu_eltwise(const cu_task *t, swk_op op, float a, const sw_view *dst, const sw_view *const *src, int nsrc) {
    swk_map m;
    float *d;
    const float *s[SWK_MAX_SRC];
    SW_TRY(cu_map_over(dst, src, nsrc, &m, &d, s));
    return cu_check(swk_map_run(op, a, &m, d, s, t->st->s), "element-wise kernel");
}

sw_status cu_copy_box(const cu_task *t, const sw_view *src, sw_view *dst, int accumulate) {
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    if (src->rank != dst->rank) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d copies between ranks %d and %d", t->e.id, src->rank, dst->rank);
    }
    if (sw_view_intersect(src, dst, lo, hi) == 0) {
        return SW_OK;
    }
    const sw_view *s1[1] = {src};
    swk_map m;
    float *d = NULL;
    const float *s[SWK_MAX_SRC];
    SW_TRY(cu_map_box(dst->rank, lo, hi, dst, s1, 1, &m, &d, s));
    return cu_check(swk_map_run(accumulate ? SWK_ACCUMULATE : SWK_COPY, 0.0f, &m, d, s, t->st->s), "box copy");
}

/* Without peer access: the box in cudaMemcpy3DPeerAsync calls, the driver staging them
 * through the host.  The three innermost dimensions go in one call (rows of the innermost
 * extent, pitched by each buffer's row length), the outer ones in a loop. */
static sw_status copy_staged(const cu_task *t, int from_gpu, const sw_view *src, sw_view *dst) {
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK], ss[SW_MAX_RANK], ds[SW_MAX_RANK];
    if (sw_view_intersect(src, dst, lo, hi) == 0) {
        return SW_OK;
    }
    int r = dst->rank;
    int64_t so = box_offset(src, r, lo, hi, ss), dof = box_offset(dst, r, lo, hi, ds);
    if (so < 0 || dof < 0 || r < 1 || r > SW_MAX_RANK) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: staged copy outside its views", t->e.id);
    }
    int inner = r < 3 ? r : 3, outer = r - inner;
    int64_t ext[SW_MAX_RANK] = {0};
    for (int d = 0; d < r; d++) {
        ext[d] = hi[d] - lo[d];
    }
    const size_t f = sizeof(float);
    /* rows: dimension r-1; rows per slice: r-2 (1 when absent); slices: r-3 (1 when absent) */
    size_t width = (size_t)ext[r - 1] * f;
    size_t height = inner >= 2 ? (size_t)ext[r - 2] : 1, depth = inner >= 3 ? (size_t)ext[r - 3] : 1;
    size_t spitch = inner >= 2 ? (size_t)ss[r - 2] * f : width, dpitch = inner >= 2 ? (size_t)ds[r - 2] * f : width;
    size_t sy = inner >= 3 ? (size_t)(ss[r - 3] / ss[r - 2]) : height;   /* rows per slice of each buffer */
    size_t dy = inner >= 3 ? (size_t)(ds[r - 3] / ds[r - 2]) : height;
    int64_t count = 1;
    for (int d = 0; d < outer; d++) {
        count *= ext[d];
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t rest = i, soff = so, doff = dof;
        for (int d = outer - 1; d >= 0; d--) {
            int64_t q = rest % ext[d];
            rest /= ext[d];
            soff += q * ss[d];
            doff += q * ds[d];
        }
        struct cudaMemcpy3DPeerParms p;
        memset(&p, 0, sizeof p);
        p.srcPtr = (struct cudaPitchedPtr){src->data + soff, spitch, width, sy};
        p.dstPtr = (struct cudaPitchedPtr){dst->data + doff, dpitch, width, dy};
        p.srcDevice = from_gpu;
        p.dstDevice = t->st->gpu;
        p.extent = (struct cudaExtent){width, height, depth};
        CU_TRY(cudaMemcpy3DPeerAsync(&p, t->st->s));
    }
    return SW_OK;
}

sw_status cu_copy_between(const cu_task *t, int from, const sw_view *src, sw_view *dst) {
    cuda_backend *be = t->be;
    sw_gpu_route r = sw_gpu_route_of(be->gpu_of, from, t->st->device, be->peer, be->ngpus);
    if (src->rank != dst->rank) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d copies between ranks %d and %d", t->e.id, src->rank, dst->rank);
    }
    return r == SW_ROUTE_STAGED ? copy_staged(t, be->gpu_of[from], src, dst) : cu_copy_box(t, src, dst, 0);
}

sw_status cu_zero(const cu_task *t, const sw_view *v) {
    return cu_check(cudaMemsetAsync(v->data, 0, sizeof(float) * (size_t)sw_view_volume(v), t->st->s), "zero a buffer");
}

void *cu_scratch(const cu_task *t, size_t bytes, sw_status *s) {
    cu_stream *st = t->st;
    size_t start = (st->used + SW_GPU_ALIGN - 1) / SW_GPU_ALIGN * SW_GPU_ALIGN;
    if (start + bytes > st->workspace_bytes) {
        *s = SW_FAIL(SW_ERR_NOMEM, "task %d needs %zu bytes of GPU workspace beyond the %zu its stream has: raise "
                     "the workspace (sw.Trainer(..., workspace_mb=...))", t->e.id, bytes,
                     st->workspace_bytes - CU_BLAS_WORKSPACE);
        return NULL;
    }
    st->used = start + bytes;
    return st->workspace + start;
}
