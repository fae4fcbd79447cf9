/* aff_cpuset.c - CPU sets and the cpulist syntax ("0-9,20-29"). */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "aff.h"

#define WORDS (AFF_MAX_CPUS / AFF_LONG_BITS)

void aff_cpuset_zero(aff_cpuset_t *s) { memset(s, 0, sizeof(*s)); }

void aff_cpuset_set(aff_cpuset_t *s, int cpu) {
  if (cpu >= 0 && cpu < AFF_MAX_CPUS)
    s->bits[(size_t)cpu / AFF_LONG_BITS] |= 1ul << ((size_t)cpu % AFF_LONG_BITS);
}

int aff_cpuset_isset(const aff_cpuset_t *s, int cpu) {
  if (cpu < 0 || cpu >= AFF_MAX_CPUS)
    return 0;
  return (s->bits[(size_t)cpu / AFF_LONG_BITS] >>
          ((size_t)cpu % AFF_LONG_BITS)) & 1ul;
}

int aff_cpuset_count(const aff_cpuset_t *s) {
  int n = 0;
  for (size_t i = 0; i < WORDS; i++)
    n += __builtin_popcountl(s->bits[i]);
  return n;
}

int aff_cpuset_next(const aff_cpuset_t *s, int cpu) {
  size_t start = cpu < 0 ? 0 : (size_t)cpu + 1;
  for (size_t w = start / AFF_LONG_BITS; w < WORDS; w++) {
    unsigned long v = s->bits[w];
    if (w == start / AFF_LONG_BITS)
      v &= ~0ul << (start % AFF_LONG_BITS);
    if (v)
      return (int)(w * AFF_LONG_BITS + (size_t)__builtin_ctzl(v));
  }
  return -1;
}

int aff_cpuset_first(const aff_cpuset_t *s) { return aff_cpuset_next(s, -1); }

void aff_cpuset_and(aff_cpuset_t *d, const aff_cpuset_t *a) {
  for (size_t i = 0; i < WORDS; i++)
    d->bits[i] &= a->bits[i];
}

void aff_cpuset_or(aff_cpuset_t *d, const aff_cpuset_t *a) {
  for (size_t i = 0; i < WORDS; i++)
    d->bits[i] |= a->bits[i];
}

int aff_cpuset_equal(const aff_cpuset_t *a, const aff_cpuset_t *b) {
  return memcmp(a->bits, b->bits, sizeof(a->bits)) == 0;
}

int aff_cpuset_intersects(const aff_cpuset_t *a, const aff_cpuset_t *b) {
  for (size_t i = 0; i < WORDS; i++)
    if (a->bits[i] & b->bits[i])
      return 1;
  return 0;
}

/* Parse a CPU number at *p. RET the number, -1 if none, -2 if too big. */
static long parse_num(const char **p) {
  long v = 0;
  int any = 0;
  while (isdigit((unsigned char)**p)) {
    v = v * 10 + (**p - '0');
    if (v >= AFF_MAX_CPUS)
      v = AFF_MAX_CPUS; /* keep consuming, report once */
    (*p)++;
    any = 1;
  }
  if (!any)
    return -1;
  return v >= AFF_MAX_CPUS ? -2 : v;
}

/* Parse the cpulist in [s, end). */
static int parse_range(const char *s, const char *end, aff_cpuset_t *set,
                       char *err, size_t errlen) {
  const char *p = s;
  aff_cpuset_zero(set);
  while (p < end && isspace((unsigned char)*p))
    p++;
  if (p == end)
    return 0; /* the empty list */
  for (;;) {
    long lo, hi;
    const char *item = p;
    while (p < end && isspace((unsigned char)*p))
      p++;
    lo = p < end ? parse_num(&p) : -1;
    if (lo == -2) {
      lu_errf(err, errlen, "CPU number in '%.*s' is too large (the limit is %d)",
             (int)(end - s), s, AFF_MAX_CPUS - 1);
      return RDZV_EINVAL;
    }
    if (lo < 0) {
      lu_errf(err, errlen,
             "'%.*s' is not a CPU list: expected a number at '%.*s' (a CPU "
             "list looks like 0-9,20-29)",
             (int)(end - s), s, (int)(end - item), item);
      return RDZV_EINVAL;
    }
    hi = lo;
    if (p < end && *p == '-') {
      p++;
      hi = p < end ? parse_num(&p) : -1;
      if (hi == -2) {
        lu_errf(err, errlen,
               "CPU number in '%.*s' is too large (the limit is %d)",
               (int)(end - s), s, AFF_MAX_CPUS - 1);
        return RDZV_EINVAL;
      }
      if (hi < 0) {
        lu_errf(err, errlen,
               "'%.*s' is not a CPU list: the range at '%.*s' has no end",
               (int)(end - s), s, (int)(end - item), item);
        return RDZV_EINVAL;
      }
      if (hi < lo) {
        lu_errf(err, errlen,
               "'%.*s': the range %ld-%ld runs backwards; write %ld-%ld",
               (int)(end - s), s, lo, hi, hi, lo);
        return RDZV_EINVAL;
      }
    }
    for (long c = lo; c <= hi; c++)
      aff_cpuset_set(set, (int)c);
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (p == end)
      return 0;
    if (*p != ',') {
      lu_errf(err, errlen,
             "'%.*s' is not a CPU list: unexpected '%c' (use ',' between "
             "items and '-' for ranges, e.g. 0-9,20-29)",
             (int)(end - s), s, isprint((unsigned char)*p) ? *p : '?');
      return RDZV_EINVAL;
    }
    p++;
  }
}

int aff_cpulist_parse(const char *str, aff_cpuset_t *s, char *err,
                      size_t errlen) {
  if (str == NULL) {
    lu_errf(err, errlen, "no CPU list given");
    return RDZV_EINVAL;
  }
  return parse_range(str, str + strlen(str), s, err, errlen);
}

size_t aff_cpulist_format(const aff_cpuset_t *s, char *buf, size_t n) {
  size_t len = 0;
  int c = aff_cpuset_first(s);
  if (n > 0)
    buf[0] = '\0';
  while (c >= 0) {
    int e = c, nx;
    char item[32];
    int k;
    while ((nx = aff_cpuset_next(s, e)) == e + 1)
      e = nx;
    if (e == c)
      k = snprintf(item, sizeof(item), "%s%d", len ? "," : "", c);
    else
      k = snprintf(item, sizeof(item), "%s%d-%d", len ? "," : "", c, e);
    if (k > 0) {
      if (len + (size_t)k < n)
        memcpy(buf + len, item, (size_t)k + 1);
      else if (n > 0 && len < n)
        buf[len] = '\0';
      len += (size_t)k;
    }
    c = nx;
  }
  if (n > 0 && len >= n)
    buf[n - 1] = '\0';
  return len;
}

int aff_cpulists_parse(const char *str, aff_cpuset_t *sets, int max,
                       char *err, size_t errlen) {
  const char *p = str;
  int n = 0;
  if (str == NULL || *str == '\0') {
    lu_errf(err, errlen,
           "empty CPU list: give one list per local rank separated by ':', "
           "e.g. 0-3:4-7");
    return RDZV_EINVAL;
  }
  if (strchr(str, ';') != NULL) {
    lu_errf(err, errlen,
           "'%s': separate the per-rank CPU lists with ':' (not ';'), e.g. "
           "0-3:4-7",
           str);
    return RDZV_EINVAL;
  }
  for (;;) {
    const char *end = strchr(p, ':');
    char sub[256];
    int rc;
    if (end == NULL)
      end = p + strlen(p);
    if (n >= max) {
      lu_errf(err, errlen, "more than %d CPU lists in '%s'", max, str);
      return RDZV_EINVAL;
    }
    if (end == p) {
      lu_errf(err, errlen,
             "CPU list %d of '%s' is empty: every local rank needs CPUs "
             "(use --cpu-bind none to leave ranks unbound)",
             n, str);
      return RDZV_EINVAL;
    }
    rc = parse_range(p, end, &sets[n], sub, sizeof(sub));
    if (rc != 0) {
      lu_errf(err, errlen, "CPU list %d (local rank %d): %s", n, n, sub);
      return rc;
    }
    if (aff_cpuset_count(&sets[n]) == 0) {
      lu_errf(err, errlen,
             "CPU list %d of '%s' is empty: every local rank needs CPUs", n,
             str);
      return RDZV_EINVAL;
    }
    n++;
    if (*end == '\0')
      break;
    p = end + 1;
  }
  return n;
}
