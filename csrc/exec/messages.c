/* messages.c -- one rank's messages: staging buffers, posting, completion (messages.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>  /* the arrival flags a worker thread sets */
#include <stdlib.h>     /* calloc, malloc, free, posix_memalign */
#include <string.h>     /* memset */

#include "messages.h"
#include "runtime_internal.h"  /* struct sw_runtime */

enum { MSG_IDLE = 0, MSG_POSTED = 1, MSG_DONE = 2 };

struct sw_messages {
    const sw_comm_i *ci;
    sw_comm *comm;
    int nranks, me, ndev;
    int32_t *rank;             /* ndev: each device's rank */
    double timeout_s;
    int32_t ntasks;
    int32_t *index;            /* ntasks: the local message of each task (a send or recv of this rank), -1 */
    int32_t n;                 /* local messages */
    int32_t *task;             /* n: their tasks */
    int *peer;                 /* n: the rank at the other end */
    int64_t *tag;              /* n: the tag in iteration 0 */
    int64_t *per_iteration;    /* n: messages per iteration between the two ranks (the tag's stride) */
    size_t *bytes;             /* n */
    int copies;                /* iterations the staging buffers are for */
    void **staging;            /* n * copies: message i of iteration it at [it * n + i] */
    sw_comm_req *req;          /* n * copies */
    _Atomic int *state;        /* n * copies: MSG_* (a recv's arrival is set by the worker thread testing it) */
    int32_t nloss;             /* loss tasks (their sums are gathered) */
    int32_t *loss_task;
    double *loss_out, *loss_all;   /* nloss * copies, nranks * nloss * copies */
    int broken;
};

int sw_messages_local(const sw_messages *m, const sw_task *t) { return m->rank[t->device] == m->me; }

void sw_messages_broken(sw_messages *m) { m->broken = 1; }
int sw_messages_is_broken(const sw_messages *m) { return m->broken; }

void sw_messages_free(sw_messages *m) {
    if (!m) {
        return;
    }
    if (!m->broken) {   /* a broken rank's staging buffers may still be written into: leaked on purpose */
        for (int64_t i = 0; m->staging && i < (int64_t)m->n * m->copies; i++) {
            free(m->staging[i]);
        }
        free(m->staging);
        free(m->req);
        free((void *)m->state);
    }
    free(m->rank);
    free(m->index);
    free(m->task);
    free(m->peer);
    free(m->tag);
    free(m->per_iteration);
    free(m->bytes);
    free(m->loss_task);
    free(m->loss_out);
    free(m->loss_all);
    free(m);
}

sw_status sw_messages_new(const sw_task_graph *g, int ndev, int nranks, const int32_t *rank,
                          const sw_comm_ext *comm, double timeout_s, sw_messages **out) {
    *out = NULL;
    if (!comm || comm->abi_version != SW_COMM_ABI_VERSION || comm->table_size != sizeof(sw_comm_i) || !comm->i) {
        return SW_FAIL(SW_ERR_VALUE, "the communicator's table is of another version of shardwise (rebuild both)");
    }
    const sw_comm_i *ci = comm->i;
    if (ci->size(comm->comm) != nranks) {
        return SW_FAIL(SW_ERR_VALUE, "the task graph is split over %d ranks, the job has %d", nranks,
                       ci->size(comm->comm));
    }
    sw_messages *m = calloc(1, sizeof *m);
    if (!m) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a rank's messages");
    }
    *m = (sw_messages){.ci = ci, .comm = comm->comm, .nranks = nranks, .me = ci->rank(comm->comm), .ndev = ndev,
                       .timeout_s = timeout_s, .ntasks = g->ntasks};
    size_t nt = (size_t)g->ntasks + 1, pairs = (size_t)nranks * (size_t)nranks;
    m->rank = malloc(sizeof *m->rank * (size_t)ndev);
    m->index = malloc(sizeof *m->index * nt);
    m->task = malloc(sizeof *m->task * nt);
    m->peer = malloc(sizeof *m->peer * nt);
    m->tag = malloc(sizeof *m->tag * nt);
    m->per_iteration = malloc(sizeof *m->per_iteration * nt);
    m->bytes = malloc(sizeof *m->bytes * nt);
    m->loss_task = malloc(sizeof *m->loss_task * nt);
    int64_t *count = calloc(pairs, sizeof *count);   /* messages from rank a to rank b so far */
    if (!m->rank || !m->index || !m->task || !m->peer || !m->tag || !m->per_iteration || !m->bytes ||
        !m->loss_task || !count) {
        free(count);
        sw_messages_free(m);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a rank's messages");
    }
    memcpy(m->rank, rank, sizeof *m->rank * (size_t)ndev);
    for (int32_t t = 0; t < g->ntasks; t++) {
        const sw_task *task = &g->tasks[t];
        m->index[t] = -1;
        if (task->kind == SW_TASK_LOSS) {
            m->loss_task[m->nloss++] = t;
        }
        if (!sw_is_message(task)) {
            continue;
        }
        int from = rank[task->kind == SW_TASK_SEND ? task->device : task->src_device];
        int to = rank[task->kind == SW_TASK_SEND ? task->src_device : task->device];
        /* a send and its recv are one message: count it once, at the send */
        int64_t k = task->kind == SW_TASK_SEND ? count[(size_t)from * nranks + to]++
                                               : count[(size_t)from * nranks + to] - 1;
        if (!sw_messages_local(m, task)) {
            continue;
        }
        int32_t i = m->n++;
        m->index[t] = i;
        m->task[i] = t;
        m->peer[i] = task->kind == SW_TASK_SEND ? to : from;
        m->tag[i] = k;
        m->bytes[i] = (size_t)task->nbytes;
    }
    int64_t max_tag = ci->max_tag(m->comm);
    for (int32_t i = 0; i < m->n; i++) {
        const sw_task *task = &g->tasks[m->task[i]];
        int from = task->kind == SW_TASK_SEND ? m->me : m->peer[i], to = task->kind == SW_TASK_SEND ? m->peer[i] : m->me;
        m->per_iteration[i] = count[(size_t)from * nranks + to];
        if (m->per_iteration[i] * SW_MAX_PIPELINE > max_tag) {
            free(count);
            sw_messages_free(m);
            return SW_FAIL(SW_ERR_TOO_LARGE, "%lld messages per step from rank %d to rank %d: more tags than this "
                           "communicator has (%lld)", (long long)m->per_iteration[i], from, to, (long long)max_tag);
        }
    }
    free(count);
    sw_status s = sw_messages_reserve(m, 1);
    if (s != SW_OK) {
        sw_messages_free(m);
        return s;
    }
    *out = m;
    return SW_OK;
}

sw_status sw_messages_reserve(sw_messages *m, int copies) {
    if (copies <= m->copies) {
        return SW_OK;
    }
    size_t total = (size_t)m->n * (size_t)copies + 1;
    void **staging = calloc(total, sizeof *staging);
    sw_comm_req *req = calloc(total, sizeof *req);
    _Atomic int *state = calloc(total, sizeof *state);
    double *lo = malloc(sizeof *lo * ((size_t)m->nloss * copies + 1));
    double *la = malloc(sizeof *la * ((size_t)m->nloss * copies * m->nranks + 1));
    sw_status s = staging && req && state && lo && la ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for messages");
    for (int it = 0; it < copies && s == SW_OK; it++) {
        for (int32_t i = 0; i < m->n && s == SW_OK; i++) {
            size_t at = (size_t)it * m->n + i;
            if (it < m->copies) {   /* the buffers of the iterations there were already */
                staging[at] = m->staging[(size_t)it * m->n + i];
            } else if (posix_memalign(&staging[at], 64, m->bytes[i] ? m->bytes[i] : 64) != 0) {
                staging[at] = NULL;
                s = SW_FAIL(SW_ERR_NOMEM, "cannot allocate a %zu-byte staging buffer", m->bytes[i]);
            }
        }
    }
    if (s != SW_OK) {
        for (size_t at = (size_t)m->n * m->copies; staging && at < total; at++) {
            free(staging[at]);
        }
        free(staging);
        free(req);
        free((void *)state);
        free(lo);
        free(la);
        return s;
    }
    free(m->staging);
    free(m->req);
    free((void *)m->state);
    free(m->loss_out);
    free(m->loss_all);
    m->staging = staging;
    m->req = req;
    m->state = state;
    m->loss_out = lo;
    m->loss_all = la;
    m->copies = copies;
    return SW_OK;
}

/* The slot of list task T (iteration T / ntasks) in the per-iteration arrays, or -1. */
static int64_t slot_of(const sw_messages *m, int32_t T) {
    int32_t it = T / m->ntasks, i = m->index[T % m->ntasks];
    return i < 0 || it >= m->copies ? -1 : (int64_t)it * m->n + i;
}

static int64_t tag_of(const sw_messages *m, int32_t i, int it) { return m->tag[i] + it * m->per_iteration[i]; }

sw_status sw_messages_post(sw_messages *m, const sw_runtime *rt, int list, int copies) {
    if (m->broken) {
        return SW_FAIL(SW_ERR_VALUE, "an earlier step failed on this rank with messages in flight: the job cannot "
                       "go on (start it again)");
    }
    if (copies > m->copies) {
        return SW_FAIL(SW_ERR_INTERNAL, "%d iterations of messages, staging for %d", copies, m->copies);
    }
    for (int it = 0; it < copies; it++) {
        for (int32_t i = 0; i < m->n; i++) {
            int32_t t = m->task[i];
            size_t at = (size_t)it * m->n + i;
            int runs = sw_runtime_in_list(rt, list == SW_LIST_PIPELINE ? SW_LIST_TRAIN : list, t);
            atomic_store(&m->state[at], MSG_IDLE);
            if (!runs || rt->g.tasks[t].kind != SW_TASK_RECV) {
                continue;
            }
            sw_status s = m->ci->irecv(m->comm, m->staging[at], m->bytes[i], m->peer[i], tag_of(m, i, it), &m->req[at]);
            if (s != SW_OK) {
                m->broken = 1;
                return s;
            }
            atomic_store(&m->state[at], MSG_POSTED);
        }
    }
    return SW_OK;
}

sw_status sw_messages_finish(sw_messages *m, const sw_task_graph *g, double *loss_sums, int copies) {
    for (size_t at = 0; at < (size_t)m->n * copies; at++) {   /* the sends, in order */
        if (atomic_load(&m->state[at]) == MSG_POSTED) {
            const sw_task *t = &g->tasks[m->task[at % m->n]];
            sw_status s = m->ci->wait(m->comm, m->req[at], m->timeout_s);
            if (s != SW_OK) {
                m->broken = 1;
                return SW_FAIL(s, "rank %d: the %s of op %d to rank %d (%zu bytes) did not complete: %s", m->me,
                               t->kind == SW_TASK_SEND ? "send" : "receive", t->op, m->peer[at % m->n],
                               m->bytes[at % m->n], sw_last_error());
            }
            atomic_store(&m->state[at], MSG_DONE);
        }
    }
    /* The loss: every rank's sums of its loss tasks, so that each adds them in task order. */
    size_t per = (size_t)m->nloss * copies;
    if (per == 0) {
        return SW_OK;
    }
    for (int it = 0; it < copies; it++) {
        for (int32_t j = 0; j < m->nloss; j++) {
            m->loss_out[(size_t)it * m->nloss + j] = loss_sums[(size_t)it * m->ntasks + m->loss_task[j]];
        }
    }
    sw_comm_req r;
    sw_status s = m->ci->allgather(m->comm, m->loss_out, per * sizeof(double), m->loss_all, &r);
    if (s == SW_OK) {
        s = m->ci->wait(m->comm, r, m->timeout_s);
    }
    if (s != SW_OK) {
        m->broken = 1;
        return s;
    }
    for (int it = 0; it < copies; it++) {
        for (int32_t j = 0; j < m->nloss; j++) {
            int owner = m->rank[g->tasks[m->loss_task[j]].device];
            loss_sums[(size_t)it * m->ntasks + m->loss_task[j]] = m->loss_all[(size_t)owner * per + (size_t)it * m->nloss + j];
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ what a backend asks (runtime.h) */
void *sw_runtime_staging(const sw_runtime *rt, int32_t t, int iteration) {
    const sw_messages *m = rt->messages;
    int64_t at = m ? slot_of(m, iteration * m->ntasks + t) : -1;
    return at < 0 ? NULL : m->staging[at];
}

sw_status sw_runtime_send(const sw_runtime *rt, int32_t t, int iteration) {
    sw_messages *m = rt->messages;
    int64_t at = m ? slot_of(m, iteration * m->ntasks + t) : -1;
    if (at < 0 || rt->g.tasks[t].kind != SW_TASK_SEND) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d is not a send of this rank", t);
    }
    int32_t i = m->index[t];
    SW_TRY(m->ci->isend(m->comm, m->staging[at], m->bytes[i], m->peer[i], tag_of(m, i, iteration), &m->req[at]));
    atomic_store(&m->state[at], MSG_POSTED);
    return SW_OK;
}

int sw_runtime_arrived(const sw_runtime *rt, int32_t T) {
    sw_messages *m = rt->messages;
    int64_t at = m ? slot_of(m, T) : -1;
    if (at < 0) {
        SW_FAIL(SW_ERR_INTERNAL, "task %d has no message on this rank", T);
        return -1;
    }
    int st = atomic_load(&m->state[at]);
    if (st != MSG_POSTED) {
        return st == MSG_DONE;
    }
    int done = 0;
    if (m->ci->test(m->comm, m->req[at], &done) != SW_OK) {
        atomic_store(&m->state[at], MSG_DONE);   /* consumed, failed: the message is in the error */
        return -1;
    }
    if (done) {
        atomic_store(&m->state[at], MSG_DONE);
    }
    return done;
}

double sw_runtime_message_timeout(const sw_runtime *rt) { return rt->messages ? rt->messages->timeout_s : -1.0; }

sw_status sw_runtime_overdue(const sw_runtime *rt, int32_t T, double waited) {
    const sw_messages *m = rt->messages;
    int64_t at = m ? slot_of(m, T) : -1;
    if (at < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d has no message on this rank", T);
    }
    const sw_task *t = &rt->g.tasks[m->task[at % m->n]];
    return SW_FAIL(SW_ERR_TIMEOUT, "rank %d waited %.1f s for a message from rank %d that never came: op %d's %zu "
                   "bytes from device %d to device %d (iteration %d of the launch); is rank %d alive and running "
                   "the same plan?", m->me, waited, m->peer[at % m->n], t->op, m->bytes[at % m->n], t->src_device,
                   t->device, (int)(T / m->ntasks), m->peer[at % m->n]);
}
