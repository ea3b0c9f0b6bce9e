/* table_key.c -- the data a cost table is a function of, as a list of integers (sw_key), so
 * that ops or edges whose tables would be computed from equal data share one computation.
 * Networks repeat themselves (conv -> batchnorm -> relu, identical Inception modules): on
 * Inception-v3, 315 ops have 101 distinct node tables and 349 edges 74 distinct transfer
 * tables.  Equal keys are found by hash, then compared in full (sw_key_find). */
#include <stdlib.h>  /* malloc, realloc, free */
#include <string.h>  /* memcmp, memcpy */

#include "internal.h"

int sw_key_grow(sw_key *k) {
    size_t cap = k->cap ? k->cap * 2 : 1024;
    int64_t *n = realloc(k->v, sizeof *n * cap);
    if (!n) {
        return 0;
    }
    k->v = n;
    k->cap = cap;
    return 1;
}

int sw_key_push_double(sw_key *k, double x) {
    int64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return sw_key_push(k, bits);
}

/* A configuration's devices: its first (as -1 - first) where they are contiguous, as every
 * enumerated block is, else the list (non-negative ids): O(1) for blocks of 1,024 devices. */
int sw_key_push_devices(sw_key *k, const sw_problem *p, const sw_config *cf) {
    int first = sw_config_first_device(p, cf);
    if (first >= 0) {
        return sw_key_push(k, -1 - (int64_t)first);
    }
    int ok = 1;
    for (int w = 0; w < cf->nworkers; w++) {
        ok &= sw_key_push(k, p->dev_pool[cf->dev_offset + w]);
    }
    return ok;
}

/* A configuration: its degrees on the first `rank` dimensions, reduction split, workers and
 * devices.  In two words where every field fits its bits (degrees below 2^12, five of them;
 * devices contiguous, the first below 2^20; workers below 2^20; rdeg below 2^16; rvar below 2^7),
 * as every enumerated configuration on at most SW_MAX_DEVICES devices does: the first word
 * negative, which the long form's first word (0) never is, so no key of one form equals one of
 * the other.  The long form: 0, the degrees, rvar, rdeg, workers and the devices
 * (sw_key_push_devices).  Keys a quarter as long are quicker to make, hash and keep (a search of
 * Inception-v3 on 16 devices keeps ~100 keys of 161 configurations each). */
int sw_key_push_config(sw_key *k, const sw_problem *p, const sw_config *cf, int rank) {
    int first = sw_config_first_device(p, cf);
    int fits = rank <= 5 && first >= 0 && first < (1 << 20) && cf->nworkers < (1 << 20) && cf->rdeg >= 1 &&
               cf->rdeg < (1 << 16) && cf->rvar >= -1 && cf->rvar < (1 << 7) - 1;
    uint64_t degrees = 0;
    for (int d = 0; fits && d < rank; d++) {
        fits = cf->deg[d] >= 1 && cf->deg[d] < (1 << 12);
        degrees |= (uint64_t)cf->deg[d] << (12 * d);
    }
    if (fits) {
        uint64_t rest = (uint64_t)(cf->rvar + 1) | (uint64_t)cf->rdeg << 7 | (uint64_t)cf->nworkers << 23 |
                        (uint64_t)first << 43;
        return sw_key_push(k, (int64_t)(degrees | (uint64_t)1 << 63)) && sw_key_push(k, (int64_t)rest);
    }
    int ok = sw_key_push(k, 0);
    for (int d = 0; d < rank; d++) {
        ok &= sw_key_push(k, cf->deg[d]);
    }
    return ok && sw_key_push(k, cf->rvar) && sw_key_push(k, cf->rdeg) && sw_key_push(k, cf->nworkers) &&
           sw_key_push_devices(k, p, cf);
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

/* Four chains over interleaved words, joined at the end: each mix waits for the one before
 * in its chain, so four chains run about four times as fast (keys of a few thousand words:
 * an op's configurations with their devices).  Equal keys still hash alike, and sw_key_find
 * compares the keys themselves. */
uint64_t sw_key_hash(const sw_key *k) {
    uint64_t h0 = mix(0, k->len), h1 = 1, h2 = 2, h3 = 3;
    size_t q = 0;
    for (; q + 4 <= k->len; q += 4) {
        h0 = mix(h0, (uint64_t)k->v[q]);
        h1 = mix(h1, (uint64_t)k->v[q + 1]);
        h2 = mix(h2, (uint64_t)k->v[q + 2]);
        h3 = mix(h3, (uint64_t)k->v[q + 3]);
    }
    for (; q < k->len; q++) {
        h0 = mix(h0, (uint64_t)k->v[q]);
    }
    return mix(mix(mix(h0, h1), h2), h3);
}

int sw_key_find(const sw_key_set *set, const sw_key *k, uint64_t hash) {
    for (int q = 0; q < set->n; q++) {
        const sw_key *other = &set->key[q];
        if (set->hash[q] == hash && other->len == k->len && !memcmp(other->v, k->v, sizeof *k->v * k->len)) {
            return set->owner[q];
        }
    }
    return -1;
}

void sw_key_set_free(sw_key_set *set) {
    for (int q = 0; q < set->n; q++) {
        free(set->key[q].v);
    }
    free(set->key);
    free(set->hash);
    free(set->owner);
    *set = (sw_key_set){0};
}

int sw_key_keep(sw_key_set *set, const sw_key *k, uint64_t hash, int owner) {
    int64_t *v = malloc(sizeof *v * (k->len > 0 ? k->len : 1));
    if (!v) {
        return 0;
    }
    memcpy(v, k->v, sizeof *v * k->len);
    set->key[set->n] = (sw_key){v, k->len, k->len};
    set->hash[set->n] = hash;
    set->owner[set->n++] = owner;
    return 1;
}
