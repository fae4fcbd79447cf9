/* ckpt_writer.c - a trainer that only checkpoints, for the crash tests.
 *
 *   ckpt_writer DIR --mode single|store|agent [--world W] [--steps N]
 *               [--size BYTES] [--gen G] [--endpoint HOST:PORT]
 *
 * Rank r's state at step s is a byte pattern both sides can compute. On
 * start it does what launch does before spawning workers (except in
 * single mode, where the library alone decides): finds the newest step
 * whose shards all verify, rolls the directory back to it, and hands it to
 * the ranks as LAUNCH_RESUME_STEP. Each rank loads its shard of that step
 * and checks every byte, prints "resumed STEP ok" (or "fresh"), then saves
 * steps STEP+1 .. N:
 *   single  one rank, the library finalises (saves alternate between
 *           ckpt_save and ckpt_save_async);
 *   store   W rank threads committing through the store at ENDPOINT,
 *           background saves;
 *   agent   W rank threads leaving completion files, and an agent thread
 *           running ckpt_agent_scan_commit meanwhile.
 * Exit 0 when done, 3 when a resumed shard does not hold what was saved. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"

typedef struct {
  const char *dir, *mode, *endpoint;
  int world;
  int64_t steps, gen;
  size_t size;
} args_t;

static args_t A;
static volatile int ranks_left;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&out_mu);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
  pthread_mutex_unlock(&out_mu);
}

static void fill(unsigned char *b, size_t n, int64_t s, int r) {
  uint32_t x = (uint32_t)(s * 2654435761u) ^ (uint32_t)(r * 40503u + 1);
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = (unsigned char)x;
  }
}

static size_t shard_size(int rank) { return A.size + 4096u * (size_t)rank; }

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg, rc;
  ckpt_options_t o = CKPT_OPTIONS_INIT;
  rdzv_client_t *cl = NULL;
  ckpt_t *c;
  size_t n = shard_size(rank);
  unsigned char *buf = malloc(n), *want = malloc(n);
  int64_t step;
  if (strcmp(A.mode, "store") == 0) {
    rdzv_options_t ro = RDZV_OPTIONS_INIT;
    ro.endpoint = A.endpoint;
    ro.job = "crash";
    if ((rc = rdzv_connect(&ro, &cl)) != 0) {
      fprintf(stderr, "connect: %s\n", rdzv_strerror(rc));
      exit(1);
    }
  }
  o.dir = A.dir;
  o.job = "crash";
  o.rank = rank;
  o.world_size = A.world;
  o.local_rank = rank;
  o.generation = A.gen;
  o.keep = 3;
  o.client = cl;
  if ((rc = ckpt_open(&o, &c)) != 0)
    exit(1);
  if ((rc = ckpt_resume_step(c, &step)) != 0) {
    fprintf(stderr, "resume: %s\n", ckpt_strerror(rc));
    exit(1);
  }
  if (step >= 0) {
    struct iovec iov = {buf, n};
    if ((rc = ckpt_load(c, step, &iov, 1)) != 0) {
      say("resumed %lld FAILED %s\n", (long long)step, ckpt_strerror(rc));
      exit(3);
    }
    fill(want, n, step, rank);
    if (memcmp(buf, want, n) != 0) {
      say("resumed %lld BAD rank %d\n", (long long)step, rank);
      exit(3);
    }
    if (rank == 0)
      say("resumed %lld ok\n", (long long)step);
  } else if (rank == 0) {
    say("fresh\n");
  }
  for (int64_t s = step + 1; s <= A.steps; s++) {
    struct iovec iov = {buf, n};
    /* The buffer is reused: the previous background save must be done. */
    if ((rc = ckpt_wait(c, -1)) != 0) {
      fprintf(stderr, "rank %d: save failed: %s\n", rank, ckpt_strerror(rc));
      exit(1);
    }
    fill(buf, n, s, rank);
    rc = (s % 2 == 0 || strcmp(A.mode, "single") != 0)
             ? ckpt_save_async(c, s, &iov, 1)
             : ckpt_save(c, s, &iov, 1);
    if (rc != 0) {
      fprintf(stderr, "rank %d step %lld: %s\n", rank, (long long)s,
              ckpt_strerror(rc));
      exit(1);
    }
    if (rank == 0)
      say("saving %lld\n", (long long)s);
  }
  if ((rc = ckpt_wait(c, -1)) != 0)
    exit(1);
  ckpt_close(c);
  rdzv_close(cl);
  free(buf);
  free(want);
  __atomic_sub_fetch(&ranks_left, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void *agent_main(void *arg) {
  ckpt_commit_options_t o = CKPT_COMMIT_OPTIONS_INIT;
  char err[512];
  int64_t fin;
  (void)arg;
  o.dir = A.dir;
  o.job = "crash";
  o.world_size = A.world;
  o.generation = A.gen;
  o.keep = 3;
  for (;;) {
    int last = __atomic_load_n(&ranks_left, __ATOMIC_SEQ_CST) == 0;
    if (ckpt_agent_scan_commit(&o, &fin, err, sizeof(err)) != 0) {
      fprintf(stderr, "agent: %s\n", err);
      exit(1);
    }
    if (err[0])
      fprintf(stderr, "agent: %s\n", err);
    if (last)
      return NULL;
    usleep(2000);
  }
}

/* What launch does before it spawns the workers. */
static void agree_and_roll_back(void) {
  ckpt_scan_options_t so = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s;
  char err[512], num[32] = "";
  so.layout = CKPT_LAYOUT_LAUNCH;
  so.flags = CKPT_SCAN_SHA | CKPT_SCAN_NEWEST_COMPLETE;
  int rc = ckpt_scan(A.dir, &so, &s, err, sizeof(err));
  if (rc == -ENOENT) {
    setenv("LAUNCH_RESUME_STEP", "", 1); /* no directory yet: fresh */
    return;
  }
  if (rc != 0) {
    fprintf(stderr, "scan: %s\n", err);
    exit(1);
  }
  if (s->resume >= 0)
    snprintf(num, sizeof(num), "%lld", (long long)s->steps[s->resume].step);
  if (ckpt_rollback(A.dir, s->resume >= 0 ? s->steps[s->resume].step : -1,
                    err, sizeof(err)) != 0) {
    fprintf(stderr, "rollback: %s\n", err);
    exit(1);
  }
  setenv("LAUNCH_RESUME_STEP", num, 1);
  ckpt_scan_free(s);
}

int main(int argc, char **argv) {
  pthread_t t[64], ag;
  if (argc < 2) {
    fprintf(stderr, "usage: ckpt_writer DIR --mode M [--world W] [--steps N] "
                    "[--size B] [--gen G] [--endpoint E]\n");
    return 2;
  }
  A.dir = argv[1];
  A.mode = "single";
  A.world = 1;
  A.steps = 1000000;
  A.size = 1 << 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--mode") == 0)
      A.mode = argv[i + 1];
    else if (strcmp(argv[i], "--world") == 0)
      A.world = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--steps") == 0)
      A.steps = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--size") == 0)
      A.size = (size_t)atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--gen") == 0)
      A.gen = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--endpoint") == 0)
      A.endpoint = argv[i + 1];
  }
  if (strcmp(A.mode, "single") == 0) {
    /* The library alone decides, by scanning. */
    unsetenv("LAUNCH_RESUME_STEP");
    A.world = 1;
  } else {
    agree_and_roll_back();
  }
  if (A.world < 1 || A.world > 64)
    return 2;
  ranks_left = A.world;
  for (int r = 0; r < A.world; r++)
    pthread_create(&t[r], NULL, rank_main, (void *)(intptr_t)r);
  if (strcmp(A.mode, "agent") == 0)
    pthread_create(&ag, NULL, agent_main, NULL);
  for (int r = 0; r < A.world; r++)
    pthread_join(t[r], NULL);
  if (strcmp(A.mode, "agent") == 0)
    pthread_join(ag, NULL);
  say("done\n");
  return 0;
}
