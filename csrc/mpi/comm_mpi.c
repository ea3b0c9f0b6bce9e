/* comm_mpi.c -- sw_comm_i over MPI: a request table, a queue, and the comm thread that owns MPI.
 *
 * Every MPI call of this module is made with the communicator's mutex held (MPI's nonblocking
 * calls return at once, so holding it is short), so they never overlap (MPI_THREAD_SERIALIZED
 * suffices).  The comm thread makes all of them but one: `test` MPI_Tests the request it is
 * asked about.  The caller's threads only touch the table under the same mutex:
 *
 *   isend/irecv/allreduce_f32/allgather   take a free slot, fill it (QUEUED), push its index
 *                                         on the queue, wake the comm thread, return a handle
 *   comm thread                           posts the queue in order (-> ACTIVE), MPI_Tests the
 *                                         active slots (-> DONE or FAILED), wakes the waiters
 *   test                                  MPI_Tests its slot if it is ACTIVE (-> DONE or FAILED),
 *                                         then consumes it if it is DONE or FAILED
 *   wait                                  sleeps on the `done` condition until the slot is DONE
 *                                         or FAILED (consume it), or until the deadline
 *
 * The comm thread polls while requests are active: MPI progresses a nonblocking request
 * only inside MPI calls.  It sleeps 20 us after a pass that posted or completed something,
 * doubling to 1 ms while nothing happens (2 cores shared by 4 ranks must not spin), and blocks
 * on `wake` when nothing is active.  A runtime worker waiting for a message polls `test`: its
 * MPI_Test completes the message as soon as MPI has it, instead of at the comm thread's next
 * pass (up to 1 ms later, after a quiet stretch: measured, a median 165-290 us from the end of
 * a send task to the start of its recv task on an idle receiver, LeNet-5 on 2 ranks).  A handle
 * is (generation << 32 | slot), so a stale handle of a reused slot is refused instead of
 * waiting on someone else's request.
 */
#define _POSIX_C_SOURCE 200809L  /* pthread_condattr_setclock, clock_gettime under -std=c11 */

#include <errno.h>    /* ETIMEDOUT */
#include <limits.h>   /* INT_MAX */
#include <pthread.h>  /* the comm thread, its mutex and conditions */
#include <stdio.h>    /* fprintf: abort's message */
#include <stdlib.h>   /* calloc, realloc */
#include <string.h>   /* memset, strlen */
#include <time.h>     /* clock_gettime: deadlines on CLOCK_MONOTONIC; nanosleep */
#include <unistd.h>   /* _exit */

#include <mpi.h>

#include "comm_mpi.h"
#include "../exec/comm_requests.h"  /* handles, op names, failure messages, deadlines, counters */

typedef enum { REQ_FREE = 0, REQ_QUEUED, REQ_ACTIVE, REQ_DONE, REQ_FAILED } req_state;

typedef struct {
    req_state state;
    sw_comm_op op;
    uint32_t gen;          /* bumped when the slot is taken: the handle's high half */
    int peer;              /* send, receive: the other rank (-1 for collectives) */
    int64_t tag;
    size_t bytes;          /* send, receive, allgather: bytes per rank; allreduce: count * 4 */
    const void *in;        /* send, allgather: what goes out */
    void *out;             /* receive, allreduce (in place), allgather (size * bytes) */
    MPI_Request mreq;
    char error[320];       /* FAILED: why, copied into the waiter's message */
} mpi_req;

struct sw_comm {
    MPI_Comm world;        /* a dup of MPI_COMM_WORLD with MPI_ERRORS_RETURN: errors come back as codes */
    int rank, size, local_rank;
    int level;             /* SW_MPI_THREAD_* granted */
    int initialized_here;  /* this module called MPI_Init_thread, so it calls MPI_Finalize */
    int64_t tag_ub;        /* MPI_TAG_UB: the largest tag */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* the comm thread: work queued, or stop */
    pthread_cond_t done;   /* waiters: a request completed, or the comm thread started */
    int started;           /* the comm thread finished initialising: 1 ok, -1 failed */
    int stopping;
    int unfinished;        /* at stop: requests neither completed nor cancellable */
    char start_error[512];

    mpi_req *reqs;         /* cap slots */
    int cap;
    int *queue;            /* slot indices QUEUED, in order; cap entries suffice */
    int nqueue;
    int nactive;
    int64_t *sent, *received;  /* size: bytes of completed sends and receives per peer */
};

/* ---------------------------------------------------------------- helpers */

static void mpi_error_text(int code, char *out, size_t cap) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
        snprintf(text, sizeof text, "MPI error %d", code);
    }
    snprintf(out, cap, "%.200s", text);   /* the first 200 characters say what went wrong */
}

static int level_of(int provided) {
    if (provided == MPI_THREAD_MULTIPLE) {
        return SW_MPI_THREAD_MULTIPLE;
    }
    if (provided == MPI_THREAD_SERIALIZED) {
        return SW_MPI_THREAD_SERIALIZED;
    }
    return provided == MPI_THREAD_FUNNELED ? SW_MPI_THREAD_FUNNELED : SW_MPI_THREAD_SINGLE;
}

/* The rank among the ranks that share this machine's memory (MPI_COMM_TYPE_SHARED). */
static int local_rank_of(MPI_Comm world) {
    MPI_Comm node;
    int r = 0;
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &r);
        MPI_Comm_free(&node);
    }
    return r;
}

/* ---------------------------------------------------------------- the comm thread */

/* MPI_Init_thread (or adopt), the communicator, rank, size, local rank.  0 or -1 with start_error. */
static int comm_start(sw_comm *c) {
    int inited = 0, provided = MPI_THREAD_SINGLE, rc;
    MPI_Initialized(&inited);
    if (inited) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) {
            snprintf(c->start_error, sizeof c->start_error, "MPI was finalised already in this process: it cannot "
                     "start again (sw.distributed.init() once per process)");
            return -1;
        }
        MPI_Query_thread(&provided);
    } else {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            char why[256];
            mpi_error_text(rc, why, sizeof why);
            snprintf(c->start_error, sizeof c->start_error, "MPI_Init_thread failed: %s", why);
            return -1;
        }
        c->initialized_here = 1;
    }
    c->level = level_of(provided);
    if (c->level < SW_MPI_THREAD_SERIALIZED) {
        snprintf(c->start_error, sizeof c->start_error, "MPI %s with thread level %s; shardwise's comm thread "
                 "needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (mpi4py: set mpi4py.rc.thread_level = "
                 "\"multiple\" before `from mpi4py import MPI`)", inited ? "was initialised" : "started",
                 c->level == SW_MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE");
        if (c->initialized_here) {
            MPI_Finalize();
        }
        return -1;
    }
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
    if (rc != MPI_SUCCESS) {
        char why[256];
        mpi_error_text(rc, why, sizeof why);
        snprintf(c->start_error, sizeof c->start_error, "MPI_Comm_dup(MPI_COMM_WORLD) failed: %s", why);
        return -1;
    }
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    c->local_rank = local_rank_of(c->world);
    void *ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    c->tag_ub = flag && ub ? (int64_t) * (int *)ub : 32767;  /* the standard's least upper bound */
    return 0;
}

/* Post one queued request.  Called with the mutex held, on the comm thread. */
static void post(sw_comm *c, mpi_req *r) {
    int rc = MPI_SUCCESS;
    switch (r->op) {
    case SW_COMM_SEND:
        rc = MPI_Isend(r->in, (int)r->bytes, MPI_BYTE, r->peer, (int)r->tag, c->world, &r->mreq);
        break;
    case SW_COMM_RECV:
        rc = MPI_Irecv(r->out, (int)r->bytes, MPI_BYTE, r->peer, (int)r->tag, c->world, &r->mreq);
        break;
    case SW_COMM_ALLREDUCE:
        rc = MPI_Iallreduce(MPI_IN_PLACE, r->out, (int)(r->bytes / sizeof(float)), MPI_FLOAT, MPI_SUM, c->world,
                            &r->mreq);
        break;
    case SW_COMM_ALLGATHER:
        rc = MPI_Iallgather(r->in, (int)r->bytes, MPI_BYTE, r->out, (int)r->bytes, MPI_BYTE, c->world, &r->mreq);
        break;
    }
    if (rc == MPI_SUCCESS) {
        r->state = REQ_ACTIVE;
        c->nactive++;
    } else {
        char why[256];
        mpi_error_text(rc, why, sizeof why);
        snprintf(r->error, sizeof r->error, "posting the %s failed: %s", sw_comm_op_name(r->op), why);
        r->state = REQ_FAILED;
    }
}

/* MPI_Test one active request; 1 when it completed (DONE or FAILED).  Mutex held, comm thread. */
static int progress(sw_comm *c, mpi_req *r) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(&r->mreq, &flag, &st);
    if (rc == MPI_SUCCESS && !flag) {
        return 0;
    }
    c->nactive--;
    if (rc != MPI_SUCCESS) {
        char why[256];
        mpi_error_text(rc, why, sizeof why);
        snprintf(r->error, sizeof r->error, "%s", why);
        r->state = REQ_FAILED;
        return 1;
    }
    if (r->op == SW_COMM_RECV) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != r->bytes) {
            snprintf(r->error, sizeof r->error, "the message was %d bytes, not the %zu bytes expected", got,
                     r->bytes);
            r->state = REQ_FAILED;
            return 1;
        }
        c->received[r->peer] += (int64_t)r->bytes;
    } else if (r->op == SW_COMM_SEND) {
        c->sent[r->peer] += (int64_t)r->bytes;
    }
    r->state = REQ_DONE;
    return 1;
}

/* At stop: cancel the receives still posted (a receive whose message never came would hold
 * MPI_Finalize); a send or a collective cannot be cancelled and is counted as unfinished. */
static void cancel_left(sw_comm *c) {
    for (int i = 0; i < c->cap; i++) {
        mpi_req *r = &c->reqs[i];
        if (r->state == REQ_QUEUED) {
            r->state = REQ_FAILED;
            snprintf(r->error, sizeof r->error, "the communicator was closed before the %s was posted",
                     sw_comm_op_name(r->op));
        } else if (r->state == REQ_ACTIVE && r->op == SW_COMM_RECV) {
            MPI_Cancel(&r->mreq);
            MPI_Wait(&r->mreq, MPI_STATUS_IGNORE);
            r->state = REQ_FAILED;
            snprintf(r->error, sizeof r->error, "the communicator was closed with the receive outstanding");
            c->nactive--;
        } else if (r->state == REQ_ACTIVE) {
            c->unfinished++;
        }
    }
}

static void *comm_thread(void *arg) {
    sw_comm *c = arg;
    int ok = comm_start(c) == 0;
    pthread_mutex_lock(&c->mu);
    c->started = ok ? 1 : -1;
    pthread_cond_broadcast(&c->done);
    if (!ok) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    double nap = 20e-6;
    while (!c->stopping) {
        int completed = 0, posted = c->nqueue;
        for (int q = 0; q < c->nqueue; q++) {
            post(c, &c->reqs[c->queue[q]]);
            completed += c->reqs[c->queue[q]].state == REQ_FAILED;
        }
        c->nqueue = 0;
        for (int i = 0; i < c->cap && c->nactive > 0; i++) {
            if (c->reqs[i].state == REQ_ACTIVE) {
                completed += progress(c, &c->reqs[i]);
            }
        }
        if (completed) {
            pthread_cond_broadcast(&c->done);
        }
        if (completed || posted) {   /* new work: its messages are likely to move soon */
            nap = 20e-6;
        }
        if (c->stopping || c->nqueue > 0) {
            continue;
        }
        if (c->nactive == 0) {
            pthread_cond_wait(&c->wake, &c->mu);
        } else {
            struct timespec ts;
            sw_comm_deadline_after(&ts, nap);
            pthread_cond_timedwait(&c->wake, &c->mu, &ts);
            nap = nap * 2 < 1e-3 ? nap * 2 : 1e-3;
        }
    }
    cancel_left(c);
    pthread_cond_broadcast(&c->done);
    int finalize = c->initialized_here && c->unfinished == 0;
    if (c->unfinished == 0) {
        MPI_Comm_free(&c->world);
    }
    pthread_mutex_unlock(&c->mu);
    if (finalize) {
        MPI_Finalize();
    }
    return NULL;
}

/* ---------------------------------------------------------------- the table's slots */

static int c_rank(const sw_comm *c) { return c->rank; }
static int c_size(const sw_comm *c) { return c->size; }
static int c_local_rank(const sw_comm *c) { return c->local_rank; }
static int64_t c_max_tag(const sw_comm *c) { return c->tag_ub; }

/* A free slot (growing the table), filled with `op` and queued; *req its handle.  Mutex held. */
static sw_status enqueue(sw_comm *c, const mpi_req *fill, sw_comm_req *req) {
    if (c->stopping) {
        return SW_FAIL(SW_ERR_VALUE, "comm: the communicator is closed");
    }
    int slot = -1;
    for (int i = 0; i < c->cap; i++) {
        if (c->reqs[i].state == REQ_FREE) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        int cap = c->cap ? c->cap * 2 : 64;
        mpi_req *reqs = realloc(c->reqs, (size_t)cap * sizeof *reqs);
        int *queue = reqs ? realloc(c->queue, (size_t)cap * sizeof *queue) : NULL;
        if (!reqs || !queue) {
            if (reqs) {
                c->reqs = reqs;   /* keep the grown table; the old capacity stays in use */
            }
            return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for %d requests", cap);
        }
        memset(reqs + c->cap, 0, (size_t)(cap - c->cap) * sizeof *reqs);
        c->reqs = reqs;
        c->queue = queue;
        slot = c->cap;
        c->cap = cap;
    }
    mpi_req *r = &c->reqs[slot];
    uint32_t gen = r->gen + 1;
    *r = *fill;
    r->gen = gen;
    r->state = REQ_QUEUED;
    c->queue[c->nqueue++] = slot;
    *req = sw_comm_handle(slot, gen);
    pthread_cond_signal(&c->wake);
    return SW_OK;
}

static sw_status check_p2p(const sw_comm *c, const char *what, const void *buf, size_t bytes, int peer,
                           int64_t tag) {
    if (peer < 0 || peer >= c->size) {
        return SW_FAIL(SW_ERR_VALUE, "comm: %s to/from rank %d, but the job has ranks 0..%d", what, peer, c->size - 1);
    }
    if (tag < 0 || tag > c->tag_ub) {
        return SW_FAIL(SW_ERR_VALUE, "comm: %s tag %lld is outside [0, %lld] (MPI_TAG_UB of this MPI)", what,
                       (long long)tag, (long long)c->tag_ub);
    }
    if (bytes > (size_t)INT_MAX) {
        return SW_FAIL(SW_ERR_VALUE, "comm: a %s of %zu bytes: messages are limited to %d bytes for now", what, bytes,
                       INT_MAX);
    }
    if (!buf && bytes) {
        return SW_FAIL(SW_ERR_VALUE, "comm: a %s of %zu bytes from a NULL buffer", what, bytes);
    }
    return SW_OK;
}

static sw_status c_isend(sw_comm *c, const void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "send", buf, bytes, peer, tag));
    mpi_req r = {.op = SW_COMM_SEND, .peer = peer, .tag = tag, .bytes = bytes, .in = buf};
    pthread_mutex_lock(&c->mu);
    sw_status s = enqueue(c, &r, req);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static sw_status c_irecv(sw_comm *c, void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "receive", buf, bytes, peer, tag));
    mpi_req r = {.op = SW_COMM_RECV, .peer = peer, .tag = tag, .bytes = bytes, .out = buf};
    pthread_mutex_lock(&c->mu);
    sw_status s = enqueue(c, &r, req);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static sw_status c_allreduce_f32(sw_comm *c, float *buf, int64_t count, sw_comm_req *req) {
    if (count < 0 || count > INT_MAX || (!buf && count)) {
        return SW_FAIL(SW_ERR_VALUE, "comm: allreduce of %lld floats (0..%d, from a buffer)", (long long)count, INT_MAX);
    }
    mpi_req r = {.op = SW_COMM_ALLREDUCE, .peer = -1, .tag = -1, .bytes = (size_t)count * sizeof(float), .out = buf};
    pthread_mutex_lock(&c->mu);
    sw_status s = enqueue(c, &r, req);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static sw_status c_allgather(sw_comm *c, const void *in, size_t bytes, void *out, sw_comm_req *req) {
    if (bytes > (size_t)INT_MAX || ((!in || !out) && bytes)) {
        return SW_FAIL(SW_ERR_VALUE, "comm: allgather of %zu bytes per rank (at most %d, from and to buffers)", bytes,
                       INT_MAX);
    }
    mpi_req r = {.op = SW_COMM_ALLGATHER, .peer = -1, .tag = -1, .bytes = bytes, .in = in, .out = out};
    pthread_mutex_lock(&c->mu);
    sw_status s = enqueue(c, &r, req);
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* The slot of a handle, or NULL with a message (a handle consumed already, or never made). */
static mpi_req *slot_of(sw_comm *c, sw_comm_req req) {
    uint32_t gen;
    int64_t slot = sw_comm_handle_slot(req, c->cap, &gen);
    if (slot < 0 || c->reqs[slot].gen != gen || c->reqs[slot].state == REQ_FREE) {
        sw_comm_not_outstanding("comm", req);
        return NULL;
    }
    return &c->reqs[slot];
}

/* Consume a completed slot: SW_OK, or the failure with the request named.  Mutex held. */
static sw_status consume(sw_comm *c, mpi_req *r) {
    sw_status s = r->state == REQ_FAILED ? sw_comm_failed(c->rank, r->op, r->peer, r->tag, r->bytes, r->error) : SW_OK;
    r->state = REQ_FREE;
    return s;
}

static sw_status c_test(sw_comm *c, sw_comm_req req, int *done) {
    pthread_mutex_lock(&c->mu);
    mpi_req *r = slot_of(c, req);
    sw_status s = r ? SW_OK : SW_ERR_VALUE;
    *done = 0;
    if (r && r->state == REQ_ACTIVE && progress(c, r)) {   /* the caller polls: complete it now */
        pthread_cond_broadcast(&c->done);
    }
    if (r && (r->state == REQ_DONE || r->state == REQ_FAILED)) {
        *done = 1;
        s = consume(c, r);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* How often a waiter tests its request itself (seconds). */
#define WAIT_POLL_S 50e-6

static sw_status c_wait(sw_comm *c, sw_comm_req req, double timeout_s) {
    struct timespec deadline;
    if (timeout_s >= 0) {
        sw_comm_deadline_after(&deadline, timeout_s);
    }
    pthread_mutex_lock(&c->mu);
    mpi_req *r = slot_of(c, req);
    if (!r) {
        pthread_mutex_unlock(&c->mu);
        return SW_ERR_VALUE;
    }
    int timed_out = 0;
    while ((r->state == REQ_QUEUED || r->state == REQ_ACTIVE) && !timed_out) {
        /* The waiter tests a posted request itself, every WAIT_POLL_S, as test() does: the comm
         * thread naps up to a millisecond between its passes once nothing completes, and a step's
         * end (its sends, the loss all-gather) should not wait for its next pass. */
        if (r->state == REQ_ACTIVE && progress(c, r)) {
            pthread_cond_broadcast(&c->done);
            break;
        }
        struct timespec soon;
        sw_comm_deadline_after(&soon, WAIT_POLL_S);
        int last = timeout_s >= 0 && (soon.tv_sec > deadline.tv_sec ||
                                      (soon.tv_sec == deadline.tv_sec && soon.tv_nsec >= deadline.tv_nsec));
        int rc = pthread_cond_timedwait(&c->done, &c->mu, last ? &deadline : &soon);
        timed_out = last && rc == ETIMEDOUT;
        uint32_t gen;   /* (the slot is in the table: slot_of found it, and tables only grow) */
        r = &c->reqs[sw_comm_handle_slot(req, c->cap, &gen)];   /* the table may have grown (moved) meanwhile */
        if (r->gen != gen || r->state == REQ_FREE) {
            pthread_mutex_unlock(&c->mu);   /* another thread's test or wait consumed it */
            return sw_comm_consumed_meanwhile(req);
        }
    }
    sw_status s;
    if (r->state == REQ_DONE || r->state == REQ_FAILED) {
        s = consume(c, r);
    } else {
        s = sw_comm_timed_out(c->rank, timeout_s, r->op, r->peer, r->tag, r->bytes, c->size);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

static void c_counters(const sw_comm *c, int64_t *sent, int64_t *received) {
    sw_comm *m = (sw_comm *)c;   /* the mutex, not the communicator, changes */
    pthread_mutex_lock(&m->mu);
    sw_comm_read_counters(c->size, c->sent, c->received, sent, received);
    pthread_mutex_unlock(&m->mu);
}

static void c_reset_counters(sw_comm *c) {
    pthread_mutex_lock(&c->mu);
    memset(c->sent, 0, (size_t)c->size * sizeof *c->sent);
    memset(c->received, 0, (size_t)c->size * sizeof *c->received);
    pthread_mutex_unlock(&c->mu);
}

/* Not through the comm thread: it may be the one that is stuck.  Under MPI_THREAD_SERIALIZED
 * this MPI call may overlap the comm thread's; the job ends either way. */
static void c_abort(sw_comm *c, int code, const char *why) {
    fprintf(stderr, "shardwise: rank %d of %d aborts the job (exit status %d): %s\n", c->rank, c->size, code,
            why ? why : "no reason given");
    fflush(stderr);
    /* MPICH's launcher forwards each rank's stderr through a pipe, and an abort can reach it
     * before the pipe's last lines do (seen: a traceback forwarded, this line lost).  A fifth of a
     * second on a path that ends the job lets those lines through first. */
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 200000000L}, NULL);
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1);
}

static const sw_comm_i MPI_COMM_TABLE = {
    .abi_version = SW_COMM_ABI_VERSION,
    .struct_size = sizeof(sw_comm_i),
    .name = "mpi",
    .rank = c_rank,
    .size = c_size,
    .local_rank = c_local_rank,
    .isend = c_isend,
    .irecv = c_irecv,
    .max_tag = c_max_tag,
    .test = c_test,
    .wait = c_wait,
    .allreduce_f32 = c_allreduce_f32,
    .allgather = c_allgather,
    .counters = c_counters,
    .reset_counters = c_reset_counters,
    .abort = c_abort,
};

/* ---------------------------------------------------------------- life cycle */

sw_status sw_comm_mpi_new(sw_comm **out, const sw_comm_i **i) {
    sw_comm *c = calloc(1, sizeof *c);
    if (!c) {
        return SW_FAIL(SW_ERR_NOMEM, "comm: no memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* deadlines immune to clock changes */
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->wake, &ca);
    pthread_cond_init(&c->done, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&c->thread, NULL, comm_thread, c) != 0) {
        free(c);
        return SW_FAIL(SW_ERR_INTERNAL, "comm: cannot start the comm thread");
    }
    pthread_mutex_lock(&c->mu);
    while (c->started == 0) {
        pthread_cond_wait(&c->done, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    if (c->started < 0) {
        pthread_join(c->thread, NULL);
        sw_status s = SW_FAIL(SW_ERR_VALUE, "%s", c->start_error);
        free(c);
        return s;
    }
    /* rank and size are set before `started` and never change: read without the mutex */
    c->sent = calloc((size_t)c->size, sizeof *c->sent);
    c->received = calloc((size_t)c->size, sizeof *c->received);
    if (!c->sent || !c->received) {
        int size = c->size;
        sw_comm_mpi_free(c, NULL);
        return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for %d ranks' counters", size);
    }
    *out = c;
    *i = &MPI_COMM_TABLE;
    return SW_OK;
}

void sw_comm_mpi_free(sw_comm *c, int *unfinished) {
    if (!c) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    if (unfinished) {
        *unfinished = c->unfinished;
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->done);
    free(c->reqs);
    free(c->queue);
    free(c->sent);
    free(c->received);
    free(c);
}

int sw_comm_mpi_thread_level(const sw_comm *c) { return c->level; }
int sw_comm_mpi_initialized_here(const sw_comm *c) { return c->initialized_here; }

void sw_mpi_library_version(char *out, size_t cap, int *major, int *minor) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    text[0] = '\0';
    MPI_Get_library_version(text, &len);
    MPI_Get_version(major, minor);
    /* the first line is the name and version (MPICH and Open MPI append build details) */
    size_t n = strcspn(text, "\n");
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == ',' || text[n - 1] == '\t')) {
        n--;
    }
    snprintf(out, cap, "%.*s", (int)n, text);
}

#define SW_STR_(x) #x
#define SW_STR(x) SW_STR_(x)

const char *sw_mpi_build_version(void) {
#if defined(MPICH_VERSION)
    return "MPICH " MPICH_VERSION;
#elif defined(OMPI_MAJOR_VERSION)
    return "Open MPI " SW_STR(OMPI_MAJOR_VERSION) "." SW_STR(OMPI_MINOR_VERSION) "." SW_STR(OMPI_RELEASE_VERSION);
#else
    return "MPI " SW_STR(MPI_VERSION) "." SW_STR(MPI_SUBVERSION);
#endif
}
