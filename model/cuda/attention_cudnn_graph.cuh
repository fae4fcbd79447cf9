/* attention_cudnn_graph.cuh - the cudnn-frontend graphs of causal attention
 * over train_gpt's layout, described and not yet built: the product's
 * libgpt_cudnn.so (attention_cudnn.cu) builds them with the heuristic's
 * first plan, lab/cuda/attention_cudnn.cu with every plan. Host C++17;
 * include <cudnn_frontend.h> first.
 *
 * Q, K, V are [B, NH, T, HD] views of qkv rows [q | k | v] of 3C; the
 * output and its gradient views of rows of C; dQ, dK, dV land in qkv's
 * layout; the statistics are fp32 [B][NH][T], cuDNN's natural-log
 * log-sum-exp. Tensors are bound by these uids at execution. */
#ifndef GPT_CUDA_ATTENTION_CUDNN_GRAPH_CUH
#define GPT_CUDA_ATTENTION_CUDNN_GRAPH_CUH

#include <math.h>

namespace fe = cudnn_frontend;

enum { DNN_Q = 1, DNN_K, DNN_V, DNN_O, DNN_STATS, DNN_DO, DNN_DQ, DNN_DK, DNN_DV };

typedef std::shared_ptr<fe::graph::Tensor_attributes> dnn_tensor_t;

/* [B, NH, T, HD] over rows of `row` elements */
static inline dnn_tensor_t dnn_view(fe::graph::Graph &g, const char *name, int uid, int64_t B,
                                    int64_t T, int64_t NH, int64_t HD, int64_t row) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, NH, T, HD})
                      .set_stride({T * row, HD, row, 1}));
}

static inline dnn_tensor_t dnn_stats(dnn_tensor_t t, int64_t B, int64_t T, int64_t NH) {
  t->set_uid(DNN_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({B, NH, T, 1}).set_stride(
      {NH * T, T, 1, 1});
  return t;
}

static inline void dnn_types(fe::graph::Graph &g, int half) {
  g.set_io_data_type(half ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

/* forward: Q, K, V -> O and the statistics */
static inline void dnn_describe_fwd(fe::graph::Graph &g, int half, int64_t B, int64_t T,
                                    int64_t NH, int64_t HD) {
  const int64_t C = NH * HD;
  dnn_types(g, half);
  auto o = fe::graph::SDPA_attributes()
               .set_name("attention")
               .set_generate_stats(true)
               .set_attn_scale((float)(1.0 / sqrt((double)HD)))
               .set_causal_mask(true);
  auto [O, S] = g.sdpa(dnn_view(g, "Q", DNN_Q, B, T, NH, HD, 3 * C),
                       dnn_view(g, "K", DNN_K, B, T, NH, HD, 3 * C),
                       dnn_view(g, "V", DNN_V, B, T, NH, HD, 3 * C), o);
  O->set_output(true).set_uid(DNN_O).set_dim({B, NH, T, HD}).set_stride({T * C, HD, C, 1});
  dnn_stats(S, B, T, NH)->set_output(true);
}

/* backward: Q, K, V, O, dO and the forward's statistics -> dQ, dK, dV;
 * deterministic: cuDNN's deterministic algorithm (on Hopper its dP
 * workspace: dQ without fp32 atomics and their conversion) */
static inline void dnn_describe_bwd(fe::graph::Graph &g, int half, int64_t B, int64_t T,
                                    int64_t NH, int64_t HD, bool deterministic = false) {
  const int64_t C = NH * HD;
  dnn_types(g, half);
  auto o = fe::graph::SDPA_backward_attributes()
               .set_name("attention backward")
               .set_attn_scale((float)(1.0 / sqrt((double)HD)))
               .set_causal_mask(true)
               .set_deterministic_algorithm(deterministic);
  auto S = dnn_stats(g.tensor(fe::graph::Tensor_attributes().set_name("Stats")), B, T, NH);
  auto [dQ, dK, dV] = g.sdpa_backward(dnn_view(g, "Q", DNN_Q, B, T, NH, HD, 3 * C),
                                      dnn_view(g, "K", DNN_K, B, T, NH, HD, 3 * C),
                                      dnn_view(g, "V", DNN_V, B, T, NH, HD, 3 * C),
                                      dnn_view(g, "O", DNN_O, B, T, NH, HD, C),
                                      dnn_view(g, "dO", DNN_DO, B, T, NH, HD, C), S, o);
  const int uids[3] = {DNN_DQ, DNN_DK, DNN_DV};
  const dnn_tensor_t outs[3] = {dQ, dK, dV};
  for (int i = 0; i < 3; i++)
    outs[i]->set_output(true).set_uid(uids[i]).set_dim({B, NH, T, HD}).set_stride(
        {T * 3 * C, HD, 3 * C, 1});
}

#endif /* GPT_CUDA_ATTENTION_CUDNN_GRAPH_CUH */
