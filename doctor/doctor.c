/* doctor.c - one node's checks (doctor.h): host, OS, kernel settings, GPUs
 * and driver, CUDA and NCCL, the IB ports, the GPU <-> NIC NUMA placement,
 * the rendezvous port, the NCCL environment lint (docs/launcher.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff.h"
#include "doctor.h"
#include "env.h"
#include "lu_buf.h"

#define DOC_MAGIC "launch-doctor 1"
#define DOC_MAX_ITEMS 512
#define DOC_MAX_TEXT (1u << 20)

struct doc_report_s {
  char host[128];
  int n, cap;
  doc_item_t *items;
};

const char *doc_status_name(doc_status_t s) {
  switch (s) {
  case DOC_PASS: return "pass";
  case DOC_INFO: return "info";
  case DOC_WARN: return "warn";
  case DOC_FAIL: return "fail";
  }
  return "?";
}

/* ---- report building ------------------------------------------------------------ */

typedef struct ctx_s {
  doc_report_t *r;
  const char *root; /* "" for / */
  const aff_facts_t *facts; /* GPUs, PCIe links, HCAs and ports, netdevs
                               under root, read once (affinity/) */
  int oom;
} ctx_t;

static doc_item_t *item(ctx_t *c, const char *id, const char *title,
                        doc_status_t st, int same) {
  doc_item_t *it;
  if (c->r->n == c->r->cap) {
    int ncap = c->r->cap ? c->r->cap * 2 : 32;
    doc_item_t *ni;
    if (ncap > DOC_MAX_ITEMS || (ni = realloc(c->r->items, sizeof(*ni) * (size_t)ncap)) == NULL) {
      c->oom = 1;
      return NULL;
    }
    c->r->items = ni;
    c->r->cap = ncap;
  }
  it = &c->r->items[c->r->n++];
  memset(it, 0, sizeof(*it));
  lu_strlcpy(it->id, id, sizeof(it->id));
  lu_strlcpy(it->title, title, sizeof(it->title));
  it->status = st;
  it->same = same;
  return it;
}

static void setf(char *dst, size_t n, const char *fmt, ...) LU_PRINTF(3, 4);
static void setf(char *dst, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, n, fmt, ap);
  va_end(ap);
}

#define VALUE(it, ...) setf((it)->value, sizeof((it)->value), __VA_ARGS__)
#define REASON(it, ...) setf((it)->reason, sizeof((it)->reason), __VA_ARGS__)
#define FIX(it, ...) setf((it)->fix, sizeof((it)->fix), __VA_ARGS__)

/* Read root+path: RET length or -1. */
#define rd(c, path, buf, n) lu_read_line((c)->root, path, buf, n)

static int exists(const ctx_t *c, const char *path) {
  char full[1024];
  struct stat st;
  snprintf(full, sizeof(full), "%s%s", c->root, path);
  return stat(full, &st) == 0;
}

static DIR *opendir_root(const ctx_t *c, const char *path) {
  char full[1024];
  snprintf(full, sizeof(full), "%s%s", c->root, path);
  return opendir(full);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* Sorted names in a directory under root (no dot entries). RET count. */
static int list_dir(const ctx_t *c, const char *path, char (*names)[64], int max) {
  DIR *d = opendir_root(c, path);
  struct dirent *e;
  int n = 0;
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL && n < max)
    if (e->d_name[0] != '.')
      lu_strlcpy(names[n++], e->d_name, sizeof(names[0]));
  closedir(d);
  qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
  return n;
}

/* ---- host, OS, CPUs, NUMA, kernel settings ------------------------------------------ */

static void check_host(ctx_t *c) {
  char buf[256], line[512];
  doc_item_t *it;
  FILE *f;
  char path[1024];
  if (rd(c, "/proc/sys/kernel/hostname", buf, sizeof(buf)) <= 0 &&
      (c->root[0] || gethostname(buf, sizeof(buf)) != 0))
    lu_strlcpy(buf, "unknown", sizeof(buf));
  lu_strlcpy(c->r->host, buf, sizeof(c->r->host));
  if ((it = item(c, "host", "Host", DOC_INFO, 0)))
    VALUE(it, "%s", buf);

  /* OS: os-release's PRETTY_NAME, else redhat-release. */
  buf[0] = '\0';
  snprintf(path, sizeof(path), "%s/etc/os-release", c->root);
  if ((f = fopen(path, "r")) != NULL) {
    while (fgets(line, sizeof(line), f))
      if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
        char *v = line + 12;
        size_t n = strcspn(v, "\n");
        v[n] = '\0';
        if (*v == '"' && n >= 2 && v[n - 1] == '"') {
          v[n - 1] = '\0';
          v++;
        }
        lu_strlcpy(buf, v, sizeof(buf));
      }
    fclose(f);
  }
  if (buf[0] == '\0')
    rd(c, "/etc/redhat-release", buf, sizeof(buf));
  if ((it = item(c, "os", "OS", buf[0] ? DOC_INFO : DOC_WARN, 1))) {
    VALUE(it, "%s", buf[0] ? buf : "unknown");
    if (!buf[0]) {
      REASON(it, "neither /etc/os-release nor /etc/redhat-release is readable");
      FIX(it, "check the image; every node should run the same OS release");
    }
  }
  if (rd(c, "/proc/sys/kernel/osrelease", buf, sizeof(buf)) <= 0)
    lu_strlcpy(buf, "unknown", sizeof(buf));
  if ((it = item(c, "kernel", "Kernel", DOC_INFO, 1))) {
    unsigned maj = 0, min = 0;
    VALUE(it, "%s", buf);
    if (sscanf(buf, "%u.%u", &maj, &min) == 2 && (maj < 4 || (maj == 4 && min < 15))) {
      it->status = DOC_WARN;
      REASON(it, "GPUDirect RDMA needs kernel 4.15 or later");
      FIX(it, "upgrade the kernel (Ubuntu 20.04+/Rocky 8+)");
    }
  }
}

static int count_cpulist(const char *s) {
  aff_cpuset_t set;
  if (aff_cpulist_parse(s, &set, NULL, 0) != 0)
    return -1;
  return aff_cpuset_count(&set);
}

static void check_cpus(ctx_t *c) {
  char buf[1024], path[256];
  char (*cpus)[64] = calloc(4096, sizeof(*cpus));
  char pkgs[64][16];
  int ncpu = -1, npkg = 0, n;
  doc_item_t *it;
  if (cpus == NULL) {
    c->oom = 1;
    return;
  }
  if (rd(c, "/sys/devices/system/cpu/online", buf, sizeof(buf)) > 0)
    ncpu = count_cpulist(buf);
  n = list_dir(c, "/sys/devices/system/cpu", cpus, 4096);
  for (int i = 0; i < n; i++) {
    char pk[32];
    int seen = 0;
    if (strncmp(cpus[i], "cpu", 3) != 0 || cpus[i][3] < '0' || cpus[i][3] > '9')
      continue;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/topology/physical_package_id",
             cpus[i]);
    if (rd(c, path, pk, sizeof(pk)) <= 0)
      continue;
    for (int k = 0; k < npkg; k++)
      seen |= strcmp(pkgs[k], pk) == 0;
    if (!seen && npkg < 64)
      lu_strlcpy(pkgs[npkg++], pk, sizeof(pkgs[0]));
  }
  if ((it = item(c, "cpus", "CPUs", ncpu > 0 ? DOC_INFO : DOC_WARN, 1))) {
    if (ncpu > 0)
      VALUE(it, "%d CPUs online, %d socket%s", ncpu, npkg, npkg == 1 ? "" : "s");
    else {
      VALUE(it, "unknown");
      REASON(it, "/sys/devices/system/cpu/online is not readable");
      FIX(it, "check that /sys is mounted (containers: read-only /sys is enough)");
    }
  }
  /* NUMA nodes and their CPUs (numactl -H) */
  n = list_dir(c, "/sys/devices/system/node", cpus, 4096);
  {
    char v[256] = "";
    int nodes = 0;
    for (int i = 0; i < n; i++) {
      if (strncmp(cpus[i], "node", 4) != 0 || cpus[i][4] < '0' || cpus[i][4] > '9')
        continue;
      snprintf(path, sizeof(path), "/sys/devices/system/node/%s/cpulist", cpus[i]);
      if (rd(c, path, buf, sizeof(buf)) < 0)
        continue;
      nodes++;
      snprintf(v + strlen(v), sizeof(v) - strlen(v), "%s%.32s: %.200s",
               nodes > 1 ? "; " : "", cpus[i], buf[0] ? buf : "no CPUs");
    }
    if ((it = item(c, "numa", "NUMA nodes", DOC_INFO, 1))) {
      if (nodes > 0)
        VALUE(it, "%d (%s)", nodes, v);
      else
        VALUE(it, "no NUMA information (one node)");
    }
  }
  free(cpus);
}

static int is_number(const char *s) {
  int64_t v;
  return lu_parse_i64(s, strlen(s), &v) == 0;
}

static void check_kernel_settings(ctx_t *c) {
  char buf[64] = "";
  doc_item_t *it;
  if (rd(c, "/proc/sys/kernel/numa_balancing", buf, sizeof(buf)) > 0 &&
      !is_number(buf)) {
    if ((it = item(c, "numa-balancing", "NUMA balancing", DOC_WARN, 1))) {
      VALUE(it, "kernel.numa_balancing=%s", buf);
      REASON(it, "/proc/sys/kernel/numa_balancing holds '%s', not a number", buf);
      FIX(it, "check the kernel and the --root tree");
    }
  } else if (buf[0]) {
    int on = atoi(buf) != 0;
    if ((it = item(c, "numa-balancing", "NUMA balancing", on ? DOC_WARN : DOC_PASS, 1))) {
      VALUE(it, "kernel.numa_balancing=%s", buf);
      if (on) {
        REASON(it, "the kernel migrates training processes and their memory "
                   "across NUMA nodes, undoing the CPU/memory binding");
        FIX(it, "sysctl -w kernel.numa_balancing=0 && echo "
                "kernel.numa_balancing=0 >> /etc/sysctl.conf");
      }
    }
  } else if ((it = item(c, "numa-balancing", "NUMA balancing", DOC_PASS, 1))) {
    VALUE(it, "not available in this kernel");
  }
  buf[0] = '\0';
  if (rd(c, "/proc/sys/vm/nr_hugepages", buf, sizeof(buf)) > 0 && !is_number(buf)) {
    if ((it = item(c, "hugepages", "Huge pages", DOC_WARN, 1))) {
      VALUE(it, "vm.nr_hugepages=%s", buf);
      REASON(it, "/proc/sys/vm/nr_hugepages holds '%s', not a number", buf);
      FIX(it, "check the kernel and the --root tree");
    }
  } else if (buf[0]) {
    long n = strtol(buf, NULL, 10);
    /* Reported, not recommended: reserving huge pages takes the memory
     * from everything else, and only some jobs (ZeRO/FSDP CPU offload)
     * gain from them. */
    if ((it = item(c, "hugepages", "Huge pages", DOC_INFO, 1)))
      VALUE(it, "vm.nr_hugepages=%ld%s", n,
            n > 0 ? "" : " (none reserved; transparent huge pages apply)");
  }
}

/* ---- GPUs ------------------------------------------------------------------------------ */

typedef struct gpu_s {
  char busid[64];
  unsigned device;
  int numa;
  int width, width_max;
  double gts, gts_max;
} gpu_t;

/* The GPUs CUDA here can use, as affinity/ read them: those the driver
 * runs, not excluded, given to this container (aff_gpu_use_t). OUT
 * why[use] the GPUs of the PCI bus per aff_gpu_use_t. */
static int scan_gpus(ctx_t *c, gpu_t *g, int max, int why[4]) {
  int ng = 0;
  memset(why, 0, 4 * sizeof(why[0]));
  for (int i = 0; i < c->facts->ngpus && ng < max; i++) {
    const aff_facts_gpu_t *f = &c->facts->gpus[i];
    why[f->use]++;
    if (f->use != AFF_GPU_USABLE)
      continue;
    memset(&g[ng], 0, sizeof(g[ng]));
    lu_strlcpy(g[ng].busid, f->busid, sizeof(g[ng].busid));
    g[ng].device = f->device;
    g[ng].numa = f->numa;
    g[ng].width = f->link.width;
    g[ng].width_max = f->link.width_max;
    g[ng].gts = f->link.gts;
    g[ng].gts_max = f->link.gts_max;
    ng++;
  }
  return ng;
}

static void check_gpus(ctx_t *c, const doc_opts_t *o, const aff_sysinfo_t *si,
                       gpu_t *g, int *ngpus) {
  doc_item_t *it;
  int why[4];
  int ng = scan_gpus(c, g, 64, why);
  int npci = why[0] + why[1] + why[2] + why[3];
  char model[96] = "";
  *ngpus = ng;
  /* The bus's count beside the usable one: a pod given 2 of a node's 4
   * GPUs has 2, and the other 2 are no fault. */
  if (npci != ng && (it = item(c, "gpu.pci", "GPUs on the PCI bus", DOC_INFO, 0))) {
    VALUE(it, "%d: %d usable here, %d not run by the driver, %d excluded, "
              "%d not given to this container",
          npci, ng, why[AFF_GPU_NO_DRIVER], why[AFF_GPU_EXCLUDED],
          why[AFF_GPU_NOT_GIVEN]);
    REASON(it, "GPUs counts the GPUs CUDA can use here: run by the driver "
               "(/proc/driver/nvidia/gpus), not excluded, their /dev/nvidiaN "
               "given to this container");
  }
  /* The driver lost a GPU that is still on the bus: its own failure, for
   * the job that expects a count (a bare node may keep one off on purpose). */
  if (why[AFF_GPU_NO_DRIVER] && o->expect_gpus >= 0 &&
      (it = item(c, "gpu.driver", "GPUs without the driver", DOC_FAIL, 0))) {
    VALUE(it, "%d of %d", why[AFF_GPU_NO_DRIVER], npci);
    REASON(it, "%d GPU%s on the PCI bus but not in the driver's list "
               "(/proc/driver/nvidia/gpus): the driver failed to start %s",
           why[AFF_GPU_NO_DRIVER], why[AFF_GPU_NO_DRIVER] == 1 ? " is" : "s are",
           why[AFF_GPU_NO_DRIVER] == 1 ? "it" : "them");
    FIX(it, "dmesg | grep -i -E 'nvrm|rminitadapter|xid'; nvidia-smi -q; "
            "reset the GPU (nvidia-smi -r) or reboot");
  }
  if ((it = item(c, "gpu.count", "GPUs", DOC_PASS, 1))) {
    VALUE(it, "%d", ng);
    /* --expect-gpus first: a node that lost every GPU is the worst case of
     * a missing GPU, not a CPU-only node */
    if (o->expect_gpus >= 0 && ng != o->expect_gpus &&
        (npci < o->expect_gpus || npci == ng)) {
      it->status = DOC_FAIL;
      REASON(it, "%d GPUs expected, %d found: a GPU fell off the bus or is not "
                 "passed through",
             o->expect_gpus, ng);
      FIX(it, "dmesg | grep -i -E 'nvrm|xid|pcie'; reseat or replace the card");
    } else if (o->expect_gpus >= 0 && ng != o->expect_gpus) {
      it->status = DOC_FAIL;
      REASON(it, "%d GPUs expected, %d usable here of %d on the PCI bus (%d "
                 "not run by the driver, %d excluded, %d not given to this "
                 "container)",
             o->expect_gpus, ng, npci, why[AFF_GPU_NO_DRIVER],
             why[AFF_GPU_EXCLUDED], why[AFF_GPU_NOT_GIVEN]);
      FIX(it, "see the GPUs without the driver; for excluded GPUs check "
              "NVreg_ExcludedGpus; in a container, the GPUs its runtime or "
              "device plugin gives it");
    } else if (ng == 0 && npci > 0) {
      it->status = DOC_WARN;
      REASON(it, "no GPU usable here of the %d on the PCI bus (see GPUs on the "
                 "PCI bus)", npci);
      FIX(it, "check the driver (nvidia-smi), NVreg_ExcludedGpus, and the "
              "GPUs this container was given");
    } else if (ng == 0) {
      it->status = DOC_WARN;
      REASON(it, "no GPU found: no NVIDIA display/3D controller on the PCI bus "
                 "(lspci | grep -i nvidia shows none)");
      FIX(it, "check that the GPUs are seated and powered, and visible to this "
              "container or VM; a CPU-only node can still run CPU workers");
    }
  }
  if (ng == 0)
    return;
  if (si->gpu_model[0])
    lu_strlcpy(model, si->gpu_model, sizeof(model));
  else {
    if (aff_gpu_model_name(g[0].device))
      lu_strlcpy(model, aff_gpu_model_name(g[0].device), sizeof(model));
    else
      snprintf(model, sizeof(model), "NVIDIA [10de:%04x]", g[0].device);
  }
  if ((it = item(c, "gpu.model", "GPU model", DOC_INFO, 1))) {
    int mixed = 0;
    for (int i = 1; i < ng; i++)
      mixed |= g[i].device != g[0].device;
    if (si->gpu_mem_bytes)
      VALUE(it, "%s, %.0f GiB", model, (double)si->gpu_mem_bytes / (1u << 30));
    else
      VALUE(it, "%s", model);
    if (mixed) {
      it->status = DOC_WARN;
      REASON(it, "different GPU models in one node: the slowest sets the pace "
                 "and NCCL may pick poor paths");
      FIX(it, "run one model per node (or restrict CUDA_VISIBLE_DEVICES)");
    }
  }
  /* Driver: loaded module and its version (nvidia-smi's driver_version). */
  if ((it = item(c, "driver", "NVIDIA driver", DOC_PASS, 1))) {
    if (si->driver[0]) {
      VALUE(it, "%s", si->driver);
    } else {
      it->status = DOC_FAIL;
      VALUE(it, "not loaded");
      REASON(it, "GPUs are present but no NVIDIA driver answers "
                 "(/proc/driver/nvidia/version is missing)");
      FIX(it, "install the driver, blacklist nouveau, reboot; "
              "check with nvidia-smi");
    }
  }
  /* Persistence mode: NVML when asked, else the daemon. */
  if ((it = item(c, "persistence", "Persistence mode", DOC_PASS, 1))) {
    int daemon = 0;
    char (*procs)[64] = calloc(4096, sizeof(*procs));
    int np = procs ? list_dir(c, "/proc", procs, 4096) : 0;
    for (int i = 0; i < np && !daemon; i++) {
      char path[128], comm[64];
      if (procs[i][0] < '0' || procs[i][0] > '9')
        continue;
      snprintf(path, sizeof(path), "/proc/%s/comm", procs[i]);
      if (rd(c, path, comm, sizeof(comm)) > 0 &&
          strncmp(comm, "nvidia-persiste", 15) == 0)
        daemon = 1;
    }
    free(procs);
    if (si->persistence >= 0) {
      VALUE(it, "on for %d of %d GPUs%s", si->persistence, ng,
            daemon ? " (nvidia-persistenced running)" : "");
      if (si->persistence < ng && !daemon)
        it->status = DOC_WARN;
    } else {
      VALUE(it, daemon ? "nvidia-persistenced running" : "nvidia-persistenced not running");
      if (!daemon)
        it->status = DOC_WARN;
    }
    if (it->status == DOC_WARN) {
      REASON(it, "without persistence the driver tears GPU state down between "
                 "jobs: slow starts, and NCCL init timing out on big nodes");
      FIX(it, "systemctl enable --now nvidia-persistenced");
    }
  }
  /* PCIe links: x8 halves the bandwidth of x16. */
  for (int i = 0; i < ng; i++) {
    char id[128], title[96];
    snprintf(id, sizeof(id), "gpu.pcie.%s", g[i].busid);
    snprintf(title, sizeof(title), "GPU %s PCIe", g[i].busid);
    if (g[i].width == 0)
      continue;
    if (!(it = item(c, id, title, DOC_PASS, 0)))
      break;
    VALUE(it, "x%d (max x%d) %.1f GT/s (max %.1f), NUMA %d", g[i].width,
          g[i].width_max, g[i].gts, g[i].gts_max, g[i].numa);
    if (g[i].width_max && g[i].width < g[i].width_max) {
      it->status = DOC_WARN;
      REASON(it, "the link trained at x%d of x%d: %d%% of the bandwidth", g[i].width,
             g[i].width_max, 100 * g[i].width / g[i].width_max);
      FIX(it, "reseat the GPU or move it to an x16 slot; check the riser");
    } else if (g[i].gts_max > 0 && g[i].gts + 0.01 < g[i].gts_max) {
      /* Idle GPUs lower the link speed to save power. */
      REASON(it, "below its maximum speed: normal for an idle GPU (power "
                 "saving); check again under load (nvidia-smi -q -d "
                 "PERFORMANCE)");
      it->status = DOC_INFO;
    }
  }
}

/* nouveau must not hold the GPUs. */
static void check_nouveau(ctx_t *c) {
  doc_item_t *it;
  int loaded = exists(c, "/sys/module/nouveau");
  if ((it = item(c, "nouveau", "nouveau driver", loaded ? DOC_FAIL : DOC_PASS, 1))) {
    VALUE(it, loaded ? "loaded" : "not loaded");
    if (loaded) {
      REASON(it, "nouveau conflicts with the NVIDIA driver");
      FIX(it, "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > "
              "/etc/modprobe.d/blacklist-nouveau.conf; dracut --force (or "
              "update-initramfs -u); reboot");
    }
  }
}

static void check_versions(ctx_t *c, const doc_opts_t *o, const aff_sysinfo_t *si,
                           int ngpus) {
  doc_item_t *it;
  char rt[32], drv[32], nv[32];
  if (!o->probe_libs)
    return;
  aff_cuda_version_str(si->cuda_runtime, rt, sizeof(rt));
  aff_cuda_version_str(si->cuda_driver, drv, sizeof(drv));
  if ((it = item(c, "cuda", "CUDA", DOC_PASS, 1))) {
    VALUE(it, "runtime %s%s%s%s, driver supports %s", rt,
          si->cudart_path[0] ? " (" : "", si->cudart_path,
          si->cudart_path[0] ? ")" : "", drv);
    if (si->cuda_driver == 0 && si->cuda_runtime != 0) {
      /* a runtime without a driver to run it: nothing CUDA works */
      it->status = ngpus > 0 ? DOC_FAIL : DOC_INFO;
      REASON(it, "no CUDA driver (libcuda.so.1) answers%s",
             ngpus > 0 ? ": every CUDA call will fail" : ", and no GPU is "
                         "present: nothing here uses CUDA");
      if (ngpus > 0)
        FIX(it, "install the NVIDIA driver's user-space libraries matching "
                "the kernel module");
    } else if (si->cuda_runtime == 0 && si->cuda_driver == 0) {
      it->status = ngpus > 0 ? DOC_WARN : DOC_INFO;
      REASON(it, "neither a CUDA runtime nor a driver found%s",
             ngpus > 0 ? " (PyTorch wheels bring their own runtime, not the "
                         "driver)" : ", and no GPU is present");
    } else if (si->cuda_runtime == 0) {
      it->status = ngpus > 0 ? DOC_WARN : DOC_INFO;
      REASON(it, "no libcudart found on the library path, $CUDA_HOME/lib64 or "
                 "/usr/local/cuda/lib64 (PyTorch wheels bring their own)");
      FIX(it, "install the CUDA toolkit chosen for the cluster "
              "and add /usr/local/cuda/lib64 to the library path");
    } else if (si->cuda_driver > 0 && si->cuda_runtime > si->cuda_driver) {
      it->status = DOC_FAIL;
      REASON(it, "CUDA %s needs a newer driver than this one (it supports %s): "
                 "every CUDA call fails with 'driver version is insufficient'",
             rt, drv);
      FIX(it, "upgrade the driver, or use a CUDA build the driver supports");
    }
  }
  aff_nccl_version_str(si->nccl, nv, sizeof(nv));
  if ((it = item(c, "nccl", "NCCL", DOC_PASS, 1))) {
    VALUE(it, "%s%s%s%s", nv, si->nccl_path[0] ? " (" : "", si->nccl_path,
          si->nccl_path[0] ? ")" : "");
    if (si->nccl == 0) {
      it->status = ngpus > 0 ? DOC_WARN : DOC_INFO;
      REASON(it, "no libnccl.so.2 found (PyTorch wheels bundle their own; "
                 "compiled trainers need it)");
      FIX(it, "install NCCL (libnccl2 / nccl from the CUDA repository) or set "
              "LD_LIBRARY_PATH");
    }
  }
}

/* ---- network ------------------------------------------------------------------------- */

typedef struct hca_s {
  char name[64];
  int numa;
  int active;
} hca_t;

static const char *port_state_text(int s) {
  static const char *const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
                                      "ACTIVE_DEFER"};
  return s >= 0 && s < (int)LU_ARRAY_SIZE(names) ? names[s] : "unknown";
}

/* Whether port `port` of hca is one the job is told to use: named in
 * NCCL_IB_HCA ("mlx5_0:1,mlx5_1", prefixes unless "=") or LAUNCH_HCAS
 * (names) of the environment linted. An exclusion list names none. */
static int port_wanted(const doc_opts_t *o, const char *hca, int port) {
  static const char *const vars[] = {"NCCL_IB_HCA=", "LAUNCH_HCAS="};
  for (int i = 0; o->environ && o->environ[i]; i++)
    for (int v = 0; v < 2; v++) {
      const char *s = o->environ[i];
      size_t vl = strlen(vars[v]);
      int exact = 0;
      if (strncmp(s, vars[v], vl) != 0 || s[vl] == '^')
        continue;
      s += vl;
      if (*s == '=') {
        exact = 1;
        s++;
      }
      while (*s) {
        size_t len = strcspn(s, ","), nl = strcspn(s, ":,");
        int p = nl < len ? atoi(s + nl + 1) : 0;
        if (nl > 0 && (exact ? nl == strlen(hca) : nl <= strlen(hca)) &&
            strncmp(s, hca, nl) == 0 && (p == 0 || p == port))
          return 1;
        s += len + (s[len] == ',');
      }
    }
  return 0;
}

static int check_ib(ctx_t *c, const doc_opts_t *o, hca_t *hcas, int max) {
  const aff_facts_t *fa = c->facts;
  int nh = 0;
  doc_item_t *it;
  for (int i = 0; i < fa->nhcas; i++) {
    const aff_facts_hca_t *fh = &fa->hcas[i];
    int active = 0;
    if (nh < max) {
      memset(&hcas[nh], 0, sizeof(hcas[nh]));
      lu_strlcpy(hcas[nh].name, fh->name, sizeof(hcas[nh].name));
      hcas[nh].numa = fh->numa;
    }
    for (int p = 0; p < fh->nports; p++)
      active |= fh->ports[p].state == 4;
    for (int p = 0; p < fh->nports; p++) {
      const aff_ib_port_t *pt = &fh->ports[p];
      char id[160], title[160];
      int st = pt->state, r = atoi(pt->rate), best_rate = 0;
      /* The fastest active port of the same link layer sets what "slow"
       * means: a 100G RoCE storage NIC is no half-speed cable next to
       * 200G InfiniBand. */
      for (int k = 0; k < fa->nhcas; k++)
        for (int q = 0; q < fa->hcas[k].nports; q++) {
          const aff_ib_port_t *o2 = &fa->hcas[k].ports[q];
          if (o2->state == 4 && strcmp(o2->link_layer, pt->link_layer) == 0 &&
              atoi(o2->rate) > best_rate)
            best_rate = atoi(o2->rate);
        }
      if (nh < max && st == 4)
        hcas[nh].active = 1;
      snprintf(id, sizeof(id), "ib.%.64s.%d", fh->name, p + 1);
      snprintf(title, sizeof(title), "IB %.64s port %d", fh->name, p + 1);
      if (!(it = item(c, id, title, st == 4 ? DOC_PASS : DOC_FAIL, 0)))
        return nh;
      VALUE(it, "%s, %s, %s", port_state_text(st),
            pt->rate[0] ? pt->rate : "rate unknown",
            pt->link_layer[0] ? pt->link_layer : "link layer unknown");
      if (st != 4 && active && !port_wanted(o, fh->name, p + 1)) {
        /* the uncabled second port of a dual-port card: NCCL uses the
         * other, unless the job names this one */
        it->status = DOC_INFO;
        REASON(it, "the port is %s while another port of %s is ACTIVE: "
                   "fine for an unused port (NCCL uses Active ports only); "
                   "it fails when NCCL_IB_HCA or LAUNCH_HCAS names it",
               port_state_text(st), fh->name);
      } else if (st != 4) {
        REASON(it, "the port is %s%s: NCCL uses Active ports only",
               port_state_text(st),
               active ? " and NCCL_IB_HCA or LAUNCH_HCAS names it"
                      : ", and no port of this HCA is ACTIVE");
        FIX(it, "check the cable and the switch port LED, that a subnet "
                "manager runs (sminfo; opensm or the switch's SM), then "
                "ibstat %s",
            fh->name);
      } else if (best_rate > 0 && r > 0 && r < best_rate) {
        it->status = DOC_WARN;
        REASON(it, "%d Gb/s while other %s ports run %d Gb/s: a half-speed "
                   "cable or module",
               r, pt->link_layer[0] ? pt->link_layer : "", best_rate);
        FIX(it, "replace the cable/transceiver; ibstat should show the same "
                "Rate on every port of a link layer");
      }
      /* the HCA's own PCIe link */
      if (p == 0) {
        int w = fh->link.width, wm = fh->link.width_max;
        if (w > 0 && wm > 0 && w < wm) {
          char pid[128], ptt[96];
          doc_item_t *pi;
          snprintf(pid, sizeof(pid), "ib.%.64s.pcie", fh->name);
          snprintf(ptt, sizeof(ptt), "IB %.64s PCIe", fh->name);
          if ((pi = item(c, pid, ptt, DOC_WARN, 0))) {
            VALUE(pi, "x%d of x%d", w, wm);
            REASON(pi, "the HCA runs at PCIe x%d but supports x%d: %d%% of the "
                       "bandwidth",
                   w, wm, 100 * w / wm);
            FIX(pi, "move the card to an x16 slot on the GPUs' NUMA side");
          }
        }
      }
    }
    if (nh < max)
      nh++;
  }
  return nh;
}

static void check_nics(ctx_t *c) {
  /* the facts' names: every interface, however many veths come first */
  const aff_facts_t *fa = c->facts;
  doc_item_t *it;
  for (int i = 0; i < fa->nnetdevs; i++) {
    const char *name = fa->netdevs[i];
    char path[256], oper[32] = "", speed[32] = "", id[128], title[96];
    long mbps;
    snprintf(path, sizeof(path), "/sys/class/net/%.64s/device", name);
    if (!exists(c, path))
      continue; /* lo, bridges, veths, bonds: not hardware */
    snprintf(path, sizeof(path), "/sys/class/net/%.64s/operstate", name);
    rd(c, path, oper, sizeof(oper));
    snprintf(path, sizeof(path), "/sys/class/net/%.64s/speed", name);
    mbps = rd(c, path, speed, sizeof(speed)) > 0 ? strtol(speed, NULL, 10) : -1;
    snprintf(id, sizeof(id), "nic.%.64s", name);
    snprintf(title, sizeof(title), "NIC %.64s", name);
    if (!(it = item(c, id, title, strcmp(oper, "up") == 0 ? DOC_PASS : DOC_INFO, 0)))
      return;
    if (mbps > 0)
      VALUE(it, "%s, %ld Mb/s", oper[0] ? oper : "unknown", mbps);
    else
      VALUE(it, "%s, speed unknown", oper[0] ? oper : "unknown");
    if (strcmp(oper, "up") != 0)
      REASON(it, "link is not up: fine for an unused port, not for the "
                 "training network (see ip -br link, ethtool)");
  }
}

/* GPUs and the HCAs on their NUMA node. */
static void check_placement(ctx_t *c, const gpu_t *g, int ng, const hca_t *h,
                            int nh) {
  doc_item_t *it;
  char bad[256] = "", hl[256] = "";
  int any_active = 0;
  if (ng == 0 || nh == 0)
    return;
  for (int k = 0; k < nh; k++) {
    any_active |= h[k].active;
    snprintf(hl + strlen(hl), sizeof(hl) - strlen(hl), "%s%.64s NUMA %d",
             k ? ", " : "", h[k].name, h[k].numa);
  }
  for (int i = 0; i < ng; i++) {
    int local = 0;
    if (g[i].numa < 0)
      continue;
    for (int k = 0; k < nh; k++)
      local |= h[k].active && h[k].numa == g[i].numa;
    if (!local)
      snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%s%s (NUMA %d)",
               bad[0] ? ", " : "", g[i].busid, g[i].numa);
  }
  if (!(it = item(c, "placement", "GPU/NIC NUMA placement",
                  bad[0] && any_active ? DOC_WARN : DOC_PASS, 1)))
    return;
  VALUE(it, "%s", hl);
  if (bad[0] && any_active) {
    REASON(it, "GPUs without an active HCA on their NUMA node: %s; their "
               "network traffic crosses the socket link (on V100 nodes at "
               "half the speed)",
           bad);
    FIX(it, "put an HCA in an x16 slot on each socket that holds GPUs; until "
            "then launch binds those ranks to their GPU's node anyway");
  }
}

static void check_peermem(ctx_t *c, int ngpus, int nhcas) {
  doc_item_t *it;
  int loaded;
  if (ngpus == 0 || nhcas == 0)
    return;
  loaded = exists(c, "/sys/module/nvidia_peermem") || exists(c, "/sys/module/nv_peer_mem");
  if ((it = item(c, "peermem", "GPUDirect RDMA module", loaded ? DOC_PASS : DOC_WARN, 1))) {
    VALUE(it, loaded ? "loaded" : "not loaded");
    if (!loaded) {
      REASON(it, "without nvidia-peermem NCCL cannot use GPUDirect RDMA: "
                 "traffic bounces through host memory");
      FIX(it, "modprobe nvidia-peermem, and add it to /etc/modules-load.d/");
    }
  }
}

/* ---- rendezvous port (as nc -zv host port) ---------------------------------------- */

static void check_rdzv(ctx_t *c, const doc_opts_t *o) {
  lu_endpoint_t ep;
  doc_item_t *it;
  struct addrinfo hints, *ai = NULL;
  char port[16];
  int timeout = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 3000;
  int rc, err = 0;
  uint64_t t0;
  if (o->rdzv_endpoint == NULL)
    return;
  if (!(it = item(c, "rdzv", "Rendezvous endpoint", DOC_FAIL, 0)))
    return;
  VALUE(it, "%s", o->rdzv_endpoint);
  if (lu_endpoint_parse(o->rdzv_endpoint, RDZV_DEFAULT_PORT, &ep) != 0 ||
      ep.is_unix) {
    REASON(it, "'%s' is not HOST:PORT", o->rdzv_endpoint);
    FIX(it, "give --rdzv-endpoint HOST:PORT, e.g. 10.10.10.11:29400");
    return;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  snprintf(port, sizeof(port), "%d", ep.port);
  if ((rc = getaddrinfo(ep.host, port, &hints, &ai)) != 0) {
    REASON(it, "%s does not resolve: %s", ep.host, gai_strerror(rc));
    FIX(it, "use an address, or add the host to /etc/hosts on every node");
    return;
  }
  t0 = lu_now_ms();
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct pollfd pf;
    socklen_t sl = sizeof(err);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      err = 0;
    } else if (errno != EINPROGRESS) {
      err = errno;
    } else {
      int left = timeout - (int)(lu_now_ms() - t0);
      pf.fd = fd;
      pf.events = POLLOUT;
      pf.revents = 0;
      rc = left > 0 ? poll(&pf, 1, left) : 0;
      if (rc == 0)
        err = ETIMEDOUT;
      else if (rc < 0)
        err = errno;
      else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
        err = errno;
    }
    if (err == 0 && lu_self_connected(fd))
      err = ECONNREFUSED; /* nothing listens: the socket met itself */
    close(fd);
    if (err == 0)
      break;
  }
  freeaddrinfo(ai);
  if (err == 0) {
    it->status = DOC_PASS;
    VALUE(it, "%s:%d reachable (%llu ms)", ep.host, ep.port,
          (unsigned long long)(lu_now_ms() - t0));
    return;
  }
  if (err == ECONNREFUSED) {
    REASON(it, "connection refused: nothing listens on %s:%d yet, or a "
               "firewall rejects it",
           ep.host, ep.port);
    FIX(it, "start the server (launch server --port %d) or the node-0 agent "
            "first; open the port: firewall-cmd --add-port=%d/tcp --permanent "
            "&& firewall-cmd --reload (check: nc -zv %s %d)",
        ep.port, ep.port, ep.host, ep.port);
  } else if (err == ETIMEDOUT) {
    REASON(it, "no answer from %s:%d within %d ms: a firewall drops the "
               "packets or the host is down",
           ep.host, ep.port, timeout);
    FIX(it, "firewall-cmd --list-all on %s; open only this port "
            "(firewall-cmd --add-port=%d/tcp --permanent), do not stop "
            "firewalld",
        ep.host, ep.port);
  } else {
    REASON(it, "%s:%d unreachable: %s", ep.host, ep.port, strerror(err));
    FIX(it, "check routes and addresses (ip -br addr, ip route get %s)", ep.host);
  }
}

/* ---- NCCL environment --------------------------------------------------------------- */

static void check_nccl_env(ctx_t *c, const doc_opts_t *o, const aff_sysinfo_t *si,
                           const hca_t *h, int nh) {
  prof_t *p = NULL;
  env_t *e = NULL;
  env_node_t *node = NULL;
  env_finding_t *f = NULL;
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  env_contract_t kc;
  char err[512];
  int nf = 0;
  doc_item_t *it;
  char hcas[256] = "", first[96] = "";
  (void)h;
  if (o->nccl_profile && prof_load(o->nccl_profile, &p, err, sizeof(err)) != 0) {
    if ((it = item(c, "nccl.profile", "NCCL profile", DOC_FAIL, 1))) {
      VALUE(it, "%s", o->nccl_profile);
      REASON(it, "%s", err);
      FIX(it, "fix the file or pick a built-in profile (launch env "
              "--list-profiles)");
    }
    return;
  }
  /* Templates see this node's HCAs. */
  for (int k = 0; k < nh; k++)
    if (h[k].active)
      snprintf(hcas + strlen(hcas), sizeof(hcas) - strlen(hcas), "%s%.64s",
               hcas[0] ? "," : "", h[k].name);
  /* The worker contract's binding rows that a node-wide check can fill,
   * through the agent's builder (env_build_rank). */
  env_contract_init(&kc);
  if (hcas[0]) {
    snprintf(first, sizeof(first), "%.*s", (int)strcspn(hcas, ","), hcas);
    kc.hcas = hcas;
    kc.hca = first;
  }
  ro.base = o->environ;
  ro.contract = &kc;
  ro.profile = p;
  if (env_build_rank(&ro, &e) != 0 || (node = malloc(sizeof(*node))) == NULL) {
    c->oom = 1;
    goto out;
  }
  env_node_from_facts(node, c->facts);
  node->nccl_version = si->nccl;
  if (env_lint(e, node, &f, &nf) != 0) {
    c->oom = 1;
    goto out;
  }
  if (nf == 0 && (it = item(c, "nccl.env", "NCCL environment", DOC_PASS, 1)))
    VALUE(it, "%s: no findings", p ? prof_name(p) : "inherited environment");
  for (int i = 0; i < nf; i++) {
    char id[128], title[96];
    snprintf(id, sizeof(id), "nccl.%s.%s", f[i].rule, f[i].var);
    snprintf(title, sizeof(title), "NCCL %s", f[i].var);
    if (!(it = item(c, id, title,
                    f[i].sev == ENV_SEV_ERROR  ? DOC_FAIL
                    : f[i].sev == ENV_SEV_WARN ? DOC_WARN
                                               : DOC_INFO,
                    1)))
      break;
    VALUE(it, "%s%s%s%s%s", f[i].var, f[i].value[0] ? "=" : "", f[i].value,
          f[i].where[0] ? " from " : "", f[i].where);
    REASON(it, "[%s] %s", f[i].rule, f[i].why);
    FIX(it, "%s", f[i].fix);
  }
  /* The values themselves, compared between nodes (--nnodes): the NCCL
   * variables a rank gets, except those a template fills per node. */
  {
    char all[4096] = "";
    size_t used = 0;
    uint32_t fnv = 2166136261u;
    int nv = 0;
    for (int i = 0; i < env_count(e); i++) {
      const env_var_t *v = env_at(e, i);
      if (strncmp(v->key, "NCCL_", 5) != 0 || v->tmpl != NULL)
        continue;
      nv++;
      for (const char *s = v->key; *s; s++)
        fnv = (fnv ^ (uint8_t)*s) * 16777619u;
      fnv = (fnv ^ '=') * 16777619u;
      for (const char *s = v->value; *s; s++)
        fnv = (fnv ^ (uint8_t)*s) * 16777619u;
      fnv = (fnv ^ ' ') * 16777619u;
      used += (size_t)snprintf(all + LU_MIN(used, sizeof(all) - 1),
                               sizeof(all) - LU_MIN(used, sizeof(all) - 1),
                               "%s%s=%s", used ? " " : "", v->key, v->value);
    }
    if ((it = item(c, "nccl.vars", "NCCL variables", DOC_INFO, 1))) {
      if (nv == 0)
        VALUE(it, "none set");
      else if (used < sizeof(it->value))
        VALUE(it, "%s", all);
      else
        VALUE(it, "%d variables (FNV-1a %08x)", nv, fnv);
    }
  }
out:
  free(f);
  free(node);
  env_free(e);
  prof_free(p);
}

/* ---- collect ------------------------------------------------------------------------ */

int doc_collect(const doc_opts_t *opts, doc_report_t **out) {
  doc_opts_t o = DOC_OPTS_INIT;
  ctx_t c;
  aff_sysinfo_t si;
  gpu_t *gpus;
  aff_facts_t *facts = NULL;
  hca_t hcas[AFF_FACTS_HCAS];
  int ng = 0, nh;
  if (opts)
    memcpy(&o, opts, LU_MIN(sizeof(o), opts->size ? opts->size : sizeof(o)));
  *out = NULL;
  memset(&c, 0, sizeof(c));
  c.root = o.root && strcmp(o.root, "/") != 0 ? o.root : "";
  if ((c.r = calloc(1, sizeof(*c.r))) == NULL)
    return RDZV_ENOMEM;
  if ((gpus = calloc(64, sizeof(*gpus))) == NULL ||
      (facts = malloc(sizeof(*facts))) == NULL) {
    free(gpus);
    free(c.r);
    return RDZV_ENOMEM;
  }
  aff_facts_probe(facts, c.root[0] ? c.root : NULL);
  c.facts = facts;
  memset(&si, 0, sizeof(si));
  si.ngpus = -1;
  si.persistence = -1;
  if (o.probe_libs)
    aff_sysinfo_probe(&si, c.root[0] ? c.root : NULL);
  else {
    /* the driver version needs no library */
    char buf[512];
    const char *p;
    if (rd(&c, "/proc/driver/nvidia/version", buf, sizeof(buf)) > 0 &&
        (p = strstr(buf, "Module")) != NULL) {
      for (; *p; p++)
        if (*p >= '0' && *p <= '9' && p[-1] == ' ') {
          snprintf(si.driver, sizeof(si.driver), "%.*s",
                   (int)strspn(p, "0123456789."), p);
          break;
        }
    }
  }
  check_host(&c);
  check_cpus(&c);
  check_kernel_settings(&c);
  check_gpus(&c, &o, &si, gpus, &ng);
  check_nouveau(&c);
  check_versions(&c, &o, &si, ng);
  nh = check_ib(&c, &o, hcas, AFF_FACTS_HCAS);
  check_nics(&c);
  check_placement(&c, gpus, ng, hcas, nh);
  check_peermem(&c, ng, nh);
  check_rdzv(&c, &o);
  check_nccl_env(&c, &o, &si, hcas, nh);
  free(gpus);
  free(facts);
  if (c.oom) {
    doc_free(c.r);
    return RDZV_ENOMEM;
  }
  *out = c.r;
  return 0;
}

void doc_free(doc_report_t *r) {
  if (r == NULL)
    return;
  free(r->items);
  free(r);
}

const char *doc_host(const doc_report_t *r) { return r->host; }
int doc_count(const doc_report_t *r) { return r->n; }

const doc_item_t *doc_item(const doc_report_t *r, int i) {
  return i >= 0 && i < r->n ? &r->items[i] : NULL;
}

const doc_item_t *doc_find(const doc_report_t *r, const char *id) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->items[i].id, id) == 0)
      return &r->items[i];
  return NULL;
}

doc_status_t doc_worst(const doc_report_t *r) {
  doc_status_t w = DOC_PASS;
  for (int i = 0; i < r->n; i++)
    if (r->items[i].status > w)
      w = r->items[i].status;
  return w;
}

/* ---- output ---------------------------------------------------------------------------- */

int doc_to_text(const doc_report_t *r, char **out) {
  lu_buf_t b = LU_BUF_INIT;
  int count[4] = {0, 0, 0, 0};
  lu_buf_printf(&b, "launch doctor: %s\n", r->host);
  for (int i = 0; i < r->n; i++) {
    const doc_item_t *it = &r->items[i];
    static const char *const tag[] = {"PASS", "INFO", "WARN", "FAIL"};
    count[it->status]++;
    lu_buf_printf(&b, "  %s  %-26s %s\n", tag[it->status], it->title, it->value);
    if (it->reason[0] && it->status != DOC_PASS)
      lu_buf_printf(&b, "        why: %s\n", it->reason);
    if (it->fix[0] && it->status != DOC_PASS)
      lu_buf_printf(&b, "        fix: %s\n", it->fix);
  }
  lu_buf_printf(&b, "summary: %d pass, %d info, %d warn, %d fail\n", count[0],
                count[1], count[2], count[3]);
  return lu_buf_finish(&b, out, NULL);
}

int doc_to_json(const doc_report_t *r, char **out) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < r->n; i++)
    count[r->items[i].status]++;
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "host", r->host);
  lu_json_str(&j, "worst", doc_status_name(doc_worst(r)));
  lu_json_obj(&j, "counts");
  for (int s = 0; s < 4; s++)
    lu_json_int(&j, doc_status_name((doc_status_t)s), count[s]);
  lu_json_end_obj(&j);
  lu_json_arr(&j, "items");
  for (int i = 0; i < r->n; i++) {
    const doc_item_t *it = &r->items[i];
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "id", it->id);
    lu_json_str(&j, "title", it->title);
    lu_json_str(&j, "status", doc_status_name(it->status));
    lu_json_bool(&j, "same_on_all_nodes", it->same);
    lu_json_str(&j, "value", it->value);
    lu_json_str(&j, "reason", it->reason);
    lu_json_str(&j, "fix", it->fix);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  return lu_buf_finish(&b, out, NULL);
}

int doc_to_compact(const doc_report_t *r, char **out, size_t *len) {
  lu_buf_t b = LU_BUF_INIT;
  lu_buf_puts(&b, DOC_MAGIC "\nhost\t");
  lu_buf_put_escaped(&b, r->host, 1);
  lu_buf_puts(&b, "\n");
  for (int i = 0; i < r->n; i++) {
    const doc_item_t *it = &r->items[i];
    lu_buf_put_escaped(&b, it->id, 1);
    lu_buf_printf(&b, "\t%s\t%d\t", doc_status_name(it->status), it->same);
    lu_buf_put_escaped(&b, it->title, 1);
    lu_buf_puts(&b, "\t");
    lu_buf_put_escaped(&b, it->value, 1);
    lu_buf_puts(&b, "\t");
    lu_buf_put_escaped(&b, it->reason, 1);
    lu_buf_puts(&b, "\t");
    lu_buf_put_escaped(&b, it->fix, 1);
    lu_buf_puts(&b, "\n");
  }
  return lu_buf_finish(&b, out, len);
}

/* Unescape [s, e) into dst (n bytes). RET 0, -1 bad escape or too long. */
static int get_field(const char *s, const char *e, char *dst, size_t n) {
  size_t o = 0;
  while (s < e) {
    char ch = *s++;
    if (ch == '\\') {
      if (s >= e)
        return -1;
      ch = *s++;
      ch = ch == 't' ? '\t' : ch == 'n' ? '\n' : ch == 'r' ? '\r' : ch == '\\' ? '\\' : 0;
      if (ch == 0)
        return -1;
    } else if (ch == '\0') {
      return -1;
    }
    if (o + 1 >= n)
      return -1;
    dst[o++] = ch;
  }
  dst[o] = '\0';
  return 0;
}

int doc_from_compact(const char *text, size_t len, doc_report_t **out) {
  doc_report_t *r;
  ctx_t c;
  const char *p = text, *end = text + len;
  size_t ml = strlen(DOC_MAGIC);
  int line = 0;
  *out = NULL;
  if (len > DOC_MAX_TEXT)
    return RDZV_ETOOBIG;
  if (len < ml + 1 || memcmp(text, DOC_MAGIC, ml) != 0 || text[ml] != '\n')
    return RDZV_EPROTO;
  if ((r = calloc(1, sizeof(*r))) == NULL)
    return RDZV_ENOMEM;
  memset(&c, 0, sizeof(c));
  c.r = r;
  c.root = "";
  p += ml + 1;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *f[7];
    const char *q;
    int nfields = 0;
    if (nl == NULL)
      goto bad;
    f[nfields++] = p;
    for (q = p; q < nl && nfields < 7; q++)
      if (*q == '\t')
        f[nfields++] = q + 1;
    for (; q < nl; q++)
      if (*q == '\t')
        goto bad; /* too many fields */
    if (line++ == 0) {
      if (nfields != 2 || (size_t)(f[1] - f[0]) != 5 || memcmp(f[0], "host\t", 5) != 0 ||
          get_field(f[1], nl, r->host, sizeof(r->host)) != 0)
        goto bad;
    } else {
      doc_item_t tmp, *it;
      char st[8], same[4];
      int s = -1;
      if (nfields != 7)
        goto bad;
      memset(&tmp, 0, sizeof(tmp));
      if (get_field(f[0], f[1] - 1, tmp.id, sizeof(tmp.id)) != 0 ||
          get_field(f[1], f[2] - 1, st, sizeof(st)) != 0 ||
          get_field(f[2], f[3] - 1, same, sizeof(same)) != 0 ||
          get_field(f[3], f[4] - 1, tmp.title, sizeof(tmp.title)) != 0 ||
          get_field(f[4], f[5] - 1, tmp.value, sizeof(tmp.value)) != 0 ||
          get_field(f[5], f[6] - 1, tmp.reason, sizeof(tmp.reason)) != 0 ||
          get_field(f[6], nl, tmp.fix, sizeof(tmp.fix)) != 0 || tmp.id[0] == '\0')
        goto bad;
      for (int k = 0; k < 4; k++)
        if (strcmp(st, doc_status_name((doc_status_t)k)) == 0)
          s = k;
      if (s < 0 || (strcmp(same, "0") != 0 && strcmp(same, "1") != 0))
        goto bad;
      if (r->n >= DOC_MAX_ITEMS) {
        doc_free(r);
        return RDZV_ETOOBIG;
      }
      if ((it = item(&c, tmp.id, tmp.title, (doc_status_t)s, same[0] == '1')) == NULL) {
        doc_free(r);
        return RDZV_ENOMEM;
      }
      memcpy(it->value, tmp.value, sizeof(it->value));
      memcpy(it->reason, tmp.reason, sizeof(it->reason));
      memcpy(it->fix, tmp.fix, sizeof(it->fix));
    }
    p = nl + 1;
  }
  if (line == 0)
    goto bad;
  *out = r;
  return 0;
bad:
  doc_free(r);
  return RDZV_EPROTO;
}

int doc_diff(const doc_report_t *const *r, const char *const *names, int n,
             char **report) {
  /* The items that must match, compared as fingerprints are. */
  env_fp_t **fps = calloc((size_t)n + 1, sizeof(*fps));
  const char **nm = calloc((size_t)n + 1, sizeof(*nm));
  int rc = fps && nm ? 0 : RDZV_ENOMEM;
  for (int k = 0; rc == 0 && k < n; k++) {
    nm[k] = names && names[k] ? names[k] : r[k]->host;
    rc = env_fp_new(&fps[k]);
    for (int i = 0; rc == 0 && i < r[k]->n; i++)
      if (r[k]->items[i].same)
        rc = env_fp_set(fps[k], r[k]->items[i].id, r[k]->items[i].value);
  }
  if (rc == 0)
    rc = env_fp_diff((const env_fp_t *const *)fps, nm, n, report);
  for (int k = 0; fps && k < n; k++)
    env_fp_free(fps[k]);
  free(fps);
  free(nm);
  return rc;
}
