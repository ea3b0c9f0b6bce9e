/* swap.c -- offloading feature maps to host memory: swap tasks as ordinary tasks of the graph.
 *
 * A pass over a lowered task graph (AccUDNN, "AccUDNN: A GPU Memory Efficient Accelerator for
 * Training Ultra-deep Deep Neural Networks", section 5's runtime memory manager, on the one task
 * graph the executor runs and the simulator replays).  For every offloaded buffer A of device d
 * (a feature map written in the forward pass and read again in the backward pass):
 *
 *   H   = a new SW_BUF_HOST buffer (A's box) in d's host region, outside its arena
 *   A'  = a new buffer like A (kind, op, box): the prefetched copy
 *   swap_out (reads A, writes H)   inserted before original task out_at, after A's last forward
 *                                  write; depends on that write; runs on d's swap-out stream
 *   swap_in  (reads H, writes A')  inserted before original task in_at; depends on the swap_out;
 *                                  runs on d's swap-in stream
 *   every touch of A after its last forward touch (reads by construction) reads A' instead and
 *   depends on the swap_in.
 *
 * A's lifetime in program order now ends at max(last forward touch, swap_out) and A' lives from
 * the swap_in on, so the memory plan (memplan.c) lets other buffers take A's bytes in between.
 * With several streams per device, memplan_streams.c and hazards.c add the edges that make that
 * safe: a buffer taking A's bytes waits for the swap_out (the offload must finish before memory
 * is released), a swap_in waits for the last readers of the bytes it takes (a prefetch is
 * suspended until memory is released), as the paper's two copy streams do.  Buffer ids of the
 * original graph keep their meaning; tasks are renumbered (origin[] maps them back).
 */
#include <stdlib.h>  /* calloc, malloc, free, qsort */
#include <string.h>  /* memset */

#include "core/sort_keys.h"
#include "swap_internal.h"

#define NONE (-1)

/* ------------------------------------------------------------------ touches and candidates */
sw_status sw_touches_build(const sw_task_graph *g, sw_touches *tl) {
    memset(tl, 0, sizeof *tl);
    tl->ptr = calloc((size_t)g->nbuffers + 2, sizeof *tl->ptr);
    tl->ids = malloc(sizeof *tl->ids * ((size_t)g->nio + 1));
    tl->writes = calloc((size_t)g->nio + 1, 1);
    int32_t *fill = malloc(sizeof *fill * ((size_t)g->nbuffers + 1));
    if (!tl->ptr || !tl->ids || !tl->writes || !fill) {
        free(fill);
        sw_touches_free(tl);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the touches of %d buffers", g->nbuffers);
    }
    for (int32_t k = 0; k < g->nio; k++) {
        tl->ptr[g->io[k] + 1]++;
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        tl->ptr[b + 1] += tl->ptr[b];
        fill[b] = tl->ptr[b];
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        int32_t begin = g->io_ptr[t], reads_end = begin + g->tasks[t].nreads;
        for (int32_t k = begin; k < g->io_ptr[t + 1]; k++) {
            int32_t b = g->io[k];
            if (fill[b] > tl->ptr[b] && tl->ids[fill[b] - 1] == t) {   /* named twice: one touch, writing if either */
                tl->writes[fill[b] - 1] |= (uint8_t)(k >= reads_end);
                continue;
            }
            tl->writes[fill[b]] = (uint8_t)(k >= reads_end);
            tl->ids[fill[b]++] = t;
        }
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {   /* the rest of each row is unused (repeats) */
        for (int32_t k = fill[b]; k < tl->ptr[b + 1]; k++) {
            tl->ids[k] = NONE;
        }
    }
    free(fill);
    return SW_OK;
}

void sw_touches_free(sw_touches *tl) {
    free(tl->ptr);
    free(tl->ids);
    free(tl->writes);
    memset(tl, 0, sizeof *tl);
}

int sw_swap_candidate(const sw_task_graph *g, const sw_touches *tl, int32_t b, const char *host_read,
                      sw_swap_span *span) {
    int kind = g->buffers[b].kind;   /* float32 feature maps (a host copy is float32): not statistics */
    if ((kind != SW_BUF_ACTIVATION && kind != SW_BUF_REGION && kind != SW_BUF_RECV && kind != SW_BUF_PARTIAL) ||
        sw_buffer_lives_throughout(g, b, host_read)) {
        return 0;
    }
    int32_t lo = tl->ptr[b], hi = tl->ptr[b + 1];
    while (hi > lo && tl->ids[hi - 1] == NONE) {
        hi--;
    }
    if (hi - lo < 2 || !tl->writes[lo] || g->tasks[tl->ids[lo]].phase != SW_PHASE_FORWARD) {
        return 0;
    }
    sw_swap_span s = {NONE, NONE, NONE, tl->ids[hi - 1]};
    for (int32_t k = lo; k < hi; k++) {
        int32_t t = tl->ids[k];
        int forward = g->tasks[t].phase == SW_PHASE_FORWARD;
        if (forward && s.first_bwd == NONE) {
            s.last_fwd = t;
            s.last_write = tl->writes[k] ? t : s.last_write;
        } else if (forward || tl->writes[k]) {
            return 0;   /* touched in the forward phase again, or written after it: not a plain feature map */
        } else if (s.first_bwd == NONE) {
            s.first_bwd = t;
        }
    }
    if (s.first_bwd == NONE || s.last_write == NONE) {
        return 0;
    }
    *span = s;
    return 1;
}

/* ------------------------------------------------------------------ the rewrite */
void sw_swap_streams_free(sw_swap_streams *st) {
    free(st->stream);
    free(st->stream_device);
    free(st->stream_priority);
    free(st->origin);
    memset(st, 0, sizeof *st);
}

sw_streams sw_swap_streams_view(const sw_swap_streams *st) {
    return (sw_streams){.ntasks = st->ntasks, .nstreams = st->nstreams, .stream = st->stream,
                        .stream_device = st->stream_device, .stream_priority = st->stream_priority};
}

/* Check the spec against g; span[i] gets entry i's buffer's uses. */
static sw_status check_spec(const sw_task_graph *g, int ndev, const sw_swap_spec *spec, const sw_touches *tl,
                            const char *host_read, sw_swap_span *span, char *seen) {
    for (int32_t i = 0; i < spec->n; i++) {
        int32_t b = spec->buffer[i];
        if (b < 0 || b >= g->nbuffers || g->buffers[b].device < 0 || g->buffers[b].device >= ndev) {
            return SW_FAIL(SW_ERR_VALUE, "swap entry %d: no buffer %d in a graph of %d buffers", i, b, g->nbuffers);
        }
        if (seen[b]) {
            return SW_FAIL(SW_ERR_VALUE, "swap entry %d: buffer %d is offloaded twice", i, b);
        }
        seen[b] = 1;
        if (!sw_swap_candidate(g, tl, b, host_read, &span[i])) {
            return SW_FAIL(SW_ERR_VALUE, "swap entry %d: buffer %d is not a feature map written in the forward "
                           "pass and only read in the backward pass", i, b);
        }
        if (spec->out_at[i] <= span[i].last_write || spec->out_at[i] > g->ntasks ||
            spec->in_at[i] < spec->out_at[i] || spec->in_at[i] > span[i].first_bwd) {
            return SW_FAIL(SW_ERR_VALUE, "swap entry %d (buffer %d): the swap-out must come after task %d and the "
                           "prefetch after it, by task %d; got before tasks %d and %d", i, b, span[i].last_write,
                           span[i].first_bwd, spec->out_at[i], spec->in_at[i]);
        }
    }
    return SW_OK;
}

typedef struct {
    const sw_task_graph *g;
    sw_task_graph *out;
    const sw_swap_spec *spec;
    const sw_swap_span *span;
    int32_t *map;          /* original task -> new id */
    int32_t *swapped;      /* original buffer -> entry index, or NONE */
    int32_t *in_task;      /* entry -> its swap_in's new id */
    int32_t *out_task;     /* entry -> its swap_out's new id */
    int32_t nb0;           /* buffers of the original graph */
    int32_t *io, *deps;    /* scratch */
} rewrite;

/* A swap task to insert: sw_keyed {key: the original task it goes before, key2: 0 swap_out or
 * 1 swap_in, id: the spec entry}, sorted by sw_by_keys (position, then swap_outs first). */
static sw_status emit_swap(rewrite *R, const sw_keyed *ins) {
    int32_t at = (int32_t)ins->key, kind = ins->key2, i = ins->id, b = R->spec->buffer[i];
    const sw_buffer *buf = &R->g->buffers[b];
    const sw_task *writer = &R->g->tasks[R->span[i].last_write];
    sw_task t;
    memset(&t, 0, sizeof t);
    t.kind = (int8_t)(kind == 0 ? SW_TASK_SWAP_OUT : SW_TASK_SWAP_IN);
    t.phase = sw_phase_at(R->g, at);
    t.device = buf->device;
    t.src_device = NONE;
    t.op = buf->op;
    t.worker = writer->worker;
    t.slot = NONE;
    sw_tg_set_task_box32(R->out, &t, &buf->box);
    t.elements = sw_box32_volume(&buf->box);
    int32_t host = R->nb0 + 2 * i, copy = host + 1;
    int32_t from = kind == 0 ? b : host, to = kind == 0 ? host : copy;
    int32_t dep = kind == 0 ? R->map[R->span[i].last_write] : R->out_task[i];
    sw_task_io io = {&from, 1, &to, 1};
    return sw_tg_task(R->out, &t, &dep, 1, &io, kind == 0 ? &R->out_task[i] : &R->in_task[i]);
}

static sw_status emit_task(rewrite *R, int32_t t) {
    const sw_task_graph *g = R->g;
    int32_t nd = 0, n = 0;
    for (int32_t k = g->dep_ptr[t]; k < g->dep_ptr[t + 1]; k++) {
        R->deps[nd++] = R->map[g->deps[k]];
    }
    for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
        int32_t b = g->io[k], i = R->swapped[b];
        if (i != NONE && t > R->span[i].last_fwd) {   /* a backward read: the prefetched copy */
            R->io[n++] = R->nb0 + 2 * i + 1;
            R->deps[nd++] = R->in_task[i];
        } else {
            R->io[n++] = b;
        }
    }
    int nreads = g->tasks[t].nreads;
    sw_task_io io = {R->io, nreads, R->io + nreads, n - nreads};
    sw_task copy = sw_tg_task_for(R->out, g, &g->tasks[t]);
    return sw_tg_task(R->out, &copy, R->deps, (int)nd, &io, &R->map[t]);
}

static sw_status make_streams(const sw_task_graph *out, int ndev, const int32_t *origin, sw_swap_streams *st) {
    int32_t n = out->ntasks, ns = 3 * ndev;
    st->ntasks = n;
    st->nstreams = ns;
    st->stream = malloc(sizeof *st->stream * ((size_t)n + 1));
    st->stream_device = malloc(sizeof *st->stream_device * ((size_t)ns + 1));
    st->stream_priority = malloc(sizeof *st->stream_priority * ((size_t)ns + 1));
    if (!st->stream || !st->stream_device || !st->stream_priority) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the streams of a swapped graph");
    }
    for (int d = 0; d < ndev; d++) {
        st->stream_device[d] = st->stream_device[ndev + 2 * d] = st->stream_device[ndev + 2 * d + 1] = d;
        st->stream_priority[d] = 0;
        st->stream_priority[ndev + 2 * d] = st->stream_priority[ndev + 2 * d + 1] = 1;
    }
    for (int32_t t = 0; t < n; t++) {
        const sw_task *task = &out->tasks[t];
        st->stream[t] = origin[t] != NONE ? task->device
                        : task->kind == SW_TASK_SWAP_OUT ? ndev + 2 * task->device
                                                         : ndev + 2 * task->device + 1;
    }
    return SW_OK;
}

sw_status sw_swap_apply(const sw_task_graph *g, int ndev, const sw_swap_spec *spec, sw_task_graph *out,
                        sw_swap_streams *st) {
    memset(out, 0, sizeof *out);
    sw_tg_copy_header(g, out);
    memset(st, 0, sizeof *st);
    if (ndev < 1 || spec->n < 0) {
        return SW_FAIL(SW_ERR_VALUE, "a swap plan needs >= 1 device and >= 0 entries");
    }
    int32_t n = spec->n;
    size_t nn = (size_t)n + 1;
    sw_touches tl = {0};
    char *host_read = NULL, *seen = calloc((size_t)g->nbuffers + 1, 1);
    sw_swap_span *span = malloc(sizeof *span * nn);
    sw_keyed *ins = malloc(sizeof *ins * 2 * nn);
    rewrite R = {.g = g, .out = out, .spec = spec, .span = span, .nb0 = g->nbuffers};
    R.map = malloc(sizeof *R.map * ((size_t)g->ntasks + 1));
    R.swapped = malloc(sizeof *R.swapped * ((size_t)g->nbuffers + 1));
    R.in_task = malloc(sizeof *R.in_task * nn);
    R.out_task = malloc(sizeof *R.out_task * nn);
    R.io = malloc(sizeof *R.io * ((size_t)g->nio + 1));
    R.deps = malloc(sizeof *R.deps * ((size_t)g->ndeps + (size_t)g->nio + 1));
    int32_t *origin = NULL;
    sw_status s = SW_OK;
    if (!seen || !span || !ins || !R.map || !R.swapped || !R.in_task || !R.out_task || !R.io || !R.deps) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory swapping %d buffers", n);
        goto done;
    }
    if ((s = sw_touches_build(g, &tl)) != SW_OK || (s = sw_tg_host_reads(g, &host_read)) != SW_OK ||
        (s = check_spec(g, ndev, spec, &tl, host_read, span, seen)) != SW_OK) {
        goto done;
    }
    /* the original buffers, then a host copy and a prefetched copy per entry */
    for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {
        int32_t id;
        const sw_buffer *buf = &g->buffers[b];
        s = sw_tg_buffer_copy(out, buf, &id);
        R.swapped[b] = NONE;
    }
    for (int32_t i = 0; i < n && s == SW_OK; i++) {
        const sw_buffer *buf = &g->buffers[spec->buffer[i]];
        int32_t id;
        sw_box box = sw_buffer_box(buf);
        s = sw_tg_buffer(out, buf->device, SW_BUF_HOST, buf->op, &box, &id);
        if (s == SW_OK) {
            s = sw_tg_buffer_copy(out, buf, &id);
        }
        R.swapped[spec->buffer[i]] = i;
        ins[2 * i] = (sw_keyed){spec->out_at[i], 0, i};
        ins[2 * i + 1] = (sw_keyed){spec->in_at[i], 1, i};
    }
    qsort(ins, 2 * (size_t)n, sizeof *ins, sw_by_keys);
    origin = malloc(sizeof *origin * ((size_t)g->ntasks + 2 * nn));
    if (s == SW_OK && !origin) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory swapping %d buffers", n);
    }
    int32_t next = 0;
    for (int32_t t = 0; t <= g->ntasks && s == SW_OK; t++) {
        for (; next < 2 * n && ins[next].key == t && s == SW_OK; next++) {
            s = emit_swap(&R, &ins[next]);
            if (s == SW_OK) {
                origin[out->ntasks - 1] = NONE;
            }
        }
        if (t < g->ntasks && s == SW_OK) {
            s = emit_task(&R, t);
            if (s == SW_OK) {
                origin[out->ntasks - 1] = t;
            }
        }
    }
    if (s == SW_OK) {
        s = make_streams(out, ndev, origin, st);
    }
    if (s == SW_OK) {
        st->origin = origin;
        origin = NULL;
    }
done:
    sw_touches_free(&tl);
    free(host_read);
    free(seen);
    free(span);
    free(ins);
    free(R.map);
    free(R.swapped);
    free(R.in_task);
    free(R.out_task);
    free(R.io);
    free(R.deps);
    free(origin);
    if (s != SW_OK) {
        sw_task_graph_free(out);
        sw_swap_streams_free(st);
    }
    return s;
}
