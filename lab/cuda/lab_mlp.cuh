/* lab_mlp.cuh - what the MLP programs (mlp_epilogues.cu, mlp_cutlass.cu)
 * share: cuBLASLt's status check and their command line, pairs of M C
 * (tokens, channels), by default gpt2-124m B16, 350m B16 and 774m B8 at
 * T 1024. */
#ifndef LAB_CUDA_LAB_MLP_CUH
#define LAB_CUDA_LAB_MLP_CUH

#include <cublasLt.h>

#include <stdio.h>
#include <stdlib.h>

#define LT(call)                                                                           \
  do {                                                                                     \
    cublasStatus_t s_ = (call);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, (int)s_);       \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* D = A B (+ beta C: C laid out as D; D where none) as desc and the
 * layouts say, alpha 1, with each of the
 * heuristic's candidates (up to 16, a workspace of wsize bytes) timed
 * (median of 9); the fastest is run once more so that D (and an epilogue's
 * outputs) hold its result. Destroys desc and the layouts. RET its
 * milliseconds, 0 where none ran; *nalgo the candidates offered. Needs
 * lab.cuh. */
static float lab_lt_fastest(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                            cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                            cublasLtMatrixLayout_t ld, const void *A, const void *B, void *D,
                            void *ws, size_t wsize, cudaStream_t s, int *nalgo,
                            const void *C = nullptr, float beta = 0.f) {
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsize,
                                          sizeof(wsize)));
  cublasLtMatmulHeuristicResult_t res[16];
  int n = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 16, res, &n));
  const float one = 1.f;
  auto go = [&](int i) {
    return cublasLtMatmul(lt, desc, &one, A, la, B, lb, &beta, C ? C : D, ld, D, ld, &res[i].algo,
                          ws, wsize, s) == CUBLAS_STATUS_SUCCESS
               ? 0
               : 1;
  };
  float best = 1e30f;
  int bi = -1;
  for (int i = 0; i < n; i++) {
    if (go(i) != 0) {
      CK(cudaGetLastError());
      continue;
    }
    const float ms = lab_median_ms(s, 9, [&] { return go(i); });
    if (ms < best)
      best = ms, bi = i;
  }
  if (bi >= 0) {
    OK(go(bi));
    CK(cudaStreamSynchronize(s));
  }
  *nalgo = n;
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return bi >= 0 ? best : 0.f;
}

/* Runs shape(M, C) for each pair of the arguments, or for the three
 * defaults. RET 0, or 2 after a message when a pair is not positive with C
 * (and M, when m8) a multiple of 8. */
template <typename F>
static int lab_mlp_shapes(const char *prog, int argc, char **argv, bool m8, F shape) {
  if (argc < 3) {
    shape(16384, 768);
    shape(16384, 1024);
    shape(8192, 1280);
    return 0;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const int M = atoi(argv[i]), C = atoi(argv[i + 1]);
    if (M <= 0 || C <= 0 || C % 8 != 0 || (m8 && M % 8 != 0)) {
      fprintf(stderr, "%s: M %s, C %s: give positive M and C, C%s a multiple of 8\n", prog,
              argv[i], argv[i + 1], m8 ? " and M" : "");
      return 2;
    }
    shape(M, C);
  }
  return 0;
}

#endif /* LAB_CUDA_LAB_MLP_CUH */
