/* rlx.bmm: one sgemm per batch entry, the entries spread over the workers (f32). A
 * batch entry's result never depends on the thread count. */
#include "cpu_backend.h"
#include <cblas.h>

int cpu_prep_bmm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *a = cpu_val(c, 0), *b = cpu_val(c, 1), *o = cpu_out(c, 0);
    if (cpu_need_f32(c, a, "a") || cpu_need_f32(c, b, "b") || cpu_need_f32(c, o, "the output"))
        return RLX_ERR_INVALID;
    int64_t tb = 1;
    if (cpu_attr_int(c, "trans_b", 1, &tb)) return RLX_ERR_INVALID;
    if (a->shape.ndim != 3 || b->shape.ndim != 3 || o->shape.ndim != 3)
        return cpu_bad(c, "a, b and the output must be 3-D");
    nd->flag = tb != 0;
    nd->rows = a->shape.dims[0];
    nd->M = a->shape.dims[1];
    nd->K = a->shape.dims[2];
    nd->N = b->shape.dims[nd->flag ? 1 : 2];
    if (b->shape.dims[0] != nd->rows || b->shape.dims[nd->flag ? 2 : 1] != nd->K ||
        o->shape.dims[0] != nd->rows || o->shape.dims[1] != nd->M || o->shape.dims[2] != nd->N)
        return cpu_bad(c, "shapes of a, b and the output do not agree");
    if (nd->M > INT32_MAX || nd->N > INT32_MAX || nd->K > INT32_MAX)
        return cpu_bad(c, "a dimension exceeds the BLAS int range");
    return 0;
}

typedef struct bmm_job {
    const float *a, *b;
    float *o;
    int64_t M, N, K;
    int tb;
} bmm_job;

static void bmm_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    const bmm_job *j = arg;
    const float *a = j->a + t * j->M * j->K, *b = j->b + t * j->N * j->K;
    float *o = j->o + t * j->M * j->N;
    if (j->K == 0) {
        for (int64_t i = 0; i < j->M * j->N; i++) o[i] = 0.0f;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)j->M, (int)j->N, (int)j->K,
                1.0f, a, (int)j->K, b, j->tb ? (int)j->K : (int)j->N, 0.0f, o, (int)j->N);
}

int cpu_run_bmm(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    bmm_job j = {CPU_F(r, 0), CPU_F(r, 1), CPU_O(r, 0), nd->M, nd->N, nd->K, nd->flag};
    if (nd->rows == 0 || nd->M == 0 || nd->N == 0) return 0;
    cpu_parallel(r, nd->rows, bmm_task, &j);
    return 0;
}
