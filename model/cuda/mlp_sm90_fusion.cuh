/* mlp_sm90_fusion.cuh - CUTLASS's GELU' epilogue with the bias gradient
 * added (fp32 atomics) instead of written: the operation of mlp_sm90.cu,
 * shared with lab/cuda/mlp_cutlass.cu. Include after CUTLASS's epilogue
 * headers (cutlass/epilogue/fusion/operations.hpp, collective_builder.hpp). */
#ifndef GPT_CUDA_MLP_SM90_FUSION_CUH
#define GPT_CUDA_MLP_SM90_FUSION_CUH

/* CUTLASS's LinCombDeEltActDePerRowBias writes the bias gradient (a final
 * reduction through a workspace that its initialization fills). The
 * trainer's micro-steps add theirs into what is there: this operation is
 * the same tree with the reduction's last step an fp32 atomicAdd. */
namespace gc_fusion {
template <class LayoutAux, template <class> class Act, class EO, class EC, class EAux, class EB>
struct DGeluDBiasAdd
    : cutlass::epilogue::fusion::LinCombDeEltActDePerRowBias<LayoutAux, Act, EO, EC, EAux, EB,
                                                             void, EC> {};
} // namespace gc_fusion

namespace cutlass::epilogue::fusion {
template <class CtaTile, class EpiTile, int StagesC, class LayoutAux, class SmemLayoutAtom,
          class CopyOpS2R, template <class> class Act, class EO, class EC, class EAux, class EB>
using GcDGeluDBiasAdd = Sm90EVT<
    Sm90Compute<cutlass::epilogue::thread::Identity, EO, EC, FloatRoundStyle::round_to_nearest>,
    Sm90EVT<Sm90ColReduction<plus, plus, atomic_add, 0, CtaTile, EB, EC,
                             FloatRoundStyle::round_to_nearest, Stride<_1, _0, int64_t>,
                             128 / sizeof_bits_v<EB>>,
            Sm90LinCombDeEltAct<CtaTile, EpiTile, StagesC,
                                cutlass::gemm::TagToStrideC_t<LayoutAux>, SmemLayoutAtom,
                                CopyOpS2R, Act, EC, EC, EAux, void, EC, 128 / sizeof_bits_v<EAux>,
                                FloatRoundStyle::round_to_nearest>>>;

template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore,
          class LayoutAux, template <class> class Act, class EO, class EC, class EAux, class EB,
          class CtaTile, class EpiTile, class SmemLayoutAtom, class CopyOpS2R>
struct FusionCallbacks<
    epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>,
    gc_fusion::DGeluDBiasAdd<LayoutAux, Act, EO, EC, EAux, EB>, CtaTile, EpiTile, SmemLayoutAtom,
    CopyOpS2R>
    : GcDGeluDBiasAdd<CtaTile, EpiTile, StagesC, LayoutAux, SmemLayoutAtom, CopyOpS2R, Act, EO, EC,
                      EAux, EB> {
  using Impl = GcDGeluDBiasAdd<CtaTile, EpiTile, StagesC, LayoutAux, SmemLayoutAtom, CopyOpS2R,
                               Act, EO, EC, EAux, EB>;
  using Operation = gc_fusion::DGeluDBiasAdd<LayoutAux, Act, EO, EC, EAux, EB>;

  struct Arguments {
    EC alpha = EC(1);
    EC beta = EC(0);
    using StrideAux = cutlass::gemm::TagToStrideC_t<LayoutAux>;
    EAux const *aux_ptr = nullptr;
    StrideAux dAux = {};
    EB *dbias_ptr = nullptr;

    /* the tree's arguments, leaf by leaf: ((beta, C, (alpha, acc)), aux,
     * activation), then the reduction, then the conversion */
    operator typename Impl::Arguments() const {
      using SA = Stride<_0, _0, int64_t>;
      return {{{{{{beta}, {nullptr}, {SA{_0{}, _0{}, 0}}},
                 {},
                 {{{alpha}, {nullptr}, {SA{_0{}, _0{}, 0}}}, {}, {}},
                 {}},
                {aux_ptr, EAux(0), dAux},
                {}},
               {dbias_ptr, EC(0), Stride<_1, _0, int64_t>{}}},
              {}};
    }
  };
  using Impl::Impl;
};
} // namespace cutlass::epilogue::fusion

#endif /* GPT_CUDA_MLP_SM90_FUSION_CUH */
