/* core_link.c -- the core's functions this module calls, lent by the core (sw_core_api).
 *
 * The backend's code is written against the core's own names (SW_FAIL -> sw_set_error,
 * sw_env_backward_reads, ...) as the CPU backend's is; here they forward to the core that
 * made the backend, so that a failure's message lands where Python reads it
 * (shardwise._core's sw_last_error) and the task helpers are the CPU backend's own.  Until a
 * backend is made (the module's info functions) messages stay in this module.  Symbols are
 * hidden (-fvisibility=hidden): the core's of the same names are never confused with these.
 */
#include <stdarg.h>  /* va_list */
#include <stdio.h>   /* vsnprintf */

#include "cuda_backend.h"

static const sw_core_api *core_;
static _Thread_local char local_error[1024];

sw_status cu_core_link(const sw_core_api *core) {
    if (!core || core->version != SW_EXT_ABI_VERSION || core->runtime_size != sizeof(sw_runtime) ||
        core->env_size != sizeof(sw_task_env)) {
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

void sw_rt_view(const sw_runtime *rt, int32_t b, sw_view *v) { core_->rt_view(rt, b, v); }

void sw_env_view(const sw_task_env *e, int32_t b, sw_view *v) { core_->rt_view(e->rt, b, v); }

void sw_env_backward_reads(const sw_task_env *e, sw_backward_reads *r) { core_->backward_reads(e, r); }

void sw_env_rebase(const sw_task_env *e, int slot, sw_view *v) { core_->rebase(e, slot, v); }

int64_t sw_box_volume(const sw_box *b) { return core_->box_volume(b); }

int sw_box_equal(const sw_box *a, const sw_box *b) { return core_->box_equal(a, b); }

int sw_optim_state_buffers(int kind) { return core_->optim_state_buffers(kind); }

void *sw_runtime_buffer(const sw_runtime *rt, int32_t b) { return rt->ptr[b]; }

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
