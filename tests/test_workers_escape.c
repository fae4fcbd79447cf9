/* test_workers_escape.c - processes that leave their worker's process
 * group die with it all the same (issue #11). A helper agent
 * (wk_agent_helper) runs a worker that starts a sleeper in a session of
 * its own (setsid) or as a daemon (fork, setsid, fork: orphaned too), then
 * waits or exits 0. The sleeper must be gone after a kill -9 of the agent,
 * after its SIGTERM, and after the worker's normal exit ends the job; with
 * the containment the machine allows (cgroup v2 here when it may) and with
 * the subreaper fallback. On a build without containment every case
 * fails: group signals never reach a sleeper in another session. */
#include <sys/stat.h>

#include "wk_test.h"

static int cases;

/* The helper's containment, "cgroup" or "subreaper". */
static void mode_of(const char *pidfile, char *out, size_t n) {
  char path[700], *s;
  snprintf(path, sizeof(path), "%s.mode", pidfile);
  s = test_read_file(path);
  ASSERT(s != NULL);
  s[strcspn(s, "\n")] = '\0';
  snprintf(out, n, "%s", s);
  free(s);
}

static void one(int subreaper, const char *how, const char *end) {
  char tag[64], pidfile[600], file[600], log[600], mode[32] = "";
  char *argv[16];
  pid_t helper, worker, sleeper;
  int a = 0, status;
  snprintf(tag, sizeof(tag), "%s-%s-%s", subreaper ? "s" : "a", how, end);
  snprintf(pidfile, sizeof(pidfile), "%s/%s.pids", test_tmpdir(), tag);
  snprintf(file, sizeof(file), "%s/%s.sleeper", test_tmpdir(), tag);
  snprintf(log, sizeof(log), "%s/%s.log", test_tmpdir(), tag);
  argv[a++] = (char *)wt_helper("wk_agent_helper");
  if (subreaper)
    argv[a++] = "-s";
  if (strcmp(end, "exit") == 0)
    argv[a++] = "-x";
  argv[a++] = pidfile;
  argv[a++] = "1";
  argv[a++] = (char *)wt_helper("wk_child");
  argv[a++] = "escape";
  argv[a++] = (char *)how;
  argv[a++] = file;
  argv[a++] = strcmp(end, "exit") == 0 ? "exit" : "wait";
  argv[a] = NULL;
  helper = test_spawn(argv, log);
  worker = wt_read_pid(NULL, pidfile, 10000);
  if (worker <= 0) {
    char *l = test_read_file(log);
    TEST_FAIL("%s: the helper did not start its worker: %s", tag, l ? l : "");
  }
  mode_of(pidfile, mode, sizeof(mode));
  if (subreaper)
    ASSERT_STR_EQ("subreaper", mode);
  sleeper = wt_read_pid(NULL, file, 10000);
  if (sleeper <= 0)
    TEST_FAIL("%s: the worker did not start its sleeper (log %s)", tag, log);
  ASSERT(getsid(sleeper) != getsid(worker) || !wt_alive(worker));
  if (strcmp(end, "kill9") == 0) {
    /* The subreaper's /proc scan runs once a second while workers run:
     * give it that, this test is about what happens after. */
    if (strcmp(mode, "subreaper") == 0 || strcmp(how, "cgdaemon") == 0)
      usleep((useconds_t)test_ms(1600) * 1000);
    ASSERT_EQ(0, kill(helper, SIGKILL));
    status = test_wait(helper, test_ms(5000));
    ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  } else if (strcmp(end, "term") == 0) {
    ASSERT_EQ(0, kill(helper, SIGTERM));
    status = test_wait(helper, test_ms(5000));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      TEST_FAIL("%s: helper status %#x after SIGTERM (log %s)", tag, status, log);
  } else {
    status = test_wait(helper, test_ms(5000));
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      TEST_FAIL("%s: helper status %#x after the worker's exit (log %s)", tag,
                status, log);
  }
  if (!wt_gone(sleeper, 3000)) {
    kill(sleeper, SIGKILL);
    TEST_FAIL("%s (%s): the escaped sleeper %d outlived the end (%s)", tag,
              mode, (int)sleeper, end);
  }
  if (strcmp(how, "subcg") == 0) {
    /* The sub-cgroups the worker made went with it, deepest first. */
    char cgf[700], *top;
    struct stat sb;
    snprintf(cgf, sizeof(cgf), "%s.cg", file);
    ASSERT((top = test_read_file(cgf)) != NULL);
    top[strcspn(top, "\n")] = '\0';
    for (int t = 0; t < test_ms(3000) && stat(top, &sb) == 0; t += 10)
      usleep(10000);
    if (stat(top, &sb) == 0)
      TEST_FAIL("%s (%s): the worker's sub-cgroup %s is left behind", tag,
                mode, top);
    free(top);
  }
  printf("%-28s %-9s: the escaped sleeper is gone\n", tag, mode);
  cases++;
}

/* Issue #24, as root with cgroup v2 only: a root worker's daemon that
 * moves itself into the root cgroup, and one in sub-cgroups its worker
 * made, are gone after each end, and so are the sub-cgroups. RET the cases
 * run, 0 when skipped. */
static int cgroup_escapes(void) {
  static const char *const ends[] = {"kill9", "term", "exit"};
  char probe[600], mode[32];
  int before = cases;
  if (geteuid() != 0) {
    printf("cgroup escapes: skipped (not root)\n");
    return 0;
  }
  snprintf(probe, sizeof(probe), "%s/a-setsid-exit.pids", test_tmpdir());
  mode_of(probe, mode, sizeof(mode));
  if (strcmp(mode, "cgroup") != 0) {
    printf("cgroup escapes: skipped (containment here: %s)\n", mode);
    return 0;
  }
  for (size_t e = 0; e < 3; e++) {
    one(0, "cgdaemon", ends[e]);
    one(0, "subcg", ends[e]);
  }
  return cases - before;
}

int main(void) {
  static const char *const hows[] = {"setsid", "daemon"};
  static const char *const ends[] = {"kill9", "term", "exit"};
  int status;
  signal(SIGPIPE, SIG_IGN);
  /* Orphans come here when the agent is gone, so that wt_gone can see
   * them die (and reap them). */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  test_tmpdir();
  for (int sr = 0; sr < 2; sr++)
    for (size_t h = 0; h < 2; h++)
      for (size_t e = 0; e < 3; e++)
        one(sr, hows[h], ends[e]);
  ASSERT_EQ(12, cases);
  cases -= cgroup_escapes();
  ASSERT_EQ(12, cases);
  while (waitpid(-1, &status, WNOHANG) > 0)
    ;
  test_cleanup();
  printf("test_workers_escape: ok\n");
  return 0;
}
