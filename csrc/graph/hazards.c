/* hazards.c -- the buffer conflicts between tasks on different streams.
 *
 * With one stream per device, program order keeps a device's accesses to a
 * buffer in order, and the lowering records dependencies only where it does
 * not (internal.h, task graphs).  With several streams per device, two tasks
 * of one device may run in either order, so every conflict between tasks of
 * different streams must be an edge: an update writing a weight that a dA on
 * a higher-priority stream still reads (write after read), a sum after the
 * write it reads (read after write), two writers of one staging region (write
 * after write).  The pass walks the tasks in program order keeping per buffer
 * its last writer and the readers since; each access conflicts with:
 *
 *   a read     the last writer                       (read after write)
 *   a write    the last writer, and every reader     (write after write,
 *              since it                               write after read)
 *
 * Only consecutive conflicts are listed: any two conflicting accesses are
 * joined by a chain of them (the readers of one write precede the next write,
 * which follows the previous one), so the transitive closure orders them all.
 * Every access adds at most one edge per kind and every reader is consumed by
 * one write: at most 2 edges per buffer access (g->nio).  Pairs on one stream
 * are skipped (the stream orders them).  Conflicts are judged per buffer, not
 * per box: two copies filling disjoint pieces of a region conflict too, which
 * only matters when they are on different streams (a schedule gives both the
 * region's priority, so they share one).
 */
#include <stdlib.h>  /* malloc, free */

#include "internal.h"

#define NONE (-1)

typedef struct {
    int32_t task, next;   /* a reader of a buffer since its last write; the one before */
} reader;

/* Does task t write buffer b? (its write list is short) */
static int writes_buffer(const sw_task_graph *g, int32_t t, int32_t b) {
    const int32_t *w;
    int n = sw_tg_writes(g, t, &w);
    for (int k = 0; k < n; k++) {
        if (w[k] == b) {
            return 1;
        }
    }
    return 0;
}

sw_status sw_tg_hazards(const sw_task_graph *g, const sw_streams *st, int32_t **ptr_out, int32_t **ids_out) {
    *ptr_out = *ids_out = NULL;
    size_t nb = (size_t)g->nbuffers + 1, nio = (size_t)g->nio + 1;
    int32_t *ptr = malloc(sizeof *ptr * ((size_t)g->ntasks + 1));
    int32_t *ids = malloc(sizeof *ids * 2 * nio);
    int32_t *writer = malloc(sizeof *writer * nb), *head = malloc(sizeof *head * nb);
    reader *pool = malloc(sizeof *pool * nio);
    if (!ptr || !ids || !writer || !head || !pool) {
        free(ptr);
        free(ids);
        free(writer);
        free(head);
        free(pool);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for the hazards of %d tasks", g->ntasks);
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        writer[b] = head[b] = NONE;
    }
    int32_t k = 0, npool = 0;
    ptr[0] = 0;
    for (int32_t t = 0; t < g->ntasks; t++) {
        int32_t mine = sw_stream_of(g, st, t);
        const int32_t *r, *w;
        int nr = sw_tg_reads(g, t, &r), nw = sw_tg_writes(g, t, &w);
        for (int i = 0; i < nr; i++) {   /* read after write */
            int32_t x = writer[r[i]];
            if (x != NONE && x != t && sw_stream_of(g, st, x) != mine) {
                ids[k++] = x;
            }
        }
        for (int i = 0; i < nw; i++) {   /* write after write, write after read */
            int32_t x = writer[w[i]];
            if (x != NONE && x != t && sw_stream_of(g, st, x) != mine) {
                ids[k++] = x;
            }
            for (int32_t e = head[w[i]]; e != NONE; e = pool[e].next) {
                x = pool[e].task;
                if (x != t && sw_stream_of(g, st, x) != mine) {
                    ids[k++] = x;
                }
            }
            writer[w[i]] = t;   /* at once: a buffer named twice is listed once */
            head[w[i]] = NONE;
        }
        for (int i = 0; i < nr; i++) {   /* a task that also writes the buffer counts as its writer */
            if (!writes_buffer(g, t, r[i]) && (head[r[i]] == NONE || pool[head[r[i]]].task != t)) {
                pool[npool] = (reader){t, head[r[i]]};
                head[r[i]] = npool++;
            }
        }
        ptr[t + 1] = k;
    }
    free(writer);
    free(head);
    free(pool);
    *ptr_out = ptr;
    *ids_out = ids;
    return SW_OK;
}
