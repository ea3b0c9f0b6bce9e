/* id_heap.h -- a min-heap of task ids: the line of ready tasks waiting for one resource.
 *
 * The event loops (simulate.c, sim_share.c) queue ready tasks per resource and start the
 * lowest id first (program order, or rank order after a schedule's renumbering).  A line holds
 * at most one entry per task, so its capacity stays below 2^31.
 *
 * Tasks mostly become ready in id order, so a line stays a sorted queue (items[first .. len)
 * ascending: push appends, pop advances `first`, both O(1)) until an id arrives below the
 * last one; then it becomes a binary heap (the sorted run is one already) until it empties.
 * A transfer routed over 2,000 links waits in 2,000 lines, and a parameter server over a chain
 * of 4,096 devices queues 17 million such entries: a heap's pops alone took 10 s of its replay.
 */
#ifndef SHARDWISE_ID_HEAP_H
#define SHARDWISE_ID_HEAP_H

#include <stdint.h>

typedef struct {
    int32_t *items;   /* the ids: items[first .. len) */
    int32_t first, len, cap;
    int32_t heaped;   /* 0: items[first .. len) ascending; 1: a binary heap in items[0 .. len) (first == 0) */
} sw_id_heap;   /* all zero: an empty line */

/* Add v; -1 when out of memory (the heap is unchanged then). */
int sw_id_heap_push(sw_id_heap *h, int32_t v);
/* Remove the lowest id (the line is not empty). */
void sw_id_heap_pop(sw_id_heap *h);

/* Is the line empty? */
static inline int sw_id_heap_empty(const sw_id_heap *h) { return h->first == h->len; }
/* The lowest id (the line is not empty). */
static inline int32_t sw_id_heap_top(const sw_id_heap *h) { return h->items[h->first]; }

#endif /* SHARDWISE_ID_HEAP_H */
