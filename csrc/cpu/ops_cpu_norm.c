/* ops_cpu_norm.c -- CPU tasks of group_norm (groupnorm.c has the kernels and the formulas).
 *
 * A forward task reads x's region (whole groups over every row and column: the description's
 * map) and, with affine, the weight and bias covering its output's channels; backward_data
 * reads [dy] [y], x's region and the weight (task_env.h) and writes the partial gradient of that
 * region; backward_weight writes the weight's gradient (dy * xhat summed over the task's
 * samples, rows and columns) or the bias's (dy summed, bias.c).  Without affine the op reads x
 * alone.  The kernels take global coordinates: nothing is rebased (no reduction of group_norm
 * is split, the description names none additive).
 */
#include "task_env.h"

static int64_t channels_per_group(const sw_task_env *e) {
    return e->op->shape[1] / e->attrs->group_norm.groups;
}

static sw_status need(const sw_task_env *e, int32_t b, const char *what) {
    return b >= 0 ? SW_OK : SW_FAIL(SW_ERR_INTERNAL, "task %d: group_norm without %s", e->id, what);
}

static sw_status group_norm_forward(const sw_task_env *e) {
    sw_view x, w, b, y;
    const int affine = e->nreads >= 3;
    sw_env_view(e, e->reads[0], &x);
    if (affine) {
        sw_env_view(e, e->reads[1], &w);
        sw_env_view(e, e->reads[2], &b);
    }
    sw_env_view(e, e->writes[0], &y);
    return sw_group_norm_forward(&x, affine ? &w : NULL, affine ? &b : NULL, channels_per_group(e),
                                 e->attrs->group_norm.eps, &y);
}

static sw_status group_norm_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, x, w, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0], "its input"));
    sw_env_view(e, r.region[0], &x);
    if (r.nparams > 0) {
        sw_env_view(e, r.params[0], &w);
    }
    sw_env_view(e, e->writes[0], &dx);
    return sw_group_norm_backward_data(&x, r.nparams > 0 ? &w : NULL, &dy, channels_per_group(e),
                                       e->attrs->group_norm.eps, &dx);
}

static sw_status group_norm_backward_weight(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, x, dw;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dw);
    if (e->op->bias[e->task->slot]) {
        return sw_bias_backward_axis(&dy, 1, &dw);
    }
    SW_TRY(need(e, r.region[0], "its input"));
    sw_env_view(e, r.region[0], &x);
    sw_status s = SW_OK;
    double *acc = sw_env_scratch(e, sizeof(double) * (size_t)dy.shape[1], &s);
    SW_TRY(s);
    return sw_group_norm_backward_weight(&x, &dy, channels_per_group(e), e->attrs->group_norm.eps, acc, &dw);
}

const sw_cpu_op sw_cpu_group_norm = {group_norm_forward, group_norm_backward_data, group_norm_backward_weight};
