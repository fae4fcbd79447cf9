/* test_env_lint.c - the NCCL lint on the seeds' own files and the common
 * mistakes, against node descriptions (the V100 + ConnectX box of seed
 * 000, a DGX, a RoCE node), and silence on the built-in profiles where
 * they belong. Also env_node_probe() on a fake sysfs. */
#include <sys/stat.h>

#include "env.h"
#include "test.h"

static void node_init(env_node_t *n, int nvlink) {
  memset(n, 0, sizeof(*n));
  n->probed = 1;
  n->has_nvlink = nvlink;
  n->nccl_version = 22809;
}

static void add_netdev(env_node_t *n, const char *name) {
  lu_strlcpy(n->netdevs[n->nnetdevs++], name, sizeof(n->netdevs[0]));
}

static void add_hca(env_node_t *n, const char *name, int state,
                    const char *ll) {
  env_hca_t *h = &n->hcas[n->nhcas++];
  memset(h, 0, sizeof(*h));
  lu_strlcpy(h->name, name, sizeof(h->name));
  h->nports = 1;
  h->state[0] = state;
  lu_strlcpy(h->link_layer[0], ll, sizeof(h->link_layer[0]));
}

/* Seed 000's V100 box: mlx5_0 (IB) with ib0, eno1. */
static void v100_node(env_node_t *n) {
  node_init(n, 0);
  add_netdev(n, "eno1");
  add_netdev(n, "ib0");
  add_netdev(n, "lo");
  add_hca(n, "mlx5_0", 4, "InfiniBand");
}

static env_finding_t *F;
static int NF;

static void lint_text(const char *text, const char **launch,
                      const env_node_t *node) {
  prof_t *p = NULL;
  env_t *e = NULL;
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  char err[256];
  free(F);
  F = NULL;
  if (prof_parse(text, strlen(text), "nccl.sh", &p, err, sizeof(err)) != 0)
    TEST_FAIL("%s", err);
  o.profile = p;
  o.launch = launch;
  ASSERT_EQ(0, env_build_rank(&o, &e));
  ASSERT_EQ(0, env_lint(e, node, &F, &NF));
  env_free(e);
  prof_free(p);
}

static const env_finding_t *find(const char *rule, const char *var) {
  for (int i = 0; i < NF; i++)
    if (strcmp(F[i].rule, rule) == 0 && (var == NULL || strcmp(F[i].var, var) == 0))
      return &F[i];
  return NULL;
}

static const env_finding_t *must(const char *rule, const char *var,
                                 env_sev_t sev) {
  const env_finding_t *f = find(rule, var);
  if (f == NULL) {
    for (int i = 0; i < NF; i++)
      fprintf(stderr, "  have %s %s %s\n", env_sev_name(F[i].sev), F[i].rule,
              F[i].var);
    TEST_FAIL("no finding %s for %s", rule, var ? var : "-");
  }
  ASSERT_EQ(sev, f->sev);
  ASSERT(f->why[0] != '\0');
  ASSERT(f->fix[0] != '\0');
  return f;
}

static int count_at_least(env_sev_t sev) {
  int n = 0;
  for (int i = 0; i < NF; i++)
    n += F[i].sev >= sev;
  return n;
}

/* Seed 000 §4.2 as written, before its corrections. */
static const char seed000[] =
    "export NCCL_IB_DISABLE=0\n"
    "export NCCL_SOCKET_IFNAME=ib0\n"
    "export NCCL_IB_HCA=mlx5_0\n"
    "export NCCL_IB_GID_INDEX=3\n"
    "export NCCL_P2P_DISABLE=1\n"
    "export NCCL_P2P_LEVEL=PIX\n"
    "export NCCL_ALGO=Tree\n"
    "export NCCL_PROTO=Simple\n"
    "export NCCL_BUFFSIZE=16777216\n"
    "export NCCL_MIN_NCHANNELS=16\n"
    "export NCCL_MAX_NCHANNELS=32\n"
    "export NCCL_NET_GDR_LEVEL=2      # SYS 级即可，不要强设 3/5 防回退\n"
    "export NCCL_SOCKET_TIMEOUT=6000\n"
    "export NCCL_ASYNC_ERROR_HANDLING=1\n"
    "export NCCL_DEBUG=INFO\n"
    "export NCCL_DEBUG_SUBSYS=INIT,NET\n";

static void test_seed000(void) {
  env_node_t *n = malloc(sizeof(*n));
  const env_finding_t *f;
  v100_node(n);
  lint_text(seed000, NULL, n);
  f = must("gid-on-ib", "NCCL_IB_GID_INDEX", ENV_SEV_WARN);
  ASSERT_STR_EQ(f->value, "3");
  ASSERT_STR_EQ(f->where, "profile nccl.sh line 4");
  must("debug-info", "NCCL_DEBUG", ENV_SEV_WARN);
  f = must("async-error-handling", "NCCL_ASYNC_ERROR_HANDLING", ENV_SEV_WARN);
  ASSERT_CONTAINS(f->fix, "TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
  f = must("unknown-var", "NCCL_SOCKET_TIMEOUT", ENV_SEV_WARN);
  ASSERT_CONTAINS(f->why, "NCCL does not read NCCL_SOCKET_TIMEOUT");
  f = must("numeric-level", "NCCL_NET_GDR_LEVEL", ENV_SEV_INFO);
  ASSERT_CONTAINS(f->why, "2 means PXB");
  must("p2p-level-moot", "NCCL_P2P_LEVEL", ENV_SEV_INFO);
  /* mlx5_0 and ib0 exist here: no false alarm */
  ASSERT(find("hca-missing", NULL) == NULL);
  ASSERT(find("ifname-missing", NULL) == NULL);
  ASSERT(find("p2p-nvlink", NULL) == NULL); /* PCIe box: P2P off is the point */
  ASSERT_EQ(0, count_at_least(ENV_SEV_ERROR));

  /* the same file on a node where the card is mlx5_1 and the port down */
  node_init(n, 0);
  add_netdev(n, "eth0");
  add_hca(n, "mlx5_1", 1, "InfiniBand");
  lint_text(seed000, NULL, n);
  f = must("hca-missing", "NCCL_IB_HCA", ENV_SEV_ERROR);
  ASSERT_CONTAINS(f->fix, "mlx5_1");
  f = must("ifname-missing", "NCCL_SOCKET_IFNAME", ENV_SEV_ERROR);
  ASSERT_CONTAINS(f->fix, "eth0");
  free(n);
}

/* The corrected profile on the same box: nothing above info. */
static void test_pcie_ib_clean(void) {
  env_node_t *n = malloc(sizeof(*n));
  const char *launch[] = {"LAUNCH_HCA=mlx5_0", "LAUNCH_HCA_PORT=1",
                          "LAUNCH_NETDEV=ib0", "LAUNCH_HCAS=mlx5_0", NULL};
  v100_node(n);
  lint_text(prof_builtin_text("pcie-ib"), launch, n);
  for (int i = 0; i < NF; i++)
    if (F[i].sev > ENV_SEV_INFO)
      TEST_FAIL("pcie-ib on its box: %s %s: %s", F[i].rule, F[i].var, F[i].why);
  /* the builtin nvlink-ib profile on a DGX-like node */
  node_init(n, 1);
  add_netdev(n, "ibp12s0");
  add_hca(n, "mlx5_0", 4, "InfiniBand");
  add_hca(n, "mlx5_1", 4, "InfiniBand");
  {
    const char *l2[] = {"LAUNCH_HCA=mlx5_0", "LAUNCH_HCAS=mlx5_0,mlx5_1", NULL};
    lint_text(prof_builtin_text("nvlink-ib"), l2, n);
  }
  ASSERT_EQ(0, count_at_least(ENV_SEV_WARN));
  /* roce on a RoCE node: GID index is right there */
  node_init(n, 0);
  add_netdev(n, "enp97s0f0");
  add_hca(n, "mlx5_4", 4, "Ethernet");
  {
    const char *l3[] = {"LAUNCH_HCA=mlx5_4", "LAUNCH_HCAS=mlx5_4",
                        "LAUNCH_NETDEV=enp97s0f0", NULL};
    lint_text(prof_builtin_text("roce"), l3, n);
  }
  ASSERT(find("gid-on-ib", NULL) == NULL);
  ASSERT_EQ(0, count_at_least(ENV_SEV_WARN));
  free(n);
}

/* Seed 001 §84's NCCL_SOCKET_IFNAME==ens1f0. */
static void test_double_eq(void) {
  env_node_t *n = malloc(sizeof(*n));
  const env_finding_t *f;
  node_init(n, -1);
  add_netdev(n, "ens1f0");
  add_netdev(n, "ens1f01"); /* a prefix match would catch this one too */
  /* '=' is NCCL's "exactly this interface": right, and not flagged */
  lint_text("export NCCL_SOCKET_IFNAME==ens1f0\n", NULL, n);
  ASSERT_EQ(0, NF);
  node_init(n, -1);
  add_netdev(n, "eth0");
  lint_text("NCCL_SOCKET_IFNAME==ens1f0\n", NULL, n);
  must("ifname-missing", "NCCL_SOCKET_IFNAME", ENV_SEV_ERROR);
  /* exclusions and prefixes */
  lint_text("NCCL_SOCKET_IFNAME=^docker,lo\n", NULL, n);
  ASSERT(find("ifname-missing", NULL) == NULL);
  lint_text("NCCL_SOCKET_IFNAME=eth\n", NULL, n);
  ASSERT(find("ifname-missing", NULL) == NULL);
  lint_text("NCCL_SOCKET_IFNAME==eth\n", NULL, n); /* exact: no eth */
  f = must("ifname-missing", "NCCL_SOCKET_IFNAME", ENV_SEV_ERROR);
  ASSERT_CONTAINS(f->fix, "drop the leading '='");
  /* without node facts, no existence claims */
  lint_text("NCCL_SOCKET_IFNAME=ens9\n", NULL, NULL);
  ASSERT(find("ifname-missing", NULL) == NULL);
  free(n);
}

static void test_p2p_and_ib(void) {
  env_node_t *n = malloc(sizeof(*n));
  node_init(n, 1);
  add_hca(n, "mlx5_0", 4, "InfiniBand");
  lint_text("NCCL_P2P_DISABLE=1\n", NULL, n);
  must("p2p-nvlink", "NCCL_P2P_DISABLE", ENV_SEV_WARN);
  lint_text("NCCL_P2P_LEVEL=LOC\n", NULL, n);
  must("p2p-nvlink", "NCCL_P2P_LEVEL", ENV_SEV_WARN);
  n->has_nvlink = 0;
  lint_text("NCCL_P2P_DISABLE=1\n", NULL, n);
  ASSERT(find("p2p-nvlink", NULL) == NULL);
  lint_text("NCCL_IB_DISABLE=1\n", NULL, n);
  must("ib-disabled", "NCCL_IB_DISABLE", ENV_SEV_WARN);
  lint_text("NCCL_IB_HCA=mlx5_0:2\n", NULL, n);
  must("hca-missing", "NCCL_IB_HCA", ENV_SEV_ERROR);
  n->hcas[0].state[0] = 1;
  lint_text("NCCL_IB_HCA=mlx5_0:1\n", NULL, n);
  must("hca-port-down", "NCCL_IB_HCA", ENV_SEV_WARN);
  lint_text("NCCL_IB_HCA=^mlx5_9\n", NULL, n);
  ASSERT(find("hca-missing", NULL) == NULL);
  /* GID on a node with RoCE among the selected HCAs is not flagged */
  add_hca(n, "mlx5_4", 4, "Ethernet");
  lint_text("NCCL_IB_GID_INDEX=3\nNCCL_IB_HCA=mlx5_4\n", NULL, n);
  ASSERT(find("gid-on-ib", NULL) == NULL);
  lint_text("NCCL_IB_GID_INDEX=3\nNCCL_IB_HCA==mlx5_0\n", NULL, n);
  must("gid-on-ib", "NCCL_IB_GID_INDEX", ENV_SEV_WARN);
  free(n);
}

static void test_names_and_values(void) {
  env_node_t *n = malloc(sizeof(*n));
  const env_finding_t *f;
  int first, last, is_int;
  node_init(n, -1);
  lint_text("NCCL_BUFFSIZE=16M\n", NULL, n);
  f = must("not-integer", "NCCL_BUFFSIZE", ENV_SEV_ERROR);
  ASSERT_CONTAINS(f->why, "ignores '16M'");
  lint_text("NCCL_BUFFSIZE=0x1000000\nNCCL_IB_TIMEOUT=22\n", NULL, n);
  ASSERT(find("not-integer", NULL) == NULL);
  lint_text("NCCL_IB_HCAS=mlx5_0\n", NULL, n);
  f = must("unknown-var", "NCCL_IB_HCAS", ENV_SEV_WARN);
  ASSERT_CONTAINS(f->fix, "did you mean NCCL_IB_HCA?");
  {
    /* NVIDIA's containers export NCCL_VERSION (a label, not read by NCCL):
     * inherited, it is no finding; written in a profile it still is. */
    env_rank_opts_t o = ENV_RANK_OPTS_INIT;
    char *base[] = {"NCCL_VERSION=2.28.3-1", NULL};
    env_t *e = NULL;
    o.base = base;
    ASSERT_EQ(0, env_build_rank(&o, &e));
    free(F);
    F = NULL;
    ASSERT_EQ(0, env_lint(e, n, &F, &NF));
    ASSERT(find("unknown-var", "NCCL_VERSION") == NULL);
    env_free(e);
    lint_text("NCCL_VERSION=2\n", NULL, n);
    must("unknown-var", "NCCL_VERSION", ENV_SEV_WARN);
  }
  lint_text("NCCL_IB_GDR_LEVEL=2\n", NULL, n);
  f = must("removed-var", "NCCL_IB_GDR_LEVEL", ENV_SEV_WARN);
  ASSERT_CONTAINS(f->why, "after 2.3.7");
  n->nccl_version = 21500; /* NVLS came with 2.17: the lock's own var is new */
  lint_text("NCCL_DEBUG=WARN\n", NULL, n);
  must("newer-var", "NCCL_NVLS_ENABLE", ENV_SEV_INFO);
  n->nccl_version = 22809;
  lint_text("NCCL_BLOCKING_WAIT=1\nTORCH_NCCL_ASYNC_ERROR_HANDLING=3\n"
            "NCCL_ASYNC_ERROR_HANDLING=1\n",
            NULL, n);
  must("torch-legacy-name", "NCCL_BLOCKING_WAIT", ENV_SEV_WARN);
  must("async-error-handling", "NCCL_ASYNC_ERROR_HANDLING", ENV_SEV_ERROR);
  lint_text("NCCL_DEBUG=WARN\nNCCL_DEBUG_SUBSYS=NET\n", NULL, n);
  must("debug-subsys-noop", "NCCL_DEBUG_SUBSYS", ENV_SEV_INFO);
  lint_text("NCCL_DEBUG=trace\n", NULL, n);
  must("debug-info", "NCCL_DEBUG", ENV_SEV_WARN);
  /* errors sort first */
  lint_text("NCCL_DEBUG=INFO\nNCCL_BUFFSIZE=x\n", NULL, n);
  ASSERT_EQ(ENV_SEV_ERROR, F[0].sev);
  ASSERT_EQ(1, env_nccl_var_info("NCCL_IB_HCA", &first, &last, &is_int));
  ASSERT_EQ(0, last);
  ASSERT_EQ(0, is_int);
  ASSERT_EQ(1, env_nccl_var_info("NCCL_BUFFSIZE", NULL, NULL, &is_int));
  ASSERT_EQ(1, is_int);
  ASSERT_EQ(0, env_nccl_var_info("NCCL_SOCKET_TIMEOUT", NULL, NULL, NULL));
  ASSERT_EQ(22809, env_nccl_ref_version());
  free(n);
}

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

static void test_probe(void) {
  env_node_t *n = malloc(sizeof(*n));
  const char *root = test_tmpdir();
  mkfile(root, "/sys/class/net/ib0/operstate", "up\n");
  mkfile(root, "/sys/class/net/eno1/operstate", "up\n");
  mkfile(root, "/sys/class/infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
  mkfile(root, "/sys/class/infiniband/mlx5_1/ports/1/link_layer", "InfiniBand\n");
  mkfile(root, "/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  mkfile(root, "/sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  mkfile(root, "/sys/class/infiniband/mlx5_0/ports/2/state", "4: ACTIVE\n");
  mkfile(root, "/sys/class/infiniband/mlx5_0/ports/2/link_layer", "Ethernet\n");
  ASSERT_EQ(0, env_node_probe(n, root));
  ASSERT_EQ(1, n->probed);
  ASSERT_EQ(2, n->nnetdevs);
  ASSERT_STR_EQ(n->netdevs[0], "eno1");
  ASSERT_EQ(2, n->nhcas);
  ASSERT_STR_EQ(n->hcas[0].name, "mlx5_0");
  ASSERT_EQ(2, n->hcas[0].nports);
  ASSERT_EQ(4, n->hcas[0].state[1]);
  ASSERT_STR_EQ(n->hcas[0].link_layer[1], "Ethernet");
  ASSERT_EQ(1, n->hcas[1].state[0]);
  ASSERT_EQ(-1, n->has_nvlink);
  /* the seed's file on this node: mlx5_0 is there, port 1 is IB */
  lint_text("NCCL_IB_HCA=mlx5_1\nNCCL_SOCKET_IFNAME=ib0\n", NULL, n);
  must("hca-port-down", "NCCL_IB_HCA", ENV_SEV_WARN);
  /* a node with more interfaces or RDMA devices than listed: a name not
   * listed is not called missing, nor the job refused */
  n->netdevs_incomplete = 1;
  n->hcas_incomplete = 1;
  lint_text("NCCL_IB_HCA=mlx5_9\nNCCL_SOCKET_IFNAME=eth0\n", NULL, n);
  ASSERT(find("ifname-missing", NULL) == NULL);
  ASSERT(find("hca-missing", NULL) == NULL);
  must("ifname-unchecked", "NCCL_SOCKET_IFNAME", ENV_SEV_INFO);
  n->netdevs_incomplete = 0;
  n->hcas_incomplete = 0;
  lint_text("NCCL_IB_HCA=mlx5_9\nNCCL_SOCKET_IFNAME=eth0\n", NULL, n);
  must("ifname-missing", "NCCL_SOCKET_IFNAME", ENV_SEV_ERROR);
  must("hca-missing", "NCCL_IB_HCA", ENV_SEV_ERROR);
  ASSERT_EQ(0, env_node_probe(n, "/nonexistent-root"));
  ASSERT_EQ(0, n->probed);
  free(n);
}

int main(void) {
  int fds = test_fd_count();
  test_seed000();
  test_pcie_ib_clean();
  test_double_eq();
  test_p2p_and_ib();
  test_names_and_values();
  test_probe();
  free(F);
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
