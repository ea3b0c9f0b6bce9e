/* optimizer.c -- what the runtime checks of a step's optimizer before any task runs.
 *
 * The update kernels (csrc/cpu/optim.c, and any later backend's) trust these checks: the
 * kind is known, its state buffers are those the lowering gave every parameter slice,
 * and its numbers are in the ranges torch.optim accepts (the Python layer checks them
 * first with friendlier messages; this is the line C code never crosses).
 */
#include <math.h>    /* isfinite */

#include "optimizer.h"

int sw_optim_state_buffers(int kind) { return kind == SW_OPTIM_SGD ? 1 : 2; }

static const char *const OPTIM_NAMES[SW_OPTIM_NKINDS] = {"SGD", "Adam", "AdamW"};

sw_status sw_optim_check(const sw_optimizer *o, int state) {
    if (o->kind < 0 || o->kind >= SW_OPTIM_NKINDS) {
        return SW_FAIL(SW_ERR_VALUE, "unknown optimizer kind %d", o->kind);
    }
    const char *name = OPTIM_NAMES[o->kind];
    if (sw_optim_state_buffers(o->kind) != state) {
        return SW_FAIL(SW_ERR_VALUE, "%s keeps %d state buffer(s) per parameter, but this runtime was built "
                       "with %d: build the trainer with this optimizer", name, sw_optim_state_buffers(o->kind), state);
    }
    double numbers[] = {o->lr, o->weight_decay, o->momentum, o->dampening, o->eps};
    for (size_t k = 0; k < sizeof numbers / sizeof numbers[0]; k++) {
        if (!isfinite(numbers[k]) || numbers[k] < 0.0) {
            return SW_FAIL(SW_ERR_VALUE, "%s: lr, weight decay, momentum, dampening and eps must be finite and >= 0",
                           name);
        }
    }
    if (o->kind != SW_OPTIM_SGD && (!(o->beta1 >= 0.0 && o->beta1 < 1.0) || !(o->beta2 >= 0.0 && o->beta2 < 1.0) ||
                                    !(o->eps > 0.0))) {
        return SW_FAIL(SW_ERR_VALUE, "%s: betas must lie in [0, 1) and eps be > 0", name);
    }
    return SW_OK;
}
