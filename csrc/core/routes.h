/* routes.h -- widest routes over a machine's directed links: what a transfer between two devices
 * that share no link goes through, and how fast it runs.
 *
 * A machine is ndev devices and nlinks directed links; link k runs from src[k] to dst[k] at bw[k]
 * bytes/s (positive, finite; src[k] != dst[k]; two links may join the same pair).  The route of a
 * transfer a -> b is
 *   1. a widest path: its slowest link is as fast as any path's (the transfer's bandwidth),
 *   2. among those, one with the fewest links,
 *   3. among those, the one whose device sequence a, ..., b is lexicographically smallest
 *      (the lowest-numbered link where two links join the same pair of devices),
 * a rule that depends on the links, not on the order they are listed in.
 *
 * Cost: one widest-path search (Dijkstra on the slowest link, O(L log L)) per distinct source,
 * then per distinct width among that source's destinations one breadth-first search over the
 * links at least that wide (O(L + D)).  Rule 2 cannot be folded into the widest search: the
 * fewest-hop widest route to b need not extend the fewest-hop widest route to b's predecessor
 * (a short narrow prefix can beat a long wide one once the last link caps the width).
 * Nothing is kept between calls.
 */
#ifndef SHARDWISE_ROUTES_H
#define SHARDWISE_ROUTES_H

#include <stdint.h>

#include "shardwise.h"  /* sw_status */

/* out[s * ndev + v] = the bandwidth of the widest route from sources[s] to v (nsources x ndev):
 * +inf for v == sources[s], 0 where v cannot be reached. */
sw_status sw_widest_bandwidths(int32_t ndev, int32_t nlinks, const int32_t *src, const int32_t *dst, const double *bw,
                               int32_t nsources, const int32_t *sources, double *out);

/* The routes of npairs transfers pair_src[i] -> pair_dst[i], in the pairs' order, as CSR:
 * pair i's links (indices into src / dst / bw, first hop first) are
 * (*links)[route_ptr[i] .. route_ptr[i + 1]), route_ptr having npairs + 1 entries.  width[i] is
 * the route's bandwidth: +inf for a pair from a device to itself (no links), 0 where the
 * destination cannot be reached (no links either).  *links is malloc'd (the caller frees it;
 * NULL when there are none) and *nlinks_out is its length. */
sw_status sw_widest_routes(int32_t ndev, int32_t nlinks, const int32_t *src, const int32_t *dst, const double *bw,
                           int64_t npairs, const int32_t *pair_src, const int32_t *pair_dst, int64_t *route_ptr,
                           double *width, int32_t **links, int64_t *nlinks_out);

#endif /* SHARDWISE_ROUTES_H */
