/* test_metrics_gnutls.c - --metrics-port without GnuTLS's initialisation
 * (launcher/metrics.c: Debian's libmicrohttpd links GnuTLS and initialises
 * it in its constructor; the endpoint never speaks TLS, and the agent
 * answers that call itself, ~0.9 MB less resident memory,
 * docs/BENCHMARKS.md). This program exports the two functions as launch
 * does (tests/CMakeLists.txt): the endpoint serves, GnuTLS is loaded but
 * not initialised, and any other caller of gnutls_global_init() in the
 * process (a libcurl built with GnuTLS) gets GnuTLS's own initialisation. */
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics.h"
#include "rdzv.h"
#include "test.h"

#define GNUTLS_E_LIB_IN_ERROR_STATE (-402) /* a call before the init */

int gnutls_global_init(void); /* metrics.c's */

static void scrape(int port) {
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                     "Connection: close\r\n\r\n";
  char buf[4096];
  size_t n = 0;
  ssize_t k;
  int fd = test_connect(port);
  ASSERT_EQ(0, test_send_all(fd, req, sizeof(req) - 1));
  while (n + 1 < sizeof(buf) &&
         (k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0)) > 0)
    n += (size_t)k;
  buf[n] = '\0';
  close(fd);
  ASSERT_CONTAINS(buf, "HTTP/1.1 200");
  ASSERT_CONTAINS(buf, "launch_node_");
}

int main(void) {
  met_t *m = NULL;
  void *gnutls;
  int (*rnd)(int, void *, size_t);
  unsigned char b[16];
  int rc, fds = test_fd_count();
  rc = met_start("127.0.0.1", 0, "n0", &m);
  if (rc == RDZV_ENOTSUP) {
    printf("SKIP: no libmicrohttpd (built without it, or not installed)\n");
    return 77;
  }
  ASSERT_EQ(0, rc);
  scrape(met_port(m));
  /* Loaded with libmicrohttpd, not initialised: GnuTLS refuses a call. */
  gnutls = dlopen("libgnutls.so.30", RTLD_LAZY | RTLD_NOLOAD);
  if (gnutls == NULL) {
    printf("SKIP: this libmicrohttpd links no GnuTLS: nothing to skip\n");
    met_stop(m);
    return 77;
  }
  *(void **)&rnd = dlsym(gnutls, "gnutls_rnd");
  ASSERT(rnd != NULL);
  ASSERT_EQ(GNUTLS_E_LIB_IN_ERROR_STATE, rnd(0, b, sizeof(b)));
  /* Another user of GnuTLS initialises it as it always did. */
  ASSERT_EQ(0, gnutls_global_init());
  ASSERT_EQ(0, rnd(0, b, sizeof(b)));
  scrape(met_port(m));
  dlclose(gnutls);
  met_stop(m);
  ASSERT_EQ(fds, test_fd_count());
  printf("test_metrics_gnutls: ok\n");
  return 0;
}
