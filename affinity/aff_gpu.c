/* aff_gpu.c - the GPU software stack, loaded at run time: NVML for the GPU
 * list, names, UUIDs, memory, NVLink and persistence mode; the CUDA runtime
 * for the visible device order and its version; NCCL for its version.
 * Nothing here is needed to build: the prototypes below are NVML's, CUDA's
 * and NCCL's documented C ABI. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff_int.h"

/* ---- loading ------------------------------------------------------------------ */

/* dlopen the first of names found in the default search path,
 * $CUDA_HOME/lib64 or /usr/local/cuda/lib64. OUT path (may be NULL). */
static void *load_lib(const char *const *names, char *path, size_t plen) {
  const char *dirs[3];
  int nd = 0;
  const char *ch = getenv("CUDA_HOME");
  dirs[nd++] = NULL;
  if (ch && *ch)
    dirs[nd++] = ch;
  dirs[nd++] = "/usr/local/cuda";
  for (int d = 0; d < nd; d++)
    for (int i = 0; names[i]; i++) {
      char full[512];
      void *h;
      if (dirs[d] == NULL)
        lu_strlcpy(full, names[i], sizeof(full));
      else
        snprintf(full, sizeof(full), "%s/lib64/%s", dirs[d], names[i]);
      h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
      if (h != NULL) {
        if (path) {
          /* Where it really came from, for the report. */
          Dl_info di;
          void *sym = dlsym(h, "ncclGetVersion");
          if (sym == NULL)
            sym = dlsym(h, "cudaRuntimeGetVersion");
          if (sym && dladdr(sym, &di) && di.dli_fname)
            lu_strlcpy(path, di.dli_fname, plen);
          else
            lu_strlcpy(path, full, plen);
        }
        return h;
      }
    }
  return NULL;
}

#define SYM(h, var, name) (*(void **)(&(var)) = dlsym((h), (name)))

/* ---- NVML ------------------------------------------------------------------------ */

typedef void *nvml_dev_t;
typedef struct nvml_pci_s { /* nvmlPciInfo_t (v2/v3 layout) */
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvml_pci_t;
typedef struct nvml_mem_s {
  unsigned long long total, free, used;
} nvml_mem_t;
#define NVML_NVLINK_MAX_LINKS 18

typedef struct nvml_s {
  void *h;
  int (*init)(void);
  int (*shutdown)(void);
  int (*count)(unsigned *);
  int (*by_index)(unsigned, nvml_dev_t *);
  int (*pci)(nvml_dev_t, nvml_pci_t *);
  int (*name)(nvml_dev_t, char *, unsigned);
  int (*uuid)(nvml_dev_t, char *, unsigned);
  int (*mem)(nvml_dev_t, nvml_mem_t *);
  int (*driver)(char *, unsigned);
  int (*cuda_driver)(int *);
  int (*persistence)(nvml_dev_t, int *);
  int (*nvl_state)(nvml_dev_t, unsigned, int *);
  int (*nvl_remote)(nvml_dev_t, unsigned, nvml_pci_t *);
} nvml_t;

static int nvml_open(nvml_t *n) {
  static const char *const names[] = {"libnvidia-ml.so.1", "libnvidia-ml.so",
                                      NULL};
  memset(n, 0, sizeof(*n));
  if ((n->h = load_lib(names, NULL, 0)) == NULL)
    return -1;
  SYM(n->h, n->init, "nvmlInit_v2");
  SYM(n->h, n->shutdown, "nvmlShutdown");
  SYM(n->h, n->count, "nvmlDeviceGetCount_v2");
  SYM(n->h, n->by_index, "nvmlDeviceGetHandleByIndex_v2");
  if (!SYM(n->h, n->pci, "nvmlDeviceGetPciInfo_v3"))
    SYM(n->h, n->pci, "nvmlDeviceGetPciInfo_v2");
  SYM(n->h, n->name, "nvmlDeviceGetName");
  SYM(n->h, n->uuid, "nvmlDeviceGetUUID");
  SYM(n->h, n->mem, "nvmlDeviceGetMemoryInfo");
  SYM(n->h, n->driver, "nvmlSystemGetDriverVersion");
  if (!SYM(n->h, n->cuda_driver, "nvmlSystemGetCudaDriverVersion_v2"))
    SYM(n->h, n->cuda_driver, "nvmlSystemGetCudaDriverVersion");
  SYM(n->h, n->persistence, "nvmlDeviceGetPersistenceMode");
  SYM(n->h, n->nvl_state, "nvmlDeviceGetNvLinkState");
  if (!SYM(n->h, n->nvl_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2"))
    SYM(n->h, n->nvl_remote, "nvmlDeviceGetNvLinkRemotePciInfo");
  if (!n->init || !n->shutdown || !n->count || !n->by_index || !n->pci ||
      n->init() != 0) {
    dlclose(n->h);
    n->h = NULL;
    return -1;
  }
  return 0;
}

static void nvml_close(nvml_t *n) {
  if (n->h == NULL)
    return;
  n->shutdown();
  dlclose(n->h);
  n->h = NULL;
}

int aff__nvml_gpus(aff_gpu_probe_t *g, int max, int (*links)[AFF_MAX_GPUS]) {
  nvml_t n;
  unsigned count = 0;
  nvml_dev_t dev[AFF_MAX_GPUS];
  /* per GPU: links to each other GPU, links to NVSwitches */
  int direct[AFF_MAX_GPUS][AFF_MAX_GPUS];
  int to_switch[AFF_MAX_GPUS];
  int cnt;
  if (nvml_open(&n) != 0)
    return -1;
  if (n.count(&count) != 0) {
    nvml_close(&n);
    return -1;
  }
  cnt = (int)LU_MIN(count, (unsigned)LU_MIN(max, AFF_MAX_GPUS));
  memset(direct, 0, sizeof(direct));
  memset(to_switch, 0, sizeof(to_switch));
  for (int i = 0; i < cnt; i++) {
    nvml_pci_t pci;
    nvml_mem_t mem;
    memset(&g[i], 0, sizeof(g[i]));
    g[i].nvlinks = -1;
    dev[i] = NULL;
    if (n.by_index((unsigned)i, &dev[i]) != 0)
      continue;
    memset(&pci, 0, sizeof(pci));
    if (n.pci(dev[i], &pci) == 0)
      aff__busid_norm(pci.busId, g[i].busid);
    if (n.name)
      n.name(dev[i], g[i].model, sizeof(g[i].model));
    if (n.uuid)
      n.uuid(dev[i], g[i].uuid, sizeof(g[i].uuid));
    if (n.mem && n.mem(dev[i], &mem) == 0)
      g[i].mem_bytes = mem.total;
  }
  for (int i = 0; i < cnt; i++) {
    if (dev[i] == NULL || n.nvl_state == NULL || n.nvl_remote == NULL)
      continue;
    g[i].nvlinks = 0;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
      int active = 0, peer = -1;
      nvml_pci_t rp;
      char rb[16];
      if (n.nvl_state(dev[i], l, &active) != 0 || !active)
        continue;
      g[i].nvlinks++;
      memset(&rp, 0, sizeof(rp));
      if (n.nvl_remote(dev[i], l, &rp) != 0 || aff__busid_norm(rp.busId, rb) != 0) {
        /* An active link whose far end this node cannot see: an NVSwitch
         * (in a VM the switches are not passed through). */
        to_switch[i]++;
        continue;
      }
      for (int j = 0; j < cnt; j++)
        if (strcmp(g[j].busid, rb) == 0)
          peer = j;
      if (peer >= 0)
        direct[i][peer]++;
      else
        to_switch[i]++; /* an NVSwitch (or a GPU outside this node) */
    }
  }
  if (links)
    for (int i = 0; i < cnt; i++)
      for (int j = 0; j < cnt; j++) {
        if (n.nvl_state == NULL || n.nvl_remote == NULL) {
          links[i][j] = -1;
          continue;
        }
        /* Through NVSwitches every GPU reaches every other one with the
         * smaller of their switch link counts. */
        links[i][j] = i == j ? 0
                             : direct[i][j] + LU_MIN(to_switch[i], to_switch[j]);
      }
  nvml_close(&n);
  return cnt;
}

/* ---- CUDA runtime ------------------------------------------------------------------ */

static const char *const cudart_names[] = {
    "libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
    NULL};

int aff__cudart_gpus(aff_gpu_probe_t *g, int max) {
  void *h = load_lib(cudart_names, NULL, 0);
  int (*count)(int *) = NULL;
  int (*busid)(char *, int, int) = NULL;
  int n = 0;
  if (h == NULL)
    return -1;
  SYM(h, count, "cudaGetDeviceCount");
  SYM(h, busid, "cudaDeviceGetPCIBusId");
  if (count == NULL || busid == NULL || count(&n) != 0 || n <= 0) {
    /* cudaErrorNoDevice / cudaErrorInsufficientDriver: no GPU to plan. */
    dlclose(h);
    return -1;
  }
  n = LU_MIN(n, max);
  for (int i = 0; i < n; i++) {
    char b[32] = "";
    memset(&g[i], 0, sizeof(g[i]));
    g[i].nvlinks = -1;
    if (busid(b, (int)sizeof(b), i) == 0)
      aff__busid_norm(b, g[i].busid);
  }
  dlclose(h);
  return n;
}

/* ---- names ---------------------------------------------------------------------- */

/* For topologies without NVML's or pci.ids' names (an lstopo export from a
 * machine whose hwloc has neither). */
static const struct {
  unsigned id;
  const char *name;
} gpu_names[] = {
    {0x1db1, "Tesla V100-SXM2-16GB"}, {0x1db4, "Tesla V100-PCIE-16GB"},
    {0x1db5, "Tesla V100-SXM2-32GB"}, {0x1db6, "Tesla V100-PCIE-32GB"},
    {0x20b0, "NVIDIA A100-SXM4-40GB"}, {0x20b2, "NVIDIA A100-SXM4-80GB"},
    {0x20b5, "NVIDIA A100 80GB PCIe"}, {0x20f1, "NVIDIA A100-PCIE-40GB"},
    {0x2330, "NVIDIA H100 80GB HBM3"}, {0x2331, "NVIDIA H100 PCIe"},
    {0x2335, "NVIDIA H200"},
};

const char *aff_gpu_model_name(unsigned device_id) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(gpu_names); i++)
    if (gpu_names[i].id == device_id)
      return gpu_names[i].name;
  return NULL;
}

/* ---- versions ------------------------------------------------------------------------ */

void aff_cuda_version_str(int v, char *buf, size_t n) {
  if (v <= 0)
    snprintf(buf, n, "none");
  else if (v % 10)
    snprintf(buf, n, "%d.%d.%d", v / 1000, (v % 1000) / 10, v % 10);
  else
    snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

void aff_nccl_version_str(int v, char *buf, size_t n) {
  if (v <= 0)
    snprintf(buf, n, "none");
  else if (v >= 10000) /* 2.9 and later: major*10000 + minor*100 + patch */
    snprintf(buf, n, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else /* before 2.9: major*1000 + minor*100 + patch */
    snprintf(buf, n, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..."
 * or "... Open Kernel Module for x86_64  550.54.15  Release Build ...". */
void aff__driver_from_proc(const char *root, char *out, size_t n) {
  char buf[512];
  const char *p;
  if (aff__read_line(root, "/proc/driver/nvidia/version", buf, sizeof(buf)) <= 0)
    return;
  p = strstr(buf, "Module");
  if (p == NULL)
    return;
  while (*p) {
    unsigned a, b;
    if (*p >= '0' && *p <= '9' && sscanf(p, "%u.%u", &a, &b) == 2 &&
        (p == buf || p[-1] == ' ')) {
      size_t k = strspn(p, "0123456789.");
      snprintf(out, n, "%.*s", (int)LU_MIN(k, n - 1), p);
      return;
    }
    p++;
  }
}

void aff_sysinfo_probe(aff_sysinfo_t *si, const char *root) {
  static const char *const nccl_names[] = {"libnccl.so.2", "libnccl.so", NULL};
  nvml_t n;
  void *h;
  memset(si, 0, sizeof(*si));
  si->ngpus = -1;
  si->persistence = -1;
  if (root && strcmp(root, "/") == 0)
    root = NULL;
  if (nvml_open(&n) == 0) {
    unsigned count = 0;
    si->nvml = 1;
    if (n.driver)
      n.driver(si->driver, sizeof(si->driver));
    if (n.cuda_driver)
      n.cuda_driver(&si->cuda_driver);
    if (n.count(&count) == 0) {
      si->ngpus = (int)count;
      si->persistence = n.persistence ? 0 : -1;
      for (unsigned i = 0; i < count; i++) {
        nvml_dev_t d;
        int mode = 0;
        nvml_mem_t mem;
        if (n.by_index(i, &d) != 0)
          continue;
        if (i == 0 && n.name)
          n.name(d, si->gpu_model, sizeof(si->gpu_model));
        if (i == 0 && n.mem && n.mem(d, &mem) == 0)
          si->gpu_mem_bytes = mem.total;
        if (n.persistence && n.persistence(d, &mode) == 0 && mode == 1)
          si->persistence++;
      }
    }
    nvml_close(&n);
  }
  if (si->driver[0] == '\0')
    aff__driver_from_proc(root, si->driver, sizeof(si->driver));
  if ((h = load_lib(cudart_names, si->cudart_path, sizeof(si->cudart_path)))) {
    int (*rt)(int *) = NULL, (*drv)(int *) = NULL;
    SYM(h, rt, "cudaRuntimeGetVersion");
    SYM(h, drv, "cudaDriverGetVersion");
    if (rt)
      rt(&si->cuda_runtime);
    if (drv && si->cuda_driver == 0)
      drv(&si->cuda_driver);
    dlclose(h);
  }
  if ((h = load_lib(nccl_names, si->nccl_path, sizeof(si->nccl_path)))) {
    int (*ver)(int *) = NULL;
    SYM(h, ver, "ncclGetVersion");
    if (ver == NULL || ver(&si->nccl) != 0)
      si->nccl = 0;
    dlclose(h);
  }
}
