/* fuzz_profile.c - libFuzzer target for the NCCL profile parser and what
 * consumes a parsed profile: template expansion in the environment
 * builder, the lock, the lint. Any input must give 0 or a clean error,
 * never a crash, a leak or an out-of-bounds read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  prof_t *p = NULL;
  env_t *e = NULL;
  env_finding_t *f = NULL;
  env_node_t node;
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  const char *launch[] = {"LAUNCH_HCA=mlx5_0", "LAUNCH_HCA_PORT=1",
                          "LAUNCH_NETDEV=ib0", "LOCAL_RANK=0", NULL};
  char err[512];
  int nf = 0;
  if (prof_parse((const char *)data, size, "fuzz", &p, err, sizeof(err)) != 0) {
    /* a refusal must say something */
    if (err[0] == '\0')
      abort();
    return 0;
  }
  for (int i = 0; i < prof_count(p); i++)
    if (prof_find(p, prof_entry(p, i)->key) == NULL)
      abort();
  o.launch = launch;
  o.profile = p;
  if (env_build_rank(&o, &e) == 0) {
    memset(&node, 0, sizeof(node));
    node.probed = 1;
    node.nnetdevs = 1;
    strcpy(node.netdevs[0], "ib0");
    node.nhcas = 1;
    strcpy(node.hcas[0].name, "mlx5_0");
    node.hcas[0].nports = 1;
    node.hcas[0].state[0] = 4;
    strcpy(node.hcas[0].link_layer[0], "InfiniBand");
    node.has_nvlink = 1;
    if (env_lint(e, &node, &f, &nf) == 0)
      free(f);
    /* the lock holds whatever the profile says */
    if (strcmp(env_get(e, "NCCL_NVLS_ENABLE"), "0") != 0)
      abort();
    env_free(e);
  }
  prof_free(p);
  return 0;
}
