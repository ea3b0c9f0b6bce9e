/* device_map.c -- which GPU runs each logical device of a plan, and how boxes move between
 * logical devices (gpu_plan.h).
 *
 * A plan names logical devices; a machine has GPUs.  Several logical devices may share a GPU
 * (each keeps its own arena and streams), so a plan made for 4 devices runs on 1, 2 or 4
 * GPUs.  Blocks of consecutive devices share a GPU: the lowering numbers workers so that
 * neighbouring boxes (halo exchanges) and replicas' gradient pieces mostly pass between
 * consecutive devices, which then stay on one GPU.
 */
#include "gpu_plan.h"

sw_status sw_gpu_map(int ndev, int ngpus, int *gpu_of) {
    if (ngpus < 1) {
        return SW_FAIL(SW_ERR_VALUE, "no GPU to map %d logical device(s) onto", ndev);
    }
    if (ndev < 1) {
        return SW_FAIL(SW_ERR_VALUE, "a plan needs at least one logical device, got %d", ndev);
    }
    for (int d = 0; d < ndev; d++) {
        gpu_of[d] = (int)((int64_t)d * ngpus / ndev);
    }
    return SW_OK;
}

sw_status sw_gpu_map_check(int ndev, int ngpus, const int *gpu_of) {
    if (ngpus < 1) {
        return SW_FAIL(SW_ERR_VALUE, "no GPU to map %d logical device(s) onto", ndev);
    }
    for (int d = 0; d < ndev; d++) {
        if (gpu_of[d] < 0 || gpu_of[d] >= ngpus) {
            return SW_FAIL(SW_ERR_VALUE, "logical device %d is mapped to GPU %d, but this machine has %d GPU(s)", d,
                           gpu_of[d], ngpus);
        }
    }
    return SW_OK;
}

sw_gpu_route sw_gpu_route_of(const int *gpu_of, int a, int b, const uint8_t *peer, int ngpus) {
    int ga = gpu_of[a], gb = gpu_of[b];
    if (ga == gb) {
        return SW_ROUTE_SAME_GPU;
    }
    /* the destination's kernel reads the source's memory: the destination needs access to it */
    return peer && peer[gb * ngpus + ga] ? SW_ROUTE_PEER : SW_ROUTE_STAGED;
}
