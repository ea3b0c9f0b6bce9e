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

#include "../cpu/kernels.h"  /* sw_view, sw_window */
#include "../cpu/optim.h"    /* sw_optimizer */
#include "../shardwise.h"    /* sw_task_graph, sw_memory_plan, sw_problem, sw_plan */

/* What the kernels of an op need beyond its description (from the graph's attributes). */
typedef struct {
    int8_t type;       /* sw_op_type */
    int8_t relu;       /* conv2d, linear: a fused ReLU on the output */
    int8_t pool_max;   /* pool2d: max pooling (else average) */
    int8_t axis;       /* concat: the axis */
    float alpha;       /* the op's real parameter: leaky_relu's negative slope, batchnorm2d's momentum
                          (running = (1 - momentum) * running + momentum * the minibatch's statistic) */
    sw_window win;     /* conv2d, pool2d: kernel, stride, padding; conv2d: dilation, groups */
    int8_t causal;     /* softmax_dim: mask key j > query i (the last two dimensions) */
    int32_t ids;       /* input ops: 0 for float data, else the minibatch holds integer ids below this
                          bound (the smallest vocabulary of the embeddings reading it), stored as floats */
    uint64_t seed;     /* dropout: the seed its masks are a function of (with the step, each element's index) */
} sw_op_attrs;

/* csrc/exec/optimizer.c: state buffers each kind's update reads after (param, grad): 1 for
 * SGD, 2 for Adam and AdamW. */
int sw_optim_state_buffers(int kind);
/* SW_ERR_VALUE naming the problem when `o` cannot run on a runtime with `state` buffers per
 * parameter slice, or its numbers are out of range (the Python layer checks them first). */
sw_status sw_optim_check(const sw_optimizer *o, int state);

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

/* A grow-only workspace of one worker thread: kernels borrow scratch from it within a task. */
typedef struct {
    void *data;
    size_t bytes;
} sw_scratch;

/* At least `bytes` of scratch (64-byte aligned), growing the workspace if needed; NULL
 * when out of memory.  One call per task: what it returns is overwritten by the next. */
void *sw_scratch_get(sw_scratch *s, size_t bytes);

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
} sw_backend_i;

struct sw_backend {
    const sw_backend_i *i;
    sw_runtime *rt;      /* the runtime the backend runs tasks of */
};

/* The CPU backend (csrc/cpu/backend_cpu.c): `threads` worker threads, thread k running the
 * streams of devices k, k + threads, ...: each stream in program order, and among its streams
 * whose next task may start, the one of the highest priority first; one OpenBLAS thread each.
 * jitter_us > 0 (tests only): every task starts after a random pause of up to that many
 * microseconds, to shake thread timing. */
sw_status sw_backend_cpu_new(int ndev, int threads, int jitter_us, sw_backend **out);

/* ------------------------------------------------------------------ the runtime */
struct sw_runtime {
    sw_task_graph g;
    sw_memory_plan mp;
    int ndev, nops;
    sw_rt_op *ops;
    sw_op_attrs *attrs;
    int64_t batch;                /* N: the loss is the sum over loss tasks / N */
    void **arena;                 /* ndev */
    void **ptr;                   /* nbuffers: each buffer's address in its arena */
    uint8_t *first_accumulate;    /* ntasks: the first accumulate into its gradient (copies or zeroes) */
    uint8_t *in_list[SW_NLISTS];  /* ntasks: the task runs in that list */
    /* nbuffers: updates applied to each parameter slice's first state buffer (0 elsewhere):
     * SGD's momentum is started when > 0, and it is Adam's step count (torch's state['step']) */
    int64_t *updates;
    int optimizer_state;          /* state buffers per parameter slice (the problem's at lowering) */
    double *loss_sums;            /* ntasks (pipeline x ntasks once pipelined): per loss task of each iteration,
                                     its sum of -log p this step */
    int64_t *task_ns;             /* 2 ntasks (2 pipeline x ntasks once pipelined): each task's start and end
                                     in the last launch (ns, monotonic clock); task T is iteration T / ntasks's */
    int pipeline;                 /* steps SW_LIST_PIPELINE runs back to back (0: not recorded; pipeline.c) */
    int *backend_stream;          /* nstreams: the backend's id of each stream */
    int64_t step_ns[2];           /* the last step's start and end (ns, same clock) */
    sw_backend *backend;
    int32_t nstreams;             /* the streams tasks run on: a schedule's, or one per device */
    int32_t *stream;              /* ntasks: each task's stream */
    int32_t *stream_device;       /* nstreams */
    int32_t *stream_priority;     /* nstreams: higher runs first among a device's ready streams */
    int several_streams;          /* some device has more than one stream */
    int64_t arena_allocations;    /* arenas allocated (once, at creation) */
    int reuse_memory;             /* buffers share memory by lifetime (0: each has its own) */
    void **host_region;           /* ndev: each device's host region (its offloaded feature maps), or NULL */
};

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
/* A buffer's memory (host-addressable on the CPU backend). */
void *sw_runtime_buffer(const sw_runtime *rt, int32_t b);
/* Per device, the highest byte of its arena any step has written, rounded up to the
 * arena's alignment (host-memory backends: arenas start filled with a sentinel). */
sw_status sw_runtime_high_water(const sw_runtime *rt, int64_t *out);

/* csrc/cpu/ops_cpu.c: does the CPU backend have kernels for op type k? */
int sw_cpu_has_kernels(int type);

/* csrc/cpu/tasks.c: run one task of rt's graph on the CPU (views into the arenas). */
sw_status sw_cpu_run_task(const sw_task_ctx *ctx, int32_t task);

/* A view of buffer b (its box, its arena memory). */
void sw_rt_view(const sw_runtime *rt, int32_t b, sw_view *v);

#endif /* SHARDWISE_RUNTIME_H */
