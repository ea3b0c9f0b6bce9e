/*
 * pool_argmax.h -- max pooling's winners for a run of windows in vector lanes (pool_argmax.c).
 */
#ifndef SHARDWISE_CPU_POOL_ARGMAX_H
#define SHARDWISE_CPU_POOL_ARGMAX_H

#include <stdint.h>  /* int64_t, int32_t */

/* Windows per run: 16 with the AVX-512 loops, 8 with AVX2, 0 where neither runs (the scalar loop). */
int pool_argmax_lanes(void);

/* Element (i, j) of a window as one int (kh, kw <= POOL_MAX_TAPS): i in the high half. */
#define POOL_MAX_TAPS 0x7fff
#define POOL_TAP(i, j) (((i) << 16) | (j))
#define POOL_TAP_ROW(t) ((t) >> 16)
#define POOL_TAP_COL(t) ((t) & 0xffff)

/* With lanes = pool_argmax_lanes() (not 0): for the n (1 <= n <= lanes) windows of kh x kw
 * elements (at most POOL_MAX_TAPS each) of a plane xp of `plane` floats with rows of xw, whose first
 * elements lie at xp[first + l * step], l < n, each wholly inside the plane (offsets below
 * 2^31): at[l] = POOL_TAP(i, j) of window l's first maximum in row-major order.  Returns 0 (at
 * unspecified) when a window holds a NaN: the caller then applies the NaN rule itself. */
int pool_argmax_run(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int n,
                    int64_t kh, int64_t kw, int32_t *at);

/* The forward pass over m windows of a row wholly inside the plane (the same arguments):
 * y[l] = the first maximum of window l (through a ReLU when relu), l from 0 on, in runs of
 * `lanes`; returns how many leading windows it wrote: m, or fewer where a run holds a NaN or
 * would read past the plane (8 lanes read whole vectors), 0 for strides above 2.  The caller's
 * scalar loop takes the rest. */
int64_t pool_max_row(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int64_t m,
                     int64_t kh, int64_t kw, int relu, float *y);

#endif /* SHARDWISE_CPU_POOL_ARGMAX_H */
