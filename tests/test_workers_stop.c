/* test_workers_stop.c - stopping workers: SIGTERM then SIGKILL after the
 * grace period, the process-group kill reaching a worker's own child, a
 * second stop escalating, done from the loop when nothing runs, signal
 * forwarding, restarting after a stop, closing with workers still live. */
#include "wk_test.h"

static uv_loop_t loop;

typedef struct ready_s {
  wk_group_t *g;
  int n;
} ready_t;

static int all_ready(void *arg) {
  ready_t *r = arg;
  for (int i = 0; i < r->n; i++) {
    char path[600];
    snprintf(path, sizeof(path), "%s/ready.%d", test_tmpdir(),
             (int)wk_pid(r->g, i));
    if (access(path, F_OK) != 0)
      return 0;
  }
  return 1;
}

/* Wait until the first n workers touched <tmp>/ready.<pid>. */
static int wt_wait_ready(uv_loop_t *l, wk_group_t *g, int n) {
  ready_t r = {g, n};
  return wt_run_until(l, all_ready, &r, 5000);
}

/* Reap the orphans that came to this process (a subreaper): grandchildren
 * killed with their group. Test-only: the library never waits for -1. */
static void reap_orphans(void) {
  int status;
  while (waitpid(-1, &status, WNOHANG) > 0)
    ;
}

/* A worker that ignores SIGTERM (sh and its sleep both inherit the
 * ignore) dies by SIGKILL once the grace period ends, not before. */
static void test_term_then_kill(void) {
  char script[1024];
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  wk_spec_t s = wt_spec(2, argv);
  wt_rec_t r;
  wk_group_t *g;
  double t0;
  snprintf(script, sizeof(script),
           "trap '' TERM; touch %s/ready.$$; sleep 100; exit 0",
           test_tmpdir());
  memset(&r, 0, sizeof(r));
  s.pipe_output = 1;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  /* sh has installed the trap once it touched its file. */
  ASSERT(wt_wait_ready(&loop, g, 2));
  t0 = lu_wall_s();
  wk_stop(g, SIGTERM, 400, wt_on_done, &r);
  ASSERT_EQ(0, r.done); /* never from inside the call */
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT_EQ(2, r.n);
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ(SIGKILL, r.ex[i].signal);
    ASSERT_EQ(-1, r.ex[i].exit_code);
    ASSERT(r.ex[i].wall_s - t0 >= 0.39);
  }
  ASSERT(r.done_at - t0 < 0.4 + 1.0 * test_ms(1));
  ASSERT_EQ(1, r.done);
  ASSERT_EQ(0, wk_live(g));
  wt_close(&loop, g);
}

/* A worker that honours SIGTERM is not kept waiting for the grace. */
static void test_term_quick(void) {
  char *argv[] = {"/bin/sleep", "100", NULL};
  wk_spec_t s = wt_spec(3, argv);
  wt_rec_t r;
  wk_group_t *g;
  double t0;
  memset(&r, 0, sizeof(r));
  s.pipe_output = 1;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT_EQ(3, wk_live(g));
  t0 = lu_wall_s();
  wk_stop(g, SIGTERM, 30000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT(lu_wall_s() - t0 < 2.0);
  ASSERT_EQ(3, r.n);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(SIGTERM, r.ex[i].signal);
  wt_close(&loop, g);
}

/* sh starts sleep in the background and waits: after wk_stop the
 * grandchild is gone too (same process group); a second worker's
 * grandchild outlives its sh (sh exits on its own, the grandchild keeps
 * the pipe): the stop still reaches it through the group. */
static void test_group_kill(void) {
  char gp0[512], gp1[512], s0[2048], s1[2048];
  char *a0[] = {"/bin/sh", "-c", s0, NULL};
  wk_spec_t s = wt_spec(1, a0);
  wt_rec_t r;
  wk_group_t *g;
  pid_t g0, g1;
  snprintf(gp0, sizeof(gp0), "%s/grandchild0", test_tmpdir());
  snprintf(gp1, sizeof(gp1), "%s/grandchild1", test_tmpdir());
  snprintf(s0, sizeof(s0),
           "sleep 100 & echo $! > %s.tmp; mv %s.tmp %s; wait", gp0, gp0, gp0);
  snprintf(s1, sizeof(s1),
           "sleep 100 & echo $! > %s.tmp; mv %s.tmp %s; exit 5", gp1, gp1,
           gp1);

  memset(&r, 0, sizeof(r));
  s.pipe_output = 1;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  g0 = wt_read_pid(&loop, gp0, 5000);
  ASSERT(g0 > 0 && wt_alive(g0));
  wk_stop(g, SIGTERM, 2000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT_EQ(SIGTERM, r.ex[0].signal);
  ASSERT(wt_gone(g0, 1000));
  wt_close(&loop, g);

  /* The leader exits 5 first; its child holds the pipes. */
  a0[2] = s1;
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT(wt_wait_exits(&loop, &r, 1, 5000));
  ASSERT_EQ(5, r.ex[0].exit_code);
  g1 = wt_read_pid(&loop, gp1, 5000);
  ASSERT(g1 > 0 && wt_alive(g1));
  wk_stop(g, SIGTERM, 2000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT(wt_gone(g1, 1000));
  wt_close(&loop, g);
}

/* A second stop while the grace runs sends SIGKILL at once. */
static void test_escalate(void) {
  char script[1024];
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  wk_spec_t s = wt_spec(1, argv);
  wt_rec_t r;
  wk_group_t *g;
  double t0;
  snprintf(script, sizeof(script),
           "trap '' TERM INT; touch %s/ready.$$; sleep 100", test_tmpdir());
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT(wt_wait_ready(&loop, g, 1));
  t0 = lu_wall_s();
  wk_stop(g, SIGINT, 60000, wt_on_done, &r);
  wt_run_until(&loop, wt_is_done, &r, 200);
  ASSERT_EQ(0, r.n); /* SIGINT ignored, still waiting for the grace */
  wk_stop(g, SIGINT, 60000, NULL, NULL);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT_EQ(SIGKILL, r.ex[0].signal);
  ASSERT(lu_wall_s() - t0 < 3.0);
  ASSERT_EQ(1, r.done);
  wt_close(&loop, g);
}

/* Nothing running: done comes from the loop, not from inside wk_stop. */
static void test_stop_idle(void) {
  wk_group_t *g;
  wt_rec_t r;
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  wk_stop(g, SIGTERM, 1000, wt_on_done, &r);
  ASSERT_EQ(0, r.done);
  uv_run(&loop, UV_RUN_DEFAULT); /* returns: nothing holds the loop */
  ASSERT_EQ(1, r.done);
  wt_close(&loop, g);
}

/* wk_signal forwards a signal to the whole group; the worker's trap runs
 * and it exits with its own code; then a restart in the same group. */
static void test_signal_and_restart(void) {
  char ready[512], script[2048];
  char *argv[] = {"/bin/sh", "-c", script, NULL};
  wk_spec_t s = wt_spec(1, argv);
  wt_rec_t r;
  wk_group_t *g;
  pid_t first;
  snprintf(ready, sizeof(ready), "%s/ready", test_tmpdir());
  snprintf(script, sizeof(script),
           "trap 'exit 42' USR1; echo $$ > %s.tmp; mv %s.tmp %s; "
           "sleep 100 & wait",
           ready, ready, ready);
  memset(&r, 0, sizeof(r));
  s.pipe_output = 1;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT(wt_read_pid(&loop, ready, 5000) == wk_pid(g, 0));
  first = wk_pid(g, 0);
  wk_signal(g, SIGUSR1);
  ASSERT(wt_wait_exits(&loop, &r, 1, 5000));
  ASSERT_EQ(42, r.ex[0].exit_code);
  wk_stop(g, SIGTERM, 1000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));

  /* Restart: a new attempt in the same group. */
  unlink(ready);
  memset(&r, 0, sizeof(r));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  ASSERT(wk_pid(g, 0) != first);
  ASSERT(wt_read_pid(&loop, ready, 5000) == wk_pid(g, 0));
  wk_stop(g, SIGTERM, 1000, wt_on_done, &r);
  ASSERT(wt_run_until(&loop, wt_is_done, &r, 5000));
  ASSERT_EQ(SIGTERM, r.ex[0].signal);
  wt_close(&loop, g);
}

/* Closing with workers still live (a contract violation) leaves none. */
static void test_close_live(void) {
  char *argv[] = {"/bin/sleep", "100", NULL};
  wk_spec_t s = wt_spec(2, argv);
  wt_rec_t r;
  wk_group_t *g;
  pid_t p0, p1;
  memset(&r, 0, sizeof(r));
  s.pipe_output = 1;
  ASSERT_EQ(0, wk_group_new(&loop, &g));
  ASSERT_EQ(0, wk_start(g, &s, wt_on_exit, &r));
  p0 = wk_pid(g, 0);
  p1 = wk_pid(g, 1);
  wt_close(&loop, g);
  ASSERT(wt_gone(p0, 1000));
  ASSERT(wt_gone(p1, 1000));
}

int main(void) {
  int fds;
  signal(SIGPIPE, SIG_IGN);
  /* Orphaned grandchildren come to this process, so that wt_gone can
   * reap them and see them gone (PID 1 of a container may not reap). */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  fds = test_fd_count();
  test_tmpdir();
  ASSERT_EQ(0, uv_loop_init(&loop));
  test_term_then_kill();
  test_term_quick();
  test_group_kill();
  test_escalate();
  test_stop_idle();
  test_signal_and_restart();
  test_close_live();
  reap_orphans();
  ASSERT_EQ(0, uv_loop_close(&loop));
  ASSERT_EQ(fds, test_fd_count());
  printf("test_workers_stop: ok\n");
  return 0;
}
