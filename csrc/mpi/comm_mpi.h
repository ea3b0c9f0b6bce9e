/* comm_mpi.h -- sw_comm_i over MPI (shardwise._mpi): one communicator per process.
 *
 * The only room that includes mpi.h.  sw_comm_mpi_new starts the rank's comm thread, which
 * initialises MPI (or adopts an MPI already initialised, by mpi4py say), and from then on owns
 * every MPI call of this module: the other threads put requests on its queue and wait on
 * their completion, and the comm thread posts them (MPI_Isend, MPI_Irecv, MPI_Iallreduce,
 * MPI_Iallgather) in queue order and drives them with MPI_Test.  So MPI needs only
 * MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE is asked for, for the sake of other MPI users of
 * the process), and a wait can give up after a timeout, which a blocking MPI call cannot.
 *
 *   sw_comm *c; const sw_comm_i *ci;
 *   sw_comm_mpi_new(&c, &ci);           // MPI_Init_thread on the comm thread, communicator dup'd
 *   ...                                  // ci->isend, ci->irecv, ci->wait (comm.h)
 *   sw_comm_mpi_free(c);                 // cancels receives left; MPI_Finalize if it initialised MPI
 */
#ifndef SHARDWISE_COMM_MPI_H
#define SHARDWISE_COMM_MPI_H

#include "../exec/comm.h"  /* sw_comm, sw_comm_i */

/* MPI's thread levels, as this module reports them (the library's own values differ between
 * ABIs: MPI_THREAD_MULTIPLE is 3 in MPICH's and Open MPI's, 4096 in the MPI-5 standard ABI). */
enum { SW_MPI_THREAD_SINGLE = 0, SW_MPI_THREAD_FUNNELED, SW_MPI_THREAD_SERIALIZED, SW_MPI_THREAD_MULTIPLE };

/* Initialise (or adopt) MPI and start the comm thread: the whole job's ranks call it together
 * (it duplicates MPI_COMM_WORLD, a collective).  *i is the table (comm.h).  Fails, with the
 * reason, when MPI cannot start or was initialised below MPI_THREAD_SERIALIZED. */
sw_status sw_comm_mpi_new(sw_comm **out, const sw_comm_i **i);

/* Stop the comm thread: outstanding receives are cancelled; MPI_Finalize runs when this
 * communicator initialised MPI and nothing it cannot cancel (a send, a collective) is left,
 * which *unfinished (may be NULL) counts.  MPI cannot be initialised again afterwards. */
void sw_comm_mpi_free(sw_comm *c, int *unfinished);

/* What MPI_Init_thread granted (SW_MPI_THREAD_*), and whether this communicator initialised
 * MPI (0: it adopted an MPI someone else initialised). */
int sw_comm_mpi_thread_level(const sw_comm *c);
int sw_comm_mpi_initialized_here(const sw_comm *c);

/* MPI_Get_library_version's text (one line, trailing space trimmed) and MPI_Get_version:
 * callable before MPI is initialised, so `shardwise info` never starts MPI. */
void sw_mpi_library_version(char *out, size_t cap, int *major, int *minor);

/* The implementation and version of mpi.h this module was compiled against ("MPICH 5.0.2",
 * "Open MPI 5.0.11"), which `shardwise info` prints beside the library loaded at run time. */
const char *sw_mpi_build_version(void);

#endif /* SHARDWISE_COMM_MPI_H */
