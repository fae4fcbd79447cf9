/* The CPU layers of model/gpt_cpu.h: every backward against central
 * differences of a double-precision reference forward (tests/gpt_ref.h),
 * every forward against that reference, the matrix product against naive
 * sums for edge shapes and transposes, AdamW against its formula, and
 * bitwise equality of every layer's results for 1 and 3 threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cpu.h"
#include "gpt_ref.h"
#include "test.h"

static uint64_t seed = 0x1234567;

static float *frand(size_t n, float scale) {
  float *x = malloc(n * sizeof(float));
  ASSERT(x != NULL);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(ref_rand(&seed) * scale);
  return x;
}

static double *to_d(const float *x, size_t n) {
  double *d = malloc(n * sizeof(double));
  ASSERT(d != NULL);
  for (size_t i = 0; i < n; i++)
    d[i] = x[i];
  return d;
}

static float *zeros(size_t n) {
  float *x = calloc(n, sizeof(float));
  ASSERT(x != NULL);
  return x;
}

/* forward of a layer in double, then Σ out · r */
typedef double (*loss_fn)(void *ctx);

/* Central differences of loss() in x (double, n values) at up to 40
 * indices, against the analytic gradient g (fp32). */
static void check_grad(const char *what, double *x, const float *g, size_t n,
                       loss_fn loss, void *ctx) {
  const double h = 1e-5;
  size_t stride = n > 40 ? n / 40 : 1;
  double worst = 0;
  for (size_t i = 0; i < n; i += stride) {
    double keep = x[i], lp, lm, num, err;
    x[i] = keep + h;
    lp = loss(ctx);
    x[i] = keep - h;
    lm = loss(ctx);
    x[i] = keep;
    num = (lp - lm) / (2 * h);
    err = fabs(num - (double)g[i]) / (1.0 + fabs(num));
    if (err > worst)
      worst = err;
    if (err > 1e-4)
      TEST_FAIL("%s: d/dx[%zu] analytic %.7g, finite differences %.7g", what,
                i, (double)g[i], num);
  }
  printf("  %-22s worst relative error %.2e\n", what, worst);
}

static void check_close(const char *what, const float *got, const double *want,
                        size_t n, double tol) {
  for (size_t i = 0; i < n; i++)
    if (fabs((double)got[i] - want[i]) > tol * (1.0 + fabs(want[i])))
      TEST_FAIL("%s[%zu]: %.7g, reference %.7g", what, i, (double)got[i],
                want[i]);
}

static double dot_r(const double *out, const float *r, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += out[i] * r[i];
  return s;
}

/* ---- matmul --------------------------------------------------------------- */

typedef struct mm_case_s {
  int BT, C, OC;
  double *inp, *w, *b, *out;
  float *r;
} mm_case_t;

static double mm_loss(void *ctx) {
  mm_case_t *k = ctx;
  ref_matmul(k->out, k->inp, k->w, k->b, k->BT, k->C, k->OC);
  return dot_r(k->out, k->r, (size_t)k->BT * k->OC);
}

static void test_matmul(cpu_pool_t *p, int B, int T, int C, int OC) {
  int BT = B * T;
  float *inp = frand((size_t)BT * C, 1), *w = frand((size_t)OC * C, 0.5f);
  float *b = frand((size_t)OC, 0.5f), *r = frand((size_t)BT * OC, 1);
  float *out = zeros((size_t)BT * OC), *dinp = zeros((size_t)BT * C);
  float *dw = zeros((size_t)OC * C), *db = zeros((size_t)OC);
  mm_case_t k = {BT, C, OC, to_d(inp, (size_t)BT * C), to_d(w, (size_t)OC * C),
                 to_d(b, (size_t)OC), malloc((size_t)BT * OC * sizeof(double)), r};
  char name[64];
  cpu_matmul_forward(p, out, inp, w, b, B, T, C, OC);
  mm_loss(&k);
  check_close("matmul_forward", out, k.out, (size_t)BT * OC, 1e-5);
  cpu_matmul_backward(p, dinp, dw, db, r, inp, w, B, T, C, OC);
  snprintf(name, sizeof(name), "matmul %dx%dx%d dinp", BT, C, OC);
  check_grad(name, k.inp, dinp, (size_t)BT * C, mm_loss, &k);
  snprintf(name, sizeof(name), "matmul %dx%dx%d dweight", BT, C, OC);
  check_grad(name, k.w, dw, (size_t)OC * C, mm_loss, &k);
  snprintf(name, sizeof(name), "matmul %dx%dx%d dbias", BT, C, OC);
  check_grad(name, k.b, db, (size_t)OC, mm_loss, &k);
  free(inp), free(w), free(b), free(r), free(out), free(dinp), free(dw);
  free(db), free(k.inp), free(k.w), free(k.b), free(k.out);
}

/* cpu_gemm with every stride layout and sizes around the blocking. */
static void test_gemm_shapes(cpu_pool_t *p) {
  static const int sizes[][3] = {{1, 1, 1},   {3, 17, 5},   {4, 16, 256},
                                 {65, 63, 257}, {130, 70, 9}, {7, 129, 600}};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
    float *a = frand((size_t)M * K, 1), *b = frand((size_t)K * N, 1);
    float *c = frand((size_t)M * N, 1);
    for (int tr = 0; tr < 4; tr++) {
      int ta = tr & 1, tb = tr >> 1;
      float *cc = malloc((size_t)M * N * sizeof(float));
      memcpy(cc, c, (size_t)M * N * sizeof(float));
      /* A stored K x M when transposed, B stored N x K */
      cpu_gemm(p, M, N, K, a, ta ? 1 : (size_t)K, ta ? (size_t)M : 1, b,
               tb ? 1 : (size_t)N, tb ? (size_t)K : 1, cc, (size_t)N);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double want = c[(size_t)i * N + j];
          for (int k = 0; k < K; k++)
            want += (double)a[ta ? (size_t)k * M + i : (size_t)i * K + k] *
                    (double)b[tb ? (size_t)j * K + k : (size_t)k * N + j];
          if (fabs(cc[(size_t)i * N + j] - want) > 1e-4 * (1 + sqrt((double)K)))
            TEST_FAIL("gemm %dx%dx%d ta=%d tb=%d at (%d,%d): %g, want %g", M, N,
                      K, ta, tb, i, j, (double)cc[(size_t)i * N + j], want);
        }
      free(cc);
    }
    free(a), free(b), free(c);
  }
  printf("  gemm: 6 shapes x 4 transposes match naive sums\n");
}

/* ---- layernorm ------------------------------------------------------------ */

typedef struct ln_case_s {
  int BT, C;
  double *inp, *w, *b, *out;
  float *r;
} ln_case_t;

static double ln_loss(void *ctx) {
  ln_case_t *k = ctx;
  ref_layernorm(k->out, k->inp, k->w, k->b, k->BT, k->C);
  return dot_r(k->out, k->r, (size_t)k->BT * k->C);
}

static void test_layernorm(cpu_pool_t *p) {
  int B = 2, T = 3, C = 19, BT = B * T;
  float *inp = frand((size_t)BT * C, 2), *w = frand((size_t)C, 1);
  float *b = frand((size_t)C, 1), *r = frand((size_t)BT * C, 1);
  float *out = zeros((size_t)BT * C), *mean = zeros((size_t)BT);
  float *rstd = zeros((size_t)BT), *dinp = zeros((size_t)BT * C);
  float *dw = zeros((size_t)C), *db = zeros((size_t)C);
  ln_case_t k = {BT, C, to_d(inp, (size_t)BT * C), to_d(w, (size_t)C),
                 to_d(b, (size_t)C), malloc((size_t)BT * C * sizeof(double)), r};
  cpu_layernorm_forward(p, out, mean, rstd, inp, w, b, B, T, C);
  ln_loss(&k);
  check_close("layernorm_forward", out, k.out, (size_t)BT * C, 1e-5);
  cpu_layernorm_backward(p, dinp, dw, db, r, inp, w, mean, rstd, B, T, C);
  check_grad("layernorm dinp", k.inp, dinp, (size_t)BT * C, ln_loss, &k);
  check_grad("layernorm dweight", k.w, dw, (size_t)C, ln_loss, &k);
  check_grad("layernorm dbias", k.b, db, (size_t)C, ln_loss, &k);
  free(inp), free(w), free(b), free(r), free(out), free(mean), free(rstd);
  free(dinp), free(dw), free(db), free(k.inp), free(k.w), free(k.b), free(k.out);
}

/* ---- attention -------------------------------------------------------------- */

typedef struct att_case_s {
  int B, T, C, NH;
  double *qkv, *out;
  float *r;
} att_case_t;

static double att_loss(void *ctx) {
  att_case_t *k = ctx;
  ref_attention(k->out, k->qkv, k->B, k->T, k->C, k->NH);
  return dot_r(k->out, k->r, (size_t)k->B * k->T * k->C);
}

static void test_attention(cpu_pool_t *p, int B, int T, int C, int NH) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  float *qkv = frand(nq, 1.5f), *r = frand(no, 1), *out = zeros(no);
  float *att = zeros((size_t)B * NH * T * T), *dq = zeros(nq);
  att_case_t k = {B, T, C, NH, to_d(qkv, nq), malloc(no * sizeof(double)), r};
  ASSERT_EQ(0, cpu_attention_forward(p, out, att, qkv, B, T, C, NH));
  att_loss(&k);
  check_close("attention_forward", out, k.out, no, 1e-5);
  /* causal: row t has no weight beyond t, and sums to 1 */
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < T; t++) {
      double s = 0;
      for (int u = 0; u < T; u++) {
        float a = att[((size_t)bh * T + t) * T + u];
        if (u > t)
          ASSERT(a == 0.0f);
        s += a;
      }
      ASSERT(fabs(s - 1.0) < 1e-5);
    }
  ASSERT_EQ(0, cpu_attention_backward(p, dq, r, qkv, att, B, T, C, NH));
  {
    char name[64];
    snprintf(name, sizeof(name), "attention T=%d dqkv", T);
    check_grad(name, k.qkv, dq, nq, att_loss, &k);
  }
  free(qkv), free(r), free(out), free(att), free(dq), free(k.qkv), free(k.out);
}

/* ---- gelu, residual, encoder ------------------------------------------------- */

typedef struct ew_case_s {
  size_t n;
  double *x;
  float *r;
} ew_case_t;

static double gelu_loss(void *ctx) {
  ew_case_t *k = ctx;
  double s = 0;
  for (size_t i = 0; i < k->n; i++)
    s += ref_gelu1(k->x[i]) * k->r[i];
  return s;
}

static void test_gelu(cpu_pool_t *p) {
  size_t n = 53;
  float *x = frand(n, 4), *r = frand(n, 1), *out = zeros(n), *dx = zeros(n);
  ew_case_t k = {n, to_d(x, n), r};
  double *want = malloc(n * sizeof(double));
  cpu_gelu_forward(p, out, x, n);
  for (size_t i = 0; i < n; i++)
    want[i] = ref_gelu1(k.x[i]);
  check_close("gelu_forward", out, want, n, 1e-6);
  cpu_gelu_backward(p, dx, x, r, n);
  check_grad("gelu dinp", k.x, dx, n, gelu_loss, &k);
  free(x), free(r), free(out), free(dx), free(k.x), free(want);
}

static void test_residual(cpu_pool_t *p) {
  size_t n = 77;
  float *a = frand(n, 1), *b = frand(n, 1), *out = zeros(n);
  float *d = frand(n, 1), *da = frand(n, 1), *db = frand(n, 1);
  float *da0 = malloc(n * sizeof(float)), *db0 = malloc(n * sizeof(float));
  memcpy(da0, da, n * sizeof(float));
  memcpy(db0, db, n * sizeof(float));
  cpu_residual_forward(p, out, a, b, n);
  cpu_residual_backward(p, da, db, d, n);
  for (size_t i = 0; i < n; i++) {
    ASSERT(out[i] == a[i] + b[i]);
    ASSERT(da[i] == da0[i] + d[i] && db[i] == db0[i] + d[i]);
  }
  printf("  residual: exact\n");
  free(a), free(b), free(out), free(d), free(da), free(db), free(da0), free(db0);
}

typedef struct enc_case_s {
  int B, T, C;
  const int32_t *tok;
  double *wte, *wpe;
  float *r;
} enc_case_t;

static double enc_loss(void *ctx) {
  enc_case_t *k = ctx;
  double s = 0;
  for (int bt = 0; bt < k->B * k->T; bt++)
    for (int c = 0; c < k->C; c++)
      s += (k->wte[(size_t)k->tok[bt] * k->C + c] +
            k->wpe[(size_t)(bt % k->T) * k->C + c]) *
           k->r[(size_t)bt * k->C + c];
  return s;
}

static void test_encoder(cpu_pool_t *p) {
  int B = 2, T = 4, C = 37, V = 5;
  int32_t tok[8] = {1, 3, 3, 0, 4, 1, 1, 2};
  float *wte = frand((size_t)V * C, 1), *wpe = frand((size_t)T * C, 1);
  float *r = frand((size_t)B * T * C, 1), *out = zeros((size_t)B * T * C);
  float *dwte = zeros((size_t)V * C), *dwpe = zeros((size_t)T * C);
  enc_case_t k = {B, T, C, tok, to_d(wte, (size_t)V * C), to_d(wpe, (size_t)T * C), r};
  cpu_encoder_forward(p, out, tok, wte, wpe, B, T, C);
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++)
      ASSERT(out[(size_t)bt * C + c] ==
             wte[(size_t)tok[bt] * C + c] + wpe[(size_t)(bt % T) * C + c]);
  cpu_encoder_backward(p, dwte, dwpe, r, tok, B, T, C);
  check_grad("encoder dwte", k.wte, dwte, (size_t)V * C, enc_loss, &k);
  check_grad("encoder dwpe", k.wpe, dwpe, (size_t)T * C, enc_loss, &k);
  free(wte), free(wpe), free(r), free(out), free(dwte), free(dwpe);
  free(k.wte), free(k.wpe);
}

/* ---- softmax + cross-entropy ------------------------------------------------------- */

typedef struct ce_case_s {
  int BT, V, Vp;
  double *logits;
  const int32_t *targets;
} ce_case_t;

static double ce_loss(void *ctx) {
  ce_case_t *k = ctx;
  return ref_crossentropy(k->logits, k->targets, k->BT, k->V, k->Vp);
}

static void test_crossentropy(cpu_pool_t *p) {
  int B = 2, T = 3, V = 10, Vp = 16, BT = B * T;
  int32_t targets[6] = {0, 9, 4, 4, 7, 1};
  float *logits = frand((size_t)BT * Vp, 3), *probs = zeros((size_t)BT * Vp);
  float *losses = zeros((size_t)BT), *dl = zeros((size_t)BT * Vp);
  float dloss[6];
  ce_case_t k = {BT, V, Vp, to_d(logits, (size_t)BT * Vp), targets};
  double mean = 0;
  cpu_softmax_forward(p, probs, logits, B, T, V, Vp);
  cpu_crossentropy_forward(p, losses, probs, targets, B, T, Vp);
  for (int i = 0; i < BT; i++) {
    mean += losses[i] / BT;
    dloss[i] = 1.0f / (float)BT;
    for (int v = V; v < Vp; v++)
      ASSERT(probs[(size_t)i * Vp + v] == 0.0f);
  }
  ASSERT(fabs(mean - ce_loss(&k)) < 1e-5);
  for (size_t i = 0; i < (size_t)BT * Vp; i++)
    dl[i] = 0.25f; /* the padding columns must keep it */
  cpu_crossentropy_softmax_backward(p, dl, dloss, probs, targets, B, T, V, Vp);
  for (int i = 0; i < BT; i++)
    for (int v = 0; v < Vp; v++)
      dl[(size_t)i * Vp + v] -= 0.25f;
  for (int i = 0; i < BT; i++)
    for (int v = V; v < Vp; v++)
      ASSERT(dl[(size_t)i * Vp + v] == 0.0f);
  check_grad("crossentropy dlogits", k.logits, dl, (size_t)BT * Vp, ce_loss, &k);
  free(logits), free(probs), free(losses), free(dl), free(k.logits);
}

/* ---- AdamW ------------------------------------------------------------------------------ */

static void test_adamw(cpu_pool_t *p) {
  size_t n = 9000;
  float *w = frand(n, 1), *g = frand(n, 1), *m = zeros(n), *v = zeros(n);
  double *wd = to_d(w, n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
  gpt_adamw_t a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                   .weight_decay = 0.1f, .grad_scale = 0.5f, .t = 1};
  for (a.t = 1; a.t <= 3; a.t++) {
    cpu_adamw(p, w, g, m, v, n, &a, 0.1f);
    for (size_t i = 0; i < n; i++) {
      double gg = g[i] * 0.5;
      md[i] = 0.9 * md[i] + 0.1 * gg;
      vd[i] = 0.95 * vd[i] + 0.05 * gg * gg;
      double mh = md[i] / (1 - pow(0.9, a.t)), vh = vd[i] / (1 - pow(0.95, a.t));
      wd[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * wd[i]);
    }
  }
  check_close("adamw params", w, wd, n, 1e-5);
  printf("  adamw: 3 steps match the formula\n");
  free(w), free(g), free(m), free(v), free(wd), free(md), free(vd);
}

/* ---- thread-count independence ---------------------------------------------------------- */

/* Every layer on pool p, results concatenated into out (n floats). */
static size_t run_all(cpu_pool_t *p, float *out) {
  enum { B = 3, T = 70, C = 48, NH = 4, V = 70, Vp = 128 };
  size_t BT = (size_t)B * T, at = 0;
  uint64_t keep = seed;
  float *x = frand(BT * 4 * C, 1), *w = frand((size_t)Vp * 4 * C, 0.2f);
  float *bias = frand(4 * C, 0.1f), *r = frand(BT * 4 * C, 1); /* 4C > Vp */
  float *mean = zeros(BT), *rstd = zeros(BT), *att = zeros((size_t)B * NH * T * T);
  int32_t tok[B * T];
  seed = keep; /* both runs draw the same numbers */
  for (size_t i = 0; i < BT; i++)
    tok[i] = (int32_t)(i * 7 % V);
  /* each layer's outputs, one after the other */
  float *enc = out, *dwte = enc + BT * C, *dwpe = dwte + (size_t)V * C;
  float *ln = dwpe + (size_t)T * C, *dln = ln + BT * C, *dlw = dln + BT * C;
  float *dlb = dlw + C, *mm = dlb + C, *dmi = mm + BT * 4 * C;
  float *dmw = dmi + BT * C, *dmb = dmw + (size_t)4 * C * C, *lg = dmb + 4 * C;
  float *ao = lg + BT * Vp, *da = ao + BT * C, *ge = da + BT * 3 * C;
  float *dge = ge + BT * C, *pr = dge + BT * C, *dpr = pr + BT * Vp;
  float *ss = dpr + BT * Vp;
  cpu_encoder_forward(p, enc, tok, w, w, B, T, C);
  cpu_encoder_backward(p, dwte, dwpe, r, tok, B, T, C);
  cpu_layernorm_forward(p, ln, mean, rstd, x, w, bias, B, T, C);
  cpu_layernorm_backward(p, dln, dlw, dlb, r, x, w, mean, rstd, B, T, C);
  cpu_matmul_forward(p, mm, x, w, bias, B, T, C, 4 * C);
  cpu_matmul_backward(p, dmi, dmw, dmb, r, x, w, B, T, C, 4 * C);
  cpu_matmul_forward(p, lg, x, w, NULL, B, T, C, Vp);
  ASSERT_EQ(0, cpu_attention_forward(p, ao, att, x, B, T, C, NH));
  ASSERT_EQ(0, cpu_attention_backward(p, da, r, x, att, B, T, C, NH));
  cpu_gelu_forward(p, ge, x, BT * C);
  cpu_gelu_backward(p, dge, x, r, BT * C);
  cpu_softmax_forward(p, pr, r, B, T, V, Vp);
  cpu_crossentropy_softmax_backward(p, dpr, mean, pr, tok, B, T, V, Vp);
  *ss = (float)cpu_sumsq(p, x, BT * 4 * C);
  at = (size_t)(ss + 1 - out);
  free(x), free(w), free(bias), free(r), free(mean), free(rstd), free(att);
  return at;
}

static void test_threads_bitwise(void) {
  size_t cap = 1 << 20, n1, n3;
  float *o1 = zeros(cap), *o3 = zeros(cap);
  cpu_pool_t *p1, *p3;
  ASSERT_EQ(0, cpu_pool_create(1, &p1));
  ASSERT_EQ(0, cpu_pool_create(3, &p3));
  ASSERT_EQ(3, cpu_pool_threads(p3));
  n1 = run_all(p1, o1);
  n3 = run_all(p3, o3);
  ASSERT(n1 == n3 && n1 < cap);
  for (size_t i = 0; i < n1; i++)
    if (memcmp(&o1[i], &o3[i], sizeof(float)) != 0)
      TEST_FAIL("1 and 3 threads differ at result %zu: %.9g vs %.9g", i,
                (double)o1[i], (double)o3[i]);
  printf("  1 and 3 threads: %zu results bitwise equal\n", n1);
  cpu_pool_destroy(p1);
  cpu_pool_destroy(p3);
  free(o1), free(o3);
}

int main(void) {
  cpu_pool_t *p;
  ASSERT_EQ(0, cpu_pool_create(2, &p));
  ASSERT(cpu_pool_create(-1, &(cpu_pool_t *){NULL}) == -EINVAL);
  test_gemm_shapes(p);
  test_matmul(p, 2, 3, 20, 37);
  test_matmul(p, 1, 70, 9, 67); /* two macro-tiles each way */
  test_layernorm(p);
  test_attention(p, 2, 5, 12, 3);
  test_attention(p, 1, 150, 8, 2); /* three blocks of query rows */
  test_gelu(p);
  test_residual(p);
  test_encoder(p);
  test_crossentropy(p);
  test_adamw(p);
  test_threads_bitwise();
  cpu_pool_destroy(p);
  printf("test_gpt_layers: ok\n");
  return 0;
}
