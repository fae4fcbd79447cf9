/* fuzz_endpoint.c - the string parsers of util/: lu_endpoint_parse() (every
 * --rdzv-endpoint, MASTER_ADDR:MASTER_PORT, LAUNCH_RDZV_ENDPOINT),
 * lu_parse_duration_ms() (timeouts), lu_parse_i64() and lu_parse_int().
 * The input is one string; each parser gets it.
 *
 * Invariants checked:
 * - results are in range: a port in 0..65535 (or the default when absent),
 *   host and path non-empty and NUL-terminated in their arrays, a unix path
 *   exactly what followed "unix:", a duration >= 0;
 * - a parsed endpoint formats (lu_endpoint_format) to a string that parses
 *   back to the same endpoint;
 * - lu_parse_i64 accepts exactly [+-]?[0-9]+ within int64_t, with the value
 *   a reference computation gives, and lu_parse_int agrees with it. */
#include <limits.h>

#include "fuzz.h"
#include "lu.h"

static void check_endpoint(const char *s, int default_port) {
  lu_endpoint_t ep, ep2;
  char buf[512];
  int rc = lu_endpoint_parse(s, default_port, &ep);
  FUZZ_CHECK(rc == 0 || rc == RDZV_EADDR);
  if (rc != 0)
    return;
  FUZZ_CHECK(memchr(ep.host, '\0', sizeof(ep.host)) != NULL);
  FUZZ_CHECK(memchr(ep.path, '\0', sizeof(ep.path)) != NULL);
  if (ep.is_unix) {
    FUZZ_CHECK(strncmp(s, "unix:", 5) == 0);
    FUZZ_CHECK(ep.path[0] != '\0' && strcmp(ep.path, s + 5) == 0);
  } else {
    FUZZ_CHECK(ep.host[0] != '\0');
    FUZZ_CHECK(ep.port == default_port ||
               (ep.port >= 0 && ep.port <= 65535));
  }
  lu_endpoint_format(&ep, buf, sizeof(buf));
  /* The format of an absent port (-1) is not an endpoint; skip those. A
   * host named "unix" formats as "unix:PORT", which is a unix socket path:
   * the syntax cannot tell them apart, a known limit. */
  if (!ep.is_unix && (ep.port < 0 || strcmp(ep.host, "unix") == 0))
    return;
  rc = lu_endpoint_parse(buf, -1, &ep2);
  FUZZ_CHECK(rc == 0);
  FUZZ_CHECK(ep2.is_unix == ep.is_unix && ep2.port == ep.port);
  FUZZ_CHECK(strcmp(ep2.host, ep.host) == 0 && strcmp(ep2.path, ep.path) == 0);
}

/* The reference for lu_parse_i64: RET 1 and *v when s[0..n) is a decimal
 * int64_t with an optional sign. */
static int ref_i64(const char *s, size_t n, int64_t *v) {
  size_t i = 0;
  int neg = 0;
  __int128 acc = 0;
  if (n > 0 && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    i = 1;
  }
  if (i == n)
    return 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return 0;
    acc = acc * 10 + (s[i] - '0');
    if (acc > (__int128)INT64_MAX + 1)
      return 0;
  }
  if (neg)
    acc = -acc;
  if (acc > INT64_MAX || acc < INT64_MIN)
    return 0;
  *v = (int64_t)acc;
  return 1;
}

static void check_numbers(const char *s, size_t n) {
  int64_t v = 0, want = 0;
  int64_t ms = -1;
  int iv = 0;
  int ok = ref_i64(s, n, &want);
  int rc = lu_parse_i64(s, n, &v);
  FUZZ_CHECK(rc == 0 || rc == RDZV_EINVAL);
  FUZZ_CHECK((rc == 0) == ok);
  if (ok)
    FUZZ_CHECK(v == want);
  /* lu_parse_int reads up to the NUL, like the option parsers. */
  ok = ref_i64(s, strlen(s), &want) && want >= -5 && want <= 65535;
  rc = lu_parse_int(s, -5, 65535, &iv);
  FUZZ_CHECK((rc == 0) == ok);
  if (ok)
    FUZZ_CHECK(iv == want);
  rc = lu_parse_duration_ms(s, &ms);
  FUZZ_CHECK(rc == 0 || rc == RDZV_EINVAL);
  if (rc == 0)
    FUZZ_CHECK(ms >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A C string: the bytes up to the first NUL, then a NUL. */
  char *s = malloc(size + 1);
  FUZZ_CHECK(s != NULL);
  if (size)
    memcpy(s, data, size);
  s[size] = '\0';
  check_endpoint(s, 29400);
  check_endpoint(s, -1);
  check_numbers(s, size);
  free(s);
  return 0;
}
