/* test_workers_orphans.c - workers die with their agent. A helper agent
 * (wk_agent_helper) starts workers; SIGKILL of the helper must take the
 * workers (PR_SET_PDEATHSIG) and their own children (the guardian) within
 * a second or two; SIGTERM of the helper must stop them and let it exit 0. */
#include <dirent.h>

#include "wk_test.h"

/* Pids the helper wrote, one per line. RET how many. */
static int read_pids(const char *path, pid_t *pids, int max) {
  uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(10000);
  char *s = NULL;
  int n = 0;
  while ((s = test_read_file(path)) == NULL && lu_now_ms() < deadline)
    usleep(2000);
  if (s == NULL)
    TEST_FAIL("helper did not write %s", path);
  for (char *p = s; *p && n < max;) {
    pids[n++] = (pid_t)strtol(p, &p, 10);
    while (*p == '\n')
      p++;
  }
  free(s);
  return n;
}

/* Start the helper with NPROC workers running `script` under sh.
 * OUT pids of the workers. RET helper pid. */
static pid_t start_helper(const char *tag, int nproc, const char *script,
                          pid_t *pids) {
  char pidfile[600], n[16], log[600];
  char *argv[] = {(char *)wt_helper("wk_agent_helper"), pidfile, n,
                  "/bin/sh", "-c", (char *)script, NULL};
  pid_t helper;
  snprintf(pidfile, sizeof(pidfile), "%s/%s.pids", test_tmpdir(), tag);
  snprintf(log, sizeof(log), "%s/%s.log", test_tmpdir(), tag);
  snprintf(n, sizeof(n), "%d", nproc);
  helper = test_spawn(argv, log);
  ASSERT_EQ(nproc, read_pids(pidfile, pids, nproc));
  for (int i = 0; i < nproc; i++)
    ASSERT(pids[i] > 0 && wt_alive(pids[i]));
  return helper;
}

/* Grandchild pids written by the workers' shells: <tmp>/<tag>.gc.<pid>. */
static pid_t grandchild(const char *tag, pid_t worker) {
  char path[700];
  snprintf(path, sizeof(path), "%s/%s.gc.%d", test_tmpdir(), tag,
           (int)worker);
  return wt_read_pid(NULL, path, 5000);
}

static void test_kill9(void) {
  char script[1024];
  pid_t pids[3], gc[3], helper;
  int status;
  double t0;
  snprintf(script, sizeof(script),
           "sleep 1000 & echo $! > %s/k9.gc.$$.tmp; "
           "mv %s/k9.gc.$$.tmp %s/k9.gc.$$; wait",
           test_tmpdir(), test_tmpdir(), test_tmpdir());
  helper = start_helper("k9", 3, script, pids);
  for (int i = 0; i < 3; i++) {
    gc[i] = grandchild("k9", pids[i]);
    ASSERT(gc[i] > 0 && wt_alive(gc[i]));
  }
  t0 = lu_wall_s();
  ASSERT_EQ(0, kill(helper, SIGKILL));
  status = test_wait(helper, test_ms(5000));
  ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (int i = 0; i < 3; i++) {
    if (!wt_gone(pids[i], 2000))
      TEST_FAIL("worker %d outlived its SIGKILLed agent", (int)pids[i]);
    if (!wt_gone(gc[i], 2000))
      TEST_FAIL("worker's child %d outlived the SIGKILLed agent",
                (int)gc[i]);
  }
  printf("kill -9 of the agent: workers and their children gone after "
         "%.3f s\n", lu_wall_s() - t0);
}

/* A plain worker (exec'd sleep) under SIGKILL: PR_SET_PDEATHSIG alone
 * ends it; as this process is a subreaper, the orphan comes here and we
 * see how it died. */
static int runs_sleep(pid_t pid) {
  char path[64];
  char *comm;
  int yes;
  snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
  comm = test_read_file(path);
  yes = comm && strcmp(comm, "sleep\n") == 0;
  free(comm);
  return yes;
}

/* The helper's child that is not one of its workers: the guardian. */
static pid_t find_guardian(pid_t helper, const pid_t *workers, int n) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;
  ASSERT(d != NULL);
  while ((e = readdir(d)) != NULL) {
    char path[300], *stat, *rp;
    pid_t pid = (pid_t)atoi(e->d_name), ppid;
    int worker = 0;
    if (pid <= 0)
      continue;
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    if ((stat = test_read_file(path)) == NULL)
      continue;
    rp = strrchr(stat, ')');
    ppid = rp ? (pid_t)atoi(rp + 4) : 0; /* ") S PPID" */
    free(stat);
    for (int i = 0; i < n; i++)
      worker |= workers[i] == pid;
    if (ppid == helper && !worker)
      found = pid;
  }
  closedir(d);
  return found;
}

static void test_kill9_plain(void) {
  pid_t pids[2], helper, guardian;
  helper = start_helper("plain", 2, "exec sleep 1000", pids);
  /* Without the guardian, PR_SET_PDEATHSIG alone must end the workers:
   * kill it first (the helper reaps it and logs that it is gone). */
  guardian = find_guardian(helper, pids, 2);
  ASSERT(guardian > 0);
  ASSERT_EQ(0, kill(guardian, SIGKILL));
  ASSERT(wt_gone(guardian, 2000));
  /* Killed before the exec, a worker exits 127 itself (its parent is not
   * the agent any more); the case here is the running worker. */
  for (int i = 0; i < 2; i++) {
    uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(5000);
    while (!runs_sleep(pids[i]) && lu_now_ms() < deadline)
      usleep(2000);
    ASSERT(runs_sleep(pids[i]));
  }
  ASSERT_EQ(0, kill(helper, SIGKILL));
  test_wait(helper, test_ms(5000));
  for (int i = 0; i < 2; i++) {
    uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(2000);
    int status = 0;
    pid_t r;
    while ((r = waitpid(pids[i], &status, WNOHANG)) == 0 &&
           lu_now_ms() < deadline)
      usleep(2000);
    if (r == pids[i]) {
      if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        TEST_FAIL("worker %d: status %#x, not SIGKILL", (int)pids[i],
                  status);
    } else {
      /* Reaped by someone else; it must be gone all the same. */
      ASSERT(wt_gone(pids[i], 100));
    }
  }
}

static void test_term(void) {
  char script[1024];
  pid_t pids[2], gc[2], helper;
  int status;
  snprintf(script, sizeof(script),
           "sleep 1000 & echo $! > %s/t.gc.$$.tmp; "
           "mv %s/t.gc.$$.tmp %s/t.gc.$$; wait",
           test_tmpdir(), test_tmpdir(), test_tmpdir());
  helper = start_helper("t", 2, script, pids);
  for (int i = 0; i < 2; i++)
    ASSERT((gc[i] = grandchild("t", pids[i])) > 0);
  ASSERT_EQ(0, kill(helper, SIGTERM));
  status = test_wait(helper, test_ms(5000));
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    TEST_FAIL("helper did not exit 0 after SIGTERM (status %#x)", status);
  for (int i = 0; i < 2; i++) {
    ASSERT(wt_gone(pids[i], 100));
    ASSERT(wt_gone(gc[i], 1000));
  }
}

int main(void) {
  int status;
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  test_tmpdir();
  test_kill9();
  test_kill9_plain();
  test_term();
  /* The guardians of killed helpers and orphaned grandchildren came to
   * this process (subreaper): reap them. Test-only. */
  while (waitpid(-1, &status, WNOHANG) > 0)
    ;
  printf("test_workers_orphans: ok\n");
  return 0;
}
