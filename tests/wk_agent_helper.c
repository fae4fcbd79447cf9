/* wk_agent_helper.c - a minimal agent for test_workers_orphans: a libuv
 * loop, a worker group running argv in NPROC workers, their pids written
 * to PIDFILE (atomically), and SIGTERM/SIGINT handled as the agent does:
 * stop the workers (SIGTERM, 2 s grace), close, exit 0.
 *   wk_agent_helper [-s] [-x] PIDFILE NPROC ARGV...
 * -s: contain workers by subreaper, never cgroups; -x: when every worker
 * has exited, close the group and exit 0 (a job that ends). The group's
 * containment ("cgroup" or "subreaper") is written to PIDFILE.mode. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "workers.h"

extern char **environ;

static uv_signal_t sigterm, sigint;
static wk_group_t *group;
static int exits, nworkers, exit_when_done;

static void on_closed(void *arg) { (void)arg; }

static void on_exit_cb(wk_group_t *g, const wk_exit_t *ex, void *arg) {
  (void)arg;
  (void)ex;
  if (++exits == nworkers && exit_when_done) {
    wk_group_close(g, on_closed, NULL);
    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_close((uv_handle_t *)&sigint, NULL);
  }
}

static void on_stopped(wk_group_t *g, void *arg) {
  (void)arg;
  wk_group_close(g, on_closed, NULL);
  uv_close((uv_handle_t *)&sigterm, NULL);
  uv_close((uv_handle_t *)&sigint, NULL);
}

static void on_signal(uv_signal_t *s, int signum) {
  (void)s;
  (void)signum;
  wk_stop(group, SIGTERM, 2000, on_stopped, NULL);
}

int main(int argc, char **argv) {
  uv_loop_t *loop = uv_default_loop();
  char **envs[64];
  wk_spec_t spec;
  char tmp[1024];
  FILE *f;
  int n, subreaper = 0;
  while (argc > 1 && argv[1][0] == '-') {
    if (strcmp(argv[1], "-s") == 0)
      subreaper = 1;
    else if (strcmp(argv[1], "-x") == 0)
      exit_when_done = 1;
    argv++;
    argc--;
  }
  if (argc < 4 || (n = atoi(argv[2])) < 1 || n > 64) {
    fprintf(stderr, "usage: wk_agent_helper [-s] [-x] PIDFILE NPROC ARGV...\n");
    return 2;
  }
  nworkers = n;
  for (int i = 0; i < n; i++)
    envs[i] = environ;
  memset(&spec, 0, sizeof(spec));
  spec.size = sizeof(spec);
  spec.nproc = n;
  spec.argv = argv + 3;
  spec.envp = (char *const *const *)envs;
  spec.pipe_output = 1;
  spec.tail_lines = 10;
  uv_signal_init(loop, &sigterm);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_start(&sigint, on_signal, SIGINT);
  if (wk_group_new(loop, &group) != 0 ||
      (subreaper && wk_set_containment(group, WK_CONTAIN_SUBREAPER) != 0) ||
      wk_start(group, &spec, on_exit_cb, NULL) != 0) {
    fprintf(stderr, "wk_agent_helper: wk_start failed\n");
    return 1;
  }
  snprintf(tmp, sizeof(tmp), "%s.mode", argv[1]);
  if ((f = fopen(tmp, "w")) == NULL)
    return 1;
  fputs(wk_containment(group, NULL) == WK_CONTAIN_CGROUP ? "cgroup\n"
                                                          : "subreaper\n",
        f);
  fclose(f);
  snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
  if ((f = fopen(tmp, "w")) == NULL)
    return 1;
  for (int i = 0; i < n; i++)
    fprintf(f, "%d\n", (int)wk_pid(group, i));
  fclose(f);
  rename(tmp, argv[1]);
  uv_run(loop, UV_RUN_DEFAULT);
  if (uv_loop_close(loop) != 0) {
    fprintf(stderr, "wk_agent_helper: loop not closed cleanly\n");
    return 3;
  }
  return exits == n ? 0 : 4;
}
