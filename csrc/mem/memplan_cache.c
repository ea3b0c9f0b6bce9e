/* memplan_cache.c -- a device whose buffers repeat another device's pattern is placed once.
 *
 * First-fit placement (memplan_place.c) reads only each buffer's aligned size, the order
 * the buffers come in, and which lifetimes meet: [f1, l1] and [f2, l2] meet iff f1 <= l2 and
 * f2 <= l1, which any order-keeping renumbering of the endpoints preserves.  So the offsets
 * are a function of the sequence (aligned size, rank of first, rank of last) over the
 * device's buffers, the ranks taken among that device's own endpoints (equal positions
 * equal ranks).  The replicas of a data-parallel plan have the same sequence with
 * different task positions (their tasks interleave): data parallelism over 64 devices
 * places one device and copies the offsets 63 times.  A match compares the whole sequence,
 * so a hit gives exactly the offsets placement would.
 */
#include <stdlib.h>  /* malloc, realloc, free, qsort */
#include <string.h>  /* memcmp, memcpy */

#include "core/sort_typed.h"
#include "memplan_internal.h"

#define CACHE_ENTRIES 16   /* distinct device patterns kept: plans have few (replicas, stages) */

typedef struct {
    int32_t n;
    int64_t *key;      /* 3n: aligned size, rank of first, rank of last, in placement order */
    int64_t *offset;   /* n, in placement order */
    int64_t arena;
    /* the reuse edges' answers (sw_place_cache_answers), once a device of this pattern found them:
     * which buffers were asked about and, per buffer, the one answering it (-1: none) */
    uint8_t *asked;
    int32_t *answer;
} cached_pattern;

struct sw_place_cache {
    cached_pattern items[CACHE_ENTRIES];
    int count, next;   /* next: the entry replaced when full (oldest first) */
};

typedef struct {
    int32_t pos;   /* task position */
    int32_t slot;  /* 2 i for buffer i's first, 2 i + 1 for its last */
} endpoint;

static int by_position(const void *a, const void *b) {
    const endpoint *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static inline int endpoint_before(const endpoint *x, const endpoint *y) { return x->pos < y->pos; }

SW_DEFINE_SORT(sort_endpoints, endpoint, endpoint_before, by_position)

sw_place_cache *sw_place_cache_new(void) { return calloc(1, sizeof(sw_place_cache)); }

void sw_place_cache_free(sw_place_cache *c) {
    if (!c) {
        return;
    }
    for (int i = 0; i < c->count; i++) {
        free(c->items[i].key);
        free(c->items[i].offset);
        free(c->items[i].asked);
        free(c->items[i].answer);
    }
    free(c);
}

/* key[3 i ..]: (aligned size, dense rank of first, dense rank of last) of ids[i]. */
static sw_status pattern_key(const int64_t *bytes, const int32_t *first, const int32_t *last, const int32_t *ids,
                             int32_t n, int64_t align, int64_t *key) {
    endpoint *ep = malloc(sizeof *ep * (2 * (size_t)n + 1));
    if (!ep) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    for (int32_t i = 0; i < n; i++) {
        ep[2 * i] = (endpoint){first[ids[i]], 2 * i};
        ep[2 * i + 1] = (endpoint){last[ids[i]], 2 * i + 1};
        key[3 * i] = (bytes[ids[i]] + align - 1) / align * align;
    }
    sort_endpoints(ep, 2 * (size_t)n);
    int64_t rank = 0;
    for (int32_t k = 0; k < 2 * n; k++) {
        if (k > 0 && ep[k].pos != ep[k - 1].pos) {
            rank++;
        }
        key[3 * (ep[k].slot / 2) + 1 + ep[k].slot % 2] = rank;
    }
    free(ep);
    return SW_OK;
}

sw_status sw_memplan_place_cached(sw_place_cache *c, const int64_t *bytes, const int32_t *first, const int32_t *last,
                                  const int32_t *ids, int32_t n, int64_t align, int32_t npos, int64_t *offset,
                                  int64_t *arena, int *entry) {
    *entry = -1;
    int64_t *key = malloc(sizeof *key * (3 * (size_t)n + 1));
    if (!key) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    sw_status s = pattern_key(bytes, first, last, ids, n, align, key);
    if (s != SW_OK) {
        free(key);
        return s;
    }
    for (int e = 0; e < c->count; e++) {
        const cached_pattern *p = &c->items[e];
        if (p->n == n && memcmp(p->key, key, sizeof *key * 3 * (size_t)n) == 0) {
            for (int32_t i = 0; i < n; i++) {
                offset[ids[i]] = p->offset[i];
            }
            *arena = p->arena;
            *entry = e;
            free(key);
            return SW_OK;
        }
    }
    s = sw_memplan_place(bytes, first, last, ids, n, align, npos, offset, arena);
    int64_t *kept = s == SW_OK ? malloc(sizeof *kept * ((size_t)n + 1)) : NULL;
    if (!kept) {   /* placed, but not remembered: the cache is only a shortcut */
        free(key);
        return s;
    }
    for (int32_t i = 0; i < n; i++) {
        kept[i] = offset[ids[i]];
    }
    cached_pattern *slot;
    if (c->count < CACHE_ENTRIES) {
        *entry = c->count;
        slot = &c->items[c->count++];
    } else {   /* full: replace the oldest */
        *entry = c->next;
        slot = &c->items[c->next];
        free(slot->key);
        free(slot->offset);
        free(slot->asked);
        free(slot->answer);
        c->next = (c->next + 1) % CACHE_ENTRIES;
    }
    *slot = (cached_pattern){n, key, kept, *arena, NULL, NULL};
    return SW_OK;
}

const int32_t *sw_place_cache_answers(const sw_place_cache *c, int entry, const uint8_t *asked, int32_t n) {
    if (entry < 0 || entry >= c->count) {
        return NULL;
    }
    const cached_pattern *p = &c->items[entry];
    return p->answer && p->n == n && memcmp(p->asked, asked, (size_t)n) == 0 ? p->answer : NULL;
}

void sw_place_cache_keep_answers(sw_place_cache *c, int entry, const uint8_t *asked, const int32_t *answer,
                                 int32_t n) {
    if (entry < 0 || entry >= c->count || c->items[entry].n != n) {
        return;
    }
    cached_pattern *p = &c->items[entry];
    uint8_t *a = malloc((size_t)n + 1);
    int32_t *w = malloc(sizeof *w * ((size_t)n + 1));
    if (!a || !w) {   /* not remembered: the cache is only a shortcut */
        free(a);
        free(w);
        return;
    }
    memcpy(a, asked, (size_t)n);
    memcpy(w, answer, sizeof *w * (size_t)n);
    free(p->asked);
    free(p->answer);
    p->asked = a;
    p->answer = w;
}
