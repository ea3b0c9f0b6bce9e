/* comm.h -- sw_comm_i: how the runtime talks to the other processes of a training job.
 *
 * A plan that spans several processes ("ranks") moves a tensor between two ranks as a message:
 * the source rank sends a buffer, the destination rank receives it into one of the same size.
 * This header is the one place where the runtime meets the library that carries those
 * messages, as runtime.h's sw_backend_i is the one place it meets a device.  It is plain C:
 * no MPI or NCCL type crosses it, so the core (shardwise._core) compiles and links without
 * either, and an implementation lives in its own extension module:
 *
 *   csrc/mpi/   shardwise._mpi: MPI for CPU processes (the [mpi] extra: the mpich wheel)
 *   (later)     shardwise._cuda: NCCL for GPU buffers, bootstrapped over MPI
 *
 * Threads: every slot may be called from any thread at any time (the implementation
 * serializes what its library needs serialized: the MPI one owns every MPI call on one comm
 * thread per rank, and the other threads only queue requests to it).  A request handle is
 * consumed by the wait, or by the test, that reports it complete; the buffer a request names
 * belongs to the request until then and must stay allocated and untouched.
 *
 * Timeouts: MPI itself never times out (a rank that never sends leaves its peer's receive
 * waiting forever), so every wait here takes one.  A wait that runs out returns
 * SW_ERR_TIMEOUT with a message naming the outstanding request (its kind, peer, tag and
 * bytes); the request stays outstanding, and may be waited for again or the job aborted.
 *
 *   const sw_comm_i *ci; sw_comm *c;               // from an implementation's capsule
 *   sw_comm_req r;
 *   if (ci->rank(c) == 0) ci->isend(c, buf, 4096, 1, 7, &r);   // 4 KB to rank 1, tag 7
 *   else                  ci->irecv(c, buf, 4096, 0, 7, &r);   // from rank 0, tag 7
 *   sw_status s = ci->wait(c, r, 30.0);            // SW_ERR_TIMEOUT after 30 s: "... rank 0, tag 7"
 */
#ifndef SHARDWISE_COMM_H
#define SHARDWISE_COMM_H

#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t */

#include "../internal.h"  /* sw_status, SW_ERR_TIMEOUT */

/* Bumped when a slot is added, removed or changes meaning: a table of another version is refused. */
#define SW_COMM_ABI_VERSION 1
/* The PyCapsule an implementation module hands out (its Comm object's _capsule()): an sw_comm_ext. */
#define SW_COMM_CAPSULE "shardwise.comm"

/* One implementation's state (an MPI communicator and its comm thread, ...): opaque here. */
typedef struct sw_comm sw_comm;

/* A request in flight: >= 0, unique within its comm until a wait or test consumes it. */
typedef int64_t sw_comm_req;

typedef struct {
    int abi_version;    /* SW_COMM_ABI_VERSION */
    size_t struct_size; /* sizeof(sw_comm_i): a table from other sources is refused */
    const char *name;   /* "mpi" */

    /* The job: this process's rank in [0, size), the number of ranks, and the rank among the
     * ranks on this machine (to pick a GPU, later). */
    int (*rank)(const sw_comm *c);
    int (*size)(const sw_comm *c);
    int (*local_rank)(const sw_comm *c);

    /* Point to point: `bytes` bytes of `buf` to rank `peer`, matched by (sender, tag) on the
     * receiving side; messages between one pair with one tag arrive in the order sent.  The
     * tag is a task id, say, in [0, max_tag(c)].  A receive must name the exact size the
     * sender sends (a longer message fails the wait: SW_ERR_VALUE). */
    sw_status (*isend)(sw_comm *c, const void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req);
    sw_status (*irecv)(sw_comm *c, void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req);
    int64_t (*max_tag)(const sw_comm *c);

    /* Completion.  test: *done = 1 (the request consumed) or 0, never blocks.  wait: until the
     * request completes (consumed) or `timeout_s` seconds pass (< 0: no limit), then
     * SW_ERR_TIMEOUT naming the request, which stays outstanding. */
    sw_status (*test)(sw_comm *c, sw_comm_req req, int *done);
    sw_status (*wait)(sw_comm *c, sw_comm_req req, double timeout_s);

    /* Collectives over every rank, each a request like the point-to-point ones (so they too are
     * waited for with a timeout).  Every rank must start the same collectives in the same order.
     * Optional: an implementation may leave them NULL.
     *   allreduce_f32: buf (count) float32, in place: the element-wise sum over the ranks
     *                  (the library's order of summation: not bitwise the task graph's sums)
     *   allgather:     in (bytes) from every rank -> out (size * bytes), rank r's at r * bytes */
    sw_status (*allreduce_f32)(sw_comm *c, float *buf, int64_t count, sw_comm_req *req);
    sw_status (*allgather)(sw_comm *c, const void *in, size_t bytes, void *out, sw_comm_req *req);

    /* Bytes carried by completed point-to-point requests, per peer: sent[size], received[size]
     * (collectives are not counted: their bytes on the wire follow the library's algorithm). */
    void (*counters)(const sw_comm *c, int64_t *sent, int64_t *received);
    void (*reset_counters)(sw_comm *c);

    /* Ends the whole job, every rank, now (MPI_Abort): after `why` is printed on stderr with
     * this rank's number.  Never returns.  For a rank that cannot go on (a timeout, a plan
     * that differs from its peers'): a plain exit would leave the others waiting. */
    void (*abort)(sw_comm *c, int code, const char *why);
} sw_comm_i;

/* What an implementation module hands out in a capsule named SW_COMM_CAPSULE: its table and one
 * communicator.  The module's Comm object owns the communicator (and frees it: the table has no
 * free slot); whoever takes the capsule borrows it, and must keep the Comm object alive. */
typedef struct {
    int abi_version;          /* SW_COMM_ABI_VERSION */
    size_t table_size;        /* sizeof(sw_comm_i) */
    const sw_comm_i *i;
    sw_comm *comm;
} sw_comm_ext;

#endif /* SHARDWISE_COMM_H */
