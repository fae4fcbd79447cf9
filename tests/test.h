/* test.h - the test harness: assertions, an in-process server on its own
 * loop thread, child processes tracked by pid, fd and RSS checks.
 * Each tests/test_*.c is one feature and one process under ctest. */
#ifndef TEST_H
#define TEST_H

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define TEST_FAIL(...)                                                         \
  do {                                                                         \
    fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                      \
    fprintf(stderr, __VA_ARGS__);                                              \
    fprintf(stderr, "\n");                                                     \
    test_cleanup();                                                            \
    exit(1);                                                                   \
  } while (0)

#define ASSERT(c)                                                              \
  do {                                                                         \
    if (!(c))                                                                  \
      TEST_FAIL("assertion failed: %s", #c);                                   \
  } while (0)

#define ASSERT_EQ(a, b)                                                        \
  do {                                                                         \
    long long _a = (long long)(a), _b = (long long)(b);                        \
    if (_a != _b)                                                              \
      TEST_FAIL("%s == %s: %lld != %lld", #a, #b, _a, _b);                     \
  } while (0)

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    long long _r = (long long)(expr);                                          \
    if (_r < 0)                                                                \
      TEST_FAIL("%s failed: %lld (%s)", #expr, _r, rdzv_strerror((int)_r));    \
  } while (0)

#define ASSERT_STR_EQ(a, b)                                                    \
  do {                                                                         \
    const char *_a = (a), *_b = (b);                                           \
    if (_a == NULL || _b == NULL || strcmp(_a, _b) != 0)                       \
      TEST_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, _a ? _a : "(null)",      \
                _b ? _b : "(null)");                                           \
  } while (0)

#define ASSERT_MEM_EQ(a, b, n)                                                 \
  do {                                                                         \
    if (memcmp((a), (b), (n)) != 0)                                            \
      TEST_FAIL("%s == %s over %zu bytes", #a, #b, (size_t)(n));               \
  } while (0)

#define ASSERT_CONTAINS(hay, needle)                                           \
  do {                                                                         \
    const char *_h = (hay), *_n = (needle);                                    \
    if (_h == NULL || strstr(_h, _n) == NULL)                                  \
      TEST_FAIL("\"%s\" does not contain \"%s\"", _h ? _h : "(null)", _n);     \
  } while (0)

/* Scale a timeout by LAUNCH_TEST_TIMEOUT_MULT (slow sanitizer builds). */
int test_ms(int ms);

/* Number of open fds of this process. */
int test_fd_count(void);
/* Resident set size of a process in KiB (pid 0 = self). */
long test_rss_kib(pid_t pid);

/* ---- in-process server (a loop thread) ------------------------------------ */
struct srv_config_s;
/* Start a server on 127.0.0.1 (cfg may be NULL for defaults; its host and
 * port are overridden unless host is set). RET the port. */
int test_server_start(const struct srv_config_s *cfg);
/* Stop it, join the thread, assert the loop closed cleanly. */
void test_server_stop(void);
/* "127.0.0.1:PORT" of the running server. */
const char *test_server_endpoint(void);
/* The in-process server (srv_get_stats from the test's thread). */
struct srv_s *test_server_srv(void);

/* ---- child processes ---------------------------------------------------------- */
/* Spawn argv with stdout+stderr to `log` (NULL = inherit). The pid is
 * recorded and killed by test_cleanup() if still alive. */
pid_t test_spawn(char *const argv[], const char *log);
/* Wait for pid up to ms. RET the exit status (waitpid encoding) or -1 on
 * timeout. */
int test_wait(pid_t pid, int ms);
/* SIGKILL and reap pid (no-op if gone). */
void test_kill(pid_t pid);
/* Kill every child still alive; called by TEST_FAIL and at exit. */
void test_cleanup(void);

/* Start `launch server --port 0 --port-file F extra...` as a child; RET its
 * port, OUT *pid. */
int test_launch_server(pid_t *pid, const char *const *extra, const char *log);
/* SIGTERM a `launch server` child; it must exit 0 within 10 s (scaled):
 * a clean stop, and under ASan no leak. */
void test_stop_server(pid_t pid);
/* librdzv to 127.0.0.1:port for job, with token (NULL: none).
 * OUT *c, err (why it failed). RET rdzv_connect's status. */
struct rdzv_client_s;
int test_rdzv_open(int port, const char *job, const char *token, char *err,
                   size_t errlen, struct rdzv_client_s **c);
/* Path of build/bin/launch (LAUNCH_BIN env, set by ctest). */
const char *test_launch_bin(void);
/* mkdir -p path (mode 0755); what exists already is left as it is. */
void test_mkdirs(const char *path);
/* Write text to root + rel, making the directories (fake sysfs trees). */
void test_put_file(const char *root, const char *rel, const char *text);
/* A fresh temp dir under $TMPDIR (removed by test_cleanup). */
const char *test_tmpdir(void);
/* Read a whole file into a static-lifetime malloc'd string (NULL if none). */
char *test_read_file(const char *path);
/* Raw TCP connect to 127.0.0.1:port. RET fd. */
int test_connect(int port);
/* The same from a local address of the loopback net (127.0.0.x stands for
 * another host). RET fd. */
int test_connect_from(const char *src, int port);
/* Read exactly n bytes within ms. RET 0, -1 on EOF/timeout. */
int test_read_exact(int fd, void *buf, size_t n, int ms);
/* RET 1 if the peer closed the connection within ms, else 0. */
int test_peer_closed(int fd, int ms);

/* ---- the native protocol by hand (hostile clients) ------------------------ */
/* Connect from src (NULL: 127.0.0.1), send the magic and answer the
 * challenge with a HELLO for job, proving token (NULL: none).
 * OUT *status: the HELLO reply's status (0: in). RET the fd. */
int test_native_hello(const char *src, int port, const char *job,
                      const char *token, int64_t *status);
/* Send all of buf (the peer may close: RET 0 sent, -1 not all). */
int test_send_all(int fd, const void *buf, size_t n);
/* Read one reply frame within ms. OUT *id (may be NULL). RET its status,
 * or INT64_MIN when none came (closed, timeout). */
int64_t test_read_reply(int fd, int ms, uint64_t *id);

#endif
