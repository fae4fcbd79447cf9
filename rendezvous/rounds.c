/* rounds.c - rendezvous: rounds, membership, restarts, the exit
 * barrier and the root cause of a failed job, pushed to every agent.
 *
 * A job forms a round when MAX nodes joined, or MIN joined and the last
 * call passed, or (after a restart) every node of the previous round that
 * is still alive joined again. Node ranks: preferred ranks (static
 * --node-rank, SLURM_NODEID, VC_TASK_INDEX) first, the rest by host name,
 * then address. While a round runs, a failed worker (REPORT), a lost agent
 * (closed connection, or three missed heartbeats) or a newcomer while
 * there is room starts the next round: RESTART is pushed to every
 * member, which stops its workers and joins again. Failures count against
 * --max-restarts once per round for the whole job; membership changes
 * do not. The job ends when every member reported success (SHUTDOWN ok) or
 * restarts ran out (SHUTDOWN with the root cause). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "msg.h"
#include "rounds.h"
#include "srv_int.h"

enum { M_JOINING = 0, M_RUNNING, M_DONE, M_RESTARTING };
enum { R_IDLE = 0, R_FORMING, R_RUNNING, R_DONE };

static const char *const mstate_names[] = {"joining", "running", "done",
                                           "restarting"};
static const char *const rstate_names[] = {"idle", "forming", "running",
                                           "finished"};

typedef struct rounds_member_s {
  list_t link;
  list_t watch_link; /* in rj->watch while its heartbeats are watched */
  struct rounds_job_s *rj;
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
  env_fp_t *fp;     /* fingerprint, NULL none */
  int master_port;
  int hosting;      /* its agent hosts this server: no successor */
  int silent;       /* dropped for missed heartbeats */
  int rank_said;    /* its node rank, taken by another, was warned about */
  int reported;     /* 1: its workers exited 0 this round; 2: failed */
  int64_t exit_code, signal; /* reported == 2: its first failed worker's */
} rounds_member_t;

typedef struct rounds_job_s {
  job_t *job;
  int configured;
  int min, max, max_restarts, static_mode, allow_mismatch;
  int64_t last_call_ms, join_timeout_ms, hb_ms;
  char refused[600]; /* the nodes refused for a mismatch while forming:
                        named again if the rendezvous times out */
  char refused_rank[600]; /* and those refused for their node rank */
  char **expected;
  size_t nexpected;
  int state;
  int64_t round; /* the current round; -1 before the first */
  int failures;
  int64_t failed_round; /* the round whose failure was counted */
  uint64_t forming_since, min_since;
  list_t members;
  /* Counts kept by set_state(), so that no message walks the members:
   * members by state, members of the round by state, of the round, with
   * a connection. */
  int nstate[4], nround_state[4], nround, nconnected;
  /* Members whose heartbeats are watched (M_RUNNING or M_DONE, connected),
   * oldest heartbeat first: a heartbeat moves its member to the tail, so
   * the head is the next to miss its heartbeats. */
  list_t watch;
  uint64_t next_order;
  int has_root;
  msg_failure_t root; /* the root cause of failed_round */
  char reason[1024]; /* why the last restart or the end happened */
  int failover_expect; /* a job taken over from a lost host: the nodes of
                          its last round that survived, awaited before the
                          round forms (docs/rendezvous.md#host-failover) */
  int last_n;          /* nodes of the last round */
  int quorum;          /* nodes the next round needs: a majority of the
                          last round's once a member went silent (it may
                          run on under another host: no split brain) */
  int quorum_said;
  /* The end of the job, kept for --keep-ended after its last node left
   * (`launch status` shows it): the last round's nodes as they ended.
   * Their bytes are charged to the server's jobs (srv__mem_job_charge). */
  int end_ok;
  double end_wall;       /* unix time of the end */
  uint64_t end_gone;     /* srv__now() when its last node left; 0 not yet */
  msg_member_t *end_members;
  size_t nend, end_charged;
} rounds_job_t;

/* ---- helpers -------------------------------------------------------------------------- */

static rounds_job_t *rounds_job(job_t *j) {
  rounds_job_t *rj = j->rounds;
  if (rj)
    return rj;
  if ((rj = calloc(1, sizeof(*rj))) == NULL)
    return NULL;
  rj->job = j;
  rj->round = -1;
  rj->failed_round = -1;
  list_init(&rj->members);
  list_init(&rj->watch);
  j->rounds = rj;
  return rj;
}

static int watched(const rounds_member_t *m) {
  return (m->state == M_RUNNING || m->state == M_DONE) && m->c != NULL;
}

/* Every change of a member's state, round membership or connection goes
 * through here (the counts and the watch list follow). A member that
 * becomes watched goes to the tail: its last_hb is now. */
static void set_member(rounds_member_t *m, int state, int in_round, conn_t *c) {
  rounds_job_t *rj = m->rj;
  rj->nstate[m->state]--;
  if (m->in_round) {
    rj->nround--;
    rj->nround_state[m->state]--;
  }
  rj->nconnected -= m->c != NULL;
  m->state = state;
  m->in_round = in_round != 0;
  m->c = c;
  rj->nstate[m->state]++;
  if (m->in_round) {
    rj->nround++;
    rj->nround_state[m->state]++;
  }
  rj->nconnected += m->c != NULL;
  if (!watched(m))
    list_unlink(&m->watch_link);
  else if (m->watch_link.next == &m->watch_link)
    list_insert_tail(&rj->watch, &m->watch_link);
}

static void set_state(rounds_member_t *m, int state) {
  set_member(m, state, m->in_round, m->c);
}

static void set_in_round(rounds_member_t *m, int in_round) {
  set_member(m, m->state, in_round, m->c);
}

/* A sign of life: to the tail of the watch list. */
static void touch(rounds_member_t *m, uint64_t now) {
  m->last_hb = now;
  if (m->watch_link.next != &m->watch_link) {
    list_remove(&m->watch_link);
    list_insert_tail(&m->rj->watch, &m->watch_link);
  }
}

static int nmembers(const rounds_job_t *rj) {
  return rj->nstate[M_JOINING] + rj->nstate[M_RUNNING] + rj->nstate[M_DONE] +
         rj->nstate[M_RESTARTING];
}

static void member_free(rounds_member_t *m) {
  conn_t *c = m->c;
  set_member(m, M_JOINING, 0, NULL);
  m->rj->nstate[M_JOINING]--;
  list_remove(&m->link);
  if (c && c->rounds == m)
    c->rounds = NULL;
  env_fp_free(m->fp);
  free(m);
}

static void schedule(srv_t *s);

/* ---- replies and pushes ------------------------------------------------------------------ */

static void reply_join_error(rounds_member_t *m, int status, const char *msg) {
  if (m->c && m->join_id)
    srv__reply_err(m->c, m->join_id, status, "%s", msg);
  m->join_id = 0;
}

static void push_restart(rounds_member_t *m, int64_t round, const char *reason) {
  msg_restart_t r;
  if (m->c == NULL)
    return;
  r.round = round;
  r.reason = (char *)reason;
  srv__push_begin(m->c, PROTO_EV_RESTART, 1);
  msg_restart_pack(&m->c->out.pk, &r);
  srv__reply_end(m->c);
}

static void push_shutdown(rounds_job_t *rj, rounds_member_t *m, int ok) {
  msg_shutdown_t sd;
  if (m->c == NULL)
    return;
  msg_shutdown_init(&sd);
  sd.ok = ok;
  sd.reason = rj->reason;
  sd.has_root = !ok && rj->has_root;
  if (sd.has_root)
    sd.root = rj->root; /* a shallow copy: packed, not freed */
  sd.restarts = rj->failures > 0 ? rj->failures - !ok : 0;
  sd.max_restarts = rj->max_restarts;
  srv__push_begin(m->c, PROTO_EV_SHUTDOWN, 1);
  msg_shutdown_pack(&m->c->out.pk, &sd);
  srv__reply_end(m->c);
}

/* ---- the job's life -------------------------------------------------------------------------- */

static void end_forget(rounds_job_t *rj) {
  srv__mem_job_release(rj->job->srv, rj->end_charged);
  free(rj->end_members);
  rj->end_members = NULL;
  rj->nend = rj->end_charged = 0;
  rj->end_gone = 0;
}

/* Keep the round's nodes as they end: done (exit 0), failed (with the
 * exit code or signal of its first failed worker), or stopped by the end.
 * Left out when the server's memory for jobs has no room for them. */
static void end_snapshot(rounds_job_t *rj, int ok) {
  size_t k = 0, cost = (size_t)rj->nround * sizeof(msg_member_t);
  end_forget(rj);
  rj->end_ok = ok;
  rj->end_wall = lu_wall_s();
  if (rj->nround == 0 || srv__mem_job_charge(rj->job->srv, cost) != 0)
    return;
  if ((rj->end_members = calloc((size_t)rj->nround, sizeof(msg_member_t))) ==
      NULL) {
    srv__mem_job_release(rj->job->srv, cost);
    return;
  }
  rj->end_charged = cost;
  for (list_t *it = rj->members.next; it != &rj->members && k < (size_t)rj->nround;
       it = it->next) {
    rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
    msg_member_t *o = &rj->end_members[k];
    if (!m->in_round)
      continue;
    msg_member_init(o);
    lu_strlcpy(o->host, m->host, sizeof(o->host));
    lu_strlcpy(o->addr, m->addr, sizeof(o->addr));
    o->node_rank = m->node_rank;
    o->nproc = m->nproc;
    o->base_rank = m->base_rank;
    o->in_round = 1;
    lu_strlcpy(o->state, m->reported == 1 ? "done"
                         : m->reported == 2 ? "failed" : "stopped",
               sizeof(o->state));
    o->exit_code = m->reported == 1 ? 0 : m->reported == 2 ? m->exit_code : -1;
    o->signal = m->reported == 2 ? m->signal : 0;
    k++;
  }
  rj->nend = k;
}

static void finish(rounds_job_t *rj, int ok) {
  srv_t *s = rj->job->srv;
  end_snapshot(rj, ok);
  rj->state = R_DONE;
  LU_INFO(&s->log, "job %s %s: %s", rj->job->name, ok ? "finished" : "failed",
          rj->reason);
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
    if (m->state == M_JOINING && !m->in_round)
      reply_join_error(m, RDZV_ERDZVCLOSED, ok ? "the job finished" : rj->reason);
    else if (m->state == M_JOINING)
      reply_join_error(m, RDZV_ERDZVCLOSED, rj->reason);
    push_shutdown(rj, m, ok);
  }
}

/* Start the next round: every member of the round stops its workers
 * and joins again. */
static void restart(rounds_job_t *rj, const char *fmt, ...) LU_PRINTF(2, 3);
static void restart(rounds_job_t *rj, const char *fmt, ...) {
  srv_t *s = rj->job->srv;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rj->reason, sizeof(rj->reason), fmt, ap);
  va_end(ap);
  rj->state = R_FORMING;
  rj->forming_since = srv__now();
  rj->min_since = 0;
  LU_INFO(&s->log, "job %s: restarting into round %" PRId64 ": %s",
          rj->job->name, rj->round + 1, rj->reason);
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
    if (m->in_round && (m->state == M_RUNNING || m->state == M_DONE)) {
      set_state(m, M_RESTARTING);
      push_restart(m, rj->round + 1, rj->reason);
    }
  }
}

static int cmp_members(const void *a, const void *b) {
  const rounds_member_t *x = *(rounds_member_t *const *)a,
                     *y = *(rounds_member_t *const *)b;
  int c = strcmp(x->host, y->host);
  if (c)
    return c;
  c = strcmp(x->addr, y->addr);
  if (c)
    return c;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_select(const void *a, const void *b) {
  const rounds_member_t *x = *(rounds_member_t *const *)a,
                     *y = *(rounds_member_t *const *)b;
  /* Nodes of the previous round first, then in join order. */
  if (x->in_round != y->in_round)
    return y->in_round - x->in_round;
  return x->order < y->order ? -1 : x->order > y->order;
}

static void reply_round(rounds_job_t *rj, rounds_member_t *m,
                        const rounds_member_t *node0, int n, int world,
                        char **succ_hosts, char **succ_addrs, size_t nsucc) {
  msg_round_t r;
  /* Each reply carries this node's place and node 0's address only (rank
   * 0's store in --torch-store rank0 mode): O(1) per node, not O(nodes);
   * STATUS lists everyone. */
  msg_round_init(&r);
  r.round = rj->round;
  r.node_rank = m->node_rank;
  r.nnodes = n;
  r.world_size = world;
  r.base_rank = m->base_rank;
  r.master_port = node0 ? node0->master_port : 0;
  r.restarts = rj->failures;
  lu_strlcpy(r.addr, m->addr, sizeof(r.addr));
  if (node0) {
    lu_strlcpy(r.node0_addr, node0->addr, sizeof(r.node0_addr));
    lu_strlcpy(r.node0_host, node0->host, sizeof(r.node0_host));
  }
  r.succ_hosts = succ_hosts;
  r.nsucc_hosts = nsucc;
  r.succ_addrs = succ_addrs;
  r.nsucc_addrs = nsucc;
  srv__reply_begin(m->c, m->join_id, 0, 1);
  msg_round_pack(&m->c->out.pk, &r);
  srv__reply_end(m->c);
  m->join_id = 0;
}

/* The server's view of a node for its owner (srv_config_t.on_event). */
static void node_event(rounds_job_t *rj, int kind, const char *host,
                       const char *addr, int64_t nproc, const char *reason) {
  srv_event_t ev;
  memset(&ev, 0, sizeof(ev));
  ev.kind = kind;
  ev.job = rj->job->name;
  ev.host = host;
  ev.addr = addr;
  ev.nproc = nproc;
  ev.round = rj->round;
  ev.reason = reason;
  srv__event(rj->job->srv, &ev);
}

/* Does sel differ from node 0? Then refuse it (or only warn, with
 * --allow-mismatch). RET 1 when refused. */
static int refuse_mismatch(rounds_job_t *rj, rounds_member_t *node0,
                           rounds_member_t *sel) {
  srv_t *s = rj->job->srv;
  const env_fp_t *fps[2] = {node0->fp, sel->fp};
  char n0[320], n1[320], *diff = NULL, msg[4096];
  const char *names[2] = {n0, n1};
  int nd;
  /* Equal host names (containers, one VM): told apart by address. */
  if (!strcmp(node0->host, sel->host)) {
    snprintf(n0, sizeof(n0), "%s@%s", node0->host, node0->addr);
    snprintf(n1, sizeof(n1), "%s@%s", sel->host, sel->addr);
  } else {
    lu_strlcpy(n0, node0->host, sizeof(n0));
    lu_strlcpy(n1, sel->host, sizeof(n1));
  }
  nd = env_fp_diff(fps, names, 2, &diff);
  if (nd <= 0) {
    free(diff);
    return 0;
  }
  snprintf(msg, sizeof(msg), "node %s differs from node 0 (%s):\n%s%s",
           n1, n0, diff,
           rj->allow_mismatch ? "" : "fix the node, or run with "
                                     "--allow-mismatch");
  free(diff);
  if (rj->allow_mismatch) {
    LU_WARN(&s->log, "job %s: %s", rj->job->name, msg);
    return 0;
  }
  if (strstr(rj->refused, n1) == NULL)
    lu_list_add(rj->refused, sizeof(rj->refused), n1);
  LU_WARN(&s->log, "job %s: refused %s", rj->job->name, msg);
  node_event(rj, SRV_EV_NODE_REFUSED, sel->host, sel->addr, sel->nproc, msg);
  reply_join_error(sel, RDZV_EMISMATCH, msg);
  set_member(sel, M_RESTARTING, 0, sel->c);
  return 1;
}

/* Form a round from the joining members. RET 1 if formed. */
static int form_round(rounds_job_t *rj) {
  srv_t *s = rj->job->srv;
  int n = rj->nstate[M_JOINING], k = 0, world = 0;
  rounds_member_t **all, **sel, *node0 = NULL, **by_rank, **holder;
  char **succ_hosts, **succ_addrs;
  size_t nsucc = 0;
  if (n <= 0 || (all = calloc((size_t)n, sizeof(*all))) == NULL)
    return 0;
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
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
  /* Preferred ranks: static, each must be unique and below the node count;
   * c10d, a preference (torchrun ignores --node-rank there): a rank taken
   * or past the round gets a free one. */
  if ((holder = calloc((size_t)n, sizeof(*holder))) == NULL) {
    free(all);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int r = sel[i]->pref_rank;
    rounds_member_t *m = sel[i];
    m->node_rank = -1;
    if (r < 0)
      continue;
    if (r < n && holder[r] == NULL) {
      holder[r] = m;
      m->node_rank = r;
    } else if (!rj->static_mode) {
      if (r < n && !m->rank_said) {
        m->rank_said = 1;
        LU_WARN(&s->log, "job %s: node rank %d is asked for by %s and by %s: "
                "%s gets a free one (with the c10d backend a node rank is a "
                "preference; give each node its own --node-rank to choose)",
                rj->job->name, r, holder[r]->host, m->host, m->host);
      }
    } else {
      char msg[600];
      if (r >= n)
        snprintf(msg, sizeof(msg), "node rank %d of %s is not below the %d "
                 "nodes of the round: give each node a rank from 0 to %d", r,
                 m->host, n, n - 1);
      else
        snprintf(msg, sizeof(msg), "node rank %d is claimed twice (%s and "
                 "%s): give every node its own --node-rank", r, holder[r]->host,
                 m->host);
      /* The nodes that wait (node 0 among them) say who was refused; its
       * own agent says it as its join's error (an agent hosting the
       * server would print it twice). */
      if (m->hosting)
        LU_INFO(&s->log, "job %s: %s", rj->job->name, msg);
      else
        LU_WARN(&s->log, "job %s: refused %s: %s", rj->job->name, m->host, msg);
      if (strstr(rj->refused_rank, m->host) == NULL)
        lu_list_add(rj->refused_rank, sizeof(rj->refused_rank), m->host);
      reply_join_error(m, RDZV_EINVAL, msg);
      /* out of the round; its agent exits */
      set_member(m, M_RESTARTING, 0, m->c);
      free(holder);
      free(all);
      return 0;
    }
  }
  {
    /* The rest by host name, then address. */
    rounds_member_t **rest = calloc((size_t)n, sizeof(*rest));
    int nr = 0, slot = 0;
    if (rest == NULL) {
      free(holder);
      free(all);
      return 0;
    }
    for (int i = 0; i < n; i++)
      if (sel[i]->node_rank < 0)
        rest[nr++] = sel[i];
    qsort(rest, (size_t)nr, sizeof(*rest), cmp_members);
    for (int i = 0; i < nr; i++) {
      while (holder[slot])
        slot++;
      rest[i]->node_rank = slot;
      holder[slot] = rest[i];
    }
    free(rest);
  }
  free(holder);
  for (int i = 0; i < n; i++)
    if (sel[i]->node_rank == 0)
      node0 = sel[i];
  /* Every node must match node 0: only host name, address and node rank
   * may differ (docs/rendezvous.md). */
  if (node0 && node0->fp) {
    int refused = 0;
    for (int i = 0; i < n; i++)
      if (sel[i] != node0 && sel[i]->fp)
        refused += refuse_mismatch(rj, node0, sel[i]);
    if (refused) {
      free(all);
      return 0; /* re-evaluated without the refused nodes */
    }
  }
  /* Global ranks, contiguous per node in node-rank order (node ranks are
   * 0..n-1, each once: all[] is reordered by them). */
  by_rank = calloc((size_t)n, sizeof(*by_rank));
  succ_hosts = calloc((size_t)n, sizeof(*succ_hosts));
  succ_addrs = calloc((size_t)n, sizeof(*succ_addrs));
  if (by_rank == NULL || succ_hosts == NULL || succ_addrs == NULL) {
    free(by_rank);
    free(succ_hosts);
    free(succ_addrs);
    free(all);
    return 0;
  }
  for (int i = 0; i < n; i++)
    by_rank[sel[i]->node_rank] = sel[i];
  for (int r = 0; r < n; r++) {
    by_rank[r]->base_rank = world;
    world += by_rank[r]->nproc;
    /* The successors: every member but the one that hosts this server,
     * by node rank (the strings stay the members' own) */
    if (!by_rank[r]->hosting) {
      succ_hosts[nsucc] = by_rank[r]->host;
      succ_addrs[nsucc++] = by_rank[r]->addr;
    }
  }
  free(by_rank);
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next)
    set_in_round(LIST_ENTRY(it, rounds_member_t, link), 0);
  rj->round++;
  rj->failover_expect = 0;
  rj->quorum = 0;
  rj->quorum_said = 0;
  rj->last_n = n;
  /* a round formed: the refusals are answered */
  rj->refused[0] = rj->refused_rank[0] = '\0';
  rj->state = R_RUNNING;
  srv__ts_new_round(rj->job, rj->round);
  for (int i = 0; i < n; i++) {
    sel[i]->last_hb = srv__now();
    set_member(sel[i], M_RUNNING, 1, sel[i]->c);
    reply_round(rj, sel[i], node0, n, world, succ_hosts, succ_addrs, nsucc);
  }
  free(succ_hosts);
  free(succ_addrs);
  LU_INFO(&s->log, "job %s: round %" PRId64 " formed: %d nodes, world size "
          "%d", rj->job->name, rj->round, n, world);
  free(all);
  return 1;
}

/* The expected hosts that have not joined, and those that have. */
static void missing_hosts(rounds_job_t *rj, char *out, size_t cap) {
  out[0] = '\0';
  for (size_t i = 0; i < rj->nexpected; i++) {
    int found = 0;
    for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
      rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
      found |= m->state == M_JOINING && (!strcmp(m->host, rj->expected[i]) ||
                                         !strcmp(m->addr, rj->expected[i]));
    }
    if (!found)
      lu_list_add(out, cap, rj->expected[i]);
  }
}

static void joined_hosts(rounds_job_t *rj, char *out, size_t cap) {
  out[0] = '\0';
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
    if (m->state == M_JOINING)
      lu_list_add(out, cap, m->host);
  }
}

/* Decide whether the forming round closes (or times out) now. */
static void evaluate(rounds_job_t *rj) {
  srv_t *s = rj->job->srv;
  uint64_t now = srv__now();
  int n, rejoined = 1;
  if (rj->state == R_IDLE) {
    if (rj->nstate[M_JOINING] == 0)
      return;
    rj->state = R_FORMING;
    rj->forming_since = now;
    rj->min_since = 0;
  }
  if (rj->state != R_FORMING)
    return;
  for (;;) {
    n = rj->nstate[M_JOINING];
    rejoined = rj->nround_state[M_RESTARTING] == 0;
    if (n < rj->quorum) {
      /* A member went silent: it may run on elsewhere with the others.
       * Only a majority of the last round goes on. */
      if (!rj->quorum_said && n > 0) {
        rj->quorum_said = 1;
        LU_WARN(&s->log, "job %s: %d of the last round's %d nodes are here: "
                "a new round needs a majority (%d), as the silent ones may "
                "go on under another host; waiting", rj->job->name, n,
                rj->last_n, rj->quorum);
      }
      break;
    }
    if (n >= rj->min && rj->min_since == 0)
      rj->min_since = now;
    if (n < rj->min)
      rj->min_since = 0;
    if (n >= rj->max ||
        (rj->round >= 0 && rejoined && n >= rj->min &&
         n >= rj->failover_expect) ||
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
    char joined[1024], missing[1024], msg[4000];
    joined_hosts(rj, joined, sizeof(joined));
    missing_hosts(rj, missing, sizeof(missing));
    snprintf(msg, sizeof(msg), "rendezvous timed out after %.0f s: %d of "
             "%d..%d nodes joined (%s)%s%s%s%s%s%s", rj->join_timeout_ms / 1000.0,
             n, rj->min, rj->max, joined[0] ? joined : "none",
             missing[0] ? "; missing: " : "", missing,
             rj->refused[0] ? "; refused for differing from node 0 (the "
                              "diff is on their consoles): " : "",
             rj->refused,
             rj->refused_rank[0] ? "; refused for their node rank (the "
                                   "reason is on their consoles): " : "",
             rj->refused_rank);
    lu_strlcpy(rj->reason, msg, sizeof(rj->reason));
    if (rj->round >= 0) {
      finish(rj, 0);
    } else {
      /* Info: every waiting agent gets it as its join's error and says
       * it (an agent hosting the server would print it twice). */
      LU_INFO(&s->log, "job %s: %s", rj->job->name, msg);
      for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
        rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
        reply_join_error(m, -ETIMEDOUT, msg);
        set_state(m, M_RESTARTING);
      }
      rj->state = R_IDLE;
    }
  }
}

/* Forget the job's last run (its end included): a new run with the same
 * id starts clean. */
static void forget_run(rounds_job_t *rj) {
  job_t *j = rj->job;
  rj->state = R_IDLE;
  rj->round = -1;
  j->ts_round = -1;
  rj->refused[0] = rj->refused_rank[0] = '\0';
  rj->failures = 0;
  rj->failed_round = -1;
  rj->configured = 0;
  rj->quorum = rj->last_n = rj->failover_expect = 0;
  msg_failure_free(&rj->root);
  rj->has_root = 0;
  end_forget(rj);
}

/* A member is gone (closed connection, missed heartbeats, LEAVE). */
static void member_lost(rounds_member_t *m, const char *why, int silent) {
  rounds_job_t *rj = m->rj;
  int was_in_round = m->in_round;
  int was_live = m->state == M_RUNNING || m->state == M_DONE ||
                 m->state == M_RESTARTING;
  char host[256];
  lu_strlcpy(host, m->host, sizeof(host));
  node_event(rj, SRV_EV_NODE_LEFT, m->host, m->addr, m->nproc, why);
  /* A silent member may be alive behind a partition, or have moved on
   * under a successor host while this one was stopped: the next round
   * needs a majority of the last. A closed connection is a dead agent. */
  if (silent && was_in_round && rj->last_n > 0)
    rj->quorum = LU_MAX(rj->quorum, rj->last_n / 2 + 1);
  member_free(m);
  if (rj->state == R_RUNNING && was_in_round && was_live) {
    if (rj->nround > 0)
      restart(rj, "lost node %s (%s)", host, why);
  } else if (rj->state == R_FORMING) {
    evaluate(rj);
  }
  if (list_empty(&rj->members) && (rj->state == R_DONE || rj->state == R_IDLE)) {
    /* Every node of a finished job is gone: its keys go (a new run with
     * the same id starts clean, without stale keys of the old one). Its
     * end stays for --keep-ended, for `launch status`; the next JOIN
     * starts the new run. */
    job_t *j = rj->job;
    if (rj->state == R_DONE && j->nconns == 0)
      store_clear(j->store);
    if (rj->state == R_DONE && j->srv->cfg.keep_ended_ms > 0)
      rj->end_gone = srv__now();
    else
      forget_run(rj);
  }
  schedule(rj->job->srv);
}

/* ---- ops --------------------------------------------------------------------------------------- */

static void free_expected(rounds_job_t *rj) {
  for (size_t i = 0; i < rj->nexpected; i++)
    free(rj->expected[i]);
  free(rj->expected);
  rj->expected = NULL;
  rj->nexpected = 0;
}

/* The first JOIN sets the job's flags; later ones must agree. Takes the
 * expected hosts from j. */
static int configure(rounds_job_t *rj, msg_join_t *j, char *err, size_t cap) {
  if (j->min < 1 || j->max < j->min || j->max > (1 << 20)) {
    snprintf(err, cap, "nnodes %lld:%lld is not MIN:MAX with 0 < MIN <= MAX",
             (long long)j->min, (long long)j->max);
    return -1;
  }
  if (rj->configured) {
    if (j->min != rj->min || j->max != rj->max ||
        j->is_static != rj->static_mode || j->max_restarts != rj->max_restarts) {
      snprintf(err, cap, "this node asks for --nnodes %lld:%lld%s "
               "--max-restarts %lld but job %s runs with --nnodes %d:%d%s "
               "--max-restarts %d: give every node the same flags",
               (long long)j->min, (long long)j->max,
               j->is_static ? " (static)" : "", (long long)j->max_restarts,
               rj->job->name, rj->min, rj->max,
               rj->static_mode ? " (static)" : "", rj->max_restarts);
      return -1;
    }
    /* The round after a takeover, still forming: wait for the survivors
     * any node counts (a successor that passed itself over counts itself,
     * the others saw it silent) */
    if (j->prev_round >= 0 && j->prev_round == rj->round && rj->failover_expect > 0)
      rj->failover_expect =
          LU_MAX(rj->failover_expect, (int)LU_MAX(0, LU_MIN(j->survivors, rj->max)));
    return 0;
  }
  rj->min = (int)j->min;
  rj->max = (int)j->max;
  rj->static_mode = j->is_static;
  rj->max_restarts = (int)LU_MAX(0, LU_MIN(j->max_restarts, 1 << 30));
  rj->allow_mismatch = j->allow_mismatch;
  rj->last_call_ms = LU_MAX(0, j->last_call_ms);
  rj->join_timeout_ms = LU_MAX(0, j->join_timeout_ms);
  rj->hb_ms = LU_MAX(10, j->heartbeat_ms);
  free_expected(rj);
  rj->expected = j->expected;
  rj->nexpected = j->nexpected;
  j->expected = NULL;
  j->nexpected = 0;
  rj->configured = 1;
  if (j->prev_round >= 0) {
    /* Taken over from a lost host: go on from its last round and its
     * restarts, and wait for the survivors of that round. */
    rj->round = j->prev_round;
    rj->failures = (int)LU_MAX(0, LU_MIN(j->prev_restarts, 1 << 30));
    rj->failover_expect = (int)LU_MAX(0, LU_MIN(j->survivors, rj->max));
    rj->quorum = (int)LU_MAX(0, LU_MIN(j->quorum, rj->max));
    rj->last_n = (int)LU_MAX(0, LU_MIN(2 * j->quorum - 1, rj->max));
  }
  return 0;
}

/* The address this node reached us from, without the port. */
static void peer_host(const conn_t *c, char *out, size_t cap) {
  const char *p = c->peer, *colon = strrchr(p, ':');
  size_t n = colon ? (size_t)(colon - p) : strlen(p);
  if (p[0] == '[' && n >= 2) {
    p++;
    n -= 2;
  }
  snprintf(out, cap, "%.*s", (int)n, p);
}

/* Refuse a JOIN: the error reply, and node_refused for the server's
 * owner. */
static void refuse_join(conn_t *c, const proto_msg_t *msg,
                        const msg_join_t *j, int status, const char *fmt, ...)
    LU_PRINTF(5, 6);
static void refuse_join(conn_t *c, const proto_msg_t *msg,
                        const msg_join_t *j, int status, const char *fmt, ...) {
  char why[1400], addr[INET6_ADDRSTRLEN + 8];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  srv__reply_err(c, msg->id, status, "%s", why);
  lu_strlcpy(addr, j->addr, sizeof(addr));
  if (addr[0] == '\0')
    peer_host(c, addr, sizeof(addr));
  if (c->job->rounds)
    node_event(c->job->rounds, SRV_EV_NODE_REFUSED, j->host[0] ? j->host : addr,
               addr, j->nproc, why);
}

static void op_join(conn_t *c, const proto_msg_t *msg) {
  srv_t *s = c->srv;
  rounds_job_t *rj = rounds_job(c->job);
  rounds_member_t *m = c->rounds;
  msg_join_t j;
  env_fp_t *fp = NULL;
  char err[600];
  if (rj == NULL) {
    srv__reply_err(c, msg->id, RDZV_ENOMEM, "out of memory");
    return;
  }
  if (msg_join_unpack(msg->nargs > 0 ? &msg->args[0] : NULL, &j, err,
                      sizeof(err)) != 0) {
    srv__reply_err(c, msg->id, RDZV_EPROTO, "rdzv_join: %s", err);
    return;
  }
  /* A finished run whose nodes are all gone, kept for status: the new
   * run starts clean. */
  if (rj->state == R_DONE && list_empty(&rj->members))
    forget_run(rj);
  if (rj->state == R_DONE) {
    refuse_join(c, msg, &j, RDZV_ERDZVCLOSED, "job %s already finished: "
                "%s (start a new run with another --rdzv-id)", c->job->name,
                rj->reason);
  } else if (j.fingerprint &&
             env_fp_parse(j.fingerprint, strlen(j.fingerprint), &fp) != 0) {
    refuse_join(c, msg, &j, RDZV_EPROTO, "rdzv_join: the node fingerprint "
                "does not parse");
  } else if (configure(rj, &j, err, sizeof(err)) != 0) {
    refuse_join(c, msg, &j, RDZV_EMISMATCH, "%s", err);
  } else if (j.nproc < 1 || j.nproc > (1 << 20)) {
    refuse_join(c, msg, &j, RDZV_EINVAL, "nproc must be at least 1");
  } else if (rj->static_mode && j.rank < 0) {
    refuse_join(c, msg, &j, RDZV_EINVAL, "static rendezvous: this node gave "
                "no --node-rank");
  } else if (m && m->state == M_JOINING && m->join_id) {
    srv__reply_err(c, msg->id, RDZV_EPROTO, "rdzv_join sent twice");
  } else if (m == NULL && (m = calloc(1, sizeof(*m))) == NULL) {
    srv__reply_err(c, msg->id, RDZV_ENOMEM, "out of memory");
  } else {
    if (m->rj == NULL) {
      m->rj = rj;
      m->order = ++rj->next_order;
      list_init(&m->watch_link);
      rj->nstate[M_JOINING]++; /* calloc: joining, no round, no conn */
      set_member(m, M_JOINING, 0, c);
      list_insert_tail(&rj->members, &m->link);
      c->rounds = m;
    }
    lu_strlcpy(m->addr, j.addr, sizeof(m->addr));
    if (m->addr[0] == '\0')
      peer_host(c, m->addr, sizeof(m->addr));
    lu_strlcpy(m->host, j.host[0] ? j.host : m->addr, sizeof(m->host));
    m->nproc = (int)j.nproc;
    m->pref_rank = (int)LU_MAX(-1, LU_MIN(j.rank, 1 << 20));
    m->master_port = (int)j.master_port;
    m->hosting = j.hosting;
    env_fp_free(m->fp);
    m->fp = fp;
    fp = NULL;
    set_state(m, M_JOINING);
    m->reported = 0; /* how its workers end is told again each round */
    m->join_id = msg->id;
    m->last_hb = srv__now();
    LU_DBG(&s->log, LU_DBG_ROUNDS, "job %s: %s (%s) joins, %d joining",
           c->job->name, m->host, m->addr, rj->nstate[M_JOINING]);
    node_event(rj, SRV_EV_NODE_JOINED, m->host, m->addr, m->nproc, NULL);
    /* A newcomer while the job runs: take it in when there is room. */
    if (rj->state == R_RUNNING && !m->in_round && rj->nround < rj->max)
      restart(rj, "node %s joined", m->host);
    evaluate(rj);
    schedule(s);
  }
  env_fp_free(fp);
  msg_join_free(&j);
}

static void op_heartbeat(conn_t *c, const proto_msg_t *msg) {
  rounds_member_t *m = c->rounds;
  int64_t flags = 0;
  if (m)
    touch(m, srv__now());
  /* A quiet heartbeat is answered with nothing: steady heartbeats cost
   * the server a read, no write. */
  if (msg->nargs > 0 && proto_arg_i64(msg, 0, &flags) == 0 &&
      (flags & ROUNDS_HEARTBEAT_QUIET))
    return;
  srv__reply_ok(c, msg->id);
}

static void op_leave(conn_t *c, const proto_msg_t *msg) {
  rounds_member_t *m = c->rounds;
  msg_leave_t l;
  if (msg_leave_unpack(msg->nargs > 0 ? &msg->args[0] : NULL, &l, NULL, 0) ||
      l.reason[0] == '\0')
    lu_strlcpy(l.reason, "left", sizeof(l.reason));
  srv__reply_ok(c, msg->id);
  if (m)
    member_lost(m, l.reason, 0);
}

/* The first failure of round r: the root cause, one restart spent. */
static void round_failed(rounds_job_t *rj, rounds_member_t *m, msg_report_t *r) {
  const msg_failure_t *f = &r->failure;
  char what[64];
  msg_failure_free(&rj->root);
  rj->has_root = r->has_failure && msg_failure_copy(&rj->root, f) == 0;
  rj->failed_round = r->round;
  rj->failures++;
  if (f->signal)
    snprintf(what, sizeof(what), "signal %d", (int)f->signal);
  else
    snprintf(what, sizeof(what), "exit code %d", (int)f->exit_code);
  if (r->has_failure && f->no_restart) {
    snprintf(rj->reason, sizeof(rj->reason), "rank %d on %s failed (%s), "
             "a code of --no-restart-exit-codes: it would fail the same way "
             "again, not restarting", (int)f->rank, m->host, what);
    finish(rj, 0);
  } else if (rj->failures > rj->max_restarts) {
    snprintf(rj->reason, sizeof(rj->reason), "rank %d on %s failed (%s); "
             "%d of %d restarts used", (int)f->rank, m->host, what,
             rj->failures - 1, rj->max_restarts);
    finish(rj, 0);
  } else {
    restart(rj, "rank %d on %s failed (%s); restart %d of %d", (int)f->rank,
            m->host, what, rj->failures, rj->max_restarts);
  }
}

static void op_report(conn_t *c, const proto_msg_t *msg) {
  rounds_member_t *m = c->rounds;
  rounds_job_t *rj = m ? m->rj : NULL;
  msg_report_t r;
  srv__reply_ok(c, msg->id);
  if (rj == NULL ||
      msg_report_unpack(msg->nargs > 0 ? &msg->args[0] : NULL, &r, NULL, 0))
    return;
  /* A report about an earlier round was already handled. */
  if (r.round == rj->round && rj->state == R_RUNNING && m->in_round) {
    touch(m, srv__now());
    m->reported = r.ok ? 1 : 2;
    m->exit_code = r.has_failure ? r.failure.exit_code : -1;
    m->signal = r.has_failure ? r.failure.signal : 0;
    if (r.ok) {
      set_state(m, M_DONE);
      if (rj->nround_state[M_DONE] == rj->nround) {
        snprintf(rj->reason, sizeof(rj->reason), "every worker of %d node%s "
                 "exited 0 in round %" PRId64, rj->nround,
                 rj->nround == 1 ? "" : "s", rj->round);
        finish(rj, 1);
      }
    } else if (rj->failed_round != r.round) {
      round_failed(rj, m, &r);
    }
    schedule(c->srv);
  }
  msg_report_free(&r);
}

/* The STATUS of job j into st (msg_status_init'ed by the caller); its
 * strings and lists are the job's, shallow. RET 1 when st->members was
 * allocated here (the caller frees it), else 0. */
static int status_fill(const job_t *j, msg_status_t *st, uint64_t now) {
  const rounds_job_t *rj = j->rounds;
  size_t k = 0;
  int own = 0;
  lu_strlcpy(st->job, j->name, sizeof(st->job));
  lu_strlcpy(st->state, rj ? rstate_names[rj->state] : "idle",
             sizeof(st->state));
  if (rj == NULL)
    return 0;
  st->round = rj->round;
  st->restarts = rj->failures;
  st->max_restarts = rj->max_restarts;
  st->min = rj->min;
  st->max = rj->max;
  st->waited_ms =
      rj->state == R_FORMING ? (int64_t)(now - rj->forming_since) : 0;
  st->reason = (char *)rj->reason;
  st->expected = rj->expected;
  st->nexpected = rj->nexpected;
  if (rj->state == R_DONE) {
    /* How long it stays: the whole keep while nodes are connected. */
    uint64_t keep = j->srv->cfg.keep_ended_ms,
             until = rj->end_gone ? rj->end_gone + keep : now + keep;
    /* The last failure of a failed job spent no restart (SHUTDOWN's
     * count). */
    st->restarts = rj->failures > 0 ? rj->failures - !rj->end_ok : 0;
    st->ok = rj->end_ok;
    st->end_time = rj->end_wall;
    st->has_root = !rj->end_ok && rj->has_root;
    if (st->has_root)
      st->root = rj->root; /* a shallow copy: packed, not freed */
    st->keep_ms = until > now ? (int64_t)(until - now) : 0;
  }
  /* An ended job: its last round's nodes as they ended. */
  if (rj->state == R_DONE && rj->nend > 0) {
    st->members = rj->end_members;
    st->nmembers = rj->nend;
    return 0;
  }
  if ((st->members = calloc((size_t)nmembers(rj) + 1,
                            sizeof(*st->members))) == NULL)
    return 0;
  for (list_t *it = rj->members.next; it != &rj->members; it = it->next) {
    const rounds_member_t *m = LIST_ENTRY(it, rounds_member_t, link);
    msg_member_t *o = &st->members[k++];
    lu_strlcpy(o->host, m->host, sizeof(o->host));
    lu_strlcpy(o->addr, m->addr, sizeof(o->addr));
    o->node_rank = m->in_round ? m->node_rank : -1;
    o->nproc = m->nproc;
    o->base_rank = m->in_round ? m->base_rank : -1;
    lu_strlcpy(o->state, mstate_names[m->state], sizeof(o->state));
    o->heartbeat_age_ms = (int64_t)(now - m->last_hb);
    o->in_round = m->in_round;
    o->exit_code = m->reported == 1 ? 0 : m->reported == 2 ? m->exit_code : -1;
    o->signal = m->reported == 2 ? m->signal : 0;
  }
  st->nmembers = k;
  own = 1;
  return own;
}

static void op_status(conn_t *c, const proto_msg_t *msg) {
  msg_status_t st;
  int own;
  msg_status_init(&st);
  own = status_fill(c->job, &st, srv__now());
  srv__reply_begin(c, msg->id, 0, 1);
  msg_status_pack(&c->out.pk, &st);
  srv__reply_end(c);
  if (own)
    free(st.members); /* the rest is the job's */
}

void srv_each_job(srv_t *s, srv_job_cb cb, void *arg) {
  uint64_t now = srv__now();
  srv__lock(s);
  for (const job_t *j = s->jobs; j; j = j->next) {
    msg_status_t st;
    int own;
    if (j->rounds == NULL)
      continue; /* a store only (TCPStore clients) */
    msg_status_init(&st);
    own = status_fill(j, &st, now);
    cb(arg, &st);
    if (own)
      free(st.members);
  }
  srv__unlock(s);
}

static void rounds_op(conn_t *c, const proto_msg_t *m) {
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

static void rounds_conn_closed(conn_t *c) {
  rounds_member_t *m = c->rounds;
  if (m == NULL)
    return;
  set_member(m, m->state, m->in_round, NULL);
  c->rounds = NULL;
  /* Closed right after this loop stood still (the host was stopped):
   * the peer may have given up on a silent host, not died. */
  if (!c->srv->closing)
    member_lost(m, m->silent ? "missed heartbeats" : "connection closed",
                m->silent || (c->srv->rounds_stall &&
                              srv__now() - c->srv->rounds_stall <
                                  3 * (uint64_t)m->rj->hb_ms));
  else
    member_free(m);
}

/* ---- deadlines: last call, join timeout, heartbeats -------------------------------------------- */

/* A timer this late means the loop did not run (the host was stopped, or
 * starved): heartbeats may wait unread in the sockets. */
#define ROUNDS_STALL_MS 250

static void rounds_timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now(), late;
  srv__lock(s);
  late = now > s->rounds_due ? now - s->rounds_due : 0;
  if (late > ROUNDS_STALL_MS) {
    /* Nobody could be heard while the loop stood still: every member
     * gets a full heartbeat bound from now, so that the heartbeats read
     * next decide, not the stall. */
    LU_WARN(&s->log, "the server's loop stalled for %.1f s (was this host "
            "stopped?): every member gets 3 more heartbeats", late / 1000.0);
    s->rounds_stall = now;
    for (job_t *j = s->jobs; j; j = j->next) {
      rounds_job_t *rj = j->rounds;
      for (list_t *it = rj ? rj->members.next : NULL; rj && it != &rj->members;
           it = it->next)
        LIST_ENTRY(it, rounds_member_t, link)->last_hb = now;
    }
  }
  for (job_t *j = s->jobs; j; j = j->next) {
    rounds_job_t *rj = j->rounds;
    if (rj == NULL)
      continue;
    if (rj->state == R_FORMING)
      evaluate(rj);
    /* Oldest heartbeat first: stop at the first member still in time. */
    while ((rj->state == R_RUNNING || rj->state == R_FORMING) &&
           !list_empty(&rj->watch)) {
      rounds_member_t *m = LIST_ENTRY(rj->watch.next, rounds_member_t,
                                      watch_link);
      if (now <= m->last_hb + 3 * (uint64_t)rj->hb_ms)
        break;
      LU_WARN(&s->log, "job %s: node %s missed 3 heartbeats (%.1f s): "
              "dropping it", j->name, m->host, rj->hb_ms * 3 / 1000.0);
      /* Closing the connection runs member_lost (which may restart the
       * round and so change the list): look at the head again. */
      m->silent = 1;
      srv__conn_close(m->c);
      /* Still there: its connection was already closing. */
      if (rj->watch.next == &m->watch_link)
        list_unlink(&m->watch_link);
    }
  }
  schedule(s);
  srv__unlock(s);
}

/* Arm the timer at the earliest deadline of any job. */
static void schedule(srv_t *s) {
  uint64_t now = srv__now(), next = UINT64_MAX;
  if (s->closing)
    return;
  if (!srv__on_main(s)) {
    srv__kick_rounds(s); /* the timer is loop 0's */
    return;
  }
  for (job_t *j = s->jobs; j; j = j->next) {
    rounds_job_t *rj = j->rounds;
    if (rj == NULL)
      continue;
    if (rj->state == R_FORMING) {
      uint64_t d = rj->forming_since + (uint64_t)rj->join_timeout_ms;
      if (rj->min_since)
        d = LU_MIN(d, rj->min_since + (uint64_t)rj->last_call_ms);
      next = LU_MIN(next, d);
    }
    if ((rj->state == R_RUNNING || rj->state == R_FORMING) &&
        !list_empty(&rj->watch)) {
      const rounds_member_t *m = LIST_ENTRY(rj->watch.next, rounds_member_t,
                                            watch_link);
      next = LU_MIN(next, m->last_hb + 3 * (uint64_t)rj->hb_ms + 1);
    }
  }
  if (next == UINT64_MAX) {
    uv_timer_stop(&s->rounds_timer);
  } else {
    s->rounds_due = LU_MAX(next, now);
    uv_timer_start(&s->rounds_timer, rounds_timer_cb, next > now ? next - now : 0, 0);
  }
}

static void rounds_job_free(job_t *j) {
  rounds_job_t *rj = j->rounds;
  if (rj == NULL)
    return;
  while (!list_empty(&rj->members))
    member_free(LIST_ENTRY(rj->members.next, rounds_member_t, link));
  free_expected(rj);
  msg_failure_free(&rj->root);
  end_forget(rj);
  free(rj);
  j->rounds = NULL;
}

/* Until when the job's end is kept (--keep-ended); 0: nothing kept. */
static uint64_t rounds_job_keep(const job_t *j) {
  const rounds_job_t *rj = j->rounds;
  if (rj == NULL || rj->state != R_DONE || rj->end_gone == 0)
    return 0;
  return rj->end_gone + j->srv->cfg.keep_ended_ms;
}

void rounds_install(srv_t *s) {
  s->rounds_op = rounds_op;
  s->rounds_conn_closed = rounds_conn_closed;
  s->rounds_job_free = rounds_job_free;
  s->rounds_job_keep = rounds_job_keep;
  s->rounds_schedule = schedule;
}

int rounds_connected_members(srv_t *s, const char *job) {
  int n = 0;
  for (job_t *j = s->jobs; j; j = j->next)
    if (j->rounds && strcmp(j->name, job) == 0)
      n += ((rounds_job_t *)j->rounds)->nconnected;
  return n;
}
