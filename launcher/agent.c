/* agent.c - the per-node agent's state machine, on one libuv loop:
 *
 *   connect -> join -> run workers -> (report) -> restart: stop, join ...
 *                                              -> shutdown: stop, summary, exit
 *
 * Everything is event-driven: worker exits arrive through SIGCHLD, restarts
 * and the end of the job are pushed by the server. */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "aclient.h"
#include "aff.h"
#include "agent.h"
#include "env.h"
#include "launch.h"
#include "lu.h"
#include "rdv.h"
#include "server.h"
#include "summary.h"
#include "workers.h"

extern char **environ;

enum {
  A_CONNECT = 0, /* connecting to the rendezvous server */
  A_JOIN,        /* JOIN sent, waiting for the round */
  A_RUN,         /* workers running */
  A_REPORTED,    /* this node's result reported; waiting for the others */
  A_STOP,        /* stopping workers for a restart */
  A_FINISH,      /* the job ended: stopping, printing, closing */
  A_CLOSED
};

typedef struct envb_s {
  char **v;
  size_t n, cap;
} envb_t;

typedef struct agent_s {
  uv_loop_t *loop;
  cli_opts_t *o;
  lu_log_t log, srv_log;
  char host[256];
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
  int64_t gen;
  int node_rank, nnodes, world_size, base_rank, failures;
  int master_port;     /* rank0 store mode: node 0's port */
  int my_master_port;  /* the port this node offers if it becomes node 0 */
  char node0_addr[INET6_ADDRSTRLEN + 8];
  char tcpstore_job[256];
  uint64_t join_started_ms;
  /* node: binding plan, NCCL profile, fingerprint */
  aff_topo_t *topo;
  aff_policy_t *pol;
  aff_plan_t *plan;
  prof_t *prof;
  char *fp_text;
  /* workers */
  wk_group_t *wg;
  char **argv;
  envb_t *envs;     /* the contract + launch variables of each rank */
  env_t **renv;     /* each rank's complete environment */
  char **prefixes;
  char run_dir[PATH_MAX];
  char attempt_dir[PATH_MAX];
  int run_dir_is_temp;
  sum_failure_t *fails; /* failures of this node in this generation */
  size_t nfails;
  int exited; /* workers of this generation that exited */
  /* the end */
  int exit_code;
  int finish_ok;
  sum_failure_t root;
  int have_root;
  char end_reason[1024];
  int restarts_used;
  /* timers and signals */
  uv_timer_t hb_timer, status_timer, barrier_timer, linger_timer;
  uv_signal_t sigs[8];
  int nsigs;
  int signaled;  /* the signal that is stopping us, 0 if none */
  int sigint_count;
  int closing_handles;
} agent_t;

/* ---- environment building -------------------------------------------------------------- */

static int envb_set(envb_t *e, const char *k, const char *v) {
  size_t kl = strlen(k);
  char *kv = malloc(kl + strlen(v) + 2);
  if (kv == NULL)
    return RDZV_ENOMEM;
  sprintf(kv, "%s=%s", k, v);
  for (size_t i = 0; i < e->n; i++)
    if (strncmp(e->v[i], k, kl) == 0 && e->v[i][kl] == '=') {
      free(e->v[i]);
      e->v[i] = kv;
      return 0;
    }
  if (e->n + 2 > e->cap) {
    size_t nc = e->cap ? e->cap * 2 : 64;
    char **nv = realloc(e->v, nc * sizeof(*nv));
    if (nv == NULL) {
      free(kv);
      return RDZV_ENOMEM;
    }
    e->v = nv;
    e->cap = nc;
  }
  e->v[e->n++] = kv;
  e->v[e->n] = NULL;
  return 0;
}

static int envb_seti(envb_t *e, const char *k, long long v) {
  char b[32];
  snprintf(b, sizeof(b), "%lld", v);
  return envb_set(e, k, b);
}

static void envb_free(envb_t *e) {
  for (size_t i = 0; i < e->n; i++)
    free(e->v[i]);
  free(e->v);
  memset(e, 0, sizeof(*e));
}

/* ---- small helpers --------------------------------------------------------------------------- */

static void say(agent_t *a, const char *fmt, ...) LU_PRINTF(2, 3);
static void say(agent_t *a, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  if (a->o->quiet)
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_INFO(&a->log, "%s", msg);
}

static void finish(agent_t *a);
static void send_join(agent_t *a);

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

static int mkdirs(const char *path) {
  char tmp[PATH_MAX];
  size_t n = lu_strlcpy(tmp, path, sizeof(tmp));
  if (n >= sizeof(tmp))
    return -ENAMETOOLONG;
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -errno;
      *p = '/';
    }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return -errno;
  return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

/* Expand ${host} ${rank} ${local_rank} ${role_name} ${node_rank}. */
static void expand_prefix(const agent_t *a, int local_rank, char *out,
                          size_t cap) {
  const char *t = a->o->line_prefix;
  size_t used = 0;
  out[0] = '\0';
  while (*t && used + 1 < cap) {
    char val[300];
    const char *name = NULL;
    size_t nl = 0;
    if (t[0] == '$' && t[1] == '{') {
      const char *end = strchr(t, '}');
      if (end) {
        name = t + 2;
        nl = (size_t)(end - name);
      }
    }
    val[0] = '\0';
    if (name && nl == 4 && !strncmp(name, "host", 4))
      lu_strlcpy(val, a->host, sizeof(val));
    else if (name && nl == 4 && !strncmp(name, "rank", 4))
      snprintf(val, sizeof(val), "%d", a->base_rank + local_rank);
    else if (name && nl == 10 && !strncmp(name, "local_rank", 10))
      snprintf(val, sizeof(val), "%d", local_rank);
    else if (name && nl == 9 && !strncmp(name, "role_name", 9))
      lu_strlcpy(val, a->o->role, sizeof(val));
    else if (name && nl == 9 && !strncmp(name, "node_rank", 9))
      snprintf(val, sizeof(val), "%d", a->node_rank);
    else
      name = NULL;
    if (name) {
      int w = snprintf(out + used, cap - used, "%s", val);
      used += w > 0 ? LU_MIN((size_t)w, cap - used - 1) : 0;
      t = name + nl + 1;
    } else {
      out[used++] = *t++;
      out[used] = '\0';
    }
  }
}

/* ---- workers ------------------------------------------------------------------------------------- */

static void free_round(agent_t *a) {
  for (int i = 0; a->envs && i < a->o->nproc; i++)
    envb_free(&a->envs[i]);
  free(a->envs);
  a->envs = NULL;
  for (int i = 0; a->renv && i < a->o->nproc; i++)
    env_free(a->renv[i]);
  free(a->renv);
  a->renv = NULL;
  for (int i = 0; a->prefixes && i < a->o->nproc; i++)
    free(a->prefixes[i]);
  free(a->prefixes);
  a->prefixes = NULL;
}

static void clear_failures(agent_t *a) {
  for (size_t i = 0; i < a->nfails; i++)
    sum_failure_free(&a->fails[i]);
  free(a->fails);
  a->fails = NULL;
  a->nfails = 0;
}

/* The worker command: python for .py (PYTHON_EXEC wins), else direct. */
static int build_argv(agent_t *a) {
  cli_opts_t *o = a->o;
  const char *py = getenv("PYTHON_EXEC");
  int python, k = 0;
  size_t len;
  if (py == NULL || *py == '\0')
    py = "python3";
  len = strlen(o->prog_argv[0]);
  python = o->prog_mode == CLI_PROG_MODULE || o->prog_mode == CLI_PROG_RUN_PATH ||
           (o->prog_mode == CLI_PROG_AUTO && len > 3 &&
            strcmp(o->prog_argv[0] + len - 3, ".py") == 0);
  a->argv = calloc((size_t)o->prog_argc + 4, sizeof(char *));
  if (a->argv == NULL)
    return RDZV_ENOMEM;
  if (python) {
    a->argv[k++] = strdup(py);
    a->argv[k++] = strdup("-u");
    if (o->prog_mode == CLI_PROG_MODULE)
      a->argv[k++] = strdup("-m");
  }
  for (int i = 0; i < o->prog_argc; i++)
    a->argv[k++] = strdup(o->prog_argv[i]);
  for (int i = 0; i < k; i++)
    if (a->argv[i] == NULL)
      return RDZV_ENOMEM;
  return 0;
}

/* Build every local rank's environment: the agent's own, then torchrun's
 * contract and launch's variables (with the rank's binding), then the
 * locked NCCL profile, then the infrastructure lock (env_build_rank). */
static int build_envs(agent_t *a) {
  cli_opts_t *o = a->o;
  char master_addr[300], ep[320], buf[PATH_MAX + 64];
  int master_port;
  int omp_unset = getenv("OMP_NUM_THREADS") == NULL;
  free_round(a);
  a->envs = calloc((size_t)o->nproc, sizeof(*a->envs));
  a->renv = calloc((size_t)o->nproc, sizeof(*a->renv));
  a->prefixes = calloc((size_t)o->nproc, sizeof(char *));
  if (a->envs == NULL || a->renv == NULL || a->prefixes == NULL)
    return RDZV_ENOMEM;
  if (o->torch_store == CLI_STORE_RANK0) {
    lu_strlcpy(master_addr, a->node0_addr, sizeof(master_addr));
    master_port = a->master_port;
  } else {
    lu_strlcpy(master_addr, a->store_host, sizeof(master_addr));
    master_port = a->ep_port;
  }
  snprintf(ep, sizeof(ep), strchr(a->store_host, ':') ? "[%s]:%d" : "%s:%d",
           a->store_host, a->ep_port);
  if (omp_unset && o->nproc > 1 && a->gen == 0)
    LU_WARN(&a->log, "setting OMP_NUM_THREADS=1 for each worker, to avoid "
                     "overloading the node; tune it for your program");
  for (int i = 0; i < o->nproc; i++) {
    envb_t *e = &a->envs[i];
    env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
    char pre[512];
    int rc = 0;
    /* torchrun's contract (reference/torchrun.md section 2) */
    rc |= envb_seti(e, "LOCAL_RANK", i);
    rc |= envb_seti(e, "RANK", a->base_rank + i);
    rc |= envb_seti(e, "GROUP_RANK", a->node_rank);
    rc |= envb_seti(e, "ROLE_RANK", a->base_rank + i);
    rc |= envb_set(e, "ROLE_NAME", o->role);
    rc |= envb_seti(e, "LOCAL_WORLD_SIZE", o->nproc);
    rc |= envb_seti(e, "WORLD_SIZE", a->world_size);
    rc |= envb_seti(e, "GROUP_WORLD_SIZE", a->nnodes);
    rc |= envb_seti(e, "ROLE_WORLD_SIZE", a->world_size);
    rc |= envb_set(e, "MASTER_ADDR", master_addr);
    rc |= envb_seti(e, "MASTER_PORT", master_port);
    rc |= envb_seti(e, "TORCHELASTIC_RESTART_COUNT", a->gen);
    rc |= envb_seti(e, "TORCHELASTIC_MAX_RESTARTS", o->max_restarts);
    rc |= envb_set(e, "TORCHELASTIC_RUN_ID", o->run_id);
    rc |= envb_set(e, "TORCHELASTIC_USE_AGENT_STORE",
                   o->torch_store == CLI_STORE_AGENT ? "True" : "False");
    snprintf(buf, sizeof(buf), "%s/%d/error.json", a->attempt_dir, i);
    rc |= envb_set(e, "TORCHELASTIC_ERROR_FILE", buf);
    if (getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL)
      rc |= envb_set(e, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    if (o->torch_store == CLI_STORE_RANK0 &&
        getenv("NCCL_ASYNC_ERROR_HANDLING") == NULL)
      /* PyTorch < 2.2 reads the old name; rank0 mode is for those. */
      rc |= envb_set(e, "NCCL_ASYNC_ERROR_HANDLING", "1");
    if (omp_unset && o->nproc > 1)
      rc |= envb_set(e, "OMP_NUM_THREADS", "1");
    rc |= envb_set(e, "TORCHELASTIC_SIGNALS_TO_HANDLE", o->signals_spec);
    /* launch's own */
    rc |= envb_set(e, "LAUNCH_RDZV_ENDPOINT", ep);
    rc |= envb_set(e, "LAUNCH_RDZV_ID", o->run_id);
    if (o->token_file[0])
      rc |= envb_set(e, "LAUNCH_RDZV_TOKEN_FILE", o->token_file);
    if (o->tls_ca[0])
      rc |= envb_set(e, "LAUNCH_RDZV_TLS_CA", o->tls_ca);
    if (o->tls_cert[0])
      rc |= envb_set(e, "LAUNCH_RDZV_TLS_CERT", o->tls_cert);
    if (o->tls_key[0])
      rc |= envb_set(e, "LAUNCH_RDZV_TLS_KEY", o->tls_key);
    rc |= envb_seti(e, "LAUNCH_ROUND", a->gen);
    rc |= envb_seti(e, "LAUNCH_NODE_RANK", a->node_rank);
    rc |= envb_seti(e, "LAUNCH_NNODES", a->nnodes);
    rc |= envb_set(e, "LAUNCH_HOSTNAME", a->host);
    rc |= envb_set(e, "LAUNCH_ATTEMPT_DIR", a->attempt_dir);
    if (rc != 0)
      return RDZV_ENOMEM;
    ro.base = environ;
    ro.launch = (const char *const *)e->v;
    ro.launch2 = a->plan ? aff_binding_envv(aff_plan_rank(a->plan, i)) : NULL;
    ro.profile = a->prof;
    ro.allow_override = o->allow_env_override;
    /* Every change the profile makes is logged once: rank 0, round 0. */
    ro.log = (i == 0 && a->gen == 0 && !o->quiet) ? &a->log : NULL;
    if ((rc = env_build_rank(&ro, &a->renv[i])) != 0)
      return rc;
    expand_prefix(a, i, pre, sizeof(pre));
    if ((a->prefixes[i] = strdup(pre)) == NULL)
      return RDZV_ENOMEM;
  }
  return 0;
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

static void on_worker_exit(wk_group_t *g, const wk_exit_t *ex, void *arg);

static int start_workers(agent_t *a) {
  cli_opts_t *o = a->o;
  wk_spec_t spec;
  char **envp[1024];
  int rc;
  if ((size_t)snprintf(a->attempt_dir, sizeof(a->attempt_dir),
                       "%s/attempt_%" PRId64, a->run_dir, a->gen) >=
      sizeof(a->attempt_dir)) {
    LU_ERR(&a->log, "log directory path too long: %s", a->run_dir);
    return -ENAMETOOLONG;
  }
  for (int i = 0; i < o->nproc; i++) {
    char d[PATH_MAX + 16];
    snprintf(d, sizeof(d), "%s/%d", a->attempt_dir, i);
    if ((rc = mkdirs(d)) != 0) {
      LU_ERR(&a->log, "cannot create %s: %s (check --log-dir)", d,
             rdzv_strerror(rc));
      return rc;
    }
  }
  if ((rc = build_envs(a)) != 0)
    return rc;
  memset(&spec, 0, sizeof(spec));
  spec.size = sizeof(spec);
  spec.nproc = o->nproc;
  spec.argv = a->argv;
  for (int i = 0; i < o->nproc; i++)
    if ((envp[i] = env_envp(a->renv[i])) == NULL)
      return RDZV_ENOMEM;
  if (a->plan) {
    spec.pre_exec = apply_binding;
    spec.pre_exec_arg = a->plan;
    if (o->report_bindings && a->gen == 0)
      for (int i = 0; i < o->nproc; i++) {
        char line[512];
        aff_binding_format(a->plan, a->topo, i, line, sizeof(line));
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
  a->exited = 0;
  clear_failures(a);
  rc = wk_start(a->wg, &spec, on_worker_exit, a);
  if (rc != 0)
    LU_ERR(&a->log, "cannot start the workers: %s", rdzv_strerror(rc));
  /* issue #11 (topo helper): say once how workers are kept together. */
  if (rc == 0 && a->gen == 0 && !o->quiet) {
    const char *what;
    wk_containment(a->wg, &what);
    LU_INFO(&a->log, "%s", what);
  }
  return rc;
}

/* ---- reports to the server ------------------------------------------------------------------------ */

static void pack_failure(msgpack_packer *pk, const agent_t *a,
                         const sum_failure_t *f) {
  msgpack_pack_map(pk, 13);
  proto_pack_str(pk, "gen");
  msgpack_pack_int64(pk, a->gen);
  proto_pack_str(pk, "ok");
  msgpack_pack_false(pk);
  proto_pack_str(pk, "host");
  proto_pack_str(pk, f->host);
  proto_pack_str(pk, "rank");
  msgpack_pack_int64(pk, f->rank);
  proto_pack_str(pk, "local_rank");
  msgpack_pack_int64(pk, f->local_rank);
  proto_pack_str(pk, "node_rank");
  msgpack_pack_int64(pk, f->node_rank);
  proto_pack_str(pk, "pid");
  msgpack_pack_int64(pk, f->pid);
  proto_pack_str(pk, "exit_code");
  msgpack_pack_int64(pk, f->exit_code);
  proto_pack_str(pk, "signal");
  msgpack_pack_int64(pk, f->signal);
  proto_pack_str(pk, "time");
  msgpack_pack_double(pk, f->wall_s);
  proto_pack_str(pk, "tail");
  proto_pack_str(pk, f->stderr_tail ? f->stderr_tail : "");
  proto_pack_str(pk, "error");
  proto_pack_str(pk, f->error_message ? f->error_message : "");
  proto_pack_str(pk, "attempt_dir");
  proto_pack_str(pk, a->attempt_dir);
}

static void report(agent_t *a, const sum_failure_t *f) {
  msgpack_packer *pk = ac_begin(a->ac, PROTO_OP_REPORT, 1);
  if (f) {
    pack_failure(pk, a, f);
  } else {
    msgpack_pack_map(pk, 2);
    proto_pack_str(pk, "gen");
    msgpack_pack_int64(pk, a->gen);
    proto_pack_str(pk, "ok");
    msgpack_pack_true(pk);
  }
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

static void on_worker_exit(wk_group_t *g, const wk_exit_t *ex, void *arg) {
  agent_t *a = arg;
  (void)g;
  a->exited++;
  if (a->state != A_RUN && a->state != A_REPORTED)
    return; /* stopping: exits are expected */
  /* issue #11 (topo helper): exec failure -> stop, no restart. A program
   * that cannot be executed fails the same way on every attempt: one line,
   * leave the rendezvous, exit 127 (not found) or 126 (not executable). */
  if (ex->exec_errno) {
    int nf = ex->exec_errno == ENOENT || ex->exec_errno == ENOTDIR;
    snprintf(a->end_reason, sizeof(a->end_reason),
             "cannot execute '%s': %s; not restarting (check the program's "
             "path and permissions)", a->argv[0], strerror(ex->exec_errno));
    a->exit_code = nf ? 127 : 126;
    a->finish_ok = 0;
    if (a->ac) {
      msgpack_packer *pk = ac_begin(a->ac, PROTO_OP_LEAVE, 1);
      proto_pack_str(pk, a->end_reason);
      ac_send(a->ac, NULL, NULL);
    }
    finish(a);
    return;
  }
  if (ex->exit_code != 0) {
    sum_failure_t f, *nf;
    char path[PATH_MAX + 32];
    memset(&f, 0, sizeof(f));
    f.wall_s = ex->wall_s;
    lu_strlcpy(f.host, a->host, sizeof(f.host));
    f.rank = a->base_rank + ex->local_rank;
    f.local_rank = ex->local_rank;
    f.node_rank = a->node_rank;
    f.pid = ex->pid;
    f.exit_code = ex->exit_code;
    f.signal = ex->signal;
    f.stderr_tail = strdup(wk_tail(a->wg, ex->local_rank));
    snprintf(path, sizeof(path), "%s/%d/error.json", a->attempt_dir,
             ex->local_rank);
    sum_read_error_file(path, &f.error_message);
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
    if (a->state == A_RUN) {
      /* The first failure here: the server decides restart or end. */
      a->state = A_REPORTED;
      if (a->nfails > 0)
        report(a, &a->fails[a->nfails - 1]);
    }
    return;
  }
  if (a->state == A_RUN && a->exited == a->o->nproc && wk_live(a->wg) == 0) {
    a->state = A_REPORTED;
    report(a, NULL);
    if (!a->hosting)
      uv_timer_start(&a->barrier_timer, barrier_cb,
                     (uint64_t)a->o->exit_barrier_ms, 0);
  }
}

/* ---- rendezvous ------------------------------------------------------------------------------------ */

static void status_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  const msgpack_object *members, *ex, *map;
  char joined[1024] = "", missing[1024] = "";
  size_t used = 0, mu = 0;
  int n = 0;
  (void)ac;
  if (status != 0 || a->state != A_JOIN || m->nargs < 1)
    return;
  map = &m->args[0];
  members = proto_map_get(map, "members");
  ex = proto_map_get(map, "expected");
  for (uint32_t i = 0; members && members->type == MSGPACK_OBJECT_ARRAY &&
                       i < members->via.array.size; i++) {
    const msgpack_object *mm = &members->via.array.ptr[i];
    char h[256], st[32];
    proto_map_str(mm, "host", h, sizeof(h));
    proto_map_str(mm, "state", st, sizeof(st));
    if (strcmp(st, "joining") != 0)
      continue;
    n++;
    if (used < sizeof(joined)) {
      int w = snprintf(joined + used, sizeof(joined) - used, "%s%s",
                       used ? ", " : "", h);
      if (w > 0)
        used += (size_t)w;
    }
  }
  /* The expected hosts that have not joined. */
  for (uint32_t j = 0; ex && ex->type == MSGPACK_OBJECT_ARRAY &&
                       j < ex->via.array.size; j++) {
    const char *h;
    size_t hl;
    int found = 0;
    if (proto_obj_bytes(&ex->via.array.ptr[j], &h, &hl) != 0)
      continue;
    for (uint32_t i = 0; members && members->type == MSGPACK_OBJECT_ARRAY &&
                         i < members->via.array.size && !found; i++) {
      char mh[256];
      proto_map_str(&members->via.array.ptr[i], "host", mh, sizeof(mh));
      found = strlen(mh) == hl && memcmp(mh, h, hl) == 0;
    }
    if (!found && mu < sizeof(missing)) {
      int w = snprintf(missing + mu, sizeof(missing) - mu, "%s%.*s",
                       mu ? ", " : "", (int)hl, h);
      if (w > 0)
        mu += (size_t)w;
    }
  }
  say(a, "waiting for nodes of job %s: %d joined of %d..%d (%s), %.0f s%s%s",
      a->o->run_id, n, (int)proto_map_i64(map, "min", 0),
      (int)proto_map_i64(map, "max", 0), joined[0] ? joined : "none",
      (uv_now(a->loop) - a->join_started_ms) / 1000.0,
      missing[0] ? "; missing: " : "", missing);
}

static void status_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  if (a->state != A_JOIN)
    return;
  ac_begin(a->ac, PROTO_OP_STATUS, 0);
  ac_send(a->ac, status_reply, a);
}

static void hb_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  if (a->ac == NULL || a->state == A_FINISH || a->state == A_CLOSED)
    return;
  ac_begin(a->ac, PROTO_OP_HEARTBEAT, 0);
  ac_send(a->ac, NULL, NULL);
}

static void join_reply(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  const msgpack_object *r;
  char *s;
  (void)ac;
  uv_timer_stop(&a->status_timer);
  if (a->state != A_JOIN)
    return;
  if (status != 0) {
    if (status != RDZV_ECANCELED && status != RDZV_ECLOSED)
      LU_ERR(&a->log, "cannot join job %s: %s", a->o->run_id,
             ac_last_error(a->ac));
    a->exit_code = 1;
    a->finish_ok = 0;
    a->end_reason[0] = '\0';
    finish(a);
    return;
  }
  r = &m->args[0];
  a->gen = proto_map_i64(r, "round", 0);
  a->node_rank = (int)proto_map_i64(r, "node_rank", 0);
  a->nnodes = (int)proto_map_i64(r, "nnodes", 1);
  a->world_size = (int)proto_map_i64(r, "world_size", a->o->nproc);
  a->base_rank = (int)proto_map_i64(r, "base_rank", 0);
  a->failures = (int)proto_map_i64(r, "failures", 0);
  a->master_port = (int)proto_map_i64(r, "master_port", 0);
  if ((s = proto_map_strdup(r, "tcpstore_job")) != NULL) {
    lu_strlcpy(a->tcpstore_job, s, sizeof(a->tcpstore_job));
    free(s);
  }
  proto_map_str(r, "node0_addr", a->node0_addr, sizeof(a->node0_addr));
  if (a->gen == 0 || a->o->torch_store == CLI_STORE_AGENT) {
    if (a->o->torch_store == CLI_STORE_AGENT && a->tcpstore_job[0] &&
        strcmp(a->tcpstore_job, a->o->run_id) != 0 && a->gen == 0)
      LU_WARN(&a->log, "the server at %s:%d serves TCPStore clients the keys "
                       "of job '%s', not '%s': PyTorch workers of different "
                       "jobs would share keys. Start it with --tcpstore-job "
                       "%s, or use --torch-store rank0", a->ep_host, a->ep_port,
              a->tcpstore_job, a->o->run_id, a->o->run_id);
  }
  say(a, "round %" PRId64 " of job %s: node %d of %d, ranks %d-%d of %d", a->gen,
      a->o->run_id, a->node_rank, a->nnodes, a->base_rank,
      a->base_rank + a->o->nproc - 1, a->world_size);
  if (start_workers(a) != 0) {
    /* Cannot start here: report it like a failed worker. */
    sum_failure_t f;
    memset(&f, 0, sizeof(f));
    f.wall_s = lu_wall_s();
    lu_strlcpy(f.host, a->host, sizeof(f.host));
    f.rank = a->base_rank;
    f.node_rank = a->node_rank;
    f.exit_code = 1;
    f.error_message = strdup("launch could not start the workers on this node");
    a->state = A_REPORTED;
    report(a, &f);
    sum_failure_free(&f);
    return;
  }
  a->state = A_RUN;
}

static void send_join(agent_t *a) {
  cli_opts_t *o = a->o;
  msgpack_packer *pk;
  const char *expected = getenv("LAUNCH_EXPECTED_HOSTS");
  const char *slurm = getenv("SLURM_JOB_NODELIST");
  char **hosts = NULL;
  size_t nhosts = 0;
  int pref = o->node_rank;
  if (o->backend != CLI_BACKEND_STATIC && pref < 0) {
    /* A scheduler's node index orders the nodes (Slurm, Volcano). */
    const char *v = getenv("SLURM_NODEID");
    if (v == NULL)
      v = getenv("VC_TASK_INDEX");
    if (v && lu_parse_int(v, 0, 1 << 20, &pref) != 0)
      pref = -1;
  }
  if (expected && *expected)
    lu_hostlist_expand(expected, 65536, &hosts, &nhosts);
  else if (slurm && *slurm)
    lu_hostlist_expand(slurm, 65536, &hosts, &nhosts);
  a->state = A_JOIN;
  a->join_started_ms = uv_now(a->loop);
  pk = ac_begin(a->ac, PROTO_OP_JOIN, 1);
  msgpack_pack_map(pk, a->fp_text ? 15 : 14);
  if (a->fp_text) {
    proto_pack_str(pk, RDV_K_FINGERPRINT);
    proto_pack_str(pk, a->fp_text);
  }
  proto_pack_str(pk, RDV_K_HOST);
  proto_pack_str(pk, a->host);
  proto_pack_str(pk, RDV_K_ADDR);
  proto_pack_str(pk, o->local_addr[0] ? o->local_addr : ac_local_ip(a->ac));
  proto_pack_str(pk, RDV_K_NPROC);
  msgpack_pack_int64(pk, o->nproc);
  proto_pack_str(pk, RDV_K_RANK);
  msgpack_pack_int64(pk, pref);
  proto_pack_str(pk, RDV_K_MIN);
  msgpack_pack_int64(pk, o->min_nodes);
  proto_pack_str(pk, RDV_K_MAX);
  msgpack_pack_int64(pk, o->max_nodes);
  proto_pack_str(pk, RDV_K_LAST_CALL);
  msgpack_pack_int64(pk, o->last_call_timeout_ms);
  proto_pack_str(pk, RDV_K_JOIN_TIMEOUT);
  msgpack_pack_int64(pk, o->join_timeout_ms);
  proto_pack_str(pk, RDV_K_HEARTBEAT);
  msgpack_pack_int64(pk, o->heartbeat_ms);
  proto_pack_str(pk, RDV_K_MAX_RESTARTS);
  msgpack_pack_int64(pk, o->max_restarts);
  proto_pack_str(pk, RDV_K_STATIC);
  msgpack_pack_int64(pk, o->backend == CLI_BACKEND_STATIC);
  proto_pack_str(pk, RDV_K_ALLOW_MISMATCH);
  msgpack_pack_int64(pk, o->allow_mismatch);
  proto_pack_str(pk, RDV_K_MASTER_PORT);
  msgpack_pack_int64(pk, a->my_master_port);
  proto_pack_str(pk, RDV_K_EXPECTED);
  msgpack_pack_array(pk, (uint32_t)nhosts);
  for (size_t i = 0; i < nhosts; i++)
    proto_pack_str(pk, hosts[i]);
  lu_hostlist_free(hosts, nhosts);
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

static void restart_stopped(wk_group_t *g, void *arg) {
  agent_t *a = arg;
  (void)g;
  if (a->state != A_STOP)
    return;
  clear_failures(a);
  send_join(a);
}

static void parse_root(agent_t *a, const msgpack_object *r) {
  char *s;
  memset(&a->root, 0, sizeof(a->root));
  {
    const msgpack_object *t = proto_map_get(r, "time");
    a->root.wall_s = t && (t->type == MSGPACK_OBJECT_FLOAT64 ||
                           t->type == MSGPACK_OBJECT_FLOAT32)
                         ? t->via.f64
                         : (double)proto_map_i64(r, "time", 0);
  }
  if ((s = proto_map_strdup(r, "host")) != NULL) {
    lu_strlcpy(a->root.host, s, sizeof(a->root.host));
    free(s);
  }
  a->root.rank = (int)proto_map_i64(r, "rank", -1);
  a->root.local_rank = (int)proto_map_i64(r, "local_rank", -1);
  a->root.node_rank = (int)proto_map_i64(r, "node_rank", -1);
  a->root.pid = (int)proto_map_i64(r, "pid", 0);
  a->root.exit_code = (int)proto_map_i64(r, "exit_code", -1);
  a->root.signal = (int)proto_map_i64(r, "signal", 0);
  a->root.stderr_tail = proto_map_strdup(r, "tail");
  a->root.error_message = proto_map_strdup(r, "error");
  if (a->root.stderr_tail && !a->root.stderr_tail[0]) {
    free(a->root.stderr_tail);
    a->root.stderr_tail = NULL;
  }
  if (a->root.error_message && !a->root.error_message[0]) {
    free(a->root.error_message);
    a->root.error_message = NULL;
  }
  a->have_root = 1;
}

static void on_push(ac_t *ac, const proto_msg_t *m, void *arg) {
  agent_t *a = arg;
  (void)ac;
  if (m->op == PROTO_EV_RESTART) {
    int64_t gen = -1;
    const char *why = "";
    size_t wl = 0;
    proto_arg_i64(m, 0, &gen);
    proto_arg_bytes(m, 1, &why, &wl);
    if (a->state != A_RUN && a->state != A_REPORTED)
      return;
    say(a, "restarting the workers (round %" PRId64 "): %.*s", gen, (int)wl, why);
    uv_timer_stop(&a->barrier_timer);
    a->state = A_STOP;
    wk_stop(a->wg, SIGTERM, (int)a->o->stop_grace_ms, restart_stopped, a);
    return;
  }
  if (m->op == PROTO_EV_SHUTDOWN) {
    const char *why = "";
    size_t wl = 0;
    int64_t used = 0;
    if (a->state == A_FINISH || a->state == A_CLOSED)
      return;
    a->finish_ok = m->nargs > 0 && m->args[0].type == MSGPACK_OBJECT_BOOLEAN &&
                   m->args[0].via.boolean;
    proto_arg_bytes(m, 1, &why, &wl);
    snprintf(a->end_reason, sizeof(a->end_reason), "%.*s", (int)wl, why);
    if (m->nargs > 2 && m->args[2].type == MSGPACK_OBJECT_MAP)
      parse_root(a, &m->args[2]);
    proto_arg_i64(m, 3, &used);
    a->restarts_used = (int)used;
    if (a->finish_ok)
      a->exit_code = 0;
    else if (a->have_root)
      a->exit_code = sum_exit_status(&a->root);
    else
      a->exit_code = 1;
    finish(a);
  }
}

static void on_lost(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  (void)ac;
  (void)status;
  if (a->state == A_FINISH || a->state == A_CLOSED)
    return;
  LU_ERR(&a->log, "%s; stopping the workers", ac_last_error(a->ac));
  a->exit_code = 1;
  a->finish_ok = 0;
  finish(a);
}

static void on_connected(ac_t *ac, int status, void *arg) {
  agent_t *a = arg;
  (void)ac;
  if (status != 0) {
    LU_ERR(&a->log, "%s", ac_last_error(a->ac));
    a->exit_code = 1;
    finish(a);
    return;
  }
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

static void srv_closed(void *arg) { (void)arg; }
static void ac_closed(void *arg) { (void)arg; }
static void wg_closed(void *arg) { (void)arg; }

/* Close every handle; the loop then ends. */
static void close_all(agent_t *a) {
  if (a->state == A_CLOSED)
    return;
  a->state = A_CLOSED;
  close_handle(a, (uv_handle_t *)&a->hb_timer);
  close_handle(a, (uv_handle_t *)&a->status_timer);
  close_handle(a, (uv_handle_t *)&a->barrier_timer);
  close_handle(a, (uv_handle_t *)&a->linger_timer);
  for (int i = 0; i < a->nsigs; i++)
    close_handle(a, (uv_handle_t *)&a->sigs[i]);
  if (a->ac) {
    ac_close(a->ac, ac_closed, NULL);
    a->ac = NULL;
  }
  if (a->srv) {
    srv_close(a->srv, srv_closed, NULL);
    a->srv = NULL;
  }
  if (a->wg) {
    wk_group_close(a->wg, wg_closed, NULL);
    a->wg = NULL;
  }
}

static void linger_cb(uv_timer_t *t) {
  agent_t *a = t->data;
  /* The hosting agent keeps the server up until the other nodes have
   * their SHUTDOWN (they disconnect), or a few seconds passed. */
  if (a->srv && rdv_connected_members(a->srv, a->o->run_id) > 1 &&
      uv_now(a->loop) - a->join_started_ms < 10000)
    return;
  close_all(a);
}

static void print_end(agent_t *a) {
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
              a->o->max_restarts);
    free(all);
    if (a->run_dir_is_temp)
      fprintf(stderr, "launch: logs and error files of the attempts are in %s\n",
              a->run_dir);
  } else if (a->end_reason[0]) {
    LU_ERR(&a->log, "job %s failed: %s", a->o->run_id, a->end_reason);
  }
}

static void finished_stopping(wk_group_t *g, void *arg) {
  agent_t *a = arg;
  (void)g;
  print_end(a);
  if (a->hosting && a->srv) {
    a->join_started_ms = uv_now(a->loop);
    uv_timer_start(&a->linger_timer, linger_cb, 0, 20);
    return;
  }
  close_all(a);
}

static void finish(agent_t *a) {
  if (a->state == A_FINISH || a->state == A_CLOSED)
    return;
  a->state = A_FINISH;
  uv_timer_stop(&a->status_timer);
  uv_timer_stop(&a->barrier_timer);
  if (a->wg && wk_live(a->wg) > 0)
    wk_stop(a->wg, a->signaled ? a->signaled : SIGTERM,
            (int)a->o->stop_grace_ms, finished_stopping, a);
  else
    finished_stopping(a->wg, a);
}

/* ---- signals ---------------------------------------------------------------------------------------- */

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
  if (a->ac && a->state != A_FINISH) {
    msgpack_packer *pk = ac_begin(a->ac, PROTO_OP_LEAVE, 1);
    char why[64];
    snprintf(why, sizeof(why), "agent received %s", sum_signal_name(sig));
    proto_pack_str(pk, why);
    ac_send(a->ac, NULL, NULL);
  }
  finish(a);
}

/* ---- start --------------------------------------------------------------------------------------------- */

static int read_token(agent_t *a) {
  char *t = NULL;
  size_t n = 0;
  int rc;
  if (a->o->token_file[0] == '\0')
    return 0;
  rc = lu_read_file(a->o->token_file, 4096, &t, &n);
  if (rc != 0) {
    LU_ERR(&a->log, "--token-file %s: %s", a->o->token_file, rdzv_strerror(rc));
    return rc;
  }
  n = lu_rtrim(t, n);
  if (n == 0) {
    LU_ERR(&a->log, "--token-file %s is empty", a->o->token_file);
    free(t);
    return RDZV_EINVAL;
  }
  a->token = t;
  a->token_len = n;
  return 0;
}

/* Is there an NVIDIA GPU on this node? (cheap: no library loaded) */
static int have_gpus(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd && (*cvd == '\0' || !strcmp(cvd, "-1")))
    return 0;
  return access("/proc/driver/nvidia/gpus", F_OK) == 0 ||
         access("/dev/nvidia0", F_OK) == 0;
}

/* Before the first round: the binding plan, the NCCL profile and its lint,
 * and (for several nodes) this node's fingerprint. Blocking, once. */
static int prepare_node(agent_t *a) {
  cli_opts_t *o = a->o;
  const char *cpu = o->cpu_bind, *mem = o->mem_bind;
  char err[1024];
  int gpus = have_gpus(), rc;
  env_t *e0 = NULL;
  /* Default: bind each rank to its GPU's NUMA node (memory preferred
   * there) when this node has GPUs; leave CPU-only jobs alone. */
  if (cpu[0] == '\0')
    cpu = gpus ? "numa" : "none";
  if (mem[0] == '\0')
    mem = gpus && strcmp(cpu, "none") ? "preferred" : "none";
  if ((a->pol = calloc(1, sizeof(*a->pol))) == NULL)
    return RDZV_ENOMEM;
  if (aff_policy_parse(cpu, mem, a->pol, err, sizeof(err)) != 0) {
    LU_ERR(&a->log, "%s", err);
    return RDZV_EINVAL;
  }
  if (a->pol->cpu != AFF_CPU_NONE || a->pol->mem != AFF_MEM_NONE ||
      o->report_bindings || o->topology_file[0] || (o->max_nodes > 1 && gpus)) {
    aff_topo_opts_t to = AFF_TOPO_OPTS_INIT;
    to.xml = o->topology_file[0] ? o->topology_file : NULL;
    to.log = &a->log;
    if ((rc = aff_topo_load(&to, &a->topo, err, sizeof(err))) != 0) {
      LU_ERR(&a->log, "topology: %s", err);
      return rc;
    }
    if (a->pol->cpu != AFF_CPU_NONE || a->pol->mem != AFF_MEM_NONE ||
        o->report_bindings) {
      rc = aff_plan_new(a->topo, a->pol, o->nproc, o->quiet ? NULL : &a->log,
                        &a->plan, err, sizeof(err));
      if (rc != 0) {
        LU_ERR(&a->log, "binding: %s", err);
        return rc;
      }
    }
  }
  if ((rc = prof_load(o->nccl_profile[0] ? o->nccl_profile : "auto", &a->prof,
                      err, sizeof(err))) != 0) {
    LU_ERR(&a->log, "--nccl-profile: %s", err);
    return rc;
  }
  /* Lint what a rank would get, against this node. */
  {
    env_rank_opts_t ro = ENV_RANK_OPTS_INIT;
    env_node_t node;
    env_finding_t *f = NULL;
    int nf = 0, errors = 0;
    ro.base = environ;
    ro.profile = a->prof;
    ro.allow_override = o->allow_env_override;
    if ((rc = env_build_rank(&ro, &e0)) != 0)
      return rc;
    memset(&node, 0, sizeof(node));
    env_node_probe(&node, NULL);
    node.has_nvlink = a->topo ? aff_topo_has_nvlink(a->topo) : -1;
    if (o->lint != CLI_LINT_OFF && env_lint(e0, &node, &f, &nf) == 0) {
      for (int i = 0; i < nf; i++) {
        int lvl = f[i].sev == ENV_SEV_ERROR ? LU_LOG_ERROR
                  : f[i].sev == ENV_SEV_WARN ? LU_LOG_WARN : LU_LOG_INFO;
        if (f[i].sev == ENV_SEV_ERROR)
          errors++;
        if (lvl == LU_LOG_INFO && o->quiet)
          continue;
        LU_LOG_AT(&a->log, lvl, "NCCL environment: %s=%s (%s): %s%s%s",
                  f[i].var, f[i].value, f[i].where[0] ? f[i].where : "?",
                  f[i].why, f[i].fix[0] ? " Fix: " : "", f[i].fix);
      }
      free(f);
      if (errors && o->lint == CLI_LINT_ERROR) {
        LU_ERR(&a->log, "%d error(s) in the NCCL environment: fix them, or run "
                        "with --lint warn to start anyway", errors);
        env_free(e0);
        return RDZV_EINVAL;
      }
    }
  }
  if (o->max_nodes > 1) {
    /* What every node must share: NCCL environment, versions, GPUs, the
     * program. Compared with node 0's at the rendezvous. */
    env_fp_t *fp = NULL;
    const char *files[3] = {NULL, NULL, NULL};
    size_t len;
    int k = 0;
    for (int i = 0; a->argv[i] && k < 2; i++) {
      struct stat sb;
      /* Regular files only: an argument naming a directory (an output or
       * data directory) is no program, and a FIFO or device would block
       * the hash. */
      if (strchr(a->argv[i], '/') && stat(a->argv[i], &sb) == 0 &&
          S_ISREG(sb.st_mode) && access(a->argv[i], R_OK) == 0)
        files[k++] = a->argv[i];
    }
    rc = launch_node_fingerprint(e0, prof_name(a->prof), a->topo, files, &fp,
                                 err, sizeof(err));
    if (rc == 0)
      rc = env_fp_serialize(fp, &a->fp_text, &len);
    env_fp_free(fp);
    if (rc != 0) {
      LU_ERR(&a->log, "node fingerprint: %s", err);
      env_free(e0);
      return rc;
    }
  }
  env_free(e0);
  return 0;
}

/* Host the server here? Then start it. RET 0 or an error. */
static int maybe_host(agent_t *a) {
  cli_opts_t *o = a->o;
  char ip[INET6_ADDRSTRLEN] = "";
  srv_config_t cfg = SRV_CONFIG_INIT;
  int want, rc;
  if (o->standalone) {
    want = 1;
    lu_strlcpy(ip, "127.0.0.1", sizeof(ip));
  } else if (o->is_host >= 0) {
    want = o->is_host;
  } else if (o->backend == CLI_BACKEND_STATIC) {
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
    if (o->is_host < 0 && o->backend != CLI_BACKEND_STATIC)
      want = launch_ip_is_local(ip) && (o->local_addr[0] == '\0' ||
                                 strcmp(o->local_addr, ip) == 0 ||
                                 strcmp(o->local_addr, o->endpoint_host) == 0);
  }
  if (!want)
    return 0;
  cfg.host = ip;
  cfg.port = o->endpoint_port;
  cfg.token = a->token;
  cfg.token_len = a->token_len;
  cfg.tcpstore_job = o->run_id;
  cfg.tcpstore_allow = o->tcpstore_allow[0] ? o->tcpstore_allow : NULL;
  if (o->tls_ca[0] && !o->tls_cert[0]) {
    LU_ERR(&a->log, "hosting the rendezvous server with TLS needs this "
           "node's certificate: give --tls-cert and --tls-key "
           "(docs/protocol.md#tls)");
    return RDZV_EINVAL;
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
  rc = srv_new(a->loop, &cfg, &a->srv);
  if (rc != 0)
    return rc;
  rdv_install(a->srv);
  rc = srv_listen(a->srv);
  if (rc == UV_EADDRINUSE && !o->standalone && o->is_host != 1) {
    /* Somebody listens there already (a standalone launch server, or the
     * agent of another job on this node): join it. */
    say(a, "a server already listens on %s:%d: joining it", ip,
        o->endpoint_port);
    srv_close(a->srv, NULL, NULL);
    a->srv = NULL;
    return 0;
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

int agent_run(cli_opts_t *o) {
  agent_t *a = calloc(1, sizeof(*a));
  uv_loop_t loop;
  ac_config_t acfg;
  int rc;
  static const int all_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
                                 SIGUSR2};
  if (a == NULL)
    return 1;
  a->o = o;
  a->loop = &loop;
  a->gen = -1;
  a->exit_code = 1;
  uv_loop_init(&loop);
  signal(SIGPIPE, SIG_IGN);
  {
    const char *h = getenv("LAUNCH_HOSTNAME");
    if (h && *h)
      lu_strlcpy(a->host, h, sizeof(a->host));
    else if (gethostname(a->host, sizeof(a->host)) != 0)
      lu_strlcpy(a->host, "localhost", sizeof(a->host));
  }
  lu_log_init(&a->log, "launch");
  lu_log_set_who(&a->log, "launch %s", a->host);
  lu_strlcpy(a->ep_host, o->endpoint_host, sizeof(a->ep_host));
  lu_strlcpy(a->store_host, o->endpoint_host, sizeof(a->store_host));
  a->ep_port = o->endpoint_port;
  uv_timer_init(&loop, &a->hb_timer);
  uv_timer_init(&loop, &a->status_timer);
  uv_timer_init(&loop, &a->barrier_timer);
  uv_timer_init(&loop, &a->linger_timer);
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
  if ((rc = read_token(a)) != 0 || (rc = build_argv(a)) != 0 ||
      (rc = prepare_node(a)) != 0 || (rc = wk_group_new(&loop, &a->wg)) != 0 ||
      (wk_set_log(a->wg, &a->log), 0) || (rc = maybe_host(a)) != 0) {
    a->exit_code = 1;
    goto out;
  }
  /* Where the workers' log and error files go. */
  {
    uint8_t r[3];
    char hex[7];
    lu_random(r, sizeof(r));
    lu_hex(r, sizeof(r), hex);
    if (o->log_dir[0]) {
      snprintf(a->run_dir, sizeof(a->run_dir), "%s/%s_%s", o->log_dir,
               o->run_id, hex);
    } else {
      const char *t = getenv("TMPDIR");
      snprintf(a->run_dir, sizeof(a->run_dir), "%s/launch_%s_%s",
               t && *t ? t : "/tmp", o->run_id, hex);
      a->run_dir_is_temp = 1;
    }
    if ((rc = mkdirs(a->run_dir)) != 0) {
      LU_ERR(&a->log, "cannot create %s: %s", a->run_dir, rdzv_strerror(rc));
      a->exit_code = 1;
      goto out;
    }
  }
  if (o->torch_store == CLI_STORE_RANK0)
    a->my_master_port = free_port(o->local_addr);
  memset(&acfg, 0, sizeof(acfg));
  acfg.host = a->ep_host;
  acfg.port = a->ep_port;
  acfg.local_addr = o->local_addr;
  acfg.job = o->run_id;
  acfg.role = "agent";
  acfg.token = a->token;
  acfg.token_len = a->token_len;
  acfg.connect_timeout_ms = (int)LU_MIN(o->join_timeout_ms, INT32_MAX);
  acfg.log = &a->log;
  /* A silent server is noticed within the bound that drops a silent
   * member: three heartbeats (or read_timeout when shorter). */
  acfg.reply_timeout_ms =
      (int)LU_MIN(o->read_timeout_ms, 3 * o->heartbeat_ms);
  acfg.tls_ca = o->tls_ca[0] ? o->tls_ca : NULL;
  acfg.tls_cert = o->tls_cert[0] ? o->tls_cert : NULL;
  acfg.tls_key = o->tls_key[0] ? o->tls_key : NULL;
  if ((rc = ac_new(&loop, &acfg, on_push, on_lost, a, &a->ac)) != 0 ||
      (rc = ac_connect(a->ac, on_connected)) != 0) {
    a->exit_code = 1;
    goto out;
  }
  a->state = A_CONNECT;
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
  clear_failures(a);
  if (a->have_root)
    sum_failure_free(&a->root);
  if (a->argv) {
    for (int i = 0; a->argv[i]; i++)
      free(a->argv[i]);
    free(a->argv);
  }
  if (a->run_dir_is_temp && rc == 0 && a->run_dir[0] &&
      nftw(a->run_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    /* Nothing to look at after a success: the temporary logs go. */
    LU_WARN(&a->log, "could not remove %s", a->run_dir);
  aff_plan_free(a->plan);
  aff_topo_free(a->topo);
  free(a->pol);
  prof_free(a->prof);
  free(a->fp_text);
  free(a->token);
  free(a);
  return rc;
}
