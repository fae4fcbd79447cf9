/* attention_cudnn.h - cuDNN's fused attention (its SDPA graph, built with
 * the cudnn-frontend headers) for train_gpt's shapes, in a library of its
 * own, libgpt_cudnn.so, that attention.cu loads at run time (dlopen): a
 * machine without cuDNN runs the in-tree kernels, and nothing that links
 * gpt_cuda needs libcudnn.so to start.
 *
 * The layout is the in-tree kernels': qkv rows [q | k | v] of 3C, output
 * [N][C], dqkv as qkv; Q, K, V, dQ, dK and dV are strided views, no copy.
 * The statistics (fp32 [B][NH][T]) are cuDNN's natural-log log-sum-exp, not
 * the in-tree kernels' base-2 one: a forward and its backward must both be
 * cuDNN's. On lab/cuda/attention_cudnn's A/B (docs/cuda.md): the forward
 * 0.09 ms and the backward 0.29 ms against the in-tree kernels' 0.12 and
 * 0.32 ms at gpt2-124m's shape on the H200. */
#ifndef GPT_CUDA_ATTENTION_CUDNN_H
#define GPT_CUDA_ATTENTION_CUDNN_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gc_dnn gc_dnn_t;

/* The library's version line ("cuDNN 91900, cudnn-frontend 13200"). */
typedef const char *(*gc_dnn_version_fn)(void);
/* Build the forward and backward graphs of causal attention for B x T
 * tokens, NH heads of HD, fp16 (half != 0) or bf16, on the current device,
 * and allocate their workspace. 0, or -1 with a sentence in err. */
typedef int (*gc_dnn_open_fn)(int half, int B, int T, int NH, int HD, gc_dnn_t **out,
                              char *err, size_t errlen);
/* Device bytes the context holds (its workspace). */
typedef size_t (*gc_dnn_bytes_fn)(const gc_dnn_t *d);
typedef int (*gc_dnn_fwd_fn)(gc_dnn_t *d, void *out, float *lse, const void *qkv,
                             cudaStream_t s);
typedef int (*gc_dnn_bwd_fn)(gc_dnn_t *d, void *dqkv, const void *dout, const void *qkv,
                             const void *out, const float *lse, cudaStream_t s);
typedef void (*gc_dnn_close_fn)(gc_dnn_t *d);

#ifdef __cplusplus
}
#endif

#endif /* GPT_CUDA_ATTENTION_CUDNN_H */
