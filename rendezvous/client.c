/* client.c - librdzv: the blocking client of the native protocol. One
 * handle per thread; no global state. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "msg.h"
#include "proto.h"
#include "client_int.h"
#include "rdzv.h"
#include "tls.h"

#define CLIENT_MAGIC 0x434c4e54u /* "CLNT" */
#define MAX_REPLY (64u << 20)
/* A plain connection waits for replies in a blocking recv bounded by
 * SO_RCVTIMEO: at most this long at a time, less near the deadline. */
#define RCV_SLICE_MS 1000
/* Sets sent without waiting (rdzv_set_nowait): at most this many, or this
 * many bytes, wait in the buffer before they are sent and answered. The
 * bound keeps their replies small enough that a server never stops reading
 * a client that is busy writing. */
#define NOWAIT_MAX 256
#define NOWAIT_MAX_BYTES (64u << 10)

/* A set sent without waiting whose reply has not been read yet. */
typedef struct nowait_s {
  uint64_t id;
  char key[64]; /* for the error message, cut */
} nowait_t;

struct rdzv_client_s {
  unsigned magic;
  int fd;
  tls_ctx_t *tls_ctx; /* TLS when set */
  tls_t *tls;
  uint64_t next_id;
  proto_enc_t enc;
  uint8_t *in;
  size_t in_off, in_len, in_cap; /* unread replies: in[in_off..in_len) */
  proto_limits_t lim;
  int io_timeout_ms;
  int rcv_ms;         /* SO_RCVTIMEO now set on fd (0: none) */
  uint32_t features;  /* the server's PROTO_FEAT_* (its CHALLENGE) */
  char last_error[512];
  char endpoint[300];
  /* rdzv_set_nowait: nq of the sets are still in enc (unsent); nw (in
   * order) await their replies, the unsent ones included. */
  uint32_t nq;
  nowait_t *nw;
  uint32_t nw_head, nw_len;
  size_t sent_len;     /* bytes of the last request sent (or being sent) */
  int nw_err;          /* first failure of one of them, not yet reported */
  char nw_msg[400];
  rdzv__nccl_call_t *nccl_calls; /* rdzv_nccl_ids made, per communicator */
};

uint32_t *rdzv__nccl_calls(rdzv_client_t *c, const char *name, int64_t round,
                           int rank) {
  rdzv__nccl_call_t *k;
  for (k = c->nccl_calls; k; k = k->next)
    if (k->round == round && k->rank == rank && strcmp(k->name, name) == 0)
      return &k->done;
  if ((k = calloc(1, sizeof(*k) + strlen(name) + 1)) == NULL)
    return NULL;
  k->round = round;
  k->rank = rank;
  memcpy(k->name, name, strlen(name) + 1);
  k->next = c->nccl_calls;
  c->nccl_calls = k;
  return &k->done;
}

/* ---- time ----------------------------------------------------------------------- */

static int64_t deadline_after(int timeout_ms) {
  if (timeout_ms < 0)
    return -1;
  return (int64_t)lu_now_ms() + timeout_ms;
}

/* The deadline of a call that does not wait on the server: 0 is one round
 * trip, bounded by the io timeout (a deadline of "now" failed a call the
 * server had already run, and a retried ADD added twice). */
static int64_t op_deadline(const rdzv_client_t *c, int timeout_ms) {
  return deadline_after(timeout_ms == 0 ? c->io_timeout_ms : timeout_ms);
}

/* Remaining ms until deadline (-1 = forever), clamped to int. */
static int remaining(int64_t deadline) {
  int64_t r;
  if (deadline < 0)
    return -1;
  r = deadline - (int64_t)lu_now_ms();
  if (r < 0)
    return 0;
  return r > 1000000000 ? 1000000000 : (int)r;
}

void rdzv__set_error(rdzv_client_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
  va_end(ap);
}


/* ---- socket I/O ------------------------------------------------------------------ */

static int wait_fd(int fd, short ev, int64_t deadline) {
  struct pollfd p = {fd, ev, 0};
  for (;;) {
    int r = poll(&p, 1, remaining(deadline));
    if (r > 0)
      return 0;
    if (r == 0)
      return -ETIMEDOUT;
    if (errno != EINTR)
      return -errno;
  }
}

static int raw_send(rdzv_client_t *c, const void *buf, size_t n,
                    int64_t deadline) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int r = wait_fd(c->fd, POLLOUT, deadline);
      if (r)
        return r;
      continue;
    }
    return w < 0 ? -errno : RDZV_ECLOSED;
  }
  return 0;
}

/* Send the ciphertext TLS has ready (handshake messages, records). */
static int tls_flush(rdzv_client_t *c, int64_t deadline) {
  char *ct;
  size_t n;
  int rc;
  if (tls_take(c->tls, &ct, &n) != 0)
    return RDZV_ENOMEM;
  rc = n ? raw_send(c, ct, n, deadline) : 0;
  free(ct);
  return rc;
}

static int send_all(rdzv_client_t *c, const void *buf, size_t n,
                    int64_t deadline) {
  int rc;
  if (c->tls == NULL)
    return raw_send(c, buf, n, deadline);
  if ((rc = tls_write(c->tls, buf, n)) != 0) {
    rdzv__set_error(c, "%s", tls_error(c->tls));
    return rc;
  }
  return tls_flush(c, deadline);
}

/* Plain TCP: one blocking recv per reply, bounded by SO_RCVTIMEO, which
 * only changes (a setsockopt) when the deadline is nearer than a slice.
 * RET bytes, 0 at EOF, or -1 with errno (EAGAIN: this slice ran out). */
static ssize_t plain_recv(rdzv_client_t *c, uint8_t *buf, size_t cap,
                          int64_t deadline) {
  int left = remaining(deadline);
  int t = left < 0 || left > RCV_SLICE_MS ? RCV_SLICE_MS : left;
  if (left == 0)
    return recv(c->fd, buf, cap, MSG_DONTWAIT);
  if (t != c->rcv_ms) {
    struct timeval tv = {t / 1000, (t % 1000) * 1000};
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
      return -1;
    c->rcv_ms = t;
  }
  return recv(c->fd, buf, cap, 0);
}

/* Receive into buf (plaintext). RET bytes (> 0) or a negative code. */
static ssize_t io_recv(rdzv_client_t *c, uint8_t *buf, size_t cap,
                       int64_t deadline) {
  uint8_t cbuf[16384];
  for (;;) {
    ssize_t r;
    int w;
    if (c->tls) {
      r = tls_read(c->tls, buf, cap);
      if (tls_out_pending(c->tls) && (w = tls_flush(c, deadline)) != 0)
        return w;
      if (r > 0)
        return r;
      if (r < 0 && r != RDZV_ECLOSED) {
        rdzv__set_error(c, "%s: %s", c->endpoint, tls_error(c->tls));
        return r;
      }
      if (r == RDZV_ECLOSED) {
        rdzv__set_error(c, "the server at %s closed the connection", c->endpoint);
        return RDZV_ECLOSED;
      }
    }
    if (c->tls) {
      /* A record is rarely there the moment the request left: wait first,
       * which saves a recv that would fail with EAGAIN. */
      if ((w = wait_fd(c->fd, POLLIN, deadline)) != 0)
        return w;
      r = recv(c->fd, cbuf, sizeof(cbuf), MSG_DONTWAIT);
    } else {
      r = plain_recv(c, buf, cap, deadline);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          remaining(deadline) == 0)
        return -ETIMEDOUT;
    }
    if (r > 0 && c->tls) {
      if (tls_feed(c->tls, cbuf, (size_t)r) != 0)
        return RDZV_ENOMEM;
      continue;
    }
    if (r > 0)
      return r;
    if (r == 0 || (c->tls && errno == ECONNRESET)) {
      if (c->tls && !tls_established(c->tls))
        rdzv__set_error(c, "the server at %s closed the connection during the TLS "
                  "handshake: does it speak TLS (launch server --tls-cert)?",
                  c->endpoint);
      else if (c->tls && c->next_id <= 1)
        rdzv__set_error(c, "the server at %s closed the connection after the TLS "
                  "handshake: it may require a client certificate "
                  "(--tls-cert, --tls-key) signed by its CA", c->endpoint);
      else if (!c->tls && c->next_id == 0)
        rdzv__set_error(c, "the server at %s closed the connection before "
                        "its challenge: it may require TLS (give the CA: "
                        "tls_ca, LAUNCH_RDZV_TLS_CA), or refuse this client's "
                        "address", c->endpoint);
      else
        rdzv__set_error(c, "the server at %s closed the connection", c->endpoint);
      return RDZV_ECLOSED;
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
      continue;
    return -errno;
  }
}

/* Read until one whole frame is buffered. OUT *body, *len point into c->in;
 * the frame stays there until frame_consume(). */
static int read_frame(rdzv_client_t *c, int64_t deadline, const uint8_t **body,
                      uint32_t *len) {
  for (;;) {
    size_t have = c->in_len - c->in_off, need = 0;
    if (have >= PROTO_HDR) {
      uint32_t l = proto_get_len(c->in + c->in_off);
      if (l > MAX_REPLY) {
        rdzv__set_error(c, "server sent a frame of %u bytes", l);
        return RDZV_EPROTO;
      }
      if (have - PROTO_HDR >= l) {
        *body = c->in + c->in_off + PROTO_HDR;
        *len = l;
        return 0;
      }
      need = (size_t)l + PROTO_HDR;
    }
    /* Room to read into: move what is left to the front only now, not
     * after every frame. */
    if (c->in_cap - c->in_len < 4096 || c->in_cap - c->in_off < need) {
      size_t ncap = c->in_cap ? c->in_cap : 8192;
      if (c->in_off > 0) {
        memmove(c->in, c->in + c->in_off, have);
        c->in_len = have;
        c->in_off = 0;
      }
      while (ncap < need || ncap - c->in_len < 4096)
        ncap *= 2;
      if (ncap != c->in_cap) {
        uint8_t *nb = realloc(c->in, ncap);
        if (nb == NULL)
          return RDZV_ENOMEM;
        c->in = nb;
        c->in_cap = ncap;
      }
    }
    {
      ssize_t r = io_recv(c, c->in + c->in_len, c->in_cap - c->in_len,
                          deadline);
      if (r < 0)
        return (int)r;
      c->in_len += (size_t)r;
    }
  }
}

static void frame_consume(rdzv_client_t *c, uint32_t len) {
  c->in_off += PROTO_HDR + (size_t)len;
  if (c->in_off == c->in_len)
    c->in_off = c->in_len = 0;
}

/* ---- requests ---------------------------------------------------------------------- */

/* Start a request after those already built (pipelined: sent together). */
static uint64_t req_more(rdzv_client_t *c, int op, uint32_t nargs) {
  uint64_t id = ++c->next_id;
  proto_enc_begin_msg(&c->enc, nargs, PROTO_REQUEST, id, op);
  return id;
}

/* Start a request; sets queued by rdzv_set_nowait go out in front of it. */
static uint64_t req_begin(rdzv_client_t *c, int op, uint32_t nargs) {
  if (c->nq == 0)
    proto_enc_reset(&c->enc);
  return req_more(c, op, nargs);
}

/* Send the request built since req_begin and read its reply.
 * OUT *reply (decoded; free with proto_msg_free + frame_consume through
 * reply_done). RET the reply's status (0 or negative). */
typedef struct reply_s {
  proto_msg_t m;
  uint32_t len;
  int live;
} reply_t;

static void reply_done(rdzv_client_t *c, reply_t *r) {
  if (r->live) {
    proto_msg_free(&r->m);
    frame_consume(c, r->len);
    r->live = 0;
  }
}

static int rpc_io_error(rdzv_client_t *c, int rc);

/* Send the frames in enc, queued sets included. RET 0 or <0. */
static int send_built(rdzv_client_t *c, int64_t deadline) {
  int rc;
  c->sent_len = c->enc.len;
  rc = send_all(c, c->enc.data, c->enc.len, deadline);
  if (rc == -ETIMEDOUT) {
    /* Part of a frame may have gone: the server would read the next
     * request as the rest of it. The connection goes (the call says it
     * timed out; the next ones, that it is closed). */
    rdzv__set_error(c, "sending to %s timed out (a server stopped, or too "
                    "slow to read): the connection is closed, as a request "
                    "cut off midway would leave it out of step; connect "
                    "again", c->endpoint);
    (void)rpc_io_error(c, RDZV_ECLOSED);
    return rc;
  }
  if (rc != 0)
    return rpc_io_error(c, rc);
  c->nq = 0;
  proto_enc_reset(&c->enc);
  return 0;
}

static void nowait_pop(rdzv_client_t *c) {
  c->nw_head++;
  if (--c->nw_len == 0)
    c->nw_head = 0;
}

/* The reply of a set sent without waiting: keep its failure for the next
 * call. RET 1 when m was that reply, 0 when not, RDZV_EPROTO when it
 * answers a request sent after the oldest set still unanswered.
 * With SETQ (a server offering PROTO_FEAT_SETQ) only a failed set is
 * answered, and in order: a reply to a later request tells that every set
 * before it was stored. */
static int nowait_reply(rdzv_client_t *c, const proto_msg_t *m) {
  nowait_t *w;
  if (m->kind != PROTO_REPLY || c->nw_len == 0)
    return 0;
  if (c->features & PROTO_FEAT_SETQ) {
    while (c->nw_len > 0 && c->nw[c->nw_head].id < m->id &&
           m->id <= c->next_id)
      nowait_pop(c);
    if (c->nw_len == 0 || c->nw[c->nw_head].id != m->id)
      return 0;
  }
  w = &c->nw[c->nw_head];
  if (m->id != w->id) {
    if (m->id > w->id && m->id <= c->next_id) {
      rdzv__set_error(c, "the server at %s answered request %llu before "
                      "set %llu ('%s'): replies out of order",
                      c->endpoint, (unsigned long long)m->id,
                      (unsigned long long)w->id, w->key);
      return RDZV_EPROTO;
    }
    return 0;
  }
  if (m->op != 0 && c->nw_err == 0) {
    const char *msg;
    size_t n;
    c->nw_err = proto_status(m->op);
    if (proto_arg_bytes(m, 0, &msg, &n) != 0) {
      msg = rdzv_strerror(c->nw_err);
      n = strlen(msg);
    }
    snprintf(c->nw_msg, sizeof(c->nw_msg), "set of '%s' sent without "
             "waiting failed (%s): %.*s", w->key, rdzv_err_name(c->nw_err),
             (int)LU_MIN(n, 200), msg);
  }
  nowait_pop(c);
  return 1;
}

/* Hand over a failed unwaited set, once. RET RDZV_EDEFERRED or 0. */
static int nowait_take_error(rdzv_client_t *c) {
  if (c->nw_err == 0)
    return 0;
  c->nw_err = 0;
  rdzv__set_error(c, "%s", c->nw_msg);
  return RDZV_EDEFERRED;
}

/* Send every request built since req_begin, in one write. RET 0 or <0. */
static int rpc_send(rdzv_client_t *c, int64_t deadline) {
  int rc;
  c->last_error[0] = '\0';
  if (c->fd < 0) {
    rdzv__set_error(c, "connection to %s is closed", c->endpoint);
    return RDZV_ECLOSED;
  }
  if ((rc = proto_enc_end(&c->enc)) != 0)
    return rc;
  return send_built(c, deadline);
}

/* Read replies until request id's: replies come in the order of the
 * requests, so with pipelined requests read theirs in turn. */
static int rpc_recv(rdzv_client_t *c, uint64_t id, int64_t deadline,
                    reply_t *r) {
  int rc;
  r->live = 0; /* not a memset: the message's flat[] is ~300 bytes */
  for (;;) {
    const uint8_t *body;
    uint32_t len;
    rc = read_frame(c, deadline, &body, &len);
    if (rc != 0)
      goto io_error;
    rc = proto_decode(body, len, &c->lim, &r->m);
    if (rc != 0) {
      rdzv__set_error(c, "malformed reply from %s", c->endpoint);
      goto io_error;
    }
    if ((rc = nowait_reply(c, &r->m)) < 0) {
      proto_msg_free(&r->m);
      goto io_error;
    }
    if (rc == 0 && r->m.kind == PROTO_REPLY && r->m.id == id) {
      r->len = len;
      r->live = 1;
      if ((rc = nowait_take_error(c)) != 0) {
        reply_done(c, r);
        return rc;
      }
      if (r->m.op != 0) {
        const char *msg;
        size_t n;
        rc = proto_status(r->m.op);
        if (rc == RDZV_EPROTO && r->m.op != RDZV_EPROTO)
          rdzv__set_error(c, "the server at %s answered with status %lld, "
                          "not an error code (a server of another protocol, "
                          "or not a launch server)", c->endpoint,
                          (long long)r->m.op);
        else if (proto_arg_bytes(&r->m, 0, &msg, &n) == 0)
          rdzv__set_error(c, "%.*s", (int)LU_MIN(n, sizeof(c->last_error) - 1), msg);
        else
          rdzv__set_error(c, "%s", rdzv_strerror(rc));
        reply_done(c, r);
        return rc;
      }
      return 0;
    }
    /* A push, or the late reply of a request that timed out here. */
    proto_msg_free(&r->m);
    frame_consume(c, len);
  }
io_error:
  return rpc_io_error(c, rc);
}

static int rpc(rdzv_client_t *c, uint64_t id, int64_t deadline, reply_t *r) {
  int rc;
  r->live = 0;
  if ((rc = rpc_send(c, deadline)) != 0)
    return rc;
  return rpc_recv(c, id, deadline, r);
}

static int rpc_io_error(rdzv_client_t *c, int rc) {
  if (rc == -ETIMEDOUT) {
    if (c->last_error[0] == '\0')
      rdzv__set_error(c, "no reply from %s in time", c->endpoint);
    return rc;
  }
  if (c->last_error[0] == '\0' && c->sent_len > (16u << 20) &&
      (rc == -ECONNRESET || rc == -EPIPE || rc == RDZV_ECLOSED))
    /* A server older than the error reply for a request over its limit
     * closes the connection once it has read the length: the reset is all
     * this side sees. */
    rdzv__set_error(c, "%s closed the connection after a request of %zu "
                    "bytes: a server does so when a request is over its "
                    "largest (launch server --max-frame, 16 MiB by default); "
                    "keep values under --max-value (8 MiB by default), split "
                    "them, or raise both", c->endpoint, c->sent_len);
  if (c->last_error[0] == '\0')
    rdzv__set_error(c, "connection to %s failed: %s", c->endpoint,
              rdzv_strerror(rc));
  /* The stream is out of step: drop the connection, and with it what the
   * sets sent without waiting would have told. */
  if (c->nw_len > 0) {
    char why[sizeof(c->last_error)];
    lu_strlcpy(why, c->last_error, sizeof(why));
    rdzv__set_error(c, "%.300s (%u set(s) sent without waiting may or may "
                    "not have been stored)", why, c->nw_len);
  }
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->nq = c->nw_len = c->nw_head = 0;
  c->nw_err = 0;
  proto_enc_reset(&c->enc);
  return rc;
}

/* A server-side wait of timeout_ms, with the client's own deadline a little
 * later so that the server's answer (-ETIMEDOUT with a message) wins. */
static int64_t wait_deadline(const rdzv_client_t *c, int timeout_ms) {
  if (timeout_ms < 0)
    return -1;
  /* in 64 bits: a timeout near INT_MAX must not wrap to "forever" */
  return (int64_t)lu_now_ms() + timeout_ms + LU_MIN(c->io_timeout_ms, 5000);
}

/* ---- connect --------------------------------------------------------------------- */

static int connect_once(const struct sockaddr *sa, socklen_t salen,
                        int64_t deadline, int *out_fd) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  0);
  int err = 0;
  socklen_t elen = sizeof(err);
  if (fd < 0)
    return -errno;
  if (connect(fd, sa, salen) != 0) {
    int r;
    if (errno != EINPROGRESS) {
      r = -errno;
      close(fd);
      return r;
    }
    r = wait_fd(fd, POLLOUT, deadline);
    if (r != 0) {
      close(fd);
      return r;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
      close(fd);
      return err ? -err : -EIO;
    }
  }
  if (sa->sa_family != AF_UNIX && lu_self_connected(fd)) {
    close(fd); /* nothing listens: the socket met itself */
    return -ECONNREFUSED;
  }
  if (sa->sa_family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  /* Blocking from here: replies are read by a blocking recv (its
   * deadline in SO_RCVTIMEO), sends pass MSG_DONTWAIT. */
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    int r = -errno;
    close(fd);
    return r;
  }
  *out_fd = fd;
  return 0;
}

static int connect_endpoint(rdzv_client_t *c, const lu_endpoint_t *ep,
                            int64_t deadline, int once) {
  int backoff = 20;
  int rc;
  for (;;) {
    if (ep->is_unix) {
      struct sockaddr_un un;
      memset(&un, 0, sizeof(un));
      un.sun_family = AF_UNIX;
      lu_strlcpy(un.sun_path, ep->path, sizeof(un.sun_path));
      rc = connect_once((struct sockaddr *)&un, sizeof(un), deadline, &c->fd);
    } else {
      struct addrinfo hints, *res = NULL, *ai;
      char port[16];
      int g;
      memset(&hints, 0, sizeof(hints));
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      snprintf(port, sizeof(port), "%d", ep->port);
      g = getaddrinfo(ep->host, port, &hints, &res);
      if (g != 0) {
        rdzv__set_error(c, "cannot resolve '%s': %s", ep->host, gai_strerror(g));
        rc = RDZV_ERESOLVE;
        if (g != EAI_AGAIN)
          return rc;
      } else {
        rc = -ECONNREFUSED;
        for (ai = res; ai; ai = ai->ai_next) {
          rc = connect_once(ai->ai_addr, ai->ai_addrlen, deadline, &c->fd);
          if (rc == 0)
            break;
        }
        freeaddrinfo(res);
      }
    }
    if (rc == 0)
      return 0;
    /* The server may not be up yet (agents start in any order): retry
     * refused and unreachable connections until the deadline. */
    if (rc != -ECONNREFUSED && rc != -ENOENT && rc != -EHOSTUNREACH &&
        rc != -ENETUNREACH && rc != RDZV_ERESOLVE && rc != -ECONNRESET &&
        rc != -EAGAIN) {
      rdzv__set_error(c, "cannot connect to %s: %s", c->endpoint, rdzv_strerror(rc));
      return rc;
    }
    if (once) {
      rdzv__set_error(c, "cannot connect to %s: %s (one attempt: "
                      "connect_timeout_ms 0)", c->endpoint, rdzv_strerror(rc));
      return rc;
    }
    if (deadline >= 0 && remaining(deadline) == 0) {
      rdzv__set_error(c, "cannot connect to %s: %s (gave up after the connect "
                   "timeout; is the server running and the port open?)",
                c->endpoint, rdzv_strerror(rc));
      return -ETIMEDOUT;
    }
    {
      int ms = backoff;
      struct timespec ts;
      if (deadline >= 0 && remaining(deadline) < ms)
        ms = remaining(deadline);
      ts.tv_sec = ms / 1000;
      ts.tv_nsec = (long)(ms % 1000) * 1000000L;
      nanosleep(&ts, NULL);
      backoff = backoff < 500 ? backoff * 2 : 1000;
    }
  }
}

/* TLS first when asked: the server's certificate is checked before a
 * byte of the protocol is sent. */
static int tls_handshake(rdzv_client_t *c, const lu_endpoint_t *ep,
                         int64_t dl) {
  uint8_t cbuf[16384];
  int rc;
  if ((rc = tls_new(c->tls_ctx, ep->host, &c->tls)) != 0)
    return rc;
  for (;;) {
    ssize_t r = tls_read(c->tls, NULL, 0), n;
    if ((rc = tls_flush(c, dl)) != 0)
      return rc;
    if (r < 0) {
      rdzv__set_error(c, "%s: %s", c->endpoint, tls_error(c->tls));
      return (int)r;
    }
    if (tls_established(c->tls))
      return 0;
    if ((rc = wait_fd(c->fd, POLLIN, dl)) != 0)
      return rc;
    n = recv(c->fd, cbuf, sizeof(cbuf), MSG_DONTWAIT);
    if (n > 0) {
      if (tls_feed(c->tls, cbuf, (size_t)n) != 0)
        return RDZV_ENOMEM;
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      rdzv__set_error(c, "the server at %s closed the connection during the TLS "
                "handshake: does it speak TLS (launch server --tls-cert)?",
                c->endpoint);
      return RDZV_ECLOSED;
    }
  }
}

static int handshake(rdzv_client_t *c, const rdzv_options_t *o, int64_t dl) {
  proto_hello_t h;
  const uint8_t *body;
  uint32_t len;
  proto_msg_t m;
  char err[256];
  reply_t r;
  uint64_t id;
  int rc;

  memset(&h, 0, sizeof(h));
  h.job = o->job ? o->job : "default";
  h.role = o->role ? o->role : "worker";
  h.token = o->token;
  h.token_len = o->token_len;
  if ((rc = send_all(c, PROTO_MAGIC, PROTO_MAGIC_LEN, dl)) != 0)
    return rc;
  if ((rc = read_frame(c, dl, &body, &len)) != 0)
    return rc;
  if (proto_decode(body, len, &c->lim, &m) != 0) {
    rdzv__set_error(c, "%s did not answer like a launch server", c->endpoint);
    return RDZV_EPROTO;
  }
  rc = proto_hello_challenge(&h, &m, err, sizeof(err));
  proto_msg_free(&m);
  if (rc != 0) {
    rdzv__set_error(c, "the server at %s %s", c->endpoint, err);
    return rc;
  }
  c->features = h.features;
  frame_consume(c, len);
  id = req_begin(c, PROTO_OP_HELLO, 5);
  proto_hello_pack(&h, &c->enc.pk);
  if ((rc = rpc(c, id, dl, &r)) != 0)
    return rc;
  rc = proto_hello_reply(&h, &r.m, err, sizeof(err));
  reply_done(c, &r);
  if (rc != 0)
    rdzv__set_error(c, "the server at %s %s", c->endpoint, err);
  return rc;
}

int rdzv_connect(const rdzv_options_t *o, rdzv_client_t **out) {
  rdzv_client_t *c;
  lu_endpoint_t ep;
  int64_t dl;
  int rc;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;

  if (o == NULL || out == NULL || o->size < sizeof(rdzv_options_t))
    return RDZV_EINVAL;
  if (o->endpoint == NULL) {
    if (o->error && o->error_len)
      lu_strlcpy(o->error, "no endpoint given (rdzv_options_t.endpoint)",
                 o->error_len);
    return RDZV_EINVAL;
  }
  if ((rc = lu_endpoint_parse(o->endpoint, RDZV_DEFAULT_PORT, &ep)) != 0) {
    if (o->error && o->error_len)
      snprintf(o->error, o->error_len, "'%.200s' is not an endpoint: give "
               "HOST:PORT, [IPV6]:PORT or unix:PATH", o->endpoint);
    return rc;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL)
    return RDZV_ENOMEM;
  c->magic = CLIENT_MAGIC;
  c->fd = -1;
  lim.max_frame = MAX_REPLY;
  lim.max_items = 1u << 22;
  c->lim = lim;
  c->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : 30000;
  lu_endpoint_format(&ep, c->endpoint, sizeof(c->endpoint));
  proto_enc_init(&c->enc);
  /* 0: one attempt, its connect and handshake bounded by the io timeout
   * (a deadline of "now" failed even against a server on this host) */
  dl = deadline_after(o->connect_timeout_ms == 0 ? c->io_timeout_ms
                                                 : o->connect_timeout_ms);
  rc = 0;
  if (o->tls_ca || o->tls_cert) {
    tls_files_t f = {o->tls_cert, o->tls_key, o->tls_ca};
    if (ep.is_unix) {
      rdzv__set_error(c, "TLS is for TCP endpoints; %s is a unix socket",
                c->endpoint);
      rc = RDZV_EINVAL;
    } else {
      rc = tls_ctx_new(0, &f, &c->tls_ctx, c->last_error,
                       sizeof(c->last_error));
    }
  }
  if (rc == 0)
    rc = connect_endpoint(c, &ep, dl, o->connect_timeout_ms == 0);
  if (rc == 0 && c->tls_ctx)
    rc = tls_handshake(c, &ep, dl);
  if (rc == 0)
    rc = handshake(c, o, dl);
  if (rc != 0) {
    if (o->error && o->error_len)
      lu_strlcpy(o->error, c->last_error[0] ? c->last_error : rdzv_strerror(rc),
                 o->error_len);
    rdzv_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

/* Why this thread's last rdzv_connect_from_env failed: rdzv_last_error(NULL). */
static __thread char env_error[512];

/* name's value in the environment was given but did not parse. */
static int env_bad(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0';
}

int rdzv_connect_from_env(rdzv_client_t **out) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_env_t env;
  char ep[512], err[256];
  char *token = NULL;
  size_t tlen = 0;
  int rc;

  env_error[0] = '\0';
  /* A variable the connection does not need (RANK=x) fails nothing here:
   * a field that does not parse is left unset, and only the ones the
   * connection reads are judged. */
  (void)rdzv_env_parse(NULL, &env, err, sizeof(err));
  o.endpoint = env.endpoint;
  if (o.endpoint == NULL) {
    if (env.master_addr == NULL || env.master_port < 0) {
      if (env.master_port < 0 && env_bad("MASTER_PORT")) {
        snprintf(env_error, sizeof(env_error), "MASTER_PORT='%.40s' is not "
                 "a port (1-65535)", getenv("MASTER_PORT"));
        return RDZV_EINVAL;
      }
      snprintf(env_error, sizeof(env_error), "no LAUNCH_RDZV_ENDPOINT, nor "
               "MASTER_ADDR and MASTER_PORT: not started by launch or "
               "torchrun?");
      return RDZV_ENOENV;
    }
    if (env.master_port < 1 || env.master_port > 65535) {
      snprintf(env_error, sizeof(env_error), "MASTER_PORT=%d is not a port "
               "(1-65535)", env.master_port);
      return RDZV_EINVAL;
    }
    /* an IPv6 address bare or in brackets */
    snprintf(ep, sizeof(ep),
             strchr(env.master_addr, ':') && env.master_addr[0] != '['
                 ? "[%s]:%d"
                 : "%s:%d",
             env.master_addr, env.master_port);
    o.endpoint = ep;
  }
  o.job = env.rdzv_id ? env.rdzv_id : "default";
  if (env.token_file) {
    if ((rc = lu_read_token(env.token_file, &token, &tlen, NULL, 0)) != 0) {
      snprintf(env_error, sizeof(env_error), "LAUNCH_RDZV_TOKEN_FILE %.300s: "
               "%s", env.token_file, rdzv_strerror(rc));
      return rc;
    }
    o.token = token;
    o.token_len = tlen;
  }
  o.tls_ca = env.tls_ca;
  o.tls_cert = env.tls_cert;
  o.tls_key = env.tls_key;
  o.error = env_error;
  o.error_len = sizeof(env_error);
  rc = rdzv_connect(&o, out);
  if (token) {
    memset(token, 0, tlen);
    free(token);
  }
  return rc;
}

void rdzv_close(rdzv_client_t *c) {
  if (c == NULL)
    return;
  /* Sets sent without waiting are stored before the connection ends:
   * their replies are read, so that closing never resets the stream. */
  if (c->fd >= 0 && (c->nq > 0 || c->nw_len > 0))
    (void)rdzv_flush(c, c->io_timeout_ms);
  if (c->fd >= 0)
    close(c->fd);
  free(c->nw);
  while (c->nccl_calls) {
    rdzv__nccl_call_t *k = c->nccl_calls;
    c->nccl_calls = k->next;
    free(k);
  }
  tls_free(c->tls);
  tls_ctx_free(c->tls_ctx);
  proto_enc_destroy(&c->enc);
  free(c->in);
  c->magic = 0;
  free(c);
}

const char *rdzv_last_error(const rdzv_client_t *c) {
  return c ? c->last_error : env_error;
}

void rdzv_free(void *p) { free(p); }

/* ---- operations ------------------------------------------------------------------- */

/* key_ok, giving the key's length. RET 1 when fine; else 0, with
 * rdzv_last_error saying why (not the message of an earlier call). */
static int key_len(rdzv_client_t *c, const char *key, size_t *n) {
  if (key != NULL && (*n = strlen(key)) <= RDZV_MAX_KEY)
    return 1;
  if (c == NULL)
    return 0;
  if (key == NULL)
    rdzv__set_error(c, "a key is NULL");
  else
    rdzv__set_error(c, "key '%.32s...' of %zu bytes is over the %d-byte "
                    "limit of a key (RDZV_MAX_KEY)", key, *n, RDZV_MAX_KEY);
  return 0;
}

static int key_ok(rdzv_client_t *c, const char *key) {
  size_t n;
  return key_len(c, key, &n);
}

static void *dup_value(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n)
      memcpy(d, p, n);
    d[n] = '\0';
  }
  return d;
}

int rdzv_set(rdzv_client_t *c, const char *key, const void *val, size_t len,
             int timeout_ms) {
  reply_t r;
  uint64_t id;
  size_t kn;
  int rc;
  if (!key_len(c, key, &kn) || (val == NULL && len))
    return RDZV_EINVAL;
  if (c->nq == 0)
    proto_enc_reset(&c->enc);
  id = c->next_id + 1;
  if ((rc = proto_enc_key_bin(&c->enc, PROTO_REQUEST, id, PROTO_OP_SET, key,
                              kn, val, len)) != 0)
    return rc;
  c->next_id = id;
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_set_nowait(rdzv_client_t *c, const char *key, const void *val,
                    size_t len) {
  nowait_t *w;
  size_t kn;
  int rc;
  if (c == NULL || !key_len(c, key, &kn) || (val == NULL && len))
    return RDZV_EINVAL;
  if (c->fd < 0) {
    rdzv__set_error(c, "connection to %s is closed", c->endpoint);
    return RDZV_ECLOSED;
  }
  if (c->nw == NULL && (c->nw = malloc(NOWAIT_MAX * sizeof(*c->nw))) == NULL)
    return RDZV_ENOMEM;
  if (c->nw_head + c->nw_len == NOWAIT_MAX) {
    /* Compact the ring's start (replies read meanwhile freed it). */
    memmove(c->nw, c->nw + c->nw_head, c->nw_len * sizeof(*c->nw));
    c->nw_head = 0;
  }
  /* Still full: an earlier flush ran out of time before the replies. */
  if (c->nw_len == NOWAIT_MAX && (rc = rdzv_flush(c, c->io_timeout_ms)) != 0)
    return rc;
  if (c->nq == 0)
    proto_enc_reset(&c->enc);
  w = &c->nw[c->nw_head + c->nw_len];
  w->id = c->next_id + 1;
  if ((rc = proto_enc_key_bin(&c->enc, PROTO_REQUEST, w->id,
                              (c->features & PROTO_FEAT_SETQ) ? PROTO_OP_SETQ
                                                              : PROTO_OP_SET,
                              key, kn, val, len)) != 0)
    return rc; /* this frame was not added; the queued ones stay whole */
  c->next_id++;
  kn = LU_MIN(kn, sizeof(w->key) - 1); /* cut: for messages only */
  memcpy(w->key, key, kn);
  w->key[kn] = '\0';
  c->nw_len++;
  c->nq++;
  if (c->nw_len == NOWAIT_MAX || c->enc.len >= NOWAIT_MAX_BYTES)
    return rdzv_flush(c, c->io_timeout_ms);
  return 0;
}

int rdzv_flush(rdzv_client_t *c, int timeout_ms) {
  int64_t deadline = op_deadline(c, timeout_ms);
  int rc;
  if (c == NULL)
    return RDZV_EINVAL;
  c->last_error[0] = '\0';
  if (c->fd < 0) {
    rdzv__set_error(c, "connection to %s is closed", c->endpoint);
    return RDZV_ECLOSED;
  }
  if ((c->features & PROTO_FEAT_SETQ) && c->nw_len > 0) {
    /* Sets answered only when they fail: a PING behind them, whose reply
     * comes after every failure's. */
    reply_t r;
    uint64_t id = req_begin(c, PROTO_OP_PING, 0);
    rc = rpc(c, id, deadline, &r);
    reply_done(c, &r);
    return rc;
  }
  if (c->nq > 0) {
    if ((rc = send_built(c, deadline)) != 0)
      return rc;
  }
  while (c->nw_len > 0) {
    const uint8_t *body;
    uint32_t len;
    proto_msg_t m;
    if ((rc = read_frame(c, deadline, &body, &len)) != 0)
      return rpc_io_error(c, rc);
    if (proto_decode(body, len, &c->lim, &m) != 0) {
      rdzv__set_error(c, "malformed reply from %s", c->endpoint);
      return rpc_io_error(c, RDZV_EPROTO);
    }
    rc = nowait_reply(c, &m);
    proto_msg_free(&m);
    if (rc < 0)
      return rpc_io_error(c, rc);
    frame_consume(c, len);
  }
  return nowait_take_error(c);
}

int rdzv_progress(rdzv_client_t *c, int rank, int64_t step, int timeout_ms) {
  return rdzv_progress_ex(c, rank, step, NULL, timeout_ms);
}

int rdzv_progress_ex(rdzv_client_t *c, int rank, int64_t step,
                     const rdzv_scalars_t *s, int timeout_ms) {
  char key[64], val[MSG_PROGRESS_MAX];
  const char *tag;
  rdzv_env_t env;
  struct timespec ts;
  int n;
  if (c == NULL || step < 0 || rank < -1)
    return RDZV_EINVAL;
  rdzv_env_parse(NULL, &env, NULL, 0);
  if (rank == -1) {
    if (env.rank < 0)
      return RDZV_ENOENV;
    rank = env.rank;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(key, sizeof(key), RDZV_PROGRESS_PREFIX "%d", rank);
  /* The agent's secret for this worker, when it set one: values without
   * it cannot arm hang detection (docs/launcher.md#hangs). */
  tag = env.progress_tag;
  if (tag == NULL || strlen(tag) >= sizeof(((msg_progress_t *)0)->tag) ||
      strchr(tag, ' ') != NULL)
    tag = "";
  if (s == NULL || s->has == 0) {
    /* The bare step (and the tag): every agent release reads it. */
    n = snprintf(val, sizeof(val), "%lld %lld%s%s", (long long)step,
                 (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                 tag[0] ? " " : "", tag);
  } else {
    msg_progress_t m;
    msg_progress_init(&m);
    m.step = step;
    m.time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    lu_strlcpy(m.tag, tag, sizeof(m.tag));
#define TAKE(bit, f)                                                           \
  if (s->has & (bit)) {                                                        \
    m.f = s->f;                                                                \
    m.has_##f = 1;                                                             \
  }
    TAKE(RDZV_HAS_LOSS, loss)
    TAKE(RDZV_HAS_GRAD_NORM, grad_norm)
    TAKE(RDZV_HAS_LR, lr)
    TAKE(RDZV_HAS_STEP_TIME, step_time)
    TAKE(RDZV_HAS_TOKENS, tokens)
    TAKE(RDZV_HAS_TOTAL_STEPS, total_steps)
    TAKE(RDZV_HAS_COMPUTE_TIME, compute_time)
#undef TAKE
    if ((n = (int)msg_progress_encode(&m, val, sizeof(val))) == 0)
      return RDZV_EINVAL;
  }
  return rdzv_set(c, key, val, (size_t)n, timeout_ms);
}

int rdzv_append(rdzv_client_t *c, const char *key, const void *val, size_t len,
                int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!key_ok(c, key) || (val == NULL && len))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_APPEND, 2);
  proto_pack_str(&c->enc.pk, key);
  proto_pack_bytes(&c->enc.pk, val, len);
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_get(rdzv_client_t *c, const char *key, void **val, size_t *len,
             int timeout_ms) {
  reply_t r;
  uint64_t id;
  const char *p;
  size_t n, kn;
  int rc;
  if (!key_len(c, key, &kn) || val == NULL)
    return RDZV_EINVAL;
  if (c->nq == 0)
    proto_enc_reset(&c->enc);
  id = c->next_id + 1;
  if ((rc = proto_enc_key_int(&c->enc, PROTO_REQUEST, id, PROTO_OP_GET, key,
                              kn, timeout_ms)) != 0)
    return rc;
  c->next_id = id;
  rc = rpc(c, id, timeout_ms == 0 ? deadline_after(c->io_timeout_ms)
                                  : wait_deadline(c, timeout_ms),
           &r);
  if (rc == 0) {
    if (proto_arg_bytes(&r.m, 0, &p, &n) != 0)
      rc = RDZV_EPROTO;
    else if ((*val = dup_value(p, n)) == NULL)
      rc = RDZV_ENOMEM;
    else if (len)
      *len = n;
  }
  reply_done(c, &r);
  return rc;
}

static void pack_keys(rdzv_client_t *c, const char *const *keys, size_t n) {
  msgpack_pack_array(&c->enc.pk, n);
  for (size_t i = 0; i < n; i++)
    proto_pack_str(&c->enc.pk, keys[i]);
}

static int keys_ok(rdzv_client_t *c, const char *const *keys, size_t n) {
  if (keys == NULL && n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!key_ok(c, keys[i]))
      return 0;
  return n <= UINT32_MAX;
}

int rdzv_check(rdzv_client_t *c, const char *const *keys, size_t n,
               int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!keys_ok(c, keys, n))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_CHECK, 1);
  pack_keys(c, keys, n);
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0) {
    if (r.m.nargs < 1 || r.m.args[0].type != MSGPACK_OBJECT_BOOLEAN)
      rc = RDZV_EPROTO;
    else
      rc = r.m.args[0].via.boolean ? 1 : 0;
  }
  reply_done(c, &r);
  return rc;
}

int rdzv_wait(rdzv_client_t *c, const char *const *keys, size_t n,
              int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!keys_ok(c, keys, n))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_WAIT, 2);
  pack_keys(c, keys, n);
  msgpack_pack_int64(&c->enc.pk, timeout_ms);
  rc = rpc(c, id, wait_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_add(rdzv_client_t *c, const char *key, int64_t delta, int64_t *result,
             int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  int64_t v;
  if (!key_ok(c, key))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_ADD, 2);
  proto_pack_str(&c->enc.pk, key);
  msgpack_pack_int64(&c->enc.pk, delta);
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0) {
    if (proto_arg_i64(&r.m, 0, &v) != 0)
      rc = RDZV_EPROTO;
    else if (result)
      *result = v;
  }
  reply_done(c, &r);
  return rc;
}

int rdzv_compare_set(rdzv_client_t *c, const char *key, const void *expected,
                     size_t exp_len, const void *desired, size_t des_len,
                     void **current, size_t *cur_len, int *swapped,
                     int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!key_ok(c, key) || (desired == NULL && des_len))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_CAS, 3);
  proto_pack_str(&c->enc.pk, key);
  if (expected)
    proto_pack_bytes(&c->enc.pk, expected, exp_len);
  else
    msgpack_pack_nil(&c->enc.pk);
  proto_pack_bytes(&c->enc.pk, desired ? desired : "", des_len);
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0) {
    const char *p = NULL;
    size_t n = 0;
    int nil = 0;
    if (proto_arg_bytes_or_nil(&r.m, 0, &p, &n, &nil) != 0 || r.m.nargs < 2 ||
        r.m.args[1].type != MSGPACK_OBJECT_BOOLEAN) {
      rc = RDZV_EPROTO;
    } else {
      if (swapped)
        *swapped = r.m.args[1].via.boolean;
      if (cur_len)
        *cur_len = n;
      if (current) {
        *current = nil ? NULL : dup_value(p, n);
        if (!nil && *current == NULL)
          rc = RDZV_ENOMEM;
      }
    }
  }
  reply_done(c, &r);
  return rc;
}

static int bool_reply(rdzv_client_t *c, uint64_t id, int timeout_ms) {
  reply_t r;
  int rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0) {
    if (r.m.nargs < 1 || r.m.args[0].type != MSGPACK_OBJECT_BOOLEAN)
      rc = RDZV_EPROTO;
    else
      rc = r.m.args[0].via.boolean ? 1 : 0;
  }
  reply_done(c, &r);
  return rc;
}

int rdzv_delete(rdzv_client_t *c, const char *key, int timeout_ms) {
  uint64_t id;
  if (!key_ok(c, key))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_DELETE, 1);
  proto_pack_str(&c->enc.pk, key);
  return bool_reply(c, id, timeout_ms);
}

int rdzv_num_keys(rdzv_client_t *c, int64_t *n, int timeout_ms) {
  reply_t r;
  uint64_t id = req_begin(c, PROTO_OP_NUMKEYS, 0);
  int rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0 && (proto_arg_i64(&r.m, 0, n) != 0))
    rc = RDZV_EPROTO;
  reply_done(c, &r);
  return rc;
}

/* The values of an MGET's reply into vals[n]. RET rc, or what failed. */
static int mget_values(rdzv_client_t *c, reply_t *r, int rc, size_t n,
                       rdzv_value_t *vals) {
  const msgpack_object *items;
  uint32_t cnt;
  if (rc == 0) {
    if (proto_arg_array(&r->m, 0, &items, &cnt) != 0 || cnt != n) {
      rc = RDZV_EPROTO;
    } else {
      size_t i;
      for (i = 0; i < n; i++) {
        const char *p;
        size_t len;
        if (proto_obj_bytes(&items[i], &p, &len) != 0 ||
            (vals[i].data = dup_value(p, len)) == NULL) {
          rc = RDZV_ENOMEM;
          break;
        }
        vals[i].len = len;
      }
      if (rc != 0)
        while (i-- > 0) {
          free(vals[i].data);
          vals[i].data = NULL;
        }
    }
  }
  reply_done(c, r);
  return rc;
}

int rdzv_multi_get(rdzv_client_t *c, const char *const *keys, size_t n,
                   rdzv_value_t *vals, int timeout_ms) {
  reply_t r;
  uint64_t id;
  if (!keys_ok(c, keys, n) || (vals == NULL && n))
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_MGET, 2);
  pack_keys(c, keys, n);
  msgpack_pack_int64(&c->enc.pk, timeout_ms);
  return mget_values(c, &r, rpc(c, id, wait_deadline(c, timeout_ms), &r), n,
                     vals);
}

int rdzv__set_multi_get(rdzv_client_t *c, const char *key, const void *val,
                        size_t len, const char *const *keys, size_t n,
                        rdzv_value_t *vals, int timeout_ms) {
  reply_t r;
  uint64_t set_id, id;
  int64_t deadline = wait_deadline(c, timeout_ms);
  int rc;
  if (!key_ok(c, key) || (val == NULL && len) || !keys_ok(c, keys, n) ||
      (vals == NULL && n))
    return RDZV_EINVAL;
  set_id = req_begin(c, PROTO_OP_SET, 2);
  proto_pack_str(&c->enc.pk, key);
  proto_pack_bytes(&c->enc.pk, val, len);
  if ((rc = proto_enc_end(&c->enc)) != 0)
    return rc;
  id = req_more(c, PROTO_OP_MGET, 2);
  pack_keys(c, keys, n);
  msgpack_pack_int64(&c->enc.pk, timeout_ms);
  if ((rc = rpc_send(c, deadline)) != 0)
    return rc;
  /* The SET's reply comes first. When it failed, the MGET's comes later
   * and is skipped by the next call, as a late reply is. */
  rc = rpc_recv(c, set_id, op_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  if (rc != 0)
    return rc;
  return mget_values(c, &r, rpc_recv(c, id, deadline, &r), n, vals);
}

int rdzv_multi_set(rdzv_client_t *c, const char *const *keys,
                   const void *const *vals, const size_t *lens, size_t n,
                   int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!keys_ok(c, keys, n) || ((vals == NULL || lens == NULL) && n) ||
      n > UINT32_MAX / 2)
    return RDZV_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (vals[i] == NULL && lens[i] != 0) /* as rdzv_set */
      return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_MSET, 1);
  msgpack_pack_array(&c->enc.pk, 2 * n);
  for (size_t i = 0; i < n; i++) {
    proto_pack_str(&c->enc.pk, keys[i]);
    proto_pack_bytes(&c->enc.pk, vals[i] ? vals[i] : "", lens[i]);
  }
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_barrier(rdzv_client_t *c, const char *name, uint32_t count,
                 int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  if (!key_ok(c, name) || count == 0)
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_BARRIER, 3);
  proto_pack_str(&c->enc.pk, name);
  msgpack_pack_uint32(&c->enc.pk, count);
  msgpack_pack_int64(&c->enc.pk, timeout_ms);
  rc = rpc(c, id, wait_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_ping(rdzv_client_t *c, int timeout_ms) {
  reply_t r;
  uint64_t id = req_begin(c, PROTO_OP_PING, 0);
  int rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  reply_done(c, &r);
  return rc;
}

int rdzv_list(rdzv_client_t *c, const char *prefix, char ***keys, size_t *n,
              int timeout_ms) {
  reply_t r;
  uint64_t id;
  int rc;
  const msgpack_object *items;
  uint32_t cnt;
  if (prefix == NULL || !key_ok(c, prefix) || keys == NULL || n == NULL)
    return RDZV_EINVAL;
  id = req_begin(c, PROTO_OP_LIST, 1);
  proto_pack_str(&c->enc.pk, prefix);
  rc = rpc(c, id, op_deadline(c, timeout_ms), &r);
  if (rc == 0) {
    if (proto_arg_array(&r.m, 0, &items, &cnt) != 0) {
      rc = RDZV_EPROTO;
    } else if ((*keys = calloc(cnt ? cnt : 1, sizeof(char *))) == NULL) {
      rc = RDZV_ENOMEM;
    } else {
      for (uint32_t i = 0; i < cnt && rc == 0; i++) {
        const char *p;
        size_t len;
        if (proto_obj_bytes(&items[i], &p, &len) != 0)
          rc = RDZV_EPROTO;
        else if (((*keys)[i] = dup_value(p, len)) == NULL)
          rc = RDZV_ENOMEM;
      }
      if (rc != 0) {
        rdzv_free_keys(*keys, cnt);
        *keys = NULL;
      } else {
        *n = cnt;
      }
    }
  }
  reply_done(c, &r);
  return rc;
}

void rdzv_free_keys(char **keys, size_t n) {
  for (size_t i = 0; keys && i < n; i++)
    free(keys[i]);
  free(keys);
}
