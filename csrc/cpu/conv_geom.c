/* conv_geom.c -- the convolution's bookkeeping: the output box cut into GEMM
 * tiles, the checks the three kernels share, and the per-thread scratch cache.
 *
 * A tile is at most tile_cols output pixels: a run of pixels of one sample
 * (large planes) or several whole samples side by side (small planes, so late
 * layers still get wide GEMMs); tile_cols keeps the (K, tile_cols) im2col
 * buffer within CONV_COL_BUDGET floats (conv_internal.h).
 */
#include <pthread.h>    /* per-thread scratch caches (pthread keys) */
#include <stdatomic.h>  /* the count of cache growths */
#include <stdint.h>     /* int64_t, INT32_MAX */
#include <stdlib.h>     /* malloc, free */

#include "conv_internal.h"
#include "../core/view.h"  /* sw_view_check, sw_check_blas_dims */

/* ------------------------------------------------------------------ tiles */
void conv_geom_tiles(conv_geom *g) {
    int64_t len = g->qb - g->qa;
    g->tile_cols = conv_max(CONV_MIN_TILE_COLS, CONV_COL_BUDGET / conv_max(g->k, 1));
    if (len >= g->tile_cols) {
        g->per_sample = conv_ceil_div(len, g->tile_cols);
        g->nb = 1;
    } else {
        g->per_sample = 1;
        g->nb = conv_max(1, g->tile_cols / conv_max(len, 1));
    }
}

int64_t conv_geom_ntiles(const conv_geom *g) {
    int64_t ns = g->n1 - g->n0;
    if (ns <= 0 || g->qb <= g->qa) {
        return 0;
    }
    return g->nb > 1 ? conv_ceil_div(ns, g->nb) : ns * g->per_sample;
}

conv_tile conv_geom_tile(const conv_geom *g, int64_t i) {
    conv_tile t;
    if (g->nb > 1) {
        t.n = g->n0 + i * g->nb;
        t.nb = conv_min(g->nb, g->n1 - t.n);
        t.q0 = g->qa;
        t.q1 = g->qb;
    } else {
        t.n = g->n0 + i / g->per_sample;
        t.nb = 1;
        t.q0 = g->qa + (i % g->per_sample) * g->tile_cols;
        t.q1 = conv_min(t.q0 + g->tile_cols, g->qb);
    }
    return t;
}

sw_status conv_checked_plane(const sw_view *v, const char *name, int64_t *plane) {
    if (v->shape[2] > INT32_MAX || v->shape[3] > INT32_MAX || v->shape[2] * v->shape[3] > INT32_MAX) {
        return SW_FAIL(SW_ERR_VALUE, "%s: a %lldx%lld plane exceeds the 32-bit BLAS interface", name,
                       (long long)v->shape[2], (long long)v->shape[3]);
    }
    *plane = v->shape[2] * v->shape[3];
    return SW_OK;
}

sw_status conv_geom_init(conv_geom *g, const sw_view *ov, int64_t n0, int64_t n1, int64_t ci,
                           const sw_window *p, const char *name) {
    g->n0 = n0;
    g->n1 = n1;
    g->nlo = ov->lo[0];
    g->co = ov->shape[1];
    g->r0 = ov->lo[2];
    g->c0 = ov->lo[3];
    g->wo = ov->shape[3];
    sw_status s = conv_checked_plane(ov, name, &g->plane);
    if (s != SW_OK) {
        return s;
    }
    g->qa = 0;
    g->qb = g->plane;
    if (p->kh > INT32_MAX / p->kw || ci > INT32_MAX / (p->kh * p->kw)) {
        return SW_FAIL(SW_ERR_VALUE, "%s: Ci*kh*kw exceeds the 32-bit BLAS interface", name);
    }
    g->k = ci * p->kh * p->kw;
    conv_geom_tiles(g);
    int64_t dims[2] = {g->co, g->tile_cols};
    return sw_check_blas_dims(name, 2, dims);
}


/* ------------------------------------------------------------------ checks */
sw_status conv_check_weight(const sw_view *wv, const sw_window *p, const char *name, int64_t *ci) {
    sw_status s = sw_view_check(wv, 4, name);
    if (s != SW_OK) {
        return s;
    }
    *ci = wv->shape[1];
    if ((s = sw_view_check_range(wv, 1, 0, wv->shape[1], name, "input-channel")) != SW_OK ||
        (s = sw_view_check_range(wv, 2, 0, p->kh, name, "kernel-row")) != SW_OK ||
        (s = sw_view_check_range(wv, 3, 0, p->kw, name, "kernel-column")) != SW_OK) {
        return s;
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ scratch */
typedef struct {
    void *buf[CONV_SCRATCH_KINDS];
    size_t cap[CONV_SCRATCH_KINDS];   /* bytes */
} scratch_cache;

static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;
static _Atomic long long cache_grows;

static void cache_free(void *p) {
    scratch_cache *c = p;
    for (int k = 0; k < CONV_SCRATCH_KINDS; k++) {
        free(c->buf[k]);
    }
    free(c);
}

static void cache_make_key(void) { (void)pthread_key_create(&cache_key, cache_free); }

long long sw_conv_scratch_grows(void) { return atomic_load(&cache_grows); }

void *conv_scratch(int kind, size_t bytes) {
    pthread_once(&cache_once, cache_make_key);
    scratch_cache *c = pthread_getspecific(cache_key);
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c || pthread_setspecific(cache_key, c) != 0) {
            free(c);
            return NULL;
        }
    }
    if (bytes > c->cap[kind] || !c->buf[kind]) {
        /* 64 bytes of slack: vector loops may read (never use) a little past the end */
        size_t size = (bytes + 64 + 63) / 64 * 64;
        if (size < bytes) {
            return NULL;   /* wrapped around */
        }
        void *grown = aligned_alloc(64, size);
        if (!grown) {
            return NULL;
        }
        free(c->buf[kind]);
        c->buf[kind] = grown;
        c->cap[kind] = bytes;
        atomic_fetch_add(&cache_grows, 1);
    }
    return c->buf[kind];
}
