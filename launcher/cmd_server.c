/* cmd_server.c - `launch server`: a standalone rendezvous server. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "launch.h"
#include "server.h"

static const char server_help[] =
    "usage: launch server [options]\n"
    "\n"
    "Runs the rendezvous server: a key/value store per job for launch agents,\n"
    "librdzv clients and PyTorch TCPStore clients (1.13 and >= 2.2), all on\n"
    "one port. Stops cleanly on SIGINT or SIGTERM.\n"
    "\n"
    "options:\n"
    "  --host H              listen address (default: every address, IPv4\n"
    "                        and IPv6)\n"
    "  --port P              TCP port (default 29400; 0 picks a free port and\n"
    "                        prints it)\n"
    "  --unix PATH           also listen on a unix socket\n"
    "  --port-file F         write the bound port to F once listening\n"
    "  --token-file F        require clients to prove they hold the token in\n"
    "                        F (HMAC-SHA256 challenge; the token never crosses\n"
    "                        the wire)\n"
    "  --tcpstore-job JOB    job whose keys TCPStore clients see (default\n"
    "                        \"default\")\n"
    "  --tcpstore-allow LIST addresses or CIDR ranges allowed to speak TCPStore\n"
    "                        while a token is set, e.g. 127.0.0.0/8,::1.\n"
    "                        TCPStore has no authentication: with a token and\n"
    "                        no allow list, every TCPStore client is refused.\n"
    "  --max-conns N         connections in all (default 65536)\n"
    "  --max-frame BYTES     largest request (default 16 MiB)\n"
    "  --max-value BYTES     largest value (default 8 MiB)\n"
    "  --max-waits N         pending waits per connection (default 1024)\n"
    "  --max-store-bytes B   keys + values per job (default 1 GiB)\n"
    "  --max-input-bytes B   request bytes buffered over all connections\n"
    "                        (default 512 MiB)\n"
    "\n"
    "example:\n"
    "  launch server --port 29400 --token-file /etc/launch/token \\\n"
    "                --tcpstore-allow 10.0.0.0/8\n";

typedef struct server_main_s {
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  srv_t *srv;
  lu_log_t log;
  int stopping;
} server_main_t;

static void on_closed(void *arg) {
  server_main_t *m = arg;
  uv_close((uv_handle_t *)&m->sigint, NULL);
  uv_close((uv_handle_t *)&m->sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  server_main_t *m = h->data;
  if (m->stopping)
    return;
  m->stopping = 1;
  LU_INFO(&m->log, "%s: shutting down", strsignal(signum));
  srv_close(m->srv, on_closed, m);
}

static int parse_u32(const char *opt, const char *v, uint32_t *out) {
  int64_t x;
  if (v == NULL || lu_parse_i64(v, strlen(v), &x) != 0 || x <= 0 ||
      x > UINT32_MAX) {
    launch_usage_error("%s: '%s' is not a positive number", opt, v ? v : "");
    return -1;
  }
  *out = (uint32_t)x;
  return 0;
}

int launch_cmd_server(int argc, char **argv) {
  static const struct option opts[] = {
      {"host", required_argument, 0, 'h'},
      {"port", required_argument, 0, 'p'},
      {"unix", required_argument, 0, 'u'},
      {"port-file", required_argument, 0, 'f'},
      {"token-file", required_argument, 0, 't'},
      {"tcpstore-job", required_argument, 0, 'j'},
      {"tcpstore-allow", required_argument, 0, 'a'},
      {"max-conns", required_argument, 0, 'c'},
      {"max-frame", required_argument, 0, 'F'},
      {"max-value", required_argument, 0, 'V'},
      {"max-waits", required_argument, 0, 'W'},
      {"max-store-bytes", required_argument, 0, 'S'},
      {"max-input-bytes", required_argument, 0, 'I'},
      {"help", no_argument, 0, 'H'},
      {0, 0, 0, 0}};
  srv_config_t cfg = SRV_CONFIG_INIT;
  server_main_t m;
  const char *port_file = NULL, *token_file = NULL;
  char *token = NULL;
  size_t token_len = 0;
  int opt, rc, port = RDZV_DEFAULT_PORT;

  memset(&m, 0, sizeof(m));
  lu_log_init(&m.log, "launch server");
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
    case 'j': cfg.tcpstore_job = optarg; break;
    case 'a': cfg.tcpstore_allow = optarg; break;
    case 'c': if (parse_u32("--max-conns", optarg, &cfg.max_conns)) return 2; break;
    case 'F': if (parse_u32("--max-frame", optarg, &cfg.max_frame)) return 2; break;
    case 'V': if (parse_u32("--max-value", optarg, &cfg.max_value)) return 2; break;
    case 'W': if (parse_u32("--max-waits", optarg, &cfg.max_waits)) return 2; break;
    case 'S':
    case 'I': {
      int64_t b;
      if (lu_parse_i64(optarg, strlen(optarg), &b) != 0 || b <= 0) {
        launch_usage_error("%s: '%s' is not a positive number",
                           opt == 'S' ? "--max-store-bytes"
                                      : "--max-input-bytes",
                           optarg);
        return 2;
      }
      if (opt == 'S')
        cfg.max_store_bytes = (size_t)b;
      else
        cfg.max_in_bytes = (size_t)b;
      break;
    }
    case 'H':
      fputs(server_help, stdout);
      return 0;
    default:
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
  if (token_file) {
    rc = lu_read_file(token_file, 4096, &token, &token_len);
    if (rc != 0) {
      launch_usage_error("--token-file %s: %s", token_file, rdzv_strerror(rc));
      return 2;
    }
    token_len = lu_rtrim(token, token_len);
    if (token_len == 0) {
      launch_usage_error("--token-file %s is empty: put a secret in it, e.g. "
                         "head -c 32 /dev/urandom | base64 > %s",
                         token_file, token_file);
      free(token);
      return 2;
    }
    cfg.token = token;
    cfg.token_len = token_len;
  }
  cfg.log = &m.log;
  launch_raise_nofile();
  signal(SIGPIPE, SIG_IGN);
  uv_loop_init(&m.loop);
  rc = srv_new(&m.loop, &cfg, &m.srv);
  if (rc == 0)
    rc = srv_listen(m.srv);
  if (rc != 0 && m.srv == NULL) {
    /* srv_new said what was wrong. */
    uv_loop_close(&m.loop);
    free(token);
    return 2;
  }
  if (rc != 0) {
    LU_ERR(&m.log, "cannot listen on %s port %d: %s%s",
           cfg.host ? cfg.host : "*", port,
           rc < -1000 ? rdzv_strerror(rc) : uv_strerror(rc),
           rc == UV_EADDRINUSE ? " (another server holds the port: pick "
                                 "another with --port, or 0 for any)"
                               : "");
    if (m.srv)
      srv_close(m.srv, NULL, NULL);
    uv_run(&m.loop, UV_RUN_DEFAULT);
    uv_loop_close(&m.loop);
    free(token);
    return 1;
  }
  printf("launch server listening on %s port %d%s%s\n",
         cfg.host ? cfg.host : "*", srv_port(m.srv),
         token ? " (token required)" : "",
         cfg.unix_path ? " and unix socket" : "");
  fflush(stdout);
  if (port_file) {
    /* Write then rename, so that a reader never sees a partial file. */
    char tmp[4096];
    FILE *f;
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", port_file, (int)getpid());
    if ((f = fopen(tmp, "w")) != NULL) {
      fprintf(f, "%d\n", srv_port(m.srv));
      if (fclose(f) == 0 && rename(tmp, port_file) == 0)
        f = NULL;
    }
    if (f != NULL || access(port_file, F_OK) != 0)
      LU_WARN(&m.log, "cannot write --port-file %s: %s", port_file,
              strerror(errno));
  }
  m.sigint.data = m.sigterm.data = &m;
  uv_signal_init(&m.loop, &m.sigint);
  uv_signal_init(&m.loop, &m.sigterm);
  uv_signal_start(&m.sigint, on_signal, SIGINT);
  uv_signal_start(&m.sigterm, on_signal, SIGTERM);
  uv_run(&m.loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&m.loop);
  if (token) {
    memset(token, 0, token_len);
    free(token);
  }
  if (rc != 0)
    LU_WARN(&m.log, "event loop closed with live handles: %s",
            uv_strerror(rc));
  return 0;
}
