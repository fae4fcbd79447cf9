/* attention_cudnn.cu - cuDNN's fused attention (its SDPA graph, through the
 * cudnn-frontend headers) against the product's attention kernels on the
 * same inputs: does cuDNN compute the same function, and how long does it
 * take for train_gpt's shapes (issue #26: the attention kernels are 15-18 %
 * of a step's GPU time).
 *
 *   build/lab/cuda/attention_cudnn [B T NH]   (default 16 1024 12: gpt2-124m; head size 64)
 *
 * Q, K and V are strided views of the product's packed (B, T, 3, NH, 64)
 * buffer and dQ, dK, dV land in the same layout, so no copy is added. cuDNN
 * writes the softmax statistics in natural log, the product in base 2: the
 * check converts. The backward is given cuDNN's own forward outputs.
 * Exit 77 without a GPU, 1 when cuDNN does not compute the product's
 * function or cannot build the graph, 0 otherwise. */
#include <math.h>
#include <time.h>
#include <stdlib.h>

#include <cstring> /* cudnn-frontend uses std::strlen without it */
#include <cudnn_frontend.h>

#include "attention_cudnn_graph.cuh"
#include "lab_attention.cuh"

#define FE_OK(what, expr)                                                                   \
  do {                                                                                      \
    auto st_ = (expr);                                                                      \
    if (!st_.is_good()) {                                                                   \
      fprintf(stderr, "cudnn %s: %s\n", what, st_.get_message().c_str());                   \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The product's way (the heuristic's first plan built), or with every plan
 * of heuristics A and FALLBACK listed and none built (all = 1). */
static void finish(fe::graph::Graph &g, cudnnHandle_t h, const char *what, int all = 0) {
  const double t0 = now_s();
  FE_OK(what, g.validate());
  FE_OK(what, g.build_operation_graph(h));
  if (all) {
    FE_OK(what, g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}));
    FE_OK(what, g.check_support(h));
    return;
  }
  FE_OK(what, g.create_execution_plans({fe::HeurMode_t::A}));
  FE_OK(what, g.check_support(h));
  FE_OK(what, g.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
  printf("%s graph built in %.3f s\n", what, now_s() - t0);
}

int main(int argc, char **argv) {
  const int cc = lab_cc();
  gc_attention_init(cc);
  lab_attn a;
  if (lab_attn_open(&a, argc, argv, "attention_cudnn") != 0)
    return 2;
  cudnnHandle_t h;
  const double tc = now_s();
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "cudnnCreate failed: is libcudnn.so.9 on LD_LIBRARY_PATH?\n");
    return 1;
  }
  if (cudnnSetStream(h, a.s) != CUDNN_STATUS_SUCCESS)
    return 1;
  printf("cudnnCreate: %.3f s\n", now_s() - tc);
  printf("cuDNN %zu (headers %d), cudnn-frontend %d\n", cudnnGetVersion(), CUDNN_VERSION,
         CUDNN_FRONTEND_VERSION);
  const int64_t C = a.C, B = a.B, T = a.Tn, NH = a.NH;

  /* the product's graphs (model/cuda/attention_cudnn_graph.cuh), built as
   * the product builds them; then again with every plan listed */
  fe::graph::Graph gf, gb, gf2, gb2, gbd;
  dnn_describe_fwd(gf, 0, B, T, NH, 64);
  finish(gf, h, "forward");
  dnn_describe_bwd(gb, 0, B, T, NH, 64);
  finish(gb, h, "backward");
  dnn_describe_fwd(gf2, 0, B, T, NH, 64);
  finish(gf2, h, "forward, all plans", 1);
  dnn_describe_bwd(gb2, 0, B, T, NH, 64);
  finish(gb2, h, "backward, all plans", 1);

  /* cuDNN's deterministic backward: on Hopper its dP workspace, dQ written
   * by a product of dS and K instead of fp32 atomics and a conversion; left
   * out (and said) where this cuDNN cannot build it */
  dnn_describe_bwd(gbd, 0, B, T, NH, 64, true);
  std::string why;
  auto step = [&](fe::error_t st) {
    if (why.empty() && !st.is_good())
      why = st.get_message().empty() ? "failed" : st.get_message();
    return why.empty();
  };
  const bool det = step(gbd.validate()) && step(gbd.build_operation_graph(h)) &&
                   step(gbd.create_execution_plans({fe::HeurMode_t::A})) &&
                   step(gbd.check_support(h)) &&
                   step(gbd.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
  if (!det)
    printf("backward, deterministic: not built: %s\n", why.c_str());

  int64_t wsf = 0, wsb = 0, wsd = 0;
  FE_OK("forward workspace", gf.get_workspace_size(wsf));
  FE_OK("backward workspace", gb.get_workspace_size(wsb));
  if (det)
    FE_OK("deterministic backward workspace", gbd.get_workspace_size(wsd));
  void *ws = nullptr;
  CK(cudaMalloc(&ws, std::max<int64_t>(std::max(std::max(wsf, wsb), wsd), 1)));
  printf("workspace: forward %lld bytes, backward %lld bytes, deterministic backward %lld bytes\n",
         (long long)wsf, (long long)wsb, (long long)wsd);

  bf16 *qkv = a.qkv;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pf = {
      {DNN_Q, qkv}, {DNN_K, qkv + C}, {DNN_V, qkv + 2 * C}, {DNN_O, a.out1},
      {DNN_STATS, a.lse1}};
  auto fwd = [&] { return gf.execute(h, pf, ws).is_good() ? 0 : 1; };
  OK(fwd());
  CK(cudaStreamSynchronize(a.s));
  check("cudnn fwd: output", download(a.out1, a.N * a.C), a.rout, 1e-2);
  std::vector<double> lse = download(a.lse1, a.nl);
  for (double &v : lse)
    v *= 1.4426950408889634; /* natural log -> base 2, as the product keeps it */
  check("cudnn fwd: log-sum-exp (base 2)", lse, a.rlse, 1e-5);
  printf("%-44s fwd %.3f ms\n", "cudnn sdpa", lab_median_ms(a.s, 20, fwd));

  bf16 *dqkv = a.dqkv1;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pb = {
      {DNN_Q, qkv},        {DNN_K, qkv + C},   {DNN_V, qkv + 2 * C}, {DNN_O, a.out1},
      {DNN_STATS, a.lse1}, {DNN_DO, a.dy},     {DNN_DQ, dqkv},       {DNN_DK, dqkv + C},
      {DNN_DV, dqkv + 2 * C}};
  /* each backward timed, then run twice more: are dQ, dK, dV the same bits? */
  auto same_bits = [&](const char *what, fe::graph::Graph &g) {
    const size_t n = a.N * 3 * a.C;
    OK(g.execute(h, pb, ws).is_good() ? 0 : 1);
    CK(cudaStreamSynchronize(a.s));
    std::vector<bf16> x(n), y(n);
    CK(cudaMemcpy(x.data(), a.dqkv1, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    OK(g.execute(h, pb, ws).is_good() ? 0 : 1);
    CK(cudaStreamSynchronize(a.s));
    CK(cudaMemcpy(y.data(), a.dqkv1, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    printf("%-44s the same bits in two runs: %s\n", what,
           memcmp(x.data(), y.data(), n * sizeof(bf16)) ? "no" : "yes");
  };
  lab_attn_bwd(&a, "cudnn sdpa backward", [&] { return gb.execute(h, pb, ws).is_good() ? 0 : 1; });
  same_bits("cudnn sdpa backward", gb);
  if (det) {
    lab_attn_bwd(&a, "cudnn sdpa backward, deterministic",
                 [&] { return gbd.execute(h, pb, ws).is_good() ? 0 : 1; });
    same_bits("cudnn sdpa backward, deterministic", gbd);
  }
  /* one layer's attention, forward and backward, as a step runs it */
  printf("%-44s fwd+bwd %.3f ms\n", "cudnn sdpa", lab_median_ms(a.s, 20, [&] {
           return fwd() || gb.execute(h, pb, ws).is_good() == false;
         }));
  printf("%-44s fwd+bwd %.3f ms\n", "product", lab_median_ms(a.s, 20, [&] {
           return gc_attention_fwd<bf16>(a.out0, a.lse0, a.qkv, a.B, a.Tn, a.NH, 64, a.s) ||
                  gc_attention_bwd<bf16>(a.dqkv0, a.scratch, a.dy, a.qkv, a.out0, a.lse0, a.B,
                                         a.Tn, a.NH, 64, a.s);
         }));
  /* every execution plan cuDNN's heuristics offer (modes A and FALLBACK),
   * each built, checked against the product's outputs and timed: is the
   * heuristic's first choice (the one above) the fastest? */
  struct cand {
    const char *what;
    fe::graph::Graph *g;
    std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> *pack;
    bf16 *dst;
    size_t n;
    const std::vector<double> *ref;
  } cands[] = {{"fwd", &gf2, &pf, a.out1, a.N * a.C, &a.rout},
               {"bwd", &gb2, &pb, a.dqkv1, a.N * 3 * a.C, &a.rdqkv}};
  for (const cand &c : cands) {
    const int64_t np = c.g->get_execution_plan_count();
    printf("%s: %lld execution plans\n", c.what, (long long)np);
    for (int64_t i = 0; i < np; i++) {
      char what[96];
      snprintf(what, sizeof(what), "cudnn %s plan %lld", c.what, (long long)i);
      if (!c.g->build_plan_at_index(h, i).is_good()) {
        printf("%-44s not buildable\n", what);
        continue;
      }
      int64_t w = 0;
      void *wsi = nullptr;
      if (!c.g->get_workspace_size_plan_at_index(i, w).is_good())
        continue;
      CK(cudaMalloc(&wsi, std::max<int64_t>(w, 256)));
      auto run = [&] { return c.g->execute_plan_at_index(h, *c.pack, wsi, i).is_good() ? 0 : 1; };
      CK(cudaMemset(c.dst, 0xff, c.n * sizeof(bf16)));
      if (run() != 0) {
        printf("%-44s does not run\n", what);
        CK(cudaFree(wsi));
        continue;
      }
      CK(cudaStreamSynchronize(a.s));
      check(what, download(c.dst, c.n), *c.ref, 2e-2);
      printf("%-44s %s %.3f ms (workspace %lld)\n", what, c.what, lab_median_ms(a.s, 20, run),
             (long long)w);
      CK(cudaFree(wsi));
    }
  }

  /* train_gpt replays its step as a CUDA graph: the same calls captured,
   * then replayed, must give the eager result */
  cudaGraph_t cg;
  cudaGraphExec_t ge;
  CK(cudaMemset(a.dqkv1, 0xff, a.N * 3 * a.C * sizeof(bf16)));
  CK(cudaStreamBeginCapture(a.s, cudaStreamCaptureModeThreadLocal));
  int crc = fwd() || gb.execute(h, pb, ws).is_good() == false;
  CK(cudaStreamEndCapture(a.s, &cg));
  OK(crc);
  CK(cudaGraphInstantiate(&ge, cg, 0));
  CK(cudaGraphLaunch(ge, a.s));
  CK(cudaStreamSynchronize(a.s));
  check("cudnn fwd+bwd captured in a CUDA graph", download(a.dqkv1, a.N * 3 * a.C), a.rdqkv,
        2e-2);
  printf("%-44s fwd+bwd %.3f ms\n", "cudnn sdpa, graph replay",
         lab_median_ms(a.s, 20, [&] { return cudaGraphLaunch(ge, a.s) != cudaSuccess; }));
  cudnnDestroy(h);
  return g_failures ? 1 : 0;
}
