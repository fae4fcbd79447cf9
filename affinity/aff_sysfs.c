/* aff_sysfs.c - GPUs, NICs and PCIe paths from sysfs and /proc/driver/nvidia,
 * the agent's default (AFF_GPUSRC_AUTO).
 *
 * Why: hwloc's I/O discovery reads every PCI device's config space (1.4 ms
 * a device in a VM, where each read traps), and NVML or the CUDA runtime
 * loaded into the agent cost ~20 MB and ~30 ms on a GPU node. What the plan
 * needs is in small sysfs files the kernel keeps anyway: class, vendor and
 * device ids, the device's place in the PCI tree (its sysfs path), its
 * local CPUs, its link; and the driver's per-GPU file in /proc gives the
 * model, UUID and minor number NVML would.
 *
 * The result must be what hwloc's I/O tree gives, so the rules below are
 * hwloc 2.x's (pci-common.c, topology-linux.c), cited where they apply:
 * which PCI devices it keeps (KEEP_IMPORTANT), where it hangs a host bridge
 * in the CPU tree (the first kept device's local CPUs), which netdev and
 * RDMA device belong to a PCI device. tests/test_aff_sysfs.c checks the
 * result against hwloc on every tests/topo fixture (a fake sysfs tree made
 * from each), tests/test_aff_gpu_probe.c against hwloc + NVML on a GPU
 * machine. Known differences, none of which the fixtures or the machines
 * we know have: hwloc's locality overrides (HWLOC_PCI_LOCALITY, its quirk
 * for the HPE Cray EX235A) are not applied, and an I/O Group hwloc would
 * insert for local CPUs that match no object is approximated (its NUMA
 * node is exact, its place for the NODE/SYS distinction between devices
 * whose NUMA node is unknown is not). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff_int.h"

#define SYS_PCI "/sys/bus/pci/devices"

/* hwloc_filter_check_pcidev_subtype_important() (hwloc/plugins.h): the
 * PCI classes hwloc keeps with HWLOC_TYPE_FILTER_KEEP_IMPORTANT. */
static int class_important(unsigned cls) {
  unsigned base = cls >> 8;
  return base == 0x03 || base == 0x02 || base == 0x01 || base == 0x00 ||
         base == 0x0b || cls == 0x0c04 || cls == 0x0c06 || cls == 0x0502 ||
         base == 0x06 || base == 0x12;
}

static int read_hex(const char *root, const char *busid, const char *attr,
                    unsigned long *v) {
  char path[128], buf[32];
  snprintf(path, sizeof(path), SYS_PCI "/%s/%s", busid, attr);
  if (aff__read_line(root, path, buf, sizeof(buf)) <= 0)
    return -1;
  *v = strtoul(buf, NULL, 16);
  return 0;
}

/* PCI class (the upper 16 bits of sysfs' 24-bit class), -1 unknown. */
static long pci_class(const char *root, const char *busid) {
  unsigned long v;
  return read_hex(root, busid, "class", &v) == 0 ? (long)(v >> 8) : -1;
}

static int sys_readlink(const aff_topo_t *t, const char *path, char *buf,
                        size_t n) {
  char full[768];
  ssize_t r;
  snprintf(full, sizeof(full), "%s%s", t->root, path);
  r = readlink(full, buf, n - 1);
  if (r < 0)
    return -1;
  buf[r] = '\0';
  return (int)r;
}

/* ---- the PCI tree --------------------------------------------------------------- */

/* From a device's sysfs path ("../../../devices/pci0000:00/0000:00:01.0/
 * 0000:03:00.0") its chain: the device, its bridges, its host bridge, as
 * hwloc's tree has them (every directory between a root bus and a device
 * is a bridge to that device). A root bus inside another (Intel VMD's
 * pci10000:00) starts the chain again, as it is a host bridge of its own
 * to hwloc. OUT rootdir: the path of the root bus directory, relative to
 * /sys/bus/pci/devices. RET 0, -1 when the path has no root bus. */
static int parse_chain(const char *target, aff_iopath_t *io, char *rootdir,
                       size_t rn) {
  char buf[512], *save = NULL, *c;
  char ids[AFF_PCI_DEPTH][16], hb[16] = "";
  int n = 0;
  size_t at = 0, root_end = 0;
  lu_strlcpy(buf, target, sizeof(buf));
  for (c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    unsigned dom, bus;
    char norm[16], tail;
    at += strlen(c) + 1;
    if (sscanf(c, "pci%x:%x%c", &dom, &bus, &tail) == 2) {
      snprintf(hb, sizeof(hb), "hb:%04x:%02x", dom & 0xffff, bus & 0xff);
      n = 0;
      root_end = at - 1;
    } else if (hb[0] && aff__busid_norm(c, norm) == 0 && n < AFF_PCI_DEPTH - 1) {
      lu_strlcpy(ids[n++], norm, sizeof(ids[0]));
    }
  }
  if (hb[0] == '\0' || n == 0)
    return -1;
  io->n = 0;
  for (int i = n - 1; i >= 0; i--)
    lu_strlcpy(io->id[io->n++], ids[i], sizeof(io->id[0]));
  lu_strlcpy(io->id[io->n++], hb, sizeof(io->id[0]));
  snprintf(rootdir, rn, "%.*s", (int)root_end, target);
  return 0;
}

/* The local CPUs hwloc gives a host bridge: those of its first child it
 * keeps, in bus id order (hwloc_pcidisc_tree_attach: "hostbridges don't
 * have a PCI busid for looking up locality, use their first child").
 * rootdir as parse_chain gives it. RET 0, -1 unknown (hwloc then uses the
 * whole machine). */
static int bus_local_cpus(const aff_topo_t *t, const char *rootdir,
                          aff_cpuset_t *set) {
  char dir[1024], first[16] = "", path[128], list[AFF_CPULIST_LEN];
  DIR *d;
  struct dirent *e;
  snprintf(dir, sizeof(dir), "%s" SYS_PCI "/%s", t->root, rootdir);
  if ((d = opendir(dir)) == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    char norm[16];
    long cls;
    if (aff__busid_norm(e->d_name, norm) != 0 ||
        (first[0] && strcmp(norm, first) >= 0))
      continue;
    if ((cls = pci_class(t->root, norm)) < 0 || !class_important((unsigned)cls))
      continue;
    lu_strlcpy(first, norm, sizeof(first));
  }
  closedir(d);
  if (first[0] == '\0')
    return -1;
  snprintf(path, sizeof(path), SYS_PCI "/%s/local_cpulist", first);
  if (aff__read_line(t->root, path, list, sizeof(list)) <= 0 ||
      aff_cpulist_parse(list, set, NULL, 0) != 0 || aff_cpuset_count(set) == 0)
    return -1;
  return 0;
}

static void to_hwloc(hwloc_bitmap_t d, const aff_cpuset_t *s) {
  hwloc_bitmap_zero(d);
  for (int c = aff_cpuset_first(s); c >= 0; c = aff_cpuset_next(s, c))
    hwloc_bitmap_set(d, (unsigned)c);
}

/* hwloc_get_highest_obj_covering_complete_cpuset() (topology.c): from the
 * root down, the first child whose complete cpuset equals set, else the
 * child that contains it, until none does. */
static hwloc_obj_t highest_covering(hwloc_topology_t hw, hwloc_const_bitmap_t set) {
  hwloc_obj_t cur = hwloc_get_root_obj(hw);
  if (hwloc_bitmap_isequal(set, cur->complete_cpuset))
    return cur;
  for (;;) {
    hwloc_obj_t c, next = NULL;
    for (c = cur->first_child; c; c = c->next_sibling) {
      if (hwloc_bitmap_isequal(set, c->complete_cpuset))
        return c;
      if (!hwloc_bitmap_iszero(c->complete_cpuset) &&
          hwloc_bitmap_isincluded(set, c->complete_cpuset)) {
        next = c;
        break;
      }
    }
    if (next == NULL)
      return cur;
    cur = next;
  }
}

/* Where hwloc hangs a host bridge whose local CPUs are `local` (NULL:
 * unknown) and what follows for its devices: the NUMA node (the object's
 * nodeset when it has one node, else -1) and the local CPUs (its cpuset).
 * hwloc_find_insert_io_parent_by_complete_cpuset(): the highest object
 * with exactly these CPUs, else an I/O Group of them below the smallest
 * object covering them, unless a child of that object straddles them
 * (then the object itself). */
static int bus_locality(const aff_topo_t *t, const aff_cpuset_t *local,
                        int hint, aff_iopath_t *io, aff_cpuset_t *cpus) {
  hwloc_topology_t hw = t->hw;
  hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
  hwloc_obj_t lp;
  int node = -1;
  if (set == NULL || nodes == NULL) {
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(nodes);
    aff__set_loc(io, NULL);
    return -1;
  }
  if (local)
    to_hwloc(set, local);
  else
    hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(hw));
  hwloc_bitmap_and(set, set, hwloc_topology_get_complete_cpuset(hw));
  io->loc_group = 0;
  if (hwloc_bitmap_iszero(set)) {
    lp = hwloc_get_root_obj(hw);
  } else {
    lp = highest_covering(hw, set);
    if (!hwloc_bitmap_isequal(lp->complete_cpuset, set)) {
      int straddle = 0, any = 0;
      for (hwloc_obj_t c = lp->first_child; c; c = c->next_sibling) {
        if (hwloc_bitmap_isincluded(c->complete_cpuset, set)) {
          if (c->nodeset)
            hwloc_bitmap_or(nodes, nodes, c->nodeset);
          any = 1;
        } else if (hwloc_bitmap_intersects(c->complete_cpuset, set)) {
          straddle = 1;
        }
      }
      if (!straddle && any) {
        unsigned long h = 1469598103u;
        /* The group, told apart from others below lp by its CPUs. */
        for (int c = hwloc_bitmap_first(set); c >= 0; c = hwloc_bitmap_next(set, c))
          h = (h ^ (unsigned long)c) * 16777619u;
        io->loc_group = h | 1u;
        hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(hw));
        aff__from_hwloc(cpus, set);
        node = aff__node_of(hw, nodes, hint);
        aff__set_loc(io, lp);
        hwloc_bitmap_free(set);
        hwloc_bitmap_free(nodes);
        return node;
      }
    }
  }
  aff__set_loc(io, lp);
  aff__from_hwloc(cpus, lp->cpuset);
  node = aff__node_of(hw, lp->nodeset, hint);
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(nodes);
  return node;
}

/* Chain, locality and NUMA node of a PCI device. RET the NUMA node. */
static int place(const aff_topo_t *t, const char *busid, aff_iopath_t *io,
                 aff_cpuset_t *cpus) {
  char link[512], path[128], rootdir[512], numa[16];
  aff_cpuset_t local;
  int hint = -1;
  memset(io, 0, sizeof(*io));
  aff_cpuset_zero(cpus);
  snprintf(path, sizeof(path), SYS_PCI "/%s", busid);
  if (sys_readlink(t, path, link, sizeof(link)) < 0 ||
      parse_chain(link, io, rootdir, sizeof(rootdir)) != 0) {
    memset(io, 0, sizeof(*io));
    return -1;
  }
  /* the kernel's numa_node picks among nodes of the same CPUs */
  snprintf(path, sizeof(path), SYS_PCI "/%s/numa_node", busid);
  if (aff__read_line(t->root, path, numa, sizeof(numa)) > 0)
    hint = atoi(numa);
  return bus_locality(t, bus_local_cpus(t, rootdir, &local) == 0 ? &local : NULL,
                      hint, io, cpus);
}

static void link_of(const aff_topo_t *t, const char *busid, aff_pcie_t *l) {
  memset(l, 0, sizeof(*l));
  aff__pcie_sysfs(t, busid, l);
  l->gbps = aff__pcie_gbps(l->gts, l->width);
}

/* ---- GPUs ------------------------------------------------------------------------------ */

typedef struct drv_gpu_s {
  char busid[16];
  char model[64];
  char uuid[48];
  int minor;
  int excluded;
  unsigned device; /* PCI device id */
} drv_gpu_t;

/* /proc/driver/nvidia/gpus/<bus id>/information, one per GPU the driver
 * runs: "Model: \t\t NVIDIA H200", "GPU UUID: \t GPU-...", "Device Minor:
 * \t 0", "GPU Excluded: \t No". RET the count, -1 when the directory is
 * absent (no driver, or a driver that does not say). */
static int read_driver_gpus(const char *root, drv_gpu_t *g, int max) {
  char dir[512];
  DIR *d;
  struct dirent *e;
  int n = 0;
  snprintf(dir, sizeof(dir), "%s/proc/driver/nvidia/gpus", root);
  if ((d = opendir(dir)) == NULL)
    return -1;
  while ((e = readdir(d)) != NULL && n < max) {
    char path[512], text[2048], *save = NULL, *line;
    drv_gpu_t *x = &g[n];
    memset(x, 0, sizeof(*x));
    x->minor = -1;
    if (aff__busid_norm(e->d_name, x->busid) != 0)
      continue;
    snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information",
             e->d_name);
    if (aff__read_line(root, path, text, sizeof(text)) < 0)
      continue;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      char *colon = strchr(line, ':'), *v;
      if (colon == NULL)
        continue;
      *colon = '\0';
      for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
        ;
      lu_rtrim(v, strlen(v));
      if (strcmp(line, "Model") == 0)
        lu_strlcpy(x->model, v, sizeof(x->model));
      else if (strcmp(line, "GPU UUID") == 0 && strncmp(v, "GPU-", 4) == 0)
        lu_strlcpy(x->uuid, v, sizeof(x->uuid));
      else if (strcmp(line, "Device Minor") == 0)
        x->minor = atoi(v);
      else if (strcmp(line, "GPU Excluded") == 0)
        x->excluded = strncmp(v, "Yes", 3) == 0;
    }
    n++;
  }
  closedir(d);
  return n;
}

static int dev_exists(const char *root, const char *name) {
  char path[512];
  struct stat sb;
  snprintf(path, sizeof(path), "%s/dev/%s", root, name);
  return stat(path, &sb) == 0;
}

/* Some /dev/nvidia<N> but not necessarily all: a container given some GPUs
 * (nvidia-container-toolkit, the Kubernetes device plugin) has only theirs.
 * A host whose nodes are not made yet (no persistence daemon, no CUDA
 * process since boot) has none, and then nothing is filtered
 * (aff__nvidia_dev_nodes, aff_facts.c, which launch doctor counts with). */
/* An NVIDIA display or 3D controller (0x0300 VGA, 0x0302 3D controller:
 * every datacenter GPU) at busid. OUT *device: its PCI device id. */
static int is_gpu(const char *root, const char *busid, unsigned *device) {
  unsigned long vendor, dev;
  long cls;
  if (read_hex(root, busid, "vendor", &vendor) != 0 || vendor != 0x10de)
    return 0;
  cls = pci_class(root, busid);
  if (cls != 0x0300 && cls != 0x0302)
    return 0;
  *device = read_hex(root, busid, "device", &dev) == 0 ? (unsigned)dev : 0;
  return 1;
}

/* The GPUs CUDA can use under root, in bus id order: those the driver
 * runs and has not excluded and, in a container, whose device node it was
 * given; without a driver every NVIDIA GPU of the PCI bus. With a driver
 * only its GPUs' files are read, so that --nproc-per-node gpu counts them
 * (aff_gpu_count) at the cost of a few small reads. OUT g[0..max-1],
 * *skipped: GPUs the driver runs that CUDA does not see here. RET the
 * count. */
static int cuda_gpus(const char *root, drv_gpu_t *g, int max, int *skipped) {
  DIR *d;
  struct dirent *e;
  int ndrv = read_driver_gpus(root, g, max), devfilter, n = 0;
  *skipped = 0;
  if (ndrv < 0) {
    char dir[512];
    snprintf(dir, sizeof(dir), "%s" SYS_PCI, root);
    if ((d = opendir(dir)) == NULL)
      return 0;
    while ((e = readdir(d)) != NULL && n < max) {
      memset(&g[n], 0, sizeof(g[n]));
      g[n].minor = -1;
      if (aff__busid_norm(e->d_name, g[n].busid) == 0 &&
          is_gpu(root, g[n].busid, &g[n].device))
        n++;
    }
    closedir(d);
  } else {
    devfilter = ndrv > 0 && aff__nvidia_dev_nodes(root);
    for (int i = 0; i < ndrv; i++) {
      char name[32];
      drv_gpu_t x = g[i];
      if (!is_gpu(root, x.busid, &x.device))
        continue;
      snprintf(name, sizeof(name), "nvidia%d", x.minor);
      if (x.excluded || (devfilter && (x.minor < 0 || !dev_exists(root, name)))) {
        (*skipped)++;
        continue;
      }
      g[n++] = x;
    }
  }
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(g[j - 1].busid, g[j].busid) > 0; j--) {
      drv_gpu_t tmp = g[j];
      g[j] = g[j - 1];
      g[j - 1] = tmp;
    }
  return n;
}

int aff_gpu_count(const char *root, const char *cuda_visible_devices) {
  drv_gpu_t *drv = calloc(AFF_MAX_GPUS, sizeof(*drv));
  const char *uuids[AFF_MAX_GPUS];
  int pick[AFF_MAX_GPUS], n, skipped;
  if (drv == NULL)
    return 0;
  n = cuda_gpus(root && strcmp(root, "/") ? root : "", drv, AFF_MAX_GPUS,
                &skipped);
  for (int i = 0; i < n; i++)
    uuids[i] = drv[i].uuid;
  n = aff__visible(cuda_visible_devices, uuids, n, pick, NULL);
  free(drv);
  return n;
}

static void scan_gpus(aff_topo_t *t, lu_log_t *log) {
  drv_gpu_t *drv = calloc(AFF_MAX_GPUS, sizeof(*drv));
  int n, skipped;
  if (drv == NULL)
    return;
  n = cuda_gpus(t->root, drv, AFF_MAX_GPUS, &skipped);
  for (int i = 0; i < n && t->nall < AFF_MAX_GPUS; i++) {
    const drv_gpu_t *x = &drv[i];
    aff_gpu_t *g = &t->all[t->nall];
    memset(g, 0, sizeof(*g));
    lu_strlcpy(g->busid, x->busid, sizeof(g->busid));
    g->vendor = 0x10de;
    g->device = (uint16_t)x->device;
    if (x->model[0])
      lu_strlcpy(g->model, x->model, sizeof(g->model));
    else if (aff_gpu_model_name(g->device))
      lu_strlcpy(g->model, aff_gpu_model_name(g->device), sizeof(g->model));
    else
      snprintf(g->model, sizeof(g->model), "NVIDIA [10de:%04x]", g->device);
    lu_strlcpy(g->uuid, x->uuid, sizeof(g->uuid));
    g->minor = x->minor;
    g->numa = place(t, g->busid, &t->all_io[t->nall], &g->cpus);
    link_of(t, g->busid, &g->link);
    g->nic = -1;
    g->nic_path = AFF_PATH_UNKNOWN;
    t->all_obj[t->nall] = NULL;
    t->nall++;
  }
  free(drv);
  if (skipped && log)
    LU_DBG(log, LU_DBG_AFF, "%d NVIDIA GPU(s) the driver runs are not CUDA's "
           "here (excluded, or not given to this container)", skipped);
  aff__sort_all(t);
}

/* ---- NICs ------------------------------------------------------------------------------- */

/* The PCI device of a class device (/sys/class/net/ib0), as
 * hwloc_linuxfs_find_osdev_parent() finds it: the last bus id in its sysfs
 * path; none for virtual and USB devices. RET 0 or -1. */
static int class_dev_pci(const aff_topo_t *t, const char *cls, const char *name,
                         char busid[16]) {
  char path[512], link[512], *p, *save = NULL, *c;
  int found = 0;
  snprintf(path, sizeof(path), "/sys/class/%s/%s", cls, name);
  if (sys_readlink(t, path, link, sizeof(link)) < 0) {
    /* Old kernels: a directory with a device link. */
    snprintf(path, sizeof(path), "/sys/class/%s/%s/device", cls, name);
    if (sys_readlink(t, path, link, sizeof(link)) < 0)
      return -1;
  }
  if (strstr(link, "/virtual/") || strstr(link, "/usb") ||
      (p = strstr(link, "/pci")) == NULL)
    return -1;
  for (c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save))
    if (aff__busid_norm(c, busid) == 0)
      found = 1;
  return found ? 0 : -1;
}

static aff_nic_t *nic_for(aff_topo_t *t, const char *busid) {
  long cls;
  aff_nic_t *n;
  for (int k = 0; k < t->nnics; k++)
    if (strcmp(t->nics[k].busid, busid) == 0)
      return &t->nics[k];
  /* hwloc keeps important PCI devices only, and a PCI-to-PCI bridge is a
   * bridge to it, not a device its OS devices could hang under. */
  cls = pci_class(t->root, busid);
  if (cls < 0 || !class_important((unsigned)cls) || cls == 0x0604 ||
      t->nnics >= AFF_MAX_NICS)
    return NULL;
  n = &t->nics[t->nnics++];
  memset(n, 0, sizeof(*n));
  lu_strlcpy(n->busid, busid, sizeof(n->busid));
  n->port_state = -1;
  return n;
}

static void scan_class(aff_topo_t *t, const char *cls) {
  char dir[512];
  DIR *d;
  struct dirent *e;
  snprintf(dir, sizeof(dir), "%s/sys/class/%s", t->root, cls);
  if ((d = opendir(dir)) == NULL)
    return;
  /* readdir order, as hwloc: the first netdev and the first RDMA device
   * of a PCI function name it. */
  while ((e = readdir(d)) != NULL) {
    char busid[16];
    aff_nic_t *n;
    int ib = strcmp(cls, "infiniband") == 0;
    if (e->d_name[0] == '.' || (ib && strncmp(e->d_name, "scif", 4) == 0) ||
        class_dev_pci(t, cls, e->d_name, busid) != 0 ||
        (n = nic_for(t, busid)) == NULL)
      continue;
    if (ib && n->hca[0] == '\0')
      lu_strlcpy(n->hca, e->d_name, sizeof(n->hca));
    else if (!ib && n->netdev[0] == '\0')
      lu_strlcpy(n->netdev, e->d_name, sizeof(n->netdev));
  }
  closedir(d);
}

static void scan_nics(aff_topo_t *t) {
  scan_class(t, "net");
  scan_class(t, "infiniband");
  for (int k = 0; k < t->nnics; k++) {
    aff_nic_t *n = &t->nics[k];
    unsigned long v;
    aff_cpuset_t cpus;
    lu_strlcpy(n->name, n->hca[0] ? n->hca : n->netdev, sizeof(n->name));
    if (read_hex(t->root, n->busid, "vendor", &v) == 0)
      n->vendor = (uint16_t)v;
    if (read_hex(t->root, n->busid, "device", &v) == 0)
      n->device = (uint16_t)v;
    n->numa = place(t, n->busid, &t->nic_io[k], &cpus);
    link_of(t, n->busid, &n->link);
    if (n->hca[0])
      aff__nic_ports(t, NULL, n);
    t->nic_obj[k] = NULL;
  }
}

void aff__sysfs_scan(aff_topo_t *t, lu_log_t *log) {
  scan_gpus(t, log);
  scan_nics(t);
}

void aff__sysfs_refresh(aff_topo_t *t) {
  for (int i = 0; i < t->nall; i++)
    link_of(t, t->all[i].busid, &t->all[i].link);
  for (int k = 0; k < t->nnics; k++) {
    link_of(t, t->nics[k].busid, &t->nics[k].link);
    if (t->nics[k].hca[0])
      aff__nic_ports(t, NULL, &t->nics[k]);
  }
}
