/* hang.h - hang detection (launch --hang-timeout): the agent reads its
 * local ranks' progress keys (launch/progress/<rank>, written by
 * rdzv_progress, rt_progress, or a PyTorch trainer's TCPStore as
 * /launch/progress/<rank>; both forms, every time) once a second in one
 * request, and takes a rank whose own worker reported progress in this
 * round (the value ends with its LAUNCH_PROGRESS_TAG) and then nothing new
 * in either form for the timeout for hung:
 *
 *   detected -> logged by host and rank (last step, seconds since, the
 *   process state: a stopped process is named as such) -> the dump signal
 *   (--hang-signal) -> the grace -> the agent reports the hang as this
 *   node's failure and SIGKILLs the hung ranks -> the job restarts as after
 *   any failure.
 *
 * When one of the hung ranks is stopped (SIGSTOP, state T), the others are
 * taken to be waiting for it: only the stopped ones are hung, and they are
 * killed at once (a stopped process cannot dump its stack). Otherwise,
 * once one rank passes the timeout, every rank silent for half of it is hung
 * with it (a collective that never completes) and gets the dump signal; the
 * one with the lowest last step (then the longest silent) is reported.
 * Loop thread only. docs/launcher.md#hangs. */
#ifndef HANG_H
#define HANG_H

#include <stdint.h>
#include <uv.h>

#include "aclient.h"
#include "msg.h"
#include "lu.h"
#include "workers.h"

typedef struct hang_s hang_t;

/* The agent's side. */
typedef struct hang_hooks_s {
  /* Is the round running (workers started, nothing reported yet)? The
   * watcher looks only then. */
  int (*running)(void *arg);
  /* The grace after the dump signal ended (at once for a stopped rank):
   * report local_rank's hang (reason: one line for the failure summary;
   * wall_s: when it was found, the failure's time). The watcher then
   * SIGKILLs every hung rank still alive. */
  void (*hung)(void *arg, int local_rank, const char *reason, double wall_s);
  void *arg;
} hang_hooks_t;

typedef struct hang_config_s {
  int64_t timeout_ms;  /* > 0; 0: read progress (metrics, events), judge
                          no hang */
  int signal;          /* the dump signal; 0: none, kill at once */
  int64_t grace_ms;    /* from the dump signal to the report and SIGKILL */
  const char *host;    /* this node, for messages */
  const lu_log_t *log;
  ac_t *ac;            /* the agent's connection (the job's store) */
  wk_group_t *wg;      /* the workers */
  int nproc;
} hang_config_t;

/* OUT *out (cfg copied: its strings, connection, group and log must
 * outlive h). RET 0 or RDZV_ENOMEM. */
int hang_new(uv_loop_t *loop, const hang_config_t *cfg,
             const hang_hooks_t *hooks, hang_t **out);
/* A new round: its workers (global ranks base_rank...) are about to be
 * started. Progress from earlier rounds (written before now) is ignored;
 * a PyTorch worker's keys are read in the round's TCPStore namespace. */
void hang_start(hang_t *h, int base_rank, int64_t round);
/* The secret of local_rank's worker in this round (16 hex digits), for
 * its environment as LAUNCH_PROGRESS_TAG: only a progress value that ends
 * with it arms the watch, so a key written by anything else (another
 * process, the other key form, an earlier run on a long-lived server) can
 * never get the rank killed. NULL when h is NULL. */
const char *hang_tag(const hang_t *h, int local_rank);
/* A worker of this round exited: its keys are read once more (a last
 * report just before the exit), then no longer. RET 1 when it was found
 * hung (its exit is the watcher's to report: do not report it), else 0. */
int hang_exited(hang_t *h, int local_rank);
/* What a rank reported in this round (the scalars of its progress key,
 * docs/events.md#progress). seen: it reported; has_prog: the value parsed
 * (else prog.step is -1). age_s: since the value last changed;
 * steps_per_s: between its last two reports (0 before two). RET 0, -1
 * for a bad local_rank or h NULL (out zeroed). */
typedef struct hang_progress_s {
  int rank;
  int seen, has_prog, hung;
  int exited;  /* its worker of this round exited: its age grows, but it
                  is done, not silent (the metrics leave the age out) */
  int waiting; /* not seen in this round, but this node's ranks report
                  progress (in this round or an earlier one): age_s is
                  the time since the round started */
  msg_progress_t prog;
  double age_s, steps_per_s;
} hang_progress_t;
int hang_progress(const hang_t *h, int local_rank, hang_progress_t *out);
int hang_nproc(const hang_t *h);

/* One line on why local_rank was taken for hung, NULL if it was not. */
const char *hang_reason(const hang_t *h, int local_rank);
/* Stop watching and close the timer (the loop is ending). */
void hang_close(hang_t *h);
/* The agent's connection moved (a host failover): read the store there.
 * NULL h is fine. */
void hang_set_ac(hang_t *h, ac_t *ac);
/* After the loop ended. NULL is a no-op. */
void hang_free(hang_t *h);

/* A progress key's value, anyone's: "<step> <unix ms>[ <tag>]" (decimal
 * step and time, the tag whatever follows the second space). OUT *tag
 * (tagcap > 0): the tag, "" none, "?" when longer than tagcap - 1. RET 0,
 * or -1 when it is not that form (then nothing else is set). */
int hang_parse_value(const char *p, size_t n, int64_t *step, int64_t *ms,
                     char *tag, size_t tagcap);

/* "SIGUSR1", "usr1", "10", "none" (0). RET the signal, 0 for none, -1
 * when s is none of these. */
int hang_parse_signal(const char *s);

/* The state letter of a /proc/PID/stat text (NUL-terminated), '?' when
 * it is none (hang.c; fuzz_proc_text drives it). */
char hang__stat_state(const char *buf);

#endif /* HANG_H */
