/* search/search.h -- cost tables and the searches over them (search_*.c).
 *
 * Plain tables (node and edge costs) so that tests can feed fake ones; the problem owns one set.
 * The body of shardwise.h's opaque sw_tables.  Include "internal.h", which includes this file
 * before the problem's body (which holds one set of tables).
 */
#ifndef SHARDWISE_SEARCH_H
#define SHARDWISE_SEARCH_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not search/search.h alone"
#endif

/* ---------------------------------------------------------------- cost tables */
typedef struct {
    int src, dst;        /* node indices */
    double *time;        /* ncfg[src] x ncfg[dst], row-major, seconds */
    double *bytes;       /* same shape, bytes moved (NULL unless requested) */
    int shared;          /* the arrays belong to an earlier edge with the same signature */
} sw_edge_table;

struct sw_tables {
    int nnodes;
    int *ncfg;
    double **node_cost;  /* t_c + t_s per configuration */
    int nedges;
    sw_edge_table *edges;
    double *storage;          /* when not NULL, every edge's time and bytes lie in it (one block, freed whole) */
    _Atomic long *progress;   /* if not NULL, incremented per elimination (a progress bar reads it) */
    int threads;              /* threads for large min-plus products (0 or 1: the calling thread) */
};

/* The min-plus product of node elimination, out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck]
 * (search_minplus.c), on a given kernel: the same bits on each; a kernel the CPU lacks (or -1) is
 * replaced by the best it has.  Searches use the best; tests compare them. */
enum { SW_MINPLUS_PORTABLE = 0, SW_MINPLUS_AVX2 = 1, SW_MINPLUS_AVX512 = 2 };
int sw_minplus_best_kernel(void);
void sw_minplus_kernel(const double *a, const double *nj, const double *b, double *out, int ci_n, int cj_n,
                       int ck_n, int threads, int kernel);

/* Keep (1) the blocks of huge pages that searches free for the next searches, or stop (0): calls
 * nest, and when the last keeper stops the kept blocks are freed (search_arena.c); -1 changes
 * nothing.  Returns the bytes kept after the call (the bytes of the kept blocks that have been
 * mapped; their address space is larger).  For a caller running many searches in a row:
 * their tables' memory is mapped once, not on every search. */
size_t sw_table_arena_keep(int keep);

/* The searches (sw_search_elimination, sw_search_exhaustive, ...) and their statistics are public:
 * shardwise.h. */

#endif /* SHARDWISE_SEARCH_H */
