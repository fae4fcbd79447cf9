/* lab.cuh - what the lab programs share (README.md): tests/gpu/gpu_test.h's
 * random inputs, copies and relative-error check, and a timer. A lab
 * program compares kernels the product does not run with the one it does,
 * on the same inputs: first that they compute the same function, then the
 * median time of each. */
#ifndef LAB_CUDA_LAB_CUH
#define LAB_CUDA_LAB_CUH

#include <algorithm>
#include <vector>

#include "gpu_test.h"

/* The GPU's compute capability as 10 * major + minor; exit 77 without one. */
static inline int lab_cc(void) {
  gpu_or_skip();
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  return p.major * 10 + p.minor;
}

/* Median milliseconds of `runs` calls of fn() on stream s (after one
 * untimed call, which pays for first-use work). fn returns 0 or fails. */
template <typename F> static float lab_median_ms(cudaStream_t s, int runs, F fn) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  OK(fn());
  for (int i = 0; i < runs; i++) {
    float ms = 0;
    CK(cudaEventRecord(e0, s));
    OK(fn());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#endif /* LAB_CUDA_LAB_CUH */
