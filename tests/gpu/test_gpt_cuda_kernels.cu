/* test_gpt_cuda_kernels - every kernel of the CUDA backend against the
 * float64 CPU reference (ref.h), in fp32, bf16 and fp16, on fresh random
 * inputs, outputs poisoned with NaN before each run so that an unwritten
 * element fails. The reference sees the inputs rounded to the compute type,
 * so the tolerances measure the kernels' own arithmetic: about the type's
 * precision (bf16 1e-2, fp16 2e-3..5e-3, fp32 1e-5..1e-4).
 * The cuBLASLt products are checked with their fused epilogues and again
 * with the fallback kernels (gc_mm_create without fused epilogues), and the tuning cache
 * (GPT_CUDA_TUNE_CACHE) hands the timed choices to a new context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu_test.h"
#include "kernels.cuh"
#include "linear.cuh"
#include "ref.h"

template <typename T> struct tol;
template <> struct tol<float> {
  static constexpr double out = 1e-5, grad = 1e-4;
  static const char *name() { return "fp32"; }
};
template <> struct tol<bf16> {
  static constexpr double out = 1e-2, grad = 1e-2;
  static const char *name() { return "bf16"; }
};
template <> struct tol<f16> {
  static constexpr double out = 2e-3, grad = 5e-3;
  static const char *name() { return "fp16"; }
};

static char label[160];
template <typename T> static const char *L(const char *what) {
  snprintf(label, sizeof(label), "[%s] %s", tol<T>::name(), what);
  return label;
}

static cudaStream_t S;
static int g_sm = 132;

/* ---- LayerNorm ------------------------------------------------------------ */
template <typename T> static void test_layernorm(rng &r, int N, int C) {
  std::vector<double> x, w, b, dy, dx0;
  T *dX = upload<T>(r.normals((size_t)N * C, 1.0), &x);
  std::vector<float> wf = r.normals(C, 0.1), bf = r.normals(C, 0.1);
  for (auto &v : wf)
    v += 1.f;
  T *dW = upload<T>(wf, &w), *dB = upload<T>(bf, &b);
  T *out = poisoned<T>((size_t)N * C);
  float *mean = poisoned<float>(N), *rstd = poisoned<float>(N);
  OK(gc_layernorm_fwd<T>(out, mean, rstd, dX, dW, dB, N, C, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> ro((size_t)N * C), rm(N), rr(N);
  ref::layernorm_fwd(ro.data(), rm.data(), rr.data(), x.data(), w.data(), b.data(), N, C);
  char what[96];
  snprintf(what, sizeof(what), "layernorm fwd N=%d C=%d", N, C);
  check(L<T>(what), download(out, (size_t)N * C), ro, tol<T>::out);
  check(L<T>("layernorm fwd mean, rstd"), download(rstd, N), rr, 1e-4);
  std::vector<double> m = download(mean, N);
  /* mean is near 0: absolute check against the scale of x */
  double worst = 0;
  for (int i = 0; i < N; i++)
    worst = fmax(worst, fabs(m[i] - rm[i]));
  expect(L<T>("layernorm fwd mean within 1e-5"), worst < 1e-5);

  /* backward: dinp accumulates, dw and db add to what is there */
  T *dY = upload<T>(r.normals((size_t)N * C, 1.0), &dy);
  T *dIn = upload<T>(r.normals((size_t)N * C, 1.0), &dx0);
  std::vector<float> g0 = r.normals(3 * C, 1.0);
  float *gw = upload<float>(std::vector<float>(g0.begin(), g0.begin() + C));
  float *gb = upload<float>(std::vector<float>(g0.begin() + C, g0.begin() + 2 * C));
  float *gs = upload<float>(std::vector<float>(g0.begin() + 2 * C, g0.end()));
  const float scale = 0.5f;
  OK(gc_layernorm_bwd<T>(dIn, gw, gb, gs, dY, scale, dX, dW, mean, rstd, N, C, 1, g_sm, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> dys(dy), rdx(dx0), rgw(g0.begin(), g0.begin() + C),
      rgb(g0.begin() + C, g0.begin() + 2 * C), rgs(g0.begin() + 2 * C, g0.end());
  for (auto &v : dys)
    v *= scale;
  ref::layernorm_bwd(rdx.data(), rgw.data(), rgb.data(), dys.data(), x.data(), w.data(),
                     rm.data(), rr.data(), N, C);
  snprintf(what, sizeof(what), "layernorm bwd dinp (+=) N=%d C=%d", N, C);
  check(L<T>(what), download(dIn, (size_t)N * C), rdx, tol<T>::grad);
  check(L<T>("layernorm bwd dweight (+=)"), download(gw, C), rgw, 1e-4);
  check(L<T>("layernorm bwd dbias (+=)"), download(gb, C), rgb, 1e-4);
  /* column sums of the dinp written: the upstream projection's bias grad */
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      rgs[c] += rdx[(size_t)n * C + c];
  check(L<T>("layernorm bwd column sums of dinp (+=)"), download(gs, C), rgs, tol<T>::grad);
  /* overwrite mode, no column sums */
  OK(gc_layernorm_bwd<T>(dIn, gw, gb, NULL, dY, scale, dX, dW, mean, rstd, N, C, 0, g_sm, S));
  std::vector<double> rdx2((size_t)N * C, 0.0), tw(C), tb(C);
  ref::layernorm_bwd(rdx2.data(), tw.data(), tb.data(), dys.data(), x.data(), w.data(),
                     rm.data(), rr.data(), N, C);
  check(L<T>("layernorm bwd dinp (=)"), download(dIn, (size_t)N * C), rdx2, tol<T>::grad);
  cudaFree(dX), cudaFree(dW), cudaFree(dB), cudaFree(out), cudaFree(mean), cudaFree(rstd);
  cudaFree(dY), cudaFree(dIn), cudaFree(gw), cudaFree(gb), cudaFree(gs);
}

/* ---- column sums (the bias gradients cuBLASLt's epilogues leave) --------- */
template <typename T> static void test_colsum(rng &r, int M, int N) {
  std::vector<double> x;
  T *dx = upload<T>(r.normals((size_t)M * N, 1.0), &x);
  std::vector<float> b0 = r.normals(N, 1.0);
  float *gB = upload<float>(b0);
  OK(gc_colsum<T>(gB, dx, M, N, g_sm, S));
  std::vector<double> rb(b0.begin(), b0.end());
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++)
      rb[n] += x[(size_t)m * N + n];
  char what[96];
  snprintf(what, sizeof(what), "column sums (+=) M=%d N=%d", M, N);
  check(L<T>(what), download(gB, N), rb, 1e-4);
  cudaFree(dx), cudaFree(gB);
}

/* column sums of the first N of ld columns (the query's part of dqkv) */
template <typename T> static void test_colsum_ld(rng &r, int M, int N, int ld) {
  std::vector<double> x;
  T *dx = upload<T>(r.normals((size_t)M * ld, 1.0), &x);
  std::vector<float> b0 = r.normals(N + 8, 1.0);
  float *gB = upload<float>(b0);
  OK(gc_colsum_ld<T>(gB, dx, M, N, ld, g_sm, S));
  std::vector<double> rb(b0.begin(), b0.end());
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++)
      rb[n] += x[(size_t)m * ld + n];
  char what[96];
  snprintf(what, sizeof(what), "column sums (+=) M=%d N=%d of ld %d", M, N, ld);
  check(L<T>(what), download(gB, N + 8), rb, 1e-4); /* the 8 past N untouched */
  cudaFree(dx), cudaFree(gB);
}

/* the value bias's gradient through the projection: dvb += g W, db += g, g = 0 */
template <typename T> static void test_vbias(rng &r, int C) {
  std::vector<double> w;
  T *dW = upload<T>(r.normals((size_t)C * C, 0.1), &w);
  std::vector<float> g0 = r.normals(C, 1.0), v0 = r.normals(C, 1.0), b0 = r.normals(C, 1.0);
  float *g = upload<float>(g0), *dvb = upload<float>(v0), *db = upload<float>(b0);
  unsigned *done = nullptr;
  CK(cudaMalloc((void **)&done, sizeof(unsigned)));
  CK(cudaMemset(done, 0, sizeof(unsigned)));
  OK(gc_vbias<T>(dvb, db, g, dW, C, done, S));
  std::vector<double> rv(v0.begin(), v0.end()), rb(b0.begin(), b0.end());
  for (int o = 0; o < C; o++) {
    rb[o] += g0[o];
    for (int c = 0; c < C; c++)
      rv[c] += (double)g0[o] * w[(size_t)o * C + c];
  }
  char what[96];
  snprintf(what, sizeof(what), "value bias through the projection C=%d: dvb", C);
  check(L<T>(what), download(dvb, C), rv, 1e-5);
  snprintf(what, sizeof(what), "value bias through the projection C=%d: db", C);
  check(L<T>(what), download(db, C), rb, 1e-6);
  std::vector<double> gz = download(g, C);
  int nz = 0;
  for (double x : gz)
    nz += x != 0.0;
  snprintf(what, sizeof(what), "value bias through the projection C=%d: g cleared", C);
  expect(L<T>(what), nz == 0);
  /* again from the same inputs: the same bits (no atomics), the counter reset */
  std::vector<double> first = download(dvb, C);
  CK(cudaMemcpy(g, g0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dvb, v0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
  OK(gc_vbias<T>(dvb, db, g, dW, C, done, S));
  std::vector<double> again = download(dvb, C);
  unsigned left = 1;
  CK(cudaMemcpy(&left, done, sizeof(unsigned), cudaMemcpyDeviceToHost));
  snprintf(what, sizeof(what), "value bias through the projection C=%d: repeats bitwise", C);
  expect(L<T>(what), again == first && left == 0);
  cudaFree(dW), cudaFree(g), cudaFree(dvb), cudaFree(db), cudaFree(done);
}

/* ---- linear layers through cuBLASLt ---------------------------------------- */
template <typename T> static void test_linear(rng &r, gc_mm_t *mm, const char *tag) {
  const int M = 256, K = 192, O = 384;
  char what[120];
  std::vector<double> x, w, b, res, dy, pre;
  T *dx = upload<T>(r.normals((size_t)M * K, 1.0), &x);
  T *dw = upload<T>(r.normals((size_t)O * K, 0.1), &w);
  T *db = upload<T>(r.normals(O, 0.1), &b);
  T *dres = upload<T>(r.normals((size_t)M * O, 1.0), &res);
  T *out = poisoned<T>((size_t)M * O), *opre = poisoned<T>((size_t)M * O);
  std::vector<double> ro((size_t)M * O);
  ref::matmul_fwd(ro.data(), x.data(), w.data(), b.data(), M, K, O);
  /* out = x W^T + b + residual */
  OK(linear_fwd<T>(mm, S, "test", out, dx, dw, db, dres, M, K, O));
  std::vector<double> ror(ro);
  for (size_t i = 0; i < ror.size(); i++)
    ror[i] += res[i];
  snprintf(what, sizeof(what), "%s matmul fwd +bias +residual", tag);
  check(L<T>(what), download(out, (size_t)M * O), ror, tol<T>::out);
  /* GELU: out = gelu(pre), pre = x W^T + b */
  OK(linear_fwd_gelu<T>(mm, S, "test", out, opre, dx, dw, db, M, K, O, g_sm));
  std::vector<double> rg(ro.size());
  for (size_t i = 0; i < ro.size(); i++)
    rg[i] = ref::gelu(ro[i]);
  const char *gway = gc_mm_way_name(GC_CHOICE_GELU, *gc_mm_choice(mm, GC_CHOICE_GELU), 1);
  snprintf(what, sizeof(what), "%s matmul fwd +bias +GELU (%s) (pre)", tag, gway);
  check(L<T>(what), download(opre, (size_t)M * O), ro, tol<T>::out);
  snprintf(what, sizeof(what), "%s matmul fwd +bias +GELU (%s) (out)", tag, gway);
  check(L<T>(what), download(out, (size_t)M * O), rg, tol<T>::out);

  /* dinp = dy W */
  T *ddy = upload<T>(r.normals((size_t)M * O, 1.0), &dy);
  T *din = poisoned<T>((size_t)M * K);
  OK(linear_bwd_in<T>(mm, S, "test", din, ddy, dw, M, K, O));
  std::vector<double> rdin((size_t)M * K, 0.0);
  ref::matmul_bwd(rdin.data(), NULL, NULL, dy.data(), x.data(), w.data(), M, K, O);
  snprintf(what, sizeof(what), "%s matmul bwd dinp", tag);
  check(L<T>(what), download(din, (size_t)M * K), rdin, tol<T>::grad);

  /* dW += dy^T x (fp32); the bias gradient by column sums (+=) */
  std::vector<float> w0 = r.normals((size_t)O * K, 1.0), b0 = r.normals(O, 1.0);
  float *gW = upload<float>(w0), *gB = upload<float>(b0);
  OK(linear_bwd_w<T>(mm, S, "test", gW, ddy, dx, M, K, O, 1.f, 1.f));
  OK(gc_colsum<T>(gB, ddy, M, O, g_sm, S));
  std::vector<double> rgW(w0.begin(), w0.end()), rgB(b0.begin(), b0.end());
  ref::matmul_bwd(NULL, rgW.data(), rgB.data(), dy.data(), x.data(), w.data(), M, K, O);
  snprintf(what, sizeof(what), "%s matmul bwd dweight (+=, fp32)", tag);
  check(L<T>(what), download(gW, (size_t)O * K), rgW, 1e-4);
  snprintf(what, sizeof(what), "%s column sums: dbias (+=)", tag);
  check(L<T>(what), download(gB, O), rgB, 1e-4);

  /* The layer after GELU: din = (dy2 W2) * gelu'(pre) with its bias grad.
   * W2 [O2][O], inputs of width O. */
  const int O2 = 128;
  std::vector<double> w2, dy2;
  T *dW2 = upload<T>(r.normals((size_t)O2 * O, 0.1), &w2);
  T *dY2 = upload<T>(r.normals((size_t)M * O2, 1.0), &dy2);
  std::vector<double> pre_r = download(opre, (size_t)M * O); /* as stored */
  T *dg = poisoned<T>((size_t)M * O);
  std::vector<float> bg0 = r.normals(O, 1.0);
  float *b32 = upload<float>(bg0);
  OK(linear_bwd_in_dgelu<T>(mm, S, "test", dg, dY2, dW2, opre, b32, M, O, O2, g_sm));
  std::vector<double> rdg((size_t)M * O, 0.0), rbg(bg0.begin(), bg0.end());
  ref::matmul_bwd(rdg.data(), NULL, NULL, dy2.data(), NULL, w2.data(), M, O, O2);
  for (size_t i = 0; i < rdg.size(); i++) {
    rdg[i] *= ref::gelu_grad(pre_r[i]);
    rbg[i % O] += rdg[i];
  }
  snprintf(what, sizeof(what), "%s matmul bwd dinp *GELU'", tag);
  check(L<T>(what), download(dg, (size_t)M * O), rdg, tol<T>::grad);
  snprintf(what, sizeof(what), "%s matmul bwd GELU' (%s) bias grad (+=)", tag,
           gc_mm_way_name(GC_CHOICE_DGELU, *gc_mm_choice(mm, GC_CHOICE_DGELU), 1));
  check(L<T>(what), download(b32, O), rbg, tol<T>::grad);
  CK(cudaStreamSynchronize(S));
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dres), cudaFree(out), cudaFree(opre);
  cudaFree(ddy), cudaFree(din), cudaFree(gW), cudaFree(gB), cudaFree(dW2), cudaFree(dY2);
  cudaFree(dg), cudaFree(b32);
}

/* A CUTLASS kernel (mlp_sm90.cu, fc_sm90.cu) said -ENOTSUP: only right
 * where it cannot serve (K or Nout not a multiple of 8, not compute
 * capability 9). */
template <typename T> static void expect_unserved(const char *kernel, int K, int Nout) {
  int dev = 0, major = 0;
  char what[160];
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  snprintf(what, sizeof(what), "%s: -ENOTSUP only where it cannot serve", kernel);
  expect(L<T>(what), K % 8 != 0 || Nout % 8 != 0 || major != 9);
}

/* ---- the MLP's input gradient in CUTLASS's epilogue (mlp_sm90.cu) -------- */
/* din (M x K) = (dy (M x Nout) W (Nout x K)) * gelu'(pre), the bias gradient
 * added (+=) by the epilogue's atomics, against float64; where it does not
 * serve (not built, not compute capability 9.0, K not a multiple of 8) it
 * must say -ENOTSUP and touch nothing. */
template <typename T> static void test_dgelu_sm90(rng &r, int M, int K, int Nout) {
#ifdef GPT_CUDA_CUTLASS
  if constexpr (std::is_same<T, bf16>::value) {
    std::vector<double> w, dy, pre;
    T *dW = upload<T>(r.normals((size_t)Nout * K, 0.1), &w);
    T *dY = upload<T>(r.normals((size_t)M * Nout, 1.0), &dy);
    T *dP = upload<T>(r.normals((size_t)M * K, 1.0), &pre);
    T *din = poisoned<T>((size_t)M * K);
    std::vector<float> b0 = r.normals(K, 1.0);
    float *b32 = upload<float>(b0);
    const int rc = gc_dgelu_sm90(din, b32, dY, dW, dP, M, K, Nout, g_sm, S);
    char what[120];
    if (rc == -ENOTSUP) {
      snprintf(what, sizeof(what), "CUTLASS GELU' M=%d K=%d Nout=%d", M, K, Nout);
      expect_unserved<T>(what, K, Nout);
      snprintf(what, sizeof(what), "CUTLASS GELU' M=%d K=%d: the bias gradient untouched", M, K);
      std::vector<double> rb0(b0.begin(), b0.end());
      check(L<T>(what), download(b32, K), rb0, 0.0);
    } else {
      OK(rc);
      CK(cudaStreamSynchronize(S));
      std::vector<double> rdg((size_t)M * K, 0.0), rbg(b0.begin(), b0.end());
      ref::matmul_bwd(rdg.data(), NULL, NULL, dy.data(), NULL, w.data(), M, K, Nout);
      for (size_t i = 0; i < rdg.size(); i++) {
        rdg[i] *= ref::gelu_grad(pre[i]);
        rbg[i % K] += rdg[i];
      }
      snprintf(what, sizeof(what), "CUTLASS matmul bwd dinp *GELU' M=%d K=%d Nout=%d", M, K, Nout);
      check(L<T>(what), download(din, (size_t)M * K), rdg, tol<T>::grad);
      snprintf(what, sizeof(what), "CUTLASS GELU' bias grad (+=) M=%d K=%d", M, K);
      check(L<T>(what), download(b32, K), rbg, tol<T>::grad);
    }
    cudaFree(dW), cudaFree(dY), cudaFree(dP), cudaFree(din), cudaFree(b32);
  }
#else
  (void)r, (void)M, (void)K, (void)Nout;
#endif
}

/* ---- the MLP's forward in CUTLASS's epilogue (fc_sm90.cu) ---------------- */
/* pre (M x Nout) = x (M x K) W (Nout x K)^T + b, out = gelu(pre), against
 * float64; where it does not serve it must say -ENOTSUP and write nothing. */
template <typename T> static void test_gelu_sm90(rng &r, int M, int K, int Nout) {
#ifdef GPT_CUDA_CUTLASS
  if constexpr (std::is_same<T, bf16>::value) {
    std::vector<double> x, w, b;
    T *dX = upload<T>(r.normals((size_t)M * K, 1.0), &x);
    T *dW = upload<T>(r.normals((size_t)Nout * K, 0.1), &w);
    T *dB = upload<T>(r.normals(Nout, 0.1), &b);
    T *out = poisoned<T>((size_t)M * Nout), *pre = poisoned<T>((size_t)M * Nout);
    std::vector<double> out0 = download(out, (size_t)M * Nout);
    const int rc = gc_gelu_sm90(out, pre, dX, dW, dB, M, K, Nout, g_sm, S);
    char what[120];
    if (rc == -ENOTSUP) {
      snprintf(what, sizeof(what), "CUTLASS GELU fwd M=%d K=%d Nout=%d", M, K, Nout);
      expect_unserved<T>(what, K, Nout);
      snprintf(what, sizeof(what), "CUTLASS GELU fwd M=%d K=%d: the output untouched", M, K);
      expect(L<T>(what), memcmp(download(out, (size_t)M * Nout).data(), out0.data(),
                                out0.size() * sizeof(double)) == 0);
    } else {
      OK(rc);
      CK(cudaStreamSynchronize(S));
      std::vector<double> ro((size_t)M * Nout), rg((size_t)M * Nout);
      ref::matmul_fwd(ro.data(), x.data(), w.data(), b.data(), M, K, Nout);
      for (size_t i = 0; i < ro.size(); i++)
        rg[i] = ref::gelu(ro[i]);
      snprintf(what, sizeof(what), "CUTLASS matmul fwd +bias +GELU (pre) M=%d K=%d Nout=%d", M,
               K, Nout);
      check(L<T>(what), download(pre, (size_t)M * Nout), ro, tol<T>::out);
      snprintf(what, sizeof(what), "CUTLASS matmul fwd +bias +GELU (out) M=%d K=%d Nout=%d", M,
               K, Nout);
      check(L<T>(what), download(out, (size_t)M * Nout), rg, tol<T>::out);
    }
    cudaFree(dX), cudaFree(dW), cudaFree(dB), cudaFree(out), cudaFree(pre);
  }
#else
  (void)r, (void)M, (void)K, (void)Nout;
#endif
}

/* ---- attention ------------------------------------------------------------- */
/* dnn: cuDNN's attention serves this shape (gc_attention_prepare), whose
 * log-sum-exp is in natural log */
template <typename T>
static void test_attention(rng &r, int B, int Tn, int NH, int HD, int dnn = 0) {
  const int C = NH * HD, N = B * Tn;
  char what[120];
  const int fast = gc_attention_fast(gc_type<T>::dtype, Tn, HD);
  std::vector<double> qkv, dy;
  T *dQKV = upload<T>(r.normals((size_t)N * 3 * C, 1.0), &qkv);
  T *out = poisoned<T>((size_t)N * C);
  float *lse = poisoned<float>((size_t)B * NH * Tn);
  OK(gc_attention_fwd<T>(out, lse, dQKV, B, Tn, NH, HD, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> ro((size_t)N * C);
  ref::attention_fwd(ro.data(), qkv.data(), B, Tn, NH, HD);
  snprintf(what, sizeof(what), "attention fwd B%d T%d NH%d HD%d (%s)", B, Tn, NH, HD,
           dnn ? "cuDNN" : fast ? "tensor cores" : "generic");
  check(L<T>(what), download(out, (size_t)N * C), ro, tol<T>::out);
  /* log2-sum-exp of the scaled scores */
  std::vector<double> rl((size_t)B * NH * Tn);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < Tn; t++) {
        const double *q = &qkv[((size_t)b * Tn + t) * 3 * C + h * HD];
        double mx = -INFINITY, s = 0;
        std::vector<double> sc(t + 1);
        for (int j = 0; j <= t; j++) {
          const double *k = &qkv[((size_t)b * Tn + j) * 3 * C + C + h * HD];
          double d = 0;
          for (int e = 0; e < HD; e++)
            d += q[e] * k[e];
          sc[j] = d / sqrt((double)HD);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= t; j++)
          s += exp(sc[j] - mx);
        rl[((size_t)b * NH + h) * Tn + t] = (mx + log(s)) / (dnn ? 1.0 : log(2.0));
      }
  check(L<T>(dnn ? "attention fwd log-sum-exp (natural, cuDNN)" : "attention fwd log-sum-exp"),
        download(lse, rl.size()), rl, 1e-3);

  T *dY = upload<T>(r.normals((size_t)N * C, 1.0), &dy);
  T *dqkv = poisoned<T>((size_t)N * 3 * C);
  float *scratch = poisoned<float>(gc_attention_scratch(gc_type<T>::dtype, B, Tn, NH, HD));
  OK(gc_attention_bwd<T>(dqkv, scratch, dY, dQKV, out, lse, B, Tn, NH, HD, S));
  CK(cudaStreamSynchronize(S));
  /* The reference backward uses the GPU's rounded output for D = dO.O, as
   * the kernel does; differences are the kernel's arithmetic. */
  std::vector<double> rdq((size_t)N * 3 * C, 0.0);
  ref::attention_bwd(rdq.data(), dy.data(), qkv.data(), B, Tn, NH, HD);
  std::vector<double> g = download(dqkv, (size_t)N * 3 * C);
  for (int part = 0; part < 3; part++) {
    std::vector<double> a, b;
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        a.push_back(g[(size_t)n * 3 * C + part * C + c]);
        b.push_back(rdq[(size_t)n * 3 * C + part * C + c]);
      }
    snprintf(what, sizeof(what), "attention bwd d%c%s", "qkv"[part], dnn ? " (cuDNN)" : "");
    check(L<T>(what), a, b, tol<T>::grad * 2);
  }
  /* What the qkv bias's gradient relies on (gpt_cuda.cu's backward): over the
   * tokens, dk sums to zero and dv sums to what dO sums to, for every channel. */
  std::vector<double> sk(C, 0.0), sabs(C, 0.0), sv(C, 0.0), so(C, 0.0);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      sk[c] += g[(size_t)n * 3 * C + C + c];
      sabs[c] += fabs(g[(size_t)n * 3 * C + C + c]);
      sv[c] += g[(size_t)n * 3 * C + 2 * C + c];
      so[c] += dy[(size_t)n * C + c];
    }
  double nk = 0, na = 0;
  for (int c = 0; c < C; c++)
    nk += sk[c] * sk[c], na += sabs[c] * sabs[c];
  snprintf(what, sizeof(what), "attention bwd: dk sums to 0 (%.1e of |dk|'s)%s",
           sqrt(nk / na), dnn ? " (cuDNN)" : "");
  expect(L<T>(what), sqrt(nk) <= tol<T>::grad * 2 * sqrt(na));
  snprintf(what, sizeof(what), "attention bwd: dv sums as dO does%s", dnn ? " (cuDNN)" : "");
  check(L<T>(what), sv, so, tol<T>::grad * 2);
  cudaFree(dQKV), cudaFree(out), cudaFree(lse), cudaFree(dY), cudaFree(dqkv), cudaFree(scratch);
}

/* ---- the gradient's sums of squares by blocks (the norm) --------------------
 * Against doubles on the host, blocks from any start, a last block shorter
 * and not a multiple of 4, and a gradient not on 16 bytes (the scalar path). */
static void test_sumsq_blocks(rng &r, size_t n, size_t block, size_t offset) {
  std::vector<double> h;
  float *buf = upload<float>(r.normals(n + offset, 1.0), &h);
  const size_t nb = (n + block - 1) / block;
  double *part = poisoned<double>(nb);
  OK(gc_sumsq_blocks(part, buf + offset, n, block, 0, nb, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> ref(nb, 0.0), got = download(part, nb);
  for (size_t i = 0; i < n; i++)
    ref[i / block] += h[offset + i] * h[offset + i];
  char what[120];
  snprintf(what, sizeof(what), "sumsq blocks n %zu block %zu offset %zu", n, block, offset);
  check(what, got, ref, 1e-12);
  /* blocks [nb/2, nb) alone: the same bits */
  double *tail = poisoned<double>(nb);
  OK(gc_sumsq_blocks(tail, buf + offset, n, block, nb / 2, nb - nb / 2, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> t = download(tail, nb - nb / 2);
  snprintf(what, sizeof(what), "sumsq blocks n %zu: a block's sum from any run of blocks", n);
  expect(what, memcmp(t.data(), got.data() + nb / 2, t.size() * sizeof(double)) == 0);
  cudaFree(buf), cudaFree(part), cudaFree(tail);
}

/* ---- classifier cross-entropy ------------------------------------------------ */
template <typename T> static void test_crossentropy(rng &r, int R, int V, int Vp) {
  std::vector<double> lg;
  std::vector<float> lf = r.normals((size_t)R * Vp, 2.0);
  T *dL = upload<T>(lf, &lg);
  std::vector<int> tg(R);
  for (auto &t : tg)
    t = (int)(r.next() % V);
  int *dT = nullptr;
  CK(cudaMalloc(&dT, R * 4));
  CK(cudaMemcpy(dT, tg.data(), R * 4, cudaMemcpyHostToDevice));
  float *losses = poisoned<float>(R);
  OK(gc_crossentropy<T>(dL, losses, dT, R, V, Vp, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> rd((size_t)R * Vp), rlos(R);
  ref::crossentropy(rd.data(), lg.data(), tg.data(), R, V, Vp, 1.0, rlos.data());
  char what[96];
  snprintf(what, sizeof(what), "cross-entropy losses R%d V%d Vp%d", R, V, Vp);
  check(L<T>(what), download(losses, R), rlos, 1e-5);
  std::vector<double> got = download(dL, (size_t)R * Vp);
  check(L<T>("cross-entropy gradient in place"), got, rd, tol<T>::grad);
  /* Element by element, not only in norm (the targets' p - 1 dominate the
   * norm): a 16-bit gradient within 1 unit in the last place of T of the
   * exact one (rounded once to T: half a unit, plus ex2.approx's error);
   * fp32 within 3e-5 (there the row's sum of 50k exponentials and
   * ex2.approx bound it, not T's rounding); padding 0. */
  const bool f32 = std::is_same<T, float>::value;
  const int mant = std::is_same<T, bf16>::value ? 7 : 10;
  const double tiny = std::is_same<T, f16>::value ? 0x1p-24 : 0.0; /* fp16's subnormals */
  double worst = 0.0; /* in units of what is allowed */
  size_t bad_pad = 0;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < Vp; j++) {
      const size_t k = (size_t)i * Vp + j;
      if (j >= V) {
        bad_pad += got[k] != 0.0;
        continue;
      }
      if (rd[k] == 0.0)
        continue;
      const double allowed =
          f32 ? 3e-5 * fabs(rd[k]) : fmax(ldexp(1.0, ilogb(rd[k]) - mant), tiny);
      const double e = fabs(got[k] - rd[k]) / allowed;
      if (std::isnan(e) || e > worst)
        worst = e; /* a NaN, once in, stays: nothing compares greater */
    }
  snprintf(what, sizeof(what), "cross-entropy gradient element-wise: %.2f of the bound", worst);
  expect(L<T>(what), worst <= 1.0);
  expect(L<T>("cross-entropy padding columns are 0"), bad_pad == 0);
  cudaFree(dL), cudaFree(dT), cudaFree(losses);
}

/* ---- embeddings ---------------------------------------------------------------- */
template <typename T> static void test_encoder(rng &r, int B, int Tn, int C, int V) {
  const int N = B * Tn;
  std::vector<double> wte, wpe, dy;
  T *dWte = upload<T>(r.normals((size_t)V * C, 0.1), &wte);
  T *dWpe = upload<T>(r.normals((size_t)Tn * C, 0.1), &wpe);
  std::vector<int> tok(N);
  for (auto &t : tok)
    t = (int)(r.next() % V);
  int *dTok = nullptr;
  CK(cudaMalloc(&dTok, N * 4));
  CK(cudaMemcpy(dTok, tok.data(), N * 4, cudaMemcpyHostToDevice));
  T *out = poisoned<T>((size_t)N * C);
  OK(gc_encoder_fwd<T>(out, dTok, dWte, dWpe, B, Tn, C, S));
  std::vector<double> ro((size_t)N * C);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      ro[(size_t)n * C + c] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)(n % Tn) * C + c];
  check(L<T>("encoder fwd"), download(out, (size_t)N * C), ro, tol<T>::out);
  T *dY = upload<T>(r.normals((size_t)N * C, 1.0), &dy);
  std::vector<float> g1 = r.normals((size_t)V * C, 1.0), g2 = r.normals((size_t)Tn * C, 1.0);
  float *gte = upload<float>(g1), *gpe = upload<float>(g2);
  OK(gc_encoder_bwd<T>(gte, gpe, dY, dTok, B, Tn, C, S));
  std::vector<double> rte(g1.begin(), g1.end()), rpe(g2.begin(), g2.end());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      rte[(size_t)tok[n] * C + c] += dy[(size_t)n * C + c];
      rpe[(size_t)(n % Tn) * C + c] += dy[(size_t)n * C + c];
    }
  check(L<T>("encoder bwd dwte (+=)"), download(gte, (size_t)V * C), rte, 1e-6);
  check(L<T>("encoder bwd dwpe (+=)"), download(gpe, (size_t)Tn * C), rpe, 1e-6);
  cudaFree(dWte), cudaFree(dWpe), cudaFree(dTok), cudaFree(out), cudaFree(dY), cudaFree(gte),
      cudaFree(gpe);
}

/* ---- AdamW and the gradient norm -------------------------------------------------- */
template <typename T> static void test_adamw(rng &r) {
  /* two tensors: the first decays, the second (a bias, say) does not */
  const unsigned n1 = 70000, n2 = 1000;
  const size_t n = n1 + n2;
  std::vector<float> p = r.normals(n, 1.0), m = r.normals(n, 0.01), g = r.normals(n, 1.0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)(r.uniform() * 1e-3);
  float *dp = upload<float>(p), *dm = upload<float>(m), *dv = upload<float>(v),
        *dg = upload<float>(g);
  T *low = poisoned<T>(n);
  gc_chunk_t ck[3] = {{0, 65536, 1.f}, {65536, n1 - 65536, 1.f}, {n1, n2, 0.f}};
  gc_chunk_t *dck = nullptr;
  CK(cudaMalloc(&dck, sizeof(ck)));
  CK(cudaMemcpy(dck, ck, sizeof(ck), cudaMemcpyHostToDevice));
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gs = 0.7f, wd = 0.1f;
  const int t = 3;
  const float bc1 = 1.f - powf(b1, t), bc2 = 1.f - powf(b2, t);
  OK(gc_adamw<T>(dp, dm, dv, dg, std::is_same<T, float>::value ? nullptr : low, dck, 3, lr, b1,
                 b2, eps, gs, bc1, bc2, wd, S));
  CK(cudaStreamSynchronize(S));
  std::vector<double> rp(n), rm(n), rv(n);
  for (size_t i = 0; i < n; i++) {
    double gr = (double)g[i] * gs;
    rm[i] = b1 * (double)m[i] + (1 - b1) * gr;
    rv[i] = b2 * (double)v[i] + (1 - b2) * gr * gr;
    double mh = rm[i] / bc1, vh = rv[i] / bc2;
    rp[i] = p[i] - lr * (mh / (sqrt(vh) + eps) + (i < n1 ? wd : 0.0) * p[i]);
  }
  check(L<T>("adamw params (decay on 2-D only)"), download(dp, n), rp, 1e-6);
  check(L<T>("adamw first moment"), download(dm, n), rm, 1e-6);
  check(L<T>("adamw second moment"), download(dv, n), rv, 1e-6);
  if (!std::is_same<T, float>::value)
    check(L<T>("adamw low-precision copy"), download(low, n), rp, tol<T>::out);
  float *out = poisoned<float>(1), *part = poisoned<float>(2 * g_sm);
  OK(gc_norm(out, part, dg, n, 0.5f, g_sm, S));
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)g[i] * g[i];
  std::vector<double> rn(1, sqrt(s) * 0.5);
  check(L<T>("gradient norm"), download(out, 1), rn, 1e-5);
  cudaFree(dp), cudaFree(dm), cudaFree(dv), cudaFree(dg), cudaFree(low), cudaFree(dck);
  cudaFree(out), cudaFree(part);
}

template <typename T> static void run_all(rng &r, gc_mm_t *fused, gc_mm_t *plain) {
  test_layernorm<T>(r, 3000, 768);
  test_layernorm<T>(r, 257, 64);
  test_layernorm<T>(r, 2049, 1280); /* gpt2-774m: 5 warps a row */
  test_layernorm<T>(r, 301, 1200);  /* a row's last warp part empty */
  test_colsum<T>(r, 3001, 1288); /* rows left over after 4 a step */
  test_colsum<T>(r, 5, 40);
  test_colsum_ld<T>(r, 3001, 768, 2304); /* the query's columns of gpt2-124m's dqkv */
  test_colsum_ld<T>(r, 37, 40, 120);
  test_vbias<T>(r, 768);
  test_vbias<T>(r, 1280); /* gpt2-774m: 5 columns a thread */
  test_vbias<T>(r, 2048);
  test_vbias<T>(r, 40);
  test_linear<T>(r, fused, "cuBLASLt");
  test_linear<T>(r, plain, "fallback");
  test_dgelu_sm90<T>(r, 256, 384, 128);
  test_dgelu_sm90<T>(r, 1000, 1536, 384); /* rows end inside a tile */
  test_dgelu_sm90<T>(r, 64, 100, 64);     /* K not a multiple of 8: not served */
  test_gelu_sm90<T>(r, 256, 192, 384);
  test_gelu_sm90<T>(r, 1000, 384, 1536); /* rows end inside a tile */
  test_gelu_sm90<T>(r, 64, 100, 64);     /* K not a multiple of 8: not served */
  if (!std::is_same<T, float>::value)
    test_attention<T>(r, 2, 256, 3, 64); /* tensor-core path */
  test_attention<T>(r, 2, 100, 2, 32);   /* generic path */
  test_crossentropy<T>(r, 37, 1000, 1024);
  test_crossentropy<T>(r, 5, 50257, 50304); /* gpt2's padded vocabulary */
  test_crossentropy<T>(r, 4, 1001, 1016);   /* V a vector short of Vp and odd */
  test_crossentropy<T>(r, 3, 70000, 70016); /* longer rows: the streaming kernel */
  test_encoder<T>(r, 3, 50, 64, 100);
  test_adamw<T>(r);
}

/* GPT_TEST_TIME=1: the tensor-core attention kernels' tile shapes timed at
 * gpt2-124m's shapes (B16 NH12 T1024 HD64, bf16), median of 20 runs. */
static void time_attention(void) {
  const int B = 16, NH = 12, Tn = 1024, HD = 64, C = NH * HD, N = B * Tn;
  rng r(99);
  bf16 *qkv = upload<bf16>(r.normals((size_t)N * 3 * C, 1.0));
  bf16 *dy = upload<bf16>(r.normals((size_t)N * C, 1.0));
  bf16 *out = poisoned<bf16>((size_t)N * C), *dqkv = poisoned<bf16>((size_t)N * 3 * C);
  float *lse = poisoned<float>((size_t)B * NH * Tn);
  float *scratch = poisoned<float>(gc_attention_scratch(GPT_BF16, B, Tn, NH, HD));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const double ffwd = 4.0 * B * NH * HD * (double)Tn * Tn / 2, fbwd = 2.5 * ffwd;
  auto time_one = [&](int f, int b, int st) {
    gc_attention_variant(f, b);
    gc_attention_stages(st);
    std::vector<float> tf, tb;
    for (int i = 0; i < 21; i++) {
      float ms;
      CK(cudaEventRecord(e0, S));
      OK(gc_attention_fwd<bf16>(out, lse, qkv, B, Tn, NH, HD, S));
      CK(cudaEventRecord(e1, S));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i)
        tf.push_back(ms);
      CK(cudaEventRecord(e0, S));
      OK(gc_attention_bwd<bf16>(dqkv, scratch, dy, qkv, out, lse, B, Tn, NH, HD, S));
      CK(cudaEventRecord(e1, S));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i)
        tb.push_back(ms);
    }
    std::sort(tf.begin(), tf.end());
    std::sort(tb.begin(), tb.end());
    printf("attention %s: fwd %.3f ms (%.0f TFLOPS), bwd %.3f ms (%.0f TFLOPS, causal flops)\n",
           gc_attention_describe(), tf[10], ffwd / tf[10] / 1e9, tb[10], fbwd / tb[10] / 1e9);
  };
  /* each forward with backward 0, each backward with forward 0, and the
   * pairs of the same index; the wgmma ones at each pipeline depth */
  int nf = 0, nb = 0;
  gc_attention_variants(&nf, &nb);
  for (int f = 0; f < nf; f++)
    for (int b = 0; b < nb; b++) {
      if (f != b && f != 0 && b != 0)
        continue;
      const int wgmma = f >= 3 || b >= 2;
      for (int st = wgmma ? 2 : 3; st <= (wgmma ? 4 : 3); st++)
        time_one(f, b, st);
    }
  cudaFree(qkv), cudaFree(dy), cudaFree(out), cudaFree(dqkv), cudaFree(lse), cudaFree(scratch);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  gpu_or_skip();
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  g_sm = p.multiProcessorCount;
  const int cc = p.major * 10 + p.minor;
  printf("device: %s (sm_%d, %d SMs)\n", p.name, cc, g_sm);
  OK(gc_check_image(cc));
  gc_attention_init(cc);
  CK(cudaStreamCreate(&S));
  gc_mm_t *fused = nullptr, *plain = nullptr;
  /* a tuning cache of this test's own, empty: the fused context times */
  char cache_dir[] = "/tmp/gpt-tune-test-XXXXXX", cache[64];
  if (mkdtemp(cache_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(cache, sizeof(cache), "%s/t.txt", cache_dir);
  setenv("GPT_CUDA_TUNE_CACHE", cache, 1);
  unsetenv("GPT_CUDA_TUNE"); /* the fused context times its candidates (default) */
  OK(gc_mm_create(&fused, 32u << 20, 1));
  setenv("GPT_CUDA_TUNE", "0", 1); /* the plain one keeps the heuristic's first */
  OK(gc_mm_create(&plain, 32u << 20, 0));
  unsetenv("GPT_CUDA_TUNE");
  rng r(20261201);
  test_sumsq_blocks(r, 65536 * 5 + 4098, 65536, 0); /* float4 path, a tail of 2 */
  test_sumsq_blocks(r, 4096 * 3 + 1, 4096, 1);      /* not on 16 bytes: scalar */
  test_sumsq_blocks(r, 1000, 4096, 0);              /* one short block */
  run_all<float>(r, fused, plain);
  if (cc >= 80)
    run_all<bf16>(r, fused, plain);
  run_all<f16>(r, fused, plain);
  /* every kernel variant computes the same function (run_all tested the
   * default pair); the wgmma ones where this GPU and build have them */
  int nf = 0, nb = 0;
  const int wg = gc_attention_variants(&nf, &nb);
  printf("attention variants: %d forward, %d backward (wgmma %s)\n", nf, nb,
         wg ? "built and usable" : "not usable here");
  if (cc == 90)
    expect("wgmma attention built for this sm_90 GPU", wg);
  for (int v = 0; v < (nf > nb ? nf : nb); v++)
    for (int st = 2; st <= 4; st++) {
      const int f = v < nf ? v : 0, b = v < nb ? v : 0;
      if (st != 3 && f < 3 && b < 2) /* the copy pipeline's depth: wgmma kernels only */
        continue;
      gc_attention_variant(f, b);
      gc_attention_stages(st);
      printf("attention variant: %s\n", gc_attention_describe());
      test_attention<bf16>(r, 2, 256, 3, 64);
      test_attention<f16>(r, 1, 384, 2, 64);
      test_attention<bf16>(r, 1, 128, 1, 64); /* one block of 128 */
    }
  gc_attention_init(cc); /* back to the defaults */
  {
    /* cuDNN's fused attention (libgpt_cudnn.so), where it loads: the same
     * function as the reference, in the shapes prepared for it, while other
     * shapes keep the in-tree kernels. GPT_TEST_CUDNN=1 (the GPU machine's
     * runs, where cuDNN is installed) makes its absence a failure. */
    int used = gc_attention_prepare(GPT_BF16, 2, 256, 3, 64);
    printf("cuDNN attention: %s\n", gc_attention_dnn_status());
    const char *want = getenv("GPT_TEST_CUDNN");
    if (want && strcmp(want, "1") == 0)
      expect("cuDNN attention loaded (GPT_TEST_CUDNN=1)", used);
    if (used) {
      expect("cuDNN attention holds a workspace", gc_attention_dnn_bytes() > 0);
      test_attention<bf16>(r, 2, 256, 3, 64, 1);
      test_attention<bf16>(r, 1, 384, 2, 64); /* another shape: the in-tree kernels */
      expect("fp16 prepared", gc_attention_prepare(GPT_FP16, 1, 384, 2, 64));
      test_attention<f16>(r, 1, 384, 2, 64, 1);
      test_attention<bf16>(r, 2, 256, 3, 64); /* released by the new shape */
      gc_attention_release();
      expect("no workspace after release", gc_attention_dnn_bytes() == 0);
    }
  }
  if (getenv("GPT_TEST_TIME")) {
    time_attention();
    gc_attention_init(cc);
  }
  printf("cuBLASLt epilogue fallbacks (fused context): %d, products tuned: %d\n",
         gc_mm_fallbacks(fused), gc_mm_tuned(fused));
  expect("cuBLASLt tuning ran", gc_mm_tuned(fused) > 0);
  expect("no tuning cache hit from an empty cache", gc_mm_cache_hits(fused) == 0);
  {
    /* the choices are in the file, one line each; a new context takes
     * them (the algorithm still among the heuristic's candidates) and
     * times nothing */
    FILE *f = fopen(cache, "r");
    char line[1024];
    int lines = 0;
    while (f && fgets(line, sizeof(line), f))
      lines += line[0] != '#' && strncmp(line, "launch-cublaslt-tune", 20) != 0;
    if (f)
      fclose(f);
    printf("tuning cache %s: %d entries\n", cache, lines);
    expect("the tuning cache holds the timed choices", lines > 0 && lines <= gc_mm_tuned(fused));
    gc_mm_t *again = nullptr;
    OK(gc_mm_create(&again, 32u << 20, 1));
    run_all<float>(r, again, plain);
    printf("second context: %d products tuned, %d from the tuning cache\n",
           gc_mm_tuned(again), gc_mm_cache_hits(again));
    expect("the second context takes the cached choices", gc_mm_cache_hits(again) > 0 &&
                                                          gc_mm_tuned(again) == 0);
    CK(cudaDeviceSynchronize());
    gc_mm_destroy(again);
    unlink(cache);
    rmdir(cache_dir);
  }
  CK(cudaDeviceSynchronize());
  gc_mm_destroy(fused);
  gc_mm_destroy(plain);
  printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
