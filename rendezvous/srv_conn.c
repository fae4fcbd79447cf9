/* srv_conn.c - the rendezvous server's connections: accepting them
 * (with the limits on how many), closing and freeing them. Moved out of
 * server.c (issue #25). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srv_int.h"


/* ---- connections -------------------------------------------------------------------- */


void srv__conn_free(conn_t *c) {
  srv_t *s = c->srv;
  list_unlink(&c->read_link); /* on its loop's thread */
  list_unlink(&c->written_link);
  list_unlink(&c->prep_link);
  if (c->dialect != NULL && c->dialect->pre_drop != NULL)
    c->dialect->pre_drop(c);
  srv__in_release(c);
  proto_enc_destroy(&c->out);
  tls_free(c->tls);
  c->magic = 0;
  free(c);
  srv__mem_update(s);
}

void srv__on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->srv;
  int closing;
  srv__trace_begin(s, "closed", c);
  srv__lock_urgent(s);
  srv__conn_free(c);
  /* srv_close waits for connections closed before it, too. */
  s->closing_conns--;
  closing = s->closing;
  if (!closing)
    srv__mem_released(s);
  srv__unlock(s);
  srv__trace_end(s);
  /* Only loop 0 finishes: the other loops were joined by then. */
  if (closing && srv__on_main(s))
    s->finish_close(s);
}

/* Take the connection out of every list and release what it holds;
 * RET 1 the first time. */
int srv__conn_teardown(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING)
    return 0;
  c->state = CONN_CLOSING;
  if (c->dialect && c->dialect->closed)
    c->dialect->closed(c);
  srv__job_detach(c);
  list_unlink(&c->dirty_link);
  list_unlink(&c->resume_link);
  list_unlink(&c->memwait_link);
  list_unlink(&c->preauth_link);
  list_unlink(&c->silent_link);
  list_remove(&c->link);
  if (c->paused)
    s->stats.paused--;
  if (c->tls_state == 1) {
    s->tls_handshaking--;
    if (c->addr)
      c->addr->ntls_hs--;
  }
  if (c->tls_state != 0)
    s->mem.conns -= SRV_TLS_COST;
  c->tls_state = 0;
  if (c->addr) {
    c->addr->nconns--;
    srv__addr_put(s, c->addr);
    c->addr = NULL;
  }
  s->mem.conns -= SRV_CONN_COST;
  s->mem.out -= c->out_charged;
  c->out_charged = 0;
  s->stats.conns_open--;
  return 1;
}

void srv__conn_close(conn_t *c) {
  srv_t *s = c->srv;
  if (!srv__conn_teardown(c))
    return;
  s->closing_conns++;
  if (!c->handle_ready)
    return; /* its loop frees it when it takes it from lp->incoming */
  if (srv__lp_here(c->lp)) {
    uv_close(&c->h.handle, srv__on_conn_closed);
  } else {
    list_insert_tail(&c->lp->closeq, &c->io_link);
    uv_async_send(&c->lp->async);
  }
}

static void peer_name(conn_t *c, uv_handle_t *h) {
  int len = sizeof(c->peer_addr);
  memset(&c->peer_addr, 0, sizeof(c->peer_addr));
  if (h->type == UV_NAMED_PIPE) {
    c->peer_addr.ss_family = AF_UNIX;
    lu_strlcpy(c->peer, "unix socket", sizeof(c->peer));
    return;
  }
  if (uv_tcp_getpeername((uv_tcp_t *)h, (struct sockaddr *)&c->peer_addr,
                         &len) != 0) {
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

/* Log a refused connection at most every 5 s. */
static void log_refused(srv_t *s, const char *fmt, ...) LU_PRINTF(2, 3);
static void log_refused(srv_t *s, const char *fmt, ...) {
  uint64_t now = srv__now();
  char msg[256];
  va_list ap;
  s->stats.conns_refused++;
  if (now - s->refused_log_ms <= 5000 && s->refused_log_ms != 0)
    return;
  s->refused_log_ms = now;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_WARN(&s->log, "connection refused: %s", msg);
}

/* Accept and close at once, so that the backlog does not fill. */
static void refuse_accept(uv_stream_t *server) {
  srv_t *s = server->data;
  uv_tcp_t *t = malloc(sizeof(*t));
  if (t == NULL)
    return;
  if (server->type == UV_NAMED_PIPE)
    uv_pipe_init(s->loop, (uv_pipe_t *)t, 0);
  else
    uv_tcp_init(s->loop, t);
  uv_accept(server, (uv_stream_t *)t);
  uv_close((uv_handle_t *)t, on_refused_closed);
}

static void on_connection_locked(uv_stream_t *server, int status);
void srv__on_connection(uv_stream_t *server, int status) {
  srv_t *s = server->data;
  srv__trace_begin(s, "accept", NULL);
  srv__lock_urgent(s);
  on_connection_locked(server, status);
  srv__unlock(s);
  srv__trace_end(s);
}

/* Accept on loop 0 into a handle of its own, and keep a duplicate of the
 * socket for the loop that will own the connection. RET 0 or -1. */
static int accept_for(conn_t *c, uv_stream_t *server) {
  srv_t *s = c->srv;
  uv_tcp_t *t = malloc(sizeof(*t));
  uv_os_fd_t fd;
  if (t == NULL)
    return -1;
  uv_tcp_init(s->loop, t);
  c->fd = -1;
  if (uv_accept(server, (uv_stream_t *)t) == 0) {
    peer_name(c, (uv_handle_t *)t);
    if (uv_fileno((uv_handle_t *)t, &fd) == 0)
      c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  }
  uv_close((uv_handle_t *)t, on_refused_closed);
  return c->fd >= 0 ? 0 : -1;
}

static void on_connection_locked(uv_stream_t *server, int status) {
  srv_t *s = server->data;
  srv_loop_t *lp = &s->loops[0];
  conn_t *c;
  int is_pipe = server->type == UV_NAMED_PIPE;
  srv_addr_t *a = NULL;
  if (status < 0) {
    LU_WARN(&s->log, "accept failed: %s", uv_strerror(status));
    return;
  }
  if (s->stats.conns_open >= s->cfg.max_conns)
    srv__evict_silent(s, NULL);
  if (!srv__mem_fixed_room(s, SRV_CONN_COST))
    srv__evict_silent(s, NULL);
  if (s->stats.conns_open >= s->cfg.max_conns) {
    log_refused(s, "%u connections open, the limit (raise it with "
                   "--max-conns)", s->cfg.max_conns);
    srv__limit_hit(s, SRV_LIMIT_MAX_CONNS, s->cfg.max_conns, NULL, NULL,
                   "a connection");
    refuse_accept(server);
    return;
  }
  if (!srv__mem_fixed_room(s, SRV_CONN_COST))
    srv__evict_ended(s);
  if (!srv__mem_fixed_room(s, SRV_CONN_COST)) {
    srv__limit_hit(s, SRV_LIMIT_MAX_MEMORY, s->cfg.max_memory, NULL, NULL,
                   "a connection: connections and jobs hold their quarter");
    log_refused(s, "connections and jobs hold their quarter of "
                   "--max-memory %zu (16 KiB a connection): raise "
                   "--max-memory", s->cfg.max_memory);
    refuse_accept(server);
    return;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL) {
    refuse_accept(server);
    return;
  }
  c->magic = CONN_MAGIC;
  c->srv = s;
  c->id = ++s->next_conn_id;
  if (!is_pipe && s->nloops > 1)
    lp = &s->loops[s->next_loop++ % (unsigned)s->nloops];
  c->lp = lp;
  list_init(&c->io_link);
  list_init(&c->link);
  list_init(&c->dirty_link);
  list_init(&c->resume_link);
  list_init(&c->prep_link);
  list_init(&c->read_link);
  list_init(&c->written_link);
  list_init(&c->memwait_link);
  list_init(&c->preauth_link);
  list_init(&c->silent_link);
  list_init(&c->pends);
  srv__out_init(&c->out);
  c->state = CONN_CLOSING; /* not counted yet */
  if (lp->idx != 0) {
    if (accept_for(c, server) != 0) {
      srv__conn_free(c);
      return;
    }
  } else {
    if (is_pipe)
      uv_pipe_init(s->loop, &c->h.pipe, 0);
    else
      uv_tcp_init(s->loop, &c->h.tcp);
    c->h.handle.data = c;
    c->handle_ready = 1;
    if (uv_accept(server, &c->h.stream) != 0) {
      s->closing_conns++;
      uv_close(&c->h.handle, srv__on_conn_closed);
      return;
    }
    peer_name(c, &c->h.handle);
  }
  if (!is_pipe) {
    if (c->handle_ready)
      uv_tcp_nodelay(&c->h.tcp, 1);
    a = srv__addr_get(s, &c->peer_addr);
    if (a != NULL && a->nconns >= s->cfg.max_conns_per_addr)
      srv__evict_silent(s, a);
    if (a == NULL || a->nconns >= s->cfg.max_conns_per_addr) {
      log_refused(s, "%s has %u connections open, the per-address limit "
                     "(--max-conns-per-addr)", c->peer,
                  a ? a->nconns : 0);
      srv__limit_hit(s, SRV_LIMIT_MAX_CONNS_PER_ADDR,
                     s->cfg.max_conns_per_addr, NULL, c->peer,
                     "a connection");
      srv__addr_put(s, a);
      if (c->handle_ready) {
        s->closing_conns++;
        uv_close(&c->h.handle, srv__on_conn_closed);
      } else {
        close(c->fd);
        srv__conn_free(c);
      }
      return;
    }
    a->nconns++;
    c->addr = a;
  }
  c->state = CONN_SNIFF;
  c->accepted_ms = srv__now();
  list_insert_tail(&s->conns, &c->link);
  list_insert_tail(&s->preauth, &c->preauth_link);
  if (!uv_is_active((uv_handle_t *)&s->hs_timer))
    uv_timer_start(&s->hs_timer, srv__hs_timer_cb, s->cfg.handshake_ms, 0);
  s->mem.conns += SRV_CONN_COST;
  srv__mem_update(s);
  s->stats.conns_open++;
  s->stats.conns_total++;
  if (c->handle_ready) {
    srv__conn_start_read(c);
  } else {
    list_insert_tail(&lp->incoming, &c->io_link);
    uv_async_send(&lp->async);
  }
}

/* On the loop's own thread, at srv_close: close its connections and
 * handles; its uv_run returns once they are gone. */
void srv__loop_shutdown(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  list_t *it, *next;
  for (it = s->conns.next; it != &s->conns; it = next) {
    conn_t *c = LIST_ENTRY(it, conn_t, link);
    next = it->next;
    if (c->lp == lp)
      srv__conn_close(c);
  }
  srv__adopt_incoming(lp); /* frees those closed on their way */
  while (!list_empty(&lp->closeq)) {
    conn_t *c = LIST_ENTRY(lp->closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, srv__on_conn_closed);
  }
  uv_close((uv_handle_t *)&lp->async, NULL);
  uv_close((uv_handle_t *)&lp->check, NULL);
  uv_close((uv_handle_t *)&lp->idle, NULL);
}
