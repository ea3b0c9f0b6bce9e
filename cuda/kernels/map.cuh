/* map.cuh -- walking an swk_map's box inside a kernel (included by the .cu files).
 *
 * Element i of the box (row-major over m.ext) sits at sum_d idx[d] * stride[d] in each
 * buffer; grid-stride loops so that any box fits any grid.  The launchers first merge the
 * dimensions the buffers walk as one (swk_collapse), then run one thread per element of a
 * flat box (no division), one warp per line of the last dimension (one division walk per
 * line), or, for lines shorter than a warp, one thread per element with its own walk.
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

/* m with neighbouring dimensions that every buffer walks as one merged into one (stride[r] ==
 * stride[r + 1] * ext[r + 1] in the destination and in each source; a broadcast stride 0 merges
 * with 0), from dimension `from` on: 0 for element-wise maps, 2 for batch norm's (N, C, ...)
 * whose channel dimension 1 must stay.  A box holding a whole (64, 256, 56, 56) buffer becomes
 * (51380224) from 0 and (64, 256, 3136) from 2; a channel-split box keeps its rows.  The kernels
 * then divide per line, not per element. */
static inline swk_map swk_collapse(const swk_map *in, int from) {
    swk_map o = *in;
    int out = 0;
    for (int r = 0; r < in->rank; r++) {
        int merge = out > from;   /* the dimension kept last is out - 1 >= from */
        if (merge) {
            merge = o.dst_stride[out - 1] == in->dst_stride[r] * in->ext[r];
            for (int k = 0; k < in->nsrc; k++) {
                merge = merge && o.src_stride[k][out - 1] == in->src_stride[k][r] * in->ext[r];
            }
        }
        const int at = merge ? out - 1 : out;
        o.ext[at] = merge ? o.ext[at] * in->ext[r] : in->ext[r];
        o.dst_stride[at] = in->dst_stride[r];
        for (int k = 0; k < in->nsrc; k++) {
            o.src_stride[k][at] = in->src_stride[k][r];
        }
        out += !merge;
    }
    for (int r = out; r < SWK_MAX_RANK; r++) {
        o.ext[r] = o.dst_stride[r] = 0;
        for (int k = 0; k < SWK_MAX_SRC; k++) {
            o.src_stride[k][r] = 0;
        }
    }
    o.rank = out;
    return o;
}

/* Offsets of line L (row-major over every dimension but the last) in the destination (*dst)
 * and each source (src[k]); *dim1 its index along dimension 1 (batch norm's channel). */
__device__ inline void swk_line(const swk_map &m, int64_t L, int64_t *dst, int64_t *src, int64_t *dim1) {
    int64_t d = 0, s[SWK_MAX_SRC] = {0, 0, 0, 0}, c = 0;
    for (int r = m.rank - 2; r >= 0; r--) {
        const int64_t q = L % m.ext[r];
        L /= m.ext[r];
        d += q * m.dst_stride[r];
        for (int k = 0; k < m.nsrc; k++) {
            s[k] += q * m.src_stride[k][r];
        }
        c = r == 1 ? q : c;
    }
    *dst = d;
    for (int k = 0; k < SWK_MAX_SRC; k++) {
        src[k] = s[k];
    }
    *dim1 = c;
}

/* Lines of a collapsed map are worth a warp each when its last dimension holds a warp's width. */
#define SWK_WARP 32
static inline int swk_by_lines(const swk_map *m) { return m->rank >= 2 && m->ext[m->rank - 1] >= SWK_WARP; }

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
