/* allreduce_check.c - the classic DDP smoke test, in C: every rank
 * contributes rank + 1, all-reduces, and checks the sum n(n+1)/2:
 *
 *   launch --standalone --nproc-per-node 8 build/bin/allreduce_check
 *   rank=3, local_rank=3, world_size=8, gpu=NVIDIA H200, allreduce=36
 *
 * On GPUs the all-reduce runs through NCCL, whose communicator is
 * bootstrapped by launch's store (rdzv_nccl_comm_init: unique ids published
 * per restart generation). Without a GPU it runs through the store. CUDA
 * and NCCL are loaded at run time (libcuda.so.1 from the driver,
 * libnccl.so.2): nothing CUDA is needed to build this.
 *
 *   --cpu             use the store even when GPUs are present
 *   --bench BYTES     then time all-reduces of BYTES (NCCL only) and print
 *                     the bus bandwidth (algorithm bandwidth x 2(n-1)/n)
 *   --iters N         timed iterations (default 20, after 5 warm-ups)
 *   --ranks-per-root N  NCCL roots for ncclCommInitRankScalable (default 128)
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdzv.h"

/* The CUDA driver API and NCCL, resolved at run time. */
typedef struct gpu_s {
  void *cuda, *nccl;
  int (*cuInit)(unsigned);
  int (*cuDeviceGetCount)(int *);
  int (*cuDeviceGet)(int *, int);
  int (*cuDeviceGetName)(char *, int, int);
  int (*cuDevicePrimaryCtxRetain)(void **, int);
  int (*cuCtxSetCurrent)(void *);
  int (*cuCtxSynchronize)(void);
  int (*cuMemAlloc)(unsigned long long *, size_t);
  int (*cuMemFree)(unsigned long long);
  int (*cuMemcpyHtoD)(unsigned long long, const void *, size_t);
  int (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
  int (*cuGetErrorString)(int, const char **);
  int (*ncclAllReduce)(const void *, void *, size_t, int, int, void *, void *);
  int (*ncclCommDestroy)(void *);
  const char *(*ncclGetErrorString)(int);
  char name[256];
} gpu_t;

enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  char *end;
  long x;
  if (v == NULL || *v == '\0')
    return -1;
  x = strtol(v, &end, 10);
  if (*end != '\0' || x < 0)
    return -1;
  *out = (int)x;
  return 0;
}

#define SYM(lib, field, name)                                                  \
  (*(void **)&g->field = dlsym(g->lib, name)) != NULL

/* Load the driver and NCCL; pick the device of local_rank.
 * RET 1 with a GPU ready, 0 when there is no GPU (or no NCCL). */
static int gpu_open(gpu_t *g, int local_rank) {
  int n = 0, dev = 0;
  void *ctx = NULL;
  memset(g, 0, sizeof(*g));
  if ((g->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) == NULL)
    return 0;
  if (!(SYM(cuda, cuInit, "cuInit") &&
        SYM(cuda, cuDeviceGetCount, "cuDeviceGetCount") &&
        SYM(cuda, cuDeviceGet, "cuDeviceGet") &&
        SYM(cuda, cuDeviceGetName, "cuDeviceGetName") &&
        SYM(cuda, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
        SYM(cuda, cuCtxSetCurrent, "cuCtxSetCurrent") &&
        SYM(cuda, cuCtxSynchronize, "cuCtxSynchronize") &&
        SYM(cuda, cuMemAlloc, "cuMemAlloc_v2") &&
        SYM(cuda, cuMemFree, "cuMemFree_v2") &&
        SYM(cuda, cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
        SYM(cuda, cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
        SYM(cuda, cuGetErrorString, "cuGetErrorString")))
    return 0;
  if (g->cuInit(0) != 0 || g->cuDeviceGetCount(&n) != 0 || n == 0)
    return 0;
  if ((g->nccl = dlopen(getenv("LAUNCH_NCCL_LIBRARY") ? getenv("LAUNCH_NCCL_LIBRARY")
                                                       : "libnccl.so.2",
                        RTLD_NOW | RTLD_LOCAL)) == NULL) {
    fprintf(stderr, "allreduce_check: %d GPUs but no libnccl.so.2: using the "
                    "store\n", n);
    return 0;
  }
  if (!(SYM(nccl, ncclAllReduce, "ncclAllReduce") &&
        SYM(nccl, ncclCommDestroy, "ncclCommDestroy") &&
        SYM(nccl, ncclGetErrorString, "ncclGetErrorString")))
    return 0;
  if (g->cuDeviceGet(&dev, local_rank % n) != 0 ||
      g->cuDevicePrimaryCtxRetain(&ctx, dev) != 0 ||
      g->cuCtxSetCurrent(ctx) != 0)
    return 0;
  g->cuDeviceGetName(g->name, sizeof(g->name), dev);
  return 1;
}

static int cu_check(gpu_t *g, int rc, const char *what) {
  const char *msg = "?";
  if (rc == 0)
    return 0;
  g->cuGetErrorString(rc, &msg);
  fprintf(stderr, "allreduce_check: %s failed: %s\n", what, msg);
  return -1;
}

static int nccl_check(gpu_t *g, int rc, const char *what) {
  if (rc == 0)
    return 0;
  fprintf(stderr, "allreduce_check: %s failed: %s\n", what,
          g->ncclGetErrorString(rc));
  return -1;
}

/* The sum through NCCL. RET 0 and *sum, or -1. */
static int nccl_allreduce(gpu_t *g, rdzv_client_t *c, int rank, int world,
                          int rpr, size_t bench_bytes, int iters,
                          float *sum) {
  void *comm = NULL;
  unsigned long long buf = 0, big = 0;
  float v = (float)(rank + 1);
  double init_ms = 0;
  int rc = rdzv_nccl_comm_init(c, "allreduce_check", rank, world, rpr, &comm,
                               &init_ms, 600000);
  if (rc != 0) {
    fprintf(stderr, "allreduce_check: NCCL bootstrap: %s (%s)\n",
            rdzv_strerror(rc), rdzv_last_error(c));
    return -1;
  }
  if (cu_check(g, g->cuMemAlloc(&buf, sizeof(float)), "cuMemAlloc") ||
      cu_check(g, g->cuMemcpyHtoD(buf, &v, sizeof(v)), "cuMemcpyHtoD") ||
      nccl_check(g, g->ncclAllReduce((void *)buf, (void *)buf, 1, NCCL_FLOAT32,
                                     NCCL_SUM, comm, NULL),
                 "ncclAllReduce") ||
      cu_check(g, g->cuCtxSynchronize(), "cuCtxSynchronize") ||
      cu_check(g, g->cuMemcpyDtoH(&v, buf, sizeof(v)), "cuMemcpyDtoH"))
    return -1;
  *sum = v;
  if (bench_bytes > 0) {
    size_t count = bench_bytes / sizeof(float);
    double t0 = 0, dt, algbw;
    if (cu_check(g, g->cuMemAlloc(&big, count * sizeof(float)), "cuMemAlloc"))
      return -1;
    for (int i = 0; i < 5 + iters; i++) {
      if (i == 5) {
        if (cu_check(g, g->cuCtxSynchronize(), "cuCtxSynchronize"))
          return -1;
        t0 = now_s();
      }
      if (nccl_check(g, g->ncclAllReduce((void *)big, (void *)big, count,
                                         NCCL_FLOAT32, NCCL_SUM, comm, NULL),
                     "ncclAllReduce"))
        return -1;
    }
    if (cu_check(g, g->cuCtxSynchronize(), "cuCtxSynchronize"))
      return -1;
    dt = (now_s() - t0) / iters;
    algbw = (double)(count * sizeof(float)) / dt / 1e9;
    if (rank == 0)
      printf("allreduce_bench bytes=%zu iters=%d time_us=%.1f algbw_GBps=%.2f "
             "busbw_GBps=%.2f nccl_init_ms=%.1f nccl_version=%d\n",
             count * sizeof(float), iters, dt * 1e6, algbw,
             algbw * 2.0 * (world - 1) / world, init_ms, rdzv_nccl_version());
    g->cuMemFree(big);
  } else if (rank == 0) {
    printf("nccl_init_ms=%.1f nccl_version=%d\n", init_ms, rdzv_nccl_version());
  }
  g->cuMemFree(buf);
  g->ncclCommDestroy(comm);
  return 0;
}

/* The sum through the store: each rank adds, then all meet at a barrier. */
static int store_allreduce(rdzv_client_t *c, int rank, int world,
                           float *sum) {
  char key[64], bar[64];
  int64_t total = 0;
  const char *round = getenv("LAUNCH_ROUND");
  int rc;
  snprintf(key, sizeof(key), "allreduce_check/%s/sum", round ? round : "0");
  snprintf(bar, sizeof(bar), "allreduce_check/%s/added", round ? round : "0");
  if ((rc = rdzv_add(c, key, rank + 1, NULL, 60000)) != 0 ||
      (rc = rdzv_barrier(c, bar, (uint32_t)world, 600000)) != 0 ||
      (rc = rdzv_add(c, key, 0, &total, 60000)) != 0) {
    fprintf(stderr, "allreduce_check: store: %s (%s)\n", rdzv_strerror(rc),
            rdzv_last_error(c));
    return -1;
  }
  *sum = (float)total;
  return 0;
}

int main(int argc, char **argv) {
  int rank, local_rank, world, use_gpu, cpu_only = 0, iters = 20, rpr = 128;
  size_t bench = 0;
  float sum = 0, want;
  rdzv_client_t *c;
  gpu_t g;
  int rc;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--cpu"))
      cpu_only = 1;
    else if (!strcmp(argv[i], "--bench") && i + 1 < argc)
      bench = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ranks-per-root") && i + 1 < argc)
      rpr = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--cpu] [--bench BYTES] [--iters N] "
                      "[--ranks-per-root N]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1 || rpr < 1) {
    fprintf(stderr, "allreduce_check: --iters and --ranks-per-root must be "
                    "positive\n");
    return 2;
  }
  if (env_int("RANK", &rank) || env_int("LOCAL_RANK", &local_rank) ||
      env_int("WORLD_SIZE", &world) || world < 1 || rank >= world) {
    fprintf(stderr, "allreduce_check: RANK, LOCAL_RANK and WORLD_SIZE must be "
                    "set: run it under launch (or torchrun)\n");
    return 2;
  }
  if ((rc = rdzv_connect_from_env(&c)) != 0) {
    fprintf(stderr, "allreduce_check: cannot reach the rendezvous store: %s\n",
            rdzv_strerror(rc));
    return 1;
  }
  use_gpu = !cpu_only && gpu_open(&g, local_rank);
  rc = use_gpu ? nccl_allreduce(&g, c, rank, world, rpr, bench, iters, &sum)
               : store_allreduce(c, rank, world, &sum);
  rdzv_close(c);
  if (rc != 0)
    return 1;
  want = (float)world * (float)(world + 1) / 2.0f;
  printf("rank=%d, local_rank=%d, world_size=%d, gpu=%s, allreduce=%g\n", rank,
         local_rank, world, use_gpu ? g.name : "none", (double)sum);
  if (sum != want) {
    fprintf(stderr, "allreduce_check: rank %d got %g, expected %g\n", rank,
            (double)sum, (double)want);
    return 1;
  }
  return 0;
}
