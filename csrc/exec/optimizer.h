/* optimizer.h -- the optimizers of a training step, as every backend's update tasks read them.
 *
 * PyTorch's semantics: SGD as torch.optim.SGD (momentum, dampening, Nesterov, L2 weight
 * decay); Adam as torch.optim.Adam (L2 weight decay added to the gradient); AdamW as
 * torch.optim.AdamW (decoupled decay).  Every field is a runtime value of the step: a
 * learning-rate schedule changes lr per step without touching the task graph.  Adam and
 * AdamW need a runtime lowered with two state buffers per parameter slice
 * (sw_problem.optimizer_state = 2), SGD with one.  The description lives in exec/ because
 * the runtime checks it (optimizer.c) and each backend's update kernel reads it (the CPU's
 * csrc/cpu/optim.c, the CUDA backend's cuda/tasks.c).
 */
#ifndef SHARDWISE_EXEC_OPTIMIZER_H
#define SHARDWISE_EXEC_OPTIMIZER_H

#include "../internal.h"  /* sw_status */

typedef enum { SW_OPTIM_SGD = 0, SW_OPTIM_ADAM = 1, SW_OPTIM_ADAMW = 2, SW_OPTIM_NKINDS } sw_optim_kind;

typedef struct {
    int kind;                          /* sw_optim_kind */
    /* doubles, as PyTorch's Python floats: the kernel rounds them where torch's kernels do */
    double lr, weight_decay;
    double momentum, dampening;        /* SGD */
    int nesterov;                      /* SGD */
    double beta1, beta2, eps;          /* Adam, AdamW */
} sw_optimizer;

/* optimizer.c: state buffers each kind's update reads after (param, grad): 1 for
 * SGD, 2 for Adam and AdamW. */
int sw_optim_state_buffers(int kind);
/* SW_ERR_VALUE naming the problem when `o` cannot run on a runtime with `state` buffers per
 * parameter slice, or its numbers are out of range (the Python layer checks them first). */
sw_status sw_optim_check(const sw_optimizer *o, int state);

#endif /* SHARDWISE_EXEC_OPTIMIZER_H */
