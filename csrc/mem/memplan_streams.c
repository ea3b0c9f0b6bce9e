/* memplan_streams.c -- reuse edges when a device runs several streams.
 *
 * The memory plan places buffers by lifetimes over program order: two buffers
 * of a device share bytes only when one's last task comes before the other's
 * first.  With one stream per device that order is what runs, and only copies
 * on other devices' streams need edges (memplan.c).  With several streams per
 * device (a critical-path schedule), a dW on a low-priority stream may still
 * read an activation whose bytes a dA on a high-priority stream is about to
 * overwrite, so a buffer B that takes over bytes must follow every task of the
 * bytes' previous occupants, on whatever stream.
 *
 * For every byte of B, its previous occupant is the buffer over that byte whose
 * lifetime ends last before B's begins (the lifetimes of buffers over one byte
 * never meet).  Each previous occupant A gets edges from every task of its exit
 * (its last writer and the readers after it) to every task of B's entry (B's
 * first writer, and any reads before it), skipping pairs on one stream (the
 * stream orders them: the exit comes first in program order).  That is enough:
 * the order keeps every buffer's conflicting accesses in program order (hazards.c),
 * so all of A's tasks precede its exit and all of B's follow its entry, and the
 * occupants of one byte form a chain, each after the one before.  Previous
 * occupants are found by taking the candidates (overlapping, ended before B
 * began) latest end first, each one an occupant when it covers bytes of B that
 * no later candidate covered, until B's bytes are all covered.
 */
#include <stdlib.h>  /* malloc, calloc, realloc, free, qsort */

#include "memplan_internal.h"
#include "core/sort_keys.h"

/* ------------------------------------------------------------------ entries and exits */
/* Per buffer, the distinct tasks touching it in program order (CSR) and whether each writes it. */
static sw_status touches(const sw_task_graph *g, sw_memplan_ends *e, uint8_t **wrote_out) {
    size_t nb = (size_t)g->nbuffers + 1;
    e->ptr = calloc(nb + 1, sizeof *e->ptr);
    e->touch = malloc(sizeof *e->touch * ((size_t)g->nio + 1));
    uint8_t *wrote = calloc((size_t)g->nio + 1, 1);
    int32_t *seen = malloc(sizeof *seen * nb), *fill = malloc(sizeof *fill * nb);
    if (!e->ptr || !e->touch || !wrote || !seen || !fill) {
        free(wrote);
        free(seen);
        free(fill);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        seen[b] = -1;
    }
    for (int32_t t = 0; t < g->ntasks; t++) {   /* count: a task naming a buffer twice touches it once */
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            if (seen[g->io[k]] != t) {
                seen[g->io[k]] = t;
                e->ptr[g->io[k] + 1]++;
            }
        }
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        e->ptr[b + 1] += e->ptr[b];
        fill[b] = e->ptr[b];
        seen[b] = -1;
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            int32_t b = g->io[k];
            if (seen[b] != t) {
                seen[b] = t;
                e->touch[fill[b]++] = t;
            }
            wrote[fill[b] - 1] |= (uint8_t)(k - g->io_ptr[t] >= g->tasks[t].nreads);
        }
    }
    free(seen);
    free(fill);
    *wrote_out = wrote;
    return SW_OK;
}

sw_status sw_memplan_ends_build(const sw_task_graph *g, sw_memplan_ends *e) {
    *e = (sw_memplan_ends){0};
    uint8_t *wrote = NULL;
    sw_status s = touches(g, e, &wrote);
    size_t nb = (size_t)g->nbuffers + 1;
    if (s == SW_OK) {
        e->entry_end = malloc(sizeof *e->entry_end * nb);
        e->exit_begin = malloc(sizeof *e->exit_begin * nb);
        if (!e->entry_end || !e->exit_begin) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
        }
    }
    for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {
        int32_t lo = e->ptr[b], hi = e->ptr[b + 1], first = hi, last = lo;   /* no writer: every task both */
        for (int32_t i = lo; i < hi; i++) {
            if (wrote[i]) {
                first = first == hi ? i + 1 : first;
                last = i;
            }
        }
        e->entry_end[b] = first;
        e->exit_begin[b] = last;
    }
    free(wrote);
    if (s != SW_OK) {
        sw_memplan_ends_free(e);
    }
    return s;
}

void sw_memplan_ends_free(sw_memplan_ends *e) {
    free(e->ptr);
    free(e->touch);
    free(e->entry_end);
    free(e->exit_begin);
    *e = (sw_memplan_ends){0};
}

/* ------------------------------------------------------------------ previous occupants */
typedef struct {
    int64_t lo, hi;
} span;

/* The bytes of B already taken by a later occupant: disjoint spans sorted by lo. */
typedef struct {
    span *items;
    int32_t n, cap;
} coverage;

/* Does [lo, hi) hold a byte no span covers? */
static int uncovered(const coverage *c, int64_t lo, int64_t hi) {
    int64_t at = lo;
    for (int32_t i = 0; i < c->n && at < hi; i++) {
        if (c->items[i].hi <= at) {
            continue;
        }
        if (c->items[i].lo > at) {
            return 1;
        }
        at = c->items[i].hi;
    }
    return at < hi;
}

/* Add [lo, hi), merging the spans it meets. */
static sw_status cover(coverage *c, int64_t lo, int64_t hi) {
    if (c->n == c->cap) {
        int32_t cap = c->cap ? 2 * c->cap : 16;
        span *grown = realloc(c->items, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
        }
        c->items = grown;
        c->cap = cap;
    }
    int32_t i = 0;
    while (i < c->n && c->items[i].lo < lo) {
        i++;
    }
    for (int32_t j = c->n; j > i; j--) {
        c->items[j] = c->items[j - 1];
    }
    c->items[i] = (span){lo, hi};
    c->n++;
    int32_t m = 0;   /* merge in one pass: the spans stay sorted by lo */
    for (int32_t j = 0; j < c->n; j++) {
        if (m > 0 && c->items[j].lo <= c->items[m - 1].hi) {
            c->items[m - 1].hi = c->items[j].hi > c->items[m - 1].hi ? c->items[j].hi : c->items[m - 1].hi;
        } else {
            c->items[m++] = c->items[j];
        }
    }
    c->n = m;
    return SW_OK;
}

typedef struct {
    int32_t last, id;   /* a candidate previous occupant and the end of its lifetime */
} candidate;

static int later_end_first(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->last != b->last) {
        return a->last > b->last ? -1 : 1;
    }
    return (a->id > b->id) - (a->id < b->id);
}

/* Edges from A's exit to B's entry, for pairs on different streams. */
static sw_status link(const sw_task_graph *g, const sw_streams *st, const sw_memplan_ends *e, int32_t a, int32_t b,
                      sw_memplan_edges *out) {
    for (int32_t i = e->exit_begin[a]; i < e->ptr[a + 1]; i++) {
        for (int32_t j = e->ptr[b]; j < e->entry_end[b]; j++) {
            int32_t from = e->touch[i], to = e->touch[j];
            if (sw_stream_of(g, st, from) != sw_stream_of(g, st, to)) {
                SW_TRY(sw_memplan_add_edge(out, from, to));
            }
        }
    }
    return SW_OK;
}

sw_status sw_memplan_stream_edges(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st,
                                  const sw_memplan_ends *e, const int32_t *mine, int32_t n, sw_memplan_edges *out) {
    sw_keyed *by_off = malloc(sizeof *by_off * ((size_t)n + 1));
    candidate *cand = malloc(sizeof *cand * ((size_t)n + 1));
    coverage cov = {0};
    if (!by_off || !cand) {
        free(by_off);
        free(cand);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    int64_t widest = 0;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {   /* buffers that take part in reuse: bytes, a lifetime within the step */
        int32_t b = mine[i];
        if (mp->bytes[b] > 0 && !(mp->first[b] == 0 && mp->last[b] == g->ntasks)) {
            by_off[m++] = (sw_keyed){mp->offset[b], 0, b};
            widest = mp->bytes[b] > widest ? mp->bytes[b] : widest;
        }
    }
    qsort(by_off, (size_t)m, sizeof *by_off, sw_by_keys);
    sw_status s = SW_OK;
    for (int32_t i = 0; i < m && s == SW_OK; i++) {
        int32_t b = by_off[i].id, nc = 0;
        int64_t lo = mp->offset[b], hi = lo + mp->bytes[b];
        int32_t j = 0, k = m;   /* the first buffer above lo - widest: below it none reaches lo */
        while (j < k) {
            int32_t mid = j + (k - j) / 2;
            if (by_off[mid].key <= lo - widest) {
                j = mid + 1;
            } else {
                k = mid;
            }
        }
        for (; j < m && by_off[j].key < hi; j++) {
            int32_t a = by_off[j].id;
            if (a != b && mp->last[a] < mp->first[b] && mp->offset[a] + mp->bytes[a] > lo) {
                cand[nc++] = (candidate){mp->last[a], a};
            }
        }
        qsort(cand, (size_t)nc, sizeof *cand, later_end_first);
        cov.n = 0;
        for (int32_t c = 0; c < nc && s == SW_OK && uncovered(&cov, lo, hi); c++) {
            int32_t a = cand[c].id;
            int64_t alo = mp->offset[a] > lo ? mp->offset[a] : lo;
            int64_t ahi = mp->offset[a] + mp->bytes[a] < hi ? mp->offset[a] + mp->bytes[a] : hi;
            if (uncovered(&cov, alo, ahi)) {
                s = link(g, st, e, a, b, out);
                if (s == SW_OK) {
                    s = cover(&cov, alo, ahi);
                }
            }
        }
    }
    free(cov.items);
    free(by_off);
    free(cand);
    return s;
}
