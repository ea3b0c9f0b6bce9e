/* graph/recompute.h -- recomputing feature maps in the backward pass instead of keeping them:
 * recompute.c.
 *
 * A room header: include "internal.h", which includes this file after the task graph types.
 */
#ifndef SHARDWISE_RECOMPUTE_H
#define SHARDWISE_RECOMPUTE_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not graph/recompute.h alone"
#endif

/* ---------------------------------------------------------------- recomputation (rematerialization) */
/* Instead of keeping a feature map from its forward write to its backward reads, drop it after its
 * last forward use and run its forward task again just before the backward pass needs it, as
 * "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization" (Jain et al.) frames
 * the choice (keep, recompute, or swap).  recompute.c rewrites a lowered graph: for each chosen
 * buffer A (written by forward task F) it adds A', a new buffer like A, and a recompute task (F's
 * kernel on F's inputs, writing A') right before the first backward task reading A; the backward
 * tasks read A' instead.  F's inputs are read again by the recompute, so they live longer unless
 * they are recomputed too (then the recompute reads their recomputed copies, and theirs goes
 * first).  The memory plan sees A end after its last forward touch and A' begin at the recompute.
 * A staging region (an input gathered from the producer's shards) is gathered again the same way
 * when its producer is chosen: its copies re-run in the backward phase, from the recomputed shards
 * where those are recomputed, unless its consumer is recomputed too and it reads recomputed
 * shards (it stays, as the checkpoint between the two segments).
 * What can be recomputed: a feature map (SW_BUF_ACTIVATION) not read by the host, written once,
 * by a forward task that writes nothing else, read again only after the forward phase, and whose
 * forward task's inputs nothing writes between that task and the map's first backward reader (so
 * re-running it gives the same bits: no parameter is updated yet, the step, and so dropout's mask,
 * is the same).  Batch norms (their running statistics would move twice), losses and split
 * reductions (forward_partial, sum_partials) are kept. */
typedef struct {
    int32_t n;               /* ops chosen */
    const int32_t *op;       /* n op ids: every recomputable feature map of these ops is recomputed */
} sw_recompute_spec;

/* Rewrite g by spec into *out (zeroed first); (*origin)[t] is the task of g each task of out
 * comes from, -1 for a recompute task (malloc'd; free() it); *nrecomputed the buffers recomputed.
 * SW_ERR_VALUE for an op id out of range.  Buffer ids of g keep their meaning in *out. */
sw_status sw_recompute_apply(const sw_task_graph *g, int nops, const sw_recompute_spec *spec, sw_task_graph *out,
                             int32_t **origin, int32_t *nrecomputed);
#endif /* SHARDWISE_RECOMPUTE_H */
