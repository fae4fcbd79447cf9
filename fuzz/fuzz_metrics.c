/* fuzz_metrics.c - the agent's metrics and status page server
 * (launcher/metrics.c, --metrics-port): what an HTTP client sends, after
 * evhttp has parsed it: answer() with every method, path and query
 * string (GET /metrics?x, HEAD /, POST /metrics, absolute URIs,
 * %-escapes), keep-alive requests one after another, the connection cap's
 * accounting (conn_new, conn_adopt, conn_closed). A fresh server on
 * 127.0.0.1, a free port, for each input; the input is sent on one
 * connection in chunks, then the client half-closes and reads to the end.
 * The seeds are requests as curl, Prometheus and a browser send them.
 * Invariants checked:
 * - the server closes the connection once the client half-closed, within
 *   5 s (evhttp answers an HTTP/0.x request with the body alone: no
 *   status line is required);
 * - met_stop frees everything (LeakSanitizer).
 * The connect does not block: libFuzzer's SIGALRM (every -timeout/2 + 1
 * seconds, no SA_RESTART) interrupted a blocking connect on loopback with
 * EINTR once in CI, six seconds into a run; it polls for the connection
 * instead, through EINTR. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "metrics.h"

static const size_t chunks[] = {5, 1, 100, 3, 2048};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 0 once fd (non-blocking) is connected to sin within 5 s, else an errno */
static int connect_wait(int fd, const struct sockaddr_in *sin) {
  int64_t deadline = now_ms() + 5000;
  int err = 0;
  socklen_t elen = sizeof(err);
  if (connect(fd, (const struct sockaddr *)sin, sizeof(*sin)) == 0)
    return 0;
  if (errno != EINPROGRESS && errno != EINTR)
    return errno;
  for (;;) {
    struct pollfd pf = {fd, POLLOUT, 0};
    int64_t left = deadline - now_ms();
    int r;
    if (left <= 0)
      return ETIMEDOUT;
    r = poll(&pf, 1, (int)left);
    if (r > 0)
      break;
    if (r < 0 && errno != EINTR)
      return errno;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
    return errno;
  return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct sockaddr_in sin;
  met_t *m = NULL;
  int fd, err, eof = 0;
  size_t off = 0, ci = 0;
  int64_t deadline;
  FUZZ_CHECK(met_start("127.0.0.1", 0, "fuzz", &m) == 0);
  met_publish_page(m, strdup("<html>fuzz</html>"));
  met_publish(m, strdup("# TYPE launch_fuzz gauge\nlaunch_fuzz 1\n"));
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  memset(&sin, 0, sizeof(sin));
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons((uint16_t)met_port(m));
  if ((err = connect_wait(fd, &sin)) != 0)
    fprintf(stderr, "fuzz_metrics: connect to 127.0.0.1:%d: %s\n", met_port(m),
            strerror(err));
  FUZZ_CHECK(err == 0);
  deadline = now_ms() + 5000;
  while (!eof && now_ms() < deadline) {
    struct pollfd pf = {fd, POLLIN, 0};
    char buf[16384];
    if (off < size) {
      size_t n = chunks[ci++ % (sizeof(chunks) / sizeof(chunks[0]))];
      ssize_t w;
      if (n > size - off)
        n = size - off;
      w = send(fd, data + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0)
        off += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR)
        off = size;
      if (off == size)
        shutdown(fd, SHUT_WR);
    } else if (size == 0 && ci++ == 0) {
      shutdown(fd, SHUT_WR);
    }
    if (poll(&pf, 1, off < size ? 1 : 100) <= 0)
      continue;
    for (;;) {
      ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0)
        continue;
      if (r == 0 || (errno != EAGAIN && errno != EINTR))
        eof = 1;
      break;
    }
  }
  FUZZ_CHECK(eof); /* closed within 5 s of the half-close */
  close(fd);
  met_stop(m);
  return 0;
}
