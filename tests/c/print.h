/* Prints tensors and call results in the line format the Rust side of the C tests parses:
 *
 *   case <name>
 *     <label> <dtype> <d0,d1,...|-> : <values in row-major order>
 *     status <code> <name>
 *     bad_index <p0,p1,...|->          (only with SJ_ERR_INDEX_OUT_OF_BOUNDS)
 */
#ifndef SCATTERJIT_TEST_PRINT_H
#define SCATTERJIT_TEST_PRINT_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *dtype_name(sj_dtype d) {
    static char name[16];
    const char *kind = d.code == 0 ? "i" : d.code == 1 ? "u" : d.code == 2 ? "f" : "?";
    snprintf(name, sizeof name, "%s%d", kind, d.bits);
    return name;
}

static void print_dims(const int64_t *v, int32_t n) {
    if (n == 0)
        printf("-");
    for (int32_t i = 0; i < n; i++)
        printf(i ? ",%" PRId64 : "%" PRId64, v[i]);
}

/* Walks t's elements in row-major order through its strides. */
static void print_tensor(const char *label, const sj_tensor *t) {
    printf("  %s %s ", label, dtype_name(t->dtype));
    print_dims(t->shape, t->ndim);
    printf(" :");
    int64_t numel = 1, pos[SJ_MAX_RANK] = {0}, stride[SJ_MAX_RANK];
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        stride[d] = t->strides ? t->strides[d] : numel;
        numel *= t->shape[d];
    }
    const char *base = (const char *)t->data + t->byte_offset;
    for (int64_t n = 0; n < numel; n++) {
        int64_t at = 0;
        for (int32_t d = 0; d < t->ndim; d++)
            at += pos[d] * stride[d];
        const char *p = base + at * (t->dtype.bits / 8);
        int64_t i = 0;
        uint64_t u = 0;
        switch (t->dtype.code * 1000 + t->dtype.bits) {
        case 2032: printf(" %.9g", (double)*(const float *)p); break;
        case 2064: printf(" %.17g", *(const double *)p); break;
        case 8: i = *(const int8_t *)p; printf(" %" PRId64, i); break;
        case 32: i = *(const int32_t *)p; printf(" %" PRId64, i); break;
        case 64: i = *(const int64_t *)p; printf(" %" PRId64, i); break;
        case 1008: u = *(const uint8_t *)p; printf(" %" PRIu64, u); break;
        default: printf(" ?"); break;
        }
        for (int32_t d = t->ndim - 1; d >= 0; d--) {
            if (++pos[d] < t->shape[d])
                break;
            pos[d] = 0;
        }
    }
    printf("\n");
}

typedef int32_t (*kernel_fn)(sj_args *args);

/* Prints the operands, calls, prints the status (and bad index) and out. */
static int32_t run_case(const char *name, kernel_fn kernel, sj_args *args) {
    printf("case %s\n", name);
    print_tensor("data", args->data);
    print_tensor("indices", args->indices);
    if (args->updates)
        print_tensor("updates", args->updates);
    print_tensor("before", args->out);
    int32_t status = kernel(args);
    printf("  status %d %s\n", status, sj_status_name(status));
    if (status == SJ_ERR_INDEX_OUT_OF_BOUNDS) {
        printf("  bad_index ");
        print_dims(args->bad_index, args->indices->ndim);
        printf("\n");
    }
    print_tensor("out", args->out);
    return status;
}

#endif
