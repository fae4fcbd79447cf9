/* containment.c - what keeps processes that leave their worker's process
 * group reachable: a cgroup per worker (clone3 into it), else a child
 * subreaper and scans of /proc (workers.h, issue #11). */
#include "wk_int.h"

/* ---- containment: cgroups ------------------------------------------------------ */

#ifdef WK_HAVE_CLONE3
/* The directory of this process's cgroup in the cgroup v2 hierarchy:
 * "0::<path>" of /proc/self/cgroup under the mount point of the cgroup2
 * file system (a hybrid host has it at /sys/fs/cgroup/unified; a mount of
 * a subtree has its root in the fourth field of mountinfo). RET 0, or -1
 * with why. */
static int wk_cg_self_dir(char *out, size_t n, char *why, size_t wn) {
  FILE *cgf, *mi;
  int rc;
  if ((cgf = fopen("/proc/self/cgroup", "re")) == NULL) {
    snprintf(why, wn, "/proc/self/cgroup: %s", strerror(errno));
    return -1;
  }
  if ((mi = fopen("/proc/self/mountinfo", "re")) == NULL) {
    snprintf(why, wn, "/proc/self/mountinfo: %s", strerror(errno));
    fclose(cgf);
    return -1;
  }
  rc = wk__cg_dir(cgf, mi, out, n, why, wn);
  fclose(cgf);
  fclose(mi);
  return rc;
}
#endif

int wk__cg_dir(FILE *cgf, FILE *f, char *out, size_t n, char *why,
               size_t wn) {
  char line[4096], cg[PATH_MAX] = "", mnt[PATH_MAX] = "", root[PATH_MAX] = "";
  while (fgets(line, sizeof(line), cgf))
    if (strncmp(line, "0::", 3) == 0) {
      lu_strlcpy(cg, line + 3, sizeof(cg));
      cg[strcspn(cg, "\n")] = '\0';
    }
  if (cg[0] != '/') {
    snprintf(why, wn, "this process is in no cgroup v2 hierarchy");
    return -1;
  }
  while (fgets(line, sizeof(line), f)) {
    /* id parent major:minor root mountpoint options... - fstype source */
    char r[PATH_MAX], m[PATH_MAX];
    const char *dash = strstr(line, " - ");
    if (dash == NULL || strncmp(dash + 3, "cgroup2 ", 8) != 0 ||
        sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2)
      continue;
    lu_strlcpy(root, r, sizeof(root));
    lu_strlcpy(mnt, m, sizeof(mnt));
    break;
  }
  if (mnt[0] == '\0') {
    snprintf(why, wn, "no cgroup2 file system is mounted");
    return -1;
  }
  if (strcmp(root, "/") != 0) {
    size_t rl = strlen(root);
    if (strncmp(cg, root, rl) != 0 || (cg[rl] != '/' && cg[rl] != '\0')) {
      snprintf(why, wn, "this process's cgroup %s is outside the mounted "
               "cgroup2 tree %s", cg, root);
      return -1;
    }
    memmove(cg, cg + rl, strlen(cg + rl) + 1);
  }
  if ((size_t)snprintf(out, n, "%s%s", mnt, strcmp(cg, "/") ? cg : "") >= n) {
    snprintf(why, wn, "cgroup path too long");
    return -1;
  }
  return 0;
}

/* rmdir dir's sub-cgroups (empty ones: no process), deepest first, and
 * dir. */
static void wk_cg_rmdir_tree(const char *dir) {
  (void)wk_cg_rmdir_deep(dir, WK_CG_DEPTH + 1);
}

#ifdef WK_HAVE_CLONE3
/* launch.<pid>.<id> directories of agents that are gone (SIGKILLed while
 * the guardian could not clean up, say): remove the empty ones. */
static void wk_cg_clean_stale(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (d == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    char path[PATH_MAX + 256];
    long pid;
    char *end;
    if (strncmp(e->d_name, "launch.", 7) != 0)
      continue;
    pid = strtol(e->d_name + 7, &end, 10);
    if (pid <= 0 || *end != '.' || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    wk_cg_rmdir_tree(path);
  }
  closedir(d);
}

/* Make the group's cgroup directory. RET 0 or -1 with why. */
static int wk_cg_setup(wk_group_t *g, char *why, size_t wn) {
  char self[PATH_MAX], hex[8];
  uint8_t r[3];
  if (wk_cg_self_dir(self, sizeof(self), why, wn) != 0)
    return -1;
  wk_cg_clean_stale(self);
  lu_random(r, sizeof(r));
  lu_hex(r, sizeof(r), hex);
  if ((size_t)snprintf(g->cg_base, sizeof(g->cg_base), "%s/launch.%d.%s", self,
                       (int)getpid(), hex) >= sizeof(g->cg_base) ||
      mkdir(g->cg_base, 0755) != 0) {
    snprintf(why, wn, "cannot create a cgroup in %s: %s", self,
             strerror(errno));
    g->cg_base[0] = '\0';
    return -1;
  }
  return 0;
}

#endif

/* The cgroups of the previous attempt go (killed at its end, they are
 * empty or nearly), those of this one, w<rank>.<attempt> for ranks
 * 0..n-1, are made and opened for clone3. RET 0 or -errno. */
int wk_cg_ranks(wk_group_t *g, int n) {
  int *fds = realloc(g->cg_fd, sizeof(int) * (size_t)LU_MAX(n, g->cg_nfd));
  if (fds == NULL)
    return RDZV_ENOMEM;
  g->cg_fd = fds;
  for (int k = 0; k < g->cg_nfd; k++) {
    char path[PATH_MAX + 48];
    close(g->cg_fd[k]);
    wk_cg_path(path, sizeof(path), g->cg_base, k, g->cg_attempt);
    (void)rmdir(path);
  }
  g->cg_nfd = 0;
  g->cg_attempt = g->attempt;
  for (int k = 0; k < n; k++) {
    char path[PATH_MAX + 48];
    wk_cg_path(path, sizeof(path), g->cg_base, k, g->cg_attempt);
    if (mkdir(path, 0755) != 0 ||
        (g->cg_fd[k] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      return -errno;
    g->cg_nfd = k + 1;
  }
  return 0;
}

/* Give up cgroups: close, remove (waiting up to ms for the last processes
 * of a kill to exit). */
void wk_cg_teardown(wk_group_t *g, int ms) {
  uint32_t *att;
  if (g->cg_base[0] == '\0')
    return;
  att = calloc((size_t)LU_MAX(g->cg_nfd, 1), sizeof(*att));
  for (int k = 0; k < g->cg_nfd; k++) {
    close(g->cg_fd[k]);
    if (att)
      att[k] = g->cg_attempt + 1;
  }
  if (att)
    wk_cg_rmdir_all(g->cg_base, att, g->cg_nfd, ms);
  free(att);
  /* Earlier attempts' cgroups that were still busy when they went. */
  wk_cg_rmdir_tree(g->cg_base);
  free(g->cg_fd);
  g->cg_fd = NULL;
  g->cg_nfd = 0;
  g->cg_base[0] = '\0';
}

/* sig to every process of worker cgroup k (SIGKILL: all of it, at once). */
static void wk_cg_signal(wk_group_t *g, int k, int sig) {
  char path[PATH_MAX + 48], *text, *p;
  FILE *f;
  wk_cg_path(path, sizeof(path), g->cg_base, k, g->cg_attempt);
  if (sig == SIGKILL) {
    wk_cg_kill_dir(path);
    return;
  }
  wk_cat(path, strlen(path), sizeof(path), "/cgroup.procs");
  if ((f = fopen(path, "re")) == NULL)
    return;
  text = NULL;
  {
    size_t cap = 0;
    ssize_t r;
    while ((r = getline(&text, &cap, f)) > 0)
      for (p = text; *p; p++)
        if (*p >= '0' && *p <= '9') {
          kill((pid_t)strtol(p, &p, 10), sig);
          p--;
        }
  }
  free(text);
  fclose(f);
}

/* Orphans of workers come here, not to init: before the first fork, so
 * that a worker that daemonizes at once cannot slip out. */
void wk_become_subreaper(wk_group_t *g) {
  int was = 0;
  if (!g->own_subreaper && prctl(PR_GET_CHILD_SUBREAPER, &was) == 0 && !was &&
      prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    g->own_subreaper = 1;
}

/* Fork worker (or guardian) k into its cgroup when the group uses them.
 * The first clone3 is the test that this process may place processes
 * there: when it fails, the group falls back to the subreaper. */
pid_t wk_fork_worker(wk_group_t *g, int k) {
#ifdef WK_HAVE_CLONE3
  if (g->contain == WK_CONTAIN_CGROUP && k < g->cg_nfd) {
    /* struct clone_args of linux/sched.h (Linux >= 5.7, CLONE_INTO_CGROUP) */
    struct {
      uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
          stack_size, tls, set_tid, set_tid_size, cgroup;
    } ca;
    long pid;
    memset(&ca, 0, sizeof(ca));
    ca.flags = 0x200000000ULL; /* CLONE_INTO_CGROUP */
    ca.exit_signal = SIGCHLD;
    ca.cgroup = (uint64_t)g->cg_fd[k];
    pid = syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid >= 0) {
      g->cg_proven = 1;
      return (pid_t)pid;
    }
    if (g->cg_proven)
      return -1;
    snprintf(g->contain_what, sizeof(g->contain_what),
             "clone3(CLONE_INTO_CGROUP) into %s failed: %s", g->cg_base,
             strerror(errno));
    g->contain = WK_CONTAIN_SUBREAPER;
    wk_become_subreaper(g);
  }
#endif
  (void)k;
  return fork();
}

/* ---- containment: subreaper and /proc scans ----------------------------------- */

int wk__stat_proc(const char *buf, wk_proc_t *x) {
  const char *p;
  int field = 3;
  /* ") " ending the text (a stat cut short) has no state: reading on
   * after it ran past the text's NUL */
  if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == '\0')
    return -1;
  memset(x, 0, sizeof(*x));
  x->state = p[2];
  p += 3;
  /* ") S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime stime cutime cstime priority nice threads itrealvalue start" */
  while (*p && field < 22) {
    while (*p && *p != ' ')
      p++;
    if (*p)
      p++;
    field++;
    if (field == 4)
      x->ppid = (pid_t)atoi(p);
    else if (field == 5)
      x->pgid = (pid_t)atoi(p);
  }
  x->start = strtoull(p, NULL, 10);
  return 0;
}

/* Every process of /proc (this pid namespace). OUT *out (free it). RET
 * the count, -1 when /proc cannot be read. */
static int wk_proc_list(wk_proc_t **out) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  wk_proc_t *v = NULL;
  int n = 0, cap = 0;
  *out = NULL;
  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    char path[300], buf[1024];
    int fd;
    ssize_t r;
    wk_proc_t x;
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      continue;
    r = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (r <= 0)
      continue;
    buf[r] = '\0';
    if (wk__stat_proc(buf, &x) != 0)
      continue;
    x.pid = (pid_t)atoi(e->d_name);
    if (n == cap) {
      wk_proc_t *nv = realloc(v, sizeof(*v) * (size_t)(cap = cap ? cap * 2 : 256));
      if (nv == NULL)
        break;
      v = nv;
    }
    v[n++] = x;
  }
  closedir(d);
  *out = v;
  return n;
}

static int wk_proc_cmp(const void *a, const void *b) {
  pid_t x = ((const wk_proc_t *)a)->pid, y = ((const wk_proc_t *)b)->pid;
  return x < y ? -1 : x > y;
}

static const wk_proc_t *wk_proc_find(const wk_proc_t *v, int n, pid_t pid) {
  const wk_proc_t key = {.pid = pid};
  return bsearch(&key, v, (size_t)n, sizeof(*v), wk_proc_cmp);
}

/* A worker, or a standby (standby.c): both are the agent's to reap; or a
 * child of the agent's own (its GPU sampler): neither tracked nor reaped
 * here. */
static int wk_is_worker(const wk_group_t *g, pid_t pid) {
  for (int i = 0; i < g->nproc && g->w; i++)
    if (g->w[i].pid == pid)
      return 1;
  return wk_sb_is(g, pid) || wk_is_dying(g, pid) ||
         (g->own_child && g->own_child(pid, g->own_child_arg));
}

/* Scan /proc: descendants of this process (workers' children, and the
 * orphans of workers that came here as we are their subreaper) outside
 * the workers' process groups are recorded and told to the guardian;
 * those gone are forgotten; adopted orphans that died are reaped. */
static void wk_scan(wk_group_t *g) {
  wk_proc_t *v;
  pid_t self = getpid();
  int n = wk_proc_list(&v);
  if (n < 0)
    return;
  if (n > 1)
    qsort(v, (size_t)n, sizeof(*v), wk_proc_cmp);
  for (int i = 0; i < g->nesc; i++)
    g->esc[i].seen = 0;
  for (int i = 0; i < n; i++) {
    wk_proc_t *p = &v[i];
    pid_t up = p->ppid;
    int mine = 0, in_group = 0, known = 0;
    if (p->pid == self || p->pid == g->guard_pid || wk_is_worker(g, p->pid))
      continue;
    /* Up the parent chain to this process (bounded: a chain can change
     * while /proc is read). */
    for (int depth = 0; depth < 64 && up > 1; depth++) {
      const wk_proc_t *q;
      if (up == self) {
        mine = 1;
        break;
      }
      if ((q = wk_proc_find(v, n, up)) == NULL)
        break;
      up = q->ppid;
    }
    if (!mine)
      continue;
    if (p->ppid == self && p->state == 'Z' && g->own_subreaper) {
      /* An orphan that came here and died. */
      int status;
      (void)waitpid(p->pid, &status, WNOHANG);
      continue;
    }
    for (int k = 0; k < g->nproc && g->w; k++)
      in_group |= g->w[k].pid > 0 && p->pgid == g->w[k].pid;
    in_group |= wk_sb_is(g, p->pgid); /* a standby's own group */
    if (in_group)
      continue; /* the group signals reach it */
    for (int k = 0; k < g->nesc; k++)
      if (g->esc[k].pid == p->pid && g->esc[k].start == p->start) {
        g->esc[k].seen = known = 1;
        break;
      }
    if (known || g->nesc >= WK_ESC_MAX)
      continue;
    if (g->esc == NULL && (g->esc = calloc(WK_ESC_MAX, sizeof(*g->esc))) == NULL)
      continue;
    g->esc[g->nesc].pid = p->pid;
    g->esc[g->nesc].start = p->start;
    g->esc[g->nesc].seen = 1;
    g->nesc++;
    wk_guardian_send2(g, WK_GUARD_ADD_PID, p->pid, p->start);
    LU_DBG(&g->log, LU_DBG_SPAWN, "pid %d left its worker's process group; "
           "tracked", (int)p->pid);
  }
  for (int k = 0; k < g->nesc;)
    if (!g->esc[k].seen) {
      wk_guardian_send2(g, WK_GUARD_DEL_PID, g->esc[k].pid, 0);
      g->esc[k] = g->esc[--g->nesc];
    } else {
      k++;
    }
  free(v);
}

static void wk_on_scan(uv_timer_t *t) { wk_scan(t->data); }

/* sig to everything that left the workers' process groups. */
void wk_escaped_signal(wk_group_t *g, int sig) {
  if (g->contain == WK_CONTAIN_CGROUP) {
    for (int k = 0; k < g->cg_nfd; k++) {
      char path[PATH_MAX + 48];
      /* An empty cgroup goes at once (the usual end: every worker exited
       * and left nothing); one that still holds processes refuses. */
      wk_cg_path(path, sizeof(path), g->cg_base, k, g->cg_attempt);
      if (sig == SIGKILL && wk_cg_rmdir_deep(path, WK_CG_DEPTH) == 0)
        continue;
      wk_cg_signal(g, k, sig);
    }
    /* What left its cgroup too (a root worker's daemon that moved itself
     * to another cgroup) came here, as we are the subreaper: the scan
     * tracks it like in subreaper mode. */
  } else if (g->contain != WK_CONTAIN_SUBREAPER) {
    return;
  }
  wk_scan(g);
  for (int k = 0; k < g->nesc; k++)
    if (wk_start_time(g->esc[k].pid) == g->esc[k].start)
      kill(g->esc[k].pid, sig);
}

/* Orphans of workers that came here (we are their subreaper) and died:
 * reap them, by pid, without /proc. Only when we set the subreaper flag:
 * then every child that is neither a worker nor the guardian is one. */
void wk_reap_orphans(wk_group_t *g) {
  if (!g->own_subreaper)
    return;
  for (int n = 0; n < 4096; n++) {
    siginfo_t si;
    int status;
    memset(&si, 0, sizeof(si));
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0 ||
        si.si_pid == g->guard_pid || wk_is_worker(g, si.si_pid))
      return;
    (void)waitpid(si.si_pid, &status, WNOHANG);
  }
}

/* What a worker left behind dies: at the end of a stop and at close. The
 * process groups of every worker of the attempt (live or reaped: the
 * group may outlive its leader), the cgroups, the escaped processes. */
void wk_sweep(wk_group_t *g) {
  for (int i = 0; i < g->nproc && g->w; i++)
    if (g->w[i].pid > 0)
      kill(-g->w[i].pid, SIGKILL);
  if (g->contain == WK_CONTAIN_SUBREAPER && g->nlive == 0 && g->guard_pid <= 0 &&
      g->nesc == 0) {
    /* Every worker reaped and no guardian: a process that outlived its
     * worker would be a child here now (we are its subreaper), or the
     * child of one. None left, nothing escaped: no scan of /proc. */
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (g->own_subreaper &&
        waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD)
      return;
  }
  wk_escaped_signal(g, SIGKILL);
  if (g->own_subreaper) {
    /* Reap what died of it (orphans came here). */
    struct timespec ts = {0, 1000000};
    for (int t = 0; t < 20; t++) {
      wk_scan(g);
      if (g->nesc == 0)
        break;
      nanosleep(&ts, NULL);
    }
  }
}

/* The first wk_start decides; the fork loop may still fall back (see
 * wk_fork_worker). */
void wk_contain_setup(wk_group_t *g) {
  char why[PATH_MAX + 100] = "";
  if (g->contain != WK_CONTAIN_AUTO)
    return;
#ifdef WK_HAVE_CLONE3
  if (g->contain_req == WK_CONTAIN_AUTO && wk_cg_setup(g, why, sizeof(why)) == 0) {
    g->contain = WK_CONTAIN_CGROUP;
    /* The cgroup holds what stays inside; the subreaper and the scan catch
     * what leaves it (issue #24). */
    wk_become_subreaper(g);
    return;
  }
#else
  snprintf(why, sizeof(why), "built without clone3 (or with TSan)");
#endif
  if (g->contain_req == WK_CONTAIN_SUBREAPER)
    snprintf(why, sizeof(why), "asked for");
  g->contain = WK_CONTAIN_SUBREAPER;
  lu_strlcpy(g->contain_what, why, sizeof(g->contain_what));
  wk_become_subreaper(g);
}

/* After the fork loop: the subreaper when in use, and the one line. */
void wk_contain_started(wk_group_t *g, int first) {
  if (g->contain == WK_CONTAIN_SUBREAPER && g->cg_base[0])
    wk_cg_teardown(g, 0);
  if (g->contain == WK_CONTAIN_SUBREAPER || g->contain == WK_CONTAIN_CGROUP)
    uv_timer_start(&g->scan_timer, wk_on_scan, WK_SCAN_MS, WK_SCAN_MS);
  if (!first)
    return;
  if (g->contain == WK_CONTAIN_CGROUP) {
    char why[sizeof(g->contain_what)];
    snprintf(why, sizeof(why), "workers contained by cgroup v2 in %.1000s: each "
             "worker and whatever it starts is stopped and killed as a whole "
             "(what leaves its cgroup: by the subreaper and a /proc scan)",
             g->cg_base);
    lu_strlcpy(g->contain_what, why, sizeof(g->contain_what));
  } else {
    char why[sizeof(g->contain_what)];
    /* The reason is short (a path and an errno text): cut it if not. */
    snprintf(why, sizeof(why), "workers contained by subreaper and a /proc "
             "scan every %d ms (no cgroup v2: %.1000s); a process that escapes "
             "its worker's group just before the agent is SIGKILLed can "
             "outlive it",
             WK_SCAN_MS, g->contain_what);
    lu_strlcpy(g->contain_what, why, sizeof(g->contain_what));
  }
  /* The caller says it (the agent, once); here for debugging. */
  LU_DBG(&g->log, LU_DBG_SPAWN, "%s", g->contain_what);
}
