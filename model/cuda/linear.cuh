/* linear.cuh - the three products of a linear layer through cuBLASLt, in
 * row-major terms (out[M][Nout] = inp[M][K] W[Nout][K]^T + bias, as
 * nn.Linear), with their fused epilogues and, where cuBLASLt offers no
 * algorithm for one, the same result from separate kernels. Internal to
 * model/cuda/ and tests/gpu/. */
#ifndef GPT_CUDA_LINEAR_CUH
#define GPT_CUDA_LINEAR_CUH

#include <string.h>

#include <type_traits>

#include "kernels.cuh"
#include "matmul.cuh"
#include "mlp_sm90.cuh"

template <typename T> static inline gc_mm_args_t mm_base(const char *name, int m, int n, int k) {
  gc_mm_args_t a;
  memset(&a, 0, sizeof(a));
  a.name = name;
  a.m = m, a.n = n, a.k = k;
  a.ab = gc_type<T>::cuda;
  a.cd = gc_type<T>::cuda;
  a.alpha = 1.f;
  a.epi = CUBLASLT_EPILOGUE_DEFAULT;
  return a;
}

/* The forward's product out = inp W^T in cuBLASLt's (column-major) terms,
 * before its epilogue. */
template <typename T>
static inline gc_mm_args_t fwd_args(const char *name, T *out, const T *inp, const T *w, int M,
                                    int K, int Nout) {
  gc_mm_args_t a = mm_base<T>(name, Nout, M, K);
  a.ta = 1, a.A = w, a.lda = K;
  a.tb = 0, a.B = inp, a.ldb = K;
  a.D = out, a.ldd = Nout;
  return a;
}

/* out = inp W^T (+ bias) (+ resid): the residual add rides on beta. */
template <typename T>
static inline int linear_fwd(gc_mm_t *mm, cudaStream_t st, const char *name, T *out, const T *inp,
                             const T *w, const T *bias, const T *resid, int M, int K, int Nout) {
  gc_mm_args_t a = fwd_args<T>(name, out, inp, w, M, K, Nout);
  if (resid)
    a.C = resid, a.beta = 1.f;
  if (bias)
    a.epi = CUBLASLT_EPILOGUE_BIAS, a.bias = (void *)bias;
  return gc_mm(mm, &a, st);
}

/* Choose, once for slot (GC_CHOICE_*), the fastest of GC_CHOICE_WAYS ways
 * of one computation by timing each on arg (3 calls after a warm-up):
 * way[1], the plain product and a kernel, first and always (every way is
 * compared with it); -ENOTSUP from a way: it does not serve this product or
 * was not built. Without fused epilogues way 1 is taken untimed, without
 * tuning way 0 (cuBLASLt's epilogue). */
static inline int choose_way(gc_mm_t *mm, cudaStream_t st, int slot,
                             int (*const way[GC_CHOICE_WAYS])(void *), void *arg) {
  int *mode = gc_mm_choice(mm, slot);
  if (*mode >= 0)
    return 0;
  if (!gc_mm_fused(mm)) {
    *mode = 1;
    return 0;
  }
  if (!gc_mm_tuning(mm)) {
    *mode = 0;
    return 0;
  }
  const int reps = 3;
  float *ms = gc_mm_choice_ms(mm, slot);
  static const int order[GC_CHOICE_WAYS] = {1, 0, 2};
  int rc = 0, best = 1;
  for (int j = 0; j < GC_CHOICE_WAYS && rc == 0; j++) {
    const int i = order[j];
    float tm = 0.f;
    const int r = gc_mm_time(mm, st, reps, way[i], arg, &tm);
    ms[i] = r == 0 ? tm / reps : 0.f;
    if (r == 0 && ms[i] < ms[best])
      best = i;
    else if (r < 0 && (r != -ENOTSUP || i == 1))
      rc = r;
  }
  GC_CUDA(cudaStreamSynchronize(st));
  GC_TRY(rc);
  *mode = best;
  return 0;
}

/* out = gelu(pre), pre = inp W^T + bias (kept for backward). Three ways,
 * whichever the first call timed fastest (choose_way):
 * 0: cuBLASLt's GELU_AUX_BIAS epilogue;
 * 1: the product with its bias into pre, then gelu_fwd_kernel;
 * 2: CUTLASS's Hopper GEMM with the bias, GELU and pre in its epilogue
 *    (fc_sm90.cu: bf16 on compute capability 9.0, where the build found
 *    CUTLASS's headers).
 * All three are idempotent: the timing writes the real outputs. */
template <typename T> struct gelu_args {
  gc_mm_t *mm;
  cudaStream_t st;
  T *out, *pre;
  const T *inp, *w, *bias;
  const char *name;
  int M, K, Nout, sm_count;
};
template <typename T> static int gelu_fused(void *p) {
  gelu_args<T> *d = (gelu_args<T> *)p;
  gc_mm_args_t a = fwd_args<T>(d->name, d->out, d->inp, d->w, d->M, d->K, d->Nout);
  a.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, a.bias = (void *)d->bias;
  a.aux = d->pre, a.aux_ld = d->Nout;
  return gc_mm(d->mm, &a, d->st);
}
template <typename T> static int gelu_split(void *p) {
  gelu_args<T> *d = (gelu_args<T> *)p;
  GC_TRY(linear_fwd<T>(d->mm, d->st, d->name, d->pre, d->inp, d->w, d->bias, NULL, d->M, d->K,
                       d->Nout));
  return gc_gelu_fwd<T>(d->out, d->pre, (size_t)d->M * d->Nout, d->st);
}
template <typename T> static int gelu_sm90(void *p) {
#ifdef GPT_CUDA_CUTLASS
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    gelu_args<T> *d = (gelu_args<T> *)p;
    return gc_gelu_sm90(d->out, d->pre, d->inp, d->w, d->bias, d->M, d->K, d->Nout, d->sm_count,
                        d->st);
  }
#endif
  (void)p;
  return -ENOTSUP;
}

template <typename T>
static inline int linear_fwd_gelu(gc_mm_t *mm, cudaStream_t st, const char *name, T *out, T *pre,
                                  const T *inp, const T *w, const T *bias, int M, int K, int Nout,
                                  int sm_count) {
  gelu_args<T> d = {mm, st, out, pre, inp, w, bias, name, M, K, Nout, sm_count};
  int (*const way[GC_CHOICE_WAYS])(void *) = {gelu_fused<T>, gelu_split<T>, gelu_sm90<T>};
  GC_TRY(choose_way(mm, st, GC_CHOICE_GELU, way, &d));
  int rc = way[*gc_mm_choice(mm, GC_CHOICE_GELU)](&d);
  if (rc == -ENOTSUP)
    rc = gelu_split<T>(&d);
  return rc;
}

/* dinp = dout W (M x K), overwritten. */
template <typename T>
static inline int linear_bwd_in(gc_mm_t *mm, cudaStream_t st, const char *name, T *dinp,
                                const T *dout, const T *w, int M, int K, int Nout) {
  gc_mm_args_t a = mm_base<T>(name, K, M, Nout);
  a.ta = 0, a.A = w, a.lda = K;
  a.tb = 0, a.B = dout, a.ldb = Nout;
  a.D = dinp, a.ldd = K;
  return gc_mm(mm, &a, st);
}

/* dinp = (dout W) * gelu'(pre), for the layer whose output went through
 * GELU, and its bias gradient added to bgrad32 (fp32) by a column sum.
 * Three ways, whichever the first call timed fastest (choose_way), column
 * sums included:
 * 0: GELU' in cuBLASLt's DGELU epilogue, then a column sum of dinp;
 * 1: the plain product, then one kernel that applies GELU' and sums the
 *    columns (gc_dgelu_colsum: one pass over dinp instead of two);
 * 2: CUTLASS's Hopper GEMM with GELU' and the column sums in its epilogue
 *    (mlp_sm90.cu: bf16 on compute capability 9.0, where the build found
 *    CUTLASS's headers).
 * On the H200 cuBLASLt's epilogue runs on an older kernel than its plain
 * product (sm90_xmma); its DGELU_BGRAD epilogue, which would also reduce
 * the bias gradient, has no algorithm in cuBLASLt 13 (lab/cuda/
 * mlp_epilogues.cu). */
template <typename T> struct dgelu_args {
  gc_mm_t *mm;
  cudaStream_t st;
  gc_mm_args_t a;
  const T *pre;
  float *bgrad32;
  int M, K, sm_count;
};
template <typename T> static int dgelu_fused(void *p) {
  dgelu_args<T> *d = (dgelu_args<T> *)p;
  gc_mm_args_t a = d->a;
  a.aux = (void *)d->pre, a.aux_ld = a.m;
  a.epi = CUBLASLT_EPILOGUE_DGELU;
  GC_TRY(gc_mm(d->mm, &a, d->st));
  return gc_colsum<T>(d->bgrad32, (const T *)a.D, d->M, d->K, d->sm_count, d->st);
}
template <typename T> static int dgelu_split(void *p) {
  dgelu_args<T> *d = (dgelu_args<T> *)p;
  GC_TRY(gc_mm(d->mm, &d->a, d->st));
  return gc_dgelu_colsum<T>(d->bgrad32, (T *)d->a.D, d->pre, d->M, d->K, d->sm_count, d->st);
}

template <typename T> static int dgelu_sm90(void *p) {
#ifdef GPT_CUDA_CUTLASS
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    dgelu_args<T> *d = (dgelu_args<T> *)p;
    return gc_dgelu_sm90((T *)d->a.D, d->bgrad32, (const T *)d->a.B, (const T *)d->a.A, d->pre,
                         d->M, d->K, d->a.k, d->sm_count, d->st);
  }
#endif
  (void)p;
  return -ENOTSUP;
}

template <typename T>
static inline int linear_bwd_in_dgelu(gc_mm_t *mm, cudaStream_t st, const char *name, T *dinp,
                                      const T *dout, const T *w, const T *pre, float *bgrad32,
                                      int M, int K, int Nout, int sm_count) {
  dgelu_args<T> d;
  d.mm = mm, d.st = st, d.pre = pre, d.bgrad32 = bgrad32;
  d.M = M, d.K = K, d.sm_count = sm_count;
  d.a = mm_base<T>(name, K, M, Nout);
  d.a.ta = 0, d.a.A = w, d.a.lda = K;
  d.a.tb = 0, d.a.B = dout, d.a.ldb = Nout;
  d.a.D = dinp, d.a.ldd = K;
  int (*const way[GC_CHOICE_WAYS])(void *) = {dgelu_fused<T>, dgelu_split<T>, dgelu_sm90<T>};
  const int *mode = gc_mm_choice(mm, GC_CHOICE_DGELU);
  if (*mode < 0 && gc_mm_fused(mm) && gc_mm_tuning(mm)) {
    /* timed into a column-sum buffer of their own: the gradient's bias
     * sums get only the call below */
    dgelu_args<T> t = d;
    GC_CUDA(cudaMalloc((void **)&t.bgrad32, (size_t)K * sizeof(float)));
    const int rc = choose_way(mm, st, GC_CHOICE_DGELU, way, &t);
    cudaFree(t.bgrad32);
    GC_TRY(rc);
  } else {
    GC_TRY(choose_way(mm, st, GC_CHOICE_DGELU, way, &d)); /* untimed */
  }
  int rc = way[*mode](&d);
  if (rc == -ENOTSUP)
    rc = dgelu_split<T>(&d);
  return rc;
}

/* dW (fp32, Nout x K) = alpha dout^T inp + beta dW. Bias gradients come
 * from elsewhere (the LayerNorm backward's column sums, gc_colsum): a
 * bias-gradient epilogue here keeps cuBLASLt from splitting the long
 * reduction over tokens, and these products have few output tiles. */
template <typename T>
static inline int linear_bwd_w(gc_mm_t *mm, cudaStream_t st, const char *name, float *dw,
                               const T *dout, const T *inp, int M, int K, int Nout, float alpha,
                               float beta) {
  gc_mm_args_t a = mm_base<T>(name, K, Nout, M);
  a.cd = CUDA_R_32F;
  a.ta = 0, a.A = inp, a.lda = K;
  a.tb = 1, a.B = dout, a.ldb = Nout;
  a.D = dw, a.ldd = K;
  a.alpha = alpha, a.beta = beta;
  return gc_mm(mm, &a, st);
}

#endif /* GPT_CUDA_LINEAR_CUH */
