/* id_heap.c -- the min-heap of task ids of id_heap.h (binary heap in an array). */
#include <stdlib.h>  /* realloc */

#include "id_heap.h"

int sw_id_heap_push(sw_id_heap *h, int32_t v) {
    if (h->len == h->cap) {
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
    }
}
