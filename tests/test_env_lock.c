/* test_env_lock.c - the worker environment builder: the infrastructure lock
 * (NVLink multicast off, whatever asks otherwise), profile over inherited,
 * --allow-env-override, launcher values untouched, templates per rank, and
 * every change logged. */
#include "env.h"
#include "test.h"

static const char *const LOCK[][2] = {
    {"NCCL_NVLS_ENABLE", "0"},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
    {"NVSHMEM_DISABLE_NVLS", "1"},
};

static FILE *logf_;
static lu_log_t logger;

static void log_start(void) {
  char path[512];
  snprintf(path, sizeof(path), "%s/log", test_tmpdir());
  logf_ = fopen(path, "w+");
  ASSERT(logf_ != NULL);
  lu_log_init(&logger, "agent");
  logger.level = LU_LOG_INFO;
  logger.out = logf_;
}

static char *log_text(void) {
  static char buf[16384];
  size_t n;
  fflush(logf_);
  rewind(logf_);
  n = fread(buf, 1, sizeof(buf) - 1, logf_);
  buf[n] = '\0';
  fclose(logf_);
  logf_ = NULL;
  return buf;
}

static prof_t *profile(const char *text) {
  prof_t *p = NULL;
  char err[256];
  if (prof_parse(text, strlen(text), "site", &p, err, sizeof(err)) != 0)
    TEST_FAIL("%s", err);
  return p;
}

static void assert_locked(env_t *e) {
  char **envp = env_envp(e);
  ASSERT(envp != NULL);
  for (size_t i = 0; i < LU_ARRAY_SIZE(LOCK); i++) {
    char want[128];
    int seen = 0;
    ASSERT_STR_EQ(env_get(e, LOCK[i][0]), LOCK[i][1]);
    ASSERT_EQ(ENV_SRC_LOCK, env_find(e, LOCK[i][0])->src);
    snprintf(want, sizeof(want), "%s=", LOCK[i][0]);
    for (char **p = envp; *p; p++)
      if (strncmp(*p, want, strlen(want)) == 0) {
        seen++;
        ASSERT_STR_EQ(*p + strlen(want), LOCK[i][1]);
      }
    ASSERT_EQ(1, seen); /* exactly once in what execve gets */
  }
}

static env_t *build(char **base, const char **launch, const prof_t *p,
                    int allow, lu_log_t *log) {
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  env_t *e = NULL;
  o.base = base;
  o.launch = launch;
  o.profile = p;
  o.allow_override = allow;
  o.log = log;
  ASSERT_EQ(0, env_build_rank(&o, &e));
  return e;
}

static void test_always_set(void) {
  env_t *e = build(NULL, NULL, NULL, 0, NULL);
  assert_locked(e);
  ASSERT_EQ(3, env_count(e));
  ASSERT_EQ(0, env_nnotes(e));
  env_free(e);
  ASSERT_EQ(3, env_locked_count());
  for (int i = 0; i < env_locked_count(); i++) {
    ASSERT_STR_EQ(env_locked_key(i), LOCK[i][0]);
    ASSERT_STR_EQ(env_locked_value(i), LOCK[i][1]);
  }
}

/* Nothing turns multicast on: not the inherited environment (even with
 * --allow-env-override), not a profile, not the launcher. */
static void test_nothing_turns_it_on(void) {
  char *base[] = {"NCCL_NVLS_ENABLE=1", "TORCH_SYMM_MEM_DISABLE_MULTICAST=0",
                  "NVSHMEM_DISABLE_NVLS=0", "HOME=/root", NULL};
  const char *launch[] = {"NCCL_NVLS_ENABLE=2", NULL};
  prof_t *p = profile("NCCL_NVLS_ENABLE=1\nNVSHMEM_DISABLE_NVLS=false\n"
                      "TORCH_SYMM_MEM_DISABLE_MULTICAST=0\nNCCL_DEBUG=WARN\n");
  env_t *e;
  char *log;
  env_finding_t *f = NULL;
  int nf = 0, locked_findings = 0;
  log_start();
  e = build(base, launch, p, 1, &logger);
  assert_locked(e);
  ASSERT_STR_EQ(env_get(e, "HOME"), "/root");
  ASSERT_STR_EQ(env_get(e, "NCCL_DEBUG"), "WARN");
  /* three refused in the profile, three overridden at the lock */
  ASSERT_EQ(6, env_nnotes(e));
  log = log_text();
  ASSERT_CONTAINS(log, "profile site line 1: NCCL_NVLS_ENABLE=1 refused");
  ASSERT_CONTAINS(log, "NVSHMEM_DISABLE_NVLS=false refused");
  ASSERT_CONTAINS(log, "NCCL_NVLS_ENABLE=2 (launcher) overridden to 0");
  ASSERT_CONTAINS(log, "TORCH_SYMM_MEM_DISABLE_MULTICAST=0 (inherited) overridden to 1");
  ASSERT_CONTAINS(log, "can take shared GPUs down");
  /* and the lint says so, naming where each came from */
  ASSERT_EQ(0, env_lint(e, NULL, &f, &nf));
  for (int i = 0; i < nf; i++)
    if (strcmp(f[i].rule, "locked") == 0) {
      locked_findings++;
      ASSERT(f[i].where[0] != '\0');
      ASSERT_CONTAINS(f[i].fix, "remove ");
    }
  ASSERT_EQ(6, locked_findings);
  free(f);
  env_free(e);
  prof_free(p);

  /* the locked values themselves in a profile are fine and silent */
  p = profile("NCCL_NVLS_ENABLE=0\n");
  e = build(NULL, NULL, p, 0, NULL);
  ASSERT_EQ(0, env_nnotes(e));
  assert_locked(e);
  env_free(e);
  prof_free(p);
}

/* An NCCL_ALGO that needs NVLS cannot run with NVLS off: it goes. */
static void test_nvls_algo(void) {
  char *base[] = {"NCCL_ALGO=NVLS,Ring", NULL};
  prof_t *p = profile("NCCL_ALGO=NVLSTree\n");
  env_t *e = build(base, NULL, NULL, 0, NULL);
  ASSERT(env_get(e, "NCCL_ALGO") == NULL);
  ASSERT_EQ(1, env_nnotes(e));
  ASSERT_STR_EQ(env_note(e, 0)->value, "NVLS,Ring");
  env_free(e);
  e = build(base, NULL, p, 0, NULL);
  /* the profile's is refused, the inherited one dropped */
  ASSERT(env_get(e, "NCCL_ALGO") == NULL);
  ASSERT_EQ(2, env_nnotes(e));
  env_free(e);
  prof_free(p);
  p = profile("NCCL_ALGO=^NVLS\n"); /* an exclusion is what we want */
  e = build(base, NULL, p, 0, NULL);
  ASSERT_STR_EQ(env_get(e, "NCCL_ALGO"), "^NVLS");
  env_free(e);
  prof_free(p);
}

/* The profile wins over inherited values unless overriding is asked for,
 * and every change is logged. */
static void test_profile_vs_inherited(void) {
  char *base[] = {"NCCL_DEBUG=INFO", "NCCL_IB_HCA=mlx5_9", "PATH=/bin", NULL};
  const char *launch[] = {"LOCAL_RANK=3", "LAUNCH_HCA=mlx5_3",
                          "LAUNCH_HCA_PORT=1", NULL};
  prof_t *p = profile("NCCL_DEBUG=WARN\nNCCL_IB_HCA==${LAUNCH_HCA}:${LAUNCH_HCA_PORT}\n"
                      "NCCL_IB_DISABLE=0\nLOCAL_RANK=0\n");
  env_t *e;
  char *log;
  log_start();
  e = build(base, launch, p, 0, &logger);
  /* a debug variable is the user's: the inherited value wins, said in its
   * origin (the lint warns) */
  ASSERT_STR_EQ(env_get(e, "NCCL_DEBUG"), "INFO");
  ASSERT_CONTAINS(env_find(e, "NCCL_DEBUG")->origin,
                  "kept over the profile's NCCL_DEBUG=WARN");
  ASSERT_STR_EQ(env_get(e, "NCCL_IB_HCA"), "=mlx5_3:1");
  ASSERT_STR_EQ(env_find(e, "NCCL_IB_HCA")->tmpl, "=${LAUNCH_HCA}:${LAUNCH_HCA_PORT}");
  ASSERT_STR_EQ(env_find(e, "NCCL_IB_HCA")->origin, "profile site line 2");
  ASSERT_STR_EQ(env_get(e, "LOCAL_RANK"), "3"); /* the launcher's stays */
  ASSERT_STR_EQ(env_get(e, "LAUNCH_NCCL_PROFILE"), "site");
  ASSERT_STR_EQ(env_get(e, "PATH"), "/bin");
  log = log_text();
  ASSERT_CONTAINS(log, "NCCL_IB_HCA==mlx5_3:1 replaces the inherited value mlx5_9");
  ASSERT_CONTAINS(log, "launch sets LOCAL_RANK itself");
  env_free(e);

  log_start();
  e = build(base, launch, p, 1, &logger);
  ASSERT_STR_EQ(env_get(e, "NCCL_DEBUG"), "INFO");
  ASSERT_STR_EQ(env_get(e, "NCCL_IB_HCA"), "mlx5_9");
  ASSERT_STR_EQ(env_get(e, "NCCL_IB_DISABLE"), "0"); /* nothing inherited */
  log = log_text();
  ASSERT_CONTAINS(log, "kept the inherited NCCL_IB_HCA=mlx5_9 over the "
                       "profile's =mlx5_3:1 (--allow-env-override)");
  assert_locked(e);
  env_free(e);
  prof_free(p);
}

/* A template with nothing to fill it: the line is skipped, said, and an
 * inherited value stays. */
static void test_empty_template(void) {
  const char *launch[] = {"LAUNCH_HCA=", "LAUNCH_NETDEV=eth0", NULL};
  prof_t *p = profile("NCCL_IB_HCA=${LAUNCH_HCA}\n"
                      "NCCL_SOCKET_IFNAME=${LAUNCH_NETDEV}\n");
  env_t *e = build(NULL, launch, p, 0, NULL);
  ASSERT(env_get(e, "NCCL_IB_HCA") == NULL);
  ASSERT_STR_EQ(env_get(e, "NCCL_SOCKET_IFNAME"), "eth0");
  ASSERT_EQ(1, env_nnotes(e));
  ASSERT_CONTAINS(env_note(e, 0)->reason, "${LAUNCH_HCA} is empty");
  env_free(e);
  prof_free(p);
}

static void test_env_basics(void) {
  env_t *e;
  char *bad[] = {"BASH_FUNC_module%%=() { :; }", "NOEQUALS", "=x", NULL};
  const char *badlaunch[] = {"1X=2", NULL};
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  ASSERT_EQ(0, env_new(&e));
  /* Lmod's exported functions survive; garbage is skipped */
  ASSERT_EQ(0, env_import(e, bad, ENV_SRC_INHERITED));
  ASSERT_STR_EQ(env_get(e, "BASH_FUNC_module%%"), "() { :; }");
  ASSERT_EQ(1, env_count(e));
  ASSERT_EQ(RDZV_EINVAL, env_set(e, "A=B", "x", ENV_SRC_LAUNCH, NULL));
  ASSERT_EQ(0, env_set(e, "B", "1", ENV_SRC_LAUNCH, NULL));
  ASSERT_EQ(0, env_set(e, "A", "2", ENV_SRC_LAUNCH, NULL));
  ASSERT_STR_EQ(env_at(e, 0)->key, "A"); /* sorted */
  ASSERT_EQ(1, env_unset(e, "A"));
  ASSERT_EQ(0, env_unset(e, "A"));
  ASSERT_EQ(2, env_count(e));
  env_free(e);
  env_free(NULL);
  o.launch = badlaunch;
  e = (env_t *)1;
  ASSERT_EQ(RDZV_EINVAL, env_build_rank(&o, &e));
  ASSERT(e == NULL);
}

int main(void) {
  int fds = test_fd_count();
  test_always_set();
  test_nothing_turns_it_on();
  test_nvls_algo();
  test_profile_vs_inherited();
  test_empty_template();
  test_env_basics();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
