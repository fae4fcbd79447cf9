/* gpt_cuda.h - what the CUDA backend offers beyond gpt.h: a per-kernel-class
 * profile (CUDA events around each class of kernels), the device memory it
 * holds, and which code paths it took. For bench/ and tests/gpu/; the
 * trainer needs only gpt.h. Every function takes a backend created by
 * gpt_cuda_ops.create. */
#ifndef GPT_CUDA_H
#define GPT_CUDA_H

#include <stddef.h>

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GPT_PROF_ENCODER,
  GPT_PROF_LN_FWD,
  GPT_PROF_LN_BWD,
  GPT_PROF_MM_FWD,  /* qkv, attention projection, fc (+GELU), fc projection */
  GPT_PROF_MM_BWD,  /* their input and weight gradients (+GELU', bias grads) */
  GPT_PROF_ATTN_FWD,
  GPT_PROF_ATTN_BWD,
  GPT_PROF_HEAD_MM, /* classifier: logits, dx and dwte products */
  GPT_PROF_CE,      /* fused softmax cross-entropy over the logits */
  GPT_PROF_ADAMW,
  GPT_PROF_NORM,
  GPT_PROF_OTHER,   /* copies, bias-gradient staging, zeroing */
  GPT_PROF_NCLASSES
};

/* Start (on != 0) or stop recording events around each kernel class. */
void gpt_cuda_profile_enable(gpt_backend_t *m, int on);
/* After sync(): milliseconds per class since the last read, added into
 * ms[GPT_PROF_NCLASSES]; counts[] (may be NULL) receives the regions
 * timed. Returns 0 or a negative code. */
int gpt_cuda_profile_read(gpt_backend_t *m, double *ms, long *counts);
const char *gpt_cuda_profile_name(int cls);
/* Bytes of device memory the backend allocated (parameters, optimizer
 * state, activations, scratch, cuBLASLt workspace). */
size_t gpt_cuda_memory(const gpt_backend_t *m);
/* CUDA graphs (gpt_cuda.cu, "CUDA graphs"): GPT_CUDA_GRAPH=1 in the
 * environment at create() turns them on; this call turns them on (on != 0)
 * or off and starts over: graphs dropped, the counts below zeroed. A kind
 * of work (forward with targets, backward without callback) is captured
 * after one eager run of it on this backend, replayed from then on. */
void gpt_cuda_graph_enable(gpt_backend_t *m, int on);
typedef struct gpt_cuda_graph_stats_s {
  long captures;        /* graphs captured (forward, backward per loss scale) */
  long launches;        /* graph launches, the capturing run included */
  long eager_forwards;  /* forwards and backwards that ran without a graph */
  long eager_backwards;
} gpt_cuda_graph_stats_t;
/* OUT *st. RET 1: graphs on; 0: off; -1: given up after a failed capture
 * (reported once through rt_report_error; the steps run eagerly). */
int gpt_cuda_graph_stats(const gpt_backend_t *m, gpt_cuda_graph_stats_t *st);
/* Tests: the next capture fails as one that meets a capture-unsafe call. */
void gpt_cuda_graph_fault(gpt_backend_t *m);
/* One line: device, dtype, attention kernel, epilogue fallbacks taken,
 * whether CUDA graphs are used. */
const char *gpt_cuda_describe(const gpt_backend_t *m, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* GPT_CUDA_H */
