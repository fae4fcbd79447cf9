/* cmd_status.c - `launch status`: the round, nodes, ranks, restart count
 * and each node's last heartbeat of a running job. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "aclient.h"
#include "launch.h"
#include "lu_buf.h"
#include "msg.h"

static const char status_help[] =
    "usage: launch status --rdzv-endpoint HOST[:PORT] --rdzv-id ID [options]\n"
    "\n"
    "Shows a job's rendezvous: its state, round (0, one more at each restart),\n"
    "restarts used, and each node with its ranks, state and last heartbeat.\n"
    "\n"
    "options:\n"
    "  --rdzv-endpoint H:P   the launch server (default port 29400)\n"
    "  --rdzv-id ID          the job\n"
    "  --token-file F        the job's key or the server's token, if the\n"
    "                        server requires one\n"
    "  --tls-ca F            TLS: verify the server with this CA\n"
    "  --tls-cert F, --tls-key F  TLS: a client certificate (mutual TLS)\n"
    "  --json                print the status as JSON\n"
    "  --timeout SECONDS     give up connecting after this (default 10)\n";

typedef struct st_s {
  ac_t *ac;
  int json;
  int rc;
  const char *job;
} st_t;

static void print_json(const msg_status_t *st) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char *text = NULL;
  lu_json_init(&j, &b, 0);
  lu_json_obj(&j, NULL);
  lu_json_str(&j, "job", st->job);
  lu_json_str(&j, "state", st->state);
  lu_json_int(&j, "round", st->round);
  lu_json_int(&j, "restarts", st->restarts);
  lu_json_int(&j, "max_restarts", st->max_restarts);
  lu_json_int(&j, "min", st->min);
  lu_json_int(&j, "max", st->max);
  lu_json_int(&j, "waited_ms", st->waited_ms);
  lu_json_str(&j, "reason", st->reason ? st->reason : "");
  lu_json_arr(&j, "expected");
  for (size_t i = 0; i < st->nexpected; i++)
    lu_json_str(&j, NULL, st->expected[i]);
  lu_json_end_arr(&j);
  lu_json_arr(&j, "members");
  for (size_t i = 0; i < st->nmembers; i++) {
    const msg_member_t *m = &st->members[i];
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "host", m->host);
    lu_json_str(&j, "addr", m->addr);
    lu_json_int(&j, "node_rank", m->node_rank);
    lu_json_int(&j, "nproc", m->nproc);
    lu_json_int(&j, "base_rank", m->base_rank);
    lu_json_str(&j, "state", m->state);
    lu_json_int(&j, "heartbeat_age_ms", m->heartbeat_age_ms);
    lu_json_bool(&j, "in_round", m->in_round);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  if (lu_buf_finish(&b, &text, NULL) == 0)
    printf("%s\n", text);
  free(text);
}

static void print_table(const msg_status_t *st) {
  printf("job %s: %s, round %lld, restarts %lld of %lld (nnodes %lld:%lld)\n",
         st->job, st->state, (long long)st->round, (long long)st->restarts,
         (long long)st->max_restarts, (long long)st->min, (long long)st->max);
  if (st->reason && st->reason[0])
    printf("last event: %s\n", st->reason);
  if (!strcmp(st->state, "forming"))
    printf("forming for %.1f s\n", st->waited_ms / 1000.0);
  if (st->nmembers == 0) {
    printf("no node has joined\n");
    return;
  }
  printf("%-5s %-24s %-16s %-12s %-11s %s\n", "node", "host", "address",
         "ranks", "state", "heartbeat");
  for (size_t i = 0; i < st->nmembers; i++) {
    const msg_member_t *n = &st->members[i];
    char ranks[64], node[24];
    if (n->node_rank >= 0) {
      snprintf(node, sizeof(node), "%lld", (long long)n->node_rank);
      snprintf(ranks, sizeof(ranks), "%lld-%lld", (long long)n->base_rank,
               (long long)(n->base_rank + n->nproc - 1));
    } else {
      snprintf(node, sizeof(node), "-");
      snprintf(ranks, sizeof(ranks), "(%lld procs)", (long long)n->nproc);
    }
    printf("%-5s %-24s %-16s %-12s %-11s %.1f s ago\n", node, n->host, n->addr,
           ranks, n->state, n->heartbeat_age_ms / 1000.0);
  }
}

static void on_status(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  st_t *st = arg;
  if (status != 0) {
    fprintf(stderr, "launch status: %s\n", ac_last_error(ac));
    st->rc = 1;
  } else {
    msg_status_t s;
    char err[256];
    if (msg_status_unpack(m->nargs > 0 ? &m->args[0] : NULL, &s, err,
                          sizeof(err)) != 0) {
      fprintf(stderr, "launch status: the server's answer does not parse: "
                      "%s\n", err);
      st->rc = 1;
    } else {
      if (st->json)
        print_json(&s);
      else
        print_table(&s);
      msg_status_free(&s);
      st->rc = 0;
    }
  }
  ac_close(ac, NULL, NULL);
}

static void on_connected(ac_t *ac, int status, void *arg) {
  st_t *st = arg;
  if (status != 0) {
    fprintf(stderr, "launch status: %s\n", ac_last_error(ac));
    st->rc = 1;
    ac_close(ac, NULL, NULL);
    return;
  }
  ac_begin(ac, PROTO_OP_STATUS, 0);
  if (ac_send(ac, on_status, st) != 0) {
    st->rc = 1;
    ac_close(ac, NULL, NULL);
  }
}

int launch_cmd_status(int argc, char **argv) {
  static const struct option opts[] = {
      {"rdzv-endpoint", required_argument, 0, 'e'},
      {"rdzv_endpoint", required_argument, 0, 'e'},
      {"rdzv-id", required_argument, 0, 'i'},
      {"rdzv_id", required_argument, 0, 'i'},
      {"token-file", required_argument, 0, 't'},
      {"tls-ca", required_argument, 0, 'A'},
      {"tls-cert", required_argument, 0, 'C'},
      {"tls-key", required_argument, 0, 'K'},
      {"json", no_argument, 0, 'j'},
      {"timeout", required_argument, 0, 'T'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *ep = NULL, *id = NULL, *token_file = NULL;
  char *token = NULL;
  size_t token_len = 0;
  int64_t timeout_ms = 10000;
  lu_endpoint_t e;
  st_t st = {NULL, 0, 1, NULL};
  uv_loop_t loop;
  ac_config_t cfg;
  lu_log_t log;
  int opt;
  memset(&cfg, 0, sizeof(cfg));
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'e': ep = optarg; break;
    case 'i': id = optarg; break;
    case 't': token_file = optarg; break;
    case 'A': cfg.tls_ca = optarg; break;
    case 'C': cfg.tls_cert = optarg; break;
    case 'K': cfg.tls_key = optarg; break;
    case 'j': st.json = 1; break;
    case 'T':
      if (lu_parse_duration_ms(optarg, &timeout_ms) != 0) {
        launch_usage_error("--timeout: '%s' is not a duration", optarg);
        return 2;
      }
      break;
    case 'h': fputs(status_help, stdout); return 0;
    default:
      launch_usage_error("status: unknown or incomplete option '%s' (see "
                         "launch status --help)", argv[optind - 1]);
      return 2;
    }
  }
  if (ep == NULL || id == NULL) {
    launch_usage_error("status needs --rdzv-endpoint HOST:PORT and --rdzv-id "
                       "ID");
    return 2;
  }
  if (lu_endpoint_parse(ep, RDZV_DEFAULT_PORT, &e) != 0 || e.is_unix) {
    launch_usage_error("--rdzv-endpoint: '%s' does not parse: use HOST:PORT",
                       ep);
    return 2;
  }
  if (token_file) {
    char err[1024];
    if (lu_read_token(token_file, &token, &token_len, err, sizeof(err)) != 0) {
      launch_usage_error("%s", err);
      return 2;
    }
  }
  lu_log_init(&log, "launch status");
  uv_loop_init(&loop);
  cfg.host = e.host;
  cfg.port = e.port;
  cfg.job = id;
  cfg.role = "admin";
  cfg.token = token;
  cfg.token_len = token_len;
  cfg.connect_timeout_ms = (int)timeout_ms;
  cfg.reply_timeout_ms = (int)timeout_ms; /* a stopped server too */
  cfg.log = &log;
  st.job = id;
  if (ac_new(&loop, &cfg, NULL, NULL, &st, &st.ac) == 0)
    ac_connect(st.ac, on_connected);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(token);
  return st.rc;
}
