/* comm_nccl.c -- sw_comm_i over NCCL (comm_nccl.h): a request table, a queue, one CUDA stream.
 *
 * Every NCCL and CUDA call of a communicator is made with its mutex held, on whichever thread
 * called the slot (NCCL wants the calls on one communicator serialized; CUDA's current device
 * is per thread, so each entry sets it).  Requests move through:
 *
 *   QUEUED     isend/irecv/allreduce_f32/allgather took a slot and put it on the queue
 *   LAUNCHING  handed to NCCL, which returned ncclInProgress (a non-blocking communicator
 *              connecting to a peer, say): its event is recorded once NCCL says ncclSuccess
 *   ACTIVE     on the stream, behind a CUDA event recorded after it
 *   DONE       the event completed (test and wait consume it: counters, the slot freed)
 *   FAILED     NCCL or CUDA failed: the wait or test that consumes it returns the reason
 *
 * progress() hands the queue to NCCL at each test and wait: a run of consecutive sends and
 * receives as one group (ncclGroupStart/End), a collective alone, in queue order, and never
 * while NCCL is still starting the previous call (a non-blocking communicator takes no new
 * call until ncclCommGetAsyncError says ncclSuccess).  A wait polls: progress, the event,
 * NCCL's asynchronous error; it sleeps 20 us after the first polls, doubling to 1 ms.  A
 * handle is (generation << 32 | slot), as in comm_mpi.c.
 */
#define _POSIX_C_SOURCE 200809L  /* clock_gettime, nanosleep under -std=c11 */

#include "comm_nccl.h"

#if SW_HAVE_NCCL

#include <limits.h>   /* INT_MAX */
#include <pthread.h>  /* the communicator's mutex */
#include <stdint.h>   /* int64_t, uint32_t, INT64_MAX */
#include <stdio.h>    /* fprintf, snprintf */
#include <stdlib.h>   /* calloc, realloc, free */
#include <string.h>   /* memcpy, memset */
#include <time.h>     /* clock_gettime, nanosleep */
#include <unistd.h>   /* _exit */

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "exec/comm_requests.h"  /* handles, op names, counters */

typedef enum { R_FREE = 0, R_QUEUED, R_LAUNCHING, R_ACTIVE, R_DONE, R_FAILED } req_state;

typedef struct {
    req_state state;
    sw_comm_op op;
    uint32_t gen;          /* bumped when the slot is taken: the handle's high half */
    int peer;              /* send, receive: the other rank (-1 for collectives) */
    int64_t tag;           /* names the request; NCCL matches a pair's messages by order */
    size_t bytes;          /* send, receive, allgather: bytes per rank; allreduce: count * 4 */
    const void *in;        /* send, allgather */
    void *out;             /* receive, allreduce (in place), allgather (size * bytes) */
    cudaEvent_t ev;        /* made at the slot's first use, kept while the communicator lives */
    char error[320];       /* FAILED: why */
} nccl_req;

struct sw_comm {
    ncclComm_t nc;
    int rank, size, local_rank, device;
    cudaStream_t stream;
    const sw_comm_i *boot_i;   /* the bootstrap (NULL for a one-rank communicator made alone) */
    sw_comm *boot_c;
    pthread_mutex_t mu;
    int busy;                  /* the last NCCL call returned ncclInProgress: LAUNCHING requests wait */
    int broken;                /* NCCL failed: every request after it fails with broken_why */
    char broken_why[320];
    nccl_req *reqs;            /* cap slots */
    int cap;
    int *queue;                /* QUEUED slots in order (cap entries suffice) */
    int nqueue;
    int64_t *sent, *received;  /* size: bytes of completed sends and receives per peer */
};

/* ---------------------------------------------------------------- helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* "ncclInvalidUsage: invalid usage (the last error's text)" into out. */
static void nccl_text(ncclComm_t nc, ncclResult_t r, char *out, size_t cap) {
    const char *last = ncclGetLastError(nc);
    snprintf(out, cap, "%s%s%.200s%s", ncclGetErrorString(r), last && *last ? " (" : "", last ? last : "",
             last && *last ? ")" : "");
}

/* The request in words: "send to rank 1, tag 7, 4096 bytes", "allreduce of 4096 bytes over 2 ranks". */
static void describe(const sw_comm *c, const nccl_req *r, char *out, size_t cap) {
    if (r->peer >= 0) {
        snprintf(out, cap, "%s %s rank %d, tag %lld, %zu bytes", sw_comm_op_name(r->op),
                 r->op == SW_COMM_SEND ? "to" : "from", r->peer, (long long)r->tag, r->bytes);
    } else {
        snprintf(out, cap, "%s of %zu bytes over %d ranks", sw_comm_op_name(r->op), r->bytes, c->size);
    }
}

/* Every request not yet on the stream fails with `why`; from now on every new one too. */
static void break_comm(sw_comm *c, const char *why) {
    if (!c->broken) {
        c->broken = 1;
        snprintf(c->broken_why, sizeof c->broken_why, "%s", why);
    }
    for (int k = 0; k < c->cap; k++) {
        nccl_req *r = &c->reqs[k];
        if (r->state == R_QUEUED || r->state == R_LAUNCHING || r->state == R_ACTIVE) {
            snprintf(r->error, sizeof r->error, "%s", c->broken_why);
            r->state = R_FAILED;
        }
    }
    c->nqueue = 0;
    c->busy = 0;
}

/* NCCL said ncclSuccess for the call that started the LAUNCHING requests: record their events. */
static void launched(sw_comm *c) {
    for (int k = 0; k < c->cap; k++) {
        nccl_req *r = &c->reqs[k];
        if (r->state != R_LAUNCHING) {
            continue;
        }
        cudaError_t e = r->ev ? cudaSuccess : cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
        if (e == cudaSuccess) {
            e = cudaEventRecord(r->ev, c->stream);
        }
        if (e == cudaSuccess) {
            r->state = R_ACTIVE;
        } else {
            snprintf(r->error, sizeof r->error, "recording its CUDA event: %s", cudaGetErrorString(e));
            (void)cudaGetLastError();
            r->state = R_FAILED;
        }
    }
}

/* NCCL's state: ncclSuccess, ncclInProgress, or an error (then the communicator is broken). */
static ncclResult_t async_state(sw_comm *c) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->nc, &st);
    if (r != ncclSuccess) {
        st = r;
    }
    if (st != ncclSuccess && st != ncclInProgress) {
        char text[280], why[320];
        nccl_text(c->nc, st, text, sizeof text);
        snprintf(why, sizeof why, "NCCL failed on rank %d: %s", c->rank, text);
        break_comm(c, why);
    }
    return st;
}

/* Hand the queue to NCCL as far as it takes it.  Mutex held, device set. */
static void progress(sw_comm *c) {
    if (c->broken) {
        return;
    }
    if (c->busy) {
        ncclResult_t st = async_state(c);
        if (st != ncclSuccess) {
            return;   /* still in progress, or broken (break_comm cleared busy) */
        }
        c->busy = 0;
        launched(c);
    }
    while (!c->busy && c->nqueue > 0) {
        int n = 1;
        const nccl_req *head = &c->reqs[c->queue[0]];
        ncclResult_t r;
        if (head->op == SW_COMM_SEND || head->op == SW_COMM_RECV) {
            while (n < c->nqueue &&
                   (c->reqs[c->queue[n]].op == SW_COMM_SEND || c->reqs[c->queue[n]].op == SW_COMM_RECV)) {
                n++;
            }
            r = ncclGroupStart();
            for (int k = 0; k < n && (r == ncclSuccess || r == ncclInProgress); k++) {
                const nccl_req *q = &c->reqs[c->queue[k]];
                r = q->op == SW_COMM_SEND ? ncclSend(q->in, q->bytes, ncclUint8, q->peer, c->nc, c->stream)
                                     : ncclRecv(q->out, q->bytes, ncclUint8, q->peer, c->nc, c->stream);
            }
            ncclResult_t end = ncclGroupEnd();   /* always: a group started is ended, also after an error */
            if (r == ncclSuccess || r == ncclInProgress) {
                r = end;
            }
        } else if (head->op == SW_COMM_ALLREDUCE) {
            r = ncclAllReduce(head->out, head->out, head->bytes / sizeof(float), ncclFloat, ncclSum, c->nc, c->stream);
        } else {
            r = ncclAllGather(head->in, head->out, head->bytes, ncclUint8, c->nc, c->stream);
        }
        for (int k = 0; k < n; k++) {
            c->reqs[c->queue[k]].state = R_LAUNCHING;
        }
        memmove(c->queue, c->queue + n, (size_t)(c->nqueue - n) * sizeof *c->queue);
        c->nqueue -= n;
        if (r == ncclSuccess) {
            launched(c);
        } else if (r == ncclInProgress) {
            c->busy = 1;
        } else {
            char text[280], why[320];
            nccl_text(c->nc, r, text, sizeof text);
            snprintf(why, sizeof why, "NCCL refused the %s on rank %d: %s", sw_comm_op_name(head->op), c->rank, text);
            break_comm(c, why);
            return;
        }
    }
}

static sw_status set_device(sw_comm *c) {
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return SW_FAIL(SW_ERR_INTERNAL, "nccl comm: cudaSetDevice(%d): %s", c->device, cudaGetErrorString(e));
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- the slots */

static int c_rank(const sw_comm *c) { return c->rank; }
static int c_size(const sw_comm *c) { return c->size; }
static int c_local_rank(const sw_comm *c) { return c->local_rank; }
static int64_t c_max_tag(const sw_comm *c) {
    (void)c;
    return INT64_MAX;   /* tags only name requests here */
}

/* Take a slot for *proto and queue it.  Mutex held. */
static sw_status enqueue(sw_comm *c, const nccl_req *proto, sw_comm_req *req) {
    if (c->broken) {
        return SW_FAIL(SW_ERR_INTERNAL, "nccl comm: rank %d cannot start a %s: %s", c->rank, sw_comm_op_name(proto->op),
                       c->broken_why);
    }
    int slot = -1;
    for (int k = 0; k < c->cap; k++) {
        if (c->reqs[k].state == R_FREE) {
            slot = k;
            break;
        }
    }
    if (slot < 0) {
        int cap = c->cap ? c->cap * 2 : 64;
        nccl_req *reqs = realloc(c->reqs, (size_t)cap * sizeof *reqs);
        if (!reqs) {
            return SW_FAIL(SW_ERR_NOMEM, "nccl comm: no memory for %d requests", cap);
        }
        c->reqs = reqs;
        int *queue = realloc(c->queue, (size_t)cap * sizeof *queue);
        if (!queue) {
            return SW_FAIL(SW_ERR_NOMEM, "nccl comm: no memory for %d requests", cap);
        }
        c->queue = queue;
        memset(reqs + c->cap, 0, (size_t)(cap - c->cap) * sizeof *reqs);
        slot = c->cap;
        c->cap = cap;
    }
    nccl_req *r = &c->reqs[slot];
    uint32_t gen = (r->gen + 1) & 0x7fffffffu;
    cudaEvent_t ev = r->ev;
    *r = *proto;
    r->gen = gen;
    r->ev = ev;
    r->state = R_QUEUED;
    r->error[0] = 0;
    c->queue[c->nqueue++] = slot;
    *req = sw_comm_handle(slot, gen);
    return SW_OK;
}

static sw_status start(sw_comm *c, const nccl_req *proto, sw_comm_req *req) {
    pthread_mutex_lock(&c->mu);
    sw_status s = enqueue(c, proto, req);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static sw_status check_p2p(const sw_comm *c, const char *what, const void *buf, size_t bytes, int peer) {
    if (peer < 0 || peer >= c->size) {
        return SW_FAIL(SW_ERR_VALUE, "nccl comm: %s to rank %d of %d", what, peer, c->size);
    }
    if (!buf && bytes) {
        return SW_FAIL(SW_ERR_VALUE, "nccl comm: %s of %zu bytes from a NULL buffer", what, bytes);
    }
    return SW_OK;
}

static sw_status c_isend(sw_comm *c, const void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "send", buf, bytes, peer));
    nccl_req r = {.op = SW_COMM_SEND, .peer = peer, .tag = tag, .bytes = bytes, .in = buf};
    return start(c, &r, req);
}

static sw_status c_irecv(sw_comm *c, void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "receive", buf, bytes, peer));
    nccl_req r = {.op = SW_COMM_RECV, .peer = peer, .tag = tag, .bytes = bytes, .out = buf};
    return start(c, &r, req);
}

static sw_status c_allreduce_f32(sw_comm *c, float *buf, int64_t count, sw_comm_req *req) {
    if (count < 0 || (!buf && count)) {
        return SW_FAIL(SW_ERR_VALUE, "nccl comm: allreduce of %lld floats", (long long)count);
    }
    nccl_req r = {.op = SW_COMM_ALLREDUCE, .peer = -1, .tag = -1, .bytes = (size_t)count * sizeof(float), .out = buf};
    return start(c, &r, req);
}

static sw_status c_allgather(sw_comm *c, const void *in, size_t bytes, void *out, sw_comm_req *req) {
    if ((!in || !out) && bytes) {
        return SW_FAIL(SW_ERR_VALUE, "nccl comm: allgather of %zu bytes per rank needs both buffers", bytes);
    }
    nccl_req r = {.op = SW_COMM_ALLGATHER, .peer = -1, .tag = -1, .bytes = bytes, .in = in, .out = out};
    return start(c, &r, req);
}

static nccl_req *slot_of(sw_comm *c, sw_comm_req req) {
    uint32_t gen;
    int64_t slot = sw_comm_handle_slot(req, c->cap, &gen);
    if (slot < 0 || c->reqs[slot].gen != gen || c->reqs[slot].state == R_FREE) {
        sw_comm_not_outstanding("nccl comm", req);
        return NULL;
    }
    return &c->reqs[slot];
}

/* Consume a finished slot: SW_OK (counted), or its failure with the request named.  Mutex held. */
static sw_status consume(sw_comm *c, nccl_req *r) {
    sw_status s = SW_OK;
    if (r->state == R_FAILED) {
        char what[160];
        describe(c, r, what, sizeof what);
        s = SW_FAIL(SW_ERR_INTERNAL, "nccl comm: rank %d: the %s failed: %s", c->rank, what, r->error);
    } else if (r->op == SW_COMM_SEND) {
        c->sent[r->peer] += (int64_t)r->bytes;
    } else if (r->op == SW_COMM_RECV) {
        c->received[r->peer] += (int64_t)r->bytes;
    }
    r->state = R_FREE;
    return s;
}

/* One poll of a request: progress, then its event.  *done = 1 when it finished (then consumed,
 * the status its outcome).  Mutex held. */
static sw_status poll_req(sw_comm *c, nccl_req *r, int *done) {
    *done = 0;
    progress(c);
    if (r->state == R_ACTIVE) {
        cudaError_t e = cudaEventQuery(r->ev);
        if (e == cudaSuccess) {
            r->state = R_DONE;
        } else if (e == cudaErrorNotReady) {
            (void)async_state(c);   /* a peer's failure shows here, not in the event */
        } else {
            (void)cudaGetLastError();
            snprintf(r->error, sizeof r->error, "CUDA: %s", cudaGetErrorString(e));
            r->state = R_FAILED;
        }
    }
    if (r->state == R_DONE || r->state == R_FAILED) {
        *done = 1;
        return consume(c, r);
    }
    return SW_OK;
}

static sw_status c_test(sw_comm *c, sw_comm_req req, int *done) {
    *done = 0;
    pthread_mutex_lock(&c->mu);
    nccl_req *r = slot_of(c, req);
    sw_status s = r ? set_device(c) : SW_ERR_VALUE;
    if (s == SW_OK) {
        s = poll_req(c, r, done);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

static sw_status c_wait(sw_comm *c, sw_comm_req req, double timeout_s) {
    double deadline = timeout_s >= 0 ? now_s() + timeout_s : 0.0;
    long pause_us = 0;   /* the first polls do not sleep: a short message completes in microseconds */
    for (int polls = 0;; polls++) {
        pthread_mutex_lock(&c->mu);
        nccl_req *r = slot_of(c, req);   /* again each time: the table may have grown (moved) */
        if (!r) {
            pthread_mutex_unlock(&c->mu);
            return SW_ERR_VALUE;
        }
        int done = 0;
        sw_status s = set_device(c);
        if (s == SW_OK) {
            s = poll_req(c, r, &done);
        }
        if (s != SW_OK || done) {
            pthread_mutex_unlock(&c->mu);
            return s;
        }
        if (timeout_s >= 0 && now_s() >= deadline) {
            char what[160];
            describe(c, r, what, sizeof what);
            const char *where = r->state == R_QUEUED      ? "queued behind a call NCCL is still starting"
                              : r->state == R_LAUNCHING ? "NCCL is still starting it (connecting to the peer?)"
                                                         : "on the GPU's stream, not completed";
            s = SW_FAIL(SW_ERR_TIMEOUT, "nccl comm: rank %d waited %.3g s for the %s, and it has not completed "
                        "(%s; a lost rank, ranks that run different plans, or a pair's messages started in "
                        "different orders?)", c->rank, timeout_s, what, where);
            pthread_mutex_unlock(&c->mu);
            return s;
        }
        pthread_mutex_unlock(&c->mu);
        if (polls >= 100) {
            pause_us = pause_us ? (pause_us * 2 > 1000 ? 1000 : pause_us * 2) : 20;
            sleep_us(pause_us);
        }
    }
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

/* Without the mutex: the thread holding it may be the one that is stuck.  ncclCommAbort stops
 * this rank's kernels; the bootstrap's abort (MPI_Abort) ends every rank. */
static void c_abort(sw_comm *c, int code, const char *why) {
    fprintf(stderr, "[rank %d of %d] shardwise: aborting the job (NCCL): %s\n", c->rank, c->size,
            why ? why : "no reason given");
    fflush(stderr);
    (void)cudaSetDevice(c->device);
    (void)ncclCommAbort(c->nc);
    if (c->boot_i) {
        c->boot_i->abort(c->boot_c, code, why);
    }
    _exit(code ? code : 1);
}

static const sw_comm_i TABLE = {
    .abi_version = SW_COMM_ABI_VERSION,
    .struct_size = sizeof(sw_comm_i),
    .name = "nccl",
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

/* ---------------------------------------------------------------- the bootstrap */

typedef struct {
    int32_t ok;         /* 1: this rank's GPU can be used */
    int32_t device;
    ncclUniqueId id;    /* rank 0's is the one used */
} boot_record;
_Static_assert(sizeof(boot_record) == SW_NCCL_BOOT_BYTES, "the bootstrap record is 136 bytes");
_Static_assert(sizeof(ncclUniqueId) == 128, "NCCL's unique id is 128 bytes");

/* Every rank's record through the bootstrap (its allgather, else rank 0's sends to each rank:
 * then only rank 0's record reaches the others, and a rank without a GPU fails alone). */
static sw_status exchange(const sw_comm_ext *boot, const boot_record *mine, boot_record *all, double timeout_s) {
    const sw_comm_i *bi = boot->i;
    sw_comm *bc = boot->comm;
    int rank = bi->rank(bc), size = bi->size(bc);
    sw_comm_req req;
    sw_status s;
    if (bi->allgather) {
        s = bi->allgather(bc, mine, sizeof *mine, all, &req);
        if (s == SW_OK) {
            s = bi->wait(bc, req, timeout_s);
        }
        if (s != SW_OK) {
            return SW_FAIL(s, "nccl bootstrap: rank %d: the %s allgather of the NCCL id %s", rank, bi->name,
                           s == SW_ERR_TIMEOUT ? "timed out (a rank that did not call it?)" : "failed");
        }
        return SW_OK;
    }
    int64_t tag = bi->max_tag(bc);   /* the largest tag: one the runtime's tasks are unlikely to use first */
    for (int r = 0; r < size; r++) {
        all[r] = *mine;
    }
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            s = bi->isend(bc, mine, sizeof *mine, r, tag, &req);
            if (s == SW_OK) {
                s = bi->wait(bc, req, timeout_s);
            }
            if (s != SW_OK) {
                return SW_FAIL(s, "nccl bootstrap: sending the NCCL id to rank %d over %s failed", r, bi->name);
            }
        }
    } else {
        s = bi->irecv(bc, &all[0], sizeof all[0], 0, tag, &req);
        if (s == SW_OK) {
            s = bi->wait(bc, req, timeout_s);
        }
        if (s != SW_OK) {
            return SW_FAIL(s, "nccl bootstrap: rank %d: receiving the NCCL id from rank 0 over %s failed", rank,
                           bi->name);
        }
    }
    return SW_OK;
}

static void free_comm(sw_comm *c) {
    if (!c) {
        return;
    }
    for (int k = 0; k < c->cap; k++) {
        if (c->reqs[k].ev) {
            (void)cudaEventDestroy(c->reqs[k].ev);
        }
    }
    if (c->stream) {
        (void)cudaStreamDestroy(c->stream);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->reqs);
    free(c->queue);
    free(c->sent);
    free(c->received);
    free(c);
}

sw_status sw_comm_nccl_new(const sw_comm_ext *boot, int device, double timeout_s, sw_comm **out,
                           const sw_comm_i **i) {
    *out = NULL;
    *i = &TABLE;
    if (boot && (boot->abi_version != SW_COMM_ABI_VERSION || boot->table_size != sizeof(sw_comm_i) || !boot->i ||
                 boot->i->abi_version != SW_COMM_ABI_VERSION || boot->i->struct_size != sizeof(sw_comm_i))) {
        return SW_FAIL(SW_ERR_VALUE, "nccl bootstrap: the communicator given is of another comm ABI (version %d, "
                       "table of %zu bytes; this module's: version %d, %zu bytes): rebuild the package",
                       boot->abi_version, boot->table_size, SW_COMM_ABI_VERSION, sizeof(sw_comm_i));
    }
    int rank = boot ? boot->i->rank(boot->comm) : 0;
    int size = boot ? boot->i->size(boot->comm) : 1;
    int local_rank = boot ? boot->i->local_rank(boot->comm) : 0;

    /* this rank's GPU, and rank 0's id: each rank says whether it got that far */
    boot_record mine = {.ok = 1, .device = device};
    char why[400] = "";
    int ngpus = 0;
    cudaError_t e = cudaGetDeviceCount(&ngpus);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, sizeof why, "no usable GPU: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    } else if (device < 0 || device >= ngpus) {
        snprintf(why, sizeof why, "GPU %d does not exist (%d GPU%s seen)", device, ngpus, ngpus == 1 ? "" : "s");
    } else if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(NULL)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, sizeof why, "GPU %d cannot be used: %s", device, cudaGetErrorString(e));
    }
    if (!why[0] && rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&mine.id);
        if (r != ncclSuccess) {
            char text[280];
            nccl_text(NULL, r, text, sizeof text);
            snprintf(why, sizeof why, "ncclGetUniqueId: %s", text);
        }
    }
    mine.ok = why[0] ? 0 : 1;
    boot_record *all = calloc((size_t)size, sizeof *all);
    if (!all) {
        return SW_FAIL(SW_ERR_NOMEM, "nccl bootstrap: no memory for %d records", size);
    }
    if (boot) {
        sw_status s = exchange(boot, &mine, all, timeout_s);
        if (s != SW_OK) {
            free(all);
            return s;
        }
    } else {
        all[0] = mine;
    }
    char bad[200] = "";
    size_t used = 0;
    for (int r = 0; r < size && used < sizeof bad - 16; r++) {
        if (!all[r].ok) {
            used += (size_t)snprintf(bad + used, sizeof bad - used, "%s%d", used ? ", " : "", r);
        }
    }
    boot_record root = all[0];
    free(all);
    if (!mine.ok) {
        return SW_FAIL(SW_ERR_INTERNAL, "nccl bootstrap: rank %d: %s", rank, why);
    }
    if (bad[0]) {
        return SW_FAIL(SW_ERR_INTERNAL, "nccl bootstrap: rank %d: ranks %s could not use their GPU (or make the NCCL "
                       "id): no NCCL communicator is made (their own messages say why)", rank, bad);
    }

    sw_comm *c = calloc(1, sizeof *c);
    if (!c) {
        return SW_FAIL(SW_ERR_NOMEM, "nccl bootstrap: no memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->rank = rank;
    c->size = size;
    c->local_rank = local_rank;
    c->device = device;
    c->boot_i = boot ? boot->i : NULL;
    c->boot_c = boot ? boot->comm : NULL;
    c->sent = calloc((size_t)size, sizeof *c->sent);
    c->received = calloc((size_t)size, sizeof *c->received);
    if (!c->sent || !c->received) {
        free_comm(c);
        return SW_FAIL(SW_ERR_NOMEM, "nccl bootstrap: no memory");
    }
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->stream = NULL;
        free_comm(c);
        return SW_FAIL(SW_ERR_INTERNAL, "nccl bootstrap: rank %d: cudaStreamCreate on GPU %d: %s", rank, device,
                       cudaGetErrorString(e));
    }
    /* non-blocking: ncclCommInitRankConfig returns at once (ncclInProgress), and the poll below
     * gives up after the timeout instead of waiting forever for a rank that never comes */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, size, root.id, rank, &config);
    double deadline = now_s() + (timeout_s >= 0 ? timeout_s : 1e300);
    long pause_us = 20;
    while (c->nc && (r == ncclSuccess || r == ncclInProgress)) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(c->nc, &st);
        r = q != ncclSuccess ? q : st;
        if (r != ncclInProgress) {
            break;
        }
        if (now_s() >= deadline) {
            (void)ncclCommAbort(c->nc);
            c->nc = NULL;
            free_comm(c);
            return SW_FAIL(SW_ERR_TIMEOUT, "nccl bootstrap: rank %d waited %.3g s for ncclCommInitRank over %d ranks "
                           "(a rank that did not join, or no network path between the ranks?)", rank, timeout_s,
                           size);
        }
        sleep_us(pause_us);
        pause_us = pause_us * 2 > 10000 ? 10000 : pause_us * 2;
    }
    if (r == ncclSuccess && !c->nc) {
        r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        char text[280];
        nccl_text(c->nc, r, text, sizeof text);
        if (c->nc) {
            (void)ncclCommAbort(c->nc);
            c->nc = NULL;
        }
        free_comm(c);
        return SW_FAIL(SW_ERR_INTERNAL, "nccl bootstrap: rank %d: ncclCommInitRank over %d ranks on GPU %d: %s", rank,
                       size, device, text);
    }
    *out = c;
    return SW_OK;
}

void sw_comm_nccl_free(sw_comm *c, int *unfinished) {
    int left = 0;
    if (!c) {
        if (unfinished) {
            *unfinished = 0;
        }
        return;
    }
    pthread_mutex_lock(&c->mu);
    (void)cudaSetDevice(c->device);
    progress(c);
    for (int k = 0; k < c->cap; k++) {
        nccl_req *r = &c->reqs[k];
        if (r->state == R_ACTIVE && cudaEventQuery(r->ev) == cudaSuccess) {
            r->state = R_DONE;
        }
        (void)cudaGetLastError();
        left += r->state == R_QUEUED || r->state == R_LAUNCHING || r->state == R_ACTIVE;
    }
    int must_abort = left > 0 || c->broken;
    if (!must_abort) {
        /* flush NCCL's own work, then free it: non-blocking, so poll (10 s at most, then abort) */
        ncclResult_t r = ncclCommFinalize(c->nc);
        double deadline = now_s() + 10.0;
        while (r == ncclInProgress && now_s() < deadline) {
            ncclResult_t st = ncclSuccess;
            r = ncclCommGetAsyncError(c->nc, &st);
            if (r == ncclSuccess) {
                r = st;
            }
            if (r == ncclInProgress) {
                sleep_us(200);
            }
        }
        must_abort = r != ncclSuccess;
    }
    if (must_abort) {
        (void)ncclCommAbort(c->nc);
    } else {
        (void)ncclCommDestroy(c->nc);
    }
    c->nc = NULL;
    pthread_mutex_unlock(&c->mu);
    free_comm(c);
    if (unfinished) {
        *unfinished = left;
    }
}

int sw_comm_nccl_device(const sw_comm *c) { return c->device; }

void *sw_comm_nccl_stream(const sw_comm *c) { return (void *)c->stream; }

int sw_nccl_version(void) {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

#else  /* !SW_HAVE_NCCL: the build found no nccl.h and libnccl.so.2 */

sw_status sw_comm_nccl_new(const sw_comm_ext *boot, int device, double timeout_s, sw_comm **out,
                           const sw_comm_i **i) {
    (void)boot;
    (void)device;
    (void)timeout_s;
    *out = NULL;
    *i = NULL;
    return SW_FAIL(SW_ERR_VALUE, "shardwise._cuda was built without NCCL (its build found no nccl.h and "
                   "libnccl.so.2: the nvidia-nccl-cu13 wheel of the [cuda] extra)");
}

void sw_comm_nccl_free(sw_comm *c, int *unfinished) {
    (void)c;
    if (unfinished) {
        *unfinished = 0;
    }
}

int sw_comm_nccl_device(const sw_comm *c) {
    (void)c;
    return -1;
}

void *sw_comm_nccl_stream(const sw_comm *c) {
    (void)c;
    return NULL;
}

int sw_nccl_version(void) { return 0; }

#endif
