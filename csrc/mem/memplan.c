/* memplan.c -- one arena per device: buffer offsets planned from lifetimes.
 *
 * The executor runs the tasks of each device in program order on that device's
 * stream.  A buffer is live from the first task that touches it to the last one
 * (program order, tasks of any device: a copy reads its source on another
 * device's stream); parameters and momentum persist across iterations and the
 * loss tasks' outputs are read by the host after the step, so those live
 * throughout.  Buffers of one device whose lifetimes do not meet may share
 * memory.  Placement is greedy: the largest buffers first, each at the lowest
 * aligned offset free over its whole lifetime (a classic heuristic for
 * interval-graph colouring by sizes; the arena is at least the peak of live
 * bytes, and usually equal or close to it; memplan_place.c).  A device whose buffers
 * repeat another's pattern (data-parallel replicas) takes that placement's offsets
 * (memplan_cache.c).  Each device's buffers are planned apart from the others', so a large
 * graph's devices are planned in runs on several threads (plan_devices).
 *
 * Reuse across streams needs an edge: when buffer B takes over memory of an
 * earlier buffer A that a copy on another device's stream reads, that copy
 * must finish before B's first task (which runs on B's device) starts.  Only
 * the first buffer to take over A's bytes needs the edge: the first tasks of
 * later ones follow its first task on the device's stream (Inception-v3 on 16
 * devices: 3,437 edges instead of 97,666).  Those edges come with the plan
 * (reuse_from -> reuse_to) and the executor and the simulator add them to the
 * dependencies.  When a schedule gives a device several streams, its own tasks
 * are no longer in program order either, and memplan_streams.c makes the edges
 * instead (from every previous occupant of B's bytes, on whatever stream),
 * and the gradients synchronization receives get bytes of their own above the
 * rest (place_apart), so that no transfer waits for the backward pass's buffers.
 *
 * sw_memory_plan_check proves a plan safe without trusting its lifetimes: any
 * two buffers of a device whose address ranges overlap must be touched by
 * tasks that are all ordered, those of one buffer before those of the other,
 * by dependencies, reuse edges and each device's program order; persistent
 * buffers overlap nothing.
 */
#include <stdatomic.h>  /* atomic_int */
#include <stdint.h>  /* INT32_MAX */
#include <stdlib.h>  /* calloc, malloc, free, qsort */
#include <string.h>  /* memset, memcpy, memmove */
#include <unistd.h>  /* sysconf */

#include "memplan_internal.h"  /* sw_memplan_place */
#include "core/sort_keys.h"
#include "core/sort_typed.h"


/* ------------------------------------------------------------------ sizes */
typedef struct {
    int64_t bytes;
    int32_t id;
} sized_buffer;

static int larger_first(const void *pa, const void *pb) {
    const sized_buffer *a = pa, *b = pb;
    if (a->bytes != b->bytes) {
        return a->bytes > b->bytes ? -1 : 1;
    }
    return (a->id > b->id) - (a->id < b->id);
}

static inline int larger_before(const sized_buffer *a, const sized_buffer *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->id < b->id;
}

SW_DEFINE_SORT(sort_larger_first, sized_buffer, larger_before, larger_first)

/* ------------------------------------------------------------------ peaks */
typedef struct {
    int32_t at;      /* task position */
    int64_t delta;   /* bytes becoming live (> 0) or freed (< 0) */
} mem_event;

static int by_position(const void *pa, const void *pb) {
    const mem_event *a = pa, *b = pb;
    if (a->at != b->at) {
        return a->at < b->at ? -1 : 1;
    }
    return (a->delta > b->delta) - (a->delta < b->delta);   /* frees before allocations at one position */
}

static inline int event_before(const mem_event *a, const mem_event *b) {
    return a->at != b->at ? a->at < b->at : a->delta < b->delta;
}

SW_DEFINE_SORT(sort_events, mem_event, event_before, by_position)

/* One device's (or host region's) buffers gathered from the plan's arrays into its own run of
 * these (buffer ids[at + i] at i, after `at = the group's start`): the per-buffer passes below read
 * sizes and lifetimes as runs.  Read through the ids instead, a device's buffers lie far apart
 * in the plan's arrays (on 1,024 devices each read missed the cache: most of the plan's time). */
typedef struct {
    int64_t *bytes, *offset;
    int32_t *first, *last;
    int8_t *kind;
    char *remote;   /* a task on another device's stream touches it */
} gathered;

/* Peak live bytes of one device (its gathered buffers x[0 .. n)) and the position where it is first reached. */
static void peak_of(gathered x, int32_t n, mem_event *ev, int64_t *peak, int32_t *where) {
    int32_t ne = 0;
    for (int32_t i = 0; i < n; i++) {
        ev[ne++] = (mem_event){x.first[i], x.bytes[i]};
        ev[ne++] = (mem_event){x.last[i] + 1, -x.bytes[i]};
    }
    sort_events(ev, (size_t)ne);
    int64_t live = 0, best = 0;
    int32_t at = 0;
    for (int32_t e = 0; e < ne; e++) {
        live += ev[e].delta;
        if (live > best) {
            best = live;
            at = ev[e].at;
        }
    }
    *peak = best;
    *where = at;
}

/* ------------------------------------------------------------------ reuse edges */
sw_status sw_memplan_add_edge(sw_memplan_edges *e, int32_t from, int32_t to) {
    if (e->n == e->cap) {
        int64_t n = e->cap ? e->cap * 2 : 64;
        int32_t *f = realloc(e->from, sizeof *f * (size_t)n);
        if (!f) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
        }
        e->from = f;
        int32_t *t = realloc(e->to, sizeof *t * (size_t)n);
        if (!t) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
        }
        e->to = t;
        e->cap = n;
    }
    e->from[e->n] = from;
    e->to[e->n] = to;
    e->n++;
    return SW_OK;
}

void sw_memplan_edges_free(sw_memplan_edges *e) {
    free(e->from);
    free(e->to);
    *e = (sw_memplan_edges){0};
}

/* Min-segment tree over a device's offsets for reuse_edges: leaf i is the elementary byte range
 * [coord[i], coord[i + 1]) between consecutive buffer ends; a node holds the least first task
 * painted over any of its leaves (INT32_MAX: none), `tag` a chmin still owed to its children. */
typedef struct {
    int32_t *min, *tag;
    int32_t nleaf;
} first_tree;

static void tree_push(first_tree *t, int32_t node) {
    for (int c = 1; c <= 2; c++) {
        int32_t child = 2 * node + c;
        t->min[child] = t->min[child] < t->tag[node] ? t->min[child] : t->tag[node];
        t->tag[child] = t->tag[child] < t->tag[node] ? t->tag[child] : t->tag[node];
    }
    t->tag[node] = INT32_MAX;
}

/* leaves [ql, qr) take min(their value, v) */
static void tree_paint(first_tree *t, int32_t node, int32_t l, int32_t r, int32_t ql, int32_t qr, int32_t v) {
    if (qr <= l || r <= ql) {
        return;
    }
    if (ql <= l && r <= qr) {
        t->min[node] = t->min[node] < v ? t->min[node] : v;
        t->tag[node] = t->tag[node] < v ? t->tag[node] : v;
        return;
    }
    tree_push(t, node);
    int32_t mid = l + (r - l) / 2;
    tree_paint(t, 2 * node + 1, l, mid, ql, qr, v);
    tree_paint(t, 2 * node + 2, mid, r, ql, qr, v);
    t->min[node] = t->min[2 * node + 1] < t->min[2 * node + 2] ? t->min[2 * node + 1] : t->min[2 * node + 2];
}

/* the least value over leaves [ql, qr) */
static int32_t tree_least(first_tree *t, int32_t node, int32_t l, int32_t r, int32_t ql, int32_t qr) {
    if (qr <= l || r <= ql) {
        return INT32_MAX;
    }
    if (ql <= l && r <= qr) {
        return t->min[node];
    }
    tree_push(t, node);
    int32_t mid = l + (r - l) / 2;
    int32_t a = tree_least(t, 2 * node + 1, l, mid, ql, qr), b = tree_least(t, 2 * node + 2, mid, r, ql, qr);
    return a < b ? a : b;
}

/* index of `x` in the sorted, distinct coords[0..n) (it is there) */
static int32_t coord_index(const int64_t *coords, int32_t n, int64_t x) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (coords[mid] < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static int by_int64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static inline int int64_less(const int64_t *a, const int64_t *b) { return *a < *b; }

SW_DEFINE_SORT(sort_int64, int64_t, int64_less, by_int64)

/* For every buffer A of a device (gathered: x, ids mine[0 .. n)) that copies on other devices'
 * streams read: the first task of the buffer B that takes over A's bytes first after A's last
 * task (the least first task among the non-empty buffers overlapping A that start after A
 * ends); each of those copies gets an edge to it.  Later buffers over A's bytes need no edge
 * of their own: their first tasks follow B's on the device's stream.
 *
 * The answers (B's position for each A, answer[i]: -1 for none) are found by reuse_answers,
 * or, for a device repeating a placed pattern (`cache`, `entry` from sw_memplan_place_cached;
 * NULL, -1 for none), read from the pattern's: B depends only on the offsets, which the pattern
 * fixes, and on the order of the lifetimes' ends, which it keeps (data parallelism over 1,024
 * GPUs: the answers of one device serve its 127 replicas on a thread).
 * `scratch` (n entries) serves the search. */
static sw_status reuse_answers(gathered x, int32_t n, const uint8_t *asked, sw_keyed *by_first, int32_t *answer);

static sw_status reuse_edges(const sw_task_graph *g, gathered x, const int32_t *mine, int32_t n,
                             const int32_t *remote_ptr, const int32_t *remote, sw_keyed *scratch,
                             sw_place_cache *cache, int entry, sw_memplan_edges *out) {
    if (n == 0) {
        return SW_OK;
    }
    uint8_t *asked = malloc((size_t)n);
    int32_t *found = NULL;
    sw_status s = SW_OK;
    if (!asked) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
    }
    int32_t na = 0;
    for (int32_t i = 0; i < n; i++) {   /* a copy elsewhere reads it, it has bytes, and it ends */
        asked[i] = x.remote[i] && x.bytes[i] != 0 && !(x.first[i] == 0 && x.last[i] == g->ntasks);
        na += asked[i];
    }
    if (na == 0) {
        goto done;
    }
    const int32_t *answer = cache ? sw_place_cache_answers(cache, entry, asked, n) : NULL;
    if (!answer) {
        found = malloc(sizeof *found * (size_t)n);
        if (!found) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
            goto done;
        }
        if ((s = reuse_answers(x, n, asked, scratch, found)) != SW_OK) {
            goto done;
        }
        if (cache) {
            sw_place_cache_keep_answers(cache, entry, asked, found, n);
        }
        answer = found;
    }
    for (int32_t i = 0; i < n && s == SW_OK; i++) {
        if (!asked[i] || answer[i] < 0) {
            continue;
        }
        int32_t id = mine[i], next_first = x.first[answer[i]];
        for (int32_t r = remote_ptr[id]; r < remote_ptr[id + 1] && s == SW_OK; r++) {
            s = sw_memplan_add_edge(out, remote[r], next_first);
        }
    }
done:
    free(asked);
    free(found);
    return s;
}

/* The answers of reuse_edges for buffers x[0 .. n), asked[i] those asked about.  The buffers are
 * taken by first task, latest first, and the A's by last task, latest first: before A is
 * answered, every buffer starting after A's last task is painted over its bytes (a min-segment
 * tree over the device's byte ranges, holding first tasks), so A's answer is a buffer whose
 * first task is the least value over A's bytes.  O(n log n) for n buffers; scanning every buffer
 * near A instead was O(n^2) and took 90% of simulating ResNet-50 data parallel on 64 GPUs (2.7
 * million tasks, one wide buffer making every small one "near").  `by_first` (n entries) is
 * scratch. */
static sw_status reuse_answers(gathered x, int32_t n, const uint8_t *asked, sw_keyed *by_first, int32_t *answer) {
    int64_t *coords = malloc(sizeof *coords * 2 * (size_t)n);
    sw_keyed *asks = malloc(sizeof *asks * (size_t)n);
    /* each buffer's bytes and tasks, read once from the gathered arrays and then from here, by
     * the position the sorted entries carry in key2 */
    typedef struct {
        int64_t lo, hi;   /* its bytes [lo, hi) in the arena */
        int32_t first, last;
    } span;
    span *sp = malloc(sizeof *sp * (size_t)n);
    first_tree t = {NULL, NULL, 0};
    sw_status s = SW_OK;
    if (!coords || !asks || !sp) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
        goto done;
    }
    int32_t nc = 0, nb = 0, na = 0;
    for (int32_t i = 0; i < n; i++) {
        answer[i] = -1;
        int64_t bytes = x.bytes[i];
        if (bytes == 0) {
            continue;   /* takes over no bytes, and gives none */
        }
        span y = {x.offset[i], x.offset[i] + bytes, x.first[i], x.last[i]};
        sp[nb] = y;
        coords[nc++] = y.lo;
        coords[nc++] = y.hi;
        if (asked[i]) {
            asks[na++] = (sw_keyed){-(int64_t)y.last, nb, i};
        }
        by_first[nb] = (sw_keyed){-(int64_t)y.first, nb, i};   /* latest first task first */
        nb++;
    }
    if (na == 0) {
        goto done;
    }
    sort_int64(coords, (size_t)nc);
    int32_t nd = 0;
    for (int32_t i = 0; i < nc; i++) {
        if (nd == 0 || coords[i] != coords[nd - 1]) {
            coords[nd++] = coords[i];
        }
    }
    if (nd < 2) {
        goto done;   /* not reached: an asked buffer has bytes, so two distinct ends */
    }
    t.nleaf = nd - 1;
    t.min = malloc(sizeof *t.min * 4 * (size_t)t.nleaf);
    t.tag = malloc(sizeof *t.tag * 4 * (size_t)t.nleaf);
    if (!t.min || !t.tag) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
        goto done;
    }
    for (int64_t i = 0; i < 4 * (int64_t)t.nleaf; i++) {
        t.min[i] = t.tag[i] = INT32_MAX;
    }
    sw_sort_keyed(by_first, (size_t)nb);
    sw_sort_keyed(asks, (size_t)na);
    int32_t painted = 0;
    for (int32_t q = 0; q < na; q++) {
        const span *a = &sp[asks[q].key2];
        for (; painted < nb && sp[by_first[painted].key2].first > a->last; painted++) {
            const span *b = &sp[by_first[painted].key2];
            tree_paint(&t, 0, 0, t.nleaf, coord_index(coords, nd, b->lo), coord_index(coords, nd, b->hi), b->first);
        }
        int32_t next_first = tree_least(&t, 0, 0, t.nleaf, coord_index(coords, nd, a->lo),
                                        coord_index(coords, nd, a->hi));
        if (next_first == INT32_MAX) {
            continue;
        }
        /* a buffer starting at next_first: by_first[0 .. painted) holds first tasks, latest
         * first; any of equal first serves (the same position on every device of the pattern) */
        int32_t lo = 0, hi = painted - 1;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (-by_first[mid].key > next_first) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        answer[asks[q].id] = by_first[lo].id;
    }
done:
    free(coords);
    free(asks);
    free(sp);
    free(t.min);
    free(t.tag);
    return s;
}

/* Sort the reuse edges by target and drop repeats (one copy often frees memory
 * that several later buffers take over in turn). */
static sw_status unique_edges(sw_memory_plan *mp) {
    sw_keyed *e = malloc(sizeof *e * ((size_t)mp->nreuse + 1));   /* key: to, key2: from */
    if (!e) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
    }
    for (int32_t i = 0; i < mp->nreuse; i++) {
        e[i] = (sw_keyed){mp->reuse_to[i], mp->reuse_from[i], 0};
    }
    sw_sort_keyed(e, (size_t)mp->nreuse);
    int32_t n = 0;
    for (int32_t i = 0; i < mp->nreuse; i++) {
        if (n == 0 || e[i].key2 != mp->reuse_from[n - 1] || e[i].key != mp->reuse_to[n - 1]) {
            mp->reuse_from[n] = e[i].key2;
            mp->reuse_to[n] = (int32_t)e[i].key;
            n++;
        }
    }
    mp->nreuse = n;
    free(e);
    return SW_OK;
}

/* Per buffer, the tasks on other devices' streams that touch it (CSR). */
static sw_status remote_touchers(const sw_task_graph *g, int32_t **ptr_out, int32_t **ids_out) {
    int32_t *ptr = calloc((size_t)g->nbuffers + 1, sizeof *ptr);
    int32_t *ids = malloc(sizeof *ids * ((size_t)g->nio + 1));
    if (!ptr || !ids) {
        free(ptr);
        free(ids);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            if (g->buffers[g->io[k]].device != g->tasks[t].device) {
                ptr[g->io[k] + 1]++;
            }
        }
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        ptr[b + 1] += ptr[b];
    }
    int32_t *fill = malloc(sizeof *fill * ((size_t)g->nbuffers + 1));
    if (!fill) {
        free(ptr);
        free(ids);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    memcpy(fill, ptr, sizeof *fill * (size_t)g->nbuffers);
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            if (g->buffers[g->io[k]].device != g->tasks[t].device) {
                ids[fill[g->io[k]]++] = t;
            }
        }
    }
    free(fill);
    *ptr_out = ptr;
    *ids_out = ids;
    return SW_OK;
}

/* ------------------------------------------------------------------ driver */
static int group_of(const sw_task_graph *g, int32_t b, int ndev) {
    return g->buffers[b].device + (g->buffers[b].kind == SW_BUF_HOST ? ndev : 0);
}

/* Buffer ids grouped by device (CSR over devices), in id order (each group is sorted largest
 * first by the run that plans it: sort_group); a device's host buffers (SW_BUF_HOST) form group
 * ndev + device: its host region, planned like its arena. */
static sw_status by_device(const sw_task_graph *g, int ndev, int32_t **ptr_out, int32_t **ids_out) {
    int32_t *ptr = calloc(2 * (size_t)ndev + 1, sizeof *ptr);
    int32_t *ids = malloc(sizeof *ids * ((size_t)g->nbuffers + 1));
    int32_t *fill = malloc(sizeof *fill * (2 * (size_t)ndev + 1));
    if (!ptr || !ids || !fill) {
        free(ptr);
        free(ids);
        free(fill);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        ptr[group_of(g, b, ndev) + 1]++;
    }
    for (int d = 0; d < 2 * ndev; d++) {
        ptr[d + 1] += ptr[d];
    }
    memcpy(fill, ptr, sizeof *fill * 2 * (size_t)ndev);
    for (int32_t b = 0; b < g->nbuffers; b++) {
        ids[fill[group_of(g, b, ndev)]++] = b;
    }
    free(fill);
    *ptr_out = ptr;
    *ids_out = ids;
    return SW_OK;
}

/* Breakdown of one device at its peak, and the bytes written in the forward phase
 * still live when the backward phase starts (activations kept for backward). */
static void breakdown(sw_memory_plan *mp, int d, gathered x, int32_t n, int32_t at_peak, int32_t backward_start) {
    int64_t *kinds = mp->peak_kinds + (size_t)d * SW_BUF_NKINDS;
    for (int32_t i = 0; i < n; i++) {
        int kind = x.kind[i];
        if (x.first[i] <= at_peak && at_peak <= x.last[i]) {
            kinds[kind] += x.bytes[i];
        }
        int persistent = kind == SW_BUF_PARAM || kind == SW_BUF_MOMENTUM || kind == SW_BUF_RUNNING;
        if (!persistent && x.first[i] < backward_start && backward_start <= x.last[i]) {
            mp->kept[d] += x.bytes[i];
        }
    }
}

/* ------------------------------------------------------------------ synchronization apart */
/* With several streams per device, the buffers synchronization touches (the weight
 * gradients, and those received from the other replicas: buffers whose last task is in
 * the sync or update phase) get bytes of their own, above everything else.  In program
 * order every synchronization comes after the whole backward pass, so a received gradient
 * sharing bytes with the backward's buffers would hold its transfer (by a reuse edge) until
 * the backward buffer under it is done; and a buffer taking over the bytes of a gradient,
 * which lives until its layer's update, would tie the dA chain (or, with iterations back to
 * back, the next forward pass) to a low-priority synchronization.  Kept apart, a layer's
 * synchronization waits only for its dW / dB and for the synchronization lowered before it
 * (the layer after it in the forward pass, done earlier in the backward: these buffers share
 * bytes among themselves in program order).  The cost: the arena grows by the peak of those
 * buffers less what they shared with the others (ResNet-50 data parallel on 4 P100s: 1.5%).
 * `mine` (largest first) is reordered, the others first; `scratch` holds n entries. */
static int sync_touched(const sw_task_graph *g, const sw_memory_plan *mp, int32_t b) {
    return !(mp->first[b] == 0 && mp->last[b] == g->ntasks) && g->tasks[mp->last[b]].phase >= SW_PHASE_SYNC;
}

static sw_status place_apart(const sw_task_graph *g, sw_place_cache *cache, sw_memory_plan *mp, int32_t *mine,
                             int32_t n, sw_keyed *scratch, int64_t *arena) {
    int32_t nrest = 0, npool = 0;
    for (int32_t i = 0; i < n; i++) {   /* stable split: the rest, then the pool, each still largest first */
        if (!sync_touched(g, mp, mine[i])) {
            mine[nrest++] = mine[i];
        } else {
            scratch[npool++].id = mine[i];
        }
    }
    for (int32_t i = 0; i < npool; i++) {
        mine[nrest + i] = scratch[i].id;
    }
    int64_t base = 0, top = 0;
    int entry;   /* (the answers of reuse edges are not kept here: several streams make their edges apart) */
    SW_TRY(sw_memplan_place_cached(cache, mp->bytes, mp->first, mp->last, mine, nrest, mp->align, g->ntasks + 1,
                                   mp->offset, &base, &entry));
    SW_TRY(sw_memplan_place_cached(cache, mp->bytes, mp->first, mp->last, mine + nrest, npool, mp->align,
                                   g->ntasks + 1, mp->offset, &top, &entry));
    base = (base + mp->align - 1) / mp->align * mp->align;
    for (int32_t i = nrest; i < n; i++) {
        mp->offset[mine[i]] += base;
    }
    *arena = base + top;
    return SW_OK;
}

sw_status sw_memory_plan_build(const sw_task_graph *g, int ndev, int64_t align, int reuse, sw_memory_plan *mp) {
    return sw_memory_plan_build_on(g, ndev, align, reuse, NULL, mp);
}

/* Offsets given (`fixed`, e.g. a plan of one iteration repeated over several): only the
 * lifetimes, the arenas (the highest aligned end) and the reuse edges are computed.  The
 * gathered buffers x (ids mine[0 .. n)) take their offsets. */
static void place_at(gathered x, const int64_t *fixed, const int32_t *mine, int32_t n, int64_t align,
                     int64_t *arena) {
    int64_t top = 0;
    for (int32_t i = 0; i < n; i++) {
        x.offset[i] = fixed[mine[i]];
        int64_t end = (x.offset[i] + x.bytes[i] + align - 1) / align * align;
        top = end > top ? end : top;
    }
    *arena = top;
}

/* The gathered buffers of the group starting at position `at`. */
static gathered gathered_at(gathered all, int32_t at) {
    return (gathered){all.bytes + at, all.offset + at, all.first + at, all.last + at, all.kind + at, all.remote + at};
}

static void gathered_free(gathered *x) {
    free(x->bytes);
    free(x->offset);
    free(x->first);
    free(x->last);
    free(x->kind);
    free(x->remote);
    *x = (gathered){0};
}

/* Room for every buffer's size, lifetime, kind and whether another device's stream touches it,
 * at its position in ids (offsets 0; filled group by group: sort_group); iota: 0, 1, ..., as many
 * as the largest group of dev_ptr[0 .. ngroups] has buffers (*most_out; the positions of a
 * group's buffers). */
static sw_status gathered_new(const sw_task_graph *g, const int32_t *dev_ptr, int ngroups, gathered *x,
                              int32_t **iota, int32_t *most_out) {
    size_t n = (size_t)g->nbuffers + 1;
    int32_t most = 1;
    for (int d = 0; d < ngroups; d++) {
        most = dev_ptr[d + 1] - dev_ptr[d] > most ? dev_ptr[d + 1] - dev_ptr[d] : most;
    }
    *most_out = most;
    *x = (gathered){malloc(sizeof(int64_t) * n), calloc(n, sizeof(int64_t)), malloc(sizeof(int32_t) * n),
                    malloc(sizeof(int32_t) * n), malloc(n), malloc(n)};
    *iota = malloc(sizeof **iota * (size_t)most);
    if (!x->bytes || !x->offset || !x->first || !x->last || !x->kind || !x->remote || !*iota) {
        gathered_free(x);
        free(*iota);
        *iota = NULL;
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t i = 0; i < most; i++) {
        (*iota)[i] = i;
    }
    return SW_OK;
}

/* Group ids[from .. to) sorted largest first (ties by id), and its buffers gathered into x at
 * their positions; `order` (to - from entries) is scratch.  Each run of devices does its own
 * groups: on 1,024 GPUs, reading 3.8 million buffers through their ids missed the cache for
 * most of them, and that is now spread over the runs' threads. */
static void sort_group(const sw_task_graph *g, const sw_memory_plan *mp, int32_t *ids, int32_t from, int32_t to,
                       const int32_t *remote_ptr, sized_buffer *order, gathered x) {
    for (int32_t i = from; i < to; i++) {
        order[i - from] = (sized_buffer){mp->bytes[ids[i]], ids[i]};
    }
    sort_larger_first(order, (size_t)(to - from));
    for (int32_t i = from; i < to; i++) {
        int32_t b = order[i - from].id;
        ids[i] = b;
        x.bytes[i] = mp->bytes[b];
        x.first[i] = mp->first[b];
        x.last[i] = mp->last[b];
        x.kind[i] = g->buffers[b].kind;
        x.remote[i] = remote_ptr[b] != remote_ptr[b + 1];
    }
}

/* The offsets of gathered buffers x (ids mine[0 .. n)) into the plan's array. */
static void scatter_offsets(sw_memory_plan *mp, gathered x, const int32_t *mine, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        mp->offset[mine[i]] = x.offset[i];
    }
}

static sw_status build(const sw_task_graph *g, int ndev, int64_t align, int reuse, const sw_streams *st,
                       const int64_t *fixed, sw_memory_plan *mp);

sw_status sw_memory_plan_build_on(const sw_task_graph *g, int ndev, int64_t align, int reuse, const sw_streams *st,
                                  sw_memory_plan *mp) {
    return build(g, ndev, align, reuse, st, NULL, mp);
}

sw_status sw_memory_plan_build_at(const sw_task_graph *g, int ndev, int64_t align, const sw_streams *st,
                                  const int64_t *offset, sw_memory_plan *mp) {
    return build(g, ndev, align, 1, st, offset, mp);
}

/* ---- the devices, in runs planned on several threads ----
 * Each device's placement, peak, breakdown and reuse edges read only its own buffers, so runs
 * of devices are planned apart, each with its own placement cache and edge list; the lists are
 * put end to end in device order.  The offsets are those of one thread (a cached pattern's are
 * the ones placing it again gives), and so are the edges once sorted (unique_edges). */
#define PARALLEL_FROM 200000   /* buffers: fewer are planned on this thread (threads cost more than they save) */
#define MOST_THREADS 8
#define RUNS_PER_THREAD 4

static atomic_int parallel_from = PARALLEL_FROM, parallel_threads = 0;   /* (sw_memplan_parallel) */

void sw_memplan_parallel(int from, int threads, int *old_from, int *old_threads) {
    *old_from = from >= 0 ? atomic_exchange(&parallel_from, from) : atomic_load(&parallel_from);
    *old_threads = threads >= 0 ? atomic_exchange(&parallel_threads, threads) : atomic_load(&parallel_threads);
}

typedef struct {
    const sw_task_graph *g;
    sw_memory_plan *mp;
    const sw_streams *st;
    const sw_memplan_ends *ends;
    const int64_t *fixed;   /* offsets given, or NULL */
    int several, ndev, per_run;   /* per_run: devices in one run */
    int32_t most;           /* buffers of the largest group (a device's or a host region's) */
    int64_t align;
    int32_t backward_start;
    const int32_t *dev_ptr, *iota, *remote_ptr, *remote;
    int32_t *ids;
    gathered all;
    sw_memplan_edges *edges;   /* one list a run */
} device_runs;

/* Device d (and its host region): offsets, arena, peak, breakdown and reuse edges (into out).
 * cache, ev (2 n events) and scratch (n) serve one thread. */
static sw_status plan_device(const device_runs *r, int d, sw_place_cache *cache, mem_event *ev, sw_keyed *scratch,
                             sw_memplan_edges *out) {
    const sw_task_graph *g = r->g;
    sw_memory_plan *mp = r->mp;
    int ndev = r->ndev;
    int32_t *mine = r->ids + r->dev_ptr[d], n = r->dev_ptr[d + 1] - r->dev_ptr[d], at_peak;
    int entry = -1;   /* the placement's pattern in the cache, whose reuse answers serve this device too */
    gathered x = gathered_at(r->all, r->dev_ptr[d]);
    if (r->fixed) {
        place_at(x, r->fixed, mine, n, r->align, &mp->arena[d]);
    } else if (r->several) {   /* (reorders mine: x keeps the gathered order, which peak_of and breakdown need) */
        SW_TRY(place_apart(g, cache, mp, mine, n, scratch, &mp->arena[d]));
    } else {
        SW_TRY(sw_memplan_place_cached(cache, x.bytes, x.first, x.last, r->iota, n, r->align, g->ntasks + 1, x.offset,
                                       &mp->arena[d], &entry));
    }
    if (r->fixed || !r->several) {
        scatter_offsets(mp, x, mine, n);
    }
    peak_of(x, n, ev, &mp->peak[d], &at_peak);
    breakdown(mp, d, x, n, at_peak, r->backward_start);
    SW_TRY(r->several ? sw_memplan_stream_edges(g, mp, r->st, r->ends, mine, n, out)
                      : reuse_edges(g, x, mine, n, r->remote_ptr, r->remote, scratch, entry >= 0 ? cache : NULL,
                                    entry, out));
    int32_t *hosted = r->ids + r->dev_ptr[ndev + d], nh = r->dev_ptr[ndev + d + 1] - r->dev_ptr[ndev + d];
    if (nh == 0) {
        return SW_OK;
    }
    gathered hx = gathered_at(r->all, r->dev_ptr[ndev + d]);   /* the host region: only swap tasks touch it, on the swap streams */
    SW_TRY(sw_memplan_place(hx.bytes, hx.first, hx.last, r->iota, nh, r->align, g->ntasks + 1, hx.offset,
                            &mp->host_arena[d]));
    scatter_offsets(mp, hx, hosted, nh);
    return r->several ? sw_memplan_stream_edges(g, mp, r->st, r->ends, hosted, nh, out)
                      : reuse_edges(g, hx, hosted, nh, r->remote_ptr, r->remote, scratch, NULL, -1, out);
}

static sw_status plan_run(void *ctx, int run) {
    const device_runs *r = ctx;
    int d0 = run * r->per_run, d1 = d0 + r->per_run < r->ndev ? d0 + r->per_run : r->ndev;
    size_t most = (size_t)r->most;
    sw_place_cache *cache = sw_place_cache_new();
    mem_event *ev = malloc(sizeof *ev * 2 * (most + 1));
    sw_keyed *scratch = malloc(sizeof *scratch * (most + 1));
    sized_buffer *order = malloc(sizeof *order * (most + 1));
    sw_status s = cache && ev && scratch && order ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    for (int d = d0; d < d1 && s == SW_OK; d++) {
        for (int group = d; group <= r->ndev + d; group += r->ndev) {   /* its arena, then its host region */
            sort_group(r->g, r->mp, r->ids, r->dev_ptr[group], r->dev_ptr[group + 1], r->remote_ptr, order, r->all);
        }
        s = plan_device(r, d, cache, ev, scratch, &r->edges[run]);
    }
    sw_place_cache_free(cache);
    free(ev);
    free(scratch);
    free(order);
    return s;
}

/* Threads for a graph of nbuffers buffers: one below parallel_from, else parallel_threads (0: one
 * per processor, at most MOST_THREADS). */
static int plan_threads(int32_t nbuffers) {
    if (nbuffers < atomic_load(&parallel_from)) {
        return 1;
    }
    int threads = atomic_load(&parallel_threads);
    if (threads > 0) {
        return threads;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > MOST_THREADS ? MOST_THREADS : (int)cpus;
}

/* Plan every device (runs on several threads) and put the reuse edges in mp. */
static sw_status plan_devices(device_runs *r) {
    int threads = plan_threads(r->g->nbuffers);
    int runs = threads == 1 ? 1 : threads * RUNS_PER_THREAD;
    runs = runs < r->ndev ? runs : r->ndev;
    r->per_run = (r->ndev + runs - 1) / runs;
    runs = (r->ndev + r->per_run - 1) / r->per_run;
    r->edges = calloc((size_t)runs, sizeof *r->edges);
    if (!r->edges) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    sw_status s = sw_parallel_for(runs, threads, plan_run, r);
    int64_t total = 0;
    for (int q = 0; q < runs; q++) {
        total += r->edges[q].n;
    }
    sw_memory_plan *mp = r->mp;
    if (s == SW_OK && total > INT32_MAX) {
        s = SW_FAIL(SW_ERR_TOO_LARGE, "a memory plan of %lld reuse edges", (long long)total);
    }
    if (s == SW_OK) {
        mp->reuse_from = malloc(sizeof *mp->reuse_from * ((size_t)total + 1));
        mp->reuse_to = malloc(sizeof *mp->reuse_to * ((size_t)total + 1));
        if (!mp->reuse_from || !mp->reuse_to) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for reuse edges");
        }
    }
    for (int q = 0; s == SW_OK && q < runs; q++) {   /* end to end, in device order */
        if (r->edges[q].n == 0) {
            continue;   /* (its arrays were never made) */
        }
        memcpy(mp->reuse_from + mp->nreuse, r->edges[q].from, sizeof *mp->reuse_from * (size_t)r->edges[q].n);
        memcpy(mp->reuse_to + mp->nreuse, r->edges[q].to, sizeof *mp->reuse_to * (size_t)r->edges[q].n);
        mp->nreuse += (int32_t)r->edges[q].n;
    }
    for (int q = 0; q < runs; q++) {
        sw_memplan_edges_free(&r->edges[q]);
    }
    free(r->edges);
    r->edges = NULL;
    return s;
}

static sw_status build(const sw_task_graph *g, int ndev, int64_t align, int reuse, const sw_streams *st,
                       const int64_t *fixed, sw_memory_plan *mp) {
    memset(mp, 0, sizeof *mp);
    if (ndev < 1 || align < 1 || (align & (align - 1)) != 0) {
        return SW_FAIL(SW_ERR_VALUE, "a memory plan needs >= 1 device and a power-of-two alignment, got %d, %lld",
                       ndev, (long long)align);
    }
    SW_TRY(sw_streams_check(g, ndev, st));
    int several = sw_streams_several(st, ndev);
    sw_memplan_ends ends = {0};
    size_t nb = (size_t)g->nbuffers + 1, nd = (size_t)ndev;
    mp->nbuffers = g->nbuffers;
    mp->ndev = ndev;
    mp->align = align;
    mp->offset = calloc(nb, sizeof *mp->offset);
    mp->bytes = calloc(nb, sizeof *mp->bytes);
    mp->first = calloc(nb, sizeof *mp->first);
    mp->last = calloc(nb, sizeof *mp->last);
    mp->arena = calloc(nd, sizeof *mp->arena);
    mp->peak = calloc(nd, sizeof *mp->peak);
    mp->total = calloc(nd, sizeof *mp->total);
    mp->kept = calloc(nd, sizeof *mp->kept);
    mp->peak_kinds = calloc(nd * SW_BUF_NKINDS, sizeof *mp->peak_kinds);
    mp->host_arena = calloc(nd, sizeof *mp->host_arena);
    char *host = NULL;
    int32_t *dev_ptr = NULL, *ids = NULL, *remote_ptr = NULL, *remote = NULL;
    gathered all = {0};   /* every buffer at its position in ids */
    int32_t *iota = NULL;
    sw_status s = SW_OK;
    if (!mp->offset || !mp->bytes || !mp->first || !mp->last || !mp->arena || !mp->peak || !mp->total || !mp->kept ||
        !mp->peak_kinds || !mp->host_arena) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
        goto done;
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        if (g->buffers[b].device < 0 || g->buffers[b].device >= ndev) {
            s = SW_FAIL(SW_ERR_VALUE, "buffer %d lies on device %d of %d", b, g->buffers[b].device, ndev);
            goto done;
        }
        mp->bytes[b] = sw_graph_buffer_bytes(g, b);
        if (g->buffers[b].kind != SW_BUF_HOST) {
            mp->total[g->buffers[b].device] += mp->bytes[b];
        }
    }
    if ((s = sw_tg_host_reads(g, &host)) != SW_OK || (s = by_device(g, ndev, &dev_ptr, &ids)) != SW_OK ||
        (s = remote_touchers(g, &remote_ptr, &remote)) != SW_OK ||
        (several && (s = sw_memplan_ends_build(g, &ends)) != SW_OK)) {
        goto done;
    }
    sw_buffer_lifetimes(g, host, reuse, mp->first, mp->last);
    int32_t backward_start = g->ntasks;
    for (int32_t t = 0; t < g->ntasks; t++) {
        if (g->tasks[t].phase != SW_PHASE_FORWARD) {
            backward_start = t;
            break;
        }
    }
    int32_t most = 1;
    s = gathered_new(g, dev_ptr, 2 * ndev, &all, &iota, &most);
    if (s == SW_OK) {
        device_runs runs = {g, mp, st, &ends, fixed, several, ndev, 1, most, align, backward_start, dev_ptr, iota,
                            remote_ptr, remote, ids, all, NULL};
        s = plan_devices(&runs);
    }
    if (s == SW_OK) {
        s = unique_edges(mp);
    }
done:
    gathered_free(&all);
    free(iota);
    sw_memplan_ends_free(&ends);
    free(host);
    free(dev_ptr);
    free(ids);
    free(remote_ptr);
    free(remote);
    if (s != SW_OK) {
        sw_memory_plan_free(mp);
    }
    return s;
}

void sw_memory_plan_free(sw_memory_plan *mp) {
    free(mp->offset);
    free(mp->bytes);
    free(mp->first);
    free(mp->last);
    free(mp->arena);
    free(mp->peak);
    free(mp->total);
    free(mp->kept);
    free(mp->peak_kinds);
    free(mp->reuse_from);
    free(mp->reuse_to);
    free(mp->host_arena);
    memset(mp, 0, sizeof *mp);
}
