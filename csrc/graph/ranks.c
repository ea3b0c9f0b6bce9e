/* ranks.c -- a task graph split over processes ("ranks"): each copy between devices of two
 * ranks becomes a send half and a receive half.
 *
 * A job of several processes runs one task graph: every rank lowers the same plan, and rank r
 * runs the tasks of its devices (rank[d] == r).  Devices meet only through copies (internal.h:
 * a copy runs on its destination and reads its source's buffer), so a copy whose two devices
 * live in different ranks is the only task that would touch another process's memory.  This
 * pass replaces each such copy, in place in program order, by
 *
 *   send  on the source device: reads the source buffer (the copy's box of it), depends on the
 *         copy's dependencies of the source's rank; the runtime packs the box into a staging
 *         buffer and hands it to the comm layer.  A task of the source's rank that depended on
 *         the copy (a write into the buffer after the copy has read it) depends on the send;
 *   recv  on the destination device, right after it: writes the destination buffer, depends on
 *         the send (an edge between ranks: the runtime turns it into waiting for the message)
 *         and on the copy's dependencies of the destination's rank.
 *
 * Everything else stays as it is -- same-rank copies, and every sum, which reads only buffers
 * on its own device -- so each rank computes exactly the sums of the one-process run, in the
 * same order.  For both halves src_device names the device at the other end (the send's
 * destination, the recv's source), and nbytes the bytes on the wire: the box's elements times
 * the buffer's element size (float32, or double for batchnorm statistics).
 */
#include <stdlib.h>  /* malloc, free */
#include <string.h>  /* memset */

#include "internal.h"

/* The box a copy moves: the intersection of its source's and destination's boxes (the copy
 * kernels move exactly that, whatever the task's box says). */
static void moved_box(const sw_buffer *from, const sw_buffer *to, sw_box *out) {
    out->rank = from->box.rank;
    for (int d = 0; d < out->rank; d++) {
        int64_t lo = from->box.lo[d] > to->box.lo[d] ? from->box.lo[d] : to->box.lo[d];
        int64_t hi = from->box.hi[d] < to->box.hi[d] ? from->box.hi[d] : to->box.hi[d];
        out->lo[d] = lo;
        out->hi[d] = hi > lo ? hi : lo;
    }
}

/* The new id of old task d as a dependency of a task of rank `r`: d's own new id when it runs on
 * rank r; for a split copy, its send when r is the source's rank, its recv when r is the
 * destination's (a task of the source's rank that waits for a copy to have read its source --
 * a ring's next write into the buffer the copy sends -- waits for the send); -1 otherwise. */
static int32_t dep_on(const sw_task_graph *g, const int32_t *rank, const int32_t *new_id, const int32_t *send_of,
                      int32_t d, int r) {
    const sw_task *t = &g->tasks[d];
    if (send_of[d] >= 0) {
        return r == rank[t->src_device] ? send_of[d] : r == rank[t->device] ? new_id[d] : -1;
    }
    return rank[t->device] == r ? new_id[d] : -1;
}

sw_status sw_split_ranks(const sw_task_graph *g, int ndev, const int32_t *rank, sw_task_graph *out,
                         int32_t **origin_out) {
    memset(out, 0, sizeof *out);
    sw_tg_copy_header(g, out);
    *origin_out = NULL;
    for (int d = 0; d < ndev; d++) {
        if (rank[d] < 0) {
            return SW_FAIL(SW_ERR_VALUE, "device %d has rank %d: ranks are >= 0", d, rank[d]);
        }
    }
    int32_t n = g->ntasks;
    int32_t *new_id = malloc(sizeof *new_id * ((size_t)n + 1));   /* old task -> its new id (a split copy: the recv) */
    int32_t *send_of = malloc(sizeof *send_of * ((size_t)n + 1));  /* old task -> its send (a split copy), else -1 */
    int32_t *origin = malloc(sizeof *origin * (2 * (size_t)n + 1));
    int32_t *deps_a = malloc(sizeof *deps_a * ((size_t)g->ndeps + 1));
    int32_t *deps_b = malloc(sizeof *deps_b * ((size_t)g->ndeps + 2));
    sw_status s = new_id && send_of && origin && deps_a && deps_b ? SW_OK
                                                       : SW_FAIL(SW_ERR_NOMEM, "out of memory splitting %d tasks", n);
    for (int32_t b = 0; b < g->nbuffers && s == SW_OK; b++) {   /* the same buffers, the same ids */
        const sw_buffer *buf = &g->buffers[b];
        int32_t id;
        if (buf->device < 0 || buf->device >= ndev) {
            s = SW_FAIL(SW_ERR_VALUE, "buffer %d lies on device %d of %d", b, buf->device, ndev);
            break;
        }
        s = sw_tg_buffer_copy(out, buf, &id);
    }
    for (int32_t t = 0; t < n && s == SW_OK; t++) {
        const sw_task *task = &g->tasks[t];
        const int32_t *d0 = g->deps + g->dep_ptr[t];
        int nd = g->dep_ptr[t + 1] - g->dep_ptr[t];
        const int32_t *reads, *writes;
        int nr = sw_tg_reads(g, t, &reads), nw = sw_tg_writes(g, t, &writes);
        if (task->device < 0 || task->device >= ndev) {
            s = SW_FAIL(SW_ERR_VALUE, "task %d runs on device %d of %d", t, task->device, ndev);
            break;
        }
        int here = rank[task->device];
        int split = task->kind == SW_TASK_COPY && task->src_device >= 0 && task->src_device < ndev &&
                    rank[task->src_device] != here;
        send_of[t] = -1;
        if (!split) {   /* every dependency on its own rank: devices meet only through copies */
            for (int k = 0; k < nd && s == SW_OK; k++) {
                deps_a[k] = dep_on(g, rank, new_id, send_of, d0[k], here);
                if (deps_a[k] < 0) {
                    s = SW_FAIL(SW_ERR_INTERNAL, "task %d (kind %d, device %d) depends on task %d of device %d, "
                                "another rank's, and is not a copy", t, task->kind, task->device, d0[k],
                                g->tasks[d0[k]].device);
                }
            }
            sw_task_io io = {reads, nr, writes, nw};
            if (s == SW_OK) {
                sw_task copy = sw_tg_task_for(out, g, task);
                s = sw_tg_task(out, &copy, deps_a, nd, &io, &new_id[t]);
            }
            if (s == SW_OK) {
                origin[new_id[t]] = t;
            }
            continue;
        }
        if (nr != 1 || nw != 1) {
            s = SW_FAIL(SW_ERR_INTERNAL, "copy %d reads %d and writes %d buffers (one each expected)", t, nr, nw);
            break;
        }
        int there = rank[task->src_device];
        int na = 0, nb = 0;
        for (int k = 0; k < nd && s == SW_OK; k++) {   /* each dependency goes with the half of its rank */
            int32_t on_a = dep_on(g, rank, new_id, send_of, d0[k], there);
            int32_t on_b = on_a < 0 ? dep_on(g, rank, new_id, send_of, d0[k], here) : -1;
            if (on_a >= 0) {
                deps_a[na++] = on_a;
            } else if (on_b >= 0) {
                deps_b[nb++] = on_b;
            } else {
                s = SW_FAIL(SW_ERR_INTERNAL, "copy %d from rank %d to rank %d depends on task %d of device %d, a "
                            "third rank's", t, there, here, d0[k], g->tasks[d0[k]].device);
            }
        }
        if (s != SW_OK) {
            break;
        }
        sw_box box;
        moved_box(&g->buffers[reads[0]], &g->buffers[writes[0]], &box);
        sw_task send = *task, recv = *task;
        send.kind = SW_TASK_SEND;
        send.device = task->src_device;
        send.src_device = task->device;   /* the other end */
        sw_tg_set_task_box(out, &send, &box);
        recv.box = send.box;   /* (both of graph out) */
        send.elements = recv.elements = sw_box_volume(&box);
        send.nbytes = recv.nbytes = sw_box_volume(&box) * sw_buffer_element_bytes(&g->buffers[reads[0]]);
        recv.kind = SW_TASK_RECV;
        sw_task_io send_io = {reads, 1, NULL, 0}, recv_io = {NULL, 0, writes, 1};
        int32_t send_id;
        s = sw_tg_task(out, &send, deps_a, na, &send_io, &send_id);
        if (s == SW_OK) {
            origin[send_id] = t;
            send_of[t] = send_id;
            deps_b[nb++] = send_id;
            s = sw_tg_task(out, &recv, deps_b, nb, &recv_io, &new_id[t]);
        }
        if (s == SW_OK) {
            origin[new_id[t]] = t;
        }
    }
    free(new_id);
    free(send_of);
    free(deps_a);
    free(deps_b);
    if (s != SW_OK) {
        free(origin);
        sw_task_graph_free(out);
        return s;
    }
    *origin_out = origin;
    return SW_OK;
}
