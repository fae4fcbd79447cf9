/* test_ckpt_crash.c - SIGKILL a checkpoint writer at random points of its
 * saves, 50 times, and demand an intact checkpoint every time (SQLite's
 * crash tests; STYLE.md 19):
 *  - `latest`, when it exists, names a step whose manifest and shards all
 *    verify (SHA-256);
 *  - the newest complete step is no older than `latest`;
 *  - the writer started again resumes from exactly that step and finds in
 *    every shard the bytes it saved (tests/ckpt_writer.c checks them).
 * The writer runs in turn as one rank the library finalises alone, three
 * ranks committing through a store (`launch server`), and three
 * ranks leaving completion files for an agent thread, so that kills land
 * in shard writes, fsyncs, renames, store commits, manifests, `latest`
 * updates, pruning and the agent's commits. */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ck_int.h"
#include "ckpt_test.h"
#include "test.h"

static pid_t store_pid;
static char store_ep[64];

#define KILLS 50

static const char *modes[3] = {"single", "store", "agent"};

static int64_t scan_resume(const char *dir, int *partial) {
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s;
  char err[512];
  int64_t r;
  struct stat st;
  o.layout = CKPT_LAYOUT_LAUNCH;
  o.flags = CKPT_SCAN_SHA;
  if (stat(dir, &st) != 0)
    return -1; /* before the first save */
  if (ckpt_scan(dir, &o, &s, err, sizeof(err)) != 0)
    TEST_FAIL("scan %s: %s", dir, err);
  r = s->resume >= 0 ? s->steps[s->resume].step : -1;
  /* A step newer than the resume step: the kill hit a save. */
  if (partial && s->resume != 0 && s->nsteps > 0)
    (*partial)++;
  ckpt_scan_free(s);
  return r;
}

static void check_invariants(const char *dir, int *partial) {
  char p[600], *text;
  int64_t latest = -1, resume;
  snprintf(p, sizeof(p), "%s/latest", dir);
  if ((text = test_read_file(p)) != NULL) {
    char problem[512] = "";
    if (ck_latest_decode(text, strlen(text), &latest) != 0)
      TEST_FAIL("%s holds \"%s\"", p, text);
    free(text);
    if (ckpt_verify_step(dir, latest, NULL, 0, problem, sizeof(problem)) != 0)
      TEST_FAIL("latest names step-%lld, which does not verify: %s",
                (long long)latest, problem);
  }
  resume = scan_resume(dir, partial);
  if (resume < latest)
    TEST_FAIL("resume step %lld is older than latest %lld", (long long)resume,
              (long long)latest);
}

/* Start the writer; wait until it said where it resumed from. */
static pid_t start_writer(const char *dir, const char *mode, int64_t gen,
                          int64_t steps, const char *log, int64_t expect) {
  char exe[512], g[32], n[32], size[32];
  const char *b = getenv("LAUNCH_BUILD_DIR");
  char want[64];
  uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(60000);
  pid_t pid;
  snprintf(exe, sizeof(exe), "%s/tests/ckpt_writer", b ? b : "build");
  snprintf(g, sizeof(g), "%lld", (long long)gen);
  snprintf(n, sizeof(n), "%lld", (long long)steps);
  /* The single rank's shards take the O_DIRECT writer (LAUNCH_CKPT_DIRECT=1,
   * 1 MiB and up; not a multiple of the block: the padded last chunk and
   * the cut), the others the page cache's (the default). */
  snprintf(size, sizeof(size), "%d",
           strcmp(mode, "single") == 0 ? (3 << 20) + 100 : 400000);
  {
    char *argv[] = {exe, (char *)dir, "--mode", (char *)mode, "--world", "3",
                    "--size", size, "--gen", g, "--steps", n,
                    "--endpoint", (char *)store_ep, NULL};
    if (strcmp(mode, "single") == 0)
      setenv("LAUNCH_CKPT_DIRECT", "1", 1);
    pid = test_spawn(argv, log);
    unsetenv("LAUNCH_CKPT_DIRECT");
  }
  if (expect >= 0)
    snprintf(want, sizeof(want), "resumed %lld ok\n", (long long)expect);
  else
    snprintf(want, sizeof(want), "fresh\n");
  for (;;) {
    char *out = test_read_file(log);
    int status;
    if (out && strstr(out, want)) {
      free(out);
      return pid;
    }
    if (out && (strstr(out, "resumed") || strstr(out, "fresh")))
      TEST_FAIL("%s writer (gen %lld) did not say \"%.*s\":\n%s", mode,
                (long long)gen, (int)strlen(want) - 1, want, out);
    if (waitpid(pid, &status, WNOHANG) == pid)
      TEST_FAIL("%s writer exited (status %d) before resuming:\n%s", mode,
                status, out ? out : "");
    free(out);
    if (lu_now_ms() > deadline)
      TEST_FAIL("%s writer did not resume in time", mode);
    usleep(2000);
  }
}

int main(void) {
  const char *root = test_tmpdir();
  char dirs[3][512], log[1024];
  int partial = 0;
  ckpt_test_store(&store_pid, store_ep, sizeof(store_ep));
  for (int m = 0; m < 3; m++)
    snprintf(dirs[m], sizeof(dirs[m]), "%s/%s", root, modes[m]);
  for (int i = 0; i < KILLS; i++) {
    int m = i % 3;
    int64_t expect = scan_resume(dirs[m], NULL);
    uint32_t r;
    pid_t pid;
    snprintf(log, sizeof(log), "%s/writer-%d.log", root, i);
    pid = start_writer(dirs[m], modes[m], i + 1, 1000000, log, expect);
    ASSERT_OK(lu_random(&r, sizeof(r)));
    usleep(r % 250000);
    test_kill(pid);
    check_invariants(dirs[m], &partial);
  }
  /* Every kill that left a step newer than the resume step landed inside
   * a save; with continuous saving, almost all do. */
  printf("%d of %d kills interrupted a save\n", partial, KILLS);
  ASSERT(partial > 0);
  /* And each writer can still finish cleanly. */
  for (int m = 0; m < 3; m++) {
    int64_t expect = scan_resume(dirs[m], NULL), end = expect + 4;
    int status;
    pid_t pid;
    char *l;
    snprintf(log, sizeof(log), "%s/final-%s.log", root, modes[m]);
    pid = start_writer(dirs[m], modes[m], 1000 + m, end, log, expect);
    status = test_wait(pid, test_ms(60000));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      TEST_FAIL("%s writer ended with status %d:\n%s", modes[m], status,
                test_read_file(log));
    check_invariants(dirs[m], NULL);
    ASSERT_EQ(end, scan_resume(dirs[m], NULL));
    {
      char lp[2048];
      snprintf(lp, sizeof(lp), "%s/latest", dirs[m]);
      l = test_read_file(lp);
    }
    ASSERT(l != NULL);
    {
      int64_t lt;
      ASSERT_OK(ck_latest_decode(l, strlen(l), &lt));
      ASSERT_EQ(end, lt);
    }
    free(l);
  }
  test_kill(store_pid);
  printf("ok\n");
  return 0;
}
