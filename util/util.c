/* util.c - time, endpoint and number parsing, random bytes, files. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"

uint64_t lu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t lu_now_ms(void) { return lu_now_ns() / 1000000ull; }

double lu_wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void lu_iso8601(double wall_s, char *buf, size_t n) {
  /* Round to the millisecond first, so that .123 does not print as .122. */
  int64_t total_ms = (int64_t)(wall_s * 1000.0 + 0.5);
  time_t t = (time_t)(total_ms / 1000);
  struct tm tm;
  int ms = (int)(total_ms % 1000);
  gmtime_r(&t, &tm);
  snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

void lu_errf(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  if (err == NULL || n == 0)
    return;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
}

size_t lu_strlcpy(char *dst, const char *src, size_t n) {
  size_t len = strlen(src);
  if (n > 0) {
    size_t c = len < n - 1 ? len : n - 1;
    memcpy(dst, src, c);
    dst[c] = '\0';
  }
  return len;
}

int lu_parse_i64(const char *s, size_t n, int64_t *out) {
  int64_t v = 0;
  size_t i = 0;
  int neg = 0;
  if (n == 0)
    return RDZV_EINVAL;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i = 1;
    if (n == 1)
      return RDZV_EINVAL;
  }
  for (; i < n; i++) {
    int d;
    if (s[i] < '0' || s[i] > '9')
      return RDZV_EINVAL;
    d = s[i] - '0';
    /* Accumulate negatively so that INT64_MIN parses. */
    if (v < (INT64_MIN + d) / 10)
      return RDZV_EINVAL;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == INT64_MIN)
      return RDZV_EINVAL;
    v = -v;
  }
  *out = v;
  return 0;
}

int lu_parse_int(const char *s, int min, int max, int *out) {
  int64_t v;
  if (s == NULL || lu_parse_i64(s, strlen(s), &v) != 0 || v < min || v > max)
    return RDZV_EINVAL;
  *out = (int)v;
  return 0;
}

int lu_parse_duration_ms(const char *s, int64_t *out_ms) {
  char *end;
  double v;
  double mult = 1000.0;
  if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
    return RDZV_EINVAL;
  errno = 0;
  v = strtod(s, &end);
  /* !(v >= 0) also refuses "nan", which every comparison lets through and
   * whose conversion to an integer is undefined. */
  if (errno != 0 || end == s || !(v >= 0))
    return RDZV_EINVAL;
  if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
    mult = 1000.0;
  else if (strcmp(end, "ms") == 0)
    mult = 1.0;
  else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
    mult = 60000.0;
  else if (strcmp(end, "h") == 0)
    mult = 3600000.0;
  else
    return RDZV_EINVAL;
  v *= mult;
  if (v > (double)INT64_MAX / 2)
    return RDZV_EINVAL;
  *out_ms = (int64_t)(v + 0.5);
  return 0;
}

/* Host names and IP addresses (with an IPv6 zone after '%'). */
static int host_ok(const char *h) {
  for (; *h; h++) {
    unsigned char c = (unsigned char)*h;
    if (!(isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' ||
          c == '%'))
      return 0;
  }
  return 1;
}

int lu_endpoint_parse(const char *s, int default_port, lu_endpoint_t *ep) {
  const char *colon;
  size_t hlen;
  memset(ep, 0, sizeof(*ep));
  ep->port = -1;
  if (s == NULL || *s == '\0')
    return RDZV_EADDR;
  if (strncmp(s, "unix:", 5) == 0) {
    if (s[5] == '\0' || strlen(s + 5) >= sizeof(ep->path))
      return RDZV_EADDR;
    ep->is_unix = 1;
    lu_strlcpy(ep->path, s + 5, sizeof(ep->path));
    return 0;
  }
  if (s[0] == '[') {
    const char *rb = strchr(s, ']');
    if (rb == NULL || rb == s + 1)
      return RDZV_EADDR;
    hlen = (size_t)(rb - s - 1);
    if (hlen >= sizeof(ep->host))
      return RDZV_EADDR;
    memcpy(ep->host, s + 1, hlen);
    ep->host[hlen] = '\0';
    if (!host_ok(ep->host))
      return RDZV_EADDR;
    if (rb[1] == '\0')
      colon = NULL;
    else if (rb[1] == ':')
      colon = rb + 1;
    else
      return RDZV_EADDR;
  } else {
    colon = strrchr(s, ':');
    if (colon != NULL && strchr(s, ':') != colon) {
      /* Several colons and no brackets: a bare IPv6 address, no port. */
      colon = NULL;
      hlen = strlen(s);
    } else {
      hlen = colon ? (size_t)(colon - s) : strlen(s);
    }
    if (hlen == 0 || hlen >= sizeof(ep->host))
      return RDZV_EADDR;
    memcpy(ep->host, s, hlen);
    ep->host[hlen] = '\0';
    if (!host_ok(ep->host))
      return RDZV_EADDR;
  }
  if (colon != NULL) {
    if (lu_parse_int(colon + 1, 0, 65535, &ep->port) != 0)
      return RDZV_EADDR;
  } else {
    ep->port = default_port;
  }
  return 0;
}

void lu_endpoint_format(const lu_endpoint_t *ep, char *buf, size_t n) {
  if (ep->is_unix)
    snprintf(buf, n, "unix:%s", ep->path);
  else if (strchr(ep->host, ':') != NULL)
    snprintf(buf, n, "[%s]:%d", ep->host, ep->port);
  else
    snprintf(buf, n, "%s:%d", ep->host, ep->port);
}

int lu_random(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

void lu_hex(const void *buf, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *p = buf;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

const char *lu_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "regular file";
  case S_IFDIR: return "directory";
  case S_IFIFO: return "FIFO";
  case S_IFCHR: return "character device";
  case S_IFBLK: return "block device";
  case S_IFSOCK: return "socket";
  case S_IFLNK: return "symbolic link";
  default: return "special file";
  }
}

int lu_open_regular(const char *path, int nofollow, struct stat *st,
                    char *err, size_t errlen) {
  struct stat sb;
  int fd, flags;
  if (st == NULL)
    st = &sb;
  /* O_NONBLOCK: opening a FIFO for reading waits for a writer, for ever
   * when none comes; with it the open returns at once and fstat says
   * what the path really is. */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY |
                      (nofollow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP && nofollow)
      lu_errf(err, errlen, "%s is a symbolic link: refused here", path);
    else
      lu_errf(err, errlen, "%s: %s", path, strerror(e));
    return -e;
  }
  if (fstat(fd, st) != 0) {
    int e = errno;
    lu_errf(err, errlen, "%s: fstat: %s", path, strerror(e));
    close(fd);
    return -e;
  }
  if (!S_ISREG(st->st_mode)) {
    lu_errf(err, errlen, "%s is a %s, not a regular file: refused", path,
            lu_file_type(st->st_mode));
    close(fd);
    return S_ISDIR(st->st_mode) ? -EISDIR : RDZV_ENOTREG;
  }
  /* Regular files never block; reads then behave as usual. */
  if ((flags = fcntl(fd, F_GETFL)) >= 0)
    (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

int lu_read_file_safe(const char *path, size_t max, char **data, size_t *len,
                      char *err, size_t errlen) {
  struct stat st;
  char *buf = NULL;
  size_t cap, used = 0;
  int fd, rc = 0;
  if ((fd = lu_open_regular(path, 0, &st, err, errlen)) < 0)
    return fd;
  if (st.st_size > 0 && (uint64_t)st.st_size > max) {
    lu_errf(err, errlen, "%s is %llu bytes, over the %zu-byte limit for "
            "this file", path, (unsigned long long)st.st_size, max);
    close(fd);
    return RDZV_ETOOBIG;
  }
  /* What fstat says (0 for /proc and /sys files) sizes the buffer, so
   * memory follows what is really there; a file that grows while it is
   * read still stops at max. */
  cap = (size_t)st.st_size + 2; /* + 1 spare byte to see the end */
  if (cap < 4096)
    cap = LU_MIN(max + 1, (size_t)4096);
  for (;;) {
    ssize_t r;
    if (buf == NULL || used + 1 >= cap) {
      size_t ncap = buf == NULL ? cap : LU_MIN(cap * 2, max + 2);
      char *nb;
      if (buf != NULL && ncap <= cap) {
        rc = RDZV_ETOOBIG;
        break;
      }
      if ((nb = realloc(buf, ncap)) == NULL) {
        rc = RDZV_ENOMEM;
        break;
      }
      buf = nb;
      cap = ncap;
    }
    r = read(fd, buf + used, cap - used - 1);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      rc = -errno;
      break;
    }
    if (r == 0)
      break;
    used += (size_t)r;
    if (used > max) {
      rc = RDZV_ETOOBIG;
      break;
    }
  }
  close(fd);
  if (rc != 0) {
    if (rc == RDZV_ETOOBIG)
      lu_errf(err, errlen, "%s is over the %zu-byte limit for this file",
              path, max);
    else if (rc == RDZV_ENOMEM)
      lu_errf(err, errlen, "%s: out of memory", path);
    else
      lu_errf(err, errlen, "%s: read: %s", path, strerror(-rc));
    free(buf);
    return rc;
  }
  buf[used] = '\0';
  *data = buf;
  if (len)
    *len = used;
  return 0;
}

int lu_read_file(const char *path, size_t max, char **data, size_t *len) {
  return lu_read_file_safe(path, max, data, len, NULL, 0);
}

void lu_list_add(char *out, size_t cap, const char *s) {
  size_t used = strlen(out);
  if (used + 1 < cap)
    snprintf(out + used, cap - used, "%s%s", used ? ", " : "", s);
}

size_t lu_rtrim(char *s, size_t len) {
  while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r' ||
                     s[len - 1] == ' ' || s[len - 1] == '\t'))
    s[--len] = '\0';
  return len;
}

int lu_which(const char *name, const char *path, char *out, size_t cap) {
  struct stat st;
  if (*name == '\0')
    return -1;
  if (strchr(name, '/'))
    return snprintf(out, cap, "%s", name) < (int)cap && access(name, F_OK) == 0
               ? 0
               : -1;
  for (const char *p = path ? path : "/bin:/usr/bin";; p++) {
    size_t n = strcspn(p, ":");
    /* An empty element is the current directory, as in execvp. */
    int w = n == 0 ? snprintf(out, cap, "%s", name)
                   : snprintf(out, cap, "%.*s/%s", (int)n, p, name);
    if (w > 0 && (size_t)w < cap && stat(out, &st) == 0 &&
        S_ISREG(st.st_mode) && access(out, X_OK) == 0)
      return 0;
    p += n;
    if (*p == '\0')
      return -1;
  }
}

int lu_read_line(const char *root, const char *path, char *buf, size_t n) {
  char full[1024];
  int fd;
  ssize_t r;
  if (n == 0)
    return -1;
  snprintf(full, sizeof(full), "%s%s", root ? root : "", path);
  if ((fd = open(full, O_RDONLY | O_CLOEXEC)) < 0)
    return -1;
  r = read(fd, buf, n - 1);
  close(fd);
  if (r < 0)
    return -1;
  buf[r] = '\0';
  return (int)lu_rtrim(buf, (size_t)r);
}

int lu_read_token(const char *path, char **tok, size_t *len, char *err,
                  size_t errlen) {
  char why[1024];
  struct stat st;
  int rc = lu_read_file_safe(path, LU_TOKEN_MAX, tok, len, why, sizeof(why));
  if (rc != 0) {
    lu_errf(err, errlen, "--token-file %s%s", why,
            rc == RDZV_ETOOBIG ? " (a token file holds one secret of at "
                                 "most 4096 bytes)" : "");
    return rc;
  }
  if ((*len = lu_rtrim(*tok, *len)) == 0) {
    lu_errf(err, errlen, "--token-file %s is empty: put a secret in it, e.g. "
            "head -c 32 /dev/urandom | base64 > %s", path, path);
    free(*tok);
    *tok = NULL;
    return RDZV_EINVAL;
  }
  /* Anyone who can write the secret can join or hijack the job (sshd
   * refuses such key files; a warning keeps shared test setups going). */
  if (stat(path, &st) == 0 && (st.st_mode & S_IWOTH)) {
    lu_log_t log;
    lu_log_init(&log, "launch");
    LU_WARN(&log, "--token-file %s is writable by every user (mode %03o): "
            "anyone on this host can change the job's secret; chmod 600 it",
            path, (unsigned)(st.st_mode & 0777));
  }
  return 0;
}

static int mkdir_one(const char *path) {
  struct stat sb;
  if (mkdir(path, 0755) == 0)
    return 0;
  if (errno != EEXIST)
    return -errno;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

int lu_self_connected(int fd) {
  struct sockaddr_storage me, peer;
  socklen_t ml = sizeof(me), pl = sizeof(peer);
  if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
      getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 || ml != pl ||
      me.ss_family != peer.ss_family)
    return 0;
  if (me.ss_family == AF_INET) {
    const struct sockaddr_in *a = (void *)&me, *b = (void *)&peer;
    if (a->sin_port != b->sin_port || a->sin_addr.s_addr != b->sin_addr.s_addr)
      return 0;
  } else if (me.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (void *)&me, *b = (void *)&peer;
    if (a->sin6_port != b->sin6_port ||
        memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) != 0)
      return 0;
  } else {
    return 0;
  }
  /* closed with a reset: no TIME_WAIT keeps the port from the server */
  struct linger lg = {1, 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  return 1;
}

static struct rlimit nofile_given;
static int nofile_raised;

void lu_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max)
    return;
  nofile_given = rl;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    nofile_raised = 1;
}

int lu_nofile_given(unsigned long long *cur, unsigned long long *max) {
  if (!nofile_raised)
    return 0;
  *cur = (unsigned long long)nofile_given.rlim_cur;
  *max = (unsigned long long)nofile_given.rlim_max;
  return 1;
}

int lu_mkdir_p(const char *path) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  int rc;
  if (n == 0 || n >= sizeof(buf))
    return -ENAMETOOLONG;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i < n; i++)
    if (buf[i] == '/') {
      buf[i] = '\0';
      if ((rc = mkdir_one(buf)) != 0)
        return rc;
      buf[i] = '/';
    }
  return mkdir_one(buf);
}

/* Levenshtein distance (strings under 79 bytes; 99 for longer ones). */
int lu_edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  int prev[80], cur[80];
  if (la >= 79 || lb >= 79)
    return 99;
  for (int j = 0; j <= lb; j++)
    prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
      c = LU_MIN(c, prev[j] + 1);
      c = LU_MIN(c, cur[j - 1] + 1);
      cur[j] = c;
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

uint64_t lu_fnv1a64(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
