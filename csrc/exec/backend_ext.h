/* backend_ext.h -- backends outside the core: one built as its own shared object (the CUDA
 * backend, shardwise._cuda), and the record-only backend that stands in for it in tests.
 *
 * `import shardwise` must work on a machine without CUDA's libraries, so the CUDA backend
 * is a second extension module, imported only when a runtime asks for it.  Both modules
 * compile runtime.h alike and share its structs; they meet through two tables, each opening
 * with the ABI version and the sizes of the shared structs, so a stale build of one is
 * refused with a message instead of misreading the other:
 *
 *   sw_core_api     what the core lends the backend: its error message (so a failure's
 *                   message reaches Python) and the task helpers of csrc/cpu/tasks.c
 *   sw_ext_backend  what the backend module offers, as a PyCapsule named
 *                   SW_EXT_BACKEND_CAPSULE in its attribute `_backend`: its constructor
 */
#ifndef SHARDWISE_BACKEND_EXT_H
#define SHARDWISE_BACKEND_EXT_H

#include "../cpu/task_env.h"  /* sw_task_env, sw_backward_reads */
#include "runtime.h"          /* sw_backend, sw_runtime */

#define SW_EXT_ABI_VERSION 1
#define SW_EXT_BACKEND_CAPSULE "shardwise._cuda._backend"

typedef struct {
    int version;              /* SW_EXT_ABI_VERSION */
    size_t runtime_size;      /* sizeof(sw_runtime), sizeof(sw_task_env): the shared structs */
    size_t env_size;
    sw_status (*set_error)(sw_status status, const char *file, int line, const char *fmt, ...);
    const char *(*last_error)(void);
    void (*rt_view)(const sw_runtime *rt, int32_t b, sw_view *v);
    void (*backward_reads)(const sw_task_env *e, sw_backward_reads *r);
    void (*rebase)(const sw_task_env *e, int slot, sw_view *v);
    int64_t (*box_volume)(const sw_box *b);
    int (*box_equal)(const sw_box *a, const sw_box *b);
    int (*optim_state_buffers)(int kind);
} sw_core_api;

/* The core's table (csrc/exec/backend_ext.c). */
const sw_core_api *sw_core_api_get(void);

/* How a device backend is asked for. */
typedef struct {
    int ndev;                 /* the plan's logical devices */
    const int *gpu;           /* ndev: the GPU of each (NULL: sw_gpu_map's blocks over every GPU seen) */
    int64_t workspace_bytes;  /* per stream (0: the backend's default) */
    int streams_per_device;   /* workspaces at least reserved per logical device (0: one per stream it has) */
} sw_ext_options;

typedef struct {
    int version;              /* SW_EXT_ABI_VERSION */
    size_t runtime_size, env_size;
    const char *name;
    sw_status (*backend_new)(const sw_core_api *core, const sw_ext_options *opt, sw_backend **out);
} sw_ext_backend;

/* ---- the record backend (csrc/exec/backend_record.c) ----
 * Records what the runtime enqueues exactly as the CUDA backend does (one global list per
 * work list, streams with their devices and priorities) and runs nothing: its launch fails.
 * Tests read what it recorded to check the CUDA backend's stream and event assignment on
 * real plans without a GPU.  Arenas are host memory. */
sw_status sw_backend_record_new(int ndev, sw_backend **out);
/* The recorded list `list` (sw_gpu_cmd entries, cuda/host/gpu_plan.h), and the streams. */
const void *sw_backend_record_list(const sw_backend *b, int list, int32_t *n);
int sw_backend_record_streams(const sw_backend *b, const int **device, const int **priority);

#endif /* SHARDWISE_BACKEND_EXT_H */
