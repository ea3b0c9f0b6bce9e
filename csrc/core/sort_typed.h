/* sort_typed.h -- a merge sort written out for one record type and one order.
 *
 * SW_DEFINE_SORT(name, type, less, cmp) defines  static void name(type *a, size_t n)  sorting
 * a[0..n) stably by less(const type *, const type *) (an inline function or macro).  The memory
 * planner sorts a few small records per buffer on every device at every replay (ResNet-50 data
 * parallel on 256 devices: 2.5 million records a replay); the C library's qsort calls its
 * comparator through a pointer and copies records by memcpy, which took a fifth of a replay.
 * Runs of 16 by insertion, then bottom-up merges through one scratch array; when that cannot be
 * allocated, qsort with `cmp` (the same order as a qsort comparator), so the result is the same
 * whenever the order is total or equal records are identical (every use here).
 */
#ifndef SHARDWISE_SORT_TYPED_H
#define SHARDWISE_SORT_TYPED_H

#include <stddef.h>  /* size_t */
#include <stdlib.h>  /* malloc, free, qsort */
#include <string.h>  /* memcpy */

#define SW_SORT_RUN 16

#define SW_DEFINE_SORT(name, type, less, cmp)                                                           \
    static void name(type *a, size_t n) {                                                               \
        if (n < 2) {                                                                                    \
            return;                                                                                     \
        }                                                                                               \
        type *tmp = n > SW_SORT_RUN ? malloc(sizeof *tmp * n) : NULL;                                   \
        if (n > SW_SORT_RUN && !tmp) {                                                                  \
            qsort(a, n, sizeof *a, cmp);                                                                \
            return;                                                                                     \
        }                                                                                               \
        for (size_t lo = 0; lo < n; lo += SW_SORT_RUN) {   /* sorted runs, by insertion */            \
            size_t hi = lo + SW_SORT_RUN < n ? lo + SW_SORT_RUN : n;                                    \
            for (size_t i = lo + 1; i < hi; i++) {                                                      \
                type v = a[i];                                                                          \
                size_t j = i;                                                                           \
                for (; j > lo && less(&v, &a[j - 1]); j--) {                                            \
                    a[j] = a[j - 1];                                                                    \
                }                                                                                       \
                a[j] = v;                                                                               \
            }                                                                                           \
        }                                                                                               \
        type *src = a, *dst = tmp;                                                                      \
        for (size_t w = SW_SORT_RUN; w < n; w *= 2) {   /* merge runs of w, ties from the left */      \
            for (size_t lo = 0; lo < n; lo += 2 * w) {                                                  \
                size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;             \
                size_t i = lo, j = mid, o = lo;                                                         \
                while (i < mid && j < hi) {                                                             \
                    dst[o++] = less(&src[j], &src[i]) ? src[j++] : src[i++];                            \
                }                                                                                       \
                while (i < mid) {                                                                       \
                    dst[o++] = src[i++];                                                                \
                }                                                                                       \
                while (j < hi) {                                                                        \
                    dst[o++] = src[j++];                                                                \
                }                                                                                       \
            }                                                                                           \
            type *t = src;                                                                              \
            src = dst;                                                                                  \
            dst = t;                                                                                    \
        }                                                                                               \
        if (src != a) {                                                                                 \
            memcpy(a, src, sizeof *a * n);                                                              \
        }                                                                                               \
        free(tmp);                                                                                      \
    }

#endif
