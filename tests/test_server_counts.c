/* test_server_counts.c - the server's requests by kind and refusals by
 * limit (launch_server_requests_total{protocol,op},
 * launch_server_refusals_total{limit}, docs/monitoring.md): a server with
 * small limits; each request and each refusal moves its own counter by
 * exactly what was sent, and the text the agent serves carries them.
 * A TCPStore request over a limit (key, value, keys, request) and a TLS
 * handshake over the caps (in all, per address) each raise exactly one
 * limit_hit naming that limit (docs/events.md#server). */
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lu_buf.h"
#include "metrics.h"
#include "proto.h"
#include "rdzv.h"
#include "server.h"
#include "tcpstore.h"
#include "test.h"

static srv_stats_t stats(void) {
  srv_stats_t st;
  test_server_stats(&st);
  return st;
}

/* limit_hit events by limit (srv_config_t.on_event, the server's thread). */
typedef struct hits_s {
  pthread_mutex_t mu;
  int n[SRV_LIMIT_COUNT];
  uint64_t value[SRV_LIMIT_COUNT], count[SRV_LIMIT_COUNT]; /* the last's */
} hits_t;

static void on_event(void *arg, const srv_event_t *ev) {
  hits_t *h = arg;
  if (ev->kind != SRV_EV_LIMIT_HIT || ev->limit < 0 ||
      ev->limit >= SRV_LIMIT_COUNT)
    return;
  pthread_mutex_lock(&h->mu);
  h->n[ev->limit]++;
  h->value[ev->limit] = ev->value;
  h->count[ev->limit] = ev->count;
  pthread_mutex_unlock(&h->mu);
}

static hits_t hits_now(hits_t *h) {
  hits_t copy;
  pthread_mutex_lock(&h->mu);
  copy = *h;
  pthread_mutex_unlock(&h->mu);
  return copy;
}

/* Between s0/h0 and s1/h1: one refusal, by limit, and one limit_hit
 * naming it with its value; no other limit moved. */
static void one_refusal(const srv_stats_t *s0, const srv_stats_t *s1,
                        const hits_t *h0, const hits_t *h1, int limit,
                        uint64_t value) {
  for (int l = 0; l < SRV_LIMIT_COUNT; l++) {
    ASSERT_EQ(s0->refused[l] + (l == limit), s1->refused[l]);
    ASSERT_EQ(h0->n[l] + (l == limit), h1->n[l]);
  }
  ASSERT_EQ(value, h1->value[limit]);
  ASSERT_EQ(1, h1->count[limit]);
  printf("  %s: 1 refusal, 1 limit_hit (value %llu)\n",
         srv_limit_name(limit), (unsigned long long)value);
}

/* A TCPStore client's VALIDATE, then req (its header is enough: the
 * parser refuses on a length): the server closes the connection, and
 * counts and reports one refusal by limit. */
static void tcpstore_over(int port, hits_t *h, const uint8_t *req, size_t n,
                          int limit, uint64_t value) {
  uint8_t b[64];
  size_t k = 0;
  srv_stats_t s0, s1;
  hits_t h0, h1;
  int fd;
  s0 = stats();
  h0 = hits_now(h);
  fd = test_connect(port);
  b[k++] = TS_VALIDATE;
  for (int i = 0; i < 4; i++)
    b[k++] = (uint8_t)(TS_VALIDATION_MAGIC >> (8 * i));
  memcpy(b + k, req, n), k += n;
  ASSERT_EQ(0, test_send_all(fd, b, k));
  ASSERT(test_peer_closed(fd, test_ms(5000)));
  close(fd);
  s1 = stats();
  h1 = hits_now(h);
  one_refusal(&s0, &s1, &h0, &h1, limit, value);
}

static void le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* One request over each limit the TCPStore parser checks, its header
 * only: op, then a key's length or a key count; with a value, the key "k"
 * and the value's length. */
static void tcpstore_limits(int port, hits_t *h, const srv_config_t *cfg) {
  const struct { int op, limit; uint64_t first, vlen, value; } row[] = {
      {TS_SET, SRV_LIMIT_MAX_KEY, cfg->max_key + 1ull, 0, cfg->max_key},
      {TS_SET, SRV_LIMIT_MAX_VALUE, 1, cfg->max_value + 1ull, cfg->max_value},
      {TS_MULTI_GET, SRV_LIMIT_MAX_KEYS, cfg->max_keys + 1ull, 0,
       cfg->max_keys},
      /* a value within max_value in a request over max_frame */
      {TS_SET, SRV_LIMIT_MAX_FRAME, 1, cfg->max_frame + 1ull, cfg->max_frame},
  };
  for (size_t i = 0; i < sizeof(row) / sizeof(row[0]); i++) {
    uint8_t r[32];
    size_t n = 9;
    r[0] = (uint8_t)row[i].op;
    le64(r + 1, row[i].first);
    if (row[i].vlen) {
      r[n++] = 'k';
      le64(r + n, row[i].vlen);
      n += 8;
    }
    tcpstore_over(port, h, r, n, row[i].limit, row[i].value);
  }
}

/* A connection from src that sent a ClientHello's record header, once
 * the server has read it: accepted (conns_open), then charged a TLS
 * connection's memory (mem_used, in the callback that starts the
 * handshake). RET its fd. */
static int tls_hello(int port, const char *src) {
  static const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00};
  srv_stats_t st = stats();
  uint64_t open = st.conns_open, mem;
  int fd = test_connect_from(src, port);
  for (st = stats(); st.conns_open == open; st = stats())
    usleep(200);
  mem = st.mem_used;
  ASSERT_EQ(0, test_send_all(fd, hello, sizeof(hello)));
  for (st = stats(); st.mem_used == mem; st = stats())
    usleep(200);
  return fd;
}

static void sh(const char *cmd) {
  if (system(cmd) != 0)
    TEST_FAIL("%s: failed", cmd);
}

/* Half-done TLS handshakes (a ClientHello's record header, then silence)
 * up to the cap per address (SRV_TLS_HANDSHAKES_PER_ADDR, 64), then in
 * all (SRV_TLS_HANDSHAKES, 256: four addresses' 64): the next from the
 * same address, then from a fifth, is closed, counted and reported under
 * its own cap. */
static void tls_caps(hits_t *h) {
  static const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00};
  srv_config_t cfg = SRV_CONFIG_INIT;
  char cert[600], key[600], cmd[2048], src[32];
  srv_stats_t s0, s1;
  hits_t h0, h1;
  int fds[4 * 64], nfd = 0, port, fd;
  if (system("openssl version >/dev/null 2>&1") != 0) {
    printf("  note: no openssl command: the TLS caps are not tested\n");
    return;
  }
  snprintf(cert, sizeof(cert), "%s/server.pem", test_tmpdir());
  snprintf(key, sizeof(key), "%s/server.key", test_tmpdir());
  snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey ec -pkeyopt "
           "ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 "
           "-keyout %s -out %s >/dev/null 2>&1", key, cert);
  sh(cmd);
  cfg.tls_cert = cert;
  cfg.tls_key = key;
  cfg.on_event = on_event;
  cfg.event_arg = h;
  cfg.handshake_ms = 600000; /* the half-done ones stay while it runs */
  port = test_server_start(&cfg);
  for (int a = 0; a < 4; a++) {
    snprintf(src, sizeof(src), "127.0.0.%d", 30 + a);
    for (int i = 0; i < 64; i++)
      fds[nfd++] = tls_hello(port, src);
    if (a == 0) {
      s0 = stats();
      h0 = hits_now(h);
      fd = test_connect_from(src, port);
      ASSERT_EQ(0, test_send_all(fd, hello, sizeof(hello)));
      ASSERT(test_peer_closed(fd, test_ms(5000))); /* the 65th */
      close(fd);
      s1 = stats();
      h1 = hits_now(h);
      one_refusal(&s0, &s1, &h0, &h1, SRV_LIMIT_TLS_HANDSHAKES_PER_ADDR, 64);
    }
  }
  s0 = stats();
  h0 = hits_now(h);
  fd = test_connect_from("127.0.0.34", port);
  ASSERT_EQ(0, test_send_all(fd, hello, sizeof(hello)));
  ASSERT(test_peer_closed(fd, test_ms(5000)));
  close(fd);
  s1 = stats();
  h1 = hits_now(h);
  one_refusal(&s0, &s1, &h0, &h1, SRV_LIMIT_TLS_HANDSHAKES, 256);
  for (int i = 0; i < nfd; i++)
    close(fds[i]);
  test_server_stop();
}

static rdzv_client_t *open_client(int port, const char *job, int *rc) {
  char err[256];
  rdzv_client_t *c = NULL;
  *rc = test_rdzv_open(port, job, NULL, err, sizeof(err), &c);
  return c;
}

/* TCPStore 2.x: VALIDATE, then n SETs and one GET (whose reply ends it). */
static void tcpstore_sets(int port, int n) {
  uint8_t b[256], x[8];
  size_t k = 0;
  int fd = test_connect(port);
  b[k++] = TS_VALIDATE;
  for (int i = 0; i < 4; i++)
    b[k++] = (uint8_t)(TS_VALIDATION_MAGIC >> (8 * i));
  for (int i = 0; i <= n; i++) {
    b[k++] = i < n ? TS_SET : TS_GET;
    memcpy(b + k, "\x02\0\0\0\0\0\0\0/k", 10), k += 10;
    if (i < n)
      memcpy(b + k, "\x01\0\0\0\0\0\0\0v", 9), k += 9;
  }
  ASSERT_EQ((ssize_t)k, send(fd, b, k, MSG_NOSIGNAL));
  ASSERT_EQ(0, test_read_exact(fd, x, 8, test_ms(5000))); /* length 1 */
  ASSERT_EQ(0, test_read_exact(fd, x, 1, test_ms(5000)));
  ASSERT_EQ('v', x[0]);
  close(fd);
}

int main(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  hits_t hits;
  srv_stats_t s0, s1;
  rdzv_client_t *a, *a2, *b;
  int port, rc;
  const char *keys[5] = {"k0", "k1", "k2", "k3", "k4"};
  static char big[8192];
  lu_buf_t tb = LU_BUF_INIT;
  char *text;
  memset(&hits, 0, sizeof(hits));
  pthread_mutex_init(&hits.mu, NULL);
  cfg.max_jobs = 3;
  cfg.max_conns_per_job = 1;
  cfg.max_keys = 4;
  cfg.max_store_bytes = 4096;
  cfg.tcpstore_job = "ts";
  /* Above the native set of 8192 bytes refused by --max-store-bytes
   * below; a TCPStore value within max_value can be over max_frame. */
  cfg.max_key = 256;
  cfg.max_value = 16384;
  cfg.max_frame = 12288;
  cfg.on_event = on_event;
  cfg.event_arg = &hits;
  port = test_server_start(&cfg);

  /* Native ops: each kind counted once per request. */
  a = open_client(port, "a", &rc);
  ASSERT_EQ(0, rc);
  s0 = stats();
  for (int i = 0; i < 3; i++)
    ASSERT_OK(rdzv_set(a, "k", "v", 1, test_ms(5000)));
  s1 = stats();
  ASSERT_EQ(s0.native_ops[PROTO_OP_SET] + 3, s1.native_ops[PROTO_OP_SET]);
  ASSERT_EQ(s0.native_ops[PROTO_OP_GET], s1.native_ops[PROTO_OP_GET]);
  ASSERT(s1.native_ops[PROTO_OP_HELLO] >= 1);

  /* Refusals, one limit at a time, each counted once. */
  s0 = stats();
  a2 = open_client(port, "a", &rc); /* a second connection to job a */
  ASSERT(rc != 0);
  s1 = stats();
  ASSERT_EQ(s0.refused[SRV_LIMIT_MAX_CONNS_PER_JOB] + 1,
            s1.refused[SRV_LIMIT_MAX_CONNS_PER_JOB]);
  b = open_client(port, "b", &rc); /* job b */
  ASSERT_EQ(0, rc);
  /* TCPStore ops, by their own names (job ts: the third of three). */
  s0 = stats();
  tcpstore_sets(port, 4);
  s1 = stats();
  ASSERT_EQ(s0.ts_ops[TS_SET] + 4, s1.ts_ops[TS_SET]);
  ASSERT_EQ(s0.ts_ops[TS_GET] + 1, s1.ts_ops[TS_GET]);
  ASSERT_EQ(s0.ts_ops[TS_VALIDATE] + 1, s1.ts_ops[TS_VALIDATE]);
  /* TCPStore requests over a limit, each by its own (before the native
   * refusals below: one limit_hit per limit per 10 s). */
  printf("TCPStore requests over a limit:\n");
  tcpstore_limits(port, &hits, &cfg);

  s0 = stats();
  ASSERT(open_client(port, "c", &rc) == NULL && rc != 0); /* a third */
  s1 = stats();
  ASSERT_EQ(s0.refused[SRV_LIMIT_MAX_JOBS] + 1, s1.refused[SRV_LIMIT_MAX_JOBS]);
  s0 = s1;
  {
    rdzv_value_t v[5];
    ASSERT(rdzv_multi_get(b, keys, 5, v, test_ms(2000)) != 0);
  }
  s1 = stats();
  ASSERT_EQ(s0.refused[SRV_LIMIT_MAX_KEYS] + 1, s1.refused[SRV_LIMIT_MAX_KEYS]);
  ASSERT_EQ(s0.native_ops[PROTO_OP_MGET] + 1, s1.native_ops[PROTO_OP_MGET]);
  s0 = s1;
  memset(big, 'x', sizeof(big));
  ASSERT(rdzv_set(b, "big", big, sizeof(big), test_ms(5000)) != 0);
  s1 = stats();
  ASSERT_EQ(s0.refused[SRV_LIMIT_MAX_STORE_BYTES] + 1,
            s1.refused[SRV_LIMIT_MAX_STORE_BYTES]);
  ASSERT_EQ(s0.refused[SRV_LIMIT_MAX_CONNS], s1.refused[SRV_LIMIT_MAX_CONNS]);
  (void)a2;

  /* The text the agent and `launch server` serve. */
  met_server(&tb, "node=\"n\"", &s1, 1e6);
  ASSERT_EQ(0, lu_buf_finish(&tb, &text, NULL));
  ASSERT_CONTAINS(text, "# TYPE launch_server_requests_total counter\n");
  {
    char want[200];
    snprintf(want, sizeof(want), "launch_server_requests_total{node=\"n\","
             "protocol=\"native\",op=\"set\"} %llu\n",
             (unsigned long long)s1.native_ops[PROTO_OP_SET]);
    ASSERT_CONTAINS(text, want);
    snprintf(want, sizeof(want), "launch_server_requests_total{node=\"n\","
             "protocol=\"tcpstore\",op=\"set\"} %llu\n",
             (unsigned long long)s1.ts_ops[TS_SET]);
    ASSERT_CONTAINS(text, want);
  }
  ASSERT_CONTAINS(text, "launch_server_requests_total{node=\"n\","
                        "protocol=\"tcpstore\",op=\"watch_key\"} 0\n");
  ASSERT_CONTAINS(text, "launch_server_refusals_total{node=\"n\","
                        "limit=\"max_jobs\"} 1\n");
  ASSERT_CONTAINS(text, "launch_server_refusals_total{node=\"n\","
                        "limit=\"conns_per_job\"} 1\n");
  ASSERT_CONTAINS(text, "launch_server_refusals_total{node=\"n\","
                        "limit=\"max_conns\"} 0\n");
  ASSERT(strstr(text, "op=\"unknown\"") == NULL);
  free(text);
  rdzv_close(b);
  rdzv_close(a);
  test_server_stop();
  printf("TLS handshakes over the caps:\n");
  tls_caps(&hits);
  pthread_mutex_destroy(&hits.mu);
  printf("test_server_counts: ok (requests by op, refusals by limit)\n");
  return 0;
}
