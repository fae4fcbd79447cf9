/* resume.h - the agent's side of checkpoints (docs/checkpoints.md,
 * "Integration with the agent and the runtime"):
 *
 *  - at every (re)start, before the workers are spawned, the nodes agree on
 *    the step to resume from (resume_agree): each scans --ckpt-dir, puts
 *    its view under launch/ckpt/g<round>/view/<node> in the job's store,
 *    reads every node's view and runs ckpt_agree (a pure function, so every
 *    node gets the same answer), verifies the candidate's SHA-256 for its
 *    own ranks, falls back together when a node finds a bad file, rolls the
 *    directory back to the agreed step, and waits until every node did;
 *  - while the workers run, it commits the steps of trainers that write
 *    completion files (resume_commit, every 2 s and when they exit).
 *
 * The blocking work (file system, store) runs on libuv's thread pool on a
 * store connection of its own; one piece of work at a time. */
#ifndef RESUME_H
#define RESUME_H

#include <stdint.h>
#include <uv.h>

#include "ckpt.h"
#include "config.h"
#include "env.h"
#include "lu.h"

typedef struct resume_s resume_t;

/* What the agent knows of the round. */
typedef struct resume_round_s {
  int64_t round;
  int node_rank, nnodes, world_size, base_rank, nproc;
  const char *host;
} resume_round_t;

/* The agreement's outcome. rc 0: step (-1 fresh start), elastic; rc
 * CKPT_EWORLD or CKPT_ELAYOUT: the job cannot resume as configured (why);
 * RDZV_ECANCELED: resume_cancel was called; other codes: this node failed
 * (why). */
typedef struct resume_result_s {
  int rc;
  int64_t step;
  int elastic;
  int layout;    /* ckpt_layout_t this node scanned (auto: what it found) */
  /* step when this node verified (or trusted) the shard of each of its
   * ranks, -1 otherwise: exported as LAUNCH_CKPT_VERIFIED */
  int64_t verified;
  char why[1024];
} resume_result_t;

typedef void (*resume_cb)(void *arg, const resume_result_t *r);

/* IN o, log, token: must outlive r. endpoint: "host:port" of the server. */
int resume_new(uv_loop_t *loop, const cfg_t *o, lu_log_t *log,
               const char *endpoint, const char *token, size_t token_len,
               resume_t **out);
/* Stop the timer, wait for the work in flight (the loop must run), free. */
void resume_free(resume_t *r);

/* Start the agreement of round rr; cb runs on the loop once it is done.
 * RET 0 or RDZV_EBUSY (one agreement at a time). */
int resume_agree(resume_t *r, const resume_round_t *rr, resume_cb cb,
                 void *arg);
/* Make the agreement in flight end soon with RDZV_ECANCELED (a restart or
 * the end of the job arrived meanwhile). */
void resume_cancel(resume_t *r);

/* The workers of round rr run: commit completion files every 2 s. */
void resume_commit_start(resume_t *r, const resume_round_t *rr);
/* They exited: one last commit, no more timer. */
void resume_commit_stop(resume_t *r);
/* They all exited 0, or the agent is going: the last commit (and any
 * commit queued or running), then done(arg) on the loop (at once when no
 * commit runs), so that the job ends only after it (the server closes
 * every connection when the job ends). That last commit finalises steps
 * whose every rank's completion file is here without the store when the
 * store fails. */
void resume_commit_final(resume_t *r, void (*done)(void *), void *arg);
/* A restart stopped the workers: one more commit of the round they ran in
 * (what they saved on their way out, on SIGTERM or an error path), after
 * any commit queued or running, then done(arg) on the loop; without it the
 * next round's agreement would roll such a step back and prune it. */
void resume_commit_stopped(resume_t *r, void (*done)(void *), void *arg);
/* The host is lost while that commit runs: its done is never called, and
 * a commit still queued is dropped; the one running ends on its own. */
void resume_commit_forget(resume_t *r);

/* The agreed step for the workers' contract (env/contract.h): OUT *step
 * (LAUNCH_RESUME_STEP; -1 on a fresh start), *verified (the same step when
 * this node verified its shards just now, else -1). */
void resume_round(const resume_t *r, int64_t *step, int64_t *verified);

/* Tell cb (on the loop) each time a commit finds `latest` naming a newer
 * step than the agreed one and those told before (the launch layout; a
 * trainer that commits itself is seen within the 2 s of the commit
 * timer; two steps inside one period are told as the newer one). */
void resume_on_commit(resume_t *r, void (*cb)(void *arg, int64_t step),
                      void *arg);

/* A node's view as the store holds it: a VIEW map (checkpoint/ck_store.h,
 * ck_view_unpack). Comes from another node: checked. */
typedef struct resume_view_s {
  char host[256];
  int first, nranks;
  ckpt_have_t *steps;
  size_t nsteps;
  size_t nalloc; /* entries to free: dropped ones sit past nsteps */
} resume_view_t;

/* OUT *v (free with resume_view_free, also after a failure).
 * RET 0, CKPT_EFORMAT (err says why), RDZV_ENOMEM. */
int resume_view_parse(const char *s, size_t len, resume_view_t *v, char *err,
                      size_t errlen);
void resume_view_free(resume_view_t *v);

/* The refusal for a step of another world size: agreed is the
 * agreement's why ("step S was written by W ranks"), written out for
 * layout (ckpt_layout_t) and this job's world_size into why (resume.c;
 * fuzz_store_vals drives it with what other nodes' views made of it). */
void resume__foreign_world(int layout, int world_size, const char *agreed,
                           char *why, size_t n);

#endif /* RESUME_H */
