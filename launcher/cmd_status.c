/* cmd_status.c - `launch status`: the round, nodes, ranks, restart count
 * and each node's last heartbeat of a running job. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "aclient.h"
#include "launch.h"

static const char status_help[] =
    "usage: launch status --rdzv-endpoint HOST[:PORT] --rdzv-id ID [options]\n"
    "\n"
    "Shows a job's rendezvous: its state, round (restart generation),\n"
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

static void json_str(const char *p, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static void json_obj(const msgpack_object *o) {
  const char *p;
  size_t n;
  int64_t v;
  switch (o->type) {
  case MSGPACK_OBJECT_MAP:
    putchar('{');
    for (uint32_t i = 0; i < o->via.map.size; i++) {
      if (i)
        putchar(',');
      json_obj(&o->via.map.ptr[i].key);
      putchar(':');
      json_obj(&o->via.map.ptr[i].val);
    }
    putchar('}');
    break;
  case MSGPACK_OBJECT_ARRAY:
    putchar('[');
    for (uint32_t i = 0; i < o->via.array.size; i++) {
      if (i)
        putchar(',');
      json_obj(&o->via.array.ptr[i]);
    }
    putchar(']');
    break;
  case MSGPACK_OBJECT_BOOLEAN:
    fputs(o->via.boolean ? "true" : "false", stdout);
    break;
  case MSGPACK_OBJECT_NIL:
    fputs("null", stdout);
    break;
  default:
    if (proto_obj_bytes(o, &p, &n) == 0)
      json_str(p, n);
    else if (proto_obj_i64(o, &v) == 0)
      printf("%lld", (long long)v);
    else
      fputs("null", stdout);
  }
}

static long long gi(const msgpack_object *m, const char *k) {
  return (long long)proto_map_i64(m, k, 0);
}

static const char *gs(const msgpack_object *m, const char *k, char *buf,
                      size_t cap) {
  proto_map_str(m, k, buf, cap);
  return buf;
}

static void print_table(const msgpack_object *m) {
  char state[64], reason[1024], b1[256], b2[128], b3[32];
  const msgpack_object *mem = proto_map_get(m, "members");
  gs(m, "state", state, sizeof(state));
  printf("job %s: %s, round %lld, restarts %lld of %lld (nnodes %lld:%lld)\n",
         gs(m, "job", b1, sizeof(b1)), state, gi(m, "round"),
         gi(m, "failures"), gi(m, "max_restarts"), gi(m, "min"), gi(m, "max"));
  if (gs(m, "reason", reason, sizeof(reason))[0])
    printf("last event: %s\n", reason);
  if (!strcmp(state, "forming"))
    printf("forming for %.1f s\n", gi(m, "waited_ms") / 1000.0);
  if (mem == NULL || mem->type != MSGPACK_OBJECT_ARRAY || mem->via.array.size == 0) {
    printf("no node has joined\n");
    return;
  }
  printf("%-5s %-24s %-16s %-12s %-11s %s\n", "node", "host", "address",
         "ranks", "state", "heartbeat");
  for (uint32_t i = 0; i < mem->via.array.size; i++) {
    const msgpack_object *n = &mem->via.array.ptr[i];
    char ranks[64], node[24];
    long long nr = gi(n, "node_rank"), base = gi(n, "base_rank"),
              np = gi(n, "nproc");
    if (nr >= 0) {
      snprintf(node, sizeof(node), "%lld", nr);
      snprintf(ranks, sizeof(ranks), "%lld-%lld", base, base + np - 1);
    } else {
      snprintf(node, sizeof(node), "-");
      snprintf(ranks, sizeof(ranks), "(%lld procs)", np);
    }
    printf("%-5s %-24s %-16s %-12s %-11s %.1f s ago\n", node,
           gs(n, "host", b1, sizeof(b1)), gs(n, "addr", b2, sizeof(b2)), ranks,
           gs(n, "state", b3, sizeof(b3)), gi(n, "heartbeat_age_ms") / 1000.0);
  }
}

static void closed(void *arg) { (void)arg; }

static void on_status(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  st_t *st = arg;
  if (status != 0) {
    fprintf(stderr, "launch status: %s\n", ac_last_error(ac));
    st->rc = 1;
  } else if (m->nargs > 0) {
    if (st->json) {
      json_obj(&m->args[0]);
      putchar('\n');
    } else {
      print_table(&m->args[0]);
    }
    st->rc = 0;
  }
  ac_close(ac, closed, NULL);
}

static void on_connected(ac_t *ac, int status, void *arg) {
  st_t *st = arg;
  if (status != 0) {
    fprintf(stderr, "launch status: %s\n", ac_last_error(ac));
    st->rc = 1;
    ac_close(ac, closed, NULL);
    return;
  }
  ac_begin(ac, PROTO_OP_STATUS, 0);
  if (ac_send(ac, on_status, st) != 0) {
    st->rc = 1;
    ac_close(ac, closed, NULL);
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
    int rc = lu_read_file(token_file, 4096, &token, &token_len);
    if (rc != 0) {
      launch_usage_error("--token-file %s: %s", token_file, rdzv_strerror(rc));
      return 2;
    }
    token_len = lu_rtrim(token, token_len);
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
