/* server.c - the connection core of the rendezvous server: listeners,
 * protocol sniffing, TLS, input and output buffers and the memory they may
 * use, replies and pushes, handshake and wait deadlines, jobs and their
 * per-address limits, shutdown. The dialects (srv_native.c,
 * srv_tcpstore.c) turn bytes into requests through srv_dialect_t.
 *
 * Memory: everything a client can make the server hold is counted against
 * cfg.max_memory (docs/protocol.md#limits): a fixed cost per connection
 * (which reserves a small input buffer and a small reply), per job, the
 * stores of all jobs (half of it at most), unfinished requests beyond the
 * reserve (--max-input-bytes) and unsent replies beyond the reserve. A
 * reply is counted before it is built: when it does not fit, the request
 * stays unread in the buffer and the connection is paused until its
 * replies drained or memory was freed. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lu_bigbuf.h"
#include "rounds.h"
#include "srv_int.h"

#define IN_CHUNK 1024         /* first read buffer; doubles as frames need */
#define OUT_FLUSH_NOW (64u << 10) /* hand this much output to the kernel at once */
#define TLS_RBUF (64u << 10)  /* ciphertext read at a time */
#define TLS_IN_MAX (128u << 10) /* ciphertext not yet decrypted */
/* A connection runs its requests for cfg.turn_us at most (500 us), then
 * the others get their turn: a client that pipelines thousands of large
 * requests must not hold up one that sends a small one. With several
 * loops sharing one lock, a loop may wait for the others' turns one after
 * another: 0.5 ms (it was 2 ms) keeps their sum short. */
#define TURN_NS(s) ((uint64_t)(s)->cfg.turn_us * 1000u)
/* A loop's pass runs the large requests (and the connections resumed) for
 * cfg.pass_us (1 ms), or one piece, after the small ones: the rest waits
 * for the next pass, after the poll has read what came meanwhile. A small
 * request waits for one pass's large work on its loop at most. These and
 * the lock's knobs (cfg.lock_plain: no hungry waiters; cfg.lock_spins:
 * pause-spins before a waiter sleeps) are rows of `launch server
 * --help-debug` (LAUNCH_SERVER_*), for benchmarks that compare. */
#define PASS_NS(s) ((uint64_t)(s)->cfg.pass_us * 1000u)
/* What a connection has read is small: its requests run first. */
#define SMALL_IN (4u << 10)

static void conn_process(conn_t *c);
static void conn_run_read(conn_t *c);
static void conn_input(conn_t *c);
static int flush_conn(conn_t *c, int may_close);
static void conn_start_read(conn_t *c);
static void gc_schedule(srv_t *s, uint64_t due);
static void wake_loop(srv_loop_t *lp);

/* ---- loops and the lock ---------------------------------------------------------- */

/* The loop the calling thread runs; NULL on loop 0's thread (the caller's,
 * which may run several servers' loop 0). */
static __thread srv_loop_t *tl_lp;

static int lp_here(const srv_loop_t *lp) {
  return tl_lp ? tl_lp == lp : lp->idx == 0;
}

int srv__on_main(const srv_t *s) {
  (void)s;
  return tl_lp == NULL;
}

uint64_t srv__now(void) { return uv_hrtime() / 1000000u; }

/* ---- tracing: cfg.trace_us (LAUNCH_SERVER_TRACE_MS) logs every callback
 * of an event loop that ran that long or more (wall time), with its
 * thread's CPU time, the time it waited for the lock and the connection it
 * served; at close, the longest. Off (one branch per callback) at 0. The
 * record is the thread's: tr.depth > 0 only inside a traced callback. ---- */

#define TRACE_NS(s) ((uint64_t)(s)->cfg.trace_us * 1000u)

typedef struct {
  const char *what;
  const char *req_op; /* the callback's longest request */
  uint64_t req_ns;
  unsigned nreq;
  uint64_t conn, w0, c0, lock_ns, q0;
  long vol0, invol0;
  const char *dialect;
  char job[24]; /* the connection's job, cut */
  int depth, schedstat_fd; /* schedstat_fd: 0 not opened yet, -1 none */
} trace_t;

static __thread trace_t tr;

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The time this thread has waited, runnable, for a CPU (the second field
 * of /proc/thread-self/schedstat; 0 where the kernel has no schedstat).
 * With the CPU time, the lock waits and the context switches it splits a
 * slow callback's wall time: off the CPU blocked (voluntary switches: a
 * page fault's I/O, the mmap lock), waiting for a CPU, or neither (time
 * the hypervisor stole from the vCPU, interrupts). */
static uint64_t queued_ns(void) {
  char buf[96];
  ssize_t n;
  unsigned long long run = 0, wait = 0;
  if (tr.schedstat_fd == 0) {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    tr.schedstat_fd = fd >= 0 ? fd : -1;
  }
  if (tr.schedstat_fd < 0)
    return 0;
  n = pread(tr.schedstat_fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? wait : 0;
}

static void trace_thread_end(void) {
  if (tr.schedstat_fd > 0)
    close(tr.schedstat_fd);
  tr.schedstat_fd = 0;
}

static void switches(long *vol, long *invol) {
  struct rusage ru;
  *vol = *invol = 0;
  if (getrusage(RUSAGE_THREAD, &ru) == 0) {
    *vol = ru.ru_nvcsw;
    *invol = ru.ru_nivcsw;
  }
}

static void trace_begin(const srv_t *s, const char *what, const conn_t *c) {
  if (s->cfg.trace_us == 0 || tr.depth++ > 0)
    return;
  tr.what = what;
  tr.conn = c ? c->id : 0;
  tr.dialect = c && c->dialect ? c->dialect->name : "";
  lu_strlcpy(tr.job, c && c->job ? c->job->name : "", sizeof(tr.job));
  tr.lock_ns = 0;
  tr.req_op = NULL;
  tr.req_ns = 0;
  tr.nreq = 0;
  switches(&tr.vol0, &tr.invol0);
  tr.q0 = queued_ns();
  tr.w0 = uv_hrtime();
  tr.c0 = cpu_ns();
}

static void trace_end(srv_t *s) {
  uint64_t wall, cpu;
  char what[96];
  if (s->cfg.trace_us == 0 || tr.depth == 0 || --tr.depth > 0)
    return;
  wall = uv_hrtime() - tr.w0;
  cpu = cpu_ns() - tr.c0;
  snprintf(what, sizeof(what), "loop %d %s conn %llu %s%s%s",
           tl_lp ? tl_lp->idx : 0, tr.what, (unsigned long long)tr.conn,
           tr.dialect, tr.job[0] ? " job " : "", tr.job);
  pthread_mutex_lock(&s->trace_mu);
  if (wall - tr.lock_ns > s->trace_max.wall) {
    s->trace_max.wall = wall - tr.lock_ns;
    s->trace_max.wall_cpu = cpu;
    memcpy(s->trace_max.what, what, sizeof(what));
  }
  if (cpu > s->trace_max.cpu) {
    s->trace_max.cpu = cpu;
    memcpy(s->trace_max.what_cpu, what, sizeof(what));
  }
  pthread_mutex_unlock(&s->trace_mu);
  if (wall >= TRACE_NS(s)) {
    long vol, invol;
    uint64_t queued = queued_ns() - tr.q0;
    switches(&vol, &invol);
    char reqs[64] = "";
    if (tr.nreq > 0)
      snprintf(reqs, sizeof(reqs), "; %u requests, the longest %s %.2f ms",
               tr.nreq, tr.req_op, tr.req_ns / 1e6);
    LU_WARN(&s->log, "trace: %s: %.2f ms wall (%.2f ms waiting for the "
            "lock), %.2f ms CPU, %.2f ms waiting for a CPU, %ld voluntary "
            "and %ld involuntary switches%s", what, wall / 1e6,
            tr.lock_ns / 1e6, cpu / 1e6, queued / 1e6, vol - tr.vol0,
            invol - tr.invol0, reqs);
  }
}

uint64_t srv__trace_now(void) {
  return tr.depth > 0 ? uv_hrtime() : 0;
}

void srv__trace_req(const char *op, uint64_t t0) {
  uint64_t d;
  if (t0 == 0)
    return;
  d = uv_hrtime() - t0;
  tr.nreq++;
  if (d >= tr.req_ns) {
    tr.req_ns = d;
    tr.req_op = op;
  }
}

/* The loops' lock. A plain mutex lets a loop that just released it take
 * it again before a waiter that slept wakes up, and a loop with work does
 * so after every callback: one loop could wait behind dozens of the
 * others' turns, and with it every client it serves. So a waiter that
 * waited LOCK_HUNGRY_NS is "hungry": while one is, nobody else takes the
 * lock but the hungry. Below that, it is a mutex (a strict queue would
 * stall behind a waiter the scheduler has not run, on a busy machine).
 * A waiter for a short hold that a client's small request waits on (a
 * pass with small requests read, an input buffer to grow, an accept) is
 * "urgent": hungry from the start. Large pieces of work give way to it
 * between pieces (lock_yield), so a small request waits for one piece of
 * another loop's, not for every loop's turn (issue #11). */
#define LOCK_HUNGRY_NS (1000u * 1000)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int lock_take(srv_t *s, int hungry) {
  int free_ = 0;
  if (!hungry && atomic_load(&s->lock_hungry) > 0)
    return 0;
  return atomic_compare_exchange_strong(&s->lock_held, &free_, 1);
}

/* RET 1 with the lock, or 0 when it did not come before `deadline`
 * (uv_hrtime(); 0: none). */
static int lock_slow(srv_t *s, int urgent, uint64_t deadline) {
  uint64_t t0 = uv_hrtime();
  int hungry = urgent && !s->cfg.lock_plain, got;
  if (hungry)
    atomic_fetch_add(&s->lock_hungry, 1);
  for (int i = 0; i < s->cfg.lock_spins; i++) {
    cpu_relax();
    if (lock_take(s, hungry)) {
      if (hungry)
        atomic_fetch_sub(&s->lock_hungry, 1);
      return 1;
    }
  }
  pthread_mutex_lock(&s->mu);
  /* Counted before looking again (seq_cst, as srv__unlock reads it after
   * releasing): either it sees this sleeper or this sees the lock free. */
  atomic_fetch_add(&s->lock_sleepers, 1);
  while (!(got = lock_take(s, hungry))) {
    struct timespec ts;
    uint64_t now = uv_hrtime(), wait = LOCK_HUNGRY_NS;
    if (deadline != 0 && now >= deadline)
      break;
    if (!hungry && !s->cfg.lock_plain && now - t0 >= LOCK_HUNGRY_NS) {
      hungry = 1;
      atomic_fetch_add(&s->lock_hungry, 1);
      continue;
    }
    /* Timed: a waiter must notice when it becomes hungry. */
    if (deadline != 0 && deadline - now < wait)
      wait = deadline - now;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)wait;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&s->lock_cv, &s->mu, &ts);
  }
  atomic_fetch_sub(&s->lock_sleepers, 1);
  if (hungry)
    atomic_fetch_sub(&s->lock_hungry, 1);
  /* Given up: a wake-up this waiter took goes to another sleeper. */
  if (!got && atomic_load(&s->lock_sleepers) > 0 &&
      atomic_load(&s->lock_held) == 0)
    pthread_cond_broadcast(&s->lock_cv);
  pthread_mutex_unlock(&s->mu);
  return got;
}

static int lock_wait(srv_t *s, int urgent, uint64_t deadline) {
  int got;
  if (tr.depth > 0) {
    uint64_t t0 = uv_hrtime();
    got = lock_slow(s, urgent, deadline);
    tr.lock_ns += uv_hrtime() - t0;
    return got;
  }
  return lock_slow(s, urgent, deadline);
}

static void lock_prio(srv_t *s, int urgent) {
  if (s->nloops <= 1 || lock_take(s, urgent))
    return;
  lock_wait(s, urgent, 0);
}

void srv__lock(srv_t *s) { lock_prio(s, 0); }

/* For a short hold that a client's small request waits on. */
static void lock_urgent(srv_t *s) { lock_prio(s, 1); }

void srv__unlock(srv_t *s) {
  if (s->nloops <= 1)
    return;
  atomic_store(&s->lock_held, 0);
  if (atomic_load(&s->lock_sleepers) > 0) {
    pthread_mutex_lock(&s->mu);
    /* The hungry must be among those woken. */
    if (atomic_load(&s->lock_hungry) > 0)
      pthread_cond_broadcast(&s->lock_cv);
    else
      pthread_cond_signal(&s->lock_cv);
    pthread_mutex_unlock(&s->mu);
  }
}

/* For a loop's large work (a pass without small requests, the next piece
 * after a yield): the lock, or 0 when it did not come within LARGE_TRY_NS.
 * Then the loop goes back to its poll, so that a small request that comes
 * meanwhile is read and run (urgent) instead of waiting behind this loop's
 * wait, and tries again on its next pass. Once its tries add up to
 * LOCK_HUNGRY_NS it waits as urgent, so large work is not starved. */
#define LARGE_TRY_NS (200u * 1000)

static int lock_large(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  uint64_t now;
  if (s->nloops <= 1 || lock_take(s, 0)) {
    lp->large_t0 = 0;
    return 1;
  }
  now = uv_hrtime();
  if (lp->large_t0 == 0)
    lp->large_t0 = now;
  if (now - lp->large_t0 >= LOCK_HUNGRY_NS) {
    lock_wait(s, 1, 0);
  } else if (!lock_wait(s, 0, now + LARGE_TRY_NS)) {
    return 0;
  }
  lp->large_t0 = 0;
  return 1;
}

/* Between two pieces of large work under the lock: let a hungry waiter
 * (one that waited LOCK_HUNGRY_NS, or an urgent one) go first. RET 1 with
 * the lock again, 0 without it (lock_large). */
static int lock_yield(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  if (s->nloops > 1 && atomic_load(&s->lock_hungry) > 0) {
    srv__unlock(s);
    return lock_large(lp);
  }
  return 1;
}

static void kick_main(srv_t *s) { uv_async_send(&s->loops[0].async); }

void srv__kick_rounds(srv_t *s) {
  s->kick_rounds = 1;
  kick_main(s);
}

/* A quarter of the online cores, 8 at most, at least 1: the clients (the
 * node's agents and trainers) need the rest. On 16 cores, 8 loops served
 * more requests than 4 but with a longer tail: with 64 busy clients the
 * cores were oversubscribed and a loop that lost its core held up every
 * connection it serves (docs/protocol.md#threads). */
int srv_default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 8)
    return 1;
  return n / 4 > 8 ? 8 : (int)(n / 4);
}

/* ---- memory ------------------------------------------------------------------------ */

static size_t mem_used(const srv_t *s) {
  return s->mem.conns + s->mem.jobs + s->mem.in + s->mem.out +
         s->mem.store.used;
}

/* max_memory is shared out so that no kind of use can starve another:
 * - a sixteenth (8 MiB at most) stays free for the request being decoded
 *   (up to --max-frame bytes of msgpack objects and key lists), which
 *   lives only while it runs;
 * - a quarter is kept for connections and jobs, whether they use it or
 *   not: unread replies filling memory never lock new agents out;
 * - the rest holds the stores (half of max_memory at most, so that full
 *   stores leave room for replies), unfinished requests (--max-input-bytes)
 *   and unsent replies. */
static size_t fixed_share(const srv_t *s) { return s->cfg.max_memory / 4; }

static size_t dynamic_limit(const srv_t *s) {
  return s->cfg.max_memory -
         LU_MIN(s->cfg.max_memory / 16, (size_t)8 << 20) - fixed_share(s);
}

/* Room left for stores, input and output. */
static size_t mem_free(const srv_t *s) {
  size_t u = s->mem.in + s->mem.out + s->mem.store.used;
  return u < dynamic_limit(s) ? dynamic_limit(s) - u : 0;
}

/* Stores and unsent replies leave an eighth of the rest to requests being
 * received: a half-read request waiting for memory that full stores or
 * replies nobody reads hold would wait for ever when the only other
 * holders are paused readers (whose clients may wait for that request's
 * answer before they read). */
static size_t in_share(const srv_t *s) {
  return LU_MIN(s->cfg.max_in_bytes, dynamic_limit(s) / 8);
}

/* Room left for replies: mem_free less what input may still take of its
 * share. */
static size_t mem_free_out(const srv_t *s) {
  size_t u = LU_MAX(s->mem.in, in_share(s)) + s->mem.out + s->mem.store.used;
  return u < dynamic_limit(s) ? dynamic_limit(s) - u : 0;
}

/* Freed big buffers kept warm for reuse (lu_big_*): an eighth of
 * max_memory, cfg.big_cache_mb at most (16 MiB; 0: no cache, for tests
 * that measure what the server keeps: LAUNCH_SERVER_BIG_CACHE_MB), and never more than the room left, so
 * that what the server holds, cached blocks included, stays within its
 * budget. One bound for the process (the last server to update it sets
 * it). */
static void big_cache_update(const srv_t *s) {
  lu_big_set_limit(LU_MIN(LU_MIN((size_t)s->cfg.big_cache_mb << 20,
                                 s->cfg.max_memory / 8),
                          mem_free(s)));
}

static void mem_update(srv_t *s) {
  size_t others = LU_MAX(s->mem.in, in_share(s)) + s->mem.out;
  size_t left = others < dynamic_limit(s) ? dynamic_limit(s) - others : 0;
  s->mem.store.max = LU_MIN(s->cfg.max_memory / 2, left);
  big_cache_update(s);
  s->stats.mem_used = mem_used(s);
  s->stats.in_bytes = s->mem.in;
}

static int mem_fixed_room(const srv_t *s, size_t cost) {
  return s->mem.conns + s->mem.jobs + cost <= fixed_share(s);
}

int srv__mem_job_charge(srv_t *s, size_t n) {
  if (!mem_fixed_room(s, n))
    return -1;
  s->mem.jobs += n;
  mem_update(s);
  return 0;
}

void srv__mem_job_release(srv_t *s, size_t n) {
  s->mem.jobs -= n;
  mem_update(s);
}

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
  if (s->cfg.on_event == NULL || limit < 0 || limit >= SRV_LIMIT_COUNT)
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
static void mem_released(srv_t *s) {
  mem_update(s);
  while (!list_empty(&s->memwait)) {
    conn_t *c = LIST_ENTRY(s->memwait.next, conn_t, memwait_link);
    list_remove(&c->memwait_link);
    list_unlink(&c->resume_link);
    list_insert_tail(&c->lp->resume, &c->resume_link);
    wake_loop(c->lp);
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

static srv_addr_t *addr_get(srv_t *s, const struct sockaddr_storage *ss) {
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
static void addr_put(srv_t *s, srv_addr_t *a) {
  srv_addr_t **pp;
  if (a == NULL || a->nconns > 0 || a->njobs > 0)
    return;
  for (pp = &s->addrs[addr_bucket(s, a->a)]; *pp != a; pp = &(*pp)->next)
    ;
  *pp = a->next;
  free(a);
}

/* ---- jobs ------------------------------------------------------------------------ */

static void job_free(srv_t *s, job_t *j);

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
static int evict_ended(srv_t *s) {
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
    job_free(s, old);
    mem_update(s);
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
  while ((s->njobs >= s->cfg.max_jobs || !mem_fixed_room(s, SRV_JOB_COST)) &&
         evict_ended(s))
    ;
  if (s->njobs >= s->cfg.max_jobs) {
    SRV_REFUSED(s, MAX_JOBS);
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
      job_free(s, old);
    }
  }
  if (a && a->njobs >= s->cfg.max_jobs_per_addr &&
      addr_live_jobs(s, a) >= s->cfg.max_jobs_per_addr) {
    SRV_REFUSED(s, MAX_JOBS_PER_ADDR);
    lu_errf(err, errcap, "cannot create job '%.*s': %u jobs created from "
            "%s are in use (connected, or holding data), the server's "
            "per-address limit of %u: end some, or raise it (launch server "
            "--max-jobs-per-addr N)", (int)len, name, addr_live_jobs(s, a),
            c->peer, s->cfg.max_jobs_per_addr);
    srv__limit_hit(s, SRV_LIMIT_MAX_JOBS_PER_ADDR, s->cfg.max_jobs_per_addr,
                   NULL, c->peer, "a new job ('%.*s')", (int)len, name);
    return NULL;
  }
  if (!mem_fixed_room(s, SRV_JOB_COST)) {
    SRV_REFUSED(s, MAX_MEMORY);
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
  mem_update(s);
  /* A job nobody attaches to (a refused HELLO) goes after the grace. */
  gc_schedule(s, job_due(s, j));
  return j;
}

void srv__job_attach(conn_t *c, job_t *j) {
  c->job = j;
  j->nconns++;
}

static void job_detach(conn_t *c) {
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
        job_free(s, j); /* the connection's close releases the memory */
        return;
      }
    }
    j->idle_since = srv__now();
    gc_schedule(s, job_due(s, j));
  }
}

static void job_free(srv_t *s, job_t *j) {
  if (s->rounds_job_free)
    s->rounds_job_free(j);
  store_free(j->store);
  if (j->creator) {
    j->creator->njobs--;
    addr_put(s, j->creator);
  }
  s->mem.jobs -= SRV_JOB_COST;
  s->njobs--;
  s->stats.jobs = s->njobs;
  free(j);
}

static void gc_cb_locked(uv_timer_t *t);
static void gc_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  trace_begin(s, "gc", NULL);
  srv__lock(s);
  gc_cb_locked(t);
  srv__unlock(s);
  trace_end(s);
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
        job_free(s, j);
        freed = 1;
        continue;
      }
      next = LU_MIN(next, due);
    }
    pp = &j->next;
  }
  if (freed)
    mem_released(s);
  if (next != UINT64_MAX)
    uv_timer_start(&s->gc_timer, gc_cb, next - now, 0);
}

static void gc_schedule(srv_t *s, uint64_t due) {
  uint64_t now = srv__now();
  if (s->closing)
    return;
  if (!srv__on_main(s)) {
    if (s->kick_gc_due == 0 || due < s->kick_gc_due)
      s->kick_gc_due = due;
    kick_main(s);
    return;
  }
  if (uv_is_active((uv_handle_t *)&s->gc_timer) &&
      now + uv_timer_get_due_in(&s->gc_timer) <= due)
    return;
  uv_timer_start(&s->gc_timer, gc_cb, due > now ? due - now : 0, 0);
}

/* ---- config --------------------------------------------------------------------- */

static int parse_allow(srv_t *s, const char *list) {
  const char *p = list;
  while (p && *p) {
    char item[128];
    size_t n = strcspn(p, ",");
    char *slash;
    int prefix = -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (n == 0 || n >= sizeof(item) || s->nallow >= 16)
      return RDZV_EINVAL;
    memcpy(item, p, n);
    item[n] = '\0';
    if ((slash = strchr(item, '/')) != NULL) {
      *slash = '\0';
      if (lu_parse_int(slash + 1, 0, 128, &prefix) != 0)
        return RDZV_EINVAL;
    }
    if (inet_pton(AF_INET, item,
                  &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
      ss.ss_family = AF_INET;
      if (prefix < 0)
        prefix = 32;
      if (prefix > 32)
        return RDZV_EINVAL;
    } else if (inet_pton(AF_INET6, item,
                         &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
      ss.ss_family = AF_INET6;
      if (prefix < 0)
        prefix = 128;
    } else {
      return RDZV_EINVAL;
    }
    s->allow[s->nallow].net = ss;
    s->allow[s->nallow].prefix = prefix;
    s->nallow++;
    p += n;
    if (*p == ',')
      p++;
  }
  return 0;
}

static int prefix_match(const uint8_t *a, const uint8_t *b, int bits) {
  int full = bits / 8, rem = bits % 8;
  if (memcmp(a, b, (size_t)full) != 0)
    return 0;
  if (rem == 0)
    return 1;
  return ((a[full] ^ b[full]) & (0xff << (8 - rem))) == 0;
}

/* Is this peer allowed to speak TCPStore, which has neither
 * authentication nor TLS? Only in the allow list while the server has a
 * token or TLS. */
static int ts_allowed(const srv_t *s, const conn_t *c) {
  const struct sockaddr_storage *pa = &c->peer_addr;
  uint8_t v4[4];
  const uint8_t *v6 = NULL;
  int have4 = 0;
  if (s->token == NULL && s->tls == NULL)
    return 1;
  if (pa->ss_family == AF_UNIX)
    return 1; /* file permissions guard a unix socket */
  if (pa->ss_family == AF_INET) {
    memcpy(v4, &((const struct sockaddr_in *)pa)->sin_addr, 4);
    have4 = 1;
  } else if (pa->ss_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)pa)->sin6_addr;
    v6 = a6->s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6)) {
      memcpy(v4, a6->s6_addr + 12, 4);
      have4 = 1;
    }
  }
  for (int i = 0; i < s->nallow; i++) {
    const struct sockaddr_storage *n = &s->allow[i].net;
    if (n->ss_family == AF_INET && have4 &&
        prefix_match(v4,
                     (const uint8_t *)&((const struct sockaddr_in *)n)->sin_addr,
                     s->allow[i].prefix))
      return 1;
    if (n->ss_family == AF_INET6 && v6 &&
        prefix_match(v6, ((const struct sockaddr_in6 *)n)->sin6_addr.s6_addr,
                     s->allow[i].prefix))
      return 1;
  }
  return 0;
}

/* ---- deadlines: a binary heap of pending native ops -------------------------------- */

static void heap_swap(srv_t *s, size_t a, size_t b) {
  pend_t *t = s->heap[a];
  s->heap[a] = s->heap[b];
  s->heap[b] = t;
  s->heap[a]->heap_idx = a;
  s->heap[b]->heap_idx = b;
}

static void heap_up(srv_t *s, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (s->heap[p]->deadline_ms <= s->heap[i]->deadline_ms)
      break;
    heap_swap(s, i, p);
    i = p;
  }
}

static void heap_down(srv_t *s, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->heap_len && s->heap[l]->deadline_ms < s->heap[m]->deadline_ms)
      m = l;
    if (r < s->heap_len && s->heap[r]->deadline_ms < s->heap[m]->deadline_ms)
      m = r;
    if (m == i)
      break;
    heap_swap(s, i, m);
    i = m;
  }
}

static void timer_cb(uv_timer_t *t);
static void idle_cb(uv_idle_t *h) { (void)h; }

static void rearm(srv_t *s) {
  uint64_t now = srv__now();
  if (s->closing)
    return;
  if (!srv__on_main(s)) {
    s->kick_rearm = 1;
    kick_main(s);
    return;
  }
  if (s->heap_len == 0) {
    uv_timer_stop(&s->timer);
    return;
  }
  uv_timer_start(&s->timer, timer_cb,
                 s->heap[0]->deadline_ms > now ? s->heap[0]->deadline_ms - now
                                               : 0,
                 0);
}

int srv__pend_arm(srv_t *s, pend_t *p, int64_t wait_ms) {
  p->heap_idx = SIZE_MAX;
  if (wait_ms < 0) {
    p->deadline_ms = 0;
    return 0;
  }
  if (s->heap_len == s->heap_cap) {
    size_t ncap = s->heap_cap ? s->heap_cap * 2 : 64;
    pend_t **nh = realloc(s->heap, ncap * sizeof(*nh));
    if (nh == NULL)
      return RDZV_ENOMEM;
    s->heap = nh;
    s->heap_cap = ncap;
  }
  p->deadline_ms = srv__now() + (uint64_t)wait_ms;
  p->heap_idx = s->heap_len;
  s->heap[s->heap_len++] = p;
  heap_up(s, p->heap_idx);
  if (p->heap_idx == 0)
    rearm(s);
  return 0;
}

void srv__pend_disarm(srv_t *s, pend_t *p) {
  size_t i = p->heap_idx;
  if (i == SIZE_MAX)
    return;
  p->heap_idx = SIZE_MAX;
  s->heap_len--;
  if (i != s->heap_len) {
    s->heap[i] = s->heap[s->heap_len];
    s->heap[i]->heap_idx = i;
    heap_down(s, i);
    heap_up(s, s->heap[i]->heap_idx);
  }
  if (i == 0)
    rearm(s);
}

static void timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now();
  trace_begin(s, "deadlines", NULL);
  srv__lock(s);
  while (s->heap_len > 0 && s->heap[0]->deadline_ms <= now) {
    pend_t *p = s->heap[0];
    srv__pend_disarm(s, p);
    srv__native_pend_timeout(p);
  }
  rearm(s);
  srv__unlock(s);
  trace_end(s);
}

/* ---- handshake deadlines: connections in accept order -------------------------------- */

static void hs_timer_cb_locked(uv_timer_t *t);
static void hs_timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  trace_begin(s, "handshake deadlines", NULL);
  srv__lock(s);
  hs_timer_cb_locked(t);
  srv__unlock(s);
  trace_end(s);
}

/* Room for more connections: below three quarters of --max-conns, of the
 * peer's --max-conns-per-addr and of the memory for connections. */
static int conns_roomy(const srv_t *s, const srv_addr_t *a) {
  if ((uint64_t)s->stats.conns_open * 4 >= (uint64_t)s->cfg.max_conns * 3)
    return 0;
  if (a && (uint64_t)a->nconns * 4 >= (uint64_t)s->cfg.max_conns_per_addr * 3)
    return 0;
  return mem_fixed_room(s, 4 * SRV_CONN_COST);
}

/* Close the oldest connection that sent nothing by its handshake deadline
 * (of address a when a is not NULL), making room for a new one.
 * RET 1 when one was closed. */
static int evict_silent(srv_t *s, const srv_addr_t *a) {
  list_t *it;
  for (it = s->silent.next; it != &s->silent; it = it->next) {
    conn_t *c = LIST_ENTRY(it, conn_t, silent_link);
    if (a != NULL && c->addr != a)
      continue;
    srv__bad_input(c, "no handshake within %.1f s (--handshake-timeout), "
                      "closed to make room for a new connection (the "
                      "connection limits are near)",
                   s->cfg.handshake_ms / 1000.0);
    srv__conn_close(c);
    return 1;
  }
  return 0;
}

static void hs_timer_cb_locked(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now();
  while (!list_empty(&s->preauth)) {
    conn_t *c = LIST_ENTRY(s->preauth.next, conn_t, preauth_link);
    uint64_t due = c->accepted_ms + s->cfg.handshake_ms;
    if (due > now) {
      uv_timer_start(&s->hs_timer, hs_timer_cb, due - now, 0);
      return;
    }
    if (!c->heard && conns_roomy(s, c->addr)) {
      /* Silent, and there is room: an idle PyTorch 1.13 client, or an
       * attacker that costs nothing yet. Looked at again one timeout
       * later (accepted_ms is now its last look); closed first when
       * room runs short (evict_silent). */
      c->accepted_ms = now;
      list_remove(&c->preauth_link);
      list_insert_tail(&s->preauth, &c->preauth_link);
      if (list_empty(&c->silent_link))
        list_insert_tail(&s->silent, &c->silent_link);
      continue;
    }
    srv__bad_input(c, c->heard ? "no handshake within %.1f s "
                                 "(--handshake-timeout); closing"
                               : "silent for %.1f s (--handshake-timeout) "
                                 "while the connection limits are near; "
                                 "closing",
                   s->cfg.handshake_ms / 1000.0);
    srv__conn_close(c);
  }
}

void srv__conn_authenticated(conn_t *c) {
  list_unlink(&c->preauth_link);
  list_unlink(&c->silent_link);
}

/* ---- output -------------------------------------------------------------------------- */

typedef struct wreq_s {
  uv_write_t req;
  conn_t *c;
  char *base; /* freed after the write */
  size_t len;
} wreq_t;

/* The loop has work for its check handle: on its own thread, an active
 * idle handle keeps it from blocking in poll before the check runs; from
 * another thread, its async handle wakes it. */
static void wake_loop(srv_loop_t *lp) {
  if (lp->srv->closing)
    return;
  if (!lp_here(lp))
    uv_async_send(&lp->async);
  else if (!uv_is_active((uv_handle_t *)&lp->idle))
    uv_idle_start(&lp->idle, idle_cb);
}

static void mark_dirty(conn_t *c) {
  if (c->state == CONN_CLOSING || !list_empty(&c->dirty_link))
    return;
  list_insert_tail(&c->lp->dirty, &c->dirty_link);
  wake_loop(c->lp);
}

static size_t conn_unsent(const conn_t *c) {
  return c->out.len + c->inflight + c->out_deferred;
}

/* Count the connection's unsent bytes beyond its reserve. */
static void out_account(conn_t *c) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  size_t charge = u > SRV_OUT_RESERVE ? u - SRV_OUT_RESERVE : 0;
  size_t old = c->out_charged;
  /* A closing connection gave its charge back when it was torn down. */
  if (charge == old || c->state == CONN_CLOSING)
    return;
  s->mem.out = s->mem.out - old + charge;
  c->out_charged = charge;
  if (charge < old)
    mem_released(s);
  else
    mem_update(s);
}

static void conn_pause(conn_t *c, int memwait) {
  srv_t *s = c->srv;
  if (!c->paused) {
    c->paused = 1;
    s->stats.paused++;
  }
  if (c->reading && lp_here(c->lp)) {
    uv_read_stop(&c->h.stream);
    c->reading = 0;
  } else if (c->reading) {
    mark_dirty(c); /* its loop stops reading */
  }
  if (memwait && list_empty(&c->memwait_link) &&
      list_empty(&c->resume_link))
    list_insert_tail(&s->memwait, &c->memwait_link);
}

static void conn_schedule_resume(conn_t *c) {
  if (c->state == CONN_CLOSING)
    return;
  list_unlink(&c->memwait_link);
  if (list_empty(&c->resume_link))
    list_insert_tail(&c->lp->resume, &c->resume_link);
  wake_loop(c->lp);
}

void srv__defer(conn_t *c) {
  out_account(c);
  conn_pause(c, 0);
  conn_schedule_resume(c);
}

int srv__conn_paused(conn_t *c) {
  if (!c->paused && conn_unsent(c) >= c->srv->cfg.max_out_bytes)
    conn_pause(c, 0);
  if (!c->paused && uv_hrtime() > c->lp->turn_end) {
    /* Its turn is over: go on after the others, in this loop's check. */
    conn_pause(c, 0);
    conn_schedule_resume(c);
  }
  return c->paused;
}

void srv__conn_yield(conn_t *c) {
  if (!c->paused) {
    conn_pause(c, 0);
    conn_schedule_resume(c);
  }
}

int srv__out_room(conn_t *c, size_t n) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  size_t need;
  if (n > s->cfg.max_out_bytes)
    return SRV_ROOM_NEVER;
  if (u + n <= SRV_OUT_RESERVE)
    return SRV_ROOM_OK;
  if (u + n > s->cfg.max_out_bytes) {
    conn_pause(c, 0); /* resumes as its replies drain */
    return SRV_ROOM_LATER;
  }
  need = u + n - SRV_OUT_RESERVE - c->out_charged;
  if (need > mem_free_out(s)) {
    /* Its own replies draining frees memory too. */
    conn_pause(c, 1);
    return SRV_ROOM_LATER;
  }
  return SRV_ROOM_OK;
}

int srv__push_room(conn_t *c, size_t n) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  if (c->broken || c->state == CONN_CLOSING)
    return 0;
  if (u + n <= SRV_OUT_RESERVE)
    return 1;
  if (u + n > s->cfg.max_out_bytes ||
      u + n - SRV_OUT_RESERVE - c->out_charged > mem_free_out(s)) {
    srv__bad_input(c, "does not read its events: %zu bytes unsent and %zu "
                      "more to send, over %s; closing", u, n,
                   u + n > s->cfg.max_out_bytes
                       ? "what one connection may hold (--max-out-bytes)"
                       : "the server's memory (--max-memory)");
    c->broken = 1;
    mark_dirty(c);
    return 0;
  }
  return 1;
}

/* After output was queued: count it, and hand a large amount to the kernel
 * at once so that a reader is never charged for what it reads anyway. */
static void out_queued(conn_t *c) {
  mark_dirty(c);
  if (c->out.len >= OUT_FLUSH_NOW && c->inflight == 0 && lp_here(c->lp))
    flush_conn(c, 0);
  else
    out_account(c);
}

void srv__reply_begin(conn_t *c, uint64_t id, int status, uint32_t nres) {
  proto_enc_begin_msg(&c->out, nres, PROTO_REPLY, id, status);
}

void srv__push_begin(conn_t *c, int ev, uint32_t nargs) {
  proto_enc_begin_msg(&c->out, nargs, PROTO_PUSH, 0, ev);
}

void srv__reply_end(conn_t *c) {
  if (proto_enc_end(&c->out) != 0)
    c->broken = 1;
  out_queued(c);
}

void srv__reply_ok(conn_t *c, uint64_t id) {
  srv__reply_begin(c, id, 0, 0);
  srv__reply_end(c);
}

void srv__reply_err(conn_t *c, uint64_t id, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  srv__reply_begin(c, id, status, 1);
  proto_pack_str(&c->out.pk, msg);
  srv__reply_end(c);
}

void srv__out_raw(conn_t *c, const void *p, size_t n) {
  if (c->state == CONN_CLOSING)
    return;
  if (proto_enc_raw(&c->out, p, n) != 0)
    c->broken = 1;
  out_queued(c);
}

/* A connection's output buffer: from the cache of big blocks, as every
 * buffer a write frees (write_out, the loops' batched writes). */
static void out_init(proto_enc_t *o) {
  proto_enc_init_alloc(o, lu_big_realloc, lu_big_free);
}

/* DONE bytes of c's output were handed to the kernel, or could not be
 * (FAILED): the accounting, and what waited for it (lock held). */
static void conn_wrote(conn_t *c, size_t done, int failed) {
  c->inflight -= done;
  if (c->state == CONN_CLOSING)
    return;
  if (failed) {
    srv__conn_close(c);
    return;
  }
  out_account(c);
  if (c->close_after_flush && conn_unsent(c) == 0) {
    srv__conn_close(c);
    return;
  }
  /* Paused (perhaps by another loop) while this output counted. */
  if (c->paused && conn_unsent(c) <= c->srv->cfg.max_out_bytes / 2)
    conn_schedule_resume(c);
}

/* Without the lock: a completed write's bytes are counted by the loop's
 * pass (loop_written), which holds it anyway. Taking it here made the
 * loop's poll wait for another loop's piece of large work once per
 * completed write, and a small request read in that poll with it. */
static void write_cb(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  conn_t *c = w->c;
  c->written += w->len;
  if (status < 0)
    c->write_failed = 1;
  if (list_empty(&c->written_link))
    list_insert_tail(&c->lp->writtenq, &c->written_link);
  lu_big_free(w->base);
  free(w);
}

static void loop_written(srv_loop_t *lp) {
  while (!list_empty(&lp->writtenq)) {
    conn_t *c = LIST_ENTRY(lp->writtenq.next, conn_t, written_link);
    size_t done = c->written;
    list_remove(&c->written_link);
    c->written = 0;
    conn_wrote(c, done, c->write_failed);
  }
}

/* Write base[off..len) (base is freed once written). RET 0 or -1. */
static int write_out(conn_t *c, char *base, size_t off, size_t len) {
  wreq_t *w;
  uv_buf_t b;
  if (c->inflight == 0) {
    int r;
    b = uv_buf_init(base + off, (unsigned)(len - off));
    r = uv_try_write(&c->h.stream, &b, 1);
    if (r > 0)
      off += (size_t)r;
    else if (r < 0 && r != UV_EAGAIN) {
      lu_big_free(base);
      return -1;
    }
  }
  if (off == len) {
    lu_big_free(base);
    return 0;
  }
  if ((w = malloc(sizeof(*w))) == NULL) {
    lu_big_free(base);
    return -1;
  }
  w->c = c;
  w->base = base;
  w->len = len - off;
  b = uv_buf_init(base + off, (unsigned)(len - off));
  if (uv_write(&w->req, &c->h.stream, &b, 1, write_cb) != 0) {
    lu_big_free(base);
    free(w);
    return -1;
  }
  c->inflight += w->len;
  return 0;
}

/* Hand what is queued to the kernel (or a write request). may_close: 0
 * inside handlers and store callbacks, where a failure only marks the
 * connection for the next flush. RET 0, or -1 when it is closed/broken. */
static int flush_conn(conn_t *c, int may_close) {
  proto_enc_t *o = &c->out;
  int rc = 0;
  if (c->state == CONN_CLOSING)
    return -1;
  if (c->broken)
    goto fail;
  if (c->tls) {
    char *ct;
    size_t n;
    if (o->len > 0 && tls_write(c->tls, o->data, o->len) != 0)
      goto fail;
    proto_enc_reset(o);
    if (tls_take_alloc(c->tls, &ct, &n, lu_big_alloc, lu_big_free) != 0 ||
        (n && write_out(c, ct, 0, n)))
      goto fail;
  } else if (o->len > 0) {
    /* The write owns the buffer; the next replies start a fresh one. */
    char *base = o->data;
    size_t len = o->len;
    o->data = NULL;
    o->len = o->cap = 0;
    if (write_out(c, base, 0, len) != 0)
      goto fail;
  }
  if (o->cap > SRV_OUT_RESERVE) {
    proto_enc_destroy(o);
    out_init(o);
  }
  out_account(c);
  if (c->close_after_flush && conn_unsent(c) == 0 && may_close)
    srv__conn_close(c);
  return rc;
fail:
  if (may_close) {
    if (c->broken)
      srv__bad_input(c, "could not queue a reply; closing");
    srv__conn_close(c);
  } else {
    c->broken = 1;
    mark_dirty(c);
  }
  return -1;
}

static void conn_resume(conn_t *c);
static void conn_free(conn_t *c);
static void on_conn_closed(uv_handle_t *h);
static void loop_shutdown(srv_loop_t *lp);

/* Output taken from a connection to be written outside the lock. */
typedef struct wout_s {
  conn_t *c;
  char *base;
  size_t len, queued;
  int failed;
} wout_t;

/* Connections accepted on loop 0 for this loop: make their handles. */
static void adopt_incoming(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  while (!list_empty(&lp->incoming)) {
    conn_t *c = LIST_ENTRY(lp->incoming.next, conn_t, io_link);
    list_remove(&c->io_link);
    if (c->state == CONN_CLOSING) {
      /* Closed on its way here (srv__conn_close counted it). */
      close(c->fd);
      s->closing_conns--;
      conn_free(c);
      continue;
    }
    uv_tcp_init(lp->loop, &c->h.tcp);
    c->h.handle.data = c;
    c->handle_ready = 1;
    if (uv_tcp_open(&c->h.tcp, c->fd) != 0) {
      close(c->fd);
      srv__conn_close(c);
      continue;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    conn_start_read(c);
  }
}

/* Has c a large request to decode ahead (only its loop's thread touches a
 * connection's input)? */
static int conn_prepare_due(conn_t *c) {
  return c->dialect == &srv__dialect_native && c->tls == NULL &&
         c->in_len >= PROTO_HDR && srv__native_prepare_due(c);
}

/* Read a few KiB at most, nothing to decode ahead: run first. */
static int conn_small(conn_t *c) {
  return c->in_len <= SMALL_IN && !conn_prepare_due(c);
}

/* When due, decode a slice of it as far as it came, before the loop
 * takes the lock (srv__native_prepare); RET 1 when more is due. */
static int conn_prepare(srv_t *s, conn_t *c) {
  if (!conn_prepare_due(c))
    return 0;
  trace_begin(s, "prepare", c);
  srv__native_prepare(c);
  trace_end(s);
  return conn_prepare_due(c);
}

/* The native dialect waits for the rest of a request's decoding ahead:
 * the loop's next passes decode it, before their lock (the connection
 * was yielded: its work resumes after that). */
void srv__prepare_later(conn_t *c) {
  if (list_empty(&c->prep_link))
    list_insert_tail(&c->lp->prepq, &c->prep_link);
}

/* Before the pass takes the lock: a slice of decoding ahead for each
 * large request read, and for each that waits for more (only this thread
 * touches their input). */
static void loop_prepare(srv_t *s, srv_loop_t *lp, list_t *big) {
  for (list_t *it = big->next; it != big; it = it->next)
    conn_prepare(s, LIST_ENTRY(it, conn_t, read_link));
  for (list_t *it = lp->prepq.next, *next; it != &lp->prepq; it = next) {
    next = it->next;
    if (!conn_prepare(s, LIST_ENTRY(it, conn_t, prep_link)))
      list_remove(it);
  }
}

/* Hand the replies of the loop's dirty connections to the sockets. With
 * several loops they are written without the lock (held on entry and on
 * return), counted as in flight meanwhile. */
static void loop_flush(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  wout_t *wo = lp->wo;
  size_t nwo = 0, capwo = lp->capwo;
  trace_begin(s, "flush", NULL);
  while (!list_empty(&lp->dirty)) {
    conn_t *c = LIST_ENTRY(lp->dirty.next, conn_t, dirty_link);
    proto_enc_t *o = &c->out;
    list_remove(&c->dirty_link);
    if (c->paused && c->reading) {
      uv_read_stop(&c->h.stream);
      c->reading = 0;
    }
    if (s->nloops == 1 || c->tls || c->broken || c->close_after_flush ||
        o->len == 0) {
      flush_conn(c, 1);
      continue;
    }
    if (nwo == capwo) {
      size_t ncap = capwo ? capwo * 2 : 64;
      wout_t *n = realloc(wo, ncap * sizeof(*n));
      if (n == NULL) {
        flush_conn(c, 1);
        continue;
      }
      lp->wo = wo = n;
      lp->capwo = capwo = ncap;
    }
    /* Counted as in flight until written: the accounting, and the
     * connection's order of replies, hold while the lock is dropped. */
    wo[nwo].c = c;
    wo[nwo].base = o->data;
    wo[nwo].len = o->len;
    wo[nwo].queued = 0;
    wo[nwo].failed = 0;
    nwo++;
    c->inflight += o->len;
    o->data = NULL;
    o->len = o->cap = 0;
  }
  if (nwo == 0) {
    trace_end(s);
    return;
  }
  srv__unlock(s);
  /* Only this thread touches these handles, and only its loop closes
   * them: the connections live until the lock is taken again. */
  for (size_t i = 0; i < nwo; i++) {
    wout_t *w = &wo[i];
    uv_buf_t b = uv_buf_init(w->base, (unsigned)w->len);
    int r = uv_try_write(&w->c->h.stream, &b, 1);
    size_t off = r > 0 ? (size_t)r : 0;
    if (r < 0 && r != UV_EAGAIN) {
      w->failed = 1;
    } else if (off < w->len) {
      wreq_t *q = malloc(sizeof(*q));
      b = uv_buf_init(w->base + off, (unsigned)(w->len - off));
      if (q == NULL) {
        w->failed = 1;
      } else {
        q->c = w->c;
        q->base = w->base;
        q->len = w->len - off;
        if (uv_write(&q->req, &w->c->h.stream, &b, 1, write_cb) != 0) {
          free(q);
          w->failed = 1;
        } else {
          w->queued = q->len; /* write_cb frees base */
        }
      }
    }
    if (w->queued == 0)
      lu_big_free(w->base);
  }
  /* A short hold, that this loop's next poll (and the small requests it
   * reads) waits on. */
  lock_urgent(s);
  for (size_t i = 0; i < nwo; i++)
    conn_wrote(wo[i].c, wo[i].len - wo[i].queued, wo[i].failed);
  trace_end(s);
}

/* A connection's piece of a loop's pass: its input, or the work resumed;
 * then, after a large one, a hungry or urgent loop may take the lock (the
 * small ones of a pass run under one hold: they are short, and many loops
 * full of small requests would otherwise hand the lock to each other
 * after every one). A resumed connection whose whole request waits for
 * its decoding ahead (srv__prepare_later) waits for the next pass, which
 * decodes a slice of it before the lock. Any other resumes now: one whose
 * request has not all come must read on (it did not while paused).
 * RET 1 with the lock held, 0 when the loop gave it up (lock_yield). */
enum { PASS_SMALL, PASS_LARGE, PASS_RESUMED };
static int pass_run(srv_loop_t *lp, conn_t *c, int kind) {
  srv_t *s = lp->srv;
  if (kind == PASS_RESUMED && !list_empty(&c->prep_link)) {
    conn_schedule_resume(c); /* its whole request is in: decoded ahead */
    return 1;
  }
  trace_begin(s, kind == PASS_RESUMED ? "resume" : "read", c);
  if (kind == PASS_RESUMED)
    conn_resume(c);
  else
    conn_input(c);
  trace_end(s);
  return kind == PASS_SMALL || lock_yield(lp);
}

/* A pass that gave up the lock: the loop's next iteration polls without
 * blocking and passes again, also while the server closes (wake_loop
 * does nothing then, and this loop's shutdown waits for a pass). */
static void loop_again(srv_loop_t *lp) {
  if (!uv_is_active((uv_handle_t *)&lp->idle))
    uv_idle_start(&lp->idle, idle_cb);
}

/* Run the loop's lists: its new and closed connections, what loop 0 was
 * asked for, deferred work, then output. With several loops, output is
 * written to the sockets without the lock held. */
static void check_cb(uv_check_t *h) {
  srv_loop_t *lp = h->data;
  srv_t *s = lp->srv;
  list_t big;
  uint64_t t0;
  int held = 1;
  /* The requests read in this pass, in the order they came: the small
   * ones first (a few KiB read, nothing to decode ahead), and their
   * replies written before the large ones run, so that a client's small
   * request does not wait behind pieces of an attacker's large ones on
   * its loop (issue #11). Only this thread touches the read queue and the
   * connections' input, so they are sorted before the lock, and a pass
   * with a small request to run waits for it as urgent. */
  list_init(&big);
  for (list_t *it = lp->readq.next, *next; it != &lp->readq; it = next) {
    next = it->next;
    if (!conn_small(LIST_ENTRY(it, conn_t, read_link))) {
      list_remove(it);
      list_insert_tail(&big, it);
    }
  }
  loop_prepare(s, lp, &big);
  if (!list_empty(&lp->readq)) {
    lock_urgent(s);
  } else if (!lock_large(lp)) {
    /* Back to the poll: a small request that comes goes first. */
    list_move_front(&lp->readq, &big);
    loop_again(lp);
    return;
  }
  if (lp->stop) {
    list_move_front(&lp->readq, &big); /* big is this frame's */
    loop_shutdown(lp);
    srv__unlock(s);
    return;
  }
  if (lp->idx == 0) {
    if (s->kick_rearm) {
      s->kick_rearm = 0;
      rearm(s);
    }
    if (s->kick_gc_due) {
      uint64_t due = s->kick_gc_due;
      s->kick_gc_due = 0;
      gc_schedule(s, due);
    }
    if (s->kick_rounds && s->rounds_schedule) {
      s->kick_rounds = 0;
      s->rounds_schedule(s);
    }
  }
  loop_written(lp);
  adopt_incoming(lp);
  while (!list_empty(&lp->closeq)) {
    conn_t *c = LIST_ENTRY(lp->closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, on_conn_closed);
  }
  while (!list_empty(&lp->readq)) {
    conn_t *c = LIST_ENTRY(lp->readq.next, conn_t, read_link);
    list_remove(&c->read_link);
    pass_run(lp, c, PASS_SMALL);
  }
  if (!list_empty(&lp->dirty) &&
      (!list_empty(&big) || !list_empty(&lp->resume) ||
       !list_empty(&lp->run)))
    loop_flush(lp);
  /* Then the large ones, and the connections resumed during the last
   * pass, for PASS_NS of work or one piece: what is left runs on the
   * next pass, after the poll has read what came meanwhile. */
  t0 = uv_hrtime();
  while (held && !list_empty(&big) && uv_hrtime() - t0 < PASS_NS(s)) {
    conn_t *c = LIST_ENTRY(big.next, conn_t, read_link);
    list_remove(&c->read_link);
    held = pass_run(lp, c, PASS_LARGE);
  }
  list_move_front(&lp->readq, &big);
  /* The resumed connections left from the last pass, then those resumed
   * since (lp->run keeps its order across passes, and only changes under
   * the lock: another loop may close one of them). */
  if (held) {
    list_move_front(&lp->resume, &lp->run);
    list_move(&lp->run, &lp->resume);
  }
  for (int n = 0; held && !list_empty(&lp->run) &&
                  (n == 0 || uv_hrtime() - t0 < PASS_NS(s));
       n++) {
    conn_t *c = LIST_ENTRY(lp->run.next, conn_t, resume_link);
    list_remove(&c->resume_link);
    held = pass_run(lp, c, PASS_RESUMED);
  }
  if (!held) {
    /* The lock went to another loop (lock_yield): the rest, output
     * included, on the next pass, after the poll. */
    loop_again(lp);
    return;
  }
  loop_flush(lp);
  if (!list_empty(&lp->readq) || !list_empty(&lp->resume) ||
      !list_empty(&lp->run) || !list_empty(&lp->dirty) ||
      !list_empty(&lp->prepq))
    wake_loop(lp); /* no blocking poll before the next pass */
  else
    uv_idle_stop(&lp->idle);
  srv__unlock(s);
}

/* ---- input ------------------------------------------------------------------------- */

/* Room left in the input buffer, grown (by doubling) when a request needs
 * more: up to a HELLO-sized frame before authentication, a whole request
 * after. Growth past the reserve counts against --max-input-bytes (when
 * that cannot take it, in_full is set: the connection is closed) and
 * --max-memory (when that cannot, in_memwait: it waits for memory). */
static size_t in_room(conn_t *c) {
  srv_t *s = c->srv;
  size_t limit = c->state == CONN_READY
                     ? (size_t)s->cfg.max_frame + 64
                     : SRV_HELLO_MAX_FRAME + PROTO_HDR + PROTO_MAGIC_LEN;
  if ((c->in_cap - c->in_len < IN_CHUNK || c->in_need > c->in_cap) &&
      c->in_cap < limit) {
    size_t ncap = c->in_cap ? c->in_cap * 2 : IN_CHUNK;
    /* A large request of known size gets a buffer of its size at once:
     * no doublings, nothing unused (which srv__in_take needs). A bound
     * that grows a little at a time (a TCPStore list) doubles. */
    if (c->in_need > ncap)
      ncap = c->in_need;
    size_t charge, add;
    uint8_t *nb;
    if (ncap > limit)
      ncap = limit;
    charge = ncap > SRV_IN_RESERVE ? ncap - SRV_IN_RESERVE : 0;
    add = charge - c->in_charged;
    /* All connections together may buffer max_in_bytes of unfinished
     * requests beyond their reserves; past that, a connection cannot grow
     * (and is closed), so that stalled half-sent requests cannot exhaust
     * memory. */
    c->in_memwait = 0;
    if (add > 0 && s->mem.in + add > s->cfg.max_in_bytes) {
      c->in_full = 1;
    } else if (add > 0 && add > mem_free(s)) {
      c->in_memwait = 1;
    } else if ((nb = lu_big_realloc(c->in, ncap)) != NULL) {
      c->in = nb;
      c->in_cap = ncap;
      s->mem.in += add;
      c->in_charged = charge;
      mem_update(s);
    }
  }
  return c->in_cap - c->in_len;
}

static void in_release(conn_t *c) {
  srv_t *s = c->srv;
  s->mem.in -= c->in_charged;
  c->in_charged = 0;
  lu_big_free(c->in);
  c->in = NULL;
  c->in_cap = c->in_len = 0;
}

#define TAKE_MIN (256u << 10)  /* values this large are taken, not copied */
#define TAKE_TAIL (64u << 10)  /* bytes after the request copied at most */

uint8_t *srv__in_take(conn_t *c, const uint8_t *val, size_t n,
                      const uint8_t *end, size_t *cost) {
  srv_t *s = c->srv;
  uint8_t *buf = c->in, *nb = NULL;
  size_t tail, ncap = 0, charge = 0;
  if (n < TAKE_MIN || buf == NULL || val < buf || end < val + n ||
      end > buf + c->in_len)
    return NULL;
  /* What the buffer holds besides the value counts with it: a sixteenth
   * more at most (buffers sized by in_need hold the request only). */
  if (c->in_cap - n > n / 16)
    return NULL;
  tail = (size_t)(buf + c->in_len - end);
  if (tail > TAKE_TAIL)
    return NULL;
  if (tail > 0) {
    ncap = LU_MAX(tail, (size_t)IN_CHUNK);
    charge = ncap > SRV_IN_RESERVE ? ncap - SRV_IN_RESERVE : 0;
    if ((nb = lu_big_alloc(ncap)) == NULL)
      return NULL;
    memcpy(nb, end, tail);
  }
  srv__pre_shift(c, (size_t)(end - buf));
  /* Counted as input until the request ran (the store's share stays what
   * it was while it decides); conn_process updates the shares after. */
  s->mem.in = s->mem.in - c->in_charged + charge;
  *cost = c->in_cap;
  c->in = nb;
  c->in_cap = ncap;
  c->in_len = tail;
  c->in_charged = charge;
  c->in_need = 0;
  c->in_moved = 1;
  return buf;
}

void srv__in_spent(conn_t *c, uint8_t *buf) {
  lu_big_free(c->in_spent); /* one a request; none is left over */
  c->in_spent = buf;
}

int srv__store_set(conn_t *c, const void *key, size_t klen, const void *val,
                   size_t vlen) {
  store_t *st = c->job->store;
  size_t cost, old = 0, grow;
  uint8_t *buf = NULL;
  int rc;
  /* Not when the store has no room for it (a full store refuses SET after
   * SET): the connection keeps its buffer, warm, for the next request. A
   * value that replaces another needs room for the difference only (a
   * near-full store's 1 MiB SET over 1 MiB was copied, on fresh pages). */
  if (c->req_end != NULL && vlen >= TAKE_MIN) {
    if (store_get(st, key, klen, &old) == NULL)
      old = 0;
    grow = vlen > old ? vlen - old : 0;
    if (store_charge(st, grow) == 0) {
      store_uncharge(st, grow);
      buf = srv__in_take(c, val, vlen, c->req_end, &cost);
    }
  }
  if (buf == NULL)
    return store_set(st, key, klen, val, vlen);
  /* The key lies in buf too: still there while the store copies it. */
  rc = store_set_owned(st, key, klen, buf, cost, val, vlen);
  if (rc == 0)
    return 0;
  /* The buffer's few bytes past the value may be what did not fit. */
  if (rc == RDZV_ETOOBIG)
    rc = store_set(st, key, klen, val, vlen);
  lu_big_free(buf); /* the request is over either way */
  return rc;
}

/* The input buffer cannot take the next request. */
static void in_exhausted(conn_t *c) {
  srv_t *s = c->srv;
  if (c->in_full) {
    srv__bad_input(c, "server input budget (%zu bytes of unfinished "
                      "requests, --max-input-bytes) exhausted; closing",
                   s->cfg.max_in_bytes);
    srv__limit_hit(s, SRV_LIMIT_MAX_INPUT_BYTES, s->cfg.max_in_bytes,
                   c->job ? c->job->name : NULL, c->peer, "a request: the "
                   "connection was closed");
  } else if (c->state == CONN_READY) {
    srv__bad_input(c, "request larger than the %u-byte limit",
                   s->cfg.max_frame);
    srv__limit_hit(s, SRV_LIMIT_MAX_FRAME, s->cfg.max_frame,
                   c->job ? c->job->name : NULL, c->peer, "a request of more "
                   "than %u bytes: the connection was closed",
                   s->cfg.max_frame);
  } else {
    srv__bad_input(c, "%zu bytes before authentication, over the %u-byte "
                      "limit of a HELLO; closing",
                   c->in_len, SRV_HELLO_MAX_FRAME);
  }
  srv__conn_close(c);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn_t *c = h->data;
  (void)hint;
  if (c->tls) {
    *buf = uv_buf_init((char *)c->lp->tls_rbuf, TLS_RBUF);
    return;
  }
  if (c->in_cap - c->in_len >= IN_CHUNK) {
    /* Room without growing: only this loop's thread writes these. */
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
    return;
  }
  if (!list_empty(&c->read_link)) {
    /* What was read in this pass waits for the check: read into what is
     * left; when nothing is, read_cb (UV_ENOBUFS) leaves it to the check
     * too, and the next poll reads on. Not run here: libuv reads into the
     * buffer and calls read_cb after this returns, even when this stopped
     * reading. */
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
    return;
  }
  trace_begin(c->srv, "grow input", c);
  lock_urgent(c->srv);
  if (in_room(c) == 0)
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
  else
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
  srv__unlock(c->srv);
  trace_end(c->srv);
}

/* Hand the peer the alert that says why its handshake failed (best
 * effort: the connection closes right after). */
static void tls_last_words(conn_t *c) {
  char *ct;
  size_t n;
  if (tls_take_alloc(c->tls, &ct, &n, lu_big_alloc, lu_big_free) == 0 &&
      n > 0) {
    uv_buf_t b = uv_buf_init(ct, (unsigned)n);
    uv_try_write(&c->h.stream, &b, 1);
  }
  lu_big_free(ct);
}

/* Decrypt what TLS holds into the input buffer; runs after the buffered
 * requests ran, so a buffer with no room holds part of a request too large
 * for it. RET 0, or -1 when the connection was closed. */
static int tls_pump(conn_t *c) {
  int got = 0;
  for (;;) {
    size_t room = in_room(c);
    ssize_t r;
    if (room == 0) {
      if (got)
        break;
      if (c->in_memwait) {
        conn_pause(c, 1);
        return 0;
      }
      in_exhausted(c);
      return -1;
    }
    r = tls_read(c->tls, c->in + c->in_len, room);
    if (tls_out_pending(c->tls) > 0)
      mark_dirty(c); /* handshake messages */
    if (c->tls_state == 1 && tls_established(c->tls)) {
      c->tls_state = 2;
      c->srv->tls_handshaking--;
      if (c->addr)
        c->addr->ntls_hs--;
    }
    if (r > 0) {
      c->in_len += (size_t)r;
      got = 1;
      continue;
    }
    if (r == 0)
      break;
    if (r != RDZV_ECLOSED)
      srv__bad_input(c, "%s", tls_error(c->tls));
    tls_last_words(c);
    srv__conn_close(c);
    return -1;
  }
  if (tls_in_pending(c->tls) > TLS_IN_MAX && !got) {
    srv__bad_input(c, "TLS records not consumed; closing");
    srv__conn_close(c);
    return -1;
  }
  return 0;
}

/* Run the buffered requests, then, over TLS, decrypt more and run those,
 * until nothing more comes or the connection is paused. */
static void conn_input(conn_t *c) {
  for (;;) {
    size_t before;
    conn_process(c);
    srv__pre_done(c);
    if (c->state == CONN_CLOSING || c->paused || c->close_after_flush ||
        c->tls == NULL)
      return;
    before = c->in_len;
    if (tls_pump(c) != 0 || c->in_len == before)
      return;
  }
}

/* Run the requests that read_cb left for the loop's check (the lock is
 * held): before anything else happens to the connection's input. */
static void conn_run_read(conn_t *c) {
  if (list_empty(&c->read_link))
    return;
  list_remove(&c->read_link);
  conn_input(c);
}

static void read_cb_locked(uv_stream_t *st, ssize_t nread,
                           const uv_buf_t *buf);
static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = st->data;
  srv_t *s = c->srv;
  if (nread > 0 && c->tls == NULL && c->dialect != NULL) {
    /* The common case, without the lock: the bytes join the buffer (only
     * this thread touches it) and the loop's check runs the requests of
     * every connection that read in this pass under one lock. */
    c->in_len += (size_t)nread;
    if (list_empty(&c->read_link))
      list_insert_tail(&c->lp->readq, &c->read_link);
    return;
  }
  if (nread == 0)
    return; /* EAGAIN */
  /* A full buffer, with requests read in this pass: the loop's check
   * runs them (decoded ahead when large) in this iteration, and the poll
   * reports the socket readable again (libuv's is level-triggered). Not
   * here: waiting for the lock in the poll phase would hold up the small
   * requests of this loop's other clients behind the other loops' large
   * work (issue #11). */
  if (nread == UV_ENOBUFS && !list_empty(&c->read_link))
    return;
  trace_begin(s, "read", c);
  /* What came before an error or EOF, a TLS record, a first frame: run
   * now; urgent when small, as a pass with small requests is. */
  if (conn_small(c))
    lock_urgent(s);
  else
    srv__lock(s);
  read_cb_locked(st, nread, buf);
  srv__unlock(s);
  trace_end(s);
}

static void read_cb_locked(uv_stream_t *st, ssize_t nread,
                           const uv_buf_t *buf) {
  conn_t *c = st->data;
  int ran = !list_empty(&c->read_link);
  conn_run_read(c); /* what came before an error, EOF or ENOBUFS */
  if (c->state == CONN_CLOSING)
    return;
  if (nread == UV_ENOBUFS) {
    /* The requests just run may have made room: the poll reports the
     * socket readable again (libuv's is level-triggered). */
    if (ran && in_room(c) > 0)
      return;
    if (!c->in_memwait) {
      in_exhausted(c);
      return;
    }
    /* The request goes on once memory was freed. With several loops the
     * lock was dropped since alloc_cb: memory freed in between woke no
     * one, so look again. */
    conn_pause(c, 1);
    if (in_room(c) > 0 || !c->in_memwait)
      conn_schedule_resume(c);
    return;
  }
  if (nread < 0) {
    srv__conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  c->heard = 1;
  if (c->tls) {
    if (tls_feed(c->tls, buf->base, (size_t)nread) != 0) {
      srv__conn_close(c);
      return;
    }
  } else {
    c->in_len += (size_t)nread;
    if (c->dialect == NULL && c->srv->tls &&
        c->peer_addr.ss_family != AF_UNIX && c->in[0] == 0x16) {
      /* A TLS ClientHello: what follows is decrypted into c->in. OpenSSL's
       * state is charged, and handshakes in progress are capped. */
      srv_t *s = c->srv;
      if (s->tls_handshaking >= SRV_TLS_HANDSHAKES ||
          (c->addr && c->addr->ntls_hs >= SRV_TLS_HANDSHAKES_PER_ADDR)) {
        SRV_REFUSED(s, TLS_HANDSHAKES);
        srv__bad_input(c, "%u TLS handshakes in progress (%u from this "
                          "address), the server's limit is %u (%u per "
                          "address): closing (retry)", s->tls_handshaking,
                       c->addr ? c->addr->ntls_hs : 0, SRV_TLS_HANDSHAKES,
                       SRV_TLS_HANDSHAKES_PER_ADDR);
        srv__conn_close(c);
        return;
      }
      if (!mem_fixed_room(s, SRV_TLS_COST)) {
        SRV_REFUSED(s, MAX_MEMORY);
        srv__bad_input(c, "connections and jobs hold their quarter of "
                          "--max-memory %zu (a TLS connection costs %u KiB "
                          "more): closing", s->cfg.max_memory,
                       (SRV_CONN_COST + SRV_TLS_COST) >> 10);
        srv__conn_close(c);
        return;
      }
      if (tls_new(s->tls, NULL, &c->tls) != 0) {
        srv__conn_close(c);
        return;
      }
      c->tls_state = 1;
      s->tls_handshaking++;
      if (c->addr)
        c->addr->ntls_hs++;
      s->mem.conns += SRV_TLS_COST;
      mem_update(s);
      if (tls_feed(c->tls, c->in, c->in_len) != 0) {
        srv__conn_close(c);
        return;
      }
      c->in_len = 0;
    }
  }
  conn_input(c);
}

static void conn_start_read(conn_t *c) {
  if (!c->reading && !c->paused && c->state != CONN_CLOSING &&
      uv_read_start(&c->h.stream, alloc_cb, read_cb) == 0)
    c->reading = 1;
}

void srv__bad_input(conn_t *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  srv_t *s = c->srv;
  uint64_t now = srv__now();
  s->stats.bad_input++;
  if (c->bad_logged)
    return;
  c->bad_logged = 1;
  /* A port scan must not flood the log: at most 20 lines a second, then a
   * count of what was left out. */
  if (now - s->bad_window_ms >= 1000) {
    if (s->bad_suppressed > 0)
      LU_WARN(&s->log, "%llu more connections with bad input in the last "
                       "second were not logged",
              (unsigned long long)s->bad_suppressed);
    s->bad_window_ms = now;
    s->bad_in_window = 0;
    s->bad_suppressed = 0;
  }
  if (++s->bad_in_window > 20) {
    s->bad_suppressed++;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_WARN(&c->srv->log, "connection %llu from %s: %s",
          (unsigned long long)c->id, c->peer, msg);
}

/* Decide the protocol from the first bytes (of the plaintext, inside TLS).
 * RET bytes consumed, 0 when more are needed, -1 to close. */
static ssize_t sniff(conn_t *c) {
  const uint8_t *b = c->in;
  size_t n = c->in_len;
  srv_t *s = c->srv;
  static const uint8_t ts_magic[4] = {0xCE, 0xF7, 0x85, 0x3C};
  int plain_tcp = s->tls && !c->tls && c->peer_addr.ss_family != AF_UNIX;
  char err[256];
  job_t *j;

  if (b[0] == 'R') {
    if (n < PROTO_MAGIC_LEN)
      return memcmp(b, PROTO_MAGIC, n) == 0 ? 0 : -1;
    if (memcmp(b, PROTO_MAGIC, PROTO_MAGIC_LEN) != 0) {
      srv__bad_input(c, "unknown protocol (first bytes are not \"RDZV\" nor "
                        "a TCPStore request)");
      return -1;
    }
    if (plain_tcp) {
      srv__bad_input(c, "a native client without TLS, and this server "
                        "requires TLS: give the client --tls-ca (or "
                        "LAUNCH_RDZV_TLS_CA)");
      return -1;
    }
    c->dialect = &srv__dialect_native;
    c->state = CONN_HELLO;
    srv__native_hello_challenge(c);
    return PROTO_MAGIC_LEN;
  }
  if (c->tls) {
    srv__bad_input(c, "inside TLS only the native protocol is served");
    return -1;
  }
  if (b[0] > 18) {
    srv__bad_input(c, "unknown protocol (first byte 0x%02x): neither a "
                      "launch nor a TCPStore client; closing", b[0]);
    return -1;
  }
  if (b[0] == 0 && n < 5) {
    /* VALIDATE (2.x) and SET (1.13) share byte 0: the magic decides. A
     * 1.13 SET here would carry a key length of over 1 GB, so the two
     * cannot be confused. */
    return 0;
  }
  if (!ts_allowed(s, c)) {
    srv__bad_input(c, "TCPStore client refused: this server requires %s "
                      "and TCPStore has neither (allow trusted addresses "
                      "with --tcpstore-allow)",
                   s->tls ? "TLS" : "a token");
    return -1;
  }
  if (b[0] == 0 && memcmp(b + 1, ts_magic, 4) == 0) {
    c->dialect = &srv__dialect_ts_v2;
  } else if (b[0] > 8) {
    srv__bad_input(c, "TCPStore request without VALIDATE (opcode %u): a 2.x "
                      "client must validate first, and 1.13 has no such op",
                   b[0]);
    return -1;
  } else {
    c->dialect = &srv__dialect_ts_v1;
  }
  if ((j = srv__job(s, c, s->tcpstore_job, strlen(s->tcpstore_job), err,
                    sizeof(err))) == NULL) {
    srv__bad_input(c, "TCPStore client refused: %s", err);
    return -1;
  }
  srv__job_attach(c, j);
  srv__ts_attach(c);
  lu_strlcpy(c->role, "tcpstore", sizeof(c->role));
  c->state = CONN_READY;
  srv__conn_authenticated(c);
  if (c->dialect == &srv__dialect_ts_v2)
    SRV_COUNT_TS(s, TS_VALIDATE); /* consumed here, not by ts_input */
  return c->dialect == &srv__dialect_ts_v2 ? 5 : 0;
}

static void conn_process(conn_t *c) {
  size_t off = 0;
  srv_t *s = c->srv;
  size_t store0 = s->mem.store.used;
  int moved = 0;
  c->lp->turn_end = uv_hrtime() + TURN_NS(s);
  c->in_need = 0;
  while (off < c->in_len && c->state != CONN_CLOSING &&
         !c->close_after_flush && !c->paused) {
    ssize_t k;
    if (c->dialect == NULL) {
      /* sniff() reads c->in from its start; off is 0 in this state. */
      k = sniff(c);
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (k == 0 && c->dialect == NULL)
        break;
    } else {
      c->in_need = 0;
      k = c->dialect->input(c, c->in + off, c->in_len - off);
      lu_big_free(c->in_spent);
      c->in_spent = NULL;
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (c->in_moved) {
        /* The buffer went with a value: go on with what followed it. */
        c->in_moved = 0;
        moved = 1;
        off = 0;
        continue;
      }
      if (k == 0)
        break;
    }
    off += (size_t)k;
  }
  if (c->state == CONN_CLOSING)
    return;
  if (off > 0) {
    srv__pre_shift(c, off);
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  if (c->in_len == 0 && c->in_cap > SRV_IN_RESERVE) {
    in_release(c);
    mem_released(s);
  }
  if (moved || s->mem.store.used < store0)
    mem_released(s);
}

/* A paused connection goes on: replies that waited for room first, then
 * the requests it had sent, then reading. */
static void conn_resume(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING)
    return;
  if (c->paused) {
    c->paused = 0;
    s->stats.paused--;
  }
  if (c->dialect && c->dialect->resume)
    c->dialect->resume(c);
  if (!c->paused && c->state != CONN_CLOSING)
    conn_input(c);
  if (!c->paused && c->state != CONN_CLOSING)
    conn_start_read(c);
}

/* ---- connections -------------------------------------------------------------------- */

static void maybe_finish_close(srv_t *s);

static void conn_free(conn_t *c) {
  srv_t *s = c->srv;
  list_unlink(&c->read_link); /* on its loop's thread */
  list_unlink(&c->written_link);
  list_unlink(&c->prep_link);
  srv__pre_drop(c);
  in_release(c);
  proto_enc_destroy(&c->out);
  tls_free(c->tls);
  c->magic = 0;
  free(c);
  mem_update(s);
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->srv;
  int closing;
  trace_begin(s, "closed", c);
  lock_urgent(s);
  conn_free(c);
  /* srv_close waits for connections closed before it, too. */
  s->closing_conns--;
  closing = s->closing;
  if (!closing)
    mem_released(s);
  srv__unlock(s);
  trace_end(s);
  /* Only loop 0 finishes: the other loops were joined by then. */
  if (closing && srv__on_main(s))
    maybe_finish_close(s);
}

/* Take the connection out of every list and release what it holds;
 * RET 1 the first time. */
static int conn_teardown(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING)
    return 0;
  c->state = CONN_CLOSING;
  if (c->dialect && c->dialect->closed)
    c->dialect->closed(c);
  job_detach(c);
  list_unlink(&c->dirty_link);
  list_unlink(&c->resume_link);
  list_unlink(&c->memwait_link);
  list_unlink(&c->preauth_link);
  list_unlink(&c->silent_link);
  list_remove(&c->link);
  if (c->paused)
    s->stats.paused--;
  if (c->tls_state == 1) {
    s->tls_handshaking--;
    if (c->addr)
      c->addr->ntls_hs--;
  }
  if (c->tls_state != 0)
    s->mem.conns -= SRV_TLS_COST;
  c->tls_state = 0;
  if (c->addr) {
    c->addr->nconns--;
    addr_put(s, c->addr);
    c->addr = NULL;
  }
  s->mem.conns -= SRV_CONN_COST;
  s->mem.out -= c->out_charged;
  c->out_charged = 0;
  s->stats.conns_open--;
  return 1;
}

void srv__conn_close(conn_t *c) {
  srv_t *s = c->srv;
  if (!conn_teardown(c))
    return;
  s->closing_conns++;
  if (!c->handle_ready)
    return; /* its loop frees it when it takes it from lp->incoming */
  if (lp_here(c->lp)) {
    uv_close(&c->h.handle, on_conn_closed);
  } else {
    list_insert_tail(&c->lp->closeq, &c->io_link);
    uv_async_send(&c->lp->async);
  }
}

static void peer_name(conn_t *c, uv_handle_t *h) {
  int len = sizeof(c->peer_addr);
  memset(&c->peer_addr, 0, sizeof(c->peer_addr));
  if (h->type == UV_NAMED_PIPE) {
    c->peer_addr.ss_family = AF_UNIX;
    lu_strlcpy(c->peer, "unix socket", sizeof(c->peer));
    return;
  }
  if (uv_tcp_getpeername((uv_tcp_t *)h, (struct sockaddr *)&c->peer_addr,
                         &len) != 0) {
    lu_strlcpy(c->peer, "unknown peer", sizeof(c->peer));
    return;
  }
  if (c->peer_addr.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&c->peer_addr;
    char ip[INET_ADDRSTRLEN];
    uv_ip4_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, ntohs(a->sin_port));
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&c->peer_addr;
    char ip[INET6_ADDRSTRLEN];
    uv_ip6_name(a, ip, sizeof(ip));
    snprintf(c->peer, sizeof(c->peer), "[%s]:%d", ip, ntohs(a->sin6_port));
  }
}

static void on_refused_closed(uv_handle_t *h) { free(h); }

/* Log a refused connection at most every 5 s. */
static void log_refused(srv_t *s, const char *fmt, ...) LU_PRINTF(2, 3);
static void log_refused(srv_t *s, const char *fmt, ...) {
  uint64_t now = srv__now();
  char msg[256];
  va_list ap;
  s->stats.conns_refused++;
  if (now - s->refused_log_ms <= 5000 && s->refused_log_ms != 0)
    return;
  s->refused_log_ms = now;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_WARN(&s->log, "connection refused: %s", msg);
}

/* Accept and close at once, so that the backlog does not fill. */
static void refuse_accept(uv_stream_t *server) {
  srv_t *s = server->data;
  uv_tcp_t *t = malloc(sizeof(*t));
  if (t == NULL)
    return;
  if (server->type == UV_NAMED_PIPE)
    uv_pipe_init(s->loop, (uv_pipe_t *)t, 0);
  else
    uv_tcp_init(s->loop, t);
  uv_accept(server, (uv_stream_t *)t);
  uv_close((uv_handle_t *)t, on_refused_closed);
}

static void on_connection_locked(uv_stream_t *server, int status);
static void on_connection(uv_stream_t *server, int status) {
  srv_t *s = server->data;
  trace_begin(s, "accept", NULL);
  lock_urgent(s);
  on_connection_locked(server, status);
  srv__unlock(s);
  trace_end(s);
}

/* Accept on loop 0 into a handle of its own, and keep a duplicate of the
 * socket for the loop that will own the connection. RET 0 or -1. */
static int accept_for(conn_t *c, uv_stream_t *server) {
  srv_t *s = c->srv;
  uv_tcp_t *t = malloc(sizeof(*t));
  uv_os_fd_t fd;
  if (t == NULL)
    return -1;
  uv_tcp_init(s->loop, t);
  c->fd = -1;
  if (uv_accept(server, (uv_stream_t *)t) == 0) {
    peer_name(c, (uv_handle_t *)t);
    if (uv_fileno((uv_handle_t *)t, &fd) == 0)
      c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  }
  uv_close((uv_handle_t *)t, on_refused_closed);
  return c->fd >= 0 ? 0 : -1;
}

static void on_connection_locked(uv_stream_t *server, int status) {
  srv_t *s = server->data;
  srv_loop_t *lp = &s->loops[0];
  conn_t *c;
  int is_pipe = server->type == UV_NAMED_PIPE;
  srv_addr_t *a = NULL;
  if (status < 0) {
    LU_WARN(&s->log, "accept failed: %s", uv_strerror(status));
    return;
  }
  if (s->stats.conns_open >= s->cfg.max_conns)
    evict_silent(s, NULL);
  if (!mem_fixed_room(s, SRV_CONN_COST))
    evict_silent(s, NULL);
  if (s->stats.conns_open >= s->cfg.max_conns) {
    SRV_REFUSED(s, MAX_CONNS);
    log_refused(s, "%u connections open, the limit (raise it with "
                   "--max-conns)", s->cfg.max_conns);
    srv__limit_hit(s, SRV_LIMIT_MAX_CONNS, s->cfg.max_conns, NULL, NULL,
                   "a connection");
    refuse_accept(server);
    return;
  }
  if (!mem_fixed_room(s, SRV_CONN_COST))
    evict_ended(s);
  if (!mem_fixed_room(s, SRV_CONN_COST)) {
    SRV_REFUSED(s, MAX_MEMORY);
    srv__limit_hit(s, SRV_LIMIT_MAX_MEMORY, s->cfg.max_memory, NULL, NULL,
                   "a connection: connections and jobs hold their quarter");
    log_refused(s, "connections and jobs hold their quarter of "
                   "--max-memory %zu (16 KiB a connection): raise "
                   "--max-memory", s->cfg.max_memory);
    refuse_accept(server);
    return;
  }
  if ((c = calloc(1, sizeof(*c))) == NULL) {
    refuse_accept(server);
    return;
  }
  c->magic = CONN_MAGIC;
  c->srv = s;
  c->id = ++s->next_conn_id;
  if (!is_pipe && s->nloops > 1)
    lp = &s->loops[s->next_loop++ % (unsigned)s->nloops];
  c->lp = lp;
  list_init(&c->io_link);
  list_init(&c->link);
  list_init(&c->dirty_link);
  list_init(&c->resume_link);
  list_init(&c->prep_link);
  list_init(&c->read_link);
  list_init(&c->written_link);
  list_init(&c->memwait_link);
  list_init(&c->preauth_link);
  list_init(&c->silent_link);
  list_init(&c->pends);
  out_init(&c->out);
  c->state = CONN_CLOSING; /* not counted yet */
  if (lp->idx != 0) {
    if (accept_for(c, server) != 0) {
      conn_free(c);
      return;
    }
  } else {
    if (is_pipe)
      uv_pipe_init(s->loop, &c->h.pipe, 0);
    else
      uv_tcp_init(s->loop, &c->h.tcp);
    c->h.handle.data = c;
    c->handle_ready = 1;
    if (uv_accept(server, &c->h.stream) != 0) {
      s->closing_conns++;
      uv_close(&c->h.handle, on_conn_closed);
      return;
    }
    peer_name(c, &c->h.handle);
  }
  if (!is_pipe) {
    if (c->handle_ready)
      uv_tcp_nodelay(&c->h.tcp, 1);
    a = addr_get(s, &c->peer_addr);
    if (a != NULL && a->nconns >= s->cfg.max_conns_per_addr)
      evict_silent(s, a);
    if (a == NULL || a->nconns >= s->cfg.max_conns_per_addr) {
      SRV_REFUSED(s, MAX_CONNS_PER_ADDR);
      log_refused(s, "%s has %u connections open, the per-address limit "
                     "(--max-conns-per-addr)", c->peer,
                  a ? a->nconns : 0);
      srv__limit_hit(s, SRV_LIMIT_MAX_CONNS_PER_ADDR,
                     s->cfg.max_conns_per_addr, NULL, c->peer,
                     "a connection");
      addr_put(s, a);
      if (c->handle_ready) {
        s->closing_conns++;
        uv_close(&c->h.handle, on_conn_closed);
      } else {
        close(c->fd);
        conn_free(c);
      }
      return;
    }
    a->nconns++;
    c->addr = a;
  }
  c->state = CONN_SNIFF;
  c->accepted_ms = srv__now();
  list_insert_tail(&s->conns, &c->link);
  list_insert_tail(&s->preauth, &c->preauth_link);
  if (!uv_is_active((uv_handle_t *)&s->hs_timer))
    uv_timer_start(&s->hs_timer, hs_timer_cb, s->cfg.handshake_ms, 0);
  s->mem.conns += SRV_CONN_COST;
  mem_update(s);
  s->stats.conns_open++;
  s->stats.conns_total++;
  if (c->handle_ready) {
    conn_start_read(c);
  } else {
    list_insert_tail(&lp->incoming, &c->io_link);
    uv_async_send(&lp->async);
  }
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static char *dup_or_null(const char *p) { return p ? strdup(p) : NULL; }

static void free_config(srv_t *s) {
  free(s->host);
  free(s->unix_path);
  free(s->tcpstore_job);
  free(s->token);
  tls_ctx_free(s->tls);
  if (s->loops)
    for (int i = 0; i < s->nloops; i++) {
      free(s->loops[i].tls_rbuf);
      free(s->loops[i].wo);
    }
  free(s->loops);
}

static void async_cb(uv_async_t *a) {
  (void)a; /* the loop's check handle runs what it was woken for */
}

static void worker_main(void *arg) {
  srv_loop_t *lp = arg;
  tl_lp = lp;
  uv_run(lp->loop, UV_RUN_DEFAULT);
  trace_thread_end();
}

/* The loop's check, idle and async handles. */
static void loop_handles_init(srv_loop_t *lp) {
  uv_async_init(lp->loop, &lp->async, async_cb);
  lp->async.data = lp;
  uv_check_init(lp->loop, &lp->check);
  lp->check.data = lp;
  uv_check_start(&lp->check, check_cb);
  uv_unref((uv_handle_t *)&lp->check);
  uv_idle_init(lp->loop, &lp->idle);
  lp->idle.data = lp;
  if (lp->idx == 0)
    uv_unref((uv_handle_t *)&lp->async); /* the caller's loop may end */
}

/* RET 0 or RDZV_ENOMEM. */
static int loops_new(srv_t *s, uv_loop_t *loop) {
  int n = s->cfg.threads > 1 ? (int)LU_MIN(s->cfg.threads, 64u) : 1;
  if ((s->loops = calloc((size_t)n, sizeof(*s->loops))) == NULL)
    return RDZV_ENOMEM;
  s->nloops = n;
  pthread_mutex_init(&s->mu, NULL);
  {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->lock_cv, &ca);
    pthread_condattr_destroy(&ca);
  }
  for (int i = 0; i < n; i++) {
    srv_loop_t *lp = &s->loops[i];
    lp->srv = s;
    lp->idx = i;
    lp->loop = i == 0 ? loop : &lp->own;
    list_init(&lp->dirty);
    list_init(&lp->resume);
    list_init(&lp->run);
    list_init(&lp->prepq);
    list_init(&lp->incoming);
    list_init(&lp->closeq);
    list_init(&lp->readq);
    list_init(&lp->writtenq);
    lp->started = i == 0;
    if ((s->tls && (lp->tls_rbuf = malloc(TLS_RBUF)) == NULL) ||
        (i > 0 && uv_loop_init(&lp->own) != 0)) {
      while (--i > 0)
        uv_loop_close(&s->loops[i].own);
      return RDZV_ENOMEM;
    }
  }
  for (int i = 0; i < n; i++)
    loop_handles_init(&s->loops[i]);
  return 0;
}

/* On the loop's own thread, at srv_close: close its connections and
 * handles; its uv_run returns once they are gone. */
static void loop_shutdown(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  list_t *it, *next;
  for (it = s->conns.next; it != &s->conns; it = next) {
    conn_t *c = LIST_ENTRY(it, conn_t, link);
    next = it->next;
    if (c->lp == lp)
      srv__conn_close(c);
  }
  adopt_incoming(lp); /* frees those closed on their way */
  while (!list_empty(&lp->closeq)) {
    conn_t *c = LIST_ENTRY(lp->closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, on_conn_closed);
  }
  uv_close((uv_handle_t *)&lp->async, NULL);
  uv_close((uv_handle_t *)&lp->check, NULL);
  uv_close((uv_handle_t *)&lp->idle, NULL);
}

/* Derive the limits left at 0 from max_memory and check that they fit
 * together. RET 0 or RDZV_EINVAL (logged). */
static int derive_limits(srv_t *s) {
  srv_config_t *c = &s->cfg;
  if (c->max_memory == 0)
    c->max_memory = (size_t)512 << 20;
  if (c->max_store_bytes == 0 || c->max_store_bytes > c->max_memory / 2)
    c->max_store_bytes = c->max_memory / 2;
  if (c->max_in_bytes == 0)
    c->max_in_bytes = c->max_memory / 8;
  if (c->max_out_bytes == 0)
    c->max_out_bytes = LU_MIN(c->max_memory / 8, (size_t)64 << 20);
  if (c->max_conns_per_addr == 0)
    c->max_conns_per_addr = c->max_conns;
  if (c->max_jobs_per_addr == 0)
    c->max_jobs_per_addr = c->max_jobs;
  if (c->handshake_ms == 0)
    c->handshake_ms = 10000;
  if (c->limit_event_ms == 0)
    c->limit_event_ms = 10000;
  if ((size_t)c->max_value + (64u << 10) > c->max_out_bytes) {
    LU_ERR(&s->log, "a value of --max-value %u bytes would not fit in the "
                    "%zu bytes of replies one connection may hold (an "
                    "eighth of --max-memory): raise --max-memory or lower "
                    "--max-value", c->max_value, c->max_out_bytes);
    return RDZV_EINVAL;
  }
  return 0;
}

int srv_new(uv_loop_t *loop, const srv_config_t *cfg, srv_t **out) {
  srv_t *s;
  proto_limits_t pl = PROTO_LIMITS_DEFAULT;
  char err[512];
  if (cfg == NULL || cfg->size < sizeof(srv_config_t) || cfg->version != 1)
    return RDZV_EINVAL;
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return RDZV_ENOMEM;
  s->magic = SRV_MAGIC;
  s->loop = loop;
  s->cfg = *cfg;
  s->nloops = 1;
  pthread_mutex_init(&s->trace_mu, NULL);
  if (cfg->log)
    s->log = *cfg->log;
  else
    lu_log_init(&s->log, "launch server");
  s->host = dup_or_null(cfg->host);
  s->unix_path = dup_or_null(cfg->unix_path);
  s->tcpstore_job = strdup(cfg->tcpstore_job ? cfg->tcpstore_job : "default");
  if (cfg->token != NULL && cfg->token_len > 0) {
    s->token = malloc(cfg->token_len);
    if (s->token)
      memcpy(s->token, cfg->token, cfg->token_len);
  }
  s->cfg.host = s->host;
  s->cfg.unix_path = s->unix_path;
  s->cfg.tcpstore_job = s->tcpstore_job;
  s->cfg.token = s->token;
  s->cfg.tcpstore_allow = NULL;
  s->cfg.tls_cert = s->cfg.tls_key = s->cfg.tls_ca = NULL;
  s->cfg.log = NULL;
  if (s->tcpstore_job == NULL || (cfg->token && cfg->token_len && !s->token) ||
      (cfg->host && !s->host) || (cfg->unix_path && !s->unix_path)) {
    free_config(s);
    free(s);
    return RDZV_ENOMEM;
  }
  if (cfg->tcpstore_allow && parse_allow(s, cfg->tcpstore_allow) != 0) {
    LU_ERR(&s->log, "--tcpstore-allow '%s' does not parse: give addresses or "
                    "CIDR ranges separated by commas (127.0.0.0/8,::1)",
           cfg->tcpstore_allow);
    free_config(s);
    free(s);
    return RDZV_EINVAL;
  }
  if (cfg->tls_cert || cfg->tls_key || cfg->tls_ca) {
    tls_files_t f = {cfg->tls_cert, cfg->tls_key, cfg->tls_ca};
    if (tls_ctx_new(1, &f, &s->tls, err, sizeof(err)) != 0) {
      LU_ERR(&s->log, "%s", err);
      free_config(s);
      free(s);
      return RDZV_EINVAL;
    }
  }
  if (derive_limits(s) != 0 || lu_random(&s->addr_seed, sizeof(s->addr_seed)) ||
      lu_random(&s->store_seed, sizeof(s->store_seed))) {
    free_config(s);
    free(s);
    return RDZV_EINVAL;
  }
  pl.max_frame = s->cfg.max_frame;
  pl.max_items = s->cfg.max_keys * 2 + 64;
  s->plim = pl;
  s->tlim.max_key = s->cfg.max_key;
  s->tlim.max_value = s->cfg.max_value;
  s->tlim.max_keys = s->cfg.max_keys;
  s->tlim.max_request = s->cfg.max_frame;
  s->mem.store.floor = SRV_STORE_FLOOR; /* counted in SRV_JOB_COST */
  mem_update(s);
  list_init(&s->conns);
  list_init(&s->memwait);
  list_init(&s->preauth);
  list_init(&s->silent);
  if (loops_new(s, loop) != 0) {
    LU_ERR(&s->log, "cannot make %u event loops: out of memory or file "
                    "descriptors (lower --threads)", s->cfg.threads);
    if (s->nloops > 1) {
      pthread_mutex_destroy(&s->mu);
      pthread_cond_destroy(&s->lock_cv);
    }
    free_config(s);
    free(s);
    return RDZV_ENOMEM;
  }
  uv_timer_t *timers[] = {&s->timer, &s->hs_timer, &s->gc_timer,
                          &s->rounds_timer};
  for (size_t i = 0; i < LU_ARRAY_SIZE(timers); i++) {
    uv_timer_init(loop, timers[i]);
    timers[i]->data = s;
    uv_unref((uv_handle_t *)timers[i]);
  }
  /* Every server can host a job's rendezvous (docs/rendezvous.md). */
  rounds_install(s);
  *out = s;
  return 0;
}

static int listen_tcp(srv_t *s, const struct sockaddr *sa, unsigned flags) {
  uv_tcp_t *t;
  int r;
  if (s->ntcp >= (int)LU_ARRAY_SIZE(s->tcp))
    return UV_EMFILE;
  t = &s->tcp[s->ntcp];
  uv_tcp_init(s->loop, t);
  t->data = s;
  s->ntcp++;
  r = uv_tcp_bind(t, sa, flags);
  if (r == 0)
    r = uv_listen((uv_stream_t *)t, SOMAXCONN > 4096 ? SOMAXCONN : 4096,
                  on_connection);
  if (r != 0) {
    /* The slot stays taken (srv_close closes it): a handle's memory cannot
     * be reused before its close callback has run. */
    return r;
  }
  if (s->port == 0) {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(t, (struct sockaddr *)&ss, &len);
    s->port = ntohs(ss.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&ss)->sin_port
                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  return 0;
}

/* File descriptors the table is sized for at most (512 KiB of kernel
 * memory); a server with more connections grows it past this as needed. */
#define FDTABLE_MAX 65536

/* Size the process's file table for the connections to come, now. The
 * kernel grows it by doubling, and in a process of several threads each
 * growth waits for an RCU grace period (8-16 ms on the VMs measured): an
 * accept that crossed a power of two held the loops' lock that long, and
 * every client's request waited with it (issue #11). */
static void fdtable_reserve(const srv_t *s) {
  struct rlimit rl;
  uint64_t want = 2 * (uint64_t)s->cfg.max_conns + 256;
  int nul, fd;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur != RLIM_INFINITY && want > rl.rlim_cur)
    want = rl.rlim_cur;
  if (want > FDTABLE_MAX)
    want = FDTABLE_MAX;
  if ((nul = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    return;
  /* The lowest free descriptor from want - 1 on: none in use is touched. */
  if ((uint64_t)nul < want - 1 &&
      (fd = fcntl(nul, F_DUPFD_CLOEXEC, (int)(want - 1))) >= 0)
    close(fd);
  close(nul);
}

int srv_listen(srv_t *s) {
  int r = 0;
  fdtable_reserve(s);
  s->port = 0;
  if (s->host == NULL || s->host[0] == '\0' || strcmp(s->host, "::") == 0 ||
      strcmp(s->host, "*") == 0) {
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    uv_ip6_addr("::", s->cfg.port, &a6);
    /* Dual stack: IPv6 any with v4-mapped addresses; IPv4 alone where the
     * host has no IPv6. */
    r = listen_tcp(s, (const struct sockaddr *)&a6, 0);
    if (r != 0) {
      uv_ip4_addr("0.0.0.0", s->cfg.port, &a4);
      r = listen_tcp(s, (const struct sockaddr *)&a4, 0);
    }
  } else {
    struct addrinfo hints, *res = NULL, *ai;
    char portstr[16];
    int first = 1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", s->cfg.port);
    r = getaddrinfo(s->host, portstr, &hints, &res);
    if (r != 0) {
      LU_ERR(&s->log, "cannot resolve listen address '%s': %s", s->host,
             gai_strerror(r));
      return RDZV_ERESOLVE;
    }
    r = UV_EADDRNOTAVAIL;
    for (ai = res; ai && s->ntcp < (int)LU_ARRAY_SIZE(s->tcp); ai = ai->ai_next) {
      int rr;
      if (!first) {
        /* Every address of the host shares the first one's port. */
        if (ai->ai_family == AF_INET)
          ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons(s->port);
        else
          ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons(s->port);
      }
      rr = listen_tcp(s, ai->ai_addr,
                      ai->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
      if (rr == 0) {
        first = 0;
        r = 0;
      } else if (first) {
        r = rr;
      }
    }
    freeaddrinfo(res);
  }
  if (r != 0)
    return r;
  for (int i = 1; i < s->nloops; i++) {
    srv_loop_t *lp = &s->loops[i];
    if (!lp->started && uv_thread_create(&lp->thread, worker_main, lp) == 0)
      lp->started = 1;
  }
  if (s->unix_path) {
    uv_pipe_init(s->loop, &s->unix_listener, 0);
    s->unix_listener.data = s;
    s->has_unix = 1;
    unlink(s->unix_path);
    r = uv_pipe_bind(&s->unix_listener, s->unix_path);
    if (r == 0)
      r = uv_listen((uv_stream_t *)&s->unix_listener, 4096, on_connection);
    if (r != 0)
      return r;
  }
  return 0;
}

int srv_port(const srv_t *s) { return s->port; }

void srv_get_stats(const srv_t *s, srv_stats_t *st) {
  srv__lock((srv_t *)s);
  *st = s->stats;
  srv__unlock((srv_t *)s);
}

static void free_all(srv_t *s) {
  while (s->jobs) {
    job_t *j = s->jobs;
    s->jobs = j->next;
    job_free(s, j);
  }
  /* Every byte counted was given back: the accounting does not drift. */
  assert(mem_used(s) == 0);
  lu_big_set_limit(0); /* the cached blocks go too */
  free(s->addrs);
  free(s->heap);
  free_config(s);
  if (s->nloops > 1) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->lock_cv);
  }
  pthread_mutex_destroy(&s->trace_mu);
  s->magic = 0;
  free(s);
}

static void maybe_finish_close(srv_t *s) {
  if (s->pending_closes == 0 && s->closing_conns == 0 && s->closing == 1) {
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    s->closing = 2;
    free_all(s);
    if (cb)
      cb(arg);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  srv_t *s = h->data;
  s->pending_closes--;
  maybe_finish_close(s);
}

static void on_conn_closed_final(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->srv;
  conn_free(c);
  s->pending_closes--;
  maybe_finish_close(s);
}

void srv_close(srv_t *s, void (*cb)(void *arg), void *arg) {
  assert(s->magic == SRV_MAGIC);
  if (s->closing)
    return;
  if (s->cfg.trace_us) {
    pthread_mutex_lock(&s->trace_mu);
    LU_WARN(&s->log, "trace: longest callback: %s: %.2f ms wall (lock "
            "waits left out), %.2f ms CPU", s->trace_max.what,
            s->trace_max.wall / 1e6, s->trace_max.wall_cpu / 1e6);
    LU_WARN(&s->log, "trace: most CPU in a callback: %s: %.2f ms CPU",
            s->trace_max.what_cpu, s->trace_max.cpu / 1e6);
    pthread_mutex_unlock(&s->trace_mu);
  }
  srv__lock(s);
  s->close_cb = cb;
  s->close_arg = arg;
  /* Hold one count while closing so that no callback finishes early. */
  s->pending_closes = 1;
  s->closing = 1;
  for (int i = 1; i < s->nloops; i++)
    if (s->loops[i].started) {
      s->loops[i].stop = 1;
      uv_async_send(&s->loops[i].async);
    }
  srv__unlock(s);
  /* The other loops close their connections and end; from here on only
   * this thread runs. */
  for (int i = 1; i < s->nloops; i++) {
    srv_loop_t *lp = &s->loops[i];
    if (lp->started) {
      uv_thread_join(&lp->thread);
    } else {
      srv__lock(s);
      loop_shutdown(lp);
      srv__unlock(s);
      uv_run(lp->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(lp->loop);
  }
  trace_thread_end(); /* loop 0's, this thread's */
  while (!list_empty(&s->loops[0].closeq)) {
    conn_t *c = LIST_ENTRY(s->loops[0].closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, on_conn_closed);
  }
  while (!list_empty(&s->conns)) {
    conn_t *c = LIST_ENTRY(s->conns.next, conn_t, link);
    conn_teardown(c);
    s->pending_closes++;
    uv_close(&c->h.handle, on_conn_closed_final);
  }
  for (int i = 0; i < s->ntcp; i++) {
    s->pending_closes++;
    uv_close((uv_handle_t *)&s->tcp[i], on_handle_closed);
  }
  if (s->has_unix) {
    s->pending_closes++;
    uv_close((uv_handle_t *)&s->unix_listener, on_handle_closed);
    unlink(s->unix_path);
  }
  uv_handle_t *hs[] = {(uv_handle_t *)&s->loops[0].check,
                       (uv_handle_t *)&s->loops[0].idle,
                       (uv_handle_t *)&s->loops[0].async,
                       (uv_handle_t *)&s->timer,
                       (uv_handle_t *)&s->hs_timer, (uv_handle_t *)&s->gc_timer,
                       (uv_handle_t *)&s->rounds_timer};
  for (size_t i = 0; i < LU_ARRAY_SIZE(hs); i++) {
    s->pending_closes++;
    hs[i]->data = s;
    uv_close(hs[i], on_handle_closed);
  }
  s->pending_closes--;
  maybe_finish_close(s);
}
