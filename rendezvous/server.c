/* server.c - the rendezvous server's configuration, lifecycle and public
 * API (server.h): srv_new, srv_listen, srv_close, the stats. The rest of
 * the server lives in srv_*.c, in the layers srv_int.h lists: the loops
 * and their lock, memory, jobs, the connection core (deadlines, input and
 * output, connections), the dialects (srv_native.c, srv_tcpstore.c,
 * through srv_dialect_t) and the rounds module (rounds.c). */
#include <arpa/inet.h>
#include <assert.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lu_bigbuf.h"
#include "rounds.h"
#include "srv_int.h"


/* ---- config --------------------------------------------------------------------- */

int srv__parse_allow(srv_t *s, const char *list) {
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

/* ---- lifecycle ----------------------------------------------------------------------- */

static char *dup_or_null(const char *p) { return p ? strdup(p) : NULL; }

static void free_config(srv_t *s) {
  free(s->host);
  free(s->unix_path);
  free(s->tcpstore_job);
  free(s->token);
  tls_ctx_free(s->tls);
  if (s->loops)
    for (int i = 0; i < s->nloops; i++) {
      free(s->loops[i].tls_rbuf);
      free(s->loops[i].wo);
    }
  free(s->loops);
}

static void async_cb(uv_async_t *a) {
  (void)a; /* the loop's check handle runs what it was woken for */
}

/* The loop's check, idle and async handles. */
static void loop_handles_init(srv_loop_t *lp) {
  uv_async_init(lp->loop, &lp->async, async_cb);
  lp->async.data = lp;
  uv_check_init(lp->loop, &lp->check);
  lp->check.data = lp;
  uv_check_start(&lp->check, srv__check_cb);
  uv_unref((uv_handle_t *)&lp->check);
  uv_idle_init(lp->loop, &lp->idle);
  lp->idle.data = lp;
  if (lp->idx == 0)
    uv_unref((uv_handle_t *)&lp->async); /* the caller's loop may end */
}

/* RET 0 or RDZV_ENOMEM. */
static int loops_new(srv_t *s, uv_loop_t *loop) {
  int n = s->cfg.threads > 1 ? (int)LU_MIN(s->cfg.threads, 64u) : 1;
  if ((s->loops = calloc((size_t)n, sizeof(*s->loops))) == NULL)
    return RDZV_ENOMEM;
  s->nloops = n;
  pthread_mutex_init(&s->mu, NULL);
  {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->lock_cv, &ca);
    pthread_condattr_destroy(&ca);
  }
  for (int i = 0; i < n; i++) {
    srv_loop_t *lp = &s->loops[i];
    lp->srv = s;
    lp->idx = i;
    lp->loop = i == 0 ? loop : &lp->own;
    list_init(&lp->dirty);
    list_init(&lp->resume);
    list_init(&lp->run);
    list_init(&lp->prepq);
    list_init(&lp->incoming);
    list_init(&lp->closeq);
    list_init(&lp->readq);
    list_init(&lp->writtenq);
    lp->started = i == 0;
    if ((s->tls && (lp->tls_rbuf = malloc(TLS_RBUF)) == NULL) ||
        (i > 0 && uv_loop_init(&lp->own) != 0)) {
      while (--i > 0)
        uv_loop_close(&s->loops[i].own);
      return RDZV_ENOMEM;
    }
  }
  for (int i = 0; i < n; i++)
    loop_handles_init(&s->loops[i]);
  return 0;
}

/* Derive the limits left at 0 from max_memory and check that they fit
 * together. RET 0 or RDZV_EINVAL (logged). */
static int derive_limits(srv_t *s) {
  srv_config_t *c = &s->cfg;
  if (c->max_memory == 0)
    c->max_memory = (size_t)512 << 20;
  if (c->max_store_bytes == 0 || c->max_store_bytes > c->max_memory / 2)
    c->max_store_bytes = c->max_memory / 2;
  if (c->max_in_bytes == 0)
    c->max_in_bytes = c->max_memory / 8;
  if (c->max_out_bytes == 0)
    c->max_out_bytes = LU_MIN(c->max_memory / 8, (size_t)64 << 20);
  if (c->max_conns_per_addr == 0)
    c->max_conns_per_addr = c->max_conns;
  if (c->max_jobs_per_addr == 0)
    c->max_jobs_per_addr = c->max_jobs;
  if (c->handshake_ms == 0)
    c->handshake_ms = 10000;
  if (c->limit_event_ms == 0)
    c->limit_event_ms = 10000;
  if ((size_t)c->max_value + (64u << 10) > c->max_out_bytes) {
    LU_ERR(&s->log, "a value of --max-value %u bytes would not fit in the "
                    "%zu bytes of replies one connection may hold (an "
                    "eighth of --max-memory): raise --max-memory or lower "
                    "--max-value", c->max_value, c->max_out_bytes);
    return RDZV_EINVAL;
  }
  return 0;
}

static void maybe_finish_close(srv_t *s);

int srv_new(uv_loop_t *loop, const srv_config_t *cfg, srv_t **out) {
  srv_t *s;
  proto_limits_t pl = PROTO_LIMITS_DEFAULT;
  char err[512];
  if (cfg == NULL || cfg->size < sizeof(srv_config_t) || cfg->version != 1)
    return RDZV_EINVAL;
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return RDZV_ENOMEM;
  s->magic = SRV_MAGIC;
  s->finish_close = maybe_finish_close;
  s->loop = loop;
  s->cfg = *cfg;
  s->nloops = 1;
  pthread_mutex_init(&s->trace_mu, NULL);
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
  s->cfg.tls_cert = s->cfg.tls_key = s->cfg.tls_ca = NULL;
  s->cfg.log = NULL;
  if (s->tcpstore_job == NULL || (cfg->token && cfg->token_len && !s->token) ||
      (cfg->host && !s->host) || (cfg->unix_path && !s->unix_path)) {
    free_config(s);
    free(s);
    return RDZV_ENOMEM;
  }
  if (cfg->tcpstore_allow && srv__parse_allow(s, cfg->tcpstore_allow) != 0) {
    LU_ERR(&s->log, "--tcpstore-allow '%s' does not parse: give addresses or "
                    "CIDR ranges separated by commas (127.0.0.0/8,::1)",
           cfg->tcpstore_allow);
    free_config(s);
    free(s);
    return RDZV_EINVAL;
  }
  if (cfg->tls_cert || cfg->tls_key || cfg->tls_ca) {
    tls_files_t f = {cfg->tls_cert, cfg->tls_key, cfg->tls_ca};
    if (tls_ctx_new(1, &f, &s->tls, err, sizeof(err)) != 0) {
      LU_ERR(&s->log, "%s", err);
      free_config(s);
      free(s);
      return RDZV_EINVAL;
    }
  }
  if (derive_limits(s) != 0 || lu_random(&s->addr_seed, sizeof(s->addr_seed)) ||
      lu_random(&s->store_seed, sizeof(s->store_seed))) {
    free_config(s);
    free(s);
    return RDZV_EINVAL;
  }
  pl.max_frame = s->cfg.max_frame;
  pl.max_items = s->cfg.max_keys * 2 + 64;
  s->plim = pl;
  s->tlim.max_key = s->cfg.max_key;
  s->tlim.max_value = s->cfg.max_value;
  s->tlim.max_keys = s->cfg.max_keys;
  s->tlim.max_request = s->cfg.max_frame;
  s->mem.store.floor = SRV_STORE_FLOOR; /* counted in SRV_JOB_COST */
  srv__mem_update(s);
  list_init(&s->conns);
  list_init(&s->memwait);
  list_init(&s->preauth);
  list_init(&s->silent);
  if (loops_new(s, loop) != 0) {
    LU_ERR(&s->log, "cannot make %u event loops: out of memory or file "
                    "descriptors (lower --threads)", s->cfg.threads);
    if (s->nloops > 1) {
      pthread_mutex_destroy(&s->mu);
      pthread_cond_destroy(&s->lock_cv);
    }
    free_config(s);
    free(s);
    return RDZV_ENOMEM;
  }
  uv_timer_t *timers[] = {&s->timer, &s->hs_timer, &s->gc_timer,
                          &s->rounds_timer};
  for (size_t i = 0; i < LU_ARRAY_SIZE(timers); i++) {
    uv_timer_init(loop, timers[i]);
    timers[i]->data = s;
    uv_unref((uv_handle_t *)timers[i]);
  }
  /* Every server can host a job's rendezvous (docs/rendezvous.md). */
  rounds_install(s);
  *out = s;
  return 0;
}

/* Bind sa, or (sa NULL) take over fd, bound and listening; then listen. */
static int listen_tcp(srv_t *s, const struct sockaddr *sa, unsigned flags, int fd) {
  uv_tcp_t *t;
  int r;
  if (s->ntcp >= (int)LU_ARRAY_SIZE(s->tcp)) {
    if (fd >= 0)
      close(fd);
    return UV_EMFILE;
  }
  t = &s->tcp[s->ntcp];
  uv_tcp_init(s->loop, t);
  t->data = s;
  s->ntcp++;
  if (sa) {
    r = uv_tcp_bind(t, sa, flags);
  } else if ((r = uv_tcp_open(t, fd)) != 0) {
    close(fd); /* not the handle's: closing it does not close fd */
  }
  if (r == 0)
    r = uv_listen((uv_stream_t *)t, SOMAXCONN > 4096 ? SOMAXCONN : 4096,
                  srv__on_connection);
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

/* File descriptors the table is sized for at most (512 KiB of kernel
 * memory); a server with more connections grows it past this as needed. */
#define FDTABLE_MAX 65536

/* Size the process's file table for the connections to come, now. The
 * kernel grows it by doubling, and in a process of several threads each
 * growth waits for an RCU grace period (8-16 ms on the VMs measured): an
 * accept that crossed a power of two held the loops' lock that long, and
 * every client's request waited with it (issue #11). */
static void fdtable_reserve(const srv_t *s) {
  struct rlimit rl;
  uint64_t want = 2 * (uint64_t)s->cfg.max_conns + 256;
  int nul, fd;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur != RLIM_INFINITY && want > rl.rlim_cur)
    want = rl.rlim_cur;
  if (want > FDTABLE_MAX)
    want = FDTABLE_MAX;
  if ((nul = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    return;
  /* The lowest free descriptor from want - 1 on: none in use is touched. */
  if ((uint64_t)nul < want - 1 &&
      (fd = fcntl(nul, F_DUPFD_CLOEXEC, (int)(want - 1))) >= 0)
    close(fd);
  close(nul);
}

int srv_listen(srv_t *s) { return srv_listen_fd(s, -1); }

int srv_listen_fd(srv_t *s, int fd) {
  int r = 0;
  fdtable_reserve(s);
  s->port = 0;
  if (fd >= 0) {
    r = listen_tcp(s, NULL, 0, fd);
  } else if (s->host == NULL || s->host[0] == '\0' || strcmp(s->host, "::") == 0 ||
      strcmp(s->host, "*") == 0) {
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    uv_ip6_addr("::", s->cfg.port, &a6);
    /* Dual stack: IPv6 any with v4-mapped addresses; IPv4 alone where the
     * host has no IPv6. */
    r = listen_tcp(s, (const struct sockaddr *)&a6, 0, -1);
    if (r != 0) {
      uv_ip4_addr("0.0.0.0", s->cfg.port, &a4);
      r = listen_tcp(s, (const struct sockaddr *)&a4, 0, -1);
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
                      ai->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0, -1);
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
  for (int i = 1; i < s->nloops; i++) {
    srv_loop_t *lp = &s->loops[i];
    if (!lp->started && uv_thread_create(&lp->thread, srv__worker_main, lp) == 0)
      lp->started = 1;
  }
  if (s->unix_path) {
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->has_unix = 1;
    unlink(s->unix_path);
    r = uv_pipe_bind(&s->unix_listener, s->unix_path);
    if (r == 0)
      r = uv_listen((uv_stream_t *)&s->unix_listener, 4096, srv__on_connection);
    if (r != 0)
      return r;
  }
  return 0;
}

int srv_port(const srv_t *s) { return s->port; }

void srv_get_stats(const srv_t *s, srv_stats_t *st) {
  srv__lock((srv_t *)s);
  *st = s->stats;
  srv__unlock((srv_t *)s);
}

static void free_all(srv_t *s) {
  while (s->jobs) {
    job_t *j = s->jobs;
    s->jobs = j->next;
    srv__job_free(s, j);
  }
  /* Every byte counted was given back: the accounting does not drift. */
  assert(srv__mem_used(s) == 0);
  lu_big_set_limit(0); /* the cached blocks go too */
  free(s->addrs);
  free(s->heap);
  free_config(s);
  if (s->nloops > 1) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->lock_cv);
  }
  pthread_mutex_destroy(&s->trace_mu);
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
  srv__conn_free(c);
  s->pending_closes--;
  maybe_finish_close(s);
}

void srv_close(srv_t *s, void (*cb)(void *arg), void *arg) {
  assert(s->magic == SRV_MAGIC);
  if (s->closing)
    return;
  if (s->cfg.trace_us) {
    pthread_mutex_lock(&s->trace_mu);
    LU_WARN(&s->log, "trace: longest callback: %s: %.2f ms wall (lock "
            "waits left out), %.2f ms CPU", s->trace_max.what,
            s->trace_max.wall / 1e6, s->trace_max.wall_cpu / 1e6);
    LU_WARN(&s->log, "trace: most CPU in a callback: %s: %.2f ms CPU",
            s->trace_max.what_cpu, s->trace_max.cpu / 1e6);
    pthread_mutex_unlock(&s->trace_mu);
  }
  srv__lock(s);
  s->close_cb = cb;
  s->close_arg = arg;
  /* Hold one count while closing so that no callback finishes early. */
  s->pending_closes = 1;
  s->closing = 1;
  for (int i = 1; i < s->nloops; i++)
    if (s->loops[i].started) {
      s->loops[i].stop = 1;
      uv_async_send(&s->loops[i].async);
    }
  srv__unlock(s);
  /* The other loops close their connections and end; from here on only
   * this thread runs. */
  for (int i = 1; i < s->nloops; i++) {
    srv_loop_t *lp = &s->loops[i];
    if (lp->started) {
      uv_thread_join(&lp->thread);
    } else {
      srv__lock(s);
      srv__loop_shutdown(lp);
      srv__unlock(s);
      uv_run(lp->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(lp->loop);
  }
  srv__trace_thread_end(); /* loop 0's, this thread's */
  while (!list_empty(&s->loops[0].closeq)) {
    conn_t *c = LIST_ENTRY(s->loops[0].closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, srv__on_conn_closed);
  }
  while (!list_empty(&s->conns)) {
    conn_t *c = LIST_ENTRY(s->conns.next, conn_t, link);
    srv__conn_teardown(c);
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
  uv_handle_t *hs[] = {(uv_handle_t *)&s->loops[0].check,
                       (uv_handle_t *)&s->loops[0].idle,
                       (uv_handle_t *)&s->loops[0].async,
                       (uv_handle_t *)&s->timer,
                       (uv_handle_t *)&s->hs_timer, (uv_handle_t *)&s->gc_timer,
                       (uv_handle_t *)&s->rounds_timer};
  for (size_t i = 0; i < LU_ARRAY_SIZE(hs); i++) {
    s->pending_closes++;
    hs[i]->data = s;
    uv_close(hs[i], on_handle_closed);
  }
  s->pending_closes--;
  maybe_finish_close(s);
}
