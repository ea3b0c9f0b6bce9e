/* search_py.c -- the searches from Python: Problem.search, Problem.least_transfer,
 * Problem.worker_regions and search_tables (a search over plain cost tables, for tests
 * and for the relaxations of search_scale.py).
 *
 * A search runs with the GIL released; it returns (choice, cost, stats) and, with
 * marginals=True (elimination only), every node's min-marginals as a fourth item (None when
 * Problem.search's skip_marginals_within finds the chosen plan costing the bound).
 */
#include "problem_py.h"  /* ProblemObject, sw_py_* helpers; CPython and NumPy C API */

#include <math.h>    /* isfinite, isnan */
#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* strcmp */

#include "pyerr.h"  /* sw_py_raise */

/* ------------------------------------------------------------------ stats */
static PyObject *stats_dict(const sw_search_stats *st) {
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:d,s:d,s:i,s:d,s:O,s:d,s:d}", "node_eliminations",
                         st->node_eliminations, "reused_products", st->reused_products, "reused_sums", st->reused_sums,
                         "algorithm1_residual_nodes", st->algorithm1_residual_nodes,
                         "edge_eliminations", st->edge_eliminations, "leaf_eliminations", st->leaf_eliminations,
                         "residual_nodes", st->residual_nodes, "residual_edges", st->residual_edges,
                         "residual_combinations", st->residual_combinations, "evaluations", st->evaluations,
                         "residual_width", st->residual_width, "residual_table", st->residual_table,
                         "exact", st->exact ? Py_True : Py_False, "lower_bound", st->lower_bound,
                         "marginals_cap", st->marginals_cap);
}

typedef sw_status (*search_fn)(const sw_tables *, double, int *, double *, sw_search_stats *);

static search_fn pick_search(const char *algorithm) {
    if (strcmp(algorithm, "elimination") == 0) {
        return sw_search_elimination;
    }
    if (strcmp(algorithm, "exhaustive") == 0) {
        return sw_search_exhaustive;
    }
    PyErr_Format(PyExc_ValueError, "unknown search algorithm '%s'; expected 'elimination' or 'exhaustive'",
                 algorithm);
    return NULL;
}

static int check_marginals(search_fn fn, int marginals) {
    if (marginals && fn != sw_search_elimination) {
        PyErr_SetString(PyExc_ValueError, "marginals come with algorithm='elimination' only");
        return 0;
    }
    return 1;
}

static int check_limit(double max_evals) {
    if (!(max_evals >= 1.0) || !isfinite(max_evals)) {  /* NaN fails the first test */
        PyErr_Format(PyExc_ValueError, "max_evaluations must be a finite number >= 1, got %g", max_evals);
        return 0;
    }
    return 1;
}

/* Run a search with the GIL released and package (choice, cost, stats), and with
 * `marginals` (elimination only) a fourth item: the list of every node's min-marginals. */
static PyObject *run_search_unless(const sw_tables *t, search_fn fn, double max_evals, int marginals, double cap,
                                   sw_marginals_cap_fn cap_of, void *ctx) {
    npy_intp n = t->nnodes;
    PyArrayObject *choice = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT32);
    double **m = marginals ? calloc((size_t)n, sizeof *m) : NULL;
    if (!choice || (marginals && !m)) {
        Py_XDECREF(choice);
        free(m);
        return marginals && !m ? PyErr_NoMemory() : NULL;
    }
    int *c = (int *)PyArray_DATA(choice);
    double cost = 0;
    sw_search_stats stats = {0};
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = m ? sw_search_elimination_marginals_unless(t, max_evals, c, &cost, &stats, m, cap, cap_of, ctx)
          : fn(t, max_evals, c, &cost, &stats);
    Py_END_ALLOW_THREADS
    PyObject *sd = s == SW_OK ? stats_dict(&stats) : NULL;
    PyObject *ml = NULL;
    if (sd && m && t->nnodes > 0 && !m[0]) {   /* the reverse pass was skipped */
        ml = Py_NewRef(Py_None);
    } else if (sd && m) {
        ml = PyList_New(n);
        for (npy_intp v = 0; ml && v < n; v++) {
            npy_intp len = t->ncfg[v];
            PyObject *a = sw_py_copy_doubles(m[v], 1, &len);
            if (!a) {
                Py_CLEAR(ml);
                break;
            }
            PyList_SET_ITEM(ml, v, a);
        }
    }
    for (npy_intp v = 0; m && v < n; v++) {
        free(m[v]);
    }
    free(m);
    if (s != SW_OK) {
        Py_DECREF(choice);
        return sw_py_raise(s);
    }
    if (!sd || (marginals && !ml)) {
        Py_DECREF(choice);
        Py_XDECREF(sd);
        return NULL;
    }
    return marginals ? Py_BuildValue("(NdNN)", choice, cost, sd, ml) : Py_BuildValue("(NdN)", choice, cost, sd);
}

static PyObject *run_search(const sw_tables *t, search_fn fn, double max_evals, int marginals, double cap) {
    return run_search_unless(t, fn, max_evals, marginals, cap, NULL, NULL);
}

/* The plan the eliminations chose, costed exactly where its configurations sit (node costs plus
 * sw_transfer_placed per edge): when that is within `within` (relative) of the lower bound, no
 * plan on any placement does better and the min-marginals are not needed (-1: skip them);
 * otherwise, with cap_within >= 0, that plan's cost (1 + cap_within) caps them (a pruning at a
 * plan's cost keeps nothing above it: Eq. 1's tables are >= 0). */
typedef struct {
    const sw_problem *p;
    double within, cap_within;   /* negative: not asked */
} plan_check;

static double plan_cap(void *ctx, const int *choice, double lower_bound) {
    const plan_check *pc = ctx;
    const sw_problem *p = pc->p;
    const sw_tables *t = &p->tables;
    double cost = 0.0;
    for (int i = 0; i < t->nnodes; i++) {
        cost += t->node_cost[i][choice[i]];
    }
    for (int e = 0; e < t->nedges; e++) {
        const sw_edge_table *ed = &t->edges[e];
        double x;
        if (sw_transfer_placed(p, ed->dst, p->edge_consumer_slot[e], choice[ed->src], choice[ed->dst], &x) != SW_OK) {
            return INFINITY;   /* not a machine of uniform nodes: every marginal, as asked */
        }
        cost += x;
        if (pc->cap_within < 0 && cost > lower_bound * (1 + pc->within)) {
            return INFINITY;   /* neither tight nor asked for a cap: no need to sum the rest */
        }
    }
    if (pc->within >= 0 && cost <= lower_bound * (1 + pc->within)) {
        return -1.0;
    }
    return pc->cap_within >= 0 ? cost * (1 + pc->cap_within) : INFINITY;
}

/* search(algorithm, max_evaluations, marginals=False, skip_marginals_within=-1, cap_marginals_within=-1,
 * cap=inf): with skip_marginals_within >= 0 (elimination with marginals, on a machine of uniform
 * nodes) the marginals come back None when the chosen strategy, costed exactly on its devices,
 * is within that fraction of the lower bound (plan_cap): the staged search needs them only to
 * prune towards an optimum it does not have yet.  With cap_marginals_within >= 0 they are
 * capped at that strategy's cost (1 + cap_marginals_within), and with `cap` at most cap:
 * marginals above the cap come back infinite (stats["marginals_cap"]: the cap used). */
PyObject *sw_py_problem_search(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"algorithm", "max_evaluations", "marginals", "skip_marginals_within",
                             "cap_marginals_within", "cap", NULL};
    const char *algorithm = "elimination";
    double max_evals = 1e9, within = -1.0, cap_within = -1.0, cap = INFINITY;
    int marginals = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|sdpddd", kwlist, &algorithm, &max_evals, &marginals, &within,
                                     &cap_within, &cap) ||
        !sw_py_tables_ready(self)) {
        return NULL;
    }
    if (isnan(cap) || isnan(within) || isnan(cap_within)) {
        PyErr_SetString(PyExc_ValueError, "cap, skip_marginals_within and cap_marginals_within must not be NaN");
        return NULL;
    }
    if ((within >= 0 || cap_within >= 0) && !self->p->edge_consumer_slot) {
        PyErr_SetString(PyExc_ValueError, "skip_marginals_within and cap_marginals_within need the tables of a "
                                          "problem's edges");
        return NULL;
    }
    search_fn fn = pick_search(algorithm);
    if (!fn || !check_limit(max_evals) || !check_marginals(fn, marginals)) {
        return NULL;
    }
    self->busy = 1;
    atomic_store(&self->p->progress_done, 0);
    atomic_store(&self->p->progress_total, (long)self->p->nops * (marginals ? 2 : 1));   /* forward (+ reverse) */
    self->p->tables.progress = &self->p->progress_done;
    self->p->tables.threads = self->p->threads;
    plan_check pc = {self->p, within, cap_within};
    PyObject *r = run_search_unless(&self->p->tables, fn, max_evals, marginals, cap,
                                    within >= 0 || cap_within >= 0 ? plan_cap : NULL, &pc);
    self->p->tables.progress = NULL;
    self->busy = 0;
    return r;
}

typedef sw_status (*pair_transfer_fn)(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out);

/* fn(edge e's consumer and slot, ci, cj) with the arguments checked, the GIL released. */
static PyObject *pair_transfer(ProblemObject *self, PyObject *args, pair_transfer_fn fn) {
    int e, ci, cj;
    if (!PyArg_ParseTuple(args, "iii", &e, &ci, &cj) || !sw_py_tables_ready(self)) {
        return NULL;
    }
    const sw_tables *t = &self->p->tables;
    if (e < 0 || e >= t->nedges) {
        PyErr_Format(PyExc_IndexError, "edge %d out of range", e);
        return NULL;
    }
    const sw_edge_table *ed = &t->edges[e];
    if (ci < 0 || ci >= self->p->ops[ed->src].ncfg || cj < 0 || cj >= self->p->ops[ed->dst].ncfg) {
        PyErr_SetString(PyExc_IndexError, "configuration out of range");
        return NULL;
    }
    double out = 0;
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = fn(self->p, ed->dst, self->p->edge_consumer_slot[e], ci, cj, &out);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    return PyFloat_FromDouble(out);
}

/* least_transfer(edge, ci, cj) -> the least t_x of edge e between configurations ci (producer)
 * and cj (consumer) over their placements on aligned blocks (uniform nodes only). */
PyObject *sw_py_problem_least_transfer(ProblemObject *self, PyObject *args) {
    return pair_transfer(self, args, sw_transfer_least);
}

/* placed_transfer(edge, ci, cj) -> t_x of edge e between configurations ci (producer) and cj
 * (consumer) where they sit (uniform nodes and contiguous devices only): the search's check that
 * its relaxation's plan costs the bound, one pair at a time. */
PyObject *sw_py_problem_placed_transfer(ProblemObject *self, PyObject *args) {
    return pair_transfer(self, args, sw_transfer_placed);
}

/* worker_regions(op, config, slot, per_worker=False) -> (lo, hi, used): the region of input
 * `slot` every worker of configuration `config` reads, (k, rank) int64 twice and (k,) bool;
 * computed for all workers at once (sw_config_regions) or one worker at a time (the
 * reference, sw_worker_region).  Tests compare the two. */
PyObject *sw_py_problem_worker_regions(ProblemObject *self, PyObject *args) {
    int op, cfg, slot, per_worker = 0;
    if (!PyArg_ParseTuple(args, "iii|p", &op, &cfg, &slot, &per_worker) || !sw_py_problem_ready(self) ||
        !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    if (cfg < 0 || cfg >= o->ncfg || slot < 0 || slot >= o->ninputs) {
        PyErr_SetString(PyExc_IndexError, "configuration or input slot out of range");
        return NULL;
    }
    const sw_config *c = &o->cfgs[cfg];
    int k = c->nworkers, rank = o->inputs[slot].rank;
    sw_box *regions = malloc(sizeof *regions * (size_t)k);
    char *used = malloc((size_t)k);
    npy_intp dims[2] = {k, rank}, dk = k;
    PyArrayObject *lo = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    PyArrayObject *hi = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    PyArrayObject *u = (PyArrayObject *)PyArray_SimpleNew(1, &dk, NPY_BOOL);
    sw_status s = SW_OK;
    if (!regions || !used || !lo || !hi || !u) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
    } else if (per_worker) {
        for (int w = 0; w < k; w++) {
            used[w] = (char)sw_worker_region(o, c, w, slot, &regions[w]);
        }
    } else {
        s = sw_config_regions(o, c, slot, regions, used);
    }
    if (s == SW_OK) {
        int64_t *pl = PyArray_DATA(lo), *ph = PyArray_DATA(hi);
        npy_bool *pu = PyArray_DATA(u);
        for (int w = 0; w < k; w++) {
            pu[w] = used[w] != 0;
            for (int d = 0; d < rank; d++) {
                pl[(size_t)w * rank + d] = regions[w].lo[d];
                ph[(size_t)w * rank + d] = regions[w].hi[d];
            }
        }
    }
    free(regions);
    free(used);
    if (s != SW_OK || !lo || !hi || !u) {
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        Py_XDECREF(u);
        return s != SW_OK ? sw_py_raise(s) : NULL;
    }
    return Py_BuildValue("(NNN)", lo, hi, u);
}

static void free_raw_tables(sw_tables *t) {
    free(t->ncfg);
    free(t->node_cost);
    free(t->edges);
}

/* Checks over blocks of this many entries, each without a branch per entry (vectorized: a
 * large machine's tables, tens of megabytes read on every Lagrangian solve of the memory
 * search, took a twentieth of it entry by entry). */
#define CHECK_BLOCK 2048

/* No NaN among the n entries? */
static int no_nan(const double *x, npy_intp n) {
    for (npy_intp i = 0; i < n; i += CHECK_BLOCK) {
        npy_intp end = n - i < CHECK_BLOCK ? n : i + CHECK_BLOCK;
        int bad = 0;
        for (npy_intp j = i; j < end; j++) {
            bad |= x[j] != x[j];
        }
        if (bad) {
            return 0;
        }
    }
    return 1;
}

/* Are all n entries >= 0 (the condition of a finite marginals cap)? */
static int nonnegative(const double *x, npy_intp n) {
    for (npy_intp i = 0; i < n; i += CHECK_BLOCK) {
        npy_intp end = n - i < CHECK_BLOCK ? n : i + CHECK_BLOCK;
        int bad = 0;
        for (npy_intp j = i; j < end; j++) {
            bad |= !(x[j] >= 0);
        }
        if (bad) {
            return 0;
        }
    }
    return 1;
}

/* search_tables(node_costs: list of 1-D float64, edges: list of (src, dst, 2-D float64), algorithm, max_evals,
 * marginals, threads, cap): with a finite cap (marginals above it come out infinite) every cost must be >= 0 */
static PyObject *search_tables(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"node_costs", "edges", "algorithm", "max_evaluations", "marginals", "threads", "cap",
                             NULL};
    PyObject *nodes_o, *edges_o;
    const char *algorithm = "elimination";
    double max_evals = 1e9, cap = INFINITY;
    int marginals = 0, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|sdpid", kwlist, &nodes_o, &edges_o, &algorithm, &max_evals,
                                     &marginals, &threads, &cap)) {
        return NULL;
    }
    if (isnan(cap)) {
        PyErr_SetString(PyExc_ValueError, "cap must be a number (inf: every marginal), not NaN");
        return NULL;
    }
    if (threads < 1 || threads > 64) {
        PyErr_Format(PyExc_ValueError, "threads must be in 1..64, got %d", threads);
        return NULL;
    }
    search_fn fn = pick_search(algorithm);
    if (!fn || !check_limit(max_evals) || !check_marginals(fn, marginals)) {
        return NULL;
    }
    PyObject *nodes = PySequence_Fast(nodes_o, "node_costs must be a sequence of arrays");
    PyObject *edges = nodes ? PySequence_Fast(edges_o, "edges must be a sequence of (src, dst, table)") : NULL;
    if (!edges) {
        Py_XDECREF(nodes);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(nodes), ne = PySequence_Fast_GET_SIZE(edges);
    PyObject *keep = PyList_New(0);  /* owns the converted arrays */
    sw_tables t = {0};
    PyObject *result = NULL;
    if (!keep) {
        goto done;
    }
    if (n < 1 || n > (1 << 20) || ne > (1 << 22)) {
        PyErr_SetString(PyExc_ValueError, "need between 1 and 2^20 nodes");
        goto done;
    }
    t.nnodes = (int)n;
    t.threads = threads;
    t.ncfg = calloc((size_t)n, sizeof *t.ncfg);
    t.node_cost = calloc((size_t)n, sizeof *t.node_cost);
    t.edges = calloc((size_t)(ne > 0 ? ne : 1), sizeof *t.edges);
    if (!t.ncfg || !t.node_cost || !t.edges) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyArrayObject *a = sw_py_array(PySequence_Fast_GET_ITEM(nodes, i), NPY_FLOAT64, 1, "node cost");
        if (!a || PyList_Append(keep, (PyObject *)a) < 0) {
            Py_XDECREF(a);
            goto done;
        }
        Py_DECREF(a);
        if (PyArray_DIM(a, 0) < 1 || PyArray_DIM(a, 0) > (1 << 20)) {
            PyErr_Format(PyExc_ValueError, "node %zd needs at least one configuration", i);
            goto done;
        }
        t.ncfg[i] = (int)PyArray_DIM(a, 0);
        t.node_cost[i] = PyArray_DATA(a);
        if (!no_nan(t.node_cost[i], t.ncfg[i])) {
            PyErr_Format(PyExc_ValueError, "node %zd: costs must not be NaN", i);
            goto done;
        }
        if (cap != INFINITY && !nonnegative(t.node_cost[i], t.ncfg[i])) {
            PyErr_Format(PyExc_ValueError, "node %zd: a finite cap needs costs >= 0", i);
            goto done;
        }
    }
    for (Py_ssize_t e = 0; e < ne; e++) {
        int src, dst;
        PyObject *table_o, *item = PySequence_Fast_GET_ITEM(edges, e);
        if (!PyTuple_Check(item)) {
            PyErr_Format(PyExc_ValueError, "edge %zd must be a tuple (src, dst, table), got %s", e,
                         Py_TYPE(item)->tp_name);
            goto done;
        }
        if (!PyArg_ParseTuple(item, "iiO", &src, &dst, &table_o)) {
            goto done;
        }
        if (src < 0 || dst >= n || src >= dst) {
            PyErr_Format(PyExc_ValueError, "edge %zd (%d -> %d): need 0 <= src < dst < %zd (topological order)", e,
                         src, dst, n);
            goto done;
        }
        PyArrayObject *a = sw_py_array(table_o, NPY_FLOAT64, 2, "edge table");
        if (!a || PyList_Append(keep, (PyObject *)a) < 0) {
            Py_XDECREF(a);
            goto done;
        }
        Py_DECREF(a);
        if (PyArray_DIM(a, 0) != t.ncfg[src] || PyArray_DIM(a, 1) != t.ncfg[dst]) {
            PyErr_Format(PyExc_ValueError, "edge %zd table must be %d x %d", e, t.ncfg[src], t.ncfg[dst]);
            goto done;
        }
        t.edges[e] = (sw_edge_table){src, dst, PyArray_DATA(a), NULL, 0};
        int checked = sw_tables_shared_with(&t, (int)e) >= 0;   /* a table many edges share: read once */
        if (!checked && !no_nan(t.edges[e].time, (npy_intp)t.ncfg[src] * t.ncfg[dst])) {
            PyErr_Format(PyExc_ValueError, "edge %zd: costs must not be NaN", e);
            goto done;
        }
        if (!checked && cap != INFINITY && !nonnegative(t.edges[e].time, (npy_intp)t.ncfg[src] * t.ncfg[dst])) {
            PyErr_Format(PyExc_ValueError, "edge %zd: a finite cap needs costs >= 0", e);
            goto done;
        }
        t.nedges++;
    }
    result = run_search(&t, fn, max_evals, marginals, cap);
done:
    free_raw_tables(&t);
    Py_XDECREF(keep);
    Py_DECREF(nodes);
    Py_DECREF(edges);
    return result;
}

/* minplus(a, nj, b, kernel=-1, threads=1) -> out: node elimination's min-plus product on one kernel
 * (SW_MINPLUS_*; -1 or one the CPU lacks: the best it has), for tests that compare the kernels. */
static PyObject *minplus(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"a", "nj", "b", "kernel", "threads", NULL};
    PyObject *a_o, *nj_o, *b_o;
    int kernel = -1, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|ii", kwlist, &a_o, &nj_o, &b_o, &kernel, &threads)) {
        return NULL;
    }
    if (threads < 1 || threads > 64) {
        PyErr_Format(PyExc_ValueError, "threads must be in 1..64, got %d", threads);
        return NULL;
    }
    PyArrayObject *a = sw_py_array(a_o, NPY_FLOAT64, 2, "a");
    PyArrayObject *nj = a ? sw_py_array(nj_o, NPY_FLOAT64, 1, "nj") : NULL;
    PyArrayObject *b = nj ? sw_py_array(b_o, NPY_FLOAT64, 2, "b") : NULL;
    PyArrayObject *out = NULL;
    if (b) {
        npy_intp ci_n = PyArray_DIM(a, 0), cj_n = PyArray_DIM(a, 1), ck_n = PyArray_DIM(b, 1);
        if (PyArray_DIM(nj, 0) != cj_n || PyArray_DIM(b, 0) != cj_n || ci_n < 1 || cj_n < 1 || ck_n < 1 ||
            ci_n > (1 << 20) || cj_n > (1 << 20) || ck_n > (1 << 20)) {
            PyErr_SetString(PyExc_ValueError, "minplus needs a (ci, cj), nj (cj,) and b (cj, ck), each at least 1");
        } else {
            npy_intp dims[2] = {ci_n, ck_n};
            out = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_FLOAT64);
            if (out) {
                const double *ad = PyArray_DATA(a), *nd = PyArray_DATA(nj), *bd = PyArray_DATA(b);
                double *od = PyArray_DATA(out);
                Py_BEGIN_ALLOW_THREADS
                sw_minplus_kernel(ad, nd, bd, od, (int)ci_n, (int)cj_n, (int)ck_n, threads, kernel);
                Py_END_ALLOW_THREADS
            }
        }
    }
    Py_XDECREF(a);
    Py_XDECREF(nj);
    Py_XDECREF(b);
    return (PyObject *)out;
}

static PyObject *minplus_kernel(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args)) {
    return PyLong_FromLong(sw_minplus_best_kernel());
}

/* keep_search_tables(on) -> bytes kept (sw_table_arena_keep; None: only asks) */
static PyObject *keep_search_tables(PyObject *Py_UNUSED(module), PyObject *arg) {
    int on = arg == Py_None ? -1 : PyObject_IsTrue(arg);
    if (on < 0 && arg != Py_None) {
        return NULL;
    }
    return PyLong_FromSize_t(sw_table_arena_keep(on));
}

static PyMethodDef search_methods[] = {
    {"minplus", (PyCFunction)(void (*)(void))minplus, METH_VARARGS | METH_KEYWORDS,
     "minplus(a, nj, b, kernel=-1, threads=1) -> out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck] on\n"
     "one kernel (0 portable, 1 AVX2, 2 AVX-512; -1 or one the CPU lacks: the best it has)."},
    {"minplus_kernel", (PyCFunction)minplus_kernel, METH_NOARGS,
     "minplus_kernel() -> the min-plus kernel searches use here (0 portable, 1 AVX2, 2 AVX-512)."},
    {"keep_search_tables", (PyCFunction)keep_search_tables, METH_O,
     "keep_search_tables(on) -> bytes kept: True keeps the large blocks the searches' tables are cut from\n"
     "for the next searches (already mapped), False lets them go once every True is matched (calls\n"
     "nest), None only asks."},
    {"search_tables", (PyCFunction)(void (*)(void))search_tables, METH_VARARGS | METH_KEYWORDS,
     "search_tables(node_costs, edges, algorithm='elimination', max_evaluations=1e9, marginals=False, threads=1)\n"
     "-> (choice, cost, stats[, marginals]): search over plain cost tables (edges as (src, dst, table), src < dst)."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_search(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    return PyModule_AddFunctions(module, search_methods);
}
