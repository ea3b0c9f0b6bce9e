/* memplan_place.c -- first-fit placement of a device's buffers in its arena.
 *
 * Greedy by size (memplan.c orders the buffers largest first): each buffer goes
 * to the lowest aligned offset c where no placed buffer live at the same time
 * meets [c, c + size).  That c is the least fixed point of
 *     c = max(0, max{hi of a live placed range whose lo < c + size}),
 * reached by growing c from 0 over the placed ranges in offset order.
 *
 * A single list in offset order made every buffer look at nearly every placed
 * one (Inception-v3 on 16 devices: 2,000 buffers a device, 40 M looks of which
 * 72% at buffers not live at the time).  So placed ranges are kept in GRID x
 * GRID groups by the blocks of task positions their lifetime starts and ends
 * in, each group sorted by offset: groups born after the buffer dies or dead
 * before it is born are skipped whole, groups strictly inside its lifetime are
 * live without a check.  The groups are walked each by its own pointer while c
 * grows, so every placed range is looked at once per buffer at most.  The
 * result is the single list's, offset for offset.
 */
#include <stdlib.h>  /* malloc, free */
#include <string.h>  /* memset, memmove */

#include "memplan_internal.h"

/* Blocks of task positions per lifetime axis: 4 measured best on Inception-v3 (8: the
 * passes over more groups cost more than the looks they save). */
#define GRID 4

typedef struct {
    int64_t lo, hi;          /* [lo, hi): offset and aligned end */
    int32_t first, last;     /* lifetime (task positions) */
} placed_range;

typedef struct {
    placed_range *items;   /* group g: items[start[g] .. start[g] + len[g]), sorted by lo */
    int32_t start[GRID * GRID + 1], len[GRID * GRID], ptr[GRID * GRID];
    int32_t npos;          /* task positions 0 .. npos - 1 */
} placement;

static int block_of(const placement *pl, int32_t pos) { return (int)((int64_t)pos * GRID / pl->npos); }

static int group_of(const placement *pl, int32_t first, int32_t last) {
    return block_of(pl, first) * GRID + block_of(pl, last);
}

static int64_t align_up(int64_t v, int64_t align) { return (v + align - 1) / align * align; }

/* The least c >= 0 such that no placed range live during [first, last] meets [c, c + size). */
static int64_t first_fit(placement *pl, int64_t size, int32_t first, int32_t last) {
    int bf = block_of(pl, first), bl = block_of(pl, last);
    memset(pl->ptr, 0, sizeof pl->ptr);
    int64_t c = 0;
    int grew = size > 0;
    while (grew) {   /* until a pass over the groups leaves c where it was */
        grew = 0;
        for (int gf = 0; gf <= bl; gf++) {               /* born before b dies */
            for (int gl = bf > gf ? bf : gf; gl < GRID; gl++) {   /* dead after b is born */
                int g = gf * GRID + gl;
                int check = gf == bl || gl == bf;   /* a boundary group: some of its ranges are not live */
                const placed_range *items = pl->items + pl->start[g];
                int32_t k = pl->ptr[g];
                for (; k < pl->len[g] && items[k].lo < c + size; k++) {
                    const placed_range *o = &items[k];
                    if (o->hi > c && (!check || (o->first <= last && first <= o->last))) {
                        c = o->hi;
                        grew = 1;
                    }
                }
                pl->ptr[g] = k;
            }
        }
    }
    return c;
}

static void insert(placement *pl, placed_range r) {
    int g = group_of(pl, r.first, r.last);
    placed_range *items = pl->items + pl->start[g];
    int32_t lo = 0, hi = pl->len[g];
    while (lo < hi) {   /* after every range starting at or below r's */
        int32_t mid = lo + (hi - lo) / 2;
        if (items[mid].lo <= r.lo) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    memmove(items + lo + 1, items + lo, sizeof *items * (size_t)(pl->len[g] - lo));
    items[lo] = r;
    pl->len[g]++;
}

sw_status sw_memplan_place(const int64_t *bytes, const int32_t *first, const int32_t *last, const int32_t *ids,
                           int32_t n, int64_t align, int32_t npos, int64_t *offset, int64_t *arena) {
    placement pl = {.items = malloc(sizeof(placed_range) * ((size_t)n + 1)), .npos = npos > 0 ? npos : 1};
    if (!pl.items) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    memset(pl.start, 0, sizeof pl.start);
    memset(pl.len, 0, sizeof pl.len);
    for (int32_t i = 0; i < n; i++) {   /* room per group: a CSR over the groups */
        pl.start[group_of(&pl, first[ids[i]], last[ids[i]]) + 1]++;
    }
    for (int g = 0; g < GRID * GRID; g++) {
        pl.start[g + 1] += pl.start[g];
    }
    int64_t top = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t b = ids[i];
        int64_t size = align_up(bytes[b], align);
        offset[b] = first_fit(&pl, size, first[b], last[b]);
        top = offset[b] + size > top ? offset[b] + size : top;
        if (size > 0) {
            insert(&pl, (placed_range){offset[b], offset[b] + size, first[b], last[b]});
        }
    }
    *arena = top;
    free(pl.items);
    return SW_OK;
}
