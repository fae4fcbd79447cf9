/* workers.c - fork/exec, supervision, stop and output of one node's workers.
 *
 * Life of an attempt: wk_start forks every worker (all strings and arrays
 * the child needs are prepared before fork), a uv_signal_t on SIGCHLD
 * reaps them with waitpid(pid, WNOHANG) per worker, and their stdout and
 * stderr pipes are split into prefixed lines. wk_stop signals the process
 * groups, arms a SIGKILL deadline, and reports done once every worker is
 * reaped and every pipe is closed.
 *
 * A guardian process (forked once per group, no exec) holds one end of a
 * socketpair whose other end only the agent holds. When the agent dies for
 * any reason, even SIGKILL, the guardian reads EOF and SIGKILLs every
 * worker process group still registered: PR_SET_PDEATHSIG reaches only the
 * workers themselves, the guardian also reaches their children (a shell
 * wrapper's python, dataloader processes), the cgroups of the workers and
 * the escaped processes the agent told it about (see workers.h). */
#include "wk_int.h"

/* ---- supervision -------------------------------------------------------------------- */

/* Signal a worker's process group; right after fork the child may not have
 * called setsid() yet, then the group does not exist and the pid gets it
 * (the child blocks signals until its dispositions are reset, so the
 * signal stays pending and acts by default). */
static void wk_kill_group(wk_worker_t *w, int sig) {
  if (w->pid <= 0)
    return;
  if (kill(-w->pid, sig) != 0 && errno == ESRCH && !w->reaped)
    kill(w->pid, sig);
}

/* status < 0: unknown (exit_code -1, signal 0). */
static void wk_decode(wk_worker_t *w, int status, wk_exit_t *ex) {
  memset(ex, 0, sizeof(*ex));
  ex->local_rank = w->local_rank;
  ex->pid = w->pid;
  ex->exit_code = -1;
  ex->signal = 0;
  ex->wall_s = lu_wall_s();
  if (status >= 0 && WIFEXITED(status))
    ex->exit_code = WEXITSTATUS(status);
  else if (status >= 0 && WIFSIGNALED(status))
    ex->signal = WTERMSIG(status);
}

/* What the exec status pipe says about a reaped worker: nothing (exec
 * worked: close-on-exec closed it) or the errno of a failed exec, whose
 * message then goes where the worker's stderr would (tail, file), once. */
static void wk_exec_result(wk_worker_t *w, wk_exit_t *ex) {
  wk_exec_status_t st;
  ssize_t r;
  if (w->status_fd < 0)
    return;
  do
    r = read(w->status_fd, &st, sizeof(st));
  while (r < 0 && errno == EINTR);
  close(w->status_fd);
  w->status_fd = -1;
  if (r == (ssize_t)sizeof(st) && st.magic == WK_EXEC_MAGIC && st.err != 0 &&
      ex->exit_code == 127) {
    char msg[PATH_MAX + 128];
    const char *text = wk_exec_strerror(st.err);
    int n = snprintf(msg, sizeof(msg), "launch: cannot execute '%s': %s",
                     w->g->argv[0], text ? text : strerror(st.err));
    size_t len = (size_t)LU_MIN(LU_MAX(n, 0), (int)sizeof(msg) - 1);
    w->exec_errno = st.err;
    ex->exec_errno = st.err;
    wk_tail_push(w, msg, len);
    msg[len] = '\n';
    if (w->st[1].file_fd >= 0) {
      wk_file_write(&w->st[1], msg, len + 1);
    } else if (w->st[1].has_file) {
      /* The stream saw its EOF before the exit was reaped. */
      char path[PATH_MAX];
      int fd;
      snprintf(path, sizeof(path), "%s/%d/stderr.log", w->g->attempt_dir,
               w->local_rank);
      if ((fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)) >= 0) {
        (void)wk_write_all(fd, msg, len + 1);
        close(fd);
      }
    }
  }
}

static void wk_reap_dying(wk_group_t *g, int block);

/* waitpid(pid, WNOHANG) for every live worker: never waitpid(-1), the
 * agent may have other children. */
static void wk_reap(wk_group_t *g) {
  unsigned attempt = g->attempt;
  wk_guardian_check(g);
  wk_sb_reap(g);
  wk_reap_dying(g, 0);
  for (int i = 0; i < g->nproc && g->w && attempt == g->attempt; i++) {
    wk_worker_t *w = &g->w[i];
    wk_exit_t ex;
    int status = 0;
    pid_t r;
    if (w->pid <= 0 || w->reaped)
      continue;
    do
      r = waitpid(w->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
      continue;
    if (r < 0) {
      /* ECHILD: something else reaped it (a waitpid(-1) elsewhere in the
       * agent); its status is lost. */
      LU_WARN(&g->log, "waitpid(%d) of local rank %d failed: %s; reporting "
              "it as exited with unknown status", (int)w->pid, i,
              strerror(errno));
      status = -1;
    }
    wk_decode(w, status, &ex);
    wk_exec_result(w, &ex);
    w->reaped = 1;
    if (--g->nlive == 0)
      uv_unref((uv_handle_t *)&g->sigchld);
    wk_stream_drain(&w->st[0]);
    wk_stream_drain(&w->st[1]);
    wk_unguard(w);
    LU_DBG(&g->log, LU_DBG_SPAWN, "local rank %d pid %d: exit %d signal %d",
           i, (int)w->pid, ex.exit_code, ex.signal);
    if (g->on_exit)
      g->on_exit(g, &ex, g->exit_arg);
    if (g->closing)
      return; /* closed from on_exit: wk_group_close did the rest */
  }
  if (g->contain == WK_CONTAIN_SUBREAPER && attempt == g->attempt) {
    /* A SIGCHLD may be an orphan's that came here: reap it. */
    wk_reap_orphans(g);
    if (g->nlive == 0)
      uv_timer_stop(&g->scan_timer);
  }
  if (attempt == g->attempt)
    wk_maybe_done(g);
}

int wk_is_dying(const wk_group_t *g, pid_t pid) {
  for (int i = 0; i < g->ndying; i++)
    if (g->dying[i] == pid)
      return 1;
  return 0;
}

/* The wait status of pid if it is exiting (PF_EXITING, or a zombie):
 * /proc/<pid>/stat fields 3 (state), 9 (flags) and 52 (exit_code, the
 * status waitpid will return; Linux >= 3.5, ours to read as the parent).
 * RET 0 with *status, -1 when it is not exiting, exits 0, or cannot be
 * told. */
static int wk_exit_status(pid_t pid, int *status) {
  char path[64], buf[1024];
  ssize_t r;
  int fd;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return -1;
  r = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (r <= 0)
    return -1;
  buf[r] = '\0';
  return wk__stat_exit(buf, status);
}

int wk__stat_exit(const char *buf, int *status) {
  const char *p;
  unsigned long flags = 0;
  long code = 0;
  char state;
  int field = 3;
  if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ')
    return -1;
  state = p[2];
  for (p += 2; *p && field < 52;) {
    while (*p && *p != ' ')
      p++;
    if (*p)
      p++;
    if (++field == 9)
      flags = strtoul(p, NULL, 10);
  }
  if (field != 52 || *p == '\0')
    return -1;
  code = strtol(p, NULL, 10);
  if (!(state == 'Z' || state == 'X' || (flags & 0x4 /* PF_EXITING */)))
    return -1;
  /* The field reads 0 where we may not read it (a non-dumpable process):
   * a 0 waits for SIGCHLD, which tells a success for sure (a failure is
   * what a restart waits for). */
  if (code == 0)
    return -1;
  *status = (int)code;
  return 0;
}

/* Both output pipes of w reached EOF. When /proc says the process is
 * exiting, its exit is reported now, not at SIGCHLD: the kernel tears
 * down what the process held (a GPU context: ~0.24 s on an H200) after
 * it closed its files and before it becomes a zombie, and the restart
 * need not wait for that. The pid is reaped later (g->dying). */
void wk_maybe_exiting(wk_worker_t *w) {
  wk_group_t *g = w->g;
  wk_exit_t ex;
  int status;
  if (w->reaped || w->pid <= 0 || w->st[0].active || w->st[1].active ||
      g->closing || wk_exit_status(w->pid, &status) != 0)
    return;
  if (g->ndying == g->dying_cap) {
    int cap = g->dying_cap ? 2 * g->dying_cap : 8;
    pid_t *d = realloc(g->dying, (size_t)cap * sizeof(*d));
    if (d == NULL)
      return; /* SIGCHLD reports it */
    g->dying = d;
    g->dying_cap = cap;
  }
  g->dying[g->ndying++] = w->pid;
  wk_decode(w, status, &ex);
  wk_exec_result(w, &ex);
  w->reaped = 1;
  if (--g->nlive == 0)
    uv_unref((uv_handle_t *)&g->sigchld);
  wk_unguard(w);
  LU_DBG(&g->log, LU_DBG_SPAWN, "local rank %d pid %d: exiting (its pipes "
         "closed), exit %d signal %d; reaped later", w->local_rank,
         (int)w->pid, ex.exit_code, ex.signal);
  if (g->on_exit)
    g->on_exit(g, &ex, g->exit_arg);
  if (!g->closing)
    wk_maybe_done(g);
}

/* The exiting ones wk_maybe_exiting reported, once they are zombies. */
static void wk_reap_dying(wk_group_t *g, int block) {
  for (int i = 0; i < g->ndying;) {
    int status;
    pid_t r;
    do
      r = waitpid(g->dying[i], &status, block ? 0 : WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0) {
      i++;
      continue;
    }
    g->dying[i] = g->dying[--g->ndying];
  }
}

static void wk_on_sigchld(uv_signal_t *s, int signum) {
  (void)signum;
  wk_reap(s->data);
}

static void wk_on_defer(uv_timer_t *t) { wk_reap(t->data); }

void wk_maybe_done(wk_group_t *g) {
  wk_done_cb done;
  if (g->stop_phase == WK_IDLE || g->nlive > 0 || g->nopen > 0 || g->closing)
    return;
  /* Nothing of the attempt outlives the stop. */
  wk_sweep(g);
  uv_timer_stop(&g->timer);
  g->stop_phase = WK_IDLE;
  done = g->done;
  g->done = NULL;
  if (done)
    done(g, g->done_arg);
}

/* Workers that may still have processes in their group: live ones, and
 * reaped ones whose pipes are still held open (by their children). */
static void wk_signal_groups(wk_group_t *g, int sig) {
  for (int i = 0; i < g->nproc && g->w; i++) {
    wk_worker_t *w = &g->w[i];
    if (w->pid > 0 && (!w->reaped || w->nopen > 0))
      wk_kill_group(w, sig);
  }
  wk_escaped_signal(g, sig);
}

static void wk_on_drain_timeout(uv_timer_t *t) {
  wk_group_t *g = t->data;
  int held = 0;
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    if (!w->reaped) {
      LU_WARN(&g->log, "local rank %d (pid %d) still not reaped %d ms after "
              "SIGKILL (uninterruptible sleep?); waiting for it", i,
              (int)w->pid, WK_DRAIN_MS);
      continue;
    }
    for (int k = 0; k < 2; k++)
      if (w->st[k].active) {
        held = 1;
        wk_stream_end(&w->st[k]);
      }
  }
  if (held)
    LU_WARN(&g->log, "a worker's output pipe was still held open %d ms after "
            "SIGKILL (a process that left the worker's process group?); "
            "closed it", WK_DRAIN_MS);
}

static void wk_kill_now(wk_group_t *g) {
  wk_signal_groups(g, SIGKILL);
  g->stop_phase = WK_KILLED;
  uv_timer_start(&g->timer, wk_on_drain_timeout, WK_DRAIN_MS, 0);
}

static void wk_on_grace(uv_timer_t *t) {
  wk_group_t *g = t->data;
  for (int i = 0; i < g->nproc; i++)
    if (!g->w[i].reaped)
      LU_INFO(&g->log, "local rank %d (pid %d) did not exit within the grace "
              "period; sending SIGKILL", i, (int)g->w[i].pid);
  wk_kill_now(g);
}

/* ---- public API ----------------------------------------------------------------------- */

int wk_group_new(uv_loop_t *loop, wk_group_t **out) {
  wk_group_t *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return RDZV_ENOMEM;
  g->rbuf = malloc(WK_READ_BUF);
  g->obuf = malloc(WK_PREFIX_MAX + WK_LINE_MAX + 1);
  if (g->rbuf == NULL || g->obuf == NULL) {
    free(g->rbuf);
    free(g->obuf);
    free(g);
    return RDZV_ENOMEM;
  }
  g->magic = WK_MAGIC;
  g->loop = loop;
  g->guard_fd = -1;
  lu_log_init(&g->log, "launch agent");
  /* The SIGCHLD watcher exists before the first fork, so that no exit can
   * be missed; it holds the loop only while workers are live. */
  uv_signal_init(loop, &g->sigchld);
  uv_timer_init(loop, &g->timer);
  uv_timer_init(loop, &g->defer);
  uv_timer_init(loop, &g->scan_timer);
  g->sigchld.data = g->timer.data = g->defer.data = g->scan_timer.data = g;
  g->handles_open = 4;
  /* The scans watch workers; they never keep the loop alive. */
  uv_unref((uv_handle_t *)&g->scan_timer);
  uv_signal_start(&g->sigchld, wk_on_sigchld, SIGCHLD);
  uv_unref((uv_handle_t *)&g->sigchld);
  *out = g;
  return 0;
}

void wk_set_log(wk_group_t *g, const lu_log_t *log) {
  assert(g->magic == WK_MAGIC);
  g->log = *log;
}

void wk_set_own_children(wk_group_t *g, int (*own)(pid_t pid, void *arg),
                         void *arg) {
  assert(g->magic == WK_MAGIC);
  g->own_child = own;
  g->own_child_arg = arg;
}

int wk_set_containment(wk_group_t *g, wk_contain_t how) {
  assert(g->magic == WK_MAGIC);
  if (how != WK_CONTAIN_AUTO && how != WK_CONTAIN_SUBREAPER)
    return RDZV_EINVAL;
  if (g->contain != WK_CONTAIN_AUTO)
    return -EBUSY;
  g->contain_req = how;
  return 0;
}

wk_contain_t wk_containment(const wk_group_t *g, const char **what) {
  if (what)
    *what = g->contain_what;
  return (wk_contain_t)g->contain;
}

static void wk_free_attempt(wk_group_t *g) {
  for (int i = 0; g->w && i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    if (w->status_fd >= 0)
      close(w->status_fd);
    free(w->st[0].line);
    free(w->st[1].line);
    free(w->tail);
    free(w->tail_len);
    free(w->tail_join);
  }
  free(g->w);
  g->w = NULL;
  wk_free_strv(g->argv);
  g->argv = NULL;
  if (g->rank_argv)
    for (int i = 0; i < g->nproc; i++)
      wk_free_strv(g->rank_argv[i]);
  free(g->rank_argv);
  g->rank_argv = NULL;
  if (g->envp)
    for (int i = 0; i < g->nproc; i++)
      wk_free_strv(g->envp[i]);
  free(g->envp);
  g->envp = NULL;
  if (g->prefix)
    for (int i = 0; i < g->nproc; i++)
      free(g->prefix[i]);
  free(g->prefix);
  g->prefix = NULL;
  free(g->prefix_len);
  g->prefix_len = NULL;
  free(g->redirects);
  free(g->tee);
  free(g->console);
  free(g->attempt_dir);
  g->redirects = g->tee = NULL;
  g->console = NULL;
  g->attempt_dir = NULL;
  g->nproc = 0;
}

static int wk_copy_spec(wk_group_t *g, const wk_spec_t *s) {
  int n = s->nproc;
  g->nproc = n;
  g->pipe_output = s->pipe_output;
  g->pre_exec = s->pre_exec;
  g->pre_exec_arg = s->pre_exec_arg;
  g->tail_lines = LU_MAX(0, LU_MIN(s->tail_lines, WK_TAIL_LINES_MAX));
  if ((g->w = calloc((size_t)n, sizeof(*g->w))) == NULL)
    return RDZV_ENOMEM;
  /* Before anything can fail: the cleanup closes what is not -1. */
  for (int i = 0; i < n; i++) {
    wk_worker_t *w = &g->w[i];
    w->g = g;
    w->local_rank = i;
    w->rfd[0] = w->rfd[1] = -1;
    w->status_fd = -1;
    for (int k = 0; k < 2; k++) {
      w->st[k].w = w;
      w->st[k].file_fd = -1;
      w->st[k].console_fd = -1;
    }
  }
  if ((g->argv = wk_dup_strv(s->argv)) == NULL ||
      (g->envp = calloc((size_t)n, sizeof(*g->envp))) == NULL ||
      (g->prefix = calloc((size_t)n, sizeof(*g->prefix))) == NULL ||
      (g->prefix_len = calloc((size_t)n, sizeof(size_t))) == NULL ||
      (g->redirects = calloc((size_t)n, sizeof(unsigned))) == NULL ||
      (g->tee = calloc((size_t)n, sizeof(unsigned))) == NULL ||
      (g->console = calloc((size_t)n, 1)) == NULL)
    return RDZV_ENOMEM;
  for (int i = 0; i < n; i++) {
    const char *p = s->prefix && s->prefix[i] ? s->prefix[i] : "";
    size_t plen = strnlen(p, WK_PREFIX_MAX);
    if (s->size >= offsetof(wk_spec_t, rank_argv) + sizeof(s->rank_argv) &&
        s->rank_argv &&
        ((g->rank_argv == NULL &&
          (g->rank_argv = calloc((size_t)n, sizeof(char **))) == NULL) ||
         (g->rank_argv[i] = wk_dup_strv(s->rank_argv[i])) == NULL))
      return RDZV_ENOMEM;
    if ((g->envp[i] = wk_dup_strv(s->envp[i])) == NULL ||
        (g->prefix[i] = strndup(p, plen)) == NULL)
      return RDZV_ENOMEM;
    g->prefix_len[i] = plen;
    g->redirects[i] = s->redirects ? s->redirects[i] & 3u : 0;
    g->tee[i] = s->tee ? s->tee[i] & 3u : 0;
    g->console[i] = s->console ? s->console[i] != 0 : 1;
  }
  if (s->attempt_dir && (g->attempt_dir = strdup(s->attempt_dir)) == NULL)
    return RDZV_ENOMEM;
  return 0;
}

static int wk_open_log(wk_group_t *g, int lr, const char *name) {
  char path[PATH_MAX];
  int fd;
  snprintf(path, sizeof(path), "%s/%d/%s", g->attempt_dir, lr, name);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    LU_ERR(&g->log, "open(%s) failed: %s", path, strerror(e));
    return -e;
  }
  return fd;
}

/* Decide where each stream goes and open the log files; no fork yet. */
static int wk_prepare_outputs(wk_group_t *g) {
  int rc;
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    for (int k = 0; k < 2; k++) {
      wk_stream_t *st = &w->st[k];
      unsigned bit = k == 0 ? WK_STDOUT : WK_STDERR;
      int in_file = ((g->redirects[i] | g->tee[i]) & bit) != 0;
      int console = g->console[i] &&
                    (!(g->redirects[i] & bit) || (g->tee[i] & bit));
      st->bit = (int)bit;
      st->console_fd = g->pipe_output && console ? (k == 0 ? 1 : 2) : -1;
      if (g->pipe_output && in_file && g->attempt_dir) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/%d", g->attempt_dir, i);
        if ((rc = lu_mkdir_p(dir)) != 0) {
          LU_ERR(&g->log, "mkdir(%s) failed: %s", dir, strerror(-rc));
          return rc;
        }
        rc = wk_open_log(g, i, k == 0 ? "stdout.log" : "stderr.log");
        if (rc < 0)
          return rc;
        st->file_fd = rc;
        st->has_file = 1;
      }
    }
  }
  return 0;
}

static void wk_close_fds(wk_group_t *g, int *wfd) {
  for (int i = 0; g->w && i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    for (int k = 0; k < 2; k++) {
      if (w->rfd[k] >= 0)
        close(w->rfd[k]);
      w->rfd[k] = -1;
      if (w->st[k].file_fd >= 0)
        close(w->st[k].file_fd);
      w->st[k].file_fd = -1;
      if (wfd && wfd[2 * i + k] >= 0)
        close(wfd[2 * i + k]);
    }
  }
}

static int wk_make_pipes(wk_group_t *g, int *wfd) {
  for (int i = 0; i < g->nproc; i++)
    for (int k = 0; k < 2; k++) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0)
        return -errno;
      p[0] = wk_fd_high(p[0]);
      p[1] = wk_fd_high(p[1]);
      g->w[i].rfd[k] = p[0];
      wfd[2 * i + k] = p[1];
      if (p[0] < 0 || p[1] < 0)
        return p[0] < 0 ? p[0] : p[1];
    }
  return 0;
}

int wk_start(wk_group_t *g, const wk_spec_t *spec, wk_exit_cb on_exit,
             void *arg) {
  wk_exec_t x;
  int *wfd = NULL, rc, started = 0, first;
  unsigned char *adopted = NULL;
  sigset_t all, old;
  assert(g->magic == WK_MAGIC);
  if (g->closing || g->nlive > 0 || g->nopen > 0 || g->stop_phase != WK_IDLE)
    return -EBUSY;
  if (spec == NULL || spec->size < sizeof(wk_spec_t) || spec->nproc <= 0 ||
      spec->nproc > WK_NPROC_MAX || spec->argv == NULL ||
      spec->argv[0] == NULL || spec->envp == NULL)
    return RDZV_EINVAL;
  for (int i = 0; i < spec->nproc; i++)
    if (spec->envp[i] == NULL)
      return RDZV_EINVAL;
  wk_free_attempt(g);
  g->attempt++;
  if ((rc = wk_copy_spec(g, spec)) != 0)
    goto fail;
  if ((rc = wk_prepare_outputs(g)) != 0)
    goto fail;
  if (g->pipe_output) {
    if ((wfd = malloc(sizeof(int) * 2 * (size_t)g->nproc)) == NULL) {
      rc = RDZV_ENOMEM;
      goto fail;
    }
    for (int i = 0; i < 2 * g->nproc; i++)
      wfd[i] = -1;
    if ((rc = wk_make_pipes(g, wfd)) != 0) {
      LU_ERR(&g->log, "pipe() for worker output failed: %s", strerror(-rc));
      goto fail;
    }
  }
  if ((rc = wk_prepare_exec(g, &x)) != 0)
    goto fail;
  first = g->contain == WK_CONTAIN_AUTO;
  wk_contain_setup(g);
  if (g->contain == WK_CONTAIN_CGROUP && (rc = wk_cg_ranks(g, g->nproc)) != 0) {
    if (g->cg_proven) {
      LU_ERR(&g->log, "cannot create the workers' cgroups in %s: %s",
             g->cg_base, strerror(-rc));
      free(x.sh_argv);
      free(x.pathbuf);
      goto fail;
    }
    snprintf(g->contain_what, sizeof(g->contain_what),
             "cannot create cgroups in %s: %s", g->cg_base, strerror(-rc));
    g->contain = WK_CONTAIN_SUBREAPER;
    wk_become_subreaper(g);
    rc = 0;
  }
  if (g->guard_pid == 0)
    wk_guardian_start(g);
  /* The guardian knows the workers' cgroups before anything runs in them:
   * an agent SIGKILLed right after a fork, before it got to say more, still
   * takes down what the worker started (a setsid child, a daemon). */
  for (int i = 0; g->contain == WK_CONTAIN_CGROUP && i < g->nproc; i++)
    wk_guardian_send2(g, WK_GUARD_ADD_CG, i, g->cg_attempt);

  /* Ready standbys take their ranks (standby.c): no fork for them. */
  if (g->sb && (adopted = calloc((size_t)g->nproc, 1)) != NULL)
    for (int i = 0; i < g->nproc; i++)
      adopted[i] = (unsigned char)wk_sb_take(g, i, g->envp[i]);

  /* Signals stay blocked from fork until the child has reset them. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    int sp[2] = {-1, -1};
    pid_t pid;
    if (adopted && adopted[i]) {
      wk_sb_adopted(g, w, w->rfd);
      started++;
      if (wfd) {
        close(wfd[2 * i]);
        close(wfd[2 * i + 1]);
        wfd[2 * i] = wfd[2 * i + 1] = -1;
      }
      continue;
    }
    /* The exec status pipe: without it the worker's stderr says why. */
    if (pipe2(sp, O_CLOEXEC) != 0)
      sp[0] = sp[1] = -1;
    pid = wk_fork_worker(g, i);
    if (pid == 0)
      wk_child(g, w, &x, wfd ? wfd[2 * i] : -1, wfd ? wfd[2 * i + 1] : -1,
               sp[1]);
    if (sp[1] >= 0)
      close(sp[1]);
    if (pid < 0) {
      rc = -errno;
      if (sp[0] >= 0)
        close(sp[0]);
      break;
    }
    w->pid = pid;
    w->status_fd = sp[0];
    started++;
    if (wfd) {
      close(wfd[2 * i]);
      close(wfd[2 * i + 1]);
      wfd[2 * i] = wfd[2 * i + 1] = -1;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  free(x.sh_argv);
  free(x.pathbuf);

  if (started < g->nproc) {
    /* A failed call starts nothing: kill and reap the ones forked; they
     * are SIGKILLed, so the blocking wait ends at once. */
    LU_ERR(&g->log, "fork() of local rank %d failed: %s", started,
           strerror(-rc));
    for (int i = 0; i < started; i++) {
      int status;
      wk_kill_group(&g->w[i], SIGKILL);
      while (waitpid(g->w[i].pid, &status, 0) < 0 && errno == EINTR)
        ;
    }
    goto fail;
  }
  free(wfd);
  wfd = NULL;
  /* For test_agent_escape only: stop right after the fork, where a kill -9
   * finds the agent having told its guardian nothing more. */
  if (getenv("LAUNCH_TEST_STOP_AFTER_FORK") != NULL)
    raise(SIGSTOP);

  wk_contain_started(g, first);
  g->on_exit = on_exit;
  g->exit_arg = arg;
  g->nlive = g->nproc;
  uv_ref((uv_handle_t *)&g->sigchld);
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    w->guarded = g->guard_fd >= 0;
    if (!(adopted && adopted[i])) /* a standby's group is known already */
      wk_guardian_send(g, WK_GUARD_ADD, w->pid);
    LU_DBG(&g->log, LU_DBG_SPAWN, "local rank %d: pid %d %s", i, (int)w->pid,
           g->argv[0]);
    for (int k = 0; g->pipe_output && k < 2; k++) {
      wk_stream_t *st = &w->st[k];
      uv_pipe_init(g->loop, &st->pipe, 0);
      st->pipe.data = st;
      w->nopen++;
      g->nopen++;
      st->active = 1;
      if ((rc = uv_pipe_open(&st->pipe, w->rfd[k])) != 0)
        close(w->rfd[k]); /* not taken by the pipe */
      else
        rc = uv_read_start((uv_stream_t *)&st->pipe, wk_alloc, wk_on_read);
      w->rfd[k] = -1;
      if (rc != 0) {
        /* The worker runs; this stream of it is lost, not the attempt. */
        LU_ERR(&g->log, "reading the %s of local rank %d failed: %s",
               k == 0 ? "stdout" : "stderr", i, uv_strerror(rc));
        wk_stream_end(st);
      }
    }
  }
  /* A worker whose exec failed may be gone already: reap from the loop
   * (never from inside this call, whose caller does not expect on_exit
   * yet). */
  uv_timer_start(&g->defer, wk_on_defer, 0, 0);
  free(adopted);
  wk_sb_schedule(g);
  return 0;

fail:
  free(adopted);
  wk_close_fds(g, wfd);
  free(wfd);
  wk_free_attempt(g);
  return rc;
}

void wk_signal(wk_group_t *g, int sig) {
  assert(g->magic == WK_MAGIC);
  for (int i = 0; i < g->nproc && g->w; i++)
    if (!g->w[i].reaped)
      wk_kill_group(&g->w[i], sig);
}

void wk_stop(wk_group_t *g, int sig, int grace_ms, wk_done_cb done,
             void *arg) {
  assert(g->magic == WK_MAGIC);
  if (done) {
    g->done = done;
    g->done_arg = arg;
  }
  if (g->stop_phase == WK_IDLE) {
    g->stop_phase = WK_GRACE;
    if (sig != SIGKILL)
      wk_signal_groups(g, sig);
    if (grace_ms <= 0 || sig == SIGKILL)
      wk_kill_now(g);
    else
      uv_timer_start(&g->timer, wk_on_grace, (uint64_t)grace_ms, 0);
  } else if (g->stop_phase == WK_GRACE) {
    /* Asked again while waiting: the user means it (second Ctrl-C). */
    LU_INFO(&g->log, "stop requested again; sending SIGKILL to the workers");
    wk_kill_now(g);
  }
  /* done is reported from the loop, never from inside this call. */
  uv_timer_start(&g->defer, wk_on_defer, 0, 0);
}

int wk_live(const wk_group_t *g) { return g->nlive; }

pid_t wk_pid(const wk_group_t *g, int local_rank) {
  if (g->w == NULL || local_rank < 0 || local_rank >= g->nproc)
    return -1;
  return g->w[local_rank].pid;
}

const char *wk_tail(const wk_group_t *cg, int local_rank) {
  /* The join is a cache built on demand: the group itself is never const
   * (wk_group_new allocates it), so writing through it is defined. */
  wk_group_t *g = (wk_group_t *)cg;
  wk_worker_t *w;
  size_t at = 0;
  if (g->w == NULL || local_rank < 0 || local_rank >= g->nproc)
    return "";
  w = &g->w[local_rank];
  if (w->tail_n == 0)
    return "";
  if (w->tail_join == NULL) {
    w->tail_join = malloc((size_t)g->tail_lines * (WK_TAIL_LINE_MAX + 1) + 1);
    if (w->tail_join == NULL)
      return "";
    w->tail_dirty = 1;
  }
  if (!w->tail_dirty)
    return w->tail_join;
  for (int i = 0; i < w->tail_n; i++) {
    int slot = (w->tail_head + i) % g->tail_lines;
    if (i > 0)
      w->tail_join[at++] = '\n';
    memcpy(w->tail_join + at, w->tail + (size_t)slot * (WK_TAIL_LINE_MAX + 1),
           w->tail_len[slot]);
    at += w->tail_len[slot];
  }
  w->tail_join[at] = '\0';
  w->tail_dirty = 0;
  return w->tail_join;
}

void wk_maybe_free(wk_group_t *g) {
  void (*cb)(void *);
  void *arg;
  if (g->handles_open > 0 || g->nopen > 0)
    return;
  cb = g->close_cb;
  arg = g->close_arg;
  wk_free_attempt(g);
  wk_sb_free(g);
  free(g->dying);
  free(g->rbuf);
  free(g->obuf);
  g->magic = 0;
  free(g);
  if (cb)
    cb(arg);
}

static void wk_on_handle_closed(uv_handle_t *h) {
  wk_group_t *g = h->data;
  g->handles_open--;
  wk_maybe_free(g);
}

void wk_group_close(wk_group_t *g, void (*cb)(void *arg), void *arg) {
  assert(g->magic == WK_MAGIC);
  assert(!g->closing);
  g->closing = 1;
  g->close_cb = cb;
  g->close_arg = arg;
  g->done = NULL;
  /* The contract says stopped; if not, no worker may outlive the group:
   * SIGKILL ends them at once, so waiting for them does not stall. */
  for (int i = 0; i < g->nproc && g->w; i++) {
    wk_worker_t *w = &g->w[i];
    int status;
    if (w->pid <= 0 || w->reaped)
      continue;
    LU_WARN(&g->log, "closing the worker group with local rank %d (pid %d) "
            "still running; killing it", i, (int)w->pid);
    wk_kill_group(w, SIGKILL);
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
      ;
    w->reaped = 1;
    g->nlive--;
  }
  wk_sb_close(g);
  wk_reap_dying(g, 1);
  /* Nothing the workers started outlives the group (the guardian goes
   * first: then, with the subreaper, a child left here is an orphan). */
  wk_guardian_stop(g);
  wk_sweep(g);
  for (int i = 0; i < g->nproc && g->w; i++)
    for (int k = 0; k < 2; k++)
      wk_stream_end(&g->w[i].st[k]);
  wk_cg_teardown(g, 100);
  if (g->own_subreaper) {
    (void)prctl(PR_SET_CHILD_SUBREAPER, 0);
    g->own_subreaper = 0;
  }
  free(g->esc);
  g->esc = NULL;
  g->nesc = 0;
  uv_close((uv_handle_t *)&g->sigchld, wk_on_handle_closed);
  uv_close((uv_handle_t *)&g->timer, wk_on_handle_closed);
  uv_close((uv_handle_t *)&g->defer, wk_on_handle_closed);
  uv_close((uv_handle_t *)&g->scan_timer, wk_on_handle_closed);
  wk_sb_close_handles(g);
}
