/* tune_cache.c - the persistent cuBLASLt tuning cache (tune_cache.h).
 *
 *   # a comment
 *   launch-cublaslt-tune 1
 *   DEV LTVER m n k ta tb lda ldb ldd ab cd epi aux_ld ws A0 .. A7
 *
 * One entry a line, fields separated by spaces: DEV as tc_device_key
 * writes it, LTVER and the 13 key numbers in decimal, the algorithm as 8
 * words of 16 hex digits. Anything else makes the whole file corrupt. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tune_cache.h"

#define TC_MAGIC "launch-cublaslt-tune 1"
#define TC_FIELDS (2 + TC_KEY_N + TC_ALGO_N)

static int dev_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ||
         c == ':';
}

static int dev_ok(const char *s, size_t n) {
  if (n == 0 || n >= TC_DEV_MAX)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!dev_char(s[i]))
      return 0;
  return 1;
}

/* Decimal, at most max. RET 0 or -1. */
static int parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  if (n == 0 || n > 20 || (n > 1 && s[0] == '0'))
    return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (d > 9 || v > (max - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static int parse_hex16(const char *s, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (n != 16)
    return -1;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = (unsigned)(c - 'a' + 10);
    else
      return -1;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

/* One entry line (no newline). RET 0 or -1. */
static int parse_entry(const char *s, size_t n, tc_entry_t *e) {
  const char *tok[TC_FIELDS];
  size_t len[TC_FIELDS], nt = 0, i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && s[j] != ' ')
      j++;
    if (j == i || nt == TC_FIELDS)
      return -1; /* two spaces, a leading or trailing one, too many */
    tok[nt] = s + i;
    len[nt++] = j - i;
    i = j < n ? j + 1 : j;
    if (j < n && i == n)
      return -1; /* trailing space */
  }
  if (nt != TC_FIELDS || !dev_ok(tok[0], len[0]))
    return -1;
  memset(e, 0, sizeof(*e));
  memcpy(e->dev, tok[0], len[0]);
  if (parse_dec(tok[1], len[1], UINT64_MAX, &e->ltver) != 0)
    return -1;
  for (int k = 0; k < TC_KEY_N; k++) {
    uint64_t v;
    if (parse_dec(tok[2 + k], len[2 + k], INT64_MAX, &v) != 0)
      return -1;
    e->key[k] = (int64_t)v;
  }
  for (int k = 0; k < TC_ALGO_N; k++)
    if (parse_hex16(tok[2 + TC_KEY_N + k], len[2 + TC_KEY_N + k],
                    &e->algo[k]) != 0)
      return -1;
  return 0;
}

static int same_key(const tc_entry_t *a, const char *dev, uint64_t ltver,
                    const int64_t key[TC_KEY_N]) {
  return a->ltver == ltver && strcmp(a->dev, dev) == 0 &&
         memcmp(a->key, key, sizeof(a->key)) == 0;
}

const tc_entry_t *tc_find(const tc_table_t *t, const char *dev, uint64_t ltver,
                          const int64_t key[TC_KEY_N]) {
  for (size_t i = 0; i < t->n; i++)
    if (same_key(&t->e[i], dev, ltver, key))
      return &t->e[i];
  return NULL;
}

int tc_put(tc_table_t *t, const tc_entry_t *e) {
  size_t dl = strnlen(e->dev, TC_DEV_MAX);
  if (!dev_ok(e->dev, dl))
    return -EINVAL;
  for (int k = 0; k < TC_KEY_N; k++)
    if (e->key[k] < 0)
      return -EINVAL;
  for (size_t i = 0; i < t->n; i++)
    if (same_key(&t->e[i], e->dev, e->ltver, e->key)) {
      /* the newest choice, moved last: the oldest go first at the cap */
      memmove(&t->e[i], &t->e[i + 1], (t->n - i - 1) * sizeof(*t->e));
      t->n--;
      break;
    }
  if (t->n == TC_MAX_ENTRIES) {
    memmove(&t->e[0], &t->e[1], (t->n - 1) * sizeof(*t->e));
    t->n--;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    tc_entry_t *g = realloc(t->e, cap * sizeof(*g));
    if (g == NULL)
      return -ENOMEM;
    t->e = g;
    t->cap = cap;
  }
  t->e[t->n++] = *e;
  return 0;
}

void tc_free(tc_table_t *t) {
  free(t->e);
  t->e = NULL;
  t->n = t->cap = 0;
}

int tc_parse(tc_table_t *t, const char *text, size_t len) {
  size_t i = 0, entries = 0;
  int header = 0, rc = 0;
  tc_free(t);
  while (i < len && rc == 0) {
    const char *line = text + i;
    const char *nl = memchr(line, '\n', len - i);
    size_t n = nl ? (size_t)(nl - line) : len - i;
    i += n + (nl ? 1 : 0);
    if (memchr(line, '\0', n))
      rc = -EINVAL;
    else if (n == 0 || line[0] == '#')
      continue;
    else if (!header)
      rc = n == strlen(TC_MAGIC) && memcmp(line, TC_MAGIC, n) == 0 ? (header = 1, 0)
                                                                 : -EINVAL;
    else {
      tc_entry_t e;
      if (++entries > TC_MAX_ENTRIES || parse_entry(line, n, &e) != 0)
        rc = -EINVAL;
      else
        rc = tc_put(t, &e);
    }
  }
  if (rc == 0 && !header && len > 0)
    rc = -EINVAL; /* only comments: not ours */
  if (rc != 0)
    tc_free(t);
  return rc;
}

int tc_format(const tc_table_t *t, char **out, size_t *len) {
  /* a line: dev, 20 + 13 x 20 digits, 8 x 16 hex, 22 spaces, newline */
  size_t cap = 128 + t->n * (TC_DEV_MAX + 21 + TC_KEY_N * 21 + TC_ALGO_N * 17 + 2);
  char *buf = malloc(cap);
  size_t n;
  if (buf == NULL)
    return -ENOMEM;
  n = (size_t)snprintf(buf, cap,
                       "# launch: cuBLASLt algorithms chosen by timing "
                       "(docs/runtime.md); safe to delete\n" TC_MAGIC "\n");
  for (size_t i = 0; i < t->n; i++) {
    const tc_entry_t *e = &t->e[i];
    n += (size_t)snprintf(buf + n, cap - n, "%s %llu", e->dev,
                          (unsigned long long)e->ltver);
    for (int k = 0; k < TC_KEY_N; k++)
      n += (size_t)snprintf(buf + n, cap - n, " %lld", (long long)e->key[k]);
    for (int k = 0; k < TC_ALGO_N; k++)
      n += (size_t)snprintf(buf + n, cap - n, " %016llx",
                            (unsigned long long)e->algo[k]);
    n += (size_t)snprintf(buf + n, cap - n, "\n");
  }
  *out = buf;
  *len = n;
  return 0;
}

int tc_device_key(char *buf, size_t n, const char *name, int cc, int sms) {
  size_t k = 0;
  int w;
  for (const char *p = name; *p && k < 48 && k + 1 < n; p++, k++) {
    char c = *p;
    buf[k] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '.' || c == '-'
                 ? c
                 : '_';
  }
  if (k == 0 || cc < 0 || sms < 0)
    return -EINVAL;
  w = snprintf(buf + k, n - k, ":cc%d:sm%d", cc, sms);
  if (w < 0 || (size_t)w >= n - k || k + (size_t)w >= TC_DEV_MAX)
    return -EINVAL;
  return 0;
}

int tc_path(char *buf, size_t n) {
  const char *v = getenv("GPT_CUDA_TUNE_CACHE"), *base;
  int w;
  if (v && *v) {
    if (strcmp(v, "0") == 0)
      return 0;
    w = snprintf(buf, n, "%s", v);
  } else if ((base = getenv("XDG_CACHE_HOME")) && base[0] == '/') {
    w = snprintf(buf, n, "%s/launch/cublaslt-tune.txt", base);
  } else if ((base = getenv("HOME")) && base[0] == '/') {
    w = snprintf(buf, n, "%s/.cache/launch/cublaslt-tune.txt", base);
  } else {
    return 0;
  }
  return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 1;
}

int tc_load(const char *path, tc_table_t *t) {
  struct stat st;
  char *buf;
  ssize_t got;
  size_t have = 0;
  int fd, rc;
  tc_free(t);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return errno == ENOENT ? 0 : -errno;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > (off_t)TC_MAX_FILE) {
    close(fd);
    return 1;
  }
  if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
    close(fd);
    return -ENOMEM;
  }
  while (have < (size_t)st.st_size &&
         (got = read(fd, buf + have, (size_t)st.st_size - have)) > 0)
    have += (size_t)got;
  close(fd);
  rc = tc_parse(t, buf, have);
  free(buf);
  return rc == -EINVAL ? 1 : rc;
}

/* mkdir -p of path's directory, new levels 0700. */
static int make_parent(const char *path) {
  char dir[4096];
  size_t n = strlen(path);
  if (n >= sizeof(dir))
    return -ENAMETOOLONG;
  memcpy(dir, path, n + 1);
  for (size_t i = 1; i < n; i++) {
    if (dir[i] != '/')
      continue;
    dir[i] = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      return -errno;
    dir[i] = '/';
  }
  return 0;
}

int tc_update(const char *path, const tc_entry_t *e, size_t n) {
  tc_table_t t = {NULL, 0, 0};
  char tmp[4200], *text = NULL;
  size_t len = 0, off = 0;
  int fd, rc = tc_load(path, &t);
  if (rc < 0 && rc != -ENOMEM)
    tc_free(&t); /* unreadable: written anew */
  else if (rc == -ENOMEM)
    return rc;
  for (size_t i = 0; i < n; i++)
    if ((rc = tc_put(&t, &e[i])) == -ENOMEM) {
      tc_free(&t);
      return rc;
    }
  rc = tc_format(&t, &text, &len);
  tc_free(&t);
  if (rc != 0)
    return rc;
  if ((rc = make_parent(path)) != 0 ||
      snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
          (int)sizeof(tmp)) {
    free(text);
    return rc ? rc : -ENAMETOOLONG;
  }
  unlink(tmp); /* a crashed writer's of the same pid */
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
    free(text);
    return -errno;
  }
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    off += (size_t)w;
  }
  free(text);
  rc = off == len ? 0 : -EIO;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc != 0)
    unlink(tmp);
  return rc;
}
