/* backend_record.c -- a backend that records the runtime's work as the CUDA backend does and
 * runs none of it (backend_ext.h).
 *
 * The CUDA backend keeps one list per work list in the runtime's recording order and issues
 * it from one thread (gpu/commands.c says why); this backend keeps the same lists, so
 * that tests check the CUDA backend's stream and event plan on real plans on any machine.
 */
#define _POSIX_C_SOURCE 200809L   /* posix_memalign */
#include <stdlib.h>  /* calloc, free, realloc, posix_memalign */

#include "gpu/gpu_plan.h"  /* sw_gpu_cmds */
#include "backend_ext.h"

typedef struct {
    sw_backend base;
    int ndev;
    sw_gpu_cmds lists[SW_NLISTS];
    int nstreams, cap;
    int *device, *priority;   /* per stream */
} record_backend;

static sw_status arena_new(sw_backend *b, int device, size_t bytes, void **base) {
    (void)b;
    if (posix_memalign(base, 64, bytes ? bytes : 64) != 0) {
        return SW_FAIL(SW_ERR_NOMEM, "cannot allocate an arena of %zu bytes for device %d", bytes, device);
    }
    return SW_OK;
}

static void arena_free(sw_backend *b, int device, void *base) {
    (void)b;
    (void)device;
    free(base);
}

static sw_status stream_new(sw_backend *b, int device, int priority, int *stream) {
    record_backend *be = (record_backend *)b;
    if (device < 0 || device >= be->ndev) {
        return SW_FAIL(SW_ERR_VALUE, "no device %d on a record backend of %d", device, be->ndev);
    }
    if (be->nstreams == be->cap) {
        int cap = be->cap ? 2 * be->cap : 8;
        int *d = realloc(be->device, sizeof *d * (size_t)cap);
        if (d) {
            be->device = d;
        }
        int *p = d ? realloc(be->priority, sizeof *p * (size_t)cap) : NULL;
        if (!p) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for streams");
        }
        be->priority = p;
        be->cap = cap;
    }
    be->device[be->nstreams] = device;
    be->priority[be->nstreams] = priority;
    *stream = be->nstreams++;
    return SW_OK;
}

static sw_status push(sw_backend *b, int list, int stream, int op, int32_t id) {
    record_backend *be = (record_backend *)b;
    if (list < 0 || list >= SW_NLISTS || stream < 0 || stream >= be->nstreams) {
        return SW_FAIL(SW_ERR_INTERNAL, "record backend: list %d, stream %d out of range", list, stream);
    }
    return sw_gpu_cmds_push(&be->lists[list], op, stream, id);
}

static sw_status enqueue_task(sw_backend *b, int list, int stream, int32_t task) {
    return push(b, list, stream, SW_GPU_RUN, task);
}

static sw_status enqueue_wait(sw_backend *b, int list, int stream, int32_t event) {
    return push(b, list, stream, SW_GPU_WAIT, event);
}

static sw_status enqueue_record(sw_backend *b, int list, int stream, int32_t event) {
    return push(b, list, stream, SW_GPU_RECORD, event);
}

static sw_status launch(sw_backend *b, int list, const sw_step_args *args) {
    (void)b;
    (void)list;
    (void)args;
    return SW_FAIL(SW_ERR_VALUE, "the record backend records a plan's work and runs none of it (tests only)");
}

static void workspace_stats(sw_backend *b, int64_t *bytes, int64_t *grows) {
    (void)b;
    *bytes = *grows = 0;
}

static void destroy(sw_backend *b) {
    record_backend *be = (record_backend *)b;
    for (int l = 0; l < SW_NLISTS; l++) {
        sw_gpu_cmds_free(&be->lists[l]);
    }
    free(be->device);
    free(be->priority);
    free(be);
}

static const sw_backend_i RECORD_BACKEND = {
    .name = "record",
    .arena_new = arena_new,
    .arena_free = arena_free,
    .stream_new = stream_new,
    .enqueue_task = enqueue_task,
    .enqueue_wait = enqueue_wait,
    .enqueue_record = enqueue_record,
    .launch = launch,
    .to_host = NULL,
    .from_host = NULL,
    .workspace_stats = workspace_stats,
    .wait_times = NULL,
    .destroy = destroy,
};

sw_status sw_backend_record_new(int ndev, sw_backend **out) {
    *out = NULL;
    if (ndev < 1) {
        return SW_FAIL(SW_ERR_VALUE, "a record backend needs >= 1 device, got %d", ndev);
    }
    record_backend *be = calloc(1, sizeof *be);
    if (!be) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a record backend");
    }
    be->base.i = &RECORD_BACKEND;
    be->ndev = ndev;
    *out = &be->base;
    return SW_OK;
}

const void *sw_backend_record_list(const sw_backend *b, int list, int32_t *n) {
    const record_backend *be = (const record_backend *)b;
    *n = be->lists[list].n;
    return be->lists[list].cmd;
}

int sw_backend_record_streams(const sw_backend *b, const int **device, const int **priority) {
    const record_backend *be = (const record_backend *)b;
    *device = be->device;
    *priority = be->priority;
    return be->nstreams;
}
