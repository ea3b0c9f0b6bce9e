/* search_ve.c -- the residual graph solved by variable elimination (min-sum).
 *
 * Node, edge and leaf elimination (search_elim.c) stop at graphs where every
 * node has three or more neighbours or two edges the same way: skips that
 * cross, dense blocks.  Variable elimination finishes them exactly.
 * Eliminating a variable v (an op) replaces the tables that mention v by one
 * table over v's neighbours S:
 *     f(S) = min over cv of the sum of those tables            (Eq. 2, any degree)
 * The order is greedy min-fill (fewest new edges, then the smallest new table;
 * min-degree above MIN_FILL_MAX_NODES nodes, where min-fill's own cost grows),
 * so with C configurations per op the largest table has about C^w entries for a
 * residual graph of treewidth w.
 *
 * The bound.  Exact when no table exceeds max_table entries and the total work
 * (sum over eliminations of table entries x configurations of v x tables
 * summed) is at most max_work.  Above it, mini-bucket elimination: v's tables
 * are split into groups ("mini-buckets") whose joint table fits a smaller cap,
 * and each group is minimized over v on its own.  min of a sum >= sum of the
 * mins, so the constant it ends with is a lower bound of Eq. 1.  The assignment
 * decoded from the same tables, improved by search_fallback.c, is the plan;
 * the difference is the gap reported to the caller.
 *
 * Shapes: variable i (local id) has card[i] configurations; a table over
 * scope (v_0 .. v_{k-1}) holds prod card entries at offset sum c_j * stride_j.
 */
#include <math.h>    /* INFINITY, fabs, fmax */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memset, memcpy */

#include "search_internal.h"

enum { MIN_FILL_MAX_NODES = 400, MAX_ODOMETER = 64 };

typedef struct {
    int nv;
    int *var;          /* local variable ids */
    int64_t *stride;   /* per variable of the scope */
    double size;       /* prod card (a double: the dry run meets sizes past int64) */
    const double *t;   /* NULL in a dry run */
    double *own;       /* tables made here */
} factor;

typedef struct {
    int k;                       /* variables */
    const int *card;             /* configurations per variable */
    factor *f;                   /* input factors first (k unary, then pairwise), then messages */
    int nf, cap_f, ninput;
    int **bucket;                /* bucket[v]: factor ids eliminated with v */
    int *bucket_n, *bucket_cap;
    int *order, *pos;            /* elimination order and each variable's place in it */
    int64_t *offset;             /* of each variable's configurations in a flat per-configuration array */
    double lower;                /* sum of the constants left */
    double work, largest;        /* of the last run */
    int width;                   /* most variables in one table of the last run */
} ve_state;

static sw_status push_factor(ve_state *s, factor fa, int *id) {
    if (s->nf == s->cap_f) {
        int cap = s->cap_f * 2 + 16;
        factor *n = realloc(s->f, sizeof *n * (size_t)cap);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        s->f = n;
        s->cap_f = cap;
    }
    s->f[s->nf] = fa;
    *id = s->nf++;
    return SW_OK;
}

static sw_status bucket_add(ve_state *s, int v, int id) {
    if (s->bucket_n[v] == s->bucket_cap[v]) {
        int cap = s->bucket_cap[v] * 2 + 4;
        int *n = realloc(s->bucket[v], sizeof *n * (size_t)cap);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        s->bucket[v] = n;
        s->bucket_cap[v] = cap;
    }
    s->bucket[v][s->bucket_n[v]++] = id;
    return SW_OK;
}

/* The variable of f's scope eliminated first: f goes to its bucket.  -1: a constant. */
static int first_var(const ve_state *s, const factor *fa) {
    int best = -1;
    for (int j = 0; j < fa->nv; j++) {
        if (best < 0 || s->pos[fa->var[j]] < s->pos[best]) {
            best = fa->var[j];
        }
    }
    return best;
}

/* ---------------------------------------------------------------- the order */

/* Greedy min-fill (or min-degree) on the interaction graph adj (k x k, modified):
 * O(k^2 (k + d^2)) for neighbourhoods of d variables. */
static sw_status choose_order(ve_state *s, char *adj) {
    int k = s->k;
    char *done = calloc((size_t)k, 1);
    int *nb = malloc(sizeof *nb * (size_t)k);
    if (!done || !nb) {
        free(done);
        free(nb);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int min_fill = k <= MIN_FILL_MAX_NODES;
    for (int step = 0; step < k; step++) {
        int best = -1;
        double best_fill = INFINITY, best_size = INFINITY;
        for (int v = 0; v < k; v++) {
            if (done[v]) {
                continue;
            }
            int d = 0;
            double size = 1;
            for (int a = 0; a < k; a++) {
                if (a != v && !done[a] && adj[(size_t)v * k + a]) {
                    nb[d++] = a;
                    size *= s->card[a];
                }
            }
            double fill = d;   /* min-degree: the neighbours */
            if (min_fill) {
                fill = 0;      /* min-fill: pairs of neighbours not yet adjacent */
                for (int x = 0; x < d; x++) {
                    for (int y = x + 1; y < d; y++) {
                        fill += !adj[(size_t)nb[x] * k + nb[y]];
                    }
                }
            }
            if (fill < best_fill || (fill == best_fill && size < best_size)) {
                best = v;
                best_fill = fill;
                best_size = size;
            }
        }
        s->order[step] = best;
        s->pos[best] = step;
        done[best] = 1;
        int d = 0;
        for (int a = 0; a < k; a++) {
            if (!done[a] && adj[(size_t)best * k + a]) {
                nb[d++] = a;
            }
        }
        for (int x = 0; x < d; x++) {   /* best's neighbours become a clique */
            for (int y = 0; y < d; y++) {
                if (x != y) {
                    adj[(size_t)nb[x] * k + nb[y]] = 1;
                }
            }
        }
    }
    free(done);
    free(nb);
    return SW_OK;
}

/* ---------------------------------------------------------------- one elimination */

/* The message of mini-bucket ids[0..n) over v: its scope is the union of their
 * scopes without v (and without single-configuration variables, always at 0). */
static sw_status make_message(ve_state *s, int v, const int *ids, int n, int dry, int *out) {
    int k = s->k;
    char *in = calloc((size_t)k, 1);
    factor m = {0};
    if (!in) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int q = 0; q < n; q++) {
        const factor *fa = &s->f[ids[q]];
        for (int j = 0; j < fa->nv; j++) {
            if (fa->var[j] != v && s->card[fa->var[j]] > 1 && !in[fa->var[j]]) {
                in[fa->var[j]] = 1;
                m.nv++;
            }
        }
    }
    m.var = malloc(sizeof *m.var * (size_t)(m.nv > 0 ? m.nv : 1));
    m.stride = malloc(sizeof *m.stride * (size_t)(m.nv > 0 ? m.nv : 1));
    if (!m.var || !m.stride) {
        free(in);
        free(m.var);
        free(m.stride);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int j = 0;
    for (int a = 0; a < k; a++) {
        if (in[a]) {
            m.var[j++] = a;
        }
    }
    free(in);
    m.size = 1;
    for (j = m.nv - 1; j >= 0; j--) {   /* row-major: the last variable varies fastest */
        m.stride[j] = (int64_t)m.size;
        m.size *= s->card[m.var[j]];
    }
    double work = m.size * s->card[v] * n;
    s->work += work;
    s->largest = m.size > s->largest ? m.size : s->largest;
    s->width = m.nv > s->width ? m.nv : s->width;
    sw_status st = SW_OK;
    if (!dry) {
        if (m.nv > MAX_ODOMETER) {
            st = SW_FAIL(SW_ERR_INTERNAL, "a table over %d variables passed the size bound", m.nv);
        } else {
            m.own = malloc(sizeof(double) * (size_t)m.size);
            if (!m.own) {
                st = SW_FAIL(SW_ERR_NOMEM, "out of memory for a %.0f-entry table", m.size);
            }
        }
    }
    if (st == SW_OK && !dry) {
        /* offsets of every summed table follow an odometer over the message's scope */
        int64_t *off = calloc((size_t)n, sizeof *off), *vstride = calloc((size_t)n, sizeof *vstride);
        int64_t *step = calloc((size_t)n * (size_t)(m.nv > 0 ? m.nv : 1), sizeof *step);
        int *digit = calloc((size_t)(m.nv > 0 ? m.nv : 1), sizeof *digit);
        const double **tab = calloc((size_t)n, sizeof *tab);
        if (!off || !vstride || !step || !digit || !tab) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (int q = 0; st == SW_OK && q < n; q++) {
            const factor *fa = &s->f[ids[q]];
            tab[q] = fa->t;
            for (int a = 0; a < fa->nv; a++) {
                if (fa->var[a] == v) {
                    vstride[q] = fa->stride[a];
                }
                for (int d = 0; d < m.nv; d++) {
                    if (fa->var[a] == m.var[d]) {
                        step[(size_t)q * m.nv + d] = fa->stride[a];
                    }
                }
            }
        }
        int cv_n = s->card[v];
        for (int64_t cell = 0; st == SW_OK && cell < (int64_t)m.size; cell++) {
            double best = INFINITY;
            for (int cv = 0; cv < cv_n; cv++) {
                double sum = 0;
                for (int q = 0; q < n; q++) {
                    sum += tab[q][off[q] + cv * vstride[q]];
                }
                best = sum < best ? sum : best;
            }
            m.own[cell] = best;
            for (int d = m.nv - 1; d >= 0; d--) {   /* next cell: advance the odometer */
                int c = s->card[m.var[d]];
                if (++digit[d] < c) {
                    for (int q = 0; q < n; q++) {
                        off[q] += step[(size_t)q * m.nv + d];
                    }
                    break;
                }
                digit[d] = 0;
                for (int q = 0; q < n; q++) {
                    off[q] -= step[(size_t)q * m.nv + d] * (c - 1);
                }
            }
        }
        free(off);
        free(vstride);
        free(step);
        free(digit);
        free(tab);
        m.t = m.own;
    }
    if (st == SW_OK) {
        st = push_factor(s, m, out);
    }
    if (st != SW_OK) {
        free(m.var);
        free(m.stride);
        free(m.own);
    }
    return st;
}

/* Size of the joint table of a group plus factor f, without v. */
static double joint_size(const ve_state *s, int v, const char *in_group, const factor *fa, double group_size) {
    double size = group_size;
    for (int j = 0; j < fa->nv; j++) {
        int a = fa->var[j];
        if (a != v && !in_group[a]) {
            size *= s->card[a];
        }
    }
    return size;
}

/* Eliminate every variable in order, splitting a bucket into mini-buckets whose
 * tables stay within `cap` entries (INFINITY: one bucket, exact). */
static sw_status run(ve_state *s, double cap, int dry) {
    int k = s->k;
    s->lower = 0;
    s->work = 0;
    s->largest = 0;
    s->width = 0;
    for (int v = 0; v < k; v++) {
        s->bucket_n[v] = 0;
    }
    for (int i = 0; i < s->ninput; i++) {
        SW_TRY(bucket_add(s, first_var(s, &s->f[i]), i));
    }
    int *group = malloc(sizeof *group * (size_t)(s->nf + 1));
    int *taken = NULL;
    char *in_group = calloc((size_t)k, 1);
    sw_status st = group && in_group ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    for (int step = 0; st == SW_OK && step < k; step++) {
        int v = s->order[step];
        int nb = s->bucket_n[v];
        free(taken);
        taken = calloc((size_t)(nb > 0 ? nb : 1), sizeof *taken);
        if (!taken) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            break;
        }
        for (int left = nb; st == SW_OK && left > 0;) {
            /* a mini-bucket: first-fit from the first table not yet taken */
            int n = 0;
            double size = 1;
            memset(in_group, 0, (size_t)k);
            for (int q = 0; q < nb; q++) {
                if (taken[q]) {
                    continue;
                }
                const factor *fa = &s->f[s->bucket[v][q]];
                double joint = joint_size(s, v, in_group, fa, size);
                if (n > 0 && joint > cap) {
                    continue;
                }
                taken[q] = 1;
                left--;
                group[n++] = s->bucket[v][q];
                size = joint;
                for (int j = 0; j < fa->nv; j++) {
                    if (fa->var[j] != v && s->card[fa->var[j]] > 1) {
                        in_group[fa->var[j]] = 1;
                    }
                }
            }
            int id = -1;
            st = make_message(s, v, group, n, dry, &id);
            if (st != SW_OK) {
                break;
            }
            int to = first_var(s, &s->f[id]);
            if (to < 0) {
                s->lower += dry ? 0 : s->f[id].t[0];
            } else {
                st = bucket_add(s, to, id);
            }
        }
    }
    free(group);
    free(taken);
    free(in_group);
    return st;
}

/* Drop the messages of a run (keeping the input factors) before the next run. */
static void drop_messages(ve_state *s) {
    for (int i = s->ninput; i < s->nf; i++) {
        free(s->f[i].var);
        free(s->f[i].stride);
        free(s->f[i].own);
    }
    s->nf = s->ninput;
}

static double factor_at(const factor *fa, const int *asg) {
    int64_t o = 0;
    for (int j = 0; j < fa->nv; j++) {
        o += (int64_t)asg[fa->var[j]] * fa->stride[j];
    }
    return fa->t[o];
}

/* Decode: in reverse order, each variable takes the configuration minimizing its
 * bucket's tables given the variables eliminated after it.  score (optional, card[v]
 * entries per variable, one after the other) keeps those sums: how promising each
 * configuration looked. */
static void decode(const ve_state *s, int *asg, double *score) {
    for (int i = 0; i < s->k; i++) {
        asg[i] = 0;
    }
    for (int step = s->k - 1; step >= 0; step--) {
        int v = s->order[step];
        double best = INFINITY;
        int arg = 0;
        for (int cv = 0; cv < s->card[v]; cv++) {
            asg[v] = cv;
            double sum = 0;
            for (int q = 0; q < s->bucket_n[v]; q++) {
                sum += factor_at(&s->f[s->bucket[v][q]], asg);
            }
            if (score) {
                score[s->offset[v] + cv] = sum;
            }
            if (sum < best) {
                best = sum;
                arg = cv;
            }
        }
        asg[v] = arg;
    }
}

static double total(const ve_state *s, const int *asg) {
    double c = 0;
    for (int i = 0; i < s->ninput; i++) {
        c += factor_at(&s->f[i], asg);
    }
    return c;
}

static void free_state(ve_state *s) {
    if (s->f) {
        drop_messages(s);
        for (int i = 0; i < s->ninput; i++) {
            free(s->f[i].var);
            free(s->f[i].stride);
        }
    }
    free(s->f);
    for (int v = 0; s->bucket && v < s->k; v++) {
        free(s->bucket[v]);
    }
    free(s->bucket);
    free(s->bucket_n);
    free(s->bucket_cap);
    free(s->order);
    free(s->pos);
    free(s->offset);
}

static sw_status input_factor(ve_state *s, int nv, const int *var, const int64_t *stride, const double *t) {
    factor fa = {nv, malloc(sizeof(int) * (size_t)nv), malloc(sizeof(int64_t) * (size_t)nv), 1, t, NULL};
    if (!fa.var || !fa.stride) {
        free(fa.var);
        free(fa.stride);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int j = 0; j < nv; j++) {
        fa.var[j] = var[j];
        fa.stride[j] = stride[j];
        fa.size *= s->card[var[j]];
    }
    int id;
    sw_status st = push_factor(s, fa, &id);
    if (st != SW_OK) {
        free(fa.var);
        free(fa.stride);
    }
    return st;
}

/* Exact variable elimination, or (allow_bound) mini-bucket elimination above the
 * limits, its assignment then improved by sw_residual_improve. */
static sw_status solve(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                       const sw_live_edge *edges, const sw_residual_limits *lim, int allow_bound, int *choice,
                       sw_residual_result *res) {
    memset(res, 0, sizeof *res);
    res->exact = 1;
    if (k == 0) {
        return SW_OK;
    }
    ve_state s = {0};
    s.k = k;
    int *card = malloc(sizeof *card * (size_t)k), *local = NULL, *asg = NULL;
    char *adj = calloc((size_t)k * (size_t)k, 1);
    double *score = NULL;
    int max_node = 0;
    for (int i = 0; i < k; i++) {
        max_node = nodes[i] > max_node ? nodes[i] : max_node;
    }
    local = malloc(sizeof *local * (size_t)(max_node + 1));
    asg = malloc(sizeof *asg * (size_t)k);
    s.bucket = calloc((size_t)k, sizeof *s.bucket);
    s.bucket_n = calloc((size_t)k, sizeof *s.bucket_n);
    s.bucket_cap = calloc((size_t)k, sizeof *s.bucket_cap);
    s.order = malloc(sizeof *s.order * (size_t)k);
    s.pos = malloc(sizeof *s.pos * (size_t)k);
    s.offset = malloc(sizeof *s.offset * (size_t)(k + 1));
    sw_status st = SW_OK;
    if (!card || !adj || !local || !asg || !s.bucket || !s.bucket_n || !s.bucket_cap || !s.order || !s.pos ||
        !s.offset) {
        st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    s.card = card;
    s.offset[0] = 0;
    for (int i = 0; i < k; i++) {
        card[i] = ncfg[nodes[i]];
        local[nodes[i]] = i;
        s.offset[i + 1] = s.offset[i] + card[i];
    }
    for (int i = 0; i < k && st == SW_OK; i++) {
        int64_t one = 1;
        st = input_factor(&s, 1, &i, &one, node_cost[nodes[i]]);
    }
    for (int e = 0; e < ne && st == SW_OK; e++) {
        int a = local[edges[e].src], b = local[edges[e].dst];
        int var[2] = {a, b};
        int64_t stride[2] = {card[b], 1};   /* table ncfg[src] x ncfg[dst], row-major */
        st = input_factor(&s, 2, var, stride, edges[e].t);
        adj[(size_t)a * k + b] = adj[(size_t)b * k + a] = 1;
    }
    if (st != SW_OK) {
        goto done;
    }
    s.ninput = s.nf;
    st = choose_order(&s, adj);
    if (st != SW_OK) {
        goto done;
    }
    /* the dry run of exact elimination says whether it fits the bound */
    st = run(&s, INFINITY, 1);
    drop_messages(&s);
    res->width = s.width;
    res->largest_table = s.largest;
    res->exact_work = s.work;
    double cap = INFINITY;
    if (st == SW_OK && (s.largest > lim->max_table || s.work > lim->max_work)) {
        if (!allow_bound) {
            st = SW_FAIL(SW_ERR_TOO_LARGE, "exact variable elimination needs %.3g steps and a %.3g-entry table",
                         s.work, s.largest);
            goto done;
        }
        /* mini-buckets: shrink the cap until the work fits too (a cap below one
         * pairwise table still keeps each input table whole, in a bucket of its own) */
        res->exact = 0;
        for (cap = lim->max_table; st == SW_OK; cap /= 4) {
            st = run(&s, cap, 1);
            drop_messages(&s);
            if (s.work <= lim->max_work || cap < 2) {
                break;
            }
        }
        res->cap = cap;
        score = malloc(sizeof *score * (size_t)(s.offset[k] > 0 ? s.offset[k] : 1));
        if (!score) {
            st = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    if (st == SW_OK) {
        st = run(&s, cap, 0);
    }
    if (st == SW_OK) {
        res->work = s.work;
        res->lower_bound = s.lower;
        decode(&s, asg, score);
        for (int i = 0; i < k; i++) {
            choice[nodes[i]] = asg[i];
        }
        res->cost = total(&s, asg);
    }
    if (st == SW_OK && !res->exact) {
        st = sw_residual_improve(k, nodes, ncfg, node_cost, ne, edges, lim, score, choice, &res->cost);
        if (st == SW_OK && res->cost - res->lower_bound <= 1e-12 * fmax(fabs(res->cost), fabs(res->lower_bound))) {
            res->exact = 1;   /* the bound meets the plan (to rounding): optimal after all */
        }
    }
done:
    free_state(&s);
    free(card);
    free(adj);
    free(local);
    free(asg);
    free(score);
    return st;
}

sw_status sw_solve_residual(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                            const sw_live_edge *edges, const sw_residual_limits *lim, int *choice,
                            sw_residual_result *res) {
    return solve(k, nodes, ncfg, node_cost, ne, edges, lim, 1, choice, res);
}

sw_status sw_solve_residual_exact(int k, const int *nodes, const int *ncfg, double *const *node_cost, int ne,
                                  const sw_live_edge *edges, const sw_residual_limits *lim, int *choice,
                                  sw_residual_result *res) {
    return solve(k, nodes, ncfg, node_cost, ne, edges, lim, 0, choice, res);
}
