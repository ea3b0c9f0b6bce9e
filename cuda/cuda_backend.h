/* cuda_backend.h -- the CUDA backend's insides: GPUs, arenas, streams, events, and what a
 * task's code sees.  One file per concern:
 *
 *   backend.c    the backend interface (csrc/exec/runtime.h): GPUs and peer access,
 *                one cudaMalloc per logical device's arena, streams created with
 *                priorities, one event per recorded task, a step issued from one thread in
 *                the recorded order and synchronized once at its end (for the loss)
 *   core_link.c  the core's functions this module borrows (errors, task helpers)
 *   views.c      views of buffers on a GPU: element maps for the kernels, a stream's
 *                scratch, box copies within a GPU, between GPUs (peer or staged)
 *   tasks.c      every task kind that does not depend on the op: copies, sums, inputs,
 *                batch-norm statistics, updates; forward and backward tasks go to ops.c
 *   ops.c        forward and backward of each op kind (the op table's CUDA column)
 *   conv.c       convolutions with cuDNN (forward, backward data, backward filter),
 *                deterministic algorithms chosen once per shape and cached
 *   pool.c       pooling with cuDNN
 *   blas.c       linear and matmul with cuBLAS
 *   module.c     the Python module shardwise._cuda: info, and the backend's constructor
 *   comm_nccl.c  sw_comm_i (csrc/exec/comm.h) over NCCL, bootstrapped over MPI's (comm_nccl.h)
 *   nccl_module.c  its Python type NcclComm, and DeviceBuffer
 *   kernels/     our own kernels (.cu) behind C launchers (kernels/kernels.h)
 *   csrc/exec/gpu/  the host-side planning, pure C (gpu_plan.h), built into the core
 *
 * Shapes: views are boxes of global tensors stored row-major (csrc/core/view.h): conv
 * x (N, Ci, H, W), w (Co, Ci, kh, kw); linear x (N, I), w (O, I); matmul a (.., M, K) b (.., K, N).
 */
#ifndef SHARDWISE_CUDA_BACKEND_H
#define SHARDWISE_CUDA_BACKEND_H

#include <cublas_v2.h>         /* cublasHandle_t */
#include <cuda_runtime_api.h>  /* cudaStream_t, cudaEvent_t, cudaError_t */
#include <cudnn.h>             /* cudnnHandle_t */

#include "exec/backend_ext.h"  /* sw_backend, sw_core_api, sw_task_env */
#include "exec/gpu/gpu_plan.h"  /* sw_gpu_* */
#include "kernels/kernels.h"   /* swk_* */

/* Default workspace per stream: cuDNN's deterministic algorithms mostly need a few MiB; the
 * rest holds padded window inputs (a chunk of samples at a time) and small scratch. */
#define CU_DEFAULT_WORKSPACE ((int64_t)64 << 20)
#define CU_BLAS_WORKSPACE ((size_t)4 << 20)   /* the first part of each workspace: cuBLAS's own */

typedef struct {
    int device, gpu;          /* logical device, and the GPU it runs on */
    int priority;             /* the runtime's (higher first) */
    int cuda_priority;        /* on the GPU's range (csrc/exec/gpu/priorities.c) */
    int index;                /* among its device's streams: which workspace */
    cudaStream_t s;
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    char *workspace;          /* in its device's arena; the first CU_BLAS_WORKSPACE bytes are cuBLAS's */
    size_t workspace_bytes;
    size_t used;              /* scratch handed out to the running task (reset per task) */
} cu_stream;

typedef struct {              /* a cached convolution algorithm (conv.c) */
    int pass;                 /* 0 forward, 1 backward data, 2 backward filter */
    int gpu;
    int dims[18];             /* x, w, y shapes, padding, stride */
    int algo;
    size_t bytes;
    int fma;                  /* chosen under plain FMA math (TF32 on, but no tensor-op candidate fitted) */
} cu_algo;

typedef struct cuda_backend {
    sw_backend base;
    const sw_core_api *core;
    int ndev, ngpus;
    int *gpu_of;              /* ndev */
    uint8_t *peer;            /* ngpus x ngpus: row g can read column h's memory */
    int *least, *greatest;    /* per GPU: CUDA's priority range */
    int tf32;                 /* SHARDWISE_CUDA_TF32=1: tensor-core float32 (not bitwise to the CPU) */
    int64_t workspace;
    int streams_per_device;   /* workspaces at least reserved per logical device (the runtime's streams decide) */
    sw_gpu_arena *layout;     /* ndev */
    char **arena;             /* ndev: each arena's base (device memory) */
    cu_stream *streams;
    int nstreams, cap;
    int materialized;         /* CUDA streams and handles made (at the first recorded command) */
    sw_gpu_cmds lists[SW_NLISTS];
    int checked[SW_NLISTS];   /* the list's event plan was checked (at its first launch) */
    int32_t *slot;            /* ntasks: each recorded task's event (-1: none) */
    cudaEvent_t *events;
    int32_t nslots, event_cap;
    /* task timing (sw_backend_i.time_tasks): per task of the graph, events recorded on its stream
     * before and after it; per GPU, one recorded at the launch's start, the zero of its clock */
    int timing;
    cudaEvent_t *task_start, *task_end, *gpu_zero;
    int32_t ntimed;
    /* pinned, mapped host memory the kernels read and write directly: the inputs' minibatches,
     * the labels, one double per task for the loss sums */
    char *host;
    float **input;            /* nops: an input op's minibatch in `host` (NULL elsewhere) */
    int32_t *labels;
    double *loss;
    cu_algo *algos;           /* conv.c's cache */
    int nalgos, algo_cap;
    int64_t arena_bytes;
} cuda_backend;

/* What a task's code gets: the environment of any backend (csrc/exec/task_env.h), its
 * stream, its backend. */
typedef struct {
    sw_task_env e;
    cuda_backend *be;
    cu_stream *st;
} cu_task;

/* ---- errors: a failed CUDA, cuDNN or cuBLAS call as an sw_status with its words ---- */
sw_status cu_check(cudaError_t e, const char *what);
sw_status cu_check_dnn(cudnnStatus_t e, const char *what);
sw_status cu_check_blas(cublasStatus_t e, const char *what);
#define CU_TRY(call) SW_TRY(cu_check((call), #call))
#define DNN_TRY(call) SW_TRY(cu_check_dnn((call), #call))
#define BLAS_TRY(call) SW_TRY(cu_check_blas((call), #call))

/* ---- core_link.c ---- */
/* Remember the core's table (once, when the first backend is made); SW_ERR_VALUE when it
 * comes from another build. */
sw_status cu_core_link(const sw_core_api *core);

/* ---- views.c ---- */
/* A map walking the box [lo, hi) of `rank` dimensions, dst and src[0..nsrc) holding it;
 * *d and s[k] point at the box's first element.  SW_ERR_INTERNAL if a view misses the box. */
sw_status cu_map_box(int rank, const int64_t *lo, const int64_t *hi, const sw_view *dst, const sw_view *const *src,
                     int nsrc, swk_map *m, float **d, const float **s);
/* The same over dst's whole box. */
sw_status cu_map_over(const sw_view *dst, const sw_view *const *src, int nsrc, swk_map *m, float **d,
                      const float **s);
/* op(sources) into dst's box (every source covers it). */
sw_status cu_eltwise(const cu_task *t, swk_op op, float a, const sw_view *dst, const sw_view *const *src, int nsrc);
/* dst = src (or dst += src) over the intersection of their boxes, both on the task's GPU. */
sw_status cu_copy_box(const cu_task *t, const sw_view *src, sw_view *dst, int accumulate);
/* dst = src over the intersection, src on logical device `from` (another GPU, maybe). */
sw_status cu_copy_between(const cu_task *t, int from, const sw_view *src, sw_view *dst);
sw_status cu_zero(const cu_task *t, const sw_view *v);
/* `bytes` of the stream's scratch (256-aligned), valid until the task ends. */
void *cu_scratch(const cu_task *t, size_t bytes, sw_status *s);

/* ---- tasks.c, ops.c ---- */
sw_status cu_run_task(cuda_backend *be, cu_stream *st, int32_t task, const sw_step_args *args);
/* Does the CUDA backend have kernels for op type k (ops.c)? */
int cu_has_kernels(int type);
/* sw_backend_i.supports_op of the CUDA backend: 1, or 0 with `why` (n bytes) saying what it lacks. */
int cu_supports_op(int kind, const sw_op_attrs *a, int out_rank, char *why, size_t n);
/* The CUDA backend's table (backend.c), offered through sw_ext_backend.iface. */
const sw_backend_i *cu_backend_iface(void);
sw_status cu_op_forward(const cu_task *t);
sw_status cu_op_backward_data(const cu_task *t);
sw_status cu_op_backward_weight(const cu_task *t);

/* ---- conv.c, pool.c, blas.c ---- */
sw_status cu_conv_forward(const cu_task *t, const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y,
                          const sw_window *win, int relu);
sw_status cu_conv_backward_data(const cu_task *t, const sw_view *w, const sw_view *dy, sw_view *dx,
                                const sw_window *win);
sw_status cu_conv_backward_filter(const cu_task *t, const sw_view *x, const sw_view *dy, sw_view *dw,
                                  const sw_window *win);
void cu_algos_free(cuda_backend *be);
sw_status cu_pool_forward(const cu_task *t, int is_max, const sw_view *x, sw_view *y, const sw_window *win);
sw_status cu_pool_backward(const cu_task *t, int is_max, const sw_view *x, const sw_view *y, const sw_view *dy,
                           sw_view *dx, const sw_window *win);
sw_status cu_linear_forward(const cu_task *t, const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y,
                            int relu);
sw_status cu_linear_backward_data(const cu_task *t, const sw_view *w, const sw_view *dy, sw_view *dx);
sw_status cu_linear_backward_weight(const cu_task *t, const sw_view *x, const sw_view *dy, sw_view *dw);
/* ta, tb: read a, b with their last two dimensions swapped */
sw_status cu_matmul_forward(const cu_task *t, const sw_view *a, const sw_view *b, int ta, int tb, sw_view *y);
sw_status cu_matmul_backward(const cu_task *t, int slot, int ta, int tb, const sw_view *a, const sw_view *b,
                             const sw_view *dy, sw_view *dx);

/* ---- backend.c: the constructor behind shardwise._cuda's capsule ---- */
sw_status cu_backend_new(const sw_core_api *core, const sw_ext_options *opt, sw_backend **out);

#endif /* SHARDWISE_CUDA_BACKEND_H */
