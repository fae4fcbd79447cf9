/* envset.c - the worker environment: an ordered KEY=VALUE set that knows
 * where each value came from, the profile applied on top, and the lock. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "env_int.h"

struct env_s {
  int n, cap;
  env_var_t *v; /* sorted by key */
  int nnotes, capnotes;
  env_note_t *notes;
  char **envp; /* cache for env_envp() */
};

/* The infrastructure rule: NVLink multicast stays off on every worker. */
static const char *const locked[][2] = {
    {"NCCL_NVLS_ENABLE", "0"},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
    {"NVSHMEM_DISABLE_NVLS", "1"},
};

int env_locked_count(void) { return (int)LU_ARRAY_SIZE(locked); }

const char *env_locked_key(int i) {
  return i >= 0 && i < env_locked_count() ? locked[i][0] : NULL;
}

const char *env_locked_value(int i) {
  return i >= 0 && i < env_locked_count() ? locked[i][1] : NULL;
}

static int locked_index(const char *key) {
  for (int i = 0; i < env_locked_count(); i++)
    if (strcmp(locked[i][0], key) == 0)
      return i;
  return -1;
}

int env__algo_wants_nvls(const char *v) {
  char low[512];
  size_t i;
  for (i = 0; v[i] && i + 1 < sizeof(low); i++)
    low[i] = (char)tolower((unsigned char)v[i]);
  low[i] = '\0';
  return strstr(low, "nvls") != NULL && strchr(low, '^') == NULL;
}

int env_new(env_t **out) {
  *out = calloc(1, sizeof(env_t));
  return *out ? 0 : RDZV_ENOMEM;
}

static void drop_envp(env_t *e) {
  if (e->envp) {
    for (char **p = e->envp; *p; p++)
      free(*p);
    free(e->envp);
    e->envp = NULL;
  }
}

static void free_var(env_var_t *v) {
  free((char *)v->key);
  free((char *)v->value);
  free((char *)v->tmpl);
  free((char *)v->origin);
}

void env_free(env_t *e) {
  if (e == NULL)
    return;
  for (int i = 0; i < e->n; i++)
    free_var(&e->v[i]);
  for (int i = 0; i < e->nnotes; i++) {
    free((char *)e->notes[i].key);
    free((char *)e->notes[i].value);
    free((char *)e->notes[i].origin);
    free((char *)e->notes[i].reason);
  }
  free(e->v);
  free(e->notes);
  drop_envp(e);
  free(e);
}

/* Position of key, or -(insertion point) - 1. */
static int search(const env_t *e, const char *key) {
  int lo = 0, hi = e->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(e->v[mid].key, key);
    if (c == 0)
      return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -lo - 1;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static int set_full(env_t *e, const char *key, const char *value, env_src_t src,
                    const char *origin, const char *tmpl) {
  int i;
  env_var_t nv;
  if (key == NULL || value == NULL || key[0] == '\0' || strchr(key, '=') ||
      (src != ENV_SRC_INHERITED && !env__valid_key(key, strlen(key))))
    return RDZV_EINVAL;
  memset(&nv, 0, sizeof(nv));
  nv.key = strdup(key);
  nv.value = strdup(value);
  nv.origin = dup_or_null(origin);
  nv.tmpl = dup_or_null(tmpl);
  nv.src = src;
  if (nv.key == NULL || nv.value == NULL || (origin && nv.origin == NULL) ||
      (tmpl && nv.tmpl == NULL)) {
    free_var(&nv);
    return RDZV_ENOMEM;
  }
  drop_envp(e);
  i = search(e, key);
  if (i >= 0) {
    free_var(&e->v[i]);
    e->v[i] = nv;
    return 0;
  }
  i = -i - 1;
  if (e->n == e->cap) {
    int ncap = e->cap ? e->cap * 2 : 64;
    env_var_t *nvs = realloc(e->v, sizeof(*nvs) * (size_t)ncap);
    if (nvs == NULL) {
      free_var(&nv);
      return RDZV_ENOMEM;
    }
    e->v = nvs;
    e->cap = ncap;
  }
  memmove(&e->v[i + 1], &e->v[i], sizeof(*e->v) * (size_t)(e->n - i));
  e->v[i] = nv;
  e->n++;
  return 0;
}

int env_set(env_t *e, const char *key, const char *value, env_src_t src,
            const char *origin) {
  return set_full(e, key, value, src, origin, NULL);
}

int env_unset(env_t *e, const char *key) {
  int i = search(e, key);
  if (i < 0)
    return 0;
  drop_envp(e);
  free_var(&e->v[i]);
  memmove(&e->v[i], &e->v[i + 1], sizeof(*e->v) * (size_t)(e->n - i - 1));
  e->n--;
  return 1;
}

const env_var_t *env_find(const env_t *e, const char *key) {
  int i = search(e, key);
  return i >= 0 ? &e->v[i] : NULL;
}

const char *env_get(const env_t *e, const char *key) {
  const env_var_t *v = env_find(e, key);
  return v ? v->value : NULL;
}

int env_count(const env_t *e) { return e->n; }

const env_var_t *env_at(const env_t *e, int i) {
  return i >= 0 && i < e->n ? &e->v[i] : NULL;
}

int env_nnotes(const env_t *e) { return e->nnotes; }

const env_note_t *env_note(const env_t *e, int i) {
  return i >= 0 && i < e->nnotes ? &e->notes[i] : NULL;
}

/* Keep a note of what was refused or overridden, and say it (log). */
static int add_note(env_t *e, lu_log_t *log, const char *key,
                    const char *value, const char *origin, const char *fmt,
                    ...) LU_PRINTF(6, 7);
static int add_note(env_t *e, lu_log_t *log, const char *key,
                    const char *value, const char *origin, const char *fmt,
                    ...) {
  env_note_t *n;
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  origin = origin ? origin : "inherited";
  /* "profile x line 3: K=V refused ...", "K=V (inherited) overridden ..." */
  if (log && strncmp(origin, "profile ", 8) == 0)
    LU_WARN(log, "%s: %s=%s %s", origin, key, value, reason);
  else if (log)
    LU_WARN(log, "%s=%s (%s) %s", key, value, origin, reason);
  if (e->nnotes == e->capnotes) {
    int ncap = e->capnotes ? e->capnotes * 2 : 8;
    env_note_t *nn = realloc(e->notes, sizeof(*nn) * (size_t)ncap);
    if (nn == NULL)
      return RDZV_ENOMEM;
    e->notes = nn;
    e->capnotes = ncap;
  }
  n = &e->notes[e->nnotes];
  n->key = strdup(key);
  n->value = strdup(value);
  n->origin = strdup(origin);
  n->reason = strdup(reason);
  if (!n->key || !n->value || !n->origin || !n->reason) {
    free((char *)n->key);
    free((char *)n->value);
    free((char *)n->origin);
    free((char *)n->reason);
    return RDZV_ENOMEM;
  }
  e->nnotes++;
  return 0;
}

int env_import(env_t *e, char *const *envp, env_src_t src) {
  const char *origin = src == ENV_SRC_INHERITED ? "inherited" : "launcher";
  for (int i = 0; envp && envp[i]; i++) {
    const char *eq = strchr(envp[i], '=');
    char key[1024];
    int rc;
    if (eq == NULL || eq == envp[i] || (size_t)(eq - envp[i]) >= sizeof(key))
      continue;
    memcpy(key, envp[i], (size_t)(eq - envp[i]));
    key[eq - envp[i]] = '\0';
    /* Names a shell could not export (BASH_FUNC_module%%, Lmod's) pass
     * through from the inherited environment; the launcher's must be
     * proper names. */
    if (src != ENV_SRC_INHERITED && !env__valid_key(key, strlen(key)))
      return RDZV_EINVAL;
    if ((rc = env_set(e, key, eq + 1, src, origin)) != 0)
      return rc;
  }
  return 0;
}

char **env_envp(env_t *e) {
  char **a;
  if (e->envp)
    return e->envp;
  if ((a = calloc((size_t)e->n + 1, sizeof(*a))) == NULL)
    return NULL;
  for (int i = 0; i < e->n; i++) {
    size_t kl = strlen(e->v[i].key), vl = strlen(e->v[i].value);
    if ((a[i] = malloc(kl + vl + 2)) == NULL) {
      for (int j = 0; j < i; j++)
        free(a[j]);
      free(a);
      return NULL;
    }
    memcpy(a[i], e->v[i].key, kl);
    a[i][kl] = '=';
    memcpy(a[i] + kl + 1, e->v[i].value, vl + 1);
  }
  e->envp = a;
  return a;
}

static const char *lookup_env(void *ctx, const char *name) {
  return env_get((const env_t *)ctx, name);
}

int env_is_user_debug(const char *key) {
  return !strcmp(key, "NCCL_DEBUG") || !strcmp(key, "NCCL_DEBUG_SUBSYS") ||
         !strcmp(key, "NCCL_DEBUG_FILE") ||
         (!strncmp(key, "TORCH_", 6) && strstr(key + 6, "DEBUG") != NULL);
}

int env_apply_profile(env_t *e, const prof_t *p, int allow_override,
                      lu_log_t *log) {
  static const char nvls[] = "NCCL_NVLS_ENABLE=0 is locked, an NVLS "
                             "algorithm cannot run; NCCL picks among the others";
  int set = 0;
  for (int i = 0; i < prof_count(p); i++) {
    const prof_entry_t *pe = prof_entry(p, i);
    const env_var_t *cur = env_find(e, pe->key);
    char origin[320], value[PROF_MAX_LINE], missing[128];
    int li = locked_index(pe->key), rc = 0;
    snprintf(origin, sizeof(origin), "profile %s line %d", prof_name(p),
             pe->line);
    if (li >= 0) {
      if (strcmp(pe->value, locked[li][1]) != 0)
        rc = add_note(e, log, pe->key, pe->value, origin,
                      "refused: NVLink multicast stays off on this "
                      "infrastructure (it can take shared GPUs down); %s is "
                      "always %s", pe->key, locked[li][1]);
      if (rc != 0)
        return rc;
      continue; /* env_lock() sets it */
    }
    if (cur && cur->src == ENV_SRC_LAUNCH && strcmp(cur->value, pe->value) == 0)
      continue; /* the profile asks for what launch already set */
    if (cur && cur->src == ENV_SRC_LAUNCH) {
      if ((rc = add_note(e, log, pe->key, pe->value, origin, "ignored: launch "
                         "sets %s itself for every worker", pe->key)) != 0)
        return rc;
      continue;
    }
    rc = pe->templated ? prof_expand(pe->value, lookup_env, e, value,
                                     sizeof(value), missing, sizeof(missing))
                       : (lu_strlcpy(value, pe->value, sizeof(value)), 0);
    if (rc == RDZV_ENOKEY)
      rc = add_note(e, log, pe->key, pe->value, origin, "skipped: ${%s} is "
                    "empty for this rank (nothing of that kind found near its "
                    "GPU)%s", missing,
                    cur ? "; the inherited value stays" : "");
    else if (rc != 0)
      rc = add_note(e, log, pe->key, pe->value, origin, "skipped: the "
                    "template does not expand (%s)", rdzv_strerror(rc));
    else if (strcmp(pe->key, "NCCL_ALGO") == 0 && env__algo_wants_nvls(value))
      rc = add_note(e, log, pe->key, value, origin, "refused: %s", nvls);
    else if (cur && cur->src == ENV_SRC_INHERITED &&
             env_is_user_debug(pe->key)) {
      /* the user's debug setting wins; the lint says so */
      char kept[PROF_MAX_LINE + 400];
      if (strcmp(cur->value, value) == 0)
        continue;
      snprintf(kept, sizeof(kept), "inherited, kept over the profile's "
               "%s=%.256s (%s)", pe->key, value, origin);
      if (log)
        LU_DBG(log, LU_DBG_ENV, "%s=%s from your shell is kept over the profile's %s "
                     "(%s)", pe->key, cur->value, value, origin);
      if ((rc = set_full(e, pe->key, cur->value, ENV_SRC_INHERITED, kept,
                         NULL)) != 0)
        return rc;
      continue;
    } else if (cur && cur->src == ENV_SRC_INHERITED && allow_override &&
               strcmp(cur->value, value) != 0) {
      if (log)
        LU_INFO(log, "%s: kept the inherited %s=%s over the profile's %s "
                     "(--allow-env-override)", prof_name(p), pe->key,
                cur->value, value);
    } else {
      if (log && cur && cur->src == ENV_SRC_INHERITED)
        LU_INFO(log, "%s: %s=%s replaces the inherited value %s", origin,
                pe->key, value, cur->value);
      else if (log && !cur)
        LU_DBG(log, LU_DBG_ENV, "%s: %s=%s", origin, pe->key, value);
      if ((rc = set_full(e, pe->key, value, ENV_SRC_PROFILE, origin,
                         pe->templated ? pe->value : NULL)) != 0)
        return rc;
      set++;
      continue;
    }
    if (rc != 0)
      return rc;
  }
  return set;
}

int env_lock(env_t *e, lu_log_t *log) {
  int overridden = 0, rc;
  const env_var_t *algo = env_find(e, "NCCL_ALGO");
  if (algo && env__algo_wants_nvls(algo->value)) {
    if ((rc = add_note(e, log, "NCCL_ALGO", algo->value, algo->origin,
                       "dropped: NCCL_NVLS_ENABLE=0 is locked, an NVLS "
                       "algorithm cannot run; NCCL picks among the "
                       "others")) != 0)
      return rc;
    env_unset(e, "NCCL_ALGO");
    overridden++;
  }
  for (int i = 0; i < env_locked_count(); i++) {
    const env_var_t *cur = env_find(e, locked[i][0]);
    if (cur && strcmp(cur->value, locked[i][1]) != 0) {
      if ((rc = add_note(e, log, locked[i][0], cur->value, cur->origin,
                         "overridden to %s: NVLink multicast stays off on "
                         "this infrastructure (it can take shared GPUs down)",
                         locked[i][1])) != 0)
        return rc;
      overridden++;
    }
    if ((rc = env_set(e, locked[i][0], locked[i][1], ENV_SRC_LOCK,
                      "infrastructure lock")) != 0)
      return rc;
  }
  return overridden;
}
