/* aclient.c - asynchronous native-protocol client on a libuv loop, with
 * TLS over memory BIOs and a watchdog for a server that stops answering. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "aclient.h"
#include "lu.h"
#include "tls.h"

enum { AC_IDLE, AC_RESOLVING, AC_CONNECTING, AC_TLS, AC_CHALLENGE, AC_HELLO,
       AC_READY, AC_CLOSED };

typedef struct ac_pend_s {
  struct ac_pend_s *next;
  uint64_t id;
  uint64_t sent_ms;
  ac_reply_cb cb;
  void *arg;
} ac_pend_t;

typedef struct ac_wreq_s {
  uv_write_t req;
  char *data;
} ac_wreq_t;

struct ac_s {
  uv_loop_t *loop;
  uv_tcp_t tcp;
  int tcp_open;
  uv_timer_t retry;
  uv_timer_t watch;      /* reply watchdog */
  uv_timer_t ctimer;     /* one connect attempt's deadline */
  int ctimed_out;        /* it fired: the attempt is being closed */
  char why[320];         /* why the last attempt failed, one clause */
  int attempts;
  int refused;           /* the last attempt was refused (a live machine,
                            nothing listening), not unanswered */
  int all_refused;       /* every attempt so far was refused */
  int64_t refused_limit_ms; /* give up after this while all_refused; < 0 none */
  uint64_t refused_due;  /* ac_connect's uv_now() + refused_limit_ms */
  int refused_out;       /* connect gave up at refused_limit_ms */
  int hello_waits;       /* the handshake may last until the deadline */
  uint64_t watch_due;    /* when the watchdog should have run */
  uint64_t last_rx_ms;   /* last bytes from the server */
  uint64_t connected_ms; /* the handshake started */
  int reply_timeout_ms;
  tls_ctx_t *tls_ctx;
  tls_t *tls;
  char *cbuf; /* ciphertext read buffer */
  uv_getaddrinfo_t gai;
  uv_connect_t creq;
  int state;
  char *host, *local_addr, *job, *role;
  uint8_t *token;
  size_t token_len;
  int port;
  int connect_timeout_ms;
  uint64_t deadline;
  int backoff_ms;
  lu_log_t log;
  ac_push_cb on_push;
  ac_lost_cb on_lost;
  ac_connect_cb on_connect;
  void *arg;
  uint64_t next_id, hello_id;
  proto_enc_t enc;
  uint8_t *in;
  size_t in_len, in_cap;
  proto_limits_t lim;
  ac_pend_t *pend;
  proto_hello_t hello;
  char local_ip[INET6_ADDRSTRLEN];
  char last_error[512];
  int closing, pending_closes;
  int retry_after_close;
  int resolving; /* a uv_getaddrinfo is in flight */
  void (*close_cb)(void *);
  void *close_arg;
};

static void start_connect(ac_t *a);

static char *sdup(const char *s) { return s ? strdup(s) : NULL; }

int ac_new(uv_loop_t *loop, const ac_config_t *cfg, ac_push_cb on_push,
           ac_lost_cb on_lost, void *arg, ac_t **out) {
  ac_t *a = calloc(1, sizeof(*a));
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  if (a == NULL)
    return RDZV_ENOMEM;
  a->loop = loop;
  a->host = sdup(cfg->host);
  a->local_addr = sdup(cfg->local_addr ? cfg->local_addr : "");
  a->job = sdup(cfg->job ? cfg->job : "default");
  a->role = sdup(cfg->role ? cfg->role : "agent");
  a->port = cfg->port;
  a->connect_timeout_ms = cfg->connect_timeout_ms;
  a->refused_limit_ms = -1;
  a->reply_timeout_ms = cfg->reply_timeout_ms;
  if (cfg->token && cfg->token_len) {
    a->token = malloc(cfg->token_len);
    if (a->token)
      memcpy(a->token, cfg->token, cfg->token_len);
    a->token_len = cfg->token_len;
  }
  if (cfg->log)
    a->log = *cfg->log;
  else
    lu_log_init(&a->log, "launch agent");
  lim.max_frame = 64u << 20;
  lim.max_items = 1u << 22;
  a->lim = lim;
  a->on_push = on_push;
  a->on_lost = on_lost;
  a->arg = arg;
  proto_enc_init(&a->enc);
  uv_timer_init(loop, &a->retry);
  uv_timer_init(loop, &a->watch);
  uv_timer_init(loop, &a->ctimer);
  a->retry.data = a->watch.data = a->ctimer.data = a;
  if (!a->host || !a->local_addr || !a->job || !a->role ||
      (cfg->token && cfg->token_len && !a->token)) {
    /* The timers are initialised: free through the normal close. */
    a->state = AC_CLOSED;
    ac_close(a, NULL, NULL);
    return RDZV_ENOMEM;
  }
  if (cfg->tls_ca || cfg->tls_cert) {
    tls_files_t f = {cfg->tls_cert, cfg->tls_key, cfg->tls_ca};
    int rc = tls_ctx_new(0, &f, &a->tls_ctx, a->last_error,
                         sizeof(a->last_error));
    if (rc != 0) {
      LU_ERR(&a->log, "%s", a->last_error);
      a->state = AC_CLOSED;
      ac_close(a, NULL, NULL);
      return rc;
    }
  }
  a->hello.job = a->job;
  a->hello.role = a->role;
  a->hello.token = a->token;
  a->hello.token_len = a->token_len;
  *out = a;
  return 0;
}

const char *ac_local_ip(const ac_t *a) { return a->local_ip; }
const char *ac_last_error(const ac_t *a) { return a->last_error; }

const char *ac_wait_reason(const ac_t *a, int *attempts) {
  if (attempts)
    *attempts = a->attempts;
  return a->why;
}

int ac_wait_refused(const ac_t *a) { return a->refused; }

void ac_set_refused_limit(ac_t *a, int64_t ms) { a->refused_limit_ms = ms; }

int ac_refused_out(const ac_t *a) { return a->refused_out; }

void ac_set_hello_waits(ac_t *a) { a->hello_waits = 1; }

/* A failed connect as the user can act on it. */
static void connect_reason(ac_t *a, int status) {
  switch (status) {
  case UV_ECONNREFUSED:
    snprintf(a->why, sizeof(a->why), "connection refused (nothing listens "
             "on port %d there: no agent hosts the server yet, or another "
             "port)", a->port);
    break;
  case UV_ENETUNREACH:
  case UV_EHOSTUNREACH:
    snprintf(a->why, sizeof(a->why), "no route to host (%s)",
             uv_strerror(status));
    break;
  case UV_ETIMEDOUT:
    snprintf(a->why, sizeof(a->why), "timed out (no answer: a firewall, or "
             "the wrong address)");
    break;
  case UV_EADDRNOTAVAIL:
    snprintf(a->why, sizeof(a->why), "address not available (is --local-addr "
             "an address of this node?)");
    break;
  default:
    snprintf(a->why, sizeof(a->why), "%s", uv_strerror(status));
  }
}

/* ---- output --------------------------------------------------------------------- */

static void write_cb(uv_write_t *req, int status) {
  ac_wreq_t *w = (ac_wreq_t *)req;
  (void)status; /* a broken connection shows up on the read side */
  free(w->data);
  free(w);
}

/* Write data (the write owns it) to the socket. */
static int write_owned(ac_t *a, char *data, size_t len) {
  ac_wreq_t *w;
  uv_buf_t b;
  int r;
  if ((w = malloc(sizeof(*w))) == NULL) {
    free(data);
    return RDZV_ENOMEM;
  }
  w->data = data;
  b = uv_buf_init(data, (unsigned)len);
  r = uv_write(&w->req, (uv_stream_t *)&a->tcp, &b, 1, write_cb);
  if (r != 0) {
    free(w->data);
    free(w);
    return r;
  }
  return 0;
}

/* Send the ciphertext TLS has ready. */
static int flush_tls(ac_t *a) {
  char *ct;
  size_t n;
  if (tls_take(a->tls, &ct, &n) != 0)
    return RDZV_ENOMEM;
  return n ? write_owned(a, ct, n) : 0;
}

static int flush(ac_t *a) {
  char *data = a->enc.data;
  size_t len = a->enc.len;
  if (len == 0)
    return 0;
  if (a->tls) {
    int rc = tls_write(a->tls, data, len);
    proto_enc_reset(&a->enc);
    return rc != 0 ? rc : flush_tls(a);
  }
  a->enc.data = NULL; /* the write owns the buffer */
  a->enc.cap = a->enc.len = 0;
  return write_owned(a, data, len);
}

msgpack_packer *ac_begin(ac_t *a, int op, uint32_t nargs) {
  proto_enc_begin(&a->enc, 3 + nargs);
  msgpack_pack_uint8(&a->enc.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&a->enc.pk, ++a->next_id);
  msgpack_pack_int64(&a->enc.pk, op);
  return &a->enc.pk;
}

/* End the request ac_begin started. RET 0 or an error (nothing sent). */
static int end_request(ac_t *a) {
  int rc = proto_enc_end(&a->enc);
  if (rc != 0)
    return rc;
  if (a->state != AC_READY && a->state != AC_HELLO) {
    proto_enc_reset(&a->enc);
    return RDZV_ECLOSED;
  }
  return 0;
}

int ac_send_noreply(ac_t *a) {
  int rc = end_request(a);
  return rc != 0 ? rc : flush(a);
}

uint64_t ac_last_rx_ms(const ac_t *a) { return a->last_rx_ms; }

int ac_send(ac_t *a, ac_reply_cb cb, void *arg) {
  ac_pend_t *p;
  int rc = end_request(a);
  if (rc != 0)
    return rc;
  if ((p = calloc(1, sizeof(*p))) == NULL)
    return RDZV_ENOMEM;
  p->id = a->next_id;
  p->sent_ms = uv_now(a->loop);
  p->cb = cb;
  p->arg = arg;
  if ((rc = flush(a)) != 0) {
    free(p);
    return rc;
  }
  p->next = a->pend;
  a->pend = p;
  return 0;
}

/* ---- teardown ---------------------------------------------------------------------- */

static void fail_pending(ac_t *a, int status) {
  while (a->pend) {
    ac_pend_t *p = a->pend;
    a->pend = p->next;
    if (p->cb)
      p->cb(a, status, NULL, p->arg);
    free(p);
  }
}

static void retry_or_fail(ac_t *a, int status, const char *what);
static void finish_close(ac_t *a);

/* Every close of the TCP handle ends here: free the client when it is
 * being closed, or retry a failed connect with a fresh handle. */
static void on_tcp_closed(uv_handle_t *h) {
  ac_t *a = h->data;
  a->tcp_open = 0;
  if (a->closing) {
    if (--a->pending_closes == 0)
      finish_close(a);
    return;
  }
  if (a->retry_after_close) {
    a->retry_after_close = 0;
    retry_or_fail(a, -ECONNREFUSED, a->why);
  }
}

static void close_tcp(ac_t *a, int retry) {
  a->retry_after_close = retry;
  if (a->tcp_open && !uv_is_closing((uv_handle_t *)&a->tcp))
    uv_close((uv_handle_t *)&a->tcp, on_tcp_closed);
}

/* The connection broke: fail requests, tell the owner. */
static void broken(ac_t *a, int status, const char *why) {
  int was_ready = a->state == AC_READY;
  if (a->state == AC_CLOSED)
    return;
  snprintf(a->last_error, sizeof(a->last_error), "%s", why);
  a->state = AC_CLOSED;
  uv_timer_stop(&a->watch);
  close_tcp(a, 0);
  fail_pending(a, status);
  if (was_ready) {
    if (a->on_lost)
      a->on_lost(a, status, a->arg);
  } else if (a->on_connect) {
    ac_connect_cb cb = a->on_connect;
    a->on_connect = NULL;
    cb(a, status, a->arg);
  }
}

/* ---- input ----------------------------------------------------------------------------- */

static void hello_reply(ac_t *a, int status, const proto_msg_t *m, void *arg) {
  ac_connect_cb cb = a->on_connect;
  char err[256], why[400];
  (void)arg;
  if (status == 0 && proto_hello_reply(&a->hello, m, err, sizeof(err)) != 0) {
    snprintf(why, sizeof(why), "the server %s", err);
    broken(a, RDZV_EAUTH, why);
    return;
  }
  if (status != 0) {
    const char *msg;
    size_t n;
    if (m && proto_arg_bytes(m, 0, &msg, &n) == 0)
      snprintf(a->last_error, sizeof(a->last_error), "%.*s", (int)n, msg);
    a->on_connect = NULL;
    a->state = AC_CLOSED;
    uv_timer_stop(&a->watch);
    close_tcp(a, 0);
    if (cb)
      cb(a, status, a->arg);
    return;
  }
  a->state = AC_READY;
  a->on_connect = NULL;
  if (cb)
    cb(a, 0, a->arg);
}

static void on_challenge(ac_t *a, const proto_msg_t *m) {
  char err[256], why[400];
  int rc = proto_hello_challenge(&a->hello, m, err, sizeof(err));
  if (rc != 0) {
    snprintf(why, sizeof(why), "the server at %s:%d %s", a->host, a->port,
             err);
    broken(a, rc, why);
    return;
  }
  a->state = AC_HELLO;
  proto_hello_pack(&a->hello, ac_begin(a, PROTO_OP_HELLO, 5));
  if (ac_send(a, hello_reply, NULL) != 0)
    broken(a, RDZV_ECLOSED, "cannot send HELLO");
}

static void dispatch(ac_t *a, const proto_msg_t *m) {
  ac_pend_t **pp;
  if (a->state == AC_CHALLENGE) {
    on_challenge(a, m);
    return;
  }
  if (m->kind == PROTO_PUSH) {
    if (a->on_push)
      a->on_push(a, m, a->arg);
    return;
  }
  if (m->kind != PROTO_REPLY)
    return;
  for (pp = &a->pend; *pp; pp = &(*pp)->next)
    if ((*pp)->id == m->id) {
      ac_pend_t *p = *pp;
      *pp = p->next;
      int status = proto_status(m->op);
      if (status == RDZV_EPROTO && m->op != RDZV_EPROTO) {
        snprintf(a->last_error, sizeof(a->last_error), "the server answered "
                 "with status %lld, not an error code (not a launch server, "
                 "or another protocol)", (long long)m->op);
      } else if (m->op != 0) {
        const char *msg;
        size_t n;
        if (proto_arg_bytes(m, 0, &msg, &n) == 0)
          snprintf(a->last_error, sizeof(a->last_error), "%.*s", (int)n, msg);
      }
      if (p->cb)
        p->cb(a, status, m, p->arg);
      free(p);
      return;
    }
}

/* Room for 4 KiB more in the input buffer. RET 0 or RDZV_ENOMEM. */
static int in_grow(ac_t *a) {
  if (a->in_cap - a->in_len < 4096) {
    size_t ncap = a->in_cap ? a->in_cap * 2 : 16384;
    uint8_t *nb = realloc(a->in, ncap);
    if (nb == NULL)
      return RDZV_ENOMEM;
    a->in = nb;
    a->in_cap = ncap;
  }
  return 0;
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  ac_t *a = h->data;
  (void)hint;
  if (a->tls) {
    *buf = uv_buf_init(a->cbuf, a->cbuf ? 65536 : 0);
    return;
  }
  if (a->in_cap - a->in_len < 4096) {
    size_t ncap = a->in_cap ? a->in_cap * 2 : 16384;
    uint8_t *nb = realloc(a->in, ncap);
    if (nb == NULL) {
      *buf = uv_buf_init(NULL, 0);
      return;
    }
    a->in = nb;
    a->in_cap = ncap;
  }
  *buf = uv_buf_init((char *)a->in + a->in_len, (unsigned)(a->in_cap - a->in_len));
}

static void send_magic(ac_t *a) {
  a->state = AC_CHALLENGE;
  if (proto_enc_raw(&a->enc, PROTO_MAGIC, PROTO_MAGIC_LEN) != 0 ||
      flush(a) != 0)
    broken(a, RDZV_ECLOSED, "cannot send");
}

/* Feed ciphertext, run the handshake, decrypt into a->in.
 * RET 0, or -1 when the connection broke. */
static int tls_input(ac_t *a, const char *p, size_t n) {
  char why[700];
  if (tls_feed(a->tls, p, n) != 0) {
    broken(a, RDZV_ENOMEM, "out of memory");
    return -1;
  }
  for (;;) {
    ssize_t r;
    if (in_grow(a) != 0) {
      broken(a, RDZV_ENOMEM, "out of memory");
      return -1;
    }
    r = tls_read(a->tls, a->in + a->in_len, a->in_cap - a->in_len);
    if (tls_out_pending(a->tls) && flush_tls(a) != 0) {
      broken(a, RDZV_ECLOSED, "cannot send");
      return -1;
    }
    if (r < 0) {
      snprintf(why, sizeof(why), "rendezvous server %s:%d: %s", a->host,
               a->port, r == RDZV_ECLOSED ? "closed the TLS session"
                                          : tls_error(a->tls));
      broken(a, (int)r, why);
      return -1;
    }
    if (a->state == AC_TLS && tls_established(a->tls)) {
      send_magic(a);
      if (a->state == AC_CLOSED)
        return -1;
    }
    if (r == 0)
      return 0;
    a->in_len += (size_t)r;
  }
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  ac_t *a = st->data;
  size_t off = 0;
  if (nread < 0) {
    char why[400];
    const char *what = nread == UV_EOF ? "closed by the server"
                                       : uv_strerror((int)nread);
    if (a->state == AC_TLS)
      what = "closed during the TLS handshake: does the server speak TLS "
             "(launch server --tls-cert)?";
    else if (a->tls && a->state == AC_CHALLENGE)
      what = "closed after the TLS handshake: the server may require a "
             "client certificate (--tls-cert, --tls-key) signed by its CA";
    else if (a->state == AC_CHALLENGE)
      what = "closed before its challenge: the server may require TLS "
             "(--tls-ca), or refuse this node's address";
    snprintf(why, sizeof(why), "connection to the rendezvous server %s:%d "
             "lost: %s", a->host, a->port, what);
    broken(a, nread == UV_EOF ? RDZV_ECLOSED : (int)nread, why);
    return;
  }
  if (nread == 0)
    return;
  a->last_rx_ms = uv_now(a->loop);
  if (a->tls) {
    if (tls_input(a, buf->base, (size_t)nread) != 0)
      return;
  } else {
    a->in_len += (size_t)nread;
  }
  while (a->in_len - off >= PROTO_HDR && a->state != AC_CLOSED) {
    uint32_t len = proto_get_len(a->in + off);
    proto_msg_t m;
    if (len > a->lim.max_frame) {
      broken(a, RDZV_EPROTO, "oversized frame from the server");
      return;
    }
    if (a->in_len - off - PROTO_HDR < len)
      break;
    if (proto_decode(a->in + off + PROTO_HDR, len, &a->lim, &m) != 0) {
      broken(a, RDZV_EPROTO, "malformed frame from the server");
      return;
    }
    dispatch(a, &m);
    proto_msg_free(&m);
    off += PROTO_HDR + len;
  }
  if (off > 0 && a->state != AC_CLOSED) {
    memmove(a->in, a->in + off, a->in_len - off);
    a->in_len -= off;
  }
}

/* ---- watchdog ----------------------------------------------------------------------------- */

static uint64_t watch_interval(const ac_t *a) {
  return LU_MAX((uint64_t)a->reply_timeout_ms / 4, 20);
}

/* A request (or the handshake) waits and nothing at all came from the
 * server for reply_timeout_ms: a stopped or cut-off server looks exactly
 * like this, and TCP alone would wait for hours. */
static void watch_cb(uv_timer_t *t) {
  ac_t *a = t->data;
  uint64_t now = uv_now(a->loop), iv = watch_interval(a), since;
  uint64_t late = now > a->watch_due ? now - a->watch_due : 0;
  char why[400];
  a->watch_due = now + iv;
  if (late > iv) {
    /* This loop stood still (this host was stopped): what the server sent
     * meanwhile is unread; hear it before judging. */
    a->last_rx_ms = now;
    return;
  }
  if (a->state == AC_READY) {
    since = UINT64_MAX;
    for (ac_pend_t *p = a->pend; p; p = p->next)
      since = LU_MIN(since, p->sent_ms);
    if (since == UINT64_MAX)
      return;
  } else if (a->state >= AC_TLS && a->state <= AC_HELLO) {
    if (a->hello_waits && a->connect_timeout_ms >= 0 && now < a->deadline)
      return;
    since = a->connected_ms;
  } else {
    return;
  }
  since = LU_MAX(since, a->last_rx_ms);
  if (now - since < (uint64_t)a->reply_timeout_ms)
    return;
  snprintf(why, sizeof(why), "the rendezvous server %s:%d did not answer "
           "for %.1f s: is its host stopped, or the network cut? (the bound "
           "is 3 heartbeats, or --rdzv-conf read_timeout when shorter)",
           a->host, a->port, (now - since) / 1000.0);
  broken(a, -ETIMEDOUT, why);
}

static void watch_start(ac_t *a) {
  if (a->reply_timeout_ms <= 0)
    return;
  a->watch_due = uv_now(a->loop) + watch_interval(a);
  uv_timer_start(&a->watch, watch_cb, watch_interval(a), watch_interval(a));
}

/* ---- connect ------------------------------------------------------------------------------ */

static void retry_cb(uv_timer_t *t) {
  start_connect(t->data);
}

static void retry_or_fail(ac_t *a, int status, const char *what) {
  uint64_t now = uv_now(a->loop);
  if (what != a->why)
    lu_strlcpy(a->why, what, sizeof(a->why));
  a->attempts++;
  snprintf(a->last_error, sizeof(a->last_error), "cannot reach the "
           "rendezvous server %s:%d: %s", a->host, a->port, a->why);
  /* status: -ECONNREFUSED from a closed attempt (a->refused says whether
   * it was refused), RDZV_ERESOLVE from the resolver */
  a->all_refused = a->all_refused && status == -ECONNREFUSED && a->refused;
  const int refused_out = a->all_refused && a->refused_limit_ms >= 0 &&
                          now >= a->refused_due;
  if ((a->connect_timeout_ms >= 0 && now >= a->deadline) || refused_out) {
    ac_connect_cb cb = a->on_connect;
    size_t l = strlen(a->last_error);
    a->refused_out = refused_out && !(a->connect_timeout_ms >= 0 && now >= a->deadline);
    if (a->refused_out)
      snprintf(a->last_error + l, sizeof(a->last_error) - l,
               "; gave up after %.1f s of %d attempts, every one refused",
               a->refused_limit_ms / 1000.0, a->attempts);
    else
      snprintf(a->last_error + l, sizeof(a->last_error) - l,
               "; gave up after %.0f s and %d attempts", a->connect_timeout_ms /
               1000.0, a->attempts);
    a->state = AC_CLOSED;
    a->on_connect = NULL;
    if (cb)
      cb(a, -ETIMEDOUT, a->arg);
    return;
  }
  a->state = AC_IDLE;
  uint64_t wait = (uint64_t)a->backoff_ms;
  if (a->connect_timeout_ms >= 0)
    wait = LU_MIN(wait, a->deadline - now);
  if (a->all_refused && a->refused_limit_ms >= 0) /* one more try at the limit */
    wait = LU_MIN(wait, a->refused_due - now);
  uv_timer_start(&a->retry, retry_cb, wait, 0);
  a->backoff_ms = a->backoff_ms < 500 ? a->backoff_ms * 2 : 1000;
}


static void connect_cb(uv_connect_t *req, int status) {
  ac_t *a = req->data;
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  uv_timer_stop(&a->ctimer);
  if (a->closing)
    return;
  if (status != 0) {
    /* the attempt's deadline closed it: a->why says so */
    if (!a->ctimed_out)
      connect_reason(a, status);
    a->refused = !a->ctimed_out && status == UV_ECONNREFUSED;
    a->ctimed_out = 0;
    /* Close this attempt's handle, then retry with a fresh one. */
    close_tcp(a, 1);
    return;
  }
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&a->tcp, &fd) == 0 && lu_self_connected(fd)) {
    /* nothing listens: the socket met itself (lu_self_connected) */
    connect_reason(a, UV_ECONNREFUSED);
    a->refused = 1;
    close_tcp(a, 1);
    return;
  }
  uv_tcp_nodelay(&a->tcp, 1);
  if (uv_tcp_getsockname(&a->tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET)
      uv_ip4_name((struct sockaddr_in *)&ss, a->local_ip, sizeof(a->local_ip));
    else {
      struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
      if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        inet_ntop(AF_INET, s6->sin6_addr.s6_addr + 12, a->local_ip,
                  sizeof(a->local_ip));
      else
        uv_ip6_name(s6, a->local_ip, sizeof(a->local_ip));
    }
  }
  a->connected_ms = a->last_rx_ms = uv_now(a->loop);
  watch_start(a);
  if (a->tls_ctx) {
    /* TLS first: the server's certificate is checked before a byte of the
     * protocol is sent; the magic follows once the handshake is done. */
    tls_free(a->tls);
    a->tls = NULL;
    if ((a->cbuf == NULL && (a->cbuf = malloc(65536)) == NULL) ||
        tls_new(a->tls_ctx, a->host, &a->tls) != 0) {
      broken(a, RDZV_ENOMEM, "out of memory");
      return;
    }
    a->state = AC_TLS;
  }
  if (uv_read_start((uv_stream_t *)&a->tcp, alloc_cb, read_cb) != 0) {
    broken(a, RDZV_ECLOSED, "cannot read");
    return;
  }
  if (a->tls) {
    tls_input(a, "", 0); /* sends the ClientHello */
    return;
  }
  send_magic(a);
}

enum { AC_ATTEMPT_MS = 5000 };

static void ctimer_cb(uv_timer_t *t) {
  ac_t *a = t->data;
  if (a->state != AC_CONNECTING || a->closing)
    return;
  a->ctimed_out = 1;
  snprintf(a->why, sizeof(a->why), "timed out (no answer in %d s: a "
           "firewall drops it, or nothing has that address)",
           AC_ATTEMPT_MS / 1000);
  close_tcp(a, 1); /* connect_cb gets UV_ECANCELED */
}

/* Connect to sa (from the resolver, or the host itself when it is an IP
 * address). Errors retry or end through the callbacks, from the loop. */
static void connect_to(ac_t *a, const struct sockaddr *sa) {
  int r;
  uv_tcp_init(a->loop, &a->tcp);
  a->tcp.data = a;
  a->tcp_open = 1;
  if (a->local_addr[0]) {
    struct sockaddr_storage la;
    memset(&la, 0, sizeof(la));
    if (uv_ip4_addr(a->local_addr, 0, (struct sockaddr_in *)&la) != 0 &&
        uv_ip6_addr(a->local_addr, 0, (struct sockaddr_in6 *)&la) != 0) {
      snprintf(a->last_error, sizeof(a->last_error), "--local-addr '%s' is "
               "not an IP address of this node", a->local_addr);
      a->state = AC_CLOSED;
      close_tcp(a, 0);
      if (a->on_connect) {
        ac_connect_cb cb = a->on_connect;
        a->on_connect = NULL;
        cb(a, RDZV_EADDR, a->arg);
      }
      return;
    }
    if (la.ss_family == sa->sa_family)
      uv_tcp_bind(&a->tcp, (struct sockaddr *)&la, 0);
  }
  a->creq.data = a;
  a->state = AC_CONNECTING;
  r = uv_tcp_connect(&a->creq, &a->tcp, sa, connect_cb);
  if (r != 0) {
    connect_reason(a, r);
    a->refused = r == UV_ECONNREFUSED;
    close_tcp(a, 1);
    return;
  }
  /* An address that never answers (dropped SYNs) would hold one attempt
   * for the kernel's two minutes: each gets a few seconds. */
  a->ctimed_out = 0;
  uv_timer_start(&a->ctimer, ctimer_cb, AC_ATTEMPT_MS, 0);
}

static void resolved_cb(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res) {
  ac_t *a = req->data;
  a->resolving = 0;
  if (a->closing) {
    /* ac_close counted this lookup: the client is freed only now. */
    uv_freeaddrinfo(res);
    if (--a->pending_closes == 0)
      finish_close(a);
    return;
  }
  if (status != 0) {
    char what[300];
    snprintf(what, sizeof(what), "'%s' does not resolve: %s", a->host,
             uv_strerror(status));
    uv_freeaddrinfo(res);
    retry_or_fail(a, RDZV_ERESOLVE, what);
    return;
  }
  connect_to(a, res->ai_addr);
  uv_freeaddrinfo(res);
}

/* Is s an IPv4 or IPv6 address? Then *ss holds it with port. */
static int ip_literal(const char *s, int port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  return uv_ip4_addr(s, port, (struct sockaddr_in *)ss) == 0 ||
         uv_ip6_addr(s, port, (struct sockaddr_in6 *)ss) == 0;
}

static void start_connect(ac_t *a) {
  struct addrinfo hints;
  struct sockaddr_storage ss, la;
  char port[16];
  int r;
  /* An address needs no resolver: uv_getaddrinfo would start libuv's
   * four threadpool threads in every agent (about 1 ms of a trivial
   * job's start, more when hundreds of agents start at once). Only when
   * --local-addr is empty or an address too, so that its error is still
   * reported from the loop, as the resolver path does. */
  if (ip_literal(a->host, a->port, &ss) &&
      (a->local_addr[0] == '\0' || ip_literal(a->local_addr, 0, &la))) {
    connect_to(a, (struct sockaddr *)&ss);
    return;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(port, sizeof(port), "%d", a->port);
  a->gai.data = a;
  a->state = AC_RESOLVING;
  r = uv_getaddrinfo(a->loop, &a->gai, resolved_cb, a->host, port, &hints);
  if (r != 0)
    retry_or_fail(a, RDZV_ERESOLVE, uv_strerror(r));
  else
    a->resolving = 1;
}

int ac_connect(ac_t *a, ac_connect_cb cb) {
  if (a->state != AC_IDLE)
    return RDZV_EINVAL;
  a->on_connect = cb;
  a->backoff_ms = 20;
  a->all_refused = 1;
  a->refused_out = 0;
  a->refused_due = uv_now(a->loop) + (uint64_t)LU_MAX(a->refused_limit_ms, 0);
  a->deadline = uv_now(a->loop) + (uint64_t)(a->connect_timeout_ms < 0 ? 0 : a->connect_timeout_ms);
  start_connect(a);
  return 0;
}

/* ---- close --------------------------------------------------------------------------------- */

static void finish_close(ac_t *a) {
  void (*cb)(void *) = a->close_cb;
  void *arg = a->close_arg;
  free(a->host);
  free(a->local_addr);
  free(a->job);
  free(a->role);
  if (a->token) {
    memset(a->token, 0, a->token_len);
    free(a->token);
  }
  free(a->in);
  free(a->cbuf);
  tls_free(a->tls);
  tls_ctx_free(a->tls_ctx);
  proto_enc_destroy(&a->enc);
  free(a);
  if (cb)
    cb(arg);
}

static void on_timer_closed(uv_handle_t *h) {
  ac_t *a = h->data;
  if (--a->pending_closes == 0)
    finish_close(a);
}

void ac_close(ac_t *a, void (*cb)(void *arg), void *arg) {
  if (a->closing)
    return;
  a->closing = 1;
  a->close_cb = cb;
  a->close_arg = arg;
  a->on_connect = NULL;
  a->on_lost = NULL;
  a->on_push = NULL;
  a->state = AC_CLOSED;
  fail_pending(a, RDZV_ECANCELED);
  a->pending_closes = 1;
  /* A lookup in flight holds a pointer to us: its callback counts down
   * (uv_cancel makes it come sooner when it has not started). */
  if (a->resolving) {
    a->pending_closes++;
    uv_cancel((uv_req_t *)&a->gai);
  }
  /* A TCP close already under way also ends in on_tcp_closed, which now
   * sees `closing` and counts itself. */
  if (a->tcp_open)
    a->pending_closes++;
  close_tcp(a, 0);
  a->pending_closes += 2;
  uv_close((uv_handle_t *)&a->ctimer, on_timer_closed);
  uv_close((uv_handle_t *)&a->retry, on_timer_closed);
  uv_close((uv_handle_t *)&a->watch, on_timer_closed);
}
