/* srv_native.c - the native dialect: framing, HELLO/authentication and
 * the store operations, each a handler in one table. A handler whose reply
 * may be large asks the core for room first (srv__out_room) and returns
 * SRV_LATER to run again once there is. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lu_bigbuf.h"
#include "srv_int.h"

/* ---- argument checks ------------------------------------------------------------- */

/* A limit refused c's request: limit_hit for the server's owner. */
#define LIMIT_HIT(c, lim, val, ...)                                            \
  srv__limit_hit((c)->srv, SRV_LIMIT_##lim, (val),                             \
                 (c)->job ? (c)->job->name : NULL, (c)->peer, __VA_ARGS__)

static int arg_key(conn_t *c, const proto_msg_t *m, uint32_t i, const char **k,
                   size_t *n) {
  if (proto_arg_bytes(m, i, k, n) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "%s: argument %u must be a key",
                   proto_op_name((int)m->op), i + 1);
    return -1;
  }
  if (*n > c->srv->cfg.max_key) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: key of %zu bytes over the "
                   "%u-byte limit", proto_op_name((int)m->op), *n,
                   c->srv->cfg.max_key);
    LIMIT_HIT(c, MAX_KEY, c->srv->cfg.max_key, "%s of a key of %zu bytes",
              proto_op_name((int)m->op), *n);
    return -1;
  }
  return 0;
}

static int check_value(conn_t *c, const proto_msg_t *m, size_t n) {
  if (n > c->srv->cfg.max_value) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: value of %zu bytes over the "
                   "%u-byte limit", proto_op_name((int)m->op), n,
                   c->srv->cfg.max_value);
    LIMIT_HIT(c, MAX_VALUE, c->srv->cfg.max_value, "%s of a value of %zu "
              "bytes", proto_op_name((int)m->op), n);
    return -1;
  }
  return 0;
}

static int arg_value(conn_t *c, const proto_msg_t *m, uint32_t i,
                     const char **v, size_t *n) {
  if (proto_arg_bytes(m, i, v, n) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "%s: argument %u must be bytes",
                   proto_op_name((int)m->op), i + 1);
    return -1;
  }
  return check_value(c, m, *n);
}

static int arg_int(conn_t *c, const proto_msg_t *m, uint32_t i, int64_t *v) {
  if (proto_arg_i64(m, i, v) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "%s: argument %u must be an integer",
                   proto_op_name((int)m->op), i + 1);
    return -1;
  }
  return 0;
}

/* A large request decoded ahead (native_prepare), while it comes. */
enum { PRE_ON, PRE_READY, PRE_OFF };
struct srv_pre_s {
  size_t fo;         /* the frame's offset in c->in (its length first) */
  uint32_t n;        /* its body's bytes */
  int state;         /* PRE_ON: decoding; PRE_READY: m and keys are the
                        frame's; PRE_OFF: not such a request (or a key
                        over a limit): native_frame decodes it */
  proto_keylist_t kl;
  proto_msg_t m;
  store_key_t *keys; /* p: an offset into the body until PRE_READY */
  uint64_t seed;     /* of the hashes */
};

/* Keys of argument i as an array; *keys is from lu_big_alloc (pointers
 * into the frame). */
static int arg_keys(conn_t *c, const proto_msg_t *m, uint32_t i,
                    store_key_t **keys, uint32_t *n) {
  const msgpack_object *items = NULL;
  const uint8_t *list = NULL;
  store_key_t *k;
  srv_pre_t *pre = c->pre;
  if (i == 0 && pre != NULL && m == &pre->m) {
    /* Decoded, checked and hashed before the lock (native_prepare). */
    *keys = pre->keys;
    *n = pre->kl.nk;
    pre->keys = NULL;
    if (pre->seed != store_seed(c->job->store))
      for (uint32_t j = 0; j < *n; j++)
        (*keys)[j].h = 0; /* a store of another seed: hashed again */
    return 0;
  }
  if (i == 0 && m->keys != NULL) {
    list = m->keys; /* proto_decode_keylist: no object per key */
    *n = m->nkeys;
  } else if (proto_arg_array(m, i, &items, n) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "%s: argument %u must be a list of "
                   "keys", proto_op_name((int)m->op), i + 1);
    return -1;
  }
  if (*n > c->srv->cfg.max_keys) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: %u keys over the limit of %u",
                   proto_op_name((int)m->op), *n, c->srv->cfg.max_keys);
    LIMIT_HIT(c, MAX_KEYS, c->srv->cfg.max_keys, "%s of %u keys",
              proto_op_name((int)m->op), *n);
    return -1;
  }
  if ((k = lu_big_alloc((*n ? *n : 1) * sizeof(*k))) == NULL) {
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return -1;
  }
  for (uint32_t j = 0; j < *n; j++) {
    const char *p;
    size_t len;
    if (list != NULL)
      proto_next_bytes(&list, &p, &len);
    if (list == NULL && proto_obj_bytes(&items[j], &p, &len) != 0) {
      lu_big_free(k);
      srv__reply_err(c, m->id, RDZV_EPROTO, "%s: key %u is not bytes",
                     proto_op_name((int)m->op), j + 1);
      return -1;
    }
    if (len > c->srv->cfg.max_key) {
      lu_big_free(k);
      srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: key %u of %zu bytes over "
                     "the %u-byte limit", proto_op_name((int)m->op), j + 1,
                     len, c->srv->cfg.max_key);
      LIMIT_HIT(c, MAX_KEY, c->srv->cfg.max_key, "%s of a key of %zu bytes",
                proto_op_name((int)m->op), len);
      return -1;
    }
    k[j].p = p;
    k[j].n = len;
    k[j].h = 0;
  }
  *keys = k;
  return 0;
}

static void reply_store_err(conn_t *c, const proto_msg_t *m, int rc) {
  if (rc == RDZV_ETOOBIG) {
    srv__reply_err(c, m->id, rc, "store of job '%s' is full (%zu bytes, "
                   "waits and barriers included); delete keys or raise "
                   "--max-store-bytes / --max-memory", c->job->name,
                   store_bytes(c->job->store));
    LIMIT_HIT(c, MAX_STORE_BYTES, c->srv->cfg.max_store_bytes, "%s: the "
              "job's store holds %zu bytes", proto_op_name((int)m->op),
              store_bytes(c->job->store));
  } else if (rc == RDZV_ENOTNUM)
    srv__reply_err(c, m->id, rc, "the key's value is not a decimal integer");
  else
    srv__reply_err(c, m->id, rc, "%s", rdzv_strerror(rc));
}

/* Ask the core for room for a reply of n bytes. RET 0: build it;
 * SRV_LATER: return that; -1: refused (an error reply was sent). */
static int room_for_reply(conn_t *c, uint64_t id, int op, size_t n) {
  int r = srv__out_room(c, n);
  if (r == SRV_ROOM_OK)
    return 0;
  if (r == SRV_ROOM_LATER)
    return SRV_LATER;
  srv__reply_err(c, id, RDZV_ETOOBIG, "%s: the reply would hold %zu bytes, "
                 "over the %zu bytes of replies one connection may have "
                 "unsent (--max-out-bytes): ask for fewer keys at a time",
                 proto_op_name(op), n, c->srv->cfg.max_out_bytes);
  LIMIT_HIT(c, MAX_OUT_BYTES, c->srv->cfg.max_out_bytes, "%s: a reply of %zu "
            "bytes", proto_op_name(op), n);
  return -1;
}

/* ---- pending ops -------------------------------------------------------------------- */

static void pend_cancel_waits(pend_t *p) {
  if (p->w)
    store_wait_cancel(p->w);
  if (p->bw)
    store_barrier_cancel(p->bw);
  p->w = NULL;
  p->bw = NULL;
}

static void pend_free(pend_t *p) {
  conn_t *c = p->c;
  srv__pend_disarm(c->srv, p);
  list_remove(&p->link);
  c->npend--;
  c->srv->stats.waits_pending--;
  if (p->keys) {
    for (uint32_t i = 0; i < p->nkeys; i++)
      free((void *)p->keys[i].p);
    free(p->keys);
  }
  store_uncharge(c->job->store, p->charged);
  free(p);
}

/* Bytes of the reply with the values of keys (GET: one value; MGET: a
 * list), on the safe side; the count stops once past cap (such a reply is
 * refused whatever the rest adds: an MGET of one 8 MiB key 131,072 times
 * costs one lookup per key up to the cap, not 131,072). *missing: set when
 * a key counted does not exist (a queue-only key exists; both read as nil). */
static size_t values_size(store_t *st, const store_key_t *keys, uint32_t n,
                          size_t cap, int *missing) {
  size_t sz = 32;
  *missing = 0;
  for (uint32_t i = 0; i < n && sz <= cap; i++) {
    size_t vlen = 0;
    if (store_get_key(st, &keys[i], &vlen) != NULL)
      sz += vlen + 5;
    else {
      sz += 1; /* nil (a woken reply whose key went meanwhile too) */
      if (!store_exists_key(st, &keys[i]))
        *missing = 1;
    }
  }
  return sz;
}

static void reply_values(conn_t *c, uint64_t id, int op,
                         const store_key_t *keys, uint32_t n) {
  store_t *st = c->job->store;
  srv__reply_begin(c, id, 0, 1);
  if (op == PROTO_OP_MGET)
    msgpack_pack_array(&c->out.pk, n);
  for (uint32_t i = 0; i < n; i++) {
    size_t vlen = 0;
    const uint8_t *v = store_get_key(st, &keys[i], &vlen);
    if (v)
      proto_pack_bytes(&c->out.pk, v, vlen);
    else
      msgpack_pack_nil(&c->out.pk);
  }
  srv__reply_end(c);
}

/* The keys of a woken GET/MGET exist: reply with their values when there
 * is room, else keep the pend ready until the connection drained.
 * RET 0 done (p freed), SRV_LATER kept. */
static int pend_reply(pend_t *p) {
  conn_t *c = p->c;
  int missing;
  int r = room_for_reply(c, p->reqid, p->op,
                         values_size(c->job->store, p->keys, p->nkeys,
                                     c->srv->cfg.max_out_bytes, &missing));
  if (r == SRV_LATER) {
    p->ready = 1;
    srv__pend_disarm(c->srv, p);
    return SRV_LATER;
  }
  if (r == 0)
    reply_values(c, p->reqid, p->op, p->keys, p->nkeys);
  pend_free(p);
  return 0;
}

static void pend_wake(store_waiter_t *w, void *data) {
  pend_t *p = data;
  (void)w;
  p->w = NULL; /* freed by the store after this callback */
  if (p->op == PROTO_OP_GET || p->op == PROTO_OP_MGET) {
    pend_reply(p);
    return;
  }
  srv__reply_ok(p->c, p->reqid);
  pend_free(p);
}

static void pend_barrier_open(store_bwait_t *b, void *data) {
  pend_t *p = data;
  (void)b;
  p->bw = NULL;
  srv__reply_ok(p->c, p->reqid);
  pend_free(p);
}

static void native_pend_timeout(pend_t *p) {
  conn_t *c = p->c;
  uint32_t missing = p->w ? store_wait_remaining(p->w) : 0;
  pend_cancel_waits(p);
  if (p->op == PROTO_OP_BARRIER)
    srv__reply_err(c, p->reqid, -ETIMEDOUT, "barrier timed out");
  else
    srv__reply_err(c, p->reqid, -ETIMEDOUT, "%s timed out with %u of %u keys "
                   "missing", proto_op_name(p->op), missing,
                   p->nkeys ? p->nkeys : missing);
  pend_free(p);
}

/* A pending op whose registration (and copy of nkeys keys, when copy)
 * counts against the job's store. */
static pend_t *pend_new(conn_t *c, const proto_msg_t *m,
                        const store_key_t *keys, uint32_t n, int copy) {
  pend_t *p;
  size_t cost = sizeof(*p);
  int rc;
  if (c->npend >= c->srv->cfg.max_waits) {
    srv__reply_err(c, m->id, RDZV_ELIMIT, "more than %u pending waits on one "
                   "connection", c->srv->cfg.max_waits);
    LIMIT_HIT(c, MAX_WAITS, c->srv->cfg.max_waits, "%s: one more pending "
              "wait", proto_op_name((int)m->op));
    return NULL;
  }
  for (uint32_t i = 0; copy && i < n; i++)
    cost += sizeof(store_key_t) + keys[i].n;
  if ((rc = store_charge(c->job->store, cost)) != 0) {
    reply_store_err(c, m, rc);
    return NULL;
  }
  if ((p = calloc(1, sizeof(*p))) == NULL) {
    store_uncharge(c->job->store, cost);
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return NULL;
  }
  p->c = c;
  p->reqid = m->id;
  p->op = (int)m->op;
  p->heap_idx = SIZE_MAX;
  p->charged = cost;
  list_insert_tail(&c->pends, &p->link);
  c->npend++;
  c->srv->stats.waits_pending++;
  if (copy) {
    /* Copies of the keys: the reply needs them after the frame is gone. */
    p->keys = calloc(n ? n : 1, sizeof(*p->keys));
    if (p->keys == NULL)
      goto oom;
    p->nkeys = n;
    for (uint32_t i = 0; i < n; i++) {
      void *d = malloc(keys[i].n ? keys[i].n : 1);
      if (d == NULL)
        goto oom;
      memcpy(d, keys[i].p, keys[i].n);
      p->keys[i].p = d;
      p->keys[i].n = keys[i].n;
      p->keys[i].h = keys[i].h; /* the same store */
    }
  }
  return p;
oom:
  pend_free(p);
  srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
  return NULL;
}

/* Register p's waiter on keys. A WAIT's keys that make most of a large
 * request (1,000 keys of 8 KiB) may stay in the request's input buffer,
 * taken from the connection, rather than be copied into the store. */
static int wait_register(conn_t *c, const proto_msg_t *m,
                         const store_key_t *keys, uint32_t n, pend_t *p) {
  uint8_t *blk = NULL;
  size_t cost = 0, span;
  int adopted = 0, rc;
  /* Not for a WAIT the store refuses anyway: the connection keeps its
   * buffer for the next request. */
  if (m->op == PROTO_OP_WAIT && n > 0 && c->req_end != NULL &&
      (const uint8_t *)keys[0].p < c->req_end &&
      store_charge(c->job->store,
                   span = (size_t)(c->req_end - (const uint8_t *)keys[0].p)) ==
          0) {
    store_uncharge(c->job->store, span);
    blk = srv__in_take(c, (const uint8_t *)keys[0].p, span, c->req_end, &cost);
  }
  rc = store_wait_in(c->job->store, keys, n, STORE_WAIT_EXISTS, 0, pend_wake,
                     p, &p->w, blk, cost, &adopted);
  if (blk != NULL && !adopted)
    srv__in_spent(c, blk);
  return rc;
}

/* Wait for keys (GET, WAIT, MGET), replying now when they exist. */
static int wait_keys(conn_t *c, const proto_msg_t *m, store_key_t *keys,
                     uint32_t n, int64_t wait_ms) {
  store_t *st = c->job->store;
  int all = 1, values = m->op != PROTO_OP_WAIT, missing = 0;
  size_t sz = 0;
  pend_t *p;
  int rc;
  if (values) {
    /* existence and the reply's size in one pass; past the cap, refused
     * now even when a later key is missing */
    sz = values_size(st, keys, n, c->srv->cfg.max_out_bytes, &missing);
    all = !missing;
  } else {
    for (uint32_t i = 0; i < n && all; i++)
      all = store_exists_key(st, &keys[i]);
  }
  if (all) {
    if (!values) {
      srv__reply_ok(c, m->id);
      return 0;
    }
    rc = room_for_reply(c, m->id, (int)m->op, sz);
    if (rc == 0)
      reply_values(c, m->id, (int)m->op, keys, n);
    return rc == SRV_LATER ? SRV_LATER : 0;
  }
  if (wait_ms == 0) {
    if (m->op == PROTO_OP_GET)
      srv__reply_err(c, m->id, RDZV_ENOKEY, "key not found");
    else
      srv__reply_err(c, m->id, -ETIMEDOUT, "keys missing");
    return 0;
  }
  if ((p = pend_new(c, m, keys, n, values)) == NULL)
    return 0;
  if (srv__pend_arm(c->srv, p, wait_ms) != 0) {
    pend_free(p);
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return 0;
  }
  rc = wait_register(c, m, keys, n, p);
  if (rc != 0) {
    /* rc == 1 cannot happen: the keys were just found missing. */
    pend_free(p);
    reply_store_err(c, m, rc);
  }
  return 0;
}

/* ---- handlers ---------------------------------------------------------------------- */

static int op_ping(conn_t *c, const proto_msg_t *m) {
  srv__reply_ok(c, m->id);
  return 0;
}

static int op_set(conn_t *c, const proto_msg_t *m) {
  const char *k, *v;
  size_t kn, vn;
  int rc;
  if (arg_key(c, m, 0, &k, &kn) || arg_value(c, m, 1, &v, &vn))
    return 0;
  if (m->op == PROTO_OP_APPEND) {
    /* The value it makes is bound as a SET's is (as TCPStore's APPEND):
     * else appends grow one past what any reply may carry. */
    size_t cur = 0;
    if (store_get(c->job->store, k, kn, &cur) == NULL)
      cur = 0;
    if (cur + vn > c->srv->cfg.max_value) {
      srv__reply_err(c, m->id, RDZV_ETOOBIG, "append: the value would grow "
                     "to %zu bytes (%zu + %zu), over the %u-byte limit "
                     "(--max-value)", cur + vn, cur, vn,
                     c->srv->cfg.max_value);
      LIMIT_HIT(c, MAX_VALUE, c->srv->cfg.max_value, "append to a value of "
                "%zu bytes", cur + vn);
      return 0;
    }
  }
  rc = m->op == PROTO_OP_APPEND ? store_append(c->job->store, k, kn, v, vn)
                                : srv__store_set(c, k, kn, v, vn);
  if (rc)
    reply_store_err(c, m, rc);
  else if (m->op != PROTO_OP_SETQ) /* SETQ: only a failure is answered */
    srv__reply_ok(c, m->id);
  return 0;
}

static int op_get(conn_t *c, const proto_msg_t *m) {
  store_key_t k = {NULL, 0, 0};
  int64_t wait_ms = 0;
  const char *p;
  const uint8_t *v;
  size_t vlen = 0;
  if (arg_key(c, m, 0, &p, &k.n))
    return 0;
  k.p = p;
  if (m->nargs > 1 && arg_int(c, m, 1, &wait_ms))
    return 0;
  /* The common case, a key with a value, in one lookup; the rest (absent,
   * a queue only) as every wait does. */
  if ((v = store_get(c->job->store, p, k.n, &vlen)) != NULL) {
    int rc = room_for_reply(c, m->id, (int)m->op, 37 + vlen);
    if (rc == 0) {
      srv__reply_begin(c, m->id, 0, 1);
      proto_pack_bytes(&c->out.pk, v, vlen);
      srv__reply_end(c);
    }
    return rc == SRV_LATER ? SRV_LATER : 0;
  }
  return wait_keys(c, m, &k, 1, wait_ms);
}

static int op_wait_or_mget(conn_t *c, const proto_msg_t *m) {
  store_key_t *keys;
  uint32_t n;
  int64_t wait_ms = -1;
  int rc;
  if (arg_keys(c, m, 0, &keys, &n))
    return 0;
  if (m->nargs > 1 && arg_int(c, m, 1, &wait_ms)) {
    lu_big_free(keys);
    return 0;
  }
  rc = wait_keys(c, m, keys, n, wait_ms);
  lu_big_free(keys);
  return rc;
}

static void pack_bool(conn_t *c, int v) {
  if (v)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
}

static int op_check(conn_t *c, const proto_msg_t *m) {
  store_key_t *keys;
  uint32_t n;
  int ready = 1;
  if (arg_keys(c, m, 0, &keys, &n))
    return 0;
  for (uint32_t i = 0; i < n && ready; i++)
    ready = store_exists_key(c->job->store, &keys[i]);
  lu_big_free(keys);
  srv__reply_begin(c, m->id, 0, 1);
  pack_bool(c, ready);
  srv__reply_end(c);
  return 0;
}

static int op_add(conn_t *c, const proto_msg_t *m) {
  const char *k;
  size_t kn;
  int64_t delta, res = 0;
  int rc;
  if (arg_key(c, m, 0, &k, &kn) || arg_int(c, m, 1, &delta))
    return 0;
  if ((rc = store_add(c->job->store, k, kn, delta, &res)) != 0) {
    reply_store_err(c, m, rc);
    return 0;
  }
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_int64(&c->out.pk, res);
  srv__reply_end(c);
  return 0;
}

static int op_cas(conn_t *c, const proto_msg_t *m) {
  const char *k, *e, *d;
  size_t kn, en, dn, vlen = 0;
  int absent, swapped, rc;
  const uint8_t *v;
  if (arg_key(c, m, 0, &k, &kn))
    return 0;
  if (proto_arg_bytes_or_nil(m, 1, &e, &en, &absent) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "compare_set: expected value must "
                   "be bytes or nil");
    return 0;
  }
  if (check_value(c, m, en) || arg_value(c, m, 2, &d, &dn))
    return 0;
  /* The reply carries the value after the swap: the current one or the
   * desired one. */
  v = store_get(c->job->store, k, kn, &vlen);
  if ((rc = room_for_reply(c, m->id, (int)m->op,
                           32 + LU_MAX(v ? vlen : 0, dn))) != 0)
    return rc == SRV_LATER ? SRV_LATER : 0;
  rc = store_cas(c->job->store, k, kn, e, en, absent, d, dn, &swapped);
  if (rc) {
    reply_store_err(c, m, rc);
    return 0;
  }
  v = store_get(c->job->store, k, kn, &vlen);
  srv__reply_begin(c, m->id, 0, 2);
  if (v)
    proto_pack_bytes(&c->out.pk, v, vlen);
  else
    msgpack_pack_nil(&c->out.pk);
  pack_bool(c, swapped);
  srv__reply_end(c);
  return 0;
}

static int op_delete(conn_t *c, const proto_msg_t *m) {
  const char *k;
  size_t kn;
  int r;
  if (arg_key(c, m, 0, &k, &kn))
    return 0;
  r = store_delete(c->job->store, k, kn);
  srv__reply_begin(c, m->id, 0, 1);
  pack_bool(c, r);
  srv__reply_end(c);
  return 0;
}

static int op_numkeys(conn_t *c, const proto_msg_t *m) {
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_uint64(&c->out.pk, store_num_keys(c->job->store));
  srv__reply_end(c);
  return 0;
}

static int op_mset(conn_t *c, const proto_msg_t *m) {
  const msgpack_object *items;
  uint32_t n;
  int rc = 0;
  if (proto_arg_array(m, 0, &items, &n) != 0 || n % 2 != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "multi_set: argument must be a list "
                   "[key, value, key, value, ...]");
    return 0;
  }
  if (n / 2 > c->srv->cfg.max_keys) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "multi_set: %u keys over the limit "
                   "of %u", n / 2, c->srv->cfg.max_keys);
    LIMIT_HIT(c, MAX_KEYS, c->srv->cfg.max_keys, "multi_set of %u keys",
              n / 2);
    return 0;
  }
  /* Check everything first so that a bad pair stores nothing. */
  for (uint32_t i = 0; i < n; i += 2) {
    const char *k, *v;
    size_t kn, vn;
    if (proto_obj_bytes(&items[i], &k, &kn) != 0 ||
        proto_obj_bytes(&items[i + 1], &v, &vn) != 0) {
      srv__reply_err(c, m->id, RDZV_EPROTO, "multi_set: pair %u is not bytes",
                     i / 2 + 1);
      return 0;
    }
    if (kn > c->srv->cfg.max_key || vn > c->srv->cfg.max_value) {
      int key = kn > c->srv->cfg.max_key;
      srv__reply_err(c, m->id, RDZV_ETOOBIG, "multi_set: pair %u: %s of %zu "
                     "bytes over the %u-byte limit%s; nothing was stored",
                     i / 2 + 1, key ? "key" : "value", key ? kn : vn,
                     key ? c->srv->cfg.max_key : c->srv->cfg.max_value,
                     key ? "" : " (--max-value)");
      if (key)
        LIMIT_HIT(c, MAX_KEY, c->srv->cfg.max_key, "multi_set of a key of "
                  "%zu bytes", kn);
      else
        LIMIT_HIT(c, MAX_VALUE, c->srv->cfg.max_value, "multi_set of a value "
                  "of %zu bytes", vn);
      return 0;
    }
  }
  for (uint32_t i = 0; i < n && rc == 0; i += 2) {
    const char *k, *v;
    size_t kn, vn;
    proto_obj_bytes(&items[i], &k, &kn);
    proto_obj_bytes(&items[i + 1], &v, &vn);
    rc = store_set(c->job->store, k, kn, v, vn);
  }
  if (rc)
    reply_store_err(c, m, rc);
  else
    srv__reply_ok(c, m->id);
  return 0;
}

static int op_barrier(conn_t *c, const proto_msg_t *m) {
  const char *name;
  size_t nn;
  int64_t count, wait_ms = -1;
  pend_t *p;
  int rc;
  if (arg_key(c, m, 0, &name, &nn) || arg_int(c, m, 1, &count))
    return 0;
  if (m->nargs > 2 && arg_int(c, m, 2, &wait_ms))
    return 0;
  if (count <= 0 || count > UINT32_MAX) {
    srv__reply_err(c, m->id, RDZV_EINVAL, "barrier: count must be positive");
    return 0;
  }
  if ((p = pend_new(c, m, NULL, 0, 0)) == NULL)
    return 0;
  rc = store_barrier(c->job->store, name, nn, (uint32_t)count,
                     pend_barrier_open, p, &p->bw);
  if (rc == 1) {
    pend_free(p);
    srv__reply_ok(c, m->id);
    return 0;
  }
  if (rc == RDZV_EINVAL) {
    pend_free(p);
    srv__reply_err(c, m->id, rc, "barrier '%.*s': count %lld differs from "
                   "the count other members gave", (int)LU_MIN(nn, 64), name,
                   (long long)count);
    return 0;
  }
  if (rc == 0 && srv__pend_arm(c->srv, p, wait_ms) != 0)
    rc = RDZV_ENOMEM;
  if (rc != 0) {
    pend_cancel_waits(p);
    pend_free(p);
    reply_store_err(c, m, rc);
  }
  return 0;
}

struct list_ctx {
  conn_t *c;
  const char *prefix;
  size_t plen;
  uint32_t n;
  size_t bytes;
  int count_only;
};

static void list_cb(const void *key, size_t klen, const uint8_t *val,
                    size_t vlen, void *arg) {
  struct list_ctx *x = arg;
  (void)val;
  (void)vlen;
  if (klen < x->plen || memcmp(key, x->prefix, x->plen) != 0)
    return;
  if (x->count_only) {
    x->n++;
    x->bytes += klen + 5;
  } else {
    proto_pack_bytes(&x->c->out.pk, key, klen);
  }
}

static int op_list(conn_t *c, const proto_msg_t *m) {
  struct list_ctx x = {c, "", 0, 0, 32, 1};
  int rc;
  if (m->nargs > 0 && arg_key(c, m, 0, &x.prefix, &x.plen))
    return 0;
  store_foreach(c->job->store, list_cb, &x);
  if ((rc = room_for_reply(c, m->id, (int)m->op, x.bytes)) != 0)
    return rc == SRV_LATER ? SRV_LATER : 0;
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_array(&c->out.pk, x.n);
  x.count_only = 0;
  store_foreach(c->job->store, list_cb, &x);
  srv__reply_end(c);
  return 0;
}

static int op_cancel(conn_t *c, const proto_msg_t *m) {
  int64_t target;
  list_t *it;
  int found = 0;
  if (arg_int(c, m, 0, &target))
    return 0;
  for (it = c->pends.next; it != &c->pends; it = it->next) {
    pend_t *p = LIST_ENTRY(it, pend_t, link);
    if (p->reqid == (uint64_t)target) {
      pend_cancel_waits(p);
      srv__reply_err(c, p->reqid, RDZV_ECANCELED, "canceled by the client");
      pend_free(p);
      found = 1;
      break;
    }
  }
  srv__reply_begin(c, m->id, 0, 1);
  pack_bool(c, found);
  srv__reply_end(c);
  return 0;
}

typedef int (*op_fn)(conn_t *c, const proto_msg_t *m);

static op_fn op_table(int64_t op) {
  switch (op) {
  case PROTO_OP_PING: return op_ping;
  case PROTO_OP_SET: return op_set;
  case PROTO_OP_SETQ: return op_set;
  case PROTO_OP_APPEND: return op_set;
  case PROTO_OP_GET: return op_get;
  case PROTO_OP_CHECK: return op_check;
  case PROTO_OP_ADD: return op_add;
  case PROTO_OP_CAS: return op_cas;
  case PROTO_OP_WAIT: return op_wait_or_mget;
  case PROTO_OP_MGET: return op_wait_or_mget;
  case PROTO_OP_DELETE: return op_delete;
  case PROTO_OP_NUMKEYS: return op_numkeys;
  case PROTO_OP_MSET: return op_mset;
  case PROTO_OP_BARRIER: return op_barrier;
  case PROTO_OP_LIST: return op_list;
  case PROTO_OP_CANCEL: return op_cancel;
  default: return NULL;
  }
}

/* ---- HELLO ------------------------------------------------------------------------- */

static void native_hello_challenge(conn_t *c) {
  if (lu_random(c->nonce, sizeof(c->nonce)) != 0) {
    /* Without randomness authentication is meaningless; refuse. */
    c->broken = 1;
    srv__out_raw(c, "", 0);
    return;
  }
  srv__push_begin(c, PROTO_EV_CHALLENGE, 4);
  proto_pack_bytes(&c->out.pk, c->nonce, sizeof(c->nonce));
  msgpack_pack_uint32(&c->out.pk, RDZV_PROTOCOL_VERSION);
  if (c->srv->token)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  msgpack_pack_uint32(&c->out.pk, PROTO_FEATURES);
  srv__reply_end(c);
}

static int copy_str(const char *p, size_t n, char *out, size_t cap) {
  if (n == 0 || n >= cap || memchr(p, '\0', n) != NULL)
    return -1;
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

/* Refuse a HELLO: an error reply, then the connection closes. */
static void hello_refuse(conn_t *c, uint64_t id, int status, const char *msg) {
  srv__reply_err(c, id, status, "%s", msg);
  c->close_after_flush = 1;
}

/* Which secret did the client prove it holds: the server's token (every
 * job) or the key of this job only? OUT key: that secret. RET 0, or -1
 * when neither matches. */
static int hello_verify(srv_t *s, conn_t *c, const char *job,
                        const char *role, const char *proof, size_t proof_n,
                        char jkey[PROTO_JOB_KEY_LEN + 1], const void **key,
                        size_t *key_len) {
  uint8_t mac[PROTO_MAC_LEN];
  if (proof == NULL || proof_n != PROTO_MAC_LEN)
    return -1;
  if (proto_mac(s->token, s->cfg.token_len, "rdzv-client", c->nonce,
                sizeof(c->nonce), job, role, mac) == 0 &&
      proto_mac_equal(mac, (const uint8_t *)proof, PROTO_MAC_LEN)) {
    *key = s->token;
    *key_len = s->cfg.token_len;
    return 0;
  }
  if (proto_job_key(s->token, s->cfg.token_len, job, jkey) == 0 &&
      proto_mac(jkey, PROTO_JOB_KEY_LEN, "rdzv-client", c->nonce,
                sizeof(c->nonce), job, role, mac) == 0 &&
      proto_mac_equal(mac, (const uint8_t *)proof, PROTO_MAC_LEN)) {
    *key = jkey;
    *key_len = PROTO_JOB_KEY_LEN;
    return 0;
  }
  return -1;
}

static void op_hello(conn_t *c, const proto_msg_t *m) {
  srv_t *s = c->srv;
  int64_t version;
  const char *p;
  size_t n;
  char role[16], job[256], err[512], jkey[PROTO_JOB_KEY_LEN + 1];
  const char *proof = NULL, *cnonce = NULL;
  size_t proof_n = 0, cnonce_n = 0, key_len = 0;
  const void *key = NULL;
  int nil;
  job_t *j;
  uint8_t mac[PROTO_MAC_LEN];

  if (proto_arg_i64(m, 0, &version) != 0) {
    srv__bad_input(c, "malformed HELLO");
    hello_refuse(c, m->id, RDZV_EPROTO, "malformed HELLO");
    return;
  }
  if (version != RDZV_PROTOCOL_VERSION) {
    srv__bad_input(c, "HELLO with protocol version %lld (server speaks %d)",
                   (long long)version, RDZV_PROTOCOL_VERSION);
    snprintf(err, sizeof(err), "this server speaks protocol version %d, the "
             "client %lld: use the same launch release on every node",
             RDZV_PROTOCOL_VERSION, (long long)version);
    hello_refuse(c, m->id, RDZV_EVERSION, err);
    return;
  }
  if (proto_arg_bytes(m, 1, &p, &n) != 0 || copy_str(p, n, role, sizeof(role)) ||
      proto_arg_bytes(m, 2, &p, &n) != 0 || copy_str(p, n, job, sizeof(job)) ||
      proto_arg_bytes_or_nil(m, 3, &proof, &proof_n, &nil) != 0 ||
      proto_arg_bytes_or_nil(m, 4, &cnonce, &cnonce_n, &nil) != 0 ||
      cnonce_n > PROTO_NONCE_LEN) {
    srv__bad_input(c, "malformed HELLO");
    hello_refuse(c, m->id, RDZV_EPROTO, "malformed HELLO: expected "
                 "[version, role, job, proof, nonce]");
    return;
  }
  if (s->token && hello_verify(s, c, job, role, proof, proof_n, jkey, &key,
                               &key_len) != 0) {
    srv__bad_input(c, "authentication failed for job '%s' (role %s)", job,
                   role);
    hello_refuse(c, m->id, RDZV_EAUTH, "authentication failed: this server "
                 "requires the server's token or the key of this job "
                 "(launch server --issue-key JOB); a key of another job does "
                 "not open this one");
    return;
  }
  if ((j = srv__job(s, c, job, strlen(job), err, sizeof(err))) == NULL) {
    srv__bad_input(c, "HELLO refused: %s", err);
    hello_refuse(c, m->id, RDZV_ELIMIT, err);
    return;
  }
  if (j->nconns >= s->cfg.max_conns_per_job) {
    srv__bad_input(c, "job '%s' has %u connections, the limit", job,
                   j->nconns);
    snprintf(err, sizeof(err), "job '%s' has too many connections (%u)", job,
             j->nconns);
    srv__limit_hit(s, SRV_LIMIT_MAX_CONNS_PER_JOB, s->cfg.max_conns_per_job,
                   job, c->peer, "a connection to the job");
    hello_refuse(c, m->id, RDZV_ELIMIT, err);
    return;
  }
  srv__job_attach(c, j);
  lu_strlcpy(c->role, role, sizeof(c->role));
  c->state = CONN_READY;
  srv__conn_authenticated(c);
  srv__reply_begin(c, m->id, 0, 1);
  /* The server's proof, with the secret the client holds. */
  if (key && cnonce_n > 0 &&
      proto_mac(key, key_len, "rdzv-server", (const uint8_t *)cnonce,
                cnonce_n, job, role, mac) == 0)
    proto_pack_bytes(&c->out.pk, mac, sizeof(mac));
  else
    msgpack_pack_nil(&c->out.pk);
  srv__reply_end(c);
}

/* ---- the dialect ----------------------------------------------------------------- */

/* One frame. RET 0, or SRV_LATER to keep it for later. */
#define KEYLIST_MIN (64u << 10) /* frames this large may be key lists */

/* Decode a frame: a large MGET, WAIT or CHECK without a msgpack object per
 * key (131,072 keys: a quarter of the time, none of the 3 MiB). */
static int native_decode(conn_t *c, const uint8_t *body, size_t n,
                         proto_msg_t *m) {
  if (n >= KEYLIST_MIN &&
      proto_decode_keylist(body, n, &c->srv->plim, m) == 0 &&
      m->kind == PROTO_REQUEST &&
      (m->op == PROTO_OP_MGET || m->op == PROTO_OP_WAIT ||
       m->op == PROTO_OP_CHECK))
    return 0;
  return proto_decode(body, n, &c->srv->plim, m);
}

static void pre_drop(conn_t *c) {
  if (c->pre == NULL)
    return;
  lu_big_free(c->pre->keys);
  free(c->pre);
  c->pre = NULL;
}

static void pre_done(conn_t *c) {
  if (c->pre != NULL && c->pre->state == PRE_READY)
    pre_drop(c);
}

static void pre_shift(conn_t *c, size_t cut) {
  srv_pre_t *pre = c->pre;
  if (pre == NULL || (c->req_end != NULL &&
                      c->in + pre->fo + PROTO_HDR + pre->n == c->req_end))
    return; /* the request running (native_frame drops it after) */
  if (pre->state == PRE_READY || pre->fo < cut)
    pre_drop(c); /* pointers into the bytes that moved, or run */
  else
    pre->fo -= cut;
}

/* Frames looked at for a large one (their headers only). */
#define PREPARE_SCAN 64
/* Work of a call of native_prepare: bytes of keys, 64 a key. */
#define PREPARE_SLICE (256u << 10)

/* The dialect's prepare_due: a look at the frames' headers only. */
static int native_prepare_due(conn_t *c) {
  srv_t *s = c->srv;
  size_t off = 0, avail = c->in_len;
  if (c->pre != NULL)
    return c->pre->state == PRE_ON;
  if (c->in_skip > 0)
    return 0; /* the buffer starts inside a refused request */
  /* The first large frame (native_input sorts out the rest: limits,
   * state, errors). */
  for (int i = 0; i < PREPARE_SCAN && avail - off >= PROTO_HDR; i++) {
    uint32_t len = proto_get_len(c->in + off);
    if (len > s->cfg.max_frame)
      return 0;
    if (len >= KEYLIST_MIN)
      return 1;
    if (avail - off - PROTO_HDR < len)
      return 0;
    off += PROTO_HDR + (size_t)len;
  }
  return 0;
}

/* Stop decoding ahead: native_frame decodes the frame (and answers). */
static void pre_off(srv_pre_t *pre) {
  lu_big_free(pre->keys);
  pre->keys = NULL;
  pre->state = PRE_OFF;
}

/* A request (its header as read so far) decoded ahead: MGET, WAIT, CHECK. */
static int pre_wanted(const msgpack_object *h) {
  return h[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
         h[0].via.u64 == PROTO_REQUEST &&
         h[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
         (h[2].via.u64 == PROTO_OP_MGET || h[2].via.u64 == PROTO_OP_WAIT ||
          h[2].via.u64 == PROTO_OP_CHECK);
}

/* The dialect's prepare: go on decoding the large frame, as far as it
 * came, if it is an MGET, WAIT or CHECK, and hash its keys (c->pre) for
 * native_frame to use: the work of a request of 8 MiB of keys spread over
 * the passes that read it. */
static void native_prepare(conn_t *c) {
  srv_t *s = c->srv;
  srv_pre_t *pre = c->pre;
  const uint8_t *body;
  size_t avail, ko, kn, start;
  uint32_t k0;
  int r;
  if (pre == NULL) {
    size_t off = 0;
    uint32_t len;
    while ((len = proto_get_len(c->in + off)) < KEYLIST_MIN)
      off += PROTO_HDR + (size_t)len; /* as native_prepare_due found */
    if ((pre = calloc(1, sizeof(*pre))) == NULL)
      return;
    pre->fo = off;
    pre->n = len;
    pre->seed = s->store_seed;
    c->pre = pre;
  }
  if (pre->state != PRE_ON)
    return;
  body = c->in + pre->fo + PROTO_HDR;
  avail = LU_MIN(c->in_len - pre->fo - PROTO_HDR, (size_t)pre->n);
  start = pre->kl.pos;
  k0 = pre->kl.k;
  while ((r = proto_keylist_step(&pre->kl, body, avail, pre->n, &s->plim,
                                 &pre->m, &ko, &kn)) == PROTO_KL_KEY) {
    store_key_t *k;
    if (pre->keys == NULL) {
      uint32_t nk = pre->kl.nk;
      if (!pre_wanted(pre->m.flat) || nk > s->cfg.max_keys ||
          (pre->keys = lu_big_alloc(nk * sizeof(*pre->keys))) == NULL) {
        pre_off(pre);
        return;
      }
    }
    if (kn > s->cfg.max_key) {
      pre_off(pre); /* arg_keys answers */
      return;
    }
    k = &pre->keys[pre->kl.k - 1];
    k->p = (const void *)(uintptr_t)ko;
    k->n = kn;
    k->h = store_key_hash(pre->seed, body + ko, kn);
    /* A slice a call (a pass of the loop): the rest on the next. */
    if (pre->kl.pos - start + (size_t)(pre->kl.k - k0) * 64 > PREPARE_SLICE)
      return;
  }
  if (r == PROTO_KL_MORE)
    return;
  if (r != PROTO_KL_DONE || pre->m.kind != PROTO_REQUEST ||
      (pre->m.op != PROTO_OP_MGET && pre->m.op != PROTO_OP_WAIT &&
       pre->m.op != PROTO_OP_CHECK) ||
      pre->kl.nk > s->cfg.max_keys) {
    pre_off(pre);
    return;
  }
  if (pre->keys == NULL &&
      (pre->keys = lu_big_alloc(sizeof(*pre->keys))) == NULL) {
    pre_off(pre); /* no keys */
    return;
  }
  for (uint32_t j = 0; j < pre->kl.nk; j++)
    pre->keys[j].p = body + (uintptr_t)pre->keys[j].p;
  pre->state = PRE_READY;
}

static int native_frame(conn_t *c, const uint8_t *body, size_t n) {
  proto_msg_t m, *mp = &m;
  srv_pre_t *pre = c->pre;
  int rc;
  op_fn fn;
  if (pre != NULL && pre->state == PRE_READY &&
      c->in + pre->fo + PROTO_HDR == body && pre->n == n) {
    mp = &pre->m; /* decoded before the lock */
    rc = 0;
  } else {
    rc = native_decode(c, body, n, &m);
  }
  if (rc == RDZV_ETOOBIG && c->state == CONN_READY &&
      proto_peek_request(body, n, &m.id, &m.op) == 0) {
    /* Over the objects or the nesting a frame may have (an MGET of
     * 262,208 keys): its length kept the stream in step, so it is
     * answered as a request of too many keys is. */
    srv_t *s = c->srv;
    srv__reply_err(c, m.id, RDZV_ETOOBIG, "%s: request of %zu bytes over "
                   "the server's limits of %u keys (%u msgpack objects) and "
                   "%u levels of nesting", proto_op_name((int)m.op), n,
                   s->cfg.max_keys, s->plim.max_items, s->plim.max_depth);
    LIMIT_HIT(c, MAX_KEYS, s->cfg.max_keys, "%s of more than %u msgpack "
              "objects", proto_op_name((int)m.op), s->plim.max_items);
    return 0;
  }
  if (rc != 0) {
    srv__bad_input(c, "%s frame of %zu bytes; closing",
                   rc == RDZV_ETOOBIG ? "oversized or too deeply nested"
                                      : "malformed",
                   n);
    srv__conn_close(c);
    return 0;
  }
  rc = 0;
  if (mp->kind != PROTO_REQUEST) {
    srv__bad_input(c, "frame of kind %d where a request was expected; "
                      "closing", mp->kind);
    srv__conn_close(c);
  } else if (c->state == CONN_HELLO) {
    if (mp->op != PROTO_OP_HELLO) {
      srv__bad_input(c, "%s before HELLO; closing",
                     proto_op_name((int)mp->op));
      hello_refuse(c, mp->id, RDZV_EPROTO, "the first request must be HELLO");
    } else {
      op_hello(c, mp);
    }
  } else if (mp->op == PROTO_OP_HELLO) {
    srv__reply_err(c, mp->id, RDZV_EPROTO, "HELLO sent twice");
  } else if (mp->op >= PROTO_OP_JOIN) {
    c->srv->rounds_op(c, mp);
  } else if ((fn = op_table(mp->op)) != NULL) {
    uint64_t t0 = srv__trace_now();
    rc = fn(c, mp);
    srv__trace_req(proto_op_name((int)mp->op), t0);
  } else {
    srv__reply_err(c, mp->id, RDZV_EPROTO, "unknown op %lld",
                   (long long)mp->op);
  }
  if (rc != SRV_LATER && mp->kind == PROTO_REQUEST)
    SRV_COUNT_NATIVE(c->srv, mp->op);
  if (mp == &m)
    proto_msg_free(mp);
  else
    pre_drop(c); /* used */
  return rc;
}

/* A frame of len bytes over --max-frame at b (n bytes of it have come),
 * from an authenticated client: a request is answered with RDZV_ETOOBIG
 * and its bytes dropped as they come (c->in_skip), never buffered; the
 * connection goes on with the next request. Anything else closes it.
 * RET bytes consumed, 0 when the request's header has not all come, -1 to
 * close. */
static ssize_t frame_over(conn_t *c, const uint8_t *b, size_t n,
                          uint32_t len) {
  srv_t *s = c->srv;
  size_t head = LU_MIN((size_t)len, (size_t)PROTO_PEEK_MAX), take;
  uint64_t id = 0;
  int64_t op = 0;
  int rc = proto_peek_request(b + PROTO_HDR, LU_MIN(n - PROTO_HDR, head),
                              &id, &op);
  if (rc == PROTO_KL_MORE && n - PROTO_HDR < head) {
    c->in_need = PROTO_HDR + head;
    return 0;
  }
  if (rc != 0) {
    srv__bad_input(c, "frame of %u bytes exceeds the %u-byte limit and is "
                      "not a request; closing", len, s->cfg.max_frame);
    srv__limit_hit(s, SRV_LIMIT_MAX_FRAME, s->cfg.max_frame,
                   c->job ? c->job->name : NULL, c->peer, "a frame of %u "
                   "bytes: the connection was closed", len);
    return -1;
  }
  s->stats.requests++;
  if (op == PROTO_OP_MGET || op == PROTO_OP_WAIT || op == PROTO_OP_CHECK)
    /* a key list: no value to shrink */
    srv__reply_err(c, id, RDZV_ETOOBIG, "%s: request of %u bytes over the "
                   "server's %u-byte limit (--max-frame); nothing was done: "
                   "split its keys over several requests, or raise "
                   "--max-frame", proto_op_name((int)op), len,
                   s->cfg.max_frame);
  else
    srv__reply_err(c, id, RDZV_ETOOBIG, "%s: request of %u bytes over the "
                   "server's %u-byte limit (--max-frame); nothing was done: "
                   "keep values under --max-value (%u bytes), split them, or "
                   "raise both", proto_op_name((int)op), len,
                   s->cfg.max_frame, s->cfg.max_value);
  srv__limit_hit(s, SRV_LIMIT_MAX_FRAME, s->cfg.max_frame,
                 c->job ? c->job->name : NULL, c->peer, "a %s of %u bytes: "
                 "refused, its bytes dropped as they came",
                 proto_op_name((int)op), len);
  take = LU_MIN(n, PROTO_HDR + (size_t)len);
  c->in_skip = PROTO_HDR + (size_t)len - take;
  return (ssize_t)take;
}

static ssize_t native_input(conn_t *c, const uint8_t *b, size_t n) {
  srv_t *s = c->srv;
  size_t off = 0;
  int rc;
  if (c->in_skip > 0) {
    off = LU_MIN(c->in_skip, n);
    c->in_skip -= off;
  }
  while (n - off >= PROTO_HDR && c->state != CONN_CLOSING &&
         !c->close_after_flush && !srv__conn_paused(c)) {
    uint32_t len = proto_get_len(b + off);
    uint32_t limit =
        c->state == CONN_READY ? s->cfg.max_frame : SRV_HELLO_MAX_FRAME;
    if (len > limit && c->state == CONN_READY) {
      ssize_t k = frame_over(c, b + off, n - off, len);
      if (k <= 0)
        return k < 0 ? -1 : (ssize_t)off;
      off += (size_t)k;
      continue;
    }
    if (len > limit) {
      srv__bad_input(c, "frame of %u bytes before authentication "
                        "exceeds the %u-byte limit of a HELLO", len, limit);
      srv__limit_hit(s, SRV_LIMIT_MAX_FRAME, limit,
                     c->job ? c->job->name : NULL, c->peer, "a frame of %u "
                     "bytes before its HELLO: the connection was closed",
                     len);
      return -1;
    }
    if (n - off - PROTO_HDR < len) {
      c->in_need = PROTO_HDR + (size_t)len;
      break;
    }
    if (c->pre != NULL && c->pre->state == PRE_ON &&
        c->in + c->pre->fo == b + off) {
      srv__conn_yield(c); /* decoded ahead on the next pass */
      srv__prepare_later(c);
      break;
    }
    s->stats.requests++;
    c->req_end = b + off + PROTO_HDR + len;
    rc = native_frame(c, b + off + PROTO_HDR, len);
    c->req_end = NULL;
    if (rc == SRV_LATER)
      break;
    off += PROTO_HDR + len;
    if (c->in_moved)
      break; /* the buffer went with a SET's value */
  }
  return (ssize_t)off;
}

/* Replies woken while the connection was full go first, in order. */
static void native_resume(conn_t *c) {
  list_t *it = c->pends.next;
  int rc;
  while (it != &c->pends && !c->paused) {
    pend_t *p = LIST_ENTRY(it, pend_t, link);
    it = it->next;
    if (!p->ready)
      continue;
    p->ready = 0;
    rc = store_wait(c->job->store, p->keys, p->nkeys, STORE_WAIT_EXISTS, 0,
                    pend_wake, p, &p->w);
    if (rc == 0) {
      /* A key was deleted meanwhile: wait for it again, until the
       * request's own deadline (disarmed while its reply was ready): past
       * it, the timer answers -ETIMEDOUT at once. */
      if (p->deadline_ms != 0) {
        uint64_t now = srv__now();
        if (srv__pend_arm(c->srv, p, p->deadline_ms > now
                                         ? (int64_t)(p->deadline_ms - now)
                                         : 0) != 0) {
          pend_cancel_waits(p);
          srv__reply_err(c, p->reqid, RDZV_ENOMEM, "%s: out of memory",
                         proto_op_name(p->op));
          pend_free(p);
        }
      }
      continue;
    }
    if (rc < 0) {
      srv__reply_err(c, p->reqid, rc, "%s: %s", proto_op_name(p->op),
                     rdzv_strerror(rc));
      pend_free(p);
    } else if (pend_reply(p) == SRV_LATER) {
      break;
    }
  }
}

static void native_closed(conn_t *c) {
  while (!list_empty(&c->pends)) {
    pend_t *p = LIST_ENTRY(c->pends.next, pend_t, link);
    pend_cancel_waits(p);
    pend_free(p);
  }
  c->srv->rounds_conn_closed(c);
}

const srv_dialect_t srv__dialect_native = {
    .name = "native",
    .input = native_input,
    .resume = native_resume,
    .closed = native_closed,
    .start = native_hello_challenge,
    .prepare_due = native_prepare_due,
    .prepare = native_prepare,
    .pre_shift = pre_shift,
    .pre_done = pre_done,
    .pre_drop = pre_drop,
    .pend_timeout = native_pend_timeout,
};
