/* fc_cutlass.cu - the MLP's first layer forward, pre = inp W^T + bias kept
 * and out = gelu(pre), in the epilogue of a CUTLASS 3 Hopper GEMM against
 * cuBLASLt's GELU_AUX_BIAS epilogue (issue #26: the profile of 2026-12-03
 * showed that epilogue at 176.9 us a call at gpt2-124m's shape, about 65 us
 * over cuBLASLt's plain product of the same size in the backward).
 *
 *   pre (M x 4C) = inp (M x C) W (4C x C)^T + bias (4C)
 *   out (M x 4C) = gelu(pre), GELU's tanh form (GPT-2's)
 *
 * In CUTLASS's (column-major) terms: D (4C x M) = A (4C x C, K-major: W as
 * stored) B (C x M, K-major: inp as stored), a per-row bias, D and the aux
 * output with leading dimension 4C: LinCombPerRowBiasEltActAux with
 * GELU_taylor.
 *
 * Rivals: cuBLASLt's GELU_AUX_BIAS (the product's), cuBLASLt's BIAS product
 * then the product's gelu_fwd_kernel (gc_gelu_fwd), and CUTLASS's kernel in
 * three tile shapes. Every rival is checked against cuBLASLt's epilogue
 * (pre and out), then timed (median of 15). Exit 1 on a mismatch, 2 on bad
 * arguments, 77 without a GPU of compute capability 9.0.
 *
 * usage: fc_cutlass [M C ...]   default: 16384 768  16384 1024  8192 1280 */
#include <cublasLt.h>

#include <string.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/version.h"

#include "kernels.cuh"
#include "lab.cuh"
#include "lab_cutlass.cuh"
#include "lab_mlp.cuh"
#include "sm90_gemm.cuh"

typedef __nv_bfloat16 bf;
using namespace cute;

/* ---- the CUTLASS kernels ------------------------------------------------ */

using EA = cutlass::bfloat16_t;
using LA = cutlass::layout::RowMajor;    /* W as stored: C (K) contiguous */
using LB = cutlass::layout::ColumnMajor; /* inp as stored: C (K) contiguous */
using LD = cutlass::layout::ColumnMajor; /* out, pre as stored: 4C contiguous */
using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltActAux<
    LD, cutlass::epilogue::thread::GELU_taylor, EA, float, EA, EA, EA, float>;

template <class Tile, class Cluster, class KSched, class ESched>
using gemm_cfg = gc_sm90_gemm<LA, LB, LD, Tile, Cluster, Fusion, KSched, ESched>;

/* The problem in row-major terms: inp M x K, W Nout x K, bias Nout; out and
 * pre M x Nout. */
struct prob {
  int M, K, Nout;
  const bf *inp, *W, *bias;
  bf *out, *pre;
};

using runner = lab_runner<prob>;

template <class Cfg> struct cutlass_runner : runner {
  lab_gemm<typename Cfg::Gemm> g;
  int setup(const prob &q, cudaStream_t s) override {
    using K = typename Cfg::Kernel;
    typename K::StrideA sa = make_stride((int64_t)q.K, Int<1>{}, (int64_t)q.K * q.Nout);
    typename K::StrideB sb = make_stride((int64_t)q.K, Int<1>{}, (int64_t)q.K * q.M);
    typename K::StrideD sd = make_stride(Int<1>{}, (int64_t)q.Nout, (int64_t)q.Nout * q.M);
    typename Cfg::Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                       {q.Nout, q.M, q.K, 1},
                                       {(const EA *)q.W, sa, (const EA *)q.inp, sb},
                                       {{}, nullptr, sd, (EA *)q.out, sd}};
    args.epilogue.thread.bias_ptr = (const EA *)q.bias;
    args.epilogue.thread.aux_ptr = (EA *)q.pre;
    args.epilogue.thread.dAux = sd;
    return g.init(name, args, s);
  }
  int run(cudaStream_t s) override { return g.run(s); }
};

template <class Tile, class Cluster, class KS, class ES>
using runner_of = cutlass_runner<gemm_cfg<Tile, Cluster, KS, ES>>;
static std::vector<runner *> configurations() { return lab_forward_configs<prob, runner_of>(); }

/* ---- cuBLASLt's ways ------------------------------------------------------ */

/* The product's call (linear_fwd_gelu): D (Nout x M) = W^T inp with
 * GELU_AUX_BIAS, or with BIAS into pre; the heuristic's candidates timed
 * (median of 9), the fastest kept. RET its time in ms; the outputs hold
 * its result. */
static float lt_best(const prob &q, bool gelu, cudaStream_t s, int *nalgo) {
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T)));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N)));
  cublasLtEpilogue_t epi = gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &q.bias,
                                    sizeof(q.bias)));
  bf *D = gelu ? q.out : q.pre;
  if (gelu) {
    int64_t ld = q.Nout;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &q.pre,
                                      sizeof(q.pre)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                      sizeof(ld)));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, q.K, q.Nout, q.K));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, q.K, q.M, q.K));
  LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, q.Nout, q.M, q.Nout));
  return lab_lt_fastest(lab_lt, desc, la, lb, ld, q.W, q.inp, D, lab_ws, LAB_WS, s, nalgo);
}

/* ---- one shape ------------------------------------------------------------ */

static void shape(int M, int C, cudaStream_t s) {
  const int N4 = 4 * C;
  const size_t nout = (size_t)M * N4;
  rng r(11 + C);
  bf *W = upload<bf>(r.normals((size_t)N4 * C, 0.02));
  bf *inp = upload<bf>(r.normals((size_t)M * C, 1.0));
  bf *bias = upload<bf>(r.normals((size_t)N4, 0.1));
  bf *out, *pre;
  CK(cudaMalloc(&out, nout * sizeof(bf)));
  CK(cudaMalloc(&pre, nout * sizeof(bf)));
  const double gflop = 2.0 * M * C * (double)N4 / 1e9;
  printf("== pre = inp W^T + bias, out = gelu(pre): M %d, C %d (%.1f GFLOP)\n", M, C, gflop);
  const prob q = {M, C, N4, inp, W, bias, out, pre};

  int n = 0;
  const float tb = lt_best(q, false, s, &n);
  const float tk = lab_median_ms(s, 15, [&] { return gc_gelu_fwd<bf>(out, pre, nout, s); });
  printf("%-40s %7.1f us (%.0f TFLOPS), %d candidates; + gelu_fwd_kernel %.1f = %.1f us\n",
         "cuBLASLt BIAS, then the kernel", tb * 1e3, gflop / (tb * 1e-3) / 1e3, n, tk * 1e3,
         (tb + tk) * 1e3);
  const float tg = lt_best(q, true, s, &n);
  std::vector<double> ref_out = download(out, nout), ref_pre = download(pre, nout);
  printf("%-40s %7.1f us (%.0f TFLOPS), %d candidates\n", "cuBLASLt GELU_AUX_BIAS (the product's)",
         tg * 1e3, gflop / (tg * 1e-3) / 1e3, n);

  lab_each_config(
      configurations(), q, s, gflop, tg,
      [&] {
        CK(cudaMemset(out, 0xff, nout * sizeof(bf)));
        CK(cudaMemset(pre, 0xff, nout * sizeof(bf)));
      },
      [&](const char *name) {
        char what[96];
        snprintf(what, sizeof(what), "  %s: pre against cuBLASLt's", name);
        check(what, download(pre, nout), ref_pre, 1e-2);
        snprintf(what, sizeof(what), "  %s: out against cuBLASLt's", name);
        check(what, download(out, nout), ref_out, 1e-2);
      });
  cudaFree(W), cudaFree(inp), cudaFree(bias), cudaFree(out), cudaFree(pre);
}

int main(int argc, char **argv) {
  return lab_cutlass_main("fc_cutlass", argc, argv,
                          [](int M, int C, cudaStream_t s) { shape(M, C, s); });
}
