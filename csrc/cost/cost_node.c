/* cost_node.c -- the per-configuration terms of Eq. 1 (seed 003): t_c and t_s.
 *
 * t_c(op, c)  compute: per worker, a roofline max(FLOPs / FLOP/s, bytes / memory
 *             bandwidth) of its shard, times backward_factor (forward + backward,
 *             3 by default: backward costs about twice the forward); the slowest
 *             worker sets the time.
 * t_s(op, c)  parameter synchronization: workers that read the same box of a
 *             weight (or batchnorm statistics) are replicas of it; statistics
 *             are exchanged twice (forward and backward), parameters once.  Parameter
 *             server (default, as in the papers, placed on the first replica's
 *             device): every other replica pushes its gradient and pulls the
 *             parameters, 2 * bytes over its route.  Ring all-reduce:
 *             2 (r-1)/r * bytes over the slowest link of the ring.
 * Replicas are found by sorting the k workers' boxes (O(k log k)), so 1,024-worker
 * configurations cost milliseconds, not the seconds of comparing every pair.
 */
#include <math.h>    /* INFINITY, fmax */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy */

#include "internal.h"

#define SYNC_DIRECTIONS 2.0   /* gradient push + parameter pull */

static int64_t reduction_volume(const sw_op *op) {
    int64_t v = 1;
    for (int k = op->out_rank; k < op->nvars; k++) {
        v *= op->extent[k];
    }
    return v;
}

static const int32_t *config_devices(const sw_problem *p, const sw_config *c) {
    return p->dev_pool + c->dev_offset;
}

double sw_worker_flops(const sw_problem *p, int opi, const sw_config *c, int w, double *outputs) {
    const sw_op *op = &p->ops[opi];
    sw_box box;
    sw_worker_box(op, c, w, &box);
    /* a worker of a reduction group covers 1/rdeg of the split reduction variable */
    *outputs = (double)sw_box_volume(&box);
    double points = *outputs * (double)reduction_volume(op) / (double)c->rdeg;
    return points * op->flops_per_point + *outputs * op->flops_per_output;
}

double sw_worker_time(const sw_problem *p, int opi, const sw_config *c, int w, int dev) {
    const sw_op *op = &p->ops[opi];
    if (op->ninputs == 0) {
        return 0.0;  /* graph inputs are loaded where they are needed */
    }
    double outputs, flops = sw_worker_flops(p, opi, c, w, &outputs);
    double elements = outputs;
    for (int k = 0; k < op->ninputs; k++) {
        sw_box region;
        if (sw_worker_region(op, c, w, k, &region)) {
            elements += (double)sw_box_volume(&region);
        }
    }
    return fmax(flops / sw_peak_flops(p, opi, dev), elements * p->bytes_per_element / p->dev_membw[dev]);
}

enum { MAX_CLASSES = 64, MAX_COMBOS = 4096 };

/* The most elements any worker of c touches (outputs + every input region), from the
 * region factors of each input: per split coordinate, its values fall in a few
 * classes (those with the same factor for every input: the interior blocks are
 * alike, the first and last may be clipped), and the workers in a product of classes
 * touch the same count.  1 if done, 0 when some input is not separable or the classes
 * are too many (the caller counts worker by worker). */
static int most_elements(const sw_op *op, const sw_config *c, double outputs, double *most) {
    int ns = op->ninputs;
    sw_region_factors *f = calloc((size_t)(ns > 0 ? ns : 1), sizeof *f);
    int ok = f != NULL, made = 0;
    for (; ok && made < ns; made++) {
        ok = sw_config_region_factors(op, c, made, &f[made]) == SW_OK && f[made].separable;
    }
    int nsplit = ok && ns > 0 ? f[0].nsplit : 0;
    int nclass[SW_MAX_VARS] = {0};
    int64_t rep[SW_MAX_VARS][MAX_CLASSES];   /* a value of each class */
    double combos = 1;
    for (int q = 0; ok && q < nsplit; q++) {
        for (int64_t x = 0; ok && x < f[0].count[q]; x++) {
            int found = 0;
            for (int k = 0; k < nclass[q] && !found; k++) {
                found = 1;
                for (int sl = 0; sl < ns && found; sl++) {
                    found = f[sl].factor[f[sl].first[q] + x] == f[sl].factor[f[sl].first[q] + rep[q][k]];
                }
            }
            if (!found) {
                ok = nclass[q] < MAX_CLASSES;
                if (ok) {
                    rep[q][nclass[q]++] = x;
                }
            }
        }
        combos *= nclass[q];
        ok = ok && combos <= MAX_COMBOS;
    }
    *most = outputs;
    int idx[SW_MAX_VARS] = {0};
    while (ok) {   /* every product of classes, as an odometer */
        double e = outputs;
        for (int sl = 0; sl < ns; sl++) {
            double v = f[sl].constant;
            for (int q = 0; q < nsplit; q++) {
                v *= f[sl].factor[f[sl].first[q] + rep[q][idx[q]]];
            }
            e += v;
        }
        *most = e > *most ? e : *most;
        int q = nsplit - 1;
        while (q >= 0 && ++idx[q] == nclass[q]) {
            idx[q--] = 0;
        }
        if (q < 0) {
            break;
        }
    }
    for (int sl = 0; f && sl < made; sl++) {
        sw_region_factors_free(&f[sl]);
    }
    free(f);
    return ok;
}

/* The slowest worker's time, the regions of all workers computed at once (the same
 * sums as sw_worker_time, in the same order). */
static int compute_time_fast(const sw_problem *p, int opi, const sw_config *c, double *worst) {
    const sw_op *op = &p->ops[opi];
    const int32_t *devs = config_devices(p, c);
    int k = c->nworkers;
    double *elements = malloc(sizeof(double) * (size_t)k);
    sw_box *regions = malloc(sizeof *regions * (size_t)k);
    char *used = malloc((size_t)k);
    int ok = elements && regions && used;
    sw_box box;
    sw_worker_box(op, c, 0, &box);   /* every output block has the same volume */
    double outputs = (double)sw_box_volume(&box);
    double points = outputs * (double)reduction_volume(op) / (double)c->rdeg;
    double flops = points * op->flops_per_point + outputs * op->flops_per_output;
    int alike = 1;   /* the same device kind everywhere: the most elements set the time */
    for (int w = 1; w < k && alike; w++) {
        alike = sw_peak_flops(p, opi, devs[w]) == sw_peak_flops(p, opi, devs[0]) && p->dev_membw[devs[w]] == p->dev_membw[devs[0]];
    }
    double most;
    if (alike && most_elements(op, c, outputs, &most)) {
        *worst = fmax(flops / sw_peak_flops(p, opi, devs[0]), most * p->bytes_per_element / p->dev_membw[devs[0]]);
        free(elements);
        free(regions);
        free(used);
        return 1;
    }
    for (int w = 0; ok && w < k; w++) {
        elements[w] = outputs;
    }
    for (int slot = 0; ok && slot < op->ninputs; slot++) {
        ok = sw_config_regions(op, c, slot, regions, used) == SW_OK;
        for (int w = 0; ok && w < k; w++) {
            elements[w] += used[w] ? (double)sw_box_volume(&regions[w]) : 0.0;
        }
    }
    *worst = 0.0;
    for (int w = 0; ok && w < k; w++) {
        double t = fmax(flops / sw_peak_flops(p, opi, devs[w]), elements[w] * p->bytes_per_element / p->dev_membw[devs[w]]);
        *worst = t > *worst ? t : *worst;
    }
    free(elements);
    free(regions);
    free(used);
    return ok;
}

double sw_compute_time(const sw_problem *p, int opi, const sw_config *c) {
    double worst = 0.0;
    if (p->ops[opi].ninputs == 0) {
        return 0.0;   /* graph inputs are loaded where they are needed */
    }
    if (!compute_time_fast(p, opi, c, &worst)) {   /* out of memory: one worker at a time */
        const int32_t *devs = config_devices(p, c);
        worst = 0.0;
        for (int w = 0; w < c->nworkers; w++) {
            double t = sw_worker_time(p, opi, c, w, devs[w]);
            worst = t > worst ? t : worst;
        }
    }
    return worst * p->backward_factor;
}

static double route_bw(const sw_problem *p, int from, int to) { return p->bw[(size_t)from * p->ndev + to]; }

/* Time and bytes to synchronize one group of replicas holding `bytes` each, by ring all-reduce
 * (`ring`) or parameter server. */
static void sync_group(const sw_problem *p, const int32_t *devs, const int *members, int r, double bytes, int ring,
                       double *time, double *moved) {
    if (r < 2 || bytes <= 0) {
        return;
    }
    if (ring) {
        double slowest = INFINITY;
        for (int m = 0; m < r; m++) {
            double b = route_bw(p, devs[members[m]], devs[members[(m + 1) % r]]);
            if (b < slowest) {
                slowest = b;
            }
        }
        *time += SYNC_DIRECTIONS * (r - 1) / (double)r * bytes / slowest;
        *moved += SYNC_DIRECTIONS * (r - 1) * bytes;
        return;
    }
    int server = devs[members[0]];
    for (int m = 1; m < r; m++) {
        *time += SYNC_DIRECTIONS * bytes / route_bw(p, devs[members[m]], server);
        *moved += SYNC_DIRECTIONS * bytes;
    }
}

/* Partition-n-reduce: in each reduction group every non-owner sends its partial
 * output block to the owner (forward) and receives the block's gradient back
 * (backward), 2 * block bytes over its route, serially as in Eq. 1. */
static void reduce_partial_outputs(const sw_problem *p, const sw_op *op, const sw_config *c, double *time,
                                   double *bytes) {
    if (c->rdeg < 2) {
        return;
    }
    const int32_t *devs = config_devices(p, c);
    sw_box box;
    sw_worker_box(op, c, 0, &box);   /* every output block has the same volume (extent / degree each) */
    double block = (double)sw_box_volume(&box) * p->bytes_per_element;
    for (int w = 0; w < c->nworkers; w++) {
        if (sw_is_owner(c, w)) {
            continue;
        }
        int owner = devs[w - w % c->rdeg];
        *time += SYNC_DIRECTIONS * block / route_bw(p, devs[w], owner);
        *bytes += SYNC_DIRECTIONS * block;
    }
}

/* Order of worker indices by (box, worker): equal boxes (replicas) become runs in
 * ascending worker order.  A merge sort: the C library's qsort has no context. */
static int box_less(const sw_box *regions, const char *none, int a, int b) {
    if (none[a] != none[b]) {
        return none[a] < none[b];
    }
    const sw_box *x = &regions[a], *y = &regions[b];
    for (int d = 0; !none[a] && d < x->rank; d++) {
        if (x->lo[d] != y->lo[d]) {
            return x->lo[d] < y->lo[d];
        }
        if (x->hi[d] != y->hi[d]) {
            return x->hi[d] < y->hi[d];
        }
    }
    return a < b;
}

static void sort_workers(const sw_box *regions, const char *none, int *idx, int *tmp, int n) {
    for (int width = 1; width < n; width *= 2) {
        for (int lo = 0; lo < n; lo += 2 * width) {
            int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                tmp[o++] = box_less(regions, none, idx[j], idx[i]) ? idx[j++] : idx[i++];
            }
            while (i < mid) {
                tmp[o++] = idx[i++];
            }
            while (j < hi) {
                tmp[o++] = idx[j++];
            }
        }
        for (int q = 0; q < n; q++) {
            idx[q] = tmp[q];
        }
    }
}

/* The replica groups of one partition: which workers synchronize which slice, found once
 * for every placement of the partition (the regions workers read do not depend on their
 * devices); a placement then only adds up its routes (sync_placed). */
typedef struct {
    int first, count;   /* members[first .. first + count): worker indices, ascending */
    double slice;       /* bytes each replica holds */
    int rounds;         /* 2 for batchnorm statistics (forward and backward), 1 for parameters */
    int ring;           /* by ring all-reduce, else through the first replica */
} replica_group;

typedef struct {
    int *members;   /* k per non-data slot at most */
    replica_group *group;
    int ngroups;
} partition_sync;

static void partition_sync_free(partition_sync *ps) {
    free(ps->members);
    free(ps->group);
    *ps = (partition_sync){0};
}

/* Does value x of coordinate q pick a different interval than value y on some dimension
 * on q?  The order: (lo, extent) of each such dimension, then the value. */
static int value_less(const sw_region_factors *f, int q, int64_t x, int64_t y) {
    for (int d = 0; d < f->rank; d++) {
        if (f->dim_coord[d] != q) {
            continue;
        }
        size_t a = (size_t)d * f->cells + f->first[q] + x, b = (size_t)d * f->cells + f->first[q] + y;
        if (f->lo[a] != f->lo[b]) {
            return f->lo[a] < f->lo[b];
        }
        if (f->extent[a] != f->extent[b]) {
            return f->extent[a] < f->extent[b];
        }
    }
    return x < y;
}

/* cls[x] for the values x of coordinate q: equal when they pick the same intervals on every
 * dimension on q, numbered from 0 (*ncls of them); -1 where the value reads nothing (factor 0).
 * A merge sort of the values (the C library's qsort has no context): sum of counts log count
 * over a configuration, not k log k. */
static void class_values(const sw_region_factors *f, int q, int *cls, int *idx, int *tmp, int *ncls) {
    int n = 0;
    for (int64_t x = 0; x < f->count[q]; x++) {
        cls[x] = -1;
        if (f->factor[f->first[q] + x] > 0) {
            idx[n++] = (int)x;
        }
    }
    for (int width = 1; width < n; width *= 2) {
        for (int lo = 0; lo < n; lo += 2 * width) {
            int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                tmp[o++] = value_less(f, q, idx[j], idx[i]) ? idx[j++] : idx[i++];
            }
            while (i < mid) {
                tmp[o++] = idx[i++];
            }
            while (j < hi) {
                tmp[o++] = idx[j++];
            }
        }
        for (int r = 0; r < n; r++) {
            idx[r] = tmp[r];
        }
    }
    *ncls = 0;
    for (int r = 0; r < n; r++) {
        int fresh = r == 0;
        for (int d = 0; !fresh && d < f->rank; d++) {
            size_t a = (size_t)d * f->cells + f->first[q] + idx[r], b = (size_t)d * f->cells + f->first[q] + idx[r - 1];
            fresh = f->dim_coord[d] == q && (f->lo[a] != f->lo[b] || f->extent[a] != f->extent[b]);
        }
        *ncls += fresh;
        cls[idx[r]] = *ncls - 1;
    }
}

static void free_all(int *cls, int *idx, int *tmp, int *wgroup, int *size, int64_t *first_worker, int *key_group) {
    free(cls);
    free(idx);
    free(tmp);
    free(wgroup);
    free(size);
    free(first_worker);
    free(key_group);
}

/* The box of the worker with coordinates x (one that reads something) from the factors. */
static void factor_box(const sw_region_factors *f, const int64_t *x, sw_box *box) {
    box->rank = f->rank;
    for (int d = 0; d < f->rank; d++) {
        int q = f->dim_coord[d];
        size_t cell = q < 0 ? 0 : (size_t)d * f->cells + f->first[q] + x[q];
        box->lo[d] = q < 0 ? f->const_lo[d] : f->lo[cell];
        box->hi[d] = box->lo[d] + (q < 0 ? f->const_len[d] : f->extent[cell]);
    }
}

/* One slot's replica groups from its region factors (separable: each dimension of the slot on
 * at most one split coordinate), appended to out as partition_sync_of's sorting of every
 * worker's box appends them: groups in order of their first worker, members ascending.  A
 * worker that reads something reads the box its coordinate values pick dimension by dimension,
 * so two such workers are replicas exactly when each coordinate some dimension depends on
 * gives them values of one class (class_values); coordinates no dimension depends on (the
 * batch, for a weight) only decide whether a worker reads at all.  O(k) for the workers
 * plus the classing of sum-of-counts values, instead of k boxes and a sort of them (on 1,024
 * devices most of the cost tables' time).  0 when out of memory (out unchanged). */
static int groups_from_factors(const sw_problem *p, const sw_op *op, const sw_config *c, int slot,
                               const sw_region_factors *f, partition_sync *out, int *nmembers) {
    int k = c->nworkers, nsplit = f->nsplit;
    if (f->constant <= 0) {
        return 1;   /* no worker reads this slot */
    }
    int64_t cells = f->cells, stride[SW_MAX_VARS] = {0}, keys = 1;
    int *cls = malloc(sizeof *cls * (size_t)cells), *idx = malloc(sizeof *idx * (size_t)cells);
    int *tmp = malloc(sizeof *tmp * (size_t)cells), *wgroup = malloc(sizeof *wgroup * (size_t)k);
    int *size = calloc((size_t)k + 1, sizeof *size), *key_group = NULL;
    int64_t *first_worker = malloc(sizeof *first_worker * (size_t)k);
    int ok = cls && idx && tmp && wgroup && size && first_worker;
    for (int q = 0; ok && q < nsplit; q++) {
        int relevant = 0, ncls = 1;
        for (int d = 0; d < f->rank; d++) {
            relevant |= f->dim_coord[d] == q;
        }
        if (relevant) {
            class_values(f, q, cls + f->first[q], idx, tmp, &ncls);
        } else {
            for (int64_t x = 0; x < f->count[q]; x++) {
                cls[f->first[q] + x] = f->factor[f->first[q] + x] > 0 ? 0 : -1;
            }
        }
        stride[q] = keys;
        keys *= ncls > 0 ? ncls : 1;   /* at most the product of counts: k */
    }
    key_group = ok ? malloc(sizeof *key_group * (size_t)keys) : NULL;
    ok = ok && key_group;
    if (!ok) {
        free_all(cls, idx, tmp, wgroup, size, first_worker, key_group);
        return 0;
    }
    for (int64_t key = 0; key < keys; key++) {
        key_group[key] = -1;
    }
    int ngroups = 0;
    int64_t x[SW_MAX_VARS] = {0};
    for (int w = 0; w < k; w++) {   /* the workers in order, the last coordinate fastest (worker order) */
        int64_t key = 0;
        for (int q = 0; q < nsplit && key >= 0; q++) {
            int v = cls[f->first[q] + x[q]];
            key = v < 0 ? -1 : key + v * stride[q];
        }
        wgroup[w] = -1;
        if (key >= 0) {
            if (key_group[key] < 0) {
                first_worker[ngroups] = w;
                key_group[key] = ngroups++;
            }
            wgroup[w] = key_group[key];
            size[wgroup[w] + 1]++;
        }
        for (int q = nsplit - 1; q >= 0; q--) {
            if (++x[q] < f->count[q]) {
                break;
            }
            x[q] = 0;
        }
    }
    for (int g = 0; g < ngroups; g++) {   /* size[g]: where group g's members start */
        size[g + 1] += size[g];
    }
    int base = *nmembers, rounds = op->inputs[slot].role == SW_ROLE_STAT ? 2 : 1;
    for (int w = 0; w < k; w++) {
        if (wgroup[w] >= 0) {
            out->members[base + size[wgroup[w]]++] = w;
        }
    }
    for (int g = 0; g < ngroups; g++) {
        replica_group *gr = &out->group[out->ngroups++];
        gr->first = g == 0 ? base : base + size[g - 1];
        gr->count = base + size[g] - gr->first;
        int64_t xw[SW_MAX_VARS], rem = first_worker[g];
        for (int q = nsplit - 1; q >= 0; q--) {
            xw[q] = rem % f->count[q];
            rem /= f->count[q];
        }
        sw_box box;
        factor_box(f, xw, &box);
        gr->slice = (double)sw_box_volume(&box) * p->bytes_per_element;
        gr->rounds = rounds;
        gr->ring = sw_sync_rings(p->sync_model) && op->inputs[slot].role == SW_ROLE_WEIGHT &&
                   sw_ring_chunk_dim(&box, gr->count) >= 0;   /* as partition_sync_of */
    }
    *nmembers = base + (ngroups > 0 ? size[ngroups - 1] : 0);
    free_all(cls, idx, tmp, wgroup, size, first_worker, key_group);
    return 1;
}

/* The replica groups of partition c of op opi, slot by slot, each slot's groups in order of
 * their first worker (the order Eq. 1's sum is taken in).  SW_ERR_NOMEM or a region error. */
static sw_status partition_sync_of(const sw_problem *p, int opi, const sw_config *c, partition_sync *out) {
    const sw_op *op = &p->ops[opi];
    int k = c->nworkers, nslots = 0;
    *out = (partition_sync){0};
    for (int slot = 0; slot < op->ninputs; slot++) {
        nslots += op->inputs[slot].role != SW_ROLE_DATA;
    }
    if (k < 2 || nslots == 0) {
        return SW_OK;
    }
    size_t most = (size_t)k * (size_t)nslots;
    sw_box *regions = malloc(sizeof *regions * (size_t)k);
    int *idx = malloc(sizeof *idx * (size_t)k), *tmp = malloc(sizeof *tmp * (size_t)k);
    int *run = malloc(sizeof *run * (size_t)k);
    char *none = malloc((size_t)k);
    out->members = malloc(sizeof *out->members * most);
    out->group = malloc(sizeof *out->group * most);
    sw_status s = SW_OK;
    if (!regions || !idx || !tmp || !run || !none || !out->members || !out->group) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto out;
    }
    int nmembers = 0;
    for (int slot = 0; slot < op->ninputs && s == SW_OK; slot++) {
        if (op->inputs[slot].role == SW_ROLE_DATA) {
            continue;
        }
        sw_region_factors f;
        if (sw_config_region_factors(op, c, slot, &f) == SW_OK) {
            int done = f.separable && groups_from_factors(p, op, c, slot, &f, out, &nmembers);
            sw_region_factors_free(&f);
            if (done) {
                continue;
            }
        }
        s = sw_config_regions(op, c, slot, regions, none);
        if (s != SW_OK) {
            break;
        }
        for (int w = 0; w < k; w++) {
            none[w] = (char)!none[w];   /* reads none: no replica */
            idx[w] = w;
        }
        sort_workers(regions, none, idx, tmp, k);
        /* run[w]: where w's group starts in idx; groups visited in order of their first worker */
        for (int q = 0; q < k; q++) {
            int start = q > 0 && !none[idx[q]] && !none[idx[q - 1]] &&
                                sw_box_equal(&regions[idx[q]], &regions[idx[q - 1]])
                            ? run[idx[q - 1]]
                            : q;
            run[idx[q]] = start;
        }
        /* statistics are exchanged twice per iteration: forward (sums of x, x^2)
         * and backward (sums of dy, dy * xhat); parameters once */
        int rounds = op->inputs[slot].role == SW_ROLE_STAT ? 2 : 1;
        for (int w = 0; w < k; w++) {
            if (none[w] || idx[run[w]] != w) {
                continue;   /* no replica, or not the first worker of its group */
            }
            replica_group *gr = &out->group[out->ngroups++];
            gr->first = nmembers;
            for (int q = run[w]; q < k && run[idx[q]] == run[w]; q++) {
                out->members[nmembers++] = idx[q];
            }
            gr->count = nmembers - gr->first;
            gr->slice = (double)sw_box_volume(&regions[w]) * p->bytes_per_element;
            gr->rounds = rounds;
            /* what the lowering does (graph/lower_backward.c): with the ring model (or zero, whose
             * allgather moves weight chunks of the same boxes) a weight's group rings when its box
             * cuts into r chunks; batchnorm statistics (summed on the first
             * replica and sent back, sw_lower_reduce_among) and a weight too small to cut go
             * through the first replica under either model */
            gr->ring = sw_sync_rings(p->sync_model) && op->inputs[slot].role == SW_ROLE_WEIGHT &&
                       sw_ring_chunk_dim(&regions[w], gr->count) >= 0;
        }
    }
out:
    free(regions);
    free(idx);
    free(tmp);
    free(run);
    free(none);
    if (s != SW_OK) {
        partition_sync_free(out);
    }
    return s;
}

/* t_s of configuration c (a placement of the partition ps was made from): its groups' routes. */
static void sync_placed(const sw_problem *p, const sw_op *op, const sw_config *c, const partition_sync *ps,
                        double *time, double *bytes) {
    const int32_t *devs = config_devices(p, c);
    *time = 0.0;
    *bytes = 0.0;
    for (int q = 0; q < ps->ngroups; q++) {
        const replica_group *gr = &ps->group[q];
        for (int round = 0; round < gr->rounds; round++) {
            sync_group(p, devs, ps->members + gr->first, gr->count, gr->slice, gr->ring, time, bytes);
        }
    }
    reduce_partial_outputs(p, op, c, time, bytes);
}

/* Do configurations a and b (of one partition) run at the same speed worker by worker: the
 * same peak FLOP/s and memory bandwidth on worker w's device for every w?  Then t_c is the same. */
static int same_speeds(const sw_problem *p, int opi, const sw_config *a, const sw_config *b) {
    const int32_t *da = config_devices(p, a), *db = config_devices(p, b);
    for (int w = 0; w < a->nworkers; w++) {
        if (sw_peak_flops(p, opi, da[w]) != sw_peak_flops(p, opi, db[w]) || p->dev_membw[da[w]] != p->dev_membw[db[w]]) {
            return 0;
        }
    }
    return 1;
}

/* t_c + t_s of every configuration of op i. */
sw_status sw_node_costs_of(sw_problem *p, int i) {
    sw_tables *t = &p->tables;
    int c = p->ops[i].ncfg;
    t->node_cost[i] = malloc(sizeof(double) * (size_t)c);
    p->tc[i] = malloc(sizeof(double) * (size_t)c);
    p->ts[i] = malloc(sizeof(double) * (size_t)c);
    p->sync_bytes[i] = malloc(sizeof(double) * (size_t)c);
    if (!t->node_cost[i] || !p->tc[i] || !p->ts[i] || !p->sync_bytes[i]) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    /* the placements of one partition are enumerated together: its replica groups are found
     * once, and its t_c is computed once where the devices run at the same speeds */
    partition_sync ps = {0};
    int run = 0, no_groups = 0;
    for (int k = 0; k < c; k++) {
        const sw_config *cfg = &p->ops[i].cfgs[k];
        if (k == 0 || !sw_same_partition(&p->ops[i].cfgs[run], cfg)) {
            run = k;
            partition_sync_free(&ps);
            no_groups = partition_sync_of(p, i, cfg, &ps) != SW_OK;
        }
        p->tc[i][k] = k > run && same_speeds(p, i, &p->ops[i].cfgs[run], cfg) ? p->tc[i][run]
                                                                               : sw_compute_time(p, i, cfg);
        if (no_groups) {   /* cannot happen for sane sizes; makes the configuration unattractive */
            p->ts[i][k] = INFINITY;
            p->sync_bytes[i][k] = 0.0;
        } else {
            sync_placed(p, &p->ops[i], cfg, &ps, &p->ts[i][k], &p->sync_bytes[i][k]);
        }
        t->node_cost[i][k] = p->tc[i][k] + p->ts[i][k];
    }
    partition_sync_free(&ps);
    atomic_fetch_add(&p->progress_done, 1);
    return SW_OK;
}

/* The data op i's node costs are a function of, into k (emptied): its iteration space, FLOPs,
 * peak (dense or not), every input's role, shape, index map and window (the regions its
 * workers read), and its configurations with their devices; nothing of its producers. */
static int node_data(const sw_problem *p, int i, sw_key *k) {
    const sw_op *op = &p->ops[i];
    int ok = 1;
    k->len = 0;
    ok &= sw_key_push(k, op->nvars) && sw_key_push(k, op->out_rank) && sw_key_push(k, op->ninputs) &&
          sw_key_push(k, p->op_dense ? p->op_dense[i] : 0) && sw_key_push_double(k, op->flops_per_point) &&
          sw_key_push_double(k, op->flops_per_output);
    for (int v = 0; v < op->nvars; v++) {
        ok &= sw_key_push(k, op->extent[v]) && sw_key_push(k, op->additive[v]);
    }
    for (int d = 0; d < op->out_rank; d++) {
        ok &= sw_key_push(k, op->granule[d]);
    }
    for (int slot = 0; ok && slot < op->ninputs; slot++) {
        const sw_input *in = &op->inputs[slot];
        ok &= sw_key_push(k, in->role) && sw_key_push(k, in->bias) && sw_key_push(k, in->rank) &&
              sw_key_push(k, in->has_window);
        for (int d = 0; d < in->rank; d++) {
            const sw_index_expr *e = &in->expr[d];
            ok &= sw_key_push(k, in->shape[d]) && sw_key_push(k, e->offset) && sw_key_push(k, e->div) &&
                  sw_key_push(k, e->mod);
            for (int v = 0; v < op->nvars; v++) {
                ok &= sw_key_push(k, e->coef[v]) && sw_key_push(k, e->vdiv[v]);
            }
        }
        for (int d = 0; in->has_window && d < op->out_rank; d++) {
            ok &= sw_key_push(k, in->win_lo[d]) && sw_key_push(k, in->win_hi[d]);
        }
    }
    ok &= sw_key_push(k, op->ncfg);
    for (int c = 0; ok && c < op->ncfg; c++) {
        ok &= sw_key_push_config(k, p, &op->cfgs[c], op->out_rank);
    }
    return ok;
}

sw_status sw_node_twins(const sw_problem *p, int *from) {
    sw_key_set seen = {0, calloc((size_t)p->nops + 1, sizeof(sw_key)), calloc((size_t)p->nops + 1, sizeof(uint64_t)),
                       calloc((size_t)p->nops + 1, sizeof(int))};
    sw_key key = {0};
    sw_status s = seen.key && seen.hash && seen.owner ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p->nops && s == SW_OK; i++) {
        if (!node_data(p, i, &key)) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        uint64_t h = sw_key_hash(&key);
        int twin = sw_key_find(&seen, &key, h);
        from[i] = twin >= 0 ? twin : i;
        if (twin < 0 && !sw_key_keep(&seen, &key, h, i)) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    sw_key_set_free(&seen);
    free(key.v);
    return s;
}

sw_status sw_node_costs_start(sw_problem *p, const int *from, int **first, int *nfirst) {
    int n = p->nops;
    sw_tables *t = &p->tables;
    t->nnodes = n;
    t->ncfg = calloc((size_t)n, sizeof *t->ncfg);
    t->node_cost = calloc((size_t)n, sizeof *t->node_cost);
    p->tc = calloc((size_t)n, sizeof *p->tc);
    p->ts = calloc((size_t)n, sizeof *p->ts);
    p->sync_bytes = calloc((size_t)n, sizeof *p->sync_bytes);
    *first = malloc(sizeof **first * (size_t)(n > 0 ? n : 1));
    *nfirst = 0;
    if (!t->ncfg || !t->node_cost || !p->tc || !p->ts || !p->sync_bytes || !*first) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (p->ops[i].ncfg < 1) {
            return SW_FAIL(SW_ERR_VALUE, "op %d has no configurations; enumerate first", i);
        }
        t->ncfg[i] = p->ops[i].ncfg;
        if (from[i] == i) {
            (*first)[(*nfirst)++] = i;
        }
    }
    return SW_OK;
}

sw_status sw_node_costs_finish(sw_problem *p, const int *from) {
    sw_tables *t = &p->tables;
    for (int i = 0; i < p->nops; i++) {
        if (from[i] == i) {
            continue;
        }
        size_t bytes = sizeof(double) * (size_t)p->ops[i].ncfg;
        t->node_cost[i] = malloc(bytes);
        p->tc[i] = malloc(bytes);
        p->ts[i] = malloc(bytes);
        p->sync_bytes[i] = malloc(bytes);
        if (!t->node_cost[i] || !p->tc[i] || !p->ts[i] || !p->sync_bytes[i]) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        memcpy(t->node_cost[i], t->node_cost[from[i]], bytes);
        memcpy(p->tc[i], p->tc[from[i]], bytes);
        memcpy(p->ts[i], p->ts[from[i]], bytes);
        memcpy(p->sync_bytes[i], p->sync_bytes[from[i]], bytes);
    }
    return SW_OK;
}

typedef struct {
    sw_problem *p;
    const int *first;   /* ops computed (item q: op first[q]) */
} node_work;

static sw_status node_costs_item(void *ctx, int q) {
    node_work *wk = ctx;
    return sw_node_costs_of(wk->p, wk->first[q]);
}

sw_status sw_build_node_costs(sw_problem *p, const int *from) {
    int *first = NULL, nfirst = 0;
    sw_status s = sw_node_costs_start(p, from, &first, &nfirst);
    if (s == SW_OK) {
        atomic_store(&p->progress_done, 0);
        atomic_store(&p->progress_total, nfirst);
        node_work wk = {p, first};
        s = sw_parallel_for(nfirst, p->threads, node_costs_item, &wk);
    }
    if (s == SW_OK) {
        s = sw_node_costs_finish(p, from);
    }
    free(first);
    return s;
}

sw_status sw_problem_build_node_tables(sw_problem *p) {
    int *from = malloc(sizeof *from * (size_t)(p->nops > 0 ? p->nops : 1));
    sw_status s = from ? sw_node_twins(p, from) : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    if (s == SW_OK) {
        s = sw_build_node_costs(p, from);
    }
    free(from);
    return s;
}
