/* cmd_status.c - `launch status`: the round, nodes, ranks, restart count
 * and each node's last heartbeat of a running job; then each rank's
 * progress key (step, age, steps/s, ETA, loss, the slowest ranks). */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "aclient.h"
#include "cmd_vals.h"
#include "jobreg.h"
#include "launch.h"
#include "lu_buf.h"
#include "msg.h"
#include "proto.h"
#include "rdzv.h"
#include "summary.h"

typedef status_rank_t rk_t;

typedef struct st_s {
  ac_t *ac;
  int json;
  int rc;
  const char *job;
  msg_status_t s;     /* the STATUS reply, while the keys are read */
  char **keys;        /* progress keys listed */
  size_t nkeys;
  int lists;          /* LIST replies so far (native, then TCPStore form) */
  rk_t *rk;
  size_t nrk;
} st_t;

/* ---- per rank: the progress keys -------------------------------------------------- */

static int by_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The median step time of the ranks that report one, 0 none. */
static double median_step_time(const st_t *st) {
  double *v = calloc(st->nrk + 1, sizeof(double)), med = 0;
  size_t n = 0;
  if (v == NULL)
    return 0;
  for (size_t i = 0; i < st->nrk; i++)
    if (st->rk[i].p.has_step_time && st->rk[i].p.step_time > 0)
      v[n++] = st->rk[i].p.step_time;
  if (n > 0) {
    qsort(v, n, sizeof(double), by_double);
    med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  free(v);
  return med;
}


static void print_ranks_table(const st_t *st) {
  double med = median_step_time(st), now_ms = lu_wall_s() * 1000.0;
  int order[3] = {-1, -1, -1};
  if (st->nrk == 0)
    return;
  printf("%-5s %-14s %-8s %-8s %-9s %-10s %s\n", "rank", "step", "age",
         "steps/s", "ETA", "loss", "step time");
  for (size_t i = 0; i < st->nrk; i++) {
    const msg_progress_t *p = &st->rk[i].p;
    char step[40], rate[16] = "-", eta[16] = "-", loss[24] = "-",
         stime[24] = "-";
    if (p->has_total_steps)
      snprintf(step, sizeof(step), "%lld/%lld", (long long)p->step,
               (long long)p->total_steps);
    else
      snprintf(step, sizeof(step), "%lld", (long long)p->step);
    if (p->has_step_time && p->step_time > 0) {
      snprintf(rate, sizeof(rate), "%.2f", 1.0 / p->step_time);
      snprintf(stime, sizeof(stime), "%.3f s", p->step_time);
      if (p->has_total_steps && p->total_steps >= p->step)
        status__fmt_duration((double)(p->total_steps - p->step) *
                                 p->step_time, eta, sizeof(eta));
    }
    if (p->has_loss)
      snprintf(loss, sizeof(loss), "%.4f", p->loss);
    char age[24];
    snprintf(age, sizeof(age), "%.1f s", (now_ms - (double)p->time_ms) / 1000.0);
    printf("%-5d %-14s %-8s %-8s %-9s %-10s %s\n", st->rk[i].rank, step, age,
           rate, eta, loss, stime);
  }
  /* The slowest ranks: step time against the job's median (a straggler
   * score, as NVIDIA's ft_launcher gives). */
  for (size_t i = 0; med > 0 && i < st->nrk; i++) {
    const msg_progress_t *p = &st->rk[i].p;
    if (!p->has_step_time || p->step_time <= med)
      continue; /* the slower half only */
    for (int k = 0; k < 3; k++)
      if (order[k] < 0 || p->step_time > st->rk[order[k]].p.step_time) {
        memmove(&order[k + 1], &order[k], (size_t)(2 - k) * sizeof(int));
        order[k] = (int)i;
        break;
      }
  }
  if (order[0] >= 0 && st->nrk > 1) {
    printf("slowest:");
    for (int k = 0; k < 3 && order[k] >= 0; k++)
      printf("%s rank %d (%.2fx the median step time)", k ? "," : "",
             st->rk[order[k]].rank, st->rk[order[k]].p.step_time / med);
    printf("\n");
  }
}

static void json_ranks(lu_json_t *j, const st_t *st) {
  double med = median_step_time(st);
  lu_json_arr(j, "ranks");
  for (size_t i = 0; i < st->nrk; i++) {
    const msg_progress_t *p = &st->rk[i].p;
    lu_json_obj(j, NULL);
    lu_json_int(j, "rank", st->rk[i].rank);
    lu_json_int(j, "step", p->step);
    lu_json_int(j, "time_ms", p->time_ms);
#define OPT(f, put)                                                            \
  if (p->has_##f)                                                              \
    put(j, #f, p->f);
    OPT(loss, lu_json_num)
    OPT(grad_norm, lu_json_num)
    OPT(lr, lu_json_num)
    OPT(step_time, lu_json_num)
    OPT(tokens, lu_json_int)
    OPT(total_steps, lu_json_int)
#undef OPT
    if (med > 0 && p->has_step_time && p->step_time > 0)
      lu_json_num(j, "straggler_score", p->step_time / med);
    lu_json_end_obj(j);
  }
  lu_json_end_arr(j);
}


/* "exit_code": N, or "signal": "SIGKILL" when a signal ended it. */
static void json_exit(lu_json_t *j, int64_t code, int64_t sig) {
  if (sig)
    lu_json_str(j, "signal", sum_signal_name((int)sig));
  else
    lu_json_int(j, "exit_code", code);
}

/* How a node's or a rank's workers ended, for the table. */
static void fmt_exit(const char *state, int64_t code, int64_t sig, char *out,
                     size_t cap) {
  if (sig)
    snprintf(out, cap, "%s", sum_signal_name((int)sig));
  else if (code >= 0)
    snprintf(out, cap, "exit %lld", (long long)code);
  else if (!strcmp(state, "stopped"))
    snprintf(out, cap, "stopped");
  else
    snprintf(out, cap, "-");
}

/* An ended job: ok or failed, when, how long the server keeps it, and
 * the root cause of a failure. */
static void print_end(const msg_status_t *st) {
  char when[32], keep[32], e1[300], e2[1100], code[40];
  if (st->ok < 0)
    return;
  status__fmt_duration(lu_wall_s() - st->end_time, when, sizeof(when));
  status__fmt_duration(st->keep_ms / 1000.0, keep, sizeof(keep));
  printf("ended: %s %s ago (the server keeps it %s more)\n",
         st->ok == 1 ? "ok" : "FAILED", when, keep);
  if (st->has_root) {
    const msg_failure_t *f = &st->root;
    fmt_exit("", f->exit_code, f->signal, code, sizeof(code));
    printf("root cause: rank %lld (local %lld, pid %lld) on %s: %s%s%s\n",
           (long long)f->rank, (long long)f->local_rank, (long long)f->pid,
           lu_esc(f->host, e1, sizeof(e1)), code, f->error ? ": " : "",
           f->error ? lu_esc(f->error, e2, sizeof(e2)) : "");
  }
}

static void print_json(const msg_status_t *st, const st_t *sx) {
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
    if (st->ok >= 0 || m->exit_code >= 0 || m->signal)
      json_exit(&j, m->exit_code, m->signal);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  if (st->ok >= 0) {
    lu_json_bool(&j, "ok", st->ok == 1);
    lu_json_int(&j, "end_time_ms", (long long)(st->end_time * 1000.0));
    lu_json_num(&j, "ended_ago_s", lu_wall_s() - st->end_time);
    lu_json_int(&j, "keep_ms", st->keep_ms);
  }
  if (st->has_root) {
    const msg_failure_t *f = &st->root;
    lu_json_obj(&j, "root_cause");
    lu_json_str(&j, "host", f->host);
    lu_json_int(&j, "rank", f->rank);
    lu_json_int(&j, "local_rank", f->local_rank);
    lu_json_int(&j, "pid", f->pid);
    json_exit(&j, f->exit_code, f->signal);
    if (f->error)
      lu_json_str(&j, "error", f->error);
    lu_json_end_obj(&j);
  }
  if (sx)
    json_ranks(&j, sx);
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
  print_end(st);
  if (st->nmembers == 0) {
    printf("no node has joined\n");
    return;
  }
  if (st->ok >= 0) { /* ended: how each node's workers ended */
    printf("%-5s %-24s %-16s %-12s %-11s %s\n", "node", "host", "address",
           "ranks", "state", "exit");
    for (size_t i = 0; i < st->nmembers; i++) {
      const msg_member_t *n = &st->members[i];
      char ranks[64], code[40];
      snprintf(ranks, sizeof(ranks), "%lld-%lld", (long long)n->base_rank,
               (long long)(n->base_rank + n->nproc - 1));
      fmt_exit(n->state, n->exit_code, n->signal, code, sizeof(code));
      printf("%-5lld %-24s %-16s %-12s %-11s %s\n", (long long)n->node_rank,
             lu_esc(n->host, e1, sizeof(e1)), lu_esc(n->addr, e3, sizeof(e3)),
             ranks, lu_esc(n->state, e2, sizeof(e2)), code);
    }
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

static void print_all(st_t *st) {
  if (st->json) {
    print_json(&st->s, st);
  } else {
    print_table(&st->s);
    print_ranks_table(st);
  }
  msg_status_free(&st->s);
  rdzv_free_keys(st->keys, st->nkeys);
  st->keys = NULL;
  free(st->rk);
  st->rk = NULL;
  ac_close(st->ac, NULL, NULL);
}

/* The values of the keys listed: decoded, sorted by rank. */
static void on_mget(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  st_t *st = arg;
  (void)ac;
  if (status == 0)
    status__ranks(m, st->keys, st->nkeys, &st->rk, &st->nrk);
  print_all(st);
}

static void on_list(ac_t *ac, int status, const proto_msg_t *m, void *arg);

/* LIST launch/progress/, then the TCPStore writers' /launch/progress/ in
 * the round's namespace (docs/protocol.md#tcpstore-namespaces), then one
 * MGET of every key found. */
static void ask_list(st_t *st) {
  msgpack_packer *pk;
  char prefix[96];
  if (st->lists < 2) {
    snprintf(prefix, sizeof(prefix), RDZV_TORCH_NS "%lld//" RDZV_PROGRESS_PREFIX,
             (long long)(st->s.round >= 0 ? st->s.round : 0));
    pk = ac_begin(st->ac, PROTO_OP_LIST, 1);
    proto_pack_str(pk, st->lists == 0 ? RDZV_PROGRESS_PREFIX : prefix);
    if (ac_send(st->ac, on_list, st) != 0)
      print_all(st);
    return;
  }
  if (st->nkeys == 0) {
    print_all(st);
    return;
  }
  pk = ac_begin(st->ac, PROTO_OP_MGET, 2);
  msgpack_pack_array(pk, (uint32_t)st->nkeys);
  for (size_t i = 0; i < st->nkeys; i++)
    proto_pack_str(pk, st->keys[i]);
  msgpack_pack_int64(pk, 0); /* do not wait */
  if (ac_send(st->ac, on_mget, st) != 0)
    print_all(st);
}

static void on_list(ac_t *ac, int status, const proto_msg_t *m, void *arg) {
  st_t *st = arg;
  (void)ac;
  st->lists++;
  if (status == 0)
    status__keys_add(m, &st->keys, &st->nkeys);
  ask_list(st);
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
        print_json(&s, NULL);
      fprintf(stderr, "launch status: the server knows no job '%s' (no node "
                      "has joined it, or it ended longer ago than the "
                      "server's --keep-ended): check --rdzv-id and "
                      "--rdzv-endpoint\n", st->job);
      msg_status_free(&s);
      st->rc = 1;
    } else {
      st->s = s; /* the ranks' progress next, then print */
      st->rc = 0;
      ask_list(st);
      return;
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


/* ---- no endpoint: this node's jobs (jobreg.h) ---------------------------------------- */

static void ago(char *out, size_t n, int64_t secs) {
  if (secs < 0)
    secs = 0;
  if (secs < 120)
    snprintf(out, n, "%llds", (long long)secs);
  else if (secs < 7200)
    snprintf(out, n, "%lldm", (long long)(secs / 60));
  else
    snprintf(out, n, "%lldh", (long long)(secs / 3600));
}

static const char *reg_state(const jobreg_t *j) {
  return j->state == JOBREG_RUNNING ? "running"
         : j->state == JOBREG_GONE  ? "gone"
         : j->ok                    ? "finished"
                                    : "failed";
}

static void list_json(const jobreg_t *v, size_t n) {
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t j;
  char *text;
  lu_json_init(&j, &b, 1);
  lu_json_obj(&j, NULL);
  lu_json_arr(&j, "jobs");
  for (size_t i = 0; i < n; i++) {
    const jobreg_t *r = &v[i];
    char ep[300];
    snprintf(ep, sizeof(ep), "%s:%d", r->ep_host, r->ep_port);
    lu_json_obj(&j, NULL);
    lu_json_str(&j, "job", r->job);
    lu_json_str(&j, "state", reg_state(r));
    lu_json_str(&j, "host", r->host);
    lu_json_int(&j, "pid", r->pid);
    lu_json_str(&j, "endpoint", ep);
    lu_json_bool(&j, "standalone", r->standalone);
    lu_json_int(&j, "round", r->round);
    lu_json_int(&j, "restarts", r->restarts);
    lu_json_int(&j, "nproc", r->nproc);
    lu_json_int(&j, "started", r->started);
    if (r->state != JOBREG_RUNNING)
      lu_json_int(&j, "ended", r->ended);
    if (r->state == JOBREG_ENDED) {
      lu_json_int(&j, "exit_code", r->exit_code);
      if (r->reason[0])
        lu_json_str(&j, "reason", r->reason);
    }
    lu_json_str(&j, "run_dir", r->run_dir);
    lu_json_str(&j, "program", r->program);
    lu_json_end_obj(&j);
  }
  lu_json_end_arr(&j);
  lu_json_end_obj(&j);
  lu_buf_puts(&b, "\n");
  if (lu_buf_finish(&b, &text, NULL) == 0) {
    fputs(text, stdout);
    free(text);
  }
}

/* The job list for a terminal: every name and reason in it is escaped
 * (a host name is anyone's choice, and the reason names other nodes). */
static void list_text(const jobreg_t *v, size_t n) {
  int64_t now = (int64_t)time(NULL);
  int w = 3;
  char esc[3][1024];
  for (size_t i = 0; i < n; i++)
    w = LU_MAX(w, (int)strlen(lu_esc(v[i].job, esc[0], sizeof(esc[0]))));
  printf("%-*s %-8s %7s %-22s %5s %8s %7s %s\n", w, "JOB", "STATE", "PID",
         "ENDPOINT", "ROUND", "RESTARTS", "SINCE", "EXIT");
  for (size_t i = 0; i < n; i++) {
    const jobreg_t *r = &v[i];
    char ep[300], since[32], ex[300] = "-";
    snprintf(ep, sizeof(ep), "%s:%d", r->ep_host, r->ep_port);
    ago(since, sizeof(since),
        now - (r->state == JOBREG_RUNNING ? r->started : r->ended));
    if (r->state == JOBREG_ENDED)
      snprintf(ex, sizeof(ex), "%d%s%.200s", r->exit_code,
               r->reason[0] ? ": " : "", r->reason);
    else if (r->state == JOBREG_GONE)
      snprintf(ex, sizeof(ex), "? (the agent died without an end)");
    printf("%-*s %-8s %7d %-22s %5lld %8lld %7s %s\n", w,
           lu_esc(r->job, esc[0], sizeof(esc[0])), reg_state(r), r->pid,
           lu_esc(ep, esc[1], sizeof(esc[1])), (long long)r->round,
           (long long)r->restarts, since, lu_esc(ex, esc[2], sizeof(esc[2])));
  }
  printf("(a running job's ranks: launch status --rdzv-id JOB; ended jobs "
         "are listed for %d minutes)\n", JOBREG_KEEP_S / 60);
}

/* RET -1: go on and ask the server of c->endpoint (set from the registry
 * for --rdzv-id alone); else the exit code. */
static int from_registry(cfg_t *c) {
  jobreg_t *v = NULL;
  size_t n = 0, k = 0;
  int want = c->given[CFG_S_ID];
  int rc = jobreg_list(&v, &n);
  if (rc != 0) {
    fprintf(stderr, "launch status: cannot read this node's job registry: "
            "%s; give --rdzv-endpoint HOST:PORT --rdzv-id ID\n",
            rdzv_strerror(rc));
    return 1;
  }
  for (size_t i = 0; i < n; i++)
    if (!want || strcmp(v[i].job, c->run_id) == 0)
      v[k++] = v[i];
  if (want && k > 0 && v[0].state == JOBREG_RUNNING) {
    lu_strlcpy(c->endpoint_host, v[0].ep_host, sizeof(c->endpoint_host));
    c->endpoint_port = v[0].ep_port;
    free(v);
    return -1;
  }
  if (want && k == 0) {
    fprintf(stderr, "launch status: no job %s on this node (launch status "
            "lists them); for a job of another node give --rdzv-endpoint "
            "HOST:PORT too\n", c->run_id);
    free(v);
    return 1;
  }
  if (c->env_json)
    list_json(v, k);
  else if (k == 0)
    printf("no job of this user on this node (started or ended in the "
           "last %d minutes)\n", JOBREG_KEEP_S / 60);
  else
    list_text(v, k);
  free(v);
  return 0;
}

int launch_cmd_status(int argc, char **argv) {
  char *token = NULL, err[1024];
  size_t token_len = 0;
  st_t st;
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
  if (!c.endpoint_given && (rc = from_registry(&c)) >= 0) {
    free(token);
    cfg_free(&c);
    return rc;
  }
  memset(&cfg, 0, sizeof(cfg));
  memset(&st, 0, sizeof(st));
  st.rc = 1;
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
