/* backend_ext.c -- the core's side of backends built as their own shared object
 * (backend_ext.h): the table of what the core lends them. */
#include "backend_ext.h"

static const sw_core_api CORE_API = {
    .version = SW_EXT_ABI_VERSION,
    .sizes = SW_EXT_SIZES(sw_core_api),
    .set_error = sw_set_error,
    .last_error = sw_last_error,
    .box_volume = sw_box_volume,
    .box_equal = sw_box_equal,
    .optim_state_buffers = sw_optim_state_buffers,
    .rt_view = sw_rt_view,
    .buffer = sw_runtime_buffer,
    .buffer_info = sw_runtime_buffer_info,
    .task_box = sw_runtime_task_box,
    .ntasks = sw_runtime_ntasks,
    .nops = sw_runtime_nops,
    .batch = sw_runtime_batch,
    .nstreams = sw_runtime_nstreams,
    .stream_device = sw_runtime_stream_device,
    .task = sw_runtime_task,
    .in_list = sw_runtime_in_list,
    .first_accumulate = sw_runtime_first_accumulate,
    .op = sw_runtime_op,
    .attrs = sw_runtime_attrs,
    .updates = sw_runtime_updates,
    .loss_sums = sw_runtime_loss_sums,
    .task_ns = sw_runtime_task_ns,
    .task_reads = sw_runtime_task_reads,
    .task_writes = sw_runtime_task_writes,
};

const sw_core_api *sw_core_api_get(void) { return &CORE_API; }
