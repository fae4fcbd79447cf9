/* srv_loop.c - the rendezvous server's event loops and the lock they
 * share, and the tracing of their callbacks (LAUNCH_SERVER_TRACE_MS).
 * Moved out of server.c (issue #25). */
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "srv_int.h"


/* ---- loops and the lock ---------------------------------------------------------- */

/* The loop the calling thread runs; NULL on loop 0's thread (the caller's,
 * which may run several servers' loop 0). */
static __thread srv_loop_t *tl_lp;

int srv__lp_here(const srv_loop_t *lp) {
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
  return srv__schedstat_wait(buf);
}

uint64_t srv__schedstat_wait(const char *buf) {
  unsigned long long run = 0, wait = 0;
  return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? wait : 0;
}

void srv__trace_thread_end(void) {
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

void srv__trace_begin(const srv_t *s, const char *what, const conn_t *c) {
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

void srv__trace_end(srv_t *s) {
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
 * between pieces (srv__lock_yield), so a small request waits for one piece of
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
void srv__lock_urgent(srv_t *s) { lock_prio(s, 1); }

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

int srv__lock_large(srv_loop_t *lp) {
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
 * the lock again, 0 without it (srv__lock_large). */
int srv__lock_yield(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  if (s->nloops > 1 && atomic_load(&s->lock_hungry) > 0) {
    srv__unlock(s);
    return srv__lock_large(lp);
  }
  return 1;
}

void srv__kick_main(srv_t *s) { uv_async_send(&s->loops[0].async); }

void srv__kick_rounds(srv_t *s) {
  s->kick_rounds = 1;
  srv__kick_main(s);
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

void srv__idle_cb(uv_idle_t *h) { (void)h; }

/* The loop has work for its check handle: on its own thread, an active
 * idle handle keeps it from blocking in poll before the check runs; from
 * another thread, its async handle wakes it. */
void srv__wake_loop(srv_loop_t *lp) {
  if (lp->srv->closing)
    return;
  if (!srv__lp_here(lp))
    uv_async_send(&lp->async);
  else if (!uv_is_active((uv_handle_t *)&lp->idle))
    uv_idle_start(&lp->idle, srv__idle_cb);
}

void srv__worker_main(void *arg) {
  srv_loop_t *lp = arg;
  tl_lp = lp;
  uv_run(lp->loop, UV_RUN_DEFAULT);
  srv__trace_thread_end();
}
