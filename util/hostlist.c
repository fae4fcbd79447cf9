/* hostlist.c - Slurm host lists ("gpu[01-04,07]") and task counts per node
 * ("2(x3),1"), the two compressed forms Slurm writes its node facts in. */
#include <stdlib.h>
#include <string.h>

#include "lu.h"

/* A host name longer than this is no host name (HOST_NAME_MAX is 64, DNS
 * names 253). */
#define HL_NAME_MAX 255

typedef struct hl_s {
  char **v;
  size_t n, cap, max;
  const char *list; /* for the offsets in messages */
  char *err;
  size_t errlen;
} hl_t;

/* RDZV_EINVAL with err saying why, at character p of the list. */
static int bad(hl_t *h, const char *p, const char *why) {
  lu_errf(h->err, h->errlen, "%s at character %zu", why,
          (size_t)(p - h->list) + 1);
  return RDZV_EINVAL;
}

static int push(hl_t *h, const char *s, size_t len) {
  char *d;
  if (h->n >= h->max) {
    lu_errf(h->err, h->errlen, "more than %zu hosts", h->max);
    return RDZV_ETOOBIG;
  }
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

/* One bound of a range, s[0..len): digits only. */
static int bound(hl_t *h, const char *s, size_t len, int64_t *v) {
  for (size_t i = 0; i < len; i++)
    if (s[i] < '0' || s[i] > '9')
      return bad(h, s + i, "a range holds numbers and '-' only: unexpected "
                           "character");
  if (len == 0)
    return bad(h, s, "a number is missing");
  if (len > 18 || lu_parse_i64(s, len, v) != 0)
    return bad(h, s, "the number is too large");
  return 0;
}

/* Expand one item (no top-level commas): prefix + [ranges] + rest, where
 * rest may hold more bracket groups (a cartesian product). */
static int expand(hl_t *h, const char *pre, size_t plen, const char *s,
                  size_t len) {
  const char *lb, *rb;
  char buf[HL_NAME_MAX + 1];
  lb = memchr(s, '[', len);
  if (lb == NULL) {
    if (plen + len > HL_NAME_MAX)
      return bad(h, s, "a host name longer than 255 characters");
    memcpy(buf, pre, plen);
    memcpy(buf + plen, s, len);
    return push(h, buf, plen + len);
  }
  rb = memchr(lb, ']', len - (size_t)(lb - s));
  if (rb == NULL)
    return bad(h, lb, "'[' is never closed");
  if (rb == lb + 1)
    return bad(h, lb, "empty brackets");
  {
    size_t head = (size_t)(lb - s);
    const char *r = lb + 1;
    if (plen + head > HL_NAME_MAX - 20)
      return bad(h, s, "a host name longer than 255 characters");
    memcpy(buf, pre, plen);
    memcpy(buf + plen, s, head);
    while (r < rb) {
      const char *comma = memchr(r, ',', (size_t)(rb - r));
      const char *end = comma ? comma : rb;
      const char *dash = memchr(r, '-', (size_t)(end - r));
      const char *hs = dash ? dash + 1 : r;
      int64_t lo, hi;
      size_t alen = (size_t)((dash ? dash : end) - r);
      int rc, width = (int)alen;
      if ((rc = bound(h, r, alen, &lo)) != 0 ||
          (dash && (rc = bound(h, hs, (size_t)(end - hs), &hi)) != 0))
        return rc;
      if (!dash)
        hi = lo;
      if (hi < lo)
        return bad(h, r, "the range goes down");
      if ((uint64_t)(hi - lo) >= h->max) {
        lu_errf(h->err, h->errlen, "more than %zu hosts", h->max);
        return RDZV_ETOOBIG;
      }
      /* Stop at hi before incrementing: v++ past INT64_MAX is undefined. */
      for (int64_t v = lo;; v++) {
        int k = snprintf(buf + plen + head, 21, "%0*lld", width, (long long)v);
        if (k < 0)
          return RDZV_EINVAL;
        rc = expand(h, buf, plen + head + (size_t)k, rb + 1,
                    len - (size_t)(rb + 1 - s));
        if (rc != 0)
          return rc;
        if (v == hi)
          break;
      }
      r = comma ? comma + 1 : rb;
      if (comma && comma + 1 == rb)
        return bad(h, rb, "a range is missing before ']'");
    }
  }
  return 0;
}

int lu_hostlist_expand_err(const char *list, size_t max, char ***hosts,
                           size_t *n, char *err, size_t errlen) {
  hl_t h = {NULL, 0, 0, max, list, err, errlen};
  const char *p = list;
  int rc = 0;
  if (list == NULL || *list == '\0') {
    lu_errf(err, errlen, "the host list is empty");
    return RDZV_EINVAL;
  }
  while (*p && rc == 0) {
    /* A comma inside brackets belongs to the range. */
    size_t len = 0, open_at = 0;
    int in = 0;
    while (rc == 0 && p[len] && (in || p[len] != ',')) {
      if (p[len] == '[')
        open_at = len;
      if (p[len] == '[' && in)
        rc = bad(&h, p + len, "brackets do not nest: '['");
      else if (p[len] == ']' && !in)
        rc = bad(&h, p + len, "']' without '['");
      else if (p[len] == ' ' || p[len] == '\t' || p[len] == '\n')
        rc = bad(&h, p + len, "a blank in a host list");
      in += p[len] == '[' ? 1 : p[len] == ']' ? -1 : 0;
      len++;
    }
    if (rc == 0 && in)
      rc = bad(&h, p + open_at, "'[' is never closed");
    if (rc == 0 && len == 0)
      rc = bad(&h, p, "an empty host name");
    if (rc == 0)
      rc = expand(&h, "", 0, p, len);
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

int lu_hostlist_expand(const char *list, size_t max, char ***hosts,
                       size_t *n) {
  return lu_hostlist_expand_err(list, max, hosts, n, NULL, 0);
}

void lu_hostlist_free(char **hosts, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(hosts[i]);
  free(hosts);
}

int lu_tasks_per_node(const char *spec, int node, int *ntasks, int *nnodes,
                      char *err, size_t errlen) {
  const char *p = spec;
  int64_t total = 0;
  *ntasks = -1;
  if (spec == NULL || *spec == '\0') {
    lu_errf(err, errlen, "the list of tasks per node is empty");
    return RDZV_EINVAL;
  }
  while (*p) {
    size_t k = strspn(p, "0123456789");
    int64_t count, reps = 1;
    if (k == 0 || k > 9 || lu_parse_i64(p, k, &count) != 0 || count < 1) {
      lu_errf(err, errlen, "'%s': expected a task count (like 2 or 2(x3)) "
              "at character %zu", spec, (size_t)(p - spec) + 1);
      return RDZV_EINVAL;
    }
    p += k;
    if (p[0] == '(') {
      size_t r = p[1] == 'x' ? strspn(p + 2, "0123456789") : 0;
      if (r == 0 || r > 9 || p[2 + r] != ')' ||
          lu_parse_i64(p + 2, r, &reps) != 0 || reps < 1) {
        lu_errf(err, errlen, "'%s': a repeat is written (xN) with N >= 1, "
                "at character %zu", spec, (size_t)(p - spec) + 1);
        return RDZV_EINVAL;
      }
      p += 3 + r;
    }
    if (*p != '\0' && (*p != ',' || p[1] == '\0')) {
      lu_errf(err, errlen, "'%s': expected ',' between task counts at "
              "character %zu", spec, (size_t)(p - spec) + 1);
      return RDZV_EINVAL;
    }
    if (node >= 0 && *ntasks < 0 && node < total + reps)
      *ntasks = (int)count;
    total += reps;
    if (total > (1 << 24)) {
      lu_errf(err, errlen, "'%s': more than %d nodes", spec, 1 << 24);
      return RDZV_EINVAL;
    }
    p += *p == ',';
  }
  if (nnodes)
    *nnodes = (int)total;
  if (node >= 0 && *ntasks < 0) {
    lu_errf(err, errlen, "'%s' counts %lld nodes: there is no node %d", spec,
            (long long)total, node);
    return RDZV_EINVAL;
  }
  return 0;
}
