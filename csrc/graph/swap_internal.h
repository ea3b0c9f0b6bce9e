/* swap_internal.h -- what swap.c shares with swap_plan.c: the touches of every buffer and
 * which buffers may be offloaded. */
#ifndef SHARDWISE_SWAP_INTERNAL_H
#define SHARDWISE_SWAP_INTERNAL_H

#include "internal.h"

/* The tasks touching each buffer, in program order (CSR: buffer b's are ids[ptr[b] .. ptr[b + 1]),
 * a task once per buffer even when it names it twice), and whether each touch writes. */
typedef struct {
    int32_t *ptr, *ids;
    uint8_t *writes;
} sw_touches;

sw_status sw_touches_build(const sw_task_graph *g, sw_touches *tl);
void sw_touches_free(sw_touches *tl);

/* Where an offloadable buffer is used (task ids): its last forward write, its last forward touch,
 * its first touch after the forward phase and its last touch. */
typedef struct {
    int32_t last_write, last_fwd, first_bwd, last_touch;
} sw_swap_span;

/* Can buffer b be offloaded: a float32 feature map (activation, staging region, received or partial
 * output), not persistent, not read by the host, written
 * first in the forward phase, and after its last forward touch only read, by tasks after the
 * forward phase?  Fills *span when it can. */
int sw_swap_candidate(const sw_task_graph *g, const sw_touches *tl, int32_t b, const char *host_read,
                      sw_swap_span *span);

/* The phase of a task inserted before task `at` of g (at == ntasks: after the last): the phase
 * of the task it goes before, the last task's at the end. */
static inline int8_t sw_phase_at(const sw_task_graph *g, int32_t at) {
    return g->tasks[at < g->ntasks ? at : g->ntasks - 1].phase;
}

#endif
