/* pool.c -- 2-D max and average pooling on views (kernels.h).
 *
 *   y[n, c, r, q] = max / mean over dy < kh, dx < kw of x[n, c, r*sh + dy - ph, q*sw + dx - pw]
 *
 * Reads outside x's view are padding (the lowering puts every in-tensor read in
 * the view): -inf for max, 0 for average, whose divisor is always kh*kw
 * (PyTorch's count_include_pad=True; with floor-mode output sizes no window
 * reaches past the padding, so this is PyTorch's divisor exactly).
 *
 * Max pooling picks the FIRST maximal element in row-major (dy, dx) window
 * order among the elements inside the tensor, as PyTorch does: padding never
 * wins a tie and never receives gradient; a window whose real elements are all
 * -inf gives -inf and sends its gradient to its first real element.  A NaN
 * wins over numbers (the first NaN of the window), so NaN propagates.
 *
 * Backward writes a *partial* dx over dx's box: the contributions of dy's box
 * only (zero elsewhere).  Max backward needs x: the whole window of every dy
 * element it uses must lie in x's view (up to padding), since the argmax is
 * over the whole window even when only part of the window lies in dx's box.
 * (view.c bounds coordinates by 2^36 and window parameters by 2^24, so index
 * arithmetic such as r * sh + kh cannot overflow.)
 */
#include <math.h>    /* INFINITY, isnan */
#include <stdint.h>  /* INT32_MAX */
#include <string.h>  /* memset */

#include "kernels.h"  /* sw_view, sw_window, sw_pool2d_* */
#include "pool_argmax.h"  /* pool_argmax_lanes, pool_argmax_run */
#include "../core/view.h"     /* sw_view_check, sw_window_check, sw_view_check_covers */

enum { N_, C_, H_, W_ };  /* dimensions of (N, C, H, W) views */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* floor(a / b) and ceil(a / b) for b > 0 and any sign of a */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* Pointer to the (H, W) plane of sample n, channel c of an (N, C, H, W) view. */
static float *plane(const sw_view *v, int64_t n, int64_t c) {
    return v->data + ((n - v->lo[N_]) * v->shape[C_] + (c - v->lo[C_])) * v->shape[H_] * v->shape[W_];
}

/* The part of the window of output (r, q) that lies inside x's view, as local
 * row/column ranges [r0, r1) x [c0, c1) of x's plane (empty when r0 >= r1 or c0 >= c1). */
typedef struct {
    int64_t r0, r1, c0, c1;
} window_part;

static window_part window_in_view(const sw_view *x, const sw_window *p, int64_t r, int64_t q) {
    const int64_t top = r * p->sh - p->ph - x->lo[H_];  /* local row of dy = 0 */
    const int64_t left = q * p->sw - p->pw - x->lo[W_];
    window_part w;
    w.r0 = max64(top, 0);
    w.r1 = min64(top + p->kh, x->shape[H_]);
    w.c0 = max64(left, 0);
    w.c1 = min64(left + p->kw, x->shape[W_]);
    return w;
}

/* Local offset in xp (an (H, W) plane of x) of the first maximal real element
 * of the window, or -1 when the window holds no real element (all padding). */
static int64_t window_argmax(const float *xp, int64_t xw, window_part w) {
    int64_t best_at = -1;
    float best = -INFINITY;
    for (int64_t i = w.r0; i < w.r1; i++) {
        for (int64_t j = w.c0; j < w.c1; j++) {
            const float v = xp[i * xw + j];
            if (best_at < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_at = i * xw + j;
            }
        }
    }
    return best_at;
}

/* window_argmax for a window lying wholly inside the plane, rows [r0, r0 + kh) and
 * columns [c0, c0 + kw): no clipping, the same order and NaN rule (the first
 * maximum; the first NaN beats numbers).  The winner's local row and column.
 * Branch-free over the window: on real data the comparisons are coin flips, and
 * mispredicted branches made pooling 5x slower.  The index updates are written as
 * masks: as conditional expressions GCC compiled them to branches or conditional
 * moves depending on the code around the call (2x apart).  A window with a NaN
 * takes the exact general path. */
static inline void interior_argmax(const float *xp, int64_t xw, int64_t r0, int64_t c0, int64_t kh, int64_t kw,
                                   int64_t *row, int64_t *col) {
    float best = xp[r0 * xw + c0];
    int64_t bi = 0, bj = 0;
    int nan = 0;
    for (int64_t i = 0; i < kh; i++) {
        const float *line = xp + (r0 + i) * xw + c0;
        for (int64_t j = 0; j < kw; j++) {
            const float v = line[j];
            const int64_t take = -(int64_t)(v > best);   /* all ones or zero; never for a NaN (found below) */
            best = v > best ? v : best;                   /* a max instruction */
            bi ^= (bi ^ i) & take;
            bj ^= (bj ^ j) & take;
            nan |= v != v;
        }
    }
    if (nan) {
        window_part w = {r0, r0 + kh, c0, c0 + kw};
        int64_t off = window_argmax(xp, xw, w);
        *row = off / xw;
        *col = off % xw;
        return;
    }
    *row = r0 + bi;
    *col = c0 + bj;
}

/* The value interior_argmax picks: the window's maximum (the first of equal ones in
 * row-major order: a chain of strict comparisons keeps it, so the first zero decides
 * the sign of a zero maximum), or its first NaN.  A sum detects a NaN (it turns NaN),
 * one instruction per element instead of a compare and an or; the usual 3x3 and 2x2
 * windows are unrolled (interior_row).  The scaled AlexNet's first pooling: 9.1 ms before, 5 after. */
static inline __attribute__((always_inline)) float max_of(const float *xp, int64_t xw, int64_t r0, int64_t c0,
                                                           int64_t kh, int64_t kw) {
    const float *w0 = xp + r0 * xw + c0;
    float best = w0[0], sum = 0.0f;
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = 0; j < kw; j++) {
            const float v = w0[i * xw + j];
            best = v > best ? v : best;
            sum += v;
        }
    }
    if (sum != sum) {   /* a NaN, or inf - inf: the exact path */
        int64_t a, b;
        interior_argmax(xp, xw, r0, c0, kh, kw, &a, &b);
        return xp[a * xw + b];
    }
    return best;
}

/* Windows a vector run needs at least: a window alone takes the scalar loop.  In the forward
 * pass (no positions to find) the scalar loop wins below 4 windows: the scaled AlexNet's 3-wide
 * pool5 took 0.35 ms scalar, 0.53 in 16 lanes. */
enum { MIN_RUN = 2, FORWARD_MIN_RUN = 4 };

/* Is the window at local (top, left) of a (h, w) plane wholly inside it? */
static inline int window_inside(int64_t top, int64_t left, const sw_window *p, int64_t h, int64_t w) {
    return top >= 0 && left >= 0 && top + p->kh <= h && left + p->kw <= w;
}

static sw_status check_pool_views(const sw_view *x, const sw_view *box, const char *xname, const char *boxname,
                                  const sw_window *p, const char *name) {
    if (!p) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL window", name);
    }
    sw_status s = sw_window_check(p, name);
    if (s == SW_OK) {
        s = sw_view_check(x, 4, xname);
    }
    if (s == SW_OK) {
        s = sw_view_check(box, 4, boxname);
    }
    /* pooling is per (sample, channel): x must hold the box's samples and channels */
    if (s == SW_OK) {
        s = sw_view_check_covers(x, N_, xname, box, N_, boxname, "sample");
    }
    if (s == SW_OK) {
        s = sw_view_check_covers(x, C_, xname, box, C_, boxname, "channel");
    }
    return s;
}

/* y[l] = the maximum of the window at local (top, left + l*sw), l < count, each wholly inside the
 * plane, through the fused ReLU.  A function of its own, with the usual 3x3 and 2x2 windows as
 * separate loops: inlined into the forward pass's loop, GCC's code for the scalar chain changed
 * with the code around it (pool2 1.6 -> 2.2 ms when the vector runs were added there). */
static __attribute__((noinline)) void interior_row(const float *xp, int64_t xw, int64_t top, int64_t left, int64_t sw,
                                                   int64_t kh, int64_t kw, int64_t count, int relu, float *y) {
    if (kh == 3 && kw == 3) {
        for (int64_t l = 0; l < count; l++) {
            y[l] = max_of(xp, xw, top, left + l * sw, 3, 3);
        }
    } else if (kh == 2 && kw == 2) {
        for (int64_t l = 0; l < count; l++) {
            y[l] = max_of(xp, xw, top, left + l * sw, 2, 2);
        }
    } else {
        for (int64_t l = 0; l < count; l++) {
            y[l] = max_of(xp, xw, top, left + l * sw, kh, kw);
        }
    }
    if (relu) {
        for (int64_t l = 0; l < count; l++) {
            y[l] = !(y[l] > 0.0f) && !isnan(y[l]) ? 0.0f : y[l];
        }
    }
}

/* y's local row i, columns [j0, j1): windows that may reach past x's view (clipped), and average
 * pooling's. */
static void clipped_row(int is_max, const sw_view *x, const float *xp, const sw_view *y, float *yp,
                        const sw_window *p, int64_t i, int64_t j0, int64_t j1) {
    const float area = (float)(p->kh * p->kw);
    for (int64_t j = j0; j < j1; j++) {
        const window_part w = window_in_view(x, p, y->lo[H_] + i, y->lo[W_] + j);
        float v;
        if (is_max) {
            const int64_t at = window_argmax(xp, x->shape[W_], w);
            v = at < 0 ? -INFINITY : xp[at];
        } else {
            float sum = 0.0f;
            for (int64_t a = w.r0; a < w.r1; a++) {
                for (int64_t b = w.c0; b < w.c1; b++) {
                    sum += xp[a * x->shape[W_] + b];
                }
            }
            v = sum / area;
        }
        if (p->relu && !(v > 0.0f) && !isnan(v)) {
            v = 0.0f;
        }
        yp[i * y->shape[W_] + j] = v;
    }
}

/* x (N, C, H, W) view covering y's samples and channels, y (N, C, Ho, Wo) = the box to compute. */
sw_status sw_pool2d_forward(int is_max, const sw_view *x, sw_view *y, const sw_window *p) {
    sw_status s = check_pool_views(x, y, "pool2d_forward: x", "pool2d_forward: y", p, "pool2d_forward");
    if (s != SW_OK) {
        return s;
    }
    const int64_t xh = x->shape[H_], xw = x->shape[W_], wo = y->shape[W_];
    /* a row's windows wholly inside the plane -- local columns [ja, jb) of rows whose windows lie in
     * the plane's rows -- go through the vector lanes (pool_max_row: strides 1 and 2, at least
     * FORWARD_MIN_RUN windows), then interior_row; the rest (and average pooling) clipped_row */
    const int lanes = is_max && p->sw <= 2 ? pool_argmax_lanes() : 0;
    const int64_t ja = min64(wo, max64(0, ceil_div(p->pw + x->lo[W_], p->sw) - y->lo[W_]));
    const int64_t jb = max64(ja, min64(wo, floor_div(xw - p->kw + p->pw + x->lo[W_], p->sw) + 1 - y->lo[W_]));
    for (int64_t n = y->lo[N_]; n < y->lo[N_] + y->shape[N_]; n++) {
        for (int64_t c = y->lo[C_]; c < y->lo[C_] + y->shape[C_]; c++) {
            const float *xp = plane(x, n, c);
            float *yp = plane(y, n, c);
            for (int64_t i = 0; i < y->shape[H_]; i++) {
                const int64_t top = (y->lo[H_] + i) * p->sh - p->ph - x->lo[H_];
                if (!is_max || top < 0 || top + p->kh > xh) {
                    clipped_row(is_max, x, xp, y, yp, p, i, 0, wo);
                    continue;
                }
                if (ja > 0) {
                    clipped_row(is_max, x, xp, y, yp, p, i, 0, ja);
                }
                const int64_t left = (y->lo[W_] + ja) * p->sw - p->pw - x->lo[W_];
                float *out = yp + i * wo + ja;
                int64_t done = 0;   /* outputs [ja, ja + done) the lanes wrote */
                if (lanes && jb - ja >= FORWARD_MIN_RUN) {
                    done = pool_max_row(lanes, xp, xh * xw, xw, top * xw + left, p->sw, jb - ja, p->kh, p->kw,
                                        p->relu, out);
                }
                if (done < jb - ja) {
                    interior_row(xp, xw, top, left + done * p->sw, p->sw, p->kh, p->kw, jb - ja - done, p->relu,
                                 out + done);
                }
                if (jb < wo) {
                    clipped_row(is_max, x, xp, y, yp, p, i, jb, wo);
                }
            }
        }
    }
    return SW_OK;
}

/* Output rows [*o0, *o1) of dy's range [lo, hi) whose windows (extent k, stride s,
 * padding pad) touch the input rows [in_lo, in_hi). */
static void outputs_touching(int64_t lo, int64_t hi, int64_t in_lo, int64_t in_hi, int64_t k, int64_t s, int64_t pad,
                             int64_t *o0, int64_t *o1) {
    /* window of output r: input rows [r*s - pad, r*s - pad + k) */
    *o0 = max64(lo, ceil_div(in_lo + pad - k + 1, s));
    *o1 = min64(hi, floor_div(in_hi - 1 + pad, s) + 1);
}

/* dp += g at x's local (a, b), where that lies in dx's box (the winner may lie outside it). */
static inline void add_at(const sw_view *x, const sw_view *dx, float *dp, int64_t a, int64_t b, float g) {
    const int64_t gi = x->lo[H_] + a - dx->lo[H_], gj = x->lo[W_] + b - dx->lo[W_];
    if (gi >= 0 && gi < dx->shape[H_] && gj >= 0 && gj < dx->shape[W_]) {
        dp[gi * dx->shape[W_] + gj] += g;
    }
}

/* Max pooling's gradient of dy's row r, columns [q0, q1) (grow: their dy values), each added at its
 * window's first maximum in x (plane xp) when that lies in dx's box (plane dp), in column order.
 * Runs of windows wholly inside x's plane go `lanes` at a time through pool_argmax_run (0: one by one). */
static void max_row_backward(const sw_view *x, const float *xp, const sw_view *dx, float *dp, const sw_window *p,
                             int64_t r, int64_t q0, int64_t q1, const float *grow, int lanes) {
    const int64_t xh = x->shape[H_], xw = x->shape[W_];
    const int64_t top = r * p->sh - p->ph - x->lo[H_];
    /* the windows of columns below qin end inside the plane: left + kw <= xw */
    const int64_t qin = floor_div(xw - p->kw + p->pw + x->lo[W_], p->sw) + 1;
    int32_t at[16];
    for (int64_t q = q0; q < q1;) {
        const int64_t left = q * p->sw - p->pw - x->lo[W_];
        int64_t n = 0;   /* windows of this run from q; winners: POOL_TAP(i, j) in at[0..n) */
        if (lanes && window_inside(top, left, p, xh, xw)) {   /* the interior run from q: left grows with q */
            n = min64(min64(lanes, q1 - q), qin - q);
            if (n < MIN_RUN ||
                !pool_argmax_run(lanes, xp, xh * xw, xw, top * xw + left, p->sw, (int)n, p->kh, p->kw, at)) {
                n = 0;   /* a short run, or a NaN in it: one window at a time */
            }
        }
        if (n > 0) {
            /* the run's windows in dx's local rows and columns: wholly inside dx's box (the usual
             * case: dx's box is x's), the winners need no bounds check */
            const int64_t gi = x->lo[H_] + top - dx->lo[H_], gj = x->lo[W_] + left - dx->lo[W_];
            if (gi >= 0 && gi + p->kh <= dx->shape[H_] && gj >= 0 && gj + (n - 1) * p->sw + p->kw <= dx->shape[W_]) {
                float *d = dp + gi * dx->shape[W_] + gj;
                for (int64_t l = 0; l < n; l++) {   /* in column order, as the scalar loop adds */
                    d[POOL_TAP_ROW(at[l]) * dx->shape[W_] + l * p->sw + POOL_TAP_COL(at[l])] += grow[q + l - q0];
                }
            } else {
                for (int64_t l = 0; l < n; l++) {
                    add_at(x, dx, dp, top + POOL_TAP_ROW(at[l]), left + l * p->sw + POOL_TAP_COL(at[l]),
                           grow[q + l - q0]);
                }
            }
            q += n;
            continue;
        }
        int64_t a, b;   /* the winner, local in x */
        if (window_inside(top, left, p, xh, xw)) {
            interior_argmax(xp, xw, top, left, p->kh, p->kw, &a, &b);
            add_at(x, dx, dp, a, b, grow[q - q0]);
        } else {
            const int64_t off = window_argmax(xp, xw, window_in_view(x, p, r, q));
            if (off >= 0) {   /* else no real element: the gradient goes nowhere */
                add_at(x, dx, dp, off / xw, off % xw, grow[q - q0]);
            }
        }
        q++;
    }
}

/* dx over dx's box (N, C, H, W): the partial gradient from dy's box (N, C, Ho, Wo).
 * x (N, C, H, W) is read by max pooling only (it may be NULL for average). */
sw_status sw_pool2d_backward(int is_max, const sw_view *x, const sw_view *dy, sw_view *dx, const sw_window *p) {
    const char *name = "pool2d_backward";
    if (!p) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL window", name);
    }
    sw_status s = sw_window_check(p, name);
    if (s == SW_OK) {
        s = sw_view_check(dy, 4, "pool2d_backward: dy");
    }
    if (s == SW_OK) {
        s = sw_view_check(dx, 4, "pool2d_backward: dx");
    }
    if (s != SW_OK) {
        return s;
    }
    /* samples and channels that both dy and dx hold; the rest of dx gets zeros */
    const int64_t n0 = max64(dy->lo[N_], dx->lo[N_]), n1 = min64(sw_view_hi(dy, N_), sw_view_hi(dx, N_));
    const int64_t ch0 = max64(dy->lo[C_], dx->lo[C_]), ch1 = min64(sw_view_hi(dy, C_), sw_view_hi(dx, C_));
    if (is_max) {
        s = sw_view_check(x, 4, "pool2d_backward: x");
        if (s == SW_OK && !(sw_view_covers(x, N_, n0, n1) && sw_view_covers(x, C_, ch0, ch1))) {
            s = SW_FAIL(SW_ERR_VALUE,
                        "pool2d_backward: x does not cover the samples [%lld, %lld) and channels [%lld, %lld) "
                        "that dy and dx share",
                        (long long)n0, (long long)n1, (long long)ch0, (long long)ch1);
        }
        if (s != SW_OK) {
            return s;
        }
    }
    const int64_t vol = sw_view_volume(dx);
    if (vol > 0) {
        memset(dx->data, 0, (size_t)vol * sizeof(float));
    }
    int64_t r0, r1, q0, q1;  /* dy's global output rows/columns whose windows touch dx's box */
    outputs_touching(dy->lo[H_], sw_view_hi(dy, H_), dx->lo[H_], sw_view_hi(dx, H_), p->kh, p->sh, p->ph, &r0, &r1);
    outputs_touching(dy->lo[W_], sw_view_hi(dy, W_), dx->lo[W_], sw_view_hi(dx, W_), p->kw, p->sw, p->pw, &q0, &q1);
    const float area = (float)(p->kh * p->kw);
    const int64_t dxh = dx->shape[H_], dxw = dx->shape[W_];
    /* the vector lanes need every offset of x's plane in an int32 */
    const int lanes = is_max && x->shape[H_] * x->shape[W_] <= INT32_MAX && p->kh <= POOL_MAX_TAPS &&
                      p->kw <= POOL_MAX_TAPS ? pool_argmax_lanes() : 0;
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t c = ch0; c < ch1; c++) {
            const float *gp = plane(dy, n, c);
            float *dp = plane(dx, n, c);
            const float *xp = is_max ? plane(x, n, c) : NULL;
            for (int64_t r = r0; r < r1; r++) {
                if (is_max) {
                    max_row_backward(x, xp, dx, dp, p, r, q0, q1,
                                     gp + (r - dy->lo[H_]) * dy->shape[W_] + (q0 - dy->lo[W_]), lanes);
                    continue;
                }
                for (int64_t q = q0; q < q1; q++) {   /* average: every window position inside dx's box */
                    const float g = gp[(r - dy->lo[H_]) * dy->shape[W_] + (q - dy->lo[W_])];
                    const int64_t top = r * p->sh - p->ph - dx->lo[H_];
                    const int64_t left = q * p->sw - p->pw - dx->lo[W_];
                    const int64_t a0 = max64(top, 0), a1 = min64(top + p->kh, dxh);
                    const int64_t b0 = max64(left, 0), b1 = min64(left + p->kw, dxw);
                    const float share = g / area;
                    for (int64_t a = a0; a < a1; a++) {
                        for (int64_t b = b0; b < b1; b++) {
                            dp[a * dxw + b] += share;
                        }
                    }
                }
            }
        }
    }
    return SW_OK;
}
