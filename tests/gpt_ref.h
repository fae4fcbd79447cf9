/* gpt_ref.h - double-precision reference forwards of GPT-2's layers, for
 * the finite-difference tests of the CPU layers (tests/test_gpt_layers.c)
 * and of the whole model (tests/test_gpt_model.c). Naive loops, written
 * straight from the definitions. */
#ifndef GPT_REF_H
#define GPT_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*, uniform in [-1, 1) */
static inline double ref_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (double)((*s * 2685821657736338717ULL) >> 11) / 4503599627370496.0 - 1.0;
}

static inline void ref_matmul(double *out, const double *inp, const double *w,
                              const double *bias, int BT, int C, int OC) {
  for (int i = 0; i < BT; i++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++)
        s += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
      out[(size_t)i * OC + o] = s;
    }
}

static inline void ref_layernorm(double *out, const double *inp,
                                 const double *w, const double *b, int BT,
                                 int C) {
  for (int i = 0; i < BT; i++) {
    const double *x = inp + (size_t)i * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++)
      m += x[c];
    m /= C;
    for (int c = 0; c < C; c++)
      v += (x[c] - m) * (x[c] - m);
    v /= C;
    for (int c = 0; c < C; c++)
      out[(size_t)i * C + c] = (x[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
  }
}

static inline void ref_attention(double *out, const double *qkv, int B, int T,
                                 int C, int NH) {
  int hs = C / NH;
  double *p = malloc((size_t)T * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) {
          const double *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
          double s = 0;
          for (int i = 0; i < hs; i++)
            s += q[i] * k[i];
          p[u] = s / sqrt((double)hs);
          if (p[u] > mx)
            mx = p[u];
        }
        for (int u = 0; u <= t; u++) {
          p[u] = exp(p[u] - mx);
          sum += p[u];
        }
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int u = 0; u <= t; u++)
            o += p[u] / sum * qkv[((size_t)b * T + u) * 3 * C + 2 * C + h * hs + i];
          out[((size_t)b * T + t) * C + h * hs + i] = o;
        }
      }
  free(p);
}

static inline double ref_gelu1(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* mean over rows of -log softmax(logits[:V])[target] */
static inline double ref_crossentropy(const double *logits,
                                      const int32_t *targets, int BT, int V,
                                      int Vp) {
  double total = 0;
  for (int i = 0; i < BT; i++) {
    const double *l = logits + (size_t)i * Vp;
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
      if (l[v] > mx)
        mx = l[v];
    for (int v = 0; v < V; v++)
      s += exp(l[v] - mx);
    total += -(l[targets[i]] - mx - log(s));
  }
  return total / BT;
}

#endif
