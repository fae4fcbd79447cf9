/* sched.c - the environment the job starts in: launch's own variables,
 * torchrun's, and what the schedulers (Kubeflow, Slurm, Volcano) say about
 * the job, one table per source, each row feeding one setting of config.c.
 * A row passes its variable's value on as it is, or derives the value from
 * it and the rest of the environment (Slurm's host list gives the endpoint,
 * Volcano's host files the node count). Adding a scheduler (LSF, PBS, Flux)
 * is one more table in `sources`. docs/schedulers.md describes them. */
#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lu.h"

/* A derived value: *out (malloc'd) from the row's variable's value (NULL
 * for a row without one), the environment and the source's view. RET 1 (a
 * value), 0 (nothing to say), -1 (err says why). */
typedef int (*derive_fn)(const void *view, char *const *envp, const char *v,
                         char **out, char *err, size_t errlen);

typedef struct sched_var_s {
  const char *var; /* NULL: derive reads what it needs */
  int setting;     /* cfg_setting_t */
  int keep_empty;  /* an empty value means something (CUDA_VISIBLE_DEVICES="") */
  derive_fn derive;
  const int *unless; /* settings (ending with -1) that, seen, make the row moot */
} sched_var_t;

/* A source: its rows apply when one of detect is set (NULL: always). open
 * reads what several rows share (host files) once. */
typedef struct sched_source_s {
  const char *name;
  const char *const *detect;
  const sched_var_t *vars;
  size_t n;
  int (*open)(char *const *envp, void **view, char *err, size_t errlen);
  void (*close)(void *view);
} sched_source_t;

/* A rendezvous named on the command line or by launch's variables leaves
 * the scheduler's endpoint aside; so does --standalone, which runs alone. */
static const int named_rdzv[] = {CFG_S_ENDPOINT, CFG_S_MASTER_ADDR,
                                 CFG_S_MASTER_PORT, CFG_S_STANDALONE, -1};
static const int named_endpoint[] = {CFG_S_ENDPOINT, CFG_S_STANDALONE, -1};
static const int alone[] = {CFG_S_STANDALONE, -1};
/* The GPU count is no worker count when the scheduler starts the workers. */
static const int own_tasks[] = {CFG_S_FROM_TASKS, CFG_S_STANDALONE, -1};

static int dup_out(const char *s, char **out) {
  return (*out = strdup(s)) != NULL ? 1 : -1;
}

static int num_out(char **out, long long a) {
  char b[32];
  snprintf(b, sizeof(b), "%lld", a);
  return dup_out(b, out);
}

/* A non-negative integer variable. RET 0 or -1. */
static int env_int(char *const *envp, const char *name, long long *v) {
  const char *s = sched_getenv(envp, name);
  int64_t x;
  if (s == NULL || lu_parse_i64(s, strlen(s), &x) != 0 || x < 0)
    return -1;
  *v = x;
  return 0;
}

/* "1" when the index is 0 (the node that hosts), else "0". */
static int index_is_zero(const void *view, char *const *envp, const char *v,
                         char **out, char *err, size_t errlen) {
  (void)view, (void)envp, (void)err, (void)errlen;
  return dup_out(strcmp(v, "0") == 0 ? "1" : "0", out);
}

/* ---- launch's own and torchrun's ------------------------------------------ */

static const sched_var_t launch_vars[] = {
    {"LAUNCH_HOSTNAME", CFG_S_HOSTNAME, 0, NULL, NULL},
    {"LAUNCH_EXPECTED_HOSTS", CFG_S_EXPECTED_HOSTS, 0, NULL, NULL},
    {"LAUNCH_TORCH_STORE", CFG_S_TORCH_STORE, 0, NULL, NULL},
    {"LAUNCH_TOKEN_FILE", CFG_S_TOKEN_FILE, 0, NULL, NULL},
    {"LAUNCH_TLS_CA", CFG_S_TLS_CA, 0, NULL, NULL},
    {"LAUNCH_TLS_CERT", CFG_S_TLS_CERT, 0, NULL, NULL},
    {"LAUNCH_TLS_KEY", CFG_S_TLS_KEY, 0, NULL, NULL},
    {"LAUNCH_CPU_BIND", CFG_S_CPU_BIND, 0, NULL, NULL},
    {"LAUNCH_MEM_BIND", CFG_S_MEM_BIND, 0, NULL, NULL},
    {"LAUNCH_NCCL_PROFILE", CFG_S_NCCL_PROFILE, 0, NULL, NULL},
    {"LAUNCH_LINT", CFG_S_LINT, 0, NULL, NULL},
    {"LAUNCH_HANG_TIMEOUT", CFG_S_HANG_TIMEOUT, 0, NULL, NULL},
    {"LAUNCH_HANG_SIGNAL", CFG_S_HANG_SIGNAL, 0, NULL, NULL},
    {"LAUNCH_NO_RESTART_EXIT_CODES", CFG_S_NO_RESTART_CODES, 0, NULL, NULL},
    {"LAUNCH_CKPT_DIR", CFG_S_CKPT_DIR, 0, NULL, NULL},
    {"LAUNCH_SERVER_THREADS", CFG_S_SRV_THREADS, 0, NULL, NULL},
    {"LAUNCH_SERVER_TRACE_MS", CFG_S_SRV_TRACE, 0, NULL, NULL},
    {"LAUNCH_SERVER_TURN_US", CFG_S_SRV_TURN, 0, NULL, NULL},
    {"LAUNCH_SERVER_PASS_US", CFG_S_SRV_PASS, 0, NULL, NULL},
    {"LAUNCH_SERVER_PLAIN_LOCK", CFG_S_SRV_PLAIN_LOCK, 0, NULL, NULL},
    {"LAUNCH_SERVER_LOCK_SPINS", CFG_S_SRV_LOCK_SPINS, 0, NULL, NULL},
    {"LAUNCH_SERVER_BIG_CACHE_MB", CFG_S_SRV_BIG_CACHE, 0, NULL, NULL},
    {"PYTHON_EXEC", CFG_S_PYTHON, 0, NULL, NULL},
    {"TMPDIR", CFG_S_TMPDIR, 0, NULL, NULL},
    {"CUDA_VISIBLE_DEVICES", CFG_S_CUDA_VISIBLE, 1, NULL, NULL},
};

/* torchrun: each flag's PET_* variable (Kubeflow's PyTorchJob sets them),
 * and torchelastic's own. */
static const sched_var_t torchrun_vars[] = {
    {"PET_NNODES", CFG_S_NNODES, 0, NULL, NULL},
    {"PET_NPROC_PER_NODE", CFG_S_NPROC, 0, NULL, NULL},
    {"PET_RDZV_BACKEND", CFG_S_BACKEND, 0, NULL, NULL},
    {"PET_RDZV_ENDPOINT", CFG_S_ENDPOINT, 0, NULL, NULL},
    {"PET_RDZV_ID", CFG_S_ID, 0, NULL, NULL},
    {"PET_RDZV_CONF", CFG_S_CONF, 0, NULL, NULL},
    {"PET_STANDALONE", CFG_S_STANDALONE, 0, NULL, NULL},
    {"PET_MAX_RESTARTS", CFG_S_MAX_RESTARTS, 0, NULL, NULL},
    {"PET_CKPT_DIR", CFG_S_CKPT_DIR, 0, NULL, NULL},
    {"PET_MONITOR_INTERVAL", CFG_S_MONITOR, 0, NULL, NULL},
    {"PET_START_METHOD", CFG_S_START_METHOD, 0, NULL, NULL},
    {"PET_ROLE", CFG_S_ROLE, 0, NULL, NULL},
    {"PET_MODULE", CFG_S_MODULE, 0, NULL, NULL},
    {"PET_NO_PYTHON", CFG_S_NO_PYTHON, 0, NULL, NULL},
    {"PET_RUN_PATH", CFG_S_RUN_PATH, 0, NULL, NULL},
    {"PET_LOG_DIR", CFG_S_LOG_DIR, 0, NULL, NULL},
    {"PET_REDIRECTS", CFG_S_REDIRECTS, 0, NULL, NULL},
    {"PET_TEE", CFG_S_TEE, 0, NULL, NULL},
    {"PET_LOCAL_RANKS_FILTER", CFG_S_RANKS_FILTER, 0, NULL, NULL},
    {"PET_NODE_RANK", CFG_S_NODE_RANK, 0, NULL, NULL},
    {"PET_MASTER_ADDR", CFG_S_MASTER_ADDR, 0, NULL, NULL},
    {"PET_MASTER_PORT", CFG_S_MASTER_PORT, 0, NULL, NULL},
    {"PET_LOCAL_ADDR", CFG_S_LOCAL_ADDR, 0, NULL, NULL},
    {"PET_SIGNALS_TO_HANDLE", CFG_S_SIGNALS, 0, NULL, NULL},
    {"PET_EVENT_LOG_HANDLER", CFG_S_EVENT_LOG, 0, NULL, NULL},
    {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", CFG_S_STOP_TIMEOUT, 0, NULL, NULL},
    {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", CFG_S_LINE_PREFIX, 0, NULL, NULL},
};

/* ---- Kubeflow ---------------------------------------------------------------
 * PyTorchJob (training operator v1) sets PET_NNODES, PET_NODE_RANK,
 * PET_NPROC_PER_NODE and MASTER_ADDR/MASTER_PORT of the master pod (v2
 * sets PET_MASTER_*, read above). Its WORLD_SIZE counts processes and its
 * RANK is the pod's: both are left to the worker contract. */
static const char *const kubeflow_detect[] = {"PET_NNODES", NULL};
static const sched_var_t kubeflow_vars[] = {
    {"MASTER_ADDR", CFG_S_MASTER_ADDR, 0, NULL, named_endpoint},
    {"MASTER_PORT", CFG_S_MASTER_PORT, 0, NULL, named_endpoint},
};

/* ---- Slurm ----------------------------------------------------------------
 * Inside a job step (srun); a batch script or salloc shell is no step and
 * its SLURM_NNODES counts the allocation. The step's variables come first:
 * a step may use part of the allocation. */

int sched_slurm_port(long long job_id, long long step_id) {
  return 29400 + (int)((job_id % 1000 * 8 + step_id % 1000) % 1000);
}

/* The job's run id: "JOB.STEP", Slurm's name for the step, so that two
 * steps running launch at once are two jobs. */
static int slurm_run_id(const void *view, char *const *envp, const char *v,
                        char **out, char *err, size_t errlen) {
  const char *step = sched_getenv(envp, "SLURM_STEP_ID");
  char b[128];
  (void)view, (void)err, (void)errlen;
  if (step == NULL)
    step = sched_getenv(envp, "SLURM_STEPID");
  snprintf(b, sizeof(b), "%.60s%s%.60s", v, step ? "." : "", step ? step : "");
  return dup_out(b, out);
}

/* The first host of the step's node list, on the step's port. */
static int slurm_endpoint(const void *view, char *const *envp, const char *v,
                          char **out, char *err, size_t errlen) {
  char **hosts = NULL, why[256], b[300];
  size_t n = 0;
  long long job = 0, step = 0;
  (void)view;
  if (lu_hostlist_expand_err(v, 65536, &hosts, &n, why, sizeof(why)) != 0) {
    lu_errf(err, errlen, "the node list '%s' does not parse: %s", v, why);
    return -1;
  }
  if (env_int(envp, "SLURM_JOB_ID", &job) != 0)
    env_int(envp, "SLURM_JOBID", &job);
  if (env_int(envp, "SLURM_STEP_ID", &step) != 0)
    env_int(envp, "SLURM_STEPID", &step);
  snprintf(b, sizeof(b), strchr(hosts[0], ':') ? "[%s]:%d" : "%s:%d",
           hosts[0], sched_slurm_port(job, step));
  lu_hostlist_free(hosts, n);
  return dup_out(b, out);
}

/* "1" on the node named first in the step's node list, the endpoint's
 * host (slurm_endpoint), else "0". That node is not always SLURM_NODEID
 * 0: a heterogeneous step (srun -w gpu03 : -w gpu[01-02]) numbers the
 * nodes component by component while its list is sorted, so node 0
 * (gpu03) would host a server the others look for on gpu01. Without
 * SLURMD_NODENAME, or with one the list does not hold (a front-end
 * node's name), nothing is said: the SLURM_NODEID row decides. */
static int slurm_first_node(const void *view, char *const *envp, const char *v,
                            char **out, char *err, size_t errlen) {
  const char *me = sched_getenv(envp, "SLURMD_NODENAME");
  char **hosts = NULL, why[256];
  size_t n = 0;
  int first;
  (void)view;
  if (me == NULL || *me == '\0')
    return 0;
  if (lu_hostlist_expand_err(v, 65536, &hosts, &n, why, sizeof(why)) != 0) {
    lu_errf(err, errlen, "the node list '%s' does not parse: %s", v, why);
    return -1;
  }
  first = -1;
  for (size_t i = 0; i < n && first < 0; i++)
    if (strcmp(hosts[i], me) == 0)
      first = i == 0;
  lu_hostlist_free(hosts, n);
  return first < 0 ? 0 : dup_out(first ? "1" : "0", out);
}

/* SLURM_GPUS_ON_NODE=0 says nothing about the workers. */
static int positive(const void *view, char *const *envp, const char *v,
                    char **out, char *err, size_t errlen) {
  (void)view, (void)envp, (void)err, (void)errlen;
  return strcmp(v, "0") == 0 ? 0 : dup_out(v, out);
}

/* The GPUs Slurm gave the step: CUDA_VISIBLE_DEVICES' entries (its
 * "NoDevFiles" and empty values mean none). */
static int count_gpus(const void *view, char *const *envp, const char *v,
                      char **out, char *err, size_t errlen) {
  long long n = 1;
  (void)view, (void)envp, (void)err, (void)errlen;
  if (*v == '\0' || strcmp(v, "NoDevFiles") == 0 || strncmp(v, "-1", 2) == 0)
    return 0;
  for (const char *p = v; *p; p++)
    n += *p == ',';
  return num_out(out, n);
}

/* Slurm warns with SIGUSR1/SIGUSR2 (--signal) before SIGTERM: forward them
 * too, or the default action would kill the agent. */
static int slurm_signals(const void *view, char *const *envp, const char *v,
                         char **out, char *err, size_t errlen) {
  (void)view, (void)envp, (void)v, (void)err, (void)errlen;
  return dup_out("SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2", out);
}

/* This node's tasks, from "2(x3),1" and SLURM_NODEID. */
static int slurm_tasks_here(const void *view, char *const *envp, const char *v,
                            char **out, char *err, size_t errlen) {
  long long node;
  int k;
  char why[256];
  (void)view;
  if (env_int(envp, "SLURM_NODEID", &node) != 0 || node > (1 << 24))
    return 0;
  if (lu_tasks_per_node(v, (int)node, &k, NULL, why, sizeof(why)) != 0) {
    lu_errf(err, errlen, "%s", why);
    return -1;
  }
  return num_out(out, k);
}

/* SLURM_CPU_BIND_TYPE: "none" (or "none," with verbose) when Slurm left
 * the CPUs alone; anything else is a binding (task/affinity). */
static int slurm_bound(const void *view, char *const *envp, const char *v,
                       char **out, char *err, size_t errlen) {
  (void)view, (void)envp, (void)err, (void)errlen;
  return dup_out(strstr(v, "none") ? "0" : "1", out);
}

static const char *const slurm_detect[] = {"SLURM_STEP_ID", "SLURM_STEPID",
                                           NULL};
static const sched_var_t slurm_vars[] = {
    {"SLURM_STEP_NUM_NODES", CFG_S_NNODES, 0, NULL, alone},
    {"SLURM_NNODES", CFG_S_NNODES, 0, NULL, alone},
    {"SLURM_JOB_NUM_NODES", CFG_S_NNODES, 0, NULL, alone},
    {"SLURM_NODEID", CFG_S_NODE_INDEX, 0, NULL, NULL},
    {"SLURM_STEP_NODELIST", CFG_S_EXPECTED_HOSTS, 0, NULL, NULL},
    {"SLURM_JOB_NODELIST", CFG_S_EXPECTED_HOSTS, 0, NULL, NULL},
    {"SLURM_STEP_NODELIST", CFG_S_SCHED_ENDPOINT, 0, slurm_endpoint, named_rdzv},
    {"SLURM_JOB_NODELIST", CFG_S_SCHED_ENDPOINT, 0, slurm_endpoint, named_rdzv},
    {"SLURM_STEP_NODELIST", CFG_S_SCHED_HOST, 0, slurm_first_node, NULL},
    {"SLURM_JOB_NODELIST", CFG_S_SCHED_HOST, 0, slurm_first_node, NULL},
    {"SLURM_NODEID", CFG_S_SCHED_HOST, 0, index_is_zero, NULL},
    /* several slurmd may share a host: the node's name is slurmd's */
    {"SLURMD_NODENAME", CFG_S_HOSTNAME, 0, NULL, NULL},
    {"SLURM_JOB_ID", CFG_S_ID, 0, slurm_run_id, alone},
    {"SLURM_JOBID", CFG_S_ID, 0, slurm_run_id, alone},
    {"SLURM_GPUS_ON_NODE", CFG_S_NPROC, 0, positive, own_tasks},
    {"CUDA_VISIBLE_DEVICES", CFG_S_NPROC, 0, count_gpus, own_tasks},
    {NULL, CFG_S_SIGNALS, 0, slurm_signals, NULL},
    /* --from-tasks: this task's place */
    {"SLURM_PROCID", CFG_S_TASK_RANK, 0, NULL, NULL},
    {"SLURM_LOCALID", CFG_S_TASK_LOCAL_RANK, 0, NULL, NULL},
    {"SLURM_STEP_NUM_TASKS", CFG_S_TASK_WORLD, 0, NULL, NULL},
    {"SLURM_NTASKS", CFG_S_TASK_WORLD, 0, NULL, NULL},
    {"SLURM_STEP_TASKS_PER_NODE", CFG_S_TASK_LOCAL_WORLD, 0, slurm_tasks_here,
     NULL},
    {"SLURM_TASKS_PER_NODE", CFG_S_TASK_LOCAL_WORLD, 0, slurm_tasks_here, NULL},
    {"SLURM_NTASKS_PER_NODE", CFG_S_TASK_LOCAL_WORLD, 0, NULL, NULL},
    {"SLURM_CPU_BIND_TYPE", CFG_S_SCHED_BOUND, 0, slurm_bound, NULL},
};

/* ---- Volcano -----------------------------------------------------------------
 * The env plugin gives the pod's index in its task (VC_TASK_INDEX, and
 * VK_TASK_INDEX, the old name); the svc plugin each task's pods, one name
 * a line in /etc/volcano/<task>.host (LAUNCH_VOLCANO_ROOT for tests) and
 * in VC_<TASK>_HOSTS / VC_<TASK>_NUM; the pytorch plugin MASTER_ADDR,
 * MASTER_PORT, and WORLD_SIZE and RANK, which count pods, not processes. */

#define VC_MAX_TASKS 64

typedef struct vc_task_s {
  char key[128];    /* upper case, '-' as '_': how VC_<TASK>_HOSTS spells it */
  char **hosts;
  size_t n;
} vc_task_t;

typedef struct vc_view_s {
  char **hosts;     /* this launch job's pods, in node order */
  size_t n;
  long long index;  /* this pod's node index, -1 */
  /* A job of several tasks without the pytorch plugin: every task's pods in
   * the plugin's order, this pod's place among them and its task's pod
   * count. They are the launch job's when its node count is more than the
   * task's (config.c): the tasks then form one launch job. */
  char **job_hosts;
  size_t job_n;
  long long job_index; /* -1 */
  size_t task_off;  /* the first pod of this pod's task in job_hosts */
  long long world;  /* the pytorch plugin's pod count, -1 */
  char job[128];    /* the Volcano job's name (the svc plugin's subdomain) */
  char endpoint[300];
  /* Why this pod's launch job is unknown: said only by the rows that need
   * it, so that flags giving what it would give leave it unsaid. */
  char why[768];
} vc_view_t;

static void vc_key(const char *name, size_t len, char *key, size_t cap) {
  size_t i;
  for (i = 0; i < len && i + 1 < cap; i++)
    key[i] = name[i] == '-' ? '_'
             : (name[i] >= 'a' && name[i] <= 'z') ? (char)(name[i] - 32)
                                                  : name[i];
  key[i] = '\0';
}

/* A task's name as its job spec spells it (lower case, '_' for '-'). */
static void vc_name(const char *key, char *out, size_t cap) {
  size_t i;
  for (i = 0; key[i] && i + 1 < cap; i++)
    out[i] = (char)tolower((unsigned char)key[i]);
  out[i] = '\0';
}

static vc_task_t *vc_find(vc_task_t *t, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(t[i].key, key) == 0)
      return &t[i];
  return NULL;
}

/* One task's host list, one name a line (a file) or comma-separated. */
static int vc_add(vc_task_t *t, int *n, const char *key, char *list, int sep,
                  const char *where, char *err, size_t errlen) {
  char why[256];
  vc_task_t *x;
  if (vc_find(t, *n, key) != NULL)
    return 0; /* the host file beats the variable */
  if (*n == VC_MAX_TASKS) {
    lu_errf(err, errlen, "more than %d Volcano tasks", VC_MAX_TASKS);
    return -1;
  }
  x = &t[(*n)++];
  lu_strlcpy(x->key, key, sizeof(x->key));
  x->hosts = NULL;
  x->n = 0;
  for (char *p = list; *p; p++)
    if (*p == sep)
      *p = ',';
  lu_rtrim(list, strlen(list));
  while (list[0] && list[strlen(list) - 1] == ',')
    list[strlen(list) - 1] = '\0';
  if (lu_hostlist_expand_err(list, 65536, &x->hosts, &x->n, why, sizeof(why))) {
    lu_errf(err, errlen, "%s does not list host names: %s", where, why);
    return -1;
  }
  return 0;
}

/* Every task's hosts: the svc plugin's files, then its variables. */
static int vc_tasks(char *const *envp, vc_task_t *t, int *n, char *err,
                    size_t errlen) {
  const char *root = sched_getenv(envp, "LAUNCH_VOLCANO_ROOT");
  DIR *d;
  struct dirent *e;
  int rc = 0;
  *n = 0;
  if (root == NULL || *root == '\0')
    root = "/etc/volcano";
  if ((d = opendir(root)) != NULL) {
    while (rc == 0 && (e = readdir(d)) != NULL) {
      size_t l = strlen(e->d_name);
      char path[4352], key[128], *data = NULL;
      size_t len;
      if (l <= 5 || strcmp(e->d_name + l - 5, ".host") != 0 ||
          e->d_name[0] == '.')
        continue;
      snprintf(path, sizeof(path), "%.4000s/%s", root, e->d_name);
      if (lu_read_file(path, 64u << 20, &data, &len) != 0)
        continue; /* a ConfigMap's symlinks to directories */
      vc_key(e->d_name, l - 5, key, sizeof(key));
      rc = vc_add(t, n, key, data, '\n', path, err, errlen);
      free(data);
    }
    closedir(d);
  }
  for (size_t i = 0; rc == 0 && envp && envp[i]; i++) {
    const char *s = envp[i], *eq = strchr(s, '=');
    char key[128], where[160], *list;
    if (strncmp(s, "VC_", 3) != 0 || eq == NULL || eq - s < 10 ||
        strncmp(eq - 6, "_HOSTS", 6) != 0 || eq[1] == '\0')
      continue;
    vc_key(s + 3, (size_t)(eq - 6 - s - 3), key, sizeof(key));
    snprintf(where, sizeof(where), "%.*s", (int)LU_MIN(eq - s, 150), s);
    if ((list = strdup(eq + 1)) == NULL)
      return -1;
    rc = vc_add(t, n, key, list, ',', where, err, errlen);
    free(list);
  }
  return rc;
}

/* a and b name the same pod: equal, or one is the other's first label. */
static int same_pod(const char *a, const char *b) {
  size_t la = strcspn(a, "."), lb = strcspn(b, ".");
  return strcmp(a, b) == 0 || (la == lb && strncmp(a, b, la) == 0 &&
                               (a[la] == '\0' || b[lb] == '\0'));
}

static int vc_append(vc_view_t *v, const vc_task_t *t) {
  char **nv = realloc(v->hosts, (v->n + t->n + 1) * sizeof(char *));
  if (nv == NULL)
    return -1;
  v->hosts = nv;
  for (size_t i = 0; i < t->n; i++)
    if ((v->hosts[v->n++] = strdup(t->hosts[i])) == NULL)
      return -1;
  return 0;
}

static int cmp_task(const void *a, const void *b) {
  return strcmp(((const vc_task_t *)a)->key, ((const vc_task_t *)b)->key);
}

/* Move t[i] to the front of t[at..i]. */
static void vc_to_front(vc_task_t *t, int at, int i) {
  vc_task_t x = t[i];
  memmove(&t[at + 1], &t[at], (size_t)(i - at) * sizeof(*t));
  t[at] = x;
}

/* The tasks in the pytorch plugin's order: its master task (master: the
 * key of the one whose first pod MASTER_ADDR names, NULL for the task named
 * "master"), its worker task ("worker": RANK = the pod's index + 1), then
 * the others by name. */
static void vc_order(vc_task_t *t, int n, const char *master) {
  char key[sizeof(t->key)];
  vc_task_t *m;
  int at = 0;
  /* by key: the sort moves the task (and master, when it is its key) */
  lu_strlcpy(key, master ? master : "MASTER", sizeof(key));
  qsort(t, (size_t)n, sizeof(*t), cmp_task);
  if ((m = vc_find(t, n, key)) != NULL)
    vc_to_front(t, at++, (int)(m - t));
  for (int i = at; i < n; i++)
    if (strcmp(t[i].key, "WORKER") == 0)
      vc_to_front(t, at++, i);
}

/* The env plugin's index of this pod in its task. RET 0 or -1. */
static int vc_task_index(char *const *envp, long long *index, char *err,
                         size_t errlen) {
  const char *name;
  if (env_int(envp, "VC_TASK_INDEX", index) == 0 ||
      env_int(envp, "VK_TASK_INDEX", index) == 0)
    return 0;
  name = sched_getenv(envp, "VC_TASK_INDEX") ? "VC_TASK_INDEX" : "VK_TASK_INDEX";
  lu_errf(err, errlen, "%s=%s is not a pod index", name, sched_getenv(envp, name));
  return -1;
}

/* The pytorch plugin's worker task, t[0] its master task: the task named
 * "worker", LAUNCH_VOLCANO_TASK's or the one holding HOSTNAME when it is
 * not the master's (the plugin sets RANK and WORLD_SIZE in those two tasks'
 * pods only), the first of them whose pods and the master's make WORLD_SIZE,
 * else the one task that does; else the first of them. RET its index, 0 for
 * none. */
static int vc_worker(char *const *envp, const vc_task_t *t, int n,
                     long long world) {
  const char *want = sched_getenv(envp, "LAUNCH_VOLCANO_TASK");
  const char *me = sched_getenv(envp, "HOSTNAME");
  char key[128] = "";
  int cand[3] = {0, 0, 0}, fit = 0, fits = 0;
  if (want && *want)
    vc_key(want, strlen(want), key, sizeof(key));
  for (int i = 1; i < n; i++) {
    if (strcmp(t[i].key, "WORKER") == 0)
      cand[0] = i;
    if (key[0] && strcmp(t[i].key, key) == 0)
      cand[1] = i;
    for (size_t j = 0; me && *me && j < t[i].n && cand[2] == 0; j++)
      if (same_pod(me, t[i].hosts[j]))
        cand[2] = i;
    if ((long long)(t[0].n + t[i].n) == world) {
      fits++;
      fit = i;
    }
  }
  for (int c = 0; c < 3; c++)
    if (cand[c] > 0 && (long long)(t[0].n + t[cand[c]].n) == world)
      return cand[c];
  if (fits == 1)
    return fit;
  for (int c = 0; c < 3; c++)
    if (cand[c] > 0)
      return cand[c];
  return 0;
}

/* The pods of this launch job in node order: the pytorch plugin's master
 * task, its worker task, then the other tasks by name; else the one task,
 * the task named by LAUNCH_VOLCANO_TASK, or the task holding this pod's
 * HOSTNAME. */
static int vc_pick(char *const *envp, vc_view_t *v, vc_task_t *t, int n,
                   char *err, size_t errlen) {
  const char *want = sched_getenv(envp, "LAUNCH_VOLCANO_TASK");
  const char *me = sched_getenv(envp, "HOSTNAME");
  char key[128], names[512] = "", handset[256] = "";
  vc_task_t *pick = NULL;
  vc_order(t, n, NULL);
  for (int i = 0; i < n; i++) {
    vc_name(t[i].key, key, sizeof(key));
    lu_list_add(names, sizeof(names), key);
  }
  /* MASTER_ADDR, WORLD_SIZE and RANK are the pytorch plugin's when
   * MASTER_ADDR is a task's first pod and WORLD_SIZE counts the job's pods.
   * Runbooks set them by hand for torchrun, which reads none of them (its
   * workers get their own): WORLD_SIZE=64 for 8 pods of 8 GPUs. Then the
   * pod's place comes from the env and svc plugins, as without them. The
   * plugin's RANK is the pod's place whatever LAUNCH_VOLCANO_TASK says (a
   * pod on the host's network names its task: HOSTNAME is the host's). */
  if (v->world >= 0 && n > 0) {
    const char *master = sched_getenv(envp, "MASTER_ADDR");
    size_t pods = 0, ours = 0;
    int tasks = n, w;
    for (int i = 0; i < n; i++) {
      pods += t[i].n;
      if (pick == NULL && t[i].n > 0 && same_pod(master, t[i].hosts[0]))
        pick = &t[i];
    }
    if (pick) {
      /* the plugin counts the master and worker tasks' pods (Volcano
       * #4238; before it, every task's): those tasks come first, its
       * RANK counts the master's pods, then the worker's */
      vc_order(t, n, pick->key);
      pick = &t[0];
      if ((w = vc_worker(envp, t, n, v->world)) > 1)
        vc_to_front(t, 1, w);
      ours = t[0].n + (w > 0 ? t[1].n : 0);
      if ((long long)pods != v->world && (long long)ours == v->world)
        tasks = w > 0 ? 2 : 1;
    }
    if (pick && ((long long)pods == v->world || (long long)ours == v->world)) {
      for (int i = 0; i < tasks; i++)
        if (vc_append(v, &t[i]) != 0)
          return -1;
      return 0;
    }
    snprintf(handset, sizeof(handset), " (WORLD_SIZE=%lld and MASTER_ADDR="
             "%.80s are set by hand, not by the pytorch plugin: the job has "
             "%zu pods)", v->world, master, pods);
    pick = NULL;
    v->world = -1;
    if (vc_task_index(envp, &v->index, err, errlen) != 0)
      return -1;
  }
  if (want && *want) {
    vc_key(want, strlen(want), key, sizeof(key));
    if ((pick = vc_find(t, n, key)) == NULL) {
      lu_errf(err, errlen, "LAUNCH_VOLCANO_TASK=%s is not a task of this "
              "Volcano job (tasks: %s)", want, n ? names : "none");
      return -1;
    }
  } else if (n == 1) {
    pick = &t[0];
  } else if (n > 1) {
    for (int i = 0; i < n && pick == NULL; i++)
      for (size_t j = 0; me && j < t[i].n && pick == NULL; j++)
        if (same_pod(me, t[i].hosts[j]))
          pick = &t[i];
    if (pick == NULL) {
      lu_errf(v->why, sizeof(v->why), "this Volcano job has tasks %s and "
              "HOSTNAME=%s is none of their pods%s: set LAUNCH_VOLCANO_TASK to "
              "this pod's task, or give --nnodes and --rdzv-endpoint", names,
              me ? me : "(unset)", handset);
      return 0;
    }
  }
  if (pick && n > 1) {
    /* the job's pods, for a launch job of several tasks */
    vc_view_t job = {0};
    for (int i = 0; i < n; i++) {
      if (&t[i] == pick)
        v->task_off = job.n;
      if (vc_append(&job, &t[i]) != 0) {
        lu_hostlist_free(job.hosts, job.n);
        return -1;
      }
    }
    v->job_hosts = job.hosts;
    v->job_n = job.n;
  }
  return pick ? vc_append(v, pick) : 0;
}

static void vc_close(void *view) {
  vc_view_t *v = view;
  if (v == NULL)
    return;
  lu_hostlist_free(v->hosts, v->n);
  lu_hostlist_free(v->job_hosts, v->job_n);
  free(v);
}

static int vc_open(char *const *envp, void **out, char *err, size_t errlen) {
  vc_view_t *v = calloc(1, sizeof(*v));
  vc_task_t *t = calloc(VC_MAX_TASKS, sizeof(*t));
  long long port = 23456;
  int n = 0, rc = -1;
  if (v == NULL || t == NULL)
    goto out;
  v->index = v->world = v->job_index = -1;
  /* the pytorch plugin's pod rank and count, if they are (vc_pick) */
  if (sched_getenv(envp, "MASTER_ADDR") && env_int(envp, "RANK", &v->index) == 0 &&
      env_int(envp, "WORLD_SIZE", &v->world) != 0)
    v->index = -1;
  if (v->index < 0 && vc_task_index(envp, &v->index, err, errlen) != 0)
    goto out;
  if (vc_tasks(envp, t, &n, err, errlen) != 0 ||
      vc_pick(envp, v, t, n, err, errlen) != 0)
    goto out;
  if (v->n > 0 && v->index >= (long long)v->n) {
    lu_errf(err, errlen, "this pod's index %lld is not below the job's %zu "
            "pods", v->index, v->n);
    goto out;
  }
  if (v->job_n > 0 && v->index >= 0)
    v->job_index = (long long)v->task_off + v->index;
  /* The run id: the job's name, every task's subdomain, the same in
   * every pod: the tasks given one --rdzv-endpoint form one launch job
   * (as torchrun's run id "none"); without it each task's pod 0 hosts its
   * own. */
  for (int i = 0; i < n && v->job[0] == '\0'; i++)
    if (t[i].n > 0 && strchr(t[i].hosts[0], '.')) {
      const char *sub = strchr(t[i].hosts[0], '.') + 1;
      snprintf(v->job, sizeof(v->job), "%.*s",
               (int)LU_MIN(strcspn(sub, "."), 120), sub);
    }
  if (v->world >= 0) {
    env_int(envp, "MASTER_PORT", &port);
    snprintf(v->endpoint, sizeof(v->endpoint), "%.256s:%lld",
             sched_getenv(envp, "MASTER_ADDR"), port);
  } else if (v->n > 0) {
    snprintf(v->endpoint, sizeof(v->endpoint), "%.256s:%d", v->hosts[0],
             RDZV_DEFAULT_PORT);
  }
  rc = 0;
out:
  for (int i = 0; t && i < n; i++)
    lu_hostlist_free(t[i].hosts, t[i].n);
  free(t);
  if (rc != 0) {
    vc_close(v);
    if (err && !err[0])
      lu_errf(err, errlen, "out of memory");
    return -1;
  }
  *out = v;
  return 0;
}

static int vc_nnodes(const void *view, char *const *envp, const char *v,
                     char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v;
  if (x->why[0]) {
    lu_errf(err, errlen, "%s", x->why);
    return -1;
  }
  return x->world >= 0 ? num_out(out, x->world)
         : x->n > 0    ? num_out(out, (long long)x->n)
                       : 0;
}

static int vc_index(const void *view, char *const *envp, const char *v,
                    char **out, char *err, size_t errlen) {
  (void)envp, (void)v, (void)err, (void)errlen;
  return num_out(out, ((const vc_view_t *)view)->index);
}

static int vc_is_host(const void *view, char *const *envp, const char *v,
                      char **out, char *err, size_t errlen) {
  (void)envp, (void)v, (void)err, (void)errlen;
  return dup_out(((const vc_view_t *)view)->index == 0 ? "1" : "0", out);
}

static int vc_hosts(const void *view, char *const *envp, const char *v,
                    char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  size_t len = 1;
  (void)envp, (void)v, (void)err, (void)errlen;
  if (x->n == 0)
    return 0;
  for (size_t i = 0; i < x->n; i++)
    len += strlen(x->hosts[i]) + 1;
  if ((*out = malloc(len)) == NULL)
    return -1;
  (*out)[0] = '\0';
  for (size_t i = 0; i < x->n; i++) {
    if (i)
      strcat(*out, ",");
    strcat(*out, x->hosts[i]);
  }
  return 1;
}

/* This pod's place among the pods of every task, and its task's pod count:
 * config.c takes the first for the node index when the node count is more
 * than the second. */
static int vc_job_index(const void *view, char *const *envp, const char *v,
                        char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v, (void)err, (void)errlen;
  return x->job_index >= 0 ? num_out(out, x->job_index) : 0;
}

static int vc_task_nodes(const void *view, char *const *envp, const char *v,
                         char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v, (void)err, (void)errlen;
  return x->job_index >= 0 ? num_out(out, (long long)x->n) : 0;
}

static int vc_job_hosts(const void *view, char *const *envp, const char *v,
                        char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  vc_view_t job = {.hosts = x->job_hosts, .n = x->job_index >= 0 ? x->job_n : 0};
  return vc_hosts(&job, envp, v, out, err, errlen);
}

/* The pod's name as its peers list it, so that "missing" names match. */
static int vc_my_host(const void *view, char *const *envp, const char *v,
                      char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v, (void)err, (void)errlen;
  return x->n > 0 ? dup_out(x->hosts[x->index], out) : 0;
}

static int vc_job(const void *view, char *const *envp, const char *v,
                  char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v, (void)err, (void)errlen;
  return x->job[0] ? dup_out(x->job, out) : 0;
}

static int vc_endpoint(const void *view, char *const *envp, const char *v,
                       char **out, char *err, size_t errlen) {
  const vc_view_t *x = view;
  (void)envp, (void)v;
  if (x->why[0]) {
    lu_errf(err, errlen, "%s", x->why);
    return -1;
  }
  return x->endpoint[0] ? dup_out(x->endpoint, out) : 0;
}

static const char *const volcano_detect[] = {"VC_TASK_INDEX", "VK_TASK_INDEX",
                                             NULL};
/* This pod's place in the job stands aside when an earlier source gave
 * the node index. */
static const int own_index[] = {CFG_S_NODE_INDEX, -1};
static const sched_var_t volcano_vars[] = {
    {NULL, CFG_S_NNODES, 0, vc_nnodes, alone},
    {NULL, CFG_S_SCHED_JOB_INDEX, 0, vc_job_index, own_index},
    {NULL, CFG_S_SCHED_TASK_NODES, 0, vc_task_nodes, own_index},
    {NULL, CFG_S_SCHED_JOB_HOSTS, 0, vc_job_hosts, own_index},
    {NULL, CFG_S_NODE_INDEX, 0, vc_index, NULL},
    {NULL, CFG_S_EXPECTED_HOSTS, 0, vc_hosts, NULL},
    {NULL, CFG_S_HOSTNAME, 0, vc_my_host, NULL},
    {NULL, CFG_S_ID, 0, vc_job, alone},
    {NULL, CFG_S_SCHED_ENDPOINT, 0, vc_endpoint, named_rdzv},
    {NULL, CFG_S_SCHED_HOST, 0, vc_is_host, NULL},
};

/* In order of precedence. */
#define SOURCE(name, d, v, o, c) {name, d, v, LU_ARRAY_SIZE(v), o, c}
static const sched_source_t sources[] = {
    SOURCE("launch", NULL, launch_vars, NULL, NULL),
    SOURCE("torchrun", NULL, torchrun_vars, NULL, NULL),
    SOURCE("Kubeflow", kubeflow_detect, kubeflow_vars, NULL, NULL),
    SOURCE("Slurm", slurm_detect, slurm_vars, NULL, NULL),
    SOURCE("Volcano", volcano_detect, volcano_vars, vc_open, vc_close),
};

const char *sched_getenv(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++)
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
      return envp[i] + n + 1;
  return NULL;
}

static int detected(char *const *envp, const char *const *detect) {
  for (size_t i = 0; detect && detect[i]; i++)
    if (sched_getenv(envp, detect[i]))
      return 1;
  return detect == NULL;
}

static int moot(const unsigned char *seen, const int *unless) {
  for (size_t i = 0; unless && unless[i] >= 0; i++)
    if (seen[unless[i]])
      return 1;
  return 0;
}

/* One row of src: RET 0 or an error. */
static int read_row(const sched_source_t *src, const sched_var_t *v,
                    const void *view, char *const *envp, unsigned char *seen,
                    sched_apply_fn apply, void *ctx, char *err,
                    size_t errlen) {
  const char *val = v->var ? sched_getenv(envp, v->var) : NULL;
  char *derived = NULL, why[512] = "";
  int rc;
  if ((v->var && (val == NULL || (*val == '\0' && !v->keep_empty))) ||
      seen[v->setting] || moot(seen, v->unless))
    return 0;
  if (v->derive) {
    rc = v->derive(view, envp, val, &derived, why, sizeof(why));
    if (rc < 0) {
      if (v->var)
        lu_errf(err, errlen, "%s: %s=%s: %s (docs/schedulers.md)", src->name,
                v->var, val, why[0] ? why : "out of memory");
      else
        lu_errf(err, errlen, "%s: %s (docs/schedulers.md)", src->name,
                why[0] ? why : "out of memory");
      return -1;
    }
    if (rc == 0)
      return 0;
  }
  rc = apply(ctx, v->setting, v->var ? v->var : src->name,
             derived ? derived : val, err, errlen);
  free(derived);
  if (rc == 0)
    seen[v->setting] = 1;
  return rc;
}

static int read_sources(size_t nsources, char *const *envp,
                        unsigned char *seen, sched_apply_fn apply, void *ctx,
                        char *err, size_t errlen) {
  for (size_t s = 0; s < nsources; s++) {
    const sched_source_t *src = &sources[s];
    void *view = NULL;
    int rc = 0;
    if (!detected(envp, src->detect))
      continue;
    if (src->open && src->open(envp, &view, err, errlen) != 0) {
      char why[512];
      lu_strlcpy(why, err, sizeof(why));
      lu_errf(err, errlen, "%s: %s (docs/schedulers.md)", src->name, why);
      return -1;
    }
    for (size_t i = 0; i < src->n && rc == 0; i++)
      rc = read_row(src, &src->vars[i], view, envp, seen, apply, ctx, err,
                    errlen);
    if (src->close)
      src->close(view);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int sched_read(char *const *envp, unsigned char *seen, sched_apply_fn apply,
               void *ctx, char *err, size_t errlen) {
  return read_sources(LU_ARRAY_SIZE(sources), envp, seen, apply, ctx, err,
                      errlen);
}

/* sources[0] is launch's own. */
int sched_read_own(char *const *envp, unsigned char *seen,
                   sched_apply_fn apply, void *ctx, char *err, size_t errlen) {
  return read_sources(1, envp, seen, apply, ctx, err, errlen);
}

const char *sched_own_var(int setting) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(launch_vars); i++)
    if (launch_vars[i].setting == setting)
      return launch_vars[i].var;
  return NULL;
}
