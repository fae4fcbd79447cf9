/* test_adv_tls.c - TLS for the native protocol (#11), with certificates
 * the test makes with the openssl command line:
 * - a valid server certificate: a client with the CA is served;
 * - a certificate of another CA, an expired one, one that does not name
 *   the host dialled: refused, each explained in one line;
 * - a plaintext native client and a TCPStore client on a TLS listener:
 *   refused (TCPStore unless its address is in --tcpstore-allow);
 * - mutual TLS (--tls-ca on the server): a client certificate of the CA
 *   is let in; none, or one of another CA, is refused with a line saying
 *   so on both ends. */
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lu.h"
#include "rdzv.h"
#include "tcpstore.h"
#include "test.h"

static char dir[512];

static const char *path(const char *name) {
  static char buf[8][600];
  static int i;
  i = (i + 1) % 8;
  snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
  return buf[i];
}

static void sh(const char *fmt, ...) LU_PRINTF(1, 2);
static void sh(const char *fmt, ...) {
  char cmd[2048], full[sizeof(cmd) + sizeof(dir) + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  snprintf(full, sizeof(full), "cd %s && (%s) >/dev/null 2>&1", dir, cmd);
  if (system(full) != 0)
    TEST_FAIL("command failed: %s", cmd);
}

/* A CA, and a certificate it signs (days < 0: expired). */
static void make_ca(const char *name) {
  sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s.key -out %s.pem "
     "-days 2 -subj /CN=%s", name, name, name);
}

static void make_cert(const char *name, const char *ca, const char *san,
                      int days) {
  sh("openssl req -newkey rsa:2048 -nodes -keyout %s.key -out %s.csr "
     "-subj /CN=%s && printf 'subjectAltName=%s\\n' > %s.ext && "
     "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key "
     "-CAcreateserial -out %s.pem -days %d -extfile %s.ext",
     name, name, name, san, name, name, ca, ca, name, days, name);
}

static int tls_server(pid_t *pid, const char *cert, const char *ca,
                      const char *log) {
  const char *extra[12];
  int n = 0;
  extra[n++] = "--tls-cert";
  extra[n++] = path(cert);
  extra[n++] = "--tls-key";
  extra[n++] = path(strcmp(cert, "expired.pem") ? "server.key" : "expired.key");
  if (ca) {
    extra[n++] = "--tls-ca";
    extra[n++] = path(ca);
    extra[n++] = "--tcpstore-allow";
    extra[n++] = "127.0.0.0/8";
  }
  extra[n] = NULL;
  return test_launch_server(pid, extra, log);
}

/* Connect with TLS; RET rdzv_connect's status, the reason in err. */
static int try_tls(const char *host, int port, const char *ca,
                   const char *cert, char *err, size_t cap) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char ep[128];
  int rc;
  snprintf(ep, sizeof(ep), "%s:%d", host, port);
  o.endpoint = ep;
  o.job = "tls";
  o.connect_timeout_ms = test_ms(5000);
  o.tls_ca = ca ? path(ca) : NULL;
  if (cert) {
    char key[64];
    snprintf(key, sizeof(key), "%.*s.key", (int)(strlen(cert) - 4), cert);
    o.tls_cert = path(cert);
    o.tls_key = path(key);
  }
  o.error = err;
  o.error_len = cap;
  err[0] = '\0';
  rc = rdzv_connect(&o, &c);
  if (rc == 0) {
    void *v = NULL;
    size_t n = 0;
    ASSERT_OK(rdzv_set(c, "over-tls", "yes", 3, test_ms(5000)));
    ASSERT_OK(rdzv_get(c, "over-tls", &v, &n, test_ms(5000)));
    ASSERT_EQ(3, n);
    rdzv_free(v);
    rdzv_close(c);
  }
  printf("  %-40s -> %s\n", cert ? cert : (ca ? ca : "plaintext"),
         rc == 0 ? "served" : err);
  return rc;
}

/* A TCPStore 2.x client: VALIDATE then PING. RET 1 when answered. */
static int tcpstore_ping(int port) {
  uint8_t req[16], rep[4];
  int fd = test_connect(port), ok;
  memcpy(req, "\x00\xce\xf7\x85\x3c", 5);
  req[5] = TS_PING;
  memcpy(req + 6, "\x01\x02\x03\x04", 4);
  test_send_all(fd, req, 10);
  ok = test_read_exact(fd, rep, 4, test_ms(3000)) == 0 &&
       memcmp(rep, "\x01\x02\x03\x04", 4) == 0;
  close(fd);
  return ok;
}

int main(void) {
  char err[512], logpath[600];
  char *log;
  pid_t pid;
  int port;

  signal(SIGPIPE, SIG_IGN);
  if (system("openssl version >/dev/null 2>&1") != 0) {
    printf("SKIP: no openssl command\n");
    return 77;
  }
  lu_strlcpy(dir, test_tmpdir(), sizeof(dir));
  make_ca("ca");
  make_ca("otherca");
  make_cert("server", "ca", "IP:127.0.0.1", 2);
  make_cert("expired", "ca", "IP:127.0.0.1", -1);
  make_cert("client", "ca", "DNS:client", 2);
  make_cert("stranger", "otherca", "DNS:stranger", 2);

  printf("TLS server:\n");
  port = tls_server(&pid, "server.pem", NULL, NULL);
  ASSERT_OK(try_tls("127.0.0.1", port, "ca.pem", NULL, err, sizeof(err)));
  ASSERT_EQ(RDZV_EAUTH,
            try_tls("127.0.0.1", port, "otherca.pem", NULL, err, sizeof(err)));
  ASSERT_CONTAINS(err, "not signed by a CA of --tls-ca");
  ASSERT_EQ(RDZV_EAUTH,
            try_tls("localhost", port, "ca.pem", NULL, err, sizeof(err)));
  ASSERT_CONTAINS(err, "does not name localhost");
  ASSERT(try_tls("127.0.0.1", port, NULL, NULL, err, sizeof(err)) != 0);
  ASSERT(!tcpstore_ping(port));
  test_stop_server(pid);

  /* Issue #24: half-done handshakes (a ClientHello's record header, then
   * silence) are capped per address and in all, and charged what OpenSSL
   * holds: one address's 100 leave 64 waiting, the others are closed at
   * once, and a client from another address is served. */
  printf("TLS server under half-done handshakes:\n");
  {
    static const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00};
    int fds[100], closed = 0;
    port = tls_server(&pid, "server.pem", NULL, NULL);
    for (int i = 0; i < 100; i++) {
      fds[i] = test_connect_from("127.0.0.22", port);
      ASSERT(fds[i] >= 0);
      ASSERT_OK(test_send_all(fds[i], hello, sizeof(hello)));
    }
    usleep(300000);
    for (int i = 0; i < 100; i++)
      closed += test_peer_closed(fds[i], 1);
    printf("  100 half-done handshakes from one address: %d closed at "
           "once\n", closed);
    ASSERT_EQ(36, closed);
    ASSERT_OK(try_tls("127.0.0.1", port, "ca.pem", NULL, err, sizeof(err)));
    for (int i = 0; i < 100; i++)
      close(fds[i]);
    test_stop_server(pid);
  }

  printf("TLS server with an expired certificate:\n");
  port = tls_server(&pid, "expired.pem", NULL, NULL);
  ASSERT_EQ(RDZV_EAUTH,
            try_tls("127.0.0.1", port, "ca.pem", NULL, err, sizeof(err)));
  ASSERT_CONTAINS(err, "certificate expired");
  test_stop_server(pid);

  printf("mutual TLS:\n");
  snprintf(logpath, sizeof(logpath), "%s/mtls.log", dir);
  port = tls_server(&pid, "server.pem", "ca.pem", logpath);
  ASSERT_OK(try_tls("127.0.0.1", port, "ca.pem", "client.pem", err,
                    sizeof(err)));
  ASSERT(try_tls("127.0.0.1", port, "ca.pem", NULL, err, sizeof(err)) != 0);
  ASSERT_CONTAINS(err, "client certificate");
  ASSERT(try_tls("127.0.0.1", port, "ca.pem", "stranger.pem", err,
                 sizeof(err)) != 0);
  ASSERT(tcpstore_ping(port)); /* its address is allowed */
  test_stop_server(pid);
  log = test_read_file(logpath);
  ASSERT(log != NULL);
  ASSERT_CONTAINS(log, "the client sent no certificate");
  ASSERT_CONTAINS(log, "not signed by a CA of --tls-ca");
  free(log);
  printf("test_adv_tls: ok\n");
  return 0;
}
