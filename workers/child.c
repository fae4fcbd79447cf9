/* child.c - a worker between fork and exec: what it needs is prepared
 * before fork (wk_prepare_exec), the child itself makes async-signal-safe
 * calls only: its session, signals, descriptors, pre_exec, the PATH
 * search, and the status record of a failed exec. */
#include "wk_int.h"

static const char *wk_env_path(char *const *envp) {
  for (; *envp; envp++)
    if (strncmp(*envp, "PATH=", 5) == 0)
      return *envp + 5;
  return NULL;
}

/* The text of an exec errno, without strerror() (not async-signal-safe):
 * the texts are glibc's for the errors execve can report. */
const char *wk_exec_strerror(int e) {
  switch (e) {
  case ENOENT: return "No such file or directory";
  case EACCES: return "Permission denied";
  case ENOEXEC: return "Exec format error";
  case ENOTDIR: return "Not a directory";
  case ENAMETOOLONG: return "File name too long";
  case ELOOP: return "Too many levels of symbolic links";
  case ENOMEM: return "Cannot allocate memory";
  case E2BIG: return "Argument list too long";
  case ETXTBSY: return "Text file busy";
  case EISDIR: return "Is a directory";
  case EPERM: return "Operation not permitted";
  case EIO: return "Input/output error";
  case EMFILE: return "Too many open files";
  case ENFILE: return "Too many open files in system";
  case ELIBBAD: return "Accessing a corrupted shared library";
  case EINVAL: return "Invalid argument";
  case EFAULT: return "Bad address";
  default: return NULL;
  }
}

static void wk_child_fail(const char *what, const char *name, int err) {
  char msg[1024], num[16];
  const char *text = wk_exec_strerror(err);
  size_t n = 0;
  n = wk_cat(msg, n, sizeof(msg), "launch: ");
  n = wk_cat(msg, n, sizeof(msg), what);
  n = wk_cat(msg, n, sizeof(msg), " '");
  n = wk_cat(msg, n, sizeof(msg), name);
  n = wk_cat(msg, n, sizeof(msg), "': ");
  if (text == NULL) {
    int i = (int)sizeof(num) - 1, v = err < 0 ? -err : err;
    num[i] = '\0';
    do
      num[--i] = (char)('0' + v % 10);
    while ((v /= 10) > 0 && i > 0);
    n = wk_cat(msg, n, sizeof(msg), "errno ");
    text = num + i;
  }
  n = wk_cat(msg, n, sizeof(msg), text);
  n = wk_cat(msg, n, sizeof(msg), "\n");
  (void)!write(2, msg, n);
}

/* execve, falling back to /bin/sh for a script without "#!" as execvp
 * does. RET only on failure, with errno set. */
static void wk_try_exec(const wk_exec_t *x, const char *path, char *const argv[],
                        char *const envp[]) {
  execve(path, argv, envp);
  if (errno == ENOEXEC) {
    int save = errno;
    x->sh_argv[1] = (char *)path;
    execve("/bin/sh", x->sh_argv, envp);
    errno = save;
  }
}

/* execvp with the PATH of envp (glibc's execvpe searches the agent's). */
static int wk_exec(const wk_exec_t *x, char *const argv[], char *const envp[]) {
  const char *file = argv[0], *path, *p;
  size_t flen = strlen(file);
  int seen_eacces = 0;
  if (flen == 0)
    return ENOENT;
  if (strchr(file, '/') != NULL) {
    wk_try_exec(x, file, argv, envp);
    return errno;
  }
  path = wk_env_path(envp);
  if (path == NULL)
    path = WK_DEFAULT_PATH;
  for (p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dlen = end ? (size_t)(end - p) : strlen(p);
    char *b = x->pathbuf;
    if (dlen + 1 + flen + 1 <= x->pathcap) {
      /* An empty element is the current directory, as in execvp. */
      if (dlen == 0) {
        memcpy(b, file, flen + 1);
      } else {
        memcpy(b, p, dlen);
        b[dlen] = '/';
        memcpy(b + dlen + 1, file, flen + 1);
      }
      wk_try_exec(x, b, argv, envp);
      switch (errno) {
      case EACCES:
        seen_eacces = 1;
        break;
      case ENOENT:
      case ENOTDIR:
      case ESTALE:
      case ENODEV:
      case ETIMEDOUT:
      case ENAMETOOLONG:
        break;
      default:
        return errno;
      }
    }
    if (end == NULL)
      break;
    p = end;
  }
  return seen_eacces ? EACCES : ENOENT;
}

/* The child, between fork and exec: async-signal-safe calls only.
 * status_w: write end of the exec status pipe (close-on-exec), -1 none. */
void wk_child(wk_group_t *g, wk_worker_t *w, const wk_exec_t *x,
              int out_w, int err_w, int status_w) {
  int err;
  /* Own session and process group, like torchrun's start_new_session: a
   * stop signals the whole group, and the terminal's Ctrl-C reaches the
   * agent only, which then stops the workers itself. */
  setsid();
  /* Die with the agent; if it is gone already, PDEATHSIG will never fire. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != x->parent)
    _exit(127);
  /* Default dispositions before unblocking: the agent's handlers (libuv's)
   * would write into the agent's signal pipe. Ignored signals are reset
   * too: a worker starts as from a clean shell. */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      sigaction(s, &x->dfl, NULL);
  sigprocmask(SIG_SETMASK, &x->empty, NULL);
  if (g->pipe_output) {
    if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
      _exit(127);
  }
  /* The status pipe becomes fd 3 (close-on-exec: exec closes it, which
   * tells the agent the exec worked). Only 0, 1 and 2 cross into the
   * worker; a standby gets its socketpair as fd 3 (WK_SB_FD), kept open
   * across exec, and no status pipe. */
  if (x->sb_fd >= 0) {
    if (x->sb_fd == WK_SB_FD ? fcntl(WK_SB_FD, F_SETFD, 0) != 0
                             : dup2(x->sb_fd, WK_SB_FD) != WK_SB_FD)
      _exit(127);
    status_w = -1;
  } else if (status_w >= 0 && status_w != 3) {
    if (dup3(status_w, 3, O_CLOEXEC) == 3)
      status_w = 3;
    else
      status_w = -1;
  }
  {
    int keep3 = status_w == 3 || x->sb_fd >= 0;
    if (syscall(SYS_close_range, keep3 ? 4u : 3u, ~0u, 0u) != 0)
      for (int fd = keep3 ? 4 : 3; fd < x->maxfd; fd++)
        close(fd);
  }
  if (g->pre_exec) {
    char errbuf[512];
    errbuf[0] = '\0';
    if (g->pre_exec(w->local_rank, g->pre_exec_arg, errbuf, sizeof(errbuf)) !=
        0) {
      char msg[600];
      size_t n = 0;
      errbuf[sizeof(errbuf) - 1] = '\0';
      n = wk_cat(msg, n, sizeof(msg), "launch: ");
      n = wk_cat(msg, n, sizeof(msg),
                 errbuf[0] ? errbuf : "pre-exec setup failed");
      n = wk_cat(msg, n, sizeof(msg), "\n");
      (void)!write(2, msg, n);
      _exit(127);
    }
  }
  /* the open-file limit the user gave the job, not the agent's raised one */
  if (x->nofile_set)
    setrlimit(RLIMIT_NOFILE, &x->nofile);
  if (g->rank_argv) {
    /* This child's copy of the shell fallback's arguments: no allocation
     * after fork. */
    char **av = g->rank_argv[w->local_rank];
    for (size_t i = 1; av[i]; i++)
      x->sh_argv[i + 1] = av[i];
    err = wk_exec(x, av, x->envp ? x->envp : g->envp[w->local_rank]);
  } else {
    err = wk_exec(x, g->argv, x->envp ? x->envp : g->envp[w->local_rank]);
  }
  /* The agent writes the message once (wk_reap) when it can be told;
   * without the pipe the worker's stderr says it. */
  if (status_w == 3) {
    wk_exec_status_t st = {WK_EXEC_MAGIC, err};
    if (write(3, &st, sizeof(st)) == (ssize_t)sizeof(st))
      _exit(127);
  }
  wk_child_fail("cannot execute", g->argv[0], err);
  _exit(127);
}

/* Fill x for the workers of g's spec. RET 0 or RDZV_ENOMEM. */
int wk_prepare_exec(wk_group_t *g, wk_exec_t *x) {
  size_t nargs = 0, dmax = strlen(WK_DEFAULT_PATH);
  struct rlimit rl;
  memset(x, 0, sizeof(*x));
  x->parent = getpid();
  sigemptyset(&x->empty);
  x->dfl.sa_handler = SIG_DFL;
  sigemptyset(&x->dfl.sa_mask);
  while (g->argv[nargs])
    nargs++;
  if ((x->sh_argv = calloc(nargs + 2, sizeof(char *))) == NULL)
    return RDZV_ENOMEM;
  x->sh_argv[0] = (char *)"/bin/sh";
  for (size_t i = 1; i < nargs; i++)
    x->sh_argv[i + 1] = g->argv[i];
  for (int i = 0; i < g->nproc; i++) {
    const char *p = wk_env_path(g->envp[i]);
    if (p && strlen(p) > dmax)
      dmax = strlen(p); /* no element is longer than the whole */
  }
  x->pathcap = dmax + 1 + strlen(g->argv[0]) + 1;
  if ((x->pathbuf = malloc(x->pathcap)) == NULL) {
    free(x->sh_argv);
    return RDZV_ENOMEM;
  }
  x->sb_fd = -1;
  {
    unsigned long long cur, max;
    if (lu_nofile_given(&cur, &max)) {
      x->nofile.rlim_cur = (rlim_t)cur;
      x->nofile.rlim_max = (rlim_t)max;
      x->nofile_set = 1;
    }
  }
  x->maxfd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)x->maxfd)
    x->maxfd = (int)rl.rlim_cur;
  return 0;
}
