/* cmd_status.c - `launch status`: the round, nodes, ranks, restart count
 * and each node's last heartbeat of a running job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "aclient.h"
#include "launch.h"
#include "lu_buf.h"
#include "msg.h"

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

/* Job and host names, addresses and reasons come from the agents: escaped
 * for the terminal (issue #24). */
static void print_table(const msg_status_t *st) {
  char e1[1100], e2[256], e3[4100];
  /* While re-forming, the server's round is the one that ended: the
   * agents already say they restart into the next. */
  if (!strcmp(st->state, "forming") && st->round >= 0)
    printf("job %s: forming round %lld (round %lld ended), restarts %lld of "
           "%lld (nnodes %lld:%lld)\n", lu_esc(st->job, e1, sizeof(e1)),
           (long long)st->round + 1, (long long)st->round,
           (long long)st->restarts, (long long)st->max_restarts,
           (long long)st->min, (long long)st->max);
  else
    printf("job %s: %s, round %lld, restarts %lld of %lld (nnodes "
           "%lld:%lld)\n", lu_esc(st->job, e1, sizeof(e1)),
           lu_esc(st->state, e2, sizeof(e2)), (long long)st->round,
           (long long)st->restarts, (long long)st->max_restarts,
           (long long)st->min, (long long)st->max);
  if (st->reason && st->reason[0])
    printf("last event: %s\n", lu_esc(st->reason, e3, sizeof(e3)));
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
    printf("%-5s %-24s %-16s %-12s %-11s %.1f s ago\n", node,
           lu_esc(n->host, e1, sizeof(e1)), lu_esc(n->addr, e3, sizeof(e3)),
           ranks, lu_esc(n->state, e2, sizeof(e2)),
           n->heartbeat_age_ms / 1000.0);
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
    } else if (!strcmp(s.state, "idle")) {
      /* The server knows no such job: nothing ever joined it. */
      if (st->json)
        print_json(&s);
      fprintf(stderr, "launch status: the server knows no job '%s' (no node "
                      "has joined it): check --rdzv-id and --rdzv-endpoint\n",
              st->job);
      msg_status_free(&s);
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
  char *token = NULL, err[1024];
  size_t token_len = 0;
  st_t st = {NULL, 0, 1, NULL};
  uv_loop_t loop;
  ac_config_t cfg;
  lu_log_t log;
  cfg_t c;
  int rc = cfg_parse(argc, argv, environ, CFG_STATUS_CMD, &c, err, sizeof(err));
  if (rc == 0 && c.token_file[0] &&
      lu_read_token(c.token_file, &token, &token_len, err, sizeof(err)) != 0)
    rc = -1;
  if (rc != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  memset(&cfg, 0, sizeof(cfg));
  lu_log_init(&log, "launch status");
  uv_loop_init(&loop);
  cfg.host = c.endpoint_host;
  cfg.port = c.endpoint_port;
  cfg.job = c.run_id;
  cfg.role = "admin";
  cfg.token = token;
  cfg.token_len = token_len;
  cfg.tls_ca = c.tls_ca[0] ? c.tls_ca : NULL;
  cfg.tls_cert = c.tls_cert[0] ? c.tls_cert : NULL;
  cfg.tls_key = c.tls_key[0] ? c.tls_key : NULL;
  cfg.connect_timeout_ms = (int)LU_MIN(c.status_timeout_ms, INT32_MAX);
  cfg.reply_timeout_ms = cfg.connect_timeout_ms; /* a stopped server too */
  cfg.log = &log;
  st.json = c.env_json;
  st.job = c.run_id;
  if (ac_new(&loop, &cfg, NULL, NULL, &st, &st.ac) == 0)
    ac_connect(st.ac, on_connected);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(token);
  cfg_free(&c);
  return st.rc;
}
