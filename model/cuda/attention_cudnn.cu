/* attention_cudnn.cu - libgpt_cudnn.so: cuDNN's fused causal attention for
 * train_gpt (attention_cudnn.h), host code only. attention.cu loads it with
 * dlopen where cuDNN 9 is installed and uses it on compute capability 9.0,
 * where it measured faster than the in-tree kernels (docs/cuda.md). */
#include <stdio.h>
#include <stdlib.h>

#include <cstring> /* cudnn-frontend uses std::strlen without including it */
#include <cudnn_frontend.h>

#include "attention_cudnn.h"

namespace fe = cudnn_frontend;

enum { UQ = 1, UK, UV, UO, US, UDO, UDQ, UDK, UDV };

struct gc_dnn {
  cudnnHandle_t h = nullptr;
  fe::graph::Graph fwd, bwd;
  void *ws = nullptr;
  int64_t ws_bytes = 0;
  int64_t C = 0;
  size_t esize = 2;
};

#define DNN_TRY(what, expr)                                                                 \
  do {                                                                                      \
    auto st_ = (expr);                                                                      \
    if (!st_.is_good()) {                                                                   \
      snprintf(err, errlen, "cuDNN %s: %s", what, st_.get_message().c_str());               \
      return -1;                                                                            \
    }                                                                                       \
  } while (0)

typedef std::shared_ptr<fe::graph::Tensor_attributes> tensor_t;

/* [B, NH, T, HD] over rows of `row` elements (3C for q, k, v and their
 * gradients, C for the output and its gradient) */
static tensor_t view(fe::graph::Graph &g, const char *name, int uid, int64_t B, int64_t T,
                     int64_t NH, int64_t HD, int64_t row) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, NH, T, HD})
                      .set_stride({T * row, HD, row, 1}));
}

static tensor_t stats(tensor_t t, int64_t B, int64_t T, int64_t NH) {
  t->set_data_type(fe::DataType_t::FLOAT).set_dim({B, NH, T, 1}).set_stride({NH * T, T, 1, 1});
  return t;
}

static int build(fe::graph::Graph &g, cudnnHandle_t h, const char *what, char *err,
                 size_t errlen) {
  DNN_TRY(what, g.validate());
  DNN_TRY(what, g.build_operation_graph(h));
  DNN_TRY(what, g.create_execution_plans({fe::HeurMode_t::A}));
  DNN_TRY(what, g.check_support(h));
  DNN_TRY(what, g.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
  return 0;
}

static int open_graphs(gc_dnn *d, int half, int64_t B, int64_t T, int64_t NH, int64_t HD,
                       char *err, size_t errlen) {
  const fe::DataType_t io = half ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
  const float scale = (float)(1.0 / sqrt((double)HD));
  const int64_t C = NH * HD;
  for (fe::graph::Graph *g : {&d->fwd, &d->bwd})
    g->set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);

  fe::graph::Graph &f = d->fwd;
  auto fo = fe::graph::SDPA_attributes()
                .set_name("attention")
                .set_generate_stats(true)
                .set_attn_scale(scale)
                .set_causal_mask(true);
  auto [O, S] = f.sdpa(view(f, "Q", UQ, B, T, NH, HD, 3 * C), view(f, "K", UK, B, T, NH, HD, 3 * C),
                       view(f, "V", UV, B, T, NH, HD, 3 * C), fo);
  O->set_output(true).set_uid(UO).set_dim({B, NH, T, HD}).set_stride({T * C, HD, C, 1});
  stats(S, B, T, NH)->set_output(true).set_uid(US);
  if (build(f, d->h, "forward", err, errlen) != 0)
    return -1;

  fe::graph::Graph &b = d->bwd;
  auto bo = fe::graph::SDPA_backward_attributes()
                .set_name("attention backward")
                .set_attn_scale(scale)
                .set_causal_mask(true);
  auto bS = stats(b.tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(US)), B, T,
                  NH);
  auto [dQ, dK, dV] =
      b.sdpa_backward(view(b, "Q", UQ, B, T, NH, HD, 3 * C), view(b, "K", UK, B, T, NH, HD, 3 * C),
                      view(b, "V", UV, B, T, NH, HD, 3 * C), view(b, "O", UO, B, T, NH, HD, C),
                      view(b, "dO", UDO, B, T, NH, HD, C), bS, bo);
  const int uids[3] = {UDQ, UDK, UDV};
  tensor_t outs[3] = {dQ, dK, dV};
  for (int i = 0; i < 3; i++)
    outs[i]->set_output(true).set_uid(uids[i]).set_dim({B, NH, T, HD}).set_stride(
        {T * 3 * C, HD, 3 * C, 1});
  if (build(b, d->h, "backward", err, errlen) != 0)
    return -1;

  int64_t wf = 0, wb = 0;
  DNN_TRY("workspace", f.get_workspace_size(wf));
  DNN_TRY("workspace", b.get_workspace_size(wb));
  d->ws_bytes = std::max<int64_t>(std::max(wf, wb), 256);
  if (cudaMalloc(&d->ws, (size_t)d->ws_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "cuDNN attention: no device memory for its %lld-byte workspace",
             (long long)d->ws_bytes);
    return -1;
  }
  d->C = C;
  d->esize = 2;
  return 0;
}

extern "C" __attribute__((visibility("default"))) const char *gc_dnn_version(void) {
  static char buf[64];
  snprintf(buf, sizeof(buf), "cuDNN %zu, cudnn-frontend %d", cudnnGetVersion(),
           CUDNN_FRONTEND_VERSION);
  return buf;
}

extern "C" __attribute__((visibility("default"))) void gc_dnn_close(gc_dnn_t *d) {
  if (!d)
    return;
  if (d->ws)
    cudaFree(d->ws);
  if (d->h)
    cudnnDestroy(d->h);
  delete d;
}

extern "C" __attribute__((visibility("default"))) int
gc_dnn_open(int half, int B, int T, int NH, int HD, gc_dnn_t **out, char *err, size_t errlen) {
  *out = nullptr;
  gc_dnn *d = new (std::nothrow) gc_dnn;
  if (!d) {
    snprintf(err, errlen, "cuDNN attention: out of memory");
    return -1;
  }
  int rc = -1;
  try {
    cudnnStatus_t st = cudnnCreate(&d->h);
    if (st != CUDNN_STATUS_SUCCESS)
      snprintf(err, errlen, "cudnnCreate: %s", cudnnGetErrorString(st));
    else
      rc = open_graphs(d, half, B, T, NH, HD, err, errlen);
  } catch (const std::exception &e) {
    snprintf(err, errlen, "cuDNN attention: %s", e.what());
    rc = -1;
  }
  if (rc != 0) {
    gc_dnn_close(d);
    return -1;
  }
  *out = d;
  return 0;
}

extern "C" __attribute__((visibility("default"))) size_t gc_dnn_bytes(const gc_dnn_t *d) {
  return d ? (size_t)d->ws_bytes : 0;
}

extern "C" __attribute__((visibility("default"))) int
gc_dnn_fwd(gc_dnn_t *d, void *out, float *lse, const void *qkv, cudaStream_t s) {
  char *q = (char *)qkv;
  const size_t c = (size_t)d->C * d->esize;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pack = {
      {UQ, q}, {UK, q + c}, {UV, q + 2 * c}, {UO, out}, {US, lse}};
  if (cudnnSetStream(d->h, s) != CUDNN_STATUS_SUCCESS)
    return -1;
  return d->fwd.execute(d->h, pack, d->ws).is_good() ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) int
gc_dnn_bwd(gc_dnn_t *d, void *dqkv, const void *dout, const void *qkv, const void *out,
           const float *lse, cudaStream_t s) {
  char *q = (char *)qkv, *dq = (char *)dqkv;
  const size_t c = (size_t)d->C * d->esize;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pack = {
      {UQ, q},         {UK, q + c},           {UV, q + 2 * c},  {UO, (void *)out},
      {US, (void *)lse}, {UDO, (void *)dout}, {UDQ, dq},        {UDK, dq + c},
      {UDV, dq + 2 * c}};
  if (cudnnSetStream(d->h, s) != CUDNN_STATUS_SUCCESS)
    return -1;
  return d->bwd.execute(d->h, pack, d->ws).is_good() ? 0 : -1;
}
