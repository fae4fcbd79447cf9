/* cmd_server.c - `launch server`: a standalone rendezvous server (with the
 * rendezvous module, so agents and `launch status` work against it), and
 * `launch server --issue-key JOB`, which prints a job's key. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "config.h"
#include "launch.h"
#include "events.h"
#include "metrics.h"
#include "page.h"
#include "proto.h"
#include "server.h"

static const char server_help[] =
    "usage: launch server [options]\n"
    "       launch server --token-file F --issue-key JOB\n"
    "\n"
    "Runs the rendezvous server: a key/value store per job for launch agents,\n"
    "librdzv clients and PyTorch TCPStore clients (1.13 and >= 2.2), all on\n"
    "one port, with the rendezvous of launch agents (docs/rendezvous.md).\n"
    "Stops cleanly on SIGINT or SIGTERM.\n"
    "\n"
    "options:\n"
    "  --host H              listen address (default: every address, IPv4\n"
    "                        and IPv6)\n"
    "  --port P              TCP port (default 29400; 0 picks a free port and\n"
    "                        prints it)\n"
    "  --unix PATH           also listen on a unix socket\n"
    "  --port-file F         write the bound port to F once listening\n"
    "  --token-file F        the server's secret: a client proves it holds it,\n"
    "                        or holds the key of its job (HMAC-SHA256\n"
    "                        challenge; no secret crosses the wire)\n"
    "  --issue-key JOB       print the key of JOB (derived from the secret of\n"
    "                        --token-file) and exit: give it to that job's\n"
    "                        agents as their --token-file; it opens that job\n"
    "                        and no other\n"
    "  --tls-cert F          PEM certificate: every TCP client must speak TLS\n"
    "  --tls-key F           its private key (default: in --tls-cert)\n"
    "  --tls-ca F            require client certificates signed by this CA\n"
    "                        (mutual TLS)\n"
    "  --tcpstore-job JOB    job whose keys TCPStore clients see (default\n"
    "                        \"default\")\n"
    "  --tcpstore-allow LIST addresses or CIDR ranges allowed to speak TCPStore\n"
    "                        while a token or TLS is set, e.g. 127.0.0.0/8,::1.\n"
    "                        TCPStore has no authentication (nor TLS): with a\n"
    "                        token or TLS and no allow list, TCPStore clients\n"
    "                        are refused.\n"
    "  --metrics-port [ADDR:]PORT  serve Prometheus metrics there (0: a free\n"
    "                        port, printed; docs/monitoring.md)\n"
    "  --threads N           event loops serving connections (default a\n"
    "                        quarter of the online cores, at most 8, at\n"
    "                        least 1; env LAUNCH_SERVER_THREADS)\n"
    "\n"
    "limits (sizes take K, M, G suffixes; docs/protocol.md#limits):\n"
    "  --max-memory B        all the server holds for its clients: stores,\n"
    "                        buffers, connections, jobs (default 512M)\n"
    "  --max-store-bytes B   keys + values + waits per job (default half of\n"
    "                        --max-memory; all jobs together get that half)\n"
    "  --max-input-bytes B   unfinished requests buffered over all\n"
    "                        connections (default --max-memory / 8)\n"
    "  --max-out-bytes B     unsent replies of one connection before it is\n"
    "                        paused (default --max-memory / 8, at most 64M)\n"
    "  --max-frame B         largest request (default 16M)\n"
    "  --max-value B         largest value (default 8M)\n"
    "  --max-waits N         pending waits per connection (default 1024)\n"
    "  --max-conns N         connections in all (default 65536)\n"
    "  --max-conns-per-addr N connections of one client address (default 1024)\n"
    "  --max-jobs N          jobs in all (default 4096)\n"
    "  --max-jobs-per-addr N jobs one client address may create (default 64)\n"
    "  --handshake-timeout T a connection not authenticated after T is closed\n"
    "                        (default 10s); one that sent nothing is closed only\n"
    "                        near a connection limit, oldest first\n"
    "  --job-grace T         a job with no connection and no data is\n"
    "                        forgotten after T (default 60s)\n"
    "  --keep-ended T        an ended job's state, exit codes and root cause\n"
    "                        stay visible to launch status for T after its\n"
    "                        last node left (default 10m; 0: forgotten at\n"
    "                        once; sooner when the room is needed)\n"
    "  --event-log FILE      append the server's events (nodes joined, left,\n"
    "                        refused; limits hit) as JSON Lines\n"
    "                        (docs/events.md#server)\n"
    "  --limit-event-interval T  at most one limit_hit event per limit per T,\n"
    "                        with the count of refusals (default 10s)\n"
    "\n"
    "example:\n"
    "  launch server --port 29400 --token-file /etc/launch/token \\\n"
    "                --tcpstore-allow 10.0.0.0/8\n"
    "  launch server --token-file /etc/launch/token --issue-key job42 > k42\n";

typedef struct server_main_s {
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  srv_t *srv;
  lu_log_t log;
  int stopping;
  met_t *met;           /* --metrics-port (metrics.h) */
  ev_log_t *ev;         /* --event-log: the server's events */
  uv_timer_t met_timer;
  char met_labels[300];
  char host[256];       /* this host's name (the page's title) */
  size_t max_memory;
} server_main_t;

static void on_closed(void *arg) {
  server_main_t *m = arg;
  uv_close((uv_handle_t *)&m->sigint, NULL);
  uv_close((uv_handle_t *)&m->sigterm, NULL);
  if (m->met)
    uv_close((uv_handle_t *)&m->met_timer, NULL);
}

typedef struct page_jobs_s {
  lu_buf_t *b;
  size_t n;
} page_jobs_t;

static void page_job_cb(void *arg, const struct msg_status_s *st) {
  page_jobs_t *pj = arg;
  page_job(pj->b, st);
  pj->n++;
}

/* The server's series, and its page of jobs (page.h), once a second
 * (docs/monitoring.md). */
static void met_cb(uv_timer_t *t) {
  server_main_t *m = t->data;
  lu_buf_t b = LU_BUF_INIT, pb = LU_BUF_INIT;
  page_jobs_t pj = {&pb, 0};
  srv_stats_t st;
  char *text;
  if (m->stopping)
    return;
  srv_get_stats(m->srv, &st);
  met_server(&b, m->met_labels, &st, (double)m->max_memory);
  if (lu_buf_finish(&b, &text, NULL) == 0)
    met_publish(m->met, text);
  page_jobs_begin(&pb, m->host);
  srv_each_job(m->srv, page_job_cb, &pj);
  page_jobs_end(&pb, pj.n);
  if (lu_buf_finish(&pb, &text, NULL) == 0)
    met_publish_page(m->met, text);
}

static void on_signal(uv_signal_t *h, int signum) {
  server_main_t *m = h->data;
  if (m->stopping)
    return;
  m->stopping = 1;
  LU_INFO(&m->log, "%s: shutting down", strsignal(signum));
  srv_close(m->srv, on_closed, m);
}

/* "512M", "1G", "65536", "4KiB" -> bytes. RET 0 or -1. */
static int parse_size(const char *v, uint64_t *out) {
  char *end;
  unsigned long long x;
  int shift = 0;
  errno = 0;
  x = strtoull(v, &end, 10);
  if (errno || end == v || *v == '-')
    return -1;
  switch (*end) {
  case 'K': case 'k': shift = 10; end++; break;
  case 'M': case 'm': shift = 20; end++; break;
  case 'G': case 'g': shift = 30; end++; break;
  default: break;
  }
  if (shift && *end == 'i')
    end++;
  if (*end == 'B')
    end++;
  if (*end != '\0' || x == 0 || x > (UINT64_MAX >> shift))
    return -1;
  *out = (uint64_t)x << shift;
  return 0;
}

/* The numeric options: one row each. */
enum { K_U32, K_SIZE, K_MS, K_MS0 /* 0 allowed */ };
typedef struct num_opt_s {
  const char *name;
  int kind;
  size_t off;
} num_opt_t;

#define NUM(name, kind, field) {name, kind, offsetof(srv_config_t, field)}
static const num_opt_t num_opts[] = {
    NUM("max-memory", K_SIZE, max_memory),
    NUM("max-store-bytes", K_SIZE, max_store_bytes),
    NUM("max-input-bytes", K_SIZE, max_in_bytes),
    NUM("max-out-bytes", K_SIZE, max_out_bytes),
    NUM("max-frame", K_U32, max_frame),
    NUM("max-value", K_U32, max_value),
    NUM("max-waits", K_U32, max_waits),
    NUM("max-conns", K_U32, max_conns),
    NUM("max-conns-per-addr", K_U32, max_conns_per_addr),
    NUM("max-jobs", K_U32, max_jobs),
    NUM("max-jobs-per-addr", K_U32, max_jobs_per_addr),
    NUM("handshake-timeout", K_MS, handshake_ms),
    NUM("job-grace", K_MS, job_grace_ms),
    NUM("keep-ended", K_MS0, keep_ended_ms),
    NUM("limit-event-interval", K_MS, limit_event_ms),
};

/* RET 0, or -1 after saying what is wrong. */
static int set_num(srv_config_t *cfg, const num_opt_t *o, const char *v) {
  char *field = (char *)cfg + o->off;
  uint64_t x;
  int64_t ms;
  if (o->kind == K_MS || o->kind == K_MS0) {
    if (lu_parse_duration_ms(v, &ms) != 0 || ms < (o->kind == K_MS0 ? 0 : 1) ||
        ms > UINT32_MAX) {
      launch_usage_error("--%s: '%s' is not a duration (e.g. 10s, 500ms)",
                         o->name, v);
      return -1;
    }
    *(uint32_t *)field = (uint32_t)ms;
    return 0;
  }
  if (parse_size(v, &x) != 0 || (o->kind == K_U32 && x > UINT32_MAX)) {
    launch_usage_error("--%s: '%s' is not a positive %s", o->name, v,
                       o->kind == K_SIZE ? "size (e.g. 512M)" : "number");
    return -1;
  }
  if (o->kind == K_U32)
    *(uint32_t *)field = (uint32_t)x;
  else
    *(size_t *)field = (size_t)x;
  return 0;
}

/* Read the secret (or key) of a --token-file. RET 0 or 2 (said why). */
static int read_secret(const char *file, char **out, size_t *len) {
  char err[1024];
  if (lu_read_token(file, out, len, err, sizeof(err)) == 0)
    return 0;
  launch_usage_error("%s", err);
  return 2;
}

static int issue_key(const char *token, size_t token_len, const char *job) {
  char key[PROTO_JOB_KEY_LEN + 1];
  if (token == NULL) {
    launch_usage_error("--issue-key needs the server's --token-file: a job's "
                       "key is derived from its secret");
    return 2;
  }
  if (job[0] == '\0' || proto_job_key(token, token_len, job, key) != 0) {
    launch_usage_error("--issue-key: a job id has 1 to 255 bytes");
    return 2;
  }
  printf("%s\n", key);
  return 0;
}

static void write_port_file(server_main_t *m, const char *port_file) {
  /* Write then rename, so that a reader never sees a partial file. */
  char tmp[4096];
  FILE *f;
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", port_file, (int)getpid());
  if ((f = fopen(tmp, "w")) != NULL) {
    fprintf(f, "%d\n", srv_port(m->srv));
    if (fclose(f) == 0 && rename(tmp, port_file) == 0)
      f = NULL;
  }
  if (f != NULL || access(port_file, F_OK) != 0)
    LU_WARN(&m->log, "cannot write --port-file %s: %s", port_file,
            strerror(errno));
}

int launch_cmd_server(int argc, char **argv) {
  enum { O_NUM = 256 }; /* num_opts[i] is O_NUM + i */
  struct option opts[64] = {
      {"host", required_argument, 0, 'h'},
      {"port", required_argument, 0, 'p'},
      {"unix", required_argument, 0, 'u'},
      {"port-file", required_argument, 0, 'f'},
      {"token-file", required_argument, 0, 't'},
      {"issue-key", required_argument, 0, 'k'},
      {"tls-cert", required_argument, 0, 'C'},
      {"tls-key", required_argument, 0, 'K'},
      {"tls-ca", required_argument, 0, 'A'},
      {"tcpstore-job", required_argument, 0, 'j'},
      {"tcpstore-allow", required_argument, 0, 'a'},
      {"threads", required_argument, 0, 'T'},
      {"metrics-port", required_argument, 0, 'M'},
      {"event-log", required_argument, 0, 'E'},
      {"help", no_argument, 0, 'H'}};
  srv_config_t cfg = SRV_CONFIG_INIT;
  server_main_t m;
  const char *port_file = NULL, *token_file = NULL, *issue = NULL;
  const char *event_log = NULL;
  char *token = NULL;
  size_t token_len = 0, nfixed = 0;
  int opt, rc, port = RDZV_DEFAULT_PORT, threads = srv_default_threads();
  int mport = -1;
  char met_addr[64] = "";
  const char *threads_env = getenv("LAUNCH_SERVER_THREADS");

  while (opts[nfixed].name)
    nfixed++;
  for (size_t i = 0; i < LU_ARRAY_SIZE(num_opts); i++)
    opts[nfixed + i] = (struct option){num_opts[i].name, required_argument, 0,
                                       O_NUM + (int)i};
  memset(&m, 0, sizeof(m));
  lu_log_init(&m.log, "launch server");
  if (threads_env && *threads_env &&
      lu_parse_int(threads_env, 1, 64, &threads) != 0) {
    launch_usage_error("LAUNCH_SERVER_THREADS='%s' is not a number of event "
                       "loops (1-64)", threads_env);
    return 2;
  }
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'h': cfg.host = optarg; break;
    case 'p':
      if (lu_parse_int(optarg, 0, 65535, &port) != 0) {
        launch_usage_error("--port: '%s' is not a port number (0-65535)",
                           optarg);
        return 2;
      }
      break;
    case 'u': cfg.unix_path = optarg; break;
    case 'f': port_file = optarg; break;
    case 't': token_file = optarg; break;
    case 'k': issue = optarg; break;
    case 'C': cfg.tls_cert = optarg; break;
    case 'K': cfg.tls_key = optarg; break;
    case 'A': cfg.tls_ca = optarg; break;
    case 'j': cfg.tcpstore_job = optarg; break;
    case 'E': event_log = optarg; break;
    case 'a': cfg.tcpstore_allow = optarg; break;
    case 'T':
      if (lu_parse_int(optarg, 1, 64, &threads) != 0) {
        launch_usage_error("--threads: '%s' is not a number of event loops "
                           "(1-64)", optarg);
        return 2;
      }
      break;
    case 'M': {
      char err[256];
      if (cfg_parse_metrics_port(optarg, met_addr, sizeof(met_addr),
                                 &mport, err, sizeof(err)) != 0) {
        launch_usage_error("%s", err);
        return 2;
      }
      break;
    }
    case 'H':
      fputs(server_help, stdout);
      return 0;
    default:
      if (opt >= O_NUM && opt < O_NUM + (int)LU_ARRAY_SIZE(num_opts)) {
        if (set_num(&cfg, &num_opts[opt - O_NUM], optarg) != 0)
          return 2;
        break;
      }
      launch_usage_error("server: unknown or incomplete option '%s' (see "
                         "launch server --help)", argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    launch_usage_error("server: unexpected argument '%s'", argv[optind]);
    return 2;
  }
  cfg.port = port;
  cfg.threads = (uint32_t)threads;
  if (token_file && (rc = read_secret(token_file, &token, &token_len)) != 0)
    return rc;
  if (issue) {
    rc = issue_key(token, token_len, issue);
    free(token);
    return rc;
  }
  cfg.token = token;
  cfg.token_len = token_len;
  cfg.log = &m.log;
  if (event_log) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    if ((rc = ev_open(event_log, 0, "", host, &m.ev)) != 0) {
      launch_usage_error("--event-log: cannot open %s: %s", event_log,
                         strerror(-rc));
      free(token);
      return 2;
    }
    /* Written under the server's lock, by one loop at a time. */
    cfg.on_event = ev_server_cb;
    cfg.event_arg = m.ev;
  }
  launch_raise_nofile();
  signal(SIGPIPE, SIG_IGN);
  /* Large blocks straight from mmap and back on free: the resident size
   * then follows what the server holds (--max-memory), not the peak of
   * what it once held. */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
  /* glibc gives each thread its own arena, 64 MiB of address space each:
   * with 8 loops that alone is over what a server run under a memory
   * limit (ulimit -v) has to spare, and allocations fail. The loops work
   * under one lock: two arenas are enough. */
  if (threads > 1)
    mallopt(M_ARENA_MAX, 2);
  uv_loop_init(&m.loop);
  rc = srv_new(&m.loop, &cfg, &m.srv);
  if (rc == 0)
    rc = srv_listen(m.srv);
  if (rc != 0 && m.srv == NULL) {
    /* srv_new said what was wrong. */
    uv_loop_close(&m.loop);
    free(token);
    ev_close(m.ev);
    return 2;
  }
  if (rc != 0) {
    LU_ERR(&m.log, "cannot listen on %s port %d: %s%s",
           cfg.host ? cfg.host : "*", port,
           rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc),
           rc == UV_EADDRINUSE ? " (another server holds the port: pick "
                                 "another with --port, or 0 for any)"
                               : "");
    srv_close(m.srv, NULL, NULL);
    uv_run(&m.loop, UV_RUN_DEFAULT);
    uv_loop_close(&m.loop);
    free(token);
    ev_close(m.ev);
    return 1;
  }
  printf("launch server listening on %s port %d%s%s%s, %d event loop%s\n",
         cfg.host ? cfg.host : "*", srv_port(m.srv),
         token ? " (token required)" : "", cfg.tls_cert ? " (TLS)" : "",
         cfg.unix_path ? " and unix socket" : "", threads,
         threads == 1 ? "" : "s");
  fflush(stdout);
  if (port_file)
    write_port_file(&m, port_file);
  if (mport >= 0) {
    char host[256] = "localhost", esc[256];
    gethostname(host, sizeof(host) - 1);
    if ((rc = met_start(met_addr, mport, host, &m.met)) != 0)
      LU_ERR(&m.log, "cannot serve metrics on %s:%d: %s%s (serving without)",
             met_addr[0] ? met_addr : "*", mport, rdzv_strerror(rc),
             rc == RDZV_ENOTSUP ? " (built without libmicrohttpd)" : "");
    if (m.met) {
      met_label_escape(host, esc, sizeof(esc));
      snprintf(m.met_labels, sizeof(m.met_labels), "node=\"%s\"", esc);
      m.max_memory = cfg.max_memory;
      lu_strlcpy(m.host, host, sizeof(m.host));
      printf("launch server metrics on http://%s:%d/metrics\n",
             met_addr[0] ? met_addr : host, met_port(m.met));
      fflush(stdout);
      uv_timer_init(&m.loop, &m.met_timer);
      m.met_timer.data = &m;
      met_cb(&m.met_timer);
      uv_timer_start(&m.met_timer, met_cb, 1000, 1000);
    }
  }
  m.sigint.data = m.sigterm.data = &m;
  uv_signal_init(&m.loop, &m.sigint);
  uv_signal_init(&m.loop, &m.sigterm);
  uv_signal_start(&m.sigint, on_signal, SIGINT);
  uv_signal_start(&m.sigterm, on_signal, SIGTERM);
  uv_run(&m.loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&m.loop);
  met_stop(m.met);
  ev_close(m.ev);
  if (token) {
    memset(token, 0, token_len);
    free(token);
  }
  if (rc != 0)
    LU_WARN(&m.log, "event loop closed with live handles: %s",
            uv_strerror(rc));
  return 0;
}
