/* helpers.c - small helpers of the workers module, most of them
 * async-signal-safe (the guardian and a forked child call them). */
#include "wk_int.h"

/* ---- small helpers --------------------------------------------------------- */

void wk_free_strv(char **v) {
  if (v == NULL)
    return;
  for (char **p = v; *p; p++)
    free(*p);
  free(v);
}

char **wk_dup_strv(char *const *v) {
  size_t n = 0;
  char **out;
  while (v[n])
    n++;
  if ((out = calloc(n + 1, sizeof(*out))) == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if ((out[i] = strdup(v[i])) == NULL) {
      wk_free_strv(out);
      return NULL;
    }
  return out;
}

/* Write all of buf. A console that is a non-blocking pipe or tty gets
 * waited on with poll(2) (it blocks the loop like a full console would
 * block any program); a console that is gone drops the data. */
int wk_write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t r = write(fd, buf, n);
    if (r > 0) {
      buf += r;
      n -= (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, -1);
      continue;
    }
    return r < 0 ? -errno : -EIO;
  }
  return 0;
}

/* Move fd to a number >= 3 with close-on-exec set, so that dup2 onto 0/1/2
 * in the child always makes a fresh descriptor (an agent started with fd 1
 * closed would otherwise get a pipe end there). RET new fd or -errno. */
int wk_fd_high(int fd) {
  int nfd;
  if (fd >= 3)
    return fd;
  nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return nfd < 0 ? -errno : nfd;
}

/* ---- small async-signal-safe helpers (guardian, child) ----------------- */

/* Append to a fixed buffer. */
size_t wk_cat(char *buf, size_t at, size_t cap, const char *s) {
  while (*s && at + 1 < cap)
    buf[at++] = *s++;
  buf[at] = '\0';
  return at;
}

static size_t wk_cat_u(char *buf, size_t at, size_t cap, unsigned long long v) {
  char num[24];
  int i = (int)sizeof(num) - 1;
  num[i] = '\0';
  do
    num[--i] = (char)('0' + v % 10);
  while ((v /= 10) > 0 && i > 0);
  return wk_cat(buf, at, cap, num + i);
}

static int wk_write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t r;
  size_t n = strlen(text);
  if (fd < 0)
    return -errno;
  r = write(fd, text, n);
  r = r < 0 ? -errno : 0;
  close(fd);
  return (int)r;
}

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot),
 * 0 when the process is gone. Tells a pid apart from a later reuse. */
unsigned long long wk_start_time(pid_t pid) {
  char path[64], buf[1024];
  int fd;
  ssize_t r;
  size_t at = wk_cat(path, 0, sizeof(path), "/proc/");
  at = wk_cat_u(path, at, sizeof(path), (unsigned long long)pid);
  wk_cat(path, at, sizeof(path), "/stat");
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return 0;
  r = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (r <= 0)
    return 0;
  buf[r] = '\0';
  return wk__stat_start(buf, (size_t)r);
}

unsigned long long wk__stat_start(const char *buf, size_t r) {
  const char *p = NULL;
  unsigned long long v = 0;
  int field = 2;
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
  for (ssize_t i = (ssize_t)r - 1; i >= 0; i--)
    if (buf[i] == ')') {
      p = buf + i + 1;
      break;
    }
  if (p == NULL)
    return 0;
  while (*p && field < 22) {
    if (*p == ' ')
      field++;
    p++;
  }
  while (*p >= '0' && *p <= '9')
    v = v * 10 + (unsigned long long)(*p++ - '0');
  return v;
}

/* SIGKILL everything in a cgroup: cgroup.kill (Linux >= 5.14), else freeze
 * it, kill what cgroup.procs lists, thaw, until it lists nothing. */
void wk_cg_kill_dir(const char *dir) {
  char path[PATH_MAX + 32], buf[4096];
  size_t at = wk_cat(path, 0, sizeof(path), dir);
  wk_cat(path, at, sizeof(path), "/cgroup.kill");
  if (wk_write_file(path, "1") == 0)
    return;
  wk_cat(path, at, sizeof(path), "/cgroup.freeze");
  (void)wk_write_file(path, "1");
  for (int round = 0; round < 100; round++) {
    int fd, any = 0;
    ssize_t r;
    wk_cat(path, at, sizeof(path), "/cgroup.procs");
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      break;
    while ((r = read(fd, buf, sizeof(buf) - 1)) > 0) {
      pid_t pid = 0;
      for (ssize_t i = 0; i < r; i++) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
        } else if (pid > 0) {
          kill(pid, SIGKILL);
          any = 1;
          pid = 0;
        }
      }
      if (pid > 0) {
        kill(pid, SIGKILL);
        any = 1;
      }
    }
    close(fd);
    if (!any)
      break;
  }
  wk_cat(path, at, sizeof(path), "/cgroup.freeze");
  (void)wk_write_file(path, "0");
}

/* "<base>/w<rank>.<attempt>" into buf: a cgroup per worker and attempt,
 * as a cgroup that was killed kills what is later put in it. */
void wk_cg_path(char *buf, size_t cap, const char *base, int rank,
                unsigned attempt) {
  size_t at = wk_cat(buf, 0, cap, base);
  at = wk_cat(buf, at, cap, "/w");
  at = wk_cat_u(buf, at, cap, (unsigned long long)rank);
  at = wk_cat(buf, at, cap, ".");
  wk_cat_u(buf, at, cap, (unsigned long long)attempt);
}

/* rmdir a cgroup and every cgroup under it, deepest first: a worker may
 * have made sub-cgroups (and moved processes into them), which an rmdir of
 * its own cgroup alone leaves behind for good. Async-signal-safe (the
 * guardian calls it): getdents64 on a stack buffer, no malloc. depth
 * bounds the recursion. RET 0 when dir is gone (or never was). */
int wk_cg_rmdir_deep(const char *dir, int depth) {
  char buf[4096];
  int fd;
  long r;
  if (rmdir(dir) == 0 || errno == ENOENT)
    return 0;
  if (errno != EBUSY && errno != ENOTEMPTY)
    return -1;
  if (depth <= 0 ||
      (fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
    return -1;
  while ((r = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
    for (long off = 0; off < r;) {
      struct {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *e = (void *)(buf + off);
      off += e->reclen;
      if (e->type == DT_DIR && e->name[0] != '.') {
        char sub[PATH_MAX + 256];
        size_t at = wk_cat(sub, 0, sizeof(sub), dir);
        at = wk_cat(sub, at, sizeof(sub), "/");
        if (wk_cat(sub, at, sizeof(sub), e->name) < sizeof(sub) - 1)
          (void)wk_cg_rmdir_deep(sub, depth - 1);
      }
    }
  }
  close(fd);
  return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

/* rmdir the worker cgroups att[k] (attempt + 1; 0: none) and the base; a
 * cgroup whose last process is still exiting refuses for a moment: try
 * for up to `ms`. */
void wk_cg_rmdir_all(const char *base, const uint32_t *att, int n,
                     int ms) {
  struct timespec ts = {0, 1000000};
  for (int t = 0; t <= ms; t++) {
    int left = 0;
    for (int k = 0; k < n; k++) {
      char path[PATH_MAX + 48];
      if (att[k] == 0)
        continue;
      wk_cg_path(path, sizeof(path), base, k, att[k] - 1);
      if (wk_cg_rmdir_deep(path, WK_CG_DEPTH) != 0)
        left = 1;
    }
    if (!left && (rmdir(base) == 0 || errno == ENOENT))
      return;
    if (t < ms)
      nanosleep(&ts, NULL);
  }
}
