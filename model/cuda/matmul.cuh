/* matmul.cuh - cuBLASLt matrix products with fused epilogues, descriptors
 * and the chosen algorithm cached per shape. Column-major, as cuBLASLt sees
 * them; gpt_cuda.cu wraps the three row-major products of a linear layer.
 * Internal to model/cuda/. */
#ifndef GPT_CUDA_MATMUL_CUH
#define GPT_CUDA_MATMUL_CUH

#include <cublasLt.h>

#include "common.cuh"

typedef struct gc_mm_s gc_mm_t;

typedef struct gc_mm_args_s {
  const char *name; /* in error messages: cublasLtMatmul(name) */
  int m, n, k;
  int ta, tb; /* transpose A, B */
  const void *A;
  int lda;
  const void *B;
  int ldb;
  const void *C; /* beta != 0: read from here; may differ from D */
  void *D;
  int ldd;
  cudaDataType_t ab, cd; /* element types of A and B, of C and D */
  float alpha, beta;
  cublasLtEpilogue_t epi;
  void *bias;  /* bias (forward) or bias gradient (BGRAD epilogues) */
  void *aux;   /* GELU input: written by GELU_AUX_BIAS, read by DGELU* */
  long aux_ld;
} gc_mm_args_t;

/* workspace: bytes for cuBLASLt (32 MiB suits Hopper). */
int gc_mm_create(gc_mm_t **out, size_t workspace, int allow_fused);
void gc_mm_destroy(gc_mm_t *mm);
/* D = epilogue(alpha * op(A) op(B) + beta * C). Returns -ENOTSUP, silently,
 * when cuBLASLt has no algorithm for this epilogue here (the caller falls
 * back to separate kernels); other failures are reported. */
int gc_mm(gc_mm_t *mm, const gc_mm_args_t *a, cudaStream_t s);
/* How many products ran through a fallback instead of a fused epilogue. */
int gc_mm_fallbacks(const gc_mm_t *mm);
/* How many distinct products were tuned (none with GPT_CUDA_TUNE=0). */
int gc_mm_tuned(const gc_mm_t *mm);
/* How many products took the algorithm an earlier start chose, from the
 * tuning cache (tune_cache.h; GPT_CUDA_TUNE_CACHE), instead of timing. */
int gc_mm_cache_hits(const gc_mm_t *mm);
/* Whether first-use timing is on (default; GPT_CUDA_TUNE=0 turns it off) and fused epilogues
 * are allowed (gc_mm_create's allow_fused: the backend's always are; tests compare). */
int gc_mm_tuning(const gc_mm_t *mm);
int gc_mm_fused(const gc_mm_t *mm);
/* A choice between ways of computing something (at most GC_CHOICE_WAYS),
 * made once by timing: slot GC_CHOICE_*, -1 until made, else the way.
 * GC_CHOICE_DGELU: the MLP's input gradient with GELU' and its bias
 * gradient; GC_CHOICE_GELU: its forward with the bias, GELU and the kept
 * pre-activation (linear.cuh). */
enum { GC_CHOICE_DGELU, GC_CHOICE_GELU, GC_CHOICES };
enum { GC_CHOICE_WAYS = 3 };
int *gc_mm_choice(gc_mm_t *mm, int slot);
/* The timings (ms a call) that made choice `slot`, one a way ([0]
 * cuBLASLt's epilogue, [1] the plain product and a kernel, [2] CUTLASS's
 * fused product): 0 where not timed (no tuning, fused epilogues not
 * allowed, or the way not supported or not built). */
float *gc_mm_choice_ms(gc_mm_t *mm, int slot);
/* A way's name for a person: brief ("CUTLASS") or in a sentence ("in
 * CUTLASS's epilogue"); "?" for a slot or way out of range. */
const char *gc_mm_way_name(int slot, int way, int brief);
/* Milliseconds taken by `reps` calls of fn(arg) on stream s (events). */
int gc_mm_time(gc_mm_t *mm, cudaStream_t s, int reps, int (*fn)(void *), void *arg, float *ms);

#endif /* GPT_CUDA_MATMUL_CUH */
