/* swap_plan.c -- which feature maps to offload, and where each swap-out and prefetch goes.
 *
 * The memory optimizer of "AccUDNN: A GPU Memory Efficient Accelerator for Training Ultra-deep
 * Deep Neural Networks" (section 3) over a lowered task graph, one device at a time:
 *
 *   access pattern   every buffer's lifetime over program order (positions = task ids; what
 *                    memplan.c places), the candidates (swap_internal.h: written in the forward
 *                    pass, read again only in the backward pass) with their last forward write
 *                    and touch, first backward read and last touch
 *   models           computation: the unswapped iteration as simulated (start[t], end[t]: the
 *                    plan's costs or the roofline); memory: live bytes per position (aligned
 *                    sizes), a segment tree of range adds and maxima; host link: bytes / host_bw,
 *                    one copy engine per direction (a swap-out stream and a swap-in stream)
 *   swap-out         issued when its buffer's last forward write ends, after the previous one on
 *                    the stream; placed in program order where the computation will be when it
 *                    ends (the first position from which every task of the device starts later),
 *                    so whatever takes the buffer's bytes needs not wait; where that extra
 *                    lifetime does not fit, right after its last forward touch (a predicted stall)
 *   prefetch         in the order the backward pass reads them, each at the earliest position
 *                    from which its copy fits the budget up to its last reader (Algorithm 1: a
 *                    prefetch proceeds while memory allows and is suspended until enough is
 *                    released); t_ready = when it ends: issued when the computation reaches its
 *                    position and its swap-out is done, after the previous prefetch on the stream
 *   constraint       Eq. 6: t_ready <= the start of its first backward reader; late prefetches
 *                    add their lateness to the predicted stall (the computation shifts by it)
 *   strategy         start with every candidate offloaded (the smallest footprint, Figure 4's
 *                    first step); a feature map whose prefetch fits where its swap-out goes needs
 *                    no offload at all (pinned); then pin the first feature map whose prefetch is
 *                    late while the budget allows (Algorithm 2's "pin data involved in Omega"),
 *                    and again, until no prefetch is late or none can be pinned.  A device whose
 *                    host region would exceed its pinned-host budget keeps the largest feature
 *                    maps live there on the device instead (counted in pinned_overflow).
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* calloc, malloc, free, qsort */
#include <string.h>  /* memset, memcpy */

#include "core/sort_keys.h"
#include "swap_internal.h"

#define NONE (-1)

/* ------------------------------------------------------------------ live bytes per position */
typedef struct {
    int32_t n;         /* positions 0 .. n - 1 */
    int32_t size;      /* leaves: a power of two >= n */
    int64_t *max, *add;
} seg_tree;

static sw_status seg_new(seg_tree *s, int32_t n) {
    s->n = n;
    s->size = 1;
    while (s->size < n) {
        s->size *= 2;
    }
    s->max = calloc(2 * (size_t)s->size, sizeof *s->max);
    s->add = calloc(2 * (size_t)s->size, sizeof *s->add);
    return s->max && s->add ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for a swap plan");
}

static void seg_free(seg_tree *s) {
    free(s->max);
    free(s->add);
}

/* Set the leaves to base[0 .. n) (positions past n hold 0). */
static void seg_load(seg_tree *s, const int64_t *base) {
    memset(s->add, 0, sizeof *s->add * 2 * (size_t)s->size);
    for (int32_t i = 0; i < s->size; i++) {
        s->max[s->size + i] = i < s->n ? base[i] : 0;
    }
    for (int32_t v = s->size - 1; v >= 1; v--) {
        s->max[v] = s->max[2 * v] > s->max[2 * v + 1] ? s->max[2 * v] : s->max[2 * v + 1];
    }
}

static void seg_add_at(seg_tree *s, int32_t v, int32_t vl, int32_t vr, int32_t l, int32_t r, int64_t x) {
    if (r < vl || vr < l) {
        return;
    }
    if (l <= vl && vr <= r) {
        s->max[v] += x;
        s->add[v] += x;
        return;
    }
    int32_t mid = vl + (vr - vl) / 2;
    seg_add_at(s, 2 * v, vl, mid, l, r, x);
    seg_add_at(s, 2 * v + 1, mid + 1, vr, l, r, x);
    int64_t m = s->max[2 * v] > s->max[2 * v + 1] ? s->max[2 * v] : s->max[2 * v + 1];
    s->max[v] = m + s->add[v];
}

static int64_t seg_max_at(const seg_tree *s, int32_t v, int32_t vl, int32_t vr, int32_t l, int32_t r) {
    if (r < vl || vr < l) {
        return INT64_MIN / 4;
    }
    if (l <= vl && vr <= r) {
        return s->max[v];
    }
    int32_t mid = vl + (vr - vl) / 2;
    int64_t a = seg_max_at(s, 2 * v, vl, mid, l, r), b = seg_max_at(s, 2 * v + 1, mid + 1, vr, l, r);
    return (a > b ? a : b) + s->add[v];
}

static void seg_add(seg_tree *s, int32_t l, int32_t r, int64_t x) {
    if (l <= r) {
        seg_add_at(s, 1, 0, s->size - 1, l, r, x);
    }
}

static int64_t seg_max(const seg_tree *s, int32_t l, int32_t r) {
    return l <= r ? seg_max_at(s, 1, 0, s->size - 1, l, r) : INT64_MIN / 4;
}

/* ------------------------------------------------------------------ one device's problem */
typedef struct {
    int32_t b, first;      /* buffer, its first touch */
    sw_swap_span span;
    int64_t bytes;         /* aligned */
    int pinned;            /* kept on the device */
    int no_pin;            /* pinning it did not fit (or did not help) */
    /* the last evaluation */
    int32_t out_at, in_at;
    int late;
    double out_end, ready, needed;
} candidate;

typedef struct {
    const sw_task_graph *g;
    const sw_swap_inputs *in;
    int32_t npos;               /* ntasks + 1 */
    int64_t budget, pinned_budget;
    double bw_out, bw_in;
    const double *reach;        /* npos: when every task before a position has ended */
    double *sufmin;             /* npos: the earliest start of a task of this device at or after a position */
    int64_t *base;              /* npos: live bytes of everything but the candidates */
    int64_t *zeros;             /* npos */
    candidate *c;               /* by last write */
    int32_t nc;
    int32_t *by_use;            /* candidate indices by first backward read */
    seg_tree live, host;
    /* the last evaluation */
    int feasible;
    double stall;
    int32_t stalled;
    int64_t peak, host_peak, offloaded;
} device_plan;

static int64_t aligned(int64_t bytes, int64_t align) { return (bytes + align - 1) / align * align; }

/* The smallest position p in [lo, hi] with max(live[p .. last]) + bytes <= limit; NONE if none. */
static int32_t earliest_fit(const seg_tree *s, int32_t lo, int32_t hi, int32_t last, int64_t bytes, int64_t limit) {
    if (lo > hi || seg_max(s, hi, last) + bytes > limit) {
        return NONE;
    }
    while (lo < hi) {   /* max(live[p .. last]) does not increase with p */
        int32_t mid = lo + (hi - lo) / 2;
        if (seg_max(s, mid, last) + bytes <= limit) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

/* The first position q >= lo from which every task of the device starts at or after t. */
static int32_t first_after(const device_plan *D, int32_t lo, double t) {
    int32_t hi = D->npos - 1;
    if (lo >= hi) {
        return hi;
    }
    while (lo < hi) {   /* sufmin does not decrease */
        int32_t mid = lo + (hi - lo) / 2;
        if (D->sufmin[mid] >= t) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

static int late_by(double ready, double needed) { return ready - needed > 1e-12 + 1e-9 * (needed > 0 ? needed : 0); }

/* Offloads in write order: issued when the last forward write ends, one at a time on the swap-out
 * stream; placed where the computation will be when each ends, if that extra lifetime fits (timed;
 * else right after the last forward touch). */
static double place_offloads(device_plan *D, int timed) {
    const sw_swap_inputs *in = D->in;
    double prev_end = 0.0, stall = 0.0;
    for (int32_t i = 0; i < D->nc; i++) {
        candidate *c = &D->c[i];
        if (c->pinned) {
            continue;
        }
        double issue = in->end[c->span.last_write];
        c->out_end = (issue > prev_end ? issue : prev_end) + (double)c->bytes / D->bw_out;
        prev_end = c->out_end;
        int32_t q = first_after(D, c->span.last_write + 1, c->out_end);
        c->out_at = q;
        if (q - 1 > c->span.last_fwd) {
            if (timed && seg_max(&D->live, c->span.last_fwd + 1, q - 1) + c->bytes <= D->budget) {
                seg_add(&D->live, c->span.last_fwd + 1, q - 1, c->bytes);
            } else {   /* no room to wait for it: right after its last forward touch, and a stall */
                c->out_at = c->span.last_fwd + 1;
                double waits = c->out_end - (D->sufmin[c->out_at] + stall);
                stall += waits > 0 ? waits : 0.0;   /* the computation after it shifts by the wait */
                c->late = waits > 0;                /* a stall of its own: pinning it would help */
            }
        }
    }
    return stall;
}

/* Prefetches in the order the backward pass reads them (Algorithm 1 and Eq. 6). */
static void place_prefetches(device_plan *D, double shift) {
    const sw_swap_inputs *in = D->in;
    double prev_end = 0.0;
    int32_t prev_at = 0;
    for (int32_t k = 0; k < D->nc; k++) {
        candidate *c = &D->c[D->by_use[k]];
        if (c->pinned) {
            continue;
        }
        int32_t lo = c->out_at > prev_at ? c->out_at : prev_at;
        int32_t p = earliest_fit(&D->live, lo, c->span.first_bwd, c->span.last_touch, c->bytes, D->budget);
        if (p == NONE) {
            D->feasible = 0;
            p = c->span.first_bwd;
        }
        c->in_at = prev_at = p;
        seg_add(&D->live, p, c->span.last_touch, c->bytes);
        seg_add(&D->host, c->out_at, p, c->bytes);
        double issue = D->reach[p];
        issue = issue > c->out_end ? issue : c->out_end;
        issue = issue > prev_end ? issue : prev_end;
        c->ready = prev_end = issue + (double)c->bytes / D->bw_in;
        c->needed = in->start[c->span.first_bwd];
        if (late_by(c->ready, c->needed + shift)) {
            shift += c->ready - (c->needed + shift);
            c->late = 1;
        }
        D->stalled += c->late;
        D->offloaded += sw_graph_buffer_bytes(D->g, c->b);
    }
    D->stall = shift;
}

/* The plan of the current pinned set, offloads placed as timed says. */
static void evaluate_with(device_plan *D, int timed) {
    seg_load(&D->live, D->base);
    seg_load(&D->host, D->zeros);
    D->feasible = 1;
    D->stall = 0.0;
    D->stalled = 0;
    D->offloaded = 0;
    for (int32_t i = 0; i < D->nc; i++) {
        candidate *c = &D->c[i];
        c->late = 0;
        seg_add(&D->live, c->first, c->pinned ? c->span.last_touch : c->span.last_fwd, c->bytes);
    }
    place_prefetches(D, place_offloads(D, timed));
    D->peak = seg_max(&D->live, 0, D->npos - 1);
    D->host_peak = seg_max(&D->host, 0, D->npos - 1);
    D->feasible = D->feasible && D->peak <= D->budget;
}

/* The plan of the current pinned set: offloads timed where that fits; where the memory they keep
 * a while longer leaves a prefetch no room, every offload right after its last forward touch. */
static void evaluate(device_plan *D) {
    evaluate_with(D, 1);
    if (!D->feasible) {
        evaluate_with(D, 0);
    }
}

/* The smallest peak of any plan: every candidate offloaded right after its last forward touch and
 * prefetched right before its first backward read. */
static int64_t min_peak(device_plan *D) {
    seg_load(&D->live, D->base);
    for (int32_t i = 0; i < D->nc; i++) {
        const candidate *c = &D->c[i];
        seg_add(&D->live, c->first, c->span.last_fwd, c->bytes);
        seg_add(&D->live, c->span.first_bwd, c->span.last_touch, c->bytes);
    }
    return seg_max(&D->live, 0, D->npos - 1);
}

/* Pin candidate i; keep it pinned if the plan still fits (else undo and remember).  Returns
 * whether it stayed pinned. */
static int try_pin(device_plan *D, int32_t i) {
    D->c[i].pinned = 1;
    evaluate(D);
    if (D->feasible) {
        return 1;
    }
    D->c[i].pinned = 0;
    D->c[i].no_pin = 1;
    evaluate(D);
    return 0;
}

/* Pin what needs no offload (its prefetch would go where its swap-out does: the two copies would
 * cover its whole lifetime anyway).  Returns how many. */
static int32_t pin_needless(device_plan *D) {
    int32_t n = 0;
    for (int32_t i = 0; i < D->nc; i++) {
        candidate *c = &D->c[i];
        int32_t contiguous = c->out_at > c->span.last_fwd + 1 ? c->out_at : c->span.last_fwd + 1;
        if (!c->pinned && c->in_at <= contiguous) {
            c->pinned = 1;
            n++;
        }
    }
    return n;
}

/* The largest offloaded candidate not yet refused whose host copy is live where the host region
 * peaks (NONE: none): keeping it on the device lowers that peak. */
static int32_t largest_at_host_peak(const device_plan *D) {
    int32_t at = 0;
    for (int32_t lo = 0, hi = D->npos - 1; lo < hi;) {   /* the first position where the peak is reached */
        int32_t mid = lo + (hi - lo) / 2;
        if (seg_max(&D->host, lo, mid) == D->host_peak) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
        at = lo;
    }
    int32_t best = NONE;
    for (int32_t i = 0; i < D->nc; i++) {
        const candidate *c = &D->c[i];
        if (!c->pinned && !c->no_pin && c->out_at <= at && at <= c->in_at &&
            (best == NONE || c->bytes > D->c[best].bytes)) {
            best = i;
        }
    }
    return best;
}

static void plan_device(device_plan *D, int32_t *overflow) {
    int rounds = D->in->max_rounds > 0 ? D->in->max_rounds : 4 * D->nc + 8;
    evaluate(D);
    while (rounds-- > 0) {
        if (pin_needless(D) > 0) {
            evaluate(D);
            continue;
        }
        if (!D->feasible) {
            return;
        }
        if (D->pinned_budget >= 0 && D->host_peak > D->pinned_budget) {   /* fallback: keep some on the device */
            int32_t i = largest_at_host_peak(D);
            if (i == NONE) {
                D->feasible = 0;
                return;
            }
            *overflow += try_pin(D, i);
            continue;
        }
        int32_t pick = NONE;
        for (int32_t k = 0; k < D->nc && pick == NONE; k++) {
            const candidate *c = &D->c[D->by_use[k]];
            pick = !c->pinned && c->late && !c->no_pin ? D->by_use[k] : NONE;
        }
        if (pick == NONE) {
            return;
        }
        try_pin(D, pick);
    }
}

/* ------------------------------------------------------------------ the whole graph */
void sw_swap_result_free(sw_swap_result *r) {
    free(r->buffer);
    free(r->out_at);
    free(r->in_at);
    free(r->ready);
    free(r->needed);
    free(r->stall);
    free(r->peak);
    free(r->offloaded);
    free(r->host_peak);
    free(r->min_peak);
    free(r->stalled);
    memset(r, 0, sizeof *r);
}

sw_swap_spec sw_swap_result_spec(const sw_swap_result *r) {
    return (sw_swap_spec){r->n, r->buffer, r->out_at, r->in_at};
}

static sw_status check_inputs(const sw_task_graph *g, int ndev, const sw_swap_inputs *in) {
    if (ndev < 1 || in->align < 1 || (in->align & (in->align - 1)) != 0) {
        return SW_FAIL(SW_ERR_VALUE, "a swap plan needs >= 1 device and a power-of-two alignment");
    }
    for (int d = 0; d < ndev; d++) {
        if (in->budget[d] <= 0 || !(in->host_bw[2 * d] > 0) || !(in->host_bw[2 * d + 1] > 0) ||
            in->host_bw[2 * d] == INFINITY || in->host_bw[2 * d + 1] == INFINITY) {
            return SW_FAIL(SW_ERR_VALUE, "device %d: the budget (%lld bytes) and host-link bandwidths must be "
                           "positive and finite", d, (long long)in->budget[d]);
        }
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        if (!(in->start[t] >= 0) || !(in->end[t] >= in->start[t]) || in->end[t] == INFINITY) {
            return SW_FAIL(SW_ERR_VALUE, "task %d: the timeline needs 0 <= start <= end < inf", t);
        }
    }
    return SW_OK;
}

/* Grow *items to `cap` entries of `size` bytes (0 on failure, *items untouched). */
static int grow(void **items, size_t size, int32_t cap) {
    void *p = realloc(*items, size * (size_t)cap);
    if (p) {
        *items = p;
    }
    return p != NULL;
}

/* Append device D's offloaded feature maps to r. */
static sw_status collect(const device_plan *D, sw_swap_result *r) {
    for (int32_t i = 0; i < D->nc; i++) {
        const candidate *c = &D->c[i];
        if (c->pinned) {
            continue;
        }
        if (r->n == r->cap) {
            int32_t cap = r->cap ? 2 * r->cap : 64;
            if (!grow((void **)&r->buffer, sizeof *r->buffer, cap) || !grow((void **)&r->out_at, sizeof *r->out_at, cap) ||
                !grow((void **)&r->in_at, sizeof *r->in_at, cap) || !grow((void **)&r->ready, sizeof *r->ready, cap) ||
                !grow((void **)&r->needed, sizeof *r->needed, cap)) {
                return SW_FAIL(SW_ERR_NOMEM, "out of memory for a swap plan");
            }
            r->cap = cap;
        }
        r->buffer[r->n] = c->b;
        r->out_at[r->n] = c->out_at;
        r->in_at[r->n] = c->in_at;
        r->ready[r->n] = c->ready;
        r->needed[r->n] = c->needed;
        r->n++;
    }
    return SW_OK;
}

/* Device d's candidates (by last write; by_use by first backward read), base live bytes and sufmin. */
static sw_status setup_device(device_plan *D, int d, const sw_touches *tl, const char *host_read,
                              const int32_t *first, const int32_t *last, sw_keyed *scratch) {
    const sw_task_graph *g = D->g;
    memset(D->base, 0, sizeof *D->base * (size_t)D->npos);
    D->nc = 0;
    for (int32_t b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].device != d) {
            continue;
        }
        int64_t bytes = aligned(sw_graph_buffer_bytes(g, b), D->in->align);
        sw_swap_span span;
        if (bytes > 0 && sw_swap_candidate(g, tl, b, host_read, &span)) {
            D->c[D->nc++] = (candidate){.b = b, .first = first[b], .span = span, .bytes = bytes};
            continue;
        }
        D->base[first[b]] += bytes;   /* a difference array, summed below */
        if (last[b] + 1 < D->npos) {
            D->base[last[b] + 1] -= bytes;
        }
    }
    for (int32_t p = 1; p < D->npos; p++) {
        D->base[p] += D->base[p - 1];
    }
    for (int32_t i = 0; i < D->nc; i++) {
        scratch[i] = (sw_keyed){D->c[i].span.last_write, D->c[i].b, i};
    }
    qsort(scratch, (size_t)D->nc, sizeof *scratch, sw_by_keys);
    candidate *sorted = malloc(sizeof *sorted * ((size_t)D->nc + 1));
    if (!sorted) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a swap plan");
    }
    for (int32_t i = 0; i < D->nc; i++) {
        sorted[i] = D->c[scratch[i].id];
    }
    memcpy(D->c, sorted, sizeof *sorted * (size_t)D->nc);
    free(sorted);
    for (int32_t i = 0; i < D->nc; i++) {
        scratch[i] = (sw_keyed){D->c[i].span.first_bwd, D->c[i].b, i};
    }
    qsort(scratch, (size_t)D->nc, sizeof *scratch, sw_by_keys);
    for (int32_t i = 0; i < D->nc; i++) {
        D->by_use[i] = scratch[i].id;
    }
    D->sufmin[D->npos - 1] = INFINITY;
    for (int32_t p = D->npos - 2; p >= 0; p--) {
        double s = g->tasks[p].device == d ? D->in->start[p] : INFINITY;
        D->sufmin[p] = s < D->sufmin[p + 1] ? s : D->sufmin[p + 1];
    }
    return SW_OK;
}

sw_status sw_swap_plan(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r) {
    memset(r, 0, sizeof *r);
    SW_TRY(check_inputs(g, ndev, in));
    int32_t npos = g->ntasks + 1;
    size_t np = (size_t)npos + 1, nb = (size_t)g->nbuffers + 1, nd = (size_t)ndev + 1;
    sw_touches tl = {0};
    char *host_read = NULL;
    device_plan D = {.g = g, .in = in, .npos = npos};
    double *reach = malloc(sizeof *reach * np);
    int32_t *first = malloc(sizeof *first * nb), *last = malloc(sizeof *last * nb);
    sw_keyed *scratch = malloc(sizeof *scratch * nb);
    D.reach = reach;
    D.sufmin = malloc(sizeof *D.sufmin * np);
    D.base = malloc(sizeof *D.base * np);
    D.zeros = calloc(np, sizeof *D.zeros);
    D.c = malloc(sizeof *D.c * nb);
    D.by_use = malloc(sizeof *D.by_use * nb);
    r->ndev = ndev;
    r->stall = calloc(nd, sizeof *r->stall);
    r->peak = calloc(nd, sizeof *r->peak);
    r->offloaded = calloc(nd, sizeof *r->offloaded);
    r->host_peak = calloc(nd, sizeof *r->host_peak);
    r->min_peak = calloc(nd, sizeof *r->min_peak);
    r->stalled = calloc(nd, sizeof *r->stalled);
    sw_status s = SW_OK;
    if (!reach || !first || !last || !scratch || !D.sufmin || !D.base || !D.zeros || !D.c || !D.by_use ||
        !r->stall || !r->peak || !r->offloaded || !r->host_peak || !r->min_peak || !r->stalled) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for a swap plan");
        goto done;
    }
    if ((s = sw_touches_build(g, &tl)) != SW_OK || (s = sw_tg_host_reads(g, &host_read)) != SW_OK ||
        (s = seg_new(&D.live, npos)) != SW_OK || (s = seg_new(&D.host, npos)) != SW_OK) {
        goto done;
    }
    reach[0] = 0.0;
    for (int32_t p = 1; p < npos; p++) {
        reach[p] = in->end[p - 1] > reach[p - 1] ? in->end[p - 1] : reach[p - 1];
    }
    sw_buffer_lifetimes(g, host_read, 1, first, last);   /* as the memory plan's */
    r->fits = 1;
    for (int d = 0; d < ndev && s == SW_OK; d++) {
        D.budget = in->budget[d];
        D.pinned_budget = in->pinned ? in->pinned[d] : -1;
        D.bw_out = in->host_bw[2 * d];
        D.bw_in = in->host_bw[2 * d + 1];
        if ((s = setup_device(&D, d, &tl, host_read, first, last, scratch)) != SW_OK) {
            break;
        }
        r->min_peak[d] = min_peak(&D);
        int32_t overflow = 0;
        plan_device(&D, &overflow);
        r->pinned_overflow += overflow;
        r->fits = r->fits && D.feasible;
        r->stall[d] = D.stall;
        r->stalled[d] = D.stalled;
        r->peak[d] = D.peak;
        r->host_peak[d] = D.host_peak;
        r->offloaded[d] = D.offloaded;
        s = collect(&D, r);
    }
done:
    sw_touches_free(&tl);
    seg_free(&D.live);
    seg_free(&D.host);
    free(host_read);
    free(reach);
    free(first);
    free(last);
    free(scratch);
    free(D.sufmin);
    free(D.base);
    free(D.zeros);
    free(D.c);
    free(D.by_use);
    if (s != SW_OK) {
        sw_swap_result_free(r);
    }
    return s;
}
