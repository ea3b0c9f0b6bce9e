/* memplan_py.c -- Problem.memory_plan and Problem.check_memory_plan.
 *
 * Both take a plan as simulate_py.c's four arrays and lower it in C (GIL
 * released).  memory_plan returns the planned arena as a dict of NumPy arrays
 * (per buffer: offset, bytes, first, last; per device: arena, peak, total, kept,
 * peak_kinds (ndev, len(BUFFER_KINDS)); reuse_from, reuse_to), validated by
 * sw_memory_plan_check when check=True.  check_memory_plan validates offsets
 * and reuse edges given from Python (tests hand it broken ones).
 */
#include "problem_py.h"  /* ProblemObject, plan_args, sw_py_* helpers; CPython and NumPy C API */

#include <string.h>  /* memset */

#include "pyerr.h"  /* sw_py_raise */

static PyObject *put_plan(const sw_memory_plan *mp) {
    PyObject *d = PyDict_New();
    npy_intp nb = mp->nbuffers, nd = mp->ndev;
    npy_intp dims[2] = {nd, SW_BUF_NKINDS};
    PyArrayObject *kinds = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    if (kinds) {
        memcpy(PyArray_DATA(kinds), mp->peak_kinds, sizeof *mp->peak_kinds * (size_t)(nd * SW_BUF_NKINDS));
    }
    if (!d || sw_py_put(d, "offset", sw_py_contiguous(mp->offset, nb, NPY_INT64)) < 0 ||
        sw_py_put(d, "bytes", sw_py_contiguous(mp->bytes, nb, NPY_INT64)) < 0 ||
        sw_py_put(d, "first", sw_py_contiguous(mp->first, nb, NPY_INT32)) < 0 ||
        sw_py_put(d, "last", sw_py_contiguous(mp->last, nb, NPY_INT32)) < 0 ||
        sw_py_put(d, "arena", sw_py_contiguous(mp->arena, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "peak", sw_py_contiguous(mp->peak, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "total", sw_py_contiguous(mp->total, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "kept", sw_py_contiguous(mp->kept, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "peak_kinds", (PyObject *)kinds) < 0 ||
        sw_py_put(d, "reuse_from", sw_py_contiguous(mp->reuse_from, mp->nreuse, NPY_INT32)) < 0 ||
        sw_py_put(d, "reuse_to", sw_py_contiguous(mp->reuse_to, mp->nreuse, NPY_INT32)) < 0 ||
        sw_py_put(d, "align", PyLong_FromLongLong(mp->align)) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

/* memory_plan(kinds, degrees, dev_ptr, devices, align=ARENA_ALIGN, check=False) -> dict */
PyObject *sw_py_problem_memory_plan(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "align", "check", NULL};
    PyObject *k, *dg, *ptr, *dv;
    long long align = SW_ARENA_ALIGN;
    int check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|Lp", kwlist, &k, &dg, &ptr, &dv, &align, &check) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    plan_args a;
    sw_task_graph g = {0};
    sw_memory_plan mp = {0};
    PyObject *d = NULL;
    if (sw_py_parse_plan(self->p, k, dg, ptr, dv, &a) < 0) {
        goto done;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_lower(self->p, &a.plan, &g);
    if (s == SW_OK) {
        s = sw_memory_plan_build(&g, self->p->ndev, (int64_t)align, 1, &mp);
    }
    if (s == SW_OK && check) {
        s = sw_memory_plan_check(&g, &mp);
    }
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    d = put_plan(&mp);
done:
    self->busy = 0;
    sw_memory_plan_free(&mp);
    sw_task_graph_free(&g);
    sw_py_plan_args_free(&a);
    return d;
}

/* check_memory_plan(kinds, degrees, dev_ptr, devices, offset, arena, reuse_from, reuse_to, align) -> None */
PyObject *sw_py_problem_check_memory_plan(ProblemObject *self, PyObject *args) {
    PyObject *k, *dg, *ptr, *dv, *off, *ar, *rf, *rt;
    long long align;
    if (!PyArg_ParseTuple(args, "OOOOOOOOL", &k, &dg, &ptr, &dv, &off, &ar, &rf, &rt, &align) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    plan_args a;
    sw_task_graph g = {0};
    PyArrayObject *offset = NULL, *arena = NULL, *from = NULL, *to = NULL;
    PyObject *result = NULL;
    if (sw_py_parse_plan(self->p, k, dg, ptr, dv, &a) < 0 ||
        !(offset = sw_py_array(off, NPY_INT64, 1, "offset")) || !(arena = sw_py_array(ar, NPY_INT64, 1, "arena")) ||
        !(from = sw_py_array(rf, NPY_INT32, 1, "reuse_from")) || !(to = sw_py_array(rt, NPY_INT32, 1, "reuse_to"))) {
        goto done;
    }
    if (PyArray_DIM(arena, 0) != self->p->ndev || PyArray_DIM(from, 0) != PyArray_DIM(to, 0) || align < 1 ||
        (align & (align - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "arena needs %d entries, reuse_from and reuse_to equal lengths, align a "
                     "power of two", self->p->ndev);
        goto done;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_lower(self->p, &a.plan, &g);
    if (s == SW_OK && PyArray_DIM(offset, 0) != g.nbuffers) {
        s = SW_FAIL(SW_ERR_VALUE, "offset has %lld entries for %d buffers", (long long)PyArray_DIM(offset, 0),
                    g.nbuffers);
    }
    if (s == SW_OK) {
        sw_memory_plan mp = {.nbuffers = g.nbuffers, .ndev = self->p->ndev, .align = align,
                             .offset = PyArray_DATA(offset), .arena = PyArray_DATA(arena),
                             .nreuse = (int32_t)PyArray_DIM(from, 0), .reuse_from = PyArray_DATA(from),
                             .reuse_to = PyArray_DATA(to)};
        s = sw_memory_plan_check(&g, &mp);
    }
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    self->busy = 0;
    Py_XDECREF(offset);
    Py_XDECREF(arena);
    Py_XDECREF(from);
    Py_XDECREF(to);
    sw_task_graph_free(&g);
    sw_py_plan_args_free(&a);
    return result;
}

int sw_py_register_memplan(PyObject *module) {
    (void)module;
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
