/* test_aff_sysfs.c - the agent's GPU, NIC and PCIe discovery from sysfs and
 * /proc/driver/nvidia (no hwloc I/O, no GPU library) against hwloc's I/O
 * tree: for every tests/topo fixture a fake /sys, /proc and /dev tree is
 * written the way Linux and the NVIDIA driver lay them out for that
 * machine, and the mapping found there (GPU -> NUMA -> cores, closest NIC,
 * PCIe links and paths, the plan) must be the one hwloc finds in the XML.
 * Then the CUDA rules on the 8 x V100 and 2 x H200 trees: UUIDs, MIG
 * parents, GPUs the driver does not run or excludes, a container's
 * device nodes, CUDA_DEVICE_ORDER with mixed models. */
#include <dirent.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff.h"
#include "aff_int.h"
#include "lu.h"
#include "test.h"

static char path_buf[1024];

static const char *topo_path(const char *name) {
  const char *src = getenv("LAUNCH_SOURCE_DIR");
  snprintf(path_buf, sizeof(path_buf), "%s/tests/topo/%s", src ? src : ".", name);
  return path_buf;
}

/* ---- writing a fake tree ---------------------------------------------------------- */


static void put(const char *root, const char *rel, const char *fmt, ...)
    LU_PRINTF(3, 4);
static void put(const char *root, const char *rel, const char *fmt, ...) {
  char path[4200], dir[4200], *slash;
  va_list ap;
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  lu_strlcpy(dir, path, sizeof(dir));
  if ((slash = strrchr(dir, '/')) != NULL) {
    *slash = '\0';
    test_mkdirs(dir);
  }
  ASSERT((f = fopen(path, "w")) != NULL);
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

static void link_to(const char *root, const char *rel, const char *target) {
  char path[4200], dir[4200], *slash;
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  lu_strlcpy(dir, path, sizeof(dir));
  if ((slash = strrchr(dir, '/')) != NULL) {
    *slash = '\0';
    test_mkdirs(dir);
  }
  unlink(path);
  ASSERT_EQ(0, symlink(target, path));
}

static void rm(const char *root, const char *rel) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  ASSERT_EQ(0, unlink(path));
}

static const char *info_of(hwloc_obj_t o, const char *name) {
  return hwloc_obj_get_info_by_name(o, name);
}

static void obj_busid(hwloc_obj_t o, char out[16]) {
  const struct hwloc_pcidev_attr_s *p =
      o->type == HWLOC_OBJ_BRIDGE ? &o->attr->bridge.upstream.pci : &o->attr->pcidev;
  snprintf(out, 16, "%04x:%02x:%02x.%x", (unsigned)p->domain, p->bus, p->dev,
           p->func);
}

/* "devices/pci0000:00/0000:00:01.0/0000:03:00.0": where Linux puts the
 * device, from its host bridge down. */
static void sys_dir(hwloc_obj_t o, char *out, size_t n) {
  char parts[16][16];
  int np = 0;
  size_t at;
  for (hwloc_obj_t x = o; x && np < 16; x = x->parent) {
    if (x->type == HWLOC_OBJ_PCI_DEVICE ||
        (x->type == HWLOC_OBJ_BRIDGE &&
         x->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)) {
      obj_busid(x, parts[np++]);
    } else if (x->type == HWLOC_OBJ_BRIDGE) {
      snprintf(parts[np++], 16, "pci%04x:%02x",
               (unsigned)x->attr->bridge.downstream.pci.domain,
               (unsigned)x->attr->bridge.downstream.pci.secondary_bus);
      break;
    }
  }
  at = (size_t)snprintf(out, n, "devices");
  for (int i = np - 1; i >= 0 && at < n; i--)
    at += (size_t)snprintf(out + at, n - at, "/%s", parts[i]);
}

/* The files every PCI function has: class, ids, locality (the CPUs of the
 * object hwloc hung its host bridge under), link, and its
 * /sys/bus/pci/devices link. OUT dir: its place under /sys. */
static void write_pci(const char *root, hwloc_topology_t hw, hwloc_obj_t o,
                      char *dir, size_t dn) {
  const struct hwloc_pcidev_attr_s *a =
      o->type == HWLOC_OBJ_BRIDGE ? &o->attr->bridge.upstream.pci : &o->attr->pcidev;
  char bid[16], rel[768], up[600], cl[AFF_CPULIST_LEN];
  hwloc_obj_t loc = hwloc_get_non_io_ancestor_obj(hw, o);
  aff_cpuset_t cpus;
  static const char *const links[][2] = {
      {"PCIeLinkWidth", "current_link_width"},
      {"PCIeLinkWidthMax", "max_link_width"},
      {"PCIeLinkSpeedGTs", "current_link_speed"},
      {"PCIeLinkSpeedMaxGTs", "max_link_speed"}};
  obj_busid(o, bid);
  sys_dir(o, dir, dn);
  snprintf(rel, sizeof(rel), "sys/%s/class", dir);
  put(root, rel, "0x%04x00\n", o->type == HWLOC_OBJ_BRIDGE ? 0x0604 : a->class_id);
  snprintf(rel, sizeof(rel), "sys/%s/vendor", dir);
  put(root, rel, "0x%04x\n", a->vendor_id);
  snprintf(rel, sizeof(rel), "sys/%s/device", dir);
  put(root, rel, "0x%04x\n", a->device_id);
  snprintf(rel, sizeof(rel), "sys/%s/numa_node", dir);
  put(root, rel, "%d\n",
      hwloc_bitmap_weight(loc->nodeset) == 1 ? hwloc_bitmap_first(loc->nodeset) : -1);
  aff_cpuset_zero(&cpus);
  for (int c = hwloc_bitmap_first(loc->complete_cpuset); c >= 0;
       c = hwloc_bitmap_next(loc->complete_cpuset, c))
    aff_cpuset_set(&cpus, c);
  aff_cpulist_format(&cpus, cl, sizeof(cl));
  snprintf(rel, sizeof(rel), "sys/%s/local_cpulist", dir);
  put(root, rel, "%s\n", cl);
  for (size_t i = 0; i < LU_ARRAY_SIZE(links); i++) {
    const char *v = info_of(o, links[i][0]);
    if (v == NULL)
      continue;
    snprintf(rel, sizeof(rel), "sys/%s/%s", dir, links[i][1]);
    put(root, rel, strstr(links[i][1], "speed") ? "%s GT/s PCIe\n" : "%s\n", v);
  }
  snprintf(rel, sizeof(rel), "sys/bus/pci/devices/%s", bid);
  snprintf(up, sizeof(up), "../../../%s", dir);
  link_to(root, rel, up);
}

/* An RDMA device's ports as Linux shows them. */
static void write_ib_ports(const char *root, hwloc_obj_t c, const char *cdir) {
  for (int port = 1; port <= 8; port++) {
    char key[32], p[1024];
    const char *st, *rate, *ll;
    snprintf(key, sizeof(key), "Port%dState", port);
    st = info_of(c, key);
    snprintf(key, sizeof(key), "Port%dRate", port);
    rate = info_of(c, key);
    snprintf(key, sizeof(key), "Port%dLinkLayer", port);
    ll = info_of(c, key);
    if (st == NULL && rate == NULL)
      break;
    snprintf(p, sizeof(p), "sys/%s/ports/%d/state", cdir, port);
    put(root, p, "%s: %s\n", st ? st : "4",
        st && atoi(st) != 4 ? "DOWN" : "ACTIVE");
    if (rate) {
      snprintf(p, sizeof(p), "sys/%s/ports/%d/rate", cdir, port);
      put(root, p, "%s\n", rate);
    }
    if (ll) {
      snprintf(p, sizeof(p), "sys/%s/ports/%d/link_layer", cdir, port);
      put(root, p, "%s\n", ll);
    }
  }
}

/* The tree Linux and the NVIDIA driver show for the machine an XML
 * describes. t_xml (the XML loaded by launch) gives the GPUs' names and
 * UUIDs as the driver would report them. OUT root[1024]. RET root. */
static const char *write_tree(const char *xml, const aff_topo_t *t_xml,
                              char *root) {
  hwloc_topology_t hw;
  hwloc_obj_t o = NULL;
  int minor = 0;
  snprintf(root, 1024, "%s/%s", test_tmpdir(), strrchr(xml, '/') + 1);
  test_mkdirs(root);
  ASSERT_EQ(0, hwloc_topology_init(&hw));
  hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_ALL);
  ASSERT_EQ(0, hwloc_topology_set_xml(hw, xml));
  ASSERT_EQ(0, hwloc_topology_load(hw));
  put(root, "dev/nvidiactl", "%s", "");
  while ((o = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_BRIDGE, o)) != NULL) {
    char dir[512];
    if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
      write_pci(root, hw, o, dir, sizeof(dir));
  }
  while ((o = hwloc_get_next_pcidev(hw, o)) != NULL) {
    char bid[16], dir[512], rel[1024];
    write_pci(root, hw, o, dir, sizeof(dir));
    obj_busid(o, bid);
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
      char cdir[768], target[1024];
      int net;
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL ||
          (c->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
           c->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS))
        continue;
      net = c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
      snprintf(cdir, sizeof(cdir), "%s/%s/%s", dir, net ? "net" : "infiniband",
               c->name);
      if (net) {
        snprintf(rel, sizeof(rel), "sys/%s/operstate", cdir);
        put(root, rel, "up\n");
      } else {
        snprintf(rel, sizeof(rel), "sys/%s/node_guid", cdir);
        put(root, rel, "0000:0000:0000:0000\n");
        write_ib_ports(root, c, cdir);
      }
      snprintf(rel, sizeof(rel), "sys/class/%s/%s", net ? "net" : "infiniband",
               c->name);
      snprintf(target, sizeof(target), "../../%s", cdir);
      link_to(root, rel, target);
    }
    if (o->attr->pcidev.vendor_id == 0x10de &&
        (o->attr->pcidev.class_id == 0x0300 || o->attr->pcidev.class_id == 0x0302)) {
      const aff_gpu_t *g = NULL;
      for (int i = 0; i < aff_topo_ngpus(t_xml); i++)
        if (strcmp(aff_topo_gpu(t_xml, i)->busid, bid) == 0)
          g = aff_topo_gpu(t_xml, i);
      ASSERT(g != NULL);
      snprintf(rel, sizeof(rel), "proc/driver/nvidia/gpus/%s/information", bid);
      put(root, rel,
          "Model: \t\t %s\nIRQ:   \t\t 95\nGPU UUID: \t %s\nVideo BIOS: \t "
          "96.00.af.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: "
          "\t 0x7fffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU "
          "Excluded:\t No\n",
          g->model, g->uuid[0] ? g->uuid : "??",
          bid, minor);
      snprintf(rel, sizeof(rel), "dev/nvidia%d", minor);
      put(root, rel, "%s", "");
      minor++;
    }
  }
  /* A virtual interface and a USB one are no NICs, as for hwloc. */
  put(root, "sys/devices/virtual/net/lo/operstate", "unknown\n");
  link_to(root, "sys/class/net/lo", "../../devices/virtual/net/lo");
  put(root, "sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/net/usb0/operstate",
      "up\n");
  link_to(root, "sys/class/net/usb0",
          "../../devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/net/usb0");
  hwloc_topology_destroy(hw);
  return root;
}

/* ---- loading ------------------------------------------------------------------------ */

static aff_topo_t *load_xml(const char *xml, const char *root, const char *cvd,
                            const char *order, FILE *logf) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  lu_log_t log;
  char err[512] = "";
  lu_log_init(&log, "test");
  log.out = logf;
  o.xml = xml;
  o.root = root;
  o.io_from_root = root != NULL;
  o.cuda_visible_devices = cvd;
  o.cuda_device_order = order;
  o.log = logf ? &log : NULL;
  if (aff_topo_load(&o, &t, err, sizeof(err)) != 0)
    TEST_FAIL("load %s (root %s): %s", xml, root ? root : "-", err);
  /* --nproc-per-node gpu counts, without a topology, what it finds */
  if (root)
    ASSERT_EQ(aff_topo_ngpus(t), aff_gpu_count(root, cvd));
  return t;
}

/* `launch topo` (json 0) or `launch topo --json` for t with a plan of
 * one rank a GPU (else `nodev` ranks): cores, local memory. */
static char *report_of(const aff_topo_t *t, int json, int nodev) {
  aff_policy_t *p = malloc(sizeof(*p));
  aff_plan_t *pl = NULL;
  char err[256], *text = NULL;
  int n = aff_topo_ngpus(t) > 0 ? aff_topo_ngpus(t) : nodev;
  ASSERT(p != NULL);
  ASSERT_EQ(0, aff_policy_parse("cores", "local", p, err, sizeof(err)));
  ASSERT_EQ(0, aff_plan_new(t, p, n, NULL, &pl, err, sizeof(err)));
  ASSERT_EQ(0, (json ? aff_report_json : aff_report_text)(t, pl, &text));
  aff_plan_free(pl);
  free(p);
  return text;
}

static char *plan_text(const aff_topo_t *t) {
  char *text = report_of(t, 0, 1);
  /* everything after the source line */
  memmove(text, strchr(text, '\n') + 1, strlen(strchr(text, '\n') + 1) + 1);
  return text;
}

/* Lines of the text report that only NVML knows or that name the source. */
static void drop_lines(char *text, const char *needle) {
  char *p;
  while ((p = strstr(text, needle)) != NULL) {
    char *start = p, *end = strchr(p, '\n');
    while (start > text && start[-1] != '\n')
      start--;
    memmove(start, end ? end + 1 : p + strlen(p), strlen(end ? end + 1 : "") + 1);
  }
}

/* One fixture: hwloc's I/O tree vs the fake tree, field by field and in
 * the printed plan. */
static void check_fixture(const char *name) {
  char diff[4096], root[1024];
  const char *xml = topo_path(name);
  char xml_copy[1024];
  aff_topo_t *a, *b;
  int nd;
  lu_strlcpy(xml_copy, xml, sizeof(xml_copy));
  b = load_xml(xml_copy, NULL, NULL, NULL, NULL);
  write_tree(xml_copy, b, root);
  a = load_xml(xml_copy, root, NULL, NULL, NULL);
  nd = aff_topo_compare(a, b, diff, sizeof(diff));
  if (nd != 0)
    TEST_FAIL("%s: sysfs and hwloc differ in %d ways:\n%s", name, nd, diff);
  /* The binding plan and report, NVLink and memory sizes aside. */
  if (aff_topo_has_nvlink(b) != 1) {
    char *ta = plan_text(a), *tb = plan_text(b);
    drop_lines(ta, "NVLink is not probed");
    for (int i = 0; i < aff_topo_ngpus(b); i++) {
      char gl[128];
      const aff_gpu_t *g = aff_topo_gpu(b, i);
      /* "GPU0 0000:04:00.0 Tesla V100-PCIE-32GB 32 GiB, NUMA 0" */
      snprintf(gl, sizeof(gl), " %.0f GiB,", (double)g->mem_bytes / (1u << 30));
      if (g->mem_bytes)
        for (char *p; (p = strstr(tb, gl)) != NULL;)
          memmove(p, p + strlen(gl) - 1, strlen(p + strlen(gl) - 1) + 1);
    }
    if (strcmp(ta, tb) != 0)
      TEST_FAIL("%s: the reports differ:\n--- sysfs\n%s\n--- hwloc\n%s", name, ta, tb);
    free(ta);
    free(tb);
  }
  printf("%s: %d GPUs, %d NICs: sysfs finds what hwloc finds\n", name,
         aff_topo_ngpus(a), aff_topo_nnics(a));
  aff_topo_free(a);
  aff_topo_free(b);
}

static void test_every_fixture(void) {
  DIR *d;
  struct dirent *e;
  int n = 0;
  char dir[1024];
  lu_strlcpy(dir, topo_path(""), sizeof(dir));
  ASSERT((d = opendir(dir)) != NULL);
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (l > 4 && strcmp(e->d_name + l - 4, ".xml") == 0) {
      check_fixture(e->d_name);
      n++;
    }
  }
  closedir(d);
  ASSERT(n >= 5);
}

/* ---- CUDA's rules on the V100 and H200 trees ------------------------------------------ */

static char *read_all(FILE *f) {
  long n;
  char *s;
  fflush(f);
  n = ftell(f);
  s = calloc(1, (size_t)n + 1);
  rewind(f);
  if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
    TEST_FAIL("read log");
  return s;
}

/* A fixture and its fake tree. OUT xml (1024 bytes), *base: the XML
 * loaded by hwloc. RET the tree (a static buffer: one tree at a time). */
static const char *fixture_tree(const char *name, char *xml, aff_topo_t **base) {
  static char root[1024];
  lu_strlcpy(xml, topo_path(name), 1024);
  *base = load_xml(xml, NULL, NULL, NULL, NULL);
  return write_tree(xml, *base, root);
}

static void test_cuda_rules(void) {
  char xml[1024], rel[256];
  aff_topo_t *base, *t;
  const char *root = fixture_tree("v100-pcie-2s.xml", xml, &base);
  FILE *logf;
  char *log;

  /* UUIDs from /proc: the fixture's GPU 5, by its full UUID and a prefix */
  t = load_xml(xml, root, "GPU-5eed0005-0000-4000-8000-000000000005,GPU-5eed0002",
               NULL, NULL);
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:87:00.0", aff_topo_gpu(t, 0)->busid);
  ASSERT_EQ(1, aff_topo_gpu(t, 0)->numa);
  ASSERT_STR_EQ("0000:08:00.0", aff_topo_gpu(t, 1)->busid);
  ASSERT_EQ(0, aff_topo_gpu(t, 1)->index == 1 ? 0 : 1);
  aff_topo_free(t);
  /* an ambiguous prefix names no GPU: CUDA stops there */
  t = load_xml(xml, root, "3,GPU-5eed,1", NULL, NULL);
  ASSERT_EQ(1, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:09:00.0", aff_topo_gpu(t, 0)->busid);
  aff_topo_free(t);
  /* a MIG instance in the old form names its parent */
  t = load_xml(xml, root, "MIG-GPU-5eed0006-0000-4000-8000-000000000006/1/0",
               NULL, NULL);
  ASSERT_EQ(1, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:8a:00.0", aff_topo_gpu(t, 0)->busid);
  aff_topo_free(t);

  /* a GPU the driver excludes is not CUDA's: the indexes close up */
  snprintf(rel, sizeof(rel), "proc/driver/nvidia/gpus/0000:05:00.0/information");
  put(root, rel, "Model: \t\t Tesla V100-PCIE-32GB\nGPU UUID: \t "
      "GPU-5eed0001-0000-4000-8000-000000000001\nDevice Minor: \t 1\nGPU "
      "Excluded:\t Yes\n");
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(7, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:08:00.0", aff_topo_gpu(t, 1)->busid);
  ASSERT_EQ(1, aff_topo_gpu(t, 1)->phys);
  aff_topo_free(t);
  /* nor is one the driver does not run (bound to vfio-pci, say) */
  rm(root, rel);
  rmdir(strcat(strcpy(path_buf, root), "/proc/driver/nvidia/gpus/0000:05:00.0"));
  t = load_xml(xml, root, "1", NULL, NULL);
  ASSERT_EQ(1, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:08:00.0", aff_topo_gpu(t, 0)->busid);
  aff_topo_free(t);

  /* a container given GPUs 2 and 6 (minors 2 and 6; the driver's /proc
   * still lists the host's) sees two GPUs, 0 and 1 */
  for (int m = 0; m < 8; m++) {
    snprintf(rel, sizeof(rel), "dev/nvidia%d", m);
    if (m != 2 && m != 6)
      unlink(strcat(strcat(strcpy(path_buf, root), "/"), rel));
  }
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:08:00.0", aff_topo_gpu(t, 0)->busid);
  ASSERT_STR_EQ("0000:8a:00.0", aff_topo_gpu(t, 1)->busid);
  ASSERT_EQ(1, aff_topo_gpu(t, 1)->numa);
  aff_topo_free(t);
  /* and CUDA stops at the first index past them */
  t = load_xml(xml, root, "0,1,2,3,4,5", NULL, NULL);
  ASSERT_EQ(2, aff_topo_ngpus(t));
  aff_topo_free(t);
  ASSERT_EQ(0, aff_gpu_count(root, "-1"));
  ASSERT_EQ(1, aff_gpu_count(root, "1,1"));

  /* No driver at all: every NVIDIA GPU of the PCI bus, UUIDs unknown; a
   * UUID in CUDA_VISIBLE_DEVICES then names nothing, said once. */
  rmdir(strcat(strcpy(path_buf, root), "/dev")); /* not empty: stays */
  {
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -r '%s/proc/driver/nvidia'", root);
    ASSERT_EQ(0, system(cmd));
  }
  logf = tmpfile();
  t = load_xml(xml, root, "GPU-5eed0003", NULL, logf);
  ASSERT_EQ(0, aff_topo_ngpus(t));
  log = read_all(logf);
  ASSERT_CONTAINS(log, "UUIDs are unknown");
  free(log);
  fclose(logf);
  aff_topo_free(t);
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(8, aff_topo_ngpus(t));
  ASSERT_STR_EQ("", aff_topo_gpu(t, 0)->uuid);
  ASSERT_STR_EQ("Tesla V100-PCIE-32GB", aff_topo_gpu(t, 0)->model);
  aff_topo_free(t);
  aff_topo_free(base);
}

/* Mixed models: CUDA's FASTEST_FIRST is not PCI order; PCI_BUS_ID is. */
static void test_device_order(void) {
  char xml[1024];
  aff_topo_t *base, *t;
  const char *root = fixture_tree("h200-x2-gpu-machine.xml", xml, &base);
  FILE *logf;
  char *log;
  /* two H200: one model, FASTEST_FIRST is bus order, nothing to say */
  logf = tmpfile();
  t = load_xml(xml, root, NULL, NULL, logf);
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_STR_EQ("0000:00:06.0", aff_topo_gpu(t, 0)->busid);
  ASSERT_STR_EQ("NVIDIA H200", aff_topo_gpu(t, 0)->model);
  log = read_all(logf);
  ASSERT(strstr(log, "CUDA_DEVICE_ORDER") == NULL);
  free(log);
  fclose(logf);
  aff_topo_free(t);
  /* the second one an H100 */
  put(root, "sys/devices/pci0000:00/0000:00:07.0/device", "0x2330\n");
  logf = tmpfile();
  t = load_xml(xml, root, NULL, NULL, logf);
  log = read_all(logf);
  ASSERT_CONTAINS(log, "CUDA_DEVICE_ORDER is unset (FASTEST_FIRST)");
  ASSERT_CONTAINS(log, "CUDA_DEVICE_ORDER=PCI_BUS_ID");
  free(log);
  fclose(logf);
  aff_topo_free(t);
  logf = tmpfile();
  t = load_xml(xml, root, NULL, "PCI_BUS_ID", logf);
  log = read_all(logf);
  ASSERT(strstr(log, "CUDA_DEVICE_ORDER") == NULL);
  ASSERT_STR_EQ("0000:00:07.0", aff_topo_gpu(t, 1)->busid);
  free(log);
  fclose(logf);
  aff_topo_free(t);
  aff_topo_free(base);
}

/* An export needs hwloc's I/O objects, which sysfs discovery has not. */
static void test_no_export(void) {
  char xml[1024], err[256] = "", out[1200];
  aff_topo_t *base, *t;
  const char *root = fixture_tree("h200-gpu-machine.xml", xml, &base);
  t = load_xml(xml, root, NULL, NULL, NULL);
  snprintf(out, sizeof(out), "%s/export.xml", root);
  ASSERT_EQ(RDZV_EINVAL, aff_topo_export_xml(t, out, err, sizeof(err)));
  ASSERT_CONTAINS(err, "sysfs");
  ASSERT(access(out, F_OK) != 0);
  aff_topo_free(t);
  aff_topo_free(base);
}

/* Memory sizes and NVLink, which only NVML knows, remembered for the boot
 * by an NVML load and used by the sysfs one; refused when stale, when
 * another user could have written it, through a link. */
static void test_nvml_cache(void) {
  char xml[1024], dir[1100], cache[1200], link[1200];
  aff_topo_t *base, *t;
  const char *root = fixture_tree("v100-pcie-2s.xml", xml, &base);
  snprintf(dir, sizeof(dir), "%s/xdg", test_tmpdir());
  ASSERT_EQ(0, mkdir(dir, 0700));
  setenv("XDG_RUNTIME_DIR", dir, 1);
  setenv("LAUNCH_TOPO_CACHE", "0", 1); /* the NVML cache alone */
  snprintf(cache, sizeof(cache), "%s/launch-topo-%u.cache", dir, (unsigned)geteuid());
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-000000000001\n");
  put(root, "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 "
      "22:23:56 UTC 2024\n");
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t)); /* sysfs cannot tell */
  ASSERT_EQ(0, (long long)aff_topo_gpu(t, 0)->mem_bytes);
  /* What an NVML load of this machine records: GPUs 0-3 on one NVLink
   * board (12 links each way), 32 GiB each. */
  t->nnvml = aff_topo_ngpus(t);
  for (int i = 0; i < t->nnvml; i++) {
    const aff_gpu_t *g = aff_topo_gpu(t, i);
    memset(&t->nvml[i], 0, sizeof(t->nvml[i]));
    lu_strlcpy(t->nvml[i].busid, g->busid, sizeof(t->nvml[i].busid));
    lu_strlcpy(t->nvml[i].uuid, g->uuid, sizeof(t->nvml[i].uuid));
    t->nvml[i].mem_bytes = 32ull << 30;
    for (int j = 0; j < t->nnvml; j++)
      t->nvml_links[i][j] = i != j && i < 4 && j < 4 ? 12 : 0;
  }
  ASSERT_EQ(0, aff__cache_store(t));
  aff_topo_free(t);
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(1, aff_topo_has_nvlink(t));
  ASSERT_EQ(AFF_PATH_NVLINK, aff_topo_gpu_path(t, 0, 3));
  ASSERT_EQ(300000, aff_topo_nvlink_mbps(t, 1, 2));
  ASSERT_EQ(AFF_PATH_SYS, aff_topo_gpu_path(t, 0, 4));
  ASSERT_EQ(32ull << 30, aff_topo_gpu(t, 7)->mem_bytes);
  aff_topo_free(t);
  /* the visible GPUs by bus id, whatever their CUDA index */
  t = load_xml(xml, root, "3,0", NULL, NULL);
  ASSERT_EQ(AFF_PATH_NVLINK, aff_topo_gpu_path(t, 0, 1));
  aff_topo_free(t);
  /* another user could have written it: not trusted */
  ASSERT_EQ(0, chmod(cache, 0666));
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  aff_topo_free(t);
  ASSERT_EQ(0, chmod(cache, 0600));
  /* nor through a symbolic link */
  snprintf(link, sizeof(link), "%s/elsewhere", dir);
  ASSERT_EQ(0, rename(cache, link));
  ASSERT_EQ(0, symlink(link, cache));
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  aff_topo_free(t);
  ASSERT_EQ(0, unlink(cache));
  ASSERT_EQ(0, rename(link, cache));
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(1, aff_topo_has_nvlink(t));
  aff_topo_free(t);
  /* another boot, another driver, another GPU: stale */
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-000000000002\n");
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  aff_topo_free(t);
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-000000000001\n");
  put(root, "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  555.42.02  Wed Jun 5 "
      "22:23:56 UTC 2024\n");
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  aff_topo_free(t);
  put(root, "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 "
      "22:23:56 UTC 2024\n");
  put(root, "proc/driver/nvidia/gpus/0000:05:00.0/information",
      "Model: \t\t Tesla V100-PCIE-32GB\nGPU UUID: \t "
      "GPU-5eed0099-0000-4000-8000-000000000099\nDevice Minor: \t 1\n");
  t = load_xml(xml, root, NULL, NULL, NULL);
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  ASSERT_EQ(0, (long long)aff_topo_gpu(t, 0)->mem_bytes);
  aff_topo_free(t);
  unsetenv("XDG_RUNTIME_DIR");
  unsetenv("LAUNCH_TOPO_CACHE");
  aff_topo_free(base);
}

/* ---- the topology cache (aff_tcache.c) ------------------------------------------------- */

static char *json_of(const aff_topo_t *t) { return report_of(t, 1, 2); }

/* Load the fixture: the JSON must be want, byte for byte, and come from
 * the cache (hit 1) or from a discovery (hit 0). */
static void expect(const char *what, const char *xml, const char *root,
                   const char *cvd, const char *want, int hit) {
  aff_topo_t *t = load_xml(xml, root, cvd, NULL, NULL);
  char *j = json_of(t);
  if (t->from_cache != hit)
    TEST_FAIL("%s: %s, want %s", what, t->from_cache ? "from the cache" : "discovered",
              hit ? "from the cache" : "discovered");
  if (strcmp(j, want) != 0)
    TEST_FAIL("%s: the cached topology differs:\n--- cache\n%s\n--- discovery\n%s",
              what, j, want);
  free(j);
  aff_topo_free(t);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *s;
  long n;
  ASSERT(f != NULL);
  ASSERT_EQ(0, fseek(f, 0, SEEK_END));
  ASSERT((n = ftell(f)) > 0);
  rewind(f);
  ASSERT((s = calloc(1, (size_t)n + 1)) != NULL);
  ASSERT_EQ((size_t)n, fread(s, 1, (size_t)n, f));
  fclose(f);
  *len = (size_t)n;
  return s;
}

static void spit(const char *path, const char *s, size_t len) {
  FILE *f = fopen(path, "wb");
  ASSERT(f != NULL);
  ASSERT_EQ(len, fwrite(s, 1, len, f));
  ASSERT_EQ(0, fclose(f));
}

/* One fixture, its fake tree with a boot id: without the cache, cold, warm,
 * every stale key, damaged files; always the same JSON. */
static void cache_fixture(const char *name, const char *cache) {
  char xml[1024], *want, *want_cvd, *text, *bad;
  aff_topo_t *base, *t;
  struct stat sb;
  size_t len;
  cpu_set_t mine, one;
  const char *root = fixture_tree(name, xml, &base);
  unlink(cache);
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-00000000000a\n");
  setenv("LAUNCH_TOPO_CACHE", "0", 1);
  t = load_xml(xml, root, NULL, NULL, NULL);
  want = json_of(t);
  aff_topo_free(t);
  t = load_xml(xml, root, aff_topo_ngpus(base) > 1 ? "1,0" : "0", NULL, NULL);
  want_cvd = json_of(t);
  aff_topo_free(t);
  ASSERT(access(cache, F_OK) != 0); /* off: nothing written */
  expect("LAUNCH_TOPO_CACHE=0", xml, root, NULL, want, 0);
  unsetenv("LAUNCH_TOPO_CACHE");
  expect("cold", xml, root, NULL, want, 0);
  ASSERT_EQ(0, stat(cache, &sb));
  ASSERT_EQ(0600, (int)(sb.st_mode & 0777));
  ASSERT_EQ((long long)geteuid(), (long long)sb.st_uid);
  expect("warm", xml, root, NULL, want, 1);
  /* the visible GPUs are chosen from the cached list on every start */
  expect("warm, CUDA_VISIBLE_DEVICES", xml, root,
         aff_topo_ngpus(base) > 1 ? "1,0" : "0", want_cvd, 1);
  /* another boot: discovered and written again */
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-00000000000b\n");
  expect("other boot", xml, root, NULL, want, 0);
  expect("other boot, warm", xml, root, NULL, want, 1);
  put(root, "proc/sys/kernel/random/boot_id", "0b0f5e2c-0000-4000-8000-00000000000a\n");
  expect("first boot again", xml, root, NULL, want, 0);
  /* another driver */
  put(root, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 "
      "Kernel Module  999.1.2  Tue Mar 5 22:23:56 UTC 2024\n");
  expect("other driver", xml, root, NULL, want, 0);
  expect("other driver, warm", xml, root, NULL, want, 1);
  /* another CPU mask (taskset, srun --cpu-bind, a cpuset) */
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(mine), &mine));
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &mine)) {
      CPU_SET(c, &one);
      break;
    }
  if (CPU_COUNT(&mine) > 1) {
    ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one));
    expect("other affinity", xml, root, NULL, want, 0);
    expect("other affinity, warm", xml, root, NULL, want, 1);
    ASSERT_EQ(0, sched_setaffinity(0, sizeof(mine), &mine));
    expect("first affinity again", xml, root, NULL, want, 0);
  }
  /* hwloc's environment */
  setenv("HWLOC_LAUNCH_TEST", "1", 1);
  expect("HWLOC_ variable", xml, root, NULL, want, 0);
  expect("HWLOC_ variable, warm", xml, root, NULL, want, 1);
  unsetenv("HWLOC_LAUNCH_TEST");
  expect("HWLOC_ variable gone", xml, root, NULL, want, 0);
  expect("warm again", xml, root, NULL, want, 1);
  /* damaged: a byte in the middle of the data, cut in half, no "end",
   * writable by others, not a regular file. Each time: ignored, the
   * discovery gives the same result and writes the file again. */
  text = slurp(cache, &len);
  ASSERT(len > 64 && strstr(text, "\nend ") != NULL);
  bad = strdup(text);
  bad[len - len / 4] = bad[len - len / 4] == '#' ? '!' : '#';
  spit(cache, bad, len);
  expect("corrupted", xml, root, NULL, want, 0);
  expect("rewritten after corrupted", xml, root, NULL, want, 1);
  spit(cache, text, len / 2);
  expect("truncated", xml, root, NULL, want, 0);
  expect("rewritten after truncated", xml, root, NULL, want, 1);
  spit(cache, text, len - 22);
  expect("no end line", xml, root, NULL, want, 0);
  spit(cache, text, len);
  expect("written back", xml, root, NULL, want, 1);
  ASSERT_EQ(0, chmod(cache, 0666));
  expect("writable by others", xml, root, NULL, want, 0);
  expect("rewritten 0600", xml, root, NULL, want, 1);
  ASSERT_EQ(0, unlink(cache));
  ASSERT_EQ(0, mkdir(cache, 0700));
  expect("a directory in its place", xml, root, NULL, want, 0);
  ASSERT_EQ(0, rmdir(cache));
  /* no boot id (a fixture tree without one): no cache at all */
  rm(root, "proc/sys/kernel/random/boot_id");
  expect("no boot id", xml, root, NULL, want, 0);
  expect("no boot id, again", xml, root, NULL, want, 0);
  ASSERT(access(cache, F_OK) != 0);
  rm(root, "proc/driver/nvidia/version");
  printf("%s: the cached topology is the discovered one\n", name);
  free(text);
  free(bad);
  free(want);
  free(want_cvd);
  aff_topo_free(base);
}

static void test_topo_cache(void) {
  char dir[1100], cache[1200];
  DIR *d;
  struct dirent *e;
  int n = 0;
  snprintf(dir, sizeof(dir), "%s/xdg-topo", test_tmpdir());
  ASSERT_EQ(0, mkdir(dir, 0700));
  setenv("XDG_RUNTIME_DIR", dir, 1);
  snprintf(cache, sizeof(cache), "%s/launch-topo-%u.topo", dir, (unsigned)geteuid());
  ASSERT((d = opendir(topo_path(""))) != NULL);
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (l > 4 && strcmp(e->d_name + l - 4, ".xml") == 0) {
      char name[256];
      lu_strlcpy(name, e->d_name, sizeof(name));
      cache_fixture(name, cache);
      n++;
    }
  }
  closedir(d);
  ASSERT(n >= 5);
  unsetenv("XDG_RUNTIME_DIR");
}

int main(void) {
  test_every_fixture();
  test_cuda_rules();
  test_device_order();
  test_no_export();
  test_nvml_cache();
  test_topo_cache();
  test_cleanup();
  printf("test_aff_sysfs: ok\n");
  return 0;
}
