/* fc_sm90.cu - the MLP's first layer forward in one Hopper GEMM (CUTLASS 3:
 * TMA, warp-specialized wgmma), the bias, GELU and the kept pre-activation
 * in its epilogue:
 *
 *   pre (M x Nout) = inp (M x K) W (Nout x K)^T + bias (Nout)
 *   out (M x Nout) = gelu(pre)          (GELU's tanh form, GPT-2's)
 *
 * GELU is taken of the fp32 sum, pre is stored rounded (as cuBLASLt's
 * GELU_AUX_BIAS epilogue does). cuBLASLt's epilogue with the aux output runs
 * far behind its plain product on the H200 (lab/cuda/fc_cutlass.cu,
 * docs/benchmarks/2026-12-03-fc-forward.md); linear.cuh times this kernel
 * against it and against the plain product + gelu_fwd_kernel at the first
 * call and keeps the fastest.
 *
 * Built for sm_90a where CUTLASS's headers are found, as mlp_sm90.cu. */
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include "common.cuh"
#include "sm90_gemm.cuh"

using namespace cute;

namespace gc_fc90 { /* named: nvcc's stub cannot tell two anonymous ones apart */
using EA = cutlass::bfloat16_t;
/* In CUTLASS's (column-major) terms: D (Nout x M) = A (Nout x K) B (K x M),
 * W and inp as stored (K contiguous in both: the "TN" layout wgmma reads
 * best), out and pre as stored (Nout contiguous), a bias per row of D. */
using LA = cutlass::layout::RowMajor;
using LB = cutlass::layout::ColumnMajor;
using LD = cutlass::layout::ColumnMajor;
using Tile = Shape<_128, _128, _64>;
using Cluster = Shape<_1, _2, _1>;
using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltActAux<
    LD, cutlass::epilogue::thread::GELU_taylor, EA, float, EA, EA, EA, float>;
using Cfg = gc_sm90_gemm<LA, LB, LD, Tile, Cluster, Fusion,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::epilogue::TmaWarpSpecialized>;
using Kernel = Cfg::Kernel;
using Gemm = Cfg::Gemm;
} // namespace gc_fc90
using namespace gc_fc90;

int gc_gelu_sm90(__nv_bfloat16 *out, __nv_bfloat16 *pre, const __nv_bfloat16 *inp,
                 const __nv_bfloat16 *w, const __nv_bfloat16 *bias, int M, int K, int Nout,
                 int sm_count, cudaStream_t s) {
  if (M <= 0 || !gc_sm90_serves({out, pre, inp, w, bias}, {K, Nout}))
    return -ENOTSUP;
  Kernel::StrideA sa = make_stride((int64_t)K, Int<1>{}, (int64_t)K * Nout);
  Kernel::StrideB sb = make_stride((int64_t)K, Int<1>{}, (int64_t)K * M);
  Kernel::StrideD sd = make_stride(Int<1>{}, (int64_t)Nout, (int64_t)Nout * M);
  Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                       {Nout, M, K, 1},
                       {(const EA *)w, sa, (const EA *)inp, sb},
                       {{}, nullptr, sd, (EA *)out, sd}};
  args.epilogue.thread.bias_ptr = (const EA *)bias;
  args.epilogue.thread.aux_ptr = (EA *)pre;
  args.epilogue.thread.dAux = sd;
  args.hw_info.sm_count = sm_count;
  return gc_sm90_run<Gemm>(args, s, "gc_gelu_sm90");
}
