/* Drives kernels compiled by `scatterjit aot` (header kernels.h) through their C entries:
 * results, a bad index, and misuse. The Rust side (tests/aot.rs) compares every case with
 * the reference interpreter and checks the misuse statuses. */
#include <stdlib.h>

#include "kernels.h"
#include "print.h"

#define T(data, dtype, ndim, shape, strides) \
    ((sj_tensor){(data), SJ_DEVICE_CPU, (ndim), (dtype), (shape), (strides), 0})

/* Fills n floats with their own offsets, so a wrong result says which element was read. */
static void iota(float *v, int n) {
    for (int i = 0; i < n; i++)
        v[i] = (float)i;
}

static void misuse(const char *what, kernel_fn kernel, sj_args *args, const float *out, int n) {
    float before[64];
    memcpy(before, out, n * sizeof *out);
    int32_t status = kernel(args);
    int same = memcmp(before, out, n * sizeof *out) == 0;
    printf("misuse %s %d %s\n", what, status, same ? "unchanged" : "changed");
}

int main(void) {
    /* scatter_elements, add, axis 1; duplicates and a negative index. */
    float sdata[12], supd[6] = {0.5f, 1.25f, -2, 4, 8, 16}, sout[12] = {0};
    int64_t sidx[6] = {1, 1, 3, -4, 0, 2};
    int64_t s34[2] = {3, 4}, s32[2] = {3, 2};
    iota(sdata, 12);
    sj_tensor sd = T(sdata, SJ_DTYPE_F32, 2, s34, NULL), si = T(sidx, SJ_DTYPE_I64, 2, s32, NULL),
              su = T(supd, SJ_DTYPE_F32, 2, s32, NULL), so = T(sout, SJ_DTYPE_F32, 2, s34, NULL);
    sj_args sargs = {&sd, &si, &su, &so, {0}, NULL, 0};
    run_case("scatter_add", sj_scatter_elements_f32_i64_r2_a1_add, &sargs);

    /* The same kernel in place: out is data. */
    float inplace[12];
    iota(inplace, 12);
    sj_tensor ip = T(inplace, SJ_DTYPE_F32, 2, s34, NULL);
    sj_args iargs = {&ip, &si, &su, &ip, {0}, NULL, 0};
    printf("case scatter_in_place\n");
    print_tensor("data", &ip);
    print_tensor("indices", &si);
    print_tensor("updates", &su);
    print_tensor("before", &ip);
    int32_t status = sj_scatter_elements_f32_i64_r2_a1_add(&iargs);
    printf("  status %d %s\n", status, sj_status_name(status));
    print_tensor("out", &ip);

    /* scatter_elements, max without the initial values, axis 0, i32 indices. */
    int32_t mdata[9] = {9, 9, 9, 9, 9, 9, 9, 9, 9}, mupd[6] = {-5, 7, 3, 2, -8, 100}, mout[9] = {0};
    int32_t midx[6] = {0, 2, 2, 0, 2, -1};
    int64_t m33[2] = {3, 3}, m23[2] = {2, 3};
    sj_tensor md = T(mdata, SJ_DTYPE_I32, 2, m33, NULL), mi = T(midx, SJ_DTYPE_I32, 2, m23, NULL),
              mu = T(mupd, SJ_DTYPE_I32, 2, m23, NULL), mo = T(mout, SJ_DTYPE_I32, 2, m33, NULL);
    sj_args margs = {&md, &mi, &mu, &mo, {0}, NULL, 0};
    run_case("scatter_max_noinit", sj_scatter_elements_i32_i32_r2_a0_max_noinit, &margs);

    /* gather_elements, axis 1, from a transposed (strided) 3x4 view of a 4x3 buffer. */
    float gdata[12], gout[6] = {0};
    int64_t gidx[6] = {3, 0, -1, 2, 1, 1}, gstrides[2] = {1, 3};
    iota(gdata, 12);
    sj_tensor gd = T(gdata, SJ_DTYPE_F32, 2, s34, gstrides), gi = T(gidx, SJ_DTYPE_I64, 2, s32, NULL),
              go = T(gout, SJ_DTYPE_F32, 2, s32, NULL);
    sj_args gargs = {&gd, &gi, NULL, &go, {0}, NULL, 0};
    run_case("gather_elements_strided", sj_gather_elements_f32_i64_r2_a1, &gargs);

    /* gather, axis 0, 2x2 indices over rows of 64 floats (long rows are copied whole). */
    static float rdata[5 * 64], rout[2 * 2 * 64];
    int64_t ridx[4] = {4, -1, 0, 2}, r5x64[2] = {5, 64}, r2x2[2] = {2, 2}, r2x2x64[3] = {2, 2, 64};
    iota(rdata, 5 * 64);
    sj_tensor rd = T(rdata, SJ_DTYPE_F32, 2, r5x64, NULL), ri = T(ridx, SJ_DTYPE_I64, 2, r2x2, NULL),
              ro = T(rout, SJ_DTYPE_F32, 3, r2x2x64, NULL);
    sj_args rargs = {&rd, &ri, NULL, &ro, {0}, NULL, 0};
    run_case("gather_rows", sj_gather_f32_i64_r2_q2_a0, &rargs);

    /* gather, axis 1 of a rank-3 i64 tensor, u8 indices. */
    int64_t udata[12], uout[16] = {0};
    uint8_t uidx[4] = {2, 0, 2, 1};
    int64_t u232[3] = {2, 3, 2}, u4[1] = {4}, u242[3] = {2, 4, 2};
    for (int i = 0; i < 12; i++)
        udata[i] = 100 + i;
    sj_tensor ud = T(udata, SJ_DTYPE_I64, 3, u232, NULL), ui = T(uidx, SJ_DTYPE_U8, 1, u4, NULL),
              uo = T(uout, SJ_DTYPE_I64, 3, u242, NULL);
    sj_args uargs = {&ud, &ui, NULL, &uo, {0}, NULL, 0};
    run_case("gather_u8", sj_gather_i64_u8_r3_q1_a1, &uargs);

    /* gather with a scalar index: a rank-0 result. */
    float zdata[5], zout[1] = {0};
    int64_t zidx[1] = {-2}, z5[1] = {5};
    iota(zdata, 5);
    sj_tensor zd = T(zdata, SJ_DTYPE_F32, 1, z5, NULL), zi = T(zidx, SJ_DTYPE_I64, 0, NULL, NULL),
              zo = T(zout, SJ_DTYPE_F32, 0, NULL, NULL);
    sj_args zargs = {&zd, &zi, NULL, &zo, {0}, NULL, 0};
    run_case("gather_scalar_index", sj_gather_f32_i64_r1_q0_a0, &zargs);

    /* scatter_elements, mean with the initial values, axis 0: the sums and counts live in
     * the caller's workspace, of the size the header's function names. */
    float mean_out[12] = {0};
    int64_t mean_idx[6] = {0, 2, 0, -1, 2, 0};
    sj_tensor mni = T(mean_idx, SJ_DTYPE_I64, 2, s32, NULL), mno = T(mean_out, SJ_DTYPE_F32, 2, s34, NULL);
    uint64_t need = sj_scatter_elements_f32_i64_r2_a0_mean_workspace_bytes(&mno);
    void *workspace = malloc(need);
    sj_args meanargs = {&sd, &mni, &su, &mno, {0}, workspace, need};
    run_case("scatter_mean", sj_scatter_elements_f32_i64_r2_a0_mean, &meanargs);

    /* Out-of-bounds indices: out stays as it was, the position is reported. */
    int64_t bidx[6] = {1, 1, 3, 0, 4, -5};
    sj_tensor bi = T(bidx, SJ_DTYPE_I64, 2, s32, NULL);
    for (int i = 0; i < 12; i++)
        sout[i] = -1;
    sj_args bargs = {&sd, &bi, &su, &so, {0}, NULL, 0};
    run_case("scatter_bad_index", sj_scatter_elements_f32_i64_r2_a1_add, &bargs);
    int64_t ridx_bad[4] = {4, 0, -6, 2};
    sj_tensor rib = T(ridx_bad, SJ_DTYPE_I64, 2, r2x2, NULL);
    sj_args rbargs = {&rd, &rib, NULL, &ro, {0}, NULL, 0};
    run_case("gather_bad_index", sj_gather_f32_i64_r2_q2_a0, &rbargs);

    /* Misuse: every call fails with its status and leaves out alone. */
    kernel_fn scatter = sj_scatter_elements_f32_i64_r2_a1_add;
    printf("misuse null_args %d\n", scatter(NULL));
    sj_args a = sargs;
    a.indices = NULL;
    misuse("null_tensor", scatter, &a, sout, 12);
    sj_tensor wrong = si;
    wrong.dtype = SJ_DTYPE_I32;
    a = sargs;
    a.indices = &wrong;
    misuse("wrong_dtype", scatter, &a, sout, 12);
    wrong = so;
    wrong.ndim = 1;
    a = sargs;
    a.out = &wrong;
    misuse("wrong_rank", scatter, &a, sout, 12);
    int64_t s35[2] = {3, 5};
    wrong = so;
    wrong.shape = s35;
    a = sargs;
    a.out = &wrong;
    misuse("wrong_out_shape", scatter, &a, sout, 12);
    int64_t s22[2] = {2, 2};
    wrong = su;
    wrong.shape = s22;
    a = sargs;
    a.updates = &wrong;
    misuse("updates_smaller_than_indices", scatter, &a, sout, 12);
    int64_t sneg[2] = {3, -2};
    wrong = si;
    wrong.shape = sneg;
    a = sargs;
    a.indices = &wrong;
    misuse("negative_dim", scatter, &a, sout, 12);
    wrong = so;
    wrong.shape = NULL;
    a = sargs;
    a.out = &wrong;
    misuse("null_shape", scatter, &a, sout, 12);
    wrong = so;
    wrong.device.device_type = 2;
    a = sargs;
    a.out = &wrong;
    misuse("not_cpu", scatter, &a, sout, 12);
    float aliased[12];
    iota(aliased, 12);
    sj_tensor au = T(aliased, SJ_DTYPE_F32, 2, s32, NULL), ao = T(aliased, SJ_DTYPE_F32, 2, s34, NULL);
    a = sargs;
    a.updates = &au;
    a.out = &ao;
    misuse("out_overlaps_updates", scatter, &a, aliased, 12);
    int64_t transposed[2] = {1, 3};
    sj_tensor as = T(aliased, SJ_DTYPE_F32, 2, s34, transposed);
    a = sargs;
    a.data = &ao;
    a.out = &as;
    misuse("out_overlaps_data", scatter, &a, aliased, 12);
    kernel_fn mean = sj_scatter_elements_f32_i64_r2_a0_mean;
    a = meanargs;
    a.workspace_bytes = need - 1;
    misuse("workspace_too_small", mean, &a, mean_out, 12);
    a = meanargs;
    a.workspace = NULL;
    misuse("workspace_null", mean, &a, mean_out, 12);
    float shared[12 * 4];
    iota(shared, 12);
    sj_tensor so2 = T(shared, SJ_DTYPE_F32, 2, s34, NULL);
    a = meanargs;
    a.out = &so2;
    a.workspace = shared + 4;
    misuse("workspace_overlaps_out", mean, &a, shared, 12);
    /* An empty output needs no workspace. */
    int64_t s04[2] = {0, 4}, s02[2] = {0, 2};
    sj_tensor ed = T(sdata, SJ_DTYPE_F32, 2, s04, NULL), ei = T(mean_idx, SJ_DTYPE_I64, 2, s02, NULL),
              eu = T(supd, SJ_DTYPE_F32, 2, s02, NULL), eo = T(mean_out, SJ_DTYPE_F32, 2, s04, NULL);
    sj_args empty = {&ed, &ei, &eu, &eo, {0}, NULL, 0};
    misuse("empty_mean_without_workspace", mean, &empty, mean_out, 0);
    free(workspace);
    return 0;
}
