/* gpt_cuda.cu - gpt_cuda_ops: the GPT-2 model of gpt.h on one GPU.
 *
 * Precision: fp32 master weights, AdamW moments and accumulated gradients;
 * compute in bf16 (or fp16, or fp32) with a low-precision copy of the
 * weights that AdamW rewrites in the same pass. Gradients of the weight
 * matrices go straight into the fp32 gradient (cuBLASLt, bf16 operands,
 * fp32 output, beta = 1), so micro-steps accumulate without rounding to
 * bf16.
 *
 * Memory (gpt2-124m, B 16, T 1024, bf16): 18 bytes a parameter (2.2 GB),
 * 16 activations of B*T*C per layer (4.8 GB: LayerNorm outputs, qkv,
 * attention output, residuals, the MLP's pre- and post-GELU), and no full
 * logits: the classifier runs in chunks of rows, and its backward (dx and
 * the tied wte's gradient) runs in forward, while the chunk is at hand,
 * unscaled; backward() applies loss_scale / (B*T) to them.
 *
 * Matrix products: cuBLASLt with fused bias, bias + GELU (keeping the
 * pre-activation for backward), GELU' + bias gradient, and the residual add
 * (beta = 1 with C = the residual stream); each product's algorithm is
 * timed among the heuristic's candidates on first use (matmul.cu). Where
 * cuBLASLt has no algorithm for an epilogue, separate kernels do the same
 * (gpt_cuda_describe() counts these fallbacks). The projections' bias
 * gradients come from the LayerNorm backward that writes the residual
 * gradient they need (kernels.cu), qkv's from a column sum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_cuda.h"
#include "graph.cuh"
#include "kernels.cuh"
#include "linear.cuh"
#include "matmul.cuh"

/* ---- error reporting (common.cuh) -------------------------------------- */
int gc_failed = 0;

extern "C" __attribute__((weak)) void
rt_report_error(const char *lib, const char *call, const char *what, const char *file, int line) {
  /* Used only where the runtime (runtime/rt.c) is not linked: tests, bench. */
  fprintf(stderr, "%s: %s failed: %s (%s:%d)\n", lib, call, what, file, line);
}

int gc_quiet = 0;
char gc_quiet_what[256];

/* A failure while capturing: kept (the first), not reported. */
static void quiet_note(const char *lib, const char *call, const char *what) {
  if (!gc_quiet_what[0])
    snprintf(gc_quiet_what, sizeof(gc_quiet_what), "%s call %s failed: %s", lib, call, what);
}

int gc_cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
  if (gc_quiet)
    quiet_note("CUDA", call, cudaGetErrorString(e));
  else if (!gc_failed) {
    gc_failed = 1;
    rt_report_error("CUDA", call, cudaGetErrorString(e), file, line);
  }
  return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int gc_cublas_fail(int status, const char *call, const char *file, int line) {
  if (gc_quiet)
    quiet_note("cuBLAS", call, cublasLtGetStatusString((cublasStatus_t)status));
  else if (!gc_failed) {
    gc_failed = 1;
    rt_report_error("cuBLAS", call, cublasLtGetStatusString((cublasStatus_t)status), file, line);
  }
  return status == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

int gc_fail(int rc, const char *what, const char *detail, const char *file, int line) {
  if (gc_quiet)
    quiet_note("gpt_cuda", what, detail);
  else
    rt_report_error("gpt_cuda", what, detail, file, line);
  return rc;
}

/* ---- the backend ----------------------------------------------------------*/
#define PROF_POOL 4096

struct gpt_backend_s {
  gpt_config_t c;
  int B, T, N, dtype, device, cc, sm_count;
  size_t np;
  cudaStream_t st, st2; /* st2: weight gradients beside st (backward) */
  gc_mm_t *mm, *mm2;
  cudaEvent_t ev_fork[4], ev_join[4];
  unsigned char *arena; /* one allocation, carved below */
  size_t arena_size;
  float *master, *adam_m, *adam_v, *grad;
  void *plow; /* low-precision weights; == master for fp32 */
  void *acts; /* per layer: ln1 qkv atty res2 ln2 fch fchg res3 */
  void *x0, *lnf, *dres, *dbuf, *dbig, *logits;
  float *stats; /* per layer: mean1 rstd1 mean2 rstd2 (N each), lse */
  float *meanf, *rstdf, *losses, *dwte_tmp, *attn_scratch;
  /* per layer, C floats: the attention projection's bias gradient of the
   * backward under way, on its way to the value bias's (backward_enqueue);
   * zero between backwards */
  float *pbias;
  unsigned *vb_done; /* gc_vbias's counter */
  float *norm_partial, *d_norm;
  /* ZeRO-1 (shard()): AdamW updates the parameters [lo, hi) (0, np when
   * unsharded); adam_m and adam_v, allocated apart from the arena so that
   * shard() can shrink them, hold the moments of [moff, moff + mcap).
   * low_stale: the low-precision weights outside [lo, hi) are older than
   * the master (the trainer all-gathers it); forward() converts them. */
  size_t lo, hi, moff, mcap;
  int sharded, low_stale;
  /* the gradient norm's blocks (gpt.h norm_block): nblocks of nblock */
  size_t nblock, nblocks;
  double *d_sumsq, *h_sumsq;
  gc_chunk_t *chunks;
  int nchunks, chunk_rows;
  /* zero_grad is deferred: grads_fresh says the gradient counts as zero.
   * The next backward then writes the large tensors (the tied wte's and
   * each layer's four weight matrices: products with beta 0, the wte
   * gradient by a scaled copy) instead of adding to them, and first zeroes
   * the rest, the chunks zchunks (biases, LayerNorms, wpe: what kernels
   * add to with atomics). That saves clearing np floats and reading the
   * old weight gradients back. Anything else that reads the gradient while
   * it is fresh clears all of it first (clear_fresh). */
  int grads_fresh, nzchunks;
  gc_chunk_t *zchunks;
  int *d_tok, *d_tgt;
  int *h_tok, *h_tgt; /* pinned */
  float *h_losses, *h_norm;
  cudaEvent_t h2d_done;
  cudaEvent_t *seg_ev;
  int fwd_grad; /* the last forward had targets: backward may run */
  /* CUDA graphs (on unless GPT_CUDA_GRAPH=0): 1 on, 0 off, -1 given up after a
   * failed capture (reported once). A kind of work is captured only after
   * one eager run of it (warm_*), which did the first-use tuning. */
  int graph, graph_fault;
  long warm_fwd, warm_bwd, eager_fwd, eager_bwd;
  gc_graph_t g_fwd, g_bwd, g_bwd1; /* g_bwd1: a backward onto fresh gradients */
  /* The tied wte's classifier gradient straight into the gradient (see
   * forward_enqueue): g_fwd1 is the forward that does so, wte_alpha the
   * scale it used (0: into dwte_tmp instead, for backward to add), ls_last
   * the last backward's per-token scale (0 before the first), wte_direct
   * whether this is allowed (GPT_CUDA_WTE_DIRECT=0 turns it off). */
  gc_graph_t g_fwd1;
  float wte_alpha, ls_last;
  int wte_direct;
  /* profile */
  int prof_on, prof_n;
  int prof_cls[PROF_POOL];
  cudaEvent_t prof_ev[2 * PROF_POOL];
  int prof_cur;
};

static size_t align_up(size_t x) { return (x + 255) & ~(size_t)255; }

/* The backend's CUDA graphs (see "CUDA graphs" below), for what is done to
 * all of them: dropped, counted. */
#define ALL_GRAPHS(m) {&(m)->g_fwd, &(m)->g_fwd1, &(m)->g_bwd, &(m)->g_bwd1}
static void graphs_reset(gpt_backend_t *m) {
  gc_graph_t *g[] = ALL_GRAPHS(m);
  for (gc_graph_t *x : g)
    gc_graph_reset(x);
}
static void graphs_count(const gpt_backend_t *m, long *captures, long *launches) {
  const gc_graph_t *g[] = ALL_GRAPHS(m);
  *captures = *launches = 0;
  for (const gc_graph_t *x : g)
    *captures += x->captures, *launches += x->launches;
}

static size_t tsize(int dtype) { return dtype == GPT_FP32 ? 4 : 2; }

/* ---- profiling ------------------------------------------------------------*/
static const char *prof_names[GPT_PROF_NCLASSES] = {"encoder (fwd+bwd)",
                                                    "layernorm fwd",
                                                    "layernorm bwd + residual",
                                                    "matmul fwd (+bias/GELU/residual)",
                                                    "matmul bwd (+GELU'/bias grad)",
                                                    "attention fwd",
                                                    "attention bwd",
                                                    "classifier matmuls",
                                                    "cross-entropy (fused softmax)",
                                                    "adamw",
                                                    "grad norm",
                                                    "other"};

static void prof_begin(gpt_backend_t *m, int cls) {
  if (!m->prof_on || m->prof_n >= PROF_POOL)
    return;
  m->prof_cls[m->prof_n] = cls;
  cudaEventRecord(m->prof_ev[2 * m->prof_n], m->st);
  m->prof_cur = 1;
}
static void prof_end(gpt_backend_t *m) {
  if (!m->prof_on || !m->prof_cur)
    return;
  cudaEventRecord(m->prof_ev[2 * m->prof_n + 1], m->st);
  m->prof_n++;
  m->prof_cur = 0;
}
#define PROF(m, cls, ...)                                                         \
  do {                                                                            \
    prof_begin(m, cls);                                                           \
    int prc_ = (__VA_ARGS__);                                                     \
    prof_end(m);                                                                  \
    if (prc_ < 0)                                                                 \
      return prc_;                                                                \
  } while (0)

extern "C" void gpt_cuda_profile_enable(gpt_backend_t *m, int on) {
  /* Events are created on first use: most runs never profile. */
  for (int i = 0; on && i < 2 * PROF_POOL; i++)
    if (!m->prof_ev[i] && cudaEventCreate(&m->prof_ev[i]) != cudaSuccess) {
      (void)cudaGetLastError();
      on = 0;
    }
  m->prof_on = on;
  m->prof_n = 0;
}

extern "C" int gpt_cuda_profile_read(gpt_backend_t *m, double *ms, long *counts) {
  GC_CUDA(cudaStreamSynchronize(m->st));
  for (int i = 0; i < m->prof_n; i++) {
    float t = 0.f;
    GC_CUDA(cudaEventElapsedTime(&t, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
    ms[m->prof_cls[i]] += t;
    if (counts)
      counts[m->prof_cls[i]]++;
  }
  m->prof_n = 0;
  return 0;
}

extern "C" const char *gpt_cuda_profile_name(int cls) {
  return cls >= 0 && cls < GPT_PROF_NCLASSES ? prof_names[cls] : "?";
}

extern "C" size_t gpt_cuda_memory(const gpt_backend_t *m) {
  return m->arena_size + 2 * m->mcap * sizeof(float) + (32u << 20) + gc_attention_dnn_bytes();
}

/* A timed choice (matmul.cuh) for a person, with the first call's timings
 * (a call each): "in CUTLASS's epilogue (0.159 ms; epilogue 0.176; ...)". */
static void describe_choice(gc_mm_t *mm, int slot, char *buf, size_t n) {
  const int c = *gc_mm_choice(mm, slot);
  const float *t = gc_mm_choice_ms(mm, slot);
  size_t k = (size_t)snprintf(buf, n, "%s", c < 0 ? "not yet chosen" : gc_mm_way_name(slot, c, 0));
  if (c < 0 || t[c] <= 0.f || k >= n)
    return;
  k += snprintf(buf + k, n - k, " (%.3f ms", t[c]);
  for (int i = 0; i < GC_CHOICE_WAYS && k < n; i++)
    if (i != c && t[i] > 0.f)
      k += snprintf(buf + k, n - k, "; %s %.3f", gc_mm_way_name(slot, i, 1), t[i]);
  if (k < n)
    snprintf(buf + k, n - k, ")");
}

extern "C" const char *gpt_cuda_describe(const gpt_backend_t *m, char *buf, size_t n) {
  static const char *dn[] = {"fp32", "bf16", "fp16"};
  const gpt_config_t *c = &m->c;
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, m->device) != cudaSuccess)
    snprintf(p.name, sizeof(p.name), "?");
  char graphs[96], dnn[400] = "", dg[160], g[160];
  describe_choice(m->mm, GC_CHOICE_DGELU, dg, sizeof(dg));
  describe_choice(m->mm, GC_CHOICE_GELU, g, sizeof(g));
  if (m->cc == 90 && !gc_attention_dnn_bytes())
    snprintf(dnn, sizeof(dnn), " (cuDNN's: %s)", gc_attention_dnn_status());
  long gcap, glaunch;
  graphs_count(m, &gcap, &glaunch);
  if (m->graph == 0)
    snprintf(graphs, sizeof(graphs), "off");
  else
    snprintf(graphs, sizeof(graphs), "%s (%ld captures, %ld launches)",
             m->graph > 0 ? "on" : "given up", gcap, glaunch);
  snprintf(buf, n,
           "%s (sm_%d, %d SMs), %s, attention: %s%s%s, cuBLASLt: %d products tuned, %d "
           "from the tuning cache, %d epilogue fallbacks, GELU %s, GELU' %s, backward on %d "
           "stream(s), "
           "classifier chunk: %d rows, CUDA graphs: %s, device memory: %.2f GiB",
           p.name, m->cc, m->sm_count, dn[m->dtype],
           gc_attention_dnn_bytes() ? ""
           : gc_attention_fast(m->dtype, m->T, c->channels / c->num_heads)
               ? "tensor-core flash kernels "
               : "generic kernels",
           gc_attention_fast(m->dtype, m->T, c->channels / c->num_heads)
               ? gc_attention_describe()
               : "",
           dnn,
           gc_mm_tuned(m->mm), gc_mm_cache_hits(m->mm), gc_mm_fallbacks(m->mm),
           g, dg,
           m->st2 ? 2 : 1, m->chunk_rows, graphs,
           (double)gpt_cuda_memory(m) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

extern "C" void gpt_cuda_graph_enable(gpt_backend_t *m, int on) {
  graphs_reset(m);
  gc_graph_t *g[] = ALL_GRAPHS(m);
  for (gc_graph_t *x : g)
    memset(x, 0, sizeof(*x)); /* the counts too */
  m->eager_fwd = m->eager_bwd = 0;
  m->graph = on != 0;
  m->graph_fault = 0;
}

extern "C" int gpt_cuda_graph_stats(const gpt_backend_t *m, gpt_cuda_graph_stats_t *st) {
  graphs_count(m, &st->captures, &st->launches);
  st->eager_forwards = m->eager_fwd;
  st->eager_backwards = m->eager_bwd;
  return m->graph;
}

extern "C" void gpt_cuda_graph_fault(gpt_backend_t *m) { m->graph_fault = 1; }

/* ---- layout helpers -------------------------------------------------------*/
template <typename T> static T *W(gpt_backend_t *m, int which, int layer) {
  return (T *)m->plow + gpt_tensor_offset(&m->c, which, layer, NULL);
}
static float *G(gpt_backend_t *m, int which, int layer) {
  return m->grad + gpt_tensor_offset(&m->c, which, layer, NULL);
}
enum { A_LN1, A_QKV, A_ATTY, A_RES2, A_LN2, A_FCH, A_FCHG, A_RES3 };
static const int act_width[] = {1, 3, 1, 1, 1, 4, 4, 1}; /* in units of C */
template <typename T> static T *ACT(gpt_backend_t *m, int which, int layer) {
  size_t NC = (size_t)m->N * m->c.channels, off = (size_t)layer * 16 * NC;
  for (int i = 0; i < which; i++)
    off += act_width[i] * NC;
  return (T *)m->acts + off;
}
/* fp32 statistics of a layer: 0 mean1, 1 rstd1, 2 mean2, 3 rstd2, 4 lse. */
static float *STAT(gpt_backend_t *m, int which, int layer) {
  size_t lse = (size_t)m->B * m->c.num_heads * m->T;
  size_t per = align_up((4 * (size_t)m->N + lse) * 4) / 4;
  return m->stats + (size_t)layer * per + (size_t)which * m->N;
}

/* ---- CUDA graphs ----------------------------------------------------------
 * By default (GPT_CUDA_GRAPH=0 turns it off), a forward with targets and a backward without a
 * segment callback each replay a graph (graph.cuh) captured from their
 * device work: the inputs are the pinned token buffers copied in by the
 * graph, the losses are copied out to pinned memory and summed by the host
 * after the replay, and the one scalar argument, backward's loss scale, is
 * the backward graph's key (a new scale, as fp16's dynamic loss scaling
 * makes now and then, captures again). Every address is fixed at create().
 * zero_grad, grad_norm and adamw stay eager: three launches, and the host
 * reads the norm (clipping, fp16 overflow) between backward and AdamW.
 * Eager instead: profiling (events per kernel class), a forward without
 * targets, and backward with a callback: the data-parallel path, whose
 * callback starts each segment's NCCL all-reduce on the runtime's stream
 * during backward (not captured: NCCL inside graphs would need the
 * runtime's stream joined to the capture and its waits made graph-safe). */
static int graph_ready(const gpt_backend_t *m, long warm) {
  return m->graph == 1 && !m->prof_on && warm > 0;
}

/* fn's work through graph g. RET 1: it ran so; 0: the capture failed
 * (reported once, graphs off from then on), the caller runs the work
 * eagerly; or a negative code. */
static int graph_step(gpt_backend_t *m, gc_graph_t *g, uint64_t key, int (*fn)(void *),
                      void *arg) {
  char why[300], what[420];
  int rc = gc_graph_run(g, m->st, key, fn, arg, m->graph_fault, why, sizeof(why));
  if (rc != -EAGAIN)
    return rc < 0 ? rc : 1;
  m->graph = -1;
  m->graph_fault = 0;
  graphs_reset(m);
  snprintf(what, sizeof(what), "%s; training goes on without CUDA graphs (GPT_CUDA_GRAPH=0 "
           "avoids the attempt)", why);
  rt_report_error("gpt_cuda", "CUDA graph capture", what, __FILE__, __LINE__);
  return 0;
}

/* ---- forward ------------------------------------------------------------- */
/* The device work of a forward from the pinned token buffers: the copies
 * in, every kernel and, with targets, the per-token losses out to the
 * pinned h_losses. eager == 0: captured (no h2d_done record: the caller
 * records it after the graph). */
template <typename T> static int forward_enqueue(gpt_backend_t *m, int targets, int eager) {
  const gpt_config_t *c = &m->c;
  const int N = m->N, C = c->channels, L = c->num_layers, NH = c->num_heads;
  const int V = c->vocab_size, Vp = c->padded_vocab;
  cudaStream_t s = m->st;
  prof_begin(m, GPT_PROF_OTHER);
  GC_CUDA(cudaMemcpyAsync(m->d_tok, m->h_tok, (size_t)N * 4, cudaMemcpyHostToDevice, s));
  if (targets)
    GC_CUDA(cudaMemcpyAsync(m->d_tgt, m->h_tgt, (size_t)N * 4, cudaMemcpyHostToDevice, s));
  prof_end(m);
  if (eager)
    GC_CUDA(cudaEventRecord(m->h2d_done, s));

  PROF(m, GPT_PROF_ENCODER,
       gc_encoder_fwd<T>((T *)m->x0, m->d_tok, W<T>(m, GPT_WTE, 0), W<T>(m, GPT_WPE, 0), m->B, m->T,
                         C, s));
  for (int l = 0; l < L; l++) {
    const T *in = l == 0 ? (const T *)m->x0 : ACT<T>(m, A_RES3, l - 1);
    T *ln1 = ACT<T>(m, A_LN1, l), *qkv = ACT<T>(m, A_QKV, l), *atty = ACT<T>(m, A_ATTY, l);
    T *res2 = ACT<T>(m, A_RES2, l), *ln2 = ACT<T>(m, A_LN2, l), *fch = ACT<T>(m, A_FCH, l);
    T *fchg = ACT<T>(m, A_FCHG, l), *res3 = ACT<T>(m, A_RES3, l);
    PROF(m, GPT_PROF_LN_FWD,
         gc_layernorm_fwd<T>(ln1, STAT(m, 0, l), STAT(m, 1, l), in, W<T>(m, GPT_LN1W, l),
                             W<T>(m, GPT_LN1B, l), N, C, s));
    PROF(m, GPT_PROF_MM_FWD,
         linear_fwd<T>(m->mm, m->st, "qkv", qkv, ln1, W<T>(m, GPT_QKVW, l), W<T>(m, GPT_QKVB, l),
                       NULL, N, C, 3 * C));
    PROF(m, GPT_PROF_ATTN_FWD,
         gc_attention_fwd<T>(atty, STAT(m, 4, l), qkv, m->B, m->T, NH, C / NH, s));
    PROF(m, GPT_PROF_MM_FWD,
         linear_fwd<T>(m->mm, m->st, "attproj", res2, atty, W<T>(m, GPT_ATTPROJW, l),
                       W<T>(m, GPT_ATTPROJB, l), in, N, C, C));
    PROF(m, GPT_PROF_LN_FWD,
         gc_layernorm_fwd<T>(ln2, STAT(m, 2, l), STAT(m, 3, l), res2, W<T>(m, GPT_LN2W, l),
                             W<T>(m, GPT_LN2B, l), N, C, s));
    PROF(m, GPT_PROF_MM_FWD,
         linear_fwd_gelu<T>(m->mm, m->st, "fc", fchg, fch, ln2, W<T>(m, GPT_FCW, l),
                            W<T>(m, GPT_FCB, l), N, C, 4 * C, m->sm_count));
    PROF(m, GPT_PROF_MM_FWD,
         linear_fwd<T>(m->mm, m->st, "fcproj", res3, fchg, W<T>(m, GPT_FCPROJW, l),
                       W<T>(m, GPT_FCPROJB, l), res2, N, 4 * C, C));
  }
  PROF(m, GPT_PROF_LN_FWD,
       gc_layernorm_fwd<T>((T *)m->lnf, m->meanf, m->rstdf, ACT<T>(m, A_RES3, L - 1),
                           W<T>(m, GPT_LNFW, 0), W<T>(m, GPT_LNFB, 0), N, C, s));
  if (!targets)
    return 0;
  /* Classifier in chunks of rows: logits, loss and softmax - onehot in
   * place, then that gradient's two products while the chunk is at hand:
   * dlnf rows (into dbuf, unscaled: backward() scales it) and the tied
   * wte's gradient. The backward's per-token scale is not known yet: the
   * wte product goes into dwte_tmp, for backward to add scaled (a pass over
   * 2 x Vp x C floats, 0.3 GB at 124M); but onto a fresh gradient, the usual
   * first micro-step, it goes straight into the gradient scaled by the last
   * backward's scale (wte_alpha), which a trainer keeps from step to step,
   * and backward only rescales it when its scale differs. */
  const T *wte = W<T>(m, GPT_WTE, 0);
  const float wa = m->wte_alpha;
  float *dwte = wa != 0.f ? G(m, GPT_WTE, 0) : m->dwte_tmp;
  T *logits = (T *)m->logits;
  for (int r0 = 0; r0 < N; r0 += m->chunk_rows) {
    const int R = N - r0 < m->chunk_rows ? N - r0 : m->chunk_rows;
    const T *x = (const T *)m->lnf + (size_t)r0 * C;
    PROF(m, GPT_PROF_HEAD_MM,
         linear_fwd<T>(m->mm, m->st, "logits", logits, x, wte, NULL, NULL, R, C, Vp));
    PROF(m, GPT_PROF_CE, gc_crossentropy<T>(logits, m->losses + r0, m->d_tgt + r0, R, V, Vp, s));
    PROF(m, GPT_PROF_HEAD_MM,
         linear_bwd_in<T>(m->mm, m->st, "logits dx", (T *)m->dbuf + (size_t)r0 * C, logits, wte, R,
                          C, Vp));
    PROF(m, GPT_PROF_HEAD_MM,
         linear_bwd_w<T>(m->mm, m->st, "logits dwte", dwte, logits, x, R, C, Vp,
                         wa != 0.f ? wa : 1.f, r0 == 0 ? 0.f : 1.f));
  }
  GC_CUDA(cudaMemcpyAsync(m->h_losses, m->losses, (size_t)N * 4, cudaMemcpyDeviceToHost, s));
  return 0;
}

template <typename T> static int forward_capture(void *p) {
  return forward_enqueue<T>((gpt_backend_t *)p, 1, 0);
}

template <typename T>
static int forward_t(gpt_backend_t *m, const int32_t *tokens, const int32_t *targets, float *loss) {
  const int N = m->N, V = m->c.vocab_size;
  for (int i = 0; i < N; i++)
    if (tokens[i] < 0 || tokens[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
      return gc_fail(-EINVAL, "forward",
                     "a token id is outside the vocabulary (check --vocab against the data)",
                     __FILE__, __LINE__);
  /* The pinned buffers may still feed the previous copy. */
  GC_CUDA(cudaEventSynchronize(m->h2d_done));
  memcpy(m->h_tok, tokens, (size_t)N * 4);
  if (targets)
    memcpy(m->h_tgt, targets, (size_t)N * 4);
  m->fwd_grad = 0;
  m->wte_alpha = targets && m->wte_direct && m->grads_fresh ? m->ls_last : 0.f;
  int done = 0;
  if (targets && graph_ready(m, m->warm_fwd)) {
    /* the scale is part of the key of the forward that writes the gradient */
    uint32_t bits;
    memcpy(&bits, &m->wte_alpha, sizeof(bits));
    done = m->wte_alpha != 0.f
               ? graph_step(m, &m->g_fwd1, (uint64_t)bits | 1ull << 32, forward_capture<T>, m)
               : graph_step(m, &m->g_fwd, 1, forward_capture<T>, m);
    GC_TRY(done);
    if (done)
      GC_CUDA(cudaEventRecord(m->h2d_done, m->st));
  }
  if (!done) {
    GC_TRY(forward_enqueue<T>(m, targets != NULL, 1));
    m->eager_fwd++;
    if (targets && !m->prof_on)
      m->warm_fwd++;
  }
  if (!targets) {
    if (loss)
      *loss = 0.f;
    return 0;
  }
  GC_CUDA(cudaStreamSynchronize(m->st));
  double sum = 0.0;
  for (int i = 0; i < N; i++)
    sum += m->h_losses[i];
  if (loss)
    *loss = (float)(sum / N);
  m->fwd_grad = 1;
  return 0;
}

/* ---- backward ------------------------------------------------------------- */
/* The device work of backward, each token's gradient scaled by sc; cb (may
 * be NULL) is called per segment when last != 0. Captured with cb NULL.
 * first: the gradient is fresh (zero_grad): written, not added to. */
template <typename T>
static int backward_enqueue(gpt_backend_t *m, float sc, int last, gpt_segment_cb cb,
                            void *cb_arg, int first, int wte_done) {
  const gpt_config_t *c = &m->c;
  const int N = m->N, C = c->channels, L = c->num_layers, NH = c->num_heads;
  const int Vp = c->padded_vocab;
  cudaStream_t s = m->st;
  T *dres = (T *)m->dres, *dbuf = (T *)m->dbuf, *dbig = (T *)m->dbig;
  const float beta = first ? 0.f : 1.f; /* the weight-gradient products' */
  if (first)
    PROF(m, GPT_PROF_OTHER, gc_zero_chunks(m->grad, m->zchunks, m->nzchunks, s));
  if (!wte_done) /* the forward's classifier product went to dwte_tmp */
    PROF(m, GPT_PROF_OTHER,
         gc_axpy(G(m, GPT_WTE, 0), m->dwte_tmp, sc, (size_t)Vp * C, !first, s));
  /* Each LayerNorm backward also sums the residual gradient it writes over
   * tokens: the bias gradient of the projection that fed that residual
   * (fcproj of the layer below, attproj of the same layer). */
  PROF(m, GPT_PROF_LN_BWD,
       gc_layernorm_bwd<T>(dres, G(m, GPT_LNFW, 0), G(m, GPT_LNFB, 0),
                           G(m, GPT_FCPROJB, L - 1), dbuf, sc, ACT<T>(m, A_RES3, L - 1),
                           W<T>(m, GPT_LNFW, 0), m->meanf, m->rstdf, N, C, 0, m->sm_count, s));
  /* The weight-gradient products (few output tiles, long reductions over
   * tokens) run on a side stream, overlapping the chain of input gradients;
   * the events order each against the buffers the main stream rewrites.
   * Serial when profiling (per-class times). */
  const int two = m->st2 && !m->prof_on;
  cudaStream_t s2 = two ? m->st2 : s;
  gc_mm_t *mmw = two ? m->mm2 : m->mm;
  cudaEvent_t *ea = m->ev_fork, *eb = m->ev_join;
#define FORK(k)                                                                   \
  do {                                                                            \
    if (two) {                                                                    \
      GC_CUDA(cudaEventRecord(ea[k], s));                                         \
      GC_CUDA(cudaStreamWaitEvent(s2, ea[k], 0));                                 \
    }                                                                             \
  } while (0)
#define DONE(k)                                                                   \
  do {                                                                            \
    if (two)                                                                      \
      GC_CUDA(cudaEventRecord(eb[k], s2));                                        \
  } while (0)
#define JOIN(k)                                                                   \
  do {                                                                            \
    if (two)                                                                      \
      GC_CUDA(cudaStreamWaitEvent(s, eb[k], 0));                                  \
  } while (0)
  for (int l = L - 1; l >= 0; l--) {
    const T *in = l == 0 ? (const T *)m->x0 : ACT<T>(m, A_RES3, l - 1);
    T *ln1 = ACT<T>(m, A_LN1, l), *qkv = ACT<T>(m, A_QKV, l), *atty = ACT<T>(m, A_ATTY, l);
    T *res2 = ACT<T>(m, A_RES2, l), *ln2 = ACT<T>(m, A_LN2, l), *fch = ACT<T>(m, A_FCH, l);
    T *fchg = ACT<T>(m, A_FCHG, l);
    /* MLP: fcproj then fc (GELU' on fcproj's dX, fc's bias gradient by a
     * column sum of it). */
    FORK(0);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_w<T>(mmw, s2, "fcproj dW", G(m, GPT_FCPROJW, l), dres, fchg, N, 4 * C, C,
                         1.f, beta));
    DONE(0);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_in_dgelu<T>(m->mm, s, "fcproj dX", dbig, dres, W<T>(m, GPT_FCPROJW, l), fch,
                                G(m, GPT_FCB, l), N, 4 * C, C, m->sm_count));
    FORK(1);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_w<T>(mmw, s2, "fc dW", G(m, GPT_FCW, l), dbig, ln2, N, C, 4 * C, 1.f, beta));
    DONE(1);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_in<T>(m->mm, s, "fc dX", dbuf, dbig, W<T>(m, GPT_FCW, l), N, C, 4 * C));
    JOIN(0); /* fcproj dW has read dres */
    /* attproj's bias gradient g (the column sums of dres) into pbias first:
     * see the value bias below */
    float *pb = m->pbias + (size_t)l * C;
    PROF(m, GPT_PROF_LN_BWD,
         gc_layernorm_bwd<T>(dres, G(m, GPT_LN2W, l), G(m, GPT_LN2B, l), pb, dbuf, 1.f, res2,
                             W<T>(m, GPT_LN2W, l), STAT(m, 2, l), STAT(m, 3, l), N, C, 1,
                             m->sm_count, s));
    /* Attention block. The qkv bias's gradient without reading the 3C-wide
     * dqkv: the key bias's is zero (it adds q.b to every score of a query's
     * row, which the softmax ignores); the value bias's is the column sum of
     * the attention output's gradient (each query's probabilities sum to 1),
     * and that gradient is dres W (attproj dX below), so its column sums are
     * g W: a C x C vector product (gc_vbias, which also adds g into attproj's
     * bias gradient and clears pbias); only the query's C columns are summed
     * (colsum on the side stream, after the attention). */
    FORK(2);
    PROF(m, GPT_PROF_MM_BWD,
         gc_vbias<T>(G(m, GPT_QKVB, l) + 2 * C, G(m, GPT_ATTPROJB, l), pb,
                     W<T>(m, GPT_ATTPROJW, l), C, m->vb_done, s2));
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_w<T>(mmw, s2, "attproj dW", G(m, GPT_ATTPROJW, l), dres, atty, N, C, C, 1.f,
                         beta));
    DONE(2);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_in<T>(m->mm, s, "attproj dX", dbuf, dres, W<T>(m, GPT_ATTPROJW, l), N, C, C));
    JOIN(1); /* fc dW has read dbig */
    PROF(m, GPT_PROF_ATTN_BWD,
         gc_attention_bwd<T>(dbig, m->attn_scratch, dbuf, qkv, atty, STAT(m, 4, l), m->B, m->T,
                             NH, C / NH, s));
    FORK(3);
    PROF(m, GPT_PROF_MM_BWD,
         gc_colsum_ld<T>(G(m, GPT_QKVB, l), dbig, N, C, 3 * C, m->sm_count, s2));
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_w<T>(mmw, s2, "qkv dW", G(m, GPT_QKVW, l), dbig, ln1, N, C, 3 * C, 1.f, beta));
    DONE(3);
    PROF(m, GPT_PROF_MM_BWD,
         linear_bwd_in<T>(m->mm, s, "qkv dX", dbuf, dbig, W<T>(m, GPT_QKVW, l), N, C, 3 * C));
    JOIN(2); /* attproj dW has read dres */
    PROF(m, GPT_PROF_LN_BWD,
         gc_layernorm_bwd<T>(dres, G(m, GPT_LN1W, l), G(m, GPT_LN1B, l),
                             l > 0 ? G(m, GPT_FCPROJB, l - 1) : NULL, dbuf, 1.f, in,
                             W<T>(m, GPT_LN1W, l), STAT(m, 0, l), STAT(m, 1, l), N, C, 1,
                             m->sm_count, s));
    JOIN(3); /* qkv dW done: the layer's gradient is complete, dbig free */
    if (last && cb) {
      const int seg = L - 1 - l;
      GC_CUDA(cudaEventRecord(m->seg_ev[seg], s));
      GC_TRY(cb(cb_arg, seg, (void *)m->seg_ev[seg]));
    }
  }
#undef FORK
#undef DONE
#undef JOIN
  PROF(m, GPT_PROF_ENCODER,
       gc_encoder_bwd<T>(G(m, GPT_WTE, 0), G(m, GPT_WPE, 0), dres, m->d_tok, m->B, m->T, C, s));
  if (last && cb) {
    GC_CUDA(cudaEventRecord(m->seg_ev[L], s));
    GC_TRY(cb(cb_arg, L, (void *)m->seg_ev[L]));
  }
  return 0;
}

struct bwd_work {
  gpt_backend_t *m;
  float sc;
  int first, wte_done;
};
template <typename T> static int backward_capture(void *p) {
  const bwd_work *w = (const bwd_work *)p;
  return backward_enqueue<T>(w->m, w->sc, 0, NULL, NULL, w->first, w->wte_done);
}

template <typename T>
static int backward_t(gpt_backend_t *m, float loss_scale, int last, gpt_segment_cb cb,
                      void *cb_arg) {
  if (!m->fwd_grad)
    return gc_fail(-EINVAL, "backward", "no forward with targets before it", __FILE__, __LINE__);
  m->fwd_grad = 0;
  const float sc = loss_scale / (float)m->N;
  const int first = m->grads_fresh;
  /* The forward wrote the wte product into the fresh gradient scaled by
   * wa (forward_enqueue): rescaled here in the rare case that this scale
   * differs (fp16's loss scaling after an overflow, a trainer's change). */
  const float wa = m->wte_alpha;
  const int wte_done = wa != 0.f;
  m->wte_alpha = 0.f;
  m->ls_last = sc;
  if (wte_done && !first)
    return gc_fail(-EINVAL, "backward", "the wte gradient was written onto a gradient no longer "
                   "fresh (internal)", __FILE__, __LINE__);
  if (wte_done && wa != sc)
    GC_TRY(gc_axpy(G(m, GPT_WTE, 0), G(m, GPT_WTE, 0), sc / wa,
                   (size_t)m->c.padded_vocab * m->c.channels, 0, m->st));
  if (!(last && cb) && graph_ready(m, m->warm_bwd)) {
    /* the scale is a kernel argument: part of the key, as are the side
     * stream and whether the forward did the wte gradient; a backward onto
     * fresh gradients has a graph of its own */
    uint32_t bits;
    memcpy(&bits, &sc, sizeof(bits));
    bwd_work w = {m, sc, first, wte_done};
    const int done =
        graph_step(m, first ? &m->g_bwd1 : &m->g_bwd,
                   (uint64_t)bits | (uint64_t)(m->st2 != NULL) << 32 | (uint64_t)wte_done << 33,
                   backward_capture<T>, &w);
    GC_TRY(done);
    if (done) {
      m->grads_fresh = 0;
      return 0;
    }
  }
  GC_TRY(backward_enqueue<T>(m, sc, last, cb, cb_arg, first, wte_done));
  m->grads_fresh = 0;
  m->eager_bwd++;
  if (!m->prof_on)
    m->warm_bwd++;
  return 0;
}

/* ---- ops -------------------------------------------------------------------*/
static int check_config(const gpt_config_t *c, int B, int T, int dtype) {
  const char *bad = NULL;
  if (c->num_layers < 1 || c->num_heads < 1 || c->channels < 8 || c->vocab_size < 1 ||
      c->max_seq_len < 1 || B < 1 || T < 1)
    bad = "sizes must be positive";
  else if (c->channels % c->num_heads != 0)
    bad = "heads must divide channels";
  else if (c->channels % 8 != 0 || c->channels > 2048)
    bad = "the CUDA backend needs channels a multiple of 8, at most 2048";
  else if (c->channels / c->num_heads > 256)
    bad = "the CUDA backend supports head sizes up to 256";
  else if (c->padded_vocab < c->vocab_size || c->padded_vocab % 8 != 0)
    bad = "padded vocabulary must be >= vocabulary and a multiple of 8";
  else if (T > c->max_seq_len)
    bad = "sequence length exceeds the model's maximum";
  else if (dtype != GPT_FP32 && dtype != GPT_BF16 && dtype != GPT_FP16)
    bad = "dtype must be fp32, bf16 or fp16";
  if (bad)
    return gc_fail(-EINVAL, "create", bad, __FILE__, __LINE__);
  return 0;
}

static void destroy(gpt_backend_t *m);

/* The chunks (pieces of 64 Ki floats) of the tensors that hold parameters
 * of [lo, hi), uploaded to *out (NULL when there are none), *n of them.
 * small_only: every tensor but wte and each layer's four weight matrices. */
static int make_chunks(const gpt_config_t *c, size_t lo, size_t hi, int small_only,
                       gc_chunk_t **out, int *nout) {
  const size_t piece = 65536;
  int n = 0;
  gc_chunk_t *h = NULL, *d = NULL;
  for (int pass = 0; pass < 2; pass++) {
    n = 0;
    for (int which = GPT_WTE; which <= GPT_LNFB; which++) {
      const int per_layer = which >= GPT_LN1W && which <= GPT_FCPROJB;
      const int nl = per_layer ? c->num_layers : 1;
      const int matrix = which == GPT_WTE || which == GPT_QKVW || which == GPT_ATTPROJW ||
                         which == GPT_FCW || which == GPT_FCPROJW;
      const int decay = matrix || which == GPT_WPE;
      for (int l = 0; l < nl && !(small_only && matrix); l++) {
        size_t cnt, o = gpt_tensor_offset(c, which, l, &cnt);
        for (size_t s0 = 0; s0 < cnt; s0 += piece) {
          const size_t len = cnt - s0 < piece ? cnt - s0 : piece;
          if (o + s0 >= hi || o + s0 + len <= lo)
            continue;
          if (pass == 1) {
            h[n].start = o + s0;
            h[n].len = (unsigned)len;
            h[n].wd = decay ? 1.f : 0.f;
          }
          n++;
        }
      }
    }
    if (pass == 0 && (h = (gc_chunk_t *)malloc(((size_t)n + 1) * sizeof(*h))) == NULL)
      return -ENOMEM;
  }
  cudaError_t e = cudaSuccess;
  if (n > 0) {
    e = cudaMalloc((void **)&d, (size_t)n * sizeof(*h));
    if (e == cudaSuccess)
      e = cudaMemcpy(d, h, (size_t)n * sizeof(*h), cudaMemcpyHostToDevice);
  }
  free(h);
  if (e != cudaSuccess) {
    cudaFree(d);
    return gc_cuda_fail(e, "cudaMalloc/cudaMemcpy(chunks)", __FILE__, __LINE__);
  }
  *out = d;
  *nout = n;
  return 0;
}

/* AdamW's: those of [lo, hi) (all: 0, np); weight decay on the 2-D
 * tensors (gpt.h) is applied with the factor set per step, so a chunk
 * records only the 0/1 flag in wd. Replaces m->chunks. */
static int build_chunks(gpt_backend_t *m, size_t lo, size_t hi) {
  gc_chunk_t *d = NULL;
  int n = 0;
  GC_TRY(make_chunks(&m->c, lo, hi, 0, &d, &n));
  cudaFree(m->chunks);
  m->chunks = d;
  m->nchunks = n;
  return 0;
}

/* The ones a backward onto fresh gradients zeroes first: what it does not
 * write whole (biases, LayerNorms, wpe). */
static int build_zchunks(gpt_backend_t *m) {
  return make_chunks(&m->c, 0, m->np, 1, &m->zchunks, &m->nzchunks);
}

static int create(const gpt_config_t *c, int B, int T, int dtype, int device, int threads,
                  gpt_backend_t **out) {
  (void)threads;
  *out = NULL;
  GC_TRY(check_config(c, B, T, dtype));
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess)
    return gc_cuda_fail(e, "cudaGetDeviceCount (no usable GPU or driver?)", __FILE__, __LINE__);
  if (device < 0 || device >= ndev) {
    char what[120];
    snprintf(what, sizeof(what), "GPU %d requested, %d visible", device, ndev);
    return gc_fail(-ENODEV, "create", what, __FILE__, __LINE__);
  }
  GC_CUDA(cudaSetDevice(device));
  cudaDeviceProp p;
  GC_CUDA(cudaGetDeviceProperties(&p, device));
  const int cc = p.major * 10 + p.minor;
  if (dtype == GPT_BF16 && cc < 80)
    return gc_fail(-ENOTSUP, "create",
                   "bf16 needs an SM80 or newer GPU; use --dtype fp16 (docs/cuda.md)", __FILE__,
                   __LINE__);
  GC_TRY(gc_check_image(cc));
  gc_attention_init(cc);

  gpt_backend_t *m = (gpt_backend_t *)calloc(1, sizeof(*m));
  if (!m)
    return -ENOMEM;
  m->c = *c;
  m->B = B, m->T = T, m->N = B * T, m->dtype = dtype, m->device = device;
  m->cc = cc, m->sm_count = p.multiProcessorCount;
  m->np = gpt_num_params(c);
  m->hi = m->mcap = m->np;
  /* norm blocks of 64 Ki floats, larger where that would make more than
   * 16 Ki of them; a multiple of 4 (float4 shards) */
  for (m->nblock = 65536; m->np / m->nblock > 16384;)
    m->nblock *= 2;
  m->nblocks = (m->np + m->nblock - 1) / m->nblock;
  {
    const char *g = getenv("GPT_CUDA_GRAPH");
    m->graph = !(g && !strcmp(g, "0")); /* on unless GPT_CUDA_GRAPH=0 */
  }
  int rc = 0;
#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = gc_cuda_fail(e_, #call, __FILE__, __LINE__);                                            \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
  {
    CK(cudaStreamCreateWithFlags(&m->st, cudaStreamNonBlocking));
    rc = gc_mm_create(&m->mm, 32u << 20, 1);
    if (rc < 0)
      goto fail;
    CK(cudaStreamCreateWithFlags(&m->st2, cudaStreamNonBlocking));
    /* its own cuBLASLt workspace: the two streams' products overlap */
    rc = gc_mm_create(&m->mm2, 32u << 20, 1);
    if (rc < 0)
      goto fail;
    for (int i = 0; i < 4; i++) {
      CK(cudaEventCreateWithFlags(&m->ev_fork[i], cudaEventDisableTiming));
      CK(cudaEventCreateWithFlags(&m->ev_join[i], cudaEventDisableTiming));
    }
    const size_t ts = tsize(dtype), N = m->N, C = c->channels, L = c->num_layers;
    const size_t Vp = c->padded_vocab, NC = N * C;
    /* Classifier chunks: as few as fit in GPT_CUDA_LOGITS_MIB (800) MiB of
     * logits, of equal whole rows of 64. Each chunk's wte gradient passes
     * over the fp32 scratch (Vp x C) once: 4 chunks instead of 7 (256 MiB)
     * save ~1 GB of traffic a step at gpt2-124m, B 16; 2 instead of 4 (448
     * MiB) +0.3 to +0.4 % tokens/s at 124M and 350M for 0.38 GiB, still
     * below torch.compile's memory at 124M (docs/benchmarks/
     * 2026-12-03-fc-forward.md). */
    const char *wd = getenv("GPT_CUDA_WTE_DIRECT");
    m->wte_direct = !(wd && strcmp(wd, "0") == 0); /* forward_enqueue */
    const char *lm = getenv("GPT_CUDA_LOGITS_MIB");
    const size_t mib = lm && atoi(lm) >= 16 ? (size_t)atoi(lm) : 800;
    size_t rows = (mib << 20) / (Vp * ts);
    rows = rows < 64 ? 64 : rows;
    const size_t nch = (N + rows - 1) / rows;
    rows = ((N + nch - 1) / nch + 63) / 64 * 64;
    m->chunk_rows = (int)(rows < N ? rows : N);
    const size_t lse = (size_t)B * c->num_heads * T;
    const size_t stat_per = align_up((4 * N + lse) * 4);
    const int hd = (int)(C / c->num_heads);
    struct {
      void **p;
      size_t bytes;
    } plan[] = {
        {(void **)&m->master, m->np * 4},
        {(void **)&m->grad, m->np * 4},
        {(void **)&m->plow, dtype == GPT_FP32 ? 0 : m->np * ts},
        {(void **)&m->acts, L * 16 * NC * ts},
        {(void **)&m->x0, NC * ts},
        {(void **)&m->lnf, NC * ts},
        {(void **)&m->dres, NC * ts},
        {(void **)&m->dbuf, NC * ts},
        {(void **)&m->dbig, 4 * NC * ts},
        {(void **)&m->logits, (size_t)m->chunk_rows * Vp * ts},
        {(void **)&m->stats, L * stat_per},
        {(void **)&m->meanf, N * 4},
        {(void **)&m->rstdf, N * 4},
        {(void **)&m->losses, N * 4},
        {(void **)&m->dwte_tmp, Vp * C * 4},
        {(void **)&m->attn_scratch, gc_attention_scratch(dtype, B, T, c->num_heads, hd) * 4},
        {(void **)&m->pbias, L * C * 4},
        {(void **)&m->vb_done, 4},
        {(void **)&m->norm_partial, 2 * (size_t)m->sm_count * 4},
        {(void **)&m->d_norm, 4},
        {(void **)&m->d_sumsq, m->nblocks * sizeof(double)},
        {(void **)&m->d_tok, N * 4},
        {(void **)&m->d_tgt, N * 4},
    };
    const int nplan = (int)(sizeof(plan) / sizeof(plan[0]));
    size_t total = 0;
    for (int i = 0; i < nplan; i++)
      total += align_up(plan[i].bytes);
    m->arena_size = total;
    CK(cudaMalloc((void **)&m->arena, total));
    size_t off = 0;
    for (int i = 0; i < nplan; i++) {
      *plan[i].p = plan[i].bytes ? m->arena + off : NULL;
      off += align_up(plan[i].bytes);
    }
    if (dtype == GPT_FP32)
      m->plow = m->master;
    CK(cudaMemsetAsync(m->arena, 0, total, m->st));
    CK(cudaMallocHost((void **)&m->h_tok, N * 4));
    CK(cudaMallocHost((void **)&m->h_tgt, N * 4));
    CK(cudaMallocHost((void **)&m->h_losses, N * 4));
    CK(cudaMallocHost((void **)&m->h_norm, 4));
    CK(cudaMallocHost((void **)&m->h_sumsq, m->nblocks * sizeof(double)));
    CK(cudaMalloc((void **)&m->adam_m, m->np * 4));
    CK(cudaMalloc((void **)&m->adam_v, m->np * 4));
    CK(cudaMemsetAsync(m->adam_m, 0, m->np * 4, m->st));
    CK(cudaMemsetAsync(m->adam_v, 0, m->np * 4, m->st));
    CK(cudaEventCreateWithFlags(&m->h2d_done, cudaEventDisableTiming));
    m->seg_ev = (cudaEvent_t *)calloc(L + 1, sizeof(cudaEvent_t));
    if (!m->seg_ev) {
      rc = -ENOMEM;
      goto fail;
    }
    for (size_t i = 0; i <= L; i++)
      CK(cudaEventCreateWithFlags(&m->seg_ev[i], cudaEventDisableTiming));
    /* cuDNN's fused attention where it loads (attention_cudnn.h): its
     * graphs built now, outside any capture; its workspace counted */
    (void)gc_attention_prepare(dtype, B, T, (int)c->num_heads, hd);
    rc = build_chunks(m, 0, m->np);
    if (rc == 0)
      rc = build_zchunks(m);
    if (rc < 0)
      goto fail;
    CK(cudaStreamSynchronize(m->st));
  }
#undef CK
  *out = m;
  return 0;
fail:
  destroy(m);
  return rc;
}

static void destroy(gpt_backend_t *m) {
  if (!m)
    return;
  if (m->st)
    cudaStreamSynchronize(m->st);
  if (m->st2)
    cudaStreamSynchronize(m->st2);
  graphs_reset(m);
  for (int i = 0; i < 2 * PROF_POOL; i++)
    if (m->prof_ev[i])
      cudaEventDestroy(m->prof_ev[i]);
  if (m->seg_ev) {
    for (int i = 0; i <= m->c.num_layers; i++)
      if (m->seg_ev[i])
        cudaEventDestroy(m->seg_ev[i]);
    free(m->seg_ev);
  }
  if (m->h2d_done)
    cudaEventDestroy(m->h2d_done);
  cudaFreeHost(m->h_tok);
  cudaFreeHost(m->h_tgt);
  cudaFreeHost(m->h_losses);
  cudaFreeHost(m->h_norm);
  cudaFreeHost(m->h_sumsq);
  cudaFree(m->adam_m);
  cudaFree(m->adam_v);
  cudaFree(m->chunks);
  cudaFree(m->zchunks);
  cudaFree(m->arena);
  for (int i = 0; i < 4; i++) {
    if (m->ev_fork[i])
      cudaEventDestroy(m->ev_fork[i]);
    if (m->ev_join[i])
      cudaEventDestroy(m->ev_join[i]);
  }
  gc_mm_destroy(m->mm);
  gc_mm_destroy(m->mm2);
  gc_attention_release();
  if (m->st2) {
    cudaStreamSynchronize(m->st2);
    cudaStreamDestroy(m->st2);
  }
  if (m->st)
    cudaStreamDestroy(m->st);
  free(m);
}

/* The moments: those of [lo, hi), hi - lo floats, in and out (gpt.h). */
static float *moments(gpt_backend_t *m, float *base) { return base + (m->lo - m->moff); }

static int set_state(gpt_backend_t *m, const float *params, const float *am, const float *av) {
  const size_t bytes = (m->hi - m->lo) * 4, all = m->mcap * 4;
  if (params)
    GC_CUDA(cudaMemcpyAsync(m->master, params, m->np * 4, cudaMemcpyHostToDevice, m->st));
  if (am)
    GC_CUDA(cudaMemcpyAsync(moments(m, m->adam_m), am, bytes, cudaMemcpyHostToDevice, m->st));
  else
    GC_CUDA(cudaMemsetAsync(m->adam_m, 0, all, m->st));
  if (av)
    GC_CUDA(cudaMemcpyAsync(moments(m, m->adam_v), av, bytes, cudaMemcpyHostToDevice, m->st));
  else
    GC_CUDA(cudaMemsetAsync(m->adam_v, 0, all, m->st));
  if (params && m->dtype == GPT_BF16)
    GC_TRY(gc_convert<bf16>((bf16 *)m->plow, m->master, m->np, m->st));
  else if (params && m->dtype == GPT_FP16)
    GC_TRY(gc_convert<f16>((f16 *)m->plow, m->master, m->np, m->st));
  if (params)
    m->low_stale = 0;
  GC_CUDA(cudaStreamSynchronize(m->st));
  return 0;
}

static int get_state(gpt_backend_t *m, float *params, float *am, float *av) {
  const size_t bytes = (m->hi - m->lo) * 4;
  if (params)
    GC_CUDA(cudaMemcpyAsync(params, m->master, m->np * 4, cudaMemcpyDeviceToHost, m->st));
  if (am)
    GC_CUDA(cudaMemcpyAsync(am, moments(m, m->adam_m), bytes, cudaMemcpyDeviceToHost, m->st));
  if (av)
    GC_CUDA(cudaMemcpyAsync(av, moments(m, m->adam_v), bytes, cudaMemcpyDeviceToHost, m->st));
  GC_CUDA(cudaStreamSynchronize(m->st));
  return 0;
}

/* ZeRO-1: the low-precision weights outside this rank's shard from the
 * master, all-gathered by the trainer since the last update. */
template <typename T> static int refresh_low(gpt_backend_t *m) {
  if (m->lo > 0)
    GC_TRY(gc_convert<T>((T *)m->plow, m->master, m->lo, m->st));
  if (m->hi < m->np)
    GC_TRY(gc_convert<T>((T *)m->plow + m->hi, m->master + m->hi, m->np - m->hi, m->st));
  m->low_stale = 0;
  return 0;
}

static int forward(gpt_backend_t *m, const int32_t *tokens, const int32_t *targets, float *loss) {
  if (gc_failed)
    return -EIO;
  if (m->low_stale)
    PROF(m, GPT_PROF_OTHER,
         m->dtype == GPT_BF16 ? refresh_low<bf16>(m) : refresh_low<f16>(m));
  switch (m->dtype) {
  case GPT_BF16:
    return forward_t<bf16>(m, tokens, targets, loss);
  case GPT_FP16:
    return forward_t<f16>(m, tokens, targets, loss);
  default:
    return forward_t<float>(m, tokens, targets, loss);
  }
}

/* Deferred to the next backward (grads_fresh). */
static int zero_grad(gpt_backend_t *m) {
  m->grads_fresh = 1;
  return 0;
}

/* A fresh gradient read before a backward wrote it: zeroes, as promised. */
static int clear_fresh(gpt_backend_t *m) {
  if (!m->grads_fresh)
    return 0;
  /* A forward wrote the wte product into the gradient for the backward to
   * come: back to dwte_tmp, unscaled, where that backward then finds it. */
  if (m->wte_alpha != 0.f && m->fwd_grad)
    GC_TRY(gc_axpy(m->dwte_tmp, G(m, GPT_WTE, 0), 1.f / m->wte_alpha,
                   (size_t)m->c.padded_vocab * m->c.channels, 0, m->st));
  m->wte_alpha = 0.f;
  PROF(m, GPT_PROF_OTHER, [&]() -> int {
    GC_CUDA(cudaMemsetAsync(m->grad, 0, m->np * 4, m->st));
    return 0;
  }());
  m->grads_fresh = 0;
  return 0;
}

static int backward(gpt_backend_t *m, float loss_scale, int last, gpt_segment_cb cb, void *cb_arg) {
  if (gc_failed)
    return -EIO;
  switch (m->dtype) {
  case GPT_BF16:
    return backward_t<bf16>(m, loss_scale, last, cb, cb_arg);
  case GPT_FP16:
    return backward_t<f16>(m, loss_scale, last, cb, cb_arg);
  default:
    return backward_t<float>(m, loss_scale, last, cb, cb_arg);
  }
}

static void *grad_buffer(gpt_backend_t *m, int *dtype) {
  if (dtype)
    *dtype = GPT_FP32;
  if (clear_fresh(m) < 0)
    return NULL;
  return m->grad;
}

/* The sums of squares of blocks [b0, b1) into the pinned h_sumsq. */
static int sumsq(gpt_backend_t *m, size_t b0, size_t b1) {
  GC_TRY(clear_fresh(m));
  PROF(m, GPT_PROF_NORM,
       gc_sumsq_blocks(m->d_sumsq, m->grad, m->np, m->nblock, b0, b1 - b0, m->st));
  if (b1 > b0)
    GC_CUDA(cudaMemcpyAsync(m->h_sumsq, m->d_sumsq, (b1 - b0) * sizeof(double),
                            cudaMemcpyDeviceToHost, m->st));
  GC_CUDA(cudaStreamSynchronize(m->st));
  return 0;
}

/* The blocks' sums added in block order on the host: what a ZeRO-1 trainer
 * adds after gathering them (grad_sumsq), bit for bit. */
static int grad_norm(gpt_backend_t *m, float scale, float *norm) {
  double total = 0.0;
  GC_TRY(sumsq(m, 0, m->nblocks));
  for (size_t i = 0; i < m->nblocks; i++)
    total += m->h_sumsq[i];
  *norm = (float)(sqrt(total) * (double)scale);
  return 0;
}

static size_t norm_block(gpt_backend_t *m) { return m->nblock; }

static int grad_sumsq(gpt_backend_t *m, size_t b0, size_t b1, double *part) {
  if (b0 > b1 || b1 > m->nblocks)
    return gc_fail(-EINVAL, "grad_sumsq", "blocks out of range", __FILE__, __LINE__);
  GC_TRY(sumsq(m, b0, b1));
  memcpy(part, m->h_sumsq, (b1 - b0) * sizeof(double));
  return 0;
}

/* Keep the moments of [lo, hi) (from lo rounded down to 4, float4 access,
 * to hi rounded up), in allocations of their own; the whole ones freed. */
static int shard(gpt_backend_t *m, size_t lo, size_t hi) {
  if (lo > hi || hi > m->np || m->sharded)
    return gc_fail(-EINVAL, "shard",
                   lo > hi || hi > m->np ? "range out of the parameters" : "already sharded",
                   __FILE__, __LINE__);
  const size_t moff = lo & ~(size_t)3, cap = ((hi + 3) & ~(size_t)3) - moff;
  const size_t keep = cap < 4 ? 4 : cap; /* an empty shard: never 0 bytes */
  float *nm = NULL, *nv = NULL;
  cudaError_t e = cudaMalloc((void **)&nm, keep * 4);
  if (e == cudaSuccess)
    e = cudaMalloc((void **)&nv, keep * 4);
  if (e == cudaSuccess)
    e = cudaMemsetAsync(nm, 0, keep * 4, m->st);
  if (e == cudaSuccess)
    e = cudaMemsetAsync(nv, 0, keep * 4, m->st);
  if (e == cudaSuccess && cap > 0)
    e = cudaMemcpyAsync(nm, m->adam_m + moff, cap * 4, cudaMemcpyDeviceToDevice, m->st);
  if (e == cudaSuccess && cap > 0)
    e = cudaMemcpyAsync(nv, m->adam_v + moff, cap * 4, cudaMemcpyDeviceToDevice, m->st);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(m->st);
  if (e != cudaSuccess) {
    cudaFree(nm);
    cudaFree(nv);
    return gc_cuda_fail(e, "shard (the AdamW moments)", __FILE__, __LINE__);
  }
  const int rc = build_chunks(m, lo, hi);
  if (rc < 0) {
    cudaFree(nm);
    cudaFree(nv);
    return rc;
  }
  cudaFree(m->adam_m);
  cudaFree(m->adam_v);
  m->adam_m = nm, m->adam_v = nv;
  m->lo = lo, m->hi = hi, m->moff = moff, m->mcap = keep;
  m->sharded = 1;
  return 0;
}

static void *param_buffer(gpt_backend_t *m) { return m->master; }

/* Over this rank's shard [lo, hi) only (all of it unsharded). */
template <typename T> static int adamw_t(gpt_backend_t *m, const gpt_adamw_t *a, T *plow) {
  GC_TRY(clear_fresh(m));
  const float bc1 = 1.f - powf(a->beta1, (float)a->t);
  const float bc2 = 1.f - powf(a->beta2, (float)a->t);
  /* Chunks carry 0 or 1 as their decay flag; scale by the step's factor. */
  PROF(m, GPT_PROF_ADAMW,
       gc_adamw_range<T>(m->master, m->adam_m, m->adam_v, m->grad, plow, m->chunks,
                         m->nchunks, a->lr, a->beta1, a->beta2, a->eps, a->grad_scale, bc1,
                         bc2, a->weight_decay, m->lo, m->hi, m->moff, m->st));
  /* the other shards come through the trainer's all-gather of the master */
  m->low_stale = plow != NULL && (m->lo > 0 || m->hi < m->np);
  return 0;
}

static int adamw(gpt_backend_t *m, const gpt_adamw_t *a) {
  switch (m->dtype) {
  case GPT_BF16:
    return adamw_t<bf16>(m, a, (bf16 *)m->plow);
  case GPT_FP16:
    return adamw_t<f16>(m, a, (f16 *)m->plow);
  default:
    return adamw_t<float>(m, a, NULL);
  }
}

static int sync_(gpt_backend_t *m) {
  GC_CUDA(cudaStreamSynchronize(m->st));
  return 0;
}

extern "C" const gpt_backend_ops_t gpt_cuda_ops = {
    "cuda",     create,      destroy,    set_state, get_state, forward,
    zero_grad,  backward,    grad_buffer, grad_norm, adamw,     sync_,
    norm_block, grad_sumsq,  shard,      param_buffer,
};
