/* ptx.cuh - the small PTX pieces both attention files use (attention.cu's
 * mma.sync kernels, attention_sm90.cu's wgmma ones): shared-memory
 * addresses, cp.async, and two floats packed as one 16-bit pair. Internal to
 * model/cuda/. */
#ifndef GPT_CUDA_PTX_CUH
#define GPT_CUDA_PTX_CUH

#include "common.cuh"

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes global -> shared, bypassing L1; s is a shared-window address */
__device__ __forceinline__ void cp_async16(uint32_t s, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  cp_async16(smem_u32(smem), gmem);
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<bf16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<f16>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

#endif /* GPT_CUDA_PTX_CUH */
