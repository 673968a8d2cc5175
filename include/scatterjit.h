/*
 * scatterjit.h: the C ABI of the scatterjit shared library (libscatterjit.so on Linux,
 * built by `cargo build --release` into target/release/). Kernels are compiled at run
 * time, on first use of their key, and cached.
 *
 *     sj_cache *cache = sj_cache_new();
 *     sj_kernel *kernel;
 *     if (sj_kernel_get(cache, "gather.f32.i64.r2.q1.a0", &kernel) != SJ_OK)
 *         fprintf(stderr, "%s\n", sj_last_error());
 *     sj_args args = {&data, &indices, NULL, &out, {0}, NULL, 0};
 *     int32_t status = sj_kernel_run(kernel, &args);
 *     sj_kernel_free(kernel);
 *     sj_cache_free(cache);
 *
 * Every function returns SJ_OK or an SJ_ERR_* code (scatterjit_abi.h) and never lets a
 * panic cross into C (a bug is SJ_ERR_INTERNAL). After a failure, sj_last_error() returns
 * its message, naming the op and the offending value and position. All functions may be
 * called from any thread; a cache, its kernels and prepared calls may be shared between
 * threads.
 */
#ifndef SCATTERJIT_H
#define SCATTERJIT_H

#include "scatterjit_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cache of compiled kernels: each key compiles once. */
typedef struct sj_cache sj_cache;

/* A handle to one compiled kernel; it keeps the kernel's code alive until freed, even
 * after its cache is freed. */
typedef struct sj_kernel sj_kernel;

/* A new, empty cache, or NULL on failure. */
sj_cache *sj_cache_new(void);

/* Frees a cache (NULL is ignored). */
void sj_cache_free(sj_cache *cache);

/* Stores in *kernel a new handle to the kernel of a printed key, such as
 * "scatter_elements.f32.i64.r2.a1.add" (op, dtype, index dtype, rank, [index rank,] axis,
 * [reduction[, noinit]]), compiling it on first use. Errors: SJ_ERR_NULL_POINTER,
 * SJ_ERR_KEY (does not parse, or names an unsupported kernel), SJ_ERR_INTERNAL. */
int32_t sj_kernel_get(sj_cache *cache, const char *key, sj_kernel **kernel);

/* Frees a kernel handle (NULL is ignored). */
void sj_kernel_free(sj_kernel *kernel);

/* Runs a kernel on caller-owned tensors (see sj_args). Every index is checked before the
 * first write: on any error out is unchanged, and on SJ_ERR_INDEX_OUT_OF_BOUNDS the
 * position of the first bad index is in args->bad_index. Unlike an ahead-of-time entry,
 * it allocates mean's scratch itself (args->workspace is ignored), and large calls run on
 * several threads (the global pool's, or the one of sj_use_pool). A kernel handle keeps
 * the few small calls its calls repeat: one whose descriptors equal a kept call's (all
 * fields but data and device_id) runs as sj_prepared_run would, with the same results
 * and errors, and without reading the descriptors' geometry again. */
int32_t sj_kernel_run(const sj_kernel *kernel, sj_args *args);

/* A call of one kernel bound to the geometry of its operands, to run again and again on
 * new buffers (a framework's graph node whose shapes are fixed). */
typedef struct sj_prepared sj_prepared;

/* Binds kernel to the geometry of args' descriptors (dtype, ndim, shape, strides,
 * byte_offset; their data pointers are not read) and stores a new prepared call in
 * *prepared. Validation, loop order, parameter blocks and how the call is split are
 * decided here, once. A scatter is prepared in place when args->out == args->data (the
 * same descriptor). Errors: those sj_kernel_run gives for descriptors of this geometry. */
int32_t sj_prepare(const sj_kernel *kernel, const sj_args *args, sj_prepared **prepared);

/* Runs a prepared call on buffers laid out as its descriptors said: each pointer stands
 * for its descriptor's data field (updates is ignored by the gathers; an in-place call
 * updates out and takes data NULL or equal to out). What depends on memory is checked on
 * every call (NULL buffers with elements, out overlapping an input, every index): on any
 * error out is unchanged, and on SJ_ERR_INDEX_OUT_OF_BOUNDS the position of the first bad
 * index is in bad_index (NULL, or SJ_MAX_RANK entries). Results are those of
 * sj_kernel_run on the same tensors. */
int32_t sj_prepared_run(const sj_prepared *prepared, void *out, const void *data,
                        const void *indices, const void *updates, int64_t *bad_index);

/* Frees a prepared call (NULL is ignored). It keeps its kernel's code alive until then. */
void sj_prepared_free(sj_prepared *prepared);

/* Threads that calls split over instead of the global pool's (as many as the cores, or
 * RAYON_NUM_THREADS): a framework's own thread count. Results are the same bits on any
 * pool. */
typedef struct sj_pool sj_pool;

/* Starts a pool of threads threads (0: one per core, or RAYON_NUM_THREADS) and stores a
 * new handle in *pool. Errors: SJ_ERR_NULL_POINTER, SJ_ERR_RESOURCE (over 1024 threads,
 * or the system does not start them). */
int32_t sj_pool_new(uint32_t threads, sj_pool **pool);

/* How many threads a call splits over on pool (0 for NULL). */
uint32_t sj_pool_threads(const sj_pool *pool);

/* Frees a pool handle (NULL is ignored); its threads stop once no thread uses it. */
void sj_pool_free(sj_pool *pool);

/* Makes the calls this thread makes from now on split over pool, this thread taking
 * chunks too (NULL: the global pool again), until the next sj_use_pool on this thread or
 * its end. Other threads keep theirs; set it once on each of a framework's threads, or
 * before each call. The pool lives while a thread uses it, even after sj_pool_free. */
void sj_use_pool(const sj_pool *pool);

/* The message of the last failed call on this thread ("" if none). Valid until the next
 * failing call on this thread. */
const char *sj_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SCATTERJIT_H */
