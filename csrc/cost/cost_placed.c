/* cost_placed.c -- t_x on machines of uniform nodes, by counting instead of listing.
 *
 * The presets (DeviceGraph.cluster, .cpu) put devices [n*P, (n+1)*P) in node n
 * and give every pair of devices one bandwidth inside a node (bw_in) and one
 * between nodes (bw_out).  Then t_x of an edge only needs, over the workers w
 * of the consumer, three counts of the elements w reads (its region R_w):
 *
 *     total  = sum_w |R_w|
 *     same   = sum_w |R_w  intersected with the producer blocks on w's node|
 *     local  = sum_w |R_w  intersected with the producer block on w's device|
 *     t_x    = per_element * ((total - same) / bw_out + (same - local) / bw_in)
 *
 * which is Eq. 1's sum over (w, s) pairs regrouped by bandwidth.  When both
 * configurations sit on contiguous device ranges (every enumerated one does:
 * aligned blocks), the producer blocks on one node are a contiguous range of
 * block indices, i.e. a few sub-grids of the producer's row-major block grid,
 * and the overlap of R_w with a sub-grid is a product over dimensions of one
 * interval intersection each.  So a pair of configurations costs O(k_dst * R^2)
 * for rank R, instead of O(k_dst * k_src) when every (w, s) pair is listed
 * (cost.c does that for other machines and device lists).
 */
#include <math.h>    /* INFINITY */
#include <stdint.h>  /* uint32_t, uint64_t: bit fields, memo stamps */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  /* AVX2: four workers' overlaps at once */
#define SW_HAVE_AVX2_OVERLAPS 1
#endif

#include "internal.h"

#define TRANSFER_DIRECTIONS 2.0   /* activation forward + gradient backward (as cost.c) */

static int64_t overlap(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi) {
    int64_t lo = alo > blo ? alo : blo, hi = ahi < bhi ? ahi : bhi;
    return hi > lo ? hi - lo : 0;
}

/* log2 n for n a power of two (n >= 1), else -1. */
static int log2_exact(int64_t n) {
    int e = 0;
    while (n > 1 && n % 2 == 0) {
        n /= 2;
        e++;
    }
    return n == 1 ? e : -1;
}

/* The producer's output blocks: row-major over deg (rank dims), block length len. */
/* The boxes of a few block ranges of one partition (range_boxes), kept: the ranges on a node
 * recur for every consumer configuration of a table.  RANGES_KEPT first ranges asked. */
#define RANGES_KEPT 4
typedef struct {
    int n;
    int64_t first[RANGES_KEPT], last[RANGES_KEPT];
    int nbox[RANGES_KEPT];
    sw_box box[RANGES_KEPT][2 * SW_MAX_RANK];
    double one[RANGES_KEPT][2 * SW_MAX_RANK][2 * SW_MAX_RANK];   /* the same boxes' coordinates (lanes_against) */
} kept_ranges;

typedef struct {
    int rank;
    int64_t deg[SW_MAX_RANK], len[SW_MAX_RANK], stride[SW_MAX_RANK];
    int64_t nb;            /* blocks */
    const sw_box *block;   /* every block's box, in row-major order (at most LISTED_BLOCKS), or NULL */
    const double *lanes;   /* the same boxes as lanes (block_lanes), or NULL */
    kept_ranges *kept;     /* the partition's kept ranges, or NULL */
    int bits;              /* log2 nb when every degree is a power of two dividing its extent, else -1 */
    int low[SW_MAX_RANK];  /* bits: dimension d's coordinate is bits [low[d], low[d] + log2 deg[d]) of a block index */
} grid;

/* Grids of at most this many blocks have their boxes listed, once per partition of a table:
 * the counts then read a block's box instead of deriving it from its coordinates. */
#define LISTED_BLOCKS 64

/* The boxes of the nb blocks of grid g into out (row-major order). */
static void list_blocks(const grid *g, sw_box *out) {
    int64_t coord[SW_MAX_RANK] = {0};
    for (int64_t b = 0; b < g->nb; b++) {
        out[b].rank = g->rank;
        for (int d = 0; d < g->rank; d++) {
            out[b].lo[d] = coord[d] * g->len[d];
            out[b].hi[d] = (coord[d] + 1) * g->len[d];
        }
        for (int d = g->rank - 1; d >= 0; d--) {   /* next block */
            if (++coord[d] < g->deg[d]) {
                break;
            }
            coord[d] = 0;
        }
    }
}

static void make_grid(const sw_op *op, const sw_config *c, grid *g) {
    g->rank = op->out_rank;
    int64_t acc = 1;
    for (int d = g->rank - 1; d >= 0; d--) {
        g->deg[d] = c->deg[d];
        g->len[d] = op->extent[d] / c->deg[d];
        g->stride[d] = acc;
        acc *= c->deg[d];
    }
    g->nb = acc;
    g->block = NULL;
    g->lanes = NULL;
    g->kept = NULL;
    g->bits = 0;
    for (int d = g->rank - 1; d >= 0 && g->bits >= 0; d--) {
        int e = log2_exact(g->deg[d]);
        g->low[d] = g->bits;
        g->bits = e >= 0 && op->extent[d] % g->deg[d] == 0 ? g->bits + e : -1;
    }
}

/* The blocks whose row-major indices lie in [s0, s1), as at most 2 rank - 1 boxes of
 * elements (sub-grids of the block grid), appended to out[*n]; `box` holds the coordinates
 * of dimensions < d, fixed by the caller.  The range splits at coordinate d into a head
 * (coordinate a, a partial range of the rest), whole values a+1 .. b-1 (one box: every
 * later dimension whole) and a tail (coordinate b, a partial range); head and tail recurse
 * on coordinate d+1.  Found once per node, the boxes then serve every worker there. */
static void range_boxes(const grid *g, int d, int64_t s0, int64_t s1, sw_box *box, sw_box *out, int *n) {
    if (s0 >= s1) {
        return;
    }
    if (d == g->rank) {
        out[(*n)++] = *box;   /* one block */
        return;
    }
    int64_t st = g->stride[d], len = g->len[d], head, tail;
    int64_t a = sw_quotient_rest(s0, st, &head), b = sw_quotient_rest(s1 - 1, st, NULL);   /* coordinates d of the ends */
    sw_quotient_rest(s1, st, &tail);
    if (a == b) {
        box->lo[d] = a * len;
        box->hi[d] = (a + 1) * len;
        range_boxes(g, d + 1, s0 - a * st, s1 - a * st, box, out, n);
        return;
    }
    int64_t whole_lo = a, whole_hi = b + 1;   /* coordinates taken whole: [whole_lo, whole_hi) */
    if (head != 0) {
        box->lo[d] = a * len;
        box->hi[d] = (a + 1) * len;
        range_boxes(g, d + 1, head, st, box, out, n);
        whole_lo = a + 1;
    }
    if (tail != 0) {
        box->lo[d] = b * len;
        box->hi[d] = (b + 1) * len;
        range_boxes(g, d + 1, 0, tail, box, out, n);
        whole_hi = b;
    }
    if (whole_hi > whole_lo) {
        sw_box *w = &out[(*n)++];
        *w = *box;
        w->lo[d] = whole_lo * len;
        w->hi[d] = whole_hi * len;
        for (int q = d + 1; q < g->rank; q++) {
            w->lo[q] = 0;
            w->hi[q] = g->len[q] * g->deg[q];
        }
    }
}

/* Elements of region r inside box b (both of the producer's output, rank dimensions): a
 * product of whole numbers, exact in a double. */
static double box_overlap(const sw_box *r, const sw_box *b, int rank) {
    int64_t v = 1;   /* elements, in int64 as sw_box_volume counts them */
    for (int d = 0; d < rank && v > 0; d++) {
        v *= overlap(r->lo[d], r->hi[d], b->lo[d], b->hi[d]);
    }
    return (double)v;
}

/* ---- four workers at once (AVX2) ----
 * A box overlap is a product of whole numbers.  In doubles it is the same number while every
 * coordinate, factor and partial product is at most 2^53: each factor is at most a producer
 * block's extent, so that holds when the producer's output has at most 2^53 elements and the
 * coordinates are at most 2^53 in size.  Sums of such overlaps (same, local: at most the
 * elements the workers read, checked at most 2^53 too) are exact in any order.  Where that
 * holds and the CPU has AVX2, boxes are also kept as lanes: per dimension d, row 2d holds the
 * lo and row 2d + 1 the hi of every box, rows of n + LANE_PAD doubles (an unused worker and
 * the pad: lo = hi = 0, which meets no box of the producer's output, all of whose
 * coordinates are >= 0). */
#define LANE_PAD 4
#define EXACT_IN_DOUBLE 9007199254740992.0   /* 2^53 */

static int lanes_available(const sw_op *src) {
#ifdef SW_HAVE_AVX2_OVERLAPS
    double volume = 1;
    for (int d = 0; d < src->out_rank; d++) {
        volume *= (double)src->extent[d];
    }
    return volume <= EXACT_IN_DOUBLE && __builtin_cpu_supports("avx2");
#else
    (void)src;
    return 0;
#endif
}

/* The n boxes (those with used[i], all when used is NULL) as lanes; NULL when out of memory
 * or a coordinate is above 2^53 in size (then counted box by box). */
static double *box_lanes(const sw_box *box, const char *used, int64_t n, int rank) {
    size_t stride = (size_t)n + LANE_PAD;
    double *l = calloc(2 * (size_t)rank * stride, sizeof *l);
    for (int64_t i = 0; l && i < n; i++) {
        for (int d = 0; (!used || used[i]) && d < rank; d++) {
            if (fabs((double)box[i].lo[d]) > EXACT_IN_DOUBLE || fabs((double)box[i].hi[d]) > EXACT_IN_DOUBLE) {
                free(l);
                return NULL;
            }
            l[2 * d * stride + (size_t)i] = (double)box[i].lo[d];
            l[(2 * d + 1) * stride + (size_t)i] = (double)box[i].hi[d];
        }
    }
    return l;
}

#ifdef SW_HAVE_AVX2_OVERLAPS
#define AVX2 __attribute__((target("avx2")))

/* The sum over i < n of |A_i intersected with B_i|: A_i box ia + i of lanes a (rows of sa),
 * B_i box ib + i of lanes b (rows of sb).  Lanes past n are masked out (they are other
 * workers).  Inlined for each rank (the dimension loop unrolled). */
AVX2 static inline __attribute__((always_inline)) __m256d tail_masked(__m256d v, int64_t left) {
    return left < 4 ? _mm256_and_pd(v, _mm256_cmp_pd(_mm256_setr_pd(0, 1, 2, 3), _mm256_set1_pd((double)left), _CMP_LT_OQ))
                    : v;
}

AVX2 static inline __attribute__((always_inline)) double lanes_sum(__m256d acc) {
    __m128d half = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
    return _mm_cvtsd_f64(_mm_add_sd(half, _mm_unpackhi_pd(half, half)));
}

AVX2 static inline __attribute__((always_inline)) double paired_of_rank(const double *a, size_t sa, int64_t ia,
                                                                         const double *b, size_t sb, int64_t ib,
                                                                         const int rank, int64_t n) {
    __m256d acc = _mm256_setzero_pd(), zero = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 4) {
        __m256d v = _mm256_set1_pd(1.0);
        for (int d = 0; d < rank; d++) {
            __m256d lo = _mm256_max_pd(_mm256_loadu_pd(a + 2 * d * sa + (size_t)(ia + i)),
                                       _mm256_loadu_pd(b + 2 * d * sb + (size_t)(ib + i)));
            __m256d hi = _mm256_min_pd(_mm256_loadu_pd(a + (2 * d + 1) * sa + (size_t)(ia + i)),
                                       _mm256_loadu_pd(b + (2 * d + 1) * sb + (size_t)(ib + i)));
            v = _mm256_mul_pd(v, _mm256_max_pd(_mm256_sub_pd(hi, lo), zero));
        }
        acc = _mm256_add_pd(acc, tail_masked(v, n - i));
    }
    return lanes_sum(acc);
}

/* The sum over i < n and boxes q < nbox of |A_i intersected with box q|: A_i as above, box q
 * the coordinates one[q][2d] (lo) and one[q][2d + 1] (hi).  One sum for all boxes: every term
 * and partial sum is a whole number below 2^53, so its order does not change it. */
AVX2 static inline __attribute__((always_inline)) double against_of_rank(const double *a, size_t sa, int64_t ia,
                                                                          const double (*one)[2 * SW_MAX_RANK],
                                                                          int nbox, const int rank, int64_t n) {
    __m256d acc = _mm256_setzero_pd(), zero = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 4) {
        __m256d alo[SW_MAX_RANK], ahi[SW_MAX_RANK];
        for (int d = 0; d < rank; d++) {
            alo[d] = _mm256_loadu_pd(a + 2 * d * sa + (size_t)(ia + i));
            ahi[d] = _mm256_loadu_pd(a + (2 * d + 1) * sa + (size_t)(ia + i));
        }
        __m256d row = _mm256_setzero_pd();
        for (int q = 0; q < nbox; q++) {
            __m256d v = _mm256_set1_pd(1.0);
            for (int d = 0; d < rank; d++) {
                __m256d lo = _mm256_max_pd(alo[d], _mm256_set1_pd(one[q][2 * d]));
                __m256d hi = _mm256_min_pd(ahi[d], _mm256_set1_pd(one[q][2 * d + 1]));
                v = _mm256_mul_pd(v, _mm256_max_pd(_mm256_sub_pd(hi, lo), zero));
            }
            row = _mm256_add_pd(row, v);
        }
        acc = _mm256_add_pd(acc, tail_masked(row, n - i));
    }
    return lanes_sum(acc);
}

AVX2 static double lanes_paired(const double *a, size_t sa, int64_t ia, const double *b, size_t sb, int64_t ib,
                                int rank, int64_t n) {
    switch (rank) {
    case 1: return paired_of_rank(a, sa, ia, b, sb, ib, 1, n);
    case 2: return paired_of_rank(a, sa, ia, b, sb, ib, 2, n);
    case 3: return paired_of_rank(a, sa, ia, b, sb, ib, 3, n);
    case 4: return paired_of_rank(a, sa, ia, b, sb, ib, 4, n);
    default: return paired_of_rank(a, sa, ia, b, sb, ib, SW_MAX_RANK, n);
    }
}

AVX2 static double lanes_against(const double *a, size_t sa, int64_t ia, const double (*one)[2 * SW_MAX_RANK],
                                 int nbox, int rank, int64_t n) {
    switch (rank) {
    case 1: return against_of_rank(a, sa, ia, one, nbox, 1, n);
    case 2: return against_of_rank(a, sa, ia, one, nbox, 2, n);
    case 3: return against_of_rank(a, sa, ia, one, nbox, 3, n);
    case 4: return against_of_rank(a, sa, ia, one, nbox, 4, n);
    default: return against_of_rank(a, sa, ia, one, nbox, SW_MAX_RANK, n);
    }
}
#else
/* never called: no lanes are made without AVX2 (lanes_available) */
static double lanes_paired(const double *a, size_t sa, int64_t ia, const double *b, size_t sb, int64_t ib,
                           int rank, int64_t n) {
    (void)a, (void)sa, (void)ia, (void)b, (void)sb, (void)ib, (void)rank, (void)n;
    return 0;
}

static double lanes_against(const double *a, size_t sa, int64_t ia, const double (*one)[2 * SW_MAX_RANK],
                            int nbox, int rank, int64_t n) {
    (void)a, (void)sa, (void)ia, (void)one, (void)nbox, (void)rank, (void)n;
    return 0;
}
#endif

/* The regions the workers of one consumer configuration read from input `slot`. */
typedef struct {
    int k;
    sw_box *region;
    char *used;
    double *prefix;      /* prefix[w] = sum over used workers v < w of |R_v|; prefix[k] the total */
    double volume_sum;   /* prefix[k] */
    double *lanes;       /* the regions as lanes (region_lanes), or NULL: count with box_overlap */
    /* When k is a power of two and the slot reads the producer's output whole (same rank and
     * extents): bits = log2 k, and the bits of a worker index that used[w] and the interval
     * on dimension d of region[w] depend on (count_by_bits); else bits = -1. */
    int bits;
    uint32_t used_bits, region_bits[SW_MAX_RANK];
    uint32_t whole;   /* bits: dimension d where every worker reads the whole extent (each block's overlap is its length) */
    uint32_t uniform;   /* bits: dimension d where every worker used reads an interval of uniform_len[d] inside
                           the extent (a producer not split there overlaps each by that length) */
    int64_t uniform_len[SW_MAX_RANK];
    struct factor_memo *memo;   /* bit_sum's factors' partial sums for these reads, or NULL (not kept) */
} reads;

static void free_reads(reads *rd) {
    free(rd->region);
    free(rd->used);
    free(rd->prefix);
    free(rd->lanes);
    *rd = (reads){0};
}

/* The bits of a worker index that used[w] and each dimension's interval of region[w] depend
 * on: bit i is one where flipping it changes the value for some worker (k = 2^bits workers);
 * a value unchanged by flipping any other bit is a function of those bits alone. */
static void dependence_bits(const sw_op *src, const sw_input *in, reads *rd) {
    int64_t k = rd->k;
    rd->bits = log2_exact(k);
    if (in->rank != src->out_rank) {
        rd->bits = -1;
    }
    for (int d = 0; rd->bits >= 0 && d < in->rank; d++) {
        rd->bits = in->shape[d] == src->extent[d] ? rd->bits : -1;
    }
    rd->used_bits = 0;
    rd->whole = 0;
    for (int d = 0; d < SW_MAX_RANK; d++) {
        rd->region_bits[d] = 0;
    }
    /* per bit, one pass over the workers whose bit i is clear (w and w + b), every dimension
     * compared at once, until each has been found to depend on it: a bit nothing depends on
     * reads every pair (a 1,024-worker partition of rank 3: 10 bits, one pass each, not four) */
    for (int i = 0; i < rd->bits; i++) {
        int64_t b = (int64_t)1 << i;
        unsigned open = 1u << SW_MAX_RANK;   /* bit SW_MAX_RANK: used; bit d: dimension d, not found yet */
        for (int d = 0; d < in->rank; d++) {
            open |= 1u << d;
        }
        for (int64_t w0 = 0; w0 < k && open; w0 += 2 * b) {
            for (int64_t w = w0; w < w0 + b && open; w++) {
                const sw_box *x = &rd->region[w], *y = &rd->region[w + b];
                if ((open >> SW_MAX_RANK & 1) && rd->used[w] != rd->used[w + b]) {
                    rd->used_bits |= 1u << i;
                    open &= ~(1u << SW_MAX_RANK);
                }
                for (int d = 0; d < in->rank; d++) {
                    if ((open >> d & 1) && (x->lo[d] != y->lo[d] || x->hi[d] != y->hi[d])) {
                        rd->region_bits[d] |= 1u << i;
                        open &= ~(1u << d);
                    }
                }
            }
        }
    }
    rd->uniform = 0;
    for (int d = 0; rd->bits >= 0 && d < in->rank; d++) {
        if (rd->region_bits[d] == 0 && rd->region[0].lo[d] == 0 && rd->region[0].hi[d] == src->extent[d]) {
            rd->whole |= 1u << d;
        }
        int64_t len = -1;
        int alike = 1;
        for (int64_t w = 0; w < k && alike; w++) {
            const sw_box *x = &rd->region[w];
            if (rd->used[w]) {
                alike = x->lo[d] >= 0 && x->hi[d] <= src->extent[d] && (len < 0 || x->hi[d] - x->lo[d] == len);
                len = x->hi[d] - x->lo[d];
            }
        }
        if (alike && len >= 0) {
            rd->uniform |= 1u << d;
            rd->uniform_len[d] = len;
        }
    }
}

/* lanes_rank: the producer's output rank, to keep the regions as lanes too (0: not) */
static sw_status reads_of(const sw_problem *p, const sw_op *dst, const sw_config *c, int slot, int lanes_rank,
                          reads *out) {
    out->k = c->nworkers;
    out->lanes = NULL;
    out->region = malloc(sizeof *out->region * (size_t)c->nworkers);
    out->used = malloc((size_t)c->nworkers);
    out->prefix = malloc(sizeof *out->prefix * ((size_t)c->nworkers + 1));
    if (!out->region || !out->used || !out->prefix) {
        free_reads(out);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    out->prefix[0] = 0;
    sw_status s = sw_config_regions(dst, c, slot, out->region, out->used);
    if (s != SW_OK) {
        free_reads(out);
        return s;
    }
    for (int w = 0; w < c->nworkers; w++) {
        out->prefix[w + 1] = out->prefix[w] + (out->used[w] ? (double)sw_box_volume(&out->region[w]) : 0.0);
    }
    out->volume_sum = out->prefix[c->nworkers];
    if (lanes_rank > 0 && out->volume_sum <= EXACT_IN_DOUBLE) {   /* (NULL: counted box by box) */
        out->lanes = box_lanes(out->region, out->used, c->nworkers, lanes_rank);
    }
    dependence_bits(&p->ops[dst->inputs[slot].producer], &dst->inputs[slot], out);
    return SW_OK;
}

/* ---- the counts from bit fields, when every size is a power of two ----
 * With the consumer on devices [0, k) and the producer's blocks on [0, nb * rdeg), k, nb,
 * rdeg, the node size and every degree powers of two, worker w's device is w and block s's
 * owner is device s * rdeg, so both counts are sums over bit vectors:
 *
 *     local = sum over w of  used(w) prod_d |R_w[d] & B_s[d]|  with s * rdeg = w
 *     same  = sum over w, s of the same product  with s * rdeg and w on one node
 *
 * where R_w[d] depends on a few bits of w (reads.region_bits), used(w) too, and B_s[d]
 * (block s's interval on dimension d) on the bits of s that hold coordinate d (grid.low).
 * "On one node" and "s * rdeg = w" tie bits of s to bits of w or fix them at 0.  Factors
 * that share no free bit sum apart, so the sum is a product over groups of factors of a sum
 * over the group's free bits only (a free bit no factor reads doubles it): for partitions
 * that split alike, a few dozen terms instead of one box per worker and block.  Every term
 * is a whole number of elements and so is every partial sum (below 2^53), so the counts are
 * the ones count_placed adds up, bit for bit. */
#define BIT_FACTORS (SW_MAX_RANK + 1)   /* used(w), then one overlap per dimension */
#define GROUP_BITS 24                   /* more free bits in one group: count_placed */
#define S_LOW 32                        /* where the bits of s free within a node sit in a bit vector */
#define TERMS_PER_BOX 4                 /* terms of bit_sum as quick as one box overlap of count_placed (measured:
                                         * Llama on 1,024 H100s builds fastest near 4; 1 and 16 are slower) */
#define BITS_FROM_WORKERS 32            /* fewer workers on shared devices: count_placed is as quick */

/* How the bits of one sum are laid out in a 64-bit vector v: bit i < 32 of v is bit i of w; the
 * bits of s tied to bits of w are those bits shifted by log2 rdeg (s = (v & tied) >> shift);
 * bits of s free of w (within a node) sit from S_LOW (s |= (v >> S_LOW) & low). */
typedef struct {
    uint64_t free;      /* the free bits of v */
    uint64_t wmask;     /* bits of v that are bits of w */
    uint64_t tied;      /* bits of v that are also bits of s, shifted */
    uint64_t low;       /* bits of s free of w: at S_LOW and up in v */
    int shift;
} bit_layout;

/* Bits set in x (without the popcount instruction, which the build does not assume). */
static int bit_count(uint64_t x) {
    int n = 0;
    for (; x; x &= x - 1) {
        n++;
    }
    return n;
}

/* Where the bits of s (a mask of them) sit in v. */
static uint64_t s_bits_in_v(const bit_layout *b, uint64_t s) {
    return ((s << b->shift) & b->tied) | ((s & b->low) << S_LOW);
}

/* The span bits of dimension d's factor, whose own bits are `own` (bit_sum): from bit 0 of the
 * block coordinate up, each bit of s there while it sits in `own` (free within a node, or tied to
 * a bit of w) and, tied, is not a bit worker w's region on d depends on. */
static uint64_t span_bits(const bit_layout *b, const reads *rd, const grid *g, int d, uint64_t own) {
    if (g->deg[d] == 1 && rd->uniform >> d & 1) {
        return 0;
    }
    uint64_t out = 0;
    for (int t = g->low[d]; t < g->low[d] + log2_exact(g->deg[d]); t++) {   /* bit t of s */
        uint64_t at = (b->low >> t & 1) ? (uint64_t)1 << (S_LOW + t)
                    : t + b->shift < 64 && (b->tied >> (t + b->shift) & 1) ? (uint64_t)1 << (t + b->shift) : 0;
        if (!at || !(own & at) || (at & b->wmask & rd->region_bits[d])) {
            break;
        }
        out |= at;
    }
    return out;
}

/* ---- factors' partial sums, kept per consumer configuration ----
 * Within a group, factor i's sum over the bits it alone reads (its part) depends only on the
 * reads (one consumer configuration: the memo's generation), the factor, those bits, the
 * values of the shared bits it reads, where the bits of s come from (the layout) and, for a
 * dimension, the producer's degree and lowest bit there (a block's length is the extent over
 * the degree, and the producer is the table's).  Across the producer configurations of one
 * table row most parts recur: a 1,024-worker consumer split 512 ways by samples against the
 * 256 partitions of its producer on the same devices sums the sample dimension's 512 terms
 * for each, alike wherever the producer splits samples alike.  So each is summed once (parts
 * of at least PART_MEMO_BITS bits: fewer cost less than the lookup).  Whole numbers: the
 * counts are bit for bit as without the memo. */
#define FACTOR_MEMO_SLOTS 8192   /* a power of two; half full at most, then parts are not kept */
#define PART_KEY_WORDS 5
#define PART_MEMO_BITS 3

typedef struct {
    uint64_t key[PART_KEY_WORDS];
    uint64_t generation;   /* the slot holds a part of this generation's reads; 0: never */
    int64_t sum;
} factor_memo_slot;

struct factor_memo {
    factor_memo_slot slot[FACTOR_MEMO_SLOTS];
    uint64_t generation;   /* one per reads (consumer configuration) */
    int filled;            /* slots of this generation */
};

/* The slot of key in m (this generation's, or an empty one to fill), or NULL when m is half full. */
static factor_memo_slot *memo_slot_of(struct factor_memo *m, const uint64_t key[PART_KEY_WORDS], int *found) {
    uint64_t h = 0;
    for (int i = 0; i < PART_KEY_WORDS; i++) {
        h = (h ^ key[i]) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    size_t q = (size_t)h & (FACTOR_MEMO_SLOTS - 1);
    for (;;) {
        factor_memo_slot *x = &m->slot[q];
        if (x->generation != m->generation) {
            *found = 0;
            return m->filled < FACTOR_MEMO_SLOTS / 2 ? x : NULL;
        }
        if (!memcmp(x->key, key, sizeof x->key)) {
            *found = 1;
            return x;
        }
        q = (q + 1) & (FACTOR_MEMO_SLOTS - 1);
    }
}

/* The sum over the free bits of the product of the factors: factors whose bits meet form a
 * group, summed over its bits alone, and within a group, for each value of the bits two or
 * more of its factors read, the product over its factors of each one's sum over the bits it
 * alone reads; -1 when the terms would be more than `most`. */
static int64_t bit_sum(const bit_layout *b, const reads *rd, const grid *g, int64_t most) {
    int nf = 1 + g->rank, ng = 0;
    uint64_t group_bits[BIT_FACTORS], read_by_any = 0, factor_bits[BIT_FACTORS];
    unsigned group_members[BIT_FACTORS];   /* per group: its factors, one bit each */
    for (int f = 0; f < nf; f++) {
        uint64_t m;
        if (f == 0) {
            m = rd->used_bits & b->wmask;
        } else if (rd->whole >> (f - 1) & 1) {
            m = 0;   /* a dimension read whole overlaps every block by its length: a constant factor */
        } else if (g->deg[f - 1] == 1 && rd->uniform >> (f - 1) & 1) {
            m = 0;   /* a block of the whole extent overlaps each interval read by its one length: a constant */
        } else {
            m = (rd->region_bits[f - 1] & b->wmask) |
                s_bits_in_v(b, (uint64_t)(g->deg[f - 1] - 1) << g->low[f - 1]);
        }
        m &= b->free;
        factor_bits[f] = m;
        read_by_any |= m;
        unsigned fm = 1u << f;
        for (int q = 0; q < ng; q++) {
            if (m & group_bits[q]) {   /* merge group q into this one */
                m |= group_bits[q];
                fm |= group_members[q];
                group_bits[q] = group_bits[--ng];
                group_members[q] = group_members[ng];
                q = -1;   /* the grown mask may meet groups already passed */
            }
        }
        group_bits[ng] = m;
        group_members[ng++] = fm;
    }
    uint64_t shared[BIT_FACTORS];   /* per group: the bits two or more of its factors read */
    int64_t terms = 0;
    for (int q = 0; q < ng; q++) {
        uint64_t seen = 0;
        shared[q] = 0;
        for (int f = 0; f < nf; f++) {
            if (group_members[q] >> f & 1) {
                shared[q] |= seen & factor_bits[f];
                seen |= factor_bits[f];
            }
        }
        int64_t per_value = 0;   /* terms for one value of the shared bits */
        for (int f = 0; f < nf; f++) {
            if (group_members[q] >> f & 1) {
                int own = bit_count(factor_bits[f] & ~shared[q]);
                if (own > GROUP_BITS) {
                    return -1;
                }
                per_value += (int64_t)1 << own;
            }
        }
        int m = bit_count(shared[q]);
        if (m > GROUP_BITS) {
            return -1;
        }
        terms += ((int64_t)1 << m) * per_value;
    }
    if (terms > most) {
        return -1;
    }
    int64_t total = (int64_t)1 << bit_count(b->free & ~read_by_any);   /* unread free bits double it */
    uint64_t wfield = b->wmask & 0xffffffffu;
    for (int q = 0; q < ng && total > 0; q++) {
        int member[BIT_FACTORS], members = 0;
        uint64_t own[BIT_FACTORS];
        for (int f = 0; f < nf; f++) {
            if (group_members[q] >> f & 1) {
                own[members] = factor_bits[f] & ~shared[q];
                member[members++] = f;
            }
        }
        /* Per member: its span bits, the lowest bits of its dimension's block coordinate that it
         * alone reads and that leave worker w's region as it is: over their values the blocks
         * run contiguously, so their sum is one overlap with the blocks' union (the same whole
         * number), and only the other bits are enumerated. */
        uint64_t span[BIT_FACTORS];
        for (int i = 0; i < members; i++) {
            span[i] = member[i] > 0 ? span_bits(b, rd, g, member[i] - 1, own[i]) : 0;
        }
        uint64_t mask = shared[q], v = 0;
        int64_t sum = 0;
        do {   /* every value v of the shared bits (a subset of mask) */
            int64_t term = 1;
            for (int i = 0; i < members && term > 0; i++) {
                int f = member[i], d = f - 1, found = 0;
                factor_memo_slot *kept = NULL;
                if (rd->memo && bit_count(own[i]) >= PART_MEMO_BITS) {   /* summed before for these reads? */
                    uint64_t key[PART_KEY_WORDS] = {
                        (uint64_t)f | (uint64_t)b->shift << 8 |
                            (d >= 0 ? (uint64_t)g->low[d] << 16 | (uint64_t)g->deg[d] << 24 : 0),
                        own[i], v & factor_bits[f], d >= 0 ? b->tied : 0, d >= 0 ? b->low : 0};
                    kept = memo_slot_of(rd->memo, key, &found);
                    if (kept && found) {
                        term *= kept->sum;
                        continue;
                    }
                    if (kept) {
                        memcpy(kept->key, key, sizeof key);
                    }
                }
                uint64_t rest = own[i] & ~span[i];
                int64_t part = 0;
                uint64_t u = 0;
                /* the factor at worker w and block s: used(w); a dimension read whole over
                 * intervals of one length, that length; else the overlap of w's region with the
                 * blocks from s's coordinate over the span */
                const int constant = f > 0 && g->deg[d] == 1 && rd->uniform >> d & 1;
                const int64_t len = f > 0 ? g->len[d] : 0, width = len << bit_count(span[i]);
                const int64_t dm = f > 0 ? g->deg[d] - 1 : 0;
                const int low = f > 0 ? g->low[d] : 0;
                do {   /* every value u of the other bits factor i alone reads */
                    uint64_t x = v | u;
                    int64_t w = (int64_t)(x & wfield), s = (int64_t)(((x & b->tied) >> b->shift) | ((x >> S_LOW) & b->low));
                    if (f == 0) {
                        part += rd->used[w] != 0;
                    } else if (constant) {
                        part += rd->uniform_len[d];
                    } else {
                        int64_t lo = ((s >> low) & dm) * len;
                        part += overlap(rd->region[w].lo[d], rd->region[w].hi[d], lo, lo + width);
                    }
                    u = (u - rest) & rest;
                } while (u != 0);
                if (kept) {
                    kept->sum = part;
                    kept->generation = rd->memo->generation;
                    rd->memo->filled++;
                }
                term *= part;
            }
            sum += term;
            v = (v - mask) & mask;
        } while (v != 0);
        total *= sum;
    }
    return total;
}

/* local and same of count_placed for consumer and producer both from device 0, by bit
 * fields, each where its terms are fewer than the boxes count_placed would overlap (an
 * estimate: one per worker holding a block, one per worker on a shared node); returns
 * which were counted (COUNTED_LOCAL | COUNTED_SAME), 0 when some size is not a power of
 * two or few workers share devices. */
#define COUNTED_LOCAL 1
#define COUNTED_SAME 2
static int count_by_bits(const sw_problem *p, const reads *rd, const grid *g, int64_t rdeg, double *same,
                         double *local) {
    int64_t k = rd->k, devices = g->nb * rdeg, shared = k < devices ? k : devices;
    if (shared < BITS_FROM_WORKERS) {
        return 0;
    }
    int wb = rd->bits, sb = g->bits, rb = log2_exact(rdeg), pb = log2_exact(p->node_size);
    if (wb < 0 || sb < 0 || rb < 0 || pb < 0 || wb > 30 || sb + rb > 30) {
        return 0;
    }
    uint64_t wmask = ((uint64_t)1 << wb) - 1, smask = ((uint64_t)1 << sb) - 1;
    /* local: s * rdeg = w, so w's bits below rb are 0 and bit i >= rb of w is bit i - rb of s;
     * w < k and s < nb bound both */
    bit_layout lb = {0, wmask, 0, 0, rb};
    lb.tied = (smask << rb) & wmask;
    lb.free = lb.tied;
    int64_t lc = bit_sum(&lb, rd, g, shared / rdeg * g->rank * TERMS_PER_BOX);
    /* same: w and s * rdeg on one node: their bits from pb up agree (0 past the last of
     * either); w's bits below pb and s's bits below pb - rb are free */
    uint64_t node = ~(((uint64_t)1 << pb) - 1);
    bit_layout sl = {0, wmask, 0, 0, rb};
    sl.tied = (smask << rb) & wmask & node;
    sl.low = pb > rb ? smask & (((uint64_t)1 << (pb - rb)) - 1) : 0;
    sl.free = (wmask & ~node) | sl.tied | (sl.low << S_LOW);
    int64_t sc = bit_sum(&sl, rd, g, shared * g->rank * TERMS_PER_BOX);
    int counted = 0;
    if (lc >= 0) {
        *local = (double)lc;
        counted |= COUNTED_LOCAL;
    }
    if (sc >= 0) {
        *same = (double)sc;
        counted |= COUNTED_SAME;
    }
    return counted;
}

/* The coordinates of n boxes as doubles, box q's lo and hi on dimension d at one[q][2d] and
 * one[q][2d + 1] (lanes_against; exact where lanes are made). */
static void lane_coordinates(const sw_box *box, int n, int rank, double (*one)[2 * SW_MAX_RANK]) {
    for (int q = 0; q < n; q++) {
        for (int d = 0; d < rank; d++) {
            one[q][2 * d] = (double)box[q].lo[d];
            one[q][2 * d + 1] = (double)box[q].hi[d];
        }
    }
}

/* local of the header for consumer reads rd, workers [0, k) of them, on devices [d0, d0 + k)
 * and the producer configuration (grid g, reduction degree rdeg) on [s0, s0 + nb * rdeg):
 * output block s lives on device s0 + s * rdeg.  The workers on a device holding a block are
 * visited with the block's coordinates kept by an odometer (no division per worker). */
static double count_local(const reads *rd, int64_t k, int64_t d0, const grid *g, int64_t rdeg, int64_t s0) {
    double local = 0.0;
    int64_t w = s0 - d0 > 0 ? s0 - d0 : 0;
    if (rdeg > 1) {   /* to the first worker on a device holding a block: an owner, every rdeg-th */
        int64_t rest;
        sw_quotient_rest(d0 + w - s0, rdeg, &rest);
        w += (rdeg - rest) % rdeg;
    }
    int64_t blk = rdeg > 1 ? sw_quotient_rest(d0 + w - s0, rdeg, NULL) : d0 + w - s0, coord[SW_MAX_RANK];
    if (rd->lanes && g->lanes && rdeg == 1) {   /* workers w.. against blocks blk.., four at a time */
        int64_t n = k - w < g->nb - blk ? k - w : g->nb - blk;
        local += n > 0 ? lanes_paired(rd->lanes, (size_t)rd->k + LANE_PAD, w, g->lanes, (size_t)g->nb + LANE_PAD, blk,
                                      g->rank, n) : 0.0;
        w = k;
    }
    if (g->block) {
        for (; w < k && blk < g->nb; w += rdeg, blk++) {
            local += rd->used[w] ? box_overlap(&rd->region[w], &g->block[blk], g->rank) : 0.0;
        }
    }
    for (int64_t d = g->rank - 1, q = blk; d >= 0 && !g->block; d--) {
        q = sw_quotient_rest(q, g->deg[d], &coord[d]);
    }
    for (; !g->block && w < k && blk < g->nb; w += rdeg, blk++) {
        if (rd->used[w]) {
            const sw_box *r = &rd->region[w];
            int64_t v = 1;   /* elements, in int64 as sw_box_volume counts them */
            for (int d = 0; d < g->rank && v > 0; d++) {
                v *= overlap(r->lo[d], r->hi[d], coord[d] * g->len[d], (coord[d] + 1) * g->len[d]);
            }
            local += (double)v;
        }
        for (int d = g->rank - 1; d >= 0; d--) {   /* next block */
            if (++coord[d] < g->deg[d]) {
                break;
            }
            coord[d] = 0;
        }
    }
    return local;
}

/* same of the header, as count_local's: node by node, the consumer workers [a, b) on it (of
 * [0, k)) and the producer blocks [first, last) on it; all blocks there covers every worker's
 * whole region. */
static double count_same(const sw_problem *p, const reads *rd, int64_t k, int64_t d0, const grid *g, int64_t rdeg,
                         int64_t s0) {
    double same = 0.0;
    /* the nodes holding both some of [d0, d0 + k) and some of the producer's devices (on the
     * others no block meets a worker: first >= last below) */
    int64_t per = p->node_size;
    int64_t src_last = s0 + g->nb * rdeg - 1, n_lo = sw_quotient_rest(d0 > s0 ? d0 : s0, per, NULL) * per;
    int64_t n_end = d0 + k - 1 < src_last ? d0 + k : src_last + 1;
    for (int64_t n0 = n_lo; n0 < n_end; n0 += per) {
        int64_t a = n0 - d0 > 0 ? n0 - d0 : 0, b = n0 + per - d0 < k ? n0 + per - d0 : k;
        int64_t first = n0 - s0 <= 0 ? 0 : rdeg > 1 ? sw_quotient_rest(n0 - s0 + rdeg - 1, rdeg, NULL) : n0 - s0;
        int64_t last = n0 + per - s0 <= 0 ? 0 : rdeg > 1 ? sw_quotient_rest(n0 + per - s0 + rdeg - 1, rdeg, NULL) : n0 + per - s0;
        last = last < g->nb ? last : g->nb;
        if (first >= last) {
            continue;
        }
        if (first == 0 && last == g->nb) {
            same += rd->prefix[b] - rd->prefix[a];
            continue;
        }
        sw_box boxes[2 * SW_MAX_RANK], prefix;
        const sw_box *box = boxes;
        double ones[2 * SW_MAX_RANK][2 * SW_MAX_RANK];
        const double (*one)[2 * SW_MAX_RANK] = ones;   /* box's coordinates as doubles (lanes) */
        int nbox = 0;
        kept_ranges *kr = g->kept;
        int at = -1;
        for (int q = 0; kr && q < kr->n && at < 0; q++) {
            at = kr->first[q] == first && kr->last[q] == last ? q : -1;
        }
        if (g->block && last - first <= 1) {   /* one block: its own box */
            box = &g->block[first];
            nbox = (int)(last - first);
            lane_coordinates(box, nbox, g->rank, ones);
        } else if (at >= 0) {
            box = kr->box[at];
            nbox = kr->nbox[at];
            one = kr->one[at];
        } else {
            prefix.rank = g->rank;
            range_boxes(g, 0, first, last, &prefix, boxes, &nbox);
            if (kr && kr->n < RANGES_KEPT) {
                kr->first[kr->n] = first;
                kr->last[kr->n] = last;
                kr->nbox[kr->n] = nbox;
                memcpy(kr->box[kr->n], boxes, sizeof *boxes * (size_t)nbox);
                lane_coordinates(boxes, nbox, g->rank, kr->one[kr->n]);
                one = kr->one[kr->n++];
            } else {
                lane_coordinates(boxes, nbox, g->rank, ones);
            }
        }
        if (rd->lanes) {   /* workers [a, b) against every box, four at a time */
            same += lanes_against(rd->lanes, (size_t)rd->k + LANE_PAD, a, one, nbox, g->rank, b - a);
        }
        for (int64_t v = a; !rd->lanes && v < b; v++) {
            for (int q = 0; rd->used[v] && q < nbox; q++) {
                same += box_overlap(&rd->region[v], &box[q], g->rank);
            }
        }
    }
    return same;
}

/* The three counts of the header for consumer reads rd on devices [d0, d0 + k) and
 * the producer configuration (grid g, reduction degree rdeg) on [s0, s0 + nb * rdeg):
 * output block s lives on device s0 + s * rdeg. */
static void count_placed(const sw_problem *p, const reads *rd, int64_t d0, const grid *g, int64_t rdeg,
                         int64_t s0, double *same, double *local) {
    double bits_same = 0.0, bits_local = 0.0;
    int counted = d0 == 0 && s0 == 0 ? count_by_bits(p, rd, g, rdeg, &bits_same, &bits_local) : 0;
    /* the workers visited for local and for same: none for a count made by bits (each sum
     * starts at 0, so adding it to 0 leaves its bits) */
    *local = bits_local + count_local(rd, counted & COUNTED_LOCAL ? 0 : rd->k, d0, g, rdeg, s0);
    *same = bits_same + count_same(p, rd, counted & COUNTED_SAME ? 0 : rd->k, d0, g, rdeg, s0);
}

/* ---- the counts of one pair of partitions, memoized over placements ----
 * The counts depend on where the consumer workers [d0, d0 + kd) and the producer devices
 * [s0, s0 + ks) sit only up to a shift of both by whole nodes (every step of count_placed
 * reads differences), and are 0 when the two ranges share no node.  So for one pair of
 * partitions on P-device nodes, the (d0, s0) pairs fall into few classes: on 16 devices
 * of 4 per node, 64 of the 256 pairs of single-device blocks share a node, and those 64
 * fall into 16 classes.  Each class is counted once; the table is bit for bit as before.
 * Within a run of configurations of one partition (enumerated together), all contiguous,
 * a configuration is its first device. */
typedef struct {
    int64_t key;   /* (d0 - t) * ndev + (s0 - t) for the shift t; -1: empty */
    double same, local;
    double seconds;   /* placed_seconds of the counts (the same for every pair of the class) */
} memo_slot;

typedef struct {
    memo_slot *slot;
    size_t mask;   /* slots - 1 for this pair of partitions (a power of two) */
    /* On machines of at most DIRECT_MEMO_DEVICES devices a class's key indexes the slots itself
     * (ndev^2 of them): no hash, no probe, and a pair of partitions starts afresh by a new
     * generation instead of clearing its slots (Inception-v3 on 16 devices: ~360,000 entries
     * read the memo). */
    uint32_t *stamp;       /* per slot: the generation that filled it; NULL: hashed */
    uint32_t generation;
} placed_memo;

#define DIRECT_MEMO_DEVICES 64

/* A new generation for slots stamped with the generation that filled them (every slot of an
 * older one reads as empty): no clearing, but where the counter wraps. */
static void next_generation(uint32_t *generation, uint32_t *stamp, size_t slots) {
    if (++*generation == 0) {   /* wrapped: every stamp is old again */
        memset(stamp, 0, sizeof *stamp * slots);
        *generation = 1;
    }
}

static void memo_reset(placed_memo *m, size_t pairs) {
    if (m->stamp) {
        next_generation(&m->generation, m->stamp, m->mask + 1);
        return;
    }
    size_t cap = 4;
    while (cap < 2 * pairs) {
        cap *= 2;
    }
    m->mask = cap - 1;
    for (size_t q = 0; q < cap; q++) {
        m->slot[q].key = -1;
    }
}

/* Where a configuration sits: its first device (all are contiguous) and the nodes of its
 * first and last device, found once per table rather than for every pair. */
typedef struct {
    int64_t first, node_lo, node_hi;
} span;

static span span_of(const sw_problem *p, const sw_config *c) {
    int64_t first = sw_config_first_device(p, c);
    return (span){first, first / p->node_size, (first + c->nworkers - 1) / p->node_size};
}

/* Do the consumer (dst) and producer (src) configurations share no node?  Then nothing is
 * read on the same node: same = local = 0. */
static int apart(const span *dst, const span *src) { return dst->node_hi < src->node_lo || src->node_hi < dst->node_lo; }

/* Eq. 1's t_x from the counts of the header. */
static double placed_seconds(const sw_problem *p, double per_elem, double total, double same, double local) {
    return per_elem * ((total - same) / p->bw_out + (same - local) / p->bw_in);
}

/* t_x (and same and local) for consumer reads rd at dst, producer configuration cs (grid g)
 * at src, sharing a node: counted with both shifted to the first nodes, from the memo when
 * `m` is not NULL (else every pair is its own class: one of the runs has a single
 * placement).  t_x is a function of the counts (per_elem and the total are the table's and
 * the consumer run's), so a class keeps it too: the same bits without its two divisions. */
static double memo_seconds(const sw_problem *p, placed_memo *m, const reads *rd, const span *dst, const grid *g,
                           const sw_config *cs, const span *src, double per_elem, double *same, double *local) {
    int64_t t = (dst->node_lo < src->node_lo ? dst->node_lo : src->node_lo) * p->node_size;
    if (!m) {
        count_placed(p, rd, dst->first - t, g, cs->rdeg, src->first - t, same, local);
        return placed_seconds(p, per_elem, rd->volume_sum, *same, *local);
    }
    int64_t key = (dst->first - t) * p->ndev + (src->first - t);
    size_t q = (size_t)key;
    if (m->stamp) {   /* (key < ndev^2: both shifted firsts are devices) */
        if (m->stamp[q] != m->generation) {
            m->slot[q].key = -1;
            m->stamp[q] = m->generation;
        }
    } else {
        q = (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> 32) & m->mask;
        while (m->slot[q].key >= 0 && m->slot[q].key != key) {
            q = (q + 1) & m->mask;
        }
    }
    if (m->slot[q].key != key) {   /* shifted by t: the same counts, read from the first nodes */
        count_placed(p, rd, dst->first - t, g, cs->rdeg, src->first - t, &m->slot[q].same, &m->slot[q].local);
        m->slot[q].seconds = placed_seconds(p, per_elem, rd->volume_sum, m->slot[q].same, m->slot[q].local);
        m->slot[q].key = key;
    }
    *same = m->slot[q].same;
    *local = m->slot[q].local;
    return m->slot[q].seconds;
}

/* ---- one configuration against the placements of a run, each within one node ----
 * Where one side of a pair of partition runs has a single configuration (on every device, say)
 * the placements of the other find no shift in common (memo_seconds), but where each of them
 * lies within one node, same is a function of that node alone: the fixed side's workers (or
 * blocks) on it against all of the moving side's blocks (or workers), wherever on the node they
 * sit.  So same is counted once per node, and local, which does depend on the placement, for
 * each (Inception-v3 on 16 devices: ~100,000 such entries). */
typedef struct {
    double *same;      /* per node */
    uint32_t *stamp;   /* per node: the generation that counted it */
    uint32_t generation;
} node_sames;

/* t_x (and same and local) for consumer reads rd at dst, producer configuration cs (grid g) at
 * src, the moving one of the two within node `node`: as count_placed's, bit for bit (the same
 * sums, in the same order). */
static double node_seconds(const sw_problem *p, node_sames *ns, int64_t node, const reads *rd, const span *dst,
                           const grid *g, const sw_config *cs, const span *src, double per_elem, double *same,
                           double *local) {
    if (ns->stamp[node] != ns->generation) {
        ns->same[node] = count_same(p, rd, rd->k, dst->first, g, cs->rdeg, src->first);
        ns->stamp[node] = ns->generation;
    }
    *same = ns->same[node];
    *local = count_local(rd, rd->k, dst->first, g, cs->rdeg, src->first);
    return placed_seconds(p, per_elem, rd->volume_sum, *same, *local);
}

/* For every configuration c of op, the end (exclusive) of the run of configurations from c that
 * share c's partition (enumerated together); NULL when out of memory. */
static int *run_ends(const sw_op *op) {
    int *end = malloc(sizeof *end * (size_t)(op->ncfg > 0 ? op->ncfg : 1));
    for (int c = op->ncfg - 1; end && c >= 0; c--) {
        end[c] = c + 1 < op->ncfg && sw_same_partition(&op->cfgs[c], &op->cfgs[c + 1]) ? end[c + 1] : c + 1;
    }
    return end;
}

/* Is the table symmetric, t_x(ci, cj) = t_x(cj, ci) (and its bytes)?  When the two ops have
 * the same configurations, index by index (workers on the same devices, no reduction split),
 * and on each, consumer worker w reads exactly the producer's block w (batchnorm or relu
 * reading a convolution's output split alike): then the reads of configuration c are the
 * producer's blocks under c, so the pairs (worker of cj, block of ci) meeting on one node or
 * device are the pairs (block of cj, worker of ci), with the same overlaps, and every
 * configuration reads the whole output once (the same total).  The counts are whole numbers,
 * so the two entries are the same bits.  0 also when out of memory (every entry counted). */
static int symmetric_table(const sw_problem *p, const sw_op *dst, const sw_op *src, int slot) {
    if (dst->ncfg != src->ncfg || dst->inputs[slot].rank != src->out_rank) {
        return 0;
    }
    int maxk = 1;
    for (int c = 0; c < dst->ncfg; c++) {
        const sw_config *cd = &dst->cfgs[c], *cs = &src->cfgs[c];
        if (cd->nworkers != cs->nworkers || cd->rdeg != 1 || cs->rdeg != 1 ||
            memcmp(p->dev_pool + cd->dev_offset, p->dev_pool + cs->dev_offset, sizeof(int32_t) * (size_t)cd->nworkers)) {
            return 0;
        }
        maxk = cd->nworkers > maxk ? cd->nworkers : maxk;
    }
    sw_box *region = malloc(sizeof *region * (size_t)maxk), *block = malloc(sizeof *block * (size_t)maxk);
    char *used = malloc((size_t)maxk);
    int same = region && block && used;
    for (int c = 0; same && c < dst->ncfg; c++) {
        if (c > 0 && sw_same_partition(&dst->cfgs[c - 1], &dst->cfgs[c]) &&
            sw_same_partition(&src->cfgs[c - 1], &src->cfgs[c])) {
            continue;   /* another placement of the partitions just compared */
        }
        grid g;
        make_grid(src, &src->cfgs[c], &g);
        same = g.nb == dst->cfgs[c].nworkers && sw_config_regions(dst, &dst->cfgs[c], slot, region, used) == SW_OK;
        if (same) {
            list_blocks(&g, block);
        }
        for (int w = 0; same && w < dst->cfgs[c].nworkers; w++) {
            same = used[w] && sw_box_equal(&region[w], &block[w]);
        }
    }
    free(region);
    free(block);
    free(used);
    return same;
}

#define MOVING_DST 1
#define MOVING_SRC 2

sw_status sw_transfer_table_placed(const sw_problem *p, int consumer, int slot, const sw_table_copy *copies, int n) {
    const sw_op *dst = &p->ops[consumer];
    double *time = copies[0].time, *bytes = copies[0].bytes;
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    int nj = dst->ncfg;
    /* no gradient flows back into the graph's inputs: their transfers happen once */
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    span *src_at = malloc(sizeof *src_at * (size_t)src->ncfg), *dst_at = malloc(sizeof *dst_at * (size_t)nj);
    grid *grids = malloc(sizeof *grids * (size_t)src->ncfg);
    /* the memo holds twice the placement pairs of the largest pair of partition runs */
    int *src_end = run_ends(src), *dst_end = run_ends(dst);
    size_t most_d = 1, most_s = 1;
    for (int c = 0; dst_end && c < nj; c = dst_end[c]) {
        most_d = (size_t)(dst_end[c] - c) > most_d ? (size_t)(dst_end[c] - c) : most_d;
    }
    for (int c = 0; src_end && c < src->ncfg; c = src_end[c]) {
        most_s = (size_t)(src_end[c] - c) > most_s ? (size_t)(src_end[c] - c) : most_s;
    }
    size_t cap = 4;
    while (cap < 2 * most_d * most_s) {
        cap *= 2;
    }
    int direct = p->ndev <= DIRECT_MEMO_DEVICES;
    size_t slots = direct ? (size_t)p->ndev * (size_t)p->ndev : cap;
    placed_memo memo = {malloc(sizeof(memo_slot) * slots), slots - 1,
                        direct ? calloc(slots, sizeof(uint32_t)) : NULL, 1};
    if (direct && !memo.stamp) {
        free(memo.slot);
        memo.slot = NULL;   /* (out of memory, below) */
    }
    /* (NULL: every factor summed; and where count_by_bits never counts, on fewer devices) */
    struct factor_memo *factors = p->ndev >= BITS_FROM_WORKERS ? calloc(1, sizeof *factors) : NULL;
    int64_t nodes = (p->ndev + p->node_size - 1) / p->node_size;
    node_sames sames = {malloc(sizeof(double) * (size_t)nodes), calloc((size_t)nodes, sizeof(uint32_t)), 0};
    if (!src_at || !dst_at || !grids || !memo.slot || !src_end || !dst_end || !sames.same || !sames.stamp) {
        free(sames.same);
        free(sames.stamp);
        free(factors);
        free(src_end);
        free(dst_end);
        free(src_at);
        free(dst_at);
        free(grids);
        free(memo.slot);
        free(memo.stamp);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int lanes = lanes_available(src);   /* (else every overlap box by box) */
    int mirror = symmetric_table(p, dst, src, slot);   /* count the entries ci <= cj, copy the others */
    size_t listed = 0;   /* block boxes of every partition of the producer with few blocks */
    for (int ci = 0; ci < src->ncfg; ci++) {
        src_at[ci] = span_of(p, &src->cfgs[ci]);
        make_grid(src, &src->cfgs[ci], &grids[ci]);
        if (grids[ci].nb <= LISTED_BLOCKS && (ci == 0 || !sw_same_partition(&src->cfgs[ci - 1], &src->cfgs[ci]))) {
            listed += (size_t)grids[ci].nb;
        }
    }
    sw_box *blocks = malloc(sizeof *blocks * (listed > 0 ? listed : 1));
    int runs = 0;
    for (int ci = 0; ci < src->ncfg; ci = src_end[ci]) {
        runs++;
    }
    /* one per partition, empty (only n is read before written: not cleared whole, ~5 KB each) */
    kept_ranges *kept = malloc(sizeof *kept * (size_t)(runs > 0 ? runs : 1));
    for (int ci = 0, run = 0; kept && ci < src->ncfg; ci = src_end[ci], run++) {
        kept[run].n = 0;
        for (int c = ci; c < src_end[ci]; c++) {
            grids[c].kept = &kept[run];
        }
    }
    for (int ci = 0, at = 0; blocks && ci < src->ncfg; ci++) {
        if (grids[ci].nb > LISTED_BLOCKS) {
            continue;
        }
        if (ci > 0 && sw_same_partition(&src->cfgs[ci - 1], &src->cfgs[ci])) {
            grids[ci].block = grids[ci - 1].block;   /* the run's first configuration's */
            grids[ci].lanes = grids[ci - 1].lanes;
            continue;
        }
        list_blocks(&grids[ci], blocks + at);
        grids[ci].block = blocks + at;
        grids[ci].lanes = lanes ? box_lanes(grids[ci].block, NULL, grids[ci].nb, grids[ci].rank) : NULL;
        at += (int)grids[ci].nb;
    }
    for (int cj = 0; cj < nj; cj++) {
        dst_at[cj] = span_of(p, &dst->cfgs[cj]);
    }
    sw_status s = SW_OK;
    for (int cj0 = 0; cj0 < nj && s == SW_OK; cj0 = dst_end[cj0]) {
        int cj1 = dst_end[cj0];
        reads rd = {0};
        s = reads_of(p, dst, &dst->cfgs[cj0], slot, lanes ? src->out_rank : 0, &rd);   /* the same regions on any devices */
        if (s != SW_OK) {
            break;
        }
        if (factors) {   /* a new generation: these reads' own partial sums */
            factors->generation++;
            factors->filled = 0;
            rd.memo = factors;
        }
        double total = rd.volume_sum;
        double far = placed_seconds(p, per_elem, total, 0.0, 0.0);   /* no node in common */
        /* the copies' totals and far entries: counts over copies[0].unit are the whole numbers of
         * the table with every coordinate divided by the divisors, times a copy's unit its own */
        double totals[SW_TABLE_COPIES], fars[SW_TABLE_COPIES];
        for (int m = 1; m < n; m++) {
            totals[m] = total / copies[0].unit * copies[m].unit;
            fars[m] = placed_seconds(p, per_elem, totals[m], 0.0, 0.0);
        }
        for (int ci0 = 0; ci0 < src->ncfg && !(mirror && ci0 >= cj1); ci0 = src_end[ci0]) {   /* (mirror: ci <= cj) */
            int ci1 = src_end[ci0];
            placed_memo *m = cj1 - cj0 > 1 && ci1 - ci0 > 1 ? &memo : NULL;
            if (m) {
                memo_reset(m, (size_t)(cj1 - cj0) * (size_t)(ci1 - ci0));
            }
            /* a single configuration against a run of several placements: the run moves */
            int moving = m ? 0 : cj1 - cj0 > 1 ? MOVING_DST : ci1 - ci0 > 1 ? MOVING_SRC : 0;
            if (moving) {
                next_generation(&sames.generation, sames.stamp, (size_t)nodes);   /* a new pair of runs */
            }
            for (int ci = ci0; ci < ci1; ci++) {
                double *trow = time + (size_t)ci * nj, *brow = bytes ? bytes + (size_t)ci * nj : NULL;
                for (int cj = mirror && ci > cj0 ? ci : cj0; cj < cj1; cj++) {
                    double same = 0.0, local = 0.0;
                    int far_apart = apart(&dst_at[cj], &src_at[ci]);
                    const span *mover = moving == MOVING_DST ? &dst_at[cj] : &src_at[ci];
                    if (far_apart) {
                        trow[cj] = far;
                    } else if (moving && mover->node_lo == mover->node_hi) {
                        trow[cj] = node_seconds(p, &sames, mover->node_lo, &rd, &dst_at[cj], &grids[ci], &src->cfgs[ci],
                                                &src_at[ci], per_elem, &same, &local);
                    } else {
                        trow[cj] = memo_seconds(p, m, &rd, &dst_at[cj], &grids[ci], &src->cfgs[ci], &src_at[ci], per_elem,
                                                &same, &local);
                    }
                    if (brow) {
                        brow[cj] = per_elem * (total - local);
                    }
                    /* the scaled copies: the counts per unit (whole numbers), times each copy's unit */
                    double same_unit = n > 1 ? same / copies[0].unit : 0.0, local_unit = n > 1 ? local / copies[0].unit : 0.0;
                    for (int q = 1; q < n; q++) {
                        size_t at = (size_t)ci * nj + (size_t)cj;
                        double sq = same_unit * copies[q].unit, lq = local_unit * copies[q].unit;
                        copies[q].time[at] = far_apart ? fars[q] : placed_seconds(p, per_elem, totals[q], sq, lq);
                        if (copies[q].bytes) {
                            copies[q].bytes[at] = per_elem * (totals[q] - lq);
                        }
                    }
                }
            }
        }
        free_reads(&rd);
    }
    for (int q = 0; q < n; q++) {   /* the entries below the diagonal */
        double *tq = copies[q].time, *bq = copies[q].bytes;
        for (int ci = 1; mirror && s == SW_OK && ci < nj; ci++) {
            for (int cj = 0; cj < ci; cj++) {
                tq[(size_t)ci * nj + cj] = tq[(size_t)cj * nj + ci];
                if (bq) {
                    bq[(size_t)ci * nj + cj] = bq[(size_t)cj * nj + ci];
                }
            }
        }
    }
    for (int ci = 0; ci < src->ncfg; ci++) {   /* the lanes of each run's first configuration */
        if (ci == 0 || grids[ci].lanes != grids[ci - 1].lanes) {
            free((double *)grids[ci].lanes);
        }
    }
    free(memo.slot);
    free(memo.stamp);
    free(sames.same);
    free(sames.stamp);
    free(factors);
    free(src_at);
    free(dst_at);
    free(grids);
    free(blocks);
    free(kept);
    free(src_end);
    free(dst_end);
    return s;
}

static double placed_time(const sw_problem *p, double per_elem, const reads *rd, int64_t d0, const grid *g,
                          int64_t rdeg, int64_t s0) {
    double same, local;
    count_placed(p, rd, d0, g, rdeg, s0, &same, &local);
    return placed_seconds(p, per_elem, rd->volume_sum, same, local);
}

sw_status sw_transfer_least(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    const sw_config *cs = &src->cfgs[ci], *cd = &dst->cfgs[cj];
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    int64_t n = p->ndev, per = p->node_size, ks = cs->nworkers, kd = cd->nworkers;
    if (per <= 0) {
        return SW_FAIL(SW_ERR_VALUE, "the least transfer over placements needs a machine of uniform nodes");
    }
    grid g;
    make_grid(src, cs, &g);
    reads rd = {0};
    SW_TRY(reads_of(p, dst, cd, slot, 0, &rd));
    double best = INFINITY;
    int64_t a = ks < kd ? ks : kd, b = ks < kd ? kd : ks;
    if (b % a == 0) {
        /* by symmetry the larger block sits on [0, b); the smaller one overlapping it, or
         * outside it on node 0, or on another node: outside, only the node matters */
        int64_t outside_same = -1, outside_other = -1;
        for (int64_t x = 0; x + a <= n; x += a) {
            int in_node0 = x + a <= per;
            if (x >= b && in_node0 && outside_same < 0) {
                outside_same = x;
            } else if (x >= b && !in_node0 && x / per != 0 && outside_other < 0) {
                outside_other = x;
            }
            if (x < b || x == outside_same || x == outside_other) {
                int64_t s0 = ks >= kd ? 0 : x, d0 = ks >= kd ? x : 0;
                double t = placed_time(p, per_elem, &rd, d0, &g, cs->rdeg, s0);
                best = t < best ? t : best;
            }
        }
    } else {
        for (int64_t s0 = 0; s0 + ks <= n; s0 += ks) {   /* sizes that do not nest: every pair */
            for (int64_t d0 = 0; d0 + kd <= n; d0 += kd) {
                double t = placed_time(p, per_elem, &rd, d0, &g, cs->rdeg, s0);
                best = t < best ? t : best;
            }
        }
    }
    free_reads(&rd);
    *out = best;
    return SW_OK;
}

sw_status sw_transfer_placed(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    const sw_config *cs = &src->cfgs[ci], *cd = &dst->cfgs[cj];
    int s0 = sw_config_first_device(p, cs), d0 = sw_config_first_device(p, cd);
    if (p->node_size <= 0 || s0 < 0 || d0 < 0) {
        return SW_FAIL(SW_ERR_VALUE, "the transfer of one pair by counting needs a machine of uniform nodes and "
                                     "configurations on contiguous devices");
    }
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    grid g;
    make_grid(src, cs, &g);
    reads rd = {0};
    SW_TRY(reads_of(p, dst, cd, slot, 0, &rd));
    *out = placed_time(p, per_elem, &rd, d0, &g, cs->rdeg, s0);
    free_reads(&rd);
    return SW_OK;
}
