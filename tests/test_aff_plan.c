/* test_aff_plan.c - topology discovery and binding plans against the hwloc
 * XML files of tests/topo: the seed-000 V100 PCIe box, a DGX-A100-like
 * box, this VM, and whatever else is committed there (the GPU machine's
 * export). */
#include <dirent.h>
#include <numaif.h>
#include <unistd.h>

#include "aff.h"
#include "aff_int.h" /* test_mems: a process kept off a node */
#include "test.h"

static char path_buf[1024];

static const char *topo_path(const char *name) {
  const char *src = getenv("LAUNCH_SOURCE_DIR");
  snprintf(path_buf, sizeof(path_buf), "%s/tests/topo/%s", src ? src : ".", name);
  return path_buf;
}

static aff_topo_t *load(const char *name, const char *cvd) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  char err[512] = "";
  int rc;
  o.xml = name[0] == '/' ? name : topo_path(name);
  o.cuda_visible_devices = cvd;
  rc = aff_topo_load(&o, &t, err, sizeof(err));
  if (rc != 0)
    TEST_FAIL("load %s: %d %s", name, rc, err);
  return t;
}

/* A fixture with every `from` replaced by `to` (NULL-terminated pairs),
 * loaded from a copy. */
static aff_topo_t *load_edited(const char *name, const char *const *edits) {
  FILE *f = fopen(topo_path(name), "r");
  char *text, *at, copy[512];
  long len;
  aff_topo_t *t;
  ASSERT(f != NULL);
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  rewind(f);
  ASSERT((text = calloc(1, (size_t)len * 2 + 1)) != NULL);
  ASSERT_EQ((size_t)len, fread(text, 1, (size_t)len, f));
  fclose(f);
  for (; edits[0]; edits += 2)
    for (at = text; (at = strstr(at, edits[0])) != NULL; at += strlen(edits[1])) {
      size_t a = strlen(edits[0]), b = strlen(edits[1]);
      memmove(at + b, at + a, strlen(at + a) + 1);
      memcpy(at, edits[1], b);
    }
  snprintf(copy, sizeof(copy), "%s/edited.xml", test_tmpdir());
  ASSERT((f = fopen(copy, "w")) != NULL);
  fputs(text, f);
  fclose(f);
  free(text);
  t = load(copy, NULL);
  return t;
}

static aff_plan_t *plan(const aff_topo_t *t, const char *cpu, const char *mem,
                        int nproc) {
  aff_policy_t *p = malloc(sizeof(*p));
  aff_plan_t *pl = NULL;
  char err[512] = "";
  ASSERT(p != NULL);
  if (aff_policy_parse(cpu, mem, p, err, sizeof(err)) != 0)
    TEST_FAIL("policy %s/%s: %s", cpu, mem, err);
  if (aff_plan_new(t, p, nproc, NULL, &pl, err, sizeof(err)) != 0)
    TEST_FAIL("plan: %s", err);
  free(p);
  return pl;
}

static const char *cpus_of(const aff_plan_t *p, int r) {
  return aff_plan_rank(p, r)->cpulist;
}

static int has_warning(const aff_topo_t *t, const aff_plan_t *p,
                       const char *needle) {
  for (int i = 0; t && i < aff_topo_nwarnings(t); i++)
    if (strstr(aff_topo_warning(t, i), needle))
      return 1;
  for (int i = 0; p && i < aff_plan_nwarnings(p); i++)
    if (strstr(aff_plan_warning(p, i), needle))
      return 1;
  return 0;
}

static const char *env_of(const aff_binding_t *b, const char *key) {
  size_t n = strlen(key);
  for (const char *const *e = aff_binding_envv(b); *e; e++)
    if (strncmp(*e, key, n) == 0 && (*e)[n] == '=')
      return *e + n + 1;
  return NULL;
}

/* Seed 000: 8x V100 PCIe, two sockets, one ConnectX-5 in an x8 slot. */
static void test_v100(void) {
  aff_topo_t *t = load("v100-pcie-2s.xml", NULL);
  aff_cpuset_t node1;
  aff_plan_t *p;
  ASSERT_EQ(8, aff_topo_ngpus(t));
  ASSERT_EQ(80, aff_topo_ncpus(t));
  ASSERT_EQ(2, aff_topo_nnuma(t));
  for (int i = 0; i < 8; i++) {
    const aff_gpu_t *g = aff_topo_gpu(t, i);
    ASSERT_EQ(i < 4 ? 0 : 1, g->numa);
    ASSERT_STR_EQ(g->model, "Tesla V100-PCIE-32GB");
    ASSERT_EQ(32ull << 30, g->mem_bytes);
    ASSERT_EQ(16, g->link.width);
    /* the one HCA is every GPU's nearest, across the socket link for 4-7 */
    ASSERT_STR_EQ(aff_topo_nic(t, g->nic)->name, "mlx5_0");
    ASSERT_EQ(i < 4 ? AFF_PATH_PHB : AFF_PATH_SYS, g->nic_path);
  }
  /* bus order, as nvidia-smi numbers them */
  ASSERT_STR_EQ(aff_topo_gpu(t, 0)->busid, "0000:04:00.0");
  ASSERT_STR_EQ(aff_topo_gpu(t, 7)->busid, "0000:8b:00.0");
  ASSERT_EQ(AFF_PATH_PIX, aff_topo_gpu_path(t, 0, 1)); /* same PLX switch */
  ASSERT_EQ(AFF_PATH_PHB, aff_topo_gpu_path(t, 0, 2));
  ASSERT_EQ(AFF_PATH_SYS, aff_topo_gpu_path(t, 0, 4));
  ASSERT_EQ(0, aff_topo_has_nvlink(t)); /* PCIe only */
  ASSERT_STR_EQ(aff_topo_gpu_hcas(t), "mlx5_0");
  /* the two seed-000 mistakes */
  ASSERT(has_warning(t, NULL, "mlx5_0 (0000:18:00.0) runs at PCIe x8 but supports x16"));
  ASSERT(has_warning(t, NULL, "mlx5_0 is on NUMA node 0 but is the closest NIC of GPU 4,5,6,7 on NUMA node 1"));
  ASSERT_EQ(2, aff_topo_nwarnings(t));

  /* cores: the 20 cores of a socket split among its 4 GPUs, hyperthread
   * siblings (c and c+40) stay together */
  p = plan(t, "cores", "local", 8);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-4,40-44");
  ASSERT_STR_EQ(cpus_of(p, 3), "15-19,55-59");
  ASSERT_STR_EQ(cpus_of(p, 4), "20-24,60-64");
  ASSERT_EQ(0, aff_plan_nwarnings(p));
  for (int r = 0; r < 8; r++) {
    const aff_binding_t *b = aff_plan_rank(p, r);
    ASSERT(b->bind_cpus);
    ASSERT_EQ(MPOL_BIND, b->mem_policy);
    ASSERT_EQ(1, (b->nodemask[0] >> b->numa) & 1);
    ASSERT_EQ(r < 4 ? 0 : 1, b->numa);
    ASSERT_STR_EQ(b->hca, "mlx5_0");
    ASSERT_STR_EQ(b->netdev, "ib0");
    for (int q = 0; q < r; q++)
      ASSERT(!aff_cpuset_intersects(&b->cpus, &aff_plan_rank(p, q)->cpus));
  }
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 5), "LAUNCH_CPUS"), "25-29,65-69");
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 5), "LAUNCH_NUMA_NODE"), "1");
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 5), "LAUNCH_GPU_BUSID"), "0000:87:00.0");
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 5), "LAUNCH_HCA"), "mlx5_0");
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 5), "LAUNCH_HCA_PORT"), "1");
  aff_plan_free(p);

  /* numa: the whole node */
  p = plan(t, "numa", "none", 8);
  ASSERT_EQ(1, aff_topo_numa(t, 1, &node1));
  ASSERT(aff_cpuset_equal(&aff_plan_rank(p, 6)->cpus, &node1));
  ASSERT_STR_EQ(cpus_of(p, 6), "20-39,60-79");
  ASSERT_EQ(0, aff_plan_rank(p, 6)->mem_policy);
  aff_plan_free(p);

  /* more ranks than GPUs: they share GPUs, cores still do not overlap */
  p = plan(t, "cores", "none", 16);
  ASSERT(has_warning(NULL, p, "16 local ranks for 8 visible GPUs"));
  ASSERT_EQ(0, aff_plan_rank(p, 8)->gpu);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-1,40-41");
  ASSERT_STR_EQ(cpus_of(p, 8), "10-11,50-51");
  aff_plan_free(p);
  aff_topo_free(t);
}

/* DGX-A100: NPS4, one switch per GPU pair with two HCAs, NVSwitch. */
static void test_dgx(void) {
  aff_topo_t *t = load("dgx-a100.xml", NULL);
  aff_plan_t *p;
  static const int numa[8] = {3, 3, 1, 1, 7, 7, 5, 5};
  static const char *const hca[8] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
                                     "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"};
  ASSERT_EQ(8, aff_topo_ngpus(t));
  ASSERT_EQ(8, aff_topo_nnuma(t));
  ASSERT_EQ(256, aff_topo_ncpus(t));
  ASSERT_EQ(1, aff_topo_has_nvlink(t));
  ASSERT_EQ(AFF_PATH_NVLINK, aff_topo_gpu_path(t, 0, 7));
  ASSERT_EQ(300000, aff_topo_nvlink_mbps(t, 2, 5));
  for (int i = 0; i < 8; i++) {
    const aff_gpu_t *g = aff_topo_gpu(t, i);
    ASSERT_EQ(numa[i], g->numa);
    /* each GPU its own HCA, under its own switch */
    ASSERT_STR_EQ(aff_topo_nic(t, g->nic)->name, hca[i]);
    ASSERT_EQ(AFF_PATH_PIX, g->nic_path);
  }
  /* the storage NICs (RoCE, no GPU near) are not compute rails */
  ASSERT_STR_EQ(aff_topo_gpu_hcas(t),
                "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9");
  for (int k = 0; k < aff_topo_nnics(t); k++)
    if (strcmp(aff_topo_nic(t, k)->name, "mlx5_4") == 0)
      ASSERT_STR_EQ(aff_topo_nic(t, k)->link_layer, "Ethernet");
  ASSERT_EQ(0, aff_topo_nwarnings(t)); /* a healthy box: no false alarms */

  p = plan(t, "cores", "local", 8);
  /* node 3 = cores 48-63 (+128 siblings), split between GPU0 and GPU1 */
  ASSERT_STR_EQ(cpus_of(p, 0), "48-55,176-183");
  ASSERT_STR_EQ(cpus_of(p, 1), "56-63,184-191");
  ASSERT_STR_EQ(cpus_of(p, 4), "112-119,240-247");
  for (int r = 0; r < 8; r++) {
    ASSERT_STR_EQ(aff_plan_rank(p, r)->hca, hca[r]);
    ASSERT_EQ(1, aff_plan_rank(p, r)->hca_port);
  }
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 0), "LAUNCH_NETDEV"), "ibp12s0");
  aff_plan_free(p);

  /* 4 ranks: one per GPU0-3, each alone on half a node */
  p = plan(t, "cores", "preferred", 4);
  ASSERT_STR_EQ(cpus_of(p, 2), "16-23,144-151");
  ASSERT_EQ(MPOL_PREFERRED, aff_plan_rank(p, 2)->mem_policy);
  aff_plan_free(p);

  /* explicit lists: exactly one per rank */
  p = plan(t, "0-3:64-67", "local", 2);
  ASSERT_STR_EQ(cpus_of(p, 1), "64-67");
  ASSERT_EQ(4, aff_plan_rank(p, 1)->numa); /* the node holding those CPUs */
  aff_plan_free(p);
  {
    aff_policy_t *pol = malloc(sizeof(*pol));
    aff_plan_t *bad = NULL;
    char err[512] = "";
    ASSERT_EQ(0, aff_policy_parse("0-3:4-7", "none", pol, err, sizeof(err)));
    ASSERT_EQ(RDZV_EINVAL, aff_plan_new(t, pol, 8, NULL, &bad, err, sizeof(err)));
    ASSERT_CONTAINS(err, "gives 2 CPU lists for 8 local ranks");
    ASSERT(bad == NULL);
    ASSERT_EQ(0, aff_policy_parse("0-3:4-7,4000", "none", pol, err, sizeof(err)));
    ASSERT_EQ(0, aff_plan_new(t, pol, 2, NULL, &bad, err, sizeof(err)));
    ASSERT(has_warning(NULL, bad, "local rank 1: CPUs 4-7,4000 asked"));
    ASSERT_STR_EQ(bad ? aff_plan_rank(bad, 1)->cpulist : "", "4-7");
    aff_plan_free(bad);
    ASSERT_EQ(RDZV_EINVAL, aff_plan_new(t, pol, 0, NULL, &bad, err, sizeof(err)));
    free(pol);
  }
  /* overlapping lists are allowed, but said */
  p = plan(t, "0-3:3-5", "none", 2);
  ASSERT(has_warning(NULL, p, "overlaps"));
  aff_plan_free(p);
  aff_topo_free(t);
}

/* CUDA_VISIBLE_DEVICES: indexes, UUIDs, and CUDA's stop-at-first-bad rule. */
static void test_visible_devices(void) {
  aff_topo_t *t = load("dgx-a100.xml", "4,5");
  aff_plan_t *p;
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_EQ(4, aff_topo_gpu(t, 0)->phys);
  ASSERT_EQ(0, aff_topo_gpu(t, 0)->index);
  ASSERT_STR_EQ(aff_topo_gpu(t, 0)->busid, "0000:87:00.0");
  p = plan(t, "cores", "local", 2);
  /* GPU4 and GPU5 share NUMA 7 and split it */
  ASSERT_STR_EQ(cpus_of(p, 0), "112-119,240-247");
  ASSERT_STR_EQ(aff_plan_rank(p, 1)->hca, "mlx5_7");
  aff_plan_free(p);
  aff_topo_free(t);

  t = load("dgx-a100.xml", "GPU-5eed0006");
  ASSERT_EQ(1, aff_topo_ngpus(t));
  ASSERT_EQ(6, aff_topo_gpu(t, 0)->phys);
  p = plan(t, "cores", "none", 1);
  /* alone on its node now: the whole node */
  ASSERT_STR_EQ(cpus_of(p, 0), "80-95,208-223");
  aff_plan_free(p);
  aff_topo_free(t);

  t = load("dgx-a100.xml", "2,9,3");
  ASSERT_EQ(1, aff_topo_ngpus(t)); /* 9 does not exist: 3 is ignored too */
  aff_topo_free(t);
  t = load("dgx-a100.xml", "");
  ASSERT_EQ(0, aff_topo_ngpus(t));
  aff_topo_free(t);
  t = load("dgx-a100.xml", "1,1");
  ASSERT_EQ(1, aff_topo_ngpus(t));
  aff_topo_free(t);
}

/* Fewer cores than ranks: share the node, with a warning. */
static void test_degrade(void) {
  aff_topo_t *t = load("this-machine-2core.xml", NULL);
  aff_plan_t *p;
  ASSERT_EQ(0, aff_topo_ngpus(t));
  ASSERT_EQ(-1, aff_topo_has_nvlink(t));
  p = plan(t, "cores", "local", 2);
  ASSERT_STR_EQ(cpus_of(p, 0), "0");
  ASSERT_STR_EQ(cpus_of(p, 1), "1");
  ASSERT_EQ(0, aff_plan_nwarnings(p));
  aff_plan_free(p);
  p = plan(t, "cores", "local", 3);
  ASSERT(has_warning(NULL, p, "NUMA node 0 has 2 cores for 3 local ranks"));
  for (int r = 0; r < 3; r++) {
    ASSERT_STR_EQ(cpus_of(p, r), "0-1");
    ASSERT(aff_plan_rank(p, r)->bind_cpus);
  }
  aff_plan_free(p);
  /* no GPU: the NIC is the node's netdev, for the socket profile */
  p = plan(t, "none", "none", 1);
  ASSERT_STR_EQ(aff_plan_rank(p, 0)->netdev, "eth0");
  ASSERT_STR_EQ(aff_plan_rank(p, 0)->hca, "");
  ASSERT_EQ(0, aff_plan_rank(p, 0)->bind_cpus);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-1"); /* LAUNCH_CPUS: what it may use */
  aff_plan_free(p);
  aff_topo_free(t);
}

/* The GPU machine itself (exported there): one H200 in a 16-core VM, no
 * RDMA; NVML's name comes from launch's table when hwloc has none. */
static void test_h200(void) {
  aff_topo_t *t = load("h200-gpu-machine.xml", NULL);
  aff_plan_t *p;
  const aff_gpu_t *g;
  ASSERT_EQ(1, aff_topo_ngpus(t));
  g = aff_topo_gpu(t, 0);
  ASSERT_STR_EQ(g->busid, "0000:00:06.0");
  ASSERT_STR_EQ(g->model, "NVIDIA H200");
  ASSERT_EQ(16, g->link.width);
  ASSERT(g->link.gts > 31.9 && g->link.gbps > 60);
  ASSERT_EQ(0, aff_topo_nwarnings(t));
  p = plan(t, "cores", "local", 2);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-7");
  ASSERT_STR_EQ(cpus_of(p, 1), "8-15");
  ASSERT(has_warning(NULL, p, "2 local ranks for 1 visible GPU"));
  /* no HCA: the socket profile's ${LAUNCH_NETDEV} */
  ASSERT_STR_EQ(aff_plan_rank(p, 0)->netdev, "eth0");
  ASSERT_STR_EQ(env_of(aff_plan_rank(p, 0), "LAUNCH_HCAS"), "");
  aff_plan_free(p);
  aff_topo_free(t);
}

/* The 2-GPU kind of the GPU machine (exported there with launch topo
 * --export): two H200 on one NUMA node of 32 cores. */
static void test_h200_x2(void) {
  aff_topo_t *t = load("h200-x2-gpu-machine.xml", NULL);
  aff_plan_t *p;
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_STR_EQ(aff_topo_gpu(t, 0)->busid, "0000:00:06.0");
  ASSERT_STR_EQ(aff_topo_gpu(t, 1)->busid, "0000:00:07.0");
  ASSERT_EQ(16, aff_topo_gpu(t, 1)->link.width);
  p = plan(t, "cores", "local", 2);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-15");
  ASSERT_STR_EQ(cpus_of(p, 1), "16-31");
  ASSERT_EQ(0, aff_plan_rank(p, 1)->numa);
  aff_plan_free(p);
  p = plan(t, "numa", "preferred", 2);
  ASSERT_STR_EQ(cpus_of(p, 0), "0-31");
  aff_plan_free(p);
  aff_topo_free(t);
}

/* Every committed topology loads and plans sensibly. */
static void test_every_xml(void) {
  const char *src = getenv("LAUNCH_SOURCE_DIR");
  char dir[1024];
  DIR *d;
  struct dirent *e;
  int n = 0;
  snprintf(dir, sizeof(dir), "%s/tests/topo", src ? src : ".");
  ASSERT((d = opendir(dir)) != NULL);
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    aff_topo_t *t;
    aff_plan_t *p;
    int nproc, shared = 0;
    if (l < 5 || strcmp(e->d_name + l - 4, ".xml") != 0)
      continue;
    t = load(e->d_name, NULL);
    ASSERT(aff_topo_ncpus(t) > 0);
    ASSERT(aff_topo_nnuma(t) > 0);
    nproc = aff_topo_ngpus(t) > 0 ? aff_topo_ngpus(t) : 1;
    p = plan(t, "cores", "local", nproc);
    shared = has_warning(NULL, p, "share");
    for (int r = 0; r < nproc; r++) {
      const aff_binding_t *b = aff_plan_rank(p, r);
      if (b->gpu >= 0)
        ASSERT_EQ(aff_topo_gpu(t, b->gpu)->numa, b->numa);
      if (b->bind_cpus) {
        ASSERT(aff_cpuset_count(&b->cpus) > 0);
        if (b->gpu >= 0 && aff_topo_gpu(t, b->gpu)->numa >= 0) {
          aff_cpuset_t c = b->cpus;
          aff_cpuset_and(&c, &aff_topo_gpu(t, b->gpu)->cpus);
          ASSERT(aff_cpuset_equal(&c, &b->cpus)); /* inside its node */
        }
      }
      for (int q = 0; q < r && !shared; q++)
        ASSERT(!aff_cpuset_intersects(&b->cpus, &aff_plan_rank(p, q)->cpus));
    }
    {
      char *text = NULL, *json = NULL;
      ASSERT_EQ(0, aff_report_text(t, p, &text));
      ASSERT_CONTAINS(text, "binding plan");
      ASSERT_EQ(0, aff_report_json(t, p, &json));
      ASSERT_CONTAINS(json, "\"ranks\"");
      free(text);
      free(json);
    }
    aff_plan_free(p);
    aff_topo_free(t);
    n++;
  }
  closedir(d);
  ASSERT(n >= 3);
}

/* A port that is down is nobody's NIC while another NIC is up, and every
 * rank gets the same kind (seed 000 with its only HCA down: ranks 0,2,4,6
 * got the dead mlx5_0, 1,3,5,7 eno1, and NCCL_IB_HCA differed). */
static void test_down_hca(void) {
  static const char *const down[] = {
      "\"Port1State\" value=\"4\"", "\"Port1State\" value=\"1\"", NULL};
  static const char *const all_down[] = {
      "\"Port1State\" value=\"4\"", "\"Port1State\" value=\"1\"",
      "name=\"eno1\" osdev_type=\"2\"", "name=\"eno1\" osdev_type=\"0\"", NULL};
  aff_topo_t *t = load_edited("v100-pcie-2s.xml", down);
  aff_plan_t *p = plan(t, "numa", "none", 8);
  for (int r = 0; r < 8; r++) {
    ASSERT_STR_EQ("", aff_plan_rank(p, r)->hca);
    ASSERT_STR_EQ("eno1", aff_plan_rank(p, r)->netdev);
  }
  ASSERT_STR_EQ("", aff_topo_gpu_hcas(t));
  ASSERT(!has_warning(t, p, "no NIC of this machine has a port that is up"));
  aff_plan_free(p);
  aff_topo_free(t);
  /* nothing else left: the down HCA, for every rank, with a warning */
  t = load_edited("v100-pcie-2s.xml", all_down);
  p = plan(t, "numa", "none", 8);
  for (int r = 0; r < 8; r++)
    ASSERT_STR_EQ("mlx5_0", aff_plan_rank(p, r)->hca);
  ASSERT(has_warning(t, p, "no NIC of this machine has a port that is up"));
  aff_plan_free(p);
  aff_topo_free(t);
}

/* Two NUMA nodes of the same CPUs in each socket, DRAM and HBM (flat
 * mode), the HBM one numbered first: a GPU's node is the DRAM one and its
 * memory is bound there (every GPU had NUMA -1 and memory unbound). */
static void test_hbm_flat(void) {
  aff_topo_t *t = load("hbm-flat-2s.xml", NULL);
  aff_plan_t *p;
  ASSERT_EQ(4, aff_topo_nnuma(t));
  ASSERT_EQ(2, aff_topo_ngpus(t));
  ASSERT_EQ(1, aff_topo_gpu(t, 0)->numa);
  ASSERT_EQ(3, aff_topo_gpu(t, 1)->numa);
  ASSERT_EQ(1, aff_topo_nic(t, 0)->numa);
  p = plan(t, "numa", "local", 2);
  ASSERT_STR_EQ("1", aff_plan_rank(p, 0)->numa_str);
  ASSERT_STR_EQ("0-15", cpus_of(p, 0));
  ASSERT_STR_EQ("3", aff_plan_rank(p, 1)->numa_str);
  ASSERT_STR_EQ("16-31", cpus_of(p, 1));
  ASSERT(aff_plan_rank(p, 1)->mem_policy != 0);
  ASSERT(!has_warning(NULL, p, "NUMA node is unknown"));
  aff_plan_free(p);
  aff_topo_free(t);
}

/* A node this process may not put memory on (a cgroup cpuset's mems):
 * its ranks' memory is left unbound at plan time, with a warning, rather
 * than refused by the kernel in every worker; their CPUs are still bound. */
static void test_mems(void) {
  aff_topo_t *t = load("v100-pcie-2s.xml", NULL);
  aff_plan_t *p;
  t->mems_known = 1;
  memset(t->mems, 0, sizeof(t->mems));
  t->mems[0] = 1ul; /* node 0 only */
  p = plan(t, "numa", "local", 8);
  ASSERT(aff_plan_rank(p, 0)->mem_policy != 0);
  ASSERT_EQ(0, aff_plan_rank(p, 4)->mem_policy);
  ASSERT(aff_plan_rank(p, 4)->bind_cpus);
  ASSERT_STR_EQ("1", aff_plan_rank(p, 4)->numa_str);
  ASSERT(has_warning(NULL, p, "local rank 4: NUMA node 1 is not one this "
                              "process may use memory of"));
  aff_plan_free(p);
  aff_topo_free(t);
}

static void test_bad_files(void) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  char err[512] = "", path[512];
  FILE *f;
  o.xml = "/nonexistent/topo.xml";
  ASSERT_EQ(-ENOENT, aff_topo_load(&o, &t, err, sizeof(err)));
  ASSERT_CONTAINS(err, "/nonexistent/topo.xml");
  snprintf(path, sizeof(path), "%s/garbage.xml", test_tmpdir());
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs("<topology version=\"2.0\"><object type=\"Nonsense\"", f);
  fclose(f);
  o.xml = path;
  ASSERT_EQ(RDZV_EINVAL, aff_topo_load(&o, &t, err, sizeof(err)));
  ASSERT_CONTAINS(err, "lstopo");
  ASSERT(t == NULL);
}

/* This machine: discovery works, the export loads back as the same box. */
static void test_live_export(void) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL, *back = NULL;
  char err[512] = "", path[512];
  ASSERT_EQ(0, aff_topo_load(&o, &t, err, sizeof(err)));
  ASSERT(aff_topo_ncpus(t) >= 1);
  snprintf(path, sizeof(path), "%s/export.xml", test_tmpdir());
  ASSERT_EQ(0, aff_topo_export_xml(t, path, err, sizeof(err)));
  o.xml = path;
  ASSERT_EQ(0, aff_topo_load(&o, &back, err, sizeof(err)));
  ASSERT_EQ(aff_topo_ncpus(t), aff_topo_ncpus(back));
  ASSERT_EQ(aff_topo_nnuma(t), aff_topo_nnuma(back));
  ASSERT_EQ(aff_topo_ngpus(t), aff_topo_ngpus(back));
  ASSERT_EQ(aff_topo_nnics(t), aff_topo_nnics(back));
  ASSERT_STR_EQ(aff_topo_hostname(t), aff_topo_hostname(back));
  aff_topo_free(back);
  aff_topo_free(t);
}

int main(void) {
  int fds = test_fd_count();
  test_v100();
  test_dgx();
  test_visible_devices();
  test_degrade();
  test_h200();
  test_h200_x2();
  test_every_xml();
  test_down_hca();
  test_hbm_flat();
  test_mems();
  test_bad_files();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  /* Discovering this machine may load NVML and the CUDA runtime, which keep
   * the driver's device files open once loaded; a second discovery must not
   * open more. */
  test_live_export();
  fds = test_fd_count();
  test_live_export();
  ASSERT_EQ(fds, test_fd_count());
  return 0;
}
