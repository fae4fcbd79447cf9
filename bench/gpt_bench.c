/* gpt_bench - times the CUDA backend of train_gpt through gpt.h: one
 * training step = zero_grad, forward (with the loss back on the host),
 * backward, grad_norm (for clipping), AdamW, as the trainer runs them.
 * Random tokens; gpt2-124m (L12 H12 C768, V 50257 padded to 50304) by
 * default. Prints tokens/s, ms/step (median), MFU against a peak in
 * TFLOPS, the device memory the backend holds and what the device reports
 * in use, then (--profile N) the time per kernel class over N more steps
 * measured with CUDA events (profiled steps run without CUDA graphs). The
 * forward and backward replay CUDA graphs after the first warm-up step
 * unless GPT_CUDA_GRAPH=0; the graph counts are printed. The last line is
 * machine-readable (RESULT ..., graph=1 when the timed steps replayed
 * graphs) for bench/run_gpt_bench.sh and bench/gpt_graph_ab.sh. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt.h"
#include "gpt_cuda.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: gpt_bench [--layers L] [--heads H] [--channels C] [--vocab V]\n"
          "                 [--batch B] [--seq-len T] [--dtype bf16|fp16|fp32]\n"
          "                 [--accum K] [--steps N] [--warmup N] [--profile N]\n"
          "                 [--peak-tflops X]\n"
          "defaults: gpt2-124m, batch 16, seq-len 1024, bf16, accum 1, 20 steps after 5\n"
          "warm-ups, profile 5 steps, peak 989 (H100/H200 dense bf16)\n"
          "environment: GPT_CUDA_GRAPH=0 launches every kernel eagerly (no CUDA graphs)\n");
}

int main(int argc, char **argv) {
  gpt_config_t c = {1024, 50257, 50304, 12, 12, 768};
  int B = 16, T = 1024, K = 1, dtype = GPT_BF16, steps = 20, warmup = 5, prof = 5;
  double peak = 989.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      usage();
      return 0;
    }
    if (!v) {
      usage();
      return 2;
    }
    i++;
    if (!strcmp(a, "--layers"))
      c.num_layers = atoi(v);
    else if (!strcmp(a, "--heads"))
      c.num_heads = atoi(v);
    else if (!strcmp(a, "--channels"))
      c.channels = atoi(v);
    else if (!strcmp(a, "--vocab")) {
      c.vocab_size = atoi(v);
      c.padded_vocab = (c.vocab_size + 127) / 128 * 128;
    } else if (!strcmp(a, "--batch"))
      B = atoi(v);
    else if (!strcmp(a, "--accum"))
      K = atoi(v);
    else if (!strcmp(a, "--seq-len"))
      T = atoi(v);
    else if (!strcmp(a, "--steps"))
      steps = atoi(v);
    else if (!strcmp(a, "--warmup"))
      warmup = atoi(v);
    else if (!strcmp(a, "--profile"))
      prof = atoi(v);
    else if (!strcmp(a, "--peak-tflops"))
      peak = atof(v);
    else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "bf16"))
        dtype = GPT_BF16;
      else if (!strcmp(v, "fp16"))
        dtype = GPT_FP16;
      else if (!strcmp(v, "fp32"))
        dtype = GPT_FP32;
      else {
        fprintf(stderr, "gpt_bench: --dtype must be bf16, fp16 or fp32\n");
        return 2;
      }
    } else {
      fprintf(stderr, "gpt_bench: unknown option %s (--help lists them)\n", a);
      return 2;
    }
  }
  if (steps < 1 || B < 1 || K < 1 || T < 1 || T > c.max_seq_len) {
    fprintf(stderr, "gpt_bench: need --steps, --batch, --accum >= 1 and 1 <= --seq-len <= %d\n",
            c.max_seq_len);
    return 2;
  }
  const gpt_backend_ops_t *ops = &gpt_cuda_ops;
  const size_t np = gpt_num_params(&c);
  const int N = B * T;
  float *params = malloc(np * sizeof(float));
  int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
  double *times = malloc((size_t)steps * sizeof(double));
  if (!params || !tok || !tgt || !times) {
    fprintf(stderr, "gpt_bench: out of memory\n");
    return 1;
  }
  gpt_init_params(&c, 1337, params);
  uint64_t s = 88172645463325252ULL;
  for (int i = 0; i < N; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    tok[i] = (int32_t)(s % (uint64_t)c.vocab_size);
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    tgt[i] = (int32_t)(s % (uint64_t)c.vocab_size);
  }
  size_t free0 = 0, total = 0;
  cudaSetDevice(0);
  cudaFree(0); /* context first, so that "in use" below is the backend's */
  cudaMemGetInfo(&free0, &total);
  gpt_backend_t *m = NULL;
  if (ops->create(&c, B, T, dtype, 0, 0, &m) < 0 || ops->set_state(m, params, NULL, NULL) < 0) {
    fprintf(stderr, "gpt_bench: the CUDA backend could not start (above)\n");
    return 1;
  }
  char desc[400];
  printf("gpt_bench: L%d H%d C%d V%d (padded %d), %zu parameters, B%d T%d, accum %d\n",
         c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab, np, B, T, K);
  printf("backend: %s\n", gpt_cuda_describe(m, desc, sizeof(desc)));

  float loss = 0, norm = 0;
  int t = 0;
#define STEP()                                                                           \
  do {                                                                                   \
    t++;                                                                                 \
    int bad_ = ops->zero_grad(m) < 0;                                                    \
    for (int k_ = 0; k_ < K && !bad_; k_++)                                              \
      bad_ = ops->forward(m, tok, tgt, &loss) < 0 ||                                     \
             ops->backward(m, 1.f, k_ == K - 1, NULL, NULL) < 0;                         \
    if (bad_ || ops->grad_norm(m, 1.f / K, &norm) < 0) {                                 \
      fprintf(stderr, "gpt_bench: step %d failed (above)\n", t);                         \
      return 1;                                                                          \
    }                                                                                    \
    gpt_adamw_t a_ = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.f ? 1.f / norm : 1.f, t}; \
    if (ops->adamw(m, &a_) < 0 || ops->sync(m) < 0) {                                    \
      fprintf(stderr, "gpt_bench: step %d failed (above)\n", t);                         \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

  for (int i = 0; i < warmup; i++)
    STEP();
  for (int i = 0; i < steps; i++) {
    double t0 = now_ms();
    STEP();
    times[i] = now_ms() - t0;
    if (i == 0 || i == steps - 1)
      printf("step %d: loss %.4f, grad norm %.3f, %.2f ms\n", t, loss, norm, times[i]);
  }
  gpt_cuda_graph_stats_t gs;
  const int gstate = gpt_cuda_graph_stats(m, &gs);
  /* all but the first step's forward and backward replayed */
  const int graphed = gstate > 0 && gs.launches > 0 && gs.eager_forwards <= 1 &&
                      gs.eager_backwards <= 1;
  printf("CUDA graphs: %s, %ld captures, %ld launches, %ld eager forwards, %ld eager "
         "backwards (warm-up and timed steps)\n",
         gstate > 0 ? "on" : gstate < 0 ? "given up (see above)" : "off", gs.captures,
         gs.launches, gs.eager_forwards, gs.eager_backwards);
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total);
  double sum = 0;
  for (int i = 0; i < steps; i++)
    sum += times[i];
  qsort(times, (size_t)steps, sizeof(double), cmp_double);
  const double med = times[steps / 2], mean = sum / steps;
  const double tok_s = (double)N * K / (med / 1e3);
  const double mfu = gpt_flops_per_token(&c, T) * tok_s / (peak * 1e12);
  const double held = (double)gpt_cuda_memory(m) / (1 << 30);
  const double used = (double)(free0 - free1) / (1 << 30);
  printf("ms/step: median %.2f, mean %.2f, min %.2f, max %.2f over %d steps\n", med, mean,
         times[0], times[steps - 1], steps);
  printf("tokens/s: %.0f   MFU: %.1f%% of %.0f TFLOPS   memory: %.2f GiB held by the "
         "backend, %.2f GiB in use on the device beyond the context\n",
         tok_s, 100 * mfu, peak, held, used);

  if (prof > 0) {
    double ms[GPT_PROF_NCLASSES] = {0};
    long cnt[GPT_PROF_NCLASSES] = {0};
    gpt_cuda_profile_enable(m, 1);
    double t0 = now_ms();
    for (int i = 0; i < prof; i++)
      STEP();
    const double wall = (now_ms() - t0) / prof;
    if (gpt_cuda_profile_read(m, ms, cnt) < 0)
      return 1;
    gpt_cuda_profile_enable(m, 0);
    double tot = 0;
    for (int k = 0; k < GPT_PROF_NCLASSES; k++)
      tot += ms[k];
    printf("\nper kernel class, mean over %d profiled steps (CUDA events; wall %.2f ms/step "
           "with events):\n",
           prof, wall);
    printf("| kernel class | ms/step | share | regions/step |\n|---|---:|---:|---:|\n");
    for (int k = 0; k < GPT_PROF_NCLASSES; k++)
      printf("| %s | %.3f | %.1f%% | %ld |\n", gpt_cuda_profile_name(k), ms[k] / prof,
             100 * ms[k] / tot, cnt[k] / prof);
    printf("| total in kernels | %.3f | 100%% | |\n", tot / prof);
  }
  printf("backend after the run: %s\n", gpt_cuda_describe(m, desc, sizeof(desc)));
  printf("RESULT impl=launch-cuda tok_s=%.0f ms=%.3f mfu=%.4f mem_gib=%.3f used_gib=%.3f "
         "graph=%d\n",
         tok_s, med, mfu, held, used, graphed);
  ops->destroy(m);
  free(params), free(tok), free(tgt), free(times);
  return 0;
}
