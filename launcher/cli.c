/* cli.c - command line of `launch`: torchrun's flags and ours. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lu.h"

/* Flags. `env` is the PET_* fallback (NULL = none); bool flags take no
 * value. Both spellings are accepted for every flag with a dash. */
typedef enum {
  F_NNODES, F_NPROC, F_BACKEND, F_ENDPOINT, F_ID, F_CONF, F_STANDALONE,
  F_MAX_RESTARTS, F_MONITOR, F_START_METHOD, F_ROLE, F_MODULE, F_NO_PYTHON,
  F_RUN_PATH, F_LOG_DIR, F_REDIRECTS, F_TEE, F_RANKS_FILTER, F_NODE_RANK,
  F_MASTER_ADDR, F_MASTER_PORT, F_LOCAL_ADDR, F_SIGNALS, F_EVENT_LOG,
  F_NUMA_BINDING, F_LOGS_SPECS,
  /* ours */
  F_TORCH_STORE, F_TOKEN_FILE, F_TCPSTORE_ALLOW, F_CPU_BIND, F_MEM_BIND,
  F_REPORT_BINDINGS, F_NCCL_PROFILE, F_ALLOW_ENV_OVERRIDE, F_ALLOW_MISMATCH,
  F_TOPOLOGY, F_STOP_TIMEOUT, F_EXIT_BARRIER, F_LINE_PREFIX, F_QUIET, F_LINT,
  F_TLS_CA, F_TLS_CERT, F_TLS_KEY, F_HELP, F_VERSION, F_COUNT
} flag_id_t;

typedef struct flag_s {
  flag_id_t id;
  const char *name;  /* with dashes */
  const char *alt;   /* short form, e.g. "-m" */
  int is_bool;
  const char *env;
} flag_t;

static const flag_t flags[] = {
    {F_NNODES, "--nnodes", NULL, 0, "PET_NNODES"},
    {F_NPROC, "--nproc-per-node", NULL, 0, "PET_NPROC_PER_NODE"},
    {F_BACKEND, "--rdzv-backend", NULL, 0, "PET_RDZV_BACKEND"},
    {F_ENDPOINT, "--rdzv-endpoint", NULL, 0, "PET_RDZV_ENDPOINT"},
    {F_ID, "--rdzv-id", NULL, 0, "PET_RDZV_ID"},
    {F_CONF, "--rdzv-conf", NULL, 0, "PET_RDZV_CONF"},
    {F_STANDALONE, "--standalone", NULL, 1, "PET_STANDALONE"},
    {F_MAX_RESTARTS, "--max-restarts", NULL, 0, "PET_MAX_RESTARTS"},
    {F_MONITOR, "--monitor-interval", NULL, 0, "PET_MONITOR_INTERVAL"},
    {F_START_METHOD, "--start-method", NULL, 0, "PET_START_METHOD"},
    {F_ROLE, "--role", NULL, 0, "PET_ROLE"},
    {F_MODULE, "--module", "-m", 1, "PET_MODULE"},
    {F_NO_PYTHON, "--no-python", NULL, 1, "PET_NO_PYTHON"},
    {F_RUN_PATH, "--run-path", NULL, 1, "PET_RUN_PATH"},
    {F_LOG_DIR, "--log-dir", NULL, 0, "PET_LOG_DIR"},
    {F_REDIRECTS, "--redirects", "-r", 0, "PET_REDIRECTS"},
    {F_TEE, "--tee", "-t", 0, "PET_TEE"},
    {F_RANKS_FILTER, "--local-ranks-filter", NULL, 0, "PET_LOCAL_RANKS_FILTER"},
    {F_NODE_RANK, "--node-rank", NULL, 0, "PET_NODE_RANK"},
    {F_MASTER_ADDR, "--master-addr", NULL, 0, "PET_MASTER_ADDR"},
    {F_MASTER_PORT, "--master-port", NULL, 0, "PET_MASTER_PORT"},
    {F_LOCAL_ADDR, "--local-addr", NULL, 0, "PET_LOCAL_ADDR"},
    {F_SIGNALS, "--signals-to-handle", NULL, 0, "PET_SIGNALS_TO_HANDLE"},
    {F_EVENT_LOG, "--event-log-handler", NULL, 0, "PET_EVENT_LOG_HANDLER"},
    {F_NUMA_BINDING, "--numa-binding", NULL, 0, NULL},
    {F_LOGS_SPECS, "--logs-specs", NULL, 0, NULL},
    {F_TORCH_STORE, "--torch-store", NULL, 0, "LAUNCH_TORCH_STORE"},
    {F_TOKEN_FILE, "--token-file", NULL, 0, "LAUNCH_TOKEN_FILE"},
    {F_TCPSTORE_ALLOW, "--tcpstore-allow", NULL, 0, NULL},
    {F_CPU_BIND, "--cpu-bind", NULL, 0, "LAUNCH_CPU_BIND"},
    {F_MEM_BIND, "--mem-bind", NULL, 0, "LAUNCH_MEM_BIND"},
    {F_REPORT_BINDINGS, "--report-bindings", NULL, 1, NULL},
    {F_NCCL_PROFILE, "--nccl-profile", NULL, 0, "LAUNCH_NCCL_PROFILE"},
    {F_ALLOW_ENV_OVERRIDE, "--allow-env-override", NULL, 1, NULL},
    {F_ALLOW_MISMATCH, "--allow-mismatch", NULL, 1, NULL},
    {F_TOPOLOGY, "--topology", NULL, 0, NULL},
    {F_STOP_TIMEOUT, "--stop-timeout", NULL, 0, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
    {F_EXIT_BARRIER, "--exit-barrier-timeout", NULL, 0, NULL},
    {F_LINE_PREFIX, "--log-line-prefix", NULL, 0,
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"},
    {F_QUIET, "--quiet", "-q", 1, NULL},
    {F_LINT, "--lint", NULL, 0, "LAUNCH_LINT"},
    {F_TLS_CA, "--tls-ca", NULL, 0, "LAUNCH_TLS_CA"},
    {F_TLS_CERT, "--tls-cert", NULL, 0, "LAUNCH_TLS_CERT"},
    {F_TLS_KEY, "--tls-key", NULL, 0, "LAUNCH_TLS_KEY"},
    {F_HELP, "--help", "-h", 1, NULL},
    {F_VERSION, "--version", NULL, 1, NULL},
};

static int fail(char *err, size_t n, const char *fmt, ...) LU_PRINTF(3, 4);
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* "--nproc_per_node" and "--nproc-per-node" are the same flag. */
static int same_name(const char *a, const char *b, size_t blen) {
  size_t i;
  for (i = 0; i < blen && a[i]; i++) {
    char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
    if (i < 2) /* the leading dashes */
      x = a[i], y = b[i];
    if (x != y)
      return 0;
  }
  return i == blen && a[i] == '\0';
}

static const flag_t *find_flag(const char *arg, size_t len) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(flags); i++) {
    if (same_name(flags[i].name, arg, len))
      return &flags[i];
    if (flags[i].alt && strlen(flags[i].alt) == len &&
        memcmp(flags[i].alt, arg, len) == 0)
      return &flags[i];
  }
  return NULL;
}

int cli_parse_nnodes(const char *s, int *min, int *max) {
  const char *colon = strchr(s, ':');
  char a[32];
  if (colon == NULL)
    return lu_parse_int(s, 1, 1 << 20, min) == 0 ? (*max = *min, 0) : -1;
  if ((size_t)(colon - s) >= sizeof(a))
    return -1;
  memcpy(a, s, (size_t)(colon - s));
  a[colon - s] = '\0';
  if (lu_parse_int(a, 1, 1 << 20, min) != 0 ||
      lu_parse_int(colon + 1, 1, 1 << 20, max) != 0)
    return -1;
  return 0;
}

int cli_parse_std_spec(const char *s, int nproc, unsigned *out) {
  int v;
  if (strchr(s, ':') == NULL) {
    if (lu_parse_int(s, 0, 3, &v) != 0)
      return -1;
    for (int i = 0; i < nproc; i++)
      out[i] = (unsigned)v;
    return 0;
  }
  for (int i = 0; i < nproc; i++)
    out[i] = 0;
  while (*s) {
    char item[32], *colon;
    int r;
    size_t n = strcspn(s, ",");
    if (n == 0 || n >= sizeof(item))
      return -1;
    memcpy(item, s, n);
    item[n] = '\0';
    if ((colon = strchr(item, ':')) == NULL)
      return -1;
    *colon = '\0';
    if (lu_parse_int(item, 0, nproc - 1, &r) != 0 ||
        lu_parse_int(colon + 1, 0, 3, &v) != 0)
      return -1;
    out[r] = (unsigned)v;
    s += n;
    if (*s == ',')
      s++;
  }
  return 0;
}

static int count_gpus(void) {
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  DIR *d;
  struct dirent *e;
  int n = 0;
  if (cvd != NULL) {
    /* An explicit list wins; "" or "-1" hides every GPU. */
    const char *p = cvd;
    if (*p == '\0')
      return 0;
    while (*p) {
      size_t k = strcspn(p, ",");
      if (k == 2 && strncmp(p, "-1", 2) == 0)
        break;
      if (k > 0)
        n++;
      p += k;
      if (*p == ',')
        p++;
    }
    return n;
  }
  if ((d = opendir("/proc/driver/nvidia/gpus")) != NULL) {
    while ((e = readdir(d)) != NULL)
      if (e->d_name[0] != '.')
        n++;
    closedir(d);
    return n;
  }
  if ((d = opendir("/dev")) != NULL) {
    while ((e = readdir(d)) != NULL)
      if (strncmp(e->d_name, "nvidia", 6) == 0 && isdigit((unsigned char)e->d_name[6]))
        n++;
    closedir(d);
  }
  return n;
}

static int parse_nproc(const char *s, cli_opts_t *o, char *err, size_t n) {
  lu_strlcpy(o->nproc_spec, s, sizeof(o->nproc_spec));
  if (strcmp(s, "gpu") == 0) {
    o->nproc = count_gpus();
    if (o->nproc == 0)
      return fail(err, n, "--nproc-per-node gpu: no GPU found (no "
                          "/proc/driver/nvidia/gpus, CUDA_VISIBLE_DEVICES "
                          "empty); give a number, or 'cpu'");
    return 0;
  }
  if (strcmp(s, "cpu") == 0 || strcmp(s, "auto") == 0) {
    int g = strcmp(s, "auto") == 0 ? count_gpus() : 0;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    o->nproc = g > 0 ? g : (int)(c > 0 ? c : 1);
    return 0;
  }
  if (lu_parse_int(s, 1, 1024, &o->nproc) != 0)
    return fail(err, n, "--nproc-per-node: '%s' is not a number of "
                        "processes (1-1024), 'gpu', 'cpu' or 'auto'", s);
  return 0;
}

static int parse_seconds(const char *flag, const char *s, int64_t *ms,
                         char *err, size_t n) {
  if (lu_parse_duration_ms(s, ms) != 0)
    return fail(err, n, "%s: '%s' is not a duration (seconds, or with a "
                        "unit: 500ms, 30s, 2m)", flag, s);
  return 0;
}

static int parse_bool(const char *s, int *out) {
  if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes"))
    *out = 1;
  else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no"))
    *out = 0;
  else
    return -1;
  return 0;
}

static int parse_conf(const char *s, cli_opts_t *o, char *err, size_t n) {
  while (*s) {
    char item[512], *eq;
    size_t k = strcspn(s, ",");
    if (k >= sizeof(item))
      return fail(err, n, "--rdzv-conf: entry too long");
    memcpy(item, s, k);
    item[k] = '\0';
    s += k;
    if (*s == ',')
      s++;
    if (k == 0)
      continue;
    if ((eq = strchr(item, '=')) == NULL || eq[1] == '\0')
      return fail(err, n, "--rdzv-conf: '%s' needs a value (key=value)", item);
    *eq = '\0';
    if (!strcmp(item, "join_timeout")) {
      if (parse_seconds("--rdzv-conf join_timeout", eq + 1, &o->join_timeout_ms, err, n))
        return -1;
    } else if (!strcmp(item, "last_call_timeout")) {
      if (parse_seconds("--rdzv-conf last_call_timeout", eq + 1, &o->last_call_timeout_ms, err, n))
        return -1;
    } else if (!strcmp(item, "close_timeout")) {
      if (parse_seconds("--rdzv-conf close_timeout", eq + 1, &o->close_timeout_ms, err, n))
        return -1;
    } else if (!strcmp(item, "heartbeat") || !strcmp(item, "keep_alive_interval")) {
      if (parse_seconds("--rdzv-conf heartbeat", eq + 1, &o->heartbeat_ms, err, n))
        return -1;
      if (o->heartbeat_ms < 10)
        return fail(err, n, "--rdzv-conf heartbeat: at least 10ms");
    } else if (!strcmp(item, "read_timeout")) {
      if (parse_seconds("--rdzv-conf read_timeout", eq + 1, &o->read_timeout_ms, err, n))
        return -1;
    } else if (!strcmp(item, "is_host")) {
      if (parse_bool(eq + 1, &o->is_host) != 0)
        return fail(err, n, "--rdzv-conf is_host: '%s' is not true/false", eq + 1);
    } else if (!strcmp(item, "heartbeat_timeout") || !strcmp(item, "timeout") ||
               !strcmp(item, "keep_alive_max_attempt") || !strcmp(item, "rank")) {
      /* torchrun keys with no effect here: accepted so job specs work */
    } else if (!strcmp(item, "store_type")) {
      if (strcmp(eq + 1, "tcp") != 0)
        return fail(err, n, "--rdzv-conf store_type=%s: only tcp is supported",
                    eq + 1);
    } else {
      return fail(err, n, "--rdzv-conf: unknown key '%s' (known: join_timeout, "
                          "last_call_timeout, close_timeout, heartbeat, "
                          "read_timeout, is_host)", item);
    }
  }
  return 0;
}

static int signal_bit(const char *name) {
  static const struct { const char *n; int s; } sigs[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},
      {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  for (size_t i = 0; i < LU_ARRAY_SIZE(sigs); i++)
    if (!strcmp(name, sigs[i].n) || !strcmp(name, sigs[i].n + 3))
      return sigs[i].s;
  return -1;
}

static int parse_signals(const char *s, cli_opts_t *o, char *err, size_t n) {
  o->signals_mask = 0;
  lu_strlcpy(o->signals_spec, s, sizeof(o->signals_spec));
  while (*s) {
    char item[32];
    size_t k = strcspn(s, ",");
    int sig;
    if (k == 0 || k >= sizeof(item))
      return fail(err, n, "--signals-to-handle: empty or long entry");
    memcpy(item, s, k);
    item[k] = '\0';
    for (char *p = item; *p; p++)
      *p = (char)toupper((unsigned char)*p);
    if ((sig = signal_bit(item)) < 0)
      return fail(err, n, "--signals-to-handle: '%s' is not one of SIGTERM, "
                          "SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2", item);
    o->signals_mask |= 1u << sig;
    s += k;
    if (*s == ',')
      s++;
  }
  return 0;
}

static void defaults(cli_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->min_nodes = o->max_nodes = 1;
  o->nproc = 1;
  lu_strlcpy(o->nproc_spec, "1", sizeof(o->nproc_spec));
  o->backend = -1;
  o->endpoint_port = -1;
  lu_strlcpy(o->run_id, "none", sizeof(o->run_id));
  o->node_rank = -1;
  lu_strlcpy(o->master_addr, "127.0.0.1", sizeof(o->master_addr));
  o->master_port = 29500;
  o->join_timeout_ms = 600000;
  o->last_call_timeout_ms = 30000;
  o->close_timeout_ms = 30000;
  o->heartbeat_ms = 5000;
  o->read_timeout_ms = 60000;
  o->is_host = -1;
  o->monitor_interval_ms = 100;
  o->stop_grace_ms = 30000;
  o->exit_barrier_ms = 300000;
  o->signals_mask = (1u << SIGTERM) | (1u << SIGINT) | (1u << SIGHUP) |
                    (1u << SIGQUIT);
  lu_strlcpy(o->signals_spec, "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
             sizeof(o->signals_spec));
  lu_strlcpy(o->role, "default", sizeof(o->role));
  lu_strlcpy(o->line_prefix, "[${host}:${rank}]: ", sizeof(o->line_prefix));
  lu_strlcpy(o->mem_bind, "", sizeof(o->mem_bind));
}

/* Apply one flag's value. */
static int apply(const flag_t *f, const char *v, cli_opts_t *o, char *err,
                 size_t n) {
  int b;
  switch (f->id) {
  case F_NNODES:
    if (cli_parse_nnodes(v, &o->min_nodes, &o->max_nodes) != 0)
      return fail(err, n, "--nnodes: '%s' is not N or MIN:MAX with "
                          "0 < MIN <= MAX", v);
    if (o->min_nodes > o->max_nodes)
      return fail(err, n, "--nnodes %s: MIN is larger than MAX", v);
    return 0;
  case F_NPROC:
    return parse_nproc(v, o, err, n);
  case F_BACKEND:
    if (!strcmp(v, "c10d") || !strcmp(v, "launch"))
      o->backend = CLI_BACKEND_C10D;
    else if (!strcmp(v, "static"))
      o->backend = CLI_BACKEND_STATIC;
    else if (!strncmp(v, "etcd", 4))
      return fail(err, n, "--rdzv-backend %s: etcd is not supported; use "
                          "--rdzv-backend c10d with --rdzv-endpoint HOST:PORT "
                          "(the launch server replaces etcd)", v);
    else
      return fail(err, n, "--rdzv-backend: '%s' is not c10d or static", v);
    return 0;
  case F_ENDPOINT: {
    lu_endpoint_t ep;
    if (*v == '\0')
      return 0;
    if (lu_endpoint_parse(v, RDZV_DEFAULT_PORT, &ep) != 0 || ep.is_unix)
      return fail(err, n, "--rdzv-endpoint: '%s' does not parse: use HOST, "
                          "HOST:PORT or [IPV6]:PORT (port 0-65535)", v);
    lu_strlcpy(o->endpoint_host, ep.host, sizeof(o->endpoint_host));
    o->endpoint_port = ep.port;
    o->endpoint_given = 1;
    return 0;
  }
  case F_ID:
    if (*v == '\0' || strlen(v) >= sizeof(o->run_id))
      return fail(err, n, "--rdzv-id: give a non-empty id of at most 255 "
                          "characters");
    lu_strlcpy(o->run_id, v, sizeof(o->run_id));
    return 0;
  case F_CONF:
    return parse_conf(v, o, err, n);
  case F_STANDALONE:
    if (parse_bool(v, &b) != 0)
      return fail(err, n, "--standalone: '%s' is not 0 or 1", v);
    o->standalone = b;
    return 0;
  case F_MAX_RESTARTS:
    if (lu_parse_int(v, 0, 1 << 30, &o->max_restarts) != 0)
      return fail(err, n, "--max-restarts: '%s' is not a number >= 0", v);
    return 0;
  case F_MONITOR:
    if (parse_seconds("--monitor-interval", v, &o->monitor_interval_ms, err, n))
      return -1;
    if (o->monitor_interval_ms <= 0)
      return fail(err, n, "--monitor-interval: must be positive");
    return 0;
  case F_START_METHOD:
    if (strcmp(v, "spawn") && strcmp(v, "fork") && strcmp(v, "forkserver"))
      return fail(err, n, "--start-method: '%s' is not spawn, fork or "
                          "forkserver", v);
    return 0;
  case F_ROLE:
    if (*v == '\0' || strlen(v) >= sizeof(o->role))
      return fail(err, n, "--role: give a non-empty name");
    lu_strlcpy(o->role, v, sizeof(o->role));
    return 0;
  case F_MODULE:
  case F_NO_PYTHON:
  case F_RUN_PATH: {
    int mode = f->id == F_MODULE ? CLI_PROG_MODULE
               : f->id == F_NO_PYTHON ? CLI_PROG_NO_PYTHON : CLI_PROG_RUN_PATH;
    if (parse_bool(v, &b) != 0)
      return fail(err, n, "%s: '%s' is not 0 or 1", f->name, v);
    if (!b)
      return 0;
    if (o->prog_mode != CLI_PROG_AUTO && o->prog_mode != mode &&
        !(o->prog_mode == CLI_PROG_RUN_PATH || mode == CLI_PROG_RUN_PATH))
      return fail(err, n, "--module and --no-python cannot be used together");
    /* --run-path takes precedence over --no-python, as in torchrun */
    if (o->prog_mode == CLI_PROG_RUN_PATH)
      return 0;
    o->prog_mode = mode;
    return 0;
  }
  case F_LOG_DIR:
    if (strlen(v) >= sizeof(o->log_dir))
      return fail(err, n, "--log-dir: path too long");
    lu_strlcpy(o->log_dir, v, sizeof(o->log_dir));
    return 0;
  case F_REDIRECTS:
    lu_strlcpy(o->redirects_spec, v, sizeof(o->redirects_spec));
    o->redirects_given = 1;
    return 0;
  case F_TEE:
    lu_strlcpy(o->tee_spec, v, sizeof(o->tee_spec));
    o->tee_given = 1;
    return 0;
  case F_RANKS_FILTER:
    /* validated once nproc is known */
    o->ranks_filter_given = *v != '\0';
    lu_strlcpy(o->ranks_filter_spec, v, sizeof(o->ranks_filter_spec));
    return 0;
  case F_NODE_RANK:
    if (lu_parse_int(v, 0, 1 << 20, &o->node_rank) != 0)
      return fail(err, n, "--node-rank: '%s' is not a number >= 0", v);
    return 0;
  case F_MASTER_ADDR:
    if (*v == '\0' || strlen(v) >= sizeof(o->master_addr))
      return fail(err, n, "--master-addr: give a host name or address");
    lu_strlcpy(o->master_addr, v, sizeof(o->master_addr));
    /* [v6] as torchrun writes it */
    if (o->master_addr[0] == '[') {
      size_t l = strlen(o->master_addr);
      if (o->master_addr[l - 1] != ']')
        return fail(err, n, "--master-addr: '%s' does not parse", v);
      memmove(o->master_addr, o->master_addr + 1, l - 2);
      o->master_addr[l - 2] = '\0';
    }
    return 0;
  case F_MASTER_PORT:
    if (lu_parse_int(v, 1, 65535, &o->master_port) != 0)
      return fail(err, n, "--master-port: '%s' is not a port (1-65535)", v);
    return 0;
  case F_LOCAL_ADDR:
    lu_strlcpy(o->local_addr, v, sizeof(o->local_addr));
    return 0;
  case F_SIGNALS:
    return parse_signals(v, o, err, n);
  case F_EVENT_LOG:
    if (strcmp(v, "null") != 0)
      return fail(err, n, "--event-log-handler: only 'null' is supported");
    return 0;
  case F_NUMA_BINDING:
    if (!strcmp(v, "node") || !strcmp(v, "socket"))
      lu_strlcpy(o->cpu_bind, "numa", sizeof(o->cpu_bind));
    else if (!strcmp(v, "exclusive") || !strcmp(v, "core-complex"))
      lu_strlcpy(o->cpu_bind, "cores", sizeof(o->cpu_bind));
    else
      return fail(err, n, "--numa-binding: '%s' is not node, socket, "
                          "exclusive or core-complex", v);
    return 0;
  case F_LOGS_SPECS:
    return fail(err, n, "--logs-specs: Python entry points are not "
                        "supported; use --log-dir, --tee and --redirects");
  case F_TORCH_STORE:
    if (!strcmp(v, "agent"))
      o->torch_store = CLI_STORE_AGENT;
    else if (!strcmp(v, "rank0"))
      o->torch_store = CLI_STORE_RANK0;
    else
      return fail(err, n, "--torch-store: '%s' is not agent or rank0", v);
    return 0;
  case F_TOKEN_FILE:
    lu_strlcpy(o->token_file, v, sizeof(o->token_file));
    return 0;
  case F_TCPSTORE_ALLOW:
    lu_strlcpy(o->tcpstore_allow, v, sizeof(o->tcpstore_allow));
    return 0;
  case F_TLS_CA:
    lu_strlcpy(o->tls_ca, v, sizeof(o->tls_ca));
    return 0;
  case F_TLS_CERT:
    lu_strlcpy(o->tls_cert, v, sizeof(o->tls_cert));
    return 0;
  case F_TLS_KEY:
    lu_strlcpy(o->tls_key, v, sizeof(o->tls_key));
    return 0;
  case F_CPU_BIND:
    if (strlen(v) >= sizeof(o->cpu_bind))
      return fail(err, n, "--cpu-bind: list too long");
    lu_strlcpy(o->cpu_bind, v, sizeof(o->cpu_bind));
    return 0;
  case F_MEM_BIND:
    if (strcmp(v, "none") && strcmp(v, "local") && strcmp(v, "preferred"))
      return fail(err, n, "--mem-bind: '%s' is not none, local or preferred",
                  v);
    lu_strlcpy(o->mem_bind, v, sizeof(o->mem_bind));
    return 0;
  case F_REPORT_BINDINGS:
    o->report_bindings = 1;
    return 0;
  case F_NCCL_PROFILE:
    lu_strlcpy(o->nccl_profile, v, sizeof(o->nccl_profile));
    return 0;
  case F_ALLOW_ENV_OVERRIDE:
    o->allow_env_override = 1;
    return 0;
  case F_ALLOW_MISMATCH:
    o->allow_mismatch = 1;
    return 0;
  case F_TOPOLOGY:
    lu_strlcpy(o->topology_file, v, sizeof(o->topology_file));
    return 0;
  case F_STOP_TIMEOUT:
    return parse_seconds("--stop-timeout", v, &o->stop_grace_ms, err, n);
  case F_EXIT_BARRIER:
    return parse_seconds("--exit-barrier-timeout", v, &o->exit_barrier_ms,
                         err, n);
  case F_LINE_PREFIX:
    lu_strlcpy(o->line_prefix, v, sizeof(o->line_prefix));
    return 0;
  case F_QUIET:
    o->quiet = 1;
    return 0;
  case F_LINT:
    if (!strcmp(v, "error"))
      o->lint = CLI_LINT_ERROR;
    else if (!strcmp(v, "warn"))
      o->lint = CLI_LINT_WARN;
    else if (!strcmp(v, "off"))
      o->lint = CLI_LINT_OFF;
    else
      return fail(err, n, "--lint: '%s' is not error, warn or off", v);
    return 0;
  default:
    return 0;
  }
}

static int finish(cli_opts_t *o, char *err, size_t n) {
  const char *filter = o->ranks_filter_spec;
  if (o->prog_argc == 0)
    return fail(err, n, "no program given: launch [options] PROGRAM [ARGS...] "
                        "(see launch --help)");
  if (o->prog_mode == CLI_PROG_MODULE && o->prog_argv[0][0] == '-')
    return fail(err, n, "--module: '%s' is not a module name",
                o->prog_argv[0]);
  if (o->standalone) {
    if (o->min_nodes != 1 || o->max_nodes != 1)
      return fail(err, n, "--standalone runs one node: drop --nnodes or use "
                          "--rdzv-endpoint for several");
    o->backend = CLI_BACKEND_C10D;
    lu_strlcpy(o->endpoint_host, "127.0.0.1", sizeof(o->endpoint_host));
    o->endpoint_port = 0;
    o->endpoint_given = 1;
    /* A fresh run id, as torchrun's uuid4. */
    {
      uint8_t r[16];
      char hex[33];
      if (lu_random(r, sizeof(r)) != 0)
        memset(r, 0, sizeof(r));
      lu_hex(r, sizeof(r), hex);
      snprintf(o->run_id, sizeof(o->run_id), "%.8s-%.4s-%.4s-%.4s-%.12s", hex,
               hex + 8, hex + 12, hex + 16, hex + 20);
    }
  }
  if (o->backend < 0)
    o->backend = o->endpoint_given ? CLI_BACKEND_C10D : CLI_BACKEND_STATIC;
  if (o->backend == CLI_BACKEND_STATIC) {
    if (o->min_nodes != o->max_nodes)
      return fail(err, n, "--nnodes %d:%d: static rendezvous needs a fixed "
                          "number of nodes (use --rdzv-backend c10d for "
                          "elastic jobs)", o->min_nodes, o->max_nodes);
    if (o->node_rank < 0)
      o->node_rank = 0;
    if (o->node_rank >= o->max_nodes)
      return fail(err, n, "--node-rank %d is not below --nnodes %d",
                  o->node_rank, o->max_nodes);
    if (!o->endpoint_given) {
      lu_strlcpy(o->endpoint_host, o->master_addr, sizeof(o->endpoint_host));
      o->endpoint_port = o->master_port;
      o->endpoint_given = 1;
    }
  } else if (!o->endpoint_given) {
    return fail(err, n, "--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT "
                        "(or --standalone for one node)");
  }
  if (o->endpoint_port < 0)
    o->endpoint_port = RDZV_DEFAULT_PORT;
  if (o->join_timeout_ms <= 0)
    return fail(err, n, "--rdzv-conf join_timeout must be positive");
  /* per-rank output settings */
  if (o->redirects_given &&
      cli_parse_std_spec(o->redirects_spec, o->nproc, o->redirects) != 0)
    return fail(err, n, "--redirects: '%s' is not 0-3 or a list like 0:1,1:2 "
                        "with local ranks below %d", o->redirects_spec,
                o->nproc);
  if (o->tee_given && cli_parse_std_spec(o->tee_spec, o->nproc, o->tee) != 0)
    return fail(err, n, "--tee: '%s' is not 0-3 or a list like 0:1,1:2 with "
                        "local ranks below %d", o->tee_spec, o->nproc);
  /* --log-dir alone keeps a file per rank for both streams */
  if (o->log_dir[0] && !o->redirects_given && !o->tee_given)
    for (int i = 0; i < o->nproc; i++)
      o->tee[i] = 3;
  for (int i = 0; i < o->nproc; i++)
    o->console[i] = o->ranks_filter_given ? 0 : 1;
  if (o->ranks_filter_given) {
    const char *p = filter;
    while (*p) {
      char item[16];
      int r;
      size_t k = strcspn(p, ",");
      if (k == 0 || k >= sizeof(item))
        return fail(err, n, "--local-ranks-filter: '%s' is not a list of "
                            "local ranks like 0,3", filter);
      memcpy(item, p, k);
      item[k] = '\0';
      if (lu_parse_int(item, 0, o->nproc - 1, &r) != 0)
        return fail(err, n, "--local-ranks-filter: '%s' is not a local rank "
                            "below %d", item, o->nproc);
      o->console[r] = 1;
      p += k;
      if (*p == ',')
        p++;
    }
  }
  if (!strcmp(o->line_prefix, "none"))
    o->line_prefix[0] = '\0';
  return 0;
}

int cli_parse(int argc, char **argv, cli_opts_t *o, char *err, size_t errlen) {
  unsigned char seen[F_COUNT];
  int i;
  defaults(o);
  memset(seen, 0, sizeof(seen));
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *eq, *val = NULL;
    const flag_t *f;
    size_t len;
    if (a[0] != '-' || a[1] == '\0')
      break; /* the program */
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    eq = strchr(a, '=');
    len = eq ? (size_t)(eq - a) : strlen(a);
    if ((f = find_flag(a, len)) == NULL)
      return fail(err, errlen, "unknown option '%.*s' (see launch --help)",
                  (int)len, a);
    if (f->id == F_HELP) {
      cli_help(stdout);
      return 1;
    }
    if (f->id == F_VERSION) {
      printf("launch %d.%d (protocol %d)\n", RDZV_VERSION_MAJOR,
             RDZV_VERSION_MINOR, RDZV_PROTOCOL_VERSION);
      return 1;
    }
    if (f->is_bool) {
      val = eq ? eq + 1 : "1";
    } else if (eq) {
      val = eq + 1;
    } else {
      if (i + 1 >= argc)
        return fail(err, errlen, "option '%s' needs a value", f->name);
      val = argv[++i];
    }
    /* --nproc-per-node's value decides nproc before per-rank specs */
    if (apply(f, val, o, err, errlen) != 0)
      return -1;
    seen[f->id] = 1;
  }
  /* PET_* fallbacks for flags not given on the command line */
  for (size_t k = 0; k < LU_ARRAY_SIZE(flags); k++) {
    const char *v;
    if (flags[k].env == NULL || seen[flags[k].id])
      continue;
    if ((v = getenv(flags[k].env)) == NULL || *v == '\0')
      continue;
    if (flags[k].is_bool) {
      int b;
      if (parse_bool(v, &b) != 0)
        return fail(err, errlen, "%s=%s: not 0 or 1 (environment fallback of "
                                 "%s)", flags[k].env, v, flags[k].name);
      if (!b)
        continue;
    }
    if (apply(&flags[k], v, o, err, errlen) != 0) {
      size_t l = strlen(err);
      snprintf(err + l, errlen - l, " (from %s)", flags[k].env);
      return -1;
    }
  }
  o->prog_argv = argv + i;
  o->prog_argc = argc - i;
  return finish(o, err, errlen);
}

void cli_opts_free(cli_opts_t *o) { (void)o; }

void cli_help(FILE *out) {
  fputs(
      "usage: launch [options] PROGRAM [ARGS...]\n"
      "       launch server|status|topo|env|doctor [options]\n"
      "\n"
      "Starts PROGRAM once per local rank on this node, joined with the other\n"
      "nodes of the job through the rendezvous server, and keeps the job alive:\n"
      "a failure on any node restarts every node's workers (up to\n"
      "--max-restarts). A PROGRAM ending in .py runs under python3 (or\n"
      "$PYTHON_EXEC); anything else is executed directly. torchrun's flags are\n"
      "accepted in both spellings (--nproc-per-node, --nproc_per_node) and from\n"
      "their PET_* environment variables.\n"
      "\n"
      "nodes and processes:\n"
      "  --nnodes N|MIN:MAX          nodes of the job (default 1)\n"
      "  --nproc-per-node N|gpu|cpu|auto  workers per node (default 1)\n"
      "  --standalone                one node, a private server on a free port\n"
      "rendezvous:\n"
      "  --rdzv-endpoint HOST[:PORT] the launch server (default port 29400); the\n"
      "                              agent on HOST hosts it unless one runs there\n"
      "  --rdzv-backend c10d|static  (c10d when an endpoint is given)\n"
      "  --rdzv-id ID                job id shared by every node\n"
      "  --rdzv-conf K=V,...         join_timeout, last_call_timeout, heartbeat,\n"
      "                              close_timeout, read_timeout, is_host\n"
      "  --node-rank N               static rank of this node (static backend)\n"
      "  --master-addr A --master-port P  static rendezvous address\n"
      "  --local-addr A              address this node advertises\n"
      "supervision:\n"
      "  --max-restarts N            job restarts after failures (default 0),\n"
      "                              counted once for the whole job\n"
      "  --signals-to-handle LIST    signals forwarded to the workers (default\n"
      "                              SIGTERM,SIGINT,SIGHUP,SIGQUIT; add SIGUSR1,\n"
      "                              SIGUSR2 for Slurm)\n"
      "  --stop-timeout SECONDS      SIGTERM to SIGKILL grace (default 30)\n"
      "  --exit-barrier-timeout S    how long a finished node waits for the\n"
      "                              others (default 300)\n"
      "  --monitor-interval S        accepted for compatibility: exits are\n"
      "                              seen at once, not polled\n"
      "  --role NAME                 ROLE_NAME of the workers (default default)\n"
      "program:\n"
      "  -m, --module                run PROGRAM as python -m PROGRAM\n"
      "  --no-python                 execute PROGRAM directly, even a .py\n"
      "  --run-path                  run the script through python\n"
      "logs:\n"
      "  --log-dir DIR               DIR/<run id>/attempt_<n>/<local rank>/\n"
      "                              {stdout,stderr}.log and error.json\n"
      "  -r, --redirects SPEC        streams to files only: 0 none, 1 stdout,\n"
      "                              2 stderr, 3 both, or per rank 0:1,1:2\n"
      "  -t, --tee SPEC              streams to files and the console\n"
      "  --local-ranks-filter LIST   local ranks whose output reaches the console\n"
      "  --log-line-prefix TEMPLATE  prefix of each line (default\n"
      "                              '[${host}:${rank}]: '; ${local_rank},\n"
      "                              ${role_name}, ${node_rank}; 'none')\n"
      "launch's own:\n"
      "  --torch-store agent|rank0   agent (default): workers use the launch\n"
      "                              server as their TCPStore\n"
      "                              (TORCHELASTIC_USE_AGENT_STORE=True); rank0:\n"
      "                              rank 0 hosts its own store on a free port\n"
      "                              (needed by PyTorch 1.13 workers)\n"
      "  --token-file F              the job's key (launch server --issue-key)\n"
      "                              or the server's secret (HMAC challenge)\n"
      "  --tls-ca F                  TLS: verify the server with this CA\n"
      "  --tls-cert F, --tls-key F   TLS: this node's certificate (mutual TLS;\n"
      "                              needed to host the server with TLS)\n"
      "  --tcpstore-allow LIST       with a token: addresses allowed to use\n"
      "                              TCPStore, e.g. 10.0.0.0/8\n"
      "  --cpu-bind none|numa|cores|LIST  CPUs of each worker: its GPU's NUMA\n"
      "                              node, a share of its cores, or one\n"
      "                              cpulist per local rank separated by ';'\n"
      "                              (default: numa when the node has GPUs)\n"
      "  --mem-bind none|local|preferred  memory of each worker on its NUMA\n"
      "                              node (default: preferred with GPUs)\n"
      "  --report-bindings           print each worker's binding\n"
      "  --topology FILE.xml         plan for an hwloc XML topology\n"
      "  --nccl-profile NAME|FILE    locked NCCL environment: auto (default),\n"
      "                              pcie-ib, nvlink-ib, roce, socket or a file\n"
      "  --allow-env-override        inherited NCCL_* values beat the profile\n"
      "  --lint error|warn|off       NCCL environment mistakes stop the job\n"
      "                              (error, default), are only reported, or\n"
      "                              are not checked\n"
      "  --allow-mismatch            run even when nodes differ from node 0\n"
      "                              (NCCL env, versions, GPUs, program)\n"
      "  -q, --quiet                 fewer agent messages\n"
      "\n"
      "examples:\n"
      "  launch --standalone --nproc-per-node 8 train.py --lr 3e-4\n"
      "  launch --nnodes 4 --nproc-per-node 8 --rdzv-id job42 \\\n"
      "         --rdzv-endpoint node0:29400 build/bin/train_gpt\n"
      "  launch --nnodes 2:4 --max-restarts 3 --rdzv-endpoint node0 train.py\n"
      "  launch status --rdzv-endpoint node0:29400 --rdzv-id job42\n",
      out);
}
