/* cpu_int.h - private to the CPU backend: the pool's per-thread scratch
 * that the matrix product packs its panels into. */
#ifndef CPU_INT_H
#define CPU_INT_H

#include "gpt_cpu.h"

/* Blocking of cpu_gemm: micro-tiles of GEMM_MR x GEMM_NR, macro-tiles of
 * GEMM_MC x GEMM_NC, depth blocks of GEMM_KC. */
enum {
  GEMM_MR = 4,
  GEMM_NR = 16,
  GEMM_MC = 64,
  GEMM_NC = 64,
  GEMM_KC = 256,
  /* floats of scratch per thread: a packed A block and a packed B block */
  CPU_SCRATCH_FLOATS = GEMM_MC * GEMM_KC + GEMM_KC * GEMM_NC
};

/* Thread tid's scratch (CPU_SCRATCH_FLOATS floats, 64-byte aligned). */
float *cpu__pool_scratch(cpu_pool_t *p, int tid);

#endif
