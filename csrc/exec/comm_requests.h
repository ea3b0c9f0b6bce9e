/* comm_requests.h -- what the communicators written against comm.h share: the loopback (threads
 * of one process), MPI's (csrc/mpi) and NCCL's (cuda/).  Each keeps its requests in a table of
 * slots of its own kind (what it needs beside them differs: an MPI_Request, a CUDA event); what
 * they have in common is here, as static inline functions, because each lives in its own
 * extension module and links nothing of the others:
 *
 *   - the kinds of request and their names in messages;
 *   - a handle: (generation << 32) | slot, the generation bumped when the slot is taken, so that
 *     a stale handle of a reused slot is refused instead of naming another request;
 *   - the messages of a request that is not outstanding, that failed, that a wait ran out on, or
 *     that another thread consumed while it was waited for;
 *   - deadlines on CLOCK_MONOTONIC for the timed waits;
 *   - reading the bytes sent to and received from each rank.
 */
#ifndef SHARDWISE_COMM_REQUESTS_H
#define SHARDWISE_COMM_REQUESTS_H

#include <stdint.h>  /* int64_t, uint32_t */
#include <time.h>    /* clock_gettime, struct timespec */

#include "comm.h"

typedef enum { SW_COMM_SEND = 0, SW_COMM_RECV, SW_COMM_ALLREDUCE, SW_COMM_ALLGATHER } sw_comm_op;

static inline const char *sw_comm_op_name(int op) {
    static const char *const names[] = {"send", "receive", "allreduce", "allgather"};
    return op >= 0 && op <= SW_COMM_ALLGATHER ? names[op] : "request";
}

static inline sw_comm_req sw_comm_handle(int64_t slot, uint32_t gen) { return ((int64_t)gen << 32) | slot; }

/* The slot a handle names, when it lies in a table of `cap` slots (*gen: the generation the slot
 * must hold); -1 otherwise. */
static inline int64_t sw_comm_handle_slot(sw_comm_req req, int64_t cap, uint32_t *gen) {
    int64_t slot = req & 0xffffffff;
    *gen = (uint32_t)(req >> 32);
    return req >= 0 && slot < cap ? slot : -1;
}

/* The failure of naming a request that is not outstanding; `who` starts the message ("comm"). */
static inline sw_status sw_comm_not_outstanding(const char *who, sw_comm_req req) {
    return SW_FAIL(SW_ERR_VALUE, "%s: request %lld is not outstanding (completed and consumed, or never made)", who,
                   (long long)req);
}

/* The failure of a request: a send or receive names its peer, tag and bytes; a collective its
 * bytes.  `why`: what the library said. */
static inline sw_status sw_comm_failed(int rank, int op, int peer, int64_t tag, size_t bytes, const char *why) {
    if (peer >= 0) {
        return SW_FAIL(SW_ERR_VALUE, "comm: rank %d: the %s %s rank %d, tag %lld, %zu bytes failed: %s", rank,
                       sw_comm_op_name(op), op == SW_COMM_SEND ? "to" : "from", peer, (long long)tag, bytes, why);
    }
    return SW_FAIL(SW_ERR_VALUE, "comm: rank %d: the %s of %zu bytes failed: %s", rank, sw_comm_op_name(op), bytes,
                   why);
}

/* A wait that ran out: what it waited for, and the likely reasons (`size`: the ranks of a collective). */
static inline sw_status sw_comm_timed_out(int rank, double timeout_s, int op, int peer, int64_t tag, size_t bytes,
                                          int size) {
    if (peer >= 0) {
        return SW_FAIL(SW_ERR_TIMEOUT, "comm: rank %d waited %.3g s for the %s %s rank %d, tag %lld, %zu bytes, and it "
                       "has not completed (a lost rank, or ranks that run different plans?)", rank, timeout_s,
                       sw_comm_op_name(op), op == SW_COMM_SEND ? "to" : "from", peer, (long long)tag, bytes);
    }
    return SW_FAIL(SW_ERR_TIMEOUT, "comm: rank %d waited %.3g s for the %s of %zu bytes over %d ranks, and it has "
                   "not completed (a rank that never joined it?)", rank, timeout_s, sw_comm_op_name(op), bytes, size);
}

/* A request another thread's test or wait consumed while this one waited for it. */
static inline sw_status sw_comm_consumed_meanwhile(sw_comm_req req) {
    return SW_FAIL(SW_ERR_VALUE, "comm: request %lld was consumed by another thread while waited for", (long long)req);
}

/* *ts = now + seconds on CLOCK_MONOTONIC (the clock the waits' conditions are set to). */
static inline void sw_comm_deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(int64_t)seconds;
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec += 1;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The bytes sent to and received from each of `size` ranks, into sent and received (either may
 * be NULL).  The caller holds the lock its counters are written under. */
static inline void sw_comm_read_counters(int size, const int64_t *sent_in, const int64_t *received_in, int64_t *sent,
                                         int64_t *received) {
    for (int p = 0; p < size; p++) {
        if (sent) {
            sent[p] = sent_in[p];
        }
        if (received) {
            received[p] = received_in[p];
        }
    }
}

#endif /* SHARDWISE_COMM_REQUESTS_H */
