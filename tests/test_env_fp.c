/* test_env_fp.c - the node fingerprint: what goes in (templated values as
 * their template), serialise/parse round trip, strict parsing of wire
 * input, the diff naming the differing items and nodes, SHA-256. */
#include <sys/stat.h>

#include "env.h"
#include "test.h"

static env_t *rank_env(const char *hca, const char *algo) {
  prof_t *p = NULL;
  env_t *e = NULL;
  char err[256], text[256], lh[64];
  const char *launch[] = {lh, NULL};
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  char *base[] = {"HOSTNAME=whatever", "NCCL_SOCKET_IFNAME=eth0", NULL};
  snprintf(text, sizeof(text), "NCCL_IB_HCA==${LAUNCH_HCA}:1\nNCCL_ALGO=%s\n", algo);
  snprintf(lh, sizeof(lh), "LAUNCH_HCA=%s", hca);
  ASSERT_EQ(0, prof_parse(text, strlen(text), "site", &p, err, sizeof(err)));
  o.base = base;
  o.launch = launch;
  o.profile = p;
  ASSERT_EQ(0, env_build_rank(&o, &e));
  prof_free(p);
  return e;
}

static env_fp_t *collect(const env_t *e, const char *driver, const char *prog) {
  env_fp_input_t in = ENV_FP_INPUT_INIT;
  const char *files[] = {prog, NULL};
  env_fp_t *fp = NULL;
  char err[256];
  in.env = e;
  in.profile = "site";
  in.driver = driver;
  in.cuda_driver = 12040;
  in.cuda_runtime = 12010;
  in.nccl = 22809;
  in.gpu_model = "NVIDIA H200";
  in.gpu_count = 8;
  in.files = prog ? files : NULL;
  ASSERT_EQ(0, env_fp_collect(&in, &fp, err, sizeof(err)));
  return fp;
}

static char *write_file(const char *name, const char *text) {
  static char path[512];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), name);
  ASSERT((f = fopen(path, "w")) != NULL);
  fputs(text, f);
  fclose(f);
  return path;
}

static void test_sha256(void) {
  char hex[65];
  ASSERT_EQ(0, env_sha256_file(write_file("abc", "abc"), hex));
  ASSERT_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  ASSERT_EQ(0, env_sha256_file(write_file("empty", ""), hex));
  ASSERT_STR_EQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ASSERT_EQ(-ENOENT, env_sha256_file("/nonexistent/train.py", hex));
  /* Issue #24: a FIFO or a device in place of a program is refused at
   * once, never waited on or read for ever. */
  {
    char fifo[600];
    snprintf(fifo, sizeof(fifo), "%s/fifo.py", test_tmpdir());
    ASSERT_EQ(0, mkfifo(fifo, 0600));
    ASSERT_EQ(RDZV_ENOTREG, env_sha256_file(fifo, hex));
    ASSERT_EQ(RDZV_ENOTREG, env_sha256_file("/dev/zero", hex));
  }
}

static void test_contents(void) {
  env_t *e = rank_env("mlx5_0", "Tree");
  env_fp_t *fp = collect(e, "550.54.15", write_file("train.py", "print(1)\n"));
  /* templated: the template, not this rank's HCA */
  ASSERT_STR_EQ(env_fp_get(fp, "env.NCCL_IB_HCA"), "=${LAUNCH_HCA}:1");
  ASSERT_STR_EQ(env_fp_get(fp, "env.NCCL_ALGO"), "Tree");
  ASSERT_STR_EQ(env_fp_get(fp, "env.NCCL_SOCKET_IFNAME"), "eth0"); /* inherited */
  ASSERT_STR_EQ(env_fp_get(fp, "env.NCCL_NVLS_ENABLE"), "0");
  ASSERT_STR_EQ(env_fp_get(fp, "driver"), "550.54.15");
  ASSERT_STR_EQ(env_fp_get(fp, "cuda.driver"), "12.4");
  ASSERT_STR_EQ(env_fp_get(fp, "cuda.runtime"), "12.1");
  ASSERT_STR_EQ(env_fp_get(fp, "nccl"), "2.28.9");
  ASSERT_STR_EQ(env_fp_get(fp, "gpu.count"), "8");
  ASSERT_STR_EQ(env_fp_get(fp, "profile"), "site");
  ASSERT(env_fp_get(fp, "sha256.train.py") != NULL);
  /* what may differ between nodes is not in it (seed 001 §92) */
  ASSERT(env_fp_get(fp, "env.HOSTNAME") == NULL);
  ASSERT(env_fp_get(fp, "env.LAUNCH_HCA") == NULL);
  for (int i = 1; i < env_fp_count(fp); i++)
    ASSERT(strcmp(env_fp_key(fp, i - 1), env_fp_key(fp, i)) < 0);
  env_fp_free(fp);
  env_free(e);
}

static void test_roundtrip_and_parse(void) {
  env_t *e = rank_env("mlx5_0", "Tree");
  env_fp_t *fp = collect(e, "550.54.15\nx\\y", NULL), *back = NULL;
  char *text = NULL, *again = NULL;
  size_t len = 0, len2 = 0;
  ASSERT_EQ(0, env_fp_serialize(fp, &text, &len));
  ASSERT_EQ(0, strncmp(text, "launch-fingerprint 1\n", 21));
  ASSERT_CONTAINS(text, "driver=550.54.15\\nx\\\\y\n"); /* escaped */
  ASSERT_EQ(0, env_fp_parse(text, len, &back));
  ASSERT_EQ(env_fp_count(fp), env_fp_count(back));
  ASSERT_STR_EQ(env_fp_get(back, "driver"), "550.54.15\nx\\y");
  ASSERT_EQ(0, env_fp_serialize(back, &again, &len2));
  ASSERT_EQ(len, len2);
  ASSERT_MEM_EQ(text, again, len);
  free(text);
  free(again);
  env_fp_free(back);
  env_fp_free(fp);
  env_free(e);

  /* wire input is checked, never trusted */
  {
    static const char *const bad[] = {
        "",
        "launch-fingerprint 2\na=b\n",
        "launch-fingerprint 1\nnoequals\n",
        "launch-fingerprint 1\n=value\n",
        "launch-fingerprint 1\na=b\na=c\n",
        "launch-fingerprint 1\na=b", /* no final newline */
        "launch-fingerprint 1\na=bad\\escape\n",
    };
    for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++) {
      env_fp_t *x = (env_fp_t *)1;
      ASSERT_EQ(RDZV_EPROTO, env_fp_parse(bad[i], strlen(bad[i]), &x));
      ASSERT(x == NULL);
    }
    {
      env_fp_t *x = NULL;
      ASSERT_EQ(0, env_fp_parse("launch-fingerprint 1\n", 21, &x));
      ASSERT_EQ(0, env_fp_count(x));
      env_fp_free(x);
    }
  }
}

static void test_diff(void) {
  env_t *e0 = rank_env("mlx5_0", "Tree"), *e1 = rank_env("mlx5_1", "Tree"),
        *e2 = rank_env("mlx5_0", "Tree"), *e3 = rank_env("mlx5_1", "Ring");
  env_fp_t *fp[4];
  const char *names[] = {"node0", "node1", "node2", "node3"};
  char *report = NULL;
  fp[0] = collect(e0, "550.54.15", NULL);
  fp[1] = collect(e1, "550.54.15", NULL);
  fp[2] = collect(e2, "550.54.15", NULL);
  fp[3] = collect(e3, "535.104.05", NULL);
  /* different HCA names alone are no difference */
  ASSERT_EQ(0, env_fp_diff((const env_fp_t *const *)fp, names, 3, &report));
  ASSERT_STR_EQ(report, "");
  free(report);
  ASSERT_EQ(2, env_fp_diff((const env_fp_t *const *)fp, names, 4, &report));
  ASSERT_CONTAINS(report, "NCCL_ALGO: node0=Tree (+2 nodes) node3=Ring\n");
  ASSERT_CONTAINS(report, "driver: node0=550.54.15 (+2 nodes) node3=535.104.05\n");
  free(report);
  /* an item only some nodes have */
  {
    env_fp_input_t in = ENV_FP_INPUT_INIT;
    const char *extra[] = {"torch=2.4.1", NULL};
    env_fp_t *x = NULL;
    env_fp_t *pair[2];
    const char *n2[] = {"gpu01", "gpu02"};
    char err[64];
    in.env = e0;
    in.extra = extra;
    ASSERT_EQ(0, env_fp_collect(&in, &x, err, sizeof(err)));
    pair[0] = x;
    pair[1] = fp[0];
    ASSERT(env_fp_diff((const env_fp_t *const *)pair, n2, 2, &report) >= 1);
    ASSERT_CONTAINS(report, "torch: gpu01=2.4.1 gpu02=(unset)\n");
    free(report);
    env_fp_free(x);
  }
  for (int i = 0; i < 4; i++)
    env_fp_free(fp[i]);
  env_free(e0);
  env_free(e1);
  env_free(e2);
  env_free(e3);
}

static void test_missing_program(void) {
  env_fp_input_t in = ENV_FP_INPUT_INIT;
  const char *files[] = {"/nonexistent/train.bin", NULL};
  env_fp_t *fp = (env_fp_t *)1;
  char err[256] = "";
  in.files = files;
  ASSERT_EQ(-ENOENT, env_fp_collect(&in, &fp, err, sizeof(err)));
  ASSERT(fp == NULL);
  ASSERT_CONTAINS(err, "cannot hash /nonexistent/train.bin");
}

int main(void) {
  int fds = test_fd_count();
  test_sha256();
  test_contents();
  test_roundtrip_and_parse();
  test_diff();
  test_missing_program();
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
