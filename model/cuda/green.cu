/* green.cu - the forward's and the update's green contexts (green.cuh). */
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "green.cuh"

typedef CUresult (*dev_get_t)(CUdevice *, int);
typedef CUresult (*res_get_t)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*split_t)(CUdevResource *, unsigned *, const CUdevResource *, CUdevResource *,
                            unsigned, unsigned);
typedef CUresult (*desc_t)(CUdevResourceDesc *, CUdevResource *, unsigned);
typedef CUresult (*gcreate_t)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
typedef CUresult (*gdestroy_t)(CUgreenCtx);
typedef CUresult (*gstream_t)(CUstream *, CUgreenCtx, unsigned, int);
typedef CUresult (*sdestroy_t)(CUstream);

static void *entry(const char *sym) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(sym, &fn, CUDA_VERSION, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    fn = NULL;
  }
  return fn;
}

void gc_green_destroy(gc_green_t *g) {
  sdestroy_t sdestroy = (sdestroy_t)entry("cuStreamDestroy");
  gdestroy_t gdestroy = (gdestroy_t)entry("cuGreenCtxDestroy");
  for (int i = 0; i < 2; i++) {
    if (g->st[i]) {
      cudaStreamSynchronize(g->st[i]);
      if (sdestroy)
        sdestroy((CUstream)g->st[i]);
    }
    if (g->ctx[i] && gdestroy)
      gdestroy((CUgreenCtx)g->ctx[i]);
  }
  memset(g, 0, sizeof(*g));
}

int gc_green_create(gc_green_t *g, int device, int small, char *why, size_t n) {
  memset(g, 0, sizeof(*g));
  dev_get_t dev_get = (dev_get_t)entry("cuDeviceGet");
  res_get_t res_get = (res_get_t)entry("cuDeviceGetDevResource");
  split_t split = (split_t)entry("cuDevSmResourceSplitByCount");
  desc_t gen = (desc_t)entry("cuDevResourceGenerateDesc");
  gcreate_t gcreate = (gcreate_t)entry("cuGreenCtxCreate");
  gstream_t gstream = (gstream_t)entry("cuGreenCtxStreamCreate");
  if (!dev_get || !res_get || !split || !gen || !gcreate || !gstream) {
    snprintf(why, n, "the driver has no green contexts (CUDA 12.4 or newer needed)");
    return -ENOTSUP;
  }
  CUdevice dev;
  CUdevResource all, part[2];
  memset(&all, 0, sizeof(all));
  memset(part, 0, sizeof(part));
  CUresult r = dev_get(&dev, device);
  if (r == CUDA_SUCCESS)
    r = res_get(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS) {
    snprintf(why, n, "cuDeviceGetDevResource: CUDA driver error %d", (int)r);
    return -EIO;
  }
  const unsigned total = all.sm.smCount;
  unsigned align = all.sm.smCoscheduledAlignment;
  if (align < all.sm.minSmPartitionSize)
    align = all.sm.minSmPartitionSize;
  if (align == 0)
    align = 1;
  /* the forward's share as one aligned group (a group keeps the cluster
   * guarantees; the remainder, the update's, does not need them) */
  const unsigned big = small > 0 && (unsigned)small < total ? (total - small) / align * align : 0;
  if (big == 0 || big >= total) {
    snprintf(why, n, "%u SMs in partitions of %u cannot leave %d for the update", total, align,
             small);
    return -EINVAL;
  }
  unsigned groups = 1;
  r = split(&part[0], &groups, &all, &part[1], 0, big);
  if (r != CUDA_SUCCESS || groups != 1 || part[1].sm.smCount == 0) {
    snprintf(why, n, "cuDevSmResourceSplitByCount(%u of %u SMs): CUDA driver error %d, %u "
             "group(s), %u left", big, total, (int)r, groups, part[1].sm.smCount);
    return -EIO;
  }
  for (int i = 0; i < 2; i++) {
    CUdevResourceDesc d = NULL;
    CUgreenCtx c = NULL;
    CUstream s = NULL;
    r = gen(&d, &part[i], 1);
    if (r == CUDA_SUCCESS)
      r = gcreate(&c, d, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r == CUDA_SUCCESS)
      g->ctx[i] = c;
    if (r == CUDA_SUCCESS)
      r = gstream(&s, c, CU_STREAM_NON_BLOCKING, 0);
    if (r != CUDA_SUCCESS) {
      snprintf(why, n, "green context %d (%u SMs): CUDA driver error %d", i, part[i].sm.smCount,
               (int)r);
      gc_green_destroy(g);
      return -EIO;
    }
    g->st[i] = (cudaStream_t)s;
    g->sms[i] = (int)part[i].sm.smCount;
  }
  return 0;
}
