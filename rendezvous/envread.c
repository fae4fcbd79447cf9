/* envread.c - the worker's environment, read in one pass through the
 * contract's table (env/contract.h): rdzv_env_parse. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract.h"
#include "rdzv.h"

extern char **environ;

enum { T_INT, T_I64, T_STR, T_BOOL };

typedef struct row_s {
  const char *name, *fallback;
  int type;
  size_t off;
} row_t;

#define ROW(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)                            \
  {#NAME, FALLBACK, T_##TYPE, offsetof(rdzv_env_t, FIELD)},
static const row_t rows[] = {ENV_CONTRACT(ROW)};
#undef ROW

/* The value of name in envp: NULL when unset or empty. */
static const char *find(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (char *const *p = envp; *p; p++)
    if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
      return (*p)[n + 1] ? *p + n + 1 : NULL;
  return NULL;
}

static void unset(rdzv_env_t *e, const row_t *r) {
  void *f = (char *)e + r->off;
  switch (r->type) {
  case T_INT:
  case T_BOOL:
    *(int *)f = -1;
    break;
  case T_I64:
    *(int64_t *)f = -1;
    break;
  default:
    *(const char **)f = NULL;
  }
}

/* RET 0, or -1 when v does not parse as r's type. */
static int parse(rdzv_env_t *e, const row_t *r, const char *v) {
  void *f = (char *)e + r->off;
  char *end;
  long long x;
  if (r->type == T_STR) {
    *(const char **)f = v;
    return 0;
  }
  if (r->type == T_BOOL) {
    if (strcmp(v, "True") == 0 || strcmp(v, "true") == 0 ||
        strcmp(v, "1") == 0)
      *(int *)f = 1;
    else if (strcmp(v, "False") == 0 || strcmp(v, "false") == 0 ||
             strcmp(v, "0") == 0)
      *(int *)f = 0;
    else
      return -1;
    return 0;
  }
  if (*v < '0' || *v > '9')
    return -1; /* no sign, no space */
  errno = 0;
  x = strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 ||
      (r->type == T_INT && x > INT_MAX))
    return -1;
  if (r->type == T_INT)
    *(int *)f = (int)x;
  else
    *(int64_t *)f = (int64_t)x;
  return 0;
}

int rdzv_env_parse(char *const *envp, rdzv_env_t *out, char *err,
                   size_t errcap) {
  int rc = 0;
  if (envp == NULL)
    envp = environ;
  if (err && errcap)
    err[0] = '\0';
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const row_t *r = &rows[i];
    const char *name = r->name, *v = find(envp, name);
    unset(out, r);
    if (v == NULL && r->fallback) {
      name = r->fallback;
      v = find(envp, name);
    }
    if (v == NULL || parse(out, r, v) == 0)
      continue;
    if (rc == 0 && err && errcap)
      snprintf(err, errcap, "%s='%.40s%s' is not %s (launch sets it; unset "
               "it or fix the value)", name, v, strlen(v) > 40 ? "..." : "",
               r->type == T_BOOL ? "True or False" : "a number >= 0");
    rc = RDZV_EINVAL;
  }
  return rc;
}
