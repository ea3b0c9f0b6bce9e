/*
 * simd.h -- SW_CLONES: compile a hot loop twice, for AVX2 and for the x86-64
 * baseline (SSE2), and let the dynamic loader pick one for the CPU it runs on
 * (GCC / Clang target_clones, an ifunc), so the extension stays loadable on any
 * x86-64 and still uses 256-bit vectors where there are some.
 *
 * The clones compute the same bits: "avx2" does not include FMA, so no
 * multiply-add can be contracted, and vectorization never reorders a float
 * sum (no -ffast-math); a reduction that should be vectorized says so in its
 * source with explicit lanes (batchnorm.c's add_sums).  Elsewhere (other
 * architectures or compilers) the macro is empty.
 */
#ifndef SHARDWISE_CPU_SIMD_H
#define SHARDWISE_CPU_SIMD_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#define SW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SW_CLONES
#endif

/* SW_INLINE: a helper inlined into each clone that calls it, so it is compiled for that clone's
 * target (and specialized for constant arguments, e.g. a stride of 1). */
#if defined(__GNUC__) || defined(__clang__)
#define SW_INLINE inline __attribute__((always_inline))
#else
#define SW_INLINE inline
#endif

#endif /* SHARDWISE_CPU_SIMD_H */
