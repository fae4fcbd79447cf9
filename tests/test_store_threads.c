/* test_store_threads.c - the server on 4 event loops (srv_config.threads):
 * connections are spread over the loops, and what a client relies on holds
 * across them: a write on one loop wakes waits on the others, a deadline
 * (a timer of loop 0) answers a wait on another loop, replies of pipelined
 * requests keep their order on every connection, ADD is atomic over many
 * clients, requests sent just before a half-close all run, a barrier
 * opens once for all its members wherever they are,
 * jobs stay apart, and connections stopped in their handshake are closed
 * at the handshake deadline whichever loop holds them. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdzv.h"
#include "server.h"
#include "tcpstore.h"
#include "test.h"

#define LOOPS 4

static int port;

static int ntasks(void) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  ASSERT(d != NULL);
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static rdzv_client_t *open_client(const char *job) {
  char err[256];
  rdzv_client_t *c = NULL;
  ASSERT_EQ(0, test_rdzv_open(port, job, NULL, err, sizeof(err), &c));
  return c;
}

static uint64_t waits_pending(void) {
  srv_stats_t st;
  test_server_stats(&st);
  return st.waits_pending;
}

/* ---- waits woken from another loop -------------------------------------- */

#define NWAIT 8

typedef struct waiter_s {
  pthread_t t;
  rdzv_client_t *c;
  int idx, rc, timeout_ms;
  char got[32];
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  char key[32];
  void *v = NULL;
  size_t n = 0;
  snprintf(key, sizeof(key), "wake/%d", w->idx);
  w->rc = rdzv_get(w->c, key, &v, &n, w->timeout_ms);
  if (w->rc == 0)
    snprintf(w->got, sizeof(w->got), "%.*s", (int)n, (char *)v);
  rdzv_free(v);
  return NULL;
}

static void test_cross_loop_wake(void) {
  waiter_t w[NWAIT];
  rdzv_client_t *setter;
  /* Consecutive connections go to consecutive loops: the waiters sit on
   * every loop, the setter on one of them. */
  for (int i = 0; i < NWAIT; i++) {
    w[i] = (waiter_t){.idx = i, .timeout_ms = test_ms(20000)};
    w[i].c = open_client("wake");
  }
  setter = open_client("wake");
  for (int i = 0; i < NWAIT; i++)
    ASSERT_EQ(0, pthread_create(&w[i].t, NULL, waiter_main, &w[i]));
  for (int i = 0; i < 2000 && waits_pending() < NWAIT; i++)
    usleep(5000);
  ASSERT_EQ(NWAIT, waits_pending());
  for (int i = 0; i < NWAIT; i++) {
    char key[32], val[32];
    snprintf(key, sizeof(key), "wake/%d", i);
    snprintf(val, sizeof(val), "v%d", i * 7);
    ASSERT_EQ(0, rdzv_set(setter, key, val, strlen(val), 5000));
  }
  for (int i = 0; i < NWAIT; i++) {
    char want[32];
    pthread_join(w[i].t, NULL);
    snprintf(want, sizeof(want), "v%d", i * 7);
    ASSERT_EQ(0, w[i].rc);
    ASSERT_STR_EQ(want, w[i].got);
    rdzv_close(w[i].c);
  }
  ASSERT_EQ(0, waits_pending());
  /* A deadline is loop 0's timer; the wait it ends is on each loop. */
  for (int i = 0; i < LOOPS; i++) {
    w[i] = (waiter_t){.idx = 100 + i, .timeout_ms = 200};
    w[i].c = open_client("wake");
    ASSERT_EQ(0, pthread_create(&w[i].t, NULL, waiter_main, &w[i]));
  }
  for (int i = 0; i < LOOPS; i++) {
    pthread_join(w[i].t, NULL);
    ASSERT_EQ(-ETIMEDOUT, w[i].rc);
    rdzv_close(w[i].c);
  }
  rdzv_close(setter);
}

/* ---- order of replies on pipelined connections -------------------------- */

#define NPIPE 300

typedef struct piper_s {
  pthread_t t;
  int idx, fd, ok;
  int64_t last_add;
} piper_t;

static size_t put_str(uint8_t *p, const char *s) {
  uint64_t n = strlen(s);
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(n >> (8 * i));
  memcpy(p + 8, s, n);
  return 8 + n;
}

/* One write of NPIPE x (SET /o<idx> = i, GET /o<idx>, ADD /shared 1), in
 * TCPStore's 2.x numbering; the replies must come in that order. */
static void *piper_main(void *arg) {
  piper_t *p = arg;
  uint8_t *req = malloc((size_t)NPIPE * 128 + 8), *q = req;
  char key[16];
  snprintf(key, sizeof(key), "/o%d", p->idx);
  *q++ = TS_VALIDATE;
  for (int i = 0; i < 4; i++)
    *q++ = (uint8_t)((uint32_t)TS_VALIDATION_MAGIC >> (8 * i));
  for (int i = 0; i < NPIPE; i++) {
    char val[16];
    snprintf(val, sizeof(val), "%d", i);
    *q++ = TS_SET;
    q += put_str(q, key);
    q += put_str(q, val);
    *q++ = TS_GET;
    q += put_str(q, key);
    *q++ = TS_ADD;
    q += put_str(q, "/shared");
    memset(q, 0, 8);
    q[0] = 1;
    q += 8;
  }
  p->ok = test_send_all(p->fd, req, (size_t)(q - req)) == 0;
  free(req);
  for (int i = 0; i < NPIPE && p->ok; i++) {
    uint8_t len[8], v[16], num[8];
    char want[16];
    uint64_t n = 0;
    int64_t add = 0;
    if (test_read_exact(p->fd, len, 8, test_ms(10000)) != 0)
      break;
    for (int k = 7; k >= 0; k--)
      n = n << 8 | len[k];
    snprintf(want, sizeof(want), "%d", i);
    if (n != strlen(want) || test_read_exact(p->fd, v, n, test_ms(10000)) ||
        memcmp(v, want, n) != 0 ||
        test_read_exact(p->fd, num, 8, test_ms(10000)) != 0) {
      p->ok = 0;
      break;
    }
    for (int k = 7; k >= 0; k--)
      add = (int64_t)((uint64_t)add << 8 | num[k]);
    if (add <= p->last_add)
      p->ok = 0; /* each connection sees the counter only grow */
    p->last_add = add;
  }
  return NULL;
}

static void test_pipelined_order(void) {
  piper_t p[2 * LOOPS];
  rdzv_client_t *c;
  void *v = NULL;
  size_t n = 0;
  for (int i = 0; i < 2 * LOOPS; i++) {
    p[i] = (piper_t){.idx = i, .last_add = 0};
    p[i].fd = test_connect(port);
  }
  for (int i = 0; i < 2 * LOOPS; i++)
    ASSERT_EQ(0, pthread_create(&p[i].t, NULL, piper_main, &p[i]));
  for (int i = 0; i < 2 * LOOPS; i++) {
    pthread_join(p[i].t, NULL);
    ASSERT(p[i].ok);
    close(p[i].fd);
  }
  /* TCPStore clients are served the job "default". */
  c = open_client("default");
  ASSERT_EQ(0, rdzv_get(c, "/shared", &v, &n, 5000));
  ASSERT_EQ(2 * LOOPS * NPIPE, atoi(v));
  rdzv_free(v);
  rdzv_close(c);
}

/* A client that writes requests and half-closes at once, without reading
 * a reply, still has every one of them run: the end of its input comes
 * after them, on whichever loop. 32 ADDs of 32 bytes fill the server's
 * first input buffer (1 KiB, empty after the first ADD's reply) exactly:
 * the end of input then comes in the same pass as the requests. */
#define CLOSED_KEY "/closed-1234567" /* an ADD of 17 + 15 bytes */
#define NCLOSED 32

static uint8_t *put_add(uint8_t *q) {
  *q++ = TS_ADD;
  q += put_str(q, CLOSED_KEY);
  memset(q, 0, 8);
  q[0] = 1;
  return q + 8;
}

static void test_sent_then_closed(void) {
  int fd[2 * LOOPS];
  uint8_t req[NCLOSED * 32], *q = req, num[8];
  rdzv_client_t *c;
  void *v = NULL;
  size_t n = 0;
  for (int i = 0; i < 2 * LOOPS; i++) {
    fd[i] = test_connect(port);
    q = req;
    *q++ = TS_VALIDATE;
    for (int k = 0; k < 4; k++)
      *q++ = (uint8_t)((uint32_t)TS_VALIDATION_MAGIC >> (8 * k));
    q = put_add(q);
    ASSERT_EQ(0, test_send_all(fd[i], req, (size_t)(q - req)));
    ASSERT_EQ(0, test_read_exact(fd[i], num, 8, test_ms(10000)));
  }
  q = req;
  for (int k = 0; k < NCLOSED; k++)
    q = put_add(q);
  ASSERT_EQ(sizeof(req), (size_t)(q - req));
  for (int i = 0; i < 2 * LOOPS; i++) {
    ASSERT_EQ(0, test_send_all(fd[i], req, sizeof(req)));
    ASSERT_EQ(0, shutdown(fd[i], SHUT_WR));
  }
  for (int i = 0; i < 2 * LOOPS; i++) {
    ASSERT(test_peer_closed(fd[i], test_ms(10000)));
    close(fd[i]);
  }
  c = open_client("default");
  ASSERT_EQ(0, rdzv_get(c, CLOSED_KEY, &v, &n, 5000));
  ASSERT_EQ(2 * LOOPS * (NCLOSED + 1), atoi(v));
  rdzv_free(v);
  rdzv_close(c);
}

/* ---- ADD from many clients ------------------------------------------------ */

#define NADD_CLIENTS 12
#define NADD 300

typedef struct adder_s {
  pthread_t t;
  rdzv_client_t *c;
  int64_t got[NADD];
  int rc;
} adder_t;

static void *adder_main(void *arg) {
  adder_t *a = arg;
  for (int i = 0; i < NADD && a->rc == 0; i++)
    a->rc = rdzv_add(a->c, "count", 1, &a->got[i], 10000);
  return NULL;
}

static void test_add_atomic(void) {
  static adder_t a[NADD_CLIENTS];
  static uint8_t seen[NADD_CLIENTS * NADD + 1];
  for (int i = 0; i < NADD_CLIENTS; i++) {
    a[i].c = open_client("adds");
    a[i].rc = 0;
  }
  for (int i = 0; i < NADD_CLIENTS; i++)
    ASSERT_EQ(0, pthread_create(&a[i].t, NULL, adder_main, &a[i]));
  for (int i = 0; i < NADD_CLIENTS; i++) {
    pthread_join(a[i].t, NULL);
    ASSERT_EQ(0, a[i].rc);
  }
  /* Every result from 1 to the total, each exactly once. */
  for (int i = 0; i < NADD_CLIENTS; i++)
    for (int k = 0; k < NADD; k++) {
      int64_t r = a[i].got[k];
      ASSERT(r >= 1 && r <= NADD_CLIENTS * NADD);
      ASSERT_EQ(0, seen[r]);
      seen[r] = 1;
    }
  for (int i = 0; i < NADD_CLIENTS; i++)
    rdzv_close(a[i].c);
}

/* ---- a barrier over every loop -------------------------------------------- */

#define NBAR 9
#define BAR_ROUNDS 10

typedef struct bar_s {
  pthread_t t;
  rdzv_client_t *c;
  int bad;
} bar_t;

static void *bar_main(void *arg) {
  bar_t *b = arg;
  for (int r = 0; r < BAR_ROUNDS && !b->bad; r++) {
    char key[32];
    void *v = NULL;
    size_t n = 0;
    snprintf(key, sizeof(key), "arrived/%d", r);
    if (rdzv_add(b->c, key, 1, NULL, 10000) != 0 ||
        rdzv_barrier(b->c, "bar", NBAR, test_ms(20000)) != 0 ||
        rdzv_get(b->c, key, &v, &n, 0) != 0 || atoi(v) != NBAR)
      b->bad = 1; /* the barrier opened before everyone arrived */
    rdzv_free(v);
  }
  return NULL;
}

static void test_barrier(void) {
  bar_t b[NBAR];
  for (int i = 0; i < NBAR; i++) {
    b[i].c = open_client("bar");
    b[i].bad = 0;
  }
  for (int i = 0; i < NBAR; i++)
    ASSERT_EQ(0, pthread_create(&b[i].t, NULL, bar_main, &b[i]));
  for (int i = 0; i < NBAR; i++) {
    pthread_join(b[i].t, NULL);
    ASSERT_EQ(0, b[i].bad);
    rdzv_close(b[i].c);
  }
}

/* ---- jobs apart, handshake deadline --------------------------------------- */

static void test_jobs_apart(void) {
  rdzv_client_t *c[LOOPS];
  for (int i = 0; i < LOOPS; i++) {
    char job[16], val[16];
    snprintf(job, sizeof(job), "iso%d", i % 2);
    snprintf(val, sizeof(val), "job%d", i % 2);
    c[i] = open_client(job);
    if (i < 2)
      ASSERT_EQ(0, rdzv_set(c[i], "same", val, strlen(val), 5000));
  }
  for (int i = 0; i < LOOPS; i++) {
    char want[16];
    void *v = NULL;
    size_t n = 0;
    int64_t nk = 0;
    snprintf(want, sizeof(want), "job%d", i % 2);
    ASSERT_EQ(0, rdzv_get(c[i], "same", &v, &n, 0));
    ASSERT_STR_EQ(want, (char *)v);
    rdzv_free(v);
    ASSERT_EQ(0, rdzv_num_keys(c[i], &nk, 5000));
    ASSERT_EQ(1, nk);
  }
  for (int i = 0; i < LOOPS; i++)
    rdzv_close(c[i]);
}

/* Connections of every loop that started a handshake and stopped are
 * closed at the deadline (silent ones are kept while there is room, for
 * PyTorch 1.13's TCPStore clients: test_adv_lockout). */
static void test_handshake_deadline(void) {
  int fd[LOOPS];
  for (int i = 0; i < LOOPS; i++) {
    fd[i] = test_connect(port);
    ASSERT_EQ(0, test_send_all(fd[i], "RDZV", 4));
  }
  for (int i = 0; i < LOOPS; i++) {
    ASSERT(test_peer_closed(fd[i], test_ms(10000)));
    close(fd[i]);
  }
}

int main(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  int before = ntasks();
  cfg.threads = LOOPS;
  cfg.handshake_ms = 1500;
  port = test_server_start(&cfg);
  /* The test's own server thread and LOOPS - 1 more (a sanitizer may
   * have started one of its own too). */
  ASSERT(ntasks() >= before + LOOPS);
  test_cross_loop_wake();
  test_pipelined_order();
  test_sent_then_closed();
  test_add_atomic();
  test_barrier();
  test_jobs_apart();
  test_handshake_deadline();
  test_server_stop();
  printf("test_store_threads: ok\n");
  return 0;
}
