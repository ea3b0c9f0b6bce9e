/* arena_layout.c -- a logical device's arena on its GPU (gpu_plan.h).
 *
 * One cudaMalloc per logical device, made once when the runtime is built:
 *   [0, buffers)                          the memory plan's buffers at their planned offsets
 *   [workspace_offset + k * ws, ... + ws) stream k's workspace: cuDNN's algorithm workspace,
 *                                         cuBLAS's, and the backend's scratch (padded window
 *                                         inputs, batch-norm moments, row losses)
 * A stream's tasks run one after another, so they share its workspace; streams run at the
 * same time, so each has its own.  Nothing is allocated during a step.
 */
#include "gpu_plan.h"

static int64_t align_up(int64_t v) { return (v + SW_GPU_ALIGN - 1) / SW_GPU_ALIGN * SW_GPU_ALIGN; }

sw_status sw_gpu_arena_layout(int64_t plan_bytes, int streams, int64_t workspace, sw_gpu_arena *out) {
    const int64_t limit = (int64_t)1 << 50;   /* a petabyte: far above any GPU, far below overflow */
    if (plan_bytes < 0 || plan_bytes > limit || workspace < 0 || workspace > limit) {
        return SW_FAIL(SW_ERR_VALUE, "arena of %lld bytes with workspaces of %lld bytes: out of range",
                       (long long)plan_bytes, (long long)workspace);
    }
    if (streams < 1 || streams > 1024) {
        return SW_FAIL(SW_ERR_VALUE, "an arena holds the workspaces of 1 to 1024 streams, not %d", streams);
    }
    out->buffers = plan_bytes;
    out->workspace_offset = align_up(plan_bytes);
    out->workspace_bytes = align_up(workspace);
    out->streams = streams;
    out->total = out->workspace_offset + out->workspace_bytes * streams;
    if (out->total == 0) {
        out->total = SW_GPU_ALIGN;   /* cudaMalloc of 0 bytes gives no pointer to offset from */
    }
    return SW_OK;
}
