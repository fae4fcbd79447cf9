/* fuzz_server.c - the whole server behind one connection: the input is what
 * a client sends from its first byte (the protocol is sniffed: "RDZV" for
 * the native protocol, a TCPStore opcode for 1.13 or >= 2.2), written over a
 * unix socket in chunks of varying size so that requests split across reads,
 * then the client half-closes. This reaches every handler of srv_native.c
 * and srv_tcpstore.c, the store with its waits, watches, queues and
 * barriers, and connection teardown with requests still pending.
 *
 * Each input gets a fresh server on a fresh loop. Invariants checked:
 * - the server closes the connection once the client has half-closed;
 * - then no connection and no wait is left counted in the stats;
 * - every complete frame the server sent a native client decodes, and is a
 *   reply or a push;
 * - srv_close() releases every handle (uv_loop_close succeeds) and, under
 *   LeakSanitizer, all memory. */
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "fuzz.h"
#include "proto.h"
#include "server.h"

#define OUT_MAX (1u << 20) /* reply bytes kept for checking */

static const size_t chunks[] = {3, 1, 50, 9, 700, 2, 4096};

typedef struct out_s {
  uint8_t *p;
  size_t len, cap;
  int truncated;
} out_t;

static void out_add(out_t *o, const uint8_t *p, size_t n) {
  if (o->truncated || o->len + n > OUT_MAX) {
    o->truncated = 1;
    return;
  }
  if (o->len + n > o->cap) {
    size_t ncap = o->cap ? o->cap : 4096;
    while (ncap < o->len + n)
      ncap *= 2;
    o->p = realloc(o->p, ncap);
    FUZZ_CHECK(o->p != NULL);
    o->cap = ncap;
  }
  memcpy(o->p + o->len, p, n);
  o->len += n;
}

/* Complete frames must decode as replies or pushes; a last partial frame
 * may have been cut by the close. */
static void check_native_output(const out_t *o) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  size_t off = 0;
  lim.max_frame = 64u << 20; /* librdzv's limits */
  lim.max_items = 1u << 22;
  while (o->len - off >= PROTO_HDR) {
    uint32_t len = proto_get_len(o->p + off);
    proto_msg_t m;
    if (o->len - off - PROTO_HDR < len)
      break;
    FUZZ_CHECK(proto_decode(o->p + off + PROTO_HDR, len, &lim, &m) == 0);
    FUZZ_CHECK(m.kind == PROTO_REPLY || m.kind == PROTO_PUSH);
    proto_msg_free(&m);
    off += PROTO_HDR + (size_t)len;
  }
}

static void on_srv_closed(void *arg) { *(int *)arg = 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[108];
  srv_config_t cfg = SRV_CONFIG_INIT;
  struct sockaddr_un sun;
  srv_stats_t st;
  lu_log_t log;
  uv_loop_t loop;
  srv_t *s = NULL;
  out_t out = {NULL, 0, 0, 0};
  size_t off = 0, ci = 0;
  int fd, eof = 0, wr_done = 0, closed = 0;

  if (path[0] == '\0')
    snprintf(path, sizeof(path), "/tmp/launch-fuzz-server.%d.sock",
             (int)getpid());
  lu_log_init(&log, "fuzz server");
  log.level = -1; /* bad input is the point here: do not log it */
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.unix_path = path;
  cfg.log = &log;
  FUZZ_CHECK(uv_loop_init(&loop) == 0);
  FUZZ_CHECK(srv_new(&loop, &cfg, &s) == 0);
  FUZZ_CHECK(srv_listen(s) == 0);

  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  memcpy(sun.sun_path, path, strlen(path) + 1);
  FUZZ_CHECK(connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0);

  for (int iter = 0; iter < 100000 && !eof; iter++) {
    uint8_t buf[8192];
    if (!wr_done && off < size) {
      size_t want = chunks[ci++ % (sizeof(chunks) / sizeof(chunks[0]))];
      ssize_t w;
      if (want > size - off)
        want = size - off;
      w = send(fd, data + off, want, MSG_NOSIGNAL);
      if (w > 0)
        off += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR)
        wr_done = 1; /* the server closed on us */
    }
    if (!wr_done && off == size) {
      shutdown(fd, SHUT_WR);
      wr_done = 1;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    for (;;) {
      ssize_t r = recv(fd, buf, sizeof(buf), 0);
      if (r > 0) {
        out_add(&out, buf, (size_t)r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EINTR))
        break;
      eof = 1; /* closed, or reset with our input unread */
      break;
    }
  }
  FUZZ_CHECK(eof);
  srv_get_stats(s, &st);
  FUZZ_CHECK(st.conns_open == 0);
  FUZZ_CHECK(st.waits_pending == 0);
  if (size >= PROTO_MAGIC_LEN && memcmp(data, PROTO_MAGIC, 4) == 0)
    check_native_output(&out);

  srv_close(s, on_srv_closed, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  FUZZ_CHECK(closed);
  FUZZ_CHECK(uv_loop_close(&loop) == 0);
  close(fd);
  free(out.p);
  return 0;
}
