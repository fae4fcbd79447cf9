/* hostlist.c - Slurm host list expansion ("gpu[01-04,07]"). */
#include <stdlib.h>
#include <string.h>

#include "lu.h"

typedef struct hl_s {
  char **v;
  size_t n, cap, max;
} hl_t;

static int push(hl_t *h, const char *s, size_t len) {
  char *d;
  if (h->n >= h->max)
    return RDZV_ETOOBIG;
  if (h->n == h->cap) {
    size_t nc = h->cap ? h->cap * 2 : 16;
    char **nv = realloc(h->v, nc * sizeof(*nv));
    if (nv == NULL)
      return RDZV_ENOMEM;
    h->v = nv;
    h->cap = nc;
  }
  if ((d = malloc(len + 1)) == NULL)
    return RDZV_ENOMEM;
  memcpy(d, s, len);
  d[len] = '\0';
  h->v[h->n++] = d;
  return 0;
}

/* Expand one item (no top-level commas): prefix + [ranges] + rest, where
 * rest may hold more bracket groups. */
static int expand(hl_t *h, const char *pre, size_t plen, const char *s,
                  size_t len, int depth) {
  const char *lb, *rb;
  char buf[512];
  if (depth > 8)
    return RDZV_EINVAL;
  lb = memchr(s, '[', len);
  if (lb == NULL) {
    if (plen + len == 0 || plen + len >= sizeof(buf) || memchr(s, ']', len))
      return RDZV_EINVAL;
    memcpy(buf, pre, plen);
    memcpy(buf + plen, s, len);
    return push(h, buf, plen + len);
  }
  rb = memchr(lb, ']', len - (size_t)(lb - s));
  if (rb == NULL || rb == lb + 1)
    return RDZV_EINVAL;
  {
    size_t head = (size_t)(lb - s);
    const char *r = lb + 1;
    if (plen + head >= sizeof(buf) - 32)
      return RDZV_EINVAL;
    memcpy(buf, pre, plen);
    memcpy(buf + plen, s, head);
    while (r < rb) {
      const char *comma = memchr(r, ',', (size_t)(rb - r));
      const char *end = comma ? comma : rb;
      const char *dash = memchr(r, '-', (size_t)(end - r));
      char a[24], b[24];
      int64_t lo, hi;
      size_t alen = (size_t)((dash ? dash : end) - r);
      size_t blen = dash ? (size_t)(end - dash - 1) : 0;
      int width = (int)alen;
      if (alen == 0 || alen >= sizeof(a) || (dash && (blen == 0 || blen >= sizeof(b))))
        return RDZV_EINVAL;
      memcpy(a, r, alen);
      a[alen] = '\0';
      if (lu_parse_i64(a, alen, &lo) != 0 || lo < 0 || a[0] == '-' || a[0] == '+')
        return RDZV_EINVAL;
      hi = lo;
      if (dash) {
        memcpy(b, dash + 1, blen);
        b[blen] = '\0';
        if (lu_parse_i64(b, blen, &hi) != 0 || hi < lo || b[0] == '-' || b[0] == '+')
          return RDZV_EINVAL;
      }
      if ((uint64_t)(hi - lo) >= h->max)
        return RDZV_ETOOBIG;
      /* Stop at hi before incrementing: v++ past INT64_MAX is undefined. */
      for (int64_t v = lo;; v++) {
        int rc, k = snprintf(buf + plen + head, 24, "%0*lld", width,
                             (long long)v);
        if (k < 0)
          return RDZV_EINVAL;
        rc = expand(h, buf, plen + head + (size_t)k, rb + 1,
                    len - (size_t)(rb + 1 - s), depth + 1);
        if (rc != 0)
          return rc;
        if (v == hi)
          break;
      }
      r = comma ? comma + 1 : rb;
    }
  }
  return 0;
}

int lu_hostlist_expand(const char *list, size_t max, char ***hosts,
                       size_t *n) {
  hl_t h = {NULL, 0, 0, max};
  const char *p = list;
  int rc = 0;
  if (list == NULL || *list == '\0')
    return RDZV_EINVAL;
  while (*p && rc == 0) {
    /* A comma inside brackets belongs to the range. */
    size_t len = 0;
    int in = 0;
    while (p[len] && (in || p[len] != ',')) {
      if (p[len] == '[')
        in++;
      else if (p[len] == ']')
        in--;
      if (in < 0 || in > 1) {
        rc = RDZV_EINVAL;
        break;
      }
      len++;
    }
    if (rc == 0 && (in != 0 || len == 0))
      rc = RDZV_EINVAL;
    if (rc == 0)
      rc = expand(&h, "", 0, p, len, 0);
    p += len;
    if (*p == ',')
      p++;
  }
  if (rc != 0) {
    lu_hostlist_free(h.v, h.n);
    return rc;
  }
  *hosts = h.v;
  *n = h.n;
  return 0;
}

void lu_hostlist_free(char **hosts, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(hosts[i]);
  free(hosts);
}
