/* ckpt.c - the trainer's side: save (now or in the background), commit,
 * resume, load. The commit protocol is in docs/checkpoints.md. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ck_int.h"

#define CK_STORE_TIMEOUT_MS 30000
#define CK_COMMIT_TIMEOUT_MS (30 * 60 * 1000)

struct ckpt_s {
  char *dir;
  char *job;
  int rank, world, local_rank, keep, replicated, commit_timeout_ms;
  int64_t round;
  rdzv_client_t *client;
  ck_log_t log;
  /* The background save: one at a time. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int th_started;
  int busy;     /* a save is queued or running */
  int stop;
  int last_rc;  /* the last finished save's result, until reported */
  int64_t job_step;
  struct iovec *job_iov;
  int job_iovcnt;
};

/* mkdir -p, each new level made durable. */
static int ck_mkdirs(const char *path) {
  char buf[4096];
  size_t n = lu_strlcpy(buf, path, sizeof(buf));
  int rc;
  if (n >= sizeof(buf))
    return -ENAMETOOLONG;
  for (size_t i = 1; i < n; i++) {
    if (buf[i] != '/')
      continue;
    buf[i] = '\0';
    rc = ck_mkdir_durable(buf);
    buf[i] = '/';
    if (rc != 0)
      return rc;
  }
  return ck_mkdir_durable(buf);
}

int ckpt_open(const ckpt_options_t *opt, ckpt_t **out) {
  ckpt_options_t o = CKPT_OPTIONS_INIT;
  ckpt_t *c;
  const char *dir, *job;
  rdzv_env_t env;
  char bad[160];
  int rc;
  *out = NULL;
  if (opt)
    memcpy(&o, opt, LU_MIN(opt->size, sizeof(o)));
  rc = rdzv_env_parse(NULL, &env, bad, sizeof(bad)) != 0;
  dir = o.dir ? o.dir : env.ckpt_dir;
  job = o.job ? o.job : env.rdzv_id;
  if ((c = calloc(1, sizeof(*c))) == NULL)
    return RDZV_ENOMEM;
  c->log.cb = o.log;
  c->log.data = o.log_data;
  if (dir == NULL) {
    ck_log(&c->log, 0, "no checkpoint directory: set ckpt_options_t.dir or "
           "run under launch --ckpt-dir (docs/checkpoints.md)");
    free(c);
    return RDZV_EINVAL;
  }
  c->rank = o.rank;
  c->world = o.world_size;
  c->local_rank = o.local_rank;
  c->round = o.round;
  /* the options first, then the contract (unset: rank 0 of 1, round 0) */
  if (c->rank < 0)
    c->rank = env.rank >= 0 ? env.rank : 0;
  if (c->world < 0)
    c->world = env.world_size >= 0 ? env.world_size : 1;
  if (c->local_rank < 0)
    c->local_rank = env.local_rank >= 0 ? env.local_rank : 0;
  if (c->round < 0)
    c->round = env.round >= 0 ? env.round : 0;
  c->keep = o.keep;
  if (c->keep == 0)
    c->keep = env.ckpt_keep >= 0 ? env.ckpt_keep : 3;
  if (rc != 0)
    ck_log(&c->log, 0, "%s", bad);
  if (rc != 0 || c->world < 1 || c->world > CK_MAX_WORLD || c->rank < 0 ||
      c->rank >= c->world || c->round < 0) {
    ck_log(&c->log, 0, "rank %d of world size %d (from the options or RANK, "
           "WORLD_SIZE, LAUNCH_ROUND) is not valid", c->rank, c->world);
    free(c);
    return RDZV_EINVAL;
  }
  c->replicated = o.replicated != 0;
  c->client = o.client;
  c->commit_timeout_ms =
      o.commit_timeout_ms > 0 ? o.commit_timeout_ms : CK_COMMIT_TIMEOUT_MS;
  c->dir = strdup(dir);
  c->job = strdup(job ? job : "default");
  if (c->dir == NULL || c->job == NULL) {
    free(c->dir);
    free(c->job);
    free(c);
    return RDZV_ENOMEM;
  }
  if ((rc = ck_mkdirs(c->dir)) != 0) {
    ck_log(&c->log, 0, "creating %s: %s", c->dir, rdzv_strerror(rc));
    free(c->dir);
    free(c->job);
    free(c);
    return rc;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  *out = c;
  return 0;
}

const char *ckpt_dir(const ckpt_t *c) { return c->dir; }

/* ---- one save ------------------------------------------------------------------ */

static int ck_commit_store(ckpt_t *c, int64_t step, const ck_record_t *rec) {
  char key[128], err[CKPT_PROBLEM_MAX];
  int64_t count = 0;
  void *val = NULL;
  size_t len;
  ck_record_t *recs;
  int rc = ck_store_commit(c->client, c->round, step, rec, &count,
                           CK_STORE_TIMEOUT_MS);
  if (rc != 0) {
    ck_log(&c->log, 0, "step %lld: committing rank %d through the store: %s",
           (long long)step, c->rank, rdzv_strerror(rc));
    return rc;
  }
  ck_store_key(key, sizeof(key), c->round, step, "all");
  /* The rank that completes the count tells the finalisers. */
  if (count >= c->world &&
      (rc = rdzv_set(c->client, key, "1", 1, CK_STORE_TIMEOUT_MS)) != 0) {
    ck_log(&c->log, 0, "step %lld: %s", (long long)step, rdzv_strerror(rc));
    return rc;
  }
  if (c->local_rank != 0)
    return 0;
  /* Local rank 0 finalises this node's directory once every rank is in. */
  rc = rdzv_get(c->client, key, &val, &len, c->commit_timeout_ms);
  rdzv_free(val);
  if (rc != 0) {
    ck_log(&c->log, 0, "step %lld: not every rank committed within %d ms "
           "(%s): not finalised", (long long)step, c->commit_timeout_ms,
           rdzv_strerror(rc));
    return rc;
  }
  if ((recs = calloc((size_t)c->world, sizeof(*recs))) == NULL)
    return RDZV_ENOMEM;
  rc = ck_store_records(c->client, c->round, step, c->world, recs,
                        CK_STORE_TIMEOUT_MS, err, sizeof(err));
  if (rc == 0) {
    ck_final_t f = {c->dir, c->job, step, c->round, c->world, c->keep, recs};
    rc = ck_finalise(&f, &c->log, err, sizeof(err));
  }
  if (rc != 0)
    ck_log(&c->log, 0, "%s", err);
  free(recs);
  return rc;
}

static int ck_do_save(ckpt_t *c, int64_t step, const struct iovec *iov,
                      int iovcnt) {
  char sdir[4096], err[CKPT_PROBLEM_MAX];
  ck_record_t rec;
  uint64_t t0;
  int rc;
  if (snprintf(sdir, sizeof(sdir), "%s/step-%lld", c->dir, (long long)step) >=
      (int)sizeof(sdir))
    return -ENAMETOOLONG;
  if ((rc = ck_mkdir_durable(sdir)) != 0) {
    ck_log(&c->log, 0, "creating %s: %s", sdir, rdzv_strerror(rc));
    return rc;
  }
  memset(&rec, 0, sizeof(rec));
  rec.rank = c->rank;
  ck_shard_name(c->rank, rec.file, sizeof(rec.file));
  t0 = lu_now_ns();
  if ((rc = ck_write_shard(sdir, rec.file, iov, iovcnt, &rec.size, rec.sha)) !=
      0) {
    ck_log(&c->log, 0, "writing %s/%s: %s", sdir, rec.file,
           rdzv_strerror(rc));
    return rc;
  }
  rec.time = lu_wall_s();
  /* At least a millisecond: 0 says "unknown". */
  rec.write_s = LU_MAX(1e-3, (double)(lu_now_ns() - t0) / 1e9);
  rec.world_size = c->world;
  rec.replicated = c->replicated;
  if (c->client)
    return ck_commit_store(c, step, &rec);
  if (c->world == 1) {
    ck_final_t f = {c->dir, c->job, step, c->round, 1, c->keep, &rec};
    if ((rc = ck_finalise(&f, &c->log, err, sizeof(err))) != 0)
      ck_log(&c->log, 0, "%s", err);
    return rc;
  }
  /* No store: leave a completion file; the launch agent commits. */
  {
    char leaf[64], *text;
    size_t len;
    snprintf(leaf, sizeof(leaf), "rank-%d.done", c->rank);
    if ((rc = ck_record_encode(&rec, &text, &len)) != 0)
      return rc;
    rc = ck_write_atomic(sdir, leaf, text, len);
    free(text);
    if (rc != 0)
      ck_log(&c->log, 0, "writing %s/%s: %s", sdir, leaf, rdzv_strerror(rc));
    return rc;
  }
}

/* ---- the background save --------------------------------------------------------- */

static void *ck_worker(void *arg) {
  ckpt_t *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    int64_t step;
    struct iovec *iov;
    int n, rc;
    while (!c->stop && c->job_iov == NULL)
      pthread_cond_wait(&c->cv, &c->mu);
    if (c->job_iov == NULL)
      break;
    step = c->job_step;
    iov = c->job_iov;
    n = c->job_iovcnt;
    pthread_mutex_unlock(&c->mu);
    rc = ck_do_save(c, step, iov, n);
    pthread_mutex_lock(&c->mu);
    free(c->job_iov);
    c->job_iov = NULL;
    c->last_rc = rc;
    c->busy = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Wait (mu held) until no save runs; RET 0 or -ETIMEDOUT. */
static int ck_wait_idle(ckpt_t *c, int timeout_ms) {
  struct timespec dl;
  if (timeout_ms >= 0) {
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000L;
    }
  }
  while (c->busy) {
    if (timeout_ms < 0)
      pthread_cond_wait(&c->cv, &c->mu);
    else if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT &&
             c->busy)
      return -ETIMEDOUT;
  }
  return 0;
}

/* The previous save's error, reported once. mu held, idle. */
static int ck_take_result(ckpt_t *c) {
  int rc = c->last_rc;
  c->last_rc = 0;
  return rc;
}

int ckpt_save(ckpt_t *c, int64_t step, const struct iovec *iov, int iovcnt) {
  int rc;
  if (step < 0 || iovcnt < 0 || (iovcnt > 0 && iov == NULL))
    return RDZV_EINVAL;
  pthread_mutex_lock(&c->mu);
  ck_wait_idle(c, -1);
  rc = ck_take_result(c);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0)
    return rc;
  return ck_do_save(c, step, iov, iovcnt);
}

int ckpt_save_async(ckpt_t *c, int64_t step, const struct iovec *iov,
                    int iovcnt) {
  struct iovec *copy;
  int rc;
  if (step < 0 || iovcnt < 0 || (iovcnt > 0 && iov == NULL))
    return RDZV_EINVAL;
  if ((copy = malloc(((size_t)iovcnt + 1) * sizeof(*copy))) == NULL)
    return RDZV_ENOMEM;
  if (iovcnt > 0)
    memcpy(copy, iov, (size_t)iovcnt * sizeof(*copy));
  pthread_mutex_lock(&c->mu);
  ck_wait_idle(c, -1);
  if ((rc = ck_take_result(c)) != 0) {
    pthread_mutex_unlock(&c->mu);
    free(copy);
    return rc;
  }
  if (!c->th_started) {
    if (pthread_create(&c->th, NULL, ck_worker, c) != 0) {
      pthread_mutex_unlock(&c->mu);
      free(copy);
      return RDZV_ENOMEM;
    }
    c->th_started = 1;
  }
  c->job_step = step;
  c->job_iov = copy; /* the worker frees it */
  c->job_iovcnt = iovcnt;
  c->busy = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return 0;
}

int ckpt_poll(ckpt_t *c) {
  int rc;
  pthread_mutex_lock(&c->mu);
  rc = c->busy ? 1 : ck_take_result(c);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int ckpt_wait(ckpt_t *c, int timeout_ms) {
  int rc;
  pthread_mutex_lock(&c->mu);
  rc = ck_wait_idle(c, timeout_ms);
  if (rc == 0)
    rc = ck_take_result(c);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void ckpt_close(ckpt_t *c) {
  if (c == NULL)
    return;
  pthread_mutex_lock(&c->mu);
  ck_wait_idle(c, -1);
  if (c->last_rc != 0)
    ck_log(&c->log, 1, "the last background save failed: %s",
           ckpt_strerror(c->last_rc));
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->th_started)
    pthread_join(c->th, NULL);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->dir);
  free(c->job);
  free(c);
}

/* ---- resuming -------------------------------------------------------------------- */

int ckpt_resume_step(ckpt_t *c, int64_t *step) {
  rdzv_env_t env;
  ckpt_scan_options_t o = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s;
  char err[CKPT_PROBLEM_MAX];
  const char *v = getenv("LAUNCH_RESUME_STEP");
  int rc;
  *step = -1;
  if (v != NULL) {
    /* launch agreed on it with every node: trust it (ckpt_load checks the
     * shard's SHA-256 anyway). Set and empty (a caller's, never the
     * agent's): a fresh start, no scan. */
    if (*v == '\0')
      return 0;
    rdzv_env_parse(NULL, &env, NULL, 0);
    if (env.resume_step < 0) {
      ck_log(&c->log, 0, "LAUNCH_RESUME_STEP=\"%s\" is not a step number", v);
      return CKPT_EFORMAT;
    }
    *step = env.resume_step;
    return 0;
  }
  /* Not under launch: every rank verifies every shard of the newest steps
   * alike, so that all ranks pick the same one. */
  o.layout = CKPT_LAYOUT_LAUNCH;
  o.flags = CKPT_SCAN_SHA | CKPT_SCAN_NEWEST_COMPLETE;
  if ((rc = ckpt_scan(c->dir, &o, &s, err, sizeof(err))) != 0) {
    ck_log(&c->log, 0, "%s", err);
    return rc;
  }
  for (size_t i = 0; i < s->nsteps; i++) {
    ckpt_step_t *st = &s->steps[i];
    if ((int)i == s->resume)
      break;
    ck_log(&c->log, 1, "%s skipped: %s", st->name, st->problem);
  }
  if (s->resume >= 0) {
    ckpt_step_t *st = &s->steps[s->resume];
    if (st->world_size != c->world && !st->replicated) {
      ck_log(&c->log, 0, "%s was written by %d ranks, this job has %d, and "
             "its state is not declared replicated: run with %d ranks "
             "(docs/checkpoints.md)", st->name, st->world_size, c->world,
             st->world_size);
      rc = CKPT_EWORLD;
    } else {
      *step = st->step;
    }
  }
  ckpt_scan_free(s);
  return rc;
}

/* The shard this rank reads from step's manifest. */
static int ck_pick(ckpt_t *c, int64_t step, ck_manifest_t *m,
                   const ck_record_t **rec) {
  char why[CKPT_PROBLEM_MAX];
  int rc = ck_read_manifest(c->dir, step, m, why, sizeof(why));
  if (rc != 0) {
    ck_log(&c->log, 0, "step-%lld: %s", (long long)step, why);
    return rc;
  }
  if (m->world_size == c->world) {
    *rec = &m->shards[c->rank];
    return 0;
  }
  if (!m->replicated) {
    ck_log(&c->log, 0, "step-%lld was written by %d ranks, this job has %d, "
           "and its state is not declared replicated (docs/checkpoints.md)",
           (long long)step, m->world_size, c->world);
    ck_manifest_free(m);
    return CKPT_EWORLD;
  }
  /* Replicated: this rank's shard if there is one here, else the first
   * one that is (node-local storage holds only some). */
  for (int k = 0; k < m->world_size; k++) {
    int r = (c->rank + k) % m->world_size;
    char p[4096];
    struct stat st;
    if (snprintf(p, sizeof(p), "%s/step-%lld/%s", c->dir, (long long)step,
                 m->shards[r].file) < (int)sizeof(p) &&
        stat(p, &st) == 0) {
      *rec = &m->shards[r];
      return 0;
    }
  }
  ck_log(&c->log, 0, "step-%lld: no shard of it is here", (long long)step);
  ck_manifest_free(m);
  return CKPT_EINCOMPLETE;
}

int ckpt_shard_size(ckpt_t *c, int64_t step, uint64_t *size) {
  ck_manifest_t m;
  const ck_record_t *rec;
  int rc = ck_pick(c, step, &m, &rec);
  if (rc != 0)
    return rc;
  *size = rec->size;
  ck_manifest_free(&m);
  return 0;
}

int ckpt_verified_by_launch(int64_t step) {
  rdzv_env_t env;
  rdzv_env_parse(NULL, &env, NULL, 0);
  return env.ckpt_verified >= 0 && env.ckpt_verified == step;
}

int ckpt_load(ckpt_t *c, int64_t step, const struct iovec *iov, int iovcnt) {
  ck_manifest_t m;
  const ck_record_t *rec;
  char p[4096], sha[CK_SHA_HEX];
  uint64_t total = 0;
  int rc, verified;
  if (iovcnt < 0 || (iovcnt > 0 && iov == NULL))
    return RDZV_EINVAL;
  if ((rc = ck_pick(c, step, &m, &rec)) != 0)
    return rc;
  for (int i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  if (total != rec->size) {
    ck_log(&c->log, 0, "step-%lld/%s holds %llu bytes, the buffers %llu",
           (long long)step, rec->file, (unsigned long long)rec->size,
           (unsigned long long)total);
    ck_manifest_free(&m);
    return CKPT_ESIZE;
  }
  snprintf(p, sizeof(p), "%s/step-%lld/%s", c->dir, (long long)step,
           rec->file);
  verified = ckpt_verified_by_launch(step);
  rc = verified ? ck_read_plain(p, iov, iovcnt)
                : ck_read_hashed(p, iov, iovcnt, sha);
  if (rc == -ENOENT) {
    ck_log(&c->log, 0, "step-%lld/%s: missing", (long long)step, rec->file);
    rc = CKPT_EINCOMPLETE;
  } else if (rc == CKPT_ESIZE) {
    ck_log(&c->log, 0, "step-%lld/%s: not the size its manifest says",
           (long long)step, rec->file);
    rc = CKPT_ECORRUPT;
  } else if (rc != 0) {
    ck_log(&c->log, 0, "reading step-%lld/%s: %s", (long long)step,
           rec->file, rdzv_strerror(rc));
  } else if (!verified && strcmp(sha, rec->sha) != 0) {
    ck_log(&c->log, 0, "step-%lld/%s: SHA-256 %.12s... does not match the "
           "manifest's %.12s...", (long long)step, rec->file, sha, rec->sha);
    rc = CKPT_ECORRUPT;
  }
  ck_manifest_free(&m);
  return rc;
}
