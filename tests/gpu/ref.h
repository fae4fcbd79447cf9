/* ref.h - GPT-2 layer functions in float64 on the CPU: the reference every
 * CUDA kernel and the whole CUDA model are checked against. Same layouts as
 * the backend (gpt.h): rows of C channels, qkv rows [q | k | v], heads of HD
 * inside each, weights [out][in]. Backward functions add (+=) into their
 * gradients. Written for the GPU tests; the runtime's CPU backend
 * (model/gpt_cpu.c) implements the same functions in fp32. */
#ifndef GPU_TEST_REF_H
#define GPU_TEST_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "gpt.h"

namespace ref {

typedef std::vector<double> vec;

inline void layernorm_fwd(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *r = x + (size_t)n * C;
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++)
      mu += r[c];
    mu /= C;
    for (int c = 0; c < C; c++)
      var += (r[c] - mu) * (r[c] - mu);
    double rs = 1.0 / sqrt(var / C + 1e-5);
    for (int c = 0; c < C; c++)
      out[(size_t)n * C + c] = (r[c] - mu) * rs * w[c] + b[c];
    mean[n] = mu;
    rstd[n] = rs;
  }
}

inline void layernorm_bwd(double *dx, double *dw, double *db, const double *dout,
                          const double *x, const double *w, const double *mean,
                          const double *rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *dy = dout + (size_t)n * C, *r = x + (size_t)n * C;
    double s1 = 0, s2 = 0;
    for (int c = 0; c < C; c++) {
      double xh = (r[c] - mean[n]) * rstd[n], dn = dy[c] * w[c];
      s1 += dn;
      s2 += dn * xh;
    }
    s1 /= C;
    s2 /= C;
    for (int c = 0; c < C; c++) {
      double xh = (r[c] - mean[n]) * rstd[n];
      dx[(size_t)n * C + c] += (dy[c] * w[c] - s1 - xh * s2) * rstd[n];
      dw[c] += dy[c] * xh;
      db[c] += dy[c];
    }
  }
}

/* out[N][O] = x[N][K] w[O][K]^T + b */
inline void matmul_fwd(double *out, const double *x, const double *w, const double *b, int N,
                       int K, int O) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++) {
      double s = b ? b[o] : 0.0;
      const double *xr = x + (size_t)n * K, *wr = w + (size_t)o * K;
      for (int k = 0; k < K; k++)
        s += xr[k] * wr[k];
      out[(size_t)n * O + o] = s;
    }
}

inline void matmul_bwd(double *dx, double *dw, double *db, const double *dout, const double *x,
                       const double *w, int N, int K, int O) {
  for (int n = 0; n < N; n++) {
    const double *dy = dout + (size_t)n * O;
    for (int o = 0; o < O; o++) {
      const double g = dy[o];
      if (g == 0.0)
        continue;
      const double *wr = w + (size_t)o * K, *xr = x + (size_t)n * K;
      if (dx)
        for (int k = 0; k < K; k++)
          dx[(size_t)n * K + k] += g * wr[k];
      if (dw)
        for (int k = 0; k < K; k++)
          dw[(size_t)o * K + k] += g * xr[k];
      if (db)
        db[o] += g;
    }
  }
}

inline double gelu(double x) {
  const double k = sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
inline double gelu_grad(double x) {
  const double k = sqrt(2.0 / M_PI);
  double u = k * (x + 0.044715 * x * x * x), th = tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* Softmax probabilities of query t of head h over keys 0..t, into p. */
inline void attention_probs(double *p, const double *qkv, int b, int h, int t, int T, int NH,
                            int HD) {
  const int C = NH * HD;
  const double sc = 1.0 / sqrt((double)HD);
  const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * HD;
  double mx = -INFINITY, sum = 0;
  for (int j = 0; j <= t; j++) {
    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * HD;
    double s = 0;
    for (int d = 0; d < HD; d++)
      s += q[d] * k[d];
    p[j] = s * sc;
    mx = fmax(mx, p[j]);
  }
  for (int j = 0; j <= t; j++) {
    p[j] = exp(p[j] - mx);
    sum += p[j];
  }
  for (int j = 0; j <= t; j++)
    p[j] /= sum;
}

/* Causal attention; out [N][C]. */
inline void attention_fwd(double *out, const double *qkv, int B, int T, int NH, int HD) {
  const int C = NH * HD;
  std::vector<double> p(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        attention_probs(p.data(), qkv, b, h, t, T, NH, HD);
        double *o = out + ((size_t)b * T + t) * C + h * HD;
        for (int d = 0; d < HD; d++)
          o[d] = 0;
        for (int j = 0; j <= t; j++) {
          const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HD;
          for (int d = 0; d < HD; d++)
            o[d] += p[j] * v[d];
        }
      }
}

inline void attention_bwd(double *dqkv, const double *dout, const double *qkv, int B, int T,
                          int NH, int HD) {
  const int C = NH * HD;
  const double sc = 1.0 / sqrt((double)HD);
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const size_t qrow = ((size_t)b * T + t) * 3 * C + h * HD;
        const double *q = qkv + qrow;
        attention_probs(p.data(), qkv, b, h, t, T, NH, HD);
        const double *dy = dout + ((size_t)b * T + t) * C + h * HD;
        double dsum = 0;
        for (int j = 0; j <= t; j++) {
          const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HD;
          double s = 0;
          for (int d = 0; d < HD; d++)
            s += dy[d] * v[d];
          dp[j] = s;
          dsum += p[j] * s;
          double *dv = dqkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HD;
          for (int d = 0; d < HD; d++)
            dv[d] += p[j] * dy[d];
        }
        for (int j = 0; j <= t; j++) {
          const double ds = p[j] * (dp[j] - dsum) * sc;
          const size_t krow = ((size_t)b * T + j) * 3 * C + C + h * HD;
          for (int d = 0; d < HD; d++) {
            dqkv[qrow + d] += ds * qkv[krow + d];
            dqkv[krow + d] += ds * q[d];
          }
        }
      }
}

/* Mean cross-entropy over N rows of Vp logits (V real); dlogits (may be
 * NULL) = (softmax - onehot) * dscale. Returns the mean loss. */
inline double crossentropy(double *dlogits, const double *logits, const int *tgt, int N, int V,
                           int Vp, double dscale, double *losses = nullptr) {
  double total = 0;
  for (int n = 0; n < N; n++) {
    const double *x = logits + (size_t)n * Vp;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++)
      mx = fmax(mx, x[i]);
    double s = 0;
    for (int i = 0; i < V; i++)
      s += exp(x[i] - mx);
    const double lse = mx + log(s);
    total += lse - x[tgt[n]];
    if (losses)
      losses[n] = lse - x[tgt[n]];
    if (dlogits)
      for (int i = 0; i < Vp; i++)
        dlogits[(size_t)n * Vp + i] =
            i < V ? (exp(x[i] - lse) - (i == tgt[n] ? 1.0 : 0.0)) * dscale : 0.0;
  }
  return total / N;
}

/* The whole model: forward with loss, backward into grads (same flat
 * layout as the parameters), gradients of the mean loss. */
inline double model_fwd_bwd(const gpt_config_t *cfg, const float *paramsf, const int *tok,
                            const int *tgt, int B, int T, std::vector<double> &grads) {
  const int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads;
  const int V = cfg->vocab_size, Vp = cfg->padded_vocab, N = B * T, HD = C / NH;
  const size_t np = gpt_num_params(cfg);
  vec P(paramsf, paramsf + np);
  grads.assign(np, 0.0);
  auto w = [&](int which, int l) { return &P[gpt_tensor_offset(cfg, which, l, NULL)]; };
  auto g = [&](int which, int l) { return &grads[gpt_tensor_offset(cfg, which, l, NULL)]; };
  const size_t NC = (size_t)N * C;
  /* activations per layer */
  std::vector<vec> in(L + 1, vec(NC)), ln1(L, vec(NC)), qkv(L, vec(3 * NC)), att(L, vec(NC)),
      res2(L, vec(NC)), ln2(L, vec(NC)), pre(L, vec(4 * NC)), gl(L, vec(4 * NC));
  std::vector<vec> m1(L, vec(N)), r1(L, vec(N)), m2(L, vec(N)), r2(L, vec(N));
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      in[0][(size_t)n * C + c] =
          w(GPT_WTE, 0)[(size_t)tok[n] * C + c] + w(GPT_WPE, 0)[(size_t)(n % T) * C + c];
  for (int l = 0; l < L; l++) {
    layernorm_fwd(ln1[l].data(), m1[l].data(), r1[l].data(), in[l].data(), w(GPT_LN1W, l),
                  w(GPT_LN1B, l), N, C);
    matmul_fwd(qkv[l].data(), ln1[l].data(), w(GPT_QKVW, l), w(GPT_QKVB, l), N, C, 3 * C);
    attention_fwd(att[l].data(), qkv[l].data(), B, T, NH, HD);
    matmul_fwd(res2[l].data(), att[l].data(), w(GPT_ATTPROJW, l), w(GPT_ATTPROJB, l), N, C, C);
    for (size_t i = 0; i < NC; i++)
      res2[l][i] += in[l][i];
    layernorm_fwd(ln2[l].data(), m2[l].data(), r2[l].data(), res2[l].data(), w(GPT_LN2W, l),
                  w(GPT_LN2B, l), N, C);
    matmul_fwd(pre[l].data(), ln2[l].data(), w(GPT_FCW, l), w(GPT_FCB, l), N, C, 4 * C);
    for (size_t i = 0; i < 4 * NC; i++)
      gl[l][i] = gelu(pre[l][i]);
    matmul_fwd(in[l + 1].data(), gl[l].data(), w(GPT_FCPROJW, l), w(GPT_FCPROJB, l), N, 4 * C,
               C);
    for (size_t i = 0; i < NC; i++)
      in[l + 1][i] += res2[l][i];
  }
  vec lnf(NC), mf(N), rf(N), logits((size_t)N * Vp), dlogits((size_t)N * Vp);
  layernorm_fwd(lnf.data(), mf.data(), rf.data(), in[L].data(), w(GPT_LNFW, 0), w(GPT_LNFB, 0),
                N, C);
  matmul_fwd(logits.data(), lnf.data(), w(GPT_WTE, 0), NULL, N, C, Vp);
  const double loss = crossentropy(dlogits.data(), logits.data(), tgt, N, V, Vp, 1.0 / N);
  /* backward */
  vec dlnf(NC, 0.0), dres(NC, 0.0), dbuf(NC), dbig(4 * NC), dq(3 * NC);
  matmul_bwd(dlnf.data(), g(GPT_WTE, 0), NULL, dlogits.data(), lnf.data(), w(GPT_WTE, 0), N, C,
             Vp);
  layernorm_bwd(dres.data(), g(GPT_LNFW, 0), g(GPT_LNFB, 0), dlnf.data(), in[L].data(),
                w(GPT_LNFW, 0), mf.data(), rf.data(), N, C);
  for (int l = L - 1; l >= 0; l--) {
    std::fill(dbig.begin(), dbig.end(), 0.0);
    matmul_bwd(dbig.data(), g(GPT_FCPROJW, l), g(GPT_FCPROJB, l), dres.data(), gl[l].data(),
               w(GPT_FCPROJW, l), N, 4 * C, C);
    for (size_t i = 0; i < 4 * NC; i++)
      dbig[i] *= gelu_grad(pre[l][i]);
    std::fill(dbuf.begin(), dbuf.end(), 0.0);
    matmul_bwd(dbuf.data(), g(GPT_FCW, l), g(GPT_FCB, l), dbig.data(), ln2[l].data(),
               w(GPT_FCW, l), N, C, 4 * C);
    layernorm_bwd(dres.data(), g(GPT_LN2W, l), g(GPT_LN2B, l), dbuf.data(), res2[l].data(),
                  w(GPT_LN2W, l), m2[l].data(), r2[l].data(), N, C);
    std::fill(dbuf.begin(), dbuf.end(), 0.0);
    matmul_bwd(dbuf.data(), g(GPT_ATTPROJW, l), g(GPT_ATTPROJB, l), dres.data(), att[l].data(),
               w(GPT_ATTPROJW, l), N, C, C);
    std::fill(dq.begin(), dq.end(), 0.0);
    attention_bwd(dq.data(), dbuf.data(), qkv[l].data(), B, T, NH, HD);
    std::fill(dbuf.begin(), dbuf.end(), 0.0);
    matmul_bwd(dbuf.data(), g(GPT_QKVW, l), g(GPT_QKVB, l), dq.data(), ln1[l].data(),
               w(GPT_QKVW, l), N, C, 3 * C);
    layernorm_bwd(dres.data(), g(GPT_LN1W, l), g(GPT_LN1B, l), dbuf.data(), in[l].data(),
                  w(GPT_LN1W, l), m1[l].data(), r1[l].data(), N, C);
  }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      g(GPT_WTE, 0)[(size_t)tok[n] * C + c] += dres[(size_t)n * C + c];
      g(GPT_WPE, 0)[(size_t)(n % T) * C + c] += dres[(size_t)n * C + c];
    }
  return loss;
}

} // namespace ref
#endif /* GPU_TEST_REF_H */
