/* green.cuh - the GPU's SMs split in two green contexts (CUDA 12.4+):
 * one for the forward, one for AdamW beside it. A Hopper GEMM's CTA holds
 * a whole SM's registers, so a kernel on another stream only runs in the
 * gaps between the forward's products (docs/benchmarks/2026-12-03-idle.md);
 * on SMs of its own the update runs beside them. An experiment
 * (GPT_CUDA_UPDATE_SMS, gpt_cuda.cu), not the default. Internal to
 * model/cuda/. No CUDA driver library is linked: the driver's green-context
 * calls come through the runtime's driver entry point. */
#ifndef GPT_CUDA_GREEN_CUH
#define GPT_CUDA_GREEN_CUH

#include <stddef.h>

#include <cuda_runtime.h>

typedef struct gc_green_s {
  void *ctx[2];          /* CUgreenCtx: [0] the forward's, [1] the update's */
  cudaStream_t st[2];    /* a non-blocking stream in each */
  int sms[2];            /* their SM counts */
} gc_green_t;

/* Splits device `device`'s SMs: at least `small` for the update (rounded
 * up to the partition granularity the driver reports), the rest for the
 * forward. RET 0, or a negative errno with why[n] saying what failed
 * (an old driver, no green contexts, too few SMs); *g is then empty. */
int gc_green_create(gc_green_t *g, int device, int small, char *why, size_t n);
/* Destroys the streams and contexts; an empty *g is fine. */
void gc_green_destroy(gc_green_t *g);

#endif /* GPT_CUDA_GREEN_CUH */
