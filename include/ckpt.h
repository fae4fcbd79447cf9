/* ckpt.h - launch's checkpoint library (launch_ckpt).
 *
 * Three users:
 *  - a C trainer saves its rank's state with ckpt_save()/ckpt_save_async()
 *    and loads it back with ckpt_resume_step() + ckpt_load();
 *  - the launch agent commits for trainers in any language
 *    (ckpt_agent_scan_commit), picks the step every node can resume from
 *    (ckpt_scan, ckpt_agree) and rolls the directory back to it
 *    (ckpt_rollback);
 *  - `launch ckpt ls|verify` reads launch's own layout and those of
 *    Megatron-LM, DeepSpeed, Hugging Face Trainer and PyTorch DCP.
 *
 * The on-disk layout, the manifest, the completion file and the commit
 * protocol are specified in docs/checkpoints.md.
 *
 * Errors: 0 (or a documented non-negative value) on success, a negative
 * code on failure: -errno, an RDZV_E* code (rdzv.h) or a CKPT_E* code
 * below. ckpt_strerror() describes any of them.
 *
 * Threads: a ckpt_t is used by one thread at a time; its background save
 * runs on a thread of its own (see ckpt_save_async). The other functions
 * keep no state between calls and may run on any thread.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "rdzv.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CKPT_EXTERN __attribute__((visibility("default")))
#else
#define CKPT_EXTERN
#endif

/* Our codes, from -1200 down (rdzv.h owns -1000..-1199). */
#define CKPT_ERRNO_MAP(XX)                                                     \
  XX(ECORRUPT, -1200, "checkpoint file does not match its manifest (size or " \
                      "SHA-256)")                                              \
  XX(EINCOMPLETE, -1201, "checkpoint step is incomplete (a shard or its "     \
                         "manifest is missing)")                               \
  XX(ENOCKPT, -1202, "no complete checkpoint step")                            \
  XX(EWORLD, -1203, "the checkpoint was written by a different number of "    \
                    "ranks and is not declared replicated")                    \
  XX(EFORMAT, -1204, "checkpoint metadata does not parse")                     \
  XX(ELAYOUT, -1205, "checkpoint layout not recognised: pass --ckpt-layout")  \
  XX(ESIZE, -1206, "buffers do not add up to the shard's size")

typedef enum {
#define CKPT_XX_ENUM(name, val, msg) CKPT_##name = (val),
  CKPT_ERRNO_MAP(CKPT_XX_ENUM)
#undef CKPT_XX_ENUM
  CKPT_E_LAST_ = -1300
} ckpt_errno_t;

/* RET a static string for any code: ours, rdzv's or -errno. */
CKPT_EXTERN const char *ckpt_strerror(int err);

/* ---- layouts -------------------------------------------------------------- */

typedef enum {
  CKPT_LAYOUT_AUTO = 0,  /* detect from the directory's contents */
  CKPT_LAYOUT_LAUNCH,    /* step-N/ rank-R.bin + manifest.json, latest */
  CKPT_LAYOUT_MEGATRON,  /* latest_checkpointed_iteration.txt, iter_NNNNNNN/ */
  CKPT_LAYOUT_DEEPSPEED, /* latest, global_stepN/ */
  CKPT_LAYOUT_HF,        /* checkpoint-N/ with trainer_state.json */
  CKPT_LAYOUT_DCP        /* .metadata + __R_I.distcp (the dir or its subdirs) */
} ckpt_layout_t;

/* "auto", "launch", "megatron", "deepspeed", "hf", "dcp". */
CKPT_EXTERN const char *ckpt_layout_name(ckpt_layout_t l);
/* RET 0 or RDZV_EINVAL. */
CKPT_EXTERN int ckpt_layout_parse(const char *s, ckpt_layout_t *out);

/* ---- scanning and verifying a checkpoint directory ---------------------------- */

typedef enum {
  CKPT_STEP_COMPLETE = 0, /* every promised file is there and checks out */
  CKPT_STEP_INCOMPLETE,   /* a file is missing or empty, or no manifest */
  CKPT_STEP_CORRUPT,      /* a file's size or SHA-256 differs, or metadata
                             does not parse */
  CKPT_STEP_UNCHECKED     /* not looked at (CKPT_SCAN_NEWEST_COMPLETE) */
} ckpt_state_t;

#define CKPT_NAME_MAX 256
#define CKPT_PROBLEM_MAX 512

typedef struct ckpt_step_s {
  int64_t step;              /* -1 when the layout names none */
  char name[CKPT_NAME_MAX];  /* directory relative to the root; "." = root */
  ckpt_state_t state;
  char problem[CKPT_PROBLEM_MAX]; /* first bad file and why; "" if none */
  int world_size;            /* ranks (or shards) that wrote it; 0 unknown */
  int replicated;            /* launch layout: declared replicated; DCP:
                                1, reshards on load; Megatron's legacy
                                format: CKPT_REPL_MULTIPLE */
  uint32_t files;            /* files checked */
  uint64_t bytes;            /* their total size */
  int is_latest;             /* named by the layout's latest pointer */
  /* Launch layout: world_size bits, bit r set when rank r's shard is here
   * and checks out (what node-local agreement needs). NULL otherwise. */
  unsigned char *have;
} ckpt_step_t;

typedef struct ckpt_scan_s {
  ckpt_layout_t layout;     /* the one scanned (detected when AUTO) */
  ckpt_step_t *steps;       /* newest first */
  size_t nsteps;
  int latest;               /* index of the step the latest pointer names, -1 */
  char latest_name[CKPT_NAME_MAX]; /* what the pointer says, "" if none */
  char latest_problem[CKPT_PROBLEM_MAX]; /* pointer unreadable, dangling, or
                                            naming an incomplete step */
  int resume;               /* index of the newest complete step with a
                               number (what the agent resumes), -1 none */
} ckpt_scan_t;

/* Hash every launch shard with SHA-256 (else: sizes only). */
#define CKPT_SCAN_SHA 1u
/* Check steps newest first and stop at the first complete one; older
 * steps are listed as UNCHECKED. */
#define CKPT_SCAN_NEWEST_COMPLETE 2u

typedef struct ckpt_scan_options_s {
  size_t size;          /* sizeof(ckpt_scan_options_t) */
  unsigned version;     /* 1 */
  ckpt_layout_t layout; /* AUTO detects */
  unsigned flags;       /* CKPT_SCAN_* */
  /* Launch layout on node-local storage: the ranks this node must hold
   * for a step to count as complete here. NULL: every rank. */
  const int *ranks;
  size_t nranks;
  int threads;          /* hashing threads; 0: one per CPU, at most 8 */
} ckpt_scan_options_t;

#define CKPT_SCAN_OPTIONS_INIT                                                 \
  { sizeof(ckpt_scan_options_t), 1, CKPT_LAYOUT_AUTO, 0, NULL, 0, 0 }

/* List the steps of dir and check each one as its layout allows
 * (docs/checkpoints.md, "What verify checks").
 * OUT *out: free with ckpt_scan_free(). err: a one-line reason on failure.
 * RET 0 (even when no step is complete: see (*out)->resume), -ENOENT or
 * -ENOTDIR (dir), CKPT_ELAYOUT (AUTO found nothing or several layouts),
 * RDZV_ENOMEM. */
CKPT_EXTERN int ckpt_scan(const char *dir, const ckpt_scan_options_t *opt,
                          ckpt_scan_t **out, char *err, size_t errlen);
CKPT_EXTERN void ckpt_scan_free(ckpt_scan_t *s);

/* Launch layout: verify one step with SHA-256, for the ranks given (NULL:
 * all). problem: the first bad file. RET 0 complete, CKPT_EINCOMPLETE,
 * CKPT_ECORRUPT, CKPT_EFORMAT, -errno. */
CKPT_EXTERN int ckpt_verify_step(const char *dir, int64_t step,
                                 const int *ranks, size_t nranks,
                                 char *problem, size_t n);

/* ---- what an agent already knows to be intact ----------------------------------- */

/* A long-lived process (the launch agent) remembers, per shard, the
 * SHA-256 it saw verified and the file's identity from stat(2) (device,
 * inode, size, mtime and ctime in ns). A later verification trusts a
 * shard whose identity and manifest SHA are unchanged instead of reading
 * it again: any write to the file moves its ctime, which no user can set
 * back. Thread-safe. A new process starts with an empty cache. */
typedef struct ckpt_trust_s ckpt_trust_t;

/* RET 0 or RDZV_ENOMEM. */
CKPT_EXTERN int ckpt_trust_new(ckpt_trust_t **out);
/* NULL is a no-op. */
CKPT_EXTERN void ckpt_trust_free(ckpt_trust_t *t);
/* Remember the shards of the given ranks (NULL: all) of a final step that
 * this process saw committed: their SHA from the manifest, for the shards
 * last changed (ctime) strictly before the manifest was written, so that
 * no write after the commit goes unseen. Others are left out (hashed at
 * the next verification; the finaliser writes the manifest a tick of the
 * file system's clock after the newest shard, so a commit's shards all
 * qualify). OUT *learnt (may be NULL): shards remembered.
 * RET 0, CKPT_EINCOMPLETE (no manifest), CKPT_EFORMAT, -errno. */
CKPT_EXTERN int ckpt_trust_learn(ckpt_trust_t *t, const char *dir,
                                 int64_t step, const int *ranks,
                                 size_t nranks, int *learnt);

/* Launch layout: the step dir's `latest` names. RET 0, -ENOENT (none),
 * CKPT_EFORMAT, -errno. */
CKPT_EXTERN int ckpt_latest_step(const char *dir, int64_t *step);

/* What a verification did. */
typedef struct ckpt_verify_stats_s {
  uint32_t hashed;         /* shards read and hashed */
  uint32_t trusted;        /* shards trusted (identity unchanged) */
  uint64_t hashed_bytes, trusted_bytes;
} ckpt_verify_stats_t;

/* ckpt_verify_step with a cache (NULL: hash every shard): shards the
 * cache vouches for are not read; the ones that verify are remembered.
 * OUT *stats (may be NULL). RET as ckpt_verify_step. */
CKPT_EXTERN int ckpt_verify_step_trusted(const char *dir, int64_t step,
                                         const int *ranks, size_t nranks,
                                         ckpt_trust_t *trust,
                                         ckpt_verify_stats_t *stats,
                                         char *problem, size_t n);

/* ---- agreement between nodes -------------------------------------------------- */

/* One step as one node sees it. */
/* ckpt_have_t.replicated (and ckpt_step_t's): loads at any world size
 * that is a multiple of world_size (Megatron: the tensor x pipeline x
 * expert grid its args declare; data parallelism may change). */
#define CKPT_REPL_MULTIPLE 2

typedef struct ckpt_have_s {
  int64_t step;
  int world_size;             /* ranks that wrote it */
  int replicated;             /* 0, 1 (any world size), CKPT_REPL_MULTIPLE */
  /* world_size bits: the shards here that check out; NULL = all of them
   * (other layouts: the step is complete here). */
  const unsigned char *ranks;
} ckpt_have_t;

typedef struct ckpt_node_view_s {
  const char *name;           /* for messages: host name */
  const ckpt_have_t *steps;
  size_t nsteps;
  int first_rank, nranks;     /* the global ranks it runs in the new round */
} ckpt_node_view_t;

typedef struct ckpt_agreement_s {
  int64_t step;               /* -1: start fresh */
  int elastic;                /* the world size changes (replicated state) */
  char why[CKPT_PROBLEM_MAX]; /* the newest step passed over and why, or the
                                 refusal */
} ckpt_agreement_t;

/* The newest step from which every rank of the new round (world_size ranks,
 * nodes[i] running first_rank..first_rank+nranks-1) can load its state:
 * a node needs the shard of each rank it runs, or, for a replicated step,
 * any one shard. A pure function.
 * RET 0 (out->step may be -1), CKPT_EWORLD when the newest step every node
 * can read was written by a different world size and is not replicated
 * (out->why says what to do), RDZV_EINVAL. */
CKPT_EXTERN int ckpt_agree(const ckpt_node_view_t *nodes, size_t n,
                           int world_size, ckpt_agreement_t *out);

/* A node's view as text, one line per step: "STEP WORLD REPLICATED RANKS"
 * with RANKS "*" (all) or ranges "0-3,8" (docs/checkpoints.md). Only
 * steps with at least one good shard are written.
 * OUT *text: malloc'd, NUL-terminated. RET 0 or RDZV_ENOMEM. */
CKPT_EXTERN int ckpt_view_encode(const ckpt_scan_t *s, char **text);
/* Parse it back. OUT *steps (free with ckpt_view_free), *n.
 * RET 0, CKPT_EFORMAT, RDZV_ENOMEM. */
CKPT_EXTERN int ckpt_view_decode(const char *text, size_t len,
                                 ckpt_have_t **steps, size_t *n);
CKPT_EXTERN void ckpt_view_free(ckpt_have_t *steps, size_t n);

/* Before the workers of a new round start (every node, then a barrier):
 * steps newer than resume_step are renamed abandoned-step-N-T (kept until
 * pruned, never mixed with the shards the resumed run writes again) and
 * `latest` names resume_step (removed when it is -1). A directory that
 * refuses writes (read-only, EACCES, EPERM) is left as it is: RET 0 with a
 * warning in err (empty otherwise). RET 0 or -errno. */
CKPT_EXTERN int ckpt_rollback(const char *dir, int64_t resume_step,
                              char *err, size_t errlen);

/* ---- the agent commits for trainers in any language ------------------------------ */

typedef struct ckpt_commit_options_s {
  size_t size;           /* sizeof(ckpt_commit_options_t) */
  unsigned version;      /* 1 */
  const char *dir;
  const char *job;       /* written into the manifest */
  int world_size;
  /* The ranks whose completion files this agent reads (its local ranks on
   * node-local storage). NULL: all world_size ranks. */
  const int *ranks;
  size_t nranks;
  union {
    int64_t round;       /* the round (LAUNCH_ROUND; scopes the store keys) */
    int64_t generation;  /* its old name, kept for source compatibility */
  };
  int keep;              /* finalised steps kept; 0: 3; -1: all */
  /* With a client, the records go through the store and every agent
   * finalises its own directory once all world_size ranks committed.
   * NULL: all completion files must be readable here. */
  rdzv_client_t *client;
  int timeout_ms;        /* bound of each store call; 0: 30 s */
} ckpt_commit_options_t;

#define CKPT_COMMIT_OPTIONS_INIT                                               \
  { sizeof(ckpt_commit_options_t), 1, NULL, NULL, 0, NULL, 0, {0}, 0, NULL, 0 }

/* Look for steps without a manifest whose completion files
 * (step-N/rank-R.done, docs/checkpoints.md) are there for this agent's
 * ranks; commit them; finalise the steps every rank committed (manifest,
 * latest, pruning). Call it periodically and once after the workers exit.
 * Completion files that do not parse or disagree with their shard are
 * skipped with the reason in err (the call still returns 0).
 * OUT *finalised (may be NULL): the newest step finalised by this call, -1.
 * RET 0 or a negative code (store or file system). */
CKPT_EXTERN int ckpt_agent_scan_commit(const ckpt_commit_options_t *o,
                                       int64_t *finalised, char *err,
                                       size_t errlen);

/* ---- the trainer's side -------------------------------------------------------- */

typedef struct ckpt_s ckpt_t;

/* level: 0 error, 1 warning, 2 info. */
typedef void (*ckpt_log_cb)(void *data, int level, const char *msg);

typedef struct ckpt_options_s {
  size_t size;           /* sizeof(ckpt_options_t) */
  unsigned version;      /* 1 */
  const char *dir;       /* NULL: $LAUNCH_CKPT_DIR */
  const char *job;       /* NULL: $LAUNCH_RDZV_ID, $TORCHELASTIC_RUN_ID,
                            "default" */
  int rank;              /* -1: $RANK (0 when unset) */
  int world_size;        /* -1: $WORLD_SIZE (1 when unset) */
  int local_rank;        /* -1: $LOCAL_RANK (0 when unset) */
  union {
    int64_t round;       /* -1: $LAUNCH_ROUND, $TORCHELASTIC_RESTART_COUNT,
                            0 */
    int64_t generation;  /* its old name, kept for source compatibility */
  };
  int keep;              /* finalised steps kept; 0: $LAUNCH_CKPT_KEEP or 3;
                            -1: all */
  int replicated;        /* every rank's state is the same (data parallel):
                            a job with another world size may resume */
  /* How a save is committed (docs/checkpoints.md):
   *  - client != NULL: through the store; local rank 0 of each node
   *    finalises its directory once every rank committed. While a
   *    background save runs, the ckpt_t uses this connection from its own
   *    thread: give it one the trainer does not use meanwhile;
   *  - client == NULL, world_size 1: finalised at once;
   *  - client == NULL, world_size > 1: a completion file is written and
   *    the launch agent commits. */
  rdzv_client_t *client;
  int commit_timeout_ms; /* local rank 0's wait for every rank; 0: 30 min */
  ckpt_log_cb log;       /* NULL: warnings and errors to stderr */
  void *log_data;
} ckpt_options_t;

#define CKPT_OPTIONS_INIT                                                      \
  { sizeof(ckpt_options_t), 1, NULL, NULL, -1, -1, -1, {-1}, 0, 0, NULL, 0,  \
    NULL, NULL }

/* IN opt: copied. OUT *out: close with ckpt_close().
 * RET 0, RDZV_EINVAL (no directory, rank out of range), -errno (the
 * directory cannot be created), RDZV_ENOMEM. */
CKPT_EXTERN int ckpt_open(const ckpt_options_t *opt, ckpt_t **out);
/* Waits for a background save, then frees. NULL is a no-op. */
CKPT_EXTERN void ckpt_close(ckpt_t *c);
/* The checkpoint directory in use. */
CKPT_EXTERN const char *ckpt_dir(const ckpt_t *c);

/* Save this rank's state for step: the buffers are written in order into
 * step-N/rank-R.bin (temp file, fsync, rename, directory fsync, SHA-256
 * computed while writing), then committed. Returns once this rank's shard
 * is durable and committed, and on local rank 0 once the step is final.
 * RET 0 or a negative code; the step is then not committed. */
CKPT_EXTERN int ckpt_save(ckpt_t *c, int64_t step, const struct iovec *iov,
                          int iovcnt);

/* The same on the ckpt_t's own thread: returns at once. The buffers must
 * stay unchanged until ckpt_poll() or ckpt_wait() says the save is done
 * (copy device memory to host buffers first; that copy is the only stall).
 * A save still running is waited for first.
 * RET 0 (started), or the previous save's error (nothing started; call
 * again). */
CKPT_EXTERN int ckpt_save_async(ckpt_t *c, int64_t step,
                                const struct iovec *iov, int iovcnt);
/* RET 1 while a save runs, 0 when none runs and the last one succeeded,
 * or the last one's error (reported once). */
CKPT_EXTERN int ckpt_poll(ckpt_t *c);
/* Wait up to timeout_ms (-1 forever). RET as ckpt_poll but never 1;
 * -ETIMEDOUT when it is still running. */
CKPT_EXTERN int ckpt_wait(ckpt_t *c, int timeout_ms);

/* The step to resume from: $LAUNCH_RESUME_STEP when launch set it (an
 * empty value: fresh start), else the newest step of the directory whose
 * shards all verify (SHA-256). OUT *step: -1 for a fresh start.
 * RET 0, CKPT_EWORLD (the step needs the same world size), CKPT_EFORMAT
 * ($LAUNCH_RESUME_STEP is not a number), -errno. */
CKPT_EXTERN int ckpt_resume_step(ckpt_t *c, int64_t *step);
/* OUT *size: the byte size of the shard ckpt_load() reads for step.
 * RET 0, CKPT_EINCOMPLETE, CKPT_EFORMAT, CKPT_EWORLD, -errno. */
CKPT_EXTERN int ckpt_shard_size(ckpt_t *c, int64_t step, uint64_t *size);
/* Read this rank's shard of step (a replicated step: this rank's, else the
 * first one present) into the buffers, whose sizes must add up to the
 * shard's, verifying its SHA-256 against the manifest while reading;
 * not hashed when $LAUNCH_CKPT_VERIFIED names this step (launch's agents
 * verified it just before starting the workers), only its size checked.
 * RET 0, CKPT_ESIZE, CKPT_ECORRUPT, CKPT_EINCOMPLETE, CKPT_EWORLD, -errno. */
CKPT_EXTERN int ckpt_load(ckpt_t *c, int64_t step, const struct iovec *iov,
                          int iovcnt);

/* 1 when $LAUNCH_CKPT_VERIFIED names step: launch's agents verified it
 * (SHA-256, or an identity unchanged since they did) just before starting
 * the workers, and ckpt_load() reads it without hashing; else 0. */
CKPT_EXTERN int ckpt_verified_by_launch(int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
