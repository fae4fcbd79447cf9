/* srv_jobs.c - the rendezvous server's jobs, the per-address counts that
 * limit them, and the events handed to the owner. Moved out of server.c
 * (issue #25). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "rounds.h"
#include "srv_int.h"


/* ---- events for the owner (srv_config_t.on_event) ----------------------------------- */

static const char *const limit_names[SRV_LIMIT_COUNT] = {
#define SRV_LIMIT_NAME(id, opt, label) opt,
    SRV_LIMITS(SRV_LIMIT_NAME)
#undef SRV_LIMIT_NAME
};
static const char *const limit_labels[SRV_LIMIT_COUNT] = {
#define SRV_LIMIT_LABEL(id, opt, label) label,
    SRV_LIMITS(SRV_LIMIT_LABEL)
#undef SRV_LIMIT_LABEL
};

const char *srv_limit_name(int limit) {
  return limit >= 0 && limit < SRV_LIMIT_COUNT ? limit_names[limit]
                                               : "unknown";
}

const char *srv_limit_label(int limit) {
  return limit >= 0 && limit < SRV_LIMIT_COUNT ? limit_labels[limit] : NULL;
}

void srv__event(srv_t *s, const srv_event_t *ev) {
  if (s->cfg.on_event && !s->closing)
    s->cfg.on_event(s->cfg.event_arg, ev);
}

void srv__limit_hit(srv_t *s, int limit, uint64_t value, const char *job,
                    const char *peer, const char *fmt, ...) {
  uint64_t now = srv__now();
  char what[512];
  srv_event_t ev;
  va_list ap;
  if (limit < 0 || limit >= SRV_LIMIT_COUNT)
    return;
  s->stats.refused[limit]++;
  if (s->cfg.on_event == NULL)
    return;
  /* A flood of refusals is one line per limit per limit_event_ms, with
   * their count. */
  s->limit_ev[limit].pending++;
  if (s->limit_ev[limit].last_ms != 0 &&
      now - s->limit_ev[limit].last_ms < s->cfg.limit_event_ms)
    return;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  memset(&ev, 0, sizeof(ev));
  ev.kind = SRV_EV_LIMIT_HIT;
  ev.job = job;
  ev.addr = peer;
  ev.round = -1;
  ev.reason = what;
  ev.limit = limit;
  ev.value = value;
  ev.count = s->limit_ev[limit].pending;
  s->limit_ev[limit].last_ms = now;
  s->limit_ev[limit].pending = 0;
  srv__event(s, &ev);
}

/* Memory was freed: connections waiting for it try again this turn. */
void srv__mem_released(srv_t *s) {
  srv__mem_update(s);
  while (!list_empty(&s->memwait)) {
    conn_t *c = LIST_ENTRY(s->memwait.next, conn_t, memwait_link);
    list_remove(&c->memwait_link);
    list_unlink(&c->resume_link);
    list_insert_tail(&c->lp->resume, &c->resume_link);
    srv__wake_loop(c->lp);
  }
}

/* ---- client addresses --------------------------------------------------------------- */

/* The 16-byte key of an address (IPv4 as v4-mapped). RET 0 when it has
 * one (TCP), -1 for unix-socket peers (no per-address limits). */
static int addr_key(const struct sockaddr_storage *ss, uint8_t out[16]) {
  if (ss->ss_family == AF_INET) {
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    return 0;
  }
  if (ss->ss_family == AF_INET6) {
    memcpy(out, ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr, 16);
    return 0;
  }
  return -1;
}

static size_t addr_bucket(const srv_t *s, const uint8_t a[16]) {
  uint64_t h = s->addr_seed ^ 0xcbf29ce484222325ull;
  for (int i = 0; i < 16; i++)
    h = (h ^ a[i]) * 0x100000001b3ull;
  return (size_t)(h ^ (h >> 29)) & (s->naddr_buckets - 1);
}

srv_addr_t *srv__addr_get(srv_t *s, const struct sockaddr_storage *ss) {
  uint8_t k[16];
  srv_addr_t *a;
  size_t b;
  if (addr_key(ss, k) != 0)
    return NULL;
  if (s->addrs == NULL) {
    s->naddr_buckets = 64;
    if ((s->addrs = calloc(s->naddr_buckets, sizeof(*s->addrs))) == NULL)
      return NULL;
  }
  b = addr_bucket(s, k);
  for (a = s->addrs[b]; a; a = a->next)
    if (memcmp(a->a, k, 16) == 0)
      return a;
  if ((a = calloc(1, sizeof(*a))) == NULL)
    return NULL;
  memcpy(a->a, k, 16);
  a->next = s->addrs[b];
  s->addrs[b] = a;
  return a;
}

/* Forget an address with nothing counted. */
void srv__addr_put(srv_t *s, srv_addr_t *a) {
  srv_addr_t **pp;
  if (a == NULL || a->nconns > 0 || a->njobs > 0)
    return;
  for (pp = &s->addrs[addr_bucket(s, a->a)]; *pp != a; pp = &(*pp)->next)
    ;
  *pp = a->next;
  free(a);
}

/* ---- jobs ------------------------------------------------------------------------ */


/* A job counts against its creator's --max-jobs-per-addr while it is live:
 * a connection uses it or its store holds data. One with neither (a
 * finished run, a refused HELLO) waits for the grace without holding the
 * address's slots, so short jobs in a row never lock their node out. */
static int job_live(const job_t *j) {
  return j->nconns > 0 || !store_is_empty(j->store);
}

/* When a job with no connection and no data is forgotten: at the end of
 * its record's keep (an ended job), else after the grace. */
static uint64_t job_due(const srv_t *s, const job_t *j) {
  uint64_t keep = s->rounds_job_keep ? s->rounds_job_keep(j) : 0;
  return keep ? keep : j->idle_since + s->cfg.job_grace_ms;
}

/* Forget the ended job kept the longest (no connection; every node of it
 * left, so its keys were the finished run's) to make room. RET 1 when one
 * went. */
int srv__evict_ended(srv_t *s) {
  job_t **pp, **oldest = NULL;
  uint64_t best = UINT64_MAX;
  for (pp = &s->jobs; *pp; pp = &(*pp)->next) {
    uint64_t keep = s->rounds_job_keep ? s->rounds_job_keep(*pp) : 0;
    if (keep && (*pp)->nconns == 0 && keep < best) {
      best = keep;
      oldest = pp;
    }
  }
  if (oldest) {
    job_t *old = *oldest;
    *oldest = old->next;
    srv__job_free(s, old);
    srv__mem_update(s);
    return 1;
  }
  return 0;
}

static uint32_t addr_live_jobs(const srv_t *s, const srv_addr_t *a) {
  uint32_t n = 0;
  for (const job_t *j = s->jobs; j; j = j->next)
    n += j->creator == a && job_live(j);
  return n;
}

job_t *srv__job(srv_t *s, conn_t *c, const char *name, size_t len, char *err,
                size_t errcap) {
  job_t *j;
  srv_addr_t *a = c ? c->addr : NULL;
  for (j = s->jobs; j; j = j->next)
    if (strlen(j->name) == len && memcmp(j->name, name, len) == 0)
      return j;
  if (len == 0 || len > 255) {
    lu_errf(err, errcap, "a job id has 1 to 255 bytes");
    return NULL;
  }
  /* Ended jobs kept for status make room for a new one. */
  while ((s->njobs >= s->cfg.max_jobs || !srv__mem_fixed_room(s, SRV_JOB_COST)) &&
         srv__evict_ended(s))
    ;
  if (s->njobs >= s->cfg.max_jobs) {
    lu_errf(err, errcap, "cannot create job '%.*s': %u jobs exist, the "
            "server's limit (--max-jobs)", (int)len, name, s->cfg.max_jobs);
    srv__limit_hit(s, SRV_LIMIT_MAX_JOBS, s->cfg.max_jobs, NULL,
                   c ? c->peer : NULL, "a new job ('%.*s')", (int)len, name);
    return NULL;
  }
  /* At the limit, the address's oldest job not in use (a finished run's
   * rendezvous state waiting for its grace) makes room: an address never
   * holds more than its limit, and only jobs in use can refuse it. */
  if (a && a->njobs >= s->cfg.max_jobs_per_addr &&
      addr_live_jobs(s, a) < s->cfg.max_jobs_per_addr) {
    job_t **pp, **oldest = NULL;
    for (pp = &s->jobs; *pp; pp = &(*pp)->next)
      if ((*pp)->creator == a && !job_live(*pp) &&
          (oldest == NULL || (*pp)->idle_since < (*oldest)->idle_since))
        oldest = pp;
    if (oldest) {
      job_t *old = *oldest;
      *oldest = old->next;
      srv__job_free(s, old);
    }
  }
  if (a && a->njobs >= s->cfg.max_jobs_per_addr &&
      addr_live_jobs(s, a) >= s->cfg.max_jobs_per_addr) {
    lu_errf(err, errcap, "cannot create job '%.*s': %u jobs created from "
            "%s are in use (connected, or holding data), the server's "
            "per-address limit of %u: end some, or raise it (launch server "
            "--max-jobs-per-addr N)", (int)len, name, addr_live_jobs(s, a),
            c->peer, s->cfg.max_jobs_per_addr);
    srv__limit_hit(s, SRV_LIMIT_MAX_JOBS_PER_ADDR, s->cfg.max_jobs_per_addr,
                   NULL, c->peer, "a new job ('%.*s')", (int)len, name);
    return NULL;
  }
  if (!srv__mem_fixed_room(s, SRV_JOB_COST)) {
    lu_errf(err, errcap, "cannot create job '%.*s': connections and jobs "
            "hold their quarter of --max-memory %zu", (int)len, name,
            s->cfg.max_memory);
    srv__limit_hit(s, SRV_LIMIT_MAX_MEMORY, s->cfg.max_memory, NULL,
                   c ? c->peer : NULL, "a new job ('%.*s'): connections and "
                   "jobs hold their quarter", (int)len, name);
    return NULL;
  }
  if ((j = calloc(1, sizeof(*j) + len + 1)) == NULL ||
      store_new_seeded(s->cfg.max_store_bytes, &s->mem.store, s->store_seed,
                       &j->store) != 0) {
    free(j);
    lu_errf(err, errcap, "out of memory");
    return NULL;
  }
  memcpy(j->name, name, len);
  j->name[len] = '\0';
  j->srv = s;
  j->ts_round = -1;
  j->creator = a;
  if (a)
    a->njobs++;
  j->idle_since = srv__now();
  j->next = s->jobs;
  s->jobs = j;
  s->njobs++;
  s->stats.jobs = s->njobs;
  s->mem.jobs += SRV_JOB_COST;
  srv__mem_update(s);
  /* A job nobody attaches to (a refused HELLO) goes after the grace. */
  srv__gc_schedule(s, job_due(s, j));
  return j;
}

void srv__job_attach(conn_t *c, job_t *j) {
  c->job = j;
  j->nconns++;
}

void srv__job_detach(conn_t *c) {
  job_t *j = c->job;
  srv_t *s = c->srv;
  if (j == NULL)
    return;
  c->job = NULL;
  if (--j->nconns == 0) {
    /* Nothing stored, no rendezvous: nothing worth keeping (a HELLO and a
     * disconnect); it goes now rather than after the grace. */
    if (store_is_empty(j->store) && j->rounds == NULL && !s->closing) {
      job_t **pp;
      for (pp = &s->jobs; *pp && *pp != j; pp = &(*pp)->next)
        ;
      if (*pp == j) {
        *pp = j->next;
        srv__job_free(s, j); /* the connection's close releases the memory */
        return;
      }
    }
    j->idle_since = srv__now();
    srv__gc_schedule(s, job_due(s, j));
  }
}

void srv__job_free(srv_t *s, job_t *j) {
  if (s->rounds_job_free)
    s->rounds_job_free(j);
  store_free(j->store);
  if (j->creator) {
    j->creator->njobs--;
    srv__addr_put(s, j->creator);
  }
  s->mem.jobs -= SRV_JOB_COST;
  s->njobs--;
  s->stats.jobs = s->njobs;
  free(j);
}

static void gc_cb_locked(uv_timer_t *t);
static void gc_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  srv__trace_begin(s, "gc", NULL);
  srv__lock(s);
  gc_cb_locked(t);
  srv__unlock(s);
  srv__trace_end(s);
}

static void gc_cb_locked(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now(), next = UINT64_MAX;
  job_t **pp = &s->jobs;
  int freed = 0;
  /* A job with no connection and nothing stored is forgotten after the
   * grace (throw-away HELLOs); one that holds data stays, as TCPStore's
   * keys outlive their clients, except a finished rendezvous job whose
   * nodes all left: its keys were that run's, and it goes with its end
   * after --keep-ended. */
  while (*pp) {
    job_t *j = *pp;
    if (j->nconns == 0 && (store_is_empty(j->store) ||
                           (s->rounds_job_keep && s->rounds_job_keep(j)))) {
      uint64_t due = job_due(s, j);
      if (due <= now) {
        *pp = j->next;
        srv__job_free(s, j);
        freed = 1;
        continue;
      }
      next = LU_MIN(next, due);
    }
    pp = &j->next;
  }
  if (freed)
    srv__mem_released(s);
  if (next != UINT64_MAX)
    uv_timer_start(&s->gc_timer, gc_cb, next - now, 0);
}

void srv__gc_schedule(srv_t *s, uint64_t due) {
  uint64_t now = srv__now();
  if (s->closing)
    return;
  if (!srv__on_main(s)) {
    if (s->kick_gc_due == 0 || due < s->kick_gc_due)
      s->kick_gc_due = due;
    srv__kick_main(s);
    return;
  }
  if (uv_is_active((uv_handle_t *)&s->gc_timer) &&
      now + uv_timer_get_due_in(&s->gc_timer) <= due)
    return;
  uv_timer_start(&s->gc_timer, gc_cb, due > now ? due - now : 0, 0);
}
