/* schedule_paths.c -- layer blocks and layer paths of a network, weighted by dA time.
 *
 * TurboDL (Jin et al., "TurboDL: Improving the CNN Training on GPU With Fine-Grained
 * Multi-Streaming Scheduling", section 2.4) abstracts a network into a sequence of
 * layer blocks, each from a fork layer to a merge layer, and ranks the layer paths
 * inside a block by their distance, the summed time of their activation gradients
 * (dA).  Here, on the op graph of a problem:
 *
 *   layers      ops with a data input; inputs and parameters (no data input) are
 *               sources that no gradient flows through, left out of the analysis
 *   edges       producer -> consumer of a data input, both layers; a virtual start S
 *               precedes every layer without a layer producer, a virtual end T
 *               follows every layer without a layer consumer
 *   sync layer  a layer on every S -> T path; ops come in a topological order, and
 *               v is one exactly when no edge (S and T included) jumps over v's
 *               position (then every S -> T path, its positions increasing, must
 *               step on v; conversely a jumping edge u -> w lies on a path
 *               S ~> u -> w ~> T that misses v).  So the test is one sweep over a
 *               difference array, whatever topological order the graph has.
 *   block       the layers strictly between two consecutive sync layers (or S, T):
 *               fork and merge are those two (-1 for S and T).  Blocks run in
 *               sequence, so each is analysed alone, as the paper does.
 *   paths       inside block b, with from(v) / to(v) the longest dA sums fork -> v
 *               and v -> merge (v included in both), the longest fork -> merge path
 *               through v has L(v) = from(v) + to(v) - dA(v).  Layers are taken by
 *               L descending (ties: lower op index); a layer on no path yet starts a
 *               new path, the longest through it, traced by the argmax predecessor
 *               and successor; the layers of that trace not on an earlier path join
 *               it.  So every layer gets the highest-ranked path through it, and a
 *               dense net (DenseNet's 2^k paths) costs one pass, not an enumeration.
 *               Distances within a relative 1e-9 of each other share a rank.
 *
 * Path 0 is the network's critical path: the sync layers and each block's first
 * (longest) path; it is also the longest S -> T path, since blocks are in series.
 */
#include <math.h>    /* isfinite */
#include <stdlib.h>  /* calloc, malloc, free, qsort */

#include "internal.h"

#define NONE (-1)
#define TIE 1e-9     /* relative: distances closer than this share a rank */

typedef struct {
    const sw_problem *p;
    const double *w;       /* dA seconds per op */
    char *layer;           /* per op: has a data input */
    int32_t *succ_ptr;     /* nops + 1: CSR of layer -> layer edges */
    int32_t *succ;
    double *from, *to;     /* per op, valid inside the block being analysed */
    int32_t *inside;       /* the block's layers, ascending */
    int32_t ninside;
    int32_t fork, merge;
} analysis;

/* A loop header: the statement after it runs with U set to every layer producer of op V
 * (each edge U -> V; an op reading one tensor twice has two). */
#define FOR_LAYER_PREDS(A, V, U)                                                        \
    for (int k_ = 0, U = 0; k_ < (A)->p->ops[V].ninputs; k_++)                          \
        if ((U = (A)->p->ops[V].inputs[k_].producer) >= 0 && (A)->layer[U])

static double weight(const analysis *a, int32_t v) { return v == NONE ? 0.0 : a->w[v]; }

/* Layer -> layer edges as CSR over producers (an op reading one tensor twice gives two). */
static sw_status build_edges(analysis *a) {
    int32_t n = a->p->nops;
    a->succ_ptr = calloc((size_t)n + 1, sizeof *a->succ_ptr);
    if (!a->succ_ptr) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; v < n; v++) {
        FOR_LAYER_PREDS(a, v, u) { a->succ_ptr[u + 1]++; }
    }
    for (int32_t v = 0; v < n; v++) {
        a->succ_ptr[v + 1] += a->succ_ptr[v];
    }
    a->succ = malloc(sizeof *a->succ * ((size_t)a->succ_ptr[n] + 1));
    int32_t *fill = malloc(sizeof *fill * ((size_t)n + 1));
    if (!a->succ || !fill) {
        free(fill);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; v < n; v++) {
        fill[v] = a->succ_ptr[v];
    }
    for (int32_t v = 0; v < n; v++) {   /* v ascending: every successor list comes out sorted */
        FOR_LAYER_PREDS(a, v, u) { a->succ[fill[u]++] = v; }
    }
    free(fill);
    return SW_OK;
}

/* sync[v] = 1 for the layers no edge jumps over (S at position -1, T at nops). */
static sw_status find_sync_layers(const analysis *a, char *sync) {
    int32_t n = a->p->nops;
    int32_t *diff = calloc((size_t)n + 1, sizeof *diff);
    if (!diff) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; v < n; v++) {
        if (!a->layer[v]) {
            continue;
        }
        int has_pred = 0;
        FOR_LAYER_PREDS(a, v, u) {   /* u -> v jumps over u + 1 .. v - 1 */
            has_pred = 1;
            diff[u + 1]++;
            diff[v]--;
        }
        if (!has_pred) {   /* S -> v jumps over 0 .. v - 1 */
            diff[0]++;
            diff[v]--;
        }
        if (a->succ_ptr[v] == a->succ_ptr[v + 1]) {   /* v -> T jumps over v + 1 .. n - 1 */
            diff[v + 1]++;
            diff[n]--;
        }
    }
    int32_t run = 0;
    for (int32_t v = 0; v < n; v++) {
        run += diff[v];
        sync[v] = (char)(a->layer[v] && run == 0);
    }
    free(diff);
    return SW_OK;
}

/* from(v) and to(v) for the layers inside the current block. */
static sw_status longest_sums(analysis *a) {
    for (int32_t i = 0; i < a->ninside; i++) {
        int32_t v = a->inside[i];
        double best = 0.0;   /* no layer producer: v follows S, the fork of this block */
        FOR_LAYER_PREDS(a, v, u) {
            if (u != a->fork && !(u > a->fork && u < v && a->from[u] >= 0)) {
                return SW_FAIL(SW_ERR_INTERNAL, "op %d: producer %d is outside its block", v, u);
            }
            double f = u == a->fork ? weight(a, a->fork) : a->from[u];
            best = f > best ? f : best;
        }
        a->from[v] = a->w[v] + best;
    }
    for (int32_t i = a->ninside - 1; i >= 0; i--) {
        int32_t v = a->inside[i];
        double best = 0.0;   /* no layer consumer: v precedes T, the merge of this block */
        for (int32_t e = a->succ_ptr[v]; e < a->succ_ptr[v + 1]; e++) {
            int32_t s = a->succ[e];
            double t = s == a->merge ? weight(a, a->merge) : a->to[s];
            best = t > best ? t : best;
        }
        a->to[v] = a->w[v] + best;
    }
    return SW_OK;
}

/* The layer with the longest continuation from v toward the fork (dir < 0) or the merge
 * (dir > 0), lowest index on ties; NONE when v's next step is the fork, merge, S or T. */
static int32_t next_on_path(const analysis *a, int32_t v, int dir) {
    int32_t best = NONE;
    double best_len = -1.0;
    int at_end = 0;   /* the fork / merge itself is the longest step */
    if (dir < 0) {
        FOR_LAYER_PREDS(a, v, u) {
            double f = u == a->fork ? weight(a, a->fork) : a->from[u];
            if (f > best_len || (f == best_len && u < best)) {
                best_len = f;
                best = u;
                at_end = u == a->fork;
            }
        }
    } else {
        for (int32_t e = a->succ_ptr[v]; e < a->succ_ptr[v + 1]; e++) {
            int32_t s = a->succ[e];
            double t = s == a->merge ? weight(a, a->merge) : a->to[s];
            if (t > best_len || (t == best_len && s < best)) {
                best_len = t;
                best = s;
                at_end = s == a->merge;
            }
        }
    }
    return at_end ? NONE : best;
}

typedef struct {
    double len;
    int32_t op;
} ranked;

static int by_length_desc(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    if (a->len != b->len) {
        return a->len > b->len ? -1 : 1;
    }
    return (a->op > b->op) - (a->op < b->op);
}

/* Paths of the current block (id b): its first goes to path 0, the rest get new ids. */
static sw_status block_paths(analysis *a, int32_t b, ranked *order, sw_layer_paths *lp) {
    SW_TRY(longest_sums(a));
    for (int32_t i = 0; i < a->ninside; i++) {
        int32_t v = a->inside[i];
        order[i] = (ranked){a->from[v] + a->to[v] - a->w[v], v};
    }
    qsort(order, (size_t)a->ninside, sizeof *order, by_length_desc);
    int32_t rank = 0;
    double distinct = order[0].len;   /* the last distance that opened a rank */
    lp->block_distance[b] = distinct;
    for (int32_t i = 0; i < a->ninside; i++) {
        int32_t v = order[i].op;
        if (lp->op_path[v] != NONE) {
            continue;
        }
        if (order[i].len < distinct - TIE * distinct) {
            rank++;
            distinct = order[i].len;
        }
        int32_t id = i == 0 ? 0 : lp->npaths++;
        if (id != 0) {
            lp->path_block[id] = b;
            lp->path_rank[id] = rank;
            lp->path_distance[id] = order[i].len;
        }
        lp->op_path[v] = id;
        for (int dir = -1; dir <= 1; dir += 2) {
            for (int32_t u = next_on_path(a, v, dir); u != NONE; u = next_on_path(a, u, dir)) {
                if (lp->op_path[u] == NONE) {
                    lp->op_path[u] = id;
                }
            }
        }
    }
    if (rank + 1 > lp->levels) {
        lp->levels = rank + 1;
    }
    return SW_OK;
}

void sw_layer_paths_free(sw_layer_paths *lp) {
    free(lp->op_block);
    free(lp->op_path);
    free(lp->block_fork);
    free(lp->block_merge);
    free(lp->block_distance);
    free(lp->path_block);
    free(lp->path_rank);
    free(lp->path_distance);
    *lp = (sw_layer_paths){0};
}

static sw_status alloc_paths(sw_layer_paths *lp, int32_t n) {
    size_t m = (size_t)n + 1;   /* at most n blocks, n + 1 paths */
    lp->op_block = malloc(sizeof *lp->op_block * m);
    lp->op_path = malloc(sizeof *lp->op_path * m);
    lp->block_fork = malloc(sizeof *lp->block_fork * m);
    lp->block_merge = malloc(sizeof *lp->block_merge * m);
    lp->block_distance = malloc(sizeof *lp->block_distance * m);
    lp->path_block = malloc(sizeof *lp->path_block * m);
    lp->path_rank = malloc(sizeof *lp->path_rank * m);
    lp->path_distance = malloc(sizeof *lp->path_distance * m);
    if (!lp->op_block || !lp->op_path || !lp->block_fork || !lp->block_merge || !lp->block_distance ||
        !lp->path_block || !lp->path_rank || !lp->path_distance) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; v < n; v++) {
        lp->op_block[v] = lp->op_path[v] = NONE;
    }
    return SW_OK;
}

/* Blocks in order, each analysed as soon as its merge (a sync layer, or T) is reached. */
static sw_status find_blocks(analysis *a, const char *sync, ranked *order, sw_layer_paths *lp) {
    int32_t n = a->p->nops;
    a->fork = NONE;
    a->ninside = 0;
    for (int32_t v = 0; v <= n; v++) {
        int end = v == n;
        if (!end && !a->layer[v]) {
            continue;
        }
        if (!end && !sync[v]) {
            a->inside[a->ninside++] = v;
            a->from[v] = -1.0;   /* marks "inside, not reached yet" for the producer check */
            continue;
        }
        a->merge = end ? NONE : v;
        if (a->ninside > 0) {
            int32_t b = lp->nblocks++;
            lp->block_fork[b] = a->fork;
            lp->block_merge[b] = a->merge;
            for (int32_t i = 0; i < a->ninside; i++) {
                lp->op_block[a->inside[i]] = b;
            }
            SW_TRY(block_paths(a, b, order, lp));
        }
        if (!end) {
            lp->op_path[v] = 0;   /* a sync layer: on every path */
        }
        a->fork = a->merge;
        a->ninside = 0;
    }
    return SW_OK;
}

sw_status sw_layer_paths_build(const sw_problem *p, const double *op_da, sw_layer_paths *lp) {
    int32_t n = p->nops;
    *lp = (sw_layer_paths){.nops = n, .npaths = 1, .levels = 1, .op_da = op_da};
    analysis a = {.p = p, .w = op_da};
    sw_status s = alloc_paths(lp, n);
    char *sync = calloc((size_t)n + 1, 1);
    a.layer = calloc((size_t)n + 1, 1);
    a.from = malloc(sizeof *a.from * ((size_t)n + 1));
    a.to = malloc(sizeof *a.to * ((size_t)n + 1));
    a.inside = malloc(sizeof *a.inside * ((size_t)n + 1));
    ranked *order = malloc(sizeof *order * ((size_t)n + 1));
    if (s == SW_OK && (!sync || !a.layer || !a.from || !a.to || !a.inside || !order)) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t v = 0; s == SW_OK && v < n; v++) {
        for (int k = 0; k < p->ops[v].ninputs; k++) {
            a.layer[v] |= (char)(p->ops[v].inputs[k].role == SW_ROLE_DATA);
        }
        if (a.layer[v] && !(isfinite(op_da[v]) && op_da[v] >= 0.0)) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d: dA time %g is not a finite number >= 0", v, op_da[v]);
        }
    }
    if (s == SW_OK) {
        s = build_edges(&a);
    }
    if (s == SW_OK) {
        s = find_sync_layers(&a, sync);
    }
    if (s == SW_OK) {
        s = find_blocks(&a, sync, order, lp);
    }
    if (s == SW_OK) {   /* path 0: the sync layers and every block's longest path */
        lp->path_block[0] = NONE;
        lp->path_rank[0] = 0;
        lp->path_distance[0] = 0.0;
        for (int32_t v = 0; v < n; v++) {
            lp->path_distance[0] += lp->op_path[v] == 0 ? op_da[v] : 0.0;
        }
    }
    free(sync);
    free(a.layer);
    free(a.from);
    free(a.to);
    free(a.inside);
    free(a.succ_ptr);
    free(a.succ);
    free(order);
    if (s != SW_OK) {
        sw_layer_paths_free(lp);
    }
    return s;
}
