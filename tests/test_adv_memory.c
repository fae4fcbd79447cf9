/* test_adv_memory.c - every memory attack of issue #11 at once, against a
 * `launch server --max-memory 128M --max-store-bytes 16M`:
 *   A1 one MGET of the same 8 MiB key 131,072 times, never read;
 *   A2 2,000 pipelined GETs of a 1 MiB value, never read;
 *   A3 TCPStore MULTI_GET of one 8 MiB key 131,072 times, and 2,000
 *      pipelined TCPStore GETs of 1 MiB, never read;
 *   A4 four 1.13 WATCH_KEY watchers that never read, 100 SETs of 1 MiB;
 *   A5 40 WAITs of 1,000 distinct 8 KiB keys each (16 MiB store cap);
 *   A6 8 jobs each filling its 16 MiB store;
 *   A7 34 unauthenticated connections sending 16 MiB frames.
 * The attackers come from 127.0.0.22-26 (addresses no agent of another
 * test listens on). Meanwhile a well-behaved client (librdzv, its own job) sets and gets a
 * small key in a loop, and a new client connects once every attack was
 * sent. Asserted:
 * - the server's RSS stays under the cap + 16 MiB (sampled every 5 ms);
 *   under ASan, whose shadow adds an eighth to what is allocated, under
 *   the RSS at start + the cap * 9/8 + 16 MiB;
 * - each attack meets its documented answer: A1 RDZV_ETOOBIG, A3's
 *   MULTI_GET closed, A4's watchers closed while the writer goes on, A5
 *   RDZV_ETOOBIG (waits count against the store), A6 at most half of the
 *   cap stored over all jobs, A7 closed; A2 and A3's readers resume when
 *   they read;
 * - every request of the well-behaved client completes, each within a
 *   generous second (scaled by LAUNCH_TEST_TIMEOUT_MULT): the issue asks
 *   for < 10 ms, which the server meets when the machine is not shared
 *   (p99 ~10 ms, max ~30-100 ms on a busy 2-core box, ASan or not);
 *   what this bound catches is a client held up behind an attacker. The
 *   figures are printed.
 * The server runs in a bounded address space so that a regression fails
 * instead of exhausting the machine: RLIMIT_AS (cap + 256 MiB) for a plain
 * build, ASan's hard_rss_limit_mb for a sanitized one (ASan reserves
 * terabytes of address space, so RLIMIT_AS cannot bound it). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "tcpstore.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifndef ASAN
#define ASAN 0
#endif

#define CAP_MIB 128
#define SLACK_MIB 16
#define LAT_BOUND_MS 1000
#define MiB (1u << 20)

static const char *token = "adversarial-secret";
static int port;
static pid_t srv_pid;
static atomic_int sampling = 1;
static atomic_long rss_max_kib;

/* ---- helpers ------------------------------------------------------------------- */

static rdzv_client_t *client(const char *job) {
  rdzv_client_t *c = NULL;
  char err[256];
  if (test_rdzv_open(port, job, token, err, sizeof(err), &c) != 0)
    TEST_FAIL("connect to job %s: %s", job, err);
  return c;
}

static void set_value(const char *job, const char *key, size_t n) {
  rdzv_client_t *c = client(job);
  char *v = malloc(n);
  memset(v, 'v', n);
  ASSERT_OK(rdzv_set(c, key, v, n, test_ms(30000)));
  free(v);
  rdzv_close(c);
}

static int hello(const char *src, const char *job) {
  int64_t st;
  int fd = test_native_hello(src, port, job, token, &st);
  if (st != 0)
    TEST_FAIL("HELLO for job %s answered %lld", job, (long long)st);
  return fd;
}

static void req_begin(proto_enc_t *e, uint64_t id, int op, uint32_t nargs) {
  proto_enc_begin(e, 3 + nargs);
  msgpack_pack_uint8(&e->pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e->pk, id);
  msgpack_pack_int64(&e->pk, op);
}

/* TCPStore: u64 length + bytes. */
static size_t ts_str(uint8_t *p, const char *s, size_t n) {
  uint64_t l = n;
  memcpy(p, &l, 8);
  memcpy(p + 8, s, n);
  return 8 + n;
}

static int ts_open(const char *src, int v2) {
  int fd = test_connect_from(src, port);
  if (v2)
    ASSERT_EQ(0, test_send_all(fd, "\x00\xce\xf7\x85\x3c", 5));
  return fd;
}

/* ---- the attacks ------------------------------------------------------------------ */

static int a1_fd, a2_fd, a3_mget_fd, a3_get_fd, a4_watch[4], a4_set_fd,
    a5_fd, a7_fd[34];
static int a4_set_ok, a6_stored[8], a6_refused;

static void *a1_mget_same(void *arg) {
  enum { N = 131072 };
  proto_enc_t e;
  (void)arg;
  a1_fd = hello("127.0.0.22", "a1");
  proto_enc_init(&e);
  req_begin(&e, 2, PROTO_OP_MGET, 1);
  msgpack_pack_array(&e.pk, N);
  for (int i = 0; i < N; i++)
    proto_pack_str(&e.pk, "big");
  ASSERT_EQ(0, proto_enc_end(&e));
  ASSERT_EQ(0, test_send_all(a1_fd, e.data, e.len));
  proto_enc_destroy(&e);
  return NULL;
}

static void *a2_pipelined_gets(void *arg) {
  proto_enc_t e;
  (void)arg;
  a2_fd = hello("127.0.0.22", "a2");
  proto_enc_init(&e);
  for (int i = 0; i < 2000; i++) {
    req_begin(&e, 10 + (uint64_t)i, PROTO_OP_GET, 1);
    proto_pack_str(&e.pk, "m");
    ASSERT_EQ(0, proto_enc_end(&e));
  }
  ASSERT_EQ(0, test_send_all(a2_fd, e.data, e.len));
  proto_enc_destroy(&e);
  return NULL;
}

static void *a3_tcpstore(void *arg) {
  enum { N = 131072 };
  uint8_t *req = malloc(1 + 8 + (size_t)N * 12);
  size_t off = 0;
  (void)arg;
  req[off++] = TS_MULTI_GET;
  {
    uint64_t n = N;
    memcpy(req + off, &n, 8);
    off += 8;
  }
  for (int i = 0; i < N; i++)
    off += ts_str(req + off, "/big", 4);
  a3_mget_fd = ts_open("127.0.0.23", 1);
  ASSERT_EQ(0, test_send_all(a3_mget_fd, req, off));
  off = 0;
  for (int i = 0; i < 2000; i++) {
    req[off++] = TS_GET;
    off += ts_str(req + off, "/m", 2);
  }
  a3_get_fd = ts_open("127.0.0.23", 1);
  ASSERT_EQ(0, test_send_all(a3_get_fd, req, off));
  free(req);
  return NULL;
}

static void *a4_watchers(void *arg) {
  uint8_t req[64], *set = malloc(32 + MiB);
  size_t off;
  (void)arg;
  for (int i = 0; i < 4; i++) {
    a4_watch[i] = ts_open("127.0.0.24", 0);
    off = 0;
    req[off++] = 7; /* 1.13 WATCH_KEY */
    off += ts_str(req + off, "/w", 2);
    ASSERT_EQ(0, test_send_all(a4_watch[i], req, off));
  }
  /* The watches are registered: each is acknowledged (one byte, 1.13's
   * KEY_CALLBACK_REGISTERED). With several loops a fixed sleep was not
   * enough: a watcher's loop may wait for the lock behind the others'
   * large requests. That byte is all these watchers ever read. */
  for (int i = 0; i < 4; i++) {
    uint8_t ack = 0;
    ASSERT_EQ(0, test_read_exact(a4_watch[i], &ack, 1, test_ms(10000)));
  }
  a4_set_fd = ts_open("127.0.0.24", 0);
  off = 0;
  set[off++] = 0; /* 1.13 SET */
  off += ts_str(set + off, "/w", 2);
  {
    uint64_t l = MiB;
    memcpy(set + off, &l, 8);
    off += 8;
    memset(set + off, 'w', MiB);
    off += MiB;
  }
  for (int i = 0; i < 100; i++)
    if (test_send_all(a4_set_fd, set, off) == 0)
      a4_set_ok++;
  free(set);
  return NULL;
}

static void *a5_waits(void *arg) {
  enum { WAITS = 40, KEYS = 1000, KLEN = 8192 };
  char *key = malloc(KLEN);
  proto_enc_t e;
  (void)arg;
  a5_fd = hello("127.0.0.25", "a5");
  memset(key, 'k', KLEN);
  proto_enc_init(&e);
  for (int w = 0; w < WAITS; w++) {
    proto_enc_reset(&e);
    req_begin(&e, 100 + (uint64_t)w, PROTO_OP_WAIT, 1);
    msgpack_pack_array(&e.pk, KEYS);
    for (int k = 0; k < KEYS; k++) {
      snprintf(key, 16, "%06d-%06d", w, k);
      key[13] = 'k';
      proto_pack_bytes(&e.pk, key, KLEN);
    }
    ASSERT_EQ(0, proto_enc_end(&e));
    ASSERT_EQ(0, test_send_all(a5_fd, e.data, e.len));
  }
  proto_enc_destroy(&e);
  free(key);
  return NULL;
}

static void *a6_fill_jobs(void *arg) {
  char *v = malloc(MiB);
  (void)arg;
  memset(v, 'f', MiB);
  for (int j = 0; j < 8; j++) {
    char job[16];
    rdzv_client_t *c;
    snprintf(job, sizeof(job), "fill%d", j);
    c = client(job);
    for (int k = 0; k < 24; k++) {
      char key[16];
      int rc;
      snprintf(key, sizeof(key), "k%d", k);
      rc = rdzv_set(c, key, v, MiB, test_ms(30000));
      if (rc == 0) {
        a6_stored[j]++;
      } else {
        ASSERT_EQ(RDZV_ETOOBIG, rc);
        a6_refused++;
        break;
      }
    }
    rdzv_close(c);
  }
  free(v);
  return NULL;
}

static void *a7_unauthenticated(void *arg) {
  char *junk = calloc(1, MiB);
  (void)arg;
  for (int i = 0; i < 34; i++) {
    a7_fd[i] = test_connect_from("127.0.0.26", port);
    test_send_all(a7_fd[i], "RDZV\x01\x00\x00\x00", 8); /* a 16 MiB frame */
    send(a7_fd[i], junk, MiB, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  free(junk);
  return NULL;
}

/* ---- measurement ----------------------------------------------------------------- */

static void *rss_sampler(void *arg) {
  (void)arg;
  while (atomic_load(&sampling)) {
    long k = test_rss_kib(srv_pid);
    if (k > atomic_load(&rss_max_kib))
      atomic_store(&rss_max_kib, k);
    usleep(5000);
  }
  return NULL;
}

/* This thread's wait for a CPU so far (ns; schedstat's second field, 0
 * without it): the slowest request's share of it says whether the client
 * or the server was late. */
static uint64_t queued_ns(void) {
  unsigned long long run = 0, wait = 0;
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  if (f == NULL)
    return 0;
  if (fscanf(f, "%llu %llu", &run, &wait) != 2)
    wait = 0;
  fclose(f);
  return wait;
}

typedef struct {
  uint64_t us, queued_ns;
  double wall;
} slowest_t;

static void note_slowest(slowest_t *sl, uint64_t us, double wall,
                         uint64_t q0) {
  if (us > sl->us) {
    sl->us = us;
    sl->wall = wall;
    sl->queued_ns = queued_ns() - q0;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  static uint64_t lat_us[200000];
  const char *extra[16];
  char tokpath[512], logpath[512], asan[256];
  pthread_t att[7], sampler;
  void *(*attacks[7])(void *) = {a1_mget_same, a2_pipelined_gets, a3_tcpstore,
                                 a4_watchers, a5_waits, a6_fill_jobs,
                                 a7_unauthenticated};
  rdzv_client_t *good;
  slowest_t slow = {0, 0, 0};
  size_t nlat = 0;
  long rss0, bound_kib;
  uint64_t t_end;
  FILE *f;
  int n = 0, total_stored = 0;

  signal(SIGPIPE, SIG_IGN);
  snprintf(tokpath, sizeof(tokpath), "%s/token", test_tmpdir());
  snprintf(logpath, sizeof(logpath), "%s/server.log", test_tmpdir());
  f = fopen(tokpath, "w");
  ASSERT(f != NULL);
  fputs(token, f);
  fclose(f);
  extra[n++] = "--max-memory";
  extra[n++] = "128M";
  extra[n++] = "--max-store-bytes";
  extra[n++] = "16M";
  extra[n++] = "--token-file";
  extra[n++] = tokpath;
  extra[n++] = "--tcpstore-allow";
  extra[n++] = "127.0.0.0/8";
  /* Room for A5's 8 MiB frames next to the others' (the input budget is
   * not what this test is about). */
  extra[n++] = "--max-input-bytes";
  extra[n++] = "40M";
  extra[n] = NULL;
  /* ASan: a small quarantine and freed memory handed back, so that the
   * RSS is what the server holds; past the bound ASan kills it. */
  snprintf(asan, sizeof(asan), "quarantine_size_mb=1:detect_leaks=1:"
           "allocator_release_to_os_interval_ms=50:hard_rss_limit_mb=%d",
           CAP_MIB * 2 + 512);
  setenv("ASAN_OPTIONS", asan, 1);
  port = test_launch_server(&srv_pid, extra, logpath);
  {
    /* The server sized its file table when it started: growing it later,
     * with threads, waits for an RCU grace period (8-16 ms) in an accept
     * that holds every loop up. */
    char path[64], *st, *p;
    struct rlimit nf;
    long fdsize = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)srv_pid);
    st = test_read_file(path);
    ASSERT(st != NULL);
    if ((p = strstr(st, "FDSize:")) != NULL)
      fdsize = strtol(p + 7, NULL, 10);
    free(st);
    ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &nf));
    printf("server file table: %ld descriptors\n", fdsize);
    ASSERT(fdsize >= (long)LU_MIN(nf.rlim_max, (rlim_t)1024));
  }
  if (!ASAN) {
    struct rlimit rl = {(rlim_t)(CAP_MIB + 256) * MiB,
                        (rlim_t)(CAP_MIB + 256) * MiB};
    ASSERT_EQ(0, prlimit(srv_pid, RLIMIT_AS, &rl, NULL));
  }
  set_value("a1", "big", 8 * MiB);
  set_value("a2", "m", MiB);
  {
    /* The TCPStore job's keys, set over TCPStore itself. */
    int fd = ts_open("127.0.0.23", 1);
    uint8_t *req = calloc(1, 128 + 9 * MiB);
    size_t off = 0;
    req[off++] = TS_SET;
    off += ts_str(req + off, "/big", 4);
    {
      uint64_t l = 8 * MiB;
      memcpy(req + off, &l, 8);
      off += 8;
      memset(req + off, 'b', 8 * MiB);
      off += 8 * MiB;
    }
    req[off++] = TS_SET;
    off += ts_str(req + off, "/m", 2);
    {
      uint64_t l = MiB;
      memcpy(req + off, &l, 8);
      off += 8 + MiB;
    }
    req[off++] = TS_GETNUMKEYS;
    ASSERT_EQ(0, test_send_all(fd, req, off));
    ASSERT_EQ(0, test_read_exact(fd, req, 8, test_ms(10000)));
    free(req);
    close(fd);
  }
  good = client("good");
  ASSERT_OK(rdzv_set(good, "g", "0123456789abcdef", 16, test_ms(5000)));
  usleep(300000);
  rss0 = test_rss_kib(srv_pid);
  bound_kib = ASAN ? rss0 + (long)CAP_MIB * 1024 * 9 / 8 + SLACK_MIB * 1024
                   : (long)(CAP_MIB + SLACK_MIB) * 1024;
  ASSERT_EQ(0, pthread_create(&sampler, NULL, rss_sampler, NULL));

  /* Everything at once; the well-behaved client goes on until every
   * attack was sent and a second more. */
  for (int i = 0; i < 7; i++)
    ASSERT_EQ(0, pthread_create(&att[i], NULL, attacks[i], NULL));
  for (int i = 0; i < 7; i++) {
    while (pthread_tryjoin_np(att[i], NULL) != 0) {
      /* A SET, then a GET, each timed. */
      for (int op = 0; op < 2; op++) {
        uint64_t q0 = queued_ns(), t0 = lu_now_ns(), us;
        double wall = lu_wall_s();
        void *v = NULL;
        size_t len = 0;
        if (op == 0) {
          ASSERT_OK(rdzv_set(good, "g", "0123456789abcdef", 16,
                             test_ms(5000)));
        } else {
          ASSERT_OK(rdzv_get(good, "g", &v, &len, test_ms(5000)));
          ASSERT_EQ(16, len);
          rdzv_free(v);
        }
        us = (lu_now_ns() - t0) / 1000;
        note_slowest(&slow, us, wall, q0);
        if (nlat < LU_ARRAY_SIZE(lat_us))
          lat_us[nlat++] = us;
      }
      usleep(1000);
    }
  }
  {
    /* A client that arrives now, with the memory full of unread replies,
     * still gets in (connections have their share). */
    rdzv_client_t *late = client("late");
    int rc = rdzv_set(late, "k", "v", 1, test_ms(5000));
    if (rc != 0)
      TEST_FAIL("the late client's SET: %s: %s", rdzv_strerror(rc),
                rdzv_last_error(late));
    rdzv_close(late);
  }
  t_end = lu_now_ms() + 1000;
  while (lu_now_ms() < t_end) {
    uint64_t q0 = queued_ns(), t0 = lu_now_ns(), us;
    double wall = lu_wall_s();
    int64_t v;
    ASSERT_OK(rdzv_add(good, "n", 1, &v, test_ms(5000)));
    us = (lu_now_ns() - t0) / 1000;
    note_slowest(&slow, us, wall, q0);
    if (nlat < LU_ARRAY_SIZE(lat_us))
      lat_us[nlat++] = us;
    usleep(1000);
  }
  atomic_store(&sampling, 0);
  pthread_join(sampler, NULL);

  /* What each attack got. */
  ASSERT_EQ(RDZV_ETOOBIG, test_read_reply(a1_fd, test_ms(5000), NULL));
  ASSERT(test_peer_closed(a3_mget_fd, test_ms(5000)));
  for (int i = 0; i < 4; i++)
    ASSERT(test_peer_closed(a4_watch[i], test_ms(10000)));
  ASSERT_EQ(100, a4_set_ok);
  {
    /* The writer was never held back: its 101st request is answered. */
    uint8_t req[32], hdr[8];
    size_t off = 0;
    req[off++] = 6; /* 1.13 GETNUMKEYS */
    ASSERT_EQ(0, test_send_all(a4_set_fd, req, off));
    ASSERT_EQ(0, test_read_exact(a4_set_fd, hdr, 8, test_ms(10000)));
  }
  {
    int toobig = 0;
    for (int w = 0; w < 40; w++) {
      int64_t st = test_read_reply(a5_fd, 300, NULL);
      if (st == INT64_MIN)
        break;
      toobig += st == RDZV_ETOOBIG;
    }
    printf("A5: %d of 40 WAITs refused (store full)\n", toobig);
    ASSERT(toobig >= 30);
  }
  for (int j = 0; j < 8; j++) {
    ASSERT(a6_stored[j] <= 16);
    total_stored += a6_stored[j];
  }
  printf("A6: %d MiB stored over 8 jobs, %d jobs refused\n", total_stored,
         a6_refused);
  ASSERT(total_stored <= CAP_MIB / 2);
  ASSERT_EQ(8, a6_refused);
  for (int i = 0; i < 34; i++)
    ASSERT(test_peer_closed(a7_fd[i], test_ms(5000)));
  /* Paused readers go on once they read. */
  for (int i = 0; i < 20; i++) {
    uint64_t id = 0;
    ASSERT_EQ(0, test_read_reply(a2_fd, test_ms(10000), &id));
    ASSERT_EQ(10 + i, id);
  }
  {
    uint8_t *buf = malloc(8 + MiB);
    for (int i = 0; i < 20; i++) {
      ASSERT_EQ(0, test_read_exact(a3_get_fd, buf, 8 + MiB, test_ms(10000)));
      ASSERT_EQ(MiB, buf[0] | buf[1] << 8 | buf[2] << 16 | (long)buf[3] << 24);
    }
    free(buf);
  }

  qsort(lat_us, nlat, sizeof(lat_us[0]), cmp_u64);
  printf("server RSS: %ld KiB at start, at most %ld KiB under attack (bound "
         "%ld KiB%s)\n", rss0, (long)atomic_load(&rss_max_kib), bound_kib,
         ASAN ? ", ASan-scaled" : "");
  printf("well-behaved client: %zu requests, p50 %.2f ms, p99 %.2f ms, max "
         "%.2f ms\n", nlat, lat_us[nlat / 2] / 1000.0,
         lat_us[nlat * 99 / 100] / 1000.0, lat_us[nlat - 1] / 1000.0);
  {
    char when[32];
    lu_iso8601(slow.wall, when, sizeof(when));
    printf("slowest request: %.2f ms from %s, the client thread waited "
           "%.2f ms of it for a CPU\n", slow.us / 1000.0, when,
           slow.queued_ns / 1e6);
  }
  ASSERT(atomic_load(&rss_max_kib) <= bound_kib);
  ASSERT(nlat > 50);
  ASSERT(lat_us[nlat - 1] < (uint64_t)test_ms(LAT_BOUND_MS) * 1000);

  rdzv_close(good);
  close(a1_fd);
  close(a2_fd);
  close(a3_mget_fd);
  close(a3_get_fd);
  close(a4_set_fd);
  for (int i = 0; i < 4; i++)
    close(a4_watch[i]);
  close(a5_fd);
  for (int i = 0; i < 34; i++)
    close(a7_fd[i]);
  test_stop_server(srv_pid);
  if (getenv("LAUNCH_SERVER_TRACE_MS")) {
    /* The server's slow callbacks (bench/run_adv_latency.sh reads them),
     * and those that ended while the slowest request was under way (the
     * log's times are ISO 8601 to the millisecond: they sort as text). */
    char *log = test_read_file(logpath), *line, *save = NULL;
    char from[32], to[32];
    lu_iso8601(slow.wall, from, sizeof(from));
    lu_iso8601(slow.wall + slow.us / 1e6 + 0.001, to, sizeof(to));
    from[23] = to[23] = '\0';
    for (line = log ? strtok_r(log, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save))
      if (strstr(line, "trace: ")) {
        int during = strncmp(line, from, 23) >= 0 &&
                     strncmp(line, to, 23) <= 0;
        printf("%s%s\n", during ? "during the slowest request: " : "",
               line);
      }
    free(log);
  }
  printf("test_adv_memory: ok\n");
  return 0;
}
