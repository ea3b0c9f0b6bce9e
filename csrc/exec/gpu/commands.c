/* commands.c -- a step's recorded work in one global order, and its events (gpu_plan.h).
 *
 * The runtime records every task in program order (csrc/exec/executor.c): the waits for
 * other streams' tasks it must follow, the task, and a record when another stream waits for
 * it.  The CPU backend gives each thread its own list; the CUDA backend keeps the one list
 * and issues it in that order, because CUDA pairs a cudaStreamWaitEvent with the latest
 * cudaEventRecord of the event issued before it: were a wait issued before its record, it
 * would wait for the previous step's record and let the task run early.  The event plan
 * checks that this cannot happen and numbers the events.
 */
#include <stdlib.h>  /* realloc, free */

#include "gpu_plan.h"

sw_status sw_gpu_cmds_push(sw_gpu_cmds *l, int op, int stream, int32_t id) {
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 256;
        sw_gpu_cmd *grown = realloc(l->cmd, sizeof *grown * (size_t)cap);
        if (!grown) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory recording a work list");
        }
        l->cmd = grown;
        l->cap = cap;
    }
    l->cmd[l->n++] = (sw_gpu_cmd){op, stream, id};
    return SW_OK;
}

void sw_gpu_cmds_free(sw_gpu_cmds *l) {
    free(l->cmd);
    l->cmd = NULL;
    l->n = l->cap = 0;
}

sw_status sw_gpu_event_plan(const sw_gpu_cmds *l, int32_t ntasks, const int *stream_gpu, int nstreams,
                            int32_t *slot, int32_t *nslots, sw_gpu_event_stats *stats) {
    /* per task: the stream it ran on in this list (-1: not yet), whether recorded in this list */
    int32_t *ran_on = malloc(sizeof *ran_on * ((size_t)ntasks + 1));
    int32_t *recorded_on = malloc(sizeof *recorded_on * ((size_t)ntasks + 1));
    if (!ran_on || !recorded_on) {
        free(ran_on);
        free(recorded_on);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory planning events");
    }
    for (int32_t t = 0; t < ntasks; t++) {
        ran_on[t] = recorded_on[t] = -1;
    }
    sw_status s = SW_OK;
    stats->events = stats->waits = stats->cross_gpu_waits = 0;
    for (int32_t i = 0; i < l->n && s == SW_OK; i++) {
        const sw_gpu_cmd *c = &l->cmd[i];
        if (c->id < 0 || c->id >= ntasks || c->stream < 0 || c->stream >= nstreams || c->op < SW_GPU_RUN ||
            c->op > SW_GPU_RECORD) {
            s = SW_FAIL(SW_ERR_INTERNAL, "command %d: op %d on stream %d of task %d is out of range", i, c->op,
                        c->stream, c->id);
        } else if (c->op == SW_GPU_RUN) {
            ran_on[c->id] = c->stream;
        } else if (c->op == SW_GPU_RECORD) {
            if (ran_on[c->id] != c->stream) {
                s = SW_FAIL(SW_ERR_INTERNAL, "command %d records task %d on stream %d, which has not run it", i,
                            c->id, c->stream);
            }
            recorded_on[c->id] = c->stream;
            if (slot[c->id] < 0) {
                slot[c->id] = (*nslots)++;
            }
        } else {
            if (recorded_on[c->id] < 0) {
                s = SW_FAIL(SW_ERR_INTERNAL, "command %d: stream %d waits for task %d, which no earlier command "
                            "records", i, c->stream, c->id);
            } else {
                stats->waits++;
                stats->cross_gpu_waits += stream_gpu[recorded_on[c->id]] != stream_gpu[c->stream];
            }
        }
    }
    for (int32_t t = 0; t < ntasks; t++) {
        stats->events += recorded_on[t] >= 0;
    }
    free(ran_on);
    free(recorded_on);
    return s;
}
