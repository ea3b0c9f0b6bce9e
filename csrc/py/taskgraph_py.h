/* taskgraph_py.h -- the Python TaskGraph object (taskgraph_py.c): one plan lowered once.
 *
 * A TaskGraph owns one sw_lowering (graph/lowering.h) and holds its Problem.  Its pass methods
 * live with the Problem methods they replace (memplan_py.c, simulate_py.c, schedule_py.c,
 * swap_py.c, runtime_py.c): each Problem method that takes a plan as arrays lowers it through
 * sw_py_lower_args and runs the same pass as the TaskGraph method does on its kept lowering.
 */
#ifndef SHARDWISE_TASKGRAPH_PY_H
#define SHARDWISE_TASKGRAPH_PY_H

#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */
#include "../mem/memplan.h"  /* sw_memory_plan */

typedef struct {
    PyObject_HEAD
    ProblemObject *problem;   /* strong reference: the problem it was lowered from */
    const sw_problem *p;      /* problem->p at lowering, and problem->version then */
    unsigned long version;
    sw_lowering *l;
    int passes;   /* passes over l running with the GIL released: l's streams may not change meanwhile */
    /* l's memory plan at the runtime's alignment (SW_ARENA_ALIGN, reuse on) on its streams, made
     * by the first pass that needed it (memory_plan, task_order, simulate) and read by the others:
     * a search checks a plan's arenas and then replays it, and on a large machine each memory plan
     * is seconds (the 32-layer Llama's searched plan on 1,024 H100s, 4.8 M tasks: 2 s).  NULL
     * until then; dropped when l's streams or ranks change. */
    sw_memory_plan *kept_plan;
} TaskGraphObject;

/* Is obj a shardwise._core.TaskGraph? */
int sw_py_is_taskgraph(PyObject *obj);

/* Before a pass over self's lowering: 1 when its problem is still the one it was lowered from
 * (not re-initialised, options unchanged) and no other thread changes it; the problem then
 * counts one more reader until sw_py_tg_leave.  0 with an exception otherwise. */
int sw_py_tg_enter(TaskGraphObject *self);
void sw_py_tg_leave(TaskGraphObject *self);

/* The memory plan of l's graph as the runtime plans it (its alignment SW_ARENA_ALIGN, reuse on,
 * l's streams) into *out, a new plan for sw_memory_plan_free and free; on failure *out is NULL.
 * Needs no GIL. */
sw_status sw_py_runtime_memory_plan(const sw_lowering *l, sw_memory_plan **out);
/* self's kept memory plan (kept_plan), made now, with the GIL released, if there is none yet;
 * NULL with an exception when it cannot be made.  Between sw_py_tg_enter and sw_py_tg_leave. */
const sw_memory_plan *sw_py_tg_kept_memory_plan(TaskGraphObject *self);
/* Keep *made (a memory plan of self's graph at SW_ARENA_ALIGN on its streams, made by a pass)
 * as self's kept plan unless one is kept already (another thread's, the same plan); either
 * way *made is taken: it is freed, or owned by self.  With the GIL held. */
void sw_py_tg_keep_memory_plan(TaskGraphObject *self, sw_memory_plan *made);

/* A Problem method's plan (the four arrays), streams (None or three arrays) and swap (None or
 * three arrays) lowered once into *out, the GIL released while lowering; 0, or -1 with an
 * exception.  The caller has set self->busy (or counts itself among its readers) and frees *out
 * (sw_lowering_free) either way. */
int sw_py_lower_args(ProblemObject *self, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr, PyObject *devs,
                     PyObject *streams, PyObject *swap, sw_lowering **out);
/* The same with `recompute` (None, or the int32 ids of the ops whose feature maps are recomputed)
 * and its rings as `rings` says (sw_ring_detail). */
int sw_py_lower_args_recompute(ProblemObject *self, int rings, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr,
                               PyObject *devs, PyObject *streams, PyObject *swap, PyObject *recompute,
                               sw_lowering **out);

/* The pass methods of TaskGraph, one block per binding file */
/* lower_py.c: the graph's arrays (those Problem.lower returns) into dict d */
int sw_py_put_graph(PyObject *d, const sw_task_graph *g, int ndev);
/* memplan_py.c */
PyObject *sw_py_tg_memory_plan(TaskGraphObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_tg_task_order(TaskGraphObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_tg_check_memory_plan(TaskGraphObject *self, PyObject *args);
/* simulate_py.c */
PyObject *sw_py_tg_simulate(TaskGraphObject *self, PyObject *args, PyObject *kwds);
/* schedule_py.c */
PyObject *sw_py_tg_schedule(TaskGraphObject *self, PyObject *args, PyObject *kwds);
/* swap_py.c */
PyObject *sw_py_tg_swap_plan(TaskGraphObject *self, PyObject *args, PyObject *kwds);

/* taskgraph_py.c: the TaskGraph type and the module function lowerings() */
int sw_py_register_taskgraph(PyObject *module, PyTypeObject *problem_type);

#endif /* SHARDWISE_TASKGRAPH_PY_H */
