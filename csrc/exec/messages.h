/* messages.h -- a runtime that is one rank of a job of several processes (exec/messages.c).
 *
 * A task graph split over ranks (graph/ranks.c) has a send and a recv task for every copy
 * between two ranks' devices.  A rank's runtime runs only its own devices' tasks; its messages
 * travel through the job's communicator (comm.h's sw_comm_i), each through a staging buffer of
 * its own allocated when the runtime is built (host memory, outside the arenas: a message in
 * flight must not share bytes the memory plan gives to later buffers):
 *
 *   step start   every recv of the list is posted (irecv into its staging buffer), so a send
 *                never waits for its receiver to reach the task;
 *   send task    packs its box of the source buffer into its staging buffer, then isend;
 *   recv task    runs once its message has arrived (the backend asks sw_runtime_arrived before
 *                starting it), and unpacks the staging buffer into its destination;
 *   step end     every send is waited for (with the timeout), then the loss tasks' sums are
 *                gathered from every rank, so each rank returns the one-process loss.
 *
 * Tags: the k-th message from rank a to rank b in task order has tag k (+ the iteration times
 * the pair's messages per iteration, for steps back to back); both ranks count the same.
 */
#ifndef SHARDWISE_EXEC_MESSAGES_H
#define SHARDWISE_EXEC_MESSAGES_H

#include "comm.h"     /* sw_comm_i, sw_comm, sw_comm_req */
#include "runtime.h"  /* sw_runtime */

typedef struct sw_messages sw_messages;

/* A rank's view of a split graph: built by the executor when the lowering is split. */
sw_status sw_messages_new(const sw_task_graph *g, int ndev, int nranks, const int32_t *rank,
                          const sw_comm_ext *comm, double timeout_s, sw_messages **out);
void sw_messages_free(sw_messages *m);
/* Does this rank run task t (its device is this rank's)? */
int sw_messages_local(const sw_messages *m, const sw_task *t);
/* Staging buffers for `copies` iterations of every local message (grown once for steps back to
 * back; nothing runs meanwhile). */
sw_status sw_messages_reserve(sw_messages *m, int copies);
/* Before a launch of list `list` (iterations `copies`): post every recv of the list. */
sw_status sw_messages_post(sw_messages *m, const sw_runtime *rt, int list, int copies);
/* After a successful launch: wait for every send, then merge the loss tasks' sums (ntasks per
 * iteration, `copies` iterations) over the ranks. */
sw_status sw_messages_finish(sw_messages *m, const sw_task_graph *g, double *loss_sums, int copies);
/* A launch failed: messages may be in flight into staging buffers, so the runtime cannot run
 * again, and its staging buffers are never freed (MPI may still write into them). */
void sw_messages_broken(sw_messages *m);
int sw_messages_is_broken(const sw_messages *m);

#endif /* SHARDWISE_EXEC_MESSAGES_H */
