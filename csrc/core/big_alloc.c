/* big_alloc.c -- large arrays that are written soon after they are made.
 *
 * Memory new to the process is mapped by the system one 4 KB page at a time, on the first
 * write to each page.  On the machines measured (Linux guests), such a page fault costs
 * about 2.2 us of processor time: 16 MB written for the first time took ~11 ms, the same
 * 16 MB on transparent huge pages (2 MB at a fault, Linux: madvise MADV_HUGEPAGE) ~1.5-2.5
 * ms.  A search of Inception-v3 on 16 devices writes ~40 MB of new memory (its transfer
 * tables, the tables its elimination makes, the task graph of its memory check): its
 * largest arrays are taken from here.  Small arrays keep ordinary pages: a huge page costs
 * as much to clear as ~90 small faults, more than a small array takes.
 */
#define _DEFAULT_SOURCE   /* madvise and MADV_HUGEPAGE under -std=c11 */
#include <stdatomic.h>    /* atomic_int */
#include <stdint.h>       /* uintptr_t */
#include <stdlib.h>       /* posix_memalign */
#include <string.h>       /* memcpy */
#if defined(__linux__)
#include <pthread.h>      /* pthread_create */
#include <sys/mman.h>     /* madvise */
#endif

#include "internal.h"

#define LINE 64                       /* a cache line: every array starts on one */
#define SW_PAGE ((uintptr_t)4096)     /* a small page (madvise's unit) */

void *sw_big_alloc(size_t bytes, size_t huge_from) {
    int huge = bytes >= huge_from;
    size_t size = huge ? (bytes + SW_HUGE_PAGE - 1) / SW_HUGE_PAGE * SW_HUGE_PAGE : (bytes > 0 ? bytes : 1);
    void *base = NULL;
    if (posix_memalign(&base, huge ? SW_HUGE_PAGE : LINE, size) != 0) {
        return NULL;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) {
        (void)madvise(base, size, MADV_HUGEPAGE);   /* advice only: ordinary pages if refused */
    }
#endif
    return base;
}

void *sw_big_grow(void *old, size_t keep, size_t bytes, size_t huge_from) {
    if (bytes < huge_from || bytes > SW_GROW_COPY_MOST) {
        void *grown = realloc(old, bytes);
        if (grown && bytes > SW_GROW_COPY_MOST) {
            sw_advise_huge(grown, bytes);
        }
        return grown;
    }
    void *grown = sw_big_alloc(bytes, huge_from);
    if (grown && old) {
        memcpy(grown, old, keep < bytes ? keep : bytes);
        free(old);
    }
    return grown;
}

void sw_advise_huge(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* Every page of [p, p + bytes), not only its whole huge pages: a realloc'd array larger
     * than malloc's mapping threshold is a mapping of its own, starting on the page before p,
     * and marking only its inner huge pages would split it in three; realloc then can no
     * longer grow it in place (mremap wants one mapping), so it copies the array into a new
     * mapping of small pages, faulting every page on the way (a 1,024-device task graph:
     * 450,000 faults).  Pages already written keep their size; new ones map 2 MB where whole. */
    uintptr_t lo = (uintptr_t)p / SW_PAGE * SW_PAGE;
    uintptr_t hi = ((uintptr_t)p + bytes + SW_PAGE - 1) / SW_PAGE * SW_PAGE;
    if (hi > lo) {
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);   /* advice only */
    }
#else
    (void)p, (void)bytes;
#endif
}

/* ---- pages mapped ahead of the writes, on another thread ----
 * A large task graph is written front to back as it grows: 1,024 GPUs' lowering writes 0.8 GB,
 * and on a virtual machine whose host backs a page only when the guest first touches it, the
 * page faults took half the lowering (the guest clears each page, the host maps it).  Asked
 * for the next stretch of an array before the writes reach it, a short-lived thread maps those
 * pages with MADV_POPULATE_WRITE (Linux 5.14): it faults them in as a write would and leaves
 * every byte as it is, so it is safe whatever the array holds by then, and harmless where the
 * array has moved or been freed meanwhile (the range then belongs to no one, and the call fails,
 * or to another mapping, whose pages it maps without changing them).  Elsewhere, and on older
 * kernels (EINVAL), nothing happens and the writes fault as before. */
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23
#endif

static atomic_int populate_on = 1;

int sw_populate_ahead(int on) { return on >= 0 ? atomic_exchange(&populate_on, on != 0) : atomic_load(&populate_on); }

#if defined(__linux__)
typedef struct {
    uintptr_t lo, hi;
} page_range;

static void *populate(void *arg) {
    page_range r = *(page_range *)arg;
    free(arg);
    (void)madvise((void *)r.lo, r.hi - r.lo, MADV_POPULATE_WRITE);   /* advice only */
    return NULL;
}
#endif

void sw_populate_async(void *p, size_t bytes) {
#if defined(__linux__)
    if (!atomic_load(&populate_on) || bytes == 0) {
        return;
    }
    uintptr_t lo = (uintptr_t)p / SW_PAGE * SW_PAGE, hi = ((uintptr_t)p + bytes) / SW_PAGE * SW_PAGE;
    page_range *r = hi > lo ? malloc(sizeof *r) : NULL;
    if (!r) {
        return;
    }
    *r = (page_range){lo, hi};
    pthread_attr_t attr;
    pthread_t thread;
    int made = 0;
    if (pthread_attr_init(&attr) == 0) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        (void)pthread_attr_setstacksize(&attr, (size_t)64 << 10);
        made = pthread_create(&thread, &attr, populate, r) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!made) {
        free(r);   /* the writes fault the pages themselves */
    }
#else
    (void)p, (void)bytes;
#endif
}

int64_t sw_populate_ahead_of(void *base, int64_t written, int64_t end, int64_t ahead, int64_t lead, int64_t stretch) {
    if (ahead >= written + lead || ahead >= end) {
        return ahead;
    }
    int64_t from = ahead > written ? ahead : written;
    while (from < end && from < written + lead + stretch) {
        int64_t to = from + stretch < end ? from + stretch : end;
        sw_populate_async((char *)base + from, (size_t)(to - from));
        from = to;
    }
    return from;
}
