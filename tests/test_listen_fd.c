/* test_listen_fd.c - srv_listen_fd: a server takes over a TCP socket that
 * was bound and listening before it existed (what an agent does when it may
 * have to host after a host failover: its port answers at once, and the
 * server it starts later serves the connections the kernel queued). A
 * client that connected before the server existed is served; a second one
 * after; the port is the socket's; an fd that is no socket fails with the
 * fd closed, not leaked; nothing is left open at the end. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lu.h"
#include "rdzv.h"
#include "server.h"
#include "test.h"

/* A socket bound to 127.0.0.1 on a port the kernel picks, listening. */
static int bound_socket(int *port) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  ASSERT(fd >= 0);
  ASSERT_EQ(0, setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(0, bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_EQ(0, listen(fd, 64));
  ASSERT_EQ(0, getsockname(fd, (struct sockaddr *)&sa, &len));
  *port = ntohs(sa.sin_port);
  return fd;
}

struct early {
  char endpoint[64];
  int rc;
  char value[16];
};

/* A client that connects (the kernel completes the handshake from the
 * backlog) and sets then reads a key: it waits for the server to come. */
static void *early_client(void *arg) {
  struct early *e = arg;
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  void *v = NULL;
  size_t n = 0;
  o.endpoint = e->endpoint;
  o.job = "early";
  o.connect_timeout_ms = test_ms(10000);
  o.io_timeout_ms = test_ms(10000);
  if ((e->rc = rdzv_connect(&o, &c)) != 0)
    return NULL;
  if ((e->rc = rdzv_set(c, "k", "queued", 6, test_ms(10000))) == 0 &&
      (e->rc = rdzv_get(c, "k", &v, &n, 0)) == 0) {
    memcpy(e->value, v, n < sizeof(e->value) - 1 ? n : sizeof(e->value) - 1);
    rdzv_free(v);
  }
  rdzv_close(c);
  return NULL;
}

static uv_loop_t loop;
static uv_async_t stop;
static srv_t *srv;

static void closed(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)&stop, NULL);
}

static void on_stop(uv_async_t *h) {
  (void)h;
  srv_close(srv, closed, NULL);
}

static void *loop_thread(void *arg) {
  (void)arg;
  uv_run(&loop, UV_RUN_DEFAULT);
  return NULL;
}

static void test_takes_over(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  struct early e;
  pthread_t client, server;
  int port, fd = bound_socket(&port);
  memset(&e, 0, sizeof(e));
  snprintf(e.endpoint, sizeof(e.endpoint), "127.0.0.1:%d", port);
  ASSERT_EQ(0, pthread_create(&client, NULL, early_client, &e));
  /* The client is in the kernel's queue, its HELLO unanswered, while no
   * server exists yet. */
  usleep(300 * 1000);
  ASSERT_EQ(0, uv_loop_init(&loop));
  ASSERT_EQ(0, uv_async_init(&loop, &stop, on_stop));
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  ASSERT_EQ(0, srv_new(&loop, &cfg, &srv));
  ASSERT_EQ(0, srv_listen_fd(srv, fd));
  ASSERT_EQ(port, srv_port(srv));
  ASSERT_EQ(0, pthread_create(&server, NULL, loop_thread, NULL));
  ASSERT_EQ(0, pthread_join(client, NULL));
  ASSERT_EQ(0, e.rc);
  ASSERT_STR_EQ("queued", e.value);
  /* a client after the take-over is served too */
  memset(e.value, 0, sizeof(e.value));
  early_client(&e);
  ASSERT_EQ(0, e.rc);
  ASSERT_STR_EQ("queued", e.value);
  uv_async_send(&stop);
  ASSERT_EQ(0, pthread_join(server, NULL));
  ASSERT_EQ(0, uv_loop_close(&loop));
}

/* An fd that is no socket: an error, and the fd closed by the time the
 * server is (the server owns it from the call on). */
static void test_not_a_socket(void) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  int p[2];
  ASSERT_EQ(0, pipe(p));
  close(p[1]);
  ASSERT_EQ(0, uv_loop_init(&loop));
  ASSERT_EQ(0, uv_async_init(&loop, &stop, on_stop));
  cfg.host = "127.0.0.1";
  ASSERT_EQ(0, srv_new(&loop, &cfg, &srv));
  ASSERT(srv_listen_fd(srv, p[0]) != 0);
  srv_close(srv, closed, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ(0, uv_loop_close(&loop));
  ASSERT_EQ(-1, fcntl(p[0], F_GETFD));
}

int main(void) {
  int fds = test_fd_count();
  test_takes_over();
  test_not_a_socket();
  ASSERT_EQ(fds, test_fd_count());
  printf("test_listen_fd: ok\n");
  return 0;
}
