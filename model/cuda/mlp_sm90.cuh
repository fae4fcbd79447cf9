/* mlp_sm90.cuh - the MLP's input gradient with GELU' and the bias gradient
 * in one CUTLASS Hopper GEMM (mlp_sm90.cu). */
#ifndef GPT_CUDA_MLP_SM90_CUH
#define GPT_CUDA_MLP_SM90_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

/* dinp (M x K, row-major) = (dout (M x Nout) W (Nout x K)) * gelu'(pre),
 * and bgrad32[k] += sum over rows of dinp[., k] (fp32 atomics). bf16 only,
 * compute capability 9.0. RET 0, -ENOTSUP where it does not serve the
 * shape (K or Nout not a multiple of 8, a pointer not 16-byte aligned) or
 * was not built (no CUTLASS headers, no sm_90a: then this returns
 * -ENOTSUP from linear.cuh's stub), another negative errno on failure. */
#ifdef GPT_CUDA_CUTLASS
int gc_dgelu_sm90(__nv_bfloat16 *dinp, float *bgrad32, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *w, const __nv_bfloat16 *pre, int M, int K, int Nout,
                  int sm_count, cudaStream_t s);
#endif

#endif /* GPT_CUDA_MLP_SM90_CUH */
