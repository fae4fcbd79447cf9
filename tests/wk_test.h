/* wk_test.h - helpers shared by the tests of launcher/workers.c: a recorder
 * of exits, running the loop until a condition holds, checking that a pid
 * is gone, capturing the console (fd 1 / fd 2) into a file. Static
 * functions: each test file is its own program. */
#ifndef WK_TEST_H
#define WK_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "lu.h"
#include "test.h"
#include "workers.h"

extern char **environ;

/* Each test uses some of these. */
#define WT_FN static __attribute__((unused))

typedef struct wt_rec_s {
  wk_exit_t ex[64];
  char tail[64][4096]; /* wk_tail at the moment of the exit */
  int n;
  int done;
  double done_at;
} wt_rec_t;

WT_FN void wt_on_exit(wk_group_t *g, const wk_exit_t *ex, void *arg) {
  wt_rec_t *r = arg;
  if (r->n < 64) {
    r->ex[r->n] = *ex;
    snprintf(r->tail[r->n], sizeof(r->tail[0]), "%s",
             wk_tail(g, ex->local_rank));
    r->n++;
  }
}

WT_FN void wt_on_done(wk_group_t *g, void *arg) {
  wt_rec_t *r = arg;
  (void)g;
  r->done++;
  r->done_at = lu_wall_s();
}

WT_FN const wk_exit_t *wt_exit_of(const wt_rec_t *r, int local_rank) {
  for (int i = 0; i < r->n; i++)
    if (r->ex[i].local_rank == local_rank)
      return &r->ex[i];
  return NULL;
}

WT_FN void wt_tick(uv_timer_t *t) { (void)t; }

/* Run the loop until pred(arg) holds or ms pass (scaled). A 5 ms timer
 * wakes the loop for conditions outside it (files written by workers);
 * that polling is the test's, the library has none. RET pred's value. */
WT_FN int wt_run_until(uv_loop_t *loop, int (*pred)(void *), void *arg,
                        int ms) {
  uv_timer_t t;
  uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(ms);
  int ok;
  uv_timer_init(loop, &t);
  uv_timer_start(&t, wt_tick, 5, 5);
  while (!(ok = pred(arg)) && lu_now_ms() < deadline)
    uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return ok;
}

WT_FN int wt_is_done(void *arg) { return ((wt_rec_t *)arg)->done > 0; }

typedef struct wt_count_s {
  wt_rec_t *r;
  int n;
} wt_count_t;

WT_FN int wt_has_exits(void *arg) {
  wt_count_t *c = arg;
  return c->r->n >= c->n;
}

WT_FN int wt_wait_exits(uv_loop_t *loop, wt_rec_t *r, int n, int ms) {
  wt_count_t c = {r, n};
  return wt_run_until(loop, wt_has_exits, &c, ms);
}

/* Stop (nothing should be running), close the group, check the loop. */
WT_FN void wt_closed(void *arg) { *(int *)arg = 1; }

WT_FN void wt_close(uv_loop_t *loop, wk_group_t *g) {
  int closed = 0;
  wk_group_close(g, wt_closed, &closed);
  uv_run(loop, UV_RUN_DEFAULT);
  ASSERT_EQ(1, closed);
}

/* 1 when pid is gone within ms: no such process, or a zombie (dead; held
 * only by a parent that has not reaped it). Orphans reparented to this
 * process (a child subreaper) are reaped here. */
WT_FN int wt_gone(pid_t pid, int ms) {
  uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(ms);
  for (;;) {
    char path[64], buf[512];
    int status, fd;
    ssize_t n;
    waitpid(pid, &status, WNOHANG);
    if (kill(pid, 0) != 0 && errno == ESRCH)
      return 1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY)) >= 0) {
      n = read(fd, buf, sizeof(buf) - 1);
      close(fd);
      if (n > 0) {
        char *rp;
        buf[n] = '\0';
        rp = strrchr(buf, ')');
        if (rp && (rp[2] == 'Z' || rp[2] == 'X'))
          return 1;
      }
    }
    if (lu_now_ms() >= deadline)
      return 0;
    usleep(2000);
  }
}

WT_FN int wt_alive(pid_t pid) { return !wt_gone(pid, 0); }

/* Redirect fd (1 or 2) into path; RET the saved fd for wt_uncapture. */
WT_FN int wt_capture(int fd, const char *path) {
  int saved, f;
  fflush(stdout);
  fflush(stderr);
  saved = dup(fd);
  f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT(saved >= 0 && f >= 0);
  dup2(f, fd);
  close(f);
  return saved;
}

WT_FN void wt_uncapture(int fd, int saved) {
  fflush(stdout);
  fflush(stderr);
  dup2(saved, fd);
  close(saved);
}

/* A spec for n workers running argv, each with this process's environment
 * (callers replace what they test). */
WT_FN wk_spec_t wt_spec(int n, char *const *argv) {
  static char **envs[64];
  wk_spec_t s;
  memset(&s, 0, sizeof(s));
  for (int i = 0; i < 64; i++)
    envs[i] = environ;
  s.size = sizeof(s);
  s.nproc = n;
  s.argv = argv;
  s.envp = (char *const *const *)envs;
  return s;
}

/* Path of a helper built next to the tests. */
WT_FN const char *wt_helper(const char *name) {
  static char path[4][1024];
  static int k;
  const char *b = getenv("LAUNCH_BUILD_DIR");
  char *p = path[k++ % 4];
  snprintf(p, sizeof(path[0]), "%s/tests/%s", b ? b : "build", name);
  if (access(p, X_OK) != 0)
    TEST_FAIL("helper %s not built", p);
  return p;
}

/* Read a pid from a file a worker writes, waiting up to ms. */
WT_FN pid_t wt_read_pid(uv_loop_t *loop, const char *path, int ms);

typedef struct wt_file_s {
  const char *path;
  pid_t pid;
} wt_file_t;

WT_FN int wt_file_pid(void *arg) {
  wt_file_t *f = arg;
  char *s = test_read_file(f->path);
  if (s) {
    f->pid = (pid_t)atoi(s);
    free(s);
  }
  return f->pid > 0;
}

WT_FN pid_t wt_read_pid(uv_loop_t *loop, const char *path, int ms) {
  wt_file_t f = {path, 0};
  if (loop)
    wt_run_until(loop, wt_file_pid, &f, ms);
  else {
    uint64_t deadline = lu_now_ms() + (uint64_t)test_ms(ms);
    while (!wt_file_pid(&f) && lu_now_ms() < deadline)
      usleep(2000);
  }
  return f.pid;
}

#endif
