/* backend_ext.c -- the core's side of backends built as their own shared object
 * (backend_ext.h): the table of what the core lends them. */
#include "backend_ext.h"

static const sw_core_api CORE_API = {
    .version = SW_EXT_ABI_VERSION,
    .runtime_size = sizeof(sw_runtime),
    .env_size = sizeof(sw_task_env),
    .set_error = sw_set_error,
    .last_error = sw_last_error,
    .rt_view = sw_rt_view,
    .backward_reads = sw_env_backward_reads,
    .rebase = sw_env_rebase,
    .box_volume = sw_box_volume,
    .box_equal = sw_box_equal,
    .optim_state_buffers = sw_optim_state_buffers,
};

const sw_core_api *sw_core_api_get(void) { return &CORE_API; }
