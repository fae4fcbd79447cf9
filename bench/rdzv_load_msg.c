/* rdzv_load_msg.c - see rdzv_load_msg.h. */
#include <stdio.h>
#include <string.h>

#include "rdv.h"
#include "rdzv_load_msg.h"

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

static void kv_i(msgpack_packer *pk, const char *k, int64_t v) {
  proto_pack_str(pk, k);
  msgpack_pack_int64(pk, v);
}

int lm_join(proto_enc_t *e, uint64_t id, const lm_join_t *j) {
  msgpack_packer *pk = &e->pk;
  begin(e, id, PROTO_OP_JOIN, 1);
  msgpack_pack_map(pk, 14);
  proto_pack_str(pk, RDV_K_HOST);
  proto_pack_str(pk, j->host);
  proto_pack_str(pk, RDV_K_ADDR);
  proto_pack_str(pk, j->addr);
  kv_i(pk, RDV_K_NPROC, 1);
  kv_i(pk, RDV_K_RANK, -1);
  kv_i(pk, RDV_K_MIN, j->nnodes);
  kv_i(pk, RDV_K_MAX, j->nnodes);
  kv_i(pk, RDV_K_LAST_CALL, 30000);
  kv_i(pk, RDV_K_JOIN_TIMEOUT, j->join_timeout_ms);
  kv_i(pk, RDV_K_HEARTBEAT, j->heartbeat_ms);
  kv_i(pk, RDV_K_MAX_RESTARTS, 0);
  kv_i(pk, RDV_K_STATIC, 0);
  kv_i(pk, RDV_K_ALLOW_MISMATCH, 0);
  kv_i(pk, RDV_K_MASTER_PORT, 0);
  proto_pack_str(pk, RDV_K_EXPECTED);
  msgpack_pack_array(pk, 0);
  return proto_enc_end(e);
}

int lm_heartbeat(proto_enc_t *e, uint64_t id) {
  begin(e, id, PROTO_OP_HEARTBEAT, 0);
  return proto_enc_end(e);
}

int lm_report_ok(proto_enc_t *e, uint64_t id, int64_t round) {
  begin(e, id, PROTO_OP_REPORT, 1);
  msgpack_pack_map(&e->pk, 2);
  kv_i(&e->pk, "gen", round);
  proto_pack_str(&e->pk, "ok");
  msgpack_pack_true(&e->pk);
  return proto_enc_end(e);
}

int lm_leave(proto_enc_t *e, uint64_t id, const char *why) {
  begin(e, id, PROTO_OP_LEAVE, 1);
  proto_pack_str(&e->pk, why);
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
      out->kind = LM_SHUTDOWN;
      out->ok = m->nargs > 0 && m->args[0].type == MSGPACK_OBJECT_BOOLEAN &&
                m->args[0].via.boolean;
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
    out->kind = LM_JOINED;
    out->round = proto_map_i64(&m->args[0], "round", -1);
    out->node_rank = proto_map_i64(&m->args[0], "node_rank", -1);
  }
}
