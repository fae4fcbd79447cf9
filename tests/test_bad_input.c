/* test_bad_input.c - hostile and broken clients against a real server
 * process: random bytes, truncated frames, a 4 GiB length, a wrong magic, a
 * HELLO of another version, malformed msgpack, 10,000 keys in one wait,
 * clients that send nothing, clients that vanish mid-wait, and half-sent
 * requests past the input budget. Each bad connection is answered or
 * closed, the others keep being served, the event is logged with the peer
 * address, and the server's memory stays bounded. */
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"
#include "rdzv.h"
#include "tcpstore.h"
#include "lu.h"
#include "test.h"

static int port;
static pid_t srv_pid;
static char logpath[512];

static rdzv_client_t *good_client(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  o.endpoint = ep;
  o.job = "bad-input";
  o.connect_timeout_ms = test_ms(5000);
  ASSERT_OK(rdzv_connect(&o, &c));
  return c;
}

/* The server still serves a well-behaved client. */
static void assert_serving(void) {
  rdzv_client_t *c = good_client();
  int64_t v;
  ASSERT_OK(rdzv_add(c, "alive", 1, &v, test_ms(5000)));
  rdzv_close(c);
}

static void send_all(int fd, const void *p, size_t n) {
  ASSERT_EQ((ssize_t)n, send(fd, p, n, MSG_NOSIGNAL));
}

/* Open a native connection through the challenge (no HELLO yet). */
static int native_open(void) {
  int fd = test_connect(port);
  uint8_t hdr[4], body[256];
  uint32_t len;
  send_all(fd, "RDZV", 4);
  ASSERT_EQ(0, test_read_exact(fd, hdr, 4, test_ms(5000)));
  len = proto_get_len(hdr);
  ASSERT(len < sizeof(body));
  ASSERT_EQ(0, test_read_exact(fd, body, len, test_ms(5000)));
  return fd;
}

static void send_hello(int fd, int version) {
  proto_enc_t e;
  proto_enc_init(&e);
  proto_enc_begin(&e, 8);
  msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e.pk, 1);
  msgpack_pack_int64(&e.pk, PROTO_OP_HELLO);
  msgpack_pack_int64(&e.pk, version);
  proto_pack_str(&e.pk, "worker");
  proto_pack_str(&e.pk, "bad-input");
  msgpack_pack_nil(&e.pk);
  proto_pack_bytes(&e.pk, "0123456789abcdef0123456789abcdef", 32);
  ASSERT_EQ(0, proto_enc_end(&e));
  send_all(fd, e.data, e.len);
  proto_enc_destroy(&e);
}

/* Read one reply frame; RET its status. */
static int64_t read_status(int fd) {
  uint8_t hdr[4], body[4096];
  uint32_t len;
  proto_msg_t m;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  int64_t st;
  ASSERT_EQ(0, test_read_exact(fd, hdr, 4, test_ms(5000)));
  len = proto_get_len(hdr);
  ASSERT(len < sizeof(body));
  ASSERT_EQ(0, test_read_exact(fd, body, len, test_ms(5000)));
  ASSERT_EQ(0, proto_decode(body, len, &lim, &m));
  ASSERT_EQ(PROTO_REPLY, m.kind);
  st = m.op;
  proto_msg_free(&m);
  return st;
}

static void test_garbage(void) {
  uint8_t junk[1024];
  int fds[40];
  /* Bytes that are neither "RDZV" nor a TCPStore opcode: closed at once. */
  for (int i = 0; i < 20; i++) {
    ASSERT_EQ(0, lu_random(junk, sizeof(junk)));
    junk[0] = (uint8_t)(0x20 + (junk[0] % 0x30)); /* not 'R', > 18 */
    if (junk[0] == 'R')
      junk[0] = 'Q';
    fds[i] = test_connect(port);
    send_all(fds[i], junk, sizeof(junk));
  }
  for (int i = 0; i < 20; i++) {
    ASSERT(test_peer_closed(fds[i], test_ms(3000)));
    close(fds[i]);
  }
  /* Fully random: whatever it parses as, the server survives it. */
  for (int i = 0; i < 20; i++) {
    ASSERT_EQ(0, lu_random(junk, sizeof(junk)));
    fds[i] = test_connect(port);
    send(fds[i], junk, sizeof(junk), MSG_NOSIGNAL);
  }
  assert_serving();
  for (int i = 0; i < 20; i++)
    close(fds[i]);
  assert_serving();
}

static void test_framing(void) {
  int fd;
  uint8_t big[4] = {0xff, 0xff, 0xff, 0xff};
  /* wrong magic */
  fd = test_connect(port);
  send_all(fd, "RDZX", 4);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  /* a length of 4 GiB */
  fd = native_open();
  send_all(fd, big, 4);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  /* a truncated frame, then the client goes away */
  fd = native_open();
  send_all(fd, "\x00\x00\x00\x64" "0123456789", 14);
  close(fd);
  /* malformed msgpack in a whole frame */
  fd = native_open();
  send_all(fd, "\x00\x00\x00\x03\xc1\xc1\xc1", 7);
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  /* HELLO of another protocol version: a clear error, then closed */
  fd = native_open();
  send_hello(fd, 99);
  ASSERT_EQ(RDZV_EVERSION, read_status(fd));
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  /* a request before HELLO */
  fd = native_open();
  {
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, 3);
    msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
    msgpack_pack_uint64(&e.pk, 7);
    msgpack_pack_int64(&e.pk, PROTO_OP_PING);
    ASSERT_EQ(0, proto_enc_end(&e));
    send_all(fd, e.data, e.len);
    proto_enc_destroy(&e);
  }
  ASSERT_EQ(RDZV_EPROTO, read_status(fd));
  ASSERT(test_peer_closed(fd, test_ms(3000)));
  close(fd);
  /* a good HELLO, then a request with wrong argument types: an error
   * reply, and the connection stays usable */
  fd = native_open();
  send_hello(fd, RDZV_PROTOCOL_VERSION);
  ASSERT_EQ(0, read_status(fd));
  {
    proto_enc_t e;
    proto_enc_init(&e);
    proto_enc_begin(&e, 4);
    msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
    msgpack_pack_uint64(&e.pk, 2);
    msgpack_pack_int64(&e.pk, PROTO_OP_SET);
    msgpack_pack_int64(&e.pk, 12345); /* key must be bytes */
    ASSERT_EQ(0, proto_enc_end(&e));
    proto_enc_begin(&e, 3);
    msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
    msgpack_pack_uint64(&e.pk, 3);
    msgpack_pack_int64(&e.pk, PROTO_OP_PING);
    ASSERT_EQ(0, proto_enc_end(&e));
    send_all(fd, e.data, e.len);
    proto_enc_destroy(&e);
  }
  ASSERT_EQ(RDZV_EPROTO, read_status(fd));
  ASSERT_EQ(0, read_status(fd));
  close(fd);
  assert_serving();
}

static void test_big_waits(void) {
  rdzv_client_t *c = good_client();
  enum { N = 10000 };
  static char keybuf[N][16];
  static const char *keys[N];
  uint8_t *req;
  size_t off = 0;
  int fd;
  for (int i = 0; i < N; i++) {
    snprintf(keybuf[i], sizeof(keybuf[i]), "k%d", i);
    keys[i] = keybuf[i];
  }
  /* native: a wait on 10,000 keys times out cleanly */
  ASSERT_EQ(-ETIMEDOUT, rdzv_wait(c, keys, N, 300));
  rdzv_close(c);
  /* TCPStore: a wait on 10,000 keys, then the client vanishes */
  req = malloc(1 + 8 + (size_t)N * 16);
  req[off++] = TS_WAIT;
  {
    uint64_t n = N;
    memcpy(req + off, &n, 8);
    off += 8;
  }
  for (int i = 0; i < N; i++) {
    uint64_t l = strlen(keys[i]);
    memcpy(req + off, &l, 8);
    off += 8;
    memcpy(req + off, keys[i], l);
    off += l;
  }
  for (int round = 0; round < 5; round++) {
    fd = test_connect(port);
    send_all(fd, "\x00\xce\xf7\x85\x3c", 5);
    send_all(fd, req, off);
    usleep(20000);
    close(fd);
  }
  free(req);
  assert_serving();
}

static void test_idle_and_vanishing(void) {
  enum { IDLE = 300, WAITERS = 200 };
  int idle[IDLE], w[WAITERS];
  for (int i = 0; i < IDLE; i++)
    idle[i] = test_connect(port); /* never sends a byte */
  assert_serving();
  for (int i = 0; i < WAITERS; i++) {
    uint8_t req[64];
    size_t n = 0;
    uint64_t one = 1, kl = 8;
    w[i] = test_connect(port);
    memcpy(req, "\x00\xce\xf7\x85\x3c", 5);
    n = 5;
    req[n++] = TS_WAIT;
    memcpy(req + n, &one, 8);
    n += 8;
    memcpy(req + n, &kl, 8);
    n += 8;
    memcpy(req + n, "/vanish!", 8);
    n += 8;
    send_all(w[i], req, n);
  }
  usleep(50000);
  for (int i = 0; i < WAITERS; i++)
    close(w[i]); /* gone mid-wait */
  for (int i = 0; i < IDLE; i++)
    close(idle[i]);
  /* the waits died with their connections: setting the key is harmless */
  {
    rdzv_client_t *c = good_client();
    ASSERT_OK(rdzv_set(c, "/vanish!", "x", 1, test_ms(5000)));
    rdzv_close(c);
  }
  assert_serving();
}

static void test_input_budget(void) {
  /* Half-sent 4 MiB frames on 6 connections against a 8 MiB budget: the
   * server closes connections rather than buffer without limit. */
  enum { CONNS = 6 };
  int fd[CONNS], closed = 0;
  size_t chunk = 3u << 20;
  uint8_t *data = calloc(1, chunk);
  for (int i = 0; i < CONNS; i++) {
    fd[i] = native_open();
    send_hello(fd[i], RDZV_PROTOCOL_VERSION);
    ASSERT_EQ(0, read_status(fd[i]));
    send_all(fd[i], "\x00\x40\x00\x00", 4); /* 4 MiB frame */
    /* the server may close us part way: ignore send errors */
    for (size_t off = 0; off < chunk;) {
      ssize_t r = send(fd[i], data + off, chunk - off, MSG_NOSIGNAL);
      if (r <= 0)
        break;
      off += (size_t)r;
    }
  }
  for (int i = 0; i < CONNS; i++) {
    if (test_peer_closed(fd[i], 300))
      closed++;
    close(fd[i]);
  }
  free(data);
  ASSERT(closed >= 2);
  assert_serving();
}

/* librdzv's set of a value over the server's largest request (--max-frame,
 * 16 MiB): the server answers it with an error that names the limit and
 * drops its bytes as they come; the connection goes on. */
static void test_oversized_request(void) {
  rdzv_client_t *c = good_client();
  size_t n = (size_t)17 << 20;
  char *v = malloc(n);
  int64_t r;
  ASSERT(v != NULL);
  memset(v, 'v', n);
  ASSERT_EQ(RDZV_ETOOBIG, rdzv_set(c, "big", v, n, test_ms(10000)));
  ASSERT_CONTAINS(rdzv_last_error(c), "--max-frame");
  ASSERT_CONTAINS(rdzv_last_error(c), "bytes");
  ASSERT_OK(rdzv_add(c, "alive", 1, &r, test_ms(5000)));
  rdzv_close(c);
  free(v);
  assert_serving();
}

int main(void) {
  const char *extra[] = {"--max-input-bytes", "8388608", NULL};
  long rss0, rss1;
  char *log;
  /* A small ASan quarantine, so that RSS reflects what the server keeps. */
  setenv("ASAN_OPTIONS", "quarantine_size_mb=4:detect_leaks=1", 1);
  /* Nor freed buffers kept warm for reuse (the cache of big blocks, up to
   * 16 MiB by design): what is measured is what the abuse left behind. */
  setenv("LAUNCH_SERVER_BIG_CACHE_MB", "0", 1);
  snprintf(logpath, sizeof(logpath), "%s/server.log", test_tmpdir());
  port = test_launch_server(&srv_pid, extra, logpath);
  assert_serving();
  rss0 = test_rss_kib(srv_pid);
  /* First each kind of bad input alone, more than a second apart: the
   * server logs at most 20 bad connections a second. */
  test_framing();
  usleep(1100000);
  test_input_budget();
  usleep(1100000);
  test_oversized_request();
  usleep(1100000);
  for (int round = 0; round < 3; round++) {
    test_garbage();
    test_framing();
    test_big_waits();
    test_idle_and_vanishing();
    test_input_budget();
  }
  usleep(200000);
  rss1 = test_rss_kib(srv_pid);
  printf("server RSS: %ld KiB at start, %ld KiB after 3 rounds of abuse\n",
         rss0, rss1);
  ASSERT(rss1 > 0 && rss1 - rss0 < 48 * 1024);
  /* The server stops cleanly (exit 0, and no leak under ASan). */
  kill(srv_pid, SIGTERM);
  {
    int st = test_wait(srv_pid, test_ms(10000));
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(0, WEXITSTATUS(st));
  }
  log = test_read_file(logpath);
  ASSERT(log != NULL);
  ASSERT_CONTAINS(log, "from 127.0.0.1:");
  ASSERT_CONTAINS(log, "exceeds the");
  ASSERT_CONTAINS(log, "malformed");
  ASSERT_CONTAINS(log, "protocol version 99");
  ASSERT_CONTAINS(log, "input budget");
  ASSERT_CONTAINS(log, "were not logged");
  free(log);
  printf("test_bad_input: ok\n");
  return 0;
}
