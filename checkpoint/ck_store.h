/* ck_store.h - launch's checkpoints in the job's store: every key that the
 * commit (layout_launch.c, ckpt.c) and the resume-step agreement
 * (launcher/resume.c) use, spelled here only, and the agreement's values,
 * packed with the message codec (rendezvous/msg.h: msg_ckpt_view_t,
 * msg_ckpt_verdict_t; docs/checkpoints.md).
 *
 * Keys of round G, in the job's namespace (the "g" is the wire name, kept
 * for agents of earlier versions):
 *   launch/ckpt/gG/sS/rR       rank R's commit record of step S (set once)
 *   launch/ckpt/gG/sS/n        ranks of step S committed so far (add)
 *   launch/ckpt/gG/sS/all      set by the rank that completes the count
 *   launch/ckpt/gG/view/N      node N's view: a VIEW map
 *   launch/ckpt/gG/vI/N        node N's check of the I-th candidate step:
 *                              a VERDICT map
 *   launch/ckpt/gG/rolled      nodes that rolled back (add)
 *   launch/ckpt/gG/rolled_all  set by the last of them
 * They live for one round: no value is read by another release's agent
 * after an upgrade, which restarts the job. */
#ifndef CK_STORE_H
#define CK_STORE_H

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include "ckpt.h"

#define CK_KEY_MAX 128 /* every key below fits */

/* launch/ckpt/gG/sS/LEAF: the commit of step S ("rR", "n", "all"). */
static inline void ck_store_key(char *buf, size_t n, int64_t round,
                                int64_t step, const char *leaf) {
  snprintf(buf, n, "launch/ckpt/g%" PRId64 "/s%" PRId64 "/%s", round, step,
           leaf);
}

/* launch/ckpt/gG/view/N */
static inline void ck_key_view(char *buf, size_t n, int64_t round,
                               int64_t node) {
  snprintf(buf, n, "launch/ckpt/g%" PRId64 "/view/%" PRId64, round, node);
}

/* launch/ckpt/gG/vI/N */
static inline void ck_key_verdict(char *buf, size_t n, int64_t round,
                                  int64_t iter, int64_t node) {
  snprintf(buf, n, "launch/ckpt/g%" PRId64 "/v%" PRId64 "/%" PRId64, round,
           iter, node);
}

/* launch/ckpt/gG/rolled and launch/ckpt/gG/rolled_all */
static inline void ck_key_rolled(char *buf, size_t n, int64_t round, int all) {
  snprintf(buf, n, "launch/ckpt/g%" PRId64 "/%s", round,
           all ? "rolled_all" : "rolled");
}

/* ---- the agreement's values (agree.c) ------------------------------------------ */

/* A node's view as the store holds it: the ranks it runs in the new
 * round, its host name (for messages) and its steps. */
typedef struct ck_view_s {
  char host[256];
  int first, nranks;
  ckpt_have_t *steps; /* free with ckpt_view_free(steps, nsteps) */
  size_t nsteps;
} ck_view_t;

/* This node's view: the steps of s (NULL: none) with at least one good
 * shard, each with its world size, replication and the shards that
 * check out (as ckpt_view_encode chooses them). OUT *buf malloc'd, *len.
 * RET 0 or RDZV_ENOMEM. */
int ck_view_pack(const ckpt_scan_t *s, const char *host, int first,
                 int nranks, char **buf, size_t *len);
/* Another node's view, checked: ranks in [0, 2^24], steps >= 0, world
 * sizes up to CK_MAX_WORLD, bitmaps that fit them, a host name.
 * OUT *v (its steps malloc'd; nothing on failure). RET 0, CKPT_EFORMAT
 * (err says what is wrong), RDZV_ENOMEM. */
int ck_view_unpack(const void *p, size_t n, ck_view_t *v, char *err,
                   size_t errlen);

/* A node's check of the candidate step: problem NULL when it verified.
 * OUT *buf malloc'd, *len. RET 0 or RDZV_ENOMEM. */
int ck_verdict_pack(const char *problem, char **buf, size_t *len);
/* OUT *ok, problem (when !ok; "" when none said). RET 0, CKPT_EFORMAT. */
int ck_verdict_unpack(const void *p, size_t n, int *ok, char *problem,
                      size_t plen);

#endif /* CK_STORE_H */
