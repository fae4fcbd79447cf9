/* resume.c - the agent's side of checkpoints: the resume step every node
 * agrees on at each (re)start, the rollback to it, and the commit of
 * completion files while the workers run (resume.h, docs/checkpoints.md).
 *
 * Each node publishes its view (a VIEW map of the message codec) under
 * the round's keys (checkpoint/ck_store.h spells them all), reads every
 * node's and runs ckpt_agree itself: a pure function of the same input,
 * so the same candidate everywhere, with no leader. Each then checks the
 * candidate's SHA-256 here and publishes a VERDICT; a bad one drops the
 * step from that node's view and the agreement runs again. Last, every
 * node rolls back and waits for the others (the rollback barrier). */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_store.h"
#include "ckpt.h"
#include "resume.h"

#define SLICE_MS 250          /* a store wait checks for cancel this often */
#define COMMIT_EVERY_MS 2000

struct resume_s {
  uv_loop_t *loop;
  const cfg_t *o;
  lu_log_t *log;
  char endpoint[300];
  const char *token;
  size_t token_len;
  rdzv_client_t *client; /* used on the pool's thread only */
  uv_work_t work;
  int busy;              /* work queued or running */
  int freeing;
  atomic_int cancel;
  /* the work's round: set on the loop when work is queued, read by it */
  resume_round_t rr;
  char host[256];
  resume_round_t next_rr; /* the agreement's, until it is queued */
  char next_host[256];
  resume_cb cb;
  void *cb_arg;
  resume_result_t res;
  int agree_pending;     /* asked while a commit ran */
  /* the commit */
  uv_timer_t timer;
  int committing;        /* the work in flight is a commit */
  int commit_pending;
  resume_round_t commit_rr; /* the round whose workers run */
  int commit_on;             /* between commit_start and commit_stop */
  int commit_ran;            /* commit_rr is a round whose workers ran */
  void (*final_cb)(void *);  /* resume_commit_final's, after its commit */
  int commit_last;           /* the commit queued is that last one */
  void *final_arg;
  char commit_err[1024];
  int64_t finalised;
  int have_round;        /* resume_env: a result to export */
  int64_t step;
  int64_t verified;      /* the last agreement's res.verified, for
                            resume_env (loop) */
  /* What this agent saw verified or committed (pool thread; lives as
   * long as the agent, so a restart need not hash it again). */
  ckpt_trust_t *trust;
  int64_t learnt_step;   /* the last step learn_latest looked at */
  /* the agreement's breakdown (pool thread, logged on the loop) */
  uint64_t agree_ns;
  ckpt_verify_stats_t vstats;
  int verify_mode;       /* 0 none (no step), 1 SHA-256, 2 sizes only */
  /* The layout this node's last scan found (--ckpt-layout, or what auto
   * detected); pool thread. Only launch's own is ever written to. */
  int layout;
  /* resume_on_commit: `latest` as the last commit saw it (pool thread),
   * and the newest step told (loop) */
  int64_t latest;
  int64_t latest_told;
  void (*commit_cb)(void *, int64_t);
  void *commit_arg;
};

/* launch's own layout here: the one thing the agent may write, roll back
 * or prune. Every other layout is read-only (issue #22). */
static int own_layout(const resume_t *r) {
  return r->layout == CKPT_LAYOUT_LAUNCH;
}

/* ---- the store connection (pool thread) --------------------------------------- */

static int connect_store(resume_t *r, char *why, size_t n) {
  rdzv_options_t ro = RDZV_OPTIONS_INIT;
  char err[512] = "";
  int rc;
  if (r->client)
    return 0;
  ro.endpoint = r->endpoint;
  ro.job = r->o->run_id;
  ro.token = r->token;
  ro.token_len = r->token_len;
  ro.role = "agent";
  ro.connect_timeout_ms = 10000;
  ro.io_timeout_ms = 30000;
  ro.tls_ca = r->o->tls_ca[0] ? r->o->tls_ca : NULL;
  ro.tls_cert = r->o->tls_cert[0] ? r->o->tls_cert : NULL;
  ro.tls_key = r->o->tls_key[0] ? r->o->tls_key : NULL;
  ro.error = err;
  ro.error_len = sizeof(err);
  if ((rc = rdzv_connect(&ro, &r->client)) != 0) {
    lu_errf(why, n, "checkpoint agreement: cannot reach the store at %s: %s",
            r->endpoint, err[0] ? err : rdzv_strerror(rc));
    r->client = NULL;
  }
  return rc;
}

/* A store call failed: the connection is dropped, the next one reconnects. */
static int store_failed(resume_t *r, int rc, const char *what, char *why,
                        size_t n) {
  lu_errf(why, n, "checkpoint agreement: %s: %s", what,
          r->client && rdzv_last_error(r->client)[0]
              ? rdzv_last_error(r->client)
              : rdzv_strerror(rc));
  rdzv_close(r->client);
  r->client = NULL;
  return rc;
}

/* Every key, waiting in slices so that a cancel is seen; gives up after
 * the join timeout. RET 0, RDZV_ECANCELED, -ETIMEDOUT or a store error. */
static int wait_all(resume_t *r, const char *const *keys, size_t n,
                    rdzv_value_t *vals) {
  uint64_t t0 = lu_now_ms();
  uint64_t limit = (uint64_t)r->o->join_timeout_ms;
  for (;;) {
    int rc;
    if (atomic_load(&r->cancel))
      return RDZV_ECANCELED;
    rc = rdzv_multi_get(r->client, keys, n, vals, SLICE_MS);
    if (rc != -ETIMEDOUT)
      return rc;
    if (lu_now_ms() - t0 > limit)
      return -ETIMEDOUT;
  }
}

/* ---- the agreement (pool thread) ------------------------------------------------ */

void resume_view_free(resume_view_t *v) {
  ckpt_view_free(v->steps, v->nalloc);
  v->steps = NULL;
  v->nsteps = v->nalloc = 0;
}

static void views_free(resume_view_t *v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    resume_view_free(&v[i]);
  free(v);
}

int resume_view_parse(const char *s, size_t len, resume_view_t *v, char *err,
                      size_t errlen) {
  ck_view_t cv;
  int rc = ck_view_unpack(s, len, &cv, err, errlen);
  memset(v, 0, sizeof(*v));
  if (rc != 0)
    return rc;
  lu_strlcpy(v->host, cv.host, sizeof(v->host));
  v->first = cv.first;
  v->nranks = cv.nranks;
  v->steps = cv.steps;
  v->nsteps = v->nalloc = cv.nsteps;
  return 0;
}

/* Drop step s from a view (a node found one of its files bad). */
static void view_drop(resume_view_t *v, int64_t s) {
  for (size_t i = 0; i < v->nsteps; i++)
    if (v->steps[i].step == s) {
      ckpt_have_t gone = v->steps[i];
      memmove(&v->steps[i], &v->steps[i + 1],
              (v->nsteps - i - 1) * sizeof(*v->steps));
      v->steps[v->nsteps - 1] = gone; /* past the count, freed at the end */
      v->nsteps--;
      return;
    }
}

/* This node's scan by sizes, as its VIEW. */
static int my_view(resume_t *r, const int *ranks, char **out, size_t *outlen,
                   char *why, size_t n) {
  ckpt_scan_options_t so = CKPT_SCAN_OPTIONS_INIT;
  ckpt_scan_t *s = NULL;
  char err[CKPT_PROBLEM_MAX] = "";
  int rc;
  so.layout = (ckpt_layout_t)r->o->ckpt_layout;
  so.ranks = ranks;
  so.nranks = (size_t)r->rr.nproc;
  rc = ckpt_scan(r->o->ckpt_dir, &so, &s, err, sizeof(err));
  if (rc == -ENOENT) {
    /* No directory yet: a fresh start here, in the layout asked for
     * (auto: launch's, as ckpt_scan says of an empty directory). */
    r->layout = so.layout == CKPT_LAYOUT_AUTO ? CKPT_LAYOUT_LAUNCH
                                              : (int)so.layout;
    s = NULL;
    rc = 0;
  } else if (rc != 0) {
    lu_errf(why, n, "%s", err[0] ? err : ckpt_strerror(rc));
    return rc;
  } else {
    r->layout = (int)s->layout;
    /* Another trainer's pointer (DeepSpeed's latest, Megatron's tracker)
     * naming a partial step: launch may not fix it, and a trainer that
     * follows it loads what is not there. */
    if (!own_layout(r) && s->latest_problem[0])
      LU_WARN(r->log, "checkpoint %s: %s; the workers get the newest step "
              "every rank can load in LAUNCH_RESUME_STEP: load that one%s",
              r->o->ckpt_dir, s->latest_problem,
              s->layout == CKPT_LAYOUT_DEEPSPEED
                  ? " (engine.load_checkpoint(dir, tag=\"global_step\" + "
                    "os.environ[\"LAUNCH_RESUME_STEP\"]))"
                  : "");
    /* A corrupt step is news; a partial one is what a kill during a save
     * leaves, and the rollback sets it aside. */
    for (size_t i = 0; i < s->nsteps; i++)
      if (s->steps[i].state == CKPT_STEP_CORRUPT)
        LU_WARN(r->log, "checkpoint %s/%s skipped: %s", r->o->ckpt_dir,
                s->steps[i].name, s->steps[i].problem);
      else if (s->steps[i].state == CKPT_STEP_INCOMPLETE && !r->o->quiet)
        LU_INFO(r->log, "checkpoint %s/%s is partial: %s", r->o->ckpt_dir,
                s->steps[i].name, s->steps[i].problem);
  }
  rc = ck_view_pack(s, r->host, r->rr.base_rank, r->rr.nproc, out, outlen);
  ckpt_scan_free(s);
  return rc;
}

/* Verify step s's SHA-256 here: this node's ranks, or for a step of
 * another world size (replicated), the shards this node holds. Shards the
 * agent verified or saw committed before, unchanged since, are trusted.
 * OUT *all_mine: 1 when every rank of this node had its own shard
 * verified (what its worker then loads). */
static int verify_here(resume_t *r, const resume_view_t *me, int64_t s,
                       int *all_mine, char *problem, size_t n) {
  const ckpt_have_t *h = NULL;
  ckpt_verify_stats_t vs;
  int ranks[CFG_MAX_NPROC], k = 0, rc;
  *all_mine = 0;
  for (size_t i = 0; i < me->nsteps; i++)
    if (me->steps[i].step == s)
      h = &me->steps[i];
  if (h == NULL || !own_layout(r))
    return 0; /* not held here (replicated) or not launch's layout */
  for (int i = 0; i < r->rr.nproc && k < CFG_MAX_NPROC; i++) {
    int rank = r->rr.base_rank + i;
    if (rank < h->world_size &&
        (h->ranks == NULL || (h->ranks[rank / 8] >> (rank % 8) & 1)))
      ranks[k++] = rank;
  }
  *all_mine = k == r->rr.nproc;
  if (k == 0 && h->ranks) /* replicated, none of ours: one that is here */
    for (int rank = 0; rank < h->world_size && k == 0; rank++)
      if (h->ranks[rank / 8] >> (rank % 8) & 1)
        ranks[k++] = rank;
  if (k == 0)
    return 0;
  rc = ckpt_verify_step_trusted(r->o->ckpt_dir, s, ranks, (size_t)k,
                                r->trust, &vs, problem, n);
  r->vstats.hashed += vs.hashed;
  r->vstats.trusted += vs.trusted;
  r->vstats.hashed_bytes += vs.hashed_bytes;
  r->vstats.trusted_bytes += vs.trusted_bytes;
  if (rc != 0)
    *all_mine = 0;
  return rc;
}

/* The refusal for another trainer's step of another world size: what
 * the layout records, and what to do (launch's own advice, declaring
 * replicated state, is no help there). */
static void foreign_world(const resume_t *r, const ckpt_agreement_t *ag,
                          char *why, size_t n) {
  resume__foreign_world(r->layout, r->rr.world_size, ag->why, why, n);
}

void resume__foreign_world(int layout, int world_size, const char *agreed,
                           char *why, size_t n) {
  long long step = -1;
  int w = 0;
  if (sscanf(agreed, "step %lld was written by %d ranks", &step, &w) != 2) {
    lu_strlcpy(why, agreed, n);
    return;
  }
  if (layout == CKPT_LAYOUT_DEEPSPEED)
    lu_errf(why, n, "DeepSpeed step %lld was written by %d ranks "
            "(dp_world_size x mp_world_size in its mp_rank_00_model_states.pt) "
            "and this job has %d; DeepSpeed loads ZeRO partitions only at the "
            "size that wrote them: run with %d ranks, or convert the step to a "
            "universal checkpoint (DeepSpeed's ds_to_universal.py) and load "
            "that (docs/checkpoints.md)", step, w, world_size, w);
  else
    lu_errf(why, n, "%s step %lld was written by %d ranks, each loading its "
            "own files (DCP saved without collectives: one __R.metadata per "
            "rank), and this job has %d: run with %d ranks "
            "(docs/checkpoints.md)", ckpt_layout_name((ckpt_layout_t)layout),
            step, w, world_size, w);
}

/* Every node's view (iter < 0) or verdict on the iter-th candidate into
 * vals (keys: room for nnodes). RET 0 or an error (res.why says it,
 * unless cancelled). */
static int gather(resume_t *r, char **keys, int iter, rdzv_value_t *vals,
                  const char *what) {
  int rc = 0;
  for (int i = 0; i < r->rr.nnodes; i++) {
    char k[CK_KEY_MAX];
    if (iter < 0)
      ck_key_view(k, sizeof(k), r->rr.round, i);
    else
      ck_key_verdict(k, sizeof(k), r->rr.round, iter, i);
    free(keys[i]);
    if ((keys[i] = strdup(k)) == NULL)
      return RDZV_ENOMEM;
  }
  rc = wait_all(r, (const char *const *)keys, (size_t)r->rr.nnodes, vals);
  if (rc != 0 && rc != RDZV_ECANCELED) {
    char w[200];
    snprintf(w, sizeof(w), "waiting for %s", what);
    store_failed(r, rc, w, r->res.why, sizeof(r->res.why));
  }
  return rc;
}

static void agree_work(uv_work_t *w) {
  resume_t *r = w->data;
  resume_result_t *res = &r->res;
  const resume_round_t *rr = &r->rr;
  int64_t g = rr->round;
  char *mine = NULL, k[CK_KEY_MAX];
  size_t minelen = 0;
  char **keys = NULL;
  rdzv_value_t *vals = NULL;
  resume_view_t *views = NULL;
  ckpt_node_view_t *nv = NULL;
  int ranks[CFG_MAX_NPROC], rc;
  int64_t count;
  uint64_t t0 = lu_now_ns();
  memset(res, 0, sizeof(*res));
  res->step = -1;
  res->verified = -1;
  r->verify_mode = 0;
  memset(&r->vstats, 0, sizeof(r->vstats));
  for (int i = 0; i < rr->nproc && i < CFG_MAX_NPROC; i++)
    ranks[i] = rr->base_rank + i;
  if ((rc = my_view(r, ranks, &mine, &minelen, res->why,
                    sizeof(res->why))) != 0)
    goto out;
  if ((rc = connect_store(r, res->why, sizeof(res->why))) != 0)
    goto out;
  ck_key_view(k, sizeof(k), g, rr->node_rank);
  if ((rc = rdzv_set(r->client, k, mine, minelen, 30000)) != 0) {
    store_failed(r, rc, "publishing this node's view", res->why,
                 sizeof(res->why));
    goto out;
  }
  keys = calloc((size_t)rr->nnodes, sizeof(*keys));
  vals = calloc((size_t)rr->nnodes, sizeof(*vals));
  views = calloc((size_t)rr->nnodes, sizeof(*views));
  nv = calloc((size_t)rr->nnodes, sizeof(*nv));
  if (!keys || !vals || !views || !nv) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  if ((rc = gather(r, keys, -1, vals, "the other nodes' views")) != 0)
    goto out;
  for (int i = 0; i < rr->nnodes; i++) {
    char err[300] = "";
    int prc = resume_view_parse(vals[i].data, vals[i].len, &views[i], err,
                                sizeof(err));
    rdzv_free(vals[i].data);
    vals[i].data = NULL;
    if (prc != 0) {
      rc = prc;
      lu_errf(res->why, sizeof(res->why), "checkpoint agreement: node %d's "
              "view does not parse (%s): are all agents the same launch "
              "version?", i, err[0] ? err : ckpt_strerror(prc));
      goto out;
    }
  }
  for (int iter = 0;; iter++) {
    ckpt_agreement_t ag;
    char problem[CKPT_PROBLEM_MAX] = "", *verdict = NULL;
    size_t vlen = 0;
    int vrc, bad = 0, all_mine = 0;
    for (int i = 0; i < rr->nnodes; i++) {
      nv[i].name = views[i].host;
      nv[i].steps = views[i].steps;
      nv[i].nsteps = views[i].nsteps;
      nv[i].first_rank = views[i].first;
      nv[i].nranks = views[i].nranks;
    }
    rc = ckpt_agree(nv, (size_t)rr->nnodes, rr->world_size, &ag);
    res->layout = r->layout;
    if (rc == CKPT_EWORLD && !own_layout(r)) {
      foreign_world(r, &ag, res->why, sizeof(res->why));
      goto out;
    }
    if (rc != 0) {
      lu_strlcpy(res->why, ag.why[0] ? ag.why : ckpt_strerror(rc),
                 sizeof(res->why));
      goto out;
    }
    res->step = ag.step;
    res->elastic = ag.elastic;
    lu_strlcpy(res->why, ag.why, sizeof(res->why));
    res->verified = -1;
    r->verify_mode = ag.step < 0 ? 0
                     : r->o->ckpt_verify == CFG_CKPT_VERIFY_SIZE ? 2 : 1;
    if (ag.step < 0 || r->o->ckpt_verify == CFG_CKPT_VERIFY_SIZE)
      break;
    vrc = verify_here(r, &views[rr->node_rank], ag.step, &all_mine, problem,
                      sizeof(problem));
    if (vrc != 0 && vrc != CKPT_ECORRUPT &&
        vrc != CKPT_EINCOMPLETE && vrc != CKPT_EFORMAT && vrc != CKPT_ESIZE) {
      /* A read error (EIO, EMFILE, out of memory) is no verdict on the
       * step: falling back would roll it back and prune it. This attempt
       * fails here instead; the round is tried again. */
      rc = vrc;
      lu_errf(res->why, sizeof(res->why), "checkpoint step %" PRId64
              " could not be read: %s", ag.step,
              problem[0] ? problem : ckpt_strerror(vrc));
      goto out;
    }
    if (vrc == 0 && all_mine && !ag.elastic && own_layout(r))
      res->verified = ag.step;
    if (vrc != 0 && problem[0] == '\0')
      lu_strlcpy(problem, ckpt_strerror(vrc), sizeof(problem));
    if ((rc = ck_verdict_pack(vrc != 0 ? problem : NULL, &verdict,
                              &vlen)) != 0)
      goto out;
    ck_key_verdict(k, sizeof(k), g, iter, rr->node_rank);
    rc = rdzv_set(r->client, k, verdict, vlen, 30000);
    free(verdict);
    if (rc != 0) {
      store_failed(r, rc, "publishing this node's verification", res->why,
                   sizeof(res->why));
      goto out;
    }
    if ((rc = gather(r, keys, iter, vals,
                     "the other nodes' verification")) != 0)
      goto out;
    for (int i = 0; i < rr->nnodes && rc == 0; i++) {
      int ok;
      rc = ck_verdict_unpack(vals[i].data, vals[i].len, &ok, problem,
                             sizeof(problem));
      rdzv_free(vals[i].data);
      vals[i].data = NULL;
      if (rc != 0) {
        lu_errf(res->why, sizeof(res->why), "checkpoint agreement: node "
                "%d's verdict does not parse (%s)", i, problem);
      } else if (!ok) {
        bad++;
        LU_WARN(r->log, "checkpoint step %" PRId64 " on %s is not usable: "
                "%.900s; falling back to an older step", ag.step,
                views[i].host, problem[0] ? problem : "(no reason given)");
        view_drop(&views[i], ag.step);
      }
    }
    if (rc != 0)
      goto out;
    if (!bad)
      break;
  }
  /* Every node rolls back before any worker starts. */
  if (own_layout(r)) {
    char err[CKPT_PROBLEM_MAX] = "";
    int64_t sv = res->step;
    if ((rc = ckpt_rollback(r->o->ckpt_dir, sv, err, sizeof(err))) != 0) {
      lu_errf(res->why, sizeof(res->why), "rolling %s back to step %" PRId64
              ": %s", r->o->ckpt_dir, sv, err);
      goto out;
    }
    if (err[0])
      LU_WARN(r->log, "rolling back to step %" PRId64 ": %s", sv, err);
  }
  ck_key_rolled(k, sizeof(k), g, 0);
  if ((rc = rdzv_add(r->client, k, 1, &count, 30000)) != 0) {
    store_failed(r, rc, "the rollback barrier", res->why, sizeof(res->why));
    goto out;
  }
  ck_key_rolled(k, sizeof(k), g, 1);
  if (count == rr->nnodes &&
      (rc = rdzv_set(r->client, k, "1", 1, 30000)) != 0) {
    store_failed(r, rc, "the rollback barrier", res->why, sizeof(res->why));
    goto out;
  }
  {
    const char *one = k;
    rc = wait_all(r, &one, 1, vals);
    if (rc == 0) {
      rdzv_free(vals[0].data);
      vals[0].data = NULL;
    } else if (rc != RDZV_ECANCELED)
      store_failed(r, rc, "the rollback barrier", res->why, sizeof(res->why));
  }
out:
  if (rc == RDZV_ECANCELED)
    lu_strlcpy(res->why, "cancelled", sizeof(res->why));
  else if (rc != 0 && res->why[0] == '\0')
    lu_strlcpy(res->why, ckpt_strerror(rc), sizeof(res->why));
  res->rc = rc;
  if (rc != 0)
    res->verified = -1;
  r->agree_ns = lu_now_ns() - t0;
  for (int i = 0; keys && i < rr->nnodes; i++) {
    free(keys[i]);
    if (vals)
      rdzv_free(vals[i].data);
  }
  free(keys);
  free(vals);
  views_free(views, views ? (size_t)rr->nnodes : 0);
  free(nv);
  free(mine);
}

/* ---- the commit of completion files (pool thread) ------------------------------- */

/* The step `latest` names was committed while this agent watched (by it
 * or by its workers): remember its shards here, so that the agreement
 * after a worker's death need not read them again. Cheap: a manifest and
 * a stat per shard, and only when `latest` moved. */
static void learn_latest(resume_t *r, const int *ranks) {
  int64_t step;
  if (r->trust == NULL || !own_layout(r) ||
      ckpt_latest_step(r->o->ckpt_dir, &step) != 0 || step == r->learnt_step)
    return;
  if (ckpt_trust_learn(r->trust, r->o->ckpt_dir, step, ranks,
                       (size_t)r->rr.nproc, NULL) == 0)
    r->learnt_step = step;
}

static void commit_work(uv_work_t *w) {
  resume_t *r = w->data;
  ckpt_commit_options_t co = CKPT_COMMIT_OPTIONS_INIT;
  int ranks[CFG_MAX_NPROC], rc;
  char why[512] = "";
  r->commit_err[0] = '\0';
  r->finalised = -1;
  if (!own_layout(r))
    return; /* other layouts commit themselves */
  if (connect_store(r, r->commit_err, sizeof(r->commit_err)) != 0 &&
      !r->commit_last)
    return;
  for (int i = 0; i < r->rr.nproc && i < CFG_MAX_NPROC; i++)
    ranks[i] = r->rr.base_rank + i;
  co.dir = r->o->ckpt_dir;
  co.job = r->o->run_id;
  co.world_size = r->rr.world_size;
  co.ranks = ranks;
  co.nranks = (size_t)r->rr.nproc;
  co.generation = r->rr.round;
  co.keep = r->o->ckpt_keep;
  co.client = r->client;
  co.timeout_ms = 10000;
  rc = ckpt_agent_scan_commit(&co, &r->finalised, r->commit_err,
                              sizeof(r->commit_err));
  if (r->commit_last && co.client != NULL && rc != -ENOENT &&
      (rc != 0 || r->finalised < 0)) {
    /* The last commit, the job ending (a SIGTERM on every node: the store
     * may be gone, or have moved on to a round without the others'
     * records): a step whose every rank's completion file is here (one
     * node, shared storage) is finalised without it, as a trainer without
     * a store would. */
    char lerr[sizeof(r->commit_err)];
    int64_t fin = -1;
    co.client = NULL;
    co.ranks = NULL;
    co.nranks = 0;
    if (ckpt_agent_scan_commit(&co, &fin, lerr, sizeof(lerr)) == 0) {
      rc = 0;
      if (fin >= 0)
        r->finalised = fin;
      if (fin >= 0 || r->commit_err[0])
        lu_strlcpy(r->commit_err, lerr, sizeof(r->commit_err));
    }
  }
  if (r->commit_cb && ckpt_latest_step(r->o->ckpt_dir, &r->latest) != 0)
    r->latest = -1;
  learn_latest(r, ranks);
  if (rc != 0 && rc != -ENOENT) {
    if (r->commit_err[0] == '\0')
      store_failed(r, rc, "committing completion files", why, sizeof(why)),
          lu_strlcpy(r->commit_err, why, sizeof(r->commit_err));
    else
      rdzv_close(r->client), r->client = NULL;
  } else if (rc == -ENOENT) {
    r->commit_err[0] = '\0'; /* no directory yet */
  }
}

/* ---- on the loop ------------------------------------------------------------------ */

static void start_next(resume_t *r);

/* One line: how long the agreement took and how the step was checked. */
static void log_agreement(const resume_t *r) {
  const ckpt_verify_stats_t *v = &r->vstats;
  char how[300];
  if (r->o->quiet)
    return;
  if (r->step < 0) { /* a fresh start: no "agreement on step -1" */
    LU_INFO(r->log, "no checkpoint in %s to resume from: the workers start "
            "fresh (looked in %.3f s)", r->o->ckpt_dir,
            (double)r->agree_ns / 1e9);
    return;
  }
  if (r->verify_mode == 0)
    snprintf(how, sizeof(how), "no step to check");
  else if (r->verify_mode == 2)
    snprintf(how, sizeof(how), "sizes only (--ckpt-verify size)");
  else if (v->hashed == 0 && v->trusted == 0)
    snprintf(how, sizeof(how), "no shard of it here to check");
  else
    snprintf(how, sizeof(how), "SHA-256 computed for %u shard%s (%.1f MiB), "
             "trusted for %u (%.1f MiB, unchanged since this agent verified "
             "or committed them)", v->hashed, v->hashed == 1 ? "" : "s",
             (double)v->hashed_bytes / 1048576.0, v->trusted,
             (double)v->trusted_bytes / 1048576.0);
  LU_INFO(r->log, "checkpoint agreement on step %" PRId64 " took %.3f s: %s",
          r->step, (double)r->agree_ns / 1e9, how);
}

static void after_work(uv_work_t *w, int status) {
  resume_t *r = w->data;
  int was_commit = r->committing;
  (void)status;
  r->busy = 0;
  r->committing = 0;
  if (r->freeing) {
    rdzv_close(r->client);
    ckpt_trust_free(r->trust);
    free(r);
    return;
  }
  if (was_commit) {
    if (r->commit_err[0])
      LU_WARN(r->log, "checkpoint commit: %s", r->commit_err);
    else if (r->finalised >= 0 && !r->o->quiet)
      LU_INFO(r->log, "checkpoint step %" PRId64 " of %s is final",
              r->finalised, r->o->ckpt_dir);
    if (r->commit_cb && r->latest > r->latest_told) {
      r->latest_told = r->latest;
      r->commit_cb(r->commit_arg, r->latest);
    }
    if (r->final_cb && !r->commit_pending) {
      void (*done)(void *) = r->final_cb;
      r->final_cb = NULL;
      done(r->final_arg);
    }
  } else {
    resume_cb cb = r->cb;
    r->cb = NULL;
    if (r->res.rc == 0) {
      r->have_round = 1;
      r->step = r->res.step;
      r->verified = r->res.verified;
      r->latest_told = LU_MAX(r->latest_told, r->res.step);
      log_agreement(r);
    }
    if (cb)
      cb(r->cb_arg, &r->res);
  }
  start_next(r);
}

static void queue(resume_t *r, int commit) {
  if (commit) {
    r->rr = r->commit_rr;
    r->rr.host = r->host;
    r->commit_last = r->final_cb != NULL;
  } else {
    r->rr = r->next_rr;
    memcpy(r->host, r->next_host, sizeof(r->host));
    r->rr.host = r->host;
  }
  r->busy = 1;
  r->committing = commit;
  r->work.data = r;
  if (uv_queue_work(r->loop, &r->work, commit ? commit_work : agree_work,
                    after_work) != 0) {
    /* cannot happen with a live loop: run it here */
    (commit ? commit_work : agree_work)(&r->work);
    after_work(&r->work, 0);
  }
}

static void start_next(resume_t *r) {
  if (r->busy)
    return;
  /* The last commit of a round before the next round's scan. */
  if (r->commit_pending) {
    r->commit_pending = 0;
    queue(r, 1);
  } else if (r->agree_pending) {
    r->agree_pending = 0;
    queue(r, 0);
  }
}

static void commit_cb(uv_timer_t *t) {
  resume_t *r = t->data;
  if (!r->busy)
    queue(r, 1);
}

int resume_new(uv_loop_t *loop, const cfg_t *o, lu_log_t *log,
               const char *endpoint, const char *token, size_t token_len,
               resume_t **out) {
  resume_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return RDZV_ENOMEM;
  r->loop = loop;
  r->o = o;
  r->log = log;
  lu_strlcpy(r->endpoint, endpoint, sizeof(r->endpoint));
  r->token = token;
  r->token_len = token_len;
  r->step = -1;
  r->verified = -1;
  r->learnt_step = -1;
  r->layout = o->ckpt_layout;
  if (ckpt_trust_new(&r->trust) != 0) {
    free(r);
    return RDZV_ENOMEM;
  }
  atomic_init(&r->cancel, 0);
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
  *out = r;
  return 0;
}

static void timer_closed(uv_handle_t *h) {
  resume_t *r = h->data;
  if (r->busy) {
    r->freeing = 1; /* after_work frees */
    return;
  }
  rdzv_close(r->client);
  ckpt_trust_free(r->trust);
  free(r);
}

void resume_free(resume_t *r) {
  if (r == NULL)
    return;
  atomic_store(&r->cancel, 1);
  r->cb = NULL;
  r->agree_pending = r->commit_pending = 0;
  uv_close((uv_handle_t *)&r->timer, timer_closed);
}

int resume_agree(resume_t *r, const resume_round_t *rr, resume_cb cb,
                 void *arg) {
  if (r->cb != NULL)
    return RDZV_EINVAL;
  uv_timer_stop(&r->timer);
  r->next_rr = *rr;
  lu_strlcpy(r->next_host, rr->host ? rr->host : "?", sizeof(r->next_host));
  r->cb = cb;
  r->cb_arg = arg;
  r->have_round = 0;
  atomic_store(&r->cancel, 0);
  if (r->busy)
    r->agree_pending = 1; /* after the commit in flight */
  else
    queue(r, 0);
  return 0;
}

void resume_cancel(resume_t *r) {
  if (r && r->cb)
    atomic_store(&r->cancel, 1);
}

void resume_commit_start(resume_t *r, const resume_round_t *rr) {
  r->commit_rr = *rr;
  r->commit_on = 1;
  r->commit_ran = 1;
  uv_timer_start(&r->timer, commit_cb, COMMIT_EVERY_MS, COMMIT_EVERY_MS);
}

void resume_commit_stop(resume_t *r) {
  uv_timer_stop(&r->timer);
  if (!r->commit_on)
    return;
  r->commit_on = 0;
  if (r->busy)
    r->commit_pending = 1;
  else
    queue(r, 1);
}

void resume_commit_final(resume_t *r, void (*done)(void *), void *arg) {
  /* a commit queued or running (a restart's stop asked for it) ends
   * first too: the agent must not go before it */
  if (!r->commit_on && !r->commit_pending && !(r->busy && r->committing)) {
    done(arg);
    return;
  }
  r->final_cb = done; /* before the commit is queued: it is the last */
  r->final_arg = arg;
  resume_commit_stop(r);
}

void resume_commit_stopped(resume_t *r, void (*done)(void *), void *arg) {
  uv_timer_stop(&r->timer);
  r->commit_on = 0;
  if (!r->commit_ran) {
    done(arg);
    return;
  }
  r->final_cb = done; /* before the commit is queued: it is the last */
  r->final_arg = arg;
  if (r->busy)
    r->commit_pending = 1;
  else
    queue(r, 1);
}

void resume_commit_forget(resume_t *r) {
  r->final_cb = NULL;
  r->final_arg = NULL;
  r->commit_pending = 0;
}

void resume_round(const resume_t *r, int64_t *step, int64_t *verified) {
  *step = *verified = -1;
  if (r->have_round && r->step >= 0) {
    *step = r->step;
    /* This node verified (or trusted) its shards of the step just now: the
     * workers' ckpt_load need not hash them again. */
    if (r->verified == r->step)
      *verified = r->step;
  }
}

void resume_on_commit(resume_t *r, void (*cb)(void *arg, int64_t step),
                      void *arg) {
  r->commit_cb = cb;
  r->commit_arg = arg;
  r->latest = r->latest_told = -1;
}
