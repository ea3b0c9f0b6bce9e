/* mem/memplan.h -- memory: arenas, iterations back to back, the runtime's order, swap plans that fit.
 *
 * memplan*.c, iterations.c, order.c and swap_fit.c: where every buffer lives and what each task runs after
 * (the search's footprints are cost/cost.h's).
 * A room header: include "internal.h", which includes this file after the types it
 * uses (task graphs, problems, streams).
 */
#ifndef SHARDWISE_MEMPLAN_H
#define SHARDWISE_MEMPLAN_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not mem/memplan.h alone"
#endif

/* ---------------------------------------------------------------- memory plans */
/* One arena per device (memplan.c): every buffer's byte offset in its device's
 * arena, from lifetimes over the program order of the tasks, and the edges that
 * make reuse across streams safe (a copy reading a buffer on another device's
 * stream before that memory is taken over: reuse_from[i] must finish before
 * reuse_to[i] starts).  Every offset is a multiple of `align`. */
typedef struct {
    int32_t nbuffers;
    int ndev;
    int64_t align;
    int64_t *offset;       /* nbuffers: bytes into the arena of the buffer's device */
    int64_t *bytes;        /* nbuffers: its size (sw_buffer_bytes) */
    int32_t *first, *last; /* nbuffers: first and last task touching it; 0 .. ntasks when it lives throughout */
    int64_t *arena;        /* ndev: arena bytes (the highest aligned end of a buffer) */
    int64_t *peak;         /* ndev: the most bytes live at once */
    int64_t *total;        /* ndev: every buffer's bytes added up (what the device needs without reuse) */
    int64_t *kept;         /* ndev: bytes written in the forward phase still live when the backward starts */
    int64_t *peak_kinds;   /* ndev x SW_BUF_NKINDS: bytes live at the peak, per buffer kind */
    int32_t nreuse;
    int32_t *reuse_from, *reuse_to;
    int64_t *host_arena;   /* ndev: bytes of each device's host region, where its host buffers (SW_BUF_HOST,
                              swap.c) lie at their offsets, planned by lifetimes as the arena is */
} sw_memory_plan;

/* The alignment of every buffer in the runtime's arenas (a cache line; the widest loads of the
 * CPU kernels): the simulator plans memory with it too, so it replays the runtime's reuse edges. */
#define SW_ARENA_ALIGN 64

/* reuse 0: every buffer keeps its own bytes (a check, and the baseline the plan saves against). */
sw_status sw_memory_plan_build(const sw_task_graph *g, int ndev, int64_t align, int reuse, sw_memory_plan *mp);
/* The same for tasks run on streams `st` (NULL: one per device, as sw_memory_plan_build):
 * with several streams on a device, the reuse edges order the tasks of a buffer's bytes'
 * previous occupant before the buffer's first tasks on whatever stream (memplan_streams.c). */
/* Threads the memory plan of a graph of `parallel_from` buffers or more plans its devices on
 * (0: one per processor, at most 8; graphs with fewer buffers: this thread alone); each
 * argument below 0 leaves its setting as it is, and the old ones come back in *old_from and
 * *old_threads.  The plan is the same on any number (tests compare them). */
void sw_memplan_parallel(int parallel_from, int threads, int *old_from, int *old_threads);
sw_status sw_memory_plan_build_on(const sw_task_graph *g, int ndev, int64_t align, int reuse, const sw_streams *st,
                                  sw_memory_plan *mp);
/* The same with every buffer's offset given (offset[b], nbuffers entries: a plan of one
 * iteration repeated over several, iterations.c): lifetimes, arenas and reuse edges only. */
sw_status sw_memory_plan_build_at(const sw_task_graph *g, int ndev, int64_t align, const sw_streams *st,
                                  const int64_t *offset, sw_memory_plan *mp);
void sw_memory_plan_free(sw_memory_plan *mp);
/* memplan_check.c: SW_OK when offsets (and the reuse edges) are safe for g, judged
 * from the graph alone: buffers of one device whose bytes overlap are touched by
 * tasks all ordered one buffer's before the other's (dependencies, reuse edges,
 * each device's program order), parameters, momentum and loss outputs overlap
 * nothing, and every buffer lies inside its arena at an aligned offset;
 * otherwise SW_ERR_VALUE naming the first conflict. */
sw_status sw_memory_plan_check(const sw_task_graph *g, const sw_memory_plan *mp);
/* The same judged by the order on streams `st` (NULL: one per device); it also proves that
 * every buffer's conflicting accesses (a write and another access) keep program order. */
sw_status sw_memory_plan_check_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st);

/* ---------------------------------------------------------------- iterations back to back */
/* `copies` iterations of g concatenated, with no barrier between them (iterations.c):
 * iteration i's task t is i * ntasks + t on t's stream; buffers living across steps are
 * shared by all iterations, every other buffer is a new one per iteration at its offset in
 * mp; the memory plan has mp's offsets and the reuse edges of the concatenated graph.  Its
 * sw_task_order (on `streams()`) is the order of the iterations back to back;
 * sw_memory_plan_check_on proves it safe. */
typedef struct {
    int copies;
    int32_t ntasks;          /* tasks of one iteration */
    sw_task_graph g;
    sw_memory_plan mp;
    int32_t *buffer_of;      /* g.nbuffers: the buffer of one iteration each one repeats */
    int32_t *stream;         /* g.ntasks, NULL without streams */
    sw_streams st;           /* over `stream`, borrowing the rest of the given streams */
} sw_iterations;

sw_status sw_iterations_build(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st, int copies,
                              sw_iterations *it);
/* The streams of the concatenated graph (NULL when built without streams). */
static inline const sw_streams *sw_iterations_streams(const sw_iterations *it) { return it->stream ? &it->st : NULL; }
void sw_iterations_free(sw_iterations *it);

/* ---------------------------------------------------------------- the runtime's order */
/* What each task runs after on the runtime (order.c): the task before it on its stream, its
 * dependencies, the memory plan's reuse edges into it and, when a device has several streams,
 * the buffer hazards across streams (hazards.c), as CSR, sorted and distinct (all < t).  The
 * executor waits for the entries on other streams, the simulator replays them all,
 * memplan_check.c proves memory plans safe by them. */
typedef struct {
    int32_t ntasks;
    int32_t *ptr;   /* ntasks + 1 */
    int32_t *ids;   /* task t runs after ids[ptr[t] .. ptr[t+1]) */
} sw_task_order;

/* SW_ERR_VALUE for reuse edges that do not go forward between tasks of g. */
sw_status sw_task_order_build(const sw_task_graph *g, const sw_memory_plan *mp, sw_task_order *o);
/* The same on streams `st` (NULL: one per device, exactly sw_task_order_build's order). */
sw_status sw_task_order_build_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st,
                                 sw_task_order *o);
void sw_task_order_free(sw_task_order *o);

/* ---------------------------------------------------------------- swap plans that fit */
/* sw_swap_plan until the memory plan of the swapped graph (its arena, not only the live bytes the
 * model counts) fits every budget (mem/swap_fit.c): arena and host (ndev each) get its arenas and host
 * regions; r->fits = 0 when a device stays over. */
sw_status sw_swap_plan_fit(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r,
                           int64_t *arena, int64_t *host);

#endif /* SHARDWISE_MEMPLAN_H */
