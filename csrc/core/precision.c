/* precision.c -- the number format a plan is costed in, and the element sizes it implies.
 *
 * fp32: every value float32, as the executor runs it.  bf16 and fp16: mixed precision as
 * training frameworks keep it (the convention of "Mixed Precision Training", Micikevicius et
 * al.): the values that flow through the graph -- activations, their gradients, staging
 * regions, partial sums, messages, the weights' gradients -- are 2 bytes; every weight has a
 * 2-byte compute copy beside its float32 master copy (6 bytes an element); the optimizer's
 * state (momentum, Adam's moments) and batchnorm's running statistics stay float32, and its
 * batch statistics float64.  One rule for the memory model (cost/cost_memory.c) and the
 * memory plan (mem/, through the lowering's sw_task_graph.element_bytes): the two agree
 * buffer by buffer.
 */
#include <math.h>    /* isfinite */
#include <stdlib.h>  /* malloc, free */
#include <string.h>  /* memcpy */

#include "internal.h"

enum { FP32 = 4, HALF = 2, FP64 = 8 };

int64_t sw_precision_element_bytes(sw_precision precision, int kind) {
    int half = precision != SW_PRECISION_FP32;
    switch (kind) {
    case SW_BUF_STATS:      /* batchnorm's sums of x over the batch: float64 */
        return FP64;
    case SW_BUF_MOMENTUM:   /* optimizer state and running statistics: float32 in every format */
    case SW_BUF_RUNNING:
        return FP32;
    case SW_BUF_PARAM:      /* the master copy, and in mixed precision the 2-byte copy the ops read */
        return half ? FP32 + HALF : FP32;
    default:                /* activations, regions, gradients, partials, receives, host copies */
        return half ? HALF : FP32;
    }
}

sw_status sw_problem_set_precision(sw_problem *p, int precision, const double *dense_flops, const int8_t *op_dense) {
    if (precision != SW_PRECISION_FP32 && precision != SW_PRECISION_BF16 && precision != SW_PRECISION_FP16) {
        return SW_FAIL(SW_ERR_VALUE, "unknown precision %d (0 fp32, 1 bf16, 2 fp16)", precision);
    }
    if ((dense_flops == NULL) != (op_dense == NULL)) {
        return SW_FAIL(SW_ERR_VALUE, "dense peaks and dense ops come together");
    }
    for (int d = 0; dense_flops && d < p->ndev; d++) {
        if (!(dense_flops[d] > 0) || !isfinite(dense_flops[d])) {
            return SW_FAIL(SW_ERR_VALUE, "device %d: dense peak %g FLOP/s is not a positive finite number", d,
                           dense_flops[d]);
        }
    }
    double *peaks = NULL;
    int8_t *dense = NULL;
    if (dense_flops) {
        peaks = malloc(sizeof *peaks * (size_t)p->ndev);
        dense = malloc((size_t)p->nops + 1);
        if (!peaks || !dense) {
            free(peaks);
            free(dense);
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for dense peaks");
        }
        memcpy(peaks, dense_flops, sizeof *peaks * (size_t)p->ndev);
        memcpy(dense, op_dense, (size_t)p->nops);
    }
    free(p->dev_flops_dense);
    free(p->op_dense);
    p->precision = (sw_precision)precision;
    p->dev_flops_dense = peaks;
    p->op_dense = dense;
    return SW_OK;
}
