/* cost.c -- the three terms of Eq. 1 (seed 003) and the tables the search reads.
 *
 * t_c(op, c)  compute: per worker, a roofline max(FLOPs / FLOP/s, bytes / memory
 *             bandwidth) of its shard, times backward_factor (forward + backward,
 *             3 by default: backward costs about twice the forward); the slowest
 *             worker sets the time.
 * t_s(op, c)  parameter synchronization: workers that read the same box of a
 *             weight (or batchnorm statistics) are replicas of it.  Parameter
 *             server (default, as in the papers, placed on the first replica's
 *             device): every other replica pushes its gradient and pulls the
 *             parameters, 2 * bytes over its route.  Ring all-reduce:
 *             2 (r-1)/r * bytes over the slowest link of the ring.
 * t_x(e, ci, cj)  tensor transfer: for every destination worker, the part of
 *             the region it reads (halos included) that lives on another
 *             device, over the route bandwidth from that device; counted twice,
 *             for the activation forward and its gradient backward.
 * Every term is a sum, as in Eq. 1, so the transfers are serial in the model.
 */
#include <math.h>    /* INFINITY, fmax */
#include <stdlib.h>  /* calloc, malloc, free */
#include <string.h>  /* memset */

#include "shardwise.h"

#define TRANSFER_DIRECTIONS 2.0   /* activation forward + gradient backward */
#define SYNC_DIRECTIONS 2.0       /* gradient push + parameter pull */

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

double sw_compute_time(const sw_problem *p, int opi, const sw_config *c) {
    const sw_op *op = &p->ops[opi];
    if (op->ninputs == 0) {
        return 0.0;  /* graph inputs are loaded where they are needed */
    }
    const int32_t *devs = config_devices(p, c);
    int64_t red = reduction_volume(op);
    double worst = 0.0;
    for (int w = 0; w < c->nworkers; w++) {
        sw_box box, region;
        sw_worker_box(op, c, w, &box);
        double outputs = (double)sw_box_volume(&box);
        double flops = outputs * (double)red * op->flops_per_point + outputs * op->flops_per_output;
        double elements = outputs;
        for (int k = 0; k < op->ninputs; k++) {
            if (sw_input_region(op, k, &box, &region)) {
                elements += (double)sw_box_volume(&region);
            }
        }
        int dv = devs[w];
        double t = fmax(flops / p->dev_flops[dv], elements * p->bytes_per_element / p->dev_membw[dv]);
        if (t > worst) {
            worst = t;
        }
    }
    return worst * p->backward_factor;
}

static double route_bw(const sw_problem *p, int from, int to) { return p->bw[(size_t)from * p->ndev + to]; }

/* Time and bytes to synchronize one group of replicas holding `bytes` each. */
static void sync_group(const sw_problem *p, const int32_t *devs, const int *members, int r, double bytes,
                       double *time, double *moved) {
    if (r < 2 || bytes <= 0) {
        return;
    }
    if (p->sync_model == SW_SYNC_RING) {
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

void sw_sync_cost(const sw_problem *p, int opi, const sw_config *c, double *time, double *bytes) {
    const sw_op *op = &p->ops[opi];
    const int32_t *devs = config_devices(p, c);
    *time = 0.0;
    *bytes = 0.0;
    int k = c->nworkers;
    if (k < 2) {
        return;
    }
    sw_box *regions = malloc(sizeof *regions * (size_t)k);
    int *members = malloc(sizeof *members * (size_t)k);
    char *done = malloc((size_t)k);
    if (!regions || !members || !done) {
        *time = INFINITY;  /* cannot happen for sane sizes; makes the config unattractive */
        goto out;
    }
    for (int slot = 0; slot < op->ninputs; slot++) {
        if (op->inputs[slot].role == SW_ROLE_DATA) {
            continue;
        }
        for (int w = 0; w < k; w++) {
            sw_box box;
            sw_worker_box(op, c, w, &box);
            sw_input_region(op, slot, &box, &regions[w]);
        }
        memset(done, 0, (size_t)k);
        for (int w = 0; w < k; w++) {
            if (done[w]) {
                continue;
            }
            int r = 0;
            for (int v = w; v < k; v++) {
                if (!done[v] && sw_box_equal(&regions[w], &regions[v])) {
                    done[v] = 1;
                    members[r++] = v;
                }
            }
            double slice = (double)sw_box_volume(&regions[w]) * p->bytes_per_element;
            sync_group(p, devs, members, r, slice, time, bytes);
        }
    }
out:
    free(regions);
    free(members);
    free(done);
}

/* The regions each worker of `cj` reads through input `slot`, and whether non-empty. */
static void destination_regions(const sw_op *op, int slot, const sw_config *cj, sw_box *regions, char *used) {
    for (int w = 0; w < cj->nworkers; w++) {
        sw_box box;
        sw_worker_box(op, cj, w, &box);
        used[w] = (char)sw_input_region(op, slot, &box, &regions[w]);
    }
}

/* Seconds and bytes to bring `regions` (on devices ddevs) from producer configuration ci. */
static void transfer_cost(const sw_problem *p, const sw_op *src, const sw_config *ci, const sw_box *regions,
                          const char *used, const int32_t *ddevs, int kd, double *time, double *bytes) {
    const int32_t *sdevs = config_devices(p, ci);
    int rank = src->out_rank;
    int64_t len[SW_MAX_RANK], stride[SW_MAX_RANK];
    int64_t s = 1;
    for (int m = rank - 1; m >= 0; m--) {
        len[m] = src->extent[m] / ci->deg[m];
        stride[m] = s;
        s *= ci->deg[m];
    }
    double t = 0.0, b = 0.0;
    for (int w = 0; w < kd; w++) {
        if (!used[w]) {
            continue;
        }
        const sw_box *r = &regions[w];
        int64_t clo[SW_MAX_RANK], chi[SW_MAX_RANK], cur[SW_MAX_RANK];
        for (int m = 0; m < rank; m++) {
            clo[m] = r->lo[m] / len[m];
            chi[m] = (r->hi[m] - 1) / len[m];
            cur[m] = clo[m];
        }
        int dd = ddevs[w];
        for (;;) {
            int64_t sw = 0;
            double vol = 1.0;
            for (int m = 0; m < rank; m++) {
                int64_t lo = cur[m] * len[m], hi = lo + len[m];
                if (r->lo[m] > lo) {
                    lo = r->lo[m];
                }
                if (r->hi[m] < hi) {
                    hi = r->hi[m];
                }
                vol *= (double)(hi - lo);
                sw += cur[m] * stride[m];
            }
            int ds = sdevs[sw];
            if (ds != dd) {
                double moved = vol * p->bytes_per_element;
                b += moved;
                t += moved / route_bw(p, ds, dd);
            }
            int m = rank - 1;  /* odometer over the overlapping source shards */
            while (m >= 0 && cur[m] == chi[m]) {
                cur[m] = clo[m];
                m--;
            }
            if (m < 0) {
                break;
            }
            cur[m]++;
        }
    }
    *time = t * TRANSFER_DIRECTIONS;
    *bytes = b * TRANSFER_DIRECTIONS;
}

sw_status sw_transfer_table(const sw_problem *p, int consumer, int slot, double *time, double *bytes) {
    const sw_op *dst = &p->ops[consumer];
    const sw_input *in = &dst->inputs[slot];
    const sw_op *src = &p->ops[in->producer];
    int maxk = 1;
    for (int c = 0; c < dst->ncfg; c++) {
        if (dst->cfgs[c].nworkers > maxk) {
            maxk = dst->cfgs[c].nworkers;
        }
    }
    sw_box *regions = malloc(sizeof *regions * (size_t)maxk);
    char *used = malloc((size_t)maxk);
    if (!regions || !used) {
        free(regions);
        free(used);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int nj = dst->ncfg;
    for (int cj = 0; cj < nj; cj++) {
        const sw_config *c = &dst->cfgs[cj];
        destination_regions(dst, slot, c, regions, used);
        const int32_t *ddevs = config_devices(p, c);
        for (int ci = 0; ci < src->ncfg; ci++) {
            double t, b;
            transfer_cost(p, src, &src->cfgs[ci], regions, used, ddevs, c->nworkers, &t, &b);
            time[(size_t)ci * nj + cj] = t;
            if (bytes) {
                bytes[(size_t)ci * nj + cj] = b;
            }
        }
    }
    free(regions);
    free(used);
    return SW_OK;
}

void sw_problem_reset_tables(sw_problem *p);

static sw_status alloc_node_tables(sw_problem *p) {
    int n = p->nops;
    sw_tables *t = &p->tables;
    t->nnodes = n;
    t->ncfg = calloc((size_t)n, sizeof *t->ncfg);
    t->node_cost = calloc((size_t)n, sizeof *t->node_cost);
    p->tc = calloc((size_t)n, sizeof *p->tc);
    p->ts = calloc((size_t)n, sizeof *p->ts);
    p->sync_bytes = calloc((size_t)n, sizeof *p->sync_bytes);
    if (!t->ncfg || !t->node_cost || !p->tc || !p->ts || !p->sync_bytes) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        int c = p->ops[i].ncfg;
        if (c < 1) {
            return SW_FAIL(SW_ERR_VALUE, "op %d has no configurations; enumerate first", i);
        }
        t->ncfg[i] = c;
        t->node_cost[i] = malloc(sizeof(double) * (size_t)c);
        p->tc[i] = malloc(sizeof(double) * (size_t)c);
        p->ts[i] = malloc(sizeof(double) * (size_t)c);
        p->sync_bytes[i] = malloc(sizeof(double) * (size_t)c);
        if (!t->node_cost[i] || !p->tc[i] || !p->ts[i] || !p->sync_bytes[i]) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (int k = 0; k < c; k++) {
            const sw_config *cfg = &p->ops[i].cfgs[k];
            p->tc[i][k] = sw_compute_time(p, i, cfg);
            sw_sync_cost(p, i, cfg, &p->ts[i][k], &p->sync_bytes[i][k]);
            t->node_cost[i][k] = p->tc[i][k] + p->ts[i][k];
        }
    }
    return SW_OK;
}

static sw_status alloc_edge_tables(sw_problem *p, int with_bytes) {
    sw_tables *t = &p->tables;
    int ne = 0;
    for (int i = 0; i < p->nops; i++) {
        for (int k = 0; k < p->ops[i].ninputs; k++) {
            ne += p->ops[i].inputs[k].role == SW_ROLE_DATA;
        }
    }
    t->edges = calloc((size_t)(ne > 0 ? ne : 1), sizeof *t->edges);
    p->edge_consumer_slot = calloc((size_t)(ne > 0 ? ne : 1), sizeof *p->edge_consumer_slot);
    if (!t->edges || !p->edge_consumer_slot) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < p->nops; i++) {
        for (int k = 0; k < p->ops[i].ninputs; k++) {
            const sw_input *in = &p->ops[i].inputs[k];
            if (in->role != SW_ROLE_DATA) {
                continue;
            }
            sw_edge_table *e = &t->edges[t->nedges];
            e->src = in->producer;
            e->dst = i;
            size_t cells = (size_t)p->ops[in->producer].ncfg * (size_t)p->ops[i].ncfg;
            e->time = malloc(sizeof(double) * cells);
            e->bytes = with_bytes ? malloc(sizeof(double) * cells) : NULL;
            p->edge_consumer_slot[t->nedges] = k;
            t->nedges++;  /* counted before filling so a failure frees it */
            if (!e->time || (with_bytes && !e->bytes)) {
                return SW_FAIL(SW_ERR_NOMEM, "out of memory for a %zu-entry transfer table", cells);
            }
            sw_status s = sw_transfer_table(p, i, k, e->time, e->bytes);
            if (s != SW_OK) {
                return s;
            }
        }
    }
    return SW_OK;
}

sw_status sw_problem_build_tables(sw_problem *p, int with_bytes) {
    sw_problem_reset_tables(p);
    sw_status s = alloc_node_tables(p);
    if (s == SW_OK) {
        s = alloc_edge_tables(p, with_bytes);
    }
    if (s != SW_OK) {
        sw_problem_reset_tables(p);
        return s;
    }
    p->tables_built = 1;
    return SW_OK;
}
