/* test_server_counts.c - the server's requests by kind and refusals by
 * limit (launch_server_requests_total{protocol,op},
 * launch_server_refusals_total{limit}, docs/monitoring.md): a server with
 * small limits; each request and each refusal moves its own counter by
 * exactly what was sent, and the text the agent serves carries them. */
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
  srv_get_stats(test_server_srv(), &st);
  return st;
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
  srv_stats_t s0, s1;
  rdzv_client_t *a, *a2, *b;
  int port, rc;
  const char *keys[5] = {"k0", "k1", "k2", "k3", "k4"};
  static char big[8192];
  lu_buf_t tb = LU_BUF_INIT;
  char *text;
  cfg.max_jobs = 3;
  cfg.max_conns_per_job = 1;
  cfg.max_keys = 4;
  cfg.max_store_bytes = 4096;
  cfg.tcpstore_job = "ts";
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
  printf("test_server_counts: ok (requests by op, refusals by limit)\n");
  return 0;
}
