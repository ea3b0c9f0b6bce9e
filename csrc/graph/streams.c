/* streams.c -- which stream every task runs on, and whether a device has several.
 *
 * A schedule (schedule.c) gives every task a stream; the runtime, its order and
 * its memory plan read that map as an sw_streams view, and NULL stands for the
 * map the lowering was made for: one stream per device, in program order.  The
 * map is checked once where it enters (the runtime, the Python bindings), so
 * the passes that read it may index with it freely.
 */
#include <stdlib.h>  /* calloc, free */

#include "internal.h"

sw_streams sw_schedule_streams(const sw_schedule *s) {
    return (sw_streams){.ntasks = s->ntasks, .nstreams = s->nstreams, .stream = s->stream,
                        .stream_device = s->stream_device, .stream_priority = s->stream_priority};
}

sw_status sw_streams_check(const sw_task_graph *g, int ndev, const sw_streams *st) {
    if (!st) {
        return SW_OK;
    }
    if (st->ntasks != g->ntasks) {
        return SW_FAIL(SW_ERR_VALUE, "streams for %d tasks, but the task graph has %d: a schedule of another plan?",
                       st->ntasks, g->ntasks);
    }
    if (st->nstreams < 0 || (st->nstreams > 0 && (!st->stream_device || !st->stream_priority)) ||
        (st->ntasks > 0 && !st->stream)) {
        return SW_FAIL(SW_ERR_VALUE, "streams: %d streams without their devices and priorities", st->nstreams);
    }
    for (int32_t k = 0; k < st->nstreams; k++) {
        if (st->stream_device[k] < 0 || st->stream_device[k] >= ndev) {
            return SW_FAIL(SW_ERR_VALUE, "stream %d lies on device %d of %d", k, st->stream_device[k], ndev);
        }
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        int32_t k = st->stream[t];
        if (k < 0 || k >= st->nstreams) {
            return SW_FAIL(SW_ERR_VALUE, "task %d runs on stream %d of %d", t, k, st->nstreams);
        }
        if (st->stream_device[k] != g->tasks[t].device) {
            return SW_FAIL(SW_ERR_VALUE, "task %d runs on device %d, but its stream %d lies on device %d: a schedule "
                           "of another plan?", t, g->tasks[t].device, k, st->stream_device[k]);
        }
    }
    return SW_OK;
}

int sw_streams_several(const sw_streams *st, int ndev) {
    if (!st || ndev < 1) {
        return 0;
    }
    int32_t *count = calloc((size_t)ndev, sizeof *count);
    if (!count) {
        return 1;   /* the safe answer: every ordering made explicit */
    }
    int several = 0;
    for (int32_t k = 0; k < st->nstreams && !several; k++) {
        several = ++count[st->stream_device[k]] > 1;
    }
    free(count);
    return several;
}
