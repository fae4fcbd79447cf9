/* test_native_ops.c - every store operation through librdzv against a real
 * server: values, add, compare-and-set, waits woken by another client's
 * write, timeouts, a 64-client barrier, job isolation, authentication, a
 * paused connection that resumes in the middle of a request. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"
#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "server.h"
#include "test.h"

static rdzv_client_t *connect_job(const char *job, const char *token) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  o.endpoint = test_server_endpoint();
  o.job = job;
  o.token = token;
  o.token_len = token ? strlen(token) : 0;
  o.connect_timeout_ms = test_ms(5000);
  ASSERT_OK(rdzv_connect(&o, &c));
  return c;
}

static void test_basic_ops(void) {
  rdzv_client_t *c = connect_job("ops", NULL);
  void *v = NULL, *cur = NULL;
  size_t n = 0;
  int64_t r, nk;
  int swapped = -1;
  const char *keys[] = {"a", "b"};
  const void *vals[] = {"1", "22"};
  size_t lens[] = {1, 2};
  rdzv_value_t out[2];

  ASSERT_OK(rdzv_ping(c, 1000));
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(c, "a", &v, &n, 0));
  ASSERT_OK(rdzv_set(c, "a", "hello", 5, 1000));
  ASSERT_OK(rdzv_get(c, "a", &v, &n, 0));
  ASSERT(n == 5 && memcmp(v, "hello", 5) == 0);
  rdzv_free(v);
  /* binary values with NUL bytes survive */
  ASSERT_OK(rdzv_set(c, "bin", "\0\1\0", 3, 1000));
  ASSERT_OK(rdzv_get(c, "bin", &v, &n, 1000));
  ASSERT(n == 3 && memcmp(v, "\0\1\0", 3) == 0);
  rdzv_free(v);
  ASSERT_EQ(1, rdzv_check(c, (const char *[]){"a", "bin"}, 2, 1000));
  ASSERT_EQ(0, rdzv_check(c, (const char *[]){"a", "nope"}, 2, 1000));
  ASSERT_OK(rdzv_add(c, "ctr", 5, &r, 1000));
  ASSERT_EQ(5, r);
  ASSERT_OK(rdzv_add(c, "ctr", -2, &r, 1000));
  ASSERT_EQ(3, r);
  ASSERT_EQ(RDZV_ENOTNUM, rdzv_add(c, "a", 1, &r, 1000));
  ASSERT_CONTAINS(rdzv_last_error(c), "integer");
  /* compare-and-set */
  ASSERT_OK(rdzv_compare_set(c, "a", "wrong", 5, "x", 1, &cur, &n, &swapped, 1000));
  ASSERT_EQ(0, swapped);
  ASSERT(n == 5 && memcmp(cur, "hello", 5) == 0);
  rdzv_free(cur);
  ASSERT_OK(rdzv_compare_set(c, "a", "hello", 5, "bye", 3, &cur, &n, &swapped, 1000));
  ASSERT_EQ(1, swapped);
  ASSERT(n == 3 && memcmp(cur, "bye", 3) == 0);
  rdzv_free(cur);
  ASSERT_OK(rdzv_compare_set(c, "absent", NULL, 0, "first", 5, &cur, &n, &swapped, 1000));
  ASSERT_EQ(1, swapped);
  rdzv_free(cur);
  ASSERT_OK(rdzv_compare_set(c, "absent", NULL, 0, "second", 6, &cur, &n, &swapped, 1000));
  ASSERT_EQ(0, swapped);
  ASSERT(n == 5 && memcmp(cur, "first", 5) == 0);
  rdzv_free(cur);
  /* append, delete, num_keys */
  ASSERT_OK(rdzv_append(c, "log", "ab", 2, 1000));
  ASSERT_OK(rdzv_append(c, "log", "cd", 2, 1000));
  ASSERT_OK(rdzv_get(c, "log", &v, &n, 0));
  ASSERT(n == 4 && memcmp(v, "abcd", 4) == 0);
  rdzv_free(v);
  ASSERT_OK(rdzv_num_keys(c, &nk, 1000));
  ASSERT_EQ(5, nk); /* a bin ctr absent log */
  ASSERT_EQ(1, rdzv_delete(c, "log", 1000));
  ASSERT_EQ(0, rdzv_delete(c, "log", 1000));
  ASSERT_OK(rdzv_num_keys(c, &nk, 1000));
  ASSERT_EQ(4, nk);
  /* multi */
  ASSERT_OK(rdzv_multi_set(c, keys, vals, lens, 2, 1000));
  ASSERT_OK(rdzv_multi_get(c, keys, 2, out, 1000));
  ASSERT(out[0].len == 1 && memcmp(out[0].data, "1", 1) == 0);
  ASSERT(out[1].len == 2 && memcmp(out[1].data, "22", 2) == 0);
  rdzv_free(out[0].data);
  rdzv_free(out[1].data);
  /* invalid arguments are refused before anything is sent */
  ASSERT_EQ(RDZV_EINVAL, rdzv_set(c, NULL, "x", 1, 1000));
  ASSERT_EQ(RDZV_EINVAL, rdzv_barrier(c, "b", 0, 1000));
  {
    /* a NULL value with a length, as rdzv_set refuses it (it was read) */
    const void *nv[] = {"1", NULL};
    size_t nl[] = {1, 64};
    void *comm = NULL;
    ASSERT_EQ(RDZV_EINVAL, rdzv_multi_set(c, keys, nv, nl, 2, 1000));
    /* no ranks, or a rank outside them (it divided by zero) */
    ASSERT_EQ(RDZV_EINVAL, rdzv_nccl_comm_init(c, "x", 0, 0, 0, &comm, NULL,
                                               1000));
    ASSERT_EQ(RDZV_EINVAL, rdzv_nccl_comm_init(c, "x", 2, 2, 0, &comm, NULL,
                                               1000));
  }
  /* a wait of nearly INT_MAX ms: its deadline is computed in 64 bits */
  {
    void *got = NULL;
    size_t vn = 0;
    ASSERT_OK(rdzv_get(c, keys[0], &got, &vn, INT_MAX - 100));
    rdzv_free(got);
  }
  rdzv_close(c);
}

typedef struct {
  const char *key;
  int delay_ms;
} setter_t;

static void *delayed_setter(void *arg) {
  setter_t *s = arg;
  rdzv_client_t *c = connect_job("wait", NULL);
  usleep((useconds_t)s->delay_ms * 1000);
  ASSERT_OK(rdzv_set(c, s->key, "go", 2, 5000));
  rdzv_close(c);
  return NULL;
}

static void test_waits(void) {
  rdzv_client_t *c = connect_job("wait", NULL);
  pthread_t t;
  setter_t s = {"later", 200};
  void *v;
  size_t n;
  uint64_t t0;
  const char *two[] = {"later2", "also"};

  /* A get that waits is answered once another client sets the key. */
  t0 = lu_now_ms();
  pthread_create(&t, NULL, delayed_setter, &s);
  ASSERT_OK(rdzv_get(c, "later", &v, &n, test_ms(10000)));
  ASSERT(n == 2 && memcmp(v, "go", 2) == 0);
  ASSERT(lu_now_ms() - t0 >= 150);
  rdzv_free(v);
  pthread_join(t, NULL);

  /* A wait on two keys needs both. */
  s.key = "later2";
  pthread_create(&t, NULL, delayed_setter, &s);
  ASSERT_EQ(-ETIMEDOUT, rdzv_wait(c, two, 2, 600));
  ASSERT_CONTAINS(rdzv_last_error(c), "missing");
  pthread_join(t, NULL);
  ASSERT_OK(rdzv_set(c, "also", "", 0, 1000));
  ASSERT_OK(rdzv_wait(c, two, 2, 1000));

  /* Timeouts are the server's: prompt, with a message. */
  t0 = lu_now_ms();
  ASSERT_EQ(-ETIMEDOUT, rdzv_get(c, "never", &v, &n, 300));
  ASSERT(lu_now_ms() - t0 >= 290);
  ASSERT(lu_now_ms() - t0 < (uint64_t)test_ms(3000));
  /* The connection stays usable after a timeout. */
  ASSERT_OK(rdzv_ping(c, 1000));
  /* multi_get waits for every key */
  ASSERT_EQ(-ETIMEDOUT,
            rdzv_multi_get(c, (const char *[]){"later", "nope"}, 2,
                           (rdzv_value_t[2]){{0}}, 200));
  rdzv_close(c);
}

#define NBAR 64
static int bar_ok;
static pthread_mutex_t bar_mu = PTHREAD_MUTEX_INITIALIZER;

static void *barrier_member(void *arg) {
  rdzv_client_t *c = connect_job("barrier", NULL);
  int64_t after;
  (void)arg;
  ASSERT_OK(rdzv_add(c, "arrived", 1, NULL, 5000));
  ASSERT_OK(rdzv_barrier(c, "b1", NBAR, test_ms(20000)));
  /* Nobody passes before everyone arrived. */
  ASSERT_OK(rdzv_add(c, "arrived", 0, &after, 5000));
  ASSERT_EQ(NBAR, after);
  /* The same barrier again: it reset. */
  ASSERT_OK(rdzv_barrier(c, "b1", NBAR, test_ms(20000)));
  pthread_mutex_lock(&bar_mu);
  bar_ok++;
  pthread_mutex_unlock(&bar_mu);
  rdzv_close(c);
  return NULL;
}

static void test_barrier64(void) {
  pthread_t t[NBAR];
  rdzv_client_t *c;
  for (int i = 0; i < NBAR; i++)
    ASSERT_EQ(0, pthread_create(&t[i], NULL, barrier_member, NULL));
  for (int i = 0; i < NBAR; i++)
    pthread_join(t[i], NULL);
  ASSERT_EQ(NBAR, bar_ok);
  /* A short barrier times out and leaves: a later full one still works. */
  c = connect_job("barrier", NULL);
  ASSERT_EQ(-ETIMEDOUT, rdzv_barrier(c, "b2", 2, 200));
  ASSERT_EQ(-ETIMEDOUT, rdzv_barrier(c, "b2", 2, 200));
  rdzv_close(c);
}

/* SET and MGET sent in one write (how an NCCL root publishes its id):
 * both answered in order; when the SET is refused its error is returned at
 * once and the MGET's late reply does not confuse the next call. */
static void test_pipelined(void) {
  rdzv_client_t *c = connect_job("pipe", NULL);
  const char *keys[] = {"p/a", "p/b"}, *never[] = {"p/never"};
  rdzv_value_t v[2];
  size_t big = (8u << 20) + 1; /* over the default --max-value */
  char *huge = calloc(1, big);
  void *got = NULL;
  size_t n = 0;
  ASSERT_EQ(0, rdzv_set(c, "p/b", "B", 1, 5000));
  ASSERT_EQ(0, rdzv__set_multi_get(c, "p/a", "A", 1, keys, 2, v, 5000));
  ASSERT(v[0].len == 1 && memcmp(v[0].data, "A", 1) == 0);
  ASSERT(v[1].len == 1 && memcmp(v[1].data, "B", 1) == 0);
  rdzv_free(v[0].data);
  rdzv_free(v[1].data);
  ASSERT_EQ(RDZV_ETOOBIG,
            rdzv__set_multi_get(c, "p/c", huge, big, never, 1, v, 300));
  ASSERT_EQ(0, rdzv_ping(c, 5000)); /* answered before the MGET's */
  usleep(400 * 1000);               /* the MGET's -ETIMEDOUT is in */
  ASSERT_EQ(0, rdzv_get(c, "p/a", &got, &n, 0));
  ASSERT(n == 1 && memcmp(got, "A", 1) == 0);
  rdzv_free(got);
  free(huge);
  rdzv_close(c);
}

/* Large values are kept in the buffer they arrived in (no copy): they
 * read back byte for byte, alone or pipelined with the next request, and
 * count against --max-store-bytes as copies did. */
static void fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (uint8_t)(seed >> 16);
  }
}

static void test_large_values(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  enum { N = 3u << 20 };
  uint8_t *a = malloc(N), *b = malloc(N);
  const char *keys[] = {"big/b"};
  rdzv_value_t got[1];
  rdzv_client_t *c;
  void *v = NULL;
  size_t n = 0;
  cfg.max_store_bytes = 8u << 20; /* two of them, not three */
  test_server_start(&cfg);
  c = connect_job("large", NULL);
  fill(a, N, 1);
  fill(b, N, 2);
  ASSERT_OK(rdzv_set(c, "big/a", a, N, test_ms(5000)));
  ASSERT_OK(rdzv_get(c, "big/a", &v, &n, 0));
  ASSERT(n == N && memcmp(v, a, N) == 0);
  rdzv_free(v);
  /* replaced, and with a request right behind it in the same write */
  ASSERT_OK(rdzv__set_multi_get(c, "big/a", b, N, keys, 0, got,
                                test_ms(5000)));
  ASSERT_OK(rdzv__set_multi_get(c, "big/b", a, N, keys, 1, got,
                                test_ms(5000)));
  ASSERT(got[0].len == N && memcmp(got[0].data, a, N) == 0);
  rdzv_free(got[0].data);
  ASSERT_OK(rdzv_get(c, "big/a", &v, &n, 0));
  ASSERT(n == N && memcmp(v, b, N) == 0);
  rdzv_free(v);
  /* 6 MiB stored: a third value is over the 8 MiB, until one goes */
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "big/c", a, N, test_ms(5000)));
  ASSERT_OK(rdzv_delete(c, "big/b", test_ms(5000)));
  ASSERT_OK(rdzv_set(c, "big/c", a, N, test_ms(5000)));
  ASSERT_OK(rdzv_get(c, "big/c", &v, &n, 0));
  ASSERT(n == N && memcmp(v, a, N) == 0);
  rdzv_free(v);
  rdzv_close(c);
  test_server_stop();
  free(a);
  free(b);
}

/* A WAIT of many long keys (its keys are kept in the request's buffer,
 * not copied): it wakes when the last key is set, times out when one is
 * missing, and its keys count against --max-store-bytes. */
enum { WK_N = 96, WK_LEN = 8192 };

static char **long_keys(int n, char tag) {
  char **k = calloc((size_t)n, sizeof(*k));
  ASSERT(k != NULL);
  for (int i = 0; i < n; i++) {
    k[i] = malloc(WK_LEN + 1);
    ASSERT(k[i] != NULL);
    memset(k[i], tag, WK_LEN);
    snprintf(k[i], 16, "k%05d", i);
    k[i][strlen(k[i])] = tag;
    k[i][WK_LEN] = '\0';
  }
  return k;
}

static void free_keys(char **k, int n) {
  for (int i = 0; i < n; i++)
    free(k[i]);
  free(k);
}

typedef struct {
  char **keys;
  int n;
} many_setter_t;

static void *set_many_later(void *arg) {
  many_setter_t *m = arg;
  rdzv_client_t *c = connect_job("longwait", NULL);
  usleep(200 * 1000);
  for (int i = 0; i < m->n; i++)
    ASSERT_OK(rdzv_set(c, m->keys[i], "v", 1, test_ms(5000)));
  rdzv_close(c);
  return NULL;
}

static void test_wait_long_keys(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  char **k = long_keys(WK_N, 'x'), **more = long_keys(3 * WK_N, 'y');
  many_setter_t m = {k, WK_N};
  rdzv_client_t *c;
  pthread_t t;
  void *v = NULL;
  size_t n = 0;
  cfg.max_store_bytes = 2u << 20;
  test_server_start(&cfg);
  c = connect_job("longwait", NULL);
  /* 768 KiB of keys: one missing, it times out (and gives all back) */
  ASSERT_OK(rdzv_set(c, k[0], "v", 1, test_ms(5000)));
  ASSERT_EQ(-ETIMEDOUT, rdzv_wait(c, (const char *const *)k, WK_N, 300));
  ASSERT_CONTAINS(rdzv_last_error(c), "missing");
  /* set by another client meanwhile: woken by the last key */
  pthread_create(&t, NULL, set_many_later, &m);
  ASSERT_OK(rdzv_wait(c, (const char *const *)k, WK_N, test_ms(10000)));
  pthread_join(t, NULL);
  ASSERT_OK(rdzv_get(c, k[WK_N - 1], &v, &n, 0));
  ASSERT(n == 1 && memcmp(v, "v", 1) == 0);
  rdzv_free(v);
  /* 2.3 MiB of keys waited for: over the 2 MiB store, refused now */
  ASSERT_EQ(RDZV_ETOOBIG,
            rdzv_wait(c, (const char *const *)more, 3 * WK_N, 300));
  /* the first WAIT's keys still count until deleted: a third of those
   * keys fits only once they go */
  ASSERT_EQ(RDZV_ETOOBIG,
            rdzv_wait(c, (const char *const *)more, 2 * WK_N, 300));
  for (int i = 0; i < WK_N; i++)
    ASSERT_EQ(1, rdzv_delete(c, k[i], test_ms(5000)));
  ASSERT_EQ(-ETIMEDOUT,
            rdzv_wait(c, (const char *const *)more, 2 * WK_N, 300));
  rdzv_close(c);
  test_server_stop();
  free_keys(k, WK_N);
  free_keys(more, 3 * WK_N);
}

/* An MGET or CHECK of many keys (a frame decoded without an object per
 * key) answers for every key in order. */
static void test_many_keys_list(void) {
  enum { NK = 20000 };
  rdzv_client_t *c = connect_job("keylist", NULL);
  const char **keys = calloc(NK, sizeof(*keys));
  rdzv_value_t *vals = calloc(NK, sizeof(*vals));
  static const char *names[] = {"kl/a", "kl/bb", "kl/ccc"};
  ASSERT(keys != NULL && vals != NULL);
  ASSERT_OK(rdzv_set(c, "kl/a", "1", 1, test_ms(5000)));
  ASSERT_OK(rdzv_set(c, "kl/bb", "22", 2, test_ms(5000)));
  ASSERT_OK(rdzv_set(c, "kl/ccc", "333", 3, test_ms(5000)));
  for (int i = 0; i < NK; i++)
    keys[i] = names[(i * 7) % 3];
  ASSERT_EQ(1, rdzv_check(c, keys, NK, test_ms(5000)));
  ASSERT_OK(rdzv_multi_get(c, keys, NK, vals, test_ms(5000)));
  for (int i = 0; i < NK; i++) {
    int w = (i * 7) % 3;
    ASSERT_EQ((size_t)w + 1, vals[i].len);
    ASSERT(((char *)vals[i].data)[0] == (char)('1' + w));
    rdzv_free(vals[i].data);
  }
  keys[NK - 1] = "kl/missing";
  ASSERT_EQ(0, rdzv_check(c, keys, NK, test_ms(5000)));
  ASSERT_EQ(-ETIMEDOUT, rdzv_multi_get(c, keys, NK, vals, 200));
  rdzv_close(c);
  free(keys);
  free(vals);
}

/* Values set one by one by another client while an MGET of many distinct
 * keys (a frame decoded and hashed before the server's lock, a slice a
 * pass) waits: woken by the last, it answers every key's own value in
 * order; behind a pipelined SET, it sees that SET's value. */
#define MW_N 40000 /* 360 KiB of keys: decoded ahead over several passes */
static void *set_values_later(void *arg) {
  rdzv_client_t *c = connect_job("keylist", NULL);
  char k[16], v[16];
  (void)arg;
  usleep(100 * 1000);
  for (int i = MW_N - 1; i >= 0; i--) {
    snprintf(k, sizeof(k), "mw/%05d", i);
    snprintf(v, sizeof(v), "v%d", i * 3);
    ASSERT_OK(rdzv_set(c, k, v, strlen(v), test_ms(5000)));
  }
  rdzv_close(c);
  return NULL;
}

static void test_many_keys_woken(void) {
  rdzv_client_t *c = connect_job("keylist", NULL);
  char **keys = calloc(MW_N, sizeof(*keys));
  rdzv_value_t *vals = calloc(MW_N, sizeof(*vals));
  pthread_t t;
  ASSERT(keys != NULL && vals != NULL);
  for (int i = 0; i < MW_N; i++) {
    keys[i] = malloc(16);
    ASSERT(keys[i] != NULL);
    snprintf(keys[i], 16, "mw/%05d", i);
  }
  ASSERT_EQ(-ETIMEDOUT, rdzv_wait(c, (const char *const *)keys, MW_N, 100));
  pthread_create(&t, NULL, set_values_later, NULL);
  ASSERT_OK(rdzv_multi_get(c, (const char *const *)keys, MW_N, vals,
                           test_ms(20000)));
  pthread_join(t, NULL);
  for (int i = 0; i < MW_N; i++) {
    char v[16];
    snprintf(v, sizeof(v), "v%d", i * 3);
    ASSERT_EQ(strlen(v), vals[i].len);
    ASSERT(memcmp(vals[i].data, v, vals[i].len) == 0);
    rdzv_free(vals[i].data);
  }
  /* a SET pipelined before the MGET (the large frame behind it in the
   * same read) runs first */
  ASSERT_OK(rdzv__set_multi_get(c, "mw/00000", "new", 3,
                                (const char *const *)keys, MW_N, vals,
                                test_ms(20000)));
  ASSERT(vals[0].len == 3 && memcmp(vals[0].data, "new", 3) == 0);
  ASSERT(vals[MW_N - 1].len == strlen("v119997") &&
         memcmp(vals[MW_N - 1].data, "v119997", 7) == 0);
  for (int i = 0; i < MW_N; i++)
    rdzv_free(vals[i].data);
  /* every key exists now: WAIT and CHECK answer at once */
  ASSERT_OK(rdzv_wait(c, (const char *const *)keys, MW_N, test_ms(5000)));
  ASSERT_EQ(1, rdzv_check(c, (const char *const *)keys, MW_N, test_ms(5000)));
  free_keys(keys, MW_N);
  free(vals);
  rdzv_close(c);
}

static void req_begin(proto_enc_t *e, uint64_t id, int op, uint32_t nargs) {
  proto_enc_begin(e, 3 + nargs);
  msgpack_pack_uint8(&e->pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e->pk, id);
  msgpack_pack_int64(&e->pk, op);
}

/* A server of 1 MiB --max-out-bytes (cfg's other settings), job's key "v"
 * set to vlen bytes of val through *c, and a raw native connection of
 * the job (RET its fd). */
static int full_setup(srv_config_t *cfg, const char *job, const char *val,
                      size_t vlen, rdzv_client_t **c) {
  int64_t st = -1;
  int fd;
  cfg->max_out_bytes = 1u << 20;
  test_server_start(cfg);
  *c = connect_job(job, NULL);
  ASSERT_OK(rdzv_set(*c, "v", val, vlen, test_ms(5000)));
  fd = test_native_hello(NULL, atoi(strrchr(test_server_endpoint(), ':') + 1),
                         job, NULL, &st);
  ASSERT_EQ(0, st);
  return fd;
}

/* n GETs of "v", ids 10, 11, ... */
static void pack_gets(proto_enc_t *e, int n) {
  for (int i = 0; i < n; i++) {
    req_begin(e, 10 + (uint64_t)i, PROTO_OP_GET, 1);
    proto_pack_str(&e->pk, "v");
    ASSERT_EQ(0, proto_enc_end(e));
  }
}

/* A client whose replies filled its connection (paused, not read) while a
 * large key list, which the server decodes ahead, had come in part: once
 * it reads its replies, the server reads the rest of the request and
 * answers it. Its loop must not wait for that decoding to finish before
 * it reads again. */
static void test_resume_keylist(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  enum { V = 256u << 10, GETS = 8, KEYS = 40000 };
  char *val = calloc(1, V);
  proto_enc_t e;
  rdzv_client_t *c;
  uint64_t id = 0;
  size_t half;
  int fd;
  cfg.max_value = 512u << 10;
  cfg.threads = 2;
  fd = full_setup(&cfg, "resume", val, V, &c);
  proto_enc_init(&e);
  pack_gets(&e, GETS);
  half = e.len;
  req_begin(&e, 99, PROTO_OP_CHECK, 1);
  msgpack_pack_array(&e.pk, KEYS);
  for (int k = 0; k < KEYS; k++)
    proto_pack_str(&e.pk, "v");
  ASSERT_EQ(0, proto_enc_end(&e));
  half += (e.len - half) / 2;
  /* 2 MiB of replies over the 1 MiB --max-out-bytes: paused, with half
   * of the key list read. */
  ASSERT_EQ(0, test_send_all(fd, e.data, half));
  usleep(200 * 1000);
  for (int i = 0; i < GETS; i++) {
    ASSERT_EQ(0, test_read_reply(fd, test_ms(5000), &id));
    ASSERT_EQ(10 + (uint64_t)i, id);
  }
  ASSERT_EQ(0, test_send_all(fd, e.data + half, e.len - half));
  ASSERT_EQ(0, test_read_reply(fd, test_ms(5000), &id));
  ASSERT_EQ(99, id);
  proto_enc_destroy(&e);
  close(fd);
  rdzv_close(c);
  free(val);
  test_server_stop();
}

/* A GET with a wait whose key came while the connection was full (its
 * reply waiting for room), then went again before the client read: the
 * GET waits once more, but only until its own deadline, and is answered
 * -ETIMEDOUT then (it used to wait forever). */
static void test_wait_deadline_while_full(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  enum { V = 256u << 10, W = 512u << 10, GETS = 64 };
  char *val = calloc(1, W);
  proto_enc_t e;
  rdzv_client_t *c;
  uint64_t id = 0;
  int fd;
  cfg.max_value = W;
  fd = full_setup(&cfg, "full", val, V, &c);
  proto_enc_init(&e);
  ASSERT_EQ(0, proto_enc_key_int(&e, PROTO_REQUEST, 1, PROTO_OP_GET, "w", 1,
                                 1000));
  pack_gets(&e, GETS);
  /* 16 MiB of replies (more than the socket buffers hold) over the 1 MiB
   * --max-out-bytes: paused */
  ASSERT_EQ(0, test_send_all(fd, e.data, e.len));
  usleep(200 * 1000);
  ASSERT_OK(rdzv_set(c, "w", val, W, test_ms(5000))); /* woken: no room */
  ASSERT_EQ(1, rdzv_delete(c, "w", test_ms(5000)));
  for (int i = 0; i < GETS; i++) {
    ASSERT_EQ(0, test_read_reply(fd, test_ms(5000), &id));
    ASSERT_EQ(10 + (uint64_t)i, id);
  }
  ASSERT_EQ(-ETIMEDOUT, test_read_reply(fd, test_ms(5000), &id));
  ASSERT_EQ(1, id);
  proto_enc_destroy(&e);
  close(fd);
  rdzv_close(c);
  free(val);
  test_server_stop();
}

static void test_isolation(void) {
  rdzv_client_t *a = connect_job("job-A", NULL), *b = connect_job("job-B", NULL);
  void *v;
  size_t n;
  int64_t nk;
  ASSERT_OK(rdzv_set(a, "secret", "a", 1, 1000));
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(b, "secret", &v, &n, 0));
  ASSERT_OK(rdzv_num_keys(b, &nk, 1000));
  ASSERT_EQ(0, nk);
  ASSERT_OK(rdzv_set(b, "secret", "b", 1, 1000));
  ASSERT_OK(rdzv_get(a, "secret", &v, &n, 0));
  ASSERT(n == 1 && *(char *)v == 'a');
  rdzv_free(v);
  rdzv_close(a);
  rdzv_close(b);
}

static void test_auth(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  cfg.token = "s3cret-token";
  cfg.token_len = strlen(cfg.token);
  test_server_start(&cfg);
  o.endpoint = test_server_endpoint();
  o.job = "auth";
  o.connect_timeout_ms = test_ms(5000);
  /* no token */
  ASSERT_EQ(RDZV_EAUTH, rdzv_connect(&o, &c));
  /* wrong token */
  o.token = "wrong";
  o.token_len = 5;
  ASSERT_EQ(RDZV_EAUTH, rdzv_connect(&o, &c));
  /* right token: works, and the store is usable */
  c = connect_job("auth", "s3cret-token");
  ASSERT_OK(rdzv_set(c, "k", "v", 1, 1000));
  rdzv_close(c);
  test_server_stop();
}

static void test_connect_errors(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  uint64_t t0 = lu_now_ms();
  /* A port nothing listens on: retried until the connect timeout. */
  o.endpoint = "127.0.0.1:1";
  o.connect_timeout_ms = 300;
  ASSERT_EQ(-ETIMEDOUT, rdzv_connect(&o, &c));
  ASSERT(lu_now_ms() - t0 >= 250);
  /* 0: one attempt, refused at once (test_connect_once: a live server) */
  o.connect_timeout_ms = 0;
  t0 = lu_now_ms();
  ASSERT_EQ(-ECONNREFUSED, rdzv_connect(&o, &c));
  ASSERT(lu_now_ms() - t0 < 200);
  o.connect_timeout_ms = 300;
  {
    /* the caller's error buffer says why */
    char why[256] = "";
    o.endpoint = "not an endpoint";
    o.error = why;
    o.error_len = sizeof(why);
    ASSERT_EQ(RDZV_EADDR, rdzv_connect(&o, &c));
    ASSERT_CONTAINS(why, "'not an endpoint' is not an endpoint");
    o.endpoint = NULL;
    ASSERT_EQ(RDZV_EINVAL, rdzv_connect(&o, &c));
    ASSERT_CONTAINS(why, "no endpoint given");
    o.error = NULL;
    o.error_len = 0;
  }
  o.endpoint = "not an endpoint";
  ASSERT_EQ(RDZV_EADDR, rdzv_connect(&o, &c));
  o.endpoint = "127.0.0.1:99999";
  ASSERT_EQ(RDZV_EADDR, rdzv_connect(&o, &c));
  /* From the environment, as a worker started by launch would. */
  unsetenv("LAUNCH_RDZV_ENDPOINT");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  ASSERT_EQ(RDZV_ENOENV, rdzv_connect_from_env(&c));
  ASSERT_CONTAINS(rdzv_last_error(NULL), "MASTER_ADDR and MASTER_PORT");
  /* a port that is not one is named (it was "invalid argument", or an
   * address error for 70000) */
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "abc", 1);
  ASSERT_EQ(RDZV_EINVAL, rdzv_connect_from_env(&c));
  ASSERT_CONTAINS(rdzv_last_error(NULL), "MASTER_PORT='abc' is not a port");
  setenv("MASTER_PORT", "70000", 1);
  ASSERT_EQ(RDZV_EINVAL, rdzv_connect_from_env(&c));
  ASSERT_CONTAINS(rdzv_last_error(NULL), "MASTER_PORT=70000 is not a port");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
}

/* connect_timeout_ms 0 against a live server: one attempt, which connects
 * (its deadline was "now": 19 of 20 failed). */
static void test_connect_once(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  o.endpoint = test_server_endpoint();
  o.job = "once";
  o.connect_timeout_ms = 0;
  for (int i = 0; i < 20; i++) {
    ASSERT_OK(rdzv_connect(&o, &c));
    rdzv_close(c);
  }
}

/* timeout_ms 0 on a call that does not wait on keys: one round trip,
 * bounded by the io timeout. Against a stopped server it fails after the
 * io timeout, not at once (a deadline of "now" failed calls the server
 * had run, and a retried ADD added twice). */
static void test_zero_timeout(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char ep[64];
  int64_t v = 0;
  uint64_t t0;
  pid_t pid;
  int port = test_launch_server(&pid, NULL, NULL);
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  o.endpoint = ep;
  o.job = "zero";
  o.io_timeout_ms = 500;
  ASSERT_OK(rdzv_connect(&o, &c));
  ASSERT_OK(rdzv_add(c, "n", 1, &v, 0));
  ASSERT_EQ(1, v);
  kill(pid, SIGSTOP);
  t0 = lu_now_ms();
  ASSERT_EQ(-ETIMEDOUT, rdzv_ping(c, 0));
  ASSERT(lu_now_ms() - t0 >= 400);
  kill(pid, SIGCONT);
  rdzv_close(c);
  test_stop_server(pid);
}

static void test_from_env(void) {
  rdzv_client_t *c = NULL, *d;
  void *v;
  size_t n;
  char port[16];
  snprintf(port, sizeof(port), "%s", strchr(test_server_endpoint(), ':') + 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port, 1);
  setenv("TORCHELASTIC_RUN_ID", "envjob", 1);
  /* a variable the connection does not read fails nothing */
  setenv("RANK", "x", 1);
  ASSERT_OK(rdzv_connect_from_env(&c));
  unsetenv("RANK");
  ASSERT_OK(rdzv_set(c, "from-env", "1", 1, 1000));
  d = connect_job("envjob", NULL);
  ASSERT_OK(rdzv_get(d, "from-env", &v, &n, 0));
  rdzv_free(v);
  rdzv_close(c);
  rdzv_close(d);
}

/* rdzv_progress: "<step> <unix ms>" under launch/progress/<rank>, the rank
 * given or $RANK; a missing RANK and a negative step refused. */
static void test_progress(void) {
  rdzv_client_t *c = connect_job("progress", NULL);
  void *v = NULL;
  size_t n = 0;
  long long step = -1, ms = -1;
  char tail = 0;
  struct timespec ts;
  ASSERT_OK(rdzv_progress(c, 3, 17, 1000));
  ASSERT_OK(rdzv_get(c, "launch/progress/3", &v, &n, 0));
  ASSERT_EQ(2, sscanf(v, "%lld %lld%c", &step, &ms, &tail));
  clock_gettime(CLOCK_REALTIME, &ts);
  ASSERT_EQ(17, step);
  ASSERT(ms > (long long)ts.tv_sec * 1000 - 60000 &&
         ms <= (long long)ts.tv_sec * 1000 + 1000);
  rdzv_free(v);
  setenv("RANK", "5", 1);
  ASSERT_OK(rdzv_progress(c, -1, 0, 1000));
  ASSERT_OK(rdzv_get(c, "launch/progress/5", &v, &n, 0));
  ASSERT(n > 2 && memcmp(v, "0 ", 2) == 0);
  rdzv_free(v);
  setenv("RANK", "five", 1);
  ASSERT_EQ(RDZV_ENOENV, rdzv_progress(c, -1, 1, 1000));
  unsetenv("RANK");
  ASSERT_EQ(RDZV_ENOENV, rdzv_progress(c, -1, 1, 1000));
  ASSERT_EQ(RDZV_EINVAL, rdzv_progress(c, 0, -1, 1000));
  rdzv_close(c);
}

int main(void) {
  int fds = test_fd_count();
  test_connect_errors();
  test_server_start(NULL);
  test_basic_ops();
  test_waits();
  test_barrier64();
  test_pipelined();
  test_isolation();
  test_many_keys_list();
  test_many_keys_woken();
  test_connect_once();
  test_from_env();
  test_progress();
  test_server_stop();
  test_zero_timeout();
  test_auth();
  test_large_values();
  test_wait_long_keys();
  test_resume_keylist();
  test_wait_deadline_while_full();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_native_ops: ok\n");
  return 0;
}
