/* rdzv_load_msg.h - the agent <-> server messages the load generator
 * (rdzv_load.c) speaks, and only them, in one place: when the messages
 * move into the project's codec (rendezvous/msg.h), this file is the one
 * to change. The shapes are those of launcher/agent.c and aclient.c and of
 * rendezvous/rounds.c today (docs/protocol.md). Prefix lm_. */
#ifndef RDZV_LOAD_MSG_H
#define RDZV_LOAD_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* What a simulated agent says in its JOIN: as `launch --nnodes N
 * --nproc-per-node 1` would. */
typedef struct lm_join_s {
  const char *host;    /* "sim00042" */
  const char *addr;    /* "127.0.0.1" */
  int nnodes;          /* min = max = nnodes: the round closes at the last */
  int64_t heartbeat_ms;
  int64_t join_timeout_ms;
} lm_join_t;

/* Each packs one complete frame (length included) into e.
 * RET 0 or RDZV_ENOMEM. */
int lm_hello(proto_enc_t *e, uint64_t id, const char *job,
             const uint8_t cnonce[32]);
int lm_join(proto_enc_t *e, uint64_t id, const lm_join_t *j);
/* quiet: the server sends no reply (ROUNDS_HEARTBEAT_QUIET) */
int lm_heartbeat(proto_enc_t *e, uint64_t id, int quiet);
int lm_report_ok(proto_enc_t *e, uint64_t id, int64_t round);
int lm_leave(proto_enc_t *e, uint64_t id, const char *why);

/* What came back, as far as the generator cares. */
typedef enum {
  LM_OTHER = 0,   /* a reply to a heartbeat, report or leave; a push it ignores */
  LM_CHALLENGE,   /* push: send HELLO now */
  LM_HELLO_OK,    /* reply to HELLO */
  LM_JOINED,      /* reply to JOIN: the round is formed */
  LM_SHUTDOWN,    /* push: the job ended (ok or not) */
  LM_ERROR        /* an error reply (text in msg) */
} lm_kind_t;

typedef struct lm_in_s {
  lm_kind_t kind;
  uint64_t id;          /* of a reply */
  int64_t round;        /* LM_JOINED */
  int64_t node_rank;    /* LM_JOINED */
  int ok;               /* LM_SHUTDOWN: the job succeeded */
  char msg[160];        /* LM_ERROR */
} lm_in_t;

/* Classify one decoded frame. hello_id / join_id: the ids of this
 * connection's HELLO and JOIN requests. */
void lm_classify(const proto_msg_t *m, uint64_t hello_id, uint64_t join_id,
                 lm_in_t *out);

#endif
