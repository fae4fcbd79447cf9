/* layout_peers.c - other trainers' checkpoint layouts, read-only.
 *
 * For each layout: list its steps, and for each step decide whether every
 * file the layout's own metadata promises is there, non-empty and whole
 * (a torch.save zip ends with its central directory; a safetensors file
 * is as long as its header says). What each layout promises, and how far
 * we read it, is in docs/checkpoints.md ("Other trainers' layouts"):
 *
 *  Megatron-LM  latest_checkpointed_iteration.txt; iter_NNNNNNN/ with
 *               mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt (+ distrib_optim.pt),
 *               or a torch_dist checkpoint (metadata.json, .metadata, *.distcp)
 *  DeepSpeed    latest (a tag); global_stepN/ with mp_rank_MM_model_states.pt
 *               and ZeRO shards [bf16_|fp16_]zero_pp_rank_D_mp_rank_MM_optim_states.pt
 *  Hugging Face checkpoint-N/ with trainer_state.json, weights, optimizer.pt,
 *               scheduler.pt, rng_state[_K].pth
 *  DCP          .metadata + __R_I.distcp, in the directory or its subdirectories
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_int.h"

#define MEG_TRACKER "latest_checkpointed_iteration.txt"
#define MEG_FILE "model_optim_rng.pt"
#define MEG_DISTOPT "distrib_optim.pt"
#define DS_LATEST "latest"
#define HF_STATE "trainer_state.json"
#define DCP_META CK_DCP_META

/* ---- small helpers --------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void ck_free_names(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* The entries of a directory (without . and ..), sorted. */
static int list_dir(const char *path, char ***out, size_t *n) {
  DIR *d = opendir(path);
  struct dirent *e;
  char **v = NULL;
  size_t cap = 0;
  *n = 0;
  *out = NULL;
  if (d == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (*n == cap) {
      char **nv = realloc(v, (cap = cap ? cap * 2 : 32) * sizeof(*v));
      if (nv == NULL)
        goto nomem;
      v = nv;
    }
    if ((v[*n] = strdup(e->d_name)) == NULL)
      goto nomem;
    (*n)++;
  }
  closedir(d);
  if (*n > 1)
    qsort(v, *n, sizeof(*v), cmp_str);
  *out = v;
  return 0;
nomem:
  closedir(d);
  ck_free_names(v, *n);
  *n = 0;
  return RDZV_ENOMEM;
}

static int has_name(char **names, size_t n, const char *name) {
  return n > 0 && bsearch(&name, names, n, sizeof(*names), cmp_str) != NULL;
}

static int is_dir(const char *dir, const char *name) {
  char p[4096];
  struct stat st;
  return ck_join(p, sizeof(p), dir, name) == 0 && stat(p, &st) == 0 &&
         S_ISDIR(st.st_mode);
}

/* A problem on a step: the first one names the file and sets the state. */
static void bad(ckpt_step_t *st, ckpt_state_t state, const char *fmt, ...)
    LU_PRINTF(3, 4);
static void bad(ckpt_step_t *st, ckpt_state_t state, const char *fmt, ...) {
  va_list ap;
  if (st->state != CKPT_STEP_COMPLETE)
    return;
  st->state = state;
  va_start(ap, fmt);
  vsnprintf(st->problem, sizeof(st->problem), fmt, ap);
  va_end(ap);
}

static ckpt_state_t state_of(int rc) {
  return rc == CKPT_EINCOMPLETE || rc == -ENOENT ? CKPT_STEP_INCOMPLETE
                                                  : CKPT_STEP_CORRUPT;
}

/* Read a small file; RET 0, -errno, CKPT_EFORMAT (too big). */
static int read_small(const char *dir, const char *name, size_t max,
                      char **data, size_t *len) {
  char p[4096];
  int rc;
  if ((rc = ck_join(p, sizeof(p), dir, name)) != 0)
    return rc;
  rc = lu_read_file(p, max, data, len);
  return rc == RDZV_ETOOBIG ? CKPT_EFORMAT : rc;
}

/* A file of a step, checked by ck_torch_check (safetensors = 0) or
 * ck_safetensors_check. With pkl, a torch file's main pickle (NULL when
 * unreadable). `label` is the name shown in the problem (relative to the
 * step directory). RET 0 when good. */
static int check_file(const char *dir, const char *name, const char *label,
                      ckpt_step_t *st, int safetensors, unsigned char **pkl,
                      size_t *pkl_len) {
  char p[4096], why[256];
  ck_src_t src;
  int rc;
  if (pkl)
    *pkl = NULL;
  if ((rc = ck_join(p, sizeof(p), dir, name)) == 0)
    rc = ck_src_file(&src, p);
  if (rc != 0) {
    bad(st, state_of(rc), "%s: %s", label,
        rc == -ENOENT ? "missing" : rdzv_strerror(rc));
    return rc;
  }
  st->files++;
  st->bytes += src.size;
  why[0] = '\0';
  rc = safetensors ? ck_safetensors_check(&src, why, sizeof(why))
                   : ck_torch_check(&src, pkl, pkl_len, why, sizeof(why));
  ck_src_close(&src);
  if (rc != 0)
    bad(st, state_of(rc), "%s: %s", label, why[0] ? why : rdzv_strerror(rc));
  return rc;
}

static int check_torch(const char *dir, const char *name, const char *label,
                       ckpt_step_t *st, unsigned char **pkl, size_t *pkl_len) {
  return check_file(dir, name, label, st, 0, pkl, pkl_len);
}

static int check_safetensors(const char *dir, const char *name,
                             ckpt_step_t *st) {
  return check_file(dir, name, name, st, 1, NULL, NULL);
}

/* Any other file: present and non-empty. */
static int check_nonempty(const char *dir, const char *name, ckpt_step_t *st) {
  char p[4096];
  struct stat sb;
  if (ck_join(p, sizeof(p), dir, name) != 0 || stat(p, &sb) != 0) {
    bad(st, CKPT_STEP_INCOMPLETE, "%s: missing", name);
    return CKPT_EINCOMPLETE;
  }
  st->files++;
  st->bytes += (uint64_t)sb.st_size;
  if (sb.st_size == 0) {
    bad(st, CKPT_STEP_INCOMPLETE, "%s: empty file", name);
    return CKPT_EINCOMPLETE;
  }
  return 0;
}

/* Pick the step the layout's pointer names. */
static void mark_latest(ckpt_scan_t *s, const char *name) {
  for (size_t i = 0; i < s->nsteps; i++)
    if (strcmp(s->steps[i].name, name) == 0)
      s->steps[i].is_latest = 1;
}

/* The trimmed text of a pointer file. */
static size_t trim(const char *buf, size_t len, const char **start) {
  while (len > 0 && (*buf == ' ' || *buf == '\t' || *buf == '\n' ||
                     *buf == '\r')) {
    buf++;
    len--;
  }
  while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t' ||
                     buf[len - 1] == '\n' || buf[len - 1] == '\r'))
    len--;
  *start = buf;
  return len;
}

/* Is name PREFIX followed by the number N spelled as the trainer spells
 * it (zero-padded to width digits, 0: no leading zero)? Into *step. Another
 * spelling of a number (checkpoint-010) is not a step: a trainer told to
 * resume step 10 loads checkpoint-10, not that directory. */
static int step_name(const char *name, const char *prefix, int width,
                     int64_t *step) {
  size_t pl = strlen(prefix);
  char again[CKPT_NAME_MAX];
  int64_t v;
  if (strncmp(name, prefix, pl) != 0 || !ck_all_digits(name + pl, &v))
    return 0;
  snprintf(again, sizeof(again), "%0*lld", width, (long long)v);
  if (strcmp(again, name + pl) != 0)
    return 0;
  *step = v;
  return 1;
}

/* The step directories of a layout: PREFIX<number> of width (that
 * number is the step), and `also` (a name the pointer gives, or "release")
 * with step -1. Each one is checked by fn. */
typedef int (*step_fn)(const char *path, ckpt_step_t *st);

static int scan_steps(const char *dir, ckpt_scan_t *s, const char *prefix,
                      int width, const char *also, step_fn fn,
                      char *err, size_t errlen) {
  char **names;
  size_t n;
  int rc;
  if ((rc = list_dir(dir, &names, &n)) != 0) {
    lu_errf(err, errlen, "%s: %s", dir, rdzv_strerror(rc));
    return rc;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    int64_t step = -1;
    char p[4096];
    ckpt_step_t *st;
    if (!step_name(names[i], prefix, width, &step) &&
        !(also && strcmp(names[i], also) == 0))
      continue;
    if (!is_dir(dir, names[i]) || ck_join(p, sizeof(p), dir, names[i]) != 0)
      continue;
    if ((st = ck_scan_add(s)) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    st->step = step;
    lu_strlcpy(st->name, names[i], sizeof(st->name));
    rc = fn(p, st);
  }
  ck_free_names(names, n);
  if (rc == 0 && s->latest_name[0])
    mark_latest(s, s->latest_name);
  return rc;
}

/* A layout's pointer file into s->latest_name through parse(); one that is
 * there but does not parse goes to latest_problem with `what`. */
typedef int (*pointer_fn)(const char *buf, size_t len, char *name, size_t n);

static void read_pointer(const char *dir, const char *file, ckpt_scan_t *s,
                         pointer_fn parse, const char *what) {
  char *data;
  size_t len;
  int rc = read_small(dir, file, 4096, &data, &len);
  if (rc == 0) {
    if (parse(data, len, s->latest_name, sizeof(s->latest_name)) != 0)
      ck_problem(s->latest_problem, sizeof(s->latest_problem), "%s %s", file,
                 what);
    free(data);
  } else if (rc != -ENOENT) {
    ck_problem(s->latest_problem, sizeof(s->latest_problem), "%s: %s", file,
               rdzv_strerror(rc));
  }
}

static int cmp_step_up(const void *a, const void *b) {
  const ckpt_step_t *x = *(ckpt_step_t *const *)a;
  const ckpt_step_t *y = *(ckpt_step_t *const *)b;
  return (x->step > y->step) - (x->step < y->step);
}

/* The last process's file missing (Hugging Face's rng_state_K.pth, a DCP
 * rank's __R.metadata without collectives) leaves those of 0..K-1, which
 * look complete: the newest complete older step of the same kind says how
 * many processes wrote, and a step of fewer is incomplete. Hugging Face's
 * step of one process (rng_state.pth) is not of fewer. */
static int fewer_than_before(const char *dir, ckpt_scan_t *s, int dcp) {
  ckpt_step_t **up, *prev = NULL;
  if (s->nsteps < 2)
    return 0;
  if ((up = malloc(s->nsteps * sizeof(*up))) == NULL)
    return RDZV_ENOMEM;
  for (size_t i = 0; i < s->nsteps; i++)
    up[i] = &s->steps[i];
  qsort(up, s->nsteps, sizeof(*up), cmp_step_up);
  for (size_t i = 0; i < s->nsteps; i++) {
    ckpt_step_t *st = up[i];
    char d[4096], p[4096];
    struct stat sb;
    if (st->step < 0 || st->state != CKPT_STEP_COMPLETE ||
        (dcp && st->replicated))
      continue;
    if (prev && st->world_size < prev->world_size && dcp) {
      bad(st, CKPT_STEP_INCOMPLETE, "__%d%s: missing (%s before it was "
          "saved by %d ranks, each writing its own last)", st->world_size,
          DCP_META, prev->name, prev->world_size);
      continue;
    }
    if (prev && st->world_size < prev->world_size &&
        !(st->world_size == 0 && ck_join(d, sizeof(d), dir, st->name) == 0 &&
          ck_join(p, sizeof(p), d, "rng_state.pth") == 0 &&
          stat(p, &sb) == 0)) {
      bad(st, CKPT_STEP_INCOMPLETE, "rng_state_%d.pth: missing (%s before "
          "it has rng states of %d processes)", st->world_size, prev->name,
          prev->world_size);
      continue;
    }
    prev = st;
  }
  free(up);
  return 0;
}

/* ---- DCP --------------------------------------------------------------------------- */

static int cmp_storage(const void *a, const void *b) {
  const pk_storage_t *x = a, *y = b;
  size_t n = x->plen < y->plen ? x->plen : y->plen;
  int c = memcmp(x->path, y->path, n);
  return c ? c : (x->plen > y->plen) - (x->plen < y->plen);
}

/* A save into a directory that already holds a complete DCP checkpoint
 * (the same step-N saved again, or dcp.save to one fixed path) reopens
 * every __R_I.distcp with O_TRUNC and replaces the metadata file last.
 * Killed in between, the old metadata names files some of which are
 * already the new save's, as long as before whenever the state's shapes
 * did not change: DCP loads that mix without a word. In a complete save
 * every data file was written before its metadata file, so a data file
 * modified well after it (RESAVE_SKEW_NS: the clocks of the nodes writing
 * one shared directory, which Lustre and GPFS stamp times with) that
 * existed before it was rewritten in place by a later save. A file created
 * after the metadata file is a copy (cp -r without -p), not a rewrite;
 * where the filesystem records no creation times, modification times
 * alone decide. The Hugging Face Trainer's trainer_state.json is that
 * last file of its checkpoint-N (hf_step). */
#define RESAVE_SKEW_NS (2LL * 1000000000)

typedef struct {
  int64_t mtime, btime; /* ns; btime -1: not recorded */
} ck_ftimes_t;

static int file_times(const char *path, ck_ftimes_t *t) {
  struct statx sx;
  struct stat sb;
  if (statx(AT_FDCWD, path, 0, STATX_MTIME | STATX_BTIME, &sx) == 0 &&
      (sx.stx_mask & STATX_MTIME)) {
    t->mtime = (int64_t)sx.stx_mtime.tv_sec * 1000000000 + sx.stx_mtime.tv_nsec;
    t->btime = sx.stx_mask & STATX_BTIME
                   ? (int64_t)sx.stx_btime.tv_sec * 1000000000 +
                         sx.stx_btime.tv_nsec
                   : -1;
    return 0;
  }
  if (stat(path, &sb) != 0)
    return -1;
  t->mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
  t->btime = -1;
  return 0;
}

/* Was file `file` rewritten after meta (its times in *mt), the file a
 * save writes last, was written? Says so on st. */
static void rewritten_after(const char *dir, const char *file,
                          const char *meta_name, const ck_ftimes_t *mt,
                          ckpt_step_t *st) {
  char p[4096];
  ck_ftimes_t ft;
  if (mt == NULL || ck_join(p, sizeof(p), dir, file) != 0 ||
      file_times(p, &ft) != 0 || ft.mtime - mt->mtime <= RESAVE_SKEW_NS ||
      (ft.btime >= 0 && mt->btime >= 0 && ft.btime >= mt->btime))
    return;
  bad(st, CKPT_STEP_INCOMPLETE, "%s: modified %.1f s after %s was written "
      "(a later save into this directory was cut short: its files and the "
      "older save's are mixed)", file, (double)(ft.mtime - mt->mtime) / 1e9,
      meta_name);
}

/* Without storage records: the files the names promise (ranks 0..max).
 * mt: the times of .metadata, to check every data file against (NULL: a
 * rank's own metadata, which names only that rank's files). */
static void dcp_by_names(const char *dir, char **names, size_t n,
                         const ck_ftimes_t *mt, ckpt_step_t *st) {
  int64_t maxr = -1, r;
  unsigned char *seen;
  for (size_t i = 0; i < n; i++)
    if (ck_dcp_file_rank(names[i], &r) == 0 && r > maxr)
      maxr = r;
  if (maxr < 0) {
    bad(st, CKPT_STEP_INCOMPLETE, "no __R_I.distcp file");
    return;
  }
  if (maxr >= CK_MAX_WORLD || (seen = calloc((size_t)maxr + 1, 1)) == NULL) {
    bad(st, CKPT_STEP_CORRUPT, "distcp rank numbers up to %lld",
        (long long)maxr);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (ck_dcp_file_rank(names[i], &r) == 0) {
      seen[r] = 1;
      if (check_nonempty(dir, names[i], st) == 0)
        rewritten_after(dir, names[i], DCP_META, mt, st);
    }
  for (int64_t k = 0; k <= maxr; k++)
    if (!seen[k]) {
      bad(st, CKPT_STEP_INCOMPLETE, "__%lld_0.distcp: missing (files of "
          "ranks up to %lld are there)", (long long)k, (long long)maxr);
      break;
    }
  st->world_size = (int)maxr + 1;
  free(seen);
}

/* The files one metadata file (meta: .metadata or __R.metadata) names
 * must hold the bytes its storage records place in them. OUT *maxr: the
 * largest R of the __R_I.distcp files checked, -1 none.
 * RET 0 (verdicts in st) or RDZV_ENOMEM. */
static int dcp_check_meta(const char *dir, char **names, size_t n,
                          const char *meta_name, ckpt_step_t *st,
                          int64_t *maxr) {
  char *meta = NULL;
  size_t len;
  pk_storage_t *recs = NULL;
  size_t nrecs = 0;
  char mp[4096], tmp[64];
  ck_ftimes_t mt;
  const ck_ftimes_t *mtp;
  int rc;
  *maxr = -1;
  mtp = ck_join(mp, sizeof(mp), dir, meta_name) == 0 &&
                file_times(mp, &mt) == 0
            ? &mt
            : NULL;
  rc = read_small(dir, meta_name, CK_META_MAX, &meta, &len);
  if (rc == CKPT_EFORMAT) {
    /* Larger than we read: judge by the file names. */
    dcp_by_names(dir, names, n, strcmp(meta_name, DCP_META) == 0 ? mtp : NULL,
                 st);
    *maxr = st->world_size - 1;
    return 0;
  }
  if (rc != 0) {
    bad(st, state_of(rc), "%s: %s", meta_name, rdzv_strerror(rc));
    return 0;
  }
  st->files++;
  st->bytes += len;
  if (len == 0) {
    bad(st, CKPT_STEP_INCOMPLETE, "%s: empty file", meta_name);
    goto out;
  }
  rc = pk_dcp_storage((unsigned char *)meta, len, &recs, &nrecs);
  if (rc == RDZV_ENOMEM)
    goto out;
  if (rc != 0) {
    rc = 0;
    bad(st, CKPT_STEP_CORRUPT, "%s: not a complete pickle", meta_name);
    goto out;
  }
  if (nrecs == 0) {
    dcp_by_names(dir, names, n, strcmp(meta_name, DCP_META) == 0 ? mtp : NULL,
                 st);
    *maxr = st->world_size - 1;
    goto out;
  }
  qsort(recs, nrecs, sizeof(*recs), cmp_storage);
  for (size_t i = 0; i < nrecs;) {
    char file[CKPT_NAME_MAX], p[4096];
    int64_t need = 0, r;
    size_t j = i;
    struct stat sb;
    for (; j < nrecs && cmp_storage(&recs[i], &recs[j]) == 0; j++)
      if (recs[j].offset >= 0 && recs[j].length >= 0 &&
          recs[j].offset <= INT64_MAX - recs[j].length &&
          recs[j].offset + recs[j].length > need)
        need = recs[j].offset + recs[j].length;
    if (recs[i].plen >= sizeof(file)) {
      bad(st, CKPT_STEP_CORRUPT, "%s: a storage path is too long", meta_name);
      break;
    }
    memcpy(file, recs[i].path, recs[i].plen);
    file[recs[i].plen] = '\0';
    i = j;
    if (!ck_name_ok(file)) {
      bad(st, CKPT_STEP_CORRUPT, "%s: storage path '%.60s' is not a file "
          "of this directory", meta_name, file);
      break;
    }
    if (ck_dcp_file_rank(file, &r) == 0 && r > *maxr)
      *maxr = r;
    if (ck_join(p, sizeof(p), dir, file) != 0 || stat(p, &sb) != 0) {
      bad(st, CKPT_STEP_INCOMPLETE, "%s: missing (named by %s)", file,
          meta_name);
      continue;
    }
    st->files++;
    st->bytes += (uint64_t)sb.st_size;
    if (sb.st_size == 0 || (int64_t)sb.st_size < need)
      bad(st, CKPT_STEP_INCOMPLETE, "%s: %lld bytes, %s places data up to "
          "byte %lld (truncated)", file, (long long)sb.st_size, meta_name,
          (long long)need);
    rewritten_after(dir, file, meta_name, mtp, st);
  }
out:
  /* DCP writes the new metadata to NAME.tmp, removes NAME and renames:
   * both there, a save was cut short after its data files were written. */
  snprintf(tmp, sizeof(tmp), "%s.tmp", meta_name);
  if (has_name(names, n, tmp))
    bad(st, CKPT_STEP_INCOMPLETE, "%s: there beside %s (a later save into "
        "this directory wrote its data files and was cut short before "
        "replacing %s)", tmp, meta_name, meta_name);
  free(recs);
  free(meta);
  return rc == RDZV_ENOMEM ? rc : 0;
}

/* save(use_collectives=False): no .metadata, but __R.metadata of every
 * rank R, each naming that rank's files; each rank loads its own, so the
 * step needs the world size that wrote it. */
static int dcp_per_rank(const char *dir, char **names, size_t n,
                        ckpt_step_t *st) {
  int64_t nmeta = -1, maxfile = -1, r, mr;
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (ck_dcp_rank_meta(names[i], &r) == 0 && r + 1 > nmeta)
      nmeta = r + 1;
    if (ck_dcp_file_rank(names[i], &r) == 0 && r > maxfile)
      maxfile = r;
  }
  if (nmeta > CK_MAX_WORLD) {
    bad(st, CKPT_STEP_CORRUPT, "__%lld.metadata: rank out of range",
        (long long)nmeta - 1);
    return 0;
  }
  for (int64_t k = 0; k < nmeta && rc == 0; k++) {
    char f[48];
    snprintf(f, sizeof(f), "__%lld%s", (long long)k, DCP_META);
    if (!has_name(names, n, f)) {
      bad(st, CKPT_STEP_INCOMPLETE, "%s: missing (DCP without collectives: "
          "every rank writes its own, last)", f);
      continue;
    }
    rc = dcp_check_meta(dir, names, n, f, st, &mr);
  }
  if (maxfile >= nmeta)
    bad(st, CKPT_STEP_INCOMPLETE, "__%lld%s: missing (rank %lld wrote data "
        "files but not its metadata: the save did not finish)",
        (long long)maxfile, DCP_META, (long long)maxfile);
  st->world_size = (int)nmeta;
  st->replicated = 0;
  return rc;
}

/* One DCP checkpoint directory. */
static int dcp_step(const char *dir, ckpt_step_t *st) {
  char **names;
  size_t n;
  int64_t maxr = -1, r;
  int rc, per_rank = 0;
  if ((rc = list_dir(dir, &names, &n)) != 0)
    return rc;
  for (size_t i = 0; i < n && !per_rank; i++)
    per_rank = ck_dcp_rank_meta(names[i], &r) == 0;
  if (!has_name(names, n, DCP_META)) {
    if (per_rank)
      rc = dcp_per_rank(dir, names, n, st);
    else
      bad(st, CKPT_STEP_INCOMPLETE, "%s: missing (DCP writes it last: the "
          "save did not finish)", DCP_META);
    goto out;
  }
  rc = dcp_check_meta(dir, names, n, DCP_META, st, &maxr);
  /* DCP reshards on load: any world size may resume from this step. */
  if (maxr >= 0)
    st->world_size = (int)(maxr + 1);
  st->replicated = 1;
out:
  ck_free_names(names, n);
  return rc == RDZV_ENOMEM ? rc : 0;
}

static int dcp_like(const char *dir) {
  char **names;
  size_t n;
  int found = 0;
  if (list_dir(dir, &names, &n) != 0)
    return 0;
  for (size_t i = 0; i < n && !found; i++)
    found = ck_dcp_name(names[i]);
  ck_free_names(names, n);
  return found;
}

/* A name whose trailing number has leading zeros (step-010): not the
 * spelling of its step (launch writes step-N, a trainer told step 10 loads
 * step-10), so not a step. */
static int zero_padded(const char *name) {
  size_t n = strlen(name), k = n;
  while (k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9')
    k--;
  return n - k > 1 && name[k] == '0';
}

static int scan_dcp(const char *dir, const ckpt_scan_options_t *o,
                    ckpt_scan_t *s, char *err, size_t errlen) {
  char **names;
  size_t n;
  int rc;
  (void)o;
  if (dcp_like(dir)) {
    ckpt_step_t *st = ck_scan_add(s);
    if (st == NULL)
      return RDZV_ENOMEM;
    lu_strlcpy(st->name, ".", sizeof(st->name));
    return dcp_step(dir, st);
  }
  if ((rc = list_dir(dir, &names, &n)) != 0) {
    lu_errf(err, errlen, "%s: %s", dir, rdzv_strerror(rc));
    return rc;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    char p[4096];
    ckpt_step_t *st;
    /* abandoned-step-N-T: what launch before issue #22 set aside here;
     * its trailing number is a time, not a step. */
    if (names[i][0] == '.' || strncmp(names[i], "abandoned-", 10) == 0 ||
        zero_padded(names[i]) || !is_dir(dir, names[i]) ||
        ck_join(p, sizeof(p), dir, names[i]) != 0 || !dcp_like(p))
      continue;
    if ((st = ck_scan_add(s)) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    lu_strlcpy(st->name, names[i], sizeof(st->name));
    st->step = ck_trailing_number(names[i]);
    rc = dcp_step(p, st);
  }
  ck_free_names(names, n);
  return rc == 0 ? fewer_than_before(dir, s, 1) : rc;
}

/* ---- Megatron-LM --------------------------------------------------------------- */

int ck_megatron_tracker(const char *buf, size_t len, int64_t *step,
                        int *release) {
  const char *s;
  len = trim(buf, len, &s);
  *release = 0;
  if (len == 7 && memcmp(s, "release", 7) == 0) {
    *release = 1;
    *step = 0;
    return 0;
  }
  if (len == 0 || len > 18)
    return CKPT_EFORMAT;
  for (size_t i = 0; i < len; i++)
    if (s[i] < '0' || s[i] > '9')
      return CKPT_EFORMAT;
  return lu_parse_i64(s, len, step) == 0 ? 0 : CKPT_EFORMAT;
}

int ck_megatron_metadata(const char *buf, size_t len, char *backend,
                         size_t n) {
  cj_doc_t *doc;
  const cj_t *root, *v;
  int rc = cj_parse(buf, len, &doc, &root, NULL, 0);
  if (rc != 0)
    return rc;
  v = cj_get(root, "sharded_backend");
  if (v == NULL || v->type != CJ_STR) {
    cj_free(doc);
    return CKPT_EFORMAT;
  }
  lu_strlcpy(backend, v->s, n);
  cj_free(doc);
  return 0;
}

/* "mp_rank_TT[_PPP[_EEE]]": up to three indices. RET the count, 0 if not. */
static int meg_parse(const char *name, int64_t idx[3]) {
  char buf[64], *save = NULL, *tok;
  int k = 0;
  if (strncmp(name, "mp_rank_", 8) != 0 ||
      lu_strlcpy(buf, name + 8, sizeof(buf)) >= sizeof(buf))
    return 0;
  for (tok = strtok_r(buf, "_", &save); tok; tok = strtok_r(NULL, "_", &save)) {
    if (k == 3 || !ck_all_digits(tok, &idx[k]))
      return 0;
    k++;
  }
  return k;
}

/* a x b x c ranks, each at least 1, within CK_MAX_WORLD (no overflow). */
static int world_ok(int64_t a, int64_t b, int64_t c) {
  return a >= 1 && b >= 1 && c >= 1 && a <= CK_MAX_WORLD &&
         b <= CK_MAX_WORLD / a && c <= CK_MAX_WORLD / (a * b);
}

/* A name that does not fit is left empty (it names no file). */
static void meg_name(char *buf, size_t n, int dims, const int64_t *i) {
  int w;
  if (dims == 1)
    w = snprintf(buf, n, "mp_rank_%02lld", (long long)i[0]);
  else if (dims == 2)
    w = snprintf(buf, n, "mp_rank_%02lld_%03lld", (long long)i[0],
                 (long long)i[1]);
  else
    w = snprintf(buf, n, "mp_rank_%02lld_%03lld_%03lld", (long long)i[0],
                 (long long)i[1], (long long)i[2]);
  if (w < 0 || (size_t)w >= n)
    buf[0] = '\0';
}

static int megatron_step(const char *dir, ckpt_step_t *st) {
  char **names;
  size_t n, missing = 0;
  int dims = 0, rc;
  int64_t size[3] = {1, 1, 1}, idx[3];
  char first[CKPT_NAME_MAX] = "", from[160] = "";
  int distopt = 0;
  if ((rc = list_dir(dir, &names, &n)) != 0)
    return rc;
  /* The torch_dist format (Megatron's default since core 0.7): a DCP
   * checkpoint plus common.pt, announced by metadata.json. */
  if (has_name(names, n, "metadata.json")) {
    char *data, backend[64] = "";
    size_t len;
    rc = read_small(dir, "metadata.json", CK_SMALL_MAX, &data, &len);
    if (rc == 0) {
      rc = ck_megatron_metadata(data, len, backend, sizeof(backend));
      free(data);
    }
    if (rc != 0) {
      bad(st, state_of(rc), "metadata.json: %s",
          rc == CKPT_EFORMAT ? "does not parse" : rdzv_strerror(rc));
    } else if (strcmp(backend, "torch_dist") == 0) {
      check_torch(dir, "common.pt", "common.pt", st, NULL, NULL);
      rc = dcp_step(dir, st);
    } else {
      /* zarr and others: presence only. */
      for (size_t i = 0; i < n; i++)
        if (names[i][0] != '.' && !is_dir(dir, names[i]))
          check_nonempty(dir, names[i], st);
    }
    ck_free_names(names, n);
    return rc == RDZV_ENOMEM ? rc : 0;
  }
  /* The legacy format: one directory per model-parallel rank. */
  for (size_t i = 0; i < n; i++) {
    int k = meg_parse(names[i], idx);
    if (k == 0)
      continue;
    if (dims == 0) {
      dims = k;
      lu_strlcpy(first, names[i], sizeof(first));
    } else if (k != dims) {
      bad(st, CKPT_STEP_CORRUPT, "%s and %s: mixed naming schemes", first,
          names[i]);
      ck_free_names(names, n);
      return 0;
    }
    for (int d = 0; d < k; d++)
      if (idx[d] + 1 > size[d])
        size[d] = idx[d] + 1;
    if (!distopt) {
      char p[4096], q[4096];
      struct stat sb;
      distopt = ck_join(p, sizeof(p), dir, names[i]) == 0 &&
                ck_join(q, sizeof(q), p, MEG_DISTOPT) == 0 &&
                stat(q, &sb) == 0;
    }
  }
  if (dims == 0) {
    bad(st, CKPT_STEP_INCOMPLETE, "no mp_rank_* directory and no "
        "metadata.json");
    ck_free_names(names, n);
    return 0;
  }
  /* Rank (0, 0, 0)'s args say how many model-parallel ranks saved. */
  {
    char p[4096], label[CKPT_NAME_MAX + 32];
    unsigned char *pkl = NULL;
    size_t plen = 0;
    int64_t zero[3] = {0, 0, 0};
    char d0[64];
    meg_name(d0, sizeof(d0), dims, zero);
    snprintf(label, sizeof(label), "%s/%s", d0, MEG_FILE);
    if (ck_join(p, sizeof(p), dir, d0) == 0 &&
        check_torch(p, MEG_FILE, label, st, &pkl, &plen) == 0 && pkl) {
      pk_keyint_t keys[4] = {{"tensor_model_parallel_size", 0, 0},
                             {"pipeline_model_parallel_size", 0, 0},
                             {"expert_model_parallel_size", 0, 0},
                             {"use_distributed_optimizer", 0, 0}};
      if (pk_find_ints(pkl, plen, keys, 4) == 0 && keys[0].found &&
          keys[1].found && keys[0].value >= 1 && keys[1].value >= 1 &&
          keys[0].value <= 4096 && keys[1].value <= 4096) {
        int64_t tp = keys[0].value, pp = keys[1].value;
        int64_t ep = keys[2].found && keys[2].value > 1 ? keys[2].value : 1;
        /* Megatron adds the pipeline rank to the name only when pp > 1 and
         * the expert rank only when ep > 1. */
        if (1 + (pp > 1) + (ep > 1) == dims) {
          int d = 1;
          size[0] = tp;
          if (pp > 1)
            size[d++] = pp;
          if (ep > 1)
            size[d++] = ep;
          snprintf(from, sizeof(from), " (tensor %lld x pipeline %lld x "
                   "expert %lld in %s's args)", (long long)tp, (long long)pp,
                   (long long)ep, d0);
        }
        if (keys[3].found && keys[3].value)
          distopt = 1;
      }
      free(pkl);
    }
  }
  /* Bounded before anything is walked: metadata (or a directory name)
   * claiming billions of ranks must not keep the scan busy for hours. */
  if (!world_ok(size[0], dims >= 2 ? size[1] : 1, dims == 3 ? size[2] : 1)) {
    bad(st, CKPT_STEP_CORRUPT, "tensor %lld x pipeline %lld x expert %lld "
        "ranks%s: over launch's limit of %d ranks in a checkpoint",
        (long long)size[0], (long long)size[1], (long long)size[2],
        from[0] ? from : " (from the mp_rank directory names)", CK_MAX_WORLD);
    ck_free_names(names, n);
    return 0;
  }
  st->world_size = (int)(size[0] * size[1] * size[2]);
  /* Megatron checks the tensor and pipeline sizes on load; the
   * data-parallel size may change: any multiple of the grid loads. */
  st->replicated = CKPT_REPL_MULTIPLE;
  for (int64_t a = 0; a < size[0]; a++)
    for (int64_t b = 0; b < (dims >= 2 ? size[1] : 1); b++)
      for (int64_t c = 0; c < (dims == 3 ? size[2] : 1); c++) {
        int64_t i3[3] = {a, b, c};
        char d[64], p[4096], label[CKPT_NAME_MAX + 32];
        meg_name(d, sizeof(d), dims, i3);
        if (!has_name(names, n, d)) {
          bad(st, CKPT_STEP_INCOMPLETE, "%s/: missing%s", d,
              from[0] ? from : " (the other mp_rank directories promise it)");
          /* More missing than there are entries: the step is incomplete
           * whatever follows; time stays proportional to what is there. */
          if (++missing > n)
            goto done;
          continue;
        }
        if (ck_join(p, sizeof(p), dir, d) != 0)
          continue;
        if (a + b + c > 0) {
          snprintf(label, sizeof(label), "%s/%s", d, MEG_FILE);
          check_torch(p, MEG_FILE, label, st, NULL, NULL);
        }
        if (distopt) {
          snprintf(label, sizeof(label), "%s/%s", d, MEG_DISTOPT);
          check_torch(p, MEG_DISTOPT, label, st, NULL, NULL);
        }
      }
done:
  ck_free_names(names, n);
  return 0;
}

/* The tracker as the name of the directory it points at. */
static int meg_pointer(const char *buf, size_t len, char *name, size_t n) {
  int64_t it;
  int release;
  if (ck_megatron_tracker(buf, len, &it, &release) != 0)
    return CKPT_EFORMAT;
  if (release)
    lu_strlcpy(name, "release", n);
  else
    snprintf(name, n, "iter_%07lld", (long long)it);
  return 0;
}

static int scan_megatron(const char *dir, const ckpt_scan_options_t *o,
                         ckpt_scan_t *s, char *err, size_t errlen) {
  (void)o;
  read_pointer(dir, MEG_TRACKER, s, meg_pointer,
               "does not hold an iteration number (empty or cut short: "
               "Megatron writes it in place)");
  return scan_steps(dir, s, "iter_", 7, "release", megatron_step, err,
                    errlen);
}

/* ---- DeepSpeed ----------------------------------------------------------------- */

int ck_deepspeed_latest(const char *buf, size_t len, char *tag, size_t n) {
  const char *s;
  char tmp[CKPT_NAME_MAX];
  len = trim(buf, len, &s);
  if (len == 0 || len >= sizeof(tmp) || memchr(s, '\0', len))
    return CKPT_EFORMAT;
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  if (!ck_name_ok(tmp))
    return CKPT_EFORMAT;
  lu_strlcpy(tag, tmp, n);
  return 0;
}

/* DeepSpeed file names: the kind and the (dp, mp) ranks in them.
 *   mp_rank_MM_model_states.pt                        MODEL  (-, MM)
 *   zero_pp_rank_D_mp_rank_MM_model_states.pt         ZMODEL (D, MM)
 *   [bf16_|fp16_]zero_pp_rank_D_mp_rank_MM_optim_states.pt  OPTIM  (D, MM)
 * (DeepSpeed also reads an older "..._mp_rank_MMoptim_states.pt".) */
enum { DS_NONE, DS_MODEL, DS_ZMODEL, DS_OPTIM };

/* Decimal digits at *p into *v; *p moves past them. */
static int take_digits(const char **p, int64_t *v) {
  char num[20];
  size_t k = 0;
  while ((*p)[k] >= '0' && (*p)[k] <= '9') {
    if (k == sizeof(num) - 1)
      return 0;
    num[k] = (*p)[k];
    k++;
  }
  num[k] = '\0';
  if (k == 0 || !ck_all_digits(num, v))
    return 0;
  *p += k;
  return 1;
}

static int ds_parse(const char *name, int64_t *dp, int64_t *mp, char *prefix,
                    size_t plen) {
  const char *p = name;
  *dp = -1;
  prefix[0] = '\0';
  if (strncmp(p, "mp_rank_", 8) == 0) {
    p += 8;
    return take_digits(&p, mp) && strcmp(p, "_model_states.pt") == 0
               ? DS_MODEL
               : DS_NONE;
  }
  if ((strncmp(p, "bf16_", 5) == 0 || strncmp(p, "fp16_", 5) == 0) &&
      plen > 5) {
    memcpy(prefix, p, 5);
    prefix[5] = '\0';
    p += 5;
  }
  if (strncmp(p, "zero_pp_rank_", 13) != 0)
    return DS_NONE;
  p += 13;
  if (!take_digits(&p, dp) || strncmp(p, "_mp_rank_", 9) != 0)
    return DS_NONE;
  p += 9;
  if (!take_digits(&p, mp))
    return DS_NONE;
  if (strcmp(p, "_model_states.pt") == 0)
    return prefix[0] ? DS_NONE : DS_ZMODEL;
  if (strcmp(p, "_optim_states.pt") == 0 || strcmp(p, "optim_states.pt") == 0)
    return DS_OPTIM;
  return DS_NONE;
}

static int deepspeed_step(const char *dir, ckpt_step_t *st) {
  char **names, prefix[8] = "", pfx[8], from[200] = "", legacy[4] = "_";
  size_t n, missing = 0;
  int64_t maxdp = -1, maxmp = -1, dp_ws = 0, mp_ws = 0, d, m;
  int have_model = 0, have_zmodel = 0, have_optim = 0, rc;
  if ((rc = list_dir(dir, &names, &n)) != 0)
    return rc;
  for (size_t i = 0; i < n; i++) {
    int kind = ds_parse(names[i], &d, &m, pfx, sizeof(pfx));
    size_t len = strlen(names[i]);
    if (kind == DS_NONE) {
      /* Pipeline layer files (layer_NN-model_MM-model_states.pt) and MoE
       * expert files: whole, at least. */
      if (len > 15 && (strcmp(names[i] + len - 15, "model_states.pt") == 0 ||
                       strcmp(names[i] + len - 15, "optim_states.pt") == 0))
        check_torch(dir, names[i], names[i], st, NULL, NULL);
      continue;
    }
    if (m > maxmp)
      maxmp = m;
    if (kind == DS_MODEL) {
      have_model = 1;
    } else {
      if (d > maxdp)
        maxdp = d;
      if (kind == DS_ZMODEL) {
        have_zmodel = 1;
      } else {
        if (have_optim && strcmp(prefix, pfx) != 0) {
          bad(st, CKPT_STEP_CORRUPT, "ZeRO shards with two prefixes ('%s' "
              "and '%s')", prefix, pfx);
        }
        have_optim = 1;
        lu_strlcpy(prefix, pfx, sizeof(prefix));
        if (strstr(names[i], "_optim_states.pt") == NULL)
          legacy[0] = '\0';
      }
    }
  }
  if (!have_model && !have_zmodel) {
    bad(st, CKPT_STEP_INCOMPLETE, "no *_model_states.pt file");
    ck_free_names(names, n);
    return 0;
  }
  /* The model states of (dp 0, mp 0) say how many ranks saved:
   * dp_world_size and mp_world_size. */
  {
    char f[128];
    unsigned char *pkl = NULL;
    size_t plen = 0;
    if (have_model)
      snprintf(f, sizeof(f), "mp_rank_00_model_states.pt");
    else
      snprintf(f, sizeof(f), "zero_pp_rank_0_mp_rank_00_model_states.pt");
    if (check_torch(dir, f, f, st, &pkl, &plen) == 0 && pkl) {
      pk_keyint_t keys[2] = {{"dp_world_size", 0, 0},
                             {"mp_world_size", 0, 0}};
      if (pk_find_ints(pkl, plen, keys, 2) == 0) {
        if (keys[0].found && keys[0].value >= 1 &&
            keys[0].value <= CK_MAX_WORLD)
          dp_ws = keys[0].value;
        if (keys[1].found && keys[1].value >= 1 && keys[1].value <= 4096)
          mp_ws = keys[1].value;
      }
      if (dp_ws)
        snprintf(from, sizeof(from), " (dp_world_size %lld in %s)",
                 (long long)dp_ws, f);
    }
    free(pkl);
  }
  if (mp_ws == 0)
    mp_ws = maxmp + 1;
  if (dp_ws == 0)
    dp_ws = maxdp + 1;
  if (!from[0] && (have_zmodel || have_optim))
    snprintf(from, sizeof(from), " (ranks up to %lld are there)",
             (long long)maxdp);
  if (!world_ok(dp_ws > 0 ? dp_ws : 1, mp_ws > 0 ? mp_ws : 1, 1)) {
    bad(st, CKPT_STEP_CORRUPT, "dp_world_size %lld x mp_world_size %lld%s: "
        "over launch's limit of %d ranks in a checkpoint", (long long)dp_ws,
        (long long)mp_ws, from, CK_MAX_WORLD);
    ck_free_names(names, n);
    return 0;
  }
  st->world_size = (int)((dp_ws > 0 ? dp_ws : 1) * mp_ws);
  for (m = 0; m < mp_ws && missing <= n; m++) {
    char f[160];
    if (have_model) {
      snprintf(f, sizeof(f), "mp_rank_%02lld_model_states.pt", (long long)m);
      if (m > 0)
        check_torch(dir, f, f, st, NULL, NULL);
    }
    for (d = 0; d < dp_ws && (have_zmodel || have_optim) && missing <= n;
         d++) {
      if (have_zmodel) {
        snprintf(f, sizeof(f), "zero_pp_rank_%lld_mp_rank_%02lld_model_"
                 "states.pt", (long long)d, (long long)m);
        if (d + m > 0 || have_model) {
          if (!has_name(names, n, f)) {
            bad(st, CKPT_STEP_INCOMPLETE, "%s: missing%s", f, from);
            missing++;
          } else
            check_torch(dir, f, f, st, NULL, NULL);
        }
      }
      if (have_optim) {
        snprintf(f, sizeof(f), "%szero_pp_rank_%lld_mp_rank_%02lld%soptim_"
                 "states.pt", prefix, (long long)d, (long long)m, legacy);
        if (!has_name(names, n, f)) {
          bad(st, CKPT_STEP_INCOMPLETE, "%s: missing%s", f, from);
          missing++;
        } else
          check_torch(dir, f, f, st, NULL, NULL);
      }
    }
  }
  ck_free_names(names, n);
  return 0;
}

static int scan_deepspeed(const char *dir, const ckpt_scan_options_t *o,
                          ckpt_scan_t *s, char *err, size_t errlen) {
  (void)o;
  read_pointer(dir, DS_LATEST, s, ck_deepspeed_latest,
               "does not name a tag directory");
  return scan_steps(dir, s, "global_step", 0,
                    s->latest_name[0] ? s->latest_name : NULL, deepspeed_step,
                    err, errlen);
}

/* ---- Hugging Face Trainer ---------------------------------------------------------- */

int ck_hf_trainer_state(const char *buf, size_t len, int64_t *global_step,
                        char *why, size_t whylen) {
  cj_doc_t *doc;
  const cj_t *root;
  int rc = cj_parse(buf, len, &doc, &root, why, whylen);
  if (rc != 0)
    return rc;
  if (cj_int(cj_get(root, "global_step"), 0, INT64_MAX, global_step) != 0) {
    lu_errf(why, whylen, "no \"global_step\" integer");
    rc = CKPT_EFORMAT;
  }
  cj_free(doc);
  return rc;
}

int ck_hf_index(const char *buf, size_t len, char ***names, size_t *n,
                char *why, size_t whylen) {
  cj_doc_t *doc;
  const cj_t *root, *wm;
  char **v = NULL;
  size_t k = 0;
  int rc = cj_parse(buf, len, &doc, &root, why, whylen);
  *names = NULL;
  *n = 0;
  if (rc != 0)
    return rc;
  wm = cj_get(root, "weight_map");
  if (wm == NULL || wm->type != CJ_OBJ) {
    lu_errf(why, whylen, "no \"weight_map\" object");
    cj_free(doc);
    return CKPT_EFORMAT;
  }
  if (wm->n > 0 && (v = calloc(wm->n, sizeof(*v))) == NULL) {
    cj_free(doc);
    return RDZV_ENOMEM;
  }
  for (const cj_t *e = wm->first; e; e = e->next) {
    if (e->type != CJ_STR || !ck_name_ok(e->s)) {
      lu_errf(why, whylen, "weight_map[\"%.60s\"] is not a file name",
              e->key);
      rc = CKPT_EFORMAT;
      break;
    }
    if ((v[k] = strdup(e->s)) == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    k++;
  }
  cj_free(doc);
  if (rc != 0) {
    ck_free_names(v, k);
    return rc;
  }
  /* Unique shard names. */
  if (k > 1)
    qsort(v, k, sizeof(*v), cmp_str);
  {
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
      if (u > 0 && strcmp(v[u - 1], v[i]) == 0) {
        free(v[i]);
        continue;
      }
      v[u++] = v[i];
    }
    k = u;
  }
  *names = v;
  *n = k;
  return 0;
}

static int hf_weights(const char *dir, char **names, size_t n,
                      ckpt_step_t *st) {
  static const char *const index[] = {"model.safetensors.index.json",
                                      "pytorch_model.bin.index.json",
                                      "adapter_model.safetensors.index.json"};
  static const char *const single[] = {"model.safetensors",
                                       "adapter_model.safetensors",
                                       "pytorch_model.bin",
                                       "adapter_model.bin"};
  int found = 0;
  for (size_t i = 0; i < LU_ARRAY_SIZE(index); i++) {
    char *data, **shards, why[200];
    size_t len, ns;
    int rc;
    if (!has_name(names, n, index[i]))
      continue;
    found = 1;
    if ((rc = read_small(dir, index[i], CK_META_MAX, &data, &len)) != 0) {
      bad(st, state_of(rc), "%s: %s", index[i], rdzv_strerror(rc));
      continue;
    }
    st->files++;
    st->bytes += len;
    rc = ck_hf_index(data, len, &shards, &ns, why, sizeof(why));
    free(data);
    if (rc == RDZV_ENOMEM)
      return rc;
    if (rc != 0) {
      bad(st, CKPT_STEP_CORRUPT, "%s: %s", index[i], why);
      continue;
    }
    for (size_t k = 0; k < ns; k++) {
      size_t l = strlen(shards[k]);
      if (l > 12 && strcmp(shards[k] + l - 12, ".safetensors") == 0)
        check_safetensors(dir, shards[k], st);
      else
        check_torch(dir, shards[k], shards[k], st, NULL, NULL);
    }
    ck_free_names(shards, ns);
  }
  for (size_t i = 0; i < LU_ARRAY_SIZE(single) && !found; i++) {
    if (!has_name(names, n, single[i]))
      continue;
    found = 1;
    if (strstr(single[i], ".safetensors"))
      check_safetensors(dir, single[i], st);
    else
      check_torch(dir, single[i], single[i], st, NULL, NULL);
  }
  /* FSDP: pytorch_model_fsdp_0/ (a DCP directory) or .bin files. */
  for (size_t i = 0; i < n; i++) {
    char p[4096];
    if (strncmp(names[i], "pytorch_model_fsdp", 18) != 0)
      continue;
    found = 1;
    if (is_dir(dir, names[i])) {
      ckpt_step_t sub;
      memset(&sub, 0, sizeof(sub));
      if (ck_join(p, sizeof(p), dir, names[i]) == 0 &&
          dcp_step(p, &sub) == 0 && sub.state != CKPT_STEP_COMPLETE)
        bad(st, sub.state, "%s/%s", names[i], sub.problem);
      st->files += sub.files;
      st->bytes += sub.bytes;
    } else {
      check_torch(dir, names[i], names[i], st, NULL, NULL);
    }
  }
  return found;
}

static int hf_step(const char *dir, ckpt_step_t *st) {
  char **names, *data, why[200];
  size_t n, len;
  int64_t gs, maxr = -1, step = st->step;
  int rc, ds = 0;
  char sp[4096];
  ck_ftimes_t stt;
  if ((rc = list_dir(dir, &names, &n)) != 0)
    return rc;
  /* trainer_state.json: written after the rest of the checkpoint (by
   * process 0, after its own files), its global_step must be this
   * directory's. A step saved again in place (resumed from an earlier one,
   * or rolled back) rewrites its files and trainer_state.json last: cut
   * short, the older save's trainer_state.json vouches for a mix. torch.save
   * and open("w") rewrite a file in place; safetensors writes a new one,
   * which passes for a copy's, but the Trainer rewrites config.json
   * before it and training_args.bin right after it. */
  if (ck_join(sp, sizeof(sp), dir, HF_STATE) == 0 && file_times(sp, &stt) == 0)
    for (size_t i = 0; i < n; i++)
      if (strcmp(names[i], HF_STATE) != 0 && !is_dir(dir, names[i]))
        rewritten_after(dir, names[i], HF_STATE, &stt, st);
  rc = read_small(dir, HF_STATE, CK_META_MAX, &data, &len);
  if (rc != 0) {
    bad(st, state_of(rc), "%s: %s", HF_STATE,
        rc == -ENOENT ? "missing" : rdzv_strerror(rc));
  } else {
    st->files++;
    st->bytes += len;
    rc = ck_hf_trainer_state(data, len, &gs, why, sizeof(why));
    free(data);
    if (rc == RDZV_ENOMEM)
      goto out;
    if (rc != 0)
      bad(st, CKPT_STEP_CORRUPT, "%s: %s", HF_STATE, why);
    else if (step >= 0 && gs != step)
      bad(st, CKPT_STEP_CORRUPT, "%s says global_step %lld", HF_STATE,
          (long long)gs);
  }
  rc = 0;
  /* DeepSpeed under the Trainer: its own layout in a subdirectory. */
  for (size_t i = 0; i < n; i++) {
    int64_t k;
    char p[4096];
    if (strncmp(names[i], "global_step", 11) == 0 &&
        ck_all_digits(names[i] + 11, &k) && is_dir(dir, names[i]) &&
        ck_join(p, sizeof(p), dir, names[i]) == 0) {
      ckpt_step_t sub;
      memset(&sub, 0, sizeof(sub));
      ds = 1;
      if ((rc = deepspeed_step(p, &sub)) != 0)
        goto out;
      if (sub.state != CKPT_STEP_COMPLETE)
        bad(st, sub.state, "%s/%s", names[i], sub.problem);
      st->files += sub.files;
      st->bytes += sub.bytes;
    }
  }
  if ((rc = hf_weights(dir, names, n, st)) < 0)
    goto out;
  if (rc == 0 && !ds)
    bad(st, CKPT_STEP_INCOMPLETE, "no model weights (model.safetensors, "
        "pytorch_model.bin, a sharded *.index.json, or a DeepSpeed or FSDP "
        "subdirectory)");
  rc = 0;
  /* Optimizer and scheduler go together (both absent: a model-only save). */
  if (!ds) {
    int opt = has_name(names, n, "optimizer.pt") ||
              has_name(names, n, "optimizer_0") ||
              has_name(names, n, "optimizer.bin");
    int sched = has_name(names, n, "scheduler.pt");
    if (opt && !sched)
      bad(st, CKPT_STEP_INCOMPLETE, "scheduler.pt: missing (optimizer state "
          "is there)");
    if (sched && !opt)
      bad(st, CKPT_STEP_INCOMPLETE, "optimizer.pt: missing (scheduler.pt is "
          "there)");
    if (has_name(names, n, "optimizer.pt"))
      check_torch(dir, "optimizer.pt", "optimizer.pt", st, NULL, NULL);
    if (sched)
      check_torch(dir, "scheduler.pt", "scheduler.pt", st, NULL, NULL);
    if (has_name(names, n, "optimizer_0") && is_dir(dir, "optimizer_0")) {
      char p[4096];
      ckpt_step_t sub;
      memset(&sub, 0, sizeof(sub));
      if (ck_join(p, sizeof(p), dir, "optimizer_0") == 0 &&
          dcp_step(p, &sub) == 0 && sub.state != CKPT_STEP_COMPLETE)
        bad(st, sub.state, "optimizer_0/%s", sub.problem);
    }
  }
  if (has_name(names, n, "scaler.pt"))
    check_torch(dir, "scaler.pt", "scaler.pt", st, NULL, NULL);
  /* RNG states: rng_state.pth (one process) or rng_state_K.pth for every
   * process K; the count is not written anywhere, so 0..max must all be
   * there, and rng_state_0.pth alone says at least 2 processes (the
   * Trainer writes rng_state_K.pth only when there are several). */
  for (size_t i = 0; i < n; i++) {
    int64_t k;
    size_t l = strlen(names[i]);
    char num[32];
    if (strncmp(names[i], "rng_state_", 10) != 0 || l < 15 ||
        strcmp(names[i] + l - 4, ".pth") != 0 || l - 14 >= sizeof(num))
      continue;
    memcpy(num, names[i] + 10, l - 14);
    num[l - 14] = '\0';
    if (ck_all_digits(num, &k) && k > maxr && k < CK_MAX_WORLD)
      maxr = k;
  }
  for (int64_t k = 0; k <= (maxr == 0 ? 1 : maxr); k++) {
    char f[64];
    snprintf(f, sizeof(f), "rng_state_%lld.pth", (long long)k);
    if (!has_name(names, n, f) && maxr == 0)
      bad(st, CKPT_STEP_INCOMPLETE, "%s: missing (rng_state_0.pth is "
          "there: the Trainer writes it only with 2 or more processes)", f);
    else if (!has_name(names, n, f))
      bad(st, CKPT_STEP_INCOMPLETE, "%s: missing (rng states of processes up "
          "to %lld are there)", f, (long long)maxr);
    else
      check_torch(dir, f, f, st, NULL, NULL);
  }
  if (maxr >= 0)
    st->world_size = maxr == 0 ? 2 : (int)maxr + 1;
  else if (has_name(names, n, "rng_state.pth"))
    check_torch(dir, "rng_state.pth", "rng_state.pth", st, NULL, NULL);
out:
  ck_free_names(names, n);
  return rc;
}

static int scan_hf(const char *dir, const ckpt_scan_options_t *o,
                   ckpt_scan_t *s, char *err, size_t errlen) {
  int rc;
  (void)o;
  if ((rc = scan_steps(dir, s, "checkpoint-", 0, NULL, hf_step, err,
                       errlen)) != 0 ||
      (rc = fewer_than_before(dir, s, 0)) != 0)
    return rc;
  /* The Trainer has no pointer: resume_from_checkpoint=True takes the
   * highest checkpoint-N. That is what "latest" means here. */
  if (s->nsteps > 0) {
    size_t best = 0;
    for (size_t i = 1; i < s->nsteps; i++)
      if (s->steps[i].step > s->steps[best].step)
        best = i;
    s->steps[best].is_latest = 1;
    lu_strlcpy(s->latest_name, s->steps[best].name, sizeof(s->latest_name));
  }
  return 0;
}

/* ---- the rows of the layout table (scan.c) ------------------------------------ */

static ck_seen_t megatron_detect(const ck_entry_t *e) {
  if (e->is_dir) /* a torch_dist iter_N holds DCP's files too: ours alone */
    return ck_digits_after(e->name, "iter_") || strcmp(e->name, "release") == 0
               ? CK_SEEN_OWN
               : CK_SEEN_NO;
  return strcmp(e->name, MEG_TRACKER) == 0 ? CK_SEEN_YES : CK_SEEN_NO;
}

static ck_seen_t deepspeed_detect(const ck_entry_t *e) {
  char *data, tag[CKPT_NAME_MAX];
  size_t len;
  int64_t step;
  ck_seen_t seen = CK_SEEN_NO;
  if (e->is_dir)
    return ck_digits_after(e->name, "global_step") ? CK_SEEN_OWN : CK_SEEN_NO;
  if (strcmp(e->name, DS_LATEST) != 0 ||
      lu_read_file(e->path, 4096, &data, &len) != 0)
    return CK_SEEN_NO;
  /* DeepSpeed's names its tag directory (launch's says "step-N");
   * anything else in a file called latest is nobody's pointer. */
  if (ck_latest_decode(data, len, &step) != 0 &&
      ck_deepspeed_latest(data, len, tag, sizeof(tag)) == 0 &&
      is_dir(e->dir, tag))
    seen = CK_SEEN_YES;
  free(data);
  return seen;
}

static ck_seen_t hf_detect(const ck_entry_t *e) {
  /* By content, not by name: DCP steps are often called checkpoint-N too. */
  return e->is_dir && ck_digits_after(e->name, "checkpoint-") &&
                 !ck_dir_any(e->path, ck_dcp_name)
             ? CK_SEEN_YES
             : CK_SEEN_NO;
}

static ck_seen_t dcp_detect(const ck_entry_t *e) {
  if (!e->is_dir)
    return ck_dcp_name(e->name) ? CK_SEEN_YES : CK_SEEN_NO;
  /* abandoned-step-N-T: what launch before issue #22 set aside. */
  return e->name[0] != '.' && strncmp(e->name, "abandoned-", 10) != 0 &&
                 ck_dir_any(e->path, ck_dcp_name)
             ? CK_SEEN_YES
             : CK_SEEN_NO;
}

const ck_layout_t ck_layout_megatron = {CKPT_LAYOUT_MEGATRON, "megatron",
                                        MEG_TRACKER, megatron_detect,
                                        scan_megatron};
const ck_layout_t ck_layout_deepspeed = {CKPT_LAYOUT_DEEPSPEED, "deepspeed",
                                         DS_LATEST, deepspeed_detect,
                                         scan_deepspeed};
const ck_layout_t ck_layout_hf = {
    CKPT_LAYOUT_HF, "hf",
    "the highest checkpoint-N (what resume_from_checkpoint=True takes)",
    hf_detect, scan_hf};
const ck_layout_t ck_layout_dcp = {CKPT_LAYOUT_DCP, "dcp", NULL, dcp_detect,
                                   scan_dcp};
