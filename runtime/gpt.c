/* gpt.c - the parameter layout of gpt.h, GPT-2's initialisation and the
 * flop count. Shared by both backends and the trainer. */
#include <math.h>
#include <string.h>

#include "gpt.h"

/* Sizes of one layer's tensors, in layout order (GPT_LN1W .. GPT_FCPROJB). */
static size_t layer_tensor(const gpt_config_t *c, int which) {
  size_t C = (size_t)c->channels;
  switch (which) {
  case GPT_LN1W: case GPT_LN1B: case GPT_ATTPROJB: case GPT_LN2W:
  case GPT_LN2B: case GPT_FCPROJB:
    return C;
  case GPT_QKVW: return 3 * C * C;
  case GPT_QKVB: return 3 * C;
  case GPT_ATTPROJW: return C * C;
  case GPT_FCW: return 4 * C * C;
  case GPT_FCB: return 4 * C;
  case GPT_FCPROJW: return 4 * C * C;
  default: return 0;
  }
}

static size_t layer_size(const gpt_config_t *c) {
  size_t n = 0;
  for (int w = GPT_LN1W; w <= GPT_FCPROJB; w++)
    n += layer_tensor(c, w);
  return n;
}

static size_t embed_size(const gpt_config_t *c) {
  return ((size_t)c->padded_vocab + (size_t)c->max_seq_len) * (size_t)c->channels;
}

size_t gpt_num_params(const gpt_config_t *c) {
  return embed_size(c) + (size_t)c->num_layers * layer_size(c) +
         2 * (size_t)c->channels;
}

size_t gpt_tensor_offset(const gpt_config_t *c, int which, int layer,
                         size_t *count) {
  size_t C = (size_t)c->channels, n = 0, off = 0;
  switch (which) {
  case GPT_WTE:
    n = (size_t)c->padded_vocab * C;
    break;
  case GPT_WPE:
    off = (size_t)c->padded_vocab * C;
    n = (size_t)c->max_seq_len * C;
    break;
  case GPT_LNFW:
  case GPT_LNFB:
    off = embed_size(c) + (size_t)c->num_layers * layer_size(c) +
          (which == GPT_LNFB ? C : 0);
    n = C;
    break;
  default:
    off = embed_size(c) + (size_t)layer * layer_size(c);
    for (int w = GPT_LN1W; w < which; w++)
      off += layer_tensor(c, w);
    n = layer_tensor(c, which);
    break;
  }
  if (count)
    *count = n;
  return off;
}

int gpt_num_segments(const gpt_config_t *c) { return c->num_layers + 1; }

/* Segment 0 is layer L-1 with the final LayerNorm after it (they are
 * adjacent in the layout), then layers L-2 .. 0, then the embeddings. */
void gpt_segment(const gpt_config_t *c, int i, size_t *off, size_t *count) {
  int L = c->num_layers;
  size_t ls = layer_size(c);
  if (i == L) {
    *off = 0;
    *count = embed_size(c);
    return;
  }
  int layer = L - 1 - i;
  *off = embed_size(c) + (size_t)layer * ls;
  *count = ls + (i == 0 ? 2 * (size_t)c->channels : 0);
}

/* splitmix64 then Box-Muller: reproducible on every platform. */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void fill_normal(float *p, size_t n, float std, uint64_t *s) {
  for (size_t i = 0; i < n; i += 2) {
    double u1 = ((mix(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (mix(s) >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1));
    p[i] = (float)(std * r * cos(2.0 * M_PI * u2));
    if (i + 1 < n)
      p[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
  }
}

void gpt_init_params(const gpt_config_t *c, uint64_t seed, float *params) {
  uint64_t s = seed * 0x2545f4914f6cdd1dULL + 1;
  float std = 0.02f, resid = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  size_t n, off;
  memset(params, 0, gpt_num_params(c) * sizeof(float));
  off = gpt_tensor_offset(c, GPT_WTE, 0, &n);
  fill_normal(params + off, (size_t)c->vocab_size * (size_t)c->channels, std, &s);
  off = gpt_tensor_offset(c, GPT_WPE, 0, &n);
  fill_normal(params + off, n, std, &s);
  for (int l = 0; l < c->num_layers; l++) {
    static const int ones[] = {GPT_LN1W, GPT_LN2W};
    static const int mats[] = {GPT_QKVW, GPT_ATTPROJW, GPT_FCW, GPT_FCPROJW};
    for (size_t k = 0; k < 2; k++) {
      off = gpt_tensor_offset(c, ones[k], l, &n);
      for (size_t i = 0; i < n; i++)
        params[off + i] = 1.0f;
    }
    for (size_t k = 0; k < 4; k++) {
      off = gpt_tensor_offset(c, mats[k], l, &n);
      int proj = mats[k] == GPT_ATTPROJW || mats[k] == GPT_FCPROJW;
      fill_normal(params + off, n, proj ? resid : std, &s);
    }
  }
  off = gpt_tensor_offset(c, GPT_LNFW, 0, &n);
  for (size_t i = 0; i < n; i++)
    params[off + i] = 1.0f;
}

double gpt_flops_per_token(const gpt_config_t *c, int T) {
  /* N includes the padded vocabulary rows, as llm.c counts it. */
  size_t N = gpt_num_params(c);
  return 6.0 * (double)N +
         6.0 * c->num_layers * (double)c->channels * (double)T;
}
