/* standby.c - pre-started workers (launch --standby, workers.h): one
 * process per local rank that has paid its start-up and waits on its
 * socketpair; wk_start hands it a rank instead of forking.
 *
 * A standby is a child of the agent in its own process group, like a
 * worker, but in no worker's cgroup (a stop or a sweep kills those) and
 * never counted in nlive: its exit is no worker's exit. The /proc scans
 * and the orphan reaper know its pid (wk_sb_is), the guardian its group. */
#include "wk_int.h"

static void wk_sb_on_timer(uv_timer_t *t);

int wk_sb_is(const wk_group_t *g, pid_t pid) {
  for (int i = 0; i < g->sb_n; i++)
    if (g->sb[i].pid > 0 && g->sb[i].pid == pid)
      return 1;
  return 0;
}

/* ---- its output while it waits ------------------------------------------- */

/* Append p[0..n) to what stream k of s holds: the last WK_SB_HOLD_MAX
 * bytes, cut at a line's start when something had to go. */
static void wk_sb_hold(wk_sb_t *s, int k, const char *p, size_t n) {
  size_t len = s->held_len[k], drop = 0;
  if (n >= WK_SB_HOLD_MAX) {
    drop = len + (n - WK_SB_HOLD_MAX);
    p += n - WK_SB_HOLD_MAX;
    n = WK_SB_HOLD_MAX;
    len = 0;
  } else if (len + n > WK_SB_HOLD_MAX) {
    drop = len + n - WK_SB_HOLD_MAX;
    memmove(s->held[k], s->held[k] + drop, len - drop);
    len -= drop;
  }
  if (s->held[k] == NULL &&
      (s->held[k] = malloc(WK_SB_HOLD_MAX)) == NULL) {
    s->dropped[k] += drop + n; /* out of memory: it is lost, not the loop */
    return;
  }
  memcpy(s->held[k] + len, p, n);
  len += n;
  if (drop > 0) {
    /* the rest of the cut line goes too */
    const char *nl = memchr(s->held[k], '\n', len);
    if (nl != NULL && nl + 1 < s->held[k] + len) {
      size_t cut = (size_t)(nl + 1 - s->held[k]);
      memmove(s->held[k], s->held[k] + cut, len - cut);
      len -= cut;
      drop += cut;
    }
  }
  s->held_len[k] = len;
  s->dropped[k] += drop;
}

/* Read what the pipe of stream k has now (at most max bytes). RET 1 at
 * its end (EOF or an error), else 0. */
static int wk_sb_pull(wk_sb_t *s, int k, size_t max) {
  wk_sb_out_t *o = s->out[k];
  size_t total = 0;
  while (o != NULL && o->fd >= 0 && total < max) {
    ssize_t r = read(o->fd, s->g->rbuf, WK_READ_BUF);
    if (r > 0) {
      wk_sb_hold(s, k, s->g->rbuf, (size_t)r);
      total += (size_t)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      return !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
  }
  return 0;
}

static void wk_sb_on_output(uv_poll_t *h, int status, int events) {
  wk_sb_out_t *o = h->data;
  (void)events;
  if (o->s == NULL)
    return;
  /* A reader that fell behind reads a few buffers a turn, not forever. */
  if (status < 0 || wk_sb_pull(o->s, o->k, 4 * WK_READ_BUF))
    uv_poll_stop(h); /* its end: the reap says what became of it */
}

static void wk_sb_on_out_closed(uv_handle_t *h) {
  wk_sb_out_t *o = h->data;
  wk_group_t *g = o->g;
  if (o->fd >= 0)
    close(o->fd);
  free(o);
  g->handles_open--;
  wk_maybe_free(g);
}

/* Start reading stream k of s from fd (taken: closed on any failure). */
static void wk_sb_watch(wk_sb_t *s, int k, int fd) {
  wk_sb_out_t *o;
  int rc;
  if ((o = calloc(1, sizeof(*o))) == NULL) {
    /* unread, it holds what the pipe holds */
    s->rfd[k] = fd;
    return;
  }
  o->g = s->g;
  o->fd = fd;
  o->s = s;
  o->k = k;
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if ((rc = uv_poll_init(s->g->loop, &o->h, fd)) != 0) {
    free(o);
    s->rfd[k] = fd;
    LU_DBG(&s->g->log, LU_DBG_SPAWN, "local rank %d: reading a standby's "
           "output failed: %s", s->local_rank, uv_strerror(rc));
    return;
  }
  o->h.data = o;
  s->g->handles_open++;
  s->out[k] = o;
  uv_poll_start(&o->h, UV_READABLE, wk_sb_on_output);
}

/* Stop reading stream k; RET its fd when keep (the caller's now), else
 * -1 (closed with the handle). */
static int wk_sb_unwatch(wk_sb_t *s, int k, int keep) {
  wk_sb_out_t *o = s->out[k];
  int fd = -1;
  if (o == NULL) {
    fd = s->rfd[k];
    s->rfd[k] = -1;
    if (!keep && fd >= 0) {
      close(fd);
      fd = -1;
    }
    return fd;
  }
  s->out[k] = NULL;
  o->s = NULL;
  if (keep) {
    fd = o->fd;
    o->fd = -1;
  }
  /* uv_close stops the watch at once: a pipe opened on fd afterwards is
   * the only watcher. */
  uv_close((uv_handle_t *)&o->h, wk_sb_on_out_closed);
  return fd;
}

static void wk_sb_forget_held(wk_sb_t *s) {
  for (int k = 0; k < 2; k++) {
    free(s->held[k]);
    s->held[k] = NULL;
    s->held_len[k] = 0;
    s->dropped[k] = 0;
  }
}

static void wk_sb_close_fds(wk_sb_t *s) {
  if (s->ctl >= 0)
    close(s->ctl);
  s->ctl = -1;
  for (int k = 0; k < 2; k++)
    (void)wk_sb_unwatch(s, k, 0);
  wk_sb_forget_held(s);
}

static const char *wk_env_get(char *const *envp, const char *key) {
  size_t n = strlen(key);
  for (; envp && *envp; envp++)
    if (strncmp(*envp, key, n) == 0 && (*envp)[n] == '=')
      return *envp + n + 1;
  return NULL;
}

/* Fork and exec the standby of s's rank. RET 0 or -errno (nothing left
 * running then). */
static int wk_sb_spawn(wk_sb_t *s) {
  wk_group_t *g = s->g;
  wk_exec_t x;
  wk_worker_t dummy;
  int sp[2] = {-1, -1}, op[2] = {-1, -1}, ep[2] = {-1, -1}, rc;
  const char *path;
  sigset_t all, old;
  pid_t pid;
  if (g->argv == NULL || s->local_rank >= g->nproc)
    return -EAGAIN; /* no attempt yet: the program is unknown */
  if ((rc = wk_prepare_exec(g, &x)) != 0)
    return rc;
  /* The PATH search may walk the standby's own PATH. */
  if ((path = wk_env_get(s->envp, "PATH")) != NULL &&
      strlen(path) + strlen(g->argv[0]) + 2 > x.pathcap) {
    char *b = realloc(x.pathbuf, strlen(path) + strlen(g->argv[0]) + 2);
    if (b == NULL) {
      rc = RDZV_ENOMEM;
      goto out;
    }
    x.pathbuf = b;
    x.pathcap = strlen(path) + strlen(g->argv[0]) + 2;
  }
  x.envp = s->envp;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0 ||
      (g->pipe_output &&
       (pipe2(op, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0))) {
    rc = -errno;
    goto out;
  }
  x.sb_fd = sp[1];
  memset(&dummy, 0, sizeof(dummy));
  dummy.g = g;
  dummy.local_rank = s->local_rank;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid = fork();
  if (pid == 0)
    wk_child(g, &dummy, &x, op[1], ep[1], -1);
  rc = pid < 0 ? -errno : 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    goto out;
  s->pid = pid;
  s->ready = 0;
  s->ctl = wk_fd_high(sp[0]);
  wk_sb_forget_held(s);
  /* Nothing else reads a standby's output until it takes a rank: read as
   * it comes and held, so that a warm-up that prints more than a pipe
   * holds does not block. */
  if (op[0] >= 0)
    wk_sb_watch(s, 0, wk_fd_high(op[0]));
  if (ep[0] >= 0)
    wk_sb_watch(s, 1, wk_fd_high(ep[0]));
  sp[0] = op[0] = ep[0] = -1;
  wk_guardian_send(g, WK_GUARD_ADD, pid);
  LU_DBG(&g->log, LU_DBG_SPAWN, "local rank %d: standby pid %d %s",
         s->local_rank, (int)pid, g->argv[0]);
out:
  for (int k = 0; k < 2; k++) {
    if (sp[k] >= 0)
      close(sp[k]);
    if (op[k] >= 0)
      close(op[k]);
    if (ep[k] >= 0)
      close(ep[k]);
  }
  free(x.sh_argv);
  free(x.pathbuf);
  return rc;
}

/* Whether the standby said ready: its 'R' is read once, without
 * blocking. */
static int wk_sb_check(wk_sb_t *s) {
  char b;
  ssize_t r;
  if (s->ready || s->pid <= 0 || s->ctl < 0)
    return s->ready;
  do
    r = recv(s->ctl, &b, 1, MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  if (r == 1 && b == 'R') {
    s->ready = 1;
    s->deaths = 0;
  }
  return s->ready;
}

static void wk_sb_give_up(wk_sb_t *s, const char *why) {
  s->off = 1;
  LU_WARN(&s->g->log, "local rank %d: standby %s; --standby needs a program "
          "that calls rt_standby_wait() (include/rt.h: train_gpt does); "
          "this rank's workers start as usual from now on", s->local_rank,
          why);
}

static void wk_sb_on_timer(uv_timer_t *t) {
  wk_sb_t *s = t->data;
  wk_group_t *g = s->g;
  int rc;
  if (g->closing || s->off)
    return;
  if (s->pid > 0) {
    /* The ready deadline. */
    if (!wk_sb_check(s)) {
      char why[256];
      snprintf(why, sizeof(why), "pid %d did not say ready within %" PRId64
               " ms", (int)s->pid, g->sb_ready_ms);
      wk_sb_give_up(s, why);
      kill(-s->pid, SIGKILL);
    }
    return;
  }
  if ((rc = wk_sb_spawn(s)) != 0) {
    if (rc != -EAGAIN)
      LU_WARN(&g->log, "local rank %d: starting a standby failed: %s; "
              "retrying in %d ms", s->local_rank, strerror(-rc),
              WK_SB_BACKOFF_MAX_MS);
    uv_timer_start(&s->timer, wk_sb_on_timer, WK_SB_BACKOFF_MAX_MS, 0);
    return;
  }
  if (g->sb_ready_ms > 0)
    uv_timer_start(&s->timer, wk_sb_on_timer, (uint64_t)g->sb_ready_ms, 0);
}

/* What the standby wrote before it died, for the log: the last line of
 * stderr, else of stdout. */
static void wk_sb_last_line(wk_sb_t *s, char *out, size_t cap) {
  out[0] = '\0';
  for (int k = 1; k >= 0 && out[0] == '\0'; k--) {
    const char *b, *e;
    (void)wk_sb_pull(s, k, WK_DRAIN_MAX);
    b = s->held[k];
    if (b == NULL) /* nothing held: no offset from NULL (undefined, even + 0) */
      continue;
    e = b + s->held_len[k];
    while (e > b && (e[-1] == '\n' || e[-1] == '\r'))
      e--;
    for (const char *q = e; q > b; q--)
      if (q[-1] == '\n') {
        b = q;
        break;
      }
    if (e > b)
      snprintf(out, cap, "%.*s", (int)LU_MIN((size_t)(e - b), cap - 1), b);
  }
}

static void wk_sb_died(wk_sb_t *s, int status) {
  wk_group_t *g = s->g;
  char line[256], how[48];
  int was_ready = s->ready;
  uint64_t delay;
  if (WIFSIGNALED(status))
    snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
  else
    snprintf(how, sizeof(how), "exited with code %d",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  wk_sb_last_line(s, line, sizeof(line));
  wk_sb_close_fds(s);
  kill(-s->pid, SIGKILL); /* whatever it started goes with it */
  wk_guardian_send(g, WK_GUARD_DEL, s->pid);
  uv_timer_stop(&s->timer);
  if (s->off || g->closing) {
    s->pid = 0;
    return;
  }
  if (!was_ready && ++s->deaths >= WK_SB_DEATHS) {
    char why[400];
    snprintf(why, sizeof(why), "pid %d %s %d times before it said ready%s%s",
             (int)s->pid, how, s->deaths, line[0] ? ": " : "", line);
    s->pid = 0;
    wk_sb_give_up(s, why);
    return;
  }
  delay = (uint64_t)WK_SB_BACKOFF_MS << LU_MIN(LU_MAX(s->deaths - 1, 0), 5);
  delay = LU_MIN(delay, (uint64_t)WK_SB_BACKOFF_MAX_MS);
  LU_WARN(&g->log, "local rank %d: standby pid %d %s%s%s; a new one in %d "
          "ms (no worker failed)", s->local_rank, (int)s->pid, how,
          line[0] ? ": " : "", line, (int)delay);
  s->pid = 0;
  s->ready = 0;
  uv_timer_start(&s->timer, wk_sb_on_timer, delay, 0);
}

/* From wk_reap: waitpid(pid, WNOHANG) for each standby. */
void wk_sb_reap(wk_group_t *g) {
  for (int i = 0; i < g->sb_n; i++) {
    wk_sb_t *s = &g->sb[i];
    int status = 0;
    pid_t r;
    if (s->pid <= 0)
      continue;
    do
      r = waitpid(s->pid, &status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
      continue;
    if (r < 0)
      status = -1;
    wk_sb_died(s, status);
  }
}

/* After a wk_start: the missing standbys start delay_ms later. */
void wk_sb_schedule(wk_group_t *g) {
  for (int i = 0; i < g->sb_n && i < g->nproc; i++) {
    wk_sb_t *s = &g->sb[i];
    if (s->pid == 0 && !s->off && !uv_is_active((uv_handle_t *)&s->timer))
      uv_timer_start(&s->timer, wk_sb_on_timer,
                     (uint64_t)LU_MAX(g->sb_delay_ms, 0), 0);
  }
}

/* clone3 places forked workers in their rank's cgroup; a standby moves
 * there (one write) before it runs as the worker, so that what it starts
 * is inside. Where the kernel refuses, its process group and the scans
 * still hold it. */
static void wk_sb_move(wk_group_t *g, wk_sb_t *s) {
  char num[16];
  int fd, n;
  if (g->contain != WK_CONTAIN_CGROUP || s->local_rank >= g->cg_nfd)
    return;
  fd = openat(g->cg_fd[s->local_rank], "cgroup.procs", O_WRONLY | O_CLOEXEC);
  n = snprintf(num, sizeof(num), "%d", (int)s->pid);
  if (fd < 0 || write(fd, num, (size_t)n) != n)
    LU_DBG(&g->log, LU_DBG_SPAWN, "moving standby pid %d into its rank's "
           "cgroup failed: %s", (int)s->pid, strerror(errno));
  if (fd >= 0)
    close(fd);
}

/* Hand the standby of rank k its environment envp, if it is ready. RET 1
 * when it took it (the caller adopts it with wk_sb_adopted), 0 when the
 * rank is forked instead. */
int wk_sb_take(wk_group_t *g, int k, char *const *envp) {
  wk_sb_t *s;
  size_t len = 0, at;
  uint32_t n32;
  char *blob;
  int ok;
  if (k >= g->sb_n)
    return 0;
  s = &g->sb[k];
  if (s->pid <= 0 || !wk_sb_check(s))
    return 0;
  for (char *const *e = envp; *e; e++)
    len += strlen(*e) + 1;
  if (len > UINT32_MAX - sizeof(n32) ||
      (blob = malloc(sizeof(n32) + len)) == NULL)
    return 0;
  wk_sb_move(g, s);
  n32 = (uint32_t)len;
  memcpy(blob, &n32, sizeof(n32));
  at = sizeof(n32);
  for (char *const *e = envp; *e; e++) {
    size_t l = strlen(*e) + 1;
    memcpy(blob + at, *e, l);
    at += l;
  }
  /* The standby blocks in read: a socketpair takes this at once; one that
   * does not read (stopped) gets 1 s between bytes, then the rank forks. */
  ok = 1;
  for (size_t off = 0; off < at && ok;) {
    ssize_t w = send(s->ctl, blob + off, at - off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0)
      off += (size_t)w;
    else if (w < 0 && errno == EINTR)
      continue;
    else if (w < 0 && errno == EAGAIN) {
      struct pollfd p = {s->ctl, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0)
        ok = 0;
    } else {
      ok = 0;
    }
  }
  free(blob);
  if (!ok) {
    /* Dying: it is reaped as a standby, the rank is forked. */
    LU_WARN(&g->log, "local rank %d: handing the rank to standby pid %d "
            "failed: %s; starting a new worker instead", k, (int)s->pid,
            strerror(errno));
    kill(-s->pid, SIGKILL);
    return 0;
  }
  return 1;
}

/* The standby of w's rank, handed its environment by wk_sb_take, is the
 * worker now: w takes its pid and output pipes (rfd[0..1]). */
void wk_sb_adopted(wk_group_t *g, wk_worker_t *w, int *rfd) {
  wk_sb_t *s = &g->sb[w->local_rank];
  w->pid = s->pid;
  w->status_fd = -1;
  for (int k = 0; k < 2; k++) {
    /* What it printed while it waited comes first, as a worker's would. */
    (void)wk_sb_pull(s, k, WK_DRAIN_MAX);
    if (rfd[k] >= 0)
      close(rfd[k]);
    rfd[k] = wk_sb_unwatch(s, k, 1);
    if (s->held_len[k] > 0)
      wk_feed(&w->st[k], s->held[k], s->held_len[k]);
    if (s->dropped[k] > 0)
      LU_WARN(&g->log, "local rank %d: the first %" PRIu64 " bytes its "
              "standby printed to %s before it took the rank are not in "
              "the logs (launch keeps the last %d KiB a stream)",
              w->local_rank, s->dropped[k], k == 0 ? "stdout" : "stderr",
              WK_SB_HOLD_MAX >> 10);
  }
  wk_sb_forget_held(s);
  close(s->ctl);
  s->ctl = -1;
  uv_timer_stop(&s->timer);
  LU_INFO(&g->log, "local rank %d: standby pid %d takes the rank",
          w->local_rank, (int)s->pid);
  s->pid = 0;
  s->ready = 0;
}

/* wk_group_close: every standby is SIGKILLed and reaped, its timer
 * closed (handles_open counts it). */
void wk_sb_close(wk_group_t *g) {
  for (int i = 0; i < g->sb_n; i++) {
    wk_sb_t *s = &g->sb[i];
    if (s->pid > 0) {
      int status;
      kill(-s->pid, SIGKILL);
      kill(s->pid, SIGKILL);
      while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
        ;
      wk_guardian_send(g, WK_GUARD_DEL, s->pid);
      s->pid = 0;
    }
    wk_sb_close_fds(s);
  }
}

static void wk_sb_on_closed(uv_handle_t *h) {
  wk_sb_t *s = h->data;
  wk_group_t *g = s->g;
  g->handles_open--;
  wk_maybe_free(g);
}

void wk_sb_close_handles(wk_group_t *g) {
  for (int i = 0; i < g->sb_n; i++)
    uv_close((uv_handle_t *)&g->sb[i].timer, wk_sb_on_closed);
}

void wk_sb_free(wk_group_t *g) {
  for (int i = 0; i < g->sb_n; i++)
    wk_free_strv(g->sb[i].envp);
  free(g->sb);
  g->sb = NULL;
  g->sb_n = 0;
}

int wk_standby_set(wk_group_t *g, const wk_standby_spec_t *sp) {
  assert(g->magic == WK_MAGIC);
  if (sp == NULL || sp->size < sizeof(*sp) || sp->nproc <= 0 ||
      sp->nproc > WK_NPROC_MAX || sp->envp == NULL || g->closing)
    return RDZV_EINVAL;
  for (int i = 0; i < sp->nproc; i++)
    if (sp->envp[i] == NULL)
      return RDZV_EINVAL;
  if (g->sb && g->sb_n != sp->nproc)
    return -EBUSY;
  if (g->sb == NULL) {
    if ((g->sb = calloc((size_t)sp->nproc, sizeof(*g->sb))) == NULL)
      return RDZV_ENOMEM;
    g->sb_n = sp->nproc;
    for (int i = 0; i < sp->nproc; i++) {
      wk_sb_t *s = &g->sb[i];
      s->g = g;
      s->local_rank = i;
      s->ctl = s->rfd[0] = s->rfd[1] = -1;
      uv_timer_init(g->loop, &s->timer);
      s->timer.data = s;
      /* Standbys never keep the loop alive. */
      uv_unref((uv_handle_t *)&s->timer);
      g->handles_open++;
    }
  }
  for (int i = 0; i < sp->nproc; i++) {
    /* Its own environment and where its socketpair is. */
    static const char fd_var[] = "LAUNCH_STANDBY_FD=3";
    size_t n = 0;
    char **v;
    while (sp->envp[i][n])
      n++;
    if ((v = calloc(n + 2, sizeof(char *))) == NULL)
      return RDZV_ENOMEM;
    for (size_t k = 0, j = 0; k <= n; k++) {
      const char *e = k < n ? sp->envp[i][k] : fd_var;
      if (k < n && strncmp(e, "LAUNCH_STANDBY_FD=", 18) == 0)
        continue;
      if ((v[j++] = strdup(e)) == NULL) {
        wk_free_strv(v);
        return RDZV_ENOMEM;
      }
    }
    wk_free_strv(g->sb[i].envp);
    g->sb[i].envp = v;
  }
  g->sb_delay_ms = sp->delay_ms;
  g->sb_ready_ms = sp->ready_ms;
  if (g->nlive > 0)
    wk_sb_schedule(g);
  return 0;
}

pid_t wk_standby_pid(const wk_group_t *g, int local_rank, int *ready) {
  if (ready)
    *ready = 0;
  if (g->sb == NULL || local_rank < 0 || local_rank >= g->sb_n)
    return 0;
  if (ready)
    *ready = wk_sb_check(&((wk_group_t *)g)->sb[local_rank]);
  return g->sb[local_rank].pid;
}
