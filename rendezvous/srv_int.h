/* srv_int.h - internals shared by the rendezvous server's files: the
 * connection core (srv_loop.c, srv_mem.c, srv_jobs.c, srv_timers.c,
 * srv_io.c, srv_conn.c), the dialects (srv_native.c, srv_tcpstore.c), the
 * rounds module (rounds.c) and server.c (config, lifecycle, public API).
 * Their layers are listed at "the connection core" below.
 *
 * The core owns connections: sniffing, TLS, input and output buffers, the
 * memory they may use, replies and pushes. A dialect (srv_dialect_t) turns
 * the bytes of a connection into requests; the core reaches a dialect only
 * through its table (it names the tables when it sniffs, to pick one). */
#ifndef SRV_INT_H
#define SRV_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <uv.h>

#include "proto.h"
#include "server.h"
#include "store.h"
#include "tcpstore.h"
#include "tls.h"

#define SRV_MAGIC 0x53525631u  /* "SRV1" */
#define CONN_MAGIC 0x434f4e4eu /* "CONN" */

/* What one connection always has, charged against --max-memory when it is
 * accepted: its structures, an input buffer for requests of up to
 * SRV_IN_RESERVE bytes and SRV_OUT_RESERVE bytes of unsent replies. Beyond
 * them, input counts against --max-input-bytes and output against what is
 * left of --max-memory. The reserves are what keeps a well-behaved client
 * served while others hold the shared memory. */
#define SRV_IN_RESERVE (8u << 10)
#define SRV_OUT_RESERVE (4u << 10)
#define SRV_CONN_COST (16u << 10)
/* A TLS connection also holds OpenSSL's state: about 47 KB while its
 * handshake is half done (measured, issue #24). It is charged this much on
 * top of SRV_CONN_COST from its ClientHello to its close, and at most
 * SRV_TLS_HANDSHAKES handshakes run at once: a ClientHello beyond either is
 * answered by closing the connection (the client retries). */
#define SRV_TLS_COST (48u << 10)
#define SRV_TLS_HANDSHAKES 256
#define SRV_TLS_HANDSHAKES_PER_ADDR 64 /* from one client address */
/* A job: its structures, and its store's first SRV_STORE_FLOOR bytes
 * (store_budget_t.floor), which no other job's data can take: a new job
 * stores its first keys however full the others are. */
#define SRV_STORE_FLOOR (4u << 10)
#define SRV_JOB_COST ((2u << 10) + SRV_STORE_FLOOR)
/* Before authentication a connection may send one HELLO-sized frame. */
#define SRV_HELLO_MAX_FRAME (4u << 10)

typedef struct list_s {
  struct list_s *prev, *next;
} list_t;

static inline void list_init(list_t *l) { l->prev = l->next = l; }
static inline int list_empty(const list_t *l) { return l->next == l; }
static inline void list_insert_tail(list_t *head, list_t *n) {
  n->prev = head->prev;
  n->next = head;
  head->prev->next = n;
  head->prev = n;
}
static inline void list_remove(list_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->prev = n->next = n;
}
/* Remove n if it is in a list (a removed node points at itself). */
static inline void list_unlink(list_t *n) {
  if (n->next != n)
    list_remove(n);
}
/* dst takes every node of src (what dst held is forgotten); src is left
 * empty. */
static inline void list_move(list_t *dst, list_t *src) {
  if (list_empty(src)) {
    list_init(dst);
    return;
  }
  *dst = *src;
  dst->next->prev = dst;
  dst->prev->next = dst;
  list_init(src);
}
/* The nodes of src go before those of dst; src is left empty. */
static inline void list_move_front(list_t *dst, list_t *src) {
  if (list_empty(src))
    return;
  src->prev->next = dst->next;
  dst->next->prev = src->prev;
  dst->next = src->next;
  src->next->prev = dst;
  list_init(src);
}
#define LIST_ENTRY(ptr, type, field)                                           \
  ((type *)((char *)(ptr)-offsetof(type, field)))

typedef struct job_s job_t;
typedef struct conn_s conn_t;
typedef struct pend_s pend_t;
typedef struct srv_pre_s srv_pre_t;
typedef struct srv_addr_s srv_addr_t;
typedef struct srv_loop_s srv_loop_t;

/* One event loop of the server (docs/protocol.md#threads). Loop 0 is the
 * caller's loop: it owns the listeners and every timer. The others run on
 * their own threads and own the connections handed to them. Every piece
 * of server state (jobs, stores, memory counts, connections' buffers) is
 * guarded by the server's lock (srv__lock); a libuv handle is only
 * touched by its loop's thread, so another loop asks for work on a
 * connection through these lists and the loop's async handle. */
struct srv_loop_s {
  srv_t *srv;
  int idx;
  uv_loop_t *loop;      /* loop 0: srv->loop */
  uv_loop_t own;        /* the others' */
  uv_thread_t thread;
  int started;
  int stop;
  uv_async_t async;     /* wakes the loop: its check runs the lists */
  uv_check_t check;
  uv_idle_t idle;
  list_t dirty;         /* output waits to be written */
  list_t resume;        /* run deferred work this turn */
  list_t run;           /* resumed, left from the last pass: run first */
  list_t prepq;         /* large requests that wait for their decoding
                           ahead (this thread only) */
  uint64_t large_t0;    /* since when large work waits for the lock */
  list_t incoming;      /* accepted on loop 0, handle not made yet */
  list_t closeq;        /* torn down elsewhere: uv_close here */
  list_t readq;         /* read bytes in this pass: the check runs their
                         * requests under one lock (this thread only) */
  list_t writtenq;      /* connections whose writes completed: their
                           accounting waits for the pass, which holds the
                           lock anyway (write_cb does not take it) */
  uint64_t turn_end;    /* uv_hrtime() when this connection's turn ends */
  uint8_t *tls_rbuf;    /* ciphertext read buffer */
  struct wout_s *wo;    /* output taken to be written without the lock */
  size_t capwo;
};

struct job_s {
  job_t *next;
  srv_t *srv;
  store_t *store;
  uint32_t nconns;
  srv_addr_t *creator; /* the address whose HELLO created it (counted) */
  uint64_t idle_since; /* when it last had no connection (ms) */
  void *rounds;           /* rendezvous state (rendezvous module) */
  int64_t ts_round;       /* TCPStore clients that attach now get this
                             round's namespace (srv__ts_new_round); -1:
                             none, the job's keys as they are */
  char name[];
};

/* Connections and jobs of one client address (per-address limits). */
struct srv_addr_s {
  srv_addr_t *next;
  uint8_t a[16]; /* IPv4 as v4-mapped IPv6 */
  uint32_t nconns, njobs;
  uint32_t ntls_hs; /* its TLS handshakes in progress */
};

enum {
  CONN_SNIFF = 0, /* no byte seen yet (or the TLS handshake runs) */
  CONN_HELLO,     /* native magic seen, waiting for HELLO */
  CONN_READY,     /* authenticated native client, or an allowed TCPStore */
  CONN_CLOSING
};

/* Returned by a dialect's request handler: the reply does not fit now;
 * keep the request and run it again once the connection's replies drained
 * (or memory was freed). */
#define SRV_LATER 1

/* A dialect: how the bytes of a connection become requests. */
typedef struct srv_dialect_s {
  const char *name;
  /* Run the whole requests at buf[0..n), stopping early when
   * srv__conn_paused() says so. RET bytes consumed, or <0 to close. */
  ssize_t (*input)(conn_t *c, const uint8_t *buf, size_t n);
  /* Retry what was deferred (replies woken while output was full); called
   * before buffered input when a paused connection resumes. */
  void (*resume)(conn_t *c);
  /* Release the connection's waits and registrations. */
  void (*closed)(conn_t *c);
  /* The sniffer chose this dialect for c: the native dialect sends its
   * HELLO challenge; TCPStore (attached to its job by then) takes the
   * namespace of the job's current round. */
  void (*start)(conn_t *c);
  /* Decoding ahead (c->pre): the work of a large request spread over the
   * passes that read it. NULL for a dialect without it (TCPStore).
   * prepare_due: has c's input a large frame (whole or not) to decode
   * ahead? A look at the frames' headers only. prepare: without the lock,
   * on c's loop, before its requests run: decode a slice of that frame,
   * as far as it came; reads only c's input and what is fixed at start
   * (limits, s->store_seed). pre_shift: the input's first cut bytes went
   * (ran, or moved away): c->pre follows its frame, or goes with it.
   * pre_done: after the requests ran, forget c->pre once decoded (run or
   * not). pre_drop: forget c->pre (c is freed). */
  int (*prepare_due)(conn_t *c);
  void (*prepare)(conn_t *c);
  void (*pre_shift)(conn_t *c, size_t cut);
  void (*pre_done)(conn_t *c);
  void (*pre_drop)(conn_t *c);
  /* A waiting request of c's (pend_t: GET/WAIT/MGET with a wait, BARRIER)
   * reached its deadline; the deadlines' heap has let it go. Under the
   * lock, on loop 0. NULL for a dialect whose waits have no deadline. */
  void (*pend_timeout)(pend_t *p);
} srv_dialect_t;

extern const srv_dialect_t srv__dialect_native;
extern const srv_dialect_t srv__dialect_ts_v2;
extern const srv_dialect_t srv__dialect_ts_v1;
/* Round `round` of job j formed: TCPStore clients that attach from now on
 * get its namespace, and the earlier rounds' namespaces and the native
 * progress keys (RDZV_PROGRESS_PREFIX) are dropped (their workers are gone:
 * every node stopped them before it joined). */
void srv__ts_new_round(job_t *j, int64_t round);

struct conn_s {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  unsigned magic;
  srv_t *srv;
  job_t *job;
  const srv_dialect_t *dialect; /* NULL while sniffing */
  srv_addr_t *addr;     /* NULL for unix-socket peers */
  int state;
  int reading;          /* uv_read_start active */
  int paused;           /* requests wait until replies drained */
  int bad_logged;       /* bad input from this peer already logged */
  int broken;           /* output could not be queued: close at flush */
  int close_after_flush;/* send what is queued (an error), then close */
  uint64_t id;
  uint64_t accepted_ms;
  char peer[80];
  struct sockaddr_storage peer_addr;
  char role[16];
  list_t link;          /* in srv->conns */
  srv_loop_t *lp;       /* the loop that owns its handle */
  int handle_ready;     /* the handle exists on lp (not in lp->incoming) */
  int fd;               /* lp->incoming: the accepted socket */
  list_t io_link;       /* in lp->incoming or lp->closeq */
  list_t dirty_link;    /* in lp->dirty while output waits to be written */
  list_t resume_link;   /* in lp->resume: run deferred work this turn */
  list_t read_link;     /* in lp->readq (only lp's thread touches it) */
  list_t written_link;  /* in lp->writtenq (only lp's thread touches it) */
  list_t prep_link;     /* in lp->prepq (only lp's thread touches it) */
  list_t memwait_link;  /* in srv->memwait: waits for shared memory */
  list_t preauth_link;  /* in srv->preauth until authenticated */
  list_t silent_link;   /* in srv->silent: kept past its handshake deadline */
  int heard;            /* a byte came from the peer */
  list_t pends;         /* native pending ops (pend_t) */
  uint32_t npend;       /* pending waits (native or TCPStore) */
  /* Input: plaintext bytes received and not yet parsed. Only lp's thread
   * touches in, in_len and in_cap (read_cb adds to in_len without the
   * lock); in_charged, like srv->mem.in, is under the lock. */
  uint8_t *in;
  size_t in_len, in_cap;
  size_t in_charged;    /* of in_cap, counted in srv->mem.in */
  size_t in_need;       /* the incomplete request at the buffer's start
                           has this many bytes (0: not known) */
  int in_moved;         /* the buffer was taken (srv__in_take): the dialect
                           returns, the core goes on with the new one */
  size_t in_skip;       /* bytes still to come of a request over
                           --max-frame, already answered: dropped as they
                           come (the native dialect; only lp's thread) */
  const uint8_t *req_end; /* the end of the request being run */
  uint8_t *in_spent;    /* a taken buffer nothing kept: freed once the
                           request that took it is over */
  int in_full;          /* the input budget stopped this buffer growing */
  int in_memwait;       /* --max-memory stopped it: wait for memory */
  srv_pre_t *pre;       /* a large request decoded ahead, without the
                            lock (the dialect's prepare); its loop's only */
  /* Output: replies not yet handed to the kernel. */
  proto_enc_t out;
  size_t inflight;      /* bytes in uv_write requests */
  size_t written;       /* of inflight, written: accounted by the loop's
                           next pass (only lp's thread touches it) */
  int write_failed;     /* a write failed: closed by that pass */
  size_t out_deferred;  /* bytes a dialect holds to write in its resume */
  size_t out_charged;   /* counted in srv->mem.out */
  tls_t *tls;           /* TLS session, or NULL */
  int tls_state;        /* 0: none; 1: handshake (counted in
                           srv->tls_handshaking); 2: established. 1 and 2
                           are charged SRV_TLS_COST in srv->mem.conns */
  /* TCPStore state. */
  store_waiter_t **ts_waits; /* outstanding TCPStore waits */
  uint32_t ts_nwaits, ts_capwaits;
  store_watch_t **ts_watches;
  uint32_t ts_nwatches, ts_capwatches;
  struct ts_evq_s *ts_evq, *ts_evq_tail; /* large watch events to write */
  size_t ts_evoff; /* bytes of the first queued event already written */
  char ts_ns[32];   /* the round's namespace, prefixed to every key
                       (RDZV_TORCH_NS "<round>/"); empty: none */
  uint8_t ts_nslen;
  uint8_t *ts_nsbuf; /* the request's keys with the namespace */
  size_t ts_nscap;
  uint8_t nonce[PROTO_NONCE_LEN];
  void *rounds; /* rendezvous membership of this connection */
};

/* A native request that waits: GET/WAIT/MGET with a wait, BARRIER. */
struct pend_s {
  list_t link;          /* in conn->pends */
  conn_t *c;
  uint64_t reqid;
  int op;
  int ready;            /* woken; the reply waits for room */
  uint64_t deadline_ms; /* 0 = none */
  size_t heap_idx;      /* index in srv->heap, or SIZE_MAX */
  store_waiter_t *w;
  store_bwait_t *bw;
  uint32_t nkeys;
  store_key_t *keys;    /* copies, for replying with values (GET, MGET) */
  size_t charged;       /* bytes counted in the job's store */
};

struct srv_s {
  unsigned magic;
  uv_loop_t *loop;
  srv_config_t cfg;
  lu_log_t log;
  char *host, *unix_path, *tcpstore_job;
  uint8_t *token;
  tls_ctx_t *tls;       /* TLS listener when set */
  uint32_t tls_handshaking; /* connections with tls_state 1 */
  /* TCPStore allow list */
  struct {
    struct sockaddr_storage net;
    int prefix;
  } allow[16];
  int nallow;
  uv_tcp_t tcp[8]; /* listeners, failed binds included (closed at the end) */
  int ntcp;
  uv_pipe_t unix_listener;
  int has_unix;
  int port;
  proto_limits_t plim;
  ts_limits_t tlim;
  /* Memory, all counted against cfg.max_memory. */
  struct {
    size_t conns; /* SRV_CONN_COST per connection */
    size_t jobs;  /* SRV_JOB_COST per job */
    size_t in;    /* input buffers beyond their reserve */
    size_t out;   /* unsent output beyond its reserve */
    store_budget_t store; /* every job's store; max follows what is left */
  } mem;
  job_t *jobs;
  uint32_t njobs;
  srv_addr_t **addrs; /* per-address counts, hashed */
  size_t naddr_buckets;
  uint64_t addr_seed;
  uint64_t store_seed; /* every job's store's (set at start, then read
                          without the lock: the dialect's prepare) */
  list_t conns;
  list_t memwait;
  list_t preauth;       /* oldest first: deadlines in accept order */
  list_t silent;        /* oldest first: connections that sent nothing by
                           their deadline, kept while there is room (a
                           PyTorch 1.13 TCPStore client sends nothing
                           until its first request; its watch socket
                           never does) and closed first when there is not */
  /* All of it is guarded, when nloops > 1, by the server's lock
   * (srv__lock): lock_held is the lock; waiters that stopped spinning
   * sleep on lock_cv under mu; lock_hungry counts those that waited too
   * long, which the others let go first. */
  atomic_int lock_held, lock_sleepers, lock_hungry;
  pthread_mutex_t mu;
  pthread_cond_t lock_cv;
  srv_loop_t *loops;    /* nloops; loops[0] is the caller's */
  int nloops;
  unsigned next_loop;   /* round robin of accepted connections */
  /* Asked of loop 0 by the others (its timers are its own). */
  int kick_rearm, kick_rounds;
  uint64_t kick_gc_due; /* 0 = none */
  uv_timer_t timer;     /* pending-op deadlines */
  uv_timer_t hs_timer;  /* handshake deadlines */
  uv_timer_t gc_timer;  /* idle jobs */
  pend_t **heap;
  size_t heap_len, heap_cap;
  uint64_t next_conn_id;
  uint64_t refused_log_ms;
  struct {
    uint64_t last_ms;   /* its last limit_hit event; 0 none */
    uint64_t pending;   /* refusals since, not yet in an event */
  } limit_ev[SRV_LIMIT_COUNT];
  uint64_t bad_window_ms, bad_in_window, bad_suppressed;
  srv_stats_t stats;
  struct ts_evblk_s *ts_evlast; /* the last large watch event encoded (a
                                   weak reference: NULL once freed) */
  /* Rendezvous ops (PROTO_OP_JOIN and up), installed by the rendezvous
   * module (every server has it: srv_new installs it). */
  void (*rounds_op)(conn_t *c, const proto_msg_t *m);
  void (*rounds_conn_closed)(conn_t *c);
  void (*rounds_job_free)(job_t *j);
  /* RET the srv__now() until which the module keeps the record of a job
   * that ended (--keep-ended), 0 none: the job is then forgotten at that
   * time instead of after the grace, and sooner when its room is needed. */
  uint64_t (*rounds_job_keep)(const job_t *j);
  void (*rounds_schedule)(srv_t *s); /* re-arm rounds_timer (loop 0) */
  uv_timer_t rounds_timer; /* rendezvous deadlines (armed by the module) */
  uint64_t rounds_due;     /* when rounds_timer was due (loop stalls show late) */
  uint64_t rounds_stall;   /* when the last stall of the loop was seen */
  void *rounds_data;
  /* LAUNCH_SERVER_TRACE_MS: the longest callback (lock waits left out)
   * and the one that used the most CPU. */
  pthread_mutex_t trace_mu;
  struct {
    uint64_t wall, wall_cpu, cpu;
    char what[96], what_cpu[96];
  } trace_max;
  int closing;
  int pending_closes;
  int closing_conns; /* connections between uv_close and its callback */
  void (*close_cb)(void *arg);
  /* server.c's: once nothing is left to close, free the server and call
   * close_cb. The core calls it when a connection's close completes during
   * srv_close (set by srv_new: the core calls up only through hooks). */
  void (*finish_close)(srv_t *s);
  void *close_arg;
};

/* ---- the connection core ------------------------------------------------- */
/* Layers, lowest first: each file calls only the files of its layer and
 * those below. A layer above is reached through hooks it installs
 * (srv_dialect_t, s->rounds_*, s->finish_close), never by name.
 *   1. srv_loop.c    the loops, their lock, tracing
 *   2. srv_mem.c     memory counted against --max-memory
 *   3. srv_jobs.c    jobs, per-address counts, events for the owner
 *   4. srv_timers.c, srv_io.c, srv_conn.c: the connection core, one layer
 *      (they call each other): deadlines, input and output, connections
 *   5. srv_native.c, srv_tcpstore.c: the dialects (srv_dialect_t)
 *   6. rounds.c      the rendezvous module (s->rounds_*; it calls
 *                    srv__ts_new_round of the TCPStore dialect)
 *   7. server.c      config, lifecycle, the public API (srv_new installs
 *                    the rounds module and finish_close) */

/* ---- srv_loop.c: the loops and the lock ------------------------------------ */

/* Milliseconds of a monotonic clock, the same on every loop's thread. */
/* --tcpstore-allow: "ADDR[/PREFIX],..." (IPv4 and IPv6, at most 16) into
 * s->allow. RET 0 or RDZV_EINVAL. Pure but for s->allow (fuzz_allow). */
int srv__parse_allow(srv_t *s, const char *list);
/* May c speak TCPStore (its peer in the allow list, or the server has
 * neither token nor TLS, or a unix socket)? */
int srv__ts_allowed(const srv_t *s, const conn_t *c);
uint64_t srv__now(void);
/* Is the calling thread loop 0's (where the timers live)? */
int srv__on_main(const srv_t *s);
/* Is the calling thread lp's? */
int srv__lp_here(const srv_loop_t *lp);
/* From another loop: ask loop 0 to re-arm the rendezvous timer. */
void srv__kick_rounds(srv_t *s);
/* Wake loop 0 for what the others asked of it (s->kick_*). */
void srv__kick_main(srv_t *s);
/* The loop has work for its check handle: wake it (any thread). */
void srv__wake_loop(srv_loop_t *lp);
/* The idle handle's callback: none (its being active keeps the loop from
 * blocking in poll). */
void srv__idle_cb(uv_idle_t *h);
/* The thread of a loop other than loop 0. */
void srv__worker_main(void *arg);
/* LAUNCH_SERVER_TRACE_MS: a request's start (0 when not tracing) and its
 * end, for the traced callback's longest request. */
uint64_t srv__trace_now(void);
void srv__trace_req(const char *op, uint64_t t0);
/* A traced callback's start and end (c: NULL when none), and the end of a
 * thread that traced. */
void srv__trace_begin(const srv_t *s, const char *what, const conn_t *c);
void srv__trace_end(srv_t *s);
void srv__trace_thread_end(void);
/* The run-queue wait (ns) of /proc/thread-self/schedstat's text, 0 when
 * it holds no two numbers (srv_loop.c; fuzz_proc_text drives it). */
uint64_t srv__schedstat_wait(const char *buf);
void srv__lock(srv_t *s);
void srv__unlock(srv_t *s);
/* The lock for a short hold that a client's small request waits on. */
void srv__lock_urgent(srv_t *s);
/* The lock for a loop's large work: RET 1 with it, or 0 when it did not
 * come soon (the loop polls and tries on its next pass). Between two
 * pieces of large work: let a hungry waiter go first; RET 1 with the lock
 * again, 0 without it. */
int srv__lock_large(srv_loop_t *lp);
int srv__lock_yield(srv_loop_t *lp);

/* ---- srv_mem.c: memory ----------------------------------------------------- */

/* Memory of a job's records beyond SRV_JOB_COST (an ended job's nodes),
 * charged to the jobs' share of --max-memory. RET 0, or -1: no room. */
int srv__mem_job_charge(srv_t *s, size_t n);
void srv__mem_job_release(srv_t *s, size_t n);
/* All that is counted; room left for stores, input and output; room left
 * for replies. */
size_t srv__mem_used(const srv_t *s);
size_t srv__mem_free(const srv_t *s);
size_t srv__mem_free_out(const srv_t *s);
/* After the counts changed: the stores' share follows. */
void srv__mem_update(srv_t *s);
/* RET 1 when a fixed cost (a connection, a job) fits. */
int srv__mem_fixed_room(const srv_t *s, size_t cost);

/* ---- srv_jobs.c: jobs, client addresses, events ---------------------------- */

/* The job of that name, created if needed by connection c (its address is
 * the creator). RET NULL with a message in err when a limit refuses it. */
job_t *srv__job(srv_t *s, conn_t *c, const char *name, size_t len, char *err,
                size_t errcap);
void srv__job_attach(conn_t *c, job_t *j);
void srv__job_detach(conn_t *c);
void srv__job_free(srv_t *s, job_t *j);
/* Forget the ended job kept the longest; RET 1 when one went. */
int srv__evict_ended(srv_t *s);
/* Look for idle jobs to forget by srv__now() `due` at the latest (loop
 * 0's gc timer; another loop asks loop 0). */
void srv__gc_schedule(srv_t *s, uint64_t due);
/* The counts of a client address, made when first needed (NULL: not an
 * IP peer, or no memory), and forgetting it once nothing is counted. */
srv_addr_t *srv__addr_get(srv_t *s, const struct sockaddr_storage *ss);
void srv__addr_put(srv_t *s, srv_addr_t *a);
/* Hand an event to the owner (cfg.on_event), if any. */
void srv__event(srv_t *s, const srv_event_t *ev);
/* A limit refused something: counted (stats.refused[limit], the
 * launch_server_refusals_total{limit} series), and a limit_hit event, once
 * per limit per cfg.limit_event_ms (the refusals between are counted into
 * the next). One call at each refusal point. job, peer: NULL when not
 * known. Under the lock. */
void srv__limit_hit(srv_t *s, int limit, uint64_t value, const char *job,
                    const char *peer, const char *fmt, ...) LU_PRINTF(6, 7);
/* Memory was freed: connections waiting for it try again this turn. */
void srv__mem_released(srv_t *s);
/* Count a request of native op code op / TCPStore canonical op op. */
#define SRV_COUNT_NATIVE(s, op)                                                \
  ((s)->stats.native_ops[(uint64_t)(op) < SRV_NATIVE_OPS ? (op) : 0]++)
#define SRV_COUNT_TS(s, op)                                                    \
  ((s)->stats.ts_ops[(unsigned)(op) < SRV_TS_WATCH ? (unsigned)(op)            \
                                                   : SRV_TS_WATCH]++)

/* ---- srv_timers.c: deadlines ----------------------------------------------- */

/* A native wait's deadline in the heap (wait_ms < 0: none), and out of it. */
int srv__pend_arm(srv_t *s, pend_t *p, int64_t wait_ms);
void srv__pend_disarm(srv_t *s, pend_t *p);
/* Re-arm the deadlines' timer (from another loop: ask loop 0). */
void srv__rearm(srv_t *s);
/* The handshake deadlines' timer. */
void srv__hs_timer_cb(uv_timer_t *t);
/* The connection passed its handshake: it may send full-sized requests. */
void srv__conn_authenticated(conn_t *c);
/* Close the oldest connection kept past its handshake deadline (of
 * address a first, when not NULL); RET 1 when one was. */
int srv__evict_silent(srv_t *s, const srv_addr_t *a);

/* ---- srv_io.c: output and input -------------------------------------------- */

#define TLS_RBUF (64u << 10)  /* ciphertext read at a time */

/* Output. Before building a reply of about n bytes a handler asks for room:
 * SRV_ROOM_OK: build it now; SRV_ROOM_LATER: the connection is paused
 * (its own unsent replies, or the server's memory, are full) and the
 * handler returns SRV_LATER; SRV_ROOM_NEVER: n is over what one connection
 * may ever have unsent, refuse the request. Small replies (errors, counts)
 * need no check: a paused connection runs no request. */
enum { SRV_ROOM_OK = 0, SRV_ROOM_LATER = 1, SRV_ROOM_NEVER = 2 };
int srv__out_room(conn_t *c, size_t n);
/* For pushes and events the client did not ask for right now (TCPStore
 * watch events): RET 1 when n bytes may be queued, else 0 and the
 * connection is closed at the next flush, as a client that does not read
 * its events must not hold the server's memory. */
int srv__push_room(conn_t *c, size_t n);
/* Is the connection paused (its unsent replies over its cap)? Dialects
 * check it before each request. */
int srv__conn_paused(conn_t *c);
/* Replies: reply_begin packs [REPLY, id, status] and leaves room for nres
 * more elements; reply_end finishes the frame. */
void srv__reply_begin(conn_t *c, uint64_t id, int status, uint32_t nres);
void srv__reply_end(conn_t *c);
void srv__reply_ok(conn_t *c, uint64_t id);
void srv__reply_err(conn_t *c, uint64_t id, int status, const char *fmt, ...)
    LU_PRINTF(4, 5);
/* Push [PUSH, 0, ev, ...nargs]: finish with srv__reply_end. */
void srv__push_begin(conn_t *c, int ev, uint32_t nargs);
/* Raw bytes (TCPStore replies). Never closes: it may run inside a store
 * callback; a failure closes the connection at the next flush. */
void srv__out_raw(conn_t *c, const void *p, size_t n);

/* Keep a large value where it arrived instead of copying it (a SET of
 * megabytes: one copy and one round of page faults fewer). val[0..n) lies
 * in the input buffer, in the request that ends at end. RET the buffer,
 * now the caller's to free, with *cost its size (what it holds), or NULL
 * when it is not worth it (a small value, a buffer much larger than the
 * value): copy. The connection goes on with a new buffer holding the
 * bytes after end; the dialect's input returns right after this request
 * (c->in_moved), keys into the old buffer stay valid while it lives. */
uint8_t *srv__in_take(conn_t *c, const uint8_t *val, size_t n,
                      const uint8_t *end, size_t *cost);
/* Pause the connection and run its dialect's resume on its loop's next
 * pass (after the others' turns); its out_deferred bytes count as unsent
 * meanwhile. Any loop, under the lock. */
void srv__defer(conn_t *c);
/* A buffer srv__in_take returned that nothing kept (the keys of a WAIT the
 * store copied after all): freed once the request is over (its bytes are
 * still read until then). */
void srv__in_spent(conn_t *c, uint8_t *buf);
/* store_set in the connection's job of a value of the request being run
 * (c->req_end), taking the input buffer when it is worth it. */
int srv__store_set(conn_t *c, const void *key, size_t klen, const void *val,
                   size_t vlen);

/* The frame c->pre decodes came whole but is not decoded yet: its
 * connection goes on after the others (the dialect's prepare on the next
 * pass). Under the lock. */
void srv__conn_yield(conn_t *c);
/* The connection waits for its request's decoding ahead: the loop's next
 * passes decode it, before their lock (after srv__conn_yield). */
void srv__prepare_later(conn_t *c);
/* Log bad input from this connection once, count it. */
void srv__bad_input(conn_t *c, const char *fmt, ...) LU_PRINTF(2, 3);
void srv__out_init(proto_enc_t *o);
void srv__in_release(conn_t *c);
void srv__conn_start_read(conn_t *c);
/* Connections accepted on loop 0 for this loop: make their handles. */
void srv__adopt_incoming(srv_loop_t *lp);
/* A loop's check handle: its pass (the lists, input, output). */
void srv__check_cb(uv_check_t *h);

/* ---- srv_conn.c: connections ----------------------------------------------- */

void srv__on_connection(uv_stream_t *server, int status);
void srv__conn_close(conn_t *c);
/* Take the connection out of every list and release what it holds; RET 1
 * the first time. */
int srv__conn_teardown(conn_t *c);
void srv__on_conn_closed(uv_handle_t *h);
void srv__conn_free(conn_t *c);
/* On the loop's own thread, at srv_close: close its connections and
 * handles. */
void srv__loop_shutdown(srv_loop_t *lp);

#endif /* SRV_INT_H */
