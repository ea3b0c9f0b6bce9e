/* attrs_py.h -- op attributes from Python: one dict per op (shardwise.train.runtime.op_attrs)
 * read into the typed records of csrc/exec/op_attrs.h (attrs_py.c). */
#ifndef SHARDWISE_PY_ATTRS_PY_H
#define SHARDWISE_PY_ATTRS_PY_H

#include <Python.h>

#include "../exec/op_attrs.h"  /* sw_op_attrs */

/* One record per op from `seq`, a sequence of nops dicts {"kind": name, "name": the op's name
 * (for messages), and the attributes its record takes (op_attrs.h)}; each record is checked
 * (sw_op_attrs_check) against out_rank[i].  0 with *out (PyMem_Free it), or -1 with a
 * ValueError / TypeError naming the op and the attribute. */
int sw_py_parse_attrs(PyObject *seq, int nops, const int *out_rank, sw_op_attrs **out);
/* One record from one dict (the op at index `op` of rank out_rank), checked; 0, or -1 with
 * an exception. */
int sw_py_parse_op_attrs(PyObject *dict, int op, int out_rank, sw_op_attrs *a);

#endif /* SHARDWISE_PY_ATTRS_PY_H */
