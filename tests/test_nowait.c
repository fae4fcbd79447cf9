/* test_nowait.c - librdzv's pipelined sets (rdzv_set_nowait, rdzv_flush):
 * against a real server, queued sets run before the next request and in
 * order, a failed one is reported once by the next call, the queue flushes
 * itself at its bound and at close; on the wire, a server offering SETQ
 * answers a SETQ only when it fails; against a scripted fake server,
 * replies out of order and a server closing in the middle of a pipeline end
 * the connection with a clear error, a server without SETQ gets SET and one
 * with it SETQ, whose failure the next call reports. */
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "server.h"
#include "test.h"

static rdzv_client_t *connect_to(const char *endpoint, const char *job) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  o.endpoint = endpoint;
  o.job = job;
  o.connect_timeout_ms = test_ms(5000);
  o.io_timeout_ms = test_ms(5000);
  ASSERT_OK(rdzv_connect(&o, &c));
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

/* Queued sets leave with the next request, in order, before it. */
static void test_order(void) {
  rdzv_client_t *c = connect_to(test_server_endpoint(), "order");
  rdzv_client_t *o = connect_to(test_server_endpoint(), "order");
  void *v = NULL;
  size_t n;
  ASSERT_EQ(RDZV_EINVAL, rdzv_set_nowait(c, NULL, "x", 1));
  ASSERT_EQ(RDZV_EINVAL, rdzv_set_nowait(c, "k", NULL, 1));
  ASSERT_OK(rdzv_set_nowait(c, "k", "1", 1));
  ASSERT_OK(rdzv_set_nowait(c, "k", "22", 2));
  ASSERT_OK(rdzv_set_nowait(c, "j", "", 0));
  /* Nothing was sent yet: another connection does not see them. */
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(o, "k", &v, &n, 0));
  /* The get goes out behind them: it sees the last one. */
  expect_value(c, "k", "22");
  expect_value(o, "k", "22");
  expect_value(o, "j", "");
  /* rdzv_flush sends the queue without another request. */
  ASSERT_OK(rdzv_set_nowait(c, "f", "flushed", 7));
  ASSERT_OK(rdzv_flush(c, test_ms(5000)));
  expect_value(o, "f", "flushed");
  ASSERT_OK(rdzv_flush(c, test_ms(5000))); /* nothing queued: no-op */
  /* Mixed with other requests: an add after queued sets of its key. */
  ASSERT_OK(rdzv_set_nowait(c, "ctr", "40", 2));
  {
    int64_t r = 0;
    ASSERT_OK(rdzv_add(c, "ctr", 2, &r, test_ms(5000)));
    ASSERT_EQ(42, r);
  }
  rdzv_close(o);
  rdzv_close(c);
}

/* A failed set is reported by the next call (RDZV_EDEFERRED, naming the
 * key), once; the sets after it are stored. */
static void test_errors(void) {
  rdzv_client_t *c = connect_to(test_server_endpoint(), "errors");
  char big[2048];
  memset(big, 'b', sizeof(big));
  ASSERT_OK(rdzv_set_nowait(c, "too/big", big, sizeof(big)));
  ASSERT_OK(rdzv_set_nowait(c, "after", "ok", 2));
  {
    void *v = (void *)1;
    size_t n = 77;
    ASSERT_EQ(RDZV_EDEFERRED, rdzv_get(c, "after", &v, &n, 0));
    ASSERT(v == (void *)1 && n == 77); /* outputs untouched */
  }
  ASSERT_CONTAINS(rdzv_last_error(c), "too/big");
  ASSERT_CONTAINS(rdzv_last_error(c), "RDZV_ETOOBIG");
  ASSERT_CONTAINS(rdzv_last_error(c), "1024-byte limit");
  /* Reported once; the set behind it was stored; the big one was not. */
  expect_value(c, "after", "ok");
  {
    void *v = NULL;
    size_t n;
    ASSERT_EQ(RDZV_ENOKEY, rdzv_get(c, "too/big", &v, &n, 0));
  }
  /* Through rdzv_flush too. */
  ASSERT_OK(rdzv_set_nowait(c, "too/big2", big, sizeof(big)));
  ASSERT_EQ(RDZV_EDEFERRED, rdzv_flush(c, test_ms(5000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "too/big2");
  ASSERT_OK(rdzv_flush(c, test_ms(5000)));
  ASSERT_OK(rdzv_ping(c, test_ms(5000)));
  rdzv_close(c);
}

/* The queue sends itself at its bound (256 sets), and rdzv_close sends and
 * waits for what is queued. */
static void test_bounds_and_close(void) {
  rdzv_client_t *c = connect_to(test_server_endpoint(), "bounds");
  rdzv_client_t *o = connect_to(test_server_endpoint(), "bounds");
  char key[32];
  void *v = NULL;
  size_t n;
  for (int i = 0; i < 300; i++) {
    snprintf(key, sizeof(key), "q/%d", i);
    ASSERT_OK(rdzv_set_nowait(c, key, key, strlen(key)));
  }
  /* The first 256 went out (and were answered) when the 256th was queued;
   * the rest wait for the next call. */
  expect_value(o, "q/255", "q/255");
  ASSERT_EQ(RDZV_ENOKEY, rdzv_get(o, "q/256", &v, &n, 0));
  rdzv_close(c); /* flushes */
  for (int i = 0; i < 300; i += 37) {
    snprintf(key, sizeof(key), "q/%d", i);
    expect_value(o, key, key);
  }
  expect_value(o, "q/299", "q/299");
  rdzv_close(o);
}

/* ---- SETQ on the wire ----------------------------------------------------- */

/* Read one frame from fd into *m (body in *body, free it). */
static void read_frame_raw(int fd, proto_msg_t *m, uint8_t **body) {
  uint8_t hdr[4];
  uint32_t len;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  ASSERT_EQ(0, test_read_exact(fd, hdr, 4, test_ms(5000)));
  len = proto_get_len(hdr);
  ASSERT(len < 65536);
  *body = malloc(len ? len : 1);
  ASSERT(*body != NULL);
  ASSERT_EQ(0, test_read_exact(fd, *body, len, test_ms(5000)));
  ASSERT_EQ(0, proto_decode(*body, len, &lim, m));
}

static void expect_reply(int fd, uint64_t id, int status) {
  proto_msg_t m;
  uint8_t *b;
  read_frame_raw(fd, &m, &b);
  ASSERT_EQ(PROTO_REPLY, m.kind);
  ASSERT_EQ(id, m.id);
  ASSERT_EQ(status, m.op);
  proto_msg_free(&m);
  free(b);
}

/* The server offers SETQ in its CHALLENGE; a SETQ that succeeds is not
 * answered, one that fails is, with its id, in order with the replies of
 * the requests around it. */
static void test_setq_wire(void) {
  const char *ep = test_server_endpoint();
  int fd = test_connect(atoi(strrchr(ep, ':') + 1));
  proto_hello_t h;
  proto_msg_t m;
  proto_enc_t e;
  uint8_t *b;
  char big[2048], err[256];
  ASSERT(fd >= 0);
  ASSERT_OK(test_send_all(fd, PROTO_MAGIC, PROTO_MAGIC_LEN));
  read_frame_raw(fd, &m, &b);
  memset(&h, 0, sizeof(h));
  h.job = "setq";
  h.role = "worker";
  ASSERT_OK(proto_hello_challenge(&h, &m, err, sizeof(err)));
  ASSERT_EQ(PROTO_FEAT_SETQ, h.features & PROTO_FEAT_SETQ);
  proto_msg_free(&m);
  free(b);
  proto_enc_init(&e);
  proto_enc_begin_msg(&e, 5, PROTO_REQUEST, 1, PROTO_OP_HELLO);
  proto_hello_pack(&h, &e.pk);
  ASSERT_OK(proto_enc_end(&e));
  memset(big, 'b', sizeof(big));
  ASSERT_OK(proto_enc_key_bin(&e, PROTO_REQUEST, 2, PROTO_OP_SETQ, "q", 1,
                              "v", 1));
  ASSERT_OK(proto_enc_key_bin(&e, PROTO_REQUEST, 3, PROTO_OP_SETQ, "q2", 2,
                              big, sizeof(big)));
  proto_enc_begin_msg(&e, 2, PROTO_REQUEST, 4, PROTO_OP_SETQ);
  msgpack_pack_int64(&e.pk, 7); /* a key must be bytes */
  proto_pack_bytes(&e.pk, "v", 1);
  ASSERT_OK(proto_enc_end(&e));
  ASSERT_OK(proto_enc_key_bin(&e, PROTO_REQUEST, 5, PROTO_OP_SETQ, "q3", 2,
                              "w", 1));
  ASSERT_OK(proto_enc_key_int(&e, PROTO_REQUEST, 6, PROTO_OP_GET, "q", 1, 0));
  ASSERT_OK(test_send_all(fd, e.data, e.len));
  proto_enc_destroy(&e);
  expect_reply(fd, 1, 0);             /* HELLO */
  expect_reply(fd, 3, RDZV_ETOOBIG);  /* the value over the limit */
  expect_reply(fd, 4, RDZV_EPROTO);   /* the key of the wrong type */
  read_frame_raw(fd, &m, &b);         /* the GET: 2 and 5 said nothing */
  ASSERT_EQ(6, m.id);
  ASSERT_EQ(0, m.op);
  {
    const char *p;
    size_t n;
    ASSERT_OK(proto_arg_bytes(&m, 0, &p, &n));
    ASSERT(n == 1 && p[0] == 'v');
  }
  proto_msg_free(&m);
  free(b);
  close(fd);
  {
    rdzv_client_t *c = connect_to(ep, "setq");
    expect_value(c, "q3", "w");
    rdzv_close(c);
  }
}

/* ---- a scripted fake server ---------------------------------------------- */

enum {
  FAKE_OUT_OF_ORDER,
  FAKE_CLOSE_NO_REPLY,
  FAKE_CLOSE_AFTER_SET,
  FAKE_DEAF, /* reads nothing after the handshake until told to end */
  FAKE_STATUS_2_32, /* the PING answered with status 2^32 */
  FAKE_STATUS_1,    /* ... with status 1 */
  /* From here the fake offers SETQ. */
  FAKE_SETQ_OK,
  FAKE_SETQ_FAIL,
  FAKE_SETQ_2_32, /* the SETQ answered (failed) with status 2^32 */
};

typedef struct fake_s {
  int lfd, port, script;
  int done; /* FAKE_DEAF: the test is through (atomic) */
  pthread_t thread;
} fake_t;

static int read_req(int fd, proto_msg_t *m, uint8_t **body) {
  uint8_t hdr[4];
  uint32_t len;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  if (test_read_exact(fd, hdr, 4, test_ms(5000)) != 0)
    return -1;
  len = proto_get_len(hdr);
  if (len > 65536 || (*body = malloc(len ? len : 1)) == NULL)
    return -1;
  if (test_read_exact(fd, *body, len, test_ms(5000)) != 0 ||
      proto_decode(*body, len, &lim, m) != 0) {
    free(*body);
    return -1;
  }
  return 0;
}

static void send_reply(int fd, uint64_t id, int64_t status) {
  proto_enc_t e;
  proto_enc_init(&e);
  proto_enc_begin(&e, 3);
  msgpack_pack_uint8(&e.pk, PROTO_REPLY);
  msgpack_pack_uint64(&e.pk, id);
  msgpack_pack_int64(&e.pk, status);
  ASSERT_OK(proto_enc_end(&e));
  ASSERT_OK(test_send_all(fd, e.data, e.len));
  proto_enc_destroy(&e);
}

static void *fake_main(void *arg) {
  fake_t *f = arg;
  int fd = accept(f->lfd, NULL, NULL);
  char magic[4];
  uint8_t nonce[PROTO_NONCE_LEN] = {0}, *b1 = NULL, *b2 = NULL;
  proto_msg_t m1, m2;
  proto_enc_t e;
  ASSERT(fd >= 0);
  ASSERT(test_read_exact(fd, magic, 4, test_ms(5000)) == 0);
  ASSERT(memcmp(magic, PROTO_MAGIC, 4) == 0);
  proto_enc_init(&e);
  /* A server before SETQ sends no features. */
  proto_enc_begin(&e, f->script >= FAKE_SETQ_OK ? 7 : 6);
  msgpack_pack_uint8(&e.pk, PROTO_PUSH);
  msgpack_pack_uint8(&e.pk, 0);
  msgpack_pack_int64(&e.pk, PROTO_EV_CHALLENGE);
  proto_pack_bytes(&e.pk, nonce, sizeof(nonce));
  msgpack_pack_uint32(&e.pk, RDZV_PROTOCOL_VERSION);
  msgpack_pack_false(&e.pk);
  if (f->script >= FAKE_SETQ_OK)
    msgpack_pack_uint32(&e.pk, PROTO_FEAT_SETQ);
  ASSERT_OK(proto_enc_end(&e));
  ASSERT_OK(test_send_all(fd, e.data, e.len));
  proto_enc_reset(&e);
  ASSERT(read_req(fd, &m1, &b1) == 0 && m1.op == PROTO_OP_HELLO);
  proto_enc_begin(&e, 4);
  msgpack_pack_uint8(&e.pk, PROTO_REPLY);
  msgpack_pack_uint64(&e.pk, m1.id);
  msgpack_pack_int64(&e.pk, 0);
  msgpack_pack_nil(&e.pk);
  ASSERT_OK(proto_enc_end(&e));
  ASSERT_OK(test_send_all(fd, e.data, e.len));
  proto_enc_destroy(&e);
  proto_msg_free(&m1);
  free(b1);
  if (f->script == FAKE_DEAF) {
    /* A server that stops reading (SIGSTOPped, swapping) */
    while (!__atomic_load_n(&f->done, __ATOMIC_ACQUIRE))
      usleep(10000);
    close(fd);
    return NULL;
  }
  /* The pipeline: a queued SET, then the request that carried it. */
  ASSERT(read_req(fd, &m1, &b1) == 0);
  ASSERT_EQ(f->script >= FAKE_SETQ_OK ? PROTO_OP_SETQ : PROTO_OP_SET, m1.op);
  ASSERT(read_req(fd, &m2, &b2) == 0 && m2.op == PROTO_OP_PING);
  ASSERT(m2.id > m1.id);
  switch (f->script) {
  case FAKE_SETQ_FAIL:
    /* A failed SETQ is answered (with a message), before the PING. */
    proto_enc_init(&e);
    proto_enc_begin_msg(&e, 1, PROTO_REPLY, m1.id, RDZV_ETOOBIG);
    proto_pack_str(&e.pk, "store is full");
    ASSERT_OK(proto_enc_end(&e));
    ASSERT_OK(test_send_all(fd, e.data, e.len));
    proto_enc_destroy(&e);
    send_reply(fd, m2.id, 0);
    break;
  case FAKE_SETQ_OK:
    send_reply(fd, m2.id, 0); /* the SETQ succeeded: no reply of its own */
    break;
  case FAKE_SETQ_2_32:
    send_reply(fd, m1.id, (int64_t)1 << 32);
    send_reply(fd, m2.id, 0);
    break;
  case FAKE_STATUS_2_32:
  case FAKE_STATUS_1:
    send_reply(fd, m1.id, 0);
    send_reply(fd, m2.id, f->script == FAKE_STATUS_1 ? 1 : (int64_t)1 << 32);
    break;
  case FAKE_OUT_OF_ORDER:
    send_reply(fd, m2.id, 0);
    send_reply(fd, m1.id, 0);
    break;
  case FAKE_CLOSE_AFTER_SET:
    send_reply(fd, m1.id, 0);
    break;
  default:
    break;
  }
  proto_msg_free(&m1);
  proto_msg_free(&m2);
  free(b1);
  free(b2);
  close(fd);
  return NULL;
}

static void fake_start(fake_t *f, int script) {
  struct sockaddr_in a;
  socklen_t al = sizeof(a);
  memset(f, 0, sizeof(*f));
  f->script = script;
  f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT(f->lfd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
  ASSERT(listen(f->lfd, 4) == 0);
  ASSERT(getsockname(f->lfd, (struct sockaddr *)&a, &al) == 0);
  f->port = ntohs(a.sin_port);
  ASSERT(pthread_create(&f->thread, NULL, fake_main, f) == 0);
}

static void fake_stop(fake_t *f) {
  pthread_join(f->thread, NULL);
  close(f->lfd);
}

static rdzv_client_t *fake_client(fake_t *f, int script) {
  char ep[64];
  fake_start(f, script);
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", f->port);
  return connect_to(ep, "fake");
}

/* A client of the fake running script: one queued set of key, then a PING
 * that must return want. */
static rdzv_client_t *fake_set_ping(fake_t *f, int script, const char *key,
                                    int want) {
  rdzv_client_t *c = fake_client(f, script);
  ASSERT_OK(rdzv_set_nowait(c, key, "v", 1));
  ASSERT_EQ(want, rdzv_ping(c, test_ms(5000)));
  return c;
}

static void fake_end(fake_t *f, rdzv_client_t *c) {
  rdzv_close(c);
  fake_stop(f);
}

static void test_fake_server(void) {
  fake_t f;
  rdzv_client_t *c;

  /* The request's reply before the queued set's: out of order, the
   * stream cannot be trusted: the connection is dropped. */
  c = fake_set_ping(&f, FAKE_OUT_OF_ORDER, "k", RDZV_EPROTO);
  ASSERT_CONTAINS(rdzv_last_error(c), "out of order");
  ASSERT_CONTAINS(rdzv_last_error(c), "'k'");
  ASSERT_EQ(RDZV_ECLOSED, rdzv_ping(c, test_ms(5000)));
  ASSERT_EQ(RDZV_ECLOSED, rdzv_set_nowait(c, "k", "v", 1));
  fake_end(&f, c);

  /* The server closes before any reply: the call fails and says the set
   * may not have been stored. */
  c = fake_set_ping(&f, FAKE_CLOSE_NO_REPLY, "k", RDZV_ECLOSED);
  ASSERT_CONTAINS(rdzv_last_error(c), "closed the connection");
  ASSERT_CONTAINS(rdzv_last_error(c), "1 set(s) sent without waiting may or "
                                      "may not have been stored");
  ASSERT_EQ(RDZV_ECLOSED, rdzv_flush(c, test_ms(5000)));
  fake_end(&f, c);

  /* A server offering SETQ: the set is sent as SETQ, and the PING's reply
   * alone tells that it was stored. */
  c = fake_set_ping(&f, FAKE_SETQ_OK, "k", 0);
  ASSERT_OK(rdzv_flush(c, test_ms(5000))); /* nothing left to wait for */
  fake_end(&f, c);

  /* A failed SETQ's reply: the next call says which set and why. */
  c = fake_set_ping(&f, FAKE_SETQ_FAIL, "big/key", RDZV_EDEFERRED);
  ASSERT_CONTAINS(rdzv_last_error(c), "big/key");
  ASSERT_CONTAINS(rdzv_last_error(c), "store is full");
  ASSERT_OK(rdzv_flush(c, test_ms(5000)));
  fake_end(&f, c);

  /* A status that is not an error code (a server of another protocol, a
   * hostile one): 2^32 read as int was 0, success, and 1 a positive
   * return where the calls promise 0 or negative. */
  c = fake_set_ping(&f, FAKE_STATUS_2_32, "k", RDZV_EPROTO);
  ASSERT_CONTAINS(rdzv_last_error(c), "status 4294967296, not an error code");
  fake_end(&f, c);
  c = fake_set_ping(&f, FAKE_STATUS_1, "k", RDZV_EPROTO);
  ASSERT_CONTAINS(rdzv_last_error(c), "status 1, not an error code");
  fake_end(&f, c);
  /* A failed SETQ's status 2^32: the set failed, and the next call says
   * so (read as 0, the failure was lost: the key taken for stored). */
  c = fake_set_ping(&f, FAKE_SETQ_2_32, "lost/key", RDZV_EDEFERRED);
  ASSERT_CONTAINS(rdzv_last_error(c), "lost/key");
  fake_end(&f, c);

  /* The set answered, then the server closes: only the request fails. */
  c = fake_set_ping(&f, FAKE_CLOSE_AFTER_SET, "k", RDZV_ECLOSED);
  ASSERT(strstr(rdzv_last_error(c), "sent without waiting") == NULL);
  fake_end(&f, c);

  /* A server that stops reading: a 15 MiB set (more than the sockets
   * hold) times out partway. The rest of that frame never goes, so the
   * connection is closed: the next call says so at once (it went on, and
   * the server would have read the next request as the rest of the
   * value). */
  {
    size_t big = (size_t)15 << 20;
    char *v = malloc(big);
    uint64_t t0;
    ASSERT(v != NULL);
    memset(v, 'B', big);
    c = fake_client(&f, FAKE_DEAF);
    ASSERT_EQ(-ETIMEDOUT, rdzv_set(c, "big", v, big, 200));
    ASSERT_CONTAINS(rdzv_last_error(c), "the connection is closed");
    t0 = lu_now_ms();
    ASSERT_EQ(RDZV_ECLOSED, rdzv_ping(c, test_ms(5000)));
    ASSERT(lu_now_ms() - t0 < 1000);
    __atomic_store_n(&f.done, 1, __ATOMIC_RELEASE);
    fake_end(&f, c);
    free(v);
  }
}

int main(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  int fds = test_fd_count();
  cfg.max_value = 1024;
  test_server_start(&cfg);
  test_order();
  test_errors();
  test_bounds_and_close();
  test_setq_wire();
  test_server_stop();
  test_fake_server();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_nowait: ok\n");
  return 0;
}
