/* server.h - the launch rendezvous server: a libuv TCP (and unix socket)
 * listener serving the native protocol and PyTorch's TCPStore protocol
 * (1.13 and >= 2.2 numberings) from one store per job.
 *
 * The caller owns the loop: srv_new() registers handles on it, the caller
 * runs it, srv_close() closes every handle and calls cb once they are gone.
 * Loop thread only. With cfg.threads > 1, srv_listen() starts the other
 * loops' threads and srv_close() joins them. */
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lu.h"
#include "store.h"

typedef struct srv_s srv_t;

/* What the server tells its owner through srv_config_t.on_event: the
 * nodes of its jobs joining, leaving and refused, and requests or
 * connections refused by a limit (docs/events.md#server). */
enum {
  SRV_EV_NODE_JOINED = 0,
  SRV_EV_NODE_LEFT,
  SRV_EV_NODE_REFUSED,
  SRV_EV_LIMIT_HIT
};

/* The limits that refuse a connection, a job or a request, one row each:
 * X(id, the launch server option, the label of
 * launch_server_refusals_total{limit}). A limit_hit event names the option
 * (docs/events.md), the metric the label (docs/monitoring.md). */
#define SRV_LIMITS(X)                                                          \
  X(MAX_MEMORY, "max-memory", "max_memory")                                    \
  X(MAX_CONNS, "max-conns", "max_conns")                                       \
  X(MAX_CONNS_PER_ADDR, "max-conns-per-addr", "conns_per_addr")                \
  X(MAX_CONNS_PER_JOB, "max-conns-per-job", "conns_per_job")                   \
  X(MAX_JOBS, "max-jobs", "max_jobs")                                          \
  X(MAX_JOBS_PER_ADDR, "max-jobs-per-addr", "jobs_per_addr")                   \
  X(MAX_FRAME, "max-frame", "max_frame")                                       \
  X(MAX_KEY, "max-key", "max_key")                                             \
  X(MAX_VALUE, "max-value", "max_value")                                       \
  X(MAX_KEYS, "max-keys", "max_keys")                                          \
  X(MAX_WAITS, "max-waits", "max_waits")                                       \
  X(MAX_STORE_BYTES, "max-store-bytes", "max_store_bytes")                     \
  X(MAX_INPUT_BYTES, "max-input-bytes", "max_input_bytes")                     \
  X(MAX_OUT_BYTES, "max-out-bytes", "max_out_bytes")                           \
  X(TLS_HANDSHAKES, "tls-handshakes", "tls_handshakes")                        \
  X(TLS_HANDSHAKES_PER_ADDR, "tls-handshakes-per-addr",                        \
    "tls_handshakes_per_addr")

enum {
#define SRV_LIMIT_ENUM(id, opt, label) SRV_LIMIT_##id,
  SRV_LIMITS(SRV_LIMIT_ENUM)
#undef SRV_LIMIT_ENUM
  SRV_LIMIT_COUNT
};

/* The option name of a limit ("max-memory"), "unknown" out of range. */
const char *srv_limit_name(int limit);
/* Its metric label ("max_memory"), NULL out of range. */
const char *srv_limit_label(int limit);

/* One event. Strings live for the call only; NULL: not known. */
typedef struct srv_event_s {
  int kind;            /* SRV_EV_* */
  const char *job;
  const char *host;    /* node events: the node's host name */
  const char *addr;    /* node events: its address; limit_hit: the peer */
  int64_t nproc;       /* node_joined */
  int64_t round;       /* node_left: the job's round; -1 none */
  const char *reason;  /* node_left, node_refused: why; limit_hit: what
                          was refused */
  int limit;           /* limit_hit: SRV_LIMIT_* */
  uint64_t value;      /* limit_hit: the limit's value */
  uint64_t count;      /* limit_hit: refusals by this limit since its last
                          event, this one included (>= 1) */
} srv_event_t;

/* Called under the server's lock, on any of its loops' threads, one call
 * at a time; it must not call the server. limit_hit comes at most once
 * per limit per srv_config_t.limit_event_ms (the refusals between are
 * counted into the next). */
typedef void (*srv_event_cb)(void *arg, const srv_event_t *ev);

typedef struct srv_config_s {
  size_t size;          /* sizeof(srv_config_t) */
  unsigned version;     /* 1 */
  const char *host;     /* NULL, "" or "::" = every address, dual-stack */
  int port;             /* 0 = the OS picks (srv_port() tells) */
  const char *unix_path;/* also listen here when set */
  const void *token;    /* server secret; NULL = no authentication. A client
                           proves it holds the secret itself, or the key
                           of its job (proto_job_key) */
  size_t token_len;
  const char *tcpstore_job;   /* job served to TCPStore clients */
  const char *tcpstore_allow; /* "127.0.0.0/8,10.1.0.0/16": TCPStore peers
                                 allowed while a token or TLS is set;
                                 NULL = none */
  uint32_t max_frame;         /* bytes of one request */
  uint32_t max_key;           /* bytes of one key */
  uint32_t max_value;         /* bytes of one value */
  uint32_t max_keys;          /* keys in one request */
  uint32_t max_waits;         /* pending waits per connection */
  uint32_t max_conns;         /* connections in all */
  uint32_t max_conns_per_job;
  uint32_t max_jobs;
  size_t max_store_bytes;     /* per job; 0 = half of max_memory */
  size_t max_out_bytes;       /* unsent replies of one connection before
                                 it is paused; 0 = max_memory / 8, at
                                 least max_value + 64 KiB */
  size_t max_in_bytes;        /* unfinished request bytes buffered by all
                                 connections; 0 = max_memory / 8 */
  const lu_log_t *log;        /* NULL = a default logger */
  /* version 1 continued (fields are only ever added here) */
  size_t max_memory;          /* what the server may hold for its clients:
                                 stores, buffers, connections, jobs */
  uint32_t max_conns_per_addr;/* connections of one client address */
  uint32_t max_jobs_per_addr; /* jobs one client address may create */
  uint32_t handshake_ms;      /* a connection not authenticated by then
                                 (or silent until then) is closed */
  uint32_t job_grace_ms;      /* a job without connection and data is
                                 forgotten after this */
  const char *tls_cert;       /* PEM: TLS on every TCP connection when set */
  const char *tls_key;
  const char *tls_ca;         /* require client certificates of this CA */
  uint32_t threads;           /* event loops (0 or 1: the caller's only);
                                 TCP connections are spread over them */
  srv_event_cb on_event;      /* NULL: none */
  void *event_arg;
  uint32_t limit_event_ms;    /* one limit_hit per limit per this; 0 = 10 s */
  uint32_t keep_ended_ms;     /* an ended job's record (end state, exit
                                 codes, root cause) stays this long after
                                 its last node left; 0 = forgotten at once */
  /* Knobs for benchmarks and debugging (`launch server --help-debug`,
   * LAUNCH_SERVER_*); SRV_CONFIG_INIT gives the product's values. */
  uint32_t trace_us;          /* log every event-loop callback this long or
                                 longer, and the longest at close; 0 off */
  uint32_t turn_us;           /* a connection runs its requests this long
                                 at most before the others get a turn */
  uint32_t pass_us;           /* a loop's pass runs large requests this
                                 long (or one piece) after the small ones */
  int lock_plain;             /* 1: the loops' lock without hungry waiters */
  int lock_spins;             /* pause-spins before a lock waiter sleeps */
  int big_cache_mb;           /* bound of the cache of freed big buffers
                                 (MiB; 0 none) */
} srv_config_t;

/* The default of `launch server --threads`: a quarter of the cores, 8 at
 * most, at least 1. */
int srv_default_threads(void);

#define SRV_CONFIG_INIT                                                        \
  {.size = sizeof(srv_config_t),                                               \
   .version = 1,                                                               \
   .port = RDZV_DEFAULT_PORT,                                                  \
   .tcpstore_job = "default",                                                  \
   .max_frame = 16u << 20,                                                     \
   .max_key = 8192,                                                            \
   .max_value = 8u << 20,                                                      \
   .max_keys = 128u * 1024,                                                    \
   .max_waits = 1024,                                                          \
   .max_conns = 65536,                                                         \
   .max_conns_per_job = 65536,                                                 \
   .max_jobs = 4096,                                                           \
   .max_memory = (size_t)512 << 20,                                            \
   .max_conns_per_addr = 1024,                                                 \
   .max_jobs_per_addr = 64,                                                    \
   .handshake_ms = 10000,                                                      \
   .job_grace_ms = 60000,                                                      \
   .keep_ended_ms = 600000,                                                    \
   .turn_us = 500,                                                             \
   .pass_us = 1000,                                                            \
   .lock_spins = 200,                                                          \
   .big_cache_mb = 16}

/* IN loop, cfg (copied). OUT *out. RET 0, RDZV_EINVAL (a bad option,
 * logged), RDZV_ENOMEM. The rendezvous module is installed. */
int srv_new(uv_loop_t *loop, const srv_config_t *cfg, srv_t **out);
/* Bind and listen. RET 0 or -errno (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
int srv_listen(srv_t *s);
/* The same on fd, a TCP socket already bound and listening, instead of
 * binding cfg.host and cfg.port (an agent opens its port as soon as it may
 * have to host: docs/rendezvous.md#host-failover). The server owns fd from
 * this call on, also when it fails. RET 0 or a libuv error. */
int srv_listen_fd(srv_t *s, int fd);
/* The bound TCP port (after srv_listen). */
int srv_port(const srv_t *s);
/* Close every connection and listener; cb runs once all handles are
 * closed, after which s is freed. */
void srv_close(srv_t *s, void (*cb)(void *arg), void *arg);

/* Requests by kind: native ops by their code (proto.h PROTO_OP_*, below
 * SRV_NATIVE_OPS; 0 counts the unknown), TCPStore ops by their canonical
 * number (tcpstore.h TS_*, WATCH_KEY at SRV_TS_WATCH). */
#define SRV_NATIVE_OPS 64
#define SRV_TS_OPS 20
#define SRV_TS_WATCH 19

typedef struct srv_stats_s {
  uint64_t conns_open, conns_total, conns_refused;
  uint64_t requests, bad_input;
  uint64_t waits_pending;
  uint64_t in_bytes;          /* request bytes buffered now */
  uint64_t jobs;
  uint64_t mem_used;          /* counted against max_memory */
  uint64_t paused;            /* connections waiting for their replies to
                                 drain or for memory */
  uint64_t native_ops[SRV_NATIVE_OPS];
  uint64_t ts_ops[SRV_TS_OPS];
  uint64_t refused[SRV_LIMIT_COUNT]; /* refusals by limit */
} srv_stats_t;
void srv_get_stats(const srv_t *s, srv_stats_t *st);

/* Every job with rendezvous state, as STATUS describes it (msg.h's
 * msg_status_t: running and ended jobs, their nodes, exit codes and root
 * cause): cb once per job, under the server's lock, with st valid for the
 * call only. Loop 0's thread (a status page). */
struct msg_status_s;
typedef void (*srv_job_cb)(void *arg, const struct msg_status_s *st);
void srv_each_job(srv_t *s, srv_job_cb cb, void *arg);

#endif /* SERVER_H */
