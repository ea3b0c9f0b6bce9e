/* id_heap.c -- the lines of id_heap.h: a sorted queue while ids arrive in order, else a binary heap. */
#include <stdlib.h>  /* realloc */
#include <string.h>  /* memmove */

#include "id_heap.h"

/* Room for one more id at items[len]: the sorted run moved to the front when that frees at
 * least half the array, else the array doubled.  -1 when out of memory. */
static int make_room(sw_id_heap *h) {
    if (h->len < h->cap) {
        return 0;
    }
    int32_t size = h->len - h->first;
    if (h->first > 0 && size <= h->cap / 2) {
        memmove(h->items, h->items + h->first, sizeof *h->items * (size_t)size);
        h->first = 0;
        h->len = size;
        return 0;
    }
    /* doubled in 64 bits and capped: a line holds at most one entry per task (< 2^31) */
    int64_t wide = h->cap ? (int64_t)h->cap * 2 : 8;
    int32_t cap = wide > INT32_MAX ? INT32_MAX : (int32_t)wide;
    if (cap == h->len) {
        return -1;
    }
    int32_t *n = realloc(h->items, sizeof *n * (size_t)cap);
    if (!n) {
        return -1;
    }
    h->items = n;
    h->cap = cap;
    return 0;
}

int sw_id_heap_push(sw_id_heap *h, int32_t v) {
    if (make_room(h) < 0) {
        return -1;
    }
    if (!h->heaped) {
        if (h->first == h->len || h->items[h->len - 1] < v) {
            h->items[h->len++] = v;   /* in order: the queue's new last */
            return 0;
        }
        /* out of order: the sorted run, moved to the front, is a heap to push onto */
        int32_t size = h->len - h->first;
        memmove(h->items, h->items + h->first, sizeof *h->items * (size_t)size);
        h->first = 0;
        h->len = size;
        h->heaped = 1;
    }
    int32_t i = h->len++;
    while (i > 0 && h->items[(i - 1) / 2] > v) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = v;
    return 0;
}

void sw_id_heap_pop(sw_id_heap *h) {
    if (!h->heaped) {
        if (++h->first == h->len) {
            h->first = h->len = 0;   /* empty: start again at the front */
        }
        return;
    }
    int32_t v = h->items[--h->len];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->len) {
            break;
        }
        if (c + 1 < h->len && h->items[c + 1] < h->items[c]) {
            c++;
        }
        if (h->items[c] >= v) {
            break;
        }
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->len > 0) {
        h->items[i] = v;
    } else {
        h->heaped = 0;   /* empty: a sorted queue again */
    }
}
