/* etcd_backend.c - the agent's etcd thread (etcd_backend.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd.h"
#include "etcd_backend.h"
#include "rdzv.h"

#define TICK_MS 250
#define ETB_REVOKE_MS 2000 /* the revoke at exit, all members together */

struct etb_s {
  uv_async_t async;
  etb_cb cb;
  void *arg;
  lu_log_t log;
  etcd_t *e;
  etcd_t *w;            /* the watch's client: its own connection */
  pthread_t thread;
  int started;
  char members[1024];
  char prefix[512];     /* <etcd_prefix><job>/: /launch/<job>/ by default */
  char me[600];         /* this agent's host value: "ADDR PORT NAME" */
  char node_key[800];
  char host_key[520];
  char round_key[520];
  int64_t ttl_s;
  int64_t start_limit_ms; /* etcd never reached this long: give up */
  /* under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int elect;            /* an election is asked for */
  int64_t lost_rev;     /* ... after the host key of this revision goes */
  int lost_dead;        /* ... which may be removed now (ETB_ELECT_DEAD) */
  int64_t record;       /* a round to record, -1 none */
  int64_t want_round;   /* etb_wait_round's, -1 none */
  int64_t round_ok;     /* the last round seen recorded, -1 none */
  int kick;             /* a request: no nap */
  unsigned events;      /* for the loop */
  char host[600];       /* the elected host's value */
  int64_t host_rev;     /* its key's create revision, 0 none */
  int here;             /* this agent holds it */
  int exiting;          /* the thread left its loop (its revoke is due) */
  char error[1024];
};

/* ---- the thread ---------------------------------------------------------- */

static void post(etb_t *t, unsigned ev) {
  pthread_mutex_lock(&t->mu);
  t->events |= ev;
  pthread_mutex_unlock(&t->mu);
  uv_async_send(&t->async);
}

/* Wait a tick, or less when asked to stop. RET 1 to stop. */
static int nap(etb_t *t, int64_t ms) {
  struct timespec ts;
  int stop;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&t->mu);
  if (!t->stop && !t->elect && !t->kick)
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
  t->kick = 0;
  stop = t->stop;
  pthread_mutex_unlock(&t->mu);
  return stop;
}

typedef struct {
  int64_t lease;
  uint64_t next_ka;
  int down;          /* etcd is unreachable, and it was said */
  int reached;       /* etcd answered once */
  uint64_t started;  /* when the thread began */
  char said_error[1024]; /* the last error reply said */
  int said_wait;     /* waiting for a lost host's key was said */
  uint64_t ok_sent;  /* when the last renewal that worked was sent */
  uint64_t next_watch; /* when to read the host key again (no watch) */
  int fenced;        /* ETB_CUT_OFF was posted */
  int64_t wrev;      /* the watch goes on from this revision, 0 none */
  int reread;        /* read the host key and the round: the watch starts */
  uint64_t watch_retry; /* the watch failed: poll until then */
  int64_t want_read; /* the wanted round read once already */
} th_t;

/* A call's outcome: unreachable ones are said once, their end too. RET the
 * call's rc. A refusal (auth, a reply that makes no sense) ends the
 * backend. */
static int seen(etb_t *t, th_t *s, int rc) {
  if (rc == -ECANCELED)
    return rc; /* cut short: the agent stops */
  if (rc == -EHOSTUNREACH) {
    if (!s->down && !s->reached)
      LU_WARN(&t->log, "etcd at %s unreachable: waiting up to %.0f s "
                       "(--rdzv-conf read_timeout); %s", t->members,
              (double)t->start_limit_ms / 1000.0, etcd_last_error(t->e));
    else if (!s->down)
      LU_WARN(&t->log, "etcd at %s unreachable: waiting (the job goes on "
                       "when it is back); %s", t->members,
              etcd_last_error(t->e));
    s->down = 1;
    return rc;
  }
  if (rc == 0 || rc == RDZV_EPROTO)
    s->reached = 1;
  if (s->down && (rc == 0 || rc == RDZV_EPROTO)) {
    LU_WARN(&t->log, "etcd is back (%s answers)", etcd_member(t->e));
    s->down = 0;
  }
  if (rc == RDZV_EPROTO && strcmp(s->said_error, etcd_last_error(t->e))) {
    /* an error reply that a retry may not cure: said (each new one once),
     * not waited on in silence; the call is tried again */
    lu_strlcpy(s->said_error, etcd_last_error(t->e), sizeof(s->said_error));
    LU_WARN(&t->log, "etcd answered with an error: %s; trying again",
            s->said_error);
  }
  if (rc == RDZV_EAUTH) {
    pthread_mutex_lock(&t->mu);
    snprintf(t->error, sizeof(t->error), "etcd refused this node: %s "
             "(check --rdzv-conf user, etcd_prefix, cacert, cert and key)",
             etcd_last_error(t->e));
    pthread_mutex_unlock(&t->mu);
    post(t, ETB_FAILED);
  }
  return rc;
}

/* Every request is bounded by what is left of this node's lease (from the
 * last renewal that worked): a member that does not answer (stopped,
 * frozen) then leaves time to renew through another before the lease ends;
 * at 2 s a member, a lease_ttl of 2 or 3 s was lost to one such member. */
static void lease_budget(etb_t *t, const th_t *s) {
  uint64_t end = s->lease ? s->ok_sent + (uint64_t)t->ttl_s * 1000 : 0;
  etcd_set_budget(t->e, end);
  etcd_set_budget(t->w, end);
}

/* A lease, and this node's key under it. */
static int register_node(etb_t *t, th_t *s) {
  etcd_reply_t r;
  uint64_t t0 = lu_now_ms();
  int rc = seen(t, s, etcd_grant(t->e, t->ttl_s, &r));
  if (rc != 0)
    return rc;
  s->ok_sent = t0;
  s->lease = r.lease_id;
  s->next_ka = lu_now_ms() + (uint64_t)t->ttl_s * 1000 / 3;
  lease_budget(t, s);
  rc = seen(t, s, etcd_put(t->e, t->node_key, t->me, s->lease));
  if (rc != 0) {
    s->lease = 0;
    lease_budget(t, s);
    return rc;
  }
  return 0;
}

static void keep_alive(etb_t *t, th_t *s) {
  etcd_reply_t r;
  uint64_t t0 = lu_now_ms();
  int rc;
  if (t0 < s->next_ka)
    return;
  rc = seen(t, s, etcd_keepalive(t->e, s->lease, &r));
  if (rc == -ECANCELED)
    return;
  if (rc == -EHOSTUNREACH) {
    s->next_ka = lu_now_ms() + TICK_MS;
    /* etcd counts the TTL from the last renewal it saw: past it, the
     * lease may be gone and another node may host (no split brain) */
    if (!s->fenced && lu_now_ms() - s->ok_sent > (uint64_t)t->ttl_s * 1000) {
      s->fenced = 1;
      post(t, ETB_CUT_OFF);
    }
    return;
  }
  if (rc == 0 && r.ttl > 0) {
    s->ok_sent = t0;
    s->next_ka = lu_now_ms() + (uint64_t)t->ttl_s * 1000 / 3;
    lease_budget(t, s);
    if (s->fenced) {
      s->fenced = 0;
      post(t, ETB_RESTORED);
    }
    return;
  }
  /* The lease is gone: etcd did not hear from this node for its TTL. */
  LU_WARN(&t->log, "this node's etcd lease expired (etcd did not hear from "
                   "it for %" PRId64 " s)", t->ttl_s);
  s->lease = 0;
  lease_budget(t, s);
  pthread_mutex_lock(&t->mu);
  if (t->here) {
    t->here = 0;
    t->host_rev = 0;
    pthread_mutex_unlock(&t->mu);
    post(t, ETB_DEPOSED);
    return;
  }
  pthread_mutex_unlock(&t->mu);
}

/* An election step: the host key is held by a live agent (not the lost
 * one), or free and taken here. RET 1 when decided. */
static int elect_step(etb_t *t, th_t *s, int64_t lost, int dead) {
  etcd_reply_t r;
  int here = 0;
  if (seen(t, s, etcd_get(t->e, t->host_key, &r)) != 0)
    return 0;
  if (r.found && r.create_rev == lost && dead) {
    /* its agent died (a refused connection): no need to wait for its
     * lease; the guard leaves a key another agent took meanwhile */
    if (seen(t, s, etcd_delete_if(t->e, t->host_key, lost, &r)) != 0 ||
        seen(t, s, etcd_get(t->e, t->host_key, &r)) != 0)
      return 0;
  }
  if (r.found && r.create_rev == lost) {
    if (!s->said_wait)
      LU_INFO(&t->log, "waiting for etcd to let the lost host go (its lease "
                       "expires within %" PRId64 " s)", t->ttl_s);
    s->said_wait = 1;
    return 0;
  }
  if (!r.found) {
    if (seen(t, s, etcd_create(t->e, t->host_key, t->me, s->lease, &r)) != 0)
      return 0;
    if (!r.found)
      return 0; /* created and gone at once: once more */
    here = r.succeeded;
  }
  s->said_wait = 0;
  pthread_mutex_lock(&t->mu);
  lu_strlcpy(t->host, r.value, sizeof(t->host));
  t->host_rev = r.create_rev;
  t->round_ok = -1; /* the rounds of the host elected now count */
  t->here = here || (r.lease == s->lease && !strcmp(r.value, t->me));
  t->elect = 0;
  pthread_mutex_unlock(&t->mu);
  post(t, ETB_ELECTED);
  return 1;
}

/* The host key of revision known is gone or replaced. */
static void host_gone(etb_t *t, int64_t known) {
  pthread_mutex_lock(&t->mu);
  if (t->host_rev != known) { /* an election ran meanwhile */
    pthread_mutex_unlock(&t->mu);
    return;
  }
  t->lost_rev = known;
  t->host_rev = 0;
  if (t->here) {
    t->here = 0;
    pthread_mutex_unlock(&t->mu);
    post(t, ETB_DEPOSED);
    return;
  }
  pthread_mutex_unlock(&t->mu);
  post(t, ETB_HOST_CHANGED);
}

/* The host key still is the one elected? (a read: without the watch) */
static void watch_host(etb_t *t, th_t *s, int64_t known) {
  etcd_reply_t r;
  if (seen(t, s, etcd_get(t->e, t->host_key, &r)) != 0)
    return;
  if (r.found && r.create_rev == known)
    return;
  host_gone(t, known);
}

/* A round confirmed: tell the loop when it waits for it. */
static void round_seen(etb_t *t, int64_t round) {
  int ok;
  pthread_mutex_lock(&t->mu);
  if (round > t->round_ok)
    t->round_ok = round;
  ok = t->want_round >= 0 && t->round_ok >= t->want_round;
  if (ok)
    t->want_round = -1;
  pthread_mutex_unlock(&t->mu);
  if (ok)
    post(t, ETB_ROUND_OK);
}

/* The record "ROUND HOSTREV", under this host's lease. */
static void record(etb_t *t, th_t *s, int64_t round, int64_t rev) {
  etcd_reply_t r;
  char v[64];
  snprintf(v, sizeof(v), "%" PRId64 " %" PRId64, round, rev);
  if (seen(t, s, etcd_put_if(t->e, t->host_key, rev, t->round_key, v,
                             s->lease, &r)) != 0)
    return;
  if (r.succeeded)
    round_seen(t, round);
  pthread_mutex_lock(&t->mu);
  if (t->record == round)
    t->record = -1;
  if (!r.succeeded && t->here && t->host_rev == rev) {
    t->here = 0;
    t->host_rev = 0;
    pthread_mutex_unlock(&t->mu);
    post(t, ETB_DEPOSED); /* fenced: another agent holds the host key */
    return;
  }
  pthread_mutex_unlock(&t->mu);
}

/* Another agent: has the host it follows recorded the round wanted? */
int etb__round_parse(const char *v, long long *round, long long *hrev) {
  char extra;
  return sscanf(v, "%lld %lld%c", round, hrev, &extra) == 2 ? 0 : -1;
}

static void check_round(etb_t *t, th_t *s, int64_t rev) {
  etcd_reply_t r;
  long long round, hrev;
  if (seen(t, s, etcd_get(t->e, t->round_key, &r)) != 0 || !r.found)
    return;
  if (etb__round_parse(r.value, &round, &hrev) != 0)
    return; /* not ours: the host writes it again */
  if (hrev == rev)
    round_seen(t, round);
}

/* ---- the watch ---------------------------------------------------------- */

typedef struct {
  etb_t *t;
  th_t *s;
  int64_t known;     /* the host key's create revision followed */
  int gone;          /* it went */
} wctx_t;

/* Has the loop work for this thread (the watch then ends)? */
static int has_work(etb_t *t) {
  int w;
  pthread_mutex_lock(&t->mu);
  w = t->stop || t->elect || t->kick || (t->here && t->record >= 0);
  pthread_mutex_unlock(&t->mu);
  return w;
}

static void on_event(wctx_t *c, const etcd_event_t *ev) {
  long long round, hrev;
  if (!strcmp(ev->key, c->t->host_key)) {
    /* a replay of what happened before the key followed was created (a
     * DELETE names no create revision: its own revision says when) */
    if (ev->mod_rev < c->known)
      return;
    if (ev->deleted || ev->create_rev != c->known) {
      LU_DBG(&c->t->log, LU_DBG_ROUNDS, "etcd watch: the host key %s",
             ev->deleted ? "was deleted" : "changed hands");
      host_gone(c->t, c->known);
      c->gone = 1;
    }
    return;
  }
  if (!strcmp(ev->key, c->t->round_key) && !ev->deleted &&
      etb__round_parse(ev->value, &round, &hrev) == 0) {
    if (hrev != c->known) {
      LU_DBG(&c->t->log, LU_DBG_ROUNDS, "etcd watch: round %lld recorded "
             "by the host key of revision %lld, not %" PRId64 " (another "
             "host's)", round, hrev, c->known);
      return;
    }
    LU_DBG(&c->t->log, LU_DBG_ROUNDS, "etcd watch: round %lld recorded",
           round);
    round_seen(c->t, round);
  }
}

/* One message of the watch (NULL: woken). RET 1 to end the watch. */
static int on_watch(void *arg, const etcd_watch_msg_t *m) {
  wctx_t *c = arg;
  if (m == NULL)
    return has_work(c->t);
  if (m->canceled || m->compact_rev > 0) {
    c->s->wrev = 0; /* history gone: read, and watch from now */
    return 1;
  }
  if (m->created && c->s->wrev == 0) {
    /* what happened before it: read once, then watch on from here */
    c->s->wrev = m->revision + 1;
    c->s->reread = 1;
    return 1;
  }
  for (size_t i = 0; i < m->nevents; i++)
    on_event(c, &m->events[i]);
  if (m->more) {
    if (m->revision > 0)
      c->s->wrev = m->revision + 1;
    c->s->reread = 1; /* events not kept: read what they were about */
    return 1;
  }
  /* On from the last event seen, not from a header's revision: the one of
   * "created" is etcd's newest, while the events since wrev come after it
   * (etcd sends them within 100 ms), and a watch ended in between would
   * skip them for good (a round record: its round never started). */
  if (m->nevents > 0 && m->events[m->nevents - 1].mod_rev >= c->s->wrev)
    c->s->wrev = m->events[m->nevents - 1].mod_rev + 1;
  return c->gone || has_work(c->t);
}

/* Watch the job's prefix until the next keepalive is due, or the loop has
 * work. On failure the host key and the round are read (polled) for a TTL,
 * then the watch is tried again. */
static void watch(etb_t *t, th_t *s, int64_t known) {
  wctx_t c = {t, s, known, 0};
  uint64_t now = lu_now_ms();
  int rc;
  if (s->next_ka <= now)
    return;
  rc = etcd_watch(t->w, t->prefix, s->wrev, (int64_t)(s->next_ka - now),
                  on_watch, &c);
  if (rc == 0 || rc == -ECANCELED)
    return;
  LU_DBG(&t->log, LU_DBG_ROUNDS, "etcd watch failed (%s): polling for %"
         PRId64 " s", etcd_last_error(t->w), t->ttl_s);
  /* a refusal is the other client's to report: its requests say so */
  s->wrev = 0;
  s->watch_retry = lu_now_ms() + (uint64_t)t->ttl_s * 1000;
}

static void *etb_main(void *arg) {
  etb_t *t = arg;
  th_t s;
  memset(&s, 0, sizeof(s));
  s.want_read = -1;
  s.started = lu_now_ms();
  for (;;) {
    int elect, stop, dead, here, watching;
    int64_t lost, known, rec, want;
    pthread_mutex_lock(&t->mu);
    stop = t->stop;
    elect = t->elect;
    lost = t->lost_rev;
    dead = t->lost_dead;
    known = t->host_rev;
    rec = t->here ? t->record : -1;
    here = t->here;
    want = t->want_round;
    t->kick = 0; /* what was asked is done in this turn */
    pthread_mutex_unlock(&t->mu);
    if (stop)
      break;
    if (s.lease == 0) {
      if (register_node(t, &s) != 0) {
        if (!s.reached && s.down &&
            lu_now_ms() - s.started >= (uint64_t)t->start_limit_ms) {
          /* never reached: a wrong member list, or etcd not running */
          pthread_mutex_lock(&t->mu);
          snprintf(t->error, sizeof(t->error), "cannot reach etcd at %.300s: "
                   "gave up after %.0f s (--rdzv-conf read_timeout): %s. "
                   "Check --rdzv-endpoint (etcd's client addresses, "
                   "HOST:PORT with 2379 by default, or URLs) and that etcd "
                   "runs there", t->members,
                   (double)t->start_limit_ms / 1000.0, etcd_last_error(t->e));
          pthread_mutex_unlock(&t->mu);
          post(t, ETB_FAILED);
          break;
        }
        if (nap(t, s.down ? 1000 : TICK_MS))
          break;
        continue;
      }
      if (s.fenced) {
        s.fenced = 0;
        post(t, ETB_RESTORED);
      }
    } else {
      uint64_t ka = s.next_ka;
      keep_alive(t, &s);
      /* a round waited for is read again at each renewal: a record the
       * watch missed holds no node until join_timeout */
      if (s.next_ka != ka)
        s.want_read = -1;
    }
    watching = lu_now_ms() >= s.watch_retry;
    if (s.lease != 0) {
      if (elect)
        elect_step(t, &s, lost, dead);
      else if (known > 0 && (s.reread || (!watching &&
                                          lu_now_ms() >= s.next_watch))) {
        /* without the watch, a fifth of the TTL: a lost key is seen well
         * within the time etcd took to let it go */
        s.next_watch = lu_now_ms() + (uint64_t)t->ttl_s * 1000 / 5;
        watch_host(t, &s, known);
      }
      if (rec >= 0 && known > 0)
        record(t, &s, rec, known);
      else if (want >= 0 && known > 0 && !here &&
               (s.reread || !watching || s.want_read != want)) {
        s.want_read = want;
        check_round(t, &s, known);
      }
      s.reread = 0;
      if (watching && !elect && known > 0 && rec < 0 && !s.down) {
        watch(t, &s, known); /* until a change, work, or a keepalive */
        continue;
      }
    }
    /* a round waited for is read again soon: the host writes it now */
    if (nap(t, s.down ? 1000 : want >= 0 && rec < 0 ? 20 : TICK_MS))
      break;
  }
  /* this node's keys go now, not in a TTL: within ETB_REVOKE_MS whatever
   * the members do (at 2 s a member that does not answer, after the
   * request in flight at the stop, the agent took 12 s to exit) */
  pthread_mutex_lock(&t->mu);
  t->exiting = 1;
  pthread_mutex_unlock(&t->mu);
  if (s.lease != 0) {
    uint64_t end = lu_now_ms() + ETB_REVOKE_MS;
    etcd_cut(t->e, end);
    etcd_set_budget(t->e, end); /* shared among the members */
    etcd_revoke(t->e, s.lease);
  }
  return NULL;
}

/* ---- the loop's side ----------------------------------------------------- */

static void on_async(uv_async_t *h) {
  etb_t *t = h->data;
  unsigned ev;
  pthread_mutex_lock(&t->mu);
  ev = t->events;
  t->events = 0;
  pthread_mutex_unlock(&t->mu);
  if (ev)
    t->cb(t->arg, ev);
}

int etb_start(uv_loop_t *loop, const cfg_t *o, const lu_log_t *log,
              const char *my_addr, int my_port, etb_cb cb, void *arg,
              etb_t **out, char *err, size_t errlen) {
  etcd_config_t ec;
  etb_t *t;
  int rc;
  *out = NULL;
  if ((t = calloc(1, sizeof(*t))) == NULL)
    return RDZV_ENOMEM;
  memset(&ec, 0, sizeof(ec));
  ec.endpoints = o->endpoint_raw;
  ec.https = o->etcd_https;
  ec.cacert = o->etcd_cacert[0] ? o->etcd_cacert : NULL;
  ec.cert = o->etcd_cert[0] ? o->etcd_cert : NULL;
  ec.key = o->etcd_key[0] ? o->etcd_key : NULL;
  ec.user = o->etcd_user[0] ? o->etcd_user : NULL;
  ec.password = getenv("LAUNCH_ETCD_PASSWORD");
  ec.timeout_ms = 2000;
  if ((rc = etcd_new(&ec, &t->e, err, errlen)) != 0) {
    free(t);
    return rc;
  }
  if ((rc = etcd_new(&ec, &t->w, err, errlen)) != 0) {
    etcd_free(t->e);
    free(t);
    return rc;
  }
  t->cb = cb;
  t->arg = arg;
  t->log = *log;
  t->ttl_s = LU_MAX(2, (o->etcd_ttl_ms + 999) / 1000);
  /* as the c10d agent's wait for a server that is not up */
  t->start_limit_ms = LU_MAX(1000, LU_MIN(o->join_timeout_ms,
                                          o->read_timeout_ms));
  t->record = -1;
  t->want_round = -1;
  t->round_ok = -1;
  t->elect = 1;
  lu_strlcpy(t->members, o->endpoint_raw, sizeof(t->members));
  snprintf(t->prefix, sizeof(t->prefix), "%s%s/", o->etcd_prefix, o->run_id);
  snprintf(t->host_key, sizeof(t->host_key), "%shost", t->prefix);
  snprintf(t->round_key, sizeof(t->round_key), "%sround", t->prefix);
  snprintf(t->node_key, sizeof(t->node_key), "%snodes/%s", t->prefix,
           o->host);
  snprintf(t->me, sizeof(t->me), "%s %d %s", my_addr, my_port, o->host);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  uv_async_init(loop, &t->async, on_async);
  t->async.data = t;
  if (pthread_create(&t->thread, NULL, etb_main, t) != 0) {
    snprintf(err, errlen, "cannot start the etcd thread");
    etb_close(t);
    return RDZV_ENOMEM;
  }
  t->started = 1;
  *out = t;
  return 0;
}

int etb__host_parse(const char *v, char *addr, size_t acap, int *port,
                    char *name, size_t ncap) {
  char a[600] = "", n[600] = "";
  int p = 0, got = sscanf(v, "%599s %d %599s", a, &p, n);
  if (got < 2 || p <= 0 || p > 65535)
    return -1;
  lu_strlcpy(addr, a, acap);
  lu_strlcpy(name, got == 3 ? n : a, ncap);
  *port = p;
  return 0;
}

int etb_host(etb_t *t, char *addr, size_t acap, int *port, char *name,
             size_t ncap, int *here) {
  char h[sizeof(t->host)] = "";
  pthread_mutex_lock(&t->mu);
  if (t->host_rev > 0)
    lu_strlcpy(h, t->host, sizeof(h));
  *here = t->here;
  pthread_mutex_unlock(&t->mu);
  return etb__host_parse(h, addr, acap, port, name, ncap);
}

void etb_elect(etb_t *t, int how) {
  pthread_mutex_lock(&t->mu);
  if (how == ETB_ELECT_AGAIN) {
    t->elect = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    etcd_watch_wake(t->w);
    return;
  }
  if (how == ETB_ELECT_ANY)
    t->lost_rev = 0;
  else if (t->host_rev > 0)
    t->lost_rev = t->host_rev;
  t->lost_dead = how == ETB_ELECT_DEAD;
  t->host_rev = 0;
  t->here = 0;
  t->elect = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  etcd_watch_wake(t->w);
}

void etb_record_round(etb_t *t, int64_t r) {
  pthread_mutex_lock(&t->mu);
  t->record = r;
  t->kick = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  etcd_watch_wake(t->w);
}

void etb_wait_round(etb_t *t, int64_t r) {
  int ok;
  pthread_mutex_lock(&t->mu);
  ok = t->round_ok >= r;
  if (!ok) {
    t->want_round = r;
    t->kick = 1;
    pthread_cond_signal(&t->cv);
  }
  pthread_mutex_unlock(&t->mu);
  if (!ok)
    etcd_watch_wake(t->w);
  if (ok)
    post(t, ETB_ROUND_OK);
}

int64_t etb_round_ok(etb_t *t) {
  int64_t r;
  pthread_mutex_lock(&t->mu);
  r = t->round_ok;
  pthread_mutex_unlock(&t->mu);
  return r;
}

const char *etb_members(const etb_t *t) { return t->members; }

const char *etb_error(etb_t *t, char *buf, size_t cap) {
  pthread_mutex_lock(&t->mu);
  lu_strlcpy(buf, t->error, cap);
  pthread_mutex_unlock(&t->mu);
  return buf;
}

static void async_closed(uv_handle_t *h) {
  etb_t *t = h->data;
  etcd_free(t->e);
  etcd_free(t->w);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t);
}

void etb_close(etb_t *t) {
  if (t == NULL)
    return;
  if (t->started) {
    /* the request in flight, and the watch, end now: only the revoke
     * (etb_main's end, bounded) is waited for; before the thread is there,
     * under mu, not to cut its revoke short */
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    if (!t->exiting)
      etcd_cut(t->e, lu_now_ms());
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    etcd_cut(t->w, lu_now_ms());
    pthread_join(t->thread, NULL);
    t->started = 0;
  }
  uv_close((uv_handle_t *)&t->async, async_closed);
}
