/* cost_bounds.c -- lower bounds of t_x that hold for every placement.
 *
 * The large searches first solve a relaxation whose edge tables are lower
 * bounds of Eq. 1's t_x, cheap enough for every pair of partitions (O(R) each,
 * R the tensor's rank), to drop partitions that no optimal plan uses.  For an
 * edge from producer configuration p (nb output blocks, block length len_d along
 * tensor dimension d) to consumer configuration q (k workers reading regions R_w):
 *
 *   every element a worker reads and does not hold crosses a route, the widest
 *   of which carries bw_max bytes/s;
 *   a worker holds at most one producer block, and a block lives on one device, so
 *   at most min(k, nb) (worker, block) pairs share a device, each sharing at most
 *   prod_d min(max_w |R_w|_d, len_d) elements;
 *
 *   t_x(p, q) >= per_element / bw_max * max(0, total(q) - min(k, nb) * prod_d min(maxR_d(q), len_d(p)))
 *
 * with total(q) = sum_w |R_w|.  The bound is tight for the common transitions
 * (a batch split feeding a channel split on one node moves all but 1/k of it) and
 * does not depend on which devices either configuration uses.
 */
#include <stdlib.h>  /* malloc, free */

#include "internal.h"

#define TRANSFER_DIRECTIONS 2.0   /* as cost.c */

typedef struct {
    double total;
    int64_t max_extent[SW_MAX_RANK];   /* of the regions along each tensor dimension */
} consumer_reads;

/* total and max_extent from the region factors: O(sum of degrees), not O(workers).
 * 1 if done, 0 if not separable. */
static int summary_from_factors(const sw_region_factors *f, consumer_reads *out) {
    if (!f->separable) {
        return 0;
    }
    double total = f->constant;
    for (int q = 0; q < f->nsplit; q++) {
        double sum = 0;
        for (int64_t x = 0; x < f->count[q]; x++) {
            sum += f->factor[f->first[q] + x];
        }
        total *= sum;
    }
    out->total = total;
    for (int d = 0; total > 0 && d < f->rank; d++) {   /* over the workers that read something */
        int q = f->dim_coord[d];
        if (q < 0) {
            out->max_extent[d] = f->const_len[d];
            continue;
        }
        for (int64_t x = 0; x < f->count[q]; x++) {
            int64_t e = f->extent[(size_t)d * f->cells + f->first[q] + x];
            if (f->factor[f->first[q] + x] > 0 && e > out->max_extent[d]) {
                out->max_extent[d] = e;
            }
        }
    }
    return 1;
}

static sw_status reads_summary(const sw_op *dst, const sw_config *c, int slot, sw_box *regions, char *used,
                               consumer_reads *out) {
    const sw_input *in = &dst->inputs[slot];
    out->total = 0;
    for (int d = 0; d < in->rank; d++) {
        out->max_extent[d] = 0;
    }
    sw_region_factors f;
    SW_TRY(sw_config_region_factors(dst, c, slot, &f));
    int done = summary_from_factors(&f, out);
    sw_region_factors_free(&f);
    if (done) {
        return SW_OK;
    }
    SW_TRY(sw_config_regions(dst, c, slot, regions, used));
    for (int w = 0; w < c->nworkers; w++) {
        if (!used[w]) {
            continue;
        }
        const sw_box *r = &regions[w];
        out->total += (double)sw_box_volume(r);
        for (int d = 0; d < in->rank; d++) {
            int64_t e = r->hi[d] - r->lo[d];
            out->max_extent[d] = e > out->max_extent[d] ? e : out->max_extent[d];
        }
    }
    return SW_OK;
}

double sw_fastest_route(const sw_problem *p) {
    double best = 0;
    for (int a = 0; a < p->ndev; a++) {
        for (int b = 0; b < p->ndev; b++) {
            double v = p->bw[(size_t)a * p->ndev + b];
            best = a != b && v > best ? v : best;
        }
    }
    return best > 0 ? best : 1.0;   /* one device: nothing ever moves */
}

sw_status sw_transfer_bound_table(const sw_problem *p, int consumer, int slot, double bw_max, double *out) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    int nj = dst->ncfg, ni = src->ncfg, rank = src->out_rank;
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS) / bw_max;
    int maxk = 1;
    for (int cj = 0; cj < nj; cj++) {
        maxk = dst->cfgs[cj].nworkers > maxk ? dst->cfgs[cj].nworkers : maxk;
    }
    consumer_reads *q = malloc(sizeof *q * (size_t)nj);
    sw_box *regions = malloc(sizeof *regions * (size_t)maxk);
    char *used = malloc((size_t)maxk);
    sw_status s = q && regions && used ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    for (int cj = 0; cj < nj && s == SW_OK; cj++) {
        if (cj > 0 && sw_same_partition(&dst->cfgs[cj], &dst->cfgs[cj - 1])) {
            q[cj] = q[cj - 1];   /* the regions do not depend on the devices */
        } else {
            s = reads_summary(dst, &dst->cfgs[cj], slot, regions, used, &q[cj]);
        }
    }
    free(regions);
    free(used);
    if (s != SW_OK) {
        free(q);
        return s;
    }
    for (int ci = 0; ci < ni; ci++) {
        const sw_config *pc = &src->cfgs[ci];
        int64_t nb = pc->nworkers / pc->rdeg;
        for (int cj = 0; cj < nj; cj++) {
            double shared = 1;
            for (int d = 0; d < rank; d++) {
                int64_t len = src->extent[d] / pc->deg[d];
                shared *= (double)(q[cj].max_extent[d] < len ? q[cj].max_extent[d] : len);
            }
            int64_t k = dst->cfgs[cj].nworkers;
            double moved = q[cj].total - (double)(k < nb ? k : nb) * shared;
            out[(size_t)ci * nj + cj] = moved > 0 ? per_elem * moved : 0.0;
        }
    }
    free(q);
    return SW_OK;
}
