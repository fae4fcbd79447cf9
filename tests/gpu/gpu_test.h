/* gpu_test.h - what the GPU tests share: skipping cleanly (exit 77) where
 * there is no GPU, random inputs, host <-> device copies in any element
 * type, and the relative-error check ||out - ref|| / ||ref|| that prints
 * one line per comparison and counts failures. */
#ifndef GPU_TEST_H
#define GPU_TEST_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

static int g_failures = 0;

/* Exit 77 (ctest: skipped) where no GPU is usable: no /dev/nvidia* device
 * files (checked first, so that machines without a driver never load
 * CUDA), or the driver sees none. */
static inline void gpu_or_skip(void) {
  glob_t gl;
  int found = glob("/dev/nvidia[0-9]*", 0, NULL, &gl) == 0 && gl.gl_pathc > 0;
  globfree(&gl);
  int n = 0;
  if (!found || cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no GPU here\n");
    exit(77);
  }
}

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)
#define OK(expr)                                                                            \
  do {                                                                                      \
    int rc_ = (expr);                                                                       \
    if (rc_ != 0) {                                                                         \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, rc_);           \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

struct rng {
  unsigned long long s;
  explicit rng(unsigned long long seed) : s(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  unsigned long long next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u1 = uniform() + 1e-300, u2 = uniform();
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
  }
  std::vector<float> normals(size_t n, double std) {
    std::vector<float> v(n);
    for (auto &x : v)
      x = (float)(normal() * std);
    return v;
  }
};

template <typename T> static inline T to_t(float x);
template <> inline float to_t<float>(float x) { return x; }
template <> inline __nv_bfloat16 to_t<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> inline __half to_t<__half>(float x) { return __float2half(x); }
static inline float from_t(float x) { return x; }
static inline double from_t(double x) { return x; }
static inline float from_t(__nv_bfloat16 x) { return __bfloat162float(x); }
static inline float from_t(__half x) { return __half2float(x); }

/* Device copy of v in element type T (rounded); the rounded values come
 * back in `rounded` when given, for references that see what the GPU sees. */
template <typename T>
static T *upload(const std::vector<float> &v, std::vector<double> *rounded = nullptr) {
  std::vector<T> h(v.size());
  if (rounded)
    rounded->resize(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    h[i] = to_t<T>(v[i]);
    if (rounded)
      (*rounded)[i] = from_t(h[i]);
  }
  T *d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T) + 16));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
/* Device buffer of n elements filled with NaN bytes: an element the kernel
 * forgets to write fails the check. */
template <typename T> static T *poisoned(size_t n) {
  T *d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(T) + 16));
  CK(cudaMemset(d, 0xff, n * sizeof(T)));
  return d;
}
template <typename T> static std::vector<double> download(const T *d, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> r(n);
  for (size_t i = 0; i < n; i++)
    r[i] = from_t(h[i]);
  return r;
}

static inline double rel_err(const double *a, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i]))
      return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline void check(const char *what, const double *a, const double *ref, size_t n,
                         double tol) {
  double e = rel_err(a, ref, n);
  int ok = e <= tol; /* NaN and inf fail */
  printf("%-52s rel err %.3e (tol %.0e) %s\n", what, e, tol, ok ? "ok" : "FAIL");
  if (!ok)
    g_failures++;
  fflush(stdout);
}
static inline void check(const char *what, const std::vector<double> &a,
                         const std::vector<double> &ref, double tol) {
  if (a.size() != ref.size()) {
    printf("%-52s size mismatch FAIL\n", what);
    g_failures++;
    return;
  }
  check(what, a.data(), ref.data(), a.size(), tol);
}
static inline void expect(const char *what, int cond) {
  printf("%-52s %s\n", what, cond ? "ok" : "FAIL");
  if (!cond)
    g_failures++;
  fflush(stdout);
}

#endif /* GPU_TEST_H */
