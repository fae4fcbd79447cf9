/* linear.cuh - the three products of a linear layer through cuBLASLt, in
 * row-major terms (out[M][Nout] = inp[M][K] W[Nout][K]^T + bias, as
 * nn.Linear), with their fused epilogues and, where cuBLASLt offers no
 * algorithm for one, the same result from separate kernels. Internal to
 * model/cuda/ and tests/gpu/. */
#ifndef GPT_CUDA_LINEAR_CUH
#define GPT_CUDA_LINEAR_CUH

#include <string.h>

#include "kernels.cuh"
#include "matmul.cuh"

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

/* out = inp W^T (+ bias) (+ resid): the residual add rides on beta. */
template <typename T>
static inline int linear_fwd(gc_mm_t *mm, cudaStream_t st, const char *name, T *out, const T *inp,
                             const T *w, const T *bias, const T *resid, int M, int K, int Nout) {
  gc_mm_args_t a = mm_base<T>(name, Nout, M, K);
  a.ta = 1, a.A = w, a.lda = K;
  a.tb = 0, a.B = inp, a.ldb = K;
  a.D = out, a.ldd = Nout;
  if (resid)
    a.C = resid, a.beta = 1.f;
  if (bias)
    a.epi = CUBLASLT_EPILOGUE_BIAS, a.bias = (void *)bias;
  return gc_mm(mm, &a, st);
}

/* out = gelu(pre), pre = inp W^T + bias (kept for backward). */
template <typename T>
static inline int linear_fwd_gelu(gc_mm_t *mm, cudaStream_t st, const char *name, T *out, T *pre,
                                  const T *inp, const T *w, const T *bias, int M, int K, int Nout) {
  gc_mm_args_t a = mm_base<T>(name, Nout, M, K);
  a.ta = 1, a.A = w, a.lda = K;
  a.tb = 0, a.B = inp, a.ldb = K;
  a.D = out, a.ldd = Nout;
  a.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, a.bias = (void *)bias;
  a.aux = pre, a.aux_ld = Nout;
  int rc = gc_mm(mm, &a, st);
  if (rc != -ENOTSUP)
    return rc;
  GC_TRY(linear_fwd<T>(mm, st, name, pre, inp, w, bias, NULL, M, K, Nout));
  return gc_gelu_fwd<T>(out, pre, (size_t)M * Nout, st);
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
 * Two ways, whichever the first call timed faster, column sums included:
 * GELU' in cuBLASLt's DGELU epilogue, then a column sum of dinp; or the
 * plain product, then one kernel that applies GELU' and sums the columns
 * (gc_dgelu_colsum: one pass over dinp instead of two). On the H200 the
 * epilogue runs on an older kernel than the plain product's (sm90_xmma,
 * ~400 TFLOPS at gpt2-774m). The epilogue that also reduces the bias
 * gradient, DGELU_BGRAD, cost 0.28 ms a layer more than the plain
 * product: not used. */
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
  int *mode = gc_mm_choice(mm, GC_CHOICE_DGELU);
  if (*mode < 0) {
    if (!gc_mm_fused(mm)) {
      *mode = 1;
    } else if (!gc_mm_tuning(mm)) {
      *mode = 0;
    } else {
      /* timed into a column-sum buffer of their own: the gradient's bias
       * sums get only the call below */
      dgelu_args<T> t = d;
      const int reps = 3;
      float tf = 0.f, ts = 0.f;
      GC_CUDA(cudaMalloc((void **)&t.bgrad32, (size_t)K * sizeof(float)));
      int rc = gc_mm_time(mm, st, reps, dgelu_fused<T>, &t, &tf);
      int rs = rc < 0 && rc != -ENOTSUP ? rc : gc_mm_time(mm, st, reps, dgelu_split<T>, &t, &ts);
      GC_CUDA(cudaStreamSynchronize(st));
      cudaFree(t.bgrad32);
      if (rc < 0 && rc != -ENOTSUP)
        return rc;
      GC_TRY(rs);
      *mode = rc == 0 && tf <= ts ? 0 : 1;
      gc_mm_choice_ms(mm, GC_CHOICE_DGELU)[0] = rc == 0 ? tf / reps : 0.f;
      gc_mm_choice_ms(mm, GC_CHOICE_DGELU)[1] = ts / reps;
    }
  }
  int rc = *mode == 0 ? dgelu_fused<T>(&d) : -ENOTSUP;
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
