/* backend_py.c -- which backend a Runtime runs on, and the CUDA backend's host-side planning
 * for tests (cuda/host/gpu_plan.h), all reachable without a GPU.
 *
 *   _core.Runtime(..., backend="cpu" | "cuda" | "record", gpus=None, workspace=0)
 *   _core.gpu_map(ndev, ngpus) -> [gpu of each logical device]
 *   _core.gpu_route(gpu_of, a, b, peer) -> 0 same GPU, 1 peer, 2 staged (peer: ngpus x ngpus 0/1)
 *   _core.gpu_priorities(stream_gpu, priority, least, greatest) -> [CUDA priority per stream]
 *   _core.gpu_arena_layout(plan_bytes, streams, workspace) -> (workspace_offset, workspace_bytes, total)
 *   _core.gpu_window_dim(in_lo, in_n, out_lo, out_n, k, s, p) -> (need_lo, need_hi, skip, used, pad_lo, pad_hi,
 *                                                                  direct)
 *   _core.gpu_event_plan(ops, streams, ids, ntasks, stream_gpu) -> (slots, events, waits, cross_gpu_waits)
 *
 * "cuda" imports shardwise._cuda (the CUDA backend's own extension module, built only where
 * CUDA was found) and takes its constructor from a capsule (csrc/exec/backend_ext.h); the
 * core itself never links a CUDA library.
 */
#include "backend_py.h"

#include <string.h>  /* strcmp */

#include "../exec/gpu/gpu_plan.h"
#include "../cpu/backend_cpu.h"  /* sw_backend_cpu_new, sw_backend_cpu_iface */
#include "attrs_py.h"            /* sw_py_parse_op_attrs */
#include "pyerr.h"  /* sw_py_raise */

/* ------------------------------------------------------------------ choosing a backend */
static int int_list(PyObject *seq, int n, const char *what, int **out) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s must have %d entries, got %zd", what, n, PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    *out = PyMem_Calloc((size_t)n + 1, sizeof **out);
    if (!*out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < n; k++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, k));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        if (v < INT32_MIN || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%s: %ld is out of range", what, v);
            Py_DECREF(fast);
            return -1;
        }
        (*out)[k] = (int)v;
    }
    Py_DECREF(fast);
    return 0;
}

/* The CUDA backend's table from shardwise._cuda, checked against this build's ABI. */
static const sw_ext_backend *cuda_table(void) {
    PyObject *m = PyImport_ImportModule("shardwise._cuda");
    if (!m) {   /* say which of the two it is, with the loader's own words */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        int missing = PyErr_GivenExceptionMatches(type, PyExc_ModuleNotFoundError);
        PyObject *why = value ? PyObject_Str(value) : NULL;
        const char *text = why ? PyUnicode_AsUTF8(why) : NULL;
        PyErr_Clear();
        if (missing) {
            PyErr_SetString(PyExc_RuntimeError, "this installation of shardwise was built without the CUDA backend "
                            "(its build found no nvcc, cuDNN or cuBLAS; see docs/gpu.md)");
        } else {
            PyErr_Format(PyExc_RuntimeError, "the CUDA backend is built but cannot be loaded: %s (pip install "
                         "'shardwise[cuda]' installs cuDNN and cuBLAS)", text ? text : "unknown error");
        }
        Py_XDECREF(why);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    PyObject *cap = PyObject_GetAttrString(m, "_backend");
    Py_DECREF(m);
    if (!cap) {
        return NULL;
    }
    const sw_ext_backend *t = PyCapsule_GetPointer(cap, SW_EXT_BACKEND_CAPSULE);
    Py_DECREF(cap);
    if (!t) {
        return NULL;
    }
    if (t->version != SW_EXT_ABI_VERSION || !sw_ext_sizes_equal(t->sizes, SW_EXT_SIZES(sw_ext_backend))) {
        PyErr_SetString(PyExc_RuntimeError, "shardwise._cuda was built from other sources than shardwise._core: "
                        "rebuild the package");
        return NULL;
    }
    return t;
}

int sw_py_backend_spec(const char *name, int ndev, PyObject *gpus, long long workspace, sw_py_backend *spec) {
    memset(spec, 0, sizeof *spec);
    spec->opt.ndev = ndev;
    if (workspace < 0) {
        PyErr_SetString(PyExc_ValueError, "workspace must be >= 0 bytes");
        return -1;
    }
    spec->opt.workspace_bytes = workspace;
    if (strcmp(name, "cpu") == 0) {
        spec->kind = SW_PY_BACKEND_CPU;
    } else if (strcmp(name, "record") == 0) {
        spec->kind = SW_PY_BACKEND_RECORD;
    } else if (strcmp(name, "cuda") == 0) {
        spec->kind = SW_PY_BACKEND_EXT;
        spec->ext = cuda_table();
        if (!spec->ext) {
            return -1;
        }
    } else {
        PyErr_Format(PyExc_ValueError, "unknown backend %s (cpu, cuda)", name);
        return -1;
    }
    if (gpus && gpus != Py_None) {
        if (int_list(gpus, ndev, "gpus (one GPU per logical device)", &spec->gpu) < 0) {
            return -1;
        }
        spec->opt.gpu = spec->gpu;
    }
    return 0;
}

sw_status sw_py_backend_make(const sw_py_backend *spec, int threads, int jitter_us, sw_backend **out) {
    switch (spec->kind) {
    case SW_PY_BACKEND_CPU:
        return sw_backend_cpu_new(spec->opt.ndev, threads, jitter_us, out);
    case SW_PY_BACKEND_RECORD:
        return sw_backend_record_new(spec->opt.ndev, out);
    default:
        return spec->ext->backend_new(sw_core_api_get(), &spec->opt, out);
    }
}

void sw_py_backend_spec_free(sw_py_backend *spec) {
    PyMem_Free(spec->gpu);
    spec->gpu = NULL;
}

/* ------------------------------------------------------------------ host-side planning, for tests */
static PyObject *list_of_ints(const int *v, int n) {
    PyObject *l = PyList_New(n);
    for (int k = 0; l && k < n; k++) {
        PyObject *x = PyLong_FromLong(v[k]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, x);
    }
    return l;
}

static PyObject *gpu_map(PyObject *self, PyObject *args) {
    (void)self;
    int ndev, ngpus;
    if (!PyArg_ParseTuple(args, "ii", &ndev, &ngpus)) {
        return NULL;
    }
    if (ndev > SW_MAX_DEVICES) {
        return PyErr_Format(PyExc_ValueError, "at most %d logical devices", SW_MAX_DEVICES);
    }
    int *out = PyMem_Calloc((size_t)(ndev > 0 ? ndev : 1), sizeof *out);
    if (!out) {
        return PyErr_NoMemory();
    }
    sw_status s = sw_gpu_map(ndev, ngpus, out);
    PyObject *r = s == SW_OK ? list_of_ints(out, ndev) : sw_py_raise(s);
    PyMem_Free(out);
    return r;
}

static PyObject *gpu_route(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *gpu_seq, *peer_seq;
    int a, b;
    if (!PyArg_ParseTuple(args, "OiiO", &gpu_seq, &a, &b, &peer_seq)) {
        return NULL;
    }
    Py_ssize_t ndev = PySequence_Size(gpu_seq), np = PySequence_Size(peer_seq);
    if (ndev < 0 || np < 0) {
        return NULL;
    }
    int *gpu = NULL, *peer = NULL, ngpus = 0;
    while ((Py_ssize_t)ngpus * ngpus < np) {
        ngpus++;
    }
    PyObject *r = NULL;
    if ((Py_ssize_t)ngpus * ngpus != np || ndev == 0 || ndev > SW_MAX_DEVICES) {
        PyErr_SetString(PyExc_ValueError, "gpu_route(gpu_of, a, b, peer): peer is a flattened square 0/1 matrix");
    } else if (int_list(gpu_seq, (int)ndev, "gpu_of", &gpu) == 0 && int_list(peer_seq, (int)np, "peer", &peer) == 0) {
        sw_status s = sw_gpu_map_check((int)ndev, ngpus, gpu);
        if (s != SW_OK) {
            sw_py_raise(s);
        } else if (a < 0 || b < 0 || a >= ndev || b >= ndev) {
            PyErr_SetString(PyExc_ValueError, "gpu_route: no such logical device");
        } else {
            uint8_t *p = PyMem_Calloc((size_t)np, 1);
            if (!p) {
                PyErr_NoMemory();
            } else {
                for (Py_ssize_t k = 0; k < np; k++) {
                    p[k] = peer[k] != 0;
                }
                r = PyLong_FromLong(sw_gpu_route_of(gpu, a, b, p, ngpus));
                PyMem_Free(p);
            }
        }
    }
    PyMem_Free(gpu);
    PyMem_Free(peer);
    return r;
}

static PyObject *gpu_priorities(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *gs, *ps;
    int least, greatest;
    if (!PyArg_ParseTuple(args, "OOii", &gs, &ps, &least, &greatest)) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(gs);
    if (n < 0 || n > 1 << 20) {
        return n < 0 ? NULL : PyErr_Format(PyExc_ValueError, "too many streams");
    }
    int *g = NULL, *p = NULL, *out = PyMem_Calloc((size_t)n + 1, sizeof *out);
    PyObject *r = NULL;
    if (!out) {
        PyErr_NoMemory();
    } else if (int_list(gs, (int)n, "stream_gpu", &g) == 0 && int_list(ps, (int)n, "priority", &p) == 0) {
        sw_status s = sw_gpu_priorities((int)n, g, p, least, greatest, out);
        r = s == SW_OK ? list_of_ints(out, (int)n) : sw_py_raise(s);
    }
    PyMem_Free(g);
    PyMem_Free(p);
    PyMem_Free(out);
    return r;
}

static PyObject *gpu_arena_layout(PyObject *self, PyObject *args) {
    (void)self;
    long long plan, workspace;
    int streams;
    if (!PyArg_ParseTuple(args, "LiL", &plan, &streams, &workspace)) {
        return NULL;
    }
    sw_gpu_arena a;
    sw_status s = sw_gpu_arena_layout(plan, streams, workspace, &a);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    return Py_BuildValue("(LLL)", (long long)a.workspace_offset, (long long)a.workspace_bytes, (long long)a.total);
}

static PyObject *gpu_window_dim(PyObject *self, PyObject *args) {
    (void)self;
    long long in_lo, in_n, out_lo, out_n, k, st, p;
    if (!PyArg_ParseTuple(args, "LLLLLLL", &in_lo, &in_n, &out_lo, &out_n, &k, &st, &p)) {
        return NULL;
    }
    const long long big = 1LL << 36;   /* the views' coordinate limit (csrc/cpu/view.h) */
    if (in_lo < -big || in_lo > big || out_lo < -big || out_lo > big || in_n > big || out_n > big || k > big ||
        st > big || p > big) {
        return PyErr_Format(PyExc_ValueError, "gpu_window_dim: values beyond 2^36");
    }
    sw_gpu_window_dim d;
    sw_status s = sw_gpu_window_dim_of(in_lo, in_n, out_lo, out_n, k, st, p, &d);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    return Py_BuildValue("(LLLLLLO)", (long long)d.need_lo, (long long)d.need_hi, (long long)d.skip,
                         (long long)d.used, (long long)d.pad_lo, (long long)d.pad_hi, d.direct ? Py_True : Py_False);
}

static PyObject *gpu_event_plan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ops, *streams, *ids, *sg;
    int ntasks;
    if (!PyArg_ParseTuple(args, "OOOiO", &ops, &streams, &ids, &ntasks, &sg)) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(ops), ns = PySequence_Size(sg);
    if (n < 0 || ns < 0) {
        return NULL;
    }
    if (ntasks < 0 || n > 1 << 24 || ns > 1 << 20) {
        return PyErr_Format(PyExc_ValueError, "gpu_event_plan: sizes out of range");
    }
    int *o = NULL, *st = NULL, *id = NULL, *gpu = NULL;
    int32_t *slot = PyMem_Calloc((size_t)ntasks + 1, sizeof *slot);
    sw_gpu_cmds l = {0};
    PyObject *r = NULL;
    if (!slot) {
        PyErr_NoMemory();
        goto done;
    }
    if (int_list(ops, (int)n, "ops", &o) < 0 || int_list(streams, (int)n, "streams", &st) < 0 ||
        int_list(ids, (int)n, "ids", &id) < 0 || int_list(sg, (int)ns, "stream_gpu", &gpu) < 0) {
        goto done;
    }
    sw_status s = SW_OK;
    for (Py_ssize_t k = 0; k < n && s == SW_OK; k++) {
        s = sw_gpu_cmds_push(&l, o[k], st[k], id[k]);
    }
    for (int t = 0; t < ntasks; t++) {
        slot[t] = -1;
    }
    int32_t nslots = 0;
    sw_gpu_event_stats stats;
    if (s == SW_OK) {
        s = sw_gpu_event_plan(&l, ntasks, gpu, (int)ns, slot, &nslots, &stats);
    }
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    PyObject *slots = list_of_ints(slot, ntasks);
    r = slots ? Py_BuildValue("(Niii)", slots, (int)stats.events, (int)stats.waits, (int)stats.cross_gpu_waits) : NULL;
done:
    sw_gpu_cmds_free(&l);
    PyMem_Free(o);
    PyMem_Free(st);
    PyMem_Free(id);
    PyMem_Free(gpu);
    PyMem_Free(slot);
    return r;
}

/* ------------------------------------------------------------------ capability */
/* supports_op(backend, attrs, out_rank) -> None, or why the backend cannot run the op: the
 * backend's own sw_backend_i.supports_op, asked before any backend exists (the Trainer asks it
 * for every op of a graph).  attrs: the op's dict (shardwise.train.runtime.op_attrs). */
static PyObject *supports_op(PyObject *self, PyObject *args) {
    (void)self;
    const char *name;
    PyObject *dict;
    int out_rank;
    if (!PyArg_ParseTuple(args, "sOi", &name, &dict, &out_rank)) {
        return NULL;
    }
    if (out_rank < 0 || out_rank > SW_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "out_rank must be in [0, %d]", SW_MAX_RANK);
        return NULL;
    }
    sw_op_attrs a;
    if (sw_py_parse_op_attrs(dict, 0, out_rank, &a) < 0) {
        return NULL;
    }
    const sw_backend_i *iface = NULL;
    if (strcmp(name, "cpu") == 0) {
        iface = sw_backend_cpu_iface();
    } else if (strcmp(name, "cuda") == 0) {
        const sw_ext_backend *t = cuda_table();
        if (!t) {
            return NULL;
        }
        iface = t->iface();
    } else if (strcmp(name, "record") != 0) {
        PyErr_Format(PyExc_ValueError, "unknown backend %s (cpu, cuda)", name);
        return NULL;
    }
    char why[256] = "";
    if (!iface || !iface->supports_op || iface->supports_op(a.type, &a, out_rank, why, sizeof why)) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(why);
}

static PyMethodDef gpu_plan_methods[] = {
    {"supports_op", supports_op, METH_VARARGS,
     "supports_op(backend, attrs, out_rank) -> None, or why the backend cannot run the op"},
    {"gpu_map", gpu_map, METH_VARARGS, "gpu_map(ndev, ngpus) -> [GPU of each logical device] (blocks)"},
    {"gpu_route", gpu_route, METH_VARARGS, "gpu_route(gpu_of, a, b, peer) -> 0 same GPU, 1 peer, 2 staged"},
    {"gpu_priorities", gpu_priorities, METH_VARARGS,
     "gpu_priorities(stream_gpu, priority, least, greatest) -> [CUDA priority of each stream]"},
    {"gpu_arena_layout", gpu_arena_layout, METH_VARARGS,
     "gpu_arena_layout(plan_bytes, streams, workspace) -> (workspace_offset, workspace_bytes, total)"},
    {"gpu_window_dim", gpu_window_dim, METH_VARARGS,
     "gpu_window_dim(in_lo, in_n, out_lo, out_n, k, s, p) -> (need_lo, need_hi, skip, used, pad_lo, pad_hi)"},
    {"gpu_event_plan", gpu_event_plan, METH_VARARGS,
     "gpu_event_plan(ops, streams, ids, ntasks, stream_gpu) -> (slot per task, events, waits, cross-GPU waits)"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_gpu_plan(PyObject *module) { return PyModule_AddFunctions(module, gpu_plan_methods); }
