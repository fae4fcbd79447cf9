/* lab_attention.cuh - what the attention programs share: the arguments
 * [B T NH], random bf16 inputs, the product's outputs as the reference and
 * its times to beat, and the check and timing of one rival (README.md). */
#ifndef LAB_CUDA_LAB_ATTENTION_CUH
#define LAB_CUDA_LAB_ATTENTION_CUH

#include <stdlib.h>

#include "kernels.cuh"
#include "lab.cuh"

struct lab_attn {
  int B, Tn, NH, C;
  size_t N, nl; /* tokens; rows of the log-sum-exp */
  cudaStream_t s;
  bf16 *qkv, *dy, *out0, *out1, *dqkv0, *dqkv1;
  float *lse0, *lse1, *scratch;
  std::vector<double> rout, rlse, rdqkv; /* the product's outputs */
};

/* Parse [B T NH] (head size 64; defaults: gpt2-124m, B 16), upload the
 * inputs, run the product's kernels of this process (gc_attention_variant
 * set by the caller), keep their outputs and print their times. RET 0, or
 * 2 after a usage line. */
static int lab_attn_open(lab_attn *a, int argc, char **argv, const char *prog) {
  a->B = argc > 3 ? atoi(argv[1]) : 16;
  a->Tn = argc > 3 ? atoi(argv[2]) : 1024;
  a->NH = argc > 3 ? atoi(argv[3]) : 12;
  if (a->B < 1 || a->NH < 1 || a->Tn < 128 || a->Tn % 128 != 0) {
    fprintf(stderr, "usage: %s [B T NH]: T a multiple of 128 (head size 64)\n", prog);
    return 2;
  }
  const int hd = 64;
  a->C = a->NH * hd;
  a->N = (size_t)a->B * a->Tn;
  a->nl = (size_t)a->B * a->NH * a->Tn;
  CK(cudaStreamCreate(&a->s));
  rng r(20261202);
  a->qkv = upload<bf16>(r.normals(a->N * 3 * a->C, 1.0));
  a->dy = upload<bf16>(r.normals(a->N * a->C, 1.0));
  a->out0 = poisoned<bf16>(a->N * a->C), a->out1 = poisoned<bf16>(a->N * a->C);
  a->dqkv0 = poisoned<bf16>(a->N * 3 * a->C), a->dqkv1 = poisoned<bf16>(a->N * 3 * a->C);
  a->lse0 = poisoned<float>(a->nl), a->lse1 = poisoned<float>(a->nl);
  a->scratch = poisoned<float>(gc_attention_scratch(GPT_BF16, a->B, a->Tn, a->NH, hd));
  auto fwd = [a] {
    return gc_attention_fwd<bf16>(a->out0, a->lse0, a->qkv, a->B, a->Tn, a->NH, 64, a->s);
  };
  auto bwd = [a] {
    return gc_attention_bwd<bf16>(a->dqkv0, a->scratch, a->dy, a->qkv, a->out0, a->lse0, a->B,
                                  a->Tn, a->NH, 64, a->s);
  };
  OK(fwd());
  OK(bwd());
  CK(cudaStreamSynchronize(a->s));
  a->rout = download(a->out0, a->N * a->C);
  a->rlse = download(a->lse0, a->nl);
  a->rdqkv = download(a->dqkv0, a->N * 3 * a->C);
  printf("attention B %d T %d NH %d HD 64, bf16; the product: %s\n", a->B, a->Tn, a->NH,
         gc_attention_describe());
  printf("%-44s fwd %.3f ms\n", "product", lab_median_ms(a->s, 20, fwd));
  printf("%-44s bwd %.3f ms\n", "product", lab_median_ms(a->s, 20, bwd));
  return 0;
}

/* A rival forward fn() into out1 and lse1: checked against the product's,
 * then timed. */
template <typename F> static void lab_attn_fwd(lab_attn *a, const char *what, F fn) {
  OK(fn());
  CK(cudaStreamSynchronize(a->s));
  check(what, download(a->out1, a->N * a->C), a->rout, 1e-2);
  check(what, download(a->lse1, a->nl), a->rlse, 1e-5);
  printf("%-44s fwd %.3f ms\n", what, lab_median_ms(a->s, 20, fn));
}

/* A rival backward fn() into dqkv1 (poisoned first), from the product's
 * forward outputs. */
template <typename F> static void lab_attn_bwd(lab_attn *a, const char *what, F fn) {
  CK(cudaMemset(a->dqkv1, 0xff, a->N * 3 * a->C * sizeof(bf16)));
  OK(fn());
  CK(cudaStreamSynchronize(a->s));
  check(what, download(a->dqkv1, a->N * 3 * a->C), a->rdqkv, 2e-2);
  printf("%-44s bwd %.3f ms\n", what, lab_median_ms(a->s, 20, fn));
}

#endif /* LAB_CUDA_LAB_ATTENTION_CUH */
