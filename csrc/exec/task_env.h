/* task_env.h -- what a task's code sees, on any backend: its task, its buffers as views, its
 * op; and the one description of the task kinds that do not depend on the op.
 *
 * A backend runs a task by filling an sw_task_env (sw_task_env_init) and handing it to
 * sw_task_dispatch with its table of runners (sw_task_runners): the dispatch checks the
 * task's reads and writes against the table below and calls the runner of the task's kind.
 * Forward and backward tasks go to the backend's op kernels; every other kind means the
 * same on every backend, and its buffers are these, in this order:
 *
 *   kind                reads                                   writes
 *   load_input          -                                       the worker's box of the input op
 *   copy                src (any kind; statistics: equal boxes)  dst (the boxes' intersection)
 *   accumulate          a piece of a gradient                   the gradient: the first piece
 *                                                               (sw_env_first_accumulate) copies,
 *                                                               zeroing the rest, later ones add
 *   reduce, stats_reduce  the total (= the write), parts 1..    the total += parts, in order
 *   sum_partials        the owner's partial output, the others'  y = their sum, then the fused ReLU
 *   activation_grad     [dy, y]                                  dy through the fused ReLU (zeros
 *                                                               when nothing flows back)
 *   zero_grad           -                                       zeros
 *   swap_out, swap_in   the buffer                              its copy (arena <-> host region)
 *   send                src (its box packed into the message)   -
 *   recv                -                                       dst (the message unpacked into its box)
 *   bn_stats            x                                       sums (2, C) of x and x^2
 *   bn_apply            x, stats, gamma, beta, running (2, C)    y, running (in place)
 *   bn_backward_stats   dy, x, stats of x                       sums (2, C) of dy and dy * xhat
 *   update              param, grad, state[1 or 2]               param, state
 *   join                -                                       -
 *
 * The buffers of forward and backward tasks, in the order the lowering lists them:
 *   forward, forward_partial   data regions (slots read, in slot order), parameters
 *   loss                       the logits' region
 *   backward_data              [dy] [y] the slot's region, then the other data regions,
 *                              the parameters, a batchnorm's statistics (of x, of dy)
 *   backward_weight            [dy] [y] the data regions [a batchnorm's statistics of x]
 * where dy is the output's gradient (kind grad; grad_pre under a split reduction:
 * through the activation already) when one flows back, and y the op's output
 * (sw_env_backward_reads sorts them out).
 */
#ifndef SHARDWISE_EXEC_TASK_ENV_H
#define SHARDWISE_EXEC_TASK_ENV_H

#include "../core/view.h"  /* sw_view */
#include "runtime.h"       /* sw_runtime, sw_task_ctx, sw_rt_op, sw_op_attrs */

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

/* The environment of task t of ctx's runtime. */
void sw_task_env_init(sw_task_env *e, const sw_task_ctx *ctx, int32_t t);
/* The view of buffer b. */
void sw_env_view(const sw_task_env *e, int32_t b, sw_view *v);
/* Buffer b: its description (kind, box, device, op) and its memory. */
const sw_buffer *sw_env_buffer(const sw_task_env *e, int32_t b);
/* The box the task moves or adds (rank 0: none). */
const sw_box32 *sw_env_task_box(const sw_task_env *e);
void *sw_env_ptr(const sw_task_env *e, int32_t b);
/* An accumulate task: is it the first piece into its gradient (copies rather than adds)? */
int sw_env_first_accumulate(const sw_task_env *e);
/* Shift v's coordinates along the dimensions of input `slot` that a split reduction
 * indexes by the start of this worker's part: its kernels see the part as the whole. */
void sw_env_rebase(const sw_task_env *e, int slot, sw_view *v);
/* Sort a backward task's reads (per the table above). */
void sw_env_backward_reads(const sw_task_env *e, sw_backward_reads *r);
/* Elements per channel of a batchnorm's minibatch: N * H * W of the op's output (N, C, H, W). */
int64_t sw_env_bn_count(const sw_task_env *e);
/* Channels of a batchnorm buffer's box (dimension 1). */
int64_t sw_env_channels(const sw_task_env *e, int32_t b);

/* A backend's code for one task kind (or group of kinds); NULL: the backend cannot run it. */
typedef sw_status (*sw_task_runner)(const sw_task_env *e);
typedef struct {
    const char *backend;    /* its name, for messages */
    sw_task_runner load_input, copy, accumulate, sum, sum_partials, activation_grad, zero_grad, swap;
    sw_task_runner bn_stats, bn_apply, bn_backward_stats, update;
    sw_task_runner forward;           /* forward, forward_partial, loss */
    sw_task_runner backward_data, backward_weight;
    sw_task_runner send, recv;        /* one rank of several processes (exec/messages.h) */
} sw_task_runners;

/* Run e's task with r: its reads and writes checked against the table above (SW_ERR_INTERNAL
 * naming the task when they do not match), then the runner of its kind (SW_ERR_VALUE naming
 * the backend when it has none). */
sw_status sw_task_dispatch(const sw_task_env *e, const sw_task_runners *r);

#endif /* SHARDWISE_EXEC_TASK_ENV_H */
