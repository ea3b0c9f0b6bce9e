/* taskgraph.c -- growing a task graph: buffers, tasks and their dependencies.
 *
 * Storage (see struct sw_task_graph in internal.h):
 *   tasks[ntasks]          one sw_task each, in program order
 *   dep_ptr[ntasks + 1]    CSR row pointers into deps
 *   deps[ndeps]            per task: sorted, distinct ids of earlier tasks
 *   buffers[nbuffers]      one sw_buffer each (device, kind, box)
 *   io_ptr[ntasks + 1]     CSR row pointers into io
 *   io[nio]                per task: the buffers it reads (tasks[t].nreads of
 *                          them), then the buffers it writes
 * Arrays double when full; ids are int32 (a graph of 2^31 tasks is refused).
 */
#include <math.h>    /* llround */
#include <stdlib.h>  /* realloc, calloc, malloc, free */
#include <string.h>  /* memset, memcpy */

#include "internal.h"

/* Arrays that double to SW_GROW_HUGE_FROM bytes or more go onto huge pages (sw_big_grow,
 * core/big_alloc.c).  The fused lowering of Inception-v3 on 16 devices for the search's memory
 * check: 30k tasks and 28k buffers, ~10 MB, ~2,600 page faults on small pages. */

/* An array realloc grows past SW_GROW_COPY_MOST is written front to back from there: its pages are
 * mapped POPULATE_STRETCH bytes at a time on another thread (sw_populate_async), kept at least
 * POPULATE_LEAD bytes ahead of the items written.  The lowering of 1,024 GPUs writes ~0.45 GB a
 * second and a thread maps ~1 GB a second on the slow virtual machine measured, so the writes
 * seldom meet an unmapped page; at most the lead and a stretch are mapped past the last item. */
#define POPULATE_STRETCH ((int64_t)4 << 20)
#define POPULATE_LEAD ((int64_t)8 << 20)

static void populate_ahead(void *items, int32_t cap, int64_t need, size_t size, int64_t *ahead) {
    int64_t end = (int64_t)size * cap;
    if (end > (int64_t)SW_GROW_COPY_MOST) {
        *ahead = sw_populate_ahead_of(items, (int64_t)size * need, end, *ahead, POPULATE_LEAD, POPULATE_STRETCH);
    }
}

/* Make room for `need` items in *items (capacity *cap, item size `size`); the pages ahead of
 * them mapped on other threads (populate_ahead, *ahead its bytes). */
static sw_status reserve(void **items, int32_t *cap, int64_t need, size_t size, int64_t *ahead) {
    if (need <= *cap) {
        populate_ahead(*items, *cap, need, size, ahead);
        return SW_OK;
    }
    if (need >= INT32_MAX / 2) {
        return SW_FAIL(SW_ERR_TOO_LARGE, "task graph too large (%lld entries)", (long long)need);
    }
    int32_t n = *cap ? *cap : 256;
    while (n < need) {
        n *= 2;
    }
    size_t bytes = size * (size_t)n;
    void *grown = sw_big_grow(*items, size * (size_t)*cap, bytes, SW_GROW_HUGE_FROM);
    if (!grown) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a task graph of %lld entries", (long long)need);
    }
    *items = grown;
    *cap = n;
    populate_ahead(grown, n, need, size, ahead);
    return SW_OK;
}

/* The message of a box too wide for a task graph's int32 coordinates (sw_box32). */
static sw_status too_wide(const char *what, int32_t op, const sw_box *box) {
    for (int d = 0; box && d < box->rank; d++) {
        if (box->lo[d] < INT32_MIN || box->lo[d] > INT32_MAX || box->hi[d] < INT32_MIN || box->hi[d] > INT32_MAX) {
            return SW_FAIL(SW_ERR_VALUE, "dimension too large for a task graph: %s of op %d spans [%lld, %lld) in "
                           "dimension %d, beyond 2^31 - 1", what, op, (long long)box->lo[d], (long long)box->hi[d], d);
        }
    }
    return SW_FAIL(SW_ERR_VALUE, "dimension too large for a task graph: %s of op %d has a coordinate beyond 2^31 - 1",
                   what, op);
}

sw_status sw_tg_buffer(sw_task_graph *g, int32_t device, sw_buffer_kind kind, int32_t op, const sw_box *box,
                       int32_t *id) {
    sw_buffer b;
    b.device = device;
    b.op = op;
    b.worker = -1;
    b.slot = -1;
    b.kind = (int8_t)kind;
    if (!sw_box_narrow(&b.box, box)) {
        return too_wide("a buffer", op, box);
    }
    return sw_tg_buffer_copy(g, &b, id);
}

/* Append an exact copy of *buf (worker and slot too) to g: the passes that rewrite a task graph
 * into a new one (swap, recompute, ranks, iterations) keep every buffer as it was. */
sw_status sw_tg_buffer_copy(sw_task_graph *g, const sw_buffer *buf, int32_t *id) {
    SW_TRY(reserve((void **)&g->buffers, &g->buffer_cap, (int64_t)g->nbuffers + 1, sizeof *g->buffers,
                   &g->ahead_buffers));
    g->buffers[g->nbuffers] = *buf;
    *id = g->nbuffers++;
    return SW_OK;
}

/* An array grown by doubling writes every size it passes through: the buffers of Inception-v3's
 * lowering on 16 devices (28,000, 1.7 MB) first filled arrays of 15 KB to 1 MB of fresh small
 * pages, ~480 page faults, a third of the memory check's first lowering in a search.  Where the
 * expected room is an array of huge pages (SW_GROW_HUGE_FROM or more), it is made at once: its
 * pages are only mapped where written, so room beyond the buffers costs nothing. */
void sw_tg_expect_buffers(sw_task_graph *g, int64_t expected) {
    size_t bytes = sizeof *g->buffers * (size_t)(expected > 0 ? expected : 0);
    if (g->buffers || g->buffer_cap > 0 || bytes < SW_GROW_HUGE_FROM || expected >= INT32_MAX / 2) {
        return;
    }
    g->buffers = sw_big_alloc(bytes, SW_GROW_HUGE_FROM);   /* (NULL: grown as ever) */
    g->buffer_cap = g->buffers ? (int32_t)expected : 0;
}

/* ---- the distinct boxes of the tasks ----
 * A box is looked up by a hash of its 44 bytes (unused dimensions zero: sw_box_narrow clears
 * them) in box_slot, which holds indices into boxes and stays at most half full. */
static uint64_t box_hash(const sw_box32 *b) {
    const int32_t *w = (const int32_t *)b;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < sizeof *b / sizeof *w; i++) {
        h = (h ^ (uint32_t)w[i]) * 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

static uint64_t box_hash_of(const void *g, int32_t i) { return box_hash(&((const sw_task_graph *)g)->boxes[i]); }

/* box_slot resized to `slots` (a power of two) and filled again from boxes; 0 when out of memory. */
static int rehash_boxes(sw_task_graph *g, int32_t slots) {
    int32_t *slot = malloc(sizeof *slot * (size_t)slots);
    if (!slot) {
        return 0;
    }
    sw_index_fill(slot, slots, g->nboxes, box_hash_of, g);
    free(g->box_slot);
    g->box_slot = slot;
    g->box_slots = slots;
    return 1;
}

void sw_tg_set_task_box32(sw_task_graph *g, sw_task *t, const sw_box32 *box) {
    if (box->rank == SW_BOX32_TOO_WIDE) {
        t->box = SW_TASK_BOX_TOO_WIDE;
        return;
    }
    if (2 * ((int64_t)g->nboxes + 1) > g->box_slots) {   /* at most half full */
        if (g->box_slots >= INT32_MAX / 4 || !rehash_boxes(g, g->box_slots ? 2 * g->box_slots : 1024)) {
            t->box = SW_TASK_BOX_NOMEM;
            return;
        }
    }
    size_t mask = (size_t)(g->box_slots - 1), q = (size_t)box_hash(box) & mask;
    for (; g->box_slot[q] >= 0; q = (q + 1) & mask) {
        if (!memcmp(&g->boxes[g->box_slot[q]], box, sizeof *box)) {
            t->box = g->box_slot[q] + 1;
            return;
        }
    }
    if (g->nboxes == g->box_cap) {
        int32_t cap = g->box_cap ? 2 * g->box_cap : 256;
        sw_box32 *grown = realloc(g->boxes, sizeof *grown * (size_t)cap);
        if (!grown) {
            t->box = SW_TASK_BOX_NOMEM;
            return;
        }
        g->boxes = grown;
        g->box_cap = cap;
    }
    g->boxes[g->nboxes] = *box;
    g->box_slot[q] = g->nboxes;
    t->box = ++g->nboxes;
}

void sw_tg_set_task_box(sw_task_graph *g, sw_task *t, const sw_box *box) {
    sw_box32 narrow;
    (void)sw_box_narrow(&narrow, box);   /* (too wide: marked, refused when the task is appended) */
    sw_tg_set_task_box32(g, t, &narrow);
}

static void sort_ids(int32_t *a, int n) {  /* insertion sort: dependency lists are short */
    for (int i = 1; i < n; i++) {
        int32_t v = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

/* Grow an int32 CSR row-pointer array alongside a task array whose capacity went
 * from old_cap to *cap (one entry more than the tasks; entry 0 is 0). */
static sw_status grow_ptr(int32_t **ptr, int32_t old_cap, int32_t *cap) {
    if (*cap == old_cap) {
        return SW_OK;
    }
    int32_t *grown = realloc(*ptr, sizeof *grown * ((size_t)*cap + 1));
    if (!grown) {
        *cap = old_cap;   /* keep the capacities of tasks and their row pointers in step */
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a task graph");
    }
    if (!*ptr) {
        grown[0] = 0;
    }
    *ptr = grown;
    return SW_OK;
}

sw_status sw_tg_task(sw_task_graph *g, const sw_task *t, const int32_t *deps, int ndeps, const sw_task_io *io,
                     int32_t *id) {
    static const sw_task_io none = {0};
    io = io ? io : &none;
    if (io->nreads < 0 || io->nwrites < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "a task with a negative number of reads or writes");
    }
    if (t->box == SW_TASK_BOX_TOO_WIDE) {   /* sw_tg_set_task_box could not narrow it */
        return too_wide("a task", t->op, NULL);
    }
    if (t->box == SW_TASK_BOX_NOMEM) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the boxes of a task graph");
    }
    if (t->box < 0 || t->box > g->nboxes) {
        return SW_FAIL(SW_ERR_INTERNAL, "task of op %d: box %d is not one of the graph's %d", t->op, t->box, g->nboxes);
    }
    if (g->ring_halves) {   /* a lowering for its buffers alone: the task numbered, not kept */
        if (t->kind == SW_TASK_RING) {
            g->ring_halves[t->device] += t->slot;
        }
        *id = g->ntasks++;
        return SW_OK;
    }
    /* dep_ptr and io_ptr have one more entry than tasks: grow them with it */
    int32_t old_cap = g->task_cap;
    SW_TRY(reserve((void **)&g->tasks, &g->task_cap, (int64_t)g->ntasks + 1, sizeof *g->tasks, &g->ahead_tasks));
    if (g->task_cap != old_cap) {
        int32_t cap = g->task_cap;   /* back to old_cap if either fails: both are grown again next time */
        sw_status s = grow_ptr(&g->dep_ptr, old_cap, &cap);
        if (s == SW_OK) {
            s = grow_ptr(&g->io_ptr, old_cap, &cap);
        }
        g->task_cap = cap;
        SW_TRY(s);
    }
    SW_TRY(reserve((void **)&g->deps, &g->dep_cap, (int64_t)g->ndeps + ndeps + 1, sizeof *g->deps, &g->ahead_deps));
    SW_TRY(reserve((void **)&g->io, &g->io_cap, (int64_t)g->nio + io->nreads + io->nwrites + 1, sizeof *g->io,
                   &g->ahead_io));
    int32_t *row = g->deps + g->ndeps;
    int n = 0;
    for (int k = 0; k < ndeps; k++) {
        if (deps[k] >= 0) {
            row[n++] = deps[k];
        }
    }
    sort_ids(row, n);
    int distinct = 0;
    for (int k = 0; k < n; k++) {
        if (distinct == 0 || row[distinct - 1] != row[k]) {
            row[distinct++] = row[k];
        }
    }
    g->ndeps += distinct;
    for (int k = 0; k < io->nreads; k++) {
        g->io[g->nio++] = io->reads[k];
    }
    for (int k = 0; k < io->nwrites; k++) {
        g->io[g->nio++] = io->writes[k];
    }
    g->tasks[g->ntasks] = *t;
    g->tasks[g->ntasks].nreads = io->nreads;
    g->dep_ptr[g->ntasks + 1] = g->ndeps;
    g->io_ptr[g->ntasks + 1] = g->nio;
    *id = g->ntasks++;
    return SW_OK;
}

void sw_tg_buffer_totals(const sw_task_graph *g, int ndev, int chunked, int persistent, int64_t *bytes,
                         int64_t *count) {
    memset(bytes, 0, sizeof *bytes * (size_t)ndev);
    memset(count, 0, sizeof *count * (size_t)ndev);
    for (int32_t b = 0; b < g->nbuffers; b++) {
        sw_buffer_kind kind = g->buffers[b].kind;
        if (!persistent || kind == SW_BUF_PARAM || kind == SW_BUF_MOMENTUM || kind == SW_BUF_RUNNING) {
            count[g->buffers[b].device]++;
            bytes[g->buffers[b].device] += sw_graph_buffer_bytes(g, b);
        }
    }
    if (!chunked || persistent) {
        return;
    }
    /* 2 x the extra buffers per device: the ring tasks' slots, kept or added up as they came */
    for (int d = 0; g->ring_halves && d < ndev; d++) {
        count[d] += g->ring_halves[d] / 2;
    }
    if (g->ring_halves) {
        return;
    }
    /* count[d] + halves[d] / 2 from the kept tasks, without an array of halves: each count
     * doubled, the slots added, the sum halved (2 c + h halved is c + h / 2, as above) */
    for (int d = 0; d < ndev; d++) {
        count[d] *= 2;
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        if (g->tasks[t].kind == SW_TASK_RING) {
            count[g->tasks[t].device] += g->tasks[t].slot;
        }
    }
    for (int d = 0; d < ndev; d++) {
        count[d] /= 2;
    }
}

int64_t sw_tg_memory(const sw_task_graph *g, int ndev, int64_t *per_device) {
    memset(per_device, 0, sizeof *per_device * (size_t)ndev);
    for (int32_t b = 0; b < g->nbuffers; b++) {
        per_device[g->buffers[b].device] += sw_graph_buffer_bytes(g, b);
    }
    double moved = 0;   /* as the plan counts them (its precision's bytes a value) */
    for (int32_t t = 0; t < g->ntasks; t++) {
        moved += sw_wire_bytes(g->value_bytes, &g->tasks[t]);
    }
    return (int64_t)llround(moved);
}

/* The array cut to its n items when it was grown in place (above SW_GROW_COPY_MOST): its pages
 * mapped ahead past them, and its room to double, go back to the system. */
static void trim(void **items, int32_t *cap, int32_t n, size_t size, int64_t *ahead) {
    if (!*items || (size_t)*cap * size <= SW_GROW_COPY_MOST || n >= *cap) {
        return;
    }
    size_t bytes = size * (size_t)(n > 0 ? n : 1);
    void *cut = realloc(*items, bytes);
    if (cut) {   /* (else it keeps its room) */
        *items = cut;
        *cap = n > 0 ? n : 1;
        *ahead = (int64_t)bytes;
    }
}

void sw_tg_trim(sw_task_graph *g) {
    int32_t tasks = g->task_cap;
    trim((void **)&g->tasks, &tasks, g->ntasks, sizeof *g->tasks, &g->ahead_tasks);
    if (tasks != g->task_cap) {   /* the row pointers: one entry more than the tasks' room (a failed cut keeps more) */
        int32_t *dp = realloc(g->dep_ptr, sizeof *dp * ((size_t)tasks + 1));
        g->dep_ptr = dp ? dp : g->dep_ptr;
        int32_t *ip = realloc(g->io_ptr, sizeof *ip * ((size_t)tasks + 1));
        g->io_ptr = ip ? ip : g->io_ptr;
        g->task_cap = tasks;
    }
    trim((void **)&g->buffers, &g->buffer_cap, g->nbuffers, sizeof *g->buffers, &g->ahead_buffers);
    trim((void **)&g->deps, &g->dep_cap, g->ndeps, sizeof *g->deps, &g->ahead_deps);
    trim((void **)&g->io, &g->io_cap, g->nio, sizeof *g->io, &g->ahead_io);
}

void sw_task_graph_free(sw_task_graph *g) {
    free(g->boxes);
    free(g->box_slot);
    free(g->tasks);
    free(g->dep_ptr);
    free(g->deps);
    free(g->buffers);
    free(g->io_ptr);
    free(g->io);
    memset(g, 0, sizeof *g);
}

/* An exact copy (capacities = sizes; row pointers ntasks + 1), so a runtime can own the graph
 * a lowering keeps (csrc/graph/lowering.c) while the lowering lives on for other passes. */
sw_status sw_task_graph_copy(const sw_task_graph *src, sw_task_graph *dst) {
    memset(dst, 0, sizeof *dst);
    size_t nt = (size_t)src->ntasks, nb = (size_t)src->nbuffers;
    dst->tasks = malloc(sizeof *dst->tasks * (nt + 1));
    dst->dep_ptr = malloc(sizeof *dst->dep_ptr * (nt + 1));
    dst->io_ptr = malloc(sizeof *dst->io_ptr * (nt + 1));
    dst->deps = malloc(sizeof *dst->deps * ((size_t)src->ndeps + 1));
    dst->io = malloc(sizeof *dst->io * ((size_t)src->nio + 1));
    dst->buffers = malloc(sizeof *dst->buffers * (nb + 1));
    dst->boxes = malloc(sizeof *dst->boxes * ((size_t)src->nboxes + 1));
    dst->box_slot = src->box_slots > 0 ? malloc(sizeof *dst->box_slot * (size_t)src->box_slots) : NULL;
    if (!dst->tasks || !dst->dep_ptr || !dst->io_ptr || !dst->deps || !dst->io || !dst->buffers || !dst->boxes ||
        (src->box_slots > 0 && !dst->box_slot)) {
        sw_task_graph_free(dst);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory copying a task graph of %d tasks", src->ntasks);
    }
    if (src->nboxes > 0) {
        memcpy(dst->boxes, src->boxes, sizeof *dst->boxes * (size_t)src->nboxes);
    }
    if (src->box_slots > 0) {
        memcpy(dst->box_slot, src->box_slot, sizeof *dst->box_slot * (size_t)src->box_slots);
    }
    dst->nboxes = dst->box_cap = src->nboxes;
    dst->box_slots = src->box_slots;
    memcpy(dst->tasks, src->tasks, sizeof *dst->tasks * nt);
    memcpy(dst->buffers, src->buffers, sizeof *dst->buffers * nb);
    memcpy(dst->dep_ptr, src->dep_ptr, sizeof *dst->dep_ptr * (nt + 1));
    memcpy(dst->io_ptr, src->io_ptr, sizeof *dst->io_ptr * (nt + 1));
    memcpy(dst->deps, src->deps, sizeof *dst->deps * (size_t)src->ndeps);
    memcpy(dst->io, src->io, sizeof *dst->io * (size_t)src->nio);
    dst->ntasks = dst->task_cap = src->ntasks;
    dst->nbuffers = dst->buffer_cap = src->nbuffers;
    dst->ndeps = dst->dep_cap = src->ndeps;
    dst->nio = dst->io_cap = src->nio;
    sw_tg_copy_header(src, dst);
    return SW_OK;
}

void sw_tg_copy_header(const sw_task_graph *src, sw_task_graph *dst) {
    memcpy(dst->element_bytes, src->element_bytes, sizeof dst->element_bytes);
    dst->value_bytes = src->value_bytes;
    dst->ring_detail = src->ring_detail;
}

/* ------------------------------------------------------------------ lifetimes
 * Facts of the task graph alone, shared by the memory plan (mem/memplan*.c, mem/iterations.c)
 * and the swap plan (graph/swap*.c), so that graph/ does not call up into mem/. */
#define NONE (-1)

int sw_buffer_lives_throughout(const sw_task_graph *g, int32_t b, const char *host_read) {
    int kind = g->buffers[b].kind;
    return kind == SW_BUF_PARAM || kind == SW_BUF_MOMENTUM || kind == SW_BUF_RUNNING || host_read[b];
}

sw_status sw_tg_host_reads(const sw_task_graph *g, char **out) {
    char *r = calloc((size_t)g->nbuffers + 1, 1);
    if (!r) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        if (g->tasks[t].kind == SW_TASK_LOSS) {   /* its probabilities (predict) and logits (forward) */
            const int32_t *w, *rd;
            int nw = sw_tg_writes(g, t, &w), nr = sw_tg_reads(g, t, &rd);
            for (int k = 0; k < nw; k++) {
                r[w[k]] = 1;
            }
            for (int k = 0; k < nr; k++) {
                r[rd[k]] = 1;
            }
        }
    }
    *out = r;
    return SW_OK;
}

void sw_buffer_lifetimes(const sw_task_graph *g, const char *host_read, int reuse, int32_t *first, int32_t *last) {
    for (int32_t b = 0; b < g->nbuffers; b++) {
        first[b] = NONE;
        last[b] = NONE;
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            int32_t b = g->io[k];
            first[b] = first[b] == NONE ? t : first[b];
            last[b] = t;
        }
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        if (!reuse || sw_buffer_lives_throughout(g, b, host_read) || first[b] == NONE) {
            first[b] = 0;                /* live throughout (or never touched: kept apart) */
            last[b] = g->ntasks;
        }
    }
}
