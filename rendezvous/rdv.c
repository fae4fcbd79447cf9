/* rdv.c - rendezvous: rounds, membership, restart generations, the exit
 * barrier and the root cause of a failed job, pushed to every agent.
 *
 * A job forms a round when MAX nodes joined, or MIN joined and the last
 * call passed, or (after a restart) every node of the previous round that
 * is still alive joined again. Node ranks: preferred ranks (static
 * --node-rank, SLURM_NODEID, VC_TASK_INDEX) first, the rest by host name,
 * then address. While a round runs, a failed worker (REPORT), a lost agent
 * (closed connection, or three missed heartbeats) or a newcomer while
 * there is room starts the next generation: RESTART is pushed to every
 * member, which stops its workers and joins again. Failures count against
 * --max-restarts once per generation for the whole job; membership changes
 * do not. The job ends when every member reported success (SHUTDOWN ok) or
 * restarts ran out (SHUTDOWN with the root cause). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rdv.h"
#include "srv_int.h"

enum { M_JOINING = 0, M_RUNNING, M_DONE, M_RESTARTING };
enum { R_IDLE = 0, R_FORMING, R_RUNNING, R_DONE };

static const char *const mstate_names[] = {"joining", "running", "done",
                                           "restarting"};
static const char *const rstate_names[] = {"idle", "forming", "running",
                                           "finished"};

typedef struct rdv_member_s {
  list_t link;
  struct rdv_job_s *rj;
  conn_t *c;
  char host[256];
  char addr[INET6_ADDRSTRLEN + 8];
  int nproc, pref_rank;
  int node_rank, base_rank;
  int state;
  int in_round;     /* member of the current (or last) round */
  uint64_t join_id; /* pending JOIN request (M_JOINING) */
  uint64_t order;   /* join order */
  uint64_t last_hb;
  char *fp;         /* fingerprint: KEY=VALUE lines */
  int master_port;
} rdv_member_t;

typedef struct rdv_job_s {
  job_t *job;
  int configured;
  int min, max, max_restarts, static_mode, allow_mismatch;
  int64_t last_call_ms, join_timeout_ms, hb_ms;
  char **expected;
  int nexpected;
  int state;
  int64_t gen; /* number of the current round; -1 before the first */
  int failures;
  int64_t failed_gen; /* generation whose failure was counted */
  uint64_t forming_since, min_since;
  list_t members;
  uint64_t next_order;
  uint8_t *root;     /* msgpack map of the root cause of failed_gen */
  size_t root_len;
  char reason[1024]; /* why the last restart or the end happened */
} rdv_job_t;

/* ---- helpers -------------------------------------------------------------------------- */

static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v) {
  proto_pack_str(pk, k);
  proto_pack_str(pk, v);
}

static void pack_kv_int(msgpack_packer *pk, const char *k, int64_t v) {
  proto_pack_str(pk, k);
  msgpack_pack_int64(pk, v);
}

static rdv_job_t *rdv_job(job_t *j) {
  rdv_job_t *rj = j->rdv;
  if (rj)
    return rj;
  if ((rj = calloc(1, sizeof(*rj))) == NULL)
    return NULL;
  rj->job = j;
  rj->gen = -1;
  rj->failed_gen = -1;
  list_init(&rj->members);
  j->rdv = rj;
  return rj;
}

static int count_state(rdv_job_t *rj, int state, int in_round_only) {
  int n = 0;
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    if ((state < 0 || m->state == state) && (!in_round_only || m->in_round))
      n++;
  }
  return n;
}

static void member_free(rdv_member_t *m) {
  list_remove(&m->link);
  if (m->c && m->c->rdv == m)
    m->c->rdv = NULL;
  free(m->fp);
  free(m);
}

static void schedule(srv_t *s);

/* ---- replies and pushes ------------------------------------------------------------------ */

static void reply_join_error(rdv_member_t *m, int status, const char *msg) {
  if (m->c && m->join_id)
    srv__reply_err(m->c, m->join_id, status, "%s", msg);
  m->join_id = 0;
}

static void push_restart(rdv_member_t *m, int64_t gen, const char *reason) {
  if (m->c == NULL)
    return;
  srv__push_begin(m->c, PROTO_EV_RESTART, 2);
  msgpack_pack_int64(&m->c->out.pk, gen);
  proto_pack_str(&m->c->out.pk, reason);
  srv__reply_end(m->c);
}

static void push_shutdown(rdv_job_t *rj, rdv_member_t *m, int ok) {
  msgpack_packer *pk;
  if (m->c == NULL)
    return;
  pk = &m->c->out.pk;
  srv__push_begin(m->c, PROTO_EV_SHUTDOWN, 5);
  if (ok)
    msgpack_pack_true(pk);
  else
    msgpack_pack_false(pk);
  proto_pack_str(pk, rj->reason);
  if (!ok && rj->root) {
    /* The root cause map as the failing agent sent it. */
    if (proto_enc_raw(&m->c->out, rj->root, rj->root_len) != 0)
      m->c->broken = 1;
  } else {
    msgpack_pack_nil(pk);
  }
  msgpack_pack_int64(pk, rj->failures > 0 ? rj->failures - !ok : 0);
  msgpack_pack_int64(pk, rj->max_restarts);
  srv__reply_end(m->c);
}

/* ---- the job's life -------------------------------------------------------------------------- */

static void finish(rdv_job_t *rj, int ok) {
  srv_t *s = rj->job->srv;
  rj->state = R_DONE;
  LU_INFO(&s->log, "job %s %s: %s", rj->job->name, ok ? "finished" : "failed",
          rj->reason);
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    if (m->state == M_JOINING && !m->in_round)
      reply_join_error(m, RDZV_ERDZVCLOSED, ok ? "the job finished" : rj->reason);
    else if (m->state == M_JOINING)
      reply_join_error(m, RDZV_ERDZVCLOSED, rj->reason);
    push_shutdown(rj, m, ok);
  }
}

/* Start the next generation: every member of the round stops its workers
 * and joins again. */
static void restart(rdv_job_t *rj, const char *fmt, ...) LU_PRINTF(2, 3);
static void restart(rdv_job_t *rj, const char *fmt, ...) {
  srv_t *s = rj->job->srv;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rj->reason, sizeof(rj->reason), fmt, ap);
  va_end(ap);
  rj->state = R_FORMING;
  rj->forming_since = uv_now(s->loop);
  rj->min_since = 0;
  LU_INFO(&s->log, "job %s: restarting into round %" PRId64 ": %s",
          rj->job->name, rj->gen + 1, rj->reason);
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    if (m->in_round && (m->state == M_RUNNING || m->state == M_DONE)) {
      m->state = M_RESTARTING;
      push_restart(m, rj->gen + 1, rj->reason);
    }
  }
}

static int cmp_members(const void *a, const void *b) {
  const rdv_member_t *x = *(rdv_member_t *const *)a,
                     *y = *(rdv_member_t *const *)b;
  int c = strcmp(x->host, y->host);
  if (c)
    return c;
  c = strcmp(x->addr, y->addr);
  if (c)
    return c;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_select(const void *a, const void *b) {
  const rdv_member_t *x = *(rdv_member_t *const *)a,
                     *y = *(rdv_member_t *const *)b;
  /* Nodes of the previous round first, then in join order. */
  if (x->in_round != y->in_round)
    return y->in_round - x->in_round;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Compare a node's fingerprint with node 0's. Only the lines that differ
 * are written to out. RET the number of differing items. */
static int fp_diff(const char *ref, const char *fp, const char *host,
                   const char *host0, char *out, size_t cap) {
  int nd = 0;
  size_t used = 0;
  const char *sets[2] = {ref ? ref : "", fp ? fp : ""};
  out[0] = '\0';
  for (int pass = 0; pass < 2; pass++) {
    const char *p = sets[pass], *other = sets[1 - pass];
    while (*p) {
      size_t len = strcspn(p, "\n");
      const char *eq = memchr(p, '=', len);
      size_t klen = eq ? (size_t)(eq - p) : len;
      const char *q = other, *found = NULL;
      size_t flen = 0;
      while (*q) {
        size_t l2 = strcspn(q, "\n");
        if (l2 > klen && q[klen] == '=' && memcmp(q, p, klen) == 0) {
          found = q;
          flen = l2;
          break;
        }
        if (l2 == klen && memcmp(q, p, klen) == 0) {
          found = q;
          flen = l2;
          break;
        }
        q += l2 + (q[l2] == '\n');
      }
      if (found == NULL || (pass == 0 && (flen != len || memcmp(found, p, len)))) {
        const char *v0 = pass == 0 ? (eq ? eq + 1 : "") : "(unset)";
        int v0len = pass == 0 ? (int)(len - klen - (eq ? 1 : 0)) : 7;
        const char *v1 = found ? found + klen + 1 : "(unset)";
        int v1len = found ? (int)(flen - klen - 1) : 7;
        if (pass == 1) {
          v0 = "(unset)";
          v0len = 7;
          v1 = eq ? eq + 1 : "";
          v1len = (int)(len - klen - (eq ? 1 : 0));
        }
        if (used < cap) {
          int w = snprintf(out + used, cap - used, "%s  %.*s: %s=%.*s %s=%.*s",
                           nd ? "\n" : "", (int)klen, p, host0, v0len, v0,
                           host, v1len, v1);
          if (w > 0)
            used += (size_t)w;
        }
        nd++;
      }
      p += len + (p[len] == '\n');
    }
  }
  return nd;
}

static void reply_round(rdv_job_t *rj, rdv_member_t *m,
                        const rdv_member_t *node0, int n, int world) {
  msgpack_packer *pk = &m->c->out.pk;
  /* Each reply carries this node's place and node 0's address only (rank
   * 0's store in --torch-store rank0 mode): O(1) per node, not O(nodes);
   * STATUS lists everyone. */
  srv__reply_begin(m->c, m->join_id, 0, 1);
  msgpack_pack_map(pk, 10);
  pack_kv_int(pk, "round", rj->gen);
  pack_kv_int(pk, "node_rank", m->node_rank);
  pack_kv_int(pk, "nnodes", n);
  pack_kv_int(pk, "world_size", world);
  pack_kv_int(pk, "base_rank", m->base_rank);
  pack_kv_int(pk, "failures", rj->failures);
  pack_kv_int(pk, "master_port", node0 ? node0->master_port : 0);
  pack_kv_str(pk, "addr", m->addr);
  pack_kv_str(pk, "node0_addr", node0 ? node0->addr : "");
  pack_kv_str(pk, "node0_host", node0 ? node0->host : "");
  srv__reply_end(m->c);
  m->join_id = 0;
}

/* Form a round from the joining members. RET 1 if formed. */
static int form_round(rdv_job_t *rj) {
  srv_t *s = rj->job->srv;
  int n = count_state(rj, M_JOINING, 0), k = 0, world = 0;
  rdv_member_t **all, **sel, *node0 = NULL;
  unsigned char *taken;
  if (n <= 0 || (all = calloc((size_t)n, sizeof(*all))) == NULL)
    return 0;
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    if (m->state == M_JOINING)
      all[k++] = m;
  }
  qsort(all, (size_t)n, sizeof(*all), cmp_select);
  if (n > rj->max)
    n = rj->max;
  if (n <= 0) {
    free(all);
    return 0;
  }
  sel = all;
  /* Preferred ranks: each must be unique and below the node count. */
  if ((taken = calloc((size_t)n, 1)) == NULL) {
    free(all);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int r = sel[i]->pref_rank;
    sel[i]->node_rank = -1;
    if (r < 0)
      continue;
    if (r >= n || taken[r]) {
      char msg[600];
      rdv_member_t *m = sel[i];
      if (r >= n)
        snprintf(msg, sizeof(msg), "node rank %d of %s is not below the %d "
                 "nodes of the round: give each node a rank from 0 to %d", r,
                 m->host, n, n - 1);
      else
        snprintf(msg, sizeof(msg), "node rank %d is claimed twice (%s and "
                 "another node): give every node its own --node-rank", r,
                 m->host);
      if (rj->static_mode || r < n) {
        LU_WARN(&s->log, "job %s: %s", rj->job->name, msg);
        reply_join_error(m, RDZV_EINVAL, msg);
        m->state = M_RESTARTING; /* out of the round; its agent exits */
        m->in_round = 0;
        free(taken);
        free(all);
        return 0;
      }
      continue; /* elastic: a rank beyond the round is just a preference */
    }
    taken[r] = 1;
    sel[i]->node_rank = r;
  }
  {
    /* The rest by host name, then address. */
    rdv_member_t **rest = calloc((size_t)n, sizeof(*rest));
    int nr = 0, slot = 0;
    if (rest == NULL) {
      free(taken);
      free(all);
      return 0;
    }
    for (int i = 0; i < n; i++)
      if (sel[i]->node_rank < 0)
        rest[nr++] = sel[i];
    qsort(rest, (size_t)nr, sizeof(*rest), cmp_members);
    for (int i = 0; i < nr; i++) {
      while (taken[slot])
        slot++;
      rest[i]->node_rank = slot;
      taken[slot] = 1;
    }
    free(rest);
  }
  free(taken);
  for (int i = 0; i < n; i++)
    if (sel[i]->node_rank == 0)
      node0 = sel[i];
  /* Every node must match node 0 (seed 001 92: only host name, address
   * and node rank may differ). */
  if (node0 && node0->fp) {
    int refused = 0;
    for (int i = 0; i < n; i++) {
      char diff[2048], msg[2048 + 2 * 256 + 128];
      if (sel[i] == node0 || sel[i]->fp == NULL)
        continue;
      if (fp_diff(node0->fp, sel[i]->fp, sel[i]->host, node0->host, diff,
                  sizeof(diff)) == 0)
        continue;
      snprintf(msg, sizeof(msg), "node %s differs from node 0 (%s):\n%s%s",
               sel[i]->host, node0->host, diff,
               rj->allow_mismatch ? "" : "\nfix the node, or run with "
                                         "--allow-mismatch");
      if (rj->allow_mismatch) {
        LU_WARN(&s->log, "job %s: %s", rj->job->name, msg);
        continue;
      }
      LU_WARN(&s->log, "job %s: refused %s", rj->job->name, msg);
      reply_join_error(sel[i], RDZV_EMISMATCH, msg);
      sel[i]->state = M_RESTARTING;
      sel[i]->in_round = 0;
      refused++;
    }
    if (refused) {
      free(all);
      return 0; /* re-evaluated without the refused nodes */
    }
  }
  /* Global ranks, contiguous per node in node-rank order. */
  for (int r = 0; r < n; r++)
    for (int i = 0; i < n; i++)
      if (sel[i]->node_rank == r) {
        sel[i]->base_rank = world;
        world += sel[i]->nproc;
      }
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next)
    LIST_ENTRY(it, rdv_member_t, link)->in_round = 0;
  rj->gen++;
  rj->state = R_RUNNING;
  for (int i = 0; i < n; i++) {
    sel[i]->in_round = 1;
    sel[i]->state = M_RUNNING;
    sel[i]->last_hb = uv_now(s->loop);
    reply_round(rj, sel[i], node0, n, world);
  }
  LU_INFO(&s->log, "job %s: round %" PRId64 " formed: %d nodes, world size "
          "%d", rj->job->name, rj->gen, n, world);
  free(all);
  return 1;
}

static void missing_hosts(rdv_job_t *rj, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < rj->nexpected; i++) {
    int found = 0;
    for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
      rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
      if (m->state == M_JOINING &&
          (!strcmp(m->host, rj->expected[i]) || !strcmp(m->addr, rj->expected[i])))
        found = 1;
    }
    if (!found && used < cap) {
      int w = snprintf(out + used, cap - used, "%s%s", used ? ", " : "",
                       rj->expected[i]);
      if (w > 0)
        used += (size_t)w;
    }
  }
}

static void joined_hosts(rdv_job_t *rj, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    if (m->state == M_JOINING && used < cap) {
      int w = snprintf(out + used, cap - used, "%s%s", used ? ", " : "",
                       m->host);
      if (w > 0)
        used += (size_t)w;
    }
  }
}

/* Decide whether the forming round closes (or times out) now. */
static void evaluate(rdv_job_t *rj) {
  srv_t *s = rj->job->srv;
  uint64_t now = uv_now(s->loop);
  int n, rejoined = 1;
  if (rj->state == R_IDLE) {
    if (count_state(rj, M_JOINING, 0) == 0)
      return;
    rj->state = R_FORMING;
    rj->forming_since = now;
    rj->min_since = 0;
  }
  if (rj->state != R_FORMING)
    return;
  for (;;) {
    n = count_state(rj, M_JOINING, 0);
    rejoined = count_state(rj, M_RESTARTING, 1) == 0;
    if (n >= rj->min && rj->min_since == 0)
      rj->min_since = now;
    if (n < rj->min)
      rj->min_since = 0;
    if (n >= rj->max || (rj->gen >= 0 && rejoined && n >= rj->min) ||
        (n >= rj->min && rj->min_since &&
         now >= rj->min_since + (uint64_t)rj->last_call_ms)) {
      if (form_round(rj))
        return;
      /* a node was refused: look again without it */
      if (rj->state != R_FORMING)
        return;
      continue;
    }
    break;
  }
  if (now >= rj->forming_since + (uint64_t)rj->join_timeout_ms) {
    char joined[1024], missing[1024], msg[2600];
    joined_hosts(rj, joined, sizeof(joined));
    missing_hosts(rj, missing, sizeof(missing));
    snprintf(msg, sizeof(msg), "rendezvous timed out after %.0f s: %d of "
             "%d..%d nodes joined (%s)%s%s", rj->join_timeout_ms / 1000.0, n,
             rj->min, rj->max, joined[0] ? joined : "none",
             missing[0] ? "; missing: " : "", missing);
    lu_strlcpy(rj->reason, msg, sizeof(rj->reason));
    if (rj->gen >= 0) {
      finish(rj, 0);
    } else {
      LU_WARN(&s->log, "job %s: %s", rj->job->name, msg);
      for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
        rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
        reply_join_error(m, -ETIMEDOUT, msg);
        m->state = M_RESTARTING;
      }
      rj->state = R_IDLE;
    }
  }
}

/* A member is gone (closed connection, missed heartbeats, LEAVE). */
static void member_lost(rdv_member_t *m, const char *why) {
  rdv_job_t *rj = m->rj;
  int was_in_round = m->in_round;
  int was_live = m->state == M_RUNNING || m->state == M_DONE ||
                 m->state == M_RESTARTING;
  char host[256];
  lu_strlcpy(host, m->host, sizeof(host));
  member_free(m);
  if (rj->state == R_RUNNING && was_in_round && was_live) {
    if (count_state(rj, -1, 1) > 0)
      restart(rj, "lost node %s (%s)", host, why);
  } else if (rj->state == R_FORMING) {
    evaluate(rj);
  }
  if (list_empty(&rj->members) && (rj->state == R_DONE || rj->state == R_IDLE)) {
    /* Every node of a finished job is gone: forget it, so that a new run
     * with the same id starts clean (no stale keys of the old one). */
    job_t *j = rj->job;
    if (rj->state == R_DONE && j->nconns == 0)
      store_clear(j->store);
    rj->state = R_IDLE;
    rj->gen = -1;
    rj->failures = 0;
    rj->failed_gen = -1;
    rj->configured = 0;
    free(rj->root);
    rj->root = NULL;
    rj->root_len = 0;
  }
  schedule(rj->job->srv);
}

/* ---- ops --------------------------------------------------------------------------------------- */

static int configure(rdv_job_t *rj, const msgpack_object *info, char *err,
                     size_t cap) {
  int min = (int)proto_map_i64(info, RDV_K_MIN, 1), max = (int)proto_map_i64(info, RDV_K_MAX, 1);
  int st = (int)proto_map_i64(info, RDV_K_STATIC, 0);
  int mr = (int)proto_map_i64(info, RDV_K_MAX_RESTARTS, 0);
  if (min < 1 || max < min) {
    snprintf(err, cap, "nnodes %d:%d is not MIN:MAX with 0 < MIN <= MAX", min,
             max);
    return -1;
  }
  if (rj->configured) {
    if (min != rj->min || max != rj->max || st != rj->static_mode ||
        mr != rj->max_restarts) {
      snprintf(err, cap, "this node asks for --nnodes %d:%d%s --max-restarts "
               "%d but job %s runs with --nnodes %d:%d%s --max-restarts %d: "
               "give every node the same flags", min, max,
               st ? " (static)" : "", mr, rj->job->name, rj->min, rj->max,
               rj->static_mode ? " (static)" : "", rj->max_restarts);
      return -1;
    }
    return 0;
  }
  rj->min = min;
  rj->max = max;
  rj->static_mode = st;
  rj->max_restarts = mr;
  rj->allow_mismatch = (int)proto_map_i64(info, RDV_K_ALLOW_MISMATCH, 0);
  rj->last_call_ms = proto_map_i64(info, RDV_K_LAST_CALL, 30000);
  rj->join_timeout_ms = proto_map_i64(info, RDV_K_JOIN_TIMEOUT, 600000);
  rj->hb_ms = proto_map_i64(info, RDV_K_HEARTBEAT, 5000);
  if (rj->hb_ms < 10)
    rj->hb_ms = 10;
  for (int i = 0; i < rj->nexpected; i++)
    free(rj->expected[i]);
  free(rj->expected);
  rj->expected = NULL;
  rj->nexpected = 0;
  {
    const msgpack_object *ex = proto_map_get(info, RDV_K_EXPECTED);
    if (ex && ex->type == MSGPACK_OBJECT_ARRAY && ex->via.array.size > 0 &&
        ex->via.array.size <= 65536) {
      rj->expected = calloc(ex->via.array.size, sizeof(char *));
      for (uint32_t i = 0; rj->expected && i < ex->via.array.size; i++) {
        const char *p;
        size_t n;
        if (proto_obj_bytes(&ex->via.array.ptr[i], &p, &n) == 0 &&
            (rj->expected[rj->nexpected] = malloc(n + 1)) != NULL) {
          memcpy(rj->expected[rj->nexpected], p, n);
          rj->expected[rj->nexpected][n] = '\0';
          rj->nexpected++;
        }
      }
    }
  }
  rj->configured = 1;
  return 0;
}

static void op_join(conn_t *c, const proto_msg_t *msg) {
  srv_t *s = c->srv;
  rdv_job_t *rj = rdv_job(c->job);
  rdv_member_t *m = c->rdv;
  const msgpack_object *info = msg->nargs > 0 ? &msg->args[0] : NULL;
  char err[600];
  if (rj == NULL) {
    srv__reply_err(c, msg->id, RDZV_ENOMEM, "out of memory");
    return;
  }
  if (info == NULL || info->type != MSGPACK_OBJECT_MAP) {
    srv__reply_err(c, msg->id, RDZV_EPROTO, "rdzv_join: expected a map");
    return;
  }
  if (rj->state == R_DONE) {
    srv__reply_err(c, msg->id, RDZV_ERDZVCLOSED, "job %s already finished: "
                   "%s (start a new run with another --rdzv-id)",
                   c->job->name, rj->reason);
    return;
  }
  if (configure(rj, info, err, sizeof(err)) != 0) {
    srv__reply_err(c, msg->id, RDZV_EMISMATCH, "%s", err);
    return;
  }
  if (m == NULL) {
    if ((m = calloc(1, sizeof(*m))) == NULL) {
      srv__reply_err(c, msg->id, RDZV_ENOMEM, "out of memory");
      return;
    }
    m->rj = rj;
    m->c = c;
    m->order = ++rj->next_order;
    list_insert_tail(&rj->members, &m->link);
    c->rdv = m;
  } else if (m->state == M_JOINING && m->join_id) {
    srv__reply_err(c, msg->id, RDZV_EPROTO, "rdzv_join sent twice");
    return;
  }
  proto_map_str(info, RDV_K_HOST, m->host, sizeof(m->host));
  proto_map_str(info, RDV_K_ADDR, m->addr, sizeof(m->addr));
  if (m->addr[0] == '\0') {
    /* The address this node reached us from. */
    const char *p = c->peer;
    size_t n = strlen(p);
    const char *colon = strrchr(p, ':');
    if (colon)
      n = (size_t)(colon - p);
    if (p[0] == '[' && n >= 2) {
      p++;
      n -= 2;
    }
    snprintf(m->addr, sizeof(m->addr), "%.*s", (int)n, p);
  }
  if (m->host[0] == '\0')
    lu_strlcpy(m->host, m->addr, sizeof(m->host));
  m->nproc = (int)proto_map_i64(info, RDV_K_NPROC, 1);
  m->pref_rank = (int)proto_map_i64(info, RDV_K_RANK, -1);
  m->master_port = (int)proto_map_i64(info, RDV_K_MASTER_PORT, 0);
  free(m->fp);
  m->fp = proto_map_strdup(info, RDV_K_FINGERPRINT);
  if (m->nproc < 1) {
    srv__reply_err(c, msg->id, RDZV_EINVAL, "nproc must be at least 1");
    member_free(m);
    return;
  }
  if (rj->static_mode && m->pref_rank < 0) {
    srv__reply_err(c, msg->id, RDZV_EINVAL, "static rendezvous: this node "
                   "gave no --node-rank");
    member_free(m);
    return;
  }
  m->state = M_JOINING;
  m->join_id = msg->id;
  m->last_hb = uv_now(s->loop);
  LU_DBG(&s->log, LU_DBG_RDV, "job %s: %s (%s) joins, %d joining",
         c->job->name, m->host, m->addr, count_state(rj, M_JOINING, 0));
  if (rj->state == R_RUNNING) {
    /* A newcomer while the job runs: take it in when there is room. */
    if (!m->in_round && count_state(rj, -1, 1) < rj->max)
      restart(rj, "node %s joined", m->host);
  }
  evaluate(rj);
  schedule(s);
}

static void op_heartbeat(conn_t *c, const proto_msg_t *msg) {
  rdv_member_t *m = c->rdv;
  if (m)
    m->last_hb = uv_now(c->srv->loop);
  srv__reply_ok(c, msg->id);
}

static void op_leave(conn_t *c, const proto_msg_t *msg) {
  rdv_member_t *m = c->rdv;
  char why[256] = "left";
  const char *p;
  size_t n;
  if (proto_arg_bytes(msg, 0, &p, &n) == 0)
    snprintf(why, sizeof(why), "%.*s", (int)LU_MIN(n, 200), p);
  srv__reply_ok(c, msg->id);
  if (m)
    member_lost(m, why);
}

static void op_report(conn_t *c, const proto_msg_t *msg) {
  rdv_member_t *m = c->rdv;
  rdv_job_t *rj = m ? m->rj : NULL;
  const msgpack_object *info = msg->nargs > 0 ? &msg->args[0] : NULL;
  int64_t gen;
  srv__reply_ok(c, msg->id);
  if (rj == NULL || info == NULL || info->type != MSGPACK_OBJECT_MAP)
    return;
  gen = proto_map_i64(info, "gen", -2);
  if (gen != rj->gen || rj->state != R_RUNNING || !m->in_round)
    return; /* about an earlier generation: already handled */
  m->last_hb = uv_now(c->srv->loop);
  if (proto_map_i64(info, "ok", 0)) {
    m->state = M_DONE;
    if (count_state(rj, M_DONE, 1) == count_state(rj, -1, 1)) {
      snprintf(rj->reason, sizeof(rj->reason), "every worker of %d nodes "
               "exited 0 in round %" PRId64, count_state(rj, -1, 1), rj->gen);
      finish(rj, 1);
    }
    return;
  }
  if (rj->failed_gen != gen) {
    /* The first failure of this generation: the root cause. */
    proto_enc_t e;
    char what[64];
    int64_t code = proto_map_i64(info, "exit_code", -1), sig = proto_map_i64(info, "signal", 0);
    proto_enc_init(&e);
    msgpack_pack_object(&e.pk, *info);
    free(rj->root);
    rj->root = NULL;
    rj->root_len = 0;
    if (!e.oom) {
      rj->root = (uint8_t *)e.data;
      rj->root_len = e.len;
    } else {
      proto_enc_destroy(&e);
    }
    rj->failed_gen = gen;
    rj->failures++;
    if (sig)
      snprintf(what, sizeof(what), "signal %d", (int)sig);
    else
      snprintf(what, sizeof(what), "exit code %d", (int)code);
    if (rj->failures > rj->max_restarts) {
      snprintf(rj->reason, sizeof(rj->reason), "rank %d on %s failed (%s); "
               "%d of %d restarts used", (int)proto_map_i64(info, "rank", -1),
               m->host, what, rj->failures - 1, rj->max_restarts);
      finish(rj, 0);
    } else {
      restart(rj, "rank %d on %s failed (%s); restart %d of %d",
              (int)proto_map_i64(info, "rank", -1), m->host, what, rj->failures,
              rj->max_restarts);
    }
  }
  schedule(c->srv);
}

static void pack_status(conn_t *c, rdv_job_t *rj) {
  msgpack_packer *pk = &c->out.pk;
  uint64_t now = uv_now(c->srv->loop);
  int n = rj ? count_state(rj, -1, 0) : 0;
  msgpack_pack_map(pk, 11);
  pack_kv_str(pk, "job", c->job->name);
  pack_kv_str(pk, "state", rj ? rstate_names[rj->state] : "idle");
  pack_kv_int(pk, "round", rj ? rj->gen : -1);
  pack_kv_int(pk, "failures", rj ? rj->failures : 0);
  pack_kv_int(pk, "max_restarts", rj ? rj->max_restarts : 0);
  pack_kv_int(pk, "min", rj ? rj->min : 0);
  pack_kv_int(pk, "max", rj ? rj->max : 0);
  pack_kv_int(pk, "waited_ms",
              rj && rj->state == R_FORMING ? (int64_t)(now - rj->forming_since) : 0);
  pack_kv_str(pk, "reason", rj ? rj->reason : "");
  proto_pack_str(pk, "expected");
  msgpack_pack_array(pk, rj ? (uint32_t)rj->nexpected : 0);
  for (int i = 0; rj && i < rj->nexpected; i++)
    proto_pack_str(pk, rj->expected[i]);
  proto_pack_str(pk, "members");
  msgpack_pack_array(pk, (uint32_t)n);
  for (list_t *it = rj ? rj->members.next : NULL; rj && it != &rj->members;
       it = it->next) {
    rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
    msgpack_pack_map(pk, 8);
    pack_kv_str(pk, "host", m->host);
    pack_kv_str(pk, "addr", m->addr);
    pack_kv_int(pk, "node_rank", m->in_round ? m->node_rank : -1);
    pack_kv_int(pk, "nproc", m->nproc);
    pack_kv_int(pk, "base_rank", m->in_round ? m->base_rank : -1);
    pack_kv_str(pk, "state", mstate_names[m->state]);
    pack_kv_int(pk, "heartbeat_age_ms", (int64_t)(now - m->last_hb));
    pack_kv_int(pk, "in_round", m->in_round);
  }
}

static void op_status(conn_t *c, const proto_msg_t *msg) {
  srv__reply_begin(c, msg->id, 0, 1);
  pack_status(c, c->job->rdv);
  srv__reply_end(c);
}

static void rdv_op(conn_t *c, const proto_msg_t *m) {
  switch (m->op) {
  case PROTO_OP_JOIN: op_join(c, m); break;
  case PROTO_OP_HEARTBEAT: op_heartbeat(c, m); break;
  case PROTO_OP_LEAVE: op_leave(c, m); break;
  case PROTO_OP_REPORT: op_report(c, m); break;
  case PROTO_OP_STATUS: op_status(c, m); break;
  default:
    srv__reply_err(c, m->id, RDZV_EPROTO, "unknown rendezvous op %lld",
                   (long long)m->op);
  }
}

static void rdv_conn_closed(conn_t *c) {
  rdv_member_t *m = c->rdv;
  if (m == NULL)
    return;
  m->c = NULL;
  c->rdv = NULL;
  if (!c->srv->closing)
    member_lost(m, "connection closed");
  else
    member_free(m);
}

/* ---- deadlines: last call, join timeout, heartbeats -------------------------------------------- */

/* A timer this late means the loop did not run (the host was stopped, or
 * starved): heartbeats may wait unread in the sockets. */
#define RDV_STALL_MS 250

static void rdv_timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = uv_now(s->loop);
  uint64_t late = now > s->rdv_due ? now - s->rdv_due : 0;
  if (late > RDV_STALL_MS) {
    /* Nobody could be heard while the loop stood still: every member
     * gets a full heartbeat bound from now, so that the heartbeats read
     * next decide, not the stall. */
    LU_WARN(&s->log, "the server's loop stalled for %.1f s (was this host "
            "stopped?): every member gets 3 more heartbeats", late / 1000.0);
    for (job_t *j = s->jobs; j; j = j->next) {
      rdv_job_t *rj = j->rdv;
      for (list_t *it = rj ? rj->members.next : NULL; rj && it != &rj->members;
           it = it->next)
        LIST_ENTRY(it, rdv_member_t, link)->last_hb = now;
    }
  }
  for (job_t *j = s->jobs; j; j = j->next) {
    rdv_job_t *rj = j->rdv;
    if (rj == NULL)
      continue;
    if (rj->state == R_FORMING)
      evaluate(rj);
    if (rj->state == R_RUNNING || rj->state == R_FORMING) {
      list_t *it = rj->members.next;
      while (it != &rj->members) {
        rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
        it = it->next;
        if ((m->state == M_RUNNING || m->state == M_DONE) && m->c &&
            now > m->last_hb + 3 * (uint64_t)rj->hb_ms) {
          LU_WARN(&s->log, "job %s: node %s missed 3 heartbeats (%.1f s): "
                  "dropping it", j->name, m->host, rj->hb_ms * 3 / 1000.0);
          /* Closing the connection runs member_lost. */
          srv__conn_close(m->c);
          it = rj->members.next; /* the list changed */
        }
      }
    }
  }
  schedule(s);
}

/* Arm the timer at the earliest deadline of any job. */
static void schedule(srv_t *s) {
  uint64_t now = uv_now(s->loop), next = UINT64_MAX;
  if (s->closing)
    return;
  for (job_t *j = s->jobs; j; j = j->next) {
    rdv_job_t *rj = j->rdv;
    if (rj == NULL)
      continue;
    if (rj->state == R_FORMING) {
      uint64_t d = rj->forming_since + (uint64_t)rj->join_timeout_ms;
      if (rj->min_since)
        d = LU_MIN(d, rj->min_since + (uint64_t)rj->last_call_ms);
      next = LU_MIN(next, d);
    }
    if (rj->state == R_RUNNING || rj->state == R_FORMING)
      for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
        rdv_member_t *m = LIST_ENTRY(it, rdv_member_t, link);
        if (m->state == M_RUNNING || m->state == M_DONE)
          next = LU_MIN(next, m->last_hb + 3 * (uint64_t)rj->hb_ms + 1);
      }
  }
  if (next == UINT64_MAX) {
    uv_timer_stop(&s->rdv_timer);
  } else {
    s->rdv_due = LU_MAX(next, now);
    uv_timer_start(&s->rdv_timer, rdv_timer_cb, next > now ? next - now : 0, 0);
  }
}

static void rdv_job_free(job_t *j) {
  rdv_job_t *rj = j->rdv;
  if (rj == NULL)
    return;
  while (!list_empty(&rj->members))
    member_free(LIST_ENTRY(rj->members.next, rdv_member_t, link));
  for (int i = 0; i < rj->nexpected; i++)
    free(rj->expected[i]);
  free(rj->expected);
  free(rj->root);
  free(rj);
  j->rdv = NULL;
}

void rdv_install(srv_t *s) {
  s->rdv_op = rdv_op;
  s->rdv_conn_closed = rdv_conn_closed;
  s->rdv_job_free = rdv_job_free;
}

int rdv_connected_members(srv_t *s, const char *job) {
  int n = 0;
  for (job_t *j = s->jobs; j; j = j->next) {
    rdv_job_t *rj = j->rdv;
    if (rj == NULL || strcmp(j->name, job) != 0)
      continue;
    for (list_t *it = rj->members.next; it != &rj->members; it = it->next)
      if (LIST_ENTRY(it, rdv_member_t, link)->c)
        n++;
  }
  return n;
}
