/* search_fallback.c -- a plan for a residual graph above the exact bound.
 *
 * Mini-bucket elimination (search_ve.c) gives a lower bound and a first
 * assignment.  Two improvements follow, each kept only where it lowers Eq. 1:
 *
 *  - restricted exact elimination: each op keeps its M most promising
 *    configurations (lowest mini-bucket decode score, plus the one it has) and
 *    variable elimination solves that smaller problem exactly, for the largest
 *    M in 64, 32, .., 2 that fits the same bound.  Ops move together here,
 *    which single moves cannot do (a block of adds changing partition at once);
 *  - local search: each op in turn takes its best configuration given its
 *    neighbours (iterated conditional modes); when none improves, the two ends
 *    of each edge are re-chosen together; until neither helps.
 *
 * Shapes: k residual ops, nodes[i] their global ids; node_cost[g] has ncfg[g]
 * entries, edge e a table ncfg[src] x ncfg[dst]; score holds ncfg[nodes[i]]
 * doubles for i = 0, 1, .. one after the other.
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memset */

#include "search_internal.h"

enum { LOCAL_SWEEPS = 200 };

typedef struct {
    int k, ne;
    const int *nodes, *ncfg;
    double *const *node_cost;
    const sw_live_edge *edges;
    int *local;               /* global id -> local id */
    int *first, *incident;    /* CSR: edges of each local op */
} residual;

static double edge_at(const residual *r, int e, const int *choice) {
    const sw_live_edge *ed = &r->edges[e];
    return ed->t[(size_t)choice[ed->src] * r->ncfg[ed->dst] + choice[ed->dst]];
}

static double eq1(const residual *r, const int *choice) {
    double c = 0;
    for (int i = 0; i < r->k; i++) {
        c += r->node_cost[r->nodes[i]][choice[r->nodes[i]]];
    }
    for (int e = 0; e < r->ne; e++) {
        c += edge_at(r, e, choice);
    }
    return c;
}

/* u[c] = op g's node cost at configuration c plus its edges to every op but h (h < 0: all
 * of them), the other ends at their chosen configurations: O(deg C) for C = ncfg[g]. */
static void unary_except(const residual *r, int g, int h, const int *choice, double *u) {
    int ng = r->ncfg[g], i = r->local[g];
    for (int c = 0; c < ng; c++) {
        u[c] = r->node_cost[g][c];
    }
    for (int q = r->first[i]; q < r->first[i + 1]; q++) {
        const sw_live_edge *ed = &r->edges[r->incident[q]];
        if (ed->src == h || ed->dst == h) {
            continue;
        }
        if (ed->src == g) {   /* row c of the table, column of the consumer's choice */
            const double *t = ed->t + choice[ed->dst];
            int stride = r->ncfg[ed->dst];
            for (int c = 0; c < ng; c++) {
                u[c] += t[(size_t)c * stride];
            }
        } else {              /* row of the producer's choice, column c */
            const double *t = ed->t + (size_t)choice[ed->src] * ng;
            for (int c = 0; c < ng; c++) {
                u[c] += t[c];
            }
        }
    }
}

/* Sum of the tables between ops g and h at (a, b); `between` lists their edges. */
static double between_at(const residual *r, const int *between, int nb, int g, int a, int b) {
    double c = 0;
    for (int q = 0; q < nb; q++) {
        const sw_live_edge *ed = &r->edges[between[q]];
        c += ed->src == g ? ed->t[(size_t)a * r->ncfg[ed->dst] + b] : ed->t[(size_t)b * r->ncfg[ed->dst] + a];
    }
    return c;
}

/* Iterated conditional modes: each op in turn takes its best configuration given its
 * neighbours; when none moves, the two ends of each edge are re-chosen together.  The
 * part of Eq. 1 that depends on a pair (g, h) separates as ug[a] + uh[b] + (the tables
 * between g and h at (a, b)), so a pair costs O(C^2 + deg C), not O(C^2 deg).
 * ug, uh: scratch of the most configurations of any op; between: of 2 ne ints. */
static void local_search(const residual *r, int *choice, double *ug, double *uh, int *between) {
    for (int sweep = 0; sweep < LOCAL_SWEEPS; sweep++) {
        int changed = 0;
        for (int i = 0; i < r->k; i++) {   /* one op at a time */
            int g = r->nodes[i], keep = choice[g], arg = keep;
            unary_except(r, g, -1, choice, ug);
            for (int c = 0; c < r->ncfg[g]; c++) {
                arg = ug[c] < ug[arg] ? c : arg;
            }
            choice[g] = arg;
            changed |= arg != keep;
        }
        for (int e = 0; !changed && e < r->ne; e++) {   /* both ends of an edge together */
            int g = r->edges[e].src, h = r->edges[e].dst, i = r->local[g];
            int nb = 0;
            for (int q = r->first[i]; q < r->first[i + 1]; q++) {
                const sw_live_edge *ed = &r->edges[r->incident[q]];
                if (ed->src == h || ed->dst == h) {
                    between[nb++] = r->incident[q];
                }
            }
            unary_except(r, g, h, choice, ug);
            unary_except(r, h, g, choice, uh);
            int kg = choice[g], kh = choice[h], ag = kg, ah = kh;
            double best = ug[kg] + uh[kh] + between_at(r, between, nb, g, kg, kh);
            for (int a = 0; a < r->ncfg[g]; a++) {
                for (int b = 0; b < r->ncfg[h]; b++) {
                    double v = ug[a] + uh[b] + between_at(r, between, nb, g, a, b);
                    if (v < best) {
                        best = v;
                        ag = a;
                        ah = b;
                    }
                }
            }
            choice[g] = ag;
            choice[h] = ah;
            changed |= ag != kg || ah != kh;
        }
        if (!changed) {
            break;
        }
    }
}

/* out[0] = current, then up to want - 1 others by ascending score: O(n want). */
static int best_scored(const double *score, int n, int current, int want, char *taken, int *out) {
    memset(taken, 0, (size_t)n);
    taken[current] = 1;
    int have = 0;
    out[have++] = current;
    while (have < want) {
        int arg = -1;
        for (int c = 0; c < n; c++) {
            if (!taken[c] && (arg < 0 || score[c] < score[arg])) {
                arg = c;
            }
        }
        if (arg < 0) {
            break;
        }
        taken[arg] = 1;
        out[have++] = arg;
    }
    return have;
}

/* Solve the problem restricted to each op's m best-scored configurations (and its
 * current one) exactly; adopt the result if it is cheaper.  1 if it fitted. */
static sw_status restricted(const residual *r, const sw_residual_limits *lim, const double *score, int m,
                            int *choice, double *cost, int *fitted) {
    int k = r->k;
    int *keep = NULL, *kcount = calloc((size_t)k, sizeof *kcount), *kfirst = calloc((size_t)k + 1, sizeof *kfirst);
    int *sub_ncfg = NULL, *sub_nodes = malloc(sizeof(int) * (size_t)k), *sub_choice = NULL;
    char *taken = NULL;
    double **sub_node = calloc((size_t)k, sizeof *sub_node);
    sw_live_edge *sub_edges = calloc((size_t)(r->ne > 0 ? r->ne : 1), sizeof *sub_edges);
    sw_status st = SW_OK;
    *fitted = 0;
    int most = 1;
    for (int i = 0; i < k; i++) {
        most = r->ncfg[r->nodes[i]] > most ? r->ncfg[r->nodes[i]] : most;
    }
    taken = malloc((size_t)most);
    if (!kcount || !kfirst || !sub_nodes || !sub_node || !sub_edges || !taken) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* the kept configurations: local op i keeps keep[kfirst[i] .. kfirst[i+1]) */
    for (int i = 0; i < k; i++) {
        int n = r->ncfg[r->nodes[i]];
        kfirst[i + 1] = kfirst[i] + (n < m + 1 ? n : m + 1);
    }
    keep = malloc(sizeof *keep * (size_t)(kfirst[k] > 0 ? kfirst[k] : 1));
    sub_ncfg = malloc(sizeof *sub_ncfg * (size_t)k);
    sub_choice = malloc(sizeof *sub_choice * (size_t)k);
    if (!keep || !sub_ncfg || !sub_choice) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    int64_t off = 0;
    for (int i = 0; i < k && st == SW_OK; i++) {
        int g = r->nodes[i], n = r->ncfg[g];
        int *mine = keep + kfirst[i];
        int have = best_scored(score + off, n, choice[g], kfirst[i + 1] - kfirst[i], taken, mine);
        off += n;
        kcount[i] = have;
        sub_nodes[i] = i;
        sub_ncfg[i] = have;
        sub_node[i] = malloc(sizeof(double) * (size_t)have);
        if (!sub_node[i]) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (int c = 0; c < have; c++) {
            sub_node[i][c] = r->node_cost[g][mine[c]];
        }
    }
    for (int e = 0; e < r->ne && st == SW_OK; e++) {
        int a = r->local[r->edges[e].src], b = r->local[r->edges[e].dst];
        double *t = malloc(sizeof(double) * (size_t)kcount[a] * (size_t)kcount[b]);
        if (!t) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (int x = 0; x < kcount[a]; x++) {
            for (int y = 0; y < kcount[b]; y++) {
                t[(size_t)x * kcount[b] + y] =
                    r->edges[e].t[(size_t)keep[kfirst[a] + x] * r->ncfg[r->edges[e].dst] + keep[kfirst[b] + y]];
            }
        }
        sub_edges[e] = (sw_live_edge){a, b, t};
    }
    if (st == SW_OK) {
        sw_residual_result res;
        st = sw_solve_residual_exact(k, sub_nodes, sub_ncfg, sub_node, r->ne, sub_edges, lim, sub_choice, &res);
        if (st == SW_ERR_TOO_LARGE) {
            st = SW_OK;   /* m too large for the bound: the caller tries a smaller one */
        } else if (st == SW_OK) {
            *fitted = 1;
            if (res.cost < *cost) {
                for (int i = 0; i < k; i++) {
                    choice[r->nodes[i]] = keep[kfirst[i] + sub_choice[i]];
                }
                *cost = eq1(r, choice);
            }
        }
    }
done:
    for (int i = 0; sub_node && i < k; i++) {
        free(sub_node[i]);
    }
    for (int e = 0; sub_edges && e < r->ne; e++) {
        free((double *)sub_edges[e].t);
    }
    free(keep);
    free(kcount);
    free(kfirst);
    free(sub_ncfg);
    free(sub_nodes);
    free(sub_choice);
    free(taken);
    free(sub_node);
    free(sub_edges);
    return st;
}

sw_status sw_residual_improve(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                              const sw_live_edge *edges, const sw_residual_limits *lim, const double *score,
                              int *choice, double *cost) {
    if (k < 0 || ne < 0) {
        return SW_FAIL(SW_ERR_VALUE, "a residual graph with %d nodes and %d edges", k, ne);
    }
    residual r = {k, ne, nodes, ncfg, node_cost, edges, NULL, NULL, NULL};
    int max_node = 0;
    for (int i = 0; i < k; i++) {
        max_node = nodes[i] > max_node ? nodes[i] : max_node;
    }
    r.local = malloc(sizeof *r.local * (size_t)(max_node + 1));
    r.first = calloc((size_t)k + 1, sizeof *r.first);
    r.incident = malloc(sizeof *r.incident * ((size_t)ne * 2 + 1));
    int *fill = calloc((size_t)k, sizeof *fill);
    int most = 1;
    for (int i = 0; i < k; i++) {
        most = ncfg[nodes[i]] > most ? ncfg[nodes[i]] : most;
    }
    double *ug = malloc(sizeof *ug * (size_t)most), *uh = malloc(sizeof *uh * (size_t)most);
    int *between = malloc(sizeof *between * ((size_t)ne * 2 + 1));
    sw_status st = SW_OK;
    if (!r.local || !r.first || !r.incident || !fill || !ug || !uh || !between) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < k; i++) {
        r.local[nodes[i]] = i;
    }
    for (int e = 0; e < ne; e++) {
        r.first[r.local[edges[e].src] + 1]++;
        r.first[r.local[edges[e].dst] + 1]++;
    }
    for (int i = 0; i < k; i++) {
        r.first[i + 1] += r.first[i];
    }
    for (int e = 0; e < ne; e++) {
        int a = r.local[edges[e].src], b = r.local[edges[e].dst];
        r.incident[r.first[a] + fill[a]++] = e;
        r.incident[r.first[b] + fill[b]++] = e;
    }
    local_search(&r, choice, ug, uh, between);
    *cost = eq1(&r, choice);
    for (int m = 64, fitted = 0; m >= 2 && !fitted && st == SW_OK; m /= 2) {
        st = restricted(&r, lim, score, m, choice, cost, &fitted);
    }
    if (st == SW_OK) {
        local_search(&r, choice, ug, uh, between);
        *cost = eq1(&r, choice);
    }
done:
    free(r.local);
    free(r.first);
    free(r.incident);
    free(fill);
    free(ug);
    free(uh);
    free(between);
    return st;
}
