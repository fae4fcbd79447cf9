/* guardian.c - the guardian process: forked once per group, it kills the
 * workers, their process groups, cgroups and escaped processes when the
 * agent dies (workers.h). */
#include "wk_int.h"

/* ---- the guardian -------------------------------------------------------------- */

/* In the forked guardian: async-signal-safe calls only (the agent may have
 * threads). Keeps the list of live process groups, cgroups and escaped
 * processes, kills them on EOF. */
static void wk_guardian_main(int fd, const sigset_t *empty, const char *cg_base) {
  pid_t groups[WK_NPROC_MAX];
  uint32_t cgs[WK_NPROC_MAX]; /* attempt + 1 of rank k's cgroup, 0 none */
  wk_esc_t pids[WK_ESC_MAX];
  int n = 0, np = 0, any_cg = 0;
  struct sigaction dfl, ign;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  ign = dfl;
  ign.sa_handler = SIG_IGN;
  /* The agent's libuv handlers would write into the agent's signal pipe.
   * A scheduler signals every process of a job step (Slurm's SIGUSR1
   * warning, then SIGTERM): the guardian outlives them, its end is the
   * agent's. */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      sigaction(s, s == SIGTERM || s == SIGINT || s == SIGHUP ||
                           s == SIGQUIT || s == SIGUSR1 || s == SIGUSR2 ||
                           s == SIGPIPE
                       ? &ign
                       : &dfl,
                NULL);
  /* Own session: a Ctrl-C or Ctrl-Z for the agent's terminal, or a kill of
   * the agent's process group, must not take the guardian first. */
  setsid();
  sigprocmask(SIG_SETMASK, empty, NULL);
  if (fd != 3) {
    dup2(fd, 3);
    fd = 3;
  }
  /* Hold nothing of the agent's: no sockets, no worker pipes. */
  if (syscall(SYS_close_range, 0u, 2u, 0u) != 0)
    for (int i = 0; i < 3; i++)
      close(i);
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    struct rlimit rl;
    int max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)max)
      max = (int)rl.rlim_cur;
    for (int i = 4; i < max; i++)
      close(i);
  }
  memset(cgs, 0, sizeof(cgs));
  for (;;) {
    wk_guard_msg_t m;
    ssize_t r = recv(fd, &m, sizeof(m), 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r != (ssize_t)sizeof(m))
      break; /* EOF: the agent is gone */
    switch (m.op) {
    case WK_GUARD_DISARM:
      _exit(0);
    case WK_GUARD_ADD:
      if (n < WK_NPROC_MAX)
        groups[n++] = m.a;
      break;
    case WK_GUARD_DEL:
      for (int i = 0; i < n; i++)
        if (groups[i] == m.a) {
          groups[i] = groups[--n];
          break;
        }
      break;
    case WK_GUARD_ADD_PID:
      if (np < WK_ESC_MAX) {
        pids[np].pid = m.a;
        pids[np].start = m.b;
        np++;
      }
      break;
    case WK_GUARD_DEL_PID:
      for (int i = 0; i < np; i++)
        if (pids[i].pid == m.a) {
          pids[i] = pids[--np];
          break;
        }
      break;
    case WK_GUARD_ADD_CG:
      if (m.a >= 0 && m.a < WK_NPROC_MAX) {
        cgs[m.a] = (uint32_t)m.b + 1;
        any_cg = 1;
      }
      break;
    default:
      break;
    }
  }
  for (int i = 0; i < n; i++)
    kill(-groups[i], SIGKILL);
  for (int k = 0; any_cg && k < WK_NPROC_MAX; k++)
    if (cgs[k]) {
      char path[PATH_MAX + 48];
      wk_cg_path(path, sizeof(path), cg_base, k, cgs[k] - 1);
      wk_cg_kill_dir(path);
    }
  /* An escaped process, unless its pid now names another process. */
  for (int i = 0; i < np; i++)
    if (wk_start_time(pids[i].pid) == pids[i].start)
      kill(pids[i].pid, SIGKILL);
  if (any_cg)
    wk_cg_rmdir_all(cg_base, cgs, WK_NPROC_MAX, 1000);
  _exit(0);
}

void wk_guardian_start(wk_group_t *g) {
  int sv[2];
  sigset_t all, old, empty;
  pid_t pid;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    LU_WARN(&g->log, "socketpair() for the worker guardian failed: %s; "
            "children of workers may outlive a killed agent",
            strerror(errno));
    return;
  }
  sigfillset(&all);
  sigemptyset(&empty);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid = fork();
  if (pid == 0) {
    close(sv[0]);
    wk_guardian_main(sv[1], &empty, g->cg_base);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(sv[1]);
  if (pid < 0) {
    LU_WARN(&g->log, "fork() of the worker guardian failed: %s; children "
            "of workers may outlive a killed agent", strerror(errno));
    close(sv[0]);
    return;
  }
  g->guard_pid = pid;
  g->guard_fd = sv[0];
  LU_DBG(&g->log, LU_DBG_SPAWN, "worker guardian pid %d", (int)pid);
}

void wk_guardian_send2(wk_group_t *g, int op, int32_t a, uint64_t b) {
  wk_guard_msg_t m;
  ssize_t r;
  memset(&m, 0, sizeof(m));
  m.op = op;
  m.a = a;
  m.b = b;
  if (g->guard_fd < 0)
    return;
  for (;;) {
    struct pollfd pf = {g->guard_fd, POLLOUT, 0};
    r = send(g->guard_fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0)
      break;
    if (errno == EINTR)
      continue;
    /* A full socket (thousands of workers started at once) means the
     * guardian has not read yet: give it a second, not forever. */
    if (errno == EAGAIN && poll(&pf, 1, 1000) == 1)
      continue;
    break;
  }
  if (r != (ssize_t)sizeof(m)) {
    LU_WARN(&g->log, "worker guardian (pid %d) does not answer (%s); "
            "children of workers may outlive a killed agent",
            (int)g->guard_pid, r < 0 ? strerror(errno) : "short write");
    close(g->guard_fd);
    g->guard_fd = -1;
  }
}

void wk_guardian_send(wk_group_t *g, int op, pid_t pgid) {
  wk_guardian_send2(g, op, (int32_t)pgid, 0);
}

/* Reap the guardian if it died (someone killed it); it is our child. */
void wk_guardian_check(wk_group_t *g) {
  int status;
  if (g->guard_pid <= 0)
    return;
  if (waitpid(g->guard_pid, &status, WNOHANG) == g->guard_pid) {
    LU_WARN(&g->log, "worker guardian (pid %d) exited; children of workers "
            "may outlive a killed agent", (int)g->guard_pid);
    g->guard_pid = 0;
    if (g->guard_fd >= 0) {
      close(g->guard_fd);
      g->guard_fd = -1;
    }
  }
}

void wk_guardian_stop(wk_group_t *g) {
  int status;
  wk_guardian_send(g, WK_GUARD_DISARM, 0);
  if (g->guard_fd >= 0) {
    close(g->guard_fd);
    g->guard_fd = -1;
  }
  /* It exits on DISARM or EOF at once; this wait is not a stall. */
  if (g->guard_pid > 0) {
    while (waitpid(g->guard_pid, &status, 0) < 0 && errno == EINTR)
      ;
    g->guard_pid = 0;
  }
}

/* A worker's group leaves the guardian's list once it is reaped and its
 * pipes are closed: until then its children may still hold the pipes. */
void wk_unguard(wk_worker_t *w) {
  if (w->guarded && w->reaped && w->nopen == 0) {
    w->guarded = 0;
    wk_guardian_send(w->g, WK_GUARD_DEL, w->pid);
  }
}
