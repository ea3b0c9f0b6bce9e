/* sort_keys.c -- the comparator of sort_keys.h (one implementation for the memory and swap plans' sorts). */
#include "sort_keys.h"

#include "sort_typed.h"

int sw_by_keys(const void *pa, const void *pb) {
    const sw_keyed *a = pa, *b = pb;
    if (a->key != b->key) {
        return a->key < b->key ? -1 : 1;
    }
    if (a->key2 != b->key2) {
        return a->key2 < b->key2 ? -1 : 1;
    }
    return (a->id > b->id) - (a->id < b->id);
}

static inline int keyed_less(const sw_keyed *a, const sw_keyed *b) {
    return a->key != b->key ? a->key < b->key : a->key2 != b->key2 ? a->key2 < b->key2 : a->id < b->id;
}

SW_DEFINE_SORT(sort_keyed, sw_keyed, keyed_less, sw_by_keys)

void sw_sort_keyed(sw_keyed *a, size_t n) { sort_keyed(a, n); }
