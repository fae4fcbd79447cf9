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
 * wrapper's python, dataloader processes). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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

enum { WK_GUARD_ADD = 1, WK_GUARD_DEL = 2, WK_GUARD_DISARM = 3 };
enum { WK_IDLE = 0, WK_GRACE, WK_KILLED };

typedef struct wk_worker_s wk_worker_t;

typedef struct wk_stream_s {
  uv_pipe_t pipe;
  wk_worker_t *w;
  int bit;        /* WK_STDOUT or WK_STDERR */
  int active;     /* pipe open and read; cleared when uv_close is called */
  int console_fd; /* 1, 2, or -1 when the stream does not reach the console */
  int file_fd;    /* -1 when the stream is not written to a file */
  char *line;     /* partial line, WK_LINE_MAX bytes once allocated */
  size_t len;
} wk_stream_t;

struct wk_worker_s {
  wk_group_t *g;
  int local_rank;
  pid_t pid;     /* 0 before fork */
  int reaped;
  int guarded;   /* registered with the guardian */
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

/* ---- the guardian -------------------------------------------------------------- */

/* In the forked guardian: async-signal-safe calls only (the agent may have
 * threads). Keeps the list of live process groups, kills them on EOF. */
static void wk_guardian_main(int fd, const sigset_t *empty) {
  pid_t groups[WK_NPROC_MAX];
  int n = 0;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  /* The agent's libuv handlers would write into the agent's signal pipe. */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      sigaction(s, &dfl, NULL);
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
  for (;;) {
    int32_t m[2];
    ssize_t r = recv(fd, m, sizeof(m), 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r != (ssize_t)sizeof(m))
      break; /* EOF: the agent is gone */
    if (m[0] == WK_GUARD_DISARM)
      _exit(0);
    if (m[0] == WK_GUARD_ADD && n < WK_NPROC_MAX) {
      groups[n++] = m[1];
    } else if (m[0] == WK_GUARD_DEL) {
      for (int i = 0; i < n; i++)
        if (groups[i] == m[1]) {
          groups[i] = groups[--n];
          break;
        }
    }
  }
  for (int i = 0; i < n; i++)
    kill(-groups[i], SIGKILL);
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
    wk_guardian_main(sv[1], &empty);
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

static void wk_guardian_send(wk_group_t *g, int op, pid_t pgid) {
  int32_t m[2] = {op, (int32_t)pgid};
  ssize_t r;
  if (g->guard_fd < 0)
    return;
  for (;;) {
    struct pollfd pf = {g->guard_fd, POLLOUT, 0};
    r = send(g->guard_fd, m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
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
static void wk_emit(wk_stream_t *st, const char *p, size_t n) {
  wk_worker_t *w = st->w;
  wk_group_t *g = w->g;
  if (st->console_fd >= 0) {
    size_t plen = g->prefix_len[w->local_rank];
    memcpy(g->obuf, g->prefix[w->local_rank], plen);
    memcpy(g->obuf + plen, p, n);
    g->obuf[plen + n] = '\n';
    /* A console that is gone (EPIPE, EBADF) silently loses the line; the
     * files and the tail still have it. */
    (void)wk_write_all(st->console_fd, g->obuf, plen + n + 1);
  }
  if (st->bit == WK_STDERR)
    wk_tail_push(w, p, n);
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
    size_t take = nl ? (size_t)(nl - p) : n;
    size_t room = WK_LINE_MAX - st->len;
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
  g->sigchld.data = g->timer.data = g->defer.data = g;
  g->handles_open = 3;
  uv_signal_start(&g->sigchld, wk_on_sigchld, SIGCHLD);
  uv_unref((uv_handle_t *)&g->sigchld);
  *out = g;
  return 0;
}

void wk_set_log(wk_group_t *g, const lu_log_t *log) {
  assert(g->magic == WK_MAGIC);
  g->log = *log;
}

static void wk_free_attempt(wk_group_t *g) {
  for (int i = 0; g->w && i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
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

/* Append to a fixed buffer in the child. */
static size_t wk_cat(char *buf, size_t at, size_t cap, const char *s) {
  while (*s && at + 1 < cap)
    buf[at++] = *s++;
  buf[at] = '\0';
  return at;
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

/* The child, between fork and exec: async-signal-safe calls only. */
static void wk_child(wk_group_t *g, wk_worker_t *w, const wk_exec_t *x,
                     int out_w, int err_w) {
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
  /* Only 0, 1 and 2 cross into the worker. */
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
    for (int fd = 3; fd < x->maxfd; fd++)
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
  err = wk_exec(x, g->argv, g->envp[w->local_rank]);
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
  int *wfd = NULL, rc, started = 0;
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
  if (g->guard_pid == 0)
    wk_guardian_start(g);

  /* Signals stay blocked from fork until the child has reset them. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < g->nproc; i++) {
    wk_worker_t *w = &g->w[i];
    pid_t pid = fork();
    if (pid == 0)
      wk_child(g, w, &x, wfd ? wfd[2 * i] : -1, wfd ? wfd[2 * i + 1] : -1);
    if (pid < 0) {
      rc = -errno;
      break;
    }
    w->pid = pid;
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
  for (int i = 0; i < g->nproc && g->w; i++)
    for (int k = 0; k < 2; k++)
      wk_stream_end(&g->w[i].st[k]);
  wk_guardian_stop(g);
  uv_close((uv_handle_t *)&g->sigchld, wk_on_handle_closed);
  uv_close((uv_handle_t *)&g->timer, wk_on_handle_closed);
  uv_close((uv_handle_t *)&g->defer, wk_on_handle_closed);
}
