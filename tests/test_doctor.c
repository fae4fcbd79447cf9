/* test_doctor.c - launch doctor on fake /sys + /proc + /etc trees: a
 * healthy 8-GPU node, one with an IB port down, one with NUMA balancing on,
 * and the other seed mistakes; the rendezvous port check on loopback; the
 * report's JSON and compact forms and the cross-node diff. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor.h"
#include "lu.h"
#include "test.h"

static char root_buf[600];

static void mkfile(const char *root, const char *rel, const char *text) {
  char path[1024], dir[1024], *slash;
  FILE *f;
  snprintf(path, sizeof(path), "%s%s", root, rel);
  lu_strlcpy(dir, path, sizeof(dir));
  for (slash = dir + strlen(root) + 1; (slash = strchr(slash, '/')); slash++) {
    *slash = '\0';
    mkdir(dir, 0755);
    *slash = '/';
  }
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs(text, f);
  fclose(f);
}

/* A directory (a sysfs device link stands in as one). */
static void mkdir_p(const char *root, const char *rel) {
  char keep[512];
  snprintf(keep, sizeof(keep), "%s/.keep", rel);
  mkfile(root, keep, "");
}

/* Seed 000's box done right: 8 V100 PCIe on two sockets, one EDR HCA per
 * socket, driver, persistence daemon, peermem, NUMA balancing off. */
static const char *healthy(const char *name) {
  char base[512], p[256], v[64];
  snprintf(root_buf, sizeof(root_buf), "%s/%s", test_tmpdir(), name);
  mkdir(root_buf, 0755);
  lu_strlcpy(base, root_buf, sizeof(base));
  mkfile(base, "/proc/sys/kernel/hostname", "gpu01\n");
  mkfile(base, "/proc/sys/kernel/osrelease", "5.14.0-362.el9.x86_64\n");
  mkfile(base, "/etc/os-release",
         "NAME=\"Rocky Linux\"\nPRETTY_NAME=\"Rocky Linux 9.3 (Blue Onyx)\"\n");
  mkfile(base, "/sys/devices/system/cpu/online", "0-79\n");
  for (int c = 0; c < 4; c++) {
    snprintf(p, sizeof(p), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
    mkfile(base, p, c < 2 ? "0\n" : "1\n");
  }
  mkfile(base, "/sys/devices/system/node/node0/cpulist", "0-19,40-59\n");
  mkfile(base, "/sys/devices/system/node/node1/cpulist", "20-39,60-79\n");
  mkfile(base, "/proc/sys/kernel/numa_balancing", "0\n");
  mkfile(base, "/proc/sys/vm/nr_hugepages", "1024\n");
  for (int g = 0; g < 8; g++) {
    static const int bus[8] = {0x04, 0x05, 0x08, 0x09, 0x86, 0x87, 0x8a, 0x8b};
    char d[128];
    snprintf(d, sizeof(d), "/sys/bus/pci/devices/0000:%02x:00.0", bus[g]);
#define PCI(file, text)                                                        \
  do {                                                                         \
    snprintf(p, sizeof(p), "%s/%s", d, file);                                  \
    mkfile(base, p, text);                                                     \
  } while (0)
    PCI("vendor", "0x10de\n");
    PCI("class", "0x030200\n");
    PCI("device", "0x1db6\n");
    snprintf(v, sizeof(v), "%d\n", g < 4 ? 0 : 1);
    PCI("numa_node", v);
    PCI("current_link_width", "16\n");
    PCI("max_link_width", "16\n");
    PCI("current_link_speed", "8.0 GT/s PCIe\n");
    PCI("max_link_speed", "8.0 GT/s PCIe\n");
  }
  /* a Mellanox card in the PCI list is not a GPU */
  mkfile(base, "/sys/bus/pci/devices/0000:18:00.0/vendor", "0x15b3\n");
  mkfile(base, "/sys/bus/pci/devices/0000:18:00.0/class", "0x020700\n");
  mkfile(base, "/proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug "
         "19 01:15:15 UTC 2023\nGCC version:  gcc version 11.4.1\n");
  mkfile(base, "/proc/4242/comm", "nvidia-persiste\n");
  mkfile(base, "/proc/1/comm", "systemd\n");
  for (int h = 0; h < 2; h++) {
    char d[128];
    snprintf(d, sizeof(d), "/sys/class/infiniband/mlx5_%d", h);
    snprintf(p, sizeof(p), "%s/ports/1/state", d);
    mkfile(base, p, "4: ACTIVE\n");
    snprintf(p, sizeof(p), "%s/ports/1/rate", d);
    mkfile(base, p, "100 Gb/sec (4X EDR)\n");
    snprintf(p, sizeof(p), "%s/ports/1/link_layer", d);
    mkfile(base, p, "InfiniBand\n");
    snprintf(p, sizeof(p), "%s/device/numa_node", d);
    mkfile(base, p, h == 0 ? "0\n" : "1\n");
    snprintf(p, sizeof(p), "%s/device/current_link_width", d);
    mkfile(base, p, "16\n");
    snprintf(p, sizeof(p), "%s/device/max_link_width", d);
    mkfile(base, p, "16\n");
    snprintf(p, sizeof(p), "/sys/class/net/ib%d/operstate", h);
    mkfile(base, p, "up\n");
    snprintf(p, sizeof(p), "/sys/class/net/ib%d/speed", h);
    mkfile(base, p, "100000\n");
    snprintf(p, sizeof(p), "/sys/class/net/ib%d/device", h);
    mkdir_p(base, p);
  }
  mkfile(base, "/sys/class/net/eno1/operstate", "up\n");
  mkfile(base, "/sys/class/net/eno1/speed", "10000\n");
  mkdir_p(base, "/sys/class/net/eno1/device");
  mkfile(base, "/sys/class/net/lo/operstate", "unknown\n");
  mkdir_p(base, "/sys/module/nvidia_peermem");
  mkdir_p(base, "/sys/module/nvidia");
  return root_buf;
}

static doc_report_t *run(const char *root, char *const *environ_,
                         const char *endpoint) {
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  o.root = root;
  o.probe_libs = 0; /* this machine's libraries are not the fake node's */
  o.environ = environ_;
  o.rdzv_endpoint = endpoint;
  o.connect_timeout_ms = test_ms(2000);
  ASSERT_EQ(0, doc_collect(&o, &r));
  return r;
}

static const doc_item_t *must(const doc_report_t *r, const char *id,
                              doc_status_t st) {
  const doc_item_t *it = doc_find(r, id);
  if (it == NULL)
    TEST_FAIL("no item %s", id);
  if (it->status != st)
    TEST_FAIL("%s: %s, want %s (%s | %s)", id, doc_status_name(it->status),
              doc_status_name(st), it->value, it->reason);
  if (st == DOC_WARN || st == DOC_FAIL) {
    ASSERT(it->reason[0] != '\0');
    ASSERT(it->fix[0] != '\0');
  }
  return it;
}

static void test_healthy(void) {
  doc_report_t *r = run(healthy("ok"), NULL, NULL);
  char *text = NULL;
  ASSERT_STR_EQ(doc_host(r), "gpu01");
  ASSERT_STR_EQ(must(r, "os", DOC_INFO)->value, "Rocky Linux 9.3 (Blue Onyx)");
  ASSERT_STR_EQ(must(r, "kernel", DOC_INFO)->value, "5.14.0-362.el9.x86_64");
  ASSERT_STR_EQ(must(r, "cpus", DOC_INFO)->value, "80 CPUs online, 2 sockets");
  ASSERT_CONTAINS(must(r, "numa", DOC_INFO)->value, "2 (node0: 0-19,40-59");
  must(r, "numa-balancing", DOC_PASS);
  must(r, "hugepages", DOC_INFO);
  ASSERT_STR_EQ(must(r, "gpu.count", DOC_PASS)->value, "8");
  ASSERT_STR_EQ(must(r, "gpu.model", DOC_INFO)->value, "Tesla V100-PCIE-32GB");
  ASSERT_STR_EQ(must(r, "driver", DOC_PASS)->value, "535.104.05");
  must(r, "persistence", DOC_PASS);
  must(r, "nouveau", DOC_PASS);
  ASSERT_CONTAINS(must(r, "ib.mlx5_0.1", DOC_PASS)->value, "ACTIVE, 100 Gb/sec (4X EDR), InfiniBand");
  must(r, "ib.mlx5_1.1", DOC_PASS);
  must(r, "placement", DOC_PASS);
  must(r, "peermem", DOC_PASS);
  must(r, "gpu.pcie.0000:86:00.0", DOC_PASS);
  ASSERT_STR_EQ(must(r, "nic.eno1", DOC_PASS)->value, "up, 10000 Mb/s");
  ASSERT(doc_find(r, "nic.lo") == NULL); /* virtual */
  must(r, "nccl.env", DOC_PASS);
  ASSERT(doc_find(r, "cuda") == NULL);    /* libraries not probed */
  ASSERT(doc_find(r, "rdzv") == NULL);    /* no endpoint given */
  ASSERT(doc_worst(r) <= DOC_INFO);
  ASSERT_EQ(0, doc_to_text(r, &text));
  ASSERT_CONTAINS(text, "summary: ");
  ASSERT_CONTAINS(text, " 0 warn, 0 fail");
  free(text);
  doc_free(r);
}

static void test_ib_port_down(void) {
  const char *root = healthy("ibdown");
  doc_report_t *r;
  const doc_item_t *it;
  mkfile(root, "/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  r = run(root, NULL, NULL);
  it = must(r, "ib.mlx5_1.1", DOC_FAIL);
  ASSERT_CONTAINS(it->value, "DOWN");
  ASSERT_CONTAINS(it->fix, "subnet manager");
  must(r, "ib.mlx5_0.1", DOC_PASS);
  /* GPUs 4-7 lost their node-local HCA */
  it = must(r, "placement", DOC_WARN);
  ASSERT_CONTAINS(it->reason, "0000:86:00.0 (NUMA 1)");
  ASSERT(strstr(it->reason, "0000:04:00.0") == NULL);
  ASSERT_EQ(DOC_FAIL, doc_worst(r));
  doc_free(r);
}

static void ib_port(const char *root, const char *hca, int port, const char *state,
                    const char *rate, const char *layer) {
  char p[256];
  snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/state", hca, port);
  mkfile(root, p, state);
  snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/rate", hca, port);
  mkfile(root, p, rate);
  snprintf(p, sizeof(p), "/sys/class/infiniband/%s/ports/%d/link_layer", hca, port);
  mkfile(root, p, layer);
}

/* A dual-port HDR card with its second port uncabled, and a 100G RoCE
 * storage NIC: healthy. A DOWN port fails when its HCA has no other
 * active port, or when the job names it. */
static void test_ib_dual_port_and_storage(void) {
  const char *root = healthy("dualport");
  char *named[] = {"NCCL_IB_HCA=mlx5_0:2", NULL};
  char *launch_hcas[] = {"LAUNCH_HCAS=mlx5_1,mlx5_0", NULL};
  char *other[] = {"NCCL_IB_HCA==mlx5_0:1,mlx5_1", "LAUNCH_HCAS=mlx5_00", NULL};
  doc_report_t *r;
  const doc_item_t *it;
  ib_port(root, "mlx5_0", 1, "4: ACTIVE\n", "200 Gb/sec (4X HDR)\n", "InfiniBand\n");
  ib_port(root, "mlx5_0", 2, "1: DOWN\n", "10 Gb/sec (4X SDR)\n", "InfiniBand\n");
  ib_port(root, "mlx5_1", 1, "4: ACTIVE\n", "100 Gb/sec (2X HDR)\n", "Ethernet\n");
  r = run(root, NULL, NULL);
  must(r, "ib.mlx5_0.1", DOC_PASS);
  it = must(r, "ib.mlx5_0.2", DOC_INFO);
  ASSERT_CONTAINS(it->value, "DOWN");
  ASSERT_CONTAINS(it->reason, "another port of mlx5_0 is ACTIVE");
  must(r, "ib.mlx5_1.1", DOC_PASS); /* RoCE is not compared with IB */
  ASSERT(doc_worst(r) <= DOC_INFO);
  doc_free(r);
  /* named by the job: the job would use a dead port */
  r = run(root, named, NULL);
  ASSERT_CONTAINS(must(r, "ib.mlx5_0.2", DOC_FAIL)->reason, "names it");
  doc_free(r);
  r = run(root, launch_hcas, NULL);
  must(r, "ib.mlx5_0.2", DOC_FAIL);
  doc_free(r);
  /* port 1 only, and a name that is no prefix of mlx5_0 */
  r = run(root, other, NULL);
  must(r, "ib.mlx5_0.2", DOC_INFO);
  doc_free(r);
  /* a second RoCE port at half the speed is still a half-speed cable */
  ib_port(root, "mlx5_1", 2, "4: ACTIVE\n", "50 Gb/sec (1X HDR)\n", "Ethernet\n");
  r = run(root, NULL, NULL);
  ASSERT_CONTAINS(must(r, "ib.mlx5_1.2", DOC_WARN)->reason,
                  "50 Gb/s while other Ethernet ports run 100 Gb/s");
  doc_free(r);
  /* an HCA whose every port is down fails */
  ib_port(root, "mlx5_0", 1, "1: DOWN\n", "10 Gb/sec (4X SDR)\n", "InfiniBand\n");
  r = run(root, NULL, NULL);
  ASSERT_CONTAINS(must(r, "ib.mlx5_0.1", DOC_FAIL)->reason, "no port of this HCA is ACTIVE");
  must(r, "ib.mlx5_0.2", DOC_FAIL);
  doc_free(r);
}

static void test_numa_balancing_on(void) {
  const char *root = healthy("numabal");
  doc_report_t *r;
  const doc_item_t *it;
  mkfile(root, "/proc/sys/kernel/numa_balancing", "1\n");
  r = run(root, NULL, NULL);
  it = must(r, "numa-balancing", DOC_WARN);
  ASSERT_STR_EQ(it->value, "kernel.numa_balancing=1");
  ASSERT_CONTAINS(it->fix, "sysctl -w kernel.numa_balancing=0");
  ASSERT_EQ(DOC_WARN, doc_worst(r));
  doc_free(r);
  /* a file that is not what the kernel writes is said, not guessed */
  mkfile(root, "/proc/sys/kernel/numa_balancing", "abc\n");
  r = run(root, NULL, NULL);
  ASSERT_CONTAINS(must(r, "numa-balancing", DOC_WARN)->reason, "holds 'abc', not a number");
  doc_free(r);
}

/* The rest of the runbooks' mistakes, one node. */
static void test_other_mistakes(void) {
  const char *root = healthy("bad");
  char *env[] = {"NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5_7", NULL};
  doc_report_t *r;
  const doc_item_t *it;
  doc_opts_t o = DOC_OPTS_INIT;
  mkdir_p(root, "/sys/module/nouveau");
  mkfile(root, "/sys/class/infiniband/mlx5_0/device/current_link_width", "8\n");
  mkfile(root, "/sys/class/infiniband/mlx5_1/ports/1/rate", "56 Gb/sec (4X FDR)\n");
  mkfile(root, "/proc/4242/comm", "sshd\n");
  mkfile(root, "/proc/sys/vm/nr_hugepages", "0\n");
  mkfile(root, "/sys/bus/pci/devices/0000:05:00.0/current_link_width", "8\n");
  mkfile(root, "/sys/bus/pci/devices/0000:08:00.0/current_link_speed", "2.5 GT/s PCIe\n");
  r = run(root, env, NULL);
  must(r, "nouveau", DOC_FAIL);
  it = must(r, "ib.mlx5_0.pcie", DOC_WARN);
  ASSERT_CONTAINS(it->reason, "x8 but supports x16: 50%");
  it = must(r, "ib.mlx5_1.1", DOC_WARN);
  ASSERT_CONTAINS(it->reason, "56 Gb/s while other InfiniBand ports run 100 Gb/s");
  must(r, "persistence", DOC_WARN);
  must(r, "hugepages", DOC_INFO);
  must(r, "gpu.pcie.0000:05:00.0", DOC_WARN);
  /* an idle GPU's slow link is not an alarm */
  ASSERT_CONTAINS(must(r, "gpu.pcie.0000:08:00.0", DOC_INFO)->reason, "idle");
  it = must(r, "nccl.hca-missing.NCCL_IB_HCA", DOC_FAIL);
  ASSERT_CONTAINS(it->fix, "mlx5_0 mlx5_1");
  must(r, "nccl.debug-info.NCCL_DEBUG", DOC_WARN);
  doc_free(r);

  /* a profile is linted with this node's HCAs in its templates */
  o.root = root;
  o.probe_libs = 0;
  o.nccl_profile = "nvlink-ib";
  ASSERT_EQ(0, doc_collect(&o, &r));
  ASSERT(doc_find(r, "nccl.hca-missing.NCCL_IB_HCA") == NULL);
  doc_free(r);
  o.nccl_profile = "/nonexistent.env";
  ASSERT_EQ(0, doc_collect(&o, &r));
  must(r, "nccl.profile", DOC_FAIL);
  doc_free(r);

  /* the GPU count the job needs */
  o.nccl_profile = NULL;
  o.expect_gpus = 4;
  ASSERT_EQ(0, doc_collect(&o, &r));
  ASSERT_CONTAINS(must(r, "gpu.count", DOC_FAIL)->reason, "4 GPUs expected, 8 found");
  doc_free(r);
}

/* The driver's list for the healthy node's GPUs: minors 0-7, GPU
 * `excluded` excluded (-1 none), GPU `lost` left out (-1 none). */
static void driver_list(const char *root, int excluded, int lost) {
  static const int bus[8] = {0x04, 0x05, 0x08, 0x09, 0x86, 0x87, 0x8a, 0x8b};
  for (int g = 0; g < 8; g++) {
    char p[256], text[256];
    if (g == lost)
      continue;
    snprintf(p, sizeof(p), "/proc/driver/nvidia/gpus/0000:%02x:00.0/information", bus[g]);
    snprintf(text, sizeof(text),
             "Model: \t\t Tesla V100-PCIE-32GB\nIRQ:   \t\t 88\nGPU UUID: \t "
             "GPU-%08d-0000-0000-0000-000000000000\nDevice Minor: \t %d\n"
             "GPU Excluded: \t %s\n",
             g, g, g == excluded ? "Yes" : "No");
    mkfile(root, p, text);
  }
}

/* GPUs counts those CUDA here can use, as the topology does: a pod given
 * 2 of the node's 8 has 2, and says how many the bus holds. */
static void test_gpus_this_container_uses(void) {
  const char *root = healthy("pod");
  doc_report_t *r;
  doc_opts_t o = DOC_OPTS_INIT;
  const doc_item_t *it;
  driver_list(root, -1, -1);
  mkfile(root, "/dev/nvidiactl", "");
  mkfile(root, "/dev/nvidia0", "");
  mkfile(root, "/dev/nvidia1", "");
  o.root = root;
  o.probe_libs = 0;
  o.expect_gpus = 2;
  ASSERT_EQ(0, doc_collect(&o, &r));
  ASSERT_STR_EQ(must(r, "gpu.count", DOC_PASS)->value, "2");
  it = must(r, "gpu.pci", DOC_INFO);
  ASSERT_CONTAINS(it->value, "8: 2 usable here, 0 not run by the driver, 0 excluded, "
                             "6 not given to this container");
  ASSERT(doc_find(r, "gpu.driver") == NULL);
  ASSERT(doc_find(r, "gpu.pcie.0000:86:00.0") == NULL); /* not ours */
  ASSERT(doc_worst(r) <= DOC_INFO);
  doc_free(r);
  /* the whole node: every device node there, one GPU excluded by the admin */
  for (int g = 2; g < 8; g++) {
    char p[64];
    snprintf(p, sizeof(p), "/dev/nvidia%d", g);
    mkfile(root, p, "");
  }
  driver_list(root, 3, -1);
  o.expect_gpus = -1;
  ASSERT_EQ(0, doc_collect(&o, &r));
  ASSERT_STR_EQ(must(r, "gpu.count", DOC_PASS)->value, "7");
  ASSERT_CONTAINS(must(r, "gpu.pci", DOC_INFO)->value, "1 excluded");
  doc_free(r);
  /* one GPU on the bus that the driver does not run: its own failure */
  driver_list(root, -1, -1);
  {
    char p[512];
    snprintf(p, sizeof(p), "%s/proc/driver/nvidia/gpus/0000:8b:00.0/information", root);
    ASSERT_EQ(0, unlink(p));
  }
  o.expect_gpus = 8;
  ASSERT_EQ(0, doc_collect(&o, &r));
  it = must(r, "gpu.count", DOC_FAIL);
  ASSERT_CONTAINS(it->reason, "8 GPUs expected, 7 usable here of 8 on the PCI bus");
  ASSERT(strstr(it->reason, "fell off the bus") == NULL);
  ASSERT_CONTAINS(must(r, "gpu.driver", DOC_FAIL)->reason, "not in the driver's list");
  doc_free(r);
  /* a GPU gone from the bus is the one that fell off */
  o.expect_gpus = 9;
  ASSERT_EQ(0, doc_collect(&o, &r));
  ASSERT_CONTAINS(must(r, "gpu.count", DOC_FAIL)->reason, "fell off the bus");
  doc_free(r);
}

static void test_driver_missing_and_no_gpu(void) {
  const char *root = healthy("nodrv");
  char p[512];
  doc_report_t *r;
  snprintf(p, sizeof(p), "%s/proc/driver/nvidia/version", root);
  ASSERT_EQ(0, unlink(p));
  r = run(root, NULL, NULL);
  must(r, "driver", DOC_FAIL);
  doc_free(r);
  /* an empty root: nothing found, nothing crashes */
  snprintf(p, sizeof(p), "%s/empty", test_tmpdir());
  mkdir(p, 0755);
  r = run(p, NULL, NULL);
  ASSERT_CONTAINS(must(r, "gpu.count", DOC_WARN)->reason, "no GPU found");
  ASSERT(doc_find(r, "driver") == NULL);
  ASSERT(doc_find(r, "placement") == NULL);
  must(r, "os", DOC_WARN);
  doc_free(r);
  /* a node that lost every GPU fails --expect-gpus as one that lost one */
  {
    doc_opts_t o = DOC_OPTS_INIT;
    o.root = p;
    o.probe_libs = 0;
    o.expect_gpus = 8;
    ASSERT_EQ(0, doc_collect(&o, &r));
    ASSERT_CONTAINS(must(r, "gpu.count", DOC_FAIL)->reason, "8 GPUs expected, 0 found");
    ASSERT_EQ(DOC_FAIL, doc_worst(r));
    doc_free(r);
  }
}

/* seed 001 §85: nc -zv host port, on loopback. */
static void test_rdzv_port(void) {
  struct sockaddr_in a;
  socklen_t al = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;
  char ep[64];
  doc_report_t *r;
  const doc_item_t *it;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(0, bind(fd, (struct sockaddr *)&a, sizeof(a)));
  ASSERT_EQ(0, listen(fd, 4));
  ASSERT_EQ(0, getsockname(fd, (struct sockaddr *)&a, &al));
  port = ntohs(a.sin_port);
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  r = run(healthy("rdzv"), NULL, ep);
  ASSERT_CONTAINS(must(r, "rdzv", DOC_PASS)->value, "reachable");
  doc_free(r);
  close(fd); /* now nothing listens there */
  r = run(root_buf, NULL, ep);
  it = must(r, "rdzv", DOC_FAIL);
  ASSERT_CONTAINS(it->reason, "connection refused");
  ASSERT_CONTAINS(it->fix, "firewall-cmd --add-port=");
  doc_free(r);
  r = run(root_buf, NULL, "not a host:port:x");
  must(r, "rdzv", DOC_FAIL);
  doc_free(r);
}

static void test_serialise_and_diff(void) {
  doc_report_t *a = run(healthy("s1"), NULL, NULL), *b, *back = NULL;
  const char *root2;
  char *json = NULL, *c1 = NULL, *c2 = NULL, *diff = NULL;
  size_t l1 = 0, l2 = 0;
  const doc_report_t *both[2];
  const char *names[] = {"node0", "node1"};
  ASSERT_EQ(0, doc_to_json(a, &json));
  ASSERT_CONTAINS(json, "\"id\": \"numa-balancing\"");
  ASSERT_CONTAINS(json, "\"same_on_all_nodes\": true");
  ASSERT_CONTAINS(json, "\"worst\": ");
  free(json);
  ASSERT_EQ(0, doc_to_compact(a, &c1, &l1));
  ASSERT_EQ(0, doc_from_compact(c1, l1, &back));
  ASSERT_EQ(doc_count(a), doc_count(back));
  ASSERT_STR_EQ(doc_host(back), "gpu01");
  for (int i = 0; i < doc_count(a); i++) {
    ASSERT_STR_EQ(doc_item(a, i)->id, doc_item(back, i)->id);
    ASSERT_STR_EQ(doc_item(a, i)->value, doc_item(back, i)->value);
    ASSERT_STR_EQ(doc_item(a, i)->fix, doc_item(back, i)->fix);
    ASSERT_EQ(doc_item(a, i)->status, doc_item(back, i)->status);
    ASSERT_EQ(doc_item(a, i)->same, doc_item(back, i)->same);
  }
  ASSERT_EQ(0, doc_to_compact(back, &c2, &l2));
  ASSERT_EQ(l1, l2);
  ASSERT_MEM_EQ(c1, c2, l1);
  free(c1);
  free(c2);
  doc_free(back);
  {
    static const char *const bad[] = {
        "", "launch-doctor 2\nhost\tx\n", "launch-doctor 1\n",
        "launch-doctor 1\nhost\tx", "launch-doctor 1\nhst\tx\n",
        "launch-doctor 1\nhost\tx\nid\tpass\t1\tt\tv\tr\n",
        "launch-doctor 1\nhost\tx\nid\tgood\t1\tt\tv\tr\tf\n",
        "launch-doctor 1\nhost\tx\nid\tpass\t2\tt\tv\tr\tf\n",
        "launch-doctor 1\nhost\tx\nid\tpass\t1\tt\tv\tr\tf\textra\n",
        "launch-doctor 1\nhost\tx\nid\tpass\t1\tt\tv\\q\tr\tf\n",
        "launch-doctor 1\nhost\tx\n\tpass\t1\tt\tv\tr\tf\n",
    };
    for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++) {
      doc_report_t *x = (doc_report_t *)1;
      if (doc_from_compact(bad[i], strlen(bad[i]), &x) != RDZV_EPROTO)
        TEST_FAIL("accepted bad compact report %zu", i);
      ASSERT(x == NULL);
    }
  }
  /* node1 differs where seed 001 §91 wants equality */
  root2 = healthy("s2");
  mkfile(root2, "/proc/sys/kernel/osrelease", "5.14.0-284.el9.x86_64\n");
  mkfile(root2, "/proc/sys/kernel/hostname", "gpu02\n");
  b = run(root2, NULL, NULL);
  both[0] = a;
  both[1] = b;
  ASSERT_EQ(1, doc_diff(both, names, 2, &diff));
  ASSERT_STR_EQ(diff, "kernel: node0=5.14.0-362.el9.x86_64 node1=5.14.0-284.el9.x86_64\n");
  free(diff);
  both[1] = a;
  ASSERT_EQ(0, doc_diff(both, names, 2, &diff));
  ASSERT_STR_EQ(diff, "");
  free(diff);
  doc_free(a);
  doc_free(b);
}

int main(void) {
  int fds = test_fd_count();
  test_healthy();
  test_ib_port_down();
  test_ib_dual_port_and_storage();
  test_numa_balancing_on();
  test_other_mistakes();
  test_driver_missing_and_no_gpu();
  test_gpus_this_container_uses();
  test_rdzv_port();
  test_serialise_and_diff();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
