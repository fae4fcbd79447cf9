/* gpt_data.c - token streams from files (gpt_data.h): mapped read-only,
 * each rank touching only the windows of its own samples. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_data.h"
#include "lu.h"

#define HEADER_BYTES 1024

struct gpt_data_s {
  char name[4096];
  gpt_data_info_t info;
  const uint8_t *base; /* the whole file (mapped) or the default corpus */
  size_t len;
  int mapped;
  uint32_t max_token;
  uint64_t hash; /* of the token bytes (content_hash) */
  int T;
  size_t train_tokens;
  uint64_t train_windows, val_windows;
};

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

int gpt_data_parse(const void *buf, size_t len, gpt_data_info_t *info,
                   char *err, size_t errcap) {
  const uint8_t *p = buf;
  uint32_t version, count;
  memset(info, 0, sizeof(*info));
  if (len == 0) {
    lu_errf(err, errcap, "is empty");
    return -EINVAL;
  }
  if (len < 4 || rd32(p) != GPT_DATA_MAGIC) {
    info->kind = GPT_DATA_TEXT;
    info->width = 1;
    info->count = len;
    return 0;
  }
  if (len < HEADER_BYTES) {
    lu_errf(err, errcap, "starts like an llm.c token file (magic 20240520) "
           "but is shorter than its 1024-byte header (%zu bytes)", len);
    return -EINVAL;
  }
  version = rd32(p + 4);
  count = rd32(p + 8);
  if (version != 1 && version != 2) {
    lu_errf(err, errcap, "is an llm.c token file of version %u: only "
           "versions 1 (uint16 ids) and 2 (uint32 ids) are read",
           (unsigned)version);
    return -EINVAL;
  }
  info->kind = GPT_DATA_TOKENS;
  info->width = version == 1 ? 2 : 4;
  info->offset = HEADER_BYTES;
  info->count = count;
  if ((len - HEADER_BYTES) / (size_t)info->width != count ||
      (len - HEADER_BYTES) % (size_t)info->width != 0) {
    lu_errf(err, errcap, "is an llm.c token file whose header says %u "
           "tokens but whose size holds %zu: truncated or corrupt",
           (unsigned)count, (len - HEADER_BYTES) / (size_t)info->width);
    return -EINVAL;
  }
  if (count == 0) {
    lu_errf(err, errcap, "is an llm.c token file with no tokens");
    return -EINVAL;
  }
  return 0;
}

static uint32_t token_at(const gpt_data_t *d, size_t i) {
  const uint8_t *p = d->base + d->info.offset + i * (size_t)d->info.width;
  if (d->info.width == 1)
    return p[0];
  if (d->info.width == 2)
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
  return rd32(p);
}

static uint64_t rotl64(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* A 64-bit hash of n bytes, to tell two copies of a data set apart (not
 * against an adversary). Four independent lanes of 8-byte words: 0.33 s a
 * GiB on the 2-core VM, where byte-wise FNV-1a takes 3.2 s; the tail and
 * the length go through FNV-1a. */
static uint64_t content_hash(const uint8_t *p, size_t n) {
  const uint64_t P = 0x9e3779b97f4a7c15ull;
  uint64_t h[4] = {1, 2, 3, 4}, w, out;
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      memcpy(&w, p + i + 8 * k, 8);
      h[k] = rotl64((h[k] ^ w) * P, 31);
    }
  out = lu_fnv1a64(p + i, n - i) ^ (uint64_t)n;
  for (int k = 0; k < 4; k++)
    out = rotl64((out ^ h[k]) * P, 29);
  return out;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of GPT_DATA_DEFAULT_DIR, in name order, concatenated. */
static int default_corpus(gpt_data_t *d, char *err, size_t errcap) {
  DIR *dir = opendir(GPT_DATA_DEFAULT_DIR);
  struct dirent *e;
  char **names = NULL;
  size_t n = 0, cap = 0, total = 0;
  uint8_t *buf = NULL;
  int rc = 0;
  if (dir == NULL) {
    lu_errf(err, errcap, "no --data given and %s (Debian's base-files) is "
           "missing: pass --data FILE (any text file)", GPT_DATA_DEFAULT_DIR);
    return -ENOENT;
  }
  while ((e = readdir(dir)) != NULL) {
    char path[4096];
    struct stat st;
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/%s", GPT_DATA_DEFAULT_DIR, e->d_name);
    /* lstat: the symbolic links name files already in the list */
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (n == cap) {
      char **nn = realloc(names, (cap = cap ? 2 * cap : 32) * sizeof(char *));
      if (nn == NULL) {
        rc = -ENOMEM;
        goto done;
      }
      names = nn;
    }
    if ((names[n] = strdup(e->d_name)) == NULL) {
      rc = -ENOMEM;
      goto done;
    }
    n++;
    total += (size_t)st.st_size;
  }
  if (n == 0 || total == 0) {
    lu_errf(err, errcap, "no --data given and %s holds no text: pass --data "
           "FILE (any text file)", GPT_DATA_DEFAULT_DIR);
    rc = -ENOENT;
    goto done;
  }
  qsort(names, n, sizeof(char *), cmp_names);
  if ((buf = malloc(total)) == NULL) {
    rc = -ENOMEM;
    goto done;
  }
  d->len = 0;
  for (size_t i = 0; i < n; i++) {
    char path[4096];
    FILE *f;
    size_t k;
    snprintf(path, sizeof(path), "%s/%s", GPT_DATA_DEFAULT_DIR, names[i]);
    if ((f = fopen(path, "rb")) == NULL) {
      rc = errno ? -errno : -EIO;
      lu_errf(err, errcap, "cannot read %s of the default corpus: %s: pass "
              "--data FILE", path, strerror(errno));
      goto done;
    }
    k = fread(buf + d->len, 1, total - d->len, f);
    fclose(f);
    d->len += k;
  }
  d->base = buf;
  buf = NULL;
  snprintf(d->name, sizeof(d->name), "%s/* (%zu files)", GPT_DATA_DEFAULT_DIR, n);
done:
  closedir(dir);
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  free(buf);
  return rc;
}

static int map_file(gpt_data_t *d, const char *path, char *err, size_t errcap) {
  struct stat st;
  void *p;
  int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
  if (fd < 0) {
    rc = -errno;
    lu_errf(err, errcap, "cannot open the data file %s: %s", path,
           strerror(-rc));
    return rc;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    lu_errf(err, errcap, "the data file %s is not a regular file", path);
    return -EINVAL;
  }
  snprintf(d->name, sizeof(d->name), "%s", path);
  d->len = (size_t)st.st_size;
  if (d->len == 0) {
    close(fd);
    lu_errf(err, errcap, "the data file %s is empty", path);
    return -EINVAL;
  }
  p = mmap(NULL, d->len, PROT_READ, MAP_PRIVATE, fd, 0);
  rc = -errno;
  close(fd);
  if (p == MAP_FAILED) {
    lu_errf(err, errcap, "cannot map the data file %s: %s", path,
           strerror(-rc));
    return rc;
  }
  d->base = p;
  d->mapped = 1;
  return 0;
}

int gpt_data_open(const char *path, gpt_data_t **out, char *err,
                  size_t errcap) {
  gpt_data_t *d = calloc(1, sizeof(*d));
  char why[512];
  int rc;
  *out = NULL;
  if (d == NULL)
    return -ENOMEM;
  rc = path ? map_file(d, path, err, errcap) : default_corpus(d, err, errcap);
  if (rc != 0) {
    gpt_data_close(d);
    return rc;
  }
  if ((rc = gpt_data_parse(d->base, d->len, &d->info, why, sizeof(why))) != 0) {
    lu_errf(err, errcap, "the data file %s %s", d->name, why);
    gpt_data_close(d);
    return rc;
  }
  for (size_t i = 0; i < d->info.count; i++) {
    uint32_t t = token_at(d, i);
    if (t > d->max_token)
      d->max_token = t;
  }
  d->hash = content_hash(d->base + d->info.offset,
                         d->info.count * (size_t)d->info.width);
  *out = d;
  return 0;
}

void gpt_data_close(gpt_data_t *d) {
  if (d == NULL)
    return;
  if (d->mapped)
    munmap((void *)d->base, d->len);
  else
    free((void *)d->base);
  free(d);
}

const gpt_data_info_t *gpt_data_info(const gpt_data_t *d) { return &d->info; }
const char *gpt_data_name(const gpt_data_t *d) { return d->name; }
uint32_t gpt_data_max_token(const gpt_data_t *d) { return d->max_token; }
uint64_t gpt_data_hash(const gpt_data_t *d) { return d->hash; }

int gpt_data_split(gpt_data_t *d, int T, double val_fraction,
                   uint64_t *train_windows, uint64_t *val_windows, char *err,
                   size_t errcap) {
  size_t n = d->info.count, val;
  if (T < 1 || val_fraction < 0 || val_fraction >= 1)
    return -EINVAL;
  val = (size_t)((double)n * val_fraction);
  d->T = T;
  d->train_tokens = n - val;
  if (d->train_tokens < (size_t)T + 1) {
    lu_errf(err, errcap, "the data (%s) has %zu tokens for training, fewer "
           "than --seq-len + 1 = %d: use a shorter --seq-len or more data",
           d->name, d->train_tokens, T + 1);
    return -EINVAL;
  }
  d->train_windows = (d->train_tokens - 1) / (size_t)T;
  d->val_windows = val >= (size_t)T + 1 ? (val - 1) / (size_t)T : 0;
  *train_windows = d->train_windows;
  *val_windows = d->val_windows;
  return 0;
}

static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static void window(const gpt_data_t *d, size_t start, int32_t *tokens,
                   int32_t *targets) {
  for (int t = 0; t < d->T; t++) {
    tokens[t] = (int32_t)token_at(d, start + (size_t)t);
    targets[t] = (int32_t)token_at(d, start + (size_t)t + 1);
  }
}

void gpt_data_train_sample(const gpt_data_t *d, uint64_t n, uint64_t seed,
                           int32_t *tokens, int32_t *targets) {
  uint64_t S = d->train_windows, e = n / S, i = n % S, a, b;
  /* perm_e(i) = (a i + b) mod S with a prime to S: a bijection of the
   * windows, different for every epoch */
  a = S > 1 ? mix64(seed ^ (e * 0x2545f4914f6cdd1dULL)) % S : 0;
  while (S > 1 && (a == 0 || gcd(a, S) != 1))
    a = (a + 1) % S;
  b = S > 1 ? mix64(seed + e + 1) % S : 0;
  i = S > 1 ? (uint64_t)(((unsigned __int128)a * i + b) % S) : 0;
  window(d, (size_t)i * (size_t)d->T, tokens, targets);
}

void gpt_data_val_sample(const gpt_data_t *d, uint64_t n, int32_t *tokens,
                         int32_t *targets) {
  uint64_t w = d->val_windows ? n % d->val_windows : 0;
  window(d, d->train_tokens + (size_t)w * (size_t)d->T, tokens, targets);
}
