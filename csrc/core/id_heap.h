/* id_heap.h -- a min-heap of task ids: the line of ready tasks waiting for one resource.
 *
 * The event loops (simulate.c, sim_share.c) queue ready tasks per resource and start the
 * lowest id first (program order, or rank order after a schedule's renumbering).  A line holds
 * at most one entry per task, so its capacity stays below 2^31.
 */
#ifndef SHARDWISE_ID_HEAP_H
#define SHARDWISE_ID_HEAP_H

#include <stdint.h>

typedef struct {
    int32_t *items;   /* items[0] is the lowest id */
    int32_t len, cap;
} sw_id_heap;

/* Add v; -1 when out of memory (the heap is unchanged then). */
int sw_id_heap_push(sw_id_heap *h, int32_t v);
/* Remove the lowest id (h->len > 0). */
void sw_id_heap_pop(sw_id_heap *h);

#endif /* SHARDWISE_ID_HEAP_H */
