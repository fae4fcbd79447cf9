/* agent.c - the per-node agent's state machine, on one libuv loop:
 *
 *   connect -> join -> run workers -> (report) -> restart: stop, join ...
 *                                              -> shutdown: stop, summary, exit
 *
 * Everything is event-driven: worker exits arrive through SIGCHLD, restarts
 * and the end of the job are pushed by the server. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "aclient.h"
#include "contract.h"
#include "aff.h"
#include "ckpt.h"
#include "agent.h"
#include "env.h"
#include "etcd_backend.h"
#include "events.h"
#include "hang.h"
#include "jobreg.h"
#include "metrics.h"
#include "page.h"
#include "launch.h"
#include "lu.h"
#include "msg.h"
#include "resume.h"
#include "rounds.h"
#include "server.h"
#include "summary.h"
#include "workers.h"

enum {
  A_CONNECT = 0, /* connecting to the rendezvous server */
  A_JOIN,        /* JOIN sent, waiting for the round */
  A_RESUME,      /* agreeing on the checkpoint step with the other nodes */
  A_RUN,         /* workers running */
  A_REPORTED,    /* this node's result reported; waiting for the others */
  A_STOP,        /* stopping workers for a restart */
  A_FAILOVER,    /* the host was lost: stopping workers, then moving to the
                    successor host (docs/rendezvous.md#host-failover) */
  A_FINISH,      /* the job ended: stopping, printing, closing */
  A_CLOSED
};

typedef struct agent_s {
  uv_loop_t *loop;
  cfg_t *o;
  lu_log_t log, srv_log;
  char *token;
  size_t token_len;
  /* rendezvous */
  int hosting;
  srv_t *srv;
  char ep_host[256]; /* where this agent connects */
  int ep_port;
  char store_host[256]; /* what workers get as MASTER_ADDR */
  ac_t *ac;
  int state;
  int64_t round;     /* the restart generation: see docs/glossary.md */
  int64_t restarts_spent; /* restarts spent on failures (the server's) */
  int node_rank, nnodes, world_size, base_rank;
  int master_port;     /* rank0 store mode: node 0's port */
  int my_master_port;  /* the port this node offers if it becomes node 0 */
  char node0_addr[INET6_ADDRSTRLEN + 8];
  uint64_t join_started_ms;
  /* node: binding plan, NCCL profile, fingerprint */
  launch_node_t node;
  char *fp_text;
  /* workers */
  wk_group_t *wg;
  char **argv;
  char ***rank_argv; /* argv per local rank when it holds ${local_rank} */
  env_t **renv;     /* each rank's complete environment */
  char **prefixes;
  char run_dir[PATH_MAX];
  char attempt_dir[PATH_MAX];
  int run_dir_is_temp;
  sum_failure_t *fails; /* failures of this node in this round */
  size_t nfails;
  int exited; /* workers of this round that exited */
  int done;   /* of them, those that exited 0 (waiting for the others) */
  /* the end */
  int exit_code;
  int finish_ok;
  sum_failure_t root;
  int have_root;
  char end_reason[1024];
  double started_wall;     /* unix time of the start */
  char reg_path[PATH_MAX]; /* this job's file in the registry (jobreg.h);
                              "" when there is none */
  int python;          /* the workers run Python (the @record hint) */
  int run_lock;        /* held while this agent lives: its run directory
                          is not pruned by another agent */
  int port_taken;      /* hosting found the port in use by a process this
                          user cannot see: joined what listens there */
  int root_no_restart; /* the root cause's exit code is a no-restart one */
  int64_t round_unix_ms; /* when this round's workers were started */
  int lost_said;         /* the steps a restart loses were said */
  int restarts_used;
  hang_t *hang; /* --hang-timeout (hang.c); NULL when off */
  /* timers and signals */
  uv_timer_t hb_timer, status_timer, barrier_timer, linger_timer;
  uv_signal_t sigs[8];
  int nsigs;
  int signaled;  /* the signal that is stopping us, 0 if none */
  int last_commit; /* the stopped workers' completion files committed */
  int restart_commit; /* a restart's: the same, before the next join
                         (1 while it runs, 2 once done) */
  int sigint_count;
  int closing_handles;
  resume_t *ck; /* --ckpt-dir: the resume agreement and commits */
  int64_t done_round; /* the round whose success report waits for a commit */
  /* host failover: the last round's successors (by node rank, without
   * the host), this node's address as the server saw it, node 0's name */
  char **succ_hosts, **succ_addrs;
  size_t nsucc;
  char my_addr[INET6_ADDRSTRLEN + 8];
  char node0_host[256];
  int64_t fo_prev_round, fo_prev_restarts, fo_survivors; /* the next JOIN's */
  int64_t fo_quorum;
  int fo_silent;     /* the host went silent (no closed connection) */
  int failovers;
  uint64_t fo_started_ms;
  size_t fo_idx;     /* the successor tried now (the walk of the list) */
  size_t fo_passed;  /* the one passed over last */
  int fo_unsure;     /* a successor passed over did not answer at all: it
                        may live behind a partition (majority rule) */
  int fo_wait;       /* no majority here: waiting for the job's host */
  int early_fd;      /* a successor's port, bound and listening from the
                        loss on until it hosts or joins a host; -1 none */
  int early_port;
  int early_failed;  /* it could not be opened: the walk passes over this
                        node, as the others do (they see it refuse) */
  int fo_self_skipped; /* so it did in this failover: it still joins (a
                        survivor), and gives the successor after it a walk
                        bound more (the others reach that one that late) */
  char fo_lost_addr[INET6_ADDRSTRLEN + 8]; /* the lost host's address */
  ac_t *probe;       /* a node left alone looks for the job elsewhere */
  size_t probe_idx;
  int probe_lost;    /* the probe asks the lost host's address */
  uint64_t hb_due_ms;  /* when the heartbeat timer should fire next */
  uint64_t stalled_ms; /* when it last fired a heartbeat late: this
                          agent's loop stood still (stopped), 0 never */
  char probe_addr[INET6_ADDRSTRLEN + 8];
  /* --event-log, --event-log-handler console (events.h) */
  ev_log_t *ev;
  double join_sent_s, resume_started_s;
  double down_since_s;    /* wall clock of this outage's first sign, 0 none */
  char restart_reason[512];
  int64_t steps_before;   /* the highest step seen before the restart */
  int64_t resume_step;    /* the step this round resumed from, -1 none */
  int64_t committed;      /* the newest committed step seen, -1 none */
  int64_t ck_bytes;       /* its shards' bytes (manifest), -1 unknown */
  double ck_write_s;      /* its slowest shard's write, 0 unknown */
  int ran_once;           /* workers were started before */
  int nrestarts;          /* rounds after the first (this agent saw) */
  double downtime_s;      /* failure -> workers running again, summed */
  int64_t steps_redone;
  double agree_s;         /* checkpoint agreements, summed */
  int nagree;
  int nhangs;
  /* stragglers: per local rank, its score (time / the median), seconds
   * in a row over the threshold, flagged in this round */
  double *score;
  int *slow_for;
  char *flagged;
  int nstragglers;
  /* --metrics-port (metrics.h) */
  met_t *met;
  uv_timer_t met_timer;
  page_t *page;     /* GET / on the metrics port: the loss curve */
  size_t srv_max_memory; /* the hosted server's --max-memory */
  etb_t *etb;       /* --rdzv-backend etcd (etcd_backend.h); NULL else */
  int etcd_fenced;  /* its lease was not renewed in time: workers stopped
                       until etcd is back (etcd_event) */
  int64_t etcd_gated; /* the round whose record in etcd the workers wait
                         for, -1 none */
} agent_t;

static void reg_update(agent_t *a, int ended);

/* ---- small helpers --------------------------------------------------------------------------- */

/* What the agent does, unless -q. */
#define say(a, ...)                                                            \
  do {                                                                         \
    if (!(a)->o->quiet)                                                        \
      LU_INFO(&(a)->log, __VA_ARGS__);                                         \
  } while (0)

/* ---- events (events.h, docs/events.md) ------------------------------------------------------ */

/* The highest step this node's ranks reported in this round, -1 none. */
static int64_t max_step(const agent_t *a) {
  int64_t best = -1;
  for (int i = 0; i < hang_nproc(a->hang); i++) {
    hang_progress_t p;
    if (hang_progress(a->hang, i, &p) == 0 && p.seen && p.prog.step > best)
      best = p.prog.step;
  }
  return best;
}

/* The first sign of an outage (a failed worker, a hang, a restart). */
static void mark_down(agent_t *a, double wall_s) {
  if (a->down_since_s == 0) {
    /* The ranks got at least as far as the last checkpoint seen. */
    a->down_since_s = wall_s;
    a->steps_before = LU_MAX(max_step(a), a->committed);
  }
}

/* A step in an event: null where there is none (below 0), as
 * docs/events.md says. */
static void json_step(lu_json_t *j, const char *key, int64_t step) {
  if (step < 0)
    lu_json_null(j, key);
  else
    lu_json_int(j, key, step);
}

static void ev_failure_fields(lu_json_t *j, const sum_failure_t *f) {
  lu_json_str(j, "host", f->host);
  lu_json_int(j, "rank", f->rank);
  lu_json_int(j, "local_rank", f->local_rank);
  lu_json_int(j, "pid", f->pid);
  if (f->signal)
    lu_json_str(j, "signal", sum_signal_name(f->signal));
  else
    lu_json_int(j, "exit_code", f->exit_code);
  if (f->error_message)
    lu_json_str(j, "error", f->error_message);
}

/* The step's size and write time from its manifest (a small file; the
 * commit watcher saw it complete): a->ck_bytes, a->ck_write_s, -1 and 0
 * when it does not say (a layout without launch's manifest). */
static void committed_stats(agent_t *a, int64_t step) {
  char path[4200], *text = NULL;
  size_t len;
  uint64_t bytes;
  double write_s;
  a->ck_bytes = -1;
  a->ck_write_s = 0;
  if (snprintf(path, sizeof(path), "%s/step-%lld/manifest.json",
               a->o->ckpt_dir, (long long)step) >= (int)sizeof(path) ||
      lu_read_file(path, 16u << 20, &text, &len) != 0)
    return;
  if (ev_manifest_stats(text, len, &bytes, &write_s) == 0) {
    a->ck_bytes = (int64_t)LU_MIN(bytes, (uint64_t)INT64_MAX);
    a->ck_write_s = write_s;
  }
  free(text);
}

static void on_committed(void *arg, int64_t step) {
  agent_t *a = arg;
  lu_json_t *j = ev_begin(a->ev, EV_checkpoint_committed);
  a->committed = step;
  committed_stats(a, step);
  if (j) {
    lu_json_int(j, "round", a->round);
    lu_json_int(j, "step", step);
    lu_json_str(j, "dir", a->o->ckpt_dir);
    if (a->ck_bytes >= 0)
      lu_json_int(j, "bytes", a->ck_bytes);
    if (a->ck_write_s > 0) {
      lu_json_num(j, "seconds", a->ck_write_s);
      lu_json_num(j, "mb_per_s", (double)a->ck_bytes / 1e6 / a->ck_write_s);
    }
    ev_end(a->ev);
  }
}

/* ---- metrics (metrics.h, docs/monitoring.md) ----------------------------------------------- */

static const char *state_name(int st) {
  /* A_FAILOVER stops the workers too: "stopping" for the metrics */
  static const char *const n[] = {"connecting", "joining", "resuming",
                                  "running", "reported", "stopping",
                                  "stopping", "finishing", "closed"};
  return st >= A_CONNECT && st <= A_CLOSED ? n[st - A_CONNECT] : "starting";
}

/* The page (page.h): the curve gets the lowest local rank's loss. */
static void render_page(agent_t *a) {
  page_rank_t *r;
  size_t n = 0;
  lu_buf_t b = LU_BUF_INIT;
  char *html;
  page_info_t in = {a->o->run_id, a->o->host, state_name(a->state), a->round,
                    a->nrestarts, a->downtime_s, a->steps_redone, a->committed};
  if (a->page == NULL ||
      (r = calloc((size_t)a->o->nproc + 1, sizeof(*r))) == NULL)
    return;
  for (int i = 0; i < hang_nproc(a->hang); i++) {
    hang_progress_t p;
    const msg_progress_t *g = &p.prog;
    if (hang_progress(a->hang, i, &p) != 0 || !p.seen)
      continue;
    if (n == 0 && g->has_loss && g->step >= 0)
      page_point(a->page, g->step, g->loss);
    r[n].rank = p.rank;
    r[n].step = g->step;
    r[n].total_steps = g->has_total_steps ? g->total_steps : -1;
    r[n].age_s = p.exited ? NAN : p.age_s;
    r[n].steps_per_s = p.steps_per_s > 0 ? p.steps_per_s : NAN;
    r[n].loss = g->has_loss ? g->loss : NAN;
    r[n].step_time = g->has_step_time ? g->step_time : NAN;
    r[n].score = a->score[i] > 0 ? a->score[i] : NAN;
    n++;
  }
  page_render(a->page, &in, r, n, &b);
  free(r);
  if (lu_buf_finish(&b, &html, NULL) == 0)
    met_publish_page(a->met, html);
}

/* The job's series, rendered on the loop once a second. */
static void render_metrics(agent_t *a) {
  static const char *const states[] = {"connecting", "joining", "resuming",
                                       "running", "reported", "stopping",
                                       "finishing"};
  /* per rank: name, help, and which value */
  static const struct { const char *name, *type, *help; } rf[] = {
      {"launch_rank_step", "gauge", "the last step the rank reported"},
      {"launch_rank_progress_age_seconds", "gauge",
       "seconds since the rank's progress key last changed"},
      {"launch_rank_steps_per_second", "gauge",
       "steps per second between the rank's last two reports"},
      {"launch_rank_tokens_per_second", "gauge",
       "tokens per second of the last step (tokens / step time)"},
      {"launch_rank_loss", "gauge", "training loss of the last step (NaN kept)"},
      {"launch_rank_grad_norm", "gauge", "gradient norm of the last step"},
      {"launch_rank_learning_rate", "gauge", "learning rate of the last step"},
      {"launch_rank_step_seconds", "gauge", "seconds the last step took"},
      {"launch_rank_total_steps", "gauge", "steps the run will take"},
      {"launch_rank_straggler_score", "gauge",
       "time per step against the median of this node's ranks (1 = median)"}};
  lu_buf_t b = LU_BUF_INIT;
  char job[300], node[300], base[700], lab[800], *text;
  const char *cur = state_name(a->state);
  if (a->met == NULL)
    return;
  met_label_escape(a->o->run_id, job, sizeof(job));
  met_label_escape(a->o->host, node, sizeof(node));
  snprintf(base, sizeof(base), "job=\"%s\",node=\"%s\"", job, node);
  met_family(&b, "launch_job_state", "gauge",
             "the agent's state: 1 for the current one");
  for (size_t i = 0; i < LU_ARRAY_SIZE(states); i++) {
    snprintf(lab, sizeof(lab), "%s,state=\"%s\"", base, states[i]);
    met_sample(&b, "launch_job_state", lab, !strcmp(cur, states[i]));
  }
#define JOB(name, type, help, v)                                               \
  met_family(&b, name, type, help);                                            \
  met_sample(&b, name, base, (double)(v))
  JOB("launch_job_round", "gauge", "the restart generation this node is in",
      a->round);
  JOB("launch_job_restarts_total", "counter",
      "rounds this agent started after a failure, a hang or a change of nodes",
      a->nrestarts);
  JOB("launch_job_workers", "gauge", "workers of this node (--nproc-per-node)",
      a->o->nproc);
  JOB("launch_job_workers_up", "gauge", "workers of this node alive",
      a->wg ? wk_live(a->wg) : 0);
  JOB("launch_job_workers_done", "gauge",
      "workers of this node that exited 0 in this round, while the others "
      "run on", a->done);
  JOB("launch_job_hangs_total", "counter",
      "hangs found on this node (--hang-timeout)", a->nhangs);
  JOB("launch_job_failovers_total", "counter",
      "times the rendezvous host was lost and this node moved to another",
      a->failovers);
  JOB("launch_job_stragglers_total", "counter",
      "ranks flagged as stragglers on this node, once per round",
      a->nstragglers);
  JOB("launch_job_downtime_seconds_total", "counter",
      "seconds from a failure to the restarted workers, summed",
      a->downtime_s);
  JOB("launch_job_steps_redone_total", "counter",
      "steps trained again after restarts (a lower bound, docs/events.md)",
      a->steps_redone);
  if (a->srv) { /* this agent hosts the job's server */
    srv_stats_t ss;
    srv_get_stats(a->srv, &ss);
    snprintf(lab, sizeof(lab), "node=\"%s\"", node);
    met_server(&b, lab, &ss, (double)a->srv_max_memory);
  }
  if (a->committed >= 0) {
    JOB("launch_checkpoint_step", "gauge",
        "the newest committed checkpoint step (--ckpt-dir)", a->committed);
  }
  if (a->committed >= 0 && a->ck_bytes >= 0) {
    JOB("launch_checkpoint_bytes", "gauge",
        "bytes of the newest committed checkpoint step, all shards",
        a->ck_bytes);
  }
  if (a->committed >= 0 && a->ck_write_s > 0) {
    JOB("launch_checkpoint_write_seconds", "gauge",
        "seconds the newest committed step took to write (its slowest "
        "shard)", a->ck_write_s);
  }
#undef JOB
  for (size_t k = 0; k < LU_ARRAY_SIZE(rf); k++) {
    int header = 0;
    for (int i = 0; i < hang_nproc(a->hang); i++) {
      hang_progress_t p;
      const msg_progress_t *g = &p.prog;
      double v = NAN;
      int have = 0;
      if (hang_progress(a->hang, i, &p) != 0 ||
          !(p.seen || (k == 1 && p.waiting)))
        continue;
      switch (k) {
      case 0: v = (double)g->step, have = g->step >= 0; break;
      case 1: v = p.age_s, have = !p.exited; break; /* done: not silent */
      case 2: v = p.steps_per_s, have = p.steps_per_s > 0; break;
      case 3:
        have = g->has_tokens && g->has_step_time && g->step_time > 0;
        if (have)
          v = (double)g->tokens / g->step_time;
        break;
      case 4: v = g->loss, have = g->has_loss; break;
      case 5: v = g->grad_norm, have = g->has_grad_norm; break;
      case 6: v = g->lr, have = g->has_lr; break;
      case 7: v = g->step_time, have = g->has_step_time; break;
      case 8: v = (double)g->total_steps, have = g->has_total_steps; break;
      case 9: v = a->score[i], have = a->score[i] > 0; break;
      }
      if (!have)
        continue;
      if (!header++)
        met_family(&b, rf[k].name, rf[k].type, rf[k].help);
      snprintf(lab, sizeof(lab), "%s,rank=\"%d\"", base, p.rank);
      met_sample(&b, rf[k].name, lab, v);
    }
  }
  if (lu_buf_finish(&b, &text, NULL) == 0)
    met_publish(a->met, text);
  render_page(a);
}

/* A rank whose time per step (compute_time, else step_time) is this many
 * times the median of this node's ranks for this many seconds in a row is
 * flagged (docs/events.md#stragglers). */
#define STRAGGLER_RATIO 1.2
#define STRAGGLER_SECONDS 5

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static void check_stragglers(agent_t *a) {
  int n = hang_nproc(a->hang), k = 0;
  double t[CFG_MAX_NPROC], sorted[CFG_MAX_NPROC], med;
  hang_progress_t p;
  for (int i = 0; i < n && i < CFG_MAX_NPROC; i++) {
    t[i] = 0;
    a->score[i] = 0;
    if (hang_progress(a->hang, i, &p) != 0 || !p.seen || p.age_s > 60)
      continue;
    if (p.prog.has_compute_time && p.prog.compute_time > 0)
      t[i] = p.prog.compute_time;
    else if (p.prog.has_step_time && p.prog.step_time > 0)
      t[i] = p.prog.step_time;
    if (t[i] > 0)
      sorted[k++] = t[i];
  }
  if (k < 2 || a->state != A_RUN)
    return;
  qsort(sorted, (size_t)k, sizeof(double), cmp_double);
  med = k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
  for (int i = 0; i < n && i < CFG_MAX_NPROC; i++) {
    lu_json_t *j;
    if (t[i] <= 0 || med <= 0)
      continue;
    a->score[i] = t[i] / med;
    a->slow_for[i] = a->score[i] >= STRAGGLER_RATIO ? a->slow_for[i] + 1 : 0;
    if (a->slow_for[i] < STRAGGLER_SECONDS || a->flagged[i])
      continue;
    a->flagged[i] = 1;
    a->nstragglers++;
    LU_WARN(&a->log, "rank %d is a straggler: %.3f s a step, %.2fx the "
            "median %.3f s of this node's ranks for %d s", a->base_rank + i,
            t[i], a->score[i], med, a->slow_for[i]);
    if ((j = ev_begin(a->ev, EV_straggler_flagged)) != NULL) {
      lu_json_int(j, "round", a->round);
      lu_json_int(j, "rank", a->base_rank + i);
      lu_json_num(j, "score", a->score[i]);
      lu_json_num(j, "seconds_per_step", t[i]);
      lu_json_num(j, "median_seconds_per_step", med);
      lu_json_num(j, "threshold", STRAGGLER_RATIO);
      ev_end(a->ev);
    }
  }
}

/* wk_set_own_children: the metrics' GPU sampler (metrics.h). */
static int own_child(pid_t pid, void *arg) {
  agent_t *a = arg;
  return a->met && pid == met_sampler_pid(a->met);
}

static void met_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  check_stragglers(a);
  render_metrics(a);
  met_tick(a->met); /* its GPU sampler: reaped, restarted */
}

static void finish(agent_t *a);
static void finished_stopping(wk_group_t *g, void *arg);
static void send_join(agent_t *a);
static void run_round(agent_t *a);
static void begin_round(agent_t *a);
static void on_resumed(void *arg, const resume_result_t *res);
static void failover_stopped(wk_group_t *g, void *arg);

/* A free TCP port on addr (bind 0, read it, close): for rank 0's own
 * TCPStore in --torch-store rank0 mode, as torchrun does. */
static int free_port(const char *addr) {
  struct addrinfo hints, *res = NULL;
  int fd, port = 0;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(addr[0] ? addr : NULL, "0", &hints, &res) != 0)
    return 0;
  fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
  if (fd >= 0)
    close(fd);
  freeaddrinfo(res);
  return port;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

/* Does the tree at path hold a non-empty file (a log, an error file)? */
static int found_content;
static int content_entry(const char *path, const struct stat *st, int flag,
                         struct FTW *ftw) {
  (void)path;
  (void)ftw;
  if (flag == FTW_F && S_ISREG(st->st_mode) && st->st_size > 0) {
    found_content = 1;
    return 1; /* stop the walk */
  }
  return 0;
}

static int dir_has_content(const char *path) {
  found_content = 0;
  nftw(path, content_entry, 16, FTW_PHYS);
  return found_content;
}

/* The names of --log-line-prefix: ${host} ${rank} ${local_rank}
 * ${role_name} ${node_rank}. */
typedef struct prefix_s {
  const agent_t *a;
  char num[3][16];
} prefix_t;

static const char *prefix_var(void *ctx, const char *name) {
  prefix_t *p = ctx;
  static const char *const nums[] = {"rank", "local_rank", "node_rank"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(name, nums[i]))
      return p->num[i];
  return !strcmp(name, "host")        ? p->a->o->host
         : !strcmp(name, "role_name") ? p->a->o->role
                                      : NULL;
}

/* A template that does not expand is printed as it is. */
static void expand_prefix(const agent_t *a, int local_rank, char *out,
                          size_t cap) {
  prefix_t p = {a, {""}};
  snprintf(p.num[0], sizeof(p.num[0]), "%d", a->base_rank + local_rank);
  snprintf(p.num[1], sizeof(p.num[1]), "%d", local_rank);
  snprintf(p.num[2], sizeof(p.num[2]), "%d", a->node_rank);
  char raw[512];
  if (prof_expand(a->o->line_prefix, prefix_var, &p, raw, sizeof(raw), NULL,
                  0) != 0)
    lu_strlcpy(raw, a->o->line_prefix, sizeof(raw));
  /* On every worker line: the host name (anyone's) never carries an
   * escape code to the terminal (issue #24). */
  lu_escape(raw, strlen(raw), out, cap, 0);
}

/* ---- workers ------------------------------------------------------------------------------------- */

static void free_round(agent_t *a) {
  for (int i = 0; a->renv && i < a->o->nproc; i++)
    env_free(a->renv[i]);
  free(a->renv);
  a->renv = NULL;
  for (int i = 0; a->prefixes && i < a->o->nproc; i++)
    free(a->prefixes[i]);
  free(a->prefixes);
  a->prefixes = NULL;
}

/* torchrun substitutes ${local_rank} in the program's arguments: each
 * rank's argv when one holds it (a->rank_argv stays NULL otherwise). */
static void free_succ(agent_t *a) {
  for (size_t i = 0; i < a->nsucc; i++) {
    free(a->succ_hosts[i]);
    free(a->succ_addrs[i]);
  }
  free(a->succ_hosts);
  free(a->succ_addrs);
  a->succ_hosts = a->succ_addrs = NULL;
  a->nsucc = 0;
}

static int make_rank_argv(agent_t *a) {
  static const char macro[] = "${local_rank}";
  int any = 0, n = 0;
  for (int i = 0; a->argv[i]; i++, n++)
    any |= strstr(a->argv[i], macro) != NULL;
  if (!any || a->rank_argv)
    return 0;
  if ((a->rank_argv = calloc((size_t)a->o->nproc, sizeof(char **))) == NULL)
    return RDZV_ENOMEM;
  for (int r = 0; r < a->o->nproc; r++) {
    char **v = calloc((size_t)n + 1, sizeof(char *));
    if ((a->rank_argv[r] = v) == NULL)
      return RDZV_ENOMEM;
    for (int i = 0; i < n; i++) {
      const char *s = a->argv[i], *m;
      char num[16];
      size_t len = 0, cap = strlen(s) + 1;
      int w = snprintf(num, sizeof(num), "%d", r);
      for (m = s; (m = strstr(m, macro)) != NULL; m += sizeof(macro) - 1)
        cap += (size_t)w;
      if ((v[i] = malloc(cap)) == NULL)
        return RDZV_ENOMEM;
      while ((m = strstr(s, macro)) != NULL) {
        memcpy(v[i] + len, s, (size_t)(m - s));
        len += (size_t)(m - s);
        memcpy(v[i] + len, num, (size_t)w);
        len += (size_t)w;
        s = m + sizeof(macro) - 1;
      }
      memcpy(v[i] + len, s, strlen(s) + 1);
    }
  }
  return 0;
}

static void free_rank_argv(agent_t *a) {
  for (int r = 0; a->rank_argv && r < a->o->nproc; r++)
    launch_argv_free(a->rank_argv[r]);
  free(a->rank_argv);
  a->rank_argv = NULL;
}

static void clear_failures(agent_t *a) {
  for (size_t i = 0; i < a->nfails; i++)
    sum_failure_free(&a->fails[i]);
  free(a->fails);
  a->fails = NULL;
  a->nfails = 0;
}

/* Every local rank's environment for this round (launch_rank_env), and
 * its output prefix. */
static int build_envs(agent_t *a) {
  cfg_t *o = a->o;
  launch_round_t r;
  const char **tags = NULL;
  int rc = 0;
  free_round(a);
  a->renv = calloc((size_t)o->nproc, sizeof(*a->renv));
  a->prefixes = calloc((size_t)o->nproc, sizeof(char *));
  if (a->renv == NULL || a->prefixes == NULL)
    return RDZV_ENOMEM;
  memset(&r, 0, sizeof(r));
  r.round = a->round;
  r.restarts = a->restarts_spent;
  r.node_rank = a->node_rank;
  r.nnodes = a->nnodes;
  r.world_size = a->world_size;
  r.base_rank = a->base_rank;
  if (o->torch_store == CFG_STORE_RANK0) {
    lu_strlcpy(r.master_addr, a->node0_addr, sizeof(r.master_addr));
    r.master_port = a->master_port;
  } else {
    lu_strlcpy(r.master_addr, a->store_host, sizeof(r.master_addr));
    r.master_port = a->ep_port;
  }
  snprintf(r.endpoint, sizeof(r.endpoint),
           strchr(a->store_host, ':') ? "[%s]:%d" : "%s:%d", a->store_host,
           a->ep_port);
  lu_strlcpy(r.attempt_dir, a->attempt_dir, sizeof(r.attempt_dir));
  r.resume_step = r.ckpt_verified = -1;
  if (a->ck)
    resume_round(a->ck, &r.resume_step, &r.ckpt_verified);
  /* The workers' secrets for their progress values (hang.h). */
  if (a->hang && (tags = calloc((size_t)o->nproc, sizeof(*tags))) == NULL)
    return RDZV_ENOMEM;
  for (int i = 0; tags && i < o->nproc; i++)
    tags[i] = hang_tag(a->hang, i);
  r.progress_tags = tags;
  for (int i = 0; i < o->nproc; i++) {
    char pre[512];
    /* Every change the profile makes is logged once: rank 0, round 0. */
    rc = launch_rank_env(o, &a->node, &r, i,
                             (i == 0 && a->round == 0 && !o->quiet) ? &a->log
                                                                   : NULL,
                             &a->renv[i]);
    if (rc != 0)
      break;
    expand_prefix(a, i, pre, sizeof(pre));
    if ((a->prefixes[i] = strdup(pre)) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
  }
  free(tags);
  return rc;
}

/* In the child between fork and exec: the rank's CPU and memory binding. */
static int apply_binding(int local_rank, void *arg, char *errbuf,
                         size_t errlen) {
  const aff_plan_t *plan = arg;
  (void)errbuf;
  (void)errlen;
  /* A binding the kernel refuses is reported on the worker's stderr; the
   * worker still starts. */
  aff_apply_child(aff_plan_rank(plan, local_rank), 2);
  return 0;
}

/* --standby: what a standby of rank i starts with is the rank's
 * environment without the variables of a rank (the contract's rows set by
 * torchrun's contract, launch and --ckpt-dir), but with its LOCAL_RANK and
 * LOCAL_WORLD_SIZE (its GPU), the user's KEEP values, the binding and the
 * profile: a program that ignores LAUNCH_STANDBY_FD can never join the job
 * as a rank. The rank's own environment is handed over when it takes the
 * rank (workers.h). */
#define SB_W_SET 0
#define SB_W_OWN 0
#define SB_W_KEEP 1
#define SB_BY_torchrun 0
#define SB_BY_launch 0
#define SB_BY_ckpt 0
#define SB_BY_binding 1
#define SB_BY_profile 1
static int sb_drops(const char *kv) {
  static const struct {
    const char *name;
    int keep;
  } rows[] = {
#define X(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)                             \
  {#NAME, SB_W_##WRITE || SB_BY_##BY},
      ENV_CONTRACT(X)
#undef X
  };
  size_t n = strcspn(kv, "=");
  if ((n == 10 && strncmp(kv, "LOCAL_RANK", n) == 0) ||
      (n == 16 && strncmp(kv, "LOCAL_WORLD_SIZE", n) == 0))
    return 0;
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    if (!rows[i].keep && strlen(rows[i].name) == n &&
        strncmp(rows[i].name, kv, n) == 0)
      return 1;
  return 0;
}

static int start_standbys(agent_t *a) {
  cfg_t *o = a->o;
  wk_standby_spec_t sp;
  char **envp[CFG_MAX_NPROC];
  int rc = 0, n = 0;
  if (a->python) {
    /* A Python script without the runtime would run rankless: a trainer
     * that falls back to a single process would train beside the job. */
    if (a->round == 0)
      LU_WARN(&a->log, "--standby: a Python script cannot be a standby (it "
              "needs the runtime's rt_standby_wait, as train_gpt); workers "
              "start as usual");
    return 0;
  }
  if (a->round == 0 && o->max_restarts == 0)
    say(a, "--standby: the standbys take ranks only when the workers "
        "restart; after a failure that needs --max-restarts N");
  memset(envp, 0, sizeof(envp));
  for (; n < o->nproc; n++) {
    char **full = env_envp(a->renv[n]);
    size_t k = 0, j = 0;
    if (full == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    while (full[k])
      k++;
    if ((envp[n] = calloc(k + 2, sizeof(char *))) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    for (k = 0; full[k]; k++)
      if (!sb_drops(full[k]))
        envp[n][j++] = full[k]; /* borrowed: wk_standby_set copies */
    /* LAUNCH_CKPT_DIR is a rank's (a rankless program would save into
     * the job's directory as rank 0 of 1): this says only that a resume
     * may come, so that the standby prepares the memory it reads into */
    if (o->ckpt_dir[0])
      envp[n][j++] = (char *)"LAUNCH_STANDBY_CKPT=1";
  }
  if (rc == 0) {
    memset(&sp, 0, sizeof(sp));
    sp.size = sizeof(sp);
    sp.nproc = o->nproc;
    sp.envp = (char *const *const *)envp;
    /* After the new workers started, not beside them. */
    sp.delay_ms = 2000;
    sp.ready_ms = o->standby_ready_ms;
    rc = wk_standby_set(a->wg, &sp);
  }
  for (int i = 0; i < n && i < o->nproc; i++)
    free(envp[i]);
  if (rc != 0)
    LU_WARN(&a->log, "--standby: cannot keep standbys: %s; workers start "
            "as usual", rdzv_strerror(rc));
  return rc;
}

static void on_worker_exit(wk_group_t *g, const wk_exit_t *ex, void *arg);

static int start_workers(agent_t *a) {
  cfg_t *o = a->o;
  wk_spec_t spec;
  char **envp[1024];
  int rc;
  a->round_unix_ms = (int64_t)(lu_wall_s() * 1000.0);
  a->lost_said = 0;
  if ((size_t)snprintf(a->attempt_dir, sizeof(a->attempt_dir),
                       "%s/attempt_%" PRId64, a->run_dir, a->round) >=
      sizeof(a->attempt_dir)) {
    LU_ERR(&a->log, "log directory path too long: %s", a->run_dir);
    return -ENAMETOOLONG;
  }
  for (int i = 0; i < o->nproc; i++) {
    char d[PATH_MAX + 16];
    snprintf(d, sizeof(d), "%s/%d", a->attempt_dir, i);
    if ((rc = lu_mkdir_p(d)) != 0) {
      LU_ERR(&a->log, "cannot create %s: %s (check --log-dir)", d,
             rdzv_strerror(rc));
      return rc;
    }
  }
  if ((rc = build_envs(a)) != 0 || (rc = make_rank_argv(a)) != 0)
    return rc;
  memset(&spec, 0, sizeof(spec));
  spec.size = sizeof(spec);
  spec.nproc = o->nproc;
  spec.argv = a->argv;
  spec.rank_argv = (char *const *const *)a->rank_argv;
  for (int i = 0; i < o->nproc; i++)
    if ((envp[i] = env_envp(a->renv[i])) == NULL)
      return RDZV_ENOMEM;
  if (a->node.plan) {
    if (!a->node.report_only) {
      spec.pre_exec = apply_binding;
      spec.pre_exec_arg = a->node.plan;
    }
    if (o->report_bindings && a->round == 0)
      for (int i = 0; i < o->nproc; i++) {
        char line[512];
        aff_binding_format(a->node.plan, a->node.topo, i, line, sizeof(line));
        LU_INFO(&a->log, "rank %d: %s", a->base_rank + i, line);
      }
  }
  spec.envp = (char *const *const *)envp;
  spec.pipe_output = 1;
  spec.prefix = a->prefixes;
  spec.redirects = o->redirects;
  spec.tee = o->tee;
  spec.console = o->console;
  spec.attempt_dir = a->attempt_dir;
  spec.tail_lines = 20;
  a->exited = a->done = 0;
  clear_failures(a);
  rc = wk_start(a->wg, &spec, on_worker_exit, a);
  if (rc != 0)
    LU_ERR(&a->log, "cannot start the workers: %s", rdzv_strerror(rc));
  else if (o->standby)
    (void)start_standbys(a);
  /* issue #11 (topo helper): say once how workers are kept together. */
  if (rc == 0 && a->round == 0 && !o->quiet) {
    const char *what;
    /* cgroups: as it should be, said only with debug on */
    if (wk_containment(a->wg, &what) == WK_CONTAIN_CGROUP)
      LU_DBG(&a->log, LU_DBG_AGENT, "%s", what);
    else
      LU_INFO(&a->log, "%s", what);
  }
  return rc;
}

/* ---- reports to the server ------------------------------------------------------------------------ */

/* REPORT this node's result: ok, or its first failure f. */
static void report(agent_t *a, const sum_failure_t *f) {
  msg_report_t r;
  msg_report_init(&r);
  r.round = a->round;
  r.ok = f == NULL;
  if (f) {
    lu_json_t *j = ev_begin(a->ev, EV_failure);
    if (j) {
      lu_json_int(j, "round", a->round);
      ev_failure_fields(j, f);
      ev_end(a->ev);
    }
    mark_down(a, f->wall_s);
    msg_failure_t *m = &r.failure;
    r.has_failure = 1;
    lu_strlcpy(m->host, f->host, sizeof(m->host));
    m->rank = f->rank;
    m->local_rank = f->local_rank;
    m->node_rank = f->node_rank;
    m->pid = f->pid;
    m->exit_code = f->exit_code;
    m->signal = f->signal;
    m->time = f->wall_s;
    m->tail = f->stderr_tail;
    m->error = f->error_message;
    m->attempt_dir = a->attempt_dir;
    /* --no-restart-exit-codes: the server ends the job */
    m->no_restart = !f->signal && f->exit_code > 0 && f->exit_code < 256 &&
                    a->o->no_restart[f->exit_code];
  }
  msg_report_pack(ac_begin(a->ac, PROTO_OP_REPORT, 1), &r);
  if (ac_send(a->ac, NULL, NULL) != 0)
    LU_WARN(&a->log, "cannot report to the rendezvous server: %s",
            ac_last_error(a->ac));
}

static void barrier_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  if (a->state != A_REPORTED || a->hosting)
    return;
  LU_WARN(&a->log, "every worker here exited 0, but other nodes have not "
                   "finished after %.0f s (--exit-barrier-timeout): leaving",
          a->o->exit_barrier_ms / 1000.0);
  a->finish_ok = 1;
  a->exit_code = 0;
  finish(a);
}

/* A failure that every attempt would repeat (end_reason says it): leave
 * the rendezvous and end with code. */
static void leave_job(agent_t *a, int code) {
  lu_json_t *j = ev_begin(a->ev, EV_node_left);
  if (j) {
    lu_json_str(j, "reason", a->end_reason);
    ev_end(a->ev);
  }
  a->exit_code = code;
  a->finish_ok = 0;
  if (a->ac) {
    msg_leave_t l;
    lu_strlcpy(l.reason, a->end_reason, sizeof(l.reason));
    msg_leave_pack(ac_begin(a->ac, PROTO_OP_LEAVE, 1), &l);
    ac_send(a->ac, NULL, NULL);
  }
  finish(a);
}

/* Every worker of this node exited 0: say so, unless a restart came while
 * the last checkpoint commit ran. */
static void report_done(void *arg) {
  agent_t *a = arg;
  if (a->state != A_REPORTED || a->round != a->done_round)
    return;
  report(a, NULL);
  if (!a->hosting)
    uv_timer_start(&a->barrier_timer, barrier_cb,
                   (uint64_t)a->o->exit_barrier_ms, 0);
}

static void on_worker_exit(wk_group_t *g, const wk_exit_t *ex, void *arg) {
  agent_t *a = arg;
  int hung = hang_exited(a->hang, ex->local_rank);
  lu_json_t *j = ev_begin(a->ev, EV_worker_exited);
  (void)g;
  if (j) {
    lu_json_int(j, "round", a->round);
    lu_json_int(j, "rank", a->base_rank + ex->local_rank);
    lu_json_int(j, "local_rank", ex->local_rank);
    lu_json_int(j, "pid", ex->pid);
    if (ex->signal)
      lu_json_str(j, "signal", sum_signal_name(ex->signal));
    else
      lu_json_int(j, "exit_code", ex->exit_code);
    lu_json_bool(j, "expected", a->state != A_RUN && a->state != A_REPORTED);
    ev_end(a->ev);
  }
  a->exited++;
  if (a->state != A_RUN && a->state != A_REPORTED)
    return; /* stopping: exits are expected */
  if (!ex->exec_errno && ex->exit_code == 0)
    a->done++;
  /* issue #11 (topo helper): exec failure -> stop, no restart. A program
   * that cannot be executed fails the same way on every attempt: one line,
   * leave the rendezvous, exit 127 (not found) or 126 (not executable). */
  if (ex->exec_errno) {
    int nf = ex->exec_errno == ENOENT || ex->exec_errno == ENOTDIR;
    snprintf(a->end_reason, sizeof(a->end_reason),
             "cannot execute '%s': %s; not restarting (check the program's "
             "path and permissions)", a->argv[0], strerror(ex->exec_errno));
    leave_job(a, nf ? 127 : 126);
    return;
  }
  if (ex->exit_code != 0) {
    sum_failure_t f, *nf;
    char path[PATH_MAX + 32];
    memset(&f, 0, sizeof(f));
    f.wall_s = ex->wall_s;
    lu_strlcpy(f.host, a->o->host, sizeof(f.host));
    f.rank = a->base_rank + ex->local_rank;
    f.local_rank = ex->local_rank;
    f.node_rank = a->node_rank;
    f.pid = ex->pid;
    f.python = a->python;
    f.exit_code = ex->exit_code;
    f.signal = ex->signal;
    f.stderr_tail = strdup(wk_tail(a->wg, ex->local_rank));
    snprintf(path, sizeof(path), "%s/%d/error.json", a->attempt_dir,
             ex->local_rank);
    sum_read_error_file(path, &f.error_message);
    if (hung) { /* the watcher reports it (hang_hooks_t.hung) */
      free(f.error_message);
      f.error_message = strdup(hang_reason(a->hang, ex->local_rank));
    }
    if ((nf = realloc(a->fails, (a->nfails + 1) * sizeof(*nf))) != NULL) {
      a->fails = nf;
      a->fails[a->nfails++] = f;
    } else {
      sum_failure_free(&f);
    }
    if (ex->signal)
      LU_WARN(&a->log, "rank %d (local %d, pid %d) was killed by %s",
              a->base_rank + ex->local_rank, ex->local_rank, (int)ex->pid,
              sum_signal_name(ex->signal));
    else
      LU_WARN(&a->log, "rank %d (local %d, pid %d) exited with code %d",
              a->base_rank + ex->local_rank, ex->local_rank, (int)ex->pid,
              ex->exit_code);
    if (a->state == A_RUN && !hung) {
      /* The first failure here: the server decides restart or end. */
      a->state = A_REPORTED;
      if (a->nfails > 0)
        report(a, &a->fails[a->nfails - 1]);
    }
    return;
  }
  if (a->state == A_RUN && a->exited == a->o->nproc && wk_live(a->wg) == 0) {
    a->state = A_REPORTED;
    a->done_round = a->round;
    if (a->ck)
      resume_commit_final(a->ck, report_done, a); /* its last commit first */
    else
      report_done(a);
  }
}

/* --hang-timeout (hang.c): watch only while the round runs; report a hung
 * rank as this node's failure, as a worker killed by SIGKILL (the watcher
 * kills it next) unless it already exited. */
static int hang_running(void *arg) {
  return ((agent_t *)arg)->state == A_RUN;
}

static void hang_found(void *arg, int local_rank, const char *reason,
                       double wall_s) {
  agent_t *a = arg;
  sum_failure_t f;
  hang_progress_t hp;
  lu_json_t *j;
  if (a->state != A_RUN)
    return;
  a->nhangs++;
  if ((j = ev_begin(a->ev, EV_hang_detected)) != NULL) {
    hang_progress(a->hang, local_rank, &hp);
    lu_json_int(j, "round", a->round);
    lu_json_int(j, "rank", a->base_rank + local_rank);
    json_step(j, "last_step", hp.prog.step);
    lu_json_num(j, "age_s", hp.age_s);
    lu_json_str(j, "reason", reason);
    ev_end(a->ev);
  }
  a->state = A_REPORTED;
  for (size_t i = 0; i < a->nfails; i++)
    if (a->fails[i].local_rank == local_rank) {
      a->fails[i].wall_s = wall_s; /* before the others it held up */
      report(a, &a->fails[i]);
      return;
    }
  memset(&f, 0, sizeof(f));
  f.wall_s = wall_s;
  lu_strlcpy(f.host, a->o->host, sizeof(f.host));
  f.rank = a->base_rank + local_rank;
  f.local_rank = local_rank;
  f.node_rank = a->node_rank;
  f.pid = (int)wk_pid(a->wg, local_rank);
  f.python = a->python;
  f.exit_code = -1;
  f.signal = SIGKILL;
  f.stderr_tail = strdup(wk_tail(a->wg, local_rank));
  f.error_message = strdup(reason);
  report(a, &f);
  sum_failure_free(&f);
}

/* ---- rendezvous ------------------------------------------------------------------------------------ */

static void status_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  msg_status_t st;
  char joined[1024] = "", missing[1024] = "";
  int n = 0;
  (void)ac;
  if (status != 0 || a->state != A_JOIN || m->nargs < 1 ||
      msg_status_unpack(&m->args[0], &st, NULL, 0) != 0)
    return;
  for (size_t i = 0; i < st.nmembers; i++)
    if (!strcmp(st.members[i].state, "joining")) {
      n++;
      lu_list_add(joined, sizeof(joined), st.members[i].host);
    }
  /* The expected hosts that have not joined. */
  for (size_t j = 0; j < st.nexpected; j++) {
    size_t i = 0;
    while (i < st.nmembers && strcmp(st.members[i].host, st.expected[j]))
      i++;
    if (i == st.nmembers)
      lu_list_add(missing, sizeof(missing), st.expected[j]);
  }
  say(a, "waiting for nodes of job %s: %d joined of %d..%d (%s), %.0f s%s%s",
      a->o->run_id, n, (int)st.min, (int)st.max, joined[0] ? joined : "none",
      (uv_now(a->loop) - a->join_started_ms) / 1000.0,
      missing[0] ? "; missing: " : "", missing);
  msg_status_free(&st);
}

static void probe_majority(agent_t *a);

static void status_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  if (a->state != A_JOIN)
    return;
  ac_begin(a->ac, PROTO_OP_STATUS, 0);
  ac_send(a->ac, status_reply, a);
  probe_majority(a);
}

/* Did this agent's loop stand still lately? A heartbeat tick overdue (or
 * that came) late by the silent bound, a second at least: this agent was
 * stopped (or starved) long enough for the others to have taken it for
 * lost and moved on. Asked at each tick and when the host is lost (after a
 * stop, the loop may read the closed connection before the late tick). */
static int stood_still(agent_t *a) {
  uint64_t now = uv_now(a->loop);
  uint64_t bound = (uint64_t)LU_MAX(1000, LU_MIN(a->o->read_timeout_ms,
                                             3 * (int64_t)a->o->heartbeat_ms));
  if (a->hb_due_ms && now > a->hb_due_ms + bound)
    a->stalled_ms = now;
  return a->stalled_ms && now - a->stalled_ms < 4 * (uint64_t)a->o->heartbeat_ms;
}

static void hb_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  uint64_t heard;
  stood_still(a);
  a->hb_due_ms = uv_now(a->loop) + (uint64_t)a->o->heartbeat_ms;
  if (a->ac == NULL || a->state == A_FINISH || a->state == A_CLOSED)
    return;
  /* A heartbeat asks for a reply only when nothing came from the server
   * for about two heartbeats: the reply watch still hears a live server in
   * time, a stopped one is noticed at most one heartbeat later, and the
   * server writes to each agent half as often (docs/rendezvous.md). The
   * threshold is one and a half: a tick a little early must not leave the
   * asking to the tick at three, when the watch (3 heartbeats) already
   * fires; a JOIN that waits long for a majority met that race. */
  heard = uv_now(a->loop) - ac_last_rx_ms(a->ac);
  if (2 * heard < 3 * (uint64_t)a->o->heartbeat_ms) {
    msgpack_pack_uint8(ac_begin(a->ac, PROTO_OP_HEARTBEAT, 1),
                       ROUNDS_HEARTBEAT_QUIET);
    ac_send_noreply(a->ac);
    return;
  }
  ac_begin(a->ac, PROTO_OP_HEARTBEAT, 0);
  ac_send(a->ac, NULL, NULL);
}

static void join_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  msg_round_t r;
  char err[256] = "";
  (void)ac;
  uv_timer_stop(&a->status_timer);
  if (a->state != A_JOIN)
    return;
  if (status == 0 && (m->nargs < 1 ||
                      msg_round_unpack(&m->args[0], &r, err, sizeof(err)) != 0))
    status = RDZV_EPROTO;
  if (status != 0) {
    if (err[0])
      LU_ERR(&a->log, "the rendezvous server's round does not parse: %s", err);
    else if (status != RDZV_ECANCELED && status != RDZV_ECLOSED)
      LU_ERR(&a->log, "cannot join job %s: %s", a->o->run_id,
             ac_last_error(a->ac));
    if (status != RDZV_ECANCELED && status != RDZV_ECLOSED) {
      lu_json_t *j = ev_begin(a->ev, EV_node_refused);
      if (j) {
        lu_json_str(j, "reason", err[0] ? err : ac_last_error(a->ac));
        ev_end(a->ev);
      }
    }
    a->exit_code = status == RDZV_EMISMATCH ? LAUNCH_EXIT_MISMATCH
                                            : LAUNCH_EXIT_RDZV;
    a->finish_ok = 0;
    a->end_reason[0] = '\0';
    finish(a);
    return;
  }
  a->round = r.round;
  if (a->etb && a->hosting)
    etb_record_round(a->etb, a->round); /* fenced by the host key */
  a->restarts_spent = r.restarts;
  a->node_rank = (int)r.node_rank;
  a->nnodes = (int)r.nnodes;
  a->world_size = (int)r.world_size;
  a->base_rank = (int)r.base_rank;
  a->master_port = (int)r.master_port;
  lu_strlcpy(a->node0_addr, r.node0_addr, sizeof(a->node0_addr));
  {
    lu_json_t *j = ev_begin(a->ev, EV_round_formed);
    if (j) {
      lu_json_int(j, "round", a->round);
      lu_json_int(j, "node_rank", a->node_rank);
      lu_json_int(j, "nnodes", a->nnodes);
      lu_json_int(j, "world_size", a->world_size);
      lu_json_int(j, "base_rank", a->base_rank);
      lu_json_str(j, "node0", r.node0_host);
      lu_json_int(j, "restarts", r.restarts);
      lu_json_num(j, "seconds", lu_wall_s() - a->join_sent_s);
      ev_end(a->ev);
    }
  }
  a->resume_step = -1;
  lu_strlcpy(a->node0_host, r.node0_host, sizeof(a->node0_host));
  lu_strlcpy(a->my_addr, r.addr, sizeof(a->my_addr));
  /* The successors of this round's host: the lists are ours now. */
  free_succ(a);
  if (r.nsucc_hosts == r.nsucc_addrs) {
    a->succ_hosts = r.succ_hosts;
    a->succ_addrs = r.succ_addrs;
    a->nsucc = r.nsucc_hosts;
    r.succ_hosts = r.succ_addrs = NULL;
    r.nsucc_hosts = r.nsucc_addrs = 0;
  }
  msg_round_free(&r);
  if (a->fo_prev_round >= 0) {
    say(a, "job %s re-formed under the new host %s:%d: round %" PRId64
           ", %d nodes, %.3f s after the host was lost", a->o->run_id,
        a->ep_host, a->ep_port, a->round, a->nnodes,
        (uv_now(a->loop) - a->fo_started_ms) / 1000.0);
    a->fo_prev_round = -1;
    a->fo_survivors = a->fo_prev_restarts = a->fo_quorum = 0;
  }
  if (a->etb) {
    /* etcd must hold the round, recorded by the host while it holds the
     * host key (no split brain): etcd_event goes on */
    a->etcd_gated = a->round;
    etb_wait_round(a->etb, a->round);
    return;
  }
  begin_round(a);
}

/* The round formed: agree on the checkpoint step, then start the
 * workers. */
static void begin_round(agent_t *a) {
  if (a->ck) {
    resume_round_t rr = {a->round, a->node_rank, a->nnodes, a->world_size,
                         a->base_rank, a->o->nproc, a->o->host};
    a->state = A_RESUME;
    a->resume_started_s = lu_wall_s();
    resume_agree(a->ck, &rr, on_resumed, a);
    return;
  }
  run_round(a);
}

/* The workers cannot start here: reported like a failed worker. */
/* launch, not the program, failed to start the round's workers: the job's
 * status is LAUNCH_EXIT_INTERNAL (docs/exit-codes.md), whatever rank it
 * is reported under. */
static void report_start_failure(agent_t *a, const char *why) {
  sum_failure_t f;
  memset(&f, 0, sizeof(f));
  f.wall_s = lu_wall_s();
  lu_strlcpy(f.host, a->o->host, sizeof(f.host));
  f.rank = a->base_rank;
  f.node_rank = a->node_rank;
  f.exit_code = LAUNCH_EXIT_INTERNAL;
  f.error_message = strdup(why);
  a->state = A_REPORTED;
  report(a, &f);
  sum_failure_free(&f);
}

/* Start this round's workers, or report why they cannot start. */
static void run_round(agent_t *a) {
  hang_start(a->hang, a->base_rank, a->round);
  if (start_workers(a) != 0) {
    report_start_failure(a, "launch could not start the workers on this node");
    return;
  }
  if (a->ran_once) { /* a restart: what it cost */
    lu_json_t *j = ev_begin(a->ev, EV_restart);
    double down = a->down_since_s > 0 ? lu_wall_s() - a->down_since_s : 0;
    int64_t redone = 0;
    if (a->steps_before >= 0)
      redone = LU_MAX(0, a->steps_before - LU_MAX(a->resume_step, 0));
    if (j) {
      lu_json_int(j, "round", a->round);
      lu_json_str(j, "reason", a->restart_reason);
      lu_json_num(j, "downtime_s", down);
      json_step(j, "last_step", a->steps_before);
      if (a->resume_step >= 0)
        lu_json_int(j, "resume_step", a->resume_step);
      lu_json_int(j, "steps_redone", redone);
      ev_end(a->ev);
    }
    a->nrestarts++;
    if (a->page)
      page_restart(a->page, a->round, LU_MAX(a->resume_step, 0));
    a->downtime_s += down;
    a->steps_redone += redone;
  }
  for (int i = 0; a->ev && i < a->o->nproc; i++) {
    lu_json_t *j = ev_begin(a->ev, EV_worker_started);
    lu_json_int(j, "round", a->round);
    lu_json_int(j, "rank", a->base_rank + i);
    lu_json_int(j, "local_rank", i);
    lu_json_int(j, "pid", wk_pid(a->wg, i));
    ev_end(a->ev);
  }
  a->ran_once = 1;
  memset(a->flagged, 0, (size_t)a->o->nproc);
  memset(a->slow_for, 0, (size_t)a->o->nproc * sizeof(int));
  a->down_since_s = 0;
  a->steps_before = -1;
  /* The start line: one per round. */
  {
    const env_var_t *omp = a->renv ? env_find(a->renv[0], "OMP_NUM_THREADS")
                                   : NULL;
    int omp_set = a->round == 0 && omp && omp->src == ENV_SRC_LAUNCH;
    char where[1200] = "";
    /* A standalone job's made-up id and free port: what `launch status`
     * needs to find it. */
    if (a->o->standalone && a->round == 0)
      snprintf(where, sizeof(where), "; standalone server %s:%d (launch "
               "status --rdzv-endpoint %s:%d --rdzv-id %s)", a->ep_host,
               a->ep_port, a->ep_host, a->ep_port, a->o->run_id);
    say(a, "round %" PRId64 " of job %s: node %d of %d, ranks %d-%d of %d%s%s",
        a->round, a->o->run_id, a->node_rank, a->nnodes, a->base_rank,
        a->base_rank + a->o->nproc - 1, a->world_size,
        omp_set ? "; OMP_NUM_THREADS=1 for each worker (set it to tune)" : "",
        where);
  }
  a->state = A_RUN;
  reg_update(a, 0); /* the round, and the endpoint after a failover */
  if (a->ck) {
    resume_round_t rr = {a->round, a->node_rank, a->nnodes, a->world_size,
                         a->base_rank, a->o->nproc, a->o->host};
    a->restart_commit = 0;
    resume_commit_start(a->ck, &rr);
  }
}

/* The nodes agreed on the checkpoint step (resume.c). */
static void on_resumed(void *arg, const resume_result_t *res) {
  agent_t *a = arg;
  if (a->state == A_STOP) { /* a restart came meanwhile: join again */
    send_join(a);
    return;
  }
  if (a->state != A_RESUME)
    return;
  if (res->rc == CKPT_EWORLD || res->rc == CKPT_ELAYOUT) {
    /* The same on every node, and on every attempt: end the job. */
    snprintf(a->end_reason, sizeof(a->end_reason),
             "cannot resume from %.300s: %.700s", a->o->ckpt_dir, res->why);
    leave_job(a, 2);
    return;
  }
  if (res->rc != 0) {
    LU_ERR(&a->log, "%s", res->why);
    report_start_failure(a, res->why);
    return;
  }
  {
    lu_json_t *j = ev_begin(a->ev, EV_resume_agreed);
    double took = lu_wall_s() - a->resume_started_s;
    a->agree_s += took;
    a->nagree++;
    if (j) {
      lu_json_int(j, "round", a->round);
      if (res->step >= 0)
        lu_json_int(j, "step", res->step);
      else
        lu_json_null(j, "step");
      lu_json_bool(j, "elastic", res->elastic);
      lu_json_num(j, "seconds", took);
      ev_end(a->ev);
    }
  }
  a->resume_step = res->step;
  if (res->step >= 0)
    say(a, "resuming from checkpoint step %" PRId64 " of %s%s%s%s", res->step,
        a->o->ckpt_dir,
        !res->elastic ? ""
        : res->layout == CKPT_LAYOUT_LAUNCH
            ? " (another world size: replicated state)"
            : " (another world size: DCP reshards on load)",
        res->why[0] ? "; " : "", res->why);
  else if (res->why[0] && res->layout == CKPT_LAYOUT_LAUNCH)
    /* steps exist, none every node can load: they are set aside, and go
     * once this run finalises steps as new; said loudly, with the way out */
    LU_WARN(&a->log, "no checkpoint step of %s can be loaded by this job "
            "(%s): a fresh start; its steps are set aside as "
            "abandoned-step-N-T and pruned once this run finalises a step as "
            "new. To resume instead, stop the job and bring back the node "
            "that holds the missing shards (or copy its step-N directories "
            "to this node's %s)", a->o->ckpt_dir, res->why, a->o->ckpt_dir);
  else
    say(a, "no checkpoint to resume from in %s: a fresh start%s%s",
        a->o->ckpt_dir, res->why[0] ? "; " : "", res->why);
  run_round(a);
}

static void send_join(agent_t *a) {
  cfg_t *o = a->o;
  msg_join_t j;
  a->state = A_JOIN;
  a->join_started_ms = uv_now(a->loop);
  a->etcd_gated = -1;
  msg_join_init(&j);
  lu_strlcpy(j.host, o->host, sizeof(j.host));
  lu_strlcpy(j.addr, o->local_addr[0] ? o->local_addr : ac_local_ip(a->ac),
             sizeof(j.addr));
  j.nproc = o->nproc;
  j.rank = o->pref_node_rank;
  j.min = o->min_nodes;
  j.max = o->max_nodes;
  j.last_call_ms = o->last_call_timeout_ms;
  j.join_timeout_ms = o->join_timeout_ms;
  j.heartbeat_ms = o->heartbeat_ms;
  j.max_restarts = o->max_restarts;
  j.is_static = o->backend == CFG_BACKEND_STATIC;
  j.allow_mismatch = o->allow_mismatch;
  j.master_port = a->my_master_port;
  j.expected = o->expected_hosts;
  j.nexpected = o->nexpected;
  j.fingerprint = a->fp_text;
  j.hosting = a->hosting;
  j.prev_round = a->fo_prev_round;
  j.prev_restarts = a->fo_prev_restarts;
  j.survivors = a->fo_survivors;
  j.quorum = a->fo_quorum;
  a->join_sent_s = lu_wall_s();
  {
    lu_json_t *e = ev_begin(a->ev, EV_node_joined);
    if (e) {
      lu_json_str(e, "addr", j.addr);
      lu_json_int(e, "nproc", j.nproc);
      ev_end(a->ev);
    }
  }
  msg_join_pack(ac_begin(a->ac, PROTO_OP_JOIN, 1), &j);
  if (ac_send(a->ac, join_reply, a) != 0) {
    LU_ERR(&a->log, "cannot send JOIN: %s", ac_last_error(a->ac));
    a->exit_code = 1;
    finish(a);
    return;
  }
  {
    /* Every few seconds: 5, or a quarter of a short join timeout. */
    uint64_t every = (uint64_t)LU_MAX(1000, LU_MIN(5000, o->join_timeout_ms / 4));
    uv_timer_start(&a->status_timer, status_cb, every, every);
  }
}

static void restart_stopped(wk_group_t *g, void *arg);

static void restart_committed(void *arg) {
  agent_t *a = arg;
  a->restart_commit = 2; /* done: restart_stopped goes on */
  restart_stopped(NULL, a);
}

static void restart_stopped(wk_group_t *g, void *arg) {
  agent_t *a = arg;
  int committed;
  (void)g;
  if (a->restart_commit == 1)
    return; /* the commit runs: restart_committed goes on */
  committed = a->restart_commit == 2;
  a->restart_commit = 0;
  if (a->state == A_FINISH) { /* the job ended while they stopped */
    finished_stopping(g, a);
    return;
  }
  if (a->state == A_FAILOVER) { /* the host was lost while they stopped */
    failover_stopped(g, a);
    return;
  }
  if (a->state != A_STOP)
    return;
  /* What the stopped workers saved on their way out is committed before
   * the next round's agreement, which would roll it back. */
  if (a->ck && !committed) {
    a->restart_commit = 1;
    resume_commit_stopped(a->ck, restart_committed, a);
    return;
  }
  clear_failures(a);
  send_join(a);
}

/* The root cause the server sent, as the summary prints it. */
static void take_root(agent_t *a, msg_failure_t *r) {
  sum_failure_t *f = &a->root;
  memset(f, 0, sizeof(*f));
  f->wall_s = r->time;
  lu_strlcpy(f->host, r->host, sizeof(f->host));
  f->rank = (int)r->rank;
  f->local_rank = (int)r->local_rank;
  f->node_rank = (int)r->node_rank;
  f->pid = (int)r->pid;
  f->exit_code = (int)r->exit_code;
  f->signal = (int)r->signal;
  f->python = a->python; /* every node runs the same program */
  if (r->tail && r->tail[0])
    f->stderr_tail = r->tail, r->tail = NULL;
  if (r->error && r->error[0])
    f->error_message = r->error, r->error = NULL;
  a->have_root = 1;
}

/* Without --ckpt-dir a restart starts the trainer at step 1 again: say
 * how far rank 0 had come in this round (its progress key, as rt_progress
 * or a PyTorch trainer writes it), the steps lost. */
int agent__lost_steps(const char *p, size_t n, long long *step,
                      long long *ms) {
  char buf[64];
  if (n >= sizeof(buf))
    return -1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return sscanf(buf, "%lld %lld", step, ms) == 2 && *step > 0 ? 0 : -1;
}

static void lost_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  const msgpack_object *items;
  uint32_t cnt;
  const char *p;
  size_t n;
  long long step, ms;
  (void)ac;
  if (status != 0 || a->lost_said || proto_arg_array(m, 0, &items, &cnt) != 0 ||
      cnt != 1 || proto_obj_bytes(&items[0], &p, &n) != 0 ||
      agent__lost_steps(p, n, &step, &ms) != 0 || ms < a->round_unix_ms)
    return;
  a->lost_said = 1;
  LU_WARN(&a->log, "no --ckpt-dir: the restarted workers begin again at "
                   "step 1, and the %lld steps rank 0 had reached are lost; "
                   "give --ckpt-dir D (and have the trainer save, e.g. "
                   "train_gpt --ckpt-every K) to resume instead", step);
}

static void ask_lost_steps(agent_t *a) {
  char key[64];
  if (a->o->ckpt_dir[0] || a->base_rank != 0 || a->ac == NULL)
    return;
  for (int torch = 0; torch <= 1; torch++) {
    msgpack_packer *pk = ac_begin(a->ac, PROTO_OP_MGET, 2);
    /* a PyTorch rank's key lies in its round's TCPStore namespace */
    if (torch)
      snprintf(key, sizeof(key), RDZV_TORCH_NS "%" PRId64 "//" RDZV_PROGRESS_PREFIX
               "0", a->round);
    else
      snprintf(key, sizeof(key), RDZV_PROGRESS_PREFIX "0");
    msgpack_pack_array(pk, 1);
    proto_pack_str(pk, key);
    msgpack_pack_int64(pk, 0); /* do not wait */
    ac_send(a->ac, lost_reply, a);
  }
}

static void on_push(ac_t *ac, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  const msgpack_object *body = m->nargs > 0 ? &m->args[0] : NULL;
  if (ac != a->ac)
    return; /* a probe's */
  if (m->op == PROTO_EV_RESTART) {
    msg_restart_t r;
    if ((a->state != A_RUN && a->state != A_REPORTED &&
         a->state != A_RESUME) ||
        msg_restart_unpack(body, &r, NULL, 0) != 0)
      return;
    say(a, "restarting the workers (round %" PRId64 "): %s", r.round,
        r.reason ? r.reason : "");
    lu_strlcpy(a->restart_reason, r.reason ? r.reason : "",
               sizeof(a->restart_reason));
    mark_down(a, lu_wall_s());
    msg_restart_free(&r);
    uv_timer_stop(&a->barrier_timer);
    if (a->state == A_RESUME) { /* no workers yet: on_resumed joins */
      a->state = A_STOP;
      resume_cancel(a->ck);
      return;
    }
    a->state = A_STOP;
    if (a->ck)
      resume_commit_stop(a->ck);
    ask_lost_steps(a);
    wk_stop(a->wg, SIGTERM, (int)a->o->stop_grace_ms, restart_stopped, a);
    return;
  }
  if (m->op == PROTO_EV_SHUTDOWN) {
    msg_shutdown_t sd;
    char err[256];
    if (a->state == A_FINISH || a->state == A_CLOSED)
      return;
    if (msg_shutdown_unpack(body, &sd, err, sizeof(err)) != 0) {
      LU_ERR(&a->log, "the rendezvous server's end of the job does not "
                      "parse (%s): stopping", err);
      msg_shutdown_init(&sd);
    }
    a->finish_ok = sd.ok;
    lu_strlcpy(a->end_reason, sd.reason ? sd.reason : "", sizeof(a->end_reason));
    if (sd.has_root) {
      take_root(a, &sd.root);
      a->root_no_restart = (int)sd.root.no_restart;
    }
    a->restarts_used = (int)sd.restarts;
    msg_shutdown_free(&sd);
    if (a->finish_ok)
      a->exit_code = 0;
    else if (a->have_root)
      a->exit_code = sum_exit_status(&a->root);
    else
      a->exit_code = 1;
    finish(a);
  }
}

/* The port this agent meant to host on was in use (by a process it could
 * not name) and what listens there does not behave as a launch server. */
static const char *port_taken_hint(const agent_t *a) {
  static char buf[400];
  if (!a->port_taken || a->round >= 0)
    return "";
  snprintf(buf, sizeof(buf), ". Port %d was already in use when this agent "
           "tried to host the server there (Address already in use), and "
           "what listens there may be another program, not a launch server: "
           "`ss -ltnp 'sport = :%d'` shows which; stop it or give the job "
           "another port", a->ep_port, a->ep_port);
  return buf;
}

/* ---- host failover (docs/rendezvous.md#host-failover) ------------------------------------------------- */

static int start_server(agent_t *a, const char *ip, int port);
static int new_client(agent_t *a, int64_t connect_ms);
static int open_client(agent_t *a, const char *host, int64_t connect_ms,
                       ac_t **out);
static int64_t connect_limit_ms(const agent_t *a);
static void early_close(agent_t *a);
static void on_connected(ac_t *ac, int status, void *arg);
static void connect_wait_cb(uv_timer_t *t);

/* The checkpoint agreement talks to the server at ep_host:ep_port. */
static int new_resume(agent_t *a) {
  char ep[300];
  int rc;
  snprintf(ep, sizeof(ep), strchr(a->ep_host, ':') ? "[%s]:%d" : "%s:%d",
           a->ep_host, a->ep_port);
  rc = resume_new(a->loop, a->o, &a->log, ep, a->token, a->token_len, &a->ck);
  if (rc == 0)
    resume_on_commit(a->ck, on_committed, a);
  return rc;
}

/* Does the loss of the server move the job to a successor? When the
 * host's kernel closed the connection (its agent died, or the host dropped
 * this node: the probe in failover_stopped tells them apart), always; when
 * the host went silent (stopped, frozen, cut off), only when the survivors
 * are a majority of the last round, as the host may still run on with the
 * others (no split brain; docs/rendezvous.md#host-failover): a minority
 * waits for the job's host instead. A static job keeps its fixed node
 * ranks and endpoint: not moved. OUT *silent. RET FO_END, FO_MOVE or
 * FO_WAIT. */
enum { FO_END = 0, FO_MOVE, FO_WAIT };
static int can_fail_over(const agent_t *a, int status, int *silent,
                         char *why, size_t cap) {
  int live = a->state == A_JOIN || a->state == A_RESUME ||
             a->state == A_RUN || a->state == A_REPORTED || a->state == A_STOP;
  why[0] = '\0';
  *silent = status == -ETIMEDOUT;
  if (a->hosting || a->round < 0 || a->nsucc == 0 ||
      a->o->backend == CFG_BACKEND_STATIC || a->o->standalone)
    return FO_END;
  if (status != RDZV_ECLOSED && status != UV_ECONNRESET && !*silent)
    return FO_END;
  if (*silent && a->etb == NULL && (int)a->nsucc < a->nnodes / 2 + 1) {
    snprintf(why, cap, "the %d other nodes are no majority of the last "
             "round's %d, so none takes over from a host that may still "
             "run (no split brain)", (int)a->nsucc, a->nnodes);
    return live ? FO_WAIT : FO_END;
  }
  return live ? FO_MOVE : FO_END;
}

static void move_to_successor(agent_t *a, const char *passed);

/* The probe of the old host: it answers (it had dropped this node, it is
 * alive): join it again as any node; else move to the successor. */
static void probe_done(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  (void)ac;
  if (a->state != A_FAILOVER)
    return;
  if (status == 0) {
    say(a, "the rendezvous host %s:%d answers: joining it again", a->ep_host,
        a->ep_port);
    early_close(a);
    a->fo_prev_round = -1;
    a->hb_due_ms = uv_now(a->loop) + (uint64_t)a->o->heartbeat_ms;
    uv_timer_start(&a->hb_timer, hb_cb, (uint64_t)a->o->heartbeat_ms,
                   (uint64_t)a->o->heartbeat_ms);
    hang_set_ac(a->hang, a->ac);
    send_join(a);
    return;
  }
  ac_close(a->ac, NULL, NULL);
  a->ac = NULL;
  move_to_successor(a, NULL);
}

/* How often a node that waits for the job's host asks where it runs. */
static uint64_t probe_every_ms(const agent_t *a) {
  return (uint64_t)LU_MAX(1000, LU_MIN(5000, a->o->join_timeout_ms / 4));
}

/* No majority here: ask the lost host and the last round's successors,
 * one per tick, whether one of them hosts the job, until join_timeout. */
static void wait_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  if (a->state != A_FAILOVER || !a->fo_wait)
    return;
  if (uv_now(a->loop) - a->join_started_ms >= (uint64_t)a->o->join_timeout_ms) {
    LU_ERR(&a->log, "no host of job %s answered within %.0f s (--rdzv-conf "
           "join_timeout): neither %s nor the last round's other nodes host "
           "it; giving up", a->o->run_id, a->o->join_timeout_ms / 1000.0,
           a->fo_lost_addr);
    a->exit_code = LAUNCH_EXIT_RDZV;
    a->finish_ok = 0;
    finish(a);
    return;
  }
  probe_majority(a);
}

/* The workers stopped: host the server here when this node is the first
 * successor, else join the first successor's; or, with no majority here,
 * wait for the job's host. */
static void failover_stopped(wk_group_t *g, void *arg) {
  agent_t *a = arg;
  if (a->state == A_FINISH) {
    finished_stopping(g, a);
    return;
  }
  if (a->state != A_FAILOVER)
    return;
  clear_failures(a);
  hang_set_ac(a->hang, NULL);
  if (a->fo_wait) {
    /* The connection stays open and quiet: a host that was only stopped
     * drops this node for its missed heartbeats when it resumes (a silent
     * member: its next round needs a majority), whenever this node's
     * workers stopped; a closed connection could read as a dead agent. */
    a->join_started_ms = uv_now(a->loop);
    uv_timer_start(&a->status_timer, wait_cb, probe_every_ms(a),
                   probe_every_ms(a));
    return;
  }
  if (a->ac) {
    ac_close(a->ac, NULL, NULL);
    a->ac = NULL;
  }
  /* A closed connection: a dead agent refuses a new one at once, a live
   * host that dropped this node takes it. A silent host is not asked. */
  if (!a->fo_silent &&
      new_client(a, LU_MIN(1000, a->o->heartbeat_ms)) == 0) {
    if (ac_connect(a->ac, probe_done) == 0)
      return;
    ac_close(a->ac, NULL, NULL);
    a->ac = NULL;
  }
  move_to_successor(a, NULL);
}

static void move_to(agent_t *a, const char *new_addr, const char *new_host,
                    int new_port, int here, const char *passed);

/* ---- a successor's port, open from the loss on --------------------------------------------------- */

/* A successor that lives listens on its port as soon as it sees the host
 * lost, before its workers stop: a connection the others make meanwhile
 * waits in the kernel's queue for the server this node may start (which
 * takes the socket over: srv_listen_fd), so a refused one means the
 * successor's agent is gone, and the walk passes it over without waiting
 * for a stop it would not make (refused_limit_ms). Every node of the
 * successor list opens it: the walk may reach any of them. */
static void early_close(agent_t *a) {
  if (a->early_fd >= 0)
    close(a->early_fd);
  a->early_fd = -1;
}

static size_t succ_index(const agent_t *a, const char *addr);

static void early_listen(agent_t *a) {
  struct addrinfo hints, *res = NULL;
  char port[16];
  int fd = -1, one = 1, err = 0;
  a->early_failed = 0;
  if (a->etb || a->fo_wait || a->early_fd >= 0 ||
      succ_index(a, a->my_addr) >= a->nsucc)
    return;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  snprintf(port, sizeof(port), "%d", a->ep_port);
  if (getaddrinfo(a->my_addr, port, &hints, &res) != 0 || res == NULL) {
    err = EADDRNOTAVAIL;
  } else if ((fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          0)) < 0 ||
             setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
             (res->ai_family == AF_INET6 &&
              setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) ||
             bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
    err = errno;
  }
  if (res)
    freeaddrinfo(res);
  if (err) {
    if (fd >= 0)
      close(fd);
    a->early_failed = 1;
    LU_WARN(&a->log, "cannot listen on %s:%d, where this node hosts job %s if "
            "the successors before it are gone: %s; the others will pass it "
            "over, and so will this node", a->my_addr, a->ep_port, a->o->run_id,
            strerror(err));
    return;
  }
  a->early_fd = fd;
  a->early_port = a->ep_port;
}

/* How long a successor that only refuses connections is tried: it sees
 * the loss up to the silent-server bound after this node and opens its
 * port then (early_listen). */
static int64_t refused_limit_ms(const agent_t *a) {
  return LU_MIN(a->o->read_timeout_ms, 3 * (int64_t)a->o->heartbeat_ms) +
         LU_MIN(1000, a->o->heartbeat_ms);
}

/* How long a successor that lives takes to host, seen from another node:
 * it may notice the loss up to the silent-server bound later, stop its
 * workers for up to --stop-timeout, and ask the old host for a second.
 * A successor that does not host within it is passed over. */
static int64_t walk_limit_ms(const agent_t *a) {
  return refused_limit_ms(a) + a->o->stop_grace_ms;
}

/* The walk is at the successor right after this node, which passed itself
 * over (early_listen failed). */
static int skipped_just_now(const agent_t *a) {
  return a->fo_self_skipped && succ_index(a, a->my_addr) + 1 == a->fo_idx;
}

/* Host the server here when this node is the successor tried now (the
 * first, or the next after `passed`, why the one before did not host),
 * else join that successor's. With etcd, etcd elects the new host
 * (etcd_event). */
static void move_to_successor(agent_t *a, const char *passed) {
  const char *addr;
  if (a->etb) {
    if (a->etcd_fenced)
      return; /* ETB_RESTORED asks etcd */
    say(a, "asking etcd for the new host of job %s", a->o->run_id);
    /* not silent: the probe of the old host failed, its agent died */
    etb_elect(a->etb, a->fo_silent ? ETB_ELECT_AFTER : ETB_ELECT_DEAD);
    return;
  }
  addr = a->succ_addrs[a->fo_idx];
  if (strcmp(addr, a->my_addr) == 0 && a->early_failed && a->fo_idx + 1 < a->nsucc) {
    /* its port could not be opened (early_listen said so): the others pass
     * it over, so does this node */
    a->fo_idx++;
    a->fo_self_skipped = 1;
    move_to_successor(a, passed);
    return;
  }
  move_to(a, addr, a->succ_hosts[a->fo_idx], a->ep_port,
          strcmp(addr, a->my_addr) == 0, passed);
}

/* Host the server here (here), else join new_addr:new_port; passed: why
 * the successor before did not host (NULL: the host itself was lost). */
static void move_to(agent_t *a, const char *new_addr, const char *new_host,
                    int new_port, int here, const char *passed) {
  char lost[300], lost_host[256];
  int rc;
  snprintf(lost, sizeof(lost), strchr(a->ep_host, ':') ? "[%s]:%d" : "%s:%d",
           a->ep_host, a->ep_port);
  if (passed)
    lu_strlcpy(lost_host, a->succ_hosts[a->fo_passed], sizeof(lost_host));
  else
    lu_strlcpy(lost_host, strcmp(a->node0_addr, a->ep_host) == 0
                              ? a->node0_host : a->ep_host, sizeof(lost_host));
  if (!passed)
    a->failovers++;
  /* The one line an operator needs: who was lost, who hosts now. */
  if (passed)
    LU_WARN(&a->log, "successor %s (%s) did not host after %.1f s (the bound: "
            "%.1f s, %.1f s while every connection is refused): %s; the "
            "new host is %s (%s:%d)%s; failover %d of job %s", lost_host,
            lost, (uv_now(a->loop) - a->join_started_ms) / 1000.0,
            walk_limit_ms(a) / 1000.0, refused_limit_ms(a) / 1000.0, passed,
            new_host, new_addr, new_port, here ? ", this node" : "",
            a->failovers, a->o->run_id);
  else
    LU_WARN(&a->log, "rendezvous host %s (%s) lost: %s; the new host is %s "
                     "(%s:%d)%s; failover %d of job %s", lost_host, lost,
            a->fo_silent ? "it went silent" : "its connection was closed",
            new_host, new_addr, new_port, here ? ", this node" : "",
            a->failovers, a->o->run_id);
  {
    lu_json_t *e = ev_begin(a->ev, EV_host_failover);
    if (e) {
      lu_json_str(e, "lost_host", lost_host);
      lu_json_str(e, "lost_endpoint", lost);
      lu_json_str(e, "new_host", new_host);
      lu_json_str(e, "new_addr", new_addr);
      lu_json_int(e, "port", new_port);
      lu_json_bool(e, "here", here);
      lu_json_bool(e, "silent", a->fo_silent);
      lu_json_int(e, "round", a->round);
      lu_json_int(e, "failovers", a->failovers);
      ev_end(a->ev);
    }
  }
  a->fo_prev_round = a->round;
  a->fo_prev_restarts = a->restarts_spent;
  /* The successors passed over are gone (etcd elects among the living). */
  a->fo_survivors = (int64_t)(a->etb ? a->nsucc
                                      : a->nsucc - a->fo_idx + (size_t)a->fo_self_skipped);
  /* After a silent host, or a successor passed over that did not answer
   * at all (it may live behind a partition), a majority of the last round
   * must be there. Not with etcd: a host that lost its key records no
   * round anyone trains in, so etcd decides, whoever is left (a host
   * deposed while its peers were a minority of the last round, its lease
   * revoked: the others go on without it). */
  a->fo_quorum = a->etb == NULL && (a->fo_silent || a->fo_unsure)
                     ? a->nnodes / 2 + 1 : 0;
  if (a->ck) {
    resume_free(a->ck);
    a->ck = NULL;
  }
  a->ep_port = new_port;
  if (here && a->srv == NULL) {
    rc = start_server(a, new_addr, a->ep_port);
    if (rc != 0) {
      LU_ERR(&a->log, "cannot host the rendezvous server on %s:%d after the "
             "host was lost: %s", new_addr, a->ep_port,
             rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc));
      if (a->srv) {
        srv_close(a->srv, NULL, NULL);
        a->srv = NULL;
      }
      a->exit_code = LAUNCH_EXIT_RDZV;
      a->finish_ok = 0;
      finish(a);
      return;
    }
    a->hosting = 1;
  }
  lu_strlcpy(a->ep_host, new_addr, sizeof(a->ep_host));
  /* The workers' store moves with the server. */
  lu_strlcpy(a->store_host, new_addr, sizeof(a->store_host));
  if ((a->o->ckpt_dir[0] && new_resume(a) != 0) ||
      new_client(a, here || a->etb ? connect_limit_ms(a)
                                   : (skipped_just_now(a) ? 2 : 1) * walk_limit_ms(a)) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    a->finish_ok = 0;
    finish(a);
    return;
  }
  /* a successor that refuses until it must have seen the loss is gone,
   * unless it is the last one (then the walk waits for it: the whole bound) */
  if (!here && a->etb == NULL && a->fo_idx + 1 < a->nsucc)
    ac_set_refused_limit(a->ac, refused_limit_ms(a));
  /* its port takes the connection before its server runs: wait for it */
  if (!here && a->etb == NULL)
    ac_set_hello_waits(a->ac);
  if (ac_connect(a->ac, on_connected) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    a->finish_ok = 0;
    finish(a);
    return;
  }
  hang_set_ac(a->hang, a->ac);
  a->state = A_CONNECT;
  a->join_started_ms = uv_now(a->loop);
  if (!here && a->etb == NULL) /* tried while the successor is silent */
    uv_timer_start(&a->status_timer, connect_wait_cb, 5000, 15000);
}

/* The successor tried now did not host within the bound: pass it over and
 * try the next (every node walks the same list in the same order, and the
 * last it reaches is itself). */
static void next_successor(agent_t *a) {
  char why[400];
  if (!ac_wait_refused(a->ac))
    a->fo_unsure = 1;
  if (ac_refused_out(a->ac))
    snprintf(why, sizeof(why), "every connection refused for %.1f s (its agent is "
             "gone: a live one listens once it sees the host lost)",
             refused_limit_ms(a) / 1000.0);
  else if (ac_wait_reason(a->ac, NULL)[0])
    snprintf(why, sizeof(why), "%s", ac_wait_reason(a->ac, NULL));
  else /* connected, then no answer or closed */
    snprintf(why, sizeof(why), "%s", ac_last_error(a->ac));
  ac_close(a->ac, NULL, NULL);
  a->ac = NULL;
  hang_set_ac(a->hang, NULL);
  a->fo_passed = a->fo_idx++;
  move_to_successor(a, why);
}

/* The host's connection was closed by its kernel, or it went silent: stop
 * the workers, then move or wait (failover_stopped). */
static void fail_over(agent_t *a, int silent) {
  int was = a->state;
  a->fo_silent = silent;
  a->fo_started_ms = uv_now(a->loop);
  a->fo_idx = 0;
  a->fo_self_skipped = 0;
  /* This agent stood still just before: the others may have moved on
   * without it, under a successor; its new round needs a majority. */
  a->fo_unsure = stood_still(a);
  lu_strlcpy(a->fo_lost_addr, a->ep_host, sizeof(a->fo_lost_addr));
  a->state = A_FAILOVER;
  early_listen(a); /* before the workers stop: the others may walk here */
  uv_timer_stop(&a->hb_timer);
  uv_timer_stop(&a->status_timer);
  uv_timer_stop(&a->barrier_timer);
  if (was == A_STOP && a->restart_commit != 1)
    return; /* a restart's stop is under way: restart_stopped goes on */
  if (was == A_STOP) {
    /* The workers stopped and the restart's commit runs against the host
     * just lost, where each store call may wait its whole timeout: the
     * failover does not wait for it (it ends on its own). */
    a->restart_commit = 0;
    resume_commit_forget(a->ck);
    failover_stopped(a->wg, a);
    return;
  }
  if (a->ck) {
    if (was == A_RESUME)
      resume_cancel(a->ck);
    else
      resume_commit_stop(a->ck);
  }
  if (a->wg && wk_live(a->wg) > 0)
    wk_stop(a->wg, SIGTERM, (int)a->o->stop_grace_ms, failover_stopped, a);
  else
    failover_stopped(a->wg, a);
}

/* ---- a node left alone rejoins the majority --------------------------------------------------------- */

/* The job runs on under another host: join it, closing this node's server
 * (nobody else is connected to it: they went silent). */
static void join_majority(agent_t *a, int64_t round) {
  ac_t *old = a->ac;
  if (a->hosting && a->round < 0)
    LU_WARN(&a->log, "job %s runs on under %s:%d (round %" PRId64 "), as "
            "its host there left word here: joining it, and closing the "
            "server here", a->o->run_id, a->probe_addr, a->ep_port, round);
  else if (a->hosting)
    LU_WARN(&a->log, "job %s runs on under %s:%d (round %" PRId64 "), "
            "without this node since it was cut off or stopped: joining it, "
            "and closing the server here", a->o->run_id, a->probe_addr,
            a->ep_port, round);
  else
    LU_WARN(&a->log, "job %s runs on under %s:%d (round %" PRId64 "): "
            "joining it", a->o->run_id, a->probe_addr, a->ep_port, round);
  a->state = A_CONNECT; /* the JOIN cancelled below is not an error */
  uv_timer_stop(&a->status_timer);
  a->ac = a->probe;
  a->probe = NULL;
  if (old)
    ac_close(old, NULL, NULL);
  if (a->srv) {
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
  }
  a->hosting = 0;
  a->fo_wait = 0;
  early_close(a);
  a->fo_prev_round = -1; /* a job that runs: joined as any node */
  a->fo_survivors = a->fo_prev_restarts = a->fo_quorum = 0;
  lu_strlcpy(a->ep_host, a->probe_addr, sizeof(a->ep_host));
  lu_strlcpy(a->store_host, a->probe_addr, sizeof(a->store_host));
  hang_set_ac(a->hang, a->ac);
  if (a->ck) {
    resume_free(a->ck);
    a->ck = NULL;
  }
  if (a->o->ckpt_dir[0] && new_resume(a) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    finish(a);
    return;
  }
  on_connected(a->ac, 0, a);
}

/* The key a host left at the lost host's address for an agent started
 * there again: where the job runs now. */
#define MOVED_KEY "launch/moved_to"

static int probe_waiting(const agent_t *a) {
  return a->state == A_JOIN || (a->state == A_FAILOVER && a->fo_wait);
}

/* This node's place among the successors (their count when not one). */
static size_t succ_index(const agent_t *a, const char *addr) {
  size_t i = 0;
  while (i < a->nsucc && strcmp(a->succ_addrs[i], addr))
    i++;
  return i;
}

static void probe_status(ac_t *ac, int status, const proto_msg_t *m,
                         void *arg) {
  agent_t *a = arg;
  msg_status_t st;
  int64_t round;
  int live, join;
  if (ac != a->probe || status != 0 || !probe_waiting(a) || m->nargs < 1 ||
      msg_status_unpack(&m->args[0], &st, NULL, 0) != 0)
    return;
  live = !strcmp(st.state, "running") || !strcmp(st.state, "forming");
  round = st.round;
  msg_status_free(&st);
  if (!live)
    return;
  if (a->probe_lost && a->hosting) {
    if (round < a->round) {
      /* An agent started again at the lost host's address hosts a fresh
       * server: tell it where the job runs. */
      msgpack_packer *pk = ac_begin(ac, PROTO_OP_SET, 2);
      proto_pack_str(pk, MOVED_KEY);
      proto_pack_bytes(pk, a->ep_host, strlen(a->ep_host));
      ac_send(ac, NULL, NULL);
      say(a, "an agent hosts job %s at the lost host's address %s again: "
          "told it that the job runs on here", a->o->run_id, a->probe_addr);
      return;
    }
    /* The old host went on in a later round (the majority stayed with
     * it): join it. In the same round, it waits alone too: it joins us. */
    join = round > a->round;
  } else if (a->hosting) {
    /* Two hosts waiting in the same round: the one earlier in the list
     * of successors (the old host is in none) keeps the job. */
    join = round > a->round ||
           (round == a->round && succ_index(a, a->probe_addr) <
                                     succ_index(a, a->my_addr));
  } else if (a->fo_wait) {
    join = round >= a->round; /* this node waits alone: any host will do */
  } else {
    /* In a new host's round that cannot form: only a later round
     * elsewhere (the others went on there) is worth the move. */
    join = round > a->round;
  }
  /* Others joined this server meanwhile: they would lose it. */
  if (join && a->hosting && rounds_connected_members(a->srv, a->o->run_id) > 1)
    join = 0;
  if (join)
    join_majority(a, round);
}

static void probe_connected(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  if (ac != a->probe || status != 0 || !probe_waiting(a))
    return;
  ac_begin(ac, PROTO_OP_STATUS, 0);
  ac_send(ac, probe_status, a);
}

static void probe_at(agent_t *a, const char *addr, int lost) {
  lu_strlcpy(a->probe_addr, addr, sizeof(a->probe_addr));
  a->probe_lost = lost;
  if (open_client(a, addr, 1000, &a->probe) != 0)
    return;
  if (ac_connect(a->probe, probe_connected) != 0) {
    ac_close(a->probe, NULL, NULL);
    a->probe = NULL;
  }
}

int agent__moved_addr(const char *p, size_t n, char *addr, size_t cap) {
  if (n == 0 || n >= cap)
    return -1;
  memcpy(addr, p, n);
  addr[n] = '\0';
  /* Written by a host of this job: an address or a host name. */
  return strspn(addr, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR"
                      "STUVWXYZ.:-_") == n ? 0 : -1;
}

/* A fresh host (no round yet) reads whether a host of the job left word
 * that the job runs elsewhere: an agent started again at a lost host's
 * address, after the others moved on. */
static void moved_reply(ac_t *ac, int status, const proto_msg_t *m,
                        void *arg) {
  agent_t *a = arg;
  const msgpack_object *items;
  uint32_t cnt;
  const char *p;
  size_t n;
  char addr[INET6_ADDRSTRLEN + 8];
  (void)ac;
  if (status != 0 || a->state != A_JOIN || a->round >= 0 || a->probe ||
      proto_arg_array(m, 0, &items, &cnt) != 0 || cnt != 1 ||
      proto_obj_bytes(&items[0], &p, &n) != 0 || n == 0 || n >= sizeof(addr))
    return;
  if (agent__moved_addr(p, n, addr, sizeof(addr)) != 0) {
    LU_WARN(&a->log, "the key " MOVED_KEY " of job %s holds no address "
            "(%zu bytes): deleted. A host of this job writes it after a "
            "failover; a worker or a tool of the job wrote this one",
            a->o->run_id, n);
    proto_pack_str(ac_begin(a->ac, PROTO_OP_DELETE, 1), MOVED_KEY);
    ac_send(a->ac, NULL, NULL);
    return;
  }
  probe_at(a, addr, 0);
}

static void ask_moved(agent_t *a) {
  msgpack_packer *pk = ac_begin(a->ac, PROTO_OP_MGET, 2);
  msgpack_pack_array(pk, 1);
  proto_pack_str(pk, MOVED_KEY);
  msgpack_pack_int64(pk, 0); /* do not wait */
  ac_send(a->ac, moved_reply, a);
}

/* While this node waits without a round it can form (it hosts a server
 * that wants a majority that went silent, for longer than the silent
 * bound; or it is no majority and hosts nothing), ask the lost host and
 * the last round's successors, one per tick, whether one of them hosts
 * the job now. A node that hosts nothing refuses at once. A fresh host
 * asks its own store whether the job moved. */
static void probe_majority(agent_t *a) {
  size_t slot;
  if (a->probe) {
    ac_close(a->probe, NULL, NULL);
    a->probe = NULL;
  }
  if (a->o->standalone || a->o->backend == CFG_BACKEND_STATIC)
    return;
  if (a->hosting && a->round < 0 && a->state == A_JOIN && a->ac) {
    ask_moved(a);
    return;
  }
  /* Waiting: hosting (or joined to a new host's round) for longer than
   * the silent bound, or attached nowhere. */
  if (a->round < 0 || a->nsucc == 0 ||
      (!a->hosting && !a->fo_wait && a->fo_prev_round < 0) ||
      (!a->fo_wait &&
       uv_now(a->loop) - a->join_started_ms < 3 * (uint64_t)a->o->heartbeat_ms))
    return;
  /* The successors first, then the lost host's address; not this node,
   * nor the host it is joined to. */
  for (size_t tries = 0; tries <= a->nsucc; tries++) {
    const char *addr;
    slot = a->probe_idx++ % (a->nsucc + 1);
    addr = slot == a->nsucc ? a->fo_lost_addr : a->succ_addrs[slot];
    if (addr[0] && strcmp(addr, a->my_addr) &&
        (a->hosting || a->fo_wait || strcmp(addr, a->ep_host))) {
      probe_at(a, addr, slot == a->nsucc);
      return;
    }
  }
}

static void on_lost(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  char why[300];
  int silent, fo;
  if (ac != a->ac)
    return; /* a probe's */
  if (a->state == A_FINISH || a->state == A_CLOSED)
    return;
  if (a->state == A_FAILOVER && a->fo_wait) {
    /* The old host dropped this node or ended: the probes go on. */
    ac_close(a->ac, NULL, NULL);
    a->ac = NULL;
    return;
  }
  fo = can_fail_over(a, status, &silent, why, sizeof(why));
  if (fo == FO_MOVE) {
    LU_WARN(&a->log, "%s; stopping the workers, moving to the next host",
            ac_last_error(a->ac));
    fail_over(a, silent);
    return;
  }
  if (fo == FO_WAIT) {
    /* One line: why this node neither takes over nor ends. */
    LU_WARN(&a->log, "%s; stopping the workers and waiting: %s; asking the "
            "host and the others every %.0f s whether the job runs on, for "
            "up to %.0f s (--rdzv-conf join_timeout)", ac_last_error(a->ac),
            why, probe_every_ms(a) / 1000.0, a->o->join_timeout_ms / 1000.0);
    a->fo_wait = 1;
    fail_over(a, silent);
    return;
  }
  LU_ERR(&a->log, "%s; stopping the workers%s%s%s", ac_last_error(a->ac),
         port_taken_hint(a), why[0] ? "; " : "", why);
  /* the rendezvous is gone: another try may work (docs/exit-codes.md) */
  a->exit_code = LAUNCH_EXIT_RDZV;
  a->finish_ok = 0;
  finish(a);
}

/* A static node other than node 0 waits for node 0 like torchrun's does
 * (--rdzv-conf timeout, 900 s): the runbooks start their nodes by hand, one
 * after another. */
static int static_waiter(const agent_t *a) {
  return a->o->backend == CFG_BACKEND_STATIC && !a->hosting &&
         a->o->node_rank > 0;
}

/* How long to keep trying a server that is not up: read_timeout, as
 * torchrun's store does, within the join timeout; a static node's wait for
 * node 0. */
static int64_t connect_limit_ms(const agent_t *a) {
  if (static_waiter(a))
    return a->o->static_wait_ms;
  return LU_MIN(a->o->join_timeout_ms, a->o->read_timeout_ms);
}

/* While the server cannot be reached: what is tried, why it fails. */
static void connect_wait_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  int attempts;
  const char *why;
  if (a->state != A_CONNECT || a->ac == NULL)
    return;
  why = ac_wait_reason(a->ac, &attempts);
  if (why[0] == '\0')
    return; /* still on its first attempt */
  if (a->fo_prev_round >= 0 && !a->hosting) /* a successor, in the walk */
    say(a, "waiting for the successor %s:%d to host job %s: %s; %d attempts "
           "in %.0f s, passing it over after %.1f s (%.1f s if it refuses "
           "every one)", a->ep_host, a->ep_port,
        a->o->run_id, why, attempts,
        (uv_now(a->loop) - a->join_started_ms) / 1000.0,
        walk_limit_ms(a) / 1000.0, refused_limit_ms(a) / 1000.0);
  else
    say(a, "waiting for the rendezvous server %s:%d of job %s: %s; %d "
           "attempts in %.0f s, giving up after %.0f s (--rdzv-conf %s)",
        a->ep_host, a->ep_port, a->o->run_id, why, attempts,
        (uv_now(a->loop) - a->join_started_ms) / 1000.0,
        connect_limit_ms(a) / 1000.0,
        static_waiter(a) ? "timeout" : "read_timeout");
}

static void on_connected(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  (void)ac;
  uv_timer_stop(&a->status_timer);
  if (status == RDZV_ELIMIT || status == RDZV_EAUTH ||
      status == RDZV_EVERSION) {
    /* The server answered and refused: its reason is the whole story. */
    LU_ERR(&a->log, "%s", ac_last_error(a->ac));
    a->exit_code = LAUNCH_EXIT_RDZV;
    finish(a);
    return;
  }
  /* Timed out; or closed before it answered: a live successor's port
   * (early_listen) closed as it joined another host, so it does not host */
  if ((status == -ETIMEDOUT || status == RDZV_ECLOSED || status == UV_ECONNRESET ||
       status == UV_EPIPE) &&
      a->fo_prev_round >= 0 && !a->hosting && a->etb == NULL && a->fo_idx + 1 < a->nsucc) {
    next_successor(a);
    return;
  }
  if (status == 0 && !a->hosting)
    early_close(a); /* this node joins a host: it will not host */
  if (status != 0) {
    /* One message: what failed, then what to check. */
    if (a->port_taken)
      LU_ERR(&a->log, "%s%s", ac_last_error(a->ac), port_taken_hint(a));
    else
      LU_ERR(&a->log, "%s. The agent that hosts the server is the one whose "
                      "node has the endpoint's address or name (or "
                      "--rdzv-conf is_host=true); start it, or `launch "
                      "server`, and check the address and the port",
             ac_last_error(a->ac));
    a->exit_code = LAUNCH_EXIT_RDZV;
    finish(a);
    return;
  }
  a->hb_due_ms = uv_now(a->loop) + (uint64_t)a->o->heartbeat_ms;
  uv_timer_start(&a->hb_timer, hb_cb, (uint64_t)a->o->heartbeat_ms,
                 (uint64_t)a->o->heartbeat_ms);
  send_join(a);
}

/* ---- the end -------------------------------------------------------------------------------------- */

static void handle_closed(uv_handle_t *h) {
  agent_t *a = h->data;
  a->closing_handles--;
}

static void close_handle(agent_t *a, uv_handle_t *h) {
  if (!uv_is_closing(h)) {
    a->closing_handles++;
    uv_close(h, handle_closed);
  }
}

/* Close every handle; the loop then ends. */
static void close_all(agent_t *a) {
  if (a->state == A_CLOSED)
    return;
  a->state = A_CLOSED;
  close_handle(a, (uv_handle_t *)&a->hb_timer);
  close_handle(a, (uv_handle_t *)&a->status_timer);
  close_handle(a, (uv_handle_t *)&a->barrier_timer);
  close_handle(a, (uv_handle_t *)&a->linger_timer);
  close_handle(a, (uv_handle_t *)&a->met_timer);
  hang_close(a->hang);
  for (int i = 0; i < a->nsigs; i++)
    close_handle(a, (uv_handle_t *)&a->sigs[i]);
  if (a->ac) {
    ac_close(a->ac, NULL, NULL);
    a->ac = NULL;
  }
  if (a->probe) {
    ac_close(a->probe, NULL, NULL);
    a->probe = NULL;
  }
  if (a->srv) {
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
  }
  if (a->wg) {
    wk_group_close(a->wg, NULL, NULL);
    a->wg = NULL;
  }
  resume_free(a->ck);
  a->ck = NULL;
  etb_close(a->etb);
  a->etb = NULL;
}

static void linger_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  /* The hosting agent keeps the server up until the other nodes have
   * their SHUTDOWN (they disconnect), or a few seconds passed. */
  if (a->srv && rounds_connected_members(a->srv, a->o->run_id) > 1 &&
      uv_now(a->loop) - a->join_started_ms < (uint64_t)a->o->close_timeout_ms)
    return;
  close_all(a);
}

static void remove_tree(agent_t *a, const char *path);

/* The run directories (TMPDIR/launch_<id>_<hex>) failed jobs keep do not
 * pile up: those of this user untouched for RUN_DIR_DAYS whose agent is
 * gone (its lock file is not held) are removed, with one line. */
#define RUN_LOCK ".agent.lock"
#define RUN_DIR_DAYS 7
static void prune_run_dirs(agent_t *a) {
  DIR *d = opendir(a->o->tmpdir);
  struct dirent *e;
  time_t old = time(NULL) - RUN_DIR_DAYS * 86400;
  /* an empty one whose agent is gone (killed: it could not remove it) goes
   * at once; a minute covers an agent between its mkdir and its lock */
  time_t settled = time(NULL) - 60;
  int n = 0, nempty = 0;
  if (d == NULL)
    return;
  while ((e = readdir(d)) != NULL) {
    char path[PATH_MAX], lk[PATH_MAX + 16];
    struct stat sb;
    int fd, busy = 0, empty = 0;
    if (strncmp(e->d_name, "launch_", 7) != 0 ||
        (size_t)snprintf(path, sizeof(path), "%s/%s", a->o->tmpdir,
                         e->d_name) >= sizeof(path) ||
        !strcmp(path, a->run_dir) || lstat(path, &sb) != 0 ||
        !S_ISDIR(sb.st_mode) || sb.st_uid != getuid() ||
        sb.st_mtime > settled)
      continue;
    if (sb.st_mtime > old && !(empty = !dir_has_content(path)))
      continue;
    snprintf(lk, sizeof(lk), "%s/" RUN_LOCK, path);
    if ((fd = open(lk, O_RDWR | O_CLOEXEC)) >= 0) {
      busy = flock(fd, LOCK_EX | LOCK_NB) != 0; /* a live agent's */
      close(fd);
    }
    if (!busy) {
      remove_tree(a, path);
      if (empty)
        nempty++;
      else
        n++;
    }
  }
  closedir(d);
  if (n > 0)
    say(a, "removed %d run director%s of failed jobs older than %d days "
           "from %s", n, n == 1 ? "y" : "ies", RUN_DIR_DAYS, a->o->tmpdir);
  if (nempty > 0)
    say(a, "removed %d empty run director%s of agents that are gone from %s",
        nempty, nempty == 1 ? "y" : "ies", a->o->tmpdir);
}

static void remove_tree(agent_t *a, const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return; /* removed already */
  if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    LU_WARN(&a->log, "could not remove %s: %s; remove it by hand", path,
            strerror(errno));
}

/* job_end and summary events, and the summary line. */
static void end_events(agent_t *a) {
  lu_json_t *j;
  double mean = a->nrestarts ? a->downtime_s / a->nrestarts : 0;
  if (a->ev == NULL && (a->nrestarts == 0 || a->o->quiet))
    return;
  if ((j = ev_begin(a->ev, EV_job_end)) != NULL) {
    lu_json_bool(j, "ok", a->finish_ok);
    lu_json_int(j, "exit_code", a->exit_code);
    lu_json_int(j, "round", a->round);
    if (a->end_reason[0])
      lu_json_str(j, "reason", a->end_reason);
    if (a->signaled)
      lu_json_str(j, "stopped_by", sum_signal_name(a->signaled));
    if (a->have_root) {
      lu_json_obj(j, "root_cause");
      ev_failure_fields(j, &a->root);
      lu_json_end_obj(j);
    }
    ev_end(a->ev);
  }
  if ((j = ev_begin(a->ev, EV_summary)) != NULL) {
    lu_json_int(j, "restarts", a->nrestarts);
    lu_json_num(j, "downtime_s", a->downtime_s);
    lu_json_int(j, "steps_redone", a->steps_redone);
    lu_json_num(j, "mean_resume_s", mean);
    if (a->nagree)
      lu_json_num(j, "mean_agreement_s", a->agree_s / a->nagree);
    if (a->committed >= 0)
      lu_json_int(j, "last_checkpoint", a->committed);
    ev_end(a->ev);
  }
  if (!a->o->quiet)
    LU_INFO(&a->log, "job %s summary: %d restart%s, %.1f s down, %" PRId64
            " step%s redone, %.1f s mean resume", a->o->run_id, a->nrestarts,
            a->nrestarts == 1 ? "" : "s", a->downtime_s, a->steps_redone,
            a->steps_redone == 1 ? "" : "s", mean);
}

/* This job in the node's registry (jobreg.h), for `launch status` with no
 * argument: where its server is while it runs, how it ended after. A
 * registry that cannot be written costs the listing only. */
static void reg_update(agent_t *a, int ended) {
  jobreg_t j;
  int rc;
  if (a->reg_path[0] == '\0' && a->round > 0 && !ended)
    return; /* it could not be written at the start */
  memset(&j, 0, sizeof(j));
  lu_strlcpy(j.job, a->o->run_id, sizeof(j.job));
  lu_strlcpy(j.host, a->o->host, sizeof(j.host));
  lu_strlcpy(j.ep_host, a->ep_host, sizeof(j.ep_host));
  j.ep_port = a->ep_port;
  j.pid = (int)getpid();
  j.standalone = a->o->standalone;
  j.hosting = a->hosting;
  j.round = a->round;
  j.restarts = a->nrestarts;
  j.nproc = a->o->nproc;
  j.started = (int64_t)a->started_wall;
  lu_strlcpy(j.run_dir, a->run_dir, sizeof(j.run_dir));
  lu_strlcpy(j.program, a->argv && a->argv[0] ? a->argv[0] : "",
             sizeof(j.program));
  if (ended) {
    j.state = JOBREG_ENDED;
    j.ended = (int64_t)lu_wall_s();
    j.ok = a->finish_ok;
    j.exit_code = a->exit_code;
    lu_strlcpy(j.reason, a->end_reason, sizeof(j.reason));
  }
  if (a->reg_path[0] == '\0' && !ended) {
    /* the first write: forget the node's jobs that ended long ago */
    (void)jobreg_prune();
  }
  rc = jobreg_write(&j, a->reg_path, sizeof(a->reg_path));
  if (rc != 0) {
    if (a->reg_path[0] || a->round == 0)
      LU_DBG(&a->log, LU_DBG_AGENT, "the job registry: %s (launch status "
             "without --rdzv-id will not list this job)", rdzv_strerror(rc));
    a->reg_path[0] = '\0';
  }
}

static void print_end(agent_t *a) {
  end_events(a);
  reg_update(a, 1);
  if (a->finish_ok) {
    say(a, "job %s finished: %s", a->o->run_id,
        a->end_reason[0] ? a->end_reason : "every worker exited 0");
    return;
  }
  if (a->signaled) {
    LU_WARN(&a->log, "stopped by %s", sum_signal_name(a->signaled));
    return;
  }
  if (a->have_root || a->nfails > 0) {
    /* Root cause first (from the server: it may be another node's), then
     * this node's other failures. */
    size_t n = 0;
    sum_failure_t *all = calloc(a->nfails + 1, sizeof(*all));
    if (all == NULL)
      return;
    if (a->have_root)
      all[n++] = a->root;
    for (size_t i = 0; i < a->nfails; i++) {
      const sum_failure_t *f = &a->fails[i];
      if (a->have_root && f->pid == a->root.pid && f->rank == a->root.rank &&
          !strcmp(f->host, a->root.host))
        continue;
      all[n++] = *f;
    }
    fflush(stdout);
    sum_print(stderr, a->o->run_id, all, n, a->restarts_used,
              a->o->max_restarts, a->have_root ? 0 : -1);
    /* User code that hosts its own TCPStore on MASTER_PORT finds launch's
     * server there in agent mode. */
    if (a->o->torch_store == CFG_STORE_AGENT &&
        ((all[0].stderr_tail &&
          strstr(all[0].stderr_tail, "Address already in use")) ||
         (all[0].error_message &&
          strstr(all[0].error_message, "Address already in use"))))
      fprintf(stderr, "launch: hint: MASTER_ADDR:MASTER_PORT is launch's "
                      "server (--torch-store agent); a program that hosts its "
                      "own TCPStore there needs --torch-store rank0\n");
    if (a->root_no_restart && a->restarts_used < a->o->max_restarts)
      fprintf(stderr, "launch: not restarting: exit code %d is one of "
                      "--no-restart-exit-codes (a failure that would repeat, "
                      "as train_gpt's 3, training diverged); fix the cause, "
                      "or give --no-restart-exit-codes none to restart "
                      "anyway\n", a->root.exit_code);
    free(all);
    if (a->run_dir_is_temp) {
      if (dir_has_content(a->run_dir))
        fprintf(stderr, "launch: logs and error files of the attempts are "
                        "in %s (kept after a failure: remove it when done)\n",
                a->run_dir);
      else
        remove_tree(a, a->run_dir); /* nothing to look at: no pile-up */
    }
  } else if (a->end_reason[0]) {
    LU_ERR(&a->log, "job %s failed: %s", a->o->run_id, a->end_reason);
  }
}

static void last_commit_done(void *arg) {
  finished_stopping(NULL, arg);
}

static void finished_stopping(wk_group_t *g, void *arg) {
  agent_t *a = arg;
  (void)g;
  /* What the workers completed in their last seconds (a trainer that saves
   * on SIGTERM, or a step finished since the last 2-s commit) is committed
   * before the agent goes: left without a manifest, the next start would
   * roll the step back. The stop watchdog bounds it. */
  if (a->ck && !a->last_commit) {
    a->last_commit = 1;
    resume_commit_final(a->ck, last_commit_done, a);
    return;
  }
  print_end(a);
  if (a->hosting && a->srv) {
    a->join_started_ms = uv_now(a->loop);
    uv_timer_start(&a->linger_timer, linger_cb, 0, 20);
    return;
  }
  close_all(a);
}

static void finish(agent_t *a) {
  int stopping = a->state == A_STOP;
  if (a->state == A_FINISH || a->state == A_CLOSED)
    return;
  a->state = A_FINISH;
  uv_timer_stop(&a->status_timer);
  uv_timer_stop(&a->barrier_timer);
  /* A restart's stop already gives the workers their grace (a preempted
   * job: the nodes' SIGTERMs arrive one after the other): it ends in
   * restart_stopped, which finishes. */
  if (stopping)
    return;
  if (a->wg && wk_live(a->wg) > 0)
    wk_stop(a->wg, a->signaled ? a->signaled : SIGTERM,
            (int)a->o->stop_grace_ms, finished_stopping, a);
  else
    finished_stopping(a->wg, a);
}

/* ---- signals ---------------------------------------------------------------------------------------- */

/* A stop that does not end: what the loop waits for can be a checkpoint
 * scan on a pool thread blocked in the file system (a hung NFS mount), which
 * nothing interrupts. By then the workers had their grace and SIGKILL (and
 * die with the agent anyway: PR_SET_PDEATHSIG), so the agent goes. */
typedef struct stop_dog_s {
  uint64_t ms;
  int sig;
  int code; /* the exit status: 128 + sig, or 1 under --exit-code torchrun */
  lu_log_t log;
} stop_dog_t;

static void *stop_dog_main(void *arg) {
  stop_dog_t *d = arg;
  struct timespec ts = {(time_t)(d->ms / 1000), (long)(d->ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
  LU_ERR(&d->log, "still running %.1f s after %s (--stop-timeout, then "
         "close_timeout): something does not return, e.g. a checkpoint scan "
         "on a hung file system; exiting without waiting for it",
         (double)d->ms / 1000.0, sum_signal_name(d->sig));
  _exit(d->code);
  return NULL;
}

static void start_stop_dog(agent_t *a, int sig) {
  stop_dog_t *d = malloc(sizeof(*d)); /* the thread's until the exit */
  pthread_attr_t at;
  pthread_t t;
  if (d == NULL)
    return;
  d->ms = (uint64_t)a->o->stop_grace_ms + (uint64_t)a->o->close_timeout_ms +
          2000;
  d->sig = sig;
  d->code = a->o->exit_code_mode == CFG_EXIT_TORCHRUN ? 1 : 128 + sig;
  d->log = a->log;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, stop_dog_main, d) != 0)
    free(d);
  pthread_attr_destroy(&at);
}

static void on_signal(uv_signal_t *h, int sig) {
  agent_t *a = h->data;
  if (sig == SIGUSR1 || sig == SIGUSR2) {
    /* Forwarded, nothing else: workers checkpoint on these (Slurm). */
    if (a->wg)
      wk_signal(a->wg, sig);
    return;
  }
  if (sig == SIGINT && ++a->sigint_count > 1) {
    LU_WARN(&a->log, "second SIGINT: killing the workers");
    if (a->wg)
      wk_stop(a->wg, SIGKILL, 0, NULL, NULL);
    return;
  }
  if (a->signaled)
    return;
  a->signaled = sig;
  a->exit_code = 128 + sig;
  a->finish_ok = 0;
  LU_WARN(&a->log, "received %s: forwarding it to the workers and stopping",
          sum_signal_name(sig));
  start_stop_dog(a, sig);
  if (a->ac && a->state != A_FINISH) {
    msg_leave_t l;
    snprintf(l.reason, sizeof(l.reason), "agent received %s",
             sum_signal_name(sig));
    msg_leave_pack(ac_begin(a->ac, PROTO_OP_LEAVE, 1), &l);
    ac_send(a->ac, NULL, NULL);
  }
  finish(a);
}

/* ---- start --------------------------------------------------------------------------------------------- */

static int read_token(agent_t *a) {
  char err[1024];
  int rc;
  if (a->o->token_file[0] == '\0')
    return 0;
  rc = lu_read_token(a->o->token_file, &a->token, &a->token_len, err,
                     sizeof(err));
  if (rc != 0)
    LU_ERR(&a->log, "%s", err);
  return rc;
}

/* Before the first round: the binding plan, the NCCL profile and its lint,
 * and (for several nodes) this node's fingerprint. Blocking, once. */
static int prepare_node(agent_t *a) {
  cfg_t *o = a->o;
  char err[1024];
  launch_round_t r;
  env_finding_t *f = NULL;
  env_t *e0 = NULL;
  int nf = 0, errors = 0, rc;
  rc = launch_node_open(o, o->max_nodes > 1 && o->ngpus > 0 ? LAUNCH_NODE_TOPO : 0,
                        NULL, &a->log, &a->node, err, sizeof(err));
  if (rc != 0) {
    LU_ERR(&a->log, "%s", err);
    return rc;
  }
  /* Lint what rank 0 would get, against this node. */
  launch_round_guess(o, "", &r);
  if ((rc = launch_rank_env(o, &a->node, &r, 0, NULL, &e0)) != 0)
    return rc;
  if (o->lint != CFG_LINT_OFF && launch_lint(&a->node, e0, &f, &nf) == 0) {
    for (int i = 0; i < nf; i++) {
      int lvl = f[i].sev == ENV_SEV_ERROR ? LU_LOG_ERROR
                : f[i].sev == ENV_SEV_WARN ? LU_LOG_WARN : LU_LOG_INFO;
      errors += f[i].sev == ENV_SEV_ERROR;
      if (lvl == LU_LOG_INFO && o->quiet)
        continue;
      LU_LOG_AT(&a->log, lvl, "NCCL environment: %s=%s (%s): %s%s%s",
                f[i].var, f[i].value, f[i].where[0] ? f[i].where : "?",
                f[i].why, f[i].fix[0] ? " Fix: " : "", f[i].fix);
    }
    free(f);
    if (errors && o->lint == CFG_LINT_ERROR) {
      LU_ERR(&a->log, "%d error(s) in the NCCL environment: fix them, or run "
                      "with --lint warn to start anyway", errors);
      env_free(e0);
      return RDZV_EINVAL;
    }
  }
  if (o->max_nodes > 1) {
    /* What every node must share: NCCL environment, versions, GPUs, the
     * program. Compared with node 0's at the rendezvous. */
    env_fp_t *fp = NULL;
    size_t len;
    rc = launch_node_fingerprint(&a->node, e0, a->argv, NULL, &fp, err,
                                 sizeof(err));
    if (rc == 0)
      rc = env_fp_serialize(fp, &a->fp_text, &len);
    env_fp_free(fp);
    if (rc != 0)
      LU_ERR(&a->log, "node fingerprint: %s", err);
  }
  env_free(e0);
  return rc;
}

static int new_hang(agent_t *a) {
  hang_config_t hc;
  hang_hooks_t hooks = {hang_running, hang_found, a};
  memset(&hc, 0, sizeof(hc));
  hc.timeout_ms = a->o->hang_timeout_ms;
  hc.signal = a->o->hang_signal;
  hc.grace_ms = 3000;
  hc.host = a->o->host;
  hc.log = &a->log;
  hc.ac = a->ac;
  hc.wg = a->wg;
  hc.nproc = a->o->nproc;
  return hang_new(a->loop, &hc, &hooks, &a->hang);
}

/* The hosted server's events (node_joined, node_left, node_refused of
 * every node, limit_hit) into this agent's event log: the server runs on
 * this loop (one thread), so the log is written by one thread. */
static void on_srv_event(void *arg, const srv_event_t *ev) {
  agent_t *a = arg;
  ev_server_cb(a->ev, ev);
}

/* Create the server on ip:port and listen. RET 0; or an error with a->srv
 * NULL (it could not be made), or the listen error with a->srv still to
 * close (the caller says why). */
static int start_server(agent_t *a, const char *ip, int port) {
  cfg_t *o = a->o;
  srv_config_t cfg = SRV_CONFIG_INIT;
  int rc;
  /* LAUNCH_SERVER_*'s debug knobs (config.c reads them for the agent) */
  cfg.trace_us = o->srv.trace_us;
  cfg.turn_us = o->srv.turn_us;
  cfg.pass_us = o->srv.pass_us;
  cfg.lock_plain = o->srv.lock_plain;
  cfg.lock_spins = o->srv.lock_spins;
  cfg.big_cache_mb = o->srv.big_cache_mb;
  cfg.host = ip;
  cfg.port = port;
  /* Connections may hold a quarter of --max-memory at 16 KiB each: the
   * default admits 8,192. Room for every agent of the largest round and
   * every worker's store client (a cap, not an allocation). */
  cfg.max_memory = LU_MAX(cfg.max_memory,
                          ((size_t)o->max_nodes * (size_t)(1 + o->nproc) + 64) *
                              (64u << 10));
  cfg.token = a->token;
  cfg.token_len = a->token_len;
  {
    /* LAUNCH_HANDSHAKE_TIMEOUT: the hosted server's --handshake-timeout
     * (tests make it short) */
    const char *v = sched_getenv(o->environ, "LAUNCH_HANDSHAKE_TIMEOUT");
    int64_t ms;
    if (v && lu_parse_duration_ms(v, &ms) == 0 && ms > 0 && ms < INT32_MAX)
      cfg.handshake_ms = (uint32_t)ms;
  }
  cfg.tcpstore_job = o->run_id;
  cfg.tcpstore_allow = o->tcpstore_allow[0] ? o->tcpstore_allow : NULL;
  if (o->tls_ca[0] && !o->tls_cert[0]) {
    LU_ERR(&a->log, "hosting the rendezvous server with TLS needs this "
           "node's certificate: give --tls-cert and --tls-key "
           "(docs/protocol.md#tls)");
    return RDZV_EINVAL; /* a->srv stays NULL */
  }
  /* With a certificate of its own, the node requires one of every client
   * (mutual TLS), signed by --tls-ca. */
  cfg.tls_cert = o->tls_cert[0] ? o->tls_cert : NULL;
  cfg.tls_key = o->tls_key[0] ? o->tls_key : NULL;
  cfg.tls_ca = o->tls_cert[0] && o->tls_ca[0] ? o->tls_ca : NULL;
  /* The agent says what happens; the server it hosts only warns. */
  a->srv_log = a->log;
  if (a->srv_log.level > LU_LOG_WARN && !a->srv_log.debug)
    a->srv_log.level = LU_LOG_WARN;
  cfg.log = &a->srv_log;
  cfg.on_event = on_srv_event;
  cfg.event_arg = a;
  a->srv_max_memory = cfg.max_memory;
  rc = srv_new(a->loop, &cfg, &a->srv);
  if (rc != 0) {
    a->srv = NULL;
    return rc;
  }
  rounds_install(a->srv);
  if (a->early_fd >= 0 && port == a->early_port && strcmp(ip, a->my_addr) == 0) {
    rc = srv_listen_fd(a->srv, a->early_fd); /* the server's from here */
    a->early_fd = -1;
  } else {
    rc = srv_listen(a->srv);
  }
  return rc;
}

/* Host the server here? Then start it. RET 0 or an error. */
static int maybe_host(agent_t *a) {
  cfg_t *o = a->o;
  char ip[INET6_ADDRSTRLEN] = "";
  char who[128] = "";
  int want, rc, pid = 0, is_launch = 0;
  if (o->standalone) {
    want = 1;
    lu_strlcpy(ip, "127.0.0.1", sizeof(ip));
  } else if (o->is_host >= 0) {
    want = o->is_host;
  } else if (o->backend == CFG_BACKEND_STATIC) {
    want = o->node_rank == 0;
  } else {
    want = 0;
  }
  if (!o->standalone) {
    if (launch_resolve_ip(o->endpoint_host, ip, sizeof(ip)) != 0) {
      if (want) {
        LU_ERR(&a->log, "the rendezvous endpoint '%s' does not resolve",
               o->endpoint_host);
        return RDZV_ERESOLVE;
      }
      return 0; /* the client retries resolving until the join timeout */
    }
    if (o->is_host < 0 && o->backend != CFG_BACKEND_STATIC) {
      /* Every address of this node counts (a multi-NIC node whose
       * --local-addr is another network's still hosts), and its host
       * names. On loopback every process of the machine is local: there
       * --local-addr picks the host (several agents of a test). */
      int named = launch_is_my_name(o->endpoint_host, o->host);
      if (strncmp(ip, "127.", 4) == 0 || !strcmp(ip, "::1"))
        want = named ? 1
                     : o->local_addr[0] == '\0' ||
                           strcmp(o->local_addr, ip) == 0 ||
                           strcmp(o->local_addr, o->endpoint_host) == 0;
      else
        want = named || launch_ip_is_local(ip);
      /* this node's name resolves to loopback here (Debian's 127.0.1.1),
       * to its address elsewhere: listen on every address */
      if (named && (strncmp(ip, "127.", 4) == 0 || !strcmp(ip, "::1")))
        lu_strlcpy(ip, "0.0.0.0", sizeof(ip));
    }
  }
  if (!want)
    return 0;
  rc = start_server(a, ip, o->endpoint_port);
  if (rc != 0 && a->srv == NULL)
    return rc;
  if (rc == UV_EADDRINUSE) {
    pid = launch_port_holder(o->endpoint_port, who, sizeof(who));
    is_launch = pid > 0 && strncmp(who, "launch ", 7) == 0;
  }
  if (rc == UV_EADDRINUSE && !o->standalone && o->is_host != 1 &&
      (pid == 0 || is_launch)) {
    /* Somebody listens there already (a standalone launch server, or the
     * agent of another job on this node): join it. When it cannot be
     * known who, a failure to reach it says the port was taken. */
    say(a, "a server already listens on %s:%d%s%s: joining it", ip,
        o->endpoint_port, pid ? ", " : "", who);
    a->port_taken = pid == 0;
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
    return 0;
  }
  if (rc == UV_EADDRINUSE) {
    LU_ERR(&a->log, "cannot host the rendezvous server on %s:%d: Address "
           "already in use, %s holds the port%s; stop it, or give the job "
           "another port (--rdzv-endpoint HOST:PORT, or --master-port with "
           "the static backend)", ip, o->endpoint_port,
           pid ? who : "another program (`ss -ltnp` shows which)",
           is_launch ? " (another launch: --standalone and is_host=true do "
                       "not join it)" : "");
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
    return rc;
  }
  if (rc != 0) {
    LU_ERR(&a->log, "cannot host the rendezvous server on %s:%d: %s", ip,
           o->endpoint_port, rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc));
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
    return rc;
  }
  a->hosting = 1;
  a->ep_port = srv_port(a->srv);
  lu_strlcpy(a->ep_host, ip, sizeof(a->ep_host));
  if (o->standalone)
    lu_strlcpy(a->store_host, "127.0.0.1", sizeof(a->store_host));
  return 0;
}

/* The connection to the server at ep_host:ep_port. RET 0 or an error. */
static int open_client(agent_t *a, const char *host, int64_t connect_ms,
                       ac_t **out) {
  cfg_t *o = a->o;
  ac_config_t acfg;
  memset(&acfg, 0, sizeof(acfg));
  acfg.host = host;
  acfg.port = a->ep_port;
  acfg.local_addr = o->local_addr;
  acfg.job = o->run_id;
  acfg.role = "agent";
  acfg.token = a->token;
  acfg.token_len = a->token_len;
  acfg.connect_timeout_ms = (int)LU_MIN(connect_ms, INT32_MAX);
  acfg.log = &a->log;
  /* A silent server is noticed within the bound that drops a silent
   * member: three heartbeats (or read_timeout when shorter). */
  acfg.reply_timeout_ms =
      (int)LU_MIN(o->read_timeout_ms, 3 * o->heartbeat_ms);
  acfg.tls_ca = o->tls_ca[0] ? o->tls_ca : NULL;
  acfg.tls_cert = o->tls_cert[0] ? o->tls_cert : NULL;
  acfg.tls_key = o->tls_key[0] ? o->tls_key : NULL;
  return ac_new(a->loop, &acfg, on_push, on_lost, a, out);
}

static int new_client(agent_t *a, int64_t connect_ms) {
  return open_client(a, a->ep_host, connect_ms, &a->ac);
}

/* ---- --rdzv-backend etcd (docs/rendezvous.md#etcd-backend) ---------------------------------------- */

/* The first election's result: host here, or join the elected host. */
static void etcd_first_host(agent_t *a, const char *addr, int port, int here) {
  int rc;
  lu_strlcpy(a->ep_host, addr, sizeof(a->ep_host));
  lu_strlcpy(a->store_host, addr, sizeof(a->store_host));
  a->ep_port = port;
  if (here) {
    rc = start_server(a, addr, port);
    if (rc != 0) {
      LU_ERR(&a->log, "elected by etcd to host job %s, but cannot host the "
             "rendezvous server on %s:%d: %s (--rdzv-conf store_port sets "
             "the port)", a->o->run_id, addr, port,
             rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc));
      a->exit_code = LAUNCH_EXIT_RDZV;
      finish(a);
      return;
    }
    a->hosting = 1;
  }
  say(a, "etcd (%s): job %s is hosted by %s:%d%s", etb_members(a->etb),
      a->o->run_id, addr, port, here ? ", this node" : "");
  if ((a->o->ckpt_dir[0] && new_resume(a) != 0) ||
      new_client(a, connect_limit_ms(a)) != 0 ||
      ac_connect(a->ac, on_connected) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    finish(a);
    return;
  }
  hang_set_ac(a->hang, a->ac);
  a->join_started_ms = uv_now(a->loop);
}

/* Leave the server now (the workers may still be stopping). */
static void close_client(agent_t *a) {
  if (a->ac) {
    ac_close(a->ac, NULL, NULL);
    a->ac = NULL;
  }
  hang_set_ac(a->hang, NULL);
}

/* Back from a fence, the host unchanged: join it again as any node. */
static void etcd_rejoin(agent_t *a) {
  say(a, "job %s is still hosted by %s:%d: joining it again", a->o->run_id,
      a->ep_host, a->ep_port);
  a->etcd_fenced = 0;
  a->fo_prev_round = -1;
  if (new_client(a, connect_limit_ms(a)) != 0 ||
      ac_connect(a->ac, on_connected) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    finish(a);
    return;
  }
  hang_set_ac(a->hang, a->ac);
  a->state = A_CONNECT;
  a->join_started_ms = uv_now(a->loop);
}

static void etcd_event(void *arg, unsigned ev) {
  agent_t *a = arg;
  char addr[256], name[256], err[1024];
  int port, here;
  if (a->state == A_FINISH || a->state == A_CLOSED)
    return;
  if (ev & ETB_FAILED) {
    LU_ERR(&a->log, "%s", etb_error(a->etb, err, sizeof(err)));
    a->exit_code = LAUNCH_EXIT_RDZV;
    a->finish_ok = 0;
    finish(a);
    return;
  }
  if (ev & ETB_DEPOSED) {
    /* No split brain: another agent may host the job now. */
    LU_ERR(&a->log, "this node no longer holds job %s's host key in etcd "
           "(its lease expired: it was cut off from etcd, or stopped); "
           "stopping its workers and leaving the job, which runs on under "
           "the host etcd elects", a->o->run_id);
    a->exit_code = LAUNCH_EXIT_RDZV;
    a->finish_ok = 0;
    finish(a);
    return;
  }
  if ((ev & ETB_HOST_CHANGED) && !a->hosting &&
      (a->state == A_JOIN || a->state == A_RESUME || a->state == A_RUN ||
       a->state == A_STOP) && a->round >= 0) {
    LU_WARN(&a->log, "etcd: the host %s:%d of job %s lost its key (its "
            "lease expired, or it left); stopping the workers, electing a "
            "new host", a->ep_host, a->ep_port, a->o->run_id);
    fail_over(a, 1);
    close_client(a); /* after: a JOIN it cancels is no error now */
    return;
  }
  if ((ev & ETB_HOST_CHANGED) && a->state == A_CONNECT && !a->hosting &&
      a->ac) {
    /* the host etcd named went before this node reached it (a host that
     * died before the job formed): elect again */
    say(a, "etcd: the host %s:%d of job %s lost its key before this node "
        "reached it: electing again", a->ep_host, a->ep_port, a->o->run_id);
    close_client(a);
    etb_elect(a->etb, ETB_ELECT_AFTER);
  }
  if ((ev & ETB_CUT_OFF) && !a->etcd_fenced &&
      (a->state == A_JOIN || a->state == A_RESUME || a->state == A_RUN ||
       a->state == A_STOP)) {
    /* No split brain: etcd may have let this node's lease go, and
     * another node may host the job by now. */
    LU_WARN(&a->log, "this node's etcd lease was not renewed for %.0f s "
            "(etcd unreachable): stopping the workers, as another node may "
            "take over; they start again when etcd is back",
            (double)a->o->etcd_ttl_ms / 1000.0);
    a->etcd_fenced = 1;
    fail_over(a, 1);
    close_client(a);
  }
  if ((ev & ETB_ROUND_OK) && a->state == A_JOIN && a->etcd_gated >= 0 &&
      etb_round_ok(a->etb) >= a->etcd_gated) {
    a->etcd_gated = -1;
    begin_round(a);
    return;
  }
  if ((ev & ETB_RESTORED) && a->etcd_fenced) {
    say(a, "etcd is back and this node's lease lives: asking who hosts job "
        "%s", a->o->run_id);
    etb_elect(a->etb, ETB_ELECT_ANY);
  }
  if (!(ev & ETB_ELECTED) ||
      etb_host(a->etb, addr, sizeof(addr), &port, name, sizeof(name),
               &here) != 0)
    return;
  if (a->state == A_FAILOVER && a->wg && wk_live(a->wg) > 0) {
    /* the workers still stop: again */
    etb_elect(a->etb, ETB_ELECT_AGAIN);
    return;
  }
  if (a->state == A_FAILOVER && a->etcd_fenced &&
      ((here && a->srv) || (!here && !strcmp(addr, a->ep_host) &&
                            port == a->ep_port))) {
    etcd_rejoin(a);
  } else if (a->state == A_FAILOVER) {
    a->etcd_fenced = 0;
    move_to(a, addr, name, port, here, NULL);
  }
  else if (a->state == A_CONNECT && a->ac == NULL && !a->hosting)
    etcd_first_host(a, addr, port, here);
}

/* This node's address for the others (--local-addr, else its name's). */
static int etcd_begin(agent_t *a) {
  cfg_t *o = a->o;
  char ip[INET6_ADDRSTRLEN] = "", err[1024] = "";
  int rc;
  if (o->local_addr[0])
    lu_strlcpy(ip, o->local_addr, sizeof(ip));
  else if (launch_resolve_ip(o->host, ip, sizeof(ip)) != 0) {
    LU_ERR(&a->log, "--rdzv-backend etcd: this node's name %s does not "
           "resolve: give --local-addr (the address the other nodes reach "
           "this one at)", o->host);
    return RDZV_EINVAL;
  }
  rc = etb_start(a->loop, o, &a->log, ip, o->store_port, etcd_event, a,
                 &a->etb, err, sizeof(err));
  if (rc != 0) {
    LU_ERR(&a->log, "%s", err);
    return rc;
  }
  say(a, "asking etcd at %s who hosts job %s", o->endpoint_raw, o->run_id);
  return 0;
}

int agent_run(cfg_t *o) {
  agent_t *a = calloc(1, sizeof(*a));
  uv_loop_t loop;
  int rc;
  static const int all_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
                                 SIGUSR2};
  if (a == NULL)
    return 1;
  a->o = o;
  a->loop = &loop;
  a->round = -1;
  a->fo_prev_round = -1;
  a->early_fd = -1;
  a->etcd_gated = -1;
  a->run_lock = -1;
  a->exit_code = 1;
  uv_loop_init(&loop);
  signal(SIGPIPE, SIG_IGN);
  /* A file-size limit (ulimit -f) that a log passes is a failed write,
   * which loses that log, not the agent (workers get the default back). */
  signal(SIGXFSZ, SIG_IGN);
  lu_log_init(&a->log, "launch");
  lu_log_set_who(&a->log, "launch %s", a->o->host);
  if (o->no_log_time)
    a->log.time = 0;
  if (o->warning[0])
    LU_WARN(&a->log, "%s", o->warning);
  /* Settings accepted for torchrun's command lines that mean nothing
   * here: one line each. */
  for (const char *p = o->notes, *e; *p; p = e + 1) {
    if ((e = strchr(p, '\n')) == NULL)
      break;
    say(a, "note: %.*s", (int)(e - p), p);
  }
  lu_strlcpy(a->ep_host, o->endpoint_host, sizeof(a->ep_host));
  lu_strlcpy(a->store_host, o->endpoint_host, sizeof(a->store_host));
  a->ep_port = o->endpoint_port;
  uv_timer_init(&loop, &a->hb_timer);
  uv_timer_init(&loop, &a->status_timer);
  uv_timer_init(&loop, &a->barrier_timer);
  uv_timer_init(&loop, &a->linger_timer);
  uv_timer_init(&loop, &a->met_timer);
  a->met_timer.data = a;
  a->hb_timer.data = a->status_timer.data = a->barrier_timer.data =
      a->linger_timer.data = a;
  for (size_t i = 0; i < LU_ARRAY_SIZE(all_sigs); i++) {
    if (!(o->signals_mask & (1u << all_sigs[i])))
      continue;
    uv_signal_init(&loop, &a->sigs[a->nsigs]);
    a->sigs[a->nsigs].data = a;
    uv_signal_start(&a->sigs[a->nsigs], on_signal, all_sigs[i]);
    a->nsigs++;
  }
  /* docs/exit-codes.md: a configuration this node refuses (token file,
   * profile, lint) is 2, a server it cannot host 75, the rest 70 */
  if ((rc = launch_worker_argv(o, &a->argv)) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    goto out;
  }
  a->python = o->prog_mode == CFG_PROG_MODULE ||
              (strcmp(a->argv[0], o->python) == 0 && a->argv[1] &&
               strcmp(a->argv[1], "-u") == 0);
  /* A Python script that is not there fails the same way on every
   * attempt (as a program that cannot be executed): say so before
   * spawning, not --max-restarts times. */
  if (o->prog_mode != CFG_PROG_MODULE && strcmp(a->argv[0], o->python) == 0 &&
      a->argv[1] && !strcmp(a->argv[1], "-u") && a->argv[2] &&
      access(a->argv[2], R_OK) != 0) {
    char cwd[PATH_MAX];
    int e = errno;
    LU_ERR(&a->log, "cannot open the Python script '%s': %s (looked in %s); "
                    "not starting the workers: check the script's path",
           a->argv[2], strerror(e),
           getcwd(cwd, sizeof(cwd)) ? cwd : "the current directory");
    a->exit_code = e == ENOENT || e == ENOTDIR ? 127 : 126;
    goto out;
  }
  if ((rc = read_token(a)) != 0 || (rc = prepare_node(a)) != 0) {
    a->exit_code = rc == RDZV_ENOMEM ? LAUNCH_EXIT_INTERNAL : LAUNCH_EXIT_USAGE;
    goto out;
  }
  if ((rc = wk_group_new(&loop, &a->wg)) != 0) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    goto out;
  }
  wk_set_log(a->wg, &a->log);
  if (o->backend != CFG_BACKEND_ETCD && (rc = maybe_host(a)) != 0) {
    a->exit_code = LAUNCH_EXIT_RDZV;
    goto out;
  }
  /* Where the workers' log and error files go. */
  {
    uint8_t r[3];
    char hex[7];
    int w;
    lu_random(r, sizeof(r));
    lu_hex(r, sizeof(r), hex);
    a->run_dir_is_temp = o->log_dir[0] == '\0';
    /* the id cut to 200 bytes: with "launch_" and the random part the
     * name must fit a file name (255 bytes), and the id may be 255 */
    w = snprintf(a->run_dir, sizeof(a->run_dir), "%s/%s%.200s_%s",
                 o->log_dir[0] ? o->log_dir : o->tmpdir,
                 o->log_dir[0] ? "" : "launch_", o->run_id, hex);
    rc = w < 0 || (size_t)w >= sizeof(a->run_dir) ? -ENAMETOOLONG : 0;
    if (rc != 0 || (rc = lu_mkdir_p(a->run_dir)) != 0) {
      LU_ERR(&a->log, "cannot create %s: %s", a->run_dir, rdzv_strerror(rc));
      a->exit_code = LAUNCH_EXIT_INTERNAL; /* docs/exit-codes.md */
      goto out;
    }
    if (a->run_dir_is_temp) {
      char lk[PATH_MAX + 16];
      snprintf(lk, sizeof(lk), "%s/" RUN_LOCK, a->run_dir);
      a->run_lock = open(lk, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
      if (a->run_lock >= 0)
        flock(a->run_lock, LOCK_EX | LOCK_NB);
      prune_run_dirs(a);
    }
  }
  if (o->torch_store == CFG_STORE_RANK0)
    a->my_master_port = free_port(o->local_addr);
  a->committed = -1;
  a->ck_bytes = -1;
  a->steps_before = -1;
  a->score = calloc((size_t)o->nproc + 1, sizeof(double));
  a->slow_for = calloc((size_t)o->nproc + 1, sizeof(int));
  a->flagged = calloc((size_t)o->nproc + 1, 1);
  if (a->score == NULL || a->slow_for == NULL || a->flagged == NULL) {
    a->exit_code = LAUNCH_EXIT_INTERNAL;
    goto out;
  }
  if ((rc = ev_open(o->event_log, o->event_handler == 1, o->run_id, o->host,
                    &a->ev)) != 0) {
    LU_ERR(&a->log, "cannot open the event log %s: %s (check --event-log)",
           o->event_log, rdzv_strerror(rc));
    a->exit_code = LAUNCH_EXIT_USAGE;
    goto out;
  } else {
    lu_json_t *j = ev_begin(a->ev, EV_job_start);
    if (j) {
      lu_json_int(j, "nproc", o->nproc);
      lu_json_int(j, "min_nodes", o->min_nodes);
      lu_json_int(j, "max_nodes", o->max_nodes);
      lu_json_int(j, "max_restarts", o->max_restarts);
      lu_json_str(j, "endpoint", o->endpoint_host);
      lu_json_int(j, "port", a->ep_port);
      lu_json_bool(j, "hosting", a->hosting);
      if (o->ckpt_dir[0])
        lu_json_str(j, "ckpt_dir", o->ckpt_dir);
      lu_json_str(j, "program", a->argv[0]);
      lu_json_int(j, "pid", getpid());
      ev_end(a->ev);
    }
  }
  a->started_wall = lu_wall_s();
  reg_update(a, 0);
  if (o->backend != CFG_BACKEND_ETCD && o->ckpt_dir[0] &&
      (rc = new_resume(a)) != 0) {
    a->exit_code = 1;
    goto out;
  }
  if (o->metrics_port >= 0) {
    if ((rc = met_start(o->metrics_addr, o->metrics_port, o->host,
                        &a->met)) != 0) {
      LU_ERR(&a->log, "cannot serve metrics on %s:%d: %s%s",
             o->metrics_addr[0] ? o->metrics_addr : "*", o->metrics_port,
             rdzv_strerror(rc), rc == RDZV_ENOTSUP
                 ? " (launch was built without libevent: install libevent-dev, then rebuild)" : "");
      a->exit_code = LAUNCH_EXIT_USAGE;
      goto out;
    }
    /* Its GPU sampler is a child of ours, not a worker's orphan. */
    wk_set_own_children(a->wg, own_child, a);
    if (o->ckpt_dir[0])
      met_set_ckpt_dir(a->met, o->ckpt_dir); /* none: no disk series */
    LU_INFO(&a->log, "metrics of job %s on http://%s:%d/metrics", o->run_id,
        o->metrics_addr[0] ? o->metrics_addr : o->host, met_port(a->met));
    if ((a->page = page_new()) == NULL) {
      a->exit_code = LAUNCH_EXIT_INTERNAL;
      goto out;
    }
    render_metrics(a);
  }
  if (a->met || a->ev)
    uv_timer_start(&a->met_timer, met_cb, 1000, 1000);
  if (o->backend == CFG_BACKEND_ETCD) {
    /* etcd elects the host first (etcd_event) */
    if (((o->hang_timeout_ms > 0 || a->ev || a->met) &&
         (rc = new_hang(a)) != 0) ||
        (rc = etcd_begin(a)) != 0) {
      a->exit_code = rc == RDZV_ENOTSUP || rc == RDZV_EINVAL
                         ? LAUNCH_EXIT_USAGE : 1;
      goto out;
    }
  } else if ((rc = new_client(a, connect_limit_ms(a))) != 0 ||
      ((o->hang_timeout_ms > 0 || a->ev || a->met) &&
       (rc = new_hang(a)) != 0) ||
      (rc = ac_connect(a->ac, on_connected)) != 0) {
    a->exit_code = 1;
    goto out;
  }
  a->state = A_CONNECT;
  a->join_started_ms = uv_now(&loop);
  /* The first word within seconds, then every half minute. */
  uv_timer_start(&a->status_timer, connect_wait_cb, 2000, 30000);
  uv_run(&loop, UV_RUN_DEFAULT);
  goto done;
out:
  close_all(a);
  uv_run(&loop, UV_RUN_DEFAULT);
done:
  rc = a->exit_code;
  if (uv_loop_close(&loop) != 0)
    LU_WARN(&a->log, "event loop closed with live handles");
  free_round(a);
  free_succ(a);
  clear_failures(a);
  if (a->have_root)
    sum_failure_free(&a->root);
  free_rank_argv(a);
  launch_argv_free(a->argv);
  met_stop(a->met);
  page_free(a->page);
  free(a->score);
  free(a->slow_for);
  free(a->flagged);
  hang_free(a->hang);
  early_close(a);
  if (a->run_lock >= 0)
    close(a->run_lock);
  /* Nothing to look at after a success, nor in an empty run directory
   * after a failure: the temporary logs go. */
  if (a->run_dir_is_temp && a->run_dir[0] &&
      (rc == 0 || !dir_has_content(a->run_dir)))
    remove_tree(a, a->run_dir);
  ev_close(a->ev);
  launch_node_close(&a->node);
  free(a->fp_text);
  free(a->token);
  free(a);
  return rc;
}
