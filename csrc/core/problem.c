/* problem.c -- decoding a problem (graph + devices) and owning its memory.
 *
 * The Python side flattens the op descriptions into one int64 blob:
 *
 *   nops
 *   per op: nvars out_rank extent[nvars] granule[out_rank] additive[nvars - out_rank] ninputs
 *     per input: role producer rank shape[rank]      (role 0 data, 1 weight, 2 stat, 3 a weight
 *                                                   that is a bias: sw_input.bias)
 *                per input dim: coef[nvars] vdiv[nvars] offset div mod
 *                has_window [win_lo win_hi] * out_rank   (only if has_window)
 *
 * Decoding checks every field, so a malformed blob is a ValueError, never a
 * read past the end.
 */
#include <math.h>    /* isfinite */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memcpy */

#include "internal.h"

typedef struct {
    const int64_t *data;
    int64_t len, pos;
} reader;

static sw_status take(reader *r, int64_t *v) {
    if (r->pos >= r->len) {
        return SW_FAIL(SW_ERR_VALUE, "problem description ends early at word %lld", (long long)r->pos);
    }
    *v = r->data[r->pos++];
    return SW_OK;
}

static sw_status take_range(reader *r, int64_t *v, int64_t lo, int64_t hi, const char *what) {
    sw_status s = take(r, v);
    if (s != SW_OK) {
        return s;
    }
    if (*v < lo || *v > hi) {
        return SW_FAIL(SW_ERR_VALUE, "%s = %lld outside [%lld, %lld]", what, (long long)*v, (long long)lo,
                       (long long)hi);
    }
    return SW_OK;
}

static sw_status decode_input(reader *r, sw_problem *p, int opi, sw_op *op, sw_input *in) {
    int64_t v = 0;
    SW_TRY(take_range(r, &v, 0, 3, "input role"));
    in->bias = v == 3;   /* 3: a weight that is a bias */
    in->role = in->bias ? SW_ROLE_WEIGHT : (sw_role)v;
    SW_TRY(take_range(r, &v, -1, opi - 1, "input producer"));
    in->producer = (int)v;
    if ((in->role == SW_ROLE_DATA) != (in->producer >= 0)) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: data inputs need a producer, weights must not have one", opi);
    }
    SW_TRY(take_range(r, &v, 1, SW_MAX_RANK, "input rank"));
    in->rank = (int)v;
    for (int d = 0; d < in->rank; d++) {
        SW_TRY(take_range(r, &in->shape[d], 1, INT64_MAX / 4, "input dimension"));
    }
    if (in->producer >= 0) {
        const sw_op *src = &p->ops[in->producer];
        int same = src->out_rank == in->rank;
        for (int d = 0; same && d < in->rank; d++) {
            same = src->extent[d] == in->shape[d];
        }
        if (!same) {
            return SW_FAIL(SW_ERR_VALUE, "op %d: input shape does not match the output of op %d", opi,
                           in->producer);
        }
    }
    for (int d = 0; d < in->rank; d++) {
        sw_index_expr *e = &in->expr[d];
        for (int k = 0; k < op->nvars; k++) {
            SW_TRY(take_range(r, &e->coef[k], -(1 << 20), 1 << 20, "index coefficient"));
        }
        for (int k = 0; k < op->nvars; k++) {
            SW_TRY(take_range(r, &e->vdiv[k], 1, INT64_C(1) << 40, "index variable divisor"));
        }
        SW_TRY(take_range(r, &e->offset, -(INT64_C(1) << 40), INT64_C(1) << 40, "index offset"));
        SW_TRY(take_range(r, &e->div, 1, INT64_C(1) << 40, "index divisor"));
        SW_TRY(take_range(r, &e->mod, 0, INT64_C(1) << 40, "index modulus"));
    }
    SW_TRY(take_range(r, &v, 0, 1, "window flag"));
    in->has_window = (int)v;
    if (in->has_window) {
        for (int d = 0; d < op->out_rank; d++) {
            SW_TRY(take_range(r, &in->win_lo[d], 0, op->extent[d], "window start"));
            SW_TRY(take_range(r, &in->win_hi[d], in->win_lo[d], op->extent[d], "window end"));
        }
    }
    return SW_OK;
}

static sw_status decode_op(reader *r, sw_problem *p, int opi, const double *flops) {
    sw_op *op = &p->ops[opi];
    int64_t v = 0;
    SW_TRY(take_range(r, &v, 1, SW_MAX_VARS, "iteration variables"));
    op->nvars = (int)v;
    SW_TRY(take_range(r, &v, 1, op->nvars < SW_MAX_RANK ? op->nvars : SW_MAX_RANK, "output rank"));
    op->out_rank = (int)v;
    for (int k = 0; k < op->nvars; k++) {
        SW_TRY(take_range(r, &op->extent[k], 1, INT64_MAX / 4, "iteration extent"));
    }
    for (int d = 0; d < op->out_rank; d++) {
        SW_TRY(take_range(r, &op->granule[d], 1, op->extent[d], "split granule"));
    }
    for (int k = op->out_rank; k < op->nvars; k++) {
        SW_TRY(take_range(r, &v, 0, 1, "additive flag"));
        op->additive[k] = (uint8_t)v;
    }
    op->flops_per_point = flops[2 * opi];
    op->flops_per_output = flops[2 * opi + 1];
    if (!isfinite(op->flops_per_point) || !isfinite(op->flops_per_output) || op->flops_per_point < 0 ||
        op->flops_per_output < 0) {
        return SW_FAIL(SW_ERR_VALUE, "op %d: FLOP counts must be finite and non-negative", opi);
    }
    SW_TRY(take_range(r, &v, 0, 64, "input count"));
    op->ninputs = (int)v;
    if (op->ninputs > 0) {
        op->inputs = calloc((size_t)op->ninputs, sizeof *op->inputs);
        if (!op->inputs) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    for (int k = 0; k < op->ninputs; k++) {
        SW_TRY(decode_input(r, p, opi, op, &op->inputs[k]));
    }
    return SW_OK;
}

static sw_status check_devices(int ndev, const double *dev_flops, const double *dev_membw, const double *bw) {
    if (ndev < 1 || ndev > SW_MAX_DEVICES) {
        return SW_FAIL(SW_ERR_VALUE, "device count %d outside 1..%d", ndev, SW_MAX_DEVICES);
    }
    for (int i = 0; i < ndev; i++) {
        if (!(dev_flops[i] > 0) || !isfinite(dev_flops[i]) || !(dev_membw[i] > 0) || !isfinite(dev_membw[i])) {
            return SW_FAIL(SW_ERR_VALUE, "device %d: FLOP/s and memory bandwidth must be positive and finite", i);
        }
        for (int j = 0; j < ndev; j++) {
            double b = bw[(size_t)i * ndev + j];
            if (i != j && (!(b > 0) || !isfinite(b))) {
                return SW_FAIL(SW_ERR_VALUE, "no usable route from device %d to device %d (bandwidth %g)", i, j,
                               b);
            }
        }
    }
    return SW_OK;
}

sw_status sw_problem_new(sw_problem **out, const int64_t *blob, int64_t blob_len, const double *flops,
                         int ndev, const double *dev_flops, const double *dev_membw, const double *bw) {
    *out = NULL;
    SW_TRY(check_devices(ndev, dev_flops, dev_membw, bw));
    reader r = {blob, blob_len, 0};
    int64_t nops = 0;
    SW_TRY(take_range(&r, &nops, 1, 1 << 20, "op count"));
    sw_problem *p = calloc(1, sizeof *p);
    if (!p) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    p->ndev = ndev;
    p->nops = (int)nops;
    p->sync_model = SW_SYNC_PARAMETER_SERVER;
    p->bytes_per_element = 4.0;
    p->backward_factor = 3.0;
    p->threads = 1;
    p->optimizer_state = 1;   /* SGD's momentum */
    p->ops = calloc((size_t)nops, sizeof *p->ops);
    p->dev_flops = malloc(sizeof(double) * (size_t)ndev);
    p->dev_membw = malloc(sizeof(double) * (size_t)ndev);
    p->bw = malloc(sizeof(double) * (size_t)ndev * (size_t)ndev);
    if (!p->ops || !p->dev_flops || !p->dev_membw || !p->bw) {
        sw_problem_free(p);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    memcpy(p->dev_flops, dev_flops, sizeof(double) * (size_t)ndev);
    memcpy(p->dev_membw, dev_membw, sizeof(double) * (size_t)ndev);
    memcpy(p->bw, bw, sizeof(double) * (size_t)ndev * (size_t)ndev);
    sw_problem_detect_nodes(p);
    for (int i = 0; i < p->nops; i++) {
        sw_status s = decode_op(&r, p, i, flops);
        if (s != SW_OK) {
            sw_problem_free(p);
            return s;
        }
    }
    if (r.pos != r.len) {
        sw_problem_free(p);
        return SW_FAIL(SW_ERR_VALUE, "problem description has %lld trailing words", (long long)(r.len - r.pos));
    }
    *out = p;
    return SW_OK;
}

/* Uniform nodes (cost/cost_placed.c counts transfers on them): devices [n*P, (n+1)*P) form
 * node n when every pair inside a node has one bandwidth and every pair across nodes another.
 * A fact about the devices, so it is set when the problem is made. */
void sw_problem_detect_nodes(sw_problem *p) {
    int n = p->ndev;
    p->node_size = 0;
    if (n == 1) {
        p->node_size = 1;
        p->bw_in = p->bw_out = 1.0;   /* never used: nothing moves between devices */
        return;
    }
    double in = p->bw[1];   /* device 0 -> 1 */
    int per = n;
    for (int j = 1; j < n; j++) {
        if (p->bw[j] != in) {
            per = j;
            break;
        }
    }
    if (n % per != 0) {
        return;
    }
    double out = per < n ? p->bw[per] : in;
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            if (a != b && p->bw[(size_t)a * n + b] != (a / per == b / per ? in : out)) {
                return;
            }
        }
    }
    p->node_size = per;
    p->bw_in = in;
    p->bw_out = out;
}

static void free_tables(sw_problem *p) {
    sw_tables *t = &p->tables;
    for (int e = 0; !t->storage && e < t->nedges; e++) {
        if (!t->edges[e].shared) {
            free(t->edges[e].time);
            free(t->edges[e].bytes);
        }
    }
    free(t->storage);
    free(t->edges);
    if (t->node_cost) {
        for (int i = 0; i < t->nnodes; i++) {
            free(t->node_cost[i]);
        }
    }
    free(t->ncfg);
    free(t->node_cost);
    if (p->tc) {
        for (int i = 0; i < p->nops; i++) {
            free(p->tc[i]);
            free(p->ts[i]);
            free(p->sync_bytes[i]);
        }
    }
    free(p->tc);
    free(p->ts);
    free(p->sync_bytes);
    free(p->edge_consumer_slot);
    memset(t, 0, sizeof *t);
    p->tc = p->ts = p->sync_bytes = NULL;
    p->edge_consumer_slot = NULL;
    p->tables_built = 0;
}

const sw_tables *sw_problem_tables(const sw_problem *p) { return &p->tables; }

void sw_problem_free(sw_problem *p) {
    if (!p) {
        return;
    }
    free_tables(p);
    for (int i = 0; i < p->nops; i++) {
        free(p->ops[i].inputs);
        sw_op_set_configs(p, &p->ops[i], NULL, 0);   /* its own, not the block's */
    }
    free(p->cfg_block);
    free(p->ops);
    free(p->dev_flops);
    free(p->dev_flops_dense);
    free(p->op_dense);
    free(p->dev_membw);
    free(p->bw);
    free(p->dev_pool);
    free(p);
}

/* The tables are the problem's memory, so freeing them stays here beside sw_problem_free (which
 * must free them too): cost/cost.c calls down into core to reset them before a rebuild. */
void sw_problem_reset_tables(sw_problem *p) { free_tables(p); }
