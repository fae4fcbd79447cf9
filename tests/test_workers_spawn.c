/* test_workers_spawn.c - what a worker gets from wk_start: exactly envp,
 * argv unchanged, PATH looked up in envp's PATH, its own session and group,
 * a parent death signal, default signals, no leaked fds; exit codes and
 * signals reported at once; exec failures as 127 with a message;
 * pre_exec; spec checks. */
#include <sys/resource.h>

#include "wk_test.h"

static uv_loop_t loop;

/* Run one worker per argv with a recorder; wait for all exits. */
static wk_group_t *run(wk_spec_t *s, wt_rec_t *r) {
  wk_group_t *g;
  memset(r, 0, sizeof(*r));
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, s, wt_on_exit, r));
  ASSERT(wt_wait_exits(&loop, r, s->nproc, 10000));
  wk_stop(g, SIGTERM, 1000, wt_on_done, r);
  ASSERT(wt_run_until(&loop, wt_is_done, r, 5000));
  return g;
}

static char *read_log(const char *dir, int rank, const char *name,
                      size_t *len) {
  char path[1024];
  char *data = NULL;
  snprintf(path, sizeof(path), "%s/%d/%s", dir, rank, name);
  if (lu_read_file(path, 64u << 20, &data, len) != 0)
    TEST_FAIL("cannot read %s", path);
  return data;
}

/* The worker's environment is envp, byte for byte (env -0 prints it), and
 * env is found through envp's PATH. */
static void test_env_exact(void) {
  char dir[512];
  char *env0[] = {"PATH=/usr/bin:/bin", "RANK=0", "EMPTY=", "A=b=c",
                  "SPACES=  two  words ", "UTF8=h\xc3\xa9llo", "NOEQUALS",
                  NULL};
  char *env1[] = {"PATH=/bin:/usr/bin", "RANK=1", NULL};
  char *const *envs[] = {env0, env1};
  char *argv[] = {"env", "-0", NULL};
  unsigned redir[] = {3, 3};
  wk_spec_t s = wt_spec(2, argv);
  wt_rec_t r;
  wk_group_t *g;
  snprintf(dir, sizeof(dir), "%s/env", test_tmpdir());
  s.envp = envs;
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  for (int rank = 0; rank < 2; rank++) {
    size_t len, at = 0;
    char *got = read_log(dir, rank, "stdout.log", &len);
    char *const *want = envs[rank];
    int k = 0;
    ASSERT_EQ(0, wt_exit_of(&r, rank)->exit_code);
    for (; want[k]; k++) {
      ASSERT(at < len);
      ASSERT_STR_EQ(want[k], got + at);
      at += strlen(got + at) + 1;
    }
    ASSERT_EQ(len, at);
    free(got);
  }
  wt_close(&loop, g);
}

/* /proc/self/environ has every entry, including one without '='. */
static void test_env_proc(void) {
  char dir[512];
  char *env0[] = {"PATH=/usr/bin:/bin", "NOEQUALS", "X=1", NULL};
  char *const *envs[] = {env0};
  char *argv[] = {"cat", "/proc/self/environ", NULL};
  unsigned redir[] = {3};
  wk_spec_t s = wt_spec(1, argv);
  wt_rec_t r;
  wk_group_t *g;
  size_t len;
  char *got;
  snprintf(dir, sizeof(dir), "%s/environ", test_tmpdir());
  s.envp = envs;
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  got = read_log(dir, 0, "stdout.log", &len);
  ASSERT_EQ(strlen("PATH=/usr/bin:/bin") + 1 + strlen("NOEQUALS") + 1 + 4,
            len);
  ASSERT_MEM_EQ(got, "PATH=/usr/bin:/bin\0NOEQUALS\0X=1\0", len);
  free(got);
  wt_close(&loop, g);
}

static void test_argv(void) {
  char dir[512];
  char *argv[] = {(char *)wt_helper("wk_child"), "args", "", "two words",
                  "*", "$HOME", "--local-rank=0", "\n", "'\"\\", "-",
                  "\xff\xfe", NULL};
  unsigned redir[] = {1};
  wk_spec_t s = wt_spec(1, argv);
  wt_rec_t r;
  wk_group_t *g;
  size_t len, at = 0;
  char *got;
  snprintf(dir, sizeof(dir), "%s/argv", test_tmpdir());
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  ASSERT_EQ(0, r.ex[0].exit_code);
  got = read_log(dir, 0, "stdout.log", &len);
  for (int i = 2; argv[i]; i++) {
    ASSERT(at < len);
    ASSERT_STR_EQ(argv[i], got + at);
    at += strlen(argv[i]) + 1;
  }
  ASSERT_EQ(len, at);
  free(got);
  wt_close(&loop, g);
}

/* A bare name is looked up in envp's PATH: a tool only in a directory that
 * the test's own PATH lacks runs; with a PATH that lacks /usr/bin and
 * /bin, "env" is not found even though the agent's PATH has it. */
static void test_path_from_envp(void) {
  char bindir[512], tool[600], pathvar[600], dir[512];
  char *env0[] = {pathvar, NULL};
  char *env1[] = {"PATH=/nonexistent", NULL};
  char *const *envs[] = {env0, env1};
  char *argv0[] = {"launch-test-tool", "arg", NULL};
  char *argv1[] = {"env", NULL};
  unsigned redir[] = {3, 3};
  wk_spec_t s = wt_spec(1, argv0);
  wt_rec_t r;
  wk_group_t *g;
  FILE *f;
  size_t len;
  char *got;
  snprintf(bindir, sizeof(bindir), "%s/bin", test_tmpdir());
  snprintf(tool, sizeof(tool), "%s/launch-test-tool", bindir);
  snprintf(pathvar, sizeof(pathvar), "PATH=/nonexistent::%s", bindir);
  snprintf(dir, sizeof(dir), "%s/path", test_tmpdir());
  ASSERT_EQ(0, mkdir(bindir, 0755));
  /* No "#!": execvp semantics run it with /bin/sh (ENOEXEC fallback). */
  ASSERT((f = fopen(tool, "w")) != NULL);
  fputs("echo \"tool ran with $1\"\nexit 4\n", f);
  fclose(f);
  ASSERT_EQ(0, chmod(tool, 0755));
  s.envp = envs;
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  ASSERT_EQ(4, r.ex[0].exit_code);
  got = read_log(dir, 0, "stdout.log", &len);
  ASSERT_STR_EQ("tool ran with arg\n", got);
  free(got);
  wt_close(&loop, g);

  s = wt_spec(1, argv1);
  s.envp = envs + 1;
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  ASSERT_EQ(127, r.ex[0].exit_code);
  got = read_log(dir, 0, "stderr.log", &len);
  ASSERT_STR_EQ("launch: cannot execute 'env': No such file or directory\n",
                got);
  free(got);
  wt_close(&loop, g);
}

/* Exit codes and signals, each reported at once (no polling interval):
 * the worker writes the time it exits, the report must follow within
 * 250 ms even under sanitizers. */
static void test_exits(void) {
  char stamp[512], script[2048];
  char *a0[] = {"/bin/sh", "-c", script, NULL};
  char *a1[] = {"/bin/sh", "-c", "kill -SEGV $$", NULL};
  char *a2[] = {"/bin/sh", "-c", "kill -KILL $$", NULL};
  char *a3[] = {"/bin/sh", "-c", "exit 0", NULL};
  char **argvs[] = {a0, a1, a2, a3};
  int codes[] = {3, -1, -1, 0}, sigs[] = {0, SIGSEGV, SIGKILL, 0};
  snprintf(stamp, sizeof(stamp), "%s/stamp", test_tmpdir());
  snprintf(script, sizeof(script),
           "sleep 0.2; date +%%s.%%N > %s.tmp && mv %s.tmp %s; exit 3", stamp,
           stamp, stamp);
  for (int i = 0; i < 4; i++) {
    wk_spec_t s = wt_spec(1, argvs[i]);
    wt_rec_t r;
    wk_group_t *g;
    double t0 = lu_wall_s();
    s.pipe_output = 1;
    g = run(&s, &r);
    ASSERT_EQ(1, r.n);
    ASSERT_EQ(codes[i], r.ex[0].exit_code);
    ASSERT_EQ(sigs[i], r.ex[0].signal);
    ASSERT_EQ(0, r.ex[0].local_rank);
    ASSERT(r.ex[0].pid > 0);
    ASSERT_EQ(r.ex[0].pid, wk_pid(g, 0));
    ASSERT(r.ex[0].wall_s >= t0 && r.ex[0].wall_s <= lu_wall_s());
    ASSERT_EQ(0, wk_live(g));
    if (i == 0) {
      char *t = test_read_file(stamp);
      double died;
      ASSERT(t != NULL);
      died = strtod(t, NULL);
      free(t);
      if (r.ex[0].wall_s - died > 0.25 * test_ms(1))
        TEST_FAIL("exit reported %.3f s after the worker exited",
                  r.ex[0].wall_s - died);
    }
    wt_close(&loop, g);
  }
}

/* exec failures: 127, the message on the worker's stderr (here in its
 * tail), reported like any exit. */
static void test_exec_fail(void) {
  char noexec[600];
  char *a0[] = {"/nonexistent/prog", NULL};
  char *a1[] = {"launch-no-such-command-xyz", NULL};
  char *a2[] = {noexec, NULL};
  char *a3[] = {"", NULL};
  char **argvs[] = {a0, a1, a2, a3};
  const char *want[] = {
      "launch: cannot execute '/nonexistent/prog': No such file or directory",
      "launch: cannot execute 'launch-no-such-command-xyz': No such file or "
      "directory",
      NULL, "launch: cannot execute '': No such file or directory"};
  char want2[800];
  FILE *f;
  snprintf(noexec, sizeof(noexec), "%s/not-executable", test_tmpdir());
  ASSERT((f = fopen(noexec, "w")) != NULL);
  fputs("echo hi\n", f);
  fclose(f);
  snprintf(want2, sizeof(want2),
           "launch: cannot execute '%s': Permission denied", noexec);
  want[2] = want2;
  for (int i = 0; i < 4; i++) {
    wk_spec_t s = wt_spec(1, argvs[i]);
    wt_rec_t r;
    wk_group_t *g;
    s.pipe_output = 1;
    s.tail_lines = 5;
    /* The message must not reach the test's console. */
    s.console = (const unsigned char *)"\0";
    g = run(&s, &r);
    ASSERT_EQ(127, r.ex[0].exit_code);
    ASSERT_EQ(0, r.ex[0].signal);
    ASSERT_STR_EQ(want[i], r.tail[0]);
    ASSERT_STR_EQ(want[i], wk_tail(g, 0));
    wt_close(&loop, g);
  }
}

/* Own session and group, PDEATHSIG, nothing blocked or ignored although
 * the agent blocks and ignores signals, and only fds 0, 1, 2. */
static void test_child_state(void) {
  char dir[512], want[64];
  char *argv[] = {(char *)wt_helper("wk_child"), "state", NULL};
  unsigned redir[] = {1};
  wk_spec_t s = wt_spec(1, argv);
  wt_rec_t r;
  wk_group_t *g;
  sigset_t set, old;
  size_t len;
  char *got;
  int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
  ASSERT(leak >= 3);
  signal(SIGUSR1, SIG_IGN);
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_BLOCK, &set, &old);
  snprintf(dir, sizeof(dir), "%s/state", test_tmpdir());
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  g = run(&s, &r);
  sigprocmask(SIG_SETMASK, &old, NULL);
  signal(SIGUSR1, SIG_DFL);
  close(leak);
  ASSERT_EQ(0, r.ex[0].exit_code);
  got = read_log(dir, 0, "stdout.log", &len);
  snprintf(want, sizeof(want), "pid=%d pgid=%d sid=%d ", (int)r.ex[0].pid,
           (int)r.ex[0].pid, (int)r.ex[0].pid);
  ASSERT_CONTAINS(got, want);
  ASSERT_CONTAINS(got, "pdeathsig=9 ");
  ASSERT_CONTAINS(got, "blocked=0 ignored=0 ");
  ASSERT_CONTAINS(got, "fds= 0 1 2\n");
  free(got);
  wt_close(&loop, g);
}

static int pre_ok(int local_rank, void *arg, char *errbuf, size_t errlen) {
  /* Async-signal-safe: write(2) lands in the worker's stdout pipe. */
  static const char msg[] = "pre_exec ran\n";
  (void)errbuf;
  (void)errlen;
  (void)arg;
  if (local_rank == 1) {
    const char *e = "binding local rank 1 failed: no such NUMA node";
    size_t i = 0;
    for (; e[i] && i + 1 < errlen; i++)
      errbuf[i] = e[i];
    errbuf[i] = '\0';
    return -1;
  }
  (void)!write(1, msg, sizeof(msg) - 1);
  return 0;
}

static void test_pre_exec(void) {
  char dir[512];
  char *argv[] = {"/bin/echo", "main", NULL};
  unsigned redir[] = {3, 3};
  wk_spec_t s = wt_spec(2, argv);
  wt_rec_t r;
  wk_group_t *g;
  size_t len;
  char *got;
  snprintf(dir, sizeof(dir), "%s/pre", test_tmpdir());
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = dir;
  s.pre_exec = pre_ok;
  s.tail_lines = 3;
  g = run(&s, &r);
  ASSERT_EQ(0, wt_exit_of(&r, 0)->exit_code);
  got = read_log(dir, 0, "stdout.log", &len);
  ASSERT_STR_EQ("pre_exec ran\nmain\n", got);
  free(got);
  ASSERT_EQ(127, wt_exit_of(&r, 1)->exit_code);
  got = read_log(dir, 1, "stderr.log", &len);
  ASSERT_STR_EQ("launch: binding local rank 1 failed: no such NUMA node\n",
                got);
  free(got);
  ASSERT_STR_EQ("launch: binding local rank 1 failed: no such NUMA node",
                wk_tail(g, 1));
  wt_close(&loop, g);
}

/* Bad specs are refused without starting anything; a running attempt
 * refuses a second start; pipe_output 0 works (the workers inherit fd 1/2);
 * a failed log directory fails the start and starts nothing. */
static void test_spec_checks(void) {
  char *argv[] = {"/bin/sleep", "10", NULL};
  char *empty[] = {NULL};
  char bad_dir[600];
  wk_spec_t s = wt_spec(2, argv);
  unsigned redir[] = {1, 1};
  wk_group_t *g;
  wt_rec_t r;
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  s.nproc = 0;
  ASSERT_EQ(RDZV_EINVAL, wk_start(g, &s, wt_on_exit, &r));
  s.nproc = 2;
  s.argv = empty;
  ASSERT_EQ(RDZV_EINVAL, wk_start(g, &s, wt_on_exit, &r));
  s.argv = argv;
  s.size = 8;
  ASSERT_EQ(RDZV_EINVAL, wk_start(g, &s, wt_on_exit, &r));
  s.size = sizeof(s);
  /* A log directory under a regular file cannot be made. */
  snprintf(bad_dir, sizeof(bad_dir), "%s/afile", test_tmpdir());
  fclose(fopen(bad_dir, "w"));
  strcat(bad_dir, "/logs");
  s.pipe_output = 1;
  s.redirects = redir;
  s.attempt_dir = bad_dir;
  ASSERT_EQ(-ENOTDIR, wk_start(g, &s, wt_on_exit, &r));
  ASSERT_EQ(0, wk_live(g));
  s.pipe_output = 0;
  s.redirects = NULL;
  s.attempt_dir = NULL;
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT_EQ(2, wk_live(g));
  ASSERT_EQ(-EBUSY, wk_start(g, &s, wt_on_exit, &r));
  wk_stop(g, SIGTERM, 5000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT_EQ(2, r.n);
  ASSERT_EQ(SIGTERM, r.ex[0].signal);
  ASSERT_EQ(SIGTERM, r.ex[1].signal);
  wt_close(&loop, g);
}

int main(void) {
  int fds;
  struct rlimit nocore = {0, 0};
  signal(SIGPIPE, SIG_IGN);
  /* The SIGSEGV case must not leave core files behind. */
  setrlimit(RLIMIT_CORE, &nocore);
  fds = test_fd_count();
  test_tmpdir();
  ASSERT_EQ(0, uv_loop_init(&loop));
  test_env_exact();
  test_env_proc();
  test_argv();
  test_path_from_envp();
  test_exits();
  test_exec_fail();
  test_child_state();
  test_pre_exec();
  test_spec_checks();
  ASSERT_EQ(0, uv_loop_close(&loop));
  ASSERT_EQ(fds, test_fd_count());
  printf("test_workers_spawn: ok\n");
  return 0;
}
