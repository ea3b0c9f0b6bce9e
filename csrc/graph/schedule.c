/* schedule.c -- priorities and streams of every task of a lowered plan (TurboDL Algorithm 1).
 *
 * Jin et al., "TurboDL: Improving the CNN Training on GPU With Fine-Grained
 * Multi-Streaming Scheduling": each sub-task of a layer gets the priority of its
 * layer path (schedule_paths.c: the longest path of a block highest) lowered by an
 * offset for its type -- 0 for dA, alpha for dW, beta for dB -- and the tasks of one
 * priority share a stream, so a device needs as many streams as it has priority
 * classes (3 for VGG-16 in the paper: dA, dW, dB).  On our task graph:
 *
 *   dA of an op     the summed durations of its backward_data tasks on one worker;
 *                   the op's is its slowest worker's (the workers of an op run on
 *                   distinct devices, side by side).  The analysis is global, over the
 *                   op graph: the dA chain crosses devices, and every device follows
 *                   the priorities of the layers it holds a part of.
 *   sub-task        Algorithm 1 asks each sub-task's dependency distance: 1 when its
 *                   output is needed within the iteration (dA), more when only the
 *                   next iteration needs it (dW, dB).  Read off the data flow:
 *                     forward phase                    forward, path priority
 *                     backward_data                    dA, path priority
 *                     reads / writes a weight's gradient or momentum, or writes a
 *                     weight (backward_weight, the sync copies, reduce, update, the
 *                     copies back)                     dW, or dB for a bias
 *                                                      (sw_input.bias)
 *                     anything else (accumulate, gradient copies, zero_grad,
 *                     bn_backward_stats, activation_grad, stats_reduce)
 *                                                      what it feeds: the most urgent
 *                                                      later task reading a buffer it
 *                                                      writes
 *                   so the sums at a fork inherit the fork's dA priority, and the
 *                   gradient of the first layer (read only by its dW) is dW work.
 *                   The lowering gives every weight slot its own backward_weight
 *                   task, so dW and dB are separate tasks, a bias's reading only
 *                   the output's gradient.
 *   sync            the sync and update phases of a layer's weights (copies to the
 *                   replica group's first, reduce, update, copies back) depend only
 *                   on the layer's dW / dB (lower.c); they rank below every compute
 *                   class by reuse distance: sync_floor - the number of layers with
 *                   weights before the layer, so the layer the next forward needs
 *                   first goes first, each layer on a stream of its own (a shared
 *                   stream would hold a ready layer's sync behind one whose dW is not
 *                   done).
 *   streams         per device, one per distinct priority among its tasks, most
 *                   urgent first; a stream runs its tasks in task-id order.
 */
#include <math.h>    /* isfinite */
#include <stdlib.h>  /* calloc, malloc, free, qsort */

#include "internal.h"

#define NONE (-1)

/* The task graph belongs to p: ops, devices, workers and buffers in range, durations usable. */
static sw_status check_graph(const sw_problem *p, const sw_task_graph *g, const double *durations) {
    for (int32_t b = 0; b < g->nbuffers; b++) {
        const sw_buffer *buf = &g->buffers[b];
        if (buf->op < 0 || buf->op >= p->nops || buf->device < 0 || buf->device >= p->ndev) {
            return SW_FAIL(SW_ERR_VALUE, "buffer %d: op %d or device %d is not in the problem (%d ops, %d devices)",
                           b, buf->op, buf->device, p->nops, p->ndev);
        }
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        if (t->op < 0 || t->op >= p->nops || t->device < 0 || t->device >= p->ndev || t->worker < 0 ||
            t->worker >= SW_MAX_DEVICES) {
            return SW_FAIL(SW_ERR_VALUE, "task %d: op %d, device %d or worker %d is not in the problem "
                           "(%d ops, %d devices): a task graph of another plan?", i, t->op, t->device, t->worker,
                           p->nops, p->ndev);
        }
        if (!(isfinite(durations[i]) && durations[i] >= 0.0)) {
            return SW_FAIL(SW_ERR_VALUE, "task %d: duration %g is not a finite number >= 0", i, durations[i]);
        }
    }
    return SW_OK;
}

/* op_da[op]: the largest, over the op's workers, of the worker's backward_data seconds. */
static sw_status dA_times(const sw_problem *p, const sw_task_graph *g, const double *durations, double *op_da) {
    int32_t *wbase = calloc((size_t)p->nops + 1, sizeof *wbase);
    if (!wbase) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->ntasks; i++) {   /* workers per op: 1 + the highest seen */
        const sw_task *t = &g->tasks[i];
        wbase[t->op + 1] = t->worker + 1 > wbase[t->op + 1] ? t->worker + 1 : wbase[t->op + 1];
    }
    for (int op = 0; op < p->nops; op++) {
        wbase[op + 1] += wbase[op];
    }
    double *sum = calloc((size_t)wbase[p->nops] + 1, sizeof *sum);
    if (!sum) {
        free(wbase);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        if (t->kind == SW_TASK_BACKWARD_DATA) {
            sum[wbase[t->op] + t->worker] += durations[i];
        }
    }
    for (int op = 0; op < p->nops; op++) {
        op_da[op] = 0.0;
        for (int32_t w = wbase[op]; w < wbase[op + 1]; w++) {
            op_da[op] = sum[w] > op_da[op] ? sum[w] : op_da[op];
        }
    }
    free(wbase);
    free(sum);
    return SW_OK;
}

/* Tasks reading each buffer, ascending (CSR over buffers). */
static sw_status readers_of(const sw_task_graph *g, int32_t **ptr, int32_t **ids) {
    *ptr = calloc((size_t)g->nbuffers + 1, sizeof **ptr);
    *ids = malloc(sizeof **ids * ((size_t)g->nio + 1));
    int32_t *fill = malloc(sizeof *fill * ((size_t)g->nbuffers + 1));
    if (!*ptr || !*ids || !fill) {
        free(fill);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    const int32_t *r;
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int k = 0, n = sw_tg_reads(g, t, &r); k < n; k++) {
            (*ptr)[r[k] + 1]++;
        }
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        (*ptr)[b + 1] += (*ptr)[b];
        fill[b] = (*ptr)[b];
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int k = 0, n = sw_tg_reads(g, t, &r); k < n; k++) {
            (*ids)[fill[r[k]]++] = t;
        }
    }
    free(fill);
    return SW_OK;
}

typedef struct {
    const sw_problem *p;
    const sw_task_graph *g;
    const sw_schedule *s;
    const int32_t *rptr, *rids;   /* readers of every buffer */
    int32_t *reuse;               /* per op: layers with weights before it in the forward pass */
} annotating;

/* reuse[op]: how many ops with weights come before op (ops are in forward order). */
static void reuse_ranks(const sw_problem *p, int32_t *reuse) {
    int32_t n = 0;
    for (int op = 0; op < p->nops; op++) {
        reuse[op] = n;
        int weighted = 0;
        for (int k = 0; k < p->ops[op].ninputs; k++) {
            weighted |= p->ops[op].inputs[k].role == SW_ROLE_WEIGHT;
        }
        n += weighted;
    }
}

/* Priority of a sub-task of op's layer path: Algorithm 1's path priority less the offset. */
static int32_t path_priority(const annotating *a, int32_t op) {
    int32_t path = a->s->paths.op_path[op];
    return a->s->policy == SW_SCHED_FIFO || path < 0 ? 0 : -a->s->paths.path_rank[path];
}

/* A weight's part in task i: 1 when it reads or writes a weight's gradient or momentum
 * or writes a weight, with *dw / *db set for the weight / bias slots touched (op *op). */
static int weight_work(const annotating *a, int32_t i, int *dw, int *db, int32_t *op) {
    const sw_task_graph *g = a->g;
    const int32_t *ids = g->io + g->io_ptr[i];
    int n = g->io_ptr[i + 1] - g->io_ptr[i], nreads = g->tasks[i].nreads;
    *dw = *db = 0;
    for (int k = 0; k < n; k++) {
        const sw_buffer *b = &g->buffers[ids[k]];
        int grad_state = b->kind == SW_BUF_PARAM_GRAD || b->kind == SW_BUF_MOMENTUM;
        if (grad_state || (b->kind == SW_BUF_PARAM && k >= nreads)) {
            *op = b->op;
            const sw_op *o = &a->p->ops[b->op];
            if (b->slot >= 0 && b->slot < o->ninputs && o->inputs[b->slot].bias) {
                *db = 1;
            } else {
                *dw = 1;
            }
        }
    }
    return *dw || *db;
}

/* Sub-task and priority of every task, last to first (what a task feeds comes later). */
static void classify(const annotating *a, sw_schedule *s) {
    const sw_task_graph *g = a->g;
    int32_t alpha = s->policy == SW_SCHED_FIFO ? 0 : s->alpha, beta = s->policy == SW_SCHED_FIFO ? 0 : s->beta;
    for (int32_t i = g->ntasks - 1; i >= 0; i--) {
        const sw_task *t = &g->tasks[i];
        int dw, db;
        int32_t wop = t->op;
        int8_t sub;
        int32_t prio;
        if (t->phase == SW_PHASE_FORWARD || t->kind == SW_TASK_BACKWARD_DATA) {
            sub = t->phase == SW_PHASE_FORWARD ? SW_SUB_FORWARD : SW_SUB_DA;
            prio = path_priority(a, t->op);
        } else if (t->phase == SW_PHASE_SYNC || t->phase == SW_PHASE_UPDATE) {   /* by reuse distance */
            sub = SW_SUB_SYNC;
            prio = s->policy == SW_SCHED_FIFO ? 0 : s->sync_floor - a->reuse[t->op];
        } else if (weight_work(a, i, &dw, &db, &wop)) {
            int32_t base = path_priority(a, wop), pw = base - alpha, pb = base - beta;
            sub = dw ? SW_SUB_DW : SW_SUB_DB;
            prio = dw && db ? (pw > pb ? pw : pb) : dw ? pw : pb;
        } else {   /* what it feeds: the most urgent later reader of what it writes */
            sub = NONE;
            prio = 0;
            const int32_t *w;
            for (int k = 0, n = sw_tg_writes(g, i, &w); k < n; k++) {
                for (int32_t e = a->rptr[w[k]]; e < a->rptr[w[k] + 1]; e++) {
                    int32_t r = a->rids[e];
                    if (r > i && (sub == NONE || s->priority[r] > prio ||
                                  (s->priority[r] == prio && s->subtask[r] < sub))) {
                        sub = s->subtask[r];
                        prio = s->priority[r];
                    }
                }
            }
            if (sub == NONE) {   /* read by nothing later: its phase's work of its op */
                sub = t->phase == SW_PHASE_BACKWARD ? SW_SUB_DA : SW_SUB_DW;
                prio = path_priority(a, t->op) - (sub == SW_SUB_DA ? 0 : alpha);
            }
        }
        s->subtask[i] = sub;
        s->priority[i] = prio;
        s->layer_path[i] = s->paths.op_path[t->op];
        s->path_priority[i] = path_priority(a, t->op);
    }
}

typedef struct {
    int32_t device, priority;
} stream_key;

static int by_device_then_urgency(const void *x, const void *y) {
    const stream_key *a = x, *b = y;
    if (a->device != b->device) {
        return a->device < b->device ? -1 : 1;
    }
    return (a->priority < b->priority) - (a->priority > b->priority);
}

/* One stream per distinct (device, priority), devices in order, most urgent first. */
static sw_status make_streams(const sw_task_graph *g, sw_schedule *s) {
    stream_key *keys = malloc(sizeof *keys * ((size_t)g->ntasks + 1));
    s->stream_ptr = calloc((size_t)s->ndev + 1, sizeof *s->stream_ptr);
    if (!keys || !s->stream_ptr) {
        free(keys);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        keys[i] = (stream_key){g->tasks[i].device, s->priority[i]};
    }
    qsort(keys, (size_t)g->ntasks, sizeof *keys, by_device_then_urgency);
    int32_t n = 0;
    for (int32_t i = 0; i < g->ntasks; i++) {
        if (n == 0 || by_device_then_urgency(&keys[n - 1], &keys[i]) != 0) {
            keys[n++] = keys[i];
        }
    }
    s->nstreams = n;
    s->stream_device = malloc(sizeof *s->stream_device * ((size_t)n + 1));
    s->stream_priority = malloc(sizeof *s->stream_priority * ((size_t)n + 1));
    if (!s->stream_device || !s->stream_priority) {
        free(keys);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int32_t k = 0; k < n; k++) {
        s->stream_device[k] = keys[k].device;
        s->stream_priority[k] = keys[k].priority;
        s->stream_ptr[keys[k].device + 1]++;
    }
    for (int32_t d = 0; d < s->ndev; d++) {
        s->stream_ptr[d + 1] += s->stream_ptr[d];
    }
    for (int32_t i = 0; i < g->ntasks; i++) {   /* binary search among the device's streams */
        stream_key key = {g->tasks[i].device, s->priority[i]};
        int32_t lo = s->stream_ptr[key.device], hi = s->stream_ptr[key.device + 1] - 1;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (by_device_then_urgency(&keys[mid], &key) < 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        s->stream[i] = lo;
    }
    free(keys);
    return SW_OK;
}

void sw_schedule_free(sw_schedule *s) {
    sw_layer_paths_free(&s->paths);
    free(s->op_da);
    free(s->subtask);
    free(s->layer_path);
    free(s->path_priority);
    free(s->priority);
    free(s->stream);
    free(s->stream_ptr);
    free(s->stream_device);
    free(s->stream_priority);
    *s = (sw_schedule){0};
}

sw_status sw_schedule_build(const sw_problem *p, const sw_task_graph *g, const double *durations,
                            sw_sched_policy policy, int32_t alpha, int32_t beta, sw_schedule *s) {
    *s = (sw_schedule){.policy = policy, .ntasks = g->ntasks, .ndev = p->ndev};
    if (policy != SW_SCHED_FIFO && policy != SW_SCHED_CRITICAL_PATH) {
        return SW_FAIL(SW_ERR_VALUE, "unknown scheduling policy %d", (int)policy);
    }
    if (alpha < -1 || beta < -1) {
        return SW_FAIL(SW_ERR_VALUE, "alpha and beta must be >= 0 (or -1: the default), got %d and %d", alpha, beta);
    }
    SW_TRY(check_graph(p, g, durations));
    size_t n = (size_t)g->ntasks + 1;
    s->op_da = malloc(sizeof *s->op_da * ((size_t)p->nops + 1));
    s->subtask = malloc(n);
    s->layer_path = malloc(sizeof *s->layer_path * n);
    s->path_priority = malloc(sizeof *s->path_priority * n);
    s->priority = malloc(sizeof *s->priority * n);
    s->stream = malloc(sizeof *s->stream * n);
    annotating a = {.p = p, .g = g, .s = s};
    int32_t *rptr = NULL, *rids = NULL;
    sw_status st = SW_OK;
    if (!s->op_da || !s->subtask || !s->layer_path || !s->path_priority || !s->priority || !s->stream) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    if (st == SW_OK) {
        st = dA_times(p, g, durations, s->op_da);
    }
    if (st == SW_OK) {
        st = sw_layer_paths_build(p, s->op_da, &s->paths);
    }
    if (st == SW_OK) {   /* Algorithm 1 leaves alpha, beta open: below every dA level, dB below dW */
        s->alpha = policy == SW_SCHED_FIFO ? 0 : alpha >= 0 ? alpha : s->paths.levels;
        s->beta = policy == SW_SCHED_FIFO ? 0 : beta >= 0 ? beta : 2 * s->paths.levels;
        s->sync_floor = policy == SW_SCHED_FIFO ? 0 : -(s->paths.levels + (s->alpha > s->beta ? s->alpha : s->beta));
        a.reuse = malloc(sizeof *a.reuse * ((size_t)p->nops + 1));
        st = a.reuse ? readers_of(g, &rptr, &rids) : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    if (st == SW_OK) {
        a.rptr = rptr;
        a.rids = rids;
        reuse_ranks(p, a.reuse);
        classify(&a, s);
        st = make_streams(g, s);
    }
    free(a.reuse);
    free(rptr);
    free(rids);
    if (st != SW_OK) {
        sw_schedule_free(s);
    }
    return st;
}
