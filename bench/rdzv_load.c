/* rdzv_load.c - N simulated agents through the native protocol from one
 * process, so that the rendezvous server's cost per agent is measured apart
 * from process start-up (issue #10, "1,024 agents"). Never part of the
 * tests; bench/run_rdzv_load.sh runs it.
 *
 *   rdzv_load [--agents N] [--steady SECONDS] [--heartbeat-ms MS]
 *             [--endpoint HOST:PORT [--server-pid PID]] [--json FILE]
 *
 * Each simulated agent is one TCP connection doing what `launch --nnodes N`
 * does: magic, CHALLENGE, HELLO, JOIN (the round closes when the N-th has
 * joined), a heartbeat every --heartbeat-ms for --steady seconds, REPORT
 * ok, the SHUTDOWN push that ends the job, LEAVE, close. The messages are
 * in rdzv_load_msg.c alone.
 *
 * The server is, by default, a child process forked before any connection
 * (launch's server code with the rendezvous module, on 127.0.0.1 and a port
 * the OS picks); --endpoint names another one (its CPU and memory are read
 * from /proc/PID when --server-pid is given). Figures:
 *   connect   all N connected and authenticated (HELLO answered)
 *   round     first JOIN sent -> last JOIN reply (the round is formed)
 *   steady    the server's CPU per heartbeat and in % of one core while
 *             N agents heartbeat (every agent once per --heartbeat-ms,
 *             spread over the period; a reply asked for only when nothing
 *             came for two periods, as the agent does; --loud: always)
 *   complete  first REPORT sent -> last SHUTDOWN received
 *   memory    the server's RSS with N joined agents minus its RSS before
 *             the first connection, per agent
 * The server's CPU is /proc/PID/schedstat (ns; /proc/PID/stat ticks where
 * that is missing), of its one thread. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "lu.h"
#include "rounds.h"
#include "rdzv_load_msg.h"
#include "server.h"

#define READ_BUF (64 * 1024)
#define CONNECTING_MAX 256 /* connects in flight: the listen backlog */
#define PHASE_MS 120000    /* any phase longer than this is a failure */

enum { PH_CONNECT, PH_JOIN, PH_STEADY, PH_REPORT, PH_LEAVE, PH_DONE };

typedef struct load_s load_t;

typedef struct agent_s {
  uv_tcp_t tcp;
  uv_connect_t creq;
  load_t *L;
  int idx;
  int ready, joined, shut, closed;
  uint64_t next_id, hello_id, join_id;
  int64_t round;
  char *in;          /* partial frame */
  size_t in_len, in_cap;
  uint64_t next_hb;  /* ms */
  uint64_t last_rx;  /* ms: last bytes from the server */
} agent_t;

typedef struct wreq_s {
  uv_write_t req;
  char data[];
} wreq_t;

struct load_s {
  uv_loop_t *loop;
  int n;
  int hb_ms, steady_s;
  int loud; /* every heartbeat answered (as before quiet heartbeats) */
  char host[64];
  int port;
  pid_t srv_pid, own_srv;
  agent_t *a;
  char *rbuf;
  proto_enc_t enc;
  int phase;
  int started, connecting, nready, njoined, nshut, nclosed, errors;
  uint64_t hb_sent, hb_replies;
  char first_error[256];
  /* figures */
  uint64_t t0, t_ready, t_join0, t_joined, t_rep0, t_done, t_steady0, t_steady1;
  double cpu_join, cpu_steady, cpu_report;
  long rss0_kb, rss_joined_kb;
  uint64_t cpu_mark;
  uv_timer_t tick, deadline;
};

static uint64_t now_ms(void) { return lu_now_ms(); }

/* ---- the server process ---------------------------------------------------------- */

/* ns of CPU the server's thread used (schedstat), else ticks of stat. */
static uint64_t srv_cpu_ns(pid_t pid) {
  char path[64], buf[1024];
  FILE *f;
  unsigned long long ns, ut, st;
  snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
  if ((f = fopen(path, "r")) != NULL) {
    int ok = fscanf(f, "%llu", &ns) == 1;
    fclose(f);
    if (ok)
      return ns;
  }
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if ((f = fopen(path, "r")) != NULL) {
    char *p;
    size_t r = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[r] = '\0';
    if ((p = strrchr(buf, ')')) != NULL &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) == 2)
      return (ut + st) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
  }
  return 0;
}

static long srv_rss_kb(pid_t pid) {
  char path[64], line[256];
  long kb = -1;
  FILE *f;
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

typedef struct srv_child_s {
  uv_signal_t term;
  srv_t *srv;
} srv_child_t;

static void child_closed(void *arg) {
  srv_child_t *c = arg;
  uv_close((uv_handle_t *)&c->term, NULL);
}

static void child_term(uv_signal_t *s, int sig) {
  srv_child_t *c = s->data;
  (void)sig;
  uv_signal_stop(s);
  srv_close(c->srv, child_closed, c);
}

/* The forked server: launch's server code with the rendezvous module.
 * Writes its port to fd, serves until SIGTERM. */
static void server_child(int fd, int n) {
  uv_loop_t loop;
  srv_config_t cfg = SRV_CONFIG_INIT;
  srv_child_t c;
  lu_log_t log;
  int port;
  uv_loop_init(&loop);
  lu_log_init(&log, "rdzv_load server");
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.max_conns = (uint32_t)n + 64;
  cfg.max_conns_per_job = (uint32_t)n + 64;
  /* Connections may hold a quarter of --max-memory at 16 KiB each: the
   * default 512 MiB admits 8,192. Room for n (what `launch server
   * --max-memory` would be given for a job this size). */
  if ((size_t)n * (64u << 10) + (64u << 20) > cfg.max_memory)
    cfg.max_memory = (size_t)n * (64u << 10) + (64u << 20);
  cfg.log = &log;
  if (srv_new(&loop, &cfg, &c.srv) != 0)
    _exit(3);
  rounds_install(c.srv);
  if (srv_listen(c.srv) != 0)
    _exit(4);
  uv_signal_init(&loop, &c.term);
  c.term.data = &c;
  uv_signal_start(&c.term, child_term, SIGTERM);
  port = srv_port(c.srv);
  if (write(fd, &port, sizeof(port)) != (ssize_t)sizeof(port))
    _exit(5);
  close(fd);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  _exit(0);
}

static int start_server(load_t *L) {
  int p[2], port = 0;
  pid_t pid;
  if (pipe(p) != 0)
    return -errno;
  if ((pid = fork()) < 0)
    return -errno;
  if (pid == 0) {
    close(p[0]);
    server_child(p[1], L->n);
  }
  close(p[1]);
  if (read(p[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
    close(p[0]);
    waitpid(pid, NULL, 0);
    return -EIO;
  }
  close(p[0]);
  L->srv_pid = L->own_srv = pid;
  L->port = port;
  lu_strlcpy(L->host, "127.0.0.1", sizeof(L->host));
  return 0;
}

static void stop_server(load_t *L) {
  int status;
  if (L->own_srv <= 0)
    return;
  kill(L->own_srv, SIGTERM);
  for (int i = 0; i < 500; i++) {
    if (waitpid(L->own_srv, &status, WNOHANG) == L->own_srv)
      return;
    usleep(10000);
  }
  kill(L->own_srv, SIGKILL);
  waitpid(L->own_srv, &status, 0);
}

/* ---- agents ------------------------------------------------------------------------- */

static void fail(load_t *L, agent_t *ag, const char *fmt, ...) LU_PRINTF(3, 4);

static void on_closed(uv_handle_t *h) {
  agent_t *ag = h->data;
  ag->L->nclosed++;
}

static void agent_close(agent_t *ag) {
  if (ag->closed)
    return;
  ag->closed = 1;
  uv_close((uv_handle_t *)&ag->tcp, on_closed);
}

static void fail(load_t *L, agent_t *ag, const char *fmt, ...) {
  va_list ap;
  L->errors++;
  if (L->first_error[0] == '\0') {
    int k = snprintf(L->first_error, sizeof(L->first_error), "agent %d: ",
                     ag ? ag->idx : -1);
    va_start(ap, fmt);
    vsnprintf(L->first_error + k, sizeof(L->first_error) - (size_t)k, fmt, ap);
    va_end(ap);
  }
  if (ag)
    agent_close(ag);
}

static void on_written(uv_write_t *req, int status) {
  agent_t *ag = req->data;
  /* A LEAVE cancelled by the close after it is no error. */
  if (status != 0 && ag->L->phase < PH_LEAVE)
    fail(ag->L, ag, "write: %s", uv_strerror(status));
  free(req);
}

/* Send what L->enc holds on ag's connection. */
static void send_enc(agent_t *ag) {
  load_t *L = ag->L;
  uv_buf_t b = uv_buf_init(L->enc.data, (unsigned)L->enc.len);
  int r;
  if (L->enc.oom) {
    fail(L, ag, "out of memory");
    return;
  }
  if (ag->closed)
    goto out;
  r = uv_try_write((uv_stream_t *)&ag->tcp, &b, 1);
  if (r < 0 && r != UV_EAGAIN) {
    fail(L, ag, "write: %s", uv_strerror(r));
    goto out;
  }
  if (r < 0)
    r = 0;
  if ((size_t)r < L->enc.len) {
    size_t left = L->enc.len - (size_t)r;
    wreq_t *w = malloc(sizeof(*w) + left);
    if (w == NULL) {
      fail(L, ag, "out of memory");
      goto out;
    }
    memcpy(w->data, L->enc.data + r, left);
    w->req.data = ag;
    b = uv_buf_init(w->data, (unsigned)left);
    if ((r = uv_write(&w->req, (uv_stream_t *)&ag->tcp, &b, 1, on_written)) != 0) {
      free(w);
      fail(L, ag, "write: %s", uv_strerror(r));
    }
  }
out:
  proto_enc_reset(&L->enc);
}

static void send_join(agent_t *ag) {
  char host[32];
  lm_join_t j;
  snprintf(host, sizeof(host), "sim%05d", ag->idx);
  j.host = host;
  j.addr = "127.0.0.1";
  j.nnodes = ag->L->n;
  j.heartbeat_ms = ag->L->hb_ms;
  j.join_timeout_ms = PHASE_MS;
  ag->join_id = ++ag->next_id;
  lm_join(&ag->L->enc, ag->join_id, &j);
  send_enc(ag);
}

static void phase_check(load_t *L);

static void on_frame(agent_t *ag, const uint8_t *body, size_t n) {
  load_t *L = ag->L;
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  proto_msg_t m;
  lm_in_t in;
  if (proto_decode(body, n, &lim, &m) != 0) {
    fail(L, ag, "undecodable frame");
    return;
  }
  lm_classify(&m, ag->hello_id, ag->join_id, &in);
  proto_msg_free(&m);
  switch (in.kind) {
  case LM_CHALLENGE: {
    uint8_t nonce[32];
    lu_random(nonce, sizeof(nonce));
    ag->hello_id = ++ag->next_id;
    lm_hello(&L->enc, ag->hello_id, "load", nonce);
    send_enc(ag);
    break;
  }
  case LM_HELLO_OK:
    ag->ready = 1;
    L->nready++;
    /* Heartbeats from now on, as the agent's: spread over the period. */
    ag->next_hb = now_ms() + (uint64_t)L->hb_ms * (uint64_t)ag->idx / (uint64_t)L->n;
    break;
  case LM_JOINED:
    ag->joined = 1;
    ag->round = in.round;
    L->njoined++;
    break;
  case LM_SHUTDOWN:
    ag->shut = 1;
    L->nshut++;
    if (!in.ok)
      fail(L, NULL, "the job ended unsuccessfully");
    break;
  case LM_ERROR:
    fail(L, ag, "server: %s", in.msg);
    break;
  default:
    if (L->phase == PH_STEADY)
      L->hb_replies++;
    break;
  }
  phase_check(L);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  agent_t *ag = h->data;
  (void)hint;
  buf->base = ag->L->rbuf;
  buf->len = READ_BUF;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  agent_t *ag = s->data;
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t n;
  if (nread < 0) {
    if (ag->L->phase < PH_LEAVE)
      fail(ag->L, ag, "connection closed by the server (%s)",
           uv_strerror((int)nread));
    agent_close(ag);
    return;
  }
  n = (size_t)nread;
  ag->last_rx = now_ms();
  /* Frames may straddle reads: keep the tail in ag->in. */
  if (ag->in_len > 0) {
    if (ag->in_len + n > ag->in_cap) {
      size_t cap = LU_MAX(ag->in_cap * 2, ag->in_len + n);
      char *nb = realloc(ag->in, cap);
      if (nb == NULL) {
        fail(ag->L, ag, "out of memory");
        return;
      }
      ag->in = nb;
      ag->in_cap = cap;
    }
    memcpy(ag->in + ag->in_len, p, n);
    ag->in_len += n;
    p = (const uint8_t *)ag->in;
    n = ag->in_len;
  }
  while (n >= PROTO_HDR && !ag->closed) {
    uint32_t len = proto_get_len(p);
    if (n < PROTO_HDR + (size_t)len)
      break;
    on_frame(ag, p + PROTO_HDR, len);
    p += PROTO_HDR + len;
    n -= PROTO_HDR + len;
  }
  if (ag->closed)
    return;
  if (n > 0 && p != (const uint8_t *)ag->in) {
    if (n > ag->in_cap) {
      char *nb = realloc(ag->in, n);
      if (nb == NULL) {
        fail(ag->L, ag, "out of memory");
        return;
      }
      ag->in = nb;
      ag->in_cap = n;
    }
    memmove(ag->in, p, n);
  } else if (n > 0) {
    memmove(ag->in, p, n);
  }
  ag->in_len = n;
}

static void start_connects(load_t *L);

static void on_connect(uv_connect_t *req, int status) {
  agent_t *ag = req->data;
  load_t *L = ag->L;
  L->connecting--;
  if (status != 0) {
    fail(L, ag, "connect to %s:%d: %s", L->host, L->port, uv_strerror(status));
    return;
  }
  uv_read_start((uv_stream_t *)&ag->tcp, alloc_cb, read_cb);
  proto_enc_raw(&L->enc, PROTO_MAGIC, PROTO_MAGIC_LEN);
  send_enc(ag);
  start_connects(L);
}

static void start_connects(load_t *L) {
  struct sockaddr_in sa;
  int loopback = strncmp(L->host, "127.", 4) == 0;
  uv_ip4_addr(L->host, L->port, &sa);
  while (L->started < L->n && L->connecting < CONNECTING_MAX) {
    agent_t *ag = &L->a[L->started++];
    int r;
    uv_tcp_init_ex(L->loop, &ag->tcp, AF_INET);
    ag->tcp.data = ag;
    ag->creq.data = ag;
    uv_tcp_nodelay(&ag->tcp, 1);
    if (loopback) {
      /* Spread the agents over 127.0.x.y as real nodes have addresses of
       * their own: the kernel's search for a free source port of one
       * address is what 16,384 connections from 127.0.0.1 would cost. */
      struct sockaddr_in la;
      char ip[32];
      uv_os_fd_t fd;
      int one = 1;
      snprintf(ip, sizeof(ip), "127.0.%d.%d", 1 + ag->idx / 250, 1 + ag->idx % 250);
      uv_ip4_addr(ip, 0, &la);
      if (uv_fileno((uv_handle_t *)&ag->tcp, &fd) == 0)
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                         sizeof(one));
      uv_tcp_bind(&ag->tcp, (struct sockaddr *)&la, 0);
    }
    if ((r = uv_tcp_connect(&ag->creq, &ag->tcp, (struct sockaddr *)&sa,
                            on_connect)) != 0) {
      fail(L, ag, "connect: %s", uv_strerror(r));
      continue;
    }
    L->connecting++;
  }
}

/* ---- phases ---------------------------------------------------------------------------- */

static double cpu_since(load_t *L) {
  uint64_t now = srv_cpu_ns(L->srv_pid);
  double d = (double)(now - L->cpu_mark) / 1e9;
  L->cpu_mark = now;
  return d;
}

static void on_tick(uv_timer_t *t) {
  load_t *L = t->data;
  uint64_t now = now_ms();
  if (L->phase >= PH_LEAVE)
    return;
  if (L->phase == PH_STEADY &&
      now >= L->t_steady0 + (uint64_t)L->steady_s * 1000) {
    L->t_steady1 = now;
    L->cpu_steady = cpu_since(L);
    L->phase = PH_REPORT;
    L->t_rep0 = now_ms();
    L->cpu_mark = srv_cpu_ns(L->srv_pid);
    for (int i = 0; i < L->n; i++) {
      agent_t *ag = &L->a[i];
      lm_report_ok(&L->enc, ++ag->next_id, ag->round);
      send_enc(ag);
    }
    return;
  }
  /* Each agent once per period, at its own offset in it, from its HELLO
   * on (the server drops a node that is silent for 3 periods). */
  for (int i = 0; i < L->started; i++) {
    agent_t *ag = &L->a[i];
    if (ag->closed || !ag->ready || now < ag->next_hb)
      continue;
    /* As the agent does (launcher/agent.c hb_cb): a reply wanted only
     * when nothing came for two periods; --loud: every heartbeat. */
    lm_heartbeat(&L->enc, ++ag->next_id,
                 !L->loud && now - ag->last_rx < 2 * (uint64_t)L->hb_ms);
    send_enc(ag);
    if (L->phase == PH_STEADY)
      L->hb_sent++;
    ag->next_hb += (uint64_t)L->hb_ms;
    if (ag->next_hb <= now)
      ag->next_hb = now + (uint64_t)L->hb_ms;
  }
}

static void phase_check(load_t *L) {
  if (L->phase == PH_CONNECT && L->nready == L->n) {
    L->t_ready = now_ms();
    L->phase = PH_JOIN;
    L->cpu_mark = srv_cpu_ns(L->srv_pid);
    L->t_join0 = now_ms();
    for (int i = 0; i < L->n; i++)
      send_join(&L->a[i]);
  } else if (L->phase == PH_JOIN && L->njoined == L->n) {
    uint64_t now = now_ms();
    L->t_joined = now;
    L->cpu_join = cpu_since(L);
    L->rss_joined_kb = srv_rss_kb(L->srv_pid);
    L->phase = PH_STEADY;
    L->t_steady0 = now;
    L->cpu_mark = srv_cpu_ns(L->srv_pid);
  } else if (L->phase == PH_REPORT && L->nshut == L->n) {
    L->t_done = now_ms();
    L->cpu_report = cpu_since(L);
    L->phase = PH_LEAVE;
    for (int i = 0; i < L->n; i++) {
      lm_leave(&L->enc, ++L->a[i].next_id, "load generator done");
      send_enc(&L->a[i]);
      agent_close(&L->a[i]);
    }
  }
}

static void on_deadline(uv_timer_t *t) {
  load_t *L = t->data;
  static const char *const names[] = {"connect", "join", "steady", "report",
                                      "leave"};
  fail(L, NULL, "the %s phase did not end within %d s (%d ready, %d joined, "
       "%d shut down of %d)", names[L->phase], PHASE_MS / 1000, L->nready,
       L->njoined, L->nshut, L->n);
  for (int i = 0; i < L->n; i++)
    if (i < L->started)
      agent_close(&L->a[i]);
  uv_timer_stop(&L->tick);
}

static void stop_timers_when_closed(uv_timer_t *t) {
  load_t *L = t->data;
  if (L->nclosed >= L->started)
    uv_close((uv_handle_t *)t, NULL);
}

/* ---- main --------------------------------------------------------------------------------- */

static const char usage[] =
    "usage: rdzv_load [--agents N] [--steady SECONDS] [--heartbeat-ms MS]\n"
    "                 [--loud] [--endpoint HOST:PORT [--server-pid PID]]\n"
    "                 [--json FILE]\n"
    "--loud: every heartbeat asks for a reply (the agent asks only when it\n"
    "heard nothing from the server for two heartbeats).\n"
    "N simulated agents (default 1024) through the native protocol; see\n"
    "bench/rdzv_load.c and docs/BENCHMARKS.md.\n";

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"agents", required_argument, 0, 'n'},
      {"steady", required_argument, 0, 's'},
      {"heartbeat-ms", required_argument, 0, 'b'},
      {"loud", no_argument, 0, 'l'},
      {"endpoint", required_argument, 0, 'e'},
      {"server-pid", required_argument, 0, 'p'},
      {"json", required_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  load_t L;
  uv_loop_t loop;
  struct rlimit rl;
  const char *json = NULL, *endpoint = NULL;
  int opt, rc = 0;
  double round_s, steady_s, hb, per_hb_us, core_pct, per_agent_b;
  memset(&L, 0, sizeof(L));
  L.n = 1024;
  L.hb_ms = 1000;
  L.steady_s = 10;
  signal(SIGPIPE, SIG_IGN);
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'n': L.n = atoi(optarg); break;
    case 's': L.steady_s = atoi(optarg); break;
    case 'b': L.hb_ms = atoi(optarg); break;
    case 'l': L.loud = 1; break;
    case 'e': endpoint = optarg; break;
    case 'p': L.srv_pid = (pid_t)atoi(optarg); break;
    case 'j': json = optarg; break;
    case 'h': fputs(usage, stdout); return 0;
    default: fputs(usage, stderr); return 2;
    }
  }
  if (L.n < 1 || L.n > 1000000 || L.steady_s < 1 || L.hb_ms < 10) {
    fprintf(stderr, "rdzv_load: --agents from 1, --steady from 1 s, "
                    "--heartbeat-ms from 10\n");
    return 2;
  }
  /* One socket per agent here, and in the server (a child: it inherits). */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (rlim_t)L.n + 64) {
    fprintf(stderr, "rdzv_load: the open-file limit is %llu, %d agents need "
            "%d: raise the hard limit (ulimit -Hn, /etc/security/limits.conf)\n",
            (unsigned long long)rl.rlim_cur, L.n, L.n + 64);
    return 2;
  }
  if (endpoint) {
    const char *colon = strrchr(endpoint, ':');
    if (colon == NULL || (size_t)(colon - endpoint) >= sizeof(L.host)) {
      fprintf(stderr, "rdzv_load: --endpoint HOST:PORT (an IPv4 address)\n");
      return 2;
    }
    snprintf(L.host, sizeof(L.host), "%.*s", (int)(colon - endpoint), endpoint);
    L.port = atoi(colon + 1);
  } else if ((rc = start_server(&L)) != 0) {
    fprintf(stderr, "rdzv_load: cannot start the server: %s\n", strerror(-rc));
    return 1;
  }
  /* The server idles before the first connection: its base RSS. */
  usleep(100000);
  L.rss0_kb = L.srv_pid ? srv_rss_kb(L.srv_pid) : -1;
  L.a = calloc((size_t)L.n, sizeof(*L.a));
  L.rbuf = malloc(READ_BUF);
  if (L.a == NULL || L.rbuf == NULL) {
    fprintf(stderr, "rdzv_load: out of memory for %d agents\n", L.n);
    free(L.a);
    free(L.rbuf);
    stop_server(&L);
    return 1;
  }
  for (int i = 0; i < L.n; i++) {
    L.a[i].L = &L;
    L.a[i].idx = i;
  }
  uv_loop_init(&loop);
  L.loop = &loop;
  proto_enc_init(&L.enc);
  uv_timer_init(&loop, &L.tick);
  uv_timer_init(&loop, &L.deadline);
  L.tick.data = L.deadline.data = &L;
  L.t0 = now_ms();
  uv_timer_start(&L.deadline, on_deadline, PHASE_MS + (uint64_t)L.steady_s * 1000 * 2,
                 0);
  uv_timer_start(&L.tick, on_tick, 5, 5);
  start_connects(&L);
  while (L.phase != PH_LEAVE && L.errors == 0)
    uv_run(&loop, UV_RUN_ONCE);
  if (L.errors)
    for (int i = 0; i < L.started; i++)
      agent_close(&L.a[i]);
  uv_timer_stop(&L.tick);
  uv_timer_stop(&L.deadline);
  uv_close((uv_handle_t *)&L.tick, NULL);
  uv_timer_start(&L.deadline, stop_timers_when_closed, 1, 1);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  proto_enc_destroy(&L.enc);
  stop_server(&L);
  for (int i = 0; i < L.n; i++)
    free(L.a[i].in);
  free(L.a);
  free(L.rbuf);
  if (L.errors) {
    fprintf(stderr, "rdzv_load: %d error(s); first: %s\n", L.errors,
            L.first_error);
    return 1;
  }
  round_s = (double)(L.t_joined - L.t_join0) / 1000.0;
  steady_s = (double)(L.t_steady1 - L.t_steady0) / 1000.0;
  hb = (double)L.hb_sent;
  per_hb_us = hb > 0 ? L.cpu_steady * 1e6 / hb : 0;
  core_pct = steady_s > 0 ? 100.0 * L.cpu_steady / steady_s : 0;
  per_agent_b = L.rss0_kb >= 0 && L.rss_joined_kb >= 0
                    ? (double)(L.rss_joined_kb - L.rss0_kb) * 1024.0 / L.n
                    : -1;
  printf("agents %d: connect+hello %.3f s; round (first JOIN -> last reply) "
         "%.3f s, server CPU %.3f s; steady %d heartbeats in %.1f s: %.1f us "
         "of server CPU each, %.2f %% of a core; complete (REPORT -> SHUTDOWN) "
         "%.3f s, server CPU %.3f s; server RSS %ld -> %ld kB, %.0f B/agent\n",
         L.n, (double)(L.t_ready - L.t0) / 1000.0, round_s, L.cpu_join,
         (int)L.hb_sent, steady_s, per_hb_us, core_pct,
         (double)(L.t_done - L.t_rep0) / 1000.0, L.cpu_report, L.rss0_kb,
         L.rss_joined_kb, per_agent_b);
  if (json) {
    FILE *f = fopen(json, "w");
    if (f == NULL) {
      fprintf(stderr, "rdzv_load: cannot write %s: %s\n", json, strerror(errno));
      return 1;
    }
    fprintf(f,
            "{\"agents\": %d, \"heartbeat_ms\": %d, \"connect_s\": %.4f, "
            "\"round_s\": %.4f, \"round_server_cpu_s\": %.4f, "
            "\"loud\": %d, \"steady_s\": %.3f, \"heartbeats\": %llu, \"heartbeat_replies\": %llu, "
            "\"steady_server_cpu_s\": %.4f, \"server_cpu_per_heartbeat_us\": %.3f, "
            "\"steady_core_pct\": %.3f, \"complete_s\": %.4f, "
            "\"complete_server_cpu_s\": %.4f, \"server_rss0_kb\": %ld, "
            "\"server_rss_joined_kb\": %ld, \"server_bytes_per_agent\": %.1f}\n",
            L.n, L.hb_ms, (double)(L.t_ready - L.t0) / 1000.0, round_s,
            L.cpu_join, L.loud, steady_s, (unsigned long long)L.hb_sent,
            (unsigned long long)L.hb_replies, L.cpu_steady, per_hb_us, core_pct,
            (double)(L.t_done - L.t_rep0) / 1000.0, L.cpu_report, L.rss0_kb,
            L.rss_joined_kb, per_agent_b);
    fclose(f);
  }
  return 0;
}
