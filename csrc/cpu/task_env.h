/* task_env.h -- what a CPU task's code sees: its task, its buffers as views, its op.
 *
 * tasks.c runs the task kinds that do not depend on the op (copies, sums,
 * batchnorm statistics; updates in optim.c) and hands forward and backward tasks to the
 * op's kernels, found in the op table (ops.def -> sw_cpu_ops, ops_cpu.c).
 *
 * The buffers of a task, in the order the lowering lists them:
 *   forward, forward_partial   data regions (slots read, in slot order), parameters
 *   loss                       the logits' region
 *   backward_data              [dy] [y] the slot's region, then the other data regions,
 *                              the parameters, a batchnorm's statistics (of x, of dy)
 *   backward_weight            [dy] [y] the data regions [a batchnorm's statistics of x]
 * where dy is the output's gradient (kind grad; grad_pre under a split reduction:
 * through the activation already) when one flows back, and y the op's output.
 */
#ifndef SHARDWISE_CPU_TASK_ENV_H
#define SHARDWISE_CPU_TASK_ENV_H

#include "../exec/runtime.h"
#include "view.h"  /* sw_view_volume, sw_window_check */

typedef struct {
    const sw_task_ctx *ctx;
    const sw_runtime *rt;
    int32_t id;
    const sw_task *task;
    const int32_t *reads, *writes;
    int nreads, nwrites;
    int op_index;
    const sw_rt_op *op;
    const sw_op_attrs *attrs;
} sw_task_env;

/* A backward task's reads, sorted out. */
typedef struct {
    int32_t dy;             /* the output's gradient, or -1 when none flows back */
    int dy_pre;             /* dy is already through the activation (partition-n-reduce) */
    int32_t y;              /* the op's output, or -1 */
    int32_t region[64];     /* data regions by slot (-1: not read) */
    int32_t params[64];     /* parameters in weight-slot order */
    int nparams;
    int32_t stats_x, stats_dy;   /* batchnorm: statistics of x and of dy, or -1 */
} sw_backward_reads;

/* forward / backward tasks of one op kind; NULL: the op has no such task */
typedef sw_status (*sw_task_fn)(const sw_task_env *e);
typedef struct {
    sw_task_fn forward, backward_data, backward_weight;
} sw_cpu_op;

extern const sw_cpu_op *const sw_cpu_ops[SW_OP_COUNT];

/* The view of buffer b. */
void sw_env_view(const sw_task_env *e, int32_t b, sw_view *v);
/* Shift v's coordinates along the dimensions of input `slot` that a split reduction
 * indexes by the start of this worker's part: its kernels see the part as the whole. */
void sw_env_rebase(const sw_task_env *e, int slot, sw_view *v);
/* Scratch of `bytes` for this task (NULL with an error set when out of memory). */
void *sw_env_scratch(const sw_task_env *e, size_t bytes, sw_status *s);
/* Sort a backward task's reads (per the table above). */
void sw_env_backward_reads(const sw_task_env *e, sw_backward_reads *r);
/* dy through the fused ReLU of a conv2d / linear (into scratch), or dy itself. */
sw_status sw_env_dz(const sw_task_env *e, const sw_backward_reads *r, sw_view *dz);
/* optim.c: an update task (SGD, Adam or AdamW per the step's optimizer). */
sw_status sw_cpu_update(const sw_task_env *e);
/* v with its leading dimensions (all but the last `keep`) flattened into local rows from 0:
 * (N, T, D) -> (N*T, D) for keep 1, (N, T) -> (N*T) for keep 0.  When ref is given its
 * leading box must be v's (SW_ERR_INTERNAL otherwise): views of one task then agree on rows. */
sw_status sw_view_rows(const sw_view *v, int keep, const sw_view *ref, sw_view *out);
/* Fill every float of a view with zeros. */
void sw_view_zero(sw_view *v);
/* Batchnorm moments from double sums (2, C) over m elements: mean and 1/sqrt(var + eps) per channel. */
void sw_bn_moments(const double *sums, int64_t channels, int64_t m, float *mean, float *invstd);

#endif /* SHARDWISE_CPU_TASK_ENV_H */
