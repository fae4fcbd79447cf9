/* hang_worker.c - a worker for tests/test_hang.py: a training loop in
 * miniature over librdzv. Each step: rdzv_progress(step), then a barrier
 * of every rank (the "collective": a rank that stops holds the others).
 *
 *   hang_worker STEPS MODE DIR
 *
 * After its first progress report it writes its pid to DIR/pid.<round>.<rank>;
 * after the last step DIR/done.<round>.<rank>. A SIGUSR1 prints
 * "stack dump of rank R" on stderr (as faulthandler would) and goes on.
 * MODE, in round 0 only:
 *   run    nothing special
 *   spin   rank 1 spins without progress from step 5 (the others wait in
 *          the barrier)
 *   quiet  no rank reports progress; each sleeps STEPS x 100 ms, exits 0
 *   tie    rank 1 reports step 5, then sleeps (stuck in data loading): the
 *          others report step 5 too and wait in the barrier
 *   spoof  rank 0 first writes rank 1's keys as something other than its
 *          worker would (the TCPStore form without a tag, the native form
 *          with rank 0's own tag), then every rank starts reporting 3 s late
 *   stale  rank 0 first writes rank 1's TCPStore-form key as an earlier run
 *          would have left it, then as spin, every rank reporting 2 s late

 *   slow   every rank reports progress scalars (loss, step time, compute
 *          time); rank 1's compute time is 3x the others' (a straggler)
 *   mute   every rank reports steps 1-25 and exits 1; in the next round it
 *          reports nothing, sleeps STEPS x 100 ms and exits 0
 *   long   every rank reports a 260-byte PROGRESS map whose first field is
 *          200 bytes of a field of its own (the step comes after it), one
 *          step every 100 ms or so (no rank hangs) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv.h"

static int g_rank;

static void put_file(const char *dir, const char *what, int round, int rank,
                     long val) {
  char path[4096], tmp[4200];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s.%d.%d", dir, what, round, rank);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  if ((f = fopen(tmp, "w")) == NULL || fprintf(f, "%ld\n", val) < 0 ||
      fclose(f) != 0 || rename(tmp, path) != 0) {
    perror(path);
    exit(3);
  }
}

static void on_usr1(int sig) {
  char msg[64];
  int n = snprintf(msg, sizeof(msg), "stack dump of rank %d\n", g_rank);
  (void)sig;
  if (write(2, msg, (size_t)n) < 0)
    _exit(4);
}

/* The PROGRESS map (docs/events.md#progress) with a 200-byte field of the
 * writer's own first, the tag, step and time after it: msgpack by hand. */
static int progress_long(rdzv_client_t *c, int rank, long step) {
  unsigned char v[512];
  const char *tag = getenv("LAUNCH_PROGRESS_TAG");
  long long now = (long long)time(NULL) * 1000;
  size_t n = 0, tl = tag ? strlen(tag) : 0;
  char key[64];
  if (tl > 31)
    tl = 31;
  v[n++] = 0x84; /* a map of 4 */
  v[n++] = 0xa4;
  memcpy(v + n, "note", 4);
  n += 4;
  v[n++] = 0xd9; /* str 8 */
  v[n++] = 200;
  memset(v + n, 'x', 200);
  n += 200;
  v[n++] = 0xa3;
  memcpy(v + n, "tag", 3);
  n += 3;
  v[n++] = (unsigned char)(0xa0 | tl);
  memcpy(v + n, tag ? tag : "", tl);
  n += tl;
  v[n++] = 0xa4;
  memcpy(v + n, "step", 4);
  n += 4;
  v[n++] = 0xce; /* uint 32 */
  for (int i = 3; i >= 0; i--)
    v[n++] = (unsigned char)((unsigned long)step >> (8 * i));
  v[n++] = 0xa7;
  memcpy(v + n, "time_ms", 7);
  n += 7;
  v[n++] = 0xcf; /* uint 64 */
  for (int i = 7; i >= 0; i--)
    v[n++] = (unsigned char)((unsigned long long)now >> (8 * i));
  snprintf(key, sizeof(key), RDZV_PROGRESS_PREFIX "%d", rank);
  return rdzv_set(c, key, v, n, 10000);
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (v == NULL) {
    fprintf(stderr, "hang_worker: %s is not set: run me under launch\n", name);
    exit(2);
  }
  return atoi(v);
}

int main(int argc, char **argv) {
  rdzv_client_t *c = NULL;
  int steps, rank, world, round, rc;
  const char *mode, *dir;
  if (argc != 4) {
    fprintf(stderr, "usage: hang_worker STEPS run|spin|quiet|tie|spoof|stale|"
                    "slow|mute|long DIR\n");
    return 2;
  }
  steps = atoi(argv[1]);
  mode = argv[2];
  dir = argv[3];
  g_rank = rank = env_int("RANK");
  world = env_int("WORLD_SIZE");
  round = env_int("LAUNCH_ROUND");
  signal(SIGUSR1, on_usr1);
  if ((round == 0 && strcmp(mode, "quiet") == 0) ||
      (round > 0 && strcmp(mode, "mute") == 0)) {
    usleep((useconds_t)steps * 100000);
    put_file(dir, "done", round, rank, 0);
    return 0;
  }
  if ((rc = rdzv_connect_from_env(&c)) != 0) {
    fprintf(stderr, "hang_worker: connect: %s\n", rdzv_strerror(rc));
    return 1;
  }
  if (round == 0 && rank == 0 &&
      (strcmp(mode, "spoof") == 0 || strcmp(mode, "stale") == 0)) {
    const char *tag = getenv("LAUNCH_PROGRESS_TAG");
    char v[128];
    long long now = (long long)time(NULL) * 1000;
    int n;
    if (strcmp(mode, "spoof") == 0) {
      n = snprintf(v, sizeof(v), "1 %lld", now);
      rc = rdzv_set(c, "/" RDZV_PROGRESS_PREFIX "1", v, (size_t)n, 10000);
      n = snprintf(v, sizeof(v), "1 %lld %s", now, tag ? tag : "x");
      if (rc == 0)
        rc = rdzv_set(c, RDZV_PROGRESS_PREFIX "1", v, (size_t)n, 10000);
    } else {
      n = snprintf(v, sizeof(v), "3 %lld", now - 3600 * 1000);
      rc = rdzv_set(c, "/" RDZV_PROGRESS_PREFIX "1", v, (size_t)n, 10000);
    }
    if (rc != 0) {
      fprintf(stderr, "hang_worker: spoof: %s\n", rdzv_strerror(rc));
      return 1;
    }
  }
  if (round == 0)
    usleep(strcmp(mode, "spoof") == 0 ? 3000000
           : strcmp(mode, "stale") == 0 ? 2000000 : 0);
  for (int step = 1; step <= steps; step++) {
    char name[64];
    if (round == 0 && rank == 1 && step == 5 &&
        (strcmp(mode, "spin") == 0 || strcmp(mode, "stale") == 0))
      for (volatile unsigned long x = 0;; x++) /* a loop that never ends */
        ;
    rdzv_scalars_t sc = {RDZV_HAS_LOSS | RDZV_HAS_STEP_TIME |
                             RDZV_HAS_COMPUTE_TIME | RDZV_HAS_TOTAL_STEPS,
                         10.0 / step, 0, 0, 0.1, 0, steps,
                         rank == 1 ? 0.09 : 0.03};
    if (strcmp(mode, "slow") == 0)
      rc = rdzv_progress_ex(c, -1, step, &sc, 10000);
    else if (strcmp(mode, "long") == 0)
      rc = progress_long(c, rank, step);
    else
      rc = rdzv_progress(c, -1, step, 10000);
    if (rc != 0) {
      fprintf(stderr, "hang_worker: progress: %s\n", rdzv_strerror(rc));
      return 1;
    }
    if (step == 1)
      put_file(dir, "pid", round, rank, (long)getpid());
    if (step == 25 && strcmp(mode, "mute") == 0)
      return 1;
    if (round == 0 && rank == 1 && step == 5 && strcmp(mode, "tie") == 0)
      for (;;) /* a data loader that never returns */
        pause();
    snprintf(name, sizeof(name), "hw/%d/%d", round, step);
    if ((rc = rdzv_barrier(c, name, (uint32_t)world, 300000)) != 0) {
      fprintf(stderr, "hang_worker: barrier: %s\n", rdzv_strerror(rc));
      return 1;
    }
    usleep(100000);
  }
  put_file(dir, "done", round, rank, 0);
  rdzv_close(c);
  return 0;
}
