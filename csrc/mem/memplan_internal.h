/* memplan_internal.h -- what memplan.c shares with memplan_place.c and memplan_streams.c. */
#ifndef SHARDWISE_MEMPLAN_INTERNAL_H
#define SHARDWISE_MEMPLAN_INTERNAL_H

#include "internal.h"

/* First-fit placement of one device's buffers: ids[0 .. n) (largest first) get offset[id],
 * the lowest multiple of `align` where no buffer placed before them and live at the same
 * time (lifetimes [first[id], last[id]] over task positions 0 .. npos - 1) sits; *arena is
 * the highest aligned end.  Buffers of 0 bytes get offset 0 and keep nothing clear. */
sw_status sw_memplan_place(const int64_t *bytes, const int32_t *first, const int32_t *last, const int32_t *ids,
                           int32_t n, int64_t align, int32_t npos, int64_t *offset, int64_t *arena);

/* The same, remembering each device's pattern (memplan_cache.c): a device whose buffers
 * repeat a pattern placed before (aligned sizes in order, lifetimes meeting alike) gets that
 * placement's offsets without placing again.  *entry: the pattern's place in the cache (-1: not
 * kept), valid until the next call, for the two functions below. */
typedef struct sw_place_cache sw_place_cache;
sw_place_cache *sw_place_cache_new(void);
void sw_place_cache_free(sw_place_cache *c);
sw_status sw_memplan_place_cached(sw_place_cache *c, const int64_t *bytes, const int32_t *first, const int32_t *last,
                                  const int32_t *ids, int32_t n, int64_t align, int32_t npos, int64_t *offset,
                                  int64_t *arena, int *entry);

/* The reuse edges of a device repeat its pattern's too (memplan.c, reuse_edges): which buffer
 * first takes over an asked buffer's bytes depends only on the offsets and on how the lifetimes
 * are ordered.  The answers kept for pattern `entry` (per buffer in placement order: the position
 * of the buffer answering it, -1 for none), if they were kept with the same n flags `asked`
 * (1: a buffer whose readers on other streams need an edge); NULL otherwise.  Keeping copies
 * them (and forgets quietly when out of memory: the cache is only a shortcut). */
const int32_t *sw_place_cache_answers(const sw_place_cache *c, int entry, const uint8_t *asked, int32_t n);
void sw_place_cache_keep_answers(sw_place_cache *c, int entry, const uint8_t *asked, const int32_t *answer,
                                 int32_t n);

/* Reuse edges as they are found (one list per run of devices planned together: memplan.c
 * plans runs of devices on several threads, and puts the lists end to end in device order). */
typedef struct {
    int32_t *from, *to;
    int64_t n, cap;
} sw_memplan_edges;

/* Append reuse edge from -> to. */
sw_status sw_memplan_add_edge(sw_memplan_edges *e, int32_t from, int32_t to);
void sw_memplan_edges_free(sw_memplan_edges *e);

/* The tasks at either end of every buffer's use, in program order (memplan_streams.c):
 * its entry (the tasks up to its first writer: that writer and any reads before it) and its
 * exit (its last writer and the readers after it); a buffer nobody writes has all its tasks
 * in both.  Entries of b: touch[ptr[b] .. entry_end[b]); exits: touch[exit_begin[b] .. ptr[b + 1]). */
typedef struct {
    int32_t *ptr, *touch, *entry_end, *exit_begin;
} sw_memplan_ends;

sw_status sw_memplan_ends_build(const sw_task_graph *g, sw_memplan_ends *e);
void sw_memplan_ends_free(sw_memplan_ends *e);

/* Reuse edges of one device's buffers mine[0 .. n) when tasks run on several streams per
 * device: for each buffer, from the exit of the previous occupant of each of its bytes to its
 * entry, where the two lie on different streams. */
sw_status sw_memplan_stream_edges(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st,
                                  const sw_memplan_ends *e, const int32_t *mine, int32_t n, sw_memplan_edges *out);

#endif
