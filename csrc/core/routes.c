/* routes.c -- widest routes over a machine's directed links (routes.h: the rule and its cost).
 *
 * Per source: a widest-path search (Dijkstra that keeps the slowest link instead of a sum) gives
 * every device's route bandwidth w[v]; then, for each distinct w among the destinations asked
 * for, a breadth-first search over the links at least w wide gives the fewest-hop routes of that
 * width.  Expanding each device's links in order of destination makes the first path found to a
 * device the lexicographically smallest of its fewest-hop ones: the devices of one BFS level
 * leave the queue in the order of their own smallest paths, so a device's first discoverer is
 * the level's earliest neighbour of it.
 */
#include <math.h>    /* INFINITY, isfinite, fmin */
#include <stdlib.h>  /* malloc, calloc, realloc, free, qsort */
#include <string.h>  /* memcpy */

#include "core/routes.h"
#include "core/sort_keys.h"
#include "internal.h"

/* One candidate of the widest search: device v reachable at width w. */
typedef struct {
    double w;
    int32_t v;
} candidate;

/* The links as adjacency lists and the scratch of one source's searches. */
typedef struct {
    int32_t ndev;
    const int32_t *src, *dst;
    const double *bw;
    int32_t *out_ptr;    /* (ndev + 1): device u's links are out_link[out_ptr[u] .. out_ptr[u + 1]) */
    int32_t *out_link;   /* (nlinks) link ids by source, then destination, then id */
    double *width;       /* (ndev) widest-route bandwidth from the current source */
    uint8_t *settled;    /* (ndev) the widest search has fixed this device's width */
    candidate *heap;     /* (nlinks + 1) max-heap on w: one entry per improvement, at most one per link */
    int32_t *queue;      /* (ndev) the breadth-first search's queue */
    int32_t *via;        /* (ndev) the link the breadth-first search reached a device by */
    int64_t *seen;       /* (ndev) the search (a number) that reached a device last */
    int64_t searches;
} link_graph;

static void link_graph_free(link_graph *m) {
    free(m->out_ptr);
    free(m->out_link);
    free(m->width);
    free(m->settled);
    free(m->heap);
    free(m->queue);
    free(m->via);
    free(m->seen);
}

/* Check the links and build m's adjacency lists and scratch (free with link_graph_free either way). */
static sw_status link_graph_init(link_graph *m, int32_t ndev, int32_t nlinks, const int32_t *src, const int32_t *dst,
                              const double *bw) {
    *m = (link_graph){.ndev = ndev, .src = src, .dst = dst, .bw = bw};
    if (ndev < 0 || nlinks < 0) {
        return SW_FAIL(SW_ERR_VALUE, "routes: negative device (%d) or link (%d) count", ndev, nlinks);
    }
    for (int32_t k = 0; k < nlinks; k++) {
        if (src[k] < 0 || src[k] >= ndev || dst[k] < 0 || dst[k] >= ndev || src[k] == dst[k]) {
            return SW_FAIL(SW_ERR_VALUE, "routes: link %d joins devices %d and %d (of %d): it needs two different "
                           "devices", k, src[k], dst[k], ndev);
        }
        if (!(isfinite(bw[k]) && bw[k] > 0)) {
            return SW_FAIL(SW_ERR_VALUE, "routes: link %d (%d -> %d) has bandwidth %g: it must be positive and finite",
                           k, src[k], dst[k], bw[k]);
        }
    }
    size_t n = (size_t)ndev, l = (size_t)nlinks;
    sw_keyed *order = malloc(sizeof *order * (l ? l : 1));
    m->out_ptr = calloc(n + 1, sizeof *m->out_ptr);
    m->out_link = malloc(sizeof *m->out_link * (l ? l : 1));
    m->width = malloc(sizeof *m->width * (n ? n : 1));
    m->settled = malloc(n ? n : 1);
    m->heap = malloc(sizeof *m->heap * (l + 1));
    m->queue = malloc(sizeof *m->queue * (n ? n : 1));
    m->via = malloc(sizeof *m->via * (n ? n : 1));
    m->seen = calloc(n ? n : 1, sizeof *m->seen);
    if (!order || !m->out_ptr || !m->out_link || !m->width || !m->settled || !m->heap || !m->queue || !m->via ||
        !m->seen) {
        free(order);
        return SW_FAIL(SW_ERR_NOMEM, "routes: out of memory for %d devices and %d links", ndev, nlinks);
    }
    for (int32_t k = 0; k < nlinks; k++) {
        order[k] = (sw_keyed){.key = (int64_t)src[k] * ndev + dst[k], .key2 = 0, .id = k};
        m->out_ptr[src[k] + 1]++;
    }
    qsort(order, l, sizeof *order, sw_by_keys);
    for (int32_t k = 0; k < nlinks; k++) {
        m->out_link[k] = order[k].id;
    }
    for (int32_t u = 0; u < ndev; u++) {
        m->out_ptr[u + 1] += m->out_ptr[u];
    }
    free(order);
    return SW_OK;
}

static void heap_push(candidate *h, int64_t *len, candidate c) {
    int64_t i = (*len)++;
    while (i > 0 && h[(i - 1) / 2].w < c.w) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static candidate heap_pop(candidate *h, int64_t *len) {
    candidate top = h[0], last = h[--*len];
    int64_t i = 0, n = *len;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && h[c + 1].w > h[c].w) {
            c++;
        }
        if (h[c].w <= last.w) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

/* m->width[v] = the widest route's bandwidth from `source` to v (+inf at the source, 0 unreached). */
static void widest_from(link_graph *m, int32_t source) {
    for (int32_t v = 0; v < m->ndev; v++) {
        m->width[v] = 0;
        m->settled[v] = 0;
    }
    int64_t len = 0;
    m->width[source] = INFINITY;
    heap_push(m->heap, &len, (candidate){INFINITY, source});
    while (len > 0) {
        candidate c = heap_pop(m->heap, &len);
        if (m->settled[c.v]) {
            continue;   /* an older, narrower entry of a device already fixed */
        }
        m->settled[c.v] = 1;
        for (int32_t e = m->out_ptr[c.v]; e < m->out_ptr[c.v + 1]; e++) {
            int32_t k = m->out_link[e], v = m->dst[k];
            double w = fmin(c.w, m->bw[k]);
            if (w > m->width[v]) {   /* a device's width only grows, so it is pushed at most once per link */
                m->width[v] = w;
                heap_push(m->heap, &len, (candidate){w, v});
            }
        }
    }
}

/* Breadth-first search from `source` over the links at least `floor` wide: m->via[v] is the link
 * that reached v (where m->seen[v] == m->searches). */
static void fewest_hops_from(link_graph *m, int32_t source, double floor) {
    int64_t stamp = ++m->searches;
    int32_t head = 0, tail = 0;
    m->seen[source] = stamp;
    m->via[source] = -1;
    m->queue[tail++] = source;
    while (head < tail) {
        int32_t u = m->queue[head++];
        for (int32_t e = m->out_ptr[u]; e < m->out_ptr[u + 1]; e++) {
            int32_t k = m->out_link[e], v = m->dst[k];
            if (m->bw[k] >= floor && m->seen[v] != stamp) {
                m->seen[v] = stamp;
                m->via[v] = k;
                m->queue[tail++] = v;
            }
        }
    }
}

sw_status sw_widest_bandwidths(int32_t ndev, int32_t nlinks, const int32_t *src, const int32_t *dst, const double *bw,
                               int32_t nsources, const int32_t *sources, double *out) {
    if (nsources < 0) {
        return SW_FAIL(SW_ERR_VALUE, "routes: negative source count %d", nsources);
    }
    for (int32_t s = 0; s < nsources; s++) {
        if (sources[s] < 0 || sources[s] >= ndev) {
            return SW_FAIL(SW_ERR_VALUE, "routes: source %d is device %d, not one of 0 .. %d", s, sources[s], ndev - 1);
        }
    }
    link_graph m;
    sw_status st = link_graph_init(&m, ndev, nlinks, src, dst, bw);
    for (int32_t s = 0; st == SW_OK && s < nsources; s++) {
        widest_from(&m, sources[s]);
        memcpy(out + (size_t)s * (size_t)ndev, m.width, sizeof *out * (size_t)ndev);
    }
    link_graph_free(&m);
    return st;
}

/* A destination waiting for its route: by width, widest first, then by pair. */
typedef struct {
    double w;
    int64_t pair;
} waiting;

static int by_width_then_pair(const void *pa, const void *pb) {
    const waiting *a = pa, *b = pb;
    if (a->w != b->w) {
        return a->w > b->w ? -1 : 1;
    }
    return (a->pair > b->pair) - (a->pair < b->pair);
}

/* The routes found so far, in the order they were found; pair i's is hops[at[i] .. at[i] + len[i]). */
typedef struct {
    int32_t *hops;
    int64_t used, cap;
} found;

static int found_reserve(found *f, int64_t more) {
    if (f->used + more <= f->cap) {
        return 0;
    }
    int64_t cap = f->cap ? f->cap : 1024;
    while (cap < f->used + more) {
        cap *= 2;
    }
    int32_t *grown = realloc(f->hops, sizeof *grown * (size_t)cap);
    if (!grown) {
        return -1;
    }
    f->hops = grown;
    f->cap = cap;
    return 0;
}

/* Append the route to `to` found by the last breadth-first search from `source`, first hop first;
 * *at and *len say where it lies in f->hops.  -1 when out of memory. */
static int append_route(const link_graph *m, found *f, int32_t source, int32_t to, int64_t *at, int64_t *len) {
    int64_t n = 0;
    for (int32_t v = to; v != source; v = m->src[m->via[v]]) {
        n++;
    }
    if (found_reserve(f, n) < 0) {
        return -1;
    }
    *at = f->used;
    *len = n;
    int64_t i = f->used + n;
    for (int32_t v = to; v != source; v = m->src[m->via[v]]) {
        f->hops[--i] = m->via[v];
    }
    f->used += n;
    return 0;
}

sw_status sw_widest_routes(int32_t ndev, int32_t nlinks, const int32_t *src, const int32_t *dst, const double *bw,
                           int64_t npairs, const int32_t *pair_src, const int32_t *pair_dst, int64_t *route_ptr,
                           double *width, int32_t **links, int64_t *nlinks_out) {
    *links = NULL;
    *nlinks_out = 0;
    if (npairs < 0 || npairs >= INT32_MAX) {
        return SW_FAIL(SW_ERR_VALUE, "routes: %lld pairs: must be 0 .. 2^31 - 2", (long long)npairs);
    }
    for (int64_t i = 0; i < npairs; i++) {
        if (pair_src[i] < 0 || pair_src[i] >= ndev || pair_dst[i] < 0 || pair_dst[i] >= ndev) {
            return SW_FAIL(SW_ERR_VALUE, "routes: pair %lld is %d -> %d, not two of the devices 0 .. %d",
                           (long long)i, pair_src[i], pair_dst[i], ndev - 1);
        }
    }
    link_graph m;
    found f = {0};
    size_t np = (size_t)npairs;
    sw_keyed *by_source = malloc(sizeof *by_source * (np ? np : 1));
    waiting *wait = malloc(sizeof *wait * (np ? np : 1));
    int64_t *at = calloc(np ? np : 1, sizeof *at), *len = calloc(np ? np : 1, sizeof *len);
    sw_status st = link_graph_init(&m, ndev, nlinks, src, dst, bw);
    if (st == SW_OK && (!by_source || !wait || !at || !len)) {
        st = SW_FAIL(SW_ERR_NOMEM, "routes: out of memory for %lld pairs", (long long)npairs);
    }
    if (st == SW_OK) {
        for (int64_t i = 0; i < npairs; i++) {
            by_source[i] = (sw_keyed){.key = pair_src[i], .key2 = 0, .id = (int32_t)i};
        }
        qsort(by_source, np, sizeof *by_source, sw_by_keys);
    }
    /* one source's pairs at a time: by_source[first .. end) */
    for (int64_t first = 0, end; st == SW_OK && first < npairs; first = end) {
        int32_t source = (int32_t)by_source[first].key;
        for (end = first; end < npairs && by_source[end].key == source; end++) {
        }
        widest_from(&m, source);
        int64_t nwait = 0;
        for (int64_t j = first; j < end; j++) {
            int32_t i = by_source[j].id, to = pair_dst[i];
            width[i] = m.width[to];
            if (to != source && m.width[to] > 0) {
                wait[nwait++] = (waiting){m.width[to], i};
            }
        }
        qsort(wait, (size_t)nwait, sizeof *wait, by_width_then_pair);
        for (int64_t j = 0; j < nwait; j++) {
            if (j == 0 || wait[j].w != wait[j - 1].w) {
                fewest_hops_from(&m, source, wait[j].w);
            }
            int64_t i = wait[j].pair;
            if (append_route(&m, &f, source, pair_dst[i], &at[i], &len[i]) < 0) {
                st = SW_FAIL(SW_ERR_NOMEM, "routes: out of memory for %lld links of routes", (long long)f.used);
                break;
            }
        }
    }
    /* the routes in the pairs' order */
    if (st == SW_OK) {
        route_ptr[0] = 0;
        for (int64_t i = 0; i < npairs; i++) {
            route_ptr[i + 1] = route_ptr[i] + len[i];
        }
        *nlinks_out = route_ptr[npairs];
        *links = malloc(sizeof **links * (size_t)(f.used ? f.used : 1));
        if (!*links) {
            st = SW_FAIL(SW_ERR_NOMEM, "routes: out of memory for %lld links of routes", (long long)f.used);
            *nlinks_out = 0;
        } else {
            for (int64_t i = 0; i < npairs; i++) {
                if (len[i] > 0) {
                    memcpy(*links + route_ptr[i], f.hops + at[i], sizeof **links * (size_t)len[i]);
                }
            }
        }
    }
    free(f.hops);
    free(by_source);
    free(wait);
    free(at);
    free(len);
    link_graph_free(&m);
    return st;
}
