/* server.h - the launch rendezvous server: a libuv TCP (and unix socket)
 * listener serving the native protocol and PyTorch's TCPStore protocol
 * (1.13 and >= 2.2 numberings) from one store per job.
 *
 * The caller owns the loop: srv_new() registers handles on it, the caller
 * runs it, srv_close() closes every handle and calls cb once they are gone.
 * Loop thread only. */
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lu.h"
#include "store.h"

typedef struct srv_s srv_t;

typedef struct srv_config_s {
  size_t size;          /* sizeof(srv_config_t) */
  unsigned version;     /* 1 */
  const char *host;     /* NULL, "" or "::" = every address, dual-stack */
  int port;             /* 0 = the OS picks (srv_port() tells) */
  const char *unix_path;/* also listen here when set */
  const void *token;    /* shared secret; NULL = no authentication */
  size_t token_len;
  const char *tcpstore_job;   /* job served to TCPStore clients */
  const char *tcpstore_allow; /* "127.0.0.0/8,10.1.0.0/16": TCPStore peers
                                 allowed while a token is set; NULL = none */
  uint32_t max_frame;         /* bytes of one request */
  uint32_t max_key;           /* bytes of one key */
  uint32_t max_value;         /* bytes of one value */
  uint32_t max_keys;          /* keys in one request */
  uint32_t max_waits;         /* pending waits per connection */
  uint32_t max_conns;         /* connections in all */
  uint32_t max_conns_per_job;
  uint32_t max_jobs;
  size_t max_store_bytes;     /* per job */
  size_t max_out_bytes;       /* unsent reply bytes before reading pauses */
  size_t max_in_bytes;        /* buffered request bytes, all connections */
  const lu_log_t *log;        /* NULL = a default logger */
} srv_config_t;

#define SRV_CONFIG_INIT                                                        \
  {sizeof(srv_config_t), 1, NULL, RDZV_DEFAULT_PORT, NULL, NULL, 0,            \
   "default", NULL, 16u << 20, 8192, 8u << 20, 128u * 1024, 1024, 65536,       \
   65536, 4096, (size_t)1 << 30, 64u << 20, (size_t)512 << 20, NULL}

/* IN loop, cfg (copied). OUT *out. RET 0, RDZV_EINVAL, RDZV_ENOMEM. */
int srv_new(uv_loop_t *loop, const srv_config_t *cfg, srv_t **out);
/* Bind and listen. RET 0 or -errno (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
int srv_listen(srv_t *s);
/* The bound TCP port (after srv_listen). */
int srv_port(const srv_t *s);
/* Close every connection and listener; cb runs once all handles are
 * closed, after which s is freed. */
void srv_close(srv_t *s, void (*cb)(void *arg), void *arg);
/* The store of a job, created if needed (for an embedding agent).
 * RET NULL when out of memory or over max_jobs. */
store_t *srv_job_store(srv_t *s, const char *job);

typedef struct srv_stats_s {
  uint64_t conns_open, conns_total, conns_refused;
  uint64_t requests, bad_input;
  uint64_t waits_pending;
  uint64_t in_bytes;          /* request bytes buffered now */
  uint64_t jobs;
} srv_stats_t;
void srv_get_stats(const srv_t *s, srv_stats_t *st);

#endif /* SERVER_H */
