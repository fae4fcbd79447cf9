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
