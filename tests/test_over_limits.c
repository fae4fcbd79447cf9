/* test_over_limits.c - native requests over the server's limits, through
 * librdzv and on the wire: a request larger than --max-frame, a value over
 * --max-value, a key over the key limit, in every op that carries them
 * (set, set_quiet, append, compare_set, multi_set, multi_get, wait, check).
 * Each is answered with an error that names the size and the limit,
 * nothing stored is lost, and the connection goes on serving, with what it
 * had pending (a wait) still pending. */
#include <sys/socket.h>
#include <unistd.h>

#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "server.h"
#include "test.h"

#define MAX_FRAME (1u << 20)
#define MAX_VALUE (256u << 10)

static int port;

static rdzv_client_t *client(void) {
  rdzv_client_t *c = NULL;
  char err[256];
  if (test_rdzv_open(port, "over", NULL, err, sizeof(err), &c) != 0)
    TEST_FAIL("connect: %s", err);
  return c;
}

static void expect_value(rdzv_client_t *c, const char *key, const char *want) {
  void *v = NULL;
  size_t n = 0;
  ASSERT_OK(rdzv_get(c, key, &v, &n, 0));
  ASSERT_EQ(strlen(want), n);
  ASSERT_MEM_EQ(v, want, n);
  rdzv_free(v);
}

static void expect_absent(rdzv_client_t *c, const char *key) {
  void *v = NULL;
  size_t n = 0;
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(c, key, &v, &n, 0));
}

/* ---- raw native connection ------------------------------------------------- */

/* One reply frame: OUT *id, *msg (the error's text, or ""). RET status. */
static int64_t read_reply(int fd, uint64_t *id, char *msg, size_t cap) {
  uint8_t hdr[4], body[4096];
  uint32_t len;
  proto_msg_t m;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  int64_t st;
  const char *s;
  size_t sn;
  ASSERT_EQ(0, test_read_exact(fd, hdr, 4, test_ms(10000)));
  len = proto_get_len(hdr);
  ASSERT(len < sizeof(body));
  ASSERT_EQ(0, test_read_exact(fd, body, len, test_ms(10000)));
  ASSERT_EQ(0, proto_decode(body, len, &lim, &m));
  ASSERT_EQ(PROTO_REPLY, m.kind);
  st = m.op;
  *id = m.id;
  msg[0] = '\0';
  if (st != 0 && proto_arg_bytes(&m, 0, &s, &sn) == 0)
    snprintf(msg, cap, "%.*s", (int)sn, s);
  proto_msg_free(&m);
  return st;
}

static int native_ready(void) {
  int64_t st;
  int fd = test_native_hello(NULL, port, "over", NULL, &st);
  ASSERT_EQ(0, st);
  return fd;
}

/* [0, id, op] and its arguments, sent. */
static void send_keys_req(int fd, uint64_t id, int op, const char *key,
                          int64_t wait_ms) {
  proto_enc_t e;
  proto_enc_init(&e);
  proto_enc_begin(&e, key ? 5 : 3);
  msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e.pk, id);
  msgpack_pack_int64(&e.pk, op);
  if (key) {
    msgpack_pack_array(&e.pk, 1);
    proto_pack_str(&e.pk, key);
    msgpack_pack_int64(&e.pk, wait_ms);
  }
  ASSERT_EQ(0, proto_enc_end(&e));
  ASSERT_OK(test_send_all(fd, e.data, e.len));
  proto_enc_destroy(&e);
}

/* ---- a request over --max-frame --------------------------------------------- */

/* Through librdzv: the set is refused with the sizes and the flag, and
 * the same client goes on (what it stored is still there). */
static void test_frame_librdzv(void) {
  rdzv_client_t *c = client();
  size_t n = (size_t)MAX_FRAME + (512u << 10);
  char *v = malloc(n);
  int rc;
  ASSERT(v != NULL);
  memset(v, 'v', n);
  ASSERT_OK(rdzv_set(c, "keep", "kept", 4, test_ms(5000)));
  rc = rdzv_set(c, "big", v, n, test_ms(10000));
  if (rc != RDZV_ETOOBIG)
    TEST_FAIL("set of %zu bytes: %d (%s)", n, rc, rdzv_last_error(c));
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-frame");
  ASSERT_CONTAINS(rdzv_last_error(c), "1048576");
  expect_value(c, "keep", "kept");
  expect_absent(c, "big");
  /* Twice more, back to back: the connection stays in step. */
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "big", v, n, test_ms(10000)));
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_append(c, "keep", v, n, test_ms(10000)));
  expect_value(c, "keep", "kept");
  /* A set sent without waiting: its failure comes with the next call. */
  ASSERT_OK(rdzv_set_nowait(c, "q1", "1", 1));
  rc = rdzv_set_nowait(c, "big", v, n); /* past 64 KiB: flushes */
  ASSERT_EQ(RDZV_EDEFERRED, rc);
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-frame");
  expect_value(c, "q1", "1");
  expect_absent(c, "big");
  ASSERT_OK(rdzv_ping(c, test_ms(5000)));
  rdzv_close(c);
  free(v);
}

/* On the wire: a wait pending on the connection survives the refused
 * request; the body (many times the input budget) streams through
 * without the server buffering it; the next requests are answered. */
static void test_frame_wire(void) {
  int fd = native_ready();
  rdzv_client_t *o = client();
  size_t vlen = (size_t)4 << 20, off;
  uint8_t head[4 + 16], *chunk = calloc(1, 64u << 10);
  size_t hn = 0;
  uint64_t id;
  char msg[512];
  ASSERT(chunk != NULL);
  send_keys_req(fd, 2, PROTO_OP_WAIT, "w", -1);
  /* [0, 3, SET, "b", bin32 of vlen] */
  hn = 4;
  head[hn++] = 0x95;
  head[hn++] = 0x00;
  head[hn++] = 0x03;
  head[hn++] = PROTO_OP_SET;
  head[hn++] = 0xa1;
  head[hn++] = 'b';
  head[hn++] = 0xc6;
  head[hn++] = (uint8_t)(vlen >> 24);
  head[hn++] = (uint8_t)(vlen >> 16);
  head[hn++] = (uint8_t)(vlen >> 8);
  head[hn++] = (uint8_t)vlen;
  proto_put_len(head, (uint32_t)(hn - 4 + vlen));
  ASSERT_OK(test_send_all(fd, head, hn));
  for (off = 0; off < vlen; off += 64u << 10) {
    ASSERT_OK(test_send_all(fd, chunk, LU_MIN((size_t)64 << 10, vlen - off)));
    if (off == vlen / 2) {
      /* Halfway, what the server holds of it: no more than it read. */
      srv_stats_t st;
      usleep(100000);
      test_server_stats(&st);
      if (st.in_bytes > (128u << 10))
        TEST_FAIL("%llu bytes of the refused request buffered",
                  (unsigned long long)st.in_bytes);
    }
  }
  ASSERT_EQ(RDZV_ETOOBIG, read_reply(fd, &id, msg, sizeof(msg)));
  ASSERT_EQ(3, id);
  ASSERT_CONTAINS(msg, "set");
  ASSERT_CONTAINS(msg, "--max-frame");
  /* the wait is still there: another client's set wakes it */
  ASSERT_OK(rdzv_set(o, "w", "x", 1, test_ms(5000)));
  ASSERT_EQ(0, read_reply(fd, &id, msg, sizeof(msg)));
  ASSERT_EQ(2, id);
  send_keys_req(fd, 4, PROTO_OP_PING, NULL, 0);
  ASSERT_EQ(0, read_reply(fd, &id, msg, sizeof(msg)));
  ASSERT_EQ(4, id);
  expect_absent(o, "b");
  /* A frame over the limit that is not a request: closed. */
  proto_put_len(head, MAX_FRAME + 1);
  head[4] = 0xc1;
  ASSERT_OK(test_send_all(fd, head, 4 + 8));
  ASSERT(test_peer_closed(fd, test_ms(5000)));
  close(fd);
  rdzv_close(o);
  free(chunk);
}

/* ---- values over --max-value -------------------------------------------------- */

/* Each op that stores a value refuses one over the limit with the sizes,
 * stores nothing, and the connection goes on. APPEND counts the value it
 * would make: appends must not grow a value past what a SET may store. */
static void test_value(void) {
  rdzv_client_t *c = client();
  size_t n = MAX_VALUE + 1, half = MAX_VALUE / 2 + 1;
  char *v = malloc(n);
  const char *keys[] = {"m1", "m2"};
  const void *vals[2];
  size_t lens[2] = {1, n};
  int sw = -1;
  void *cur = NULL;
  size_t cn = 0;
  ASSERT(v != NULL);
  memset(v, 'a', n);
  ASSERT_OK(rdzv_set(c, "keep", "kept", 4, test_ms(5000)));
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "keep", v, n, test_ms(5000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "262145");
  expect_value(c, "keep", "kept");
  /* compare_set: desired over the limit, and expected */
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_compare_set(c, "keep", "kept", 4, v, n, &cur,
                                           &cn, &sw, test_ms(5000)));
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_compare_set(c, "keep", v, n, "x", 1, &cur,
                                           &cn, &sw, test_ms(5000)));
  expect_value(c, "keep", "kept");
  /* multi_set: one pair over, nothing stored */
  vals[0] = "1";
  vals[1] = v;
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_multi_set(c, keys, vals, lens, 2,
                                         test_ms(5000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "pair 2");
  ASSERT_CONTAINS(rdzv_last_error(c), "262145");
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-value");
  expect_absent(c, "m1");
  expect_absent(c, "m2");
  /* append: a suffix over the limit, and one that would make the value
   * pass it */
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_append(c, "keep", v, n, test_ms(5000)));
  ASSERT_OK(rdzv_append(c, "log", v, half, test_ms(5000)));
  if (rdzv_append(c, "log", v, half, test_ms(5000)) != RDZV_ETOOBIG)
    TEST_FAIL("two appends of %zu bytes made a value over the %u-byte "
              "--max-value", half, MAX_VALUE);
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-value");
  ASSERT_OK(rdzv_get(c, "log", &cur, &cn, 0));
  ASSERT_EQ(half, cn);
  rdzv_free(cur);
  ASSERT_OK(rdzv_append(c, "log", v, MAX_VALUE - half, test_ms(5000)));
  expect_value(c, "keep", "kept");
  ASSERT_OK(rdzv_ping(c, test_ms(5000)));
  rdzv_close(c);
  free(v);
}

/* ---- keys: too many, too long --------------------------------------------------- */

/* Requests with more keys than the server takes: answered with the count
 * and the limit, also past the msgpack objects a frame may hold (two a
 * key and 64); the connection goes on. */
static void test_keys(void) {
  rdzv_client_t *c = client();
  enum { N = 2 * 131072 + 64 }; /* objects of the largest frame, in keys */
  const char **keys = malloc(N * sizeof(*keys));
  const void **vals = malloc(N * sizeof(*vals));
  size_t *lens = malloc(N * sizeof(*lens));
  rdzv_value_t *out = malloc(N * sizeof(*out));
  const size_t counts[] = {131073, N}, pairs[] = {131073, N / 2};
  int rc;
  ASSERT(keys && vals && lens && out);
  for (size_t i = 0; i < N; i++) {
    keys[i] = "k";
    vals[i] = "";
    lens[i] = 0;
  }
  ASSERT_OK(rdzv_set(c, "keep", "kept", 4, test_ms(5000)));
  for (size_t j = 0; j < 2; j++) {
    size_t n = counts[j];
    rc = rdzv_multi_get(c, keys, n, out, 0);
    if (rc != RDZV_ETOOBIG)
      TEST_FAIL("multi_get of %zu keys: %d (%s)", n, rc, rdzv_last_error(c));
    ASSERT_CONTAINS(rdzv_last_error(c), "131072");
    ASSERT_EQ(RDZV_ETOOBIG, rdzv_wait(c, keys, n, 0));
    ASSERT_EQ(RDZV_ETOOBIG, rdzv_check(c, keys, n, 0));
    rc = rdzv_multi_set(c, keys, vals, lens, pairs[j], test_ms(5000));
    if (rc != RDZV_ETOOBIG)
      TEST_FAIL("multi_set of %zu pairs: %d (%s)", pairs[j], rc,
                rdzv_last_error(c));
    ASSERT_CONTAINS(rdzv_last_error(c), "131072");
    expect_absent(c, "k");
    expect_value(c, "keep", "kept");
  }
  rdzv_close(c);
  /* Nested deeper than a request may be: answered too. */
  {
    static const uint8_t deep[] = {0, 0, 0, 10, 0x94, 0x00, 0x09,
                                   PROTO_OP_SET, 0x91, 0x91, 0x91,
                                   0x91, 0xa1, 'x'};
    int fd = native_ready();
    uint64_t id;
    char msg[512];
    ASSERT_OK(test_send_all(fd, deep, sizeof(deep)));
    send_keys_req(fd, 10, PROTO_OP_PING, NULL, 0);
    ASSERT_EQ(RDZV_ETOOBIG, read_reply(fd, &id, msg, sizeof(msg)));
    ASSERT_EQ(9, id);
    ASSERT_CONTAINS(msg, "nesting");
    ASSERT_EQ(0, read_reply(fd, &id, msg, sizeof(msg)));
    ASSERT_EQ(10, id);
    close(fd);
  }
  free(keys);
  free(vals);
  free(lens);
  free(out);
}

/* Key lists over --max-frame (many long keys, within the key count): the
 * error says to split the keys, not to shrink values it has none of. */
static void test_frame_keys(void) {
  rdzv_client_t *c = client();
  enum { N = 2048 };
  const char **keys = malloc(N * sizeof(*keys));
  rdzv_value_t *out = malloc(N * sizeof(*out));
  char *k = malloc(1001);
  ASSERT(keys && out && k);
  memset(k, 'k', 1000);
  k[1000] = '\0';
  for (size_t i = 0; i < N; i++)
    keys[i] = k;
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_multi_get(c, keys, N, out, 0));
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-frame");
  if (strstr(rdzv_last_error(c), "values") != NULL ||
      strstr(rdzv_last_error(c), "split its keys") == NULL)
    TEST_FAIL("multi_get of %d keys of 1000 bytes: '%s' does not say to "
              "split the keys", N, rdzv_last_error(c));
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_wait(c, keys, N, 0));
  ASSERT_CONTAINS(rdzv_last_error(c), "split its keys");
  ASSERT_OK(rdzv_ping(c, test_ms(5000)));
  rdzv_close(c);
  free(k);
  free(keys);
  free(out);
}

/* A key over RDZV_MAX_KEY: librdzv refuses it before sending, and says
 * why (not the message of the call before); the connection goes on. */
static void test_long_key(void) {
  rdzv_client_t *c = client();
  char *k = malloc(9001), *v = malloc(MAX_VALUE + 1);
  const char *keys[2] = {"keep", NULL};
  rdzv_value_t out[2];
  int64_t r;
  ASSERT(k != NULL && v != NULL);
  memset(k, 'k', 9000);
  k[9000] = '\0';
  keys[1] = k;
  memset(v, 'v', MAX_VALUE + 1);
  ASSERT_OK(rdzv_set(c, "keep", "kept", 4, test_ms(5000)));
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "x", v, MAX_VALUE + 1, test_ms(5000)));
  ASSERT_EQ(RDZV_EINVAL, rdzv_set(c, k, "1", 1, test_ms(5000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "9000");
  ASSERT_CONTAINS(rdzv_last_error(c), "8192");
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "x", v, MAX_VALUE + 1, test_ms(5000)));
  ASSERT_EQ(RDZV_EINVAL, rdzv_multi_get(c, keys, 2, out, 0));
  ASSERT_CONTAINS(rdzv_last_error(c), "9000");
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "x", v, MAX_VALUE + 1, test_ms(5000)));
  ASSERT_EQ(RDZV_EINVAL, rdzv_add(c, k, 1, &r, test_ms(5000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "9000");
  expect_value(c, "keep", "kept");
  rdzv_close(c);
  /* On the wire, in a key list (multi_get, wait, check) as in a set: the
   * server's error names the size and the limit. */
  {
    static const int ops[] = {PROTO_OP_MGET, PROTO_OP_WAIT, PROTO_OP_CHECK,
                              PROTO_OP_SET};
    int fd = native_ready();
    uint64_t id;
    char msg[512];
    for (int i = 0; i < 4; i++) {
      if (ops[i] == PROTO_OP_SET) {
        proto_enc_t e;
        proto_enc_init(&e);
        proto_enc_begin(&e, 5);
        msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
        msgpack_pack_uint64(&e.pk, 20 + (uint64_t)i);
        msgpack_pack_int64(&e.pk, PROTO_OP_SET);
        proto_pack_str(&e.pk, k);
        proto_pack_str(&e.pk, "v");
        ASSERT_EQ(0, proto_enc_end(&e));
        ASSERT_OK(test_send_all(fd, e.data, e.len));
        proto_enc_destroy(&e);
      } else {
        send_keys_req(fd, 20 + (uint64_t)i, ops[i], k, 0);
      }
      ASSERT_EQ(RDZV_ETOOBIG, read_reply(fd, &id, msg, sizeof(msg)));
      ASSERT_EQ(20 + i, id);
      ASSERT_CONTAINS(msg, "9000");
      ASSERT_CONTAINS(msg, "8192");
    }
    send_keys_req(fd, 30, PROTO_OP_PING, NULL, 0);
    ASSERT_EQ(0, read_reply(fd, &id, msg, sizeof(msg)));
    close(fd);
  }
  free(k);
  free(v);
}

int main(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  int fds = test_fd_count();
  cfg.max_frame = MAX_FRAME;
  cfg.max_value = MAX_VALUE;
  /* Far less than one of the refused requests: it must stream through. */
  cfg.max_in_bytes = MAX_FRAME;
  port = test_server_start(&cfg);
  test_frame_librdzv();
  test_frame_wire();
  test_value();
  test_keys();
  test_long_key();
  test_frame_keys();
  test_server_stop();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_over_limits: ok\n");
  return 0;
}
