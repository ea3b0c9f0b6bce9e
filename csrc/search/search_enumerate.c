/* search_enumerate.c -- exact enumeration of all strategies of a small graph.
 *
 * algorithm="exhaustive": the brute-force oracle the tests compare the
 * elimination search with (line 14 of Algorithm 1 enumerates the residual graph
 * this way; shardwise solves it by variable elimination instead, search_ve.c).
 * Nodes are assigned in the given order; each edge is charged when its later
 * endpoint is assigned.
 */
#include <math.h>    /* INFINITY, log10 */
#include <stdlib.h>  /* calloc, free */

#include "search_internal.h"

typedef struct {
    int first, count;  /* edges charged at this depth: a range of `order_edges` */
} depth_edges;

sw_status sw_enumerate(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                       const sw_live_edge *edges, double max_evaluations, int *choice, double *best,
                       double *evaluations, const char *what, const char *hint) {
    *best = INFINITY;
    *evaluations = 0;
    if (k == 0) {
        *best = 0;
        return SW_OK;
    }
    double log_combos = 0.0;   /* summed as logarithms: the product overflows past 10^308 */
    int most = 0;
    for (int d = 0; d < k; d++) {
        log_combos += log10((double)ncfg[nodes[d]]);
        most = ncfg[nodes[d]] > most ? ncfg[nodes[d]] : most;
    }
    if (log_combos > log10(max_evaluations) + 1e-12) {
        return SW_FAIL(SW_ERR_TOO_LARGE,
                       "%s would try about 10^%.1f strategies (%d ops, up to %d configurations each), more "
                       "than max_evaluations=%.3g; %s",
                       what, log_combos, k, most, max_evaluations, hint);
    }
    sw_status s = SW_OK;
    int *depth_of = NULL, *cur = NULL, *best_cur = NULL;
    depth_edges *at = NULL;
    const sw_live_edge **order_edges = NULL;
    double *partial = NULL;
    int max_node = 0;
    for (int d = 0; d < k; d++) {
        if (nodes[d] > max_node) {
            max_node = nodes[d];
        }
    }
    depth_of = malloc(sizeof *depth_of * (size_t)(max_node + 1));
    cur = calloc((size_t)k, sizeof *cur);
    best_cur = calloc((size_t)k, sizeof *best_cur);
    at = calloc((size_t)k, sizeof *at);
    order_edges = calloc((size_t)(ne > 0 ? ne : 1), sizeof *order_edges);
    partial = calloc((size_t)k + 1, sizeof *partial);
    if (!depth_of || !cur || !best_cur || !at || !order_edges || !partial) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int d = 0; d <= max_node; d++) {
        depth_of[d] = -1;
    }
    for (int d = 0; d < k; d++) {
        depth_of[nodes[d]] = d;
    }
    int nonneg = 1;
    for (int d = 0; d < k; d++) {
        for (int c = 0; c < ncfg[nodes[d]]; c++) {
            nonneg &= node_cost[nodes[d]][c] >= 0;
        }
    }
    /* bucket the edges by the depth of their later endpoint */
    int pos = 0;
    for (int d = 0; d < k; d++) {
        at[d].first = pos;
        for (int e = 0; e < ne; e++) {
            int ds = depth_of[edges[e].src], dd = depth_of[edges[e].dst];
            if (ds < 0 || dd < 0) {
                s = SW_FAIL(SW_ERR_INTERNAL, "edge %d -> %d leaves the enumerated nodes", edges[e].src,
                            edges[e].dst);
                goto done;
            }
            if ((ds > dd ? ds : dd) == d) {
                order_edges[pos++] = &edges[e];
                size_t cells = (size_t)ncfg[edges[e].src] * (size_t)ncfg[edges[e].dst];
                for (size_t c = 0; c < cells; c++) {
                    nonneg &= edges[e].t[c] >= 0;
                }
            }
        }
        at[d].count = pos - at[d].first;
    }
    /* iterative depth-first search; cur[d] is the configuration tried at depth d */
    int d = 0;
    cur[0] = -1;
    double found = INFINITY;
    double evals = 0;
    while (d >= 0) {
        int node = nodes[d];
        cur[d]++;
        if (cur[d] >= ncfg[node]) {
            d--;
            continue;
        }
        choice[node] = cur[d];
        double c = partial[d] + node_cost[node][cur[d]];
        for (int e = 0; e < at[d].count; e++) {
            const sw_live_edge *ed = order_edges[at[d].first + e];
            c += ed->t[(size_t)choice[ed->src] * ncfg[ed->dst] + choice[ed->dst]];
        }
        if (nonneg && c >= found) {
            continue;  /* every completion costs at least c */
        }
        if (d == k - 1) {
            evals += 1;
            if (c < found) {
                found = c;
                for (int q = 0; q < k; q++) {
                    best_cur[q] = cur[q];
                }
            }
            continue;
        }
        partial[d + 1] = c;
        d++;
        cur[d] = -1;
    }
    for (int q = 0; q < k; q++) {
        choice[nodes[q]] = best_cur[q];
    }
    *best = found;
    *evaluations = evals;
done:
    free(depth_of);
    free(cur);
    free(best_cur);
    free(at);
    free(order_edges);
    free(partial);
    return s;
}

sw_status sw_search_exhaustive(const sw_tables *t, double max_evaluations, int *choice, double *cost,
                               sw_search_stats *stats) {
    int *nodes = malloc(sizeof *nodes * (size_t)(t->nnodes > 0 ? t->nnodes : 1));
    sw_live_edge *edges = malloc(sizeof *edges * (size_t)(t->nedges > 0 ? t->nedges : 1));
    if (!nodes || !edges) {
        free(nodes);
        free(edges);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < t->nnodes; i++) {
        nodes[i] = i;
    }
    for (int e = 0; e < t->nedges; e++) {
        edges[e].src = t->edges[e].src;
        edges[e].dst = t->edges[e].dst;
        edges[e].t = t->edges[e].time;
    }
    double evals = 0;
    sw_status s = sw_enumerate(t->nnodes, nodes, t->ncfg, t->node_cost, t->nedges, edges, max_evaluations,
                               choice, cost, &evals, "algorithm='exhaustive'",
                               "pass a larger max_evaluations, or use algorithm='elimination', which finds the "
                               "same optimum without trying them all");
    if (stats) {
        stats->node_eliminations = stats->edge_eliminations = stats->leaf_eliminations = 0;
        stats->residual_nodes = stats->algorithm1_residual_nodes = t->nnodes;
        stats->residual_edges = t->nedges;
        double combos = 1.0;
        for (int i = 0; i < t->nnodes; i++) {
            combos *= t->ncfg[i];
        }
        stats->residual_combinations = combos;
        stats->evaluations = evals;
        stats->residual_width = 0;
        stats->residual_table = 0;
        stats->exact = 1;
        stats->lower_bound = *cost;
    }
    free(nodes);
    free(edges);
    return s;
}

int sw_tables_shared_with(const sw_tables *t, int e) {
    const sw_edge_table *x = &t->edges[e];
    for (int f = e - 1; f >= 0; f--) {
        const sw_edge_table *y = &t->edges[f];
        if (y->time == x->time && t->ncfg[y->src] == t->ncfg[x->src] && t->ncfg[y->dst] == t->ncfg[x->dst]) {
            return f;
        }
    }
    return -1;
}

double sw_strategy_cost(const sw_tables *t, const int *choice) {
    double c = 0.0;
    for (int i = 0; i < t->nnodes; i++) {
        c += t->node_cost[i][choice[i]];
    }
    for (int e = 0; e < t->nedges; e++) {
        const sw_edge_table *ed = &t->edges[e];
        c += ed->time[(size_t)choice[ed->src] * t->ncfg[ed->dst] + choice[ed->dst]];
    }
    return c;
}
