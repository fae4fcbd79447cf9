/* tasks.c - `launch --from-tasks PROGRAM`: the scheduler started every
 * worker (srun --ntasks-per-node=GPUS), so there is no agent and no
 * rendezvous: this task's place is the scheduler's (SLURM_PROCID, ...),
 * its environment the one an agent would give it (env_build_rank: torchrun's
 * contract, the NCCL profile, the lock), its binding the plan's for its
 * local rank, and then it becomes PROGRAM. Task 0 leaves a child behind
 * that hosts the job's store at MASTER_ADDR:MASTER_PORT (the first node of
 * the step), as the agent's server does, until every worker has left it.
 * docs/schedulers.md. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "launch.h"
#include "server.h"

/* ---- task 0's store ---------------------------------------------------------------- */

typedef struct store_child_s {
  uv_loop_t loop;
  uv_timer_t tick;
  uv_signal_t term, intr;
  srv_t *srv;
  pid_t parent;
  uint64_t orphaned_at; /* when PROGRAM (the parent) ended; 0: running */
  uint64_t linger_ms;
} store_child_t;

static void store_closed(void *arg) {
  store_child_t *s = arg;
  uv_close((uv_handle_t *)&s->tick, NULL);
  uv_close((uv_handle_t *)&s->term, NULL);
  uv_close((uv_handle_t *)&s->intr, NULL);
}

static void store_stop(store_child_t *s) {
  srv_t *srv = s->srv;
  if (srv == NULL)
    return;
  s->srv = NULL;
  srv_close(srv, store_closed, s);
}

/* Once PROGRAM has ended, the store stays while workers of other tasks
 * still use it (their last barrier), at most close_timeout. */
static void store_tick(uv_timer_t *t) {
  store_child_t *s = t->data;
  srv_stats_t st;
  if (s->srv == NULL)
    return;
  if (s->orphaned_at == 0) {
    if (getppid() == s->parent)
      return;
    s->orphaned_at = uv_now(&s->loop);
  }
  srv_get_stats(s->srv, &st);
  if (st.conns_open == 0 || uv_now(&s->loop) - s->orphaned_at >= s->linger_ms)
    store_stop(s);
}

static void store_signal(uv_signal_t *h, int sig) {
  (void)sig;
  store_stop(h->data); /* the scheduler ends the step */
}

/* In the child: serve until PROGRAM and its peers are done. Reports the
 * listen result (0 or an error) on ready_fd first. Never returns. */
static void store_run(const cfg_t *c, const char *ip, const void *token,
                      size_t token_len, int ready_fd, pid_t parent) {
  static store_child_t s;
  srv_config_t cfg = SRV_CONFIG_INIT;
  lu_log_t log;
  int rc, null = open("/dev/null", O_RDWR | O_CLOEXEC);
  /* srun forwards the task's output until every holder closes it */
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
  }
  lu_log_init(&log, "launch");
  lu_log_set_who(&log, "launch %s store", c->host);
  if (log.level > LU_LOG_WARN && !log.debug)
    log.level = LU_LOG_WARN;
  memset(&s, 0, sizeof(s));
  s.parent = parent;
  s.linger_ms = (uint64_t)c->close_timeout_ms;
  uv_loop_init(&s.loop);
  cfg.host = ip;
  cfg.port = c->endpoint_port;
  cfg.token = token;
  cfg.token_len = token_len;
  cfg.tcpstore_job = c->run_id;
  cfg.tcpstore_allow = c->tcpstore_allow[0] ? c->tcpstore_allow : NULL;
  cfg.tls_cert = c->tls_cert[0] ? c->tls_cert : NULL;
  cfg.tls_key = c->tls_key[0] ? c->tls_key : NULL;
  cfg.tls_ca = c->tls_cert[0] && c->tls_ca[0] ? c->tls_ca : NULL;
  cfg.log = &log;
  if ((rc = srv_new(&s.loop, &cfg, &s.srv)) == 0 &&
      (rc = srv_listen(s.srv)) != 0) {
    srv_close(s.srv, NULL, NULL);
    s.srv = NULL;
  }
  if (write(ready_fd, &rc, sizeof(rc)) != (ssize_t)sizeof(rc) || rc != 0) {
    uv_run(&s.loop, UV_RUN_DEFAULT);
    _exit(1);
  }
  close(ready_fd);
  uv_timer_init(&s.loop, &s.tick);
  uv_signal_init(&s.loop, &s.term);
  uv_signal_init(&s.loop, &s.intr);
  s.tick.data = s.term.data = s.intr.data = &s;
  uv_timer_start(&s.tick, store_tick, 100, 100);
  uv_signal_start(&s.term, store_signal, SIGTERM);
  uv_signal_start(&s.intr, store_signal, SIGINT);
  uv_run(&s.loop, UV_RUN_DEFAULT);
  uv_loop_close(&s.loop);
  _exit(0); /* no atexit handlers of the parent's image */
}

/* Fork the store's child, wait until it listens. RET 0 or an error. */
static int host_store(const cfg_t *c, lu_log_t *log) {
  char ip[64], err[512], *token = NULL;
  size_t token_len = 0;
  int fds[2], rc = 0;
  ssize_t got;
  pid_t pid, me = getpid();
  if (launch_resolve_ip(c->endpoint_host, ip, sizeof(ip)) != 0) {
    LU_ERR(log, "the store's host '%s' (the first node of the step) does "
           "not resolve", c->endpoint_host);
    return RDZV_ERESOLVE;
  }
  if (!launch_ip_is_local(ip)) {
    LU_ERR(log, "task 0 runs on %s, but the store's host %s (%s) is another "
           "node: give --rdzv-endpoint HOST:PORT of this node or of a "
           "launch server", c->host, c->endpoint_host, ip);
    return RDZV_EINVAL;
  }
  if (c->token_file[0] &&
      lu_read_token(c->token_file, &token, &token_len, err, sizeof(err)) != 0) {
    LU_ERR(log, "%s", err);
    return RDZV_EINVAL;
  }
  if (c->tls_ca[0] && !c->tls_cert[0]) {
    LU_ERR(log, "hosting the store with TLS needs this node's certificate: "
           "give --tls-cert and --tls-key (docs/protocol.md#tls)");
    free(token);
    return RDZV_EINVAL;
  }
  if (pipe2(fds, O_CLOEXEC) != 0) {
    free(token);
    return -errno;
  }
  if ((pid = fork()) < 0) {
    rc = -errno;
  } else if (pid == 0) {
    close(fds[0]);
    store_run(c, ip, token, token_len, fds[1], me);
  } else {
    close(fds[1]);
    fds[1] = -1;
    do
      got = read(fds[0], &rc, sizeof(rc));
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sizeof(rc))
      rc = RDZV_ECLOSED; /* the child died before it listened */
  }
  if (fds[1] >= 0)
    close(fds[1]);
  close(fds[0]);
  if (token) {
    memset(token, 0, token_len);
    free(token);
  }
  if (rc == UV_EADDRINUSE) {
    /* A launch server listens there already: the workers use it. */
    LU_WARN(log, "a server already listens on %s:%d: the workers use it as "
            "their store", ip, c->endpoint_port);
    return 0;
  }
  if (rc != 0)
    LU_ERR(log, "cannot host the job's store on %s:%d: %s", ip,
           c->endpoint_port, rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc));
  return rc;
}

/* ---- the task ------------------------------------------------------------------------ */

/* Lint what this task gets; errors stop it (--lint error). Local rank 0
 * speaks for the node. RET 0 or RDZV_EINVAL. */
static int lint_task(const cfg_t *c, const launch_node_t *node, const env_t *e,
                     lu_log_t *log) {
  env_finding_t *f = NULL;
  int nf = 0, errors = 0;
  if (c->lint == CFG_LINT_OFF || launch_lint(node, e, &f, &nf) != 0)
    return 0;
  for (int i = 0; i < nf; i++) {
    errors += f[i].sev == ENV_SEV_ERROR;
    if (c->task_local_rank == 0 && f[i].sev != ENV_SEV_INFO)
      LU_LOG_AT(log, f[i].sev == ENV_SEV_ERROR ? LU_LOG_ERROR : LU_LOG_WARN,
                "NCCL environment: %s=%s (%s): %s%s%s", f[i].var, f[i].value,
                f[i].where[0] ? f[i].where : "?", f[i].why,
                f[i].fix[0] ? " Fix: " : "", f[i].fix);
  }
  free(f);
  if (errors && c->lint == CFG_LINT_ERROR) {
    if (c->task_local_rank == 0)
      LU_ERR(log, "%d error(s) in the NCCL environment: fix them, or run "
             "with --lint warn to start anyway", errors);
    return RDZV_EINVAL;
  }
  return 0;
}

int launch_from_tasks(cfg_t *c) {
  lu_log_t log;
  launch_node_t node;
  launch_round_t r;
  env_t *e = NULL;
  char **argv = NULL, **envp = NULL, err[1024], dir[PATH_MAX + 16];
  int rc, code = 2;
  lu_log_init(&log, "launch");
  lu_log_set_who(&log, "launch %s task %d", c->host, c->task_rank);
  if (c->no_log_time)
    log.time = 0;
  rc = launch_node_open(c, 0, NULL, c->quiet || c->task_local_rank ? NULL : &log,
                        &node, err, sizeof(err));
  if (rc != 0) {
    LU_ERR(&log, "%s", err);
    goto out;
  }
  /* Where torchrun's error file goes: a file beside this name, one per
   * rank (launch_rank_env). No folder: this process becomes PROGRAM, and
   * none would be left to remove it after the job. */
  snprintf(dir, sizeof(dir), "%.2000s/launch_%.200s",
           c->log_dir[0] ? c->log_dir : c->tmpdir, c->run_id);
  launch_round_guess(c, dir, &r);
  if ((rc = launch_rank_env(c, &node, &r, c->task_local_rank,
                            c->task_local_rank ? NULL : &log, &e)) != 0 ||
      (rc = lint_task(c, &node, e, &log)) != 0)
    goto out;
  if ((rc = launch_worker_argv(c, &argv)) != 0 ||
      (envp = env_envp(e)) == NULL) {
    code = 70;
    goto out;
  }
  /* The job's store: the scheduler's endpoint, hosted by task 0 unless
   * rank 0 of PROGRAM hosts its own (--torch-store rank0). */
  if (c->task_rank == 0 && c->torch_store == CFG_STORE_AGENT &&
      (c->sched_endpoint || c->backend == CFG_BACKEND_STATIC) &&
      host_store(c, &log) != 0) {
    code = 75;
    goto out;
  }
  if (node.plan) {
    const aff_binding_t *b = aff_plan_rank(node.plan, c->task_local_rank);
    if (c->report_bindings) {
      char line[512];
      aff_binding_format(node.plan, node.topo, c->task_local_rank, line,
                         sizeof(line));
      LU_INFO(&log, "rank %d: %s", c->task_rank, line);
    }
    if (!node.report_only)
      aff_apply_child(b, 2);
  }
  fflush(NULL);
  execvpe(argv[0], argv, envp);
  rc = errno;
  LU_ERR(&log, "cannot execute '%s': %s", argv[0], strerror(rc));
  code = rc == ENOENT ? 127 : 126;
out:
  launch_argv_free(argv);
  env_free(e);
  launch_node_close(&node);
  return code;
}
