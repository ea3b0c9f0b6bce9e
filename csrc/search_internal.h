/* search_internal.h -- pieces shared by the elimination search and the brute-force oracle. */
#ifndef SHARDWISE_SEARCH_INTERNAL_H
#define SHARDWISE_SEARCH_INTERNAL_H

#include "shardwise.h"

/* An edge of a (possibly reduced) graph: cost table ncfg[src] x ncfg[dst]. */
typedef struct {
    int src, dst;
    const double *t;
} sw_live_edge;

/* Exact minimum of sum(node costs) + sum(edge costs) over every assignment of
 * configurations to `nodes` (global ids), by depth-first enumeration with
 * pruning when all costs are non-negative.  Refuses (SW_ERR_TOO_LARGE) when the
 * number of assignments exceeds max_evaluations, with a message naming `what`
 * and the `hint` that lifts the limit.  Writes choice[node]. */
sw_status sw_enumerate(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                       const sw_live_edge *edges, double max_evaluations, int *choice, double *best,
                       double *evaluations, const char *what, const char *hint);

#endif
