/* problem_tables_py.c -- the Problem methods over the cost tables of Eq. 1: build_tables (GIL
 * released), node_costs, set_compute_times (measured t_c), edges and edge_table, and the helpers
 * other bindings share (sw_py_tables_ready, sw_py_copy_doubles).
 *
 * Apart from module.c (the Problem type) and problem_configs_py.c (what the search may choose
 * from) because these read and change the tables the search runs over.
 */
#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */

#include <math.h>  /* isfinite */

#include "pyerr.h"  /* sw_py_raise */

int sw_py_tables_ready(ProblemObject *self) {
    if (!sw_py_problem_ready(self)) {
        return 0;
    }
    if (!self->p->tables_built) {
        PyErr_SetString(PyExc_RuntimeError, "cost tables are not built: call build_tables first");
        return 0;
    }
    return 1;
}

PyObject *sw_py_copy_doubles(const double *src, int ndim, npy_intp *dims) {
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(ndim, dims, NPY_FLOAT64);
    if (a) {
        memcpy(PyArray_DATA(a), src, (size_t)PyArray_NBYTES(a));
    }
    return (PyObject *)a;
}

PyObject *sw_py_problem_build_tables(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"with_bytes", "bounds", NULL};
    int with_bytes = 0, bounds = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &with_bytes, &bounds) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (bounds && with_bytes) {
        PyErr_SetString(PyExc_ValueError, "bound tables have no bytes");
        return NULL;
    }
    self->p->bound_tables = bounds;
    for (int i = 0; i < self->p->nops; i++) {
        if (self->p->ops[i].ncfg < 1) {
            PyErr_Format(PyExc_ValueError, "op %d has no configurations: call enumerate or set_configs first", i);
            return NULL;
        }
    }
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_problem_build_tables(self->p, with_bytes);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

/* release_tables(): the cost tables freed, the configurations kept (build_tables makes them
 * again); refused while another thread reads the problem. */
PyObject *sw_py_problem_release_tables(ProblemObject *self, PyObject *Py_UNUSED(arg)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    if (self->busy || self->readers) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release the tables of a Problem while another thread is using it");
        return NULL;
    }
    sw_problem_reset_tables(self->p);
    Py_RETURN_NONE;
}

PyObject *sw_py_problem_node_costs(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_tables_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    npy_intp n = self->p->ops[op].ncfg;
    return Py_BuildValue("(NNN)", sw_py_copy_doubles(self->p->tc[op], 1, &n), sw_py_copy_doubles(self->p->ts[op], 1, &n),
                         sw_py_copy_doubles(self->p->sync_bytes[op], 1, &n));
}

/* Replace t_c of every configuration of one op (a measured profile); node costs follow. */
PyObject *sw_py_problem_set_compute_times(ProblemObject *self, PyObject *args) {
    int op;
    PyObject *tc_o;
    if (!PyArg_ParseTuple(args, "iO", &op, &tc_o) || !sw_py_tables_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    self->busy = 1;  /* see CONVERTING */
    PyArrayObject *tc = sw_py_array(tc_o, NPY_FLOAT64, 1, "compute times");
    self->busy = 0;
    if (!tc) {
        return NULL;
    }
    int n = self->p->ops[op].ncfg;
    const double *v = PyArray_DATA(tc);
    if (PyArray_DIM(tc, 0) != n) {
        Py_DECREF(tc);
        PyErr_Format(PyExc_ValueError, "op %d has %d configurations, got %zd compute times", op, n,
                     (Py_ssize_t)PyArray_DIM(tc, 0));
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        if (!(v[k] >= 0) || !isfinite(v[k])) {
            Py_DECREF(tc);
            PyErr_Format(PyExc_ValueError, "compute time %g of op %d must be finite and non-negative", v[k], op);
            return NULL;
        }
    }
    for (int k = 0; k < n; k++) {
        self->p->tc[op][k] = v[k];
        self->p->tables.node_cost[op][k] = v[k] + self->p->ts[op][k];
    }
    Py_DECREF(tc);
    Py_RETURN_NONE;
}

PyObject *sw_py_problem_edges(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_tables_ready(self)) {
        return NULL;
    }
    const sw_tables *t = &self->p->tables;
    PyObject *list = PyList_New(t->nedges);
    for (int e = 0; list && e < t->nedges; e++) {
        PyObject *item = Py_BuildValue("(iii)", t->edges[e].src, t->edges[e].dst, self->p->edge_consumer_slot[e]);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, e, item);
    }
    return list;
}

/* A new (len(rows), len(cols)) float64 array of src (ni x nj) at those rows and columns (all when NULL). */
static PyObject *copy_block(const double *src, npy_intp ni, npy_intp nj, PyArrayObject *rows, PyArrayObject *cols) {
    if (!rows && !cols) {
        npy_intp dims[2] = {ni, nj};
        return sw_py_copy_doubles(src, 2, dims);
    }
    npy_intp dims[2] = {rows ? PyArray_DIM(rows, 0) : ni, cols ? PyArray_DIM(cols, 0) : nj};
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_FLOAT64);
    if (!a) {
        return NULL;
    }
    const int64_t *r = rows ? PyArray_DATA(rows) : NULL, *c = cols ? PyArray_DATA(cols) : NULL;
    double *out = PyArray_DATA(a);
    for (npy_intp x = 0; x < dims[0]; x++) {
        const double *row = src + (size_t)(r ? r[x] : x) * (size_t)nj;
        for (npy_intp y = 0; y < dims[1]; y++) {
            out[(size_t)x * (size_t)dims[1] + (size_t)y] = row[c ? c[y] : y];
        }
    }
    return (PyObject *)a;
}

/* edge_table(e, rows=None, cols=None) -> (t_x, bytes or None): edge e's table, or only the producer
 * configurations `rows` and consumer configurations `cols` of it (the staged search's survivors
 * of a table of 10^6 entries). */
PyObject *sw_py_problem_edge_table(ProblemObject *self, PyObject *args) {
    int e;
    PyObject *rows_o = Py_None, *cols_o = Py_None;
    if (!PyArg_ParseTuple(args, "i|OO", &e, &rows_o, &cols_o) || !sw_py_tables_ready(self)) {
        return NULL;
    }
    if (e < 0 || e >= self->p->tables.nedges) {
        PyErr_Format(PyExc_IndexError, "edge index %d out of range", e);
        return NULL;
    }
    PyArrayObject *rows = NULL, *cols = NULL;
    npy_intp ni = self->p->tables.ncfg[self->p->tables.edges[e].src];
    npy_intp nj = self->p->tables.ncfg[self->p->tables.edges[e].dst], nr, nc;
    if (!sw_py_rows(self, rows_o, ni, "rows", &rows, &nr) || !sw_py_rows(self, cols_o, nj, "cols", &cols, &nc)) {
        Py_XDECREF(rows);
        return NULL;
    }
    const sw_tables *t = &self->p->tables;   /* (read after the conversions) */
    PyObject *time = copy_block(t->edges[e].time, ni, nj, rows, cols);
    PyObject *bytes = !time ? NULL
                      : t->edges[e].bytes ? copy_block(t->edges[e].bytes, ni, nj, rows, cols) : Py_NewRef(Py_None);
    Py_XDECREF(rows);
    Py_XDECREF(cols);
    if (!time || !bytes) {
        Py_XDECREF(time);
        return NULL;
    }
    return Py_BuildValue("(NN)", time, bytes);
}

/* table_counts() -> (edges, distinct tables, tables counted): edges whose data agree share a
 * table; of the distinct tables, scaled copies of a counted one are filled from its counts. */
PyObject *sw_py_problem_table_counts(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_tables_ready(self)) {
        return NULL;
    }
    return Py_BuildValue("(iii)", self->p->tables.nedges, self->p->distinct_tables, self->p->counted_tables);
}

/* edge_times() -> [t_x per edge]: every edge's Eq. 1 table, an edge that shares its table with
 * an earlier one (equal data, cost.c) given that edge's array object, so that equal tables are
 * copied once and stay one array for the elimination's reuse of products. */
PyObject *sw_py_problem_edge_times(ProblemObject *self, PyObject *Py_UNUSED(args)) {
    if (!sw_py_tables_ready(self)) {
        return NULL;
    }
    const sw_tables *t = &self->p->tables;
    PyObject *list = PyList_New(t->nedges);
    for (int e = 0; list && e < t->nedges; e++) {
        int f = sw_tables_shared_with(t, e);   /* the same table: the same array */
        PyObject *item = f >= 0 ? Py_NewRef(PyList_GET_ITEM(list, f)) : NULL;
        if (!item) {
            npy_intp dims[2] = {t->ncfg[t->edges[e].src], t->ncfg[t->edges[e].dst]};
            item = sw_py_copy_doubles(t->edges[e].time, 2, dims);
        }
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, e, item);
    }
    return list;
}

int sw_py_register_problem_tables(PyObject *Py_UNUSED(module)) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
