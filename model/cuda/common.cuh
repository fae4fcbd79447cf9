/* common.cuh - what every file of the CUDA backend shares: the element types
 * (fp32, bf16, fp16) behind one template parameter, 16-byte vector loads and
 * stores, and the error checks that report a failed CUDA or cuBLAS call once
 * through rt_report_error (gpt.h). Internal to model/cuda/. */
#ifndef GPT_CUDA_COMMON_CUH
#define GPT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>

#include "gpt.h"

typedef __nv_bfloat16 bf16;
typedef __half f16;

/* ---- error reporting ------------------------------------------------------
 * gc_err_* report through rt_report_error once per process-visible failure:
 * after the first report, `gc_failed` is set and later failures (CUDA errors
 * are sticky after a fault) return -EIO silently, so the user sees the call
 * that failed first, not a cascade. */
extern int gc_failed;
int gc_cuda_fail(cudaError_t e, const char *call, const char *file, int line);
int gc_cublas_fail(int status, const char *call, const char *file, int line);
/* A failure of our own (bad argument, unsupported size): lib "gpt_cuda". */
int gc_fail(int rc, const char *what, const char *detail, const char *file,
            int line);
/* While a step is captured into a CUDA graph (graph.cuh), failures are
 * not reported and do not set gc_failed: gc_quiet is 1 and the first
 * failure is described in gc_quiet_what; the capture is given up and the
 * step runs eagerly, where a real failure is reported as usual. */
extern int gc_quiet;
extern char gc_quiet_what[256];

#define GC_CUDA(call)                                                         \
  do {                                                                        \
    cudaError_t gc_e_ = (call);                                               \
    if (gc_e_ != cudaSuccess)                                                 \
      return gc_cuda_fail(gc_e_, #call, __FILE__, __LINE__);                  \
  } while (0)
/* After a kernel launch: launch-configuration errors show here. */
#define GC_LAUNCH(name)                                                       \
  do {                                                                        \
    cudaError_t gc_e_ = cudaGetLastError();                                   \
    if (gc_e_ != cudaSuccess)                                                 \
      return gc_cuda_fail(gc_e_, name, __FILE__, __LINE__);                   \
  } while (0)
#define GC_TRY(...)                                                           \
  do {                                                                        \
    int gc_rc_ = (__VA_ARGS__);                                               \
    if (gc_rc_ < 0)                                                           \
      return gc_rc_;                                                          \
  } while (0)

/* ---- element types --------------------------------------------------------*/
template <typename T> struct gc_type;
template <> struct gc_type<float> {
  static constexpr cudaDataType_t cuda = CUDA_R_32F;
  static constexpr int dtype = GPT_FP32;
};
template <> struct gc_type<bf16> {
  static constexpr cudaDataType_t cuda = CUDA_R_16BF;
  static constexpr int dtype = GPT_BF16;
};
template <> struct gc_type<f16> {
  static constexpr cudaDataType_t cuda = CUDA_R_16F;
  static constexpr int dtype = GPT_FP16;
};

__device__ __forceinline__ float gc_tof(float x) { return x; }
__device__ __forceinline__ float gc_tof(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float gc_tof(f16 x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T gc_from(float x);
template <> __device__ __forceinline__ float gc_from<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 gc_from<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ f16 gc_from<f16>(float x) {
  return __float2half_rn(x);
}

/* Eight elements, loaded and stored as 16-byte vectors (two for fp32): rows
 * whose length is a multiple of 8 stay 16-byte aligned (the backend requires
 * channels % 8 == 0). */
template <typename T> struct alignas(16) gc_pack8 {
  T v[8];
};
template <typename T>
__device__ __forceinline__ gc_pack8<T> gc_load8(const T *p) {
  gc_pack8<T> r;
  const int4 *s = reinterpret_cast<const int4 *>(p);
  int4 *d = reinterpret_cast<int4 *>(&r);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(r) / 16); i++)
    d[i] = s[i];
  return r;
}
/* Streaming load: data read once (bypasses L1 allocation). */
template <typename T>
__device__ __forceinline__ gc_pack8<T> gc_load8_cs(const T *p) {
  gc_pack8<T> r;
  const int4 *s = reinterpret_cast<const int4 *>(p);
  int4 *d = reinterpret_cast<int4 *>(&r);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(r) / 16); i++)
    d[i] = __ldcs(s + i);
  return r;
}
template <typename T>
__device__ __forceinline__ void gc_store8(T *p, const gc_pack8<T> &x) {
  int4 *d = reinterpret_cast<int4 *>(p);
  const int4 *s = reinterpret_cast<const int4 *>(&x);
#pragma unroll
  for (int i = 0; i < (int)(sizeof(x) / 16); i++)
    d[i] = s[i];
}

__device__ __forceinline__ float gc_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float gc_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static inline int gc_cdiv(long a, long b) { return (int)((a + b - 1) / b); }

#endif /* GPT_CUDA_COMMON_CUH */
