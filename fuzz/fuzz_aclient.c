/* fuzz_aclient.c - the agent's client of the rendezvous server
 * (launcher/aclient.c) on a libuv loop: what a server, or an impostor on
 * its port, sends back. A fake server on 127.0.0.1 takes the connection,
 * sends the input in chunks of varying size (frames split and joined),
 * then half-closes. The client connects (CHALLENGE, then HELLO and its
 * reply: on_challenge, hello_reply), then sends PING, GET and STATUS
 * requests and a quiet HEARTBEAT; replies (matched by id, error replies),
 * pushes and stray frames reach dispatch; read_cb and in_grow see the
 * stream. The seeds are what a real `launch server` sent
 * (capture_net.py; FUZZ_ENDPOINT=HOST:PORT runs against it).
 * Invariants checked:
 * - the connect callback runs at most once, and every request's callback
 *   exactly once by ac_close;
 * - the client ends (ac_close's callback) and every handle is closed
 *   (uv_loop_close succeeds), all memory freed (LeakSanitizer). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "aclient.h"
#include "fuzz.h"

static const size_t chunks[] = {7, 1, 300, 2, 4096, 13, 64};

typedef struct st_s {
  int connected, connects, sent, replied, pushes, freed;
} st_t;

static void on_reply(ac_t *a, int status, const proto_msg_t *m, void *arg) {
  st_t *s = arg;
  const char *p;
  size_t n;
  (void)a;
  s->replied++;
  if (status == 0 || m != NULL) {
    FUZZ_CHECK(m != NULL);
    if (proto_arg_bytes(m, 0, &p, &n) == 0)
      fuzz_touch(p, n);
  }
}

static void requests(ac_t *a, st_t *s) {
  msgpack_packer *pk;
  pk = ac_begin(a, PROTO_OP_PING, 0);
  (void)pk;
  if (ac_send(a, on_reply, s) == 0)
    s->sent++;
  pk = ac_begin(a, PROTO_OP_GET, 2);
  proto_pack_str(pk, "key");
  msgpack_pack_int64(pk, 1000);
  if (ac_send(a, on_reply, s) == 0)
    s->sent++;
  pk = ac_begin(a, PROTO_OP_STATUS, 0);
  if (ac_send(a, on_reply, s) == 0)
    s->sent++;
  ac_begin(a, PROTO_OP_HEARTBEAT, 0);
  ac_send_noreply(a);
}

static void on_connect(ac_t *a, int status, void *arg) {
  st_t *s = arg;
  s->connects++;
  if (status == 0) {
    s->connected = 1;
    requests(a, s);
  }
}

static void on_push(ac_t *a, const proto_msg_t *m, void *arg) {
  (void)a;
  FUZZ_CHECK(m != NULL);
  ((st_t *)arg)->pushes++;
}

static void on_lost(ac_t *a, int status, void *arg) {
  (void)a, (void)status, (void)arg;
}

static void on_freed(void *arg) { ((st_t *)arg)->freed = 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *want = getenv("FUZZ_ENDPOINT");
  struct sockaddr_in sin;
  socklen_t slen = sizeof(sin);
  ac_config_t cfg;
  lu_log_t log;
  uv_loop_t loop;
  ac_t *a = NULL;
  st_t s;
  int lfd = -1, fd = -1, wr_done = 0;
  size_t off = 0, ci = 0;
  char host[64] = "127.0.0.1";
  int port;

  memset(&s, 0, sizeof(s));
  memset(&cfg, 0, sizeof(cfg));
  memset(&sin, 0, sizeof(sin));
  if (want == NULL) {
    /* one listener for the process: a fresh one each input would run out
     * of ports (tens of thousands of runs a minute) */
    static int listener = -1;
    if (listener < 0) {
      listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        0);
      FUZZ_CHECK(listener >= 0);
      sin.sin_family = AF_INET;
      sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      FUZZ_CHECK(bind(listener, (struct sockaddr *)&sin, sizeof(sin)) == 0);
      FUZZ_CHECK(listen(listener, 4) == 0);
    }
    lfd = listener;
    FUZZ_CHECK(getsockname(lfd, (struct sockaddr *)&sin, &slen) == 0);
    port = ntohs(sin.sin_port);
  } else {
    const char *colon = strrchr(want, ':');
    FUZZ_CHECK(colon != NULL && (size_t)(colon - want) < sizeof(host));
    memcpy(host, want, (size_t)(colon - want));
    host[colon - want] = '\0';
    port = atoi(colon + 1);
  }
  lu_log_init(&log, "fuzz aclient");
  log.level = -1;
  cfg.host = host;
  cfg.port = port;
  cfg.job = "fuzz";
  cfg.role = "agent";
  cfg.connect_timeout_ms = 0; /* one attempt */
  cfg.reply_timeout_ms = 0;   /* no watchdog: the fake server half-closes */
  cfg.log = &log;
  FUZZ_CHECK(uv_loop_init(&loop) == 0);
  FUZZ_CHECK(ac_new(&loop, &cfg, on_push, on_lost, &s, &a) == 0);
  FUZZ_CHECK(ac_connect(a, on_connect) == 0);
  for (int iter = 0; iter < 20000; iter++) {
    uint8_t sink[8192];
    uv_run(&loop, UV_RUN_NOWAIT);
    if (want) {
      if (s.connects && (!s.connected || s.replied == s.sent))
        break;
      usleep(1000);
      continue;
    }
    if (fd < 0) {
      fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (s.connects)
          break; /* the client gave up */
        continue;
      }
    }
    if (off < size) {
      size_t n = chunks[ci++ % (sizeof(chunks) / sizeof(chunks[0]))];
      ssize_t w;
      if (n > size - off)
        n = size - off;
      w = send(fd, data + off, n, MSG_NOSIGNAL);
      if (w > 0)
        off += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR)
        off = size; /* the client closed */
    } else if (!wr_done) {
      shutdown(fd, SHUT_WR);
      wr_done = 1;
    }
    for (;;) {
      ssize_t r = recv(fd, sink, sizeof(sink), 0);
      if (r > 0)
        continue;
      if (r == 0 || (errno != EAGAIN && errno != EINTR))
        goto client_done; /* the client closed its end */
      break;
    }
  }
client_done:
  ac_close(a, on_freed, &s);
  for (int i = 0; i < 1000 && !s.freed; i++)
    uv_run(&loop, UV_RUN_NOWAIT);
  FUZZ_CHECK(s.freed);
  FUZZ_CHECK(s.connects <= 1);
  FUZZ_CHECK(s.replied == s.sent);
  if (fd >= 0) {
    /* a reset, not a FIN: no TIME_WAIT left per run */
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
  }
  /* a connection this run's client made but the loop above never took */
  while (lfd >= 0 && (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  FUZZ_CHECK(uv_loop_close(&loop) == 0);
  return 0;
}
