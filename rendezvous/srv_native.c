/* srv_native.c - the native protocol: HELLO/authentication and the store
 * operations, each a handler in one table. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "srv_int.h"

/* ---- replies ---------------------------------------------------------------------- */

void srv__reply_begin(conn_t *c, uint64_t id, int status, uint32_t nres) {
  proto_enc_begin(&c->out, 3 + nres);
  msgpack_pack_uint8(&c->out.pk, PROTO_REPLY);
  msgpack_pack_uint64(&c->out.pk, id);
  msgpack_pack_int64(&c->out.pk, status);
}

void srv__push_begin(conn_t *c, int ev, uint32_t nargs) {
  proto_enc_begin(&c->out, 3 + nargs);
  msgpack_pack_uint8(&c->out.pk, PROTO_PUSH);
  msgpack_pack_uint8(&c->out.pk, 0);
  msgpack_pack_int64(&c->out.pk, ev);
}

void srv__reply_end(conn_t *c) {
  if (proto_enc_end(&c->out) != 0)
    c->broken = 1;
  srv__mark_dirty(c);
}

void srv__reply_ok(conn_t *c, uint64_t id) {
  srv__reply_begin(c, id, 0, 0);
  srv__reply_end(c);
}

void srv__reply_err(conn_t *c, uint64_t id, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  srv__reply_begin(c, id, status, 1);
  proto_pack_str(&c->out.pk, msg);
  srv__reply_end(c);
}

/* ---- argument checks ------------------------------------------------------------- */

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
    return -1;
  }
  return 0;
}

static int check_value(conn_t *c, const proto_msg_t *m, size_t n) {
  if (n > c->srv->cfg.max_value) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: value of %zu bytes over the "
                   "%u-byte limit", proto_op_name((int)m->op), n,
                   c->srv->cfg.max_value);
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

/* Keys of argument i as an array; *keys is malloc'd (pointers into the
 * frame). */
static int arg_keys(conn_t *c, const proto_msg_t *m, uint32_t i,
                    store_key_t **keys, uint32_t *n) {
  const msgpack_object *items;
  store_key_t *k;
  if (proto_arg_array(m, i, &items, n) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "%s: argument %u must be a list of "
                   "keys", proto_op_name((int)m->op), i + 1);
    return -1;
  }
  if (*n > c->srv->cfg.max_keys) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "%s: %u keys over the limit of %u",
                   proto_op_name((int)m->op), *n, c->srv->cfg.max_keys);
    return -1;
  }
  if ((k = malloc((*n ? *n : 1) * sizeof(*k))) == NULL) {
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return -1;
  }
  for (uint32_t j = 0; j < *n; j++) {
    const char *p;
    size_t len;
    if (proto_obj_bytes(&items[j], &p, &len) != 0 ||
        len > c->srv->cfg.max_key) {
      free(k);
      srv__reply_err(c, m->id, RDZV_EPROTO, "%s: key %u is not bytes or is "
                     "over %u bytes", proto_op_name((int)m->op), j + 1,
                     c->srv->cfg.max_key);
      return -1;
    }
    k[j].p = p;
    k[j].n = len;
  }
  *keys = k;
  return 0;
}

static void reply_store_err(conn_t *c, const proto_msg_t *m, int rc) {
  if (rc == RDZV_ETOOBIG)
    srv__reply_err(c, m->id, rc, "store of job '%s' is full (%zu bytes); "
                   "delete keys or raise --max-store-bytes", c->job->name,
                   store_bytes(c->job->store));
  else if (rc == RDZV_ENOTNUM)
    srv__reply_err(c, m->id, rc, "the key's value is not a decimal integer");
  else
    srv__reply_err(c, m->id, rc, "%s", rdzv_strerror(rc));
}

/* ---- pending ops -------------------------------------------------------------------- */

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
  free(p);
}

/* Reply with the values of p's keys (GET: one value; MGET: a list). */
static void reply_values(conn_t *c, uint64_t id, int op,
                         const store_key_t *keys, uint32_t n) {
  store_t *st = c->job->store;
  srv__reply_begin(c, id, 0, 1);
  if (op == PROTO_OP_MGET)
    msgpack_pack_array(&c->out.pk, n);
  for (uint32_t i = 0; i < n; i++) {
    size_t vlen = 0;
    const uint8_t *v = store_get(st, keys[i].p, keys[i].n, &vlen);
    if (v)
      proto_pack_bytes(&c->out.pk, v, vlen);
    else
      msgpack_pack_nil(&c->out.pk);
  }
  srv__reply_end(c);
}

static void pend_wake(store_waiter_t *w, void *data) {
  pend_t *p = data;
  (void)w;
  p->w = NULL; /* freed by the store after this callback */
  if (p->op == PROTO_OP_GET || p->op == PROTO_OP_MGET)
    reply_values(p->c, p->reqid, p->op, p->keys, p->nkeys);
  else
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

void srv__native_pend_timeout(pend_t *p) {
  conn_t *c = p->c;
  uint32_t missing = p->w ? store_wait_remaining(p->w) : 0;
  if (p->w)
    store_wait_cancel(p->w);
  if (p->bw)
    store_barrier_cancel(p->bw);
  p->w = NULL;
  p->bw = NULL;
  if (p->op == PROTO_OP_BARRIER)
    srv__reply_err(c, p->reqid, -ETIMEDOUT, "barrier timed out");
  else
    srv__reply_err(c, p->reqid, -ETIMEDOUT, "%s timed out with %u of %u keys "
                   "missing", proto_op_name(p->op), missing,
                   p->nkeys ? p->nkeys : missing);
  pend_free(p);
}

static pend_t *pend_new(conn_t *c, const proto_msg_t *m) {
  pend_t *p;
  if (c->npend >= c->srv->cfg.max_waits) {
    srv__reply_err(c, m->id, RDZV_ELIMIT, "more than %u pending waits on one "
                   "connection", c->srv->cfg.max_waits);
    return NULL;
  }
  if ((p = calloc(1, sizeof(*p))) == NULL) {
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return NULL;
  }
  p->c = c;
  p->reqid = m->id;
  p->op = (int)m->op;
  p->heap_idx = SIZE_MAX;
  list_insert_tail(&c->pends, &p->link);
  c->npend++;
  c->srv->stats.waits_pending++;
  return p;
}

/* Copy keys that must outlive the frame (the reply needs them). */
static int pend_copy_keys(pend_t *p, const store_key_t *keys, uint32_t n) {
  p->keys = calloc(n ? n : 1, sizeof(*p->keys));
  if (p->keys == NULL)
    return -1;
  p->nkeys = n;
  for (uint32_t i = 0; i < n; i++) {
    void *d = malloc(keys[i].n ? keys[i].n : 1);
    if (d == NULL)
      return -1;
    memcpy(d, keys[i].p, keys[i].n);
    p->keys[i].p = d;
    p->keys[i].n = keys[i].n;
  }
  return 0;
}

/* Wait for keys (GET, WAIT, MGET), replying now when they exist. */
static void wait_keys(conn_t *c, const proto_msg_t *m, store_key_t *keys,
                      uint32_t n, int64_t wait_ms) {
  store_t *st = c->job->store;
  int all = 1;
  pend_t *p;
  int rc;
  for (uint32_t i = 0; i < n && all; i++)
    all = store_exists(st, keys[i].p, keys[i].n);
  if (all) {
    if (m->op == PROTO_OP_WAIT)
      srv__reply_ok(c, m->id);
    else
      reply_values(c, m->id, (int)m->op, keys, n);
    return;
  }
  if (wait_ms == 0) {
    if (m->op == PROTO_OP_GET)
      srv__reply_err(c, m->id, RDZV_ENOKEY, "key not found");
    else
      srv__reply_err(c, m->id, -ETIMEDOUT, "keys missing");
    return;
  }
  if ((p = pend_new(c, m)) == NULL)
    return;
  if ((m->op != PROTO_OP_WAIT && pend_copy_keys(p, keys, n) != 0) ||
      srv__pend_arm(c->srv, p, wait_ms) != 0) {
    pend_free(p);
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
    return;
  }
  if (m->op == PROTO_OP_WAIT)
    p->nkeys = 0;
  rc = store_wait(st, keys, n, STORE_WAIT_EXISTS, 0, pend_wake, p, &p->w);
  if (rc != 0) {
    /* rc == 1 cannot happen: the keys were just found missing. */
    pend_free(p);
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
  }
}

/* ---- handlers ---------------------------------------------------------------------- */

static void op_ping(conn_t *c, const proto_msg_t *m) { srv__reply_ok(c, m->id); }

static void op_set(conn_t *c, const proto_msg_t *m) {
  const char *k, *v;
  size_t kn, vn;
  int rc;
  if (arg_key(c, m, 0, &k, &kn) || arg_value(c, m, 1, &v, &vn))
    return;
  rc = m->op == PROTO_OP_APPEND ? store_append(c->job->store, k, kn, v, vn)
                                : store_set(c->job->store, k, kn, v, vn);
  if (rc)
    reply_store_err(c, m, rc);
  else
    srv__reply_ok(c, m->id);
}

static void op_get(conn_t *c, const proto_msg_t *m) {
  store_key_t k;
  int64_t wait_ms = 0;
  const char *p;
  if (arg_key(c, m, 0, &p, &k.n))
    return;
  k.p = p;
  if (m->nargs > 1 && arg_int(c, m, 1, &wait_ms))
    return;
  wait_keys(c, m, &k, 1, wait_ms);
}

static void op_wait_or_mget(conn_t *c, const proto_msg_t *m) {
  store_key_t *keys;
  uint32_t n;
  int64_t wait_ms = -1;
  if (arg_keys(c, m, 0, &keys, &n))
    return;
  if (m->nargs > 1 && arg_int(c, m, 1, &wait_ms)) {
    free(keys);
    return;
  }
  wait_keys(c, m, keys, n, wait_ms);
  free(keys);
}

static void op_check(conn_t *c, const proto_msg_t *m) {
  store_key_t *keys;
  uint32_t n;
  int ready = 1;
  if (arg_keys(c, m, 0, &keys, &n))
    return;
  for (uint32_t i = 0; i < n && ready; i++)
    ready = store_exists(c->job->store, keys[i].p, keys[i].n);
  free(keys);
  srv__reply_begin(c, m->id, 0, 1);
  if (ready)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  srv__reply_end(c);
}

static void op_add(conn_t *c, const proto_msg_t *m) {
  const char *k;
  size_t kn;
  int64_t delta, res = 0;
  int rc;
  if (arg_key(c, m, 0, &k, &kn) || arg_int(c, m, 1, &delta))
    return;
  if ((rc = store_add(c->job->store, k, kn, delta, &res)) != 0) {
    reply_store_err(c, m, rc);
    return;
  }
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_int64(&c->out.pk, res);
  srv__reply_end(c);
}

static void op_cas(conn_t *c, const proto_msg_t *m) {
  const char *k, *e, *d;
  size_t kn, en, dn, vlen = 0;
  int absent, swapped, rc;
  const uint8_t *v;
  if (arg_key(c, m, 0, &k, &kn))
    return;
  if (proto_arg_bytes_or_nil(m, 1, &e, &en, &absent) != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "compare_set: expected value must "
                   "be bytes or nil");
    return;
  }
  if (check_value(c, m, en) || arg_value(c, m, 2, &d, &dn))
    return;
  rc = store_cas(c->job->store, k, kn, e, en, absent, d, dn, &swapped);
  if (rc) {
    reply_store_err(c, m, rc);
    return;
  }
  v = store_get(c->job->store, k, kn, &vlen);
  srv__reply_begin(c, m->id, 0, 2);
  if (v)
    proto_pack_bytes(&c->out.pk, v, vlen);
  else
    msgpack_pack_nil(&c->out.pk);
  if (swapped)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  srv__reply_end(c);
}

static void op_delete(conn_t *c, const proto_msg_t *m) {
  const char *k;
  size_t kn;
  int r;
  if (arg_key(c, m, 0, &k, &kn))
    return;
  r = store_delete(c->job->store, k, kn);
  srv__reply_begin(c, m->id, 0, 1);
  if (r)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  srv__reply_end(c);
}

static void op_numkeys(conn_t *c, const proto_msg_t *m) {
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_uint64(&c->out.pk, store_num_keys(c->job->store));
  srv__reply_end(c);
}

static void op_mset(conn_t *c, const proto_msg_t *m) {
  const msgpack_object *items;
  uint32_t n;
  int rc = 0;
  if (proto_arg_array(m, 0, &items, &n) != 0 || n % 2 != 0) {
    srv__reply_err(c, m->id, RDZV_EPROTO, "multi_set: argument must be a list "
                   "[key, value, key, value, ...]");
    return;
  }
  if (n / 2 > c->srv->cfg.max_keys) {
    srv__reply_err(c, m->id, RDZV_ETOOBIG, "multi_set: %u keys over the limit "
                   "of %u", n / 2, c->srv->cfg.max_keys);
    return;
  }
  /* Check everything first so that a bad pair stores nothing. */
  for (uint32_t i = 0; i < n; i += 2) {
    const char *k, *v;
    size_t kn, vn;
    if (proto_obj_bytes(&items[i], &k, &kn) != 0 ||
        proto_obj_bytes(&items[i + 1], &v, &vn) != 0) {
      srv__reply_err(c, m->id, RDZV_EPROTO, "multi_set: pair %u is not bytes",
                     i / 2 + 1);
      return;
    }
    if (kn > c->srv->cfg.max_key || vn > c->srv->cfg.max_value) {
      srv__reply_err(c, m->id, RDZV_ETOOBIG, "multi_set: pair %u over the key "
                     "or value limit", i / 2 + 1);
      return;
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
}

static void op_barrier(conn_t *c, const proto_msg_t *m) {
  const char *name;
  size_t nn;
  int64_t count, wait_ms = -1;
  pend_t *p;
  int rc;
  if (arg_key(c, m, 0, &name, &nn) || arg_int(c, m, 1, &count))
    return;
  if (m->nargs > 2 && arg_int(c, m, 2, &wait_ms))
    return;
  if (count <= 0 || count > UINT32_MAX) {
    srv__reply_err(c, m->id, RDZV_EINVAL, "barrier: count must be positive");
    return;
  }
  if ((p = pend_new(c, m)) == NULL)
    return;
  rc = store_barrier(c->job->store, name, nn, (uint32_t)count,
                     pend_barrier_open, p, &p->bw);
  if (rc == 1) {
    pend_free(p);
    srv__reply_ok(c, m->id);
    return;
  }
  if (rc == RDZV_EINVAL) {
    pend_free(p);
    srv__reply_err(c, m->id, rc, "barrier '%.*s': count %lld differs from "
                   "the count other members gave", (int)LU_MIN(nn, 64), name,
                   (long long)count);
    return;
  }
  if (rc != 0 || srv__pend_arm(c->srv, p, wait_ms) != 0) {
    if (p->bw)
      store_barrier_cancel(p->bw);
    p->bw = NULL;
    pend_free(p);
    srv__reply_err(c, m->id, RDZV_ENOMEM, "out of memory");
  }
}

struct list_ctx {
  conn_t *c;
  const char *prefix;
  size_t plen;
  uint32_t n;
  int count_only;
};

static void list_cb(const void *key, size_t klen, const uint8_t *val,
                    size_t vlen, void *arg) {
  struct list_ctx *x = arg;
  (void)val;
  (void)vlen;
  if (klen < x->plen || memcmp(key, x->prefix, x->plen) != 0)
    return;
  if (x->count_only)
    x->n++;
  else
    proto_pack_bytes(&x->c->out.pk, key, klen);
}

static void op_list(conn_t *c, const proto_msg_t *m) {
  struct list_ctx x = {c, "", 0, 0, 1};
  if (m->nargs > 0 && arg_key(c, m, 0, &x.prefix, &x.plen))
    return;
  store_foreach(c->job->store, list_cb, &x);
  srv__reply_begin(c, m->id, 0, 1);
  msgpack_pack_array(&c->out.pk, x.n);
  x.count_only = 0;
  store_foreach(c->job->store, list_cb, &x);
  srv__reply_end(c);
}

static void op_cancel(conn_t *c, const proto_msg_t *m) {
  int64_t target;
  list_t *it;
  int found = 0;
  if (arg_int(c, m, 0, &target))
    return;
  for (it = c->pends.next; it != &c->pends; it = it->next) {
    pend_t *p = LIST_ENTRY(it, pend_t, link);
    if (p->reqid == (uint64_t)target) {
      if (p->w)
        store_wait_cancel(p->w);
      if (p->bw)
        store_barrier_cancel(p->bw);
      p->w = NULL;
      p->bw = NULL;
      srv__reply_err(c, p->reqid, RDZV_ECANCELED, "canceled by the client");
      pend_free(p);
      found = 1;
      break;
    }
  }
  srv__reply_begin(c, m->id, 0, 1);
  if (found)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  srv__reply_end(c);
}

typedef void (*op_fn)(conn_t *c, const proto_msg_t *m);

static op_fn op_table(int64_t op) {
  switch (op) {
  case PROTO_OP_PING: return op_ping;
  case PROTO_OP_SET: return op_set;
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

void srv__native_hello_challenge(conn_t *c) {
  if (lu_random(c->nonce, sizeof(c->nonce)) != 0) {
    /* Without randomness authentication is meaningless; refuse. */
    c->broken = 1;
    srv__mark_dirty(c);
    return;
  }
  srv__push_begin(c, PROTO_EV_CHALLENGE, 3);
  proto_pack_bytes(&c->out.pk, c->nonce, sizeof(c->nonce));
  msgpack_pack_uint32(&c->out.pk, RDZV_PROTOCOL_VERSION);
  if (c->srv->token)
    msgpack_pack_true(&c->out.pk);
  else
    msgpack_pack_false(&c->out.pk);
  srv__reply_end(c);
}

static int copy_str(const char *p, size_t n, char *out, size_t cap) {
  if (n == 0 || n >= cap || memchr(p, '\0', n) != NULL)
    return -1;
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

static void op_hello(conn_t *c, const proto_msg_t *m) {
  srv_t *s = c->srv;
  int64_t version;
  const char *p;
  size_t n;
  char role[16], job[256];
  const char *proof = NULL, *cnonce = NULL;
  size_t proof_n = 0, cnonce_n = 0;
  int nil;
  job_t *j;
  uint8_t mac[PROTO_MAC_LEN];

  if (proto_arg_i64(m, 0, &version) != 0) {
    srv__bad_input(c, "malformed HELLO");
    srv__reply_err(c, m->id, RDZV_EPROTO, "malformed HELLO");
    c->close_after_flush = 1;
    return;
  }
  if (version != RDZV_PROTOCOL_VERSION) {
    srv__bad_input(c, "HELLO with protocol version %lld (server speaks %d)",
                   (long long)version, RDZV_PROTOCOL_VERSION);
    srv__reply_err(c, m->id, RDZV_EVERSION, "this server speaks protocol "
                   "version %d, the client %lld: use the same launch release "
                   "on every node", RDZV_PROTOCOL_VERSION, (long long)version);
    c->close_after_flush = 1;
    return;
  }
  if (proto_arg_bytes(m, 1, &p, &n) != 0 || copy_str(p, n, role, sizeof(role)) ||
      proto_arg_bytes(m, 2, &p, &n) != 0 || copy_str(p, n, job, sizeof(job)) ||
      proto_arg_bytes_or_nil(m, 3, &proof, &proof_n, &nil) != 0 ||
      proto_arg_bytes_or_nil(m, 4, &cnonce, &cnonce_n, &nil) != 0 ||
      cnonce_n > PROTO_NONCE_LEN) {
    srv__bad_input(c, "malformed HELLO");
    srv__reply_err(c, m->id, RDZV_EPROTO, "malformed HELLO: expected "
                   "[version, role, job, proof, nonce]");
    c->close_after_flush = 1;
    return;
  }
  if (s->token) {
    if (proto_mac(s->token, s->cfg.token_len, "rdzv-client", c->nonce,
                  sizeof(c->nonce), job, role, mac) != 0 ||
        proof == NULL || proof_n != PROTO_MAC_LEN ||
        !proto_mac_equal(mac, (const uint8_t *)proof, PROTO_MAC_LEN)) {
      srv__bad_input(c, "authentication failed for job '%s' (role %s)", job,
                     role);
      srv__reply_err(c, m->id, RDZV_EAUTH, "authentication failed: this "
                     "server requires a token; give every node the same "
                     "--token-file");
      c->close_after_flush = 1;
      return;
    }
  }
  if ((j = srv__job(s, job, strlen(job))) == NULL) {
    srv__reply_err(c, m->id, RDZV_ELIMIT, "cannot create job '%s': %u jobs "
                   "exist, the limit", job, s->cfg.max_jobs);
    c->close_after_flush = 1;
    return;
  }
  if (j->nconns >= s->cfg.max_conns_per_job) {
    srv__bad_input(c, "job '%s' has %u connections, the limit", job,
                   j->nconns);
    srv__reply_err(c, m->id, RDZV_ELIMIT, "job '%s' has too many connections "
                   "(%u)", job, j->nconns);
    c->close_after_flush = 1;
    return;
  }
  c->job = j;
  j->nconns++;
  lu_strlcpy(c->role, role, sizeof(c->role));
  c->state = CONN_NATIVE;
  srv__reply_begin(c, m->id, 0, 1);
  if (s->token && cnonce_n > 0 &&
      proto_mac(s->token, s->cfg.token_len, "rdzv-server",
                (const uint8_t *)cnonce, cnonce_n, job, role, mac) == 0)
    proto_pack_bytes(&c->out.pk, mac, sizeof(mac));
  else
    msgpack_pack_nil(&c->out.pk);
  srv__reply_end(c);
}

/* ---- dispatch ----------------------------------------------------------------------- */

void srv__native_frame(conn_t *c, const uint8_t *body, size_t n) {
  proto_msg_t m;
  int rc = proto_decode(body, n, &c->srv->plim, &m);
  op_fn fn;
  if (rc != 0) {
    srv__bad_input(c, "%s frame of %zu bytes; closing",
                   rc == RDZV_ETOOBIG ? "oversized or too deeply nested"
                                      : "malformed",
                   n);
    srv__conn_close(c);
    return;
  }
  if (m.kind != PROTO_REQUEST) {
    srv__bad_input(c, "frame of kind %d where a request was expected; "
                      "closing", m.kind);
    proto_msg_free(&m);
    srv__conn_close(c);
    return;
  }
  if (c->state == CONN_HELLO) {
    if (m.op != PROTO_OP_HELLO) {
      srv__bad_input(c, "%s before HELLO; closing", proto_op_name((int)m.op));
      srv__reply_err(c, m.id, RDZV_EPROTO, "the first request must be HELLO");
      c->close_after_flush = 1;
    } else {
      op_hello(c, &m);
    }
    proto_msg_free(&m);
    return;
  }
  if (m.op == PROTO_OP_HELLO) {
    srv__reply_err(c, m.id, RDZV_EPROTO, "HELLO sent twice");
  } else if (m.op >= PROTO_OP_JOIN) {
    if (c->srv->rdv_op)
      c->srv->rdv_op(c, &m);
    else
      srv__reply_err(c, m.id, RDZV_ENOTSUP, "%s: this server has no "
                     "rendezvous module", proto_op_name((int)m.op));
  } else if ((fn = op_table(m.op)) != NULL) {
    fn(c, &m);
  } else {
    srv__reply_err(c, m.id, RDZV_EPROTO, "unknown op %lld", (long long)m.op);
  }
  proto_msg_free(&m);
}

void srv__native_conn_closed(conn_t *c) {
  while (!list_empty(&c->pends)) {
    pend_t *p = LIST_ENTRY(c->pends.next, pend_t, link);
    if (p->w)
      store_wait_cancel(p->w);
    if (p->bw)
      store_barrier_cancel(p->bw);
    p->w = NULL;
    p->bw = NULL;
    pend_free(p);
  }
  if (c->srv->rdv_conn_closed)
    c->srv->rdv_conn_closed(c);
}
