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
/* One line: device, dtype, attention kernel, epilogue fallbacks taken. */
const char *gpt_cuda_describe(const gpt_backend_t *m, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* GPT_CUDA_H */
