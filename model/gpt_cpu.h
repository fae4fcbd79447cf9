/* gpt_cpu.h - the CPU layer functions of the GPT-2 model (fp32), the
 * reference every GPU kernel is tested against, and their thread pool.
 *
 * Shapes follow llm.c: activations are row-major [B][T][C]; weight
 * matrices [OC][C] as nn.Linear; attention probabilities [B][NH][T][T];
 * qkv rows hold q, k, v one after the other ([B][T][3C]), head h using
 * channels h*hs .. (h+1)*hs-1 of each (hs = C / NH).
 *
 * Backward functions ADD their results into the gradient buffers (dinp,
 * dweight, dbias: +=), as llm.c's do: zero them first for a gradient from
 * zero. Any of a backward's outputs may be NULL when not wanted (matmul,
 * layernorm).
 *
 * Determinism: every output element is computed by one thread, in an order
 * fixed by the shapes alone (reductions run sequentially over their index;
 * the work is split between threads at boundaries that never change an
 * element's arithmetic). Results are therefore bitwise identical for any
 * number of threads on one machine. The matrix products pick their inner
 * loop by CPU features (AVX2+FMA or portable code), so two machines with
 * different instruction sets may differ in the last bits.
 *
 * Threads: a pool of N threads (the caller counts as one) is created once
 * and passed to every function; a function returns when all its work is
 * done. A pool is used by one calling thread at a time.
 */
#ifndef GPT_CPU_H
#define GPT_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpu_pool_s cpu_pool_t;

/* Threads a rank uses by default: OMP_NUM_THREADS when set to a positive
 * number, else the number of CPUs in this thread's affinity mask (the CPU
 * set launch bound the rank to). RET >= 1. */
int cpu_default_threads(void);

/* The most threads a pool takes. */
#define CPU_POOL_MAX_THREADS 4096

/* IN threads: 1 .. CPU_POOL_MAX_THREADS (0 = cpu_default_threads()).
 * OUT *out: free with cpu_pool_destroy(). RET 0, -ENOMEM, -EINVAL, or the
 * negated error of pthread_create. */
int cpu_pool_create(int threads, cpu_pool_t **out);
/* Stop and join the threads. NULL is a no-op. */
void cpu_pool_destroy(cpu_pool_t *p);
int cpu_pool_threads(const cpu_pool_t *p);

/* Run fn(ctx, lo, hi, tid) over [0, n) split into contiguous ranges whose
 * bounds are multiples of grain (except n); tid in [0, threads). Runs on
 * the calling thread alone when there is one range. */
typedef void (*cpu_task_fn)(void *ctx, size_t lo, size_t hi, int tid);
void cpu_parallel(cpu_pool_t *p, size_t n, size_t grain, cpu_task_fn fn,
                  void *ctx);

/* ---- matrix product ------------------------------------------------------
 * C[M][N] = C + A·B, with A(i,k) = a[i*a_rs + k*a_cs] and
 * B(k,j) = b[k*b_rs + j*b_cs] (any transpose through the strides), C
 * row-major with row stride ldc. Each C element is C + a0·b0 + a1·b1 + ...
 * accumulated in k order. */
void cpu_gemm(cpu_pool_t *p, int M, int N, int K, const float *a, size_t a_rs,
              size_t a_cs, const float *b, size_t b_rs, size_t b_cs, float *c,
              size_t ldc);

/* ---- layers (llm.c's signatures, pool first) ------------------------------ */

/* out[b][t] = wte[inp[b][t]] + wpe[t]. Token ids must be valid rows. */
void cpu_encoder_forward(cpu_pool_t *p, float *out, const int32_t *inp,
                         const float *wte, const float *wpe, int B, int T,
                         int C);
void cpu_encoder_backward(cpu_pool_t *p, float *dwte, float *dwpe,
                          const float *dout, const int32_t *inp, int B, int T,
                          int C);

/* LayerNorm over C with eps 1e-5; mean and rstd [B][T] are kept for
 * backward. */
void cpu_layernorm_forward(cpu_pool_t *p, float *out, float *mean, float *rstd,
                           const float *inp, const float *weight,
                           const float *bias, int B, int T, int C);
void cpu_layernorm_backward(cpu_pool_t *p, float *dinp, float *dweight,
                            float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean,
                            const float *rstd, int B, int T, int C);

/* out[B][T][OC] = inp[B][T][C] · weightᵀ + bias (bias may be NULL). */
void cpu_matmul_forward(cpu_pool_t *p, float *out, const float *inp,
                        const float *weight, const float *bias, int B, int T,
                        int C, int OC);
void cpu_matmul_backward(cpu_pool_t *p, float *dinp, float *dweight,
                         float *dbias, const float *dout, const float *inp,
                         const float *weight, int B, int T, int C, int OC);

/* Causal multi-head self-attention. inp: qkv [B][T][3C]; out [B][T][C];
 * att [B][NH][T][T]: the softmax probabilities (row t uses columns <= t,
 * the rest is set to 0). Scores are scaled by 1/sqrt(hs). Both grow the
 * pool's per-thread scratch to about 64·T floats (plus a packed block of
 * a matrix product) once: RET 0 or -ENOMEM (nothing computed). */
int cpu_attention_forward(cpu_pool_t *p, float *out, float *att,
                          const float *inp, int B, int T, int C, int NH);
/* dinp: [B][T][3C] (+=), from dout [B][T][C] and the forward's inp, att. */
int cpu_attention_backward(cpu_pool_t *p, float *dinp, const float *dout,
                           const float *inp, const float *att, int B, int T,
                           int C, int NH);

/* GELU, tanh approximation (GPT-2). */
void cpu_gelu_forward(cpu_pool_t *p, float *out, const float *inp, size_t N);
void cpu_gelu_backward(cpu_pool_t *p, float *dinp, const float *inp,
                       const float *dout, size_t N);

/* out = inp1 + inp2; backward adds dout to both. */
void cpu_residual_forward(cpu_pool_t *p, float *out, const float *inp1,
                          const float *inp2, size_t N);
void cpu_residual_backward(cpu_pool_t *p, float *dinp1, float *dinp2,
                           const float *dout, size_t N);

/* probs[B][T][Vp] = softmax of logits over the first V columns; columns
 * V .. Vp-1 (padding) get probability 0. */
void cpu_softmax_forward(cpu_pool_t *p, float *probs, const float *logits,
                         int B, int T, int V, int Vp);
/* losses[b][t] = -log(probs[b][t][targets[b][t]]). */
void cpu_crossentropy_forward(cpu_pool_t *p, float *losses, const float *probs,
                              const int32_t *targets, int B, int T, int Vp);
/* dlogits[b][t][v] += (probs - onehot(target)) * dlosses[b][t] for v < V
 * (the padding columns are left alone). */
void cpu_crossentropy_softmax_backward(cpu_pool_t *p, float *dlogits,
                                       const float *dlosses, const float *probs,
                                       const int32_t *targets, int B, int T,
                                       int V, int Vp);

/* AdamW over n parameters: g = grads * a->grad_scale, moments updated,
 * bias-corrected with step a->t, then
 * params -= lr * (m̂ / (sqrt(v̂) + eps) + weight_decay * params).
 * weight_decay is this tensor's (a->weight_decay or 0); a->weight_decay is
 * not read. */
void cpu_adamw(cpu_pool_t *p, float *params, const float *grads, float *m,
               float *v, size_t n, const gpt_adamw_t *a, float weight_decay);

/* Σ x[i]² in double, summed in blocks fixed by n alone (deterministic for
 * any thread count). */
double cpu_sumsq(cpu_pool_t *p, const float *x, size_t n);
/* cpu_sumsq's blocks: block b holds x[b·B .. min(n, (b+1)·B)), B =
 * cpu_sumsq_block(n) (at most 4096 blocks); cpu_sumsq adds their sums in
 * block order. cpu_sumsq_blocks writes the sums of blocks b0 .. b1-1 to
 * part[0 .. b1-b0), reading only those blocks of x (ZeRO-1's norm: each
 * rank sums the blocks of its shard). */
size_t cpu_sumsq_block(size_t n);
void cpu_sumsq_blocks(cpu_pool_t *p, const float *x, size_t n, size_t b0,
                      size_t b1, double *part);

/* y[i] += x[i] (the accumulation of gpt.h's "Accumulation order"). */
void cpu_add(cpu_pool_t *p, float *y, const float *x, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* GPT_CPU_H */
