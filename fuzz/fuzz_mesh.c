/* fuzz_mesh.c - the runtime's CPU collectives (runtime/rt_mesh.c): what
 * the other ranks send. Three parts:
 * - rt__mesh_parse_peer: a rank's address as the store holds it,
 *   "ADDR PORT NONCE";
 * - rt__mesh_accept (accept_peers, pending_read): connections to this
 *   rank's listener (a unix socket here) that send hellos and acks, or
 *   anything, then close;
 * - the exchange engine under rt__mesh_allreduce, _broadcast, _allgather
 *   and _reduce_scatter: every other rank's stream of floats (short,
 *   long, or ending early), over socketpairs.
 * Input: 4 bytes (world 2..5, rank, op, count/16 floats; the low bits of
 * the op byte pick the root of a broadcast), the peer line up to the first
 * newline, then parts separated by FUZZ_SEP: first as many connections as
 * the op byte's high nibble says (at most 6), then one stream per other
 * rank in rank order. The job's round is 7 and this rank's nonce
 * 0x1122334455667788 (hello: magic "RTM2" LE, rank, round, nonce).
 * Invariants checked:
 * - the accept returns by its deadline; success means every rank above
 *   this one has a connection;
 * - a broadcast that succeeds leaves the root's bytes in the buffer;
 * - no read or write outside the buffers (ASan), no leak. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "rt_int.h"

#define FUZZ_SEP "\xfe\xed<next connection>\xfe\xed"
#define SEP_LEN (sizeof(FUZZ_SEP) - 1)
#define MAX_PARTS 12
#define NONCE 0x1122334455667788ull

typedef struct part_s {
  const uint8_t *p;
  size_t n;
} part_t;

static int split(const uint8_t *data, size_t size, part_t *parts) {
  int np = 0;
  size_t start = 0;
  for (size_t i = 0; np < MAX_PARTS - 1 && i + SEP_LEN <= size; i++)
    if (memcmp(data + i, FUZZ_SEP, SEP_LEN) == 0) {
      parts[np].p = data + start;
      parts[np++].n = i - start;
      start = i + SEP_LEN;
      i += SEP_LEN - 1;
    }
  parts[np].p = data + start;
  parts[np].n = size - start;
  return np + 1;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nonblock(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void accept_phase(const rt_who_t *who, int world, const part_t *c,
                         int nc) {
  static char path[108];
  struct sockaddr_un sun;
  rt_mesh_t *m;
  int lfd, cfd[6], rc;
  int64_t deadline;
  if (path[0] == '\0')
    snprintf(path, sizeof(path), "/tmp/launch-fuzz-mesh.%d.sock",
             (int)getpid());
  unlink(path);
  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  memcpy(sun.sun_path, path, strlen(path) + 1);
  lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(lfd >= 0);
  FUZZ_CHECK(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)) == 0);
  FUZZ_CHECK(listen(lfd, 16) == 0);
  for (int i = 0; i < nc; i++) {
    cfd[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(cfd[i] >= 0);
    FUZZ_CHECK(connect(cfd[i], (struct sockaddr *)&sun, sizeof(sun)) == 0);
    nonblock(cfd[i]);
    if (c[i].n)
      (void)send(cfd[i], c[i].p, c[i].n, MSG_NOSIGNAL);
    shutdown(cfd[i], SHUT_WR);
  }
  FUZZ_CHECK(rt__mesh_new(who, world, 1000, &m) == 0);
  deadline = now_ms() + 20;
  rc = rt__mesh_accept(m, lfd, 7, NONCE, deadline);
  FUZZ_CHECK(now_ms() <= deadline + 1000);
  if (rc == 0)
    for (int r = who->rank + 1; r < world; r++)
      FUZZ_CHECK(rt__mesh_fds(m)[r] >= 0);
  rt__mesh_close(m);
  for (int i = 0; i < nc; i++)
    close(cfd[i]);
  close(lfd);
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  part_t parts[MAX_PARTS];
  rt_who_t who;
  rt_mesh_t *m;
  int world, rank, op, nc, np, peer[8], k;
  size_t count, bytes, *part;
  const uint8_t *nl;
  float *buf;
  char line[256];
  if (size < 4)
    return 0;
  world = 2 + data[0] % 4;
  rank = data[1] % world;
  op = data[2];
  count = (size_t)data[3] * 16;
  nc = (op >> 4) % 7;
  data += 4, size -= 4;
  /* the peer line */
  nl = memchr(data, '\n', size);
  {
    size_t n = nl ? (size_t)(nl - data) : size;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    uint64_t nonce;
    if (n >= sizeof(line))
      n = sizeof(line) - 1;
    memcpy(line, data, n);
    line[n] = '\0';
    if (rt__mesh_parse_peer(line, &ss, &len, &nonce) == 0)
      FUZZ_CHECK(len <= sizeof(ss) && (ss.ss_family == AF_INET ||
                                      ss.ss_family == AF_INET6));
    if (nl) {
      size -= (size_t)(nl + 1 - data);
      data = nl + 1;
    } else {
      size = 0;
    }
  }
  memset(&who, 0, sizeof(who));
  who.rank = rank;
  snprintf(who.text, sizeof(who.text), "fuzz rank %d", rank);
  np = split(data, size, parts);
  if (nc > np)
    nc = np;
  accept_phase(&who, world, parts, nc);
  /* the exchange: a socketpair to every other rank */
  FUZZ_CHECK(rt__mesh_new(&who, world, 1000, &m) == 0);
  k = nc;
  for (int r = 0; r < world; r++) {
    int sv[2];
    peer[r] = -1;
    if (r == rank)
      continue;
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    nonblock(sv[0]);
    nonblock(sv[1]);
    rt__mesh_fds(m)[r] = sv[0];
    peer[r] = sv[1];
    if (k < np) {
      if (parts[k].n)
        (void)send(sv[1], parts[k].p, parts[k].n, MSG_NOSIGNAL);
      k++;
    }
    shutdown(sv[1], SHUT_WR);
  }
  bytes = count * sizeof(float);
  buf = calloc(count ? count : 1, sizeof(float));
  part = malloc(((size_t)world + 1) * sizeof(size_t));
  FUZZ_CHECK(buf != NULL && part != NULL);
  for (size_t i = 0; i < count; i++)
    buf[i] = (float)i;
  for (int r = 0; r <= world; r++)
    part[r] = count * (size_t)r / (size_t)world;
  switch (op & 3) {
  case 0:
    rt__mesh_allreduce(m, buf, count);
    break;
  case 1: {
    int root = (op >> 2) % world, src = -1, rc;
    rc = rt__mesh_broadcast(m, buf, bytes, root);
    /* the root's stream is part nc + its index among the others */
    if (root != rank) {
      src = nc + root - (root > rank);
      if (rc == 0 && bytes > 0)
        FUZZ_CHECK(src < np && parts[src].n >= bytes &&
                   memcmp(buf, parts[src].p, bytes) == 0);
    }
    break;
  }
  case 2:
    rt__mesh_allgather(m, buf, part, sizeof(float));
    break;
  default:
    rt__mesh_reduce_scatter(m, buf, part);
  }
  fuzz_touch(buf, bytes);
  free(buf);
  free(part);
  rt__mesh_close(m);
  for (int r = 0; r < world; r++)
    if (peer[r] >= 0)
      close(peer[r]);
  return 0;
}
