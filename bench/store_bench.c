/* store_bench.c - load generator for a key/value store server: N client
 * threads, each on its own connection, doing set+get pairs on keys of their
 * own, in one of three dialects:
 *
 *   native       the launch server's protocol, through librdzv:
 *                rdzv_set_nowait then rdzv_get (no server-side wait), both
 *                frames in one write and one wait for the get's reply (the
 *                set is a SETQ, answered only if it fails, as TCPStore's
 *                SET; an older server answers it and its reply is
 *                checked): one round trip per pair, as TCPStore's;
 *                --native-rtt2: rdzv_set, then rdzv_get: two round trips;
 *   tcpstore-v1  PyTorch 1.13's TCPStore numbering (SET=0, GET=2);
 *   tcpstore-v2  PyTorch >= 2.2's numbering (SET=1, GET=3), VALIDATE first.
 *
 * TCPStore clients are a small raw-socket client here; keys carry the "/"
 * prefix that torch's client adds. SET has no reply in TCPStore, so a pair
 * is SET and GET written together and one reply read: one round trip. With
 * --torch-get the client first sends WAIT and reads its answer before the
 * GET, as torch's get() does: two round trips.
 *
 * A warmup runs first (not measured). Then each pair is one latency sample,
 * from the moment its first request is written to the moment the GET value
 * has been read and checked; ops/s counts each SET and each GET as one op.
 * The output ends with one "RESULT key=value ..." line for scripts.
 *
 * This is a benchmark, not a test: bench/run_store_bench.sh runs it side by
 * side against PyTorch's own TCPStore server; docs/BENCHMARKS.md has the
 * figures. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "rdzv.h"

enum { D_NATIVE, D_TS_V1, D_TS_V2 };
enum { PH_WARMUP, PH_MEASURE, PH_STOP };

/* TCPStore opcodes of the two numberings (reference/torchrun.md 4.3, 4.5). */
static const uint8_t ts_set[] = {0, 0, 1}, ts_get[] = {0, 2, 3},
                     ts_wait[] = {0, 5, 6};
#define TS_VALIDATE 0
#define TS_MAGIC 0x3C85F7CEu

typedef struct opts_s {
  const char *endpoint;
  int dialect;
  int clients;
  double seconds;
  long long ops; /* pairs per client; 0 = run for `seconds` */
  double warmup;
  size_t value_size;
  int keys;      /* keys per client, used in turn */
  int torch_get; /* WAIT before GET */
  int native_rtt2; /* native: rdzv_set waits for its reply before the get */
  int server_pid; /* >0: report this process's CPU time per pair */
} opts_t;

typedef struct bench_s bench_t;

typedef struct client_s {
  bench_t *b;
  int id;
  pthread_t thread;
  int fd;               /* TCPStore */
  rdzv_client_t *rc;    /* native */
  uint64_t *lat;        /* ns per measured pair */
  size_t nlat, caplat;
  uint64_t warm_pairs;
  int err;              /* 0 or a negative code */
  char errmsg[256];
} client_t;

struct bench_s {
  opts_t o;
  struct addrinfo *ai;
  atomic_int phase;
  atomic_int connected;
  atomic_int done;
  client_t *cl;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU seconds (user + system) of this process, all threads. */
static double self_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* CPU seconds of another process, from /proc/PID/stat; -1 if unreadable. */
static double pid_cpu_s(int pid) {
  char path[64], buf[1024], *p;
  unsigned long long ut, st;
  FILE *f;
  size_t n;
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* Fields after the command name (which may hold spaces): state is 3rd,
   * utime the 14th, stime the 15th. */
  if ((p = strrchr(buf, ')')) == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void sleep_s(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void fail(client_t *c, int err, const char *what) {
  if (c->err == 0) {
    c->err = err ? err : -EIO;
    snprintf(c->errmsg, sizeof(c->errmsg), "%s: %s", what,
             err ? rdzv_strerror(err) : "unexpected reply");
  }
}

/* ---- raw TCPStore client ------------------------------------------------- */

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static int send_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_all(int fd, void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r == 0)
      return RDZV_ECLOSED;
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return errno == EAGAIN ? -ETIMEDOUT : -errno;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int ts_connect(bench_t *b, client_t *c) {
  struct addrinfo *ai;
  int rc = -ECONNREFUSED;
  for (ai = b->ai; ai; ai = ai->ai_next) {
    int one = 1;
    struct timeval tv = {30, 0};
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      rc = -errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      rc = -errno;
      close(fd);
      continue;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A server that stops answering fails the run instead of hanging it. */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    c->fd = fd;
    if (b->o.dialect == D_TS_V2) {
      uint8_t v[5] = {TS_VALIDATE, (uint8_t)TS_MAGIC,
                      (uint8_t)(TS_MAGIC >> 8), (uint8_t)(TS_MAGIC >> 16),
                      (uint8_t)(TS_MAGIC >> 24)};
      return send_all(fd, v, sizeof(v));
    }
    return 0;
  }
  return rc;
}

/* Append a TCPStore string (u64 length + bytes) at p; RET the end. */
static uint8_t *put_str(uint8_t *p, const void *s, size_t n) {
  put_u64(p, n);
  memcpy(p + 8, s, n);
  return p + 8 + n;
}

/* One pair over TCPStore. SET has no reply, so SET and GET go out in one
 * write and one reply comes back. With --torch-get the client does what
 * torch's get() does: WAIT, read its answer, then GET (SET travels with
 * the WAIT): two round trips. */
static int ts_pair(client_t *c, const char *key, const uint8_t *val,
                   uint8_t *req, uint8_t *reply) {
  const opts_t *o = &c->b->o;
  size_t kl = strlen(key);
  uint8_t *p = req;
  int rc;
  *p++ = ts_set[o->dialect];
  p = put_str(p, key, kl);
  p = put_str(p, val, o->value_size);
  if (o->torch_get) {
    *p++ = ts_wait[o->dialect];
    put_u64(p, 1);
    p = put_str(p + 8, key, kl);
    if ((rc = send_all(c->fd, req, (size_t)(p - req))) != 0 ||
        (rc = recv_all(c->fd, reply, 1)) != 0)
      return rc;
    if (reply[0] != 0) /* STOP_WAITING */
      return RDZV_EPROTO;
    p = req;
  }
  *p++ = ts_get[o->dialect];
  p = put_str(p, key, kl);
  if ((rc = send_all(c->fd, req, (size_t)(p - req))) != 0)
    return rc;
  /* The u64 length and the value: their size is known, so read them
   * together (one recv in the common case). */
  if ((rc = recv_all(c->fd, reply, 8 + o->value_size)) != 0)
    return rc;
  if (get_u64(reply) != o->value_size)
    return RDZV_EPROTO;
  return memcmp(reply + 8, val, o->value_size) == 0 ? 0 : RDZV_EPROTO;
}

/* ---- native client ------------------------------------------------------- */

/* One pair over the native protocol: the set is queued (rdzv_set_nowait)
 * and written with the get; the get's call reads both replies, the set's
 * first (a failed set fails the pair). With --native-rtt2, rdzv_set waits
 * for its reply before the get is sent. */
static int native_pair(client_t *c, const char *key, const uint8_t *val) {
  void *got = NULL;
  size_t len = 0;
  int rc = c->b->o.native_rtt2
               ? rdzv_set(c->rc, key, val, c->b->o.value_size, 30000)
               : rdzv_set_nowait(c->rc, key, val, c->b->o.value_size);
  if (rc != 0)
    return rc;
  rc = rdzv_get(c->rc, key, &got, &len, 0);
  if (rc != 0)
    return rc;
  if (len != c->b->o.value_size || memcmp(got, val, len) != 0)
    rc = RDZV_EPROTO;
  rdzv_free(got);
  return rc;
}

/* ---- client thread ------------------------------------------------------- */

static int record(client_t *c, uint64_t ns) {
  if (c->nlat == c->caplat) {
    size_t ncap = c->caplat ? c->caplat * 2 : 65536;
    uint64_t *n = realloc(c->lat, ncap * sizeof(*n));
    if (n == NULL)
      return RDZV_ENOMEM;
    c->lat = n;
    c->caplat = ncap;
  }
  c->lat[c->nlat++] = ns;
  return 0;
}

static void *client_main(void *arg) {
  client_t *c = arg;
  bench_t *b = c->b;
  const opts_t *o = &b->o;
  uint8_t *val = malloc(o->value_size + 1);
  uint8_t *reply = malloc(o->value_size + 9);
  uint8_t *req = malloc(3 * (o->value_size + 64) + 64);
  char key[64];
  uint64_t i = 0;
  int rc;

  if (val == NULL || reply == NULL || req == NULL) {
    fail(c, RDZV_ENOMEM, "allocation");
    goto out;
  }
  if (o->dialect == D_NATIVE) {
    rdzv_options_t ro = RDZV_OPTIONS_INIT;
    ro.endpoint = o->endpoint;
    ro.job = "bench";
    rc = rdzv_connect(&ro, &c->rc);
  } else {
    rc = ts_connect(b, c);
  }
  if (rc != 0) {
    fail(c, rc, "connect");
    goto out;
  }
  atomic_fetch_add(&b->connected, 1);
  for (;;) {
    int ph = atomic_load_explicit(&b->phase, memory_order_acquire);
    uint64_t t0, t1;
    if (ph == PH_STOP)
      break;
    if (ph == PH_MEASURE && o->ops > 0 && (long long)c->nlat >= o->ops)
      break;
    snprintf(key, sizeof(key), "/bench/%d/%d", c->id,
             (int)(i % (uint64_t)o->keys));
    /* A value of its own each time, so that a stale reply cannot pass. */
    for (size_t k = 0; k < o->value_size; k++)
      val[k] = (uint8_t)('a' + (i + k + (size_t)c->id) % 26);
    t0 = now_ns();
    rc = o->dialect == D_NATIVE ? native_pair(c, key, val)
                                : ts_pair(c, key, val, req, reply);
    t1 = now_ns();
    if (rc != 0) {
      fail(c, rc, "set+get");
      break;
    }
    if (ph == PH_MEASURE) {
      if ((rc = record(c, t1 - t0)) != 0) {
        fail(c, rc, "recording");
        break;
      }
    } else {
      c->warm_pairs++;
    }
    i++;
  }
out:
  atomic_fetch_add(&b->done, 1);
  free(val);
  free(reply);
  free(req);
  return NULL;
}

/* ---- main ---------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *s, size_t n, double p) {
  size_t i;
  if (n == 0)
    return 0;
  i = (size_t)(p * (double)(n - 1) + 0.5);
  return (double)s[i < n ? i : n - 1] / 1000.0;
}

static const char usage[] =
    "usage: store_bench --endpoint HOST:PORT [options]\n"
    "\n"
    "N client threads, one connection each, doing set+get pairs on keys of\n"
    "their own; reports ops/s (each set and each get is one op) and the\n"
    "latency of a pair (p50, p99, max).\n"
    "\n"
    "options:\n"
    "  --endpoint H:P        server address\n"
    "  --dialect D           native | tcpstore-v1 | tcpstore-v2 (default\n"
    "                        tcpstore-v1)\n"
    "  --clients N           client threads (default 1)\n"
    "  --seconds S           measure for S seconds (default 5)\n"
    "  --ops N               or: measure N pairs per client\n"
    "  --warmup S            unmeasured seconds first (default 1)\n"
    "  --value-size B        bytes per value (default 64)\n"
    "  --keys K              keys per client, used in turn (default 16)\n"
    "  --torch-get           TCPStore: WAIT (and its answer) before GET, as\n"
    "                        torch's get() does\n"
    "  --native-rtt2         native: rdzv_set and its reply before the get\n"
    "                        (two round trips; default: rdzv_set_nowait, the\n"
    "                        set written with the get, one round trip)\n"
    "  --server-pid PID      also report PID's CPU time per pair (read from\n"
    "                        /proc while measuring)\n";

static int parse_opts(int argc, char **argv, opts_t *o) {
  static const struct option lo[] = {
      {"endpoint", required_argument, 0, 'e'},
      {"dialect", required_argument, 0, 'd'},
      {"clients", required_argument, 0, 'c'},
      {"seconds", required_argument, 0, 's'},
      {"ops", required_argument, 0, 'n'},
      {"warmup", required_argument, 0, 'w'},
      {"value-size", required_argument, 0, 'v'},
      {"keys", required_argument, 0, 'k'},
      {"torch-get", no_argument, 0, 't'},
      {"native-rtt2", no_argument, 0, 'r'},
      {"server-pid", required_argument, 0, 'p'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int opt, v;
  char *end;
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (opt) {
    case 'e': o->endpoint = optarg; break;
    case 'd':
      if (strcmp(optarg, "native") == 0)
        o->dialect = D_NATIVE;
      else if (strcmp(optarg, "tcpstore-v1") == 0)
        o->dialect = D_TS_V1;
      else if (strcmp(optarg, "tcpstore-v2") == 0)
        o->dialect = D_TS_V2;
      else {
        fprintf(stderr, "store_bench: --dialect '%s': use native, "
                        "tcpstore-v1 or tcpstore-v2\n", optarg);
        return -1;
      }
      break;
    case 'c':
      if (lu_parse_int(optarg, 1, 4096, &o->clients) != 0) {
        fprintf(stderr, "store_bench: --clients '%s': 1..4096\n", optarg);
        return -1;
      }
      break;
    case 's':
    case 'w': {
      double d = strtod(optarg, &end);
      if (*end != '\0' || !(d >= 0) || d > 86400) {
        fprintf(stderr, "store_bench: --%s '%s' is not a number of "
                        "seconds\n", opt == 's' ? "seconds" : "warmup", optarg);
        return -1;
      }
      if (opt == 's')
        o->seconds = d;
      else
        o->warmup = d;
      break;
    }
    case 'n': {
      int64_t n;
      if (lu_parse_i64(optarg, strlen(optarg), &n) != 0 || n <= 0) {
        fprintf(stderr, "store_bench: --ops '%s' is not a positive number\n",
                optarg);
        return -1;
      }
      o->ops = n;
      break;
    }
    case 'v':
      if (lu_parse_int(optarg, 1, 1 << 20, &v) != 0) {
        fprintf(stderr, "store_bench: --value-size '%s': 1..1048576\n",
                optarg);
        return -1;
      }
      o->value_size = (size_t)v;
      break;
    case 'k':
      if (lu_parse_int(optarg, 1, 1 << 20, &o->keys) != 0) {
        fprintf(stderr, "store_bench: --keys '%s': 1..1048576\n", optarg);
        return -1;
      }
      break;
    case 't': o->torch_get = 1; break;
    case 'r': o->native_rtt2 = 1; break;
    case 'p':
      if (lu_parse_int(optarg, 1, 1 << 30, &o->server_pid) != 0) {
        fprintf(stderr, "store_bench: --server-pid '%s' is not a pid\n",
                optarg);
        return -1;
      }
      break;
    case 'h': fputs(usage, stdout); exit(0);
    default: fputs(usage, stderr); return -1;
    }
  }
  if (optind < argc || o->endpoint == NULL) {
    fputs(usage, stderr);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const char *const names[] = {"native", "tcpstore-v1", "tcpstore-v2"};
  bench_t b;
  opts_t *o = &b.o;
  uint64_t t_start, t_end, total = 0, warm = 0;
  double cpu0, cpu1, srv0 = -1, srv1 = -1, cli_us, srv_us;
  uint64_t *all;
  size_t nall = 0;
  int failed = 0;
  double secs;

  memset(&b, 0, sizeof(b));
  o->dialect = D_TS_V1;
  o->clients = 1;
  o->seconds = 5;
  o->warmup = 1;
  o->value_size = 64;
  o->keys = 16;
  if (parse_opts(argc, argv, o) != 0)
    return 2;
  if (o->dialect != D_NATIVE) {
    lu_endpoint_t ep;
    struct addrinfo hints;
    char port[16];
    int g;
    if (lu_endpoint_parse(o->endpoint, -1, &ep) != 0 || ep.is_unix ||
        ep.port < 0) {
      fprintf(stderr, "store_bench: --endpoint '%s': give HOST:PORT\n",
              o->endpoint);
      return 2;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", ep.port);
    if ((g = getaddrinfo(ep.host, port, &hints, &b.ai)) != 0) {
      fprintf(stderr, "store_bench: %s: %s\n", ep.host, gai_strerror(g));
      return 2;
    }
  }
  if ((b.cl = calloc((size_t)o->clients, sizeof(*b.cl))) == NULL)
    return 1;
  atomic_init(&b.phase, PH_WARMUP);
  atomic_init(&b.connected, 0);
  atomic_init(&b.done, 0);
  for (int i = 0; i < o->clients; i++) {
    b.cl[i].b = &b;
    b.cl[i].id = i;
    b.cl[i].fd = -1;
    if (pthread_create(&b.cl[i].thread, NULL, client_main, &b.cl[i]) != 0) {
      fprintf(stderr, "store_bench: pthread_create failed\n");
      return 1;
    }
  }
  /* Every client connects before the clock starts. */
  while (atomic_load(&b.connected) + atomic_load(&b.done) < o->clients)
    sleep_s(0.005);
  sleep_s(o->warmup);
  cpu0 = self_cpu_s();
  if (o->server_pid > 0)
    srv0 = pid_cpu_s(o->server_pid);
  t_start = now_ns();
  atomic_store_explicit(&b.phase, PH_MEASURE, memory_order_release);
  if (o->ops > 0) {
    while (atomic_load(&b.done) < o->clients)
      sleep_s(0.001);
  } else {
    sleep_s(o->seconds);
    atomic_store_explicit(&b.phase, PH_STOP, memory_order_release);
  }
  t_end = now_ns();
  cpu1 = self_cpu_s();
  if (o->server_pid > 0)
    srv1 = pid_cpu_s(o->server_pid);
  for (int i = 0; i < o->clients; i++)
    pthread_join(b.cl[i].thread, NULL);
  secs = (double)(t_end - t_start) / 1e9;

  for (int i = 0; i < o->clients; i++) {
    total += b.cl[i].nlat;
    warm += b.cl[i].warm_pairs;
  }
  all = malloc((total ? total : 1) * sizeof(*all));
  if (all == NULL)
    return 1;
  for (int i = 0; i < o->clients; i++) {
    client_t *c = &b.cl[i];
    if (c->err) {
      if (failed++ < 5)
        fprintf(stderr, "store_bench: client %d: %s\n", i, c->errmsg);
    }
    if (c->nlat)
      memcpy(all + nall, c->lat, c->nlat * sizeof(*all));
    nall += c->nlat;
    free(c->lat);
    if (c->rc)
      rdzv_close(c->rc);
    if (c->fd >= 0)
      close(c->fd);
  }
  qsort(all, nall, sizeof(*all), cmp_u64);
  printf("store_bench: %s %s, %d clients, %zu-byte values, %s%s\n",
         names[o->dialect], o->endpoint, o->clients, o->value_size,
         o->dialect != D_NATIVE ? "set+get written together: 1 round trip"
         : o->native_rtt2 ? "set, its reply, then get: 2 round trips per pair"
                          : "set (rdzv_set_nowait) and get written together, "
                            "the set answered only if it fails: 1 round trip",
         o->torch_get ? " (+WAIT and its answer before GET: 2 round trips)"
                      : "");
  printf("  warmup %.1f s (%llu pairs), measured %.2f s: %zu pairs, %.0f "
         "ops/s (set and get count one op each)\n",
         o->warmup, (unsigned long long)warm, secs, nall,
         secs > 0 ? 2.0 * (double)nall / secs : 0);
  printf("  latency of a pair: p50 %.1f us, p99 %.1f us, max %.1f us\n",
         pct_us(all, nall, 0.50), pct_us(all, nall, 0.99),
         nall ? (double)all[nall - 1] / 1000.0 : 0);
  cli_us = nall ? (cpu1 - cpu0) * 1e6 / (double)nall : 0;
  srv_us = nall && srv0 >= 0 && srv1 >= 0 ? (srv1 - srv0) * 1e6 / (double)nall
                                          : -1;
  printf("  CPU per pair: clients %.1f us", cli_us);
  if (srv_us >= 0)
    printf(", server (pid %d) %.1f us", o->server_pid, srv_us);
  printf(" (%.0f%% and %.0f%% of a core)\n",
         secs > 0 ? 100 * (cpu1 - cpu0) / secs : 0,
         secs > 0 && srv_us >= 0 ? 100 * (srv1 - srv0) / secs : 0);
  printf("RESULT dialect=%s clients=%d value_size=%zu torch_get=%d "
         "native_rtt2=%d seconds=%.3f pairs=%zu ops_per_s=%.0f p50_us=%.1f p99_us=%.1f "
         "max_us=%.1f client_cpu_us=%.1f server_cpu_us=%.1f errors=%d\n",
         names[o->dialect], o->clients, o->value_size, o->torch_get,
         o->native_rtt2, secs,
         nall, secs > 0 ? 2.0 * (double)nall / secs : 0,
         pct_us(all, nall, 0.50), pct_us(all, nall, 0.99),
         nall ? (double)all[nall - 1] / 1000.0 : 0, cli_us, srv_us, failed);
  free(all);
  free(b.cl);
  if (b.ai)
    freeaddrinfo(b.ai);
  return failed ? 1 : 0;
}
