/* worker.c - a rank's whole environment: inherited, torchrun's contract and
 * launch's variables, the binding, the NCCL profile, the lock. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "contract.h"
#include "env.h"

enum { W_SET, W_KEEP, W_OWN };

/* One variable of the contract, by its row's WRITE rule. */
static int put(env_t *e, const char *name, int mode, int isset,
               const char *val) {
  if (!isset) {
    if (mode == W_OWN)
      env_unset(e, name);
    return 0;
  }
  if (mode == W_KEEP && env_find(e, name) != NULL)
    return 0;
  return env_set(e, name, val, ENV_SRC_LAUNCH, "launcher");
}

static int put_int(env_t *e, const char *name, int mode, long long v) {
  char b[32];
  snprintf(b, sizeof(b), "%lld", v);
  return put(e, name, mode, v >= 0, b);
}
#define PUT_INT(e, name, mode, v) put_int(e, name, mode, (long long)(v))
#define PUT_I64 PUT_INT
#define PUT_STR(e, name, mode, v) put(e, name, mode, (v) != NULL, v)
#define PUT_BOOL(e, name, mode, v)                                             \
  put(e, name, mode, (v) >= 0, (v) > 0 ? "True" : "False")

void env_contract_init(env_contract_t *k) {
#define UNSET(NAME, TYPE, FIELD, FALLBACK, WRITE, BY) UNSET_##TYPE(k->FIELD);
#define UNSET_INT(f) (f) = -1
#define UNSET_I64(f) (f) = -1
#define UNSET_BOOL(f) (f) = -1
#define UNSET_STR(f) (f) = NULL
  ENV_CONTRACT(UNSET)
#undef UNSET
}

/* The contract's table, row by row (env/contract.h). */
static int set_contract(env_t *e, const env_contract_t *k, lu_log_t *log) {
  int rc = 0;
  int omp_inherited = env_find(e, "OMP_NUM_THREADS") != NULL;
#define WRITE(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)                          \
  rc |= PUT_##TYPE(e, #NAME, W_##WRITE, k->FIELD);
  ENV_CONTRACT(WRITE)
#undef WRITE
  if (!omp_inherited && k->omp_num_threads != NULL && log)
    LU_DBG(log, LU_DBG_ENV, "setting OMP_NUM_THREADS=%s for each worker, to "
                            "avoid overloading the node", k->omp_num_threads);
  return rc ? RDZV_ENOMEM : 0;
}

int env_build_rank(const env_rank_opts_t *opts, env_t **out) {
  env_rank_opts_t o = ENV_RANK_OPTS_INIT;
  env_contract_t k;
  env_t *e;
  int rc;
  if (opts)
    memcpy(&o, opts, LU_MIN(sizeof(o), opts->size ? opts->size : sizeof(o)));
  *out = NULL;
  /* The profile's name is a row of the contract too. */
  if (o.contract)
    k = *o.contract;
  else
    env_contract_init(&k);
  if (o.profile && k.nccl_profile == NULL)
    k.nccl_profile = prof_name(o.profile);
  if ((rc = env_new(&e)) != 0)
    return rc;
  if ((rc = env_import(e, o.base, ENV_SRC_INHERITED)) == 0 &&
      (rc = env_import(e, (char *const *)o.launch, ENV_SRC_LAUNCH)) == 0 &&
      (!o.contract || (rc = set_contract(e, &k, o.log)) == 0) &&
      (!o.profile ||
       (rc = env_apply_profile(e, o.profile, o.allow_override, o.log)) >= 0) &&
      (o.contract || !o.profile ||
       (rc = env_set(e, "LAUNCH_NCCL_PROFILE", k.nccl_profile, ENV_SRC_LAUNCH,
                     "launcher")) == 0))
    rc = env_lock(e, o.log);
  if (rc < 0) {
    env_free(e);
    return rc;
  }
  *out = e;
  return 0;
}
