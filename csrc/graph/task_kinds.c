/* task_kinds.c -- the name of every task kind (sw_task_kind, internal.h).
 *
 * One table for the core (Python's _core.TASK_KINDS, the runtime's messages) and for
 * shardwise._cuda, which compiles this file with the task dispatch (csrc/exec/task_env.c).
 */
#include "internal.h"

const char *const sw_task_kind_names[SW_TASK_NKINDS] = {
    [SW_TASK_LOAD_INPUT] = "load_input", [SW_TASK_COPY] = "copy", [SW_TASK_JOIN] = "join",
    [SW_TASK_FORWARD] = "forward", [SW_TASK_LOSS] = "loss", [SW_TASK_BN_STATS] = "bn_stats",
    [SW_TASK_STATS_REDUCE] = "stats_reduce", [SW_TASK_BN_APPLY] = "bn_apply",
    [SW_TASK_BN_BACKWARD_STATS] = "bn_backward_stats", [SW_TASK_BACKWARD_DATA] = "backward_data",
    [SW_TASK_ACCUMULATE] = "accumulate", [SW_TASK_BACKWARD_WEIGHT] = "backward_weight", [SW_TASK_REDUCE] = "reduce",
    [SW_TASK_UPDATE] = "update", [SW_TASK_FORWARD_PARTIAL] = "forward_partial",
    [SW_TASK_SUM_PARTIALS] = "sum_partials", [SW_TASK_ACTIVATION_GRAD] = "activation_grad",
    [SW_TASK_ZERO_GRAD] = "zero_grad", [SW_TASK_SWAP_OUT] = "swap_out", [SW_TASK_SWAP_IN] = "swap_in",
    [SW_TASK_SEND] = "send", [SW_TASK_RECV] = "recv", [SW_TASK_RECOMPUTE] = "recompute",
    [SW_TASK_RING] = "ring",
};
/* every kind named: a kind added to the enum without a name fails here, not at run time */
_Static_assert(SW_TASK_RING + 1 == SW_TASK_NKINDS, "name every task kind in sw_task_kind_names");
