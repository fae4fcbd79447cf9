/* sched.c - the environment the job starts in: launch's own variables,
 * torchrun's, and what the schedulers (Slurm, Volcano) say about the job,
 * one table per source, each row feeding one setting of config.c. Adding
 * a scheduler (LSF, PBS, Flux) is one more table in `sources`. */
#include <string.h>

#include "config.h"
#include "lu.h"

typedef struct sched_var_s {
  const char *var;
  int setting;    /* cfg_setting_t */
  int keep_empty; /* an empty value means something (CUDA_VISIBLE_DEVICES="") */
} sched_var_t;

/* launch's own, and the process environment the agent uses. */
static const sched_var_t launch_vars[] = {
    {"LAUNCH_HOSTNAME", CFG_S_HOSTNAME, 0},
    {"LAUNCH_EXPECTED_HOSTS", CFG_S_EXPECTED_HOSTS, 0},
    {"LAUNCH_TORCH_STORE", CFG_S_TORCH_STORE, 0},
    {"LAUNCH_TOKEN_FILE", CFG_S_TOKEN_FILE, 0},
    {"LAUNCH_TLS_CA", CFG_S_TLS_CA, 0},
    {"LAUNCH_TLS_CERT", CFG_S_TLS_CERT, 0},
    {"LAUNCH_TLS_KEY", CFG_S_TLS_KEY, 0},
    {"LAUNCH_CPU_BIND", CFG_S_CPU_BIND, 0},
    {"LAUNCH_MEM_BIND", CFG_S_MEM_BIND, 0},
    {"LAUNCH_NCCL_PROFILE", CFG_S_NCCL_PROFILE, 0},
    {"LAUNCH_LINT", CFG_S_LINT, 0},
    {"PYTHON_EXEC", CFG_S_PYTHON, 0},
    {"TMPDIR", CFG_S_TMPDIR, 0},
    {"CUDA_VISIBLE_DEVICES", CFG_S_CUDA_VISIBLE, 1},
};

/* torchrun: each flag's PET_* variable (Kubeflow's PyTorchJob sets them),
 * and torchelastic's own. */
static const sched_var_t torchrun_vars[] = {
    {"PET_NNODES", CFG_S_NNODES, 0},
    {"PET_NPROC_PER_NODE", CFG_S_NPROC, 0},
    {"PET_RDZV_BACKEND", CFG_S_BACKEND, 0},
    {"PET_RDZV_ENDPOINT", CFG_S_ENDPOINT, 0},
    {"PET_RDZV_ID", CFG_S_ID, 0},
    {"PET_RDZV_CONF", CFG_S_CONF, 0},
    {"PET_STANDALONE", CFG_S_STANDALONE, 0},
    {"PET_MAX_RESTARTS", CFG_S_MAX_RESTARTS, 0},
    {"PET_MONITOR_INTERVAL", CFG_S_MONITOR, 0},
    {"PET_START_METHOD", CFG_S_START_METHOD, 0},
    {"PET_ROLE", CFG_S_ROLE, 0},
    {"PET_MODULE", CFG_S_MODULE, 0},
    {"PET_NO_PYTHON", CFG_S_NO_PYTHON, 0},
    {"PET_RUN_PATH", CFG_S_RUN_PATH, 0},
    {"PET_LOG_DIR", CFG_S_LOG_DIR, 0},
    {"PET_REDIRECTS", CFG_S_REDIRECTS, 0},
    {"PET_TEE", CFG_S_TEE, 0},
    {"PET_LOCAL_RANKS_FILTER", CFG_S_RANKS_FILTER, 0},
    {"PET_NODE_RANK", CFG_S_NODE_RANK, 0},
    {"PET_MASTER_ADDR", CFG_S_MASTER_ADDR, 0},
    {"PET_MASTER_PORT", CFG_S_MASTER_PORT, 0},
    {"PET_LOCAL_ADDR", CFG_S_LOCAL_ADDR, 0},
    {"PET_SIGNALS_TO_HANDLE", CFG_S_SIGNALS, 0},
    {"PET_EVENT_LOG_HANDLER", CFG_S_EVENT_LOG, 0},
    {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", CFG_S_STOP_TIMEOUT, 0},
    {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", CFG_S_LINE_PREFIX, 0},
};

/* Slurm: the node's index in the allocation orders the nodes; the node
 * list names who is missing while the job waits. */
static const sched_var_t slurm_vars[] = {
    {"SLURM_NODEID", CFG_S_NODE_INDEX, 0},
    {"SLURM_JOB_NODELIST", CFG_S_EXPECTED_HOSTS, 0},
};

/* Volcano: the pod's index in its task. */
static const sched_var_t volcano_vars[] = {
    {"VC_TASK_INDEX", CFG_S_NODE_INDEX, 0},
};

/* In order of precedence. */
static const struct {
  const sched_var_t *vars;
  size_t n;
} sources[] = {
    {launch_vars, LU_ARRAY_SIZE(launch_vars)},
    {torchrun_vars, LU_ARRAY_SIZE(torchrun_vars)},
    {slurm_vars, LU_ARRAY_SIZE(slurm_vars)},
    {volcano_vars, LU_ARRAY_SIZE(volcano_vars)},
};

const char *sched_getenv(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++)
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
      return envp[i] + n + 1;
  return NULL;
}

int sched_read(char *const *envp, unsigned char *seen, sched_apply_fn apply,
               void *ctx, char *err, size_t errlen) {
  for (size_t s = 0; s < LU_ARRAY_SIZE(sources); s++)
    for (size_t i = 0; i < sources[s].n; i++) {
      const sched_var_t *v = &sources[s].vars[i];
      const char *val = sched_getenv(envp, v->var);
      int rc;
      if (val == NULL || (*val == '\0' && !v->keep_empty) || seen[v->setting])
        continue;
      if ((rc = apply(ctx, v->setting, v->var, val, err, errlen)) != 0)
        return rc;
      seen[v->setting] = 1;
    }
  return 0;
}
