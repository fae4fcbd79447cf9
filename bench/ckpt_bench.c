/* ckpt_bench.c - checkpoint write bandwidth of launch's writer
 * (include/ckpt.h), to compare with the disk's own (`dd conv=fsync`, run
 * by bench/run_ckpt_bench.sh in the same directory).
 *
 *   ckpt_bench DIR [--size BYTES] [--reps N] [--buffers K]
 *
 * One rank saves a host buffer of BYTES (in K pieces, as a trainer hands
 * over parameters, moments, ...) REPS times:
 *   sync   ckpt_save: temp file, SHA-256 while writing, fsync, rename,
 *          manifest, latest, pruning; the time until it returns;
 *   async  ckpt_save_async: the time the call blocks the trainer (the
 *          stall), and the time until ckpt_wait() says it is durable.
 * Also the SHA-256 speed of one core over the same buffer, the bound of a
 * one-pass hashing writer. Prints one line per measure:
 *   sync_mbs=... async_stall_ms=... async_mbs=... sha_mbs=... (medians). */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  const char *dir;
  size_t size = 1ull << 30;
  int reps = 3, pieces = 3, rc;
  ckpt_options_t o = CKPT_OPTIONS_INIT;
  ckpt_t *c;
  unsigned char *buf;
  struct iovec iov[64];
  double *t_sync, *t_stall, *t_async, t_sha;
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: ckpt_bench DIR [--size BYTES] [--reps N] "
                    "[--buffers K]\n");
    return 2;
  }
  dir = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--size") == 0)
      size = strtoull(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--buffers") == 0)
      pieces = atoi(argv[i + 1]);
  }
  if (size < 4096 || reps < 1 || pieces < 1 || pieces > 64) {
    fprintf(stderr, "ckpt_bench: bad --size, --reps or --buffers\n");
    return 2;
  }
  if ((buf = malloc(size)) == NULL) {
    fprintf(stderr, "ckpt_bench: cannot allocate %zu bytes\n", size);
    return 1;
  }
  /* Incompressible content, every page touched before timing. */
  {
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i + 8 <= size; i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memcpy(buf + i, &x, 8);
    }
  }
  for (int i = 0; i < pieces; i++) {
    size_t a = size / (size_t)pieces * (size_t)i;
    size_t b = i == pieces - 1 ? size : size / (size_t)pieces * (size_t)(i + 1);
    iov[i].iov_base = buf + a;
    iov[i].iov_len = b - a;
  }
  o.dir = dir;
  o.job = "bench";
  o.rank = 0;
  o.world_size = 1;
  o.keep = 1;
  if ((rc = ckpt_open(&o, &c)) != 0) {
    fprintf(stderr, "ckpt_bench: %s\n", ckpt_strerror(rc));
    return 1;
  }
  t_sync = calloc((size_t)reps, sizeof(double));
  t_stall = calloc((size_t)reps, sizeof(double));
  t_async = calloc((size_t)reps, sizeof(double));
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    if ((rc = ckpt_save(c, 2 * r + 1, iov, pieces)) != 0) {
      fprintf(stderr, "ckpt_bench: save: %s\n", ckpt_strerror(rc));
      return 1;
    }
    t_sync[r] = now_s() - t0;
    t0 = now_s();
    if ((rc = ckpt_save_async(c, 2 * r + 2, iov, pieces)) != 0) {
      fprintf(stderr, "ckpt_bench: save_async: %s\n", ckpt_strerror(rc));
      return 1;
    }
    t_stall[r] = now_s() - t0;
    if ((rc = ckpt_wait(c, -1)) != 0) {
      fprintf(stderr, "ckpt_bench: background save: %s\n", ckpt_strerror(rc));
      return 1;
    }
    t_async[r] = now_s() - t0;
    fprintf(stderr, "rep %d: sync %.3f s, async %.3f s (stall %.3f ms)\n", r,
            t_sync[r], t_async[r], t_stall[r] * 1e3);
  }
  ckpt_close(c);
  /* One core's SHA-256 over the buffer. */
  {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen;
    double t0 = now_s();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t off = 0; off < size; off += 1u << 20)
      EVP_DigestUpdate(ctx, buf + off, size - off < (1u << 20) ? size - off
                                                                : 1u << 20);
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    t_sha = now_s() - t0;
    EVP_MD_CTX_free(ctx);
  }
  printf("bytes=%zu reps=%d sync_mbs=%.1f async_mbs=%.1f async_stall_ms=%.3f "
         "sha_mbs=%.1f\n",
         size, reps, (double)size / median(t_sync, reps) / 1e6,
         (double)size / median(t_async, reps) / 1e6,
         median(t_stall, reps) * 1e3, (double)size / t_sha / 1e6);
  free(t_sync);
  free(t_stall);
  free(t_async);
  free(buf);
  return 0;
}
