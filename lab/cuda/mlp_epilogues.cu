/* mlp_epilogues.cu - cuBLASLt's backward epilogues for the layers whose
 * bias gradient or GELU' the product computes in kernels of its own
 * (issue #26). Each product is timed with every candidate of cuBLASLt's
 * heuristic (median of 9 runs; the best is printed).
 *
 * A. dinp = (dout W) * gelu'(pre), the MLP's input gradient: dout M x C,
 *    W the second MLP layer's weight (C x 4C, row-major), pre M x 4C. In
 *    cuBLASLt's column-major terms D (4C x M) = A (4C x C) B (C x M), "NN"
 *    as the product runs it, or "TN" from a transposed copy of W (which
 *    the product would have to keep after each update). Plain, with the
 *    DGELU epilogue (the product's choice), and DGELU_BGRAD (the bias
 *    gradient too). TN's results are checked against NN's.
 * B. A weight gradient dW (fp32, Nout x K) = dout^T inp, beta 0 and 1, for
 *    the MLP's first layer (Nout 4C) and the attention's qkv (3C), plain or
 *    with the bias gradient (dout's column sums) in a BGRADB epilogue,
 *    against the product's way: plain, then gc_colsum (timed alone). The
 *    epilogue's bias gradient is checked against gc_colsum's.
 *
 * Exit 1 when a rival's result differs from the product's way.
 *
 * usage: mlp_epilogues [M C ...]   default: 16384 768  16384 1024  8192 1280
 *        (gpt2-124m B16, 350m B16, 774m B8 at T 1024) */
#include <cublasLt.h>

#include <string.h>

#include "kernels.cuh"
#include "lab.cuh"
#include "lab_mlp.cuh"

typedef __nv_bfloat16 bf;


/* cuBLASLt called directly, not through the product's gc_mm: gc_mm keeps
 * its candidates' times to itself, and this program prints them. */
static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 64u << 20;

/* One product D = op(A) op(B) (+ beta D), cuBLASLt's column-major terms. */
struct prob {
  int ta, tb, m, n, k, lda, ldb;
  cudaDataType_t cd;            /* D's type: bf16 or fp32 */
  cublasLtEpilogue_t epi;
  const void *A, *B, *aux;      /* aux: GELU's input for DGELU (ld m) */
  void *D, *bias;               /* bias: the fp32 bias gradient (BGRAD*) */
  float beta;
};

struct plan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulHeuristicResult_t res[32];
  int n;
};

static void make(plan &p, const prob &q) {
  LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = q.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = q.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &q.epi,
                                    sizeof(q.epi)));
  if (q.aux) {
    int64_t ld = q.m;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                      &q.aux, sizeof(q.aux)));
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                      sizeof(ld)));
  }
  if (q.bias) {
    cudaDataType_t bt = CUDA_R_32F;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                      sizeof(bt)));
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &q.bias,
                                      sizeof(q.bias)));
  }
  LT(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, q.ta ? q.k : q.m, q.ta ? q.m : q.k, q.lda));
  LT(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, q.tb ? q.n : q.k, q.tb ? q.k : q.n, q.ldb));
  LT(cublasLtMatrixLayoutCreate(&p.ld, q.cd, q.m, q.n, q.m));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS,
                                          sizeof(WS)));
  p.n = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.la, p.lb, p.ld, p.ld, pref, 32, p.res, &p.n);
  if (st != CUBLAS_STATUS_SUCCESS)
    p.n = 0;
  cublasLtMatmulPreferenceDestroy(pref);
}

static void unmake(plan &p) {
  cublasLtMatmulDescDestroy(p.desc);
  cublasLtMatrixLayoutDestroy(p.la);
  cublasLtMatrixLayoutDestroy(p.lb);
  cublasLtMatrixLayoutDestroy(p.ld);
}

static int run(const plan &p, const prob &q, int i, cudaStream_t s) {
  const float one = 1.f;
  return cublasLtMatmul(lt, p.desc, &one, q.A, p.la, q.B, p.lb, &q.beta, q.D, p.ld, q.D, p.ld,
                        &p.res[i].algo, ws, WS, s) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
}

/* Every candidate of the heuristic timed (median of 9) and printed beside
 * the heuristic's first; the fastest run once more so that D (and the bias
 * gradient) hold its result. RET the best time in ms, 0 when none ran. */
static float best_of(const prob &q, const char *label, double gflop, cudaStream_t s) {
  plan p;
  make(p, q);
  if (p.n == 0) {
    printf("%-28s no algorithm\n", label);
    unmake(p);
    return 0.f;
  }
  float best = 1e30f, first = 0.f;
  int bi = -1;
  for (int i = 0; i < p.n; i++) {
    if (p.res[i].state != CUBLAS_STATUS_SUCCESS)
      continue;
    if (run(p, q, i, s) != 0) {
      CK(cudaGetLastError());
      continue;
    }
    float ms = lab_median_ms(s, 9, [&] { return run(p, q, i, s); });
    if (i == 0)
      first = ms;
    if (ms < best)
      best = ms, bi = i;
  }
  if (bi < 0) {
    printf("%-28s no candidate ran\n", label);
    unmake(p);
    return 0.f;
  }
  if (q.bias)
    CK(cudaMemsetAsync(q.bias, 0, (size_t)q.n * 4, s)); /* BGRADB's: one a column of D */
  OK(run(p, q, bi, s));
  CK(cudaStreamSynchronize(s));
  printf("%-28s %2d candidates, heuristic's first %7.1f us, best #%d %7.1f us (%.0f TFLOPS)\n",
         label, p.n, first * 1e3, bi, best * 1e3, gflop / (best * 1e-3) / 1e3);
  unmake(p);
  return best;
}

/* A: dinp (M x 4C) = dout (M x C) W (C x 4C), GELU' in the epilogue or
 * not, W as stored (NN) or from a transposed copy (TN). */
static void dinp_dgelu(int M, int C, cudaStream_t s) {
  const int N4 = 4 * C;
  rng r(7 + C);
  std::vector<float> w = r.normals((size_t)C * N4, 0.02), wt((size_t)N4 * C);
  for (int i = 0; i < C; i++)
    for (int j = 0; j < N4; j++)
      wt[(size_t)j * C + i] = w[(size_t)i * N4 + j];
  bf *W = upload<bf>(w), *Wt = upload<bf>(wt);
  bf *dout = upload<bf>(r.normals((size_t)M * C, 1.0));
  bf *pre = upload<bf>(r.normals((size_t)M * N4, 1.0));
  bf *D;
  float *bg;
  CK(cudaMalloc(&D, (size_t)M * N4 * sizeof(bf)));
  CK(cudaMalloc(&bg, (size_t)N4 * sizeof(float)));
  const double gflop = 2.0 * M * C * (double)N4 / 1e9;
  printf("== dinp = (dout W) gelu'(pre): M %d, C %d (%.1f GFLOP)\n", M, C, gflop);
  const struct {
    const char *name;
    cublasLtEpilogue_t epi;
  } epis[] = {{"plain", CUBLASLT_EPILOGUE_DEFAULT},
              {"DGELU", CUBLASLT_EPILOGUE_DGELU},
              {"DGELU_BGRAD", CUBLASLT_EPILOGUE_DGELU_BGRAD}};
  for (auto &e : epis) {
    std::vector<double> ref;
    for (int ta = 0; ta < 2; ta++) {
      prob q = {ta, 0, N4, M, C, ta ? C : N4, C, CUDA_R_16BF, e.epi, ta ? Wt : W, dout,
                e.epi == CUBLASLT_EPILOGUE_DEFAULT ? NULL : pre, D,
                e.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD ? bg : NULL, 0.f};
      char label[64];
      snprintf(label, sizeof(label), "%s %s", e.name, ta ? "TN" : "NN");
      if (best_of(q, label, gflop, s) == 0.f)
        continue;
      std::vector<double> out = download(D, (size_t)M * N4);
      if (ta == 0)
        ref = out;
      else if (!ref.empty())
        check("  TN's result against NN's", out, ref, 1e-2);
    }
  }
  cudaFree(W), cudaFree(Wt), cudaFree(dout), cudaFree(pre), cudaFree(D), cudaFree(bg);
}

/* B: a weight gradient dW (fp32, Nout x K) = dout^T inp (+ dW), with the
 * bias gradient (the column sums of dout) in a BGRADB epilogue or by the
 * product's column-sum kernel after it. */
static void dw_bgrad(int M, int K, int Nout, const char *what, cudaStream_t s) {
  rng r(11 + K + Nout);
  bf *inp = upload<bf>(r.normals((size_t)M * K, 1.0));
  bf *dout = upload<bf>(r.normals((size_t)M * Nout, 1.0));
  float *dw, *bg, *bref;
  CK(cudaMalloc(&dw, (size_t)Nout * K * 4));
  CK(cudaMalloc(&bg, (size_t)Nout * 4));
  CK(cudaMalloc(&bref, (size_t)Nout * 4));
  CK(cudaMemset(dw, 0, (size_t)Nout * K * 4));
  const double gflop = 2.0 * M * K * (double)Nout / 1e9;
  printf("== %s dW: M %d, K %d, Nout %d (%.1f GFLOP)\n", what, M, K, Nout, gflop);
  for (int acc = 0; acc < 2; acc++) {
    char label[64];
    prob q = {0, 1, K, Nout, M, K, Nout, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, inp, dout, NULL,
              dw, NULL, acc ? 1.f : 0.f};
    snprintf(label, sizeof(label), "plain, beta %d", acc);
    const float tp = best_of(q, label, gflop, s);
    q.epi = CUBLASLT_EPILOGUE_BGRADB, q.bias = bg;
    snprintf(label, sizeof(label), "BGRADB, beta %d", acc);
    const float tb = best_of(q, label, gflop, s);
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const float tc = lab_median_ms(s, 9, [&] {
      return gc_colsum<bf>(bref, dout, M, Nout, sms, s);
    });
    if (acc == 0 && tb > 0.f) {
      CK(cudaMemset(bref, 0, (size_t)Nout * 4));
      OK(gc_colsum<bf>(bref, dout, M, Nout, sms, s));
      CK(cudaStreamSynchronize(s));
      check("  BGRADB's bias gradient against gc_colsum's", download(bg, Nout),
            download(bref, Nout), 1e-4);
    }
    printf("%-28s %7.1f us; plain + colsum %7.1f us against BGRADB %7.1f us\n", "gc_colsum alone",
           tc * 1e3, (tp + tc) * 1e3, tb * 1e3);
  }
  cudaFree(inp), cudaFree(dout), cudaFree(dw), cudaFree(bg), cudaFree(bref);
}

static void shape(int M, int C, cudaStream_t s) {
  dinp_dgelu(M, C, s);
  dw_bgrad(M, C, 4 * C, "fc", s);
  dw_bgrad(M, C, 3 * C, "qkv", s);
}

int main(int argc, char **argv) {
  lab_cc();
  LT(cublasLtCreate(&lt));
  CK(cudaMalloc(&ws, WS));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  printf("cuBLASLt %zu\n", cublasLtGetVersion());
  const int rc = lab_mlp_shapes("mlp_epilogues", argc, argv, false, [&](int M, int C) { shape(M, C, s); });
  if (rc)
    return rc;
  cudaFree(ws);
  cublasLtDestroy(lt);
  return g_failures ? 1 : 0;
}
