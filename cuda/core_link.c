/* core_link.c -- the core's functions this module calls, lent by the core (sw_core_api).
 *
 * The backend's code is written against the core's own names (SW_FAIL -> sw_set_error, the
 * runtime's accessors sw_runtime_*, ...) as the CPU backend's is; here they forward to the
 * core that made the backend, so that a failure's message lands where Python reads it
 * (shardwise._core's sw_last_error) and the runtime is asked by the core that owns it.  The
 * task environment and dispatch (csrc/exec/task_env.c) are compiled into this module and call
 * these.  Until a
 * backend is made (the module's info functions) messages stay in this module.  Symbols are
 * hidden (-fvisibility=hidden): the core's of the same names are never confused with these.
 */
#include <stdarg.h>  /* va_list */
#include <stdio.h>   /* vsnprintf */

#include "cuda_backend.h"

static const sw_core_api *core_;
static _Thread_local char local_error[1024];

sw_status cu_core_link(const sw_core_api *core) {
    if (!core || core->version != SW_EXT_ABI_VERSION || !sw_ext_sizes_equal(core->sizes, SW_EXT_SIZES(sw_core_api))) {
        return SW_FAIL(SW_ERR_VALUE, "shardwise._cuda was built from other sources than shardwise._core: rebuild "
                       "the package");
    }
    core_ = core;
    return SW_OK;
}

sw_status sw_set_error(sw_status status, const char *file, int line, const char *fmt, ...) {
    char msg[768];   /* leaves room in local_error for " [file:line]" */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (core_) {
        return core_->set_error(status, file, line, "%s", msg);
    }
    snprintf(local_error, sizeof local_error, "%s [%s:%d]", msg, file, line);
    return status;
}

const char *sw_last_error(void) { return core_ ? core_->last_error() : local_error; }

int64_t sw_box_volume(const sw_box *b) { return core_->box_volume(b); }

int sw_box_equal(const sw_box *a, const sw_box *b) { return core_->box_equal(a, b); }

int sw_optim_state_buffers(int kind) { return core_->optim_state_buffers(kind); }

/* ------------------------------------------------------------------ the runtime */
void sw_rt_view(const sw_runtime *rt, int32_t b, sw_view *v) { core_->rt_view(rt, b, v); }
void *sw_runtime_buffer(const sw_runtime *rt, int32_t b) { return core_->buffer(rt, b); }
const sw_buffer *sw_runtime_buffer_info(const sw_runtime *rt, int32_t b) { return core_->buffer_info(rt, b); }
const sw_box32 *sw_runtime_task_box(const sw_runtime *rt, int32_t t) { return core_->task_box(rt, t); }
int32_t sw_runtime_ntasks(const sw_runtime *rt) { return core_->ntasks(rt); }
int sw_runtime_nops(const sw_runtime *rt) { return core_->nops(rt); }
int64_t sw_runtime_batch(const sw_runtime *rt) { return core_->batch(rt); }
int32_t sw_runtime_nstreams(const sw_runtime *rt) { return core_->nstreams(rt); }
int32_t sw_runtime_stream_device(const sw_runtime *rt, int32_t stream) { return core_->stream_device(rt, stream); }
const sw_task *sw_runtime_task(const sw_runtime *rt, int32_t t) { return core_->task(rt, t); }
int sw_runtime_in_list(const sw_runtime *rt, int list, int32_t t) { return core_->in_list(rt, list, t); }
int sw_runtime_first_accumulate(const sw_runtime *rt, int32_t t) { return core_->first_accumulate(rt, t); }
const sw_rt_op *sw_runtime_op(const sw_runtime *rt, int op) { return core_->op(rt, op); }
const sw_op_attrs *sw_runtime_attrs(const sw_runtime *rt, int op) { return core_->attrs(rt, op); }
int64_t *sw_runtime_updates(const sw_runtime *rt, int32_t b) { return core_->updates(rt, b); }
double *sw_runtime_loss_sums(const sw_runtime *rt) { return core_->loss_sums(rt); }
int64_t *sw_runtime_task_ns(const sw_runtime *rt) { return core_->task_ns(rt); }
int sw_runtime_task_reads(const sw_runtime *rt, int32_t t, const int32_t **ids) { return core_->task_reads(rt, t, ids); }
int sw_runtime_task_writes(const sw_runtime *rt, int32_t t, const int32_t **ids) {
    return core_->task_writes(rt, t, ids);
}

/* ------------------------------------------------------------------ errors of CUDA's libraries */
sw_status cu_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) {
        return SW_OK;
    }
    sw_status s = e == cudaErrorMemoryAllocation ? SW_ERR_NOMEM : SW_ERR_INTERNAL;
    return SW_FAIL(s, "CUDA: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

sw_status cu_check_dnn(cudnnStatus_t e, const char *what) {
    if (e == CUDNN_STATUS_SUCCESS) {
        return SW_OK;
    }
    return SW_FAIL(SW_ERR_INTERNAL, "cuDNN: %s: %s", what, cudnnGetErrorString(e));
}

sw_status cu_check_blas(cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) {
        return SW_OK;
    }
    return SW_FAIL(SW_ERR_INTERNAL, "cuBLAS: %s: %s", what, cublasGetStatusString(e));
}
