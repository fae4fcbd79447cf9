/* aff_topo.c - topology discovery: hwloc tree (live or XML), NVIDIA GPUs
 * by PCI bus id (from hwloc's I/O tree and NVML here, from sysfs in
 * aff_sysfs.c), NUMA locality, NICs and their ports, NVLink, paths, the
 * topology warnings, and the comparison of two discoveries. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aff_int.h"
#include "lu_buf.h"

/* ---- small helpers -------------------------------------------------------------- */

int aff__busid_norm(const char *in, char out[16]) {
  unsigned dom = 0, bus, dev, fn;
  char tail;
  if (in == NULL)
    return -1;
  if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) == 4) {
    /* "00000000:07:00.0" (NVML) or "0000:07:00.0" */
  } else if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) == 3) {
    dom = 0;
  } else {
    return -1;
  }
  if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
    return -1;
  snprintf(out, 16, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return 0;
}

void aff__from_hwloc(aff_cpuset_t *d, hwloc_const_bitmap_t b) {
  int i;
  aff_cpuset_zero(d);
  if (b == NULL)
    return;
  hwloc_bitmap_foreach_begin(i, b) {
    if (i >= AFF_MAX_CPUS)
      break;
    aff_cpuset_set(d, i);
  }
  hwloc_bitmap_foreach_end();
}

void aff__topo_warn(aff_topo_t *t, const char *fmt, ...) {
  va_list ap;
  if (t->nwarn >= AFF_MAX_WARN)
    return;
  va_start(ap, fmt);
  vsnprintf(t->warn[t->nwarn], sizeof(t->warn[0]), fmt, ap);
  va_end(ap);
  /* the same sentence once */
  for (int i = 0; i < t->nwarn; i++)
    if (strcmp(t->warn[i], t->warn[t->nwarn]) == 0)
      return;
  t->nwarn++;
}

const char *aff_path_name(aff_path_t p) {
  static const char *const names[] = {"X",   "NV",   "PIX", "PXB",
                                      "PHB", "NODE", "SYS", "?"};
  return (unsigned)p < LU_ARRAY_SIZE(names) ? names[p] : "?";
}

static void busid_of(hwloc_obj_t o, char out[16]) {
  snprintf(out, 16, "%04x:%02x:%02x.%x", (unsigned)o->attr->pcidev.domain,
           o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
}

static const char *info(hwloc_obj_t o, const char *name) {
  return o ? hwloc_obj_get_info_by_name(o, name) : NULL;
}

/* Leading number of "16.0 GT/s PCIe" / "8" / "Unknown" (0). */
static double lead_num(const char *s) {
  char *end;
  double v;
  if (s == NULL)
    return 0;
  v = strtod(s, &end);
  return end == s || v < 0 ? 0 : v;
}

int aff__node_of(hwloc_topology_t hw, hwloc_const_bitmap_t nodes, int hint) {
  hwloc_bitmap_t dram;
  hwloc_const_bitmap_t cpus = NULL, from;
  int node, same = 1, i;
  if (nodes == NULL || hwloc_bitmap_iszero(nodes))
    return -1;
  if (hwloc_bitmap_weight(nodes) == 1)
    return hwloc_bitmap_first(nodes);
  if ((dram = hwloc_bitmap_alloc()) == NULL)
    return -1;
  hwloc_bitmap_foreach_begin(i, nodes) {
    hwloc_obj_t o = hwloc_get_numanode_obj_by_os_index(hw, (unsigned)i);
    if (o == NULL)
      continue;
    if (cpus && !hwloc_bitmap_isequal(cpus, o->cpuset))
      same = 0;
    cpus = o->cpuset;
    if (o->subtype == NULL || strcasecmp(o->subtype, "DRAM") == 0)
      hwloc_bitmap_set(dram, (unsigned)i);
  }
  hwloc_bitmap_foreach_end();
  from = hwloc_bitmap_iszero(dram) ? nodes : dram;
  node = !same ? -1
         : hint >= 0 && hwloc_bitmap_isset(from, (unsigned)hint) ? hint
                                                                  : hwloc_bitmap_first(from);
  hwloc_bitmap_free(dram);
  return node;
}

/* The NUMA node and local CPUs of an I/O object: its first non-I/O
 * ancestor's (aff__node_of). */
static int locality(const aff_topo_t *t, hwloc_obj_t o, aff_cpuset_t *cpus) {
  hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t->hw, o);
  if (cpus)
    aff_cpuset_zero(cpus);
  if (a == NULL)
    return -1;
  if (cpus)
    aff__from_hwloc(cpus, a->cpuset);
  return aff__node_of(t->hw, a->nodeset, -1);
}

double aff__pcie_gbps(double gts, int width) {
  /* hwloc's hwloc_pcidisc_find_linkspeed(), from the generation the GT/s
   * stand for, in float as there: 8b/10b up to gen 2, 128b/130b up to gen
   * 5, 242/256 FLITs from gen 6. */
  unsigned gen;
  float lanespeed;
  if (gts <= 0 || width <= 0)
    return 0;
  gen = gts < 3 ? 1 : gts < 6 ? 2 : gts < 12 ? 3 : gts < 24 ? 4 : gts < 48 ? 5
      : gts < 96 ? 6 : 7;
  if (gen <= 2)
    lanespeed = 2.5f * (float)gen * 0.8f;
  else if (gen <= 5)
    lanespeed = 8.0f * (float)(1u << (gen - 3)) * 128 / 130;
  else
    lanespeed = 8.0f * (float)(1u << (gen - 3)) * 242 / 256;
  return (double)(lanespeed * (float)width / 8);
}

void aff__pcie_sysfs(const aff_topo_t *t, const char *busid, aff_pcie_t *l) {
  char dir[64];
  if (busid == NULL || busid[0] == '\0')
    return;
  snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%.16s", busid);
  aff_pcie_read(t->root, dir, l);
}

/* PCIe link: hwloc's GB/s, launch's info attributes (an export made by
 * `launch topo --export` or tests/topo/gen_topo.py), and on this machine
 * sysfs, which wins. */
static void pcie_of(const aff_topo_t *t, hwloc_obj_t o, const char *busid,
                    aff_pcie_t *l) {
  memset(l, 0, sizeof(*l));
  if (o) {
    l->gbps = o->attr->pcidev.linkspeed;
    l->width = (int)lead_num(info(o, "PCIeLinkWidth"));
    l->width_max = (int)lead_num(info(o, "PCIeLinkWidthMax"));
    l->gts = lead_num(info(o, "PCIeLinkSpeedGTs"));
    l->gts_max = lead_num(info(o, "PCIeLinkSpeedMaxGTs"));
  }
  if (t->sysfs_reads)
    aff__pcie_sysfs(t, busid, l);
}

/* The chain of an hwloc PCI object up to its host bridge, and its
 * locality (see aff_iopath_t). */
static void io_from_obj(const aff_topo_t *t, hwloc_obj_t o, aff_iopath_t *io) {
  memset(io, 0, sizeof(*io));
  if (o == NULL)
    return;
  for (hwloc_obj_t x = o; x && io->n < AFF_PCI_DEPTH; x = x->parent) {
    if (x->type == HWLOC_OBJ_PCI_DEVICE) {
      busid_of(x, io->id[io->n++]);
    } else if (x->type == HWLOC_OBJ_BRIDGE &&
               x->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      const struct hwloc_pcidev_attr_s *u = &x->attr->bridge.upstream.pci;
      snprintf(io->id[io->n++], sizeof(io->id[0]), "%04x:%02x:%02x.%x",
               (unsigned)u->domain, u->bus, u->dev, u->func);
    } else if (x->type == HWLOC_OBJ_BRIDGE) {
      snprintf(io->id[io->n++], sizeof(io->id[0]), "hb:%04x:%02x",
               (unsigned)x->attr->bridge.downstream.pci.domain,
               (unsigned)x->attr->bridge.downstream.pci.secondary_bus);
    } else {
      break;
    }
  }
  aff__set_loc(io, hwloc_get_non_io_ancestor_obj(t->hw, o));
}

/* ---- GPUs -------------------------------------------------------------------------- */

static int is_nvidia_gpu(hwloc_obj_t o) {
  unsigned cls = o->attr->pcidev.class_id;
  /* 0x0300 VGA, 0x0302 3D controller (every datacenter GPU) */
  return o->attr->pcidev.vendor_id == 0x10de && (cls == 0x0300 || cls == 0x0302);
}

static void gpu_from_obj(aff_topo_t *t, hwloc_obj_t o, aff_gpu_t *g) {
  const char *model = NULL, *uuid = NULL, *mem = NULL;
  memset(g, 0, sizeof(*g));
  busid_of(o, g->busid);
  g->vendor = o->attr->pcidev.vendor_id;
  g->device = o->attr->pcidev.device_id;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE)
      continue;
    if (model == NULL)
      model = info(c, "GPUModel");
    if (uuid == NULL)
      uuid = info(c, "NVIDIAUUID");
    if (mem == NULL)
      mem = info(c, "CUDAGlobalMemorySize"); /* KiB */
  }
  if (model == NULL)
    model = info(o, "PCIDevice");
  if (model == NULL)
    model = aff_gpu_model_name(g->device);
  if (model)
    lu_strlcpy(g->model, model, sizeof(g->model));
  else
    snprintf(g->model, sizeof(g->model), "NVIDIA [%04x:%04x]", g->vendor,
             g->device);
  if (uuid)
    lu_strlcpy(g->uuid, uuid, sizeof(g->uuid));
  if (mem)
    g->mem_bytes = (uint64_t)strtoull(mem, NULL, 10) * 1024u;
  g->numa = locality(t, o, &g->cpus);
  pcie_of(t, o, g->busid, &g->link);
  g->nic = -1;
  g->nic_path = AFF_PATH_UNKNOWN;
  g->minor = -1;
}

/* A GPU hwloc did not report (no PCI discovery): locality from sysfs. */
static void gpu_from_sysfs(aff_topo_t *t, const char *busid, aff_gpu_t *g) {
  char path[256], buf[64], list[AFF_CPULIST_LEN];
  memset(g, 0, sizeof(*g));
  lu_strlcpy(g->busid, busid, sizeof(g->busid));
  g->vendor = 0x10de;
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", busid);
  if (aff__read_line(t->root, path, buf, sizeof(buf)) > 0)
    g->device = (uint16_t)strtoul(buf, NULL, 16);
  if (aff_gpu_model_name(g->device))
    lu_strlcpy(g->model, aff_gpu_model_name(g->device), sizeof(g->model));
  else
    snprintf(g->model, sizeof(g->model), "NVIDIA [10de:%04x]", g->device);
  g->numa = -1;
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", busid);
  if (aff__read_line(t->root, path, buf, sizeof(buf)) > 0)
    g->numa = atoi(buf) < 0 ? -1 : atoi(buf);
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/local_cpulist", busid);
  if (aff__read_line(t->root, path, list, sizeof(list)) > 0)
    aff_cpulist_parse(list, &g->cpus, NULL, 0);
  pcie_of(t, NULL, busid, &g->link);
  g->nic = -1;
  g->nic_path = AFF_PATH_UNKNOWN;
  g->minor = -1;
}

/* t->all (with all_obj and all_io) in bus id order: hwloc walks its tree
 * depth first, sysfs lists in readdir order; CUDA_DEVICE_ORDER=PCI_BUS_ID
 * and nvidia-smi count by bus id. */
void aff__sort_all(aff_topo_t *t) {
  for (int i = 1; i < t->nall; i++)
    for (int j = i; j > 0 && strcmp(t->all[j - 1].busid, t->all[j].busid) > 0;
         j--) {
      aff_gpu_t tmp = t->all[j];
      hwloc_obj_t to = t->all_obj[j];
      aff_iopath_t tio = t->all_io[j];
      t->all[j] = t->all[j - 1];
      t->all_obj[j] = t->all_obj[j - 1];
      t->all_io[j] = t->all_io[j - 1];
      t->all[j - 1] = tmp;
      t->all_obj[j - 1] = to;
      t->all_io[j - 1] = tio;
    }
}

/* Every NVIDIA GPU of the PCI tree, by bus id; sysfs when hwloc saw none. */
static void scan_gpus(aff_topo_t *t) {
  hwloc_obj_t o = NULL;
  while ((o = hwloc_get_next_pcidev(t->hw, o)) != NULL) {
    if (!is_nvidia_gpu(o) || t->nall >= AFF_MAX_GPUS)
      continue;
    gpu_from_obj(t, o, &t->all[t->nall]);
    t->all_obj[t->nall] = o;
    io_from_obj(t, o, &t->all_io[t->nall]);
    t->nall++;
  }
  aff__sort_all(t);
}

/* The PCI tree from sysfs, for an hwloc built without PCI support or a
 * container that hides it from hwloc. */
static void scan_gpus_sysfs(aff_topo_t *t) {
  char dir[512];
  DIR *d;
  struct dirent *e;
  snprintf(dir, sizeof(dir), "%s/sys/bus/pci/devices", t->root);
  if ((d = opendir(dir)) == NULL)
    return;
  while ((e = readdir(d)) != NULL && t->nall < AFF_MAX_GPUS) {
    char path[512], buf[32], bid[16];
    unsigned long cls;
    if (e->d_name[0] == '.' || aff__busid_norm(e->d_name, bid) != 0)
      continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
    if (aff__read_line(t->root, path, buf, sizeof(buf)) <= 0 ||
        strtoul(buf, NULL, 16) != 0x10de)
      continue;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
    if (aff__read_line(t->root, path, buf, sizeof(buf)) <= 0)
      continue;
    cls = strtoul(buf, NULL, 16) >> 8;
    if (cls != 0x0300 && cls != 0x0302)
      continue;
    gpu_from_sysfs(t, bid, &t->all[t->nall]);
    t->all_obj[t->nall] = NULL;
    memset(&t->all_io[t->nall], 0, sizeof(t->all_io[0]));
    t->nall++;
  }
  closedir(d);
  aff__sort_all(t);
}

static int find_all(const aff_topo_t *t, const char *busid) {
  for (int i = 0; i < t->nall; i++)
    if (strcmp(t->all[i].busid, busid) == 0)
      return i;
  return -1;
}

/* Merge what NVML knows (names, UUIDs, memory; GPUs hwloc missed). */
static void merge_probe(aff_topo_t *t, const aff_gpu_probe_t *p, int n) {
  for (int i = 0; i < n; i++) {
    int k = find_all(t, p[i].busid);
    if (k < 0) {
      if (t->nall >= AFF_MAX_GPUS)
        continue;
      k = t->nall++;
      gpu_from_sysfs(t, p[i].busid, &t->all[k]);
      t->all_obj[k] = NULL;
      memset(&t->all_io[k], 0, sizeof(t->all_io[0]));
    }
    if (p[i].model[0])
      lu_strlcpy(t->all[k].model, p[i].model, sizeof(t->all[k].model));
    if (p[i].uuid[0])
      lu_strlcpy(t->all[k].uuid, p[i].uuid, sizeof(t->all[k].uuid));
    if (p[i].mem_bytes)
      t->all[k].mem_bytes = p[i].mem_bytes;
  }
}

/* CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID
 * (any other value is the default). Among GPUs of one model the tie goes
 * to the lower bus id, which is PCI order; for mixed models the runtime's
 * heuristic is not reproduced here: say so once. */
static void check_order(aff_topo_t *t, const char *order, lu_log_t *log) {
  int mixed = 0;
  if (order && strcmp(order, "PCI_BUS_ID") == 0)
    return;
  for (int i = 1; i < t->nall; i++)
    mixed |= t->all[i].device != t->all[0].device;
  if (mixed && log)
    LU_WARN(log,
            "this machine has GPUs of different models and CUDA_DEVICE_ORDER "
            "is %s: CUDA numbers them fastest first by its own rule, which "
            "launch does not reproduce; GPUs are planned in PCI bus order. "
            "Set CUDA_DEVICE_ORDER=PCI_BUS_ID so that both agree "
            "(docs/affinity.md)",
            order ? order : "unset (FASTEST_FIRST)");
}

/* CUDA_VISIBLE_DEVICES, as the CUDA runtime reads it: indexes (in PCI
 * order here, see check_order; the runtime's own order is used when it
 * was asked), UUIDs or unique UUID prefixes ("GPU-8f3a"), MIG instances
 * (their parent GPU). Like CUDA, the list stops at the first entry that
 * names no device. */
int aff__visible(const char *cvd, const char *const *uuids, int n, int *pick,
                 lu_log_t *log) {
  char buf[1024];
  char *save = NULL, *tok;
  int used[AFF_MAX_GPUS] = {0}, nvis = 0;
  if (cvd == NULL) {
    for (int i = 0; i < n; i++)
      pick[i] = i;
    return n;
  }
  lu_strlcpy(buf, cvd, sizeof(buf));
  for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int k = -1, v;
    while (isspace((unsigned char)*tok))
      tok++;
    lu_rtrim(tok, strlen(tok));
    if (lu_parse_int(tok, 0, 1 << 20, &v) == 0) {
      k = v < n ? v : -1;
    } else if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0) {
      size_t len = strlen(tok);
      int hits = 0;
      if (strncmp(tok, "MIG-", 4) == 0) {
        /* MIG-GPU-<uuid>/gi/ci (old form) names its parent; the new
         * MIG-<uuid> form needs NVML's MIG API: bind to no GPU. */
        const char *g = strstr(tok, "GPU-");
        char *slash;
        if (g == NULL) {
          if (log)
            LU_WARN(log,
                    "CUDA_VISIBLE_DEVICES entry '%s' is a MIG instance whose "
                    "parent GPU cannot be told without NVML; it gets no "
                    "GPU-local binding",
                    tok);
          break;
        }
        tok = (char *)g;
        if ((slash = strchr(tok, '/')) != NULL)
          *slash = '\0';
        len = strlen(tok);
      }
      for (int i = 0; i < n; i++)
        if (uuids[i][0] && strncmp(uuids[i], tok, len) == 0) {
          k = i;
          hits++;
        }
      if (hits > 1)
        k = -1;
      if (hits == 0 && log && n > 0 && uuids[0][0] == '\0')
        LU_WARN(log,
                "CUDA_VISIBLE_DEVICES names GPU UUIDs but the GPUs' UUIDs are "
                "unknown (no NVIDIA driver in /proc/driver/nvidia)");
    }
    if (k < 0 || used[k]) {
      /* CUDA ignores this entry and all that follow. */
      if (log)
        LU_WARN(log,
                "CUDA_VISIBLE_DEVICES='%s': entry '%s' names no GPU of this "
                "machine (%d found); CUDA ignores it and every entry after it",
                cvd, tok, n);
      break;
    }
    used[k] = 1;
    pick[nvis++] = k;
  }
  return nvis;
}

static void apply_visible(aff_topo_t *t, const char *cvd, lu_log_t *log) {
  const char *uuids[AFF_MAX_GPUS];
  int pick[AFF_MAX_GPUS], n;
  for (int i = 0; i < t->nall; i++)
    uuids[i] = t->all[i].uuid;
  n = aff__visible(cvd, uuids, t->nall, pick, log);
  for (t->ngpus = 0; t->ngpus < n; t->ngpus++) {
    int k = pick[t->ngpus];
    t->gpus[t->ngpus] = t->all[k];
    t->gpu_obj[t->ngpus] = t->all_obj[k];
    t->gpu_io[t->ngpus] = t->all_io[k];
    t->gpus[t->ngpus].phys = k;
    t->gpus[t->ngpus].index = t->ngpus;
  }
}

/* ---- NICs ------------------------------------------------------------------------------ */

static const char *const port_states[] = {"NOP",   "DOWN",   "INIT",
                                          "ARMED", "ACTIVE", "ACTIVE_DEFER"};

void aff__nic_ports(aff_topo_t *t, hwloc_obj_t hca, aff_nic_t *n) {
  char key[32];
  int first_active = 0;
  n->nports = 0;
  n->port_state = -1;
  for (int p = 1; p <= 8; p++) {
    const char *st, *rate, *ll;
    int state = -1;
    char srate[48] = "", sll[16] = "";
    snprintf(key, sizeof(key), "Port%dState", p);
    st = info(hca, key);
    snprintf(key, sizeof(key), "Port%dRate", p);
    rate = info(hca, key);
    snprintf(key, sizeof(key), "Port%dLinkLayer", p);
    ll = info(hca, key);
    if (st)
      state = atoi(st);
    if (rate)
      lu_strlcpy(srate, rate, sizeof(srate));
    if (ll)
      lu_strlcpy(sll, ll, sizeof(sll));
    if (t->sysfs_reads) {
      aff_ib_port_t port; /* sysfs wins over what hwloc recorded */
      aff_ib_port_read(t->root, n->hca, p, &port);
      if (port.state >= 0)
        state = port.state;
      if (port.rate[0])
        lu_strlcpy(srate, port.rate, sizeof(srate));
      if (port.link_layer[0])
        lu_strlcpy(sll, port.link_layer, sizeof(sll));
    }
    if (state < 0 && srate[0] == '\0')
      break;
    n->nports = p;
    if (first_active == 0 && state == 4)
      first_active = p;
    if (p == 1 || p == first_active) {
      n->port_state = state;
      lu_strlcpy(n->rate, srate, sizeof(n->rate));
      lu_strlcpy(n->link_layer, sll, sizeof(n->link_layer));
    }
  }
  n->port = first_active ? first_active : 1;
  n->rate_gbps = (int)lead_num(n->rate);
}

static void scan_nics(aff_topo_t *t) {
  hwloc_obj_t o = NULL;
  while ((o = hwloc_get_next_pcidev(t->hw, o)) != NULL) {
    hwloc_obj_t hca = NULL, net = NULL;
    aff_nic_t *n;
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL)
        continue;
      if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && hca == NULL)
        hca = c;
      else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && net == NULL)
        net = c;
    }
    if ((hca == NULL && net == NULL) || t->nnics >= AFF_MAX_NICS)
      continue;
    n = &t->nics[t->nnics];
    memset(n, 0, sizeof(*n));
    busid_of(o, n->busid);
    n->vendor = o->attr->pcidev.vendor_id;
    n->device = o->attr->pcidev.device_id;
    if (hca)
      lu_strlcpy(n->hca, hca->name, sizeof(n->hca));
    if (net)
      lu_strlcpy(n->netdev, net->name, sizeof(n->netdev));
    lu_strlcpy(n->name, hca ? hca->name : net->name, sizeof(n->name));
    n->numa = locality(t, o, NULL);
    pcie_of(t, o, n->busid, &n->link);
    n->port = 0;
    n->port_state = -1;
    if (hca)
      aff__nic_ports(t, hca, n);
    t->nic_obj[t->nnics] = o;
    io_from_obj(t, o, &t->nic_io[t->nnics]);
    t->nnics++;
  }
}

/* PCI order, so that mlx5_0 comes before mlx5_1 as in nvidia-smi; an IPoIB
 * netdev means the port runs InfiniBand. */
static void finish_nics(aff_topo_t *t) {
  for (int k = 0; k < t->nnics; k++) {
    aff_nic_t *n = &t->nics[k];
    if (n->hca[0] && n->link_layer[0] == '\0' && strncmp(n->netdev, "ib", 2) == 0)
      lu_strlcpy(n->link_layer, "InfiniBand", sizeof(n->link_layer));
  }
  for (int i = 1; i < t->nnics; i++)
    for (int j = i; j > 0 && strcmp(t->nics[j - 1].busid, t->nics[j].busid) > 0;
         j--) {
      aff_nic_t tmp = t->nics[j];
      hwloc_obj_t to = t->nic_obj[j];
      aff_iopath_t tio = t->nic_io[j];
      t->nics[j] = t->nics[j - 1];
      t->nic_obj[j] = t->nic_obj[j - 1];
      t->nic_io[j] = t->nic_io[j - 1];
      t->nics[j - 1] = tmp;
      t->nic_obj[j - 1] = to;
      t->nic_io[j - 1] = tio;
    }
}

/* ---- paths --------------------------------------------------------------------------- */

void aff__set_loc(aff_iopath_t *io, hwloc_obj_t o) {
  hwloc_obj_t top = o;
  io->loc_id = o ? o->gp_index + 1 : 0;
  while (top && top->parent && top->parent->parent)
    top = top->parent;
  io->loc_top = top && top->parent ? top->gp_index + 1 : 0;
}

/* True when the CPU objects two host bridges hang under meet at the
 * Machine (the root, hwloc 2's only Machine): across packages. They meet
 * below it when both sit under the same child of the root. */
static int loc_meet_at_machine(const aff_iopath_t *a, const aff_iopath_t *b) {
  if (a->loc_group && a->loc_group == b->loc_group && a->loc_id == b->loc_id)
    return 0; /* the same I/O Group */
  return a->loc_top == 0 || b->loc_top == 0 || a->loc_top != b->loc_top;
}

aff_path_t aff__io_path(const aff_iopath_t *a, const aff_iopath_t *b,
                        int numa_a, int numa_b) {
  if (a->n > 0 && b->n > 0) {
    /* The lowest element the chains share: da steps up from a, db from b. */
    for (int da = 0; da < a->n; da++)
      for (int db = 0; db < b->n; db++) {
        if (strcmp(a->id[da], b->id[db]) != 0)
          continue;
        if (da == 0 && db == 0)
          return AFF_PATH_SELF;
        if (strncmp(a->id[da], "hb:", 3) == 0)
          return AFF_PATH_PHB;
        /* Under one switch: device -> downstream port -> upstream port. */
        return da <= 2 && db <= 2 ? AFF_PATH_PIX : AFF_PATH_PXB;
      }
  }
  if (a->n == 0 || b->n == 0 || a->loc_id == 0 || b->loc_id == 0) {
    if (numa_a < 0 || numa_b < 0)
      return AFF_PATH_UNKNOWN;
    return numa_a == numa_b ? AFF_PATH_NODE : AFF_PATH_SYS;
  }
  if (numa_a >= 0 && numa_a == numa_b)
    return AFF_PATH_NODE;
  if (numa_a < 0 || numa_b < 0) {
    /* No single node each: same package counts as one node. */
    return loc_meet_at_machine(a, b) ? AFF_PATH_SYS : AFF_PATH_NODE;
  }
  return AFF_PATH_SYS;
}

aff_path_t aff_topo_gpu_path(const aff_topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->ngpus || b >= t->ngpus)
    return AFF_PATH_UNKNOWN;
  if (a == b)
    return AFF_PATH_SELF;
  if (t->nvlink[a][b] > 0)
    return AFF_PATH_NVLINK;
  return aff__io_path(&t->gpu_io[a], &t->gpu_io[b], t->gpus[a].numa,
                      t->gpus[b].numa);
}

aff_path_t aff__nic_path(const aff_topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->nnics || b >= t->nnics)
    return AFF_PATH_UNKNOWN;
  return aff__io_path(&t->nic_io[a], &t->nic_io[b], t->nics[a].numa,
                      t->nics[b].numa);
}

aff_path_t aff_topo_gpu_nic_path(const aff_topo_t *t, int gpu, int nic) {
  if (gpu < 0 || nic < 0 || gpu >= t->ngpus || nic >= t->nnics)
    return AFF_PATH_UNKNOWN;
  return aff__io_path(&t->gpu_io[gpu], &t->nic_io[nic], t->gpus[gpu].numa,
                      t->nics[nic].numa);
}

/* ---- NVLink ------------------------------------------------------------------------- */

static int visible_by_busid(const aff_topo_t *t, const char *busid) {
  for (int i = 0; i < t->ngpus; i++)
    if (strcmp(t->gpus[i].busid, busid) == 0)
      return i;
  return -1;
}

static void scan_nvlink(aff_topo_t *t) {
  struct hwloc_distances_s *d[4];
  unsigned nr = 4;
  /* (a cached topology is a sysfs one: hwloc has no GPU objects there) */
  if (t->hw &&
      hwloc_distances_get_by_name(t->hw, "NVLinkBandwidth", &nr, d, 0) == 0) {
    for (unsigned k = 0; k < nr && k < 4; k++) {
      int map[256];
      unsigned nb = d[k]->nbobjs;
      for (unsigned i = 0; i < nb && i < 256; i++) {
        hwloc_obj_t o = d[k]->objs[i];
        char bid[16];
        map[i] = -1;
        while (o && o->type == HWLOC_OBJ_OS_DEVICE)
          o = o->parent;
        if (o && o->type == HWLOC_OBJ_PCI_DEVICE) {
          busid_of(o, bid);
          map[i] = visible_by_busid(t, bid);
        }
      }
      for (unsigned i = 0; i < nb && i < 256; i++)
        for (unsigned j = 0; j < nb && j < 256; j++)
          if (i != j && map[i] >= 0 && map[j] >= 0) {
            t->nvlink[map[i]][map[j]] = d[k]->values[i * nb + j];
            t->nvlink_known = 1;
          }
      hwloc_distances_release(t->hw, d[k]);
    }
    if (t->nvlink_known)
      return;
  }
  if (t->from_xml || t->nnvml <= 0)
    return;
  /* This machine without hwloc's NVML plugin: NVML's link counts. */
  for (int a = 0; a < t->nnvml; a++)
    for (int b = 0; b < t->nnvml; b++) {
      int i = visible_by_busid(t, t->nvml[a].busid);
      int j = visible_by_busid(t, t->nvml[b].busid);
      if (i < 0 || j < 0 || i == j || t->nvml_links[a][b] < 0)
        continue;
      t->nvlink_known = 1;
      /* NVML counts links; 25 GB/s per link and direction (V100 to H100). */
      t->nvlink[i][j] = (uint64_t)t->nvml_links[a][b] * 25000u;
    }
}

/* ---- closest NICs --------------------------------------------------------------------- */

static int nic_usable(const aff_nic_t *n) {
  return n->port_state < 0 || n->port_state == 4;
}

static void pick_nics(aff_topo_t *t) {
  int has_hca = 0, has_usable = 0;
  int best[AFF_MAX_GPUS];
  unsigned long long candmask[AFF_MAX_GPUS];
  for (int k = 0; k < t->nnics; k++) {
    has_usable |= nic_usable(&t->nics[k]);
    has_hca |= t->nics[k].hca[0] && nic_usable(&t->nics[k]);
  }
  for (int g = 0; g < t->ngpus; g++) {
    best[g] = AFF_PATH_UNKNOWN;
    candmask[g] = 0;
    for (int k = 0; k < t->nnics && k < 64; k++) {
      const aff_nic_t *n = &t->nics[k];
      int p;
      /* One kind for every rank, as NCCL_IB_HCA and NCCL_SOCKET_IFNAME
       * must agree across ranks: an RDMA port that is up when there is
       * any, else a NIC that is up; a down port only when nothing else. */
      if ((has_hca && n->hca[0] == '\0') || (has_usable && !nic_usable(n)))
        continue;
      p = (int)aff_topo_gpu_nic_path(t, g, k);
      if (p < best[g]) {
        best[g] = p;
        candmask[g] = 0;
      }
      if (p == best[g])
        candmask[g] |= 1ull << k;
    }
  }
  /* GPUs with the same nearest NICs share them round robin: on a DGX two
   * GPUs and two HCAs sit under each switch, one HCA each. */
  for (int g = 0; g < t->ngpus; g++) {
    int pos = 0, ncand = 0, pick;
    if (candmask[g] == 0)
      continue;
    for (int h = 0; h < g; h++)
      if (candmask[h] == candmask[g])
        pos++;
    ncand = __builtin_popcountll(candmask[g]);
    pick = pos % ncand;
    for (int k = 0; k < 64; k++)
      if (candmask[g] & (1ull << k)) {
        if (pick-- == 0) {
          t->gpus[g].nic = k;
          t->gpus[g].nic_path = (aff_path_t)best[g];
          break;
        }
      }
  }
  if (!has_usable && t->ngpus > 0 && t->nnics > 0)
    aff__topo_warn(t, "no NIC of this machine has a port that is up: each "
                      "rank is given its closest one all the same, which "
                      "NCCL cannot use until it is ACTIVE");
  /* the compute rails: HCAs some GPU uses */
  t->gpu_hcas[0] = '\0';
  for (int k = 0; k < t->nnics; k++) {
    int used = 0;
    if (t->nics[k].hca[0] == '\0')
      continue;
    for (int g = 0; g < t->ngpus; g++)
      used |= t->gpus[g].nic == k;
    if (used) {
      size_t l = strlen(t->gpu_hcas);
      snprintf(t->gpu_hcas + l, sizeof(t->gpu_hcas) - l, "%s%s", l ? "," : "",
               t->nics[k].hca);
    }
  }
}

/* ---- warnings --------------------------------------------------------------------------- */

static void link_warn(aff_topo_t *t, const char *what, const aff_pcie_t *l,
                      int is_gpu, const aff_pcie_t *peer_best) {
  if (l->width > 0 && l->width_max > 0 && l->width < l->width_max) {
    aff__topo_warn(t,
                   "%s runs at PCIe x%d but supports x%d: %d%% of the bandwidth "
                   "(x8 halves x16's); reseat it in an x%d slot",
                   what, l->width, l->width_max,
                   100 * l->width / l->width_max,
                   l->width_max);
    return;
  }
  /* GPUs drop the link speed when idle to save power; only the width of
   * an idle GPU says something. */
  if (!is_gpu && l->gts > 0 && l->gts_max > 0 && l->gts + 0.01 < l->gts_max) {
    aff__topo_warn(t,
                   "%s runs at %.1f GT/s but supports %.1f GT/s: check the slot "
                   "generation and BIOS PCIe settings",
                   what, l->gts, l->gts_max);
    return;
  }
  /* Without lane counts, compare with identical devices; not for GPUs,
   * whose idle links run slower. */
  if (!is_gpu && l->width == 0 && peer_best && l->gbps > 0 &&
      l->gbps + 0.05 < peer_best->gbps) {
    aff__topo_warn(t,
                   "%s has a %.1f GB/s PCIe link while identical devices have "
                   "%.1f GB/s: narrower or slower slot",
                   what, l->gbps, peer_best->gbps);
  }
}

static void compute_warnings(aff_topo_t *t) {
  char what[128], buf[16];
  /* PCIe links */
  for (int i = 0; i < t->ngpus; i++) {
    aff_pcie_t best = {0};
    for (int j = 0; j < t->nall; j++)
      if (t->all[j].device == t->gpus[i].device && t->all[j].link.gbps > best.gbps)
        best = t->all[j].link;
    snprintf(what, sizeof(what), "GPU%d (%s)", i, t->gpus[i].busid);
    link_warn(t, what, &t->gpus[i].link, 1, &best);
  }
  for (int k = 0; k < t->nnics; k++) {
    aff_pcie_t best = {0};
    for (int j = 0; j < t->nnics; j++)
      if (t->nics[j].device == t->nics[k].device &&
          t->nics[j].vendor == t->nics[k].vendor &&
          t->nics[j].link.gbps > best.gbps)
        best = t->nics[j].link;
    /* Only NICs that carry training traffic matter. */
    if (t->nics[k].hca[0] == '\0' && t->nics[k].rate_gbps == 0 && t->ngpus == 0)
      continue;
    snprintf(what, sizeof(what), "NIC %s (%s)", t->nics[k].name,
             t->nics[k].busid);
    link_warn(t, what, &t->nics[k].link, 0, &best);
  }
  /* IB ports down */
  for (int k = 0; k < t->nnics; k++) {
    const aff_nic_t *n = &t->nics[k];
    if (n->hca[0] && n->port_state >= 0 && n->port_state != 4)
      aff__topo_warn(t,
                     "%s port %d is %s: NCCL cannot use it (check the cable, "
                     "the switch port and the subnet manager: ibstat, sminfo)",
                     n->hca, n->port,
                     n->port_state < (int)LU_ARRAY_SIZE(port_states)
                         ? port_states[n->port_state]
                         : "not ACTIVE");
  }
  /* NIC on another NUMA node than its GPUs */
  for (int k = 0; k < t->nnics; k++) {
    char gl[128] = "";
    int gnuma = -1, n = 0;
    for (int g = 0; g < t->ngpus; g++) {
      if (t->gpus[g].nic != k || t->gpus[g].numa < 0 || t->nics[k].numa < 0 ||
          t->gpus[g].numa == t->nics[k].numa)
        continue;
      snprintf(gl + strlen(gl), sizeof(gl) - strlen(gl), "%s%d", n ? "," : "",
               g);
      gnuma = t->gpus[g].numa;
      n++;
    }
    if (n > 0)
      aff__topo_warn(t,
                     "%s is on NUMA node %d but is the closest NIC of GPU %s on "
                     "NUMA node %d: their traffic crosses the socket link "
                     "(put an HCA on the GPUs' side)",
                     t->nics[k].name, t->nics[k].numa, gl, gnuma);
  }
  /* NUMA balancing migrates pages away from the bound node. */
  if (!t->from_xml && t->nnuma > 1 &&
      aff__read_line(t->root, "/proc/sys/kernel/numa_balancing", buf,
                     sizeof(buf)) > 0 &&
      atoi(buf) != 0)
    aff__topo_warn(t,
                   "kernel.numa_balancing=%s: the kernel migrates workers' "
                   "memory across NUMA nodes, undoing the binding (sysctl -w "
                   "kernel.numa_balancing=0)",
                   buf);
}

/* ---- load ----------------------------------------------------------------------------- */

static const char *const skip_components[] = {"opencl", "gl",   "cuda",
                                              "nvml",   "rsmi", "levelzero"};

/* Where hwloc is built with plugins (Debian's and Ubuntu's
 * libhwloc-plugins), its first hwloc_topology_init() dlopens every plugin
 * it finds, and with them libcudart, libnvidia-ml, the OpenCL loader,
 * libpciaccess, libxml2 and ICU, before any component is blacklisted:
 * megabytes in the agent for components that never run. The GPU plugins
 * never run here; the PCI one only when hwloc finds the I/O devices (not
 * when sysfs does); libxml2's XML reader never (hwloc's own reads and
 * writes the same files). HWLOC_PLUGINS_BLACKLIST, read then, keeps them
 * out; set for that call only (the workers' environment is the one launch
 * was started with, not this process's). */
#define GPU_PLUGINS                                                            \
  "hwloc_cuda,hwloc_nvml,hwloc_opencl,hwloc_gl,hwloc_rsmi,hwloc_levelzero,"   \
  "hwloc_xml_libxml"

static int topology_init(hwloc_topology_t *hw, int io_hwloc) {
  const char *had = getenv("HWLOC_PLUGINS_BLACKLIST");
  char *old = had ? strdup(had) : NULL, *v = NULL;
  int rc;
  if ((had && old == NULL) ||
      asprintf(&v, "%s%s%s%s", had ? had : "", had ? "," : "", GPU_PLUGINS,
               io_hwloc ? "" : ",hwloc_pci") < 0 ||
      setenv("HWLOC_PLUGINS_BLACKLIST", v, 1) != 0) {
    free(v);
    free(old);
    return hwloc_topology_init(hw);
  }
  rc = hwloc_topology_init(hw);
  if (old)
    setenv("HWLOC_PLUGINS_BLACKLIST", old, 1);
  else
    unsetenv("HWLOC_PLUGINS_BLACKLIST");
  free(v);
  free(old);
  return rc;
}

/* The cores in hwloc's logical order (the PUs when it has no cores), for
 * aff_plan.c's core split. RET 0 or RDZV_ENOMEM. */
static int core_sets(aff_topo_t *t) {
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  int n;
  if (hwloc_get_type_depth(t->hw, HWLOC_OBJ_CORE) == HWLOC_TYPE_DEPTH_UNKNOWN)
    type = HWLOC_OBJ_PU;
  n = hwloc_get_nbobjs_by_type(t->hw, type);
  if (n <= 0)
    return 0;
  if ((t->core_sets = calloc((size_t)n, sizeof(*t->core_sets))) == NULL)
    return RDZV_ENOMEM;
  for (int i = 0; i < n; i++) {
    hwloc_obj_t c = hwloc_get_obj_by_type(t->hw, type, (unsigned)i);
    if (c == NULL)
      break;
    aff__from_hwloc(&t->core_sets[t->ncore_sets++], c->cpuset);
  }
  return 0;
}

/* hwloc's part: the CPU tree (live, or the XML), host name, PUs, cores,
 * NUMA nodes, the CPUs hwloc allows. RET 0, or RDZV_* with err set. */
static int load_hwloc(aff_topo_t *t, const aff_topo_opts_t *opts, int io_hwloc,
                      char *err, size_t errlen) {
  aff_topo_opts_t o = *opts;
  const char *hn;
  if (topology_init(&t->hw, io_hwloc) != 0) {
    t->hw = NULL;
    return RDZV_ENOMEM;
  }
  /* Keep the PCI devices and OS devices (hwloc drops them by default). */
  if (io_hwloc)
    hwloc_topology_set_io_types_filter(t->hw, o.xml ? HWLOC_TYPE_FILTER_KEEP_ALL
                                                    : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  /* hwloc unloads its PCI plugin and with it libpciaccess, which keeps
   * about 1 KiB it never frees: pinned, that memory stays attributed to
   * libpciaccess (tests/lsan.supp) and a second discovery maps nothing. */
  if (!o.xml && io_hwloc)
    (void)dlopen("libpciaccess.so.0", RTLD_NOW | RTLD_NODELETE | RTLD_GLOBAL);
  /* hwloc's GPU plugins would initialise CUDA, OpenCL or GL inside the
   * agent (and the OpenCL loader leaks); NVML is asked directly below. */
  if (!o.xml)
    for (size_t i = 0; i < LU_ARRAY_SIZE(skip_components); i++)
      hwloc_topology_set_components(t->hw,
                                    HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                    skip_components[i]);
  if (o.xml && hwloc_topology_set_xml(t->hw, o.xml) != 0) {
    lu_errf(err, errlen,
           "hwloc cannot read %s as an XML topology (%s); make one with "
           "`lstopo --of xml FILE` or `launch topo --export FILE` on the "
           "machine, check it with `lstopo -i FILE`",
           o.xml, strerror(errno));
    return RDZV_EINVAL;
  }
  if (hwloc_topology_load(t->hw) != 0) {
    lu_errf(err, errlen,
           "hwloc could not load %s (%s)%s", o.xml ? o.xml : "this machine's topology",
           strerror(errno),
           o.xml ? ": is it an hwloc 2.x XML file? check it with `lstopo -i "
                   "FILE`"
                 : "");
    return RDZV_EINVAL;
  }
  hn = info(hwloc_get_root_obj(t->hw), "HostName");
  if (hn)
    lu_strlcpy(t->hostname, hn, sizeof(t->hostname));
  else if (!o.xml && gethostname(t->hostname, sizeof(t->hostname) - 1) != 0)
    t->hostname[0] = '\0';

  /* CPUs and NUMA nodes */
  t->ncpus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
  t->ncores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
  if (t->ncores <= 0)
    t->ncores = t->ncpus;
  for (int i = 0;; i++) {
    hwloc_obj_t n = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (n == NULL || t->nnuma >= AFF_MAX_NUMA)
      break;
    t->numa_os[t->nnuma] = (int)n->os_index;
    aff__from_hwloc(&t->numa_cpus[t->nnuma], n->cpuset);
    t->nnuma++;
  }
  aff__from_hwloc(&t->allowed, hwloc_topology_get_allowed_cpuset(t->hw));
  return core_sets(t);
}

int aff_topo_load(const aff_topo_opts_t *opts, aff_topo_t **out, char *err,
                  size_t errlen) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t;
  const char *cvd;
  char *key;
  aff_gpu_probe_t probe[AFF_MAX_GPUS];
  int nprobe = -1, from_cudart = 0, io_hwloc;
  int rc;
  char gpusrc[64] = "PCI";

  if (opts)
    memcpy(&o, opts, LU_MIN(sizeof(o), opts->size ? opts->size : sizeof(o)));
  *out = NULL;
  if ((t = calloc(1, sizeof(*t))) == NULL)
    return RDZV_ENOMEM;
  if (o.root && strcmp(o.root, "/") != 0)
    lu_strlcpy(t->root, o.root, sizeof(t->root));
  t->from_xml = o.xml != NULL;
  /* This machine by default, and a fixture checked against a fake tree:
   * GPUs and NICs from sysfs, hwloc for the CPUs only. hwloc's I/O
   * discovery reads every PCI device's config space (1.4 ms a device in a
   * VM) and is what the other sources need. */
  t->io_sysfs = o.xml ? o.io_from_root : o.gpu_source == AFF_GPUSRC_AUTO;
  t->sysfs_reads = !o.xml || t->io_sysfs;
  io_hwloc = !t->io_sysfs;
  if (o.xml && access(o.xml, R_OK) != 0) {
    rc = -errno;
    lu_errf(err, errlen, "topology file %s: %s", o.xml, strerror(errno));
    free(t);
    return rc;
  }
  key = NULL;
  if (t->io_sysfs && aff__tcache_enabled() &&
      aff__tcache_key(t, o.xml, &key) == 0 &&
      aff__tcache_load(t, key, o.log) == 1) {
    /* This boot's discovery with these inputs: no hwloc, no sysfs walk;
     * what changes while the machine runs is read again. */
    t->from_cache = 1;
    aff__sysfs_refresh(t);
    if (!o.xml && gethostname(t->hostname, sizeof(t->hostname) - 1) != 0)
      t->hostname[0] = '\0';
  } else if ((rc = load_hwloc(t, &o, io_hwloc, err, errlen)) != 0) {
    aff_topo_free(t);
    free(key);
    return rc;
  }
  if (!o.xml) {
    /* The agent's own mask (cgroup cpuset, srun --cpu-bind, taskset) is
     * the most the workers may get. */
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof(mine), &mine) == 0) {
      aff_cpuset_t m;
      aff_cpuset_zero(&m);
      for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
          aff_cpuset_set(&m, c);
      aff_cpuset_and(&t->allowed, &m);
    }
    /* and its memory nodes, which a memory binding must stay within */
    t->mems_known = syscall(SYS_get_mempolicy, NULL, t->mems,
                            (unsigned long)AFF_MAX_CPUS, NULL,
                            4 /* MPOL_F_MEMS_ALLOWED */) == 0;
  }

  cvd = o.cuda_visible_devices ? o.cuda_visible_devices
                               : (o.xml ? NULL : getenv("CUDA_VISIBLE_DEVICES"));
  if (t->io_sysfs) {
    /* GPUs and NICs from sysfs and /proc/driver/nvidia (aff_sysfs.c). */
    if (!t->from_cache)
      aff__sysfs_scan(t, o.log);
    snprintf(gpusrc, sizeof(gpusrc), "sysfs");
  } else {
    /* GPUs: PCI tree, then what NVML or the CUDA runtime says. */
    scan_gpus(t);
    if (!o.xml && o.gpu_source == AFF_GPUSRC_NVML) {
      nprobe = aff__nvml_gpus(t->nvml, AFF_MAX_GPUS, t->nvml_links);
      if (nprobe >= 0) {
        t->nnvml = nprobe;
        merge_probe(t, t->nvml, nprobe);
        snprintf(gpusrc, sizeof(gpusrc), "NVML");
      } else if (access("/proc/driver/nvidia/version", R_OK) == 0 &&
                 (nprobe = aff__cudart_gpus(probe, AFF_MAX_GPUS)) >= 0) {
        /* No NVML but a driver: ask the runtime (this initialises CUDA in
         * the agent, which NVML avoids). */
        /* The runtime applied CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
         * itself: its list is the visible list. */
        merge_probe(t, probe, nprobe);
        from_cudart = 1;
        snprintf(gpusrc, sizeof(gpusrc), "the CUDA runtime");
      }
    }
    if (t->nall == 0 && !o.xml)
      scan_gpus_sysfs(t); /* hwloc without PCI discovery */
    scan_nics(t);
  }
  finish_nics(t);
  if (key && !t->from_cache)
    (void)aff__tcache_store(t, key, o.log);
  free(key);
  if ((!o.xml || t->io_sysfs) && !from_cudart)
    check_order(t, o.cuda_device_order ? o.cuda_device_order
                   : o.xml             ? NULL
                                       : getenv("CUDA_DEVICE_ORDER"),
                o.log);
  if (from_cudart) {
    t->ngpus = 0;
    for (int i = 0; i < nprobe && t->ngpus < AFF_MAX_GPUS; i++) {
      int k = find_all(t, probe[i].busid);
      if (k < 0)
        continue;
      t->gpus[t->ngpus] = t->all[k];
      t->gpu_obj[t->ngpus] = t->all_obj[k];
      t->gpu_io[t->ngpus] = t->all_io[k];
      t->gpus[t->ngpus].phys = k;
      t->gpus[t->ngpus].index = t->ngpus;
      t->ngpus++;
    }
  } else {
    apply_visible(t, cvd, o.log);
  }
  /* What only NVML knows: remembered for this boot by the NVML path,
   * taken by the sysfs one. */
  if (t->io_sysfs && aff__cache_apply(t))
    lu_strlcpy(gpusrc, "sysfs, memory and NVLink from NVML this boot",
               sizeof(gpusrc));
  else if (!o.xml && t->nnvml > 0)
    (void)aff__cache_store(t);
  scan_nvlink(t);
  pick_nics(t);
  compute_warnings(t);

  if (o.xml && t->io_sysfs)
    snprintf(t->source, sizeof(t->source), "hwloc XML %s, I/O from %s",
             o.xml, t->root[0] ? t->root : "/");
  else if (o.xml)
    snprintf(t->source, sizeof(t->source), "hwloc XML %s", o.xml);
  else
    snprintf(t->source, sizeof(t->source), "this machine (hwloc %s, GPUs from %s)",
             HWLOC_VERSION, gpusrc);
  *out = t;
  return 0;
}

void aff_topo_free(aff_topo_t *t) {
  if (t == NULL)
    return;
  if (t->hw)
    hwloc_topology_destroy(t->hw);
  free(t->core_sets);
  free(t);
}

const char *aff_topo_source(const aff_topo_t *t) { return t->source; }
const char *aff_topo_hostname(const aff_topo_t *t) { return t->hostname; }
int aff_topo_ngpus(const aff_topo_t *t) { return t->ngpus; }

const aff_gpu_t *aff_topo_gpu(const aff_topo_t *t, int i) {
  return i >= 0 && i < t->ngpus ? &t->gpus[i] : NULL;
}

int aff_topo_nnics(const aff_topo_t *t) { return t->nnics; }

const aff_nic_t *aff_topo_nic(const aff_topo_t *t, int i) {
  return i >= 0 && i < t->nnics ? &t->nics[i] : NULL;
}

int aff_topo_ncpus(const aff_topo_t *t) { return t->ncpus; }
int aff_topo_nallowed(const aff_topo_t *t) { return aff_cpuset_count(&t->allowed); }
int aff_topo_ncores(const aff_topo_t *t) { return t->ncores; }
int aff_topo_nnuma(const aff_topo_t *t) { return t->nnuma; }

int aff_topo_numa(const aff_topo_t *t, int i, aff_cpuset_t *cpus) {
  if (i < 0 || i >= t->nnuma)
    return -1;
  if (cpus)
    *cpus = t->numa_cpus[i];
  return t->numa_os[i];
}

uint64_t aff_topo_nvlink_mbps(const aff_topo_t *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->ngpus || b >= t->ngpus)
    return 0;
  return t->nvlink[a][b];
}

int aff_topo_has_nvlink(const aff_topo_t *t) {
  if (t->ngpus < 2)
    return -1;
  for (int i = 0; i < t->ngpus; i++)
    for (int j = 0; j < t->ngpus; j++)
      if (t->nvlink[i][j] > 0)
        return 1;
  /* An XML file without NVLinkBandwidth has none; sysfs cannot tell. */
  return t->nvlink_known ? 0 : (t->from_xml && !t->io_sysfs ? 0 : -1);
}

const char *aff_topo_gpu_hcas(const aff_topo_t *t) { return t->gpu_hcas; }
int aff_topo_nwarnings(const aff_topo_t *t) { return t->nwarn; }

const char *aff_topo_warning(const aff_topo_t *t, int i) {
  return i >= 0 && i < t->nwarn ? t->warn[i] : NULL;
}

/* ---- export ---------------------------------------------------------------------------- */

static void add_info_once(hwloc_obj_t o, const char *name, const char *value) {
  if (value && value[0] && hwloc_obj_get_info_by_name(o, name) == NULL)
    hwloc_obj_add_info(o, name, value);
}

static void add_link_infos(hwloc_obj_t o, const aff_pcie_t *l) {
  char v[32];
  if (o == NULL)
    return;
  if (l->width > 0) {
    snprintf(v, sizeof(v), "%d", l->width);
    add_info_once(o, "PCIeLinkWidth", v);
  }
  if (l->width_max > 0) {
    snprintf(v, sizeof(v), "%d", l->width_max);
    add_info_once(o, "PCIeLinkWidthMax", v);
  }
  if (l->gts > 0) {
    snprintf(v, sizeof(v), "%.1f", l->gts);
    add_info_once(o, "PCIeLinkSpeedGTs", v);
  }
  if (l->gts_max > 0) {
    snprintf(v, sizeof(v), "%.1f", l->gts_max);
    add_info_once(o, "PCIeLinkSpeedMaxGTs", v);
  }
}

int aff_topo_export_xml(const aff_topo_t *tc, const char *path, char *err,
                        size_t errlen) {
  aff_topo_t *t = (aff_topo_t *)tc; /* infos are added to the tree */
  if (t->io_sysfs && !t->from_xml) {
    /* An export is hwloc's tree with its I/O objects, which the sysfs
     * discovery does without: read this machine again, through hwloc. */
    aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
    aff_topo_t *io = NULL;
    int rc;
    o.root = t->root[0] ? t->root : NULL;
    o.gpu_source = AFF_GPUSRC_PCI;
    if ((rc = aff_topo_load(&o, &io, err, errlen)) != 0)
      return rc;
    rc = aff_topo_export_xml(io, path, err, errlen);
    aff_topo_free(io);
    return rc;
  }
  if (t->io_sysfs) {
    lu_errf(err, errlen,
            "this topology's GPUs and NICs come from a sysfs tree, not from "
            "hwloc's I/O objects, which an XML export needs");
    return RDZV_EINVAL;
  }
  for (int i = 0; i < t->nall; i++)
    add_link_infos(t->all_obj[i], &t->all[i].link);
  for (int k = 0; k < t->nnics; k++) {
    const aff_nic_t *n = &t->nics[k];
    hwloc_obj_t o = t->nic_obj[k];
    add_link_infos(o, &n->link);
    for (hwloc_obj_t c = o ? o->io_first_child : NULL; c; c = c->next_sibling) {
      char key[32];
      if (c->type != HWLOC_OBJ_OS_DEVICE ||
          c->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || c->name == NULL)
        continue;
      for (int port = 1; port <= n->nports; port++) {
        aff_ib_port_t pt;
        aff_ib_port_read(t->root, c->name, port, &pt);
        snprintf(key, sizeof(key), "Port%dRate", port);
        if (pt.rate[0])
          add_info_once(c, key, pt.rate);
        snprintf(key, sizeof(key), "Port%dLinkLayer", port);
        if (pt.link_layer[0])
          add_info_once(c, key, pt.link_layer);
      }
    }
  }
  if (hwloc_topology_export_xml(t->hw, path, 0) != 0) {
    lu_errf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return RDZV_EINVAL;
  }
  return 0;
}

/* ---- comparing two loads ------------------------------------------------------------ */

typedef struct cmp_s {
  lu_buf_t *b;
  size_t max;
  int n;
} cmp_t;

static void LU_PRINTF(2, 3) cmp_diff(cmp_t *c, const char *fmt, ...) {
  va_list ap;
  char line[512];
  c->n++;
  if (c->b->len >= c->max)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  lu_buf_printf(c->b, "%s\n", line);
}

static void cmp_str(cmp_t *c, const char *what, const char *a, const char *b) {
  if (strcmp(a, b) != 0)
    cmp_diff(c, "%s: '%s' vs '%s'", what, a, b);
}

static void cmp_int(cmp_t *c, const char *what, long long a, long long b) {
  if (a != b)
    cmp_diff(c, "%s: %lld vs %lld", what, a, b);
}

static void cmp_cpus(cmp_t *c, const char *what, const aff_cpuset_t *a,
                     const aff_cpuset_t *b) {
  char la[256], lb[256];
  if (aff_cpuset_equal(a, b))
    return;
  aff_cpulist_format(a, la, sizeof(la));
  aff_cpulist_format(b, lb, sizeof(lb));
  cmp_diff(c, "%s: %s vs %s", what, la, lb);
}

static void cmp_link(cmp_t *c, const char *who, const aff_pcie_t *a,
                     const aff_pcie_t *b) {
  char what[64];
  snprintf(what, sizeof(what), "%s link width", who);
  cmp_int(c, what, a->width, b->width);
  snprintf(what, sizeof(what), "%s link max width", who);
  cmp_int(c, what, a->width_max, b->width_max);
  if (fabs(a->gts - b->gts) > 0.05 || fabs(a->gts_max - b->gts_max) > 0.05)
    cmp_diff(c, "%s link speed: %.1f (max %.1f) vs %.1f (max %.1f) GT/s", who,
             a->gts, a->gts_max, b->gts, b->gts_max);
  /* hwloc computes GB/s from config space or, without the right to read
   * it, from sysfs with another rounding for gen 6: 5 % apart at most. */
  if (a->gbps > 0 && b->gbps > 0 &&
      fabs(a->gbps - b->gbps) > 0.05 * LU_MAX(a->gbps, b->gbps))
    cmp_diff(c, "%s link: %.2f vs %.2f GB/s", who, a->gbps, b->gbps);
}

/* One field of x and y, named "<who> <field>". */
#define F(field, fn)                                                           \
  do {                                                                         \
    snprintf(w, sizeof(w), "%s " #field, who);                                 \
    fn(&c, w, x->field, y->field);                                             \
  } while (0)

int aff_topo_compare(const aff_topo_t *a, const aff_topo_t *b, char *diff,
                     size_t n) {
  lu_buf_t buf = LU_BUF_INIT;
  cmp_t c = {&buf, n > 0 ? n : 0, 0};
  char w[64];
  cmp_int(&c, "PUs", a->ncpus, b->ncpus);
  cmp_int(&c, "cores", a->ncores, b->ncores);
  cmp_int(&c, "NUMA nodes", a->nnuma, b->nnuma);
  for (int i = 0; i < LU_MIN(a->nnuma, b->nnuma); i++) {
    snprintf(w, sizeof(w), "NUMA node %d", i);
    cmp_int(&c, w, a->numa_os[i], b->numa_os[i]);
    cmp_cpus(&c, w, &a->numa_cpus[i], &b->numa_cpus[i]);
  }
  cmp_cpus(&c, "CPUs a plan may use", &a->allowed, &b->allowed);
  cmp_int(&c, "visible GPUs", a->ngpus, b->ngpus);
  for (int i = 0; i < LU_MIN(a->ngpus, b->ngpus); i++) {
    const aff_gpu_t *x = &a->gpus[i], *y = &b->gpus[i];
    char who[16];
    snprintf(who, sizeof(who), "GPU%d", i);
    F(busid, cmp_str);
    F(phys, cmp_int);
    F(model, cmp_str);
    F(uuid, cmp_str);
    F(device, cmp_int);
    F(numa, cmp_int);
    snprintf(w, sizeof(w), "%s cpus", who);
    cmp_cpus(&c, w, &x->cpus, &y->cpus);
    cmp_link(&c, who, &x->link, &y->link);
    snprintf(w, sizeof(w), "%s closest NIC", who);
    cmp_str(&c, w, x->nic >= 0 ? a->nics[x->nic].name : "none",
            y->nic >= 0 ? b->nics[y->nic].name : "none");
    F(nic_path, cmp_int);
  }
  cmp_int(&c, "NICs", a->nnics, b->nnics);
  for (int k = 0; k < LU_MIN(a->nnics, b->nnics); k++) {
    const aff_nic_t *x = &a->nics[k], *y = &b->nics[k];
    char who[16];
    snprintf(who, sizeof(who), "NIC%d", k);
    F(name, cmp_str);
    F(hca, cmp_str);
    F(netdev, cmp_str);
    F(busid, cmp_str);
    F(numa, cmp_int);
    F(port, cmp_int);
    F(port_state, cmp_int);
    F(rate_gbps, cmp_int);
    F(link_layer, cmp_str);
    cmp_link(&c, who, &x->link, &y->link);
  }
  if (a->ngpus == b->ngpus && a->nnics == b->nnics) {
    for (int i = 0; i < a->ngpus; i++)
      for (int j = 0; j < a->ngpus; j++) {
        /* NVLink is NVML's to know (the other side falls back to PCIe). */
        if (a->nvlink[i][j] || b->nvlink[i][j])
          continue;
        snprintf(w, sizeof(w), "path GPU%d-GPU%d", i, j);
        cmp_str(&c, w, aff_path_name(aff_topo_gpu_path(a, i, j)),
                aff_path_name(aff_topo_gpu_path(b, i, j)));
      }
    for (int i = 0; i < a->ngpus; i++)
      for (int k = 0; k < a->nnics; k++) {
        snprintf(w, sizeof(w), "path GPU%d-NIC%d", i, k);
        cmp_str(&c, w, aff_path_name(aff_topo_gpu_nic_path(a, i, k)),
                aff_path_name(aff_topo_gpu_nic_path(b, i, k)));
      }
    for (int i = 0; i < a->nnics; i++)
      for (int k = 0; k < a->nnics; k++) {
        snprintf(w, sizeof(w), "path NIC%d-NIC%d", i, k);
        cmp_str(&c, w, aff_path_name(aff__nic_path(a, i, k)),
                aff_path_name(aff__nic_path(b, i, k)));
      }
  }
  cmp_str(&c, "GPU-attached HCAs", a->gpu_hcas, b->gpu_hcas);
#undef F
  if (diff && n > 0)
    lu_strlcpy(diff, buf.data ? buf.data : "", n);
  lu_buf_free(&buf);
  return c.n;
}
