/* test_self_connect.c - a connect to a port of this host where nothing
 * listens can meet itself: when the kernel picks the target port as the
 * socket's own source port (the port is in the ephemeral range), TCP's
 * simultaneous open connects the socket to itself, and whatever the client
 * sends it reads back as the server's answer. CI saw it as "oversized
 * frame from the server" from an agent waiting for a server that was not
 * up yet. Every client must take it for "connection refused":
 *   - lu_self_connected on a socket bound to the port it connects to, on an
 *     ordinary connection, on a UNIX socket;
 *   - in network namespaces of its own (root; skipped elsewhere) whose
 *     ephemeral range is the one port the clients connect to, so that
 *     every attempt meets itself: librdzv's rdzv_connect, the agent
 *     waiting for its server (`launch --rdzv-conf is_host=false`), and
 *     `launch doctor`'s reachability check. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lu.h"
#include "rdzv.h"
#include "test.h"

enum { PORT = 40000 };

static void loopback(struct sockaddr_in *sa, int port) {
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static void test_detect(void) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  int one = 1, fd, l, c, a, sv[2];

  /* a socket bound to the port it connects to meets itself */
  fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(fd >= 0);
  ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  loopback(&sa, 0);
  ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
  ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_EQ(1, lu_self_connected(fd));
  close(fd);

  /* an ordinary connection, both ends */
  l = socket(AF_INET, SOCK_STREAM, 0);
  loopback(&sa, 0);
  ASSERT_OK(bind(l, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_OK(listen(l, 1));
  sl = sizeof(sa);
  ASSERT_OK(getsockname(l, (struct sockaddr *)&sa, &sl));
  c = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_OK(connect(c, (struct sockaddr *)&sa, sizeof(sa)));
  a = accept(l, NULL, NULL);
  ASSERT(a >= 0);
  ASSERT_EQ(0, lu_self_connected(c));
  ASSERT_EQ(0, lu_self_connected(a));
  ASSERT_EQ(0, lu_self_connected(l)); /* not connected */
  close(a);
  close(c);
  close(l);

  ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  ASSERT_EQ(0, lu_self_connected(sv[0]));
  close(sv[0]);
  close(sv[1]);
}

/* A network namespace whose loopback is up and whose ephemeral range is
 * PORT alone. RET 0, or -1 where this process may not make one. */
static int own_netns(void) {
  struct ifreq ifr;
  char range[32];
  int fd, s, n;
  if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0)
    return -1;
  s = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT(s >= 0);
  memset(&ifr, 0, sizeof(ifr));
  lu_strlcpy(ifr.ifr_name, "lo", sizeof(ifr.ifr_name));
  ASSERT_OK(ioctl(s, SIOCGIFFLAGS, &ifr));
  ifr.ifr_flags |= IFF_UP;
  ASSERT_OK(ioctl(s, SIOCSIFFLAGS, &ifr));
  close(s);
  fd = open("/proc/sys/net/ipv4/ip_local_port_range", O_WRONLY);
  if (fd < 0)
    return -1;
  n = snprintf(range, sizeof(range), "%d %d\n", PORT, PORT);
  ASSERT_EQ(n, write(fd, range, (size_t)n));
  close(fd);
  return 0;
}

/* PORT's connect meets itself here (the condition of the tests below) */
static void check_condition(void) {
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  loopback(&sa, PORT);
  ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_EQ(1, lu_self_connected(fd));
  close(fd);
}

static void test_librdzv(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char ep[64], err[512] = "";
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", PORT);
  o.endpoint = ep;
  o.job = "self";
  o.connect_timeout_ms = 0; /* one attempt */
  o.io_timeout_ms = test_ms(3000);
  o.error = err;
  o.error_len = sizeof(err);
  ASSERT_EQ(-ECONNREFUSED, rdzv_connect(&o, &c));
  ASSERT(c == NULL);
}

static char *run_launch(char *const argv[], int *status) {
  char log[4096];
  snprintf(log, sizeof(log), "%s/launch.log", test_tmpdir());
  pid_t pid = test_spawn(argv, log);
  *status = test_wait(pid, test_ms(30000));
  ASSERT(*status != -1);
  return test_read_file(log);
}

static void test_agent(void) {
  char ep[64];
  int st;
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", PORT);
  char *argv[] = {(char *)test_launch_bin(), "--no-log-time", "--nnodes", "2",
                  "--rdzv-endpoint", ep, "--rdzv-conf", "is_host=false,read_timeout=3",
                  "/bin/true", NULL};
  char *out = run_launch(argv, &st);
  /* waits for a server that is not there, then says why: refused */
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 75);
  ASSERT_CONTAINS(out, "connection refused");
  ASSERT(strstr(out, "oversized") == NULL);
  ASSERT(strstr(out, "frame") == NULL);
  free(out);
}

static void test_doctor(void) {
  char ep[64];
  int st;
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", PORT);
  char *argv[] = {(char *)test_launch_bin(), "doctor", "--rdzv-endpoint", ep, NULL};
  char *out = run_launch(argv, &st);
  ASSERT_CONTAINS(out, "connection refused: nothing listens on 127.0.0.1:40000");
  ASSERT(strstr(out, "40000 reachable") == NULL);
  free(out);
}

int main(void) {
  test_detect();
  if (own_netns() != 0) {
    printf("test_self_connect: detection ok; skip: the clients (needs root and a "
           "network namespace)\n");
    return 77;
  }
  /* a fresh namespace each: a client's attempts may leave the one port
   * in TIME_WAIT */
  check_condition();
  test_librdzv();
  ASSERT_OK(own_netns());
  check_condition();
  test_agent();
  ASSERT_OK(own_netns());
  check_condition();
  test_doctor();
  printf("test_self_connect: ok\n");
  return 0;
}
