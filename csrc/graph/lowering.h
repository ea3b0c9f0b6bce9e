/* graph/lowering.h -- a plan lowered once: the one task graph of an iteration with its annotations.
 *
 * sw_lower builds a task graph from (problem, plan); every later pass (the memory plan, the
 * order, the simulator, the schedule and swap passes, the runtime) reads a task graph.  An
 * sw_lowering is that graph built once and kept, with what the passes need beside it: a copy of
 * the plan (durations and the runtime read its configurations), the streams the tasks run on (a
 * schedule's, or swap.c's), and the swap rewrite when a swap plan is applied.  Python's
 * _core.TaskGraph owns exactly one (csrc/py/taskgraph_py.c), so annotations are carried on the
 * graph they were made for instead of travelling as id arrays between separately lowered ones.
 * A room header: include "internal.h", which includes this file.
 */
#ifndef SHARDWISE_LOWERING_H
#define SHARDWISE_LOWERING_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not graph/lowering.h alone"
#endif

struct sw_lowering {
    sw_task_graph g;            /* the graph that runs: the lowering, or swap.c's rewrite of it */
    int ndev, nops;
    int optimizer_state;        /* the problem's when it was lowered (state buffers per parameter slice) */
    int32_t base_ntasks;        /* tasks of the plain lowering, before any recompute or swap rewrite */
    int32_t base_nbuffers;
    /* the plan, copied: nops configurations, their devices, op kinds */
    sw_config *cfg;
    int32_t *devs;
    int8_t *kind;
    sw_plan plan;
    /* the streams the tasks run on, owned: none (one per device, the lowering's order) when
     * !has_streams; a schedule's, or the swapped graph's (sw_swap_streams) */
    int has_streams;
    int32_t nstreams;
    int32_t *stream, *stream_device, *stream_priority;   /* g.ntasks, nstreams, nstreams */
    int32_t *origin;            /* swapped or recomputed: g.ntasks, the lowering's id of each task (-1: a swap or
                                   recompute task); else NULL */
    int swapped;                /* g holds swap tasks (a swap spec with n > 0 was applied) */
    int32_t recomputed;         /* feature maps g recomputes (recompute.c's rewrite; 0: none) */
    /* split over processes (sw_lowering_split_ranks): nranks > 0, rank[ndev] each device's rank, and
     * g's copies between two ranks replaced by send and recv halves; nranks 0: one process */
    int nranks;
    int32_t *rank;
};

/* Lower `plan` once (sw_lower, its rings as `rings` says) and annotate the graph: with `streams`
 * (a schedule's for this plan's graph, checked and copied; NULL: one per device), with `recompute` (rewritten by
 * sw_recompute_apply, one stream per device; NULL or n == 0: none) and with `swap` (rewritten
 * by sw_swap_apply after the recompute rewrite, whose graph its ids then refer to; its tasks on
 * the swap streams; NULL or n == 0: none).  Streams go with neither: swap and recompute plans run
 * on one compute stream per device (SW_ERR_VALUE).  *out belongs to the caller. */
sw_status sw_lowering_new(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, const sw_streams *streams,
                          const sw_swap_spec *swap, const sw_recompute_spec *recompute, sw_lowering **out);
/* sw_lowering_free, sw_lower_count: shardwise.h. */
/* Put l's tasks on `streams` (checked and copied; NULL: one per device), e.g. a schedule made on l
 * itself, without lowering again.  SW_ERR_VALUE on a swapped graph (its streams are the swap's) and
 * on a recomputed one (one stream per device so far). */
sw_status sw_lowering_set_streams(sw_lowering *l, const sw_streams *streams);
/* Split l's graph over `nranks` processes, rank[d] (ndev entries, each in [0, nranks)) the rank that
 * runs device d (graph/ranks.c): copies between two ranks become send and recv halves, each on a
 * stream of its device (the send: its source writer's stream, else the device's first).  The last
 * annotation: once split, a graph takes no other streams.  Once per lowering (SW_ERR_VALUE again). */
sw_status sw_lowering_split_ranks(sw_lowering *l, int nranks, const int32_t *rank);
/* The streams of l as the passes take them: NULL (one per device) or a view of l's copy in *view. */
const sw_streams *sw_lowering_streams(const sw_lowering *l, sw_streams *view);

#endif /* SHARDWISE_LOWERING_H */
