/* The CPU backend (gpt_cpu_ops) as the trainer drives it: the gradient of
 * the whole model against central differences of a double-precision
 * reference model, gpt.h's accumulation order (bitwise), the segment
 * callbacks, thread-count independence of whole steps, a batch learnt by
 * heart, and the arguments it refuses. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_ref.h"
#include "test.h"

enum { B = 2, T = 6 };
static const gpt_config_t cfg = {.max_seq_len = 8, .vocab_size = 20,
                                 .padded_vocab = 32, .num_layers = 2,
                                 .num_heads = 2, .channels = 16};

/* ---- the reference model in double ---------------------------------------- */

static const double *dt(const double *p, int which, int l) {
  return p + gpt_tensor_offset(&cfg, which, l, NULL);
}

static double ref_loss(const double *p, const int32_t *tok,
                       const int32_t *tgt) {
  int C = cfg.channels, BT = B * T, Vp = cfg.padded_vocab;
  size_t n = (size_t)BT * C;
  double *x = malloc(n * sizeof(double)), *h = malloc(n * sizeof(double));
  double *qkv = malloc(3 * n * sizeof(double)), *a = malloc(n * sizeof(double));
  double *f = malloc(4 * n * sizeof(double)), *lg = malloc((size_t)BT * Vp * sizeof(double));
  double loss;
  for (int bt = 0; bt < BT; bt++)
    for (int c = 0; c < C; c++)
      x[(size_t)bt * C + c] = dt(p, GPT_WTE, 0)[(size_t)tok[bt] * C + c] +
                              dt(p, GPT_WPE, 0)[(size_t)(bt % T) * C + c];
  for (int l = 0; l < cfg.num_layers; l++) {
    ref_layernorm(h, x, dt(p, GPT_LN1W, l), dt(p, GPT_LN1B, l), BT, C);
    ref_matmul(qkv, h, dt(p, GPT_QKVW, l), dt(p, GPT_QKVB, l), BT, C, 3 * C);
    ref_attention(a, qkv, B, T, C, cfg.num_heads);
    ref_matmul(h, a, dt(p, GPT_ATTPROJW, l), dt(p, GPT_ATTPROJB, l), BT, C, C);
    for (size_t i = 0; i < n; i++)
      x[i] += h[i];
    ref_layernorm(h, x, dt(p, GPT_LN2W, l), dt(p, GPT_LN2B, l), BT, C);
    ref_matmul(f, h, dt(p, GPT_FCW, l), dt(p, GPT_FCB, l), BT, C, 4 * C);
    for (size_t i = 0; i < 4 * n; i++)
      f[i] = ref_gelu1(f[i]);
    ref_matmul(h, f, dt(p, GPT_FCPROJW, l), dt(p, GPT_FCPROJB, l), BT, 4 * C, C);
    for (size_t i = 0; i < n; i++)
      x[i] += h[i];
  }
  ref_layernorm(h, x, dt(p, GPT_LNFW, 0), dt(p, GPT_LNFB, 0), BT, C);
  ref_matmul(lg, h, dt(p, GPT_WTE, 0), NULL, BT, C, Vp);
  loss = ref_crossentropy(lg, tgt, BT, cfg.vocab_size, Vp);
  free(x), free(h), free(qkv), free(a), free(f), free(lg);
  return loss;
}

/* ---- helpers ----------------------------------------------------------------- */

static uint64_t seed = 42;

static void batch(int32_t *tok, int32_t *tgt) {
  for (int i = 0; i < B * T; i++) {
    tok[i] = (int32_t)((ref_rand(&seed) + 1) * 0.5 * cfg.vocab_size) % cfg.vocab_size;
    tgt[i] = (int32_t)((ref_rand(&seed) + 1) * 0.5 * cfg.vocab_size) % cfg.vocab_size;
  }
}

/* Parameters large enough that every path carries gradient. */
static float *random_params(size_t n) {
  float *p = malloc(n * sizeof(float));
  ASSERT(p != NULL);
  gpt_init_params(&cfg, 7, p);
  for (size_t i = 0; i < n; i++)
    p[i] += (float)(ref_rand(&seed) * 0.3);
  return p;
}

static gpt_backend_t *make(int threads, const float *params) {
  gpt_backend_t *m = NULL;
  ASSERT_EQ(0, gpt_cpu_ops.create(&cfg, B, T, GPT_FP32, 0, threads, &m));
  ASSERT_EQ(0, gpt_cpu_ops.set_state(m, params, NULL, NULL));
  return m;
}

static float *grads_copy(gpt_backend_t *m, size_t n) {
  int dtype = -1;
  float *g = malloc(n * sizeof(float));
  memcpy(g, gpt_cpu_ops.grad_buffer(m, &dtype), n * sizeof(float));
  ASSERT_EQ(GPT_FP32, dtype);
  return g;
}

/* ---- tests -------------------------------------------------------------------- */

static void test_gradient(void) {
  size_t n = gpt_num_params(&cfg), checked = 0;
  float *p = random_params(n), *g, loss = 0;
  double *pd = malloc(n * sizeof(double)), worst = 0, gmax = 0;
  int32_t tok[B * T], tgt[B * T];
  gpt_backend_t *m = make(2, p);
  batch(tok, tgt);
  for (size_t i = 0; i < n; i++)
    pd[i] = p[i];
  ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, &loss));
  ASSERT(fabs(loss - ref_loss(pd, tok, tgt)) < 1e-5);
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  g = grads_copy(m, n);
  for (size_t i = 0; i < n; i++)
    gmax = fmax(gmax, fabs(g[i]));
  /* a few entries of every tensor of every layer */
  for (int which = GPT_WTE; which <= GPT_LNFB; which++)
    for (int l = 0; l < cfg.num_layers; l++) {
      size_t cnt, off = gpt_tensor_offset(&cfg, which, l, &cnt);
      if (l > 0 && (which <= GPT_WPE || which >= GPT_LNFW))
        continue;
      for (size_t k = 0; k < 12; k++) {
        size_t i = off + (k * 7919) % cnt;
        double keep = pd[i], h = 1e-5, num, err;
        /* rows of the padded vocabulary carry no gradient at all */
        if (which == GPT_WTE && (i - off) / (size_t)cfg.channels >= (size_t)cfg.vocab_size) {
          ASSERT(g[i] == 0.0f);
          continue;
        }
        pd[i] = keep + h;
        num = ref_loss(pd, tok, tgt);
        pd[i] = keep - h;
        num = (num - ref_loss(pd, tok, tgt)) / (2 * h);
        pd[i] = keep;
        err = fabs(num - g[i]) / (fabs(num) + 1e-3 * gmax);
        worst = fmax(worst, err);
        if (err > 2e-3)
          TEST_FAIL("tensor %d layer %d index %zu: backward %.7g, finite "
                    "differences %.7g", which, l, i - off, (double)g[i], num);
        checked++;
      }
    }
  printf("  whole model: %zu gradients match finite differences (worst "
         "relative error %.2e)\n", checked, worst);
  gpt_cpu_ops.destroy(m);
  free(p), free(pd), free(g);
}

/* acc after micro-batches 1 and 2 == (0 + g1) + (0 + g2), bitwise. */
static void test_accumulation(void) {
  size_t n = gpt_num_params(&cfg);
  float *p = random_params(n), *g1, *g2, *acc;
  int32_t t1[B * T], y1[B * T], t2[B * T], y2[B * T];
  gpt_backend_t *m = make(1, p);
  batch(t1, y1);
  batch(t2, y2);
  ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, t1, y1, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  g1 = grads_copy(m, n);
  ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, t2, y2, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  g2 = grads_copy(m, n);
  ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, t1, y1, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 0, NULL, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, t2, y2, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  acc = grads_copy(m, n);
  for (size_t i = 0; i < n; i++) {
    float want = g1[i] + g2[i];
    if (memcmp(&want, &acc[i], sizeof(float)) != 0)
      TEST_FAIL("accumulated gradient %zu: %.9g, (0+g1)+(0+g2) = %.9g", i,
                (double)acc[i], (double)want);
  }
  printf("  two micro-steps accumulate as (0 + g1) + g2, bitwise\n");
  gpt_cpu_ops.destroy(m);
  free(p), free(g1), free(g2), free(acc);
}

typedef struct seen_s {
  gpt_backend_t *m;
  int calls, order[8];
  float *snap; /* each segment's values when it was reported */
} seen_t;

static int on_segment(void *arg, int seg, void *event) {
  seen_t *s = arg;
  size_t off, cnt;
  ASSERT(event == NULL && s->calls < 8);
  s->order[s->calls++] = seg;
  gpt_segment(&cfg, seg, &off, &cnt);
  memcpy(s->snap + off, (float *)gpt_cpu_ops.grad_buffer(s->m, NULL) + off,
         cnt * sizeof(float));
  return seg == 99 ? -EIO : 0;
}

static int fail_segment(void *arg, int seg, void *event) {
  return seg == 1 ? -ECONNRESET : 0;
}

static void test_segments(void) {
  size_t n = gpt_num_params(&cfg), covered = 0;
  float *p = random_params(n), *final;
  int32_t tok[B * T], tgt[B * T];
  seen_t s = {0};
  gpt_backend_t *m = make(2, p);
  s.m = m;
  s.snap = calloc(n, sizeof(float));
  batch(tok, tgt);
  ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
  /* not the last micro-step: no callback */
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 0, on_segment, &s));
  ASSERT_EQ(0, s.calls);
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, on_segment, &s));
  ASSERT_EQ(gpt_num_segments(&cfg), s.calls);
  for (int i = 0; i < s.calls; i++) {
    size_t off, cnt;
    ASSERT_EQ(i, s.order[i]);
    gpt_segment(&cfg, i, &off, &cnt);
    covered += cnt;
  }
  ASSERT_EQ(n, covered);
  final = grads_copy(m, n);
  ASSERT_MEM_EQ(final, s.snap, n * sizeof(float));
  /* a callback's error stops backward and comes back */
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, NULL));
  ASSERT_EQ(-ECONNRESET, gpt_cpu_ops.backward(m, 1.0f, 1, fail_segment, NULL));
  printf("  segments reported in order 0..%d, each final when reported\n",
         s.calls - 1);
  gpt_cpu_ops.destroy(m);
  free(p), free(s.snap), free(final);
}

/* Train `steps` steps on batches from seed s0; final parameters in out. */
static float train(int threads, int steps, uint64_t s0, float *out,
                   float *first_loss) {
  size_t n = gpt_num_params(&cfg);
  float *p, loss = 0, norm = 0;
  int32_t tok[B * T], tgt[B * T];
  gpt_backend_t *m;
  gpt_adamw_t a = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                   .weight_decay = 0.1f, .grad_scale = 1.0f};
  seed = s0;
  p = random_params(n);
  m = make(threads, p);
  batch(tok, tgt);
  for (int s = 1; s <= steps; s++) {
    ASSERT_EQ(0, gpt_cpu_ops.zero_grad(m));
    ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, &loss));
    if (s == 1 && first_loss)
      *first_loss = loss;
    ASSERT_EQ(0, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
    ASSERT_EQ(0, gpt_cpu_ops.grad_norm(m, 1.0f, &norm));
    ASSERT(isfinite(norm) && norm > 0);
    a.t = s;
    ASSERT_EQ(0, gpt_cpu_ops.adamw(m, &a));
  }
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, tgt, &loss));
  ASSERT_EQ(0, gpt_cpu_ops.get_state(m, out, NULL, NULL));
  gpt_cpu_ops.destroy(m);
  free(p);
  return loss;
}

static void test_learns_and_threads(void) {
  size_t n = gpt_num_params(&cfg);
  float *p1 = malloc(n * sizeof(float)), *p3 = malloc(n * sizeof(float));
  float first = 0, l1 = train(1, 40, 5, p1, &first), l3 = train(3, 40, 5, p3, NULL);
  ASSERT_MEM_EQ(p1, p3, n * sizeof(float));
  ASSERT(l1 == l3);
  printf("  one batch learnt by heart: loss %.3f -> %.3f; 1 and 3 threads "
         "give the same parameters bitwise\n", (double)first, (double)l1);
  ASSERT(l1 < 0.3f * first);
  free(p1), free(p3);
}

static void test_refusals(void) {
  gpt_backend_t *m = NULL;
  gpt_config_t bad = cfg;
  size_t n = gpt_num_params(&cfg);
  float *p = random_params(n), *q = malloc(n * sizeof(float));
  int32_t tok[B * T] = {0}, tgt[B * T] = {0};
  bad.num_heads = 3; /* does not divide 16 */
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.create(&bad, B, T, GPT_FP32, 0, 1, &m));
  ASSERT(m == NULL);
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.create(&cfg, B, cfg.max_seq_len + 1, GPT_FP32, 0, 1, &m));
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.create(&cfg, B, T, GPT_BF16, 0, 1, &m));
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.create(&cfg, 0, T, GPT_FP32, 0, 1, &m));
  m = make(1, p);
  ASSERT_EQ(0, gpt_cpu_ops.get_state(m, q, NULL, NULL));
  ASSERT_MEM_EQ(p, q, n * sizeof(float));
  /* backward before any forward */
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  tok[3] = cfg.vocab_size; /* out of the vocabulary */
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.forward(m, tok, tgt, NULL));
  tok[3] = 0;
  tgt[5] = -1;
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.forward(m, tok, tgt, NULL));
  ASSERT_EQ(0, gpt_cpu_ops.forward(m, tok, NULL, NULL));
  ASSERT_EQ(-EINVAL, gpt_cpu_ops.backward(m, 1.0f, 1, NULL, NULL));
  gpt_cpu_ops.destroy(m);
  gpt_cpu_ops.destroy(NULL);
  free(p), free(q);
  printf("  bad sizes, dtypes, tokens and call orders refused\n");
}

/* GPT-2's initialisation as gpt.h documents it, drawn in order by one
 * thread: splitmix64 from seed * 0x2545f4914f6cdd1d + 1, Box-Muller pairs,
 * wte's V rows, wpe, then each layer's four matrices. gpt_init_params fills
 * pieces on several threads; a fresh start must get these numbers bit for
 * bit (runs are compared bitwise across versions and devices). */
static uint64_t sm64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void seq_normal(float *p, size_t n, float std, uint64_t *s) {
  for (size_t i = 0; i < n; i += 2) {
    double u1 = ((sm64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (sm64(s) >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1));
    p[i] = (float)(std * r * cos(2.0 * M_PI * u2));
    if (i + 1 < n)
      p[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
  }
}

static void seq_init(const gpt_config_t *c, uint64_t init_seed, float *p) {
  static const int mats[] = {GPT_QKVW, GPT_ATTPROJW, GPT_FCW, GPT_FCPROJW};
  static const int ones[] = {GPT_LN1W, GPT_LN2W, GPT_LNFW};
  uint64_t s = init_seed * 0x2545f4914f6cdd1dULL + 1;
  float resid = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  size_t n, off;
  memset(p, 0, gpt_num_params(c) * sizeof(float));
  off = gpt_tensor_offset(c, GPT_WTE, 0, &n);
  seq_normal(p + off, (size_t)c->vocab_size * (size_t)c->channels, 0.02f, &s);
  off = gpt_tensor_offset(c, GPT_WPE, 0, &n);
  seq_normal(p + off, n, 0.02f, &s);
  for (int l = 0; l < c->num_layers; l++) {
    for (int k = 0; k < 3; k++) {
      off = gpt_tensor_offset(c, ones[k], l, &n);
      for (size_t i = 0; i < n; i++)
        p[off + i] = 1.0f;
    }
    for (int k = 0; k < 4; k++) {
      off = gpt_tensor_offset(c, mats[k], l, &n);
      seq_normal(p + off, n,
                 k == 1 || k == 3 ? resid : 0.02f, &s);
    }
  }
}

static void test_init_in_order(void) {
  /* small (one thread), and large with odd tensor sizes (several threads
   * where there are CPUs: pieces start mid-tensor) */
  static const gpt_config_t cs[] = {
      {.max_seq_len = 8, .vocab_size = 20, .padded_vocab = 32,
       .num_layers = 2, .num_heads = 2, .channels = 16},
      {.max_seq_len = 33, .vocab_size = 1001, .padded_vocab = 1024,
       .num_layers = 3, .num_heads = 3, .channels = 519},
  };
  for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
    size_t n = gpt_num_params(&cs[i]);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    ASSERT(a && b);
    seq_init(&cs[i], 1337 + i, a);
    memset(b, 0x7f, n * sizeof(float)); /* not zero: init must write all */
    gpt_init_params(&cs[i], 1337 + i, b);
    ASSERT(memcmp(a, b, n * sizeof(float)) == 0);
    gpt_init_params(&cs[i], 1338 + i, b);
    ASSERT(memcmp(a, b, n * sizeof(float)) != 0); /* the seed matters */
    free(a), free(b);
    printf("  %zu parameters initialised as in order, bit for bit\n", n);
  }
}

/* ZeRO-1's operations: a model sharded to [lo, hi) (cut inside tensors)
 * updates bitwise the parameters and moments of the whole model's
 * [lo, hi) and leaves the rest alone; the blocks' sums of squares added
 * in order give grad_norm bit for bit; an empty shard updates nothing. */
static void test_shard(void) {
  const gpt_backend_ops_t *o = &gpt_cpu_ops;
  size_t n = gpt_num_params(&cfg), lo = n / 3 + 1, hi = 2 * n / 3 + 5;
  size_t block, nb;
  float *p = random_params(n), *pw = malloc(n * sizeof(float));
  float *mw = malloc(n * sizeof(float)), *vw = malloc(n * sizeof(float));
  float *ps = malloc(n * sizeof(float)), *ms = malloc(n * sizeof(float));
  float *vs = malloc(n * sizeof(float)), *p0 = malloc(n * sizeof(float));
  float norm = 0, loss = 0;
  double *part, total = 0;
  int32_t tok[B * T], tgt[B * T];
  gpt_adamw_t a = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                   .weight_decay = 0.1f, .grad_scale = 0.5f};
  gpt_backend_t *whole = make(1, p), *sh = make(2, p), *empty = make(1, p);
  ASSERT(pw && mw && vw && ps && ms && vs && p0);
  ASSERT_EQ(-EINVAL, o->shard(sh, hi, lo));
  ASSERT_EQ(0, o->shard(sh, lo, hi));
  ASSERT_EQ(-EINVAL, o->shard(sh, lo, hi)); /* once */
  ASSERT_EQ(0, o->shard(empty, n, n));
  ASSERT(o->param_buffer(sh) != NULL);
  batch(tok, tgt);
  for (int t = 1; t <= 2; t++) {
    gpt_backend_t *ms3[3] = {whole, sh, empty};
    for (int i = 0; i < 3; i++) {
      ASSERT_EQ(0, o->zero_grad(ms3[i]));
      ASSERT_EQ(0, o->forward(ms3[i], tok, tgt, &loss));
      ASSERT_EQ(0, o->backward(ms3[i], 1.0f, 1, NULL, NULL));
    }
    a.t = t;
    ASSERT_EQ(0, o->get_state(sh, p0, NULL, NULL)); /* this step's start */
    ASSERT_EQ(0, o->adamw(whole, &a));
    ASSERT_EQ(0, o->adamw(sh, &a));
    ASSERT_EQ(0, o->adamw(empty, &a));
    /* the sharded model's other parameters are the whole one's (the
     * trainer's all-gather) before the next forward */
    ASSERT_EQ(0, o->get_state(whole, pw, NULL, NULL));
    ASSERT_EQ(0, o->get_state(sh, ps, ms, vs));
    ASSERT(memcmp(ps + lo, pw + lo, (hi - lo) * sizeof(float)) == 0);
    ASSERT(memcmp(ps, p0, lo * sizeof(float)) == 0);
    ASSERT(memcmp(ps + hi, p0 + hi, (n - hi) * sizeof(float)) == 0);
    ASSERT_EQ(0, o->set_state(sh, pw, NULL, NULL));
  }
  ASSERT_EQ(0, o->get_state(whole, pw, mw, vw));
  ASSERT_EQ(0, o->get_state(sh, ps, ms, vs));
  ASSERT(memcmp(ms, mw + lo, (hi - lo) * sizeof(float)) == 0);
  ASSERT(memcmp(vs, vw + lo, (hi - lo) * sizeof(float)) == 0);
  ASSERT_EQ(0, o->get_state(empty, ps, NULL, NULL));
  ASSERT(memcmp(ps, p, n * sizeof(float)) == 0);
  /* the moments of a shard go back in as hi - lo floats */
  ASSERT_EQ(0, o->set_state(sh, NULL, vw + lo, mw + lo));
  ASSERT_EQ(0, o->get_state(sh, NULL, ms, vs));
  ASSERT(memcmp(ms, vw + lo, (hi - lo) * sizeof(float)) == 0);
  /* the norm from the blocks' sums */
  block = o->norm_block(sh);
  nb = (n + block - 1) / block;
  part = malloc(nb * sizeof(double));
  ASSERT(part != NULL && block >= 4096);
  ASSERT_EQ(-EINVAL, o->grad_sumsq(sh, 0, nb + 1, part));
  ASSERT_EQ(0, o->grad_sumsq(sh, 0, nb, part));
  for (size_t i = 0; i < nb; i++)
    total += part[i];
  ASSERT_EQ(0, o->grad_norm(sh, 0.25f, &norm));
  {
    float mine = (float)(sqrt(total) * 0.25);
    ASSERT(memcmp(&mine, &norm, sizeof(float)) == 0 && norm > 0);
  }
  o->destroy(whole);
  o->destroy(sh);
  o->destroy(empty);
  free(part);
  free(p), free(pw), free(mw), free(vw), free(ps), free(ms), free(vs), free(p0);
}

int main(void) {
  ASSERT_STR_EQ("cpu", gpt_cpu_ops.name);
  test_shard();
  test_init_in_order();
  test_gradient();
  test_accumulation();
  test_segments();
  test_learns_and_threads();
  test_refusals();
  printf("test_gpt_model: ok\n");
  return 0;
}
