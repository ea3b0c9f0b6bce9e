/* routes_py.c -- the module functions widest_bandwidths and widest_routes (core/routes.h): a
 * machine's routes for DeviceGraph.route_bandwidths, DeviceGraph.route and the simulator's
 * resource table (python/shardwise/machine/devices.py, iteration/sim_costs.py).
 *
 * Both take the links as three arrays of one length: src and dst (int32 device indices) and bw
 * (float64 bytes/s); a link's index in them is its id in the routes returned.  The searches run
 * with the GIL released.
 */
#include "problem_py.h"  /* sw_py_array; CPython and NumPy C API */

#include "core/routes.h"
#include "pyerr.h"  /* sw_py_raise */

/* Convert ndev and the three link arrays into a[0 .. 3) (new references, NULL where not made);
 * the number of links, or -1 with a ValueError. */
static npy_intp link_arrays(const char *fn, int ndev, PyObject *src, PyObject *dst, PyObject *bw,
                            PyArrayObject **a) {
    a[0] = sw_py_array(src, NPY_INT32, 1, "src");
    a[1] = a[0] ? sw_py_array(dst, NPY_INT32, 1, "dst") : NULL;
    a[2] = a[1] ? sw_py_array(bw, NPY_FLOAT64, 1, "bw") : NULL;
    if (!a[2]) {
        return -1;
    }
    npy_intp n = PyArray_DIM(a[0], 0);
    if (ndev < 0 || ndev > SW_MAX_DEVICES || n >= INT32_MAX || PyArray_DIM(a[1], 0) != n ||
        PyArray_DIM(a[2], 0) != n) {
        PyErr_Format(PyExc_ValueError, "%s: ndev must be 0 .. %d and src, dst, bw one length (< 2^31)", fn,
                     SW_MAX_DEVICES);
        return -1;
    }
    return n;
}

/* widest_bandwidths(ndev, src, dst, bw, sources) -> (len(sources), ndev) float64 */
static PyObject *widest_bandwidths(PyObject *Py_UNUSED(module), PyObject *args) {
    int ndev;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "iOOOO", &ndev, &objs[0], &objs[1], &objs[2], &objs[3])) {
        return NULL;
    }
    PyArrayObject *a[4] = {NULL}, *out = NULL;
    npy_intp nlinks = link_arrays("widest_bandwidths", ndev, objs[0], objs[1], objs[2], a);
    if (nlinks < 0 || !(a[3] = sw_py_array(objs[3], NPY_INT32, 1, "sources"))) {
        goto done;
    }
    npy_intp dims[2] = {PyArray_DIM(a[3], 0), ndev};
    if (dims[0] >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "widest_bandwidths: too many sources");
        goto done;
    }
    if (!(out = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_FLOAT64, 0))) {
        goto done;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_widest_bandwidths(ndev, (int32_t)nlinks, PyArray_DATA(a[0]), PyArray_DATA(a[1]), PyArray_DATA(a[2]),
                             (int32_t)dims[0], PyArray_DATA(a[3]), PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        Py_CLEAR(out);
    }
done:
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(a[k]);
    }
    return (PyObject *)out;
}

/* widest_routes(ndev, src, dst, bw, pair_src, pair_dst) -> (route_ptr int64 (P + 1,), links int32, width (P,)) */
static PyObject *widest_routes(PyObject *Py_UNUSED(module), PyObject *args) {
    int ndev;
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "iOOOOO", &ndev, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4])) {
        return NULL;
    }
    PyArrayObject *a[5] = {NULL}, *ptr = NULL, *width = NULL;
    PyObject *result = NULL;
    npy_intp nlinks = link_arrays("widest_routes", ndev, objs[0], objs[1], objs[2], a);
    if (nlinks < 0 || !(a[3] = sw_py_array(objs[3], NPY_INT32, 1, "pair_src")) ||
        !(a[4] = sw_py_array(objs[4], NPY_INT32, 1, "pair_dst"))) {
        goto done;
    }
    npy_intp npairs = PyArray_DIM(a[3], 0), nptr = npairs + 1;
    if (PyArray_DIM(a[4], 0) != npairs) {
        PyErr_SetString(PyExc_ValueError, "widest_routes: pair_src and pair_dst must have one length");
        goto done;
    }
    ptr = (PyArrayObject *)PyArray_ZEROS(1, &nptr, NPY_INT64, 0);
    width = ptr ? (PyArrayObject *)PyArray_ZEROS(1, &npairs, NPY_FLOAT64, 0) : NULL;
    if (!width) {
        goto done;
    }
    int32_t *links = NULL;
    int64_t nroute = 0;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_widest_routes(ndev, (int32_t)nlinks, PyArray_DATA(a[0]), PyArray_DATA(a[1]), PyArray_DATA(a[2]),
                         (int64_t)npairs, PyArray_DATA(a[3]), PyArray_DATA(a[4]), PyArray_DATA(ptr),
                         PyArray_DATA(width), &links, &nroute);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        free(links);
        sw_py_raise(s);
        goto done;
    }
    /* adopted, not copied: a parameter server over a chain of 4,096 devices routes 17 million links */
    PyObject *route_links = sw_py_adopt(links, (npy_intp)nroute, NPY_INT32);
    if (route_links) {
        result = Py_BuildValue("(ONO)", ptr, route_links, width);
    }
done:
    Py_XDECREF(ptr);
    Py_XDECREF(width);
    for (int k = 0; k < 5; k++) {
        Py_XDECREF(a[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"widest_bandwidths", (PyCFunction)widest_bandwidths, METH_VARARGS,
     "widest_bandwidths(ndev, src, dst, bw, sources) -> (len(sources), ndev) float64\n"
     "The widest route's bandwidth from each source to every device (inf: itself, 0: unreachable)."},
    {"widest_routes", (PyCFunction)widest_routes, METH_VARARGS,
     "widest_routes(ndev, src, dst, bw, pair_src, pair_dst) -> (route_ptr, links, width)\n"
     "Each pair's route (widest, then fewest links, then the smallest device sequence) as link ids, CSR:\n"
     "pair i's are links[route_ptr[i]:route_ptr[i + 1]]; width[i] its bandwidth (0: no route)."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_routes(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    return PyModule_AddFunctions(module, methods);
}
