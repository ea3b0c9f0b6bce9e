/* search_internal.h -- pieces shared by the elimination search, variable elimination
 * on its residual graph and the brute-force oracle. */
#ifndef SHARDWISE_SEARCH_INTERNAL_H
#define SHARDWISE_SEARCH_INTERNAL_H

#include "internal.h"

/* An edge of a (possibly reduced) graph: cost table ncfg[src] x ncfg[dst]. */
typedef struct {
    int src, dst;
    const double *t;
} sw_live_edge;

/* ---- the elimination's state (search_elim.c), read by its reverse pass (search_marginals.c) */
typedef struct {
    int src, dst;
    double *t;     /* table ncfg[src] x ncfg[dst] */
    int owned;     /* made by an elimination (its table in state.tables, or an earlier made edge's) */
    int alive;
} work_edge;

typedef enum { REC_NODE, REC_LEAF_IN, REC_LEAF_OUT, REC_MERGE } record_kind;

/* One step of the elimination, in order.  Undoing it recomputes the argmin over cj
 * for the one (ci, ck) the outer graph chose, O(C) instead of storing C^2 indices;
 * the tables it reads stay alive until the search ends.  Edge ids index state.edges. */
typedef struct {
    record_kind kind;
    int j;             /* the eliminated node (-1 for a merge) */
    int i, k;          /* REC_NODE: i -> j -> k; leaves: i is the neighbour; merge: the ends */
    const double *a;   /* REC_NODE: table i -> j; leaves: the one edge's table; merge: the first */
    const double *b;   /* REC_NODE: table j -> k; merge: the second */
    int ea, eb;        /* REC_NODE: edges i -> j, j -> k; leaves: ea; merge: the two merged */
    int made;          /* REC_NODE, merge: the edge made */
} record;

/* The tables an elimination makes, cut from a few large blocks freed together
 * (search_arena.c): their memory is new to the process on every search, and large blocks
 * are mapped with huge pages where the system has them. */
typedef struct {
    struct table_block *blocks;   /* the newest first */
    size_t next_size;             /* bytes of the next block */
    size_t expected;              /* bytes the caller expects in all: mapped ahead of the tables up to there */
    size_t earlier;               /* bytes used in the blocks before the newest */
} sw_table_arena;

/* An empty arena whose first block will hold `expected` bytes (or a small default), the bytes
 * the caller expects its tables to take in all. */
void sw_table_arena_init(sw_table_arena *a, size_t expected);
/* Room for n doubles, 64-byte aligned, until sw_table_arena_free; NULL when out of memory. */
double *sw_table_arena_alloc(sw_table_arena *a, size_t n);
void sw_table_arena_free(sw_table_arena *a);

typedef struct {
    const sw_tables *t;
    int n;
    double **node;          /* working node costs (leaf eliminations add to them) */
    char *alive;
    char *fresh;            /* per node: an edge from it made since the last edge sweep (only those can be parallel) */
    int *indeg, *outdeg;
    work_edge *edges;
    int ne, cap;
    record *recs;
    int nrec;
    int *products;          /* records of node eliminations whose tables may be reused (search_elim.c) */
    int nproducts;
    int *sums;              /* records of merges whose tables may be reused (search_elim.c) */
    int nsums;
    sw_table_arena tables;  /* the tables of the owned edges */
    struct pending_product *pending;   /* products a node sweep decided on, made at its end (search_elim.c) */
    int npending, pending_cap;
} state;

/* out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck] (Eq. 2's min-plus product),
 * large ones on up to `threads` threads (search_minplus.c). */
void sw_minplus(const double *a, const double *nj, const double *b, double *out, int ci_n, int cj_n, int ck_n,
                int threads);
/* Products of at least this many min-plus steps (ci x cj x ck) split their rows over threads; smaller
 * ones run on the calling thread (the bounds skip most steps). */
#define SW_MINPLUS_THREADED_WORK 2e7

/* Min-marginals after an elimination: m[v][c] = the least Eq. 1 of any strategy giving
 * node v configuration c, from the final state by undoing the records in reverse
 * (outside tables of every made edge).  Exact when one node was left; with more, a
 * lower bound built from `bound` (a lower bound of the optimum).  `cap`: marginals above
 * cap (1 + 1e-9) come out as INFINITY, those at most cap exact (every table entry must be >= 0: then an outside table's entry above
 * the cap only leads to marginals above it, is dropped, and the products over the sparse
 * tables left skip it); INFINITY computes them all. */
sw_status sw_elim_marginals(const state *st, double bound, double cap, double **m);

/* Exact minimum of sum(node costs) + sum(edge costs) over every assignment of
 * configurations to `nodes` (global ids), by depth-first enumeration with
 * pruning when all costs are non-negative.  Refuses (SW_ERR_TOO_LARGE) when the
 * number of assignments exceeds max_evaluations, with a message naming `what`
 * and the `hint` that lifts the limit.  Writes choice[node]. */
sw_status sw_enumerate(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                       const sw_live_edge *edges, double max_evaluations, int *choice, double *best,
                       double *evaluations, const char *what, const char *hint);

/* Variable elimination over the residual graph (search_ve.c). */
typedef struct {
    double max_table;   /* entries of the largest table exact elimination may build */
    double max_work;    /* min-plus steps (table entries x configurations) it may take */
} sw_residual_limits;

typedef struct {
    int exact;            /* 1: the optimum; 0: mini-bucket bound + improved assignment */
    int width;            /* most variables in one table of exact elimination (order's width) */
    double largest_table; /* entries of its largest table */
    double exact_work;    /* its min-plus steps */
    double work;          /* the steps taken (exact_work when exact) */
    double cap;           /* mini-bucket table cap when not exact */
    double lower_bound;   /* <= the residual optimum (equal when exact) */
    double cost;          /* of the assignment written to choice */
} sw_residual_result;

/* Minimum of sum(node costs) + sum(edge costs) over `nodes` (global ids) by
 * variable elimination along a min-fill order; exact within `lim`, else
 * mini-bucket elimination (res->exact = 0, res->lower_bound a lower bound).
 * Writes choice[node] for the k nodes. */
sw_status sw_solve_residual(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                            const sw_live_edge *edges, const sw_residual_limits *lim, int *choice,
                            sw_residual_result *res);

/* The same, exact or SW_ERR_TOO_LARGE (no bound): small re-solves of the fallback. */
sw_status sw_solve_residual_exact(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                                  const sw_live_edge *edges, const sw_residual_limits *lim, int *choice,
                                  sw_residual_result *res);

/* Improve choice[nodes[..]] (and *cost, Eq. 1 of the residual problem) above the bound
 * (search_fallback.c); score: per node, ncfg doubles, lower = more promising, one node
 * after the other. */
sw_status sw_residual_improve(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                              const sw_live_edge *edges, const sw_residual_limits *lim, const double *score,
                              int *choice, double *cost);

#endif
