/* mlp_sm90.cu - the MLP's input gradient with GELU' and the first layer's
 * bias gradient in one Hopper GEMM (CUTLASS 3: TMA, warp-specialized
 * "pingpong" wgmma, 128 x 128 x 64 tiles, clusters of 1 x 2):
 *
 *   dinp (M x K) = (dout (M x Nout) W (Nout x K)) * gelu'(pre (M x K))
 *   bgrad32 (K) += the column sums of dinp over the M rows
 *
 * cuBLASLt's DGELU epilogue runs on an older kernel, and its column sum is
 * a second pass over dinp (colsum_kernel); here the sums are reduced in the
 * epilogue, in fp32 before dinp's rounding, and added with one atomic per
 * column and tile. On the H200 (lab/cuda/mlp_cutlass.cu, 2026-12-03): 170.8
 * against 190.5 us a call at gpt2-124m's shape, 234.3 against 265.0 at
 * 350m's, 175.5 against 204.8 at 774m's (docs/benchmarks/2026-12-03-cutlass.md).
 *
 * Built for sm_90a where CUTLASS's headers are found (scripts/cutlass.sh;
 * model/cuda/CMakeLists.txt defines GPT_CUDA_CUTLASS); linear.cuh times it
 * against cuBLASLt's way at the first call and keeps the faster. No CUDA
 * driver library is linked: the TMA descriptors come through the runtime's
 * driver entry point, and nothing here calls CUTLASS's workspace fills. */
#include <errno.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include "common.cuh"
#include "mlp_sm90.cuh"
#include "mlp_sm90_fusion.cuh"
#include "sm90_gemm.cuh"

using namespace cute;

namespace gc_mlp90 { /* named: nvcc's stub cannot tell two anonymous ones apart */
using EA = cutlass::bfloat16_t;
/* In CUTLASS's (column-major) terms the product is D (K x M) = A (K x Nout)
 * B (Nout x M): W as stored (K contiguous), dout as stored (Nout, the
 * reduction, contiguous), dinp as stored (K contiguous). */
using LA = cutlass::layout::ColumnMajor;
using LB = cutlass::layout::ColumnMajor;
using LD = cutlass::layout::ColumnMajor;
using Tile = Shape<_128, _128, _64>;
using Cluster = Shape<_1, _2, _1>;
using Fusion = gc_fusion::DGeluDBiasAdd<LD, cutlass::epilogue::thread::dGELU, EA, float, EA, float>;
using Cfg = gc_sm90_gemm<LA, LB, LD, Tile, Cluster, Fusion,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::epilogue::TmaWarpSpecialized>;
using Kernel = Cfg::Kernel;
using Gemm = Cfg::Gemm;
} // namespace gc_mlp90
using namespace gc_mlp90;

int gc_sm90_cc(void) {
  static int cc = -1;
  if (cc < 0) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    cc = major * 10 + minor;
  }
  return cc;
}

int gc_dgelu_sm90(__nv_bfloat16 *dinp, float *bgrad32, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *w, const __nv_bfloat16 *pre, int M, int K, int Nout,
                  int sm_count, cudaStream_t s) {
  if (M <= 0 || !gc_sm90_serves({dinp, dout, w, pre, bgrad32}, {K, Nout}))
    return -ENOTSUP;
  Kernel::StrideA sa = make_stride(Int<1>{}, (int64_t)K, (int64_t)K * Nout);
  Kernel::StrideB sb = make_stride((int64_t)Nout, Int<1>{}, (int64_t)Nout * M);
  Kernel::StrideD sd = make_stride(Int<1>{}, (int64_t)K, (int64_t)K * M);
  Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                       {K, M, Nout, 1},
                       {(const EA *)w, sa, (const EA *)dout, sb},
                       {{}, nullptr, sd, (EA *)dinp, sd}};
  args.epilogue.thread.aux_ptr = (const EA *)pre;
  args.epilogue.thread.dAux = sd;
  args.epilogue.thread.dbias_ptr = bgrad32;
  args.hw_info.sm_count = sm_count;
  return gc_sm90_run<Gemm>(args, s, "gc_dgelu_sm90");
}
