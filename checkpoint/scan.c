/* scan.c - the table of checkpoint layouts, which of them a directory
 * holds, and the scan driver: the layer above every layout file. */
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

/* The layouts launch reads, one row each (ck_int.h says what a row holds).
 * Adding a layout: a value of ckpt_layout_t, a file with its detect and
 * scan, and its row here. Detection lists them in this order. */
static const ck_layout_t *const ck_layouts[] = {
    &ck_layout_launch, &ck_layout_megatron, &ck_layout_deepspeed,
    &ck_layout_hf,     &ck_layout_dcp,
};

static const ck_layout_t *ck_layout_of(ckpt_layout_t l) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(ck_layouts); i++)
    if (ck_layouts[i]->id == l)
      return ck_layouts[i];
  return NULL;
}

const char *ckpt_layout_name(ckpt_layout_t l) {
  const ck_layout_t *row = ck_layout_of(l);
  return l == CKPT_LAYOUT_AUTO ? "auto" : row ? row->name : "?";
}

int ckpt_layout_parse(const char *s, ckpt_layout_t *out) {
  if (strcmp(s, "auto") == 0) {
    *out = CKPT_LAYOUT_AUTO;
    return 0;
  }
  for (size_t i = 0; i < LU_ARRAY_SIZE(ck_layouts); i++)
    if (strcmp(s, ck_layouts[i]->name) == 0) {
      *out = ck_layouts[i]->id;
      return 0;
    }
  return RDZV_EINVAL;
}

/* ---- detection ------------------------------------------------------------------ */

/* What one entry says: the layouts that own it alone if any, else those
 * that see it; *weak collects the claims that count only when nothing
 * else is seen. A bit per ckpt_layout_t. */
static unsigned ck_detect_entry(const ck_entry_t *e, unsigned *weak) {
  unsigned own = 0, yes = 0, maybe = 0;
  for (size_t i = 0; i < LU_ARRAY_SIZE(ck_layouts); i++) {
    unsigned bit = 1u << ck_layouts[i]->id;
    switch (ck_layouts[i]->detect(e)) {
    case CK_SEEN_OWN:
      own |= bit;
      break;
    case CK_SEEN_YES:
      yes |= bit;
      break;
    case CK_SEEN_WEAK:
      maybe |= bit;
      break;
    default:
      break;
    }
  }
  if (own)
    return own;
  *weak |= maybe;
  return yes;
}

static unsigned ck_detect(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  unsigned m = 0, weak = 0;
  char p[4096];
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    const char *nm = e->d_name;
    struct stat st;
    ck_entry_t en;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 ||
        ck_join(p, sizeof(p), dir, nm) != 0 || stat(p, &st) != 0 ||
        !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
      continue;
    en.dir = dir;
    en.name = nm;
    en.path = p;
    en.is_dir = S_ISDIR(st.st_mode);
    m |= ck_detect_entry(&en, &weak);
  }
  closedir(d);
  return m ? m : weak;
}

int ckpt_scan(const char *dir, const ckpt_scan_options_t *opt,
              ckpt_scan_t **out, char *err, size_t errlen) {
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  const ck_layout_t *row;
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
    for (size_t i = 0; i < LU_ARRAY_SIZE(ck_layouts); i++)
      if (m & (1u << ck_layouts[i]->id)) {
        if (found++)
          strncat(list, ", ", sizeof(list) - strlen(list) - 1);
        strncat(list, ck_layouts[i]->name, sizeof(list) - strlen(list) - 1);
        s->layout = ck_layouts[i]->id;
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
  if ((row = ck_layout_of(s->layout)) == NULL) {
    lu_errf(err, errlen, "unknown layout %d", (int)s->layout);
    rc = RDZV_EINVAL;
  } else {
    rc = row->scan(dir, &o, s, err, errlen);
  }
  if (rc != 0) {
    if (rc == RDZV_ENOMEM)
      lu_errf(err, errlen, "out of memory");
    ckpt_scan_free(s);
    return rc;
  }
  ck_scan_sort(s);
  if (row->pointer)
    ck_latest_verdict(s, row->pointer);
  *out = s;
  return 0;
}
