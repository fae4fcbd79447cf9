/* rt_mesh.c - the CPU collectives: one TCP connection between every pair
 * of ranks, addresses and nonces exchanged through the store.
 *
 * All-reduce (sum) with a fixed order: the buffer is cut into one chunk per
 * rank; every rank sends chunk r to rank r (a direct reduce-scatter), rank
 * r adds the W contributions of its chunk in rank order, ((g0 + g1) + g2)
 * + ..., then sends the sum to every rank (all-gather). Each rank sends and
 * receives (W-1)/W of the buffer twice, as a ring does, and every element
 * is summed in the same order whatever the chunking: the result is bitwise
 * that of accumulating the ranks' contributions one after the other.
 * The two halves are collectives of their own (rt_reduce_scatter,
 * rt_allgather: ZeRO-1's), with parts of any sizes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "rt_int.h"

#define HELLO_MAGIC 0x52544d32u /* "RTM2": the hello, then the answer */
#define ACK_MAGIC 0x52544d41u   /* "RTMA": the connector has the answer */
#define HELLO_MS 10000          /* an accepted connection's time to say hello */
#define SUM_BLOCK 1024
#define PIECE ((size_t)1 << 18) /* floats: 1 MiB a rank */

struct rt_mesh_s {
  const rt_who_t *who;
  int rank, world, timeout_ms;
  int *fd;       /* fd[r]: connection to rank r, -1 for self */
  float *scratch; /* the contributions to this rank's chunk */
  size_t scratch_cap;
  struct pollfd *pfd;
  int *pfd_rank;
};

/* The handshake a connecting rank sends: who it is, and the listener's
 * nonce, read from the store (only job members can read it). */
typedef struct hello_s {
  uint32_t magic, rank;
  uint64_t round, nonce;
} hello_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- addresses ---------------------------------------------------------------- */

/* The host part of the store's endpoint: the address other nodes reach
 * this one by is the one this node uses to reach the store. */
static int store_host(char *host, size_t cap) {
  rdzv_env_t env;
  lu_endpoint_t ep;
  int rc;
  rdzv_env_parse(NULL, &env, NULL, 0);
  if (env.endpoint == NULL) {
    snprintf(host, cap, "%s", env.master_addr ? env.master_addr : "127.0.0.1");
    return 0;
  }
  if ((rc = lu_endpoint_parse(env.endpoint, -1, &ep)) != 0)
    return rc;
  snprintf(host, cap, "%s", ep.is_unix ? "127.0.0.1" : ep.host);
  return 0;
}

/* This rank's address for its listener: LAUNCH_RT_ADDR when set, else the
 * source address of a route to the store's host. */
static int local_addr(const rt_who_t *who, struct sockaddr_storage *ss,
                      socklen_t *len) {
  const char *want = getenv("LAUNCH_RT_ADDR");
  char host[256];
  struct addrinfo hints, *res = NULL;
  int rc, fd;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_DGRAM;
  if (want && *want) {
    hints.ai_flags = AI_NUMERICHOST;
    if ((rc = getaddrinfo(want, NULL, &hints, &res)) != 0) {
      rt__logf(who, "LAUNCH_RT_ADDR=%s is not a numeric address: %s", want,
               gai_strerror(rc));
      return RDZV_EADDR;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
  }
  if ((rc = store_host(host, sizeof(host))) != 0) {
    rt__logf(who, "LAUNCH_RDZV_ENDPOINT=%s does not parse: use HOST:PORT",
             getenv("LAUNCH_RDZV_ENDPOINT"));
    return rc;
  }
  if ((rc = getaddrinfo(host, "9", &hints, &res)) != 0) {
    rt__logf(who, "getaddrinfo(%s) failed: %s", host, gai_strerror(rc));
    return RDZV_ERESOLVE;
  }
  /* a UDP connect sends nothing: it only picks the route */
  fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
      getsockname(fd, (struct sockaddr *)ss, len) != 0) {
    rc = -errno;
    rt__logf(who, "no route to the store's host %s: %s (set LAUNCH_RT_ADDR "
                  "to this node's address)", host, strerror(errno));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(res);
    return rc;
  }
  close(fd);
  freeaddrinfo(res);
  return 0;
}

static void set_port(struct sockaddr_storage *ss, int port) {
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

/* ---- socket helpers --------------------------------------------------------------- */

/* Write or read exactly n bytes on a blocking socket, within the deadline
 * (poll, then one call). RET 0, -ETIMEDOUT, RDZV_ECLOSED, -errno. */
static int io_all(int fd, void *buf, size_t n, int writing, int64_t deadline) {
  char *p = buf;
  while (n > 0) {
    struct pollfd pf = {fd, writing ? POLLOUT : POLLIN, 0};
    int64_t left = deadline - now_ms();
    ssize_t k;
    if (left <= 0)
      return -ETIMEDOUT;
    if (poll(&pf, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
      return -errno;
    if (pf.revents == 0)
      continue;
    k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0)
      return RDZV_ECLOSED;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return -errno;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int tune(int fd) {
  int one = 1, fl = fcntl(fd, F_GETFL);
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return -errno;
  return 0;
}

/* ---- open / close -------------------------------------------------------------------- */

void rt__mesh_close(rt_mesh_t *m) {
  if (m == NULL)
    return;
  for (int r = 0; m->fd && r < m->world; r++)
    if (m->fd[r] >= 0)
      close(m->fd[r]);
  free(m->fd);
  free(m->scratch);
  free(m->pfd);
  free(m->pfd_rank);
  free(m);
}

/* "ADDR PORT NONCE" -> address and nonce */
int rt__mesh_parse_peer(const char *v, struct sockaddr_storage *ss,
                      socklen_t *len, uint64_t *nonce) {
  char addr[INET6_ADDRSTRLEN + 1];
  unsigned port;
  struct addrinfo hints, *res = NULL;
  if (sscanf(v, "%46s %u %" SCNu64, addr, &port, nonce) != 3 || port == 0 ||
      port > 65535)
    return RDZV_EPROTO;
  memset(&hints, 0, sizeof(hints));
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(addr, NULL, &hints, &res) != 0)
    return RDZV_EPROTO;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  set_port(ss, (int)port);
  return 0;
}

/* A connection accepted but not yet a peer's: its hello comes in, then,
 * after the answer, the connector's ack. */
typedef struct pending_s {
  int fd, peer;     /* peer: -1 until a valid hello */
  size_t got;       /* bytes of the hello, then of the ack */
  hello_t h;
  int64_t deadline; /* for the hello; a valid one waits for its ack */
} pending_t;

/* Read what has come of p's hello or ack. RET 1 when it is whole, 0 when
 * more is to come, -1 when the connection is to be dropped. */
static int pending_read(pending_t *p) {
  ssize_t k = recv(p->fd, (char *)&p->h + p->got, sizeof(p->h) - p->got, 0);
  if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
    return -1;
  if (k > 0)
    p->got += (size_t)k;
  return p->got == sizeof(p->h);
}

/* Accept the connections of the ranks above this one. Every connection
 * that is not yet a peer's is polled with the others, so none holds up
 * the rest: one that sends nothing (a port scanner, a health check) is
 * dropped after HELLO_MS, one whose hello is wrong (not from this job and
 * round) at once. A peer is registered only on its ack, which its rank
 * sends once it has the answer: a connection its rank gave up on (it
 * waited too long for the answer, closed, and connects again) ends in
 * EOF instead of becoming the peer's, and a newer hello from the same
 * rank replaces an older one still waiting for its ack. */
int rt__mesh_accept(rt_mesh_t *m, int lfd, int64_t round, uint64_t nonce,
                    int64_t deadline) {
  int need = m->world - 1 - m->rank, cap = m->world + 16, n = 0, rc = 0;
  pending_t *pend = calloc((size_t)cap, sizeof(*pend));
  struct pollfd *pf = calloc((size_t)cap + 1, sizeof(*pf));
  if (pend == NULL || pf == NULL) {
    rc = RDZV_ENOMEM;
    goto done;
  }
  while (need > 0) {
    int64_t now = now_ms(), left = deadline - now;
    if (left <= 0) {
      for (int r = m->rank + 1; r < m->world; r++)
        if (m->fd[r] < 0) {
          rt__logf(m->who, "rank %d did not connect within %d s: did it "
                   "start? (see its log)", r, m->timeout_ms / 1000);
          break;
        }
      rc = -ETIMEDOUT;
      goto done;
    }
    /* drop the connections that are to go (fd -1) or late with a hello */
    for (int i = 0; i < n;)
      if (pend[i].fd < 0 || (pend[i].peer < 0 && pend[i].deadline <= now)) {
        if (pend[i].fd >= 0)
          close(pend[i].fd);
        pend[i] = pend[--n];
      } else {
        i++;
      }
    pf[0] = (struct pollfd){lfd, POLLIN, 0};
    for (int i = 0; i < n; i++)
      pf[i + 1] = (struct pollfd){pend[i].fd, POLLIN, 0};
    if (poll(pf, (nfds_t)n + 1, (int)(left > 200 ? 200 : left)) <= 0)
      continue;
    for (int i = 0; i < n; i++) {
      pending_t *p = &pend[i];
      int k;
      if (pf[i + 1].revents == 0 || (k = pending_read(p)) == 0)
        continue;
      if (k < 0) {
        close(p->fd);
        p->fd = -1;
      } else if (p->peer < 0) {
        hello_t *h = &p->h;
        if (h->magic != HELLO_MAGIC || h->nonce != nonce ||
            (int64_t)h->round != round || h->rank <= (uint32_t)m->rank ||
            h->rank >= (uint32_t)m->world || m->fd[h->rank] >= 0) {
          close(p->fd);
          p->fd = -1;
          continue;
        }
        /* the rank gave up on an older connection if it has one here */
        for (int j = 0; j < n; j++)
          if (j != i && pend[j].fd >= 0 && pend[j].peer == (int)h->rank) {
            close(pend[j].fd);
            pend[j].fd = -1;
          }
        /* the answer tells the connecting rank it reached this job's
         * rank; 24 bytes fit any new socket's send buffer */
        p->peer = (int)h->rank;
        p->got = 0;
        h->rank = (uint32_t)m->rank;
        if (send(p->fd, h, sizeof(*h), MSG_NOSIGNAL) != (ssize_t)sizeof(*h)) {
          close(p->fd);
          p->fd = -1;
        }
      } else {
        if (p->h.magic != ACK_MAGIC || p->h.nonce != nonce ||
            p->h.rank != (uint32_t)p->peer) {
          close(p->fd);
        } else {
          m->fd[p->peer] = p->fd;
          need--;
        }
        p->fd = -1;
      }
    }
    if (pf[0].revents != 0) {
      int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        continue;
      if (n == cap) { /* full: the oldest without a valid hello goes */
        int old = -1;
        for (int i = 0; i < n; i++)
          if (pend[i].fd >= 0 && pend[i].peer < 0 &&
              (old < 0 || pend[i].deadline < pend[old].deadline))
            old = i;
        if (old < 0) {
          close(fd);
          continue;
        }
        close(pend[old].fd);
        pend[old] = pend[--n];
      }
      pend[n++] = (pending_t){fd, -1, 0, {0}, now_ms() + HELLO_MS};
    }
  }
done:
  for (int i = 0; pend && i < n; i++)
    if (pend[i].fd >= 0)
      close(pend[i].fd);
  free(pend);
  free(pf);
  return rc;
}

/* Connect to rank r: read its address from the store, connect, exchange
 * the handshake. An address left by an earlier job with the same id and
 * round (one that crashed while starting) refuses or does not answer: read
 * the key again until the new owner has written it. */
static int connect_peer(rt_mesh_t *m, rdzv_client_t *store, int r,
                        int64_t round, int64_t deadline) {
  char key[128], last[160] = "";
  int rc = -ETIMEDOUT;
  snprintf(key, sizeof(key), "rt/%" PRId64 "/addr/%d", round, r);
  while (now_ms() < deadline) {
    struct sockaddr_storage ps;
    socklen_t plen = sizeof(ps);
    hello_t h = {HELLO_MAGIC, (uint32_t)m->rank, (uint64_t)round, 0}, a;
    void *v = NULL;
    size_t len = 0;
    int fd;
    rc = rdzv_get(store, key, &v, &len, (int)(deadline - now_ms()));
    if (rc != 0) {
      rt__logf(m->who, "store: rank %d's address did not appear within %d s: "
               "%s (did it start? see its log)", r, m->timeout_ms / 1000,
               rdzv_strerror(rc));
      return rc;
    }
    snprintf(last, sizeof(last), "%s", (char *)v);
    rc = rt__mesh_parse_peer(v, &ps, &plen, &h.nonce);
    rdzv_free(v);
    if (rc != 0) {
      rt__logf(m->who, "store: rank %d's address \"%s\" does not parse", r,
               last);
      return rc;
    }
    fd = socket(ps.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -errno;
    if (connect(fd, (struct sockaddr *)&ps, plen) == 0 && !lu_self_connected(fd) &&
        io_all(fd, &h, sizeof(h), 1, now_ms() + 5000) == 0 &&
        io_all(fd, &a, sizeof(a), 0, now_ms() + 5000) == 0 &&
        a.magic == HELLO_MAGIC && a.rank == (uint32_t)r && a.nonce == h.nonce) {
      /* the ack: rank r takes the connection for this rank's only now, so
       * one this rank gave up on (closed) is never taken */
      h.magic = ACK_MAGIC;
      if (io_all(fd, &h, sizeof(h), 1, now_ms() + 5000) == 0) {
        m->fd[r] = fd;
        return 0;
      }
    }
    rc = errno ? -errno : RDZV_EPROTO;
    close(fd);
    usleep(50000);
  }
  rt__logf(m->who, "connecting to rank %d at %s failed: %s", r,
           last[0] ? last : "(no address)", rdzv_strerror(rc));
  return -ETIMEDOUT;
}

int rt__mesh_new(const rt_who_t *who, int world, int timeout_ms,
                 rt_mesh_t **out) {
  rt_mesh_t *m = calloc(1, sizeof(*m));
  *out = NULL;
  if (m == NULL)
    return RDZV_ENOMEM;
  m->who = who;
  m->rank = who->rank;
  m->world = world;
  m->timeout_ms = timeout_ms;
  if ((m->fd = malloc((size_t)world * sizeof(int))) != NULL)
    for (int r = 0; r < world; r++)
      m->fd[r] = -1; /* before any exit: the close below closes what is >= 0 */
  m->pfd = calloc((size_t)world, sizeof(*m->pfd));
  m->pfd_rank = calloc((size_t)world, sizeof(int));
  if (!m->fd || !m->pfd || !m->pfd_rank) {
    rt__mesh_close(m);
    return RDZV_ENOMEM;
  }
  *out = m;
  return 0;
}

int *rt__mesh_fds(rt_mesh_t *m) { return m->fd; }

int rt__mesh_open(rdzv_client_t *store, const rt_who_t *who, int world,
                  int64_t round, int timeout_ms, rt_mesh_t **out) {
  rt_mesh_t *m;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char key[128], val[128], host[INET6_ADDRSTRLEN];
  uint64_t nonce = 0;
  int64_t deadline = now_ms() + timeout_ms;
  int lfd = -1, rc, port;
  if ((rc = rt__mesh_new(who, world, timeout_ms, &m)) != 0)
    return rc;
  if ((rc = local_addr(who, &ss, &len)) != 0)
    goto done;
  set_port(&ss, 0);
  if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
    rc = -errno;
    rt__logf(who, "getrandom failed: %s", strerror(errno));
    goto done;
  }
  lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, len) != 0 ||
      listen(lfd, world < 4096 ? world : 4096) != 0 ||
      getsockname(lfd, (struct sockaddr *)&ss, &len) != 0) {
    rc = -errno;
    rt__logf(who, "cannot listen for the other ranks: %s", strerror(errno));
    goto done;
  }
  if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  } else {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  }
  snprintf(key, sizeof(key), "rt/%" PRId64 "/addr/%d", round, m->rank);
  snprintf(val, sizeof(val), "%s %d %" PRIu64, host, port, nonce);
  if ((rc = rdzv_set(store, key, val, strlen(val), timeout_ms)) != 0) {
    rt__logf(who, "store: setting %s failed: %s", key, rdzv_strerror(rc));
    goto done;
  }
  /* connect to the ranks below, then take the connections of those above */
  for (int r = 0; r < m->rank; r++)
    if ((rc = connect_peer(m, store, r, round, deadline)) != 0)
      goto done;
  if ((rc = rt__mesh_accept(m, lfd, round, nonce, deadline)) != 0)
    goto done;
  /* every rank that needed the address has connected: a later job with
   * the same id and round on the same server must not find it */
  snprintf(key, sizeof(key), "rt/%" PRId64 "/addr/%d", round, m->rank);
  if ((rc = rdzv_delete(store, key, timeout_ms)) < 0) {
    rt__logf(who, "store: deleting %s failed: %s", key, rdzv_strerror(rc));
    goto done;
  }
  rc = 0;
  for (int r = 0; r < world; r++)
    if (m->fd[r] >= 0 && (rc = tune(m->fd[r])) != 0) {
      rt__logf(who, "socket options for rank %d: %s", r, strerror(-rc));
      goto done;
    }
done:
  if (lfd >= 0)
    close(lfd);
  if (rc != 0) {
    rt__mesh_close(m);
    return rc;
  }
  *out = m;
  return 0;
}

/* ---- the exchange engine ---------------------------------------------------------------- */

/* What one peer sends and receives in one exchange. */
typedef struct xfer_s {
  const char *sbuf;
  size_t slen, sdone;
  char *rbuf;
  size_t rlen, rdone;
} xfer_t;

static int peer_failed(rt_mesh_t *m, int r, int rc) {
  if (rc == RDZV_ECLOSED || rc == -ECONNRESET || rc == -EPIPE)
    rt__logf(m->who, "rank %d closed its connection in a collective (%s): "
             "it failed or exited (see its log)", r, rdzv_strerror(rc));
  else
    rt__logf(m->who, "connection to rank %d failed in a collective: %s", r,
             rdzv_strerror(rc));
  return rc;
}

/* Move every peer's bytes, all at once (poll), until done. Gives up when
 * nothing moves for timeout_ms. */
static int exchange(rt_mesh_t *m, xfer_t *x) {
  int64_t last = now_ms();
  for (;;) {
    int n = 0, k;
    for (int r = 0; r < m->world; r++) {
      short ev = 0;
      if (r == m->rank)
        continue;
      if (x[r].sdone < x[r].slen)
        ev |= POLLOUT;
      if (x[r].rdone < x[r].rlen)
        ev |= POLLIN;
      if (ev) {
        m->pfd[n].fd = m->fd[r];
        m->pfd[n].events = ev;
        m->pfd[n].revents = 0;
        m->pfd_rank[n++] = r;
      }
    }
    if (n == 0)
      return 0;
    k = poll(m->pfd, (nfds_t)n, 1000);
    if (k < 0 && errno != EINTR)
      return -errno;
    if (k <= 0) {
      if (now_ms() - last > m->timeout_ms) {
        int r = m->pfd_rank[0];
        rt__logf(m->who, "no progress in a collective for %d s, waiting on "
                 "rank %d (stopped or stuck? see its log)",
                 m->timeout_ms / 1000, r);
        return -ETIMEDOUT;
      }
      continue;
    }
    for (int i = 0; i < n; i++) {
      int r = m->pfd_rank[i];
      xfer_t *t = &x[r];
      short re = m->pfd[i].revents;
      if ((re & POLLOUT) && t->sdone < t->slen) {
        ssize_t s = send(m->fd[r], t->sbuf + t->sdone, t->slen - t->sdone,
                         MSG_NOSIGNAL);
        if (s < 0 && errno != EAGAIN && errno != EINTR)
          return peer_failed(m, r, -errno);
        if (s > 0) {
          t->sdone += (size_t)s;
          last = now_ms();
        }
      }
      if ((re & (POLLIN | POLLHUP | POLLERR)) && t->rdone < t->rlen) {
        ssize_t s = recv(m->fd[r], t->rbuf + t->rdone, t->rlen - t->rdone, 0);
        if (s == 0)
          return peer_failed(m, r, RDZV_ECLOSED);
        if (s < 0 && errno != EAGAIN && errno != EINTR)
          return peer_failed(m, r, -errno);
        if (s > 0) {
          t->rdone += (size_t)s;
          last = now_ms();
        }
      } else if ((re & (POLLHUP | POLLERR)) && !(re & POLLOUT)) {
        return peer_failed(m, r, RDZV_ECLOSED);
      }
    }
  }
}

static size_t chunk_lo(size_t count, int world, int r) {
  return (size_t)((unsigned __int128)count * (unsigned)r / (unsigned)world);
}

/* Rank r's part of buf is [part[r], part[r+1]): rank r receives every
 * rank's copy of it (a direct reduce-scatter) and adds them in rank order,
 * block by block, into buf. The parts move in pieces of at most
 * PIECE elements, so that the scratch (a piece from every rank) stays
 * small however big the parts are (ZeRO-1 reduce-scatters the whole
 * gradient at once). */
int rt__mesh_reduce_scatter(rt_mesh_t *m, float *buf, const size_t *part) {
  int W = m->world, me = m->rank, rc = 0;
  size_t lo = part[me], mine = part[me + 1] - lo, most = 0;
  size_t cap = mine < PIECE ? mine : PIECE, need = cap * (size_t)W;
  xfer_t *x;
  const float **src;
  if (W == 1)
    return 0;
  if (need > m->scratch_cap) {
    float *s = realloc(m->scratch, need * sizeof(float));
    if (s == NULL)
      return RDZV_ENOMEM;
    m->scratch = s;
    m->scratch_cap = need;
  }
  x = calloc((size_t)W, sizeof(*x));
  src = calloc((size_t)W, sizeof(*src));
  if (x == NULL || src == NULL) {
    free(x);
    free(src);
    return RDZV_ENOMEM;
  }
  for (int r = 0; r < W; r++)
    if (part[r + 1] - part[r] > most)
      most = part[r + 1] - part[r];
  /* piece k of every part, all ranks at once, until the biggest is done */
  for (size_t p0 = 0; p0 < most && rc == 0; p0 += PIECE) {
    size_t got = mine > p0 ? mine - p0 : 0;
    if (got > PIECE)
      got = PIECE;
    for (int r = 0; r < W; r++) {
      size_t len = part[r + 1] - part[r];
      len = len > p0 ? len - p0 : 0;
      memset(&x[r], 0, sizeof(x[r]));
      if (r == me)
        continue;
      x[r].sbuf = (const char *)(buf + part[r] + p0);
      x[r].slen = (len < PIECE ? len : PIECE) * sizeof(float);
      x[r].rbuf = (char *)(m->scratch + (size_t)r * cap);
      x[r].rlen = got * sizeof(float);
    }
    if ((rc = exchange(m, x)) != 0)
      break;
    for (int r = 0; r < W; r++)
      src[r] = r == me ? buf + lo + p0 : m->scratch + (size_t)r * cap;
    for (size_t b0 = 0; b0 < got; b0 += SUM_BLOCK) {
      size_t n = got - b0 < SUM_BLOCK ? got - b0 : SUM_BLOCK;
      float acc[SUM_BLOCK];
      memcpy(acc, src[0] + b0, n * sizeof(float));
      for (int r = 1; r < W; r++)
        for (size_t i = 0; i < n; i++)
          acc[i] += src[r][b0 + i];
      memcpy(buf + lo + p0 + b0, acc, n * sizeof(float));
    }
  }
  free(x);
  free(src);
  return rc;
}

/* Rank r's part [part[r], part[r+1]) (elements of esize bytes) goes to
 * every rank: a copy, no arithmetic. */
int rt__mesh_allgather(rt_mesh_t *m, void *buf, const size_t *part,
                       size_t esize) {
  int W = m->world, me = m->rank, rc;
  char *b = buf;
  xfer_t *x;
  if (W == 1)
    return 0;
  if ((x = calloc((size_t)W, sizeof(*x))) == NULL)
    return RDZV_ENOMEM;
  for (int r = 0; r < W; r++) {
    if (r == me)
      continue;
    x[r].sbuf = b + part[me] * esize;
    x[r].slen = (part[me + 1] - part[me]) * esize;
    x[r].rbuf = b + part[r] * esize;
    x[r].rlen = (part[r + 1] - part[r]) * esize;
  }
  rc = exchange(m, x);
  free(x);
  return rc;
}

int rt__mesh_allreduce(rt_mesh_t *m, float *buf, size_t count) {
  int W = m->world, rc;
  size_t *part;
  if (W == 1 || count == 0)
    return 0;
  if ((part = malloc(((size_t)W + 1) * sizeof(size_t))) == NULL)
    return RDZV_ENOMEM;
  for (int r = 0; r <= W; r++)
    part[r] = chunk_lo(count, W, r);
  if ((rc = rt__mesh_reduce_scatter(m, buf, part)) == 0)
    rc = rt__mesh_allgather(m, buf, part, sizeof(float));
  free(part);
  return rc;
}

int rt__mesh_broadcast(rt_mesh_t *m, void *buf, size_t bytes, int root) {
  xfer_t *x;
  int rc;
  if (m->world == 1 || bytes == 0)
    return 0;
  if ((x = calloc((size_t)m->world, sizeof(*x))) == NULL)
    return RDZV_ENOMEM;
  if (m->rank == root) {
    for (int r = 0; r < m->world; r++)
      if (r != root) {
        x[r].sbuf = buf;
        x[r].slen = bytes;
      }
  } else {
    x[root].rbuf = buf;
    x[root].rlen = bytes;
  }
  rc = exchange(m, x);
  free(x);
  return rc;
}
