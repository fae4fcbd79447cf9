/* test_store.c - the store: values, add, compare-and-set, delete, queues,
 * waiters woken by writes, integer thresholds, watches, barriers, limits,
 * and what waiting costs: waits, watches and barrier members count against
 * the store's bound and a budget shared by several stores (#11). */
#include "lu_bigbuf.h"
#include "store.h"
#include "test.h"

static int woken;
static void on_wake(store_waiter_t *w, void *data) {
  (void)w;
  woken++;
  *(int *)data += 1;
}

static int bar_open;
static void on_bar(store_bwait_t *b, void *data) {
  (void)b;
  (void)data;
  bar_open++;
}

static int nevents, last_ev;
static char last_old[32], last_new[32];
static void on_watch(store_watch_t *w, int ev, const void *key, size_t klen,
                     const uint8_t *old, size_t olen, const uint8_t *nv,
                     size_t nlen, void *data) {
  (void)w;
  (void)key;
  (void)klen;
  (void)data;
  nevents++;
  last_ev = ev;
  snprintf(last_old, sizeof(last_old), "%.*s", (int)olen, old ? (const char *)old : "");
  snprintf(last_new, sizeof(last_new), "%.*s", (int)nlen, nv ? (const char *)nv : "");
}

#define K(s) s, strlen(s)

static void test_values(void) {
  store_t *s;
  size_t n;
  const uint8_t *v;
  int64_t r;
  int swapped;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  ASSERT(store_get(s, K("a"), &n) == NULL);
  ASSERT_EQ(0, store_set(s, K("a"), "xyz", 3));
  v = store_get(s, K("a"), &n);
  ASSERT(v && n == 3 && memcmp(v, "xyz", 3) == 0);
  /* an empty value is a value */
  ASSERT_EQ(0, store_set(s, K("empty"), "", 0));
  ASSERT(store_get(s, K("empty"), &n) != NULL && n == 0);
  ASSERT_EQ(2, store_num_keys(s));
  ASSERT_EQ(0, store_append(s, K("a"), "12", 2));
  v = store_get(s, K("a"), &n);
  ASSERT(n == 5 && memcmp(v, "xyz12", 5) == 0);
  /* add: decimal text, absent = 0, non-numbers refused and unchanged */
  ASSERT_EQ(0, store_add(s, K("c"), 5, &r));
  ASSERT_EQ(5, r);
  ASSERT_EQ(0, store_add(s, K("c"), -7, &r));
  ASSERT_EQ(-2, r);
  v = store_get(s, K("c"), &n);
  ASSERT(n == 2 && memcmp(v, "-2", 2) == 0);
  ASSERT_EQ(RDZV_ENOTNUM, store_add(s, K("a"), 1, &r));
  v = store_get(s, K("a"), &n);
  ASSERT(n == 5 && memcmp(v, "xyz12", 5) == 0);
  /* compare-and-set */
  ASSERT_EQ(0, store_cas(s, K("a"), "nope", 4, 0, "new", 3, &swapped));
  ASSERT_EQ(0, swapped);
  ASSERT_EQ(0, store_cas(s, K("a"), "xyz12", 5, 0, "new", 3, &swapped));
  ASSERT_EQ(1, swapped);
  ASSERT_EQ(0, store_cas(s, K("fresh"), NULL, 0, 1, "v", 1, &swapped));
  ASSERT_EQ(1, swapped);
  ASSERT_EQ(0, store_cas(s, K("fresh"), NULL, 0, 1, "w", 1, &swapped));
  ASSERT_EQ(0, swapped); /* present, so "must be absent" fails */
  /* delete */
  ASSERT_EQ(1, store_delete(s, K("a")));
  ASSERT_EQ(0, store_delete(s, K("a")));
  ASSERT(store_get(s, K("a"), &n) == NULL);
  store_free(s);
}

static void test_waiters(void) {
  store_t *s;
  store_waiter_t *w = NULL;
  store_key_t keys[3] = {{"k1", 2, 0}, {"k2", 2, 0}, {"k1", 2, 0}};
  int hits = 0;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  /* already satisfied: no waiter, no callback */
  ASSERT_EQ(0, store_set(s, K("k2"), "v", 1));
  ASSERT_EQ(1, store_wait(s, &keys[1], 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  ASSERT_EQ(0, hits);
  ASSERT_EQ(0, store_delete(s, K("k2")) - 1);
  /* waits for all three (k1 twice) */
  ASSERT_EQ(0, store_wait(s, keys, 3, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  ASSERT_EQ(3, store_wait_remaining(w));
  ASSERT_EQ(0, store_set(s, K("k2"), "v", 1));
  ASSERT_EQ(0, hits);
  /* deleting a waited key does not wake */
  ASSERT_EQ(1, store_delete(s, K("k2")));
  ASSERT_EQ(0, store_set(s, K("k1"), "v", 1));
  ASSERT_EQ(1, hits);
  /* cancel: callback never runs */
  ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"zz", 2, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  store_wait_cancel(w);
  ASSERT_EQ(0, store_set(s, K("zz"), "v", 1));
  ASSERT_EQ(1, hits);
  /* threshold waits (TCPStore BARRIER) */
  ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"n", 1, 0}}, 1, STORE_WAIT_GE, 3, on_wake, &hits, &w));
  ASSERT_EQ(0, store_add(s, K("n"), 1, NULL));
  ASSERT_EQ(0, store_add(s, K("n"), 1, NULL));
  ASSERT_EQ(1, hits);
  ASSERT_EQ(0, store_add(s, K("n"), 1, NULL));
  ASSERT_EQ(2, hits);
  /* many waiters on one key all wake */
  for (int i = 0; i < 100; i++)
    ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"many", 4, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  ASSERT_EQ(0, store_set(s, K("many"), "", 0));
  ASSERT_EQ(102, hits);
  store_free(s);
}

static void test_queues(void) {
  store_t *s;
  store_waiter_t *w;
  int hits = 0;
  uint8_t *v;
  size_t n;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  ASSERT_EQ(0, store_queue_len(s, K("q")));
  ASSERT_EQ(0, store_queue_pop(s, K("q"), &v, &n));
  /* a push wakes one waiter only */
  ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"q", 1, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"q", 1, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w));
  ASSERT_EQ(0, store_queue_push(s, K("q"), "a", 1));
  ASSERT_EQ(1, hits);
  ASSERT_EQ(0, store_queue_push(s, K("q"), "bc", 2));
  ASSERT_EQ(2, hits);
  ASSERT_EQ(1, store_exists(s, K("q")));
  ASSERT_EQ(0, store_num_keys(s)); /* queues are not keys */
  ASSERT_EQ(2, store_queue_len(s, K("q")));
  ASSERT_EQ(1, store_queue_pop(s, K("q"), &v, &n));
  ASSERT(n == 1 && v[0] == 'a');
  free(v);
  ASSERT_EQ(1, store_queue_pop(s, K("q"), &v, &n));
  ASSERT(n == 2 && memcmp(v, "bc", 2) == 0);
  free(v);
  ASSERT_EQ(0, store_exists(s, K("q")));
  /* The one woken is the first a push completes, as in PyTorch: a waiter
   * that still needs another key does not use the wakeup up, nor does
   * WAIT([dq, dq]) need two pushes. */
  {
    int both = 0, only = 0, twice = 0;
    ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"mq", 2, 0}, {"other", 5, 0}}, 2,
                            STORE_WAIT_EXISTS, 0, on_wake, &both, &w));
    ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"mq", 2, 0}}, 1, STORE_WAIT_EXISTS, 0,
                            on_wake, &only, &w));
    ASSERT_EQ(0, store_queue_push(s, K("mq"), "x", 1));
    ASSERT_EQ(0, both);
    ASSERT_EQ(1, only);
    ASSERT_EQ(0, store_set(s, K("other"), "", 0));
    ASSERT_EQ(1, both);
    ASSERT_EQ(0, store_wait(s, (store_key_t[]){{"dq", 2, 0}, {"dq", 2, 0}}, 2,
                            STORE_WAIT_EXISTS, 0, on_wake, &twice, &w));
    ASSERT_EQ(0, store_queue_push(s, K("dq"), "y", 1));
    ASSERT_EQ(1, twice);
  }
  store_free(s);
}

static void count_queue(const void *key, size_t klen, void *arg) {
  (void)key;
  (void)klen;
  (*(int *)arg)++;
}

/* A new round drops the earlier rounds' TCPStore queues as it drops their
 * values: store_foreach_queue finds them, store_queue_clear empties one
 * and gives its bytes back. */
static void test_queue_clear(void) {
  store_t *s;
  int nq = 0;
  size_t empty;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  empty = store_bytes(s);
  ASSERT_EQ(0, store_set(s, K("v"), "x", 1));
  ASSERT_EQ(0, store_queue_push(s, K("q1"), "a", 1));
  ASSERT_EQ(0, store_queue_push(s, K("q1"), "bb", 2));
  ASSERT_EQ(0, store_queue_push(s, K("q2"), "c", 1));
  store_foreach_queue(s, count_queue, &nq);
  ASSERT_EQ(2, nq);
  ASSERT_EQ(2, store_queue_clear(s, K("q1")));
  ASSERT_EQ(0, store_queue_len(s, K("q1")));
  ASSERT_EQ(0, store_exists(s, K("q1")));
  ASSERT_EQ(1, store_queue_clear(s, K("q2")));
  ASSERT_EQ(0, store_queue_clear(s, K("none")));
  nq = 0;
  store_foreach_queue(s, count_queue, &nq);
  ASSERT_EQ(0, nq);
  ASSERT_EQ(1, store_delete(s, K("v")));
  ASSERT_EQ(empty, store_bytes(s));
  ASSERT_EQ(1, store_is_empty(s));
  store_free(s);
}

static void test_watch_and_barrier(void) {
  store_t *s;
  store_watch_t *w;
  store_bwait_t *b[3];
  ASSERT_EQ(0, store_new(0, NULL, &s));
  ASSERT_EQ(0, store_watch(s, K("w"), on_watch, NULL, &w));
  ASSERT_EQ(0, store_set(s, K("w"), "one", 3));
  ASSERT_EQ(STORE_EV_CREATED, last_ev);
  ASSERT_STR_EQ("one", last_new);
  ASSERT_EQ(0, store_set(s, K("w"), "two", 3));
  ASSERT_EQ(STORE_EV_UPDATED, last_ev);
  ASSERT_STR_EQ("one", last_old);
  ASSERT_EQ(1, store_delete(s, K("w")));
  ASSERT_EQ(STORE_EV_DELETED, last_ev);
  ASSERT_STR_EQ("two", last_old);
  ASSERT_EQ(3, nevents);
  store_unwatch(w);
  ASSERT_EQ(0, store_set(s, K("w"), "x", 1));
  ASSERT_EQ(3, nevents);

  ASSERT_EQ(0, store_barrier(s, K("b"), 3, on_bar, NULL, &b[0]));
  ASSERT_EQ(RDZV_EINVAL, store_barrier(s, K("b"), 4, on_bar, NULL, &b[2]));
  ASSERT_EQ(0, store_barrier(s, K("b"), 3, on_bar, NULL, &b[1]));
  /* a member that leaves no longer counts */
  store_barrier_cancel(b[1]);
  ASSERT_EQ(0, store_barrier(s, K("b"), 3, on_bar, NULL, &b[1]));
  ASSERT_EQ(0, bar_open);
  ASSERT_EQ(1, store_barrier(s, K("b"), 3, on_bar, NULL, &b[2]));
  ASSERT_EQ(2, bar_open);
  /* reusable: a new round starts empty, and may use another count */
  ASSERT_EQ(0, store_barrier(s, K("b"), 2, on_bar, NULL, &b[0]));
  ASSERT_EQ(1, store_barrier(s, K("b"), 2, on_bar, NULL, &b[1]));
  ASSERT_EQ(3, bar_open);
  store_free(s);
}

/* A watcher that keeps the old value's block (store_watch_take_old): the
 * first of two watchers of an event gets it, the second NULL, the old
 * value stays readable where it was, and the store does not free it
 * (ASan: no double free, no leak once the watcher frees it). */
static uint8_t *taken[4];
static int ntaken, nnull;
static char taken_old[16];

static void on_watch_take(store_watch_t *w, int ev, const void *key,
                          size_t klen, const uint8_t *old, size_t olen,
                          const uint8_t *nv, size_t nlen, void *data) {
  uint8_t *b = store_watch_take_old(w);
  (void)ev;
  (void)key;
  (void)klen;
  (void)nv;
  (void)nlen;
  (void)data;
  if (b == NULL) {
    nnull++;
    return;
  }
  ASSERT(old >= b); /* the value lies in the block */
  snprintf(taken_old, sizeof(taken_old), "%.*s", (int)olen, (const char *)old);
  taken[ntaken++] = b;
}

static void test_watch_take_old(void) {
  store_t *s;
  store_watch_t *w1, *w2;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  ASSERT_EQ(0, store_watch(s, K("t"), on_watch_take, NULL, &w1));
  ASSERT_EQ(0, store_watch(s, K("t"), on_watch_take, NULL, &w2));
  /* Created: no old value, nothing to take. */
  ASSERT_EQ(0, store_set(s, K("t"), "first", 5));
  ASSERT_EQ(0, ntaken);
  ASSERT_EQ(2, nnull);
  /* Updated: one watcher takes "first"'s block. */
  ASSERT_EQ(0, store_set(s, K("t"), "second", 6));
  ASSERT_EQ(1, ntaken);
  ASSERT_EQ(3, nnull);
  ASSERT_STR_EQ("first", taken_old);
  ASSERT(memcmp(taken[0], "first", 5) == 0);
  /* Deleted: "second"'s block. */
  ASSERT_EQ(1, store_delete(s, K("t")));
  ASSERT_EQ(2, ntaken);
  ASSERT_STR_EQ("second", taken_old);
  /* Outside a callback there is nothing to take. */
  ASSERT(store_watch_take_old(w1) == NULL);
  store_unwatch(w1);
  store_unwatch(w2);
  store_free(s);
  for (int i = 0; i < ntaken; i++)
    lu_big_free(taken[i]);
}

static void test_limits(void) {
  store_t *s;
  char big[4096];
  memset(big, 'x', sizeof(big));
  ASSERT_EQ(0, store_new(10000, NULL, &s));
  ASSERT_EQ(0, store_set(s, K("a"), big, sizeof(big)));
  ASSERT_EQ(0, store_set(s, K("b"), big, sizeof(big)));
  ASSERT_EQ(RDZV_ETOOBIG, store_set(s, K("c"), big, sizeof(big)));
  ASSERT(store_get(s, K("c"), &(size_t){0}) == NULL);
  /* overwriting counts the difference only */
  ASSERT_EQ(0, store_set(s, K("a"), big, sizeof(big)));
  ASSERT_EQ(1, store_delete(s, K("b")));
  ASSERT_EQ(0, store_set(s, K("c"), big, sizeof(big)));
  ASSERT_EQ(RDZV_ETOOBIG, store_append(s, K("c"), big, sizeof(big)));
  store_free(s);
}

static void test_waits_count(void) {
  store_t *s, *t;
  store_budget_t b = {0, 30000, 0};
  store_waiter_t *w[8];
  store_watch_t *wa;
  store_bwait_t *bw;
  static char big[12000];
  char key[4096];
  store_key_t k = {key, sizeof(key), 0};
  int n = 0, data = 0;
  ASSERT_EQ(0, store_new(20000, &b, &s));
  ASSERT_EQ(0, store_new(20000, &b, &t));
  memset(key, 'k', sizeof(key));
  memset(big, 'b', sizeof(big));
  /* Waits on keys that never come cost what those keys would: the fifth
   * 4 KiB key is over the 20000-byte bound. */
  for (n = 0; n < 8; n++) {
    int rc;
    key[0] = (char)('a' + n);
    rc = store_wait(s, &k, 1, STORE_WAIT_EXISTS, 0, on_wake, &data, &w[n]);
    if (rc != 0) {
      ASSERT_EQ(RDZV_ETOOBIG, rc);
      break;
    }
  }
  ASSERT_EQ(4, n);
  ASSERT(store_bytes(s) > 4 * sizeof(key) && store_bytes(s) <= 20000);
  ASSERT_EQ(store_bytes(s), b.used);
  /* A watch of a new 4 KiB key costs that key too. */
  key[0] = 'z';
  ASSERT_EQ(RDZV_ETOOBIG,
            store_watch(s, key, sizeof(key), on_watch, NULL, &wa));
  /* The shared budget binds the other store: s holds about 17000 of the
   * 30000 bytes; t would have room of its own for 15000, the budget not. */
  ASSERT_EQ(0, store_set(t, K("v"), big, 10000));
  ASSERT_EQ(RDZV_ETOOBIG, store_set(t, K("w"), big, 5000));
  b.max = 40000;
  ASSERT_EQ(0, store_set(t, K("w"), big, 5000));
  ASSERT_EQ(store_bytes(s) + store_bytes(t), b.used);
  /* A barrier's name counts as well. */
  ASSERT_EQ(RDZV_ETOOBIG,
            store_barrier(t, big, 12000, 2, on_bar, NULL, &bw));
  /* Cancelling gives everything back. */
  for (int i = 0; i < n; i++)
    store_wait_cancel(w[i]);
  ASSERT_EQ(0, store_bytes(s));
  ASSERT_EQ(0, store_watch(s, K("x"), on_watch, NULL, &wa));
  ASSERT_EQ(0, store_barrier(t, K("bar"), 2, on_bar, NULL, &bw));
  ASSERT(!store_is_empty(s) && !store_is_empty(t));
  store_unwatch(wa);
  store_barrier_cancel(bw);
  ASSERT(store_is_empty(s));
  /* store_clear drops the values; the budget follows. */
  store_clear(t);
  ASSERT(store_is_empty(t));
  ASSERT_EQ(0, store_bytes(t));
  ASSERT_EQ(0, b.used);
  store_free(s);
  store_free(t);
}

/* A store's first `floor` bytes are its own: a new job's first keys go in
 * when the others filled the shared budget (the server prepaid them with
 * the job), its bytes past the floor do not, and the budget counts only
 * what lies past each store's floor. */
static void test_budget_floor(void) {
  store_t *s, *t;
  store_budget_t b = {0, 2000, 4096};
  static char big[8000];
  memset(big, 'b', sizeof(big));
  ASSERT_EQ(0, store_new(1 << 20, &b, &s));
  ASSERT_EQ(0, store_new(1 << 20, &b, &t));
  ASSERT_EQ(0, store_set(s, K("a"), big, 3000)); /* within the floor */
  ASSERT_EQ(0, b.used);
  ASSERT_EQ(0, store_set(s, K("b"), big, 2800)); /* past it */
  ASSERT_EQ(store_bytes(s) - 4096, b.used);
  ASSERT(b.used > 1000 && b.used <= 2000);
  ASSERT_EQ(RDZV_ETOOBIG, store_set(s, K("c"), big, 1000));
  /* The budget is full for s; t's first keys are its own. */
  b.max = b.used;
  ASSERT_EQ(RDZV_ETOOBIG, store_set(s, K("c"), big, 1));
  ASSERT_EQ(0, store_set(t, K("k"), "v", 1));
  ASSERT_EQ(0, store_set(t, K("l"), big, 3000));
  ASSERT_EQ(RDZV_ETOOBIG, store_set(t, K("m"), big, 2000));
  /* Replacing a value past the floor by a smaller one always goes in and
   * gives its share back. */
  ASSERT_EQ(0, store_set(s, K("b"), big, 10));
  ASSERT_EQ(0, b.used);
  ASSERT_EQ(0, store_set(t, K("m"), big, 2000));
  ASSERT_EQ(store_bytes(t) - 4096, b.used);
  store_free(t);
  ASSERT_EQ(0, b.used);
  store_free(s);
}

/* A WAIT's keys left in the block of its request (store_wait_in): the
 * waiter wakes as a copied one does, the block counts against the bounds
 * until the last entry that uses it goes, and a block the keys do not make
 * most of stays the caller's. */
static void test_wait_keys_in_block(void) {
  enum { NK = 8, KL = 1024 };
  store_t *s;
  store_budget_t b = {0, 1 << 20, 0};
  store_waiter_t *w = NULL, *w2 = NULL;
  store_key_t keys[NK] = {{0}};
  size_t bsz = NK * (KL + 3) + 16;
  uint8_t *blk = lu_big_alloc(bsz), *small;
  int hits = 0, adopted = -1;
  size_t v;
  ASSERT(blk != NULL);
  ASSERT_EQ(0, store_new(1 << 20, &b, &s));
  /* Keys laid out like a frame's: a few bytes of framing before each. */
  memset(blk, 0, bsz);
  for (int i = 0; i < NK; i++) {
    uint8_t *p = blk + 16 + (size_t)i * (KL + 3);
    memset(p, 'a' + i, KL);
    keys[i].p = p;
    keys[i].n = KL;
  }
  /* Over the store's bound: refused, the block still the caller's. */
  {
    store_t *t;
    ASSERT_EQ(0, store_new(4096, NULL, &t));
    ASSERT_EQ(RDZV_ETOOBIG, store_wait_in(t, keys, NK, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w, blk, bsz, &adopted));
    ASSERT_EQ(0, adopted);
    ASSERT_EQ(0, store_bytes(t));
    store_free(t);
  }
  ASSERT_EQ(0, store_wait_in(s, keys, NK, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w, blk, bsz, &adopted));
  ASSERT_EQ(1, adopted);
  ASSERT_EQ(NK, store_wait_remaining(w));
  /* Counted as the block (all of it) and each entry's bookkeeping. */
  ASSERT(store_bytes(s) >= bsz + NK * 64);
  ASSERT_EQ(store_bytes(s), b.used);
  /* A second waiter on the same keys finds the entries (their keys in the
   * block) by a key of its own. */
  {
    char k3[KL];
    memset(k3, 'a' + 3, KL);
    ASSERT_EQ(0, store_wait(s, (store_key_t[]){{k3, KL, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w2));
    for (int i = 0; i < NK; i++) {
      char k[KL];
      memset(k, 'a' + i, KL);
      ASSERT_EQ(i <= 3 ? 0 : 1, hits); /* w2 wakes with key 3 */
      ASSERT_EQ(0, store_set(s, k, KL, "v", 1));
    }
    ASSERT_EQ(2, hits); /* w with the last */
    ASSERT(store_get(s, k3, KL, &v) != NULL && v == 1);
    /* The values keep their entries, and the entries the block. */
    ASSERT(store_bytes(s) >= bsz);
    for (int i = 0; i < NK - 1; i++) {
      char k[KL];
      memset(k, 'a' + i, KL);
      ASSERT_EQ(1, store_delete(s, k, KL));
    }
    ASSERT(store_bytes(s) >= bsz);
    memset(k3, 'a' + NK - 1, KL);
    ASSERT_EQ(1, store_delete(s, k3, KL));
  }
  ASSERT_EQ(0, store_bytes(s));
  ASSERT_EQ(0, b.used);
  /* Keys that make little of the block: copied (counted as copies), the
   * block the caller's (freed here: ASan would see a double free). */
  small = lu_big_alloc(64 << 10);
  ASSERT(small != NULL);
  memset(small, 'q', KL);
  ASSERT_EQ(0, store_wait_in(s, (store_key_t[]){{small, KL, 0}}, 1, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w, small, 64 << 10, &adopted));
  ASSERT_EQ(0, adopted);
  ASSERT(store_bytes(s) >= KL && store_bytes(s) < 4 * KL);
  memset(small, 0, KL);
  lu_big_free(small);
  {
    char k[KL];
    memset(k, 'q', KL);
    ASSERT_EQ(0, store_set(s, k, KL, "v", 1));
    ASSERT_EQ(3, hits);
    ASSERT_EQ(1, store_delete(s, k, KL));
  }
  ASSERT_EQ(0, store_bytes(s));
  /* A cancelled waiter frees the block it kept (ASan: no leak). */
  blk = lu_big_alloc(bsz);
  ASSERT(blk != NULL);
  for (int i = 0; i < NK; i++) {
    uint8_t *p = blk + 16 + (size_t)i * (KL + 3);
    memset(p, 'A' + i, KL);
    keys[i].p = p;
  }
  ASSERT_EQ(0, store_wait_in(s, keys, NK, STORE_WAIT_EXISTS, 0, on_wake, &hits, &w, blk, bsz, &adopted));
  ASSERT_EQ(1, adopted);
  store_wait_cancel(w);
  ASSERT_EQ(0, store_bytes(s));
  ASSERT_EQ(0, b.used);
  store_free(s);
}

static void test_many_keys(void) {
  store_t *s;
  char k[32];
  size_t n;
  ASSERT_EQ(0, store_new(0, NULL, &s));
  for (int i = 0; i < 50000; i++) {
    snprintf(k, sizeof(k), "key/%d", i);
    ASSERT_EQ(0, store_set(s, k, strlen(k), k, strlen(k)));
  }
  ASSERT_EQ(50000, store_num_keys(s));
  for (int i = 0; i < 50000; i += 7) {
    const uint8_t *v;
    snprintf(k, sizeof(k), "key/%d", i);
    v = store_get(s, k, strlen(k), &n);
    ASSERT(v && n == strlen(k) && memcmp(v, k, n) == 0);
  }
  store_free(s);
}

int main(void) {
  test_values();
  test_waiters();
  test_queues();
  test_queue_clear();
  test_watch_and_barrier();
  test_watch_take_old();
  test_limits();
  test_waits_count();
  test_budget_floor();
  test_wait_keys_in_block();
  test_many_keys();
  printf("test_store: ok\n");
  return 0;
}
