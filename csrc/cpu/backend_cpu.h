/* backend_cpu.h -- the CPU backend (backend_cpu.c): the reference implementation of
 * sw_backend_i (exec/runtime.h) and the embedded default; what the rest of the house (the
 * Python bindings) may ask of it.  The runtime itself knows it only through sw_backend_i. */
#ifndef SHARDWISE_CPU_BACKEND_CPU_H
#define SHARDWISE_CPU_BACKEND_CPU_H

#include <stddef.h>  /* size_t */

#include "../exec/runtime.h"  /* sw_backend, sw_task_ctx */

/* A grow-only workspace of one worker thread: kernels borrow scratch from it within a task
 * (sw_task_ctx.scratch; opaque to the runtime). */
struct sw_scratch {
    void *data;
    size_t bytes;
};

/* At least `bytes` of scratch (64-byte aligned), growing the workspace if needed; NULL
 * when out of memory.  One call per task: what it returns is overwritten by the next. */
void *sw_scratch_get(sw_scratch *s, size_t bytes);

/* The CPU backend: `threads` worker threads, thread k running the streams of devices k,
 * k + threads, ...: each stream in program order, and among its streams whose next task may
 * start, the one of the highest priority first; one OpenBLAS thread each.  jitter_us > 0
 * (tests only): every task starts after a random pause of up to that many microseconds, to
 * shake thread timing. */
sw_status sw_backend_cpu_new(int ndev, int threads, int jitter_us, sw_backend **out);

/* The CPU backend's table (its supports_op asked before any backend exists). */
const sw_backend_i *sw_backend_cpu_iface(void);

/* ops_cpu.c: does the CPU backend have kernels for op type k? */
int sw_cpu_has_kernels(int type);
/* ops_cpu.c: sw_backend_i.supports_op of the CPU backend: every kind with kernels (ops.def's cpu
 * column other than sw_cpu_no_kernels), whatever its attributes. */
int sw_cpu_supports_op(int kind, const sw_op_attrs *attrs, int out_rank, char *why, size_t n);

/* tasks.c: run one task of the runtime's graph on the CPU (views into the arenas). */
sw_status sw_cpu_run_task(const sw_task_ctx *ctx, int32_t task);

#endif /* SHARDWISE_CPU_BACKEND_CPU_H */
