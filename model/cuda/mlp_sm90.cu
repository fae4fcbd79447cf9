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
using Epi = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LD, 8, EA, LD, 8,
    cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
using Main = cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, EA, LA, 8, EA, LB, 8, float, Tile, Cluster,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epi::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
} // namespace gc_mlp90
using namespace gc_mlp90;

int gc_dgelu_sm90(__nv_bfloat16 *dinp, float *bgrad32, const __nv_bfloat16 *dout,
                  const __nv_bfloat16 *w, const __nv_bfloat16 *pre, int M, int K, int Nout,
                  int sm_count, cudaStream_t s) {
  /* TMA: 16-byte aligned rows and bases */
  if (M <= 0 || K % 8 || Nout % 8 || ((uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)w |
                                      (uintptr_t)pre | (uintptr_t)bgrad32) % 16)
    return -ENOTSUP;
  static int cc = -1, smem_set = 0;
  if (cc < 0) {
    int dev = 0, major = 0, minor = 0;
    GC_CUDA(cudaGetDevice(&dev));
    GC_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    GC_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cc = major * 10 + minor;
  }
  if (cc != 90) /* sm_90a code only */
    return -ENOTSUP;
  if (!smem_set) {
    GC_CUDA(cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 Kernel::SharedStorageSize));
    smem_set = 1;
  }
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
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess ||
      Gemm::get_workspace_size(args) != 0)
    return -ENOTSUP;
  /* the kernel's parameters straight from the arguments: Gemm::initialize
   * would also fill the bias gradient with zeros (the atomic reduction's
   * workspace step), and it is added to here */
  Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  if (Gemm::run(params, s) != cutlass::Status::kSuccess)
    return gc_fail(-EIO, "gc_dgelu_sm90", "the CUTLASS kernel did not launch", __FILE__, __LINE__);
  GC_LAUNCH("gc_dgelu_sm90");
  return 0;
}
