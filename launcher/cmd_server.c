/* cmd_server.c - `launch server`: a standalone rendezvous server (with the
 * rendezvous module, so agents and `launch status` work against it), and
 * `launch server --issue-key JOB`, which prints a job's key. */
#include <errno.h>
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
  met_tick(m->met); /* its GPU sampler: reaped, restarted */
}

static void on_signal(uv_signal_t *h, int signum) {
  server_main_t *m = h->data;
  if (m->stopping)
    return;
  m->stopping = 1;
  LU_INFO(&m->log, "%s: shutting down", strsignal(signum));
  srv_close(m->srv, on_closed, m);
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
  char tmp[PATH_MAX + 32]; /* port_file: at most PATH_MAX - 1 */
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
  /* The options are rows of config.c's table (launch server --help). */
  cfg_t c;
  srv_config_t cfg;
  server_main_t m;
  const char *port_file, *token_file, *issue;
  char *token = NULL, err[1024];
  size_t token_len = 0;
  int rc, port, threads, mport;
  const char *met_addr;

  rc = cfg_parse(argc, argv, environ, CFG_SERVER_CMD, &c, err, sizeof(err));
  if (rc != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  cfg_server_config(&c);
  cfg = c.srv;
  port = cfg.port;
  threads = (int)cfg.threads;
  port_file = c.given[CFG_S_SRV_PORT_FILE] ? c.srv_port_file : NULL;
  token_file = c.given[CFG_S_SRV_TOKEN_FILE] ? c.token_file : NULL;
  issue = c.given[CFG_S_SRV_ISSUE_KEY] ? c.srv_issue_key : NULL;
  mport = c.metrics_port;
  met_addr = c.metrics_addr;
  memset(&m, 0, sizeof(m));
  lu_log_init(&m.log, "launch server");
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
  if (c.srv_event_log[0]) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    if ((rc = ev_open(c.srv_event_log, 0, "", host, &m.ev)) != 0) {
      launch_usage_error("--event-log: cannot open %s: %s", c.srv_event_log,
                         strerror(-rc));
      free(token);
      cfg_free(&c);
      return 2;
    }
    /* Written under the server's lock, by one loop at a time. */
    cfg.on_event = ev_server_cb;
    cfg.event_arg = m.ev;
  }
  lu_raise_nofile();
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN); /* an event log past ulimit -f: a failed write */
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
             rc == RDZV_ENOTSUP ? " (built without libevent: install libevent-dev, then rebuild)" : "");
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
