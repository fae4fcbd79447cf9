/* aff_facts.c - this node's facts from sysfs, read once: GPUs and their
 * PCIe links, RDMA devices and their ports, network interface names
 * (aff.h, "node facts"). The one reader of IB ports and PCIe link files. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aff.h"
#include "aff_int.h"

/* Leading number of "16.0 GT/s PCIe" / "8" / "Unknown" (0). */
static double lead_num(const char *s) {
  char *end;
  double v = strtod(s, &end);
  return end == s || v < 0 ? 0 : v;
}

static const char *root_of(const char *root) {
  return root == NULL || strcmp(root, "/") == 0 ? "" : root;
}

void aff_pcie_read(const char *root, const char *dir, aff_pcie_t *l) {
  static const char *const files[] = {"current_link_width", "max_link_width",
                                      "current_link_speed", "max_link_speed"};
  char path[768], buf[64];
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    if (lu_read_line(root_of(root), path, buf, sizeof(buf)) <= 0)
      continue;
    switch (i) {
    case 0: l->width = (int)lead_num(buf); break;
    case 1: l->width_max = (int)lead_num(buf); break;
    case 2: l->gts = lead_num(buf); break;
    default: l->gts_max = lead_num(buf); break;
    }
  }
}

int aff_ib_port_read(const char *root, const char *hca, int port,
                     aff_ib_port_t *p) {
  char path[256], buf[64];
  memset(p, 0, sizeof(*p));
  p->state = -1;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/ports/%d/state",
           hca, port);
  if (lu_read_line(root_of(root), path, buf, sizeof(buf)) > 0)
    p->state = atoi(buf); /* "4: ACTIVE" */
  snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/ports/%d/rate",
           hca, port);
  lu_read_line(root_of(root), path, p->rate, sizeof(p->rate));
  snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/ports/%d/link_layer",
           hca, port);
  lu_read_line(root_of(root), path, p->link_layer, sizeof(p->link_layer));
  return p->state >= 0 || p->rate[0] != '\0';
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

/* Every name in root+path (no dot entries), sorted: all of them, so that
 * a caller that keeps the first ones knows how many it left out (readdir
 * order is no order: a cap before the sort dropped any name, eth0 behind
 * a hundred cali* veths). OUT *out malloc'd. RET the count, -1 when the
 * directory cannot be read (or memory ran out: nothing known). */
static int names_in(const char *root, const char *path, char (**out)[64]) {
  char full[512], (*names)[64] = NULL;
  struct dirent *e;
  DIR *d;
  int n = 0, cap = 0;
  *out = NULL;
  snprintf(full, sizeof(full), "%s%s", root_of(root), path);
  if ((d = opendir(full)) == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    if (n == cap) {
      char (*nn)[64] = realloc(names, sizeof(*names) * (size_t)(cap = cap ? cap * 2 : 64));
      if (nn == NULL) {
        free(names);
        closedir(d);
        return -1;
      }
      names = nn;
    }
    lu_strlcpy(names[n++], e->d_name, sizeof(names[0]));
  }
  closedir(d);
  if (n > 0)
    qsort(names, (size_t)n, sizeof(names[0]), cmp_name);
  *out = names;
  return n;
}

static int read_int(const char *root, const char *path, int dflt) {
  char buf[64];
  return lu_read_line(root_of(root), path, buf, sizeof(buf)) > 0 ? atoi(buf)
                                                                : dflt;
}

/* NVIDIA display (0x0300) and 3D (0x0302) controllers of the PCI bus. */
static void probe_gpus(aff_facts_t *f, const char *root) {
  char (*devs)[64];
  int n = names_in(root, "/sys/bus/pci/devices", &devs);
  for (int i = 0; i < n && f->ngpus < AFF_FACTS_MAX; i++) {
    char dir[128], path[192], buf[64];
    unsigned long cls;
    aff_facts_gpu_t *g = &f->gpus[f->ngpus];
    snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%.63s", devs[i]);
    snprintf(path, sizeof(path), "%s/vendor", dir);
    if (lu_read_line(root_of(root), path, buf, sizeof(buf)) <= 0 ||
        strtoul(buf, NULL, 16) != 0x10de)
      continue;
    snprintf(path, sizeof(path), "%s/class", dir);
    if (lu_read_line(root_of(root), path, buf, sizeof(buf)) <= 0)
      continue;
    cls = strtoul(buf, NULL, 16) >> 8;
    if (cls != 0x0300 && cls != 0x0302)
      continue;
    memset(g, 0, sizeof(*g));
    lu_strlcpy(g->busid, devs[i], sizeof(g->busid));
    snprintf(path, sizeof(path), "%s/device", dir);
    if (lu_read_line(root_of(root), path, buf, sizeof(buf)) > 0)
      g->device = (unsigned)strtoul(buf, NULL, 16);
    snprintf(path, sizeof(path), "%s/numa_node", dir);
    g->numa = read_int(root, path, -1);
    aff_pcie_read(root, dir, &g->link);
    f->ngpus++;
  }
  free(devs);
}

/* root+path exists (stat: a device node is not opened). */
static int exists_in(const char *root, const char *path) {
  char full[512];
  struct stat sb;
  snprintf(full, sizeof(full), "%s%s", root_of(root), path);
  return stat(full, &sb) == 0;
}

/* Whether /dev holds some /dev/nvidia<N> (aff_int.h): the topology's scan
 * (aff_sysfs.c) and doctor's count filter GPUs on their nodes only then. */
int aff__nvidia_dev_nodes(const char *root) {
  char dir[512];
  DIR *d;
  struct dirent *e;
  int any = 0;
  snprintf(dir, sizeof(dir), "%s/dev", root_of(root));
  if (!exists_in(root, "/dev/nvidiactl") || (d = opendir(dir)) == NULL)
    return 0;
  while (!any && (e = readdir(d)) != NULL)
    any = strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' &&
          e->d_name[6] <= '9' &&
          strspn(e->d_name + 6, "0123456789") == strlen(e->d_name + 6);
  closedir(d);
  return any;
}

/* Which GPUs CUDA here can use (aff_gpu_use_t): the driver's list, its
 * exclusions, and the device nodes this container was given. */
static void probe_gpu_use(aff_facts_t *f, const char *root) {
  char path[256], text[2048], *line, *save;
  int minor[AFF_FACTS_MAX], listed = 0, devfilter;
  if (!exists_in(root, "/proc/driver/nvidia/gpus"))
    return; /* no driver, or one that does not say: nothing filtered */
  for (int i = 0; i < f->ngpus; i++) {
    aff_facts_gpu_t *g = &f->gpus[i];
    minor[i] = -1;
    snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%.32s/information",
             g->busid);
    if (lu_read_line(root_of(root), path, text, sizeof(text)) < 0) {
      g->use = AFF_GPU_NO_DRIVER;
      continue;
    }
    listed++;
    save = NULL;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      const char *v = strchr(line, ':');
      if (v == NULL)
        continue;
      v += 1 + strspn(v + 1, " \t");
      if (strncmp(line, "Device Minor:", 13) == 0)
        minor[i] = atoi(v);
      else if (strncmp(line, "GPU Excluded:", 13) == 0 && strncmp(v, "Yes", 3) == 0)
        g->use = AFF_GPU_EXCLUDED;
    }
  }
  devfilter = listed > 0 && aff__nvidia_dev_nodes(root);
  for (int i = 0; devfilter && i < f->ngpus; i++) {
    char name[32];
    snprintf(name, sizeof(name), "/dev/nvidia%d", minor[i]);
    if (f->gpus[i].use == AFF_GPU_USABLE &&
        (minor[i] < 0 || !exists_in(root, name)))
      f->gpus[i].use = AFF_GPU_NOT_GIVEN;
  }
}

static void probe_hcas(aff_facts_t *f, const char *root) {
  char (*names)[64];
  int n = names_in(root, "/sys/class/infiniband", &names);
  f->hcas_cut = n > AFF_FACTS_HCAS ? n - AFF_FACTS_HCAS : 0;
  for (int i = 0; i < n && f->nhcas < AFF_FACTS_HCAS; i++) {
    aff_facts_hca_t *h = &f->hcas[f->nhcas++];
    char dir[128], path[192];
    memset(h, 0, sizeof(*h));
    lu_strlcpy(h->name, names[i], sizeof(h->name));
    snprintf(dir, sizeof(dir), "/sys/class/infiniband/%.63s/device", names[i]);
    snprintf(path, sizeof(path), "%s/numa_node", dir);
    h->numa = read_int(root, path, -1);
    aff_pcie_read(root, dir, &h->link);
    while (h->nports < AFF_FACTS_PORTS &&
           aff_ib_port_read(root, h->name, h->nports + 1,
                            &h->ports[h->nports]))
      h->nports++;
  }
  free(names);
}

void aff_facts_probe(aff_facts_t *f, const char *root) {
  char (*names)[64];
  int n;
  memset(f, 0, sizeof(*f));
  n = names_in(root, "/sys/class/net", &names);
  f->probed = n >= 0;
  for (int i = 0; i < n && f->nnetdevs < AFF_FACTS_NETDEVS; i++)
    lu_strlcpy(f->netdevs[f->nnetdevs++], names[i], sizeof(f->netdevs[0]));
  f->netdevs_cut = n > f->nnetdevs ? n - f->nnetdevs : 0;
  free(names);
  probe_gpus(f, root);
  probe_gpu_use(f, root);
  probe_hcas(f, root);
}
