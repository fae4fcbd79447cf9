/* gpt_cpu.c - the "cpu" backend of gpt.h: fp32 everywhere, the layers of
 * cpu_layers.c on one thread pool, activations kept for backward as in
 * llm.c's train_gpt2.c, activation gradients in a few reused buffers.
 *
 * Gradients: backward computes the micro-batch's gradient into `gmicro`
 * from zero, then adds it to the accumulated gradient segment by segment
 * (acc = acc + g_micro, gpt.h's "Accumulation order") and reports each
 * segment as soon as it is final. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_int.h"
#include "gpt.h"

#define MAGIC 0x67707463u /* "gptc" */

/* The activations of one layer (pointers into one allocation). */
typedef struct layer_acts_s {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2,
      *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
} layer_acts_t;

struct gpt_backend_s {
  unsigned magic;
  gpt_config_t c;
  int B, T;
  size_t n; /* parameters */
  cpu_pool_t *pool;
  float *params, *m, *v, *grads, *gmicro;
  size_t lo, hi; /* the AdamW moments m and v are of params [lo, hi) */
  float *acts; /* one allocation for everything below */
  float *encoded, *lnf, *lnf_mean, *lnf_rstd, *probs, *losses;
  layer_acts_t *layer;
  /* gradients of activations, reused layer after layer */
  float *dres, *dln, *dqkv, *datty, *dfch, *dfch_gelu, *dlnf;
  int32_t *tokens, *targets;
  int have_forward, have_targets;
};

static void backend_free(gpt_backend_t *m) {
  if (m == NULL)
    return;
  cpu_pool_destroy(m->pool);
  free(m->params);
  free(m->m);
  free(m->v);
  free(m->grads);
  free(m->gmicro);
  free(m->acts);
  free(m->layer);
  free(m->tokens);
  free(m->targets);
  m->magic = 0;
  free(m);
}

static int valid_config(const gpt_config_t *c, int B, int T) {
  if (c->num_layers < 1 || c->num_heads < 1 || c->channels < 1 ||
      c->vocab_size < 1 || c->max_seq_len < 1 || B < 1 || T < 1)
    return 0;
  if (c->channels % c->num_heads != 0 || c->padded_vocab < c->vocab_size ||
      T > c->max_seq_len)
    return 0;
  return 1;
}

static float *fp32_alloc(size_t n) {
  return n ? calloc(n, sizeof(float)) : NULL;
}

static int cpu_create(const gpt_config_t *c, int B, int T, int dtype,
                      int device, int threads, gpt_backend_t **out) {
  gpt_backend_t *m;
  size_t BT = (size_t)B * (size_t)T, C = (size_t)c->channels;
  size_t L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
  size_t Vp = (size_t)c->padded_vocab, per_layer, total;
  float *a;
  int rc;
  *out = NULL;
  if (dtype != GPT_FP32 || !valid_config(c, B, T))
    return -EINVAL;
  if ((m = calloc(1, sizeof(*m))) == NULL)
    return -ENOMEM;
  m->magic = MAGIC;
  m->c = *c;
  m->B = B;
  m->T = T;
  m->n = gpt_num_params(c);
  m->lo = 0;
  m->hi = m->n;
  /* the attention's scratch now, so that no step fails for it later */
  if ((rc = cpu_pool_create(threads, &m->pool)) != 0 ||
      (rc = cpu__pool_reserve(m->pool, cpu__attention_scratch(T))) != 0) {
    backend_free(m);
    return rc;
  }
  per_layer = BT * C * 7 + BT * 3 * C + BT * 4 * C * 2 + BT * 4 +
              (size_t)B * NH * (size_t)T * (size_t)T;
  total = BT * C * 2 + BT * 2 + BT * Vp + BT + L * per_layer +
          /* dres dln dqkv datty dfch dfch_gelu dlnf */
          BT * C * 4 + BT * 3 * C + BT * 4 * C * 2;
  m->params = fp32_alloc(m->n);
  m->m = fp32_alloc(m->n);
  m->v = fp32_alloc(m->n);
  m->grads = fp32_alloc(m->n);
  m->gmicro = fp32_alloc(m->n);
  m->acts = fp32_alloc(total);
  m->layer = calloc(L, sizeof(*m->layer));
  m->tokens = calloc(BT, sizeof(int32_t));
  m->targets = calloc(BT, sizeof(int32_t));
  if (!m->params || !m->m || !m->v || !m->grads || !m->gmicro || !m->acts ||
      !m->layer || !m->tokens || !m->targets) {
    backend_free(m);
    return -ENOMEM;
  }
  a = m->acts;
#define TAKE(ptr, count) ((ptr) = a, a += (count))
  TAKE(m->encoded, BT * C);
  for (size_t l = 0; l < L; l++) {
    layer_acts_t *la = &m->layer[l];
    TAKE(la->ln1, BT * C);
    TAKE(la->ln1_mean, BT);
    TAKE(la->ln1_rstd, BT);
    TAKE(la->qkv, BT * 3 * C);
    TAKE(la->atty, BT * C);
    TAKE(la->att, (size_t)B * NH * (size_t)T * (size_t)T);
    TAKE(la->attproj, BT * C);
    TAKE(la->res2, BT * C);
    TAKE(la->ln2, BT * C);
    TAKE(la->ln2_mean, BT);
    TAKE(la->ln2_rstd, BT);
    TAKE(la->fch, BT * 4 * C);
    TAKE(la->fch_gelu, BT * 4 * C);
    TAKE(la->fcproj, BT * C);
    TAKE(la->res3, BT * C);
  }
  TAKE(m->lnf, BT * C);
  TAKE(m->lnf_mean, BT);
  TAKE(m->lnf_rstd, BT);
  TAKE(m->probs, BT * Vp);
  TAKE(m->losses, BT);
  TAKE(m->dres, BT * C);
  TAKE(m->dln, BT * C);
  TAKE(m->dqkv, BT * 3 * C);
  TAKE(m->datty, BT * C);
  TAKE(m->dfch, BT * 4 * C);
  TAKE(m->dfch_gelu, BT * 4 * C);
  TAKE(m->dlnf, BT * C);
#undef TAKE
  *out = m;
  return 0;
}

static void cpu_destroy(gpt_backend_t *m) { backend_free(m); }

static int cpu_set_state(gpt_backend_t *m, const float *params,
                         const float *adam_m, const float *adam_v) {
  size_t mbytes = (m->hi - m->lo) * sizeof(float);
  if (params)
    memcpy(m->params, params, m->n * sizeof(float));
  if (adam_m && mbytes)
    memcpy(m->m, adam_m, mbytes);
  if (adam_v && mbytes)
    memcpy(m->v, adam_v, mbytes);
  return 0;
}

static int cpu_get_state(gpt_backend_t *m, float *params, float *adam_m,
                         float *adam_v) {
  size_t mbytes = (m->hi - m->lo) * sizeof(float);
  if (params)
    memcpy(params, m->params, m->n * sizeof(float));
  if (adam_m && mbytes)
    memcpy(adam_m, m->m, mbytes);
  if (adam_v && mbytes)
    memcpy(adam_v, m->v, mbytes);
  return 0;
}

/* Pointer to tensor `which` of layer l in a parameter-shaped array. */
static float *tensor(const gpt_backend_t *m, float *base, int which, int l) {
  return base + gpt_tensor_offset(&m->c, which, l, NULL);
}

static int cpu_forward(gpt_backend_t *m, const int32_t *tokens,
                       const int32_t *targets, float *loss) {
  int B = m->B, T = m->T, C = m->c.channels, NH = m->c.num_heads;
  int V = m->c.vocab_size, Vp = m->c.padded_vocab;
  size_t BT = (size_t)B * (size_t)T;
  cpu_pool_t *p = m->pool;
  float *residual, *w = m->params;
  int rc;
  for (size_t i = 0; i < BT; i++)
    if (tokens[i] < 0 || tokens[i] >= V ||
        (targets && (targets[i] < 0 || targets[i] >= V)))
      return -EINVAL;
  memcpy(m->tokens, tokens, BT * sizeof(int32_t));
  if (targets)
    memcpy(m->targets, targets, BT * sizeof(int32_t));
  m->have_targets = targets != NULL;
  cpu_encoder_forward(p, m->encoded, m->tokens, tensor(m, w, GPT_WTE, 0),
                      tensor(m, w, GPT_WPE, 0), B, T, C);
  residual = m->encoded;
  for (int l = 0; l < m->c.num_layers; l++) {
    layer_acts_t *a = &m->layer[l];
    cpu_layernorm_forward(p, a->ln1, a->ln1_mean, a->ln1_rstd, residual,
                          tensor(m, w, GPT_LN1W, l), tensor(m, w, GPT_LN1B, l),
                          B, T, C);
    cpu_matmul_forward(p, a->qkv, a->ln1, tensor(m, w, GPT_QKVW, l),
                       tensor(m, w, GPT_QKVB, l), B, T, C, 3 * C);
    if ((rc = cpu_attention_forward(p, a->atty, a->att, a->qkv, B, T, C, NH)) != 0)
      return rc;
    cpu_matmul_forward(p, a->attproj, a->atty, tensor(m, w, GPT_ATTPROJW, l),
                       tensor(m, w, GPT_ATTPROJB, l), B, T, C, C);
    cpu_residual_forward(p, a->res2, residual, a->attproj, BT * (size_t)C);
    cpu_layernorm_forward(p, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                          tensor(m, w, GPT_LN2W, l), tensor(m, w, GPT_LN2B, l),
                          B, T, C);
    cpu_matmul_forward(p, a->fch, a->ln2, tensor(m, w, GPT_FCW, l),
                       tensor(m, w, GPT_FCB, l), B, T, C, 4 * C);
    cpu_gelu_forward(p, a->fch_gelu, a->fch, BT * 4 * (size_t)C);
    cpu_matmul_forward(p, a->fcproj, a->fch_gelu, tensor(m, w, GPT_FCPROJW, l),
                       tensor(m, w, GPT_FCPROJB, l), B, T, 4 * C, C);
    cpu_residual_forward(p, a->res3, a->res2, a->fcproj, BT * (size_t)C);
    residual = a->res3;
  }
  cpu_layernorm_forward(p, m->lnf, m->lnf_mean, m->lnf_rstd, residual,
                        tensor(m, w, GPT_LNFW, 0), tensor(m, w, GPT_LNFB, 0), B,
                        T, C);
  /* the tied head: logits = lnf · wteᵀ, then softmax in place */
  cpu_matmul_forward(p, m->probs, m->lnf, tensor(m, w, GPT_WTE, 0), NULL, B, T,
                     C, Vp);
  cpu_softmax_forward(p, m->probs, m->probs, B, T, V, Vp);
  m->have_forward = 1;
  if (targets) {
    double sum = 0.0;
    cpu_crossentropy_forward(p, m->losses, m->probs, m->targets, B, T, Vp);
    for (size_t i = 0; i < BT; i++)
      sum += m->losses[i];
    if (loss)
      *loss = (float)(sum / (double)BT);
  } else if (loss) {
    *loss = NAN;
  }
  return 0;
}

static int cpu_zero_grad(gpt_backend_t *m) {
  memset(m->grads, 0, m->n * sizeof(float));
  return 0;
}

/* dlogits = (probs - onehot(target)) · d, in place of probs (backward is the
 * last reader of the probabilities). */
typedef struct dl_s {
  float *probs;
  const int32_t *targets;
  float d;
  int V, Vp;
} dl_t;

static void dlogits_task(void *ctx, size_t lo, size_t hi, int tid) {
  const dl_t *x = ctx;
  for (size_t bt = lo; bt < hi; bt++) {
    float *pr = x->probs + bt * (size_t)x->Vp;
    for (int v = 0; v < x->V; v++)
      pr[v] = (pr[v] - (v == x->targets[bt] ? 1.0f : 0.0f)) * x->d;
  }
}

/* Segment seg of the micro-batch's gradient is final: add it to the
 * accumulated gradient, report it on the last micro-step. */
static int segment_done(gpt_backend_t *m, int seg, int last, gpt_segment_cb cb,
                        void *arg) {
  size_t off, count;
  gpt_segment(&m->c, seg, &off, &count);
  cpu_add(m->pool, m->grads + off, m->gmicro + off, count);
  return last && cb ? cb(arg, seg, NULL) : 0;
}

static int cpu_backward(gpt_backend_t *m, float loss_scale, int last,
                        gpt_segment_cb cb, void *cb_arg) {
  int B = m->B, T = m->T, C = m->c.channels, NH = m->c.num_heads;
  int V = m->c.vocab_size, Vp = m->c.padded_vocab, L = m->c.num_layers, rc;
  size_t BT = (size_t)B * (size_t)T, BTC = BT * (size_t)C;
  cpu_pool_t *p = m->pool;
  float *w = m->params, *g = m->gmicro;
  dl_t dl;
  if (!m->have_forward || !m->have_targets)
    return -EINVAL;
  m->have_forward = 0;
  memset(g, 0, m->n * sizeof(float));
  dl.probs = m->probs;
  dl.targets = m->targets;
  dl.d = loss_scale / (float)BT;
  dl.V = V;
  dl.Vp = Vp;
  cpu_parallel(p, BT, 1, dlogits_task, &dl);
  memset(m->dlnf, 0, BTC * sizeof(float));
  cpu_matmul_backward(p, m->dlnf, tensor(m, g, GPT_WTE, 0), NULL, m->probs,
                      m->lnf, tensor(m, w, GPT_WTE, 0), B, T, C, Vp);
  memset(m->dres, 0, BTC * sizeof(float));
  cpu_layernorm_backward(p, m->dres, tensor(m, g, GPT_LNFW, 0),
                         tensor(m, g, GPT_LNFB, 0), m->dlnf,
                         L ? m->layer[L - 1].res3 : m->encoded,
                         tensor(m, w, GPT_LNFW, 0), m->lnf_mean, m->lnf_rstd,
                         B, T, C);
  for (int l = L - 1; l >= 0; l--) {
    layer_acts_t *a = &m->layer[l];
    float *residual = l == 0 ? m->encoded : m->layer[l - 1].res3;
    /* m->dres is d(res3) here; the residual path passes it on unchanged
     * and each branch adds its part (d(res2), then d(residual)). */
    memset(m->dfch_gelu, 0, BTC * 4 * sizeof(float));
    cpu_matmul_backward(p, m->dfch_gelu, tensor(m, g, GPT_FCPROJW, l),
                        tensor(m, g, GPT_FCPROJB, l), m->dres, a->fch_gelu,
                        tensor(m, w, GPT_FCPROJW, l), B, T, 4 * C, C);
    memset(m->dfch, 0, BTC * 4 * sizeof(float));
    cpu_gelu_backward(p, m->dfch, a->fch, m->dfch_gelu, BTC * 4);
    memset(m->dln, 0, BTC * sizeof(float));
    cpu_matmul_backward(p, m->dln, tensor(m, g, GPT_FCW, l),
                        tensor(m, g, GPT_FCB, l), m->dfch, a->ln2,
                        tensor(m, w, GPT_FCW, l), B, T, C, 4 * C);
    cpu_layernorm_backward(p, m->dres, tensor(m, g, GPT_LN2W, l),
                           tensor(m, g, GPT_LN2B, l), m->dln, a->res2,
                           tensor(m, w, GPT_LN2W, l), a->ln2_mean, a->ln2_rstd,
                           B, T, C);
    memset(m->datty, 0, BTC * sizeof(float));
    cpu_matmul_backward(p, m->datty, tensor(m, g, GPT_ATTPROJW, l),
                        tensor(m, g, GPT_ATTPROJB, l), m->dres, a->atty,
                        tensor(m, w, GPT_ATTPROJW, l), B, T, C, C);
    memset(m->dqkv, 0, BTC * 3 * sizeof(float));
    if ((rc = cpu_attention_backward(p, m->dqkv, m->datty, a->qkv, a->att, B,
                                     T, C, NH)) != 0)
      return rc;
    memset(m->dln, 0, BTC * sizeof(float));
    cpu_matmul_backward(p, m->dln, tensor(m, g, GPT_QKVW, l),
                        tensor(m, g, GPT_QKVB, l), m->dqkv, a->ln1,
                        tensor(m, w, GPT_QKVW, l), B, T, C, 3 * C);
    cpu_layernorm_backward(p, m->dres, tensor(m, g, GPT_LN1W, l),
                           tensor(m, g, GPT_LN1B, l), m->dln, residual,
                           tensor(m, w, GPT_LN1W, l), a->ln1_mean, a->ln1_rstd,
                           B, T, C);
    if ((rc = segment_done(m, L - 1 - l, last, cb, cb_arg)) != 0)
      return rc;
  }
  cpu_encoder_backward(p, tensor(m, g, GPT_WTE, 0), tensor(m, g, GPT_WPE, 0),
                       m->dres, m->tokens, B, T, C);
  return segment_done(m, L, last, cb, cb_arg);
}

static void *cpu_grad_buffer(gpt_backend_t *m, int *dtype) {
  if (dtype)
    *dtype = GPT_FP32;
  return m->grads;
}

static int cpu_grad_norm(gpt_backend_t *m, float scale, float *norm) {
  *norm = (float)(sqrt(cpu_sumsq(m->pool, m->grads, m->n)) * (double)scale);
  return 0;
}

/* Weight decay applies to the tensors of two dimensions only. */
static int decayed(int which) {
  return which == GPT_WTE || which == GPT_WPE || which == GPT_QKVW ||
         which == GPT_ATTPROJW || which == GPT_FCW || which == GPT_FCPROJW;
}

static int cpu_adamw_step(gpt_backend_t *m, const gpt_adamw_t *a) {
  /* the layout's tensors in order: embeddings, layers, final LayerNorm */
  static const int embed[] = {GPT_WTE, GPT_WPE}, fin[] = {GPT_LNFW, GPT_LNFB};
  if (a->t < 1)
    return -EINVAL;
  for (int pass = 0; pass < 3; pass++) {
    int layers = pass == 1 ? m->c.num_layers : 1;
    for (int l = 0; l < layers; l++) {
      int first = pass == 1 ? GPT_LN1W : 0, count = pass == 1 ? 12 : 2;
      for (int i = 0; i < count; i++) {
        int which = pass == 0 ? embed[i] : pass == 2 ? fin[i] : first + i;
        size_t n, off = gpt_tensor_offset(&m->c, which, l, &n);
        /* the tensor's elements within the shard (all when unsharded) */
        size_t lo = off > m->lo ? off : m->lo;
        size_t hi = off + n < m->hi ? off + n : m->hi;
        if (lo >= hi)
          continue;
        cpu_adamw(m->pool, m->params + lo, m->grads + lo, m->m + (lo - m->lo),
                  m->v + (lo - m->lo), hi - lo, a,
                  decayed(which) ? a->weight_decay : 0.0f);
      }
    }
  }
  return 0;
}

static int cpu_sync(gpt_backend_t *m) { return 0; }

static size_t cpu_norm_block(gpt_backend_t *m) { return cpu_sumsq_block(m->n); }

static int cpu_grad_sumsq(gpt_backend_t *m, size_t b0, size_t b1,
                          double *part) {
  size_t block = cpu_sumsq_block(m->n);
  if (b0 > b1 || b1 > (m->n + block - 1) / block)
    return -EINVAL;
  cpu_sumsq_blocks(m->pool, m->grads, m->n, b0, b1, part);
  return 0;
}

static int cpu_shard(gpt_backend_t *m, size_t lo, size_t hi) {
  float *am, *av;
  if (lo > hi || hi > m->n || m->lo != 0 || m->hi != m->n)
    return -EINVAL;
  /* moved down and shrunk in place: never the whole and the shard at
   * once (at least one float: a rank may hold an empty shard) */
  memmove(m->m, m->m + lo, (hi - lo) * sizeof(float));
  memmove(m->v, m->v + lo, (hi - lo) * sizeof(float));
  if ((am = realloc(m->m, (hi - lo + 1) * sizeof(float))) != NULL)
    m->m = am;
  if ((av = realloc(m->v, (hi - lo + 1) * sizeof(float))) != NULL)
    m->v = av;
  m->lo = lo;
  m->hi = hi;
  return 0;
}

static void *cpu_param_buffer(gpt_backend_t *m) { return m->params; }

const gpt_backend_ops_t gpt_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .set_state = cpu_set_state,
    .get_state = cpu_get_state,
    .forward = cpu_forward,
    .zero_grad = cpu_zero_grad,
    .backward = cpu_backward,
    .grad_buffer = cpu_grad_buffer,
    .grad_norm = cpu_grad_norm,
    .adamw = cpu_adamw_step,
    .sync = cpu_sync,
    .norm_block = cpu_norm_block,
    .grad_sumsq = cpu_grad_sumsq,
    .shard = cpu_shard,
    .param_buffer = cpu_param_buffer,
};
