/* sm90_gemm.cuh - how mlp_sm90.cu and fc_sm90.cu launch their CUTLASS 3
 * Hopper GEMMs: only where they serve (compute capability 9.0, 16-byte
 * aligned operands, no workspace), the kernel's parameters made straight
 * from the arguments. Include after CUTLASS's headers (cute/tensor.hpp,
 * cutlass.h, the epilogue's and the mainloop's collective_builder.hpp,
 * gemm_universal_adapter.h, gemm_universal.hpp) and common.cuh. */
#ifndef GPT_CUDA_SM90_GEMM_CUH
#define GPT_CUDA_SM90_GEMM_CUH

#include <errno.h>
#include <stdint.h>

#include <initializer_list>

#include "mlp_sm90.cuh"

/* A CUTLASS 3 Hopper GEMM of bf16 operands (alignment 8), fp32
 * accumulation and epilogue, D of layout LD and a C operand of type EC
 * (void: none) and D's layout: CUTLASS's builders for the mainloop (its
 * stages from the shared memory the epilogue leaves) and the epilogue,
 * Fusion its operation, EpiTile the epilogue's subtile (CUTLASS's choice
 * unless given: 64 x 32 for pingpong, 128 x 32 for cooperative). */
template <class LA, class LB, class LD, class Tile, class Cluster, class Fusion, class KSched,
          class ESched, class EC = void,
          class EpiTile = cutlass::epilogue::collective::EpilogueTileAuto>
struct gc_sm90_gemm {
  using E = cutlass::bfloat16_t;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, EpiTile, float, float,
      EC, LD, 8, E, LD, 8, ESched, Fusion>::CollectiveOp;
  using Main = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, LA, 8, E, LB, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epi::SharedStorage))>,
      KSched>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

/* Whether a kernel built for sm_90a serves these operands: the current GPU
 * is of compute capability 9.0, and every pointer and row length is
 * 16-byte aligned (TMA). */
static inline bool gc_sm90_serves(std::initializer_list<const void *> ptrs,
                                  std::initializer_list<long> rows) {
  for (const void *p : ptrs)
    if ((uintptr_t)p % 16)
      return false;
  for (long r : rows)
    if (r <= 0 || r % 8)
      return false;
  return gc_sm90_cc() == 90;
}

/* Runs Gemm on s. RET 0; -ENOTSUP where CUTLASS cannot implement the
 * arguments or would need a workspace; -EIO when the launch fails. The
 * parameters come straight from the arguments: Gemm::initialize would
 * also run the epilogue's workspace steps (for mlp_sm90.cu's atomic bias
 * reduction, fill the gradient it adds to with zeros). */
template <class Gemm>
static int gc_sm90_run(const typename Gemm::Arguments &args, cudaStream_t s, const char *name) {
  using Kernel = typename Gemm::GemmKernel;
  static int smem_set = 0; /* one per kernel */
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess ||
      Gemm::get_workspace_size(args) != 0)
    return -ENOTSUP;
  if (!smem_set) {
    GC_CUDA(cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 Kernel::SharedStorageSize));
    smem_set = 1;
  }
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  if (Gemm::run(params, s) != cutlass::Status::kSuccess)
    return gc_fail(-EIO, name, "the CUTLASS kernel did not launch", __FILE__, __LINE__);
  GC_LAUNCH(name);
  return 0;
}

#endif /* GPT_CUDA_SM90_GEMM_CUH */
