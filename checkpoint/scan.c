/* scan.c - which layout a directory holds, and the scan driver. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_int.h"

const char *ckpt_strerror(int err) {
  switch (err) {
#define XX(name, val, msg)                                                     \
  case val:                                                                    \
    return msg;
    CKPT_ERRNO_MAP(XX)
#undef XX
  default:
    return rdzv_strerror(err);
  }
}

static const char *const ck_layout_names[] = {"auto", "launch", "megatron",
                                              "deepspeed", "hf", "dcp"};

const char *ckpt_layout_name(ckpt_layout_t l) {
  return (unsigned)l < LU_ARRAY_SIZE(ck_layout_names) ? ck_layout_names[l]
                                                      : "?";
}

int ckpt_layout_parse(const char *s, ckpt_layout_t *out) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(ck_layout_names); i++)
    if (strcmp(s, ck_layout_names[i]) == 0) {
      *out = (ckpt_layout_t)i;
      return 0;
    }
  return RDZV_EINVAL;
}

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
    if (s->steps[i].state == CKPT_STEP_COMPLETE && s->resume < 0)
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

/* ---- detection ------------------------------------------------------------------ */

static int ck_digits_after(const char *name, const char *prefix) {
  size_t p = strlen(prefix), n = strlen(name);
  if (n <= p || strncmp(name, prefix, p) != 0)
    return 0;
  for (size_t i = p; i < n; i++)
    if (name[i] < '0' || name[i] > '9')
      return 0;
  return 1;
}

/* What a subdirectory looks like: launch step, DCP checkpoint, or none. */
static unsigned ck_detect_sub(const char *path) {
  DIR *d = opendir(path);
  struct dirent *e;
  unsigned m = 0;
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, CK_MANIFEST) == 0 ||
        strncmp(e->d_name, "rank-", 5) == 0)
      m |= 1u << CKPT_LAYOUT_LAUNCH;
    else if (ck_dcp_name(e->d_name))
      m |= 1u << CKPT_LAYOUT_DCP;
  }
  closedir(d);
  return m;
}

static unsigned ck_detect(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  unsigned m = 0;
  int bare_steps = 0;
  char p[4096];
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    const char *nm = e->d_name;
    int64_t step;
    struct stat st;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 ||
        ck_join(p, sizeof(p), dir, nm) != 0 || stat(p, &st) != 0)
      continue;
    if (S_ISREG(st.st_mode)) {
      if (strcmp(nm, CK_LATEST) == 0) {
        char *data;
        size_t len;
        char tag[CKPT_NAME_MAX];
        if (lu_read_file(p, 4096, &data, &len) == 0) {
          if (ck_latest_decode(data, len, &step) == 0)
            m |= 1u << CKPT_LAYOUT_LAUNCH;
          else if (ck_deepspeed_latest(data, len, tag, sizeof(tag)) == 0) {
            /* DeepSpeed's names its tag directory; anything else in a
             * file called latest is nobody's pointer. */
            char q[4096];
            struct stat ts;
            if (ck_join(q, sizeof(q), dir, tag) == 0 && stat(q, &ts) == 0 &&
                S_ISDIR(ts.st_mode))
              m |= 1u << CKPT_LAYOUT_DEEPSPEED;
          }
          free(data);
        }
      } else if (strcmp(nm, "latest_checkpointed_iteration.txt") == 0) {
        m |= 1u << CKPT_LAYOUT_MEGATRON;
      } else if (ck_dcp_name(nm)) {
        m |= 1u << CKPT_LAYOUT_DCP;
      }
      continue;
    }
    if (!S_ISDIR(st.st_mode))
      continue;
    if (ck_digits_after(nm, "iter_") || strcmp(nm, "release") == 0)
      m |= 1u << CKPT_LAYOUT_MEGATRON;
    else if (ck_digits_after(nm, "global_step"))
      m |= 1u << CKPT_LAYOUT_DEEPSPEED;
    else if (ck_digits_after(nm, "checkpoint-"))
      /* By content, not by name: DCP steps are often called checkpoint-N
       * too. */
      m |= (ck_detect_sub(p) & (1u << CKPT_LAYOUT_DCP)) ? 1u << CKPT_LAYOUT_DCP
                                                       : 1u << CKPT_LAYOUT_HF;
    else if (ck_parse_step_name(nm, &step) == 0) {
      unsigned sub = ck_detect_sub(p);
      if (sub)
        m |= sub;
      else
        bare_steps = 1; /* an empty step: launch's, being written */
    } else if (nm[0] != '.' && strncmp(nm, "abandoned-", 10) != 0 &&
               (ck_detect_sub(p) & (1u << CKPT_LAYOUT_DCP)))
      m |= 1u << CKPT_LAYOUT_DCP;
  }
  closedir(d);
  if (bare_steps && m == 0)
    m |= 1u << CKPT_LAYOUT_LAUNCH;
  return m;
}

int ckpt_scan(const char *dir, const ckpt_scan_options_t *opt,
              ckpt_scan_t **out, char *err, size_t errlen) {
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s;
  struct stat st;
  int rc;
  if (opt)
    memcpy(&o, opt, LU_MIN(opt->size, sizeof(o)));
  *out = NULL;
  if (stat(dir, &st) != 0) {
    rc = -errno;
    lu_errf(err, errlen, "%s: %s", dir,
            rc == -ENOENT ? "no such directory" : strerror(errno));
    return rc;
  }
  if (!S_ISDIR(st.st_mode)) {
    lu_errf(err, errlen, "%s: not a directory", dir);
    return -ENOTDIR;
  }
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return RDZV_ENOMEM;
  s->layout = o.layout;
  s->latest = s->resume = -1;
  if (s->layout == CKPT_LAYOUT_AUTO) {
    unsigned m = ck_detect(dir);
    int found = 0;
    char list[128] = "";
    for (int l = CKPT_LAYOUT_LAUNCH; l <= CKPT_LAYOUT_DCP; l++)
      if (m & (1u << l)) {
        if (found++)
          strncat(list, ", ", sizeof(list) - strlen(list) - 1);
        strncat(list, ckpt_layout_name((ckpt_layout_t)l),
                sizeof(list) - strlen(list) - 1);
        s->layout = (ckpt_layout_t)l;
      }
    if (found > 1) {
      lu_errf(err, errlen, "%s holds checkpoints of several layouts (%s): "
              "pass --layout (docs/checkpoints.md)", dir, list);
      free(s);
      return CKPT_ELAYOUT;
    }
    if (found == 0)
      s->layout = CKPT_LAYOUT_LAUNCH; /* nothing yet: a fresh directory */
  }
  switch (s->layout) {
  case CKPT_LAYOUT_LAUNCH:
    rc = ck_scan_launch(dir, &o, s, err, errlen);
    break;
  case CKPT_LAYOUT_MEGATRON:
    rc = ck_scan_megatron(dir, &o, s, err, errlen);
    break;
  case CKPT_LAYOUT_DEEPSPEED:
    rc = ck_scan_deepspeed(dir, &o, s, err, errlen);
    break;
  case CKPT_LAYOUT_HF:
    rc = ck_scan_hf(dir, &o, s, err, errlen);
    break;
  case CKPT_LAYOUT_DCP:
    rc = ck_scan_dcp(dir, &o, s, err, errlen);
    break;
  default:
    lu_errf(err, errlen, "unknown layout %d", (int)s->layout);
    rc = RDZV_EINVAL;
  }
  if (rc != 0) {
    if (rc == RDZV_ENOMEM)
      lu_errf(err, errlen, "out of memory");
    ckpt_scan_free(s);
    return rc;
  }
  ck_scan_sort(s);
  ck_peer_latest_verdict(s);
  *out = s;
  return 0;
}
