/* Calls kernels compiled ahead of time. Build and run:
 *
 *   scatterjit aot scatter_elements.f32.i64.r2.a1.add gather.f32.i64.r2.q1.a0 -o kernels.o
 *   cc -I. aot_example.c kernels.o -o aot_example && ./aot_example
 */
#include <stdio.h>

#include "kernels.h"

static void print(const char *label, const float *v, int n) {
    printf("%s:", label);
    for (int i = 0; i < n; i++)
        printf(" %g", v[i]);
    printf("\n");
}

int main(void) {
    /* ONNX ScatterElements, axis 1, reduction add: out = data, then
     * out[0][indices[0][j]] += updates[0][j]. */
    float data[5] = {1, 2, 3, 4, 5}, updates[2] = {1.1f, 2.1f}, out[5];
    int64_t indices[2] = {1, -4}; /* -4 counts from the back: column 1 again */
    int64_t shape[2] = {1, 5}, index_shape[2] = {1, 2};
    sj_tensor d = {data, SJ_DEVICE_CPU, 2, SJ_DTYPE_F32, shape, NULL, 0};
    sj_tensor i = {indices, SJ_DEVICE_CPU, 2, SJ_DTYPE_I64, index_shape, NULL, 0};
    sj_tensor u = {updates, SJ_DEVICE_CPU, 2, SJ_DTYPE_F32, index_shape, NULL, 0};
    sj_tensor o = {out, SJ_DEVICE_CPU, 2, SJ_DTYPE_F32, shape, NULL, 0};
    sj_args scatter = {&d, &i, &u, &o, {0}, NULL, 0};
    if (sj_scatter_elements_f32_i64_r2_a1_add(&scatter) != SJ_OK)
        return 1;
    print("scatter add", out, 5);

    /* ONNX Gather, axis 0: rows 2 and 0 of a 3x2 matrix. */
    float rows[6] = {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}, picked[4];
    int64_t picks[2] = {2, 0};
    int64_t rows_shape[2] = {3, 2}, picks_shape[1] = {2}, picked_shape[2] = {2, 2};
    sj_tensor r = {rows, SJ_DEVICE_CPU, 2, SJ_DTYPE_F32, rows_shape, NULL, 0};
    sj_tensor p = {picks, SJ_DEVICE_CPU, 1, SJ_DTYPE_I64, picks_shape, NULL, 0};
    sj_tensor g = {picked, SJ_DEVICE_CPU, 2, SJ_DTYPE_F32, picked_shape, NULL, 0};
    sj_args gather = {&r, &p, NULL, &g, {0}, NULL, 0};
    if (sj_gather_f32_i64_r2_q1_a0(&gather) != SJ_OK)
        return 1;
    print("gather rows", picked, 4);

    /* An index out of bounds: nothing is written; the status says why, bad_index where. */
    picks[1] = 3;
    int32_t status = sj_gather_f32_i64_r2_q1_a0(&gather);
    printf("bad index at position %lld: %s\n", (long long)gather.bad_index[0],
           sj_status_name(status));
    return status == SJ_ERR_INDEX_OUT_OF_BOUNDS ? 0 : 1;
}
