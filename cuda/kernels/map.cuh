/* map.cuh -- walking an swk_map's box inside a kernel (included by the .cu files).
 *
 * Element i of the box (row-major over m.ext) sits at sum_d idx[d] * stride[d] in each
 * buffer; one thread per element, grid-stride loops so that any box fits any grid.
 */
#ifndef SHARDWISE_CUDA_MAP_CUH
#define SHARDWISE_CUDA_MAP_CUH

#include "kernels.h"

/* Offsets of element i of m's box in the destination (*dst) and each source (src[k]). */
__device__ inline void swk_offsets(const swk_map &m, int64_t i, int64_t *dst, int64_t *src) {
    int64_t d = 0, s[SWK_MAX_SRC] = {0, 0, 0, 0};
    for (int r = m.rank - 1; r >= 0; r--) {
        const int64_t q = i % m.ext[r];
        i /= m.ext[r];
        d += q * m.dst_stride[r];
        for (int k = 0; k < m.nsrc; k++) {
            s[k] += q * m.src_stride[k][r];
        }
    }
    *dst = d;
    for (int k = 0; k < SWK_MAX_SRC; k++) {
        src[k] = s[k];
    }
}

static inline int64_t swk_volume(const swk_map *m) {
    int64_t v = 1;
    for (int r = 0; r < m->rank; r++) {
        v *= m->ext[r];
    }
    return v;
}

/* Blocks for n elements at `threads` per block, capped (grid-stride loops cover the rest). */
static inline unsigned swk_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

#endif /* SHARDWISE_CUDA_MAP_CUH */
