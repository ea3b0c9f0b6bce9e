/* optim.c -- the update task on the CPU: one parameter slice stepped by SGD, Adam or AdamW.
 *
 * The formulas are torch.optim's, element by element in float32, with the scalars of a
 * step (bias corrections, step size) computed once in double, as PyTorch computes them
 * in Python floats, and rounded to float where PyTorch's kernels round them.  The task
 * reads (param, grad, state...) and writes (param, state...), every buffer the slice's
 * box of n elements (csrc/graph/lower.c, sync_group):
 *
 *   SGD    state: buf (n), momentum; started once its update count (sw_runtime_updates) > 0
 *   Adam   state: m (n) exp_avg, v (n) exp_avg_sq; the step t = its update count + 1
 *   AdamW  as Adam, the weight decay applied to p before the moments (decoupled)
 *
 * Each update task owns its slice's state buffers and counter, so tasks on different
 * threads never touch the same memory.
 *
 * With sync zero an update owns a chunk of its slice (graph/lower_backward.c, sync_ring): the state
 * buffers hold that chunk's box, and the kernel steps only that chunk of param and grad (copied
 * into contiguous scratch and the parameter's chunk copied back: the formulas are element by
 * element, so the values are those of the whole-slice update).
 */
#include <math.h>    /* pow, sqrt, sqrtf */

#include "optim.h"
#include "kernels.h"   /* sw_copy_box */
#include "task_env.h"

/* torch.optim.SGD: g = grad + wd p; buf = g (first step) or momentum buf + (1 - dampening) g;
 * g = g + momentum buf (Nesterov) or buf; p -= lr g.  p, grad, buf: (n). */
static void sgd(const sw_optimizer *o, int started, float *p, const float *grad, float *buf, int64_t n) {
    const float lr = (float)o->lr, wd = (float)o->weight_decay, mu = (float)o->momentum;
    const float damp = 1.0f - (float)o->dampening;
    for (int64_t i = 0; i < n; i++) {
        float g = wd != 0.0f ? grad[i] + wd * p[i] : grad[i];
        if (mu != 0.0f) {
            buf[i] = started ? buf[i] * mu + damp * g : g;
            g = o->nesterov ? g + mu * buf[i] : buf[i];
        }
        p[i] -= lr * g;
    }
}

/* torch.optim.Adam / AdamW at step t (>= 1), torch's single-tensor path:
 *   Adam:  g = grad + wd p          AdamW: p *= 1 - lr wd
 *   m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g g
 *   p += -(lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * (eps added after the square root of the bias-corrected second moment).  p, grad, m, v: (n). */
static void adam(const sw_optimizer *o, int64_t t, float *p, const float *grad, float *m, float *v, int64_t n) {
    const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    const float neg_step = (float)(-(o->lr / bc1)), bc2_sqrt = (float)sqrt(bc2), eps = (float)o->eps;
    const float w1 = (float)(1.0 - o->beta1), beta2 = (float)o->beta2, w2 = (float)(1.0 - o->beta2);
    const int decoupled = o->kind == SW_OPTIM_ADAMW;
    const float wd = (float)o->weight_decay, decay = (float)(1.0 - o->lr * o->weight_decay);
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        if (wd != 0.0f) {
            if (decoupled) {
                p[i] *= decay;
            } else {
                g += wd * p[i];
            }
        }
        /* torch's lerp: the form that is exact at its nearer end */
        m[i] = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
        v[i] = v[i] * beta2 + w2 * g * g;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + neg_step * m[i] / denom;
    }
}

void sw_optim_update(const sw_optimizer *o, int64_t t, float *p, const float *grad, float *s0, float *s1,
                     int64_t n) {
    if (o->kind == SW_OPTIM_SGD) {
        sgd(o, t > 1, p, grad, s0, n);
    } else {
        adam(o, t, p, grad, s0, s1, n);
    }
}

sw_status sw_cpu_update(const sw_task_env *e) {
    const sw_optimizer *o = &e->ctx->args->opt;
    int nstate = sw_optim_state_buffers(o->kind);   /* the reads were checked (sw_task_dispatch) */
    float *p = sw_env_ptr(e, e->reads[0]);
    const float *grad = sw_env_ptr(e, e->reads[1]);
    float *s0 = sw_env_ptr(e, e->reads[2]);
    float *s1 = nstate > 1 ? sw_env_ptr(e, e->reads[3]) : NULL;
    const sw_box32 *whole = &sw_env_buffer(e, e->reads[0])->box, *part = &sw_env_buffer(e, e->reads[2])->box;
    int64_t n = sw_box32_volume(part);
    int64_t *updates = sw_runtime_updates(e->rt, e->reads[2]);
    if (sw_box32_equal(whole, part)) {
        sw_optim_update(o, *updates + 1, p, grad, s0, s1, n);
    } else {   /* zero: the chunk `part` of param and grad, gathered (p_c, g_c: n floats each) */
        sw_status s = SW_OK;
        float *p_c = sw_env_scratch(e, sizeof(float) * 2 * (size_t)n, &s);
        if (s != SW_OK) {
            return s;
        }
        sw_view param, gradient, p_chunk = {p_c, part->rank, {0}, {0}}, g_chunk = {p_c + n, part->rank, {0}, {0}};
        for (int d = 0; d < part->rank; d++) {
            p_chunk.lo[d] = g_chunk.lo[d] = part->lo[d];
            p_chunk.shape[d] = g_chunk.shape[d] = part->hi[d] - part->lo[d];
        }
        sw_env_view(e, e->reads[0], &param);
        sw_env_view(e, e->reads[1], &gradient);
        SW_TRY(sw_copy_box(&param, &p_chunk));
        SW_TRY(sw_copy_box(&gradient, &g_chunk));
        sw_optim_update(o, *updates + 1, p_c, p_c + n, s0, s1, n);
        SW_TRY(sw_copy_box(&p_chunk, &param));
    }
    if (o->kind != SW_OPTIM_SGD || o->momentum != 0.0) {   /* torch keeps no momentum buffer without momentum */
        ++*updates;
    }
    return SW_OK;
}
