/* recompute.c -- recomputing feature maps in the backward pass: recompute tasks as ordinary tasks.
 *
 * A pass over a lowered task graph, the same shape as swap.c's.  For every recomputed buffer A
 * (device d, written by forward task F, first read after the forward phase by task B):
 *
 *   A'          = a new buffer like A (kind, op, box, worker): the recomputed copy
 *   recompute   = F's task record with kind SW_TASK_RECOMPUTE, reading F's reads and writing A',
 *                 inserted right before B (or before the recompute of a map that reads A, if that
 *                 comes first: the recompute of A's consumer reads A'); depends on F's dependencies
 *                 and on the recomputes of its inputs
 *   every touch of A after its last forward touch (reads by construction) reads A' instead and
 *   depends on the recompute.
 *
 * A staging region R (a worker's input gathered from the producer's shards by forward copies,
 * SW_BUF_REGION, the producer's op) is recomputed the same way when its producer is chosen: each
 * copy that wrote it runs again in the backward phase into R' (reading the recomputed shard where
 * that is recomputed too), and a join (when there are several pieces) stands for them all.  That
 * is the re-gather of tensor-parallel training: the bytes cross the links once more instead of the
 * region staying live from the forward pass to its consumer's backward.  Only where re-gathering
 * cannot keep a source alive longer: each source shard is recomputed itself, or lives until R's
 * first backward reader anyway.
 *
 * Recomputes of one insertion point go in forward order (a producer's before its consumer's).
 * A's lifetime in program order now ends at its last forward touch, A' lives from the recompute to
 * A's last backward read, and F's non-recomputed inputs live until the recompute reads them:
 * the memory plan (memplan.c) sees exactly that.  The runtime runs a recompute with the forward
 * kernel of its op (the same worker, box and step, so dropout draws the same mask: csrc/cpu/dropout.c
 * draws it from (seed, step, element)), and the simulator times it as its forward task.
 * Buffer ids of the original graph keep their meaning; tasks are renumbered (origin[] maps them back).
 */
#include <stdlib.h>  /* calloc, malloc, free, qsort */
#include <string.h>  /* memset */

#include "core/sort_keys.h"
#include "swap_internal.h"   /* sw_touches, sw_swap_candidate: the touches of each buffer */

#define NONE (-1)

/* Is any touch of buffer r by a task in (after, before) a write? */
static int written_between(const sw_touches *tl, int32_t r, int32_t after, int32_t before) {
    for (int32_t k = tl->ptr[r]; k < tl->ptr[r + 1] && tl->ids[k] != NONE; k++) {
        if (tl->ids[k] > after && tl->ids[k] < before && tl->writes[k]) {
            return 1;
        }
    }
    return 0;
}

/* The last task touching buffer b (NONE: none). */
static int32_t last_touch(const sw_touches *tl, int32_t b) {
    int32_t last = NONE;
    for (int32_t k = tl->ptr[b]; k < tl->ptr[b + 1] && tl->ids[k] != NONE; k++) {
        last = tl->ids[k];
    }
    return last;
}

/* Can staging region b (a swap candidate with uses *span) be gathered again in the backward
 * phase?  Every write is a forward copy writing b alone from one source that nothing writes
 * before b's first backward reader, and that source is recomputed (entry[] already holds the
 * lower buffer ids: a producer's shards are made before the regions gathered from them) or lives
 * until that reader anyway. */
static int region_candidate(const sw_task_graph *g, const sw_touches *tl, int32_t b, const char *host_read,
                            const int32_t *entry, const sw_swap_span *span) {
    for (int32_t k = tl->ptr[b]; k < tl->ptr[b + 1] && tl->ids[k] != NONE; k++) {
        if (!tl->writes[k]) {
            continue;
        }
        int32_t t = tl->ids[k];
        const int32_t *w, *r;
        if (g->tasks[t].kind != SW_TASK_COPY || g->tasks[t].phase != SW_PHASE_FORWARD ||
            sw_tg_writes(g, t, &w) != 1 || w[0] != b || sw_tg_reads(g, t, &r) != 1) {
            return 0;
        }
        int32_t src = r[0];
        int kind = g->buffers[src].kind;
        if (kind == SW_BUF_STATS || kind == SW_BUF_RUNNING || written_between(tl, src, t, span->first_bwd)) {
            return 0;
        }
        if (src >= b || (entry[src] == NONE && !sw_buffer_lives_throughout(g, src, host_read) &&
                         last_touch(tl, src) < span->first_bwd)) {
            return 0;
        }
    }
    return 1;
}

/* Would gathering region b again join two segments?  When its consumer's map is recomputed,
 * that recompute reads b, so b's copies would run at the recompute's point, pulling the
 * recomputes of b's sources (and theirs) there too: the segments on both sides of b would
 * become one, re-run at its start and live through its backward (recomputing every map of a
 * tensor-parallel Llama then kept more than leaving its regions alone).  Kept instead, b is
 * the checkpoint between them.  (entry[] holds every feature map's choice already.) */
static int joins_segments(const sw_task_graph *g, const sw_touches *tl, int32_t b, const int32_t *entry) {
    int feeds_recompute = 0, reads_recomputed = 0;
    for (int32_t k = tl->ptr[b]; k < tl->ptr[b + 1] && tl->ids[k] != NONE; k++) {
        int32_t t = tl->ids[k];
        const int32_t *io;
        if (g->tasks[t].phase != SW_PHASE_FORWARD) {
            break;
        }
        if (tl->writes[k]) {   /* a copy: does it read a recomputed shard? */
            reads_recomputed |= sw_tg_reads(g, t, &io) == 1 && entry[io[0]] != NONE;
        } else {               /* a reader: does it write a recomputed map? */
            int nw = sw_tg_writes(g, t, &io);
            for (int q = 0; q < nw; q++) {
                feeds_recompute |= entry[io[q]] != NONE;
            }
        }
    }
    return feeds_recompute && reads_recomputed;
}

/* Can buffer b be recomputed (recompute.h)?  *span gets its uses. */
static int candidate(const sw_task_graph *g, const sw_touches *tl, int32_t b, const char *host_read,
                     const int32_t *entry, sw_swap_span *span) {
    int kind = g->buffers[b].kind;
    if ((kind != SW_BUF_ACTIVATION && kind != SW_BUF_REGION) || !sw_swap_candidate(g, tl, b, host_read, span)) {
        return 0;
    }
    if (kind == SW_BUF_REGION) {
        return region_candidate(g, tl, b, host_read, entry, span);
    }
    int32_t f = span->last_write;
    const int32_t *w, *r;
    if (g->tasks[f].kind != SW_TASK_FORWARD || sw_tg_writes(g, f, &w) != 1 || w[0] != b) {
        return 0;
    }
    for (int32_t k = tl->ptr[b]; k < tl->ptr[b + 1] && tl->ids[k] != NONE; k++) {
        if (tl->writes[k] && tl->ids[k] != f) {   /* written by another task too (a join, a sum) */
            return 0;
        }
    }
    int nr = sw_tg_reads(g, f, &r);
    for (int k = 0; k < nr; k++) {
        int kind = g->buffers[r[k]].kind;
        if (kind == SW_BUF_STATS || kind == SW_BUF_RUNNING || written_between(tl, r[k], f, span->first_bwd)) {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    const sw_task_graph *g;
    sw_task_graph *out;
    int32_t n;             /* buffers recomputed */
    int32_t *buffer;       /* entry -> its buffer */
    sw_swap_span *span;    /* entry -> its buffer's uses */
    int32_t *entry;        /* original buffer -> entry, or NONE */
    int32_t *task;         /* entry -> its recompute's new id */
    int32_t *map;          /* original task -> new id */
    int32_t nb0;           /* buffers of the original graph: A' of entry i is nb0 + i */
    const sw_touches *tl;  /* the touches of every buffer of g: a region's writers */
    int32_t *io, *deps;    /* scratch */
    int32_t *pieces;       /* scratch: a re-gathered region's copies, for its join */
} rewrite;

/* The tasks that wrote entry i's buffer in the forward phase, in program order, into out[]
 * (its forward task; a region's copies); their count. */
static int32_t writers(const rewrite *R, int32_t i, int32_t *out) {
    int32_t b = R->buffer[i], n = 0;
    for (int32_t k = R->tl->ptr[b]; k < R->tl->ptr[b + 1] && R->tl->ids[k] != NONE; k++) {
        if (R->tl->writes[k]) {
            out[n++] = R->tl->ids[k];
        }
    }
    return n;
}

/* Buffer b as task t reads it: A' where b is recomputed and t comes after its forward use (a
 * recompute, given t = its insertion point, or a backward task); adds the dependency. */
static int32_t as_read(rewrite *R, int32_t b, int32_t t, int32_t *nd) {
    int32_t i = R->entry[b];
    if (i == NONE || t <= R->span[i].last_fwd) {
        return b;
    }
    R->deps[(*nd)++] = R->task[i];
    return R->nb0 + i;
}

/* Region entry i gathered again before task `at`: each forward copy that wrote it, now in the
 * backward phase, reading its source as `at` reads it (the recomputed shard where there is one)
 * and writing R'; then a join of them when there are several (the entry's task is what readers
 * of R' depend on). */
static sw_status emit_regather(rewrite *R, int32_t i, int32_t at) {
    const sw_task_graph *g = R->g;
    int8_t phase = sw_phase_at(g, at);
    int32_t n = writers(R, i, R->pieces);
    for (int32_t q = 0; q < n; q++) {
        int32_t c = R->pieces[q], nd = 0;
        for (int32_t k = g->dep_ptr[c]; k < g->dep_ptr[c + 1]; k++) {
            R->deps[nd++] = R->map[g->deps[k]];
        }
        const int32_t *r;
        sw_tg_reads(g, c, &r);
        R->io[0] = as_read(R, r[0], at, &nd);
        R->io[1] = R->nb0 + i;
        sw_task t = sw_tg_task_for(R->out, g, &g->tasks[c]);
        t.phase = phase;
        sw_task_io io = {R->io, 1, R->io + 1, 1};
        SW_TRY(sw_tg_task(R->out, &t, R->deps, (int)nd, &io, &R->pieces[q]));
    }
    if (n == 1) {
        R->task[i] = R->pieces[0];
        return SW_OK;
    }
    sw_task join = g->tasks[R->span[i].last_write];   /* on the region's device, for its consumer's worker */
    join.kind = SW_TASK_JOIN;
    join.src_device = NONE;
    join.slot = NONE;
    join.nreads = 0;
    join.elements = join.nbytes = 0;
    join.box = 0;   /* none */
    sw_task_io none = {NULL, 0, NULL, 0};
    return sw_tg_task(R->out, &join, R->pieces, (int)n, &none, &R->task[i]);
}

static sw_status emit_recompute(rewrite *R, int32_t i, int32_t at) {
    const sw_task_graph *g = R->g;
    if (g->buffers[R->buffer[i]].kind == SW_BUF_REGION) {
        return emit_regather(R, i, at);
    }
    int32_t f = R->span[i].last_write, nd = 0, n = 0;
    for (int32_t k = g->dep_ptr[f]; k < g->dep_ptr[f + 1]; k++) {
        R->deps[nd++] = R->map[g->deps[k]];
    }
    const int32_t *r;
    int nr = sw_tg_reads(g, f, &r);
    for (int k = 0; k < nr; k++) {
        R->io[n++] = as_read(R, r[k], at, &nd);
    }
    R->io[n++] = R->nb0 + i;
    sw_task t = sw_tg_task_for(R->out, g, &g->tasks[f]);
    t.kind = SW_TASK_RECOMPUTE;
    t.phase = sw_phase_at(g, at);
    sw_task_io io = {R->io, nr, R->io + nr, 1};
    return sw_tg_task(R->out, &t, R->deps, (int)nd, &io, &R->task[i]);
}

static sw_status emit_task(rewrite *R, int32_t t) {
    const sw_task_graph *g = R->g;
    int32_t nd = 0, n = 0;
    for (int32_t k = g->dep_ptr[t]; k < g->dep_ptr[t + 1]; k++) {
        R->deps[nd++] = R->map[g->deps[k]];
    }
    for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
        R->io[n++] = as_read(R, g->io[k], t, &nd);
    }
    int nreads = g->tasks[t].nreads;
    sw_task_io io = {R->io, nreads, R->io + nreads, n - nreads};
    sw_task copy = sw_tg_task_for(R->out, g, &g->tasks[t]);
    return sw_tg_task(R->out, &copy, R->deps, (int)nd, &io, &R->map[t]);
}

/* Choose the entries (the candidates of the chosen ops) and where each recompute goes: sorted
 * (insertion point, forward task, entry) in ins. */
static sw_status choose(rewrite *R, int nops, const sw_recompute_spec *spec, const sw_touches *tl,
                        const char *host_read, sw_keyed *ins) {
    const sw_task_graph *g = R->g;
    char *chosen = calloc((size_t)nops + 1, 1);
    if (!chosen) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory choosing what to recompute");
    }
    for (int32_t k = 0; k < spec->n; k++) {
        if (spec->op[k] < 0 || spec->op[k] >= nops) {
            free(chosen);
            return SW_FAIL(SW_ERR_VALUE, "recompute entry %d: no op %d in a graph of %d ops", k, spec->op[k], nops);
        }
        chosen[spec->op[k]] = 1;
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        R->entry[b] = NONE;
    }
    /* feature maps first, then the regions gathered from them (whose choice reads theirs) */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t b = 0; b < g->nbuffers; b++) {
            sw_swap_span s;
            if ((g->buffers[b].kind == SW_BUF_REGION) == pass && g->buffers[b].op >= 0 && g->buffers[b].op < nops &&
                chosen[g->buffers[b].op] && candidate(g, tl, b, host_read, R->entry, &s) &&
                !(pass == 1 && joins_segments(g, tl, b, R->entry))) {
                R->entry[b] = R->n;
                R->buffer[R->n] = b;
                R->span[R->n] = s;
                ins[R->n] = (sw_keyed){s.last_write, 0, R->n};
                R->n++;
            }
        }
    }
    free(chosen);
    qsort(ins, (size_t)R->n, sizeof *ins, sw_by_keys);   /* by forward task */
    int64_t *at = malloc(sizeof *at * ((size_t)R->n + 1));
    if (!at) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory choosing what to recompute");
    }
    for (int32_t i = 0; i < R->n; i++) {
        at[i] = R->span[i].first_bwd;
    }
    /* a recompute reading a recomputed map pulls that map's recompute to its own point: consumers
     * first (a consumer's forward task comes after its producer's, a region's copies after the
     * shards they read), so each point is final when read */
    for (int32_t a = R->n - 1; a >= 0; a--) {
        int32_t i = ins[a].id;
        int32_t nw = writers(R, i, R->pieces);
        for (int32_t q = 0; q < nw; q++) {
            const int32_t *r;
            int nr = sw_tg_reads(g, R->pieces[q], &r);
            for (int k = 0; k < nr; k++) {
                int32_t j = R->entry[r[k]];
                if (j != NONE && at[i] < at[j]) {
                    at[j] = at[i];
                }
            }
        }
    }
    for (int32_t a = 0; a < R->n; a++) {
        int32_t i = ins[a].id;
        ins[a] = (sw_keyed){at[i], R->span[i].last_write, i};
    }
    free(at);
    qsort(ins, (size_t)R->n, sizeof *ins, sw_by_keys);
    return SW_OK;
}

sw_status sw_recompute_apply(const sw_task_graph *g, int nops, const sw_recompute_spec *spec, sw_task_graph *out,
                             int32_t **origin_out, int32_t *nrecomputed) {
    memset(out, 0, sizeof *out);
    sw_tg_copy_header(g, out);
    *origin_out = NULL;
    *nrecomputed = 0;
    if (spec->n < 0) {
        return SW_FAIL(SW_ERR_VALUE, "a recompute spec needs >= 0 ops");
    }
    size_t nb = (size_t)g->nbuffers + 1;
    sw_touches tl = {0};
    char *host_read = NULL;
    sw_keyed *ins = malloc(sizeof *ins * nb);
    rewrite R = {.g = g, .out = out, .nb0 = g->nbuffers, .tl = &tl};
    R.buffer = malloc(sizeof *R.buffer * nb);
    R.span = malloc(sizeof *R.span * nb);
    R.entry = malloc(sizeof *R.entry * nb);
    R.task = malloc(sizeof *R.task * nb);
    R.map = malloc(sizeof *R.map * ((size_t)g->ntasks + 1));
    R.io = malloc(sizeof *R.io * ((size_t)g->nio + 1));
    R.deps = malloc(sizeof *R.deps * ((size_t)g->ndeps + (size_t)g->nio + 1));
    R.pieces = malloc(sizeof *R.pieces * ((size_t)g->ntasks + 1));   /* a buffer's writers: at most every task */
    int32_t *origin = NULL;
    sw_status s = SW_OK;
    if (!ins || !R.buffer || !R.span || !R.entry || !R.task || !R.map || !R.io || !R.deps || !R.pieces) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory recomputing feature maps");
        goto done;
    }
    if ((s = sw_touches_build(g, &tl)) != SW_OK || (s = sw_tg_host_reads(g, &host_read)) != SW_OK ||
        (s = choose(&R, nops, spec, &tl, host_read, ins)) != SW_OK) {
        goto done;
    }
    /* the original buffers, then a recomputed copy per entry */
    for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {
        int32_t id;
        const sw_buffer *buf = &g->buffers[b];
        s = sw_tg_buffer_copy(out, buf, &id);
    }
    for (int32_t i = 0; i < R.n && s == SW_OK; i++) {
        const sw_buffer *buf = &g->buffers[R.buffer[i]];
        int32_t id;
        s = sw_tg_buffer_copy(out, buf, &id);
    }
    /* the tasks, a recompute per map, and per region its copies again (each a task of g) and a join */
    origin = malloc(sizeof *origin * (2 * (size_t)g->ntasks + (size_t)R.n + 1));
    if (s == SW_OK && !origin) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory recomputing %d feature maps", R.n);
    }
    int32_t next = 0;
    for (int32_t t = 0; t < g->ntasks && s == SW_OK; t++) {
        for (; next < R.n && ins[next].key == t && s == SW_OK; next++) {
            int32_t first = out->ntasks;   /* a region's re-gather adds its copies and a join */
            s = emit_recompute(&R, ins[next].id, t);
            for (int32_t k = first; s == SW_OK && k < out->ntasks; k++) {
                origin[k] = NONE;
            }
        }
        if (s == SW_OK) {
            s = emit_task(&R, t);
        }
        if (s == SW_OK) {
            origin[out->ntasks - 1] = t;
        }
    }
    if (s == SW_OK) {
        *origin_out = origin;
        origin = NULL;
        *nrecomputed = R.n;
    }
done:
    sw_touches_free(&tl);
    free(host_read);
    free(ins);
    free(R.buffer);
    free(R.span);
    free(R.entry);
    free(R.task);
    free(R.map);
    free(R.io);
    free(R.deps);
    free(R.pieces);
    free(origin);
    if (s != SW_OK) {
        sw_task_graph_free(out);
    }
    return s;
}
