/* aclient.h - the agent's asynchronous client of the native protocol, on
 * the agent's libuv loop: connect (retrying while the server is not up yet),
 * authenticate, send requests whose replies arrive through callbacks, and
 * receive pushes (RESTART, SHUTDOWN). Loop thread only. */
#ifndef ACLIENT_H
#define ACLIENT_H

#include <uv.h>

#include "lu.h"
#include "proto.h"

typedef struct ac_s ac_t;

/* status 0 with the reply message, or a negative code with m == NULL when
 * the request failed in transport (connection lost: RDZV_ECLOSED). */
typedef void (*ac_reply_cb)(ac_t *a, int status, const proto_msg_t *m,
                            void *arg);
typedef void (*ac_push_cb)(ac_t *a, const proto_msg_t *m, void *arg);
/* Connected and authenticated (0), or gave up (negative). */
typedef void (*ac_connect_cb)(ac_t *a, int status, void *arg);
/* The connection broke after it was established. */
typedef void (*ac_lost_cb)(ac_t *a, int status, void *arg);

typedef struct ac_config_s {
  const char *host;       /* server host or address */
  int port;
  const char *local_addr; /* bind the connection to it ("" / NULL: any) */
  const char *job;
  const char *role;
  const void *token;
  size_t token_len;
  int connect_timeout_ms; /* keep retrying refused connects this long */
  const lu_log_t *log;
  /* The server is taken for lost (on_lost, -ETIMEDOUT) when a request
   * waits this long with nothing at all heard from the server; 0 = never.
   * Time the agent's own loop stood still (the host was stopped) is
   * forgiven. */
  int reply_timeout_ms;
  const char *tls_ca;     /* TLS when set: verify the server with it */
  const char *tls_cert;   /* this agent's certificate (mutual TLS) */
  const char *tls_key;
} ac_config_t;

/* OUT *out (cfg copied). RET 0, RDZV_ENOMEM, or RDZV_EINVAL when a TLS
 * file does not load (logged). */
int ac_new(uv_loop_t *loop, const ac_config_t *cfg, ac_push_cb on_push,
           ac_lost_cb on_lost, void *arg, ac_t **out);
/* Start connecting; cb runs once. RET 0 or an error (cb not called). */
int ac_connect(ac_t *a, ac_connect_cb cb);
/* Build a request: returns the packer positioned after [0, id, op]; pack
 * exactly nargs more objects, then ac_send. */
msgpack_packer *ac_begin(ac_t *a, int op, uint32_t nargs);
/* Send what ac_begin started. cb may be NULL (reply ignored).
 * RET 0, or an error (cb not called). */
int ac_send(ac_t *a, ac_reply_cb cb, void *arg);
/* Send what ac_begin started as a request the server answers with nothing
 * (a quiet HEARTBEAT): nothing waits for a reply. RET 0 or an error. */
int ac_send_noreply(ac_t *a);
/* uv_now() when bytes last came from the server. */
uint64_t ac_last_rx_ms(const ac_t *a);
/* "a.b.c.d" / "v6" of this end of the connection (after connect). */
const char *ac_local_ip(const ac_t *a);
/* While connecting: why the last attempt failed (refused, does not
 * resolve, no route, timed out; "" before the first), and how many failed. */
const char *ac_wait_reason(const ac_t *a, int *attempts);
/* 1 when the last failed attempt was refused (the machine answered and
 * nothing listened there), 0 when it was unanswered or did not resolve. */
int ac_wait_refused(const ac_t *a);
/* Before ac_connect: give up sooner, after ms, when every attempt until
 * then was refused (connect's callback gets -ETIMEDOUT as at the limit).
 * A host failover's walk: a successor that lives listens at once. */
void ac_set_refused_limit(ac_t *a, int64_t ms);
/* 1 when connect gave up at that limit (every attempt refused). */
int ac_refused_out(const ac_t *a);
/* Before ac_connect: a connection the server's kernel took may wait for
 * the server's answer until the connect limit, not the reply bound (a
 * successor's port is open before its server runs). */
void ac_set_hello_waits(ac_t *a);
/* Message of the last error (connect or server). */
const char *ac_last_error(const ac_t *a);
/* Close; pending requests get RDZV_ECANCELED; cb runs when freed. */
void ac_close(ac_t *a, void (*cb)(void *arg), void *arg);

#endif /* ACLIENT_H */
