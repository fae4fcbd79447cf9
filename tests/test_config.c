/* test_config.c - the job's configuration: the command line beats launch's
 * variables, which beat torchrun's PET_*, which beat the schedulers' (Slurm,
 * Volcano); scheduler facts land in the configuration (node index, expected
 * hosts), bad values name their variable, abbreviations are refused with
 * the full name, and --help lists every flag the parser accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "lu.h"
#include "test.h"

/* Parse argv (NULL-terminated, without argv[0]) under env (NULL-terminated
 * "K=V"). RET cfg_parse's result; err holds its message. */
static int parse(cfg_t *c, const char *const *args, const char *const *env,
                 char *err, size_t n) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)"launch";
  for (int i = 0; args[i]; i++)
    argv[argc++] = (char *)args[i];
  argv[argc] = NULL;
  err[0] = '\0';
  return cfg_parse(argc, argv, (char *const *)env, CFG_NEED_PROGRAM, c, err, n);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
static const char *const no_env[] = {NULL};

static void test_precedence(void) {
  cfg_t c;
  char err[512];
  /* the command line beats the environment */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "h:1", "--nnodes", "2", "x"),
                     ENV("PET_NNODES=5", "PET_RDZV_ENDPOINT=other:2"), err,
                     sizeof(err)));
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_STR_EQ("h", c.endpoint_host);
  cfg_free(&c);
  /* PET_* stands for a missing flag; launch's own beats the schedulers' */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV("PET_NNODES=2:3", "PET_RDZV_ENDPOINT=h:7",
                         "LAUNCH_EXPECTED_HOSTS=n[1-3]",
                         "SLURM_JOB_NODELIST=s[1-4]", "SLURM_NODEID=2",
                         "VC_TASK_INDEX=1", "LAUNCH_HOSTNAME=me",
                         "PYTHON_EXEC=/opt/py", "TMPDIR=/scratch"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.min_nodes);
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(7, c.endpoint_port);
  ASSERT_EQ(CFG_BACKEND_C10D, c.backend);
  ASSERT_EQ(3, (int)c.nexpected);
  ASSERT_STR_EQ("n3", c.expected_hosts[2]);
  ASSERT_EQ(2, c.pref_node_rank); /* Slurm before Volcano */
  ASSERT_STR_EQ("me", c.host);
  ASSERT_STR_EQ("/opt/py", c.python);
  ASSERT_STR_EQ("/scratch", c.tmpdir);
  cfg_free(&c);
  /* Volcano alone; a node rank on the command line wins */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "h", "x"),
                     ENV("VC_TASK_INDEX=4", "SLURM_JOB_NODELIST=s[1-2]"), err,
                     sizeof(err)));
  ASSERT_EQ(4, c.pref_node_rank);
  ASSERT_EQ(2, (int)c.nexpected);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "h", "--node-rank", "1", "x"),
                     ENV("SLURM_NODEID=3"), err, sizeof(err)));
  ASSERT_EQ(1, c.pref_node_rank);
  cfg_free(&c);
  /* static rendezvous: the scheduler's index is no --node-rank */
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "x"), ENV("SLURM_NODEID=3"),
                     err, sizeof(err)));
  ASSERT_EQ(CFG_BACKEND_STATIC, c.backend);
  ASSERT_EQ(0, c.pref_node_rank);
  cfg_free(&c);
  /* defaults */
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"), no_env, err, sizeof(err)));
  ASSERT_STR_EQ("python3", c.python);
  ASSERT_STR_EQ("/tmp", c.tmpdir);
  ASSERT(c.host[0] != '\0');
  ASSERT_EQ(36, (int)strlen(c.run_id));
  ASSERT_EQ(1, c.nproc);
  ASSERT_STR_EQ("auto", c.nccl_profile);
  cfg_free(&c);
}

static void test_binding_defaults(void) {
  cfg_t c;
  char err[512];
  /* no visible GPU: nothing is bound */
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"),
                     ENV("CUDA_VISIBLE_DEVICES="), err, sizeof(err)));
  ASSERT_EQ(0, c.ngpus);
  ASSERT_STR_EQ("none", c.cpu_bind);
  ASSERT_STR_EQ("none", c.mem_bind);
  cfg_free(&c);
  /* a policy given stays; memory follows CPUs only where there are GPUs */
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "--cpu-bind", "cores", "x"),
                     ENV("CUDA_VISIBLE_DEVICES=-1"), err, sizeof(err)));
  ASSERT_STR_EQ("cores", c.cpu_bind);
  ASSERT_STR_EQ("none", c.mem_bind);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"), ENV("LAUNCH_CPU_BIND=0:1"),
                     err, sizeof(err)));
  ASSERT_STR_EQ("0:1", c.cpu_bind);
  cfg_free(&c);
  /* where this machine has GPUs, a visible one means NUMA binding */
  if (lu_gpu_count(NULL) > 0) {
    ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"),
                       ENV("CUDA_VISIBLE_DEVICES=0"), err, sizeof(err)));
    ASSERT_EQ(1, c.ngpus);
    ASSERT_STR_EQ("numa", c.cpu_bind);
    ASSERT_STR_EQ("preferred", c.mem_bind);
    cfg_free(&c);
  }
}

static void expect_error(const char *const *args, const char *const *env,
                         const char *frag) {
  cfg_t c;
  char err[512];
  int rc = parse(&c, args, env, err, sizeof(err));
  cfg_free(&c);
  if (rc != -1)
    TEST_FAIL("%s ...: rc %d, want -1", args[0], rc);
  ASSERT_CONTAINS(err, frag);
}

static void test_errors(void) {
  /* abbreviations: refused, naming the full option (argparse would accept) */
  expect_error(ARGS("--nproc", "2", "x"), no_env, "write --nproc-per-node");
  expect_error(ARGS("--rdzv_end=h", "x"), no_env, "write --rdzv-endpoint");
  expect_error(ARGS("--no", "x"), no_env, "--node-rank, --no-python");
  expect_error(ARGS("--bogus", "x"), no_env, "unknown option '--bogus'");
  /* an empty endpoint is no endpoint (it used to mean 127.0.0.1:29500) */
  expect_error(ARGS("--rdzv-endpoint", "", "x"), no_env,
               "--rdzv-endpoint is empty");
  /* variables that do not parse name themselves */
  expect_error(ARGS("x"), ENV("PET_MAX_RESTARTS=many"), "PET_MAX_RESTARTS");
  expect_error(ARGS("--rdzv-endpoint", "h", "x"), ENV("SLURM_NODEID=first"),
               "SLURM_NODEID=first");
  expect_error(ARGS("--rdzv-endpoint", "h", "x"),
               ENV("LAUNCH_EXPECTED_HOSTS=node[1-"), "LAUNCH_EXPECTED_HOSTS");
  expect_error(ARGS("x"), ENV("LAUNCH_TORCH_STORE=both"), "LAUNCH_TORCH_STORE");
  /* torchrun's etcd keys mean nothing here: said, not ignored */
  expect_error(ARGS("--rdzv-conf", "timeout=5", "--standalone", "x"), no_env,
               "no meaning here");
  expect_error(ARGS("--rdzv-conf", "read_timeout=0", "--standalone", "x"),
               no_env, "read_timeout");
  expect_error(ARGS("--monitor-interval", "0", "--standalone", "x"), no_env,
               "--monitor-interval");
  expect_error(ARGS("--start-method", "thread", "--standalone", "x"), no_env,
               "spawn, fork or forkserver");
  expect_error(ARGS("--nproc-per-node", "gpu", "--standalone", "x"),
               ENV("CUDA_VISIBLE_DEVICES="), "no GPU found");
}

static void test_conf_values(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-conf",
                              "read_timeout=2s,close_timeout=500ms,,"
                              "keep_alive_interval=1,is_host=false",
                              "--monitor-interval", "0.1", "--start-method",
                              "fork", "--rdzv-endpoint", "h", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(2000, c.read_timeout_ms);
  ASSERT_EQ(500, c.close_timeout_ms);
  ASSERT_EQ(1000, c.heartbeat_ms);
  ASSERT_EQ(0, c.is_host);
  cfg_free(&c);
}

/* Every flag the parser accepts is in --help, and the help's arity is the
 * parser's: "--flag VALUE" lines take a value. */
static void test_help(void) {
  char path[] = "/tmp/launch-help-XXXXXX", *text = NULL;
  int fd = mkstemp(path);
  FILE *f;
  static const char *const flags[] = {
      "--nnodes N|MIN:MAX", "--nproc-per-node N|gpu|cpu|auto", "--standalone",
      "--rdzv-endpoint HOST[:PORT]", "--rdzv-backend c10d|static",
      "--rdzv-id ID", "--rdzv-conf K=V", "--node-rank N", "--master-addr A",
      "--master-port P", "--local-addr A", "--max-restarts N",
      "--signals-to-handle LIST", "--stop-timeout SECONDS",
      "--exit-barrier-timeout SECONDS", "--monitor-interval SECONDS",
      "--start-method spawn|fork|forkserver", "--role NAME", "-m, --module",
      "--no-python", "--run-path", "--log-dir DIR", "-r, --redirects SPEC",
      "-t, --tee SPEC", "--local-ranks-filter LIST",
      "--log-line-prefix TEMPLATE", "--event-log-handler null", "-q, --quiet",
      "--torch-store agent|rank0", "--token-file F", "--tls-ca F", "--tls-cert F",
      "--tls-key F", "--tcpstore-allow LIST",
      "--cpu-bind none|numa|cores|LIST", "--numa-binding node|socket",
      "--mem-bind none|local|preferred", "--report-bindings",
      "--topology FILE.xml", "--nccl-profile NAME|FILE",
      "--allow-env-override", "--lint error|warn|off", "--allow-mismatch"};
  ASSERT(fd >= 0 && (f = fdopen(fd, "w")) != NULL);
  cfg_help(f, 0);
  fclose(f);
  ASSERT_EQ(0, lu_read_file(path, 1 << 20, &text, NULL));
  unlink(path);
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
    const char *lng = strstr(flags[i], "--");
    char opt[64], err[512];
    cfg_t c;
    ASSERT_CONTAINS(text, flags[i]);
    /* the parser agrees on whether it takes a value */
    snprintf(opt, sizeof(opt), "%.*s", (int)strcspn(lng, " "), lng);
    ASSERT_EQ(-1, parse(&c, ARGS(opt), no_env, err, sizeof(err)));
    cfg_free(&c);
    if (strchr(lng, ' ') != NULL)
      ASSERT_CONTAINS(err, "needs a value");
    else if (strstr(err, "needs a value"))
      TEST_FAIL("%s: a flag without value, but %s", opt, err);
  }
  /* per-rank CPU lists are separated by ':', as the parser wants */
  ASSERT_CONTAINS(text, "separated by ':'");
  ASSERT(strstr(text, "separated by ';'") == NULL);
  free(text);
}

int main(void) {
  test_precedence();
  test_binding_defaults();
  test_errors();
  test_conf_values();
  test_help();
  printf("test_config: ok\n");
  return 0;
}
