/* view.c -- index math and validation on views, shared by the kernels of every backend (see view.h). */
#include <stddef.h>  /* NULL */
#include <stdint.h>  /* INT64_MAX, INT32_MAX */

#include "view.h"

#define SW_VIEW_COORD_LIMIT ((int64_t)1 << 36)
#define SW_WINDOW_PARAM_LIMIT ((int64_t)1 << 24)

int64_t sw_view_volume(const sw_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] <= 0) {
            return 0;
        }
        n *= v->shape[d];
    }
    return n;
}

void sw_view_strides(const sw_view *v, int64_t *strides) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= v->shape[d];
    }
}

int64_t sw_view_offset(const sw_view *v, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < v->rank; d++) {
        off = off * v->shape[d] + (idx[d] - v->lo[d]);
    }
    return off;
}

int sw_view_contains(const sw_view *v, const int64_t *idx) {
    for (int d = 0; d < v->rank; d++) {
        if (idx[d] < v->lo[d] || idx[d] >= sw_view_hi(v, d)) {
            return 0;
        }
    }
    return 1;
}

int64_t sw_view_intersect(const sw_view *a, const sw_view *b, int64_t *lo, int64_t *hi) {
    int64_t n = 1;
    for (int d = 0; d < a->rank; d++) {
        lo[d] = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
        int64_t ah = sw_view_hi(a, d), bh = sw_view_hi(b, d);
        hi[d] = ah < bh ? ah : bh;
        if (hi[d] <= lo[d]) {
            n = 0;
        } else if (n > 0) {
            n *= hi[d] - lo[d];
        }
    }
    return n;
}

sw_status sw_view_check(const sw_view *v, int rank, const char *name) {
    if (v == NULL) {
        return SW_FAIL(SW_ERR_VALUE, "%s: view is NULL", name);
    }
    if (v->rank != rank) {
        return SW_FAIL(SW_ERR_VALUE, "%s: expected rank %d, got %d", name, rank, v->rank);
    }
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        int64_t e = v->shape[d];
        if (e < 0) {
            return SW_FAIL(SW_ERR_VALUE, "%s: negative extent %lld in dimension %d", name, (long long)e, d);
        }
        if (e > 0 && n > INT64_MAX / e) {
            return SW_FAIL(SW_ERR_VALUE, "%s: volume overflows int64", name);
        }
        n *= e;
        /* Global coordinates stay within +-2^36 so that index arithmetic such
         * as r * stride + k - pad (window parameters < 2^24) cannot overflow. */
        if (v->lo[d] < -SW_VIEW_COORD_LIMIT || v->lo[d] > SW_VIEW_COORD_LIMIT || e > SW_VIEW_COORD_LIMIT) {
            return SW_FAIL(SW_ERR_VALUE, "%s: coordinate range out of bounds in dimension %d", name, d);
        }
    }
    if (n > 0 && v->data == NULL) {
        return SW_FAIL(SW_ERR_VALUE, "%s: data is NULL for a view of %lld elements", name, (long long)n);
    }
    return SW_OK;
}

int sw_view_same_box(const sw_view *a, const sw_view *b) {
    if (a->rank != b->rank) {
        return 0;
    }
    for (int d = 0; d < a->rank; d++) {
        if (a->lo[d] != b->lo[d] || a->shape[d] != b->shape[d]) {
            return 0;
        }
    }
    return 1;
}

int sw_view_covers(const sw_view *v, int d, int64_t lo, int64_t hi) {
    if (lo >= hi) {
        return 1;
    }
    return v->lo[d] <= lo && hi <= sw_view_hi(v, d);
}

sw_status sw_view_check_covers(const sw_view *outer, int od, const char *oname, const sw_view *inner, int id,
                               const char *iname, const char *what) {
    int64_t lo = inner->lo[id], hi = sw_view_hi(inner, id);
    if (sw_view_covers(outer, od, lo, hi)) {
        return SW_OK;
    }
    return SW_FAIL(SW_ERR_VALUE, "%s does not cover %s's %s range [%lld, %lld) (it has [%lld, %lld))", oname, iname,
                   what, (long long)lo, (long long)hi, (long long)outer->lo[od], (long long)sw_view_hi(outer, od));
}

sw_status sw_view_check_range(const sw_view *v, int d, int64_t lo, int64_t extent, const char *name,
                              const char *what) {
    if (v->lo[d] == lo && v->shape[d] == extent) {
        return SW_OK;
    }
    return SW_FAIL(SW_ERR_VALUE, "%s: %s range must be [%lld, %lld), got [%lld, %lld)", name, what, (long long)lo,
                   (long long)(lo + extent), (long long)v->lo[d], (long long)sw_view_hi(v, d));
}

sw_status sw_window_check(const sw_window *p, const char *name) {
    if (p == NULL) {
        return SW_FAIL(SW_ERR_VALUE, "%s: window is NULL", name);
    }
    if (p->kh < 1 || p->kw < 1 || p->sh < 1 || p->sw < 1 || p->ph < 0 || p->pw < 0) {
        return SW_FAIL(SW_ERR_VALUE,
                       "%s: kernel and stride must be >= 1 and padding >= 0 "
                       "(kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld)",
                       name, (long long)p->kh, (long long)p->kw, (long long)p->sh, (long long)p->sw,
                       (long long)p->ph, (long long)p->pw);
    }
    if (p->dh < 0 || p->dw < 0 || p->group_co < 0) {
        return SW_FAIL(SW_ERR_VALUE, "%s: dilation and channels per group must be >= 0 (dilation %lldx%lld, "
                       "%lld output channels per group)", name, (long long)p->dh, (long long)p->dw,
                       (long long)p->group_co);
    }
    const int64_t lim = SW_WINDOW_PARAM_LIMIT;
    if (p->kh > lim || p->kw > lim || p->sh > lim || p->sw > lim || p->ph > lim || p->pw > lim || p->dh > lim ||
        p->dw > lim || p->group_co > ((int64_t)1 << 36)) {
        return SW_FAIL(SW_ERR_VALUE, "%s: window parameters too large", name);
    }
    return SW_OK;
}

sw_status sw_check_blas_dims(const char *name, int count, const int64_t *dims) {
    for (int i = 0; i < count; i++) {
        if (dims[i] > INT32_MAX) {
            return SW_FAIL(SW_ERR_VALUE, "%s: dimension %lld exceeds the 32-bit BLAS interface", name,
                           (long long)dims[i]);
        }
    }
    return SW_OK;
}

int sw_runs_first(sw_runs *r, const sw_view *const *views, int nviews, const int64_t *lo, const int64_t *hi,
                  int rank) {
    r->rank = rank;
    for (int d = 0; d < rank; d++) {
        if (hi[d] <= lo[d]) {
            return 0;
        }
        r->lo[d] = r->idx[d] = lo[d];
        r->hi[d] = hi[d];
    }
    int d0 = rank - 1;
    r->len = hi[d0] - lo[d0];
    while (d0 > 0) {   /* extend the run over dimension d0 - 1 when every view holds exactly [lo, hi) in d0 */
        int exact = 1;
        for (int k = 0; k < nviews && exact; k++) {
            exact = views[k]->lo[d0] == lo[d0] && views[k]->shape[d0] == hi[d0] - lo[d0];
        }
        if (!exact) {
            break;
        }
        d0--;
        r->len *= hi[d0] - lo[d0];
    }
    r->outer = d0;
    return 1;
}

int sw_runs_next(sw_runs *r) {
    for (int d = r->outer - 1; d >= 0; d--) {
        if (++r->idx[d] < r->hi[d]) {
            return 1;
        }
        r->idx[d] = r->lo[d];
    }
    return 0;
}

sw_status sw_view_check_elementwise_out(const sw_view *out, const char *name) {
    if (!out) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL view", name);
    }
    if (out->rank < 1 || out->rank > SW_MAX_RANK) {
        return SW_FAIL(SW_ERR_VALUE, "%s: rank %d is not in 1..%d", name, out->rank, SW_MAX_RANK);
    }
    return sw_view_check(out, out->rank, name);
}

sw_status sw_view_check_elementwise_in(const sw_view *in, const char *in_name, const sw_view *out,
                                       const char *out_name) {
    if (!in) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL view", in_name);
    }
    sw_status s = sw_view_check(in, out->rank, in_name);
    for (int d = 0; s == SW_OK && d < out->rank; d++) {
        s = sw_view_check_covers(in, d, in_name, out, d, out_name, "index");
    }
    return s;
}

/* ---- matmul boxes ---- */
int sw_matmul_holds(const sw_view *v, const sw_view *out, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    int n = v->rank;
    if (n != out->rank || n < 2) {
        return 0;
    }
    for (int d = 0; d < n - 2; d++) {
        if (!sw_view_covers(v, d, out->lo[d], sw_view_hi(out, d))) {
            return 0;
        }
    }
    return sw_view_covers(v, n - 2, r0, r0 + nr) && sw_view_covers(v, n - 1, c0, c0 + nc);
}

int sw_matmul_forward_boxes(const sw_view *a, const sw_view *b, int ta, int tb, const sw_view *y) {
    int r = y->rank;
    int64_t m = y->shape[r - 2], n = y->shape[r - 1], m0 = y->lo[r - 2], n0 = y->lo[r - 1];
    int64_t k = a->shape[ta ? r - 2 : r - 1], k0 = a->lo[ta ? r - 2 : r - 1];
    return (ta ? sw_matmul_holds(a, y, k0, k, m0, m) : sw_matmul_holds(a, y, m0, m, k0, k)) &&
           (tb ? sw_matmul_holds(b, y, n0, n, k0, k) : sw_matmul_holds(b, y, k0, k, n0, n));
}

int sw_matmul_backward_boxes(const sw_view *a, const sw_view *b, const sw_view *dy, const sw_view *dx, int ta,
                             int tb, int slot) {
    int r = dy->rank;
    if (r < 2 || dx->rank != r || (slot != 0 && slot != 1)) {
        return 0;
    }
    int64_t m = dy->shape[r - 2], n = dy->shape[r - 1], m0 = dy->lo[r - 2], n0 = dy->lo[r - 1];
    int kd = slot == 0 ? (ta ? r - 2 : r - 1) : (tb ? r - 1 : r - 2);   /* the part of K dx holds */
    int64_t k = dx->shape[kd], k0 = dx->lo[kd];
    int ok = slot == 0 ? (ta ? sw_matmul_holds(dx, dy, k0, k, m0, m) && dx->shape[r - 1] == m
                             : sw_matmul_holds(dx, dy, m0, m, k0, k) && dx->shape[r - 2] == m) &&
                             (tb ? sw_matmul_holds(b, dy, n0, n, k0, k) : sw_matmul_holds(b, dy, k0, k, n0, n))
                       : (tb ? sw_matmul_holds(dx, dy, n0, n, k0, k) && dx->shape[r - 2] == n
                             : sw_matmul_holds(dx, dy, k0, k, n0, n) && dx->shape[r - 1] == n) &&
                             (ta ? sw_matmul_holds(a, dy, k0, k, m0, m) : sw_matmul_holds(a, dy, m0, m, k0, k));
    for (int d = 0; ok && d < r - 2; d++) {
        ok = dx->lo[d] == dy->lo[d] && dx->shape[d] == dy->shape[d];
    }
    return ok;
}

int sw_matmul_next_batch(const sw_view *out, int64_t *batch) {
    for (int d = out->rank - 3; d >= 0; d--) {
        if (++batch[d] < sw_view_hi(out, d)) {
            return 1;
        }
        batch[d] = out->lo[d];
    }
    return 0;
}
