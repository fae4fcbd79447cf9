/* srv_int.h - internals shared by server.c (connections), srv_native.c
 * (native ops), tcpstore.c (TCPStore dialects) and the rendezvous module. */
#ifndef SRV_INT_H
#define SRV_INT_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include "proto.h"
#include "server.h"
#include "store.h"
#include "tcpstore.h"

#define SRV_MAGIC 0x53525631u  /* "SRV1" */
#define CONN_MAGIC 0x434f4e4eu /* "CONN" */

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
#define LIST_ENTRY(ptr, type, field)                                           \
  ((type *)((char *)(ptr)-offsetof(type, field)))

typedef struct job_s job_t;
typedef struct conn_s conn_t;
typedef struct pend_s pend_t;

struct job_s {
  job_t *next;
  srv_t *srv;
  store_t *store;
  uint32_t nconns;
  void *rdv; /* rendezvous state (rendezvous module) */
  char name[];
};

enum {
  CONN_SNIFF = 0,   /* no byte seen yet */
  CONN_HELLO,       /* native magic seen, waiting for HELLO */
  CONN_NATIVE,      /* authenticated native client */
  CONN_TS,          /* TCPStore client (dialect in conn->ts_dialect) */
  CONN_CLOSING
};

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
  int state;
  int ts_dialect;       /* TS_DIALECT_* once state == CONN_TS */
  int reading;          /* uv_read_start active */
  int bad_logged;       /* bad input from this peer already logged */
  int broken;           /* a reply could not be queued: close at flush */
  int close_after_flush;/* send what is queued (an error), then close */
  uint64_t id;
  char peer[80];
  struct sockaddr_storage peer_addr;
  char role[16];
  list_t link;          /* in srv->conns */
  list_t dirty_link;    /* in srv->dirty while out has bytes */
  list_t pends;         /* native pending ops (pend_t) */
  uint32_t npend;       /* pending waits (native or TCPStore) */
  /* Input: bytes received and not yet parsed. */
  uint8_t *in;
  size_t in_len, in_cap;
  int in_full;          /* the input budget stopped this buffer growing */
  /* Output: replies not yet handed to the kernel. */
  proto_enc_t out;
  size_t inflight;      /* bytes in uv_write requests */
  /* TCPStore state. */
  store_waiter_t **ts_waits; /* outstanding TCPStore waits */
  uint32_t ts_nwaits, ts_capwaits;
  store_watch_t **ts_watches;
  uint32_t ts_nwatches, ts_capwatches;
  uint8_t nonce[PROTO_NONCE_LEN];
  void *rdv; /* rendezvous membership of this connection */
};

/* A native request that waits: GET/WAIT/MGET with a wait, BARRIER. */
struct pend_s {
  list_t link;          /* in conn->pends */
  conn_t *c;
  uint64_t reqid;
  int op;
  uint64_t deadline_ms; /* 0 = none */
  size_t heap_idx;      /* index in srv->heap, or SIZE_MAX */
  store_waiter_t *w;
  store_bwait_t *bw;
  uint32_t nkeys;
  store_key_t *keys;    /* copies, for replying with values (GET, MGET) */
};

struct srv_s {
  unsigned magic;
  uv_loop_t *loop;
  srv_config_t cfg;
  lu_log_t log;
  char *host, *unix_path, *tcpstore_job;
  uint8_t *token;
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
  job_t *jobs;
  uint32_t njobs;
  list_t conns;
  list_t dirty;
  uv_check_t flush_check;
  uv_idle_t flush_idle;
  uv_timer_t timer;
  pend_t **heap;
  size_t heap_len, heap_cap;
  uint64_t next_conn_id;
  uint64_t refused_log_ms;
  uint64_t bad_window_ms, bad_in_window, bad_suppressed;
  srv_stats_t stats;
  /* Rendezvous ops (PROTO_OP_JOIN and up), installed by the rendezvous
   * module; NULL answers RDZV_ENOTSUP. */
  void (*rdv_op)(conn_t *c, const proto_msg_t *m);
  void (*rdv_conn_closed)(conn_t *c);
  void (*rdv_job_free)(job_t *j);
  uv_timer_t rdv_timer; /* rendezvous deadlines (armed by the module) */
  void *rdv_data;
  int closing;
  int pending_closes;
  int closing_conns; /* connections between uv_close and its callback */
  void (*close_cb)(void *arg);
  void *close_arg;
};

/* server.c */
job_t *srv__job(srv_t *s, const char *name, size_t len);
void srv__conn_close(conn_t *c);
void srv__mark_dirty(conn_t *c);
/* Log bad input from this connection once, count it. */
void srv__bad_input(conn_t *c, const char *fmt, ...) LU_PRINTF(2, 3);
int srv__pend_arm(srv_t *s, pend_t *p, int64_t wait_ms);
void srv__pend_disarm(srv_t *s, pend_t *p);

/* srv_native.c: replies. reply_begin packs [REPLY, id, status] and leaves
 * room for nres more elements; reply_end finishes the frame. */
void srv__reply_begin(conn_t *c, uint64_t id, int status, uint32_t nres);
void srv__reply_end(conn_t *c);
void srv__reply_ok(conn_t *c, uint64_t id);
void srv__reply_err(conn_t *c, uint64_t id, int status, const char *fmt, ...)
    LU_PRINTF(4, 5);
/* Push [PUSH, 0, ev, ...nargs]: finish with srv__reply_end. */
void srv__push_begin(conn_t *c, int ev, uint32_t nargs);

/* srv_native.c */
void srv__native_frame(conn_t *c, const uint8_t *body, size_t n);
void srv__native_hello_challenge(conn_t *c);
void srv__native_pend_timeout(pend_t *p);
void srv__native_conn_closed(conn_t *c);

/* tcpstore.c: consume as many whole requests as the buffer holds.
 * RET bytes consumed, or <0 to close the connection. */
ssize_t srv__ts_input(conn_t *c, const uint8_t *buf, size_t n);
void srv__ts_conn_closed(conn_t *c);

#endif /* SRV_INT_H */
