/* cpu_layers.c - GPT-2's layers on the CPU, fp32, after llm.c's
 * train_gpt2.c, spread over the pool so that every output element is
 * computed by one thread in a fixed order (gpt_cpu.h, "Determinism"). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cpu_int.h"

#define LN_EPS 1e-5f
/* Channel ranges split between threads are multiples of one cache line. */
#define CH_GRAIN 16
#define EW_GRAIN 4096

/* ---- encoder ---------------------------------------------------------------- */

typedef struct enc_s {
  float *out, *dwte, *dwpe;
  const float *dout, *wte, *wpe;
  const int32_t *inp;
  int T, C, BT;
} enc_t;

static void enc_fwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const enc_t *e = ctx;
  for (size_t bt = lo; bt < hi; bt++) {
    float *o = e->out + bt * (size_t)e->C;
    const float *wt = e->wte + (size_t)e->inp[bt] * (size_t)e->C;
    const float *wp = e->wpe + (bt % (size_t)e->T) * (size_t)e->C;
    for (int c = 0; c < e->C; c++)
      o[c] = wt[c] + wp[c];
  }
}

void cpu_encoder_forward(cpu_pool_t *p, float *out, const int32_t *inp,
                         const float *wte, const float *wpe, int B, int T,
                         int C) {
  enc_t e = {.out = out, .inp = inp, .wte = wte, .wpe = wpe, .T = T, .C = C};
  cpu_parallel(p, (size_t)B * (size_t)T, 1, enc_fwd_task, &e);
}

/* Threads own channel ranges; each adds the rows in (b, t) order. */
static void enc_bwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const enc_t *e = ctx;
  for (int bt = 0; bt < e->BT; bt++) {
    const float *d = e->dout + (size_t)bt * (size_t)e->C;
    float *wt = e->dwte + (size_t)e->inp[bt] * (size_t)e->C;
    float *wp = e->dwpe + (size_t)(bt % e->T) * (size_t)e->C;
    for (size_t c = lo; c < hi; c++) {
      wt[c] += d[c];
      wp[c] += d[c];
    }
  }
}

void cpu_encoder_backward(cpu_pool_t *p, float *dwte, float *dwpe,
                          const float *dout, const int32_t *inp, int B, int T,
                          int C) {
  enc_t e = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .inp = inp, .T = T,
             .C = C, .BT = B * T};
  cpu_parallel(p, (size_t)C, CH_GRAIN, enc_bwd_task, &e);
}

/* ---- layernorm -------------------------------------------------------------- */

typedef struct ln_s {
  float *out, *mean, *rstd, *dinp, *dweight, *dbias;
  const float *inp, *weight, *bias, *dout, *cmean, *crstd;
  int C, BT;
} ln_t;

static void ln_fwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ln_t *l = ctx;
  int C = l->C;
  for (size_t bt = lo; bt < hi; bt++) {
    const float *x = l->inp + bt * (size_t)C;
    float *o = l->out + bt * (size_t)C;
    float m = 0.0f, v = 0.0f, s;
    for (int i = 0; i < C; i++)
      m += x[i];
    m /= (float)C;
    for (int i = 0; i < C; i++) {
      float d = x[i] - m;
      v += d * d;
    }
    v /= (float)C;
    s = 1.0f / sqrtf(v + LN_EPS);
    for (int i = 0; i < C; i++)
      o[i] = (s * (x[i] - m)) * l->weight[i] + l->bias[i];
    l->mean[bt] = m;
    l->rstd[bt] = s;
  }
}

void cpu_layernorm_forward(cpu_pool_t *p, float *out, float *mean, float *rstd,
                           const float *inp, const float *weight,
                           const float *bias, int B, int T, int C) {
  ln_t l = {.out = out, .mean = mean, .rstd = rstd, .inp = inp,
            .weight = weight, .bias = bias, .C = C};
  cpu_parallel(p, (size_t)B * (size_t)T, 1, ln_fwd_task, &l);
}

/* dinp, row by row. */
static void ln_bwd_rows(void *ctx, size_t lo, size_t hi, int tid) {
  const ln_t *l = ctx;
  int C = l->C;
  for (size_t bt = lo; bt < hi; bt++) {
    const float *x = l->inp + bt * (size_t)C, *d = l->dout + bt * (size_t)C;
    float *di = l->dinp + bt * (size_t)C;
    float m = l->cmean[bt], s = l->crstd[bt], dmean = 0.0f, dnmean = 0.0f;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s, dnorm = l->weight[i] * d[i];
      dmean += dnorm;
      dnmean += dnorm * norm;
    }
    dmean /= (float)C;
    dnmean /= (float)C;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s, dnorm = l->weight[i] * d[i];
      di[i] += (dnorm - dmean - norm * dnmean) * s;
    }
  }
}

/* dweight and dbias, channel ranges, rows in order. */
static void ln_bwd_cols(void *ctx, size_t lo, size_t hi, int tid) {
  const ln_t *l = ctx;
  int C = l->C;
  for (int bt = 0; bt < l->BT; bt++) {
    const float *x = l->inp + (size_t)bt * C, *d = l->dout + (size_t)bt * C;
    float m = l->cmean[bt], s = l->crstd[bt];
    for (size_t i = lo; i < hi; i++) {
      if (l->dbias)
        l->dbias[i] += d[i];
      if (l->dweight)
        l->dweight[i] += (x[i] - m) * s * d[i];
    }
  }
}

void cpu_layernorm_backward(cpu_pool_t *p, float *dinp, float *dweight,
                            float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean,
                            const float *rstd, int B, int T, int C) {
  ln_t l = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout,
            .inp = inp, .weight = weight, .cmean = mean, .crstd = rstd,
            .C = C, .BT = B * T};
  if (dinp)
    cpu_parallel(p, (size_t)B * (size_t)T, 1, ln_bwd_rows, &l);
  if (dweight || dbias)
    cpu_parallel(p, (size_t)C, CH_GRAIN, ln_bwd_cols, &l);
}

/* ---- matmul ------------------------------------------------------------------ */

typedef struct mm_s {
  float *out, *dbias;
  const float *bias, *dout;
  int OC, BT;
} mm_t;

static void mm_bias_task(void *ctx, size_t lo, size_t hi, int tid) {
  const mm_t *m = ctx;
  for (size_t bt = lo; bt < hi; bt++) {
    float *o = m->out + bt * (size_t)m->OC;
    if (m->bias)
      memcpy(o, m->bias, (size_t)m->OC * sizeof(float));
    else
      memset(o, 0, (size_t)m->OC * sizeof(float));
  }
}

void cpu_matmul_forward(cpu_pool_t *p, float *out, const float *inp,
                        const float *weight, const float *bias, int B, int T,
                        int C, int OC) {
  mm_t m = {.out = out, .bias = bias, .OC = OC};
  int BT = B * T;
  cpu_parallel(p, (size_t)BT, 16, mm_bias_task, &m);
  /* out[bt][o] += Σ_c inp[bt][c] · weight[o][c] */
  cpu_gemm(p, BT, OC, C, inp, (size_t)C, 1, weight, 1, (size_t)C, out,
           (size_t)OC);
}

static void mm_dbias_task(void *ctx, size_t lo, size_t hi, int tid) {
  const mm_t *m = ctx;
  for (int bt = 0; bt < m->BT; bt++) {
    const float *d = m->dout + (size_t)bt * (size_t)m->OC;
    for (size_t o = lo; o < hi; o++)
      m->dbias[o] += d[o];
  }
}

void cpu_matmul_backward(cpu_pool_t *p, float *dinp, float *dweight,
                         float *dbias, const float *dout, const float *inp,
                         const float *weight, int B, int T, int C, int OC) {
  int BT = B * T;
  if (dinp) /* dinp[bt][c] += Σ_o dout[bt][o] · weight[o][c] */
    cpu_gemm(p, BT, C, OC, dout, (size_t)OC, 1, weight, (size_t)C, 1, dinp,
             (size_t)C);
  if (dweight) /* dweight[o][c] += Σ_bt dout[bt][o] · inp[bt][c] */
    cpu_gemm(p, OC, C, BT, dout, 1, (size_t)OC, inp, (size_t)C, 1, dweight,
             (size_t)C);
  if (dbias) {
    mm_t m = {.dbias = dbias, .dout = dout, .OC = OC, .BT = BT};
    cpu_parallel(p, (size_t)OC, CH_GRAIN, mm_dbias_task, &m);
  }
}

/* ---- attention ----------------------------------------------------------------- */

typedef struct att_s {
  float *out, *att, *dinp;
  const float *inp, *catt, *dout;
  int T, C, NH;
  cpu_pool_t *pool;
} att_t;

/* Queries are taken in blocks of ATT_RB rows: each block's scores and
 * gradients are matrix products (cpu__gemm_serial on the task's thread)
 * over the positions up to the block's last one; entries above the
 * diagonal are exact zeros, which leave every sum unchanged. */
#define ATT_RB 64

static int att_nc(int T) {
  int n = (T + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
  return n < GEMM_NC ? n : GEMM_NC;
}

/* Per thread: a block of score gradients (ATT_RB x T), then the packed
 * blocks of B of the products. */
size_t cpu__attention_scratch(int T) {
  return (size_t)ATT_RB * (size_t)T + (size_t)GEMM_KC * (size_t)att_nc(T);
}

/* Softmax of row t of a block (scores at columns <= t, scaled), zeros
 * after it. */
static void att_softmax_row(float *row, int t, int T, float scale) {
  float maxv = -INFINITY, sum = 0.0f;
  for (int t2 = 0; t2 <= t; t2++) {
    row[t2] *= scale;
    if (row[t2] > maxv)
      maxv = row[t2];
  }
  for (int t2 = 0; t2 <= t; t2++) {
    float e = expf(row[t2] - maxv);
    row[t2] = e;
    sum += e;
  }
  for (int t2 = 0; t2 <= t; t2++)
    row[t2] /= sum;
  for (int t2 = t + 1; t2 < T; t2++)
    row[t2] = 0.0f;
}

static void att_fwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const att_t *a = ctx;
  int T = a->T, C = a->C, NH = a->NH, hs = C / NH, C3 = 3 * C, nc = att_nc(T);
  float scale = 1.0f / sqrtf((float)hs);
  float *bp = cpu__pool_extra(a->pool, tid) + (size_t)ATT_RB * T;
  for (size_t bh = lo; bh < hi; bh++) {
    size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
    const float *q = a->inp + b * (size_t)T * C3 + h * (size_t)hs;
    const float *k = q + C, *v = q + 2 * C;
    float *att = a->att + bh * (size_t)T * (size_t)T;
    float *o = a->out + b * (size_t)T * C + h * (size_t)hs;
    for (int t = 0; t < T; t++)
      memset(o + (size_t)t * C, 0, (size_t)hs * sizeof(float));
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
      int rb = T - i0 < ATT_RB ? T - i0 : ATT_RB, i1 = i0 + rb;
      float *s = att + (size_t)i0 * T;
      for (int t = 0; t < rb; t++)
        memset(s + (size_t)t * T, 0, (size_t)i1 * sizeof(float));
      /* scores q · k, summed in channel order */
      cpu__gemm_serial(a->pool, tid, bp, nc, rb, i1, hs, q + (size_t)i0 * C3,
                       (size_t)C3, 1, k, 1, (size_t)C3, s, (size_t)T);
      for (int t = 0; t < rb; t++)
        att_softmax_row(s + (size_t)t * T, i0 + t, T, scale);
      /* out = att · v, summed in position order */
      cpu__gemm_serial(a->pool, tid, bp, nc, rb, hs, i1, s, (size_t)T, 1, v,
                       (size_t)C3, 1, o + (size_t)i0 * C, (size_t)C);
    }
  }
}

int cpu_attention_forward(cpu_pool_t *p, float *out, float *att,
                          const float *inp, int B, int T, int C, int NH) {
  att_t a = {.out = out, .att = att, .inp = inp, .T = T, .C = C, .NH = NH,
             .pool = p};
  if (cpu__pool_reserve(p, cpu__attention_scratch(T)) != 0)
    return -ENOMEM;
  cpu_parallel(p, (size_t)B * (size_t)NH, 1, att_fwd_task, &a);
  return 0;
}

/* One (b, h) pair per unit: its q, k, v gradients are its own channels. */
static void att_bwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const att_t *a = ctx;
  int T = a->T, C = a->C, NH = a->NH, hs = C / NH, C3 = 3 * C, nc = att_nc(T);
  float scale = 1.0f / sqrtf((float)hs);
  float *d = cpu__pool_extra(a->pool, tid), *bp = d + (size_t)ATT_RB * T;
  for (size_t bh = lo; bh < hi; bh++) {
    size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
    const float *q = a->inp + b * (size_t)T * C3 + h * (size_t)hs;
    const float *k = q + C, *v = q + 2 * C;
    const float *att = a->catt + bh * (size_t)T * (size_t)T;
    const float *dout = a->dout + b * (size_t)T * C + h * (size_t)hs;
    float *dq = a->dinp + b * (size_t)T * C3 + h * (size_t)hs;
    float *dk = dq + C, *dv = dq + 2 * C;
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
      int rb = T - i0 < ATT_RB ? T - i0 : ATT_RB, i1 = i0 + rb;
      const float *arow = att + (size_t)i0 * T;
      for (int t = 0; t < rb; t++)
        memset(d + (size_t)t * T, 0, (size_t)i1 * sizeof(float));
      /* through out = att · v: datt = dout · v, dv += attᵀ dout */
      cpu__gemm_serial(a->pool, tid, bp, nc, rb, i1, hs, dout + (size_t)i0 * C,
                       (size_t)C, 1, v, 1, (size_t)C3, d, (size_t)T);
      cpu__gemm_serial(a->pool, tid, bp, nc, i1, hs, rb, arow, 1, (size_t)T,
                       dout + (size_t)i0 * C, (size_t)C, 1, dv, (size_t)C3);
      /* through the softmax and the scale */
      for (int t = 0; t < rb; t++) {
        const float *ar = arow + (size_t)t * T;
        float *dr = d + (size_t)t * T, dot = 0.0f;
        for (int t2 = 0; t2 <= i0 + t; t2++)
          dot += ar[t2] * dr[t2];
        for (int t2 = 0; t2 <= i0 + t; t2++)
          dr[t2] = ar[t2] * (dr[t2] - dot) * scale;
        for (int t2 = i0 + t + 1; t2 < i1; t2++)
          dr[t2] = 0.0f;
      }
      /* through the scores q · k: dq += d · k, dk += dᵀ q */
      cpu__gemm_serial(a->pool, tid, bp, nc, rb, hs, i1, d, (size_t)T, 1, k,
                       (size_t)C3, 1, dq + (size_t)i0 * C3, (size_t)C3);
      cpu__gemm_serial(a->pool, tid, bp, nc, i1, hs, rb, d, 1, (size_t)T,
                       q + (size_t)i0 * C3, (size_t)C3, 1, dk, (size_t)C3);
    }
  }
}

int cpu_attention_backward(cpu_pool_t *p, float *dinp, const float *dout,
                           const float *inp, const float *att, int B, int T,
                           int C, int NH) {
  att_t a = {.dinp = dinp, .dout = dout, .inp = inp, .catt = att, .T = T,
             .C = C, .NH = NH, .pool = p};
  if (cpu__pool_reserve(p, cpu__attention_scratch(T)) != 0)
    return -ENOMEM;
  cpu_parallel(p, (size_t)B * (size_t)NH, 1, att_bwd_task, &a);
  return 0;
}

/* ---- elementwise ----------------------------------------------------------------- */

typedef struct ew_s {
  float *out, *out2;
  const float *in, *in2;
} ew_t;

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = k (x + 0.044715 x³), computed
 * as x σ(2u) = x / (1 + exp(-2u)): the same function, one expf instead of a
 * tanhf (a third of a tiny model's time went to tanhf). */
static void gelu_fwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ew_t *e = ctx;
  for (size_t i = lo; i < hi; i++) {
    float x = e->in[i], u = GELU_K * (x + 0.044715f * x * x * x);
    e->out[i] = x / (1.0f + expf(-2.0f * u));
  }
}

void cpu_gelu_forward(cpu_pool_t *p, float *out, const float *inp, size_t N) {
  ew_t e = {.out = out, .in = inp};
  cpu_parallel(p, N, EW_GRAIN, gelu_fwd_task, &e);
}

/* d/dx x σ(2u) = σ + 2 x σ (1 - σ) u' */
static void gelu_bwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ew_t *e = ctx;
  for (size_t i = lo; i < hi; i++) {
    float x = e->in[i], u = GELU_K * (x + 0.044715f * x * x * x);
    float sg = 1.0f / (1.0f + expf(-2.0f * u));
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    e->out[i] += (sg + 2.0f * x * sg * (1.0f - sg) * du) * e->in2[i];
  }
}

void cpu_gelu_backward(cpu_pool_t *p, float *dinp, const float *inp,
                       const float *dout, size_t N) {
  ew_t e = {.out = dinp, .in = inp, .in2 = dout};
  cpu_parallel(p, N, EW_GRAIN, gelu_bwd_task, &e);
}

static void res_fwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ew_t *e = ctx;
  for (size_t i = lo; i < hi; i++)
    e->out[i] = e->in[i] + e->in2[i];
}

void cpu_residual_forward(cpu_pool_t *p, float *out, const float *inp1,
                          const float *inp2, size_t N) {
  ew_t e = {.out = out, .in = inp1, .in2 = inp2};
  cpu_parallel(p, N, EW_GRAIN, res_fwd_task, &e);
}

static void res_bwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ew_t *e = ctx;
  for (size_t i = lo; i < hi; i++) {
    e->out[i] += e->in[i];
    e->out2[i] += e->in[i];
  }
}

void cpu_residual_backward(cpu_pool_t *p, float *dinp1, float *dinp2,
                           const float *dout, size_t N) {
  ew_t e = {.out = dinp1, .out2 = dinp2, .in = dout};
  cpu_parallel(p, N, EW_GRAIN, res_bwd_task, &e);
}

static void add_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ew_t *e = ctx;
  for (size_t i = lo; i < hi; i++)
    e->out[i] += e->in[i];
}

void cpu_add(cpu_pool_t *p, float *y, const float *x, size_t n) {
  ew_t e = {.out = y, .in = x};
  cpu_parallel(p, n, EW_GRAIN, add_task, &e);
}

/* ---- softmax and cross-entropy ----------------------------------------------------- */

typedef struct ce_s {
  float *probs, *losses, *dlogits;
  const float *logits, *cprobs, *dlosses;
  const int32_t *targets;
  int V, Vp;
} ce_t;

static void softmax_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ce_t *c = ctx;
  for (size_t bt = lo; bt < hi; bt++) {
    const float *l = c->logits + bt * (size_t)c->Vp;
    float *pr = c->probs + bt * (size_t)c->Vp;
    float maxv = -INFINITY;
    double sum = 0.0;
    for (int v = 0; v < c->V; v++)
      if (l[v] > maxv)
        maxv = l[v];
    for (int v = 0; v < c->V; v++) {
      pr[v] = expf(l[v] - maxv);
      sum += pr[v];
    }
    for (int v = 0; v < c->V; v++)
      pr[v] = (float)(pr[v] / sum);
    for (int v = c->V; v < c->Vp; v++)
      pr[v] = 0.0f;
  }
}

void cpu_softmax_forward(cpu_pool_t *p, float *probs, const float *logits,
                         int B, int T, int V, int Vp) {
  ce_t c = {.probs = probs, .logits = logits, .V = V, .Vp = Vp};
  cpu_parallel(p, (size_t)B * (size_t)T, 1, softmax_task, &c);
}

void cpu_crossentropy_forward(cpu_pool_t *p, float *losses, const float *probs,
                              const int32_t *targets, int B, int T, int Vp) {
  size_t BT = (size_t)B * (size_t)T;
  /* one log per row: not worth the pool */
  for (size_t bt = 0; bt < BT; bt++)
    losses[bt] = -logf(probs[bt * (size_t)Vp + (size_t)targets[bt]]);
}

static void ce_bwd_task(void *ctx, size_t lo, size_t hi, int tid) {
  const ce_t *c = ctx;
  for (size_t bt = lo; bt < hi; bt++) {
    const float *pr = c->cprobs + bt * (size_t)c->Vp;
    float *dl = c->dlogits + bt * (size_t)c->Vp;
    float d = c->dlosses[bt];
    int32_t ix = c->targets[bt];
    for (int v = 0; v < c->V; v++)
      dl[v] += (pr[v] - (v == ix ? 1.0f : 0.0f)) * d;
  }
}

void cpu_crossentropy_softmax_backward(cpu_pool_t *p, float *dlogits,
                                       const float *dlosses, const float *probs,
                                       const int32_t *targets, int B, int T,
                                       int V, int Vp) {
  ce_t c = {.dlogits = dlogits, .dlosses = dlosses, .cprobs = probs,
            .targets = targets, .V = V, .Vp = Vp};
  cpu_parallel(p, (size_t)B * (size_t)T, 1, ce_bwd_task, &c);
}

/* ---- optimizer and norms -------------------------------------------------------------- */

typedef struct adam_s {
  float *params, *m, *v;
  const float *grads;
  float lr, b1, b2, eps, wd, scale, c1, c2;
} adam_t;

static void adam_task(void *ctx, size_t lo, size_t hi, int tid) {
  const adam_t *a = ctx;
  for (size_t i = lo; i < hi; i++) {
    float g = a->grads[i] * a->scale;
    float m = a->b1 * a->m[i] + (1.0f - a->b1) * g;
    float v = a->b2 * a->v[i] + (1.0f - a->b2) * g * g;
    float mh = m / a->c1, vh = v / a->c2;
    a->m[i] = m;
    a->v[i] = v;
    a->params[i] -= a->lr * (mh / (sqrtf(vh) + a->eps) + a->wd * a->params[i]);
  }
}

void cpu_adamw(cpu_pool_t *p, float *params, const float *grads, float *m,
               float *v, size_t n, const gpt_adamw_t *a, float weight_decay) {
  adam_t t = {.params = params, .m = m, .v = v, .grads = grads, .lr = a->lr,
              .b1 = a->beta1, .b2 = a->beta2, .eps = a->eps,
              .wd = weight_decay, .scale = a->grad_scale};
  t.c1 = 1.0f - powf(a->beta1, (float)a->t);
  t.c2 = 1.0f - powf(a->beta2, (float)a->t);
  cpu_parallel(p, n, EW_GRAIN, adam_task, &t);
}

/* At most SUMSQ_BLOCKS partial sums, blocks sized by n alone. */
#define SUMSQ_BLOCKS 4096

typedef struct sq_s {
  const float *x;
  size_t n, block, b0;
  double *part;
} sq_t;

static void sumsq_task(void *ctx, size_t lo, size_t hi, int tid) {
  const sq_t *s = ctx;
  for (size_t i = lo; i < hi; i++) {
    size_t blk = s->b0 + i;
    size_t a = blk * s->block, b = a + s->block < s->n ? a + s->block : s->n;
    double acc = 0.0;
    for (size_t j = a; j < b; j++)
      acc += (double)s->x[j] * (double)s->x[j];
    s->part[i] = acc;
  }
}

size_t cpu_sumsq_block(size_t n) {
  size_t block = (n + SUMSQ_BLOCKS - 1) / SUMSQ_BLOCKS;
  return block < 4096 ? 4096 : block;
}

void cpu_sumsq_blocks(cpu_pool_t *p, const float *x, size_t n, size_t b0,
                      size_t b1, double *part) {
  sq_t s = {.x = x, .n = n, .block = cpu_sumsq_block(n), .b0 = b0,
            .part = part};
  if (b1 > b0)
    cpu_parallel(p, b1 - b0, 1, sumsq_task, &s);
}

double cpu_sumsq(cpu_pool_t *p, const float *x, size_t n) {
  double part[SUMSQ_BLOCKS], total = 0.0;
  size_t nb;
  if (n == 0)
    return 0.0;
  nb = (n + cpu_sumsq_block(n) - 1) / cpu_sumsq_block(n);
  cpu_sumsq_blocks(p, x, n, 0, nb, part);
  for (size_t i = 0; i < nb; i++)
    total += part[i];
  return total;
}
