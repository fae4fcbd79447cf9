/* gpt.h - the GPT-2 model behind one backend-neutral contract.
 *
 * The trainer (examples/train_gpt.c) drives a model through gpt_backend_ops_t;
 * two backends implement it: "cpu" (model/gpt_cpu.c, fp32, the reference)
 * and "cuda" (model/cuda/, bf16 or fp16 compute with fp32 master weights).
 * Both hold the same parameters in the same order, so a checkpoint written
 * by one loads into the other and every CUDA kernel is tested against the
 * CPU backend's layer functions.
 *
 * Parameter layout: one flat fp32 array of gpt_num_params() floats, tensors
 * in this order (weight matrices [out][in], row-major, as nn.Linear):
 *   wte [Vp][C]  wpe [maxT][C]
 *   for each layer l = 0 .. L-1 (one contiguous block per layer):
 *     ln1w [C] ln1b [C] qkvw [3C][C] qkvb [3C] attprojw [C][C] attprojb [C]
 *     ln2w [C] ln2b [C] fcw [4C][C] fcb [4C] fcprojw [C][4C] fcprojb [C]
 *   lnfw [C] lnfb [C]
 * The output head is tied to wte (logits = lnf(x) · wteᵀ, rows >= V of the
 * padded vocabulary are never targets and their logits are masked out of the
 * softmax). Weight decay applies to tensors of two dimensions (wte, wpe and
 * the matrices), never to biases or LayerNorm parameters.
 *
 * Gradient segments, in the order backward completes them: [lnfw..lnfb and
 * layer L-1], layer L-2, ..., layer 0, then [wte, wpe] (the tied wte gets its
 * last contribution from the embedding). The runtime all-reduces each
 * segment as soon as backward reports it (rt.h, overlap with backward).
 *
 * Accumulation order (what makes data parallelism exact, bitwise on CPU):
 * backward computes one micro-batch's gradient on its own, from zero, and
 * only then adds it to the accumulated gradient, acc = acc + g_micro, in
 * micro-step order. The runtime's CPU all-reduce sums ranks in rank order,
 * ((g0 + g1) + g2) + ..., so 1 rank × accumulation k equals k ranks × 1.
 *
 * Errors: every function returns 0 or a negative code (-errno, or RDZV_E*
 * codes from rdzv.h); a failed CUDA, cuBLAS or NCCL call is reported once,
 * through rt_report_error(), at the place it happened.
 */
#ifndef GPT_H
#define GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_config_s {
  int max_seq_len;  /* maxT: positions in wpe */
  int vocab_size;   /* V: token ids are < V */
  int padded_vocab; /* Vp >= V, a multiple of 128 (GPU-friendly rows) */
  int num_layers;   /* L */
  int num_heads;    /* NH, divides C */
  int channels;     /* C */
} gpt_config_t;

enum { GPT_FP32 = 0, GPT_BF16 = 1, GPT_FP16 = 2 };

/* The tensors of the layout above, by index. */
enum {
  GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW,
  GPT_ATTPROJB, GPT_LN2W, GPT_LN2B, GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB,
  GPT_LNFW, GPT_LNFB
};

/* Number of fp32 parameters of the layout. */
size_t gpt_num_params(const gpt_config_t *c);
/* Offset (in floats) and size of tensor `which` (GPT_*) of layer `layer`
 * (ignored for WTE, WPE, LNFW, LNFB). */
size_t gpt_tensor_offset(const gpt_config_t *c, int which, int layer,
                         size_t *count);
/* Number of gradient segments (L + 1) and segment i's range, i in backward
 * completion order as above. */
int gpt_num_segments(const gpt_config_t *c);
void gpt_segment(const gpt_config_t *c, int i, size_t *off, size_t *count);
/* GPT-2's initialisation (normal 0.02, residual projections scaled by
 * 1/sqrt(2L), biases 0, LayerNorm weights 1), reproducible from seed. */
void gpt_init_params(const gpt_config_t *c, uint64_t seed, float *params);
/* Training flops (forward + backward) per token as llm.c counts them:
 * 6·N + 6·L·C·T, N including the padded vocabulary. */
double gpt_flops_per_token(const gpt_config_t *c, int T);

typedef struct gpt_backend_s gpt_backend_t;

/* Called by backward when segment `seg` of this micro-batch's gradient is
 * final. On CUDA `stream_event` is a cudaEvent_t recorded on the compute
 * stream after the segment's last kernel (the all-reduce waits on it);
 * NULL on CPU. Returns 0 or a negative code (which aborts backward). */
typedef int (*gpt_segment_cb)(void *arg, int seg, void *stream_event);

typedef struct gpt_adamw_s {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale; /* gradients are multiplied by this first (averaging,
                       clipping, 1/loss_scale) */
  int t;            /* step number, from 1, for bias correction */
} gpt_adamw_t;

typedef struct gpt_backend_ops_s {
  const char *name; /* "cpu", "cuda" */
  /* B micro-batch rows of T tokens; dtype GPT_*; device = local GPU index
   * (ignored on CPU); threads (CPU only, 0 = OMP_NUM_THREADS or the CPU set). */
  int (*create)(const gpt_config_t *c, int B, int T, int dtype, int device,
                int threads, gpt_backend_t **out);
  void (*destroy)(gpt_backend_t *m);
  /* fp32 master parameters and AdamW moments, host memory, num_params each
   * (checkpoints and tests). Any of the three may be NULL: that one is
   * neither read nor written. */
  int (*set_state)(gpt_backend_t *m, const float *params, const float *adam_m,
                   const float *adam_v);
  int (*get_state)(gpt_backend_t *m, float *params, float *adam_m,
                   float *adam_v);
  /* tokens and targets: B*T host int32; targets may be NULL (no loss).
   * *loss: mean cross-entropy of this micro-batch (host float). */
  int (*forward)(gpt_backend_t *m, const int32_t *tokens,
                 const int32_t *targets, float *loss);
  /* Zero the accumulated gradient (start of a step). The CUDA backend
   * defers it to the next backward, which then writes instead of adding;
   * grad_norm, grad_sumsq, adamw and grad_buffer called before that
   * backward see zeros (grad_buffer clears the buffer first: a pointer
   * kept from an earlier call shows the old values until a backward). */
  int (*zero_grad)(gpt_backend_t *m);
  /* Backward of the last forward, seeded with loss_scale / (B*T) per token,
   * added to the accumulated gradient (see "Accumulation order"). cb may be
   * NULL; it is called only on the last micro-step of a step (last != 0). */
  int (*backward)(gpt_backend_t *m, float loss_scale, int last,
                  gpt_segment_cb cb, void *cb_arg);
  /* The accumulated gradient: device pointer on CUDA, host on CPU; element
   * type *dtype (GPT_FP32 on CPU). The runtime all-reduces it in place. */
  void *(*grad_buffer)(gpt_backend_t *m, int *dtype);
  /* L2 norm of the accumulated gradient (after the all-reduce), multiplied
   * by `scale`; inf or NaN when any element is. */
  int (*grad_norm)(gpt_backend_t *m, float scale, float *norm);
  /* One fused AdamW step over every parameter. */
  int (*adamw)(gpt_backend_t *m, const gpt_adamw_t *a);
  /* Wait for the device (timing, before reading results). */
  int (*sync)(gpt_backend_t *m);

  /* ---- ZeRO-1, sharded AdamW state (docs/runtime.md); NULL in a backend
   * without it (train_gpt --zero 1 then refuses it). */
  /* grad_norm's sum of squares is taken in blocks of norm_block() elements
   * (the last one shorter), their sums added in block order; a sharded
   * trainer cuts the shards at block edges, gathers the blocks' sums and
   * adds them in that order, so its norm is bitwise grad_norm's. */
  size_t (*norm_block)(gpt_backend_t *m);
  /* The sums of squares (double) of blocks b0 .. b1-1 of the accumulated
   * gradient into part[0 .. b1-b0), host memory; reads only those blocks. */
  int (*grad_sumsq)(gpt_backend_t *m, size_t b0, size_t b1, double *part);
  /* Keep the AdamW moments of parameters [lo, hi) only, free the rest
   * (once, before training). From then on set_state/get_state's adam_m and
   * adam_v hold hi - lo floats, those of [lo, hi), and adamw updates the
   * parameters [lo, hi) only, from the gradient's [lo, hi). */
  int (*shard)(gpt_backend_t *m, size_t lo, size_t hi);
  /* The fp32 master parameters where the collectives run (host memory on
   * the CPU): the trainer all-gathers the updated shards in it. */
  void *(*param_buffer)(gpt_backend_t *m);
} gpt_backend_ops_t;

extern const gpt_backend_ops_t gpt_cpu_ops;
/* Present when the build found CUDA (LAUNCH_HAVE_CUDA); at run time a
 * missing driver or GPU makes create() fail with a clear message. */
extern const gpt_backend_ops_t gpt_cuda_ops;

/* Implemented by the rank runtime (runtime/rt.c, declared in rt.h as well;
 * the CUDA backend has a fallback for builds without it): a failed call of a
 * GPU library,
 * reported once with the rank and host, e.g.
 * rt_report_error("cuBLAS", "cublasLtMatmul(qkv)", "CUBLAS_STATUS_...",
 * __FILE__, __LINE__). */
void rt_report_error(const char *lib, const char *call, const char *what,
                     const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif /* GPT_H */
