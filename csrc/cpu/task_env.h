/* task_env.h -- what a CPU task's code sees beyond any backend's task environment
 * (exec/task_env.h: its task, its buffers as views, its op): scratch from the worker's
 * workspace, the op table's CPU column, and small helpers the CPU runners share.
 *
 * tasks.c runs the task kinds that do not depend on the op (copies, sums,
 * batchnorm statistics; updates in optim.c) and hands forward and backward tasks to the
 * op's kernels, found in the op table (ops.def -> sw_cpu_ops, ops_cpu.c).
 */
#ifndef SHARDWISE_CPU_TASK_ENV_H
#define SHARDWISE_CPU_TASK_ENV_H

#include "../core/view.h"        /* sw_view_volume, sw_window_check */
#include "../exec/task_env.h"    /* sw_task_env, sw_backward_reads, sw_env_* */
#include "backend_cpu.h"         /* sw_scratch_get */
#include "kernels.h"             /* the CPU kernels */

/* forward / backward tasks of one op kind; NULL: the op has no such task */
typedef sw_status (*sw_task_fn)(const sw_task_env *e);
typedef struct {
    sw_task_fn forward, backward_data, backward_weight;
} sw_cpu_op;

extern const sw_cpu_op *const sw_cpu_ops[SW_OP_COUNT];

/* Scratch of `bytes` for this task (NULL with an error set when out of memory). */
void *sw_env_scratch(const sw_task_env *e, size_t bytes, sw_status *s);
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
/* A backward task's reads sorted out (*r) and the output's gradient (*dy); when none flows back
 * (*none = 1), zeros written into every output of the task instead. */
sw_status sw_env_grad_or_zeros(const sw_task_env *e, sw_backward_reads *r, sw_view *dy, int *none);
/* Batchnorm moments from double sums (2, C) over m elements: mean and 1/sqrt(var + eps) per channel. */
void sw_bn_moments(const double *sums, int64_t channels, int64_t m, double eps, float *mean, float *invstd);

#endif /* SHARDWISE_CPU_TASK_ENV_H */
