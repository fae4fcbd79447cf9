/* store.c - hash table of entries; each entry holds a value, a queue, the
 * waiters on its key and its watches. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lu.h"
#include "lu_bigbuf.h"
#include "store.h"

#define STORE_MAGIC 0x53544f52u /* "STOR" */
#define ENTRY_OVERHEAD 64       /* bookkeeping counted against max_bytes */

typedef struct entry_s entry_t;

typedef struct wnode_s {
  struct wnode_s *prev, *next; /* in the entry's waiter list */
  store_waiter_t *w;
  entry_t *e; /* NULL when detached */
} wnode_t;

typedef struct qitem_s {
  struct qitem_s *next;
  size_t len;
  uint8_t data[];
} qitem_t;

struct store_watch_s {
  store_watch_t *prev, *next;
  store_t *s;
  entry_t *e;
  store_watch_cb cb;
  void *data;
  uint64_t event; /* store_watch_event_id */
};

static uint64_t store_events; /* watch events of every store (atomic) */

/* A block that entries' keys lie in instead of copies of their own (the
 * request of a WAIT of many long keys): it counts its size against the
 * store until the last entry that uses it goes. */
typedef struct keyblk_s {
  uint8_t *base;
  size_t cost;
  size_t refs;
} keyblk_t;

struct entry_s {
  entry_t *chain;
  uint64_t hash;
  uint8_t *val;
  size_t vlen;
  uint8_t *valloc; /* what to free: val, or the block val lies in */
  size_t vcost;    /* what the value counts: vlen, or that block's size */
  int has_val;
  qitem_t *qhead, *qtail;
  int64_t qlen;
  wnode_t waiters; /* sentinel of a circular list */
  store_watch_t *watches;
  size_t klen;
  const uint8_t *key; /* kbuf, or in kb's block */
  keyblk_t *kb;       /* the block the key lies in, or NULL */
  uint8_t kbuf[];
};

struct store_waiter_s {
  store_t *s;
  store_wake_cb cb;
  void *data;
  int kind;
  int64_t threshold;
  uint32_t n, remaining;
  wnode_t nodes[];
};

typedef struct barrier_s barrier_t;
struct store_bwait_s {
  store_bwait_t *prev, *next;
  barrier_t *b;
  store_barrier_cb cb;
  void *data;
};

struct barrier_s {
  barrier_t *next;
  store_t *s;
  uint32_t count, arrived;
  store_bwait_t *head;
  size_t nlen;
  uint8_t name[];
};

struct store_s {
  unsigned magic;
  entry_t **buckets;
  size_t nbuckets, nentries, nkeys;
  size_t bytes, max_bytes;
  store_budget_t *budget; /* shared with other stores, or NULL */
  uint64_t seed;
  barrier_t *barriers;
  size_t nwaiters, nwatches, nbwaits; /* outstanding, for store_free */
  /* While watchers are told of a change: the old value's block, which one
   * of them may take (store_watch_take_old). */
  uint8_t **notify_old;
};

/* A keyed 64-bit hash (per-store random seed) so that clients cannot
 * aim many keys at one bucket. Four independent lanes over each 32 bytes:
 * a long key (a WAIT of 1,000 keys of 8 KiB hashes 8 MiB) costs a quarter
 * of one dependent chain of multiplies. */
static inline uint64_t hash_mix(uint64_t h, uint64_t k) {
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 31;
  h = (h ^ k) * 0x94d049bb133111ebull;
  return h ^ (h >> 29);
}

static uint64_t hash_bytes(uint64_t seed, const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * (n + 1));
  if (n >= 32) {
    uint64_t l[4] = {h, h ^ 0x2545f4914f6cdd1dull, h ^ 0x9e3779b97f4a7c15ull,
                     h ^ 0xd6e8feb86659fd93ull};
    while (n >= 32) {
      uint64_t k[4];
      memcpy(k, b, 32);
      l[0] = hash_mix(l[0], k[0]);
      l[1] = hash_mix(l[1], k[1]);
      l[2] = hash_mix(l[2], k[2]);
      l[3] = hash_mix(l[3], k[3]);
      b += 32;
      n -= 32;
    }
    h = hash_mix(hash_mix(hash_mix(l[0], l[1]), l[2]), l[3]);
  }
  while (n >= 8) {
    uint64_t k;
    memcpy(&k, b, 8);
    h = hash_mix(h, k);
    b += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t k = 0;
    memcpy(&k, b, n);
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 31;
    h = (h ^ k) * 0x94d049bb133111ebull;
  }
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h ? h : 1; /* 0: store_key_t's "not computed" */
}

uint64_t store_key_hash(uint64_t seed, const void *key, size_t klen) {
  return hash_bytes(seed, key, klen);
}

uint64_t store_seed(const store_t *s) { return s->seed; }

/* The hash of k in s: the one computed ahead, or now. */
static uint64_t key_hash(const store_t *s, const store_key_t *k) {
  return k->h ? k->h : hash_bytes(s->seed, k->p, k->n);
}

/* ---- accounting: every byte is counted in the store and its budget -------- */

/* What n bytes of the store count in its budget: those past its floor. */
static size_t shared_part(const store_t *s, size_t n) {
  return n > s->budget->floor ? n - s->budget->floor : 0;
}

static int room(const store_t *s, size_t add, size_t sub) {
  size_t b = s->bytes - LU_MIN(sub, s->bytes);
  if (add <= sub)
    return 1;
  if (b + add > s->max_bytes)
    return 0;
  if (s->budget) {
    size_t was = shared_part(s, s->bytes), will = shared_part(s, b + add);
    if (will > was && s->budget->used + (will - was) > s->budget->max)
      return 0;
  }
  return 1;
}

static void account(store_t *s, size_t add, size_t sub) {
  size_t before = s->bytes;
  s->bytes = s->bytes + add - sub;
  if (s->budget)
    s->budget->used = s->budget->used + shared_part(s, s->bytes) -
                      shared_part(s, before);
}

int store_charge(store_t *s, size_t n) {
  if (!room(s, n, 0))
    return RDZV_ETOOBIG;
  account(s, n, 0);
  return 0;
}

void store_uncharge(store_t *s, size_t n) { account(s, 0, n); }

/* What an entry costs while it exists (with or without a value). */
static size_t entry_cost(size_t klen) { return klen + ENTRY_OVERHEAD; }

/* What the entry e counts: its key's block counts on its own. */
static size_t entry_charge(const entry_t *e) {
  return e->kb ? ENTRY_OVERHEAD : entry_cost(e->klen);
}

/* One user of kb fewer: the last frees it (and uncounts it). */
static void keyblk_put(store_t *s, keyblk_t *kb) {
  if (kb == NULL || --kb->refs > 0)
    return;
  account(s, 0, kb->cost);
  lu_big_free(kb->base);
  free(kb);
}

int store_new(size_t max_bytes, store_budget_t *budget, store_t **out) {
  uint64_t seed;
  if (lu_random(&seed, sizeof(seed)) != 0)
    seed = (uint64_t)(uintptr_t)out ^ lu_now_ns();
  return store_new_seeded(max_bytes, budget, seed, out);
}

int store_new_seeded(size_t max_bytes, store_budget_t *budget, uint64_t seed,
                     store_t **out) {
  store_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return RDZV_ENOMEM;
  s->nbuckets = 64;
  s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
  if (s->buckets == NULL) {
    free(s);
    return RDZV_ENOMEM;
  }
  s->max_bytes = max_bytes ? max_bytes : (size_t)1 << 30;
  s->budget = budget;
  s->seed = seed;
  s->magic = STORE_MAGIC;
  *out = s;
  return 0;
}

static void entry_free_contents(entry_t *e) {
  qitem_t *q = e->qhead;
  while (q) {
    qitem_t *n = q->next;
    lu_big_free(q);
    q = n;
  }
  lu_big_free(e->valloc);
}

void store_free(store_t *s) {
  if (s == NULL)
    return;
  assert(s->magic == STORE_MAGIC);
  assert(s->nwaiters == 0 && s->nwatches == 0 && s->nbwaits == 0);
  for (size_t i = 0; i < s->nbuckets; i++) {
    entry_t *e = s->buckets[i];
    while (e) {
      entry_t *n = e->chain;
      entry_free_contents(e);
      keyblk_put(s, e->kb);
      free(e);
      e = n;
    }
  }
  while (s->barriers) {
    barrier_t *b = s->barriers;
    s->barriers = b->next;
    free(b);
  }
  account(s, 0, s->bytes);
  free(s->buckets);
  s->magic = 0;
  free(s);
}

static entry_t *lookup(store_t *s, const void *key, size_t klen, uint64_t h) {
  entry_t *e = s->buckets[h & (s->nbuckets - 1)];
  for (; e; e = e->chain)
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
      return e;
  return NULL;
}

static void grow(store_t *s) {
  size_t nb = s->nbuckets * 2;
  entry_t **b = calloc(nb, sizeof(*b));
  if (b == NULL)
    return; /* keep the longer chains; still correct */
  for (size_t i = 0; i < s->nbuckets; i++) {
    entry_t *e = s->buckets[i];
    while (e) {
      entry_t *n = e->chain;
      e->chain = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = n;
    }
  }
  free(s->buckets);
  s->buckets = b;
  s->nbuckets = nb;
}

/* The entry of key (its hash h), created if needed: its key a copy, or
 * left where it lies when kb (the block it lies in) is given. */
static entry_t *get_or_create_h(store_t *s, const void *key, size_t klen,
                                uint64_t h, keyblk_t *kb) {
  entry_t *e = lookup(s, key, klen, h);
  if (e)
    return e;
  /* Not calloc: only the header needs zeros (a WAIT of 1,000 keys of
   * 8 KiB would clear 8 MiB it then overwrites). */
  e = malloc(sizeof(*e) + (kb ? 0 : klen));
  if (e == NULL)
    return NULL;
  memset(e, 0, sizeof(*e));
  e->hash = h;
  e->klen = klen;
  if (kb) {
    e->kb = kb;
    kb->refs++;
    e->key = key;
  } else {
    memcpy(e->kbuf, key, klen);
    e->key = e->kbuf;
  }
  /* The caller checked the room (entry_cost included). */
  account(s, entry_charge(e), 0);
  e->waiters.prev = e->waiters.next = &e->waiters;
  e->chain = s->buckets[h & (s->nbuckets - 1)];
  s->buckets[h & (s->nbuckets - 1)] = e;
  if (++s->nentries > s->nbuckets)
    grow(s);
  return e;
}

static entry_t *get_or_create(store_t *s, const void *key, size_t klen) {
  return get_or_create_h(s, key, klen, hash_bytes(s->seed, key, klen), NULL);
}

/* Free the entry once nothing refers to it. */
static void maybe_drop(store_t *s, entry_t *e) {
  entry_t **pp;
  if (e->has_val || e->qhead || e->waiters.next != &e->waiters || e->watches)
    return;
  pp = &s->buckets[e->hash & (s->nbuckets - 1)];
  while (*pp != e)
    pp = &(*pp)->chain;
  *pp = e->chain;
  s->nentries--;
  account(s, 0, entry_charge(e));
  entry_free_contents(e);
  keyblk_put(s, e->kb);
  free(e);
}

static entry_t *find(store_t *s, const void *key, size_t klen) {
  return lookup(s, key, klen, hash_bytes(s->seed, key, klen));
}

const uint8_t *store_get(store_t *s, const void *key, size_t klen,
                         size_t *vlen) {
  store_key_t k = {key, klen, 0};
  return store_get_key(s, &k, vlen);
}

static int entry_exists(const entry_t *e);

int store_exists(store_t *s, const void *key, size_t klen) {
  return entry_exists(find(s, key, klen));
}

const uint8_t *store_get_key(store_t *s, const store_key_t *k, size_t *vlen) {
  entry_t *e = lookup(s, k->p, k->n, key_hash(s, k));
  if (e == NULL || !e->has_val)
    return NULL;
  *vlen = e->vlen;
  /* A zero-length value still needs a non-NULL pointer. */
  return e->val ? e->val : (const uint8_t *)"";
}

int store_exists_key(store_t *s, const store_key_t *k) {
  return entry_exists(lookup(s, k->p, k->n, key_hash(s, k)));
}

size_t store_num_keys(const store_t *s) { return s->nkeys; }
size_t store_bytes(const store_t *s) { return s->bytes; }

/* ---- waking --------------------------------------------------------------- */

static void node_detach(wnode_t *n) {
  entry_t *e = n->e;
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->prev = n->next = n;
  n->e = NULL;
  (void)e;
}

static size_t waiter_size(uint32_t n) {
  return sizeof(store_waiter_t) + (size_t)n * sizeof(wnode_t);
}

static void waiter_finish(store_waiter_t *w) {
  store_t *s = w->s;
  /* Every node is detached already (remaining == 0) for EXISTS waiters;
   * a GE waiter's single node is detached by the caller. */
  s->nwaiters--;
  account(s, 0, waiter_size(w->n));
  w->cb(w, w->data);
  free(w);
}

static int value_ge(const entry_t *e, int64_t threshold) {
  int64_t v;
  if (!e->has_val || lu_parse_i64((const char *)e->val, e->vlen, &v) != 0)
    return 0;
  return v >= threshold;
}

/* Wake waiters after the entry changed. `one` (queue push) stops at the
 * first EXISTS waiter that this completes, as PyTorch's
 * wakeupOneWaitingClient does: a waiter that still needs other keys (or
 * this key again, WAIT([q, q])) has this one counted and lets the next
 * waiter be tried. */
static void wake(store_t *s, entry_t *e, int one) {
  wnode_t *n = e->waiters.next;
  (void)s;
  while (n != &e->waiters) {
    wnode_t *next = n->next;
    store_waiter_t *w = n->w;
    if (w->kind == STORE_WAIT_GE) {
      if (value_ge(e, w->threshold)) {
        node_detach(n);
        w->remaining = 0;
        waiter_finish(w);
      }
    } else {
      node_detach(n);
      if (--w->remaining == 0) {
        waiter_finish(w);
        if (one)
          break;
      }
    }
    n = next;
  }
}

static void notify_watches(store_t *s, entry_t *e, int ev, const uint8_t *old,
                           size_t olen, uint8_t **old_alloc) {
  store_watch_t *w = e->watches;
  uint64_t id = __atomic_add_fetch(&store_events, 1, __ATOMIC_RELAXED);
  s->notify_old = old_alloc;
  while (w) {
    store_watch_t *next = w->next;
    w->event = id;
    w->cb(w, ev, e->key, e->klen, old, olen, e->val, e->has_val ? e->vlen : 0,
          w->data);
    w = next;
  }
  s->notify_old = NULL;
}

uint8_t *store_watch_take_old(const store_watch_t *w) {
  uint8_t *b = NULL;
  if (w->s->notify_old != NULL) {
    b = *w->s->notify_old;
    *w->s->notify_old = NULL;
  }
  return b;
}

/* Replace the value by nv (nlen bytes, counted as cost, lying in the
 * allocation alloc); the old one is handed to watchers, then freed. */
static int put_value(store_t *s, entry_t *e, uint8_t *alloc, uint8_t *nv,
                     size_t nlen, size_t cost) {
  uint8_t *old = e->val, *old_alloc = e->valloc;
  size_t olen = e->vlen;
  int had = e->has_val;
  account(s, cost, had ? e->vcost : 0);
  e->val = nv;
  e->vlen = nlen;
  e->valloc = alloc;
  e->vcost = cost;
  e->has_val = 1;
  if (!had)
    s->nkeys++;
  if (e->watches)
    notify_watches(s, e, had ? STORE_EV_UPDATED : STORE_EV_CREATED, old, olen,
                   &old_alloc);
  lu_big_free(old_alloc);
  wake(s, e, 0);
  return 0;
}

/* Is there room for a value that counts cost at the key (entry e, NULL if
 * none)? */
static int room_for(store_t *s, const entry_t *e, size_t klen, size_t cost) {
  size_t add = cost + (e ? 0 : entry_cost(klen));
  size_t sub = (e && e->has_val) ? e->vcost : 0;
  return room(s, add, sub);
}

static uint8_t *dup_bytes(const void *p, size_t n) {
  uint8_t *d = malloc(n ? n : 1);
  if (d && n)
    memcpy(d, p, n);
  return d;
}

/* A value's copy: from the cache of big blocks (freed by lu_big_free). */
static uint8_t *dup_value(const void *p, size_t n) {
  uint8_t *d = lu_big_alloc(n ? n : 1);
  if (d && n)
    memcpy(d, p, n);
  return d;
}

int store_set(store_t *s, const void *key, size_t klen, const void *val,
              size_t vlen) {
  entry_t *e = find(s, key, klen);
  uint8_t *nv;
  if (!room_for(s, e, klen, vlen))
    return RDZV_ETOOBIG;
  if ((nv = dup_value(val, vlen)) == NULL)
    return RDZV_ENOMEM;
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL) {
    lu_big_free(nv);
    return RDZV_ENOMEM;
  }
  return put_value(s, e, nv, nv, vlen, vlen);
}

int store_set_owned(store_t *s, const void *key, size_t klen, uint8_t *alloc,
                    size_t cost, const uint8_t *val, size_t vlen) {
  entry_t *e = find(s, key, klen);
  if (cost < vlen)
    return RDZV_EINVAL;
  if (!room_for(s, e, klen, cost))
    return RDZV_ETOOBIG;
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL)
    return RDZV_ENOMEM;
  return put_value(s, e, alloc, (uint8_t *)val, vlen, cost);
}

int store_append(store_t *s, const void *key, size_t klen, const void *val,
                 size_t vlen) {
  entry_t *e = find(s, key, klen);
  size_t cur = (e && e->has_val) ? e->vlen : 0;
  uint8_t *nv;
  if (cur + vlen < cur || !room_for(s, e, klen, cur + vlen))
    return RDZV_ETOOBIG;
  if ((nv = lu_big_alloc(cur + vlen ? cur + vlen : 1)) == NULL)
    return RDZV_ENOMEM;
  if (cur)
    memcpy(nv, e->val, cur);
  if (vlen)
    memcpy(nv + cur, val, vlen);
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL) {
    lu_big_free(nv);
    return RDZV_ENOMEM;
  }
  return put_value(s, e, nv, nv, cur + vlen, cur + vlen);
}

int store_add(store_t *s, const void *key, size_t klen, int64_t delta,
              int64_t *result) {
  entry_t *e = find(s, key, klen);
  int64_t v = 0;
  char buf[32];
  int n;
  uint8_t *nv;
  if (e && e->has_val) {
    if (lu_parse_i64((const char *)e->val, e->vlen, &v) != 0)
      return RDZV_ENOTNUM;
  }
  /* Wrap like TCPStore's int64 arithmetic does, without UB. */
  v = (int64_t)((uint64_t)v + (uint64_t)delta);
  n = snprintf(buf, sizeof(buf), "%" PRId64, v);
  if (!room_for(s, e, klen, (size_t)n))
    return RDZV_ETOOBIG;
  if ((nv = dup_value(buf, (size_t)n)) == NULL)
    return RDZV_ENOMEM;
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL) {
    lu_big_free(nv);
    return RDZV_ENOMEM;
  }
  if (result)
    *result = v;
  return put_value(s, e, nv, nv, (size_t)n, (size_t)n);
}

int store_cas(store_t *s, const void *key, size_t klen, const void *expected,
              size_t elen, int expect_absent, const void *desired,
              size_t dlen, int *swapped) {
  entry_t *e = find(s, key, klen);
  int match;
  uint8_t *nv;
  *swapped = 0;
  if (e == NULL || !e->has_val)
    match = expect_absent;
  else
    match = !expect_absent && e->vlen == elen &&
            (elen == 0 || memcmp(e->val, expected, elen) == 0);
  if (!match)
    return 0;
  if (!room_for(s, e, klen, dlen))
    return RDZV_ETOOBIG;
  if ((nv = dup_value(desired, dlen)) == NULL)
    return RDZV_ENOMEM;
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL) {
    lu_big_free(nv);
    return RDZV_ENOMEM;
  }
  *swapped = 1;
  return put_value(s, e, nv, nv, dlen, dlen);
}

int store_delete(store_t *s, const void *key, size_t klen) {
  entry_t *e = find(s, key, klen);
  uint8_t *old, *old_alloc;
  size_t olen;
  if (e == NULL || !e->has_val)
    return 0;
  old = e->val;
  olen = e->vlen;
  old_alloc = e->valloc;
  account(s, 0, e->vcost);
  e->val = e->valloc = NULL;
  e->vlen = e->vcost = 0;
  e->has_val = 0;
  s->nkeys--;
  if (e->watches)
    notify_watches(s, e, STORE_EV_DELETED, old, olen, &old_alloc);
  lu_big_free(old_alloc);
  maybe_drop(s, e);
  return 1;
}

void store_foreach(store_t *s,
                   void (*fn)(const void *key, size_t klen, const uint8_t *val,
                              size_t vlen, void *arg),
                   void *arg) {
  for (size_t i = 0; i < s->nbuckets; i++)
    for (entry_t *e = s->buckets[i]; e; e = e->chain)
      if (e->has_val)
        fn(e->key, e->klen, e->val ? e->val : (const uint8_t *)"", e->vlen,
           arg);
}

/* ---- queues ------------------------------------------------------------------ */

int store_queue_push(store_t *s, const void *key, size_t klen, const void *val,
                     size_t vlen) {
  entry_t *e = find(s, key, klen);
  qitem_t *q;
  size_t cost = vlen + sizeof(qitem_t);
  if (!room(s, cost + (e ? 0 : entry_cost(klen)), 0))
    return RDZV_ETOOBIG;
  if ((q = lu_big_alloc(sizeof(*q) + vlen)) == NULL)
    return RDZV_ENOMEM;
  if ((e = get_or_create(s, key, klen)) == NULL) {
    lu_big_free(q);
    return RDZV_ENOMEM;
  }
  q->next = NULL;
  q->len = vlen;
  if (vlen)
    memcpy(q->data, val, vlen);
  if (e->qtail)
    e->qtail->next = q;
  else
    e->qhead = q;
  e->qtail = q;
  e->qlen++;
  account(s, cost, 0);
  wake(s, e, 1);
  return 0;
}

int store_queue_pop(store_t *s, const void *key, size_t klen, uint8_t **val,
                    size_t *vlen) {
  entry_t *e = find(s, key, klen);
  qitem_t *q;
  uint8_t *d;
  if (e == NULL || e->qhead == NULL)
    return 0;
  q = e->qhead;
  if ((d = dup_bytes(q->data, q->len)) == NULL)
    return RDZV_ENOMEM;
  e->qhead = q->next;
  if (e->qhead == NULL)
    e->qtail = NULL;
  e->qlen--;
  account(s, 0, q->len + sizeof(qitem_t));
  *val = d;
  *vlen = q->len;
  lu_big_free(q);
  maybe_drop(s, e);
  return 1;
}

int64_t store_queue_clear(store_t *s, const void *key, size_t klen) {
  entry_t *e = find(s, key, klen);
  int64_t n = 0;
  if (e == NULL)
    return 0;
  while (e->qhead) {
    qitem_t *q = e->qhead;
    e->qhead = q->next;
    account(s, 0, q->len + sizeof(qitem_t));
    lu_big_free(q);
    n++;
  }
  e->qtail = NULL;
  e->qlen = 0;
  maybe_drop(s, e);
  return n;
}

void store_foreach_queue(store_t *s,
                         void (*fn)(const void *key, size_t klen, void *arg),
                         void *arg) {
  for (size_t i = 0; i < s->nbuckets; i++)
    for (entry_t *e = s->buckets[i]; e; e = e->chain)
      if (e->qhead)
        fn(e->key, e->klen, arg);
}

int64_t store_queue_len(store_t *s, const void *key, size_t klen) {
  entry_t *e = find(s, key, klen);
  return e ? e->qlen : 0;
}

int64_t store_queue_front_len(store_t *s, const void *key, size_t klen) {
  entry_t *e = find(s, key, klen);
  return e && e->qhead ? (int64_t)e->qhead->len : -1;
}

/* ---- waiters --------------------------------------------------------------- */

/* Has the entry a value or a non-empty queue? */
static int entry_exists(const entry_t *e) {
  return e != NULL && (e->has_val || e->qhead != NULL);
}

int store_wait_in(store_t *s, const store_key_t *keys, uint32_t n, int kind,
                  int64_t threshold, store_wake_cb cb, void *data,
                  store_waiter_t **out, uint8_t *blk, size_t blk_cost,
                  int *adopted) {
  store_waiter_t *w;
  uint32_t missing = 0;
  size_t cost = waiter_size(n);   /* keys copied */
  size_t bcost = cost + blk_cost; /* keys left in blk */
  size_t kbytes = 0;              /* of the keys that get entries */
  uint64_t *hashes;
  keyblk_t *kb = NULL;
  int in_blk = blk != NULL;

  if (adopted)
    *adopted = 0;
  if (kind == STORE_WAIT_GE && n != 1)
    return RDZV_EINVAL;
  /* One hash per key (over 8 KiB it is not free): the nodes keep what the
   * lookup found until they are linked, hashes[] the hash of a key that
   * has no entry yet. */
  if ((w = calloc(1, waiter_size(n))) == NULL)
    return RDZV_ENOMEM;
  if ((hashes = lu_big_alloc((n ? n : 1) * sizeof(*hashes))) == NULL) {
    free(w);
    return RDZV_ENOMEM;
  }
  for (uint32_t i = 0; i < n; i++) {
    entry_t *e;
    hashes[i] = key_hash(s, &keys[i]);
    e = lookup(s, keys[i].p, keys[i].n, hashes[i]);
    w->nodes[i].e = e;
    if (kind == STORE_WAIT_GE ? !(e && value_ge(e, threshold))
                              : !entry_exists(e))
      missing++;
    /* A waited key that has no entry yet gets one: it costs what a key
     * costs (a repeated key is counted twice here, on the safe side), or
     * the entry's bookkeeping when its key stays in blk (counted once).
     * Such a key is missing, so once the cost is over the room the answer
     * is RDZV_ETOOBIG whatever the other keys are: stop looking. */
    if (e == NULL) {
      const uint8_t *kp = keys[i].p;
      cost += entry_cost(keys[i].n);
      bcost += ENTRY_OVERHEAD;
      kbytes += keys[i].n;
      if (in_blk && (kp < blk || keys[i].n > blk_cost ||
                     kp - blk > (ptrdiff_t)(blk_cost - keys[i].n)))
        in_blk = 0; /* not in blk: copies */
      if (!room(s, in_blk ? LU_MIN(cost, bcost) : cost, 0))
        break;
    }
  }
  /* The keys stay in blk when they make most of it (a sixteenth of it
   * other bytes at most: the request's framing), counted as the block. */
  if (!in_blk || kbytes + kbytes / 16 < blk_cost)
    in_blk = 0;
  else
    cost = bcost;
  if (missing == 0 || !room(s, cost, 0)) {
    lu_big_free(hashes);
    free(w);
    return missing == 0 ? 1 : RDZV_ETOOBIG;
  }
  if (in_blk) {
    if ((kb = malloc(sizeof(*kb))) == NULL) {
      lu_big_free(hashes);
      free(w);
      return RDZV_ENOMEM;
    }
    kb->base = blk;
    kb->cost = blk_cost;
    kb->refs = 1; /* this registration's, until it is done */
    account(s, blk_cost, 0);
  }
  account(s, waiter_size(n), 0);
  w->s = s;
  w->cb = cb;
  w->data = data;
  w->kind = kind;
  w->threshold = threshold;
  w->n = n;
  for (uint32_t i = 0; i < n; i++) {
    wnode_t *node = &w->nodes[i];
    entry_t *e = node->e;
    node->w = w;
    node->prev = node->next = node;
    node->e = NULL;
    if (kind == STORE_WAIT_EXISTS && entry_exists(e))
      continue;
    /* Created now, or by a repeat of the key earlier in the list. */
    if (e == NULL && (e = get_or_create_h(s, keys[i].p, keys[i].n, hashes[i],
                                          kb)) == NULL) {
      w->remaining = 0;
      for (uint32_t j = 0; j < i; j++) {
        entry_t *je = w->nodes[j].e;
        if (je) {
          node_detach(&w->nodes[j]);
          maybe_drop(s, je);
        }
      }
      account(s, 0, waiter_size(n));
      if (kb) {
        /* Back to the caller: no entry uses it now. */
        account(s, 0, kb->cost);
        free(kb);
      }
      lu_big_free(hashes);
      free(w);
      return RDZV_ENOMEM;
    }
    node->e = e;
    node->prev = e->waiters.prev;
    node->next = &e->waiters;
    e->waiters.prev->next = node;
    e->waiters.prev = node;
    w->remaining++;
  }
  lu_big_free(hashes);
  if (kb) {
    if (adopted)
      *adopted = 1;
    keyblk_put(s, kb); /* the entries hold it now */
  }
  s->nwaiters++;
  *out = w;
  return 0;
}

int store_wait(store_t *s, const store_key_t *keys, uint32_t n, int kind,
               int64_t threshold, store_wake_cb cb, void *data,
               store_waiter_t **out) {
  return store_wait_in(s, keys, n, kind, threshold, cb, data, out, NULL, 0,
                       NULL);
}

void store_wait_cancel(store_waiter_t *w) {
  store_t *s;
  if (w == NULL)
    return;
  s = w->s;
  for (uint32_t i = 0; i < w->n; i++) {
    entry_t *e = w->nodes[i].e;
    if (e) {
      node_detach(&w->nodes[i]);
      maybe_drop(s, e);
    }
  }
  s->nwaiters--;
  account(s, 0, waiter_size(w->n));
  free(w);
}

uint32_t store_wait_remaining(const store_waiter_t *w) { return w->remaining; }

/* ---- watches ------------------------------------------------------------------ */

int store_watch(store_t *s, const void *key, size_t klen, store_watch_cb cb,
                void *data, store_watch_t **out) {
  store_watch_t *w;
  entry_t *e = find(s, key, klen);
  if (!room(s, sizeof(*w) + (e ? 0 : entry_cost(klen)), 0))
    return RDZV_ETOOBIG;
  if ((w = calloc(1, sizeof(*w))) == NULL)
    return RDZV_ENOMEM;
  if (e == NULL && (e = get_or_create(s, key, klen)) == NULL) {
    free(w);
    return RDZV_ENOMEM;
  }
  account(s, sizeof(*w), 0);
  w->s = s;
  w->e = e;
  w->cb = cb;
  w->data = data;
  w->next = e->watches;
  if (e->watches)
    e->watches->prev = w;
  e->watches = w;
  s->nwatches++;
  *out = w;
  return 0;
}

uint64_t store_watch_event_id(const store_watch_t *w) { return w->event; }

void store_unwatch(store_watch_t *w) {
  entry_t *e;
  store_t *s;
  if (w == NULL)
    return;
  e = w->e;
  if (w->prev)
    w->prev->next = w->next;
  else
    e->watches = w->next;
  if (w->next)
    w->next->prev = w->prev;
  s = w->s;
  s->nwatches--;
  account(s, 0, sizeof(*w));
  free(w);
  maybe_drop(s, e);
}

/* ---- barriers ----------------------------------------------------------------- */

/* Unlink barrier b and free it. */
static void barrier_drop(store_t *s, barrier_t *b) {
  barrier_t **pp = &s->barriers;
  while (*pp != b)
    pp = &(*pp)->next;
  *pp = b->next;
  account(s, 0, sizeof(*b) + b->nlen);
  free(b);
}

int store_barrier(store_t *s, const void *name, size_t nlen, uint32_t count,
                  store_barrier_cb cb, void *data, store_bwait_t **out) {
  barrier_t *b;
  store_bwait_t *bw;
  if (count == 0)
    return RDZV_EINVAL;
  for (b = s->barriers; b; b = b->next)
    if (b->nlen == nlen && memcmp(b->name, name, nlen) == 0)
      break;
  if (b != NULL && b->count != count)
    return RDZV_EINVAL;
  if (count == 1 && b == NULL)
    return 1;
  if (b == NULL || b->arrived + 1 < count) {
    /* This arrival waits: its registration (and a new barrier's) counts
     * against the store's bounds. */
    if (!room(s, sizeof(*bw) + (b ? 0 : sizeof(*b) + nlen), 0))
      return RDZV_ETOOBIG;
  }
  if (b == NULL) {
    b = calloc(1, sizeof(*b) + nlen);
    if (b == NULL)
      return RDZV_ENOMEM;
    account(s, sizeof(*b) + nlen, 0);
    b->s = s;
    b->count = count;
    b->nlen = nlen;
    memcpy(b->name, name, nlen);
    b->next = s->barriers;
    s->barriers = b;
  }
  if (b->arrived + 1 == count) {
    /* This arrival opens the barrier: release everyone and forget it, so
     * the next use of the same name starts afresh. */
    store_bwait_t *w = b->head;
    b->head = NULL;
    while (w) {
      store_bwait_t *next = w->next;
      s->nbwaits--;
      account(s, 0, sizeof(*w));
      w->cb(w, w->data);
      free(w);
      w = next;
    }
    barrier_drop(s, b);
    return 1;
  }
  if ((bw = calloc(1, sizeof(*bw))) == NULL) {
    if (b->arrived == 0)
      barrier_drop(s, b);
    return RDZV_ENOMEM;
  }
  account(s, sizeof(*bw), 0);
  bw->b = b;
  bw->cb = cb;
  bw->data = data;
  bw->next = b->head;
  if (b->head)
    b->head->prev = bw;
  b->head = bw;
  b->arrived++;
  s->nbwaits++;
  *out = bw;
  return 0;
}

void store_barrier_cancel(store_bwait_t *bw) {
  barrier_t *b;
  store_t *s;
  if (bw == NULL)
    return;
  b = bw->b;
  s = b->s;
  if (bw->prev)
    bw->prev->next = bw->next;
  else
    b->head = bw->next;
  if (bw->next)
    bw->next->prev = bw->prev;
  b->arrived--;
  s->nbwaits--;
  account(s, 0, sizeof(*bw));
  free(bw);
  if (b->arrived == 0)
    barrier_drop(s, b);
}

/* ---- the whole store ------------------------------------------------------------ */

void store_clear(store_t *s) {
  for (size_t i = 0; i < s->nbuckets; i++) {
    entry_t *e = s->buckets[i];
    while (e) {
      entry_t *n = e->chain;
      qitem_t *q = e->qhead;
      while (q) {
        qitem_t *qn = q->next;
        account(s, 0, q->len + sizeof(qitem_t));
        lu_big_free(q);
        q = qn;
      }
      e->qhead = e->qtail = NULL;
      e->qlen = 0;
      if (e->has_val) {
        account(s, 0, e->vcost);
        lu_big_free(e->valloc);
        e->val = e->valloc = NULL;
        e->vlen = e->vcost = 0;
        e->has_val = 0;
        s->nkeys--;
      }
      maybe_drop(s, e);
      e = n;
    }
  }
  /* Barriers with members waiting belong to live connections. */
  for (barrier_t *b = s->barriers, *n; b; b = n) {
    n = b->next;
    if (b->arrived == 0)
      barrier_drop(s, b);
  }
}

int store_is_empty(const store_t *s) {
  return s->nentries == 0 && s->barriers == NULL && s->nwaiters == 0 &&
         s->nwatches == 0 && s->nbwaits == 0;
}
