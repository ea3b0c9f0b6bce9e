/* runtime_internal.h -- the body of a runtime (runtime.h), for the executor (exec/) and the
 * Python bindings that report on it (py/).  Backends never include it: they ask through the
 * functions of runtime.h, so the runtime may change its insides without a backend noticing. */
#ifndef SHARDWISE_EXEC_RUNTIME_INTERNAL_H
#define SHARDWISE_EXEC_RUNTIME_INTERNAL_H

#include "messages.h"  /* sw_messages: one rank of several processes */
#include "runtime.h"

struct sw_runtime {
    sw_task_graph g;
    sw_memory_plan mp;
    int ndev, nops;
    sw_rt_op *ops;
    sw_op_attrs *attrs;
    int64_t batch;                /* N: the loss is the sum over loss tasks / N */
    void **arena;                 /* ndev */
    void **ptr;                   /* nbuffers: each buffer's address in its arena */
    uint8_t *first_accumulate;    /* ntasks: the first accumulate into its gradient (copies or zeroes) */
    uint8_t *in_list[SW_NLISTS];  /* ntasks: the task runs in that list */
    /* nbuffers: updates applied to each parameter slice's first state buffer (0 elsewhere):
     * SGD's momentum is started when > 0, and it is Adam's step count (torch's state['step']) */
    int64_t *updates;
    int optimizer_state;          /* state buffers per parameter slice (the problem's at lowering) */
    double *loss_sums;            /* ntasks (pipeline x ntasks once pipelined): per loss task of each iteration,
                                     its sum of -log p this step */
    int64_t *task_ns;             /* 2 ntasks (2 pipeline x ntasks once pipelined): each task's start and end
                                     in the last launch (ns, monotonic clock); task T is iteration T / ntasks's */
    int pipeline;                 /* steps SW_LIST_PIPELINE runs back to back (0: not recorded; pipeline.c) */
    int *backend_stream;          /* nstreams: the backend's id of each stream */
    int64_t step_ns[2];           /* the last step's start and end (ns, same clock) */
    sw_backend *backend;
    int32_t nstreams;             /* the streams tasks run on: a schedule's, or one per device */
    int32_t *stream;              /* ntasks: each task's stream */
    int32_t *stream_device;       /* nstreams */
    int32_t *stream_priority;     /* nstreams: higher runs first among a device's ready streams */
    int several_streams;          /* some device has more than one stream */
    int64_t arena_allocations;    /* arenas allocated (once, at creation) */
    int reuse_memory;             /* buffers share memory by lifetime (0: each has its own) */
    void **host_region;           /* ndev: each device's host region (its offloaded feature maps), or NULL */
    sw_messages *messages;        /* one rank of several processes (a split lowering), else NULL */
    int32_t *device_rank;         /* ndev: each device's rank (NULL: one process, every device here) */
    int rank_me;                  /* this process's rank (0: one process) */
};

/* Launch list `list` (`copies` iterations: args has one entry each) on the backend, timed in step_ns;
 * for one rank of several, its receives posted first and its sends and loss sums finished after
 * (exec/messages.h).  Shared by a step (executor.c) and steps back to back (pipeline.c). */
sw_status sw_runtime_launch(sw_runtime *rt, int list, const sw_step_args *args, int copies);

#endif /* SHARDWISE_EXEC_RUNTIME_INTERNAL_H */
