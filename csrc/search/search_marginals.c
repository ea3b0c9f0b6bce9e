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
 *
 * A cap: every term added along the way is >= 0 (Eq. 1's tables), so an outside entry
 * above the cap only leads to marginals above it.  Such entries become INFINITY, and a
 * node's products read the finite entries of O_E alone (a list of them) once they are
 * few: a pruning at the cost of a known plan keeps a few configurations an op, and the
 * outside tables thin out to about as many entries (GPT-2 on 1,024 GPUs: 1,400
 * configurations an op, a few hundred kept in all).
 */
#include <math.h>    /* INFINITY, fabs */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy */

#include "search_internal.h"

/* An outside table stays a list of its finite entries below this share of its cells (a listed
 * entry costs a scalar loop over cj, a dense one a share of the vectorized min-plus product). */
#define SPARSE_SHARE 0.03

/* The cap's slack: sums along different paths of the reverse pass round differently, so an
 * outside entry may exceed a marginal it leads to by a few ulps; entries are dropped only
 * this far above the cap, and every marginal at most the cap comes out exact. */
#define CAP_SLACK 1e-9

/* An outside table (rows x cols): dense, or (a capped pass) the list of its finite entries
 * in row order (r ascending, c ascending within a row); absent entries are INFINITY. */
typedef struct {
    int rows, cols;
    double *d;      /* dense, or NULL */
    size_t n;       /* listed entries */
    int *r, *c;
    double *v;
} otab;

static void otab_free(otab *o) {
    if (o) {
        free(o->d);
        free(o->r);
        free(o->c);
        free(o->v);
        memset(o, 0, sizeof *o);
    }
}

static double above_of(double cap) {
    return cap == INFINITY ? INFINITY : cap + fabs(cap) * CAP_SLACK;
}

/* Room for n listed entries (n may be 0). */
static int otab_list(otab *o, int rows, int cols, size_t n) {
    o->rows = rows;
    o->cols = cols;
    o->d = NULL;
    o->n = 0;
    o->r = malloc(sizeof(int) * (n ? n : 1));
    o->c = malloc(sizeof(int) * (n ? n : 1));
    o->v = malloc(sizeof(double) * (n ? n : 1));
    return o->r && o->c && o->v;
}

/* Takes the dense table d (rows x cols): entries above the cap become INFINITY, and under a
 * cap a table with few finite entries left becomes their list (d freed). */
static sw_status otab_take(otab *o, double *d, int rows, int cols, double cap) {
    size_t cells = (size_t)rows * (size_t)cols, finite = 0;
    double above = above_of(cap);
    memset(o, 0, sizeof *o);
    o->rows = rows;
    o->cols = cols;
    o->d = d;
    if (cap == INFINITY) {
        return SW_OK;
    }
    for (size_t q = 0; q < cells; q++) {
        d[q] = d[q] > above ? INFINITY : d[q];
        finite += d[q] != INFINITY;
    }
    if ((double)finite > (double)cells * SPARSE_SHARE) {
        return SW_OK;
    }
    if (!otab_list(o, rows, cols, finite)) {
        free(d);
        otab_free(o);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            double x = d[(size_t)r * cols + c];
            if (x != INFINITY) {
                o->r[o->n] = r;
                o->c[o->n] = c;
                o->v[o->n++] = x;
            }
        }
    }
    free(d);
    return SW_OK;
}

static void clamp(double *x, size_t n, double cap) {
    double above = above_of(cap);
    for (size_t c = 0; cap != INFINITY && c < n; c++) {
        x[c] = x[c] > above ? INFINITY : x[c];
    }
}

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

/* reverse_node over a listed O_E (entries (ci, ck, v)): per row ci of O_E,
 *   z[cj] = min over its entries of v + b[cj][ck];  m_j[cj] <- min(m_j[cj], a[ci][cj] + z[cj]);
 *   O_a's row ci = z + n_j (listed, under the cap);
 * and per column ck of O_E, O_b's column ck = n_j[cj] + min over its entries of a[ci][cj] + v
 * (listed, then put in row order by a counting sort on cj). */
static sw_status node_listed(const state *st, const record *rec, const otab *oe, double cap, otab *oa, otab *ob,
                             double *mj) {
    const int *nc = st->t->ncfg;
    int ci_n = nc[rec->i], cj_n = nc[rec->j], ck_n = nc[rec->k];
    const double *nj = st->node[rec->j], *a = rec->a, *b = rec->b;
    double above = above_of(cap);
    double *z = malloc(sizeof(double) * (size_t)cj_n), *col = malloc(sizeof(double) * (size_t)cj_n);
    size_t *start = NULL, *fill = NULL;
    int *by_col = NULL;
    sw_status s = SW_OK;
    if (!z || !col) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int cj = 0; cj < cj_n; cj++) {
        mj[cj] = INFINITY;
    }
    size_t cap_a = 0;
    if (oa && !otab_list(oa, ci_n, cj_n, 0)) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t q = 0; q < oe->n;) {
        int ci = oe->r[q];
        for (int cj = 0; cj < cj_n; cj++) {
            z[cj] = INFINITY;
        }
        for (; q < oe->n && oe->r[q] == ci; q++) {   /* the row's entries */
            int ck = oe->c[q];
            double v = oe->v[q];
            for (int cj = 0; cj < cj_n; cj++) {
                double x = v + b[(size_t)cj * ck_n + ck];
                z[cj] = x < z[cj] ? x : z[cj];
            }
        }
        const double *arow = a + (size_t)ci * cj_n;
        for (int cj = 0; cj < cj_n; cj++) {
            double x = arow[cj] + z[cj];
            mj[cj] = x < mj[cj] ? x : mj[cj];
        }
        for (int cj = 0; oa && cj < cj_n; cj++) {
            double x = z[cj] + nj[cj];
            if (x <= above) {
                if (oa->n == cap_a) {   /* grow the list */
                    size_t more = cap_a ? 2 * cap_a : 64;
                    int *r2 = realloc(oa->r, sizeof(int) * more), *c2 = r2 ? realloc(oa->c, sizeof(int) * more) : NULL;
                    double *v2 = c2 ? realloc(oa->v, sizeof(double) * more) : NULL;
                    if (r2) {
                        oa->r = r2;
                    }
                    if (c2) {
                        oa->c = c2;
                    }
                    if (!v2) {
                        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
                        goto done;
                    }
                    oa->v = v2;
                    cap_a = more;
                }
                oa->r[oa->n] = ci;
                oa->c[oa->n] = cj;
                oa->v[oa->n++] = x;
            }
        }
    }
    for (int cj = 0; cj < cj_n; cj++) {
        mj[cj] += nj[cj];
    }
    if (ob) {
        /* O_E's entries grouped by column: a counting sort on ck */
        start = calloc((size_t)ck_n + 1, sizeof *start);
        by_col = malloc(sizeof(int) * (oe->n ? oe->n : 1));
        if (!start || !by_col) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t q = 0; q < oe->n; q++) {
            start[oe->c[q] + 1]++;
        }
        for (int ck = 0; ck < ck_n; ck++) {
            start[ck + 1] += start[ck];
        }
        fill = malloc(sizeof(size_t) * ((size_t)ck_n + 1));
        if (!fill) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(fill, start, sizeof(size_t) * ((size_t)ck_n + 1));
        for (size_t q = 0; q < oe->n; q++) {
            by_col[fill[oe->c[q]]++] = (int)q;
        }
        /* each column's entries of O_b (cj, ck, x), counted per row cj, then placed in row order */
        size_t total = 0;
        otab tmp;
        size_t cap_t = (size_t)cj_n + 1;
        if (!otab_list(&tmp, cj_n, ck_n, cap_t)) {
            otab_free(&tmp);
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int ck = 0; ck < ck_n; ck++) {
            if (start[ck] == start[ck + 1]) {
                continue;
            }
            for (int cj = 0; cj < cj_n; cj++) {
                col[cj] = INFINITY;
            }
            for (size_t g = start[ck]; g < start[ck + 1]; g++) {
                size_t q = (size_t)by_col[g];
                const double *arow = a + (size_t)oe->r[q] * cj_n;
                double v = oe->v[q];
                for (int cj = 0; cj < cj_n; cj++) {
                    double x = arow[cj] + v;
                    col[cj] = x < col[cj] ? x : col[cj];
                }
            }
            for (int cj = 0; cj < cj_n; cj++) {
                double x = nj[cj] + col[cj];
                if (x > above) {
                    continue;
                }
                if (total == cap_t) {
                    size_t more = 2 * cap_t;
                    int *r2 = realloc(tmp.r, sizeof(int) * more), *c2 = r2 ? realloc(tmp.c, sizeof(int) * more) : NULL;
                    double *v2 = c2 ? realloc(tmp.v, sizeof(double) * more) : NULL;
                    if (r2) {
                        tmp.r = r2;
                    }
                    if (c2) {
                        tmp.c = c2;
                    }
                    if (!v2) {
                        otab_free(&tmp);
                        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
                        goto done;
                    }
                    tmp.v = v2;
                    cap_t = more;
                }
                tmp.r[total] = cj;
                tmp.c[total] = ck;
                tmp.v[total++] = x;
            }
        }
        tmp.n = total;
        /* row order: a stable counting sort on cj (columns stay ascending within a row) */
        if (!otab_list(ob, cj_n, ck_n, total)) {
            otab_free(&tmp);
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        size_t *row_at = calloc((size_t)cj_n + 1, sizeof *row_at);
        if (!row_at) {
            otab_free(&tmp);
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t q = 0; q < total; q++) {
            row_at[tmp.r[q] + 1]++;
        }
        for (int cj = 0; cj < cj_n; cj++) {
            row_at[cj + 1] += row_at[cj];
        }
        for (size_t q = 0; q < total; q++) {
            size_t at = row_at[tmp.r[q]]++;
            ob->r[at] = tmp.r[q];
            ob->c[at] = tmp.c[q];
            ob->v[at] = tmp.v[q];
        }
        ob->n = total;
        free(row_at);
        otab_free(&tmp);
    }
done:
    free(z);
    free(col);
    free(start);
    free(fill);
    free(by_col);
    return s;
}

static sw_status reverse_node(const state *st, const record *rec, double cap, otab *out, double **m) {
    const int *nc = st->t->ncfg;
    int ci_n = nc[rec->i], cj_n = nc[rec->j], ck_n = nc[rec->k];
    const otab *oe = &out[rec->made];
    const double *nj = st->node[rec->j];
    int want_a = st->edges[rec->ea].owned, want_b = st->edges[rec->eb].owned;
    m[rec->j] = malloc(sizeof(double) * (size_t)cj_n);
    if (!m[rec->j]) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    if (!oe->d) {   /* a listed O_E: its products over the entries alone */
        sw_status s = node_listed(st, rec, oe, cap, want_a ? &out[rec->ea] : NULL, want_b ? &out[rec->eb] : NULL,
                                  m[rec->j]);
        clamp(m[rec->j], (size_t)cj_n, cap);
        return s;
    }
    double *zeros = calloc((size_t)(ci_n > ck_n ? ci_n : ck_n), sizeof(double));
    double *bt = transpose(rec->b, cj_n, ck_n);
    double *z = malloc(sizeof(double) * (size_t)ci_n * (size_t)cj_n);
    sw_status s = SW_OK;
    if (!zeros || !bt || !z) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    sw_minplus(oe->d, zeros, bt, z, ci_n, ck_n, cj_n, st->t->threads);   /* z[ci][cj] = min_ck oe[ci][ck] + b[cj][ck] */
    for (int cj = 0; cj < cj_n; cj++) {
        double best = INFINITY;
        for (int ci = 0; ci < ci_n; ci++) {
            double v = rec->a[(size_t)ci * cj_n + cj] + z[(size_t)ci * cj_n + cj];
            best = v < best ? v : best;
        }
        m[rec->j][cj] = nj[cj] + best;
    }
    clamp(m[rec->j], (size_t)cj_n, cap);
    if (want_a) {
        for (int ci = 0; ci < ci_n; ci++) {
            for (int cj = 0; cj < cj_n; cj++) {
                z[(size_t)ci * cj_n + cj] += nj[cj];
            }
        }
        s = otab_take(&out[rec->ea], z, ci_n, cj_n, cap);
        z = NULL;
        if (s != SW_OK) {
            goto done;
        }
    }
    if (want_b) {
        double *at = transpose(rec->a, ci_n, cj_n), *ob = malloc(sizeof(double) * (size_t)cj_n * (size_t)ck_n);
        if (!at || !ob) {
            free(at);
            free(ob);
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        sw_minplus(at, zeros, oe->d, ob, cj_n, ci_n, ck_n, st->t->threads);   /* ob[cj][ck] = min_ci a[ci][cj] + oe[ci][ck] */
        for (int cj = 0; cj < cj_n; cj++) {
            for (int ck = 0; ck < ck_n; ck++) {
                ob[(size_t)cj * ck_n + ck] += nj[cj];
            }
        }
        free(at);
        s = otab_take(&out[rec->eb], ob, cj_n, ck_n, cap);
    }
done:
    free(zeros);
    free(bt);
    free(z);
    return s;
}

static sw_status reverse_leaf(const state *st, const record *rec, double cap, otab *out, double **m) {
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
    clamp(m[rec->j], (size_t)cj_n, cap);
    sw_status s = SW_OK;
    if (st->edges[rec->ea].owned) {   /* O_t = h[co] + n_j[cj], laid out as t */
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
        s = incoming ? otab_take(&out[rec->ea], oe, co_n, cj_n, cap) : otab_take(&out[rec->ea], oe, cj_n, co_n, cap);
    }
    free(h);
    return s;
}

/* merge e1 + e2 = e3: O_e1 = O_e3 + T_e2 and O_e2 = O_e3 + T_e1, at O_e3's entries when listed */
static sw_status reverse_merge(const state *st, const record *rec, double cap, otab *out) {
    const int *nc = st->t->ncfg;
    int rows = nc[rec->i], cols = nc[rec->k];
    size_t cells = (size_t)rows * (size_t)cols;
    const otab *o3 = &out[rec->made];
    int pair[2] = {rec->ea, rec->eb};
    double above = above_of(cap);
    for (int q = 0; q < 2; q++) {
        if (!st->edges[pair[q]].owned) {
            continue;
        }
        const double *other = st->edges[pair[1 - q]].t;
        if (o3->d) {
            double *o = malloc(sizeof(double) * cells);
            if (!o) {
                return SW_FAIL(SW_ERR_NOMEM, "out of memory");
            }
            for (size_t c = 0; c < cells; c++) {
                o[c] = o3->d[c] + other[c];
            }
            sw_status s = otab_take(&out[pair[q]], o, rows, cols, cap);
            if (s != SW_OK) {
                return s;
            }
            continue;
        }
        otab *o = &out[pair[q]];
        if (!otab_list(o, rows, cols, o3->n)) {
            otab_free(o);
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (size_t k = 0; k < o3->n; k++) {
            double x = o3->v[k] + other[(size_t)o3->r[k] * cols + o3->c[k]];
            if (x <= above) {
                o->r[o->n] = o3->r[k];
                o->c[o->n] = o3->c[k];
                o->v[o->n++] = x;
            }
        }
    }
    return SW_OK;
}

sw_status sw_elim_marginals(const state *st, double bound, double cap, double **m) {
    const int *nc = st->t->ncfg;
    otab *out = calloc((size_t)(st->ne > 0 ? st->ne : 1), sizeof *out);   /* outside tables */
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
        clamp(m[v], (size_t)nc[v], cap);
    }
    for (int e = 0; e < st->ne && s == SW_OK; e++) {
        if (!st->edges[e].alive || !st->edges[e].owned) {
            continue;
        }
        int rows = nc[st->edges[e].src], cols = nc[st->edges[e].dst];
        size_t cells = (size_t)rows * (size_t)cols;
        double *o = malloc(sizeof(double) * cells);
        if (!o) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (size_t c = 0; c < cells; c++) {
            o[c] = bound - st->edges[e].t[c];
        }
        s = otab_take(&out[e], o, rows, cols, cap);
    }
    for (int r = st->nrec - 1; r >= 0 && s == SW_OK; r--) {
        const record *rec = &st->recs[r];
        if (rec->kind == REC_NODE) {
            s = reverse_node(st, rec, cap, out, m);
        } else if (rec->kind == REC_MERGE) {
            s = reverse_merge(st, rec, cap, out);
        } else {
            s = reverse_leaf(st, rec, cap, out, m);
        }
        if (rec->kind != REC_LEAF_IN && rec->kind != REC_LEAF_OUT) {
            otab_free(&out[rec->made]);   /* read for the last time */
        }
        if (st->t->progress && rec->kind != REC_MERGE) {   /* one per eliminated node, as forward */
            atomic_fetch_add(st->t->progress, 1);
        }
    }
    for (int e = 0; e < st->ne; e++) {
        otab_free(&out[e]);
    }
    free(out);
    return s;
}
