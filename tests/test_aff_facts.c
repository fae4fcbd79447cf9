/* test_aff_facts.c - one owner for node facts (issue #25): affinity/
 * reads a node's GPUs, PCIe links, RDMA devices with their ports and its
 * interface names once (aff_facts_probe), and the lint's view
 * (env_node_probe) and launch doctor's GPU and IB lines are exactly what
 * those facts say, on a fake sysfs tree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aff.h"
#include "doctor.h"
#include "env.h"
#include "test.h"

static char root[600];

static void put(const char *rel, const char *text) {
  test_put_file(root, rel, text);
}

/* An H200 on a x8 link (of x16) on NUMA node 1, a NIC that is no GPU, two
 * HCAs: mlx5_0 with ports 1 (ACTIVE, 400 Gb/s) and 2 (ACTIVE, 200 Gb/s),
 * mlx5_1 with port 1 DOWN and a port 2 that has only a link layer (no
 * port: the list ends there); interfaces eth0 and ib0. */
static void fake_node(void) {
  const char *g = "/sys/bus/pci/devices/0000:07:00.0/";
  const char *nic = "/sys/bus/pci/devices/0000:0c:00.0/";
  char p[256];
  snprintf(root, sizeof(root), "%s/node", test_tmpdir());
#define AT(base, leaf) (snprintf(p, sizeof(p), "%s%s", base, leaf), p)
  put(AT(g, "vendor"), "0x10de\n");
  put(AT(g, "class"), "0x030200\n");
  put(AT(g, "device"), "0x2335\n");
  put(AT(g, "numa_node"), "1\n");
  put(AT(g, "current_link_width"), "8\n");
  put(AT(g, "max_link_width"), "16\n");
  put(AT(g, "current_link_speed"), "32.0 GT/s PCIe\n");
  put(AT(g, "max_link_speed"), "32.0 GT/s PCIe\n");
  put(AT(nic, "vendor"), "0x15b3\n");
  put(AT(nic, "class"), "0x020700\n");
  put("/sys/class/infiniband/mlx5_0/device/numa_node", "1\n");
  put("/sys/class/infiniband/mlx5_0/device/current_link_width", "16\n");
  put("/sys/class/infiniband/mlx5_0/device/max_link_width", "16\n");
  put("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  put("/sys/class/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  put("/sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  put("/sys/class/infiniband/mlx5_0/ports/2/state", "4: ACTIVE\n");
  put("/sys/class/infiniband/mlx5_0/ports/2/rate", "200 Gb/sec (4X HDR)\n");
  put("/sys/class/infiniband/mlx5_0/ports/2/link_layer", "Ethernet\n");
  put("/sys/class/infiniband/mlx5_1/device/numa_node", "0\n");
  put("/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  put("/sys/class/infiniband/mlx5_1/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  put("/sys/class/infiniband/mlx5_1/ports/2/link_layer", "InfiniBand\n");
  put("/sys/class/net/ib0/operstate", "up\n");
  put("/sys/class/net/eth0/operstate", "up\n");
#undef AT
}

static void facts_are_read(const aff_facts_t *f) {
  ASSERT_EQ(1, f->probed);
  ASSERT_EQ(1, f->ngpus);
  ASSERT_STR_EQ("0000:07:00.0", f->gpus[0].busid);
  ASSERT_EQ(0x2335, (int)f->gpus[0].device);
  ASSERT_EQ(1, f->gpus[0].numa);
  ASSERT_EQ(8, f->gpus[0].link.width);
  ASSERT_EQ(16, f->gpus[0].link.width_max);
  ASSERT(f->gpus[0].link.gts > 31.9 && f->gpus[0].link.gts < 32.1);
  ASSERT_EQ(2, f->nhcas);
  ASSERT_STR_EQ("mlx5_0", f->hcas[0].name);
  ASSERT_EQ(1, f->hcas[0].numa);
  ASSERT_EQ(16, f->hcas[0].link.width);
  ASSERT_EQ(2, f->hcas[0].nports);
  ASSERT_EQ(4, f->hcas[0].ports[1].state);
  ASSERT_STR_EQ("200 Gb/sec (4X HDR)", f->hcas[0].ports[1].rate);
  ASSERT_STR_EQ("Ethernet", f->hcas[0].ports[1].link_layer);
  ASSERT_STR_EQ("mlx5_1", f->hcas[1].name);
  ASSERT_EQ(1, f->hcas[1].nports); /* port 2: neither state nor rate */
  ASSERT_EQ(1, f->hcas[1].ports[0].state);
  ASSERT_EQ(2, f->nnetdevs);
  ASSERT_STR_EQ("eth0", f->netdevs[0]);
  ASSERT_STR_EQ("ib0", f->netdevs[1]);
}

/* The lint's view is the facts', whichever way it is made. */
static void lint_reads_the_facts(const aff_facts_t *f) {
  env_node_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
  ASSERT(a && b);
  ASSERT_OK(env_node_probe(a, root));
  env_node_from_facts(b, f);
  ASSERT(memcmp(a, b, sizeof(*a)) == 0);
  ASSERT_EQ(2, b->nhcas);
  ASSERT_EQ(2, b->hcas[0].nports);
  ASSERT_EQ(4, b->hcas[0].state[0]);
  ASSERT_STR_EQ("Ethernet", b->hcas[0].link_layer[1]);
  ASSERT_EQ(2, b->nnetdevs);
  free(a);
  free(b);
}

/* launch doctor says what the facts say. */
static void doctor_reads_the_facts(void) {
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  const doc_item_t *it;
  o.root = root;
  o.probe_libs = 0;
  ASSERT_OK(doc_collect(&o, &r));
  ASSERT((it = doc_find(r, "gpu.pcie.0000:07:00.0")) != NULL);
  ASSERT_CONTAINS(it->value, "x8 (max x16) 32.0 GT/s");
  ASSERT_CONTAINS(it->value, "NUMA 1");
  ASSERT((it = doc_find(r, "ib.mlx5_0.2")) != NULL);
  ASSERT_CONTAINS(it->value, "ACTIVE, 200 Gb/sec (4X HDR), Ethernet");
  ASSERT_EQ(DOC_PASS, it->status); /* RoCE: not compared with port 1's IB */
  ASSERT((it = doc_find(r, "ib.mlx5_1.1")) != NULL);
  ASSERT_EQ(DOC_FAIL, it->status);
  ASSERT(doc_find(r, "ib.mlx5_1.2") == NULL);
  doc_free(r);
}

/* A Kubernetes node: eth0 and 100 Calico veths (cali*, sorted before
 * it), 70 SR-IOV RDMA devices. Every name is kept, so the lint finds eth0
 * and mlx5_69 (a cap of 64 in readdir order dropped any of them, and the
 * job was refused: "no interface of this node matches 'eth0'"). */
static void many_interfaces(void) {
  aff_facts_t *f = malloc(sizeof(*f));
  env_node_t *n = calloc(1, sizeof(*n));
  char many[600], p[128];
  env_t *e = NULL;
  env_finding_t *fd = NULL;
  int nf = 0;
  const char *envv[] = {"NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_HCA=mlx5_69", NULL};
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  ASSERT(f && n);
  snprintf(many, sizeof(many), "%s/k8s", test_tmpdir());
  test_put_file(many, "/sys/class/net/eth0/operstate", "up\n");
  test_put_file(many, "/sys/class/net/eth0/device/vendor", "0x15b3\n");
  for (int i = 0; i < 100; i++) {
    snprintf(p, sizeof(p), "/sys/class/net/cali%011x/operstate", 0x5eed0000u + (unsigned)i);
    test_put_file(many, p, "up\n");
  }
  for (int i = 0; i < 70; i++) {
    snprintf(p, sizeof(p), "/sys/class/infiniband/mlx5_%d/ports/1/state", i);
    test_put_file(many, p, "4: ACTIVE\n");
  }
  aff_facts_probe(f, many);
  ASSERT_EQ(101, f->nnetdevs);
  ASSERT_EQ(0, f->netdevs_cut);
  ASSERT_STR_EQ("eth0", f->netdevs[100]);
  ASSERT_EQ(70, f->nhcas);
  ASSERT_EQ(0, f->hcas_cut);
  env_node_from_facts(n, f);
  ASSERT_EQ(101, n->nnetdevs);
  ASSERT_EQ(0, n->netdevs_incomplete);
  ro.base = (char *const *)envv;
  ASSERT_OK(env_build_rank(&ro, &e));
  ASSERT_OK(env_lint(e, n, &fd, &nf));
  for (int i = 0; i < nf; i++)
    if (strcmp(fd[i].rule, "ifname-missing") == 0 || strcmp(fd[i].rule, "hca-missing") == 0)
      TEST_FAIL("%s: %s", fd[i].rule, fd[i].why);
  free(fd);
  env_free(e);
  /* launch doctor lists the hardware NIC among the veths */
  o.root = many;
  o.probe_libs = 0;
  ASSERT_OK(doc_collect(&o, &r));
  ASSERT(doc_find(r, "nic.eth0") != NULL);
  ASSERT(doc_find(r, "ib.mlx5_69.1") != NULL);
  doc_free(r);
  free(n);
  free(f);
}

int main(void) {
  aff_facts_t *f = malloc(sizeof(*f));
  ASSERT(f != NULL);
  fake_node();
  aff_facts_probe(f, root);
  facts_are_read(f);
  lint_reads_the_facts(f);
  doctor_reads_the_facts();
  many_interfaces();
  /* nothing there: nothing known, nothing invented */
  aff_facts_probe(f, "/nonexistent-root");
  ASSERT(f->probed == 0 && f->ngpus == 0 && f->nhcas == 0);
  free(f);
  return 0;
}
