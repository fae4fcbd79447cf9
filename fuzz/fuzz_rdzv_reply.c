/* fuzz_rdzv_reply.c - librdzv's side of a connection (rendezvous/client.c):
 * what a server, or anything that answers on its port, sends back. A
 * fake server on 127.0.0.1 (one listening port for the process: no file
 * is left behind when a run is killed) sends the input as its whole stream, then
 * half-closes; the client connects (CHALLENGE, HELLO: handshake), then makes
 * every call in turn: SET, GET, ADD, COMPARE_SET, CHECK, WAIT, MGET,
 * MSET, DELETE, NUM_KEYS, APPEND, LIST, BARRIER, PING, two sets without
 * waiting and a flush, PROGRESS, SET+MGET pipelined. So read_frame (frames
 * split and joined anyhow, oversized lengths), rpc_recv (pushes and stale
 * replies in between, error replies), the nowait bookkeeping, mget_values
 * and rdzv_list's decoding all see the input.
 * The seeds are the bytes a real `launch server` sent this sequence
 * (capture_net.py), with the challenge and replies then cut or changed.
 * FUZZ_ENDPOINT=unix:PATH or HOST:PORT runs the sequence against that
 * server instead (to capture a seed through capture_net.py).
 * Invariants checked:
 * - every call returns (no hang); a failed connect says why;
 * - values returned are what their lengths say (read whole under ASan);
 * - after the stream ends every call fails, none succeeds from nothing;
 * - rdzv_close frees everything (LeakSanitizer). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_int.h"
#include "fuzz.h"
#include "rdzv.h"

typedef struct fake_s {
  int lfd, wake; /* the listener; an eventfd: the client gave up */
  const uint8_t *p;
  size_t n;
} fake_t;

static void *fake_server(void *arg) {
  fake_t *f = arg;
  struct pollfd pf[2] = {{f->lfd, POLLIN, 0}, {f->wake, POLLIN, 0}};
  char sink[4096];
  size_t off = 0;
  int fd;
  /* the client's connection first: one that connected is in the queue
   * before its rdzv_connect returns, so none is left there for the next run */
  while (poll(pf, 2, -1) < 0)
    ;
  /* EINTR (libFuzzer's SIGALRM, no SA_RESTART) must not end a run's
   * exchange early: the same input must always send the same bytes */
  if (!(pf[0].revents & POLLIN))
    return NULL;
  while ((fd = accept(f->lfd, NULL, NULL)) < 0 && errno == EINTR)
    ;
  if (fd < 0)
    return NULL;
  while (off < f->n) {
    ssize_t w = send(fd, f->p + off, f->n - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    off += (size_t)w;
  }
  shutdown(fd, SHUT_WR);
  for (;;) {
    ssize_t r = recv(fd, sink, sizeof(sink), 0);
    if (r > 0 || (r < 0 && errno == EINTR))
      continue;
    break;
  }
  close(fd);
  return NULL;
}

/* A failed call's message is the server's own (an error reply may carry
 * an empty one), so only its presence as a string is checked. */
static int ok(rdzv_client_t *c, int rc) {
  if (rc != 0)
    fuzz_touch(rdzv_last_error(c), strlen(rdzv_last_error(c)));
  return rc == 0;
}

static void calls(rdzv_client_t *c) {
  const char *keys[] = {"a", "b", "c"};
  const void *vals[] = {"1", "22", "333"};
  const size_t lens[] = {1, 2, 3};
  rdzv_value_t mv[3];
  rdzv_scalars_t sc;
  int64_t v = 0;
  int sw = 0;
  void *val = NULL;
  size_t len = 0, n = 0;
  char **list = NULL;
  ok(c, rdzv_set(c, "a", "1", 1, 1000));
  if (ok(c, rdzv_get(c, "a", &val, &len, 1000))) {
    fuzz_touch(val, len);
    rdzv_free(val);
  }
  ok(c, rdzv_add(c, "n", 5, &v, 1000));
  val = NULL;
  if (ok(c, rdzv_compare_set(c, "a", "1", 1, "2", 1, &val, &len, &sw, 1000))) {
    fuzz_touch(val, len);
    rdzv_free(val);
  }
  rdzv_check(c, keys, 3, 1000);
  ok(c, rdzv_wait(c, keys, 2, 1000));
  if (ok(c, rdzv_multi_get(c, keys, 3, mv, 1000)))
    for (int i = 0; i < 3; i++) {
      fuzz_touch(mv[i].data, mv[i].len);
      rdzv_free(mv[i].data);
    }
  ok(c, rdzv_multi_set(c, keys, vals, lens, 3, 1000));
  rdzv_delete(c, "a", 1000);
  ok(c, rdzv_num_keys(c, &v, 1000));
  ok(c, rdzv_append(c, "a", "x", 1, 1000));
  if (ok(c, rdzv_list(c, "", &list, &n, 1000))) {
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(list[i] != NULL);
    for (size_t i = 0; i < n; i++)
      fuzz_touch(list[i], strlen(list[i]));
    rdzv_free_keys(list, n);
  }
  ok(c, rdzv_barrier(c, "b", 1, 1000));
  ok(c, rdzv_ping(c, 1000));
  ok(c, rdzv_set_nowait(c, "q", "1", 1));
  ok(c, rdzv_set_nowait(c, "r", "2", 1));
  ok(c, rdzv_flush(c, 1000));
  memset(&sc, 0, sizeof(sc));
  sc.has = ~0u;
  sc.loss = 1.5;
  ok(c, rdzv_progress_ex(c, 0, 7, &sc, 1000));
  if (ok(c, rdzv__set_multi_get(c, "a", "1", 1, keys, 2, mv, 1000)))
    for (int i = 0; i < 2; i++) {
      fuzz_touch(mv[i].data, mv[i].len);
      rdzv_free(mv[i].data);
    }
  /* the stream has ended (or was found broken): nothing succeeds now */
  if (getenv("FUZZ_ENDPOINT") == NULL)
    FUZZ_CHECK(rdzv_ping(c, 1000) != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char ep[64];
  static int lfd = -1, wake = -1;
  const char *want = getenv("FUZZ_ENDPOINT");
  rdzv_options_t o;
  rdzv_client_t *c = NULL;
  fake_t f = {-1, -1, data, size};
  pthread_t th;
  char err[256];
  int rc;
  memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.version = 1;
  o.io_timeout_ms = 5000;
  o.connect_timeout_ms = 0;
  o.error = err;
  o.error_len = sizeof(err);
  if (want == NULL) {
    uint64_t u;
    if (lfd < 0) {
      struct sockaddr_in sin;
      socklen_t sl = sizeof(sin);
      memset(&sin, 0, sizeof(sin));
      sin.sin_family = AF_INET;
      sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      FUZZ_CHECK(lfd >= 0 && wake >= 0);
      FUZZ_CHECK(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
      FUZZ_CHECK(listen(lfd, 4) == 0);
      FUZZ_CHECK(getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0);
      snprintf(ep, sizeof(ep), "127.0.0.1:%d", (int)ntohs(sin.sin_port));
    }
    while (read(wake, &u, sizeof(u)) > 0) /* the last run's, unread */
      ;
    f.lfd = lfd;
    f.wake = wake;
    FUZZ_CHECK(pthread_create(&th, NULL, fake_server, &f) == 0);
    o.endpoint = ep;
  } else {
    o.endpoint = want;
  }
  rc = rdzv_connect(&o, &c);
  if (rc == 0)
    calls(c);
  else
    FUZZ_CHECK(err[0] != '\0');
  rdzv_close(c);
  if (want == NULL) {
    /* the client may have gone before connecting: end the wait for it */
    if (rc != 0) {
      uint64_t one = 1;
      FUZZ_CHECK(write(wake, &one, sizeof(one)) == sizeof(one));
    }
    pthread_join(th, NULL);
  }
  return 0;
}
