/* memplan_check.c -- proving a memory plan safe for its task graph.
 *
 * The check trusts nothing the planner computed but the offsets and the reuse
 * edges.  Task t happens before task u when a chain of the runtime's order
 * (sw_task_order: dependencies, reuse edges, buffer hazards when a device has
 * several streams, and steps from a task to the next one of its stream) leads
 * from t to u.  Two buffers of a device whose byte ranges overlap are safe
 * when every task touching one of them happens before every task touching the
 * other; a buffer that lives across iterations (parameters, momentum) or that
 * the host reads after the step (loss outputs) must overlap nothing.  And as
 * the streams no longer keep a device's tasks in program order when there are
 * several, the check also proves every buffer's own conflicting accesses (a
 * write, and a read or write of the same buffer) ordered as in program order.
 */
#include <stdlib.h>  /* calloc, malloc, free, qsort */

#include "internal.h"
#include "core/sort_keys.h"

typedef struct {
    const sw_task_graph *g;
    const sw_streams *st;         /* the streams the order is for (NULL: one per device) */
    sw_task_order order;          /* what each task runs after on the runtime */
    int32_t *touch_ptr, *touch;   /* tasks touching each buffer (CSR) */
    int32_t *stamp, *stack;       /* search scratch */
    int32_t round;
} checker;

/* Does t happen before u?  A search backwards from u, pruned below t (every edge
 * goes forward in program order). */
static int happens_before(checker *c, int32_t t, int32_t u) {
    if (t >= u) {
        return 0;
    }
    if (sw_stream_of(c->g, c->st, t) == sw_stream_of(c->g, c->st, u)) {
        return 1;   /* a stream runs its tasks in program order */
    }
    c->round++;
    int32_t top = 0;
    c->stack[top++] = u;
    c->stamp[u] = c->round;
    while (top > 0) {
        int32_t v = c->stack[--top];
        for (int32_t i = c->order.ptr[v]; i < c->order.ptr[v + 1]; i++) {
            int32_t p = c->order.ids[i];
            if (p == t) {
                return 1;
            }
            if (p > t && c->stamp[p] != c->round) {
                c->stamp[p] = c->round;
                c->stack[top++] = p;
            }
        }
    }
    return 0;
}

static sw_status setup(checker *c, const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st) {
    c->g = g;
    c->st = st;
    size_t nt = (size_t)g->ntasks + 1;
    c->stamp = calloc(nt, sizeof *c->stamp);
    c->stack = malloc(sizeof *c->stack * nt);
    if (!c->stamp || !c->stack) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan check");
    }
    SW_TRY(sw_task_order_build_on(g, mp, st, &c->order));
    c->touch_ptr = calloc((size_t)g->nbuffers + 2, sizeof *c->touch_ptr);
    c->touch = malloc(sizeof *c->touch * ((size_t)g->nio + 1));
    if (!c->touch_ptr || !c->touch) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan check");
    }
    for (int32_t k = 0; k < g->nio; k++) {
        c->touch_ptr[g->io[k] + 2]++;
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        c->touch_ptr[b + 2] += c->touch_ptr[b + 1];
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            c->touch[c->touch_ptr[g->io[k] + 1]++] = t;
        }
    }
    return SW_OK;
}

static void teardown(checker *c) {
    sw_task_order_free(&c->order);
    free(c->stamp);
    free(c->stack);
    free(c->touch_ptr);
    free(c->touch);
}

/* Buffers a and b share bytes: every task touching one must happen before every task touching the other. */
static sw_status check_pair(checker *c, int32_t a, int32_t b, const char *host_read) {
    const sw_task_graph *g = c->g;
    if (sw_buffer_lives_throughout(g, a, host_read) || sw_buffer_lives_throughout(g, b, host_read)) {
        return SW_FAIL(SW_ERR_VALUE, "buffers %d and %d on device %d share memory, but %d lives across steps", a,
                       b, g->buffers[a].device, sw_buffer_lives_throughout(g, a, host_read) ? a : b);
    }
    const int32_t *ta = c->touch + c->touch_ptr[a], *tb = c->touch + c->touch_ptr[b];
    int32_t na = c->touch_ptr[a + 1] - c->touch_ptr[a], nb = c->touch_ptr[b + 1] - c->touch_ptr[b];
    if (na == 0 || nb == 0) {
        return SW_FAIL(SW_ERR_VALUE, "buffers %d and %d share memory, but one is never touched", a, b);
    }
    if (ta[0] > tb[0]) {   /* touch lists are in program order: the earlier buffer first */
        const int32_t *tt = ta;
        int32_t nn = na;
        ta = tb;
        na = nb;
        tb = tt;
        nb = nn;
        int32_t x = a;
        a = b;
        b = x;
    }
    for (int32_t i = 0; i < na; i++) {
        for (int32_t j = 0; j < nb; j++) {
            if (!happens_before(c, ta[i], tb[j])) {
                return SW_FAIL(SW_ERR_VALUE,
                               "buffers %d and %d on device %d share memory, but task %d (touching %d) does not "
                               "happen before task %d (touching %d)",
                               a, b, g->buffers[a].device, ta[i], a, tb[j], b);
            }
        }
    }
    return SW_OK;
}

/* A buffer both tasks touch (for the message). */
static int32_t shared_buffer(const sw_task_graph *g, int32_t t, int32_t u) {
    for (int32_t i = g->io_ptr[t]; i < g->io_ptr[t + 1]; i++) {
        for (int32_t j = g->io_ptr[u]; j < g->io_ptr[u + 1]; j++) {
            if (g->io[i] == g->io[j]) {
                return g->io[i];
            }
        }
    }
    return -1;
}

/* Every pair of consecutive conflicting accesses to a buffer (hazards.c with every task on a
 * stream of its own, so none is skipped) keeps its program order in the runtime's order. */
static sw_status check_hazards(checker *c) {
    const sw_task_graph *g = c->g;
    int32_t *own = malloc(sizeof *own * ((size_t)g->ntasks + 1)), *ptr = NULL, *ids = NULL;
    if (!own) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan check");
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        own[t] = t;
    }
    sw_streams each = {.ntasks = g->ntasks, .nstreams = g->ntasks, .stream = own};
    sw_status s = sw_tg_hazards(g, &each, &ptr, &ids);
    for (int32_t u = 0; u < g->ntasks && s == SW_OK; u++) {
        for (int32_t k = ptr[u]; k < ptr[u + 1] && s == SW_OK; k++) {
            if (!happens_before(c, ids[k], u)) {
                s = SW_FAIL(SW_ERR_VALUE, "tasks %d and %d conflict over buffer %d, but task %d does not happen "
                            "before task %d", ids[k], u, shared_buffer(g, ids[k], u), ids[k], u);
            }
        }
    }
    free(own);
    free(ptr);
    free(ids);
    return s;
}

sw_status sw_memory_plan_check(const sw_task_graph *g, const sw_memory_plan *mp) {
    return sw_memory_plan_check_on(g, mp, NULL);
}

sw_status sw_memory_plan_check_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st) {
    if (mp->nbuffers != g->nbuffers) {
        return SW_FAIL(SW_ERR_VALUE, "a memory plan of %d buffers for a graph of %d", mp->nbuffers, g->nbuffers);
    }
    for (int32_t e = 0; e < mp->nreuse; e++) {
        if (mp->reuse_from[e] < 0 || mp->reuse_to[e] >= g->ntasks || mp->reuse_from[e] >= mp->reuse_to[e]) {
            return SW_FAIL(SW_ERR_VALUE, "reuse edge %d (%d -> %d) must go forward between tasks of the graph", e,
                           mp->reuse_from[e], mp->reuse_to[e]);
        }
    }
    sw_keyed *order = malloc(sizeof *order * ((size_t)g->nbuffers + 1));
    char *host_read = NULL;
    checker c = {0};
    sw_status s = order ? sw_tg_host_reads(g, &host_read) : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    if (s == SW_OK) {
        s = setup(&c, g, mp, st);
    }
    if (s == SW_OK) {
        s = check_hazards(&c);
    }
    for (int r = 0; r < 2 * mp->ndev && s == SW_OK; r++) {   /* each device's arena, then its host region */
        int d = r % mp->ndev, hosted = r >= mp->ndev;
        int64_t arena = hosted ? (mp->host_arena ? mp->host_arena[d] : 0) : mp->arena[d];
        int32_t n = 0;
        for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {
            if (g->buffers[b].device != d || (g->buffers[b].kind == SW_BUF_HOST) != hosted) {
                continue;
            }
            int64_t bytes = sw_graph_buffer_bytes(g, b);
            if (mp->offset[b] < 0 || mp->offset[b] % mp->align != 0 || mp->offset[b] + bytes > arena) {
                s = SW_FAIL(SW_ERR_VALUE, "buffer %d (%lld bytes at %lld) lies outside device %d's %s of %lld "
                            "bytes or off its %lld-byte alignment", b, (long long)bytes, (long long)mp->offset[b],
                            d, hosted ? "host region" : "arena", (long long)arena, (long long)mp->align);
            } else if (bytes > 0) {
                order[n++] = (sw_keyed){mp->offset[b], 0, b};
            }
        }
        qsort(order, (size_t)n, sizeof *order, sw_by_keys);
        for (int32_t i = 0; i < n && s == SW_OK; i++) {
            int64_t end = order[i].key + sw_graph_buffer_bytes(g, order[i].id);
            for (int32_t j = i + 1; j < n && order[j].key < end && s == SW_OK; j++) {
                s = check_pair(&c, order[i].id, order[j].id, host_read);
            }
        }
    }
    teardown(&c);
    free(order);
    free(host_read);
    return s;
}
