/* lab_cutlass.cuh - what the CUTLASS programs (mlp_cutlass.cu,
 * fc_cutlass.cu) share: a configuration of a problem P set up once and run
 * many times, a CUTLASS GEMM's set-up (the SM count, its check of the
 * shape, its workspace), and the kernel schedules' short names. Include
 * after CUTLASS's headers and lab.cuh. */
#ifndef LAB_CUDA_LAB_CUTLASS_CUH
#define LAB_CUDA_LAB_CUTLASS_CUH

#include <stdio.h>

template <class P> struct lab_runner {
  const char *name;
  virtual ~lab_runner() {}
  virtual int setup(const P &q, cudaStream_t s) = 0;
  virtual int run(cudaStream_t s) = 0;
};

/* One CUTLASS GEMM with its workspace. init: 0, or 1 after a message
 * naming it when CUTLASS cannot serve the arguments. */
template <class Gemm> struct lab_gemm {
  Gemm gemm;
  void *work = nullptr;
  int init(const char *name, typename Gemm::Arguments &args, cudaStream_t s) {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    args.hw_info.sm_count = p.multiProcessorCount;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
      printf("%-44s cannot implement this shape\n", name);
      return 1;
    }
    const size_t ws = Gemm::get_workspace_size(args);
    if (ws)
      CK(cudaMalloc(&work, ws));
    if (gemm.initialize(args, work, s) != cutlass::Status::kSuccess) {
      printf("%-44s initialize failed\n", name);
      return 1;
    }
    return 0;
  }
  int run(cudaStream_t s) { return gemm.run(s) == cutlass::Status::kSuccess ? 0 : 1; }
  ~lab_gemm() {
    if (work)
      cudaFree(work);
  }
};

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopE = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingE = cutlass::epilogue::TmaWarpSpecialized;

#endif /* LAB_CUDA_LAB_CUTLASS_CUH */
