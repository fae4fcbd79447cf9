/* attention_cudnn.cu - libgpt_cudnn.so: cuDNN's fused causal attention for
 * train_gpt (attention_cudnn.h), host code only. attention.cu loads it with
 * dlopen where cuDNN 9 is installed and uses it on compute capability 9.0,
 * where it measured faster than the in-tree kernels (docs/cuda.md). */
#include <stdio.h>
#include <stdlib.h>

#include <cstring> /* cudnn-frontend uses std::strlen without including it */
#include <cudnn_frontend.h>

#include "attention_cudnn.h"
#include "attention_cudnn_graph.cuh"

struct gc_dnn {
  cudnnHandle_t h = nullptr;
  fe::graph::Graph fwd, bwd;
  void *ws = nullptr;
  int64_t ws_bytes = 0;
  size_t cbytes = 0; /* C elements of 2 bytes (bf16 or fp16): q to k, k to v */
};

#define DNN_TRY(what, expr)                                                                 \
  do {                                                                                      \
    auto st_ = (expr);                                                                      \
    if (!st_.is_good()) {                                                                   \
      snprintf(err, errlen, "cuDNN %s: %s", what, st_.get_message().c_str());               \
      return -1;                                                                            \
    }                                                                                       \
  } while (0)

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
  fe::graph::Graph &f = d->fwd, &b = d->bwd;
  dnn_describe_fwd(f, half, B, T, NH, HD);
  if (build(f, d->h, "forward", err, errlen) != 0)
    return -1;
#ifndef GPT_CUDNN_DETERMINISTIC /* lab/cuda's libgpt_cudnn_det.so sets it (an A/B) */
#define GPT_CUDNN_DETERMINISTIC 0
#endif
  dnn_describe_bwd(b, half, B, T, NH, HD, GPT_CUDNN_DETERMINISTIC != 0);
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
  d->cbytes = (size_t)(NH * HD) * 2;
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
  const size_t c = d->cbytes;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pack = {
      {DNN_Q, q}, {DNN_K, q + c}, {DNN_V, q + 2 * c}, {DNN_O, out}, {DNN_STATS, lse}};
  if (cudnnSetStream(d->h, s) != CUDNN_STATUS_SUCCESS)
    return -1;
  return d->fwd.execute(d->h, pack, d->ws).is_good() ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) int
gc_dnn_bwd(gc_dnn_t *d, void *dqkv, const void *dout, const void *qkv, const void *out,
           const float *lse, cudaStream_t s) {
  char *q = (char *)qkv, *dq = (char *)dqkv;
  const size_t c = d->cbytes;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void *> pack = {
      {DNN_Q, q},          {DNN_K, q + c},           {DNN_V, q + 2 * c},
      {DNN_O, (void *)out}, {DNN_STATS, (void *)lse}, {DNN_DO, (void *)dout},
      {DNN_DQ, dq},        {DNN_DK, dq + c},         {DNN_DV, dq + 2 * c}};
  if (cudnnSetStream(d->h, s) != CUDNN_STATUS_SUCCESS)
    return -1;
  return d->bwd.execute(d->h, pack, d->ws).is_good() ? 0 : -1;
}
