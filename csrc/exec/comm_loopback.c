/* comm_loopback.c -- sw_comm_i between the threads of one process: a test double (comm_loopback.h).
 *
 * Everything lives in one mailbox under one mutex: each endpoint's request table (slot +
 * generation handles, as comm_mpi.c's), its posted receives in posting order, its queue of
 * messages sent to it and not yet received, its byte counters; and the collectives in progress.
 * Whoever completes a request (a sender matching a posted receive, the last endpoint to join a
 * collective) writes its output buffer with the mutex held and broadcasts `done`; the owner
 * reads the buffer after taking the mutex in test or wait, so every hand-over of bytes between
 * threads is ordered by the mutex (what ThreadSanitizer checks).  Nothing here runs a thread of
 * its own.
 */
#define _POSIX_C_SOURCE 200809L  /* pthread_condattr_setclock, clock_gettime under -std=c11 */

#include <errno.h>    /* ETIMEDOUT */
#include <pthread.h>  /* the mailbox's mutex and condition */
#include <stdio.h>    /* fprintf: abort's message */
#include <stdlib.h>   /* calloc, realloc, free, abort */
#include <string.h>   /* memcpy, memset */
#include <time.h>     /* CLOCK_MONOTONIC: the clock of the waits' condition */

#include "comm_loopback.h"
#include "comm_requests.h"  /* handles, op names, failure messages, deadlines, counters */

typedef enum { REQ_FREE = 0, REQ_PENDING, REQ_DONE, REQ_FAILED } req_state;

typedef struct {
    req_state state;
    sw_comm_op op;
    uint32_t gen;        /* bumped when the slot is taken: the handle's high half */
    int peer;            /* send, receive: the other rank (-1 for collectives) */
    int64_t tag;
    size_t bytes;        /* send, receive, allgather: bytes per rank; allreduce: count * 4 */
    void *out;           /* receive, allreduce (in place), allgather (size * bytes) */
    char error[320];     /* FAILED: why */
} lb_req;

/* A message sent to an endpoint before it posted the receive: its own copy of the payload. */
typedef struct lb_msg {
    struct lb_msg *next;
    int src;
    int64_t tag;
    size_t bytes;
    unsigned char data[];
} lb_msg;

/* The n-th collective of every endpoint, while some have not joined it yet. */
typedef struct lb_coll {
    struct lb_coll *next;
    int64_t seq;
    sw_comm_op op;
    size_t bytes;          /* per rank */
    int arrived;
    unsigned char *in;     /* size * bytes: each endpoint's contribution, copied when it joins */
    int *slot;             /* size: each endpoint's request slot (-1: not joined, failed or closed) */
    uint32_t *gen;
    char mismatch[320];    /* an endpoint joined with another kind or size: every request fails */
} lb_coll;

typedef struct lb_world lb_world;

struct sw_comm {           /* one endpoint: rank `rank` of the mailbox */
    lb_world *w;
    int rank;
    int closed;
    lb_req *reqs;          /* cap slots */
    int cap;
    int *posted;           /* slots of posted receives, in posting order */
    int nposted, capposted;
    lb_msg *head, *tail;   /* messages to this endpoint not yet received, in the order sent */
    int64_t ncoll;         /* collectives started */
    int64_t *sent, *received;  /* size: bytes per peer */
};

struct lb_world {
    pthread_mutex_t mu;
    pthread_cond_t done;   /* a request completed */
    int size, live;
    sw_comm *ep;           /* size endpoints */
    lb_coll *colls;        /* collectives in progress, by seq */
};

/* ---------------------------------------------------------------- helpers */

/* A free slot of c's table (growing it), filled from `fill` and PENDING; *req its handle.  Mutex held. */
static sw_status take_slot(sw_comm *c, const lb_req *fill, int *slot_out, sw_comm_req *req) {
    if (c->closed) {
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
        lb_req *reqs = realloc(c->reqs, (size_t)cap * sizeof *reqs);
        if (!reqs) {
            return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for %d requests", cap);
        }
        memset(reqs + c->cap, 0, (size_t)(cap - c->cap) * sizeof *reqs);
        c->reqs = reqs;
        slot = c->cap;
        c->cap = cap;
    }
    lb_req *r = &c->reqs[slot];
    uint32_t gen = r->gen + 1;
    *r = *fill;
    r->gen = gen;
    r->state = REQ_PENDING;
    *slot_out = slot;
    *req = sw_comm_handle(slot, gen);
    return SW_OK;
}

/* Complete a receive with a message's bytes (or fail it on a size that differs).  Mutex held. */
static void deliver(sw_comm *dst, lb_req *r, int src, const void *data, size_t bytes) {
    if (bytes != r->bytes) {
        snprintf(r->error, sizeof r->error, "the message was %zu bytes, not the %zu bytes expected", bytes, r->bytes);
        r->state = REQ_FAILED;
        return;
    }
    if (bytes) {
        memcpy(r->out, data, bytes);
    }
    dst->received[src] += (int64_t)bytes;
    r->state = REQ_DONE;
}

static sw_status check_p2p(const sw_comm *c, const char *what, const void *buf, size_t bytes, int peer,
                           int64_t tag) {
    if (peer < 0 || peer >= c->w->size) {
        return SW_FAIL(SW_ERR_VALUE, "comm: %s to/from rank %d, but the job has ranks 0..%d", what, peer,
                       c->w->size - 1);
    }
    if (tag < 0 || tag > SW_LOOPBACK_MAX_TAG) {
        return SW_FAIL(SW_ERR_VALUE, "comm: %s tag %lld is outside [0, %lld]", what, (long long)tag,
                       (long long)SW_LOOPBACK_MAX_TAG);
    }
    if (!buf && bytes) {
        return SW_FAIL(SW_ERR_VALUE, "comm: a %s of %zu bytes from a NULL buffer", what, bytes);
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- the table's slots */

static int c_rank(const sw_comm *c) { return c->rank; }
static int c_size(const sw_comm *c) { return c->w->size; }
static int c_local_rank(const sw_comm *c) { return c->rank; }   /* one machine: one process */
static int64_t c_max_tag(const sw_comm *c) {
    (void)c;
    return SW_LOOPBACK_MAX_TAG;
}

static sw_status c_isend(sw_comm *c, const void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "send", buf, bytes, peer, tag));
    lb_world *w = c->w;
    lb_req fill = {.op = SW_COMM_SEND, .peer = peer, .tag = tag, .bytes = bytes};
    pthread_mutex_lock(&w->mu);
    int slot;
    sw_status s = take_slot(c, &fill, &slot, req);
    if (s != SW_OK) {
        pthread_mutex_unlock(&w->mu);
        return s;
    }
    sw_comm *dst = &w->ep[peer];
    int k = 0;
    for (; k < dst->nposted; k++) {   /* the first posted receive from (c, tag) */
        const lb_req *r = &dst->reqs[dst->posted[k]];
        if (r->peer == c->rank && r->tag == tag) {
            break;
        }
    }
    if (k < dst->nposted) {
        deliver(dst, &dst->reqs[dst->posted[k]], c->rank, buf, bytes);
        memmove(dst->posted + k, dst->posted + k + 1, (size_t)(dst->nposted - k - 1) * sizeof *dst->posted);
        dst->nposted--;
        pthread_cond_broadcast(&w->done);
    } else {
        lb_msg *m = malloc(sizeof *m + (bytes ? bytes : 1));
        if (!m) {
            c->reqs[slot].state = REQ_FREE;
            pthread_mutex_unlock(&w->mu);
            return SW_FAIL(SW_ERR_NOMEM, "comm: no memory to buffer a %zu-byte message", bytes);
        }
        *m = (lb_msg){.next = NULL, .src = c->rank, .tag = tag, .bytes = bytes};
        if (bytes) {
            memcpy(m->data, buf, bytes);
        }
        if (dst->tail) {
            dst->tail->next = m;
        } else {
            dst->head = m;
        }
        dst->tail = m;
    }
    c->sent[peer] += (int64_t)bytes;   /* buffered: the send is complete */
    c->reqs[slot].state = REQ_DONE;
    pthread_mutex_unlock(&w->mu);
    return SW_OK;
}

static sw_status c_irecv(sw_comm *c, void *buf, size_t bytes, int peer, int64_t tag, sw_comm_req *req) {
    SW_TRY(check_p2p(c, "receive", buf, bytes, peer, tag));
    lb_world *w = c->w;
    lb_req fill = {.op = SW_COMM_RECV, .peer = peer, .tag = tag, .bytes = bytes, .out = buf};
    pthread_mutex_lock(&w->mu);
    int slot;
    sw_status s = take_slot(c, &fill, &slot, req);
    if (s != SW_OK) {
        pthread_mutex_unlock(&w->mu);
        return s;
    }
    lb_msg *prev = NULL, *m = c->head;
    while (m && !(m->src == peer && m->tag == tag)) {   /* the first message queued from (peer, tag) */
        prev = m;
        m = m->next;
    }
    if (m) {
        deliver(c, &c->reqs[slot], peer, m->data, m->bytes);
        if (prev) {
            prev->next = m->next;
        } else {
            c->head = m->next;
        }
        if (c->tail == m) {
            c->tail = prev;
        }
        free(m);
    } else {
        if (c->nposted == c->capposted) {
            int cap = c->capposted ? c->capposted * 2 : 64;
            int *grown = realloc(c->posted, (size_t)cap * sizeof *grown);
            if (!grown) {
                c->reqs[slot].state = REQ_FREE;
                pthread_mutex_unlock(&w->mu);
                return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for %d posted receives", cap);
            }
            c->posted = grown;
            c->capposted = cap;
        }
        c->posted[c->nposted++] = slot;
    }
    pthread_mutex_unlock(&w->mu);
    return SW_OK;
}

/* Every endpoint has joined collective k: write each one's output and complete its request.  Mutex held. */
static void complete_collective(lb_world *w, lb_coll *k) {
    int n = w->size;
    const void *result = k->in;   /* allgather: the contributions in rank order */
    float *sum = NULL;
    if (!k->mismatch[0] && k->op == SW_COMM_ALLREDUCE) {
        int64_t count = (int64_t)(k->bytes / sizeof(float));
        sum = malloc(k->bytes ? k->bytes : 1);
        if (!sum) {
            snprintf(k->mismatch, sizeof k->mismatch, "no memory for the sum of %zu bytes", k->bytes);
        } else {
            const float *in = (const float *)k->in;
            for (int64_t i = 0; i < count; i++) {   /* rank order, left to right: a fixed order */
                float acc = in[i];
                for (int r = 1; r < n; r++) {
                    acc += in[(int64_t)r * count + i];
                }
                sum[i] = acc;
            }
            result = sum;
        }
    }
    size_t out_bytes = k->op == SW_COMM_ALLGATHER ? k->bytes * (size_t)n : k->bytes;
    for (int r = 0; r < n; r++) {
        if (k->slot[r] < 0) {
            continue;   /* failed at joining, or its endpoint closed */
        }
        lb_req *q = &w->ep[r].reqs[k->slot[r]];
        if (q->gen != k->gen[r] || q->state != REQ_PENDING) {
            continue;
        }
        if (k->mismatch[0]) {
            snprintf(q->error, sizeof q->error, "%s", k->mismatch);
            q->state = REQ_FAILED;
            continue;
        }
        if (out_bytes) {
            memcpy(q->out, result, out_bytes);
        }
        q->state = REQ_DONE;
    }
    free(sum);
    pthread_cond_broadcast(&w->done);
}

static void coll_free(lb_coll *k) {
    if (k) {
        free(k->in);
        free(k->slot);
        free(k->gen);
        free(k);
    }
}

/* Join c's next collective: `in` copied as c's contribution; completes it when c is the last. */
static sw_status join(sw_comm *c, sw_comm_op op, const void *in, size_t bytes, void *out, sw_comm_req *req) {
    lb_world *w = c->w;
    int n = w->size;
    lb_req fill = {.op = op, .peer = -1, .tag = -1, .bytes = bytes, .out = out};
    pthread_mutex_lock(&w->mu);
    int slot;
    sw_status s = take_slot(c, &fill, &slot, req);
    if (s != SW_OK) {
        pthread_mutex_unlock(&w->mu);
        return s;
    }
    int64_t seq = c->ncoll;
    lb_coll **at = &w->colls;
    while (*at && (*at)->seq < seq) {
        at = &(*at)->next;
    }
    lb_coll *k = *at && (*at)->seq == seq ? *at : NULL;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (k) {
            k->in = malloc(bytes * (size_t)n + 1);
            k->slot = malloc(sizeof *k->slot * (size_t)n);
            k->gen = calloc((size_t)n, sizeof *k->gen);
        }
        if (!k || !k->in || !k->slot || !k->gen) {
            coll_free(k);
            c->reqs[slot].state = REQ_FREE;
            pthread_mutex_unlock(&w->mu);
            return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for a collective of %zu bytes per rank", bytes);
        }
        k->seq = seq;
        k->op = op;
        k->bytes = bytes;
        for (int r = 0; r < n; r++) {
            k->slot[r] = -1;
        }
        k->next = *at;
        *at = k;
    }
    c->ncoll++;
    lb_req *r = &c->reqs[slot];
    if (k->op != op || k->bytes != bytes) {   /* ranks that disagree: the collective fails on every rank */
        snprintf(k->mismatch, sizeof k->mismatch, "collective %lld: rank %d started an %s of %zu bytes, another "
                 "rank an %s of %zu bytes", (long long)seq, c->rank, sw_comm_op_name(op), bytes,
                 sw_comm_op_name(k->op), k->bytes);
        snprintf(r->error, sizeof r->error, "%s", k->mismatch);
        r->state = REQ_FAILED;
    } else {
        if (bytes) {
            memcpy(k->in + (size_t)c->rank * bytes, in, bytes);
        }
        k->slot[c->rank] = slot;
        k->gen[c->rank] = r->gen;
    }
    if (++k->arrived == n) {
        complete_collective(w, k);
        *at = k->next;
        coll_free(k);
    }
    pthread_mutex_unlock(&w->mu);
    return SW_OK;
}

static sw_status c_allreduce_f32(sw_comm *c, float *buf, int64_t count, sw_comm_req *req) {
    if (count < 0 || (!buf && count)) {
        return SW_FAIL(SW_ERR_VALUE, "comm: allreduce of %lld floats (0.., from a buffer)", (long long)count);
    }
    return join(c, SW_COMM_ALLREDUCE, buf, (size_t)count * sizeof(float), buf, req);
}

static sw_status c_allgather(sw_comm *c, const void *in, size_t bytes, void *out, sw_comm_req *req) {
    if ((!in || !out) && bytes) {
        return SW_FAIL(SW_ERR_VALUE, "comm: allgather of %zu bytes per rank (from and to buffers)", bytes);
    }
    return join(c, SW_COMM_ALLGATHER, in, bytes, out, req);
}

/* The slot of a handle, or NULL with a message (a handle consumed already, or never made).  Mutex held. */
static lb_req *slot_of(sw_comm *c, sw_comm_req req) {
    uint32_t gen;
    int64_t slot = sw_comm_handle_slot(req, c->cap, &gen);
    if (slot < 0 || c->reqs[slot].gen != gen || c->reqs[slot].state == REQ_FREE) {
        sw_comm_not_outstanding("comm", req);
        return NULL;
    }
    return &c->reqs[slot];
}

/* Consume a completed slot: SW_OK, or the failure with the request named.  Mutex held. */
static sw_status consume(sw_comm *c, lb_req *r) {
    sw_status s = r->state == REQ_FAILED ? sw_comm_failed(c->rank, r->op, r->peer, r->tag, r->bytes, r->error) : SW_OK;
    r->state = REQ_FREE;
    return s;
}

static sw_status c_test(sw_comm *c, sw_comm_req req, int *done) {
    pthread_mutex_lock(&c->w->mu);
    lb_req *r = slot_of(c, req);
    sw_status s = r ? SW_OK : SW_ERR_VALUE;
    *done = 0;
    if (r && (r->state == REQ_DONE || r->state == REQ_FAILED)) {
        *done = 1;
        s = consume(c, r);
    }
    pthread_mutex_unlock(&c->w->mu);
    return s;
}

static sw_status c_wait(sw_comm *c, sw_comm_req req, double timeout_s) {
    lb_world *w = c->w;
    struct timespec deadline;
    if (timeout_s >= 0) {
        sw_comm_deadline_after(&deadline, timeout_s);
    }
    pthread_mutex_lock(&w->mu);
    lb_req *r = slot_of(c, req);
    if (!r) {
        pthread_mutex_unlock(&w->mu);
        return SW_ERR_VALUE;
    }
    int timed_out = 0;
    while (r->state == REQ_PENDING && !timed_out) {
        if (timeout_s < 0) {
            pthread_cond_wait(&w->done, &w->mu);
        } else {
            timed_out = pthread_cond_timedwait(&w->done, &w->mu, &deadline) == ETIMEDOUT;
        }
        uint32_t gen;   /* (the slot is in the table: slot_of found it, and tables only grow) */
        r = &c->reqs[sw_comm_handle_slot(req, c->cap, &gen)];   /* the table may have grown (moved) meanwhile */
        if (r->gen != gen || r->state == REQ_FREE) {
            pthread_mutex_unlock(&w->mu);   /* another thread's test or wait consumed it */
            return sw_comm_consumed_meanwhile(req);
        }
    }
    sw_status s;
    if (r->state == REQ_DONE || r->state == REQ_FAILED) {
        s = consume(c, r);
    } else {
        s = sw_comm_timed_out(c->rank, timeout_s, r->op, r->peer, r->tag, r->bytes, w->size);
    }
    pthread_mutex_unlock(&w->mu);
    return s;
}

static void c_counters(const sw_comm *c, int64_t *sent, int64_t *received) {
    lb_world *w = c->w;
    pthread_mutex_lock(&w->mu);
    sw_comm_read_counters(w->size, c->sent, c->received, sent, received);
    pthread_mutex_unlock(&w->mu);
}

static void c_reset_counters(sw_comm *c) {
    pthread_mutex_lock(&c->w->mu);
    memset(c->sent, 0, (size_t)c->w->size * sizeof *c->sent);
    memset(c->received, 0, (size_t)c->w->size * sizeof *c->received);
    pthread_mutex_unlock(&c->w->mu);
}

/* Every "rank" is this process: the job ends with it. */
static void c_abort(sw_comm *c, int code, const char *why) {
    fprintf(stderr, "shardwise: rank %d of %d (loopback) aborts the job (exit status %d): %s\n", c->rank,
            c->w->size, code, why ? why : "no reason given");
    fflush(stderr);
    abort();
}

static const sw_comm_i LOOPBACK_TABLE = {
    .abi_version = SW_COMM_ABI_VERSION,
    .struct_size = sizeof(sw_comm_i),
    .name = "loopback",
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

const sw_comm_i *sw_comm_loopback_table(void) { return &LOOPBACK_TABLE; }

/* ---------------------------------------------------------------- life cycle */

static void world_free(lb_world *w) {
    for (int r = 0; r < w->size; r++) {
        sw_comm *c = &w->ep[r];
        for (lb_msg *m = c->head, *next; m; m = next) {
            next = m->next;
            free(m);
        }
        free(c->reqs);
        free(c->posted);
        free(c->sent);
        free(c->received);
    }
    for (lb_coll *k = w->colls, *next; k; k = next) {
        next = k->next;
        coll_free(k);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->done);
    free(w->ep);
    free(w);
}

sw_status sw_comm_loopback_new(int size, sw_comm **endpoints) {
    if (size < 1) {
        return SW_FAIL(SW_ERR_VALUE, "comm: a loopback of %d endpoints (1 or more)", size);
    }
    lb_world *w = calloc(1, sizeof *w);
    if (!w) {
        return SW_FAIL(SW_ERR_NOMEM, "comm: no memory");
    }
    w->size = size;
    w->live = size;
    w->ep = calloc((size_t)size, sizeof *w->ep);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* deadlines immune to clock changes */
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->done, &ca);
    pthread_condattr_destroy(&ca);
    int ok = w->ep != NULL;
    for (int r = 0; ok && r < size; r++) {
        sw_comm *c = &w->ep[r];
        c->w = w;
        c->rank = r;
        c->sent = calloc((size_t)size, sizeof *c->sent);
        c->received = calloc((size_t)size, sizeof *c->received);
        ok = c->sent && c->received;
    }
    if (!ok) {
        if (!w->ep) {
            w->size = 0;
        }
        world_free(w);
        return SW_FAIL(SW_ERR_NOMEM, "comm: no memory for %d endpoints", size);
    }
    for (int r = 0; r < size; r++) {
        endpoints[r] = &w->ep[r];
    }
    return SW_OK;
}

void sw_comm_loopback_free(sw_comm *c, int *unfinished) {
    if (!c) {
        return;
    }
    lb_world *w = c->w;
    int left = 0;
    pthread_mutex_lock(&w->mu);
    if (!c->closed) {
        c->closed = 1;
        for (int k = 0; k < c->nposted; k++) {   /* cancelled: no sender writes into them any more */
            lb_req *r = &c->reqs[c->posted[k]];
            snprintf(r->error, sizeof r->error, "the communicator was closed with the receive outstanding");
            r->state = REQ_FAILED;
        }
        c->nposted = 0;
        for (lb_coll *k = w->colls; k; k = k->next) {   /* nor does the last one joining a collective */
            if (k->slot[c->rank] >= 0) {
                k->slot[c->rank] = -1;
                left++;
            }
        }
        w->live--;
        pthread_cond_broadcast(&w->done);
    }
    int last = w->live == 0;
    pthread_mutex_unlock(&w->mu);
    if (unfinished) {
        *unfinished = left;
    }
    if (last) {
        world_free(w);
    }
}
