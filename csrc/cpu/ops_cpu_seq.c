/* ops_cpu_seq.c -- CPU tasks of the sequence-model ops: layer_norm, embedding,
 * softmax_dim, reshape, permute and the batched matmul.
 *
 * Their kernels (layernorm.c, embedding.c, softmax_dim.c, indexmap.c, matmul.c) take
 * (rows, D) or any-rank views; the row kernels get the leading dimensions of an
 * (N, T, D) view flattened into rows (sw_view_rows), which is exact because every view
 * of one task holds the same leading box (the index maps are the identity there).
 * matmul reads its transposes from its description's maps: operand a is transposed when
 * its second-to-last dimension is indexed by k (the reduction variable, index out_rank).
 */
#include "task_env.h"

sw_status sw_view_rows(const sw_view *v, int keep, const sw_view *ref, sw_view *out) {
    int lead = v->rank - keep;
    if (lead < 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "a view of rank %d has no rows to flatten", v->rank);
    }
    for (int d = 0; ref && d < lead; d++) {
        if (d >= ref->rank || ref->lo[d] != v->lo[d] || ref->shape[d] != v->shape[d]) {
            return SW_FAIL(SW_ERR_INTERNAL, "views of one task hold different rows (dimension %d: [%lld, +%lld) and "
                           "[%lld, +%lld))", d, (long long)v->lo[d], (long long)v->shape[d],
                           d < ref->rank ? (long long)ref->lo[d] : -1LL, d < ref->rank ? (long long)ref->shape[d] : -1LL);
        }
    }
    int64_t rows = 1;
    for (int d = 0; d < lead; d++) {
        rows *= v->shape[d];
    }
    out->data = v->data;
    out->rank = keep + 1;
    out->lo[0] = 0;
    out->shape[0] = rows;
    for (int d = 0; d < keep; d++) {
        out->lo[d + 1] = v->lo[lead + d];
        out->shape[d + 1] = v->shape[lead + d];
    }
    return SW_OK;
}

static sw_status need(const sw_task_env *e, int32_t b, const char *what) {
    return b >= 0 ? SW_OK : SW_FAIL(SW_ERR_INTERNAL, "task %d: %s without %s", e->id, sw_op_names[e->attrs->type],
                                    what);
}

/* ------------------------------------------------------------------ layer_norm, rms_norm
 * rms_norm: layer_norm's kernels with mean 0 and no bias (its reads: x, w). */
static int is_rms(const sw_task_env *e) { return e->attrs->type == SW_OP_RMS_NORM; }

static sw_status layer_norm_forward(const sw_task_env *e) {
    sw_view x, w, b, y, xr, yr;
    const int rms = is_rms(e);
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->reads[1], &w);
    if (!rms) {
        sw_env_view(e, e->reads[2], &b);
    }
    sw_env_view(e, e->writes[0], &y);
    SW_TRY(sw_view_rows(&x, 1, &y, &xr));
    SW_TRY(sw_view_rows(&y, 1, NULL, &yr));
    return sw_layer_norm_forward(&xr, &w, rms ? NULL : &b, e->attrs->layer_norm.eps, rms, &yr);
}

static sw_status layer_norm_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, x, w, dx, xr, dyr, dxr;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0], "its input"));
    SW_TRY(need(e, r.nparams > 0 ? r.params[0] : -1, "its weight"));
    sw_env_view(e, r.region[0], &x);
    sw_env_view(e, r.params[0], &w);
    sw_env_view(e, e->writes[0], &dx);
    SW_TRY(sw_view_rows(&x, 1, &dy, &xr));
    SW_TRY(sw_view_rows(&dy, 1, NULL, &dyr));
    SW_TRY(sw_view_rows(&dx, 1, &dy, &dxr));
    return sw_layer_norm_backward_data(&xr, &w, &dyr, e->attrs->layer_norm.eps, is_rms(e), &dxr);
}

static sw_status layer_norm_backward_weight(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, x, dw, xr, dyr;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dw);
    if (e->op->bias[e->task->slot]) {
        return sw_bias_backward_axis(&dy, dy.rank - 1, &dw);
    }
    SW_TRY(need(e, r.region[0], "its input"));
    sw_env_view(e, r.region[0], &x);
    SW_TRY(sw_view_rows(&x, 1, &dy, &xr));
    SW_TRY(sw_view_rows(&dy, 1, NULL, &dyr));
    return sw_layer_norm_backward_weight(&xr, &dyr, e->attrs->layer_norm.eps, is_rms(e), &dw);
}

/* ------------------------------------------------------------------ embedding */
/* The weight views stay at their global coordinates (no sw_env_rebase): under a vocabulary
 * split the kernels need to know which ids are this worker's. */
static sw_status embedding_forward(const sw_task_env *e) {
    sw_view ids, w, y, idr, yr;
    sw_env_view(e, e->reads[0], &ids);
    sw_env_view(e, e->reads[1], &w);
    sw_env_view(e, e->writes[0], &y);
    SW_TRY(sw_view_rows(&ids, 0, &y, &idr));
    SW_TRY(sw_view_rows(&y, 1, NULL, &yr));
    return sw_embedding_forward(&idr, &w, &yr);
}

static sw_status embedding_backward_weight(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, ids, dw, idr, dyr;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0], "its ids"));
    sw_env_view(e, r.region[0], &ids);
    sw_env_view(e, e->writes[0], &dw);
    SW_TRY(sw_view_rows(&ids, 0, &dy, &idr));
    SW_TRY(sw_view_rows(&dy, 1, NULL, &dyr));
    return sw_embedding_backward_weight(&idr, &dyr, &dw);
}

/* The table read as a data input (a parameter op's output shared with other readers: tied
 * embeddings): its gradient is the weight gradient's scatter-add, written into the partial
 * gradient of the table's region (global coordinates, as the weight's), which the lowering
 * sends to the parameter op and adds to its other readers'.  No gradient flows into the ids. */
static sw_status embedding_backward_data(const sw_task_env *e) {
    if (e->task->slot != 1) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: an embedding passes no gradient to its ids", e->id);
    }
    sw_backward_reads r;
    sw_view dy, ids, dw, idr, dyr;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0], "its ids"));
    sw_env_view(e, r.region[0], &ids);
    sw_env_view(e, e->writes[0], &dw);
    SW_TRY(sw_view_rows(&ids, 0, &dy, &idr));
    SW_TRY(sw_view_rows(&dy, 1, NULL, &dyr));
    return sw_embedding_backward_weight(&idr, &dyr, &dw);
}

/* ------------------------------------------------------------------ softmax_dim */
static sw_status softmax_dim_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_softmax_dim_forward(&x, e->attrs->softmax_dim.dim, e->attrs->softmax_dim.scale, e->attrs->softmax_dim.causal, &y);
}

static sw_status softmax_dim_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, x, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0], "its input"));
    sw_env_view(e, r.region[0], &x);
    sw_env_view(e, e->writes[0], &dx);
    sw_view p;   /* the output, when this worker holds whole lines of it (its box is dx's) */
    int whole = r.y >= 0 && sw_box32_equal(&sw_env_buffer(e, r.y)->box, &sw_env_buffer(e, e->writes[0])->box);
    if (whole) {
        sw_env_view(e, r.y, &p);
    }
    return sw_softmax_dim_backward(&x, whole ? &p : NULL, &dy, e->attrs->softmax_dim.dim, e->attrs->softmax_dim.scale, e->attrs->softmax_dim.causal,
                                   &dx);
}

/* ------------------------------------------------------------------ reshape, permute, select */
static sw_status index_map_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_index_map_forward(&x, e->op->map[0], &y);
}

static sw_status index_map_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    return sw_index_map_backward(e->op->map[0], &dy, &dx);
}

/* ------------------------------------------------------------------ matmul */
static void transposes(const sw_task_env *e, int *ta, int *tb) {
    int r = e->op->out_rank;
    *ta = e->op->map[0][r - 2].coef[r] != 0;
    *tb = e->op->map[1][r - 1].coef[r] != 0;
}

static sw_status matmul_forward(const sw_task_env *e) {
    sw_view a, b, y;
    int ta, tb;
    transposes(e, &ta, &tb);
    sw_env_view(e, e->reads[0], &a);
    sw_env_view(e, e->reads[1], &b);
    sw_env_rebase(e, 0, &a);
    sw_env_rebase(e, 1, &b);
    sw_env_view(e, e->writes[0], &y);
    return sw_matmul_forward(&a, &b, ta, tb, &y);
}

static sw_status matmul_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, a, b, dx;
    int none, ta, tb;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    SW_TRY(need(e, r.region[0] >= 0 && r.region[1] >= 0 ? 0 : -1, "both operands"));
    transposes(e, &ta, &tb);
    sw_env_view(e, r.region[0], &a);
    sw_env_view(e, r.region[1], &b);
    sw_env_view(e, e->writes[0], &dx);
    sw_env_rebase(e, 0, &a);
    sw_env_rebase(e, 1, &b);
    sw_env_rebase(e, e->task->slot, &dx);
    return sw_matmul_backward(&a, &b, &dy, ta, tb, e->task->slot, &dx);
}

/* ------------------------------------------------------------------ rotary */
static sw_status rotary_forward(const sw_task_env *e) {
    sw_view x, y;
    sw_env_view(e, e->reads[0], &x);
    sw_env_view(e, e->writes[0], &y);
    return sw_rotary_forward(&x, e->attrs->rotary.base, &y);
}

static sw_status rotary_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_view dy, dx;
    int none;
    SW_TRY(sw_env_grad_or_zeros(e, &r, &dy, &none));
    if (none) {
        return SW_OK;
    }
    sw_env_view(e, e->writes[0], &dx);
    return sw_rotary_backward(&dy, e->attrs->rotary.base, &dx);
}

const sw_cpu_op sw_cpu_layer_norm = {layer_norm_forward, layer_norm_backward_data, layer_norm_backward_weight};
const sw_cpu_op sw_cpu_rms_norm = {layer_norm_forward, layer_norm_backward_data, layer_norm_backward_weight};
const sw_cpu_op sw_cpu_embedding = {embedding_forward, embedding_backward_data, embedding_backward_weight};
const sw_cpu_op sw_cpu_softmax_dim = {softmax_dim_forward, softmax_dim_backward_data, NULL};
const sw_cpu_op sw_cpu_rotary = {rotary_forward, rotary_backward_data, NULL};
const sw_cpu_op sw_cpu_reshape = {index_map_forward, index_map_backward_data, NULL};
const sw_cpu_op sw_cpu_permute = {index_map_forward, index_map_backward_data, NULL};
/* select (x[:, t]): its map reads one index of a dimension; the gradient elsewhere is zero */
const sw_cpu_op sw_cpu_select = {index_map_forward, index_map_backward_data, NULL};
const sw_cpu_op sw_cpu_matmul = {matmul_forward, matmul_backward_data, NULL};
