/* pipeline.c -- several training steps in one launch, with no barrier between them.
 *
 * A step (executor.c) runs one iteration's list and waits for all of it: the next
 * step's forward starts only once every device has finished every update.  Here the
 * runtime records one more list, SW_LIST_PIPELINE, from the graph of `copies`
 * iterations concatenated (iterations.c): iteration i's task t is task i * n + t
 * (n tasks per iteration), on t's stream, after every task the order of the
 * concatenated graph puts before it (sw_task_order_build_on: dependencies, the reuse
 * edges of one iteration's offsets over the concatenated graph, and the hazards on
 * the buffers every iteration shares).  So layer j of iteration i + 1's forward waits
 * for layer j's update of iteration i (the parameter's hazard or its stream's program
 * order), not for the whole of iteration i; and a byte of an arena iteration i + 1
 * takes over waits for iteration i's last task on it.
 *
 * The kernels run the tasks of one iteration: task i * n + t runs task t with the
 * arguments of iteration i (its minibatch, labels, optimizer values, step count) and
 * its loss sums at loss_sums[i * n + t] (backend_cpu.c).  Every buffer of iteration i
 * lies at its one-iteration offset, so the addresses are those of one step.  Each
 * parameter's updates stay in iteration order (its hazards), each iteration's sums in
 * task order: the numbers are those of the steps one at a time, bit for bit.
 */
#include <stdlib.h>  /* malloc, realloc, free */
#include <string.h>  /* memset */

#include "runtime_internal.h"  /* struct sw_runtime */

/* Per task T of the concatenated graph, the tasks another stream must record for it
 * (recorded[d] = 1) and, in record_pipeline, the waits. */
static int other_stream(const sw_runtime *rt, int32_t n, int32_t t, int32_t d) {
    return rt->stream[d % n] != rt->stream[t % n];
}

static sw_status record_pipeline(sw_runtime *rt, const sw_iterations *it, const sw_task_order *order) {
    int32_t total = it->g.ntasks, n = rt->g.ntasks;
    uint8_t *recorded = calloc((size_t)total + 1, 1);
    if (!recorded) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory recording %d steps back to back", it->copies);
    }
    /* one rank of several: only its tasks, which wait for none of another rank's (in_list) */
    const uint8_t *mine = rt->in_list[SW_LIST_TRAIN];
    for (int32_t t = 0; t < total; t++) {
        for (int32_t k = order->ptr[t]; mine[t % n] && k < order->ptr[t + 1]; k++) {
            recorded[order->ids[k]] |= (uint8_t)(mine[order->ids[k] % n] && other_stream(rt, n, t, order->ids[k]));
        }
    }
    const sw_backend_i *bi = rt->backend->i;
    sw_status s = SW_OK;
    for (int32_t t = 0; t < total && s == SW_OK; t++) {
        if (!mine[t % n]) {
            continue;
        }
        int st = rt->backend_stream[rt->stream[t % n]];
        for (int32_t k = order->ptr[t]; k < order->ptr[t + 1] && s == SW_OK; k++) {
            if (mine[order->ids[k] % n] && other_stream(rt, n, t, order->ids[k])) {
                s = bi->enqueue_wait(rt->backend, SW_LIST_PIPELINE, st, order->ids[k]);
            }
        }
        if (s == SW_OK && rt->g.tasks[t % n].kind == SW_TASK_RECV) {   /* its message, from another rank */
            s = bi->enqueue_arrival(rt->backend, SW_LIST_PIPELINE, st, t);
        }
        if (s == SW_OK) {
            s = bi->enqueue_task(rt->backend, SW_LIST_PIPELINE, st, t);
        }
        if (s == SW_OK && recorded[t]) {
            s = bi->enqueue_record(rt->backend, SW_LIST_PIPELINE, st, t);
        }
    }
    free(recorded);
    return s;
}

/* Room for every iteration's loss sums and task times (realloc: nothing runs meanwhile). */
static sw_status grow_per_task(sw_runtime *rt, int copies) {
    size_t n = (size_t)copies * (size_t)rt->g.ntasks + 1;
    double *sums = realloc(rt->loss_sums, sizeof *sums * n);
    if (sums) {
        rt->loss_sums = sums;
    }
    int64_t *ns = sums ? realloc(rt->task_ns, sizeof *ns * 2 * n) : NULL;
    if (!ns) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for %d steps back to back", copies);
    }
    rt->task_ns = ns;
    memset(rt->loss_sums, 0, sizeof *sums * n);
    memset(rt->task_ns, 0, sizeof *ns * 2 * n);
    return SW_OK;
}

sw_status sw_runtime_pipeline(sw_runtime *rt, int copies) {
    if (copies < 2 || copies > SW_MAX_PIPELINE) {
        return SW_FAIL(SW_ERR_VALUE, "steps back to back: 2 .. %d steps per launch, got %d", SW_MAX_PIPELINE,
                       copies);
    }
    if (rt->pipeline == copies) {
        return SW_OK;
    }
    if (rt->pipeline < 0) {
        return SW_FAIL(SW_ERR_VALUE, "recording steps back to back failed on this runtime before");
    }
    if (rt->pipeline) {
        return SW_FAIL(SW_ERR_VALUE, "this runtime runs %d steps back to back already, not %d (one count per "
                       "runtime)", rt->pipeline, copies);
    }
    if (rt->backend->i->to_host) {
        return SW_FAIL(SW_ERR_VALUE, "steps back to back run on host-memory backends (the CPU backend) so far, "
                       "not on %s", rt->backend->i->name);
    }
    for (int32_t t = 0; t < rt->g.ntasks; t++) {
        if (rt->g.tasks[t].kind == SW_TASK_SWAP_OUT || rt->g.tasks[t].kind == SW_TASK_SWAP_IN) {
            return SW_FAIL(SW_ERR_VALUE, "steps back to back are not run with a swap plan");
        }
    }
    if ((int64_t)copies * rt->g.ntasks > INT32_MAX / 4) {
        return SW_FAIL(SW_ERR_VALUE, "%d steps of %d tasks are too many tasks for one launch", copies, rt->g.ntasks);
    }
    sw_streams view = sw_runtime_streams(rt);
    const sw_streams *st = rt->several_streams ? &view : NULL;   /* as the runtime's memory plan was made */
    sw_iterations it;
    SW_TRY(sw_iterations_build(&rt->g, &rt->mp, st, copies, &it));
    sw_task_order order = {0};
    sw_status s = SW_OK;
    for (int d = 0; d < rt->ndev && s == SW_OK; d++) {   /* the same offsets: the arenas cannot grow */
        if (it.mp.arena[d] > rt->mp.arena[d]) {
            s = SW_FAIL(SW_ERR_INTERNAL, "device %d: %d steps back to back need %lld arena bytes, the runtime has "
                        "%lld", d, copies, (long long)it.mp.arena[d], (long long)rt->mp.arena[d]);
        }
    }
    if (s == SW_OK) {
        s = sw_task_order_build_on(&it.g, &it.mp, sw_iterations_streams(&it), &order);
    }
    if (s == SW_OK) {
        rt->pipeline = copies;   /* the backend sizes its events by it */
        s = grow_per_task(rt, copies);
    }
    if (s == SW_OK && rt->messages) {   /* a staging buffer per message and iteration */
        s = sw_messages_reserve(rt->messages, copies);
    }
    if (s == SW_OK) {
        s = record_pipeline(rt, &it, &order);
        rt->pipeline = s == SW_OK ? copies : -1;   /* a partly recorded list is never launched */
    } else {
        rt->pipeline = 0;
    }
    sw_task_order_free(&order);
    sw_iterations_free(&it);
    return s;
}

sw_status sw_runtime_steps(sw_runtime *rt, int copies, const sw_step_args *args, double *loss) {
    if (rt->pipeline < 2 || copies != rt->pipeline) {
        return SW_FAIL(SW_ERR_VALUE, "this runtime runs %d steps back to back, not %d", rt->pipeline, copies);
    }
    for (int i = 0; i < copies; i++) {   /* before any task runs: a refused step changes nothing */
        if (args[i].bn_mode != SW_BN_UPDATE) {
            return SW_FAIL(SW_ERR_VALUE, "step %d of %d back to back is not a training step", i, copies);
        }
        SW_TRY(sw_optim_check(&args[i].opt, rt->optimizer_state));
    }
    size_t n = (size_t)rt->g.ntasks * (size_t)copies;
    memset(rt->loss_sums, 0, sizeof *rt->loss_sums * n);
    memset(rt->task_ns, 0, sizeof *rt->task_ns * 2 * n);
    SW_TRY(sw_runtime_launch(rt, SW_LIST_PIPELINE, args, copies));
    for (int i = 0; i < copies; i++) {
        const double *sums = rt->loss_sums + (size_t)i * (size_t)rt->g.ntasks;
        double total = 0.0;
        for (int32_t t = 0; t < rt->g.ntasks; t++) {   /* in task order, as sw_runtime_step */
            if (rt->g.tasks[t].kind == SW_TASK_LOSS) {
                total += sums[t];
            }
        }
        loss[i] = total / (double)rt->batch;
    }
    return SW_OK;
}
