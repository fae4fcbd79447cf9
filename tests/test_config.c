/* test_config.c - the job's configuration: the command line beats launch's
 * variables, which beat torchrun's PET_*, which beat the schedulers'
 * (Kubeflow, Slurm, Volcano); each scheduler's facts land in the
 * configuration (nodes, node index, run id, endpoint and who hosts it,
 * expected hosts, the task's place for --from-tasks), bad values name
 * their variable, abbreviations are refused with the full name, and --help
 * lists every flag the parser accepts. docs/schedulers.md. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "launch.h"
#include "lu.h"
#include "test.h"

/* Parse argv (NULL-terminated, without argv[0]) under env (NULL-terminated
 * "K=V"). RET cfg_parse's result; err holds its message. */
static int parse(cfg_t *c, const char *const *args, const char *const *env,
                 char *err, size_t n) {
  /* cfg_parse keeps pointers into argv (prog_argv), as into main's: this
   * one lives until the next parse. */
  static char *argv[64];
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
                         "LAUNCH_EXPECTED_HOSTS=n[1-3]", "SLURM_STEP_ID=0",
                         "SLURM_JOB_NODELIST=s[1-4]", "SLURM_NODEID=2",
                         "SLURMD_NODENAME=s3", "SLURM_NNODES=4",
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
                     ENV("VC_TASK_INDEX=4", "LAUNCH_VOLCANO_ROOT=/nonexistent",
                         "SLURM_JOB_NODELIST=s[1-2]"), err, sizeof(err)));
  ASSERT_EQ(4, c.pref_node_rank);
  ASSERT_EQ(0, (int)c.nexpected); /* no step: Slurm's list is not this job's */
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "h", "--node-rank", "1", "x"),
                     ENV("SLURM_STEP_ID=0", "SLURM_NODEID=3"), err,
                     sizeof(err)));
  ASSERT_EQ(1, c.pref_node_rank);
  cfg_free(&c);
  /* static rendezvous: the scheduler's index stands for --node-rank, else
   * every node would be node 0 */
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "--master-addr", "m", "x"),
                     ENV("SLURM_STEP_ID=0", "SLURM_NODEID=3"), err,
                     sizeof(err)));
  ASSERT_EQ(CFG_BACKEND_STATIC, c.backend);
  ASSERT_EQ(3, c.node_rank);
  ASSERT_EQ(3, c.pref_node_rank);
  ASSERT_STR_EQ("m", c.endpoint_host);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "x"), ENV("SLURM_NODEID=3"),
                     err, sizeof(err)));
  ASSERT_EQ(0, c.node_rank); /* outside a step SLURM_NODEID says nothing */
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
  if (aff_gpu_count(NULL, NULL) > 0) {
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
  /* abbreviations: as argparse, a prefix naming one option is that option;
   * an ambiguous one is refused, naming the candidates */
  {
    cfg_t c;
    char err[512];
    ASSERT_EQ(0, parse(&c, ARGS("--nproc", "2", "--rdzv_end=h:5", "x"), no_env,
                       err, sizeof(err)));
    ASSERT_EQ(2, c.nproc);
    ASSERT_STR_EQ("h", c.endpoint_host);
    ASSERT_EQ(5, c.endpoint_port);
    cfg_free(&c);
  }
  expect_error(ARGS("--no", "x"), no_env, "--node-rank, --no-restart-exit-codes, --no-python");
  expect_error(ARGS("--no", "x"), no_env, "is ambiguous");
  expect_error(ARGS("--exit-code", "bash", "x"), no_env, "launch or torchrun");
  expect_error(ARGS("--torch-version", "two", "x"), no_env, "1.13");
  expect_error(ARGS("--bogus", "x"), no_env, "unknown option '--bogus'");
  /* an empty endpoint is no endpoint (it used to mean 127.0.0.1:29500) */
  expect_error(ARGS("--rdzv-endpoint", "", "x"), no_env,
               "--rdzv-endpoint is empty");
  /* variables that do not parse name themselves */
  expect_error(ARGS("x"), ENV("PET_MAX_RESTARTS=many"), "PET_MAX_RESTARTS");
  expect_error(ARGS("--rdzv-endpoint", "h", "x"),
               ENV("SLURM_STEP_ID=0", "SLURM_NODEID=first"),
               "SLURM_NODEID=first");
  expect_error(ARGS("--rdzv-endpoint", "h", "x"),
               ENV("LAUNCH_EXPECTED_HOSTS=node[1-"), "LAUNCH_EXPECTED_HOSTS");
  expect_error(ARGS("x"), ENV("LAUNCH_TORCH_STORE=both"), "LAUNCH_TORCH_STORE");
  /* the checks made once the configuration is known name the variable a
   * value came from, not a flag the user did not give */
  expect_error(ARGS("--standalone", "x"), ENV("PET_NNODES=2"),
               "--standalone runs one node: drop --nnodes 2 (from PET_NNODES)");
  expect_error(ARGS("x"), ENV("PET_STANDALONE=1", "PET_NNODES=1:3"),
               "--standalone (from PET_STANDALONE) runs one node: drop "
               "--nnodes 1:3 (from PET_NNODES)");
  expect_error(ARGS("x"), ENV("PET_NODE_RANK=5", "PET_NNODES=2"),
               "--node-rank 5 (from PET_NODE_RANK) is not below --nnodes 2 "
               "(from PET_NNODES)");
  expect_error(ARGS("--node-rank", "5", "x"), ENV("PET_NNODES=2"),
               "--node-rank 5 is not below --nnodes 2 (from PET_NNODES)");
  expect_error(ARGS("--nnodes", "2", "--rdzv-conf", "rank=2", "x"), no_env,
               "--rdzv-conf rank=2 is not below --nnodes 2");
  expect_error(ARGS("x"), ENV("PET_NNODES=1:2"),
               "--nnodes 1:2 (from PET_NNODES): static rendezvous");
  expect_error(ARGS("--nnodes", "2", "x"),
               ENV("SLURM_STEP_ID=0", "SLURM_NODEID=3"),
               "node index 3 (from SLURM_NODEID) is not below --nnodes 2:");
  expect_error(ARGS("x"), ENV("PET_RDZV_BACKEND=c10d"),
               "--rdzv-backend c10d (from PET_RDZV_BACKEND) needs");
  expect_error(ARGS("--rdzv-conf", "read_timeout=0", "--standalone", "x"),
               no_env, "read_timeout");
  expect_error(ARGS("--monitor-interval", "soon", "--standalone", "x"), no_env,
               "--monitor-interval");
  expect_error(ARGS("--rdzv-conf", "rank=first", "x"), no_env,
               "not a node rank");
  expect_error(ARGS("--start-method", "thread", "--standalone", "x"), no_env,
               "spawn, fork or forkserver");
  expect_error(ARGS("--nproc-per-node", "gpu", "--standalone", "x"),
               ENV("CUDA_VISIBLE_DEVICES="), "no GPU found");
  /* a PyTorchJob's nprocPerNode: gpu names the variable the user set */
  expect_error(ARGS("--standalone", "x"),
               ENV("CUDA_VISIBLE_DEVICES=", "PET_NPROC_PER_NODE=gpu"),
               "--nproc-per-node gpu (from PET_NPROC_PER_NODE): no GPU found");
}

/* torchrun's command lines run unchanged (issue #27): the c10d and static
 * backends' keys and --monitor-interval are accepted; those with a meaning
 * here are mapped, the others give one note each. */
static void test_torchrun_keys(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "2", "--rdzv-conf",
                              "timeout=30,heartbeat_timeout=12,"
                              "keep_alive_max_attempt=4,rank=1",
                              "--monitor-interval", "0.1", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(30000, c.static_wait_ms);
  ASSERT_EQ(4000, c.heartbeat_ms); /* dropped after 3 silent heartbeats */
  ASSERT_EQ(1, c.node_rank);       /* static: rank is --node-rank */
  ASSERT(strstr(c.notes, "keep_alive_max_attempt") != NULL);
  ASSERT(strstr(c.notes, "--monitor-interval 0.1 has no effect") != NULL);
  cfg_free(&c);
  /* heartbeat given wins over heartbeat_timeout; the static wait is 900 s
   * as torchrun's */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-conf", "heartbeat=2,heartbeat_timeout=30",
                              "--node-rank", "0", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(2000, c.heartbeat_ms);
  ASSERT_EQ(900000, c.static_wait_ms);
  ASSERT_STR_EQ("", c.notes);
  cfg_free(&c);
  /* PET_MONITOR_INTERVAL (Kubeflow) too; rank and timeout mean nothing
   * with c10d: said once each */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "h:1", "--rdzv-conf",
                              "rank=3,timeout=5", "x"),
                     ENV("PET_MONITOR_INTERVAL=5"), err, sizeof(err)));
  ASSERT(strstr(c.notes, "rank=3 has no effect with the c10d") != NULL);
  ASSERT(strstr(c.notes, "timeout has no effect with the c10d") != NULL);
  ASSERT(strstr(c.notes, "--monitor-interval 5") != NULL);
  cfg_free(&c);
}

/* launch in an sbatch script of a multi-node allocation, without srun,
 * runs one node: said (issue #27). */
static void test_sbatch_without_srun(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"),
                     ENV("SLURM_JOB_ID=7", "SLURM_JOB_NUM_NODES=4"), err,
                     sizeof(err)));
  ASSERT_CONTAINS(c.warning, "Slurm job 7 has 4 nodes");
  ASSERT_CONTAINS(c.warning, "srun --ntasks-per-node=1");
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"),
                     ENV("SLURM_JOB_ID=7", "SLURM_JOB_NUM_NODES=1"), err,
                     sizeof(err)));
  ASSERT_STR_EQ("", c.warning);
  cfg_free(&c);
}

static void test_conf_values(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-conf",
                              "read_timeout=2s,close_timeout=500ms,,"
                              "keep_alive_interval=1,is_host=false",
                              "--start-method",
                              "fork", "--rdzv-endpoint", "h", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(2000, c.read_timeout_ms);
  ASSERT_EQ(500, c.close_timeout_ms);
  ASSERT_EQ(1000, c.heartbeat_ms);
  ASSERT_EQ(0, c.is_host);
  cfg_free(&c);
  /* as torchrun: blanks around keys and values are stripped, booleans are
   * get_as_bool's, and a key launch does not read is a note naming it */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-conf",
                              "join_timeout=900, last_call_timeout = 60 ,"
                              "use_libuv=False,is_host=t",
                              "--rdzv-endpoint", "h", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(900000, c.join_timeout_ms);
  ASSERT_EQ(60000, c.last_call_timeout_ms);
  ASSERT_EQ(1, c.is_host);
  ASSERT(strstr(c.notes, "unknown key 'use_libuv' ignored (known: "
                         "join_timeout, last_call_timeout,") != NULL);
  ASSERT(strstr(c.notes, "; with etcd: protocol,") != NULL);
  cfg_free(&c);
  const char *const bools[][2] = {{"TRUE", "1"}, {"Y", "1"},  {"yes", "1"},
                                  {"1", "1"},    {"F", "0"},  {"n", "0"},
                                  {"No", "0"},   {"0", "0"}};
  for (size_t i = 0; i < LU_ARRAY_SIZE(bools); i++) {
    char kv[32];
    snprintf(kv, sizeof(kv), "is_host=%s", bools[i][0]);
    ASSERT_EQ(0, parse(&c, ARGS("--rdzv-conf", kv, "--rdzv-endpoint", "h", "x"),
                       no_env, err, sizeof(err)));
    ASSERT_EQ(bools[i][1][0] - '0', c.is_host);
    cfg_free(&c);
  }
  /* a key launch reads still wants a good value */
  expect_error(ARGS("--rdzv-conf", "is_host=maybe", "--rdzv-endpoint", "h",
                    "x"),
               no_env, "is_host: 'maybe' is not true/false");
  expect_error(ARGS("--rdzv-conf", " join_timeout = soon ", "--rdzv-endpoint",
                    "h", "x"),
               no_env, "join_timeout: 'soon' is not a duration");
  expect_error(ARGS("--rdzv-conf", " =5", "--standalone", "x"), no_env,
               "needs a key and a value");
  expect_error(ARGS("--rdzv-conf", "join_timeout= ", "--standalone", "x"),
               no_env, "needs a key and a value");
}

/* --rdzv-backend etcd (docs/rendezvous.md#etcd-backend): the endpoint is
 * etcd's member list; torchrun's names and etcd keys; what is refused. */
static void test_etcd_conf(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                              "e1:2379,e2:2379,[::1]:2379", "--rdzv-conf",
                              "cacert=/ca.pem,cert=/c.pem,key=/k.pem,"
                              "user=root,lease_ttl=4,store_port=29555",
                              "--nnodes", "1:3", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_EQ(CFG_BACKEND_ETCD, c.backend);
  ASSERT_STR_EQ("e1:2379,e2:2379,[::1]:2379", c.endpoint_raw);
  ASSERT_STR_EQ("/ca.pem", c.etcd_cacert);
  ASSERT_STR_EQ("/c.pem", c.etcd_cert);
  ASSERT_STR_EQ("/k.pem", c.etcd_key);
  ASSERT_STR_EQ("root", c.etcd_user);
  ASSERT_EQ(1, c.etcd_https); /* a CA or a certificate: https */
  ASSERT_EQ(4000, c.etcd_ttl_ms);
  ASSERT_EQ(29555, c.endpoint_port);
  cfg_free(&c);
  /* defaults: a 10 s lease, the server on 29400, plain http */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
                              "e1", "x"), no_env, err, sizeof(err)));
  ASSERT_EQ(10000, c.etcd_ttl_ms);
  ASSERT_EQ(RDZV_DEFAULT_PORT, c.endpoint_port);
  ASSERT_EQ(0, c.etcd_https);
  ASSERT_STR_EQ("/launch/", c.etcd_prefix);
  cfg_free(&c);
  /* torchrun's etcd_prefix: a path from etcd's root, '/' added (it was
   * ignored as unknown: the keys went under /launch/, which a role limited
   * to the prefix refuses) */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
                              "e1", "--rdzv-conf", "etcd_prefix=/my/prefix",
                              "x"), no_env, err, sizeof(err)));
  ASSERT_STR_EQ("/my/prefix/", c.etcd_prefix);
  ASSERT(strstr(c.notes, "unknown key") == NULL);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
                              "e1", "--rdzv-conf", "etcd_prefix=/team-a/", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_STR_EQ("/team-a/", c.etcd_prefix);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint",
                              "e1", "--rdzv-conf", "etcd_prefix=/", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_STR_EQ("/", c.etcd_prefix);
  cfg_free(&c);
  {
    const char *bad[] = {"etcd_prefix=my/prefix", "etcd_prefix=/a//b",
                         "etcd_prefix=/a/../b", "etcd_prefix=/a/.",
                         "etcd_prefix=/a b", "etcd_prefix=/a\tb"};
    char long_prefix[300];
    for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++)
      expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                        "--rdzv-conf", bad[i], "x"),
                   no_env, "etcd_prefix: '");
    memset(long_prefix, 'p', sizeof(long_prefix) - 1);
    memcpy(long_prefix, "etcd_prefix=/", 13);
    long_prefix[sizeof(long_prefix) - 1] = '\0';
    expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                      "--rdzv-conf", long_prefix, "x"),
                 no_env, "is not a key prefix: give a path from etcd's root");
  }
  /* torchrun's etcd-v2 names of the TLS keys (they were ignored: plain
   * http, or no client certificate) */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-backend", "etcd-v2", "--rdzv-endpoint",
                              "e1", "--rdzv-conf",
                              "ca_cert=/ca2.pem,ssl_cert=/c2.pem,"
                              "ssl_cert_key=/k2.pem", "x"),
                     no_env, err, sizeof(err)));
  ASSERT_STR_EQ("/ca2.pem", c.etcd_cacert);
  ASSERT_STR_EQ("/c2.pem", c.etcd_cert);
  ASSERT_STR_EQ("/k2.pem", c.etcd_key);
  ASSERT_EQ(1, c.etcd_https);
  ASSERT(strstr(c.notes, "unknown key") == NULL);
  cfg_free(&c);
  expect_error(ARGS("--rdzv-backend", "etcd", "x"), no_env,
               "--rdzv-backend etcd needs --rdzv-endpoint");
  expect_error(ARGS("--rdzv-endpoint", "e1:2379,e2:2379", "x"), no_env,
               "give --rdzv-backend etcd");
  expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                    "--rdzv-conf", "cert=/c.pem", "x"),
               no_env, "cert and key go together");
  expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                    "--rdzv-conf", "protocol=grpc", "x"),
               no_env, "use http or https");
  expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                    "--rdzv-conf", "lease_ttl=1", "x"),
               no_env, "lease_ttl: at least 2000 ms");
  expect_error(ARGS("--rdzv-backend", "etcd", "--rdzv-endpoint", "e1",
                    "--standalone", "x"),
               no_env, "choose one");
  expect_error(ARGS("--rdzv-backend", "zookeeper", "x"), no_env,
               "not c10d, static or etcd");
}

/* --hang-timeout / --hang-signal and their variables (launcher/hang.c):
 * off by default, the dump signal SIGUSR1, the flag beats the variable. */
static void test_hang(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("x"), no_env, err, sizeof(err)));
  ASSERT_EQ(0, c.hang_timeout_ms);
  ASSERT_EQ(SIGUSR1, c.hang_signal);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--hang-timeout", "90", "--hang-signal", "quit",
                              "x"), no_env, err, sizeof(err)));
  ASSERT_EQ(90000, c.hang_timeout_ms);
  ASSERT_EQ(SIGQUIT, c.hang_signal);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--hang-timeout", "off", "x"),
                     ENV("LAUNCH_HANG_TIMEOUT=5m", "LAUNCH_HANG_SIGNAL=none"),
                     err, sizeof(err)));
  ASSERT_EQ(0, c.hang_timeout_ms);
  ASSERT_EQ(0, c.hang_signal);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV("LAUNCH_HANG_TIMEOUT=500ms",
                                        "LAUNCH_HANG_SIGNAL=SIGUSR2"),
                     err, sizeof(err)));
  ASSERT_EQ(500, c.hang_timeout_ms);
  ASSERT_EQ(SIGUSR2, c.hang_signal);
  cfg_free(&c);
  expect_error(ARGS("--hang-timeout", "soon", "x"), no_env,
               "--hang-timeout: 'soon' is not a duration");
  /* --no-restart-exit-codes: train_gpt's divergence (3) by default */
  ASSERT_EQ(0, parse(&c, ARGS("x"), no_env, err, sizeof(err)));
  ASSERT(c.no_restart[3] && !c.no_restart[1]);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--no-restart-exit-codes", "4,10-12", "x"),
                     no_env, err, sizeof(err)));
  ASSERT(!c.no_restart[3] && c.no_restart[4] && c.no_restart[11] &&
         !c.no_restart[13]);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV("LAUNCH_NO_RESTART_EXIT_CODES=none"),
                     err, sizeof(err)));
  ASSERT(!c.no_restart[3]);
  cfg_free(&c);
  expect_error(ARGS("--no-restart-exit-codes", "3,x", "x"), no_env,
               "not a list of exit codes");
  expect_error(ARGS("--no-restart-exit-codes", "0", "x"), no_env,
               "not a list of exit codes");
  expect_error(ARGS("--hang-timeout", "-5", "x"), no_env, "--hang-timeout");
  expect_error(ARGS("--hang-signal", "SIGFOO", "x"), no_env,
               "--hang-signal: 'SIGFOO' is not a signal");
  expect_error(ARGS("--hang-signal", "99", "x"), no_env, "--hang-signal");
  expect_error(ARGS("x"), ENV("LAUNCH_HANG_TIMEOUT=never"),
               "LAUNCH_HANG_TIMEOUT");
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
      "--hang-timeout SECONDS|off", "--hang-signal SIG|none",
      "--exit-barrier-timeout SECONDS", "--monitor-interval SECONDS",
      "--start-method spawn|fork|forkserver", "--role NAME", "-m, --module",
      "--no-python", "--run-path", "--log-dir DIR", "-r, --redirects SPEC",
      "-t, --tee SPEC", "--local-ranks-filter LIST",
      "--log-line-prefix TEMPLATE", "--event-log-handler null|console",
      "--event-log FILE", "-q, --quiet",
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


/* A Slurm job step of 4 nodes in an allocation of 8: srun's variables as
 * Slurm 22.05 sets them (tests/test_slurm.py runs the real thing). */
#define SLURM_STEP                                                             \
  "SLURM_JOB_ID=1234", "SLURM_STEP_ID=0", "SLURM_JOB_NUM_NODES=8",             \
      "SLURM_NNODES=4", "SLURM_STEP_NUM_NODES=4",                              \
      "SLURM_JOB_NODELIST=gpu[01-08]", "SLURM_STEP_NODELIST=gpu[01-04]",       \
      "SLURM_NODELIST=gpu[01-08]"

static void test_slurm(void) {
  cfg_t c;
  char err[512];
  /* srun --ntasks-per-node=1 launch PROGRAM: no flag needed */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=2", "SLURMD_NODENAME=gpu03",
                         "SLURM_GPUS_ON_NODE=8"),
                     err, sizeof(err)));
  ASSERT_EQ(4, c.min_nodes); /* the step's nodes, not the allocation's */
  ASSERT_EQ(4, c.max_nodes);
  ASSERT_STR_EQ("1234.0", c.run_id);
  ASSERT_EQ(CFG_BACKEND_C10D, c.backend);
  ASSERT_STR_EQ("gpu01", c.endpoint_host);
  ASSERT_EQ(sched_slurm_port(1234, 0), c.endpoint_port);
  ASSERT_EQ(29400 + (234 * 8) % 1000, c.endpoint_port);
  ASSERT_EQ(1, c.sched_endpoint);
  ASSERT_EQ(0, c.sched_host); /* node 2 does not host */
  ASSERT_EQ(0, c.is_host);
  ASSERT_EQ(2, c.pref_node_rank);
  ASSERT_STR_EQ("gpu03", c.host);
  ASSERT_EQ(4, (int)c.nexpected);
  ASSERT_STR_EQ("gpu04", c.expected_hosts[3]);
  ASSERT_EQ(8, c.nproc);
  ASSERT(c.signals_mask & (1u << SIGUSR1));
  ASSERT(c.signals_mask & (1u << SIGUSR2));
  ASSERT(c.signals_mask & (1u << SIGTERM));
  cfg_free(&c);
  /* node 0 hosts; steps and jobs get different ports */
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV(SLURM_STEP, "SLURM_NODEID=0"), err,
                     sizeof(err)));
  ASSERT_EQ(1, c.sched_host);
  ASSERT_EQ(1, c.is_host);
  ASSERT_EQ(1, c.nproc); /* no GPU from Slurm: torchrun's default */
  cfg_free(&c);
  ASSERT(sched_slurm_port(1234, 1) != sched_slurm_port(1234, 0));
  ASSERT(sched_slurm_port(1235, 0) != sched_slurm_port(1234, 0));
  for (long long j = 0; j < 5000; j += 7)
    ASSERT(sched_slurm_port(j, j % 3) >= 29400 &&
           sched_slurm_port(j, j % 3) < 30400);
  /* the GPUs Slurm gave, from CUDA_VISIBLE_DEVICES */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=1",
                         "CUDA_VISIBLE_DEVICES=4,5,6,7"),
                     err, sizeof(err)));
  ASSERT_EQ(4, c.nproc);
  cfg_free(&c);
  /* flags on the command line win, and name the rendezvous */
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "2", "--rdzv-endpoint", "h:5",
                              "--rdzv-id", "mine", "--nproc-per-node", "3",
                              "--signals-to-handle", "SIGTERM", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURM_GPUS_ON_NODE=8"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_STR_EQ("h", c.endpoint_host);
  ASSERT_EQ(5, c.endpoint_port);
  ASSERT_STR_EQ("mine", c.run_id);
  ASSERT_EQ(3, c.nproc);
  ASSERT_EQ(0, c.sched_endpoint);
  ASSERT_EQ(-1, c.sched_host); /* the address decides */
  ASSERT_EQ(-1, c.is_host);
  ASSERT(!(c.signals_mask & (1u << SIGUSR1)));
  cfg_free(&c);
  /* the job's list when the step's is missing (older Slurm) */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV("SLURM_JOB_ID=77", "SLURM_STEPID=3", "SLURM_NNODES=2",
                         "SLURM_JOB_NODELIST=a[7-8]", "SLURM_NODEID=1"),
                     err, sizeof(err)));
  ASSERT_STR_EQ("77.3", c.run_id);
  ASSERT_STR_EQ("a7", c.endpoint_host);
  ASSERT_EQ(sched_slurm_port(77, 3), c.endpoint_port);
  ASSERT_EQ(2, c.max_nodes);
  cfg_free(&c);
  /* a batch script or salloc shell is no step: its SLURM_NNODES counts the
   * allocation, and nothing of it applies */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV("SLURM_JOB_ID=1234", "SLURM_NNODES=4",
                         "SLURM_JOB_NODELIST=gpu[01-04]", "SLURM_NODEID=0"),
                     err, sizeof(err)));
  ASSERT_EQ(1, c.max_nodes);
  ASSERT_STR_EQ("none", c.run_id);
  ASSERT_EQ(CFG_BACKEND_STATIC, c.backend);
  cfg_free(&c);
  /* --standalone in a step: one node of its own */
  ASSERT_EQ(0, parse(&c, ARGS("--standalone", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=3"), err, sizeof(err)));
  ASSERT_EQ(1, c.max_nodes);
  ASSERT_STR_EQ("127.0.0.1", c.endpoint_host);
  ASSERT_EQ(36, (int)strlen(c.run_id));
  cfg_free(&c);
  /* a heterogeneous step (srun -w gpu03 : -w gpu[01-02], as Slurm 22.05
   * sets it): node 0 is gpu03, its list sorted; the endpoint's node, the
   * first of the list, hosts, node 0 joins it */
#define SLURM_HET_STEP                                                         \
  "SLURM_JOB_ID=7", "SLURM_STEP_ID=2", "SLURM_HET_SIZE=2",                     \
      "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NODELIST=gpu[01-03]",              \
      "SLURM_JOB_NODELIST=gpu[01-03]", "SLURM_STEP_TASKS_PER_NODE=1(x3)"
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_HET_STEP, "SLURM_NODEID=0",
                         "SLURMD_NODENAME=gpu03"),
                     err, sizeof(err)));
  ASSERT_STR_EQ("gpu01", c.endpoint_host);
  ASSERT_EQ(0, c.is_host);
  ASSERT_EQ(0, c.pref_node_rank);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_HET_STEP, "SLURM_NODEID=1",
                         "SLURMD_NODENAME=gpu01"),
                     err, sizeof(err)));
  ASSERT_STR_EQ("gpu01", c.endpoint_host);
  ASSERT_EQ(1, c.is_host);
  ASSERT_EQ(1, c.pref_node_rank);
  cfg_free(&c);
  /* slurmd's name not in the list (a front-end node's): node 0 hosts, as
   * without SLURMD_NODENAME (none did: every node waited for a server) */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURMD_NODENAME=fe1"),
                     err, sizeof(err)));
  ASSERT_EQ(1, c.is_host);
  ASSERT_STR_EQ("gpu01", c.endpoint_host);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=1", "SLURMD_NODENAME=fe1"),
                     err, sizeof(err)));
  ASSERT_EQ(0, c.is_host);
  cfg_free(&c);
  /* --nnodes that the step's nodes do not fit, the rendezvous the step's:
   * said at start (it waited out the join timeout, or node 1 of srun -N2
   * --nnodes 1 found the job finished: exit 75) */
  expect_error(ARGS("--nnodes", "8", "x"), ENV(SLURM_STEP, "SLURM_NODEID=0"),
               "--nnodes 8, but this Slurm step runs on 4 nodes "
               "(SLURM_STEP_NODELIST=gpu[01-04]), and its rendezvous");
  expect_error(ARGS("--nnodes", "1", "x"), ENV(SLURM_STEP, "SLURM_NODEID=1"),
               "Run srun -N1 (sbatch --nodes), drop --nnodes, or give "
               "--rdzv-endpoint");
  expect_error(ARGS("x"), ENV(SLURM_STEP, "SLURM_NODEID=0", "PET_NNODES=2"),
               "--nnodes 2 (from PET_NNODES), but this Slurm step runs on 4");
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "2:4", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0"), err, sizeof(err)));
  cfg_free(&c);
  /* a rendezvous of its own may gather several steps' nodes */
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "8", "--rdzv-endpoint", "h:5", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0"), err, sizeof(err)));
  cfg_free(&c);
  /* srun --ntasks-per-node=8 launch, no --from-tasks: 8 agents a node */
  expect_error(ARGS("x"),
               ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURM_LOCALID=3",
                   "SLURM_STEP_TASKS_PER_NODE=8(x4)"),
               "srun started 8 tasks on this node "
               "(SLURM_STEP_TASKS_PER_NODE=8(x4)), each a launch agent");
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0",
                         "SLURM_STEP_TASKS_PER_NODE=1(x4)"),
                     err, sizeof(err)));
  cfg_free(&c);
  /* two agents a node, each of its own GPUs, given the job's size and a
   * server: theirs to say */
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "8", "--rdzv-endpoint", "h:5", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0",
                         "SLURM_STEP_TASKS_PER_NODE=2(x4)"),
                     err, sizeof(err)));
  cfg_free(&c);
  /* a node list that does not parse is named, with what is wrong */
  expect_error(ARGS("x"),
               ENV("SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=gpu[01-04",
                   "SLURM_NODEID=0"),
               "SLURM_STEP_NODELIST=gpu[01-04: not a host list like "
               "node[01-04],login1: '[' is never closed at character 4");
}

/* --from-tasks: srun --ntasks-per-node=2 on 4 nodes, task 5. */
static void test_from_tasks(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("--from-tasks", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=2", "SLURM_PROCID=5",
                         "SLURM_LOCALID=1", "SLURM_NTASKS=8",
                         "SLURM_STEP_TASKS_PER_NODE=2(x4)",
                         "SLURM_GPUS_ON_NODE=8", "SLURM_CPU_BIND_TYPE=none"),
                     err, sizeof(err)));
  ASSERT_EQ(1, c.from_tasks);
  ASSERT_EQ(5, c.task_rank);
  ASSERT_EQ(1, c.task_local_rank);
  ASSERT_EQ(8, c.task_world);
  ASSERT_EQ(2, c.nproc); /* srun's tasks on this node, not the GPUs */
  ASSERT_EQ(4, c.max_nodes);
  ASSERT_STR_EQ("gpu01", c.endpoint_host);
  ASSERT_EQ(0, c.sched_bound);
  {
    launch_round_t r;
    launch_round_guess(&c, "/tmp/x", &r);
    ASSERT_EQ(4, r.base_rank); /* RANK = 4 + LOCAL_RANK 1 = SLURM_PROCID */
    ASSERT_EQ(8, r.world_size);
    ASSERT_EQ(2, r.node_rank);
    ASSERT_STR_EQ("gpu01", r.master_addr);
  }
  cfg_free(&c);
  /* uneven nodes: this node's count from "3(x2),2" */
  ASSERT_EQ(0, parse(&c, ARGS("--from-tasks", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=2", "SLURM_PROCID=6",
                         "SLURM_LOCALID=0", "SLURM_NTASKS=8",
                         "SLURM_STEP_TASKS_PER_NODE=3(x2),2"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.nproc);
  cfg_free(&c);
  /* Slurm bound the task: its binding stays, unless --cpu-bind says */
  ASSERT_EQ(0, parse(&c, ARGS("--from-tasks", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURM_PROCID=0",
                         "SLURM_LOCALID=0", "SLURM_NTASKS=8",
                         "SLURM_NTASKS_PER_NODE=2",
                         "SLURM_CPU_BIND_TYPE=mask_cpu:"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.nproc);
  ASSERT_STR_EQ("none", c.cpu_bind);
  ASSERT_STR_EQ("none", c.mem_bind);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("--from-tasks", "--cpu-bind", "cores", "x"),
                     ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURM_PROCID=0",
                         "SLURM_LOCALID=0", "SLURM_NTASKS=8",
                         "SLURM_NTASKS_PER_NODE=2",
                         "SLURM_CPU_BIND_TYPE=mask_cpu:"),
                     err, sizeof(err)));
  ASSERT_STR_EQ("cores", c.cpu_bind);
  cfg_free(&c);
  expect_error(ARGS("--from-tasks", "x"), no_env,
               "--from-tasks: this process is no task of a Slurm job step");
  expect_error(ARGS("--from-tasks", "--nproc-per-node", "4", "x"),
               ENV(SLURM_STEP, "SLURM_NODEID=0", "SLURM_PROCID=0",
                   "SLURM_LOCALID=0", "SLURM_NTASKS=8",
                   "SLURM_NTASKS_PER_NODE=2"),
               "srun's --ntasks-per-node decides");
  expect_error(ARGS("--from-tasks", "x"),
               ENV(SLURM_STEP, "SLURM_NODEID=5", "SLURM_PROCID=0",
                   "SLURM_LOCALID=0", "SLURM_NTASKS=8",
                   "SLURM_STEP_TASKS_PER_NODE=2(x4)"),
               "counts 4 nodes: there is no node 5");
}

/* Volcano pods: host files under a fake /etc/volcano. */
static char vc_root[512];

static void vc_file(const char *name, const char *text) {
  char path[600];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", vc_root, name);
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs(text, f);
  fclose(f);
}

static void vc_clear(void) {
  char path[600];
  const char *names[] = {"trainer.host", "master.host", "worker.host",
                         "eval.host", "tensorboard.host", "chief.host"};
  for (size_t i = 0; i < LU_ARRAY_SIZE(names); i++) {
    snprintf(path, sizeof(path), "%s/%s", vc_root, names[i]);
    unlink(path);
  }
}

/* The pytorch plugin's three pods of job JOB: MASTER's pod 0 (RANK 0) and
 * WORKER's pods 0 and 1 (RANK 1 and 2), HOSTNAME given when HN: each takes
 * its own name and node rank, the master's pod first. */
static void vc_plugin_pods(const char *root_env, const char *job,
                           const char *master, const char *worker, int hn) {
  char want[3][128], name[3][160], addr[160];
  cfg_t c;
  char err[512];
  snprintf(want[0], sizeof(want[0]), "%s-%s-0.%s", job, master, job);
  for (int i = 1; i < 3; i++)
    snprintf(want[i], sizeof(want[i]), "%s-%s-%d.%s", job, worker, i - 1, job);
  for (int i = 0; i < 3; i++)
    snprintf(name[i], sizeof(name[i]), "HOSTNAME=%.*s",
             (int)strcspn(want[i], "."), want[i]);
  snprintf(addr, sizeof(addr), "MASTER_ADDR=%s", want[0]);
  for (int i = 0; i < 3; i++) {
    const char *rk[] = {"RANK=0", "RANK=1", "RANK=2"};
    const char *ix[] = {"VC_TASK_INDEX=0", "VC_TASK_INDEX=0",
                        "VC_TASK_INDEX=1"};
    ASSERT_EQ(0, parse(&c, ARGS("x"),
                       ENV(root_env, ix[i], rk[i], "WORLD_SIZE=3", addr,
                           "MASTER_PORT=23456",
                           hn ? name[i] : "LAUNCH_TEST_UNUSED=1"),
                       err, sizeof(err)));
    ASSERT_EQ(3, c.max_nodes);
    ASSERT_EQ(i, c.pref_node_rank);
    if (strcmp(c.host, want[i]) != 0)
      TEST_FAIL("pod %s (RANK %d) took the name %s", want[i], i, c.host);
    ASSERT_EQ(3, (int)c.nexpected);
    for (int h = 0; h < 3; h++)
      ASSERT_STR_EQ(want[h], c.expected_hosts[h]);
    ASSERT_STR_EQ(want[0], c.endpoint_host);
    ASSERT_EQ(23456, c.endpoint_port);
    cfg_free(&c);
  }
}

static void test_volcano(void) {
  cfg_t c;
  char err[512], root_env[600];
  const char *tmp = getenv("TMPDIR");
  snprintf(vc_root, sizeof(vc_root), "%.400s/test_config_vcXXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  ASSERT(mkdtemp(vc_root) != NULL);
  snprintf(root_env, sizeof(root_env), "LAUNCH_VOLCANO_ROOT=%s", vc_root);
  /* the svc plugin's host file (its last line ends too), env plugin's index */
  vc_file("trainer.host", "tg-trainer-0.tg\ntg-trainer-1.tg\ntg-trainer-2.tg\n");
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV(root_env, "VC_TASK_INDEX=1",
                                        "VK_TASK_INDEX=1",
                                        "HOSTNAME=tg-trainer-1"),
                     err, sizeof(err)));
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(1, c.pref_node_rank);
  ASSERT_STR_EQ("tg", c.run_id); /* the job's name, the pods' subdomain */
  ASSERT_STR_EQ("tg-trainer-0.tg", c.endpoint_host);
  ASSERT_EQ(RDZV_DEFAULT_PORT, c.endpoint_port);
  ASSERT_EQ(0, c.sched_host);
  ASSERT_STR_EQ("tg-trainer-1.tg", c.host); /* as the peers list it */
  ASSERT_EQ(3, (int)c.nexpected);
  cfg_free(&c);
  /* pod 0 hosts; VK_TASK_INDEX alone (older Volcano) */
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV(root_env, "VK_TASK_INDEX=0"), err,
                     sizeof(err)));
  ASSERT_EQ(1, c.sched_host);
  cfg_free(&c);
  /* a standalone launch server: the endpoint given, the rest Volcano's */
  ASSERT_EQ(0, parse(&c, ARGS("--rdzv-endpoint", "launch-server:29400", "x"),
                     ENV(root_env, "VC_TASK_INDEX=2"), err, sizeof(err)));
  ASSERT_STR_EQ("launch-server", c.endpoint_host);
  ASSERT_EQ(-1, c.sched_host);
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(2, c.pref_node_rank);
  cfg_free(&c);
  /* the variables alone (no host files) */
  vc_clear();
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "VC_TRAINER_NUM=2",
                         "VC_TRAINER_HOSTS=j-trainer-0.j,j-trainer-1.j"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_STR_EQ("j-trainer-0.j", c.endpoint_host);
  ASSERT_STR_EQ("j", c.run_id);
  cfg_free(&c);
  /* the pytorch plugin: pod-level WORLD_SIZE and RANK are the node count
   * and node rank (the workers get their own, tests/test_volcano.py) */
  vc_file("master.host", "pt-master-0.pt");
  vc_file("worker.host", "pt-worker-0.pt\npt-worker-1.pt\npt-worker-2.pt");
  ASSERT_EQ(0, parse(&c, ARGS("--nproc-per-node", "8", "x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "RANK=2",
                         "WORLD_SIZE=4", "MASTER_ADDR=pt-master-0.pt",
                         "MASTER_PORT=23456"),
                     err, sizeof(err)));
  ASSERT_EQ(4, c.max_nodes);
  ASSERT_EQ(2, c.pref_node_rank);
  ASSERT_STR_EQ("pt-master-0.pt", c.endpoint_host);
  ASSERT_EQ(23456, c.endpoint_port);
  ASSERT_STR_EQ("pt-worker-1.pt", c.host);
  ASSERT_STR_EQ("pt-master-0.pt", c.expected_hosts[0]);
  ASSERT_STR_EQ("pt-worker-2.pt", c.expected_hosts[3]);
  ASSERT_STR_EQ("pt", c.run_id);
  ASSERT_EQ(8, c.nproc);
  cfg_free(&c);
  /* the plugin's WORLD_SIZE counts the master and worker tasks' pods only
   * (Volcano #4238): a job with one more task (a tensorboard pod) is still
   * the plugin's; that task's pods come after the workers' */
  vc_file("tensorboard.host", "pt-tensorboard-0.pt\n");
  /* older Volcano counted every task: 5 */
  for (int w = 4; w <= 5; w++) {
    char ws[32];
    snprintf(ws, sizeof(ws), "WORLD_SIZE=%d", w);
    ASSERT_EQ(0, parse(&c, ARGS("--nproc-per-node", "8", "x"),
                       ENV(root_env, "VC_TASK_INDEX=1", "RANK=2", ws,
                           "MASTER_ADDR=pt-master-0.pt", "MASTER_PORT=23456",
                           "HOSTNAME=pt-worker-1"),
                       err, sizeof(err)));
    ASSERT_EQ(w, c.max_nodes);
    ASSERT_EQ(2, c.pref_node_rank);
    ASSERT_STR_EQ("pt-master-0.pt", c.endpoint_host);
    ASSERT_EQ(23456, c.endpoint_port);
    ASSERT_STR_EQ("pt-worker-1.pt", c.host);
    ASSERT_EQ(w, (int)c.nexpected);
    ASSERT_STR_EQ("pt-worker-2.pt", c.expected_hosts[3]);
    cfg_free(&c);
  }
  vc_clear();
  /* the plugin's master task named otherwise (pytorch: ["--master=chief"])
   * beside a task named worker: the pod's name is its own, the chief's pod
   * is node 0; an eval task is not counted (Volcano #4238) */
  vc_file("chief.host", "pc-chief-0.pc\n");
  vc_file("worker.host", "pc-worker-0.pc\npc-worker-1.pc\n");
  vc_plugin_pods(root_env, "pc", "chief", "worker", 1);
  vc_file("eval.host", "pc-eval-0.pc\n");
  vc_plugin_pods(root_env, "pc", "chief", "worker", 1);
  vc_clear();
  /* the worker task named otherwise too (["--worker=trainer"]) beside a
   * third task: the plugin's RANK counts the master's pod, then the
   * trainers'; the eval pods come after them. Known by the counts (1 + 2
   * make WORLD_SIZE=3, 1 + 1 do not), with or without HOSTNAME */
  vc_file("master.host", "pd-master-0.pd\n");
  vc_file("trainer.host", "pd-trainer-0.pd\npd-trainer-1.pd\n");
  vc_file("eval.host", "pd-eval-0.pd\n");
  vc_plugin_pods(root_env, "pd", "master", "trainer", 0);
  vc_plugin_pods(root_env, "pd", "master", "trainer", 1);
  /* two tasks of two pods beside the master: the counts cannot tell the
   * worker task; the pod's HOSTNAME does, or on the host's network
   * LAUNCH_VOLCANO_TASK, and the plugin's RANK stays the pod's place */
  vc_file("eval.host", "pd-eval-0.pd\npd-eval-1.pd\n");
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "RANK=2", "WORLD_SIZE=3",
                         "MASTER_ADDR=pd-master-0.pd", "MASTER_PORT=23456",
                         "HOSTNAME=pd-trainer-1"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.pref_node_rank);
  ASSERT_STR_EQ("pd-trainer-1.pd", c.host);
  ASSERT_STR_EQ("pd-trainer-0.pd", c.expected_hosts[1]);
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "RANK=2", "WORLD_SIZE=3",
                         "MASTER_ADDR=pd-master-0.pd", "MASTER_PORT=23456",
                         "HOSTNAME=gpu-node-5", "LAUNCH_VOLCANO_TASK=trainer"),
                     err, sizeof(err)));
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(2, c.pref_node_rank);
  ASSERT_STR_EQ("pd-trainer-1.pd", c.host);
  ASSERT_STR_EQ("pd-master-0.pd", c.endpoint_host);
  cfg_free(&c);
  /* the master's pod on the host's network, its task named: RANK 0 */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=0", "RANK=0", "WORLD_SIZE=3",
                         "MASTER_ADDR=pd-master-0.pd", "MASTER_PORT=23456",
                         "HOSTNAME=gpu-node-1", "LAUNCH_VOLCANO_TASK=master"),
                     err, sizeof(err)));
  ASSERT_EQ(0, c.pref_node_rank);
  ASSERT_STR_EQ("pd-master-0.pd", c.host);
  cfg_free(&c);
  vc_clear();
  /* a task named worker on the host's network, LAUNCH_VOLCANO_TASK given:
   * the plugin's RANK 2 (the second worker pod), not that task's pod 2 */
  vc_file("master.host", "pw-master-0.pw\n");
  vc_file("worker.host", "pw-worker-0.pw\npw-worker-1.pw\n");
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "RANK=2", "WORLD_SIZE=3",
                         "MASTER_ADDR=pw-master-0.pw", "MASTER_PORT=23456",
                         "HOSTNAME=gpu-node-7", "LAUNCH_VOLCANO_TASK=worker"),
                     err, sizeof(err)));
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(2, c.pref_node_rank);
  ASSERT_STR_EQ("pw-worker-1.pw", c.host);
  cfg_free(&c);
  vc_clear();
  /* hand-set, process-level WORLD_SIZE, RANK and MASTER_ADDR are not the
   * pytorch plugin's (torchrun reads none of them): the pod's place comes
   * from VC_TASK_INDEX and the host files */
  vc_clear();
  vc_file("trainer.host", "g-trainer-0.g\ng-trainer-1.g\n");
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1", "RANK=8", "WORLD_SIZE=16",
                         "MASTER_ADDR=g-trainer-0", "MASTER_PORT=29500"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_EQ(1, c.pref_node_rank);
  ASSERT_STR_EQ("g-trainer-0.g", c.endpoint_host);
  ASSERT_EQ(RDZV_DEFAULT_PORT, c.endpoint_port);
  ASSERT_STR_EQ("g-trainer-1.g", c.host);
  cfg_free(&c);
  /* the runbook's Volcano job: WORLD_SIZE=64 and RANK=<task index> for 8
   * pods, every flag given as torchrun's */
  vc_clear();
  vc_file("trainer.host",
          "v100-train-gang-trainer-[0-7].v100-train-gang\n");
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes=8", "--nproc_per_node=8",
                              "--rdzv_id=v100-fsdp", "--rdzv_backend=c10d",
                              "--rdzv_endpoint=v100-train-gang-trainer-0:29500",
                              "dump.py"),
                     ENV(root_env, "VC_TASK_INDEX=3", "WORLD_SIZE=64", "RANK=3",
                         "MASTER_ADDR=v100-train-gang-trainer-0",
                         "MASTER_PORT=29500"),
                     err, sizeof(err)));
  ASSERT_EQ(8, c.max_nodes);
  ASSERT_EQ(8, c.nproc);
  ASSERT_EQ(3, c.pref_node_rank);
  ASSERT_STR_EQ("v100-fsdp", c.run_id);
  ASSERT_STR_EQ("v100-train-gang-trainer-0", c.endpoint_host);
  ASSERT_EQ(29500, c.endpoint_port);
  ASSERT_STR_EQ("v100-train-gang-trainer-3.v100-train-gang", c.host);
  cfg_free(&c);
  /* several tasks, none holding this pod: said only when the pods are
   * needed (no --nnodes), with why the plugin's variables were not read */
  vc_clear();
  vc_file("master.host", "h-master-0.h\n");
  vc_file("worker.host", "h-worker-0.h\nh-worker-1.h\n");
  expect_error(ARGS("x"),
               ENV(root_env, "VC_TASK_INDEX=0", "RANK=0", "WORLD_SIZE=16",
                   "MASTER_ADDR=h-master-0"),
               "WORLD_SIZE=16 and MASTER_ADDR=h-master-0 are set by hand");
  ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "3", "--rdzv-endpoint", "h:1", "x"),
                     ENV(root_env, "VC_TASK_INDEX=0", "RANK=0",
                         "WORLD_SIZE=16", "MASTER_ADDR=h-master-0"),
                     err, sizeof(err)));
  ASSERT_EQ(3, c.max_nodes);
  ASSERT_EQ(0, c.pref_node_rank);
  ASSERT_STR_EQ("h", c.run_id); /* the job's, known without the task */
  cfg_free(&c);
  /* several tasks, no pytorch plugin, one launch job (its node count more
   * than the pod's task): each pod's node rank is its place in the job, the
   * master task first, then the worker task (as the plugin's RANK), then the
   * others by name; the expected hosts are the job's */
  vc_clear();
  vc_file("master.host", "k-master-0.k\n");
  vc_file("worker.host", "k-worker-0.k\nk-worker-1.k\n");
  vc_file("eval.host", "k-eval-0.k\n");
  {
    const char *hn[] = {"HOSTNAME=k-master-0", "HOSTNAME=k-worker-0",
                        "HOSTNAME=k-worker-1", "HOSTNAME=k-eval-0"};
    const char *ix[] = {"VC_TASK_INDEX=0", "VC_TASK_INDEX=0",
                        "VC_TASK_INDEX=1", "VC_TASK_INDEX=0"};
    for (int i = 0; i < 4; i++) {
      /* a launch server's endpoint, the whole job */
      ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "--rdzv-endpoint", "s:1",
                                  "x"),
                         ENV(root_env, ix[i], hn[i]), err, sizeof(err)));
      ASSERT_EQ(i, c.pref_node_rank);
      ASSERT_EQ(4, (int)c.nexpected);
      ASSERT_STR_EQ("k-master-0.k", c.expected_hosts[0]);
      ASSERT_STR_EQ("k-worker-0.k", c.expected_hosts[1]);
      ASSERT_STR_EQ("k-eval-0.k", c.expected_hosts[3]);
      ASSERT_STR_EQ("k", c.run_id);
      cfg_free(&c);
      /* static, at the master pod: each pod its own --node-rank */
      ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "--master-addr",
                                  "k-master-0.k", "x"),
                         ENV(root_env, ix[i], hn[i]), err, sizeof(err)));
      ASSERT_EQ(i, c.node_rank);
      cfg_free(&c);
      /* the scheduler's endpoint: the job's first pod, which hosts */
      ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "x"),
                         ENV(root_env, ix[i], hn[i]), err, sizeof(err)));
      ASSERT_EQ(i, c.pref_node_rank);
      ASSERT_STR_EQ("k-master-0.k", c.endpoint_host);
      ASSERT_EQ(RDZV_DEFAULT_PORT, c.endpoint_port);
      ASSERT_EQ(i == 0, c.is_host);
      cfg_free(&c);
    }
    /* the master and worker tasks only: the eval task comes after them */
    ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "3", "--rdzv-endpoint", "s:1",
                                "x"),
                       ENV(root_env, ix[2], hn[2]), err, sizeof(err)));
    ASSERT_EQ(2, c.pref_node_rank);
    cfg_free(&c);
    /* the pod's task its own launch job: its own index and pods */
    ASSERT_EQ(0, parse(&c, ARGS("x"), ENV(root_env, ix[2], hn[2]), err,
                       sizeof(err)));
    ASSERT_EQ(2, c.max_nodes);
    ASSERT_EQ(1, c.pref_node_rank);
    ASSERT_EQ(2, (int)c.nexpected);
    ASSERT_STR_EQ("k-worker-0.k", c.endpoint_host);
    cfg_free(&c);
    ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "2", "--rdzv-endpoint", "s:1",
                                "--rdzv-id", "k-w", "x"),
                       ENV(root_env, ix[2], hn[2]), err, sizeof(err)));
    ASSERT_EQ(1, c.pref_node_rank);
    ASSERT_EQ(2, (int)c.nexpected);
    cfg_free(&c);
    /* hostNetwork: the task named; LAUNCH_EXPECTED_HOSTS beats the job's */
    ASSERT_EQ(0, parse(&c, ARGS("--nnodes", "4", "--rdzv-endpoint", "s:1",
                                "x"),
                       ENV(root_env, ix[2], "HOSTNAME=gpu-node-5",
                           "LAUNCH_VOLCANO_TASK=worker",
                           "LAUNCH_EXPECTED_HOSTS=a,b,c,d"),
                       err, sizeof(err)));
    ASSERT_EQ(2, c.pref_node_rank);
    ASSERT_STR_EQ("a", c.expected_hosts[0]);
    cfg_free(&c);
  }
  vc_clear();
  vc_file("trainer.host", "g-trainer-0.g\ng-trainer-1.g\n");
  /* several tasks: the one of this pod, by HOSTNAME or LAUNCH_VOLCANO_TASK */
  vc_file("eval.host", "g-eval-0.g\n");
  expect_error(ARGS("x"), ENV(root_env, "VC_TASK_INDEX=0"),
               "set LAUNCH_VOLCANO_TASK");
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=0", "HOSTNAME=g-eval-0"),
                     err, sizeof(err)));
  ASSERT_EQ(1, c.max_nodes);
  ASSERT_STR_EQ("g", c.run_id); /* the job's, the same in every task */
  cfg_free(&c);
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV(root_env, "VC_TASK_INDEX=1",
                         "LAUNCH_VOLCANO_TASK=trainer"),
                     err, sizeof(err)));
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_STR_EQ("g", c.run_id);
  cfg_free(&c);
  expect_error(ARGS("x"),
               ENV(root_env, "VC_TASK_INDEX=0", "LAUNCH_VOLCANO_TASK=nope"),
               "LAUNCH_VOLCANO_TASK=nope is not a task");
  expect_error(ARGS("x"),
               ENV(root_env, "VC_TASK_INDEX=5", "LAUNCH_VOLCANO_TASK=trainer"),
               "index 5 is not below the job's 2 pods");
  expect_error(ARGS("x"), ENV(root_env, "VK_TASK_INDEX=first"),
               "Volcano: VK_TASK_INDEX=first is not a pod index");
  vc_file("eval.host", "g-eval-[0-\n");
  expect_error(ARGS("x"), ENV(root_env, "VC_TASK_INDEX=0"),
               "eval.host does not list host names");
  vc_clear();
  rmdir(vc_root);
}

/* Kubeflow's PyTorchJob (v1): PET_* and the master pod's address. */
static void test_kubeflow(void) {
  cfg_t c;
  char err[512];
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV("PET_NNODES=2", "PET_NODE_RANK=1",
                         "PET_NPROC_PER_NODE=4", "MASTER_ADDR=pj-master-0",
                         "MASTER_PORT=23456", "WORLD_SIZE=8", "RANK=1"),
                     err, sizeof(err)));
  ASSERT_EQ(CFG_BACKEND_STATIC, c.backend);
  ASSERT_STR_EQ("pj-master-0", c.endpoint_host);
  ASSERT_EQ(23456, c.endpoint_port);
  ASSERT_EQ(1, c.node_rank);
  ASSERT_EQ(2, c.max_nodes);
  ASSERT_EQ(4, c.nproc);
  cfg_free(&c);
  /* elastic: the rendezvous endpoint, MASTER_* unused */
  ASSERT_EQ(0, parse(&c, ARGS("x"),
                     ENV("PET_NNODES=1:3", "PET_RDZV_ENDPOINT=pj-master-0:29400",
                         "PET_RDZV_ID=pj", "MASTER_ADDR=pj-master-0",
                         "MASTER_PORT=23456"),
                     err, sizeof(err)));
  ASSERT_EQ(CFG_BACKEND_C10D, c.backend);
  ASSERT_EQ(29400, c.endpoint_port);
  ASSERT_STR_EQ("pj", c.run_id);
  cfg_free(&c);
  /* MASTER_ADDR outside Kubeflow (no PET_NNODES) is not read */
  ASSERT_EQ(0, parse(&c, ARGS("x"), ENV("MASTER_ADDR=elsewhere"), err,
                     sizeof(err)));
  ASSERT_STR_EQ("127.0.0.1", c.endpoint_host);
  cfg_free(&c);
}

/* c's program and its arguments, joined by spaces. */
static const char *prog_line(const cfg_t *c, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < c->prog_argc && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " " : "",
                             c->prog_argv[i]);
  return buf;
}

/* The program's arguments are torchrun's (argparse REMAINDER, checked
 * against torchrun 1.13 and 2.15): a "--" right after the program is
 * argparse's and dropped, once; any other "--" is the program's. */
static void test_program_args(void) {
  static const char *const cases[][2] = {
      {"dump.py -- --foo x", "dump.py --foo x"},
      {"dump.py -- -- x", "dump.py -- x"},
      {"dump.py --", "dump.py"},
      {"dump.py --foo -- x", "dump.py --foo -- x"},
      {"dump.py x --", "dump.py x --"},
      {"-- dump.py -- --foo", "dump.py -- --foo"},
  };
  for (size_t i = 0; i < LU_ARRAY_SIZE(cases); i++) {
    char line[128], *args[16], *save = NULL, got[128];
    int n = 0;
    cfg_t c;
    char err[512];
    args[n++] = (char *)"--standalone";
    lu_strlcpy(line, cases[i][0], sizeof(line));
    for (char *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save))
      args[n++] = w;
    args[n] = NULL;
    ASSERT_EQ(0, parse(&c, (const char *const *)args, no_env, err, sizeof(err)));
    ASSERT_STR_EQ(cases[i][1], prog_line(&c, got, sizeof(got)));
    cfg_free(&c);
  }
}

int main(void) {
  test_precedence();
  test_program_args();
  test_binding_defaults();
  test_errors();
  test_conf_values();
  test_etcd_conf();
  test_torchrun_keys();
  test_sbatch_without_srun();
  test_hang();
  test_help();
  test_slurm();
  test_from_tasks();
  test_volcano();
  test_kubeflow();
  printf("test_config: ok\n");
  return 0;
}
