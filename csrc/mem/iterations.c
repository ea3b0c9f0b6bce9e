/* iterations.c -- several training iterations back to back, with no barrier between them.
 *
 * A step's task graph is one iteration; the runtime's arenas hold one iteration's
 * buffers.  Running iteration k + 1 while iteration k's tail (its synchronization and
 * updates) still runs needs the order between the two: layer i of the next forward
 * after layer i's update (data flow through the parameters), and every byte of an arena
 * taken over by iteration k + 1 only after iteration k's last task touching it.  Both
 * come from the same passes as within one iteration, run on the graph of the iterations
 * concatenated (sw_iterations_build):
 *
 *   tasks     iteration i's task t is i * n + t (n tasks per iteration), same device,
 *             same stream: a stream runs its list once per iteration, in order
 *   buffers   a buffer living across steps (parameters, momentum, running statistics,
 *             the loss outputs the host reads) is one buffer in every iteration, so the
 *             hazards (hazards.c) order its accesses across iterations: the next
 *             forward reads a weight after its update wrote it, an update writes it
 *             after the last iteration's reads; every other buffer is a new buffer in
 *             each iteration at the same offset, so the memory plan's reuse edges order
 *             iteration k + 1's first occupant of every byte after iteration k's last
 *   plan      the one iteration's offsets (sw_memory_plan_build_at): the arenas do not
 *             grow, the reuse edges are computed on the concatenated graph by the rule
 *             of one iteration (memplan.c, memplan_streams.c)
 *
 * sw_task_order_build_on of the result is the order of the iterations back to back, and
 * sw_memory_plan_check_on proves it safe.  Two iterations are enough for a runtime that
 * repeats the second's waits: what iteration k + 2 must follow in iteration k it follows
 * through iteration k + 1 (every byte's occupants form a chain, iteration after
 * iteration, and every persistent buffer's accesses too).
 */
#include <stdlib.h>  /* malloc, free */
#include <string.h>  /* memset, memcpy */

#include "internal.h"

void sw_iterations_free(sw_iterations *it) {
    sw_task_graph_free(&it->g);
    sw_memory_plan_free(&it->mp);
    free(it->buffer_of);
    free(it->stream);
    memset(it, 0, sizeof *it);
}

/* The concatenated graph: buffers first (shared ones keep their id), then the tasks. */
static sw_status unroll(const sw_task_graph *g, const char *host, int copies, sw_iterations *it, int32_t *id_of) {
    int32_t nb = g->nbuffers;
    sw_tg_copy_header(g, &it->g);
    for (int c = 0; c < copies; c++) {
        for (int32_t b = 0; b < nb; b++) {
            if (c > 0 && sw_buffer_lives_throughout(g, b, host)) {
                id_of[(size_t)c * nb + b] = b;
                continue;
            }
            const sw_buffer *x = &g->buffers[b];
            int32_t id;
            SW_TRY(sw_tg_buffer_copy(&it->g, x, &id));
            id_of[(size_t)c * nb + b] = id;
        }
    }
    int32_t *deps = malloc(sizeof *deps * ((size_t)g->ndeps + 1)), *io = malloc(sizeof *io * ((size_t)g->nio + 1));
    sw_status s = deps && io ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for %d iterations", copies);
    for (int c = 0; c < copies && s == SW_OK; c++) {
        for (int32_t t = 0; t < g->ntasks && s == SW_OK; t++) {
            int nd = 0, nio = 0;
            for (int32_t k = g->dep_ptr[t]; k < g->dep_ptr[t + 1]; k++) {
                deps[nd++] = c * g->ntasks + g->deps[k];
            }
            for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
                io[nio++] = id_of[(size_t)c * nb + g->io[k]];
            }
            sw_task_io tio = {io, g->tasks[t].nreads, io + g->tasks[t].nreads, nio - g->tasks[t].nreads};
            int32_t id;
            sw_task copy = sw_tg_task_for(&it->g, g, &g->tasks[t]);
            s = sw_tg_task(&it->g, &copy, deps, nd, &tio, &id);
        }
    }
    free(deps);
    free(io);
    return s;
}

sw_status sw_iterations_build(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st, int copies,
                              sw_iterations *it) {
    memset(it, 0, sizeof *it);
    if (copies < 1 || (int64_t)copies * g->ntasks > INT32_MAX / 2 || (int64_t)copies * g->nbuffers > INT32_MAX / 2) {
        return SW_FAIL(SW_ERR_VALUE, "iterations back to back: need 1 .. a few copies of the graph, got %d", copies);
    }
    if (mp->nbuffers != g->nbuffers) {
        return SW_FAIL(SW_ERR_VALUE, "the memory plan has %d buffers, the graph %d", mp->nbuffers, g->nbuffers);
    }
    SW_TRY(sw_streams_check(g, mp->ndev, st));
    it->copies = copies;
    it->ntasks = g->ntasks;
    char *host = NULL;
    size_t nid = (size_t)copies * (size_t)g->nbuffers + 1;
    int32_t *id_of = malloc(sizeof *id_of * nid);
    int64_t *offset = NULL;
    sw_status s = id_of ? sw_tg_host_reads(g, &host) : SW_FAIL(SW_ERR_NOMEM, "out of memory for iterations");
    if (s == SW_OK) {
        s = unroll(g, host, copies, it, id_of);
    }
    if (s == SW_OK) {
        it->buffer_of = malloc(sizeof *it->buffer_of * ((size_t)it->g.nbuffers + 1));
        offset = malloc(sizeof *offset * ((size_t)it->g.nbuffers + 1));
        it->stream = st ? malloc(sizeof *it->stream * ((size_t)it->g.ntasks + 1)) : NULL;
        if (!it->buffer_of || !offset || (st && !it->stream)) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for iterations");
        }
    }
    for (size_t k = 0; s == SW_OK && k + 1 < nid; k++) {
        int32_t b = (int32_t)(k % (size_t)g->nbuffers);
        it->buffer_of[id_of[k]] = b;
        offset[id_of[k]] = mp->offset[b];
    }
    if (s == SW_OK && st) {
        for (int32_t t = 0; t < it->g.ntasks; t++) {
            it->stream[t] = st->stream[t % g->ntasks];
        }
        it->st = (sw_streams){it->g.ntasks, st->nstreams, it->stream, st->stream_device, st->stream_priority};
    }
    if (s == SW_OK) {
        s = sw_memory_plan_build_at(&it->g, mp->ndev, mp->align, st ? &it->st : NULL, offset, &it->mp);
    }
    free(host);
    free(id_of);
    free(offset);
    if (s != SW_OK) {
        sw_iterations_free(it);
    }
    return s;
}
