/* workers.h - one node's worker processes: spawn, supervise, stop, and
 * carry their output to the console and log files. Used by the agent
 * (agent.c); libuv loop thread only.
 *
 * Each worker is forked (not uv_spawn: we need code in the child before
 * exec), becomes the leader of its own process group and session, gets
 * PR_SET_PDEATHSIG(SIGKILL) so that it dies with the agent even when the
 * agent is SIGKILLed, runs spec->pre_exec (CPU/memory binding), and execs
 * argv with exactly envp[local_rank] (a bare argv[0] is looked up in the
 * PATH of envp[local_rank], not the agent's). Exits are seen through
 * SIGCHLD at once (no polling interval).
 *
 * A guardian process per group (forked, no exec, own session) SIGKILLs the
 * workers' process groups when the agent dies, so that a worker's own
 * children (a wrapper script's python, dataloader processes), which
 * PR_SET_PDEATHSIG does not reach, die with the agent too. Fork happens in
 * the loop thread, and PR_SET_PDEATHSIG fires when that thread exits.
 *
 * Containment (issue #11): a process that leaves its worker's process
 * group (setsid, a double fork) is not reached by group signals. Where the
 * agent may create cgroups (a writable or delegated cgroup v2 hierarchy and
 * clone3 with CLONE_INTO_CGROUP, Linux >= 5.7), each worker is started
 * inside a cgroup of its own, <agent's cgroup>/launch.<pid>.<id>/w<rank>,
 * and everything in it is signalled by a stop and killed at the end of a
 * stop, at wk_group_close and by the guardian when the agent dies; the
 * directories are removed at close (and stale ones of dead agents at the
 * next start). Elsewhere the agent becomes a child subreaper
 * (PR_SET_CHILD_SUBREAPER: orphans of workers come to it, not to init) and
 * a scan of /proc, at every SIGCHLD and once a second while workers run,
 * finds descendants outside the workers' process groups; they are handled
 * like the cgroup members, and the guardian learns their pids (a process
 * that escapes less than a second before the agent is SIGKILLed can
 * outlive it in this mode). The first wk_start logs which one is used. */
#ifndef WORKERS_H
#define WORKERS_H

#include <sys/types.h>
#include <uv.h>

typedef struct wk_group_s wk_group_t;

/* Bits of redirects/tee, as torchrun: 1 stdout, 2 stderr. */
enum { WK_STDOUT = 1, WK_STDERR = 2 };

typedef struct wk_spec_s {
  size_t size;           /* sizeof(wk_spec_t) */
  int nproc;             /* local workers */
  char *const *argv;     /* program and arguments (interpreter included) */
  char *const *const *envp; /* envp[local_rank]: complete environment */
  /* Output. When pipe_output is 0 the workers inherit the agent's stdout
   * and stderr (nothing below applies but log_dir files are not written).
   * Otherwise each line goes, with prefix[local_rank] in front, to the
   * console unless redirected or filtered, and to the files. */
  int pipe_output;
  char *const *prefix;   /* prefix[local_rank], e.g. "[node3:17]: " */
  const unsigned *redirects; /* per local rank: streams to files only */
  const unsigned *tee;       /* per local rank: streams to files and console */
  const unsigned char *console; /* per local rank: 1 = may reach the console
                                   (--local-ranks-filter) */
  /* <attempt_dir>/<local_rank>/stdout.log and stderr.log are written for
   * redirected or teed streams when set; NULL = no files. */
  const char *attempt_dir;
  int tail_lines;        /* last stderr lines kept per worker (summary) */
  /* Runs in the child between fork and exec; async-signal-safe only. A
   * non-zero return aborts the exec: the child exits 127 after writing
   * the message it set in errbuf to stderr. */
  int (*pre_exec)(int local_rank, void *arg, char *errbuf, size_t errlen);
  void *pre_exec_arg;
  /* argv[local_rank] when the arguments differ per rank (torchrun's
   * ${local_rank}); the same number of arguments as argv, which names the
   * program. NULL: argv for every rank. */
  char *const *const *rank_argv;
} wk_spec_t;

typedef struct wk_exit_s {
  int local_rank;
  pid_t pid;
  int exit_code;   /* when exited normally, else -1 */
  int signal;      /* terminating signal, else 0 */
  double wall_s;   /* when it was reaped (CLOCK_REALTIME) */
  /* The program never ran: execve failed with this errno (ENOENT,
   * EACCES, ...) and exit_code is 127. A configuration error that a
   * restart would only repeat. 0 otherwise. */
  int exec_errno;
} wk_exit_t;

/* How workers and whatever they start are kept together (see the top). */
typedef enum {
  WK_CONTAIN_AUTO = 0,   /* cgroup v2 where possible, else subreaper */
  WK_CONTAIN_CGROUP,     /* in use: a cgroup per worker */
  WK_CONTAIN_SUBREAPER   /* asked or in use: subreaper and /proc scans */
} wk_contain_t;

/* Called once per worker as soon as it is reaped. */
typedef void (*wk_exit_cb)(wk_group_t *g, const wk_exit_t *ex, void *arg);
/* Called once every worker of the group is reaped and its output drained. */
typedef void (*wk_done_cb)(wk_group_t *g, void *arg);

/* OUT *out. RET 0 or RDZV_ENOMEM. The group starts a uv_signal_t on
 * SIGCHLD; it keeps the loop alive only while workers are live. */
int wk_group_new(uv_loop_t *loop, wk_group_t **out);
/* Log through a copy of log (default: lu_log_init(.., "launch agent")).
 * Added to the contract: the agent's logger names host and job. */
struct lu_log_s;
void wk_set_log(wk_group_t *g, const struct lu_log_s *log);
/* Children of the caller that are not workers (the agent's GPU sampler,
 * launcher/sampler.h): own(pid, arg) returns 1 for them, on the loop
 * thread. The containment neither tracks, signals nor reaps them (a
 * subreaper would take them for a worker's orphans); their owner reaps
 * them. own NULL: none. */
void wk_set_own_children(wk_group_t *g, int (*own)(pid_t pid, void *arg),
                         void *arg);
/* Before the first wk_start: WK_CONTAIN_AUTO (default) or
 * WK_CONTAIN_SUBREAPER (never cgroups). RET 0, -EBUSY after a start,
 * RDZV_EINVAL for another value. */
int wk_set_containment(wk_group_t *g, wk_contain_t how);
/* After the first wk_start: WK_CONTAIN_CGROUP or WK_CONTAIN_SUBREAPER
 * (WK_CONTAIN_AUTO before); OUT *what (may be NULL): the sentence the
 * group logged, valid while the group lives. */
wk_contain_t wk_containment(const wk_group_t *g, const char **what);
/* Start spec->nproc workers (spec and its arrays are copied).
 * RET 0, or a negative error: -EBUSY while the previous attempt still has
 * live workers, open output pipes or a stop in progress; RDZV_EINVAL for a
 * bad spec; -errno when a pipe, log file, log directory or fork failed
 * (then no worker is left running and on_exit is never called). A worker
 * whose exec fails exits 127 and is reported through on_exit like any
 * other, with exec_errno set; "launch: cannot execute 'X': <reason>" is
 * its last stderr line (in wk_tail and stderr.log, not on the console: the
 * caller reports it once).
 * on_exit runs from the loop, never from inside this call; when it runs,
 * what the worker wrote before exiting has been read (printed, in the
 * files, in wk_tail). Log directories are created with mode 0755.
 * Console lines go to the agent's fd 1 (worker stdout) and fd 2 (worker
 * stderr) with one write(2) per line; lines longer than 64 KiB are cut
 * into 64 KiB chunks. tail_lines is clamped to 0..1000 and each tail line
 * to 1024 bytes. */
int wk_start(wk_group_t *g, const wk_spec_t *spec, wk_exit_cb on_exit,
             void *arg);
/* Send sig to every live worker's process group (signal forwarding). */
void wk_signal(wk_group_t *g, int sig);
/* Stop: send sig to every live worker's group (and to the group of a
 * reaped worker whose output pipes are still held open by its children)
 * and to every process of the workers' cgroups or escaped from them;
 * after grace_ms (<= 0: at once) send SIGKILL; done runs once all are
 * reaped and their output drained (at once, from the loop, when none is
 * running; never from inside this call). Pipes still held open 1 s after
 * SIGKILL (by a process that left the worker's group) are closed then.
 * Called again while waiting for the grace period, it escalates: SIGKILL
 * now. A non-NULL done replaces the earlier done/arg (which then never
 * runs); NULL keeps it. Before done runs, what is left of the workers
 * (cgroups, escaped descendants) is SIGKILLed. */
void wk_stop(wk_group_t *g, int sig, int grace_ms, wk_done_cb done,
             void *arg);
int wk_live(const wk_group_t *g);       /* workers not yet reaped */
pid_t wk_pid(const wk_group_t *g, int local_rank);
/* Last spec->tail_lines stderr lines of a worker of the current or last
 * attempt, joined by '\n' ("" if none). Valid until the next wk_start. */
const char *wk_tail(const wk_group_t *g, int local_rank);
/* Standbys (launch --standby, docs/launcher.md#standby): per local rank
 * one pre-started process of the same program (argv or rank_argv of the
 * last wk_start, its pre_exec binding, own process group, PDEATHSIG, the
 * guardian), started with envp[local_rank] and LAUNCH_STANDBY_FD=3, one
 * end of a socketpair. The program pays its start-up (rt_standby_wait of
 * include/rt.h), writes one byte 'R' there and blocks. The next wk_start
 * hands a ready standby the rank's complete environment instead of
 * forking (a uint32_t length in host order, then NUL-terminated KEY=VALUE
 * strings), moves it into the rank's cgroup and supervises it from then
 * on as the worker it started: output, exit, stop, on_exit. A standby
 * not ready then is left waiting and the rank is forked as usual.
 * Missing standbys start delay_ms after each wk_start (after the new
 * workers, not beside them), one that exits is restarted after 1 s,
 * doubling to 30 s (never reported through on_exit), one not ready
 * within ready_ms, or that exits 3 times in a row before it ever was, is
 * killed and its rank gets none again (logged once: the program does not
 * speak the protocol). What a standby writes before it is adopted stays
 * in its pipes and is printed as the rank's output once it is. Standbys
 * are SIGKILLed and reaped by wk_group_close. */
typedef struct wk_standby_spec_s {
  size_t size;               /* sizeof(wk_standby_spec_t) */
  int nproc;                 /* local ranks; the next wk_start's nproc */
  char *const *const *envp;  /* envp[local_rank], copied */
  int64_t delay_ms;
  int64_t ready_ms;
} wk_standby_spec_t;

/* Turn standbys on (or give them new environments). RET 0, RDZV_EINVAL,
 * RDZV_ENOMEM, -EBUSY when nproc differs from an earlier call's. */
int wk_standby_set(wk_group_t *g, const wk_standby_spec_t *s);
/* The standby of a local rank: its pid (0 none) and whether it said
 * ready (OUT *ready, may be NULL). */
pid_t wk_standby_pid(const wk_group_t *g, int local_rank, int *ready);

/* Close every handle; cb runs when the group is freed. Workers must have
 * been stopped; any still live are SIGKILLed and reaped here (logged), and
 * a pending stop's done never runs. Whatever the workers left (their
 * process groups, their cgroups, escaped descendants) is SIGKILLed. */
void wk_group_close(wk_group_t *g, void (*cb)(void *arg), void *arg);

#endif /* WORKERS_H */
