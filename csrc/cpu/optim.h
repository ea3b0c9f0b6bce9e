/* optim.h -- the optimizers of a training step and their CPU update kernel (optim.c).
 *
 * PyTorch's semantics: SGD as torch.optim.SGD (momentum, dampening, Nesterov, L2 weight
 * decay); Adam as torch.optim.Adam (L2 weight decay added to the gradient); AdamW as
 * torch.optim.AdamW (decoupled decay).  Every field is a runtime value of the step: a
 * learning-rate schedule changes lr per step without touching the task graph.  Adam and
 * AdamW need a runtime lowered with two state buffers per parameter slice
 * (sw_problem.optimizer_state = 2), SGD with one.
 */
#ifndef SHARDWISE_CPU_OPTIM_H
#define SHARDWISE_CPU_OPTIM_H

#include <stdint.h>  /* int64_t */

typedef enum { SW_OPTIM_SGD = 0, SW_OPTIM_ADAM = 1, SW_OPTIM_ADAMW = 2, SW_OPTIM_NKINDS } sw_optim_kind;

typedef struct {
    int kind;                          /* sw_optim_kind */
    /* doubles, as PyTorch's Python floats: the kernel rounds them where torch's kernels do */
    double lr, weight_decay;
    double momentum, dampening;        /* SGD */
    int nesterov;                      /* SGD */
    double beta1, beta2, eps;          /* Adam, AdamW */
} sw_optimizer;

/* One update of a parameter slice of n elements, in place: p (n), its gradient grad (n),
 * the state s0 (n) and s1 (n; Adam only, NULL for SGD):
 *   SGD    s0 = momentum buffer;      t > 1: the buffer holds history (else it is set to g)
 *   Adam   s0 = exp_avg, s1 = exp_avg_sq, t = the step (1 on the first update)
 * o is trusted (sw_optim_check). */
void sw_optim_update(const sw_optimizer *o, int64_t t, float *p, const float *grad, float *s0, float *s1,
                     int64_t n);

#endif /* SHARDWISE_CPU_OPTIM_H */
