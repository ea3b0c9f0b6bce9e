/* runtime_steps_py.c -- the Runtime's steps back to back (csrc/exec/pipeline.c) from Python.
 *
 *   rt.pipeline(k)                        # record k training steps back to back (once per runtime)
 *   losses = rt.steps_back_to_back([(inputs, labels, kind, lr, weight_decay, momentum, dampening,
 *                                    nesterov, beta1, beta2, eps), ...])   # k entries, one per step
 *
 * Each entry is what Runtime.step takes, for its own step (its minibatch, its optimizer values).
 * Every minibatch is checked (ValueError naming the step) before any task runs; the GIL is
 * released once for the k steps.
 */
#include "problem_py.h"  /* CPython and NumPy C API */
#include "runtime_py.h"

#include "pyerr.h"        /* sw_py_raise */
#include "step_inputs.h"  /* parse_inputs, inputs_free */
#include "../exec/runtime_internal.h"  /* struct sw_runtime: the bindings report on its insides */

PyObject *Runtime_pipeline(RuntimeObject *self, PyObject *arg) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (k < 2 || k > SW_MAX_PIPELINE) {
        return PyErr_Format(PyExc_ValueError, "steps back to back: 2 .. %d steps, got %ld", SW_MAX_PIPELINE, k);
    }
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_runtime_pipeline(self->rt, (int)k);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

static void free_all(step_inputs *in, int n) {
    for (int i = 0; i < n; i++) {
        inputs_free(&in[i]);
    }
    PyMem_Free(in);
}

PyObject *Runtime_steps_back_to_back(RuntimeObject *self, PyObject *arg) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    int k = self->rt->pipeline;
    if (k < 2) {
        PyErr_SetString(PyExc_ValueError, "no steps back to back are recorded on this runtime: call pipeline(k)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "steps_back_to_back takes a list of step arguments");
    if (!seq) {
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(seq) != k) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "this runtime runs %d steps back to back, got %zd", k,
                            PySequence_Fast_GET_SIZE(seq));
    }
    step_inputs *in = PyMem_Calloc((size_t)k, sizeof *in);
    sw_step_args *args = PyMem_Calloc((size_t)k, sizeof *args);
    double *loss = PyMem_Calloc((size_t)k, sizeof *loss);
    PyObject *out = NULL;
    int parsed = 0;
    if (!in || !args || !loss) {
        PyErr_NoMemory();
        goto done;
    }
    for (; parsed < k; parsed++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, parsed), *inputs, *labels;
        sw_optimizer o = {0};
        if (!PyTuple_Check(item) ||
            !PyArg_ParseTuple(item, "OOiddddpddd", &inputs, &labels, &o.kind, &o.lr, &o.weight_decay, &o.momentum,
                              &o.dampening, &o.nesterov, &o.beta1, &o.beta2, &o.eps)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "each step is a tuple (inputs, labels, kind, lr, weight_decay, "
                                "momentum, dampening, nesterov, beta1, beta2, eps)");
            }
            goto done;
        }
        if (parse_inputs(self->rt, inputs, labels, &in[parsed]) < 0) {
            parsed++;   /* inputs_free it too */
            goto done;
        }
        args[parsed] = (sw_step_args){in[parsed].inputs, in[parsed].labels, o, SW_BN_UPDATE, self->steps + parsed};
    }
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_runtime_steps(self->rt, k, args, loss);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    self->steps += k;
    out = PyList_New(k);
    for (int i = 0; out && i < k; i++) {
        PyObject *x = PyFloat_FromDouble(loss[i]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
done:
    if (in) {
        free_all(in, parsed);
    }
    PyMem_Free(args);
    PyMem_Free(loss);
    Py_DECREF(seq);
    return out;
}
