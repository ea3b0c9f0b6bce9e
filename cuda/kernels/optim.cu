/* optim.cu -- the update task: one parameter slice stepped by SGD, Adam or AdamW.
 *
 * torch.optim's formulas element by element in float32, as csrc/cpu/optim.c writes them;
 * the step's scalars (Adam's bias corrections, step size) come computed in double by the
 * host (cuda/tasks.c), as PyTorch computes them in Python floats.  p, grad, s0, s1: (n).
 */
#include "map.cuh"

namespace {

__global__ void sgd_kernel(swk_optim o, float *p, const float *grad, float *buf, int64_t n) {
    const float damp = 1.0f - o.dampening;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = o.weight_decay != 0.0f ? grad[i] + o.weight_decay * p[i] : grad[i];
        if (o.momentum != 0.0f) {
            buf[i] = o.started ? buf[i] * o.momentum + damp * g : g;
            g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
        }
        p[i] -= o.lr * g;
    }
}

__global__ void adam_kernel(swk_optim o, float *p, const float *grad, float *m, float *v, int64_t n) {
    const float w1 = 1.0f - o.beta1, w2 = 1.0f - o.beta2;
    const bool decoupled = o.kind == 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = grad[i];
        if (o.weight_decay != 0.0f) {
            if (decoupled) {
                p[i] *= o.decay;
            } else {
                g += o.weight_decay * p[i];
            }
        }
        // torch's lerp: the form that is exact at its nearer end
        m[i] = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
        v[i] = v[i] * o.beta2 + w2 * g * g;
        const float denom = sqrtf(v[i]) / o.bc2_sqrt + o.eps;
        p[i] = p[i] + o.neg_step * m[i] / denom;
    }
}

}  // namespace

extern "C" cudaError_t swk_optim_update(const swk_optim *o, float *p, const float *grad, float *s0, float *s1,
                                        int64_t n, cudaStream_t stream) {
    if (n == 0) {
        return cudaSuccess;
    }
    if (o->kind == 0) {
        sgd_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(*o, p, grad, s0, n);
    } else {
        adam_kernel<<<swk_blocks(n, 256), 256, 0, stream>>>(*o, p, grad, s0, s1, n);
    }
    return cudaGetLastError();
}
