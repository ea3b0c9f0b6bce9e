/* step_inputs.h -- a step's minibatch and labels parsed from Python (step_inputs.c). */
#ifndef SHARDWISE_PY_STEP_INPUTS_H
#define SHARDWISE_PY_STEP_INPUTS_H

#include <Python.h>
#include <stdint.h>  /* int32_t */

#include "../exec/runtime.h"  /* sw_runtime */

/* Integer ids travel as float32, exact below 2^24 (csrc/cpu/embedding.c): SW_MAX_ID_BOUND,
 * exec/op_attrs.h (through runtime.h). */

typedef struct {
    const float **inputs;   /* per op: an input op's float32 minibatch, else NULL */
    PyObject **held;        /* the arrays holding them (references) */
    int n;
    int32_t *labels;        /* the loss's labels, checked to lie in 0..classes-1 */
} step_inputs;

/* One checked array per input op of `list` (None for the other ops) and the labels: 0, or
 * -1 with a Python exception set (ValueError naming what is wrong). */
int parse_inputs(const sw_runtime *rt, PyObject *list, PyObject *labels, step_inputs *in);
/* Release what parse_inputs took (also after it failed). */
void inputs_free(step_inputs *in);
/* Import this file's NumPy API table (once, at module import): 0, or -1 with an exception. */
int sw_py_step_inputs_init(void);

#endif /* SHARDWISE_PY_STEP_INPUTS_H */
