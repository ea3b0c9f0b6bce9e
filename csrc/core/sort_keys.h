/* sort_keys.h -- the one comparator for records sorted by (int64 key, int32 key2, int32 id), ascending.
 *
 * Memory plans sort buffers by offset (memplan.c, memplan_check.c, memplan_streams.c: key = offset,
 * key2 = 0) and reuse edges by target, then source (key = to, key2 = from); swap plans sort
 * candidates by a task position, then buffer id (swap_plan.c) and swap tasks by insertion point,
 * then kind (swap.c).  The last field breaks ties, so every such sort is deterministic.
 */
#ifndef SHARDWISE_SORT_KEYS_H
#define SHARDWISE_SORT_KEYS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t key;
    int32_t key2, id;
} sw_keyed;

/* qsort comparator over sw_keyed: key, then key2, then id, each ascending. */
int sw_by_keys(const void *pa, const void *pb);
/* a[0..n) sorted in that order (sort_typed.h's merge sort: the memory planner's hot sorts). */
void sw_sort_keyed(sw_keyed *a, size_t n);

#endif
