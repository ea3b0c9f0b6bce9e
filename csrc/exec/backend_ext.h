/* backend_ext.h -- backends outside the core: one built as its own shared object (the CUDA
 * backend, shardwise._cuda), and the record-only backend that stands in for it in tests.
 *
 * `import shardwise` must work on a machine without CUDA's libraries, so the CUDA backend
 * is a second extension module, imported only when a runtime asks for it.  The two modules
 * meet through two tables of functions, each opening with the ABI version, its own size and
 * the sizes of the few structs passed by pointer, so a stale build of one is refused with a
 * message instead of misreading the other.  The runtime's own struct is not among them: a
 * backend asks the runtime through functions (runtime.h), so the runtime may change its
 * insides without a rebuild of the backend.
 *
 *   sw_core_api     what the core lends the backend: its error message (so a failure's
 *                   message reaches Python) and the runtime's accessors; the task
 *                   environment and dispatch (exec/task_env.c, and the view arithmetic and
 *                   op names, core/view.c and core/ops.c) are compiled into the backend's
 *                   module from the same sources, calling the runtime through this table
 *   sw_ext_backend  what the backend module offers, as a PyCapsule named
 *                   SW_EXT_BACKEND_CAPSULE in its attribute `_backend`: its constructor
 */
#ifndef SHARDWISE_BACKEND_EXT_H
#define SHARDWISE_BACKEND_EXT_H

#include "task_env.h"  /* sw_task_env, sw_backward_reads */
#include "runtime.h"          /* sw_backend, sw_runtime */

#define SW_EXT_ABI_VERSION 6   /* 5: sw_task and sw_buffer hold their boxes as sw_box32; 6: a task's box is an
                                  index into its graph's boxes (task_box) */
#define SW_EXT_BACKEND_CAPSULE "shardwise._cuda._backend"

/* The sizes both tables carry: the table's own, and those of the structs passed by pointer
 * between the modules (and the op count: an ops.def of another length numbers ops otherwise). */
typedef struct {
    size_t table, env, op, attrs, step_args;
    int op_count;
} sw_ext_sizes;

#define SW_EXT_SIZES(tab) \
    ((sw_ext_sizes){sizeof(tab), sizeof(sw_task_env), sizeof(sw_rt_op), sizeof(sw_op_attrs), sizeof(sw_step_args), \
                    SW_OP_COUNT})

/* 1 when two modules' sizes agree. */
static inline int sw_ext_sizes_equal(sw_ext_sizes a, sw_ext_sizes b) {
    return a.table == b.table && a.env == b.env && a.op == b.op && a.attrs == b.attrs &&
           a.step_args == b.step_args && a.op_count == b.op_count;
}

typedef struct {
    int version;              /* SW_EXT_ABI_VERSION */
    sw_ext_sizes sizes;       /* SW_EXT_SIZES(sw_core_api) */
    sw_status (*set_error)(sw_status status, const char *file, int line, const char *fmt, ...);
    const char *(*last_error)(void);
    int64_t (*box_volume)(const sw_box *b);
    int (*box_equal)(const sw_box *a, const sw_box *b);
    int (*optim_state_buffers)(int kind);
    /* the runtime (runtime.h's accessors) */
    void (*rt_view)(const sw_runtime *rt, int32_t b, sw_view *v);
    void *(*buffer)(const sw_runtime *rt, int32_t b);
    const sw_buffer *(*buffer_info)(const sw_runtime *rt, int32_t b);
    const sw_box32 *(*task_box)(const sw_runtime *rt, int32_t t);
    int32_t (*ntasks)(const sw_runtime *rt);
    int (*nops)(const sw_runtime *rt);
    int64_t (*batch)(const sw_runtime *rt);
    int32_t (*nstreams)(const sw_runtime *rt);
    int32_t (*stream_device)(const sw_runtime *rt, int32_t stream);
    const sw_task *(*task)(const sw_runtime *rt, int32_t t);
    int (*in_list)(const sw_runtime *rt, int list, int32_t t);
    int (*first_accumulate)(const sw_runtime *rt, int32_t t);
    const sw_rt_op *(*op)(const sw_runtime *rt, int op);
    const sw_op_attrs *(*attrs)(const sw_runtime *rt, int op);
    int64_t *(*updates)(const sw_runtime *rt, int32_t b);
    double *(*loss_sums)(const sw_runtime *rt);
    int64_t *(*task_ns)(const sw_runtime *rt);
    int (*task_reads)(const sw_runtime *rt, int32_t t, const int32_t **ids);
    int (*task_writes)(const sw_runtime *rt, int32_t t, const int32_t **ids);
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
    sw_ext_sizes sizes;       /* SW_EXT_SIZES(sw_ext_backend) */
    const char *name;
    sw_status (*backend_new)(const sw_core_api *core, const sw_ext_options *opt, sw_backend **out);
    const sw_backend_i *(*iface)(void);   /* the backend's table: supports_op asked before one exists */
} sw_ext_backend;

/* ---- the record backend (csrc/exec/backend_record.c) ----
 * Records what the runtime enqueues exactly as the CUDA backend does (one global list per
 * work list, streams with their devices and priorities) and runs nothing: its launch fails.
 * Tests read what it recorded to check the CUDA backend's stream and event assignment on
 * real plans without a GPU.  Arenas are host memory. */
sw_status sw_backend_record_new(int ndev, sw_backend **out);
/* The recorded list `list` (sw_gpu_cmd entries, gpu/gpu_plan.h), and the streams. */
const void *sw_backend_record_list(const sw_backend *b, int list, int32_t *n);
int sw_backend_record_streams(const sw_backend *b, const int **device, const int **priority);

#endif /* SHARDWISE_BACKEND_EXT_H */
