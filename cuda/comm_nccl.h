/* comm_nccl.h -- sw_comm_i (csrc/exec/comm.h) over NCCL, for buffers in GPU memory.
 *
 * One communicator per process and GPU: a rank drives one GPU, and the logical devices that
 * share that GPU stay in its process (they copy through the GPU's memory, not through NCCL).
 * Built into shardwise._cuda only where the build found nccl.h and libnccl.so.2 (the
 * nvidia-nccl-cu13 wheel of the [cuda] extra): SW_HAVE_NCCL=1, set by tools/build_cuda.py.
 *
 * The bootstrap is over another sw_comm_i (the MPI one, shardwise._mpi's capsule), so neither
 * this module nor the core links MPI: rank 0 makes the NCCL unique id (ncclGetUniqueId), the
 * bootstrap's allgather hands it to every rank (with each rank's word on whether its GPU can be
 * used, so that a rank without one fails every rank at once instead of leaving them waiting),
 * then ncclCommInitRank.  Without a bootstrap the communicator has one rank (no MPI needed).
 *
 * How the slots map onto NCCL (comm_nccl.c says more):
 *   isend/irecv      queued; the queue is handed to NCCL at the next test or wait, one run of
 *                    consecutive sends and receives as one ncclGroupStart/End (so a send and a
 *                    receive between two ranks, or to this rank itself, may be started in any
 *                    order), on the communicator's own CUDA stream
 *   allreduce_f32    ncclAllReduce (sum, in place); allgather: ncclAllGather of bytes
 *   test / wait      a CUDA event recorded after the request's NCCL call; wait polls it (and
 *                    NCCL's asynchronous error) until the deadline: SW_ERR_TIMEOUT naming the request
 *   counters         bytes of completed sends and receives per peer
 *   abort            ncclCommAbort, then the bootstrap's abort (MPI_Abort: every rank)
 * Tags: NCCL matches a pair's sends and receives in the order they are started, not by tag, so
 * both sides must start a pair's messages in the same order (the runtime's task order does);
 * the tag only names the request in messages.  The communicator is non-blocking
 * (ncclConfig_t.blocking = 0), so no call here waits on a peer without a deadline.
 */
#ifndef SHARDWISE_COMM_NCCL_H
#define SHARDWISE_COMM_NCCL_H

#include "exec/comm.h"  /* sw_comm, sw_comm_i, sw_comm_ext */

#ifndef SW_HAVE_NCCL   /* tools/build_cuda.py: 1 where it found nccl.h and libnccl.so.2, else 0 */
#define SW_HAVE_NCCL 0
#endif

/* Bytes of the record each rank contributes to the bootstrap's allgather: an int32 saying
 * whether its GPU can be used, an int32 device, and the 128-byte NCCL unique id (rank 0's). */
#define SW_NCCL_BOOT_BYTES 136

/* A communicator over the bootstrap's ranks (boot: another implementation's sw_comm_ext, NULL for
 * one rank), on GPU `device`.  Every rank calls it together; waits on the bootstrap and on
 * NCCL's initialisation give up after timeout_s (< 0: never).  The bootstrap must outlive the
 * communicator (abort calls its abort).  SW_ERR_VALUE for a bootstrap of another ABI or a device
 * out of range, SW_ERR_INTERNAL naming the failing ranks where a GPU or NCCL failed. */
sw_status sw_comm_nccl_new(const sw_comm_ext *boot, int device, double timeout_s, sw_comm **out,
                           const sw_comm_i **i);

/* Frees the communicator: ncclCommFinalize and ncclCommDestroy when every request completed,
 * ncclCommAbort when some did not (*unfinished, may be NULL, counts them). */
void sw_comm_nccl_free(sw_comm *c, int *unfinished);

/* The GPU and the CUDA stream the communicator's NCCL calls run on. */
int sw_comm_nccl_device(const sw_comm *c);
void *sw_comm_nccl_stream(const sw_comm *c);

/* ncclGetVersion of the libnccl loaded (major * 10000 + minor * 100 + patch). */
int sw_nccl_version(void);

#endif /* SHARDWISE_COMM_NCCL_H */
