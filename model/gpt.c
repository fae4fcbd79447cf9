/* gpt.c - the parameter layout of gpt.h, GPT-2's initialisation and the
 * flop count. Shared by both backends and the trainer. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
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

/* splitmix64 then Box-Muller: reproducible on every platform. The state
 * only counts (s += gamma per draw), so the draws from any point on are
 * known without making the ones before: that lets threads fill pieces of a
 * tensor and get the numbers one thread gets, bit for bit. */
#define MIX_GAMMA 0x9e3779b97f4a7c15ULL

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += MIX_GAMMA);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* n values from state s: two draws per pair, ceil(n/2) pairs. */
static void fill_normal(float *p, size_t n, float std, uint64_t s) {
  for (size_t i = 0; i < n; i += 2) {
    double u1 = ((mix(&s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (mix(&s) >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1));
    p[i] = (float)(std * r * cos(2.0 * M_PI * u2));
    if (i + 1 < n)
      p[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
  }
}

/* One piece of a tensor's fill: an even number of values (but the last
 * piece of a tensor) and the state before its first draw. */
typedef struct fill_piece_s {
  float *p;
  size_t n;
  float std;
  uint64_t s;
} fill_piece_t;

typedef struct fill_work_s {
  fill_piece_t *pieces;
  size_t npieces;
  size_t next; /* the next piece to take (atomic) */
} fill_work_t;

#define FILL_PIECE ((size_t)1 << 18)     /* values per piece */
#define FILL_PER_THREAD ((size_t)1 << 21) /* no thread for less than this */
#define FILL_MAX_THREADS 32

static void *fill_worker(void *arg) {
  fill_work_t *w = arg;
  size_t i;
  while ((i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->npieces)
    fill_normal(w->pieces[i].p, w->pieces[i].n, w->pieces[i].std,
                w->pieces[i].s);
  return NULL;
}

/* One random tensor: its pieces into `pieces`, or (pieces NULL, now set)
 * filled at once, or only counted; *s advances past its draws.
 * RET the number of pieces. */
static size_t cut_tensor(fill_piece_t *pieces, int now, float *p, size_t n,
                         float std, uint64_t *s) {
  size_t k = 0;
  if (now)
    fill_normal(p, n, std, *s);
  else
    for (size_t i = 0; i < n; i += FILL_PIECE, k++)
      if (pieces) {
        pieces[k].p = p + i;
        pieces[k].n = n - i < FILL_PIECE ? n - i : FILL_PIECE;
        pieces[k].std = std;
        pieces[k].s = *s + (uint64_t)i * MIX_GAMMA; /* i even: i draws */
      }
  *s += (uint64_t)((n + 1) / 2 * 2) * MIX_GAMMA;
  return k;
}

/* Every random tensor in draw order, as cut_tensor does one. */
static size_t cut_all(const gpt_config_t *c, uint64_t seed, float *params,
                      fill_piece_t *pieces, int now) {
  static const int mats[] = {GPT_QKVW, GPT_ATTPROJW, GPT_FCW, GPT_FCPROJW};
  uint64_t s = seed * 0x2545f4914f6cdd1dULL + 1;
  float std = 0.02f, resid = 0.02f / sqrtf(2.0f * (float)c->num_layers);
  size_t n, off, k = 0;
  off = gpt_tensor_offset(c, GPT_WTE, 0, &n);
  k += cut_tensor(pieces ? pieces + k : NULL, now, params + off,
                  (size_t)c->vocab_size * (size_t)c->channels, std, &s);
  off = gpt_tensor_offset(c, GPT_WPE, 0, &n);
  k += cut_tensor(pieces ? pieces + k : NULL, now, params + off, n, std, &s);
  for (int l = 0; l < c->num_layers; l++)
    for (size_t j = 0; j < 4; j++) {
      int proj = mats[j] == GPT_ATTPROJW || mats[j] == GPT_FCPROJW;
      off = gpt_tensor_offset(c, mats[j], l, &n);
      k += cut_tensor(pieces ? pieces + k : NULL, now, params + off, n,
                      proj ? resid : std, &s);
    }
  return k;
}

/* The CPUs this thread may run on (launch binds each rank to its share). */
static int cpus_allowed(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return 1;
}

/* The random tensors are cut in pieces that up to one thread per allowed
 * CPU (the caller's among them) fill: the same numbers as in order. */
void gpt_init_params(const gpt_config_t *c, uint64_t seed, float *params) {
  size_t total = gpt_num_params(c), n, off;
  fill_work_t w;
  pthread_t th[FILL_MAX_THREADS];
  int nth = 0, want;
  memset(params, 0, total * sizeof(float));
  for (int l = 0; l < c->num_layers; l++) {
    static const int ones[] = {GPT_LN1W, GPT_LN2W};
    for (size_t k = 0; k < 2; k++) {
      off = gpt_tensor_offset(c, ones[k], l, &n);
      for (size_t i = 0; i < n; i++)
        params[off + i] = 1.0f;
    }
  }
  off = gpt_tensor_offset(c, GPT_LNFW, 0, &n);
  for (size_t i = 0; i < n; i++)
    params[off + i] = 1.0f;
  memset(&w, 0, sizeof(w));
  want = cpus_allowed();
  if ((size_t)want > total / FILL_PER_THREAD)
    want = (int)(total / FILL_PER_THREAD);
  if (want > FILL_MAX_THREADS)
    want = FILL_MAX_THREADS;
  if (want > 1) {
    w.npieces = cut_all(c, seed, params, NULL, 0);
    w.pieces = malloc(w.npieces * sizeof(*w.pieces));
  }
  if (w.pieces == NULL) { /* small model (or no memory for the list) */
    cut_all(c, seed, params, NULL, 1);
    return;
  }
  cut_all(c, seed, params, w.pieces, 0);
  for (int i = 1; i < want; i++)
    if (pthread_create(&th[nth], NULL, fill_worker, &w) == 0)
      nth++;
  fill_worker(&w); /* a thread that did not start leaves its share here */
  for (int i = 0; i < nth; i++)
    pthread_join(th[i], NULL);
  free(w.pieces);
}

double gpt_flops_per_token(const gpt_config_t *c, int T) {
  /* N includes the padded vocabulary rows, as llm.c counts it. */
  size_t N = gpt_num_params(c);
  return 6.0 * (double)N +
         6.0 * c->num_layers * (double)c->channels * (double)T;
}
