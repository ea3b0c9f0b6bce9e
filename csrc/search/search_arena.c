/* search_arena.c -- where the elimination keeps the tables it makes.
 *
 * Every table a node elimination or an edge merge makes (ci_n x ck_n doubles) lives until
 * the search ends: undoing the eliminations reads them again.  Inception-v3 on 16 devices
 * makes 206 of them, 13 MB in all, written once each.  Taken from malloc one by one, that
 * memory is new to the process on every search (glibc hands freed memory back to the system
 * at the end), and the system maps it one 4 KB page at a time on first write: about 3,400
 * page faults, a fifth of that search's time.  So the tables are cut from a few large blocks
 * instead, freed together, and blocks of TABLE_HUGE_BLOCK bytes or more are marked for
 * transparent huge pages where the system has them (Linux: madvise MADV_HUGEPAGE), which
 * maps 2 MB at a fault.  Small searches keep small blocks of ordinary pages: a huge page
 * would cost them more to clear than their tables take.
 */
#define _DEFAULT_SOURCE   /* madvise and MADV_HUGEPAGE under -std=c11 */
#include <stdlib.h>       /* posix_memalign, malloc, free */
#if defined(__linux__)
#include <sys/mman.h>     /* madvise */
#endif

#include "search_internal.h"

#define TABLE_ALIGN 64                      /* a cache line: every table starts on one */
#define TABLE_HUGE_PAGE ((size_t)2 << 20)   /* the x86-64 and arm64 transparent huge page */
#define TABLE_HUGE_BLOCK ((size_t)4 << 20)  /* blocks this large are marked for huge pages */
#define TABLE_FIRST_BLOCK ((size_t)256 << 10)

struct table_block {
    struct table_block *next;
    char *base;
    size_t used, size;
};

void sw_table_arena_init(sw_table_arena *a, size_t expected) {
    a->blocks = NULL;
    a->next_size = expected > TABLE_FIRST_BLOCK ? expected : TABLE_FIRST_BLOCK;
}

/* A new block of at least `bytes` (and at least the arena's next size), at the head. */
static int add_block(sw_table_arena *a, size_t bytes) {
    size_t size = bytes > a->next_size ? bytes : a->next_size;
    int huge = size >= TABLE_HUGE_BLOCK;
    if (huge) {
        size = (size + TABLE_HUGE_PAGE - 1) / TABLE_HUGE_PAGE * TABLE_HUGE_PAGE;
    }
    struct table_block *b = malloc(sizeof *b);
    void *base = NULL;
    if (!b || posix_memalign(&base, huge ? TABLE_HUGE_PAGE : TABLE_ALIGN, size) != 0) {
        free(b);
        return 0;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) {
        (void)madvise(base, size, MADV_HUGEPAGE);   /* advice only: ordinary pages if refused */
    }
#endif
    *b = (struct table_block){a->blocks, base, 0, size};
    a->blocks = b;
    a->next_size = 2 * size;
    return 1;
}

double *sw_table_arena_alloc(sw_table_arena *a, size_t n) {
    size_t bytes = (n * sizeof(double) + TABLE_ALIGN - 1) / TABLE_ALIGN * TABLE_ALIGN;
    if (bytes == 0) {
        bytes = TABLE_ALIGN;
    }
    struct table_block *b = a->blocks;
    if ((!b || b->size - b->used < bytes) && !add_block(a, bytes)) {
        return NULL;
    }
    b = a->blocks;
    double *t = (double *)(void *)(b->base + b->used);
    b->used += bytes;
    return t;
}

void sw_table_arena_free(sw_table_arena *a) {
    while (a->blocks) {
        struct table_block *b = a->blocks;
        a->blocks = b->next;
        free(b->base);
        free(b);
    }
}
