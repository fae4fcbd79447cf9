/* mlp_cutlass.cu - the MLP's input gradient with GELU' (and the first MLP
 * layer's bias gradient) in the epilogue of a CUTLASS 3 Hopper GEMM (TMA,
 * warp-specialized, wgmma), against cuBLASLt's DGELU epilogue and the column
 * sum (issue #26; lab/cuda/mlp_epilogues.cu measured the epilogue 45 us a
 * call slower than the plain product at gpt2-124m's shape, on an older xmma
 * kernel that no layout avoids). The product took the 128x128 pingpong
 * kernel with the bias added (model/cuda/mlp_sm90.cu; its epilogue's
 * operation, mlp_sm90_fusion.cuh, is included here too).
 *
 *   dinp (M x 4C) = (dout (M x C) W (C x 4C)) * gelu'(pre (M x 4C))
 *   dbias (4C)    = column sums of dinp over the M rows
 *
 * In CUTLASS's terms the product runs D (4C x M, column-major: dinp as
 * stored) = A (4C x C, column-major: W as stored) B (C x M, K-major: dout
 * as stored); the bias gradient is then a sum over each row of D, which
 * CUTLASS's LinCombDeEltActDePerRowBias epilogue computes (in fp32, before
 * D's rounding to bf16; a final reduction through a workspace).
 *
 * Every configuration is checked against cuBLASLt's DGELU (the product's
 * choice) and the product's column sums (gc_colsum), then timed (median of
 * 15). Exit 1 on a mismatch, 2 on bad arguments, 77 without a GPU.
 *
 * Built where CUTLASS's headers are found (scripts/cutlass.sh; lab/cuda/
 * CMakeLists.txt) for sm_90a.
 *
 * usage: mlp_cutlass [M C ...]   default: 16384 768  16384 1024  8192 1280 */
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
#include "mlp_sm90_fusion.cuh"
#include "sm90_gemm.cuh"

typedef __nv_bfloat16 bf;
using namespace cute;


/* ---- the CUTLASS kernels ------------------------------------------------ */

using EA = cutlass::bfloat16_t;
using LA = cutlass::layout::ColumnMajor; /* W as stored: 4C contiguous */
using LB = cutlass::layout::ColumnMajor; /* dout as stored: C (K) contiguous */
using LD = cutlass::layout::ColumnMajor; /* dinp as stored: 4C contiguous */

enum epi_kind { EPI_PLAIN, EPI_DGELU, EPI_DGELU_DBIAS, EPI_DGELU_DBIAS_ADD };

/* DePerRowBias as CUTLASS has it writes the bias gradient (a final
 * reduction through a workspace); the trainer's micro-steps add theirs into
 * what is there: the product's operation (mlp_sm90_fusion.cuh) is the same
 * tree with the reduction's last step an fp32 atomicAdd. */

template <epi_kind E> struct fusion_of;
template <> struct fusion_of<EPI_PLAIN> {
  using op = cutlass::epilogue::fusion::LinearCombination<EA, float, void, float>;
};
template <> struct fusion_of<EPI_DGELU> {
  using op = cutlass::epilogue::fusion::LinCombDeEltAct<LD, cutlass::epilogue::thread::dGELU, EA,
                                                        float, EA, void, float>;
};
template <> struct fusion_of<EPI_DGELU_DBIAS> {
  using op = cutlass::epilogue::fusion::LinCombDeEltActDePerRowBias<
      LD, cutlass::epilogue::thread::dGELU, EA, float, EA, float, void, float>;
};
template <> struct fusion_of<EPI_DGELU_DBIAS_ADD> {
  using op = gc_fusion::DGeluDBiasAdd<LD, cutlass::epilogue::thread::dGELU, EA, float, EA, float>;
};

template <class Tile, class Cluster, class KSched, class ESched, epi_kind E,
          class EpiTile = cutlass::epilogue::collective::EpilogueTileAuto>
using gemm_cfg = gc_sm90_gemm<LA, LB, LD, Tile, Cluster, typename fusion_of<E>::op, KSched, ESched,
                              void, EpiTile>;

/* The problem: D (m x n) = A (m x k) B (k x n), column-major, aux and D
 * with leading dimension m. */
struct prob {
  int m, n, k;
  const bf *A, *B, *aux;
  bf *D;
  float *dbias;
};

using runner = lab_runner<prob>;

template <class Cfg, epi_kind E> struct cutlass_runner : runner {
  lab_gemm<typename Cfg::Gemm> g;
  int setup(const prob &q, cudaStream_t s) override {
    using K = typename Cfg::Kernel;
    typename K::StrideA sa = make_stride(Int<1>{}, (int64_t)q.m, (int64_t)q.m * q.k);
    typename K::StrideB sb = make_stride((int64_t)q.k, Int<1>{}, (int64_t)q.k * q.n);
    typename K::StrideD sd = make_stride(Int<1>{}, (int64_t)q.m, (int64_t)q.m * q.n);
    typename Cfg::Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                       {q.m, q.n, q.k, 1},
                                       {(const EA *)q.A, sa, (const EA *)q.B, sb},
                                       {{}, nullptr, sd, (EA *)q.D, sd}};
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
    if constexpr (E != EPI_PLAIN) {
      args.epilogue.thread.aux_ptr = (const EA *)q.aux;
      args.epilogue.thread.dAux = sd;
    }
    if constexpr (E == EPI_DGELU_DBIAS || E == EPI_DGELU_DBIAS_ADD)
      args.epilogue.thread.dbias_ptr = q.dbias;
    return g.init(name, args, s);
  }
  int run(cudaStream_t s) override { return g.run(s); }
};

template <class Tile, class Cluster, class KS, class ES, epi_kind E,
          class EpiTile = cutlass::epilogue::collective::EpilogueTileAuto>
static runner *make_runner(const char *name) {
  auto *r = new cutlass_runner<gemm_cfg<Tile, Cluster, KS, ES, E, EpiTile>, E>();
  r->name = name;
  return r;
}

/* The configurations tried, named as the output prints them. */
static std::vector<runner *> configurations(epi_kind e) {
  std::vector<runner *> v;
#define CFG(TM, TN, CM, CN, KS, ES, E, NAME)                                            \
  v.push_back(make_runner<Shape<_##TM, _##TN, _64>, Shape<_##CM, _##CN, _1>, KS, ES, E>(NAME))
/* the same with the epilogue's subtile given (EM x EN; pingpong: EM 64) */
#define CFGE(TM, TN, CM, CN, KS, ES, E, EM, EN, NAME)                                   \
  v.push_back(make_runner<Shape<_##TM, _##TN, _64>, Shape<_##CM, _##CN, _1>, KS, ES, E, \
                          Shape<_##EM, _##EN>>(NAME))
  if (e == EPI_PLAIN) {
    CFG(128, 256, 2, 1, Coop, CoopE, EPI_PLAIN, "plain   128x256 2x1 cooperative");
    CFG(256, 128, 1, 2, Coop, CoopE, EPI_PLAIN, "plain   256x128 1x2 cooperative");
    CFG(128, 128, 1, 2, Ping, PingE, EPI_PLAIN, "plain   128x128 1x2 pingpong");
    CFGE(128, 128, 1, 2, Ping, PingE, EPI_PLAIN, 64, 64, "plain   128x128 1x2 pingpong epi 64x64");
  } else if (e == EPI_DGELU) {
    CFG(128, 256, 2, 1, Coop, CoopE, EPI_DGELU, "dgelu   128x256 2x1 cooperative");
    CFG(256, 128, 1, 2, Coop, CoopE, EPI_DGELU, "dgelu   256x128 1x2 cooperative");
    CFG(128, 128, 1, 2, Ping, PingE, EPI_DGELU, "dgelu   128x128 1x2 pingpong");
  } else if (e == EPI_DGELU_DBIAS) {
    CFG(128, 256, 2, 1, Coop, CoopE, EPI_DGELU_DBIAS, "dgelu+db 128x256 2x1 cooperative");
    CFG(256, 128, 1, 2, Coop, CoopE, EPI_DGELU_DBIAS, "dgelu+db 256x128 1x2 cooperative");
    CFG(128, 128, 1, 2, Ping, PingE, EPI_DGELU_DBIAS, "dgelu+db 128x128 1x2 pingpong");
  } else {
    CFG(128, 256, 2, 1, Coop, CoopE, EPI_DGELU_DBIAS_ADD, "dgelu+db+= 128x256 2x1 cooperative");
    CFG(256, 128, 1, 2, Coop, CoopE, EPI_DGELU_DBIAS_ADD, "dgelu+db+= 256x128 1x2 cooperative");
    CFG(128, 128, 1, 2, Ping, PingE, EPI_DGELU_DBIAS_ADD, "dgelu+db+= 128x128 1x2 pingpong");
    /* 2026-12-04: the product's kernel (the line above) with larger
     * epilogue subtiles (fewer steps a tile: its aux loads, stores and the
     * bias reduction's), and other clusters */
    CFGE(128, 128, 1, 2, Ping, PingE, EPI_DGELU_DBIAS_ADD, 64, 64,
         "dgelu+db+= 128x128 1x2 pingpong epi 64x64");
    CFGE(128, 128, 1, 2, Ping, PingE, EPI_DGELU_DBIAS_ADD, 64, 128,
         "dgelu+db+= 128x128 1x2 pingpong epi 64x128");
    CFG(128, 128, 2, 1, Ping, PingE, EPI_DGELU_DBIAS_ADD, "dgelu+db+= 128x128 2x1 pingpong");
    CFG(128, 128, 1, 1, Ping, PingE, EPI_DGELU_DBIAS_ADD, "dgelu+db+= 128x128 1x1 pingpong");
    CFGE(256, 128, 1, 2, Coop, CoopE, EPI_DGELU_DBIAS_ADD, 128, 64,
         "dgelu+db+= 256x128 1x2 cooperative epi 128x64");
  }
#undef CFGE
#undef CFG
  return v;
}

/* ---- cuBLASLt's way, the reference -------------------------------------- */

/* D = A B (NN, column-major), plain or with the DGELU epilogue; the
 * heuristic's candidates timed (median of 9), the fastest kept. RET its
 * time in ms; D holds its result. */
static float lt_best(const prob &q, bool dgelu, cudaStream_t s, int *nalgo) {
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtEpilogue_t epi = dgelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (dgelu) {
    int64_t ld = q.m;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &q.aux,
                                      sizeof(q.aux)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                      sizeof(ld)));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, q.m, q.k, q.m));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, q.k, q.n, q.k));
  LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, q.m, q.n, q.m));
  return lab_lt_fastest(lab_lt, desc, la, lb, ld, q.A, q.B, q.D, lab_ws, LAB_WS, s, nalgo);
}

/* ---- one shape ------------------------------------------------------------ */

static void shape(int M, int C, cudaStream_t s) {
  const int N4 = 4 * C;
  rng r(7 + C);
  bf *W = upload<bf>(r.normals((size_t)C * N4, 0.02));
  bf *dout = upload<bf>(r.normals((size_t)M * C, 1.0));
  bf *pre = upload<bf>(r.normals((size_t)M * N4, 1.0));
  bf *D;
  float *db, *dbref;
  CK(cudaMalloc(&D, (size_t)M * N4 * sizeof(bf)));
  CK(cudaMalloc(&db, (size_t)N4 * 4));
  CK(cudaMalloc(&dbref, (size_t)N4 * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double gflop = 2.0 * M * C * (double)N4 / 1e9;
  printf("== dinp = (dout W) gelu'(pre), dbias: M %d, C %d (%.1f GFLOP)\n", M, C, gflop);
  const prob q = {N4, M, C, W, dout, pre, D, db};

  int n = 0;
  const float tp = lt_best(q, false, s, &n);
  std::vector<double> ref_plain = download(D, (size_t)M * N4);
  printf("%-44s %7.1f us (%.0f TFLOPS), %d candidates\n", "cuBLASLt plain (product: no)", tp * 1e3,
         gflop / (tp * 1e-3) / 1e3, n);
  const float tg = lt_best(q, true, s, &n);
  std::vector<double> ref = download(D, (size_t)M * N4);
  CK(cudaMemset(dbref, 0, (size_t)N4 * 4));
  const float tc = lab_median_ms(s, 15, [&] { return gc_colsum<bf>(dbref, D, M, N4, sms, s); });
  CK(cudaMemset(dbref, 0, (size_t)N4 * 4));
  OK(gc_colsum<bf>(dbref, D, M, N4, sms, s));
  CK(cudaStreamSynchronize(s));
  std::vector<double> ref_db = download(dbref, N4);
  printf("%-44s %7.1f us (%.0f TFLOPS), %d candidates; + gc_colsum %.1f = %.1f us\n",
         "cuBLASLt DGELU (the product's)", tg * 1e3, gflop / (tg * 1e-3) / 1e3, n, tc * 1e3,
         (tg + tc) * 1e3);

  /* the accumulating variant adds onto a gradient already there: start it
   * at the reference, expect twice the reference */
  std::vector<double> twice(ref_db);
  for (double &x : twice)
    x *= 2;
  for (int e = EPI_PLAIN; e <= EPI_DGELU_DBIAS_ADD; e++) {
    for (runner *rn : configurations((epi_kind)e)) {
      CK(cudaMemset(D, 0, (size_t)M * N4 * sizeof(bf)));
      CK(cudaMemset(db, 0xff, (size_t)N4 * 4)); /* NaN: a bias not written shows */
      int bad = rn->setup(q, s);
      /* after setup: CUTLASS's initialization fills an atomic reduction's
       * output with zeros (the product, model/cuda/mlp_sm90.cu, skips it) */
      if (!bad && e == EPI_DGELU_DBIAS_ADD)
        CK(cudaMemcpyAsync(db, dbref, (size_t)N4 * 4, cudaMemcpyDeviceToDevice, s));
      if (bad || rn->run(s) != 0) {
        CK(cudaGetLastError());
        printf("%-44s did not run\n", rn->name);
        delete rn;
        continue;
      }
      CK(cudaStreamSynchronize(s));
      char what[96];
      snprintf(what, sizeof(what), "  %s against cuBLASLt's", rn->name);
      check(what, download(D, (size_t)M * N4), e == EPI_PLAIN ? ref_plain : ref, 1e-2);
      if (e >= EPI_DGELU_DBIAS) {
        snprintf(what, sizeof(what), "  %s dbias against gc_colsum's", rn->name);
        check(what, download(db, N4), e == EPI_DGELU_DBIAS ? ref_db : twice, 1e-2);
      }
      const float t = lab_median_ms(s, 15, [&] { return rn->run(s); });
      const float with = t + (e == EPI_DGELU ? tc : 0.f);
      printf("%-44s %7.1f us (%.0f TFLOPS)%s", rn->name, t * 1e3, gflop / (t * 1e-3) / 1e3,
             e == EPI_PLAIN ? "\n" : "");
      if (e != EPI_PLAIN)
        printf("; with the bias gradient %.1f us against the product's %.1f (%+.1f)\n",
               with * 1e3, (tg + tc) * 1e3, (with - tg - tc) * 1e3);
      delete rn;
    }
  }
  cudaFree(W), cudaFree(dout), cudaFree(pre), cudaFree(D), cudaFree(db), cudaFree(dbref);
}

int main(int argc, char **argv) {
  return lab_cutlass_main("mlp_cutlass", argc, argv,
                          [](int M, int C, cudaStream_t s) { shape(M, C, s); });
}
