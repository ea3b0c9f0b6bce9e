/* backend.c -- the CUDA backend: the runtime's backend interface (csrc/exec/runtime.h) on GPUs.
 *
 * Made once per runtime:
 *   GPUs        each logical device runs on one GPU (csrc/exec/gpu/device_map.c; several may share
 *               one), with peer access enabled between the GPUs the plan uses where possible
 *   arenas      one cudaMalloc per logical device (csrc/exec/gpu/arena_layout.c): the memory plan's
 *               buffers, then a workspace per stream (cuDNN, cuBLAS, scratch); zeroed once,
 *               so optimizer state starts at 0
 *   streams     the runtime's streams, created with cudaStreamCreateWithPriority at the
 *               first recorded command (when every stream is known, so each GPU's
 *               priorities are ranked together, csrc/exec/gpu/priorities.c), each with its cuDNN and
 *               cuBLAS handle and its workspace
 *   events      one per task another stream waits for, created when recorded on the
 *               recording stream's GPU (cudaEventDisableTiming); waits on other GPUs' events
 *               are cudaStreamWaitEvent too
 *   host memory pinned and mapped (cudaHostAlloc): the inputs' minibatches, the labels and
 *               the loss sums, which the kernels read and write directly
 * A step (launch) copies the inputs and labels into that host memory, issues the list from
 * this thread in the order the runtime recorded it (csrc/exec/gpu/commands.c: every wait after its
 * record), and synchronizes each stream once at the end: the only host synchronization,
 * which the loss needs.
 */
#define _POSIX_C_SOURCE 200809L  /* clock_gettime under -std=c11 */
#include <stdlib.h>  /* calloc, free, getenv, realloc */
#include <string.h>  /* memcpy, memset */
#include <time.h>    /* clock_gettime: the host clock task times are placed on */

#include "cuda_backend.h"

/* ------------------------------------------------------------------ GPUs */
/* The number of GPUs, or an error naming what is missing: a driver, a GPU. */
static sw_status count_gpus(int *n) {
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && *n == 0)) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return SW_FAIL(SW_ERR_VALUE, "no CUDA GPU is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                       vis ? vis : "", vis ? ")" : "");
    }
    if (e == cudaErrorInsufficientDriver) {
        return SW_FAIL(SW_ERR_VALUE, "no NVIDIA driver (libcuda.so.1) was found, or it is older than the CUDA %d.%d "
                       "runtime this backend was built with", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    }
    return cu_check(e, "cudaGetDeviceCount");
}

/* Peer access between every two GPUs the plan uses, where the hardware allows it. */
static sw_status enable_peers(cuda_backend *be) {
    uint8_t *used = calloc((size_t)be->ngpus, 1);
    if (!used) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for peer access");
    }
    for (int d = 0; d < be->ndev; d++) {
        used[be->gpu_of[d]] = 1;
    }
    sw_status s = SW_OK;
    for (int g = 0; g < be->ngpus && s == SW_OK; g++) {
        for (int h = 0; h < be->ngpus && s == SW_OK && used[g]; h++) {
            int can = 0;
            if (g == h || !used[h]) {
                continue;
            }
            s = cu_check(cudaDeviceCanAccessPeer(&can, g, h), "cudaDeviceCanAccessPeer");
            if (s == SW_OK && can) {
                s = cu_check(cudaSetDevice(g), "cudaSetDevice");
                cudaError_t e = s == SW_OK ? cudaDeviceEnablePeerAccess(h, 0) : cudaSuccess;
                if (e == cudaErrorPeerAccessAlreadyEnabled) {
                    (void)cudaGetLastError();   /* clear it: enabled is what we want */
                    e = cudaSuccess;
                }
                s = s == SW_OK ? cu_check(e, "cudaDeviceEnablePeerAccess") : s;
                be->peer[g * be->ngpus + h] = (uint8_t)(s == SW_OK);
            }
        }
    }
    free(used);
    return s;
}

/* ------------------------------------------------------------------ arenas */
static sw_status arena_new(sw_backend *b, int device, size_t bytes, void **base) {
    cuda_backend *be = (cuda_backend *)b;
    if (device < 0 || device >= be->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "no logical device %d on a CUDA backend of %d", device, be->ndev);
    }
    /* the runtime knows its streams before it asks for arenas: one workspace for each of the
     * device's (at least streams_per_device when that option is given) */
    const sw_runtime *rt = be->base.rt;
    int streams = 0;
    for (int32_t k = 0; rt && k < sw_runtime_nstreams(rt); k++) {
        streams += sw_runtime_stream_device(rt, k) == device;
    }
    streams = streams > be->streams_per_device ? streams : be->streams_per_device;
    sw_gpu_arena *a = &be->layout[device];
    SW_TRY(sw_gpu_arena_layout((int64_t)bytes, streams, be->workspace, a));
    CU_TRY(cudaSetDevice(be->gpu_of[device]));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)a->total);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return SW_FAIL(SW_ERR_NOMEM, "logical device %d: cannot allocate its arena of %lld bytes (%lld of buffers, "
                       "%d workspaces of %lld) on GPU %d", device, (long long)a->total, (long long)a->buffers,
                       a->streams, (long long)a->workspace_bytes, be->gpu_of[device]);
    }
    CU_TRY(e);
    CU_TRY(cudaMemset(p, 0, (size_t)a->total));   /* once: optimizer state starts at zero */
    be->arena[device] = p;
    be->arena_bytes += a->total;
    *base = p;
    return SW_OK;
}

static void arena_free(sw_backend *b, int device, void *base) {
    cuda_backend *be = (cuda_backend *)b;
    if (cudaSetDevice(be->gpu_of[device]) == cudaSuccess) {
        cudaFree(base);
    }
    be->arena[device] = NULL;
}

/* ------------------------------------------------------------------ streams and recording */
static sw_status stream_new(sw_backend *b, int device, int priority, int *stream) {
    cuda_backend *be = (cuda_backend *)b;
    if (device < 0 || device >= be->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "no logical device %d on a CUDA backend of %d", device, be->ndev);
    }
    if (be->materialized) {
        return SW_FAIL(SW_ERR_INTERNAL, "a stream was asked for after recording began");
    }
    int index = 0;
    for (int k = 0; k < be->nstreams; k++) {
        index += be->streams[k].device == device;
    }
    if (!be->arena[device] || index >= be->layout[device].streams) {
        return SW_FAIL(SW_ERR_INTERNAL, "logical device %d: stream %d has no workspace in its arena", device, index);
    }
    if (be->nstreams == be->cap) {
        int cap = be->cap ? 2 * be->cap : 8;
        cu_stream *grown = realloc(be->streams, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for streams");
        }
        be->streams = grown;
        be->cap = cap;
    }
    cu_stream *st = &be->streams[be->nstreams];
    memset(st, 0, sizeof *st);
    st->device = device;
    st->gpu = be->gpu_of[device];
    st->priority = priority;
    st->index = index;
    *stream = be->nstreams++;
    return SW_OK;
}

/* The CUDA streams, their priorities ranked per GPU, handles and workspaces. */
static sw_status materialize(cuda_backend *be) {
    int n = be->nstreams;
    int *gpu = calloc((size_t)n + 1, sizeof *gpu), *prio = calloc((size_t)n + 1, sizeof *prio);
    int *out = calloc((size_t)n + 1, sizeof *out);
    sw_status s = gpu && prio && out ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for streams");
    for (int k = 0; k < n && s == SW_OK; k++) {
        gpu[k] = be->streams[k].gpu;
        prio[k] = be->streams[k].priority;
    }
    /* every GPU's range is the same on one machine of one kind; the first used GPU's is taken */
    if (s == SW_OK && n > 0) {
        s = sw_gpu_priorities(n, gpu, prio, be->least[gpu[0]], be->greatest[gpu[0]], out);
    }
    for (int k = 0; k < n && s == SW_OK; k++) {
        cu_stream *st = &be->streams[k];
        const sw_gpu_arena *a = &be->layout[st->device];
        if (!be->arena[st->device]) {
            s = SW_FAIL(SW_ERR_INTERNAL, "stream %d: its device has no arena", k);
            break;
        }
        st->cuda_priority = out[k];
        st->workspace = be->arena[st->device] + a->workspace_offset + (int64_t)st->index * a->workspace_bytes;
        st->workspace_bytes = (size_t)a->workspace_bytes;
        s = cu_check(cudaSetDevice(st->gpu), "cudaSetDevice");
        if (s == SW_OK) {
            s = cu_check(cudaStreamCreateWithPriority(&st->s, cudaStreamNonBlocking, st->cuda_priority),
                         "cudaStreamCreateWithPriority");
        }
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnCreate(&st->dnn), "cudnnCreate");
        }
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnSetStream(st->dnn, st->s), "cudnnSetStream");
        }
        if (s == SW_OK) {
            s = cu_check_blas(cublasCreate(&st->blas), "cublasCreate");
        }
        if (s == SW_OK) {
            s = cu_check_blas(cublasSetStream(st->blas, st->s), "cublasSetStream");
        }
        if (s == SW_OK) {   /* its own workspace: cuBLAS is then deterministic across streams */
            s = cu_check_blas(cublasSetWorkspace(st->blas, st->workspace, CU_BLAS_WORKSPACE), "cublasSetWorkspace");
        }
        if (s == SW_OK) {
            s = cu_check_blas(cublasSetMathMode(st->blas, be->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                              "cublasSetMathMode");
        }
    }
    free(gpu);
    free(prio);
    free(out);
    be->materialized = s == SW_OK;
    return s;
}

/* Elements of op i's whole output (an input op's minibatch). */
static int64_t op_elements(const sw_runtime *rt, int i) {
    const sw_rt_op *o = sw_runtime_op(rt, i);
    int64_t n = 1;
    for (int d = 0; d < o->out_rank; d++) {
        n *= o->shape[d];
    }
    return n;
}

/* Pinned, mapped host memory for the inputs, labels and loss sums (the runtime is built). */
static sw_status host_memory(cuda_backend *be) {
    const sw_runtime *rt = be->base.rt;
    const int nops = sw_runtime_nops(rt);
    const int32_t ntasks = sw_runtime_ntasks(rt);
    size_t bytes = 0;
    be->input = calloc((size_t)nops + 1, sizeof *be->input);
    be->slot = malloc(sizeof *be->slot * ((size_t)ntasks + 1));
    if (!be->input || !be->slot) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the CUDA backend's tables");
    }
    for (int32_t t = 0; t < ntasks; t++) {
        be->slot[t] = -1;
    }
    for (int i = 0; i < nops; i++) {
        if (sw_runtime_attrs(rt, i)->type == SW_OP_INPUT) {
            bytes += ((size_t)op_elements(rt, i) * sizeof(float) + 255) / 256 * 256;
        }
    }
    size_t labels = ((size_t)sw_runtime_batch(rt) * sizeof(int32_t) + 255) / 256 * 256;
    size_t total = bytes + labels + sizeof(double) * ((size_t)ntasks + 1);
    void *p = NULL;
    CU_TRY(cudaHostAlloc(&p, total, cudaHostAllocPortable | cudaHostAllocMapped));
    be->host = p;
    char *at = p;
    for (int i = 0; i < nops; i++) {
        if (sw_runtime_attrs(rt, i)->type == SW_OP_INPUT) {
            be->input[i] = (float *)at;
            at += ((size_t)op_elements(rt, i) * sizeof(float) + 255) / 256 * 256;
        }
    }
    be->labels = (int32_t *)at;
    be->loss = (double *)(at + labels);
    return SW_OK;
}

static sw_status push(sw_backend *b, int list, int stream, int op, int32_t id) {
    cuda_backend *be = (cuda_backend *)b;
    if (list < 0 || list >= SW_NLISTS || stream < 0 || stream >= be->nstreams) {
        return SW_FAIL(SW_ERR_INTERNAL, "CUDA backend: list %d, stream %d out of range", list, stream);
    }
    if (!be->materialized) {
        SW_TRY(materialize(be));
        SW_TRY(host_memory(be));
    }
    if (id < 0 || id >= sw_runtime_ntasks(be->base.rt)) {
        return SW_FAIL(SW_ERR_INTERNAL, "CUDA backend: task %d out of range", id);
    }
    return sw_gpu_cmds_push(&be->lists[list], op, stream, id);
}

static sw_status enqueue_task(sw_backend *b, int list, int stream, int32_t task) {
    return push(b, list, stream, SW_GPU_RUN, task);
}

static sw_status enqueue_wait(sw_backend *b, int list, int stream, int32_t event) {
    return push(b, list, stream, SW_GPU_WAIT, event);
}

/* A record makes the task's event (once for both lists), on the recording stream's GPU. */
static sw_status enqueue_record(sw_backend *b, int list, int stream, int32_t event) {
    cuda_backend *be = (cuda_backend *)b;
    SW_TRY(push(b, list, stream, SW_GPU_RECORD, event));
    if (be->slot[event] >= 0) {
        return SW_OK;
    }
    if (be->nslots == be->event_cap) {
        int32_t cap = be->event_cap ? 2 * be->event_cap : 64;
        cudaEvent_t *grown = realloc(be->events, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for events");
        }
        be->events = grown;
        be->event_cap = cap;
    }
    CU_TRY(cudaSetDevice(be->streams[stream].gpu));
    CU_TRY(cudaEventCreateWithFlags(&be->events[be->nslots], cudaEventDisableTiming));
    be->slot[event] = be->nslots++;
    return SW_OK;
}

/* ------------------------------------------------------------------ a step */
/* The list's event plan, checked once: every wait after its record (csrc/exec/gpu/commands.c). */
static sw_status check_list(cuda_backend *be, int list) {
    if (be->checked[list]) {
        return SW_OK;
    }
    int *gpu = calloc((size_t)be->nstreams + 1, sizeof *gpu);
    int32_t n = sw_runtime_ntasks(be->base.rt), nslots = 0;
    int32_t *slot = malloc(sizeof *slot * ((size_t)n + 1));
    sw_status s = gpu && slot ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory checking events");
    for (int k = 0; k < be->nstreams && s == SW_OK; k++) {
        gpu[k] = be->streams[k].gpu;
    }
    for (int32_t t = 0; t < n && s == SW_OK; t++) {
        slot[t] = -1;
    }
    sw_gpu_event_stats stats;
    if (s == SW_OK) {
        s = sw_gpu_event_plan(&be->lists[list], n, gpu, be->nstreams, slot, &nslots, &stats);
    }
    free(gpu);
    free(slot);
    be->checked[list] = s == SW_OK;
    return s;
}

/* Copy the step's inputs and labels into the mapped host memory the kernels read. */
static void stage_inputs(cuda_backend *be, const sw_step_args *args) {
    const sw_runtime *rt = be->base.rt;
    for (int i = 0; i < sw_runtime_nops(rt); i++) {
        if (be->input[i] && args->inputs && args->inputs[i]) {
            memcpy(be->input[i], args->inputs[i], sizeof(float) * (size_t)op_elements(rt, i));
        }
    }
    if (args->labels) {
        memcpy(be->labels, args->labels, sizeof(int32_t) * (size_t)sw_runtime_batch(rt));
    }
    memset(be->loss, 0, sizeof(double) * (size_t)sw_runtime_ntasks(rt));
}

/* ------------------------------------------------------------------ task timing */
static int64_t host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void free_timing(cuda_backend *be) {
    for (int32_t t = 0; t < be->ntimed; t++) {
        if (be->task_start && be->task_start[t]) {
            cudaEventDestroy(be->task_start[t]);
        }
        if (be->task_end && be->task_end[t]) {
            cudaEventDestroy(be->task_end[t]);
        }
    }
    for (int g = 0; g < be->ngpus && be->gpu_zero; g++) {
        if (be->gpu_zero[g]) {
            cudaEventDestroy(be->gpu_zero[g]);
        }
    }
    free(be->task_start);
    free(be->task_end);
    free(be->gpu_zero);
    be->task_start = be->task_end = be->gpu_zero = NULL;
    be->ntimed = 0;
    be->timing = 0;
}

/* Timing events: each task's on its stream's GPU (an event belongs to the device current when it
 * is created), each GPU's zero on that GPU. */
static sw_status time_tasks(sw_backend *b, int on) {
    cuda_backend *be = (cuda_backend *)b;
    if (!on || be->timing) {
        if (!on) {
            free_timing(be);
        }
        return SW_OK;
    }
    const sw_runtime *rt = be->base.rt;
    const int32_t n = sw_runtime_ntasks(rt);
    be->task_start = calloc((size_t)n + 1, sizeof *be->task_start);
    be->task_end = calloc((size_t)n + 1, sizeof *be->task_end);
    be->gpu_zero = calloc((size_t)be->ngpus + 1, sizeof *be->gpu_zero);
    if (!be->task_start || !be->task_end || !be->gpu_zero) {
        free_timing(be);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for task timing");
    }
    be->ntimed = n;
    sw_status s = SW_OK;
    for (int g = 0; g < be->ngpus && s == SW_OK; g++) {
        s = cu_check(cudaSetDevice(g), "cudaSetDevice");
        s = s == SW_OK ? cu_check(cudaEventCreate(&be->gpu_zero[g]), "cudaEventCreate (task timing)") : s;
    }
    for (int32_t t = 0; t < n && s == SW_OK; t++) {
        s = cu_check(cudaSetDevice(be->gpu_of[sw_runtime_task(rt, t)->device]), "cudaSetDevice");
        s = s == SW_OK ? cu_check(cudaEventCreate(&be->task_start[t]), "cudaEventCreate (task timing)") : s;
        s = s == SW_OK ? cu_check(cudaEventCreate(&be->task_end[t]), "cudaEventCreate (task timing)") : s;
    }
    if (s != SW_OK) {
        free_timing(be);
        return s;
    }
    be->timing = 1;
    return SW_OK;
}

/* After the step's synchronization: each task run in list l, its start and end as ns from its
 * GPU's zero event, placed at the host clock's reading when the launch began (zero_ns). */
static sw_status read_task_times(cuda_backend *be, const sw_gpu_cmds *l, int64_t zero_ns) {
    int64_t *ns = sw_runtime_task_ns(be->base.rt);
    for (int32_t i = 0; i < l->n; i++) {
        const sw_gpu_cmd *c = &l->cmd[i];
        if (c->op != SW_GPU_RUN || c->id >= be->ntimed) {
            continue;
        }
        const int gpu = be->streams[c->stream].gpu;
        float start_ms = 0.0f, end_ms = 0.0f;
        CU_TRY(cudaEventElapsedTime(&start_ms, be->gpu_zero[gpu], be->task_start[c->id]));
        CU_TRY(cudaEventElapsedTime(&end_ms, be->gpu_zero[gpu], be->task_end[c->id]));
        ns[2 * (int64_t)c->id] = zero_ns + (int64_t)((double)start_ms * 1e6);
        ns[2 * (int64_t)c->id + 1] = zero_ns + (int64_t)((double)end_ms * 1e6);
    }
    return SW_OK;
}

static sw_status launch(sw_backend *b, int list, const sw_step_args *args) {
    cuda_backend *be = (cuda_backend *)b;
    const sw_runtime *rt = be->base.rt;
    if (!be->materialized) {
        return SW_OK;   /* nothing was recorded: an empty graph */
    }
    SW_TRY(check_list(be, list));
    stage_inputs(be, args);
    sw_status s = SW_OK;
    int current = -1;
    const sw_gpu_cmds *l = &be->lists[list];
    const int64_t zero_ns = be->timing ? host_ns() : 0;
    for (int g = 0; g < be->ngpus && be->timing && s == SW_OK; g++) {   /* every stream is idle here */
        s = cu_check(cudaSetDevice(g), "cudaSetDevice");
        s = s == SW_OK ? cu_check(cudaEventRecord(be->gpu_zero[g], 0), "cudaEventRecord (task timing)") : s;
    }
    for (int32_t i = 0; i < l->n && s == SW_OK; i++) {
        const sw_gpu_cmd *c = &l->cmd[i];
        cu_stream *st = &be->streams[c->stream];
        if (st->gpu != current) {
            s = cu_check(cudaSetDevice(st->gpu), "cudaSetDevice");
            current = st->gpu;
        }
        if (s != SW_OK) {
            break;
        }
        if (c->op == SW_GPU_RUN) {
            int timed = be->timing && list != SW_LIST_PIPELINE && c->id < be->ntimed;
            if (timed) {
                s = cu_check(cudaEventRecord(be->task_start[c->id], st->s), "cudaEventRecord (task timing)");
            }
            s = s == SW_OK ? cu_run_task(be, st, c->id, args) : s;
            if (timed && s == SW_OK) {
                s = cu_check(cudaEventRecord(be->task_end[c->id], st->s), "cudaEventRecord (task timing)");
            }
        } else if (c->op == SW_GPU_RECORD) {
            s = cu_check(cudaEventRecord(be->events[be->slot[c->id]], st->s), "cudaEventRecord");
        } else {
            s = cu_check(cudaStreamWaitEvent(st->s, be->events[be->slot[c->id]], 0), "cudaStreamWaitEvent");
        }
    }
    /* the step's one synchronization (also after a failure: nothing may still run on return) */
    for (int k = 0; k < be->nstreams; k++) {
        cudaError_t e = cudaSetDevice(be->streams[k].gpu);
        e = e == cudaSuccess ? cudaStreamSynchronize(be->streams[k].s) : e;
        if (s == SW_OK) {
            s = cu_check(e, "a kernel of this step (cudaStreamSynchronize)");
        }
    }
    if (s == SW_OK && be->timing && list != SW_LIST_PIPELINE) {
        s = read_task_times(be, l, zero_ns);
    }
    double *loss_sums = sw_runtime_loss_sums(rt);
    for (int32_t t = 0; t < sw_runtime_ntasks(rt) && s == SW_OK; t++) {
        if (sw_runtime_task(rt, t)->kind == SW_TASK_LOSS && sw_runtime_in_list(rt, list, t)) {
            loss_sums[t] = be->loss[t];
        }
    }
    return s;
}

/* ------------------------------------------------------------------ host copies */
static sw_status to_host(sw_backend *b, int device, void *host, const void *dev, size_t bytes) {
    cuda_backend *be = (cuda_backend *)b;
    CU_TRY(cudaSetDevice(be->gpu_of[device]));
    return cu_check(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "copy to the host");
}

static sw_status from_host(sw_backend *b, int device, void *dev, const void *host, size_t bytes) {
    cuda_backend *be = (cuda_backend *)b;
    CU_TRY(cudaSetDevice(be->gpu_of[device]));
    return cu_check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "copy from the host");
}

static void workspace_stats(sw_backend *b, int64_t *bytes, int64_t *grows) {
    (void)b;
    *bytes = *grows = 0;   /* workspaces live in the arenas: they never grow */
}

static void destroy(sw_backend *b) {
    cuda_backend *be = (cuda_backend *)b;
    for (int k = 0; k < be->nstreams; k++) {
        cu_stream *st = &be->streams[k];
        if (cudaSetDevice(st->gpu) != cudaSuccess) {
            continue;
        }
        if (st->blas) {
            cublasDestroy(st->blas);
        }
        if (st->dnn) {
            cudnnDestroy(st->dnn);
        }
        if (st->s) {
            cudaStreamDestroy(st->s);
        }
    }
    for (int32_t k = 0; k < be->nslots; k++) {
        cudaEventDestroy(be->events[k]);
    }
    free_timing(be);
    for (int l = 0; l < SW_NLISTS; l++) {
        sw_gpu_cmds_free(&be->lists[l]);
    }
    if (be->host) {
        cudaFreeHost(be->host);
    }
    cu_algos_free(be);
    free(be->streams);
    free(be->events);
    free(be->slot);
    free(be->input);
    free(be->gpu_of);
    free(be->peer);
    free(be->least);
    free(be->greatest);
    free(be->layout);
    free(be->arena);
    free(be);
}

static const sw_backend_i CUDA_BACKEND = {
    .name = "cuda",
    .arena_new = arena_new,
    .arena_free = arena_free,
    .stream_new = stream_new,
    .enqueue_task = enqueue_task,
    .enqueue_wait = enqueue_wait,
    .enqueue_record = enqueue_record,
    .launch = launch,
    .to_host = to_host,
    .from_host = from_host,
    .workspace_stats = workspace_stats,
    .wait_times = NULL,
    .destroy = destroy,
    .supports_op = cu_supports_op,
    .time_tasks = time_tasks,
};

const sw_backend_i *cu_backend_iface(void) { return &CUDA_BACKEND; }

sw_status cu_backend_new(const sw_core_api *core, const sw_ext_options *opt, sw_backend **out) {
    *out = NULL;
    SW_TRY(cu_core_link(core));
    if (opt->ndev < 1 || opt->workspace_bytes < 0 || opt->streams_per_device < 0) {
        return SW_FAIL(SW_ERR_VALUE, "a CUDA backend needs >= 1 logical device and workspaces >= 0");
    }
    int ngpus = 0;
    SW_TRY(count_gpus(&ngpus));
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a CUDA backend");
    }
    be->base.i = &CUDA_BACKEND;
    be->core = core;
    be->ndev = opt->ndev;
    be->ngpus = ngpus;
    be->workspace = opt->workspace_bytes > 0 ? opt->workspace_bytes : CU_DEFAULT_WORKSPACE;
    if (be->workspace < (int64_t)CU_BLAS_WORKSPACE * 2) {
        be->workspace = (int64_t)CU_BLAS_WORKSPACE * 2;   /* cuBLAS's part and at least as much scratch */
    }
    be->streams_per_device = opt->streams_per_device > 0 ? opt->streams_per_device : 1;
    const char *tf32 = getenv("SHARDWISE_CUDA_TF32");
    be->tf32 = tf32 && tf32[0] == '1';
    be->gpu_of = malloc(sizeof *be->gpu_of * (size_t)opt->ndev);
    be->peer = calloc((size_t)ngpus * (size_t)ngpus, 1);
    be->least = calloc((size_t)ngpus, sizeof *be->least);
    be->greatest = calloc((size_t)ngpus, sizeof *be->greatest);
    be->layout = calloc((size_t)opt->ndev, sizeof *be->layout);
    be->arena = calloc((size_t)opt->ndev, sizeof *be->arena);
    sw_status s = be->gpu_of && be->peer && be->least && be->greatest && be->layout && be->arena
                      ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for a CUDA backend");
    if (s == SW_OK && opt->gpu) {
        s = sw_gpu_map_check(opt->ndev, ngpus, opt->gpu);
        if (s == SW_OK) {
            memcpy(be->gpu_of, opt->gpu, sizeof *be->gpu_of * (size_t)opt->ndev);
        }
    } else if (s == SW_OK) {
        s = sw_gpu_map(opt->ndev, ngpus, be->gpu_of);
    }
    for (int g = 0; g < ngpus && s == SW_OK; g++) {
        s = cu_check(cudaSetDevice(g), "cudaSetDevice");
        if (s == SW_OK) {
            s = cu_check(cudaDeviceGetStreamPriorityRange(&be->least[g], &be->greatest[g]),
                         "cudaDeviceGetStreamPriorityRange");
        }
    }
    if (s == SW_OK) {
        s = enable_peers(be);
    }
    if (s != SW_OK) {
        destroy(&be->base);
        return s;
    }
    *out = &be->base;
    return SW_OK;
}
