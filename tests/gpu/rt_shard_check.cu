/* rt_shard_check.cu - ZeRO-1's collectives through NCCL, one rank per GPU
 * under launch (tests/test_gpu_rt_shard.sh): rt_reduce_scatter and
 * rt_allgather with equal parts (ncclReduceScatter, ncclAllGather) and
 * with uneven ones, one empty (grouped ncclReduce, ncclBroadcast), and the
 * gradient buckets of rt_grads_shard. Rank r contributes (r + 1) * (i % 5
 * + 1) to element i: small integers, so every sum is exact in any order.
 * Prints "rt_shard_check: rank R ok" or names the first wrong element. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu_test.h"
#include "rt.h"

static float contrib(int r, size_t i) { return (float)(r + 1) * (float)(i % 5 + 1); }

static void fill(float *d, size_t n, int rank) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; i++)
    h[i] = contrib(rank, i);
  CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
}

/* Elements [lo, hi) of d hold the sum over W ranks. RET 0 or 1 (said). */
static int check_sum(const float *d, size_t lo, size_t hi, int W, int rank, const char *what) {
  std::vector<float> h(hi > lo ? hi - lo : 1);
  float tri = (float)(W * (W + 1) / 2);
  if (hi > lo)
    CK(cudaMemcpy(h.data(), d + lo, (hi - lo) * 4, cudaMemcpyDeviceToHost));
  for (size_t i = lo; i < hi; i++)
    if (h[i - lo] != tri * (float)(i % 5 + 1)) {
      printf("rt_shard_check: rank %d: %s: element %zu is %g, not %g\n", rank, what, i,
             (double)h[i - lo], (double)(tri * (float)(i % 5 + 1)));
      return 1;
    }
  return 0;
}

/* Reduce-scatter then all-gather with parts part[0..W]. */
static int check_parts(rt_t *rt, float *d, size_t n, const size_t *part, const char *what) {
  int W = rt_world_size(rt), me = rt_rank(rt), rc, bad = 0;
  char msg[128];
  fill(d, n, me);
  if ((rc = rt_reduce_scatter(rt, d, part, RT_FP32)) != 0) {
    printf("rt_shard_check: rank %d: rt_reduce_scatter (%s): %s\n", me, what, rt_strerror(rc));
    return 1;
  }
  snprintf(msg, sizeof(msg), "reduce-scatter, %s", what);
  bad |= check_sum(d, part[me], part[me + 1], W, me, msg);
  if ((rc = rt_allgather(rt, d, part, sizeof(float))) != 0) {
    printf("rt_shard_check: rank %d: rt_allgather (%s): %s\n", me, what, rt_strerror(rc));
    return 1;
  }
  snprintf(msg, sizeof(msg), "all-gather, %s", what);
  bad |= check_sum(d, part[0], part[W], W, me, msg);
  return bad;
}

int main(void) {
  rt_options_t o = RT_OPTIONS_INIT;
  rt_t *rt = NULL;
  const size_t n = 1 << 20;
  float *d = NULL;
  int bad = 0, rc;
  gpu_or_skip();
  o.device = RT_DEVICE_CUDA;
  if ((rc = rt_init(&o, &rt)) != 0)
    return 1; /* the runtime said why */
  int W = rt_world_size(rt), me = rt_rank(rt);
  std::vector<size_t> even(W + 1), uneven(W + 1);
  CK(cudaSetDevice(rt_device(rt)));
  CK(cudaMalloc((void **)&d, n * 4));
  for (int k = 0; k <= W; k++) {
    even[k] = n / W * k;
    /* growing parts, the first empty, the whole not starting at 0 */
    uneven[k] = k == 0 || W == 1 ? 3 : 3 + (n - 10) * (size_t)(k * k - 1) / (size_t)(W * W - 1);
  }
  uneven[W] = n - 7;
  bad |= check_parts(rt, d, n, even.data(), "equal parts");
  bad |= check_parts(rt, d, n, uneven.data(), "uneven parts");

  /* rt_grads_shard: three segments, backward's order (segment 0 highest) */
  size_t off[3] = {n / 2, 1000, 0}, cnt[3] = {n - n / 2, n / 2 - 1000, 1000};
  std::vector<size_t> part(W + 1);
  for (int k = 0; k <= W; k++)
    part[k] = n * (size_t)k / (size_t)W + (k > 0 && k < W ? 17 : 0);
  if ((rc = rt_grads_register(rt, d, RT_FP32, 3, off, cnt)) != 0 ||
      (rc = rt_grads_shard(rt, part.data())) != 0) {
    printf("rt_shard_check: rank %d: registering the sharded gradient: %s\n", me, rt_strerror(rc));
    return 1;
  }
  for (int step = 0; step < 2; step++) {
    fill(d, n, me);
    CK(cudaDeviceSynchronize());
    for (int s = 0; s < 3 && rc == 0; s++)
      rc = rt_grads_ready(rt, s, NULL);
    if (rc == 0)
      rc = rt_grads_wait(rt);
    if (rc != 0) {
      printf("rt_shard_check: rank %d: sharded gradient: %s\n", me, rt_strerror(rc));
      return 1;
    }
    bad |= check_sum(d, part[me], part[me + 1], W, me, "rt_grads_shard");
  }
  CK(cudaFree(d));
  rt_finalize(rt);
  if (bad == 0)
    printf("rt_shard_check: rank %d ok (%d ranks)\n", me, W);
  return bad;
}
