/* test.c - the harness behind test.h. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "lu.h"
#include "proto.h"
#include "rdzv.h"
#include "server.h"
#include "test.h"

int test_ms(int ms) {
  const char *m = getenv("LAUNCH_TEST_TIMEOUT_MULT");
  int mult = m ? atoi(m) : 1;
  return ms * (mult > 0 ? mult : 1);
}

int test_fd_count(void) {
  static int warmed;
  DIR *d;
  struct dirent *e;
  int n = 0;
  if (!warmed) {
    /* libuv opens a process-wide signal pipe with its first loop; make it
     * exist before counting, so that it is not taken for a leak. */
    uv_loop_t l;
    warmed = 1;
    if (uv_loop_init(&l) == 0)
      uv_loop_close(&l);
  }
  d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

long test_rss_kib(pid_t pid) {
  char path[64], line[256];
  FILE *f;
  long kib = -1;
  if (pid == 0)
    snprintf(path, sizeof(path), "/proc/self/status");
  else
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kib = strtol(line + 6, NULL, 10);
  fclose(f);
  return kib;
}

/* ---- in-process server ------------------------------------------------------------ */

static struct {
  uv_loop_t loop;
  uv_async_t stop;
  pthread_t thread;
  srv_t *srv;
  int port;
  int running;
  char endpoint[64];
} ts;

static void srv_closed(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)&ts.stop, NULL);
}

static void on_stop(uv_async_t *a) {
  (void)a;
  srv_close(ts.srv, srv_closed, NULL);
}

static void *server_thread(void *arg) {
  (void)arg;
  uv_run(&ts.loop, UV_RUN_DEFAULT);
  return NULL;
}

int test_server_start(const struct srv_config_s *cfg_in) {
  srv_config_t cfg = SRV_CONFIG_INIT;
  static lu_log_t log;
  if (cfg_in)
    cfg = *cfg_in;
  if (cfg.host == NULL)
    cfg.host = "127.0.0.1";
  cfg.port = 0;
  /* LAUNCH_TEST_SERVER_THREADS=N runs every test server on N loops. */
  if (cfg.threads == 0 && getenv("LAUNCH_TEST_SERVER_THREADS"))
    cfg.threads = (uint32_t)atoi(getenv("LAUNCH_TEST_SERVER_THREADS"));
  lu_log_init(&log, "test server");
  if (cfg.log == NULL)
    cfg.log = &log;
  ASSERT_EQ(0, uv_loop_init(&ts.loop));
  ASSERT_EQ(0, uv_async_init(&ts.loop, &ts.stop, on_stop));
  ASSERT_EQ(0, srv_new(&ts.loop, &cfg, &ts.srv));
  ASSERT_EQ(0, srv_listen(ts.srv));
  ts.port = srv_port(ts.srv);
  snprintf(ts.endpoint, sizeof(ts.endpoint), "127.0.0.1:%d", ts.port);
  ASSERT_EQ(0, pthread_create(&ts.thread, NULL, server_thread, NULL));
  ts.running = 1;
  return ts.port;
}

void test_server_stop(void) {
  if (!ts.running)
    return;
  ts.running = 0;
  uv_async_send(&ts.stop);
  pthread_join(ts.thread, NULL);
  ASSERT_EQ(0, uv_loop_close(&ts.loop));
}

const char *test_server_endpoint(void) { return ts.endpoint; }

struct srv_s *test_server_srv(void) { return ts.srv; }

/* ---- children ---------------------------------------------------------------------- */

static pid_t children[256];
static int nchildren;
static char tmpdir[256];

pid_t test_spawn(char *const argv[], const char *log) {
  pid_t pid = fork();
  if (pid < 0)
    TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    if (log) {
      int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    execvp(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (nchildren < (int)LU_ARRAY_SIZE(children))
    children[nchildren++] = pid;
  return pid;
}

static void forget(pid_t pid) {
  for (int i = 0; i < nchildren; i++)
    if (children[i] == pid) {
      children[i] = children[--nchildren];
      return;
    }
}

int test_wait(pid_t pid, int ms) {
  uint64_t deadline = lu_now_ms() + (uint64_t)ms;
  int status;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      forget(pid);
      return status;
    }
    if (r < 0) {
      forget(pid);
      return -1;
    }
    if (lu_now_ms() >= deadline)
      return -1;
    usleep(2000);
  }
}

void test_kill(pid_t pid) {
  int status;
  if (pid <= 0)
    return;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  forget(pid);
}

void test_mkdirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *s = buf + 1; (s = strchr(s, '/')); s++) {
    *s = '\0';
    mkdir(buf, 0755);
    *s = '/';
  }
  mkdir(buf, 0755);
}

void test_put_file(const char *root, const char *rel, const char *text) {
  char path[1024], *slash;
  FILE *f;
  snprintf(path, sizeof(path), "%s%s", root, rel);
  if ((slash = strrchr(path, '/')) != NULL) {
    *slash = '\0';
    test_mkdirs(path);
    *slash = '/';
  }
  if ((f = fopen(path, "w")) == NULL)
    TEST_FAIL("fopen %s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

/* Remove path and what it holds, never following a symbolic link: a
 * link (the fake sysfs trees have many) goes, not what it points at. */
static void rm_rf(const char *path) {
  struct stat st;
  DIR *d;
  struct dirent *e;
  if (lstat(path, &st) != 0)
    return;
  if (!S_ISDIR(st.st_mode) || (d = opendir(path)) == NULL) {
    unlink(path);
    return;
  }
  while ((e = readdir(d)) != NULL) {
    char p[1024];
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
    rm_rf(p);
  }
  closedir(d);
  rmdir(path);
}

void test_cleanup(void) {
  while (nchildren > 0)
    test_kill(children[nchildren - 1]);
  if (tmpdir[0] && getenv("LAUNCH_TEST_KEEP") == NULL) {
    rm_rf(tmpdir);
    tmpdir[0] = '\0';
  }
}

const char *test_tmpdir(void) {
  if (tmpdir[0] == '\0') {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/launch-test-XXXXXX", t ? t : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
      TEST_FAIL("mkdtemp: %s", strerror(errno));
    atexit(test_cleanup);
  }
  return tmpdir;
}

const char *test_launch_bin(void) {
  const char *b = getenv("LAUNCH_BIN");
  return b ? b : "build/bin/launch";
}

char *test_read_file(const char *path) {
  char *data = NULL;
  size_t len;
  if (lu_read_file(path, 64u << 20, &data, &len) != 0)
    return NULL;
  return data;
}

int test_launch_server(pid_t *pid, const char *const *extra, const char *log) {
  char portfile[512];
  const char *argv[64];
  int n = 0;
  uint64_t deadline;
  snprintf(portfile, sizeof(portfile), "%s/port.%d", test_tmpdir(),
           nchildren);
  unlink(portfile);
  argv[n++] = test_launch_bin();
  argv[n++] = "server";
  argv[n++] = "--host";
  argv[n++] = "127.0.0.1";
  argv[n++] = "--port";
  argv[n++] = "0";
  argv[n++] = "--port-file";
  argv[n++] = portfile;
  for (int i = 0; extra && extra[i] && n < 62; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  *pid = test_spawn((char *const *)argv, log);
  deadline = lu_now_ms() + (uint64_t)test_ms(10000);
  while (lu_now_ms() < deadline) {
    char *p = test_read_file(portfile);
    if (p) {
      int port = atoi(p);
      free(p);
      if (port > 0)
        return port;
    }
    if (test_wait(*pid, 0) != -1)
      TEST_FAIL("launch server exited early (log: %s)", log ? log : "-");
    usleep(5000);
  }
  TEST_FAIL("launch server did not report its port");
  return -1;
}

void test_stop_server(pid_t pid) {
  int st;
  kill(pid, SIGTERM);
  st = test_wait(pid, test_ms(10000));
  ASSERT(st != -1 && WIFEXITED(st));
  ASSERT_EQ(0, WEXITSTATUS(st));
}

int test_rdzv_open(int port, const char *job, const char *token, char *err,
                   size_t errlen, rdzv_client_t **c) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
  o.endpoint = ep;
  o.job = job;
  o.token = token;
  o.token_len = token ? strlen(token) : 0;
  o.connect_timeout_ms = test_ms(5000);
  o.error = err;
  o.error_len = errlen;
  return rdzv_connect(&o, c);
}

int test_connect(int port) { return test_connect_from(NULL, port); }

int test_connect_from(const char *src, int port) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0)
    TEST_FAIL("socket: %s", strerror(errno));
  /* Its TIME_WAIT after close must not keep another test (or a helper's
   * agent) from listening on the same port of this address. */
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (src) {
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
      TEST_FAIL("bind to %s: %s", src, strerror(errno));
  }
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(0x7f000001);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
    TEST_FAIL("connect to 127.0.0.1:%d: %s", port, strerror(errno));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int test_read_exact(int fd, void *buf, size_t n, int ms) {
  uint64_t deadline = lu_now_ms() + (uint64_t)ms;
  char *p = buf;
  while (n > 0) {
    struct pollfd pf = {fd, POLLIN, 0};
    int left = (int)(deadline - lu_now_ms());
    ssize_t r;
    if (left <= 0 || poll(&pf, 1, left) <= 0)
      return -1;
    r = recv(fd, p, n, 0);
    if (r <= 0)
      return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int test_peer_closed(int fd, int ms) {
  uint64_t deadline = lu_now_ms() + (uint64_t)ms;
  char buf[4096];
  for (;;) {
    struct pollfd pf = {fd, POLLIN, 0};
    int left = (int)(deadline - lu_now_ms());
    ssize_t r;
    if (left <= 0 || poll(&pf, 1, left) <= 0)
      return 0;
    r = recv(fd, buf, sizeof(buf), 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET))
      return 1;
    if (r < 0)
      return 0;
  }
}

/* ---- the native protocol by hand ------------------------------------------------ */

int test_send_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) {
      if (w < 0 && errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read one frame body (malloc'd) within ms. RET its length or -1. */
static ssize_t read_frame_body(int fd, int ms, uint8_t **body) {
  uint8_t hdr[4];
  uint32_t len;
  if (test_read_exact(fd, hdr, 4, ms) != 0)
    return -1;
  len = proto_get_len(hdr);
  if (len > (64u << 20) || (*body = malloc(len ? len : 1)) == NULL)
    return -1;
  if (test_read_exact(fd, *body, len, ms) != 0) {
    free(*body);
    return -1;
  }
  return len;
}

int64_t test_read_reply(int fd, int ms, uint64_t *id) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  proto_msg_t m;
  uint8_t *body = NULL;
  ssize_t n;
  int64_t st = INT64_MIN;
  lim.max_frame = 64u << 20;
  lim.max_items = 1u << 22;
  for (;;) {
    if ((n = read_frame_body(fd, ms, &body)) < 0)
      return INT64_MIN;
    if (proto_decode(body, (size_t)n, &lim, &m) != 0) {
      free(body);
      return INT64_MIN;
    }
    if (m.kind == PROTO_REPLY) {
      st = m.op;
      if (id)
        *id = m.id;
      proto_msg_free(&m);
      free(body);
      return st;
    }
    proto_msg_free(&m); /* a push */
    free(body);
  }
}

int test_native_hello(const char *src, int port, const char *job,
                      const char *token, int64_t *status) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  proto_hello_t h;
  proto_msg_t m;
  proto_enc_t e;
  uint8_t *body = NULL;
  char err[256];
  ssize_t n;
  int fd = test_connect_from(src, port);
  memset(&h, 0, sizeof(h));
  h.job = job;
  h.role = "worker";
  h.token = token;
  h.token_len = token ? strlen(token) : 0;
  *status = INT64_MIN;
  if (test_send_all(fd, PROTO_MAGIC, PROTO_MAGIC_LEN) != 0 ||
      (n = read_frame_body(fd, test_ms(5000), &body)) < 0)
    return fd;
  if (proto_decode(body, (size_t)n, &lim, &m) != 0) {
    free(body);
    return fd;
  }
  if (proto_hello_challenge(&h, &m, err, sizeof(err)) != 0)
    TEST_FAIL("challenge: %s", err);
  proto_msg_free(&m);
  free(body);
  proto_enc_init(&e);
  proto_enc_begin(&e, 8);
  msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e.pk, 1);
  msgpack_pack_int64(&e.pk, PROTO_OP_HELLO);
  proto_hello_pack(&h, &e.pk);
  ASSERT_EQ(0, proto_enc_end(&e));
  if (test_send_all(fd, e.data, e.len) == 0)
    *status = test_read_reply(fd, test_ms(5000), NULL);
  proto_enc_destroy(&e);
  return fd;
}
