/* wk_int.h - internals of the workers module (prefix wk_), shared by its
 * files; workers.h is the public API.
 *
 * helpers.c      small helpers, most async-signal-safe (guardian, child)
 * guardian.c     the process that kills the workers when the agent dies
 * output.c       stdout/stderr: prefixed lines, log files, the stderr tail
 * containment.c  cgroups per worker, or the subreaper and /proc scans
 * child.c        a worker between fork and exec
 * workers.c      supervision, start, stop, the public API
 */
#ifndef WK_INT_H
#define WK_INT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#define WK_CG_DEPTH 16            /* sub-cgroup levels removed under a worker's */
#define WK_SB_FD 3                /* LAUNCH_STANDBY_FD in a standby */
#define WK_SB_DEATHS 3            /* exits before ready that end a rank's standbys */
#define WK_SB_BACKOFF_MS 1000     /* first restart delay, doubling */
#define WK_SB_BACKOFF_MAX_MS 30000
#define WK_SB_HOLD_MAX (1024 * 1024) /* a standby's output kept per stream */

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
  int cr_pend;    /* the last read ended in '\r': the line holds the
                     segment before it until the next byte says whether
                     it ended a line ("\r\n") or a redraw */
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

typedef struct wk_sb_s wk_sb_t;

/* What a standby prints before it takes a rank is read as it comes (its
 * pipe would fill and block it) and held, the last WK_SB_HOLD_MAX bytes in
 * whole lines, until the rank's streams get it. The poll handle outlives
 * the standby's use of it: it closes its fd in its close callback. */
typedef struct wk_sb_out_s {
  uv_poll_t h;
  wk_group_t *g;
  int fd;     /* its own, closed with it; -1 once handed to a worker */
  wk_sb_t *s; /* NULL once detached */
  int k;      /* 0 stdout, 1 stderr */
} wk_sb_out_t;

/* A standby of one local rank (workers.h). */
struct wk_sb_s {
  wk_group_t *g;
  int local_rank;
  pid_t pid;      /* 0 when none runs */
  int ctl;        /* agent's end of the socketpair, -1 none */
  int rfd[2];     /* read ends of its stdout and stderr, -1 none */
  wk_sb_out_t *out[2]; /* reading them while it waits, NULL none */
  char *held[2];  /* what it printed, not yet anybody's */
  size_t held_len[2];
  uint64_t dropped[2]; /* bytes cut from the front of held */
  int ready;      /* it wrote 'R' */
  int off;        /* no more standbys for this rank */
  int deaths;     /* exits in a row before it was ready */
  char **envp;
  uv_timer_t timer; /* the next start, or the ready deadline */
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
  /* The caller's own children (wk_set_own_children): not orphans. */
  int (*own_child)(pid_t pid, void *arg);
  void *own_child_arg;

  /* Workers reported at their exit's start (wk_maybe_exiting) and not
   * reaped yet: waitpid(WNOHANG) at every SIGCHLD, waitpid at close. */
  pid_t *dying;
  int ndying, dying_cap;

  wk_sb_t *sb;              /* standbys per local rank, NULL when off */
  int sb_n;
  int64_t sb_delay_ms, sb_ready_ms;

  int closing;
  void (*close_cb)(void *);
  void *close_arg;
};

/* ---- child.c ----------------------------------------------------------------- */

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
  char **envp;      /* a standby's environment; NULL: the rank's */
  int sb_fd;        /* a standby's end of its socketpair, -1 none */
  int nofile_set;   /* put the user's open-file limit back: */
  struct rlimit nofile; /* the one launch started with (lu_raise_nofile) */
} wk_exec_t;

/* Fill x for the workers of g's spec. RET 0 or RDZV_ENOMEM. */
int wk_prepare_exec(wk_group_t *g, wk_exec_t *x);
/* The child, between fork and exec; never returns. */
void wk_child(wk_group_t *g, wk_worker_t *w, const wk_exec_t *x, int out_w,
              int err_w, int status_w);
const char *wk_exec_strerror(int e);

/* ---- helpers.c --------------------------------------------------------------- */

void wk_free_strv(char **v);
char **wk_dup_strv(char *const *v);
int wk_write_all(int fd, const char *buf, size_t n);
int wk_fd_high(int fd);
size_t wk_cat(char *buf, size_t at, size_t cap, const char *s);
unsigned long long wk_start_time(pid_t pid);
void wk_cg_kill_dir(const char *dir);
void wk_cg_path(char *buf, size_t cap, const char *base, int rank,
                unsigned attempt);
int wk_cg_rmdir_deep(const char *dir, int depth);
void wk_cg_rmdir_all(const char *base, const uint32_t *att, int n,
                     int ms);

/* ---- guardian.c -------------------------------------------------------------- */

void wk_guardian_start(wk_group_t *g);
void wk_guardian_send2(wk_group_t *g, int op, int32_t a, uint64_t b);
void wk_guardian_send(wk_group_t *g, int op, pid_t pgid);
void wk_guardian_check(wk_group_t *g);
void wk_guardian_stop(wk_group_t *g);
void wk_unguard(wk_worker_t *w);

/* ---- output.c ---------------------------------------------------------------- */

void wk_tail_push(wk_worker_t *w, const char *p, size_t n);
void wk_file_write(wk_stream_t *st, const char *p, size_t n);
/* Bytes read from a worker (or held for it): files, console, tail. */
void wk_feed(wk_stream_t *st, const char *p, size_t n);
void wk_stream_end(wk_stream_t *st);
void wk_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
void wk_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
void wk_stream_drain(wk_stream_t *st);

/* ---- containment.c ----------------------------------------------------------- */

int wk_cg_ranks(wk_group_t *g, int n);
void wk_cg_teardown(wk_group_t *g, int ms);
void wk_become_subreaper(wk_group_t *g);
pid_t wk_fork_worker(wk_group_t *g, int k);
void wk_reap_orphans(wk_group_t *g);
void wk_sweep(wk_group_t *g);
void wk_contain_setup(wk_group_t *g);
void wk_contain_started(wk_group_t *g, int first);
void wk_escaped_signal(wk_group_t *g, int sig);

/* ---- standby.c --------------------------------------------------------------- */

int wk_sb_is(const wk_group_t *g, pid_t pid);
void wk_sb_reap(wk_group_t *g);
void wk_sb_schedule(wk_group_t *g);
int wk_sb_take(wk_group_t *g, int k, char *const *envp);
void wk_sb_adopted(wk_group_t *g, wk_worker_t *w, int *rfd);
void wk_sb_close(wk_group_t *g);
void wk_sb_close_handles(wk_group_t *g);
void wk_sb_free(wk_group_t *g);

/* ---- workers.c --------------------------------------------------------------- */

void wk_maybe_free(wk_group_t *g);
void wk_maybe_done(wk_group_t *g);
void wk_maybe_exiting(wk_worker_t *w);
int wk_is_dying(const wk_group_t *g, pid_t pid);

/* Parsers of what /proc says, apart from the reads (the fuzz target
 * fuzz_proc_text drives them). buf: a NUL-terminated /proc/<pid>/stat.
 * stat_start: its field 22 (start time), 0 unknown (helpers.c).
 * stat_exit: the wait status of an exiting process, as wk_exit_status
 *   (workers.c). RET 0 with *status, else -1.
 * stat_proc: state, ppid, pgid and start of x (containment.c; x->pid is
 *   left 0). RET 0, -1 when buf is no stat line.
 * cg_dir: the cgroup2 directory of the process whose /proc/self/cgroup
 *   and /proc/self/mountinfo are cgroup and mountinfo (containment.c).
 *   RET 0, or -1 with why. */
typedef struct wk_proc_s {
  pid_t pid, ppid, pgid;
  char state;
  unsigned long long start;
} wk_proc_t;
unsigned long long wk__stat_start(const char *buf, size_t len);
int wk__stat_exit(const char *buf, int *status);
int wk__stat_proc(const char *buf, wk_proc_t *x);
int wk__cg_dir(FILE *cgroup, FILE *mountinfo, char *out, size_t n, char *why,
               size_t wn);

#endif /* WK_INT_H */
