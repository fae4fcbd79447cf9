/* steps.c - the scan result every layout fills (its list of steps, the
 * order, the verdict on the layout's pointer), and the file names layouts
 * must tell apart from each other's. Below every layout: it calls none. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"

ckpt_step_t *ck_scan_add(ckpt_scan_t *s) {
  ckpt_step_t *n = realloc(s->steps, (s->nsteps + 1) * sizeof(*n));
  if (n == NULL)
    return NULL;
  s->steps = n;
  memset(&n[s->nsteps], 0, sizeof(*n));
  n[s->nsteps].step = -1;
  return &n[s->nsteps++];
}

static int ck_cmp_step(const void *a, const void *b) {
  const ckpt_step_t *x = a, *y = b;
  if (x->step != y->step)
    return x->step > y->step ? -1 : 1;
  return strcmp(x->name, y->name);
}

void ck_scan_sort(ckpt_scan_t *s) {
  if (s->nsteps > 1)
    qsort(s->steps, s->nsteps, sizeof(*s->steps), ck_cmp_step);
  s->latest = -1;
  s->resume = -1;
  for (size_t i = 0; i < s->nsteps; i++) {
    if (s->steps[i].is_latest && s->latest < 0)
      s->latest = (int)i;
    /* The agent's rule (agree.c): a step without a number (a single DCP
     * directory, Megatron's release/, a DeepSpeed tag) is never resumed. */
    if (s->steps[i].state == CKPT_STEP_COMPLETE && s->steps[i].step >= 0 &&
        s->resume < 0)
      s->resume = (int)i;
  }
}

int64_t ck_trailing_number(const char *name) {
  size_t n = strlen(name), k = n;
  int64_t v;
  while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9')
    k--;
  if (k == n || n - k > 18 || lu_parse_i64(name + k, n - k, &v) != 0)
    return -1;
  return v;
}

void ckpt_scan_free(ckpt_scan_t *s) {
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->nsteps; i++)
    free(s->steps[i].have);
  free(s->steps);
  free(s);
}

int ck_digits_after(const char *name, const char *prefix) {
  size_t p = strlen(prefix), n = strlen(name);
  if (n <= p || strncmp(name, prefix, p) != 0)
    return 0;
  for (size_t i = p; i < n; i++)
    if (name[i] < '0' || name[i] > '9')
      return 0;
  return 1;
}

/* Digits only, at least one, no more than 18. */
int ck_all_digits(const char *s, int64_t *v) {
  size_t n = strlen(s);
  if (n == 0 || n > 18)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return 0;
  return lu_parse_i64(s, n, v) == 0;
}

/* After the steps are checked: say when the pointer is not usable. */
void ck_latest_verdict(ckpt_scan_t *s, const char *pointer) {
  if (s->latest_name[0] == '\0' || s->latest_problem[0])
    return;
  if (s->latest < 0) {
    ck_problem(s->latest_problem, sizeof(s->latest_problem),
               "%s names %s, which does not exist", pointer, s->latest_name);
    return;
  }
  if (s->steps[s->latest].state != CKPT_STEP_COMPLETE) {
    ck_problem(s->latest_problem, sizeof(s->latest_problem),
               "%s names %s, which is %s: %s", pointer, s->latest_name,
               s->steps[s->latest].state == CKPT_STEP_CORRUPT ? "corrupt"
                                                              : "incomplete",
               s->steps[s->latest].problem);
    return;
  }
  /* A kill after a step's last file and before the pointer moved (DeepSpeed
   * writes latest, Megatron its tracker, once the save is done): a loader
   * that follows the pointer goes back to the older step. */
  if (s->resume >= 0 && s->steps[s->latest].step >= 0 &&
      s->steps[s->resume].step > s->steps[s->latest].step)
    ck_problem(s->latest_problem, sizeof(s->latest_problem),
               "%s names %s, older than the complete %s (a save whose pointer "
               "was not moved yet): a loader that follows %s resumes from the "
               "older step", pointer, s->latest_name, s->steps[s->resume].name,
               pointer);
}

/* "__R_I.distcp": R into *rank. */
int ck_dcp_file_rank(const char *name, int64_t *rank) {
  char buf[64];
  const char *us;
  size_t n = strlen(name);
  if (n < 12 || n >= sizeof(buf) || strncmp(name, "__", 2) != 0 ||
      strcmp(name + n - 7, ".distcp") != 0)
    return -1;
  us = strchr(name + 2, '_');
  if (us == NULL || us == name + 2 || (size_t)(us - name) > n - 8)
    return -1;
  memcpy(buf, name + 2, (size_t)(us - name - 2));
  buf[us - name - 2] = '\0';
  if (!ck_all_digits(buf, rank))
    return -1;
  memcpy(buf, us + 1, (size_t)(name + n - 7 - us - 1));
  buf[name + n - 7 - us - 1] = '\0';
  {
    int64_t idx;
    return ck_all_digits(buf, &idx) ? 0 : -1;
  }
}

/* "__R.metadata" (DCP's save(use_collectives=False): one per rank): R. */
int ck_dcp_rank_meta(const char *name, int64_t *rank) {
  char buf[24];
  size_t n = strlen(name), k;
  if (n < 12 || strncmp(name, "__", 2) != 0 ||
      strcmp(name + n - 9, CK_DCP_META) != 0 || (k = n - 11) >= sizeof(buf))
    return -1;
  memcpy(buf, name + 2, k);
  buf[k] = '\0';
  return ck_all_digits(buf, rank) ? 0 : -1;
}

int ck_dcp_name(const char *name) {
  int64_t r;
  return strcmp(name, CK_DCP_META) == 0 || ck_dcp_file_rank(name, &r) == 0 ||
         ck_dcp_rank_meta(name, &r) == 0;
}


int ck_dir_any(const char *path, int (*pred)(const char *name)) {
  DIR *d = opendir(path);
  struct dirent *e;
  int found = 0;
  if (d == NULL)
    return 0;
  while (!found && (e = readdir(d)) != NULL)
    found = pred(e->d_name);
  closedir(d);
  return found;
}
