/* nccl.c - NCCL unique-id bootstrap through the store, and communicator
 * creation. NCCL is loaded with dlopen: librdzv neither builds nor loads
 * against it. Only NCCL's stable ABI is used (ncclUniqueId is 128 bytes;
 * the functions below have kept their signatures since 2.x). */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "lu.h"
#include "rdzv.h"

typedef struct nccl_uid_s {
  char internal[RDZV_NCCL_ID_BYTES];
} nccl_uid_t;

typedef struct nccl_api_s {
  void *lib;
  int (*get_version)(int *);
  int (*get_unique_id)(nccl_uid_t *);
  int (*init_rank)(void **, int, nccl_uid_t, int);
  int (*init_rank_scalable)(void **, int, int, int, nccl_uid_t *, void *);
  const char *(*error_string)(int);
  int version;
  char error[256];
} nccl_api_t;

/* Loaded once per process, read-only afterwards. */
static nccl_api_t api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void) {
  const char *names[] = {getenv("LAUNCH_NCCL_LIBRARY"), "libnccl.so.2",
                         "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2"};
  for (size_t i = 0; i < LU_ARRAY_SIZE(names) && api.lib == NULL; i++)
    if (names[i] && *names[i])
      api.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (api.lib == NULL) {
    snprintf(api.error, sizeof(api.error), "NCCL cannot be loaded (libnccl.so.2 "
             "not found; set LAUNCH_NCCL_LIBRARY or LD_LIBRARY_PATH)");
    return;
  }
  *(void **)&api.get_version = dlsym(api.lib, "ncclGetVersion");
  *(void **)&api.get_unique_id = dlsym(api.lib, "ncclGetUniqueId");
  *(void **)&api.init_rank = dlsym(api.lib, "ncclCommInitRank");
  *(void **)&api.init_rank_scalable = dlsym(api.lib, "ncclCommInitRankScalable");
  *(void **)&api.error_string = dlsym(api.lib, "ncclGetErrorString");
  if (api.get_version == NULL || api.get_unique_id == NULL ||
      api.init_rank == NULL || api.get_version(&api.version) != 0) {
    snprintf(api.error, sizeof(api.error), "the NCCL library found lacks "
             "ncclGetVersion/ncclGetUniqueId/ncclCommInitRank");
    dlclose(api.lib);
    api.lib = NULL;
    return;
  }
  /* ncclCommInitRankScalable exists from 2.23. */
  if (api.version < 22300)
    api.init_rank_scalable = NULL;
}

static const nccl_api_t *nccl(void) {
  pthread_once(&api_once, api_load);
  return api.lib ? &api : NULL;
}

int rdzv_nccl_version(void) {
  const nccl_api_t *n = nccl();
  return n ? n->version : RDZV_ENOTSUP;
}

/* LAUNCH_ROUND (else TORCHELASTIC_RESTART_COUNT), 0 when unset. */
static int64_t env_round(void) {
  rdzv_env_t env;
  rdzv_env_parse(NULL, &env, NULL, 0);
  return env.round >= 0 ? env.round : 0;
}

int rdzv_nccl_ids(rdzv_client_t *c, const char *name, int rank, int nranks,
                  int ranks_per_root, int64_t round, rdzv_nccl_id_t *ids,
                  int *nids, int timeout_ms) {
  char key[256];
  char (*keys)[256] = NULL;
  const char **kp = NULL;
  rdzv_value_t *vals = NULL;
  nccl_uid_t uid;
  char cname[160];
  uint32_t *calls;
  int n, rc, root = rank % ranks_per_root == 0;
  if (c == NULL || name == NULL || ids == NULL || nids == NULL ||
      nranks < 1 || rank < 0 || rank >= nranks || ranks_per_root < 1 ||
      strlen(name) > 128)
    return RDZV_EINVAL;
  if (round < 0)
    round = env_round();
  if ((calls = rdzv__nccl_calls(c, name, round, rank)) == NULL)
    return RDZV_ENOMEM;
  /* The first call of a round keeps the plain name; a later one (a
   * communicator made again, another group of the same name) its own,
   * so that a rank ahead of its root never reads the earlier id. */
  if (*calls == 0)
    snprintf(cname, sizeof(cname), "%s", name);
  else
    snprintf(cname, sizeof(cname), "%s#%" PRIu32, name, *calls);
  n = (nranks + ranks_per_root - 1) / ranks_per_root;
  if (root) {
    /* A root: make this root's id (published with the request below). */
    const nccl_api_t *api_ = nccl();
    int nrc;
    if (api_ == NULL) {
      rdzv__set_error(c, "%s", api.error);
      return RDZV_ENOTSUP;
    }
    if ((nrc = api_->get_unique_id(&uid)) != 0) {
      rdzv__set_error(c, "ncclGetUniqueId failed: %s",
                      api_->error_string ? api_->error_string(nrc) : "?");
      return RDZV_ENOTSUP;
    }
    snprintf(key, sizeof(key), "launch/nccl/%" PRId64 "/%s/%d", round,
             cname, rank / ranks_per_root);
  }
  keys = calloc((size_t)n, sizeof(*keys));
  kp = calloc((size_t)n, sizeof(*kp));
  vals = calloc((size_t)n, sizeof(*vals));
  if (keys == NULL || kp == NULL || vals == NULL) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  for (int i = 0; i < n; i++) {
    snprintf(keys[i], sizeof(keys[i]), "launch/nccl/%" PRId64 "/%s/%d",
             round, cname, i);
    kp[i] = keys[i];
  }
  /* One request for every root's id, answered once all are published;
   * a root sends its own id in the same write. */
  rc = root ? rdzv__set_multi_get(c, key, &uid, sizeof(uid), kp, (size_t)n,
                                  vals, timeout_ms)
            : rdzv_multi_get(c, kp, (size_t)n, vals, timeout_ms);
  if (rc != 0)
    goto out;
  for (int i = 0; i < n; i++) {
    if (vals[i].len != RDZV_NCCL_ID_BYTES) {
      rdzv__set_error(c, "NCCL id %d of '%s' has %zu bytes, not %d", i, name,
                      vals[i].len, RDZV_NCCL_ID_BYTES);
      rc = RDZV_EPROTO;
      goto out;
    }
    memcpy(ids[i].internal, vals[i].data, RDZV_NCCL_ID_BYTES);
  }
  *nids = n;
  (*calls)++; /* a call that failed is tried again under the same keys */
out:
  for (int i = 0; vals && i < n; i++)
    rdzv_free(vals[i].data);
  free(vals);
  free(kp);
  free(keys);
  return rc;
}

int rdzv_nccl_comm_init(rdzv_client_t *c, const char *name, int rank,
                        int nranks, int ranks_per_root, void **comm,
                        double *init_ms, int timeout_ms) {
  const nccl_api_t *n = nccl();
  rdzv_nccl_id_t *ids;
  int nids = 0, rc, nrc;
  uint64_t t0;
  if (comm == NULL || c == NULL || nranks < 1 || rank < 0 || rank >= nranks)
    return RDZV_EINVAL;
  if (n == NULL) {
    rdzv__set_error(c, "%s", api.error);
    return RDZV_ENOTSUP;
  }
  /* Without the scalable init, one root serves every rank. */
  if (n->init_rank_scalable == NULL || ranks_per_root <= 0)
    ranks_per_root = nranks;
  ids = calloc((size_t)((nranks + ranks_per_root - 1) / ranks_per_root),
               sizeof(*ids));
  if (ids == NULL)
    return RDZV_ENOMEM;
  rc = rdzv_nccl_ids(c, name, rank, nranks, ranks_per_root, -1, ids, &nids,
                     timeout_ms);
  if (rc != 0) {
    free(ids);
    return rc;
  }
  t0 = lu_now_ns();
  if (nids > 1 || n->init_rank_scalable)
    nrc = n->init_rank_scalable(comm, nranks, rank, nids, (nccl_uid_t *)ids,
                                NULL);
  else
    nrc = n->init_rank(comm, nranks, *(nccl_uid_t *)&ids[0], rank);
  if (init_ms)
    *init_ms = (double)(lu_now_ns() - t0) / 1e6;
  free(ids);
  if (nrc != 0) {
    rdzv__set_error(c, "NCCL communicator init failed: %s (NCCL %d)",
                    n->error_string ? n->error_string(nrc) : "?", n->version);
    return RDZV_EPROTO;
  }
  return 0;
}
