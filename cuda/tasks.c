/* tasks.c -- one task of the graph issued on its stream: the kinds that do not depend on
 * the op (copies, sums, inputs, batch-norm statistics, updates), and forward and backward
 * tasks handed to ops.c.  The CUDA runners of csrc/exec/task_env.h's one description of the
 * task kinds (which buffers each reads and writes, checked by sw_task_dispatch before a
 * runner runs), as csrc/cpu/tasks.c and csrc/cpu/optim.c are the CPU's; every call here only
 * enqueues work on the task's stream.  Batch-norm statistics are double sums (2, C): row 0 sums of
 * x (or dy), row 1 sums of x^2 (or dy * xhat).
 */
#include <math.h>    /* pow, sqrt */
#include <string.h>  /* memset */

#include "cuda_backend.h"

static int device_of(const cu_task *t, int32_t b) { return sw_env_buffer(&t->e, b)->device; }
static void *ptr(const cu_task *t, int32_t b) { return sw_env_ptr(&t->e, b); }

/* A runner gets the environment; the CUDA task around it (the environment is its first member). */
static const cu_task *task_of(const sw_task_env *e) { return (const cu_task *)e; }

static sw_status view_zero(const cu_task *t, int32_t b) {
    sw_view v;
    sw_env_view(&t->e, b, &v);
    return cu_zero(t, &v);
}

/* ------------------------------------------------------------------ moving data */
static sw_status run_copy(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    int32_t src = t->e.reads[0], dst = t->e.writes[0];
    const sw_buffer *bs = sw_env_buffer(&t->e, src), *bd = sw_env_buffer(&t->e, dst);
    if (bs->kind == SW_BUF_STATS || bd->kind == SW_BUF_STATS) {   /* statistics: equal boxes, doubles */
        if (!sw_box32_equal(&bs->box, &bd->box)) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d copies statistics between different boxes", t->e.id);
        }
        /* cudaMemcpyDefault: the driver sees both GPUs' addresses (unified addressing) */
        return cu_check(cudaMemcpyAsync(ptr(t, dst), ptr(t, src), (size_t)sw_buffer_bytes(bs), cudaMemcpyDefault,
                                        t->st->s), "copy statistics");
    }
    sw_view s, d;
    sw_env_view(&t->e, src, &s);
    sw_env_view(&t->e, dst, &d);
    return cu_copy_between(t, bs->device, &s, &d);
}

/* The first piece into a gradient copies (or zeroes the rest and adds); later ones add. */
static sw_status run_accumulate(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    sw_view s, d;
    sw_env_view(&t->e, t->e.reads[0], &s);
    sw_env_view(&t->e, t->e.writes[0], &d);
    if (device_of(t, t->e.reads[0]) != t->st->device &&
        sw_gpu_route_of(t->be->gpu_of, device_of(t, t->e.reads[0]), t->st->device, t->be->peer, t->be->ngpus) ==
            SW_ROUTE_STAGED) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d adds another GPU's buffer without peer access", t->e.id);
    }
    if (!sw_env_first_accumulate(&t->e)) {
        return cu_copy_box(t, &s, &d, 1);
    }
    if (!sw_box32_equal(sw_env_task_box(&t->e), &sw_env_buffer(&t->e, t->e.writes[0])->box)) {
        SW_TRY(cu_zero(t, &d));
    }
    return cu_copy_box(t, &s, &d, 0);
}

/* load_input: the worker's box of the input op's minibatch, read from mapped host memory. */
static sw_status run_load_input(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    const sw_step_args *args = e->ctx->args;
    int op = t->e.task->op;
    if (!args->inputs || !args->inputs[op] || !t->be->input[op]) {
        return SW_FAIL(SW_ERR_VALUE, "no data for input op %d", op);
    }
    sw_view host = {t->be->input[op], t->e.op->out_rank, {0}, {0}}, y;
    for (int d = 0; d < t->e.op->out_rank; d++) {
        host.shape[d] = t->e.op->shape[d];
    }
    sw_env_view(&t->e, t->e.writes[0], &y);
    return cu_copy_box(t, &host, &y, 0);
}

/* reduce, stats_reduce: the first read (= the write) += the others, in order. */
static sw_status run_sum(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    const sw_buffer *b = sw_env_buffer(&t->e, t->e.writes[0]);
    int64_t n = sw_box32_volume(&b->box);
    for (int k = 1; k < t->e.nreads; k++) {
        if (b->kind == SW_BUF_STATS) {
            CU_TRY(swk_add_doubles(ptr(t, t->e.writes[0]), ptr(t, t->e.reads[k]), n, t->st->s));
        } else {
            swk_map m = {.rank = 1, .ext = {n}, .dst_stride = {1}, .nsrc = 1, .src_stride = {{1}}};
            const float *src[SWK_MAX_SRC] = {ptr(t, t->e.reads[k])};
            CU_TRY(swk_map_run(SWK_ACCUMULATE, 0.0f, &m, ptr(t, t->e.writes[0]), src, t->st->s));
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ partition-n-reduce */
static sw_status run_sum_partials(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    sw_view y, part;
    sw_env_view(&t->e, t->e.writes[0], &y);
    sw_env_view(&t->e, t->e.reads[0], &part);
    SW_TRY(cu_copy_box(t, &part, &y, 0));
    for (int k = 1; k < t->e.nreads; k++) {
        sw_env_view(&t->e, t->e.reads[k], &part);
        SW_TRY(cu_copy_box(t, &part, &y, 1));
    }
    const sw_view *src[1] = {&y};
    return sw_op_attrs_relu(t->e.attrs) ? cu_eltwise(t, SWK_RELU, 0.0f, &y, src, 1) : SW_OK;
}

static sw_status run_activation_grad(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    sw_view out, dy, y;
    sw_env_view(&t->e, t->e.writes[0], &out);
    if (t->e.nreads < 2) {
        return cu_zero(t, &out);
    }
    sw_env_view(&t->e, t->e.reads[0], &dy);
    if (!sw_op_attrs_relu(t->e.attrs)) {
        return cu_copy_box(t, &dy, &out, 0);
    }
    sw_env_view(&t->e, t->e.reads[1], &y);
    const sw_view *src[2] = {&dy, &y};
    return cu_eltwise(t, SWK_RELU_GRAD, 0.0f, &out, src, 2);
}

/* ------------------------------------------------------------------ batchnorm */
static int64_t bn_count(const cu_task *t) { return sw_env_bn_count(&t->e); }
static int64_t channels_of(const cu_task *t, int32_t b) { return sw_env_channels(&t->e, b); }

/* Mean and 1/std (2C floats of scratch) from the reduced sums in buffer `stats`. */
static sw_status moments_of(const cu_task *t, int32_t stats, float **mean, float **invstd) {
    int64_t c = channels_of(t, stats);
    sw_status s = SW_OK;
    float *m = cu_scratch(t, sizeof(float) * (size_t)(2 * c + 16), &s);
    SW_TRY(s);
    CU_TRY(swk_bn_moments(ptr(t, stats), c, bn_count(t), t->e.attrs->batchnorm2d.eps, m, m + c, t->st->s));
    *mean = m;
    *invstd = m + c;
    return SW_OK;
}

static sw_status run_bn_stats(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    sw_view x;
    sw_env_view(&t->e, t->e.reads[0], &x);
    const sw_view *src[1] = {&x};
    swk_map m;
    float *d;
    const float *s[SWK_MAX_SRC];
    SW_TRY(cu_map_over(&x, src, 1, &m, &d, s));
    sw_status st = SW_OK;
    double *part = cu_scratch(t, swk_bn_sums_scratch(&m), &st);
    SW_TRY(st);
    return cu_check(swk_bn_sums(&m, s[0], ptr(t, t->e.writes[0]), part, t->st->s), "batch-norm sums");
}

/* bn_apply reads x, the statistics, gamma, beta, the running statistics (2, C); writes y and
 * the running statistics in place (the step's sw_bn_mode says which it uses and updates). */
static sw_status run_bn_apply(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    const sw_step_args *args = e->ctx->args;
    float *mean, *invstd, *running = ptr(t, t->e.reads[4]);
    if (args->bn_mode == SW_BN_RUNNING) {
        int64_t c = channels_of(t, t->e.reads[4]);
        sw_status s = SW_OK;
        mean = cu_scratch(t, sizeof(float) * (size_t)(2 * c + 16), &s);
        SW_TRY(s);
        invstd = mean + c;
        CU_TRY(swk_bn_running_moments(running, c, t->e.attrs->batchnorm2d.eps, mean, invstd, t->st->s));
    } else {
        SW_TRY(moments_of(t, t->e.reads[1], &mean, &invstd));
    }
    if (args->bn_mode == SW_BN_UPDATE) {
        CU_TRY(swk_bn_running_update(ptr(t, t->e.reads[1]), channels_of(t, t->e.reads[1]), bn_count(t),
                                     t->e.attrs->batchnorm2d.momentum, running, t->st->s));
    }
    sw_view x, y;
    sw_env_view(&t->e, t->e.reads[0], &x);
    sw_env_view(&t->e, t->e.writes[0], &y);
    const sw_view *src[1] = {&x};
    swk_map m;
    float *d;
    const float *s[SWK_MAX_SRC];
    SW_TRY(cu_map_over(&y, src, 1, &m, &d, s));
    return cu_check(swk_bn_apply(&m, s[0], mean, invstd, ptr(t, t->e.reads[2]), ptr(t, t->e.reads[3]), d, t->st->s),
                    "batch-norm apply");
}

/* bn_backward_stats reads dy, the x region, the statistics of x. */
static sw_status run_bn_backward_stats(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    float *mean, *invstd;
    SW_TRY(moments_of(t, t->e.reads[2], &mean, &invstd));
    sw_view dy, x;
    sw_env_view(&t->e, t->e.reads[0], &dy);
    sw_env_view(&t->e, t->e.reads[1], &x);
    const sw_view *src[2] = {&x, &dy};
    swk_map m;
    float *d;
    const float *s[SWK_MAX_SRC];
    SW_TRY(cu_map_over(&dy, src, 2, &m, &d, s));
    sw_status st = SW_OK;
    double *part = cu_scratch(t, swk_bn_sums_scratch(&m), &st);
    SW_TRY(st);
    return cu_check(swk_bn_backward_sums(&m, s[0], s[1], mean, invstd, ptr(t, t->e.writes[0]), part, t->st->s),
                    "batch-norm backward sums");
}

/* ------------------------------------------------------------------ updates */
/* The step's scalars in double, rounded where torch rounds them (csrc/cpu/optim.c). */
static sw_status run_update(const sw_task_env *e) {
    const cu_task *t = task_of(e);
    const sw_step_args *args = e->ctx->args;
    const sw_optimizer *o = &args->opt;
    int nstate = sw_optim_state_buffers(o->kind);   /* the reads were checked (sw_task_dispatch) */
    int64_t *updates = sw_runtime_updates(t->e.rt, t->e.reads[2]);
    int64_t step = *updates + 1;
    swk_optim k = {.kind = o->kind, .lr = (float)o->lr, .weight_decay = (float)o->weight_decay,
                   .momentum = (float)o->momentum, .dampening = (float)o->dampening, .nesterov = o->nesterov,
                   .started = step > 1, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps};
    if (o->kind != SW_OPTIM_SGD) {
        const double bc1 = 1.0 - pow(o->beta1, (double)step), bc2 = 1.0 - pow(o->beta2, (double)step);
        k.neg_step = (float)(-(o->lr / bc1));
        k.bc2_sqrt = (float)sqrt(bc2);
        k.decay = (float)(1.0 - o->lr * o->weight_decay);
    }
    int64_t n = sw_box32_volume(&sw_env_buffer(&t->e, t->e.reads[0])->box);
    if (!sw_box32_equal(&sw_env_buffer(&t->e, t->e.reads[0])->box, &sw_env_buffer(&t->e, t->e.reads[2])->box)) {
        /* sync zero: the update of one chunk of the slice (csrc/cpu/optim.c has it) */
        return SW_FAIL(SW_ERR_VALUE, "the CUDA backend cannot run sync='zero' yet (an update of a chunk of a "
                                     "weight); use the CPU backend or sync='ring'");
    }
    CU_TRY(swk_optim_update(&k, ptr(t, t->e.reads[0]), ptr(t, t->e.reads[1]), ptr(t, t->e.reads[2]),
                            nstate > 1 ? ptr(t, t->e.reads[3]) : NULL, n, t->st->s));
    if (o->kind != SW_OPTIM_SGD || o->momentum != 0.0) {   /* torch keeps no momentum buffer without momentum */
        ++*updates;
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ dispatch */
static sw_status run_zero_grad(const sw_task_env *e) { return view_zero(task_of(e), e->writes[0]); }
static sw_status run_forward(const sw_task_env *e) { return cu_op_forward(task_of(e)); }
static sw_status run_backward_data(const sw_task_env *e) { return cu_op_backward_data(task_of(e)); }
static sw_status run_backward_weight(const sw_task_env *e) { return cu_op_backward_weight(task_of(e)); }

/* No swap runner: swap plans run on the CPU backend only so far (the dispatch says so). */
static const sw_task_runners CUDA_RUNNERS = {
    .backend = "cuda", .load_input = run_load_input, .copy = run_copy, .accumulate = run_accumulate,
    .sum = run_sum, .sum_partials = run_sum_partials, .activation_grad = run_activation_grad,
    .zero_grad = run_zero_grad, .bn_stats = run_bn_stats, .bn_apply = run_bn_apply,
    .bn_backward_stats = run_bn_backward_stats, .update = run_update, .forward = run_forward,
    .backward_data = run_backward_data, .backward_weight = run_backward_weight,
};

sw_status cu_run_task(cuda_backend *be, cu_stream *st, int32_t id, const sw_step_args *args) {
    const sw_task_ctx ctx = {be->base.rt, args, NULL, NULL};
    cu_task t = {.be = be, .st = st};
    sw_task_env_init(&t.e, &ctx, id);
    st->used = CU_BLAS_WORKSPACE;   /* the task's scratch starts after cuBLAS's part */
    return sw_task_dispatch(&t.e, &CUDA_RUNNERS);
}
