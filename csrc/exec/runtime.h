/* runtime.h -- the native runtime: one training iteration's task graph run on a backend.
 *
 * sw_runtime_new lowers a plan (lower.c; sw_runtime_new_lowered takes a plan lowered once,
 * graph/lowering.h), plans its memory (memplan.c), asks
 * the backend for one arena per device and records every task, in program
 * order, onto its stream (one per device, or a schedule's: sw_runtime_new_on),
 * with an event wait before a task that must follow another stream's task and
 * an event record after a task another stream waits for (sw_task_order:
 * dependencies, reuse edges of the memory plan, buffer hazards).  A step
 * is one call: the backend runs every stream's work and returns when all is
 * done.  Nothing is allocated during a step: buffers live at planned offsets in
 * the arenas, and kernels take their scratch from a per-thread workspace that
 * only grows (so only the first steps may grow it).
 *
 *   sw_runtime *rt;
 *   sw_runtime_new(problem, &plan, attrs, &cpu_backend_options, &rt);
 *   sw_runtime_step(rt, SW_LIST_TRAIN, &args, &loss);   // forward, backward, sync, update
 *   float *w = sw_runtime_buffer(rt, b);                 // a parameter slice, in its arena
 *   sw_runtime_free(rt);
 */
#ifndef SHARDWISE_RUNTIME_H
#define SHARDWISE_RUNTIME_H

#include <stdatomic.h>  /* atomic counters shared by the streams */
#include <stddef.h>     /* size_t */
#include <stdint.h>     /* int32_t, int64_t */

#include "../core/view.h"    /* sw_view, sw_window */
#include "comm.h"            /* sw_comm_ext: the job's communicator, for one rank of several */
#include "op_attrs.h"        /* sw_op_attrs: one typed record per op kind */
#include "optimizer.h"       /* sw_optimizer */
#include "../internal.h"    /* sw_task_graph, sw_memory_plan, sw_problem, sw_plan */



/* The recorded work lists: a training step, the forward pass alone (loss, predict), and
 * rt->pipeline training steps back to back (pipeline.c; recorded on request only). */
enum { SW_LIST_TRAIN = 0, SW_LIST_FORWARD = 1, SW_LIST_PIPELINE = 2, SW_NLISTS = 3 };

/* What a batchnorm normalizes with, and whether it updates its running statistics (as PyTorch's
 * training mode, minus the update, for SW_BN_BATCH; as its eval mode for SW_BN_RUNNING). */
typedef enum {
    SW_BN_BATCH = 0,    /* the minibatch's statistics; running statistics untouched (loss, predict in train mode) */
    SW_BN_UPDATE,       /* the minibatch's statistics, and the running statistics updated (training steps) */
    SW_BN_RUNNING       /* the running statistics (eval mode) */
} sw_bn_mode;

/* One step's inputs from the caller (host memory). */
typedef struct {
    const float *const *inputs;  /* per op: an input op's whole minibatch (row-major, its shape), else NULL */
    const int32_t *labels;       /* the loss's labels: (N), or (N, T) row-major for (N, T, C) logits */
    sw_optimizer opt;            /* the update tasks' optimizer and its values for this step */
    int bn_mode;                 /* sw_bn_mode; SW_BN_RUNNING is eval mode, where dropout is the identity */
    int64_t step;                /* training steps completed before this one: dropout's masks depend on it */
} sw_step_args;

/* A worker's scratch: defined by the backend that runs tasks on worker threads (the CPU's,
 * csrc/cpu/backend_cpu.h); the runtime only passes it along. */
typedef struct sw_scratch sw_scratch;

/* The op facts the kernels need, copied from the problem (the runtime outlives it). */
typedef struct {
    int out_rank;
    int64_t shape[SW_MAX_RANK];     /* output shape */
    int ninputs;
    int8_t role[64];                /* sw_role of each input slot */
    uint8_t bias[64];               /* the slot is a bias (sw_input.bias): its gradient is dy's channel sums */
    int32_t producer[64];           /* DATA inputs: the producing op */
    /* partition-n-reduce: the split reduction variable (-1: none), its part size, and per
     * input slot the dimensions indexed by it (bit d), whose coordinates a worker's kernels
     * see shifted down by its part's start */
    int rvar, rdeg;
    int64_t rpart;
    uint8_t rdims[64];
    int64_t in_shape[64][SW_MAX_RANK];   /* each input's shape (the weight's, for rebasing) */
    int in_rank[64];
    /* the index maps of input slots 0 and 1 (the op description's): reshape and permute
     * evaluate them, matmul reads its transposes from them */
    sw_index_expr map[2][SW_MAX_RANK];
} sw_rt_op;

typedef struct sw_runtime sw_runtime;

/* Per task, what a kernel call gets: the runtime, the step's arguments, its thread's scratch. */
typedef struct {
    const sw_runtime *rt;
    const sw_step_args *args;
    sw_scratch *scratch;
    double *loss_sum;            /* loss tasks: loss_sum[task] += their sum of -log p (per task of the
                                    task's iteration; NULL: rt->loss_sums) */
    int32_t iteration;           /* the task's iteration in the launch (0 but for steps back to back) */
} sw_task_ctx;

/* ------------------------------------------------------------------ backends */
typedef struct sw_backend sw_backend;

/* A backend: a struct of function pointers (optional slots may be NULL). */
typedef struct {
    const char *name;
    /* one arena per device, at least `bytes` long (bytes may be 0) */
    sw_status (*arena_new)(sw_backend *b, int device, size_t bytes, void **base);
    void (*arena_free)(sw_backend *b, int device, void *base);
    /* a stream of work on a device; higher priorities first where the backend can (may be ignored) */
    sw_status (*stream_new)(sw_backend *b, int device, int priority, int *stream);
    /* record work onto list `list` of a stream, run by launch in the recorded order */
    sw_status (*enqueue_task)(sw_backend *b, int list, int stream, int32_t task);
    sw_status (*enqueue_wait)(sw_backend *b, int list, int stream, int32_t event);   /* until recorded */
    sw_status (*enqueue_record)(sw_backend *b, int list, int stream, int32_t event);
    /* run every stream's list once and return when all of it is done (synchronize); args holds
     * one entry per iteration of the list: task T of SW_LIST_PIPELINE is task T % ntasks of
     * iteration T / ntasks (rt->pipeline entries), the other lists have one iteration */
    sw_status (*launch)(sw_backend *b, int list, const sw_step_args *args);
    /* host <-> device copies; NULL where device memory is host memory */
    sw_status (*to_host)(sw_backend *b, int device, void *host, const void *dev, size_t bytes);
    sw_status (*from_host)(sw_backend *b, int device, void *dev, const void *host, size_t bytes);
    /* scratch bytes grown since creation, and how many times */
    void (*workspace_stats)(sw_backend *b, int64_t *bytes, int64_t *grows);
    /* the last step's nanoseconds each worker thread spent waiting for other streams' tasks,
     * within the step and after its own list until the last thread finished (up to `max` threads); returns the number of threads (NULL: not measured) */
    int (*wait_times)(sw_backend *b, int64_t *ns, int max);
    void (*destroy)(sw_backend *b);
    /* Can the backend run op kind `kind` with these attributes on an output of rank out_rank?
     * 1, or 0 with `why` (n bytes) completing "the <name> backend ...", e.g. "has no kernels for
     * op kind 'layer_norm'".  Asked of the table, before any backend exists (the Trainer asks
     * through _core.supports_op); NULL: the backend runs every op. */
    int (*supports_op)(int kind, const sw_op_attrs *attrs, int out_rank, char *why, size_t n);
    /* One rank of several processes (exec/messages.h): before recv task `task` (a list task id:
     * iteration * ntasks + task), wait until sw_runtime_arrived says its message is in; a backend
     * waiting for one gives up after sw_runtime_message_timeout seconds with sw_runtime_overdue's
     * error.  NULL: the backend runs one process only. */
    sw_status (*enqueue_arrival)(sw_backend *b, int list, int stream, int32_t task);
    /* From the next launch on (on = 1) or no longer (0), time every task of the one-iteration lists
     * on the device's own clock into the runtime's task times (sw_runtime_task_ns), for a profile;
     * it costs two timing events per task.  NULL: the backend always records its tasks' times
     * (the CPU backend's worker threads read the host clock around each). */
    sw_status (*time_tasks)(sw_backend *b, int on);
} sw_backend_i;

struct sw_backend {
    const sw_backend_i *i;
    sw_runtime *rt;      /* the runtime the backend runs tasks of */
};

/* ------------------------------------------------------------------ the runtime */
/* Its body is the executor's (runtime_internal.h): backends and everything else reach a runtime
 * through the functions below. */

/* rt takes ownership of the backend; reuse_memory 0 gives every buffer its own bytes. */
sw_status sw_runtime_new(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs, int reuse_memory,
                         sw_backend *backend, sw_runtime **out);
/* The same with the tasks on `streams` (a schedule's, sw_schedule_streams, for the graph
 * this plan lowers to; copied), or NULL: one stream per device, as sw_runtime_new. */
sw_status sw_runtime_new_on(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs, int reuse_memory,
                            const sw_streams *streams, sw_backend *backend, sw_runtime **out);
/* The same with feature maps offloaded to host memory as `swap` says (swap.c: the lowered graph
 * rewritten with swap tasks on each device's swap-out and swap-in streams; host memory a region
 * of its own beside each device's arena).  CPU backend only; one compute stream per device. */
sw_status sw_runtime_new_swapped(const sw_problem *p, const sw_plan *plan, const sw_op_attrs *attrs,
                                 int reuse_memory, const sw_swap_spec *swap, sw_backend *backend, sw_runtime **out);
/* The runtime of a plan lowered once (graph/lowering.h: its graph, with swap tasks when a swap plan
 * was applied, copied; its streams): what the Python Runtime builds from a _core.TaskGraph.  The
 * entry points above lower the plan themselves.  SW_ERR_VALUE when l was lowered for another
 * problem (ops, devices, optimizer state), or swaps on a backend whose memory is not the host's. */
sw_status sw_runtime_new_lowered(const sw_problem *p, const sw_lowering *l, const sw_op_attrs *attrs,
                                 int reuse_memory, sw_backend *backend, sw_runtime **out);
/* The streams the runtime's tasks run on (a view of its copy). */
sw_streams sw_runtime_streams(const sw_runtime *rt);
void sw_runtime_free(sw_runtime *rt);
/* Nanoseconds of the monotonic clock (the clock of task_ns and step_ns). */
int64_t sw_now_ns(void);
/* One step of list `list`; *loss = the mean cross-entropy over the minibatch. */
sw_status sw_runtime_step(sw_runtime *rt, int list, const sw_step_args *args, double *loss);
/* csrc/exec/pipeline.c: record SW_LIST_PIPELINE, `copies` (2 .. SW_MAX_PIPELINE) training steps
 * back to back with no barrier between them (iterations.c's graph: layer i of the next forward
 * waits only for what it needs of the last iteration, its update).  Once per runtime (again
 * with the same copies: nothing to do); host-memory backends, no swap plan. */
#define SW_MAX_PIPELINE 8
sw_status sw_runtime_pipeline(sw_runtime *rt, int copies);
/* Run the `copies` (= rt->pipeline) steps of SW_LIST_PIPELINE: args[i] is step i's (its inputs,
 * labels, optimizer values, step count), loss[i] its mean cross-entropy.  Every argument is
 * checked before any task runs; each step computes exactly what sw_runtime_step would. */
sw_status sw_runtime_steps(sw_runtime *rt, int copies, const sw_step_args *args, double *loss);
/* The same as one rank of a job of several processes: l split over the job's ranks
 * (sw_lowering_split_ranks), comm the job's communicator (borrowed: it must outlive the runtime);
 * only this rank's devices get arenas and run tasks (exec/messages.h).  timeout_s: how long a
 * wait for a message or a send may take before the step fails naming it.  With comm NULL, a split
 * lowering is refused (SW_ERR_VALUE), as is a backend without enqueue_arrival. */
sw_status sw_runtime_new_ranked(const sw_problem *p, const sw_lowering *l, const sw_op_attrs *attrs,
                                int reuse_memory, const sw_comm_ext *comm, double timeout_s, sw_backend *backend,
                                sw_runtime **out);
/* The rank this runtime runs (0 for one process) and whether it runs device d. */
int sw_runtime_rank(const sw_runtime *rt);
int sw_runtime_runs_device(const sw_runtime *rt, int device);
/* A buffer's memory (host-addressable on the CPU backend); NULL on another rank's device. */
void *sw_runtime_buffer(const sw_runtime *rt, int32_t b);
/* Per device, the highest byte of its arena any step has written, rounded up to the
 * arena's alignment (host-memory backends: arenas start filled with a sentinel). */
sw_status sw_runtime_high_water(const sw_runtime *rt, int64_t *out);

/* A view of buffer b (its box, its arena memory). */
void sw_rt_view(const sw_runtime *rt, int32_t b, sw_view *v);

/* ------------------------------------------------------------------ what a backend may ask
 * A backend learns what it runs through these functions, never by reading struct sw_runtime;
 * the CUDA backend, a module of its own, calls them through the table the core lends it
 * (sw_core_api, backend_ext.h). */
int32_t sw_runtime_ntasks(const sw_runtime *rt);
int sw_runtime_nops(const sw_runtime *rt);
int64_t sw_runtime_batch(const sw_runtime *rt);          /* N, the minibatch */
int sw_runtime_pipeline_copies(const sw_runtime *rt);    /* SW_LIST_PIPELINE's steps (0: not recorded) */
int32_t sw_runtime_nstreams(const sw_runtime *rt);
int32_t sw_runtime_stream_device(const sw_runtime *rt, int32_t stream);
const sw_task *sw_runtime_task(const sw_runtime *rt, int32_t t);
int sw_runtime_task_reads(const sw_runtime *rt, int32_t t, const int32_t **ids);
int sw_runtime_task_writes(const sw_runtime *rt, int32_t t, const int32_t **ids);
int sw_runtime_in_list(const sw_runtime *rt, int list, int32_t t);
/* An accumulate task t is the first piece into its gradient: it copies (zeroing the rest). */
int sw_runtime_first_accumulate(const sw_runtime *rt, int32_t t);
const sw_buffer *sw_runtime_buffer_info(const sw_runtime *rt, int32_t b);
/* The box task t moves or adds (the empty box, rank 0, where it has none). */
const sw_box32 *sw_runtime_task_box(const sw_runtime *rt, int32_t t);
const sw_rt_op *sw_runtime_op(const sw_runtime *rt, int op);
const sw_op_attrs *sw_runtime_attrs(const sw_runtime *rt, int op);
/* The updates applied to the parameter slice whose first state buffer is b (a counter the
 * update tasks advance: SGD's momentum is started when > 0, Adam's step count). */
int64_t *sw_runtime_updates(const sw_runtime *rt, int32_t b);
/* Per loss task of each iteration, its sum of -log p this step (ntasks x pipeline copies). */
double *sw_runtime_loss_sums(const sw_runtime *rt);
/* Each task's start and end in the last launch (2 per task and iteration; ns, sw_now_ns). */
int64_t *sw_runtime_task_ns(const sw_runtime *rt);
/* One rank of several processes (exec/messages.c): the staging buffer of send or recv task t
 * (its box, packed row-major) in `iteration`; a send task's runner packs it and calls
 * sw_runtime_send.  sw_runtime_arrived(T) for recv task T of a list (iteration * ntasks + t): 1 once
 * its message is in its staging buffer, 0 not yet, -1 failed (the error set). */
void *sw_runtime_staging(const sw_runtime *rt, int32_t t, int iteration);
sw_status sw_runtime_send(const sw_runtime *rt, int32_t t, int iteration);
int sw_runtime_arrived(const sw_runtime *rt, int32_t T);
double sw_runtime_message_timeout(const sw_runtime *rt);   /* seconds; < 0: no limit */
sw_status sw_runtime_overdue(const sw_runtime *rt, int32_t T, double waited);   /* SW_ERR_TIMEOUT naming it */

#endif /* SHARDWISE_RUNTIME_H */
