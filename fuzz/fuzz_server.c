/* fuzz_server.c - the whole server behind up to four client connections.
 * The input is what the clients send, each from its first byte (the
 * protocol is sniffed: "RDZV" for the native protocol, a TCPStore opcode
 * for 1.13 or >= 2.2), their streams separated by FUZZ_SEP. The clients
 * connect in order, then write their streams in turn, in chunks of varying
 * size so that requests split across reads, over unix sockets; once all
 * have sent everything, they half-close. This reaches every handler of
 * srv_native.c, srv_tcpstore.c and rounds.c (the rendezvous ops, rounds of
 * several members), the store with its waits (woken by another connection
 * too), watches, queues and barriers, and teardown with requests still
 * pending.
 *
 * Each input gets a fresh server on a fresh loop (FUZZ_SERVER_VERBOSE=1
 * prints what each client sent and got back). Invariants checked:
 * - the server closes every connection once its client has half-closed;
 * - then no connection, wait or paused connection is left counted in the
 *   stats, and what is counted stays within --max-memory;
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
#include "rounds.h"
#include "server.h"

#define OUT_MAX (1u << 20) /* reply bytes kept for checking */
#define MAX_PEERS 4
/* Separates the streams of the clients in one input. */
#define FUZZ_SEP "\xfe\xed<next connection>\xfe\xed"
#define SEP_LEN (sizeof(FUZZ_SEP) - 1)

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

/* One client connection: its part of the input and what came back. */
typedef struct peer_s {
  int fd;
  const uint8_t *p;
  size_t n, off;
  int wr_done, eof;
  out_t out;
} peer_t;

/* Cut the input at FUZZ_SEP into at most MAX_PEERS streams (the last one
 * keeps any further separators). RET the number of streams. */
static int split(const uint8_t *data, size_t size, peer_t *peers) {
  int np = 0;
  size_t start = 0;
  for (size_t i = 0; np < MAX_PEERS - 1 && i + SEP_LEN <= size; i++) {
    if (memcmp(data + i, FUZZ_SEP, SEP_LEN) == 0) {
      peers[np].p = data + start;
      peers[np].n = i - start;
      np++;
      start = i + SEP_LEN;
      i += SEP_LEN - 1;
    }
  }
  peers[np].p = data + start;
  peers[np].n = size - start;
  return np + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[108];
  srv_config_t cfg = SRV_CONFIG_INIT;
  struct sockaddr_un sun;
  srv_stats_t st;
  lu_log_t log;
  uv_loop_t loop;
  srv_t *s = NULL;
  peer_t peers[MAX_PEERS];
  size_t ci = 0;
  int np, open_peers, closed = 0;

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
  rounds_install(s); /* rounds, as in an agent's or a standalone server */
  FUZZ_CHECK(srv_listen(s) == 0);

  memset(peers, 0, sizeof(peers));
  np = split(data, size, peers);
  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  memcpy(sun.sun_path, path, strlen(path) + 1);
  for (int i = 0; i < np; i++) {
    peers[i].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         0);
    FUZZ_CHECK(peers[i].fd >= 0);
    FUZZ_CHECK(connect(peers[i].fd, (struct sockaddr *)&sun, sizeof(sun)) ==
               0);
  }

  open_peers = np;
  for (int iter = 0; iter < 100000 && open_peers > 0; iter++) {
    uint8_t buf[8192];
    int sending = 0;
    /* Each client in turn writes its next chunk. */
    for (int i = 0; i < np; i++) {
      peer_t *c = &peers[i];
      if (!c->wr_done && c->off < c->n) {
        size_t want = chunks[ci++ % (sizeof(chunks) / sizeof(chunks[0]))];
        ssize_t w;
        if (want > c->n - c->off)
          want = c->n - c->off;
        w = send(c->fd, c->p + c->off, want, MSG_NOSIGNAL);
        if (w > 0)
          c->off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR)
          c->wr_done = 1; /* the server closed on us */
      }
      sending += !c->wr_done && c->off < c->n;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    /* Half-close only once every client has sent everything and the
     * server has seen it, so that a wait of one client can be woken by
     * another's write. */
    for (int i = 0; i < np && sending == 0; i++)
      if (!peers[i].wr_done) {
        shutdown(peers[i].fd, SHUT_WR);
        peers[i].wr_done = 1;
      }
    for (int i = 0; i < np; i++) {
      peer_t *c = &peers[i];
      while (!c->eof) {
        ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
        if (r > 0) {
          out_add(&c->out, buf, (size_t)r);
          continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
          break;
        c->eof = 1; /* closed, or reset with our input unread */
        open_peers--;
      }
    }
  }
  /* The server closes every connection whose client half-closed. */
  FUZZ_CHECK(open_peers == 0);
  srv_get_stats(s, &st);
  FUZZ_CHECK(st.conns_open == 0);
  FUZZ_CHECK(st.waits_pending == 0);
  FUZZ_CHECK(st.paused == 0);
  FUZZ_CHECK(st.mem_used <= cfg.max_memory);
  if (getenv("FUZZ_SERVER_VERBOSE") != NULL)
    for (int i = 0; i < np; i++)
      fprintf(stderr, "fuzz_server: client %d sent %zu of %zu bytes, got %zu "
              "back%s\n", i, peers[i].off, peers[i].n, peers[i].out.len,
              peers[i].out.truncated ? " (more, not kept)" : "");
  for (int i = 0; i < np; i++)
    if (peers[i].n >= PROTO_MAGIC_LEN &&
        memcmp(peers[i].p, PROTO_MAGIC, PROTO_MAGIC_LEN) == 0)
      check_native_output(&peers[i].out);

  srv_close(s, on_srv_closed, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  FUZZ_CHECK(closed);
  FUZZ_CHECK(uv_loop_close(&loop) == 0);
  for (int i = 0; i < np; i++) {
    close(peers[i].fd);
    free(peers[i].out.p);
  }
  return 0;
}
