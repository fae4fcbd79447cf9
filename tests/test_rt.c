/* The runtime's CPU collectives (rt.h): 4 worker processes on a store of
 * our own, as launch would start them. The all-reduce sums every element
 * in rank order (bitwise that of accumulating the ranks one after the
 * other), for sizes below, at and far above the rank count; broadcast,
 * barrier, the gradient buckets reported segment by segment or not at all,
 * host floats, the progress key (step 0 from rt_init, then rate-limited); a rank that dies makes the others fail
 * with a message naming it instead of hanging; stray connections to rank
 * 0's listener (one silent, one with a wrong hello, one closed at once)
 * while the others start late delay nothing and fail nothing; a
 * malformed environment and a job of one outside launch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"
#include "test.h"

#define WORLD 4

/* Rank r's value of element i: magnitudes far apart, so that any other
 * summation order gives other bits for many elements. */
static float value(int r, size_t i) {
  uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return ldexpf((float)(h & 0xffff) / 65536.0f - 0.5f, (int)(h >> 28) * 3 - 20);
}

static float rank_order_sum(size_t i) {
  float acc = value(0, i);
  for (int r = 1; r < WORLD; r++)
    acc += value(r, i);
  return acc;
}

static void check_allreduce(rt_t *rt, size_t n) {
  int me = rt_rank(rt);
  size_t other_order = 0;
  float *buf = malloc((n ? n : 1) * sizeof(float));
  ASSERT(buf != NULL);
  for (size_t i = 0; i < n; i++)
    buf[i] = value(me, i);
  ASSERT_EQ(0, rt_allreduce(rt, buf, n, RT_FP32));
  for (size_t i = 0; i < n; i++) {
    float want = rank_order_sum(i), rev = value(WORLD - 1, i);
    for (int r = WORLD - 2; r >= 0; r--)
      rev += value(r, i);
    if (memcmp(&want, &buf[i], sizeof(float)) != 0)
      TEST_FAIL("rank %d: element %zu of %zu is %.9g, the rank-order sum "
                "%.9g", me, i, n, (double)buf[i], (double)want);
    other_order += rev != want;
  }
  /* the check can tell orders apart */
  if (n > 1000)
    ASSERT(other_order > n / 100);
  free(buf);
}

/* Reduce-scatter then all-gather with uneven parts (one empty, one that
 * starts past 0, one of several of the mesh's pieces of 2^18 floats, the
 * others of fewer): each rank's part is the rank-order sum after the first,
 * every part on every rank after the second; outside the parts buf is
 * left alone. */
static void check_reduce_scatter(rt_t *rt) {
  size_t part[WORLD + 1] = {5, 1005, 1005, 600000, 700001}, n = 700010;
  int me = rt_rank(rt);
  float *buf = malloc(n * sizeof(float));
  ASSERT(buf != NULL);
  for (size_t i = 0; i < n; i++)
    buf[i] = value(me, i);
  ASSERT_EQ(0, rt_reduce_scatter(rt, buf, part, RT_FP32));
  for (size_t i = part[me]; i < part[me + 1]; i++) {
    float want = rank_order_sum(i);
    if (memcmp(&want, &buf[i], sizeof(float)) != 0)
      TEST_FAIL("rank %d: reduce-scatter element %zu is %.9g, the rank-order "
                "sum %.9g", me, i, (double)buf[i], (double)want);
  }
  ASSERT_EQ(0, rt_allgather(rt, buf, part, sizeof(float)));
  for (size_t i = 0; i < n; i++) {
    float want = i < part[0] || i >= part[WORLD] ? value(me, i)
                                                 : rank_order_sum(i);
    if (memcmp(&want, &buf[i], sizeof(float)) != 0)
      TEST_FAIL("rank %d: all-gather element %zu is %.9g, not %.9g", me, i,
                (double)buf[i], (double)want);
  }
  part[2] = 0; /* not ascending */
  ASSERT_EQ(RDZV_EINVAL, rt_reduce_scatter(rt, buf, part, RT_FP32));
  ASSERT_EQ(RDZV_EINVAL, rt_allgather(rt, buf, part, sizeof(float)));
  free(buf);
}

/* Segments laid out as gpt.h's: segment 0 highest in memory. Step 1
 * reports them (or not: rt_grads_wait() does it then), step 2 starts from
 * equal buffers on every rank. shard: reduce-scattered (rt_grads_shard)
 * into parts cut inside segments, one empty: only this rank's part is
 * checked. */
static void check_grads(rt_t *rt, int report, int shard) {
  enum { NSEG = 5 };
  size_t off[NSEG], cnt[NSEG] = {1000, 3, 70000, 1, 513}, n = 0;
  float *g;
  int me = rt_rank(rt);
  for (int s = NSEG - 1; s >= 0; s--) {
    off[s] = n;
    n += cnt[s];
  }
  size_t part[WORLD + 1] = {0, 600, 600, 40001, n}, lo = 0, hi = n;
  g = malloc(n * sizeof(float));
  ASSERT(g != NULL);
  for (size_t i = 0; i < n; i++)
    g[i] = value(me, i);
  ASSERT_EQ(0, rt_grads_register(rt, g, RT_FP32, NSEG, off, cnt));
  if (shard) {
    ASSERT_EQ(0, rt_grads_shard(rt, part));
    lo = part[me];
    hi = part[me + 1];
  }
  for (int step = 0; step < 2; step++) {
    for (int s = 0; s < NSEG && report; s++)
      ASSERT_EQ(0, rt_grads_ready(rt, s, NULL));
    if (report) /* twice in one step */
      ASSERT(rt_grads_ready(rt, 0, NULL) < 0);
    ASSERT_EQ(0, rt_grads_wait(rt));
    for (size_t i = lo; i < hi; i++) {
      float want = step == 0 ? rank_order_sum(i) : (float)(i % 7) * 4.0f;
      if (memcmp(&want, &g[i], sizeof(float)) != 0)
        TEST_FAIL("rank %d step %d: gradient %zu is %.9g, want %.9g", me, step,
                  i, (double)g[i], (double)want);
    }
    for (size_t i = 0; i < n; i++)
      g[i] = (float)(i % 7);
  }
  if (shard) {
    part[1] = n + 1; /* not ascending */
    ASSERT_EQ(RDZV_EINVAL, rt_grads_shard(rt, part));
    ASSERT_EQ(0, rt_grads_shard(rt, NULL));
  }
  free(g);
}

/* The step in this rank's progress key ("<step> <unix ms>", the time
 * checked against this process' clock). */
static long long progress_step(rt_t *rt) {
  char key[64], tail = 0;
  void *v = NULL;
  size_t len = 0;
  long long step = -1, ms = -1;
  struct timespec ts;
  snprintf(key, sizeof(key), "launch/progress/%d", rt_rank(rt));
  ASSERT_EQ(0, rdzv_get(rt_store(rt), key, &v, &len, 5000));
  ASSERT_EQ(2, sscanf(v, "%lld %lld%c", &step, &ms, &tail));
  clock_gettime(CLOCK_REALTIME, &ts);
  ASSERT(ms > (long long)ts.tv_sec * 1000 - 600000 &&
         ms <= (long long)ts.tv_sec * 1000 + 1000);
  rdzv_free(v);
  return step;
}

static int worker(const char *mode) {
  rt_options_t o = RT_OPTIONS_INIT;
  rt_t *rt = NULL;
  int me;
  o.device = RT_DEVICE_CPU;
  o.timeout_ms = test_ms(20000);
  o.progress_ms = 0;
  if (strcmp(mode, "stray") == 0) {
    /* rank 0 listens first: the strays reach it before the others */
    if (atoi(getenv("RANK")) > 0)
      sleep(2);
    ASSERT_EQ(0, rt_init(&o, &rt));
    check_allreduce(rt, 1000003);
    rt_finalize(rt);
    return 0;
  }
  if (strcmp(mode, "buckets") == 0) {
    o.bucket_bytes = 64 << 10;
    o.progress_ms = 600000; /* no report after rt_init's */
  }
  ASSERT_EQ(0, rt_init(&o, &rt));
  me = rt_rank(rt);
  ASSERT_EQ(0, progress_step(rt)); /* rt_init reported step 0 */
  ASSERT_EQ(WORLD, rt_world_size(rt));
  ASSERT_EQ(me, rt_local_rank(rt));
  ASSERT_EQ(atoi(getenv("LAUNCH_ROUND")), rt_round(rt));
  ASSERT_EQ(-1, rt_device(rt));
  ASSERT_STR_EQ("cpu", rt_device_name(rt));
  ASSERT_STR_EQ("hostx", rt_host(rt));
  if (strcmp(mode, "die") == 0) {
    /* rank 1 leaves; the others must fail, not hang */
    float x[100000] = {0};
    int rc;
    if (me == 1)
      _exit(0);
    rc = rt_allreduce(rt, x, 100000, RT_FP32);
    ASSERT(rc < 0);
    /* and so does every later collective, at once */
    ASSERT_EQ(rc, rt_allreduce(rt, x, 10, RT_FP32));
    rt_finalize(rt);
    return 3;
  }
  check_allreduce(rt, 0);
  check_allreduce(rt, 1);
  check_allreduce(rt, 3);
  check_allreduce(rt, 4);
  check_allreduce(rt, 1000003);
  check_reduce_scatter(rt);
  {
    char msg[40000];
    for (size_t i = 0; i < sizeof(msg); i++)
      msg[i] = me == 2 ? (char)(i * 31) : 0;
    ASSERT_EQ(0, rt_broadcast(rt, msg, sizeof(msg), 2));
    for (size_t i = 0; i < sizeof(msg); i++)
      ASSERT(msg[i] == (char)(i * 31));
    ASSERT(rt_broadcast(rt, msg, 1, WORLD) < 0);
  }
  ASSERT_EQ(0, rt_barrier(rt));
  check_grads(rt, 1, 0);
  check_grads(rt, 0, 0);
  check_grads(rt, 1, 1);
  check_grads(rt, 0, 1);
  check_grads(rt, 1, 0); /* the all-reduce again */
  {
    float h[2] = {(float)me, 1.0f};
    ASSERT_EQ(0, rt_allreduce_host(rt, h, 2));
    ASSERT(h[0] == 6.0f && h[1] == 4.0f);
  }
  ASSERT(rt_allreduce(rt, &(float){0}, 1, RT_BF16) < 0); /* CPU: fp32 only */
  ASSERT_EQ(0, rt_progress(rt, 42));
  ASSERT_EQ(o.progress_ms ? 0 : 42, progress_step(rt));
  ASSERT_EQ(0, rt_barrier(rt));
  rt_finalize(rt);
  return 0;
}

/* Connections to rank 0's listener that are not a rank's: one that says
 * nothing, one with a hello of the wrong nonce, one closed at once.
 * OUT fd[0..1], open (close them after the run). */
static void stray_connections(int *fd) {
  rdzv_client_t *c = NULL;
  void *v = NULL;
  size_t len = 0;
  char addr[64];
  int port = 0;
  uint32_t bad[6] = {0x52544d32u, 1, 5, 0, 1, 2}; /* the hello, nonce 2^33+1 */
  ASSERT_EQ(0, rdzv_connect_from_env(&c));
  ASSERT_EQ(0, rdzv_get(c, "rt/5/addr/0", &v, &len, test_ms(10000)));
  ASSERT_EQ(2, sscanf(v, "%63s %d", addr, &port));
  ASSERT_STR_EQ("127.0.0.1", addr);
  rdzv_free(v);
  rdzv_close(c);
  fd[0] = test_connect(port);
  fd[1] = test_connect(port);
  ASSERT_EQ(0, test_send_all(fd[1], bad, sizeof(bad)));
  close(test_connect(port));
}

/* Start WORLD workers in `mode`; RET their exit codes in codes[]. */
static void run(const char *mode, int *codes, char logs[][512]) {
  pid_t pid[WORLD];
  int stray[2] = {-1, -1};
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT(k > 0);
  self[k] = '\0';
  for (int r = 0; r < WORLD; r++) {
    char *argv[] = {self, "worker", (char *)mode, NULL};
    char v[16];
    snprintf(v, sizeof(v), "%d", r);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(logs[r], 512, "%s/%s-%d.log", test_tmpdir(), mode, r);
    pid[r] = test_spawn(argv, logs[r]);
  }
  if (strcmp(mode, "stray") == 0)
    stray_connections(stray);
  for (int r = 0; r < WORLD; r++) {
    int st = test_wait(pid[r], test_ms(120000));
    if (st == -1)
      TEST_FAIL("%s: rank %d did not finish: %s", mode, r,
                test_read_file(logs[r]));
    codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  for (int i = 0; i < 2; i++)
    if (stray[i] >= 0)
      close(stray[i]);
}

int main(int argc, char **argv) {
  int codes[WORLD];
  char logs[WORLD][512];
  rt_t *rt = NULL;
  if (argc == 3 && strcmp(argv[1], "worker") == 0)
    return worker(argv[2]);

  /* a job of one, outside launch */
  unsetenv("RANK");
  ASSERT_EQ(0, rt_init(NULL, &rt));
  ASSERT_EQ(0, rt_rank(rt));
  ASSERT_EQ(1, rt_world_size(rt));
  ASSERT(rt_store(rt) == NULL);
  {
    float x[3] = {1, 2, 3};
    ASSERT_EQ(0, rt_allreduce(rt, x, 3, RT_FP32));
    ASSERT(x[0] == 1 && x[1] == 2 && x[2] == 3);
    ASSERT_EQ(0, rt_barrier(rt));
    ASSERT_EQ(0, rt_progress(rt, 1));
  }
  rt_finalize(rt);
  rt_finalize(NULL);
  /* malformed environments */
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  ASSERT_EQ(RDZV_EINVAL, rt_init(NULL, &rt));
  setenv("RANK", "x", 1);
  ASSERT_EQ(RDZV_EINVAL, rt_init(NULL, &rt));
  ASSERT(rt == NULL);

  test_server_start(NULL);
  setenv("LAUNCH_RDZV_ENDPOINT", test_server_endpoint(), 1);
  setenv("LAUNCH_RDZV_ID", "test_rt", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("LAUNCH_ROUND", "3", 1);
  setenv("LAUNCH_HOSTNAME", "hostx", 1);
  run("all", codes, logs);
  for (int r = 0; r < WORLD; r++)
    if (codes[r] != 0)
      TEST_FAIL("rank %d exited with %d: %s", r, codes[r], test_read_file(logs[r]));
  printf("  4 ranks: all-reduce in rank order, broadcast, barrier, gradient "
         "segments, progress\n");
  run("buckets", codes, logs);
  for (int r = 0; r < WORLD; r++)
    if (codes[r] != 0)
      TEST_FAIL("buckets: rank %d exited with %d: %s", r, codes[r],
                test_read_file(logs[r]));
  printf("  the same with 64 KiB buckets\n");
  /* a new round: new keys, no stale addresses */
  setenv("LAUNCH_ROUND", "4", 1);
  run("die", codes, logs);
  setenv("LAUNCH_ROUND", "3", 1);
  ASSERT_EQ(0, codes[1]);
  for (int r = 0; r < WORLD; r++) {
    if (r == 1)
      continue;
    if (codes[r] != 3)
      TEST_FAIL("rank %d: exit %d after its peer died: %s", r, codes[r],
                test_read_file(logs[r]));
  }
  /* the survivors name a rank that left (rank 1, or one that already
   * stopped because of it) */
  {
    char *log0 = test_read_file(logs[0]);
    ASSERT_CONTAINS(log0, "closed its connection");
    ASSERT_CONTAINS(log0, "rt: rank 0 on hostx:");
    free(log0);
  }
  printf("  a rank that dies: the others fail with its name\n");
  setenv("LAUNCH_ROUND", "5", 1);
  run("stray", codes, logs);
  for (int r = 0; r < WORLD; r++)
    if (codes[r] != 0)
      TEST_FAIL("stray connections: rank %d exited with %d: %s", r, codes[r],
                test_read_file(logs[r]));
  printf("  stray connections to rank 0 while the others start late: "
         "dropped\n");
  setenv("LAUNCH_ROUND", "3", 1);
  test_server_stop();
  printf("test_rt: ok\n");
  return 0;
}
