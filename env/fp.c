/* fp.c - the node fingerprint: what must be identical on every node of a
 * job, serialised as sorted key=value lines, parsed back
 * from the wire, compared across nodes. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"
#include "lu_buf.h"

#define FP_MAGIC "launch-fingerprint 1"
#define FP_MAX_ITEMS 1024
#define FP_MAX_TEXT (1u << 20)

typedef struct fp_item_s {
  char *key;
  char *value;
} fp_item_t;

struct env_fp_s {
  int n, cap;
  fp_item_t *it; /* sorted by key */
};

/* Environment prefixes that shape communication and so must match. */
static const char *const fp_prefixes[] = {"NCCL_", "TORCH_NCCL_", "NVSHMEM_",
                                          "TORCH_SYMM_MEM_", "UCX_"};
static const char *const fp_exact[] = {"CUDA_DEVICE_MAX_CONNECTIONS",
                                       "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING"};

int env_fp_new(env_fp_t **out) {
  *out = calloc(1, sizeof(env_fp_t));
  return *out ? 0 : RDZV_ENOMEM;
}

void env_fp_free(env_fp_t *fp) {
  if (fp == NULL)
    return;
  for (int i = 0; i < fp->n; i++) {
    free(fp->it[i].key);
    free(fp->it[i].value);
  }
  free(fp->it);
  free(fp);
}

static int fp_find(const env_fp_t *fp, const char *key, int *pos) {
  int lo = 0, hi = fp->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(fp->it[mid].key, key);
    if (c == 0) {
      *pos = mid;
      return 1;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  *pos = lo;
  return 0;
}

int env_fp_set(env_fp_t *fp, const char *key, const char *value) {
  int pos;
  char *k, *v;
  if (fp_find(fp, key, &pos)) {
    if ((v = strdup(value)) == NULL)
      return RDZV_ENOMEM;
    free(fp->it[pos].value);
    fp->it[pos].value = v;
    return 0;
  }
  if (fp->n >= FP_MAX_ITEMS)
    return RDZV_ETOOBIG;
  if (fp->n == fp->cap) {
    int ncap = fp->cap ? fp->cap * 2 : 32;
    fp_item_t *ni = realloc(fp->it, sizeof(*ni) * (size_t)ncap);
    if (ni == NULL)
      return RDZV_ENOMEM;
    fp->it = ni;
    fp->cap = ncap;
  }
  k = strdup(key);
  v = strdup(value);
  if (k == NULL || v == NULL) {
    free(k);
    free(v);
    return RDZV_ENOMEM;
  }
  memmove(&fp->it[pos + 1], &fp->it[pos], sizeof(*fp->it) * (size_t)(fp->n - pos));
  fp->it[pos].key = k;
  fp->it[pos].value = v;
  fp->n++;
  return 0;
}

int env_fp_count(const env_fp_t *fp) { return fp->n; }

const char *env_fp_key(const env_fp_t *fp, int i) {
  return i >= 0 && i < fp->n ? fp->it[i].key : NULL;
}

const char *env_fp_value(const env_fp_t *fp, int i) {
  return i >= 0 && i < fp->n ? fp->it[i].value : NULL;
}

const char *env_fp_get(const env_fp_t *fp, const char *key) {
  int pos;
  return fp_find(fp, key, &pos) ? fp->it[pos].value : NULL;
}

/* Files up to this size are hashed by util/sha256.c: OpenSSL's set-up
 * (providers, configuration) costs the agent about 2 MB and 2.5 ms, more
 * than hashing a script or a small program; its SHA instructions win on
 * larger files. */
#define FP_SMALL_FILE (4u << 20)

int env_sha256_file(const char *path, char hex[65]) {
  unsigned char buf[65536], md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  EVP_MD_CTX *ctx = NULL;
  lu_sha256_t small;
  struct stat sb;
  /* Regular files only (a FIFO would block, /dev/zero never ends), read to
   * the size fstat gave plus one byte (issue #24). */
  int fd = lu_open_regular(path, 0, &sb, NULL, 0), rc = 0;
  uint64_t left;
  if (fd < 0)
    return fd;
  left = (uint64_t)sb.st_size + 1;
  if (sb.st_size <= (off_t)FP_SMALL_FILE) {
    lu_sha256_init(&small);
  } else if ((ctx = EVP_MD_CTX_new()) == NULL) {
    close(fd);
    return RDZV_ENOMEM;
  } else if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    rc = RDZV_ENOMEM;
  }
  while (rc == 0 && left > 0) {
    ssize_t r = read(fd, buf, (size_t)LU_MIN((uint64_t)sizeof(buf), left));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      rc = -errno;
      break;
    }
    if (r == 0)
      break;
    left -= (uint64_t)r;
    if (ctx == NULL)
      lu_sha256_update(&small, buf, (size_t)r);
    else if (EVP_DigestUpdate(ctx, buf, (size_t)r) != 1)
      rc = RDZV_ENOMEM;
  }
  if (rc == 0 && ctx == NULL) {
    lu_sha256_final(&small, md);
    mdlen = LU_SHA256_LEN;
  } else if (rc == 0 && EVP_DigestFinal_ex(ctx, md, &mdlen) != 1) {
    rc = RDZV_ENOMEM;
  }
  EVP_MD_CTX_free(ctx);
  close(fd);
  if (rc == 0)
    lu_hex(md, mdlen, hex);
  return rc;
}

static int wanted(const char *key) {
  for (size_t i = 0; i < LU_ARRAY_SIZE(fp_prefixes); i++)
    if (strncmp(key, fp_prefixes[i], strlen(fp_prefixes[i])) == 0)
      return 1;
  for (size_t i = 0; i < LU_ARRAY_SIZE(fp_exact); i++)
    if (strcmp(key, fp_exact[i]) == 0)
      return 1;
  return 0;
}

static void version_item(env_fp_t *fp, const char *key, int v, int nccl,
                         int *rc) {
  char s[32];
  if (*rc != 0)
    return;
  if (v <= 0)
    snprintf(s, sizeof(s), "none");
  else if (nccl)
    snprintf(s, sizeof(s), "%d.%d.%d", v >= 10000 ? v / 10000 : v / 1000,
             v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100, v % 100);
  else
    snprintf(s, sizeof(s), "%d.%d", v / 1000, (v % 1000) / 10);
  *rc = env_fp_set(fp, key, s);
}

int env_fp_collect(const env_fp_input_t *in, env_fp_t **out, char *err,
                   size_t errlen) {
  env_fp_input_t o = ENV_FP_INPUT_INIT;
  env_fp_t *fp;
  int rc;
  char key[320], num[32];
  if (in)
    memcpy(&o, in, LU_MIN(sizeof(o), in->size ? in->size : sizeof(o)));
  *out = NULL;
  if ((rc = env_fp_new(&fp)) != 0)
    return rc;
  /* The effective environment; a templated value counts as its template,
   * so that each rank's own HCA name is not a difference. */
  for (int i = 0; o.env && rc == 0 && i < env_count(o.env); i++) {
    const env_var_t *v = env_at(o.env, i);
    if (!wanted(v->key))
      continue;
    snprintf(key, sizeof(key), "env.%s", v->key);
    rc = env_fp_set(fp, key, v->tmpl ? v->tmpl : v->value);
  }
  if (rc == 0)
    rc = env_fp_set(fp, "profile", o.profile ? o.profile : "none");
  if (rc == 0)
    rc = env_fp_set(fp, "driver", o.driver && *o.driver ? o.driver : "none");
  version_item(fp, "cuda.driver", o.cuda_driver, 0, &rc);
  version_item(fp, "cuda.runtime", o.cuda_runtime, 0, &rc);
  version_item(fp, "nccl", o.nccl, 1, &rc);
  if (rc == 0)
    rc = env_fp_set(fp, "gpu.model", o.gpu_model && *o.gpu_model ? o.gpu_model : "none");
  snprintf(num, sizeof(num), "%d", o.gpu_count < 0 ? 0 : o.gpu_count);
  if (rc == 0)
    rc = env_fp_set(fp, "gpu.count", num);
  for (int i = 0; o.files && rc == 0 && o.files[i]; i++) {
    char hex[65];
    const char *base = strrchr(o.files[i], '/');
    rc = env_sha256_file(o.files[i], hex);
    if (rc != 0) {
      if (err && errlen)
        snprintf(err, errlen, "cannot hash %s for the node fingerprint: %s",
                 o.files[i], rdzv_strerror(rc));
      break;
    }
    snprintf(key, sizeof(key), "sha256.%s", base ? base + 1 : o.files[i]);
    rc = env_fp_set(fp, key, hex);
  }
  for (int i = 0; o.extra && rc == 0 && o.extra[i]; i++) {
    const char *eq = strchr(o.extra[i], '=');
    if (eq == NULL || eq == o.extra[i] || (size_t)(eq - o.extra[i]) >= sizeof(key))
      continue;
    snprintf(key, sizeof(key), "%.*s", (int)(eq - o.extra[i]), o.extra[i]);
    rc = env_fp_set(fp, key, eq + 1);
  }
  if (rc != 0) {
    env_fp_free(fp);
    return rc;
  }
  *out = fp;
  return 0;
}

int env_fp_serialize(const env_fp_t *fp, char **out, size_t *len) {
  lu_buf_t b = LU_BUF_INIT;
  lu_buf_puts(&b, FP_MAGIC "\n");
  for (int i = 0; i < fp->n; i++) {
    lu_buf_put_escaped(&b, fp->it[i].key, 0);
    lu_buf_put(&b, "=", 1);
    lu_buf_put_escaped(&b, fp->it[i].value, 0);
    lu_buf_put(&b, "\n", 1);
  }
  return lu_buf_finish(&b, out, len);
}

/* Undo lu_buf_put_escaped on [s, e) into a new string. */
static char *unescape(const char *s, const char *e, int *bad) {
  char *o = malloc((size_t)(e - s) + 1), *w = o;
  if (o == NULL)
    return NULL;
  while (s < e) {
    if (*s == '\\') {
      if (s + 1 >= e || (s[1] != '\\' && s[1] != 'n' && s[1] != 'r')) {
        *bad = 1;
        break;
      }
      *w++ = s[1] == 'n' ? '\n' : s[1] == 'r' ? '\r' : '\\';
      s += 2;
    } else if (*s == '\0') {
      *bad = 1;
      break;
    } else {
      *w++ = *s++;
    }
  }
  *w = '\0';
  return o;
}

int env_fp_parse(const char *text, size_t len, env_fp_t **out) {
  env_fp_t *fp;
  const char *p = text, *end = text + len;
  size_t ml = strlen(FP_MAGIC);
  int rc = 0;
  *out = NULL;
  if (len > FP_MAX_TEXT)
    return RDZV_ETOOBIG;
  if (len < ml + 1 || memcmp(text, FP_MAGIC, ml) != 0 || text[ml] != '\n')
    return RDZV_EPROTO;
  if ((rc = env_fp_new(&fp)) != 0)
    return rc;
  p += ml + 1;
  while (p < end && rc == 0) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eq;
    char *k, *v;
    int bad = 0, pos;
    if (nl == NULL) {
      rc = RDZV_EPROTO; /* every line ends with a newline */
      break;
    }
    eq = memchr(p, '=', (size_t)(nl - p));
    if (eq == NULL || eq == p) {
      rc = RDZV_EPROTO;
      break;
    }
    k = unescape(p, eq, &bad);
    v = unescape(eq + 1, nl, &bad);
    if (k == NULL || v == NULL)
      rc = RDZV_ENOMEM;
    else if (bad || fp_find(fp, k, &pos))
      rc = RDZV_EPROTO; /* a key twice is not ours */
    else
      rc = env_fp_set(fp, k, v);
    free(k);
    free(v);
    p = nl + 1;
  }
  if (rc != 0) {
    env_fp_free(fp);
    return rc;
  }
  *out = fp;
  return 0;
}

/* "env.NCCL_IB_HCA" reads better as "NCCL_IB_HCA". */
static const char *display(const char *key) {
  return strncmp(key, "env.", 4) == 0 ? key + 4 : key;
}

int env_fp_diff(const env_fp_t *const *fps, const char *const *names, int n,
                char **report) {
  lu_buf_t b = LU_BUF_INIT;
  int ndiff = 0, rc;
  int *idx = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
  const char **vals = calloc((size_t)(n > 0 ? n : 1), sizeof(*vals));
  if (idx == NULL || vals == NULL) {
    free(idx);
    free(vals);
    return RDZV_ENOMEM;
  }
  /* Merge the sorted key lists. */
  for (;;) {
    const char *key = NULL;
    int nn = n, differ = 0;
    for (int i = 0; i < nn; i++)
      if (idx[i] < fps[i]->n &&
          (key == NULL || strcmp(fps[i]->it[idx[i]].key, key) < 0))
        key = fps[i]->it[idx[i]].key;
    if (key == NULL)
      break;
    for (int i = 0; i < nn; i++) {
      if (idx[i] < fps[i]->n && strcmp(fps[i]->it[idx[i]].key, key) == 0)
        vals[i] = fps[i]->it[idx[i]].value;
      else
        vals[i] = NULL;
      if (i > 0 && ((vals[i] == NULL) != (vals[0] == NULL) ||
                    (vals[i] && vals[0] && strcmp(vals[i], vals[0]) != 0)))
        differ = 1;
    }
    if (differ) {
      /* One entry per distinct value: the first node with it, and how
       * many more share it. */
      ndiff++;
      lu_buf_printf(&b, "%s:", display(key));
      for (int i = 0; i < nn; i++) {
        int seen = 0, more = 0;
        for (int j = 0; j < i; j++)
          if ((vals[j] == NULL && vals[i] == NULL) ||
              (vals[j] && vals[i] && strcmp(vals[j], vals[i]) == 0))
            seen = 1;
        if (seen)
          continue;
        for (int j = i + 1; j < nn; j++)
          if ((vals[j] == NULL && vals[i] == NULL) ||
              (vals[j] && vals[i] && strcmp(vals[j], vals[i]) == 0))
            more++;
        lu_buf_printf(&b, " %s=%s", names && names[i] ? names[i] : "?",
                      vals[i] ? vals[i] : "(unset)");
        if (more)
          lu_buf_printf(&b, " (+%d node%s)", more, more == 1 ? "" : "s");
      }
      lu_buf_puts(&b, "\n");
    }
    for (int i = 0; i < nn; i++)
      if (idx[i] < fps[i]->n && strcmp(fps[i]->it[idx[i]].key, key) == 0)
        idx[i]++;
  }
  free(idx);
  free(vals);
  rc = lu_buf_finish(&b, report, NULL);
  return rc != 0 ? rc : ndiff;
}
