/* cpu_int.h - private to the CPU backend: the pool's per-thread scratch
 * that the matrix product packs its panels into. */
#ifndef CPU_INT_H
#define CPU_INT_H

#include "gpt_cpu.h"

/* Blocking of cpu_gemm: micro-tiles of GEMM_MR x GEMM_NR, blocks of B of
 * GEMM_KC x GEMM_NC, slices of A of at most GEMM_MC x GEMM_KC. */
enum {
  GEMM_MR = 6,
  GEMM_NR = 16,
  GEMM_MC = 72, /* a multiple of GEMM_MR */
  GEMM_NC = 1024, /* a multiple of GEMM_NR */
  GEMM_KC = 256,
  /* floats of scratch per thread: a packed block of A */
  CPU_SCRATCH_FLOATS = GEMM_MC * GEMM_KC,
  /* floats shared by the threads: a packed block of B */
  CPU_SHARED_FLOATS = GEMM_KC * GEMM_NC
};

/* Thread tid's scratch (CPU_SCRATCH_FLOATS floats, 64-byte aligned). */
float *cpu__pool_scratch(cpu_pool_t *p, int tid);
/* The scratch all threads share (CPU_SHARED_FLOATS floats). */
float *cpu__pool_shared(cpu_pool_t *p);

/* cpu_gemm on the calling thread alone (inside a task of thread tid),
 * blocks of B packed into bp (GEMM_KC x nc_max floats, nc_max a multiple
 * of GEMM_NR). Same arithmetic per element as cpu_gemm. */
void cpu__gemm_serial(cpu_pool_t *p, int tid, float *bp, int nc_max, int M,
                      int N, int K, const float *a, size_t a_rs, size_t a_cs,
                      const float *b, size_t b_rs, size_t b_cs, float *c,
                      size_t ldc);

/* A second per-thread scratch whose size the layers choose: grow it to at
 * least `floats` per thread (the calling thread, between loops). RET 0 or
 * -ENOMEM. */
int cpu__pool_reserve(cpu_pool_t *p, size_t floats);
float *cpu__pool_extra(cpu_pool_t *p, int tid);

/* The extra scratch the attention layers need for T positions. */
size_t cpu__attention_scratch(int T);

#endif
