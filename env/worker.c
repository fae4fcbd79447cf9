/* worker.c - a rank's whole environment: inherited, torchrun's contract and
 * launch's variables, the binding, the NCCL profile, the lock. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "env.h"

static const char *const tls_vars[3] = {
    "LAUNCH_RDZV_TLS_CA", "LAUNCH_RDZV_TLS_CERT", "LAUNCH_RDZV_TLS_KEY"};

static int seti(env_t *e, const char *key, long long v) {
  char b[32];
  snprintf(b, sizeof(b), "%lld", v);
  return env_set(e, key, b, ENV_SRC_LAUNCH, "launcher");
}

static int sets(env_t *e, const char *key, const char *v) {
  return env_set(e, key, v, ENV_SRC_LAUNCH, "launcher");
}

/* torchrun's contract (the variables torchrun 1.13 and 2.x give each
 * worker), then launch's own. Inherited values of the variables torchrun
 * sets only when unset stay. */
static int set_contract(env_t *e, const env_contract_t *c, lu_log_t *log) {
  char path[4200];
  int rc = 0;
  const env_var_t *omp = env_find(e, "OMP_NUM_THREADS");
  rc |= seti(e, "LOCAL_RANK", c->local_rank);
  rc |= seti(e, "RANK", c->base_rank + c->local_rank);
  rc |= seti(e, "GROUP_RANK", c->node_rank);
  rc |= seti(e, "ROLE_RANK", c->base_rank + c->local_rank);
  rc |= sets(e, "ROLE_NAME", c->role);
  rc |= seti(e, "LOCAL_WORLD_SIZE", c->nproc);
  rc |= seti(e, "WORLD_SIZE", c->world_size);
  rc |= seti(e, "GROUP_WORLD_SIZE", c->nnodes);
  rc |= seti(e, "ROLE_WORLD_SIZE", c->world_size);
  rc |= sets(e, "MASTER_ADDR", c->master_addr);
  rc |= seti(e, "MASTER_PORT", c->master_port);
  rc |= seti(e, "TORCHELASTIC_RESTART_COUNT", c->restarts);
  rc |= seti(e, "TORCHELASTIC_MAX_RESTARTS", c->max_restarts);
  rc |= sets(e, "TORCHELASTIC_RUN_ID", c->run_id);
  rc |= sets(e, "TORCHELASTIC_USE_AGENT_STORE", c->agent_store ? "True" : "False");
  snprintf(path, sizeof(path), "%s/%d/error.json", c->attempt_dir, c->local_rank);
  rc |= sets(e, "TORCHELASTIC_ERROR_FILE", path);
  rc |= sets(e, "TORCHELASTIC_SIGNALS_TO_HANDLE", c->signals);
  /* The name the worker's PyTorch reads: before 2.2 only
   * NCCL_ASYNC_ERROR_HANDLING; from 2.2 TORCH_NCCL_ASYNC_ERROR_HANDLING,
   * with a deprecation warning on every rank when the old name is set. */
  {
    const char *name = c->torch_version > 0 && c->torch_version < 202
                           ? "NCCL_ASYNC_ERROR_HANDLING"
                           : "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    if (env_find(e, name) == NULL)
      rc |= sets(e, name, "1");
  }
  if (omp == NULL && c->nproc > 1) {
    rc |= sets(e, "OMP_NUM_THREADS", "1");
    if (log) /* the agent's start line says it */
      LU_DBG(log, LU_DBG_ENV, "setting OMP_NUM_THREADS=1 for each worker, to "
                              "avoid overloading the node");
  }
  rc |= sets(e, "LAUNCH_RDZV_ENDPOINT", c->rdzv_endpoint);
  rc |= sets(e, "LAUNCH_RDZV_ID", c->run_id);
  if (c->token_file && c->token_file[0])
    rc |= sets(e, "LAUNCH_RDZV_TOKEN_FILE", c->token_file);
  for (int i = 0; i < 3; i++)
    if (c->tls[i] && c->tls[i][0])
      rc |= sets(e, tls_vars[i], c->tls[i]);
  rc |= seti(e, "LAUNCH_ROUND", c->round);
  rc |= seti(e, "LAUNCH_NODE_RANK", c->node_rank);
  rc |= seti(e, "LAUNCH_NNODES", c->nnodes);
  rc |= sets(e, "LAUNCH_HOSTNAME", c->hostname);
  rc |= sets(e, "LAUNCH_ATTEMPT_DIR", c->attempt_dir);
  return rc ? RDZV_ENOMEM : 0;
}

int env_build_rank(const env_rank_opts_t *opts, env_t **out) {
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  env_t *e;
  int rc;
  if (opts)
    memcpy(&o, opts, LU_MIN(sizeof(o), opts->size ? opts->size : sizeof(o)));
  *out = NULL;
  if ((rc = env_new(&e)) != 0)
    return rc;
  if ((rc = env_import(e, o.base, ENV_SRC_INHERITED)) == 0 &&
      (rc = env_import(e, (char *const *)o.launch, ENV_SRC_LAUNCH)) == 0 &&
      (!o.contract || (rc = set_contract(e, o.contract, o.log)) == 0) &&
      (rc = env_import(e, (char *const *)o.binding, ENV_SRC_LAUNCH)) == 0 &&
      (!o.profile ||
       (rc = env_apply_profile(e, o.profile, o.allow_override, o.log)) >= 0) &&
      (!o.profile || (rc = env_set(e, "LAUNCH_NCCL_PROFILE", prof_name(o.profile),
                                   ENV_SRC_LAUNCH, "launcher")) == 0))
    rc = env_lock(e, o.log);
  if (rc < 0) {
    env_free(e);
    return rc;
  }
  *out = e;
  return 0;
}
