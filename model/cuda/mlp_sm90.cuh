/* mlp_sm90.cuh - the MLP's CUTLASS Hopper GEMMs: the input gradient with
 * GELU' and the bias gradient (mlp_sm90.cu), the forward with the bias, GELU
 * and the kept pre-activation (fc_sm90.cu). */
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
/* The current GPU's compute capability as 10 * major + minor (asked once;
 * 0 where it cannot be had): these kernels run on 90 only. */
int gc_sm90_cc(void);
int gc_dgelu_sm90(__nv_bfloat16 *dinp, float *bgrad32, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *w, const __nv_bfloat16 *pre, int M, int K, int Nout,
                  int sm_count, cudaStream_t s);
/* The MLP's first layer forward (fc_sm90.cu): pre (M x Nout, row-major) =
 * inp (M x K) W (Nout x K)^T + bias, out = gelu(pre). bf16 only, compute
 * capability 9.0; RET as gc_dgelu_sm90. */
int gc_gelu_sm90(__nv_bfloat16 *out, __nv_bfloat16 *pre, const __nv_bfloat16 *inp,
                 const __nv_bfloat16 *w, const __nv_bfloat16 *bias, int M, int K, int Nout,
                 int sm_count, cudaStream_t s);
#endif

#endif /* GPT_CUDA_MLP_SM90_CUH */
