/* comm_py.h -- a communicator (comm.h's sw_comm_i) as a Python object: the generic binding.
 *
 * Everything here goes through the sw_comm_i table, so each implementation module defines only
 * its type (name, constructor) and the few things the table has no slot for (sw_py_comm_ops):
 * shardwise._mpi's Comm (csrc/mpi/module.c) and shardwise._core's LoopbackComm (comm_loopback_py.c,
 * a test double).  The file is compiled into both modules (each its own copy: shardwise._mpi is
 * built with -fvisibility=hidden), so it uses nothing of the core but csrc/core/status.c.
 *
 *   .rank .size .local_rank .thread_level .initialized_here .max_tag .closed
 *   .isend(buffer, peer, tag) -> request        the buffer is held until the request completes
 *   .irecv(writable buffer, peer, tag) -> request
 *   .test(request) -> bool    .wait(request, timeout_s)   (TimeoutError names peer and tag)
 *   .allgather(bytes, timeout_s) -> bytes (size * len)    .allreduce_f32(float32 buffer, timeout_s)
 *   .counters() -> (sent per peer, received per peer)     .reset_counters()
 *   .abort(code, why)    .close() -> unfinished requests  ._capsule() -> sw_comm_ext (comm.h)
 *
 * Waits release the GIL.
 */
#ifndef SHARDWISE_COMM_PY_H
#define SHARDWISE_COMM_PY_H

#include <Python.h>

#include "../exec/comm.h"  /* sw_comm, sw_comm_i, sw_comm_ext */

/* What an implementation adds to its table. */
typedef struct {
    int (*thread_level)(const sw_comm *c);        /* 0 single .. 3 multiple (MPI's thread levels) */
    int (*initialized_here)(const sw_comm *c);    /* this module started the library */
    void (*free)(sw_comm *c, int *unfinished);    /* close: requests left that could not be cancelled */
} sw_py_comm_ops;

/* A buffer lent to a request in flight: released when the request is consumed. */
typedef struct {
    sw_comm_req req;
    Py_buffer view;
} sw_py_lent;

typedef struct {
    PyObject_HEAD
    sw_comm *comm;          /* NULL once closed */
    const sw_comm_i *i;
    const sw_py_comm_ops *ops;
    sw_py_lent *lent;
    Py_ssize_t nlent, caplent;
    sw_comm_ext ext;        /* what _capsule() points to */
} sw_py_comm;

/* The type's methods, attributes and deallocator (static or heap type alike). */
extern PyMethodDef sw_py_comm_methods[];
extern PyGetSetDef sw_py_comm_getset[];
void sw_py_comm_dealloc(PyObject *self);

/* Adopt communicator c (table i) into a freshly allocated object of the type. */
void sw_py_comm_adopt(sw_py_comm *self, sw_comm *c, const sw_comm_i *i, const sw_py_comm_ops *ops);

/* A status as TimeoutError / ValueError / MemoryError / RuntimeError with sw_last_error(); NULL. */
PyObject *sw_py_comm_raise(sw_status s);

/* shardwise._core only (comm_loopback_py.c): the module function loopback_comms(n), the loopback
 * communicator (exec/comm_loopback.h, a test double) as n objects of this binding. */
int sw_py_register_loopback(PyObject *module);

#endif /* SHARDWISE_COMM_PY_H */
