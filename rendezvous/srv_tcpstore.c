/* srv_tcpstore.c - the TCPStore dialects (1.13 and >= 2.2): run parsed
 * requests against a job's store and write the replies in TCPStore's
 * encoding (little-endian integers). TCPStore has no error reply: a
 * request the server refuses closes the connection, as PyTorch's own
 * server does. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lu_bigbuf.h"
#include "srv_int.h"
#include "tcpstore.h"

/* ---- replies ------------------------------------------------------------------ */

static void out_raw(conn_t *c, const void *p, size_t n) {
  srv__out_raw(c, p, n);
}

static void out_u8(conn_t *c, uint8_t v) { out_raw(c, &v, 1); }

static void out_u64(conn_t *c, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  out_raw(c, b, 8);
}

static void out_u32(conn_t *c, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  out_raw(c, b, 4);
}

static void out_bytes(conn_t *c, const void *p, uint64_t n) {
  out_u64(c, n);
  if (n)
    out_raw(c, p, (size_t)n);
}

/* ---- waits --------------------------------------------------------------------- */

enum { STOP_WAITING = 0, WAIT_CANCELED = 1 };
enum { READY = 0, NOT_READY = 1 };
enum { KEY_CALLBACK_REGISTERED = 3 };

static void ts_forget_wait(conn_t *c, store_waiter_t *w) {
  for (uint32_t i = 0; i < c->ts_nwaits; i++)
    if (c->ts_waits[i] == w) {
      c->ts_waits[i] = c->ts_waits[--c->ts_nwaits];
      c->npend--;
      c->srv->stats.waits_pending--;
      return;
    }
}

static void ts_wait_done(store_waiter_t *w, void *data) {
  conn_t *c = data;
  ts_forget_wait(c, w);
  out_u8(c, STOP_WAITING);
}

/* A limit refused c's request: limit_hit for the server's owner. */
#define TS_LIMIT_HIT(c, lim, val, ...)                                         \
  srv__limit_hit((c)->srv, SRV_LIMIT_##lim, (val),                             \
                 (c)->job ? (c)->job->name : NULL, (c)->peer, __VA_ARGS__)

/* Register a wait; RET 0 when registered or answered, -1 to close. */
static int ts_start_wait(conn_t *c, const store_key_t *keys, uint32_t n,
                         int kind, int64_t threshold) {
  store_waiter_t *w;
  int rc;
  if (c->npend >= c->srv->cfg.max_waits) {
    srv__bad_input(c, "more than %u pending waits on one connection",
                   c->srv->cfg.max_waits);
    TS_LIMIT_HIT(c, MAX_WAITS, c->srv->cfg.max_waits, "a TCPStore wait: the "
                 "connection was closed");
    return -1;
  }
  if (c->ts_nwaits == c->ts_capwaits) {
    uint32_t ncap = c->ts_capwaits ? c->ts_capwaits * 2 : 4;
    store_waiter_t **nw = realloc(c->ts_waits, ncap * sizeof(*nw));
    if (nw == NULL)
      return -1;
    c->ts_waits = nw;
    c->ts_capwaits = ncap;
  }
  rc = store_wait(c->job->store, keys, n, kind, threshold, ts_wait_done, c,
                  &w);
  if (rc == RDZV_ETOOBIG) {
    srv__bad_input(c, "TCPStore wait refused: job '%s' store is full (%zu "
                      "bytes, waits included); closing", c->job->name,
                   store_bytes(c->job->store));
    TS_LIMIT_HIT(c, MAX_STORE_BYTES, c->srv->cfg.max_store_bytes, "a TCPStore "
                 "wait: the job's store holds %zu bytes",
                 store_bytes(c->job->store));
    return -1;
  }
  if (rc < 0)
    return -1;
  if (rc == 1) {
    out_u8(c, STOP_WAITING);
    return 0;
  }
  c->ts_waits[c->ts_nwaits++] = w;
  c->npend++;
  c->srv->stats.waits_pending++;
  return 0;
}

static void ts_cancel_waits(conn_t *c) {
  while (c->ts_nwaits > 0) {
    store_wait_cancel(c->ts_waits[c->ts_nwaits - 1]);
    c->ts_nwaits--;
    c->npend--;
    c->srv->stats.waits_pending--;
  }
}

/* ---- the round's namespace --------------------------------------------------- */

/* Since PyTorch 2.5 a worker's TCPStore keys carry no per-attempt prefix:
 * torchrun hands every retry a fresh store. Here every round of a job with
 * rounds is a namespace of the job's store, RDZV_TORCH_NS "<round>/", that
 * a TCPStore connection takes when it attaches: its keys are written and
 * read with that prefix, and the keys it is shown (LIST_KEYS, watch
 * events, the key count) are its namespace's, without it. */

/* A TCPStore client attached to c->job (the dialect's start): it works in
 * the namespace of the job's current round (none for a job without
 * rounds). */
static void ts_attach(conn_t *c) {
  int n = 0;
  if (c->job->ts_round >= 0)
    n = snprintf(c->ts_ns, sizeof(c->ts_ns), RDZV_TORCH_NS "%" PRId64 "/",
                 c->job->ts_round);
  c->ts_nslen = (uint8_t)(n > 0 && (size_t)n < sizeof(c->ts_ns) ? n : 0);
}

struct ns_drop {
  store_key_t *keys;
  size_t n, cap;
  char keep[32];
  size_t keeplen;
};

/* An earlier round's key: in another round's TCPStore namespace, or a
 * native progress key (RDZV_PROGRESS_PREFIX), which has no round in its
 * name: left there, a rank the new round no longer has (after the job
 * shrank) or one that has not reported yet would be shown by `launch
 * status` with its old step (docs/events.md#progress). */
static int ns_stale(const struct ns_drop *d, const char *key, size_t klen) {
  size_t plen = sizeof(RDZV_TORCH_NS) - 1;
  size_t pplen = sizeof(RDZV_PROGRESS_PREFIX) - 1;
  if (klen >= pplen && memcmp(key, RDZV_PROGRESS_PREFIX, pplen) == 0)
    return 1;
  return klen >= plen && memcmp(key, RDZV_TORCH_NS, plen) == 0 &&
         !(klen >= d->keeplen && memcmp(key, d->keep, d->keeplen) == 0);
}

static void ns_collect_key(const void *key, size_t klen, void *arg) {
  struct ns_drop *d = arg;
  if (!ns_stale(d, key, klen))
    return;
  if (d->n == d->cap) {
    size_t ncap = d->cap ? d->cap * 2 : 16;
    store_key_t *nk = realloc(d->keys, ncap * sizeof(*nk));
    if (nk == NULL)
      return; /* what is not collected stays until the job ends */
    d->keys = nk;
    d->cap = ncap;
  }
  if ((d->keys[d->n].p = malloc(klen ? klen : 1)) == NULL)
    return;
  memcpy((void *)d->keys[d->n].p, key, klen);
  d->keys[d->n].n = klen;
  d->n++;
}

static void ns_collect(const void *key, size_t klen, const uint8_t *val,
                       size_t vlen, void *arg) {
  (void)val;
  (void)vlen;
  ns_collect_key(key, klen, arg);
}

void srv__ts_new_round(job_t *j, int64_t round) {
  struct ns_drop d;
  memset(&d, 0, sizeof(d));
  j->ts_round = round;
  d.keeplen = (size_t)snprintf(d.keep, sizeof(d.keep), RDZV_TORCH_NS
                               "%" PRId64 "/", round);
  store_foreach(j->store, ns_collect, &d);
  /* queues too (QUEUE_PUSH): a key may be collected twice, harmlessly */
  store_foreach_queue(j->store, ns_collect_key, &d);
  for (size_t i = 0; i < d.n; i++) {
    store_delete(j->store, d.keys[i].p, d.keys[i].n);
    store_queue_clear(j->store, d.keys[i].p, d.keys[i].n);
    free((void *)d.keys[i].p);
  }
  free(d.keys);
}

/* Room for n bytes of the connection's namespaced request; a buffer above
 * NS_KEEP is freed once its request is done. */
#define NS_KEEP (64u << 10)
static uint8_t *ns_room(conn_t *c, size_t n) {
  if (n > c->ts_nscap) {
    uint8_t *b = realloc(c->ts_nsbuf, n);
    if (b == NULL)
      return NULL;
    c->ts_nsbuf = b;
    c->ts_nscap = n;
  }
  return c->ts_nsbuf;
}

static uint8_t *ns_put(const conn_t *c, uint8_t *p, const uint8_t *k,
                       uint64_t kl) {
  memcpy(p, c->ts_ns, c->ts_nslen);
  if (kl)
    memcpy(p + c->ts_nslen, k, (size_t)kl);
  return p + c->ts_nslen + kl;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v);

/* r's keys in the connection's namespace (the values stay where they
 * are, except MULTI_SET's, copied with their keys). RET -1 when out of
 * memory. */
static int ns_apply(conn_t *c, ts_req_t *r) {
  uint64_t pl = c->ts_nslen;
  uint8_t *p;
  switch (r->op) {
  case TS_VALIDATE:
  case TS_PING:
  case TS_GETNUMKEYS:
  case TS_CANCEL_WAIT:
  case TS_LIST_KEYS:
    return 0;
  case TS_CHECK:
  case TS_WAIT:
  case TS_MULTI_GET:
  case TS_MULTI_SET: {
    /* the list again, each key with the prefix: the request's bytes and a
     * prefix per key at the most */
    const uint8_t *q = r->list;
    uint8_t *start;
    if ((start = ns_room(c, r->size + (size_t)r->count * pl)) == NULL)
      return -1;
    p = start;
    for (uint64_t i = 0; i < r->count; i++) {
      uint64_t kl, vl;
      const uint8_t *k = ts_next_str(&q, &kl);
      p = put_u64(p, pl + kl);
      p = ns_put(c, p, k, kl);
      if (r->op == TS_MULTI_SET) {
        const uint8_t *v = ts_next_str(&q, &vl);
        p = put_u64(p, vl);
        if (vl)
          memcpy(p, v, (size_t)vl);
        p += vl;
      }
    }
    r->list = start;
    return 0;
  }
  default: /* one key */
    if ((p = ns_room(c, pl + r->klen)) == NULL)
      return -1;
    ns_put(c, p, r->key, r->klen);
    r->key = p;
    r->klen += pl;
    return 0;
  }
}

/* Is this store key in the connection's namespace? (Every key is, for a
 * connection without one.) */
static int ns_mine(const conn_t *c, const void *key, size_t klen) {
  return klen >= c->ts_nslen && memcmp(key, c->ts_ns, c->ts_nslen) == 0;
}

static void ns_count(const void *key, size_t klen, const uint8_t *val,
                     size_t vlen, void *arg) {
  struct {
    const conn_t *c;
    uint64_t n;
  } *x = arg;
  (void)val;
  (void)vlen;
  x->n += ns_mine(x->c, key, klen);
}

/* The keys a TCPStore GETNUMKEYS counts: the namespace's. */
static uint64_t ns_num_keys(conn_t *c) {
  struct {
    const conn_t *c;
    uint64_t n;
  } x = {c, 0};
  if (c->ts_nslen == 0)
    return store_num_keys(c->job->store);
  store_foreach(c->job->store, ns_count, &x);
  return x.n;
}

/* ---- watch events ------------------------------------------------------------ */

/* A large watch event (a SET of 1 MiB sends the old and the new value) is
 * encoded once for all the key's watchers and copied into each watcher's
 * output in that watcher's own turn: the writer's request no longer copies
 * it once per watcher. A watcher with events queued queues the small ones
 * too (its events keep their order) and runs no request until they are
 * written (its replies keep theirs). */
#define TS_EV_DEFER_MIN (256u << 10) /* events this large are queued */
/* Bytes a watcher writes per turn: an event of 2 MiB (a SET of 1 MiB over
 * another) goes out over several turns, so that no turn copies more than
 * this (about 0.1-0.3 ms of CPU). */
#define TS_EV_SLICE (256u << 10)

/* The event as TCPStore 1.13 sends it, len bytes: the type, the key and
 * the old value's length (data[0..head)); the old value (olen bytes at
 * old); the new value's length and the new value (data[tail..]). The old
 * value is not copied when the event could take its block from the store
 * (old_block, freed with the event); else it is copied to data[head..]. */
typedef struct ts_evblk_s {
  uint64_t id; /* store_watch_event_id */
  size_t refs; /* queued in this many connections */
  size_t len, head, olen, tail;
  const uint8_t *old;
  uint8_t *old_block;
  uint8_t data[];
} ts_evblk_t;

/* The contiguous bytes of b from offset off: at most *n. */
static const uint8_t *evblk_at(const ts_evblk_t *b, size_t off, size_t *n) {
  if (off < b->head) {
    *n = b->head - off;
    return b->data + off;
  }
  if (off < b->head + b->olen) {
    *n = b->head + b->olen - off;
    return b->old + (off - b->head);
  }
  *n = b->len - off;
  return b->data + b->tail + (off - b->head - b->olen);
}

typedef struct ts_evq_s {
  struct ts_evq_s *next;
  ts_evblk_t *b;
} ts_evq_t;

static uint8_t *put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    *p++ = (uint8_t)(v >> (8 * i));
  return p;
}

static uint8_t *put_bytes(uint8_t *p, const void *b, size_t n) {
  p = put_u64(p, n);
  if (n)
    memcpy(p, b, n);
  return p + n;
}

static void evblk_put(srv_t *s, ts_evblk_t *b) {
  if (--b->refs > 0)
    return;
  if (s->ts_evlast == b)
    s->ts_evlast = NULL;
  lu_big_free(b->old_block);
  lu_big_free(b);
}

/* The encoding of the event being delivered to w: the one another watcher
 * of it made, or a new one. RET NULL when out of memory. */
static ts_evblk_t *evblk_get(srv_t *s, store_watch_t *w, int ev,
                             const void *key, size_t klen, const uint8_t *old,
                             size_t olen, const uint8_t *nval, size_t nlen) {
  uint64_t id = store_watch_event_id(w);
  size_t head = 17 + klen;
  ts_evblk_t *b = s->ts_evlast;
  uint8_t *p, *old_block = NULL;
  if (b != NULL && b->id == id)
    return b;
  if ((b = lu_big_alloc(sizeof(*b) + head + 8 + nlen)) == NULL)
    return NULL;
  /* The old value's block, from the store (taken only once nothing can
   * fail): 1 MiB not copied onto fresh pages under the loops' lock (issue
   * #11). When the store cannot give it, the value is copied. */
  if (olen > 0 && (old_block = store_watch_take_old(w)) == NULL) {
    ts_evblk_t *nb = lu_big_realloc(b, sizeof(*b) + head + olen + 8 + nlen);
    if (nb == NULL) {
      lu_big_free(b);
      return NULL;
    }
    b = nb;
  }
  b->id = id;
  b->refs = 0;
  b->len = 25 + klen + olen + nlen;
  b->olen = olen;
  b->old_block = old_block;
  p = b->data;
  *p++ = (uint8_t)ev;
  p = put_bytes(p, key, klen);
  p = put_u64(p, olen);
  if (old_block != NULL) {
    b->old = old;
  } else {
    if (olen)
      memcpy(p, old, olen);
    b->old = p;
    p += olen;
  }
  b->head = head;
  b->tail = (size_t)(p - b->data);
  put_bytes(p, nval, nlen);
  s->ts_evlast = b;
  return b;
}

/* Write queued events, a slice per turn; a large event may be cut between
 * turns (nothing else is written to the connection in between: its own
 * events queue behind it and its requests wait, see ts_watch_cb). */
static void ts_resume(conn_t *c) {
  size_t done = 0;
  while (c->ts_evq != NULL && done < TS_EV_SLICE) {
    ts_evq_t *q = c->ts_evq;
    size_t n = q->b->len - c->ts_evoff;
    if (n > TS_EV_SLICE - done)
      n = TS_EV_SLICE - done;
    c->out_deferred -= n;
    done += n;
    while (n > 0) {
      size_t span;
      const uint8_t *p = evblk_at(q->b, c->ts_evoff, &span);
      if (span > n)
        span = n;
      out_raw(c, p, span);
      c->ts_evoff += span;
      n -= span;
    }
    if (c->ts_evoff < q->b->len)
      break;
    c->ts_evoff = 0;
    if ((c->ts_evq = q->next) == NULL)
      c->ts_evq_tail = NULL;
    evblk_put(c->srv, q->b);
    free(q);
  }
  if (c->ts_evq != NULL)
    srv__defer(c);
}

static void ts_drop_events(conn_t *c) {
  while (c->ts_evq != NULL) {
    ts_evq_t *q = c->ts_evq;
    c->ts_evq = q->next;
    c->out_deferred -= q->b->len - c->ts_evoff;
    c->ts_evoff = 0;
    evblk_put(c->srv, q->b);
    free(q);
  }
  c->ts_evq_tail = NULL;
}

static void ts_watch_cb(store_watch_t *w, int ev, const void *key, size_t klen,
                        const uint8_t *old, size_t olen, const uint8_t *nval,
                        size_t nlen, void *data) {
  conn_t *c = data;
  ts_evblk_t *b;
  ts_evq_t *q;
  if (ev == STORE_EV_CREATED)
    olen = 0;
  if (ev == STORE_EV_DELETED)
    nlen = 0;
  if (ns_mine(c, key, klen)) { /* shown without the namespace */
    key = (const uint8_t *)key + c->ts_nslen;
    klen -= c->ts_nslen;
  }
  /* An event the watcher cannot take closes it: a writer is never held
   * back by a watcher that does not read. */
  if (!srv__push_room(c, 25 + klen + olen + nlen))
    return;
  if ((25 + klen + olen + nlen >= TS_EV_DEFER_MIN || c->ts_evq != NULL) &&
      (q = malloc(sizeof(*q))) != NULL) {
    if ((b = evblk_get(c->srv, w, ev, key, klen, old, olen, nval, nlen)) !=
        NULL) {
      b->refs++;
      q->b = b;
      q->next = NULL;
      if (c->ts_evq_tail)
        c->ts_evq_tail->next = q;
      else
        c->ts_evq = q;
      c->ts_evq_tail = q;
      c->out_deferred += b->len;
      srv__defer(c);
      return;
    }
    free(q);
  }
  if (c->ts_evq != NULL) {
    /* Out of memory for the queue: the events would go out of order. */
    srv__bad_input(c, "out of memory for its watch events; closing");
    c->broken = 1;
    srv__out_raw(c, "", 0); /* closed at its next flush */
    return;
  }
  out_u8(c, (uint8_t)ev);
  out_bytes(c, key, klen);
  out_bytes(c, old, olen);
  out_bytes(c, nval, nlen);
}

/* Collect the keys of a validated CHECK/WAIT/MULTI_GET list. */
static store_key_t *list_keys(const ts_req_t *r) {
  store_key_t *keys =
      lu_big_alloc((r->count ? r->count : 1) * sizeof(*keys));
  const uint8_t *p = r->list;
  if (keys == NULL)
    return NULL;
  for (uint64_t i = 0; i < r->count; i++) {
    uint64_t l;
    keys[i].p = ts_next_str(&p, &l);
    keys[i].n = (size_t)l;
    keys[i].h = 0;
  }
  return keys;
}

struct list_ctx {
  conn_t *c;   /* whose namespace */
  int write;   /* write the keys (else count their bytes) */
  size_t bytes;
};

static void list_one(const void *key, size_t klen, const uint8_t *val,
                     size_t vlen, void *arg) {
  struct list_ctx *x = arg;
  size_t pl = x->c->ts_nslen;
  (void)val;
  (void)vlen;
  if (!ns_mine(x->c, key, klen))
    return;
  if (x->write)
    out_bytes(x->c, (const uint8_t *)key + pl, klen - pl);
  else
    x->bytes += 8 + klen - pl;
}

/* Bytes of the reply to r, counted before anything runs (0: small). */
static size_t reply_size(conn_t *c, const ts_req_t *r) {
  store_t *st = c->job->store;
  size_t vlen = 0, sz = 0;
  switch (r->op) {
  case TS_GET:
    return 8 + (store_get(st, r->key, r->klen, &vlen) ? vlen : 0);
  case TS_COMPARE_SET:
    store_get(st, r->key, r->klen, &vlen);
    return 8 + LU_MAX(vlen, LU_MAX(r->v1len, r->v2len));
  case TS_QUEUE_POP:
    return 16 + (size_t)LU_MAX(store_queue_front_len(st, r->key, r->klen), 0);
  case TS_MULTI_GET: {
    /* the count stops once past the cap: such a reply is refused whatever
     * the rest of the list adds */
    const uint8_t *p = r->list;
    for (uint64_t i = 0; i < r->count && sz <= c->srv->cfg.max_out_bytes;
         i++) {
      uint64_t kl;
      const uint8_t *k = ts_next_str(&p, &kl);
      vlen = 0;
      sz += 8 + (store_get(st, k, kl, &vlen) ? vlen : 0);
    }
    return sz;
  }
  case TS_LIST_KEYS: {
    struct list_ctx x = {c, 0, 8};
    store_foreach(st, list_one, &x);
    return x.bytes;
  }
  default:
    return 0;
  }
}

/* ADD (and BARRIER's count) as PyTorch's server adds: the old value is
 * read with std::stoll, so " 12" or "12\n" counts as 12 where the store's
 * own ADD wants the bare integer; the sum is stored as the bare integer,
 * as PyTorch stores it. RET as store_add. */
static int ts_add(store_t *st, const uint8_t *key, uint64_t klen,
                  int64_t delta, int64_t *res) {
  const uint8_t *v;
  size_t vlen = 0;
  int64_t old, sum;
  char buf[32];
  int n, rc = store_add(st, key, (size_t)klen, delta, res);
  if (rc != RDZV_ENOTNUM)
    return rc;
  if ((v = store_get(st, key, (size_t)klen, &vlen)) == NULL ||
      ts_stoll(v, vlen, &old) != 0)
    return RDZV_ENOTNUM;
  /* Wrap like TCPStore's int64 arithmetic does, without UB. */
  sum = (int64_t)((uint64_t)old + (uint64_t)delta);
  n = snprintf(buf, sizeof(buf), "%" PRId64, sum);
  if ((rc = store_set(st, key, (size_t)klen, buf, (size_t)n)) == 0)
    *res = sum;
  return rc;
}

/* Run one parsed request. RET 0, SRV_LATER (its reply does not fit now:
 * run it again later), or -1 to close the connection. */
static int ts_exec(conn_t *c, const ts_req_t *r) {
  store_t *st = c->job->store;
  const uint8_t *v;
  size_t vlen, need = reply_size(c, r);
  int rc = 0;

  if (need > 0) {
    int room = srv__out_room(c, need);
    if (room == SRV_ROOM_LATER)
      return SRV_LATER;
    if (room == SRV_ROOM_NEVER) {
      srv__bad_input(c, "TCPStore %s refused: its reply of %zu bytes is over "
                        "the %zu bytes of replies one connection may hold "
                        "(--max-out-bytes); closing",
                     ts_op_name(r->op), need, c->srv->cfg.max_out_bytes);
      TS_LIMIT_HIT(c, MAX_OUT_BYTES, c->srv->cfg.max_out_bytes, "TCPStore "
                   "%s: a reply of %zu bytes", ts_op_name(r->op), need);
      return -1;
    }
  }

  switch (r->op) {
  case TS_VALIDATE:
    if (r->u32 != TS_VALIDATION_MAGIC) {
      srv__bad_input(c, "TCPStore VALIDATE with wrong magic 0x%08x",
                     (unsigned)r->u32);
      return -1;
    }
    return 0;
  case TS_PING:
    out_u32(c, r->u32);
    return 0;
  case TS_SET:
    rc = srv__store_set(c, r->key, r->klen, r->v1, r->v1len);
    break;
  case TS_APPEND:
    /* --max-value bounds what APPEND makes as it bounds a SET: a value
     * past it could be stored but never read back whole */
    vlen = 0;
    (void)store_get(st, r->key, r->klen, &vlen);
    if ((uint64_t)vlen + r->v1len > c->srv->cfg.max_value) {
      srv__bad_input(c, "TCPStore APPEND would make a value of %" PRIu64
                        " bytes, over the max-value limit (%zu); closing",
                     (uint64_t)vlen + r->v1len, (size_t)c->srv->cfg.max_value);
      TS_LIMIT_HIT(c, MAX_VALUE, c->srv->cfg.max_value, "TCPStore APPEND to "
                   "a value of %" PRIu64 " bytes: the connection was closed",
                   (uint64_t)vlen + r->v1len);
      return -1;
    }
    rc = store_append(st, r->key, r->klen, r->v1, r->v1len);
    break;
  case TS_COMPARE_SET: {
    int swapped = 0;
    v = store_get(st, r->key, r->klen, &vlen);
    if (v == NULL && r->v1len != 0) {
      /* TCPStore's documented quirk: an absent key with a non-empty
       * expected value answers the expected value and stores nothing. */
      out_bytes(c, r->v1, r->v1len);
      return 0;
    }
    rc = store_cas(st, r->key, r->klen, r->v1, r->v1len, v == NULL, r->v2,
                   r->v2len, &swapped);
    if (rc != 0)
      break;
    v = store_get(st, r->key, r->klen, &vlen);
    out_bytes(c, v, v ? vlen : 0);
    return 0;
  }
  case TS_GET:
    v = store_get(st, r->key, r->klen, &vlen);
    out_bytes(c, v, v ? vlen : 0);
    return 0;
  case TS_ADD: {
    int64_t res = 0;
    rc = ts_add(st, r->key, r->klen, r->i64, &res);
    if (rc == RDZV_ENOTNUM) {
      srv__bad_input(c, "TCPStore ADD on key '%.*s' whose value is not an "
                        "integer", (int)LU_MIN(r->klen, 64), r->key);
      return -1;
    }
    if (rc == 0)
      out_u64(c, (uint64_t)res);
    break;
  }
  case TS_CHECK:
  case TS_WAIT:
  case TS_MULTI_GET: {
    store_key_t *keys = list_keys(r);
    if (keys == NULL)
      return -1;
    if (r->op == TS_CHECK) {
      int ready = 1;
      for (uint64_t i = 0; i < r->count && ready; i++)
        ready = store_exists(st, keys[i].p, keys[i].n);
      out_u8(c, ready ? READY : NOT_READY);
    } else if (r->op == TS_WAIT) {
      rc = ts_start_wait(c, keys, (uint32_t)r->count, STORE_WAIT_EXISTS, 0);
    } else {
      for (uint64_t i = 0; i < r->count; i++) {
        v = store_get(st, keys[i].p, keys[i].n, &vlen);
        out_bytes(c, v, v ? vlen : 0);
      }
    }
    lu_big_free(keys);
    return rc;
  }
  case TS_MULTI_SET: {
    const uint8_t *p = r->list;
    for (uint64_t i = 0; i < r->count && rc == 0; i++) {
      uint64_t kl, vl;
      const uint8_t *k = ts_next_str(&p, &kl);
      const uint8_t *val = ts_next_str(&p, &vl);
      rc = store_set(st, k, kl, val, vl);
    }
    break;
  }
  case TS_GETNUMKEYS:
    out_u64(c, ns_num_keys(c));
    return 0;
  case TS_DELETE_KEY:
    out_u64(c, (uint64_t)store_delete(st, r->key, r->klen));
    return 0;
  case TS_CANCEL_WAIT:
    ts_cancel_waits(c);
    out_u8(c, WAIT_CANCELED);
    return 0;
  case TS_QUEUE_PUSH:
    rc = store_queue_push(st, r->key, r->klen, r->v1, r->v1len);
    break;
  case TS_QUEUE_POP: {
    int64_t len = store_queue_len(st, r->key, r->klen);
    uint8_t *item = NULL;
    size_t ilen = 0;
    out_u64(c, (uint64_t)len);
    if (len > 0) {
      rc = store_queue_pop(st, r->key, r->klen, &item, &ilen);
      if (rc < 0)
        return -1;
      out_bytes(c, item, ilen);
      free(item);
    }
    return 0;
  }
  case TS_QUEUE_LEN:
    out_u64(c, (uint64_t)store_queue_len(st, r->key, r->klen));
    return 0;
  case TS_LIST_KEYS: {
    struct list_ctx x = {c, 1, 0};
    out_u64(c, ns_num_keys(c));
    store_foreach(st, list_one, &x);
    return 0;
  }
  case TS_BARRIER: {
    int64_t count = 0;
    store_key_t k = {r->key, (size_t)r->klen, 0};
    rc = ts_add(st, r->key, r->klen, 1, &count);
    if (rc == RDZV_ENOTNUM) {
      srv__bad_input(c, "TCPStore BARRIER on a non-integer key");
      return -1;
    }
    if (rc != 0)
      break;
    return ts_start_wait(c, &k, 1, STORE_WAIT_GE, r->i64);
  }
  case TS_WATCH_KEY: {
    store_watch_t *w;
    if (c->ts_nwatches >= c->srv->cfg.max_waits) {
      srv__bad_input(c, "more than %u watched keys on one connection",
                     c->srv->cfg.max_waits);
      TS_LIMIT_HIT(c, MAX_WAITS, c->srv->cfg.max_waits, "a TCPStore watch: "
                   "the connection was closed");
      return -1;
    }
    if (c->ts_nwatches == c->ts_capwatches) {
      uint32_t ncap = c->ts_capwatches ? c->ts_capwatches * 2 : 4;
      store_watch_t **nw = realloc(c->ts_watches, ncap * sizeof(*nw));
      if (nw == NULL)
        return -1;
      c->ts_watches = nw;
      c->ts_capwatches = ncap;
    }
    if ((rc = store_watch(st, r->key, r->klen, ts_watch_cb, c, &w)) != 0) {
      if (rc == RDZV_ETOOBIG) {
        srv__bad_input(c, "TCPStore WATCH_KEY refused: job '%s' store is "
                          "full (%zu bytes, watches included); closing",
                       c->job->name, store_bytes(st));
        TS_LIMIT_HIT(c, MAX_STORE_BYTES, c->srv->cfg.max_store_bytes,
                     "a TCPStore watch: the job's store holds %zu bytes",
                     store_bytes(st));
      }
      return -1;
    }
    c->ts_watches[c->ts_nwatches++] = w;
    out_u8(c, KEY_CALLBACK_REGISTERED);
    return 0;
  }
  default:
    return -1;
  }
  if (rc == RDZV_ETOOBIG) {
    srv__bad_input(c, "TCPStore %s refused: job '%s' store is full (%zu "
                      "bytes); closing", ts_op_name(r->op), c->job->name,
                   store_bytes(st));
    TS_LIMIT_HIT(c, MAX_STORE_BYTES, c->srv->cfg.max_store_bytes, "TCPStore "
                 "%s: the job's store holds %zu bytes", ts_op_name(r->op),
                 store_bytes(st));
    return -1;
  }
  return rc == 0 ? 0 : -1;
}

/* A request over one of the parser's limits (ts_parse's TS_TOO_BIG): the
 * log line, the refusal counter and limit_hit name that limit. The
 * connection is closed: what follows cannot be framed. */
static void ts_too_big(conn_t *c, const ts_req_t *r) {
  static const struct { int limit; const char *what, *unit; } lim[] = {
      [TS_LIMIT_KEY] = {SRV_LIMIT_MAX_KEY, "a key of ", "bytes"},
      [TS_LIMIT_VALUE] = {SRV_LIMIT_MAX_VALUE, "a value of ", "bytes"},
      [TS_LIMIT_KEYS] = {SRV_LIMIT_MAX_KEYS, "", "keys"},
      [TS_LIMIT_REQUEST] = {SRV_LIMIT_MAX_FRAME, "more than ", "bytes"},
  };
  srv_t *s = c->srv;
  int i = r->limit > TS_LIMIT_NONE && r->limit <= TS_LIMIT_REQUEST
              ? r->limit
              : TS_LIMIT_REQUEST;
  int l = lim[i].limit;
  uint64_t value = l == SRV_LIMIT_MAX_KEY     ? s->cfg.max_key
                   : l == SRV_LIMIT_MAX_VALUE ? s->cfg.max_value
                   : l == SRV_LIMIT_MAX_KEYS  ? s->cfg.max_keys
                                              : s->cfg.max_frame;
  srv__bad_input(c, "TCPStore %s of %s%" PRIu64 " %s, over the %s limit "
                    "(%" PRIu64 "); closing",
                 ts_op_name(r->op), lim[i].what, r->over, lim[i].unit,
                 srv_limit_name(l), value);
  srv__limit_hit(s, l, value, c->job ? c->job->name : NULL, c->peer,
                 "TCPStore %s of %s%" PRIu64 " %s: the connection was closed",
                 ts_op_name(r->op), lim[i].what, r->over, lim[i].unit);
}

static ssize_t ts_input(conn_t *c, const uint8_t *buf, size_t n) {
  int dialect = c->dialect == &srv__dialect_ts_v1 ? TS_DIALECT_V1
                                                  : TS_DIALECT_V2;
  size_t done = 0;
  while (done < n && c->state == CONN_READY && !srv__conn_paused(c)) {
    ts_req_t r;
    int rc;
    size_t need = 0;
    ssize_t k = ts_parse(dialect, buf + done, n - done, &c->srv->tlim, &r,
                         &need);
    if (k == TS_NEED_MORE) {
      c->in_need = need;
      break;
    }
    if (k == TS_BAD_OP) {
      srv__bad_input(c, "unknown TCPStore %s opcode %u",
                     dialect == TS_DIALECT_V1 ? "1.13" : "2.x",
                     (unsigned)buf[done]);
      return -1;
    }
    if (k == TS_TOO_BIG) {
      ts_too_big(c, &r);
      return -1;
    }
    /* A 1.13 client waits for its WAIT's answer before it sends anything
     * else, and has no CANCEL_WAIT: a request that comes while its WAIT is
     * pending means the wait timed out on its side. Its STOP_WAITING, sent
     * later, would be read as the answer to another request (PyTorch's own
     * 1.13 server does that, and the client fails with "Socket Timeout"),
     * and such waits would pile up to --max-waits: they end here. */
    if (dialect == TS_DIALECT_V1 && c->ts_nwaits > 0)
      ts_cancel_waits(c);
    if (c->ts_nslen > 0 && ns_apply(c, &r) != 0) {
      srv__bad_input(c, "out of memory for a TCPStore %s; closing",
                     ts_op_name(r.op));
      return -1;
    }
    c->req_end = buf + done + (size_t)k;
    uint64_t t0 = srv__trace_now();
    rc = ts_exec(c, &r);
    srv__trace_req(ts_op_name(r.op), t0);
    c->req_end = NULL;
    /* The namespaced copy is the request's only (the store copies what it
     * keeps; a request put off is copied again): a large one is not kept
     * by an idle connection, outside every memory bound. */
    if (c->ts_nscap > NS_KEEP) {
      free(c->ts_nsbuf);
      c->ts_nsbuf = NULL;
      c->ts_nscap = 0;
    }
    if (rc == SRV_LATER)
      break;
    if (rc != 0)
      return -1;
    c->srv->stats.requests++;
    SRV_COUNT_TS(c->srv, r.op);
    done += (size_t)k;
    if (c->in_moved)
      break; /* the buffer went with a SET's value */
  }
  return (ssize_t)done;
}

static void ts_closed(conn_t *c) {
  ts_drop_events(c);
  ts_cancel_waits(c);
  while (c->ts_nwatches > 0)
    store_unwatch(c->ts_watches[--c->ts_nwatches]);
  free(c->ts_waits);
  free(c->ts_watches);
  free(c->ts_nsbuf);
  c->ts_nsbuf = NULL;
  c->ts_nscap = 0;
  c->ts_waits = NULL;
  c->ts_watches = NULL;
  c->ts_capwaits = c->ts_capwatches = 0;
}

const srv_dialect_t srv__dialect_ts_v2 = {
    .name = "TCPStore 2.x",
    .input = ts_input,
    .closed = ts_closed,
    .start = ts_attach,
};
const srv_dialect_t srv__dialect_ts_v1 = {
    .name = "TCPStore 1.13",
    .input = ts_input,
    .resume = ts_resume,
    .closed = ts_closed,
    .start = ts_attach,
};
