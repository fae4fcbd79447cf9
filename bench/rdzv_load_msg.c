/* rdzv_load_msg.c - see rdzv_load_msg.h. */
#include <stdio.h>
#include <string.h>

#include "lu.h"
#include "msg.h"
#include "rdzv_load_msg.h"
#include "rounds.h"

static void begin(proto_enc_t *e, uint64_t id, int op, uint32_t nargs) {
  proto_enc_begin(e, 3 + nargs);
  msgpack_pack_int(&e->pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e->pk, id);
  msgpack_pack_int(&e->pk, op);
}

int lm_hello(proto_enc_t *e, uint64_t id, const char *job,
             const uint8_t cnonce[32]) {
  /* [version, role, job, mac (nil: no token), client nonce] */
  begin(e, id, PROTO_OP_HELLO, 5);
  msgpack_pack_uint32(&e->pk, RDZV_PROTOCOL_VERSION);
  proto_pack_str(&e->pk, "agent");
  proto_pack_str(&e->pk, job);
  msgpack_pack_nil(&e->pk);
  proto_pack_bytes(&e->pk, cnonce, 32);
  return proto_enc_end(e);
}

int lm_join(proto_enc_t *e, uint64_t id, const lm_join_t *j) {
  msg_join_t m;
  msg_join_init(&m);
  lu_strlcpy(m.host, j->host, sizeof(m.host));
  lu_strlcpy(m.addr, j->addr, sizeof(m.addr));
  m.min = m.max = j->nnodes;
  m.join_timeout_ms = j->join_timeout_ms;
  m.heartbeat_ms = j->heartbeat_ms;
  begin(e, id, PROTO_OP_JOIN, 1);
  msg_join_pack(&e->pk, &m);
  return proto_enc_end(e);
}

int lm_heartbeat(proto_enc_t *e, uint64_t id, int quiet) {
  begin(e, id, PROTO_OP_HEARTBEAT, quiet ? 1 : 0);
  if (quiet)
    msgpack_pack_uint8(&e->pk, ROUNDS_HEARTBEAT_QUIET);
  return proto_enc_end(e);
}

int lm_report_ok(proto_enc_t *e, uint64_t id, int64_t round) {
  msg_report_t r;
  msg_report_init(&r);
  r.round = round;
  r.ok = 1;
  begin(e, id, PROTO_OP_REPORT, 1);
  msg_report_pack(&e->pk, &r);
  return proto_enc_end(e);
}

int lm_leave(proto_enc_t *e, uint64_t id, const char *why) {
  msg_leave_t l;
  lu_strlcpy(l.reason, why, sizeof(l.reason));
  begin(e, id, PROTO_OP_LEAVE, 1);
  msg_leave_pack(&e->pk, &l);
  return proto_enc_end(e);
}

void lm_classify(const proto_msg_t *m, uint64_t hello_id, uint64_t join_id,
                 lm_in_t *out) {
  memset(out, 0, sizeof(*out));
  out->id = m->id;
  if (m->kind == PROTO_PUSH) {
    if (m->op == PROTO_EV_CHALLENGE)
      out->kind = LM_CHALLENGE;
    else if (m->op == PROTO_EV_SHUTDOWN) {
      msg_shutdown_t sd;
      out->kind = LM_SHUTDOWN;
      if (m->nargs > 0 && msg_shutdown_unpack(&m->args[0], &sd, NULL, 0) == 0) {
        out->ok = sd.ok;
        msg_shutdown_free(&sd);
      }
    }
    return;
  }
  if (m->kind != PROTO_REPLY)
    return;
  if (m->op != 0) {
    const char *p;
    size_t n;
    out->kind = LM_ERROR;
    if (proto_arg_bytes(m, 0, &p, &n) == 0)
      snprintf(out->msg, sizeof(out->msg), "%.*s", (int)n, p);
    else
      snprintf(out->msg, sizeof(out->msg), "status %lld", (long long)m->op);
    return;
  }
  if (m->id == hello_id) {
    out->kind = LM_HELLO_OK;
  } else if (m->id == join_id && m->nargs > 0) {
    msg_round_t r;
    out->kind = LM_JOINED;
    out->round = out->node_rank = -1;
    if (msg_round_unpack(&m->args[0], &r, NULL, 0) == 0) {
      out->round = r.round;
      out->node_rank = r.node_rank;
      msg_round_free(&r); /* the successor lists */
    }
  }
}
