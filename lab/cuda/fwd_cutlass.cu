/* fwd_cutlass.cu - the forward's plain products, out = inp W^T + bias
 * (+ resid), in CUTLASS 3 Hopper GEMMs against cuBLASLt's BIAS epilogue
 * (the product's, linear_fwd: the residual rides on beta). Issue #26: the
 * profile of 2026-12-03 showed these nvjet kernels at ~585 TFLOPS where
 * the backward's plain products of like size run at ~690.
 *
 * The three of a GPT-2 layer: qkv (Nout 3C, K C), attproj (Nout C, K C,
 * + the residual), fcproj (Nout C, K 4C, + the residual). In CUTLASS's
 * terms D (Nout x M) = W (Nout x K, K-major) inp (K x M, K-major) + a
 * per-row bias + beta C (C = the residual, as stored).
 *
 * Every CUTLASS kernel is checked against cuBLASLt's output, then timed
 * (median of 15). Exit 1 on a mismatch, 2 on bad arguments, 77 without a
 * GPU of compute capability 9.0.
 *
 * usage: fwd_cutlass [M C ...]   default: 16384 768  16384 1024  8192 1280 */
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

using EA = cutlass::bfloat16_t;
using LA = cutlass::layout::RowMajor;    /* W as stored */
using LB = cutlass::layout::ColumnMajor; /* inp as stored */
using LD = cutlass::layout::ColumnMajor; /* out, resid as stored */
using Fusion = cutlass::epilogue::fusion::LinCombPerRowBias<EA, float, EA, EA, float>;

template <class Tile, class Cluster, class KSched, class ESched>
using gemm_cfg = gc_sm90_gemm<LA, LB, LD, Tile, Cluster, Fusion, KSched, ESched, EA>;

/* row-major: inp M x K, W Nout x K, bias Nout, resid and out M x Nout */
struct prob {
  int M, K, Nout;
  const bf *inp, *W, *bias, *resid;
  bf *out;
};
using runner = lab_runner<prob>;

template <class Cfg> struct cutlass_runner : runner {
  lab_gemm<typename Cfg::Gemm> g;
  int setup(const prob &q, cudaStream_t s) override {
    using K = typename Cfg::Kernel;
    typename K::StrideA sa = make_stride((int64_t)q.K, Int<1>{}, (int64_t)q.K * q.Nout);
    typename K::StrideB sb = make_stride((int64_t)q.K, Int<1>{}, (int64_t)q.K * q.M);
    typename K::StrideC sc = make_stride(Int<1>{}, (int64_t)q.Nout, (int64_t)q.Nout * q.M);
    typename K::StrideD sd = make_stride(Int<1>{}, (int64_t)q.Nout, (int64_t)q.Nout * q.M);
    typename Cfg::Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                       {q.Nout, q.M, q.K, 1},
                                       {(const EA *)q.W, sa, (const EA *)q.inp, sb},
                                       {{}, (const EA *)q.resid, sc, (EA *)q.out, sd}};
    args.epilogue.thread.beta = q.resid ? 1.f : 0.f;
    args.epilogue.thread.bias_ptr = (const EA *)q.bias;
    return g.init(name, args, s);
  }
  int run(cudaStream_t s) override { return g.run(s); }
};

template <class Tile, class Cluster, class KS, class ES>
using runner_of = cutlass_runner<gemm_cfg<Tile, Cluster, KS, ES>>;
static std::vector<runner *> configurations() { return lab_forward_configs<prob, runner_of>(); }

/* The product's call (linear_fwd): D = W^T inp + bias (+ resid through
 * beta), the fastest of the heuristic's candidates; out holds its result. */
static float lt_best(const prob &q, cudaStream_t s, int *nalgo) {
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T)));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &q.bias,
                                    sizeof(q.bias)));
  cublasLtMatrixLayout_t la, lb, ld;
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, q.K, q.Nout, q.K));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, q.K, q.M, q.K));
  LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, q.Nout, q.M, q.Nout));
  return lab_lt_fastest(lab_lt, desc, la, lb, ld, q.W, q.inp, q.out, lab_ws, LAB_WS, s, nalgo, q.resid,
                        q.resid ? 1.f : 0.f);
}

static void one(const char *what, int M, int K, int Nout, bool resid, cudaStream_t s) {
  const size_t nout = (size_t)M * Nout;
  rng r(17 + K + Nout);
  bf *W = upload<bf>(r.normals((size_t)Nout * K, 0.02));
  bf *inp = upload<bf>(r.normals((size_t)M * K, 1.0));
  bf *bias = upload<bf>(r.normals((size_t)Nout, 0.1));
  bf *res = resid ? upload<bf>(r.normals(nout, 1.0)) : nullptr;
  bf *out;
  CK(cudaMalloc(&out, nout * sizeof(bf)));
  const double gflop = 2.0 * M * K * (double)Nout / 1e9;
  printf("== %s: M %d, K %d, Nout %d%s (%.1f GFLOP)\n", what, M, K, Nout,
         resid ? ", + residual" : "", gflop);
  prob q = {M, K, Nout, inp, W, bias, res, out};
  int n = 0;
  const float tl = lt_best(q, s, &n);
  std::vector<double> ref = download(out, nout);
  printf("%-40s %7.1f us (%.0f TFLOPS), %d candidates\n", "cuBLASLt BIAS (the product's)",
         tl * 1e3, gflop / (tl * 1e-3) / 1e3, n);
  lab_each_config(
      configurations(), q, s, gflop, tl,
      [&] { CK(cudaMemset(out, 0xff, nout * sizeof(bf))); },
      [&](const char *name) {
        char w[96];
        snprintf(w, sizeof(w), "  %s against cuBLASLt's", name);
        check(w, download(out, nout), ref, 1e-2);
      });
  cudaFree(W), cudaFree(inp), cudaFree(bias), cudaFree(out);
  if (res)
    cudaFree(res);
}

static void shape(int M, int C, cudaStream_t s) {
  one("qkv", M, C, 3 * C, false, s);
  one("attproj", M, C, C, true, s);
  one("fcproj", M, 4 * C, C, true, s);
}

int main(int argc, char **argv) {
  return lab_cutlass_main("fwd_cutlass", argc, argv,
                          [](int M, int C, cudaStream_t s) { shape(M, C, s); });
}
