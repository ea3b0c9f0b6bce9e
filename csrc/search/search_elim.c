/* search_elim.c -- Algorithm 1 of seed 003: node and edge elimination.
 *
 * Node elimination (Eq. 2): a node j with one in-edge (i -> j) and one
 * out-edge (j -> k) is replaced by an edge i -> k whose table is
 *     T[ci][ck] = min_cj node[j][cj] + e1[ci][cj] + e2[cj][ck]
 * and the argmin is kept to undo the elimination.
 * Edge elimination (Eq. 3): two edges with the same ends become one whose
 * table is the sum.
 * Leaf elimination (our extension, exact for the same reason as Eq. 2): a node
 * with a single edge in total folds min over its configurations into its
 * neighbour's node cost.  It removes graph inputs and extra sinks, so most
 * networks reduce to one node instead of two.
 * What is left (crossing skips, dense blocks) is solved by variable elimination
 * (search_ve.c): exact within the bound, else the best plan it finds with a
 * lower bound.  Undoing the eliminations in reverse order fills in the
 * eliminated nodes (Theorems 1 and 2).
 */
#include <math.h>    /* INFINITY, fmin */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy */

#include "search_internal.h"

/* A sweep eliminates chain nodes of at most this many times the least work (node_sweep), and
 * every chain node of at most CHEAP_WORK min-plus steps: the order of cheap products matters
 * little, and a sweep per few of them would cost more than they do (a chain of 3,000 ops of a
 * few dozen configurations each: eight times the search). */
#define SWEEP_SPAN 2.0
#define CHEAP_WORK 1e6

static sw_status push_edge(state *st, int src, int dst, double *t) {
    if (st->ne == st->cap) {
        int cap = st->cap * 2 + 16;
        work_edge *n = realloc(st->edges, sizeof *n * (size_t)cap);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        st->edges = n;
        st->cap = cap;
    }
    st->edges[st->ne++] = (work_edge){src, dst, t, 1, 1};
    return SW_OK;
}

static void kill_edge(state *st, int e) {
    st->edges[e].alive = 0;
    st->outdeg[st->edges[e].src]--;
    st->indeg[st->edges[e].dst]--;
}

/* A table an earlier node elimination made from the same inputs: the tables i -> j and
 * j -> k (shared between edges that read the same data, cost.c) and an equal node cost
 * of j.  Repeated blocks (the modules of Inception, the layers of a ResNet stage) give
 * the same chains, so their products are computed once: the result is the same table,
 * bit for bit.  NULL if none. */
static double *earlier_product(const state *st, const double *a, const double *b, int j, int ci_n, int ck_n) {
    const int *nc = st->t->ncfg;
    for (int q = 0; q < st->nproducts; q++) {
        const record *r = &st->recs[st->products[q]];
        if (r->a == a && r->b == b && nc[r->j] == nc[j] && nc[r->i] == ci_n && nc[r->k] == ck_n &&
            !memcmp(st->node[r->j], st->node[j], sizeof(double) * (size_t)nc[j])) {
            return st->edges[r->made].t;
        }
    }
    return NULL;
}

/* ---- the products of one node sweep, made together at its end ----
 * The eliminations of a sweep are independent: none reads a table another of the same sweep
 * makes (an elimination marks its two neighbours, which the sweep then leaves alone, and the
 * node it removes keeps its costs), so the sweep decides them in order, as before, taking each
 * product's table from the arena at once, and makes the products afterwards: the large ones one
 * after another, each on every thread, the others each on one thread, several at a time (the
 * branches of an Inception module, a transformer's layers).  Every table gets the bits it got
 * when made in place. */
struct pending_product {
    const double *a, *nj, *b;
    double *out;
    int ci_n, cj_n, ck_n;
};

static sw_status defer_product(state *st, const double *a, const double *nj, const double *b, double *out,
                               int ci_n, int cj_n, int ck_n) {
    if (st->npending == st->pending_cap) {
        int cap = st->pending_cap * 2 + 16;
        struct pending_product *n = realloc(st->pending, sizeof *n * (size_t)cap);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        st->pending = n;
        st->pending_cap = cap;
    }
    st->pending[st->npending++] = (struct pending_product){a, nj, b, out, ci_n, cj_n, ck_n};
    return SW_OK;
}

static double product_work(const struct pending_product *q) { return (double)q->ci_n * q->cj_n * q->ck_n; }

static sw_status make_small(void *ctx, int i) {
    const struct pending_product *q = ((const struct pending_product **)ctx)[i];
    sw_minplus(q->a, q->nj, q->b, q->out, q->ci_n, q->cj_n, q->ck_n, 1);
    return SW_OK;
}

static sw_status make_products(state *st) {
    if (st->npending == 0) {
        return SW_OK;
    }
    int threads = st->t->threads > 1 ? st->t->threads : 1, nsmall = 0;
    const struct pending_product **small = malloc(sizeof *small * (size_t)(st->npending + 1));
    if (!small) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int q = 0; q < st->npending; q++) {
        const struct pending_product *p = &st->pending[q];
        if (threads == 1 || st->npending == 1 || product_work(p) >= SW_MINPLUS_THREADED_WORK) {
            sw_minplus(p->a, p->nj, p->b, p->out, p->ci_n, p->cj_n, p->ck_n, threads);
        } else {
            small[nsmall++] = p;
        }
    }
    st->npending = 0;
    sw_status s = nsmall > 1 ? sw_parallel_for(nsmall, threads, make_small, small) : SW_OK;
    if (nsmall == 1) {
        make_small(small, 0);
    }
    free(small);
    return s;
}

static sw_status eliminate_node(state *st, int j, int e1, int e2) {
    const int *nc = st->t->ncfg;
    int i = st->edges[e1].src, k = st->edges[e2].dst;
    int ci_n = nc[i], cj_n = nc[j], ck_n = nc[k];
    const double *a = st->edges[e1].t, *b = st->edges[e2].t, *nj = st->node[j];
    double *table = earlier_product(st, a, b, j, ci_n, ck_n);
    int owned = table == NULL;
    if (owned) {
        table = sw_table_arena_alloc(&st->tables, (size_t)ci_n * (size_t)ck_n);
        if (!table) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        SW_TRY(defer_product(st, a, nj, b, table, ci_n, cj_n, ck_n));   /* made at the sweep's end */
    }
    kill_edge(st, e1);
    kill_edge(st, e2);
    st->alive[j] = 0;
    sw_status s = push_edge(st, i, k, table);
    if (s != SW_OK) {
        return s;
    }
    st->outdeg[i]++;
    st->indeg[k]++;
    st->fresh[i] = 1;
    if (owned) {
        st->products[st->nproducts++] = st->nrec;
    }
    st->recs[st->nrec++] = (record){REC_NODE, j, i, k, a, b, e1, e2, st->ne - 1};
    return SW_OK;
}

/* j's only edge is e; fold min over cj into the other end's node cost. */
static sw_status eliminate_leaf(state *st, int j, int e) {
    const int *nc = st->t->ncfg;
    int incoming = st->edges[e].dst == j;
    int other = incoming ? st->edges[e].src : st->edges[e].dst;
    int co_n = nc[other], cj_n = nc[j];
    const double *t = st->edges[e].t, *nj = st->node[j];
    for (int co = 0; co < co_n; co++) {
        double best = INFINITY;
        for (int cj = 0; cj < cj_n; cj++) {
            double v = nj[cj] + (incoming ? t[(size_t)co * cj_n + cj] : t[(size_t)cj * co_n + co]);
            best = v < best ? v : best;
        }
        st->node[other][co] += best;
    }
    kill_edge(st, e);
    st->alive[j] = 0;
    st->recs[st->nrec++] = (record){incoming ? REC_LEAF_IN : REC_LEAF_OUT, j, other, other, t, NULL, e, -1, -1};
    return SW_OK;
}

/* A table an earlier merge made from the same two tables (either order: the sum is the
 * same bit for bit), for edges between ops of the same configuration counts.  Repeated
 * blocks meet parallel edges of shared tables (a skip beside a chain, a freed-bytes table
 * beside a transfer), so their sums, and the products made from them, are computed once.
 * NULL if none. */
static double *earlier_sum(const state *st, const double *a, const double *b, int src, int dst) {
    const int *nc = st->t->ncfg;
    for (int q = 0; q < st->nsums; q++) {
        const record *r = &st->recs[st->sums[q]];
        if (((r->a == a && r->b == b) || (r->a == b && r->b == a)) && nc[r->i] == nc[src] && nc[r->k] == nc[dst]) {
            return st->edges[r->made].t;
        }
    }
    return NULL;
}

static sw_status merge_edges(state *st, int e1, int e2) {
    const int *nc = st->t->ncfg;
    int src = st->edges[e1].src, dst = st->edges[e1].dst;
    const double *a = st->edges[e1].t, *b = st->edges[e2].t;
    double *table = earlier_sum(st, a, b, src, dst);
    int owned = table == NULL;
    if (owned) {
        size_t cells = (size_t)nc[src] * (size_t)nc[dst];
        table = sw_table_arena_alloc(&st->tables, cells);
        if (!table) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (size_t c = 0; c < cells; c++) {
            table[c] = a[c] + b[c];
        }
    }
    kill_edge(st, e1);
    kill_edge(st, e2);
    sw_status s = push_edge(st, src, dst, table);
    if (s != SW_OK) {
        return s;
    }
    st->outdeg[src]++;
    st->indeg[dst]++;
    st->fresh[src] = 1;
    if (owned) {
        st->sums[st->nsums++] = st->nrec;
    }
    st->recs[st->nrec++] = (record){REC_MERGE, -1, src, dst, a, b, e1, e2, st->ne - 1};
    return SW_OK;
}

/* Dense min-plus steps of eliminating chain node j (its one in-edge ein, out-edge eout). */
static double chain_work(const state *st, int j, int ein, int eout) {
    const int *nc = st->t->ncfg;
    return (double)nc[st->edges[ein].src] * (double)nc[j] * (double)nc[st->edges[eout].dst];
}

/* One sweep of node eliminations (and leaf eliminations when allowed), cheapest first.
 * The order matters for the work, not the result (every order gives the optimum): in a
 * transformer layer the softmax between the two attention matmuls (480 configurations
 * between two of 1,265 on 256 GPUs) costs 1,265 x 480 x 1,265 steps when eliminated
 * first, and 165 x 480 x 1,265 once the matmul before it has been folded into the layer's
 * input (a 165-configuration norm): about half the work of a Lagrangian solve of a 32-layer
 * Llama.  So a sweep eliminates only the chain nodes whose work is at most SWEEP_SPAN times
 * the least of any chain node at its start (or at most CHEAP_WORK), and none an elimination
 * of the same sweep gave a new edge (looked at again next sweep, its edges merged first; a
 * chain of equal layers then halves every sweep, its products the same inputs layer after
 * layer, computed once).  Leaves cost little and go whenever they are leaves. */
static sw_status node_sweep(state *st, int allow_leaf, sw_search_stats *stats, int *made) {
    *made = 0;
    size_t n = (size_t)(st->n > 0 ? st->n : 1);
    int *in = malloc(sizeof(int) * n), *out = malloc(sizeof(int) * n);
    char *touched = calloc(n, 1);
    if (!in || !out || !touched) {
        free(in);
        free(out);
        free(touched);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    /* each node's in- and out-edge, valid for a node of one of each (or a leaf) until an
     * elimination changes its edges, which marks it touched */
    for (int e = 0; e < st->ne; e++) {
        if (st->edges[e].alive) {
            in[st->edges[e].dst] = e;
            out[st->edges[e].src] = e;
        }
    }
    double least = INFINITY;
    for (int j = 0; j < st->n; j++) {
        if (st->alive[j] && st->indeg[j] == 1 && st->outdeg[j] == 1) {
            double w = chain_work(st, j, in[j], out[j]);
            least = w < least ? w : least;
        }
    }
    double limit = least * SWEEP_SPAN > CHEAP_WORK ? least * SWEEP_SPAN : CHEAP_WORK;
    sw_status s = SW_OK;
    for (int j = 0; j < st->n && s == SW_OK; j++) {
        if (!st->alive[j] || touched[j]) {
            continue;
        }
        int deg = st->indeg[j] + st->outdeg[j];
        int chain = st->indeg[j] == 1 && st->outdeg[j] == 1;
        if (!(allow_leaf && deg == 1) && !chain) {
            continue;
        }
        if (deg == 1) {
            int e = st->indeg[j] ? in[j] : out[j];
            touched[st->edges[e].src] = touched[st->edges[e].dst] = 1;
            s = eliminate_leaf(st, j, e);
            stats->leaf_eliminations++;
        } else {
            int i = st->edges[in[j]].src, k = st->edges[out[j]].dst;
            if (chain_work(st, j, in[j], out[j]) > limit) {
                continue;
            }
            touched[i] = touched[k] = 1;
            int before = st->nproducts;
            s = eliminate_node(st, j, in[j], out[j]);
            stats->node_eliminations++;
            stats->reused_products += s == SW_OK && st->nproducts == before;
        }
        if (s == SW_OK) {
            if (st->t->progress) {
                atomic_fetch_add(st->t->progress, 1);
            }
            (*made)++;
        }
    }
    free(in);
    free(out);
    free(touched);
    if (s == SW_OK) {
        s = make_products(st);
    }
    return s;
}

/* One sweep of edge merges: every edge with a later parallel one merges with the first of
 * them.  Only edges from a fresh node can have one (an edge is made from its source), so the
 * others are not compared: many sweeps (node_sweep, cheapest first) each cost the edges made. */
static sw_status edge_sweep(state *st, sw_search_stats *stats, int *made) {
    *made = 0;
    for (int a = 0; a < st->ne; a++) {
        if (!st->edges[a].alive || !st->fresh[st->edges[a].src]) {
            continue;
        }
        for (int b = a + 1; b < st->ne; b++) {
            if (st->edges[b].alive && st->edges[b].src == st->edges[a].src &&
                st->edges[b].dst == st->edges[a].dst) {
                int made_before = st->nsums;
                sw_status s = merge_edges(st, a, b);
                if (s != SW_OK) {
                    return s;
                }
                stats->edge_eliminations++;
                stats->reused_sums += st->nsums == made_before;
                (*made)++;
                break;  /* edge a is dead now; the merged edge is revisited later */
            }
        }
    }
    memset(st->fresh, 0, (size_t)st->n);
    return SW_OK;
}

static sw_status solve_residual(state *st, double max_evaluations, int *choice, sw_search_stats *stats) {
    int *nodes = malloc(sizeof *nodes * (size_t)st->n);
    sw_live_edge *edges = malloc(sizeof *edges * (size_t)(st->ne > 0 ? st->ne : 1));
    if (!nodes || !edges) {
        free(nodes);
        free(edges);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int k = 0, ne = 0;
    double combos = 1.0;
    for (int j = 0; j < st->n; j++) {
        if (st->alive[j]) {
            nodes[k++] = j;
            combos *= st->t->ncfg[j];
        }
    }
    for (int e = 0; e < st->ne; e++) {
        if (st->edges[e].alive) {
            edges[ne++] = (sw_live_edge){st->edges[e].src, st->edges[e].dst, st->edges[e].t};
        }
    }
    stats->residual_nodes = k;
    stats->residual_edges = ne;
    stats->residual_combinations = combos;
    sw_residual_limits lim = {fmin(max_evaluations, SW_MAX_TABLE_ENTRIES), max_evaluations};
    sw_residual_result res;
    sw_status s = sw_solve_residual(k, nodes, st->t->ncfg, st->node, ne, edges, &lim, choice, &res);
    stats->evaluations = res.work;
    stats->residual_width = res.width;
    stats->residual_table = res.largest_table;
    stats->exact = res.exact;
    stats->lower_bound = res.lower_bound;   /* of the residual problem: eliminations are exact */
    free(nodes);
    free(edges);
    return s;
}

/* The cj minimizing Eq. 2 (or its leaf form) for the neighbours' chosen configurations. */
static int best_cj(const state *st, const record *rec, const int *choice) {
    const int *nc = st->t->ncfg;
    int j = rec->j, cj_n = nc[j], best_j = 0;
    const double *nj = st->node[j];
    double best = INFINITY;
    for (int cj = 0; cj < cj_n; cj++) {
        double v;  /* summed in the same order as during the elimination */
        if (rec->kind == REC_NODE) {
            double base = nj[cj] + rec->a[(size_t)choice[rec->i] * cj_n + cj];
            v = base + rec->b[(size_t)cj * nc[rec->k] + choice[rec->k]];
        } else if (rec->kind == REC_LEAF_IN) {
            v = nj[cj] + rec->a[(size_t)choice[rec->i] * cj_n + cj];
        } else {
            v = nj[cj] + rec->a[(size_t)cj * nc[rec->i] + choice[rec->i]];
        }
        if (v < best) {
            best = v;
            best_j = cj;
        }
    }
    return best_j;
}

static void undo(const state *st, int *choice) {
    for (int r = st->nrec - 1; r >= 0; r--) {
        if (st->recs[r].kind != REC_MERGE) {
            choice[st->recs[r].j] = best_cj(st, &st->recs[r], choice);
        }
    }
}

static void free_state(state *st) {
    if (st->node) {
        for (int i = 0; i < st->n; i++) {
            free(st->node[i]);
        }
    }
    free(st->node);
    sw_table_arena_free(&st->tables);   /* every owned edge's table */
    free(st->edges);
    free(st->recs);
    free(st->products);
    free(st->sums);
    free(st->pending);
    free(st->alive);
    free(st->fresh);
    free(st->indeg);
    free(st->outdeg);
}

static sw_status init_state(state *st, const sw_tables *t) {
    st->t = t;
    st->n = t->nnodes;
    /* the tables made are about as many and as large as the edges' own, and some are reused
     * (repeated blocks) or merged: their bytes were 0.45 to 0.68 of the edges' for Inception-v3,
     * ResNet-50, VGG-16 and ResNet-18 on 8 to 32 devices (AlexNet: 1.0), so a first block of
     * 0.6 of them, mapped ahead up to there */
    size_t edge_bytes = 0;
    for (int e = 0; e < t->nedges; e++) {
        edge_bytes += sizeof(double) * (size_t)t->ncfg[t->edges[e].src] * (size_t)t->ncfg[t->edges[e].dst];
    }
    sw_table_arena_init(&st->tables, edge_bytes / 10 * 6);
    size_t n = (size_t)(t->nnodes > 0 ? t->nnodes : 1);
    st->node = calloc(n, sizeof *st->node);
    st->alive = malloc(n);
    st->fresh = malloc(n);
    st->indeg = calloc(n, sizeof *st->indeg);
    st->outdeg = calloc(n, sizeof *st->outdeg);
    /* each elimination removes a node, each merge an edge: records <= nodes + edges */
    st->recs = calloc(n + (size_t)t->nedges, sizeof *st->recs);
    st->products = calloc(n, sizeof *st->products);
    st->sums = calloc((size_t)(t->nedges > 0 ? t->nedges : 1), sizeof *st->sums);   /* a merge removes an edge */
    if (!st->node || !st->alive || !st->fresh || !st->indeg || !st->outdeg || !st->recs || !st->products || !st->sums) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < t->nnodes; i++) {
        st->alive[i] = 1;
        st->fresh[i] = 1;   /* the input's edges: any may be parallel */
        st->node[i] = malloc(sizeof(double) * (size_t)t->ncfg[i]);
        if (!st->node[i]) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        memcpy(st->node[i], t->node_cost[i], sizeof(double) * (size_t)t->ncfg[i]);
    }
    for (int e = 0; e < t->nedges; e++) {
        sw_status s = push_edge(st, t->edges[e].src, t->edges[e].dst, t->edges[e].time);
        if (s != SW_OK) {
            return s;
        }
        st->edges[st->ne - 1].owned = 0;
        st->outdeg[t->edges[e].src]++;
        st->indeg[t->edges[e].dst]++;
    }
    return SW_OK;
}

sw_status sw_search_elimination(const sw_tables *t, double max_evaluations, int *choice, double *cost,
                                sw_search_stats *stats) {
    return sw_search_elimination_marginals(t, max_evaluations, choice, cost, stats, NULL, INFINITY);
}

sw_status sw_search_elimination_marginals(const sw_tables *t, double max_evaluations, int *choice, double *cost,
                                          sw_search_stats *stats, double **marginals, double cap) {
    return sw_search_elimination_marginals_unless(t, max_evaluations, choice, cost, stats, marginals, cap, NULL,
                                                  NULL);
}

sw_status sw_search_elimination_marginals_unless(const sw_tables *t, double max_evaluations, int *choice,
                                                 double *cost, sw_search_stats *stats, double **marginals,
                                                 double cap, sw_marginals_cap_fn cap_of, void *ctx) {
    sw_search_stats local = {0};
    state st = {0};
    sw_status s = init_state(&st, t);
    /* Algorithm 1 proper (node + edge eliminations), then again with leaves */
    for (int allow_leaf = 0; allow_leaf < 2; allow_leaf++) {
        for (int made_node = 1, made_edge = 1; s == SW_OK && (made_node || made_edge);) {
            s = node_sweep(&st, allow_leaf, &local, &made_node);
            if (s == SW_OK) {
                s = edge_sweep(&st, &local, &made_edge);
            }
        }
        if (!allow_leaf) {
            for (int j = 0; j < st.n; j++) {
                local.algorithm1_residual_nodes += st.alive[j];
            }
        }
    }
    if (s == SW_OK) {
        s = solve_residual(&st, max_evaluations, choice, &local);
    }
    if (s == SW_OK) {
        undo(&st, choice);
        *cost = sw_strategy_cost(t, choice);  /* Eq. 1 summed afresh on the original tables */
        if (local.exact) {
            local.lower_bound = *cost;
        }
    }
    local.marginals_cap = INFINITY;
    if (s == SW_OK && marginals) {
        double own = cap_of ? cap_of(ctx, choice, local.lower_bound) : INFINITY;
        if (own >= 0) {   /* negative: skipped */
            local.marginals_cap = own < cap ? own : cap;
            s = sw_elim_marginals(&st, local.lower_bound, local.marginals_cap, marginals);
        }
    }
    if (stats) {
        *stats = local;
    }
    free_state(&st);
    return s;
}
