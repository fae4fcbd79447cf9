/* store.h - one job's key/value store: values, FIFO queues, waiters that are
 * woken by writes (never by polling), key watchers (TCPStore 1.13
 * WATCH_KEY) and reusable barriers. Single-threaded: the server's loop thread
 * only. Callbacks run synchronously inside the mutating call and must not
 * mutate the store. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv.h"

typedef struct store_s store_t;
typedef struct store_waiter_s store_waiter_t;
typedef struct store_watch_s store_watch_t;
typedef struct store_bwait_s store_bwait_t;

typedef struct store_key_s {
  const void *p;
  size_t n;
  /* 0, or store_key_hash() of the key with the seed of the store it is
   * looked up in (computed ahead, e.g. without the server's lock). */
  uint64_t h;
} store_key_t;

/* A bound shared by several stores (the server's stores of all jobs):
 * every byte a store counts beyond its first `floor` is counted in `used`
 * too, and refused when `used` would pass `max`. A store's first `floor`
 * bytes are its own (its owner set memory aside for them), so that a new
 * store gets its first keys in however full the others are. The owner may
 * change max at any time, floor only while no store uses the budget. */
typedef struct store_budget_s {
  size_t used, max, floor;
} store_budget_t;

/* IN max_bytes: bound of what the store counts: keys, values, queued items
 * and also the registrations of waiters, watches and barrier members, so
 * that waiting on keys that never come costs the same as storing them;
 * 0 = 1 GiB. IN budget: a shared bound too, or NULL; it must outlive the
 * store. OUT *out. RET 0 or RDZV_ENOMEM. */
int store_new(size_t max_bytes, store_budget_t *budget, store_t **out);
/* store_new with the given seed of its keyed hash (random, secret, shared
 * by the stores of a server so that keys can be hashed before it is known
 * which store they go to). */
int store_new_seeded(size_t max_bytes, store_budget_t *budget, uint64_t seed,
                     store_t **out);
/* The keyed hash of a key for a store of that seed (never 0). */
uint64_t store_key_hash(uint64_t seed, const void *key, size_t klen);
uint64_t store_seed(const store_t *s);
/* Drop every value, queue and idle barrier (the job's run is over); waiters
 * and watches stay registered. */
void store_clear(store_t *s);
/* Count n bytes the caller keeps for this store (a waiter's copy of its
 * keys) against its bounds. RET 0 or RDZV_ETOOBIG. */
int store_charge(store_t *s, size_t n);
void store_uncharge(store_t *s, size_t n);
/* RET 1 when the store holds nothing: no key, queue, waiter, watch or
 * barrier. */
int store_is_empty(const store_t *s);
/* Free everything. Outstanding waiters, watches and barrier waits must have
 * been cancelled by their owners first (asserted). NULL is a no-op. */
void store_free(store_t *s);

/* RET the value or NULL when absent; valid until the next mutation. */
const uint8_t *store_get(store_t *s, const void *key, size_t klen,
                         size_t *vlen);
/* RET 1 when the key has a value or a non-empty queue, else 0. */
int store_exists(store_t *s, const void *key, size_t klen);
/* store_get and store_exists of k, with its hash k->h when not 0. */
const uint8_t *store_get_key(store_t *s, const store_key_t *k, size_t *vlen);
int store_exists_key(store_t *s, const store_key_t *k);

/* Mutations wake waiters on the key. RET 0, RDZV_ETOOBIG (store or shared
 * budget full), RDZV_ENOMEM. */
int store_set(store_t *s, const void *key, size_t klen, const void *val,
              size_t vlen);
/* store_set without a copy: the value val[0..vlen) lies in alloc (a
 * block of cost bytes from lu_big_alloc, such as the input buffer the request came
 * in), which the store frees when the value goes; the value counts cost
 * bytes against the bounds. RET 0 (the store owns alloc) or, with alloc
 * still the caller's, RDZV_ETOOBIG, RDZV_ENOMEM, RDZV_EINVAL (cost < vlen). */
int store_set_owned(store_t *s, const void *key, size_t klen, uint8_t *alloc,
                    size_t cost, const uint8_t *val, size_t vlen);
int store_append(store_t *s, const void *key, size_t klen, const void *val,
                 size_t vlen);
/* The value is ASCII decimal; an absent key counts as 0.
 * RET 0 or RDZV_ENOTNUM (value left unchanged). */
int store_add(store_t *s, const void *key, size_t klen, int64_t delta,
              int64_t *result);
/* If the current value equals expected (expect_absent: the key is absent),
 * store desired. OUT *swapped. RET 0 or an allocation error. */
int store_cas(store_t *s, const void *key, size_t klen, const void *expected,
              size_t elen, int expect_absent, const void *desired,
              size_t dlen, int *swapped);
/* RET 1 when deleted, 0 when absent. Does not wake waiters. */
int store_delete(store_t *s, const void *key, size_t klen);
size_t store_num_keys(const store_t *s);
size_t store_bytes(const store_t *s);

/* Call fn for every key with a value, in no particular order. */
void store_foreach(store_t *s,
                   void (*fn)(const void *key, size_t klen, const uint8_t *val,
                              size_t vlen, void *arg),
                   void *arg);

/* Queues (TCPStore QUEUE_*): a push wakes the first waiter of the key. */
int store_queue_push(store_t *s, const void *key, size_t klen, const void *val,
                     size_t vlen);
/* OUT *val malloc'd (caller frees), *vlen. RET 1 popped, 0 empty, <0 error. */
int store_queue_pop(store_t *s, const void *key, size_t klen, uint8_t **val,
                    size_t *vlen);
int64_t store_queue_len(store_t *s, const void *key, size_t klen);
/* Drop every item of the key's queue. RET how many there were. */
int64_t store_queue_clear(store_t *s, const void *key, size_t klen);
/* fn for every key with a non-empty queue (fn must not change the store). */
void store_foreach_queue(store_t *s,
                         void (*fn)(const void *key, size_t klen, void *arg),
                         void *arg);
/* Length of the item a pop would return, or -1 when the queue is empty. */
int64_t store_queue_front_len(store_t *s, const void *key, size_t klen);

/* ---- waiters --------------------------------------------------------------- */

/* cb runs once, when the condition holds; the waiter is freed after cb
 * returns. Never called for a cancelled waiter. */
typedef void (*store_wake_cb)(store_waiter_t *w, void *data);

enum {
  STORE_WAIT_EXISTS = 0, /* every key has a value (or a non-empty queue) */
  STORE_WAIT_GE = 1      /* the single key's integer value >= threshold */
};

/* RET 1 when the condition already holds (no waiter made, cb not called),
 * 0 with *out registered, RDZV_ETOOBIG (the registration does not fit the
 * store's bounds), RDZV_ENOMEM. */
int store_wait(store_t *s, const store_key_t *keys, uint32_t n, int kind,
               int64_t threshold, store_wake_cb cb, void *data,
               store_waiter_t **out);
/* store_wait whose keys lie in blk, a block of blk_cost bytes from
 * lu_big_alloc (the request they came in): the keys of the entries it creates stay
 * there instead of being copied (a WAIT of 1,000 keys of 8 KiB: no 8 MiB
 * copied into fresh memory), and the block counts blk_cost against the
 * bounds until the last of them goes. It does so when every key lies in
 * blk and the new entries' keys make most of it (all but a sixteenth);
 * then, with 0 returned, *adopted is 1 and the store owns blk (frees it).
 * Otherwise blk stays the caller's (*adopted 0). */
int store_wait_in(store_t *s, const store_key_t *keys, uint32_t n, int kind,
                  int64_t threshold, store_wake_cb cb, void *data,
                  store_waiter_t **out, uint8_t *blk, size_t blk_cost,
                  int *adopted);
/* Unregister and free without calling cb. NULL is a no-op. */
void store_wait_cancel(store_waiter_t *w);
/* Keys still missing for w (diagnostics). */
uint32_t store_wait_remaining(const store_waiter_t *w);

/* ---- watches (TCPStore 1.13 WATCH_KEY) ----------------------------------- */

enum {
  STORE_EV_UPDATED = 0,
  STORE_EV_CREATED = 1,
  STORE_EV_DELETED = 2
};
typedef void (*store_watch_cb)(store_watch_t *w, int ev, const void *key,
                               size_t klen, const uint8_t *old, size_t olen,
                               const uint8_t *nval, size_t nlen, void *data);
/* RET 0, RDZV_ETOOBIG (over the store's bounds), RDZV_ENOMEM. */
int store_watch(store_t *s, const void *key, size_t klen, store_watch_cb cb,
                void *data, store_watch_t **out);
void store_unwatch(store_watch_t *w);
/* Inside its callback: the event being delivered, the same for every watch
 * of that key and different for every event (a watcher's connection can
 * share one encoding of a large event with the others). */
uint64_t store_watch_event_id(const store_watch_t *w);
/* Inside its callback: the block the event's old value lies in (from
 * lu_big_alloc), which the caller now owns (frees with lu_big_free) instead of the store, so that an event
 * can carry the old value without a copy; NULL when another watcher of the
 * event took it or there is none. The old value stays where it was. */
uint8_t *store_watch_take_old(const store_watch_t *w);

/* ---- barriers --------------------------------------------------------------- */

typedef void (*store_barrier_cb)(store_bwait_t *b, void *data);
/* Enter barrier `name` expecting `count` members. RET 1 when this entry
 * opened the barrier (every other member's cb has run; no handle made for
 * this one), 0 with *out waiting, RDZV_EINVAL when count differs from the
 * count the barrier's members gave, RDZV_ETOOBIG, RDZV_ENOMEM. The barrier resets once
 * it opens. */
int store_barrier(store_t *s, const void *name, size_t nlen, uint32_t count,
                  store_barrier_cb cb, void *data, store_bwait_t **out);
/* Leave a barrier without it opening (timeout, disconnect). */
void store_barrier_cancel(store_bwait_t *b);

#endif /* STORE_H */
