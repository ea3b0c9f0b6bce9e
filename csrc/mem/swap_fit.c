/* swap_fit.c -- a swap plan whose memory plan fits the budget, not only its live bytes.
 *
 * swap_plan.c counts live bytes per position; the memory plan (memplan.c) places buffers at
 * aligned offsets, and its arena may come out above the peak of live bytes (fragmentation).
 * The runtime allocates the arena, so the budget holds for it: plan, rewrite the graph
 * (swap.c), plan its memory on the swapped graph's streams, and where a device's arena is
 * over its budget plan again with the budget lowered: first by the larger of the excess and the
 * placement's overhead (arena - live peak), then by twice the last step each round.
 */
#include <stdlib.h>  /* malloc, free */
#include <string.h>  /* memcpy */

#include "internal.h"

#define FIT_ROUNDS 12

/* The memory plan of g swapped by r: arenas and host regions per device (check: proven safe too,
 * memplan_check.c). */
static sw_status measure(const sw_task_graph *g, int ndev, int64_t align, int check, const sw_swap_result *r,
                         int64_t *arena, int64_t *host) {
    sw_task_graph sg;
    sw_swap_streams ss;
    sw_swap_spec spec = sw_swap_result_spec(r);
    SW_TRY(sw_swap_apply(g, ndev, &spec, &sg, &ss));
    sw_streams view = sw_swap_streams_view(&ss);
    sw_memory_plan mp;
    sw_status s = sw_memory_plan_build_on(&sg, ndev, align, 1, r->n > 0 ? &view : NULL, &mp);
    if (s == SW_OK) {
        memcpy(arena, mp.arena, sizeof *arena * (size_t)ndev);
        memcpy(host, mp.host_arena, sizeof *host * (size_t)ndev);
        if (check) {
            s = sw_memory_plan_check_on(&sg, &mp, r->n > 0 ? &view : NULL);
        }
        sw_memory_plan_free(&mp);
    }
    sw_task_graph_free(&sg);
    sw_swap_streams_free(&ss);
    return s;
}

sw_status sw_swap_plan_fit(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r,
                           int64_t *arena, int64_t *host) {
    /* per device: the planning budget, and the bracket [low, high) of planning budgets known to
     * be infeasible (low) and to give an arena over the budget (high) */
    int64_t *budget = malloc(sizeof *budget * ((size_t)ndev + 1));
    int64_t *low = calloc((size_t)ndev + 1, sizeof *low), *high = calloc((size_t)ndev + 1, sizeof *high);
    int64_t *pinned = malloc(sizeof *pinned * ((size_t)ndev + 1));
    if (!budget || !low || !high || !pinned) {
        free(pinned);
        free(budget);
        free(low);
        free(high);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a swap plan");
    }
    memcpy(budget, in->budget, sizeof *budget * (size_t)ndev);
    for (int d = 0; d < ndev; d++) {
        pinned[d] = in->pinned ? in->pinned[d] : -1;
    }
    sw_swap_inputs mine = *in;
    mine.budget = budget;
    mine.pinned = pinned;
    sw_status s = SW_OK;
    memset(r, 0, sizeof *r);
    for (int round = 0; round < FIT_ROUNDS && s == SW_OK; round++) {
        sw_swap_result_free(r);
        s = sw_swap_plan(g, ndev, &mine, r);
        if (s == SW_OK) {
            s = measure(g, ndev, in->align, in->check, r, arena, host);
        }
        int done = 1, stuck = 0;
        for (int d = 0; d < ndev && s == SW_OK; d++) {   /* the host region, placed, over the pinned budget */
            if (pinned[d] >= 0 && host[d] > in->pinned[d]) {
                done = 0;
                pinned[d] -= host[d] - in->pinned[d] + in->align;
                stuck |= pinned[d] <= 0;
                pinned[d] = pinned[d] > 0 ? pinned[d] : 0;
            }
        }
        for (int d = 0; d < ndev && s == SW_OK; d++) {
            if (arena[d] <= in->budget[d]) {
                continue;
            }
            done = 0;
            if (!r->fits) {   /* too tight to plan: the budget that fits lies above */
                low[d] = budget[d];
            } else {
                high[d] = budget[d];
            }
            if (high[d] == 0 || high[d] - low[d] <= in->align) {
                stuck = 1;   /* nothing left between a plan too tight and one whose arena is over */
                continue;
            }
            int64_t overhead = arena[d] - r->peak[d], excess = arena[d] - in->budget[d];   /* placement's extra */
            budget[d] = low[d] > 0 ? low[d] + (high[d] - low[d]) / 2
                                   : high[d] - (overhead > excess ? overhead : excess) - in->align;
            budget[d] = budget[d] > 1 ? budget[d] : 1;
        }
        if (s != SW_OK || done || stuck) {
            break;
        }
    }
    r->fits = 1;   /* what counts is the arena the runtime allocates */
    for (int d = 0; d < ndev && s == SW_OK; d++) {
        r->fits = r->fits && arena[d] <= in->budget[d] && (!in->pinned || in->pinned[d] < 0 || host[d] <= in->pinned[d]);
    }
    free(budget);
    free(low);
    free(high);
    free(pinned);
    return s;
}
