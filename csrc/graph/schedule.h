/* graph/schedule.h -- critical-path schedules (schedule_paths.c, schedule.c), streams and hazards.
 *
 * TurboDL's analysis as per-task priorities and streams; the stream map every later stage takes.
 * A room header: include "internal.h", which includes this file after the types it
 * uses (task graphs, problems, streams).
 */
#ifndef SHARDWISE_SCHEDULE_H
#define SHARDWISE_SCHEDULE_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not graph/schedule.h alone"
#endif

/* ---------------------------------------------------------------- schedules */
/* The critical-path analysis of TurboDL (Jin et al., section 2.4 and Algorithm 1) as
 * annotations on a task graph; docs/scheduling.md tells the whole story.
 *
 * Layers are the ops with a data input (inputs and parameters are sources, not
 * layers).  A *sync layer* lies on every path from the first layers to the last
 * ones; between two consecutive sync layers (or the start / end of the graph)
 * the layers form a *block* whose fork and merge are those sync layers.  Inside
 * a block, layer paths are taken longest first by their summed dA time (fork and
 * merge included); each layer joins the first path through it.  Path 0 is the
 * network's critical path: every sync layer and every block's longest path.
 * A path's rank is the number of distinct, longer distances in its block. */
typedef struct {
    int32_t nops, nblocks, npaths;
    int32_t levels;            /* path priority levels: 1 + the highest rank */
    const double *op_da;       /* nops: dA seconds of every op (borrowed from the caller) */
    int32_t *op_block;         /* nops: the block whose inside holds the op, -1 (sync layers, sources) */
    int32_t *op_path;          /* nops: its layer path, -1 for sources */
    int32_t *block_fork, *block_merge;   /* nblocks: ops, -1 for the start / end of the graph */
    double *block_distance;    /* nblocks: its longest path's distance */
    int32_t *path_block;       /* npaths: -1 for path 0 */
    int32_t *path_rank;        /* npaths: 0 for the longest paths of their block */
    double *path_distance;     /* npaths: summed dA seconds, fork to merge (path 0: first layer to last) */
} sw_layer_paths;

/* op_da: dA seconds of every op (>= 0; sources' are ignored).  lp is freed on failure. */
sw_status sw_layer_paths_build(const sw_problem *p, const double *op_da, sw_layer_paths *lp);
void sw_layer_paths_free(sw_layer_paths *lp);

typedef enum { SW_SCHED_FIFO = 0, SW_SCHED_CRITICAL_PATH = 1 } sw_sched_policy;

/* What a task is to Algorithm 1: forward work; dA: the activation-gradient chain (its output
 * is needed within the iteration, dependency distance 1); dW / dB: a weight's or a bias's
 * gradient (needed next iteration); sync: its synchronization and update (the sync and update
 * phases: copies to the replica group's first, reduce, update, copies back). */
typedef enum { SW_SUB_FORWARD = 0, SW_SUB_DA, SW_SUB_DW, SW_SUB_DB, SW_SUB_SYNC, SW_SUB_NKINDS } sw_subtask;

/* Per task: its priority (higher runs first among the ready tasks of a device) and its
 * stream; per device: streams, one per distinct priority of its tasks, most urgent
 * first.  A stream runs its tasks in task-id order (a topological order), so stream order
 * and dependencies never wait on each other in a cycle.  Critical path: priority =
 * path priority (-rank of the op's layer path; 0 on the critical path) minus alpha for a
 * dW, beta for a dB sub-task; a sync task of a layer's weights gets sync_floor - (the
 * number of layers with weights before it in the forward pass): below every compute class,
 * by reuse distance (the layer the next forward needs first goes first), one stream per
 * layer, so a layer's synchronization starts as soon as its dW is done (TurboDL's
 * multi-GPU extension; DeePa, section 5).  FIFO (the baseline): priority 0, one stream per
 * device. */
typedef struct {
    sw_sched_policy policy;
    int32_t alpha, beta;       /* the offsets used (defaults: levels and 2 x levels) */
    int32_t sync_floor;        /* the sync priority of the first layer with weights: -(levels + max(alpha, beta)) */
    sw_layer_paths paths;      /* the analysis (also made for FIFO; paths.op_da points at op_da) */
    double *op_da;             /* nops: dA seconds of every op: its slowest worker's backward_data sum */
    int32_t ntasks;
    int8_t *subtask;           /* ntasks: sw_subtask */
    int32_t *layer_path;       /* ntasks: the layer path of the task's op, -1 for sources */
    int32_t *path_priority;    /* ntasks */
    int32_t *priority;         /* ntasks */
    int32_t *stream;           /* ntasks: a stream id */
    int32_t ndev, nstreams;
    int32_t *stream_ptr;       /* ndev + 1: device d's streams are ids stream_ptr[d] .. stream_ptr[d+1] */
    int32_t *stream_device;    /* nstreams */
    int32_t *stream_priority;  /* nstreams: descending within a device */
} sw_schedule;

/* Annotate g (lowered from a plan of p) from `durations` (sw_task_durations: a roofline or a
 * profile).  alpha, beta >= 0, or -1 for the defaults.  s is zeroed first, freed on failure. */
sw_status sw_schedule_build(const sw_problem *p, const sw_task_graph *g, const double *durations,
                            sw_sched_policy policy, int32_t alpha, int32_t beta, sw_schedule *s);
void sw_schedule_free(sw_schedule *s);

/* ---------------------------------------------------------------- streams */
/* The streams a task graph runs on (streams.c): task t on stream stream[t].  A stream
 * belongs to one device (stream_device: its tasks' device), runs its tasks in task-id
 * order, and has a priority (stream_priority: among the ready heads of one device's
 * streams, the highest runs first).  Wherever a function takes a `const sw_streams *`,
 * NULL means one stream per device (stream d on device d, priority 0): the order the
 * lowering records its dependencies for (FIFO). */
typedef struct {
    int32_t ntasks, nstreams;
    const int32_t *stream;           /* ntasks */
    const int32_t *stream_device;    /* nstreams */
    const int32_t *stream_priority;  /* nstreams */
} sw_streams;

/* A schedule's streams (borrowed: valid while s is). */
sw_streams sw_schedule_streams(const sw_schedule *s);
/* SW_ERR_VALUE unless st fits g on ndev devices: one stream per task, stream ids in range,
 * every task on a stream of its own device. */
sw_status sw_streams_check(const sw_task_graph *g, int ndev, const sw_streams *st);
/* 1 when some device has more than one stream (0 for NULL): then the orderings that one
 * stream per device gave for free must be explicit edges (hazards.c, memplan_streams.c). */
int sw_streams_several(const sw_streams *st, int ndev);
/* The stream of task t (its device's under NULL). */
static inline int32_t sw_stream_of(const sw_task_graph *g, const sw_streams *st, int32_t t) {
    return st ? st->stream[t] : g->tasks[t].device;
}

/* hazards.c: per task t, the earlier tasks on other streams that conflict with it over a
 * buffer (one of the two writes it), as CSR *ptr (ntasks + 1) / *ids (free() both): for
 * every buffer in program order, its last writer before a read (read after write) or a
 * write (write after write), and the readers since that writer before a write (write
 * after read).  Consecutive conflicts are enough: the rest follow by transitivity. */
sw_status sw_tg_hazards(const sw_task_graph *g, const sw_streams *st, int32_t **ptr, int32_t **ids);

#endif /* SHARDWISE_SCHEDULE_H */
