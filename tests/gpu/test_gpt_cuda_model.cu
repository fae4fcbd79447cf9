/* test_gpt_cuda_model - the whole CUDA backend through gpt.h against the
 * float64 reference model (ref.h): loss and every parameter's gradient of
 * small configurations, in bf16 (tensor-core attention), fp16 with loss
 * scaling (forced on any GPU), fp32 and the generic attention path; the
 * gradient segments reported in order with their events; accumulation over
 * micro-steps; grad_norm and one AdamW step against the host; fp16 overflow
 * seen as a non-finite norm; a few training steps lowering the loss; bad
 * sizes refused; ZeRO-1's shard: the update of [lo, hi) bitwise the whole
 * model's, nothing else written, the norm from the blocks' sums bitwise
 * grad_norm's. */
#include <string.h>

#include <vector>

#include "gpt_cuda.h"
#include "gpu_test.h"
#include "ref.h"

static const gpt_backend_ops_t *ops = &gpt_cuda_ops;

struct tcase {
  const char *name;
  gpt_config_t c;
  int B, T, dtype;
  float loss_scale;
  double tol_loss, tol_grad;
};

static const char *tensor_names[] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb",
                                     "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                                     "fcprojw", "fcprojb", "lnfw", "lnfb"};

struct batch {
  std::vector<int32_t> tok, tgt;
};
static batch make_batch(rng &r, int N, int V) {
  batch b;
  b.tok.resize(N), b.tgt.resize(N);
  for (int i = 0; i < N; i++) {
    b.tok[i] = (int32_t)(r.next() % V);
    b.tgt[i] = (int32_t)(r.next() % V);
  }
  return b;
}

struct seglog {
  std::vector<int> segs;
  int null_events = 0;
};
static int on_segment(void *arg, int seg, void *ev) {
  seglog *s = (seglog *)arg;
  s->segs.push_back(seg);
  if (!ev || cudaEventSynchronize((cudaEvent_t)ev) != cudaSuccess)
    s->null_events++;
  return 0;
}

static std::vector<double> grads_of(gpt_backend_t *m, size_t np, double unscale) {
  int dt = -1;
  void *g = ops->grad_buffer(m, &dt);
  /* the backend's streams do not block: wait for them before the copy */
  OK(ops->sync(m));
  std::vector<double> h = download((const float *)g, np);
  for (auto &x : h)
    x *= unscale;
  if (dt != GPT_FP32)
    printf("grad_buffer dtype %d, expected fp32\n", dt), g_failures++;
  return h;
}

static void compare_grads(const tcase &tc, const std::vector<double> &g,
                          const std::vector<double> &ref) {
  const gpt_config_t *c = &tc.c;
  for (int which = GPT_WTE; which <= GPT_LNFB; which++) {
    std::vector<double> a, b;
    const int per_layer = which >= GPT_LN1W && which <= GPT_FCPROJB;
    for (int l = 0; l < (per_layer ? c->num_layers : 1); l++) {
      size_t n, off = gpt_tensor_offset(c, which, l, &n);
      a.insert(a.end(), g.begin() + off, g.begin() + off + n);
      b.insert(b.end(), ref.begin() + off, ref.begin() + off + n);
    }
    char what[120];
    snprintf(what, sizeof(what), "[%s] grad %s", tc.name, tensor_names[which]);
    check(what, a, b, tc.tol_grad);
  }
}

static void test_case(const tcase &tc, rng &r) {
  const gpt_config_t *c = &tc.c;
  const size_t np = gpt_num_params(c);
  const int N = tc.B * tc.T;
  char what[160];
  std::vector<float> params(np);
  gpt_init_params(c, r.next(), params.data());
  gpt_backend_t *m = nullptr;
  OK(ops->create(c, tc.B, tc.T, tc.dtype, 0, 0, &m));
  char desc[300];
  printf("[%s] %s\n", tc.name, gpt_cuda_describe(m, desc, sizeof(desc)));
  OK(ops->set_state(m, params.data(), NULL, NULL));
  batch bt = make_batch(r, N, c->vocab_size);

  /* forward + backward against the reference */
  std::vector<double> rg;
  const double rloss =
      ref::model_fwd_bwd(c, params.data(), bt.tok.data(), bt.tgt.data(), tc.B, tc.T, rg);
  OK(ops->zero_grad(m));
  float loss = 0;
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  seglog sl;
  OK(ops->backward(m, tc.loss_scale, 1, on_segment, &sl));
  OK(ops->sync(m));
  std::vector<double> lv(1, loss), rl(1, rloss);
  snprintf(what, sizeof(what), "[%s] loss %.5f vs %.5f", tc.name, loss, rloss);
  check(what, lv, rl, tc.tol_loss);
  std::vector<double> g = grads_of(m, np, 1.0 / tc.loss_scale);
  compare_grads(tc, g, rg);
  int order_ok = (int)sl.segs.size() == gpt_num_segments(c) && sl.null_events == 0;
  for (size_t i = 0; order_ok && i < sl.segs.size(); i++)
    order_ok = sl.segs[i] == (int)i;
  snprintf(what, sizeof(what), "[%s] %zu segments reported in order, events valid", tc.name,
           sl.segs.size());
  expect(what, order_ok);

  /* grad_norm */
  float norm = 0;
  OK(ops->grad_norm(m, 0.25f, &norm));
  double s = 0;
  std::vector<double> graw = grads_of(m, np, 1.0);
  for (double x : graw)
    s += x * x;
  std::vector<double> nv(1, norm), rn(1, sqrt(s) * 0.25);
  snprintf(what, sizeof(what), "[%s] grad_norm", tc.name);
  check(what, nv, rn, 1e-5);

  /* one AdamW step against the host, on the gradient just computed */
  std::vector<float> p0(np), m0(np), v0(np), p1(np), m1(np), v1(np);
  OK(ops->get_state(m, p0.data(), m0.data(), v0.data()));
  gpt_adamw_t a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / tc.loss_scale, 1};
  OK(ops->adamw(m, &a));
  OK(ops->get_state(m, p1.data(), m1.data(), v1.data()));
  std::vector<double> rp(np), gp(p1.begin(), p1.end());
  for (int which = GPT_WTE; which <= GPT_LNFB; which++) {
    const int per_layer = which >= GPT_LN1W && which <= GPT_FCPROJB;
    const int decay = which == GPT_WTE || which == GPT_WPE || which == GPT_QKVW ||
                      which == GPT_ATTPROJW || which == GPT_FCW || which == GPT_FCPROJW;
    for (int l = 0; l < (per_layer ? c->num_layers : 1); l++) {
      size_t n, off = gpt_tensor_offset(c, which, l, &n);
      for (size_t i = off; i < off + n; i++) {
        double gr = graw[i] * a.grad_scale;
        double mm = a.beta1 * m0[i] + (1 - a.beta1) * gr;
        double vv = a.beta2 * v0[i] + (1 - a.beta2) * gr * gr;
        double mh = mm / (1 - a.beta1), vh = vv / (1 - a.beta2);
        rp[i] = p0[i] - a.lr * (mh / (sqrt(vh) + a.eps) + (decay ? a.weight_decay : 0) * p0[i]);
      }
    }
  }
  snprintf(what, sizeof(what), "[%s] adamw step (decay on 2-D tensors only)", tc.name);
  check(what, gp, rp, 1e-6);

  /* accumulation: two micro-steps of the same batch give twice the gradient;
   * segments are reported only on the last */
  OK(ops->set_state(m, params.data(), NULL, NULL));
  OK(ops->zero_grad(m));
  seglog s1, s2;
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  OK(ops->backward(m, tc.loss_scale, 0, on_segment, &s1));
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  OK(ops->backward(m, tc.loss_scale, 1, on_segment, &s2));
  std::vector<double> g2 = grads_of(m, np, 0.5 / tc.loss_scale);
  snprintf(what, sizeof(what), "[%s] accumulated 2 micro-steps = 2 x one", tc.name);
  check(what, g2, g, tc.tol_grad / 10);
  snprintf(what, sizeof(what), "[%s] segments only on the last micro-step", tc.name);
  expect(what, s1.segs.empty() && (int)s2.segs.size() == gpt_num_segments(c));

  /* zero_grad is deferred to the next backward, which writes the large
   * tensors instead of adding to them and clears the rest first: after the
   * two micro-steps above (twice the gradient in the buffer), zero_grad and
   * one micro-step give the first one's gradient again, twice (the second
   * from a CUDA graph of its own) */
  for (int k = 0; k < 2; k++) {
    OK(ops->zero_grad(m));
    OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
    OK(ops->backward(m, tc.loss_scale, 1, NULL, NULL));
    OK(ops->sync(m));
    std::vector<double> g1 = grads_of(m, np, 1.0 / tc.loss_scale);
    snprintf(what, sizeof(what), "[%s] zero_grad, then one micro-step = the first (%d)",
             tc.name, k + 1);
    check(what, g1, g, tc.tol_grad / 10);
  }
  /* The forward of a first micro-step writes the classifier's wte gradient
   * into the gradient, scaled as the last backward was: a backward at
   * another scale rescales it (x4: the rest of the backward, in bf16 or
   * fp16, then rounds as at x1, and the comparison is as tight as above)... */
  OK(ops->zero_grad(m));
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  OK(ops->backward(m, 4.f * tc.loss_scale, 1, NULL, NULL));
  std::vector<double> g3 = grads_of(m, np, 1.0 / (4.0 * tc.loss_scale));
  snprintf(what, sizeof(what), "[%s] loss scale x4 after a micro-step at x1: 4 x the first",
           tc.name);
  check(what, g3, g, tc.tol_grad / 10);
  OK(ops->zero_grad(m)); /* back to the usual scale */
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  OK(ops->backward(m, tc.loss_scale, 1, NULL, NULL));
  /* ... and a read of the fresh gradient between that forward and its
   * backward sees zeros, and loses nothing of the backward to come */
  OK(ops->zero_grad(m));
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  float fn = -1.f;
  OK(ops->grad_norm(m, 1.f, &fn));
  OK(ops->backward(m, tc.loss_scale, 1, NULL, NULL));
  std::vector<double> gf = grads_of(m, np, 1.0 / tc.loss_scale);
  snprintf(what, sizeof(what), "[%s] zero_grad, forward, grad_norm = 0 (%g)", tc.name, fn);
  expect(what, fn == 0.f);
  snprintf(what, sizeof(what), "[%s] ... then its backward = the first", tc.name);
  check(what, gf, g, tc.tol_grad / 10);
  /* ... and whatever reads the gradient before a backward sees zeros */
  OK(ops->zero_grad(m));
  float zn = -1.f;
  OK(ops->grad_norm(m, 1.f, &zn));
  snprintf(what, sizeof(what), "[%s] zero_grad, then grad_norm = 0 (%g)", tc.name, zn);
  expect(what, zn == 0.f);
  OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
  OK(ops->backward(m, tc.loss_scale, 1, NULL, NULL));
  OK(ops->zero_grad(m));
  std::vector<double> gz = grads_of(m, np, 1.0);
  size_t nonzero = 0;
  for (double x : gz)
    nonzero += x != 0.0;
  snprintf(what, sizeof(what), "[%s] zero_grad, then grad_buffer: all zero (%zu not)",
           tc.name, nonzero);
  expect(what, nonzero == 0);

  /* state round trip */
  OK(ops->set_state(m, p1.data(), m1.data(), v1.data()));
  std::vector<float> p2(np), m2(np), v2(np);
  OK(ops->get_state(m, p2.data(), m2.data(), v2.data()));
  snprintf(what, sizeof(what), "[%s] set_state/get_state round trip exact", tc.name);
  expect(what, p2 == p1 && m2 == m1 && v2 == v1);

  /* backward without a forward that had targets is refused */
  OK(ops->forward(m, bt.tok.data(), NULL, NULL));
  snprintf(what, sizeof(what), "[%s] backward after a forward without targets refused",
           tc.name);
  expect(what, ops->backward(m, 1.f, 1, NULL, NULL) < 0);
  ops->destroy(m);
}

/* A few AdamW steps on one batch: the loss must fall (memorisation). */
static void test_training(rng &r, int dtype, const char *name) {
  gpt_config_t c = {256, 1000, 1024, 2, 4, 256};
  const int B = 2, T = 256, N = B * T;
  const size_t np = gpt_num_params(&c);
  std::vector<float> params(np);
  gpt_init_params(&c, 7, params.data());
  gpt_backend_t *m = nullptr;
  OK(ops->create(&c, B, T, dtype, 0, 0, &m));
  OK(ops->set_state(m, params.data(), NULL, NULL));
  batch bt = make_batch(r, N, c.vocab_size);
  const float ls = dtype == GPT_FP16 ? 1024.f : 1.f;
  float first = 0, loss = 0, norm = 0;
  for (int step = 1; step <= 40; step++) {
    OK(ops->zero_grad(m));
    OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
    OK(ops->backward(m, ls, 1, NULL, NULL));
    OK(ops->grad_norm(m, 1.f / ls, &norm));
    gpt_adamw_t a = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.f / ls, step};
    OK(ops->adamw(m, &a));
    if (step == 1)
      first = loss;
    if (step == 1 || step % 10 == 0)
      printf("[%s training] step %d loss %.4f grad norm %.4f\n", name, step, loss, norm);
  }
  char what[120];
  snprintf(what, sizeof(what), "[%s training] 40 steps: loss %.3f -> %.3f (< 0.7x)", name,
           first, loss);
  expect(what, isfinite(loss) && loss < 0.7f * first);
  ops->destroy(m);
}

static int same(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* ZeRO-1's operations (gpt.h): models sharded to [lo, hi) (cut inside
 * tensors, not at multiples of 4) and to an empty shard, given the whole
 * model's gradient, update bitwise the parameters and moments of the whole
 * model's [lo, hi) and leave the rest alone; after the trainer's all-gather
 * into param_buffer the next forward sees every updated weight (the
 * low-precision copy refreshed): the whole model's loss, bitwise. The
 * blocks' sums of squares added in order give grad_norm bitwise. */
static void test_shard(rng &r, int dtype, const char *name) {
  /* the same cuBLASLt algorithms in every model: losses comparable bitwise */
  setenv("GPT_CUDA_TUNE", "0", 1);
  setenv("GPT_CUDA_TUNE_CACHE", "0", 1);
  gpt_config_t c = {256, 1000, 1024, 2, 4, 256};
  const int B = 2, T = 256, N = B * T;
  const size_t n = gpt_num_params(&c), lo = n / 3 + 1, hi = 2 * n / 3 + 5, k = hi - lo;
  std::vector<float> p(n), pw(n), mw(n), vw(n), ps(n), ms(n), vs(n), p0(n);
  gpt_init_params(&c, 11, p.data());
  gpt_backend_t *whole = nullptr, *sh = nullptr, *empty = nullptr;
  OK(ops->create(&c, B, T, dtype, 0, 0, &whole));
  OK(ops->create(&c, B, T, dtype, 0, 0, &sh));
  OK(ops->create(&c, B, T, dtype, 0, 0, &empty));
  for (gpt_backend_t *m : {whole, sh, empty})
    OK(ops->set_state(m, p.data(), NULL, NULL));
  char what[200];
  expect("shard refuses lo > hi", ops->shard(sh, hi, lo) < 0);
  expect("shard refuses hi past the parameters", ops->shard(sh, lo, n + 1) < 0);
  const size_t mem0 = gpt_cuda_memory(sh);
  OK(ops->shard(sh, lo, hi));
  expect("shard refuses a second call", ops->shard(sh, lo, hi) < 0);
  OK(ops->shard(empty, n, n));
  snprintf(what, sizeof(what), "[%s shard] device memory falls by the moments outside the shard "
           "(%zu -> %zu bytes)", name, mem0, gpt_cuda_memory(sh));
  expect(what, mem0 - gpt_cuda_memory(sh) >= 8 * (n - k) - 64 &&
                   mem0 - gpt_cuda_memory(sh) <= 8 * (n - k));
  expect("param_buffer is the device master", ops->param_buffer(sh) != NULL);
  batch bt = make_batch(r, N, c.vocab_size);
  float loss = 0, ls = 0;
  for (int t = 1; t <= 2; t++) {
    OK(ops->zero_grad(whole));
    OK(ops->forward(whole, bt.tok.data(), bt.tgt.data(), &loss));
    OK(ops->backward(whole, 1.f, 1, NULL, NULL));
    /* the one gradient for all (backward's atomics make two differ); the
     * backends' streams do not wait for the default stream's copies */
    OK(ops->sync(whole));
    for (gpt_backend_t *m : {sh, empty})
      CK(cudaMemcpy(ops->grad_buffer(m, NULL), ops->grad_buffer(whole, NULL), n * 4,
                    cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
    OK(ops->get_state(sh, p0.data(), NULL, NULL)); /* this step's start */
    gpt_adamw_t a = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t};
    for (gpt_backend_t *m : {whole, sh, empty})
      OK(ops->adamw(m, &a));
    OK(ops->get_state(whole, pw.data(), NULL, NULL));
    OK(ops->get_state(sh, ps.data(), ms.data(), vs.data()));
    snprintf(what, sizeof(what), "[%s shard] step %d: [lo, hi) bitwise the whole model's, the "
             "rest untouched", name, t);
    expect(what, same(ps.data() + lo, pw.data() + lo, k) && same(ps.data(), p0.data(), lo) &&
                     same(ps.data() + hi, p0.data() + hi, n - hi) &&
                     !same(ps.data() + lo, p0.data() + lo, k));
    /* the trainer's all-gather; the next forward sees the whole update */
    CK(cudaMemcpy(ops->param_buffer(sh), pw.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    OK(ops->forward(whole, bt.tok.data(), bt.tgt.data(), &loss));
    OK(ops->forward(sh, bt.tok.data(), bt.tgt.data(), &ls));
    snprintf(what, sizeof(what), "[%s shard] step %d: forward after the all-gather: loss %.6f, "
             "the whole model's %.6f", name, t, ls, loss);
    expect(what, memcmp(&ls, &loss, sizeof(float)) == 0);
  }
  OK(ops->get_state(whole, pw.data(), mw.data(), vw.data()));
  OK(ops->get_state(sh, ps.data(), ms.data(), vs.data()));
  expect("[shard] the moments are the whole model's [lo, hi)",
         same(ms.data(), mw.data() + lo, k) && same(vs.data(), vw.data() + lo, k));
  OK(ops->get_state(empty, ps.data(), NULL, NULL));
  expect("[shard] an empty shard updates nothing", same(ps.data(), p.data(), n));
  /* the moments of a shard go back in as hi - lo floats */
  OK(ops->set_state(sh, NULL, vw.data() + lo, mw.data() + lo));
  OK(ops->get_state(sh, NULL, ms.data(), vs.data()));
  expect("[shard] set_state's moments are the shard's",
         same(ms.data(), vw.data() + lo, k) && same(vs.data(), mw.data() + lo, k));
  /* the norm from the blocks' sums, any run of blocks alike */
  const size_t block = ops->norm_block(sh), nb = (n + block - 1) / block;
  std::vector<double> part(nb + 1), tail(nb);
  expect("[shard] norm blocks: a multiple of 4, at least 4096, several here",
         block % 4 == 0 && block >= 4096 && nb > 2);
  expect("grad_sumsq refuses blocks past the end", ops->grad_sumsq(sh, 0, nb + 1, part.data()) < 0);
  OK(ops->grad_sumsq(whole, 0, nb, part.data()));
  OK(ops->grad_sumsq(whole, nb / 2, nb, tail.data()));
  double total = 0;
  for (size_t i = 0; i < nb; i++)
    total += part[i];
  float norm = 0;
  OK(ops->grad_norm(whole, 0.25f, &norm));
  const float mine = (float)(sqrt(total) * 0.25);
  snprintf(what, sizeof(what), "[%s shard] the blocks' sums give grad_norm %.6g bitwise (%.6g)",
           name, norm, mine);
  expect(what, memcmp(&mine, &norm, sizeof(float)) == 0 && norm > 0);
  expect("[shard] a block's sum is the same from any run of blocks",
         memcmp(tail.data(), part.data() + nb / 2, (nb - nb / 2) * sizeof(double)) == 0);
  for (gpt_backend_t *m : {whole, sh, empty})
    ops->destroy(m);
  unsetenv("GPT_CUDA_TUNE");
  unsetenv("GPT_CUDA_TUNE_CACHE");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  gpu_or_skip();
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  const int cc = p.major * 10 + p.minor;
  rng r(424242);
  const gpt_config_t flash = {256, 1000, 1024, 2, 4, 256};  /* head size 64 */
  const gpt_config_t generic = {64, 300, 384, 2, 3, 96};    /* head size 32 */
  std::vector<tcase> cases = {
      {"fp32 generic", generic, 2, 50, GPT_FP32, 1.f, 1e-5, 1e-4},
      {"fp16 flash, loss scale 4096", flash, 2, 256, GPT_FP16, 4096.f, 5e-3, 2e-2},
      {"bf16 generic attention", generic, 2, 50, GPT_BF16, 1.f, 1e-2, 5e-2},
      {"bf16 flash", flash, 2, 256, GPT_BF16, 1.f, 1e-2, 5e-2},
  };
  for (const tcase &tc : cases) {
    if (tc.dtype == GPT_BF16 && cc < 80)
      continue;
    test_case(tc, r);
  }

  /* fp16 overflow: an absurd loss scale must show as a non-finite norm */
  {
    gpt_backend_t *m = nullptr;
    const size_t np = gpt_num_params(&flash);
    std::vector<float> params(np);
    gpt_init_params(&flash, 3, params.data());
    OK(ops->create(&flash, 2, 256, GPT_FP16, 0, 0, &m));
    OK(ops->set_state(m, params.data(), NULL, NULL));
    batch bt = make_batch(r, 512, flash.vocab_size);
    float loss = 0, norm = 0;
    OK(ops->zero_grad(m));
    OK(ops->forward(m, bt.tok.data(), bt.tgt.data(), &loss));
    OK(ops->backward(m, 3e38f, 1, NULL, NULL));
    OK(ops->grad_norm(m, 1.f, &norm));
    char what[120];
    snprintf(what, sizeof(what), "[fp16] overflow (loss scale 3e38): grad norm %g non-finite",
             norm);
    expect(what, !isfinite(norm));
    ops->destroy(m);
  }

  test_training(r, cc >= 80 ? GPT_BF16 : GPT_FP16, cc >= 80 ? "bf16" : "fp16");
  test_training(r, GPT_FP16, "fp16 loss-scaled");
  test_shard(r, cc >= 80 ? GPT_BF16 : GPT_FP16, cc >= 80 ? "bf16" : "fp16");
  test_shard(r, GPT_FP32, "fp32");

  /* bad sizes: one clear error, no backend */
  {
    gpt_config_t bad = {64, 300, 384, 2, 4, 100}; /* channels not a multiple of 8 */
    gpt_backend_t *m = (gpt_backend_t *)&bad;
    int rc = ops->create(&bad, 2, 50, GPT_BF16, 0, 0, &m);
    expect("create refuses channels % 8 != 0", rc < 0 && m == NULL);
    gpt_config_t longer = {64, 300, 384, 2, 3, 96};
    rc = ops->create(&longer, 2, 65, GPT_FP32, 0, 0, &m);
    expect("create refuses T above max_seq_len", rc < 0 && m == NULL);
  }
  printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
