/* config.c -- configurations of an op: a degree per output dimension and devices.
 *
 * Enumeration: for every allowed worker count k, every ordered factorization
 * k = d_0 * d_1 * ... into degrees that divide their output dimension (and
 * keep shards a multiple of the dimension's granule), placed on each aligned
 * contiguous block of devices [j*k, (j+1)*k) for j = 0 .. ndev/k - 1.  Any
 * device count works; blocks that would run past the last device are left out.
 * first_block_only: each partition once, on devices [0, k) (machines of identical
 * devices, where the blocks of one size are interchangeable).  On machines whose structure
 * makes other groups distinct (nodes, device kinds, link speeds), the caller passes its own
 * device sets (sw_problem_enumerate_sets; python/shardwise/machine/device_sets.py chooses them).
 */
#include <stdint.h>  /* uintptr_t */
#include <stdlib.h>  /* malloc, calloc, realloc, free */
#include <string.h>  /* memcmp, memcpy, memset */

#include "internal.h"

static sw_status pool_append(sw_problem *p, const int32_t *devs, int k, int64_t *offset) {
    if (p->pool_len + k > p->pool_cap) {
        int64_t cap = p->pool_cap ? p->pool_cap * 2 : 1024;
        while (cap < p->pool_len + k) {
            cap *= 2;
        }
        int32_t *np = realloc(p->dev_pool, sizeof(int32_t) * (size_t)cap);
        if (!np) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        p->dev_pool = np;
        p->pool_cap = cap;
    }
    *offset = p->pool_len;
    memcpy(p->dev_pool + p->pool_len, devs, sizeof(int32_t) * (size_t)k);
    p->pool_len += k;
    return SW_OK;
}

/* Per worker count k (0 .. ndev), where the last list of k devices went in a pool (-1: none
 * yet), for pool_add; NULL when out of memory. */
static int64_t *last_lists(int ndev) {
    int64_t *last = malloc(sizeof *last * ((size_t)ndev + 1));
    for (int k = 0; last && k <= ndev; k++) {
        last[k] = -1;
    }
    return last;
}

/* The list of k devices into p's pool at *offset: where the last list of k went (last[k]) when it
 * is the same, as the enumeration's configurations on the same devices share theirs, else
 * appended.  The staged search of a large machine sets 10^5 configurations on the first devices,
 * most of them on [0, k) for a few k: stored once each, their lists took gigabytes (a 32-layer
 * Llama on 1,024 GPUs: 1.4 GB). */
static sw_status pool_add(sw_problem *p, int64_t *last, const int32_t *list, int k, int64_t *offset) {
    if (last[k] >= 0 && !memcmp(p->dev_pool + last[k], list, sizeof *list * (size_t)k)) {
        *offset = last[k];
        return SW_OK;
    }
    SW_TRY(pool_append(p, list, k, offset));
    last[k] = *offset;
    return SW_OK;
}

static int degree_fits(const sw_op *op, int d, int64_t degree) {
    if (degree < 1 || op->extent[d] % degree != 0) {
        return 0;
    }
    return (op->extent[d] / degree) % op->granule[d] == 0;
}

/* Every op's configurations, one op after another, in one array: where that is 1 MB or more
 * (Inception-v3 on 16 devices: 25,000 configurations, 1.2 MB), on huge pages, mapped at one
 * fault instead of ~300 (each op's own array took ~1 ms of a search's 1.4 ms enumeration in a
 * fresh process, most of it those faults). */
typedef struct {
    sw_config *items;
    int64_t len, cap;
} config_list;

static sw_status list_push(config_list *l, const sw_config *c) {
    if (l->len == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        size_t bytes = sizeof *l->items * (size_t)cap;
        sw_config *n = sw_big_grow(l->items, sizeof *l->items * (size_t)l->len, bytes, SW_GROW_HUGE_FROM);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        l->items = n;
        l->cap = cap;
    }
    l->items[l->len++] = *c;
    return SW_OK;
}

/* Does op hold configurations of its own (freed with it), not a part of p's block?  (Addresses
 * compared as integers: an array of its own is another object than the block.) */
static int own_configs(const sw_problem *p, const sw_op *op) {
    uintptr_t at = (uintptr_t)op->cfgs, lo = (uintptr_t)p->cfg_block;
    return !p->cfg_block || at < lo || at >= lo + sizeof *p->cfg_block * (size_t)p->cfg_block_len;
}

void sw_op_set_configs(sw_problem *p, sw_op *op, sw_config *cfgs, int n) {
    if (own_configs(p, op)) {
        free(op->cfgs);
    }
    op->cfgs = cfgs;
    op->ncfg = n;
}

/* Every factorization of `remaining` over dimensions d..out_rank-1, each on every set of
 * offsets[0 .. nsets). */
static sw_status factorize(const sw_op *op, int d, int remaining, sw_config *cur, const int64_t *offsets, int nsets,
                           config_list *out) {
    if (d == op->out_rank) {
        if (remaining != 1) {
            return SW_OK;
        }
        for (int j = 0; j < nsets; j++) {
            cur->dev_offset = offsets[j];
            sw_status s = list_push(out, cur);
            if (s != SW_OK) {
                return s;
            }
        }
        return SW_OK;
    }
    for (int deg = 1; deg <= remaining; deg++) {
        if (remaining % deg != 0 || !degree_fits(op, d, deg)) {
            continue;
        }
        cur->deg[d] = deg;
        sw_status s = factorize(op, d + 1, remaining / deg, cur, offsets, nsets, out);
        if (s != SW_OK) {
            return s;
        }
    }
    return SW_OK;
}

/* The sets of each size k, consecutive in size order: sets [first[i], first[i + 1]) have
 * size sizes[i]. */
typedef struct {
    int nsizes;
    int *sizes, *first;
    int64_t *offsets;   /* per set: its devices in the pool */
} sets_by_size;

static void sets_free(sets_by_size *b) {
    free(b->sizes);
    free(b->first);
    free(b->offsets);
}

/* Check the sets (each 1..ndev distinct devices in range, no set twice), append them to the
 * pool and group them by size (stable: sets of one size keep their order). */
static sw_status group_sets(sw_problem *p, int nsets, const int32_t *ptr, const int32_t *devs, sets_by_size *b) {
    memset(b, 0, sizeof *b);
    b->sizes = malloc(sizeof *b->sizes * ((size_t)nsets + 1));
    b->first = malloc(sizeof *b->first * ((size_t)nsets + 2));
    b->offsets = malloc(sizeof *b->offsets * ((size_t)nsets + 1));
    int32_t *order = malloc(sizeof *order * ((size_t)nsets + 1));
    char *seen = calloc((size_t)p->ndev, 1);
    sw_status s = SW_OK;
    if (!b->sizes || !b->first || !b->offsets || !order || !seen) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for device sets");
        goto done;
    }
    for (int i = 0; i < nsets && s == SW_OK; i++) {
        int k = ptr[i + 1] - ptr[i];
        if (k < 1 || k > p->ndev) {
            s = SW_FAIL(SW_ERR_VALUE, "device set %d has %d devices; a set has 1..%d", i, k, p->ndev);
            break;
        }
        for (int w = 0; w < k && s == SW_OK; w++) {
            int32_t d = devs[ptr[i] + w];
            if (d < 0 || d >= p->ndev || seen[d]) {
                s = SW_FAIL(SW_ERR_VALUE, "device set %d: device %d is out of range 0..%d or repeated", i, d,
                            p->ndev - 1);
            } else {
                seen[d] = 1;
            }
        }
        for (int w = 0; w < k; w++) {
            int32_t d = devs[ptr[i] + w];
            if (d >= 0 && d < p->ndev) {
                seen[d] = 0;
            }
        }
        for (int j = 0; j < i && s == SW_OK; j++) {   /* sets are few (tens): pairwise is fine */
            if (ptr[j + 1] - ptr[j] == k && memcmp(devs + ptr[j], devs + ptr[i], sizeof *devs * (size_t)k) == 0) {
                s = SW_FAIL(SW_ERR_VALUE, "device sets %d and %d are the same", j, i);
            }
        }
        if (s == SW_OK) {
            s = pool_append(p, devs + ptr[i], k, &b->offsets[i]);
        }
    }
    if (s != SW_OK) {
        goto done;
    }
    for (int i = 0; i < nsets; i++) {   /* stable insertion sort by size */
        int j = i;
        while (j > 0 && ptr[order[j - 1] + 1] - ptr[order[j - 1]] > ptr[i + 1] - ptr[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int64_t *sorted = malloc(sizeof *sorted * ((size_t)nsets + 1));
    if (!sorted) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for device sets");
        goto done;
    }
    for (int i = 0; i < nsets; i++) {
        int k = ptr[order[i] + 1] - ptr[order[i]];
        sorted[i] = b->offsets[order[i]];
        if (b->nsizes == 0 || b->sizes[b->nsizes - 1] != k) {
            b->sizes[b->nsizes] = k;
            b->first[b->nsizes++] = i;
        }
    }
    b->first[b->nsizes] = nsets;
    free(b->offsets);
    b->offsets = sorted;
done:
    free(order);
    free(seen);
    if (s != SW_OK) {
        sets_free(b);
    }
    return s;
}

sw_status sw_problem_enumerate_sets(sw_problem *p, int nsets, const int32_t *ptr, const int32_t *devs) {
    if (nsets < 1) {
        return SW_FAIL(SW_ERR_VALUE, "no device sets to enumerate");
    }
    sets_by_size b;
    SW_TRY(group_sets(p, nsets, ptr, devs, &b));
    /* room for four configurations per op and device set, made at once (a guess: 2.6 for
     * Inception-v3 on 16 devices); every op's go into one list, set on the ops at the end */
    config_list list = {0};
    int64_t *first = malloc(sizeof *first * ((size_t)p->nops + 1));
    sw_status s = first ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    int64_t guess = 4 * (int64_t)p->nops * nsets;
    size_t guess_bytes = sizeof *list.items * (size_t)(guess > 64 ? guess : 64);
    if (s == SW_OK && guess < INT32_MAX) {
        list.items = sw_big_alloc(guess_bytes, SW_GROW_HUGE_FROM);
        list.cap = list.items ? (int64_t)(guess_bytes / sizeof *list.items) : 0;
    }
    for (int i = 0; i < p->nops && s == SW_OK; i++) {
        sw_op *op = &p->ops[i];
        first[i] = list.len;
        for (int z = 0; z < b.nsizes && s == SW_OK; z++) {
            int k = b.sizes[z], n = b.first[z + 1] - b.first[z];
            const int64_t *offsets = b.offsets + b.first[z];
            sw_config cur;
            memset(&cur, 0, sizeof cur);
            for (int d = 0; d < SW_MAX_RANK; d++) {
                cur.deg[d] = 1;
            }
            cur.nworkers = k;
            cur.rvar = -1;
            cur.rdeg = 1;
            s = factorize(op, 0, k, &cur, offsets, n, &list);
            for (int v = op->out_rank; p->reduction_splits && v < op->nvars && s == SW_OK; v++) {
                for (int r = 2; op->additive[v] && r <= k && s == SW_OK; r++) {
                    if (k % r != 0 || op->extent[v] % r != 0) {
                        continue;
                    }
                    cur.rvar = v;
                    cur.rdeg = r;
                    s = factorize(op, 0, k / r, &cur, offsets, n, &list);
                }
            }
        }
        if (s == SW_OK && list.len - first[i] > INT32_MAX) {
            s = SW_FAIL(SW_ERR_TOO_LARGE, "op %d has more than 2^31 configurations", i);
        }
        if (s == SW_OK && list.len == first[i]) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d has no valid configuration on the given device sets", i);
        }
    }
    if (s == SW_OK) {   /* every op's, from the new block (the list does not move any more) */
        sw_config *old = p->cfg_block;
        first[p->nops] = list.len;
        for (int i = 0; i < p->nops; i++) {
            sw_op_set_configs(p, &p->ops[i], list.items + first[i], (int)(first[i + 1] - first[i]));
            sw_configs_note_first_device(p, p->ops[i].cfgs, p->ops[i].ncfg);
        }
        p->cfg_block = list.items;   /* (set after the ops: own_configs read the old block) */
        p->cfg_block_len = list.len;
        free(old);
        list.items = NULL;
    }
    free(list.items);
    free(first);
    sets_free(&b);
    return s;
}

sw_status sw_problem_enumerate(sw_problem *p, const int32_t *counts, int ncounts, int first_block_only) {
    if (ncounts < 1) {
        return SW_FAIL(SW_ERR_VALUE, "no worker counts to enumerate");
    }
    int nsets = 0, ndevs = 0;
    for (int ci = 0; ci < ncounts; ci++) {
        int k = counts[ci];
        if (k < 1 || k > p->ndev) {
            return SW_FAIL(SW_ERR_VALUE, "worker count %d outside 1..%d", k, p->ndev);
        }
        for (int cj = 0; cj < ci; cj++) {
            if (counts[cj] == k) {
                return SW_FAIL(SW_ERR_VALUE, "worker count %d given twice", k);
            }
        }
        int blocks = first_block_only ? 1 : p->ndev / k;
        nsets += blocks;
        ndevs += blocks * k;
    }
    /* the aligned blocks [j k, (j + 1) k) of every count k */
    int32_t *ptr = malloc(sizeof *ptr * ((size_t)nsets + 1)), *devs = malloc(sizeof *devs * ((size_t)ndevs + 1));
    if (!ptr || !devs) {
        free(ptr);
        free(devs);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int i = 0, at = 0;
    ptr[0] = 0;
    for (int ci = 0; ci < ncounts; ci++) {
        int k = counts[ci], blocks = first_block_only ? 1 : p->ndev / k;
        for (int j = 0; j < blocks; j++) {
            for (int w = 0; w < k; w++) {
                devs[at++] = j * k + w;
            }
            ptr[++i] = at;
        }
    }
    sw_status s = sw_problem_enumerate_sets(p, nsets, ptr, devs);
    free(ptr);
    free(devs);
    return s;
}

/* The first device of c when its devices are first, first + 1, ...; -1 otherwise. */
static int first_device_of(const sw_problem *p, const sw_config *c) {
    const int32_t *d = p->dev_pool + c->dev_offset;
    for (int w = 1; w < c->nworkers; w++) {
        if (d[w] != d[0] + w) {
            return -1;
        }
    }
    return d[0];
}

int sw_config_first_device(const sw_problem *p, const sw_config *c) {
    return c->first_plus1 ? c->first_plus1 - 1 : first_device_of(p, c);
}

void sw_configs_note_first_device(const sw_problem *p, sw_config *cfgs, int n) {
    for (int c = 0; c < n; c++) {
        int same = c > 0 && cfgs[c].dev_offset == cfgs[c - 1].dev_offset && cfgs[c].nworkers == cfgs[c - 1].nworkers;
        cfgs[c].first_plus1 = same ? cfgs[c - 1].first_plus1 : 1 + first_device_of(p, &cfgs[c]);
    }
}

sw_status sw_config_set_reduction(const sw_op *op, int opi, int32_t v, int32_t r, sw_config *cfg) {
    cfg->rvar = -1;
    cfg->rdeg = 1;
    if (v == -1 && r == 1) {
        return SW_OK;
    }
    if (v < op->out_rank || v >= op->nvars || !op->additive[v]) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: variable %d is not a reduction whose partial results add up", opi, v);
    }
    if (r < 2 || op->extent[v] % r != 0) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: reduction degree %d does not divide variable %d (size %lld)", opi, r,
                       v, (long long)op->extent[v]);
    }
    cfg->rvar = v;
    cfg->rdeg = r;
    return SW_OK;
}

sw_status sw_problem_set_configs(sw_problem *p, int opi, int ncfg, const int32_t *deg, const int32_t *red,
                                 const int32_t *devs, int maxk) {
    if (opi < 0 || opi >= p->nops) {
        return SW_FAIL(SW_ERR_VALUE, "op index %d out of range", opi);
    }
    if (ncfg < 1) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: at least one configuration is needed", opi);
    }
    sw_op *op = &p->ops[opi];
    sw_config *cfgs = calloc((size_t)ncfg, sizeof *cfgs);
    char *seen = calloc((size_t)p->ndev, 1);
    int64_t *last = last_lists(p->ndev);   /* (pool_add) */
    sw_status s = SW_OK;
    if (!cfgs || !seen || !last) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int c = 0; c < ncfg; c++) {
        int64_t k = 1;
        for (int d = 0; d < SW_MAX_RANK; d++) {
            int32_t g = deg[(size_t)c * SW_MAX_RANK + d];
            if (d >= op->out_rank ? g != 1 : !degree_fits(op, d, g)) {
                s = SW_FAIL(SW_ERR_VALUE, "op %d: degree %d does not divide dimension %d (size %lld)", opi, g, d,
                            d < op->out_rank ? (long long)op->extent[d] : 1LL);
                goto fail;
            }
            cfgs[c].deg[d] = g;
            k *= g;
        }
        s = sw_config_set_reduction(op, opi, red ? red[2 * (size_t)c] : -1, red ? red[2 * (size_t)c + 1] : 1,
                                    &cfgs[c]);
        if (s != SW_OK) {
            goto fail;
        }
        k *= cfgs[c].rdeg;
        if (k > maxk || k > p->ndev) {
            s = SW_FAIL(SW_ERR_VALUE, "op %d: %lld workers but only %d devices given", opi, (long long)k,
                        k > maxk ? maxk : p->ndev);
            goto fail;
        }
        memset(seen, 0, (size_t)p->ndev);
        const int32_t *row = devs + (size_t)c * maxk;
        for (int w = 0; w < maxk; w++) {
            int32_t dv = row[w];
            if (w < k ? (dv < 0 || dv >= p->ndev || seen[dv]) : dv != -1) {
                s = SW_FAIL(SW_ERR_VALUE, "op %d: configuration %d needs %lld distinct devices in range", opi, c,
                            (long long)k);
                goto fail;
            }
            if (w < k) {
                seen[dv] = 1;
            }
        }
        cfgs[c].nworkers = (int32_t)k;
        if ((s = pool_add(p, last, row, (int)k, &cfgs[c].dev_offset)) != SW_OK) {
            goto fail;
        }
    }
    sw_configs_note_first_device(p, cfgs, ncfg);
    sw_op_set_configs(p, op, cfgs, ncfg);
    free(seen);
    free(last);
    return SW_OK;
fail:
    free(cfgs);
    free(seen);
    free(last);
    return s;
}

sw_status sw_problem_copy_configs(sw_problem *p, int opi, const sw_problem *src, int n, const int64_t *rows) {
    if (opi < 0 || opi >= p->nops || src->nops != p->nops || src->ndev != p->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: configurations are copied between problems of one graph and machine "
                       "(%d and %d ops, %d and %d devices)", opi, p->nops, src->nops, p->ndev, src->ndev);
    }
    sw_op *op = &p->ops[opi];
    const sw_op *from = &src->ops[opi];
    if (from->nvars != op->nvars || from->out_rank != op->out_rank ||
        memcmp(from->extent, op->extent, sizeof op->extent) || memcmp(from->granule, op->granule, sizeof op->granule) ||
        memcmp(from->additive, op->additive, sizeof op->additive)) {
        return SW_FAIL(SW_ERR_VALUE, "op %d has another shape in the problem its configurations are copied from", opi);
    }
    if (n < 1) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: at least one configuration is needed", opi);
    }
    for (int c = 0; c < n; c++) {
        if (rows[c] < 0 || rows[c] >= from->ncfg) {
            return SW_FAIL(SW_ERR_VALUE, "op %d: row %lld of %d configurations", opi, (long long)rows[c], from->ncfg);
        }
    }
    sw_config *cfgs = malloc(sizeof *cfgs * (size_t)n);
    int64_t *last = last_lists(p->ndev);   /* (pool_add) */
    int32_t *list = malloc(sizeof *list * ((size_t)p->ndev + 1));   /* (src may be p: its pool moves as it grows) */
    if (!cfgs || !last || !list) {
        free(cfgs);
        free(last);
        free(list);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    sw_status s = SW_OK;
    for (int c = 0; c < n && s == SW_OK; c++) {
        cfgs[c] = from->cfgs[rows[c]];   /* degrees, reduction, workers and first device as they were */
        int k = cfgs[c].nworkers;
        memcpy(list, src->dev_pool + cfgs[c].dev_offset, sizeof *list * (size_t)k);
        s = pool_add(p, last, list, k, &cfgs[c].dev_offset);
    }
    free(last);
    free(list);
    if (s != SW_OK) {
        free(cfgs);
        return s;
    }
    sw_op_set_configs(p, op, cfgs, n);
    return SW_OK;
}

/* A fact about two configurations, which the cost tables (cost/cost.c, cost_placed.c,
 * cost_bounds.c) use to share work between placements of one partition. */
int sw_same_partition(const sw_config *a, const sw_config *b) {
    if (a->nworkers != b->nworkers || a->rvar != b->rvar || a->rdeg != b->rdeg) {
        return 0;
    }
    for (int d = 0; d < SW_MAX_RANK; d++) {
        if (a->deg[d] != b->deg[d]) {
            return 0;
        }
    }
    return 1;
}
