/* server.c - listeners, connections, protocol sniffing, output batching,
 * wait deadlines and shutdown of the rendezvous server. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srv_int.h"

#define IN_CHUNK 1024 /* first read buffer; doubles as frames need */
#define IN_KEEP_MAX (256u << 10) /* free a larger idle input buffer */

static void conn_process(conn_t *c);
static void flush_conn(conn_t *c);

/* ---- jobs ------------------------------------------------------------------------ */

job_t *srv__job(srv_t *s, const char *name, size_t len) {
  job_t *j;
  for (j = s->jobs; j; j = j->next)
    if (strlen(j->name) == len && memcmp(j->name, name, len) == 0)
      return j;
  if (s->njobs >= s->cfg.max_jobs || len == 0 || len > 255)
    return NULL;
  if ((j = calloc(1, sizeof(*j) + len + 1)) == NULL)
    return NULL;
  if (store_new(s->cfg.max_store_bytes, &j->store) != 0) {
    free(j);
    return NULL;
  }
  memcpy(j->name, name, len);
  j->name[len] = '\0';
  j->srv = s;
  j->next = s->jobs;
  s->jobs = j;
  s->njobs++;
  s->stats.jobs = s->njobs;
  return j;
}

store_t *srv_job_store(srv_t *s, const char *job) {
  job_t *j = srv__job(s, job, strlen(job));
  return j ? j->store : NULL;
}

/* ---- config --------------------------------------------------------------------- */

static int parse_allow(srv_t *s, const char *list) {
  const char *p = list;
  while (p && *p) {
    char item[128];
    size_t n = strcspn(p, ",");
    char *slash;
    int prefix = -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (n == 0 || n >= sizeof(item) || s->nallow >= 16)
      return RDZV_EINVAL;
    memcpy(item, p, n);
    item[n] = '\0';
    if ((slash = strchr(item, '/')) != NULL) {
      *slash = '\0';
      if (lu_parse_int(slash + 1, 0, 128, &prefix) != 0)
        return RDZV_EINVAL;
    }
    if (inet_pton(AF_INET, item,
                  &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
      ss.ss_family = AF_INET;
      if (prefix < 0)
        prefix = 32;
      if (prefix > 32)
        return RDZV_EINVAL;
    } else if (inet_pton(AF_INET6, item,
                         &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
      ss.ss_family = AF_INET6;
      if (prefix < 0)
        prefix = 128;
    } else {
      return RDZV_EINVAL;
    }
    s->allow[s->nallow].net = ss;
    s->allow[s->nallow].prefix = prefix;
    s->nallow++;
    p += n;
    if (*p == ',')
      p++;
  }
  return 0;
}

static int prefix_match(const uint8_t *a, const uint8_t *b, int bits) {
  int full = bits / 8, rem = bits % 8;
  if (memcmp(a, b, (size_t)full) != 0)
    return 0;
  if (rem == 0)
    return 1;
  return ((a[full] ^ b[full]) & (0xff << (8 - rem))) == 0;
}

/* Is this peer allowed to speak TCPStore (which has no authentication)? */
static int ts_allowed(const srv_t *s, const conn_t *c) {
  const struct sockaddr_storage *pa = &c->peer_addr;
  uint8_t v4[4];
  const uint8_t *v6 = NULL;
  int have4 = 0;
  if (s->token == NULL)
    return 1;
  if (pa->ss_family == AF_UNIX)
    return 1; /* file permissions guard a unix socket */
  if (pa->ss_family == AF_INET) {
    memcpy(v4, &((const struct sockaddr_in *)pa)->sin_addr, 4);
    have4 = 1;
  } else if (pa->ss_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)pa)->sin6_addr;
    v6 = a6->s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6)) {
      memcpy(v4, a6->s6_addr + 12, 4);
      have4 = 1;
    }
  }
  for (int i = 0; i < s->nallow; i++) {
    const struct sockaddr_storage *n = &s->allow[i].net;
    if (n->ss_family == AF_INET && have4 &&
        prefix_match(v4,
                     (const uint8_t *)&((const struct sockaddr_in *)n)->sin_addr,
                     s->allow[i].prefix))
      return 1;
    if (n->ss_family == AF_INET6 && v6 &&
        prefix_match(v6, ((const struct sockaddr_in6 *)n)->sin6_addr.s6_addr,
                     s->allow[i].prefix))
      return 1;
  }
  return 0;
}

/* ---- deadlines: a binary heap of pending native ops -------------------------------- */

static void heap_swap(srv_t *s, size_t a, size_t b) {
  pend_t *t = s->heap[a];
  s->heap[a] = s->heap[b];
  s->heap[b] = t;
  s->heap[a]->heap_idx = a;
  s->heap[b]->heap_idx = b;
}

static void heap_up(srv_t *s, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (s->heap[p]->deadline_ms <= s->heap[i]->deadline_ms)
      break;
    heap_swap(s, i, p);
    i = p;
  }
}

static void heap_down(srv_t *s, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->heap_len && s->heap[l]->deadline_ms < s->heap[m]->deadline_ms)
      m = l;
    if (r < s->heap_len && s->heap[r]->deadline_ms < s->heap[m]->deadline_ms)
      m = r;
    if (m == i)
      break;
    heap_swap(s, i, m);
    i = m;
  }
}

static void timer_cb(uv_timer_t *t);
static void idle_cb(uv_idle_t *h) { (void)h; }
static void conn_start_read(conn_t *c);

static void rearm(srv_t *s) {
  uint64_t now = uv_now(s->loop);
  if (s->closing)
    return;
  if (s->heap_len == 0) {
    uv_timer_stop(&s->timer);
    return;
  }
  uv_timer_start(&s->timer, timer_cb,
                 s->heap[0]->deadline_ms > now ? s->heap[0]->deadline_ms - now
                                               : 0,
                 0);
}

int srv__pend_arm(srv_t *s, pend_t *p, int64_t wait_ms) {
  p->heap_idx = SIZE_MAX;
  if (wait_ms < 0) {
    p->deadline_ms = 0;
    return 0;
  }
  if (s->heap_len == s->heap_cap) {
    size_t ncap = s->heap_cap ? s->heap_cap * 2 : 64;
    pend_t **nh = realloc(s->heap, ncap * sizeof(*nh));
    if (nh == NULL)
      return RDZV_ENOMEM;
    s->heap = nh;
    s->heap_cap = ncap;
  }
  p->deadline_ms = uv_now(s->loop) + (uint64_t)wait_ms;
  p->heap_idx = s->heap_len;
  s->heap[s->heap_len++] = p;
  heap_up(s, p->heap_idx);
  if (p->heap_idx == 0)
    rearm(s);
  return 0;
}

void srv__pend_disarm(srv_t *s, pend_t *p) {
  size_t i = p->heap_idx;
  if (i == SIZE_MAX)
    return;
  p->heap_idx = SIZE_MAX;
  s->heap_len--;
  if (i != s->heap_len) {
    s->heap[i] = s->heap[s->heap_len];
    s->heap[i]->heap_idx = i;
    heap_down(s, i);
    heap_up(s, s->heap[i]->heap_idx);
  }
  if (i == 0)
    rearm(s);
}

static void timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = uv_now(s->loop);
  while (s->heap_len > 0 && s->heap[0]->deadline_ms <= now) {
    pend_t *p = s->heap[0];
    srv__pend_disarm(s, p);
    srv__native_pend_timeout(p);
  }
  rearm(s);
}

/* ---- output -------------------------------------------------------------------------- */

typedef struct wreq_s {
  uv_write_t req;
  conn_t *c;
  char *data;
  size_t len;
} wreq_t;

void srv__mark_dirty(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING || !list_empty(&c->dirty_link))
    return;
  list_insert_tail(&s->dirty, &c->dirty_link);
  /* An active idle handle keeps the loop from blocking in poll before the
   * check handle flushes. */
  if (!uv_is_active((uv_handle_t *)&s->flush_idle))
    uv_idle_start(&s->flush_idle, idle_cb);
}

static void write_cb(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  conn_t *c = w->c;
  c->inflight -= w->len;
  free(w->data);
  free(w);
  if (status < 0 || c->state == CONN_CLOSING)
    return; /* the read side sees the error and closes */
  if (c->close_after_flush && c->inflight == 0) {
    srv__conn_close(c);
    return;
  }
  if (!c->reading && c->inflight < c->srv->cfg.max_out_bytes / 2)
    conn_start_read(c);
}

static void flush_conn(conn_t *c) {
  proto_enc_t *o = &c->out;
  size_t off = 0;
  list_remove(&c->dirty_link);
  if (c->broken) {
    srv__bad_input(c, "could not queue a reply (out of memory); closing");
    srv__conn_close(c);
    return;
  }
  if (c->state == CONN_CLOSING)
    return;
  if (o->len == 0) {
    if (c->close_after_flush && c->inflight == 0)
      srv__conn_close(c);
    return;
  }
  if (c->inflight == 0) {
    uv_buf_t b = uv_buf_init(o->data, (unsigned)o->len);
    int r = uv_try_write(&c->h.stream, &b, 1);
    if (r > 0)
      off = (size_t)r;
    else if (r < 0 && r != UV_EAGAIN) {
      srv__conn_close(c);
      return;
    }
  }
  if (off < o->len) {
    wreq_t *w = malloc(sizeof(*w));
    uv_buf_t b;
    if (w == NULL) {
      srv__conn_close(c);
      return;
    }
    w->c = c;
    if (off == 0) {
      /* Hand the buffer itself to the write; start a fresh one. */
      w->data = o->data;
      w->len = o->len;
      o->data = NULL;
      o->cap = 0;
    } else {
      w->len = o->len - off;
      w->data = malloc(w->len);
      if (w->data == NULL) {
        free(w);
        srv__conn_close(c);
        return;
      }
      memcpy(w->data, o->data + off, w->len);
    }
    b = uv_buf_init(w->data, (unsigned)w->len);
    if (uv_write(&w->req, &c->h.stream, &b, 1, write_cb) != 0) {
      free(w->data);
      free(w);
      srv__conn_close(c);
      return;
    }
    c->inflight += w->len;
    if (c->inflight > c->srv->cfg.max_out_bytes && c->reading) {
      /* The peer does not read its replies: stop reading its requests
       * until it catches up, so that it cannot grow our memory. */
      uv_read_stop(&c->h.stream);
      c->reading = 0;
    }
  }
  proto_enc_reset(o);
  if (o->cap > IN_KEEP_MAX) {
    proto_enc_destroy(o);
    proto_enc_init(o);
  }
  if (c->close_after_flush && c->inflight == 0)
    srv__conn_close(c);
}

static void check_cb(uv_check_t *h) {
  srv_t *s = h->data;
  while (!list_empty(&s->dirty))
    flush_conn(LIST_ENTRY(s->dirty.next, conn_t, dirty_link));
  uv_idle_stop(&s->flush_idle);
}

/* ---- input ------------------------------------------------------------------------- */

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn_t *c = h->data;
  size_t limit = (size_t)c->srv->cfg.max_frame + 64;
  (void)hint;
  if (c->in_cap - c->in_len < IN_CHUNK && c->in_cap < limit) {
    size_t ncap = c->in_cap ? c->in_cap * 2 : IN_CHUNK;
    uint8_t *nb;
    if (ncap > limit)
      ncap = limit;
    /* All connections together may buffer max_in_bytes of unfinished
     * requests; past that, a connection cannot grow (and is closed), so
     * that stalled half-sent requests cannot exhaust memory. */
    if (c->srv->stats.in_bytes + (ncap - c->in_cap) > c->srv->cfg.max_in_bytes &&
        c->in_cap >= IN_CHUNK) {
      c->in_full = 1;
    } else if ((nb = realloc(c->in, ncap)) != NULL) {
      c->srv->stats.in_bytes += ncap - c->in_cap;
      c->in = nb;
      c->in_cap = ncap;
    }
  }
  if (c->in_cap == c->in_len) {
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
    return;
  }
  *buf = uv_buf_init((char *)c->in + c->in_len,
                     (unsigned)(c->in_cap - c->in_len));
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = st->data;
  (void)buf;
  if (nread == UV_ENOBUFS) {
    if (c->in_full)
      srv__bad_input(c, "server input budget (%zu bytes buffered for "
                        "unfinished requests) exhausted; closing",
                     c->srv->cfg.max_in_bytes);
    else
      srv__bad_input(c, "request larger than the %u-byte limit",
                     c->srv->cfg.max_frame);
    srv__conn_close(c);
    return;
  }
  if (nread < 0) {
    srv__conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  c->in_len += (size_t)nread;
  conn_process(c);
}

static void conn_start_read(conn_t *c) {
  if (!c->reading && c->state != CONN_CLOSING &&
      uv_read_start(&c->h.stream, alloc_cb, read_cb) == 0)
    c->reading = 1;
}

void srv__bad_input(conn_t *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  srv_t *s = c->srv;
  uint64_t now = uv_now(s->loop);
  s->stats.bad_input++;
  if (c->bad_logged)
    return;
  c->bad_logged = 1;
  /* A port scan must not flood the log: at most 20 lines a second, then a
   * count of what was left out. */
  if (now - s->bad_window_ms >= 1000) {
    if (s->bad_suppressed > 0)
      LU_WARN(&s->log, "%llu more connections with bad input in the last "
                       "second were not logged",
              (unsigned long long)s->bad_suppressed);
    s->bad_window_ms = now;
    s->bad_in_window = 0;
    s->bad_suppressed = 0;
  }
  if (++s->bad_in_window > 20) {
    s->bad_suppressed++;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_WARN(&c->srv->log, "connection %llu from %s: %s",
          (unsigned long long)c->id, c->peer, msg);
}

/* Decide the protocol from the first bytes. RET bytes consumed, 0 when
 * more are needed, -1 to close. */
static ssize_t sniff(conn_t *c) {
  const uint8_t *b = c->in;
  size_t n = c->in_len;
  srv_t *s = c->srv;
  static const uint8_t ts_magic[4] = {0xCE, 0xF7, 0x85, 0x3C};

  if (b[0] == 'R') {
    if (n < PROTO_MAGIC_LEN)
      return memcmp(b, PROTO_MAGIC, n) == 0 ? 0 : -1;
    if (memcmp(b, PROTO_MAGIC, PROTO_MAGIC_LEN) != 0) {
      srv__bad_input(c, "unknown protocol (first bytes are not \"RDZV\" nor "
                        "a TCPStore request)");
      return -1;
    }
    c->state = CONN_HELLO;
    srv__native_hello_challenge(c);
    return PROTO_MAGIC_LEN;
  }
  if (b[0] > 18) {
    srv__bad_input(c, "unknown protocol (first byte 0x%02x): neither a "
                      "launch nor a TCPStore client; closing", b[0]);
    return -1;
  }
  if (b[0] == 0 && n < 5) {
    /* VALIDATE (2.x) and SET (1.13) share byte 0: the magic decides. A
     * 1.13 SET here would carry a key length of over 1 GB, so the two
     * cannot be confused. */
    return 0;
  }
  if (!ts_allowed(s, c)) {
    srv__bad_input(c, "TCPStore client refused: this server requires a token "
                      "and TCPStore has no authentication (allow trusted "
                      "addresses with --tcpstore-allow)");
    return -1;
  }
  c->job = srv__job(s, s->tcpstore_job, strlen(s->tcpstore_job));
  if (c->job == NULL) {
    srv__bad_input(c, "cannot create the TCPStore job (max jobs reached)");
    return -1;
  }
  c->job->nconns++;
  lu_strlcpy(c->role, "tcpstore", sizeof(c->role));
  c->state = CONN_TS;
  if (b[0] == 0 && memcmp(b + 1, ts_magic, 4) == 0) {
    c->ts_dialect = TS_DIALECT_V2;
    return 5;
  }
  if (b[0] > 8) {
    srv__bad_input(c, "TCPStore request without VALIDATE (opcode %u): a 2.x "
                      "client must validate first, and 1.13 has no such op",
                   b[0]);
    return -1;
  }
  c->ts_dialect = TS_DIALECT_V1;
  return 0;
}

static void conn_process(conn_t *c) {
  size_t off = 0;
  srv_t *s = c->srv;
  while (off < c->in_len && c->state != CONN_CLOSING &&
         !c->close_after_flush) {
    const uint8_t *b = c->in + off;
    size_t n = c->in_len - off;
    if (c->state == CONN_SNIFF) {
      ssize_t k;
      /* sniff() reads c->in from its start; off is 0 in this state. */
      k = sniff(c);
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (k == 0 && c->state == CONN_SNIFF)
        break;
      off += (size_t)k;
    } else if (c->state == CONN_TS) {
      ssize_t k = srv__ts_input(c, b, n);
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (k == 0)
        break;
      off += (size_t)k;
    } else {
      uint32_t len;
      if (n < PROTO_HDR)
        break;
      len = proto_get_len(b);
      if (len > s->cfg.max_frame) {
        srv__bad_input(c, "frame of %u bytes exceeds the %u-byte limit", len,
                       s->cfg.max_frame);
        srv__conn_close(c);
        return;
      }
      if (n - PROTO_HDR < len)
        break;
      s->stats.requests++;
      srv__native_frame(c, b + PROTO_HDR, len);
      off += PROTO_HDR + len;
    }
  }
  if (c->state == CONN_CLOSING)
    return;
  if (off > 0) {
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  if (c->in_len == 0 && c->in_cap > IN_KEEP_MAX) {
    s->stats.in_bytes -= c->in_cap;
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
  }
}

/* ---- connections -------------------------------------------------------------------- */

static void maybe_finish_close(srv_t *s);

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->srv;
  s->stats.in_bytes -= c->in_cap;
  free(c->in);
  proto_enc_destroy(&c->out);
  c->magic = 0;
  free(c);
  /* srv_close waits for connections closed before it, too. */
  s->closing_conns--;
  if (s->closing)
    maybe_finish_close(s);
}

void srv__conn_close(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING)
    return;
  c->state = CONN_CLOSING;
  if (c->job)
    c->job->nconns--;
  srv__native_conn_closed(c);
  srv__ts_conn_closed(c);
  if (!list_empty(&c->dirty_link))
    list_remove(&c->dirty_link);
  list_remove(&c->link);
  s->stats.conns_open--;
  s->closing_conns++;
  uv_close(&c->h.handle, on_conn_closed);
}

static void peer_name(conn_t *c) {
  int len = sizeof(c->peer_addr);
  memset(&c->peer_addr, 0, sizeof(c->peer_addr));
  if (c->h.handle.type == UV_NAMED_PIPE) {
    c->peer_addr.ss_family = AF_UNIX;
    lu_strlcpy(c->peer, "unix socket", sizeof(c->peer));
    return;
  }
  if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&c->peer_addr, &len) !=
      0) {
    lu_strlcpy(c->peer, "unknown peer", sizeof(c->peer));
    return;
  }
  if (c->peer_addr.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&c->peer_addr;
    char ip[INET_ADDRSTRLEN];
    uv_ip4_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, ntohs(a->sin_port));
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&c->peer_addr;
    char ip[INET6_ADDRSTRLEN];
    uv_ip6_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "[%s]:%d", ip, ntohs(a->sin6_port));
  }
}

static void on_refused_closed(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *server, int status) {
  srv_t *s = server->data;
  conn_t *c;
  int is_pipe = server->type == UV_NAMED_PIPE;
  if (status < 0) {
    LU_WARN(&s->log, "accept failed: %s", uv_strerror(status));
    return;
  }
  if (s->stats.conns_open >= s->cfg.max_conns) {
    /* Accept and close at once, so that the backlog does not fill. */
    uv_tcp_t *t = malloc(sizeof(*t));
    uint64_t now = uv_now(s->loop);
    s->stats.conns_refused++;
    if (now - s->refused_log_ms > 5000) {
      s->refused_log_ms = now;
      LU_WARN(&s->log, "connection refused: %u connections open, the limit "
                       "(raise it with --max-conns)", s->cfg.max_conns);
    }
    if (t == NULL)
      return;
    if (is_pipe)
      uv_pipe_init(s->loop, (uv_pipe_t *)t, 0);
    else
      uv_tcp_init(s->loop, t);
    uv_accept(server, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, on_refused_closed);
    return;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL)
    return;
  c->magic = CONN_MAGIC;
  c->srv = s;
  c->id = ++s->next_conn_id;
  list_init(&c->link);
  list_init(&c->dirty_link);
  list_init(&c->pends);
  proto_enc_init(&c->out);
  if (is_pipe)
    uv_pipe_init(s->loop, &c->h.pipe, 0);
  else
    uv_tcp_init(s->loop, &c->h.tcp);
  c->h.handle.data = c;
  if (uv_accept(server, &c->h.stream) != 0) {
    uv_close(&c->h.handle, on_conn_closed);
    return;
  }
  if (!is_pipe)
    uv_tcp_nodelay(&c->h.tcp, 1);
  peer_name(c);
  list_insert_tail(&s->conns, &c->link);
  s->stats.conns_open++;
  s->stats.conns_total++;
  conn_start_read(c);
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static char *dup_or_null(const char *p) { return p ? strdup(p) : NULL; }

int srv_new(uv_loop_t *loop, const srv_config_t *cfg, srv_t **out) {
  srv_t *s;
  proto_limits_t pl = PROTO_LIMITS_DEFAULT;
  if (cfg == NULL || cfg->size < sizeof(srv_config_t) || cfg->version != 1)
    return RDZV_EINVAL;
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return RDZV_ENOMEM;
  s->magic = SRV_MAGIC;
  s->loop = loop;
  s->cfg = *cfg;
  if (cfg->log)
    s->log = *cfg->log;
  else
    lu_log_init(&s->log, "launch server");
  s->host = dup_or_null(cfg->host);
  s->unix_path = dup_or_null(cfg->unix_path);
  s->tcpstore_job = strdup(cfg->tcpstore_job ? cfg->tcpstore_job : "default");
  if (cfg->token != NULL && cfg->token_len > 0) {
    s->token = malloc(cfg->token_len);
    if (s->token)
      memcpy(s->token, cfg->token, cfg->token_len);
  }
  s->cfg.host = s->host;
  s->cfg.unix_path = s->unix_path;
  s->cfg.tcpstore_job = s->tcpstore_job;
  s->cfg.token = s->token;
  s->cfg.tcpstore_allow = NULL;
  s->cfg.log = NULL;
  if (s->tcpstore_job == NULL || (cfg->token && cfg->token_len && !s->token) ||
      (cfg->host && !s->host) || (cfg->unix_path && !s->unix_path)) {
    free(s->host);
    free(s->unix_path);
    free(s->tcpstore_job);
    free(s->token);
    free(s);
    return RDZV_ENOMEM;
  }
  if (cfg->tcpstore_allow && parse_allow(s, cfg->tcpstore_allow) != 0) {
    LU_ERR(&s->log, "--tcpstore-allow '%s' does not parse: give addresses or "
                    "CIDR ranges separated by commas (127.0.0.0/8,::1)",
           cfg->tcpstore_allow);
    free(s->host);
    free(s->unix_path);
    free(s->tcpstore_job);
    free(s->token);
    free(s);
    return RDZV_EINVAL;
  }
  pl.max_frame = cfg->max_frame;
  pl.max_items = cfg->max_keys * 2 + 64;
  s->plim = pl;
  s->tlim.max_key = cfg->max_key;
  s->tlim.max_value = cfg->max_value;
  s->tlim.max_keys = cfg->max_keys;
  s->tlim.max_request = cfg->max_frame;
  list_init(&s->conns);
  list_init(&s->dirty);
  uv_check_init(loop, &s->flush_check);
  s->flush_check.data = s;
  uv_check_start(&s->flush_check, check_cb);
  uv_unref((uv_handle_t *)&s->flush_check);
  uv_idle_init(loop, &s->flush_idle);
  s->flush_idle.data = s;
  uv_timer_init(loop, &s->timer);
  s->timer.data = s;
  uv_unref((uv_handle_t *)&s->timer);
  uv_timer_init(loop, &s->rdv_timer);
  s->rdv_timer.data = s;
  uv_unref((uv_handle_t *)&s->rdv_timer);
  *out = s;
  return 0;
}

static int listen_tcp(srv_t *s, const struct sockaddr *sa, unsigned flags) {
  uv_tcp_t *t;
  int r;
  if (s->ntcp >= (int)LU_ARRAY_SIZE(s->tcp))
    return UV_EMFILE;
  t = &s->tcp[s->ntcp];
  uv_tcp_init(s->loop, t);
  t->data = s;
  s->ntcp++;
  r = uv_tcp_bind(t, sa, flags);
  if (r == 0)
    r = uv_listen((uv_stream_t *)t, SOMAXCONN > 4096 ? SOMAXCONN : 4096,
                  on_connection);
  if (r != 0) {
    /* The slot stays taken (srv_close closes it): a handle's memory cannot
     * be reused before its close callback has run. */
    return r;
  }
  if (s->port == 0) {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len);
    s->port = ntohs(ss.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&ss)->sin_port
                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  return 0;
}

int srv_listen(srv_t *s) {
  int r = 0;
  s->port = 0;
  if (s->host == NULL || s->host[0] == '\0' || strcmp(s->host, "::") == 0 ||
      strcmp(s->host, "*") == 0) {
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    uv_ip6_addr("::", s->cfg.port, &a6);
    /* Dual stack: IPv6 any with v4-mapped addresses; IPv4 alone where the
     * host has no IPv6. */
    r = listen_tcp(s, (const struct sockaddr *)&a6, 0);
    if (r != 0) {
      uv_ip4_addr("0.0.0.0", s->cfg.port, &a4);
      r = listen_tcp(s, (const struct sockaddr *)&a4, 0);
    }
  } else {
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int first = 1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", s->cfg.port);
    r = getaddrinfo(s->host, portstr, &hints, &res);
    if (r != 0) {
      LU_ERR(&s->log, "cannot resolve listen address '%s': %s", s->host,
             gai_strerror(r));
      return RDZV_ERESOLVE;
    }
    r = UV_EADDRNOTAVAIL;
    for (ai = res; ai && s->ntcp < (int)LU_ARRAY_SIZE(s->tcp); ai = ai->ai_next) {
      int rr;
      if (!first) {
        /* Every address of the host shares the first one's port. */
        if (ai->ai_family == AF_INET)
          ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons(s->port);
        else
          ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons(s->port);
      }
      rr = listen_tcp(s, ai->ai_addr,
                      ai->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
      if (rr == 0) {
        first = 0;
        r = 0;
      } else if (first) {
        r = rr;
      }
    }
    freeaddrinfo(res);
  }
  if (r != 0)
    return r;
  if (s->unix_path) {
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->has_unix = 1;
    unlink(s->unix_path);
    r = uv_pipe_bind(&s->unix_listener, s->unix_path);
    if (r == 0)
      r = uv_listen((uv_stream_t *)&s->unix_listener, 4096, on_connection);
    if (r != 0)
      return r;
  }
  return 0;
}

int srv_port(const srv_t *s) { return s->port; }

void srv_get_stats(const srv_t *s, srv_stats_t *st) { *st = s->stats; }

static void free_all(srv_t *s) {
  job_t *j = s->jobs;
  while (j) {
    job_t *n = j->next;
    if (s->rdv_job_free)
      s->rdv_job_free(j);
    store_free(j->store);
    free(j);
    j = n;
  }
  free(s->heap);
  free(s->host);
  free(s->unix_path);
  free(s->tcpstore_job);
  free(s->token);
  s->magic = 0;
  free(s);
}

static void maybe_finish_close(srv_t *s) {
  if (s->pending_closes == 0 && s->closing_conns == 0 && s->closing == 1) {
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    s->closing = 2;
    free_all(s);
    if (cb)
      cb(arg);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  srv_t *s = h->data;
  s->pending_closes--;
  maybe_finish_close(s);
}

static void on_conn_closed_final(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->srv;
  s->stats.in_bytes -= c->in_cap;
  free(c->in);
  proto_enc_destroy(&c->out);
  free(c);
  s->pending_closes--;
  maybe_finish_close(s);
}

void srv_close(srv_t *s, void (*cb)(void *arg), void *arg) {
  assert(s->magic == SRV_MAGIC);
  if (s->closing)
    return;
  s->close_cb = cb;
  s->close_arg = arg;
  /* Hold one count while closing so that no callback finishes early. */
  s->pending_closes = 1;
  s->closing = 1;
  while (!list_empty(&s->conns)) {
    conn_t *c = LIST_ENTRY(s->conns.next, conn_t, link);
    c->state = CONN_CLOSING;
    srv__native_conn_closed(c);
    srv__ts_conn_closed(c);
    if (!list_empty(&c->dirty_link))
      list_remove(&c->dirty_link);
    list_remove(&c->link);
    s->pending_closes++;
    uv_close(&c->h.handle, on_conn_closed_final);
  }
  for (int i = 0; i < s->ntcp; i++) {
    s->pending_closes++;
    uv_close((uv_handle_t *)&s->tcp[i], on_handle_closed);
  }
  if (s->has_unix) {
    s->pending_closes++;
    uv_close((uv_handle_t *)&s->unix_listener, on_handle_closed);
    unlink(s->unix_path);
  }
  s->pending_closes += 4;
  uv_close((uv_handle_t *)&s->flush_check, on_handle_closed);
  uv_close((uv_handle_t *)&s->flush_idle, on_handle_closed);
  uv_close((uv_handle_t *)&s->timer, on_handle_closed);
  uv_close((uv_handle_t *)&s->rdv_timer, on_handle_closed);
  s->pending_closes--;
  maybe_finish_close(s);
}
