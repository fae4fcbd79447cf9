/* test_metrics_http.c - the HTTP side of --metrics-port (launcher/
 * metrics.c, libevent's evhttp), as a scraper or a browser meets it:
 * - /metrics: 200, the text format's content type, the job's text and the
 *   node's series; two scrapes on one kept-alive connection; HEAD: the
 *   length of the GET's body and no body;
 * - / (the page, text/plain until one is published, then text/html), 404
 *   elsewhere, 405 for POST (and DELETE), with Allow;
 * - a request whose headers pass the limit gets a 4xx and the server serves
 *   on;
 * - 16 connections at most: a 17th is closed while 16 are open, the 16
 *   are still served, and once they close a new one is served;
 * - 16 connections that trickle their headers a byte a second (each byte
 *   resets evhttp's idle timeout) are closed 10 s after they came, and a
 *   scrape is served again while they go on trickling;
 * - ::1 serves too (where the host has IPv6 loopback);
 * - a port in use and an address that is no literal are refused; met_stop
 *   with a connection open frees everything (ASan) and closes every fd. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"
#include "rdzv.h"
#include "test.h"

#define CONNS 16 /* metrics.c's MET_HTTP_CONNS */

static char body[1 << 20];

/* One reply on fd: RET its status (hdr: its head, body: its body), or -1
 * when the connection closed first. head: the request was a HEAD (no
 * body follows whatever Content-Length says). */
static int reply(int fd, int head, char *hdr, size_t cap) {
  size_t n = 0;
  const char *cl;
  long len = 0;
  int status;
  while (n + 1 < cap && (n < 4 || memcmp(hdr + n - 4, "\r\n\r\n", 4) != 0)) {
    if (test_read_exact(fd, hdr + n, 1, test_ms(10000)) != 0)
      return -1;
    n++;
  }
  hdr[n] = '\0';
  ASSERT(n + 1 < cap);
  if (sscanf(hdr, "HTTP/1.1 %d", &status) != 1)
    TEST_FAIL("not a reply: %s", hdr);
  cl = strstr(hdr, "Content-Length: ");
  ASSERT(cl != NULL);
  len = strtol(cl + 16, NULL, 10);
  ASSERT(len >= 0 && len < (long)sizeof(body));
  body[0] = '\0';
  if (!head) {
    ASSERT_EQ(0, test_read_exact(fd, body, (size_t)len, test_ms(10000)));
    body[len] = '\0';
  }
  return status;
}

static int ask(int fd, const char *method, const char *path, char *hdr,
               size_t cap) {
  char req[512];
  int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\n%s\r\n",
                   method, path,
                   strcmp(method, "POST") == 0 ? "Content-Length: 0\r\n" : "");
  ASSERT_EQ(0, test_send_all(fd, req, (size_t)n));
  return reply(fd, strcmp(method, "HEAD") == 0, hdr, cap);
}

static void kept_alive(int port) {
  char hdr[4096];
  long get_len;
  int fd = test_connect(port);
  ASSERT_EQ(200, ask(fd, "GET", "/metrics", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(hdr, "Content-Type: text/plain; version=0.0.4; "
                       "charset=utf-8\r\n");
  ASSERT_CONTAINS(body, "launch_test_up 1\n");
  ASSERT_CONTAINS(body, "launch_node_memory_total_bytes");
  /* the same connection, again */
  ASSERT_EQ(200, ask(fd, "GET", "/metrics", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(body, "launch_test_up 1\n");
  get_len = (long)strlen(body);
  ASSERT_EQ(200, ask(fd, "HEAD", "/metrics", hdr, sizeof(hdr)));
  ASSERT(strtol(strstr(hdr, "Content-Length: ") + 16, NULL, 10) > get_len / 2);
  ASSERT_EQ(200, ask(fd, "GET", "/", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(hdr, "Content-Type: text/plain; charset=utf-8\r\n");
  ASSERT_CONTAINS(body, "the metrics are at /metrics");
  ASSERT_EQ(404, ask(fd, "GET", "/nope", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(body, "not found");
  ASSERT_EQ(405, ask(fd, "POST", "/metrics", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(hdr, "Allow: GET, HEAD\r\n");
  ASSERT_CONTAINS(body, "only GET");
  ASSERT_EQ(405, ask(fd, "DELETE", "/", hdr, sizeof(hdr)));
  /* still the one connection */
  ASSERT_EQ(200, ask(fd, "GET", "/metrics?x=1", hdr, sizeof(hdr)));
  close(fd);
}

static void page(met_t *m, int port) {
  char hdr[4096];
  int fd = test_connect(port);
  met_publish_page(m, strdup("<!doctype html><title>job</title>\n"));
  ASSERT_EQ(200, ask(fd, "GET", "/", hdr, sizeof(hdr)));
  ASSERT_CONTAINS(hdr, "Content-Type: text/html; charset=utf-8\r\n");
  ASSERT_CONTAINS(body, "<title>job</title>");
  close(fd);
}

/* Headers over the limit (8 KB) in one segment: an error, not a crash,
 * and the server serves on. */
static void big_header(int port) {
  char hdr[4096];
  size_t n = 0;
  char *req = malloc(12000);
  int st, fd = test_connect(port);
  ASSERT(req != NULL);
  n += (size_t)sprintf(req, "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Big: ");
  memset(req + n, 'a', 10000);
  n += 10000;
  memcpy(req + n, "\r\n\r\n", 4);
  ASSERT_EQ(0, test_send_all(fd, req, n + 4));
  st = reply(fd, 0, hdr, sizeof(hdr));
  ASSERT(st >= 400 && st < 500); /* evhttp 2.1: 400 */
  ASSERT(test_peer_closed(fd, test_ms(10000)));
  close(fd);
  free(req);
  fd = test_connect(port);
  ASSERT_EQ(200, ask(fd, "GET", "/metrics", hdr, sizeof(hdr)));
  close(fd);
}

/* A scrape on a new connection, tried until one is served (the server
 * sees the closes before it: a new connection before that is closed). */
static void served_again(int port) {
  char hdr[4096];
  for (int tries = 0;; tries++) {
    int fd = test_connect(port), st;
    st = ask(fd, "GET", "/metrics", hdr, sizeof(hdr));
    close(fd);
    if (st == 200)
      return;
    ASSERT(tries < 200);
    usleep(50 * 1000);
  }
}

/* Closed without a reply: a request sent (or not: closed already), then
 * EOF or a reset before any byte. */
static int refused(int fd) {
  static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
  char c;
  if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) < 0)
    return 1;
  return test_read_exact(fd, &c, 1, test_ms(10000)) != 0 &&
         test_peer_closed(fd, test_ms(1000));
}

static void cap(int port) {
  char hdr[4096];
  int fd[CONNS], extra;
  for (int i = 0; i < CONNS; i++) {
    fd[i] = test_connect(port);
    ASSERT_EQ(200, ask(fd[i], "GET", "/metrics", hdr, sizeof(hdr)));
  }
  /* the 17th: closed, whether it asks or not */
  extra = test_connect(port);
  ASSERT(test_peer_closed(extra, test_ms(10000)));
  close(extra);
  extra = test_connect(port);
  ASSERT(refused(extra));
  close(extra);
  /* the 16 are served on */
  for (int i = 0; i < CONNS; i++)
    ASSERT_EQ(200, ask(fd[i], "GET", "/metrics", hdr, sizeof(hdr)));
  for (int i = 0; i < CONNS; i++)
    close(fd[i]);
  served_again(port);
  /* and 16 again at once */
  for (int i = 0; i < CONNS; i++) {
    fd[i] = test_connect(port);
    ASSERT_EQ(200, ask(fd[i], "GET", "/", hdr, sizeof(hdr)));
  }
  for (int i = 0; i < CONNS; i++)
    close(fd[i]);
}

/* 16 slow clients: a request begun, then a byte of a header each second,
 * never ended. Each is closed at its deadline (10 s from its accept),
 * whatever it sends: a scrape is served while they trickle on. */
static void trickle(int port) {
  static const char part[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
  char hdr[4096];
  int fd[CONNS], served = 0;
  for (int i = 0; i < CONNS; i++) {
    fd[i] = test_connect(port);
    ASSERT_EQ(0, test_send_all(fd[i], part, sizeof(part) - 1));
  }
  for (int s = 0; s < 25 && !served; s++) {
    int one;
    sleep(1);
    for (int i = 0; i < CONNS; i++)
      (void)send(fd[i], "a", 1, MSG_NOSIGNAL); /* closed: EPIPE */
    one = test_connect(port);
    served = ask(one, "GET", "/metrics", hdr, sizeof(hdr)) == 200;
    close(one);
  }
  ASSERT(served);
  for (int i = 0; i < CONNS; i++)
    close(fd[i]);
  served_again(port);
}

/* Served on an IPv6 literal, where the host has IPv6 loopback. */
static void ipv6(void) {
  struct sockaddr_in6 a;
  char hdr[4096];
  met_t *m6 = NULL;
  int fd, rc = met_start("::1", 0, "n0", &m6);
  if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT) {
    printf("no IPv6 loopback here: ::1 not tried\n");
    return;
  }
  ASSERT_EQ(0, rc);
  memset(&a, 0, sizeof(a));
  a.sin6_family = AF_INET6;
  a.sin6_port = htons((uint16_t)met_port(m6));
  a.sin6_addr = in6addr_loopback;
  fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT(fd >= 0);
  ASSERT_EQ(0, connect(fd, (struct sockaddr *)&a, sizeof(a)));
  ASSERT_EQ(200, ask(fd, "GET", "/metrics", hdr, sizeof(hdr)));
  close(fd);
  met_stop(m6);
}

int main(void) {
  met_t *m = NULL, *other = NULL;
  char hdr[4096];
  int rc, port, open_fd, fds = test_fd_count();
  rc = met_start("127.0.0.1", 0, "n0", &m);
  if (rc == RDZV_ENOTSUP) {
    printf("SKIP: built without libevent\n");
    return 77;
  }
  ASSERT_EQ(0, rc);
  port = met_port(m);
  ASSERT(port > 0);
  met_publish(m, strdup("launch_test_up 1\n"));
  kept_alive(port);
  page(m, port);
  big_header(port);
  cap(port);
  trickle(port);
  ipv6();
  /* a port in use, an address that is no literal */
  ASSERT_EQ(-EADDRINUSE, met_start("127.0.0.1", port, "n0", &other));
  ASSERT(other == NULL);
  ASSERT_EQ(-EINVAL, met_start("localhost", 0, "n0", &other));
  ASSERT(other == NULL);
  /* stopped with a connection open */
  open_fd = test_connect(port);
  ASSERT_EQ(200, ask(open_fd, "GET", "/metrics", hdr, sizeof(hdr)));
  met_stop(m);
  ASSERT(test_peer_closed(open_fd, test_ms(10000)));
  close(open_fd);
  ASSERT_EQ(fds, test_fd_count());
  printf("test_metrics_http: ok\n");
  return 0;
}
