/* test_tcpstore_wire.c - PyTorch's TCPStore protocol on the wire, both
 * numberings, against a real server: golden request bytes and the exact
 * reply bytes, waits woken by another client, cancel, queues, list, barrier,
 * 1.13 watches; the same keys seen through librdzv; TCPStore refused when a
 * token is set unless the peer is allowed. */
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv.h"
#include "server.h"
#include "tcpstore.h"
#include "test.h"

typedef struct { uint8_t b[1024]; size_t n; } buf_t;
static void put(buf_t *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n); b->n += n; }
static void u8(buf_t *b, uint8_t v) { put(b, &v, 1); }
static void u32le(buf_t *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(b, x, 4);
}
static void u64le(buf_t *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
  put(b, x, 8);
}
static void str(buf_t *b, const char *s) { u64le(b, strlen(s)); put(b, s, strlen(s)); }

static void send_buf(int fd, buf_t *b) {
  ASSERT_EQ((ssize_t)b->n, send(fd, b->b, b->n, MSG_NOSIGNAL));
  b->n = 0;
}

static uint64_t rd_u64(int fd) {
  uint8_t x[8];
  uint64_t v = 0;
  ASSERT_EQ(0, test_read_exact(fd, x, 8, test_ms(5000)));
  for (int i = 7; i >= 0; i--) v = (v << 8) | x[i];
  return v;
}
static uint8_t rd_u8(int fd) {
  uint8_t v;
  ASSERT_EQ(0, test_read_exact(fd, &v, 1, test_ms(5000)));
  return v;
}
/* Read a u64-length string and compare it. */
static void expect_bytes(int fd, const char *want) {
  char got[256];
  uint64_t n = rd_u64(fd);
  ASSERT_EQ(strlen(want), n);
  ASSERT_EQ(0, test_read_exact(fd, got, (size_t)n, test_ms(5000)));
  ASSERT_MEM_EQ(got, want, n);
}
static int nothing_pending(int fd, int ms) {
  char c;
  struct timeval tv = {0, ms * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return recv(fd, &c, 1, 0) < 0;
}

static void test_v2(int port) {
  buf_t b = {{0}, 0};
  int fd = test_connect(port), fd2;
  uint8_t x[4];
  /* VALIDATE has no reply; PING echoes the nonce (4 bytes). */
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_PING); u32le(&b, 0x01020304);
  send_buf(fd, &b);
  ASSERT_EQ(0, test_read_exact(fd, x, 4, test_ms(5000)));
  ASSERT_MEM_EQ(x, "\x04\x03\x02\x01", 4);
  /* SET (no reply) then GET */
  u8(&b, TS_SET); str(&b, "/k"); str(&b, "v1");
  u8(&b, TS_GET); str(&b, "/k");
  send_buf(fd, &b);
  expect_bytes(fd, "v1");
  /* GET of a missing key answers empty, as libuv's TCPStore does */
  u8(&b, TS_GET); str(&b, "/missing");
  send_buf(fd, &b);
  expect_bytes(fd, "");
  /* ADD: ASCII decimal, int64 reply */
  u8(&b, TS_ADD); str(&b, "/c"); u64le(&b, 5);
  u8(&b, TS_ADD); str(&b, "/c"); u64le(&b, (uint64_t)-7);
  u8(&b, TS_GET); str(&b, "/c");
  send_buf(fd, &b);
  ASSERT_EQ(5, (int64_t)rd_u64(fd));
  ASSERT_EQ(-2, (int64_t)rd_u64(fd));
  expect_bytes(fd, "-2");
  /* COMPARE_SET and its quirks */
  u8(&b, TS_COMPARE_SET); str(&b, "/k"); str(&b, "v1"); str(&b, "v2");
  u8(&b, TS_COMPARE_SET); str(&b, "/k"); str(&b, "zz"); str(&b, "v3");
  u8(&b, TS_COMPARE_SET); str(&b, "/nokey"); str(&b, "exp"); str(&b, "d");
  u8(&b, TS_COMPARE_SET); str(&b, "/nokey"); str(&b, ""); str(&b, "d");
  send_buf(fd, &b);
  expect_bytes(fd, "v2");
  expect_bytes(fd, "v2");
  expect_bytes(fd, "exp"); /* absent + non-empty expected: echo, no store */
  expect_bytes(fd, "d");
  /* CHECK: READY=0, NOT_READY=1 */
  u8(&b, TS_CHECK); u64le(&b, 2); str(&b, "/k"); str(&b, "/c");
  u8(&b, TS_CHECK); u64le(&b, 2); str(&b, "/k"); str(&b, "/zz");
  send_buf(fd, &b);
  ASSERT_EQ(0, rd_u8(fd));
  ASSERT_EQ(1, rd_u8(fd));
  /* GETNUMKEYS, DELETE_KEY (int64 0/1), APPEND */
  u8(&b, TS_GETNUMKEYS);
  u8(&b, TS_DELETE_KEY); str(&b, "/nokey");
  u8(&b, TS_DELETE_KEY); str(&b, "/nokey");
  u8(&b, TS_APPEND); str(&b, "/k"); str(&b, "+");
  u8(&b, TS_GET); str(&b, "/k");
  send_buf(fd, &b);
  ASSERT_EQ(3, rd_u64(fd));
  ASSERT_EQ(1, rd_u64(fd));
  ASSERT_EQ(0, rd_u64(fd));
  expect_bytes(fd, "v2+");
  /* MULTI_SET / MULTI_GET */
  u8(&b, TS_MULTI_SET); u64le(&b, 2); str(&b, "/m1"); str(&b, "a"); str(&b, "/m2"); str(&b, "bb");
  u8(&b, TS_MULTI_GET); u64le(&b, 2); str(&b, "/m2"); str(&b, "/m1");
  send_buf(fd, &b);
  expect_bytes(fd, "bb");
  expect_bytes(fd, "a");
  /* WAIT: answered now when the keys exist, else when another client sets */
  u8(&b, TS_WAIT); u64le(&b, 1); str(&b, "/k");
  send_buf(fd, &b);
  ASSERT_EQ(0, rd_u8(fd));
  u8(&b, TS_WAIT); u64le(&b, 2); str(&b, "/w1"); str(&b, "/w2");
  send_buf(fd, &b);
  ASSERT(nothing_pending(fd, 100));
  fd2 = test_connect(port);
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_SET); str(&b, "/w1"); str(&b, "x");
  send_buf(fd2, &b);
  ASSERT(nothing_pending(fd, 100));
  u8(&b, TS_ADD); str(&b, "/w2"); u64le(&b, 1);
  send_buf(fd2, &b);
  ASSERT_EQ(1, rd_u64(fd2));
  ASSERT_EQ(0, rd_u8(fd)); /* STOP_WAITING */
  /* CANCEL_WAIT: WAIT_CANCELED (1) */
  u8(&b, TS_WAIT); u64le(&b, 1); str(&b, "/never");
  u8(&b, TS_CANCEL_WAIT);
  send_buf(fd, &b);
  ASSERT_EQ(1, rd_u8(fd));
  u8(&b, TS_SET); str(&b, "/never"); str(&b, "now");
  send_buf(fd2, &b);
  ASSERT(nothing_pending(fd, 100)); /* the cancelled wait stays quiet */
  /* queues: POP answers the length before popping, then the value */
  u8(&b, TS_QUEUE_PUSH); str(&b, "/q"); str(&b, "one");
  u8(&b, TS_QUEUE_PUSH); str(&b, "/q"); str(&b, "two");
  u8(&b, TS_QUEUE_LEN); str(&b, "/q");
  u8(&b, TS_QUEUE_POP); str(&b, "/q");
  u8(&b, TS_QUEUE_POP); str(&b, "/q");
  u8(&b, TS_QUEUE_POP); str(&b, "/q");
  send_buf(fd, &b);
  ASSERT_EQ(2, rd_u64(fd));
  ASSERT_EQ(2, rd_u64(fd));
  expect_bytes(fd, "one");
  ASSERT_EQ(1, rd_u64(fd));
  expect_bytes(fd, "two");
  ASSERT_EQ(0, rd_u64(fd));
  /* BARRIER: counter at the key, STOP_WAITING once it reaches world size */
  u8(&b, TS_BARRIER); str(&b, "/bar"); u64le(&b, 2);
  send_buf(fd, &b);
  ASSERT(nothing_pending(fd, 100));
  u8(&b, TS_BARRIER); str(&b, "/bar"); u64le(&b, 2);
  send_buf(fd2, &b);
  ASSERT_EQ(0, rd_u8(fd2));
  ASSERT_EQ(0, rd_u8(fd));
  /* LIST_KEYS: count then keys (order not specified) */
  u8(&b, TS_DELETE_KEY); str(&b, "/bar");
  u8(&b, TS_GETNUMKEYS);
  send_buf(fd, &b);
  ASSERT_EQ(1, rd_u64(fd));
  {
    uint64_t n = rd_u64(fd);
    u8(&b, TS_LIST_KEYS);
    send_buf(fd, &b);
    ASSERT_EQ(n, rd_u64(fd));
    for (uint64_t i = 0; i < n; i++) {
      char k[64];
      uint64_t l = rd_u64(fd);
      ASSERT(l < sizeof(k));
      ASSERT_EQ(0, test_read_exact(fd, k, (size_t)l, 5000));
      ASSERT(k[0] == '/');
    }
  }
  close(fd);
  close(fd2);
}

static void test_v1(int port) {
  buf_t b = {{0}, 0};
  int fd = test_connect(port), watcher = test_connect(port), other;
  /* 1.13 numbering: SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5,
   * GETNUMKEYS=6, WATCH_KEY=7, DELETE_KEY=8; no VALIDATE. */
  u8(&b, 0); str(&b, "/v1key"); str(&b, "5");
  u8(&b, 3); str(&b, "/v1key"); u64le(&b, 2);
  u8(&b, 5); u64le(&b, 1); str(&b, "/v1key");
  u8(&b, 2); str(&b, "/v1key");
  u8(&b, 4); u64le(&b, 1); str(&b, "/v1key");
  u8(&b, 1); str(&b, "/v1new"); str(&b, ""); str(&b, "n");
  send_buf(fd, &b);
  ASSERT_EQ(7, rd_u64(fd));
  ASSERT_EQ(0, rd_u8(fd));
  expect_bytes(fd, "7");
  ASSERT_EQ(0, rd_u8(fd));
  expect_bytes(fd, "n");
  /* WATCH_KEY on the callback connection: registered (3), then events of
   * type [u8][key][old][new]: CREATED=1, UPDATED=0, DELETED=2 */
  u8(&b, 7); str(&b, "/watched");
  send_buf(watcher, &b);
  ASSERT_EQ(3, rd_u8(watcher));
  u8(&b, 0); str(&b, "/watched"); str(&b, "a");
  u8(&b, 0); str(&b, "/watched"); str(&b, "b");
  u8(&b, 8); str(&b, "/watched");
  send_buf(fd, &b);
  ASSERT_EQ(1, rd_u8(watcher)); expect_bytes(watcher, "/watched"); expect_bytes(watcher, ""); expect_bytes(watcher, "a");
  ASSERT_EQ(0, rd_u8(watcher)); expect_bytes(watcher, "/watched"); expect_bytes(watcher, "a"); expect_bytes(watcher, "b");
  ASSERT_EQ(1, rd_u64(fd));
  ASSERT_EQ(2, rd_u8(watcher)); expect_bytes(watcher, "/watched"); expect_bytes(watcher, "b"); expect_bytes(watcher, "");
  /* an op 1.13 never had: that connection closes, others keep going */
  other = test_connect(port);
  u8(&b, 9); str(&b, "/x");
  send_buf(other, &b);
  ASSERT(test_peer_closed(other, test_ms(3000)));
  close(other);
  u8(&b, 6);
  send_buf(fd, &b);
  ASSERT(rd_u64(fd) >= 2);
  close(fd);
  close(watcher);
}

/* Large 1.13 watch events (written to each watcher in its own turn, a
 * slice of 256 KiB a turn, so an event of 1.1 MiB is cut over five turns)
 * reach every watcher byte for byte and in order, small events between
 * them included. */
static void send_all(int fd, const void *p, size_t n) {
  const uint8_t *q = p;
  while (n > 0) {
    ssize_t k = send(fd, q, n, MSG_NOSIGNAL);
    ASSERT(k > 0);
    q += k;
    n -= (size_t)k;
  }
}

static void set_v1(int fd, const char *key, const uint8_t *v, size_t n) {
  buf_t b = {{0}, 0};
  uint8_t len[8];
  u8(&b, 0);
  str(&b, key);
  send_buf(fd, &b);
  for (int i = 0; i < 8; i++)
    len[i] = (uint8_t)((uint64_t)n >> (8 * i));
  send_all(fd, len, 8);
  send_all(fd, v, n);
}

static void expect_big(int fd, const uint8_t *want, size_t n) {
  uint8_t *got = malloc(n ? n : 1);
  ASSERT(got != NULL);
  ASSERT_EQ(n, rd_u64(fd));
  ASSERT_EQ(0, test_read_exact(fd, got, n, test_ms(5000)));
  ASSERT(memcmp(got, want, n) == 0);
  free(got);
}

static void test_v1_large_events(int port) {
  enum { NA = 300 << 10, NB = 1100 << 10, NW = 3 };
  buf_t b = {{0}, 0};
  int fd = test_connect(port), w[NW];
  uint8_t *va = malloc(NA), *vb = malloc(NB);
  ASSERT(va != NULL && vb != NULL);
  for (size_t i = 0; i < NA; i++)
    va[i] = (uint8_t)(i * 7 + 1);
  for (size_t i = 0; i < NB; i++)
    vb[i] = (uint8_t)(i * 13 + 5);
  for (int i = 0; i < NW; i++) {
    w[i] = test_connect(port);
    u8(&b, 7); str(&b, "/big");
    send_buf(w[i], &b);
    ASSERT_EQ(3, rd_u8(w[i]));
  }
  set_v1(fd, "/big", va, NA);
  set_v1(fd, "/big", (const uint8_t *)"s", 1);
  set_v1(fd, "/big", vb, NB);
  u8(&b, 8); str(&b, "/big");
  send_buf(fd, &b);
  ASSERT_EQ(1, rd_u64(fd));
  for (int i = 0; i < NW; i++) {
    ASSERT_EQ(1, rd_u8(w[i])); expect_bytes(w[i], "/big"); expect_bytes(w[i], ""); expect_big(w[i], va, NA);
    ASSERT_EQ(0, rd_u8(w[i])); expect_bytes(w[i], "/big"); expect_big(w[i], va, NA); expect_bytes(w[i], "s");
    ASSERT_EQ(0, rd_u8(w[i])); expect_bytes(w[i], "/big"); expect_bytes(w[i], "s"); expect_big(w[i], vb, NB);
    ASSERT_EQ(2, rd_u8(w[i])); expect_bytes(w[i], "/big"); expect_big(w[i], vb, NB); expect_bytes(w[i], "");
    ASSERT(nothing_pending(w[i], 100));
    close(w[i]);
  }
  close(fd);
  free(va);
  free(vb);
}

/* Keys written through one dialect are seen through the others. */
static void test_cross_dialect(int port) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c;
  buf_t b = {{0}, 0};
  int v1 = test_connect(port), v2 = test_connect(port);
  void *v;
  size_t n;
  o.endpoint = test_server_endpoint();
  o.job = "default";
  ASSERT_OK(rdzv_connect(&o, &c));
  ASSERT_OK(rdzv_set(c, "/from-native", "N", 1, 1000));
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_GET); str(&b, "/from-native");
  u8(&b, TS_SET); str(&b, "/from-v2"); str(&b, "two");
  send_buf(v2, &b);
  expect_bytes(v2, "N");
  u8(&b, 2); str(&b, "/from-v2");
  u8(&b, 0); str(&b, "/from-v1"); str(&b, "one");
  u8(&b, 2); str(&b, "/from-v1");
  send_buf(v1, &b);
  expect_bytes(v1, "two");
  expect_bytes(v1, "one");
  ASSERT_OK(rdzv_get(c, "/from-v1", &v, &n, 1000));
  ASSERT(n == 3 && memcmp(v, "one", 3) == 0);
  rdzv_free(v);
  /* a native waiter is woken by a TCPStore write */
  {
    rdzv_options_t o2 = o;
    rdzv_client_t *w;
    o2.job = "default";
    ASSERT_OK(rdzv_connect(&o2, &w));
    u8(&b, TS_SET); str(&b, "/late"); str(&b, "L");
    /* send after the native get is registered: the server answers it */
    ASSERT_EQ(RDZV_ENOKEY, rdzv_get(w, "/late", &v, &n, 0));
    send_buf(v2, &b);
    ASSERT_OK(rdzv_get(w, "/late", &v, &n, 2000));
    rdzv_free(v);
    rdzv_close(w);
  }
  rdzv_close(c);
  close(v1);
  close(v2);
}

static void test_token_policy(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  buf_t b = {{0}, 0};
  int fd, port;
  cfg.token = "tok";
  cfg.token_len = 3;
  /* token and no allow list: every TCPStore client is refused */
  port = test_server_start(&cfg);
  fd = test_connect(port);
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_GETNUMKEYS);
  send_buf(fd, &b);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  test_server_stop();
  /* allowed from loopback */
  cfg.tcpstore_allow = "10.0.0.0/8,127.0.0.0/8";
  port = test_server_start(&cfg);
  fd = test_connect(port);
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_GETNUMKEYS);
  send_buf(fd, &b);
  ASSERT_EQ(0, rd_u64(fd));
  close(fd);
  test_server_stop();
  /* an allow list that excludes loopback */
  cfg.tcpstore_allow = "10.0.0.0/8";
  port = test_server_start(&cfg);
  fd = test_connect(port);
  u8(&b, 0); str(&b, "/k"); str(&b, "v"); /* 1.13 SET */
  send_buf(fd, &b);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  test_server_stop();
}

/* APPEND is bounded by --max-value as SET is: a value it would grow past
 * the limit (which could never be read back whole) closes the connection,
 * and the value stays as it was. */
static void test_append_bound(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  buf_t b = {{0}, 0};
  int fd, port;
  cfg.max_value = 16;
  port = test_server_start(&cfg);
  fd = test_connect(port);
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_APPEND); str(&b, "a"); str(&b, "0123456789");
  u8(&b, TS_APPEND); str(&b, "a"); str(&b, "abcdef");      /* 16: fits */
  u8(&b, TS_GETNUMKEYS);
  send_buf(fd, &b);
  ASSERT_EQ(1, rd_u64(fd));
  u8(&b, TS_APPEND); str(&b, "a"); str(&b, "x");           /* 17: refused */
  send_buf(fd, &b);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  fd = test_connect(port);
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  u8(&b, TS_GET); str(&b, "a");
  send_buf(fd, &b);
  ASSERT_EQ(16, rd_u64(fd));
  close(fd);
  test_server_stop();
}

/* ADD and BARRIER read the old value as PyTorch's servers do (std::stoll):
 * white space and a sign before the digits, anything after them ignored;
 * the sum is stored bare. A value with no digit at the head, or past
 * int64, closes the connection as theirs does. Both numberings. */
static void test_add_stoll(int port) {
  static const struct { const char *val; int64_t want; } ok[] = {
      {" 12", 13}, {"12x", 13}, {"+3\n", 4}, {"\t -5 ", -4}, {"007", 8},
      {"9223372036854775806 ", INT64_MAX}};
  static const char *const bad[] = {"", "x1", "- 1", "+", "9223372036854775808"};
  buf_t b = {{0}, 0};
  int fd = test_connect(port), v1 = test_connect(port), o;
  char key[32];
  u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    snprintf(key, sizeof(key), "/st%zu", i);
    u8(&b, TS_SET); str(&b, key); str(&b, ok[i].val);
    u8(&b, TS_ADD); str(&b, key); u64le(&b, 1);
    u8(&b, TS_GET); str(&b, key);
    send_buf(fd, &b);
    ASSERT_EQ(ok[i].want, (int64_t)rd_u64(fd));
    snprintf(key, sizeof(key), "%" PRId64, ok[i].want);
    expect_bytes(fd, key);
  }
  /* BARRIER counts on " 1" as 1: the second arrival of 2 */
  u8(&b, TS_SET); str(&b, "/stb"); str(&b, " 1");
  u8(&b, TS_BARRIER); str(&b, "/stb"); u64le(&b, 2);
  u8(&b, TS_GET); str(&b, "/stb");
  send_buf(fd, &b);
  ASSERT_EQ(0, rd_u8(fd));
  expect_bytes(fd, "2");
  /* 1.13: SET=0, ADD=3 */
  u8(&b, 0); str(&b, "/stv1"); str(&b, "41\n");
  u8(&b, 3); str(&b, "/stv1"); u64le(&b, 1);
  send_buf(v1, &b);
  ASSERT_EQ(42, (int64_t)rd_u64(v1));
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    o = test_connect(port);
    u8(&b, TS_VALIDATE); u32le(&b, TS_VALIDATION_MAGIC);
    u8(&b, TS_SET); str(&b, "/stbad"); str(&b, bad[i]);
    u8(&b, TS_ADD); str(&b, "/stbad"); u64le(&b, 1);
    send_buf(o, &b);
    ASSERT(test_peer_closed(o, test_ms(3000)));
    close(o);
  }
  close(fd);
  close(v1);
}

int main(void) {
  int fds = test_fd_count(), port;
  port = test_server_start(NULL);
  test_v2(port);
  test_v1(port);
  test_v1_large_events(port);
  test_cross_dialect(port);
  test_add_stoll(port);
  test_server_stop();
  test_token_policy();
  test_append_bound();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_tcpstore_wire: ok\n");
  return 0;
}
