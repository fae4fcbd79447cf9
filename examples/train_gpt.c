/* train_gpt.c - GPT-2 training on the runtime: the "train.bin" launch runs.
 *
 *   launch --standalone --nproc-per-node 4 build/bin/train_gpt --preset tiny
 *
 * One process per rank (a GPU, or a share of the CPU). Each rank reads its
 * own samples (micro-batch n of the data stream for global step s,
 * micro-step k, rank r is n = (s·accum + k)·world + r, B windows from
 * window n·B), computes the
 * gradient of each micro-batch, and the runtime all-reduces the gradient
 * while backward runs (rt.h); then every rank applies the same AdamW step.
 * On the CPU all sums have a fixed order, so K ranks give bitwise the
 * parameters one rank gets with K micro-steps of accumulation.
 *
 * Flags, data formats, the log line, MFU and exit codes: docs/runtime.md,
 * and --help.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpt.h"
#include "gpt_cpu.h"
#include "gpt_data.h"
#include "ckpt.h"
#include "lu.h"
#include "rt.h"
#include "tb.h"
#ifdef GPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Exit codes (docs/runtime.md). */
enum {
  EXIT_OK = 0,
  EXIT_FAIL = 1,     /* the runtime, a device, a file write */
  EXIT_USAGE = 2,    /* bad flags or bad input data */
  EXIT_DIVERGED = 3  /* NaN/inf loss or gradient, or a gradient norm over
                        --stop-grad-norm */
};

typedef struct preset_s {
  const char *name;
  int layers, heads, channels, max_seq, seq, vocab, batch, steps, warmup;
  float lr;
} preset_t;

/* vocab 0: from the data (256 for text, 50257 for token files) */
static const preset_t presets[] = {
    {"tiny", 2, 4, 64, 64, 64, 0, 8, 300, 20, 3e-3f},
    {"gpt2-124m", 12, 12, 768, 1024, 1024, 0, 4, 1000, 100, 6e-4f},
    {"gpt2-350m", 24, 16, 1024, 1024, 1024, 0, 4, 1000, 100, 3e-4f},
};

typedef struct opts_s {
  const preset_t *preset;
  int layers, heads, channels, seq_len, vocab;
  int batch, accum, steps, warmup, val_every, val_batches, log_every, threads;
  int loss_scale_window;
  float lr, min_lr_frac, weight_decay, beta1, beta2, eps, clip, stop_norm;
  float loss_scale, peak_tflops, val_fraction, bucket_mb;
  uint64_t seed;
  int ckpt_every;
  int zero; /* 0, or 1: AdamW state and update sharded over the ranks */
  const char *data, *dump_params, *ckpt_dir, *tb_dir;
  int device; /* RT_DEVICE_* */
  int dtype;  /* GPT_*, or -1 = by device */
} opts_t;

/* The training state: what a checkpoint saves to resume exactly. */
typedef struct train_state_s {
  int64_t step;      /* steps done */
  uint64_t window;   /* windows of the training stream consumed (TGPTCK1:
                        micro-batches, of the batch it was saved with) */
  uint64_t seed;     /* the initialisation and the data order */
  int64_t adam_step; /* AdamW updates applied (skipped steps excluded) */
  float loss_scale;  /* fp16: the dynamic loss scale; 1 otherwise */
  int good_steps;    /* fp16: steps since the scale last changed */
} train_state_t;

/* The first bytes of every shard: what must match to resume, and the
 * training state. */
typedef struct ckpt_header_s {
  char magic[8]; /* "TGPTCK2"; "TGPTCK1" (its st.window counts micro-batches)
                    still resumes */
  int32_t layers, heads, channels, max_seq, vocab, padded_vocab;
  int32_t seq_len, batch, accum, steps, world;
  int32_t zero; /* --zero of the run that saved (0 in older files); the
                   moments are whole either way: a ZeRO-1 run gathers
                   them on save */
  uint64_t params;
  train_state_t st;
} ckpt_header_t;

/* The shard of the step to resume from, read on a thread of its own while
 * the runtime and the model start (docs/runtime.md, "Start-up"). */
typedef struct ck_pre_s {
  pthread_t th;
  int started;
  char *dir;
  int rank, world;  /* RANK, WORLD_SIZE: checked against the runtime's */
  size_t n;         /* parameters of the model */
  /* set by the thread (under mu until done; read after the join) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int decided;      /* step (or a failure before it) is known */
  int64_t step;     /* -1: fresh start */
  int rc;           /* a ckpt_* code: the first call that failed */
  int stage;        /* which: PRE_OPEN, PRE_STEP, PRE_SIZE, PRE_LOAD */
  uint64_t size;    /* the shard's */
  ckpt_header_t h;
  float *buf;       /* params, m, v: 3 x n */
  float *into;      /* the run's buffer to read into (a standby's, made
                       and page-locked while it waited), else NULL: then
                       buf is malloc'ed here and freed with p */
  double ms;        /* the read's duration */
  char *log;        /* the library's messages, shown at the join */
  size_t loglen;
} ck_pre_t;

enum { PRE_OPEN, PRE_STEP, PRE_SIZE, PRE_LOAD };

/* Everything a run holds, released by run_free(). */
typedef struct run_s {
  opts_t o;
  gpt_config_t cfg;
  gpt_data_t *data;
  rt_t *rt;
  const gpt_backend_ops_t *ops;
  gpt_backend_t *model;
  int model_dev; /* the device the model was made on, -1 the CPU */
  int rank, world, dtype;
  float *params;
  int inited; /* the parameters are set (initialised or loaded) */
  int32_t *tok, *tgt;
  size_t *seg_off, *seg_count;
  /* --zero 1: rank k owns parameters [part[k], part[k+1]), cut at the
   * edges of the norm's blocks (bpart[k] = part[k] / block) */
  size_t *part, *bpart, nblocks;
  double *norm_parts; /* the blocks' sums of squares, all ranks' */
  void *norm_stage;   /* their device copy for NCCL (GPU, ranks > 1) */
  uint64_t train_windows, val_windows;
  train_state_t st;
  double peak; /* dense TFLOPS of one device, 0 when unknown */
  /* checkpoints: the shard is a header and the three state arrays, copied
   * out of the model into host buffers the background save writes */
  ckpt_t *ck;
  rdzv_client_t *ck_store; /* the ckpt_t's own store connection */
  float *ck_buf;           /* params, m, v: 3 x num_params */
  int ck_pinned;           /* 1 page-locked, -1 it failed, 0 not yet */
  ckpt_header_t ck_head;   /* of the save in flight */
  ck_pre_t *pre;           /* the resume's read, NULL when none runs */
  tb_t *tb;                /* --tb-dir: rank 0's TensorBoard events */
  FILE *dump;              /* --dump-params, opened by rank 0 at start-up */
} run_t;


/* ---- messages --------------------------------------------------------------- */

static void fail_line(const char *fmt, ...) LU_PRINTF(1, 2);
static void fail_line(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "train_gpt: error: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

static void usage(FILE *f) {
  fprintf(f,
"usage: train_gpt [flags]     (under launch: one process per rank)\n"
"Trains a GPT-2 decoder (docs/runtime.md).\n"
"\n"
"model\n"
"  --preset NAME        tiny (default; seconds on a CPU), gpt2-124m, gpt2-350m\n"
"  --layers N           transformer blocks\n"
"  --heads N            attention heads (divides --channels)\n"
"  --channels N         width\n"
"  --seq-len T          tokens per sequence\n"
"  --vocab V            vocabulary (default: 256 for text, 50257 for token files)\n"
"data\n"
"  --data FILE          text (one token per byte) or an llm.c token file;\n"
"                       default: the texts of /usr/share/common-licenses\n"
"  --val-fraction F     the share of the data kept for validation (0.1)\n"
"  --val-every N        validation loss every N steps and at the end (100; 0 = end)\n"
"  --val-batches N      micro-batches per validation, over all ranks (8)\n"
"optimisation\n"
"  --steps N            training steps (preset)\n"
"  --batch B            micro-batch: sequences per rank and micro-step (preset)\n"
"  --accum K            micro-steps per step (gradient accumulation, 1)\n"
"  --lr X               peak learning rate (preset)\n"
"  --warmup N           linear warmup steps, then cosine decay (preset)\n"
"  --min-lr-frac F      the cosine ends at F x lr (0.1)\n"
"  --weight-decay X     AdamW weight decay of the matrices (0.1)\n"
"  --beta1 X --beta2 X --eps X   AdamW (0.9, 0.95, 1e-8)\n"
"  --clip X             clip the global gradient norm to X (1.0; 0 = off)\n"
"  --seed N             initialisation and data order (1337)\n"
"safety\n"
"  --stop-grad-norm X   stop when the gradient norm exceeds X (1000; 0 = off)\n"
"  --loss-scale X       fp16: initial loss scale (65536)\n"
"  --loss-scale-window N  fp16: double the scale after N good steps (2000)\n"
"device\n"
"  --device D           cpu, cuda or auto (default: a GPU when there is one)\n"
"  --dtype T            fp32, bf16 or fp16 (default: bf16 on SM80+, fp16 on\n"
"                       older GPUs, fp32 on the CPU, which computes in fp32 only)\n"
"  --threads N          CPU threads per rank (OMP_NUM_THREADS, else the CPU set)\n"
"  --bucket-mb X        gradient all-reduce buckets in MiB (0 = per layer)\n"
"  --zero N             0: every rank holds the AdamW state (default); 1: ZeRO-1,\n"
"                       each rank holds and updates a 1/ranks shard of it\n"
"output\n"
"  --log-every N        a log line every N steps (1)\n"
"  --peak-tflops X      a device's dense peak for MFU (default: by GPU name)\n"
"  --dump-params FILE   write the final parameters (raw little-endian fp32)\n"
"  --tb-dir D           rank 0 writes TensorBoard event files in D: loss, val\n"
"                       loss, lr, grad norm, tokens/s, MFU (on a GPU) by step\n"
"checkpoints (docs/checkpoints.md)\n"
"  --ckpt-dir D         launch's checkpoint layout in D (default: $LAUNCH_CKPT_DIR,\n"
"                       which launch --ckpt-dir sets); resumes from\n"
"                       $LAUNCH_RESUME_STEP, the step every node agreed on\n"
"  --ckpt-every K       save parameters, AdamW moments, step, data position\n"
"                       every K steps and at the last step, in the background\n"
"                       (0 = never, default)\n"
"  --help               this text\n"
"exit codes: 0 done, 1 runtime failure, 2 bad flags or data, 3 training diverged\n");
}

/* ---- flags ------------------------------------------------------------------ */

static int parse_int(const char *flag, const char *v, int min, int *out) {
  if (lu_parse_int(v, min, 1 << 30, out) != 0) {
    fail_line("%s %s: expected an integer >= %d (see --help)", flag, v, min);
    return -1;
  }
  return 0;
}

static int parse_float(const char *flag, const char *v, double min, float *out) {
  char *end;
  double x;
  errno = 0;
  x = strtod(v, &end);
  if (errno || end == v || *end != '\0' || !isfinite(x) || x < min) {
    fail_line("%s %s: expected a number >= %g (see --help)", flag, v, min);
    return -1;
  }
  *out = (float)x;
  return 0;
}

static const preset_t *find_preset(const char *name) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(presets); i++)
    if (strcmp(presets[i].name, name) == 0)
      return &presets[i];
  return NULL;
}

/* RET 0, 1 for --help, -1 on a bad flag (reported). */
static int parse_flags(int argc, char **argv, opts_t *o) {
  /* flags of the model that override the preset; -1 = unset */
  int layers = -1, heads = -1, channels = -1, seq = -1, batch = -1;
  int steps = -1, warmup = -1;
  float lr = -1;
  memset(o, 0, sizeof(*o));
  o->preset = &presets[0];
  o->accum = 1;
  o->val_every = 100;
  o->val_batches = 8;
  o->log_every = 1;
  o->loss_scale_window = 2000;
  o->min_lr_frac = 0.1f;
  o->weight_decay = 0.1f;
  o->beta1 = 0.9f;
  o->beta2 = 0.95f;
  o->eps = 1e-8f;
  o->clip = 1.0f;
  o->stop_norm = 1000.0f;
  o->loss_scale = 65536.0f;
  o->val_fraction = 0.1f;
  o->seed = 1337;
  o->device = RT_DEVICE_AUTO;
  o->dtype = -1;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0)
      return 1;
    if (strncmp(f, "--", 2) != 0) {
      fail_line("unexpected argument %s (see --help)", f);
      return -1;
    }
    if (v == NULL) {
      fail_line("%s needs a value (see --help)", f);
      return -1;
    }
    i++;
    if (strcmp(f, "--preset") == 0) {
      if ((o->preset = find_preset(v)) == NULL) {
        fail_line("--preset %s: not a preset; use tiny, gpt2-124m or gpt2-350m", v);
        return -1;
      }
    } else if (strcmp(f, "--layers") == 0) rc = parse_int(f, v, 1, &layers);
    else if (strcmp(f, "--heads") == 0) rc = parse_int(f, v, 1, &heads);
    else if (strcmp(f, "--channels") == 0) rc = parse_int(f, v, 1, &channels);
    else if (strcmp(f, "--seq-len") == 0) rc = parse_int(f, v, 1, &seq);
    else if (strcmp(f, "--vocab") == 0) rc = parse_int(f, v, 1, &o->vocab);
    else if (strcmp(f, "--batch") == 0) rc = parse_int(f, v, 1, &batch);
    else if (strcmp(f, "--accum") == 0) rc = parse_int(f, v, 1, &o->accum);
    else if (strcmp(f, "--steps") == 0) rc = parse_int(f, v, 1, &steps);
    else if (strcmp(f, "--warmup") == 0) rc = parse_int(f, v, 0, &warmup);
    else if (strcmp(f, "--val-every") == 0) rc = parse_int(f, v, 0, &o->val_every);
    else if (strcmp(f, "--val-batches") == 0) rc = parse_int(f, v, 1, &o->val_batches);
    else if (strcmp(f, "--log-every") == 0) rc = parse_int(f, v, 1, &o->log_every);
    else if (strcmp(f, "--threads") == 0) {
      if ((rc = parse_int(f, v, 1, &o->threads)) == 0 &&
          o->threads > CPU_POOL_MAX_THREADS) {
        fail_line("--threads %s: the CPU backend runs at most %d threads a "
                  "rank", v, CPU_POOL_MAX_THREADS);
        return -1;
      }
    }
    else if (strcmp(f, "--loss-scale-window") == 0)
      rc = parse_int(f, v, 1, &o->loss_scale_window);
    else if (strcmp(f, "--lr") == 0) rc = parse_float(f, v, 0, &lr);
    else if (strcmp(f, "--min-lr-frac") == 0) rc = parse_float(f, v, 0, &o->min_lr_frac);
    else if (strcmp(f, "--weight-decay") == 0) rc = parse_float(f, v, 0, &o->weight_decay);
    else if (strcmp(f, "--beta1") == 0) rc = parse_float(f, v, 0, &o->beta1);
    else if (strcmp(f, "--beta2") == 0) rc = parse_float(f, v, 0, &o->beta2);
    else if (strcmp(f, "--eps") == 0) rc = parse_float(f, v, 0, &o->eps);
    else if (strcmp(f, "--clip") == 0) rc = parse_float(f, v, 0, &o->clip);
    else if (strcmp(f, "--stop-grad-norm") == 0) rc = parse_float(f, v, 0, &o->stop_norm);
    else if (strcmp(f, "--loss-scale") == 0) rc = parse_float(f, v, 1, &o->loss_scale);
    else if (strcmp(f, "--peak-tflops") == 0) rc = parse_float(f, v, 0, &o->peak_tflops);
    else if (strcmp(f, "--val-fraction") == 0) rc = parse_float(f, v, 0, &o->val_fraction);
    else if (strcmp(f, "--bucket-mb") == 0) rc = parse_float(f, v, 0, &o->bucket_mb);
    else if (strcmp(f, "--data") == 0) o->data = v;
    else if (strcmp(f, "--dump-params") == 0) o->dump_params = v;
    else if (strcmp(f, "--ckpt-dir") == 0) o->ckpt_dir = v;
    else if (strcmp(f, "--tb-dir") == 0) o->tb_dir = v;
    else if (strcmp(f, "--ckpt-every") == 0) rc = parse_int(f, v, 0, &o->ckpt_every);
    else if (strcmp(f, "--zero") == 0) {
      if ((rc = parse_int(f, v, 0, &o->zero)) == 0 && o->zero > 1) {
        fail_line("--zero %s: use 0 (no sharding) or 1 (the AdamW state)", v);
        return -1;
      }
    }
    else if (strcmp(f, "--seed") == 0) {
      int64_t s;
      if (lu_parse_i64(v, strlen(v), &s) != 0 || s < 0) {
        fail_line("--seed %s: expected an integer >= 0", v);
        return -1;
      }
      o->seed = (uint64_t)s;
    } else if (strcmp(f, "--device") == 0) {
      if (strcmp(v, "cpu") == 0) o->device = RT_DEVICE_CPU;
      else if (strcmp(v, "cuda") == 0) o->device = RT_DEVICE_CUDA;
      else if (strcmp(v, "auto") == 0) o->device = RT_DEVICE_AUTO;
      else {
        fail_line("--device %s: use cpu, cuda or auto", v);
        return -1;
      }
    } else if (strcmp(f, "--dtype") == 0) {
      if (strcmp(v, "fp32") == 0) o->dtype = GPT_FP32;
      else if (strcmp(v, "bf16") == 0) o->dtype = GPT_BF16;
      else if (strcmp(v, "fp16") == 0) o->dtype = GPT_FP16;
      else {
        fail_line("--dtype %s: use fp32, bf16 or fp16", v);
        return -1;
      }
    } else {
      fail_line("unknown flag %s (see --help)", f);
      return -1;
    }
    if (rc != 0)
      return -1;
  }
  o->layers = layers > 0 ? layers : o->preset->layers;
  o->heads = heads > 0 ? heads : o->preset->heads;
  o->channels = channels > 0 ? channels : o->preset->channels;
  o->seq_len = seq > 0 ? seq : o->preset->seq;
  o->batch = batch > 0 ? batch : o->preset->batch;
  o->steps = steps > 0 ? steps : o->preset->steps;
  o->warmup = warmup >= 0 ? warmup : o->preset->warmup;
  o->lr = lr >= 0 ? lr : o->preset->lr;
  if (o->channels % o->heads != 0) {
    fail_line("--heads %d does not divide --channels %d: pick a head count "
              "that does", o->heads, o->channels);
    return -1;
  }
  if (o->val_fraction >= 0.9f) {
    fail_line("--val-fraction %g leaves too little for training: use less "
              "than 0.9", (double)o->val_fraction);
    return -1;
  }
  if (o->beta1 >= 1.0f || o->beta2 >= 1.0f) {
    fail_line("--beta1 and --beta2 must be below 1");
    return -1;
  }
  return 0;
}

/* ---- set-up ------------------------------------------------------------------ */

static int runtime_failed(const char *what, int rc);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Dense bf16 tensor peaks (fp16 for GPUs without bf16), TFLOPS per GPU, by
 * name; the first match wins. */
static double peak_tflops(const char *name) {
  static const struct { const char *key; double tflops; } table[] = {
      {"H200", 989},     {"GH200", 989}, {"H100 PCIe", 756}, {"H100 NVL", 835},
      {"H100", 989},     {"H800", 989},  {"A100", 312},      {"A800", 312},
      {"L40S", 362},     {"L4", 121},    {"A10", 125},       {"V100", 125},
      {"T4", 65},
  };
  for (size_t i = 0; i < LU_ARRAY_SIZE(table); i++)
    if (strstr(name, table[i].key))
      return table[i].tflops;
  return 0;
}

/* Open the data and fix the vocabulary. RET an exit code. */
static int setup_data(run_t *r) {
  char err[1024];
  const gpt_data_info_t *info;
  uint64_t maxid;
  int rc = gpt_data_open(r->o.data, &r->data, err, sizeof(err));
  if (rc != 0) {
    fail_line("%s", err);
    return EXIT_USAGE;
  }
  info = gpt_data_info(r->data);
  maxid = gpt_data_max_token(r->data);
  if (r->o.vocab == 0)
    r->o.vocab = info->kind == GPT_DATA_TEXT ? 256 : 50257;
  /* --vocab goes up to 2^30: an id past it is no vocabulary's */
  if (maxid >= (uint64_t)1 << 30) {
    fail_line("the data (%s) holds token id %" PRIu64 ", beyond any "
              "vocabulary (--vocab is at most %d): the token file is corrupt "
              "or not llm.c's", gpt_data_name(r->data), maxid, 1 << 30);
    return EXIT_USAGE;
  }
  if (maxid >= (uint64_t)r->o.vocab) {
    fail_line("the data (%s) holds token id %" PRIu64 " but the vocabulary "
              "has %d entries: pass --vocab %" PRIu64 " or more",
              gpt_data_name(r->data), maxid, r->o.vocab, maxid + 1);
    return EXIT_USAGE;
  }
  rc = gpt_data_split(r->data, r->o.seq_len, r->o.val_fraction,
                      &r->train_windows, &r->val_windows, err, sizeof(err));
  if (rc != 0) {
    fail_line("%s", err);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

/* The model's shape, from the flags and the data's vocabulary. Shapes
 * whose parameters or activations could not be counted in a size_t (each
 * flag alone may go up to 2^30) are refused: in doubles, the parameters
 * (gpt.h's layout) and a bound on the activations of a micro-batch (the
 * attention's T x T per head and layer among them), each at most 2^44
 * elements (64 TiB of fp32), far beyond any machine. RET an exit code. */
static int model_config(run_t *r) {
  const opts_t *o = &r->o;
  double L, C, V, T, BT, params, acts, most = 17592186044416.0; /* 2^44 */
  r->cfg.num_layers = o->layers;
  r->cfg.num_heads = o->heads;
  r->cfg.channels = o->channels;
  r->cfg.vocab_size = o->vocab;
  r->cfg.padded_vocab = (int)(((int64_t)o->vocab + 127) / 128 * 128);
  r->cfg.max_seq_len = o->seq_len > o->preset->max_seq ? o->seq_len
                                                       : o->preset->max_seq;
  L = o->layers;
  C = o->channels;
  V = ((double)o->vocab + 127) / 128 * 128;
  T = r->cfg.max_seq_len;
  BT = (double)o->batch * o->seq_len;
  params = (V + T) * C + L * (12 * C * C + 13 * C) + 2 * C;
  acts = BT * (L * (32 * C + 2 * (double)o->heads * o->seq_len) + 2 * V + 8 * C);
  if (params > most || acts > most) {
    fail_line("a model of %d layers, %d heads, %d channels, vocabulary %d, "
              "%d positions and micro-batch %d x %d is too big (%.3g "
              "parameters, about %.3g activations; at most 2^44 each): use "
              "smaller sizes", o->layers, o->heads, o->channels, o->vocab,
              r->cfg.max_seq_len, o->batch, o->seq_len, params, acts);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

/* ---- the resume's read, overlapped with start-up ------------------------------ */

static double now_s(void);

/* The library's messages, kept for the join: what it would have printed. */
static void ck_pre_log(void *data, int level, const char *msg) {
  ck_pre_t *p = data;
  char line[1200];
  int len = snprintf(line, sizeof(line), "launch ckpt: %s%s\n",
                     level == 0 ? "error: " : level == 1 ? "warning: " : "",
                     msg);
  char *grown;
  if (len <= 0)
    return;
  if ((size_t)len >= sizeof(line))
    len = (int)sizeof(line) - 1;
  if ((grown = realloc(p->log, p->loglen + (size_t)len + 1)) == NULL)
    return;
  memcpy(grown + p->loglen, line, (size_t)len + 1);
  p->log = grown;
  p->loglen += (size_t)len;
}

static void *ck_pre_main(void *arg) {
  ck_pre_t *p = arg;
  ckpt_options_t co = CKPT_OPTIONS_INIT;
  ckpt_t *ck = NULL;
  struct iovec iov[4];
  int64_t step = -1;
  int rc, stage = PRE_OPEN;
  double t0 = now_s();
  co.dir = p->dir;
  co.rank = p->rank;
  co.world_size = p->world;
  co.replicated = 1;
  /* no store client: this ckpt_t only reads; the run's own saves. What
   * only saves use is fixed, so that this thread reads no variable but
   * LAUNCH_RESUME_STEP (and the library's own), at once: the main thread
   * (NCCL's set-up) may set variables later. */
  co.job = "read";
  co.local_rank = 0;
  co.generation = 0;
  co.keep = -1;
  co.log = ck_pre_log;
  co.log_data = p;
  if ((rc = ckpt_open(&co, &ck)) == 0) {
    stage = PRE_STEP;
    rc = ckpt_resume_step(ck, &step);
  }
  pthread_mutex_lock(&p->mu);
  p->step = rc == 0 ? step : -1;
  p->decided = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (rc == 0 && step >= 0) {
    stage = PRE_SIZE;
    rc = ckpt_shard_size(ck, step, &p->size);
    /* another size: not read (the join says so) */
    if (rc == 0 && p->size == sizeof(p->h) + 3 * p->n * sizeof(float)) {
      stage = PRE_LOAD;
      p->buf = p->into ? p->into : malloc(3 * p->n * sizeof(float));
      if (p->buf == NULL) {
        rc = -ENOMEM;
      } else {
        iov[0].iov_base = &p->h;
        iov[0].iov_len = sizeof(p->h);
        for (int i = 0; i < 3; i++) {
          iov[1 + i].iov_base = p->buf + (size_t)i * p->n;
          iov[1 + i].iov_len = p->n * sizeof(float);
        }
        rc = ckpt_load(ck, step, iov, 4);
      }
    }
  }
  ckpt_close(ck);
  p->rc = rc;
  p->stage = stage;
  p->ms = (now_s() - t0) * 1e3;
  return NULL;
}

/* Start reading the shard to resume from, when there is a checkpoint
 * directory and RANK and WORLD_SIZE say which shard (else ckpt_setup reads
 * it as it comes). Failures are reported at the join, as ckpt_setup would. */
static void ck_pre_start(run_t *r) {
  const char *dir = r->o.ckpt_dir ? r->o.ckpt_dir : getenv("LAUNCH_CKPT_DIR");
  const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");
  ck_pre_t *p;
  int rk = 0, ws = 1;
  if (dir == NULL || dir[0] == '\0' || getenv("TRAIN_GPT_NO_PREFETCH") ||
      (rank && *rank && lu_parse_int(rank, 0, 1 << 24, &rk) != 0) ||
      (world && *world && lu_parse_int(world, 1, 1 << 24, &ws) != 0) ||
      rk >= ws)
    return;
  if ((p = calloc(1, sizeof(*p))) == NULL || (p->dir = strdup(dir)) == NULL) {
    free(p);
    return;
  }
  p->rank = rk;
  p->world = ws;
  p->n = gpt_num_params(&r->cfg);
  p->into = r->ck_buf; /* a standby's, or NULL */
  p->step = -1;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (pthread_create(&p->th, NULL, ck_pre_main, p) != 0) {
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->dir);
    free(p);
    return;
  }
  p->started = 1;
  r->pre = p;
}

/* Wait for the read and free it. show: print the library's messages. */
static void ck_pre_join(ck_pre_t *p, int show) {
  if (p->started) {
    pthread_join(p->th, NULL);
    p->started = 0;
  }
  if (show && p->loglen > 0) {
    fputs(p->log, stderr);
    fflush(stderr);
  }
}

static void ck_pre_free(ck_pre_t *p) {
  if (p == NULL)
    return;
  ck_pre_join(p, 0);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  if (p->buf != p->into)
    free(p->buf);
  free(p->log);
  free(p->dir);
  free(p);
}

/* Whether the run resumes from a checkpoint (then it loads every
 * parameter): waits only until the step is known. */
static int ck_pre_resuming(run_t *r) {
  ck_pre_t *p = r->pre;
  int64_t step;
  if (p == NULL)
    return 0;
  pthread_mutex_lock(&p->mu);
  while (!p->decided)
    pthread_cond_wait(&p->cv, &p->mu);
  step = p->step;
  pthread_mutex_unlock(&p->mu);
  return step >= 0;
}

/* A fresh start: GPT-2's initialisation, AdamW moments at zero. */
static int init_params(run_t *r) {
  int rc;
  gpt_init_params(&r->cfg, r->o.seed, r->params);
  if ((rc = r->ops->set_state(r->model, r->params, NULL, NULL)) != 0) {
    fail_line("loading the initial parameters: %s", rt_strerror(rc));
    return EXIT_FAIL;
  }
  r->inited = 1;
  return EXIT_OK;
}

/* ZeRO-1: cut the parameters into one shard per rank at the edges of the
 * gradient norm's blocks, and keep the AdamW moments of this rank's shard
 * only. RET an exit code. */
static int setup_zero(run_t *r) {
  size_t n = gpt_num_params(&r->cfg), block;
  int rc, W = r->world;
  if (r->ops->shard == NULL || r->ops->norm_block == NULL ||
      r->ops->grad_sumsq == NULL || r->ops->param_buffer == NULL) {
    fail_line("--zero 1: the %s backend cannot shard the AdamW state yet "
              "(issue #26): use --zero 0", r->ops->name);
    return EXIT_USAGE;
  }
  block = r->ops->norm_block(r->model);
  r->nblocks = (n + block - 1) / block;
  r->part = malloc(((size_t)W + 1) * sizeof(size_t));
  r->bpart = malloc(((size_t)W + 1) * sizeof(size_t));
  r->norm_parts = malloc((r->nblocks + 1) * sizeof(double));
  if (!r->part || !r->bpart || !r->norm_parts) {
    fail_line("out of memory for the shards of %d ranks", W);
    return EXIT_FAIL;
  }
  for (int k = 0; k <= W; k++) {
    r->bpart[k] = r->nblocks * (size_t)k / (size_t)W;
    r->part[k] = r->bpart[k] * block < n ? r->bpart[k] * block : n;
  }
  rc = r->ops->shard(r->model, r->part[r->rank], r->part[r->rank + 1]);
  if (rc != 0)
    return runtime_failed("shard", rc);
#ifdef GPT_HAVE_CUDA
  /* NCCL gathers device memory only: the norm's sums pass through here */
  if (rt_device(r->rt) >= 0 && W > 1 &&
      cudaMalloc(&r->norm_stage, r->nblocks * sizeof(double)) != cudaSuccess) {
    (void)cudaGetLastError();
    fail_line("out of device memory for the gradient norm's %zu block sums",
              r->nblocks);
    return EXIT_FAIL;
  }
#endif
  return EXIT_OK;
}

/* rt_allgather of host memory (part[0] == 0). On the CPU ring in place;
 * NCCL (a GPU run of several ranks) gathers device memory: the parts pass
 * through `stage`, device memory of part[world] elements. RET 0 or a code. */
static int gather_host(run_t *r, void *buf, const size_t *part, size_t esize,
                       void *stage) {
#ifdef GPT_HAVE_CUDA
  if (rt_device(r->rt) >= 0 && r->world > 1) {
    char *h = buf, *d = stage;
    size_t at = part[r->rank] * esize;
    size_t mine = (part[r->rank + 1] - part[r->rank]) * esize;
    int rc;
    if (cudaMemcpy(d + at, h + at, mine, cudaMemcpyHostToDevice) != cudaSuccess)
      return -EIO;
    if ((rc = rt_allgather(r->rt, stage, part, esize)) != 0)
      return rc;
    if (cudaMemcpy(h, d, part[r->world] * esize, cudaMemcpyDeviceToHost) !=
        cudaSuccess)
      return -EIO;
    return 0;
  }
#endif
  (void)stage;
  return rt_allgather(r->rt, buf, part, esize);
}

/* The backend and the model's memory on device (-1: the CPU, cc its
 * compute capability): from setup_model, or earlier in a standby
 * (rt_standby_wait), which keeps them. RET an exit code. */
static int create_model(run_t *r, int device, int cc) {
  const opts_t *o = &r->o;
  size_t n;
  int rc, nseg;
  (void)cc;
  r->ops = &gpt_cpu_ops;
  r->dtype = o->dtype < 0 ? GPT_FP32 : o->dtype;
  r->model_dev = device;
  if (device >= 0) {
#ifdef GPT_HAVE_CUDA
    r->ops = &gpt_cuda_ops;
    r->dtype = o->dtype >= 0 ? o->dtype : cc >= 80 ? GPT_BF16 : GPT_FP16;
    if (r->dtype == GPT_BF16 && cc < 80) {
      fail_line("--dtype bf16 needs a GPU of SM80 or newer; GPU %d is sm_%d: "
                "use --dtype fp16", device, cc);
      return EXIT_USAGE;
    }
#endif
  } else if (r->dtype != GPT_FP32) {
    fail_line("the CPU backend computes in fp32 only: use --dtype fp32, or "
              "--device cuda on a machine with a GPU");
    return EXIT_USAGE;
  }
  n = gpt_num_params(&r->cfg);
  r->params = malloc(n * sizeof(float));
  r->tok = malloc((size_t)o->batch * (size_t)o->seq_len * sizeof(int32_t));
  r->tgt = malloc((size_t)o->batch * (size_t)o->seq_len * sizeof(int32_t));
  nseg = gpt_num_segments(&r->cfg);
  r->seg_off = malloc((size_t)nseg * sizeof(size_t));
  r->seg_count = malloc((size_t)nseg * sizeof(size_t));
  if (!r->params || !r->tok || !r->tgt || !r->seg_off ||
      !r->seg_count) {
    fail_line("out of memory for %zu parameters", n);
    return EXIT_FAIL;
  }
  rc = r->ops->create(&r->cfg, o->batch, o->seq_len, r->dtype, device,
                      o->threads, &r->model);
  if (rc != 0) {
    fail_line("the %s backend cannot hold this model (%zu parameters, "
              "micro-batch %d x %d tokens): %s", r->ops->name, n, o->batch,
              o->seq_len, rt_strerror(rc));
    return EXIT_FAIL;
  }
  return EXIT_OK;
}

/* rt_standby_wait's warm-up: what a restarted worker would pay first.
 * The model is made, and two forward and backward passes on zeros pay the
 * first uses (cuBLASLt's choices, the CUDA graphs' capture, keyed by the
 * loss scale training uses). They touch no parameter and no AdamW moment
 * (a resume loads them, a fresh start initialises them after this), and
 * the first real step zeroes the gradient. */
/* With a checkpoint directory, the standby also makes the buffer a resume
 * reads into (params, m, v: 3 x 4 bytes a parameter of host memory while
 * it waits), page-locked on a GPU (cudaHostRegister), its pages touched on
 * the CPU: a resume's read then takes no page fault and its copy to the
 * GPU runs at DMA speed (docs/launcher.md#standby-workers---standby).
 * Without the memory the resume allocates as usual. */
static void standby_ck_buf(run_t *r, int device) {
  /* launch --ckpt-dir: LAUNCH_STANDBY_CKPT (LAUNCH_CKPT_DIR comes with the
   * rank) */
  const char *dir = r->o.ckpt_dir ? r->o.ckpt_dir : getenv("LAUNCH_STANDBY_CKPT");
  size_t bytes = 3 * gpt_num_params(&r->cfg) * sizeof(float);
  if (dir == NULL || dir[0] == '\0' || r->ck_buf != NULL ||
      (r->ck_buf = malloc(bytes)) == NULL)
    return;
#ifdef GPT_HAVE_CUDA
  if (device >= 0) {
    if (cudaHostRegister(r->ck_buf, bytes, 0) == cudaSuccess) {
      r->ck_pinned = 1;
      return;
    }
    (void)cudaGetLastError(); /* unpinned: the first save tries again */
  }
#else
  (void)device;
#endif
  memset(r->ck_buf, 0, bytes);
}

static int standby_warm(void *arg, int device, int cc) {
  run_t *r = arg;
  size_t n = (size_t)r->o.batch * (size_t)r->o.seq_len;
  float loss, scale;
  int rc;
  if (create_model(r, device, cc) != EXIT_OK)
    return -EINVAL;
  scale = r->dtype == GPT_FP16 ? r->o.loss_scale : 1.0f;
  memset(r->tok, 0, n * sizeof(int32_t));
  memset(r->tgt, 0, n * sizeof(int32_t));
  for (int k = 0; k < 2; k++)
    if ((rc = r->ops->zero_grad(r->model)) != 0 ||
        (rc = r->ops->forward(r->model, r->tok, r->tgt, &loss)) != 0 ||
        (rc = r->ops->backward(r->model, scale, 1, NULL, NULL)) != 0 ||
        (rc = r->ops->sync(r->model)) != 0) {
      fail_line("the standby's warm-up step failed: %s", rt_strerror(rc));
      return rc;
    }
  standby_ck_buf(r, device);
  return 0;
}

static int setup_model(run_t *r) {
  const opts_t *o = &r->o;
  int rc, nseg;
  if (r->model == NULL &&
      (rc = create_model(r, rt_device(r->rt), rt_device_cc(r->rt))) !=
          EXIT_OK)
    return rc;
  if (r->model_dev != rt_device(r->rt)) {
    fail_line("the standby made the model on device %d, the runtime picked "
              "%d", r->model_dev, rt_device(r->rt));
    return EXIT_FAIL;
  }
  nseg = gpt_num_segments(&r->cfg);
  if (o->zero && (rc = setup_zero(r)) != EXIT_OK)
    return rc;
  /* A resume loads every parameter: no initialisation to throw away. */
  if (!ck_pre_resuming(r) && (rc = init_params(r)) != EXIT_OK)
    return rc;
  for (int i = 0; i < nseg; i++)
    gpt_segment(&r->cfg, i, &r->seg_off[i], &r->seg_count[i]);
  if (r->world > 1) {
    int gdtype = GPT_FP32;
    void *g = r->ops->grad_buffer(r->model, &gdtype);
    rc = rt_grads_register(r->rt, g, gdtype, nseg, r->seg_off, r->seg_count);
    /* ZeRO-1: each bucket reduce-scattered into the shards, overlapped
     * with backward as the all-reduce is */
    if (rc == 0 && o->zero)
      rc = rt_grads_shard(r->rt, r->part);
    if (rc != 0) {
      fail_line("registering the gradients: %s", rt_strerror(rc));
      return EXIT_FAIL;
    }
  }
  r->st.seed = o->seed;
  r->st.loss_scale = r->dtype == GPT_FP16 ? o->loss_scale : 1.0f;
  r->peak = o->peak_tflops > 0 ? o->peak_tflops
            : rt_device(r->rt) >= 0 ? peak_tflops(rt_device_name(r->rt))
                                    : 0;
  return EXIT_OK;
}

/* ---- the settings every rank must share ------------------------------------- */

/* A setting that must be the same on every rank: it fixes the sequence and
 * the sizes of the collectives (the model's shape, the batch, the buckets,
 * the sharding, when validation and saves run, the number of steps) or
 * what data parallelism assumes (one initialisation, one update rule).
 * Ranks that differ would exchange buffers of other sizes (garbage, or a
 * collective that never ends) or train apart. */
enum { AG_INT, AG_FLOAT, AG_DTYPE, AG_HASH };
typedef struct agree_s {
  const char *what;
  int kind;
  uint64_t v; /* the value's bits */
} agree_t;

#define AGREE_MAX 40

static uint64_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

static void agree_print(char *out, size_t cap, const agree_t *a, uint64_t v) {
  static const char *dtypes[] = {"auto", "fp32", "bf16", "fp16"};
  float f;
  uint32_t u = (uint32_t)v;
  if (a->kind == AG_FLOAT) {
    memcpy(&f, &u, sizeof(f));
    snprintf(out, cap, "%.9g", (double)f);
  } else if (a->kind == AG_HASH) {
    snprintf(out, cap, "%016" PRIx64, v);
  } else if (a->kind == AG_DTYPE && (int64_t)v >= -1 && (int64_t)v <= 2) {
    snprintf(out, cap, "%s", dtypes[(int64_t)v + 1]);
  } else {
    snprintf(out, cap, "%" PRId64, (int64_t)v);
  }
}

/* RET the number of settings in a[] (at most AGREE_MAX). */
static int agree_list(const run_t *r, agree_t *a) {
  const opts_t *o = &r->o;
  const char *dir = o->ckpt_dir ? o->ckpt_dir : getenv("LAUNCH_CKPT_DIR");
  const agree_t l[] = {
      {"--layers", AG_INT, (uint64_t)o->layers},
      {"--heads", AG_INT, (uint64_t)o->heads},
      {"--channels", AG_INT, (uint64_t)o->channels},
      {"--seq-len", AG_INT, (uint64_t)o->seq_len},
      {"positions (--preset, --seq-len)", AG_INT, (uint64_t)r->cfg.max_seq_len},
      {"--vocab", AG_INT, (uint64_t)o->vocab},
      {"--batch", AG_INT, (uint64_t)o->batch},
      {"--accum", AG_INT, (uint64_t)o->accum},
      {"--steps", AG_INT, (uint64_t)o->steps},
      {"--zero", AG_INT, (uint64_t)o->zero},
      {"--bucket-mb", AG_FLOAT, float_bits(o->bucket_mb)},
      {"--dtype", AG_DTYPE, (uint64_t)(int64_t)o->dtype},
      {"--val-every", AG_INT, (uint64_t)o->val_every},
      {"--val-batches", AG_INT, (uint64_t)o->val_batches},
      {"training windows (--data, --val-fraction)", AG_INT, r->train_windows},
      {"validation windows (--data, --val-fraction)", AG_INT, r->val_windows},
      {"data hash (of --data's tokens)", AG_HASH,
       gpt_data_hash(r->data)},
      {"a checkpoint directory (1: --ckpt-dir or LAUNCH_CKPT_DIR)", AG_INT,
       (uint64_t)(dir != NULL && dir[0] != '\0')},
      {"--ckpt-every", AG_INT, (uint64_t)o->ckpt_every},
      {"--seed", AG_INT, o->seed},
      {"--lr", AG_FLOAT, float_bits(o->lr)},
      {"--warmup", AG_INT, (uint64_t)o->warmup},
      {"--min-lr-frac", AG_FLOAT, float_bits(o->min_lr_frac)},
      {"--weight-decay", AG_FLOAT, float_bits(o->weight_decay)},
      {"--beta1", AG_FLOAT, float_bits(o->beta1)},
      {"--beta2", AG_FLOAT, float_bits(o->beta2)},
      {"--eps", AG_FLOAT, float_bits(o->eps)},
      {"--clip", AG_FLOAT, float_bits(o->clip)},
      {"--stop-grad-norm", AG_FLOAT, float_bits(o->stop_norm)},
      {"--loss-scale", AG_FLOAT, float_bits(o->loss_scale)},
      {"--loss-scale-window", AG_INT, (uint64_t)o->loss_scale_window},
  };
  _Static_assert(LU_ARRAY_SIZE(l) <= AGREE_MAX, "raise AGREE_MAX");
  memcpy(a, l, sizeof(l));
  return (int)LU_ARRAY_SIZE(l);
}

/* Every rank compares its settings with rank 0's, before the first
 * collective of training: rank 0's travel in an all-reduce of host floats
 * (16 bits a float, zeros from the other ranks: exact on any backend).
 * A rank that differs names each setting and both values; then every rank
 * exits 2. RET an exit code. */
static int check_agree(run_t *r) {
  agree_t a[AGREE_MAX];
  float buf[AGREE_MAX * 4], bad = 0;
  int n = agree_list(r, a), rc;
  if (r->world == 1)
    return EXIT_OK;
  memset(buf, 0, sizeof(buf));
  for (int i = 0; i < n && r->rank == 0; i++)
    for (int k = 0; k < 4; k++)
      buf[i * 4 + k] = (float)((a[i].v >> (16 * k)) & 0xffff);
  if ((rc = rt_allreduce_host(r->rt, buf, (size_t)n * 4)) != 0)
    return runtime_failed("comparing the settings with rank 0's", rc);
  for (int i = 0; i < n; i++) {
    uint64_t v0 = 0;
    char mine[64], theirs[64];
    for (int k = 0; k < 4; k++)
      v0 |= (uint64_t)buf[i * 4 + k] << (16 * k);
    if (v0 == a[i].v)
      continue;
    agree_print(mine, sizeof(mine), &a[i], a[i].v);
    agree_print(theirs, sizeof(theirs), &a[i], v0);
    fail_line("rank %d runs with %s %s, rank 0 with %s %s: every rank must "
              "get the same flags and data", r->rank, a[i].what, mine,
              a[i].what, theirs);
    bad = 1;
  }
  if ((rc = rt_allreduce_host(r->rt, &bad, 1)) != 0)
    return runtime_failed("comparing the settings with rank 0's", rc);
  if (bad > 0 && r->rank == 0)
    fail_line("%.0f of %d ranks run with other settings than rank 0 (their "
              "own lines name them): every rank must get the same flags and "
              "data", (double)bad, r->world);
  return bad > 0 ? EXIT_USAGE : EXIT_OK;
}

static void print_setup(const run_t *r) {
  const opts_t *o = &r->o;
  const gpt_data_info_t *info = gpt_data_info(r->data);
  static const char *dtypes[] = {"fp32", "bf16", "fp16"};
  long long seqs = (long long)o->batch * o->accum * r->world;
  printf("train_gpt: model: %d layers, %d heads, %d channels, vocabulary %d "
         "(padded %d), %d positions: %zu parameters\n", r->cfg.num_layers,
         r->cfg.num_heads, r->cfg.channels, r->cfg.vocab_size,
         r->cfg.padded_vocab, r->cfg.max_seq_len, gpt_num_params(&r->cfg));
  printf("train_gpt: data: %s: %zu tokens (%s); %" PRIu64 " training and %"
         PRIu64 " validation windows of %d\n", gpt_data_name(r->data),
         info->count, info->kind == GPT_DATA_TEXT ? "text, one per byte"
                                                  : "llm.c token file",
         r->train_windows, r->val_windows, o->seq_len);
  if (rt_device(r->rt) < 0)
    printf("train_gpt: device: cpu (%d threads per rank), fp32; %d ranks\n",
           o->threads > 0 ? o->threads : cpu_default_threads(), r->world);
  else
    printf("train_gpt: device: %s (%s backend), %s; %d ranks\n",
           rt_device_name(r->rt), r->ops->name, dtypes[r->dtype], r->world);
  printf("train_gpt: global batch: %d ranks x micro-batch %d x accum %d = "
         "%lld sequences x %d tokens = %lld tokens per step\n", r->world,
         o->batch, o->accum, seqs, o->seq_len, seqs * o->seq_len);
  printf("train_gpt: %d steps, lr %.3g (warmup %d, cosine to %.3g), weight "
         "decay %g, clip %g, seed %" PRIu64 "\n", o->steps, (double)o->lr,
         o->warmup, (double)(o->lr * o->min_lr_frac), (double)o->weight_decay,
         (double)o->clip, r->st.seed);
  {
    size_t n = gpt_num_params(&r->cfg);
    size_t mine = r->part ? r->part[1] - r->part[0] : n;
    if (o->zero)
      printf("train_gpt: AdamW state: %.2f MiB on rank 0 (--zero 1: a shard "
             "of %zu of %zu parameters per rank)\n",
             (double)mine * 8.0 / 1048576.0, mine, n);
    else
      printf("train_gpt: AdamW state: %.2f MiB per rank (--zero 0: all %zu "
             "parameters on every rank)\n", (double)n * 8.0 / 1048576.0, n);
  }
  if (r->val_windows == 0)
    printf("train_gpt: validation: off (the data leaves fewer than %d tokens "
           "for it)\n", o->seq_len + 1);
  fflush(stdout);
}

static void run_free(run_t *r) {
  tb_close(r->tb);
  if (r->dump)
    fclose(r->dump);
  ck_pre_free(r->pre);
  ckpt_close(r->ck); /* waits for the save in flight */
  rdzv_close(r->ck_store);
#ifdef GPT_HAVE_CUDA
  if (r->ck_pinned > 0)
    cudaHostUnregister(r->ck_buf);
#endif
  free(r->ck_buf);
  if (r->model)
    r->ops->destroy(r->model);
  rt_finalize(r->rt);
  gpt_data_close(r->data);
  free(r->params);
  free(r->tok);
  free(r->tgt);
  free(r->seg_off);
  free(r->seg_count);
  free(r->part);
  free(r->bpart);
  free(r->norm_parts);
#ifdef GPT_HAVE_CUDA
  if (r->norm_stage)
    cudaFree(r->norm_stage);
#endif
}

/* ---- checkpoints ------------------------------------------------------------- */

static void ckpt_header(const run_t *r, ckpt_header_t *h) {
  memset(h, 0, sizeof(*h));
  memcpy(h->magic, "TGPTCK2", 8);
  h->layers = r->cfg.num_layers;
  h->heads = r->cfg.num_heads;
  h->channels = r->cfg.channels;
  h->max_seq = r->cfg.max_seq_len;
  h->vocab = r->cfg.vocab_size;
  h->padded_vocab = r->cfg.padded_vocab;
  h->seq_len = r->o.seq_len;
  h->batch = r->o.batch;
  h->accum = r->o.accum;
  h->steps = r->o.steps;
  h->world = r->world;
  h->zero = r->o.zero;
  h->params = gpt_num_params(&r->cfg);
  h->st = r->st;
}

/* The first parameter of this rank's AdamW shard (0 without --zero). */
static size_t shard_lo(const run_t *r) {
  return r->part ? r->part[r->rank] : 0;
}

/* The shard: the header, then parameters, AdamW m and v. */
static void ckpt_iov(run_t *r, ckpt_header_t *h, struct iovec iov[4]) {
  size_t n = gpt_num_params(&r->cfg);
  iov[0].iov_base = h;
  iov[0].iov_len = sizeof(*h);
  for (int i = 0; i < 3; i++) {
    iov[1 + i].iov_base = r->ck_buf + (size_t)i * n;
    iov[1 + i].iov_len = n * sizeof(float);
  }
}

/* Open the checkpoint directory (--ckpt-dir, else launch's
 * LAUNCH_CKPT_DIR) and resume from the step launch agreed on
 * (LAUNCH_RESUME_STEP): the shard read by ck_pre_start's thread, joined
 * here, or read now when none ran. RET an exit code. */
static int ckpt_setup(run_t *r) {
  const char *dir = r->o.ckpt_dir ? r->o.ckpt_dir : getenv("LAUNCH_CKPT_DIR");
  ckpt_options_t co = CKPT_OPTIONS_INIT;
  size_t n = gpt_num_params(&r->cfg);
  ckpt_header_t h, want;
  struct iovec iov[4];
  uint64_t size = 0;
  int64_t step = -1;
  double t0 = now_s(), read_ms = 0, t_set;
  ck_pre_t *p = r->pre;
  int rc, standby_buf, have = 0; /* have: the state read by the thread */
  if (dir == NULL || dir[0] == '\0') {
    if (r->o.ckpt_every > 0) {
      fail_line("--ckpt-every needs a directory: pass --ckpt-dir D, or run "
                "under launch --ckpt-dir D");
      return EXIT_USAGE;
    }
    return EXIT_OK;
  }
  if (p) {
    /* the read started before the runtime: its failures first, worded as
     * below */
    ck_pre_join(p, 1);
    if (p->rc != 0) {
      if (p->stage == PRE_OPEN)
        fail_line("checkpoint directory %s: %s", dir, ckpt_strerror(p->rc));
      else if (p->stage == PRE_STEP)
        fail_line("finding the step to resume from in %s: %s", dir,
                  ckpt_strerror(p->rc));
      else if (p->stage == PRE_SIZE)
        fail_line("checkpoint step %" PRId64 " in %s: %s", p->step, dir,
                  ckpt_strerror(p->rc));
      else
        fail_line("loading checkpoint step %" PRId64 " from %s: %s", p->step,
                  dir, ckpt_strerror(p->rc));
      return EXIT_FAIL;
    }
    step = p->step;
    size = p->size;
  }
  co.dir = dir;
  co.rank = r->rank;
  co.world_size = r->world;
  co.replicated = 1; /* data parallel: every rank holds the same state */
  if (r->world > 1) {
    /* Commits go through the store, on a connection of the save's own. */
    if ((rc = rdzv_connect_from_env(&r->ck_store)) != 0) {
      fail_line("checkpoints: cannot reach launch's store: %s",
                rdzv_strerror(rc));
      return EXIT_FAIL;
    }
    co.client = r->ck_store;
  }
  if ((rc = ckpt_open(&co, &r->ck)) != 0) {
    fail_line("checkpoint directory %s: %s", dir, ckpt_strerror(rc));
    return EXIT_FAIL;
  }
  /* Not page-locked yet (but a standby's): that waits for the first save
   * (ckpt_step). */
  standby_buf = p && p->buf && p->buf == p->into;
  if (p && p->buf) {
    r->ck_buf = p->buf; /* the shard's state, read */
    p->buf = NULL;
    h = p->h;
    read_ms = p->ms;
    have = 1;
  } else if (r->ck_buf == NULL &&
             (r->ck_buf = malloc(3 * n * sizeof(float))) == NULL) {
    fail_line("out of memory for the checkpoint buffers (%zu parameters)", n);
    return EXIT_FAIL;
  }
  if (p == NULL && (rc = ckpt_resume_step(r->ck, &step)) != 0) {
    fail_line("finding the step to resume from in %s: %s", dir,
              ckpt_strerror(rc));
    return EXIT_FAIL;
  }
  if (step < 0)
    return r->inited ? EXIT_OK : init_params(r);
  ckpt_header(r, &want);
  ckpt_iov(r, &h, iov);
  if ((p == NULL && (rc = ckpt_shard_size(r->ck, step, &size)) != 0) ||
      size != sizeof(h) + 3 * n * sizeof(float)) {
    fail_line("checkpoint step %" PRId64 " in %s: %s", step, dir,
              rc ? ckpt_strerror(rc)
                 : "its shard is not of this model (another size): pass "
                   "the model flags it was saved with, or another --ckpt-dir");
    return rc ? EXIT_FAIL : EXIT_USAGE;
  }
  if (!have) {
    if ((rc = ckpt_load(r->ck, step, iov, 4)) != 0) {
      fail_line("loading checkpoint step %" PRId64 " from %s: %s", step, dir,
                ckpt_strerror(rc));
      return EXIT_FAIL;
    }
    read_ms = (now_s() - t0) * 1e3;
  }
  /* TGPTCK1 counted micro-batches of the --batch it was saved with */
  if (memcmp(h.magic, "TGPTCK1", 8) == 0) {
    h.st.window *= (uint64_t)(h.batch > 0 ? h.batch : 0);
    memcpy(h.magic, want.magic, 8);
  }
  if (memcmp(h.magic, want.magic, 8) != 0 || h.layers != want.layers ||
      h.heads != want.heads || h.channels != want.channels ||
      h.max_seq != want.max_seq || h.vocab != want.vocab ||
      h.params != want.params || h.seq_len != want.seq_len) {
    fail_line("checkpoint step %" PRId64 " in %s is of another model (%d "
              "layers, %d heads, %d channels, vocabulary %d, sequence %d): "
              "pass the flags it was saved with, or another --ckpt-dir",
              step, dir, h.layers, h.heads, h.channels, h.vocab, h.seq_len);
    return EXIT_USAGE;
  }
  if (r->rank == 0 && (h.batch != want.batch || h.accum != want.accum ||
                       h.steps != want.steps || h.world != want.world))
    fprintf(stderr, "train_gpt: warning: checkpoint step %" PRId64 " was "
            "saved with --batch %d --accum %d --steps %d by %d ranks; this "
            "run continues it with --batch %d --accum %d --steps %d on %d, "
            "from window %" PRIu64 " of the training data (the steps count "
            "on, of the new size)\n", step, h.batch, h.accum, h.steps, h.world,
            want.batch, want.accum, want.steps, want.world, h.st.window);
  if (r->rank == 0 && (h.world != want.world || h.zero != want.zero))
    printf("train_gpt: checkpoint step %" PRId64 " was saved by %d ranks "
           "with --zero %d; the AdamW state is re-sharded for %d ranks with "
           "--zero %d\n", step, h.world, h.zero, want.world, want.zero);
  /* the file holds whole moments: a shard takes its slice */
  t_set = now_s();
  if ((rc = r->ops->set_state(r->model, r->ck_buf, r->ck_buf + n + shard_lo(r),
                              r->ck_buf + 2 * n + shard_lo(r))) != 0)
    return runtime_failed("set_state", rc);
  t_set = now_s() - t_set;
  r->inited = 1;
  r->st = h.st;
  /* the seed drew the data order the position counts in: it stays */
  if (r->rank == 0 && h.st.seed != r->o.seed)
    fprintf(stderr, "train_gpt: warning: checkpoint step %" PRId64 " was "
            "saved with --seed %" PRIu64 "; this run goes on with it, not "
            "--seed %" PRIu64 " (the seed is part of the data order's state)\n",
            step, h.st.seed, r->o.seed);
  if (r->rank == 0) {
    int agents = ckpt_verified_by_launch(step); /* then not hashed here */
    /* where a resume's time goes: the read (into the standby's buffer,
     * page-locked on a GPU, or memory of its own) and the copy into the
     * model */
    printf("train_gpt: resumed from step %" PRId64 " of %s (%.1f MiB read "
           "in %.0f ms%s%s, into the model in %.0f ms, %s)\n", step, dir,
           (double)size / 1048576.0, read_ms, p ? " beside the start-up" : "",
           !standby_buf      ? ""
           : r->ck_pinned > 0 ? " into the standby's page-locked buffer"
                              : " into the standby's buffer",
           t_set * 1e3,
           agents ? "checksums verified by launch's agents"
                  : "checksums verified");
    fflush(stdout);
  }
  return EXIT_OK;
}

/* Every --ckpt-every steps and at the last step: copy the state out of
 * the model and write it in the background (the trained weights belong in
 * the checkpoint directory too). RET an exit code. */
static int ckpt_step(run_t *r) {
  size_t n = gpt_num_params(&r->cfg);
  struct iovec iov[4];
  int rc;
  if (r->ck == NULL || r->o.ckpt_every <= 0 ||
      (r->st.step % r->o.ckpt_every != 0 && r->st.step != r->o.steps))
    return EXIT_OK;
  /* The buffers are the previous save's until it is done. */
  if ((rc = ckpt_wait(r->ck, -1)) != 0) {
    fail_line("saving a checkpoint to %s failed: %s", ckpt_dir(r->ck),
              ckpt_strerror(rc));
    return EXIT_FAIL;
  }
#ifdef GPT_HAVE_CUDA
  /* Page-locked at the first save, not at start-up (a resume's time): the
   * copy out of device memory is then the save's only stall. On this
   * thread, between steps: never beside a stream capture. */
  if (r->ck_pinned == 0 && rt_device(r->rt) >= 0) {
    r->ck_pinned = 1;
    if (cudaHostRegister(r->ck_buf, 3 * n * sizeof(float), 0) != cudaSuccess) {
      (void)cudaGetLastError(); /* saves work unpinned, only slower */
      r->ck_pinned = -1;
    }
  }
#endif
  if ((rc = r->ops->get_state(r->model, r->ck_buf, r->ck_buf + n + shard_lo(r),
                              r->ck_buf + 2 * n + shard_lo(r))) != 0)
    return runtime_failed("get_state", rc);
  /* ZeRO-1 gathers the moments: the file is the one --zero 0 writes, so
   * any rank count, sharded or not, resumes from it */
  if (r->part) {
    /* on NCCL through the gradient's device buffer, free between steps */
    void *stage = r->ops->grad_buffer(r->model, NULL);
    if ((rc = gather_host(r, r->ck_buf + n, r->part, sizeof(float),
                          stage)) != 0 ||
        (rc = gather_host(r, r->ck_buf + 2 * n, r->part, sizeof(float),
                          stage)) != 0)
      return runtime_failed("gathering the AdamW state", rc);
  }
  ckpt_header(r, &r->ck_head);
  ckpt_iov(r, &r->ck_head, iov);
  if ((rc = ckpt_save_async(r->ck, r->st.step, iov, 4)) != 0) {
    fail_line("saving checkpoint step %" PRId64 " to %s: %s", r->st.step,
              ckpt_dir(r->ck), ckpt_strerror(rc));
    return EXIT_FAIL;
  }
  return EXIT_OK;
}

/* ---- training ---------------------------------------------------------------- */

/* Linear warmup to lr, then a cosine down to min_lr_frac x lr at the end. */
static float learning_rate(const opts_t *o, int64_t step) {
  double lo = (double)o->lr * o->min_lr_frac, frac;
  if (step <= o->warmup)
    return o->lr * (float)step / (float)(o->warmup + 1);
  if (o->steps <= o->warmup)
    return o->lr;
  frac = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
  return (float)(lo + 0.5 * ((double)o->lr - lo) * (1.0 + cos(M_PI * frac)));
}

/* A micro-batch: windows w .. w + B-1 of the training stream. The
 * position is kept in windows, not micro-batches, so that a resume with
 * another --batch, --accum or rank count goes on at the next window. */
static void train_batch(run_t *r, uint64_t w) {
  size_t T = (size_t)r->o.seq_len;
  for (int b = 0; b < r->o.batch; b++)
    gpt_data_train_sample(r->data, w + (uint64_t)b, r->st.seed,
                          r->tok + (size_t)b * T, r->tgt + (size_t)b * T);
}

/* The mean loss of val_batches micro-batches, spread over the ranks. */
static int validate(run_t *r, float *out) {
  float acc[2] = {0, 0};
  size_t T = (size_t)r->o.seq_len;
  int rc;
  for (int i = r->rank; i < r->o.val_batches; i += r->world) {
    float loss = 0;
    for (int b = 0; b < r->o.batch; b++)
      gpt_data_val_sample(r->data, (uint64_t)i * (uint64_t)r->o.batch + (uint64_t)b,
                          r->tok + (size_t)b * T, r->tgt + (size_t)b * T);
    if ((rc = r->ops->forward(r->model, r->tok, r->tgt, &loss)) != 0)
      return rc;
    acc[0] += loss;
    acc[1] += 1.0f;
  }
  if ((rc = rt_allreduce_host(r->rt, acc, 2)) != 0)
    return rc;
  *out = acc[0] / acc[1];
  return 0;
}

static int runtime_failed(const char *what, int rc) {
  fail_line("%s failed: %s", what, rt_strerror(rc));
  return EXIT_FAIL;
}

/* ZeRO-1's gradient norm: each rank sums the squares of its shard's
 * blocks, the blocks' sums are gathered and added in block order, as
 * grad_norm adds them: bitwise grad_norm's result. RET 0 or a code. */
static int zero_grad_norm(run_t *r, float scale, float *norm) {
  size_t b0 = r->bpart[r->rank], b1 = r->bpart[r->rank + 1];
  double total = 0.0;
  int rc = r->ops->grad_sumsq(r->model, b0, b1, r->norm_parts + b0);
  if (rc != 0 || (rc = gather_host(r, r->norm_parts, r->bpart,
                                   sizeof(double), r->norm_stage)) != 0)
    return rc;
  for (size_t i = 0; i < r->nblocks; i++)
    total += r->norm_parts[i];
  *norm = (float)(sqrt(total) * (double)scale);
  return 0;
}

/* One step. OUT *loss, *norm, *skipped. RET an exit code. */
static int train_step(run_t *r, float lr, float *loss, float *norm,
                      int *skipped) {
  const opts_t *o = &r->o;
  float lsum = 0, denom = (float)o->accum * (float)r->world;
  int rc;
  gpt_adamw_t a;
  *skipped = 0;
  if ((rc = r->ops->zero_grad(r->model)) != 0)
    return runtime_failed("zero_grad", rc);
  for (int k = 0; k < o->accum; k++) {
    float l = 0;
    int last = k == o->accum - 1;
    train_batch(r, r->st.window + ((uint64_t)k * (uint64_t)r->world +
                                   (uint64_t)r->rank) * (uint64_t)o->batch);
    if ((rc = r->ops->forward(r->model, r->tok, r->tgt, &l)) != 0)
      return runtime_failed("forward", rc);
    lsum += l;
    rc = r->ops->backward(r->model, r->st.loss_scale, last,
                          r->world > 1 ? rt_grads_ready : NULL, r->rt);
    if (rc != 0)
      return runtime_failed("backward", rc);
  }
  if (r->world > 1 && (rc = rt_grads_wait(r->rt)) != 0)
    return runtime_failed(o->zero ? "the gradient reduce-scatter"
                                  : "the gradient all-reduce", rc);
  if ((rc = rt_allreduce_host(r->rt, &lsum, 1)) != 0)
    return runtime_failed("the loss all-reduce", rc);
  r->st.window += (uint64_t)o->accum * (uint64_t)r->world * (uint64_t)o->batch;
  *loss = lsum / denom;
  if (o->zero)
    rc = zero_grad_norm(r, 1.0f / (denom * r->st.loss_scale), norm);
  else
    rc = r->ops->grad_norm(r->model, 1.0f / (denom * r->st.loss_scale), norm);
  if (rc != 0)
    return runtime_failed("grad_norm", rc);
  if (!isfinite(*loss)) {
    fail_line("the loss is %g at step %" PRId64 ": training diverged; lower "
              "--lr or check the data (docs/runtime.md)", (double)*loss,
              r->st.step + 1);
    return EXIT_DIVERGED;
  }
  if (!isfinite(*norm)) {
    if (r->dtype != GPT_FP16) {
      fail_line("the gradient norm is %g at step %" PRId64 ": training "
                "diverged; lower --lr (docs/runtime.md)", (double)*norm,
                r->st.step + 1);
      return EXIT_DIVERGED;
    }
    /* fp16 overflow: skip the update, halve the scale */
    *skipped = 1;
    r->st.loss_scale /= 2;
    r->st.good_steps = 0;
    if (r->st.loss_scale < 1.0f) {
      fail_line("fp16 gradients overflow even with a loss scale of 1 at step "
                "%" PRId64 ": training diverged; use --dtype bf16 or a lower "
                "--lr", r->st.step + 1);
      return EXIT_DIVERGED;
    }
    return EXIT_OK;
  }
  if (o->stop_norm > 0 && *norm > o->stop_norm) {
    fail_line("the gradient norm %g exceeds --stop-grad-norm %g at step %"
              PRId64 ": training diverged; lower --lr or raise the limit",
              (double)*norm, (double)o->stop_norm, r->st.step + 1);
    return EXIT_DIVERGED;
  }
  memset(&a, 0, sizeof(a));
  a.lr = lr;
  a.beta1 = o->beta1;
  a.beta2 = o->beta2;
  a.eps = o->eps;
  a.weight_decay = o->weight_decay;
  a.grad_scale = 1.0f / (denom * r->st.loss_scale);
  if (o->clip > 0 && *norm > o->clip)
    a.grad_scale *= o->clip / *norm;
  a.t = (int)++r->st.adam_step;
  if ((rc = r->ops->adamw(r->model, &a)) != 0)
    return runtime_failed("adamw", rc);
  /* ZeRO-1: each rank updated its shard; every rank gets all of them (on
   * a GPU, NCCL's stream after the update's: the backend's stream done) */
  if (o->zero && r->world > 1 &&
      ((rc = r->ops->sync(r->model)) != 0 ||
       (rc = rt_allgather(r->rt, r->ops->param_buffer(r->model), r->part,
                          sizeof(float))) != 0))
    return runtime_failed("the parameter all-gather", rc);
  if (r->dtype == GPT_FP16 && ++r->st.good_steps >= o->loss_scale_window) {
    r->st.loss_scale *= 2;
    r->st.good_steps = 0;
  }
  return EXIT_OK;
}

/* --dump-params: rank 0 opens (creates) the file before training, so that
 * a path it cannot write fails the start, not the end of the run; it is
 * not truncated until the parameters are written. RET an exit code. */
static int dump_open(run_t *r) {
  int fd;
  if (r->o.dump_params == NULL || r->rank != 0)
    return EXIT_OK;
  fd = open(r->o.dump_params, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0 || (r->dump = fdopen(fd, "wb")) == NULL) {
    fail_line("--dump-params %s: %s", r->o.dump_params, strerror(errno));
    if (fd >= 0)
      close(fd);
    return EXIT_USAGE;
  }
  return EXIT_OK;
}

static int dump_params(run_t *r) {
  size_t n = gpt_num_params(&r->cfg);
  FILE *f = r->dump;
  int rc = r->ops->get_state(r->model, r->params, NULL, NULL);
  if (rc != 0)
    return runtime_failed("get_state", rc);
  r->dump = NULL;
  /* EINVAL: not a regular file (/dev/null, a FIFO): nothing to cut */
  rc = (ftruncate(fileno(f), 0) != 0 && errno != EINVAL) ||
       fwrite(r->params, sizeof(float), n, f) != n;
  if (fclose(f) != 0 || rc) {
    fail_line("writing --dump-params %s: %s", r->o.dump_params, strerror(errno));
    return EXIT_FAIL;
  }
  return EXIT_OK;
}

/* VmHWM of /proc/self/status in KiB (0 when unknown). */
static long peak_rss_kib(void) {
  char line[256];
  long kib = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld", &kib) == 1)
      break;
  fclose(f);
  return kib;
}

static int train(run_t *r) {
  const opts_t *o = &r->o;
  double tokens = (double)o->batch * o->seq_len * o->accum * r->world;
  double flops = gpt_flops_per_token(&r->cfg, o->seq_len), t_sum = 0;
  float loss = NAN, val = NAN;
  int rc, timed = 0;
  while (r->st.step < o->steps) {
    float lr = learning_rate(o, r->st.step + 1), norm = 0;
    int skipped = 0;
    double t0 = now_s(), dt;
    if ((rc = train_step(r, lr, &loss, &norm, &skipped)) != EXIT_OK)
      return rc;
    if ((rc = r->ops->sync(r->model)) != 0)
      return runtime_failed("sync", rc);
    dt = now_s() - t0;
    r->st.step++;
    if (r->st.step > 1) { /* the first step warms caches and allocators */
      t_sum += dt;
      timed++;
    }
    if (r->rank == 0 && (r->st.step % o->log_every == 0 || r->st.step == 1 ||
                         r->st.step == o->steps)) {
      printf("step %5" PRId64 "/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms "
             "| %.0f tok/s", r->st.step, o->steps, (double)loss, (double)norm,
             (double)lr, dt * 1e3, tokens / dt);
      if (rt_device(r->rt) >= 0) {
        if (r->peak > 0)
          printf(" | mfu %.1f%%", 100.0 * flops * tokens / dt /
                                      (r->peak * 1e12 * r->world));
        else
          printf(" | mfu n/a");
      }
      if (skipped)
        printf(" | skipped (fp16 overflow, loss scale now %g)",
               (double)r->st.loss_scale);
      printf("\n");
      fflush(stdout);
    }
    {
      /* Every scalar the agent shows (metrics, events, launch status). */
      rdzv_scalars_t sc = {RDZV_HAS_LOSS | RDZV_HAS_GRAD_NORM | RDZV_HAS_LR |
                               RDZV_HAS_STEP_TIME | RDZV_HAS_TOKENS |
                               RDZV_HAS_TOTAL_STEPS,
                           (double)loss, (double)norm, (double)lr, dt,
                           (int64_t)tokens, o->steps, 0};
      if ((rc = rt_progress_ex(r->rt, r->st.step, &sc)) != 0)
        return runtime_failed("the progress report", rc);
    }
    if (r->tb) {
      /* The step's scalars; after a resume the curve goes on at the
       * resumed step (TensorBoard drops the abandoned steps after it). */
      int w = tb_scalar(r->tb, "loss", r->st.step, loss);
      w = w ? w : tb_scalar(r->tb, "lr", r->st.step, lr);
      w = w ? w : tb_scalar(r->tb, "grad_norm", r->st.step, norm);
      w = w ? w : tb_scalar(r->tb, "tokens_per_s", r->st.step, tokens / dt);
      if (w == 0 && rt_device(r->rt) >= 0 && r->peak > 0)
        w = tb_scalar(r->tb, "mfu", r->st.step, flops * tokens / dt /
                                                   (r->peak * 1e12 * r->world));
      if (w == 0 && (r->st.step % o->log_every == 0 || r->st.step == o->steps))
        w = tb_flush(r->tb);
      if (w != 0) {
        fail_line("writing the TensorBoard events in %s: %s", o->tb_dir,
                  strerror(-w));
        return EXIT_FAIL;
      }
    }
    if ((rc = ckpt_step(r)) != EXIT_OK)
      return rc;
    if (r->val_windows > 0 &&
        ((o->val_every > 0 && r->st.step % o->val_every == 0) ||
         r->st.step == o->steps)) {
      if ((rc = validate(r, &val)) != 0)
        return runtime_failed("validation", rc);
      if (r->rank == 0) {
        printf("val   %5" PRId64 "/%d | loss %.6f\n", r->st.step, o->steps,
               (double)val);
        fflush(stdout);
        if (r->tb && (tb_scalar(r->tb, "val_loss", r->st.step, val) != 0 ||
                      tb_flush(r->tb) != 0))
          fail_line("writing the TensorBoard events in %s failed", o->tb_dir);
      }
    }
  }
  if (r->rank == 0) {
    printf("train_gpt: final: step %" PRId64 " loss %.6f val %.6f", r->st.step,
           (double)loss, (double)val);
    if (timed > 0)
      printf(" | %.2f ms/step, %.0f tok/s (steps 2..%" PRId64 ")",
             t_sum / timed * 1e3, tokens * timed / t_sum, r->st.step);
    printf("\n");
    printf("train_gpt: peak memory of rank 0: %.1f MiB resident\n",
           (double)peak_rss_kib() / 1024.0);
    fflush(stdout);
    if (r->dump && (rc = dump_params(r)) != EXIT_OK)
      return rc;
  }
  return EXIT_OK;
}

int main(int argc, char **argv) {
  run_t r;
  rt_options_t ro = RT_OPTIONS_INIT;
  double t[4] = {0, 0, 0, 0};
  int rc;
  memset(&r, 0, sizeof(r));
  if ((rc = parse_flags(argc, argv, &r.o)) != 0) {
    if (rc > 0)
      usage(stdout);
    return rc > 0 ? EXIT_OK : EXIT_USAGE;
  }
#ifndef GPT_HAVE_CUDA
  if (r.o.device == RT_DEVICE_CUDA) {
    fail_line("--device cuda: this train_gpt was built without CUDA "
              "(docs/runtime.md says how to build with it)");
    return EXIT_USAGE;
  }
  r.o.device = RT_DEVICE_CPU;
#endif
  t[0] = now_s();
  if ((rc = setup_data(&r)) != EXIT_OK) {
    run_free(&r);
    return rc;
  }
  if ((rc = model_config(&r)) != EXIT_OK) {
    run_free(&r);
    return rc;
  }
  ro.device = r.o.device;
  /* launch --standby: the model is made here, then this process waits to
   * take a rank; its start-up time counts from then */
  if ((rc = rt_standby_wait(&ro, standby_warm, &r)) < 0) {
    run_free(&r);
    return rc == -EPIPE ? EXIT_OK : EXIT_FAIL;
  }
  if (rc == 1)
    t[0] = now_s();
  /* a resume's shard is read while the runtime and the model start */
  ck_pre_start(&r);
  t[1] = now_s();
  ro.bucket_bytes = (size_t)((double)r.o.bucket_mb * 1048576.0);
  if ((rc = rt_init(&ro, &r.rt)) != 0) {
    /* the runtime said why */
    run_free(&r);
    return EXIT_FAIL;
  }
  r.rank = rt_rank(r.rt);
  r.world = rt_world_size(r.rt);
  if (r.pre && (r.pre->rank != r.rank || r.pre->world != r.world)) {
    ck_pre_free(r.pre); /* another shard: ckpt_setup reads the right one */
    r.pre = NULL;
  }
  t[2] = now_s();
  if ((rc = dump_open(&r)) == EXIT_OK && (rc = check_agree(&r)) == EXIT_OK &&
      (rc = setup_model(&r)) == EXIT_OK &&
      (t[3] = now_s(),
      rc = ckpt_setup(&r)) == EXIT_OK) {
    if (r.rank == 0) {
      /* where a (re)start's time goes, before the first step */
      printf("train_gpt: ready in %.0f ms (data %.0f, runtime %.0f, model "
             "%.0f, checkpoint %.0f)\n", (now_s() - t[0]) * 1e3,
             (t[1] - t[0]) * 1e3, (t[2] - t[1]) * 1e3, (t[3] - t[2]) * 1e3,
             (now_s() - t[3]) * 1e3);
      print_setup(&r);
    }
    if (r.rank == 0 && r.o.tb_dir &&
        (rc = tb_open(r.o.tb_dir, &r.tb)) != 0) {
      fail_line("--tb-dir %s: %s", r.o.tb_dir,
                rc == -ENOTSUP ? "this train_gpt was built without protobuf-c"
                               : strerror(-rc));
      run_free(&r);
      return EXIT_USAGE;
    }
    rc = train(&r);
  }
  run_free(&r);
  return rc;
}
