/* rt_gpu.c - the runtime's GPU side: the CUDA driver API and NCCL, both
 * loaded at run time (libcuda.so.1 from the driver, libnccl.so.2 or
 * LAUNCH_NCCL_LIBRARY), so the runtime builds and runs without either.
 *
 * The driver API shares the device's primary context with the CUDA runtime
 * API the backend uses, and its streams and events are the runtime API's
 * (a cudaEvent_t is a CUevent): the gradient all-reduce runs on a stream of
 * ours that waits on the backend's events. Every failed call is reported
 * once, here, through rt_report_error(). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"
#include "rt_int.h"

typedef unsigned long long cu_ptr_t;

enum {
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_STREAM_NON_BLOCKING = 1,
  CU_ERROR_NOT_READY = 600,
  NCCL_SUCCESS = 0,
  NCCL_IN_PROGRESS = 7,
  NCCL_FLOAT16 = 6,
  NCCL_FLOAT32 = 7,
  NCCL_BFLOAT16 = 9,
  NCCL_SUM = 0
};

struct rt_gpu_s {
  const rt_who_t *who;
  void *cuda, *nccl;
  int dev, cc, timeout_ms;
  int cu_dev;
  int rank, world; /* of the communicator */
  void *ctx, *stream, *comm;
  cu_ptr_t stage;
  size_t stage_bytes;
  char name[256];
  int (*cuInit)(unsigned);
  int (*cuDeviceGetCount)(int *);
  int (*cuDeviceGet)(int *, int);
  int (*cuDeviceGetName)(char *, int, int);
  int (*cuDeviceGetAttribute)(int *, int, int);
  int (*cuDevicePrimaryCtxRetain)(void **, int);
  int (*cuDevicePrimaryCtxRelease)(int);
  int (*cuCtxSetCurrent)(void *);
  int (*cuStreamCreate)(void **, unsigned);
  int (*cuStreamDestroy)(void *);
  int (*cuStreamWaitEvent)(void *, void *, unsigned);
  int (*cuStreamQuery)(void *);
  int (*cuMemAlloc)(cu_ptr_t *, size_t);
  int (*cuMemFree)(cu_ptr_t);
  int (*cuMemcpyHtoDAsync)(cu_ptr_t, const void *, size_t, void *);
  int (*cuMemcpyDtoHAsync)(void *, cu_ptr_t, size_t, void *);
  int (*cuGetErrorName)(int, const char **);
  int (*ncclAllReduce)(const void *, void *, size_t, int, int, void *, void *);
  int (*ncclBroadcast)(const void *, void *, size_t, int, int, void *, void *);
  int (*ncclReduce)(const void *, void *, size_t, int, int, int, void *,
                    void *);
  int (*ncclReduceScatter)(const void *, void *, size_t, int, int, void *,
                           void *);
  int (*ncclAllGather)(const void *, void *, size_t, int, void *, void *);
  int (*ncclGroupStart)(void);
  int (*ncclGroupEnd)(void);
  int (*ncclCommDestroy)(void *);
  int (*ncclCommAbort)(void *);
  int (*ncclCommGetAsyncError)(void *, int *);
  const char *(*ncclGetErrorString)(int);
};

#define SYM(lib, field, name)                                                  \
  ((*(void **)&g->field = dlsym(g->lib, name)) != NULL)

/* A failed driver call: report it once, RET -EIO. */
static int cu_fail(rt_gpu_t *g, int rc, const char *call, int line) {
  const char *what = "unknown error";
  char buf[64];
  if (g->cuGetErrorName == NULL || g->cuGetErrorName(rc, &what) != 0) {
    snprintf(buf, sizeof(buf), "CUresult %d", rc);
    what = buf;
  }
  rt_report_error("CUDA", call, what, __FILE__, line);
  return -EIO;
}

static int nccl_fail(rt_gpu_t *g, int rc, const char *call, int line) {
  rt_report_error("NCCL", call, g->ncclGetErrorString(rc), __FILE__, line);
  return -EIO;
}

#define CU(call, what)                                                         \
  do {                                                                         \
    int cu_rc_ = (call);                                                       \
    if (cu_rc_ != 0)                                                           \
      return cu_fail(g, cu_rc_, what, __LINE__);                               \
  } while (0)
#define NCCL(call, what)                                                       \
  do {                                                                         \
    int nc_rc_ = (call);                                                       \
    if (nc_rc_ != NCCL_SUCCESS && nc_rc_ != NCCL_IN_PROGRESS)                  \
      return nccl_fail(g, nc_rc_, what, __LINE__);                             \
  } while (0)

void rt__gpu_close(rt_gpu_t *g) {
  if (g == NULL)
    return;
  if (g->comm)
    g->ncclCommDestroy(g->comm);
  if (g->stage)
    g->cuMemFree(g->stage);
  if (g->stream)
    g->cuStreamDestroy(g->stream);
  if (g->ctx)
    g->cuDevicePrimaryCtxRelease(g->cu_dev);
  /* the libraries stay loaded: the backend may still use the driver */
  free(g);
}

static int load_driver(rt_gpu_t *g, const char **why) {
  if ((g->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) == NULL) {
    *why = "no CUDA driver (libcuda.so.1)";
    return RDZV_ENOTSUP;
  }
  if (!(SYM(cuda, cuInit, "cuInit") &&
        SYM(cuda, cuDeviceGetCount, "cuDeviceGetCount") &&
        SYM(cuda, cuDeviceGet, "cuDeviceGet") &&
        SYM(cuda, cuDeviceGetName, "cuDeviceGetName") &&
        SYM(cuda, cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
        SYM(cuda, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
        SYM(cuda, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
        SYM(cuda, cuCtxSetCurrent, "cuCtxSetCurrent") &&
        SYM(cuda, cuStreamCreate, "cuStreamCreate") &&
        SYM(cuda, cuStreamDestroy, "cuStreamDestroy_v2") &&
        SYM(cuda, cuStreamWaitEvent, "cuStreamWaitEvent") &&
        SYM(cuda, cuStreamQuery, "cuStreamQuery") &&
        SYM(cuda, cuMemAlloc, "cuMemAlloc_v2") &&
        SYM(cuda, cuMemFree, "cuMemFree_v2") &&
        SYM(cuda, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") &&
        SYM(cuda, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2") &&
        SYM(cuda, cuGetErrorName, "cuGetErrorName"))) {
    *why = "the CUDA driver lacks a function the runtime needs (too old?)";
    return RDZV_ENOTSUP;
  }
  return 0;
}

int rt__gpu_open(const rt_who_t *who, int local_rank, rt_gpu_t **out,
                 const char **why) {
  rt_gpu_t *g = calloc(1, sizeof(*g));
  int n = 0, rc, major = 0, minor = 0;
  *out = NULL;
  *why = "";
  if (g == NULL)
    return RDZV_ENOMEM;
  g->who = who;
  if ((rc = load_driver(g, why)) != 0)
    goto fail;
  if (g->cuInit(0) != 0 || g->cuDeviceGetCount(&n) != 0 || n == 0) {
    *why = "the CUDA driver sees no GPU";
    rc = RDZV_ENOTSUP;
    goto fail;
  }
  /* CUDA_VISIBLE_DEVICES may leave one GPU per rank, or all of them */
  g->dev = local_rank % n;
  if ((rc = g->cuDeviceGet(&g->cu_dev, g->dev)) != 0 ||
      (rc = g->cuDevicePrimaryCtxRetain(&g->ctx, g->cu_dev)) != 0) {
    rc = cu_fail(g, rc, "cuDevicePrimaryCtxRetain", __LINE__);
    goto fail;
  }
  if ((rc = g->cuCtxSetCurrent(g->ctx)) != 0 ||
      (rc = g->cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING)) != 0) {
    rc = cu_fail(g, rc, "cuStreamCreate", __LINE__);
    goto fail;
  }
  if (g->cuDeviceGetName(g->name, sizeof(g->name), g->cu_dev) != 0)
    snprintf(g->name, sizeof(g->name), "GPU %d", g->dev);
  g->cuDeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, g->cu_dev);
  g->cuDeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, g->cu_dev);
  g->cc = major * 10 + minor;
  *out = g;
  return 0;
fail:
  rt__gpu_close(g);
  return rc;
}

int rt__gpu_device(const rt_gpu_t *g) { return g->dev; }
const char *rt__gpu_name(const rt_gpu_t *g) { return g->name; }
int rt__gpu_cc(const rt_gpu_t *g) { return g->cc; }

int rt__gpu_nccl_init(rt_gpu_t *g, rdzv_client_t *store, int rank, int world,
                      int timeout_ms) {
  const char *lib = getenv("LAUNCH_NCCL_LIBRARY");
  int rc;
  g->timeout_ms = timeout_ms;
  g->rank = rank;
  g->world = world;
  /* the same library librdzv bootstraps the communicator with */
  g->nccl = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (g->nccl == NULL) {
    rt__logf(g->who, "%d ranks on GPUs need NCCL: %s cannot be loaded (install "
             "NCCL or set LAUNCH_NCCL_LIBRARY)", world,
             lib && *lib ? lib : "libnccl.so.2");
    return RDZV_ENOTSUP;
  }
  if (!(SYM(nccl, ncclAllReduce, "ncclAllReduce") &&
        SYM(nccl, ncclBroadcast, "ncclBroadcast") &&
        SYM(nccl, ncclReduce, "ncclReduce") &&
        SYM(nccl, ncclReduceScatter, "ncclReduceScatter") &&
        SYM(nccl, ncclAllGather, "ncclAllGather") &&
        SYM(nccl, ncclGroupStart, "ncclGroupStart") &&
        SYM(nccl, ncclGroupEnd, "ncclGroupEnd") &&
        SYM(nccl, ncclCommDestroy, "ncclCommDestroy") &&
        SYM(nccl, ncclCommAbort, "ncclCommAbort") &&
        SYM(nccl, ncclCommGetAsyncError, "ncclCommGetAsyncError") &&
        SYM(nccl, ncclGetErrorString, "ncclGetErrorString"))) {
    rt__logf(g->who, "NCCL lacks a function the runtime needs (NCCL >= 2.4)");
    return RDZV_ENOTSUP;
  }
  rc = rdzv_nccl_comm_init(store, "rt", rank, world, 128, &g->comm, NULL,
                           timeout_ms);
  if (rc != 0) {
    char what[512];
    snprintf(what, sizeof(what), "%s (%s)", rdzv_strerror(rc),
             rdzv_last_error(store));
    rt_report_error("NCCL", "rdzv_nccl_comm_init", what, __FILE__, __LINE__);
    g->comm = NULL;
  }
  return rc;
}

static int nccl_type(int dtype) {
  return dtype == RT_BF16 ? NCCL_BFLOAT16
         : dtype == RT_FP16 ? NCCL_FLOAT16
                            : NCCL_FLOAT32;
}

int rt__gpu_allreduce(rt_gpu_t *g, void *dptr, size_t count, int dtype,
                      void *event) {
  if (g->comm == NULL)
    return 0; /* one rank */
  if (event)
    CU(g->cuStreamWaitEvent(g->stream, event, 0), "cuStreamWaitEvent");
  NCCL(g->ncclAllReduce(dptr, dptr, count, nccl_type(dtype), NCCL_SUM,
                        g->comm, g->stream),
       "ncclAllReduce");
  return 0;
}

int rt__gpu_broadcast(rt_gpu_t *g, void *dptr, size_t bytes, int root) {
  if (g->comm == NULL)
    return 0;
  NCCL(g->ncclBroadcast(dptr, dptr, bytes, 1 /* ncclUint8 */, root, g->comm,
                        g->stream),
       "ncclBroadcast");
  return 0;
}

static int nccl_esize(int dtype) { return dtype == RT_FP32 ? 4 : 2; }

/* Whether every part has the same size (NCCL's own collectives). */
static int even_parts(const rt_gpu_t *g, const size_t *part) {
  for (int r = 1; r < g->world; r++)
    if (part[r + 1] - part[r] != part[1] - part[0])
      return 0;
  return 1;
}

int rt__gpu_reduce_scatter(rt_gpu_t *g, void *dptr, const size_t *part,
                           int dtype, void *event) {
  char *p = dptr;
  size_t es = (size_t)nccl_esize(dtype), cnt = part[1] - part[0];
  int rc = NCCL_SUCCESS;
  if (g->comm == NULL)
    return 0;
  if (event)
    CU(g->cuStreamWaitEvent(g->stream, event, 0), "cuStreamWaitEvent");
  if (even_parts(g, part)) {
    /* in place: the receive buffer is this rank's part of the send buffer */
    NCCL(g->ncclReduceScatter(p + part[0] * es, p + part[g->rank] * es, cnt,
                              nccl_type(dtype), NCCL_SUM, g->comm, g->stream),
         "ncclReduceScatter");
    return 0;
  }
  NCCL(g->ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < g->world && (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS);
       r++)
    if (part[r + 1] > part[r])
      rc = g->ncclReduce(p + part[r] * es, p + part[r] * es,
                         part[r + 1] - part[r], nccl_type(dtype), NCCL_SUM, r,
                         g->comm, g->stream);
  /* the group is closed even after a failed call */
  NCCL(g->ncclGroupEnd(), "ncclGroupEnd(reduce-scatter)");
  NCCL(rc, "ncclReduce(reduce-scatter)");
  return 0;
}

int rt__gpu_allgather(rt_gpu_t *g, void *dptr, const size_t *part,
                      size_t esize) {
  char *p = dptr;
  int rc = NCCL_SUCCESS;
  if (g->comm == NULL)
    return 0;
  if (even_parts(g, part)) {
    NCCL(g->ncclAllGather(p + part[g->rank] * esize, p + part[0] * esize,
                          (part[1] - part[0]) * esize, 1 /* ncclUint8 */,
                          g->comm, g->stream),
         "ncclAllGather");
    return 0;
  }
  NCCL(g->ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < g->world && (rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS);
       r++)
    if (part[r + 1] > part[r])
      rc = g->ncclBroadcast(p + part[r] * esize, p + part[r] * esize,
                            (part[r + 1] - part[r]) * esize, 1 /* ncclUint8 */,
                            r, g->comm, g->stream);
  NCCL(g->ncclGroupEnd(), "ncclGroupEnd(all-gather)");
  NCCL(rc, "ncclBroadcast(all-gather)");
  return 0;
}

int rt__gpu_wait(rt_gpu_t *g, int timeout_ms) {
  struct timespec t0, now, nap = {0, 20000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int rc = g->cuStreamQuery(g->stream), async = 0;
    if (rc == 0)
      return 0;
    if (rc != CU_ERROR_NOT_READY)
      return cu_fail(g, rc, "cuStreamQuery(all-reduce stream)", __LINE__);
    /* a peer that died leaves NCCL waiting: its error surfaces here */
    if (g->comm && g->ncclCommGetAsyncError(g->comm, &async) == NCCL_SUCCESS &&
        async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) {
      g->ncclCommAbort(g->comm);
      g->comm = NULL;
      return nccl_fail(g, async, "ncclCommGetAsyncError", __LINE__);
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >
        timeout_ms) {
      rt__logf(g->who, "an NCCL collective did not finish within %d s: a "
               "rank stopped or hangs (see the other ranks' logs)",
               timeout_ms / 1000);
      if (g->comm) {
        g->ncclCommAbort(g->comm);
        g->comm = NULL;
      }
      return -ETIMEDOUT;
    }
    nanosleep(&nap, NULL);
  }
}

int rt__gpu_allreduce_host(rt_gpu_t *g, float *buf, size_t count) {
  size_t bytes = count * sizeof(float);
  if (g->comm == NULL || count == 0)
    return 0;
  if (bytes > g->stage_bytes) {
    if (g->stage)
      g->cuMemFree(g->stage);
    g->stage = 0;
    g->stage_bytes = 0;
    CU(g->cuMemAlloc(&g->stage, bytes), "cuMemAlloc(staging)");
    g->stage_bytes = bytes;
  }
  CU(g->cuMemcpyHtoDAsync(g->stage, buf, bytes, g->stream), "cuMemcpyHtoDAsync");
  NCCL(g->ncclAllReduce((void *)g->stage, (void *)g->stage, count, NCCL_FLOAT32,
                        NCCL_SUM, g->comm, g->stream),
       "ncclAllReduce(host values)");
  CU(g->cuMemcpyDtoHAsync(buf, g->stage, bytes, g->stream), "cuMemcpyDtoHAsync");
  return rt__gpu_wait(g, g->timeout_ms);
}
