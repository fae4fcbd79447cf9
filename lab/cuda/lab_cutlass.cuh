/* lab_cutlass.cuh - what the CUTLASS programs (mlp_cutlass.cu,
 * fc_cutlass.cu) share: a configuration of a problem P set up once and run
 * many times, a CUTLASS GEMM's set-up (the SM count, its check of the
 * shape, its workspace), the kernel schedules' short names, the forward
 * programs' four kernels and a program's main. Include after CUTLASS's
 * headers and lab.cuh. */
#ifndef LAB_CUDA_LAB_CUTLASS_CUH
#define LAB_CUDA_LAB_CUTLASS_CUH

#include <stdio.h>

#include <vector>

#include "cutlass/version.h"
#include "lab_mlp.cuh"

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

/* The four kernels the forward's programs (fc_cutlass, fwd_cutlass) try:
 * R<Tile, Cluster, KSched, ESched> a runner of P for that kernel. */
template <class P, template <class, class, class, class> class R>
static std::vector<lab_runner<P> *> lab_forward_configs() {
  using cute::Shape;
  using T128 = Shape<cute::_128, cute::_128, cute::_64>;
  std::vector<lab_runner<P> *> v;
  auto add = [&](lab_runner<P> *r, const char *name) {
    r->name = name;
    v.push_back(r);
  };
  add(new R<T128, Shape<cute::_1, cute::_2, cute::_1>, Ping, PingE>(),
      "CUTLASS 128x128 1x2 pingpong");
  add(new R<T128, Shape<cute::_2, cute::_1, cute::_1>, Ping, PingE>(),
      "CUTLASS 128x128 2x1 pingpong");
  add(new R<Shape<cute::_128, cute::_256, cute::_64>, Shape<cute::_2, cute::_1, cute::_1>, Coop,
            CoopE>(),
      "CUTLASS 128x256 2x1 cooperative");
  add(new R<Shape<cute::_256, cute::_128, cute::_64>, Shape<cute::_1, cute::_2, cute::_1>, Coop,
            CoopE>(),
      "CUTLASS 256x128 1x2 cooperative");
  return v;
}

/* Each configuration of v on q, then deleted: poison() before it runs
 * (outputs set to NaN, so that what it does not write shows), check(name)
 * after its first run (against the reference), then its median of 15 timed
 * against the product's ref_ms. */
template <class P, typename Poison, typename Check>
static void lab_each_config(const std::vector<lab_runner<P> *> &v, const P &q, cudaStream_t s,
                            double gflop, float ref_ms, Poison poison, Check check) {
  for (lab_runner<P> *rn : v) {
    poison();
    if (rn->setup(q, s) || rn->run(s) != 0) {
      CK(cudaGetLastError());
      printf("%-40s did not run\n", rn->name);
      delete rn;
      continue;
    }
    CK(cudaStreamSynchronize(s));
    check(rn->name);
    const float t = lab_median_ms(s, 15, [&] { return rn->run(s); });
    printf("%-40s %7.1f us (%.0f TFLOPS); against the product's %+.1f us\n", rn->name, t * 1e3,
           gflop / (t * 1e-3) / 1e3, (t - ref_ms) * 1e3);
    delete rn;
  }
}

/* The cuBLASLt handle and workspace the programs time cuBLASLt with. */
static cublasLtHandle_t lab_lt;
static void *lab_ws;
static const size_t LAB_WS = 64u << 20;

/* A CUTLASS program's main: exit 77 off compute capability 9.0 (its
 * kernels are sm_90a's), then shape(M, C, stream) for each pair of the
 * command line or the defaults (lab_mlp_shapes); exit 1 after a mismatch. */
template <typename F> static int lab_cutlass_main(const char *prog, int argc, char **argv, F shape) {
  if (lab_cc() != 90) {
    printf("%s: the kernels are built for sm_90a; this GPU is not one\n", prog);
    return 77;
  }
  LT(cublasLtCreate(&lab_lt));
  CK(cudaMalloc(&lab_ws, LAB_WS));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  printf("cuBLASLt %zu, CUTLASS %d.%d.%d\n", cublasLtGetVersion(), CUTLASS_MAJOR, CUTLASS_MINOR,
         CUTLASS_PATCH);
  const int rc = lab_mlp_shapes(prog, argc, argv, true, [&](int M, int C) { shape(M, C, s); });
  if (rc)
    return rc;
  cudaFree(lab_ws);
  cublasLtDestroy(lab_lt);
  return g_failures ? 1 : 0;
}

#endif /* LAB_CUDA_LAB_CUTLASS_CUH */
