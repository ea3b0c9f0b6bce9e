/* search_marginals.c -- min-marginals of Eq. 1 from an elimination, in reverse.
 *
 * m[v][c] is the least Eq. 1 of any strategy that gives op v configuration c.
 * The pruning of large searches uses them: a configuration whose min-marginal
 * in a relaxation (a lower bound of Eq. 1) exceeds the cost of a known plan can
 * be dropped without losing the optimum.
 *
 * The elimination (search_elim.c) leaves one node r whose working cost is its
 * min-marginal.  Undoing the records in reverse keeps, for every edge e = (x, y)
 * an elimination made, its *outside* table O_e[cx][cy]: the least cost of the
 * rest of the problem with x = cx, y = cy, e's own table excluded.  Then:
 *
 *   node i -> j -> k made E (tables a, b; n_j j's working cost):
 *     Z[ci][cj]   = min_ck O_E[ci][ck] + b[cj][ck]         (a min-plus product)
 *     m_j[cj]     = n_j[cj] + min_ci a[ci][cj] + Z[ci][cj]
 *     O_a[ci][cj] = Z[ci][cj] + n_j[cj]                     (if a was made)
 *     O_b[cj][ck] = n_j[cj] + min_ci a[ci][cj] + O_E[ci][ck] (if b was made)
 *   leaf j on o through table t, which added g[co] = min_cj n_j[cj] + t to o:
 *     m_j[cj]     = n_j[cj] + min_co m_o[co] - g[co] + t[co][cj]
 *     O_t[co][cj] = m_o[co] - g[co] + n_j[cj]               (if t was made)
 *   merge e1 + e2 = e3:  O_e1 = O_e3 + T_e2,  O_e2 = O_e3 + T_e1
 *
 * With several nodes left (variable elimination finished the search) the start
 * is a bound instead: m_v = bound and O_e = bound - T_e for the edges left, which
 * keeps every result a lower bound of the true min-marginal.
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy */

#include "search_internal.h"

static double *transpose(const double *x, int rows, int cols) {
    double *t = malloc(sizeof(double) * (size_t)rows * (size_t)cols);
    if (t) {
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) {
                t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
            }
        }
    }
    return t;
}

static sw_status reverse_node(const state *st, const record *rec, double **out, double **m) {
    const int *nc = st->t->ncfg;
    int ci_n = nc[rec->i], cj_n = nc[rec->j], ck_n = nc[rec->k];
    const double *oe = out[rec->made], *nj = st->node[rec->j];
    double *zeros = calloc((size_t)(ci_n > ck_n ? ci_n : ck_n), sizeof(double));
    double *bt = transpose(rec->b, cj_n, ck_n);
    double *z = malloc(sizeof(double) * (size_t)ci_n * (size_t)cj_n);
    m[rec->j] = malloc(sizeof(double) * (size_t)cj_n);
    sw_status s = SW_OK;
    if (!zeros || !bt || !z || !m[rec->j]) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    sw_minplus(oe, zeros, bt, z, ci_n, ck_n, cj_n, st->t->threads);   /* z[ci][cj] = min_ck oe[ci][ck] + b[cj][ck] */
    for (int cj = 0; cj < cj_n; cj++) {
        double best = INFINITY;
        for (int ci = 0; ci < ci_n; ci++) {
            double v = rec->a[(size_t)ci * cj_n + cj] + z[(size_t)ci * cj_n + cj];
            best = v < best ? v : best;
        }
        m[rec->j][cj] = nj[cj] + best;
    }
    if (st->edges[rec->ea].owned) {
        for (int ci = 0; ci < ci_n; ci++) {
            for (int cj = 0; cj < cj_n; cj++) {
                z[(size_t)ci * cj_n + cj] += nj[cj];
            }
        }
        out[rec->ea] = z;
        z = NULL;
    }
    if (st->edges[rec->eb].owned) {
        double *at = transpose(rec->a, ci_n, cj_n), *ob = malloc(sizeof(double) * (size_t)cj_n * (size_t)ck_n);
        if (!at || !ob) {
            free(at);
            free(ob);
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        sw_minplus(at, zeros, oe, ob, cj_n, ci_n, ck_n, st->t->threads);   /* ob[cj][ck] = min_ci a[ci][cj] + oe[ci][ck] */
        for (int cj = 0; cj < cj_n; cj++) {
            for (int ck = 0; ck < ck_n; ck++) {
                ob[(size_t)cj * ck_n + ck] += nj[cj];
            }
        }
        free(at);
        out[rec->eb] = ob;
    }
done:
    free(zeros);
    free(bt);
    free(z);
    return s;
}

static sw_status reverse_leaf(const state *st, const record *rec, double **out, double **m) {
    const int *nc = st->t->ncfg;
    int incoming = rec->kind == REC_LEAF_IN;   /* edge o -> j, else j -> o */
    int o = rec->i, co_n = nc[o], cj_n = nc[rec->j];
    const double *t = rec->a, *nj = st->node[rec->j], *mo = m[o];
    double *h = malloc(sizeof(double) * (size_t)co_n);   /* m_o - g: the rest, without j */
    m[rec->j] = malloc(sizeof(double) * (size_t)cj_n);
    if (!h || !m[rec->j]) {
        free(h);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int co = 0; co < co_n; co++) {
        double g = INFINITY;   /* summed as the elimination did */
        for (int cj = 0; cj < cj_n; cj++) {
            double v = nj[cj] + (incoming ? t[(size_t)co * cj_n + cj] : t[(size_t)cj * co_n + co]);
            g = v < g ? v : g;
        }
        h[co] = mo[co] - g;
    }
    for (int cj = 0; cj < cj_n; cj++) {
        double best = INFINITY;
        for (int co = 0; co < co_n; co++) {
            double v = h[co] + (incoming ? t[(size_t)co * cj_n + cj] : t[(size_t)cj * co_n + co]);
            best = v < best ? v : best;
        }
        m[rec->j][cj] = nj[cj] + best;
    }
    if (st->edges[rec->ea].owned) {
        double *oe = malloc(sizeof(double) * (size_t)co_n * (size_t)cj_n);
        if (!oe) {
            free(h);
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (int co = 0; co < co_n; co++) {
            for (int cj = 0; cj < cj_n; cj++) {
                oe[incoming ? (size_t)co * cj_n + cj : (size_t)cj * co_n + co] = h[co] + nj[cj];
            }
        }
        out[rec->ea] = oe;
    }
    free(h);
    return SW_OK;
}

static sw_status reverse_merge(const state *st, const record *rec, double **out) {
    const int *nc = st->t->ncfg;
    size_t cells = (size_t)nc[rec->i] * (size_t)nc[rec->k];
    const double *o3 = out[rec->made];
    int pair[2] = {rec->ea, rec->eb};
    for (int q = 0; q < 2; q++) {
        if (!st->edges[pair[q]].owned) {
            continue;
        }
        const double *other = st->edges[pair[1 - q]].t;
        double *o = malloc(sizeof(double) * cells);
        if (!o) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (size_t c = 0; c < cells; c++) {
            o[c] = o3[c] + other[c];
        }
        out[pair[q]] = o;
    }
    return SW_OK;
}

sw_status sw_elim_marginals(const state *st, double bound, double **m) {
    const int *nc = st->t->ncfg;
    double **out = calloc((size_t)(st->ne > 0 ? st->ne : 1), sizeof *out);   /* outside tables */
    if (!out) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    sw_status s = SW_OK;
    int left = 0;
    for (int v = 0; v < st->n; v++) {
        left += st->alive[v];
    }
    for (int v = 0; v < st->n && s == SW_OK; v++) {
        if (!st->alive[v]) {
            continue;
        }
        m[v] = malloc(sizeof(double) * (size_t)nc[v]);
        if (!m[v]) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (int c = 0; c < nc[v]; c++) {
            m[v][c] = left == 1 ? st->node[v][c] : bound;   /* one node left: its cost is exact */
        }
    }
    for (int e = 0; e < st->ne && s == SW_OK; e++) {
        if (!st->edges[e].alive || !st->edges[e].owned) {
            continue;
        }
        size_t cells = (size_t)nc[st->edges[e].src] * (size_t)nc[st->edges[e].dst];
        out[e] = malloc(sizeof(double) * cells);
        if (!out[e]) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (size_t c = 0; c < cells; c++) {
            out[e][c] = bound - st->edges[e].t[c];
        }
    }
    for (int r = st->nrec - 1; r >= 0 && s == SW_OK; r--) {
        const record *rec = &st->recs[r];
        if (rec->kind == REC_NODE) {
            s = reverse_node(st, rec, out, m);
        } else if (rec->kind == REC_MERGE) {
            s = reverse_merge(st, rec, out);
        } else {
            s = reverse_leaf(st, rec, out, m);
        }
        if (rec->kind != REC_LEAF_IN && rec->kind != REC_LEAF_OUT) {
            free(out[rec->made]);   /* read for the last time */
            out[rec->made] = NULL;
        }
        if (st->t->progress && rec->kind != REC_MERGE) {   /* one per eliminated node, as forward */
            atomic_fetch_add(st->t->progress, 1);
        }
    }
    for (int e = 0; e < st->ne; e++) {
        free(out[e]);
    }
    free(out);
    return s;
}
