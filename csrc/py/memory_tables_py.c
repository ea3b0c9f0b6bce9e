/* memory_tables_py.c -- Problem.memory_tables: the memory-constrained search's footprint tables.
 *
 * memory_tables(kinds) -> (rows, node, edges): rows (R, ndev) float64, every distinct row of
 * bytes per device once; node[v] (ncfg[v],) int32, the row of each of op v's configurations;
 * edges lists (producer, consumer, slot, base, shared) per data input: base (ncfg[consumer],)
 * int32 the rows of the consumer's kept staging regions, shared (m, 3) int32 (producer config,
 * consumer config, device) with savings (m,) float64: the bytes of the region that is the
 * producer's shard there instead (cost_memory.c); the edges of twin ops (every layer of a
 * transformer after the first) share the first one's arrays.  `kinds` is the plan arrays'
 * (lower.plan_arrays) first item.
 */
#include "problem_py.h"  /* ProblemObject, sw_py_* helpers; CPython and NumPy C API */

#include "pyerr.h"  /* sw_py_raise */

/* Edge e's item; an edge copied from a twin (edge_copy_of) takes the twin's arrays themselves
 * from `edges` (built before it): equal tables are one array in Python too. */
static PyObject *edge_item(const sw_memory_tables *mt, const sw_problem *p, int e, PyObject *edges) {
    if (mt->edge_copy_of[e] >= 0) {
        PyObject *twin = PyList_GET_ITEM(edges, mt->edge_copy_of[e]);
        return Py_BuildValue("(iiiOOO)", mt->edge_src[e], mt->edge_dst[e], mt->edge_slot[e],
                             PyTuple_GET_ITEM(twin, 3), PyTuple_GET_ITEM(twin, 4), PyTuple_GET_ITEM(twin, 5));
    }
    npy_intp m = (npy_intp)(mt->shared_ptr[e + 1] - mt->shared_ptr[e]);
    npy_intp sdims[2] = {m, 3};
    PyObject *base = sw_py_contiguous(mt->edge_base[e], p->ops[mt->edge_dst[e]].ncfg, NPY_INT32);
    PyArrayObject *idx = (PyArrayObject *)PyArray_SimpleNew(2, sdims, NPY_INT32);
    PyArrayObject *bytes = (PyArrayObject *)PyArray_SimpleNew(1, &m, NPY_FLOAT64);
    if (!base || !idx || !bytes) {
        Py_XDECREF(base);
        Py_XDECREF(idx);
        Py_XDECREF(bytes);
        return NULL;
    }
    int32_t *ix = PyArray_DATA(idx);
    double *bx = PyArray_DATA(bytes);
    for (npy_intp i = 0; i < m; i++) {
        const sw_memory_saving *s = &mt->shared[mt->shared_ptr[e] + i];
        ix[3 * i] = s->ci;
        ix[3 * i + 1] = s->cj;
        ix[3 * i + 2] = s->dev;
        bx[i] = s->bytes;
    }
    return Py_BuildValue("(iiiNNN)", mt->edge_src[e], mt->edge_dst[e], mt->edge_slot[e], base, idx, bytes);
}

PyObject *sw_py_problem_memory_tables(ProblemObject *self, PyObject *arg) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    PyArrayObject *kinds = sw_py_array(arg, NPY_INT32, 1, "kinds");
    if (!kinds) {
        return NULL;
    }
    const sw_problem *p = self->p;
    if (PyArray_DIM(kinds, 0) != p->nops) {
        PyErr_Format(PyExc_ValueError, "memory_tables needs one kind per op (%d), got %zd", p->nops,
                     (Py_ssize_t)PyArray_DIM(kinds, 0));
        Py_DECREF(kinds);
        return NULL;
    }
    int8_t *kind = PyMem_Calloc((size_t)p->nops + 1, 1);
    if (!kind) {
        Py_DECREF(kinds);
        return PyErr_NoMemory();
    }
    const int32_t *k32 = PyArray_DATA(kinds);
    for (int v = 0; v < p->nops; v++) {
        if (k32[v] < 0 || k32[v] > SW_OPKIND_BATCHNORM) {
            PyErr_Format(PyExc_ValueError, "op %d: unknown op kind %d", v, k32[v]);
            PyMem_Free(kind);
            Py_DECREF(kinds);
            return NULL;
        }
        kind[v] = (int8_t)k32[v];
    }
    Py_DECREF(kinds);
    sw_memory_tables mt;
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_memory_tables_build(p, kind, &mt);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyMem_Free(kind);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    npy_intp dims[2] = {mt.nrows, mt.ndev};
    PyObject *rows = sw_py_copy_doubles(mt.rows, 2, dims);
    PyObject *node = rows ? PyList_New(p->nops) : NULL, *edges = node ? PyList_New(mt.nedges) : NULL, *result = NULL;
    for (int v = 0; node && v < p->nops; v++) {
        PyObject *a = sw_py_contiguous(mt.node[v], p->ops[v].ncfg, NPY_INT32);
        if (!a) {
            Py_CLEAR(node);
            break;
        }
        PyList_SET_ITEM(node, v, a);
    }
    for (int e = 0; node && edges && e < mt.nedges; e++) {
        PyObject *item = edge_item(&mt, p, e, edges);
        if (!item) {
            Py_CLEAR(edges);
            break;
        }
        PyList_SET_ITEM(edges, e, item);
    }
    if (rows && node && edges) {
        result = Py_BuildValue("(NNN)", rows, node, edges);
    } else {
        Py_XDECREF(rows);
        Py_XDECREF(node);
        Py_XDECREF(edges);
    }
    sw_memory_tables_free(&mt);
    return result;
}

int sw_py_register_memory_tables(PyObject *module) {
    (void)module;
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
