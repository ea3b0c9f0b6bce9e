/* search/search.h -- cost tables and the searches over them (search_*.c).
 *
 * Plain tables (node and edge costs) so that tests can feed fake ones; the problem owns one set.
 * A room of shardwise.h: include "shardwise.h", which includes this file after the types it
 * uses (task graphs, problems, streams).
 */
#ifndef SHARDWISE_SEARCH_H
#define SHARDWISE_SEARCH_H

#ifndef SHARDWISE_H
#error "include shardwise.h, not search/search.h alone"
#endif

/* ---------------------------------------------------------------- cost tables */
typedef struct {
    int src, dst;        /* node indices */
    double *time;        /* ncfg[src] x ncfg[dst], row-major, seconds */
    double *bytes;       /* same shape, bytes moved (NULL unless requested) */
    int shared;          /* the arrays belong to an earlier edge with the same signature */
} sw_edge_table;

typedef struct {
    int nnodes;
    int *ncfg;
    double **node_cost;  /* t_c + t_s per configuration */
    int nedges;
    sw_edge_table *edges;
    _Atomic long *progress;   /* if not NULL, incremented per elimination (a progress bar reads it) */
    int threads;              /* threads for large min-plus products (0 or 1: the calling thread) */
} sw_tables;

typedef struct {
    int node_eliminations, edge_eliminations, leaf_eliminations;
    int algorithm1_residual_nodes;  /* K of seed 003 Table 2: left by node + edge eliminations */
    int residual_nodes, residual_edges;  /* left after leaf eliminations too */
    double residual_combinations;   /* product of configuration counts of the residual graph (may be inf) */
    double evaluations;             /* exhaustive: strategies evaluated; elimination: min-plus steps of
                                     * variable elimination on the residual graph */
    int residual_width;             /* most ops in one table of exact variable elimination (0: none) */
    double residual_table;          /* entries of its largest table */
    int exact;                      /* 1: the optimum; 0: above the bound, best plan found + lower bound */
    double lower_bound;             /* a lower bound of Eq. 1 (the optimum when exact) */
} sw_search_stats;

/* Algorithm 1 of seed 003 (node, edge, leaf eliminations), then variable elimination
 * of what is left: exact while that takes at most max_evaluations min-plus steps and
 * no table above min(max_evaluations, SW_MAX_TABLE_ENTRIES) entries; beyond, the best
 * plan found with stats->exact = 0 and stats->lower_bound. */
#define SW_MAX_TABLE_ENTRIES 134217728.0   /* 2^27 doubles: 1 GiB, never more in one table */
sw_status sw_search_elimination(const sw_tables *t, double max_evaluations, int *choice,
                                double *cost, sw_search_stats *stats);
/* The same, and marginals[v] (malloc'd, ncfg[v] entries, NULL before) the least Eq. 1 of a
 * strategy giving node v each configuration: exact when the eliminations left one node,
 * else lower bounds (search_marginals.c). */
sw_status sw_search_elimination_marginals(const sw_tables *t, double max_evaluations, int *choice,
                                          double *cost, sw_search_stats *stats, double **marginals);
sw_status sw_search_exhaustive(const sw_tables *t, double max_evaluations, int *choice,
                               double *cost, sw_search_stats *stats);
/* Eq. 1 for one strategy. */
double sw_strategy_cost(const sw_tables *t, const int *choice);

#endif /* SHARDWISE_SEARCH_H */
