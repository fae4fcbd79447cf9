/* layout_launch.c - launch's own layout (docs/checkpoints.md):
 *
 *   DIR/latest                 "step-N\n", replaced atomically
 *   DIR/step-N/rank-R.bin      one shard per rank
 *   DIR/step-N/rank-R.done     completion file (trainers that link nothing)
 *   DIR/step-N/manifest.json   written once every rank committed
 *
 * A step is final when its manifest exists; the manifest is written only
 * after every shard it lists is durable, `latest` only after the
 * manifest, and pruning removes only steps older than the one just
 * finalised. So after a crash at any point, `latest` names a step whose
 * manifest and shards are all there. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck_int.h"

#define CK_TMP_AGE_S 600 /* a temp file this old belongs to a dead writer */

void ck_log(const ck_log_t *l, int level, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (l && l->cb) {
    l->cb(l->data, level, msg);
    return;
  }
  fprintf(stderr, "launch ckpt: %s%s\n",
          level == 0 ? "error: " : level == 1 ? "warning: " : "", msg);
}

static int ck_cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The step numbers of dir's step-N directories, newest first. */
static int ck_list_steps(const char *dir, int64_t **out, size_t *n) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int64_t *v = NULL;
  size_t cap = 0;
  *n = 0;
  if (d == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL) {
    int64_t step;
    if (ck_parse_step_name(e->d_name, &step) != 0)
      continue;
    if (*n == cap) {
      int64_t *nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
      if (nv == NULL) {
        free(v);
        closedir(d);
        return RDZV_ENOMEM;
      }
      v = nv;
    }
    v[(*n)++] = step;
  }
  closedir(d);
  if (*n > 1)
    qsort(v, *n, sizeof(*v), ck_cmp_desc);
  *out = v;
  return 0;
}

static int ck_step_path(char *buf, size_t n, const char *dir, int64_t step,
                        const char *leaf) {
  int k = leaf ? snprintf(buf, n, "%s/step-%lld/%s", dir, (long long)step,
                          leaf)
               : snprintf(buf, n, "%s/step-%lld", dir, (long long)step);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

static int ck_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int ck_finalised(const char *dir, int64_t step) {
  char p[4096];
  return ck_step_path(p, sizeof(p), dir, step, CK_MANIFEST) == 0 &&
         ck_exists(p);
}

/* ---- what is launch's own ------------------------------------------------------ */

/* launch writes, renames and deletes only what it wrote itself: a
 * directory may hold another trainer's checkpoints (DeepSpeed's `latest`,
 * a user's `latest -> step-40` symlink, DCP's step-N/), which are
 * read-only to us whatever the layout detection said (issue #22). */

/* "rank-R.bin" or "rank-R.done". */
static int ck_launch_name(const char *name, int *done) {
  const char *p = name + 5, *q;
  if (strncmp(name, "rank-", 5) != 0 || *p < '0' || *p > '9')
    return 0;
  for (q = p; *q >= '0' && *q <= '9'; q++)
    ;
  *done = strcmp(q, ".done") == 0;
  return *done || strcmp(q, ".bin") == 0;
}

/* Is the directory at path (a step-N, or what a rollback renamed one to)
 * launch's? */
static int ck_dir_is_ours(const char *path) {
  char p[4096], *data = NULL;
  size_t len;
  struct stat st;
  DIR *d;
  struct dirent *e;
  int launch = 0, done = 0, other = 0, foreign = 0, is_done, rc;
  if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return 0; /* a symlink or a file is nobody's step of ours */
  if (ck_join(p, sizeof(p), path, CK_MANIFEST) == 0 &&
      (rc = lu_read_file(p, CK_META_MAX, &data, &len)) != -ENOENT) {
    /* A manifest decides: launch's format, or someone else's file. */
    ck_manifest_t m;
    char why[128];
    int ours = rc == 0 && ck_manifest_decode(data, len, &m, why,
                                             sizeof(why)) == 0;
    if (ours)
      ck_manifest_free(&m);
    free(data);
    return ours;
  }
  if ((d = opendir(path)) == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    const char *nm = e->d_name;
    if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 ||
        (nm[0] == '.' && strstr(nm, ".tmp") != NULL && !ck_dcp_name(nm) &&
         strncmp(nm, ".rank-", 6) != 0))
      continue; /* our temp names: .NAME.tmp-PID-RANDOM */
    if (strncmp(nm, ".rank-", 6) == 0) {
      launch++; /* a shard being written (.rank-R.tmp, .rank-R.bin.tmp-*) */
    } else if (ck_launch_name(nm, &is_done)) {
      launch++;
      done += is_done;
    } else if (ck_dcp_name(nm)) {
      foreign++;
    } else {
      other++;
    }
  }
  closedir(d);
  /* A partial step of ours holds shards and completion files only, or a
   * shard named by a completion file ("file"); an empty one is left alone
   * (nothing to lose, and nothing says whose it is). */
  return launch > 0 && foreign == 0 && (other == 0 || done > 0);
}

int ck_step_is_ours(const char *dir, int64_t step) {
  char p[4096];
  return ck_step_path(p, sizeof(p), dir, step, NULL) == 0 &&
         ck_dir_is_ours(p);
}

int ck_latest_owner(const char *dir) {
  char p[4096], *data;
  size_t len;
  struct stat st;
  int64_t step;
  int rc;
  if (ck_join(p, sizeof(p), dir, CK_LATEST) != 0)
    return -1;
  if (lstat(p, &st) != 0)
    return errno == ENOENT ? 0 : -1;
  if (!S_ISREG(st.st_mode) || st.st_size > 64)
    return -1; /* a symlink (a user's latest -> step-40), a directory */
  if (lu_read_file(p, 4096, &data, &len) != 0)
    return -1;
  rc = ck_latest_decode(data, len, &step);
  free(data);
  if (rc != 0)
    return -1;
  /* "step-N" is what launch writes, and what DeepSpeed writes for a tag of
   * that name, or any trainer that names its steps so: launch's only when
   * the step it names is gone or launch's own. */
  if (ck_step_path(p, sizeof(p), dir, step, NULL) == 0 && lstat(p, &st) == 0 &&
      !ck_step_is_ours(dir, step))
    return -1;
  return 1;
}

int ck_read_manifest(const char *dir, int64_t step, ck_manifest_t *m,
                     char *why, size_t whylen) {
  char p[4096], *data;
  size_t len;
  int rc;
  memset(m, 0, sizeof(*m));
  if ((rc = ck_step_path(p, sizeof(p), dir, step, CK_MANIFEST)) != 0)
    return rc;
  rc = lu_read_file_safe(p, CK_META_MAX, &data, &len, why, whylen);
  if (rc == -ENOENT) {
    lu_errf(why, whylen, "no %s: the step was never finalised", CK_MANIFEST);
    return CKPT_EINCOMPLETE;
  }
  if (rc != 0) {
    return rc == RDZV_ETOOBIG || rc == RDZV_ENOTREG ? CKPT_EFORMAT : rc;
  }
  {
    char jwhy[256];
    rc = ck_manifest_decode(data, len, m, jwhy, sizeof(jwhy));
    free(data);
    if (rc != 0) {
      lu_errf(why, whylen, "%s does not parse: %s", CK_MANIFEST, jwhy);
      return rc == RDZV_ENOMEM ? rc : CKPT_EFORMAT;
    }
  }
  if (m->step != step) {
    lu_errf(why, whylen, "%s says step %lld", CK_MANIFEST,
            (long long)m->step);
    ck_manifest_free(m);
    return CKPT_EFORMAT;
  }
  return 0;
}

/* ---- checking a step ------------------------------------------------------------ */

/* One per shard of the manifest: small, so that memory follows the
 * manifest (600,000 shards once took 2.9 GB with a path and a problem
 * buffer in each); the path is built when the shard is checked, the
 * problem allocated only for a bad shard. */
typedef struct ck_job_s {
  const char *dir;     /* the checkpoint directory */
  int64_t step;
  const ck_record_t *rec;
  int want;     /* a rank this node must hold */
  int sha;      /* hash it */
  int present;
  int ok;
  int hashed, trusted; /* how a good shard's SHA-256 was checked */
  int ioerr;    /* it could not be read (EIO, EMFILE...): no verdict */
  uint64_t size;
  ckpt_trust_t *trust; /* NULL: no cache */
  char *problem;       /* NULL: none */
} ck_job_t;

static void job_problem(ck_job_t *j, const char *fmt, ...) LU_PRINTF(2, 3);
static void job_problem(ck_job_t *j, const char *fmt, ...) {
  va_list ap;
  free(j->problem);
  if ((j->problem = malloc(CKPT_PROBLEM_MAX)) == NULL)
    return;
  va_start(ap, fmt);
  vsnprintf(j->problem, CKPT_PROBLEM_MAX, fmt, ap);
  va_end(ap);
}

typedef struct ck_pool_s {
  ck_job_t *jobs;
  size_t n;
  size_t next;
  pthread_mutex_t mu;
} ck_pool_t;

static void ck_check_one(ck_job_t *j) {
  struct stat st;
  char sha[CK_SHA_HEX];
  uint64_t size;
  ck_fid_t id;
  int rc, stable = 0;
  char path[4096], leaf[CKPT_NAME_MAX];
  lu_strlcpy(leaf, j->rec->file, sizeof(leaf));
  if (ck_step_path(path, sizeof(path), j->dir, j->step, leaf) != 0)
    path[0] = '\0';
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) {
      job_problem(j, "%s: missing", j->rec->file);
    } else {
      j->ioerr = -errno;
      job_problem(j, "%s: %s", j->rec->file, strerror(errno));
    }
    return;
  }
  j->present = 1;
  j->size = (uint64_t)st.st_size;
  if ((uint64_t)st.st_size != j->rec->size) {
    job_problem(j, "%s: %llu bytes, the manifest says %llu", j->rec->file,
                (unsigned long long)st.st_size,
                (unsigned long long)j->rec->size);
    return;
  }
  if (j->sha && j->trust) {
    ck_fid_of(&st, &id);
    if (ck_trust_has(j->trust, path, &id, j->rec->sha)) {
      j->trusted = 1;
      j->ok = 1;
      return;
    }
  }
  if (j->sha) {
    if ((rc = ck_hash_file_id(path, &size, sha, &id, &stable)) != 0) {
      /* the system's errors say nothing of the step; ours describe the
       * file (not a regular one, over a limit): a verdict */
      j->ioerr = rc > -1000 || rc == RDZV_ENOMEM ? rc : 0;
      job_problem(j, "%s: %s", j->rec->file, rdzv_strerror(rc));
      return;
    }
    if (size != j->rec->size || strcmp(sha, j->rec->sha) != 0) {
      job_problem(j, "%s: SHA-256 %.12s... does not match the manifest's "
                  "%.12s...", j->rec->file, sha, j->rec->sha);
      return;
    }
    j->hashed = 1;
    if (stable)
      ck_trust_put(j->trust, path, &id, sha);
  }
  j->ok = 1;
}

static void *ck_pool_main(void *arg) {
  ck_pool_t *p = arg;
  for (;;) {
    size_t i;
    pthread_mutex_lock(&p->mu);
    i = p->next++;
    pthread_mutex_unlock(&p->mu);
    if (i >= p->n)
      return NULL;
    ck_check_one(&p->jobs[i]);
  }
}

/* Check the shards of a finalised step: the wanted ranks must be there
 * and match; the others count when present (shared storage). */
static int ck_check_step(const char *dir, const ck_manifest_t *m,
                         const ckpt_scan_options_t *o, ckpt_trust_t *trust,
                         ckpt_verify_stats_t *vs, ckpt_step_t *st) {
  ck_job_t *jobs;
  ck_pool_t pool;
  pthread_t th[8];
  int nth, started = 0, hashed = 0, missing_wanted = 0, good = 0;
  unsigned char *want;
  size_t W = (size_t)m->world_size;
  if ((jobs = calloc(W, sizeof(*jobs))) == NULL)
    return RDZV_ENOMEM;
  if ((want = calloc(W, 1)) == NULL) {
    free(jobs);
    return RDZV_ENOMEM;
  }
  if ((st->have = calloc((W + 7) / 8, 1)) == NULL) {
    free(jobs);
    free(want);
    return RDZV_ENOMEM;
  }
  if (o->ranks == NULL) {
    memset(want, 1, W);
  } else {
    for (size_t i = 0; i < o->nranks; i++)
      if (o->ranks[i] >= 0 && (size_t)o->ranks[i] < W)
        want[o->ranks[i]] = 1;
  }
  for (size_t r = 0; r < W; r++) {
    jobs[r].rec = &m->shards[r];
    jobs[r].want = want[r];
    jobs[r].trust = trust;
    jobs[r].sha = (o->flags & CKPT_SCAN_SHA) && want[r];
    hashed += jobs[r].sha;
    jobs[r].dir = dir;
    jobs[r].step = m->step;
  }
  memset(&pool, 0, sizeof(pool));
  pool.jobs = jobs;
  pool.n = W;
  pthread_mutex_init(&pool.mu, NULL);
  nth = hashed > 1 ? ck_threads(o->threads, 8) : 1;
  if (nth > hashed)
    nth = hashed > 0 ? hashed : 1;
  for (int i = 1; i < nth; i++)
    if (pthread_create(&th[started], NULL, ck_pool_main, &pool) == 0)
      started++;
  ck_pool_main(&pool);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&pool.mu);
  /* A shard this node must hold that could not be read says nothing about
   * the step: the scan fails (this attempt of the agreement) rather than
   * call the step incomplete or corrupt, which would roll it back and
   * prune it. */
  for (size_t r = 0; r < W; r++)
    if (jobs[r].want && jobs[r].ioerr) {
      int rc = jobs[r].ioerr;
      ck_problem(st->problem, sizeof(st->problem), "step-%lld/%s (a read "
                 "error, not a bad checkpoint: nothing was rolled back; check "
                 "the file system)", (long long)m->step,
                 jobs[r].problem ? jobs[r].problem : "?");
      for (size_t k = 0; k < W; k++)
        free(jobs[k].problem);
      free(jobs);
      free(want);
      return rc;
    }
  st->state = CKPT_STEP_COMPLETE;
  for (size_t r = 0; r < W; r++) {
    ck_job_t *j = &jobs[r];
    if (j->present) {
      st->files++;
      st->bytes += j->size;
    }
    if (vs && j->ok && j->hashed) {
      vs->hashed++;
      vs->hashed_bytes += j->size;
    } else if (vs && j->ok && j->trusted) {
      vs->trusted++;
      vs->trusted_bytes += j->size;
    }
    if (j->ok && (j->want || !(o->flags & CKPT_SCAN_SHA))) {
      st->have[r / 8] |= (unsigned char)(1u << (r % 8));
      good++;
    }
    if (!j->want || j->ok)
      continue;
    if (!j->present) {
      missing_wanted++;
      if (st->state == CKPT_STEP_COMPLETE)
        st->state = CKPT_STEP_INCOMPLETE;
    } else {
      st->state = CKPT_STEP_CORRUPT;
    }
  }
  /* Name the first bad file: a corrupt one before a missing one. */
  for (size_t r = 0; r < W && st->state == CKPT_STEP_CORRUPT; r++)
    if (jobs[r].want && jobs[r].present && !jobs[r].ok) {
      ck_problem(st->problem, sizeof(st->problem), "%s",
                 jobs[r].problem ? jobs[r].problem : "?");
      break;
    }
  for (size_t r = 0; r < W && st->state == CKPT_STEP_INCOMPLETE; r++)
    if (jobs[r].want && !jobs[r].present) {
      if (missing_wanted > 1)
        ck_problem(st->problem, sizeof(st->problem),
                   "%s (and %d more shards) missing", jobs[r].rec->file,
                   missing_wanted - 1);
      else
        ck_problem(st->problem, sizeof(st->problem), "%s",
                   jobs[r].problem ? jobs[r].problem : "?");
      break;
    }
  if (st->state == CKPT_STEP_COMPLETE && good == 0) {
    st->state = CKPT_STEP_INCOMPLETE;
    ck_problem(st->problem, sizeof(st->problem), "no shard of this step is "
               "here");
  }
  for (size_t r = 0; r < W; r++)
    free(jobs[r].problem);
  free(jobs);
  free(want);
  return 0;
}

/* Count the shards and completion files of a step that has no manifest:
 * the problem then says how far it got. */
static void ck_describe_partial(const char *dir, int64_t step,
                                ckpt_step_t *st, const char *why) {
  char p[4096];
  DIR *d;
  struct dirent *e;
  int shards = 0, done = 0;
  if (ck_step_path(p, sizeof(p), dir, step, NULL) == 0 &&
      (d = opendir(p)) != NULL) {
    while ((e = readdir(d)) != NULL) {
      size_t n = strlen(e->d_name);
      if (strncmp(e->d_name, "rank-", 5) != 0)
        continue;
      if (n > 4 && strcmp(e->d_name + n - 4, ".bin") == 0)
        shards++;
      else if (n > 5 && strcmp(e->d_name + n - 5, ".done") == 0)
        done++;
    }
    closedir(d);
  }
  st->files = (uint32_t)shards;
  ck_problem(st->problem, sizeof(st->problem),
             "%s (%d shards, %d completion files here)", why, shards, done);
}

static int ck_scan_launch(const char *dir, const ckpt_scan_options_t *o,
                          ckpt_scan_t *s, char *err, size_t errlen) {
  int64_t *steps = NULL, latest = -1;
  size_t n = 0;
  char p[4096], *data;
  size_t len;
  int rc, found = 0;
  if ((rc = ck_join(p, sizeof(p), dir, CK_LATEST)) != 0)
    return rc;
  rc = lu_read_file(p, 4096, &data, &len);
  if (rc == 0) {
    if (ck_latest_decode(data, len, &latest) == 0)
      snprintf(s->latest_name, sizeof(s->latest_name), "step-%lld",
               (long long)latest);
    else
      ck_problem(s->latest_problem, sizeof(s->latest_problem),
                 "%s does not name a step (it should hold \"step-N\"): "
                 "ignored", CK_LATEST);
    free(data);
  } else if (rc != -ENOENT) {
    ck_problem(s->latest_problem, sizeof(s->latest_problem), "%s: %s",
               CK_LATEST, rdzv_strerror(rc));
  }
  if ((rc = ck_list_steps(dir, &steps, &n)) != 0) {
    lu_errf(err, errlen, "%s: %s", dir, rdzv_strerror(rc));
    return rc;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    ckpt_step_t *st = ck_scan_add(s);
    ck_manifest_t m;
    char why[CKPT_PROBLEM_MAX];
    if (st == NULL) {
      rc = RDZV_ENOMEM;
      break;
    }
    st->step = steps[i];
    snprintf(st->name, sizeof(st->name), "step-%lld", (long long)steps[i]);
    st->is_latest = latest >= 0 && steps[i] == latest;
    if (found && (o->flags & CKPT_SCAN_NEWEST_COMPLETE)) {
      st->state = CKPT_STEP_UNCHECKED;
      continue;
    }
    rc = ck_read_manifest(dir, steps[i], &m, why, sizeof(why));
    if (rc == CKPT_EINCOMPLETE) {
      st->state = CKPT_STEP_INCOMPLETE;
      ck_describe_partial(dir, steps[i], st, why);
      rc = 0;
      continue;
    }
    if (rc == CKPT_EFORMAT) {
      st->state = CKPT_STEP_CORRUPT;
      ck_problem(st->problem, sizeof(st->problem), "%s", why);
      rc = 0;
      continue;
    }
    if (rc != 0)
      break;
    st->world_size = m.world_size;
    st->replicated = m.replicated;
    rc = ck_check_step(dir, &m, o, NULL, NULL, st);
    ck_manifest_free(&m);
    if (rc == 0 && st->state == CKPT_STEP_COMPLETE)
      found = 1;
  }
  free(steps);
  if (rc != 0 && s->nsteps > 0 && s->steps[s->nsteps - 1].problem[0])
    lu_errf(err, errlen, "%s: %s", dir, s->steps[s->nsteps - 1].problem);
  else if (rc != 0)
    lu_errf(err, errlen, "%s: %s", dir, rdzv_strerror(rc));
  return rc;
}

int ckpt_verify_step(const char *dir, int64_t step, const int *ranks,
                     size_t nranks, char *problem, size_t n) {
  return ckpt_verify_step_trusted(dir, step, ranks, nranks, NULL, NULL,
                                  problem, n);
}

int ckpt_verify_step_trusted(const char *dir, int64_t step, const int *ranks,
                             size_t nranks, ckpt_trust_t *trust,
                             ckpt_verify_stats_t *stats, char *problem,
                             size_t n) {
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  ckpt_step_t st;
  ck_manifest_t m;
  int rc;
  if (problem && n)
    problem[0] = '\0';
  memset(&st, 0, sizeof(st));
  o.flags = CKPT_SCAN_SHA;
  o.ranks = ranks;
  o.nranks = nranks;
  if ((rc = ck_read_manifest(dir, step, &m, problem, n)) != 0)
    return rc;
  if (stats)
    memset(stats, 0, sizeof(*stats));
  rc = ck_check_step(dir, &m, &o, trust, stats, &st);
  ck_manifest_free(&m);
  free(st.have);
  if (rc != 0) {
    lu_errf(problem, n, "%s", st.problem[0] ? st.problem : rdzv_strerror(rc));
    return rc;
  }
  lu_errf(problem, n, "%s", st.problem);
  return st.state == CKPT_STEP_COMPLETE     ? 0
         : st.state == CKPT_STEP_INCOMPLETE ? CKPT_EINCOMPLETE
                                            : CKPT_ECORRUPT;
}

/* ---- finalising: manifest, latest, pruning ----------------------------------- */

/* `latest` moves forward only: a finaliser that runs late never points it
 * back at an older step while the newer one it named is final. */
static int ck_latest_forward(const char *dir, int64_t step) {
  char p[4096], *data, line[64];
  size_t len;
  int64_t cur;
  int rc;
  if ((rc = ck_join(p, sizeof(p), dir, CK_LATEST)) != 0)
    return rc;
  if (ck_latest_owner(dir) < 0)
    return 0; /* another program's pointer: never replaced */
  if (lu_read_file(p, 4096, &data, &len) == 0) {
    rc = ck_latest_decode(data, len, &cur);
    free(data);
    if (rc == 0 && cur >= step && ck_finalised(dir, cur))
      return 0;
  }
  len = (size_t)snprintf(line, sizeof(line), "step-%lld\n", (long long)step);
  return ck_write_atomic(dir, CK_LATEST, line, len);
}

static int ck_old_tmp(int dfd, const char *name) {
  struct stat st;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode) && time(NULL) - st.st_mtime > CK_TMP_AGE_S;
}

/* Digits (at least one), then end or the character stop. RET what
 * follows them, NULL when the form is not met. */
static const char *ck_digits(const char *s, char stop) {
  const char *p = s;
  while (*p >= '0' && *p <= '9')
    p++;
  return p == s || *p != stop ? NULL : p;
}

/* s is exactly the 8 hex digits ck_rand_hex makes. */
static int ck_hex8(const char *s) {
  for (int i = 0; i < 8; i++)
    if (!isxdigit((unsigned char)s[i]))
      return 0;
  return s[8] == '\0';
}

/* One of launch's temp names, as ck_tmp_name makes them:
 * .NAME.tmp-PID-8HEX, NAME `latest`, `manifest.json` or rank-R.bin/.done.
 * Nothing else is swept: a user's ".data.tmp-2024" is theirs. */
static int ck_is_tmp(const char *name) {
  const char *t = strstr(name, ".tmp-"), *p;
  char base[CKPT_NAME_MAX];
  size_t n;
  int done;
  if (name[0] != '.' || t == NULL || (n = (size_t)(t - name - 1)) == 0 ||
      n >= sizeof(base))
    return 0;
  memcpy(base, name + 1, n);
  base[n] = '\0';
  if (strcmp(base, CK_LATEST) != 0 && strcmp(base, CK_MANIFEST) != 0 &&
      !ck_launch_name(base, &done))
    return 0;
  if ((p = ck_digits(t + 5, '-')) == NULL)
    return 0;
  return ck_hex8(p + 1);
}

/* Leftover temp files of dead writers in dir (old ones only: a temp file
 * of a finaliser running right now on another node must stay). */
static void ck_sweep_tmp(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (d == NULL)
    return;
  while ((e = readdir(d)) != NULL)
    if (ck_is_tmp(e->d_name) && ck_old_tmp(dirfd(d), e->d_name))
      (void)unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
}

/* Remove a directory of ours: renamed first (atomic, one remover wins
 * when several nodes prune the same shared directory), then deleted. */
static void ck_remove(const char *dir, const char *name, const ck_log_t *log) {
  char from[4096], to[4096], hex[9];
  int rc;
  ck_rand_hex(hex);
  if (ck_join(from, sizeof(from), dir, name) != 0 ||
      snprintf(to, sizeof(to), "%s/.deleting-%s-%d-%s", dir, name,
               (int)getpid(), hex) >= (int)sizeof(to))
    return;
  if (rename(from, to) != 0)
    return; /* gone already: another node pruned it */
  if ((rc = ck_rm_tree(to)) != 0)
    ck_log(log, 1, "removing %s: %s (left as %s)", from, rdzv_strerror(rc),
           to);
}

/* Parse "abandoned-step-N-T" (T: the rollback's time in ms) into N. */
static int ck_parse_abandoned(const char *name, int64_t *step) {
  char buf[CKPT_NAME_MAX];
  char *dash;
  if (strncmp(name, "abandoned-", 10) != 0 ||
      lu_strlcpy(buf, name + 10, sizeof(buf)) >= sizeof(buf))
    return -1;
  if ((dash = strrchr(buf, '-')) == NULL || dash == buf ||
      ck_digits(dash + 1, '\0') == NULL)
    return -1;
  *dash = '\0';
  return ck_parse_step_name(buf, step);
}

/* ".deleting-NAME-PID-8HEX" as ck_remove renames a directory of ours
 * (NAME a step-N or an abandoned-step-N-T), and a directory. */
static int ck_deleting_ours(int dfd, const char *name) {
  char buf[CKPT_NAME_MAX];
  char *dash;
  int64_t step;
  struct stat st;
  if (strncmp(name, ".deleting-", 10) != 0 ||
      lu_strlcpy(buf, name + 10, sizeof(buf)) >= sizeof(buf) ||
      (dash = strrchr(buf, '-')) == NULL || !ck_hex8(dash + 1))
    return 0;
  *dash = '\0';
  if ((dash = strrchr(buf, '-')) == NULL || ck_digits(dash + 1, '\0') == NULL)
    return 0;
  *dash = '\0';
  if (ck_parse_step_name(buf, &step) != 0 &&
      ck_parse_abandoned(buf, &step) != 0)
    return 0;
  return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(st.st_mode);
}

static int ck_prune(const char *dir, int64_t upto, int keep,
                    const ck_log_t *log) {
  int64_t *steps = NULL;
  size_t n = 0;
  int kept = 0, rc;
  DIR *d;
  struct dirent *e;
  char p[4096];
  if (keep < 0)
    return 0;
  if ((rc = ck_list_steps(dir, &steps, &n)) != 0)
    return rc;
  for (size_t i = 0; i < n; i++) {
    char name[64];
    if (steps[i] > upto)
      continue; /* newer: being written now */
    if (!ck_step_is_ours(dir, steps[i]))
      continue; /* another program's, or a symlink: neither kept nor counted */
    if (kept < keep && ck_finalised(dir, steps[i])) {
      kept++;
      continue;
    }
    if (steps[i] == upto)
      continue;
    snprintf(name, sizeof(name), "step-%lld", (long long)steps[i]);
    ck_remove(dir, name, log);
  }
  free(steps);
  if ((d = opendir(dir)) == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL) {
    int64_t step;
    /* Only what launch's rollback and pruning made of its own steps: a
     * user's "abandoned-step-1-notes.txt", or a directory of another
     * trainer's files under such a name, stays. */
    if (ck_parse_abandoned(e->d_name, &step) == 0 && step <= upto) {
      if (ck_join(p, sizeof(p), dir, e->d_name) == 0 && ck_dir_is_ours(p))
        ck_remove(dir, e->d_name, log);
    } else if (ck_deleting_ours(dirfd(d), e->d_name)) {
      /* A prune that died midway (or one running now elsewhere: then both
       * remove what they find, and ENOENT is no error). */
      if (ck_join(p, sizeof(p), dir, e->d_name) == 0)
        (void)ck_rm_tree(p);
    }
  }
  closedir(d);
  ck_sweep_tmp(dir);
  return ck_fsync_dir(dir);
}

int ck_finalise(const ck_final_t *f, const ck_log_t *log, char *err,
                size_t errlen) {
  ck_manifest_t m;
  char sdir[4096], mpath[4096], *text = NULL, *old = NULL;
  size_t len, oldlen;
  double tmax = 0;
  int64_t newest_ctime = -1;
  int rc;
  if ((rc = ck_step_path(sdir, sizeof(sdir), f->dir, f->step, NULL)) != 0)
    return rc;
  /* The shards that are here must be the ones the records describe: a
   * stale record (an earlier attempt's) must not become a manifest. */
  for (int r = 0; r < f->world_size; r++) {
    struct stat st;
    char path[4096];
    const ck_record_t *rec = &f->recs[r];
    if (rec->rank != r || !ck_name_ok(rec->file) || rec->sha[0] == '\0') {
      lu_errf(err, errlen, "step %lld: rank %d's record is invalid",
              (long long)f->step, r);
      return CKPT_EFORMAT;
    }
    if (rec->time > tmax)
      tmax = rec->time;
    if (ck_join(path, sizeof(path), sdir, rec->file) != 0 ||
        stat(path, &st) != 0)
      continue; /* another node's (node-local storage) */
    {
      ck_fid_t id;
      ck_fid_of(&st, &id);
      if (id.ctime_ns > newest_ctime)
        newest_ctime = id.ctime_ns;
    }
    if ((uint64_t)st.st_size != rec->size) {
      lu_errf(err, errlen, "step-%lld/%s: %llu bytes, rank %d committed "
              "%llu: not finalised", (long long)f->step, rec->file,
              (unsigned long long)st.st_size, r,
              (unsigned long long)rec->size);
      return CKPT_ECORRUPT;
    }
  }
  memset(&m, 0, sizeof(m));
  lu_strlcpy(m.job, f->job ? f->job : "", sizeof(m.job));
  m.step = f->step;
  m.round = f->round;
  m.world_size = f->world_size;
  /* Replicated only when every rank says so. */
  m.replicated = 1;
  for (int r = 0; r < f->world_size; r++)
    m.replicated &= f->recs[r].replicated != 0;
  /* The newest commit time, not the clock: every node that finalises the
   * same step writes the same bytes. */
  m.time = tmax > 0 ? tmax : lu_wall_s();
  m.shards = (ck_record_t *)f->recs;
  if ((rc = ck_manifest_encode(&m, &text, &len)) != 0)
    return rc;
  if ((rc = ck_join(mpath, sizeof(mpath), sdir, CK_MANIFEST)) == 0) {
    if (lu_read_file(mpath, CK_META_MAX, &old, &oldlen) == 0 &&
        oldlen == len && memcmp(old, text, len) == 0)
      rc = 0; /* another node finalised it already (shared storage) */
    else
      rc = ck_write_atomic_after(sdir, CK_MANIFEST, text, len,
                                 newest_ctime);
  }
  free(old);
  free(text);
  if (rc != 0) {
    lu_errf(err, errlen, "step-%lld/%s: %s", (long long)f->step, CK_MANIFEST,
            rdzv_strerror(rc));
    return rc;
  }
  if ((rc = ck_latest_forward(f->dir, f->step)) != 0) {
    lu_errf(err, errlen, "%s/%s: %s", f->dir, CK_LATEST, rdzv_strerror(rc));
    return rc;
  }
  ck_sweep_tmp(sdir);
  if ((rc = ck_prune(f->dir, f->step, f->keep, log)) != 0)
    ck_log(log, 1, "pruning %s: %s", f->dir, rdzv_strerror(rc));
  return 0;
}

/* ---- rollback ---------------------------------------------------------------------- */

/* A write the directory refuses as a whole (a read-only mount, another
 * user's directory): no worker can write there either, so nothing can mix
 * with what a rollback would have moved aside. */
static int ck_unwritable(int rc) {
  return rc == -EROFS || rc == -EACCES || rc == -EPERM;
}

int ckpt_rollback(const char *dir, int64_t resume_step, char *err,
                  size_t errlen) {
  int64_t *steps = NULL;
  size_t n = 0;
  char p[4096];
  int rc, owner, skipped = 0;
  if (err && errlen)
    err[0] = '\0';
  if ((rc = ck_list_steps(dir, &steps, &n)) != 0) {
    if (rc == -ENOENT)
      return 0; /* no directory yet: nothing to roll back, nothing to say */
    lu_errf(err, errlen, "%s: %s", dir, rdzv_strerror(rc));
    return rc;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    char from[4096], to[4096];
    if (steps[i] <= resume_step)
      break;
    if (!ck_step_is_ours(dir, steps[i]))
      continue; /* another trainer's step-N: read-only */
    if (ck_step_path(from, sizeof(from), dir, steps[i], NULL) != 0 ||
        snprintf(to, sizeof(to), "%s/abandoned-step-%lld-%llu", dir,
                 (long long)steps[i],
                 (unsigned long long)(lu_wall_s() * 1000)) >= (int)sizeof(to))
      continue;
    if (rename(from, to) != 0 && errno != ENOENT) {
      if (ck_unwritable(-errno)) {
        if (!skipped++)
          lu_errf(err, errlen, "%s is not writable (%s): step-%lld and newer "
                  "steps were left as they are", dir, strerror(errno),
                  (long long)steps[i]);
        continue;
      }
      rc = -errno;
      lu_errf(err, errlen, "rename %s: %s", from, strerror(errno));
    }
  }
  free(steps);
  if (rc != 0)
    return rc;
  if ((rc = ck_join(p, sizeof(p), dir, CK_LATEST)) != 0)
    return rc;
  if ((owner = ck_latest_owner(dir)) < 0) {
    /* Someone else's `latest`: left as it is. */
  } else if (resume_step >= 0 && ck_finalised(dir, resume_step) &&
             ck_step_is_ours(dir, resume_step)) {
    char line[64], *data = NULL;
    size_t len, oldlen;
    len = (size_t)snprintf(line, sizeof(line), "step-%lld\n",
                           (long long)resume_step);
    if (lu_read_file(p, 4096, &data, &oldlen) != 0 || oldlen != len ||
        memcmp(data, line, len) != 0)
      rc = ck_write_atomic(dir, CK_LATEST, line, len);
    free(data);
  } else if (owner > 0 && unlink(p) != 0 && errno != ENOENT) {
    rc = -errno;
  }
  if (rc == 0)
    rc = ck_fsync_dir(dir);
  if (ck_unwritable(rc)) {
    /* a stale `latest` costs nothing: the agreement scans the steps */
    if (!skipped)
      lu_errf(err, errlen, "%s/%s cannot be updated (%s): left as it is",
              dir, CK_LATEST, rdzv_strerror(rc));
    return 0;
  }
  if (rc != 0)
    lu_errf(err, errlen, "%s/%s: %s", dir, CK_LATEST, rdzv_strerror(rc));
  return rc;
}

/* ---- the store ------------------------------------------------------------------------ */

int ck_store_commit(rdzv_client_t *c, int64_t round, int64_t step,
                    const ck_record_t *r, int64_t *count, int timeout_ms) {
  char key[CK_KEY_MAX], leaf[32], *val;
  size_t len;
  int swapped = 0, rc;
  if ((rc = ck_record_encode(r, &val, &len)) != 0)
    return rc;
  snprintf(leaf, sizeof(leaf), "r%d", r->rank);
  ck_store_key(key, sizeof(key), round, step, leaf);
  /* Set once: a rank committed twice (its agent and itself, or a retry)
   * counts once. */
  rc = rdzv_compare_set(c, key, NULL, 0, val, len, NULL, NULL, &swapped,
                        timeout_ms);
  free(val);
  if (rc != 0)
    return rc;
  ck_store_key(key, sizeof(key), round, step, "n");
  return rdzv_add(c, key, swapped ? 1 : 0, count, timeout_ms);
}

int ck_store_records(rdzv_client_t *c, int64_t round, int64_t step,
                     int world_size, ck_record_t *recs, int timeout_ms,
                     char *err, size_t errlen) {
  char **keys = calloc((size_t)world_size, sizeof(char *));
  rdzv_value_t *vals = calloc((size_t)world_size, sizeof(*vals));
  int rc = 0;
  if (keys == NULL || vals == NULL) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  for (int r = 0; r < world_size; r++) {
    char leaf[32];
    if ((keys[r] = malloc(CK_KEY_MAX)) == NULL) {
      rc = RDZV_ENOMEM;
      goto out;
    }
    snprintf(leaf, sizeof(leaf), "r%d", r);
    ck_store_key(keys[r], CK_KEY_MAX, round, step, leaf);
  }
  rc = rdzv_multi_get(c, (const char *const *)keys, (size_t)world_size, vals,
                      timeout_ms);
  if (rc != 0) {
    lu_errf(err, errlen, "reading step %lld's commit records: %s",
            (long long)step, rdzv_strerror(rc));
    goto out;
  }
  for (int r = 0; r < world_size && rc == 0; r++) {
    char why[256];
    rc = ck_record_decode(vals[r].data, vals[r].len, r, &recs[r], why,
                          sizeof(why));
    if (rc != 0)
      lu_errf(err, errlen, "step %lld: rank %d's commit record: %s",
              (long long)step, r, why);
  }
out:
  for (int r = 0; vals && r < world_size; r++)
    rdzv_free(vals[r].data);
  for (int r = 0; keys && r < world_size; r++)
    free(keys[r]);
  free(keys);
  free(vals);
  return rc;
}

/* ---- the agent's commit ------------------------------------------------------------ */

/* Read rank's completion file of step and check it against its shard.
 * RET 1 ready (rec filled), 0 not there yet, <0 bad (why). */
static int ck_read_done(const ckpt_commit_options_t *o, int64_t step,
                        int rank, ck_record_t *rec, char *why, size_t n) {
  char p[4096], leaf[64], *data;
  size_t len;
  struct stat st;
  int rc;
  snprintf(leaf, sizeof(leaf), "rank-%d.done", rank);
  if ((rc = ck_step_path(p, sizeof(p), o->dir, step, leaf)) != 0)
    return rc;
  rc = lu_read_file_safe(p, CK_SMALL_MAX, &data, &len, why, n);
  if (rc == -ENOENT)
    return 0;
  if (rc != 0) {
    return rc == RDZV_ETOOBIG || rc == RDZV_ENOTREG ? CKPT_EFORMAT : rc;
  }
  {
    char jwhy[256];
    rc = ck_record_decode(data, len, rank, rec, jwhy, sizeof(jwhy));
    free(data);
    if (rc != 0) {
      lu_errf(why, n, "step-%lld/%s does not parse: %s (docs/checkpoints.md "
              "has the format)", (long long)step, leaf, jwhy);
      return rc == RDZV_ENOMEM ? rc : CKPT_EFORMAT;
    }
  }
  if (rec->world_size != 0 && rec->world_size != o->world_size) {
    lu_errf(why, n, "step-%lld/%s: written by a job of %d ranks, this one "
            "has %d", (long long)step, leaf, rec->world_size, o->world_size);
    return CKPT_EWORLD;
  }
  if ((rc = ck_step_path(p, sizeof(p), o->dir, step, rec->file)) != 0)
    return rc;
  if (stat(p, &st) != 0) {
    lu_errf(why, n, "step-%lld/%s: its shard %s is missing", (long long)step,
            leaf, rec->file);
    return CKPT_EINCOMPLETE;
  }
  if ((uint64_t)st.st_size != rec->size) {
    lu_errf(why, n, "step-%lld/%s says %llu bytes, its shard %s has %llu",
            (long long)step, leaf, (unsigned long long)rec->size, rec->file,
            (unsigned long long)st.st_size);
    return CKPT_EINCOMPLETE;
  }
  if (rec->sha[0] == '\0') {
    uint64_t size;
    char sdir[4096], *text;
    /* No checksum given: compute it once, and keep it in the completion
     * file so that the next scan does not read the shard again. */
    if ((rc = ck_hash_file(p, &size, rec->sha)) != 0)
      return rc;
    if (size != rec->size) {
      lu_errf(why, n, "step-%lld/%s changed while it was hashed",
              (long long)step, rec->file);
      return CKPT_EINCOMPLETE;
    }
    if (ck_step_path(sdir, sizeof(sdir), o->dir, step, NULL) == 0 &&
        ck_record_encode(rec, &text, &len) == 0) {
      (void)ck_write_atomic(sdir, leaf, text, len);
      free(text);
    }
  }
  return 1;
}

int ckpt_agent_scan_commit(const ckpt_commit_options_t *o, int64_t *finalised,
                           char *err, size_t errlen) {
  int64_t *steps = NULL, newest_final = -1;
  size_t n = 0;
  ck_record_t *recs = NULL;
  ck_log_t log = {NULL, NULL};
  int timeout = o->timeout_ms > 0 ? o->timeout_ms : 30000, rc;
  if (finalised)
    *finalised = -1;
  if (err && errlen)
    err[0] = '\0';
  if (o->dir == NULL || o->world_size < 1 || o->world_size > CK_MAX_WORLD)
    return RDZV_EINVAL;
  if ((rc = ck_list_steps(o->dir, &steps, &n)) != 0)
    return rc == -ENOENT ? 0 : rc;
  if ((recs = calloc((size_t)o->world_size, sizeof(*recs))) == NULL) {
    free(steps);
    return RDZV_ENOMEM;
  }
  /* Only steps newer than the newest final one can still complete. */
  for (size_t i = 0; i < n; i++)
    if (ck_finalised(o->dir, steps[i])) {
      newest_final = steps[i];
      break;
    }
  /* Oldest first, so that `latest` walks forward. */
  for (size_t i = n; i-- > 0 && rc == 0;) {
    int64_t step = steps[i], count = 0;
    /* Without a store every rank's completion file must be here. */
    const int *mine = o->client ? o->ranks : NULL;
    int ready = 1, nmine = mine ? (int)o->nranks : o->world_size;
    char why[CKPT_PROBLEM_MAX] = "";
    if (step <= newest_final || ck_finalised(o->dir, step))
      continue;
    /* a symlinked step-N (its target is outside the directory) or another
     * program's: nothing is written into it */
    if (!ck_step_is_ours(o->dir, step))
      continue;
    for (int k = 0; k < nmine && ready; k++) {
      int r = mine ? mine[k] : k, got;
      if (r < 0 || r >= o->world_size) {
        rc = RDZV_EINVAL;
        break;
      }
      got = ck_read_done(o, step, r, &recs[r], why, sizeof(why));
      if (got == RDZV_ENOMEM) {
        rc = got;
        break;
      }
      if (got <= 0) {
        if (got < 0)
          ck_problem(err, errlen, "%s", why);
        ready = 0;
      }
    }
    if (rc != 0 || !ready)
      continue;
    if (o->client) {
      for (int k = 0; k < nmine && rc == 0; k++) {
        int r = mine ? mine[k] : k;
        rc = ck_store_commit(o->client, o->round, step, &recs[r], &count,
                             timeout);
      }
      if (rc != 0) {
        lu_errf(err, errlen, "committing step %lld: %s", (long long)step,
                rdzv_strerror(rc));
        break;
      }
      if (count < o->world_size)
        continue;
      rc = ck_store_records(o->client, o->round, step, o->world_size,
                            recs, timeout, err, errlen);
      if (rc != 0)
        break;
    }
    {
      ck_final_t f = {o->dir, o->job, step, o->round, o->world_size,
                      o->keep == 0 ? 3 : o->keep, recs};
      char ferr[CKPT_PROBLEM_MAX];
      int frc = ck_finalise(&f, &log, ferr, sizeof(ferr));
      if (frc == RDZV_ENOMEM) {
        rc = frc;
      } else if (frc != 0) {
        ck_problem(err, errlen, "%s", ferr);
      } else if (finalised) {
        *finalised = step;
      }
    }
  }
  free(recs);
  free(steps);
  return rc;
}

/* ---- what the trust cache learns from a commit (ckpt.h) ----------------------- */

static int64_t ck_ctime_ns(const struct stat *st) {
  return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

int ckpt_trust_learn(ckpt_trust_t *t, const char *dir, int64_t step,
                     const int *ranks, size_t nranks, int *learnt) {
  ck_manifest_t m;
  char p[4096], why[CKPT_PROBLEM_MAX];
  struct stat mst;
  int rc, k;
  if (learnt)
    *learnt = 0;
  if (t == NULL || dir == NULL || step < 0)
    return RDZV_EINVAL;
  if ((rc = ck_read_manifest(dir, step, &m, why, sizeof(why))) != 0)
    return rc;
  k = snprintf(p, sizeof(p), "%s/step-%lld/%s", dir, (long long)step,
               CK_MANIFEST);
  if (k < 0 || (size_t)k >= sizeof(p)) {
    ck_manifest_free(&m);
    return -ENAMETOOLONG;
  }
  if (stat(p, &mst) != 0) {
    rc = -errno;
    ck_manifest_free(&m);
    return rc;
  }
  for (size_t i = 0; i < (ranks ? nranks : (size_t)m.world_size); i++) {
    int r = ranks ? ranks[i] : (int)i;
    const ck_record_t *rec;
    struct stat st;
    ck_fid_t id;
    if (r < 0 || r >= m.world_size)
      continue;
    rec = &m.shards[r];
    k = snprintf(p, sizeof(p), "%s/step-%lld/%s", dir, (long long)step,
                 rec->file);
    if (k < 0 || (size_t)k >= sizeof(p) || lstat(p, &st) != 0 ||
        !S_ISREG(st.st_mode) || (uint64_t)st.st_size != rec->size)
      continue; /* not here, or not what the manifest says: hash later */
    /* Changed at or after the manifest's creation: maybe after the
     * commit. The clock's tick makes "at" ambiguous: left out too. */
    if (ck_ctime_ns(&st) >= ck_ctime_ns(&mst))
      continue;
    ck_fid_of(&st, &id);
    ck_trust_put(t, p, &id, rec->sha);
    if (learnt)
      (*learnt)++;
  }
  ck_manifest_free(&m);
  return 0;
}

int ckpt_latest_step(const char *dir, int64_t *step) {
  char p[4096], *data;
  size_t len;
  int rc;
  *step = -1;
  if ((rc = ck_join(p, sizeof(p), dir, CK_LATEST)) != 0)
    return rc;
  if ((rc = lu_read_file(p, CK_SMALL_MAX, &data, &len)) != 0)
    return rc == RDZV_ETOOBIG || rc == RDZV_ENOTREG ? CKPT_EFORMAT : rc;
  rc = ck_latest_decode(data, len, step);
  free(data);
  if (rc != 0)
    *step = -1;
  return rc;
}

/* ---- the row of the layout table (scan.c) ------------------------------------ */

/* A file only launch writes in a step directory. */
static int ck_launch_file(const char *name) {
  return strcmp(name, CK_MANIFEST) == 0 || strncmp(name, "rank-", 5) == 0;
}

static ck_seen_t ck_launch_detect(const ck_entry_t *e) {
  char *data;
  size_t len;
  int64_t step;
  ck_seen_t seen;
  if (e->is_dir) {
    if (ck_parse_step_name(e->name, &step) != 0)
      return CK_SEEN_NO;
    /* An empty step: launch's, being written, when nothing else is seen. */
    return ck_dir_any(e->path, ck_launch_file) ? CK_SEEN_YES : CK_SEEN_WEAK;
  }
  if (strcmp(e->name, CK_LATEST) != 0 ||
      lu_read_file(e->path, 4096, &data, &len) != 0)
    return CK_SEEN_NO;
  seen = ck_latest_decode(data, len, &step) == 0 ? CK_SEEN_YES : CK_SEEN_NO;
  free(data);
  /* Naming a step that is someone else's, it is their pointer. Cheaply: a
   * step with a manifest.json is judged by the scan (a manifest of 100,000
   * shards is not decoded twice), one without by its files. */
  if (seen == CK_SEEN_YES) {
    char p[4096], m[4200];
    struct stat st;
    if (ck_step_path(p, sizeof(p), e->dir, step, NULL) == 0 &&
        lstat(p, &st) == 0 &&
        (ck_join(m, sizeof(m), p, CK_MANIFEST) != 0 || lstat(m, &st) != 0) &&
        !ck_step_is_ours(e->dir, step))
      seen = CK_SEEN_NO;
  }
  return seen;
}

const ck_layout_t ck_layout_launch = {CKPT_LAYOUT_LAUNCH, "launch", CK_LATEST,
                                      ck_launch_detect, ck_scan_launch};
