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
#include <stdint.h>       /* uintptr_t */
#include <stdlib.h>       /* posix_memalign */
#if defined(__linux__)
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
