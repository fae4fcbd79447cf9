/* test_env_contract.c - the worker contract as one table (env/contract.h):
 * the writer (env_build_rank) and the reader (rdzv_env_parse) agree on
 * every row; the one rule for empty and malformed values; fallbacks. */
#include <string.h>

#include "contract.h"
#include "env.h"
#include "test.h"

/* Every row set to a value of its own: numbers 100 + row, strings "v<row>",
 * booleans alternating. Written, then read back field by field. */
static void every_row_round_trips(void) {
  env_contract_t k, got;
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  env_t *e = NULL;
  char **envp, strs[64][16], err[160];
  int row = 0;
  env_contract_init(&k);
#define SETV(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)                           \
  snprintf(strs[row], sizeof(strs[row]), "v%d", row);                          \
  SET_##TYPE(k.FIELD, row);                                                    \
  row++;
#define SET_INT(f, i) (f) = 100 + (i)
#define SET_I64(f, i) (f) = 100000000000LL + (i)
#define SET_STR(f, i) (f) = strs[i]
#define SET_BOOL(f, i) (f) = (i) % 2
  ENV_CONTRACT(SETV)
  ro.contract = &k;
  ASSERT_OK(env_build_rank(&ro, &e));
  ASSERT((envp = env_envp(e)) != NULL);
  ASSERT_OK(rdzv_env_parse(envp, &got, err, sizeof(err)));
  row = 0;
#define CHECK(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)                          \
  CHECK_##TYPE(k.FIELD, got.FIELD, #NAME);                                     \
  row++;
#define CHECK_INT(a, b, name)                                                  \
  if ((long long)(a) != (long long)(b))                                        \
  TEST_FAIL("%s: wrote %lld, read %lld", name, (long long)(a), (long long)(b))
#define CHECK_I64 CHECK_INT
#define CHECK_BOOL CHECK_INT
#define CHECK_STR(a, b, name)                                                  \
  if ((a) == NULL || (b) == NULL || strcmp(a, b) != 0)                         \
  TEST_FAIL("%s: wrote %s, read %s", name, (a) ? (a) : "(null)",              \
            (b) ? (b) : "(null)")
  ENV_CONTRACT(CHECK)
  ASSERT(row > 30);
  env_free(e); /* envp with it */
}

static void empty_malformed_and_fallbacks(void) {
  rdzv_env_t e;
  char err[160];
  /* empty is unset: the fallback is read */
  char *a[] = {"LAUNCH_ROUND=", "TORCHELASTIC_RESTART_COUNT=4",
               "TORCHELASTIC_RUN_ID=job7", "GROUP_RANK=", "LAUNCH_NODE_RANK=2",
               "RANK=", NULL};
  ASSERT_OK(rdzv_env_parse(a, &e, err, sizeof(err)));
  ASSERT_EQ(4, e.round);
  ASSERT_EQ(4, e.restart_count);
  ASSERT_STR_EQ("job7", e.rdzv_id);
  ASSERT_EQ(2, e.node_rank);
  ASSERT_EQ(-1, e.rank);
  ASSERT(e.endpoint == NULL);
  /* malformed: an error that names the variable; the field is unset, the
   * others are read */
  {
    char *b[] = {"RANK=3x", "WORLD_SIZE=4", "LAUNCH_ROUND=-1",
                 "TORCHELASTIC_USE_AGENT_STORE=maybe", "OMP_NUM_THREADS=4,2",
                 NULL};
    ASSERT_EQ(RDZV_EINVAL, rdzv_env_parse(b, &e, err, sizeof(err)));
    ASSERT_CONTAINS(err, "RANK='3x' is not a number");
    ASSERT_EQ(-1, e.rank);
    ASSERT_EQ(4, e.world_size);
    ASSERT_EQ(-1, e.round);
    ASSERT_EQ(-1, e.use_agent_store);
    ASSERT_STR_EQ("4,2", e.omp_num_threads); /* OpenMP's nested list */
  }
  {
    char *c[] = {"WORLD_SIZE=99999999999", "TORCHELASTIC_USE_AGENT_STORE=False",
                 NULL};
    ASSERT_EQ(RDZV_EINVAL, rdzv_env_parse(c, &e, err, sizeof(err)));
    ASSERT_CONTAINS(err, "WORLD_SIZE=");
    ASSERT_EQ(0, e.use_agent_store);
  }
}

/* KEEP rows keep the user's value; OWN rows remove an inherited value
 * when launch has none (a resume step of another job never leaks). */
static void write_rules(void) {
  env_contract_t k;
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  env_t *e = NULL;
  char *base[] = {"OMP_NUM_THREADS=8", "LAUNCH_RESUME_STEP=40",
                  "TORCHELASTIC_RUN_ID=old", NULL};
  env_contract_init(&k);
  k.omp_num_threads = "1";
  k.run_id = "new";
  ro.base = base;
  ro.contract = &k;
  ASSERT_OK(env_build_rank(&ro, &e));
  ASSERT_STR_EQ("8", env_find(e, "OMP_NUM_THREADS")->value);
  ASSERT(env_find(e, "LAUNCH_RESUME_STEP") == NULL);
  ASSERT_STR_EQ("new", env_find(e, "TORCHELASTIC_RUN_ID")->value);
  env_free(e);
}

/* The binding's rows are written as affinity/ gives them, empty included
 * (a node without HCA: LAUNCH_HCA= for the profile's ${LAUNCH_HCA:-...}),
 * and an empty value reads back as unset; with a profile and no name in
 * the contract, LAUNCH_NCCL_PROFILE is the profile's. */
static void binding_and_profile_rows(void) {
  env_contract_t k;
  rdzv_env_t got;
  env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
  env_t *e = NULL;
  prof_t *p = NULL;
  char err[160];
  env_contract_init(&k);
  k.cpus = "0-3";
  k.numa_node = "-1";
  k.hca = k.hca_port = k.hcas = k.netdev = "";
  ASSERT_OK(prof_load("socket", &p, err, sizeof(err)));
  ro.contract = &k;
  ro.profile = p;
  ASSERT_OK(env_build_rank(&ro, &e));
  ASSERT_STR_EQ("0-3", env_get(e, "LAUNCH_CPUS"));
  ASSERT_STR_EQ("-1", env_get(e, "LAUNCH_NUMA_NODE"));
  ASSERT_STR_EQ("", env_get(e, "LAUNCH_HCA"));
  ASSERT_STR_EQ("", env_get(e, "LAUNCH_HCA_PORT"));
  ASSERT(env_find(e, "LAUNCH_GPU_BUSID") == NULL); /* unset: not written */
  ASSERT_STR_EQ("socket", env_get(e, "LAUNCH_NCCL_PROFILE"));
  ASSERT_OK(rdzv_env_parse(env_envp(e), &got, err, sizeof(err)));
  ASSERT_STR_EQ("0-3", got.cpus);
  ASSERT(got.hca == NULL && got.hca_port == NULL);
  ASSERT_STR_EQ("socket", got.nccl_profile);
  env_free(e);
  prof_free(p);
}

int main(void) {
  binding_and_profile_rows();
  every_row_round_trips();
  empty_malformed_and_fallbacks();
  write_rules();
  return 0;
}
