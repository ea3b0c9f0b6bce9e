/* optim.h -- the CPU update kernel of the optimizers (optim.c); the optimizers themselves are
 * described in exec/optimizer.h. */
#ifndef SHARDWISE_CPU_OPTIM_H
#define SHARDWISE_CPU_OPTIM_H

#include <stdint.h>  /* int64_t */

#include "../exec/optimizer.h"  /* sw_optimizer */

/* One update of a parameter slice of n elements, in place: p (n), its gradient grad (n),
 * the state s0 (n) and s1 (n; Adam only, NULL for SGD):
 *   SGD    s0 = momentum buffer;      t > 1: the buffer holds history (else it is set to g)
 *   Adam   s0 = exp_avg, s1 = exp_avg_sq, t = the step (1 on the first update)
 * o is trusted (sw_optim_check). */
void sw_optim_update(const sw_optimizer *o, int64_t t, float *p, const float *grad, float *s0, float *s1,
                     int64_t n);

#endif /* SHARDWISE_CPU_OPTIM_H */
