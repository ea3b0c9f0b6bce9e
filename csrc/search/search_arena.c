/* search_arena.c -- where the elimination keeps the tables it makes.
 *
 * Every table a node elimination or an edge merge makes (ci_n x ck_n doubles) lives until
 * the search ends: undoing the eliminations reads them again.  Inception-v3 on 16 devices
 * makes 206 of them, 13 MB in all, written once each.  Taken from malloc one by one, that
 * memory is new to the process on every search (glibc hands freed memory back to the system
 * at the end), and the system maps it one 4 KB page at a time on first write: about 3,400
 * page faults, a fifth of that search's time.  So the tables are cut from a few large blocks
 * instead, freed together, and blocks of SW_HUGE_FROM bytes or more are on transparent huge
 * pages where the system has them (core/big_alloc.c), which maps 2 MB at a fault.  Small
 * searches keep small blocks of ordinary pages.  A large block is written front to back, table
 * after table, so its pages are mapped ahead of the tables cut from it on another thread
 * (sw_populate_async): on a virtual machine whose host backs a page at the guest's first
 * touch, clearing the fresh huge pages of the min-plus products took up to a third of a first
 * search of Inception-v3.
 *
 * A caller that runs many searches in a row (the memory-constrained search's Lagrangian
 * steps: 25 eliminations over the same tables for a Llama on 1,024 GPUs, ~36 MB of tables
 * each) keeps the blocks between them (sw_table_arena_keep): a block freed goes to a list of
 * spares that the next search's blocks are taken from, already mapped, until the caller
 * lets them go.
 */
#include <pthread.h>      /* the spares' lock: searches may run on several threads */
#include <stdlib.h>       /* malloc, free */

#include "search_internal.h"

#define TABLE_ALIGN 64                      /* a cache line: every table starts on one */
#define TABLE_FIRST_BLOCK ((size_t)256 << 10)
#define AHEAD_STRETCH SW_HUGE_PAGE                /* mapped at a time on another thread ... */
#define AHEAD_LEAD (2 * SW_HUGE_PAGE)             /* ... while the tables are less than this behind */

struct table_block {
    struct table_block *next;
    char *base;
    size_t used, size;
    size_t ahead;   /* bytes from base asked to be mapped ahead (a block of huge pages) */
};

/* The bytes of b that have been mapped: its tables and the pages asked for ahead of them (a
 * block kept as a spare keeps them; the rest of its size is address space only).  Unchanged
 * while b is a spare, so what spare_bytes counts for it. */
static size_t mapped_bytes(const struct table_block *b) { return b->ahead > b->used ? b->ahead : b->used; }

/* Blocks of huge pages freed while some caller keeps them (keepers > 0), newest first.  What they
 * hold is counted by the bytes mapped, not by their size: a block is sized for the tables the
 * arena expects (a fraction of the edges' bytes: 610 MB for a Llama on 1,024 GPUs) while the
 * searches over it write a few dozen MB; counted by size, such a block was never kept, and each
 * of the 25 searches of that Llama's memory-constrained search mapped its tables' pages afresh. */
#define SPARES_MOST ((size_t)512 << 20)   /* bytes mapped kept at most: beyond them a block is freed */
static pthread_mutex_t spares_lock = PTHREAD_MUTEX_INITIALIZER;
static struct table_block *spares;
static size_t spare_bytes;
static int keepers;

static void free_block(struct table_block *b) {
    free(b->base);
    free(b);
}

size_t sw_table_arena_keep(int keep) {
    struct table_block *gone = NULL;
    pthread_mutex_lock(&spares_lock);
    if (keep > 0) {
        keepers++;
    } else if (keep == 0 && keepers > 0 && --keepers == 0) {
        gone = spares;
        spares = NULL;
        spare_bytes = 0;
    }
    size_t kept = spare_bytes;
    pthread_mutex_unlock(&spares_lock);
    while (gone) {
        struct table_block *b = gone;
        gone = b->next;
        free_block(b);
    }
    return kept;
}

/* A kept block of `size` bytes or more (the smallest such), or NULL. */
static struct table_block *take_spare(size_t size) {
    pthread_mutex_lock(&spares_lock);
    struct table_block **best = NULL;
    for (struct table_block **at = &spares; *at; at = &(*at)->next) {
        if ((*at)->size >= size && (!best || (*at)->size < (*best)->size)) {
            best = at;
        }
    }
    struct table_block *b = best ? *best : NULL;
    if (b) {
        *best = b->next;
        spare_bytes -= mapped_bytes(b);
    }
    pthread_mutex_unlock(&spares_lock);
    return b;
}

/* Keep b for the next search when a caller asks and there is room; else free it. */
static void give_back(struct table_block *b) {
    if (b->size >= SW_HUGE_FROM) {
        pthread_mutex_lock(&spares_lock);
        size_t mapped = mapped_bytes(b);
        int kept = keepers > 0 && spare_bytes + mapped <= SPARES_MOST;
        if (kept) {
            b->next = spares;
            spares = b;
            spare_bytes += mapped;
        }
        pthread_mutex_unlock(&spares_lock);
        if (kept) {
            return;
        }
    }
    free_block(b);
}

/* Ask for the pages of a block of huge pages past its tables to be mapped, ahead of them, up to
 * the bytes the arena expects in all: pages mapped past the last table are memory new to the
 * process for nothing, and on a virtual machine whose host backs each page at the guest's first
 * touch, costly (Inception-v3 on 16 devices: its tables took 14.1 MB, and the second block was
 * mapped 4.9 MB past them, a quarter of all the pages mapped).  Past that, tables are mapped as
 * they are written. */
static void map_ahead(sw_table_arena *a, struct table_block *b) {
    size_t end = a->expected > a->earlier ? a->expected - a->earlier : 0;
    end = end < b->size ? end : b->size;
    if (b->size >= SW_HUGE_FROM && end > b->used) {
        b->ahead = (size_t)sw_populate_ahead_of(b->base, (int64_t)b->used, (int64_t)end, (int64_t)b->ahead,
                                                (int64_t)AHEAD_LEAD, (int64_t)AHEAD_STRETCH);
    }
}

void sw_table_arena_init(sw_table_arena *a, size_t expected) {
    a->blocks = NULL;
    a->next_size = expected > TABLE_FIRST_BLOCK ? expected : TABLE_FIRST_BLOCK;
    a->expected = expected;
    a->earlier = 0;
}

/* A new block of at least `bytes` (and at least the arena's next size), at the head. */
static int add_block(sw_table_arena *a, size_t bytes) {
    size_t size = bytes > a->next_size ? bytes : a->next_size;
    if (size >= SW_HUGE_FROM) {   /* whole huge pages: use them all */
        size = (size + SW_HUGE_PAGE - 1) / SW_HUGE_PAGE * SW_HUGE_PAGE;
    }
    struct table_block *b = size >= SW_HUGE_FROM ? take_spare(size) : NULL;
    if (b) {   /* mapped as far as its last search used it, or asked it to be */
        b->ahead = b->ahead > b->used ? b->ahead : b->used;
        b->used = 0;
    } else {
        b = malloc(sizeof *b);
        void *base = b ? sw_big_alloc(size, SW_HUGE_FROM) : NULL;
        if (!base) {
            free(b);
            return 0;
        }
        *b = (struct table_block){NULL, base, 0, size, 0};
    }
    a->earlier += a->blocks ? a->blocks->used : 0;
    b->next = a->blocks;
    a->blocks = b;
    a->next_size = 2 * b->size;
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
    map_ahead(a, b);
    return t;
}

void sw_table_arena_free(sw_table_arena *a) {
    while (a->blocks) {
        struct table_block *b = a->blocks;
        a->blocks = b->next;
        give_back(b);
    }
}
