/* memplan_internal.h -- what memplan.c takes from memplan_place.c. */
#ifndef SHARDWISE_MEMPLAN_INTERNAL_H
#define SHARDWISE_MEMPLAN_INTERNAL_H

#include "shardwise.h"

/* First-fit placement of one device's buffers: ids[0 .. n) (largest first) get offset[id],
 * the lowest multiple of `align` where no buffer placed before them and live at the same
 * time (lifetimes [first[id], last[id]] over task positions 0 .. npos - 1) sits; *arena is
 * the highest aligned end.  Buffers of 0 bytes get offset 0 and keep nothing clear. */
sw_status sw_memplan_place(const int64_t *bytes, const int32_t *first, const int32_t *last, const int32_t *ids,
                           int32_t n, int64_t align, int32_t npos, int64_t *offset, int64_t *arena);

/* The same, remembering each device's pattern (memplan_cache.c): a device whose buffers
 * repeat a pattern placed before (aligned sizes in order, lifetimes meeting alike) gets that
 * placement's offsets without placing again. */
typedef struct sw_place_cache sw_place_cache;
sw_place_cache *sw_place_cache_new(void);
void sw_place_cache_free(sw_place_cache *c);
sw_status sw_memplan_place_cached(sw_place_cache *c, const int64_t *bytes, const int32_t *first, const int32_t *last,
                                  const int32_t *ids, int32_t n, int64_t align, int32_t npos, int64_t *offset,
                                  int64_t *arena);

#endif
