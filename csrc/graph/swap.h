/* graph/swap.h -- offloading feature maps to host memory (AccUDNN): swap.c, swap_plan.c.
 *
 * The swap tasks as ordinary tasks of the one task graph, and the plan of which buffers go out when.
 * A room header: include "internal.h", which includes this file after the types it
 * uses (task graphs, problems, streams).  sw_swap_plan_fit, which plans memory, is in mem/memplan.h.
 */
#ifndef SHARDWISE_SWAP_H
#define SHARDWISE_SWAP_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not graph/swap.h alone"
#endif

/* ---------------------------------------------------------------- swapping (AccUDNN) */
/* Offloading feature maps to host memory between their forward writes and backward reads, as
 * "AccUDNN: A GPU Memory Efficient Accelerator for Training Ultra-deep Deep Neural Networks"
 * (Guo et al.) does; docs/memory.md tells the story.  swap.c rewrites a lowered graph: each
 * offloaded buffer A (device d) gets a host copy H (SW_BUF_HOST, d's host region), a swap_out
 * task (reads A, writes H) on d's swap-out stream and a swap_in task (reads H, writes A', a new
 * buffer like A) on d's swap-in stream; the backward tasks read A' instead of A.  Where the two
 * go in program order is the plan: A's memory is free after the swap_out's position, A' is
 * taken from the swap_in's (the memory plan sees the shorter lifetimes).  swap_plan.c chooses. */
typedef struct {
    int32_t n;               /* feature maps offloaded */
    const int32_t *buffer;   /* n: buffer ids of the lowered graph */
    const int32_t *out_at;   /* n: the swap_out goes right before original task out_at[i] (after the buffer's
                                last forward write; <= ntasks) */
    const int32_t *in_at;    /* n: the swap_in goes right before original task in_at[i] (after out_at[i], at
                                most the buffer's first backward read) */
} sw_swap_spec;

/* The streams of a swapped graph: original tasks on stream d of their device d (priority 0),
 * device d's offloads on stream ndev + 2d and prefetches on ndev + 2d + 1 (priority 1: a
 * ready copy goes first); origin[t]: the original task id of new task t, -1 for swap tasks. */
typedef struct {
    int32_t ntasks, nstreams;
    int32_t *stream, *stream_device, *stream_priority, *origin;
} sw_swap_streams;

/* Rewrite g (lowered, one stream per device) by spec into *out (zeroed first) and *st; SW_ERR_VALUE
 * naming the entry when a buffer cannot be swapped as asked.  Buffer ids of g keep their meaning
 * in *out (new buffers come after them). */
sw_status sw_swap_apply(const sw_task_graph *g, int ndev, const sw_swap_spec *spec, sw_task_graph *out,
                        sw_swap_streams *st);
void sw_swap_streams_free(sw_swap_streams *st);
/* The streams view of st (borrowed). */
sw_streams sw_swap_streams_view(const sw_swap_streams *st);

/* What swap_plan.c needs: the unswapped timeline and the machine's figures. */
typedef struct {
    const double *start, *end;     /* ntasks each: the unswapped iteration as simulated */
    const int64_t *budget;         /* ndev: bytes each device's arena may take */
    const int64_t *pinned;         /* ndev: bytes each device's host region may take (< 0: unlimited) */
    const double *host_bw;         /* 2 ndev: device-to-host, host-to-device bytes/s of each device */
    int64_t align;
    int max_rounds;                /* of pinning stalled feature maps (0: the default) */
    int check;                     /* sw_swap_plan_fit: prove each swapped memory plan safe (tests) */
} sw_swap_inputs;

/* The plan and what the model predicts (arrays malloc'd here, sw_swap_plan_free frees them). */
typedef struct {
    int32_t n, cap;
    int32_t *buffer, *out_at, *in_at;
    double *ready;            /* n: t_ready of the prefetch (Algorithm 1), seconds into the iteration */
    double *needed;           /* n: when its first backward reader starts without stalls (Eq. 6's right side) */
    int ndev;
    double *stall;            /* ndev: predicted stall seconds (0 when Eq. 6 holds for every prefetch) */
    int64_t *peak;            /* ndev: the most live bytes the model counts (aligned) */
    int64_t *offloaded;       /* ndev: bytes of feature maps offloaded */
    int64_t *host_peak;       /* ndev: the most bytes live in the host region */
    int64_t *min_peak;        /* ndev: the smallest peak swapping can reach (every candidate offloaded, prefetched
                                 just in time) */
    int32_t *stalled;         /* ndev: prefetches predicted late */
    int fits;                 /* every device within its budget (and pinned host budget) */
    int32_t pinned_overflow;  /* feature maps kept on a device because its pinned host budget was spent */
} sw_swap_result;

/* Choose which feature maps to offload and where their swap tasks go (swap_plan.c): start with
 * every candidate offloaded (the smallest footprint), then keep on the device (pin) those whose
 * prefetch would stall the computation while memory allows (Algorithm 2's inner loop).  A device
 * that cannot fit even so gets fits = 0 (r->min_peak says how close it gets). */
sw_status sw_swap_plan(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r);
void sw_swap_result_free(sw_swap_result *r);
/* The spec view of a result (borrowed). */
sw_swap_spec sw_swap_result_spec(const sw_swap_result *r);
#endif /* SHARDWISE_SWAP_H */
