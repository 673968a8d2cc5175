/* Drives the C ABI of the shared library (scatterjit.h): results, a bad index, a pool of
 * threads, and misuse (NULL pointers, a bad key, wrong dtypes, ranks and shapes, aliasing,
 * too many threads), each call both
 * through sj_kernel_run and through a prepared call. The Rust side
 * (tests/capi.rs) compares every case with the reference interpreter and checks the
 * misuse statuses and messages. */
#include <stdlib.h>

#include "scatterjit.h"
#include "print.h"

#define T(data, dtype, ndim, shape, strides) \
    ((sj_tensor){(data), SJ_DEVICE_CPU, (ndim), (dtype), (shape), (strides), 0})

static sj_cache *cache;
static sj_kernel *current;

static int32_t via_library(sj_args *args) {
    return sj_kernel_run(current, args);
}

/* The same call prepared from args' descriptors, run on their data, then freed. */
static int32_t via_prepared(sj_args *args) {
    sj_prepared *prepared = NULL;
    int32_t status = sj_prepare(current, args, &prepared);
    if (status != SJ_OK)
        return status;
    status = sj_prepared_run(prepared, args->out->data, args->data->data, args->indices->data,
                             args->updates ? args->updates->data : NULL, args->bad_index);
    sj_prepared_free(prepared);
    return status;
}

/* A prepared call kept past its kernel handle and cache, run in place (data NULL). */
static sj_prepared *kept;

static int32_t via_kept(sj_args *args) {
    return sj_prepared_run(kept, args->out->data, NULL, args->indices->data,
                           args->updates->data, args->bad_index);
}

/* An in-place case: out is data's descriptor, so data is printed before the call. */
static void run_in_place(const char *name, kernel_fn kernel, sj_args *args) {
    printf("case %s\n", name);
    print_tensor("data", args->data);
    print_tensor("indices", args->indices);
    print_tensor("updates", args->updates);
    print_tensor("before", args->out);
    int32_t status = kernel(args);
    printf("  status %d %s\n", status, sj_status_name(status));
    print_tensor("out", args->out);
}

/* Runs `name` through sj_kernel_run, then through a prepared call as `name`_prepared. */
static void run_both(const char *name, sj_args *args) {
    char prepared[64];
    run_case(name, via_library, args);
    snprintf(prepared, sizeof prepared, "%s_prepared", name);
    run_case(prepared, via_prepared, args);
}

/* Selects the kernel of `key` for via_library; exits if it cannot be had. */
static void use(const char *key) {
    sj_kernel_free(current);
    current = NULL;
    if (sj_kernel_get(cache, key, &current) != SJ_OK) {
        printf("cannot get %s: %s\n", key, sj_last_error());
        exit(1);
    }
}

static void iota(float *v, int n) {
    for (int i = 0; i < n; i++)
        v[i] = (float)i;
}

static void report(const char *what, int32_t status, int same) {
    printf("misuse %s %d %s | %s\n", what, status, same ? "unchanged" : "changed", sj_last_error());
}

static void misuse(const char *what, sj_args *args, const float *out, int n) {
    float before[64];
    memcpy(before, out, n * sizeof *out);
    int32_t status = sj_kernel_run(current, args);
    report(what, status, memcmp(before, out, n * sizeof *out) == 0);
}

int main(void) {
    cache = sj_cache_new();
    if (!cache)
        return 1;

    float sdata[12], supd[6] = {0.5f, 1.25f, -2, 4, 8, 16}, sout[12] = {0};
    int64_t sidx[6] = {1, 1, 3, -4, 0, 2};
    int64_t s34[2] = {3, 4}, s32[2] = {3, 2};
    iota(sdata, 12);
    sj_tensor sd = T(sdata, SJ_DTYPE_F32, 2, s34, NULL), si = T(sidx, SJ_DTYPE_I64, 2, s32, NULL),
              su = T(supd, SJ_DTYPE_F32, 2, s32, NULL), so = T(sout, SJ_DTYPE_F32, 2, s34, NULL);
    sj_args sargs = {&sd, &si, &su, &so, {0}, NULL, 0};
    use("scatter_elements.f32.i64.r2.a1.add");
    run_both("scatter_add", &sargs);

    float inplace[12];
    sj_tensor ip = T(inplace, SJ_DTYPE_F32, 2, s34, NULL);
    sj_args iargs = {&ip, &si, &su, &ip, {0}, NULL, 0};
    iota(inplace, 12);
    run_in_place("scatter_in_place", via_library, &iargs);
    iota(inplace, 12);
    run_in_place("scatter_in_place_prepared", via_prepared, &iargs);

    /* mean: only the library has it (its sums and divide run on the host). */
    use("scatter_elements.f32.i64.r2.a1.mean.noinit");
    run_both("scatter_mean_noinit", &sargs);

    float gdata[12], gout[6] = {0};
    int64_t gidx[6] = {3, 0, -1, 2, 1, 1}, gstrides[2] = {1, 3};
    iota(gdata, 12);
    sj_tensor gd = T(gdata, SJ_DTYPE_F32, 2, s34, gstrides), gi = T(gidx, SJ_DTYPE_I64, 2, s32, NULL),
              go = T(gout, SJ_DTYPE_F32, 2, s32, NULL);
    sj_args gargs = {&gd, &gi, NULL, &go, {0}, NULL, 0};
    use("gather_elements.f32.i64.r2.a1");
    run_both("gather_elements_strided", &gargs);

    static float rdata[5 * 64], rout[2 * 2 * 64];
    int64_t ridx[4] = {4, -1, 0, 2}, r5x64[2] = {5, 64}, r2x2[2] = {2, 2}, r2x2x64[3] = {2, 2, 64};
    iota(rdata, 5 * 64);
    sj_tensor rd = T(rdata, SJ_DTYPE_F32, 2, r5x64, NULL), ri = T(ridx, SJ_DTYPE_I64, 2, r2x2, NULL),
              ro = T(rout, SJ_DTYPE_F32, 3, r2x2x64, NULL);
    sj_args rargs = {&rd, &ri, NULL, &ro, {0}, NULL, 0};
    use("gather.f32.i64.r2.q2.a0");
    run_both("gather_rows", &rargs);
    int64_t ridx_bad[4] = {4, 0, -6, 2};
    sj_tensor rib = T(ridx_bad, SJ_DTYPE_I64, 2, r2x2, NULL);
    sj_args rbargs = {&rd, &rib, NULL, &ro, {0}, NULL, 0};
    run_both("gather_bad_index", &rbargs);

    int64_t bidx[6] = {1, 1, 3, 0, 4, -5};
    sj_tensor bi = T(bidx, SJ_DTYPE_I64, 2, s32, NULL);
    for (int i = 0; i < 12; i++)
        sout[i] = -1;
    sj_args bargs = {&sd, &bi, &su, &so, {0}, NULL, 0};
    use("scatter_elements.f32.i64.r2.a1.add");
    run_both("scatter_bad_index", &bargs);

    /* A call large enough to split, on a pool of three threads: every chunk of both forms
     * runs there or on this thread. */
    sj_pool *pool = NULL;
    if (sj_pool_new(3, &pool) != SJ_OK || sj_pool_threads(pool) != 3 ||
        sj_pool_threads(NULL) != 0) {
        printf("cannot start a pool of 3: %s\n", sj_last_error());
        return 1;
    }
    sj_use_pool(pool);
    sj_pool_free(pool); /* it lives while this thread uses it */
    enum { PR = 512, PC = 256 };
    static float pdata[PR * PC], pout[PR * PC];
    static int64_t pidx[PR * PC];
    int64_t pshape[2] = {PR, PC};
    iota(pdata, PR * PC);
    for (int i = 0; i < PR * PC; i++)
        pidx[i] = (int64_t)((i * 7919u) % (2 * PC)) - PC;
    sj_tensor pd = T(pdata, SJ_DTYPE_F32, 2, pshape, NULL), pi = T(pidx, SJ_DTYPE_I64, 2, pshape, NULL),
              po = T(pout, SJ_DTYPE_F32, 2, pshape, NULL);
    sj_args pargs = {&pd, &pi, NULL, &po, {0}, NULL, 0};
    use("gather_elements.f32.i64.r2.a1");
    run_both("gather_elements_on_a_pool", &pargs);
    sj_use_pool(NULL);
    use("scatter_elements.f32.i64.r2.a1.add");

    /* Misuse of the library itself. */
    sj_kernel *k = NULL;
    report("get_null_cache", sj_kernel_get(NULL, "gather.f32.i64.r2.q1.a0", &k), 1);
    report("get_null_key", sj_kernel_get(cache, NULL, &k), 1);
    report("get_null_out", sj_kernel_get(cache, "gather.f32.i64.r2.q1.a0", NULL), 1);
    report("get_bad_key", sj_kernel_get(cache, "gather.f32.i64.r2.a0", &k), k == NULL);
    report("get_bad_axis", sj_kernel_get(cache, "gather_elements.f32.i64.r2.a5", &k), k == NULL);
    report("run_null_kernel", sj_kernel_run(NULL, &sargs), 1);
    report("run_null_args", sj_kernel_run(current, NULL), 1);
    sj_pool *none = NULL;
    report("pool_null_out", sj_pool_new(2, NULL), 1);
    report("pool_too_many_threads", sj_pool_new(5000, &none), none == NULL);

    /* Misuse of a call: each fails with its status and leaves out alone. */
    sj_args a = sargs;
    a.indices = NULL;
    misuse("null_tensor", &a, sout, 12);
    sj_tensor wrong = si;
    wrong.dtype = SJ_DTYPE_I32;
    a = sargs;
    a.indices = &wrong;
    misuse("wrong_dtype", &a, sout, 12);
    wrong = so;
    wrong.ndim = 1;
    a = sargs;
    a.out = &wrong;
    misuse("wrong_rank", &a, sout, 12);
    int64_t s35[2] = {3, 5};
    wrong = so;
    wrong.shape = s35;
    a = sargs;
    a.out = &wrong;
    misuse("wrong_out_shape", &a, sout, 12);
    int64_t s22[2] = {2, 2};
    wrong = su;
    wrong.shape = s22;
    a = sargs;
    a.updates = &wrong;
    misuse("updates_smaller_than_indices", &a, sout, 12);
    int64_t sneg[2] = {3, -2};
    wrong = si;
    wrong.shape = sneg;
    a = sargs;
    a.indices = &wrong;
    misuse("negative_dim", &a, sout, 12);
    wrong = sd;
    wrong.data = NULL;
    a = sargs;
    a.data = &wrong;
    misuse("null_data", &a, sout, 12);
    wrong = so;
    wrong.device.device_type = 2;
    a = sargs;
    a.out = &wrong;
    misuse("not_cpu", &a, sout, 12);
    float aliased[12];
    iota(aliased, 12);
    sj_tensor au = T(aliased, SJ_DTYPE_F32, 2, s32, NULL), ao = T(aliased, SJ_DTYPE_F32, 2, s34, NULL);
    a = sargs;
    a.updates = &au;
    a.out = &ao;
    misuse("out_overlaps_updates", &a, aliased, 12);
    int64_t broadcast[2] = {0, 1};
    wrong = so;
    wrong.strides = broadcast;
    a = sargs;
    a.out = &wrong;
    misuse("out_overlaps_itself", &a, sout, 12);

    /* Misuse of a prepared call: each fails with its status and leaves out alone. */
    sj_prepared *p = NULL;
    report("prepare_null_args", sj_prepare(current, NULL, &p), p == NULL);
    a = sargs;
    a.out = &wrong; /* out with a zero stride: it would write one element twice */
    report("prepare_out_overlaps_itself", sj_prepare(current, &a, &p), p == NULL);
    if (sj_prepare(current, &sargs, &p) != SJ_OK) {
        printf("cannot prepare: %s\n", sj_last_error());
        return 1;
    }
    float before[12];
    memcpy(before, sout, sizeof before);
#define SAME (memcmp(before, sout, sizeof before) == 0)
    report("prepared_run_null", sj_prepared_run(NULL, sout, sdata, sidx, supd, NULL), SAME);
    report("prepared_null_indices", sj_prepared_run(p, sout, sdata, NULL, supd, NULL), SAME);
    report("prepared_out_overlaps_data", sj_prepared_run(p, sout, sout, sidx, supd, NULL), SAME);
    int64_t bad[SJ_MAX_RANK] = {0};
    int32_t status = sj_prepared_run(p, sout, sdata, bidx, supd, bad);
    report("prepared_bad_index", status, SAME && bad[0] == 2 && bad[1] == 0);
    sj_prepared_free(p);
    if (sj_prepare(current, &iargs, &kept) != SJ_OK) {
        printf("cannot prepare in place: %s\n", sj_last_error());
        return 1;
    }
    memcpy(before, inplace, sizeof before);
    report("prepared_in_place_other_data",
           sj_prepared_run(kept, inplace, sdata, sidx, supd, NULL),
           memcmp(before, inplace, sizeof before) == 0);
    sj_kernel_free(current);
    sj_cache_free(cache);
    iota(inplace, 12);
    run_in_place("scatter_in_place_outliving_cache", via_kept, &iargs);
    sj_prepared_free(kept);
    return 0;
}
