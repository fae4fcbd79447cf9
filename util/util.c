/* util.c - time, endpoint and number parsing, random bytes, files. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

int lu_read_file(const char *path, size_t max, char **data, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  char *buf = NULL;
  size_t cap = 0, used = 0;
  int rc = 0;
  if (fd < 0)
    return -errno;
  for (;;) {
    ssize_t r;
    if (used + 1 >= cap) {
      size_t ncap = cap ? cap * 2 : 4096;
      char *nb;
      if (cap > max + 1) {
        rc = RDZV_ETOOBIG;
        break;
      }
      nb = realloc(buf, ncap);
      if (nb == NULL) {
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
    free(buf);
    return rc;
  }
  if (buf == NULL && (buf = malloc(1)) == NULL)
    return RDZV_ENOMEM;
  buf[used] = '\0';
  *data = buf;
  if (len)
    *len = used;
  return 0;
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

int lu_gpu_count(const char *cvd) {
  DIR *d;
  struct dirent *e;
  int n = 0;
  if ((d = opendir("/proc/driver/nvidia/gpus")) != NULL) {
    while ((e = readdir(d)) != NULL)
      n += e->d_name[0] != '.';
    closedir(d);
  } else if ((d = opendir("/dev")) != NULL) {
    while ((e = readdir(d)) != NULL)
      n += strncmp(e->d_name, "nvidia", 6) == 0 &&
           isdigit((unsigned char)e->d_name[6]);
    closedir(d);
  }
  if (cvd == NULL || n == 0)
    return n;
  /* CUDA stops at the first -1: "" and "-1" hide every GPU. */
  for (n = 0; *cvd && strncmp(cvd, "-1", 2) != 0; n++) {
    cvd += strcspn(cvd, ",");
    if (*cvd == ',')
      cvd++;
  }
  return n;
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
  int rc = lu_read_file(path, 4096, tok, len);
  if (rc != 0) {
    lu_errf(err, errlen, "--token-file %s: %s", path, rdzv_strerror(rc));
    return rc;
  }
  if ((*len = lu_rtrim(*tok, *len)) == 0) {
    lu_errf(err, errlen, "--token-file %s is empty: put a secret in it, e.g. "
            "head -c 32 /dev/urandom | base64 > %s", path, path);
    free(*tok);
    *tok = NULL;
    return RDZV_EINVAL;
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
