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
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "workers.h"

#define WK_MAGIC 0x776b6772u
#define WK_NPROC_MAX 4096
#define WK_READ_BUF (64 * 1024)   /* one read from a pipe */
#define WK_LINE_MAX (64 * 1024)   /* longer lines reach the console in chunks */
#define WK_PREFIX_MAX 1024        /* longer prefixes are cut */
#define WK_TAIL_LINES_MAX 1000    /* tail_lines is clamped to this */
#define WK_TAIL_LINE_MAX 1024     /* bytes kept of one tail line */
#define WK_DRAIN_MAX (1024 * 1024) /* bytes read synchronously at reap */
#define WK_DRAIN_MS 1000          /* after SIGKILL, pipes get this to EOF */
#define WK_DEFAULT_PATH "/bin:/usr/bin"
#define WK_ESC_MAX 4096           /* escaped processes tracked (subreaper) */
#define WK_SCAN_MS 1000           /* subreaper mode: scan while workers run */
#define WK_EXEC_MAGIC 0x65786563  /* "exec": a status record follows */

/* Workers go into their cgroups through a raw clone3 (CLONE_INTO_CGROUP):
 * moving a process by writing cgroup.procs costs ~20 ms here (an RCU grace
 * period for the first move), clone3 nothing. ThreadSanitizer cannot follow
 * a child made behind its back: its builds use the subreaper. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WK_TSAN 1
#endif
#endif
#if defined(SYS_clone3) && !defined(__SANITIZE_THREAD__) && !defined(WK_TSAN)
#define WK_HAVE_CLONE3 1
#endif

enum {
  WK_GUARD_ADD = 1,    /* a: a worker's process group */
  WK_GUARD_DEL = 2,
  WK_GUARD_DISARM = 3,
  WK_GUARD_ADD_PID = 4, /* a: pid, b: its start time (clock ticks) */
  WK_GUARD_DEL_PID = 5,
  WK_GUARD_ADD_CG = 6   /* a: local rank whose cgroup w<rank> is in use */
};

/* One message to the guardian (a SOCK_SEQPACKET datagram). */
typedef struct wk_guard_msg_s {
  int32_t op;
  int32_t a;
  uint64_t b;
} wk_guard_msg_t;

/* What a child whose exec failed writes to its status pipe. */
typedef struct wk_exec_status_s {
  int32_t magic;
  int32_t err;
} wk_exec_status_t;

/* A process outside the workers' process groups (subreaper mode). */
typedef struct wk_esc_s {
  pid_t pid;
  unsigned long long start; /* /proc/<pid>/stat field 22: tells reuse apart */
  int seen;                 /* in the last scan */
} wk_esc_t;
enum { WK_IDLE = 0, WK_GRACE, WK_KILLED };

typedef struct wk_worker_s wk_worker_t;

typedef struct wk_stream_s {
  uv_pipe_t pipe;
  wk_worker_t *w;
  int bit;        /* WK_STDOUT or WK_STDERR */
  int active;     /* pipe open and read; cleared when uv_close is called */
  int console_fd; /* 1, 2, or -1 when the stream does not reach the console */
  int file_fd;    /* -1 when the stream is not written to a file */
  int has_file;   /* it is (file_fd may be closed already: EOF came) */
  char *line;     /* partial line, WK_LINE_MAX bytes once allocated */
  size_t len;
  int redraw;     /* the stream redraws its line with '\r' (a progress
                     bar): the partial line is shown as it grows */
  int at_cr;      /* the console's cursor is at the start of a redrawn
                     line: a bare '\n' ends it */
  size_t shown;   /* bytes of the partial line the console shows */
} wk_stream_t;

struct wk_worker_s {
  wk_group_t *g;
  int local_rank;
  pid_t pid;     /* 0 before fork */
  int reaped;
  int guarded;   /* registered with the guardian */
  int status_fd; /* read end of the exec status pipe, -1 when none */
  int exec_errno;
  int nopen;     /* streams whose close callback has not run */
  int rfd[2];    /* read ends before they become uv pipes */
  wk_stream_t st[2];
  /* Ring of the last tail_lines stderr lines, slots of WK_TAIL_LINE_MAX+1. */
  char *tail;
  size_t *tail_len;
  int tail_head, tail_n;
  char *tail_join; /* built by wk_tail, never moves until the next start */
  int tail_dirty;
};

struct wk_group_s {
  unsigned magic;
  uv_loop_t *loop;
  lu_log_t log;
  uv_signal_t sigchld;
  uv_timer_t timer; /* stop: SIGKILL deadline, then the drain deadline */
  uv_timer_t defer; /* zero delay: reap scan and done, from the loop */
  int handles_open; /* of the three above */

  /* The copied spec of the current (or last) attempt. */
  int nproc;
  char **argv;
  char ***rank_argv; /* NULL, or per rank (spec.rank_argv) */
  char ***envp;
  char **prefix;
  size_t *prefix_len;
  unsigned *redirects, *tee;
  unsigned char *console;
  char *attempt_dir;
  int tail_lines;
  int pipe_output;
  int (*pre_exec)(int, void *, char *, size_t);
  void *pre_exec_arg;

  wk_worker_t *w;
  unsigned attempt; /* bumped by every wk_start */
  int nlive;        /* forked, not reaped */
  int nopen;        /* streams whose close callback has not run */
  wk_exit_cb on_exit;
  void *exit_arg;

  int stop_phase;
  wk_done_cb done;
  void *done_arg;

  char *rbuf; /* read buffer shared by every pipe (reads are sequential) */
  char *obuf; /* prefix + line + '\n' for one console write */

  pid_t guard_pid; /* 0 when there is none */
  int guard_fd;    /* agent's end of the guardian socket, -1 when none */

  /* Containment, decided at the first wk_start. */
  int contain_req;          /* WK_CONTAIN_AUTO or _SUBREAPER */
  int contain;              /* in use; WK_CONTAIN_AUTO before the decision */
  char contain_what[PATH_MAX + 160];
  char cg_base[PATH_MAX];   /* .../launch.<pid>.<id>, "" when none */
  int *cg_fd;               /* per local rank: the w<rank> directory */
  int cg_nfd;
  unsigned cg_attempt;      /* the attempt cg_fd belongs to */
  int cg_proven;            /* a clone3 into a cgroup worked */
  int own_subreaper;        /* we set PR_SET_CHILD_SUBREAPER */
  uv_timer_t scan_timer;    /* subreaper mode, while workers run */
  wk_esc_t *esc;            /* escaped processes known */
  int nesc;

  int closing;
  void (*close_cb)(void *);
  void *close_arg;
};

/* ---- small helpers --------------------------------------------------------- */

static void wk_free_strv(char **v) {
  if (v == NULL)
    return;
  for (char **p = v; *p; p++)
    free(*p);
  free(v);
}

static char **wk_dup_strv(char *const *v) {
  size_t n = 0;
  char **out;
  while (v[n])
    n++;
  if ((out = calloc(n + 1, sizeof(*out))) == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if ((out[i] = strdup(v[i])) == NULL) {
      wk_free_strv(out);
      return NULL;
    }
  return out;
}

/* Write all of buf. A console that is a non-blocking pipe or tty gets
 * waited on with poll(2) (it blocks the loop like a full console would
 * block any program); a console that is gone drops the data. */
static int wk_write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = write(fd, buf, n);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, -1);
      continue;
    }
    return r < 0 ? -errno : -EIO;
  }
  return 0;
}

/* Move fd to a number >= 3 with close-on-exec set, so that dup2 onto 0/1/2
 * in the child always makes a fresh descriptor (an agent started with fd 1
 * closed would otherwise get a pipe end there). RET new fd or -errno. */
static int wk_fd_high(int fd) {
  int nfd;
  if (fd >= 3)
    return fd;
  nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return nfd < 0 ? -errno : nfd;
}

static const char *wk_exec_strerror(int e);

/* ---- small async-signal-safe helpers (guardian, child) ----------------- */

/* Append to a fixed buffer. */
static size_t wk_cat(char *buf, size_t at, size_t cap, const char *s) {
  while (*s && at + 1 < cap)
    buf[at++] = *s++;
  buf[at] = '\0';
  return at;
}

static size_t wk_cat_u(char *buf, size_t at, size_t cap, unsigned long long v) {
  char num[24];
  int i = (int)sizeof(num) - 1;
  num[i] = '\0';
  do
    num[--i] = (char)('0' + v % 10);
  while ((v /= 10) > 0 && i > 0);
  return wk_cat(buf, at, cap, num + i);
}

static int wk_write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t r;
  size_t n = strlen(text);
  if (fd < 0)
    return -errno;
  r = write(fd, text, n);
  r = r < 0 ? -errno : 0;
  close(fd);
  return (int)r;
}

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot),
 * 0 when the process is gone. Tells a pid apart from a later reuse. */
static unsigned long long wk_start_time(pid_t pid) {
  char path[64], buf[1024], *p = NULL;
  unsigned long long v = 0;
  int fd, field = 2;
  ssize_t r;
  size_t at = wk_cat(path, 0, sizeof(path), "/proc/");
  at = wk_cat_u(path, at, sizeof(path), (unsigned long long)pid);
  wk_cat(path, at, sizeof(path), "/stat");
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return 0;
  r = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (r <= 0)
    return 0;
  buf[r] = '\0';
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
  for (ssize_t i = r - 1; i >= 0; i--)
    if (buf[i] == ')') {
      p = buf + i + 1;
      break;
    }
  if (p == NULL)
    return 0;
  while (*p && field < 22) {
    if (*p == ' ')
      field++;
    p++;
  }
  while (*p >= '0' && *p <= '9')
    v = v * 10 + (unsigned long long)(*p++ - '0');
  return v;
}

/* SIGKILL everything in a cgroup: cgroup.kill (Linux >= 5.14), else freeze
 * it, kill what cgroup.procs lists, thaw, until it lists nothing. */
static void wk_cg_kill_dir(const char *dir) {
  char path[PATH_MAX + 32], buf[4096];
  size_t at = wk_cat(path, 0, sizeof(path), dir);
  wk_cat(path, at, sizeof(path), "/cgroup.kill");
  if (wk_write_file(path, "1") == 0)
    return;
  wk_cat(path, at, sizeof(path), "/cgroup.freeze");
  (void)wk_write_file(path, "1");
  for (int round = 0; round < 100; round++) {
    int fd, any = 0;
    ssize_t r;
    wk_cat(path, at, sizeof(path), "/cgroup.procs");
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      break;
    while ((r = read(fd, buf, sizeof(buf) - 1)) > 0) {
      pid_t pid = 0;
      for (ssize_t i = 0; i < r; i++) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else if (pid > 0) {
          kill(pid, SIGKILL);
          any = 1;
          pid = 0;
        }
      }
      if (pid > 0) {
        kill(pid, SIGKILL);
        any = 1;
      }
    }
    close(fd);
    if (!any)
      break;
  }
  wk_cat(path, at, sizeof(path), "/cgroup.freeze");
  (void)wk_write_file(path, "0");
}

/* "<base>/w<rank>.<attempt>" into buf: a cgroup per worker and attempt,
 * as a cgroup that was killed kills what is later put in it. */
static void wk_cg_path(char *buf, size_t cap, const char *base, int rank,
                       unsigned attempt) {
  size_t at = wk_cat(buf, 0, cap, base);
  at = wk_cat(buf, at, cap, "/w");
  at = wk_cat_u(buf, at, cap, (unsigned long long)rank);
  at = wk_cat(buf, at, cap, ".");
  wk_cat_u(buf, at, cap, (unsigned long long)attempt);
}

/* rmdir a cgroup and every cgroup under it, deepest first: a worker may
 * have made sub-cgroups (and moved processes into them), which an rmdir of
 * its own cgroup alone leaves behind for good. Async-signal-safe (the
 * guardian calls it): getdents64 on a stack buffer, no malloc. depth
 * bounds the recursion. RET 0 when dir is gone (or never was). */
static int wk_cg_rmdir_deep(const char *dir, int depth) {
  char buf[4096];
  int fd;
  long r;
  if (rmdir(dir) == 0 || errno == ENOENT)
    return 0;
  if (errno != EBUSY && errno != ENOTEMPTY)
    return -1;
  if (depth <= 0 ||
      (fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
    return -1;
  while ((r = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
    for (long off = 0; off < r;) {
      struct {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *e = (void *)(buf + off);
      off += e->reclen;
      if (e->type == DT_DIR && e->name[0] != '.') {
        char sub[PATH_MAX + 256];
        size_t at = wk_cat(sub, 0, sizeof(sub), dir);
        at = wk_cat(sub, at, sizeof(sub), "/");
        if (wk_cat(sub, at, sizeof(sub), e->name) < sizeof(sub) - 1)
          (void)wk_cg_rmdir_deep(sub, depth - 1);
      }
    }
  }
  close(fd);
  return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

#define WK_CG_DEPTH 16 /* sub-cgroup levels removed under a worker's */

/* rmdir the worker cgroups att[k] (attempt + 1; 0: none) and the base; a
 * cgroup whose last process is still exiting refuses for a moment: try
 * for up to `ms`. */
static void wk_cg_rmdir_all(const char *base, const uint32_t *att, int n,
                            int ms) {
  struct timespec ts = {0, 1000000};
  for (int t = 0; t <= ms; t++) {
    int left = 0;
    for (int k = 0; k < n; k++) {
      char path[PATH_MAX + 48];
      if (att[k] == 0)
        continue;
      wk_cg_path(path, sizeof(path), base, k, att[k] - 1);
      if (wk_cg_rmdir_deep(path, WK_CG_DEPTH) != 0)
        left = 1;
    }
    if (!left && (rmdir(base) == 0 || errno == ENOENT))
      return;
    if (t < ms)
      nanosleep(&ts, NULL);
  }
}

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

static void wk_guardian_start(wk_group_t *g) {
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

static void wk_guardian_send2(wk_group_t *g, int op, int32_t a, uint64_t b) {
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

static void wk_guardian_send(wk_group_t *g, int op, pid_t pgid) {
  wk_guardian_send2(g, op, (int32_t)pgid, 0);
}

/* Reap the guardian if it died (someone killed it); it is our child. */
static void wk_guardian_check(wk_group_t *g) {
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

static void wk_guardian_stop(wk_group_t *g) {
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
static void wk_unguard(wk_worker_t *w) {
  if (w->guarded && w->reaped && w->nopen == 0) {
    w->guarded = 0;
    wk_guardian_send(w->g, WK_GUARD_DEL, w->pid);
  }
}

/* ---- output ----------------------------------------------------------------------- */

static void wk_tail_push(wk_worker_t *w, const char *p, size_t n) {
  wk_group_t *g = w->g;
  int slot;
  if (g->tail_lines <= 0)
    return;
  if (w->tail == NULL) {
    w->tail = malloc((size_t)g->tail_lines * (WK_TAIL_LINE_MAX + 1));
    w->tail_len = calloc((size_t)g->tail_lines, sizeof(size_t));
    if (w->tail == NULL || w->tail_len == NULL) {
      free(w->tail);
      free(w->tail_len);
      w->tail = NULL;
      w->tail_len = NULL;
      return;
    }
  }
  if (n > 0 && p[n - 1] == '\r')
    n--;
  if (n > WK_TAIL_LINE_MAX)
    n = WK_TAIL_LINE_MAX;
  if (w->tail_n < g->tail_lines) {
    slot = (w->tail_head + w->tail_n) % g->tail_lines;
    w->tail_n++;
  } else {
    slot = w->tail_head;
    w->tail_head = (w->tail_head + 1) % g->tail_lines;
  }
  memcpy(w->tail + (size_t)slot * (WK_TAIL_LINE_MAX + 1), p, n);
  w->tail_len[slot] = n;
  w->tail_dirty = 1;
}

/* One line (without its '\n') of a stream: to the console with the
 * worker's prefix in a single write, and to the stderr tail. */
static void wk_console(wk_stream_t *st, const char *p, size_t n, char end) {
  wk_worker_t *w = st->w;
  wk_group_t *g = w->g;
  size_t plen = g->prefix_len[w->local_rank];
  if (st->console_fd < 0)
    return;
  memcpy(g->obuf, g->prefix[w->local_rank], plen);
  memcpy(g->obuf + plen, p, n);
  g->obuf[plen + n] = end;
  /* A console that is gone (EPIPE, EBADF) silently loses the line; the
   * files and the tail still have it. */
  (void)wk_write_all(st->console_fd, g->obuf, plen + n + 1);
}

static void wk_emit(wk_stream_t *st, const char *p, size_t n) {
  /* the last redraw of a progress line ends with this newline: the
   * console shows it already */
  if (st->at_cr && (n == 0 || n == st->shown) && st->console_fd >= 0)
    (void)wk_write_all(st->console_fd, "\n", 1);
  else
    wk_console(st, p, n, '\n');
  st->at_cr = 0;
  st->redraw = 0;
  st->shown = 0;
  if (st->bit == WK_STDERR)
    wk_tail_push(st->w, p, n);
}

/* A segment ended by '\r' (tqdm redraws its bar so): to the console at
 * once, with the prefix, ending in '\r' so that the next one overwrites
 * it; not to the tail, which keeps whole lines. */
static void wk_emit_cr(wk_stream_t *st, const char *p, size_t n) {
  size_t shown = st->shown;
  st->redraw = 1;
  st->shown = 0;
  if (n == 0 || n == shown)
    return; /* nothing new to show */
  wk_console(st, p, n, '\r');
  st->at_cr = 1;
}

static void wk_file_write(wk_stream_t *st, const char *p, size_t n) {
  int rc;
  if (st->file_fd < 0)
    return;
  if ((rc = wk_write_all(st->file_fd, p, n)) != 0) {
    LU_ERR(&st->w->g->log, "write(%s.log of local rank %d) failed: %s; the "
           "rest of this stream is not saved",
           st->bit == WK_STDOUT ? "stdout" : "stderr", st->w->local_rank,
           strerror(-rc));
    close(st->file_fd);
    st->file_fd = -1;
  }
}

/* Feed bytes read from a worker: the file gets them as they are, the
 * console and the tail get whole lines; a line longer than WK_LINE_MAX is
 * cut into chunks, so memory per stream stays bounded. */
static void wk_feed(wk_stream_t *st, const char *p, size_t n) {
  wk_file_write(st, p, n);
  if (st->console_fd < 0 &&
      (st->bit != WK_STDERR || st->w->g->tail_lines == 0))
    return; /* nobody wants lines of it */
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    const char *cr = memchr(p, '\r', nl ? (size_t)(nl - p) : n);
    size_t take = nl ? (size_t)(nl - p) : n;
    size_t room = WK_LINE_MAX - st->len;
    /* "\r\n" ends a line; a lone '\r' a redrawn segment */
    if (cr && !(cr + 1 == nl)) {
      size_t k = (size_t)(cr - p);
      if (k <= room) {
        if (st->len == 0) {
          wk_emit_cr(st, p, k);
        } else {
          memcpy(st->line + st->len, p, k);
          wk_emit_cr(st, st->line, st->len + k);
          st->len = 0;
        }
        p += k + 1;
        n -= k + 1;
        continue;
      }
    }
    if (take > room) {
      /* The line is full: emit a chunk. */
      if (st->len == 0) {
        wk_emit(st, p, WK_LINE_MAX);
      } else {
        memcpy(st->line + st->len, p, room);
        wk_emit(st, st->line, WK_LINE_MAX);
        st->len = 0;
      }
      p += room;
      n -= room;
      continue;
    }
    if (nl == NULL) {
      if (st->line == NULL && (st->line = malloc(WK_LINE_MAX)) == NULL)
        return; /* out of memory: the partial line is lost, not the loop */
      memcpy(st->line + st->len, p, take);
      st->len += take;
      /* a progress line is shown as it grows, not when it ends */
      if (st->redraw && st->len > st->shown) {
        wk_console(st, st->line, st->len, '\r');
        st->at_cr = 1;
        st->shown = st->len;
      }
      return;
    }
    if (st->len == 0) {
      wk_emit(st, p, take);
    } else {
      memcpy(st->line + st->len, p, take);
      wk_emit(st, st->line, st->len + take);
      st->len = 0;
    }
    p += take + 1;
    n -= take + 1;
  }
}

static void wk_maybe_done(wk_group_t *g);
static void wk_maybe_free(wk_group_t *g);

static void wk_on_stream_closed(uv_handle_t *h) {
  wk_stream_t *st = h->data;
  wk_worker_t *w = st->w;
  wk_group_t *g = w->g;
  w->nopen--;
  g->nopen--;
  wk_unguard(w);
  if (g->closing)
    wk_maybe_free(g);
  else
    wk_maybe_done(g);
}

/* End of a stream (EOF, error, or given up on): flush the partial line,
 * close the file and the pipe. */
static void wk_stream_end(wk_stream_t *st) {
  if (!st->active)
    return;
  st->active = 0;
  if (st->len > 0) {
    wk_emit(st, st->line, st->len);
    st->len = 0;
  }
  if (st->file_fd >= 0) {
    close(st->file_fd);
    st->file_fd = -1;
  }
  uv_close((uv_handle_t *)&st->pipe, wk_on_stream_closed);
}

static void wk_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  wk_stream_t *st = h->data;
  (void)hint;
  buf->base = st->w->g->rbuf;
  buf->len = WK_READ_BUF;
}

static void wk_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  wk_stream_t *st = s->data;
  if (nread > 0) {
    wk_feed(st, buf->base, (size_t)nread);
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF)
    LU_WARN(&st->w->g->log, "reading %s of local rank %d failed: %s",
            st->bit == WK_STDOUT ? "stdout" : "stderr", st->w->local_rank,
            uv_strerror((int)nread));
  wk_stream_end(st);
}

/* Read what a reaped worker left in its pipe before its exit is reported,
 * so that its last lines are printed first and its tail is complete. The
 * pipe may still be held by the worker's children: read at most
 * WK_DRAIN_MAX, stop at EAGAIN. */
static void wk_stream_drain(wk_stream_t *st) {
  size_t total = 0;
  uv_os_fd_t fd;
  if (!st->active || uv_fileno((uv_handle_t *)&st->pipe, &fd) != 0)
    return;
  while (total < WK_DRAIN_MAX) {
    ssize_t r = read(fd, st->w->g->rbuf, WK_READ_BUF);
    if (r > 0) {
      wk_feed(st, st->w->g->rbuf, (size_t)r);
      total += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    wk_stream_end(st); /* EOF or error */
    return;
  }
}

/* ---- containment: cgroups ------------------------------------------------------ */

#ifdef WK_HAVE_CLONE3
/* The directory of this process's cgroup in the cgroup v2 hierarchy:
 * "0::<path>" of /proc/self/cgroup under the mount point of the cgroup2
 * file system (a hybrid host has it at /sys/fs/cgroup/unified; a mount of
 * a subtree has its root in the fourth field of mountinfo). RET 0, or -1
 * with why. */
static int wk_cg_self_dir(char *out, size_t n, char *why, size_t wn) {
  char line[4096], cg[PATH_MAX] = "", mnt[PATH_MAX] = "", root[PATH_MAX] = "";
  FILE *f;
  if ((f = fopen("/proc/self/cgroup", "re")) == NULL) {
    snprintf(why, wn, "/proc/self/cgroup: %s", strerror(errno));
    return -1;
  }
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "0::", 3) == 0) {
      lu_strlcpy(cg, line + 3, sizeof(cg));
      cg[strcspn(cg, "\n")] = '\0';
    }
  fclose(f);
  if (cg[0] != '/') {
    snprintf(why, wn, "this process is in no cgroup v2 hierarchy");
    return -1;
  }
  if ((f = fopen("/proc/self/mountinfo", "re")) == NULL) {
    snprintf(why, wn, "/proc/self/mountinfo: %s", strerror(errno));
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
  fclose(f);
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

#endif

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
static int wk_cg_ranks(wk_group_t *g, int n) {
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
static void wk_cg_teardown(wk_group_t *g, int ms) {
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
static void wk_become_subreaper(wk_group_t *g) {
  int was = 0;
  if (!g->own_subreaper && prctl(PR_GET_CHILD_SUBREAPER, &was) == 0 && !was &&
      prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    g->own_subreaper = 1;
}

/* Fork worker (or guardian) k into its cgroup when the group uses them.
 * The first clone3 is the test that this process may place processes
 * there: when it fails, the group falls back to the subreaper. */
static pid_t wk_fork_worker(wk_group_t *g, int k) {
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

typedef struct wk_proc_s {
  pid_t pid, ppid, pgid;
  char state;
  unsigned long long start;
} wk_proc_t;

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
    char path[300], buf[1024], *p;
    int fd, field = 3;
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
    if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ')
      continue;
    memset(&x, 0, sizeof(x));
    x.pid = (pid_t)atoi(e->d_name);
    x.state = p[2];
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
        x.ppid = (pid_t)atoi(p);
      else if (field == 5)
        x.pgid = (pid_t)atoi(p);
    }
    x.start = strtoull(p, NULL, 10);
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
  wk_proc_t key;
  key.pid = pid;
  return bsearch(&key, v, (size_t)n, sizeof(*v), wk_proc_cmp);
}

static int wk_is_worker(const wk_group_t *g, pid_t pid) {
  for (int i = 0; i < g->nproc && g->w; i++)
    if (g->w[i].pid == pid)
      return 1;
  return 0;
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
static void wk_escaped_signal(wk_group_t *g, int sig) {
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
static void wk_reap_orphans(wk_group_t *g) {
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
static void wk_sweep(wk_group_t *g) {
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
static void wk_contain_setup(wk_group_t *g) {
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
static void wk_contain_started(wk_group_t *g, int first) {
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

/* waitpid(pid, WNOHANG) for every live worker: never waitpid(-1), the
 * agent may have other children. */
static void wk_reap(wk_group_t *g) {
  unsigned attempt = g->attempt;
  wk_guardian_check(g);
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

static void wk_on_sigchld(uv_signal_t *s, int signum) {
  (void)signum;
  wk_reap(s->data);
}

static void wk_on_defer(uv_timer_t *t) { wk_reap(t->data); }

static void wk_maybe_done(wk_group_t *g) {
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

/* Everything the child needs, prepared before fork: the child calls no
 * malloc and no stdio. */
typedef struct wk_exec_s {
  pid_t parent;
  sigset_t empty;
  struct sigaction dfl;
  char **sh_argv;   /* ["/bin/sh", <path>, argv[1..]] for ENOEXEC */
  char *pathbuf;    /* one PATH candidate: dir + '/' + argv[0] */
  size_t pathcap;
  int maxfd;        /* fallback bound when close_range() is missing */
} wk_exec_t;

static const char *wk_env_path(char *const *envp) {
  for (; *envp; envp++)
    if (strncmp(*envp, "PATH=", 5) == 0)
      return *envp + 5;
  return NULL;
}

/* The text of an exec errno, without strerror() (not async-signal-safe):
 * the texts are glibc's for the errors execve can report. */
static const char *wk_exec_strerror(int e) {
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
static void wk_child(wk_group_t *g, wk_worker_t *w, const wk_exec_t *x,
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
   * worker. */
  if (status_w >= 0 && status_w != 3) {
    if (dup3(status_w, 3, O_CLOEXEC) == 3)
      status_w = 3;
    else
      status_w = -1;
  }
  if (syscall(SYS_close_range, status_w == 3 ? 4u : 3u, ~0u, 0u) != 0)
    for (int fd = status_w == 3 ? 4 : 3; fd < x->maxfd; fd++)
      close(fd);
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
  if (g->rank_argv) {
    /* This child's copy of the shell fallback's arguments: no allocation
     * after fork. */
    char **av = g->rank_argv[w->local_rank];
    for (size_t i = 1; av[i]; i++)
      x->sh_argv[i + 1] = av[i];
    err = wk_exec(x, av, g->envp[w->local_rank]);
  } else {
    err = wk_exec(x, g->argv, g->envp[w->local_rank]);
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

static int wk_prepare_exec(wk_group_t *g, wk_exec_t *x) {
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
  x->maxfd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)x->maxfd)
    x->maxfd = (int)rl.rlim_cur;
  return 0;
}

int wk_start(wk_group_t *g, const wk_spec_t *spec, wk_exit_cb on_exit,
             void *arg) {
  wk_exec_t x;
  int *wfd = NULL, rc, started = 0, first;
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

  /* Signals stay blocked from fork until the child has reset them. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    int sp[2] = {-1, -1};
    pid_t pid;
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
  return 0;

fail:
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

static void wk_maybe_free(wk_group_t *g) {
  void (*cb)(void *);
  void *arg;
  if (g->handles_open > 0 || g->nopen > 0)
    return;
  cb = g->close_cb;
  arg = g->close_arg;
  wk_free_attempt(g);
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
}
