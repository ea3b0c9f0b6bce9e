/* comm_loopback.h -- sw_comm_i between the threads of one process: a TEST DOUBLE.
 *
 * Not a protocol between processes, and not for jobs: jobs use MPI (csrc/mpi/, shardwise._mpi).
 * It exists so that the runtime's multi-rank code (exec/messages.c, the CPU backend's arrival
 * polling) runs in one process -- under ThreadSanitizer and AddressSanitizer, which cannot run
 * the MPI path (the mpich wheel's library crashes in MPI_Init under libtsan), and without MPI at
 * all: each "rank" is a thread of the test holding one endpoint.
 *
 * The `size` endpoints share one mailbox (a mutex and a condition variable):
 *
 *   isend          copies the payload at once (buffered: the send completes before it returns)
 *                  into the receiver's first posted receive that matches (sender, tag), or into
 *                  the mailbox's queue of unexpected messages for the receiver;
 *   irecv          takes the first queued message from (peer, tag), else is posted; receives
 *                  match in the order they were posted, messages in the order they were sent
 *                  (comm.h: between one pair with one tag, the order sent);
 *   a size that differs from the receive's fails its wait (SW_ERR_VALUE naming peer, tag, bytes);
 *   test           never blocks; wait with a timeout: SW_ERR_TIMEOUT naming the request (kind,
 *                  peer, tag, bytes), which stays outstanding, as the MPI implementation does;
 *   collectives    every endpoint's n-th collective meets the others' n-th; the last to arrive
 *                  computes the result (allreduce_f32 sums in rank order: ((r0 + r1) + r2) ...)
 *                  and writes every endpoint's output;
 *   counters       bytes of completed sends (at isend) and receives (when matched), per peer;
 *   abort          prints why and calls abort(): the whole process, every "rank".
 *
 *   sw_comm *ep[4]; const sw_comm_i *ci = sw_comm_loopback_table();
 *   sw_comm_loopback_new(4, ep);          // endpoint r is rank r of 4; hand one to each thread
 *   ...                                   // ci->isend(ep[0], ...), ci->irecv(ep[1], ...), ci->wait
 *   for (r = 0; r < 4; r++) sw_comm_loopback_free(ep[r], NULL);   // the mailbox goes with the last
 */
#ifndef SHARDWISE_COMM_LOOPBACK_H
#define SHARDWISE_COMM_LOOPBACK_H

#include "comm.h"  /* sw_comm, sw_comm_i */

/* The largest tag: as the MPI standard's int tags allow. */
#define SW_LOOPBACK_MAX_TAG INT32_MAX

/* `size` (1 ..) endpoints of one mailbox: endpoints[r] is rank r. */
sw_status sw_comm_loopback_new(int size, sw_comm **endpoints);

/* The table of every loopback endpoint (name "loopback"). */
const sw_comm_i *sw_comm_loopback_table(void);

/* Close one endpoint: its posted receives are cancelled and its outputs of collectives not yet
 * complete are dropped (no other endpoint writes into its buffers afterwards); *unfinished (may
 * be NULL) counts its collectives left incomplete.  Other endpoints go on (their messages to it
 * are kept, unread; collectives it never joins time out).  The mailbox is freed with the last
 * endpoint.  Any thread; not concurrently with a call on the same endpoint. */
void sw_comm_loopback_free(sw_comm *c, int *unfinished);

#endif /* SHARDWISE_COMM_LOOPBACK_H */
