/* gpu_plan.h -- a GPU backend's host-side planning: plain C, no CUDA headers.
 *
 * Everything the CUDA backend decides before a GPU runs anything lives here, as pure
 * functions of numbers, so that it is unit-tested on machines without a GPU (these files are
 * built into shardwise._core as well as shardwise._cuda; tests/gpu/test_gpu_plan.py).  It sits
 * in exec/ because the core's record backend (backend_record.c) keeps the CUDA backend's
 * command lists with it, and the bindings report them: nothing in the core includes cuda/.
 *
 *   device_map.c     which GPU each logical device of a plan runs on, and how a box moves
 *                    between two logical devices (same GPU, peer access, staged by the driver)
 *   priorities.c     a schedule's stream priorities onto a GPU's range of CUDA priorities
 *   commands.c       the recorded work of a step in one global order, and its events: one
 *                    CUDA event per recorded task, every wait issued after its record
 *   arena_layout.c   a logical device's arena: the memory plan's buffers, then one workspace
 *                    per stream (cuDNN, cuBLAS and the backend's scratch)
 *   window_geom.c    a worker's convolution or pooling window as cuDNN can run it: the rows
 *                    and columns of its input view to use and a symmetric padding, or a
 *                    padded copy where the padding it needs is not symmetric
 */
#ifndef SHARDWISE_GPU_PLAN_H
#define SHARDWISE_GPU_PLAN_H

#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int32_t, int64_t, uint8_t */

#include "internal.h"  /* sw_status, SW_FAIL */

/* ------------------------------------------------------------------ device_map.c */
/* Logical devices d = 0..ndev-1 onto GPUs 0..ngpus-1 in contiguous blocks: GPU
 * floor(d * ngpus / ndev), so that neighbours (which exchange halos and share replicas'
 * reductions in order) share a GPU, and every GPU gets ndev / ngpus of them (+-1).
 * SW_ERR_VALUE when ndev < 1 or ngpus < 1 (no GPU). */
sw_status sw_gpu_map(int ndev, int ngpus, int *gpu_of);
/* An explicit map (a DeviceGraph's): every entry in 0..ngpus-1. */
sw_status sw_gpu_map_check(int ndev, int ngpus, const int *gpu_of);

typedef enum {
    SW_ROUTE_SAME_GPU = 0,   /* one GPU: a device-to-device box copy kernel */
    SW_ROUTE_PEER = 1,       /* peer access: the destination's kernel reads the source GPU's memory */
    SW_ROUTE_STAGED = 2      /* no peer access: cudaMemcpy3DPeerAsync, which the driver stages through the host */
} sw_gpu_route;
/* How a box moves from logical device a to b; peer[g * ngpus + h] says GPU g can access h. */
sw_gpu_route sw_gpu_route_of(const int *gpu_of, int a, int b, const uint8_t *peer, int ngpus);

/* ------------------------------------------------------------------ priorities.c */
/* CUDA stream priorities for n streams: stream k runs on GPU stream_gpu[k] with the runtime's
 * priority[k] (higher first).  CUDA numbers priorities from `least` (the default, e.g. 0)
 * down to `greatest` (e.g. -5; lower runs first).  Per GPU, the distinct priorities of its
 * streams are ranked from the lowest: the lowest gets `least` (so plain schedules keep
 * CUDA's default priority), the next least - 1, and so on, those beyond the range sharing
 * `greatest`.  Order is kept: a higher priority never gets a later CUDA priority. */
sw_status sw_gpu_priorities(int n, const int *stream_gpu, const int *priority, int least, int greatest, int *out);

/* ------------------------------------------------------------------ commands.c */
enum { SW_GPU_RUN = 0, SW_GPU_WAIT = 1, SW_GPU_RECORD = 2 };

typedef struct {
    int32_t op;       /* SW_GPU_RUN (id: task), SW_GPU_WAIT, SW_GPU_RECORD (id: the task whose event) */
    int32_t stream;
    int32_t id;
} sw_gpu_cmd;

/* One work list in the order the runtime recorded it (task by task in program order, each
 * preceded by its waits and followed by its record).  The CUDA backend issues it in this
 * order from one host thread: a cudaStreamWaitEvent waits for the latest cudaEventRecord
 * issued before it, so every wait must come after its record in this one list. */
typedef struct {
    sw_gpu_cmd *cmd;
    int32_t n, cap;
} sw_gpu_cmds;

sw_status sw_gpu_cmds_push(sw_gpu_cmds *l, int op, int stream, int32_t id);
void sw_gpu_cmds_free(sw_gpu_cmds *l);

typedef struct {
    int32_t events;          /* tasks recorded (events needed, one per task, shared by the lists) */
    int32_t waits;           /* waits in the list */
    int32_t cross_gpu_waits; /* of which a stream waits for another GPU's event */
} sw_gpu_event_stats;

/* Event slots for one list: slot[t] (ntasks entries, -1 where none yet) of every recorded
 * task, numbered from *nslots on (so several lists share slots); checks that every record
 * follows its task's run on the same stream and every wait its record, earlier in the list
 * (SW_ERR_INTERNAL naming them otherwise).  stream_gpu (per stream) counts cross-GPU waits. */
sw_status sw_gpu_event_plan(const sw_gpu_cmds *l, int32_t ntasks, const int *stream_gpu, int nstreams,
                            int32_t *slot, int32_t *nslots, sw_gpu_event_stats *stats);

/* ------------------------------------------------------------------ arena_layout.c */
#define SW_GPU_ALIGN 256   /* cudaMalloc's alignment; cuDNN and cuBLAS want at least 128 */

typedef struct {
    int64_t buffers;            /* the memory plan's bytes, from offset 0 */
    int64_t workspace_offset;   /* the first stream's workspace (aligned) */
    int64_t workspace_bytes;    /* per stream (aligned) */
    int streams;
    int64_t total;              /* one cudaMalloc of this many bytes */
} sw_gpu_arena;

/* The arena of a logical device with `streams` streams of `workspace` bytes each. */
sw_status sw_gpu_arena_layout(int64_t plan_bytes, int streams, int64_t workspace, sw_gpu_arena *out);

/* ------------------------------------------------------------------ window_geom.c */
/* One spatial dimension of a window (convolution or pooling) computed by a worker: output
 * coordinates [out_lo, out_lo + out_n) from an input view holding [in_lo, in_lo + in_n),
 * kernel k, stride s, padding p.  Reads outside the view are padding (the lowering puts
 * every read inside the tensor into the view). */
typedef struct {
    int64_t need_lo, need_hi;   /* the input coordinates the outputs read: [need_lo, need_hi) */
    int64_t skip;               /* view elements before the first one used */
    int64_t used;               /* view elements used */
    int64_t pad_lo, pad_hi;     /* padding needed before and after them */
    int direct;                 /* cuDNN's symmetric padding pad_lo over the `used` rows gives exactly
                                 * out_n outputs reading these rows: pad_hi == pad_lo, or pad_hi < pad_lo
                                 * where the extra padding at the end is read by no output (ResNet's
                                 * stride-2 3x3 windows on even sizes: pad_lo 1, pad_hi 0) */
} sw_gpu_window_dim;

sw_status sw_gpu_window_dim_of(int64_t in_lo, int64_t in_n, int64_t out_lo, int64_t out_n, int64_t k, int64_t s,
                               int64_t p, sw_gpu_window_dim *out);
/* Whether cuDNN runs the window on the view directly (each dimension with symmetric padding
 * pad_lo, input rows from `skip`, `used` of them: both dimensions `direct`); otherwise the input
 * goes to a padded copy of (need_hi - need_lo) rows and columns and runs with padding 0. */
static inline int sw_gpu_window_direct(const sw_gpu_window_dim *h, const sw_gpu_window_dim *w) {
    return h->direct && w->direct;
}

#endif /* SHARDWISE_GPU_PLAN_H */
