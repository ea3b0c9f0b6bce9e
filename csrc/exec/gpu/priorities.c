/* priorities.c -- a schedule's stream priorities onto each GPU's range of CUDA priorities
 * (gpu_plan.h).
 *
 * The runtime's priorities are any integers (higher first, csrc/graph/schedule.c); CUDA offers a
 * few levels per GPU (cudaDeviceGetStreamPriorityRange: least 0 .. greatest -5 on recent
 * GPUs).  Only the order among the streams of one GPU matters, so each GPU's distinct
 * priorities are ranked, the lowest at CUDA's default level.
 */
#include <stdlib.h>  /* malloc, free, qsort */

#include "gpu_plan.h"

static int descending(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

sw_status sw_gpu_priorities(int n, const int *stream_gpu, const int *priority, int least, int greatest, int *out) {
    if (greatest > least) {
        return SW_FAIL(SW_ERR_VALUE, "CUDA priority range [%d, %d]: greatest must be <= least", greatest, least);
    }
    if (n <= 0) {
        return SW_OK;
    }
    int *mine = malloc(sizeof *mine * (size_t)n);
    if (!mine) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory ranking %d stream priorities", n);
    }
    for (int k = 0; k < n; k++) {
        /* the distinct priorities of k's GPU above k's own: its rank from the top */
        int m = 0;
        for (int j = 0; j < n; j++) {
            if (stream_gpu[j] == stream_gpu[k]) {
                mine[m++] = priority[j];
            }
        }
        qsort(mine, (size_t)m, sizeof *mine, descending);
        int below = 0;   /* distinct values below priority[k] */
        for (int j = 0; j < m; j++) {
            below += (j == 0 || mine[j] != mine[j - 1]) && mine[j] < priority[k];
        }
        int level = least - below;   /* the lowest priority of the GPU sits at `least` */
        out[k] = level < greatest ? greatest : level;
    }
    free(mine);
    return SW_OK;
}
