/* test_adv_lockout.c - nobody locks the server for the others (#11):
 * - with --max-conns 64, 64 silent sockets (and ones that stop after the
 *   magic) fill the limit: at the handshake timeout the partial ones and
 *   enough silent ones are closed, and a client gets in; silent ones kept
 *   (there was room) make room for a new connection, oldest first;
 * - a client address gets at most --max-conns-per-addr connections: one
 *   address's 64 silent sockets leave room for another address's client;
 * - 4,096 throw-away HELLOs (HELLO, then disconnect) from one address all
 *   create their job: a job with no connection and no data is freed when
 *   its last connection closes (#24); jobs in use (connected, or holding
 *   data) count against --max-jobs-per-addr, the refusal naming the limit
 *   and the flag, and another address still creates a job at once. */
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "test.h"

static int port;

/* librdzv from 127.0.0.1 (a refused connection fails at once); RET its
 * status. */
static int try_client(const char *job) {
  rdzv_client_t *c = NULL;
  char err[256];
  int rc;
  rc = test_rdzv_open(port, job, NULL, err, sizeof(err), &c);
  if (rc == 0) {
    ASSERT_OK(rdzv_set(c, "k", "v", 1, test_ms(5000)));
    rdzv_close(c);
  }
  return rc;
}

static void test_silent_sockets(void) {
  const char *extra[] = {"--max-conns", "64", "--max-conns-per-addr", "48",
                         "--handshake-timeout", "1s", NULL};
  int fds[64], more[64], refused = 0, rc = -1;
  uint64_t t0, waited;
  pid_t pid;
  port = test_launch_server(&pid, extra, NULL);
  /* 48 silent from one address, 16 from another (8 of them stop after
   * the magic, before HELLO): 64 in all, the limit. */
  for (int i = 0; i < 64; i++) {
    fds[i] = test_connect_from(i < 48 ? "127.0.0.22" : "127.0.0.23", port);
    if (i >= 56)
      ASSERT_EQ(0, test_send_all(fds[i], "RDZV", 4));
  }
  usleep(200000);
  t0 = lu_now_ms();
  /* Refused while they hold every slot, let in once they are closed. */
  while (lu_now_ms() - t0 < (uint64_t)test_ms(10000)) {
    if ((rc = try_client("lockout")) == 0)
      break;
    usleep(50000);
  }
  waited = lu_now_ms() - t0;
  printf("a client got in %llu ms after 64 silent sockets\n",
         (unsigned long long)waited);
  ASSERT_OK(rc);
  /* Those that stopped after the magic are closed; of the silent ones,
   * the oldest are closed until the server is below three quarters of
   * its limits again, the rest are kept (a PyTorch 1.13 client sends
   * nothing until its first request) and closed first when a new
   * connection needs their slot (test_silent_evicted). */
  for (int i = 56; i < 64; i++)
    ASSERT(test_peer_closed(fds[i], test_ms(3000)));
  for (int i = 0; i < 56; i++)
    refused += test_peer_closed(fds[i], 1);
  printf("%d of 56 silent sockets closed under pressure\n", refused);
  ASSERT(refused >= 64 - 48 && refused < 56);
  refused = 0;
  for (int i = 0; i < 64; i++)
    close(fds[i]);
  usleep(300000);
  /* One address: only 48 of its 64 sockets are kept; another address's
   * client is served at once. */
  for (int i = 0; i < 64; i++)
    more[i] = test_connect_from("127.0.0.22", port);
  usleep(200000);
  ASSERT_OK(try_client("lockout"));
  for (int i = 0; i < 64; i++)
    refused += test_peer_closed(more[i], 1);
  printf("%d of 64 sockets from one address refused at once\n", refused);
  ASSERT_EQ(16, refused);
  for (int i = 0; i < 64; i++)
    close(more[i]);
  test_stop_server(pid);
}

/* Silent sockets kept past the handshake timeout (there was room) are
 * closed, oldest first, when a new connection needs their slot: the new
 * one gets in at once. */
static void test_silent_evicted(void) {
  const char *extra[] = {"--max-conns", "8", "--handshake-timeout", "2s",
                         NULL};
  int fds[8], closed = 0;
  pid_t pid;
  port = test_launch_server(&pid, extra, NULL);
  /* Four silent sockets: below three quarters of 8, so all are kept. */
  for (int i = 0; i < 4; i++)
    fds[i] = test_connect_from("127.0.0.22", port);
  usleep(2600000); /* kept at 2 s, looked at again at 4 s */
  for (int i = 0; i < 4; i++)
    closed += test_peer_closed(fds[i], 1);
  ASSERT_EQ(0, closed);
  /* Four fresh ones fill the limit; a client still gets in at once,
   * closing the oldest kept socket. */
  for (int i = 4; i < 8; i++)
    fds[i] = test_connect_from("127.0.0.22", port);
  usleep(100000);
  ASSERT_OK(try_client("evict"));
  ASSERT(test_peer_closed(fds[0], test_ms(2000)));
  printf("a client got in at the connection limit: the oldest silent "
         "socket made room\n");
  for (int i = 0; i < 8; i++)
    close(fds[i]);
  test_stop_server(pid);
}

/* A HELLO from src for job; RET its status. */
static int64_t hello_status(const char *src, const char *job) {
  int64_t st;
  int fd = test_native_hello(src, port, job, NULL, &st);
  close(fd);
  return st;
}

static void test_throwaway_hellos(void) {
  const char *extra[] = {NULL};
  int ok = 0, fds[64];
  rdzv_client_t *held[63], *c = NULL;
  char job[32], err[512];
  pid_t pid;
  port = test_launch_server(&pid, extra, NULL);
  /* Issue #24: a job with no connection and no data is freed when its
   * last connection closes, so throw-away HELLOs never use up the
   * address's slots (a node running a sweep of short jobs). */
  for (int i = 0; i < 4096; i++) {
    snprintf(job, sizeof(job), "throwaway-%d", i);
    ok += hello_status("127.0.0.22", job) == 0;
  }
  printf("4096 throw-away HELLOs from one address: %d jobs created\n", ok);
  ASSERT_EQ(4096, ok);
  /* Jobs in use count: 64 held open, the 65th is refused, saying the
   * limit and how to raise it. */
  for (int i = 0; i < 64; i++) {
    snprintf(job, sizeof(job), "held-%d", i);
    int64_t st = -1;
    fds[i] = test_native_hello("127.0.0.22", port, job, NULL, &st);
    ASSERT_EQ(0, st);
    ASSERT(fds[i] >= 0);
  }
  ASSERT_EQ(RDZV_ELIMIT, hello_status("127.0.0.22", "one-too-many"));
  /* Another address is not locked out. */
  ASSERT_OK(try_client("real-job"));
  for (int i = 0; i < 64; i++)
    close(fds[i]);
  /* Their slots come back with their connections, without a grace; jobs
   * that hold data count while they do. */
  for (int i = 0; i < 63; i++) { /* with real-job's key: 64 */
    snprintf(job, sizeof(job), "data-%d", i);
    ASSERT_OK(test_rdzv_open(port, job, NULL, err, sizeof(err), &held[i]));
    ASSERT_OK(rdzv_set(held[i], "k", "v", 1, test_ms(5000)));
  }
  ASSERT_EQ(RDZV_ELIMIT,
            test_rdzv_open(port, "one-too-many", NULL, err, sizeof(err), &c));
  printf("refused: %s\n", err);
  ASSERT(strstr(err, "per-address limit of 64") != NULL);
  ASSERT(strstr(err, "--max-jobs-per-addr") != NULL);
  for (int i = 0; i < 63; i++)
    rdzv_close(held[i]);
  usleep(200000);
  ASSERT_EQ(RDZV_ELIMIT,
            test_rdzv_open(port, "still-data", NULL, err, sizeof(err), &c));
  test_stop_server(pid);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_silent_sockets();
  test_silent_evicted();
  test_throwaway_hellos();
  printf("test_adv_lockout: ok\n");
  return 0;
}
