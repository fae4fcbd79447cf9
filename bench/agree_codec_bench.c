/* agree_codec_bench.c - the CPU that the checkpoint agreement spends
 * reading the nodes' views (docs/benchmarks/2026-12-02-checkpoint-
 * agreement.md): at a restart every agent of an N-node job decodes N
 * views, so the job decodes N * N. Times that many decodes of one view
 * (one step, every shard of N ranks here) as the agents store it (the
 * codec's VIEW map, ck_view_unpack) and in the text form of the library's
 * API (ckpt_view_decode), and prints both.
 *
 *   agree_codec_bench [NODES]     (default 256) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_int.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int nodes = argc > 1 ? atoi(argv[1]) : 256;
  unsigned char *all;
  ckpt_step_t st;
  ckpt_scan_t s;
  char *buf = NULL, *text = NULL, err[300];
  size_t len = 0;
  long n;
  double t0, t1, t2;
  if (nodes < 1 || nodes > 65536) {
    fprintf(stderr, "agree_codec_bench: NODES must be 1..65536\n");
    return 2;
  }
  if ((all = malloc(((size_t)nodes + 7) / 8)) == NULL)
    return 1;
  memset(all, 0xff, ((size_t)nodes + 7) / 8);
  memset(&st, 0, sizeof(st));
  memset(&s, 0, sizeof(s));
  st.step = 100;
  st.world_size = nodes;
  st.have = all;
  st.state = CKPT_STEP_COMPLETE;
  s.layout = CKPT_LAYOUT_LAUNCH;
  s.steps = &st;
  s.nsteps = 1;
  if (ck_view_pack(&s, "node001", 1, 1, &buf, &len) != 0 ||
      ckpt_view_encode(&s, &text) != 0)
    return 1;
  n = (long)nodes * nodes;
  t0 = now_s();
  for (long i = 0; i < n; i++) {
    ck_view_t v;
    if (ck_view_unpack(buf, len, &v, err, sizeof(err)) != 0) {
      fprintf(stderr, "agree_codec_bench: %s\n", err);
      return 1;
    }
    ckpt_view_free(v.steps, v.nsteps);
  }
  t1 = now_s();
  for (long i = 0; i < n; i++) {
    ckpt_have_t *h;
    size_t k;
    if (ckpt_view_decode(text, strlen(text), &h, &k) != 0)
      return 1;
    ckpt_view_free(h, k);
  }
  t2 = now_s();
  printf("%d nodes: %ld view decodes: codec map %.3f s (%.2f us each, %zu "
         "bytes), text %.3f s (%.2f us each, %zu bytes)\n",
         nodes, n, t1 - t0, (t1 - t0) / (double)n * 1e6, len, t2 - t1,
         (t2 - t1) / (double)n * 1e6, strlen(text));
  free(buf);
  free(text);
  free(all);
  return 0;
}
