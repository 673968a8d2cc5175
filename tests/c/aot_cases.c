/* Runs the cases of a file written by tests/aot.rs through the kernels of `kernels[]` (a
 * table generated with kernels.h) and prints, per case, the status, the bad index and the
 * bytes of out, for the Rust side to compare with the reference interpreter.
 *
 * The case file is a sequence of little-endian int64 words. Per case: the kernel's position
 * in kernels[], whether out is data (in place), then data, indices, updates and out, each
 * as: present (0 or 1); if present, dtype (the sj_dtype's 4 bytes), ndim, ndim dims,
 * has_strides, ndim strides if it has them, byte_offset, nbytes, then nbytes of memory
 * padded to a multiple of 8. An in-place case has no separate out.
 *
 * A kernel with an entry in `workspaces[]` gets a workspace of exactly the size that
 * function names, followed by a guard the call must leave alone.
 *
 * Output, one line per case: `case <n> status <s> bad <p0,p1,..|-> out <hex bytes>`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

typedef int32_t (*kernel_fn)(sj_args *args);
typedef uint64_t (*workspace_fn)(const sj_tensor *out);
extern const kernel_fn kernels[];
extern const workspace_fn workspaces[];
extern const int64_t kernel_count;

/* Bytes after a workspace that a call must not touch. */
#define GUARD 64

static FILE *cases;

static int64_t word(void) {
    unsigned char b[8];
    if (fread(b, 1, 8, cases) != 8) {
        fprintf(stderr, "truncated case file\n");
        exit(2);
    }
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return (int64_t)v;
}

/* One operand: its descriptor and the memory it owns. */
typedef struct {
    sj_tensor t;
    int64_t shape[SJ_MAX_RANK], strides[SJ_MAX_RANK];
    unsigned char *memory;
    int64_t nbytes;
} operand;

static int read_operand(operand *o) {
    memset(o, 0, sizeof *o);
    if (!word())
        return 0;
    uint32_t dtype = (uint32_t)word();
    memcpy(&o->t.dtype, &dtype, sizeof o->t.dtype);
    o->t.device = SJ_DEVICE_CPU;
    o->t.ndim = (int32_t)word();
    if (o->t.ndim < 0 || o->t.ndim > SJ_MAX_RANK) {
        fprintf(stderr, "bad rank %d\n", o->t.ndim);
        exit(2);
    }
    for (int32_t d = 0; d < o->t.ndim; d++)
        o->shape[d] = word();
    o->t.shape = o->shape;
    if (word()) {
        for (int32_t d = 0; d < o->t.ndim; d++)
            o->strides[d] = word();
        o->t.strides = o->strides;
    }
    o->t.byte_offset = (uint64_t)word();
    o->nbytes = word();
    int64_t padded = (o->nbytes + 7) / 8 * 8;
    /* 16-byte aligned, like any malloc on these targets; never empty, so never NULL. */
    o->memory = aligned_alloc(16, (size_t)(padded + 16) / 16 * 16);
    if (!o->memory || fread(o->memory, 1, (size_t)padded, cases) != (size_t)padded) {
        fprintf(stderr, "cannot read %lld bytes\n", (long long)padded);
        exit(2);
    }
    o->t.data = o->memory;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2 || !(cases = fopen(argv[1], "rb"))) {
        fprintf(stderr, "usage: aot_cases CASES\n");
        return 2;
    }
    for (int64_t n = 0;; n++) {
        int c = fgetc(cases);
        if (c == EOF)
            break;
        ungetc(c, cases);
        int64_t kernel = word(), in_place = word();
        if (kernel < 0 || kernel >= kernel_count) {
            fprintf(stderr, "case %lld: no kernel %lld\n", (long long)n, (long long)kernel);
            return 2;
        }
        operand ops[4];
        int present[4];
        for (int i = 0; i < 4; i++)
            present[i] = read_operand(&ops[i]);
        operand *out = in_place ? &ops[0] : &ops[3];
        sj_args args = {&ops[0].t, &ops[1].t, present[2] ? &ops[2].t : NULL, &out->t, {0}, NULL, 0};
        uint64_t need = workspaces[kernel] ? workspaces[kernel](&out->t) : 0;
        unsigned char *workspace = NULL;
        if (workspaces[kernel]) {
            workspace = malloc((size_t)need + GUARD);
            if (!workspace) {
                fprintf(stderr, "case %lld: no memory for the workspace\n", (long long)n);
                return 2;
            }
            memset(workspace, 0xa5, (size_t)need + GUARD);
            args.workspace = workspace;
            args.workspace_bytes = need;
        }
        int32_t status = kernels[kernel](&args);
        for (uint64_t i = need; workspace && i < need + GUARD; i++) {
            if (workspace[i] != 0xa5) {
                fprintf(stderr, "case %lld: written past its workspace\n", (long long)n);
                return 3;
            }
        }
        free(workspace);
        printf("case %lld status %d bad ", (long long)n, status);
        if (status == SJ_ERR_INDEX_OUT_OF_BOUNDS) {
            for (int32_t d = 0; d < ops[1].t.ndim; d++)
                printf(d ? ",%lld" : "%lld", (long long)args.bad_index[d]);
            if (ops[1].t.ndim == 0)
                printf("-");
        } else {
            printf("-");
        }
        printf(" out ");
        for (int64_t i = 0; i < out->nbytes; i++)
            printf("%02x", out->memory[i]);
        printf("\n");
        for (int i = 0; i < 4; i++)
            free(ops[i].memory);
    }
    return 0;
}
